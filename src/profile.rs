//! `toyvm profile [--out DIR] SCRIPT [ARGS]...`: one command that profiles
//! a script with Linux `perf`, native and Toy frames together.
//!
//! It runs, with `PERF_CONFIG` pointing at `DIR/perfconfig` (so perf's
//! build-id cache goes to `DIR/.debug`, not `~/.debug`):
//!
//! 1. `perf record -k 1 -e cpu-clock -F 499 --call-graph dwarf,32768 -o
//!    DIR/perf.data -- toyvm run --perf-jitdump --perf-dir DIR/jitdump
//!    SCRIPT ARGS...`. DWARF call graphs, because the jitdump carries
//!    unwind tables for every compiled region and perf then unwinds through
//!    JIT code, trampolines and the Rust interpreter alike, with no
//!    assumption about frame pointers in generated code; `-k 1` (the
//!    monotonic clock) is what `perf inject --jit` needs to match the
//!    jitdump's timestamps. 499 Hz keeps the stack copies (32 KiB each, deep
//!    enough for hundreds of interpreted calls) to about 16 MB/s;
//! 2. `perf inject --jit` into `DIR/perf.jit.data` (one ELF object per
//!    compiled region, with symbols, line tables and unwind info);
//! 3. `perf report --stdio --no-children` into `DIR/report.txt`;
//! 4. `perf script`, folded by inferno's `collapse-perf`, drawn by inferno's
//!    flame graph into `DIR/flamegraph.svg`; its text is also kept as
//!    `DIR/perf-script.txt`, which the Firefox Profiler
//!    (<https://profiler.firefox.com>) opens as it is.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use clap::Args;

/// Options of `toyvm profile`.
#[derive(Args)]
pub struct ProfileArgs {
    /// Where to put the report, the flame graph and perf's data.
    #[arg(long, value_name = "DIR", default_value = "toyvm-profile")]
    out: PathBuf,

    /// The script (`*.toy`).
    script: PathBuf,

    /// Arguments for the script, returned by `args()`.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<String>,
}

/// The files `toyvm profile` writes in its directory.
const PERF_DATA: &str = "perf.data";
const INJECTED_DATA: &str = "perf.jit.data";
const REPORT: &str = "report.txt";
const FLAMEGRAPH: &str = "flamegraph.svg";
const FIREFOX: &str = "perf-script.txt";

/// Runs `toyvm profile`; errors are one `error: ...` line.
pub fn run(args: ProfileArgs) -> Result<u8, ()> {
    let fail = |why: String| eprintln!("error: toyvm profile: {why}");
    check_perf().map_err(fail)?;
    let dir = prepare_dir(&args.out).map_err(fail)?;
    let perf = |what: &str| {
        let mut command = Command::new("perf");
        command.arg(what).env("PERF_CONFIG", dir.join("perfconfig"));
        command
    };
    let toyvm =
        std::env::current_exe().map_err(|e| fail(format!("cannot find toyvm itself: {e}")))?;

    let mut record = perf("record");
    record
        .args([
            "-k",
            "1",
            "-e",
            "cpu-clock",
            "-F",
            "499",
            "--call-graph",
            "dwarf,32768",
            "-o",
        ])
        .arg(dir.join(PERF_DATA))
        .arg("--")
        .arg(&toyvm)
        .args(["run", "--perf-jitdump", "--perf-dir"])
        .arg(dir.join("jitdump"))
        .arg(&args.script)
        .args(&args.args);
    // The script's own output and errors go to the terminal as usual.
    let recorded = record
        .status()
        .map_err(|e| fail(format!("cannot run perf record: {e}")))?;
    if !dir.join(PERF_DATA).exists() {
        fail(format!("perf record failed ({recorded}) and wrote no data"));
        return Err(());
    }

    let mut inject = perf("inject");
    inject
        .arg("--jit")
        .arg("-i")
        .arg(dir.join(PERF_DATA))
        .arg("-o")
        .arg(dir.join(INJECTED_DATA));
    quiet(&mut inject, "perf inject --jit").map_err(fail)?;

    let mut report = perf("report");
    report
        .args(["--stdio", "--no-children", "-i"])
        .arg(dir.join(INJECTED_DATA));
    let text = quiet(&mut report, "perf report").map_err(fail)?;
    std::fs::write(dir.join(REPORT), text)
        .map_err(|e| fail(format!("cannot write {}: {e}", dir.join(REPORT).display())))?;

    let mut script = perf("script");
    script.arg("-i").arg(dir.join(INJECTED_DATA));
    let stacks = quiet(&mut script, "perf script").map_err(fail)?;
    std::fs::write(dir.join(FIREFOX), &stacks)
        .map_err(|e| fail(format!("cannot write {}: {e}", dir.join(FIREFOX).display())))?;
    let title = format!("toyvm profile {}", args.script.display());
    flamegraph(&stacks, &title, &dir.join(FLAMEGRAPH)).map_err(fail)?;

    eprintln!(
        "toyvm profile: wrote {} (perf report) and {} (flame graph); perf data in {}",
        dir.join(REPORT).display(),
        dir.join(FLAMEGRAPH).display(),
        dir.join(INJECTED_DATA).display()
    );
    eprintln!(
        "toyvm profile: for the Firefox Profiler, open {} at https://profiler.firefox.com, or run `samply import {}`",
        dir.join(FIREFOX).display(),
        dir.join(PERF_DATA).display()
    );
    Ok(recorded.code().map_or(1, |c| u8::try_from(c).unwrap_or(1)))
}

/// Fails with advice if perf is missing or may not profile.
fn check_perf() -> Result<(), String> {
    let version = Command::new("perf")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if !version.is_ok_and(|s| s.success()) {
        return Err(
            "the `perf` command is missing; install it (Debian: apt-get install linux-perf; Ubuntu: linux-tools-$(uname -r))".into(),
        );
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let paranoid = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok());
    match paranoid {
        Some(level) if level > 1 && !root => Err(format!(
            "perf may not profile: kernel.perf_event_paranoid is {level}; allow it with `sudo sysctl kernel.perf_event_paranoid=1` (or run as root)"
        )),
        _ => Ok(()),
    }
}

/// Creates `dir` and its perf config; returns it as an absolute path (perf
/// runs the script from the current directory but resolves config paths
/// itself).
fn prepare_dir(dir: &Path) -> Result<PathBuf, String> {
    std::fs::create_dir_all(dir.join("jitdump"))
        .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let dir = std::fs::canonicalize(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    // Old runs' jitdumps would be injected again: start clean.
    if let Ok(entries) = std::fs::read_dir(dir.join("jitdump")) {
        for entry in entries.flatten() {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    let config = format!("[buildid]\n\tdir = {}\n", dir.join(".debug").display());
    std::fs::write(dir.join("perfconfig"), config)
        .map_err(|e| format!("cannot write {}: {e}", dir.join("perfconfig").display()))?;
    Ok(dir)
}

/// Runs `command`, returning its stdout; its stderr only on failure.
fn quiet(command: &mut Command, what: &str) -> Result<Vec<u8>, String> {
    let output = command
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {what}: {e}"))?;
    if output.status.success() {
        Ok(output.stdout)
    } else {
        Err(format!(
            "{what} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// Folds `perf script` output and draws it into `svg`.
fn flamegraph(perf_script: &[u8], title: &str, svg: &Path) -> Result<(), String> {
    use inferno::collapse::Collapse;
    let mut folded = Vec::new();
    inferno::collapse::perf::Folder::from(inferno::collapse::perf::Options::default())
        .collapse(perf_script, &mut folded)
        .map_err(|e| format!("cannot fold perf's stacks: {e}"))?;
    if folded.is_empty() {
        return Err("perf recorded no samples: nothing to draw".into());
    }
    let file =
        std::fs::File::create(svg).map_err(|e| format!("cannot create {}: {e}", svg.display()))?;
    let mut options = inferno::flamegraph::Options::default();
    options.title = title.to_owned();
    inferno::flamegraph::from_reader(
        &mut options,
        folded.as_slice(),
        std::io::BufWriter::new(file),
    )
    .map_err(|e| format!("cannot draw {}: {e}", svg.display()))
}
