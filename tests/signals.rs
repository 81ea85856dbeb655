//! SIGINT, SIGTERM and SIGHUP during `toyvm run`: the text the script
//! printed (buffered, since stdout is a file) is written out, a `--vmprof`
//! file is complete (trailer included), and the exit status is 128 + the
//! signal, in the interpreter and in compiled code alike.

mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use perfsupport::vmprof::read_profile;

/// Prints five lines, then computes for much longer than any test waits.
const SCRIPT: &str = "\
fn step(s: int, j: int) -> int { return s + j % 7; }
for i in 0..5 { print(i); }
let s = 0;
let j = 0;
while j < 4000000000 {
    s = step(s, j);
    j = j + 1;
}
print(s);
";

/// Waits until the `--vmprof` writer has flushed samples into `prof`: the
/// script's loop runs, so its five prints (before it) happened and toyvm
/// took its signals, however slowly a loaded machine started it.
fn wait_for_the_loop(prof: &std::path::Path, what: &str) {
    let start = Instant::now();
    while std::fs::metadata(prof).map_or(0, |m| m.len()) < 2048 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{what}: no samples"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn temp_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("signals");
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// `toyvm run TIER --vmprof PROF SCRIPT`, stdout to `out`, stderr piped,
/// the stop signals at their default action whatever this test inherited.
fn profiled_run(
    tier: &[&str],
    prof: &std::path::Path,
    script: &std::path::Path,
    out: std::fs::File,
) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_toyvm"));
    common::default_stop_signals(&mut command)
        .arg("run")
        .args(tier)
        .arg("--vmprof")
        .arg(prof)
        .arg(script)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(Stdio::piped());
    command
}

#[test]
fn a_stop_signal_keeps_printed_output_and_completes_the_profile() {
    let dir = temp_dir();
    let script = dir.join("long.toy");
    std::fs::write(&script, SCRIPT).expect("script");
    for tier in [&["--no-jit"][..], &["--jit-threshold", "0"]] {
        for (signal, status) in [
            (libc::SIGINT, 130),
            (libc::SIGTERM, 143),
            (libc::SIGHUP, 129),
        ] {
            let what = format!("{tier:?} signal {signal}");
            let out_path = dir.join(format!("out-{signal}.txt"));
            let prof = dir.join(format!("p-{signal}.prof"));
            let _ = std::fs::remove_file(&prof);
            let out = std::fs::File::create(&out_path).expect("stdout file");
            let child = profiled_run(tier, &prof, &script, out)
                .spawn()
                .expect("spawn toyvm");
            wait_for_the_loop(&prof, &what);
            // SAFETY: kill only sends a signal to our child.
            assert_eq!(unsafe { libc::kill(child.id() as i32, signal) }, 0);
            let output = child.wait_with_output().expect("wait");
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert_eq!(output.status.code(), Some(status), "{what}: {stderr}");
            assert_eq!(
                std::fs::read_to_string(&out_path).expect("stdout"),
                "0\n1\n2\n3\n4\n",
                "{what}"
            );
            let profile = read_profile(&prof).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert!(profile.has_trailer, "{what}");
            assert!(!profile.samples.is_empty(), "{what}");
            assert!(stderr.is_empty(), "{what}: {stderr}");
        }
    }
}

#[test]
fn report_salvages_a_profile_without_trailer_with_a_warning() {
    let dir = temp_dir();
    let script = dir.join("long-kill.toy");
    std::fs::write(&script, SCRIPT).expect("script");
    let prof = dir.join("killed.prof");
    let _ = std::fs::remove_file(&prof);
    let mut child = Command::new(env!("CARGO_BIN_EXE_toyvm"))
        .args(["run", "--no-jit", "--vmprof"])
        .arg(&prof)
        .arg(&script)
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn toyvm");
    let start = Instant::now();
    while std::fs::metadata(&prof).map_or(0, |m| m.len()) < 4096 {
        assert!(start.elapsed() < Duration::from_secs(60), "no samples");
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().expect("SIGKILL");
    child.wait().expect("wait");
    let report = Command::new(env!("CARGO_BIN_EXE_toyvm"))
        .arg("report")
        .arg(&prof)
        .output()
        .expect("report");
    let stderr = String::from_utf8_lossy(&report.stderr);
    let stdout = String::from_utf8_lossy(&report.stdout);
    assert_eq!(report.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.starts_with("toyvm: warning: ") && stderr.contains("no trailer"),
        "{stderr}"
    );
    assert!(stdout.contains("step"), "{stdout}");
}

/// A signal ignored when toyvm starts (`nohup`, `trap '' INT`, a background
/// job's SIGINT) stays ignored: the run goes on, and a signal that is not
/// ignored still stops it cleanly. toyvm once exited with 129 under `nohup`
/// at the first SIGHUP.
#[test]
fn a_signal_ignored_at_start_stays_ignored() {
    use std::os::unix::process::CommandExt;
    let dir = temp_dir();
    let script = dir.join("long-ignored.toy");
    std::fs::write(&script, SCRIPT).expect("script");
    for tier in [&["--no-jit"][..], &["--jit-threshold", "0"]] {
        let out_path = dir.join("out-ignored.txt");
        let out = std::fs::File::create(&out_path).expect("stdout file");
        // The profile only tells when the loop runs (see below).
        let prof = dir.join("p-ignored.prof");
        let _ = std::fs::remove_file(&prof);
        let mut command = profiled_run(tier, &prof, &script, out);
        // SAFETY: between fork and exec, only async-signal-safe signal(2),
        // after the defaults `default_stop_signals` restores.
        unsafe {
            command.pre_exec(|| {
                libc::signal(libc::SIGHUP, libc::SIG_IGN);
                libc::signal(libc::SIGINT, libc::SIG_IGN);
                Ok(())
            });
        }
        let mut child = command.spawn().expect("spawn toyvm");
        wait_for_the_loop(&prof, &format!("{tier:?}"));
        for signal in [libc::SIGHUP, libc::SIGINT] {
            // SAFETY: kill only sends a signal to our child.
            assert_eq!(unsafe { libc::kill(child.id() as i32, signal) }, 0);
        }
        std::thread::sleep(Duration::from_millis(500));
        assert!(
            child.try_wait().expect("try_wait").is_none(),
            "{tier:?}: an ignored signal ended the run"
        );
        // SAFETY: as above.
        assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
        let output = child.wait_with_output().expect("wait");
        assert_eq!(output.status.code(), Some(143), "{tier:?}");
        assert_eq!(
            std::fs::read_to_string(&out_path).expect("stdout"),
            "0\n1\n2\n3\n4\n",
            "{tier:?}"
        );
    }
}
