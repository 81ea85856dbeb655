//! Tier-up hooks: how the interpreter hands hot code to a JIT.
//!
//! The `vm` crate knows nothing about any JIT. It counts, per function, the
//! calls plus loop back-edges the interpreter executes in
//! [`FnRuntime::hotness`](super::FnRuntime::hotness) (a countdown: one
//! decrement and one sign test per event) and, when a counter goes below
//! zero, makes a cold call into the [`TierUp`] object installed in
//! [`Vm::tier_up`]. Without one, the counter is simply reset.
//!
//! * At a **call** ([`TierUp::hot_call`]) the JIT may compile the function
//!   and return its new entry, which the interpreter calls at once.
//! * At a **back-edge** ([`TierUp::hot_loop`]) the JIT may return an
//!   on-stack-replacement entry ([`OsrFn`]) for the loop header: the
//!   interpreter calls it with the current frame and returns what it returns,
//!   so a long loop in a function called once still runs compiled.

use super::{EntryFn, Vm};

/// An on-stack-replacement entry: continues the active interpreted frame of
/// its function at a loop header, in compiled code. `base` is the frame's
/// register 0; every register holds the interpreter's current value. The
/// frame record and depth were set up by the interpreter, which also undoes
/// them; the function returns a status like an [`EntryFn`] (result in
/// `base[0]`).
pub type OsrFn = unsafe extern "C" fn(vm: *mut Vm<'_>, base: *mut u64) -> u32;

// ANCHOR: tier_up_trait
/// A JIT, as the interpreter sees it.
pub trait TierUp {
    /// Called once, before `<main>` runs: set the initial counters
    /// (`vm.funcs[f].hotness`) and install entries (e.g. perf trampolines).
    fn start(&mut self, vm: &mut Vm<'_>);

    /// `func`'s counter went below zero at a call. Returns the function's new
    /// entry if it is compiled now (the JIT has installed it in the entry
    /// table too); otherwise the JIT should reset the counter.
    fn hot_call(&mut self, vm: &mut Vm<'_>, func: u32) -> Option<EntryFn>;

    /// `func`'s counter went below zero at a back-edge to instruction `pc`.
    /// Returns an OSR entry for that loop header, or `None` to keep
    /// interpreting (the JIT should then reset the counter).
    fn hot_loop(&mut self, vm: &mut Vm<'_>, func: u32, pc: u32) -> Option<OsrFn>;
}
// ANCHOR_END: tier_up_trait

/// The interpreter's cold path for a call whose counter ran out.
///
/// # Safety
/// `vm` is valid and not borrowed; `func` is a function index.
#[cold]
#[inline(never)]
pub(crate) unsafe fn hot_call(vm: *mut Vm<'_>, func: u32) -> Option<EntryFn> {
    // SAFETY: the hook object lives outside the VM (see `Vm::tier_up`), so
    // the two mutable borrows do not alias; nothing else borrows the VM.
    unsafe {
        match (*vm).tier_up {
            Some(hook) => (*hook.as_ptr()).hot_call(&mut *vm, func),
            None => {
                (&mut (*vm).funcs)[func as usize].hotness = i32::MAX;
                None
            }
        }
    }
}

/// The interpreter's cold path for a back-edge whose counter ran out.
///
/// # Safety
/// As for [`hot_call`]; `pc` is an instruction index of `func`.
#[cold]
#[inline(never)]
pub(crate) unsafe fn hot_loop(vm: *mut Vm<'_>, func: u32, pc: u32) -> Option<OsrFn> {
    // SAFETY: as in `hot_call`.
    unsafe {
        match (*vm).tier_up {
            Some(hook) => (*hook.as_ptr()).hot_loop(&mut *vm, func, pc),
            None => {
                (&mut (*vm).funcs)[func as usize].hotness = i32::MAX;
                None
            }
        }
    }
}
