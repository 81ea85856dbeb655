//! `toyvm profile`: perf record + inject + report + flame graph, end to end.
//!
//! Needs a working `perf` (and permission to use it): skipped loudly
//! without one, except under `CI=true`, where that is a failure.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::{repo_root, toyvm_in};

fn out_dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("profile_e2e")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Why perf cannot be used here, if it cannot.
fn perf_unusable() -> Option<String> {
    match Command::new("perf")
        .args(["record", "-e", "cpu-clock", "-o", "/dev/null", "--", "true"])
        .output()
    {
        Err(e) => Some(format!("cannot run perf: {e}")),
        Ok(out) if !out.status.success() => Some(format!(
            "perf record does not work here: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Ok(_) => None,
    }
}

fn skip_or_fail(why: &str) {
    let banner = "=".repeat(72);
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("perf is required in CI: {why}");
    }
    eprintln!("{banner}\nSKIPPING the toyvm profile end-to-end test: {why}\n{banner}");
}

#[test]
fn profile_writes_a_report_and_a_flame_graph_of_mixed_stacks() {
    if let Some(why) = perf_unusable() {
        return skip_or_fail(&why);
    }
    let dir = out_dir("nested");
    let run = toyvm_in(
        &repo_root(),
        &[
            "profile",
            "--out",
            dir.to_str().expect("utf-8"),
            "tests/vmprof/nested.toy",
            "400",
        ],
        &[],
    );
    assert_eq!(run.status, Some(0), "stderr: {}", run.stderr);
    assert_eq!(run.stdout.trim(), "196327063", "the script's own output");
    assert!(
        run.stderr.contains("report.txt") && run.stderr.contains("flamegraph.svg"),
        "{}",
        run.stderr
    );

    let report = std::fs::read_to_string(dir.join("report.txt")).expect("report.txt");
    assert!(
        report.contains("--no-children") || report.contains("Overhead"),
        "{report}"
    );
    // Toy frames (trampolines or compiled code) and native frames, in one
    // call graph.
    assert!(report.contains("inner_hot"), "{report}");
    assert!(
        report.contains("interp_entry") || report.contains("toy:jit"),
        "{report}"
    );
    let svg = std::fs::read_to_string(dir.join("flamegraph.svg")).expect("flamegraph.svg");
    assert!(svg.starts_with("<?xml"), "an SVG");
    for frame in ["inner_hot", "middle", "outer", "toyvm::main"] {
        assert!(svg.contains(frame), "the flame graph lacks {frame}");
    }
    // perf's build-id cache went to DIR, not ~/.debug.
    assert!(dir.join(".debug").is_dir());
}

#[test]
fn profile_without_perf_says_so() {
    let dir = out_dir("noperf");
    let run = toyvm_in(
        &repo_root(),
        &[
            "profile",
            "--out",
            dir.to_str().expect("utf-8"),
            "tests/vmprof/nested.toy",
            "1",
        ],
        &[("PATH", "/nonexistent")],
    );
    assert_eq!(run.status, Some(1), "{}", run.stderr);
    assert!(
        run.stderr.contains("the `perf` command is missing"),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
}
