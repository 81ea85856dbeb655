//! One handler per instruction. A handler executes its instruction in the
//! frame `regs` and continues with [`next`]: it loads the next
//! instruction's handler, which sits right after that instruction in the
//! function's [`Slot`]s, and calls it in tail position, which LLVM turns
//! into a jump (see the dispatch section of the module docs in
//! [`super`]). Jumps continue with [`jump`], returns return.
//!
//! Every handler has the signature [`Handler`]: the frame, the address of
//! its own instruction, and the [`Activation`] (what the handlers of one
//! call share). Three arguments, all in machine registers, and nothing
//! kept on the stack across the tail call. Errors, tier-up and trace
//! entries leave through `#[cold]` functions, so the hot path of each
//! handler is its instruction, one table load and one jump.
//!
//! # Safety (every handler)
//! A handler is called only by [`start`] or by another handler, with `ip`
//! inside the verified code of `cx.func` and `regs` that function's active
//! frame. Register operands are `< frame_size`, constant indexes and jump
//! targets in range (verified bytecode, see [`super`]). Heap references
//! read from typed ref registers are live objects of the register's static
//! type (the GC root invariant), and no collection runs while a borrow of
//! an object obtained here is alive. `cx.vm` is accessed one field at a
//! time, so a nested call's accesses alias nothing a handler holds.

use std::hint::unreachable_unchecked;

use super::{STATUS_ERROR, STATUS_OK, Vm, tier};
use crate::bytecode::{Function, Op};
use crate::runtime::heap::{arr_mut, str_ref};
use crate::runtime::spin::spin;
use crate::runtime::{RuntimeError, TraceEntry};

use super::locations::location;
use super::regs::Regs;
use super::slow::slow_op;

/// What the handlers of one activation (one interpreted call) share,
/// set up once by `run` on its stack.
pub(super) struct Activation<'v> {
    /// The VM.
    pub(super) vm: *mut Vm<'v>,
    /// The function running.
    pub(super) func: u32,
    /// Its instruction 0, in its [`Slot`]s.
    pub(super) code: *const Op,
    /// Its constant pool, as raw slots.
    pub(super) consts: *const u64,
    /// Its tier-up countdown (`FnRuntime::hotness`).
    pub(super) hotness: *mut i32,
    /// Its frame record's `pc`, which the handlers of a vmprof session
    /// recording lines keep on the current line ([`slots`],
    /// [`super::locations`]).
    pub(super) record_pc: *mut u32,
}

/// The type of every handler: the frame, the handler's own instruction,
/// the activation. Returns the activation's status ([`STATUS_OK`] or
/// [`STATUS_ERROR`]) once a `Return` or an error ends it.
type Handler = unsafe fn(Regs, *const Op, &Activation<'_>) -> u32;

// ANCHOR: slot
/// One instruction as the interpreter runs it: the instruction and the
/// handler that runs it (threaded code). `ip` points at `op`, so the
/// handler of the instruction at `ip` is one load at a fixed offset from
/// `ip`. Each function's slots are built once per VM ([`slots`]).
#[repr(C)]
pub(crate) struct Slot {
    op: Op,
    handler: Handler,
}
// ANCHOR_END: slot

impl Slot {
    /// The instruction.
    pub(crate) fn op(&self) -> Op {
        self.op
    }
}

/// Bytes from one instruction to the next.
pub(super) const STRIDE: usize = size_of::<Slot>();

const _: () = assert!(STRIDE == 16);

/// The instruction after `ip`.
#[inline(always)]
unsafe fn step(ip: *const Op) -> *const Op {
    // SAFETY: every function ends in a return, so a handler that continues
    // has an instruction after it, in the same slots.
    unsafe { ip.byte_add(STRIDE) }
}

/// The index of the instruction at `ip`.
#[inline(always)]
unsafe fn index_of(ip: *const Op, cx: &Activation<'_>) -> usize {
    // SAFETY: `ip` is an instruction of the activation's slots.
    unsafe { ip.byte_offset_from(cx.code) as usize / STRIDE }
}

/// Counts an entry into the line of the `Spin` at `ip`
/// ([`crate::bytecode::LineEntries`]).
#[inline(always)]
unsafe fn count_entry(ip: *const Op, cx: &Activation<'_>) {
    // SAFETY: `module` is a shared reference the VM holds for its life;
    // `ip` is an instruction of `cx.func`, whose spans parallel its code.
    unsafe {
        let module = (*cx.vm).module;
        let line = module.functions[cx.func as usize].spans[index_of(ip, cx)].line;
        module.line_entries.count(line);
    }
}

/// Runs the activation `cx` from instruction 0 in the frame `regs`.
///
/// # Safety
/// `cx` describes the active frame of `cx.func` at `regs` (see the module
/// docs).
pub(super) unsafe fn start(regs: *mut u64, cx: &Activation<'_>) -> u32 {
    // SAFETY: the caller's contract; instruction 0 exists (every function
    // ends in a return).
    unsafe { next(Regs::new(regs), cx.code, cx) }
}

// ANCHOR: next
/// Continues with the instruction at `ip`: one load of its handler, right
/// next to it in its [`Slot`], and a call in tail position that LLVM
/// emits as `jmp`.
///
/// Because every instruction carries its own handler, two instructions
/// with the same opcode can run different handlers: in a vmprof session
/// recording lines, the instructions where a new line starts get the copy
/// that first stores their location in the frame record ([`line_start`]),
/// the others the plain one ([`slots`]).
#[inline(always)]
unsafe fn next(regs: Regs, ip: *const Op, cx: &Activation<'_>) -> u32 {
    // SAFETY: `ip` points at the `op` of a `Slot` of the running function
    // (derived from its slots' pointer by `run`, `step` and `jump`).
    unsafe {
        let handler = (*ip.cast::<Slot>()).handler;
        handler(regs, ip, cx)
    }
}
// ANCHOR_END: next

// ANCHOR: back_edge
/// Continues at instruction `target`. A jump backwards is a loop
/// back-edge, counted for tier-up; when the count runs out the JIT may
/// hand back an OSR entry that finishes this activation in compiled code.
#[inline(always)]
unsafe fn jump(regs: Regs, ip: *const Op, cx: &Activation<'_>, target: u32) -> u32 {
    // SAFETY: `target` is in range (verified); `hotness` is the running
    // function's countdown.
    unsafe {
        let to = cx.code.byte_add(target as usize * STRIDE);
        if to <= ip {
            *cx.hotness -= 1;
            if *cx.hotness < 0 {
                return loop_tier_up(regs, to, cx, target);
            }
        }
        next(regs, to, cx)
    }
}
// ANCHOR_END: back_edge

/// A back-edge's countdown ran out: asks the tier-up hook, and finishes
/// the activation in the OSR entry it hands back, if any, or continues at
/// `to`. Cold and out of line, and it continues the dispatch itself, so
/// that the jump handlers keep nothing in callee-saved registers.
#[cold]
#[inline(never)]
unsafe fn loop_tier_up(regs: Regs, to: *const Op, cx: &Activation<'_>, target: u32) -> u32 {
    // SAFETY: the frame is the active one of `cx.func`, at an instruction
    // boundary (the OSR contract); `to` is the verified `target`.
    unsafe {
        match tier::hot_loop(cx.vm, cx.func, target) {
            Some(osr) => osr(cx.vm, regs.base(), target),
            None => next(regs, to, cx),
        }
    }
}

/// Records `err`, raised at the instruction at `ip`, and ends the
/// activation with [`STATUS_ERROR`].
///
/// The status goes through `black_box`: LLVM would otherwise see that the
/// cold functions below always return the same constant, return it from
/// the handler itself, and so turn their tail call into a call that needs
/// a frame, which it then builds only on the cold path ("shrink-wrapping")
/// and the handler's hot path would run without a frame pointer.
#[inline(always)]
unsafe fn raise(cx: &Activation<'_>, ip: *const Op, err: RuntimeError) -> u32 {
    // SAFETY: `ip` is in the code of `cx.func`; `vm` is not borrowed.
    let status = unsafe { (*cx.vm).fail(err, cx.func, index_of(ip, cx)) };
    std::hint::black_box(status)
}

// The errors a handler raises, each a cold function of plain scalars: a
// handler jumps to it in tail position, so the handler needs no stack of
// its own for it (a `RuntimeError` argument would be built in its frame).

/// `DivI` by zero.
#[cold]
#[inline(never)]
unsafe fn division_by_zero(cx: &Activation<'_>, ip: *const Op) -> u32 {
    // SAFETY: `raise`'s contract is this function's: `cx` is the running
    // activation and `ip` points into its code.
    unsafe { raise(cx, ip, RuntimeError::DivisionByZero) }
}

/// `RemI` by zero.
#[cold]
#[inline(never)]
unsafe fn modulo_by_zero(cx: &Activation<'_>, ip: *const Op) -> u32 {
    // SAFETY: `raise`'s contract is this function's: `cx` is the running
    // activation and `ip` points into its code.
    unsafe { raise(cx, ip, RuntimeError::ModuloByZero) }
}

/// `GetElem`/`SetElem` outside `0..len`.
#[cold]
#[inline(never)]
unsafe fn index_out_of_range(cx: &Activation<'_>, ip: *const Op, index: i64, len: usize) -> u32 {
    // SAFETY: `raise`'s contract is this function's: `cx` is the running
    // activation and `ip` points into its code.
    unsafe { raise(cx, ip, RuntimeError::IndexOutOfRange { index, len }) }
}

/// `Pop` of an empty array.
#[cold]
#[inline(never)]
unsafe fn pop_empty(cx: &Activation<'_>, ip: *const Op) -> u32 {
    // SAFETY: `raise`'s contract is this function's: `cx` is the running
    // activation and `ip` points into its code.
    unsafe { raise(cx, ip, RuntimeError::PopEmpty) }
}

/// The callee of the `Call` at `ip` failed: adds this call site to the
/// traceback and propagates the error.
#[cold]
#[inline(never)]
unsafe fn call_failed(cx: &Activation<'_>, ip: *const Op) -> u32 {
    // SAFETY: as for `raise`.
    unsafe {
        (*cx.vm).trace.push(TraceEntry {
            func: cx.func,
            pc: index_of(ip, cx) as u32,
        });
    }
    // As in `raise`: keeps the call in `Call` a tail call.
    std::hint::black_box(STATUS_ERROR)
}

// ANCHOR: lines_store
/// The instruction at `ip` starts a line (see [`slots`]): stores its
/// location (its address, [`super::locations`]) in the frame record, where
/// the sampler's signal handler reads the line the frame is executing.
#[inline(always)]
unsafe fn line_start(ip: *const Op, cx: &Activation<'_>) {
    // SAFETY: `record_pc` is this activation's record's (set by `run`).
    // Volatile: nothing here reads it, the signal handler does.
    unsafe { cx.record_pc.write_volatile(location(ip)) }
}
// ANCHOR_END: lines_store

// ANCHOR: hot_section
// Every handler (and `interp_entry`, which each call runs) goes into one
// section, `.text.hot.toyvm_interp`, which the
// linker keeps apart as `.text.hot` (`-z keep-text-section-prefix`, in
// `.cargo/config.toml`), aligned to a page by the empty input section
// below. The handlers' addresses modulo 4096 then depend only on the
// handlers: a change elsewhere in the binary (the JIT, perfsupport) used to
// move them and change `nbody` and `mandelbrot` in the interpreter by
// 10-18%, through the branch predictors and the instruction fetch (see
// `bench/RESULTS.md`).
std::arch::global_asm!(
    ".pushsection .text.hot.toyvm_interp,\"ax\",@progbits",
    ".p2align 12",
    ".popsection",
);
// ANCHOR_END: hot_section

/// Defines one handler per row: `Name { fields } => body`. The row's
/// fields are bound from the instruction; after the body the handler
/// continues with the next instruction (a body that jumps or returns
/// never gets there). `|regs, ip, cx|` names the three arguments for the
/// bodies.
macro_rules! handlers {
    (|$regs:ident, $ip:ident, $cx:ident|
     $( $name:ident $({ $($field:ident),* })? => $body:expr ),* $(,)?) => {
        $(
            #[allow(non_snake_case, unreachable_code, unused_variables, clippy::neg_cmp_op_on_partial_ord)]
            #[unsafe(link_section = ".text.hot.toyvm_interp")]
            unsafe fn $name<const STORE: bool>(
                $regs: Regs,
                $ip: *const Op,
                $cx: &Activation<'_>,
            ) -> u32 {
                // SAFETY: see the module docs; `ip` holds an `Op::$name`
                // (its slot's handler is this one, chosen by its opcode).
                unsafe {
                    if STORE {
                        line_start($ip, $cx);
                    }
                    let Op::$name $({ $($field),* })? = *$ip else { unreachable_unchecked() };
                    $body;
                    next($regs, step($ip), $cx)
                }
            }
        )*
    };
}

handlers! { |regs, ip, cx|
    // --- moves and constants ---
    Move { dst, src } => regs.set(dst, regs.get(src)),
    LoadInt { dst, imm } => regs.set_int(dst, imm as i64),
    LoadConst { dst, k } => regs.set(dst, *cx.consts.add(k as usize)),

    // ANCHOR: handlers_arith
    // --- int arithmetic (wrapping) ---
    AddI { dst, a, b } => regs.set_int(dst, regs.int(a).wrapping_add(regs.int(b))),
    SubI { dst, a, b } => regs.set_int(dst, regs.int(a).wrapping_sub(regs.int(b))),
    MulI { dst, a, b } => regs.set_int(dst, regs.int(a).wrapping_mul(regs.int(b))),
    DivI { dst, a, b } => {
        let d = regs.int(b);
        if d == 0 {
            return division_by_zero(cx, ip);
        }
        regs.set_int(dst, regs.int(a).wrapping_div(d))
    },
    RemI { dst, a, b } => {
        let d = regs.int(b);
        if d == 0 {
            return modulo_by_zero(cx, ip);
        }
        regs.set_int(dst, regs.int(a).wrapping_rem(d))
    },
    // ANCHOR_END: handlers_arith
    AndI { dst, a, b } => regs.set_int(dst, regs.int(a) & regs.int(b)),
    OrI { dst, a, b } => regs.set_int(dst, regs.int(a) | regs.int(b)),
    XorI { dst, a, b } => regs.set_int(dst, regs.int(a) ^ regs.int(b)),
    ShlI { dst, a, b } => regs.set_int(dst, regs.int(a).wrapping_shl(regs.int(b) as u32)),
    ShrI { dst, a, b } => regs.set_int(dst, regs.int(a).wrapping_shr(regs.int(b) as u32)),
    NegI { dst, src } => regs.set_int(dst, regs.int(src).wrapping_neg()),
    AddIImm { dst, a, imm } => regs.set_int(dst, regs.int(a).wrapping_add(imm as i64)),
    MulIImm { dst, a, imm } => regs.set_int(dst, regs.int(a).wrapping_mul(imm as i64)),
    // The verifier rejects a zero immediate, so these never trap.
    DivIImm { dst, a, imm } => {
        std::hint::assert_unchecked(imm != 0);
        regs.set_int(dst, regs.int(a).wrapping_div(imm as i64))
    },
    RemIImm { dst, a, imm } => {
        std::hint::assert_unchecked(imm != 0);
        regs.set_int(dst, regs.int(a).wrapping_rem(imm as i64))
    },

    // --- float arithmetic (IEEE) ---
    AddF { dst, a, b } => regs.set_flt(dst, regs.flt(a) + regs.flt(b)),
    SubF { dst, a, b } => regs.set_flt(dst, regs.flt(a) - regs.flt(b)),
    MulF { dst, a, b } => regs.set_flt(dst, regs.flt(a) * regs.flt(b)),
    DivF { dst, a, b } => regs.set_flt(dst, regs.flt(a) / regs.flt(b)),
    RemF { dst, a, b } => regs.set_flt(dst, regs.flt(a) % regs.flt(b)),
    NegF { dst, src } => regs.set_flt(dst, -regs.flt(src)),

    // --- comparisons producing a bool ---
    EqI { dst, a, b } => regs.set_bool(dst, regs.get(a) == regs.get(b)),
    NeI { dst, a, b } => regs.set_bool(dst, regs.get(a) != regs.get(b)),
    LtI { dst, a, b } => regs.set_bool(dst, regs.int(a) < regs.int(b)),
    LeI { dst, a, b } => regs.set_bool(dst, regs.int(a) <= regs.int(b)),
    EqF { dst, a, b } => regs.set_bool(dst, regs.flt(a) == regs.flt(b)),
    NeF { dst, a, b } => regs.set_bool(dst, regs.flt(a) != regs.flt(b)),
    LtF { dst, a, b } => regs.set_bool(dst, regs.flt(a) < regs.flt(b)),
    LeF { dst, a, b } => regs.set_bool(dst, regs.flt(a) <= regs.flt(b)),
    EqS { dst, a, b } => regs.set_bool(dst, str_ref(regs.get(a)) == str_ref(regs.get(b))),
    NeS { dst, a, b } => regs.set_bool(dst, str_ref(regs.get(a)) != str_ref(regs.get(b))),
    LtS { dst, a, b } => regs.set_bool(dst, str_ref(regs.get(a)) < str_ref(regs.get(b))),
    LeS { dst, a, b } => regs.set_bool(dst, str_ref(regs.get(a)) <= str_ref(regs.get(b))),
    Not { dst, src } => regs.set(dst, regs.get(src) ^ 1),

    // --- control flow (`!(a < b)` is deliberate: NaN operands jump) ---
    Jmp { target } => return jump(regs, ip, cx, target),
    JmpIf { a, target } => if regs.get(a) != 0 { return jump(regs, ip, cx, target) },
    JmpIfNot { a, target } => if regs.get(a) == 0 { return jump(regs, ip, cx, target) },
    JmpIfNotLtI { a, b, target } => if regs.int(a) >= regs.int(b) { return jump(regs, ip, cx, target) },
    JmpIfNotLeI { a, b, target } => if regs.int(a) > regs.int(b) { return jump(regs, ip, cx, target) },
    JmpIfNotEqI { a, b, target } => if regs.get(a) != regs.get(b) { return jump(regs, ip, cx, target) },
    JmpIfNotNeI { a, b, target } => if regs.get(a) == regs.get(b) { return jump(regs, ip, cx, target) },
    JmpIfNotLtIImm { a, imm, target } => if regs.int(a) >= imm as i64 { return jump(regs, ip, cx, target) },
    JmpIfNotLeIImm { a, imm, target } => if regs.int(a) > imm as i64 { return jump(regs, ip, cx, target) },
    JmpIfNotGtIImm { a, imm, target } => if regs.int(a) <= imm as i64 { return jump(regs, ip, cx, target) },
    JmpIfNotGeIImm { a, imm, target } => if regs.int(a) < imm as i64 { return jump(regs, ip, cx, target) },
    JmpIfNotEqIImm { a, imm, target } => if regs.int(a) != imm as i64 { return jump(regs, ip, cx, target) },
    JmpIfNotNeIImm { a, imm, target } => if regs.int(a) == imm as i64 { return jump(regs, ip, cx, target) },
    JmpIfNotLtF { a, b, target } => if !(regs.flt(a) < regs.flt(b)) { return jump(regs, ip, cx, target) },
    JmpIfNotLeF { a, b, target } => if !(regs.flt(a) <= regs.flt(b)) { return jump(regs, ip, cx, target) },
    JmpIfLtF { a, b, target } => if regs.flt(a) < regs.flt(b) { return jump(regs, ip, cx, target) },
    JmpIfLeF { a, b, target } => if regs.flt(a) <= regs.flt(b) { return jump(regs, ip, cx, target) },
    ForPrep { counter, end, target } => {
        if regs.int(counter) >= regs.int(end) {
            return jump(regs, ip, cx, target);
        }
    },
    ForLoop { counter, end, target } => {
        let next = regs.int(counter) + 1;
        regs.set_int(counter, next);
        if next < regs.int(end) {
            return jump(regs, ip, cx, target);
        }
    },

    // ANCHOR: call_op
    // --- calls: one native call of the callee's entry ---
    Call { dst, func, base } => {
        let entry = *(*cx.vm).entry_table.add(func as usize);
        if entry(cx.vm, func as u32, regs.at(base)) != STATUS_OK {
            return call_failed(cx, ip);
        }
        // The operands again, from the instruction: three values (frame,
        // `ip`, activation) live across the call instead of five, two
        // callee-saved registers fewer to push and pop on every call.
        let Op::Call { dst, base, .. } = *ip else { unreachable_unchecked() };
        regs.set(dst, regs.get(base))
    },
    // ANCHOR_END: call_op
    Return { src } => {
        regs.set(0, regs.get(src));
        return STATUS_OK;
    },
    ReturnVoid => return STATUS_OK,

    // --- strings and arrays ---
    LenS { dst, src } => regs.set_int(dst, str_ref(regs.get(src)).len() as i64),
    // A negative index is a huge `usize`: one unsigned compare checks both
    // ends.
    GetElem { dst, arr, idx } => {
        let a = arr_mut(regs.get(arr));
        let i = regs.int(idx);
        match a.elems.get(i as usize) {
            Some(&v) => regs.set(dst, v),
            None => return index_out_of_range(cx, ip, i, a.elems.len()),
        }
    },
    SetElem { arr, idx, val } => {
        let a = arr_mut(regs.get(arr));
        let i = regs.int(idx);
        let len = a.elems.len();
        match a.elems.get_mut(i as usize) {
            Some(slot) => *slot = regs.get(val),
            None => return index_out_of_range(cx, ip, i, len),
        }
    },
    LenA { dst, src } => regs.set_int(dst, arr_mut(regs.get(src)).elems.len() as i64),
    Pop { dst, arr } => match arr_mut(regs.get(arr)).elems.pop() {
        Some(v) => regs.set(dst, v),
        None => return pop_empty(cx, ip),
    },

    // --- other builtins ---
    IntToFloat { dst, src } => regs.set_flt(dst, regs.int(src) as f64),
    FloatToInt { dst, src } => regs.set_int(dst, regs.flt(src) as i64),
    Sqrt { dst, src } => regs.set_flt(dst, regs.flt(src).sqrt()),

    // --- `--slow-line`: the constant is a verified spin count ---
    Spin { k } => {
        spin(*cx.consts.add(k as usize));
        count_entry(ip, cx);
    }
}

/// The handler of every `slow` instruction: runs it out of line
/// ([`slow_op`]), then continues.
#[inline(always)]
unsafe fn slow<const STORE: bool>(regs: Regs, ip: *const Op, cx: &Activation<'_>) -> u32 {
    // SAFETY: see the module docs; `slow_op` takes the index of the next
    // instruction.
    unsafe {
        if STORE {
            line_start(ip, cx);
        }
        let pc = index_of(ip, cx);
        if slow_op(cx.vm, cx.func, regs.base(), *ip, pc + 1) != STATUS_OK {
            return STATUS_ERROR;
        }
        next(regs, step(ip), cx)
    }
}

/// The handler tables, in opcode order, from the instruction table's
/// names: one handler above per inline row (a missing one does not
/// compile) and one [`slow`] wrapper per slow row.
macro_rules! handler_table {
    ([$($name:ident)*] [$($slow:ident)*]) => {
        $(
            #[allow(non_snake_case)]
            unsafe fn $slow<const STORE: bool>(
                regs: Regs,
                ip: *const Op,
                cx: &Activation<'_>,
            ) -> u32 {
                // SAFETY: as for every handler.
                unsafe { slow::<STORE>(regs, ip, cx) }
            }
        )*

        /// Every instruction's handler, indexed by [`Op::opcode`].
        static HANDLERS: [Handler; Op::COUNT] = [$($name::<false>),*];
        /// vmprof lines mode, an instruction that starts a line.
        static LINE_START_HANDLERS: [Handler; Op::COUNT] = [$($name::<true>),*];
    };
}
with_instruction_names!(handler_table);

// ANCHOR: slots
/// The slots the interpreter runs for `f`: per instruction, the
/// instruction and its handler. With `lines` (a vmprof session recording
/// lines), the instructions that start a line get the handler that stores
/// their location ([`line_start`]).
///
/// An instruction starts a line if control can reach it from an
/// instruction of another line: the one before it falls through from
/// another line, or a jump from another line targets it. Then the record
/// always holds an instruction of the line the frame is executing, and a
/// loop whose body is one line stores nothing per iteration. The entry
/// stores nothing either: `interp_entry` wrote instruction 0's location
/// into the record.
pub(crate) fn slots(f: &Function, lines: bool) -> Box<[Slot]> {
    let starts = lines.then(|| line_starts(f));
    (f.code.iter().enumerate())
        .map(|(pc, &op)| {
            let table = match starts.as_ref().is_some_and(|s| s[pc]) {
                true => &LINE_START_HANDLERS,
                false => &HANDLERS,
            };
            Slot {
                op,
                handler: table[op.opcode() as usize],
            }
        })
        .collect()
}
// ANCHOR_END: slots

/// Which instructions of `f` start a line (see [`slots`]).
fn line_starts(f: &Function) -> Vec<bool> {
    let line = |pc: usize| f.spans.get(pc).map_or(0, |s| s.line);
    let mut starts = vec![false; f.code.len()];
    for (pc, op) in f.code.iter().enumerate() {
        for target in op.targets().map(|t| t as usize) {
            starts[target] |= line(target) != line(pc);
        }
        if op.falls_through() && pc + 1 < f.code.len() {
            starts[pc + 1] |= line(pc + 1) != line(pc);
        }
    }
    starts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_starts_where_control_arrives_from_another_line() {
        let src = "fn f(n: int) -> int {\n\
                   let s = 0;\n\
                   for i in 0..n { s = (s * 31 + i) % 1000003; }\n\
                   return s;\n\
                   }\n\
                   print(f(3));\n";
        let m = crate::driver::load("t.toy", src.as_bytes()).expect("compiles");
        let f = &m.functions[0];
        let starts = line_starts(f);
        let on = |line: u32| -> Vec<usize> {
            (0..f.code.len())
                .filter(|&pc| f.spans[pc].line == line)
                .collect()
        };
        let stores = |pcs: &[usize]| pcs.iter().filter(|&&pc| starts[pc]).count();
        // The entry (line 2) stores nothing: `interp_entry` wrote its location.
        assert_eq!(on(2).first(), Some(&0));
        assert!(!starts[0]);
        // The loop (line 3) is entered from line 2 and jumps back within
        // line 3: one store on entering it, none per iteration.
        let (line_3, line_4) = (on(3), on(4));
        assert!(line_3.len() >= 4, "{line_3:?}");
        assert_eq!(stores(&line_3), 1, "{line_3:?}");
        assert!(starts[line_3[0]]);
        // `return s` is reached by the loop's exit jump from line 3.
        assert!(starts[line_4[0]], "{line_4:?}");
        assert_eq!(slots(f, true).len(), f.code.len());
    }
}
