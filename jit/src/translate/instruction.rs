//! One bytecode instruction → Cranelift IR.

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{self, BlockArg, InstBuilder, Value, types};
use cranelift_frontend::FunctionBuilder;
use vm::bytecode::{Const, Flags, Op, Reg};

use crate::abi::helpers::codes;

use super::registers::Slot;
use super::{Translator, flags, slot_offset};

impl Translator<'_, '_> {
    /// Translates instruction `pc`; returns true if it ends the block
    /// (nothing falls through).
    pub(super) fn instruction(&mut self, b: &mut FunctionBuilder<'_>, pc: usize) -> bool {
        let op = self.f.code[pc];
        if !self.control(b, op, pc) && !self.scalar(b, op, pc) {
            self.memory_or_slow(b, op, pc);
        }
        op.flags().contains(Flags::ENDS_BLOCK)
    }

    /// Moves, constants, arithmetic and comparisons (never fail, except
    /// division by zero); false if `op` is none of them.
    pub(super) fn scalar(&mut self, b: &mut FunctionBuilder<'_>, op: Op, pc: usize) -> bool {
        match op {
            Op::Move { dst, src } => {
                let v = self.read(b, src);
                self.write(b, dst as usize, v);
            }
            Op::LoadInt { dst, imm } => {
                let v = b.ins().iconst(types::I64, imm as i64);
                self.write(b, dst as usize, v);
            }
            Op::LoadConst { dst, k } => {
                let v = match self.f.consts[k as usize] {
                    Const::Int(i) => b.ins().iconst(types::I64, i),
                    Const::Float(x) => b.ins().f64const(x),
                    Const::Str(_) => b
                        .ins()
                        .iconst(types::I64, self.env.consts[k as usize] as i64),
                };
                self.write(b, dst as usize, v);
            }
            Op::AddI { dst, a, b: y } => {
                self.binary(b, dst, a, y, types::I64, |b, x, y| b.ins().iadd(x, y))
            }
            Op::SubI { dst, a, b: y } => {
                self.binary(b, dst, a, y, types::I64, |b, x, y| b.ins().isub(x, y))
            }
            Op::MulI { dst, a, b: y } => {
                self.binary(b, dst, a, y, types::I64, |b, x, y| b.ins().imul(x, y))
            }
            Op::AndI { dst, a, b: y } => {
                self.binary(b, dst, a, y, types::I64, |b, x, y| b.ins().band(x, y))
            }
            Op::OrI { dst, a, b: y } => {
                self.binary(b, dst, a, y, types::I64, |b, x, y| b.ins().bor(x, y))
            }
            Op::XorI { dst, a, b: y } => {
                self.binary(b, dst, a, y, types::I64, |b, x, y| b.ins().bxor(x, y))
            }
            // Cranelift takes shift amounts modulo the width, like Toy.
            Op::ShlI { dst, a, b: y } => {
                self.binary(b, dst, a, y, types::I64, |b, x, y| b.ins().ishl(x, y))
            }
            Op::ShrI { dst, a, b: y } => {
                self.binary(b, dst, a, y, types::I64, |b, x, y| b.ins().sshr(x, y))
            }
            Op::DivI { dst, a, b: y } => {
                let (x, y) = (self.read_i(b, a), self.read_i(b, y));
                self.div_rem(b, dst, x, y, pc, false);
            }
            Op::RemI { dst, a, b: y } => {
                let (x, y) = (self.read_i(b, a), self.read_i(b, y));
                self.div_rem(b, dst, x, y, pc, true);
            }
            Op::NegI { dst, src } => {
                let x = self.read_i(b, src);
                let v = b.ins().ineg(x);
                self.write(b, dst as usize, v);
            }
            Op::AddIImm { dst, a, imm } => {
                let x = self.read_i(b, a);
                let v = b.ins().iadd_imm_s(x, imm as i64);
                self.write(b, dst as usize, v);
            }
            Op::MulIImm { dst, a, imm } => {
                let x = self.read_i(b, a);
                let v = b.ins().imul_imm_s(x, imm as i64);
                self.write(b, dst as usize, v);
            }
            Op::DivIImm { dst, a, imm } => {
                let x = self.read_i(b, a);
                let v = match imm {
                    -1 => b.ins().ineg(x),
                    _ => {
                        let y = b.ins().iconst(types::I64, imm as i64);
                        b.ins().sdiv(x, y)
                    }
                };
                self.write(b, dst as usize, v);
            }
            Op::RemIImm { dst, a, imm } => {
                let x = self.read_i(b, a);
                let v = match imm {
                    -1 | 1 => b.ins().iconst(types::I64, 0),
                    _ => {
                        let y = b.ins().iconst(types::I64, imm as i64);
                        b.ins().srem(x, y)
                    }
                };
                self.write(b, dst as usize, v);
            }
            Op::AddF { dst, a, b: y } => {
                self.binary(b, dst, a, y, types::F64, |b, x, y| b.ins().fadd(x, y))
            }
            Op::SubF { dst, a, b: y } => {
                self.binary(b, dst, a, y, types::F64, |b, x, y| b.ins().fsub(x, y))
            }
            Op::MulF { dst, a, b: y } => {
                self.binary(b, dst, a, y, types::F64, |b, x, y| b.ins().fmul(x, y))
            }
            Op::DivF { dst, a, b: y } => {
                self.binary(b, dst, a, y, types::F64, |b, x, y| b.ins().fdiv(x, y))
            }
            Op::RemF { dst, a, b: y } => {
                let fmod = self.helper(b, self.env.imports.fmod);
                self.binary(b, dst, a, y, types::F64, |b, x, y| {
                    let call = b.ins().call(fmod, &[x, y]);
                    b.inst_results(call)[0]
                });
            }
            Op::NegF { dst, src } => {
                let x = self.read_f(b, src);
                let v = b.ins().fneg(x);
                self.write(b, dst as usize, v);
            }
            Op::EqI { dst, a, b: y } => self.binary(b, dst, a, y, types::I64, icmp(IntCC::Equal)),
            Op::NeI { dst, a, b: y } => {
                self.binary(b, dst, a, y, types::I64, icmp(IntCC::NotEqual))
            }
            Op::LtI { dst, a, b: y } => {
                self.binary(b, dst, a, y, types::I64, icmp(IntCC::SignedLessThan))
            }
            Op::LeI { dst, a, b: y } => {
                self.binary(b, dst, a, y, types::I64, icmp(IntCC::SignedLessThanOrEqual))
            }
            Op::EqF { dst, a, b: y } => self.binary(b, dst, a, y, types::F64, fcmp(FloatCC::Equal)),
            Op::NeF { dst, a, b: y } => {
                self.binary(b, dst, a, y, types::F64, fcmp(FloatCC::NotEqual))
            }
            Op::LtF { dst, a, b: y } => {
                self.binary(b, dst, a, y, types::F64, fcmp(FloatCC::LessThan))
            }
            Op::LeF { dst, a, b: y } => {
                self.binary(b, dst, a, y, types::F64, fcmp(FloatCC::LessThanOrEqual))
            }
            Op::EqS { dst, a, b: y } => self.str_cmp(b, dst, a, y, IntCC::Equal),
            Op::NeS { dst, a, b: y } => self.str_cmp(b, dst, a, y, IntCC::NotEqual),
            Op::LtS { dst, a, b: y } => self.str_cmp(b, dst, a, y, IntCC::SignedLessThan),
            Op::LeS { dst, a, b: y } => self.str_cmp(b, dst, a, y, IntCC::SignedLessThanOrEqual),
            Op::Not { dst, src } => {
                let x = self.read_i(b, src);
                let v = b.ins().bxor_imm_u(x, 1);
                self.write(b, dst as usize, v);
            }
            _ => return false,
        }
        true
    }

    /// Jumps, calls and returns; false if `op` is none of them. Whether it
    /// ends the block is the table's fact (`Flags::ENDS_BLOCK`), not this
    /// function's.
    pub(super) fn control(&mut self, b: &mut FunctionBuilder<'_>, op: Op, pc: usize) -> bool {
        match op {
            Op::Jmp { target } => {
                let block = self.blocks[&(target as usize)];
                b.ins().jump(block, &[]);
                self.edge_emitted(b, target as usize);
            }
            Op::JmpIf { a, target } => {
                let x = self.read_i(b, a);
                self.branch(b, x, target, pc);
            }
            Op::JmpIfNot { a, target } => {
                let x = self.read_i(b, a);
                let c = b.ins().icmp_imm_s(IntCC::Equal, x, 0);
                self.branch(b, c, target, pc);
            }
            Op::JmpIfNotLtI { a, b: y, target } => {
                let (x, y) = (self.read_i(b, a), self.read_i(b, y));
                self.icmp_branch(b, IntCC::SignedGreaterThanOrEqual, x, y, target, pc);
            }
            Op::JmpIfNotLeI { a, b: y, target } => {
                let (x, y) = (self.read_i(b, a), self.read_i(b, y));
                self.icmp_branch(b, IntCC::SignedGreaterThan, x, y, target, pc);
            }
            Op::JmpIfNotEqI { a, b: y, target } => {
                let (x, y) = (self.read_i(b, a), self.read_i(b, y));
                self.icmp_branch(b, IntCC::NotEqual, x, y, target, pc);
            }
            Op::JmpIfNotNeI { a, b: y, target } => {
                let (x, y) = (self.read_i(b, a), self.read_i(b, y));
                self.icmp_branch(b, IntCC::Equal, x, y, target, pc);
            }
            Op::JmpIfNotLtIImm { a, imm, target } => {
                self.imm_branch(b, a, imm, IntCC::SignedGreaterThanOrEqual, target, pc);
            }
            Op::JmpIfNotLeIImm { a, imm, target } => {
                self.imm_branch(b, a, imm, IntCC::SignedGreaterThan, target, pc);
            }
            Op::JmpIfNotGtIImm { a, imm, target } => {
                self.imm_branch(b, a, imm, IntCC::SignedLessThanOrEqual, target, pc);
            }
            Op::JmpIfNotGeIImm { a, imm, target } => {
                self.imm_branch(b, a, imm, IntCC::SignedLessThan, target, pc);
            }
            Op::JmpIfNotEqIImm { a, imm, target } => {
                self.imm_branch(b, a, imm, IntCC::NotEqual, target, pc);
            }
            Op::JmpIfNotNeIImm { a, imm, target } => {
                self.imm_branch(b, a, imm, IntCC::Equal, target, pc);
            }
            // "Not less than" must be true for NaN: the unordered forms.
            Op::JmpIfNotLtF { a, b: y, target } => {
                self.fcmp_branch(b, FloatCC::UnorderedOrGreaterThanOrEqual, a, y, target, pc);
            }
            Op::JmpIfNotLeF { a, b: y, target } => {
                self.fcmp_branch(b, FloatCC::UnorderedOrGreaterThan, a, y, target, pc);
            }
            Op::JmpIfLtF { a, b: y, target } => {
                self.fcmp_branch(b, FloatCC::LessThan, a, y, target, pc);
            }
            Op::JmpIfLeF { a, b: y, target } => {
                self.fcmp_branch(b, FloatCC::LessThanOrEqual, a, y, target, pc);
            }
            Op::ForPrep {
                counter,
                end,
                target,
            } => {
                let (c, e) = (self.read_i(b, counter), self.read_i(b, end));
                self.icmp_branch(b, IntCC::SignedGreaterThanOrEqual, c, e, target, pc);
            }
            Op::ForLoop {
                counter,
                end,
                target,
            } => {
                let c = self.read_i(b, counter);
                let next = b.ins().iadd_imm_s(c, 1);
                self.write(b, counter as usize, next);
                let e = self.read_i(b, end);
                self.icmp_branch(b, IntCC::SignedLessThan, next, e, target, pc);
            }

            Op::Call { func, base, dst } => self.call(b, func, base, dst, pc),
            Op::Return { src } => {
                let v = self.read(b, src);
                self.return_value(b, Some(v));
            }
            Op::ReturnVoid => {
                self.return_value(b, None);
            }
            _ => return false,
        }
        true
    }

    /// Strings, arrays, conversions, `--slow-line`'s spins, and every slow
    /// instruction (through the interpreter's own code).
    pub(super) fn memory_or_slow(&mut self, b: &mut FunctionBuilder<'_>, op: Op, pc: usize) {
        match op {
            Op::LenS { dst, src } => {
                let s = self.read_i(b, src);
                let helper = self.helper(b, self.env.imports.str_len);
                let call = b.ins().call(helper, &[s]);
                let v = b.inst_results(call)[0];
                self.write(b, dst as usize, v);
            }
            Op::GetElem { dst, arr, idx } => {
                let addr = self.element_address(b, arr, idx, pc);
                // Load floats straight into a float register.
                let ty = match self.slots[dst as usize] {
                    Slot::Var(_, ty) => ty,
                    _ => types::I64,
                };
                let v = b.ins().load(ty, flags(), addr, 0);
                self.write(b, dst as usize, v);
            }
            Op::SetElem { arr, idx, val } => {
                let addr = self.element_address(b, arr, idx, pc);
                let v = self.read(b, val);
                b.ins().store(flags(), v, addr, 0);
            }
            Op::LenA { dst, src } => {
                let a = self.read_i(b, src);
                let v = b.ins().load(types::I64, flags(), a, self.env.array.len);
                self.write(b, dst as usize, v);
            }
            Op::Pop { dst, arr } => {
                self.via_frame(b, &op, |t, b| {
                    let a = t.read_i(b, arr);
                    let helper = t.helper(b, t.env.imports.pop);
                    let func = b.ins().iconst(types::I32, t.env.func as i64);
                    let pcv = b.ins().iconst(types::I32, pc as i64);
                    let slot = b.ins().iadd_imm_s(t.base, slot_offset(dst as usize) as i64);
                    let call = b.ins().call(helper, &[t.vm, func, pcv, a, slot]);
                    b.inst_results(call)[0]
                });
            }
            Op::IntToFloat { dst, src } => {
                let x = self.read_i(b, src);
                let v = b.ins().fcvt_from_sint(types::F64, x);
                self.write(b, dst as usize, v);
            }
            Op::FloatToInt { dst, src } => {
                let x = self.read_f(b, src);
                // Saturating, NaN → 0: exactly Rust's `as`.
                let v = b.ins().fcvt_to_sint_sat(types::I64, x);
                self.write(b, dst as usize, v);
            }
            Op::Sqrt { dst, src } => {
                let x = self.read_f(b, src);
                let v = b.ins().sqrt(x);
                self.write(b, dst as usize, v);
            }
            Op::Spin { k } => self.spin(b, k),
            _ => {
                debug_assert!(op.is_slow());
                self.via_frame(b, &op, |t, b| {
                    let helper = t.helper(b, t.env.imports.slow_op);
                    let func = b.ins().iconst(types::I32, t.env.func as i64);
                    let pcv = b.ins().iconst(types::I32, pc as i64);
                    let call = b.ins().call(helper, &[t.vm, func, t.base, pcv]);
                    b.inst_results(call)[0]
                });
            }
        }
    }

    /// `--slow-line`'s busy work as machine code at the line's own
    /// addresses (a helper call would give perf a native frame of its
    /// own): `consts[k]` rounds of the loop of `vm::runtime::spin`, four
    /// dependent multiplications and a count-down branch, whose time is the
    /// multiplications' latency wherever the loop lands. Cranelift keeps
    /// the loop: the branch uses the count, the next round the product.
    fn spin(&mut self, b: &mut FunctionBuilder<'_>, k: u16) {
        let Const::Int(rounds) = self.f.consts[k as usize] else {
            unreachable!("the verifier checks that a spin count is an int")
        };
        let round = b.create_block();
        let done = b.create_block();
        let left = b.append_block_param(round, types::I64);
        let product = b.append_block_param(round, types::I64);
        // One constant serves as count and as first factor (a product's
        // value does not change a multiplication's latency). Cranelift's
        // optimizer places constants without their source line, so this
        // one instruction per entry is the function's, not the line's.
        let start = b.ins().iconst(types::I64, rounds);
        b.ins()
            .jump(round, &[BlockArg::Value(start), BlockArg::Value(start)]);
        b.switch_to_block(round);
        let mut x = product;
        for _ in 0..vm::bytecode::SPIN_MULTIPLICATIONS {
            x = b.ins().imul(x, x);
        }
        let next = b.ins().iadd_imm_s(left, -1);
        let args = [BlockArg::Value(next), BlockArg::Value(x)];
        b.ins().brif(next, round, &args, done, &[]);
        b.seal_block(round);
        b.seal_block(done);
        b.switch_to_block(done);
    }

    pub(super) fn imm_branch(
        &mut self,
        b: &mut FunctionBuilder<'_>,
        a: Reg,
        imm: i16,
        cc: IntCC,
        target: u32,
        pc: usize,
    ) {
        let x = self.read_i(b, a);
        let c = b.ins().icmp_imm_s(cc, x, imm as i64);
        self.branch(b, c, target, pc);
    }

    pub(super) fn branch(
        &mut self,
        b: &mut FunctionBuilder<'_>,
        cond: Value,
        target: u32,
        pc: usize,
    ) {
        let taken = self.blocks[&(target as usize)];
        let next = self.blocks[&(pc + 1)];
        b.ins().brif(cond, taken, &[], next, &[]);
        self.edge_emitted(b, target as usize);
        self.edge_emitted(b, pc + 1);
    }

    pub(super) fn icmp_branch(
        &mut self,
        b: &mut FunctionBuilder<'_>,
        cc: IntCC,
        x: Value,
        y: Value,
        target: u32,
        pc: usize,
    ) {
        let c = b.ins().icmp(cc, x, y);
        self.branch(b, c, target, pc);
    }

    pub(super) fn fcmp_branch(
        &mut self,
        b: &mut FunctionBuilder<'_>,
        cc: FloatCC,
        x: Reg,
        y: Reg,
        target: u32,
        pc: usize,
    ) {
        let (x, y) = (self.read_f(b, x), self.read_f(b, y));
        let c = b.ins().fcmp(cc, x, y);
        self.branch(b, c, target, pc);
    }

    /// `dst = op(x, y)`, the operands read as `ty` (`I64` for ints,
    /// bools and strings, `F64` for floats).
    pub(super) fn binary(
        &mut self,
        b: &mut FunctionBuilder<'_>,
        dst: Reg,
        x: Reg,
        y: Reg,
        ty: ir::Type,
        op: impl FnOnce(&mut FunctionBuilder<'_>, Value, Value) -> Value,
    ) {
        let (x, y) = (self.read_as(b, x, ty), self.read_as(b, y, ty));
        let v = op(b, x, y);
        self.write(b, dst as usize, v);
    }

    /// `dst = x cc y` for strings: their order from the runtime, compared
    /// with 0.
    pub(super) fn str_cmp(
        &mut self,
        b: &mut FunctionBuilder<'_>,
        dst: Reg,
        x: Reg,
        y: Reg,
        cc: IntCC,
    ) {
        let str_cmp = self.helper(b, self.env.imports.str_cmp);
        self.binary(b, dst, x, y, types::I64, |b, x, y| {
            let call = b.ins().call(str_cmp, &[x, y]);
            let ord = b.inst_results(call)[0];
            let c = b.ins().icmp_imm_s(cc, ord, 0);
            b.ins().uextend(types::I64, c)
        });
    }

    /// Integer division or remainder with the interpreter's semantics:
    /// error on zero, `i64::MIN / -1` wraps (Cranelift's `sdiv` would trap).
    pub(super) fn div_rem(
        &mut self,
        b: &mut FunctionBuilder<'_>,
        dst: Reg,
        x: Value,
        y: Value,
        pc: usize,
        rem: bool,
    ) {
        let is_zero = b.ins().icmp_imm_s(IntCC::Equal, y, 0);
        let code = if rem {
            codes::MODULO_BY_ZERO
        } else {
            codes::DIVISION_BY_ZERO
        };
        self.fail_if(b, is_zero, pc, code);
        let minus_one = b.ins().icmp_imm_s(IntCC::Equal, y, -1);
        let one = b.ins().iconst(types::I64, 1);
        let safe = b.ins().select(minus_one, one, y);
        let v = if rem {
            let r = b.ins().srem(x, safe);
            let zero = b.ins().iconst(types::I64, 0);
            b.ins().select(minus_one, zero, r)
        } else {
            let q = b.ins().sdiv(x, safe);
            let neg = b.ins().ineg(x);
            b.ins().select(minus_one, neg, q)
        };
        self.write(b, dst as usize, v);
    }

    /// Loads the length of array `arr` and checks `idx` against it;
    /// returns the element address.
    pub(super) fn element_address(
        &mut self,
        b: &mut FunctionBuilder<'_>,
        arr: Reg,
        idx: Reg,
        pc: usize,
    ) -> Value {
        let a = self.read_i(b, arr);
        let i = self.read_i(b, idx);
        let len = match self.array_fields.get(&a) {
            Some(&(len, _)) => len,
            None => b.ins().load(types::I64, flags(), a, self.env.array.len),
        };
        let outside = b.ins().icmp(IntCC::UnsignedGreaterThanOrEqual, i, len);
        let target = self.index_error_block(b);
        self.exit_if(b, outside, target, &[pc as u32], &[i, len]);
        let data = match self.array_fields.get(&a) {
            Some(&(_, data)) => data,
            None => b.ins().load(types::I64, flags(), a, self.env.array.data),
        };
        self.array_fields.insert(a, (len, data));
        let off = b.ins().ishl_imm_u(i, 3);
        b.ins().iadd(data, off)
    }
}

/// The [`Translator::binary`] operation of an integer comparison: 1 if
/// `x cc y`, else 0.
fn icmp(cc: IntCC) -> impl FnOnce(&mut FunctionBuilder<'_>, Value, Value) -> Value {
    move |b, x, y| {
        let c = b.ins().icmp(cc, x, y);
        b.ins().uextend(types::I64, c)
    }
}

/// The [`Translator::binary`] operation of a float comparison: 1 if
/// `x cc y`, else 0.
fn fcmp(cc: FloatCC) -> impl FnOnce(&mut FunctionBuilder<'_>, Value, Value) -> Value {
    move |b, x, y| {
        let c = b.ins().fcmp(cc, x, y);
        b.ins().uextend(types::I64, c)
    }
}
