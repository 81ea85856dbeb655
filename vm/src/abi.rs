//! Exactly what an execution tier (a JIT) may touch: the entry and OSR
//! signatures and their status codes, the frame-record layout, the byte
//! offsets of the [`Vm`] fields generated code reads and writes, the
//! interpreter's entry and slow-op runner, and the ways to record an error.
//! Everything else about the [`Vm`] is private to this crate.
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

pub use crate::interp::{LOCATION_SHIFT, Locations, interp_entry, run_slow_op};
pub use crate::runtime::tier::OsrFn;
pub use crate::runtime::{RuntimeError, Vm};

// ANCHOR: entry_abi
/// The calling convention of every Toy function (see the module docs).
pub type EntryFn = unsafe extern "C" fn(vm: *mut Vm<'_>, func: u32, base: *mut u64) -> u32;

/// Status returned by an [`EntryFn`]: the call completed.
pub const STATUS_OK: u32 = 0;
/// Status returned by an [`EntryFn`]: an error is recorded in the VM.
pub const STATUS_ERROR: u32 = 1;

/// One active frame: where its registers are and which function it runs.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct FrameRecord {
    /// Register 0 of the frame.
    pub base: *mut u64,
    /// Index of the function running in it.
    pub func: u32,
    /// Only while a vmprof session records lines ([`Vm::vmprof_lines`]):
    /// the [location](Locations) of an instruction on the line the frame is
    /// executing (instruction 0's when the frame is entered; the
    /// interpreter stores it at each instruction that starts a line,
    /// compiled code before each call, so a caller's is on its call's
    /// line). Stale otherwise; nothing but the sampler reads it.
    pub pc: u32,
}
// ANCHOR_END: entry_abi

// SAFETY: a null `base` and function 0 are a valid (inactive) record: all
// fields are plain integers and raw pointers.
unsafe impl crate::runtime::region::Zeroable for FrameRecord {}

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
