//! Inline pushes and pops on the vmprof shadow stack, for compiled code
//! generated while `toyvm run --vmprof` profiles.
//!
//! The sampler copies the current thread's shadow stack of code ids on each
//! `SIGPROF` (see `perfsupport::vmprof::shadow_stack` for the layout and the
//! protocol). Interpreted frames are pushed by the interpreter's profiling
//! entry; compiled functions must push their own frame:
//! [`emit_shadow_push`] in the prologue and [`emit_shadow_pop`] on every
//! exit; a leaf callee inlined into compiled code gets the same push and
//! pop around its inlined body, so profiles keep every Toy call. When not
//! profiling (`Vm::vmprof_code_id` is `None`) nothing is emitted, so
//! unprofiled code is unchanged.

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{InstBuilder, MemFlagsData, Value, types};
use cranelift_frontend::FunctionBuilder;
use perfsupport::vmprof::{
    SHADOW_STACK_CAPACITY, SHADOW_STACK_DEPTH_OFFSET, SHADOW_STACK_IDS_OFFSET, ShadowStack,
};

/// Where a function's shadow-stack entry goes: the stack and the id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShadowFrame {
    /// The shadow stack of the thread that will run the code. The VM runs
    /// Toy code on the thread that compiles it, so this is the compiling
    /// thread's stack, whose address is fixed for the thread's life.
    pub stack: usize,
    /// The function's vmprof code id.
    pub id: usize,
}

impl ShadowFrame {
    /// The frame for code id `id` on the current thread's stack.
    pub fn current_thread(id: usize) -> ShadowFrame {
        ShadowFrame {
            stack: ShadowStack::current_ptr() as usize,
            id,
        }
    }
}

/// The shadow frame of every function of a VM being profiled, indexed
/// like the module's functions; `None` when not profiling.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShadowFrames(Vec<ShadowFrame>);

impl ShadowFrames {
    /// The frames of `vm`'s functions on the current thread's stack, if a
    /// profiling session runs on `vm`.
    pub fn of(vm: &vm::runtime::Vm<'_>) -> Option<ShadowFrames> {
        (0..vm.module.functions.len() as u32)
            .map(|f| vm.vmprof_code_id(f).map(ShadowFrame::current_thread))
            .collect::<Option<Vec<_>>>()
            .map(ShadowFrames)
    }

    /// The frame of function `func` (an index of the module).
    pub fn get(&self, func: u32) -> ShadowFrame {
        self.0[func as usize]
    }
}

fn flags() -> MemFlagsData {
    MemFlagsData::trusted()
}

/// Emits the push of `frame.id`: store the id in `ids[depth]` if that slot
/// exists, *then* store `depth + 1`, so a signal handler that interrupts
/// the push never sees an unwritten slot (Cranelift keeps stores in
/// program order). Leaves the builder in a fresh block. Returns the depth
/// before the push, for [`emit_shadow_pop`].
pub fn emit_shadow_push(b: &mut FunctionBuilder<'_>, frame: ShadowFrame) -> Value {
    let depth = emit_shadow_depth(b, frame);
    emit_shadow_push_at(b, frame, depth);
    depth
}

/// [`emit_shadow_push`] when the current depth is already known (`depth`,
/// e.g. for a callee inlined into code whose own depth is in a register):
/// no load, so pushes in a loop do not wait on each other's stores.
pub fn emit_shadow_push_at(b: &mut FunctionBuilder<'_>, frame: ShadowFrame, depth: Value) {
    let stack = b.ins().iconst(types::I64, frame.stack as i64);
    let fits = b
        .ins()
        .icmp_imm_s(IntCC::UnsignedLessThan, depth, SHADOW_STACK_CAPACITY as i64);
    let store_id = b.create_block();
    let publish = b.create_block();
    b.ins().brif(fits, store_id, &[], publish, &[]);

    b.switch_to_block(store_id);
    let offset = b.ins().ishl_imm_u(depth, 3);
    let slot = b.ins().iadd(stack, offset);
    let id = b.ins().iconst(types::I64, frame.id as i64);
    b.ins()
        .store(flags(), id, slot, SHADOW_STACK_IDS_OFFSET as i32);
    b.ins().jump(publish, &[]);

    b.switch_to_block(publish);
    let depth1 = b.ins().iadd_imm_s(depth, 1);
    b.ins()
        .store(flags(), depth1, stack, SHADOW_STACK_DEPTH_OFFSET as i32);
}

/// Emits a load of the current depth.
pub fn emit_shadow_depth(b: &mut FunctionBuilder<'_>, frame: ShadowFrame) -> Value {
    let stack = b.ins().iconst(types::I64, frame.stack as i64);
    b.ins()
        .load(types::I64, flags(), stack, SHADOW_STACK_DEPTH_OFFSET as i32)
}

/// Emits the pop: stores back `depth_before`, the value
/// [`emit_shadow_push`] returned (one store, atomic for the handler). Not
/// a load and a decrement: reloading the depth would chain every call's
/// push and pop through store-to-load forwarding, which costs several
/// cycles per call in call-heavy code.
pub fn emit_shadow_pop(b: &mut FunctionBuilder<'_>, frame: ShadowFrame, depth_before: Value) {
    let stack = b.ins().iconst(types::I64, frame.stack as i64);
    b.ins().store(
        flags(),
        depth_before,
        stack,
        SHADOW_STACK_DEPTH_OFFSET as i32,
    );
}
