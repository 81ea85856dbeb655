//! The compile work, apart from the policy that decides it: [`Compiler`]
//! owns Cranelift (`pipeline::CodeGen`), the profiler sinks and the state
//! of every function's compiled code, runs one [`Request`] at a time, and
//! says what came of it in [`Action`]s. It never touches the VM: the
//! tiering policy (`policy`) applies the actions on the interpreter's
//! thread, so the same compiler runs there (`--jit-threshold 0`, `disasm
//! --jit`, literal thresholds) or on the compiler thread ([`background`]).
//!
//! What it reads of the program comes through [`Source`]: the VM itself
//! when it runs on the interpreter's thread, an owned copy ([`Program`])
//! on the compiler thread.

use std::cell::RefCell;
use std::collections::HashSet;
use std::time::{Duration, Instant};

use cranelift_module::{FuncId, Module as _};
use perfsupport::Profilers;
use vm::abi::{EntryFn, OsrFn};

use crate::abi;
use crate::codegen::listing::Listing;
use crate::codegen::names::region_name;
use crate::codegen::pipeline::{CodeGen, FinishError, Finished, Placement};
use crate::codegen::role::Role;
use crate::options::JitOptions;
use crate::translate::{self, Env, limits};

pub mod background;
pub mod cache;
mod profilers;
mod source;

use cache::{CodeCache, Kind};
pub use source::{Program, Source};

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
}

/// Work for the compiler.
#[derive(Clone, Debug)]
pub enum Request {
    /// The native functions of `funcs` (in this order: callees first) and
    /// the entry shims of `entered`, in one batch.
    Compile { funcs: Vec<u32>, entered: Vec<u32> },
    /// The native functions of `callees`, then the OSR variant of `func`
    /// (one for all its loop headers).
    Osr { callees: Vec<u32>, func: u32 },
    /// Evict code until `needed` bytes are free, never code of a function
    /// with an activation (`active[f]`), and say what died
    /// ([`Action::Evicted`], [`Action::OsrFreed`]). The interpreter's
    /// thread waits for the answer and applies it before it runs code
    /// again (see [`cache`]).
    Evict { needed: usize, active: Vec<bool> },
    /// Free the OSR variants of `funcs`, which the policy no longer holds
    /// and no activation runs in (made obsolete by their whole-function
    /// compile).
    FreeOsr { funcs: Vec<u32> },
}

impl Request {
    /// The functions a compile request names.
    pub fn functions(&self) -> Vec<u32> {
        match self {
            Request::Compile { funcs, entered } => funcs.iter().chain(entered).copied().collect(),
            Request::Osr { callees, func } => callees.iter().chain([func]).copied().collect(),
            Request::Evict { .. } | Request::FreeOsr { .. } => Vec::new(),
        }
    }
}

/// What came of a request, for the tiering policy to apply on the
/// interpreter's thread.
pub enum Action {
    /// `func` is now in this state (set for every function a request
    /// named, compiled or not).
    State(u32, FnState),
    /// Put this entry (shim or trampoline) into the entry table.
    Entry(u32, EntryFn),
    /// The OSR variant of a function, or `None` if it cannot be
    /// compiled.
    Osr(u32, Option<OsrFn>),
    /// A line for the VM's diagnostics (warnings, `--jit-stats`).
    Warn(String),
    /// `request` was not compiled: its code needs `needed` bytes (whole
    /// pages) more than the code limit leaves now (its functions are back
    /// in the states they had before it). `room`: the most any batch can
    /// get (the limit less the pinned trampolines); a request that needs
    /// more never fits.
    NoRoom {
        request: Request,
        needed: usize,
        room: usize,
    },
    /// The body of `func` was evicted: its entry goes back to `entry` (its
    /// trampoline) or to the interpreter.
    Evicted { func: u32, entry: Option<EntryFn> },
    /// The OSR variant of `func` was freed: drop it from the cache.
    OsrFreed(u32),
    /// An eviction ([`Request::Evict`]) or freeing obsolete OSR variants
    /// ([`Request::FreeOsr`]) gave back this many bytes.
    Freed(usize),
    /// The CPU time of this thread the request took (the policy's compile
    /// budget once code is being evicted): the profiler sinks' work
    /// counts, a debugger stopping the process to read a registration
    /// does not.
    Spent(Duration),
}

// SAFETY: `EntryFn` and `OsrFn` are plain function pointers into code
// memory that lives as long as the compiler, which outlives the run (the
// tier-up hook; `tier::run_main` restores the entry table before the run
// ends); the strings and states are plain data.
unsafe impl Send for Action {}

/// Cranelift, the profiler sinks and every function's compiled state (see
/// the module docs).
pub struct Compiler {
    functions: Vec<FnState>,
    /// Where each function's code lives and who calls it (eviction).
    cache: CodeCache,
    /// Each function's trampoline, once built (never freed: it is where
    /// an evicted function's entry goes back to).
    trampolines: Vec<Option<EntryFn>>,
    /// The functions whose body each region of the current batch calls
    /// directly, by function and unit.
    batch_calls: Vec<(u32, Kind, Vec<u32>)>,
    /// The current batch found no room: the bytes it needed (whole pages)
    /// and the most any batch can get.
    no_room: Option<(usize, usize)>,
    profilers: Profilers,
    /// `--jit-stats`: report each compile's time.
    stats: bool,
    /// `disasm --jit`: the listings of every finished region.
    pub listings: Option<Vec<Listing>>,
    /// Last: dropped (its code unmapped) after everything above, the
    /// profiler sinks whose GDB JIT objects point into the code included.
    codegen: CodeGen,
}

// SAFETY: the compiler is moved whole to the compiler thread and used
// there alone (never shared): Cranelift's module, the code memory (which
// owns its reservation, see `code_memory`), the unwind registrations and
// the profiler sinks (files and the GDB registry, which has its own lock)
// have no thread affinity.
unsafe impl Send for Compiler {}

impl Compiler {
    /// Sets up Cranelift and opens the profiler outputs `options` ask for
    /// (before any code exists, as jitdump requires). A profiler file that
    /// cannot be opened is skipped: its warning is returned with the
    /// compiler, for the policy to report when the run starts. Call
    /// [`Compiler::reset`] with the number of functions before a request.
    ///
    /// # Errors
    /// A message if the host ISA or the code memory is unavailable, or if
    /// cranelift-jit would write a perf map of its own
    /// ([`crate::PERF_BUILDID_DIR`]).
    pub fn new(options: &JitOptions) -> Result<(Compiler, Vec<String>), String> {
        let mut codegen = CodeGen::new()?;
        codegen.set_limit(options.code_limit());
        let (profilers, elf, warnings) = profilers::open(options);
        codegen.run_from_files(elf);
        let compiler = Compiler {
            codegen,
            functions: Vec::new(),
            cache: CodeCache::default(),
            trampolines: Vec::new(),
            batch_calls: Vec::new(),
            no_room: None,
            profilers,
            stats: options.stats,
            listings: None,
        };
        Ok((compiler, warnings))
    }

    /// Keeps IR and listings of everything compiled from now on.
    pub fn keep_listings(&mut self) {
        self.codegen.keep_ir();
        self.listings = Some(Vec::new());
    }

    /// Resizes the state table to `functions` functions, all interpreted.
    pub fn reset(&mut self, functions: usize) {
        self.functions = vec![FnState::Interpreted; functions];
        self.cache = CodeCache::new(functions);
        self.trampolines = vec![None; functions];
    }

    /// True if no profiler sink is active and code runs from anonymous
    /// memory: nothing needs interpreted functions named (trampolines).
    pub fn no_profilers(&self) -> bool {
        self.profilers.is_empty() && !self.codegen.runs_from_files()
    }

    /// True if code was evicted to make room.
    pub fn evicted(&self) -> bool {
        self.cache.stats.evictions > 0
    }

    /// The `--jit-stats` lines on the code cache.
    pub fn cache_stats(&self) -> String {
        let s = self.cache.stats;
        let limit = match self.codegen.limit() {
            usize::MAX => "no limit".to_string(),
            l => format!("limit {l}"),
        };
        let pinned = match self.codegen.pinned() {
            0 => String::new(),
            p => format!(", {p} of them pinned trampolines"),
        };
        format!(
            "jit-stats (code cache): at most {} bytes held ({limit}{pinned}); {} evictions, {} recompiles, {} obsolete OSR variants freed, {} bytes freed; {} compiles found no room, {} times code was freed",
            s.peak_bytes,
            s.evictions,
            s.recompiles,
            s.obsolete_freed,
            s.freed_bytes,
            s.no_room,
            s.frees
        )
    }

    /// Completes the profiler outputs; their failures.
    pub fn finish_profilers(&mut self) -> Vec<String> {
        self.codegen.discard_prepared_files();
        (self.profilers.finish().iter())
            .map(ToString::to_string)
            .collect()
    }

    /// The state of `func`.
    pub fn state(&self, func: u32) -> FnState {
        self.functions[func as usize]
    }

    /// Marks `func` refused (the policy found it over the budget).
    pub fn refuse(&mut self, func: u32) {
        self.set_state(func, FnState::Refused);
    }

    fn set_state(&mut self, func: u32, state: FnState) {
        self.functions[func as usize] = state;
    }

    /// Runs `request`, adding what came of it to `out`.
    pub fn run(&mut self, src: &dyn Source, request: &Request, out: &mut Vec<Action>) {
        let started = thread_cpu_time();
        self.no_room = None;
        match request {
            Request::Compile { funcs, entered } => {
                self.compile_functions(src, funcs, entered, out);
                for &f in funcs.iter().chain(entered) {
                    out.push(Action::State(f, self.state(f)));
                }
            }
            Request::Osr { callees, func } => {
                self.compile_functions(src, callees, &[], out);
                for &f in callees {
                    out.push(Action::State(f, self.state(f)));
                }
                if self.no_room.is_none() {
                    self.compile_osr(src, *func, out);
                }
                out.push(Action::State(*func, self.state(*func)));
            }
            Request::Evict { needed, active } => self.evict(*needed, active, out),
            Request::FreeOsr { funcs } => {
                let mut freed = 0;
                for &f in funcs {
                    freed += self.free_unit(f, Kind::Osr, false, out);
                }
                self.cache.stats.frees += u64::from(freed > 0);
                out.push(Action::Freed(freed));
            }
        }
        if let Some((needed, room)) = self.no_room.take() {
            out.push(Action::NoRoom {
                request: request.clone(),
                needed,
                room,
            });
        }
        out.push(Action::Spent(thread_cpu_time().saturating_sub(started)));
    }

    // ANCHOR: run_group
    /// True if queued compile requests should be run as one batch
    /// ([`Compiler::run_group`]): when each batch costs a file and a
    /// mapping (`--jit-elf`), so a run that makes many functions hot one
    /// after another keeps its mappings few.
    pub fn groups_batches(&self) -> bool {
        self.codegen.runs_from_files()
    }

    /// Runs the compile requests of `group` (each a [`Request::Compile`] or
    /// [`Request::Osr`]) as one batch: one chunk, one finish, one file
    /// under `--jit-elf`. What comes of each request is what
    /// [`Compiler::run`] would say of it alone, except that a batch that
    /// finds no room answers [`Action::NoRoom`] for every request (each
    /// asking for its share of the bytes), and the policy retries them one
    /// by one. Other requests are run alone.
    pub fn run_group(&mut self, src: &dyn Source, group: &[Request], out: &mut Vec<Action>) {
        let groupable = |r: &Request| matches!(r, Request::Compile { .. } | Request::Osr { .. });
        if group.len() < 2 || !group.iter().all(groupable) {
            for request in group {
                self.run(src, request, out);
            }
            return;
        }
        let started = thread_cpu_time();
        self.no_room = None;
        let before = self.functions.clone();
        // Each request's code defined, none finished: one batch.
        let mut done = Vec::new();
        for request in group {
            match request {
                Request::Compile { funcs, entered } => {
                    done.extend(self.define_functions(src, funcs, entered, out));
                }
                Request::Osr { callees, func } => {
                    done.extend(self.define_functions(src, callees, &[], out));
                    if self.over_budget(src, *func, out) {
                        out.push(Action::Osr(*func, None));
                    } else {
                        let started = Instant::now();
                        if self.define_osr(src, *func, out) {
                            done.push((*func, " (OSR)", started.elapsed()));
                        }
                    }
                }
                Request::Evict { .. } | Request::FreeOsr { .. } => {}
            }
        }
        for (f, what, took) in done {
            self.note_time(src, f, what, took, out);
        }
        if self.finish_batch(src, out).is_some() {
            self.functions = before;
        }
        let no_room = self.no_room.take();
        for request in group {
            for f in request.functions() {
                if let Request::Osr { func, .. } = request
                    && f == *func
                    && !(out.iter()).any(|a| matches!(*a, Action::Osr(o, _) if o == f))
                {
                    // Not finished (no room, or define or finalize failed).
                    out.push(Action::Osr(f, None));
                }
                out.push(Action::State(f, self.state(f)));
            }
            if let Some((needed, room)) = no_room {
                out.push(Action::NoRoom {
                    request: request.clone(),
                    needed: needed.div_ceil(group.len()),
                    room,
                });
            }
        }
        out.push(Action::Spent(thread_cpu_time().saturating_sub(started)));
    }
    // ANCHOR_END: run_group

    /// Evicts the coldest code no activation runs in until `needed` bytes
    /// are free or nothing more may go (see [`cache`]).
    fn evict(&mut self, needed: usize, active: &[bool], out: &mut Vec<Action>) {
        let mut freed = 0;
        let mut tried = HashSet::new();
        while freed < needed {
            let functions = &self.functions;
            let obsolete = |f: u32| matches!(functions[f as usize], FnState::Entered(_));
            let Some(victims) = self.cache.victims(active, obsolete, &mut tried) else {
                break;
            };
            for (f, kind) in victims {
                freed += self.free_unit(f, kind, true, out);
            }
        }
        self.cache.stats.frees += u64::from(freed > 0);
        out.push(Action::Freed(freed));
    }

    /// Frees the `kind` unit of `func` (see [`cache`] for when that is
    /// allowed), `evicted` to make room or else obsolete, and tells the
    /// policy; the bytes of code memory freed.
    fn free_unit(&mut self, func: u32, kind: Kind, evicted: bool, out: &mut Vec<Action>) -> usize {
        let chunks = self.cache.remove(func, kind, evicted);
        let mut freed = 0;
        let mut warnings = Vec::new();
        for chunk in chunks {
            // SAFETY: the unit is dead: no activation runs in it (the
            // policy's active set, taken while its thread waits or runs
            // this), no live compiled code calls it directly (its direct
            // callers die with it, `CodeCache::victims`), and the policy
            // resets the entries and the OSR cache it held (the actions
            // below) before it runs code again.
            freed += unsafe { (self.codegen).release(chunk, 1, &self.profilers, &mut warnings) };
        }
        out.extend(warnings.into_iter().map(Action::Warn));
        self.cache.stats.freed_bytes += freed as u64;
        match kind {
            Kind::Body => {
                if self.state(func).native().is_some() {
                    self.set_state(func, FnState::Interpreted);
                }
                out.push(Action::Evicted {
                    func,
                    entry: self.trampolines[func as usize],
                });
            }
            Kind::Osr => out.push(Action::OsrFreed(func)),
        }
        freed
    }

    /// Defines the native function of `func` (not final yet).
    fn define_native(&mut self, src: &dyn Source, func: u32) -> Result<(), String> {
        let id = self.codegen.declare(src.module(), func, Role::Native)?;
        // Native before translating: a recursive call is a direct call.
        self.set_state(func, FnState::Native(id));
        self.define_body(src, func, Role::Native, id)
    }

    /// Translates and defines one function body (native or OSR variant).
    fn define_body(
        &mut self,
        src: &dyn Source,
        func: u32,
        role: Role,
        id: FuncId,
    ) -> Result<(), String> {
        let functions = &self.functions;
        // Every callee the body calls directly (for eviction, `cache`).
        let called = RefCell::new(Vec::new());
        // Once the code limit has made the cache evict, an OSR variant
        // calls every other function through the entry table: it runs in
        // one long activation (often `<main>`'s, for the whole run), and
        // direct calls would keep its callees from being evicted as long.
        let direct = role != Role::Osr || self.cache.stats.evictions == 0;
        let natives = |f: u32| {
            let native = functions[f as usize].native().filter(|_| direct);
            if native.is_some() {
                called.borrow_mut().push(f);
            }
            native
        };
        let call_conv = self.codegen.call_conv();
        let array = self.codegen.array;
        let module = src.module();
        // SAFETY: `translate` builds the body `role` names for `func`: a
        // native function, or an OSR variant that continues the
        // interpreted activation at any of its loop headers.
        unsafe {
            self.codegen
                .define(module, func, role, id, |b, jit_module, imports| {
                    let env = Env {
                        module,
                        func,
                        consts: src.constants(func),
                        natives: &natives,
                        imports: *imports,
                        array,
                        call_conv,
                        inlined_frames: src.inlined_frames(),
                        locations: src.vmprof_locations(),
                    };
                    translate::translate(b, jit_module, &env, role);
                })
        }?;
        let kind = if role == Role::Osr {
            Kind::Osr
        } else {
            Kind::Body
        };
        (self.batch_calls).push((func, kind, called.into_inner()));
        Ok(())
    }

    /// Defines the entry shim of `func`, whose native function exists.
    fn define_shim(&mut self, src: &dyn Source, func: u32) -> Result<(), String> {
        let native = self.state(func).native().ok_or("no native function")?;
        let module = src.module();
        let id = self.codegen.declare(module, func, Role::EntryShim)?;
        let f = &module.functions[func as usize];
        // SAFETY: `build_entry_shim` writes an entry shim that follows the
        // entry ABI for `func` (it enters the frame and calls the native
        // function).
        unsafe {
            self.codegen.define(
                module,
                func,
                Role::EntryShim,
                id,
                |b, jit_module, imports| {
                    let native = jit_module.declare_func_in_func(native, b.func);
                    let depth_exceeded =
                        jit_module.declare_func_in_func(imports.depth_exceeded, b.func);
                    let locations = src.vmprof_locations();
                    abi::build_entry_shim(b, f, func, locations, native, depth_exceeded);
                },
            )
        }?;
        self.set_state(func, FnState::Entered(native));
        Ok(())
    }

    /// Defines the interpreter-entry trampoline of `func`.
    fn define_trampoline(&mut self, src: &dyn Source, func: u32) -> Result<(), String> {
        let module = src.module();
        let id = self.codegen.declare(module, func, Role::Trampoline)?;
        // SAFETY: `build_trampoline` writes a tail of `interp_entry` with
        // `func` fixed, which follows the entry ABI as `interp_entry` does.
        unsafe {
            self.codegen.define(
                module,
                func,
                Role::Trampoline,
                id,
                |b, jit_module, imports| {
                    let interp_entry =
                        jit_module.declare_func_in_func(imports.interp_entry, b.func);
                    abi::build_trampoline(b, interp_entry, func);
                },
            )
        }
    }

    // ANCHOR: trampolines
    /// The interpreter-entry trampolines of every function, in one batch,
    /// before anything is compiled. They are **pinned**: placed whatever
    /// the code limit, never evicted (an evicted function's entry goes back
    /// to its trampoline, so profilers keep naming it), and counted against
    /// the limit, so compiled code gets the limit less their bytes
    /// ([`Compiler::room`]).
    pub fn trampolines(&mut self, src: &dyn Source, out: &mut Vec<Action>) {
        for f in 0..self.functions.len() as u32 {
            if let Err(e) = self.define_trampoline(src, f) {
                out.push(Action::Warn(format!(
                    "toyvm: warning: JIT: trampoline: {e}"
                )));
            }
        }
        self.finish_batch_placed(src, Placement::Pinned, out);
    }
    // ANCHOR_END: trampolines

    /// The most bytes compiled code can ever hold: the code limit less
    /// the pinned trampolines.
    pub fn room(&self) -> usize {
        self.codegen.room()
    }

    /// Bytes of pinned trampolines.
    pub fn pinned(&self) -> usize {
        self.codegen.pinned()
    }

    /// Finishes the batch (see [`crate::codegen::pipeline`]): hands entries and OSR
    /// variants on, keeps listings, notes each unit in the cache; a failure
    /// is reported and compiles nothing. `Some(bytes)` if the batch needs
    /// that many bytes and the code limit has no room for it (nothing of it
    /// is kept).
    fn finish_batch(&mut self, src: &dyn Source, out: &mut Vec<Action>) -> Option<usize> {
        self.finish_batch_placed(src, Placement::UnderLimit, out)
    }

    /// [`Compiler::finish_batch`] with the batch placed as `placement` says.
    fn finish_batch_placed(
        &mut self,
        src: &dyn Source,
        placement: Placement,
        out: &mut Vec<Action>,
    ) -> Option<usize> {
        let calls = std::mem::take(&mut self.batch_calls);
        if !self.codegen.has_batch() {
            return None;
        }
        let mut warnings = Vec::new();
        let finished = self.codegen.finish(
            src.module(),
            placement,
            src.vmprof_locations().is_some(),
            &self.profilers,
            &mut warnings,
        );
        out.extend(warnings.into_iter().map(Action::Warn));
        match finished {
            Ok(finished) => {
                for Finished {
                    func,
                    role,
                    osr,
                    entry,
                    listing,
                    chunk,
                } in finished
                {
                    let kind = match role {
                        Role::Trampoline => {
                            self.trampolines[func as usize] = entry;
                            None
                        }
                        Role::Osr => Some(Kind::Osr),
                        Role::Native | Role::EntryShim => Some(Kind::Body),
                    };
                    if let Some(kind) = kind {
                        let called = (calls.iter())
                            .find(|&&(f, k, _)| f == func && k == kind)
                            .map_or(&[][..], |(_, _, c)| c);
                        self.cache.add(func, kind, chunk, called);
                    }
                    if role == Role::Osr {
                        out.push(Action::Osr(func, osr));
                    }
                    if let Some(entry) = entry {
                        out.push(Action::Entry(func, entry));
                    }
                    if let (Some(all), Some(listing)) = (self.listings.as_mut(), listing) {
                        all.push(listing);
                    }
                }
            }
            Err(FinishError::NoRoom { needed, room, .. }) => {
                self.cache.stats.no_room += 1;
                self.no_room = Some((needed, room));
                return Some(needed);
            }
            Err(e) => out.push(Action::Warn(format!("toyvm: warning: JIT: {e}"))),
        }
        self.cache.held(self.codegen.held());
        None
    }

    /// Compiles `funcs` (their native functions) and the entry shims of
    /// `entered` in one batch (see `policy` on lazy shims).
    pub fn compile_functions(
        &mut self,
        src: &dyn Source,
        funcs: &[u32],
        entered: &[u32],
        out: &mut Vec<Action>,
    ) {
        // The states to go back to if the batch finds no room.
        let before = self.functions.clone();
        let done = self.define_functions(src, funcs, entered, out);
        let started = Instant::now();
        if self.finish_batch(src, out).is_some() {
            self.functions = before;
            return;
        }
        let finish = started.elapsed();
        // Each function's time: its own IR building and code generation
        // (native and/or shim) plus its share of the batch's finalize/report.
        let share = finish / done.len().max(1) as u32;
        for (f, what, took) in done {
            self.note_time(src, f, what, took + share, out);
        }
    }

    /// Defines the native functions of `funcs` and the entry shims of
    /// `entered` into the batch, not finished: (function, what, time) of
    /// each, "" for a native function (with its shim if built here too),
    /// " (entry shim)" for a shim alone.
    fn define_functions(
        &mut self,
        src: &dyn Source,
        funcs: &[u32],
        entered: &[u32],
        out: &mut Vec<Action>,
    ) -> Vec<(u32, &'static str, Duration)> {
        let mut done = Vec::new();
        for &f in funcs {
            if self.state(f) != FnState::Interpreted || self.over_budget(src, f, out) {
                continue;
            }
            let started = Instant::now();
            let mut defined = self.define_native(src, f);
            if defined.is_ok() && entered.contains(&f) {
                defined = self.define_shim(src, f);
            }
            match defined {
                Ok(()) => done.push((f, "", started.elapsed())),
                Err(e) => self.give_up(src, f, &e, out),
            }
        }
        // Functions compiled earlier, without a shim.
        for &f in entered {
            if !matches!(self.state(f), FnState::Native(_)) {
                continue;
            }
            let started = Instant::now();
            match self.define_shim(src, f) {
                Ok(()) => done.push((f, " (entry shim)", started.elapsed())),
                Err(e) => self.give_up(src, f, &e, out),
            }
        }
        done
    }

    /// True if `func` is too large to compile (see [`limits`]): it is then
    /// refused, never asked about again; `--jit-stats` says so.
    fn over_budget(&mut self, src: &dyn Source, func: u32, out: &mut Vec<Action>) -> bool {
        if self.state(func) == FnState::Refused {
            return true;
        }
        let Err(over) = limits::check_budget(src.module(), func) else {
            return false;
        };
        self.set_state(func, FnState::Refused);
        if self.stats {
            let name = &src.module().functions[func as usize].name;
            out.push(Action::Warn(over.stats_line(name)));
        }
        true
    }

    /// Refuses `func` for good and says why.
    fn give_up(&mut self, src: &dyn Source, func: u32, error: &str, out: &mut Vec<Action>) {
        self.set_state(func, FnState::Refused);
        let name = &src.module().functions[func as usize].name;
        out.push(Action::Warn(format!(
            "toyvm: warning: JIT: cannot compile {name}: {error}"
        )));
    }

    /// Compiles the OSR variant of `func` (an [`Action::Osr`] in any case:
    /// `None` if it cannot be compiled).
    fn compile_osr(&mut self, src: &dyn Source, func: u32, out: &mut Vec<Action>) {
        if self.over_budget(src, func, out) {
            out.push(Action::Osr(func, None));
            return;
        }
        let started = Instant::now();
        let before = out.len();
        if self.define_osr(src, func, out) && self.finish_batch(src, out).is_some() {
            return;
        }
        // Not finished (define or finalize failed): never retried.
        let finished = (out[before..].iter()).any(|a| matches!(*a, Action::Osr(f, _) if f == func));
        if !finished {
            out.push(Action::Osr(func, None));
        }
        self.note_time(src, func, " (OSR)", started.elapsed(), out);
    }

    /// Defines the OSR variant of `func` into the batch, not finished;
    /// false (and a warning) if it cannot be defined.
    fn define_osr(&mut self, src: &dyn Source, func: u32, out: &mut Vec<Action>) -> bool {
        let role = Role::Osr;
        let defined = (self.codegen.declare(src.module(), func, role))
            .and_then(|id| self.define_body(src, func, role, id));
        if let Err(e) = &defined {
            let name = region_name(src.module(), func, role);
            out.push(Action::Warn(format!(
                "toyvm: warning: JIT: cannot compile {name}: {e}"
            )));
        }
        defined.is_ok()
    }

    fn note_time(
        &mut self,
        src: &dyn Source,
        func: u32,
        what: &str,
        took: Duration,
        out: &mut Vec<Action>,
    ) {
        if self.stats {
            let name = &src.module().functions[func as usize].name;
            let us = took.as_micros();
            out.push(Action::Warn(format!("jit-stats: {name}{what}: {us} us")));
        }
    }

    /// Test-only: the region whose compile fails.
    #[cfg(test)]
    pub fn fail_region(&mut self, name: Option<String>) {
        self.codegen.fail_region = name;
    }
}

/// CPU time this thread has used.
fn thread_cpu_time() -> Duration {
    cpu_time(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// CPU time the whole process has used (every thread).
pub fn process_cpu_time() -> Duration {
    cpu_time(libc::CLOCK_PROCESS_CPUTIME_ID)
}

fn cpu_time(clock: libc::clockid_t) -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid out-pointer; both clocks exist on Linux.
    let rc = unsafe { libc::clock_gettime(clock, &mut now) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}
