//! The tiering policy: [`Jit`], the interpreter's [`TierUp`] hook. It keeps
//! one [`FnState`] per function, decides what to compile when a countdown
//! runs out, and answers with a decision (see `vm::runtime::tier`).
//!
//! * **At a call** the function is compiled with the callees it reaches
//!   that have run and are still interpreted, callees first
//!   ([`callgraph`]), in one batch; its entry shim is installed and the
//!   call enters it.
//! * **Lazy entry shims.** The other functions of a batch get only their
//!   native function (most are only ever called from compiled code,
//!   directly, and a shim costs about a third of a small function's
//!   compile); their countdown is set to ask at their next call through
//!   the entry table, which builds the shim.
//! * **At a back-edge** the function is compiled whole (as at a call,
//!   without the shim) and an OSR variant for the loop header is compiled
//!   and cached, or `None` if it cannot be.
//! * **Threshold 0** compiles every function at start, callees first.
//! * **Trampolines**: with a profiler sink, every function still
//!   interpreted gets its interpreter-entry trampoline at start.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use cranelift_module::{FuncId, Module as _};
use perfsupport::{JitDump, PerfMap, Profilers};
use vm::abi::{OsrFn, Vm};
use vm::runtime::tier::{CallDecision, Countdown, LoopDecision, TierUp};

use crate::disasm::Listing;
use crate::pipeline::{CodeGen, Finished};
use crate::role::Role;
use crate::translate::{self, Env};
use crate::{JitOptions, NO_UNWIND_ENV, abi, callgraph, limits, perf_env};

/// Where one function stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FnState {
    /// Interpreted (perhaps behind a trampoline); compiled when hot.
    Interpreted,
    /// Its native function exists, so compiled code calls it directly; it
    /// has no entry shim yet, so calls through the entry table still
    /// interpret it, and the first one asks for the shim.
    Native(FuncId),
    /// Native function and entry shim: every call runs compiled code.
    Entered(FuncId),
    /// Never compiled: over the budget, or its compile failed.
    Refused,
}

impl FnState {
    /// The native function, if compiled.
    pub fn native(self) -> Option<FuncId> {
        match self {
            FnState::Native(id) | FnState::Entered(id) => Some(id),
            FnState::Interpreted | FnState::Refused => None,
        }
    }

    /// When the interpreter asks about a function in this state next.
    fn countdown(self, initial: Countdown) -> Countdown {
        match self {
            FnState::Interpreted => initial,
            FnState::Native(_) => Countdown::Next,
            FnState::Entered(_) | FnState::Refused => Countdown::Never,
        }
    }
}

/// The Cranelift tier (see the module docs).
pub struct Jit {
    options: JitOptions,
    codegen: CodeGen,
    functions: Vec<FnState>,
    /// OSR variants by (function, loop header); `None`: cannot compile.
    osr: HashMap<(u32, u32), Option<OsrFn>>,
    profilers: Profilers,
    /// Problems met in [`Jit::new`], reported by [`TierUp::start`].
    startup_warnings: Vec<String>,
    /// `disasm --jit`: the listings of every finished region.
    listings: Option<Vec<Listing>>,
    /// [`TierUp::finish`] ran.
    finished: bool,
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
        Ok(Jit {
            codegen: CodeGen::new()?,
            functions: Vec::new(),
            osr: HashMap::new(),
            profilers,
            startup_warnings,
            listings: None,
            finished: false,
            options,
        })
    }

    /// `disasm --jit`: compiles every function of `vm`'s module with its
    /// entry shim, callees first, and returns the listings of the regions
    /// that compiled.
    pub(crate) fn compile_all_for_listing(&mut self, vm: &mut Vm<'_>) -> Vec<Listing> {
        self.codegen.keep_ir();
        self.listings = Some(Vec::new());
        self.functions = vec![FnState::Interpreted; vm.module().functions.len()];
        let order = callgraph::callee_first_order(vm.module());
        self.compile_functions(vm, &order, &order);
        self.listings.take().unwrap_or_default()
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

    fn set_state(&mut self, func: u32, state: FnState) {
        self.functions[func as usize] = state;
    }

    /// Defines the native function of `func` (not final yet).
    fn define_native(&mut self, vm: &Vm<'_>, func: u32) -> Result<(), String> {
        let id = self.codegen.declare(vm, func, Role::Native)?;
        // Native before translating: a recursive call is a direct call.
        self.set_state(func, FnState::Native(id));
        self.define_body(vm, func, Role::Native, id)
    }

    /// Translates and defines one function body (native or OSR variant).
    fn define_body(
        &mut self,
        vm: &Vm<'_>,
        func: u32,
        role: Role,
        id: FuncId,
    ) -> Result<(), String> {
        let functions = &self.functions;
        let natives = |f: u32| functions[f as usize].native();
        let call_conv = self.codegen.call_conv();
        let array = self.codegen.array;
        self.codegen
            .define(vm, func, role, id, |b, module, imports| {
                let env = Env {
                    module: vm.module(),
                    func,
                    consts: vm.constants(func),
                    natives: &natives,
                    imports: *imports,
                    array,
                    call_conv,
                    inlined_frames: vm.vmprof_inlined_frames(),
                    vmprof_lines: vm.vmprof_lines(),
                };
                translate::translate(b, module, &env, role);
            })
    }

    /// Defines the entry shim of `func`, whose native function exists.
    fn define_shim(&mut self, vm: &Vm<'_>, func: u32) -> Result<(), String> {
        let native = self.state(func).native().ok_or("no native function")?;
        let id = self.codegen.declare(vm, func, Role::EntryShim)?;
        let f = &vm.module().functions[func as usize];
        self.codegen
            .define(vm, func, Role::EntryShim, id, |b, module, imports| {
                let native = module.declare_func_in_func(native, b.func);
                let depth_exceeded = module.declare_func_in_func(imports.depth_exceeded, b.func);
                abi::build_entry_shim(b, f, native, depth_exceeded);
            })?;
        self.set_state(func, FnState::Entered(native));
        Ok(())
    }

    /// Defines the interpreter-entry trampoline of `func`.
    fn define_trampoline(&mut self, vm: &Vm<'_>, func: u32) -> Result<(), String> {
        let id = self.codegen.declare(vm, func, Role::Trampoline)?;
        self.codegen
            .define(vm, func, Role::Trampoline, id, |b, module, imports| {
                let interp_entry = module.declare_func_in_func(imports.interp_entry, b.func);
                abi::build_trampoline(b, interp_entry, func);
            })
    }

    /// Finishes the batch (see [`crate::pipeline`]): caches OSR variants,
    /// keeps listings; a failure is reported and compiles nothing.
    fn finish_batch(&mut self, vm: &mut Vm<'_>) {
        if !self.codegen.has_batch() {
            return;
        }
        match self.codegen.finish(vm, &self.profilers) {
            Ok(finished) => {
                for Finished {
                    func,
                    role,
                    osr,
                    listing,
                } in finished
                {
                    if let Role::Osr { pc } = role {
                        self.osr.insert((func, pc), osr);
                    }
                    if let (Some(all), Some(listing)) = (self.listings.as_mut(), listing) {
                        all.push(listing);
                    }
                }
            }
            Err(e) => warn(vm, format_args!("toyvm: warning: JIT: {e}")),
        }
    }

    /// Compiles `funcs` (their native functions) and the entry shims of
    /// `entered` in one batch (see the module docs on lazy shims), then
    /// sets the countdown of every function compiled.
    fn compile_functions(&mut self, vm: &mut Vm<'_>, funcs: &[u32], entered: &[u32]) {
        // (function, what, time): "" for a native function (with its shim
        // if built here too), " (entry shim)" for a shim alone.
        let mut done: Vec<(u32, &str, Duration)> = Vec::new();
        for &f in funcs {
            if self.state(f) != FnState::Interpreted || self.over_budget(vm, f) {
                continue;
            }
            let started = Instant::now();
            let mut defined = self.define_native(vm, f);
            if defined.is_ok() && entered.contains(&f) {
                defined = self.define_shim(vm, f);
            }
            match defined {
                Ok(()) => done.push((f, "", started.elapsed())),
                Err(e) => self.give_up(vm, f, &e),
            }
        }
        // Functions compiled earlier, without a shim.
        for &f in entered {
            if !matches!(self.state(f), FnState::Native(_)) {
                continue;
            }
            let started = Instant::now();
            match self.define_shim(vm, f) {
                Ok(()) => done.push((f, " (entry shim)", started.elapsed())),
                Err(e) => self.give_up(vm, f, &e),
            }
        }
        let started = Instant::now();
        self.finish_batch(vm);
        let finish = started.elapsed();
        let initial = self.initial_countdown();
        for &(f, _, _) in &done {
            vm.set_countdown(f, self.state(f).countdown(initial));
        }
        // Each function's time: its own IR building and code generation
        // (native and/or shim) plus its share of the batch's finalize/report.
        let share = finish / done.len().max(1) as u32;
        for (f, what, took) in done {
            self.note_time(vm, f, what, took + share);
        }
    }

    /// True if `func` is too large to compile (see [`limits`]): it is then
    /// refused, never asked about again; `--jit-stats` says so.
    fn over_budget(&mut self, vm: &mut Vm<'_>, func: u32) -> bool {
        let ops = limits::compiled_ops(vm.module(), func);
        let budget = limits::max_compiled_ops();
        if ops <= budget {
            return false;
        }
        self.set_state(func, FnState::Refused);
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

    /// Refuses `func` for good and says why.
    fn give_up(&mut self, vm: &mut Vm<'_>, func: u32, error: &str) {
        self.set_state(func, FnState::Refused);
        let name = &vm.module().functions[func as usize].name;
        warn(
            vm,
            format_args!("toyvm: warning: JIT: cannot compile {name}: {error}"),
        );
    }

    /// Compiles the OSR variant of `func` at loop header `pc` and caches it
    /// (`None` if it cannot be compiled).
    fn compile_osr(&mut self, vm: &mut Vm<'_>, func: u32, pc: u32) {
        if self.state(func) == FnState::Refused || self.over_budget(vm, func) {
            self.osr.insert((func, pc), None);
            return;
        }
        let started = Instant::now();
        let role = Role::Osr { pc };
        let defined = (self.codegen.declare(vm, func, role))
            .and_then(|id| self.define_body(vm, func, role, id));
        match defined {
            Ok(()) => self.finish_batch(vm),
            Err(e) => {
                let name = crate::names::region_name(vm.module(), func, role);
                warn(
                    vm,
                    format_args!("toyvm: warning: JIT: cannot compile {name}: {e}"),
                );
            }
        }
        // Not finished (define or finalize failed): never retried.
        self.osr.entry((func, pc)).or_insert(None);
        self.note_time(vm, func, &format!(" (OSR @{pc})"), started.elapsed());
    }

    fn note_time(&mut self, vm: &mut Vm<'_>, func: u32, what: &str, took: Duration) {
        if self.options.stats {
            let name = &vm.module().functions[func as usize].name;
            let us = took.as_micros();
            warn(vm, format_args!("jit-stats: {name}{what}: {us} us"));
        }
    }

    /// The batch for a hot `func`: it and the callees it reaches that have
    /// run and are still interpreted, callees first.
    fn hot_batch(&self, vm: &Vm<'_>, func: u32) -> Vec<u32> {
        let initial = self.initial_countdown();
        callgraph::with_callees(vm.module(), func, |c| {
            self.state(c) == FnState::Interpreted && vm.has_run_since(c, initial)
        })
    }
}

/// Writes one diagnostic line to the VM's diagnostics (the driver's stderr).
fn warn(vm: &mut Vm<'_>, line: std::fmt::Arguments<'_>) {
    let _ = writeln!(vm.diagnostics(), "{line}");
}

// SAFETY: every OSR entry `hot_loop` returns was built by `translate` for
// that function and loop header (`Role::Osr`), with the `OsrFn` signature
// (`pipeline::CodeGen::install`).
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
        let n = vm.module().functions.len();
        self.functions = vec![FnState::Interpreted; n];
        if self.options.threshold == Some(0) {
            let order = callgraph::callee_first_order(vm.module());
            // `<main>` is always entered through the entry table.
            self.compile_functions(vm, &order, &[vm.module().main]);
            // Functions left to the interpreter (over the budget) call
            // through the entry table: their callees get their shims now,
            // in one batch, not in one batch per callee at its first call
            // (5,000 batches for a big interpreted `<main>`: 5,000 objects
            // for gdb, a page of code memory each).
            let entered = self.called_from_interpreted(vm);
            self.compile_functions(vm, &[], &entered);
        }
        if !self.profilers.is_empty() {
            for f in 0..n as u32 {
                if self.state(f).native().is_none()
                    && let Err(e) = self.define_trampoline(vm, f)
                {
                    warn(vm, format_args!("toyvm: warning: JIT: trampoline: {e}"));
                }
            }
            self.finish_batch(vm);
        }
    }

    fn hot_call(&mut self, vm: &mut Vm<'_>, func: u32) -> CallDecision {
        if self.options.threshold.is_none() {
            return CallDecision::Interpret(Countdown::Never);
        }
        match self.state(func) {
            FnState::Refused => return CallDecision::Interpret(Countdown::Never),
            // Compiled earlier in a batch of callees: only the shim is new.
            FnState::Native(_) => self.compile_functions(vm, &[], &[func]),
            FnState::Interpreted => {
                let batch = self.hot_batch(vm, func);
                self.compile_functions(vm, &batch, &[func]);
            }
            FnState::Entered(_) => {}
        }
        match self.state(func) {
            FnState::Entered(_) => CallDecision::Enter,
            _ => CallDecision::Interpret(Countdown::Never),
        }
    }

    // ANCHOR: hot_loop
    fn hot_loop(&mut self, vm: &mut Vm<'_>, func: u32, pc: u32) -> LoopDecision {
        if self.options.threshold.is_none() {
            return LoopDecision::Interpret(Countdown::Never);
        }
        // A function hot enough for OSR gets compiled whole too, so its
        // later calls run the native code from their start.
        if self.state(func) == FnState::Interpreted {
            let batch = self.hot_batch(vm, func);
            self.compile_functions(vm, &batch, &[]);
        }
        if !self.osr.contains_key(&(func, pc)) {
            self.compile_osr(vm, func, pc);
        }
        let osr = self.osr.get(&(func, pc)).copied().flatten();
        match (osr, self.state(func)) {
            // This activation leaves the interpreter: the shim can wait for
            // the first entry-table call; another interpreted activation's
            // back-edge lands here and gets the OSR variant.
            (Some(osr), FnState::Native(_)) => LoopDecision::Enter(osr, Countdown::Next),
            (Some(osr), _) => LoopDecision::Enter(osr, Countdown::Never),
            // Keep interpreting this activation, but never ask again.
            (None, FnState::Native(_)) => {
                self.compile_functions(vm, &[], &[func]);
                LoopDecision::Interpret(Countdown::Never)
            }
            (None, _) => LoopDecision::Interpret(Countdown::Never),
        }
    }
    // ANCHOR_END: hot_loop

    fn finish(&mut self, vm: &mut Vm<'_>) {
        self.finished = true;
        for failure in self.profilers.finish() {
            warn(vm, format_args!("toyvm: warning: {failure}"));
        }
    }
}

impl Drop for Jit {
    /// Completes the profiler outputs if [`TierUp::finish`] never ran (no
    /// VM to report failures on then).
    fn drop(&mut self) {
        if !self.finished {
            let _ = self.profilers.finish();
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
        jit.codegen.fail_region = fail.map(String::from);
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
