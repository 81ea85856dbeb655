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

/// One bytecode instruction. Field names: `dst` is written, `a`/`b`/`src`
/// are read, `imm` is an immediate, `k` a constant-pool index, `target` an
/// instruction index in the same function.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Op {
    // --- moves and constants ---
    /// `dst = src` (any type).
    Move {
        dst: Reg,
        src: Reg,
    },
    /// `dst = imm` (int or bool).
    LoadInt {
        dst: Reg,
        imm: i32,
    },
    /// `dst = consts[k]` (an int or float that does not fit `LoadInt`, or a
    /// string literal).
    LoadConst {
        dst: Reg,
        k: u16,
    },

    // --- int arithmetic (wrapping) ---
    AddI {
        dst: Reg,
        a: Reg,
        b: Reg,
    },
    SubI {
        dst: Reg,
        a: Reg,
        b: Reg,
    },
    MulI {
        dst: Reg,
        a: Reg,
        b: Reg,
    },
    /// Truncating division; error on zero; `i64::MIN / -1` wraps.
    DivI {
        dst: Reg,
        a: Reg,
        b: Reg,
    },
    /// Truncating remainder; error on zero; `i64::MIN % -1` is 0.
    RemI {
        dst: Reg,
        a: Reg,
        b: Reg,
    },
    AndI {
        dst: Reg,
        a: Reg,
        b: Reg,
    },
    OrI {
        dst: Reg,
        a: Reg,
        b: Reg,
    },
    XorI {
        dst: Reg,
        a: Reg,
        b: Reg,
    },
    /// `a << (b mod 64)`.
    ShlI {
        dst: Reg,
        a: Reg,
        b: Reg,
    },
    /// `a >> (b mod 64)`, arithmetic.
    ShrI {
        dst: Reg,
        a: Reg,
        b: Reg,
    },
    NegI {
        dst: Reg,
        src: Reg,
    },
    /// `dst = a + imm` (also subtraction of a constant).
    AddIImm {
        dst: Reg,
        a: Reg,
        imm: i32,
    },
    MulIImm {
        dst: Reg,
        a: Reg,
        imm: i32,
    },
    /// `dst = a / imm`, `imm` never 0 (the compiler keeps `/ 0` as `DivI`).
    DivIImm {
        dst: Reg,
        a: Reg,
        imm: i32,
    },
    /// `dst = a % imm`, `imm` never 0.
    RemIImm {
        dst: Reg,
        a: Reg,
        imm: i32,
    },

    // --- float arithmetic (IEEE) ---
    AddF {
        dst: Reg,
        a: Reg,
        b: Reg,
    },
    SubF {
        dst: Reg,
        a: Reg,
        b: Reg,
    },
    MulF {
        dst: Reg,
        a: Reg,
        b: Reg,
    },
    DivF {
        dst: Reg,
        a: Reg,
        b: Reg,
    },
    /// Truncated remainder, like Rust's `%`.
    RemF {
        dst: Reg,
        a: Reg,
        b: Reg,
    },
    NegF {
        dst: Reg,
        src: Reg,
    },

    // --- comparisons producing a bool (0/1); `>` and `>=` swap operands ---
    EqI {
        dst: Reg,
        a: Reg,
        b: Reg,
    },
    NeI {
        dst: Reg,
        a: Reg,
        b: Reg,
    },
    LtI {
        dst: Reg,
        a: Reg,
        b: Reg,
    },
    LeI {
        dst: Reg,
        a: Reg,
        b: Reg,
    },
    EqF {
        dst: Reg,
        a: Reg,
        b: Reg,
    },
    NeF {
        dst: Reg,
        a: Reg,
        b: Reg,
    },
    LtF {
        dst: Reg,
        a: Reg,
        b: Reg,
    },
    LeF {
        dst: Reg,
        a: Reg,
        b: Reg,
    },
    EqS {
        dst: Reg,
        a: Reg,
        b: Reg,
    },
    NeS {
        dst: Reg,
        a: Reg,
        b: Reg,
    },
    /// Byte-wise string order.
    LtS {
        dst: Reg,
        a: Reg,
        b: Reg,
    },
    LeS {
        dst: Reg,
        a: Reg,
        b: Reg,
    },
    /// Boolean not.
    Not {
        dst: Reg,
        src: Reg,
    },

    // --- control flow ---
    Jmp {
        target: u32,
    },
    /// Jump when the bool in `a` is true.
    JmpIf {
        a: Reg,
        target: u32,
    },
    /// Jump when the bool in `a` is false.
    JmpIfNot {
        a: Reg,
        target: u32,
    },
    /// Fused compare-and-branch: jump unless `a < b` (ints).
    JmpIfNotLtI {
        a: Reg,
        b: Reg,
        target: u32,
    },
    JmpIfNotLeI {
        a: Reg,
        b: Reg,
        target: u32,
    },
    JmpIfNotEqI {
        a: Reg,
        b: Reg,
        target: u32,
    },
    JmpIfNotNeI {
        a: Reg,
        b: Reg,
        target: u32,
    },
    /// Jump unless `a < imm`.
    JmpIfNotLtIImm {
        a: Reg,
        imm: i16,
        target: u32,
    },
    JmpIfNotLeIImm {
        a: Reg,
        imm: i16,
        target: u32,
    },
    JmpIfNotGtIImm {
        a: Reg,
        imm: i16,
        target: u32,
    },
    JmpIfNotGeIImm {
        a: Reg,
        imm: i16,
        target: u32,
    },
    JmpIfNotEqIImm {
        a: Reg,
        imm: i16,
        target: u32,
    },
    JmpIfNotNeIImm {
        a: Reg,
        imm: i16,
        target: u32,
    },
    /// Jump unless `a < b` (floats; NaN compares false, so it jumps).
    JmpIfNotLtF {
        a: Reg,
        b: Reg,
        target: u32,
    },
    /// Jump when `a < b` (floats; NaN compares false: no jump).
    JmpIfLtF {
        a: Reg,
        b: Reg,
        target: u32,
    },
    JmpIfLeF {
        a: Reg,
        b: Reg,
        target: u32,
    },
    JmpIfNotLeF {
        a: Reg,
        b: Reg,
        target: u32,
    },
    /// `for` loop entry: jump to `target` (the loop exit) unless
    /// `counter < end`.
    ForPrep {
        counter: Reg,
        end: Reg,
        target: u32,
    },
    /// `for` loop back edge: `counter += 1`; jump to `target` (the body)
    /// while `counter < end`. Cannot overflow: `counter < end` held before.
    ForLoop {
        counter: Reg,
        end: Reg,
        target: u32,
    },

    // --- calls ---
    /// Call function `func` with its window starting at register `base`
    /// (the arguments are already there), then copy the result (left by
    /// the callee in `base`) to `dst`; `dst == base` for void calls.
    Call {
        func: u16,
        base: Reg,
        dst: Reg,
    },
    /// Return the value in `src`.
    Return {
        src: Reg,
    },
    /// Return from a function without a value.
    ReturnVoid,

    // --- strings ---
    /// `dst = a + b` (new string).
    Concat {
        dst: Reg,
        a: Reg,
        b: Reg,
    },
    /// Byte length of a string.
    LenS {
        dst: Reg,
        src: Reg,
    },

    // --- arrays (elements are 64-bit slots, like registers) ---
    /// `dst = []` with room for `cap` elements; `refs` says whether the
    /// elements are heap references (for the collector).
    NewArray {
        dst: Reg,
        refs: bool,
        cap: u16,
    },
    /// `dst = [val; count]`. `depth` 0: copy the bits of `val` (a scalar or
    /// a shared immutable string); `depth` d > 0: `val` is an array nested
    /// d deep, deep-copied for every element so rows are independent.
    /// `refs`: the new array's elements are references.
    RepeatArray {
        dst: Reg,
        val: Reg,
        count: Reg,
        depth: u8,
        refs: bool,
    },
    /// `dst = arr[idx]` (error when out of range).
    GetElem {
        dst: Reg,
        arr: Reg,
        idx: Reg,
    },
    /// `arr[idx] = val` (error when out of range).
    SetElem {
        arr: Reg,
        idx: Reg,
        val: Reg,
    },
    /// Number of elements.
    LenA {
        dst: Reg,
        src: Reg,
    },
    /// Append `val` to `arr`.
    Push {
        arr: Reg,
        val: Reg,
    },
    /// Remove and return the last element (error when empty).
    Pop {
        dst: Reg,
        arr: Reg,
    },

    // --- other builtins ---
    /// `print(x)`: `ty` indexes [`Module::types`] (the type of `src`).
    Print {
        src: Reg,
        ty: u16,
    },
    /// `float(int)`.
    IntToFloat {
        dst: Reg,
        src: Reg,
    },
    /// `int(float)`: Rust's `as` (truncate, saturate, NaN → 0).
    FloatToInt {
        dst: Reg,
        src: Reg,
    },
    /// `str(x)` for a scalar: `ty` indexes [`Module::types`].
    ToStr {
        dst: Reg,
        src: Reg,
        ty: u16,
    },
    Sqrt {
        dst: Reg,
        src: Reg,
    },
    /// Monotonic seconds since the VM started.
    Clock {
        dst: Reg,
    },
    /// A new `[str]` holding the script arguments.
    Args {
        dst: Reg,
    },
    ParseInt {
        dst: Reg,
        src: Reg,
    },
    ParseFloat {
        dst: Reg,
        src: Reg,
    },
}

/// One operand of an instruction, for the disassembler and the verifier.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Operand {
    /// A register, with the field's name (`dst`, `a`, ...).
    Reg(&'static str, Reg),
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

impl Op {
    /// The opcode's name and its operands in field order.
    pub fn describe(&self) -> (&'static str, Vec<Operand>) {
        match *self {
            Op::Move { dst, src } => (
                "Move",
                vec![Operand::Reg("dst", dst), Operand::Reg("src", src)],
            ),
            Op::LoadInt { dst, imm } => (
                "LoadInt",
                vec![Operand::Reg("dst", dst), Operand::Imm(imm as i64)],
            ),
            Op::LoadConst { dst, k } => (
                "LoadConst",
                vec![Operand::Reg("dst", dst), Operand::Const(k)],
            ),
            Op::AddI { dst, a, b } => (
                "AddI",
                vec![
                    Operand::Reg("dst", dst),
                    Operand::Reg("a", a),
                    Operand::Reg("b", b),
                ],
            ),
            Op::SubI { dst, a, b } => (
                "SubI",
                vec![
                    Operand::Reg("dst", dst),
                    Operand::Reg("a", a),
                    Operand::Reg("b", b),
                ],
            ),
            Op::MulI { dst, a, b } => (
                "MulI",
                vec![
                    Operand::Reg("dst", dst),
                    Operand::Reg("a", a),
                    Operand::Reg("b", b),
                ],
            ),
            Op::DivI { dst, a, b } => (
                "DivI",
                vec![
                    Operand::Reg("dst", dst),
                    Operand::Reg("a", a),
                    Operand::Reg("b", b),
                ],
            ),
            Op::RemI { dst, a, b } => (
                "RemI",
                vec![
                    Operand::Reg("dst", dst),
                    Operand::Reg("a", a),
                    Operand::Reg("b", b),
                ],
            ),
            Op::AndI { dst, a, b } => (
                "AndI",
                vec![
                    Operand::Reg("dst", dst),
                    Operand::Reg("a", a),
                    Operand::Reg("b", b),
                ],
            ),
            Op::OrI { dst, a, b } => (
                "OrI",
                vec![
                    Operand::Reg("dst", dst),
                    Operand::Reg("a", a),
                    Operand::Reg("b", b),
                ],
            ),
            Op::XorI { dst, a, b } => (
                "XorI",
                vec![
                    Operand::Reg("dst", dst),
                    Operand::Reg("a", a),
                    Operand::Reg("b", b),
                ],
            ),
            Op::ShlI { dst, a, b } => (
                "ShlI",
                vec![
                    Operand::Reg("dst", dst),
                    Operand::Reg("a", a),
                    Operand::Reg("b", b),
                ],
            ),
            Op::ShrI { dst, a, b } => (
                "ShrI",
                vec![
                    Operand::Reg("dst", dst),
                    Operand::Reg("a", a),
                    Operand::Reg("b", b),
                ],
            ),
            Op::NegI { dst, src } => (
                "NegI",
                vec![Operand::Reg("dst", dst), Operand::Reg("src", src)],
            ),
            Op::AddIImm { dst, a, imm } => (
                "AddIImm",
                vec![
                    Operand::Reg("dst", dst),
                    Operand::Reg("a", a),
                    Operand::Imm(imm as i64),
                ],
            ),
            Op::MulIImm { dst, a, imm } => (
                "MulIImm",
                vec![
                    Operand::Reg("dst", dst),
                    Operand::Reg("a", a),
                    Operand::Imm(imm as i64),
                ],
            ),
            Op::DivIImm { dst, a, imm } => (
                "DivIImm",
                vec![
                    Operand::Reg("dst", dst),
                    Operand::Reg("a", a),
                    Operand::Imm(imm as i64),
                ],
            ),
            Op::RemIImm { dst, a, imm } => (
                "RemIImm",
                vec![
                    Operand::Reg("dst", dst),
                    Operand::Reg("a", a),
                    Operand::Imm(imm as i64),
                ],
            ),
            Op::AddF { dst, a, b } => (
                "AddF",
                vec![
                    Operand::Reg("dst", dst),
                    Operand::Reg("a", a),
                    Operand::Reg("b", b),
                ],
            ),
            Op::SubF { dst, a, b } => (
                "SubF",
                vec![
                    Operand::Reg("dst", dst),
                    Operand::Reg("a", a),
                    Operand::Reg("b", b),
                ],
            ),
            Op::MulF { dst, a, b } => (
                "MulF",
                vec![
                    Operand::Reg("dst", dst),
                    Operand::Reg("a", a),
                    Operand::Reg("b", b),
                ],
            ),
            Op::DivF { dst, a, b } => (
                "DivF",
                vec![
                    Operand::Reg("dst", dst),
                    Operand::Reg("a", a),
                    Operand::Reg("b", b),
                ],
            ),
            Op::RemF { dst, a, b } => (
                "RemF",
                vec![
                    Operand::Reg("dst", dst),
                    Operand::Reg("a", a),
                    Operand::Reg("b", b),
                ],
            ),
            Op::NegF { dst, src } => (
                "NegF",
                vec![Operand::Reg("dst", dst), Operand::Reg("src", src)],
            ),
            Op::EqI { dst, a, b } => (
                "EqI",
                vec![
                    Operand::Reg("dst", dst),
                    Operand::Reg("a", a),
                    Operand::Reg("b", b),
                ],
            ),
            Op::NeI { dst, a, b } => (
                "NeI",
                vec![
                    Operand::Reg("dst", dst),
                    Operand::Reg("a", a),
                    Operand::Reg("b", b),
                ],
            ),
            Op::LtI { dst, a, b } => (
                "LtI",
                vec![
                    Operand::Reg("dst", dst),
                    Operand::Reg("a", a),
                    Operand::Reg("b", b),
                ],
            ),
            Op::LeI { dst, a, b } => (
                "LeI",
                vec![
                    Operand::Reg("dst", dst),
                    Operand::Reg("a", a),
                    Operand::Reg("b", b),
                ],
            ),
            Op::EqF { dst, a, b } => (
                "EqF",
                vec![
                    Operand::Reg("dst", dst),
                    Operand::Reg("a", a),
                    Operand::Reg("b", b),
                ],
            ),
            Op::NeF { dst, a, b } => (
                "NeF",
                vec![
                    Operand::Reg("dst", dst),
                    Operand::Reg("a", a),
                    Operand::Reg("b", b),
                ],
            ),
            Op::LtF { dst, a, b } => (
                "LtF",
                vec![
                    Operand::Reg("dst", dst),
                    Operand::Reg("a", a),
                    Operand::Reg("b", b),
                ],
            ),
            Op::LeF { dst, a, b } => (
                "LeF",
                vec![
                    Operand::Reg("dst", dst),
                    Operand::Reg("a", a),
                    Operand::Reg("b", b),
                ],
            ),
            Op::EqS { dst, a, b } => (
                "EqS",
                vec![
                    Operand::Reg("dst", dst),
                    Operand::Reg("a", a),
                    Operand::Reg("b", b),
                ],
            ),
            Op::NeS { dst, a, b } => (
                "NeS",
                vec![
                    Operand::Reg("dst", dst),
                    Operand::Reg("a", a),
                    Operand::Reg("b", b),
                ],
            ),
            Op::LtS { dst, a, b } => (
                "LtS",
                vec![
                    Operand::Reg("dst", dst),
                    Operand::Reg("a", a),
                    Operand::Reg("b", b),
                ],
            ),
            Op::LeS { dst, a, b } => (
                "LeS",
                vec![
                    Operand::Reg("dst", dst),
                    Operand::Reg("a", a),
                    Operand::Reg("b", b),
                ],
            ),
            Op::Not { dst, src } => (
                "Not",
                vec![Operand::Reg("dst", dst), Operand::Reg("src", src)],
            ),
            Op::Jmp { target } => ("Jmp", vec![Operand::Target(target)]),
            Op::JmpIf { a, target } => {
                ("JmpIf", vec![Operand::Reg("a", a), Operand::Target(target)])
            }
            Op::JmpIfNot { a, target } => (
                "JmpIfNot",
                vec![Operand::Reg("a", a), Operand::Target(target)],
            ),
            Op::JmpIfNotLtI { a, b, target } => (
                "JmpIfNotLtI",
                vec![
                    Operand::Reg("a", a),
                    Operand::Reg("b", b),
                    Operand::Target(target),
                ],
            ),
            Op::JmpIfNotLeI { a, b, target } => (
                "JmpIfNotLeI",
                vec![
                    Operand::Reg("a", a),
                    Operand::Reg("b", b),
                    Operand::Target(target),
                ],
            ),
            Op::JmpIfNotEqI { a, b, target } => (
                "JmpIfNotEqI",
                vec![
                    Operand::Reg("a", a),
                    Operand::Reg("b", b),
                    Operand::Target(target),
                ],
            ),
            Op::JmpIfNotNeI { a, b, target } => (
                "JmpIfNotNeI",
                vec![
                    Operand::Reg("a", a),
                    Operand::Reg("b", b),
                    Operand::Target(target),
                ],
            ),
            Op::JmpIfNotLtIImm { a, imm, target } => (
                "JmpIfNotLtIImm",
                vec![
                    Operand::Reg("a", a),
                    Operand::Imm(imm as i64),
                    Operand::Target(target),
                ],
            ),
            Op::JmpIfNotLeIImm { a, imm, target } => (
                "JmpIfNotLeIImm",
                vec![
                    Operand::Reg("a", a),
                    Operand::Imm(imm as i64),
                    Operand::Target(target),
                ],
            ),
            Op::JmpIfNotGtIImm { a, imm, target } => (
                "JmpIfNotGtIImm",
                vec![
                    Operand::Reg("a", a),
                    Operand::Imm(imm as i64),
                    Operand::Target(target),
                ],
            ),
            Op::JmpIfNotGeIImm { a, imm, target } => (
                "JmpIfNotGeIImm",
                vec![
                    Operand::Reg("a", a),
                    Operand::Imm(imm as i64),
                    Operand::Target(target),
                ],
            ),
            Op::JmpIfNotEqIImm { a, imm, target } => (
                "JmpIfNotEqIImm",
                vec![
                    Operand::Reg("a", a),
                    Operand::Imm(imm as i64),
                    Operand::Target(target),
                ],
            ),
            Op::JmpIfNotNeIImm { a, imm, target } => (
                "JmpIfNotNeIImm",
                vec![
                    Operand::Reg("a", a),
                    Operand::Imm(imm as i64),
                    Operand::Target(target),
                ],
            ),
            Op::JmpIfNotLtF { a, b, target } => (
                "JmpIfNotLtF",
                vec![
                    Operand::Reg("a", a),
                    Operand::Reg("b", b),
                    Operand::Target(target),
                ],
            ),
            Op::JmpIfLtF { a, b, target } => (
                "JmpIfLtF",
                vec![
                    Operand::Reg("a", a),
                    Operand::Reg("b", b),
                    Operand::Target(target),
                ],
            ),
            Op::JmpIfLeF { a, b, target } => (
                "JmpIfLeF",
                vec![
                    Operand::Reg("a", a),
                    Operand::Reg("b", b),
                    Operand::Target(target),
                ],
            ),
            Op::JmpIfNotLeF { a, b, target } => (
                "JmpIfNotLeF",
                vec![
                    Operand::Reg("a", a),
                    Operand::Reg("b", b),
                    Operand::Target(target),
                ],
            ),
            Op::ForPrep {
                counter,
                end,
                target,
            } => (
                "ForPrep",
                vec![
                    Operand::Reg("counter", counter),
                    Operand::Reg("end", end),
                    Operand::Target(target),
                ],
            ),
            Op::ForLoop {
                counter,
                end,
                target,
            } => (
                "ForLoop",
                vec![
                    Operand::Reg("counter", counter),
                    Operand::Reg("end", end),
                    Operand::Target(target),
                ],
            ),
            Op::Call { func, base, dst } => (
                "Call",
                vec![
                    Operand::Reg("dst", dst),
                    Operand::Func(func),
                    Operand::Reg("base", base),
                ],
            ),
            Op::Return { src } => ("Return", vec![Operand::Reg("src", src)]),
            Op::ReturnVoid => ("ReturnVoid", vec![]),
            Op::Concat { dst, a, b } => (
                "Concat",
                vec![
                    Operand::Reg("dst", dst),
                    Operand::Reg("a", a),
                    Operand::Reg("b", b),
                ],
            ),
            Op::LenS { dst, src } => (
                "LenS",
                vec![Operand::Reg("dst", dst), Operand::Reg("src", src)],
            ),
            Op::NewArray { dst, refs, cap } => (
                "NewArray",
                vec![
                    Operand::Reg("dst", dst),
                    Operand::Flag("refs", refs),
                    Operand::Num("cap", cap as u32),
                ],
            ),
            Op::RepeatArray {
                dst,
                val,
                count,
                depth,
                refs,
            } => (
                "RepeatArray",
                vec![
                    Operand::Reg("dst", dst),
                    Operand::Reg("val", val),
                    Operand::Reg("count", count),
                    Operand::Num("depth", depth as u32),
                    Operand::Flag("refs", refs),
                ],
            ),
            Op::GetElem { dst, arr, idx } => (
                "GetElem",
                vec![
                    Operand::Reg("dst", dst),
                    Operand::Reg("arr", arr),
                    Operand::Reg("idx", idx),
                ],
            ),
            Op::SetElem { arr, idx, val } => (
                "SetElem",
                vec![
                    Operand::Reg("arr", arr),
                    Operand::Reg("idx", idx),
                    Operand::Reg("val", val),
                ],
            ),
            Op::LenA { dst, src } => (
                "LenA",
                vec![Operand::Reg("dst", dst), Operand::Reg("src", src)],
            ),
            Op::Push { arr, val } => (
                "Push",
                vec![Operand::Reg("arr", arr), Operand::Reg("val", val)],
            ),
            Op::Pop { dst, arr } => (
                "Pop",
                vec![Operand::Reg("dst", dst), Operand::Reg("arr", arr)],
            ),
            Op::Print { src, ty } => ("Print", vec![Operand::Reg("src", src), Operand::Type(ty)]),
            Op::IntToFloat { dst, src } => (
                "IntToFloat",
                vec![Operand::Reg("dst", dst), Operand::Reg("src", src)],
            ),
            Op::FloatToInt { dst, src } => (
                "FloatToInt",
                vec![Operand::Reg("dst", dst), Operand::Reg("src", src)],
            ),
            Op::ToStr { dst, src, ty } => (
                "ToStr",
                vec![
                    Operand::Reg("dst", dst),
                    Operand::Reg("src", src),
                    Operand::Type(ty),
                ],
            ),
            Op::Sqrt { dst, src } => (
                "Sqrt",
                vec![Operand::Reg("dst", dst), Operand::Reg("src", src)],
            ),
            Op::Clock { dst } => ("Clock", vec![Operand::Reg("dst", dst)]),
            Op::Args { dst } => ("Args", vec![Operand::Reg("dst", dst)]),
            Op::ParseInt { dst, src } => (
                "ParseInt",
                vec![Operand::Reg("dst", dst), Operand::Reg("src", src)],
            ),
            Op::ParseFloat { dst, src } => (
                "ParseFloat",
                vec![Operand::Reg("dst", dst), Operand::Reg("src", src)],
            ),
        }
    }
}

// The dispatch loop copies one instruction per step; keep it one word.
const _: () = assert!(std::mem::size_of::<Op>() <= 8);

/// A constant-pool entry. Strings are materialised as heap objects when a
/// VM is created (see [`crate::runtime::Vm`]).
#[derive(Clone, Debug, PartialEq)]
pub enum Const {
    Int(i64),
    Float(f64),
    /// Index into [`Module::strings`].
    Str(u32),
}

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
    pub code: Vec<Op>,
    /// Source position of each instruction in `code`.
    pub spans: Vec<Span>,
}

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
