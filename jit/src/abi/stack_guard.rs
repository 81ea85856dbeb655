//! The native stack check in compiled prologues.
//!
//! Every native function compares its stack pointer, after its frame is
//! allocated and before it touches the frame body, with the VM's stack
//! limit (`vm::abi::offsets::STACK_LIMIT`, set by the driver for the run
//! thread, see `vm::runtime::native_stack`): below the limit, it records
//! the depth error (`toy_jit_depth_exceeded`, no trace entry of its own)
//! and fails, so its caller adds its trace entry exactly as after a failed
//! depth check, and deep recursion in compiled code ends with the same
//! "maximum recursion depth" error as in the interpreter instead of
//! SIGSEGV. The depth check itself is the caller's, which enters the
//! frame (`crate::abi::frames`); the stack check stays with the callee, whose
//! frame size only it knows. Cranelift's prologue only pushes the frame
//! pointer and the callee-saved registers before the check (a few words
//! just below the caller's frame, which passed its own check), so nothing
//! is written below the limit's reserve.
//!
//! On x86-64 the check is `cmp rsp, [vm + STACK_LIMIT]` and a branch to
//! the cold failure block. The driver sizes the stack for
//! `--max-depth` compiled frames (`vm::driver::COMPILED_BYTES_PER_CALL`),
//! so a program that fits in the interpreter fits compiled too; the check
//! only decides when that sizing is wrong.

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{InstBuilder, MemFlagsData, Value, types};
use cranelift_frontend::FunctionBuilder;
use vm::abi::offsets;

// ANCHOR: stack_exhausted
/// Emits `sp < vm.stack_limit`: true if this frame starts below the limit
/// (the limit is 0 when unknown, and then never true).
pub fn stack_exhausted(b: &mut FunctionBuilder<'_>, vm: Value) -> Value {
    let limit = b.ins().load(
        types::I64,
        MemFlagsData::trusted(),
        vm,
        offsets::STACK_LIMIT as i32,
    );
    let sp = b.ins().get_stack_pointer(types::I64);
    b.ins().icmp(IntCC::UnsignedLessThan, sp, limit)
}
// ANCHOR_END: stack_exhausted
