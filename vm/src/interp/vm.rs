//! The [`Vm`]: the state of one running script, shared by the
//! interpreter and compiled code. What a JIT may touch of it is
//! [`crate::abi`] (the entry ABI, field offsets, error recording); its
//! fields are private to this crate.
//!
//! # The value stack and frames
//!
//! One [`Region`] of `(max_depth + 1) * max_frame_size` slots, mapped once
//! and never moved. A callee's window starts at the caller's call area
//! (see [`crate::bytecode`]), so the stack can never overflow while
//! `depth <= max_depth`.
//!
//! # GC roots
//!
//! The ref registers ([`crate::bytecode::Function::ref_regs`]) of every
//! frame in `frames[1..=depth]`, the string constants, and the argument
//! strings. The interpreter collects only between instructions, after an
//! allocating instruction stored its result.

use std::io::Write;
use std::time::Instant;

use super::frame::{EntryFn, FrameRecord, STATUS_ERROR};
use super::handlers::{Slot, slots};
use super::locations::Locations;
use super::tier;
use crate::bytecode::{Const, Module};
use crate::runtime::heap::Heap;
use crate::runtime::output::Output;
use crate::runtime::region::Region;
use crate::runtime::{RuntimeError, TraceEntry};

/// What the interpreter needs about a function, resolved once per VM.
pub(crate) struct FnRuntime {
    /// The constant pool as raw slots (strings already allocated).
    pub(crate) consts: Box<[u64]>,
    /// Ref registers that are not parameters: zeroed on entry.
    pub(crate) zero_regs: Box<[u8]>,
    /// Tier-up countdown: decremented per call and per loop back-edge;
    /// below zero the interpreter asks the tier-up hook (see [`tier`]).
    pub(crate) hotness: i32,
    /// The code as the interpreter runs it: each instruction with its
    /// handler (`interp::slots`).
    pub(crate) slots: Box<[Slot]>,
}

// ANCHOR: vm_struct
/// The VM context passed (as a raw pointer) to every entry. The fields the
/// JIT touches come first, `#[repr(C)]`.
#[repr(C)]
pub struct Vm<'m> {
    /// Number of active frames (`<main>` is frame 1).
    pub(crate) depth: usize,
    /// Most frames that may be active at once (`--max-depth`).
    pub(crate) max_depth: usize,
    /// `frames[1..=depth]` describe the active frames.
    pub(crate) frames: *mut FrameRecord,
    /// Register 0 of `<main>`.
    pub(crate) stack_base: *mut u64,
    /// Entry point of every function, indexed like `module.functions`
    /// (points into `entries`; a raw pointer so JIT code can load from it
    /// at a fixed offset). Change entries with [`Vm::set_entry`].
    pub(crate) entry_table: *mut EntryFn,
    /// Lowest native stack pointer at which compiled code may run a frame
    /// (0: no limit); see [`crate::runtime::native_stack`].
    pub(crate) stack_limit: usize,
    // ANCHOR_END: vm_struct
    /// Per-function data for the interpreter.
    pub(crate) funcs: Vec<FnRuntime>,
    /// The program being run.
    pub(crate) module: &'m Module,
    /// Strings and arrays.
    pub(crate) heap: Heap,
    /// Buffered stdout.
    pub(crate) out: Output<'m>,
    /// The error that stopped the script, if any.
    pub(crate) error: Option<RuntimeError>,
    /// Frames active at the error, innermost first.
    pub(crate) trace: Vec<TraceEntry>,
    /// The script arguments as string objects (roots).
    pub(crate) args: Vec<u64>,
    /// When the VM started (`clock()` counts from here).
    pub(crate) start: Instant,
    /// Scratch text for `print` and `str`, reused to avoid allocations.
    pub(crate) scratch: String,
    /// The JIT, if any (see [`tier`]), installed by [`super::run_main`]
    /// only while it borrows the hook.
    pub(crate) tier_up: Option<std::ptr::NonNull<dyn tier::TierUp>>,
    /// Set by a vmprof [`crate::vmprof::Session`] asked for inlined frames:
    /// compiled code then writes a frame record for each call it inlines,
    /// so those calls show in profiles.
    pub(crate) vmprof_inlined_frames: bool,
    /// Set by a vmprof [`crate::vmprof::Session`] that records lines: the
    /// interpreter stores the location of each instruction that starts a
    /// line in its frame record, compiled code each call's, and the JIT
    /// publishes its line tables.
    pub(crate) vmprof_locations: Option<Locations>,
    /// The vmprof code id of `<main>`, set by a vmprof
    /// [`crate::vmprof::Session`]: a JIT's compiler thread roots its own
    /// samples there, so every sample of the profile shares one root.
    pub(crate) vmprof_main: Option<perfsupport::vmprof::CodeId>,
    /// Where the tier-up hook and the runtime write diagnostics (warnings,
    /// `--jit-stats`): the driver's stderr (see [`Vm::set_diagnostics`]).
    diagnostics: &'m mut (dyn Write + Send),
    /// Owns the entry table; only accessed through `entry_table`.
    entries: Box<[EntryFn]>,
    stack: Region<u64>,
    frame_records: Region<FrameRecord>,
}

impl<'m> Vm<'m> {
    /// Creates a VM for `module`, with every entry pointing at
    /// [`super::interp_entry`]. Fails with a message if the module
    /// does not pass [`crate::bytecode::verify`] or the stack for
    /// `max_depth` frames (at least 1) cannot be reserved.
    pub fn new(
        module: &'m Module,
        args: Vec<String>,
        max_depth: usize,
        stdout: &'m mut (dyn Write + Send),
    ) -> Result<Box<Vm<'m>>, String> {
        crate::bytecode::verify(module).map_err(|e| format!("invalid bytecode: {e}"))?;
        let max_depth = max_depth.max(1);
        let entry: EntryFn = super::interp_entry;
        let too_big = || format!("--max-depth {max_depth} is too large: cannot reserve the stack");
        let stack_slots = max_depth
            .checked_add(1)
            .and_then(|n| n.checked_mul(module.max_frame_size()))
            .ok_or_else(too_big)?;
        let stack = Region::<u64>::zeroed(stack_slots).ok_or_else(too_big)?;
        let frame_records = Region::<FrameRecord>::zeroed(max_depth + 1).ok_or_else(too_big)?;
        let mut heap = Heap::default();
        let strings: Vec<u64> = module
            .strings
            .iter()
            .map(|s| heap.alloc_str(s.as_str()))
            .collect();
        let funcs = module
            .functions
            .iter()
            .map(|f| FnRuntime {
                consts: f
                    .consts
                    .iter()
                    .map(|c| match *c {
                        Const::Int(i) => i as u64,
                        Const::Float(x) => x.to_bits(),
                        Const::Str(s) => strings[s as usize],
                    })
                    .collect(),
                zero_regs: f
                    .ref_regs
                    .iter()
                    .copied()
                    .filter(|&r| (r as usize) >= f.params.len())
                    .collect(),
                hotness: i32::MAX,
                slots: slots(f, false),
            })
            .collect();
        let args = args.into_iter().map(|a| heap.alloc_str(a)).collect();
        let mut entries = vec![entry; module.functions.len()].into_boxed_slice();
        Ok(Box::new(Vm {
            entry_table: entries.as_mut_ptr(),
            entries,
            stack_limit: 0,
            depth: 0,
            max_depth,
            frames: frame_records.as_ptr(),
            stack_base: stack.as_ptr(),
            funcs,
            module,
            heap,
            out: Output::new(stdout),
            error: None,
            trace: Vec::new(),
            args,
            start: Instant::now(),
            scratch: String::new(),
            tier_up: None,
            vmprof_inlined_frames: false,
            vmprof_locations: None,
            vmprof_main: None,
            // A zero-sized writer: leaking it allocates nothing.
            diagnostics: Box::leak(Box::new(std::io::sink())),
            stack,
            frame_records,
        }))
    }

    /// Makes calls of function `func` go to `entry` (the JIT installs
    /// compiled code or trampolines this way). Returns false if there is no
    /// such function.
    ///
    /// # Safety
    /// `entry` must follow the entry ABI of the module docs for `func`
    /// (depth check, frame record, ref registers, status, result in
    /// `base[0]`) for as long as this VM runs.
    pub unsafe fn set_entry(&mut self, func: u32, entry: EntryFn) -> bool {
        if func as usize >= self.entries.len() {
            return false;
        }
        // SAFETY: in bounds; all access to the table goes through
        // `entry_table` (the box only owns it), so this write aliases
        // nothing.
        unsafe { *self.entry_table.add(func as usize) = entry };
        true
    }

    /// The current entry of function `func`.
    pub fn entry(&self, func: u32) -> Option<EntryFn> {
        // SAFETY: in bounds, see `set_entry`.
        ((func as usize) < self.entries.len())
            .then(|| unsafe { *self.entry_table.add(func as usize) })
    }

    /// The script being run.
    pub fn module(&self) -> &'m Module {
        self.module
    }

    /// The runtime constant pool of `func` (strings as references); empty
    /// for a function that does not exist.
    pub fn constants(&self, func: u32) -> &[u64] {
        self.funcs.get(func as usize).map_or(&[], |rt| &rt.consts)
    }

    /// True if compiled code should write a frame record for each call it
    /// inlines (set by a vmprof [`crate::vmprof::Session`] asked for
    /// inlined frames, so those calls show in profiles).
    pub fn vmprof_inlined_frames(&self) -> bool {
        self.vmprof_inlined_frames
    }

    /// True while a vmprof session records lines (`--vmprof-lines`):
    /// compiled code must then store each call's location
    /// ([`Vm::vmprof_locations`]) in its frame record
    /// ([`crate::abi::FrameRecord::pc`]) before the call, and the JIT
    /// publish each region's line table
    /// (`perfsupport::vmprof::publish_code_lines`) before it runs.
    pub fn vmprof_lines(&self) -> bool {
        self.vmprof_locations.is_some()
    }

    /// While a vmprof session records lines: the location of each
    /// instruction, as frame records hold it (see
    /// [`crate::abi::Locations`]).
    pub fn vmprof_locations(&self) -> Option<&Locations> {
        self.vmprof_locations.as_ref()
    }

    /// Starts recording lines for a vmprof session ([`Vm::vmprof_lines`]):
    /// gives the interpreter slots whose line starts store into the frame
    /// record, and notes where they are.
    pub(crate) fn record_lines(&mut self) {
        for (rt, f) in self.funcs.iter_mut().zip(&self.module.functions) {
            rt.slots = slots(f, true);
        }
        let code = self.funcs.iter().map(|rt| &*rt.slots);
        self.vmprof_locations = Some(Locations::of(code));
    }

    /// The vmprof code id of `<main>` while a vmprof session runs. The
    /// reader (`vmprof.read_profile(...).get_tree()`) takes the first
    /// sample's root as every sample's root, so a thread of the VM's own
    /// (a JIT's compiler thread) pushes this id before its own frame.
    pub fn vmprof_main(&self) -> Option<perfsupport::vmprof::CodeId> {
        self.vmprof_main
    }

    /// Number of active frames (0 outside a run).
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// Sets the lowest native stack pointer at which compiled code may run a
    /// frame (0: no limit; see [`crate::runtime::native_stack`]). A wrong value only makes
    /// deep recursion fail sooner, or reach the thread's guard page.
    pub fn set_stack_limit(&mut self, limit: usize) {
        self.stack_limit = limit;
    }

    /// Takes the error that stopped the script, if any.
    pub fn take_error(&mut self) -> Option<RuntimeError> {
        self.error.take()
    }

    /// Writes out what the script printed so far.
    ///
    /// # Errors
    /// The stdout write error, as a runtime error.
    pub fn flush_output(&mut self) -> Result<(), RuntimeError> {
        self.out.flush()
    }

    /// Sends diagnostics (JIT warnings, `--jit-stats`, test backtraces) to
    /// `writer` from now on; until then they are discarded.
    pub fn set_diagnostics(&mut self, writer: &'m mut (dyn Write + Send)) {
        self.diagnostics = writer;
    }

    /// Where diagnostics go (see [`Vm::set_diagnostics`]).
    pub fn diagnostics(&mut self) -> &mut (dyn Write + Send) {
        &mut *self.diagnostics
    }

    /// Records the depth-limit error (an entry whose depth check failed:
    /// no trace entry, the frame never became active) and returns
    /// [`STATUS_ERROR`].
    #[cold]
    pub fn fail_depth_exceeded(&mut self) -> u32 {
        self.error = Some(RuntimeError::DepthExceeded(self.max_depth));
        STATUS_ERROR
    }

    /// Adds the trace entry of instruction `pc` of `func` (a call whose
    /// callee failed) and returns [`STATUS_ERROR`].
    #[cold]
    pub fn push_trace(&mut self, func: u32, pc: u32) -> u32 {
        self.trace.push(TraceEntry { func, pc });
        STATUS_ERROR
    }

    /// Records `error`, raised at instruction `pc` of `func`, and returns
    /// [`STATUS_ERROR`] for the caller to propagate.
    #[cold]
    pub fn fail(&mut self, error: RuntimeError, func: u32, pc: usize) -> u32 {
        self.error = Some(error);
        self.trace.push(TraceEntry {
            func,
            pc: pc as u32,
        });
        STATUS_ERROR
    }

    /// Runs a full collection. Must be called only between instructions,
    /// when every live reference is in a ref register of an active frame.
    pub(crate) fn collect(&mut self) {
        let module = self.module;
        let depth = self.depth;
        debug_assert!(depth < self.frame_records.len());
        let frames = self.frames;
        let frame_roots = (1..=depth).flat_map(move |d| {
            // SAFETY: `frames[1..=depth]` were written by the entries of the
            // active frames (see the entry ABI), inside the frame region.
            let rec = unsafe { *frames.add(d) };
            module.functions[rec.func as usize]
                .ref_regs
                .iter()
                .map(move |&r| {
                    // SAFETY: `r` < frame_size and the frame's window lies in
                    // the value stack (stack sizing in `new`).
                    unsafe { *rec.base.add(r as usize) }
                })
        });
        // Constant pools mix ints, floats and strings, so only the entries
        // that are strings are roots.
        let pools = module
            .functions
            .iter()
            .zip(&self.funcs)
            .flat_map(|(f, rt)| {
                f.consts
                    .iter()
                    .zip(rt.consts.iter())
                    .filter(|(c, _)| matches!(c, Const::Str(_)))
                    .map(|(_, &bits)| bits)
            });
        let roots: Vec<u64> = frame_roots
            .chain(pools)
            .chain(self.args.iter().copied())
            .collect();
        // SAFETY: the root invariant above: ref registers of active frames
        // hold null or live objects (zeroed on entry, written only with
        // references); constants and args are never freed while rooted.
        unsafe { self.heap.collect(roots.into_iter()) };
    }
}
