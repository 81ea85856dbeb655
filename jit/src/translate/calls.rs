//! Calls: of compiled callees (directly, native convention), of anything
//! else (through the entry table), and of the memory-based helpers.

use cranelift_codegen::ir::{InstBuilder, Value, types};
use cranelift_frontend::FunctionBuilder;
use vm::abi::offsets;
use vm::bytecode::{Op, Reg};

use crate::abi::{clif_type, entry_signature, frames};

use super::{Translator, flags, slot_offset};

impl Translator<'_, '_> {
    pub(super) fn call(
        &mut self,
        b: &mut FunctionBuilder<'_>,
        callee: u16,
        base_reg: Reg,
        dst: Reg,
        pc: usize,
    ) {
        let cf = &self.env.module.functions[callee as usize];
        self.array_fields.clear();
        let inlined = self.inline_budget.take(cf);
        // vmprof lines mode: each kind of call stores `pc` in the caller's
        // record its own way (see `lines`).
        if inlined {
            // Only with a record of its own: otherwise the inlined code's
            // line table names the call's line.
            if self.env.inlined_frames {
                self.store_pc(b, pc);
            }
            self.inline_leaf(b, callee, base_reg, dst, pc);
            return;
        }
        let callee_base = b
            .ins()
            .iadd_imm_s(self.base, slot_offset(base_reg as usize) as i64);
        let (status, result) = match (self.env.natives)(callee as u32) {
            Some(id) => {
                let mut args = vec![self.vm, callee_base];
                for (i, (_, ty)) in cf.params.iter().enumerate() {
                    args.push(self.read_as(b, base_reg + i as u8, clif_type(ty)));
                }
                self.enter_frame(b, callee_base, callee, pc);
                let fref = self.func_ref(b, id);
                let inst = b.ins().call(fref, &args);
                let (result, status) = (b.inst_results(inst)[0], b.inst_results(inst)[1]);
                frames::pop_record(b, self.vm);
                (status, Some(result))
            }
            None => {
                self.store_pc(b, pc);
                for i in 0..cf.params.len() {
                    self.spill(b, base_reg as usize + i);
                }
                let table = b
                    .ins()
                    .load(types::I64, flags(), self.vm, offsets::ENTRY_TABLE as i32);
                let entry = b.ins().load(types::I64, flags(), table, callee as i32 * 8);
                let sig = b.import_signature(entry_signature(self.env.call_conv));
                let func = b.ins().iconst(types::I32, callee as i64);
                let inst = b
                    .ins()
                    .call_indirect(sig, entry, &[self.vm, func, callee_base]);
                (b.inst_results(inst)[0], None)
            }
        };
        self.trace_if_failed(b, status, pc);
        if let Some(ret) = &cf.ret {
            let value = match result {
                Some(v) => v,
                None => b.ins().load(clif_type(ret), flags(), callee_base, 0),
            };
            self.write(b, dst as usize, value);
        }
    }

    // ANCHOR: enter_frame
    /// Enters the frame of a native callee `callee` at `callee_base` for
    /// the call at `pc` (see `crate::abi::frames`): past the depth limit, the
    /// call fails here, as in the interpreter. In vmprof lines mode it
    /// first stores `pc`'s location in the caller's record, with the depth
    /// and record array it loads anyway (loaded again for the store alone,
    /// they made `fib` 25% slower in lines mode).
    fn enter_frame(
        &mut self,
        b: &mut FunctionBuilder<'_>,
        callee_base: Value,
        callee: u16,
        pc: usize,
    ) {
        let room = frames::depth_room(b, self.vm);
        let records = frames::frames(b, self.vm);
        if self.pc_store_due(pc) {
            let own = frames::record(b, records, room.depth);
            self.store_pc_in(b, own, pc);
        }
        let too_deep = self.too_deep_block(b);
        self.exit_if(b, room.over, too_deep, &[pc as u32], &[]);
        frames::push_record(
            b,
            self.vm,
            records,
            room.depth1,
            callee_base,
            callee as u32,
            self.env.locations,
        );
    }
    // ANCHOR_END: enter_frame

    /// Runs `op` through a memory-based helper: stores its scalar operands,
    /// calls `call` (which returns a status), reloads its result.
    pub(super) fn via_frame(
        &mut self,
        b: &mut FunctionBuilder<'_>,
        op: &Op,
        call: impl FnOnce(&mut Self, &mut FunctionBuilder<'_>) -> Value,
    ) {
        self.array_fields.clear();
        for r in op.regs().filter(|r| r.access.reads()) {
            self.spill(b, r.reg as usize);
        }
        let status = call(self, b);
        // The helper has recorded the error already.
        let exit = self.error_exit(b);
        self.exit_if(b, status, exit, &[], &[]);
        for r in op.regs().filter(|r| r.access.writes()) {
            self.reload(b, r.reg as usize);
        }
    }
}
