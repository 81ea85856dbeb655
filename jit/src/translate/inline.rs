//! Inlining: a call of a small straight-line leaf is translated in place.

use cranelift_codegen::ir::InstBuilder;
use cranelift_frontend::FunctionBuilder;
use vm::bytecode::{Op, Reg};

use crate::abi::{clif_type, frames};
use crate::codegen::line_table;

use super::registers::Slot;
use super::{Translator, flags, slot_offset};

impl Translator<'_, '_> {
    /// Translates a call of a small straight-line leaf (see
    /// [`limits::is_inlinable_leaf`]) in place: its registers become fresh
    /// variables, its parameters the argument values. Such a callee cannot
    /// fail, allocate or call, so it needs no frame record; only the depth
    /// limit stays observable, so it is still checked (and reported exactly
    /// as a real call would: the callee fails, the caller adds its entry).
    pub(super) fn inline_leaf(
        &mut self,
        b: &mut FunctionBuilder<'_>,
        callee: u16,
        base_reg: Reg,
        dst: Reg,
        pc: usize,
    ) {
        let cf = &self.env.module.functions[callee as usize];
        let room = frames::depth_room(b, self.vm);
        let target = self.too_deep_block(b);
        self.exit_if(b, room.over, target, &[pc as u32], &[]);
        // `--vmprof-inlined`: the inlined call gets the frame record a real
        // call would write, so samples inside it name the callee. Its registers
        // are not in that frame, but a leaf cannot collect garbage or fail,
        // so only the sampler reads the record.
        let frame_base = self.env.inlined_frames.then(|| {
            let callee_base = b
                .ins()
                .iadd_imm_s(self.base, slot_offset(base_reg as usize) as i64);
            let frames = frames::frames(b, self.vm);
            frames::push_record(
                b,
                self.vm,
                frames,
                room.depth1,
                callee_base,
                callee as u32,
                self.env.locations,
            );
            callee_base
        });
        let mut slots = Vec::with_capacity(cf.reg_types.len());
        for ty in &cf.reg_types {
            let cty = clif_type(ty);
            slots.push(Slot::Var(b.declare_var(cty), cty));
        }
        for (i, (_, ty)) in cf.params.iter().enumerate() {
            let v = self.read_as(b, base_reg + i as u8, clif_type(ty));
            if let Slot::Var(var, _) = slots[i] {
                b.def_var(var, v);
            }
        }
        let env = self.env.for_leaf(callee as u32);
        let mut inner = Translator::new(cf, &env, &mut *self.jit, self.role);
        inner.slots = slots;
        inner.vm = self.vm;
        inner.base = self.base;
        let srcloc = b.srcloc();
        for (at, op) in cf.code.iter().enumerate() {
            // The callee's own lines (see `line_table`).
            b.set_srcloc(line_table::inlined_site(callee as u32, at, pc));
            match *op {
                Op::Return { src } => {
                    let v = inner.read(b, src);
                    if let Some(callee_base) = frame_base {
                        // Where a real call leaves its result. The body is
                        // pure arithmetic, which Cranelift places just
                        // before its first use: this store, a use with a
                        // side effect, keeps it inside the callee's frame
                        // (before the depth store below).
                        b.ins().store(flags(), v, callee_base, 0);
                    }
                    self.write(b, dst as usize, v);
                    break;
                }
                Op::ReturnVoid => break,
                // Only string constants use the runtime pool, and an
                // inlinable leaf has no reference registers to load them.
                _ => {
                    inner.instruction(b, at);
                    // `is_inlinable_leaf` admits no instruction that can
                    // fail (`inner` never fills error blocks).
                    debug_assert!(inner.error_exit.is_none(), "an inlined leaf can fail");
                }
            }
        }
        if frame_base.is_some() {
            frames::pop_record(b, self.vm);
        }
        b.set_srcloc(srcloc);
    }
}

#[cfg(test)]
mod tests {
    use vm::bytecode::Function;

    use crate::translate::limits::{INLINE_MAX_OPS, is_inlinable_leaf};

    fn function(source: &str, name: &str) -> Function {
        let module = vm::driver::load("t.toy", source.as_bytes()).expect("compiles");
        (module.functions.into_iter())
            .find(|f| f.name == name)
            .expect("function exists")
    }

    #[test]
    fn small_scalar_straight_line_functions_are_inlinable() {
        let f = function(
            "fn f(x: int, y: int) -> int { return x * y + 1; }\nprint(f(2, 3));\n",
            "f",
        );
        assert!(is_inlinable_leaf(&f));
    }

    #[test]
    fn calls_branches_references_and_failing_instructions_are_not() {
        let cases = [
            "fn g(x: int) -> int { return x; }\nfn f(x: int) -> int { return g(x); }\nprint(f(1));\n",
            "fn f(x: int) -> int { if x < 0 { return 0; } return x; }\nprint(f(1));\n",
            "fn f(s: str) -> int { return len(s); }\nprint(f(\"a\"));\n",
            "fn f(x: int) -> int { return 10 / x; }\nprint(f(1));\n",
        ];
        for source in cases {
            assert!(!is_inlinable_leaf(&function(source, "f")), "{source}");
        }
    }

    #[test]
    fn a_long_body_is_not() {
        let body = "x = x + 1; ".repeat(INLINE_MAX_OPS);
        let source = format!("fn f(x: int) -> int {{ {body}return x; }}\nprint(f(1));\n");
        assert!(!is_inlinable_leaf(&function(&source, "f")));
    }
}
