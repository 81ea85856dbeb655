//! Where each Toy register lives in compiled code, and reading, writing,
//! spilling and reloading it.

use cranelift_codegen::ir::{self, InstBuilder, Value, types};
use cranelift_frontend::{FunctionBuilder, Variable};
use vm::bytecode::Reg;

use super::{Translator, convert, flags, slot_offset};

/// Where a register lives in compiled code.
#[derive(Clone, Copy, Debug)]
pub(super) enum Slot {
    /// A scalar typed register in a variable of this type.
    Var(Variable, ir::Type),
    /// A reference register: in a variable, and written through to its
    /// frame slot at every definition (the GC root invariant; objects never
    /// move, so reads can use the variable).
    Ref(Variable),
    /// A call-area slot: an `i64` variable of bits.
    Arg(Variable),
    /// A parameter that no instruction writes: the value it gets on entry
    /// (the argument, or the frame slot an OSR variant loads), used as a
    /// plain SSA value. Unlike a variable, it costs the SSA builder no
    /// lookups and no loop a block parameter. `value` is `None` until the
    /// entry defines it; a reference's frame slot always holds it (the
    /// native prologue writes it through).
    Fixed {
        value: Option<Value>,
        ty: ir::Type,
        is_ref: bool,
    },
}

impl Translator<'_, '_> {
    /// OSR entry: every typed register from its frame slot.
    pub(super) fn load_all_registers(&mut self, b: &mut FunctionBuilder<'_>) {
        for r in 0..self.f.num_typed() {
            self.reload(b, r);
        }
    }

    /// Reads register `r` in its natural representation.
    pub(super) fn read(&self, b: &mut FunctionBuilder<'_>, r: Reg) -> Value {
        match self.slots[r as usize] {
            Slot::Var(v, _) | Slot::Arg(v) | Slot::Ref(v) => b.use_var(v),
            // The entry defines every parameter before any instruction.
            Slot::Fixed { value, .. } => value.expect("parameter defined on entry"),
        }
    }

    /// Reads register `r` as a value of type `ty` (reinterpreting bits).
    pub(super) fn read_as(&self, b: &mut FunctionBuilder<'_>, r: Reg, ty: ir::Type) -> Value {
        let v = self.read(b, r);
        convert(b, v, ty)
    }

    pub(super) fn read_i(&self, b: &mut FunctionBuilder<'_>, r: Reg) -> Value {
        self.read_as(b, r, types::I64)
    }

    pub(super) fn read_f(&self, b: &mut FunctionBuilder<'_>, r: Reg) -> Value {
        self.read_as(b, r, types::F64)
    }

    /// Writes `value` to register `r` (reinterpreting bits as needed).
    pub(super) fn write(&mut self, b: &mut FunctionBuilder<'_>, r: usize, value: Value) {
        match self.slots[r] {
            Slot::Var(v, ty) => {
                let value = convert(b, value, ty);
                b.def_var(v, value);
            }
            Slot::Arg(v) => {
                let value = convert(b, value, types::I64);
                b.def_var(v, value);
            }
            Slot::Ref(v) => {
                let value = convert(b, value, types::I64);
                b.def_var(v, value);
                b.ins().store(flags(), value, self.base, slot_offset(r));
            }
            Slot::Fixed { ty, is_ref, .. } => {
                let value = convert(b, value, ty);
                self.define_fixed(r, value);
                if is_ref {
                    b.ins().store(flags(), value, self.base, slot_offset(r));
                }
            }
        }
    }

    /// Gives the [`Slot::Fixed`] register `r` its value on entry.
    pub(super) fn define_fixed(&mut self, r: usize, value: Value) {
        if let Slot::Fixed { value: slot, .. } = &mut self.slots[r] {
            // `written_registers` missed a write: a translator bug that
            // would otherwise produce wrong code.
            assert!(slot.is_none(), "r{r} is written after entry");
            *slot = Some(value);
        }
    }

    /// Stores a scalar register to its frame slot (references are always
    /// there already).
    pub(super) fn spill(&self, b: &mut FunctionBuilder<'_>, r: usize) {
        let value = match self.slots[r] {
            Slot::Var(v, _) | Slot::Arg(v) => b.use_var(v),
            Slot::Fixed {
                value: Some(value),
                is_ref: false,
                ..
            } => value,
            Slot::Ref(_) | Slot::Fixed { .. } => return,
        };
        b.ins().store(flags(), value, self.base, slot_offset(r));
    }

    /// Reloads a register from its frame slot.
    pub(super) fn reload(&mut self, b: &mut FunctionBuilder<'_>, r: usize) {
        match self.slots[r] {
            Slot::Var(v, ty) => {
                let value = b.ins().load(ty, flags(), self.base, slot_offset(r));
                b.def_var(v, value);
            }
            Slot::Arg(v) | Slot::Ref(v) => {
                let value = b.ins().load(types::I64, flags(), self.base, slot_offset(r));
                b.def_var(v, value);
            }
            Slot::Fixed { ty, .. } => {
                let value = b.ins().load(ty, flags(), self.base, slot_offset(r));
                self.define_fixed(r, value);
            }
        }
    }
}
