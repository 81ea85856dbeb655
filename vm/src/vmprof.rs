//! VMProf-style sampling of the Toy call stack (`toyvm run --vmprof FILE`).
//!
//! The sampler (in `perfsupport::vmprof`) records the running Toy functions
//! on every `SIGPROF`. It reads them from the VM's own frame records, which
//! every tier writes on every call anyway (for the GC and tracebacks):
//!
//! * every function is registered once as a vmprof code object named
//!   `toy:<function>:<line>:<path>` (the script body is `<main>`);
//! * [`Session::start`] describes `frames[1..=depth]` to the sampler with
//!   a [`FrameView`]: the record's `func` (a function index) is the key, a
//!   table maps it to the code id. Nothing is installed in the entry table
//!   and no tier pushes anything, so a profiled call costs what an
//!   unprofiled one does;
//! * what the sampler needs from the tiers is the order of two stores: a
//!   call writes its record *before* the depth that covers it (the entry
//!   ABI in [`crate::runtime`]), so a signal that lands between them sees
//!   the caller's stack, never a stale record;
//! * a leaf function that the JIT inlines has no frame of its own, so its
//!   time counts as its caller's (as perf sees it too), unless
//!   [`VmprofOptions::inlined_frames`] (`--vmprof-inlined`): then compiled
//!   code writes a record for each inlined call (a few stores around the
//!   inlined body, which is what `calls`-style code then pays).
//!
//! So every active Toy frame is in every sample, whichever tier runs it,
//! and every sample is rooted at `<main>`: also those taken on a JIT's
//! compiler thread, which shows `<main>` → [`COMPILER_FRAME`]
//! ([`Vm::vmprof_main`]), because vmprof's reader builds its tree under
//! the first sample's root.
//!
//! **Lines** ([`VmprofOptions::lines`], `--vmprof-lines`): every frame of
//! every sample also gets the line it is executing. Each record's
//! [`FrameRecord::pc`] holds the location of an instruction (the low 32
//! bits of its address in the interpreter's code, see
//! [`crate::abi::Locations`]), which the sampler maps to a bytecode index
//! with the function's base and to a line through its spans
//! ([`FrameLines`]): the interpreter stores it at every instruction that
//! starts a line (those instructions' slots get the storing handler, see
//! `interp::handlers::slots`), compiled code before every call; the
//! innermost compiled frame's line comes from the
//! interrupted program counter and the line tables the JIT publishes
//! (`perfsupport::vmprof::code_lines`). Without lines every tier runs the
//! code it runs unprofiled.

use std::path::PathBuf;
use std::time::Duration;

use perfsupport::vmprof::{
    self, CodeId, CodeIdCell, EnableOptions, FrameLines, FrameView, FrameViewGuard, ProfileSummary,
    VmprofError, install_frame_view,
};

use crate::interp::{FrameRecord, LOCATION_SHIFT, Vm};

/// The code-object class of Toy functions: names start with `toy:`.
pub const CODE_CLASS: &str = "toy";

/// The interpreter name written in profile headers; `toyvm report` only
/// accepts profiles that carry it.
pub const INTERP_NAME: &str = "toyvm";

/// The frame a JIT's compiler thread shows in samples taken on it while
/// it compiles (class `jit`), directly under `<main>` and never under
/// another Toy frame; named in the profile's metadata under
/// [`COMPILER_FRAME_META`].
pub const COMPILER_FRAME: &str = "<jit compiler>";

/// The metadata key that names [`COMPILER_FRAME`].
pub const COMPILER_FRAME_META: &str = "compiler_thread_frame";

/// How to profile a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VmprofOptions {
    /// The profile file to create (replaced if it exists).
    pub path: PathBuf,
    /// CPU time between samples.
    pub interval: Duration,
    /// Whether compiled code writes a frame record for each call it
    /// inlined, so those calls show in samples (`--vmprof-inlined`).
    /// Costs a few stores per inlined call; without it an inlined call's
    /// time counts as its caller's.
    pub inlined_frames: bool,
    /// Whether every frame of every sample records the line it is
    /// executing (`--vmprof-lines`, the vmprof lines mode).
    pub lines: bool,
    /// The host profiles the whole process: it enabled the profile before
    /// this VM started (with [`enable_options`]) and disables it after the
    /// last; the VM only joins it (its code and frames), and `path` and
    /// `interval` are the host's business.
    pub join: bool,
}

/// The options of the profile a [`Session`] with `options` starts: also
/// what a host that profiles its whole process passes to
/// `perfsupport::vmprof::enable_path` (see [`VmprofOptions::join`]).
pub fn enable_options(options: &VmprofOptions, script: &str) -> EnableOptions {
    let mut enable = EnableOptions::new(INTERP_NAME);
    enable.interval = options.interval;
    enable.lines = options.lines;
    enable.meta.push(("script".to_owned(), script.to_owned()));
    enable
        .meta
        .push((COMPILER_FRAME_META.to_owned(), COMPILER_FRAME.to_owned()));
    enable
}

impl VmprofOptions {
    /// Profiling into `path` every [`vmprof::DEFAULT_INTERVAL`] (1 ms).
    pub fn new(path: impl Into<PathBuf>) -> VmprofOptions {
        VmprofOptions {
            path: path.into(),
            interval: vmprof::DEFAULT_INTERVAL,
            inlined_frames: false,
            lines: false,
            join: false,
        }
    }
}

/// A running profile of one VM. Dropping it without [`Session::finish`]
/// (a panic, an early return) still stops the sampler and completes the
/// file.
pub struct Session {
    finished: bool,
    /// The profile is this session's (not a whole-process one it joined).
    owns_profile: bool,
    /// Points the sampler at the VM's frame records until dropped.
    view: Option<FrameViewGuard>,
    /// The VM's code ids, retired when the session ends: the VM's code
    /// objects die with it, and later profiles must not name them.
    codes: Vec<CodeId>,
}

impl Session {
    /// Registers every function of `vm`'s module, starts the sampler
    /// writing to `options.path` (unless it joins the host's profile,
    /// [`VmprofOptions::join`]), and points it at `vm`'s frame records.
    ///
    /// Call it before a JIT starts (so compiled code knows whether to write
    /// records for inlined calls) and before running `<main>`, so every sample is
    /// rooted at `<main>`. On error nothing is installed and the VM runs
    /// unprofiled.
    ///
    /// # Safety
    /// `vm` stays alive at its address, and runs only on this thread, until
    /// the session is finished or dropped (the sampler's signal handler
    /// reads `vm.depth` and the frame records).
    pub unsafe fn start(vm: &mut Vm<'_>, options: &VmprofOptions) -> Result<Session, VmprofError> {
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
        let main_code = code_ids.get(module.main as usize).copied();
        let codes = code_ids.to_vec();
        if options.join {
            if !vmprof::is_enabled() {
                vmprof::retire_code(codes);
                return Err(VmprofError::NotEnabled);
            }
        } else if let Err(e) =
            vmprof::enable_path(&options.path, &enable_options(options, &module.path))
        {
            vmprof::retire_code(codes);
            return Err(e);
        }
        if options.lines {
            vm.record_lines();
        }
        // ANCHOR: frame_view
        let view = FrameView {
            depth: &vm.depth,
            records: vm.frames.cast_const().cast(),
            first: 1, // frames[0] is unused: `<main>` is frame 1
            stride: size_of::<FrameRecord>(),
            key_offset: std::mem::offset_of!(FrameRecord, func),
            ids: code_ids,
            lines: (vm.vmprof_locations())
                .filter(|_| options.lines)
                .map(|locations| FrameLines {
                    location_offset: std::mem::offset_of!(FrameRecord, pc),
                    // A record's `pc` is an instruction's location: its
                    // function's base plus 16 bytes per instruction.
                    bases: locations.bases().into(),
                    shift: LOCATION_SHIFT,
                    // Per function, the line of each bytecode index.
                    lines: (module.functions.iter())
                        .map(|f| f.spans.iter().map(|span| span.line).collect())
                        .collect(),
                }),
        };
        // SAFETY: the caller keeps `vm` alive and in place on this thread
        // until the session ends, and the guard is dropped with the
        // session; the frame records never move (one mapping for the VM's
        // life), and every tier writes a record before the depth covering
        // it (the entry ABI).
        let view = unsafe { install_frame_view(view) };
        // ANCHOR_END: frame_view
        vm.vmprof_inlined_frames = options.inlined_frames;
        vm.vmprof_main = main_code;
        Ok(Session {
            finished: false,
            owns_profile: !options.join,
            view: Some(view),
            codes,
        })
    }

    /// Stops the sampler and completes the file: the remaining samples,
    /// the code names and the trailer.
    /// A session that joined the host's profile only leaves it: the
    /// summary is then empty.
    pub fn finish(mut self) -> Result<ProfileSummary, VmprofError> {
        self.finished = true;
        let summary = match self.owns_profile {
            true => vmprof::disable(),
            false => Ok(ProfileSummary::default()),
        };
        self.leave();
        summary
    }

    /// Points the sampler away from the VM and retires its code ids.
    fn leave(&mut self) {
        self.view = None;
        vmprof::retire_code(std::mem::take(&mut self.codes));
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if !self.finished && self.owns_profile {
            // Nothing to report to on this path; the file is completed.
            let _ = vmprof::disable();
        }
        // The sampler is off (or samples other threads): the view can go.
        self.leave();
    }
}
