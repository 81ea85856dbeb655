//! Runtime helpers called from compiled code: `extern "C"` Rust functions,
//! imported under the names (and with the signatures) of the table in
//! [`crate::abi`].
//!
//! Compiled code keeps int, float and bool registers in machine registers
//! and heap references in their frame slots (the GC root invariant of
//! `vm::bytecode`). A helper that runs a whole instruction
//! ([`toy_jit_slow_op`], [`toy_jit_pop`]) works on the frame in memory: the
//! caller stores the instruction's scalar operands to their slots first and
//! reloads the result slot afterwards. Errors are recorded exactly as the
//! interpreter records them (`vm::abi`: [`Vm::fail`]), so messages and tracebacks are
//! identical in every tier.
//!
//! None of these may unwind: they return a status instead, and compiled
//! frames pass it up (the entry ABI of `vm::abi`).

use vm::abi::heap::{arr_mut, str_ref};
use vm::abi::{RuntimeError, STATUS_OK, Vm};
use vm::bytecode::Op;

/// Error codes for [`toy_jit_fail`] (errors without operands).
pub mod codes {
    /// `integer division by zero`.
    pub const DIVISION_BY_ZERO: u32 = 0;
    /// `integer modulo by zero`.
    pub const MODULO_BY_ZERO: u32 = 1;
}

/// Runs instruction `pc` of `func` (one of the allocating, printing or
/// parsing instructions) with the interpreter's own code, on the frame at
/// `regs`. Returns the status.
///
/// # Safety
/// Called only from compiled code of `func` with its frame active at `regs`
/// and the instruction's operands stored in their slots.
pub unsafe extern "C" fn toy_jit_slow_op(
    vm: *mut Vm<'_>,
    func: u32,
    regs: *mut u64,
    pc: u32,
) -> u32 {
    // SAFETY: the caller's contract; `pc` indexes verified code of `func`.
    unsafe {
        if backtrace_requested() {
            let op = (*vm).module().functions[func as usize].code[pc as usize];
            if matches!(op, Op::Print { .. }) {
                let trace = std::backtrace::Backtrace::force_capture();
                let _ = writeln!((*vm).diagnostics(), "{trace}");
            }
        }
        vm::abi::run_slow_op(vm, func, regs, pc)
    }
}

/// `Pop` at instruction `pc`: pops from the array `arr` into `*dst`.
///
/// # Safety
/// `arr` is a live array reference; `dst` a slot of the active frame.
pub unsafe extern "C" fn toy_jit_pop(
    vm: *mut Vm<'_>,
    func: u32,
    pc: u32,
    arr: u64,
    dst: *mut u64,
) -> u32 {
    // SAFETY: the caller's contract (typed ref register, GC invariant).
    unsafe {
        match arr_mut(arr).elems.pop() {
            Some(v) => {
                *dst = v;
                STATUS_OK
            }
            None => (*vm).fail(RuntimeError::PopEmpty, func, pc as usize),
        }
    }
}

/// Raises the operand-less error `code` (see [`codes`]) at `pc`.
///
/// # Safety
/// `vm` is the running VM, not borrowed elsewhere.
pub unsafe extern "C" fn toy_jit_fail(vm: *mut Vm<'_>, func: u32, pc: u32, code: u32) -> u32 {
    let error = match code {
        codes::DIVISION_BY_ZERO => RuntimeError::DivisionByZero,
        _ => RuntimeError::ModuloByZero,
    };
    // SAFETY: the caller's contract.
    unsafe { (*vm).fail(error, func, pc as usize) }
}

/// Raises `index out of range` at `pc`.
///
/// # Safety
/// As for [`toy_jit_fail`].
pub unsafe extern "C" fn toy_jit_index_error(
    vm: *mut Vm<'_>,
    func: u32,
    pc: u32,
    index: i64,
    len: u64,
) -> u32 {
    let error = RuntimeError::IndexOutOfRange {
        index,
        len: len as usize,
    };
    // SAFETY: the caller's contract.
    unsafe { (*vm).fail(error, func, pc as usize) }
}

/// Records the depth-limit error (no trace entry: the frame never became
/// active, as in `interp_entry`); called by an entry shim that found no
/// room for its native function's frame (see [`crate::abi::frames`]).
///
/// # Safety
/// As for [`toy_jit_fail`].
pub unsafe extern "C" fn toy_jit_depth_exceeded(vm: *mut Vm<'_>) -> u32 {
    // SAFETY: the caller's contract.
    unsafe { (*vm).fail_depth_exceeded() }
}

/// Adds the trace entry of a call at `pc` of `func` whose callee failed;
/// first records the depth-limit error if `depth_exceeded` is nonzero (the
/// call found no room for the callee's frame, see [`crate::abi::frames`], so
/// the callee never ran).
///
/// # Safety
/// As for [`toy_jit_fail`].
pub unsafe extern "C" fn toy_jit_push_trace(
    vm: *mut Vm<'_>,
    func: u32,
    pc: u32,
    depth_exceeded: u32,
) -> u32 {
    // SAFETY: the caller's contract.
    unsafe {
        if depth_exceeded != 0 {
            (*vm).fail_depth_exceeded();
        }
        (*vm).push_trace(func, pc)
    }
}

/// Byte-wise comparison of two strings: -1, 0 or 1.
///
/// # Safety
/// Both are live string references.
pub unsafe extern "C" fn toy_jit_str_cmp(a: u64, b: u64) -> i64 {
    // SAFETY: the caller's contract.
    let (a, b) = unsafe { (str_ref(a), str_ref(b)) };
    a.cmp(b) as i64
}

/// Byte length of a string.
///
/// # Safety
/// `s` is a live string reference.
pub unsafe extern "C" fn toy_jit_str_len(s: u64) -> i64 {
    // SAFETY: the caller's contract.
    unsafe { str_ref(s) }.len() as i64
}

/// Float remainder with Rust's `%` semantics (Cranelift has no `frem`).
pub extern "C" fn toy_jit_fmod(a: f64, b: f64) -> f64 {
    a % b
}

/// Test-only switch [`crate::options::BACKTRACE_ENV`], read once.
fn backtrace_requested() -> bool {
    static REQUESTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *REQUESTED.get_or_init(|| std::env::var_os(crate::options::BACKTRACE_ENV).is_some())
}
