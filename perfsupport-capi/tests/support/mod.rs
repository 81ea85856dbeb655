//! Shared helpers of the C API tests: the library built, C programs
//! compiled against it with the system C compiler and pkg-config, and the
//! rule for outside tools (skip loudly on a developer machine, fail under
//! `CI=true`).
//!
//! Cross-aware: when `TOYVM_TEST_RUNNER` is set (tools/aarch64-tests sets
//! it to `qemu-aarch64-static -L /usr/aarch64-linux-gnu`), the tests run
//! for another architecture under an emulator: the library is built for
//! `{ARCH}-unknown-linux-gnu`, C programs are compiled with
//! `{ARCH}-linux-gnu-gcc`, and [`program`] starts them through the runner.
//! Host tools (cargo, pkg-config, the compiler) still run natively.
#![allow(dead_code)] // each test binary uses a different subset

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the crate is inside the repository")
        .to_path_buf()
}

/// The words of `TOYVM_TEST_RUNNER` (the emulator and its arguments), or
/// `None` when it is unset or empty: programs built for this test's
/// architecture then run directly.
pub fn runner() -> Option<Vec<String>> {
    let words: Vec<String> = std::env::var("TOYVM_TEST_RUNNER")
        .ok()?
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    (!words.is_empty()).then_some(words)
}

/// The Rust target triple of this test binary when it runs under a
/// runner (`aarch64-unknown-linux-gnu`), for `cargo build --target`.
pub fn cross_target() -> Option<String> {
    runner().map(|_| format!("{}-unknown-linux-gnu", std::env::consts::ARCH))
}

/// The C compiler for this test's architecture: `cc`, or under a runner
/// the cross compiler `{ARCH}-linux-gnu-gcc`.
pub fn c_compiler() -> String {
    match runner() {
        Some(_) => format!("{}-linux-gnu-gcc", std::env::consts::ARCH),
        None => "cc".to_string(),
    }
}

/// A command that starts `path`, a program built for this test's
/// architecture (a C program, or toyvm): through the runner's words when
/// `TOYVM_TEST_RUNNER` is set, else directly.
pub fn program(path: impl AsRef<OsStr>) -> Command {
    match runner() {
        Some(words) => {
            let mut command = Command::new(&words[0]);
            command.args(&words[1..]).arg(path);
            command
        }
        None => Command::new(path),
    }
}

/// The directory holding `libperfsupport.so` and `libperfsupport.a`:
/// Cargo's release directory, where it built this test (`DIR/deps/TEST-HASH`),
/// so it holds wherever `CARGO_TARGET_DIR` points, and for a `--target`
/// build it is `target/TRIPLE/release` (under qemu, `current_exe` is the
/// emulated program's path).
pub fn library_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    let deps = exe.parent().expect("the test is in deps/");
    deps.parent()
        .expect("deps/ is in the release directory")
        .to_path_buf()
}

/// True (and a loud message) when `tool` is missing and this is not CI;
/// panics when it is missing under `CI=true`.
pub fn missing(tool: &str, probe: &[&str]) -> bool {
    let works = Command::new(tool)
        .args(probe)
        .output()
        .is_ok_and(|o| o.status.success());
    if works {
        return false;
    }
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("`{tool}` is required under CI=true (.ci/run installs it)");
    }
    let banner = "=".repeat(72);
    eprintln!("{banner}\nSKIPPING: `{tool}` is not usable on this machine\n{banner}");
    true
}

/// Builds `libperfsupport.so` / `.a` once per test binary (cargo does not
/// build a cdylib-only library for integration tests), for this test's
/// architecture ([`cross_target`] under a runner).
pub fn build_library() {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let output = Command::new(cargo)
            .args(["build", "--release", "-p", "perfsupport-capi"])
            .args(cross_target().iter().flat_map(|t| ["--target", t]))
            .current_dir(repo_root())
            .output()
            .expect("run cargo build");
        assert!(
            output.status.success(),
            "cargo build -p perfsupport-capi failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    });
}

/// `pkg-config <args> perfsupport`, split into arguments, with the
/// library directory where Cargo built it ([`library_dir`]; the `.pc`
/// file's own `libdir` assumes `target/`).
pub fn pkg_config(args: &[&str]) -> Vec<String> {
    let output = Command::new("pkg-config")
        .args(args)
        .arg(format!(
            "--define-variable=libdir={}",
            library_dir().display()
        ))
        .arg("perfsupport")
        .env("PKG_CONFIG_PATH", Path::new(env!("CARGO_MANIFEST_DIR")))
        .output()
        .expect("run pkg-config");
    assert!(
        output.status.success(),
        "pkg-config failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .expect("UTF-8")
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// Compiles `sources` into `out` with `cc` ([`c_compiler`]: the cross
/// compiler under a runner), warnings as errors, frame pointers kept, and
/// `link` (usually pkg-config's flags) last. `None` when the compiler or
/// pkg-config is missing off CI.
pub fn compile(sources: &[PathBuf], out: &Path, link: &[String]) -> Option<PathBuf> {
    if missing("pkg-config", &["--version"]) {
        return None;
    }
    let mut flags: Vec<String> = ["-O2", "-g", "-fno-omit-frame-pointer", "-Wextra"]
        .map(String::from)
        .into();
    flags.extend(pkg_config(&["--cflags"]));
    build(&c_compiler(), &flags, sources, out, link)
}

/// Compiles `sources` into `out` with `compiler` and `flags`, against the
/// header's directory and the shared library (no pkg-config: tcc reads
/// plain `-I`/`-L`). `None` when the compiler is missing off CI. Under a
/// runner, `gcc` and `cc` mean the cross compiler ([`c_compiler`]); any
/// other compiler is skipped with a message (`None`), as there is no cross
/// build of it here.
pub fn compile_with(
    compiler: &str,
    flags: &[&str],
    sources: &[PathBuf],
    out: &Path,
) -> Option<PathBuf> {
    let cross = c_compiler();
    let compiler = match (runner(), compiler) {
        (None, _) => compiler,
        (Some(_), "gcc" | "cc") => cross.as_str(),
        (Some(_), other) => {
            eprintln!("SKIPPING `{other}` under TOYVM_TEST_RUNNER: no cross build of it");
            return None;
        }
    };
    let mut all: Vec<String> = flags.iter().map(|f| f.to_string()).collect();
    all.push(format!(
        "-I{}",
        repo_root().join("perfsupport-capi/include").display()
    ));
    let link = [
        format!("-L{}", library_dir().display()),
        format!("-Wl,-rpath,{}", library_dir().display()),
        "-lperfsupport".to_string(),
    ];
    build(compiler, &all, sources, out, &link)
}

/// `compiler FLAGS -Wall -Werror SOURCES -o OUT LINK`, asserting success,
/// after building the library.
fn build(
    compiler: &str,
    flags: &[String],
    sources: &[PathBuf],
    out: &Path,
    link: &[String],
) -> Option<PathBuf> {
    if missing(compiler, &["-v"]) {
        return None;
    }
    build_library();
    let output = Command::new(compiler)
        .args(flags)
        .args(["-Wall", "-Werror"])
        .args(sources)
        .arg("-o")
        .arg(out)
        .args(link)
        .output()
        .unwrap_or_else(|e| panic!("run {compiler}: {e}"));
    assert!(
        output.status.success(),
        "{compiler} {flags:?} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    Some(out.to_path_buf())
}

/// `perf` with a private build-id cache in `dir`, run in `dir`.
pub fn perf(dir: &Path) -> Command {
    let config = dir.join("perfconfig");
    if !config.exists() {
        let cache = dir.join("buildid-cache");
        std::fs::write(&config, format!("[buildid]\n\tdir = {}\n", cache.display()))
            .expect("write perfconfig");
    }
    let mut command = Command::new("perf");
    command.env("PERF_CONFIG", &config).current_dir(dir);
    command
}

/// In `dir`: `perf record -k 1 --call-graph dwarf` of `program ARGS` into
/// `perf.data`, then `perf inject --jit` into `perf.jit.data`. The
/// recording's output (the program's stdout).
pub fn record_dwarf_and_inject(dir: &Path, program: &Path, args: &[&str]) -> Output {
    let record = run_ok(
        perf(dir)
            .args([
                "record",
                "-q",
                "-k",
                "1",
                "-e",
                "cpu-clock",
                "--call-graph",
                "dwarf",
            ])
            .args(["-o", "perf.data"])
            .arg(program)
            .args(args),
    );
    run_ok(perf(dir).args(["inject", "--jit", "-i", "perf.data", "-o", "perf.jit.data"]));
    record
}

/// The mini-JIT, linked against the shared library (start it with
/// [`program`]).
pub fn minijit(dir: &Path) -> Option<PathBuf> {
    let source = repo_root().join("examples/c-minijit/minijit.c");
    compile(&[source], &dir.join("minijit"), &pkg_config(&["--libs"]))
}

/// The packed-code example, linked against the shared library.
pub fn packed(dir: &Path) -> Option<PathBuf> {
    let source = repo_root().join("examples/c-minijit/packed.c");
    compile(&[source], &dir.join("packed"), &pkg_config(&["--libs"]))
}

/// The code-file example (`elfjit.c`), linked against the shared library.
pub fn elfjit(dir: &Path) -> Option<PathBuf> {
    let source = repo_root().join("examples/c-minijit/elfjit.c");
    compile(&[source], &dir.join("elfjit"), &pkg_config(&["--libs"]))
}

/// Runs `command`, asserting success; its output.
pub fn run_ok(command: &mut Command) -> Output {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"));
    assert_success(command, &output);
    output
}

/// Fails with the command and its output unless it exited with 0.
fn assert_success(command: &Command, output: &Output) {
    assert!(
        output.status.success(),
        "{command:?} failed ({}):\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Removes `/tmp/perf-PID.map`, if any. perf needs a map after its process
/// exits, so nothing else removes it; once the process is over and its map
/// read, the map is ours to remove (unless the pid already went to a newer
/// process: rare, and only that map is lost).
fn remove_perf_map(pid: impl std::fmt::Display) {
    let _ = std::fs::remove_file(format!("/tmp/perf-{pid}.map"));
}

/// [`run_ok`] for a C program run directly (not under perf, which needs
/// the map after the run): removes the perf map it wrote, which nobody
/// reads. Under an emulator the program keeps the runner's pid.
pub fn run_ok_without_map(command: &mut Command) -> Output {
    let child = command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"));
    let pid = child.id();
    let output = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"));
    remove_perf_map(pid);
    assert_success(command, &output);
    output
}

/// A scratch directory that does not start with `/tmp/perf-`; see
/// [`Scratch`].
pub fn scratch(tag: &str) -> Scratch {
    Scratch(
        tempfile::Builder::new()
            .prefix(&format!("capi-{tag}-"))
            .tempdir()
            .expect("temp dir"),
    )
}

/// A test's scratch directory. Dropped, it removes the directory and the
/// perf map (`/tmp/perf-PID.map`) of every process recorded in a
/// `*.data` file in it: perf needs a map after its process exits, so
/// nothing else removes them, and the suite would leave a dozen behind.
pub struct Scratch(tempfile::TempDir);

impl Scratch {
    /// The directory.
    pub fn path(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        for data in perf_data_files(self.path()) {
            let Ok(out) = perf(self.path())
                .args(["script", "-F", "pid", "-i"])
                .arg(&data)
                .output()
            else {
                continue;
            };
            let pids: std::collections::BTreeSet<&str> = std::str::from_utf8(&out.stdout)
                .unwrap_or("")
                .split_whitespace()
                .collect();
            pids.into_iter().for_each(remove_perf_map);
        }
    }
}

/// The `*.data` files under `dir`, at any depth.
fn perf_data_files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            found.extend(perf_data_files(&path));
        } else if path.extension().is_some_and(|e| e == "data") {
            found.push(path);
        }
    }
    found
}
