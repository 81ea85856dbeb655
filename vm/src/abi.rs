//! Exactly what an execution tier (a JIT) may touch, in one place: the
//! entry and OSR signatures and their status codes, the frame-record
//! layout, the byte offsets of the [`Vm`] fields generated code reads and
//! writes, the heap's object layout, the interpreter's entry and slow-op
//! runner, the ways to record an error, and the tier-up protocol
//! ([`TierUp`]) through which the interpreter hands hot code to a tier.
//! Everything else about the [`Vm`] is private to this crate.
//!
//! This module defines nothing but [`offsets`]: it re-exports the pieces
//! from the execution core ([`crate::interp`]) and the runtime services,
//! so that a tier depends on one façade, not on the VM's layout of
//! modules.
//!
//! # The entry ABI
//!
//! Every Toy function is called through [`EntryFn`]:
//! `unsafe extern "C" fn(vm: *mut Vm, func: u32, base: *mut u64) -> u32`.
//! `base` points at the callee's register 0 on the value stack, where the
//! caller has already written the arguments; the callee leaves its result
//! there too. The return value is a status: [`STATUS_OK`] or
//! [`STATUS_ERROR`]. On error the failing function has recorded the error
//! ([`Vm::fail`]) and pushed its own trace entry; every caller pushes its
//! entry (the call instruction, [`Vm::push_trace`]) and returns
//! `STATUS_ERROR` too, so the traceback is built while unwinding and costs
//! nothing on the fast path.
//!
//! The VM's entry table holds one entry per function, initially
//! [`interp_entry`] for all. A JIT replaces an entry with compiled code
//! (or, for perf, a per-function trampoline calling `interp_entry` with its
//! function index), and calls other functions through the same table with
//! the same ABI. An entry must, like the interpreter's:
//! 1. fail with the depth error ([`Vm::fail_depth_exceeded`], without a
//!    trace entry of its own: the frame never became active) if
//!    `depth == max_depth`;
//! 2. otherwise write `frames[depth + 1] = FrameRecord { base, func }`
//!    (the GC, tracebacks and the vmprof sampler walk these), *then* store
//!    `depth + 1` (in this order: the sampler reads the records from a
//!    signal handler, see [`crate::vmprof`]), zero its ref registers that
//!    are not parameters, run, and store the old `depth` back on return,
//!    error or not.
//!
//! Install entries with the unsafe [`Vm::set_entry`]; [`offsets`] gives
//! the byte offsets of `depth`, `max_depth`, `frames`, `entry_table` and
//! `stack_limit` for generated code. Compiled code can leave the
//! allocating, printing and parsing instructions to [`run_slow_op`].
//! Nothing ever unwinds (panics) across an entry.

pub use crate::interp::tier::{CallDecision, Countdown, LoopDecision, OsrFn, TierUp};
pub use crate::interp::{
    EntryFn, FrameRecord, LOCATION_SHIFT, Locations, STATUS_ERROR, STATUS_OK, Vm, interp_entry,
    run_slow_op,
};
pub use crate::runtime::RuntimeError;
pub use crate::vmprof::COMPILER_FRAME;

/// The heap's object layout and accessors, for code that reads strings and
/// arrays directly (a JIT's inline array accesses and its helpers).
pub mod heap {
    pub use crate::runtime::heap::{ArrObj, Heap, arr_mut, str_ref};
}

/// Byte offsets of the VM fields that generated code reads or writes.
pub mod offsets {
    use super::Vm;
    /// The number of active frames (`usize`).
    pub const DEPTH: usize = std::mem::offset_of!(Vm<'static>, depth);
    /// Most frames that may be active at once (`usize`).
    pub const MAX_DEPTH: usize = std::mem::offset_of!(Vm<'static>, max_depth);
    /// The frame records (`*mut FrameRecord`), indexed by depth.
    pub const FRAMES: usize = std::mem::offset_of!(Vm<'static>, frames);
    /// A frame record's instruction location for vmprof lines mode
    /// (`u32`, see [`super::FrameRecord::pc`]).
    pub const RECORD_PC: usize = std::mem::offset_of!(super::FrameRecord, pc);
    /// The entry table (`*mut EntryFn`), indexed by function.
    pub const ENTRY_TABLE: usize = std::mem::offset_of!(Vm<'static>, entry_table);
    /// Lowest native stack pointer for a compiled frame (`usize`, 0: no
    /// limit; see [`crate::runtime::native_stack`]).
    pub const STACK_LIMIT: usize = std::mem::offset_of!(Vm<'static>, stack_limit);
}
