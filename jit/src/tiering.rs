//! The tiering policy: [`Jit`], the interpreter's [`TierUp`] hook. It keeps
//! one state per function, decides what to compile when a countdown runs
//! out, and answers with a decision (see `vm::runtime::tier`). The compile
//! work itself is the [`Compiler`]'s, which runs on this thread or on the
//! compiler thread (`background`).
//!
//! * **Thresholds.** By default each function's threshold follows from its
//!   estimated compile cost ([`crate::cost`]); an explicit
//!   `--jit-threshold N` is taken literally.
//! * **At a call** the function is compiled with the warm callees it
//!   reaches that are still interpreted, callees first ([`callgraph`]), in
//!   one batch; its entry shim is installed and the call enters it.
//! * **Lazy entry shims.** The other functions of a batch get only their
//!   native function (most are only ever called from compiled code,
//!   directly, and a shim costs about a third of a small function's
//!   compile); their countdown is set to ask at their next call through
//!   the entry table, which builds the shim.
//! * **At a back-edge** one compile: the function's OSR variant, which
//!   enters at any of its loop headers (with the warm callees as native
//!   functions). The function is compiled whole only if it keeps being
//!   called afterwards, long enough that the interpreted start of each call
//!   costs more than the compile ([`Jit::whole_after`]).
//! * **Threshold 0** compiles every function at start, callees first.
//! * **Trampolines**: with a profiler sink, every function still
//!   interpreted gets its interpreter-entry trampoline at start.
//! * **Background** (the default tiering): requests go to the compiler
//!   thread and the interpreter keeps interpreting; the function is asked
//!   about again every [`POLL`] events, and every ask first installs
//!   whatever the thread finished (entries into the entry table, OSR
//!   variants into the cache). Compiled code thus starts at the next call
//!   through the entry table or at the next ask at a back-edge.

use std::collections::{HashMap, HashSet};

use perfsupport::{JitDump, PerfMap, Profilers};
use vm::abi::{OsrFn, Vm};
use vm::runtime::tier::{CallDecision, Countdown, LoopDecision, TierUp};

use crate::background::Background;
pub use crate::compiler::FnState;
use crate::compiler::{Action, Compiler, Program, Request};
use crate::disasm::Listing;
use crate::pipeline::CodeGen;
use crate::{JitOptions, NO_UNWIND_ENV, callgraph, cost, limits, perf_env};

/// A callee joins its caller's batch once it ran this fraction (1/N) of
/// its own threshold (see [`Jit::hot_batch`]).
const CALLEE_WARM_SHARE: u32 = 8;

/// Events after which a function with an OSR variant but no native
/// function is asked about again: soon, so that a later activation enters
/// the variant early in its loop.
const OSR_REASK: u32 = 50;

/// Asks after which a function with an OSR variant is compiled whole with
/// an explicit `--jit-threshold` (the cost model decides otherwise, see
/// [`Jit::whole_after`]): it is being called again and again, not running
/// one long loop ([`Jit::osr_reask`]).
const WHOLE_AFTER_ASKS: u32 = 16;

/// Events after which a function whose code is being compiled in the
/// background is asked about again (each ask installs what is ready).
pub const POLL: u32 = 256;

impl FnState {
    /// When the interpreter asks about a function in this state next
    /// (`initial`: the function's own threshold).
    fn countdown(self, initial: Countdown) -> Countdown {
        match self {
            FnState::Interpreted => initial,
            FnState::Native(_) => Countdown::Next,
            FnState::Entered(_) | FnState::Refused => Countdown::Never,
        }
    }
}

/// Where compiles run.
enum Mode {
    /// On the interpreter's thread, when asked (`Option`: taken while the
    /// compiler thread starts).
    Inline(Option<Box<Compiler>>),
    /// On the compiler thread.
    Background(Background),
    /// The compiler thread stopped ([`TierUp::finish`]).
    Stopped,
}

/// The Cranelift tier (see the module docs).
pub struct Jit {
    options: JitOptions,
    mode: Mode,
    /// Every function's state, as far as this thread has applied it.
    functions: Vec<FnState>,
    /// OSR variants by function (one enters at every loop header);
    /// `None`: cannot compile.
    osr: HashMap<u32, Option<OsrFn>>,
    /// Each function's threshold (see [`crate::cost`]), set at start.
    thresholds: Vec<u32>,
    /// Per function: times the interpreter asked about it while it had an
    /// OSR variant but no native function (see [`Jit::osr_reask`]).
    osr_asks: Vec<u32>,
    /// Background: functions with a request on its way.
    pending: Vec<bool>,
    /// Background: functions whose OSR variant is on its way.
    pending_osr: HashSet<u32>,
    /// Problems met in [`Jit::new`], reported by [`TierUp::start`].
    startup_warnings: Vec<String>,
    /// [`TierUp::finish`] ran.
    finished: bool,
    /// The compiler moves to its thread at the next request.
    go_background: bool,
}

impl Jit {
    /// Creates the JIT and opens the profiler outputs (before any code
    /// exists, as jitdump requires). A profiler file that cannot be opened
    /// is skipped, and reported in one line when the JIT starts.
    ///
    /// # Errors
    /// A message if the host ISA or the code memory is unavailable, or if
    /// cranelift-jit would write a perf map of its own
    /// ([`crate::PERF_BUILDID_DIR`]).
    pub fn new(options: JitOptions) -> Result<Jit, String> {
        perf_env::check_no_cranelift_perf_map()?;
        let mut profilers = Profilers::new();
        let mut startup_warnings = Vec::new();
        if let Some(dir) = &options.jitdump_dir {
            match JitDump::create_in(dir) {
                Ok(dump) if std::env::var_os(NO_UNWIND_ENV).is_some() => {
                    profilers.add(Box::new(dump.without_unwinding_records()))
                }
                Ok(dump) => profilers.add(Box::new(dump)),
                Err(e) => startup_warnings.push(format!(
                    "toyvm: warning: cannot write the jitdump in {}: {e}",
                    dir.display()
                )),
            }
        }
        if options.perf_map {
            let map = PerfMap::new();
            match map.open() {
                Ok(()) => profilers.add(Box::new(map)),
                Err(e) => {
                    startup_warnings.push(format!("toyvm: warning: cannot write the perf map: {e}"))
                }
            }
        }
        if options.gdb {
            profilers.add(Box::new(perfsupport::GdbJit::new()));
        }
        let compiler = Compiler::new(CodeGen::new()?, profilers, 0, options.stats);
        Ok(Jit {
            mode: Mode::Inline(Some(Box::new(compiler))),
            functions: Vec::new(),
            osr: HashMap::new(),
            thresholds: Vec::new(),
            osr_asks: Vec::new(),
            pending: Vec::new(),
            pending_osr: HashSet::new(),
            startup_warnings,
            finished: false,
            go_background: false,
            options,
        })
    }

    /// `disasm --jit`: compiles every function of `vm`'s module with its
    /// entry shim, callees first, and returns the listings of the regions
    /// that compiled.
    pub(crate) fn compile_all_for_listing(&mut self, vm: &mut Vm<'_>) -> Vec<Listing> {
        self.set_up(vm);
        if let Some(compiler) = self.inline_compiler() {
            compiler.keep_listings();
        }
        let order = callgraph::callee_first_order(vm.module());
        self.run(
            vm,
            Request::Compile {
                funcs: order.clone(),
                entered: order,
            },
        );
        (self.inline_compiler())
            .and_then(|c| c.listings.take())
            .unwrap_or_default()
    }

    /// The compiler, when it runs on this thread.
    fn inline_compiler(&mut self) -> Option<&mut Compiler> {
        match &mut self.mode {
            Mode::Inline(Some(compiler)) => Some(compiler),
            _ => None,
        }
    }

    /// The compiled functions without an entry shim that a function
    /// without native code calls.
    fn called_from_interpreted(&self, vm: &Vm<'_>) -> Vec<u32> {
        let functions = &vm.module().functions;
        let mut wanted = vec![false; functions.len()];
        for (caller, f) in functions.iter().enumerate() {
            if self.functions[caller].native().is_some() {
                continue;
            }
            for op in &f.code {
                if let vm::bytecode::Op::Call { func, .. } = *op {
                    wanted[func as usize] |= matches!(self.state(func as u32), FnState::Native(_));
                }
            }
        }
        (0..wanted.len() as u32)
            .filter(|&f| wanted[f as usize])
            .collect()
    }

    fn state(&self, func: u32) -> FnState {
        self.functions[func as usize]
    }

    /// True if requests go (or will go) to the compiler thread.
    fn background(&self) -> bool {
        self.go_background || matches!(self.mode, Mode::Background(_))
    }

    /// Runs `request`: now, on this thread (and applies what came of it),
    /// or queued for the compiler thread (the functions it names are then
    /// pending until their states come back).
    fn run(&mut self, vm: &mut Vm<'_>, request: Request) {
        if std::mem::take(&mut self.go_background)
            && let Mode::Inline(compiler) = &mut self.mode
            && let Some(compiler) = compiler.take()
        {
            self.mode = match Background::start(*compiler, Program::of(vm)) {
                Ok(background) => Mode::Background(background),
                Err(e) => {
                    warn(vm, format_args!("toyvm: warning: JIT: {e}"));
                    Mode::Stopped
                }
            };
        }
        match &mut self.mode {
            Mode::Inline(Some(compiler)) => {
                let mut out = Vec::new();
                compiler.run(&*vm, &request, &mut out);
                self.apply(vm, out);
            }
            Mode::Background(background) => {
                let named: Vec<u32> = match &request {
                    Request::Compile { funcs, entered } => {
                        funcs.iter().chain(entered).copied().collect()
                    }
                    Request::Osr { callees, func } => {
                        self.pending_osr.insert(*func);
                        callees.iter().chain([func]).copied().collect()
                    }
                };
                if background.send(request) {
                    for f in named {
                        self.pending[f as usize] = true;
                    }
                }
            }
            Mode::Inline(None) | Mode::Stopped => {}
        }
    }

    /// Applies what the compiler did: states and countdowns, entries, OSR
    /// variants, diagnostics.
    fn apply(&mut self, vm: &mut Vm<'_>, actions: Vec<Action>) {
        for action in actions {
            match action {
                Action::State(f, state) => {
                    self.functions[f as usize] = state;
                    self.pending[f as usize] = false;
                    vm.set_countdown(f, state.countdown(self.initial(f)));
                }
                // SAFETY: the compiler built `entry` for `f` with the entry
                // ABI (an entry shim or trampoline, `pipeline::install`),
                // finalized it and reported it to the profilers before
                // handing it over; the code lives as long as the compiler,
                // which outlives the run (see `Action`).
                Action::Entry(f, entry) => unsafe {
                    vm.set_entry(f, entry);
                },
                Action::Osr(f, osr) => {
                    self.pending_osr.remove(&f);
                    self.osr.insert(f, osr);
                    if osr.is_some() {
                        self.osr_asks[f as usize] = self.osr_asks[f as usize].max(1);
                    }
                }
                Action::Warn(line) => warn(vm, format_args!("{line}")),
            }
        }
    }

    /// Installs what the compiler thread finished since the last ask.
    fn drain(&mut self, vm: &mut Vm<'_>) {
        if let Mode::Background(background) = &self.mode {
            let actions = background.drain();
            self.apply(vm, actions);
        }
    }

    /// The batch for a hot `func`: it and the callees it reaches that are
    /// still interpreted and warm (ran at least [`CALLEE_WARM_SHARE`] of
    /// their own threshold), callees first. A callee that ran a handful of
    /// times stays out: compiled code calls it through the entry table,
    /// and it tiers up by itself if it gets hot (a `<main>` calling 5,000
    /// functions once each compiles none of them).
    fn hot_batch(&self, vm: &Vm<'_>, func: u32) -> Vec<u32> {
        callgraph::with_callees(vm.module(), func, |c| {
            let warm = (self.thresholds[c as usize] / CALLEE_WARM_SHARE).max(1);
            self.state(c) == FnState::Interpreted
                && !self.pending[c as usize]
                && vm.runs_since(c, self.initial(c)) >= warm
        })
    }

    /// The countdown `func` starts with: its threshold.
    fn initial(&self, func: u32) -> Countdown {
        match self.options.threshold {
            None => Countdown::Never,
            Some(_) => Countdown::After(self.thresholds[func as usize]),
        }
    }

    /// Per-function state and thresholds for `vm`'s module, and every
    /// function's countdown set to its threshold.
    fn set_up(&mut self, vm: &mut Vm<'_>) {
        let module = vm.module();
        let n = module.functions.len();
        self.functions = vec![FnState::Interpreted; n];
        self.osr_asks = vec![0; n];
        self.pending = vec![false; n];
        if let Some(compiler) = self.inline_compiler() {
            compiler.reset(n);
        }
        let base = self.options.threshold.unwrap_or(0);
        self.thresholds = (0..n as u32)
            .map(|f| match self.options.cost_model {
                true => cost::threshold(module, f, base),
                false => base,
            })
            .collect();
        for f in 0..n as u32 {
            vm.set_countdown(f, self.initial(f));
        }
    }

    /// The interpreter asked again about `func`, which has an OSR variant
    /// but no native function. A function whose loop got hot in one long
    /// activation is done with OSR; one called again and again reaches
    /// here at each call: after [`Jit::whole_after`] asks it is compiled
    /// whole (with its warm callees, as at a call, and its shim if
    /// `entered`). True if the compile was asked for.
    fn osr_reask(&mut self, vm: &mut Vm<'_>, func: u32, entered: bool) -> bool {
        let asks = &mut self.osr_asks[func as usize];
        *asks += 1;
        if *asks < self.whole_after(vm, func) || self.pending[func as usize] {
            return false;
        }
        let funcs = self.hot_batch(vm, func);
        let entered = if entered { vec![func] } else { Vec::new() };
        self.run(vm, Request::Compile { funcs, entered });
        true
    }

    /// Asks after which `func`, which has an OSR variant, is compiled
    /// whole: each ask is an activation that started interpreted and ran
    /// about [`OSR_REASK`] events before it entered the variant, so the
    /// whole compile pays after [`cost::whole_after_asks`] of them (with the
    /// cost model), or after [`WHOLE_AFTER_ASKS`] (an explicit threshold).
    fn whole_after(&self, vm: &Vm<'_>, func: u32) -> u32 {
        match self.options.cost_model {
            true => cost::whole_after_asks(vm.module(), func, OSR_REASK),
            false => WHOLE_AFTER_ASKS,
        }
    }

    /// True if `func` has an OSR variant that compiled (counted as its
    /// first ask when it arrived).
    fn has_osr(&self, func: u32) -> bool {
        self.osr_asks[func as usize] > 0
    }

    /// True if `func` is too large to compile (see [`crate::limits`]): it
    /// is then refused, never asked about again; `--jit-stats` says so.
    /// Decided here, on the interpreter's thread, before any request, so
    /// the answer and the message do not depend on the compiler thread's
    /// timing (the compiler checks the callees of a batch itself).
    fn over_budget(&mut self, vm: &mut Vm<'_>, func: u32) -> bool {
        if self.state(func) == FnState::Refused {
            return true;
        }
        let ops = limits::compiled_ops(vm.module(), func);
        let budget = limits::max_compiled_ops();
        if ops <= budget {
            return false;
        }
        self.apply(vm, vec![Action::State(func, FnState::Refused)]);
        if let Some(compiler) = self.inline_compiler() {
            compiler.refuse(func);
        }
        if self.options.stats {
            let name = &vm.module().functions[func as usize].name;
            warn(
                vm,
                format_args!(
                    "jit-stats: {name}: not compiled: {ops} instructions, over the budget of {budget}"
                ),
            );
        }
        true
    }

    /// The countdown of a function that waits for the compiler thread, or
    /// `None` when compiles run on this thread.
    fn poll(&self) -> Option<Countdown> {
        self.background().then_some(Countdown::After(POLL))
    }
}

/// Writes one diagnostic line to the VM's diagnostics (the driver's stderr).
fn warn(vm: &mut Vm<'_>, line: std::fmt::Arguments<'_>) {
    let _ = writeln!(vm.diagnostics(), "{line}");
}

// SAFETY: every OSR entry `hot_loop` returns was built by `translate` for
// that function and loop header (`Role::Osr`), with the `OsrFn` signature
// (`pipeline::CodeGen::install`), and finalized before it was handed over.
unsafe impl TierUp for Jit {
    fn initial_countdown(&self) -> Countdown {
        self.options
            .threshold
            .map_or(Countdown::Never, Countdown::After)
    }

    fn start(&mut self, vm: &mut Vm<'_>) {
        for warning in std::mem::take(&mut self.startup_warnings) {
            warn(vm, format_args!("{warning}"));
        }
        self.set_up(vm);
        if self.options.threshold == Some(0) {
            let order = callgraph::callee_first_order(vm.module());
            // `<main>` is always entered through the entry table.
            self.run(
                vm,
                Request::Compile {
                    funcs: order,
                    entered: vec![vm.module().main],
                },
            );
            // Functions left to the interpreter (over the budget) call
            // through the entry table: their callees get their shims now,
            // in one batch, not in one batch per callee at its first call
            // (5,000 batches for a big interpreted `<main>`: 5,000 objects
            // for gdb, a page of code memory each).
            let entered = self.called_from_interpreted(vm);
            self.run(
                vm,
                Request::Compile {
                    funcs: Vec::new(),
                    entered,
                },
            );
        }
        if let Mode::Inline(Some(compiler)) = &mut self.mode
            && !compiler.no_profilers()
        {
            let mut out = Vec::new();
            compiler.trampolines(&*vm, &mut out);
            self.apply(vm, out);
        }
        // The compiler moves to its thread at the first request (a run
        // that compiles nothing pays for no thread and no program copy).
        self.go_background =
            self.options.background && self.options.threshold.is_some_and(|t| t > 0);
    }

    fn hot_call(&mut self, vm: &mut Vm<'_>, func: u32) -> CallDecision {
        if self.options.threshold.is_none() {
            return CallDecision::Interpret(Countdown::Never);
        }
        self.drain(vm);
        if self.pending[func as usize] {
            return CallDecision::Interpret(Countdown::After(POLL));
        }
        if self.over_budget(vm, func) {
            return CallDecision::Interpret(Countdown::Never);
        }
        match self.state(func) {
            FnState::Refused => return CallDecision::Interpret(Countdown::Never),
            // Compiled earlier in a batch of callees: only the shim is new.
            FnState::Native(_) => self.run(
                vm,
                Request::Compile {
                    funcs: Vec::new(),
                    entered: vec![func],
                },
            ),
            // Its loop tiered up through OSR: this call's loop will enter
            // the variant; compiled whole only if it keeps being called.
            FnState::Interpreted if self.has_osr(func) => {
                if !self.osr_reask(vm, func, true) {
                    return CallDecision::Interpret(Countdown::After(OSR_REASK));
                }
            }
            FnState::Interpreted => {
                let funcs = self.hot_batch(vm, func);
                self.run(
                    vm,
                    Request::Compile {
                        funcs,
                        entered: vec![func],
                    },
                );
            }
            FnState::Entered(_) => {}
        }
        match (self.state(func), self.poll()) {
            (FnState::Entered(_), _) => CallDecision::Enter,
            (FnState::Refused, _) => CallDecision::Interpret(Countdown::Never),
            (_, Some(poll)) if self.pending[func as usize] => CallDecision::Interpret(poll),
            _ => CallDecision::Interpret(Countdown::Never),
        }
    }

    // ANCHOR: hot_loop
    fn hot_loop(&mut self, vm: &mut Vm<'_>, func: u32, _header: u32) -> LoopDecision {
        if self.options.threshold.is_none() {
            return LoopDecision::Interpret(Countdown::Never);
        }
        self.drain(vm);
        if self.pending_osr.contains(&func) || self.pending[func as usize] {
            return LoopDecision::Interpret(Countdown::After(POLL));
        }
        // One compile: the OSR variant (with the warm callees it calls, as
        // native functions). The function is compiled whole only if it
        // keeps being called (`osr_reask`), not on the chance that it will.
        if self.over_budget(vm, func) {
            return LoopDecision::Interpret(Countdown::Never);
        }
        let cached = self.osr.contains_key(&func);
        match self.state(func) {
            FnState::Interpreted if cached => {
                if self.has_osr(func) {
                    self.osr_reask(vm, func, false);
                }
            }
            FnState::Refused => {}
            _ if cached => {}
            // Not compiled yet, or compiled but this interpreted activation
            // started before: its variant.
            state => {
                let mut callees = Vec::new();
                if state == FnState::Interpreted {
                    callees = self.hot_batch(vm, func);
                    callees.retain(|&f| f != func);
                }
                self.run(vm, Request::Osr { callees, func });
            }
        }
        if let Some(poll) = self.poll()
            && (self.pending_osr.contains(&func) || self.pending[func as usize])
        {
            return LoopDecision::Interpret(poll);
        }
        let osr = self.osr.get(&func).copied().flatten();
        match (osr, self.state(func)) {
            // Later activations start interpreted and enter the variant
            // at this back-edge, soon.
            (Some(osr), FnState::Interpreted) => {
                LoopDecision::Enter(osr, Countdown::After(OSR_REASK))
            }
            // This activation leaves the interpreter: the shim can wait for
            // the first entry-table call; another interpreted activation's
            // back-edge lands here and gets the OSR variant.
            (Some(osr), FnState::Native(_)) => LoopDecision::Enter(osr, Countdown::Next),
            (Some(osr), _) => LoopDecision::Enter(osr, Countdown::Never),
            // Keep interpreting this activation, but never ask again.
            (None, FnState::Native(_)) => {
                self.run(
                    vm,
                    Request::Compile {
                        funcs: Vec::new(),
                        entered: vec![func],
                    },
                );
                match self.poll() {
                    Some(poll) => LoopDecision::Interpret(poll),
                    None => LoopDecision::Interpret(Countdown::Never),
                }
            }
            // No variant (over the budget, or it failed): a call may still
            // compile the function whole.
            (None, FnState::Interpreted) => LoopDecision::Interpret(self.initial(func)),
            (None, _) => LoopDecision::Interpret(Countdown::Never),
        }
    }
    // ANCHOR_END: hot_loop

    fn finish(&mut self, vm: &mut Vm<'_>) {
        self.finished = true;
        let compiler = match std::mem::replace(&mut self.mode, Mode::Stopped) {
            Mode::Inline(compiler) => compiler.map(|c| *c),
            Mode::Background(mut background) => background.stop().map(|(compiler, actions)| {
                // Only the diagnostics: the run is over.
                for action in actions {
                    if let Action::Warn(line) = action {
                        warn(vm, format_args!("{line}"));
                    }
                }
                compiler
            }),
            Mode::Stopped => None,
        };
        if let Some(mut compiler) = compiler {
            for failure in compiler.finish_profilers() {
                warn(vm, format_args!("toyvm: warning: {failure}"));
            }
        }
    }
}

impl Drop for Jit {
    /// Completes the profiler outputs if [`TierUp::finish`] never ran (no
    /// VM to report failures on then); the fields then drop in order, the
    /// code memory last (see [`crate::pipeline`]).
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        match std::mem::replace(&mut self.mode, Mode::Stopped) {
            Mode::Inline(Some(mut compiler)) => {
                let _ = compiler.finish_profilers();
            }
            Mode::Background(mut background) => {
                if let Some((mut compiler, _)) = background.stop() {
                    let _ = compiler.finish_profilers();
                }
            }
            Mode::Inline(None) | Mode::Stopped => {}
        }
    }
}

/// A [`TierUp`] that never compiles: used when the JIT cannot start, and
/// says why when the run starts.
pub struct Disabled {
    /// Why the JIT could not start.
    pub why: String,
}

// SAFETY: returns no OSR entry.
unsafe impl TierUp for Disabled {
    fn initial_countdown(&self) -> Countdown {
        Countdown::Never
    }
    fn start(&mut self, vm: &mut Vm<'_>) {
        warn(
            vm,
            format_args!("toyvm: warning: JIT disabled: {}", self.why),
        );
    }
    fn hot_call(&mut self, _vm: &mut Vm<'_>, _func: u32) -> CallDecision {
        CallDecision::Interpret(Countdown::Never)
    }
    fn hot_loop(&mut self, _vm: &mut Vm<'_>, _func: u32, _pc: u32) -> LoopDecision {
        LoopDecision::Interpret(Countdown::Never)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cranelift_module::FuncId;

    const PROGRAM: &str = "fn f1(x: int) -> int { let y = 0; for i in 0..x { y = y + i; } return y; }\n\
        fn f2(x: int) -> int { let y = 1; for i in 0..x { y = y * 2; } return y; }\n\
        fn f3(x: int) -> int { let y = 2; for i in 0..x { y = y - i; } return y; }\n\
        print(f1(3) + f2(3) + f3(3));\n";

    /// `disasm --jit`'s listings as (region name, IR, code size), with the
    /// compile of region `fail` failing.
    fn listings(fail: Option<&str>) -> Vec<(String, String, usize)> {
        let module = vm::driver::load("t.toy", PROGRAM.as_bytes()).expect("compiles");
        let mut sink = std::io::sink();
        let mut vm = Vm::new(&module, Vec::new(), 1, &mut sink).expect("vm");
        let mut diagnostics = Vec::new();
        vm.set_diagnostics(&mut diagnostics);
        let mut jit = Jit::new(JitOptions::default()).expect("JIT starts");
        jit.inline_compiler()
            .expect("inline")
            .fail_region(fail.map(String::from));
        let listings = jit.compile_all_for_listing(&mut vm);
        drop(vm);
        let warned = String::from_utf8_lossy(&diagnostics);
        assert_eq!(
            warned.contains("injected failure"),
            fail.is_some(),
            "{warned}"
        );
        // The IR without its first line, which names the region by its
        // `FuncId`, and with the `FuncId`s of called functions (`u0:N`)
        // blanked: ids are numbered in declaration order, so they shift
        // when a compile fails.
        let body = |ir: &str| {
            let body = ir.split_once('\n').map_or("", |(_, b)| b);
            let mut out = String::with_capacity(body.len());
            let mut rest = body;
            while let Some(at) = rest.find("u0:") {
                out.push_str(&rest[..at + 3]);
                out.push('_');
                rest = rest[at + 3..].trim_start_matches(|c: char| c.is_ascii_digit());
            }
            out.push_str(rest);
            out
        };
        (listings.into_iter())
            .map(|l| (l.name, body(&l.ir), l.code.len()))
            .collect()
    }

    #[test]
    fn listings_pair_with_their_own_regions_after_a_failed_compile() {
        let all = listings(None);
        let failed = "toy:jit:f2:t.toy:2";
        assert!(all.iter().any(|(name, _, _)| name == failed), "{all:?}");
        let with_failure = listings(Some(failed));
        // The failed function has neither its native function nor its shim.
        let expected: Vec<_> = (all.iter())
            .filter(|(name, _, _)| !name.contains(":f2:"))
            .cloned()
            .collect();
        assert_eq!(with_failure.len(), expected.len());
        for (got, want) in with_failure.iter().zip(&expected) {
            assert_eq!(got.0, want.0);
            // `<main>` calls f2: through the entry table once f2 failed,
            // so its own code differs. Every other region is unchanged.
            if got.0.contains(":<main>:") {
                continue;
            }
            assert_eq!(got.1, want.1, "IR of {}", got.0);
            assert_eq!(got.2, want.2, "code of {}", got.0);
        }
    }

    #[test]
    fn states_decide_the_countdown() {
        let initial = Countdown::After(7);
        let id = FuncId::from_u32(0);
        assert_eq!(FnState::Interpreted.countdown(initial), initial);
        assert_eq!(FnState::Native(id).countdown(initial), Countdown::Next);
        assert_eq!(FnState::Entered(id).countdown(initial), Countdown::Never);
        assert_eq!(FnState::Refused.countdown(initial), Countdown::Never);
    }
}
