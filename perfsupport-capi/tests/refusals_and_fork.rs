//! Refused calls touch nothing, failed opens leave nothing claimed, and a
//! forked child gets a clean state of its own (`tests/c/refusals_and_fork.c`,
//! linked against the shared library). Each mode below failed before its
//! fix:
//!
//! * a second `perfsupport_vmprof_enable` truncated the live profile and
//!   emptied any other file it named;
//! * a failed `perfsupport_profilers_open` left the perf map claimed, so
//!   every later open (and the trio) failed;
//! * a forked child saw profiling on, `disable` panicked, and the forking
//!   thread was never sampled again;
//! * the child's perf map copied lines the parent wrote after the fork;
//! * the child's first `perfsupport_register` after
//!   `perfsupport_profilers_after_fork_child` returned EIO.

mod support;

use std::collections::HashSet;
use std::path::Path;
use support::{compile, pkg_config, program, repo_root, run_ok, scratch};

/// Runs the C program in `mode` in `dir`; its stdout. Fails on a failed
/// check, a non-zero exit or anything on stderr (a Rust panic message).
fn run_mode(dir: &Path, mode: &str) -> Option<String> {
    let source = repo_root().join("perfsupport-capi/tests/c/refusals_and_fork.c");
    let binary = dir.join("refusals_and_fork");
    if !binary.exists() {
        compile(&[source], &binary, &pkg_config(&["--libs"]))?;
    }
    let output = run_ok(program(&binary).arg(mode).current_dir(dir));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stdout.contains("FAIL"), "{mode}:\n{stdout}");
    assert!(
        stderr.is_empty(),
        "{mode}: stderr:\n{stderr}\nstdout:\n{stdout}"
    );
    Some(stdout)
}

/// The number after `key ` on the line that starts with it.
fn pid_after(stdout: &str, key: &str) -> u32 {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix(key)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no `{key}` line:\n{stdout}"))
}

/// The symbol names of `/tmp/perf-<pid>.map`, which it removes.
fn map_names(pid: u32) -> Vec<String> {
    let path = format!("/tmp/perf-{pid}.map");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let _ = std::fs::remove_file(&path);
    text.lines()
        .map(|l| l.splitn(3, ' ').nth(2).unwrap_or("").to_string())
        .collect()
}

#[test]
fn refused_and_failed_calls_touch_nothing() {
    let dir = scratch("refusals");
    let Some(stdout) = run_mode(dir.path(), "refusals") else {
        return;
    };
    // The live profile survived the refused enables whole.
    let live = ps::vmprof::read_profile(&dir.path().join("live.prof")).expect("live.prof");
    assert!(live.has_trailer && !live.samples.is_empty());
    assert_eq!(
        std::fs::read_to_string(dir.path().join("other.prof")).expect("other.prof"),
        "keep me\n"
    );
    let names = map_names(pid_after(&stdout, "pid"));
    assert_eq!(names, ["capi::after_retry"]);
}

#[test]
fn after_a_failed_open_the_trio_writes_the_map() {
    let dir = scratch("trio");
    let Some(stdout) = run_mode(dir.path(), "trio") else {
        return;
    };
    assert_eq!(map_names(pid_after(&stdout, "pid")), ["capi::trio_entry"]);
}

#[test]
fn a_forked_child_profiles_itself_from_a_clean_start() {
    let dir = scratch("vmprof-fork");
    if run_mode(dir.path(), "vmprof").is_none() {
        return;
    }
    let read = |name: &str| {
        let profile = ps::vmprof::read_profile(&dir.path().join(name))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(profile.has_trailer, "{name}");
        let leaves: HashSet<String> = profile
            .samples
            .iter()
            .filter_map(|s| s.stack.last())
            .map(|&id| profile.name(id).unwrap_or("?").to_string())
            .collect();
        (profile.interp.clone(), leaves)
    };
    let (interp, leaves) = read("parent.prof");
    assert_eq!(interp, "forker");
    assert!(
        leaves.iter().all(|l| l.contains("parent_work")),
        "{leaves:?}"
    );
    let (interp, leaves) = read("child.prof");
    assert_eq!(interp, "forked");
    assert!(!leaves.is_empty());
    assert!(
        leaves.iter().all(|l| l.contains("child_work")),
        "{leaves:?}"
    );
}

#[test]
fn a_forked_childs_perf_map_starts_with_the_lines_written_before_the_fork() {
    let dir = scratch("perfmap-fork");
    let Some(stdout) = run_mode(dir.path(), "perfmap") else {
        return;
    };
    let parent = map_names(pid_after(&stdout, "pid"));
    let child = map_names(pid_after(&stdout, "child pid"));
    assert_eq!(parent, ["parent::before_fork", "parent::after_fork"]);
    assert_eq!(child, ["parent::before_fork", "child::own"]);
}

#[test]
fn after_a_fork_the_jitdump_stops_and_the_map_goes_on() {
    let dir = scratch("regions-fork");
    let Some(stdout) = run_mode(dir.path(), "regions") else {
        return;
    };
    let parent = pid_after(&stdout, "pid");
    let child = pid_after(&stdout, "child pid");
    assert_eq!(map_names(parent), ["parent::region"]);
    assert_eq!(map_names(child), ["parent::region", "child::region"]);
    assert!(dir.path().join(format!("jit-{parent}.dump")).exists());
    assert!(!dir.path().join(format!("jit-{child}.dump")).exists());
}
