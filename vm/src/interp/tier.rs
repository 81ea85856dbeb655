//! Tier-up hooks: how the interpreter hands hot code to a JIT.
//!
//! The `vm` crate knows nothing about any JIT. It counts, per function, the
//! calls plus loop back-edges the interpreter executes in a countdown (one
//! decrement and one sign test per event) and, when a counter goes below
//! zero, makes a cold call into the [`TierUp`] object of the run
//! ([`super::run_main`]). The hook answers with a decision, which this module
//! applies: enter compiled code, or keep interpreting and ask again after
//! a [`Countdown`]. Without a hook, a counter that runs out is never asked
//! about again.
//!
//! * At a **call** ([`TierUp::hot_call`]) the JIT may compile the function
//!   and return its new entry, which the interpreter calls at once.
//! * At a **back-edge** ([`TierUp::hot_loop`]) the JIT may return an
//!   on-stack-replacement entry ([`OsrFn`]) of the function: the
//!   interpreter calls it with the current frame and the loop header, and
//!   returns what it returns, so a long loop in a function called once
//!   still runs compiled.

use std::ptr::NonNull;

use super::{EntryFn, Vm};

/// An on-stack-replacement entry: continues the active interpreted frame of
/// its function at loop header `pc` (the target of a back-edge), in
/// compiled code. One entry serves every loop of its function. `base` is
/// the frame's register 0; every register holds the interpreter's current
/// value. The frame record and depth were set up by the interpreter, which
/// also undoes them; the function returns a status like an [`EntryFn`]
/// (result in `base[0]`).
pub type OsrFn = unsafe extern "C" fn(vm: *mut Vm<'_>, base: *mut u64, pc: u32) -> u32;

/// When the interpreter next asks the [`TierUp`] hook about a function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Countdown {
    /// After this many more calls plus back-edges (the event after them asks).
    After(u32),
    /// At the function's very next call or back-edge.
    Next,
    /// Never again.
    Never,
}

impl Countdown {
    /// The counter value the interpreter decrements: it asks once the
    /// counter is below zero.
    fn counter(self) -> i32 {
        match self {
            Countdown::After(n) => n.min(i32::MAX as u32) as i32,
            Countdown::Next => 0,
            Countdown::Never => i32::MAX,
        }
    }
}

/// What to do at a call whose countdown ran out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallDecision {
    /// Call the function's entry, which the hook has just replaced (with
    /// the unsafe [`Vm::set_entry`]); the function is never asked about
    /// again.
    Enter,
    /// Interpret this call; ask again after the countdown.
    Interpret(Countdown),
}

/// What to do at a back-edge whose countdown ran out.
#[derive(Clone, Copy, Debug)]
pub enum LoopDecision {
    /// Finish this activation in the OSR entry; the function's countdown
    /// becomes the one given.
    Enter(OsrFn, Countdown),
    /// Keep interpreting; ask again after the countdown.
    Interpret(Countdown),
}

// ANCHOR: tier_up_trait
/// A JIT, as the interpreter sees it.
///
/// # Safety
/// An OSR entry returned by [`TierUp::hot_loop`] must continue the active
/// interpreted frame of `func` at `pc` as [`OsrFn`] describes (the
/// interpreter calls it at once, with that `pc`).
pub unsafe trait TierUp {
    /// The countdown every function starts with.
    fn initial_countdown(&self) -> Countdown;

    /// Called once, after every countdown is set and before `<main>` runs:
    /// compile eagerly, install entries (e.g. perf trampolines), report
    /// start-up problems on [`Vm::diagnostics`].
    fn start(&mut self, vm: &mut Vm<'_>);

    /// `func`'s countdown ran out at a call. To enter compiled code, the JIT
    /// installs the new entry in the entry table first.
    fn hot_call(&mut self, vm: &mut Vm<'_>, func: u32) -> CallDecision;

    /// `func`'s countdown ran out at a back-edge to instruction `pc`: an
    /// OSR entry for that loop header, or keep interpreting.
    fn hot_loop(&mut self, vm: &mut Vm<'_>, func: u32, pc: u32) -> LoopDecision;

    /// Called once after the run (and after the driver reported any runtime
    /// error): complete profiler output, report what failed.
    fn finish(&mut self, vm: &mut Vm<'_>) {
        let _ = vm;
    }
}
// ANCHOR_END: tier_up_trait

impl Vm<'_> {
    /// Sets when the interpreter next asks the hook about `func` (a JIT
    /// uses it for functions other than the one it was asked about, e.g.
    /// callees compiled in the same batch). False if there is no such
    /// function.
    pub fn set_countdown(&mut self, func: u32, countdown: Countdown) -> bool {
        match self.funcs.get_mut(func as usize) {
            Some(rt) => {
                rt.hotness = countdown.counter();
                true
            }
            None => false,
        }
    }

    /// True if the interpreter counted a call or back-edge of `func` since
    /// its countdown was set to `start` (and nothing set it since).
    pub fn has_run_since(&self, func: u32, start: Countdown) -> bool {
        self.runs_since(func, start) > 0
    }

    /// For each function, true if it has an activation now: a frame on the
    /// VM's stack, interpreted or compiled, an OSR frame or a frame a
    /// compiled caller inlined with a record of its own. A tier may free
    /// a function's code only while it has none (and nothing else can
    /// enter that code).
    pub fn active_functions(&self) -> Vec<bool> {
        let mut active = vec![false; self.funcs.len()];
        for i in 1..=self.depth {
            // SAFETY: `frames[1..=depth]` are the active frame records.
            let func = unsafe { (*self.frames.add(i)).func };
            if let Some(a) = active.get_mut(func as usize) {
                *a = true;
            }
        }
        active
    }

    /// How many calls plus back-edges of `func` the interpreter counted
    /// since its countdown was set to `start` (and nothing set it since).
    pub fn runs_since(&self, func: u32, start: Countdown) -> u32 {
        self.funcs.get(func as usize).map_or(0, |rt| {
            (start.counter() as i64 - rt.hotness as i64).clamp(0, u32::MAX as i64) as u32
        })
    }
}

/// Runs `<main>` (see [`super::run_main`]) with `hook` as the tier: sets
/// every countdown to the hook's initial one, calls [`TierUp::start`],
/// runs, and uninstalls the hook, so it is borrowed exactly as long as the
/// interpreter can call it. Uninstalling also points every entry back at
/// [`super::interp_entry`]: the entries the hook installed need to stay
/// valid only while it is borrowed, so a JIT may free its code when
/// dropped.
pub(super) fn run_with_hook(vm: &mut Vm<'_>, hook: &mut (dyn TierUp + 'static)) -> u32 {
    let initial = hook.initial_countdown();
    for func in 0..vm.funcs.len() as u32 {
        vm.set_countdown(func, initial);
    }
    hook.start(vm);
    /// Uninstalls the hook and its entries even if the run unwinds.
    struct Installed<'a, 'm>(&'a mut Vm<'m>);
    impl Drop for Installed<'_, '_> {
        fn drop(&mut self) {
            self.0.tier_up = None;
            for func in 0..self.0.funcs.len() as u32 {
                // SAFETY: the interpreter's own entry follows the entry ABI
                // for every function.
                unsafe { self.0.set_entry(func, super::interp_entry) };
            }
        }
    }
    vm.tier_up = Some(NonNull::from(hook));
    let installed = Installed(vm);
    super::enter_main(installed.0)
}

/// Applies `countdown` to `func` through the raw VM pointer.
///
/// # Safety
/// `vm` is valid and not borrowed; `func` is a function index.
unsafe fn set_countdown(vm: *mut Vm<'_>, func: u32, countdown: Countdown) {
    // SAFETY: the caller's contract.
    unsafe { (&mut (*vm).funcs)[func as usize].hotness = countdown.counter() };
}

/// The interpreter's cold path for a call whose counter ran out.
///
/// # Safety
/// `vm` is valid and not borrowed; `func` is a function index.
#[cold]
#[inline(never)]
pub(crate) unsafe fn hot_call(vm: *mut Vm<'_>, func: u32) -> Option<EntryFn> {
    // SAFETY: the hook object lives outside the VM and is installed only
    // while `run_main` borrows it, so the two mutable borrows do not alias;
    // nothing else borrows the VM.
    let decision = unsafe {
        match (*vm).tier_up {
            Some(hook) => (*hook.as_ptr()).hot_call(&mut *vm, func),
            None => CallDecision::Interpret(Countdown::Never),
        }
    };
    // SAFETY: the caller's contract; the hook's borrow has ended.
    unsafe {
        match decision {
            CallDecision::Enter => {
                set_countdown(vm, func, Countdown::Never);
                (*vm).entry(func)
            }
            CallDecision::Interpret(countdown) => {
                set_countdown(vm, func, countdown);
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
pub(crate) unsafe fn hot_loop(vm: *mut Vm<'_>, func: u32, pc: u32) -> Option<super::tier::OsrFn> {
    // SAFETY: as in `hot_call`.
    let decision = unsafe {
        match (*vm).tier_up {
            Some(hook) => (*hook.as_ptr()).hot_loop(&mut *vm, func, pc),
            None => LoopDecision::Interpret(Countdown::Never),
        }
    };
    let (countdown, osr) = match decision {
        LoopDecision::Enter(osr, countdown) => (countdown, Some(osr)),
        LoopDecision::Interpret(countdown) => (countdown, None),
    };
    // SAFETY: as in `hot_call`.
    unsafe { set_countdown(vm, func, countdown) };
    osr
}
