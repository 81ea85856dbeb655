//! Paths that lie, outputs that would destroy inputs, and tools that fail:
//! each case below misbehaved once (reliability round three).
//!
//! * an output option naming an input replaced it (`run --vmprof S S`,
//!   `report --flamegraph P P`);
//! * `report --lines` opened whatever file a profile named (a script read
//!   from `/dev/stdin` made the report wait on its own stdin);
//! * a colon in a script's name was replaced in code names, and `report
//!   --lines` showed the lines of another file;
//! * a newline in a script's path emptied the perf map and the jitdump;
//! * a newline in `profile --out` wrote settings into its perfconfig;
//! * `profile` panicked when stderr was full, and blamed `perf inject` for
//!   a failed `perf record`, leaving the old report in place;
//! * `disasm --jit` left out functions over the compile budget silently;
//! * a jitdump that could not be mapped (`noexec`) left a file behind.

mod common;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{ToyRun, toyvm_in};

/// A fresh scratch directory (never under `/tmp/perf-`).
fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("toyvm-hostile-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

fn run_in(dir: &Path, args: &[&str]) -> ToyRun {
    toyvm_in(dir, args, &[])
}

/// Loops long enough for a few samples, in two functions.
const BUSY: &str = "\
fn spin(n: int) -> int {
    let s = 0;
    for i in 0..n { s = (s + i * 7) % 1000003; }
    return s;
}
print(spin(3000000));
";

#[test]
fn an_output_option_never_overwrites_an_input() {
    let dir = scratch("outputs");
    std::fs::write(dir.join("s.toy"), BUSY).unwrap();
    let refused = run_in(&dir, &["run", "--vmprof", "s.toy", "s.toy"]);
    assert_eq!(refused.status, Some(1), "{refused:?}");
    assert!(
        refused
            .stderr
            .contains("--vmprof s.toy would overwrite the input s.toy"),
        "{refused:?}"
    );
    assert_eq!(std::fs::read_to_string(dir.join("s.toy")).unwrap(), BUSY);
    // The same file under another name.
    let other = run_in(&dir, &["run", "--vmprof", "./s.toy", "s.toy"]);
    assert_eq!(other.status, Some(1), "{other:?}");

    let made = run_in(&dir, &["run", "--vmprof", "p.prof", "s.toy"]);
    assert_eq!(made.status, Some(0), "{made:?}");
    let profile = std::fs::read(dir.join("p.prof")).unwrap();
    let refused = run_in(&dir, &["report", "--flamegraph", "p.prof", "p.prof"]);
    assert_eq!(refused.status, Some(1), "{refused:?}");
    assert!(refused.stderr.contains("--flamegraph"), "{refused:?}");
    assert_eq!(std::fs::read(dir.join("p.prof")).unwrap(), profile);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn report_lines_reads_only_regular_files() {
    let dir = scratch("stdin-source");
    // A profile of a script read from /dev/stdin names /dev/stdin.
    let mut child = Command::new(env!("CARGO_BIN_EXE_toyvm"))
        .args(["run", "--vmprof", "p.prof", "--vmprof-lines", "/dev/stdin"])
        .current_dir(&dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(BUSY.as_bytes())
        .unwrap();
    assert!(child.wait().unwrap().success());
    // The report's stdin is a pipe nobody writes to: reading it would wait
    // for ever.
    let mut report = Command::new(env!("CARGO_BIN_EXE_toyvm"))
        .args(["report", "--lines", "p.prof"])
        .current_dir(&dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let _keep_open = report.stdin.take();
    let started = Instant::now();
    while report.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(30) {
            let _ = report.kill();
            panic!("report --lines waits on /dev/stdin");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = report.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    assert!(
        stdout.contains("(source not shown: /dev/stdin is not a regular file)"),
        "{stdout}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_colon_in_a_script_name_shows_that_scripts_lines() {
    let dir = scratch("colon");
    std::fs::write(
        dir.join("work:v2.toy"),
        BUSY.replace("% 1000003", "% 1000033"),
    )
    .unwrap();
    // The file the old name mangling pointed at, with other text.
    std::fs::write(
        dir.join("work_v2.toy"),
        BUSY.replace("% 1000003", "% 2222222"),
    )
    .unwrap();
    let made = run_in(
        &dir,
        &["run", "--vmprof", "p.prof", "--vmprof-lines", "work:v2.toy"],
    );
    assert_eq!(made.status, Some(0), "{made:?}");
    let report = run_in(&dir, &["report", "--lines", "p.prof"]);
    assert_eq!(report.status, Some(0), "{report:?}");
    assert!(report.stdout.contains("work:v2.toy:1"), "{}", report.stdout);
    assert!(report.stdout.contains("1000033"), "{}", report.stdout);
    assert!(!report.stdout.contains("2222222"), "{}", report.stdout);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_newline_in_the_script_path_keeps_the_perf_map_and_jitdump() {
    let dir = scratch("newline");
    let script = "a\nb.toy";
    std::fs::write(dir.join(script), BUSY).unwrap();
    let run = run_in(
        &dir,
        &[
            "run",
            "--jit-threshold",
            "0",
            "--perf",
            "--perf-jitdump",
            "--perf-dir",
            ".",
            script,
        ],
    );
    assert_eq!(run.status, Some(0), "{run:?}");
    assert!(run.stderr.is_empty(), "{}", run.stderr);
    let dump = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| n.starts_with("jit-"))
        .expect("a jitdump");
    let pid = dump.trim_start_matches("jit-").trim_end_matches(".dump");
    let map_path = format!("/tmp/perf-{pid}.map");
    let map = std::fs::read_to_string(&map_path).expect("the perf map");
    let _ = std::fs::remove_file(&map_path);
    assert!(
        map.lines().any(|l| l.ends_with("toy:jit:spin:a\\nb.toy:1")),
        "{map}"
    );
    // Code, not just a header (40 bytes).
    assert!(dir.join(&dump).metadata().unwrap().len() > 1000);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn disasm_jit_says_which_functions_it_leaves_out() {
    let dir = scratch("disasm");
    std::fs::write(dir.join("s.toy"), BUSY).unwrap();
    let listed = toyvm_in(
        &dir,
        &["disasm", "--jit", "s.toy"],
        &[("TOYVM_JIT_MAX_OPS", "5")],
    );
    assert_eq!(listed.status, Some(0), "{listed:?}");
    assert!(
        listed
            .stderr
            .contains("toyvm: disasm --jit: spin is not shown: "),
        "{}",
        listed.stderr
    );
    assert!(
        !listed.stdout.contains("toy:jit:spin:"),
        "{}",
        listed.stdout
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs `script` with `sh -c` in `dir`, in a mount namespace of its own
/// (so it may mount a tmpfs there), with toyvm as `$TOYVM`; stdout and
/// stderr, after asserting success.
fn in_mount_namespace(dir: &Path, script: &str) -> (String, String) {
    let output = Command::new("unshare")
        .args(["-m", "sh", "-c", script])
        .current_dir(dir)
        .env("TOYVM", env!("CARGO_BIN_EXE_toyvm"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{stdout}{stderr}");
    (stdout, stderr)
}

/// `PATH` with [`failing_perf`]'s directory first.
fn path_with_failing_perf(dir: &Path) -> String {
    format!(
        "{}:{}",
        failing_perf(dir).display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// A `perf` that answers `--version` and fails `record` without writing.
fn failing_perf(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let perf = bin.join("perf");
    std::fs::write(
        &perf,
        "#!/bin/sh\ncase \"$1\" in --version) echo 'perf version 0'; exit 0;; record) echo 'perf record: failed' >&2; exit 1;; esac\nexit 0\n",
    )
    .unwrap();
    std::fs::set_permissions(&perf, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

#[test]
fn a_failed_perf_record_is_named_and_leaves_no_old_report() {
    let dir = scratch("profile-fail");
    std::fs::write(dir.join("s.toy"), BUSY).unwrap();
    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    for old in ["perf.data", "report.txt", "flamegraph.svg"] {
        std::fs::write(out.join(old), "an earlier run's\n").unwrap();
    }
    let path = path_with_failing_perf(&dir);
    let run = toyvm_in(
        &dir,
        &["profile", "--out", "out", "s.toy"],
        &[("PATH", path.as_str())],
    );
    assert_eq!(run.status, Some(1), "{run:?}");
    assert!(run.stderr.contains("perf record failed"), "{}", run.stderr);
    assert!(!run.stderr.contains("inject"), "{}", run.stderr);
    for old in ["perf.data", "report.txt", "flamegraph.svg"] {
        assert!(!out.join(old).exists(), "{old} is still there");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_control_character_in_profile_out_is_refused() {
    let dir = scratch("profile-out");
    std::fs::write(dir.join("s.toy"), BUSY).unwrap();
    let path = path_with_failing_perf(&dir);
    let out = "x\n[report]\nsort = pid";
    let run = toyvm_in(
        &dir,
        &["profile", "--out", out, "s.toy"],
        &[("PATH", path.as_str())],
    );
    assert_eq!(run.status, Some(1), "{run:?}");
    assert!(run.stderr.contains("control character"), "{}", run.stderr);
    assert!(!dir.join(out).exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn profile_with_a_full_stderr_does_not_panic() {
    if !common::tool_or_skip("profile-full-stderr", "perf", &["--version"]) {
        return;
    }
    let work = common::PerfWork::new("profile-full-stderr");
    std::fs::write(work.path("s.toy"), BUSY).unwrap();
    let status = Command::new(env!("CARGO_BIN_EXE_toyvm"))
        .args(["profile", "--out", "out", "s.toy"])
        .current_dir(&work.dir)
        .stdout(Stdio::null())
        .stderr(
            std::fs::OpenOptions::new()
                .write(true)
                .open("/dev/full")
                .unwrap(),
        )
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(0));
    assert!(work.path("out/report.txt").exists());
    assert!(work.path("out/flamegraph.svg").exists());
}

#[test]
fn a_jitdump_that_cannot_be_mapped_leaves_no_file() {
    if !common::tool_or_skip("noexec-jitdump", "unshare", &["-m", "true"]) {
        return;
    }
    let dir = scratch("noexec");
    std::fs::write(dir.join("s.toy"), BUSY).unwrap();
    let mount = dir.join("mnt");
    std::fs::create_dir_all(&mount).unwrap();
    let script = "mount -t tmpfs -o noexec tmpfs mnt && \"$TOYVM\" run --jit-threshold 0 \
                  --perf-jitdump --perf-dir mnt s.toy && ls -A mnt";
    let (stdout, stderr) = in_mount_namespace(&dir, script);
    assert!(stderr.contains("cannot map the jitdump marker"), "{stderr}");
    // The script's output, then an empty listing of the mount.
    assert_eq!(stdout.trim(), "315", "{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A sink that fails while the script runs (a full disk) is reported once,
/// with toyvm's own prefix (it once said `perfsupport:`), and the run goes
/// on.
#[test]
fn a_full_disk_under_the_jitdump_is_one_toyvm_warning() {
    if !common::tool_or_skip("full-jitdump", "unshare", &["-m", "true"]) {
        return;
    }
    let dir = scratch("full");
    let mut script = String::new();
    for i in 0..30 {
        script += &format!(
            "fn f{i}(n: int) -> int {{ let s = 0; for i in 0..n {{ s = s + i * {i}; }} return s; }}\n"
        );
    }
    script += "let t = 0;\n";
    for i in 0..30 {
        script += &format!("t = t + f{i}(10);\n");
    }
    script += "print(t);\n";
    std::fs::write(dir.join("many.toy"), script).unwrap();
    std::fs::create_dir_all(dir.join("mnt")).unwrap();
    let (stdout, stderr) = in_mount_namespace(
        &dir,
        "mount -t tmpfs -o size=4k tmpfs mnt && \"$TOYVM\" run --jit-threshold 0 \
         --perf-jitdump --perf-dir mnt many.toy",
    );
    assert_eq!(stdout.trim(), "19575");
    let warnings: Vec<&str> = stderr.lines().collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(
        warnings[0].starts_with("toyvm: warning: jitdump: ")
            && warnings[0].contains("No space left on device"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
