//! toyvm's Cranelift tier.
//!
//! [`Jit`] implements the interpreter's [`TierUp`] hook:
//!
//! * **Tier-up.** Every function starts with a countdown of
//!   [`JitOptions::threshold`] calls plus loop back-edges (counted by the
//!   interpreter, see `vm::runtime::tier`). When it runs out at a call, the
//!   function is compiled (native function + entry shim, [`translate`]) and
//!   its entry-table slot becomes the shim; when it runs out at a back-edge,
//!   an OSR variant for that loop header is compiled and the interpreter
//!   finishes the activation in it. Threshold 0 compiles every function at
//!   start, callees first, so compiled code calls compiled code directly.
//! * **Lazy entry shims.** Callees compiled along with a hot function get
//!   only their native function; their entry shim is built on their first
//!   call through the entry table, if one ever comes (see
//!   `Jit::compile_functions`).
//! * **Trampolines.** With a profiler sink ([`JitOptions::perf_map`],
//!   [`JitOptions::jitdump_dir`]), every function that is still interpreted
//!   gets its own tiny trampoline `(vm, func, base) -> interp_entry(vm,
//!   <func>, base)` (a normal call, so its frame stays on the stack), built
//!   in one batch, so perf attributes interpreter time to Toy functions.
//! * **Profiling.** `toyvm run --vmprof` samples the VM's frame records,
//!   which compiled code writes in its prologue as the interpreter does
//!   (record first, then the depth: see `translate`), so profiling adds no
//!   code; only with `--vmprof-inlined` do inlined leaf callees get a frame
//!   record, which they otherwise skip.
//! * **Reporting.** Every region (native, shim, OSR variant, trampoline) goes
//!   to `perfsupport` with its final address and size, Cranelift's unwind
//!   info and a line table from bytecode positions, after its batch is
//!   finalized; its `.eh_frame` is also registered with the system unwinder
//!   ([`system_unwind`]). Region names: see [`names`].
//!
//! Code memory is [`code_memory::CodeMemory`]; runtime helpers are in
//! [`helpers`]; `toyvm disasm --jit` is [`disasm`].

pub mod code_memory;
pub mod disasm;
pub mod helpers;
pub mod layout;
pub mod limits;
pub mod line_table;
pub mod names;
mod perf_env;
pub mod stack_guard;
pub mod system_unwind;
pub mod translate;

pub use perf_env::{PERF_BUILDID_DIR, forget_perf_buildid_dir};

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{InstBuilder, MemFlagsData, SourceLoc, UserFuncName, types};
use cranelift_codegen::isa::unwind::UnwindInfo as ClifUnwind;
use cranelift_codegen::settings::{self, Configurable};
use cranelift_codegen::{Context, isa::OwnedTargetIsa};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{FuncId, Linkage, Module};
use gimli::write::{CommonInformationEntry, FrameDescriptionEntry};
use perfsupport::{CodeRegion, JitDump, LineEntry, PerfMap, Profilers, UnwindInfo};
use vm::runtime::tier::{OsrFn, TierUp};
use vm::runtime::{EntryFn, Vm};

use layout::ArrayLayout;
use names::{NameKind, region_name};
use translate::{Env, HelperIds, Variant};

// ANCHOR: default_threshold
/// Default `--jit-threshold`: calls plus back-edges before a function is
/// compiled. A small function compiles in about 70 µs
/// (`bench/compile_latency.sh`; `nbody`'s `advance` about 0.6 ms), a few
/// times what the interpreter spends on 1000 calls of a small function or
/// 1000 iterations of a small loop (about 20 µs): by the time a function
/// tiers up it has shown that it runs often enough to repay the compile
/// soon, and functions run a handful of times (set-up code, error paths)
/// never pay for one.
pub const DEFAULT_THRESHOLD: u32 = 1000;
// ANCHOR_END: default_threshold

/// Test-only: `TOYVM_JITDUMP_NO_UNWIND=1` leaves the unwinding records out
/// of perf output (the negative control of `tests/perf_e2e.rs`).
pub const NO_UNWIND_ENV: &str = "TOYVM_JITDUMP_NO_UNWIND";

/// Test-only: `TOYVM_JIT_BACKTRACE=1` makes the `print` of a runtime
/// helper called from compiled code write a Rust backtrace to stderr first
/// (checks the `__register_frame` registration; see `tests/jit_backtrace.rs`).
pub const BACKTRACE_ENV: &str = "TOYVM_JIT_BACKTRACE";

/// How the JIT runs.
#[derive(Clone, Debug, Default)]
pub struct JitOptions {
    /// Compile after this many calls plus back-edges; `None` never compiles.
    pub threshold: Option<u32>,
    /// Write `/tmp/perf-<pid>.map` (and build trampolines).
    pub perf_map: bool,
    /// Write `<dir>/jit-<pid>.dump` (and build trampolines).
    pub jitdump_dir: Option<PathBuf>,
    /// Publish compiled code to debuggers through the GDB JIT interface
    /// (and build trampolines, so interpreted frames are named too).
    pub gdb: bool,
    /// Print each compile's time and size to stderr.
    pub stats: bool,
}

/// The Cranelift tier (see the crate docs).
pub struct Jit {
    options: JitOptions,
    jit: JITModule,
    ctx: Context,
    fctx: FunctionBuilderContext,
    isa: OwnedTargetIsa,
    cie: Option<CommonInformationEntry>,
    helpers: HelperIds,
    interp_entry: FuncId,
    array: ArrayLayout,
    /// Native function of each compiled function.
    natives: Vec<Option<FuncId>>,
    /// Functions whose entry shim is defined (see [`Jit::ensure_shim`]).
    shims: Vec<bool>,
    /// Functions whose compilation failed (never retried).
    failed: Vec<bool>,
    osr: HashMap<(u32, u32), Option<OsrFn>>,
    /// Regions defined but not yet finalized.
    pending: Vec<Pending>,
    profilers: Profilers,
    /// Per compile: (name, time) when `options.stats`.
    pub compile_times: Vec<(String, Duration)>,
    /// Filled by [`disasm`]: IR text per pending region.
    listing: Option<Vec<disasm::Listing>>,
}

/// One defined region waiting for `finalize_definitions`.
struct Pending {
    id: FuncId,
    name: String,
    func: u32,
    size: usize,
    fde: Option<FrameDescriptionEntry>,
    /// (code offset, attribution) rows, sorted (see [`line_table`]).
    rows: Vec<(u32, line_table::Attribution)>,
    /// What to install once final.
    install: Install,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Install {
    Nothing,
    Entry,
    Osr(u32),
}

impl Jit {
    /// Creates the JIT and opens the profiler outputs (before any code
    /// exists, as jitdump requires). A profiler file that cannot be opened
    /// is reported on stderr in one line and skipped.
    ///
    /// # Errors
    /// A message if the host ISA or the code memory is unavailable, or if
    /// cranelift-jit would write a perf map of its own ([`PERF_BUILDID_DIR`]).
    pub fn new(options: JitOptions) -> Result<Jit, String> {
        perf_env::check_no_cranelift_perf_map()?;
        let mut profilers = Profilers::new();
        if let Some(dir) = &options.jitdump_dir {
            match JitDump::create_in(dir) {
                Ok(dump) if std::env::var_os(NO_UNWIND_ENV).is_some() => {
                    profilers.add(Box::new(dump.without_unwinding_records()))
                }
                Ok(dump) => profilers.add(Box::new(dump)),
                Err(e) => eprintln!(
                    "toyvm: warning: cannot write the jitdump in {}: {e}",
                    dir.display()
                ),
            }
        }
        if options.perf_map {
            let map = PerfMap::new();
            match map.open() {
                Ok(()) => profilers.add(Box::new(map)),
                Err(e) => eprintln!("toyvm: warning: cannot write the perf map: {e}"),
            }
        }
        if options.gdb {
            profilers.add(Box::new(perfsupport::GdbJit::new()));
        }
        let array = ArrayLayout::probe().ok_or("unsupported Vec layout")?;
        let isa = make_isa()?;
        let mut builder =
            JITBuilder::with_isa(isa.clone(), cranelift_module::default_libcall_names());
        for (name, ptr) in helpers::symbols() {
            builder.symbol(name, ptr);
        }
        builder.symbol("toy_interp_entry", vm::interp::interp_entry as *const u8);
        let memory = code_memory::CodeMemory::new().map_err(|e| format!("JIT code memory: {e}"))?;
        builder.memory_provider(Box::new(memory));
        let mut jit = JITModule::new(builder);
        let call_conv = isa.default_call_conv();
        let helpers = declare_helpers(&mut jit, call_conv)?;
        let interp_entry = jit
            .declare_function(
                "toy_interp_entry",
                Linkage::Import,
                &translate::entry_signature(call_conv),
            )
            .map_err(|e| e.to_string())?;
        let cie = isa.create_systemv_cie();
        Ok(Jit {
            ctx: jit.make_context(),
            fctx: FunctionBuilderContext::new(),
            jit,
            isa,
            cie,
            helpers,
            interp_entry,
            array,
            natives: Vec::new(),
            shims: Vec::new(),
            failed: Vec::new(),
            osr: HashMap::new(),
            pending: Vec::new(),
            profilers,
            options,
            compile_times: Vec::new(),
            listing: None,
        })
    }

    fn trampolines_wanted(&self) -> bool {
        !self.profilers.is_empty()
    }

    fn threshold_counter(&self) -> i32 {
        match self.options.threshold {
            Some(n) => n.min(i32::MAX as u32) as i32,
            None => i32::MAX,
        }
    }

    /// Defines the native function of `func` (not final yet).
    fn define_native(&mut self, vm: &Vm<'_>, func: u32) -> Result<(), String> {
        let module = vm.module;
        let call_conv = self.isa.default_call_conv();
        let f = &module.functions[func as usize];
        let name = region_name(module, func, NameKind::Jit);
        let sig = translate::native_signature(f, call_conv);
        let id = self
            .jit
            .declare_function(&name, Linkage::Local, &sig)
            .map_err(|e| e.to_string())?;
        self.natives[func as usize] = Some(id);
        let result = self.define_body(vm, func, id, &name, Variant::Native, Install::Nothing);
        if result.is_err() {
            self.natives[func as usize] = None;
        }
        result
    }

    /// Translates and defines one function body.
    fn define_body(
        &mut self,
        vm: &Vm<'_>,
        func: u32,
        id: FuncId,
        name: &str,
        variant: Variant,
        install: Install,
    ) -> Result<(), String> {
        let call_conv = self.isa.default_call_conv();
        let module = vm.module;
        let f = &module.functions[func as usize];
        self.ctx.func.signature = match variant {
            Variant::Native => translate::native_signature(f, call_conv),
            Variant::Osr { .. } => translate::osr_signature(call_conv),
        };
        self.ctx.func.name = UserFuncName::user(0, id.as_u32());
        let env = Env {
            module,
            func,
            consts: &vm.funcs[func as usize].consts,
            natives: &self.natives,
            helpers: self.helpers,
            array: self.array,
            call_conv,
            inlined_frames: vm.vmprof_inlined_frames,
        };
        {
            let mut builder = FunctionBuilder::new(&mut self.ctx.func, &mut self.fctx);
            translate::translate(&mut builder, &mut self.jit, &env, variant);
            builder.finalize(self.jit.target_config());
        }
        self.define_current(id, name, func, install)
    }

    /// Defines `self.ctx` as `id` and records it as pending.
    fn define_current(
        &mut self,
        id: FuncId,
        name: &str,
        func: u32,
        install: Install,
    ) -> Result<(), String> {
        if let Some(listing) = self.listing.as_mut() {
            listing.push(disasm::Listing::new(
                name,
                func,
                self.ctx.func.display().to_string(),
            ));
        }
        let defined = self.jit.define_function(id, &mut self.ctx);
        if let Err(e) = defined {
            self.jit.clear_context(&mut self.ctx);
            return Err(format!("{name}: {e:?}"));
        }
        let compiled = self.ctx.compiled_code().ok_or("no compiled code")?;
        let size = compiled.code_buffer().len();
        let fde = match compiled.create_unwind_info(&*self.isa) {
            Ok(Some(ClifUnwind::SystemV(info))) => {
                Some(info.to_fde(perfsupport::unwind::REGION_START))
            }
            _ => None,
        };
        let ranges: Vec<_> = (compiled.buffer.get_srclocs_sorted().iter())
            .map(|s| (s.start, s.end, s.loc))
            .collect();
        let rows = line_table::attribute(&line_table::Compiled {
            ranges: &ranges,
            block_starts: &compiled.bb_starts,
            edges: &compiled.bb_edges,
        });
        self.jit.clear_context(&mut self.ctx);
        self.pending.push(Pending {
            id,
            name: name.to_string(),
            func,
            size,
            fde,
            rows,
            install,
        });
        Ok(())
    }

    // ANCHOR: define_shim
    /// Defines the entry shim of `func`: entry ABI → native call.
    fn define_shim(&mut self, vm: &Vm<'_>, func: u32) -> Result<(), String> {
        let native = self.natives[func as usize].ok_or("no native function")?;
        let module = vm.module;
        let f = &module.functions[func as usize];
        let name = region_name(module, func, NameKind::Entry);
        let id = self.declare_entry_abi_function(&name)?;
        {
            let mut b = FunctionBuilder::new(&mut self.ctx.func, &mut self.fctx);
            let entry = b.create_block();
            b.append_block_params_for_function_params(entry);
            b.switch_to_block(entry);
            b.set_srcloc(SourceLoc::default());
            let (vmv, base) = (b.block_params(entry)[0], b.block_params(entry)[2]);
            let mut args = vec![vmv, base];
            for (i, (_, ty)) in f.params.iter().enumerate() {
                let v = b.ins().load(
                    translate::clif_type(ty),
                    MemFlagsData::trusted(),
                    base,
                    (i * 8) as i32,
                );
                args.push(v);
            }
            let callee = self.jit.declare_func_in_func(native, b.func);
            let call = b.ins().call(callee, &args);
            let (result, status) = (b.inst_results(call)[0], b.inst_results(call)[1]);
            if f.ret.is_some() {
                b.ins().store(MemFlagsData::trusted(), result, base, 0);
            }
            // The native function's depth check failed: record the error.
            let depth_exceeded = b.create_block();
            let done = b.create_block();
            b.set_cold_block(depth_exceeded);
            let over = b.ins().icmp_imm_s(
                IntCC::Equal,
                status,
                translate::STATUS_DEPTH_EXCEEDED as i64,
            );
            b.ins().brif(over, depth_exceeded, &[], done, &[]);
            b.switch_to_block(done);
            b.ins().return_(&[status]);
            b.switch_to_block(depth_exceeded);
            let helper = self
                .jit
                .declare_func_in_func(self.helpers.depth_exceeded, b.func);
            let call = b.ins().call(helper, &[vmv]);
            let status = b.inst_results(call)[0];
            b.ins().return_(&[status]);
            b.seal_all_blocks();
            b.finalize(self.jit.target_config());
        }
        self.define_current(id, &name, func, Install::Entry)?;
        self.shims[func as usize] = true;
        Ok(())
    }
    // ANCHOR_END: define_shim

    /// Declares a local function with the entry ABI (a shim or a
    /// trampoline) and points the codegen context at it.
    fn declare_entry_abi_function(&mut self, name: &str) -> Result<FuncId, String> {
        let sig = translate::entry_signature(self.isa.default_call_conv());
        let id = self
            .jit
            .declare_function(name, Linkage::Local, &sig)
            .map_err(|e| e.to_string())?;
        self.ctx.func.signature = sig;
        self.ctx.func.name = UserFuncName::user(0, id.as_u32());
        Ok(id)
    }

    // ANCHOR: define_trampoline
    /// Defines the interpreter-entry trampoline of `func`.
    fn define_trampoline(&mut self, vm: &Vm<'_>, func: u32) -> Result<(), String> {
        let name = region_name(vm.module, func, NameKind::Interp);
        let id = self.declare_entry_abi_function(&name)?;
        {
            let mut b = FunctionBuilder::new(&mut self.ctx.func, &mut self.fctx);
            let entry = b.create_block();
            b.append_block_params_for_function_params(entry);
            b.switch_to_block(entry);
            let (vmv, base) = (b.block_params(entry)[0], b.block_params(entry)[2]);
            let callee = self.jit.declare_func_in_func(self.interp_entry, b.func);
            let fv = b.ins().iconst(types::I32, func as i64);
            // A normal call, never a tail call: the frame must stay visible.
            let call = b.ins().call(callee, &[vmv, fv, base]);
            let status = b.inst_results(call)[0];
            b.ins().return_(&[status]);
            b.seal_all_blocks();
            b.finalize(self.jit.target_config());
        }
        self.define_current(id, &name, func, Install::Entry)
    }
    // ANCHOR_END: define_trampoline

    /// Finalizes the pending batch, reports it, installs entries.
    fn finish_batch(&mut self, vm: &mut Vm<'_>) -> Result<(), String> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let pending = std::mem::take(&mut self.pending);
        self.jit
            .finalize_definitions()
            .map_err(|e| format!("{e:?}"))?;
        let path = vm.module.path.clone();
        // ANCHOR: line_rows
        let lines: Vec<Vec<LineEntry<'_>>> = (pending.iter())
            .map(|p| {
                let mut rows: Vec<LineEntry<'_>> = Vec::with_capacity(p.rows.len());
                for &(offset, attribution) in &p.rows {
                    let (line, column) = line_table::position(vm.module, p.func, attribution);
                    let same = |r: &LineEntry<'_>| r.line == line && r.column == column;
                    if offset as usize >= p.size || rows.last().is_some_and(same) {
                        continue;
                    }
                    rows.push(LineEntry {
                        offset,
                        file: &path,
                        line,
                        column,
                    });
                }
                rows
            })
            .collect();
        // ANCHOR_END: line_rows
        let mut regions = Vec::with_capacity(pending.len());
        for (p, rows) in pending.iter().zip(&lines) {
            let start = self.jit.get_finalized_function(p.id);
            // SAFETY: cranelift-jit placed `size` bytes of final code at
            // `start` (the size recorded at define time), now mapped
            // read+exec and never freed (see `code_memory`).
            let code = unsafe { std::slice::from_raw_parts(start, p.size) };
            let mut region = CodeRegion::new(code, &p.name).with_lines(rows);
            if let (Some(cie), Some(fde)) = (&self.cie, &p.fde) {
                region = region.with_unwind(UnwindInfo { cie, fde });
            }
            regions.push(region);
        }
        if let Ok(eh_frame) = perfsupport::unwind::eh_frame_for_register_frame(&regions) {
            system_unwind::register(eh_frame);
        }
        for failure in self.profilers.register(&regions) {
            eprintln!("perfsupport: {failure}");
        }
        if let Some(listing) = self.listing.as_mut() {
            let n = listing.len();
            for (l, r) in listing[n - regions.len()..].iter_mut().zip(&regions) {
                l.set_code(
                    r.start(),
                    r.code.to_vec(),
                    r.lines.iter().map(|e| (e.offset, e.line)).collect(),
                );
            }
        }
        for p in &pending {
            let ptr = self.jit.get_finalized_function(p.id);
            match p.install {
                Install::Nothing => {}
                Install::Entry => {
                    // SAFETY: `ptr` is a finalized function with the entry
                    // ABI signature (shim or trampoline) for `p.func`.
                    unsafe {
                        let entry: EntryFn = std::mem::transmute::<*const u8, EntryFn>(ptr);
                        vm.set_entry(p.func, entry);
                    }
                }
                Install::Osr(pc) => {
                    // SAFETY: `ptr` is a finalized OSR variant of `p.func`
                    // with the `OsrFn` signature.
                    let osr = unsafe { std::mem::transmute::<*const u8, OsrFn>(ptr) };
                    self.osr.insert((p.func, pc), Some(osr));
                }
            }
        }
        Ok(())
    }

    /// `func` preceded by the callees it reaches that have already run and
    /// are not compiled, callees first: compiling them in the same batch
    /// lets `func` call them directly instead of through the entry table.
    fn with_run_callees(&self, vm: &Vm<'_>, func: u32) -> Vec<u32> {
        let initial = self.threshold_counter();
        let mut order = Vec::new();
        let mut seen = vec![false; vm.module.functions.len()];
        let mut stack = vec![(func, false)];
        while let Some((f, expanded)) = stack.pop() {
            if expanded {
                order.push(f);
                continue;
            }
            if std::mem::replace(&mut seen[f as usize], true) {
                continue;
            }
            stack.push((f, true));
            for op in &vm.module.functions[f as usize].code {
                if let vm::bytecode::Op::Call { func: callee, .. } = *op {
                    let c = callee as usize;
                    let ran = vm.funcs[c].hotness < initial;
                    if !seen[c] && ran && self.natives[c].is_none() && !self.failed[c] {
                        stack.push((callee as u32, false));
                    }
                }
            }
        }
        order
    }

    /// Compiles `funcs` (their native functions) and the entry shims of
    /// `entered` in one batch.
    ///
    /// Entry shims are lazy: most compiled functions are only ever called
    /// from compiled code, directly, and a shim costs about a third of a
    /// small function's compile. `entered` names the functions about to be
    /// called through the entry table; every other function compiled here
    /// keeps its old entry (the interpreter's, or its trampoline) with its
    /// counter at zero, so the first entry-table call of it reaches
    /// [`TierUp::hot_call`], which builds the shim ([`Jit::ensure_shim`]).
    fn compile_functions(&mut self, vm: &mut Vm<'_>, funcs: &[u32], entered: &[u32]) {
        // (function, what, time): "" for a native function (with its shim
        // if built here too), " (entry shim)" for a shim alone.
        let mut done: Vec<(u32, &str, Duration)> = Vec::new();
        for &f in funcs {
            if self.natives[f as usize].is_some()
                || self.failed[f as usize]
                || self.over_budget(vm, f)
            {
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
            if self.natives[f as usize].is_none()
                || self.shims[f as usize]
                || self.failed[f as usize]
            {
                continue;
            }
            let started = Instant::now();
            match self.define_shim(vm, f) {
                Ok(()) => done.push((f, " (entry shim)", started.elapsed())),
                Err(e) => self.give_up(vm, f, &e),
            }
        }
        let started = Instant::now();
        if let Err(e) = self.finish_batch(vm) {
            eprintln!("toyvm: warning: JIT: {e}");
        }
        let finish = started.elapsed();
        for &(f, _, _) in &done {
            // Zero: the next entry-table call asks for the missing shim.
            vm.funcs[f as usize].hotness = if self.shims[f as usize] { i32::MAX } else { 0 };
        }
        // Each function's time: its own IR building and code generation
        // (native and/or shim) plus its share of the batch's finalize/report.
        let share = finish / done.len().max(1) as u32;
        for (f, what, took) in done {
            self.note_time(vm, f, what, took + share);
        }
    }

    /// The compiled functions without an entry shim that a function
    /// without native code calls.
    fn called_from_interpreted(&self, vm: &Vm<'_>) -> Vec<u32> {
        let mut wanted = vec![false; vm.module.functions.len()];
        for (caller, f) in vm.module.functions.iter().enumerate() {
            if self.natives[caller].is_some() {
                continue;
            }
            for op in &f.code {
                if let vm::bytecode::Op::Call { func, .. } = *op {
                    let c = func as usize;
                    wanted[c] |= self.natives[c].is_some() && !self.shims[c];
                }
            }
        }
        (0..wanted.len() as u32)
            .filter(|&f| wanted[f as usize])
            .collect()
    }

    /// Makes `func`'s entry the shim of its native function, building the
    /// shim now if it has none yet; false if it has no native function or
    /// the shim cannot be built.
    fn ensure_shim(&mut self, vm: &mut Vm<'_>, func: u32) -> bool {
        self.compile_functions(vm, &[], &[func]);
        self.shims[func as usize]
    }

    /// True if `func` is too large to compile (see [`limits`]): it then
    /// stays interpreted, never asked about again; `--jit-stats` says so.
    fn over_budget(&mut self, vm: &Vm<'_>, func: u32) -> bool {
        let ops = limits::compiled_ops(vm.module, func);
        let budget = limits::max_compiled_ops();
        if ops <= budget {
            return false;
        }
        self.failed[func as usize] = true;
        if self.options.stats {
            eprintln!(
                "jit-stats: {}: not compiled: {ops} instructions, over the budget of {budget}",
                vm.module.functions[func as usize].name,
            );
        }
        true
    }

    /// Records that `func` cannot be compiled (never retried) and says why.
    fn give_up(&mut self, vm: &Vm<'_>, func: u32, error: &str) {
        self.failed[func as usize] = true;
        eprintln!(
            "toyvm: warning: JIT: cannot compile {}: {error}",
            vm.module.functions[func as usize].name
        );
    }

    /// Compiles the OSR variant of `func` at loop header `pc` and caches it
    /// (`None` if it cannot be compiled).
    fn compile_osr(&mut self, vm: &mut Vm<'_>, func: u32, pc: u32) {
        if self.failed[func as usize] || self.over_budget(vm, func) {
            self.osr.insert((func, pc), None);
            return;
        }
        let started = Instant::now();
        let name = region_name(vm.module, func, NameKind::Osr(pc));
        let call_conv = self.isa.default_call_conv();
        let defined = self
            .jit
            .declare_function(&name, Linkage::Local, &translate::osr_signature(call_conv))
            .map_err(|e| e.to_string())
            .and_then(|id| {
                self.define_body(vm, func, id, &name, Variant::Osr { pc }, Install::Osr(pc))
            })
            .and_then(|()| self.finish_batch(vm));
        if let Err(e) = defined {
            eprintln!("toyvm: warning: JIT: cannot compile {name}: {e}");
            self.pending.clear();
            self.osr.insert((func, pc), None);
        }
        self.note_time(vm, func, &format!(" (OSR @{pc})"), started.elapsed());
    }

    fn note_time(&mut self, vm: &Vm<'_>, func: u32, what: &str, took: Duration) {
        if !self.options.stats {
            return;
        }
        let name = format!("{}{what}", vm.module.functions[func as usize].name);
        eprintln!("jit-stats: {name}: {} us", took.as_micros());
        self.compile_times.push((name, took));
    }
}

// ANCHOR: make_isa
/// The ISA: host CPU, `speed`, frame pointers kept (for perf's call graphs).
fn make_isa() -> Result<OwnedTargetIsa, String> {
    let mut flags = settings::builder();
    let set =
        |f: &mut settings::Builder, k: &str, v: &str| f.set(k, v).map_err(|e| format!("{k}: {e}"));
    set(&mut flags, "opt_level", "speed")?;
    set(&mut flags, "preserve_frame_pointers", "true")?;
    set(&mut flags, "unwind_info", "true")?;
    // Machine block starts and edges, for the line tables' fallback
    // (`line_table`): metadata only, the code is the same.
    set(&mut flags, "machine_code_cfg_info", "true")?;
    set(&mut flags, "is_pic", "false")?;
    set(&mut flags, "use_colocated_libcalls", "false")?;
    set(
        &mut flags,
        "enable_verifier",
        if cfg!(debug_assertions) {
            "true"
        } else {
            "false"
        },
    )?;
    let builder = cranelift_native::builder().map_err(|e| format!("host ISA: {e}"))?;
    builder
        .finish(settings::Flags::new(flags))
        .map_err(|e| format!("host ISA: {e}"))
}
// ANCHOR_END: make_isa

fn declare_helpers(
    jit: &mut JITModule,
    call_conv: cranelift_codegen::isa::CallConv,
) -> Result<HelperIds, String> {
    use cranelift_codegen::ir::types::*;
    let mut declare =
        |name: &str, params: &[cranelift_codegen::ir::Type], ret: cranelift_codegen::ir::Type| {
            let sig = translate::signature(call_conv, params, &[ret]);
            jit.declare_function(name, Linkage::Import, &sig)
                .map_err(|e| e.to_string())
        };
    Ok(HelperIds {
        slow_op: declare("toy_jit_slow_op", &[I64, I32, I64, I32], I32)?,
        pop: declare("toy_jit_pop", &[I64, I32, I32, I64, I64], I32)?,
        fail: declare("toy_jit_fail", &[I64, I32, I32, I32], I32)?,
        index_error: declare("toy_jit_index_error", &[I64, I32, I32, I64, I64], I32)?,
        depth_exceeded: declare("toy_jit_depth_exceeded", &[I64], I32)?,
        push_trace: declare("toy_jit_push_trace", &[I64, I32, I32, I32], I32)?,
        str_cmp: declare("toy_jit_str_cmp", &[I64, I64], I64)?,
        str_len: declare("toy_jit_str_len", &[I64], I64)?,
        fmod: declare("toy_jit_fmod", &[F64, F64], F64)?,
    })
}

/// Functions in callee-first order (post-order of the call graph from
/// `<main>`, then any unreachable ones), so compiling them in this order
/// lets each call a compiled callee directly (except around cycles).
fn callee_first_order(module: &vm::bytecode::Module) -> Vec<u32> {
    let n = module.functions.len();
    let mut seen = vec![false; n];
    let mut order = Vec::with_capacity(n);
    let roots = std::iter::once(module.main).chain(0..n as u32);
    for root in roots {
        if seen[root as usize] {
            continue;
        }
        // Iterative DFS: (function, next instruction to scan).
        let mut stack = vec![(root, 0usize)];
        seen[root as usize] = true;
        while let Some((f, at)) = stack.pop() {
            let code = &module.functions[f as usize].code;
            let next_call = code[at..]
                .iter()
                .position(|op| matches!(op, vm::bytecode::Op::Call { .. }));
            match next_call {
                Some(i) => {
                    stack.push((f, at + i + 1));
                    if let vm::bytecode::Op::Call { func, .. } = code[at + i]
                        && !seen[func as usize]
                    {
                        seen[func as usize] = true;
                        stack.push((func as u32, 0));
                    }
                }
                None => order.push(f),
            }
        }
    }
    order
}

impl TierUp for Jit {
    fn start(&mut self, vm: &mut Vm<'_>) {
        let n = vm.module.functions.len();
        self.natives = vec![None; n];
        self.shims = vec![false; n];
        self.failed = vec![false; n];
        let counter = self.threshold_counter();
        for rt in vm.funcs.iter_mut() {
            rt.hotness = counter;
        }
        if self.options.threshold == Some(0) {
            let order = callee_first_order(vm.module);
            // `<main>` is always entered through the entry table.
            self.compile_functions(vm, &order, &[vm.module.main]);
            // Functions left to the interpreter (over the budget) call
            // through the entry table: their callees get their shims now,
            // in one batch, not in one batch per callee at its first call
            // (5,000 batches for a big interpreted `<main>`: 5,000 objects
            // for gdb, a page of code memory each).
            let entered = self.called_from_interpreted(vm);
            self.compile_functions(vm, &[], &entered);
        }
        if self.trampolines_wanted() {
            for f in 0..n as u32 {
                if self.natives[f as usize].is_none()
                    && let Err(e) = self.define_trampoline(vm, f)
                {
                    eprintln!("toyvm: warning: JIT: trampoline: {e}");
                }
            }
            if let Err(e) = self.finish_batch(vm) {
                eprintln!("toyvm: warning: JIT: {e}");
            }
        }
    }

    fn hot_call(&mut self, vm: &mut Vm<'_>, func: u32) -> Option<EntryFn> {
        if self.options.threshold.is_none() || self.failed[func as usize] {
            vm.funcs[func as usize].hotness = i32::MAX;
            return None;
        }
        if self.natives[func as usize].is_some() {
            // Compiled earlier in a batch of callees: only the shim is new.
            if !self.ensure_shim(vm, func) {
                return None;
            }
        } else {
            let batch = self.with_run_callees(vm, func);
            self.compile_functions(vm, &batch, &[func]);
            if !self.shims[func as usize] {
                return None;
            }
        }
        vm.entry(func)
    }

    // ANCHOR: hot_loop
    fn hot_loop(&mut self, vm: &mut Vm<'_>, func: u32, pc: u32) -> Option<OsrFn> {
        vm.funcs[func as usize].hotness = i32::MAX;
        self.options.threshold?;
        // A function hot enough for OSR gets compiled whole too, so its
        // later calls run the native code from their start.
        if self.natives[func as usize].is_none() && !self.failed[func as usize] {
            let batch = self.with_run_callees(vm, func);
            self.compile_functions(vm, &batch, &[]);
        }
        if !self.osr.contains_key(&(func, pc)) {
            self.compile_osr(vm, func, pc);
        }
        let osr = self.osr.get(&(func, pc)).copied().flatten();
        if self.natives[func as usize].is_some() && !self.shims[func as usize] {
            if osr.is_some() {
                // This activation leaves the interpreter: the shim can wait
                // for the first entry-table call (see `compile_functions`);
                // another interpreted activation's back-edge lands here
                // and gets the OSR variant.
                vm.funcs[func as usize].hotness = 0;
            } else {
                // Keep interpreting this activation, but never ask again.
                self.ensure_shim(vm, func);
            }
        }
        osr
    }
    // ANCHOR_END: hot_loop
}

impl Drop for Jit {
    fn drop(&mut self) {
        for failure in self.profilers.finish() {
            eprintln!("toyvm: warning: {failure}");
        }
    }
}

/// A [`TierUp`] that never compiles (used when the JIT cannot start).
pub struct Disabled;

impl TierUp for Disabled {
    fn start(&mut self, _vm: &mut Vm<'_>) {}
    fn hot_call(&mut self, vm: &mut Vm<'_>, func: u32) -> Option<EntryFn> {
        vm.funcs[func as usize].hotness = i32::MAX;
        None
    }
    fn hot_loop(&mut self, vm: &mut Vm<'_>, func: u32, _pc: u32) -> Option<OsrFn> {
        vm.funcs[func as usize].hotness = i32::MAX;
        None
    }
}

/// The tier-up hook for `options`: the JIT, or [`Disabled`] after printing
/// why it cannot start.
pub fn tier_up(options: JitOptions) -> Box<dyn TierUp> {
    match Jit::new(options) {
        Ok(jit) => Box::new(jit),
        Err(e) => {
            eprintln!("toyvm: warning: JIT disabled: {e}");
            Box::new(Disabled)
        }
    }
}
