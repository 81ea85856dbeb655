//! cranelift-jit never writes a perf map of its own (issue 11, item 2).
//!
//! `perf record` sets `PERF_BUILDID_DIR` for the program it runs, and
//! cranelift-jit 0.135 then appends to `/tmp/perf-<pid>.map` for every
//! function it defines, unsafely (following symlinks, mode 0666,
//! `.unwrap()`). These tests plant a symlink or a directory at that path
//! before toyvm starts (`sh -c '...; exec toyvm'` keeps the shell's pid),
//! and check that every line of the map `--perf` writes comes from
//! perfsupport's writer, also under a real `perf record`.

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A script whose functions all get compiled at `--jit-threshold 0`.
const SCRIPT: &str = "\
fn sq(x: int) -> int { return x * x; }
fn sum(n: int) -> int {
    let s = 0;
    for i in 0..n { s = s + sq(i); }
    return s;
}
print(sum(100));
";
const EXPECTED: &str = "328350\n";

/// A private directory holding the script (removed on drop).
struct Work(common::PerfWork);

impl Work {
    fn new(name: &str) -> Work {
        let work = common::PerfWork::new(&format!("perf-map-safety-{name}"));
        std::fs::write(work.path("s.toy"), SCRIPT).expect("script");
        Work(work)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.path(name)
    }

    /// Runs `sh -c "PREPARE; exec toyvm run ARGS s.toy"` with
    /// `PERF_BUILDID_DIR` set; `PREPARE` sees the future toyvm pid as `$$`
    /// and the map path as `$MAP`. Returns the output and that pid.
    fn run(&self, prepare: &str, args: &str) -> (Output, u32) {
        let script = format!(
            "MAP=/tmp/perf-$$.map; echo $$ > pid; {prepare}; exec \"$TOYVM\" run {args} s.toy"
        );
        let out = Command::new("sh")
            .arg("-c")
            .arg(script)
            .current_dir(&self.0.dir)
            .env("TOYVM", env!("CARGO_BIN_EXE_toyvm"))
            .env("PERF_BUILDID_DIR", self.path("buildid"))
            .output()
            .expect("run sh");
        (out, read_pid(&self.path("pid")))
    }
}

fn read_pid(path: &Path) -> u32 {
    std::fs::read_to_string(path)
        .expect("pid file")
        .trim()
        .parse()
        .expect("a pid")
}

/// Removes whatever a test left at `/tmp/perf-<pid>.map`.
fn remove_map(pid: u32) {
    let map = PathBuf::from(format!("/tmp/perf-{pid}.map"));
    let _ = std::fs::remove_file(&map);
    let _ = std::fs::remove_dir(&map);
}

fn assert_ran(out: &Output, what: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{what}: stderr:\n{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), EXPECTED, "{what}");
    assert!(!stderr.contains("panicked"), "{what}: {stderr}");
}

/// The perf map's lines, each checked to be whole (`START SIZE NAME`).
/// Fails if two lines describe the same code address: cranelift-jit's own
/// lines would repeat every compiled function under its linkage name.
fn check_map_lines(map: &str) -> usize {
    let mut starts = std::collections::HashSet::new();
    for line in map.lines() {
        let mut fields = line.splitn(3, ' ');
        let (start, size, name) = (fields.next(), fields.next(), fields.next());
        let (Some(start), Some(size), Some(name)) = (start, size, name) else {
            panic!("torn perf map line {line:?} in:\n{map}");
        };
        assert!(
            u64::from_str_radix(start, 16).is_ok() && u64::from_str_radix(size, 16).is_ok(),
            "bad perf map line {line:?}"
        );
        assert!(!name.is_empty(), "unnamed perf map line {line:?}");
        assert!(
            starts.insert(start.to_string()),
            "two perf map lines for address {start} (a second writer?):\n{map}"
        );
    }
    map.lines().count()
}

#[test]
fn a_symlink_at_the_map_path_is_never_followed() {
    let work = Work::new("symlink");
    let target = work.path("victim");
    std::fs::write(&target, "precious\n").expect("victim");
    for tier in ["--jit-threshold 0", ""] {
        let (out, pid) = work.run(&format!("ln -s '{}' $MAP", target.display()), tier);
        remove_map(pid);
        assert_ran(&out, &format!("symlink, tier {tier:?}"));
        assert_eq!(
            std::fs::read_to_string(&target).expect("victim"),
            "precious\n",
            "the JIT appended through a symlink at /tmp/perf-{pid}.map"
        );
    }
}

#[test]
fn a_directory_at_the_map_path_does_not_stop_the_jit() {
    let work = Work::new("dir");
    for tier in ["--jit-threshold 0", ""] {
        let (out, pid) = work.run("mkdir $MAP", tier);
        remove_map(pid);
        assert_ran(&out, &format!("directory, tier {tier:?}"));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("JIT disabled"), "{stderr}");
    }
}

#[test]
fn without_perf_no_map_is_written() {
    let work = Work::new("nomap");
    // A map at this path may be stale: left by an earlier process that had
    // this pid (perf needs maps after their process exits, so nothing
    // removes them; a long test run wraps the pid space). Record its inode
    // and size before toyvm starts: a map written without `--perf` would
    // appear, or grow, or be replaced.
    let (out, pid) = work.run(
        "stat -c '%i %s' $MAP > before 2>/dev/null || true",
        "--jit-threshold 0",
    );
    let map = PathBuf::from(format!("/tmp/perf-{pid}.map"));
    let before = std::fs::read_to_string(work.path("before")).expect("stat output");
    let after = std::fs::symlink_metadata(&map)
        .map(|m| format!("{} {}\n", m.ino(), m.len()))
        .unwrap_or_default();
    if before.is_empty() {
        remove_map(pid);
    }
    assert_ran(&out, "no --perf");
    assert_eq!(
        after,
        before,
        "{} was written without --perf (inode and size before and after; empty: absent)",
        map.display()
    );
}

#[test]
fn with_perf_every_map_line_comes_from_perfsupport() {
    let work = Work::new("perf");
    let (out, pid) = work.run("true", "--perf --jit-threshold 0");
    let map = std::fs::read_to_string(format!("/tmp/perf-{pid}.map"));
    remove_map(pid);
    assert_ran(&out, "--perf");
    let map = map.expect("--perf wrote the map");
    // `sq`, `sum` and `<main>` compiled: one line each (`toy:jit:NAME:...`),
    // plus entry shims, but never a second line for the same code.
    assert!(check_map_lines(&map) >= 3, "{map}");
    for name in ["sq", "sum"] {
        assert_eq!(
            map.lines()
                .filter(|l| l.contains(&format!(" toy:jit:{name}:")))
                .count(),
            1,
            "one line for {name}:\n{map}"
        );
    }
}

#[test]
fn under_perf_record_the_map_has_one_writer() {
    if !common::tool_or_skip("perf_map_safety", "perf", common::PERF_RECORD_PROBE) {
        return;
    }
    let work = Work::new("record");
    // perf itself sets PERF_BUILDID_DIR for the shell and so for toyvm.
    let out = work
        .0
        .command("perf")
        .args(["record", "-q", "-e", "cpu-clock", "-o", "perf.data", "--"])
        .args([
            "sh",
            "-c",
            "echo $$ > pid; exec \"$TOYVM\" run --perf --jit-threshold 0 s.toy",
        ])
        .env("TOYVM", env!("CARGO_BIN_EXE_toyvm"))
        .env_remove("PERF_BUILDID_DIR")
        .output()
        .expect("run perf");
    let pid = read_pid(&work.path("pid"));
    let map = std::fs::read_to_string(format!("/tmp/perf-{pid}.map"));
    remove_map(pid);
    assert!(
        out.status.success(),
        "perf record: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), EXPECTED);
    let map = map.expect("--perf wrote the map");
    assert!(check_map_lines(&map) >= 3, "{map}");
}
