//! `toyvm report`: the terminal report, collapsed stacks, flame graphs, of
//! profiles from toyvm and from other VMs (CPython's PyPI `vmprof`
//! included: skipped loudly without python3 and PyPI, a failure under
//! `CI=true`), and clean rejection of files that are not vmprof profiles.

mod common;
#[path = "../perfsupport/tests/vmprof_support/venv.rs"]
mod venv;

use perfsupport::vmprof::format;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use common::{ToyRun, toyvm};

fn temp_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("report_cli");
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// A profile of nested.toy, recorded once for all tests, by the
/// interpreter: with the JIT on, a sample can land on the compiler thread
/// (`<main>` -> `<jit compiler>`, tested in `vmprof_run`) and these tests
/// check the report's shape against one exact call chain.
fn nested_profile() -> &'static Path {
    static PROFILE: OnceLock<PathBuf> = OnceLock::new();
    PROFILE.get_or_init(|| {
        let path = temp_dir().join("nested.prof");
        let _ = std::fs::remove_file(&path);
        let run = toyvm(&[
            "run",
            "--no-jit",
            "--vmprof",
            path.to_str().expect("utf-8"),
            "tests/vmprof/nested.toy",
            "300",
        ]);
        assert_eq!(run.status, Some(0), "{}", run.stderr);
        path
    })
}

fn report(args: &[&str], file: &Path) -> ToyRun {
    let mut argv = vec!["report"];
    argv.extend_from_slice(args);
    argv.push(file.to_str().expect("utf-8"));
    toyvm(&argv)
}

/// A clean rejection: status 1, one `error: FILE: ...` line, no panic.
fn assert_rejected(file: &Path, needle: &str) {
    let run = report(&[], file);
    assert_eq!(run.status, Some(1), "{}: {}", file.display(), run.stderr);
    assert_eq!(run.stdout, "");
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    assert!(
        run.stderr.starts_with("error: ") && run.stderr.contains(needle),
        "expected {needle:?}: {}",
        run.stderr
    );
}

#[test]
fn the_report_has_an_aligned_call_tree_and_flat_profile() {
    let run = report(&[], nested_profile());
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    let out = &run.stdout;
    assert!(
        out.starts_with("toyvm profile of tests/vmprof/nested.toy: "),
        "{out}"
    );
    let tree_start = out.find("Call tree").expect("a call tree");
    let flat_start = out.find("Flat profile").expect("a flat profile");
    let tree: Vec<&str> = out[tree_start..flat_start]
        .lines()
        .skip(2)
        .filter(|l| l.contains('%'))
        .collect();
    let names: Vec<&str> = tree
        .iter()
        .map(|l| l.split_whitespace().nth(2).expect("name"))
        .collect();
    assert_eq!(names, ["<main>", "outer", "middle", "inner_hot"], "{out}");
    // Each level is indented two more spaces; the location column lines up.
    let name_column = |l: &str| {
        l.find(|c: char| c == '<' || c.is_ascii_alphabetic())
            .expect("name")
    };
    let columns: Vec<usize> = tree.iter().map(|l| name_column(l)).collect();
    assert!(columns.windows(2).all(|w| w[1] == w[0] + 2), "{out}");
    let locations: Vec<usize> = tree
        .iter()
        .map(|l| l.find("nested.toy:").expect("location"))
        .collect();
    assert!(locations.windows(2).all(|w| w[0] == w[1]), "{out}");
    assert!(tree[0].trim_start().starts_with("100.0%"), "{out}");
    // The flat profile is sorted by total: <main> (100%) first.
    let flat: Vec<&str> = out[flat_start..].lines().skip(2).collect();
    assert!(flat[0].contains("<main>"), "{out}");
    assert_eq!(flat.len(), 4, "{out}");
}

#[test]
fn folded_stacks_add_up_to_the_samples() {
    let run = report(&["--folded"], nested_profile());
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    let profile = perfsupport::vmprof::read_profile(nested_profile()).expect("readable");
    let mut total = 0;
    for line in run.stdout.lines() {
        let (stack, count) = line.rsplit_once(' ').expect("STACK COUNT");
        assert!(stack.starts_with("<main>"), "{line}");
        assert!(
            "<main>;outer;middle;inner_hot".starts_with(stack),
            "not the call chain: {line}"
        );
        total += count.parse::<usize>().expect("a count");
    }
    assert_eq!(total, profile.samples.len());
    assert!(
        run.stdout.contains("<main>;outer;middle;inner_hot "),
        "{}",
        run.stdout
    );
}

#[test]
fn flamegraph_writes_an_svg() {
    let svg = temp_dir().join("nested.svg");
    let _ = std::fs::remove_file(&svg);
    let run = report(
        &["--flamegraph", svg.to_str().expect("utf-8")],
        nested_profile(),
    );
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    assert!(
        run.stdout.contains("Call tree"),
        "the report is printed too"
    );
    let text = std::fs::read_to_string(&svg).expect("the SVG");
    assert!(text.starts_with("<?xml") && text.contains("<svg"), "an SVG");
    for name in ["inner_hot", "middle", "outer", "main"] {
        assert!(text.contains(name), "the flame graph lacks {name}");
    }
    let bad = temp_dir().join("no-such-dir").join("x.svg");
    let run = report(
        &["--flamegraph", bad.to_str().expect("utf-8")],
        nested_profile(),
    );
    assert_eq!(run.status, Some(1));
    assert!(run.stderr.contains("cannot create"), "{}", run.stderr);
}

#[test]
fn an_empty_profile_reports_no_samples() {
    let path = temp_dir().join("hello.prof");
    let _ = std::fs::remove_file(&path);
    let run = toyvm(&[
        "run",
        "--vmprof",
        path.to_str().expect("utf-8"),
        "examples/scripts/hello.toy",
    ]);
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    let profile = perfsupport::vmprof::read_profile(&path).expect("readable");
    if !profile.samples.is_empty() {
        return; // a very slow machine: hello.toy took a millisecond of CPU
    }
    let shown = report(&[], &path);
    assert_eq!(shown.status, Some(0), "{}", shown.stderr);
    assert!(shown.stdout.contains("No samples"), "{}", shown.stdout);
    let svg = temp_dir().join("empty.svg");
    let drawn = report(&["--flamegraph", svg.to_str().expect("utf-8")], &path);
    assert_eq!(drawn.status, Some(1));
    assert!(drawn.stderr.contains("no samples"), "{}", drawn.stderr);
}

#[test]
fn foreign_and_damaged_files_are_rejected_cleanly() {
    let bytes = std::fs::read(nested_profile()).expect("profile bytes");
    let dir = temp_dir();
    let write = |name: &str, data: &[u8]| {
        let path = dir.join(name);
        std::fs::write(&path, data).expect("write");
        path
    };
    assert_rejected(&dir.join("missing.prof"), "cannot read the profile");
    assert_rejected(
        &write("empty.prof", b""),
        "shorter than the 40-byte static header",
    );
    assert_rejected(&write("script.prof", b"print(1);\n"), "wrong magic");
    // Cut inside a record, and cut at a record boundary (no trailer):
    // the samples before the cut, with a warning.
    for (name, len) in [
        ("cut.prof", bytes.len() / 2 + 3),
        ("no-trailer.prof", bytes.len() - 25),
    ] {
        let run = report(&[], &write(name, &bytes[..len]));
        assert_eq!(run.status, Some(0), "{name}: {}", run.stderr);
        assert!(
            run.stderr.starts_with("toyvm: warning: ") && run.stderr.contains("no trailer"),
            "{name}: {}",
            run.stderr
        );
        assert!(run.stdout.contains("inner_hot"), "{name}: {}", run.stdout);
    }
    // Cut inside the HEADER: nothing to salvage.
    assert_rejected(&write("cut-header.prof", &bytes[..45]), "truncated");
    // The version is the big-endian 16-bit word after the HEADER marker.
    let mut newer = bytes.clone();
    assert_eq!(
        newer[40], 0x05,
        "the HEADER record follows the static header"
    );
    newer[41..43].copy_from_slice(&9i16.to_be_bytes());
    assert_rejected(&write("v9.prof", &newer), "unknown vmprof format version 9");
    // Every truncation of a real profile: an error or a report, never a panic.
    for len in (0..bytes.len()).step_by(97) {
        let run = report(&[], &write("prefix.prof", &bytes[..len]));
        assert!(matches!(run.status, Some(0 | 1)), "{len}: {}", run.stderr);
        assert!(!run.stderr.contains("panicked"), "{len}: {}", run.stderr);
    }
}

/// A profile of another VM, as its own writer would produce it: another
/// interpreter name, another code class, a name that is not
/// `class:function:line:file`, and an id the file never names. Encoded here
/// from the format's public record layout (perfsupport keeps its own
/// encoder private), so the reader is also checked against a second writer.
fn foreign_profile() -> PathBuf {
    let mut enc = ForeignWriter::default();
    enc.header(1000, "minijit");
    enc.start_time(1);
    enc.meta("script", "demo.py");
    enc.code_name(2, "py:<module>:1:demo.py");
    enc.code_name(4, "py:hot:12:C:/src/demo.py");
    enc.code_name(6, "native_helper");
    for _ in 0..3 {
        enc.sample(&[2, 4], 7);
    }
    enc.sample(&[2, 4, 6], 7);
    enc.sample(&[2, 0x1230], 7);
    enc.trailer(2);
    let path = temp_dir().join("minijit.prof");
    std::fs::write(&path, &enc.0).expect("write");
    path
}

/// A minimal vmprof writer (version 6, plain CPU samples), record by record
/// as `perfsupport::vmprof::format` documents them.
#[derive(Default)]
struct ForeignWriter(Vec<u8>);

impl ForeignWriter {
    fn word(&mut self, value: i64) {
        self.0.extend_from_slice(&value.to_le_bytes());
    }
    fn string(&mut self, text: &str) {
        self.word(text.len() as i64);
        self.0.extend_from_slice(text.as_bytes());
    }
    fn time(&mut self, marker: u8, sec: i64) {
        self.0.push(marker);
        self.word(sec);
        self.word(0);
        self.0.extend_from_slice(&[0; 8]);
    }
    fn header(&mut self, period_us: i64, interp: &str) {
        for word in [0, 3, 0, period_us, 0] {
            self.word(word);
        }
        self.0.push(format::MARKER_HEADER);
        self.0
            .extend_from_slice(&format::VERSION_TIMESTAMP.to_be_bytes());
        self.0.push(0);
        self.0.push(interp.len() as u8);
        self.0.extend_from_slice(interp.as_bytes());
    }
    fn start_time(&mut self, sec: i64) {
        self.time(format::MARKER_TIME_N_ZONE, sec);
    }
    fn meta(&mut self, key: &str, value: &str) {
        self.0.push(format::MARKER_META);
        self.string(key);
        self.string(value);
    }
    fn code_name(&mut self, id: i64, name: &str) {
        self.0.push(format::MARKER_VIRTUAL_IP);
        self.word(id);
        self.string(name);
    }
    /// `stack` root first; the record lists it innermost first.
    fn sample(&mut self, stack: &[i64], thread: i64) {
        self.0.push(format::MARKER_STACKTRACE);
        self.word(1);
        self.word(stack.len() as i64);
        for &id in stack.iter().rev() {
            self.word(id);
        }
        self.word(thread);
    }
    fn trailer(&mut self, sec: i64) {
        self.time(format::MARKER_TRAILER, sec);
    }
}

#[test]
fn profiles_from_other_vms_are_shown_in_every_form() {
    let path = foreign_profile();
    let tree = report(&[], &path);
    assert_eq!(tree.status, Some(0), "{}", tree.stderr);
    assert!(tree.stderr.is_empty(), "{}", tree.stderr);
    let out = &tree.stdout;
    assert!(
        out.starts_with("minijit profile of demo.py: 5 samples"),
        "{out}"
    );
    for row in ["hot", "demo.py:12", "native_helper", "0x1230", "<module>"] {
        assert!(out.contains(row), "lacks {row}: {out}");
    }
    let folded = report(&["--folded"], &path);
    assert_eq!(folded.status, Some(0), "{}", folded.stderr);
    assert_eq!(
        folded.stdout,
        "<module>;0x1230 1\n<module>;hot 3\n<module>;hot;native_helper 1\n"
    );
    let svg = temp_dir().join("minijit.svg");
    let drawn = report(&["--flamegraph", svg.to_str().expect("utf-8")], &path);
    assert_eq!(drawn.status, Some(0), "{}", drawn.stderr);
    let text = std::fs::read_to_string(&svg).expect("svg");
    assert!(text.contains("native_helper"), "svg lacks the native frame");
}

#[test]
fn flamegraph_files_are_created_safely() {
    let dir = temp_dir();
    let svg = dir.join("safe.svg");
    let _ = std::fs::remove_file(&svg);
    let nested = nested_profile().to_str().expect("utf-8").to_owned();
    let sh = |command: String| {
        std::process::Command::new("sh")
            .args(["-c", &command])
            .env("TOYVM", env!("CARGO_BIN_EXE_toyvm"))
            .output()
            .expect("sh")
    };
    // umask 000 must not make the SVG writable by others.
    let out = sh(format!(
        "umask 000; $TOYVM report --flamegraph {} {nested} > /dev/null",
        svg.display()
    ));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&svg).expect("svg").permissions().mode() & 0o777;
    assert_eq!(mode, 0o644);
    // A symlink planted at the output path is refused, its target untouched.
    let target = dir.join("victim.txt");
    std::fs::write(&target, "keep me").expect("victim");
    let link = dir.join("link.svg");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&target, &link).expect("symlink");
    let out = sh(format!(
        "$TOYVM report --flamegraph {} {nested} > /dev/null",
        link.display()
    ));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("symbolic link"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read_to_string(&target).expect("victim"), "keep me");
}

#[test]
fn profiles_written_by_cpython_vmprof_are_shown() {
    let venv = match venv::vmprof_venv("0.6.0") {
        Ok(venv) => venv,
        Err(why) => return venv::skip_or_fail(&why),
    };
    let dir = temp_dir();
    let program = dir.join("busy.py");
    std::fs::write(
        &program,
        "def inner(n):\n    s = 0\n    for i in range(n):\n        s += i * i\n    return s\n\n\
         def outer():\n    t = 0\n    for _ in range(300):\n        t += inner(20000)\n    return t\n\n\
         print(outer())\n",
    )
    .expect("program");
    for flags in [&["--no-native"][..], &["--lines"], &[]] {
        let prof = dir.join("cpython.prof");
        let _ = std::fs::remove_file(&prof);
        venv::run(
            std::process::Command::new(venv.join("bin/python"))
                .args(["-m", "vmprof"])
                .args(flags)
                .arg("-o")
                .arg(&prof)
                .arg(&program),
            "python -m vmprof",
        )
        .unwrap_or_else(|e| panic!("{flags:?}: {e}"));
        let tree = report(&[], &prof);
        assert_eq!(tree.status, Some(0), "{flags:?}: {}", tree.stderr);
        assert!(
            tree.stdout.starts_with("cpython profile"),
            "{}",
            tree.stdout
        );
        for row in ["outer", "inner", "busy.py:1", "busy.py:7"] {
            assert!(
                tree.stdout.contains(row),
                "{flags:?} lacks {row}: {}",
                tree.stdout
            );
        }
        let folded = report(&["--folded"], &prof);
        assert_eq!(folded.status, Some(0), "{}", folded.stderr);
        assert!(folded.stdout.contains(";outer;inner "), "{}", folded.stdout);
        let svg = dir.join("cpython.svg");
        let drawn = report(&["--flamegraph", svg.to_str().expect("utf-8")], &prof);
        assert_eq!(drawn.status, Some(0), "{}", drawn.stderr);
    }
}
