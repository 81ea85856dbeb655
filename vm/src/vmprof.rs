//! VMProf-style sampling of the Toy call stack (`toyvm run --vmprof FILE`).
//!
//! The sampler (in `perfsupport::vmprof`) copies a per-thread *shadow
//! stack* of code ids on every `SIGPROF`; this module keeps that stack
//! equal to the Toy call stack while a [`Session`] runs:
//!
//! * every function is registered once as a vmprof code object named
//!   `toy:<function>:<line>:<path>` (the script body is `<main>`);
//! * the interpreter is wrapped, not changed: [`Session::start`] installs
//!   `profiled_interp_entry` in [`Vm::entry_table`], which pushes the
//!   function's id (kept in its `FnRuntime`), calls `interp_entry` and
//!   pops. Unprofiled runs never install it, so their calls pay nothing,
//!   not even a branch;
//! * code a JIT installs over a wrapper (compiled functions, perf
//!   trampolines) pushes and pops inline in its own prologue and epilogue;
//!   it asks [`Vm::vmprof_code_id`] for the id to emit when it generates the
//!   code (`None` means "not profiling: emit nothing"). OSR code continues
//!   an interpreted frame that is already on the shadow stack and pushes
//!   nothing;
//! * when the interpreter hands a call over to code compiled at that very
//!   call (`hand_over`, a cold path), it pops the id its caller pushed
//!   for the duration of the compiled call, which pushes its own.
//!
//! So every active Toy frame has exactly one shadow-stack entry, whichever
//! tier runs it, and every sample is rooted at `<main>`.

use std::path::PathBuf;
use std::time::Duration;

use perfsupport::vmprof::{
    self, CodeId, CodeIdCell, EnableOptions, ProfileSummary, ShadowStack, VmprofError,
};

use crate::interp::profiled_interp_entry;
use crate::runtime::Vm;

/// The code-object class of Toy functions: names start with `toy:`.
pub const CODE_CLASS: &str = "toy";

/// The interpreter name written in profile headers; `toyvm report` only
/// accepts profiles that carry it.
pub const INTERP_NAME: &str = "toyvm";

/// How to profile a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VmprofOptions {
    /// The profile file to create (replaced if it exists).
    pub path: PathBuf,
    /// CPU time between samples.
    pub interval: Duration,
}

impl VmprofOptions {
    /// Profiling into `path` every [`vmprof::DEFAULT_INTERVAL`] (1 ms).
    pub fn new(path: impl Into<PathBuf>) -> VmprofOptions {
        VmprofOptions {
            path: path.into(),
            interval: vmprof::DEFAULT_INTERVAL,
        }
    }
}

/// A running profile of one VM. Dropping it without [`Session::finish`]
/// (a panic, an early return) still stops the sampler and completes the
/// file.
pub struct Session {
    finished: bool,
}

impl Session {
    /// Registers every function of `vm`'s module, starts the sampler
    /// writing to `options.path`, and wraps every entry of `vm` so the
    /// interpreter keeps the shadow stack.
    ///
    /// Call it before a JIT starts (its entries replace the wrappers and
    /// keep the shadow stack themselves) and before running `<main>`, so
    /// every sample is rooted at `<main>`. On error nothing is installed and
    /// the VM runs unprofiled.
    pub fn start(vm: &mut Vm<'_>, options: &VmprofOptions) -> Result<Session, VmprofError> {
        let class = vmprof::register_code_object_class(CODE_CLASS)?;
        let module = vm.module;
        let code_ids: Box<[CodeId]> = module
            .functions
            .iter()
            .map(|f| {
                // A fresh cell per function: each VM's code objects are new
                // code objects to the profiler.
                let cell = CodeIdCell::new();
                vmprof::register_code(&cell, &class, &f.name, f.span.line, &module.path)
            })
            .collect();
        let mut enable = EnableOptions::new(INTERP_NAME);
        enable.interval = options.interval;
        enable.meta.push(("script".to_owned(), module.path.clone()));
        vmprof::enable_path(&options.path, &enable)?;
        for (rt, &id) in vm.funcs.iter_mut().zip(code_ids.iter()) {
            rt.vmprof_id = Some(id);
        }
        for func in 0..module.functions.len() as u32 {
            // SAFETY: `profiled_interp_entry` is `interp_entry` plus the
            // shadow-stack push and pop: the same entry ABI.
            unsafe { vm.set_entry(func, profiled_interp_entry) };
        }
        Ok(Session { finished: false })
    }

    /// Stops the sampler and completes the file: the remaining samples,
    /// the code names and the trailer.
    pub fn finish(mut self) -> Result<ProfileSummary, VmprofError> {
        self.finished = true;
        vmprof::disable()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if !self.finished {
            // Nothing to report to on this path; the file is completed.
            let _ = vmprof::disable();
        }
    }
}

impl Vm<'_> {
    /// The vmprof code id of function `func` while a profiling [`Session`]
    /// runs on this VM, `None` otherwise. A JIT emits the shadow-stack push
    /// of this id in the prologue of `func`'s compiled code (and the pop in
    /// its epilogue) when it is `Some`, and nothing when it is `None`.
    pub fn vmprof_code_id(&self, func: u32) -> Option<usize> {
        self.funcs.get(func as usize)?.vmprof_id.map(CodeId::get)
    }
}

/// Pushes `id` on the current thread's shadow stack.
#[inline(always)]
pub(crate) fn push(id: CodeId) {
    ShadowStack::with_current(|stack| stack.push(id));
}

/// Pops the current thread's innermost shadow-stack entry.
#[inline(always)]
pub(crate) fn pop() {
    ShadowStack::with_current(ShadowStack::pop);
}

/// Calls `entry`, code compiled for `func` at this very call, from
/// `interp_entry`. While profiling, `interp_entry` only runs under
/// `profiled_interp_entry` (directly or from a perf trampoline), which has
/// pushed `func`'s id: it is popped for the duration, as the compiled code
/// pushes its own, so the frame is on the shadow stack once.
///
/// # Safety
/// The entry ABI for `entry`, `func` and `base`.
#[cold]
#[inline(never)]
pub(crate) unsafe fn hand_over(
    vm: *mut Vm<'_>,
    func: u32,
    base: *mut u64,
    entry: crate::runtime::EntryFn,
) -> u32 {
    // SAFETY: the caller's contract; `func` indexes `funcs`.
    unsafe {
        let Some(id) = (*(*vm).funcs.as_ptr().add(func as usize)).vmprof_id else {
            return entry(vm, func, base);
        };
        pop();
        let status = entry(vm, func, base);
        push(id);
        status
    }
}
