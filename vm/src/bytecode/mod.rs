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

// The types and positions bytecode carries, so a reader of bytecode (a JIT)
// needs no other module.
pub use crate::types::{Span, Type};

#[macro_use]
mod table;
pub mod disasm;
mod verify;

pub use table::{Access, Flags, MAX_OPERANDS, Operand, Operands, RegClass, RegOperand};

/// A register index within a frame.
pub type Reg = u8;

/// Most typed registers plus call-area slots one function may use.
pub const MAX_REGS: usize = 256;

/// Most rounds one [`Op::Spin`] may run: a few seconds on any machine
/// (a round takes a few nanoseconds); the verifier's bound, so that no
/// bytecode spins for long in one step.
pub const MAX_SPIN: i64 = 2_000_000_000;

/// Dependent multiplications in one round of [`Op::Spin`] (then a
/// count-down branch): the interpreter's loop (`runtime::spin`) and the
/// JIT's machine code are the same loop, so one calibration fits both.
pub const SPIN_MULTIPLICATIONS: usize = 4;

/// The target of a jump the compiler has emitted but not patched yet
/// ([`Op::target_mut`]): outside every function, so the verifier rejects a
/// jump that was never patched instead of running it to instruction 0.
pub const UNPATCHED: u32 = u32::MAX;

// ANCHOR: op_intro
// The instruction table: every instruction declared once, here. It
// generates `Op`, `Op::opcode`, `Op::name`, `Op::operands`, `Op::flags`
// and the interpreter's handler table (see `table.rs` for the roles,
// classes and flags). Field names: `dst` is written, `a`/`b`/`src` are
// read, `imm` is an immediate, `k` a constant-pool index, `target` an
// instruction index in the same function. Adding an instruction = one row
// here + one handler in `interp::handlers` (or one arm in
// `interp::slow::slow_op` for a `slow` row) + one arm in the JIT's
// `translate` (none for a `slow` row: it calls the interpreter's).
instruction_table! {
  inline {
    // --- moves and constants ---
    /// `dst = src` (any type).
    Move { dst: write(Any), src: read(Any) } [INLINABLE];
    /// `dst = imm` (int or bool).
    LoadInt { dst: write(IntOrBool), imm: imm } [INLINABLE];
    /// `dst = consts[k]` (an int or float that does not fit `LoadInt`, or a
    /// string literal).
    LoadConst { dst: write(Any), k: konst } [INLINABLE];
// ANCHOR_END: op_intro

    // --- int arithmetic (wrapping) ---
    /// `dst = a + b` (wrapping).
    AddI { dst: write(Int), a: read(Int), b: read(Int) } [INLINABLE];
    /// `dst = a - b` (wrapping).
    SubI { dst: write(Int), a: read(Int), b: read(Int) } [INLINABLE];
    /// `dst = a * b` (wrapping).
    MulI { dst: write(Int), a: read(Int), b: read(Int) } [INLINABLE];
    /// Truncating division; error on zero; `i64::MIN / -1` wraps.
    DivI { dst: write(Int), a: read(Int), b: read(Int) } [CAN_FAIL];
    /// Truncating remainder; error on zero; `i64::MIN % -1` is 0.
    RemI { dst: write(Int), a: read(Int), b: read(Int) } [CAN_FAIL];
    /// `dst = a & b`.
    AndI { dst: write(Int), a: read(Int), b: read(Int) } [INLINABLE];
    /// `dst = a | b`.
    OrI { dst: write(Int), a: read(Int), b: read(Int) } [INLINABLE];
    /// `dst = a ^ b`.
    XorI { dst: write(Int), a: read(Int), b: read(Int) } [INLINABLE];
    /// `a << (b mod 64)`.
    ShlI { dst: write(Int), a: read(Int), b: read(Int) } [INLINABLE];
    /// `a >> (b mod 64)`, arithmetic.
    ShrI { dst: write(Int), a: read(Int), b: read(Int) } [INLINABLE];
    /// `dst = -src` (wrapping).
    NegI { dst: write(Int), src: read(Int) } [INLINABLE];
    /// `dst = a + imm` (also subtraction of a constant).
    AddIImm { dst: write(Int), a: read(Int), imm: imm } [INLINABLE];
    /// `dst = a * imm` (wrapping).
    MulIImm { dst: write(Int), a: read(Int), imm: imm } [INLINABLE];
    /// `dst = a / imm`, `imm` never 0 (the compiler keeps `/ 0` as `DivI`).
    DivIImm { dst: write(Int), a: read(Int), imm: imm } [INLINABLE];
    /// `dst = a % imm`, `imm` never 0.
    RemIImm { dst: write(Int), a: read(Int), imm: imm } [INLINABLE];

    // --- float arithmetic (IEEE) ---
    /// `dst = a + b`.
    AddF { dst: write(Float), a: read(Float), b: read(Float) } [INLINABLE];
    /// `dst = a - b`.
    SubF { dst: write(Float), a: read(Float), b: read(Float) } [INLINABLE];
    /// `dst = a * b`.
    MulF { dst: write(Float), a: read(Float), b: read(Float) } [INLINABLE];
    /// `dst = a / b` (IEEE: `x / 0.0` is ±inf or NaN).
    DivF { dst: write(Float), a: read(Float), b: read(Float) } [INLINABLE];
    /// Truncated remainder, like Rust's `%`.
    RemF { dst: write(Float), a: read(Float), b: read(Float) } [];
    /// `dst = -src`.
    NegF { dst: write(Float), src: read(Float) } [INLINABLE];

    // --- comparisons producing a bool (0/1); `>` and `>=` swap operands ---
    /// `dst = a == b` (ints or bools).
    EqI { dst: write(Bool), a: read(IntOrBool), b: read(IntOrBool) } [INLINABLE];
    /// `dst = a != b` (ints or bools).
    NeI { dst: write(Bool), a: read(IntOrBool), b: read(IntOrBool) } [INLINABLE];
    /// `dst = a < b`.
    LtI { dst: write(Bool), a: read(Int), b: read(Int) } [INLINABLE];
    /// `dst = a <= b`.
    LeI { dst: write(Bool), a: read(Int), b: read(Int) } [INLINABLE];
    /// `dst = a == b` (false for NaN).
    EqF { dst: write(Bool), a: read(Float), b: read(Float) } [INLINABLE];
    /// `dst = a != b` (true for NaN).
    NeF { dst: write(Bool), a: read(Float), b: read(Float) } [INLINABLE];
    /// `dst = a < b`.
    LtF { dst: write(Bool), a: read(Float), b: read(Float) } [INLINABLE];
    /// `dst = a <= b`.
    LeF { dst: write(Bool), a: read(Float), b: read(Float) } [INLINABLE];
    /// `dst = a == b`, by contents.
    EqS { dst: write(Bool), a: read(Str), b: read(Str) } [];
    /// `dst = a != b`, by contents.
    NeS { dst: write(Bool), a: read(Str), b: read(Str) } [];
    /// Byte-wise string order.
    LtS { dst: write(Bool), a: read(Str), b: read(Str) } [];
    /// `dst = a <= b`, byte-wise.
    LeS { dst: write(Bool), a: read(Str), b: read(Str) } [];
    /// Boolean not.
    Not { dst: write(Bool), src: read(Bool) } [INLINABLE];

    // --- control flow ---
    /// Jump to `target`.
    Jmp { target: target } [ENDS_BLOCK | NO_FALLTHROUGH];
    /// Jump when the bool in `a` is true.
    JmpIf { a: read(Bool), target: target } [ENDS_BLOCK];
    /// Jump when the bool in `a` is false.
    JmpIfNot { a: read(Bool), target: target } [ENDS_BLOCK];
    // ANCHOR: op_fused_branch
    /// Fused compare-and-branch: jump unless `a < b` (ints).
    JmpIfNotLtI { a: read(Int), b: read(Int), target: target } [ENDS_BLOCK];
    /// Jump unless `a <= b` (ints).
    JmpIfNotLeI { a: read(Int), b: read(Int), target: target } [ENDS_BLOCK];
    /// Jump unless `a == b` (ints or bools).
    JmpIfNotEqI { a: read(IntOrBool), b: read(IntOrBool), target: target } [ENDS_BLOCK];
    /// Jump unless `a != b` (ints or bools).
    JmpIfNotNeI { a: read(IntOrBool), b: read(IntOrBool), target: target } [ENDS_BLOCK];
    /// Jump unless `a < imm`.
    JmpIfNotLtIImm { a: read(Int), imm: imm16, target: target } [ENDS_BLOCK];
    /// Jump unless `a <= imm`.
    JmpIfNotLeIImm { a: read(Int), imm: imm16, target: target } [ENDS_BLOCK];
    /// Jump unless `a > imm`.
    JmpIfNotGtIImm { a: read(Int), imm: imm16, target: target } [ENDS_BLOCK];
    /// Jump unless `a >= imm`.
    JmpIfNotGeIImm { a: read(Int), imm: imm16, target: target } [ENDS_BLOCK];
    /// Jump unless `a == imm`.
    JmpIfNotEqIImm { a: read(IntOrBool), imm: imm16, target: target } [ENDS_BLOCK];
    /// Jump unless `a != imm`.
    JmpIfNotNeIImm { a: read(IntOrBool), imm: imm16, target: target } [ENDS_BLOCK];
    // ANCHOR_END: op_fused_branch
    /// Jump unless `a < b` (floats; NaN compares false, so it jumps).
    JmpIfNotLtF { a: read(Float), b: read(Float), target: target } [ENDS_BLOCK];
    /// Jump when `a < b` (floats; NaN compares false: no jump).
    JmpIfLtF { a: read(Float), b: read(Float), target: target } [ENDS_BLOCK];
    /// Jump when `a <= b` (floats; NaN does not jump).
    JmpIfLeF { a: read(Float), b: read(Float), target: target } [ENDS_BLOCK];
    /// Jump unless `a <= b` (floats; NaN jumps).
    JmpIfNotLeF { a: read(Float), b: read(Float), target: target } [ENDS_BLOCK];
    // ANCHOR: op_for_and_call
    /// `for` loop entry: jump to `target` (the loop exit) unless
    /// `counter < end`.
    ForPrep { counter: read(Int), end: read(Int), target: target } [ENDS_BLOCK];
    /// `for` loop back edge: `counter += 1`; jump to `target` (the body)
    /// while `counter < end`. Cannot overflow: `counter < end` held before.
    ForLoop { counter: update(Int), end: read(Int), target: target } [ENDS_BLOCK];

    // --- calls ---
    /// Call function `func` with its window starting at register `base`
    /// (the arguments are already there), then copy the result (left by
    /// the callee in `base`) to `dst`; `dst == base` for void calls.
    Call { dst: write(Any), func: func, base: window } [CAN_FAIL];
    /// Return the value in `src`.
    Return { src: read(Any) } [ENDS_BLOCK | NO_FALLTHROUGH];
    /// Return from a function without a value.
    ReturnVoid [ENDS_BLOCK | NO_FALLTHROUGH];
    // ANCHOR_END: op_for_and_call

    // --- strings and arrays (elements are 64-bit slots, like registers) ---
    /// Byte length of a string.
    LenS { dst: write(Int), src: read(Str) } [];
    /// `dst = arr[idx]` (error when out of range).
    GetElem { dst: write(Any), arr: read(Array), idx: read(Int) } [CAN_FAIL];
    /// `arr[idx] = val` (error when out of range).
    SetElem { arr: read(Array), idx: read(Int), val: read(Any) } [CAN_FAIL];
    /// Number of elements.
    LenA { dst: write(Int), src: read(Array) } [];
    /// Remove and return the last element (error when empty).
    Pop { dst: write(Any), arr: read(Array) } [CAN_FAIL];

    // --- other builtins ---
    /// `float(int)`.
    IntToFloat { dst: write(Float), src: read(Int) } [INLINABLE];
    /// `int(float)`: Rust's `as` (truncate, saturate, NaN → 0).
    FloatToInt { dst: write(Int), src: read(Float) } [INLINABLE];
    /// `dst = sqrt(src)`.
    Sqrt { dst: write(Float), src: read(Float) } [INLINABLE];

    // --- the slowdown experiment (`toyvm run --slow-line`) ---
    /// Busy work: `consts[k]` (an int, `1..=MAX_SPIN`) rounds of the loop
    /// of `runtime::spin` ([`SPIN_MULTIPLICATIONS`] dependent
    /// multiplications and a count-down branch each). Only `front::slow_line` emits
    /// it, where control enters a slowed line.
    Spin { k: konst } [INLINABLE];
  }

  // Run out of line by `interp::run_slow_op`, from both tiers: they
  // allocate, print, parse or read the clock.
  slow {
    /// `dst = a + b` (new string).
    Concat { dst: write(Str), a: read(Str), b: read(Str) } [CAN_FAIL];
    /// `dst = []` with room for `cap` elements; `refs` says whether the
    /// elements are heap references (for the collector).
    NewArray { dst: write(Array), refs: flag, cap: num16 } [CAN_FAIL];
    /// `dst = [val; count]`. `depth` 0: copy the bits of `val` (a scalar or
    /// a shared immutable string); `depth` d > 0: `val` is an array nested
    /// d deep, deep-copied for every element so rows are independent.
    /// `refs`: the new array's elements are references.
    RepeatArray { dst: write(Array), val: read(Any), count: read(Int), depth: num8, refs: flag } [CAN_FAIL];
    /// Append `val` to `arr`.
    Push { arr: read(Array), val: read(Any) } [CAN_FAIL];
    /// `print(x)`: `ty` indexes [`Module::types`] (the type of `src`).
    Print { src: read(Any), ty: ty } [CAN_FAIL];
    /// `str(x)` for a scalar: `ty` indexes [`Module::types`].
    ToStr { dst: write(Str), src: read(Any), ty: ty } [CAN_FAIL];
    /// Monotonic seconds since the VM started.
    Clock { dst: write(Float) } [];
    /// A new `[str]` holding the script arguments.
    Args { dst: write(Array) } [CAN_FAIL];
    /// `dst = parse_int(src)` (error on malformed text).
    ParseInt { dst: write(Int), src: read(Str) } [CAN_FAIL];
    /// `dst = parse_float(src)` (error on malformed text).
    ParseFloat { dst: write(Float), src: read(Str) } [CAN_FAIL];
  }
}

impl Op {
    /// Whether this is one of the table's `slow` instructions.
    pub fn is_slow(&self) -> bool {
        self.flags().contains(Flags::SLOW)
    }

    /// Whether control may continue with the next instruction: false for
    /// the table's `NO_FALLTHROUGH` instructions (unconditional jumps and
    /// returns).
    pub fn falls_through(&self) -> bool {
        !self.flags().contains(Flags::NO_FALLTHROUGH)
    }

    /// The register operands, in table order.
    pub fn regs(&self) -> impl Iterator<Item = RegOperand> {
        self.operands().into_iter().filter_map(|o| match o {
            Operand::Reg(r) => Some(r),
            _ => None,
        })
    }

    /// The jump targets.
    pub fn targets(&self) -> impl Iterator<Item = u32> {
        self.operands().into_iter().filter_map(|o| match o {
            Operand::Target(t) => Some(t),
            _ => None,
        })
    }
}

/// The loop back-edges of `code`, as `(from, target)` pairs: the jumps to
/// an instruction at or before their own. These are the jumps the
/// interpreter counts for tier-up (`interp::handlers::jump`), and their
/// targets the loop headers where it asks about OSR.
pub fn back_edges(code: &[Op]) -> impl Iterator<Item = (usize, usize)> + '_ {
    (code.iter().enumerate())
        .flat_map(|(pc, op)| op.targets().map(move |t| (pc, t as usize)))
        .filter(|&(from, target)| target <= from)
}

// The interpreter reads one instruction per step; keep it one word.
const _: () = assert!(std::mem::size_of::<Op>() <= 8);

/// A constant-pool entry. Strings are materialised as heap objects when a
/// VM is created (see [`crate::interp::Vm`]).
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
    /// How often the interpreter entered each `--slow-line` line (see
    /// [`LineEntries`]); empty without `--slow-line`.
    pub line_entries: LineEntries,
}

/// Entries counted per script line, by the interpreter's [`Op::Spin`]: the
/// ground truth of the slowdown experiment (`toyvm run --no-jit
/// --slow-line L:N --slow-line-counts`), from which a profile's predicted
/// shares follow. Compiled code does not count: a count is a property of
/// the program's run, the same in every tier, so the interpreter's is the
/// one to take. Atomic so that a shared `Module` can count (one thread
/// runs a VM's code; `Relaxed` is enough).
#[derive(Debug, Default)]
pub struct LineEntries(Box<[std::sync::atomic::AtomicU64]>);

impl LineEntries {
    /// Counters for lines `0..lines`, all zero.
    pub fn new(lines: usize) -> LineEntries {
        LineEntries((0..lines).map(|_| Default::default()).collect())
    }

    /// Counts one entry into `line` (nothing for a line out of range).
    pub fn count(&self, line: u32) {
        if let Some(n) = self.0.get(line as usize) {
            n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Entries into `line` so far.
    pub fn get(&self, line: u32) -> u64 {
        (self.0.get(line as usize)).map_or(0, |n| n.load(std::sync::atomic::Ordering::Relaxed))
    }
}

impl Clone for LineEntries {
    /// A copy of the counts as they are now.
    fn clone(&self) -> LineEntries {
        LineEntries(
            (self.0.iter())
                .map(|n| n.load(std::sync::atomic::Ordering::Relaxed).into())
                .collect(),
        )
    }
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

pub use verify::verify;

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
            // Found by the `bytecode` fuzz target: a panic in the
            // interpreter (`wrapping_rem` by zero).
            vec![
                Op::RemIImm {
                    dst: 0,
                    a: 0,
                    imm: 0,
                },
                Op::ReturnVoid,
            ],
            vec![
                Op::DivIImm {
                    dst: 0,
                    a: 0,
                    imm: 0,
                },
                Op::ReturnVoid,
            ],
        ];
        for code in bad {
            assert!(verify(&tiny(code.clone())).is_err(), "{code:?}");
        }
    }

    // The case that used to reach undefined behaviour from safe code: an
    // int register read as a string pointer.
    #[test]
    fn vm_rejects_a_register_of_the_wrong_type() {
        let module = tiny(vec![
            Op::LoadInt { dst: 0, imm: 12345 },
            Op::LenS { dst: 0, src: 0 },
            Op::ReturnVoid,
        ]);
        let mut out = Vec::new();
        let err = crate::interp::Vm::new(&module, vec![], 10, &mut out)
            .err()
            .expect("rejected");
        assert_eq!(
            err,
            "invalid bytecode: <main>: instruction 1: r0 is int, expected Str"
        );
    }

    #[test]
    fn verify_rejects_mistyped_operands() {
        let with_str = |code: Vec<Op>| {
            let mut m = tiny(code);
            let f = &mut m.functions[0];
            f.reg_types.push(Type::Str);
            f.reg_names.push(None);
            f.ref_regs.push(1);
            f.frame_size = 3;
            f.consts = vec![Const::Str(0)];
            m.strings = vec!["s".into()];
            m.types = vec![Type::Str];
            m
        };
        let bad = [
            // An int moved into a string register.
            vec![Op::Move { dst: 1, src: 0 }, Op::ReturnVoid],
            // An int in the call area printed as a string.
            vec![
                Op::LoadInt { dst: 2, imm: 7 },
                Op::Print { src: 2, ty: 0 },
                Op::ReturnVoid,
            ],
            // A string in the call area that a collection may have freed.
            vec![
                Op::Move { dst: 2, src: 1 },
                Op::Concat { dst: 1, a: 1, b: 1 },
                Op::Print { src: 2, ty: 0 },
                Op::ReturnVoid,
            ],
            // Types differ on the two paths into instruction 3.
            vec![
                Op::Move { dst: 2, src: 1 },
                Op::JmpIf { a: 0, target: 3 },
                Op::LoadInt { dst: 2, imm: 1 },
                Op::Print { src: 2, ty: 0 },
                Op::ReturnVoid,
            ],
        ];
        for code in bad {
            assert!(verify(&with_str(code.clone())).is_err(), "{code:?}");
        }
        let good = vec![
            Op::LoadConst { dst: 1, k: 0 },
            Op::Move { dst: 2, src: 1 },
            Op::LenS { dst: 0, src: 2 },
            Op::Print { src: 2, ty: 0 },
            Op::ReturnVoid,
        ];
        assert_eq!(verify(&with_str(good)), Ok(()));
    }

    // Found by the `bytecode` fuzz target: a reference register that is
    // not a parameter is null until written, and reading it crashed the
    // interpreter (SIGSEGV in `ParseInt`).
    #[test]
    fn verify_rejects_a_reference_read_before_it_is_assigned() {
        let with_str = |code: Vec<Op>| {
            let mut m = tiny(code);
            let f = &mut m.functions[0];
            f.reg_types = vec![Type::Str, Type::Bool];
            f.reg_names = vec![None, None];
            f.ref_regs = vec![0];
            f.frame_size = 3;
            f.consts = vec![Const::Str(0)];
            m.strings = vec!["12".into()];
            m
        };
        let bad = [
            vec![Op::ParseInt { dst: 2, src: 0 }, Op::ReturnVoid],
            // Assigned on one path into instruction 2 only.
            vec![
                Op::JmpIf { a: 1, target: 2 },
                Op::LoadConst { dst: 0, k: 0 },
                Op::LenS { dst: 2, src: 0 },
                Op::ReturnVoid,
            ],
            // Moved before it is assigned.
            vec![Op::Move { dst: 2, src: 0 }, Op::ReturnVoid],
        ];
        for code in bad {
            let err = verify(&with_str(code.clone())).expect_err("rejected");
            assert!(
                err.contains("r0 may be read before it is assigned"),
                "{err}"
            );
        }
        // A parameter of `<main>` counts as assigned, but `<main>` is
        // called with no arguments: it may have none (found by the fuzz
        // target too).
        let mut main_with_param = with_str(vec![Op::LenS { dst: 2, src: 0 }, Op::ReturnVoid]);
        main_with_param.functions[0].params = vec![("s".into(), Type::Str)];
        assert_eq!(
            verify(&main_with_param),
            Err("<main> has parameters".into())
        );
        let good = vec![
            Op::LoadConst { dst: 0, k: 0 },
            Op::JmpIf { a: 1, target: 3 },
            Op::LoadConst { dst: 0, k: 0 },
            Op::ParseInt { dst: 2, src: 0 },
            Op::ReturnVoid,
        ];
        assert_eq!(verify(&with_str(good)), Ok(()));
    }

    #[test]
    fn table_knows_roles_and_flags() {
        let op = Op::ForLoop {
            counter: 1,
            end: 2,
            target: 0,
        };
        assert_eq!(op.name(), "ForLoop");
        let regs: Vec<_> = op.regs().map(|r| (r.name, r.reg, r.access)).collect();
        assert_eq!(
            regs,
            [("counter", 1, Access::ReadWrite), ("end", 2, Access::Read)]
        );
        assert_eq!(op.targets().collect::<Vec<_>>(), [0]);
        assert!(op.flags().contains(Flags::ENDS_BLOCK) && op.falls_through());
        assert!(Op::ReturnVoid.operands().is_empty() && !Op::ReturnVoid.falls_through());
        let call = Op::Call {
            func: 3,
            base: 4,
            dst: 5,
        };
        assert_eq!(call.operands()[1], Operand::Func(3));
        assert!(call.flags().contains(Flags::CAN_FAIL) && !call.is_slow());
        assert!(Op::Clock { dst: 0 }.is_slow());
        assert!(
            Op::AddI { dst: 0, a: 0, b: 0 }
                .flags()
                .contains(Flags::INLINABLE)
        );
        assert!(
            !Op::DivI { dst: 0, a: 0, b: 0 }
                .flags()
                .contains(Flags::INLINABLE)
        );
    }
}
