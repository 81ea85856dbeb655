//! Keeps cranelift-jit from writing a perf map of its own.
//!
//! cranelift-jit 0.135 appends a line to `/tmp/perf-<pid>.map` for every
//! function it defines whenever the environment variable
//! [`PERF_BUILDID_DIR`] is set, which `perf record` does for the program it
//! runs. It opens that file with `O_CREAT | O_APPEND`, mode 0666, following
//! symlinks, and `.unwrap()`s the result: a planted symlink gets appended
//! to, a directory at the path panics inside compiled-code setup, and the
//! lines duplicate (under other names) the ones toyvm's own perf map, made
//! by perfsupport's safe writer, already has. The variable is the only
//! switch cranelift-jit reads (`JITModule::record_function_for_perf`), so
//! the process must not have it: [`forget_perf_buildid_dir`] removes it at
//! startup, and the JIT refuses to start while it is set
//! (`CodeGen::new`). Since the pipeline places code itself (`relocate`),
//! cranelift-jit defines no function and so writes no line either way;
//! the guard stays for an embedder whose own cranelift-jit module shares
//! the process.

/// The variable cranelift-jit checks before writing its perf map.
pub const PERF_BUILDID_DIR: &str = "PERF_BUILDID_DIR";

// ANCHOR: forget
/// Removes [`PERF_BUILDID_DIR`] from this process's environment, so that
/// the JIT can start under `perf record`. Nothing in toyvm reads it; perf
/// sets it again for any program it runs.
///
/// # Safety
/// No other thread may exist yet (or read the environment concurrently):
/// call it first thing in `main`, as `std::env::remove_var` requires.
pub unsafe fn forget_perf_buildid_dir() {
    // SAFETY: the caller's contract (single-threaded).
    unsafe { std::env::remove_var(PERF_BUILDID_DIR) };
}
// ANCHOR_END: forget

/// An error if cranelift-jit would write its own perf map in this process.
pub(crate) fn check_no_cranelift_perf_map() -> Result<(), String> {
    match std::env::var_os(PERF_BUILDID_DIR) {
        None => Ok(()),
        Some(_) => Err(format!(
            "{PERF_BUILDID_DIR} is set, and cranelift-jit would then write \
             /tmp/perf-PID.map unsafely (call jit::forget_perf_buildid_dir at startup)"
        )),
    }
}
