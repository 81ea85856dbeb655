//! A native function's frame: the prologue (native stack check, reference
//! registers, parameters) and every return. Entering and leaving the frame is the
//! caller's (`crate::abi::frames`).

use cranelift_codegen::ir::{self, InstBuilder, Value, types};
use cranelift_frontend::FunctionBuilder;

use crate::abi::clif_type;
use crate::codegen::role::Role;

use super::{Translator, convert, flags, slot_offset};

impl Translator<'_, '_> {
    /// The native variant's entry: its caller has entered the frame (see
    /// `crate::abi::frames`), so what is left is the native stack check (the
    /// frame Cranelift allocated is this function's own, see
    /// `crate::abi::stack_guard`), zeroing the reference registers that are not
    /// parameters and taking the parameters.
    pub(super) fn prologue(&mut self, b: &mut FunctionBuilder<'_>, args: &[Value]) {
        let exhausted = crate::abi::stack_guard::stack_exhausted(b, self.vm);
        let no_stack = self.no_stack_block(b);
        self.exit_if(b, exhausted, no_stack, &[], &[]);
        let nparams = self.f.params.len();
        let mut zero = None;
        for &r in &self.f.ref_regs {
            if (r as usize) >= nparams {
                let zero = *zero.get_or_insert_with(|| b.ins().iconst(types::I64, 0));
                b.ins()
                    .store(flags(), zero, self.base, slot_offset(r as usize));
            }
        }
        for (i, &arg) in args.iter().enumerate() {
            self.write(b, i, arg);
        }
    }

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

    /// Returns from the function with `value` (or none). The frame is the
    /// caller's to leave (see `crate::abi::frames`).
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
