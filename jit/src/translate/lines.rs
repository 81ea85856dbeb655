//! vmprof lines mode (`toyvm run --vmprof-lines`): the bytecode index of
//! each call, stored in the frame record before the call.
//!
//! The sampler finds a frame's line from its record's
//! [`FrameRecord::pc`](vm::abi::FrameRecord::pc), except for the innermost
//! compiled frame, whose line comes from the interrupted program counter
//! and the line table the pipeline publishes. A compiled frame is not the
//! innermost one exactly while it calls out (a Toy function, inlined or
//! not, or a helper that runs the interpreter's code or the collector), so
//! storing the index there, before each such instruction, is enough: one
//! store of a constant per call. Without lines mode nothing is emitted.

use super::*;

impl Translator<'_, '_> {
    /// The OSR variant's record: the interpreter's, `frames[vm.depth]`
    /// (lines mode only).
    pub(super) fn osr_record(&mut self, b: &mut FunctionBuilder<'_>) {
        if !self.env.vmprof_lines {
            return;
        }
        let frames = b
            .ins()
            .load(types::I64, flags(), self.vm, offsets::FRAMES as i32);
        let depth = b
            .ins()
            .load(types::I64, flags(), self.vm, offsets::DEPTH as i32);
        let offset = b.ins().ishl_imm_u(depth, 4);
        self.record = Some(b.ins().iadd(frames, offset));
    }

    // ANCHOR: store_pc
    /// Stores `pc` in the frame record if instruction `pc` calls out.
    pub(super) fn store_pc_if_calling(&mut self, b: &mut FunctionBuilder<'_>, pc: usize) {
        let Some(record) = self.record else { return };
        let calls_out = match self.f.code[pc] {
            Op::Call { .. } | Op::RemF { .. } | Op::LenS { .. } | Op::Pop { .. } => true,
            Op::EqS { .. } | Op::NeS { .. } | Op::LtS { .. } | Op::LeS { .. } => true,
            op => op.is_slow(),
        };
        if calls_out {
            let pcv = b.ins().iconst(types::I32, pc as i64);
            b.ins()
                .store(flags(), pcv, record, offsets::RECORD_PC as i32);
            // Only the signal handler reads it: keep the store even before
            // an inlined call, where no instruction reads memory.
            b.ins().sequence_point();
        }
    }
    // ANCHOR_END: store_pc
}
