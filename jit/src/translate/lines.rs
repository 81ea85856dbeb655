//! vmprof lines mode (`toyvm run --vmprof-lines`): the location of each
//! call, stored in the frame record before the call.
//!
//! The sampler finds a frame's line from its record's
//! [`FrameRecord::pc`](vm::abi::FrameRecord::pc), except for the innermost
//! compiled frame, whose line comes from the interrupted program counter
//! and the line table the pipeline publishes. A compiled frame is not the
//! innermost one exactly while it calls out (a Toy function or a helper
//! that runs the interpreter's code or the collector), so storing the
//! location there, before each such instruction, is enough. A location
//! is what the interpreter stores for the same instruction
//! ([`vm::abi::Locations`]), a constant here: an OSR variant continues an
//! interpreted activation's record, and the sampler reads one encoding.
//! A call the JIT inlined needs no store unless it gets a record of its
//! own (`--vmprof-inlined`): the published line table names, for inlined
//! code, the caller and the call's line too. Without lines mode nothing is
//! emitted.
//!
//! Two economies, for call-heavy code such as `fib` (two calls per call):
//!
//! * a store is left out when an earlier one in the same basic block
//!   stored a location on the same line (callees write their own records,
//!   never this one, so it still holds; the sampler only needs the line);
//! * the record's address is recomputed from `vm.frames` and `vm.depth`
//!   (the frame is the innermost one while its code runs) rather than
//!   kept: a value live across every call would take a callee-saved
//!   register, which costs a spill and a reload around every call. A call
//!   of a native function uses the two values it loads anyway to enter the
//!   callee's frame (`Translator::enter_frame`).

use cranelift_codegen::ir::{InstBuilder, Value, types};
use cranelift_frontend::FunctionBuilder;
use vm::abi::offsets;

use crate::abi::frames;

use super::{Translator, flags, lowering};

impl Translator<'_, '_> {
    // ANCHOR: store_pc
    /// Stores `pc` in the frame record if instruction `pc` calls a helper
    /// ([`lowering::calls_helper`]; a Toy call stores in `call`, unless it
    /// is inlined).
    pub(super) fn store_pc_if_calling(&mut self, b: &mut FunctionBuilder<'_>, pc: usize) {
        if lowering::calls_helper(&self.f.code[pc]) {
            self.store_pc(b, pc);
        }
    }

    /// Stores `pc`'s location in the frame record (lines mode only), unless
    /// an earlier store in this basic block stored one on the same line.
    pub(super) fn store_pc(&mut self, b: &mut FunctionBuilder<'_>, pc: usize) {
        if self.pc_store_due(pc) {
            // frames[vm.depth].pc = location(pc)
            let records = frames::frames(b, self.vm);
            let depth = b
                .ins()
                .load(types::I64, flags(), self.vm, offsets::DEPTH as i32);
            let record = frames::record(b, records, depth);
            self.store_pc_in(b, record, pc);
        }
    }

    /// Whether `pc` must be stored (lines mode, and no earlier store in
    /// this basic block stored a location on the same line); if so, counts
    /// it as stored.
    pub(super) fn pc_store_due(&mut self, pc: usize) -> bool {
        let line = self.f.spans.get(pc).map(|span| span.line);
        if self.env.locations.is_none() || (line.is_some() && line == self.stored_line) {
            return false;
        }
        self.stored_line = line;
        true
    }

    /// Stores `pc`'s location in the frame record at `record`.
    pub(super) fn store_pc_in(&mut self, b: &mut FunctionBuilder<'_>, record: Value, pc: usize) {
        let location = (self.env.locations).map_or(0, |l| l.at(self.env.func, pc as u32));
        let pcv = b.ins().iconst(types::I32, i64::from(location));
        b.ins()
            .store(flags(), pcv, record, offsets::RECORD_PC as i32);
        // Only the signal handler reads it: keep the store even before an
        // inlined call (`--vmprof-inlined`), where no instruction reads
        // memory.
        b.ins().sequence_point();
    }
    // ANCHOR_END: store_pc
}
