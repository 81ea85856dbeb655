//! `toyvm run --jit-elf`: compiled code runs from ELF files toyvm wrote, so
//! tools that know nothing of toyvm (no perf map, no jitdump, no `perf
//! inject`) see it as native code:
//!
//! * `perf record -g` and `perf report`: the hot Toy function named from
//!   its file, and its samples' stacks whole to `main`; `--sort srcline`
//!   names the hot loop's Toy source line from the file's `.debug_line`;
//! * `eu-stack -p PID` on a running toyvm: JIT frames named, down to `main`;
//! * bpftrace's `ustack`: JIT frames named, with no perf map;
//! * what the OpenTelemetry eBPF profiler relies on (it cannot be built
//!   here; its conditions, from its sources: an executable mapping of a
//!   real file, not memfd, identified by device and inode; unwound from the
//!   file's `.eh_frame`; symbolized by build-id; a file once read must not
//!   change): every executable file mapping toyvm made is a valid ELF whose
//!   `.eh_frame_hdr` finds an FDE for every byte of every function in it,
//!   with a build-id unique among them, one per file written, and every
//!   file is byte for byte the same at exit as when it was first seen.
//!
//! perf, eu-stack and bpftrace are skipped loudly on a machine without them, and
//! fail the test under `CI=true`.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use common::PerfWork;
use gimli::UnwindSection;
use object::read::elf::{ElfFile64, ProgramHeader};
use object::{Endianness, Object, ObjectSection, ObjectSymbol};

const TEST: &str = "jit_elf";

/// `tests/gdb/hot.toy` under `--jit-elf`, started and warm: it has printed
/// its line, so `spin` is compiled and running its endless OSR loop.
struct Hot {
    child: Child,
    dir: PathBuf,
}

impl Hot {
    fn start(dir: &Path) -> Hot {
        let mut child = Command::new(env!("CARGO_BIN_EXE_toyvm"))
            .args(["run", "--jit-elf", "--perf-dir"])
            .arg(dir)
            .args(["tests/gdb/hot.toy", "1000000000000"])
            .current_dir(common::repo_root())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start toyvm");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("read the ready line");
        assert!(line.starts_with("ready"), "{line:?}");
        let dir = dir.join(format!("toyvm-{}", child.id()));
        Hot { child, dir }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Hot {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The executable mappings of `pid` whose file lies in `dir`: (start, end,
/// file offset, path).
fn code_mappings(pid: u32, dir: &Path) -> Vec<(u64, u64, u64, PathBuf)> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("maps");
    let mut found = Vec::new();
    for line in maps.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 6 || !fields[1].contains('x') {
            continue;
        }
        let path = PathBuf::from(fields[5..].join(" "));
        assert!(!fields[5].starts_with("/memfd:"), "{line}");
        if !path.starts_with(dir) {
            continue;
        }
        let (start, end) = fields[0].split_once('-').expect("range");
        let hex = |s: &str| u64::from_str_radix(s, 16).expect("hex");
        found.push((hex(start), hex(end), hex(fields[2]), path));
    }
    found
}

fn sha1_of(path: &Path) -> Vec<u8> {
    use sha1::{Digest, Sha1};
    Sha1::digest(std::fs::read(path).expect("read code file")).to_vec()
}

#[test]
fn every_code_mapping_is_an_elf_file_a_fleet_profiler_can_use() {
    let work = tempfile::tempdir().expect("temp dir");
    let hot = Hot::start(work.path());
    // Files made ahead for the next batches (zeros only, never mapped:
    // perfsupport's `elf_code::ahead`) are not code yet; at most 16 are
    // kept. A batch the compiler thread is publishing as we look has its
    // file written and not yet mapped: look again, a few times.
    let listing = || -> (BTreeSet<PathBuf>, BTreeSet<PathBuf>) {
        std::fs::read_dir(&hot.dir)
            .expect("the run's directory")
            .map(|e| e.expect("entry").path())
            .partition(|f| (std::fs::read(f).expect("a file").iter()).all(|&b| b == 0))
    };
    let (mut mappings, (mut prepared, mut files)) = (Vec::new(), Default::default());
    for _ in 0..20 {
        (prepared, files) = listing();
        mappings = code_mappings(hot.pid(), &hot.dir);
        if mappings.iter().map(|m| &m.3).collect::<BTreeSet<_>>() == files.iter().collect() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(prepared.len() <= 16, "{prepared:?}");
    assert!(
        !mappings.is_empty(),
        "no executable mapping of a file in {}",
        hot.dir.display()
    );
    // One mapping per file written (nothing evicted yet): every batch.
    let mapped: BTreeSet<PathBuf> = mappings.iter().map(|m| m.3.clone()).collect();
    assert_eq!(mapped, files, "every file written is mapped, once");
    assert_eq!(mappings.len(), files.len());
    let first_seen: BTreeMap<PathBuf, Vec<u8>> =
        files.iter().map(|f| (f.clone(), sha1_of(f))).collect();
    let mut build_ids = BTreeSet::new();
    let mut functions = 0;
    for (start, end, offset, path) in &mappings {
        let bytes = std::fs::read(path).expect("code file");
        let elf = ElfFile64::<Endianness>::parse(&*bytes).expect("a valid ELF");
        // The mapping's file offset is the ELF address of its first byte.
        let load = (elf.elf_program_headers().iter())
            .find(|p| {
                p.p_type(Endianness::Little) == object::elf::PT_LOAD
                    && (p.p_flags(Endianness::Little) & object::elf::PF_X) == object::elf::PF_X
            })
            .expect("an executable PT_LOAD");
        assert_eq!(load.p_offset(Endianness::Little), *offset);
        assert_eq!(load.p_vaddr(Endianness::Little), *offset);
        assert_eq!(load.p_filesz(Endianness::Little), end - start);
        let id = elf
            .build_id()
            .expect("notes")
            .expect("a GNU build-id")
            .to_vec();
        assert!(
            build_ids.insert(id),
            "{}: a build-id seen before",
            path.display()
        );
        // Every byte of every function has its FDE through .eh_frame_hdr.
        let section = |name: &str| {
            let s = elf
                .section_by_name(name)
                .unwrap_or_else(|| panic!("{name}"));
            (s.address(), s.data().expect("data").to_vec())
        };
        let (hdr_at, hdr) = section(".eh_frame_hdr");
        let (eh_at, eh) = section(".eh_frame");
        let bases = gimli::BaseAddresses::default()
            .set_eh_frame_hdr(hdr_at)
            .set_eh_frame(eh_at);
        let hdr = gimli::EhFrameHdr::new(&hdr, gimli::LittleEndian)
            .parse(&bases, 8)
            .expect("hdr");
        let table = hdr.table().expect("a search table");
        let eh_frame = gimli::EhFrame::new(&eh, gimli::LittleEndian);
        for symbol in elf.symbols() {
            let name = symbol.name().expect("name");
            assert!(name.starts_with("toy:"), "{name}");
            for pc in symbol.address()..symbol.address() + symbol.size() {
                let fde = table
                    .fde_for_address(&eh_frame, &bases, pc, gimli::EhFrame::cie_from_offset)
                    .unwrap_or_else(|e| panic!("{name}: no FDE for {pc:#x}: {e}"));
                assert!(fde.contains(pc));
            }
            functions += 1;
        }
    }
    assert!(functions >= 5, "trampolines and compiled code: {functions}");
    drop(hot);
    for (path, hash) in &first_seen {
        assert_eq!(
            &sha1_of(path),
            hash,
            "{} changed after it was read",
            path.display()
        );
    }
    eprintln!(
        "jit_elf: {} files, {} mappings, {functions} functions checked",
        files.len(),
        mappings.len()
    );
}

#[test]
fn eu_stack_names_jit_frames_down_to_main() {
    if !common::tool_or_skip(TEST, "eu-stack", &["--version"]) {
        return;
    }
    let work = tempfile::tempdir().expect("temp dir");
    let hot = Hot::start(work.path());
    // `spin`'s second call enters its OSR code within a few hundred
    // iterations of its loop: ask until the stack shows it.
    let mut main_thread = String::new();
    for _ in 0..50 {
        let out = Command::new("eu-stack")
            .args(["-p", &hot.pid().to_string()])
            .output()
            .expect("eu-stack");
        let text = String::from_utf8_lossy(&out.stdout);
        main_thread = text.split("TID ").nth(1).expect("a thread").to_owned();
        if main_thread.contains("toy:jit-osr:spin:") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    for want in [
        "toy:jit-osr:spin:tests/gdb/hot.toy:5",
        "toy:interp:middle:tests/gdb/hot.toy:13",
        "toy:interp:outer:tests/gdb/hot.toy:17",
        "toy:interp:<main>:tests/gdb/hot.toy:1",
        " main",
    ] {
        assert!(main_thread.contains(want), "{want} in:\n{main_thread}");
    }
}

#[test]
fn perf_names_compiled_code_from_its_files_without_a_perf_map() {
    if !common::tool_or_skip(TEST, "perf", common::PERF_RECORD_PROBE) {
        return;
    }
    // Frame pointers, then DWARF unwinding from the files' .eh_frame.
    let work = perf_sees_whole_stacks("fp", &["-g"]);
    // The files' .debug_line: perf names the Toy source line of the hot
    // loop (profile_demo.toy's inner_hot spends its time in lines 14-17).
    let report = work.perf(
        &[
            "report",
            "-i",
            "fp.data",
            "--stdio",
            "--no-children",
            "--sort",
            "srcline",
        ],
        &[],
    );
    let text = String::from_utf8_lossy(&report.stdout);
    let top = (text.lines())
        .find(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
        .unwrap_or("");
    assert!(
        ["14", "15", "16", "17"]
            .iter()
            .any(|n| top.ends_with(&format!("profile_demo.toy:{n}"))),
        "the hottest source line is in inner_hot's loop: {top:?}\n{text}"
    );
    perf_sees_whole_stacks("dwarf", &["--call-graph", "dwarf"]);
}

/// Records profile_demo.toy under `--jit-elf` with the call graph option
/// `call_graph`: most samples in compiled `inner_hot`, 90% of them with the
/// chain down to `main`, and no perf map.
fn perf_sees_whole_stacks(tag: &str, call_graph: &[&str]) -> PerfWork {
    let work = PerfWork::new(&format!("jit-elf-{tag}"));
    let began = common::file_clock(&work.path("."));
    let mut args = vec!["record", "-q"];
    args.extend_from_slice(call_graph);
    let out = work.perf(
        &[
            &args[..],
            &[
                "-e",
                "cpu-clock",
                "-F",
                "999",
                "-o",
                "fp.data",
                "--",
                env!("CARGO_BIN_EXE_toyvm"),
                "run",
                "--jit-elf",
                "--perf-dir",
                ".",
                &common::repo_root()
                    .join("examples/scripts/profile_demo.toy")
                    .to_string_lossy(),
                "300",
                "100000",
            ],
        ]
        .concat(),
        &[],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(work.path("fp.data").exists());
    let script = work.perf(
        &["script", "-i", "fp.data", "--no-inline", "-F", "pid,ip,sym"],
        &[],
    );
    let text = String::from_utf8_lossy(&script.stdout);
    // No perf map: the names come from the files.
    let pid = text.split_whitespace().next().expect("a sample").to_owned();
    common::assert_no_perf_map_since(&pid, began);
    // Each sample: its pid, then one `ADDRESS SYMBOL` line per frame.
    let samples: Vec<Vec<&str>> = text
        .split("\n\n")
        .map(|s| {
            (s.lines().skip(1))
                .filter_map(|l| l.trim().split_once(' ').map(|(_, sym)| sym))
                .collect()
        })
        .filter(|s: &Vec<&str>| !s.is_empty())
        .collect();
    let hot: Vec<&Vec<&str>> = samples
        .iter()
        .filter(|s| s[0].starts_with("toy:jit") && s[0].contains(":inner_hot:"))
        .collect();
    assert!(
        hot.len() * 2 > samples.len(),
        "inner_hot has most samples: {} of {}",
        hot.len(),
        samples.len()
    );
    let whole = hot
        .iter()
        .filter(|s| {
            let has = |f: &str| s.iter().any(|frame| frame.contains(f));
            has(":middle:")
                && has("toy:interp:outer:")
                && has("toy:interp:<main>:")
                && s.contains(&"main")
        })
        .count();
    eprintln!(
        "jit_elf: {tag}: {whole} of {} inner_hot samples have the whole chain",
        hot.len()
    );
    assert!(
        whole * 10 >= hot.len() * 9,
        "{whole} of {} whole",
        hot.len()
    );
    work
}

#[test]
fn a_directory_code_cannot_run_from_gives_one_warning_and_the_run_goes_on() {
    let missing = "/nonexistent-toyvm-dir/code";
    let run = common::toyvm(&[
        "run",
        "--jit-elf",
        "--perf-dir",
        missing,
        "--jit-threshold",
        "0",
        "examples/scripts/profile_demo.toy",
        "10",
        "1000",
    ]);
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    assert_eq!(run.stdout.trim(), "3739998");
    let warnings: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(warnings.len(), 1, "{}", run.stderr);
    assert!(
        warnings[0].contains(missing) && warnings[0].contains("--perf-dir"),
        "{}",
        warnings[0]
    );
}

#[test]
fn with_no_jit_perf_names_interpreted_functions_by_their_trampolines() {
    if !common::tool_or_skip(TEST, "perf", common::PERF_RECORD_PROBE) {
        return;
    }
    let work = PerfWork::new("jit-elf-nojit");
    let script = common::repo_root().join("examples/scripts/profile_demo.toy");
    let out = work
        .command("perf")
        .args([
            "record",
            "-q",
            "-g",
            "-e",
            "cpu-clock",
            "-o",
            "n.data",
            "--",
        ])
        .arg(env!("CARGO_BIN_EXE_toyvm"))
        .args(["run", "--no-jit", "--jit-elf", "--perf-dir", "."])
        .arg(&script)
        .args(["30", "100000"])
        .output()
        .expect("perf record");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = work.perf(
        &[
            "report",
            "-i",
            "n.data",
            "-q",
            "--children",
            "--sort",
            "sym",
            "-g",
            "none",
        ],
        &[],
    );
    let text = String::from_utf8_lossy(&report.stdout);
    for name in ["inner_hot", "middle", "outer", "<main>"] {
        let row = text
            .lines()
            .find(|l| l.contains(&format!("toy:interp:{name}:")))
            .unwrap_or_else(|| panic!("toy:interp:{name} in:\n{text}"));
        let share: f64 = row
            .split('%')
            .next()
            .expect("share")
            .trim()
            .parse()
            .expect("a share");
        assert!(share > 50.0, "{row}");
    }
}

#[test]
fn bpftrace_ustack_names_jit_frames_without_a_perf_map() {
    if !common::tool_or_skip(TEST, "bpftrace", &["--version"]) {
        return;
    }
    let work = tempfile::tempdir().expect("temp dir");
    let began = common::file_clock(work.path());
    let hot = Hot::start(work.path());
    // Let spin's second call reach its OSR code before sampling.
    std::thread::sleep(std::time::Duration::from_millis(500));
    let program = format!(
        "profile:hz:199 /pid == {}/ {{ @[ustack(8)] = count(); }} interval:s:1 {{ exit(); }}",
        hot.pid()
    );
    let out = Command::new("timeout")
        .args(["60", "bpftrace", "-e", &program])
        .output()
        .expect("bpftrace");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for want in [
        "toy:jit-osr:spin:tests/gdb/hot.toy:5+",
        "toy:interp:middle:tests/gdb/hot.toy:13+",
    ] {
        assert!(text.contains(want), "{want} in:\n{text}");
    }
    common::assert_no_perf_map_since(hot.pid(), began);
}

/// Requests that queue while the compiler thread works become one batch,
/// one file: 200 functions hot one after another, compiled by a slowed
/// compiler thread (`TOYVM_JIT_DELAY_US`), give far fewer files than
/// compiles, and the program prints what the interpreter prints.
#[test]
fn queued_compiles_share_a_batch_and_a_file() {
    let work = PerfWork::new("jit-elf-group");
    let mut program = String::new();
    for k in 0..200 {
        program.push_str(&format!(
            "fn w{k}(a: int) -> int {{ let s = 0; for i in 0..3000 {{ s = (s + i * a + {k}) % 1000003; }} return s; }}\n"
        ));
    }
    program.push_str("let t = 0;\n");
    for k in 0..200 {
        program.push_str(&format!("t = (t + w{k}(2)) % 1000003;\n"));
    }
    program.push_str("print(t);\n");
    std::fs::write(work.path("many.toy"), program).expect("the program");
    let dir = work.dir.to_string_lossy().into_owned();
    let interpreted = common::toyvm_in(&work.dir, &["run", "--no-jit", "many.toy"], &[]);
    let run = common::toyvm_in(
        &work.dir,
        &[
            "run",
            "--jit-threshold",
            "2",
            "--jit-background",
            "--jit-stats",
            "--jit-elf",
            "--perf-dir",
            &dir,
            "many.toy",
        ],
        &[("TOYVM_JIT_DELAY_US", "3000")],
    );
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    assert_eq!(run.stdout, interpreted.stdout);
    let compiles = (run.stderr.lines())
        .filter(|l| l.starts_with("jit-stats: w"))
        .count();
    let files = std::fs::read_dir(work.path(format!("toyvm-{}", run.pid)))
        .expect("the files")
        .count();
    eprintln!("jit_elf: {compiles} compiles of the 200 functions in {files} files");
    assert!(compiles >= 40, "{compiles} compiles:\n{}", run.stderr);
    assert!(
        files * 3 <= compiles,
        "{files} files for {compiles} compiles: queued requests were not grouped"
    );
}
