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
    // It counts samples (once it added up cpu-clock's period: a run of
    // 226 samples showed 194,388,776).
    let samples = Command::new("perf")
        .env("PERF_CONFIG", dir.join("perfconfig"))
        .args(["script", "-F", "tid", "-i"])
        .arg(dir.join("perf.jit.data"))
        .output()
        .expect("perf script");
    let count = String::from_utf8_lossy(&samples.stdout).lines().count();
    let total = format!("all ({} samples, 100%)", thousands(count));
    assert!(svg.contains(&total), "no '{total}' in the flame graph");
    // perf's build-id cache went to DIR, not ~/.debug.
    assert!(dir.join(".debug").is_dir());
}

/// `n` as inferno writes counts: `1,234,567`.
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(digit);
    }
    out
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

/// Every file and directory under `dir`, with its mode, not following
/// symlinks.
fn modes_under(dir: &std::path::Path, out: &mut Vec<(PathBuf, u32, bool)>) {
    use std::os::unix::fs::PermissionsExt;
    for entry in std::fs::read_dir(dir).expect("read dir").flatten() {
        let meta = std::fs::symlink_metadata(entry.path()).expect("metadata");
        out.push((
            entry.path(),
            meta.permissions().mode() & 0o777,
            meta.file_type().is_symlink(),
        ));
        if meta.is_dir() {
            modes_under(&entry.path(), out);
        }
    }
}

#[test]
fn profile_files_are_created_safely() {
    if let Some(why) = perf_unusable() {
        return skip_or_fail(&why);
    }
    use std::os::unix::fs::PermissionsExt;
    let dir = out_dir("umask000");
    let sh = |command: String| {
        Command::new("sh")
            .args(["-c", &command])
            .current_dir(repo_root())
            .env("TOYVM", env!("CARGO_BIN_EXE_toyvm"))
            .output()
            .expect("sh")
    };
    // Under umask 000: DIR (and a missing parent) and everything in it,
    // perf's files included, are not writable by others.
    let out_dir = dir.join("parent/out");
    let run = sh(format!(
        "umask 000; $TOYVM profile --out {} tests/vmprof/nested.toy 100",
        out_dir.display()
    ));
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    assert_eq!(run.status.code(), Some(0), "{stderr}");
    let mut all = vec![(
        out_dir.clone(),
        std::fs::metadata(&out_dir)
            .expect("out")
            .permissions()
            .mode()
            & 0o777,
        false,
    )];
    all.push((
        dir.join("parent"),
        std::fs::metadata(dir.join("parent"))
            .expect("parent")
            .permissions()
            .mode()
            & 0o777,
        false,
    ));
    modes_under(&out_dir, &mut all);
    for name in [
        "perfconfig",
        "report.txt",
        "flamegraph.svg",
        "perf-script.txt",
        "perf.data",
    ] {
        assert!(
            all.iter().any(|(p, _, _)| p == &out_dir.join(name)),
            "{name} missing: {all:?}"
        );
    }
    for (path, mode, symlink) in &all {
        // perf's build-id cache (`.debug`) links its entries by design; a
        // symlink's own mode means nothing.
        if *symlink {
            assert!(
                path.starts_with(out_dir.join(".debug")),
                "{} is a symlink",
                path.display()
            );
            continue;
        }
        assert_eq!(mode & 0o022, 0, "{} has mode {mode:o}", path.display());
    }
    // A symlink planted at any output path is refused, not followed, with
    // a clear error and exit 1; its target is untouched.
    let victim = dir.join("victim.txt");
    std::fs::write(&victim, "keep me").expect("victim");
    for name in [
        "perfconfig",
        "perf.data",
        "perf.jit.data",
        "report.txt",
        "flamegraph.svg",
        "perf-script.txt",
    ] {
        let out = dir.join(format!("planted-{name}"));
        std::fs::create_dir_all(&out).expect("out dir");
        std::os::unix::fs::symlink(&victim, out.join(name)).expect("symlink");
        let run = sh(format!(
            "$TOYVM profile --out {} tests/vmprof/nested.toy 100",
            out.display()
        ));
        let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
        assert_eq!(run.status.code(), Some(1), "{name}: {stderr}");
        assert!(
            stderr.starts_with("error: toyvm profile: ") && stderr.contains("symlink")
                || stderr.contains("symbolic link"),
            "{name}: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{name}: {stderr}");
        assert_eq!(
            std::fs::read_to_string(&victim).expect("victim"),
            "keep me",
            "{name}"
        );
    }
    // A symlink as DIR itself is refused too.
    let real = dir.join("real");
    std::fs::create_dir_all(&real).expect("real dir");
    let link = dir.join("linked-out");
    std::os::unix::fs::symlink(&real, &link).expect("symlink");
    let run = sh(format!(
        "$TOYVM profile --out {} tests/vmprof/nested.toy 100",
        link.display()
    ));
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    assert_eq!(run.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("not a directory (a symlink?)"), "{stderr}");
    assert_eq!(std::fs::read_dir(&real).expect("real").count(), 0);
}

/// At `kernel.perf_event_paranoid` 2, the kernel's default, a user may
/// profile their own processes in user space: `toyvm profile` must not
/// refuse (it once did, though the manual perf path worked). As root the
/// test runs it as `nobody` (setpriv), when the machine is at level 2.
#[test]
fn a_user_at_paranoid_level_2_may_profile() {
    if let Some(why) = perf_unusable() {
        return skip_or_fail(&why);
    }
    let level = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid").unwrap_or_default();
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if level.trim() != "2" || (root && Command::new("setpriv").arg("--help").output().is_err()) {
        let banner = "=".repeat(72);
        eprintln!(
            "{banner}\nSKIPPING: perf_event_paranoid is {}, or no setpriv\n{banner}",
            level.trim()
        );
        return;
    }
    // Under the system's temp directory, with a copy of toyvm: the
    // repository may sit where `nobody` cannot enter.
    let dir = std::env::temp_dir().join(format!("toyvm-profile-user-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let toyvm = dir.join("toyvm");
    std::fs::copy(env!("CARGO_BIN_EXE_toyvm"), &toyvm).unwrap();
    std::fs::set_permissions(&toyvm, std::fs::Permissions::from_mode(0o755)).unwrap();
    let script = dir.join("nested.toy");
    std::fs::copy(repo_root().join("tests/vmprof/nested.toy"), &script).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = dir.join("profile");
    let mut command = if root {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]);
        c.arg(&toyvm);
        c
    } else {
        Command::new(&toyvm)
    };
    let run = command
        .arg("profile")
        .arg("--out")
        .arg(&out)
        .arg(&script)
        .arg("50")
        .current_dir(&dir)
        .env("HOME", &dir)
        .output()
        .expect("run toyvm profile");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    assert!(!stderr.contains("perf may not profile"), "{stderr}");
    assert!(out.join("flamegraph.svg").is_file(), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}
