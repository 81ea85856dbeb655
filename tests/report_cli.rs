//! `toyvm report`: the terminal report, collapsed stacks, flame graphs, and
//! clean rejection of files toyvm did not write.

mod common;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use common::{ToyRun, toyvm};

fn temp_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("report_cli");
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// A profile of nested.toy, recorded once for all tests.
fn nested_profile() -> &'static Path {
    static PROFILE: OnceLock<PathBuf> = OnceLock::new();
    PROFILE.get_or_init(|| {
        let path = temp_dir().join("nested.prof");
        let _ = std::fs::remove_file(&path);
        let run = toyvm(&[
            "run",
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
    assert_rejected(&write("empty.prof", b""), "shorter than the 40-byte static header");
    assert_rejected(&write("script.prof", b"print(1);\n"), "wrong magic");
    // Cut inside a record, and cut at a record boundary (no trailer).
    assert_rejected(
        &write("cut.prof", &bytes[..bytes.len() / 2 + 3]),
        "truncated",
    );
    assert_rejected(
        &write("no-trailer.prof", &bytes[..bytes.len() - 25]),
        "truncated",
    );
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

#[test]
fn profiles_from_other_vms_are_not_toyvm_profiles() {
    use perfsupport::vmprof::{EnableOptions, disable, enable_path};
    let path = temp_dir().join("cpython.prof");
    let _ = std::fs::remove_file(&path);
    enable_path(&path, &EnableOptions::new("cpython")).expect("enable");
    disable().expect("disable");
    assert_rejected(&path, "not a toyvm profile (it was written by 'cpython')");
}
