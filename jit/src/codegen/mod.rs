//! Code memory and publishing: Cranelift's module and ISA, the code memory
//! regions live in, and the batch pipeline that makes a batch final and
//! tells everyone about it (the system unwinder, the profiler sinks, the
//! vmprof line tables), then hands the entry points back.
//!
//! * [`pipeline`]: define regions, then finish a batch ([`pipeline::CodeGen`]).
//! * [`role`] and [`names`]: what a region is for, and what it is called.
//! * [`line_table`]: bytecode positions in the IR, and the line table of a
//!   finished region.
//! * [`listing`]: a finished region's IR and bytes (`disasm --jit`).
//! * [`arena`]: the process-wide reservation code chunks come from, and
//!   the perf map's quarantine.
//! * [`relocate`]: a region's code patched for the address it runs at.
//! * [`epilogue_cfi`]: the call-frame rows Cranelift leaves out, at each
//!   `ret`.
//! * [`icache`]: new code made visible to instruction fetch (aarch64).
//! * [`panic_guard`]: a compile that panics is a failed compile, not an
//!   abort.
//! * [`code_memory`], [`system_unwind`], [`perf_env`]: the memory, the
//!   `__register_frame` registrations, and cranelift-jit's own perf map.
//!
//! This component does not translate: it takes the IR a builder writes
//! ([`pipeline::CodeGen::define`]) and knows nothing of the policy.

pub mod arena;
pub mod code_memory;
pub mod epilogue_cfi;
pub mod icache;
pub mod line_table;
pub mod listing;
pub mod names;
pub mod panic_guard;
pub mod perf_env;
pub mod pipeline;
pub mod relocate;
pub mod role;
pub mod system_unwind;
