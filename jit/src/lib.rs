//! toyvm's Cranelift tier.
//!
//! [`tier_up`] makes the interpreter's tier-up hook (`vm::abi::TierUp`);
//! the CLI needs nothing else but [`JitOptions`], [`disasm`] and
//! [`forget_perf_buildid_dir`]. The crate is five components, one folder
//! each, whose edges go one way (top to bottom; `tests/architecture.rs`
//! checks the `use` graph):
//!
//! | component | folder | job |
//! |---|---|---|
//! | policy | `policy` | when to compile what: one state per function, thresholds from `policy::cost`, answers to the interpreter |
//! | disasm | [`disasm`] | `disasm --jit`: drives the compiler and renders its listings |
//! | compiler | `compiler` | runs one request (a batch of functions, an OSR variant, the trampolines, an eviction), on the interpreter's thread or the `toyvm-jit` thread; owns Cranelift, the profiler outputs and the code cache's bookkeeping |
//! | translate | `translate` | bytecode → Cranelift IR for native functions and OSR variants, and the compile budget (`translate::limits`) |
//! | code memory and publishing | `codegen` | define regions, finish a batch: finalize, unwind registration, profiler sinks, install; free a dead chunk (the process-wide code arena) |
//! | abi and helpers | `abi` | signatures, the runtime helpers and their import table, entry shims and trampolines, entering a Toy frame, the stack check |
//! | options | `options` | [`JitOptions`], the default threshold, the test-only switches |
//!
//! The VM is seen only through `vm::abi` and `vm::bytecode`.
//! Diagnostics (warnings, `--jit-stats`) go to the VM's diagnostics writer,
//! which the driver points at its stderr: the crate never prints itself.

mod abi;
mod codegen;
mod compiler;
pub mod disasm;
mod options;
mod policy;
mod translate;

pub use codegen::perf_env::{PERF_BUILDID_DIR, forget_perf_buildid_dir};
pub use compiler::background::{DELAY_ENV, THREAD_NAME};
pub use options::{
    BACKTRACE_ENV, DEFAULT_CODE_LIMIT, DEFAULT_THRESHOLD, JitOptions, NO_UNWIND_ENV, parse_size,
};

use vm::abi::TierUp;

/// The tier-up hook for `options`: the JIT, or, if it cannot start, a hook
/// that never compiles and says why when the run starts.
pub fn tier_up(options: JitOptions) -> Box<dyn TierUp> {
    match policy::Jit::new(options) {
        Ok(jit) => Box::new(jit),
        Err(why) => Box::new(policy::Disabled { why }),
    }
}
