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
//!
//! The script is compiled first: a compile error stops here, before perf.
//!
//! # Files
//!
//! `DIR` and `DIR/jitdump` are created with mode 0755 and must be real
//! directories (not symlinks) owned by us and writable by nobody else, so
//! nobody else can plant a symlink in them. Every file toyvm writes there
//! (`perfconfig`, the report, the flame graph) is created by
//! `perfsupport::safe_file` (never through a symlink, mode 0644 whatever
//! the umask, close-on-exec), and a symlink at any output path stops the
//! command before perf runs; the files perf writes itself (`perf.data`,
//! `perf.jit.data`, the injected objects) must not be symlinks either, and
//! perf runs with a umask of at least 022, so none of them is writable by
//! others and perf never reads a `perfconfig` someone else could change.

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use perfsupport::create_output_file;

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

/// The files `toyvm profile` and perf write in its directory.
const PERF_DATA: &str = "perf.data";
const OLD_PERF_DATA: &str = "perf.data.old";
const INJECTED_DATA: &str = "perf.jit.data";
const REPORT: &str = "report.txt";
const FLAMEGRAPH: &str = "flamegraph.svg";
const PERF_CONFIG: &str = "perfconfig";
/// Mode of the directories toyvm profile creates: `rwxr-xr-x`.
const DIR_MODE: u32 = 0o755;
const FIREFOX: &str = "perf-script.txt";
/// Every file perf and `toyvm profile` write in `--out` (the perfconfig
/// aside): an earlier run's are removed before recording.
const RUN_OUTPUTS: [&str; 6] = [
    PERF_DATA,
    OLD_PERF_DATA,
    INJECTED_DATA,
    REPORT,
    FLAMEGRAPH,
    FIREFOX,
];

impl ProfileArgs {
    /// What `toyvm profile` reads and writes (see [`crate::files`]): the
    /// files it and perf write in `--out`.
    pub fn files(&self) -> crate::files::Files {
        crate::files::Files {
            inputs: vec![self.script.clone()],
            outputs: (RUN_OUTPUTS.iter().chain([&PERF_CONFIG]))
                .map(|name| crate::files::Output {
                    option: "--out",
                    path: self.out.join(name),
                })
                .collect(),
        }
    }
}

/// Runs `toyvm profile`; errors are one `error: ...` line.
pub fn run(args: ProfileArgs) -> Result<u8, ()> {
    let fail = |why: String| say!("error: toyvm profile: {why}");
    // A script that does not compile is not worth recording.
    crate::load(&args.script)?;
    check_perf().map_err(fail)?;
    // Files perf creates (perf.data, the injected objects, .debug) get
    // mode 0644/0755 at most, whatever the caller's umask.
    // SAFETY: umask only changes this process's file-creation mask.
    unsafe { libc::umask(libc::umask(0o022) | 0o022) };
    let dir = prepare_dir(&args.out).map_err(fail)?;
    let perf = |what: &str| {
        let mut command = Command::new("perf");
        command.arg(what).env("PERF_CONFIG", dir.join(PERF_CONFIG));
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
    write_new(&dir.join(REPORT), &text).map_err(fail)?;

    let mut script = perf("script");
    script.arg("-i").arg(dir.join(INJECTED_DATA));
    let stacks = quiet(&mut script, "perf script").map_err(fail)?;
    write_new(&dir.join(FIREFOX), &stacks).map_err(fail)?;
    // The flame graph counts samples: without the period field (which
    // inferno would add up instead, nanoseconds for cpu-clock).
    let mut script = perf("script");
    script
        .args(["-F", "comm,pid,tid,time,ip,sym,dso", "-i"])
        .arg(dir.join(INJECTED_DATA));
    let samples = quiet(&mut script, "perf script").map_err(fail)?;
    let title = format!("toyvm profile {}", args.script.display());
    flamegraph(&samples, &title, &dir.join(FLAMEGRAPH)).map_err(fail)?;

    say!(
        "toyvm profile: wrote {} (perf report) and {} (flame graph); perf data in {}",
        dir.join(REPORT).display(),
        dir.join(FLAMEGRAPH).display(),
        dir.join(INJECTED_DATA).display()
    );
    say!(
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
    // Level 2 (the kernel's default) lets a user profile their own
    // processes in user space, which is all this needs: perf leaves the
    // kernel's samples out by itself. Above 2 (Debian's 3) only root may.
    match paranoid {
        Some(level) if level > 2 && !root => Err(format!(
            "perf may not profile: kernel.perf_event_paranoid is {level}; allow it with `sudo sysctl kernel.perf_event_paranoid=2` (or run as root)"
        )),
        _ => Ok(()),
    }
}

/// Creates `dir` and its perf config; returns it as an absolute path (perf
/// runs the script from the current directory but resolves config paths
/// itself).
fn prepare_dir(dir: &Path) -> Result<PathBuf, String> {
    if dir.to_string_lossy().chars().any(char::is_control) {
        return Err(format!(
            "the output directory {:?} has a control character in its name",
            dir.display().to_string()
        ));
    }
    private_dir(dir)?;
    let dir = std::fs::canonicalize(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    private_dir(&dir.join("jitdump"))?;
    // Old runs' jitdumps would be injected again: start clean.
    if let Ok(entries) = std::fs::read_dir(dir.join("jitdump")) {
        for entry in entries.flatten() {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    // perf's files, and ours (refused again when created, but a run that
    // would end with a refusal is better not started). An earlier run's
    // go: if perf record fails now, no old perf.data may pass for this
    // run's, nor an old report or flame graph stay behind as if new.
    for output in RUN_OUTPUTS {
        let path = dir.join(output);
        not_a_symlink(&path)?;
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(format!("cannot remove the old {}: {e}", path.display()));
            }
            _ => {}
        }
    }
    write_new(&dir.join(PERF_CONFIG), perf_config(&dir)?.as_bytes())?;
    Ok(dir)
}

/// The perf config of a run in `dir`: its build-id cache inside `dir`.
///
/// The path is a quoted value (perf reads its config like git: `"` and
/// `\\` escaped inside quotes, `#` and `;` start a comment outside them).
/// A control character is refused: a newline in `--out` once let a
/// directory name add sections to this file.
fn perf_config(dir: &Path) -> Result<String, String> {
    let cache = dir.join(".debug");
    let text = cache
        .to_str()
        .ok_or_else(|| format!("{} is not valid UTF-8", cache.display()))?;
    if text.chars().any(char::is_control) {
        return Err(format!(
            "the output directory {:?} has a control character in its name",
            dir.display().to_string()
        ));
    }
    let quoted = text.replace('\\', "\\\\").replace('"', "\\\"");
    Ok(format!("[buildid]\n\tdir = \"{quoted}\"\n"))
}

/// Makes sure `dir` is a directory (not a symlink) that we own and nobody
/// else may write, creating it (and its parents) with [`DIR_MODE`].
fn private_dir(dir: &Path) -> Result<(), String> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)
        .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let meta = std::fs::symlink_metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if !meta.is_dir() {
        Err(format!("{} is not a directory (a symlink?)", dir.display()))
    } else if meta.uid() != me {
        Err(format!("{} belongs to another user", dir.display()))
    } else if meta.mode() & 0o022 != 0 {
        Err(format!(
            "{} is writable by others (mode {:o}): anyone could plant files in it",
            dir.display(),
            meta.mode() & 0o777
        ))
    } else {
        Ok(())
    }
}

/// Refuses a symlink at `path` (perf would write through it; toyvm's own
/// files are created by `write_new`, which refuses one anyway).
fn not_a_symlink(path: &Path) -> Result<(), String> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => Err(format!(
            "{} is a symlink: refusing to let perf write through it",
            path.display()
        )),
        _ => Ok(()),
    }
}

/// Writes `bytes` to a new file at `path` created safely (see the module
/// docs); a file of ours already there is replaced.
fn write_new(path: &Path, bytes: &[u8]) -> Result<(), String> {
    use std::io::Write;
    create_output_file(path)
        .and_then(|mut file| file.write_all(bytes))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
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
        create_output_file(svg).map_err(|e| format!("cannot create {}: {e}", svg.display()))?;
    let mut options = inferno::flamegraph::Options::default();
    options.title = title.to_owned();
    inferno::flamegraph::from_reader(
        &mut options,
        folded.as_slice(),
        std::io::BufWriter::new(file),
    )
    .map_err(|e| format!("cannot draw {}: {e}", svg.display()))
}
