//! A compile that panics (a bug in Cranelift or in an IR builder) falls
//! back to the interpreter, on every architecture: the panic becomes that
//! region's compile error (`jit/src/codegen/panic_guard.rs`), one warning
//! says so, and the output is the interpreter's. Without the guard the
//! panic unwinds into `interp_entry` or a runtime helper, which are
//! `extern "C"`, and the process aborts ("panic in a function that cannot
//! unwind"), or, on the compiler thread, the thread dies.
//!
//! `TOYVM_JIT_PANIC_IN=REGION` (test-only) makes the build of that region
//! panic: each kind of region, in each tier that makes it, compiled on the
//! interpreter's thread (under `interp_entry` when called from compiled
//! code) and on the background thread.

mod common;

/// `(region, flags, script and its arguments)`: each kind of region, on
/// the interpreter's thread and (the default tier) on the compiler thread.
const CASES: &[(&str, &[&str], &[&str])] = &[
    (
        "toy:jit:middle:tests/gdb/stepi.toy:11",
        &["--jit-threshold", "0"],
        STEPI,
    ),
    (
        "toy:jit:leaf:tests/gdb/stepi.toy:7",
        &["--jit-threshold", "5"],
        STEPI,
    ),
    (
        "toy:jit-osr:outer:tests/gdb/stepi.toy:19",
        &["--jit-threshold", "5"],
        STEPI,
    ),
    (
        "toy:jit-entry:leaf:tests/gdb/stepi.toy:7",
        &["--jit-threshold", "5"],
        STEPI,
    ),
    (
        "toy:interp:cold:tests/gdb/stepi.toy:35",
        &["--perf", "--jit-threshold", "5"],
        STEPI,
    ),
    (
        "toy:jit:leaf:tests/gdb/stepi.toy:7",
        &["--jit-elf", "--jit-threshold", "0"],
        STEPI,
    ),
    // The default tier compiles spin's loop on the compiler thread.
    (
        "toy:jit-osr:spin:tests/gdb/hot.toy:5",
        &[],
        &["tests/gdb/hot.toy", "2000000"],
    ),
];

const STEPI: &[&str] = &["tests/gdb/stepi.toy"];

#[test]
fn a_compile_that_panics_leaves_the_function_interpreted_and_the_run_goes_on() {
    let dir = tempfile::Builder::new()
        .prefix("toyvm-jit-panic-")
        .tempdir()
        .expect("temp dir");
    let perf_dir = dir.path().to_str().expect("UTF-8").to_string();
    for &(region, flags, script) in CASES {
        let mut interpreted = vec!["run", "--no-jit"];
        interpreted.extend(script);
        let interpreted = common::toyvm(&interpreted);
        assert_eq!(interpreted.status, Some(0), "{}", interpreted.stderr);
        let mut args = vec!["run"];
        args.extend(flags);
        if flags.contains(&"--jit-elf") {
            args.extend(["--perf-dir", &perf_dir]);
        }
        args.extend(script);
        let run = common::toyvm_in(
            &common::repo_root(),
            &args,
            &[("TOYVM_JIT_PANIC_IN", region)],
        );
        let _ = std::fs::remove_file(format!("/tmp/perf-{}.map", run.pid));
        let case = format!("{region} with {flags:?}");
        assert_eq!(run.status, Some(0), "{case}: {}", run.stderr);
        assert_eq!(run.stdout, interpreted.stdout, "{case}");
        let warnings: Vec<&str> = run.stderr.lines().collect();
        assert_eq!(
            warnings.len(),
            1,
            "{case}: one warning and nothing else (no panic message):\n{}",
            run.stderr
        );
        assert!(
            warnings[0].starts_with("toyvm: warning: JIT: ")
                && warnings[0].contains(&format!(
                    "{region}: the compiler panicked: TOYVM_JIT_PANIC_IN asked for a panic in {region}"
                )),
            "{case}: {}",
            warnings[0]
        );
    }
}
