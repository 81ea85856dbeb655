//! VMProf-style sampling profiler support, after PyPy's `rvmprof`: the
//! crate's second API, independent of the [sink API](crate::sink). The sink
//! API tells native profilers what *machine code* is; this one samples which
//! *guest functions* are running, from inside the process, into a file the
//! PyPI `vmprof` tools and `toyvm report` read. This page is its guide.
//!
//! A VM that wants CPU profiles the PyPI `vmprof` tools can show
//! (`vmprofshow FILE tree`, `vmprof.read_profile`) does four things:
//!
//! 1. **Register its code-object class** once:
//!    `let class = register_code_object_class("toy")?;`
//! 2. **Register each code object** when it is created; the id lives in a
//!    [`CodeIdCell`] inside the code object:
//!    `register_code(&code.vmprof_id, &class, "fib", 3, "fib.toy")`.
//!    Ids are positive, even and unique; names are
//!    `class:func_name:line:file` (see [`code_name`]).
//! 3. **Mark running code**: `let _frame = vmprof_execute_code(id);` around
//!    running a code object (a guard that pops on drop; pushes only while
//!    profiling). JIT code pushes and pops inline on the [`ShadowStack`]
//!    whose layout [`shadow_stack`] documents. **Or**, if the VM already
//!    keeps an array of frame records on every call, describe it once with
//!    [`install_frame_view`]: the sampler reads it instead, and calls cost
//!    nothing extra while profiling ([`frame_view`]).
//! 4. **Enable and disable**: [`enable`] / [`enable_with`] /
//!    [`enable_path`] start a `SIGPROF` sampler (every 1 ms of CPU time by
//!    default) and a writer thread; [`disable`] stops them and completes the
//!    file.
//!
//! ```no_run
//! use perfsupport::vmprof::*;
//! # fn main() -> Result<(), VmprofError> {
//! let class = register_code_object_class("toy")?;
//! let main_cell = CodeIdCell::new();
//! let main_id = register_code(&main_cell, &class, "<main>", 1, "fib.toy");
//! enable_path(std::path::Path::new("fib.prof"), &EnableOptions::new("toyvm"))?;
//! {
//!     let _frame = vmprof_execute_code(main_id);
//!     // ... run the program ...
//! }
//! let summary = disable()?;
//! println!("{} samples", summary.samples);
//! let profile = read_profile(std::path::Path::new("fib.prof")).expect("readable");
//! assert_eq!(profile.samples.len() as u64, summary.samples);
//! # Ok(())
//! # }
//! ```
//!
//! **Lines mode** ([`EnableOptions::lines`]): every frame of every sample
//! also records the line it is executing (the PyPI reader's `node.lines`).
//! The VM keeps a location in its frame records and says how to map it to
//! a line ([`FrameLines`]); a JIT publishes the line tables of its code
//! ([`publish_code_lines`]), for the innermost frame's line from the
//! interrupted program counter.
//!
//! Modules, one job each: [`format`](mod@format) (the file format, as a spec),
//! [`names`] (code names), [`registry`] (ids), [`shadow_stack`] (what runs
//! now), [`frame_view`] (what runs now, read from the VM's frames),
//! [`code_lines`] (compiled code's lines, for the signal handler),
//! [`sampler`] (timer, handler, sessions), [`reader`] (parsing profiles
//! back). Private: the ring buffer from the signal handler to the writer
//! thread, and the writer thread itself. Test-only: `tests/` (bounded
//! fuzzing of the reader).

pub mod clock;
pub mod code_lines;
mod fork;
pub mod format;
pub mod frame_view;
pub mod names;
pub mod reader;
pub mod registry;
mod ring;
pub mod sampler;
pub mod shadow_stack;
mod writer;

#[cfg(test)]
mod tests;

use std::fmt;
use std::path::Path;
use std::time::Duration;

use crate::safe_file::{PROFILER_FILE_MODE, WriteMode, create_replacing_stale};

pub use clock::{CLOCK_ENV, Clock, join_current_thread, leave_current_thread};
pub use code_lines::{
    CodeLineRow, publish_code_lines, retract_code_lines, retract_many_code_lines,
};
pub use format::{
    META_CLOCK, META_CUT_FRAMES_MAX, META_CUT_SAMPLES, META_RECORDS, META_SIGNALS, Timeval,
};
pub use frame_view::{
    CUT_FRAMES_CLASS, CUT_FRAMES_NAME, FrameLines, FrameView, FrameViewGuard, cut_frames_id,
    install_frame_view,
};
pub use names::{CUT_MARK, CodeName, MAX_CLASS_PREFIX, MAX_CODE_NAME, code_name, parse_code_name};
pub use reader::{
    Profile, ReadError, Salvaged, Sample, SampleView, parse_profile, read_profile, read_salvaging,
    salvage_profile, stream_profile,
};
pub use registry::{
    CodeClass, CodeId, CodeIdCell, code_name_of, get_unique_id, register_code,
    register_code_object_class, retire_code,
};
pub use sampler::{
    DEFAULT_INTERP_NAME, DEFAULT_INTERVAL, EnableOptions, MAX_INTERVAL, MIN_INTERVAL, disable,
    enable, enable_with, is_enabled, set_thread_filter,
};
pub use shadow_stack::{
    ExecuteCodeGuard, SHADOW_STACK_CAPACITY, SHADOW_STACK_DEPTH_OFFSET, SHADOW_STACK_IDS_OFFSET,
    ShadowStack, is_profiling, profiling_flag, vmprof_execute_code,
};
pub use writer::ProfileSummary;

/// Starts profiling into a file at `path` created like
/// [`create_output_file`](crate::create_output_file): a new inode with mode 0644,
/// close-on-exec, never reached through a symlink. A regular file of ours
/// already at `path` is replaced; a symlink, a directory, a device or another
/// user's file there is an error, as is a missing or read-only directory.
pub fn enable_path(path: &Path, options: &EnableOptions) -> Result<(), VmprofError> {
    // The file is created only once the options are valid and no profile
    // is being recorded: a refused call touches nothing.
    let create = || {
        create_replacing_stale(path, PROFILER_FILE_MODE, WriteMode::Write).map_err(|source| {
            VmprofError::Io {
                context: "creating the profile file",
                source,
            }
        })
    };
    sampler::enable_opening(create, options)
}

/// Why a profiler call failed.
#[derive(Debug)]
pub enum VmprofError {
    /// A code-object class prefix is empty, too long, or has a colon or a
    /// control character.
    InvalidClassPrefix(String),
    /// `enable` was called while a profile is being recorded.
    AlreadyEnabled,
    /// `disable` was called with no profile being recorded.
    NotEnabled,
    /// The interval is outside [`MIN_INTERVAL`]`..=`[`MAX_INTERVAL`].
    InvalidInterval(Duration),
    /// The interpreter name is longer than 255 bytes or is `pypy`.
    InvalidInterpName(String),
    /// A META key repeats (readers reject the file).
    DuplicateMetaKey(String),
    /// A file operation failed.
    Io {
        /// What was being done.
        context: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// A system call for the signal or timer set-up failed.
    Os {
        /// The call that failed.
        call: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// The writer thread panicked (a bug); the profile is incomplete.
    WriterPanicked,
}

impl fmt::Display for VmprofError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VmprofError::InvalidClassPrefix(p) => write!(
                f,
                "invalid vmprof code class prefix {p:?}: it must be 1 to {MAX_CLASS_PREFIX} bytes without ':' or control characters"
            ),
            VmprofError::AlreadyEnabled => write!(f, "vmprof is already enabled"),
            VmprofError::NotEnabled => write!(f, "vmprof is not enabled"),
            VmprofError::InvalidInterval(i) => write!(
                f,
                "invalid vmprof sampling interval {i:?}: it must be between {MIN_INTERVAL:?} and {MAX_INTERVAL:?}"
            ),
            VmprofError::InvalidInterpName(n) => write!(
                f,
                "invalid vmprof interpreter name {n:?}: it must be at most 255 bytes and not \"pypy\""
            ),
            VmprofError::DuplicateMetaKey(k) => write!(f, "vmprof meta key {k:?} is given twice"),
            VmprofError::Io { context, source } => write!(f, "vmprof: {context}: {source}"),
            VmprofError::Os { call, source } => write!(f, "vmprof: {call} failed: {source}"),
            VmprofError::WriterPanicked => write!(f, "vmprof: the writer thread panicked"),
        }
    }
}

impl std::error::Error for VmprofError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            VmprofError::Io { source, .. } | VmprofError::Os { source, .. } => Some(source),
            _ => None,
        }
    }
}
