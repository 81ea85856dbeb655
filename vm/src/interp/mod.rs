//! The bytecode interpreter: one handler function per instruction, each
//! ending in a tail call of the next one.
//!
//! [`interp_entry`] is the default [`EntryFn`] of every function. A Toy
//! call is one native call: the `Call` instruction calls the callee's entry
//! through [`Vm::entry_table`], and when that entry is `interp_entry` the
//! interpreter recurses natively (so native stack use grows with Toy call
//! depth: see `driver` for how the stack is sized).
//!
//! # Dispatch
//!
//! `interp_entry` checks the depth, writes the frame record and calls the
//! handler of the function's first instruction. Every handler
//! ([`handlers`]) is a small function of its own that executes one
//! instruction and then *tail-calls* the handler of the next one. The
//! interpreter runs each function's *slots* (threaded code): a copy of its
//! code built once per VM in which every instruction carries its handler,
//! so finding the next handler is one load next to the instruction, and
//! two instructions with the same opcode may run different handlers (vmprof
//! lines mode uses that). LLVM compiles the tail call to an indirect
//! `jmp`, so a run of instructions is a chain of jumps, each handler with
//! its own dispatch branch (what `computed goto` gives a C interpreter),
//! and the native stack does not grow. The last handler (a `Return`)
//! returns to `interp_entry`.
//!
//! Why this shape and not one `match` in a loop: with a `match`, LLVM
//! lays out all instructions as one 4 KB function sharing one indirect
//! branch, and where that function landed decided its speed: four builds
//! that differed only by unrelated padding ran the same benchmarks 12% to
//! 117% apart (`bench/layouts.py`, `bench/RESULTS.md`). A handler is a
//! function: where it is placed does not change the code inside it, and its
//! own branch predicts its own successors; the same four layouts now run
//! within 6% of each other.
//!
//! Rust does not guarantee tail calls (`become` is unstable): LLVM makes
//! them because every handler has the same signature and keeps nothing on
//! its stack past the call. `tests/interp_dispatch.rs` disassembles the
//! release binary and checks every handler: it ends in a jump, never a
//! call, to the next handler.
//!
//! The handlers trust the bytecode: register operands are below the frame
//! size, jump targets inside the code, constant, type and function
//! indexes in range, and every function ends in a return. The compiler
//! guarantees this and [`crate::bytecode::verify`] checks it before a
//! module is run, which is what makes the unchecked accesses sound.

use std::sync::atomic::{Ordering, compiler_fence};

use crate::bytecode::Op;
use crate::runtime::RuntimeError;

mod frame;
mod handlers;
mod locations;
mod regs;
mod slow;
pub mod tier;
mod vm;

pub use frame::{EntryFn, FrameRecord, STATUS_ERROR, STATUS_OK};
pub use locations::{LOCATION_SHIFT, Locations};
pub use slow::run_slow_op;
pub(crate) use vm::FnRuntime;
pub use vm::Vm;

// ANCHOR: interp_entry
/// The interpreter's entry point for function `func` (see the entry ABI in
/// [`crate::abi`]).
///
/// # Safety
/// `vm` must be a valid VM whose module passed [`crate::bytecode::verify`],
/// `func` a function index of it, and `base` the start of a window of at
/// least that function's `frame_size` slots inside the VM's value stack,
/// with the arguments in place.
// With the handlers: see `handlers`' hot section.
#[unsafe(link_section = ".text.hot.toyvm_interp")]
pub unsafe extern "C" fn interp_entry(vm: *mut Vm<'_>, func: u32, base: *mut u64) -> u32 {
    // SAFETY: the caller's contract.
    unsafe {
        let rt = (*vm).funcs.as_mut_ptr().add(func as usize);
        (*rt).hotness -= 1;
        if (*rt).hotness < 0 {
            return hot_entry(vm, func, base);
        }
        activate(vm, func, base)
    }
}

/// `func`'s countdown ran out at this call: asks the tier-up hook, and
/// calls the entry it installed or runs the call interpreted. Out of line,
/// so that `interp_entry` keeps nothing but the VM and the depth across
/// its one call (each value kept is a callee-saved register pushed and
/// popped on every interpreted call).
///
/// # Safety
/// As for [`interp_entry`].
#[cold]
#[inline(never)]
unsafe fn hot_entry(vm: *mut Vm<'_>, func: u32, base: *mut u64) -> u32 {
    // SAFETY: the caller's contract; a new entry follows the ABI.
    unsafe {
        match tier::hot_call(vm, func) {
            Some(entry) => entry(vm, func, base),
            None => activate(vm, func, base),
        }
    }
}

/// Runs one activation of `func` at `base`: checks the depth, writes the
/// frame record, runs the handlers, restores the depth.
///
/// # Safety
/// As for [`interp_entry`].
#[inline(always)]
unsafe fn activate(vm: *mut Vm<'_>, func: u32, base: *mut u64) -> u32 {
    // SAFETY: the caller's contract; `depth + 1 <= max_depth` keeps the
    // frame record inside its region.
    unsafe {
        let depth = (*vm).depth + 1;
        if depth > (*vm).max_depth {
            return too_deep(vm);
        }
        let rt = (*vm).funcs.as_mut_ptr().add(func as usize);
        let code = (*rt).slots.as_ptr().cast::<Op>();
        // The record before the depth that covers it: the vmprof sampler
        // reads these records from a signal handler (see `crate::vmprof`).
        // Its `pc` is instruction 0's location (used in lines mode only).
        let record = (*vm).frames.add(depth);
        *record = FrameRecord {
            base,
            func,
            pc: locations::location(code),
        };
        compiler_fence(Ordering::Release);
        (*vm).depth = depth;
        let status = run(vm, func, rt, code, base, &raw mut (*record).pc);
        (*vm).depth = depth - 1;
        status
    }
}

/// Fails a call one frame deeper than `max_depth`. Out of line (dropping
/// the previous error is not small), and the status goes through
/// `black_box` so that the call to it stays a jump (see `handlers::raise`).
///
/// # Safety
/// `vm` is valid and not borrowed.
#[cold]
#[inline(never)]
unsafe fn too_deep(vm: *mut Vm<'_>) -> u32 {
    // SAFETY: the caller's contract.
    unsafe { (*vm).error = Some(RuntimeError::DepthExceeded((*vm).max_depth)) };
    std::hint::black_box(STATUS_ERROR)
}

// ANCHOR_END: interp_entry

/// Runs `<main>` of the VM's module and returns the status ([`STATUS_OK`],
/// or [`STATUS_ERROR`] with the error in `vm.error` and the traceback in
/// `vm.trace`). With a `tier`, the interpreter hands hot code to it for
/// the length of the run ([`tier::TierUp`]); [`tier::TierUp::finish`] is
/// left to the caller.
pub fn run_main(vm: &mut Vm<'_>, tier: Option<&mut (dyn tier::TierUp + 'static)>) -> u32 {
    match tier {
        Some(hook) => tier::run_with_hook(vm, hook),
        None => enter_main(vm),
    }
}

/// Calls `<main>` through its entry in the entry table.
fn enter_main(vm: &mut Vm<'_>) -> u32 {
    let main = vm.module.main;
    let vm: *mut Vm<'_> = vm;
    // SAFETY: `Vm::new` verified the module; every entry follows the ABI
    // (`set_entry` is unsafe for that reason); `stack_base` is register 0
    // of a value stack sized for max_depth frames; `<main>` takes no
    // arguments.
    unsafe {
        let entry = *(*vm).entry_table.add(main as usize);
        entry(vm, main, (*vm).stack_base)
    }
}

/// Checks that `interp_entry` has the ABI type (compile-time only).
const _: EntryFn = interp_entry;

/// Runs the body of `func` (whose runtime data is `rt` and slots `code`)
/// in the frame at `regs`: zeroes its ref registers that are not
/// parameters, then runs its handlers from instruction 0 until one returns
/// (see [`handlers`]). `record_pc` is the `pc` of its frame record, which
/// the handlers keep on the current line in vmprof lines mode.
///
/// # Safety
/// As for [`interp_entry`], with the frame record written; `rt` and
/// `code` are `func`'s.
#[inline(always)]
unsafe fn run(
    vm: *mut Vm<'_>,
    func: u32,
    rt: *mut FnRuntime,
    code: *const Op,
    regs: *mut u64,
    record_pc: *mut u32,
) -> u32 {
    // SAFETY: `func` is a function of the verified module and `regs` its
    // frame in the value stack (the caller's contract); `vm` is accessed
    // one field at a time, and no borrow of it outlives this block.
    unsafe {
        for &r in (*rt).zero_regs.iter() {
            *regs.add(r as usize) = 0;
        }
        // In vmprof lines mode the slots' line starts store into the
        // record (`Vm::record_lines`); otherwise nothing does.
        let activation = handlers::Activation {
            vm,
            func,
            code,
            consts: (*rt).consts.as_ptr(),
            hotness: &raw mut (*rt).hotness,
            record_pc,
        };
        handlers::start(regs, &activation)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bytecode::{Module, Op};
    use crate::driver;
    use crate::runtime::TraceEntry;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn module(src: &str) -> Module {
        driver::load("t.toy", src.as_bytes()).expect("compiles")
    }

    const SRC: &str = "fn answer(x: int) -> int { return x + 1; }\nprint(answer(1) + answer(2));\n";

    #[test]
    fn the_interpreter_runs_main_through_the_entry_table() {
        let m = module(SRC);
        let mut out = Vec::new();
        let mut vm = Vm::new(&m, vec![], 100, &mut out).unwrap();
        assert_eq!(run_main(&mut vm, None), STATUS_OK);
        assert_eq!(vm.depth, 0);
        vm.out.flush().unwrap();
        drop(vm);
        assert_eq!(out, b"5\n");
    }

    /// Stands in for compiled code: returns 40 + its argument.
    unsafe extern "C" fn native_answer(vm: *mut Vm<'_>, _func: u32, base: *mut u64) -> u32 {
        // SAFETY: the ABI: `base[0]` holds the argument and takes the result.
        unsafe {
            if (*vm).depth >= (*vm).max_depth {
                (*vm).error = Some(RuntimeError::DepthExceeded((*vm).max_depth));
                return STATUS_ERROR;
            }
            *base = (*base as i64 + 40) as u64;
        }
        STATUS_OK
    }

    #[test]
    fn a_replaced_entry_is_called_with_arguments_in_place() {
        let m = module(SRC);
        let mut out = Vec::new();
        let mut vm = Vm::new(&m, vec![], 100, &mut out).unwrap();
        // SAFETY: `native_answer` follows the ABI for `answer(int) -> int`.
        assert!(unsafe { vm.set_entry(0, native_answer) });
        assert_eq!(run_main(&mut vm, None), STATUS_OK);
        vm.out.flush().unwrap();
        drop(vm);
        assert_eq!(out, b"83\n");
    }

    static TRAMPOLINE_CALLS: AtomicUsize = AtomicUsize::new(0);

    /// A perf-style trampoline: counts, then runs the function in the
    /// interpreter.
    unsafe extern "C" fn counting_trampoline(vm: *mut Vm<'_>, func: u32, base: *mut u64) -> u32 {
        TRAMPOLINE_CALLS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded unchanged from our caller, which obeyed the ABI.
        unsafe { interp_entry(vm, func, base) }
    }

    #[test]
    fn trampolines_can_wrap_the_interpreter() {
        let m = module(SRC);
        let mut out = Vec::new();
        let mut vm = Vm::new(&m, vec![], 100, &mut out).unwrap();
        // SAFETY: the trampoline forwards to `interp_entry`.
        unsafe { vm.set_entry(0, counting_trampoline) };
        assert_eq!(run_main(&mut vm, None), STATUS_OK);
        assert_eq!(TRAMPOLINE_CALLS.load(Ordering::Relaxed), 2);
    }

    /// Fails like a runtime error raised in compiled code.
    unsafe extern "C" fn failing(vm: *mut Vm<'_>, func: u32, _base: *mut u64) -> u32 {
        // SAFETY: `vm` is valid per the ABI.
        unsafe { (*vm).fail(RuntimeError::PopEmpty, func, 0) }
    }

    #[test]
    fn errors_from_an_entry_unwind_with_a_traceback() {
        let m = module(SRC);
        let mut out = Vec::new();
        let mut vm = Vm::new(&m, vec![], 100, &mut out).unwrap();
        // SAFETY: `failing` reports an error the ABI way.
        unsafe { vm.set_entry(0, failing) };
        assert_eq!(run_main(&mut vm, None), STATUS_ERROR);
        assert_eq!(vm.error, Some(RuntimeError::PopEmpty));
        assert_eq!(
            vm.trace,
            vec![TraceEntry { func: 0, pc: 0 }, TraceEntry { func: 1, pc: 1 }]
        );
        assert_eq!(vm.depth, 0);
    }

    /// A hand-written "compiled" `twice(s: str) -> str { return s + s; }`:
    /// follows the entry protocol and runs the concatenation out of line.
    unsafe extern "C" fn compiled_twice(vm: *mut Vm<'_>, func: u32, base: *mut u64) -> u32 {
        // SAFETY: the entry ABI; instruction 0 of `twice` is its Concat
        // into register 1, checked by the test below.
        unsafe {
            let depth = (*vm).depth + 1;
            if depth > (*vm).max_depth {
                (*vm).error = Some(RuntimeError::DepthExceeded((*vm).max_depth));
                return STATUS_ERROR;
            }
            *(*vm).frames.add(depth) = FrameRecord { base, func, pc: 0 };
            (*vm).depth = depth;
            *base.add(1) = 0; // a non-parameter ref register
            let status = run_slow_op(vm, func, base, 0);
            if status == STATUS_OK {
                *base = *base.add(1);
            }
            (*vm).depth = depth - 1;
            status
        }
    }

    #[test]
    fn compiled_code_can_run_slow_instructions_out_of_line() {
        let m = module("fn twice(s: str) -> str { return s + s; }\nprint(twice(\"ab\"));\n");
        assert!(matches!(
            m.functions[0].code[0],
            Op::Concat { dst: 1, a: 0, b: 0 }
        ));
        let mut out = Vec::new();
        let mut vm = Vm::new(&m, vec![], 100, &mut out).unwrap();
        vm.heap.set_stress();
        // SAFETY: `compiled_twice` implements `twice` with the entry ABI.
        unsafe { vm.set_entry(0, compiled_twice) };
        assert_eq!(run_main(&mut vm, None), STATUS_OK);
        vm.out.flush().unwrap();
        drop(vm);
        assert_eq!(out, b"abab\n");
    }

    #[test]
    fn set_entry_rejects_unknown_functions() {
        let m = module(SRC);
        let mut out = Vec::new();
        let mut vm = Vm::new(&m, vec![], 100, &mut out).unwrap();
        // SAFETY: nothing is installed.
        assert!(!unsafe { vm.set_entry(7, failing) });
        assert!(vm.entry(7).is_none());
    }
}
