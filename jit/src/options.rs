//! How a run wants the JIT: [`JitOptions`], the default threshold, and the
//! test-only environment switches. The lowest component of the crate:
//! every other one may read these, and this module reads nothing of them.

use std::path::PathBuf;

// ANCHOR: default_threshold
/// Default `--jit-threshold`: calls plus back-edges before a function is
/// compiled. A small function compiles in about 70 µs
/// (`bench/compile_latency.sh`; `nbody`'s `advance` about 0.6 ms), a few
/// times what the interpreter spends on 1000 calls of a small function or
/// 1000 iterations of a small loop (about 20 µs): by the time a function
/// tiers up it has shown that it runs often enough to repay the compile
/// soon, and functions run a handful of times (set-up code, error paths)
/// never pay for one.
pub const DEFAULT_THRESHOLD: u32 = 1000;
// ANCHOR_END: default_threshold

// ANCHOR: default_code_limit
/// Default `--jit-code-limit`: the most bytes of executable memory one VM's
/// JIT holds at once. Far above what any program of the benchmarks holds
/// (the largest, `warm` of `bench/large`, 5,000 functions compiled at once,
/// holds about 4 MB), so
/// by default nothing is evicted; a host running many VMs, or a program
/// that compiles without end, sets its own.
pub const DEFAULT_CODE_LIMIT: usize = 256 << 20;
// ANCHOR_END: default_code_limit

/// Parses a size for `--jit-code-limit`: bytes, or with a suffix K, M or G
/// (powers of 1024).
///
/// # Errors
/// A message naming what is wrong.
pub fn parse_size(text: &str) -> Result<usize, String> {
    let t = text.trim();
    let (digits, shift) = match t.char_indices().last() {
        Some((i, 'K' | 'k')) => (&t[..i], 10),
        Some((i, 'M' | 'm')) => (&t[..i], 20),
        Some((i, 'G' | 'g')) => (&t[..i], 30),
        _ => (t, 0),
    };
    let n: usize = digits
        .parse()
        .map_err(|_| format!("'{text}' is not a size (bytes, or a number with K, M or G)"))?;
    n.checked_mul(1usize << shift)
        .ok_or_else(|| format!("'{text}' is too large"))
}

/// Test-only: `TOYVM_NO_QUARANTINE=1` gives freed code memory to new code
/// even while a perf map is written, to show what a stale name looks like
/// (the negative control of `tests/code_cache.rs`, and the book).
pub const NO_QUARANTINE_ENV: &str = "TOYVM_NO_QUARANTINE";

/// Test-only: `TOYVM_GDB_KEEP_DEAD=1` leaves dead code registered with the
/// GDB JIT interface, to show what a stale name looks like in a debugger
/// (the negative control of `tests/gdb.rs`).
pub const GDB_KEEP_DEAD_ENV: &str = "TOYVM_GDB_KEEP_DEAD";

/// Test-only: `TOYVM_JITDUMP_NO_UNWIND=1` leaves the unwinding records out
/// of perf output (the negative control of `tests/perf_e2e.rs`).
pub const NO_UNWIND_ENV: &str = "TOYVM_JITDUMP_NO_UNWIND";

/// Test-only: `TOYVM_JIT_PANIC_IN=REGION` makes the build of the region of
/// that name (`toy:jit:f:FILE:LINE`, ...) panic, as a bug in Cranelift or
/// in an IR builder would: the run must go on with the function
/// interpreted (`codegen::panic_guard`; see `tests/jit_limits.rs`).
pub const PANIC_IN_ENV: &str = "TOYVM_JIT_PANIC_IN";

/// Test-only: `TOYVM_JIT_BACKTRACE=1` makes the `print` of a runtime
/// helper called from compiled code write a Rust backtrace to stderr first
/// (checks the `__register_frame` registration; see `tests/jit_backtrace.rs`).
pub const BACKTRACE_ENV: &str = "TOYVM_JIT_BACKTRACE";

/// How the JIT runs.
#[derive(Clone, Debug, Default)]
pub struct JitOptions {
    /// Compile after this many calls plus back-edges; `None` never compiles.
    pub threshold: Option<u32>,
    /// Scale each function's threshold by its estimated compile cost, with
    /// `threshold` as the floor (the default tiering, see `policy::cost`); false
    /// takes `threshold` literally (an explicit `--jit-threshold`).
    pub cost_model: bool,
    /// Compile on the compiler thread (`toyvm-jit`) while the interpreter
    /// keeps running (the default tiering); false compiles on the
    /// interpreter's thread when a countdown runs out. Threshold 0 always
    /// compiles everything before `<main>` runs.
    pub background: bool,
    /// Write `/tmp/perf-<pid>.map` (and build trampolines).
    pub perf_map: bool,
    /// Write `<dir>/jit-<pid>.dump` (and build trampolines).
    pub jitdump_dir: Option<PathBuf>,
    /// Publish compiled code to debuggers through the GDB JIT interface
    /// (and build trampolines, so interpreted frames are named too).
    pub gdb: bool,
    /// Run compiled code from ELF files written into `DIR/toyvm-PID/`
    /// (`--jit-elf`): native code to every tool that reads mapped files.
    pub elf_dir: Option<PathBuf>,
    /// Report each compile's time on the VM's diagnostics (stderr).
    pub stats: bool,
    /// Most bytes of executable memory held at once (`--jit-code-limit`);
    /// `None`: [`DEFAULT_CODE_LIMIT`].
    pub code_limit: Option<usize>,
}

impl JitOptions {
    /// The code limit in force.
    pub fn code_limit(&self) -> usize {
        self.code_limit.unwrap_or(DEFAULT_CODE_LIMIT)
    }
}
