//! Bytecode → Cranelift IR, one function at a time.
//!
//! # Compiled functions
//!
//! A Toy function `f(p0, .., pn)` compiles to a **native function**
//! `(vm, base, p0, .., pn) -> (result, status)`: `vm` is the `*mut Vm`,
//! `base` the frame's register 0 on the value stack, the parameters come in
//! machine registers with their natural types (`int`/`bool`/references as
//! `i64`, `float` as `f64`), and it returns the result (`0` for functions
//! without one) and a status: the entry ABI's (`STATUS_OK`/`STATUS_ERROR`),
//! or [`STATUS_DEPTH_EXCEEDED`]. Its prologue does what `interp_entry`
//! does: the depth check, the frame record, `depth += 1`, zeroing ref
//! registers; every exit restores `depth`. The record is written before
//! the depth that covers it: the vmprof sampler reads the records from a
//! signal handler (`vm::vmprof`). A failed depth check returns
//! [`STATUS_DEPTH_EXCEEDED`] without recording anything (so the prologue
//! has no helper call: one call costs the register allocator about as
//! much as the rest of a small function): whoever receives that status
//! records the error, the calling compiled code or the entry shim.
//!
//! The **OSR variant** `(vm, base) -> status` of a loop header continues an
//! interpreted activation: its entry block loads every typed register from
//! the frame and jumps to the header; the interpreter owns depth and frame
//! record, and the result goes to `base[0]` as for an entry.
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
//! code through [`crate::helpers::toy_jit_slow_op`]: their scalar operands
//! are stored to the frame first and the result is reloaded after.
//! Errors call a helper that records the error like the interpreter
//! (`Vm::fail` with the instruction index), then return `STATUS_ERROR`;
//! the helper calls sit in one shared cold block per kind of error
//! (`ErrorBlocks`), and a failing call adds the caller's trace entry. Every instruction gets its
//! bytecode index as Cranelift source location: the line tables and the
//! `disasm --jit` listing map machine code back to bytecode and source.

use std::collections::HashMap;

use crate::line_table;

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{
    self, AbiParam, Block, BlockArg, FuncRef, InstBuilder, MemFlagsData, Signature, SourceLoc,
    Value, types,
};
use cranelift_codegen::isa::CallConv;
use cranelift_frontend::{FunctionBuilder, Variable};
use cranelift_jit::JITModule;
use cranelift_module::{FuncId, Module};
use vm::ast::Type;
use vm::bytecode::{Const, Flags, Function, Op, Reg};
use vm::runtime::offsets;

use crate::helpers::codes;
use crate::layout::ArrayLayout;
use crate::limits::InlineBudget;

/// Which kind of code to generate for a function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// The native function (see the module docs).
    Native,
    /// The OSR variant entering at the loop header `pc`.
    Osr { pc: u32 },
}

/// A native function's status when its depth check failed: an error not
/// recorded yet (no trace entry either: the frame never became active, as
/// in `interp_entry`). Never leaves compiled code: the native caller's
/// failed-call path passes it to `toy_jit_push_trace`, the entry shim to
/// `toy_jit_depth_exceeded`, and both record the error.
pub const STATUS_DEPTH_EXCEEDED: u32 = 2;

/// Cranelift type of a Toy value in a machine register.
pub fn clif_type(ty: &Type) -> ir::Type {
    match ty {
        Type::Float => types::F64,
        _ => types::I64,
    }
}

/// A signature of the host calling convention from its parameter and
/// return types.
pub fn signature(call_conv: CallConv, params: &[ir::Type], returns: &[ir::Type]) -> Signature {
    let mut sig = Signature::new(call_conv);
    sig.params.extend(params.iter().map(|&t| AbiParam::new(t)));
    sig.returns
        .extend(returns.iter().map(|&t| AbiParam::new(t)));
    sig
}

// ANCHOR: native_signature
/// The native signature of `f` (see the module docs).
pub fn native_signature(f: &Function, call_conv: CallConv) -> Signature {
    // `vm` and `base`, then the parameters in their machine types.
    let params: Vec<ir::Type> = [types::I64, types::I64]
        .into_iter()
        .chain(f.params.iter().map(|(_, ty)| clif_type(ty)))
        .collect();
    let ret = f.ret.as_ref().map_or(types::I64, clif_type);
    signature(call_conv, &params, &[ret, types::I32])
}
// ANCHOR_END: native_signature

/// The entry ABI `(vm, func, base) -> status` as a Cranelift signature.
pub fn entry_signature(call_conv: CallConv) -> Signature {
    signature(
        call_conv,
        &[types::I64, types::I32, types::I64],
        &[types::I32],
    )
}

/// The OSR signature `(vm, base) -> status`.
pub fn osr_signature(call_conv: CallConv) -> Signature {
    signature(call_conv, &[types::I64, types::I64], &[types::I32])
}

/// The imported runtime helpers, by name (see [`crate::helpers`]).
#[derive(Clone, Copy, Debug)]
pub struct HelperIds {
    pub slow_op: FuncId,
    pub pop: FuncId,
    pub fail: FuncId,
    pub index_error: FuncId,
    pub depth_exceeded: FuncId,
    pub push_trace: FuncId,
    pub str_cmp: FuncId,
    pub str_len: FuncId,
    pub fmod: FuncId,
}

/// Everything the translator needs besides the bytecode.
pub struct Env<'a> {
    pub module: &'a vm::bytecode::Module,
    pub func: u32,
    /// Runtime constant pool of `func` (string constants as references).
    pub consts: &'a [u64],
    /// The native function of every function compiled so far (and of
    /// `func` itself when compiling [`Variant::Native`]): called directly.
    pub natives: &'a [Option<FuncId>],
    pub helpers: HelperIds,
    pub array: ArrayLayout,
    pub call_conv: CallConv,
    /// `toyvm run --vmprof-inlined` ([`vm::runtime::Vm::vmprof_inlined_frames`]):
    /// inlined leaf callees get a frame record too, so profiles show them.
    pub inlined_frames: bool,
}

/// Where a register lives in compiled code.
#[derive(Clone, Copy, Debug)]
enum Slot {
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

/// Translates `env.func` into `builder` (whose signature is already set).
pub fn translate(
    builder: &mut FunctionBuilder<'_>,
    jit: &mut JITModule,
    env: &Env<'_>,
    variant: Variant,
) {
    let f = &env.module.functions[env.func as usize];
    let mut t = Translator {
        f,
        env,
        jit,
        slots: Vec::new(),
        blocks: HashMap::new(),
        incoming: HashMap::new(),
        refs: HashMap::new(),
        vm: Value::from_u32(0),
        base: Value::from_u32(0),
        depth0: None,
        error_exit: None,
        errors: ErrorBlocks::default(),
        variant,
        array_fields: HashMap::new(),
        inline_budget: InlineBudget::default(),
    };
    t.run(builder);
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
    /// `vm.depth` on entry (native variant), restored on every exit.
    depth0: Option<Value>,
    /// The shared cold block returning `STATUS_ERROR`.
    error_exit: Option<Block>,
    /// The shared cold blocks that record an error, then leave through
    /// `error_exit` (filled at the end, see `fill_error_blocks`).
    errors: ErrorBlocks,
    variant: Variant,
    /// Length and element pointer already loaded for an array reference
    /// in the current basic block. Element stores never change them (the
    /// elements live in their own buffer); anything that may push or pop
    /// (calls, helpers) clears the cache, and so does every block start.
    array_fields: HashMap<Value, (Value, Value)>,
    /// What is left for inlining in this function (see `crate::limits`).
    inline_budget: InlineBudget,
}

// The frame-record layout `push_frame_record` writes.
const _: () = assert!(size_of::<vm::runtime::FrameRecord>() == 1 << 4);
const _: () = assert!(std::mem::offset_of!(vm::runtime::FrameRecord, base) == 0);
const _: () = assert!(std::mem::offset_of!(vm::runtime::FrameRecord, func) == 8);

/// A function's shared cold blocks that record an error (each created on
/// first use). What differs between the failing sites (the instruction
/// index, operands) comes in as block parameters, so a function with many
/// checks has one helper call per kind of failure, not one per check:
/// less IR, and less work for the register allocator, whose cost grows
/// with every call's clobbers. (Failed calls keep one block per site, see
/// `Translator::trace_if_failed`.)
#[derive(Default)]
struct ErrorBlocks {
    /// `(pc: i32, code: i32)`: a failing instruction (see [`codes`]).
    fail: Option<Block>,
    /// `(pc: i32, index: i64, length: i64)`: an index out of bounds.
    index: Option<Block>,
    /// `(pc: i32)`: an inlined callee would exceed the depth limit.
    inline_too_deep: Option<Block>,
}

/// A new cold block with parameters of types `params`, for one of the
/// [`ErrorBlocks`] (`Translator::fill_error_blocks` emits its body).
fn cold_block(b: &mut FunctionBuilder<'_>, params: &[ir::Type]) -> Block {
    let block = b.create_block();
    b.set_cold_block(block);
    for &ty in params {
        b.append_block_param(block, ty);
    }
    block
}

/// Byte offset of register `r` in a frame.
fn slot_offset(r: usize) -> i32 {
    (r * 8) as i32
}

fn flags() -> MemFlagsData {
    MemFlagsData::trusted()
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
        let start = match self.variant {
            Variant::Native => {
                self.prologue(b, &params[2..]);
                0
            }
            Variant::Osr { pc } => {
                self.load_all_registers(b);
                pc as usize
            }
        };
        self.incoming = incoming_edges(&f.code, start);
        // Leaders nothing jumps to (the `ReturnVoid` the compiler appends
        // after a final `return`): not translated at all.
        let unreachable: Vec<usize> = (self.incoming.iter())
            .filter(|&(_, &n)| n == 0)
            .map(|(&pc, _)| pc)
            .collect();
        let first = self.blocks[&start];
        b.ins().jump(first, &[]);
        self.edge_emitted(b, start);

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
            } else if terminated {
                continue; // unreachable
            }
            b.set_srcloc(line_table::site(pc));
            terminated = self.instruction(b, pc);
        }
        self.fill_error_blocks(b);
        // The shared error blocks, and any block whose count of incoming
        // edges was an overestimate (edges from unreachable code).
        b.seal_all_blocks();
    }

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

    /// The native variant's entry: depth check, frame record, parameters.
    fn prologue(&mut self, b: &mut FunctionBuilder<'_>, args: &[Value]) {
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
    fn push_frame_record(
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

    /// OSR entry: every typed register from its frame slot.
    fn load_all_registers(&mut self, b: &mut FunctionBuilder<'_>) {
        for r in 0..self.f.num_typed() {
            self.reload(b, r);
        }
    }

    fn ret_type(&self) -> ir::Type {
        self.f.ret.as_ref().map_or(types::I64, clif_type)
    }

    /// `zero` (an i64 0) converted to the return type.
    fn zero_of(&self, b: &mut FunctionBuilder<'_>, zero: Value) -> Value {
        if self.ret_type() == types::F64 {
            b.ins().f64const(0.0)
        } else {
            zero
        }
    }

    fn helper(&mut self, b: &mut FunctionBuilder<'_>, id: FuncId) -> FuncRef {
        *self
            .refs
            .entry(id)
            .or_insert_with(|| self.jit.declare_func_in_func(id, b.func))
    }

    /// Reads register `r` in its natural representation.
    fn read(&self, b: &mut FunctionBuilder<'_>, r: Reg) -> Value {
        match self.slots[r as usize] {
            Slot::Var(v, _) | Slot::Arg(v) | Slot::Ref(v) => b.use_var(v),
            // The entry defines every parameter before any instruction.
            Slot::Fixed { value, .. } => value.expect("parameter defined on entry"),
        }
    }

    /// Reads register `r` as a value of type `ty` (reinterpreting bits).
    fn read_as(&self, b: &mut FunctionBuilder<'_>, r: Reg, ty: ir::Type) -> Value {
        let v = self.read(b, r);
        convert(b, v, ty)
    }

    fn read_i(&self, b: &mut FunctionBuilder<'_>, r: Reg) -> Value {
        self.read_as(b, r, types::I64)
    }

    fn read_f(&self, b: &mut FunctionBuilder<'_>, r: Reg) -> Value {
        self.read_as(b, r, types::F64)
    }

    /// Writes `value` to register `r` (reinterpreting bits as needed).
    fn write(&mut self, b: &mut FunctionBuilder<'_>, r: usize, value: Value) {
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
    fn define_fixed(&mut self, r: usize, value: Value) {
        if let Slot::Fixed { value: slot, .. } = &mut self.slots[r] {
            // `written_registers` missed a write: a translator bug that
            // would otherwise produce wrong code.
            assert!(slot.is_none(), "r{r} is written after entry");
            *slot = Some(value);
        }
    }

    /// Stores a scalar register to its frame slot (references are always
    /// there already).
    fn spill(&self, b: &mut FunctionBuilder<'_>, r: usize) {
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
    fn reload(&mut self, b: &mut FunctionBuilder<'_>, r: usize) {
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

    /// The shared cold block returning `STATUS_ERROR` (its body comes at
    /// the end, see [`Translator::fill_error_blocks`]).
    fn error_exit(&mut self, b: &mut FunctionBuilder<'_>) -> Block {
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
    fn exit_if(
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
    fn fail_block(&mut self, b: &mut FunctionBuilder<'_>) -> Block {
        *(self.errors.fail).get_or_insert_with(|| cold_block(b, &[types::I32, types::I32]))
    }

    /// The shared block for an index out of bounds: `(pc, index, length)`.
    fn index_error_block(&mut self, b: &mut FunctionBuilder<'_>) -> Block {
        let params = [types::I32, types::I64, types::I64];
        *(self.errors.index).get_or_insert_with(|| cold_block(b, &params))
    }

    /// The shared block for an inlined call at `(pc)` that would exceed
    /// the depth limit.
    fn inline_too_deep_block(&mut self, b: &mut FunctionBuilder<'_>) -> Block {
        *(self.errors.inline_too_deep).get_or_insert_with(|| cold_block(b, &[types::I32]))
    }

    /// Emits the bodies of the shared cold blocks in use: each calls its
    /// helper with the function index and its parameters, then leaves
    /// through the error exit, which returns `STATUS_ERROR` (restoring the
    /// depth). Done after the last instruction, so no
    /// block is ever left half-filled, and not tied to any instruction: the
    /// source location is the function's own.
    fn fill_error_blocks(&mut self, b: &mut FunctionBuilder<'_>) {
        b.set_srcloc(SourceLoc::default());
        let helpers = self.env.helpers;
        let used = [
            (self.errors.fail, helpers.fail),
            (self.errors.index, helpers.index_error),
            (self.errors.inline_too_deep, helpers.push_trace),
        ];
        for (block, helper) in used {
            let Some(block) = block else { continue };
            b.switch_to_block(block);
            let mut args = vec![self.vm, b.ins().iconst(types::I32, self.env.func as i64)];
            args.extend_from_slice(b.block_params(block));
            if Some(block) == self.errors.inline_too_deep {
                // `toy_jit_push_trace`'s flag: record the depth error first.
                args.push(b.ins().iconst(types::I32, 1));
            }
            let helper = self.helper(b, helper);
            b.ins().call(helper, &args);
            let exit = self.error_exit(b);
            b.ins().jump(exit, &[]);
        }
        let Some(exit) = self.error_exit else { return };
        b.switch_to_block(exit);
        let one = b.ins().iconst(types::I32, 1);
        match self.variant {
            Variant::Native => {
                let depth0 = self.depth0.expect("prologue ran");
                b.ins()
                    .store(flags(), depth0, self.vm, offsets::DEPTH as i32);
                let zero = b.ins().iconst(types::I64, 0);
                let zero = self.zero_of(b, zero);
                b.ins().return_(&[zero, one]);
            }
            Variant::Osr { .. } => {
                b.ins().return_(&[one]);
            }
        }
    }

    /// After a call at `pc`: continues in a fresh block when `status` is
    /// OK; otherwise adds the caller's trace entry (recording the callee's
    /// [`STATUS_DEPTH_EXCEEDED`] first) and leaves through the error exit.
    /// Unlike the other checks, each call site keeps its own
    /// cold block with the helper call: calls are few, and with a shared
    /// block the register allocator shuffles `vm` around the hot call
    /// (measured: `fib` 1.12 s instead of 0.95 s at the large size).
    fn trace_if_failed(&mut self, b: &mut FunctionBuilder<'_>, status: Value, pc: usize) {
        let failed = b.create_block();
        let ok = b.create_block();
        b.set_cold_block(failed);
        b.ins().brif(status, failed, &[], ok, &[]);
        b.seal_block(failed);
        b.seal_block(ok);
        b.switch_to_block(failed);
        let helper = self.helper(b, self.env.helpers.push_trace);
        let func = b.ins().iconst(types::I32, self.env.func as i64);
        let pcv = b.ins().iconst(types::I32, pc as i64);
        // Computed here, in the cold block: passing `status` itself would
        // make the register allocator copy it into the argument register
        // on the hot path, right after every call.
        let over = b
            .ins()
            .icmp_imm_s(IntCC::Equal, status, STATUS_DEPTH_EXCEEDED as i64);
        let over = b.ins().uextend(types::I32, over);
        b.ins().call(helper, &[self.vm, func, pcv, over]);
        let exit = self.error_exit(b);
        b.ins().jump(exit, &[]);
        b.switch_to_block(ok);
    }

    /// Raises error `code` (see [`codes`]) at `pc` when `cond` is true.
    fn fail_if(&mut self, b: &mut FunctionBuilder<'_>, cond: Value, pc: usize, code: u32) {
        let target = self.fail_block(b);
        self.exit_if(b, cond, target, &[pc as u32, code], &[]);
    }

    /// Returns from the function with `value` (or none).
    fn return_value(&mut self, b: &mut FunctionBuilder<'_>, value: Option<Value>) {
        let ok = b.ins().iconst(types::I32, 0);
        match self.variant {
            Variant::Native => {
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
            Variant::Osr { .. } => {
                if let Some(v) = value {
                    b.ins().store(flags(), v, self.base, 0);
                }
                b.ins().return_(&[ok]);
            }
        }
    }

    fn branch(&mut self, b: &mut FunctionBuilder<'_>, cond: Value, target: u32, pc: usize) {
        let taken = self.blocks[&(target as usize)];
        let next = self.blocks[&(pc + 1)];
        b.ins().brif(cond, taken, &[], next, &[]);
        self.edge_emitted(b, target as usize);
        self.edge_emitted(b, pc + 1);
    }

    fn icmp_branch(
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

    fn fcmp_branch(
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

    fn int_bin(
        &mut self,
        b: &mut FunctionBuilder<'_>,
        dst: Reg,
        x: Reg,
        y: Reg,
        op: fn(&mut FunctionBuilder<'_>, Value, Value) -> Value,
    ) {
        let (x, y) = (self.read_i(b, x), self.read_i(b, y));
        let v = op(b, x, y);
        self.write(b, dst as usize, v);
    }

    fn float_bin(
        &mut self,
        b: &mut FunctionBuilder<'_>,
        dst: Reg,
        x: Reg,
        y: Reg,
        op: fn(&mut FunctionBuilder<'_>, Value, Value) -> Value,
    ) {
        let (x, y) = (self.read_f(b, x), self.read_f(b, y));
        let v = op(b, x, y);
        self.write(b, dst as usize, v);
    }

    fn int_cmp(&mut self, b: &mut FunctionBuilder<'_>, dst: Reg, x: Reg, y: Reg, cc: IntCC) {
        let (x, y) = (self.read_i(b, x), self.read_i(b, y));
        let c = b.ins().icmp(cc, x, y);
        let v = b.ins().uextend(types::I64, c);
        self.write(b, dst as usize, v);
    }

    fn float_cmp(&mut self, b: &mut FunctionBuilder<'_>, dst: Reg, x: Reg, y: Reg, cc: FloatCC) {
        let (x, y) = (self.read_f(b, x), self.read_f(b, y));
        let c = b.ins().fcmp(cc, x, y);
        let v = b.ins().uextend(types::I64, c);
        self.write(b, dst as usize, v);
    }

    fn str_cmp(&mut self, b: &mut FunctionBuilder<'_>, dst: Reg, x: Reg, y: Reg, cc: IntCC) {
        let (x, y) = (self.read_i(b, x), self.read_i(b, y));
        let helper = self.helper(b, self.env.helpers.str_cmp);
        let call = b.ins().call(helper, &[x, y]);
        let ord = b.inst_results(call)[0];
        let c = b.ins().icmp_imm_s(cc, ord, 0);
        let v = b.ins().uextend(types::I64, c);
        self.write(b, dst as usize, v);
    }

    /// Integer division or remainder with the interpreter's semantics:
    /// error on zero, `i64::MIN / -1` wraps (Cranelift's `sdiv` would trap).
    fn div_rem(
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
    fn element_address(
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

    fn call(
        &mut self,
        b: &mut FunctionBuilder<'_>,
        callee: u16,
        base_reg: Reg,
        dst: Reg,
        pc: usize,
    ) {
        let cf = &self.env.module.functions[callee as usize];
        self.array_fields.clear();
        if self.inline_budget.take(cf) {
            self.inline_leaf(b, callee, base_reg, dst, pc);
            return;
        }
        let callee_base = b
            .ins()
            .iadd_imm_s(self.base, slot_offset(base_reg as usize) as i64);
        let (status, result) = match self.env.natives[callee as usize] {
            Some(id) => {
                let mut args = vec![self.vm, callee_base];
                for (i, (_, ty)) in cf.params.iter().enumerate() {
                    args.push(self.read_as(b, base_reg + i as u8, clif_type(ty)));
                }
                let fref = self.helper(b, id);
                let inst = b.ins().call(fref, &args);
                let results = b.inst_results(inst);
                (results[1], Some(results[0]))
            }
            None => {
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

    /// Translates a call of a small straight-line leaf (see
    /// [`is_inlinable_leaf`]) in place: its registers become fresh
    /// variables, its parameters the argument values. Such a callee cannot
    /// fail, allocate or call, so it needs no frame record; only the depth
    /// limit stays observable, so it is still checked (and reported exactly
    /// as a real call would: the callee fails, the caller adds its entry).
    fn inline_leaf(
        &mut self,
        b: &mut FunctionBuilder<'_>,
        callee: u16,
        base_reg: Reg,
        dst: Reg,
        pc: usize,
    ) {
        let cf = &self.env.module.functions[callee as usize];
        let depth = b
            .ins()
            .load(types::I64, flags(), self.vm, offsets::DEPTH as i32);
        let max = b
            .ins()
            .load(types::I64, flags(), self.vm, offsets::MAX_DEPTH as i32);
        let too_deep = b.ins().icmp(IntCC::UnsignedGreaterThanOrEqual, depth, max);
        let target = self.inline_too_deep_block(b);
        self.exit_if(b, too_deep, target, &[pc as u32], &[]);
        // `--vmprof-inlined`: the inlined call gets the frame record a real
        // call would write, so samples inside it name the callee. Its registers
        // are not in that frame, but a leaf cannot collect garbage or fail,
        // so only the sampler reads the record.
        let frame_base = self.env.inlined_frames.then(|| {
            let callee_base = b
                .ins()
                .iadd_imm_s(self.base, slot_offset(base_reg as usize) as i64);
            let depth1 = b.ins().iadd_imm_s(depth, 1);
            self.push_frame_record(b, depth1, callee_base, callee as u32);
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
        let env = Env {
            module: self.env.module,
            func: callee as u32,
            consts: &[],
            natives: self.env.natives,
            helpers: self.env.helpers,
            array: self.env.array,
            call_conv: self.env.call_conv,
            // A leaf makes no calls.
            inlined_frames: false,
        };
        let mut inner = Translator {
            f: cf,
            env: &env,
            jit: &mut *self.jit,
            slots,
            blocks: HashMap::new(),
            incoming: HashMap::new(),
            refs: HashMap::new(),
            vm: self.vm,
            base: self.base,
            depth0: None,
            error_exit: None,
            errors: ErrorBlocks::default(),
            variant: self.variant,
            array_fields: HashMap::new(),
            // A leaf makes no calls.
            inline_budget: InlineBudget::default(),
        };
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
            b.ins()
                .store(flags(), depth, self.vm, offsets::DEPTH as i32);
        }
        b.set_srcloc(srcloc);
    }

    /// Runs `op` through a memory-based helper: stores its scalar operands,
    /// calls `call` (which returns a status), reloads its result.
    fn via_frame(
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

    /// Translates instruction `pc`; returns true if it ends the block
    /// (nothing falls through).
    fn instruction(&mut self, b: &mut FunctionBuilder<'_>, pc: usize) -> bool {
        let op = self.f.code[pc];
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
            Op::AddI { dst, a, b: y } => self.int_bin(b, dst, a, y, |b, x, y| b.ins().iadd(x, y)),
            Op::SubI { dst, a, b: y } => self.int_bin(b, dst, a, y, |b, x, y| b.ins().isub(x, y)),
            Op::MulI { dst, a, b: y } => self.int_bin(b, dst, a, y, |b, x, y| b.ins().imul(x, y)),
            Op::AndI { dst, a, b: y } => self.int_bin(b, dst, a, y, |b, x, y| b.ins().band(x, y)),
            Op::OrI { dst, a, b: y } => self.int_bin(b, dst, a, y, |b, x, y| b.ins().bor(x, y)),
            Op::XorI { dst, a, b: y } => self.int_bin(b, dst, a, y, |b, x, y| b.ins().bxor(x, y)),
            // Cranelift takes shift amounts modulo the width, like Toy.
            Op::ShlI { dst, a, b: y } => self.int_bin(b, dst, a, y, |b, x, y| b.ins().ishl(x, y)),
            Op::ShrI { dst, a, b: y } => self.int_bin(b, dst, a, y, |b, x, y| b.ins().sshr(x, y)),
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
            Op::AddF { dst, a, b: y } => self.float_bin(b, dst, a, y, |b, x, y| b.ins().fadd(x, y)),
            Op::SubF { dst, a, b: y } => self.float_bin(b, dst, a, y, |b, x, y| b.ins().fsub(x, y)),
            Op::MulF { dst, a, b: y } => self.float_bin(b, dst, a, y, |b, x, y| b.ins().fmul(x, y)),
            Op::DivF { dst, a, b: y } => self.float_bin(b, dst, a, y, |b, x, y| b.ins().fdiv(x, y)),
            Op::RemF { dst, a, b: y } => {
                let (x, y) = (self.read_f(b, a), self.read_f(b, y));
                let helper = self.helper(b, self.env.helpers.fmod);
                let call = b.ins().call(helper, &[x, y]);
                let v = b.inst_results(call)[0];
                self.write(b, dst as usize, v);
            }
            Op::NegF { dst, src } => {
                let x = self.read_f(b, src);
                let v = b.ins().fneg(x);
                self.write(b, dst as usize, v);
            }
            Op::EqI { dst, a, b: y } => self.int_cmp(b, dst, a, y, IntCC::Equal),
            Op::NeI { dst, a, b: y } => self.int_cmp(b, dst, a, y, IntCC::NotEqual),
            Op::LtI { dst, a, b: y } => self.int_cmp(b, dst, a, y, IntCC::SignedLessThan),
            Op::LeI { dst, a, b: y } => self.int_cmp(b, dst, a, y, IntCC::SignedLessThanOrEqual),
            Op::EqF { dst, a, b: y } => self.float_cmp(b, dst, a, y, FloatCC::Equal),
            Op::NeF { dst, a, b: y } => self.float_cmp(b, dst, a, y, FloatCC::NotEqual),
            Op::LtF { dst, a, b: y } => self.float_cmp(b, dst, a, y, FloatCC::LessThan),
            Op::LeF { dst, a, b: y } => self.float_cmp(b, dst, a, y, FloatCC::LessThanOrEqual),
            Op::EqS { dst, a, b: y } => self.str_cmp(b, dst, a, y, IntCC::Equal),
            Op::NeS { dst, a, b: y } => self.str_cmp(b, dst, a, y, IntCC::NotEqual),
            Op::LtS { dst, a, b: y } => self.str_cmp(b, dst, a, y, IntCC::SignedLessThan),
            Op::LeS { dst, a, b: y } => self.str_cmp(b, dst, a, y, IntCC::SignedLessThanOrEqual),
            Op::Not { dst, src } => {
                let x = self.read_i(b, src);
                let v = b.ins().bxor_imm_u(x, 1);
                self.write(b, dst as usize, v);
            }

            Op::Jmp { target } => {
                let block = self.blocks[&(target as usize)];
                b.ins().jump(block, &[]);
                self.edge_emitted(b, target as usize);
                return true;
            }
            Op::JmpIf { a, target } => {
                let x = self.read_i(b, a);
                self.branch(b, x, target, pc);
                return true;
            }
            Op::JmpIfNot { a, target } => {
                let x = self.read_i(b, a);
                let c = b.ins().icmp_imm_s(IntCC::Equal, x, 0);
                self.branch(b, c, target, pc);
                return true;
            }
            Op::JmpIfNotLtI { a, b: y, target } => {
                let (x, y) = (self.read_i(b, a), self.read_i(b, y));
                self.icmp_branch(b, IntCC::SignedGreaterThanOrEqual, x, y, target, pc);
                return true;
            }
            Op::JmpIfNotLeI { a, b: y, target } => {
                let (x, y) = (self.read_i(b, a), self.read_i(b, y));
                self.icmp_branch(b, IntCC::SignedGreaterThan, x, y, target, pc);
                return true;
            }
            Op::JmpIfNotEqI { a, b: y, target } => {
                let (x, y) = (self.read_i(b, a), self.read_i(b, y));
                self.icmp_branch(b, IntCC::NotEqual, x, y, target, pc);
                return true;
            }
            Op::JmpIfNotNeI { a, b: y, target } => {
                let (x, y) = (self.read_i(b, a), self.read_i(b, y));
                self.icmp_branch(b, IntCC::Equal, x, y, target, pc);
                return true;
            }
            Op::JmpIfNotLtIImm { a, imm, target } => {
                return self.imm_branch(b, a, imm, IntCC::SignedGreaterThanOrEqual, target, pc);
            }
            Op::JmpIfNotLeIImm { a, imm, target } => {
                return self.imm_branch(b, a, imm, IntCC::SignedGreaterThan, target, pc);
            }
            Op::JmpIfNotGtIImm { a, imm, target } => {
                return self.imm_branch(b, a, imm, IntCC::SignedLessThanOrEqual, target, pc);
            }
            Op::JmpIfNotGeIImm { a, imm, target } => {
                return self.imm_branch(b, a, imm, IntCC::SignedLessThan, target, pc);
            }
            Op::JmpIfNotEqIImm { a, imm, target } => {
                return self.imm_branch(b, a, imm, IntCC::NotEqual, target, pc);
            }
            Op::JmpIfNotNeIImm { a, imm, target } => {
                return self.imm_branch(b, a, imm, IntCC::Equal, target, pc);
            }
            // "Not less than" must be true for NaN: the unordered forms.
            Op::JmpIfNotLtF { a, b: y, target } => {
                self.fcmp_branch(b, FloatCC::UnorderedOrGreaterThanOrEqual, a, y, target, pc);
                return true;
            }
            Op::JmpIfNotLeF { a, b: y, target } => {
                self.fcmp_branch(b, FloatCC::UnorderedOrGreaterThan, a, y, target, pc);
                return true;
            }
            Op::JmpIfLtF { a, b: y, target } => {
                self.fcmp_branch(b, FloatCC::LessThan, a, y, target, pc);
                return true;
            }
            Op::JmpIfLeF { a, b: y, target } => {
                self.fcmp_branch(b, FloatCC::LessThanOrEqual, a, y, target, pc);
                return true;
            }
            Op::ForPrep {
                counter,
                end,
                target,
            } => {
                let (c, e) = (self.read_i(b, counter), self.read_i(b, end));
                self.icmp_branch(b, IntCC::SignedGreaterThanOrEqual, c, e, target, pc);
                return true;
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
                return true;
            }

            Op::Call { func, base, dst } => self.call(b, func, base, dst, pc),
            Op::Return { src } => {
                let v = self.read(b, src);
                self.return_value(b, Some(v));
                return true;
            }
            Op::ReturnVoid => {
                self.return_value(b, None);
                return true;
            }

            Op::LenS { dst, src } => {
                let s = self.read_i(b, src);
                let helper = self.helper(b, self.env.helpers.str_len);
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
                    let helper = t.helper(b, t.env.helpers.pop);
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
            _ => {
                debug_assert!(op.is_slow());
                self.via_frame(b, &op, |t, b| {
                    let helper = t.helper(b, t.env.helpers.slow_op);
                    let func = b.ins().iconst(types::I32, t.env.func as i64);
                    let pcv = b.ins().iconst(types::I32, pc as i64);
                    let call = b.ins().call(helper, &[t.vm, func, t.base, pcv]);
                    b.inst_results(call)[0]
                });
            }
        }
        false
    }

    fn imm_branch(
        &mut self,
        b: &mut FunctionBuilder<'_>,
        a: Reg,
        imm: i16,
        cc: IntCC,
        target: u32,
        pc: usize,
    ) -> bool {
        let x = self.read_i(b, a);
        let c = b.ins().icmp_imm_s(cc, x, imm as i64);
        self.branch(b, c, target, pc);
        true
    }
}

/// Most instructions a callee may have to be inlined.
const INLINE_MAX_OPS: usize = 24;

/// A callee that `Translator::inline_leaf` can expand: short, straight-line
/// up to its first return, only scalar registers, and only instructions
/// that cannot fail, allocate, call or touch memory.
pub fn is_inlinable_leaf(f: &Function) -> bool {
    // Straight-line code: everything after the first return is unreachable
    // (the compiler may append a `ReturnVoid` there).
    let Some(ret) = f
        .code
        .iter()
        .position(|op| matches!(op, Op::Return { .. } | Op::ReturnVoid))
    else {
        return false;
    };
    let body = &f.code[..ret];
    ret < INLINE_MAX_OPS
        && f.reg_types.iter().all(|t| !t.is_ref())
        && f.frame_size as usize == f.num_typed()
        && body.iter().all(|op| op.flags().contains(Flags::INLINABLE))
}

/// Reinterprets `v` as `ty` (same bits) when the types differ.
fn convert(b: &mut FunctionBuilder<'_>, v: Value, ty: ir::Type) -> Value {
    if b.func.dfg.value_type(v) == ty {
        v
    } else {
        b.ins().bitcast(ty, MemFlagsData::new(), v)
    }
}

/// Which of a frame's `frame_size` registers some instruction of `code`
/// writes (the operands the translator defines; see `Translator::write`).
pub fn written_registers(code: &[Op], frame_size: usize) -> Vec<bool> {
    let mut written = vec![false; frame_size];
    for op in code {
        for r in op.regs().filter(|r| r.access.writes()) {
            if let Some(w) = written.get_mut(r.reg as usize) {
                *w = true;
            }
        }
    }
    written
}

/// Per leader instruction, the number of control-flow edges into its block
/// that translating `code` can emit: one per jump naming it, one for falling
/// through from the instruction before it (which also ends a block when it
/// is a conditional jump), and one from the entry for `start`. Edges from
/// unreachable instructions are counted too, so counts never fall short.
fn incoming_edges(code: &[Op], start: usize) -> HashMap<usize, u32> {
    let leaders = leaders(code);
    let mut incoming: HashMap<usize, u32> = leaders.iter().map(|&pc| (pc, 0)).collect();
    *incoming.entry(start).or_default() += 1;
    for (pc, op) in code.iter().enumerate() {
        for t in op.targets() {
            *incoming.entry(t as usize).or_default() += 1;
        }
        if op.falls_through()
            && let Some(n) = incoming.get_mut(&(pc + 1))
        {
            *n += 1;
        }
    }
    incoming
}

/// The instructions that start a basic block: the first, every jump target,
/// and every instruction after a jump or return.
pub fn leaders(code: &[Op]) -> Vec<usize> {
    let mut leader = vec![false; code.len()];
    if let Some(first) = leader.first_mut() {
        *first = true;
    }
    for (pc, op) in code.iter().enumerate() {
        for t in op.targets() {
            leader[t as usize] = true;
        }
        if op.flags().contains(Flags::ENDS_BLOCK) && pc + 1 < code.len() {
            leader[pc + 1] = true;
        }
    }
    (0..code.len()).filter(|&pc| leader[pc]).collect()
}
