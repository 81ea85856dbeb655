//! The run-time state shared by the interpreter and (later) JIT code: the
//! [`Vm`] context, the entry-point ABI, the heap, errors and output.
//!
//! # The entry ABI
//!
//! Every Toy function is called through [`EntryFn`]:
//! `unsafe extern "C" fn(vm: *mut Vm, func: u32, base: *mut u64) -> u32`.
//! `base` points at the callee's register 0 on the value stack, where the
//! caller has already written the arguments; the callee leaves its result
//! there too. The return value is a status: [`STATUS_OK`] or
//! [`STATUS_ERROR`]. On error the failing function has stored the error in
//! [`Vm::error`] and pushed its own [`TraceEntry`]; every caller pushes its
//! entry (the call instruction) and returns `STATUS_ERROR` too, so the
//! traceback is built while unwinding and costs nothing on the fast path.
//!
//! [`Vm::entry_table`] holds one entry per function, initially
//! [`crate::interp::interp_entry`] for all. A JIT replaces an entry with
//! compiled code (or, for perf, a per-function trampoline calling
//! `interp_entry` with its function index), and calls other functions
//! through the same table with the same ABI. An entry must, like the
//! interpreter's:
//! 1. fail with [`RuntimeError::DepthExceeded`] (without a trace entry of
//!    its own: the frame never became active) if `depth == max_depth`;
//! 2. otherwise write `frames[depth + 1] = FrameRecord { base, func }`
//!    (the GC, tracebacks and the vmprof sampler walk these), *then* store
//!    `depth + 1` (in this order: the sampler reads the records from a
//!    signal handler, see [`crate::vmprof`]), zero its ref registers that
//!    are not parameters, run, and store the old `depth` back on return,
//!    error or not.
//!
//! Install entries with the unsafe [`Vm::set_entry`]; [`offsets`] gives
//! the byte offsets of `depth`, `max_depth`, `frames` and `entry_table`
//! for generated code. Compiled code reports errors with [`Vm::fail`] and
//! can leave the allocating, printing and parsing instructions to
//! [`crate::interp::run_slow_op`]. Nothing ever unwinds (panics) across an
//! entry.
//!
//! # The value stack and frames
//!
//! One [`region::Region`] of `(max_depth + 1) * max_frame_size` slots,
//! mapped once and never moved. A callee's window starts at the caller's
//! call area (see [`crate::bytecode`]), so the stack can never overflow
//! while `depth <= max_depth`.
//!
//! # GC roots
//!
//! The ref registers ([`crate::bytecode::Function::ref_regs`]) of every
//! frame in `frames[1..=depth]`, the string constants, and the argument
//! strings. The interpreter collects only between instructions, after an
//! allocating instruction stored its result.

pub mod builtins;
pub mod error;
pub mod heap;
pub mod heap_limit;
pub mod native_stack;
pub mod output;
pub mod print;
pub mod region;
pub mod tier;

use std::io::Write;
use std::time::Instant;

pub use error::{RuntimeError, TraceEntry};
pub use output::{Output, PendingOutput};

use crate::bytecode::{Const, Module, Op};
use heap::Heap;
use region::Region;

// ANCHOR: entry_abi
/// The calling convention of every Toy function (see the module docs).
pub type EntryFn = unsafe extern "C" fn(vm: *mut Vm<'_>, func: u32, base: *mut u64) -> u32;

/// Status returned by an [`EntryFn`]: the call completed.
pub const STATUS_OK: u32 = 0;
/// Status returned by an [`EntryFn`]: an error is in [`Vm::error`].
pub const STATUS_ERROR: u32 = 1;

/// One active frame: where its registers are and which function it runs.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct FrameRecord {
    /// Register 0 of the frame.
    pub base: *mut u64,
    /// Index of the function running in it.
    pub func: u32,
}
// ANCHOR_END: entry_abi

// SAFETY: a null `base` and function 0 are a valid (inactive) record: all
// fields are plain integers and raw pointers.
unsafe impl region::Zeroable for FrameRecord {}

/// What the interpreter needs about a function, resolved once per VM.
pub struct FnRuntime {
    /// The function's bytecode (borrowed from the module).
    pub code: *const Op,
    /// The constant pool as raw slots (strings already allocated).
    pub consts: Box<[u64]>,
    /// Ref registers that are not parameters: zeroed on entry.
    pub zero_regs: Box<[u8]>,
    /// Tier-up countdown: decremented per call and per loop back-edge;
    /// below zero the interpreter asks [`Vm::tier_up`] (see [`tier`]).
    pub hotness: i32,
}

// ANCHOR: vm_struct
/// The VM context passed (as a raw pointer) to every entry. The fields the
/// JIT touches come first, `#[repr(C)]`.
#[repr(C)]
pub struct Vm<'m> {
    /// Number of active frames (`<main>` is frame 1).
    pub depth: usize,
    /// Most frames that may be active at once (`--max-depth`).
    pub max_depth: usize,
    /// `frames[1..=depth]` describe the active frames.
    pub frames: *mut FrameRecord,
    /// Register 0 of `<main>`.
    pub stack_base: *mut u64,
    /// Entry point of every function, indexed like `module.functions`
    /// (points into `entries`; a raw pointer so JIT code can load from it
    /// at a fixed offset). Change entries with [`Vm::set_entry`].
    pub entry_table: *mut EntryFn,
    /// Lowest native stack pointer at which compiled code may run a frame
    /// (0: no limit); see [`native_stack`].
    pub stack_limit: usize,
    // ANCHOR_END: vm_struct
    /// Per-function data for the interpreter.
    pub funcs: Vec<FnRuntime>,
    /// The program being run.
    pub module: &'m Module,
    /// Strings and arrays.
    pub heap: Heap,
    /// Buffered stdout.
    pub out: Output<'m>,
    /// The error that stopped the script, if any.
    pub error: Option<RuntimeError>,
    /// Frames active at the error, innermost first.
    pub trace: Vec<TraceEntry>,
    /// The script arguments as string objects (roots).
    pub args: Vec<u64>,
    /// When the VM started (`clock()` counts from here).
    pub start: Instant,
    /// Scratch text for `print` and `str`, reused to avoid allocations.
    pub scratch: String,
    /// The JIT, if any (see [`tier`]). Owned by whoever runs the VM, and
    /// kept alive and unmoved while the VM runs.
    pub tier_up: Option<std::ptr::NonNull<dyn tier::TierUp>>,
    /// Set by a vmprof [`crate::vmprof::Session`] asked for inlined frames:
    /// compiled code then writes a frame record for each call it inlines,
    /// so those calls show in profiles.
    pub vmprof_inlined_frames: bool,
    /// Owns the entry table; only accessed through `entry_table`.
    entries: Box<[EntryFn]>,
    stack: Region<u64>,
    frame_records: Region<FrameRecord>,
}

/// Byte offsets of the VM fields that generated code reads or writes.
pub mod offsets {
    use super::Vm;
    /// [`Vm::depth`] (`usize`).
    pub const DEPTH: usize = std::mem::offset_of!(Vm<'static>, depth);
    /// [`Vm::max_depth`] (`usize`).
    pub const MAX_DEPTH: usize = std::mem::offset_of!(Vm<'static>, max_depth);
    /// [`Vm::frames`] (`*mut FrameRecord`).
    pub const FRAMES: usize = std::mem::offset_of!(Vm<'static>, frames);
    /// [`Vm::entry_table`] (`*mut EntryFn`).
    pub const ENTRY_TABLE: usize = std::mem::offset_of!(Vm<'static>, entry_table);
    /// [`Vm::stack_limit`] (`usize`).
    pub const STACK_LIMIT: usize = std::mem::offset_of!(Vm<'static>, stack_limit);
}

impl<'m> Vm<'m> {
    /// Creates a VM for `module`, with every entry pointing at
    /// [`crate::interp::interp_entry`]. Fails with a message if the module
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
        let entry: EntryFn = crate::interp::interp_entry;
        let too_big = || format!("--max-depth {max_depth} is too large: cannot reserve the stack");
        let slots = max_depth
            .checked_add(1)
            .and_then(|n| n.checked_mul(module.max_frame_size()))
            .ok_or_else(too_big)?;
        let stack = Region::<u64>::zeroed(slots).ok_or_else(too_big)?;
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
                code: f.code.as_ptr(),
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
    pub fn collect(&mut self) {
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
