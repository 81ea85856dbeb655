//! toyvm's Cranelift tier.
//!
//! [`tier_up`] makes the interpreter's tier-up hook (`vm::runtime::tier`);
//! the CLI needs nothing else but [`JitOptions`], [`disasm`] and
//! [`forget_perf_buildid_dir`]. The crate, one job per module:
//!
//! * [`tiering`]: the policy. One state per function, thresholds from
//!   [`cost`]; compile a function (and the warm callees it reaches,
//!   callees first, [`callgraph`]) when its countdown runs out at a call;
//!   its OSR variant alone when it runs out at a back-edge; everything at
//!   start with threshold 0; trampolines at start with a profiler sink.
//!   Answers the interpreter with a decision.
//! * [`compiler`]: the compile work apart from the policy: runs a request,
//!   reports actions the policy applies to the VM; on the interpreter's
//!   thread or on the `toyvm-jit` thread ([`background`]).
//! * [`translate`]: bytecode → Cranelift IR for native functions and OSR
//!   variants.
//! * [`abi`]: every signature, the import table of runtime helpers
//!   ([`helpers`]), and the hand-built IR of entry shims and trampolines.
//! * [`pipeline`]: define regions, then finalize a batch, register its
//!   unwind info, report it to the profiler sinks and install it.
//! * [`role`] and [`names`]: what a region is for, and what it is called.
//! * [`frames`]: entering and leaving a Toy frame, done by the caller of a
//!   native function (a compiled call site, an entry shim).
//! * [`code_memory`], [`system_unwind`], [`line_table`], [`layout`],
//!   [`limits`], [`stack_guard`]: the pieces the above rely on.
//!
//! Diagnostics (warnings, `--jit-stats`) go to the VM's diagnostics writer,
//! which the driver points at its stderr: the crate never prints itself.

mod abi;
mod background;
mod callgraph;
mod code_memory;
mod compiler;
mod cost;
pub mod disasm;
mod frames;
mod helpers;
mod layout;
mod limits;
mod line_table;
mod names;
mod perf_env;
mod pipeline;
mod role;
mod stack_guard;
mod system_unwind;
mod tiering;
mod translate;

pub use background::{DELAY_ENV, THREAD_NAME};
pub use perf_env::{PERF_BUILDID_DIR, forget_perf_buildid_dir};

use std::path::PathBuf;

use vm::runtime::tier::TierUp;

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

/// Test-only: `TOYVM_JITDUMP_NO_UNWIND=1` leaves the unwinding records out
/// of perf output (the negative control of `tests/perf_e2e.rs`).
pub const NO_UNWIND_ENV: &str = "TOYVM_JITDUMP_NO_UNWIND";

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
    /// `threshold` as the floor (the default tiering, see `cost`); false
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
    /// Report each compile's time on the VM's diagnostics (stderr).
    pub stats: bool,
}

/// The tier-up hook for `options`: the JIT, or, if it cannot start, a hook
/// that never compiles and says why when the run starts.
pub fn tier_up(options: JitOptions) -> Box<dyn TierUp> {
    match tiering::Jit::new(options) {
        Ok(jit) => Box::new(jit),
        Err(why) => Box::new(tiering::Disabled { why }),
    }
}
