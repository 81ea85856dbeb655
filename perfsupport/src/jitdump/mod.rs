//! [`JitDump`]: the `jit-<pid>.dump` file `perf inject --jit` turns into one
//! ELF object per region, with symbols, unwind tables and source lines.
//!
//! # How perf uses it
//!
//! 1. The process creates `<dir>/jit-<pid>.dump` and maps its first page
//!    `PROT_READ | PROT_EXEC`, `MAP_PRIVATE` (the *marker*). `perf record -k 1`
//!    logs that executable mapping, which is how `perf inject` finds the dump.
//! 2. For each region the process appends DEBUG_INFO, UNWINDING_INFO and
//!    CODE_LOAD records ([`format`](mod@format) has the byte layouts,
//!    [`unwinding_info`] the unwind payload's), timestamped with
//!    CLOCK_MONOTONIC.
//! 3. `perf inject --jit -i perf.data -o perf.jit.data` writes
//!    `<dir>/jitted-<pid>-<code_index>.so` per CODE_LOAD and injects an mmap
//!    event for it at the record's timestamp, covering
//!    `[code_addr, code_addr + ALIGN8(code_size) + mapped_size)`.
//!    Anonymous executable mappings that appear **after** the marker are
//!    dropped from the output, so the injected objects win.
//!
//! # Rules for the VM
//!
//! * **Create the dump before any JIT code becomes executable**
//!   ([`JitDump::create_in`] maps the marker at once). An `//anon` exec
//!   mapping recorded before the marker is kept by perf and can hide the
//!   injected objects.
//! * **Register after the code is final** (after `finalize_definitions` /
//!   `mprotect(RX)`) and before it first runs: CODE_LOAD copies the live
//!   bytes, and samples before the record's timestamp are not attributed.
//! * **Pad regions** by [`reserved_region_size`](crate::unwind::reserved_region_size)
//!   so the injected ranges do not overlap.
//! * Use anonymous `mmap` code memory, never the malloc heap (perf does not
//!   drop later `[heap]` mappings).
//! * The directory must not start with `/tmp/perf-` (perf would parse the
//!   `jitted-*.so` files as perf maps; refused here), must allow exec
//!   mappings (no `noexec` mount), and the dump must stay until
//!   `perf inject` has run.
//!
//! # Build-id markers
//!
//! Current perf derives each `jitted-*.so` build-id from the dumped code
//! bytes alone, so byte-identical regions would be merged into one object.
//! A region whose bytes the dump already holds gets a short marker
//! **appended** after its code in the dump; every other region is dumped
//! exactly as it runs. [`build_id`] explains the scheme.

pub mod build_id;
pub mod format;
pub mod unwinding_info;

pub use build_id::MARKER_LEN;
pub use unwinding_info::{EH_FRAME_HDR_SIZE, PerfUnwindData, perf_unwind_data_size};

use crate::os::{MarkerMapping, current_tid, monotonic_ns};
use crate::region::CodeRegion;
use crate::safe_file::{
    PROFILER_FILE_MODE, PathClaim, WriteMode, create_replacing_stale, with_context,
};
use crate::sink::ProfilerSink;
use build_id::DumpedCode;
use format::CodeLoad;
use parking_lot::Mutex;
use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// The prefix perf treats as a perf map (`/tmp/perf-*`): a dump there breaks
/// symbolization of every injected object.
const PERF_MAP_PREFIX: &str = "/tmp/perf-";

/// A jitdump sink. See the [module docs](self).
///
/// One per process. A forked child must not write through its parent's
/// `JitDump` (the records would carry the parent's pid and land in the
/// parent's file): [`ProfilerSink::after_fork_child`] makes it stop, and the
/// child creates a new `JitDump` if it will JIT.
#[derive(Debug)]
pub struct JitDump {
    state: Mutex<State>,
    /// `None` for a dump built with [`JitDump::from_file`].
    claim: Option<PathClaim>,
    /// Kept for the process lifetime, never unmapped (see [`MarkerMapping`]).
    marker: Option<MarkerMapping>,
    pid: u32,
    /// Per-process part of the build-id markers.
    salt: u64,
    /// False only for negative controls (see [`JitDump::without_unwinding_records`]).
    unwinding_records: bool,
}

#[derive(Debug)]
struct State {
    /// `None` once closed; `closed_because` then says why.
    file: Option<File>,
    closed_because: &'static str,
    /// Closed because this is a forked child: registrations are accepted
    /// and dropped (the dump simply stops), not failures.
    left_to_the_parent: bool,
    next_code_index: u64,
    /// What was dumped so far, to give repeated bytes a marker.
    dumped: DumpedCode,
    /// Formatting buffer reused across batches (empty between batches).
    buffer: Vec<u8>,
}

impl JitDump {
    /// Creates `<dir>/jit-<pid>.dump`, writes the header, and maps the marker.
    ///
    /// Call once per process, before any JIT code is made executable.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a directory under `/tmp/perf-`; the creation errors
    /// of [`create_output_file`](crate::create_output_file);
    /// `AlreadyExists` if a sink of this process already wrote the dump; the I/O error
    /// of writing the header or of the marker `mmap` (e.g. a `noexec` mount).
    pub fn create_in(dir: impl AsRef<Path>) -> io::Result<JitDump> {
        let path = dump_path_in(dir.as_ref())?;
        let claim = PathClaim::claim(&path)?;
        let file = match create_replacing_stale(&path, PROFILER_FILE_MODE, WriteMode::ReadWrite) {
            Ok(file) => file,
            Err(err) => {
                claim.release();
                return Err(err);
            }
        };
        // On failure (a `noexec` mount refuses the marker mapping) the
        // header-only file goes and the path is given back: nothing is left
        // that looks like a dump.
        match JitDump::start(file, Some(&path), true) {
            Ok(mut dump) => {
                dump.claim = Some(claim);
                Ok(dump)
            }
            Err(err) => {
                let _ = std::fs::remove_file(&path);
                claim.release();
                Err(err)
            }
        }
    }

    /// The conventional dump directory: `$JITDUMPDIR` if set (the jvmti
    /// agent's convention; perf itself does not read it), else the current
    /// directory.
    pub fn default_dir() -> PathBuf {
        std::env::var_os("JITDUMPDIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("."))
    }

    /// A dump written to an already open file (tests, `/dev/full`, pipes).
    /// The header is written at once. With `map_marker`, the file's first page
    /// is mapped as the marker (the file must then be open for reading and
    /// support `mmap`); without, perf cannot find the dump.
    ///
    /// # Errors
    ///
    /// The I/O error of writing the header or of the marker `mmap`.
    pub fn from_file(file: File, map_marker: bool) -> io::Result<JitDump> {
        JitDump::start(file, None, map_marker)
    }

    /// Writes the header, maps the marker if asked, and builds the sink.
    /// `path` is only for messages; the caller keeps the dump's claim.
    fn start(mut file: File, path: Option<&Path>, map_marker: bool) -> io::Result<JitDump> {
        let shown_path = path.unwrap_or(Path::new("jitdump"));
        let pid = std::process::id();
        let created = monotonic_ns();
        let mut header = Vec::with_capacity(format::HEADER_SIZE as usize);
        format::put_header(&mut header, pid, created);
        file.write_all(&header)
            .map_err(|err| with_context(err, "cannot write the jitdump header to", shown_path))?;
        let marker = if map_marker {
            let marker = MarkerMapping::map(&file)
                .map_err(|err| with_context(err, "cannot map the jitdump marker of", shown_path))?;
            Some(marker)
        } else {
            None
        };
        Ok(JitDump {
            state: Mutex::new(State {
                file: Some(file),
                closed_because: "",
                left_to_the_parent: false,
                next_code_index: 0,
                dumped: DumpedCode::default(),
                buffer: Vec::new(),
            }),
            claim: None,
            marker,
            pid,
            salt: mix64(u64::from(pid) << 32 ^ created),
            unwinding_records: true,
        })
    }

    /// Writes no `JIT_CODE_UNWINDING_INFO` record at all, not even the
    /// header-only form, so perf's DWARF unwinder stops at every JIT frame
    /// (it has no frame-pointer fallback for an object without
    /// `.eh_frame_hdr`).
    ///
    /// Only for negative controls: a test that proves stacks unwind *because*
    /// of the unwinding records must also show that they break without them.
    pub fn without_unwinding_records(mut self) -> JitDump {
        self.unwinding_records = false;
        self
    }

    /// Path of the dump file, `None` for a dump built with [`JitDump::from_file`].
    pub fn path(&self) -> Option<&Path> {
        self.claim.as_ref().map(PathClaim::path)
    }

    /// Address of the marker mapping, if one was made.
    pub fn marker_address(&self) -> Option<usize> {
        self.marker.as_ref().map(MarkerMapping::address)
    }
}

impl ProfilerSink for JitDump {
    fn name(&self) -> &str {
        "jitdump"
    }

    // ANCHOR: jitdump_register
    fn register(&self, regions: &[CodeRegion<'_>]) -> io::Result<()> {
        regions
            .iter()
            .try_for_each(CodeRegion::validate_except_unwind)?;
        // Building the unwind payloads checks the unwind info (the rest of
        // `CodeRegion::validate`), and is pure computation: outside the lock.
        let unwind = regions
            .iter()
            .map(|region| {
                PerfUnwindData::for_region(region).map_err(|err| region.unwind_error(err))
            })
            .collect::<io::Result<Vec<_>>>()?;
        let tid = current_tid();
        let mut state = self.state.lock();
        let State {
            file,
            closed_because,
            left_to_the_parent,
            next_code_index,
            dumped,
            buffer,
        } = &mut *state;
        let Some(file) = file.as_mut() else {
            if *left_to_the_parent {
                return Ok(());
            }
            return Err(io::Error::other(*closed_because));
        };
        buffer.clear();
        for (region, unwind) in regions.iter().zip(&unwind) {
            let code_index = *next_code_index;
            *next_code_index += 1;
            let build_id_marker = dumped.marker_for(region.code, self.marker_seed(code_index));
            if !region.lines.is_empty() {
                format::put_debug_info(buffer, region, monotonic_ns());
            }
            if self.unwinding_records {
                match build_id_marker {
                    None => format::put_unwinding_info(buffer, unwind, monotonic_ns()),
                    Some(marker) => {
                        // perf puts .eh_frame after the dumped bytes: re-lay
                        // it out after the marker (validated above, so this
                        // cannot fail; the rare marked region pays twice).
                        let dumped_size = region.size() + marker.len() as u64;
                        let moved = PerfUnwindData::for_dumped_region(region, dumped_size)
                            .map_err(|err| region.unwind_error(err))?;
                        format::put_unwinding_info(buffer, &moved, monotonic_ns());
                    }
                }
            }
            let load = CodeLoad {
                pid: self.pid,
                tid,
                code_index,
                build_id_marker,
                region,
            };
            format::put_code_load(buffer, &load, monotonic_ns());
        }
        let result = file.write_all(buffer);
        buffer.clear();
        if let Err(err) = result {
            // A partly written record would make every later record
            // unreadable: stop writing (registrations now fail).
            state.file = None;
            state.closed_because = "stopped after a failed write (the dump ends mid-record)";
            return Err(self.write_error(err));
        }
        Ok(())
    }
    // ANCHOR_END: jitdump_register

    /// Stops writing: the dump belongs to the parent. Closes only the
    /// child's copy of the descriptor; the parent's dump is untouched.
    fn after_fork_child(&self) -> io::Result<()> {
        let Some(mut state) = self.state.try_lock() else {
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                "another thread held the lock when the process forked",
            ));
        };
        state.file = None;
        state.closed_because =
            "the dump belongs to the parent process; create a new JitDump in the forked child";
        state.left_to_the_parent = true;
        Ok(())
    }

    fn finish(&self) -> io::Result<()> {
        let mut state = self.state.lock();
        let Some(mut file) = state.file.take() else {
            return Ok(());
        };
        state.closed_because = "already finished";
        let mut close = Vec::with_capacity(format::RECORD_HEADER_SIZE as usize);
        format::put_close(&mut close, monotonic_ns());
        file.write_all(&close)
            .map_err(|err| self.write_error(err))?;
        // The marker mapping stays: perf only needs it to have existed, and
        // unmapping it is never required.
        Ok(())
    }
}

impl JitDump {
    /// The first marker value tried for the region with `code_index`:
    /// different for every index, and between processes.
    fn marker_seed(&self, code_index: u64) -> u32 {
        mix64(self.salt ^ code_index) as u32
    }

    fn write_error(&self, err: io::Error) -> io::Error {
        with_context(
            err,
            "cannot write",
            self.path().unwrap_or(Path::new("jitdump")),
        )
    }
}

// ANCHOR: dump_path
/// `<dir>/jit-<pid>.dump`, refusing directories perf would misread.
///
/// The check is on the resolved directory (`..` and symlinks followed):
/// perf sees the path the kernel reports for the mapped dump, which is the
/// resolved one, so `DIR/../perf-X` or a symlink into `/tmp/perf-X` would
/// otherwise slip through.
fn dump_path_in(dir: &Path) -> io::Result<PathBuf> {
    let name = format!("jit-{}.dump", std::process::id());
    let refuse = |path: &Path| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "refusing jitdump path {}: perf treats files under {PERF_MAP_PREFIX}* as perf maps",
                path.display()
            ),
        )
    };
    // As written (so a directory not made yet is refused for what it is),
    // then as resolved.
    let written = std::path::absolute(dir.join(&name))?;
    if written.to_string_lossy().starts_with(PERF_MAP_PREFIX) {
        return Err(refuse(&written));
    }
    let resolved = std::fs::canonicalize(dir)
        .map_err(|err| with_context(err, "cannot resolve the directory of", &written))?
        .join(&name);
    if resolved.to_string_lossy().starts_with(PERF_MAP_PREFIX) {
        return Err(refuse(&resolved));
    }
    Ok(resolved)
}
// ANCHOR_END: dump_path

/// SplitMix64 finalizer: spreads every input bit over all output bytes, so
/// consecutive code indices give unrelated markers.
fn mix64(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}
