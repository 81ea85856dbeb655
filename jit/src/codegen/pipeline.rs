//! The batch pipeline: regions are defined one by one, then a whole batch
//! is made final and published in one sequence ([`CodeGen::finish`]):
//!
//! 1. **place**: each region gets its address in a chunk of its own
//!    (`code_memory`), is relocated for it ([`relocate`]) and written
//!    there once, and the chunk is made executable;
//! 2. **locate**: each region's final address, and its line table from
//!    bytecode positions ([`line_table`]);
//! 3. **register unwind**: the batch's `.eh_frame` goes to the system
//!    unwinder ([`system_unwind`]);
//! 4. **report**: the batch goes to the profiler sinks (perf map, jitdump,
//!    GDB) in one call, and, in vmprof lines mode, each compiled body's
//!    line table to the sampler ([`publish_vmprof_lines`]);
//! 5. **install**: entry shims, trampolines and OSR variants are handed
//!    back to the tiering policy, which puts entries into the VM's entry
//!    table on the interpreter's thread (the batch may have been made on
//!    the compiler thread, see `compiler::background`).
//!
//! A region exists for the rest of the pipeline only once Cranelift defined
//! it: a failed definition leaves nothing behind, so nothing downstream
//! (the `disasm --jit` listings included) can pair with the wrong region.
//!
//! Each batch is compiled whole before any of it is placed, so its size is
//! known first: it gets a chunk of code memory of its own
//! ([`code_memory`]), or, when that would take the JIT over its code limit
//! ([`CodeGen::set_limit`]), nothing of it is placed and the caller hears
//! [`FinishError::NoRoom`] (to evict code and try again).
//!
//! **Pinned code** (the interpreter-entry trampolines, which are never
//! evicted: an evicted function's entry goes back to its trampoline) is
//! placed whatever the limit ([`Placement::Pinned`]) and counts against it:
//! the code that may be evicted gets what the pinned code leaves
//! ([`CodeGen::room`]).
//!
//! **Code that dies** ([`CodeGen::release`]): once every region of a chunk
//! is dead, the chunk's unwind info is withdrawn from the system unwinder,
//! its vmprof line tables are retracted, the profiler sinks are told
//! (`Profilers::retire`: the GDB JIT objects lose its symbols), and only
//! then does the memory go back to the arena, which may hand the addresses
//! to other code (or, under a perf map, keeps them in quarantine).
//!
//! Dropping the [`CodeGen`] returns all of its code memory the same way,
//! so a process that runs many VMs in turn keeps a bounded number of
//! mappings. What else points into
//! the code is gone by then: the VM's entry table is restored when the run
//! ends (`vm::interp::run_main`) and the owner
//! (`compiler::Compiler`, whose field order says so) drops the profiler
//! sinks (the GDB JIT objects) first.

use std::collections::HashMap;
use std::sync::Arc;

use cranelift_codegen::Context;
use cranelift_codegen::control::ControlPlane;
use cranelift_codegen::ir::UserFuncName;
use cranelift_codegen::isa::unwind::UnwindInfo as ClifUnwind;
use cranelift_codegen::isa::{CallConv, OwnedTargetIsa};
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{FuncId, Module, ModuleReloc, ModuleRelocTarget};
use gimli::write::{CommonInformationEntry, FrameDescriptionEntry};
use perfsupport::vmprof::CodeLineRow;
use perfsupport::{CodeRegion, ElfCodeFiles, LineEntry, Profilers, UnwindInfo};
use vm::abi::{EntryFn, OsrFn};
use vm::bytecode::Module as Bytecode;

use super::code_memory::{self, ChunkId, CodeChunks};
use super::listing::Listing;
use super::{epilogue_cfi, line_table, panic_guard, perf_env, relocate, system_unwind};
use crate::abi::Imports;
use crate::abi::layout::ArrayLayout;
use crate::codegen::names::region_name;
use crate::codegen::role::Role;
use crate::options::PANIC_IN_ENV;

/// Cranelift, the code memory and the batch of regions defined but not
/// final yet.
pub struct CodeGen {
    /// The declarations the IR names functions by (see [`relocate`]:
    /// nothing is defined in it).
    module: JITModule,
    /// Each region's id, declared once per function and role and used
    /// again when the function is compiled again.
    declared: HashMap<(u32, Role), FuncId>,
    /// Where the code of each live region (and of the batch being placed)
    /// starts.
    addresses: HashMap<FuncId, usize>,
    /// The address of each import, by id.
    imports_at: HashMap<FuncId, usize>,
    /// The chunks of code memory the batches are placed in.
    chunks: CodeChunks,
    /// The chunks with live code, and what describes them.
    live: HashMap<ChunkId, LiveChunk>,
    /// Most bytes of code memory held at once (`--jit-code-limit`).
    limit: usize,
    /// Bytes of the chunks of pinned batches (never freed before the
    /// `CodeGen` is dropped).
    pinned: usize,
    ctx: Context,
    fctx: FunctionBuilderContext,
    isa: OwnedTargetIsa,
    cie: Option<CommonInformationEntry>,
    /// The imported helpers and `interp_entry`.
    pub imports: Imports,
    /// Where compiled code finds an array's fields.
    pub array: ArrayLayout,
    batch: Vec<Defined>,
    /// Keep each region's IR text for its [`Listing`] (`disasm --jit`).
    keep_ir: bool,
    /// Test-only: the region whose compile fails (after its IR is built).
    #[cfg(test)]
    pub fail_region: Option<String>,
    /// Test-only: the region whose build panics ([`PANIC_IN_ENV`]).
    panic_in: Option<String>,
    /// Where every batch is published as a file-backed mapping
    /// (`--jit-elf`); None: batches run from anonymous memory.
    elf: Option<Arc<ElfCodeFiles>>,
    /// A publication failed once and said so (later ones are silent).
    elf_warned: bool,
}

/// A chunk holding live code: how many of its regions are alive, and what
/// must be withdrawn before its memory is freed.
struct LiveChunk {
    regions: usize,
    /// Each region's id and start (taken out of `CodeGen::addresses` when
    /// the chunk dies).
    ids: Vec<(FuncId, usize)>,
    /// Start and size of each region (for the sinks' `retire`).
    ranges: Vec<(usize, usize)>,
    /// Its `.eh_frame`, registered with the system unwinder.
    unwind: system_unwind::Registrations,
    /// Where each region with a published vmprof line table starts (as
    /// addresses: the `CodeGen` moves to the compiler thread).
    vmprof_lines: Vec<usize>,
}

impl LiveChunk {
    /// Withdraws what describes the chunk: the unwinder's entries and the
    /// vmprof line tables, which nothing may find once the addresses hold
    /// other code.
    fn withdraw(self) {
        drop(self.unwind);
        perfsupport::vmprof::retract_many_code_lines(
            (self.vmprof_lines.iter()).map(|&start| start as *const u8),
        );
    }
}

/// Where a batch may go ([`CodeGen::finish`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Code that may be evicted: placed only under the code limit.
    UnderLimit,
    /// Code that is never freed while the JIT lives (the trampolines):
    /// placed whatever the limit, and counted against it from then on.
    Pinned,
}

/// Why a batch was not finished.
#[derive(Debug)]
pub enum FinishError {
    /// The batch needs `needed` bytes of code memory and the JIT holds
    /// `held` of its `limit`: nothing of it was placed, and it is dropped.
    NoRoom {
        /// Bytes the batch needs.
        needed: usize,
        /// Bytes held now.
        held: usize,
        /// The limit.
        limit: usize,
        /// The most a batch can ever get: the limit less the pinned code
        /// ([`CodeGen::room`]). A batch that needs more never fits.
        room: usize,
    },
    /// Cranelift or the code memory failed (nothing of the batch is
    /// published).
    Failed(String),
}

impl std::fmt::Display for FinishError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FinishError::NoRoom {
                needed,
                held,
                limit,
                ..
            } => write!(
                f,
                "no room for {needed} bytes of code ({held} of the {limit}-byte code limit held)"
            ),
            FinishError::Failed(e) => f.write_str(e),
        }
    }
}

/// A region defined in the current batch: compiled, not placed yet.
struct Defined {
    id: FuncId,
    name: String,
    func: u32,
    role: Role,
    size: usize,
    /// The machine code, its alignment and relocations, placed by
    /// [`CodeGen::finish`].
    code: Vec<u8>,
    align: u64,
    relocs: Vec<ModuleReloc>,
    fde: Option<FrameDescriptionEntry>,
    /// Bytes perf maps after the code for its unwind table (see
    /// [`CodeGen::unwind_bytes`]); the code memory leaves at least
    /// [`code_memory::UNWIND_TAIL`] ([`Defined::tail`]).
    unwind_bytes: usize,
    /// (code offset, attribution) rows, sorted (see [`line_table`]).
    rows: Vec<(u32, line_table::Attribution)>,
    ir: Option<String>,
}

impl Defined {
    /// Bytes the code memory leaves free after the code.
    fn tail(&self) -> usize {
        self.unwind_bytes.max(code_memory::UNWIND_TAIL)
    }
}

/// A region of a finished batch.
pub struct Finished {
    /// The function it belongs to.
    pub func: u32,
    /// What it is.
    pub role: Role,
    /// The entry of an OSR variant (installed nowhere: the tiering policy
    /// caches it).
    pub osr: Option<OsrFn>,
    /// The entry of an entry shim or trampoline, for the VM's entry table.
    pub entry: Option<EntryFn>,
    /// Its listing, when IR is kept.
    pub listing: Option<Listing>,
    /// The chunk it lives in (see [`CodeGen::release`]).
    pub chunk: ChunkId,
}

impl CodeGen {
    /// Sets up the host ISA, the code memory and the imports.
    ///
    /// # Errors
    /// A message if the host ISA, the `Vec` layout or the code memory is
    /// unavailable, or if cranelift-jit would write a perf map of its own
    /// ([`perf_env`]).
    pub fn new() -> Result<CodeGen, String> {
        perf_env::check_no_cranelift_perf_map()?;
        let array = ArrayLayout::probe().ok_or("unsupported Vec layout")?;
        let isa = make_isa()?;
        let builder = JITBuilder::with_isa(isa.clone(), cranelift_module::default_libcall_names());
        let mut module = JITModule::new(builder);
        let imports = Imports::declare(&mut module, isa.default_call_conv())?;
        let imports_at = imports_by_id(&module);
        Ok(CodeGen {
            declared: HashMap::new(),
            addresses: HashMap::new(),
            imports_at,
            chunks: CodeChunks::default(),
            live: HashMap::new(),
            limit: usize::MAX,
            pinned: 0,
            ctx: module.make_context(),
            fctx: FunctionBuilderContext::new(),
            cie: isa.create_systemv_cie(),
            module,
            isa,
            imports,
            array,
            batch: Vec::new(),
            keep_ir: false,
            elf: None,
            elf_warned: false,
            #[cfg(test)]
            fail_region: None,
            panic_in: std::env::var(PANIC_IN_ENV).ok(),
        })
    }

    /// Runs every batch from now on from an ELF file of `files`
    /// (`--jit-elf`), or from anonymous memory with None.
    pub fn run_from_files(&mut self, files: Option<Arc<ElfCodeFiles>>) {
        self.elf = files;
    }

    /// True if batches run from ELF files.
    pub fn runs_from_files(&self) -> bool {
        self.elf.is_some()
    }

    /// Removes the code files made ahead of time and not used (zeros
    /// only, never mapped): this JIT compiles nothing more.
    pub fn discard_prepared_files(&self) {
        if let Some(files) = &self.elf {
            files.discard_prepared();
        }
    }

    /// Keeps every region's IR text from now on, for [`Finished::listing`].
    pub fn keep_ir(&mut self) {
        self.keep_ir = true;
    }

    /// Holds at most `limit` bytes of code memory from now on (whole
    /// pages, the room after each region included).
    pub fn set_limit(&mut self, limit: usize) {
        self.limit = limit;
    }

    /// The code limit ([`CodeGen::set_limit`]; `usize::MAX`: none).
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Bytes of code memory held now.
    pub fn held(&self) -> usize {
        self.chunks.bytes()
    }

    /// Bytes of pinned code held ([`Placement::Pinned`]).
    pub fn pinned(&self) -> usize {
        self.pinned
    }

    /// The most bytes the code that may be evicted can ever hold: the
    /// limit less the pinned code.
    pub fn room(&self) -> usize {
        self.limit.saturating_sub(self.pinned)
    }

    /// The host calling convention.
    pub fn call_conv(&self) -> CallConv {
        self.isa.default_call_conv()
    }

    /// The id of the region of `func` with `role`: declared the first time
    /// (anonymous for Cranelift: the sinks get the name, [`region_name`]),
    /// the same id when the function is compiled again after its code died,
    /// so the declarations do not grow with the compiles.
    ///
    /// # Errors
    /// The module's message.
    pub fn declare(&mut self, module: &Bytecode, func: u32, role: Role) -> Result<FuncId, String> {
        if let Some(&id) = self.declared.get(&(func, role)) {
            return Ok(id);
        }
        let sig = role.signature(&module.functions[func as usize], self.call_conv());
        let id = (self.module)
            .declare_anonymous_function(&sig)
            .map_err(|e| e.to_string())?;
        self.declared.insert((func, role), id);
        Ok(id)
    }

    /// Builds the body of region `id` (declared by [`CodeGen::declare`]) with
    /// `build`, compiles it and adds it to the batch.
    ///
    /// # Errors
    /// Cranelift's message, or the unwind table not describable.
    ///
    /// # Safety
    /// The body `build` writes must do what `role` promises of `func`'s
    /// code, because [`CodeGen::finish`] hands its entry point out as that
    /// role's function type for the VM to call: an entry shim or a
    /// trampoline follows the entry ABI (`vm::abi`) for `func`, an OSR
    /// variant continues an interpreted activation of `func` as `OsrFn`
    /// describes, and a native function is what those call.
    pub unsafe fn define(
        &mut self,
        module: &Bytecode,
        func: u32,
        role: Role,
        id: FuncId,
        build: impl FnOnce(&mut FunctionBuilder<'_>, &mut JITModule, &Imports),
    ) -> Result<(), String> {
        let name = region_name(module, func, role);
        self.ctx.func.signature =
            role.signature(&module.functions[func as usize], self.call_conv());
        self.ctx.func.name = UserFuncName::user(0, id.as_u32());
        // A panic in the build or in Cranelift is this region's compile
        // error (`panic_guard`): the function stays interpreted.
        let defined = panic_guard::catching(|| {
            if self.panic_in.as_deref() == Some(name.as_str()) {
                panic!("{PANIC_IN_ENV} asked for a panic in {name}");
            }
            {
                let mut b = FunctionBuilder::new(&mut self.ctx.func, &mut self.fctx);
                build(&mut b, &mut self.module, &self.imports);
                b.finalize(self.module.target_config());
            }
            let ir = self.keep_ir.then(|| self.ctx.func.display().to_string());
            self.compile(id, name.clone(), func, role, ir)
        })
        .map_err(|panicked| format!("{name}: {panicked}"))
        .and_then(|defined| defined);
        if defined.is_err() {
            // A panic may have left the builder half-way through a function.
            self.fctx = FunctionBuilderContext::new();
        }
        self.module.clear_context(&mut self.ctx);
        self.batch.push(defined?);
        Ok(())
    }

    /// Compiles `self.ctx` as region `id`: its size, unwind entry and line
    /// rows.
    fn compile(
        &mut self,
        id: FuncId,
        name: String,
        func: u32,
        role: Role,
        ir: Option<String>,
    ) -> Result<Defined, String> {
        #[cfg(test)]
        if self.fail_region.as_deref() == Some(name.as_str()) {
            return Err(format!("{name}: injected failure"));
        }
        // Compiled here, placed by `finish` once the whole batch's size is
        // known (what `JITModule::define_function` does in one step).
        (self.ctx)
            .compile(&*self.isa, &mut ControlPlane::default())
            .map_err(|e| format!("{name}: {:?}", e.inner))?;
        let compiled = self.ctx.compiled_code().ok_or("no compiled code")?;
        let size = compiled.code_buffer().len();
        let code = compiled.code_buffer().to_vec();
        let align = (compiled.buffer.alignment as u64)
            .max(self.isa.function_alignment().minimum as u64)
            .max(self.isa.symbol_alignment());
        let relocs = (compiled.buffer.relocs().iter())
            .map(|r| ModuleReloc::from_mach_reloc(r, &self.ctx.func, id))
            .collect();
        let fde = match compiled.create_unwind_info(&*self.isa) {
            Ok(Some(ClifUnwind::SystemV(info))) => {
                let mut fde = info.to_fde(perfsupport::unwind::REGION_START);
                epilogue_cfi::add_return_rows(&mut fde, &*self.isa, &compiled.buffer, &code);
                Some(fde)
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
            prologue_end: prologue_end(&compiled.buffer),
        });
        let unwind_bytes = self
            .unwind_bytes(size, fde.as_ref())
            .map_err(|e| format!("{name}: {e}"))?;
        Ok(Defined {
            id,
            name,
            func,
            role,
            size,
            code,
            align,
            relocs,
            fde,
            unwind_bytes,
            rows,
            ir,
        })
    }

    /// The bytes perf maps after a region of `size` bytes with `fde`
    /// (perfsupport's `reserved_region_size`: the jitdump's unwind table
    /// sits right behind the code). A function with many returns has a
    /// longer table (rows at each `ret`, [`epilogue_cfi`]).
    fn unwind_bytes(
        &self,
        size: usize,
        fde: Option<&FrameDescriptionEntry>,
    ) -> Result<usize, String> {
        let unwind = match (&self.cie, fde) {
            (Some(cie), Some(fde)) => Some(UnwindInfo { cie, fde }),
            _ => None,
        };
        let reserved = perfsupport::unwind::reserved_region_size(size as u64, unwind)
            .map_err(|e| format!("unwind table: {e}"))?;
        Ok(usize::try_from(reserved).map_err(|_| "unwind table too large")? - size)
    }

    /// True if regions are waiting for [`CodeGen::finish`].
    pub fn has_batch(&self) -> bool {
        !self.batch.is_empty()
    }

    // ANCHOR: finish
    /// Places the batch in a chunk of its own, makes it final and publishes
    /// it (see the module docs), with its line tables for vmprof if
    /// `vmprof_lines`; sink failures are added to `warnings`, for the VM's
    /// diagnostics.
    ///
    /// # Errors
    /// [`FinishError::NoRoom`] if the batch would take the JIT over its
    /// limit, [`FinishError::Failed`] with Cranelift's message if it cannot
    /// be placed or finalized. Either way nothing of it is published and
    /// the batch is dropped.
    pub fn finish(
        &mut self,
        module: &Bytecode,
        placement: Placement,
        vmprof_lines: bool,
        profilers: &Profilers,
        warnings: &mut Vec<String>,
    ) -> Result<Vec<Finished>, FinishError> {
        let batch = std::mem::take(&mut self.batch);
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let chunk = self.place(&batch, placement)?;
        let lines: Vec<Vec<LineEntry<'_>>> = (batch.iter()).map(|d| line_rows(module, d)).collect();
        if let Some(files) = &self.elf {
            let (addresses, cie) = (&self.addresses, self.cie.as_ref());
            let made = self.chunks.finalize_from(|start, staged| {
                // The regions as the file describes them: their bytes in
                // `staged`, at the chunk's offsets.
                let regions: Vec<CodeRegion<'_>> = (batch.iter().zip(&lines))
                    .map(|(d, rows)| {
                        let at = addresses[&d.id] - start;
                        staged_region(&staged[at..at + d.size], cie, d, rows)
                    })
                    .collect();
                // SAFETY: the open chunk is this batch's alone, reserved,
                // never touched and running nothing; `staged` holds its
                // bytes, relocated for it, in a separate allocation.
                unsafe { files.publish_staged(start, staged, &regions).map(drop) }
            });
            match made {
                Ok(None) => {}
                Ok(Some(e)) => {
                    if !std::mem::replace(&mut self.elf_warned, true) {
                        warnings.push(format!(
                            "toyvm: warning: --jit-elf: {e}; this batch and any other that \
                             fails so run from anonymous memory"
                        ));
                    }
                }
                Err(e) => {
                    for d in &batch {
                        self.addresses.remove(&d.id);
                    }
                    let held = self.held();
                    // SAFETY: nothing of the batch was handed out or described.
                    unsafe { self.chunks.free(chunk) };
                    if placement == Placement::Pinned {
                        // `place` counted the chunk as pinned.
                        self.pinned -= held - self.held();
                    }
                    return Err(FinishError::Failed(format!("JIT code memory: {e}")));
                }
            }
        }
        // The code is in place and executable now: the regions every
        // other profiler is told of borrow it where it runs.
        let regions: Vec<CodeRegion<'_>> = (batch.iter().zip(&lines))
            .map(|(d, rows)| region(&self.addresses, self.cie.as_ref(), d, rows))
            .collect();
        let mut live = LiveChunk {
            regions: regions.len(),
            ids: (batch.iter())
                .map(|d| (d.id, self.addresses[&d.id]))
                .collect(),
            ranges: (regions.iter())
                .map(|r| (r.code.as_ptr() as usize, r.code.len()))
                .collect(),
            unwind: system_unwind::Registrations::default(),
            vmprof_lines: Vec::new(),
        };
        if let Ok(eh_frame) = perfsupport::unwind::eh_frame_for_register_frame(&regions) {
            // SAFETY: perfsupport's builder writes CIE/FDE pairs with
            // absolute addresses of this batch's code, from the unwind
            // rows Cranelift computed for it, then the terminator; the
            // code stays mapped until the chunk's `LiveChunk::withdraw`
            // has dropped the registrations.
            unsafe { live.unwind.register(eh_frame) };
        }
        for failure in profilers.register(&regions) {
            warnings.push(format!("toyvm: warning: {failure}"));
        }
        if vmprof_lines {
            for (d, region) in batch.iter().zip(&regions) {
                if publish_vmprof_lines(module, d, region.code) {
                    live.vmprof_lines.push(region.code.as_ptr() as usize);
                }
            }
        }
        let listings: Vec<Option<Listing>> = (batch.iter().zip(&regions))
            .map(|(d, r)| d.ir.as_ref().map(|ir| Listing::new(&d.name, d.func, ir, r)))
            .collect();
        drop(regions);
        self.live.insert(chunk, live);
        Ok((batch.into_iter().zip(listings))
            .map(|(d, listing)| self.install(d, listing, chunk))
            .collect())
    }
    // ANCHOR_END: finish

    /// Places `batch` in a new chunk and makes it executable.
    fn place(&mut self, batch: &[Defined], placement: Placement) -> Result<ChunkId, FinishError> {
        let mut needed =
            code_memory::chunk_bytes(batch.iter().map(|d| (d.size, d.align as usize, d.tail())));
        if self.elf.is_some() {
            // Room after the last region for the file's unwind tables.
            let tables = batch
                .iter()
                .filter(|d| d.fde.is_some() && self.cie.is_some());
            needed += perfsupport::elf_code::spare_bytes_for(tables.map(|d| d.unwind_bytes));
        }
        let page = super::arena::page_size();
        let held = self.held();
        let lead = if self.elf.is_some() { page } else { 0 };
        let whole_pages = lead + needed.div_ceil(page) * page;
        if placement == Placement::UnderLimit && held + whole_pages > self.limit {
            return Err(FinishError::NoRoom {
                needed: whole_pages,
                held,
                limit: self.limit,
                room: self.room(),
            });
        }
        // Under --jit-elf the chunk's first page holds the file's headers,
        // and the batch is staged until its file is mapped there.
        let opened = if self.elf.is_some() {
            self.chunks.open_staged(lead, needed)
        } else {
            self.chunks.open_after(lead, needed)
        };
        let chunk = opened.map_err(|e| FinishError::Failed(format!("JIT code memory: {e}")))?;
        let opened = self.held() - held;
        match self.write_batch(batch) {
            Ok(()) => {
                if placement == Placement::Pinned {
                    self.pinned += opened;
                }
                Ok(chunk)
            }
            Err(failed) => {
                for d in batch {
                    self.addresses.remove(&d.id);
                }
                // Open (a write failed) or held (making it executable
                // failed): either way it goes back.
                self.chunks.abandon();
                // SAFETY: nothing of the batch was handed out or described.
                unsafe { self.chunks.free(chunk) };
                Err(FinishError::Failed(failed))
            }
        }
    }

    /// Gives each region of `batch` its address in the open chunk, writes
    /// its code there relocated for that address ([`relocate`]), and makes
    /// the chunk executable (under `--jit-elf`, `finish` does). Addresses first: regions of one batch call
    /// each other.
    fn write_batch(&mut self, batch: &[Defined]) -> Result<(), String> {
        let mut starts = Vec::with_capacity(batch.len());
        for d in batch {
            let at = (self.chunks.allocate(d.size, d.align as usize, d.tail()))
                .map_err(|e| format!("{}: {e}", d.name))?;
            self.addresses.insert(d.id, at);
            starts.push(at);
        }
        for (d, &at) in batch.iter().zip(&starts) {
            let mut code = d.code.clone();
            relocate::apply(&mut code, at, &d.relocs, |target| self.resolve(target))
                .map_err(|e| format!("{}: {e}", d.name))?;
            (self.chunks.write(at, &code)).map_err(|e| format!("{}: {e}", d.name))?;
        }
        if self.elf.is_some() {
            // `finish` publishes the chunk from a file once it has the
            // batch's regions.
            return Ok(());
        }
        (self.chunks.finalize()).map_err(|e| format!("JIT code memory: {e}"))
    }

    /// The address of a relocation's target: a region of this JIT, an
    /// import (a helper or `interp_entry`), or a libcall Cranelift's
    /// legalization added (found in the process's symbols).
    fn resolve(&self, target: &ModuleRelocTarget) -> Option<usize> {
        match *target {
            ModuleRelocTarget::User {
                namespace: 0,
                index,
            } => {
                let id = FuncId::from_u32(index);
                (self.addresses.get(&id).or(self.imports_at.get(&id))).copied()
            }
            ModuleRelocTarget::LibCall(call) => {
                let name = (cranelift_module::default_libcall_names())(call);
                let name = std::ffi::CString::new(name).ok()?;
                // SAFETY: dlsym with the default search scope and a
                // NUL-terminated name has no other precondition.
                let at = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
                (!at.is_null()).then_some(at as usize)
            }
            _ => None,
        }
    }

    // ANCHOR: release
    /// Says that `regions` regions of `chunk` are dead: nothing runs in
    /// them, nothing calls them any more and no entry table or cache holds
    /// them. When all of a chunk's regions are dead it is withdrawn from
    /// the unwinder, vmprof and `profilers` (in that order), then freed.
    /// Returns the bytes freed; the sinks' failures are added to
    /// `warnings`.
    ///
    /// # Safety
    /// The regions are truly dead (as above), and each is released once.
    pub unsafe fn release(
        &mut self,
        chunk: ChunkId,
        regions: usize,
        profilers: &Profilers,
        warnings: &mut Vec<String>,
    ) -> usize {
        let Some(live) = self.live.get_mut(&chunk) else {
            return 0;
        };
        live.regions = live.regions.saturating_sub(regions);
        if live.regions > 0 {
            return 0;
        }
        let mut live = self.live.remove(&chunk).expect("present");
        let ranges: Vec<(usize, usize)> = live.ranges.clone();
        let live_ids = std::mem::take(&mut live.ids);
        live.withdraw();
        for failure in profilers.retire(&ranges) {
            warnings.push(format!("toyvm: warning: {failure}"));
        }
        for (id, at) in live_ids {
            if self.addresses.get(&id) == Some(&at) {
                self.addresses.remove(&id);
            }
        }
        let before = self.chunks.bytes();
        // SAFETY: every region of the chunk is dead (the caller's
        // contract) and withdrawn from everything that described it.
        unsafe { self.chunks.free(chunk) };
        before - self.chunks.bytes()
    }
    // ANCHOR_END: release

    /// The entry points of `d` according to its role.
    fn install(&self, d: Defined, listing: Option<Listing>, chunk: ChunkId) -> Finished {
        let ptr = self.addresses[&d.id] as *const u8;
        let (mut osr, mut entry) = (None, None);
        match d.role {
            Role::Native => {}
            Role::EntryShim | Role::Trampoline => {
                // SAFETY: `ptr` is a finalized function with the entry ABI
                // signature (`Role::signature`), whose body follows the
                // entry ABI for `d.func` (`define`'s contract). The code lives as long as this
                // `CodeGen`, owned by the tier-up hook, which `tier::run_main`
                // borrows for the whole run and which restores the entry
                // table before the borrow ends.
                entry = Some(unsafe { std::mem::transmute::<*const u8, EntryFn>(ptr) });
            }
            Role::Osr => {
                // SAFETY: `ptr` is a finalized OSR variant of `d.func` with
                // the `OsrFn` signature (`Role::signature`) and its
                // behaviour (`define`'s contract).
                osr = Some(unsafe { std::mem::transmute::<*const u8, OsrFn>(ptr) });
            }
        }
        Finished {
            func: d.func,
            role: d.role,
            osr,
            entry,
            listing,
            chunk,
        }
    }
}

/// The address of every import ([`Imports::table`]) by the id `module`
/// declared it with.
fn imports_by_id(module: &JITModule) -> HashMap<FuncId, usize> {
    (Imports::table().into_iter())
        .filter_map(|import| match module.get_name(import.symbol) {
            Some(cranelift_module::FuncOrDataId::Func(id)) => Some((id, import.address as usize)),
            _ => None,
        })
        .collect()
}

/// The final code of `d`, placed at `addresses[d.id]`, as a region for the
/// sinks.
fn region<'a>(
    addresses: &'a HashMap<FuncId, usize>,
    cie: Option<&'a CommonInformationEntry>,
    d: &'a Defined,
    rows: &'a [LineEntry<'a>],
) -> CodeRegion<'a> {
    let start = addresses[&d.id] as *const u8;
    // SAFETY: `write_batch` wrote `size` bytes of final code at `start`
    // (or `finish` mapped them there from a file), now mapped read+exec
    // until its chunk is released or the `CodeGen` owning `addresses` is
    // dropped; both need `&mut` of it, which the borrow of `addresses` for
    // `'a` rules out while the slice lives.
    let code = unsafe { std::slice::from_raw_parts(start, d.size) };
    staged_region(code, cie, d, rows)
}

/// The region of `d` whose code is `code`: where it runs, or a staged
/// copy.
fn staged_region<'a>(
    code: &'a [u8],
    cie: Option<&'a CommonInformationEntry>,
    d: &'a Defined,
    rows: &'a [LineEntry<'a>],
) -> CodeRegion<'a> {
    let region = CodeRegion::new(code, &d.name).with_lines(rows);
    match (cie, &d.fde) {
        (Some(cie), Some(fde)) => region.with_unwind(UnwindInfo { cie, fde }),
        _ => region,
    }
}

impl Drop for CodeGen {
    /// Withdraws every chunk's unwind info and vmprof line tables, then
    /// frees the code memory.
    fn drop(&mut self) {
        // First: an address of this code may be handed to other code, and
        // neither the unwinder nor the sampler may find the old entries.
        for (_, live) in self.live.drain() {
            live.withdraw();
        }
        // SAFETY: freeing the code memory: no compiled code runs or is
        // called again, because
        // the code was only reachable through the VM's entry table (restored
        // to the interpreter when `tier::run_main` ended, before its hook,
        // which owns `self`, could be dropped), the OSR entries the hook
        // handed out (each called at once, during the run) and the
        // profiler sinks (finished or dropped by the hook before `self`;
        // perf map and jitdump files only name addresses).
        unsafe { self.chunks.free_all() };
    }
}

// ANCHOR: line_rows
/// The line table of `d` for the sinks: one row per change of source
/// position, inside the code.
fn line_rows<'a>(module: &'a vm::bytecode::Module, d: &Defined) -> Vec<LineEntry<'a>> {
    let mut rows: Vec<LineEntry<'a>> = Vec::with_capacity(d.rows.len());
    for &(offset, attribution) in &d.rows {
        let (line, column) = line_table::position(module, d.func, attribution);
        let same = |r: &LineEntry<'_>| r.line == line && r.column == column;
        if offset as usize >= d.size || rows.last().is_some_and(same) {
            continue;
        }
        rows.push(LineEntry {
            offset,
            file: &module.path,
            line,
            column,
        });
    }
    rows
}
// ANCHOR_END: line_rows

// ANCHOR: publish_vmprof_lines
/// Publishes the line table of a compiled body (a native function or an
/// OSR variant; shims and trampolines have no lines of their own) for the
/// vmprof sampler: each row names the function the code belongs to and its
/// line, and for inlined code also the caller and the call's line. Called
/// before the code can run. False if `d` has no lines of its own.
fn publish_vmprof_lines(module: &vm::bytecode::Module, d: &Defined, code: &[u8]) -> bool {
    if !matches!(d.role, Role::Native | Role::Osr) {
        return false;
    }
    let line = |attribution| line_table::position(module, d.func, attribution).0;
    let rows = (d.rows.iter())
        .map(|&(offset, attribution)| match attribution {
            line_table::Attribution::Inlined { func, call_pc, .. } => CodeLineRow {
                offset,
                key: func,
                line: line(attribution),
                // The caller, on the line of the call (an inlined call
                // without `--vmprof-inlined` has no record of its own).
                outer_key: d.func,
                outer_line: line(line_table::Attribution::Site { pc: call_pc }),
            },
            _ => CodeLineRow::new(offset, d.func, line(attribution)),
        })
        .collect();
    perfsupport::vmprof::publish_code_lines(code.as_ptr(), code.len(), rows);
    true
}
// ANCHOR_END: publish_vmprof_lines

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
    let mut builder = cranelift_native::builder().map_err(|e| format!("host ISA: {e}"))?;
    if cfg!(target_arch = "aarch64") {
        // Said, not left to defaults: return addresses stay plain (no
        // pointer authentication), so every unwinder reads `x30` and the
        // saved frame record as addresses, and no BTI landing pads (our
        // code is entered only through calls we emit).
        for flag in ["sign_return_address", "use_bti"] {
            builder
                .set(flag, "false")
                .map_err(|e| format!("{flag}: {e}"))?;
        }
    }
    builder
        .finish(settings::Flags::new(flags))
        .map_err(|e| format!("host ISA: {e}"))
}
// ANCHOR_END: make_isa

/// Where Cranelift's prologue ends in `buffer`: the offset just after its
/// last unwind step (pushing the frame pointer, setting it, saving each
/// callee-saved register). On x86-64 only prologues record unwind steps.
fn prologue_end(buffer: &cranelift_codegen::MachBufferFinalized<cranelift_codegen::Final>) -> u32 {
    (buffer.unwind_info.iter())
        .map(|&(offset, _)| offset)
        .max()
        .unwrap_or(0)
}
