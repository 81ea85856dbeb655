//! A native function's frame: the prologue (depth and stack checks, frame
//! record, ref registers) and every return.

use super::*;

impl Translator<'_, '_> {
    /// The native variant's entry: depth check, frame record, parameters.
    pub(super) fn prologue(&mut self, b: &mut FunctionBuilder<'_>, args: &[Value]) {
        let (vm, base) = (self.vm, self.base);
        let depth = b.ins().load(types::I64, flags(), vm, offsets::DEPTH as i32);
        let max = b
            .ins()
            .load(types::I64, flags(), vm, offsets::MAX_DEPTH as i32);
        let depth1 = b.ins().iadd_imm_s(depth, 1);
        let over = b.ins().icmp(IntCC::UnsignedGreaterThan, depth1, max);
        let too_deep = b.create_block();
        let ok = b.create_block();
        // The native stack, checked like the depth (see `crate::stack_guard`).
        let stack_ok = b.create_block();
        let exhausted = crate::stack_guard::stack_exhausted(b, vm);
        b.ins().brif(exhausted, too_deep, &[], stack_ok, &[]);
        b.seal_block(stack_ok);
        b.switch_to_block(stack_ok);
        b.ins().brif(over, too_deep, &[], ok, &[]);
        b.seal_block(too_deep);
        b.seal_block(ok);

        b.switch_to_block(too_deep);
        b.set_cold_block(too_deep);
        let status = b.ins().iconst(types::I32, STATUS_DEPTH_EXCEEDED as i64);
        let zero = b.ins().iconst(types::I64, 0);
        let zero = self.zero_of(b, zero);
        b.ins().return_(&[zero, status]);

        b.switch_to_block(ok);
        self.push_frame_record(b, depth1, base, self.env.func);
        self.depth0 = Some(depth);
        let nparams = self.f.params.len();
        let mut zero = None;
        for &r in &self.f.ref_regs {
            if (r as usize) >= nparams {
                let zero = *zero.get_or_insert_with(|| b.ins().iconst(types::I64, 0));
                b.ins().store(flags(), zero, base, slot_offset(r as usize));
            }
        }
        for (i, &arg) in args.iter().enumerate() {
            self.write(b, i, arg);
        }
    }

    // ANCHOR: push_frame_record
    /// Enters frame `depth1`: writes its record `frames[depth1] = { base,
    /// func }`, *then* stores `depth1` as the VM's depth. In this order
    /// because the vmprof sampler reads the records from a signal handler:
    /// one that interrupts between the stores sees the old depth, never a
    /// stale record (Cranelift keeps stores in program order).
    ///
    /// A `sequence_point` (a compiler barrier that emits no code) follows:
    /// without it, Cranelift's dead-store elimination may drop the depth
    /// store when nothing in between reads memory (a loop without calls, an
    /// inlined leaf), since it cannot know that a signal handler reads it.
    pub(super) fn push_frame_record(
        &mut self,
        b: &mut FunctionBuilder<'_>,
        depth1: Value,
        base: Value,
        func: u32,
    ) {
        let frames = b
            .ins()
            .load(types::I64, flags(), self.vm, offsets::FRAMES as i32);
        let rec_off = b.ins().ishl_imm_u(depth1, 4);
        let rec = b.ins().iadd(frames, rec_off);
        b.ins().store(flags(), base, rec, 0);
        let func = b.ins().iconst(types::I32, func as i64);
        b.ins().store(flags(), func, rec, 8);
        b.ins()
            .store(flags(), depth1, self.vm, offsets::DEPTH as i32);
        b.ins().sequence_point();
    }
    // ANCHOR_END: push_frame_record

    pub(super) fn ret_type(&self) -> ir::Type {
        self.f.ret.as_ref().map_or(types::I64, clif_type)
    }

    /// `zero` (an i64 0) converted to the return type.
    pub(super) fn zero_of(&self, b: &mut FunctionBuilder<'_>, zero: Value) -> Value {
        if self.ret_type() == types::F64 {
            b.ins().f64const(0.0)
        } else {
            zero
        }
    }

    /// Returns from the function with `value` (or none).
    pub(super) fn return_value(&mut self, b: &mut FunctionBuilder<'_>, value: Option<Value>) {
        let ok = b.ins().iconst(types::I32, 0);
        match self.role {
            Role::Osr => {
                if let Some(v) = value {
                    b.ins().store(flags(), v, self.base, 0);
                }
                b.ins().return_(&[ok]);
            }
            _ => {
                let depth0 = self.depth0.expect("prologue ran");
                b.ins()
                    .store(flags(), depth0, self.vm, offsets::DEPTH as i32);
                let value = match value {
                    Some(v) => convert(b, v, self.ret_type()),
                    None => {
                        let zero = b.ins().iconst(types::I64, 0);
                        self.zero_of(b, zero)
                    }
                };
                b.ins().return_(&[value, ok]);
            }
        }
    }
}
