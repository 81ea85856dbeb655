//! Entering and leaving a Toy frame from compiled code.
//!
//! A native function runs in a frame its **caller** entered: the compiled
//! call site, or the entry shim when the interpreter (or compiled code
//! through the entry table) calls it. The caller takes the steps
//! `interp_entry` takes for an interpreted callee:
//!
//! 1. **Room** ([`depth_room`]): the new depth must not pass
//!    `vm.max_depth`, or the call fails with the Toy error "maximum
//!    recursion depth exceeded", at the call, as in the interpreter.
//! 2. **Record** ([`push_record`]): `frames[depth + 1] = { base, func,
//!    pc }`, *then* `vm.depth = depth + 1` (`pc`: in vmprof lines mode the
//!    location of the callee's instruction 0; 0 otherwise).
//! 3. **Leave** ([`pop_record`]) after the call returns, whatever its
//!    status: `vm.depth -= 1`.
//!
//! The native stack is the one check left to the callee, in its prologue
//! (`crate::abi::stack_guard`): its frame's size is Cranelift's choice, known
//! only to the callee, and a check in the caller would keep the stack
//! pointer in a callee-saved register across all its calls.
//!
//! Why the caller: the work belongs to the call, and profilers should say
//! so. In the callee's prologue it sat on the `fn` line, before any
//! statement, and in a call-bound function such as `fib` that line took
//! most of the samples (65-70% of `fib`'s in `perf report --sort
//! srcline`). At the call site it is code of the call's line, where the
//! interpreter's `Call` instruction does the same work. And the callee
//! keeps no depth of its own across its calls: one callee-saved register
//! fewer, saved and restored in every prologue and epilogue.
//!
//! Between the depth store and the call instruction (a few register
//! moves), a vmprof sample sees the callee's frame while the program
//! counter is still the caller's: such a sample names the callee at its
//! first line (its record's `pc` is instruction 0's), or, in a recursive
//! call, at the call's line.

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{InstBuilder, MemFlagsData, Value, types};
use cranelift_frontend::FunctionBuilder;
use vm::abi::{FrameRecord, Locations, offsets};

// The record layout `push_record` writes: `func` and `pc` are one 8-byte
// store.
const _: () = assert!(size_of::<FrameRecord>() == 1 << 4);
const _: () = assert!(std::mem::offset_of!(FrameRecord, base) == 0);
const _: () = assert!(std::mem::offset_of!(FrameRecord, func) == 8);
const _: () = assert!(std::mem::offset_of!(FrameRecord, pc) == 12);
const _: () = assert!(cfg!(target_endian = "little"));

fn flags() -> MemFlagsData {
    MemFlagsData::trusted()
}

/// The depth a new frame would get, and whether it would pass the limit.
pub struct DepthRoom {
    /// `vm.depth`: the caller's frame.
    pub depth: Value,
    /// `vm.depth + 1`: the new frame's depth.
    pub depth1: Value,
    /// `vm.depth >= vm.max_depth` (`depth1 > vm.max_depth`, without
    /// waiting for the add): no room.
    pub over: Value,
}

/// Step 1: loads `vm.depth` and `vm.max_depth`.
pub fn depth_room(b: &mut FunctionBuilder<'_>, vm: Value) -> DepthRoom {
    let depth = b.ins().load(types::I64, flags(), vm, offsets::DEPTH as i32);
    let max = b
        .ins()
        .load(types::I64, flags(), vm, offsets::MAX_DEPTH as i32);
    let depth1 = b.ins().iadd_imm_s(depth, 1);
    let over = b.ins().icmp(IntCC::UnsignedGreaterThanOrEqual, depth, max);
    DepthRoom {
        depth,
        depth1,
        over,
    }
}

// ANCHOR: push_record
/// Step 2: enters frame `depth1` by writing its record `frames[depth1] = {
/// base, func, pc }`, *then* storing `depth1` as the VM's depth. In
/// this order because the vmprof sampler reads the records from a signal
/// handler: one that interrupts between the stores sees the old depth,
/// never a stale record (Cranelift keeps stores in program order).
///
/// A `sequence_point` (a compiler barrier that emits no code) follows:
/// without it, Cranelift's dead-store elimination may drop the depth store
/// when nothing before the next depth store reads memory (an inlined leaf),
/// since it cannot know that a signal handler reads it.
///
/// `frames` is `vm.frames` ([`frames`]). `pc` is, in vmprof lines mode
/// (`locations`), the location of `func`'s instruction 0, and 0 otherwise,
/// which keeps the record's second half one small immediate.
pub fn push_record(
    b: &mut FunctionBuilder<'_>,
    vm: Value,
    frames: Value,
    depth1: Value,
    base: Value,
    func: u32,
    locations: Option<&Locations>,
) {
    let rec = record(b, frames, depth1);
    b.ins().store(flags(), base, rec, 0);
    // `func` and `pc` in one store (little-endian: `pc` is the high half).
    let pc = locations.map_or(0, |l| l.at(func, 0));
    let func_pc = b
        .ins()
        .iconst(types::I64, (u64::from(pc) << 32 | u64::from(func)) as i64);
    b.ins().store(flags(), func_pc, rec, 8);
    b.ins().store(flags(), depth1, vm, offsets::DEPTH as i32);
    b.ins().sequence_point();
}
// ANCHOR_END: push_record

/// `vm.frames`, the address of record 0.
pub fn frames(b: &mut FunctionBuilder<'_>, vm: Value) -> Value {
    b.ins()
        .load(types::I64, flags(), vm, offsets::FRAMES as i32)
}

/// The address of record `depth`, `frames + depth * 16`.
pub fn record(b: &mut FunctionBuilder<'_>, frames: Value, depth: Value) -> Value {
    let offset = b.ins().ishl_imm_u(depth, 4);
    b.ins().iadd(frames, offset)
}

/// Step 3: leaves the frame entered by [`push_record`]: `vm.depth -= 1`.
/// The depth is loaded again rather than kept from step 1: a value live
/// across the call would take a callee-saved register, saved and restored
/// in every prologue and epilogue (measured on `fib`: as fast, with one
/// register fewer).
pub fn pop_record(b: &mut FunctionBuilder<'_>, vm: Value) {
    let depth = b.ins().load(types::I64, flags(), vm, offsets::DEPTH as i32);
    let depth0 = b.ins().iadd_imm_s(depth, -1);
    b.ins().store(flags(), depth0, vm, offsets::DEPTH as i32);
    b.ins().sequence_point();
}
