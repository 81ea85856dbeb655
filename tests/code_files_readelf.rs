//! The `--jit-elf` code files as binutils' `readelf` reads them, for the
//! architecture toyvm runs on: on x86_64 natively and, in
//! `tools/aarch64-tests`, on aarch64 under qemu (the host's `readelf`
//! reads either). Each file must say its machine (`AArch64`, EM 183, or
//! `X86-64`), be a shared object whose first `LOAD` is readable and
//! executable, with `.text`, `.eh_frame_hdr` (`GNU_EH_FRAME`), `.eh_frame`,
//! `.symtab` of toy names and a GNU build-id; and its call-frame
//! information must be the architecture's: on aarch64 a CIE with code
//! alignment 4, data alignment -8, return address column 30 (`x30`) and
//! CFA = `sp` + 0 at entry; on x86_64 code alignment 1, return address
//! column 16 (`rip`), CFA = `rsp` + 8. readelf must print no warning.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

/// What readelf shows for the architecture the tests run on.
struct Expected {
    /// `Machine:` in the ELF header.
    machine: &'static str,
    /// The CIE in `--debug-dump=frames-interp`: factors and return column.
    cie: &'static str,
    /// The first row of every FDE: the CFA at a function's entry.
    entry_cfa: &'static str,
}

#[cfg(target_arch = "x86_64")]
const EXPECTED: Expected = Expected {
    machine: "Advanced Micro Devices X86-64",
    cie: "cf=1 df=-8 ra=16",
    entry_cfa: "rsp+8",
};
#[cfg(target_arch = "aarch64")]
const EXPECTED: Expected = Expected {
    machine: "AArch64",
    cie: "cf=4 df=-8 ra=30",
    entry_cfa: "sp+0",
};

/// `readelf ARGS FILE`: its stdout; fails on a warning or an error.
fn readelf(args: &[&str], file: &Path) -> String {
    let output = Command::new("readelf")
        .args(args)
        .arg(file)
        .output()
        .expect("run readelf");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stderr.trim().is_empty(),
        "readelf {args:?} {}: {stderr}",
        file.display()
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The code files of a `--jit-elf` run of `script` with `flags`.
fn code_files(dir: &Path, flags: &[&str], script: &str) -> Vec<PathBuf> {
    let perf_dir = dir.to_str().expect("UTF-8 temp dir");
    let mut args = vec!["run", "--jit-elf", "--perf-dir", perf_dir];
    args.extend(flags);
    args.push(script);
    let run = common::toyvm(&args);
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    let mut files = Vec::new();
    for process in std::fs::read_dir(dir).expect("the perf dir") {
        for file in std::fs::read_dir(process.expect("entry").path()).expect("the run's dir") {
            files.push(file.expect("entry").path());
        }
    }
    files.sort();
    files
}

/// Checks one file; the number of FDEs in it.
fn check(file: &Path) -> usize {
    let name = file.display();
    let header = readelf(&["-h", "-l", "-S", "-n", "-W"], file);
    let has = |text: &str| header.contains(text);
    assert!(
        has(&format!(
            "Machine:                           {}",
            EXPECTED.machine
        )),
        "{name}: machine:\n{header}"
    );
    assert!(has("DYN (Shared object file)"), "{name}: type:\n{header}");
    let load = (header.lines())
        .find(|l| l.trim_start().starts_with("LOAD"))
        .unwrap_or_else(|| panic!("{name}: no LOAD:\n{header}"));
    assert!(
        load.contains(" R E "),
        "{name}: first LOAD is not R E: {load}"
    );
    assert!(has("GNU_EH_FRAME"), "{name}: no GNU_EH_FRAME:\n{header}");
    for section in [".text", ".eh_frame_hdr", ".eh_frame", ".symtab"] {
        assert!(
            has(&format!(" {section} ")),
            "{name}: no {section}:\n{header}"
        );
    }
    assert!(
        has("NT_GNU_BUILD_ID") && has("Build ID: "),
        "{name}: no build-id:\n{header}"
    );
    let symbols = readelf(&["-s", "-W"], file);
    let functions: Vec<&str> = (symbols.lines()).filter(|l| l.contains(" FUNC ")).collect();
    assert!(!functions.is_empty(), "{name}: no functions:\n{symbols}");
    for line in &functions {
        assert!(line.contains(" toy:"), "{name}: not a toy name: {line}");
    }
    let frames = readelf(&["--debug-dump=frames-interp"], file);
    let cies = frames.lines().filter(|l| l.contains(" CIE ")).count();
    let good_cies = (frames.lines())
        .filter(|l| l.contains(" CIE ") && l.contains(EXPECTED.cie))
        .count();
    assert!(cies > 0 && good_cies == cies, "{name}: CIEs:\n{frames}");
    // Each FDE's table starts with a header line (LOC CFA ...) and then
    // the entry row.
    let lines: Vec<&str> = frames.lines().collect();
    let mut fdes = 0;
    for (i, line) in lines.iter().enumerate() {
        if line.contains(" FDE ") {
            fdes += 1;
            let entry = lines.get(i + 2).copied().unwrap_or_default();
            let cfa = entry.split_whitespace().nth(1).unwrap_or_default();
            assert_eq!(cfa, EXPECTED.entry_cfa, "{name}: {line}\n{entry}");
        }
    }
    assert_eq!(fdes, functions.len(), "{name}: one FDE per function");
    fdes
}

#[test]
fn readelf_reads_every_code_file_as_this_architectures_elf() {
    if !common::tool_or_skip("code_files_readelf", "readelf", &["--version"]) {
        return;
    }
    let dir = tempfile::Builder::new()
        .prefix("toyvm-readelf-")
        .tempdir()
        .expect("temp dir");
    // Everything compiled (functions, entry shims), and tiered with OSR
    // variants; trampolines in both.
    let mut files = code_files(dir.path(), &["--jit-threshold", "0"], "tests/gdb/stepi.toy");
    files.extend(code_files(
        dir.path(),
        &["--jit-threshold", "5"],
        "tests/gdb/stepi.toy",
    ));
    files.sort();
    files.dedup();
    assert!(files.len() >= 4, "{files:?}");
    let fdes: usize = files.iter().map(|f| check(f)).sum();
    eprintln!(
        "code_files_readelf ({}): {} files, {fdes} FDEs, all {}",
        std::env::consts::ARCH,
        files.len(),
        EXPECTED.cie
    );
}
