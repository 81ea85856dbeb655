//! Errors in compiled code: the shared cold blocks that record them, the
//! exits that lead there, and the failed-call path.

use cranelift_codegen::ir::{self, Block, BlockArg, InstBuilder, SourceLoc, Value, types};
use cranelift_frontend::FunctionBuilder;

use crate::codegen::role::Role;

use super::Translator;

/// A function's shared cold blocks that record an error (each created on
/// first use). What differs between the failing sites (the instruction
/// index, operands) comes in as block parameters, so a function with many
/// checks has one helper call per kind of failure, not one per check:
/// less IR, and less work for the register allocator, whose cost grows
/// with every call's clobbers. (Failed calls keep one block per site, see
/// `Translator::trace_if_failed`.)
#[derive(Default)]
pub(super) struct ErrorBlocks {
    /// `(pc: i32, code: i32)`: a failing instruction (see [`codes`]).
    fail: Option<Block>,
    /// `(pc: i32, index: i64, length: i64)`: an index out of bounds.
    index: Option<Block>,
    /// `(pc: i32)`: a call (inlined or not) past the depth limit (see
    /// `crate::abi::frames`).
    too_deep: Option<Block>,
    /// `()`: the native stack is below its limit on entry (see
    /// `crate::abi::stack_guard`).
    no_stack: Option<Block>,
}

/// A new cold block with parameters of types `params`, for one of the
/// [`ErrorBlocks`] (`Translator::fill_error_blocks` emits its body).
pub(super) fn cold_block(b: &mut FunctionBuilder<'_>, params: &[ir::Type]) -> Block {
    let block = b.create_block();
    b.set_cold_block(block);
    for &ty in params {
        b.append_block_param(block, ty);
    }
    block
}

impl Translator<'_, '_> {
    /// The shared cold block returning `STATUS_ERROR` (its body comes at
    /// the end, see [`Translator::fill_error_blocks`]).
    pub(super) fn error_exit(&mut self, b: &mut FunctionBuilder<'_>) -> Block {
        *self.error_exit.get_or_insert_with(|| {
            let block = b.create_block();
            b.set_cold_block(block);
            block
        })
    }

    /// Continues in a fresh block when `cond` is zero; otherwise leaves
    /// through `target`, a shared cold block, passing it the `i32`
    /// constants `consts` (the instruction index, an error code) and then
    /// `values`. The constants are made in a small cold block of this site
    /// that jumps to `target`: passed straight from the branch, they would
    /// be materialized on the hot path.
    pub(super) fn exit_if(
        &mut self,
        b: &mut FunctionBuilder<'_>,
        cond: Value,
        target: Block,
        consts: &[u32],
        values: &[Value],
    ) {
        let ok = b.create_block();
        if consts.is_empty() && values.is_empty() {
            b.ins().brif(cond, target, &[], ok, &[]);
        } else {
            let stub = b.create_block();
            b.set_cold_block(stub);
            b.ins().brif(cond, stub, &[], ok, &[]);
            b.seal_block(stub);
            b.switch_to_block(stub);
            let mut args = Vec::with_capacity(consts.len() + values.len());
            for &c in consts {
                args.push(BlockArg::Value(b.ins().iconst(types::I32, c as i64)));
            }
            args.extend(values.iter().copied().map(BlockArg::Value));
            b.ins().jump(target, &args);
        }
        b.switch_to_block(ok);
        b.seal_block(ok);
    }

    /// The shared block raising an error code: `(pc, code)`.
    pub(super) fn fail_block(&mut self, b: &mut FunctionBuilder<'_>) -> Block {
        *(self.errors.fail).get_or_insert_with(|| cold_block(b, &[types::I32, types::I32]))
    }

    /// The shared block for an index out of bounds: `(pc, index, length)`.
    pub(super) fn index_error_block(&mut self, b: &mut FunctionBuilder<'_>) -> Block {
        let params = [types::I32, types::I64, types::I64];
        *(self.errors.index).get_or_insert_with(|| cold_block(b, &params))
    }

    /// The shared block for a call at `(pc)` past the depth limit.
    pub(super) fn too_deep_block(&mut self, b: &mut FunctionBuilder<'_>) -> Block {
        *(self.errors.too_deep).get_or_insert_with(|| cold_block(b, &[types::I32]))
    }

    /// The block for a native stack below its limit on entry.
    pub(super) fn no_stack_block(&mut self, b: &mut FunctionBuilder<'_>) -> Block {
        *(self.errors.no_stack).get_or_insert_with(|| cold_block(b, &[]))
    }

    /// Emits the bodies of the shared cold blocks in use: each calls its
    /// helper with the function index and its parameters, then leaves
    /// through the error exit, which returns `STATUS_ERROR`. Done after the
    /// last instruction, so no
    /// block is ever left half-filled, and not tied to any instruction: the
    /// source location is the function's own.
    pub(super) fn fill_error_blocks(&mut self, b: &mut FunctionBuilder<'_>) {
        b.set_srcloc(SourceLoc::default());
        let helpers = self.env.imports;
        let used = [
            (self.errors.fail, helpers.fail),
            (self.errors.index, helpers.index_error),
            (self.errors.too_deep, helpers.push_trace),
        ];
        if let Some(block) = self.errors.no_stack {
            // The depth error without a trace entry: the caller adds its
            // own, as after `interp_entry` found no room.
            b.switch_to_block(block);
            let helper = self.func_ref(b, helpers.depth_exceeded);
            b.ins().call(helper, &[self.vm]);
            let exit = self.error_exit(b);
            b.ins().jump(exit, &[]);
        }
        for (block, helper) in used {
            let Some(block) = block else { continue };
            b.switch_to_block(block);
            let mut args = vec![self.vm, b.ins().iconst(types::I32, self.env.func as i64)];
            args.extend_from_slice(b.block_params(block));
            if Some(block) == self.errors.too_deep {
                // `toy_jit_push_trace`'s flag: record the depth error first.
                args.push(b.ins().iconst(types::I32, 1));
            }
            let helper = self.func_ref(b, helper);
            b.ins().call(helper, &args);
            let exit = self.error_exit(b);
            b.ins().jump(exit, &[]);
        }
        let Some(exit) = self.error_exit else { return };
        b.switch_to_block(exit);
        let one = b.ins().iconst(types::I32, 1);
        match self.role {
            Role::Osr => {
                b.ins().return_(&[one]);
            }
            _ => {
                let zero = b.ins().iconst(types::I64, 0);
                let zero = self.zero_of(b, zero);
                b.ins().return_(&[zero, one]);
            }
        }
    }

    /// After a call at `pc`: continues in a fresh block when `status` is
    /// OK; otherwise adds the caller's trace entry and leaves through the
    /// error exit.
    /// Unlike the other checks, each call site keeps its own
    /// cold block with the helper call: calls are few, and with a shared
    /// block the register allocator shuffles `vm` around the hot call
    /// (measured: `fib` 1.12 s instead of 0.95 s at the large size).
    pub(super) fn trace_if_failed(
        &mut self,
        b: &mut FunctionBuilder<'_>,
        status: Value,
        pc: usize,
    ) {
        let failed = b.create_block();
        let ok = b.create_block();
        b.set_cold_block(failed);
        b.ins().brif(status, failed, &[], ok, &[]);
        b.seal_block(failed);
        b.seal_block(ok);
        b.switch_to_block(failed);
        let helper = self.func_ref(b, self.env.imports.push_trace);
        let func = b.ins().iconst(types::I32, self.env.func as i64);
        let pcv = b.ins().iconst(types::I32, pc as i64);
        // The callee recorded its error: no depth error to add.
        let no_depth_error = b.ins().iconst(types::I32, 0);
        b.ins().call(helper, &[self.vm, func, pcv, no_depth_error]);
        let exit = self.error_exit(b);
        b.ins().jump(exit, &[]);
        b.switch_to_block(ok);
    }

    /// Raises error `code` (see [`codes`]) at `pc` when `cond` is true.
    pub(super) fn fail_if(
        &mut self,
        b: &mut FunctionBuilder<'_>,
        cond: Value,
        pc: usize,
        code: u32,
    ) {
        let target = self.fail_block(b);
        self.exit_if(b, cond, target, &[pc as u32, code], &[]);
    }
}
