//! Bytecode → Cranelift IR, one function at a time.
//!
//! # Compiled functions
//!
//! A Toy function `f(p0, .., pn)` compiles to a **native function**
//! `(vm, base, p0, .., pn) -> (result, status)`: `vm` is the `*mut Vm`,
//! `base` the frame's register 0 on the value stack, the parameters come in
//! machine registers with their natural types (`int`/`bool`/references as
//! `i64`, `float` as `f64`), and it returns the result (`0` for functions
//! without one) and the entry ABI's status (`STATUS_OK`/`STATUS_ERROR`). It
//! runs in a frame its caller entered (depth check, frame record, `depth
//! += 1`) and leaves (`depth -= 1`): the compiled call site or the entry
//! shim, see [`crate::abi::frames`]. Its own prologue checks the native stack
//! (its frame is its own, see [`crate::abi::stack_guard`]), zeroes the
//! reference registers and takes the parameters.
//!
//! The **OSR variant** `(vm, base, pc) -> status` of a function continues an
//! interpreted activation at loop header `pc`: its entry block loads every
//! typed register from the frame and switches on `pc` to the header's
//! block (one variant for all the function's loops); the interpreter owns
//! depth and frame record, and the result goes to `base[0]` as for an
//! entry.
//!
//! # Registers
//!
//! * `int`, `bool` and `float` registers are Cranelift variables (machine
//!   registers after register allocation); parameters that no instruction
//!   assigns are plain SSA values.
//! * Reference registers are variables too, and every definition is also
//!   written through to the register's frame slot: that is the GC root
//!   invariant (any instruction that can collect sees every live reference
//!   in the frame). Objects never move, so reads use the variable.
//! * Call-area slots are `i64` variables holding the argument bits; they
//!   are passed in machine registers to compiled callees, or stored to the
//!   frame right before a call through the entry table.
//!
//! Instructions that allocate, print or parse run the interpreter's own
//! code through [`crate::abi::helpers::toy_jit_slow_op`]: their scalar operands
//! are stored to the frame first and the result is reloaded after.
//! Errors call a helper that records the error like the interpreter
//! (`Vm::fail` with the instruction index), then return `STATUS_ERROR`;
//! the helper calls sit in one shared cold block per kind of error
//! (`ErrorBlocks`), and a failing call adds the caller's trace entry.
//! Every instruction gets its bytecode index as Cranelift source location: the line tables and the
//! `disasm --jit` listing map machine code back to bytecode and source.
//!
//! # Parts
//!
//! | module | what |
//! |---|---|
//! | [`cfg`] | basic-block leaders and the edges into them |
//! | [`analysis`] | which registers are written (the rest are fixed SSA values) |
//! | `registers` | where each register lives; reads, writes, spills |
//! | `frame` | prologue (stack check, parameters), returns |
//! | `instruction` | one bytecode instruction → IR |
//! | `calls` | calls (direct, through the entry table) and helper calls |
//! | [`inline`] | inlining small leaf callees |
//! | `errors` | the shared cold blocks that record errors |

mod analysis;
mod calls;
mod cfg;
mod errors;
mod frame;
mod inline;
mod instruction;
pub mod limits;
mod lines;
pub(crate) mod lowering;
mod registers;

use std::collections::HashMap;

use cranelift_codegen::ir::{
    self, Block, FuncRef, InstBuilder, MemFlagsData, TrapCode, Value, types,
};
use cranelift_codegen::isa::CallConv;
use cranelift_frontend::{FunctionBuilder, Switch};
use cranelift_jit::JITModule;
use cranelift_module::{FuncId, Module};
use vm::bytecode::Function;

use crate::abi::layout::ArrayLayout;
use crate::abi::{Imports, clif_type};
use crate::codegen::line_table;
use crate::codegen::role::Role;
use crate::translate::limits::InlineBudget;

use analysis::written_registers;
use cfg::{incoming_edges, leaders, loop_headers};
use errors::ErrorBlocks;
use registers::Slot;

/// Everything the translator needs besides the bytecode.
pub struct Env<'a> {
    /// The script.
    pub module: &'a vm::bytecode::Module,
    /// The function being translated.
    pub func: u32,
    /// Runtime constant pool of `func` (string constants as references).
    pub consts: &'a [u64],
    /// The native function of a function, if compiled (so far, or in
    /// this batch, `func` itself included when compiling its native
    /// function): called directly.
    pub natives: &'a dyn Fn(u32) -> Option<FuncId>,
    /// The imported helpers.
    pub imports: Imports,
    /// Where an array's fields are.
    pub array: ArrayLayout,
    /// The host calling convention.
    pub call_conv: CallConv,
    /// `toyvm run --vmprof-inlined` (`Vm::vmprof_inlined_frames`):
    /// inlined leaf callees get a frame record too, so profiles show them.
    pub inlined_frames: bool,
    /// `toyvm run --vmprof-lines` (`Vm::vmprof_locations`): store the
    /// location of every instruction that calls out (a Toy call, inlined
    /// or not, a helper) in the frame record before it, so that samples
    /// find a caller's line (see `lines`).
    pub locations: Option<&'a vm::abi::Locations>,
}

impl<'a> Env<'a> {
    /// The environment of `callee`, a leaf inlined into this function: it
    /// makes no calls and reads no constants, so it needs neither frame
    /// records nor locations.
    fn for_leaf(&self, callee: u32) -> Env<'a> {
        Env {
            func: callee,
            consts: &[],
            inlined_frames: false,
            locations: None,
            ..*self
        }
    }
}

/// Translates `env.func` into `builder` (whose signature is already set):
/// its native function ([`Role::Native`]) or an OSR variant ([`Role::Osr`]);
/// shims and trampolines are [`crate::abi`]'s.
pub fn translate(
    builder: &mut FunctionBuilder<'_>,
    jit: &mut JITModule,
    env: &Env<'_>,
    role: Role,
) {
    let f = &env.module.functions[env.func as usize];
    Translator::new(f, env, jit, role).run(builder);
}

struct Translator<'a, 'j> {
    f: &'a Function,
    env: &'a Env<'a>,
    jit: &'j mut JITModule,
    slots: Vec<Slot>,
    /// The block starting at each leader instruction.
    blocks: HashMap<usize, Block>,
    /// Per leader: edges into its block not emitted yet (see
    /// `Translator::edge_emitted`).
    incoming: HashMap<usize, u32>,
    /// Imported functions already declared in this function.
    refs: HashMap<FuncId, FuncRef>,
    vm: Value,
    base: Value,
    /// vmprof lines mode: the line of the location last stored in the frame
    /// record in the current basic block (see `lines`).
    stored_line: Option<u32>,
    /// The shared cold block returning `STATUS_ERROR`.
    error_exit: Option<Block>,
    /// The shared cold blocks that record an error, then leave through
    /// `error_exit` (filled at the end, see `fill_error_blocks`).
    errors: ErrorBlocks,
    /// [`Role::Native`] or [`Role::Osr`].
    role: Role,
    /// Length and element pointer already loaded for an array reference
    /// in the current basic block. Element stores never change them (the
    /// elements live in their own buffer); anything that may push or pop
    /// (calls, helpers) clears the cache, and so does every block start.
    array_fields: HashMap<Value, (Value, Value)>,
    /// What is left for inlining in this function (see `crate::translate::limits`).
    inline_budget: InlineBudget,
    /// The instruction being lowered, while `instruction` runs: a runtime
    /// helper it calls must be one [`lowering::calls_helper`] names.
    lowering_pc: Option<usize>,
}

impl<'a, 'j> Translator<'a, 'j> {
    /// A translator of `f` (with `env`) into `jit`, before `run` sets up
    /// its registers, blocks and the `vm` and `base` values.
    fn new(f: &'a Function, env: &'a Env<'a>, jit: &'j mut JITModule, role: Role) -> Self {
        Translator {
            f,
            env,
            jit,
            slots: Vec::new(),
            blocks: HashMap::new(),
            incoming: HashMap::new(),
            refs: HashMap::new(),
            vm: Value::from_u32(0),
            base: Value::from_u32(0),
            stored_line: None,
            error_exit: None,
            errors: ErrorBlocks::default(),
            role,
            array_fields: HashMap::new(),
            inline_budget: InlineBudget::default(),
            lowering_pc: None,
        }
    }
}

/// The trap of an OSR variant called with a `pc` that is no loop header
/// (see `Translator::osr_dispatch`).
const BAD_OSR_PC: TrapCode = TrapCode::unwrap_user(1);

/// Byte offset of register `r` in a frame.
fn slot_offset(r: usize) -> i32 {
    (r * 8) as i32
}

fn flags() -> MemFlagsData {
    MemFlagsData::trusted()
}

/// Reinterprets `v` as `ty` (same bits) when the types differ.
fn convert(b: &mut FunctionBuilder<'_>, v: Value, ty: ir::Type) -> Value {
    if b.func.dfg.value_type(v) == ty {
        v
    } else {
        b.ins().bitcast(ty, MemFlagsData::new(), v)
    }
}
impl Translator<'_, '_> {
    fn run(&mut self, b: &mut FunctionBuilder<'_>) {
        let f = self.f;
        let written = written_registers(&f.code, f.frame_size as usize);
        for (r, ty) in f.reg_types.iter().enumerate() {
            let slot = if r < f.params.len() && !written[r] {
                Slot::Fixed {
                    value: None,
                    ty: clif_type(ty),
                    is_ref: ty.is_ref(),
                }
            } else if ty.is_ref() {
                Slot::Ref(b.declare_var(types::I64))
            } else {
                let cty = clif_type(ty);
                Slot::Var(b.declare_var(cty), cty)
            };
            debug_assert_eq!(self.slots.len(), r);
            self.slots.push(slot);
        }
        for _ in f.num_typed()..f.frame_size as usize {
            self.slots.push(Slot::Arg(b.declare_var(types::I64)));
        }
        let leaders = leaders(&f.code);
        for &pc in &leaders {
            self.blocks.insert(pc, b.create_block());
        }

        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        b.seal_block(entry);
        b.set_srcloc(line_table::function_line());
        let params = b.block_params(entry).to_vec();
        self.vm = params[0];
        self.base = params[1];
        let starts = match self.role {
            Role::Osr => loop_headers(&f.code),
            _ => vec![0],
        };
        self.incoming = incoming_edges(&f.code, &starts);
        // Leaders nothing jumps to (the `ReturnVoid` the compiler appends
        // after a final `return`): not translated at all.
        let unreachable: Vec<usize> = (self.incoming.iter())
            .filter(|&(_, &n)| n == 0)
            .map(|(&pc, _)| pc)
            .collect();
        match self.role {
            Role::Osr => {
                self.load_all_registers(b);
                self.osr_dispatch(b, params[2], &starts);
            }
            _ => {
                self.prologue(b, &params[2..]);
                b.ins().jump(self.blocks[&0], &[]);
            }
        }
        for &start in &starts {
            self.edge_emitted(b, start);
        }

        let mut terminated = true;
        for pc in 0..f.code.len() {
            if let Some(&block) = self.blocks.get(&pc) {
                if unreachable.contains(&pc) {
                    continue;
                }
                if !terminated {
                    b.ins().jump(block, &[]);
                    self.edge_emitted(b, pc);
                }
                b.switch_to_block(block);
                self.array_fields.clear();
                self.stored_line = None;
            } else if terminated {
                continue; // unreachable
            }
            b.set_srcloc(line_table::site(pc));
            self.store_pc_if_calling(b, pc);
            self.lowering_pc = Some(pc);
            terminated = self.instruction(b, pc);
            self.lowering_pc = None;
        }
        self.fill_error_blocks(b);
        // The shared error blocks, and any block whose count of incoming
        // edges was an overestimate (edges from unreachable code).
        b.seal_all_blocks();
    }

    // ANCHOR: osr_dispatch
    /// The OSR variant's entry, after the registers are loaded: continue at
    /// the loop header `pc` names. One variant serves every loop of the
    /// function, so a function whose loops get hot one after another (or
    /// whose later activations tier up in another loop) compiles once. A
    /// `pc` that is no header breaks the [`vm::abi::OsrFn`] contract: the
    /// default traps rather than run from a wrong place.
    fn osr_dispatch(&mut self, b: &mut FunctionBuilder<'_>, pc: Value, headers: &[usize]) {
        let mut switch = Switch::new();
        for &header in headers {
            switch.set_entry(header as u128, self.blocks[&header]);
        }
        let bad_pc = b.create_block();
        switch.emit(b, pc, bad_pc);
        b.seal_block(bad_pc);
        b.switch_to_block(bad_pc);
        b.set_cold_block(bad_pc);
        b.ins().trap(BAD_OSR_PC);
    }
    // ANCHOR_END: osr_dispatch

    /// Counts one more emitted edge into the block of leader `pc`, and
    /// seals that block once all its edges are there: the SSA builder then
    /// finds a variable's value by walking predecessors instead of adding
    /// a block parameter to resolve later, and removes the parameters that
    /// turn out to be the same value on every edge (a loop-invariant value
    /// through nested loops included), which it cannot do for blocks that
    /// all stay unsealed until the end.
    fn edge_emitted(&mut self, b: &mut FunctionBuilder<'_>, pc: usize) {
        if let Some(n) = self.incoming.get_mut(&pc) {
            *n -= 1;
            if *n == 0 {
                b.seal_block(self.blocks[&pc]);
            }
        }
    }

    fn func_ref(&mut self, b: &mut FunctionBuilder<'_>, id: FuncId) -> FuncRef {
        *self
            .refs
            .entry(id)
            .or_insert_with(|| self.jit.declare_func_in_func(id, b.func))
    }

    /// The runtime helper `id`, called on the path of the instruction being
    /// lowered: one of those [`lowering::calls_helper`] names, so that
    /// lines mode stores its location first (see `lines`). Error paths,
    /// which leave the function, call theirs through `func_ref`.
    fn helper(&mut self, b: &mut FunctionBuilder<'_>, id: FuncId) -> FuncRef {
        if let Some(pc) = self.lowering_pc {
            debug_assert!(
                lowering::calls_helper(&self.f.code[pc]),
                "{:?} calls a helper, but the lowering table does not say so",
                self.f.code[pc]
            );
            #[cfg(test)]
            lowering::record_helper_call(self.env.func, pc);
        }
        self.func_ref(b, id)
    }
}
