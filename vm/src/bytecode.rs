//! Typed register bytecode: what the compiler emits, the interpreter runs
//! and the JIT compiles, one function at a time.
//!
//! # Registers
//!
//! Every function has a window of 64-bit slots on the VM's value stack. A
//! slot holds an `int` (its i64 bits), a `float` (its f64 bits), a `bool`
//! (0 or 1) or a heap reference (a pointer to a `str` or array object, see
//! [`crate::runtime::heap`]). The window has two parts:
//!
//! * **Typed registers** `0..num_typed` ([`Function::reg_types`]). Each has
//!   ONE static type for the whole function. Parameters are registers
//!   `0..params.len()`; locals and temporaries follow. Because a register
//!   never changes type, [`Function::ref_regs`] (the typed registers that
//!   hold `str` or arrays) is the function's GC root map, valid at every
//!   instruction: the interpreter zeroes the non-parameter ref registers on
//!   entry, so a ref register always holds null or a live object. Any other
//!   tier (the JIT) must keep the same invariant: every live heap reference
//!   of a frame is stored in its ref registers at every point where a
//!   collection can happen (after an allocating instruction and at calls).
//! * **The call area** `num_typed..frame_size`, untyped. To call, the
//!   caller writes the arguments to `num_typed + 0, 1, ...` and executes
//!   [`Op::Call`] with `base = num_typed`; the callee's window starts there,
//!   so its parameters are the arguments, in place, and nothing is copied
//!   (Lua-style overlapping windows). The callee leaves its result in its
//!   register 0, which the caller reads back from `base`. The caller never
//!   scans its call area as GC roots: during the call the callee owns those
//!   slots (its parameters), and the compiler writes arguments there only
//!   right before the call, with no allocation in between.
//!
//! # Instructions
//!
//! [`Op`] is a small `Copy` enum (8 bytes, checked below): register operands
//! are `u8`, constant-pool and function indexes `u16`, jump targets absolute
//! `u32` instruction indexes, immediates `i32`. Opcodes are specialised by
//! type (`AddI`, `AddF`, `LtS`, ...), so the interpreter never checks a
//! type at run time. `bool` registers hold exactly 0 or 1, so `int`
//! equality opcodes also compare bools.
//!
//! [`Function::spans`] runs parallel to the code: the source position of
//! every instruction (for tracebacks, the disassembler and JIT line tables).

use crate::ast::{Span, Type};

/// A register index within a frame.
pub type Reg = u8;

/// Most typed registers plus call-area slots one function may use.
pub const MAX_REGS: usize = 256;

// ANCHOR: op_intro
/// One bytecode instruction. Field names: `dst` is written, `a`/`b`/`src`
/// are read, `imm` is an immediate, `k` a constant-pool index, `target` an
/// instruction index in the same function.
// One line per instruction reads best; keep rustfmt from splitting them.
#[rustfmt::skip]
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Op {
    // --- moves and constants ---
    /// `dst = src` (any type).
    Move { dst: Reg, src: Reg },
    /// `dst = imm` (int or bool).
    LoadInt { dst: Reg, imm: i32 },
    /// `dst = consts[k]` (an int or float that does not fit `LoadInt`, or a
    /// string literal).
    LoadConst { dst: Reg, k: u16 },
// ANCHOR_END: op_intro

    // --- int arithmetic (wrapping) ---
    /// `dst = a + b` (wrapping).
    AddI { dst: Reg, a: Reg, b: Reg },
    /// `dst = a - b` (wrapping).
    SubI { dst: Reg, a: Reg, b: Reg },
    /// `dst = a * b` (wrapping).
    MulI { dst: Reg, a: Reg, b: Reg },
    /// Truncating division; error on zero; `i64::MIN / -1` wraps.
    DivI { dst: Reg, a: Reg, b: Reg },
    /// Truncating remainder; error on zero; `i64::MIN % -1` is 0.
    RemI { dst: Reg, a: Reg, b: Reg },
    /// `dst = a & b`.
    AndI { dst: Reg, a: Reg, b: Reg },
    /// `dst = a | b`.
    OrI { dst: Reg, a: Reg, b: Reg },
    /// `dst = a ^ b`.
    XorI { dst: Reg, a: Reg, b: Reg },
    /// `a << (b mod 64)`.
    ShlI { dst: Reg, a: Reg, b: Reg },
    /// `a >> (b mod 64)`, arithmetic.
    ShrI { dst: Reg, a: Reg, b: Reg },
    /// `dst = -src` (wrapping).
    NegI { dst: Reg, src: Reg },
    /// `dst = a + imm` (also subtraction of a constant).
    AddIImm { dst: Reg, a: Reg, imm: i32 },
    /// `dst = a * imm` (wrapping).
    MulIImm { dst: Reg, a: Reg, imm: i32 },
    /// `dst = a / imm`, `imm` never 0 (the compiler keeps `/ 0` as `DivI`).
    DivIImm { dst: Reg, a: Reg, imm: i32 },
    /// `dst = a % imm`, `imm` never 0.
    RemIImm { dst: Reg, a: Reg, imm: i32 },

    // --- float arithmetic (IEEE) ---
    /// `dst = a + b`.
    AddF { dst: Reg, a: Reg, b: Reg },
    /// `dst = a - b`.
    SubF { dst: Reg, a: Reg, b: Reg },
    /// `dst = a * b`.
    MulF { dst: Reg, a: Reg, b: Reg },
    /// `dst = a / b` (IEEE: `x / 0.0` is ±inf or NaN).
    DivF { dst: Reg, a: Reg, b: Reg },
    /// Truncated remainder, like Rust's `%`.
    RemF { dst: Reg, a: Reg, b: Reg },
    /// `dst = -src`.
    NegF { dst: Reg, src: Reg },

    // --- comparisons producing a bool (0/1); `>` and `>=` swap operands ---
    /// `dst = a == b` (ints or bools).
    EqI { dst: Reg, a: Reg, b: Reg },
    /// `dst = a != b` (ints or bools).
    NeI { dst: Reg, a: Reg, b: Reg },
    /// `dst = a < b`.
    LtI { dst: Reg, a: Reg, b: Reg },
    /// `dst = a <= b`.
    LeI { dst: Reg, a: Reg, b: Reg },
    /// `dst = a == b` (false for NaN).
    EqF { dst: Reg, a: Reg, b: Reg },
    /// `dst = a != b` (true for NaN).
    NeF { dst: Reg, a: Reg, b: Reg },
    /// `dst = a < b`.
    LtF { dst: Reg, a: Reg, b: Reg },
    /// `dst = a <= b`.
    LeF { dst: Reg, a: Reg, b: Reg },
    /// `dst = a == b`, by contents.
    EqS { dst: Reg, a: Reg, b: Reg },
    /// `dst = a != b`, by contents.
    NeS { dst: Reg, a: Reg, b: Reg },
    /// Byte-wise string order.
    LtS { dst: Reg, a: Reg, b: Reg },
    /// `dst = a <= b`, byte-wise.
    LeS { dst: Reg, a: Reg, b: Reg },
    /// Boolean not.
    Not { dst: Reg, src: Reg },

    // --- control flow ---
    /// Jump to `target`.
    Jmp { target: u32 },
    /// Jump when the bool in `a` is true.
    JmpIf { a: Reg, target: u32 },
    /// Jump when the bool in `a` is false.
    JmpIfNot { a: Reg, target: u32 },
    // ANCHOR: op_fused_branch
    /// Fused compare-and-branch: jump unless `a < b` (ints).
    JmpIfNotLtI { a: Reg, b: Reg, target: u32 },
    /// Jump unless `a <= b` (ints).
    JmpIfNotLeI { a: Reg, b: Reg, target: u32 },
    /// Jump unless `a == b` (ints or bools).
    JmpIfNotEqI { a: Reg, b: Reg, target: u32 },
    /// Jump unless `a != b` (ints or bools).
    JmpIfNotNeI { a: Reg, b: Reg, target: u32 },
    /// Jump unless `a < imm`.
    JmpIfNotLtIImm { a: Reg, imm: i16, target: u32 },
    /// Jump unless `a <= imm`.
    JmpIfNotLeIImm { a: Reg, imm: i16, target: u32 },
    /// Jump unless `a > imm`.
    JmpIfNotGtIImm { a: Reg, imm: i16, target: u32 },
    /// Jump unless `a >= imm`.
    JmpIfNotGeIImm { a: Reg, imm: i16, target: u32 },
    /// Jump unless `a == imm`.
    JmpIfNotEqIImm { a: Reg, imm: i16, target: u32 },
    /// Jump unless `a != imm`.
    JmpIfNotNeIImm { a: Reg, imm: i16, target: u32 },
    // ANCHOR_END: op_fused_branch
    /// Jump unless `a < b` (floats; NaN compares false, so it jumps).
    JmpIfNotLtF { a: Reg, b: Reg, target: u32 },
    /// Jump when `a < b` (floats; NaN compares false: no jump).
    JmpIfLtF { a: Reg, b: Reg, target: u32 },
    /// Jump when `a <= b` (floats; NaN does not jump).
    JmpIfLeF { a: Reg, b: Reg, target: u32 },
    /// Jump unless `a <= b` (floats; NaN jumps).
    JmpIfNotLeF { a: Reg, b: Reg, target: u32 },
    // ANCHOR: op_for_and_call
    /// `for` loop entry: jump to `target` (the loop exit) unless
    /// `counter < end`.
    ForPrep { counter: Reg, end: Reg, target: u32 },
    /// `for` loop back edge: `counter += 1`; jump to `target` (the body)
    /// while `counter < end`. Cannot overflow: `counter < end` held before.
    ForLoop { counter: Reg, end: Reg, target: u32 },

    // --- calls ---
    /// Call function `func` with its window starting at register `base`
    /// (the arguments are already there), then copy the result (left by
    /// the callee in `base`) to `dst`; `dst == base` for void calls.
    Call { func: u16, base: Reg, dst: Reg },
    /// Return the value in `src`.
    Return { src: Reg },
    /// Return from a function without a value.
    ReturnVoid,
    // ANCHOR_END: op_for_and_call

    // --- strings ---
    /// `dst = a + b` (new string).
    Concat { dst: Reg, a: Reg, b: Reg },
    /// Byte length of a string.
    LenS { dst: Reg, src: Reg },

    // --- arrays (elements are 64-bit slots, like registers) ---
    /// `dst = []` with room for `cap` elements; `refs` says whether the
    /// elements are heap references (for the collector).
    NewArray { dst: Reg, refs: bool, cap: u16 },
    /// `dst = [val; count]`. `depth` 0: copy the bits of `val` (a scalar or
    /// a shared immutable string); `depth` d > 0: `val` is an array nested
    /// d deep, deep-copied for every element so rows are independent.
    /// `refs`: the new array's elements are references.
    RepeatArray { dst: Reg, val: Reg, count: Reg, depth: u8, refs: bool },
    /// `dst = arr[idx]` (error when out of range).
    GetElem { dst: Reg, arr: Reg, idx: Reg },
    /// `arr[idx] = val` (error when out of range).
    SetElem { arr: Reg, idx: Reg, val: Reg },
    /// Number of elements.
    LenA { dst: Reg, src: Reg },
    /// Append `val` to `arr`.
    Push { arr: Reg, val: Reg },
    /// Remove and return the last element (error when empty).
    Pop { dst: Reg, arr: Reg },

    // --- other builtins ---
    /// `print(x)`: `ty` indexes [`Module::types`] (the type of `src`).
    Print { src: Reg, ty: u16 },
    /// `float(int)`.
    IntToFloat { dst: Reg, src: Reg },
    /// `int(float)`: Rust's `as` (truncate, saturate, NaN → 0).
    FloatToInt { dst: Reg, src: Reg },
    /// `str(x)` for a scalar: `ty` indexes [`Module::types`].
    ToStr { dst: Reg, src: Reg, ty: u16 },
    /// `dst = sqrt(src)`.
    Sqrt { dst: Reg, src: Reg },
    /// Monotonic seconds since the VM started.
    Clock { dst: Reg },
    /// A new `[str]` holding the script arguments.
    Args { dst: Reg },
    /// `dst = parse_int(src)` (error on malformed text).
    ParseInt { dst: Reg, src: Reg },
    /// `dst = parse_float(src)` (error on malformed text).
    ParseFloat { dst: Reg, src: Reg },
}

/// One operand of an instruction, for the disassembler and the verifier.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Operand {
    /// A register, with the field's name (`dst`, `a`, ...).
    Reg(&'static str, Reg),
    /// An immediate integer.
    Imm(i64),
    /// A constant-pool index.
    Const(u16),
    /// A jump target (instruction index).
    Target(u32),
    /// A function index.
    Func(u16),
    /// An index into [`Module::types`].
    Type(u16),
    /// A named flag.
    Flag(&'static str, bool),
    /// A named small number.
    Num(&'static str, u32),
}

/// The instructions that allocate, print, parse or read the clock, as a
/// pattern. The interpreter runs them out of line
/// ([`crate::interp::run_slow_op`]) and the JIT calls that same code, so
/// this is the one list every tier matches on: a new slow instruction added
/// here is handled everywhere.
#[macro_export]
macro_rules! slow_ops {
    () => {
        $crate::bytecode::Op::Concat { .. }
            | $crate::bytecode::Op::NewArray { .. }
            | $crate::bytecode::Op::RepeatArray { .. }
            | $crate::bytecode::Op::Push { .. }
            | $crate::bytecode::Op::Print { .. }
            | $crate::bytecode::Op::ToStr { .. }
            | $crate::bytecode::Op::Clock { .. }
            | $crate::bytecode::Op::Args { .. }
            | $crate::bytecode::Op::ParseInt { .. }
            | $crate::bytecode::Op::ParseFloat { .. }
    };
}

impl Op {
    /// Whether this is one of the [`slow_ops!`] instructions.
    pub fn is_slow(&self) -> bool {
        matches!(self, crate::slow_ops!())
    }

    /// The opcode's name and its operands in field order (`Call` lists
    /// `dst` first, like every instruction that writes a register).
    // One line per instruction, like the enum.
    #[rustfmt::skip]
    pub fn describe(&self) -> (&'static str, Vec<Operand>) {
        use Operand::*;
        match *self {
            Op::Move { dst, src } => ("Move", vec![Reg("dst", dst), Reg("src", src)]),
            Op::LoadInt { dst, imm } => ("LoadInt", vec![Reg("dst", dst), Imm(imm as i64)]),
            Op::LoadConst { dst, k } => ("LoadConst", vec![Reg("dst", dst), Const(k)]),
            Op::AddI { dst, a, b } => ("AddI", vec![Reg("dst", dst), Reg("a", a), Reg("b", b)]),
            Op::SubI { dst, a, b } => ("SubI", vec![Reg("dst", dst), Reg("a", a), Reg("b", b)]),
            Op::MulI { dst, a, b } => ("MulI", vec![Reg("dst", dst), Reg("a", a), Reg("b", b)]),
            Op::DivI { dst, a, b } => ("DivI", vec![Reg("dst", dst), Reg("a", a), Reg("b", b)]),
            Op::RemI { dst, a, b } => ("RemI", vec![Reg("dst", dst), Reg("a", a), Reg("b", b)]),
            Op::AndI { dst, a, b } => ("AndI", vec![Reg("dst", dst), Reg("a", a), Reg("b", b)]),
            Op::OrI { dst, a, b } => ("OrI", vec![Reg("dst", dst), Reg("a", a), Reg("b", b)]),
            Op::XorI { dst, a, b } => ("XorI", vec![Reg("dst", dst), Reg("a", a), Reg("b", b)]),
            Op::ShlI { dst, a, b } => ("ShlI", vec![Reg("dst", dst), Reg("a", a), Reg("b", b)]),
            Op::ShrI { dst, a, b } => ("ShrI", vec![Reg("dst", dst), Reg("a", a), Reg("b", b)]),
            Op::NegI { dst, src } => ("NegI", vec![Reg("dst", dst), Reg("src", src)]),
            Op::AddIImm { dst, a, imm } => ("AddIImm", vec![Reg("dst", dst), Reg("a", a), Imm(imm as i64)]),
            Op::MulIImm { dst, a, imm } => ("MulIImm", vec![Reg("dst", dst), Reg("a", a), Imm(imm as i64)]),
            Op::DivIImm { dst, a, imm } => ("DivIImm", vec![Reg("dst", dst), Reg("a", a), Imm(imm as i64)]),
            Op::RemIImm { dst, a, imm } => ("RemIImm", vec![Reg("dst", dst), Reg("a", a), Imm(imm as i64)]),
            Op::AddF { dst, a, b } => ("AddF", vec![Reg("dst", dst), Reg("a", a), Reg("b", b)]),
            Op::SubF { dst, a, b } => ("SubF", vec![Reg("dst", dst), Reg("a", a), Reg("b", b)]),
            Op::MulF { dst, a, b } => ("MulF", vec![Reg("dst", dst), Reg("a", a), Reg("b", b)]),
            Op::DivF { dst, a, b } => ("DivF", vec![Reg("dst", dst), Reg("a", a), Reg("b", b)]),
            Op::RemF { dst, a, b } => ("RemF", vec![Reg("dst", dst), Reg("a", a), Reg("b", b)]),
            Op::NegF { dst, src } => ("NegF", vec![Reg("dst", dst), Reg("src", src)]),
            Op::EqI { dst, a, b } => ("EqI", vec![Reg("dst", dst), Reg("a", a), Reg("b", b)]),
            Op::NeI { dst, a, b } => ("NeI", vec![Reg("dst", dst), Reg("a", a), Reg("b", b)]),
            Op::LtI { dst, a, b } => ("LtI", vec![Reg("dst", dst), Reg("a", a), Reg("b", b)]),
            Op::LeI { dst, a, b } => ("LeI", vec![Reg("dst", dst), Reg("a", a), Reg("b", b)]),
            Op::EqF { dst, a, b } => ("EqF", vec![Reg("dst", dst), Reg("a", a), Reg("b", b)]),
            Op::NeF { dst, a, b } => ("NeF", vec![Reg("dst", dst), Reg("a", a), Reg("b", b)]),
            Op::LtF { dst, a, b } => ("LtF", vec![Reg("dst", dst), Reg("a", a), Reg("b", b)]),
            Op::LeF { dst, a, b } => ("LeF", vec![Reg("dst", dst), Reg("a", a), Reg("b", b)]),
            Op::EqS { dst, a, b } => ("EqS", vec![Reg("dst", dst), Reg("a", a), Reg("b", b)]),
            Op::NeS { dst, a, b } => ("NeS", vec![Reg("dst", dst), Reg("a", a), Reg("b", b)]),
            Op::LtS { dst, a, b } => ("LtS", vec![Reg("dst", dst), Reg("a", a), Reg("b", b)]),
            Op::LeS { dst, a, b } => ("LeS", vec![Reg("dst", dst), Reg("a", a), Reg("b", b)]),
            Op::Not { dst, src } => ("Not", vec![Reg("dst", dst), Reg("src", src)]),
            Op::Jmp { target } => ("Jmp", vec![Target(target)]),
            Op::JmpIf { a, target } => ("JmpIf", vec![Reg("a", a), Target(target)]),
            Op::JmpIfNot { a, target } => ("JmpIfNot", vec![Reg("a", a), Target(target)]),
            Op::JmpIfNotLtI { a, b, target } => ("JmpIfNotLtI", vec![Reg("a", a), Reg("b", b), Target(target)]),
            Op::JmpIfNotLeI { a, b, target } => ("JmpIfNotLeI", vec![Reg("a", a), Reg("b", b), Target(target)]),
            Op::JmpIfNotEqI { a, b, target } => ("JmpIfNotEqI", vec![Reg("a", a), Reg("b", b), Target(target)]),
            Op::JmpIfNotNeI { a, b, target } => ("JmpIfNotNeI", vec![Reg("a", a), Reg("b", b), Target(target)]),
            Op::JmpIfNotLtIImm { a, imm, target } => ("JmpIfNotLtIImm", vec![Reg("a", a), Imm(imm as i64), Target(target)]),
            Op::JmpIfNotLeIImm { a, imm, target } => ("JmpIfNotLeIImm", vec![Reg("a", a), Imm(imm as i64), Target(target)]),
            Op::JmpIfNotGtIImm { a, imm, target } => ("JmpIfNotGtIImm", vec![Reg("a", a), Imm(imm as i64), Target(target)]),
            Op::JmpIfNotGeIImm { a, imm, target } => ("JmpIfNotGeIImm", vec![Reg("a", a), Imm(imm as i64), Target(target)]),
            Op::JmpIfNotEqIImm { a, imm, target } => ("JmpIfNotEqIImm", vec![Reg("a", a), Imm(imm as i64), Target(target)]),
            Op::JmpIfNotNeIImm { a, imm, target } => ("JmpIfNotNeIImm", vec![Reg("a", a), Imm(imm as i64), Target(target)]),
            Op::JmpIfNotLtF { a, b, target } => ("JmpIfNotLtF", vec![Reg("a", a), Reg("b", b), Target(target)]),
            Op::JmpIfLtF { a, b, target } => ("JmpIfLtF", vec![Reg("a", a), Reg("b", b), Target(target)]),
            Op::JmpIfLeF { a, b, target } => ("JmpIfLeF", vec![Reg("a", a), Reg("b", b), Target(target)]),
            Op::JmpIfNotLeF { a, b, target } => ("JmpIfNotLeF", vec![Reg("a", a), Reg("b", b), Target(target)]),
            Op::ForPrep { counter, end, target } => ("ForPrep", vec![Reg("counter", counter), Reg("end", end), Target(target)]),
            Op::ForLoop { counter, end, target } => ("ForLoop", vec![Reg("counter", counter), Reg("end", end), Target(target)]),
            Op::Call { func, base, dst } => ("Call", vec![Reg("dst", dst), Func(func), Reg("base", base)]),
            Op::Return { src } => ("Return", vec![Reg("src", src)]),
            Op::ReturnVoid => ("ReturnVoid", vec![]),
            Op::Concat { dst, a, b } => ("Concat", vec![Reg("dst", dst), Reg("a", a), Reg("b", b)]),
            Op::LenS { dst, src } => ("LenS", vec![Reg("dst", dst), Reg("src", src)]),
            Op::NewArray { dst, refs, cap } => ("NewArray", vec![Reg("dst", dst), Flag("refs", refs), Num("cap", cap as u32)]),
            Op::RepeatArray { dst, val, count, depth, refs } => ("RepeatArray", vec![Reg("dst", dst), Reg("val", val), Reg("count", count), Num("depth", depth as u32), Flag("refs", refs)]),
            Op::GetElem { dst, arr, idx } => ("GetElem", vec![Reg("dst", dst), Reg("arr", arr), Reg("idx", idx)]),
            Op::SetElem { arr, idx, val } => ("SetElem", vec![Reg("arr", arr), Reg("idx", idx), Reg("val", val)]),
            Op::LenA { dst, src } => ("LenA", vec![Reg("dst", dst), Reg("src", src)]),
            Op::Push { arr, val } => ("Push", vec![Reg("arr", arr), Reg("val", val)]),
            Op::Pop { dst, arr } => ("Pop", vec![Reg("dst", dst), Reg("arr", arr)]),
            Op::Print { src, ty } => ("Print", vec![Reg("src", src), Type(ty)]),
            Op::IntToFloat { dst, src } => ("IntToFloat", vec![Reg("dst", dst), Reg("src", src)]),
            Op::FloatToInt { dst, src } => ("FloatToInt", vec![Reg("dst", dst), Reg("src", src)]),
            Op::ToStr { dst, src, ty } => ("ToStr", vec![Reg("dst", dst), Reg("src", src), Type(ty)]),
            Op::Sqrt { dst, src } => ("Sqrt", vec![Reg("dst", dst), Reg("src", src)]),
            Op::Clock { dst } => ("Clock", vec![Reg("dst", dst)]),
            Op::Args { dst } => ("Args", vec![Reg("dst", dst)]),
            Op::ParseInt { dst, src } => ("ParseInt", vec![Reg("dst", dst), Reg("src", src)]),
            Op::ParseFloat { dst, src } => ("ParseFloat", vec![Reg("dst", dst), Reg("src", src)]),
        }
    }
}

// The dispatch loop copies one instruction per step; keep it one word.
const _: () = assert!(std::mem::size_of::<Op>() <= 8);

/// A constant-pool entry. Strings are materialised as heap objects when a
/// VM is created (see [`crate::runtime::Vm`]).
#[derive(Clone, Debug, PartialEq)]
pub enum Const {
    /// An int too large for [`Op::LoadInt`].
    Int(i64),
    /// A float.
    Float(f64),
    /// Index into [`Module::strings`].
    Str(u32),
}

// ANCHOR: function_struct
/// One compiled function (the script body is one too, named `<main>`).
#[derive(Clone, Debug)]
pub struct Function {
    /// Source name; `<main>` for the script body.
    pub name: String,
    /// Parameter names and types, in order (registers `0..params.len()`).
    pub params: Vec<(String, Type)>,
    /// `None` for functions without `-> T`.
    pub ret: Option<Type>,
    /// Position of the `fn` keyword (1:1 for `<main>`).
    pub span: Span,
    /// Type of every typed register (`0..num_typed`).
    pub reg_types: Vec<Type>,
    /// A name for registers that hold a named local (for the disassembler).
    pub reg_names: Vec<Option<String>>,
    /// The typed registers holding heap references: the GC root map.
    pub ref_regs: Vec<Reg>,
    /// Typed registers + call area: slots of the value stack one frame uses.
    pub frame_size: u32,
    /// The constant pool.
    pub consts: Vec<Const>,
    /// The instructions; execution starts at index 0.
    pub code: Vec<Op>,
    /// Source position of each instruction in `code`.
    pub spans: Vec<Span>,
}
// ANCHOR_END: function_struct

impl Function {
    /// Number of typed registers (= where the call area starts).
    pub fn num_typed(&self) -> usize {
        self.reg_types.len()
    }
}

/// A compiled script.
#[derive(Clone, Debug, Default)]
pub struct Module {
    /// Script path as given on the command line (for tracebacks).
    pub path: String,
    /// `functions[i]` is the AST's `Program::functions[i]`; `<main>` last.
    pub functions: Vec<Function>,
    /// Index of `<main>` in `functions`.
    pub main: u32,
    /// String literals, referenced by [`Const::Str`].
    pub strings: Vec<String>,
    /// Types referenced by [`Op::Print`] and [`Op::ToStr`].
    pub types: Vec<Type>,
    /// The script's text (the disassembler shows its lines); may be empty.
    pub source: String,
}

impl Module {
    /// The largest frame of any function (sizes the value stack).
    pub fn max_frame_size(&self) -> usize {
        self.functions
            .iter()
            .map(|f| f.frame_size as usize)
            .max()
            .unwrap_or(1)
    }
}

/// Checks the structural invariants the interpreter relies on for memory
/// safety: every register operand is inside the frame, every constant,
/// type, function index and jump target is in range, call windows start in
/// the call area, and execution cannot run off the end of the code.
/// (Type correctness of registers is the compiler's job.)
pub fn verify(module: &Module) -> Result<(), String> {
    if module.main as usize >= module.functions.len() {
        return Err("no <main> function".into());
    }
    if module.functions.len() > u16::MAX as usize + 1 {
        return Err("too many functions".into());
    }
    for f in &module.functions {
        let err = |pc: usize, what: &str| Err(format!("{}: instruction {pc}: {what}", f.name));
        let frame = f.frame_size as usize;
        if frame > MAX_REGS || f.num_typed() > frame || f.params.len() > f.num_typed() {
            return err(0, "bad frame layout");
        }
        if f.ref_regs.iter().any(|&r| r as usize >= f.num_typed()) || f.spans.len() != f.code.len()
        {
            return err(0, "bad register map or span table");
        }
        if !matches!(
            f.code.last(),
            Some(Op::Return { .. } | Op::ReturnVoid | Op::Jmp { .. })
        ) {
            return err(f.code.len(), "code can run off the end");
        }
        for (pc, op) in f.code.iter().enumerate() {
            for operand in op.describe().1 {
                let ok = match operand {
                    Operand::Reg(_, r) => (r as usize) < frame,
                    Operand::Const(k) => (k as usize) < f.consts.len(),
                    Operand::Target(t) => (t as usize) < f.code.len(),
                    Operand::Func(i) => (i as usize) < module.functions.len(),
                    Operand::Type(t) => (t as usize) < module.types.len(),
                    Operand::Imm(_) | Operand::Flag(..) | Operand::Num(..) => true,
                };
                if !ok {
                    return err(pc, &format!("operand {operand:?} out of range"));
                }
            }
            if let Op::Call { base, .. } = op
                && (*base as usize) < f.num_typed()
            {
                return err(pc, "call window overlaps typed registers");
            }
            if let Op::Return { .. } = op
                && f.ret.is_none()
            {
                return err(pc, "value returned from a function without a result");
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instruction_is_one_word() {
        assert_eq!(std::mem::size_of::<Op>(), 8);
    }

    fn tiny(code: Vec<Op>) -> Module {
        let spans = vec![Span::new(1, 1); code.len()];
        Module {
            functions: vec![Function {
                name: "<main>".into(),
                params: vec![],
                ret: None,
                span: Span::new(1, 1),
                reg_types: vec![Type::Int],
                reg_names: vec![None],
                ref_regs: vec![],
                frame_size: 1,
                consts: vec![],
                code,
                spans,
            }],
            ..Module::default()
        }
    }

    #[test]
    fn verify_accepts_good_code() {
        assert_eq!(
            verify(&tiny(vec![Op::LoadInt { dst: 0, imm: 1 }, Op::ReturnVoid])),
            Ok(())
        );
    }

    #[test]
    fn verify_rejects_out_of_range_operands() {
        let bad = [
            vec![Op::Move { dst: 1, src: 0 }, Op::ReturnVoid],
            vec![Op::Jmp { target: 9 }],
            vec![Op::LoadConst { dst: 0, k: 0 }, Op::ReturnVoid],
            vec![
                Op::Call {
                    func: 3,
                    base: 0,
                    dst: 0,
                },
                Op::ReturnVoid,
            ],
            vec![Op::Print { src: 0, ty: 0 }, Op::ReturnVoid],
            vec![Op::LoadInt { dst: 0, imm: 1 }],
            vec![],
            vec![Op::Return { src: 0 }],
        ];
        for code in bad {
            assert!(verify(&tiny(code.clone())).is_err(), "{code:?}");
        }
    }
}
