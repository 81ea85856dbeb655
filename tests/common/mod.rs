//! Helpers shared by the end-to-end tests: run the `toyvm` binary with a
//! time limit, and spread independent runs over the machine's cores.

#![allow(dead_code, unused_imports)] // each test binary uses a different subset

mod perf_work;
pub use perf_work::PerfWork;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long one `toyvm` run may take before the test calls it a hang: far
/// above the heaviest run (`toyvm profile` with perf's DWARF unwinding, a
/// few seconds here), so that a loaded CI machine is not mistaken for one.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(180);

/// The outcome of one `toyvm` run.
#[derive(Debug)]
pub struct ToyRun {
    pub stdout: String,
    pub stderr: String,
    /// `None` if the process was killed by a signal (a crash) or timed out.
    pub status: Option<i32>,
    /// The process id it ran as (what its `/tmp/perf-PID.map` and
    /// `jit-PID.dump` are named after).
    pub pid: u32,
}

/// The repository root (the tests run scripts by paths relative to it).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Cargo's release directory, where it built this test (and toyvm, the
/// examples and libperfsupport beside it): derived from the test's own path
/// (`DIR/deps/TEST-HASH`), so it holds wherever `CARGO_TARGET_DIR` points.
pub fn release_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    let deps = exe.parent().expect("the test is in deps/");
    deps.parent()
        .expect("deps/ is in the release directory")
        .to_path_buf()
}

/// The environment variable that names a runner for the programs tests
/// start: `qemu-aarch64-static -L /usr/aarch64-linux-gnu` when the tests
/// were cross-built for aarch64 and run on an x86_64 host (no binfmt_misc
/// there: the kernel cannot start an aarch64 program by itself).
pub const RUNNER_ENV: &str = "TOYVM_TEST_RUNNER";

/// The runner's words (`[qemu-aarch64-static, -L, /usr/aarch64-linux-gnu]`),
/// empty when the tests run natively.
pub fn runner() -> Vec<String> {
    let runner = std::env::var(RUNNER_ENV).unwrap_or_default();
    runner.split_whitespace().map(String::from).collect()
}

/// True when the tests run under an emulator ([`RUNNER_ENV`] set).
pub fn emulated() -> bool {
    !runner().is_empty()
}

/// A `Command` that starts `program` (a binary built for the tests'
/// target) directly or, when [`RUNNER_ENV`] is set, through that runner.
/// Every test that starts toyvm or a C program built for the target
/// starts it through this.
pub fn target_command(program: impl AsRef<std::ffi::OsStr>) -> Command {
    match runner().split_first() {
        Some((first, rest)) => {
            let mut cmd = Command::new(first);
            cmd.args(rest).arg(program);
            cmd
        }
        None => Command::new(program),
    }
}

/// The page size of the machine the tests run on: 4 KiB on x86-64 and
/// most arm64 kernels, 16 KiB or 64 KiB on some arm64 kernels (Apple
/// silicon's Asahi, RHEL's and Ubuntu's `-64k` arm64 builds).
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(page)
        .ok()
        .filter(|&p| p > 0)
        .unwrap_or(4096)
}

/// `n` pages in bytes, as `--jit-code-limit` reads it. The tests' code
/// limits are counted in pages, not in kilobytes: the JIT gives code
/// memory out in whole pages (each batch takes at least one), so a limit
/// of "three pages" holds the same code on a 4K, 16K or 64K kernel, where
/// `12K` would compile nothing on the last two.
pub fn pages(n: usize) -> String {
    (n * page_size()).to_string()
}

/// gdb's arguments for a scripted session: batch mode, no init files, no
/// paging, no line wrapping (`tests/gdb.rs`, `tests/unwind_stepi.rs`).
pub const GDB_BATCH: &[&str] = &[
    "-nx",
    "-batch",
    "-ex",
    "set pagination off",
    "-ex",
    "set width 0",
];

/// Runs `toyvm ARGS...` in the repository root and collects its output.
pub fn toyvm(args: &[&str]) -> ToyRun {
    toyvm_in(&repo_root(), args, &[])
}

/// Runs `toyvm ARGS...` in `dir` with extra environment variables.
///
/// Under an emulator ([`RUNNER_ENV`]), a run that ends without a status
/// and without a byte of output (qemu-user itself hung or crashed: seen
/// once in about 2,000 emulated runs of a program that only prints a type
/// error, a 180 s hang that 550 runs by hand did not repeat) is run once
/// more, saying so on the test's stderr (shown for a failing test, or with
/// `--nocapture`). Natively there is no retry, and a second failure fails
/// as before.
pub fn toyvm_in(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> ToyRun {
    let run = toyvm_once(dir, args, env);
    if !emulated() || run.status.is_some() || !run.stdout.is_empty() || !run.stderr.is_empty() {
        return run;
    }
    eprintln!(
        "RETRIED under the emulator: `toyvm {}` ended with no status and no output",
        args.join(" ")
    );
    toyvm_once(dir, args, env)
}

fn toyvm_once(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> ToyRun {
    let mut child = target_command(env!("CARGO_BIN_EXE_toyvm"))
        .args(args)
        .current_dir(dir)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn toyvm");
    // Drain both pipes on threads so a chatty child never blocks on a full pipe.
    let mut out = child.stdout.take().expect("stdout pipe");
    let mut err = child.stderr.take().expect("stderr pipe");
    let out_reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        out.read_to_end(&mut buf).map(|_| buf)
    });
    let err_reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        err.read_to_end(&mut buf).map(|_| buf)
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for toyvm") {
            break status.code();
        }
        if start.elapsed() > RUN_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let stdout = out_reader
        .join()
        .expect("stdout thread")
        .expect("read stdout");
    let stderr = err_reader
        .join()
        .expect("stderr thread")
        .expect("read stderr");
    ToyRun {
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
        status,
        pid: child.id(),
    }
}

/// Applies `f` to every item on all cores, keeping the input order.
pub fn parallel_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<std::sync::Mutex<Option<R>>> =
        items.iter().map(|_| std::sync::Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(item) = items.get(i) else { break };
                    *results[i].lock().expect("result slot") = Some(f(item));
                }
            });
        }
    });
    results
        .into_iter()
        .map(|slot| {
            slot.into_inner()
                .expect("result slot")
                .expect("every item ran")
        })
        .collect()
}

/// True when `cmd ARGS...` runs and succeeds. When it does not, prints a
/// loud SKIPPED line for `test` and returns false on a developer machine,
/// but fails the test under `CI=true` (where `.ci/run` installs the tool).
pub fn tool_or_skip(test: &str, cmd: &str, args: &[&str]) -> bool {
    let works = Command::new(cmd)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .is_ok_and(|o| o.status.success());
    if !works {
        eprintln!("{test}: SKIPPED: `{cmd}` is not usable here");
        let ci = std::env::var("CI").is_ok_and(|v| v == "true");
        assert!(!ci, "{test}: CI=true, so a missing `{cmd}` is a failure");
    }
    works
}

/// The file system's clock now: the modification time of a marker file
/// written in `dir`. File times come from the kernel's coarse clock, which
/// can lag `SystemTime::now()` by a tick, so a run's files are compared
/// with a time taken the same way.
pub fn file_clock(dir: &Path) -> std::time::SystemTime {
    let marker = dir.join(".file-clock");
    std::fs::write(&marker, b"").expect("write a marker file");
    let now = std::fs::metadata(&marker)
        .and_then(|m| m.modified())
        .expect("the marker's time");
    let _ = std::fs::remove_file(&marker);
    now
}

/// Asserts that `pid` wrote no `/tmp/perf-PID.map` since `began` (from
/// [`file_clock`] before the run). Perf maps are never deleted, and pids
/// are reused (a CI container's whole test run can wrap them), so a map of
/// an earlier process with the same pid may be there: it does not count.
pub fn assert_no_perf_map_since(pid: impl std::fmt::Display, began: std::time::SystemTime) {
    let map = PathBuf::from(format!("/tmp/perf-{pid}.map"));
    if let Ok(written) = std::fs::metadata(&map).and_then(|m| m.modified()) {
        assert!(written < began, "{} written by the run", map.display());
    }
}

/// The command that shows `perf record` works here (installed, and allowed
/// to record by `perf_event_paranoid`): the arguments for [`tool_or_skip`].
pub const PERF_RECORD_PROBE: &[&str] = &[
    "record",
    "-q",
    "-e",
    "cpu-clock",
    "-o",
    "/dev/null",
    "--",
    "true",
];

/// One measured run.
pub struct Measured {
    pub pid: u32,
    pub status: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// User plus system CPU seconds of the process and its threads.
    pub cpu: f64,
    /// Peak RSS in KiB.
    pub peak_kib: i64,
}

/// Runs `toyvm ARGS` in `dir` and measures its CPU time with `wait4`.
// The child is reaped by `wait4`, which std's `Child::wait` cannot replace
// (it gives no resource usage).
#[allow(clippy::zombie_processes)]
pub fn measured(dir: &Path, args: &[&str]) -> Measured {
    let mut child = target_command(env!("CARGO_BIN_EXE_toyvm"))
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn toyvm");
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        out.read_to_string(&mut s).map(|_| s)
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        err.read_to_string(&mut s).map(|_| s)
    });
    let mut status = 0;
    // SAFETY: an all-zero `rusage` is a valid value of the plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child, with valid out-pointers; the child
    // is not waited for elsewhere (its `Child` is dropped unwaited).
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as i32, "wait4");
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Measured {
        pid: child.id(),
        status: libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)),
        stdout: out.join().unwrap().expect("stdout"),
        stderr: err.join().unwrap().expect("stderr"),
        cpu: seconds(usage.ru_utime) + seconds(usage.ru_stime),
        peak_kib: usage.ru_maxrss,
    }
}

/// Restores SIGHUP, SIGINT and SIGTERM to their default action in the child
/// `command` starts, before it runs: a test that sends them must not depend
/// on how the test itself was started. Under `nohup` SIGHUP is ignored, every
/// child inherits that, and toyvm rightly keeps ignoring a signal ignored at
/// its start (a suite run under `nohup` once failed `signals` and `chaos` so).
pub fn default_stop_signals(command: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: between fork and exec the closure only calls signal(2), which
    // is async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            for signal in [libc::SIGHUP, libc::SIGINT, libc::SIGTERM] {
                libc::signal(signal, libc::SIG_DFL);
            }
            Ok(())
        })
    }
}
