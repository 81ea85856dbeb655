//! Chaos for the profiler outputs: runs under `--perf`, `--perf-jitdump`
//! (inside `perf record -k 1`) and `--vmprof` are killed at random moments
//! with a random signal (SIGINT, SIGTERM, SIGHUP or SIGKILL), and every file
//! left behind must be usable:
//!
//! * the perf map: every line whole, `START SIZE name` (hex, hex, a name),
//!   the last one ended by its newline;
//! * the jitdump: `perf inject --jit` accepts the recording around it;
//! * the vmprof profile: `toyvm report` reads it (a SIGKILLed one, which
//!   has no trailer, with a warning that says so); after a stop signal it
//!   is complete.
//!
//! The script keeps the JIT busy for its whole run (a new function tiers
//! up every few milliseconds), so a kill lands while records are being
//! written as often as between them. The moments and signals come from a
//! seeded generator; the seed is printed, and `CHAOS_SEED=S` replays a
//! run. `CHAOS_RUNS=N` sets the number of kills (default [`RUNS`]):
//! `bench/chaos.sh` runs many.
//!
//! The jitdump part needs `perf`: skipped loudly without it, except under
//! `CI=true`.

mod common;

use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use common::PerfWork;

/// Kills in one default run (a third per output kind).
const RUNS: u64 = 21;

/// Latest kill, after the start of the run.
const MAX_DELAY_MS: u64 = 600;

/// SplitMix64: small, seedable, good enough to spread kills.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// 120 small functions, each called in a loop of its own long enough to
/// tier it up (default threshold 1000), then a loop that never ends.
fn script() -> String {
    let mut s = String::new();
    for f in 0..120 {
        let _ = writeln!(
            s,
            "fn f{f}(x: int) -> int {{ let y = x * {f}; if y % 3 == 0 {{ return y + 1; }} return y - {f}; }}"
        );
    }
    s.push_str("let t = 0;\n");
    for f in 0..120 {
        let _ = writeln!(s, "for i in 0..3000 {{ t = t + f{f}(i); }}");
    }
    s.push_str("print(t);\nlet j = 0;\nwhile j >= 0 { t = t + f7(j); j = j + 1; }\n");
    s
}

const SIGNALS: [(i32, &str); 4] = [
    (libc::SIGINT, "SIGINT"),
    (libc::SIGTERM, "SIGTERM"),
    (libc::SIGHUP, "SIGHUP"),
    (libc::SIGKILL, "SIGKILL"),
];

/// What one kill tests.
#[derive(Clone, Copy, Debug)]
enum Output {
    PerfMap,
    Jitdump,
    Vmprof,
}

/// Sends `signal` to `pid` (a child of this test or of its perf).
fn kill(pid: u32, signal: i32) {
    // SAFETY: kill only sends a signal.
    unsafe { libc::kill(pid as i32, signal) };
}

/// Waits for `child` to end (killing it after a minute: a hang).
fn wait(child: &mut std::process::Child, what: &str) -> ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status;
        }
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("{what}: did not end within a minute of the signal");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The pid of perf's child once it runs toyvm (before its `exec`, it is
/// perf, waiting for the go-ahead: killing it then kills perf by SIGPIPE).
fn toyvm_child_of(parent: u32) -> Option<u32> {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        let children =
            std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children")).ok()?;
        if let Some(pid) = children.split_whitespace().next()
            && std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|comm| comm.trim() == "toyvm")
        {
            return pid.parse().ok();
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    None
}

/// A stop signal ends the run with 128 + the signal (or, before toyvm has
/// installed its handlers, by the signal itself); SIGKILL by the signal.
fn check_status(status: ExitStatus, signal: i32, what: &str) {
    use std::os::unix::process::ExitStatusExt;
    let conventional = status.code() == Some(128 + signal);
    let by_signal = status.signal() == Some(signal);
    // The run finished its loop only if the signal never came: impossible,
    // it never ends.
    assert!(
        (signal != libc::SIGKILL && conventional) || by_signal,
        "{what}: exit {status:?}"
    );
}

/// Every line of a perf map is whole: `START SIZE name`.
fn check_perf_map(path: &Path, what: &str) -> usize {
    let Ok(bytes) = std::fs::read(path) else {
        return 0; // killed before the first region: no map yet
    };
    let text = String::from_utf8(bytes).unwrap_or_else(|_| panic!("{what}: map not UTF-8"));
    assert!(
        text.is_empty() || text.ends_with('\n'),
        "{what}: last line cut: {:?}",
        text.lines().last()
    );
    for line in text.lines() {
        let mut fields = line.splitn(3, ' ');
        let hex = |f: Option<&str>| f.is_some_and(|f| u64::from_str_radix(f, 16).is_ok());
        let (start, size, name) = (fields.next(), fields.next(), fields.next());
        assert!(
            hex(start) && hex(size) && name.is_some_and(|n| !n.trim().is_empty()),
            "{what}: bad perf map line {line:?}"
        );
    }
    text.lines().count()
}

/// The profile reads with `toyvm report`; with a warning only if it has
/// no trailer, which only SIGKILL may leave.
fn check_vmprof(path: &Path, signal: i32, what: &str) -> String {
    if !path.exists() {
        return "no file".into();
    }
    let report = Command::new(env!("CARGO_BIN_EXE_toyvm"))
        .arg("report")
        .arg(path)
        .output()
        .expect("toyvm report");
    let stderr = String::from_utf8_lossy(&report.stderr);
    assert_eq!(report.status.code(), Some(0), "{what}: report: {stderr}");
    let salvaged = stderr.contains("no trailer");
    if signal != libc::SIGKILL {
        let profile = perfsupport::vmprof::read_profile(path)
            .unwrap_or_else(|e| panic!("{what}: read_profile: {e}"));
        assert!(profile.has_trailer, "{what}: a stop signal left no trailer");
        assert!(stderr.is_empty(), "{what}: {stderr}");
    } else if !stderr.is_empty() {
        assert!(
            stderr.starts_with("toyvm: warning: ") && salvaged,
            "{what}: {stderr}"
        );
    }
    if salvaged { "salvaged" } else { "complete" }.into()
}

/// One kill: runs `toyvm run` for `output`, sends `signal` after
/// `delay`, checks what is left. Returns a summary.
fn one(work: &PerfWork, output: Output, signal: i32, delay: Duration, what: &str) -> String {
    let toyvm = env!("CARGO_BIN_EXE_toyvm");
    let script = work.path("chaos.toy");
    let prof = work.path("chaos.prof");
    let _ = std::fs::remove_file(&prof);
    let mut command = match output {
        Output::Jitdump => {
            let _ = std::fs::remove_file(work.path("perf.data"));
            let mut c = work.command("perf");
            c.args([
                "record",
                "-q",
                "-k",
                "1",
                "-e",
                "cpu-clock",
                "-o",
                "perf.data",
            ])
            .args(["--", toyvm, "run", "--perf-jitdump", "--perf-dir"])
            .arg(&work.dir);
            c
        }
        Output::PerfMap => {
            let mut c = work.command(toyvm);
            c.args(["run", "--perf"]);
            c
        }
        Output::Vmprof => {
            let mut c = work.command(toyvm);
            c.args(["run", "--vmprof-interval-us", "200", "--vmprof"])
                .arg(&prof);
            c
        }
    };
    let mut child = common::default_stop_signals(&mut command)
        .arg(&script)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let toy_pid = match output {
        Output::Jitdump => toyvm_child_of(child.id()).unwrap_or_else(|| panic!("{what}: no toyvm")),
        Output::PerfMap | Output::Vmprof => child.id(),
    };
    std::thread::sleep(delay);
    kill(toy_pid, signal);
    let status = wait(&mut child, what);
    let stderr = {
        use std::io::Read;
        let mut s = String::new();
        let _ = child.stderr.take().expect("stderr").read_to_string(&mut s);
        s
    };
    match output {
        Output::PerfMap => {
            check_status(status, signal, what);
            assert!(stderr.is_empty(), "{what}: {stderr}");
            let map = std::path::PathBuf::from(format!("/tmp/perf-{toy_pid}.map"));
            let lines = check_perf_map(&map, what);
            let _ = std::fs::remove_file(&map);
            format!("{lines} map lines")
        }
        Output::Vmprof => {
            check_status(status, signal, what);
            assert!(stderr.is_empty(), "{what}: {stderr}");
            check_vmprof(&prof, signal, what)
        }
        Output::Jitdump => {
            // perf record ends with its child, after writing perf.data:
            // with an exit code when toyvm exits (128+N after a stop
            // signal), or by the same signal when toyvm is killed by it
            // (perf re-raises its workload's terminating signal, SIGKILL
            // included).
            use std::os::unix::process::ExitStatusExt;
            assert!(
                status.code().is_some() || status.signal() == Some(signal),
                "{what}: perf record: {status:?}"
            );
            let dump = work.path(format!("jit-{toy_pid}.dump"));
            let map = std::path::PathBuf::from(format!("/tmp/perf-{toy_pid}.map"));
            let _ = std::fs::remove_file(&map);
            let size = std::fs::metadata(&dump).map_or(0, |m| m.len());
            let inject = work.perf(
                &["inject", "--jit", "-i", "perf.data", "-o", "perf.jit.data"],
                &[],
            );
            assert!(
                inject.status.success(),
                "{what}: perf inject --jit ({size}-byte jitdump): {}",
                String::from_utf8_lossy(&inject.stderr)
            );
            let injected = std::fs::read_dir(&work.dir)
                .expect("work dir")
                .filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().starts_with("jitted-"))
                .count();
            for entry in std::fs::read_dir(&work.dir).expect("work dir").flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if name.starts_with("jitted-") || name.starts_with("jit-") {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
            let _ = std::fs::remove_file(work.path("perf.jit.data"));
            format!("{size}-byte jitdump, {injected} objects injected")
        }
    }
}

#[test]
fn killed_profiling_runs_leave_usable_files() {
    let runs: u64 = std::env::var("CHAOS_RUNS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(RUNS);
    let seed: u64 = std::env::var("CHAOS_SEED")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    eprintln!("chaos: {runs} kills, CHAOS_SEED={seed}");
    let have_perf = common::tool_or_skip("chaos (jitdump)", "perf", common::PERF_RECORD_PROBE);
    let work = PerfWork::new("chaos");
    std::fs::write(work.path("chaos.toy"), script()).expect("script");
    let mut rng = Rng(seed);
    let mut tally = std::collections::BTreeMap::<String, u32>::new();
    for run in 0..runs {
        let output = match run % 3 {
            0 => Output::PerfMap,
            1 => Output::Jitdump,
            _ => Output::Vmprof,
        };
        if matches!(output, Output::Jitdump) && !have_perf {
            continue;
        }
        let (signal, name) = SIGNALS[rng.below(SIGNALS.len() as u64) as usize];
        let delay = Duration::from_millis(rng.below(MAX_DELAY_MS + 1));
        let what = format!(
            "run {run} (CHAOS_SEED={seed}): {output:?}, {name} after {} ms",
            delay.as_millis()
        );
        let summary = one(&work, output, signal, delay, &what);
        eprintln!("chaos: {what}: ok, {summary}");
        *tally.entry(format!("{output:?} {name}")).or_default() += 1;
    }
    eprintln!("chaos: every file usable; kills by kind: {tally:?}");
}
