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
//!    [`unwind::perf_layout`](crate::unwind::perf_layout) the unwind
//!    payload's), timestamped with
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
mod packed;
pub mod reader;
/// perf's unwinding payload, which lives with the unwind info it lays out
/// (kept here under its old name).
pub use crate::unwind::perf_layout as unwinding_info;

pub use crate::unwind::perf_layout::{EH_FRAME_HDR_SIZE, PerfUnwindData, perf_unwind_data_size};
pub use build_id::MARKER_LEN;

use crate::eh_frame::align_up;
use crate::os::{MarkerMapping, current_tid, monotonic_ns};
use crate::region::CodeRegion;
use crate::safe_file::{
    PROFILER_FILE_MODE, PathClaim, WriteMode, create_replacing_stale, with_context,
};
use crate::sink::{ProfilerSink, UnwindFallbacks};
use crate::validation::{check_disjoint, validate_ranges};
use build_id::DumpedCode;
use format::CodeLoad;
use packed::{LiveCode, Written};
use parking_lot::Mutex;
use std::fs::File;
use std::io::{self, Seek, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Live neighbours a region's build-id marker makes the dump write again,
/// at most, per region written (see `BatchWriter::cover_neighbours`).
const MAX_COVERED_NEIGHBOURS: usize = 16;

/// The dump directory without `$JITDUMPDIR` (see [`JitDump::default_dir`]).
pub const DEFAULT_DIR: &str = "/tmp";

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
    /// The live regions and where their records are (see [`packed`]).
    live: LiveCode,
    /// File offset of the next byte written (counted from the header's
    /// end when the file cannot tell, a pipe say).
    written: u64,
    /// The records can be read back from the file (a seekable file opened
    /// for reading): only then can a region be written again.
    readable: bool,
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
    /// `ResourceBusy` if a sink of this process already wrote the dump; the I/O error
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

    // ANCHOR: default_dir
    /// The dump directory when the VM names none, for toyvm and the C API
    /// alike: `$JITDUMPDIR` if set and not empty (the JVM agent's
    /// convention; perf itself does not read it), else [`DEFAULT_DIR`]
    /// (`/tmp`, where CPython's `-X perf_jit` writes its dump too).
    pub fn default_dir() -> PathBuf {
        std::env::var_os("JITDUMPDIR")
            .filter(|dir| !dir.is_empty())
            .map_or_else(|| PathBuf::from(DEFAULT_DIR), PathBuf::from)
    }
    // ANCHOR_END: default_dir

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
        let position = file.stream_position().ok();
        let readable = position.is_some() && crate::os::opened_for_reading(&file);
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
                live: LiveCode::default(),
                written: position.unwrap_or(u64::from(format::HEADER_SIZE)),
                readable,
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

    fn register(&self, regions: &[CodeRegion<'_>]) -> io::Result<()> {
        self.register_reporting(regions, &mut UnwindFallbacks::default())
    }

    // ANCHOR: jitdump_register
    fn register_reporting(
        &self,
        regions: &[CodeRegion<'_>],
        fallbacks: &mut UnwindFallbacks,
    ) -> io::Result<()> {
        regions
            .iter()
            .try_for_each(CodeRegion::validate_except_unwind)?;
        check_disjoint(regions)?;
        // Checking the unwind info builds its payload (the rest of
        // `CodeRegion::validate`): pure computation, outside the lock.
        regions.iter().try_for_each(|region| {
            PerfUnwindData::for_region(region)
                .map(drop)
                .map_err(|err| region.unwind_error(err))
        })?;
        let mut state = self.state.lock();
        let state = &mut *state;
        if state.file.is_none() {
            if state.left_to_the_parent {
                return Ok(());
            }
            return Err(io::Error::other(state.closed_because));
        }
        // New code over the bytes of live code replaces it.
        for region in regions {
            let end = region.start() + region.size();
            state.live.forget_overlapping(region.start(), end);
        }
        let mut batch_starts: Vec<u64> = regions.iter().map(CodeRegion::start).collect();
        batch_starts.sort_unstable();
        state.buffer.clear();
        let mut writer = BatchWriter {
            dump: self,
            state,
            tid: current_tid(),
            batch_starts: &batch_starts,
            fallbacks,
        };
        // In address order: a build-id marker after a region then lies
        // under the next region of the batch, which is loaded after it.
        let mut in_order: Vec<&CodeRegion<'_>> = regions.iter().collect();
        in_order.sort_by_key(|region| region.start());
        let built = (in_order.iter()).try_for_each(|region| writer.put_region(region));
        let state = writer.state;
        let result = match built {
            // Only a record read back wrong gets here: the file was changed
            // under the dump, whose live set cannot be trusted any more.
            Err(err) => Err((err, "stopped: a record of the dump read back wrong")),
            Ok(()) => {
                let file = state.file.as_mut().expect("checked open above");
                (file.write_all(&state.buffer)).map_err(|err| {
                    // A partly written record would make every later
                    // record unreadable.
                    let why = "stopped after a failed write (the dump ends mid-record)";
                    (self.write_error(err), why)
                })
            }
        };
        let length = state.buffer.len() as u64;
        state.buffer.clear();
        match result {
            Ok(()) => {
                state.written += length;
                Ok(())
            }
            Err((err, why)) => {
                // Registrations now fail.
                state.file = None;
                state.live.clear();
                state.closed_because = why;
                Err(err)
            }
        }
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
        state.live.clear();
        state.closed_because =
            "the dump belongs to the parent process; create a new JitDump in the forked child";
        state.left_to_the_parent = true;
        Ok(())
    }

    /// Forgets the dead regions: new code may land where they were, and
    /// they need no rewriting (see [`packed`]). Nothing is written: the
    /// format has no unload record, and a new `JIT_CODE_LOAD` at the same
    /// addresses wins by time.
    fn retire(&self, ranges: &[(usize, usize)]) -> io::Result<()> {
        validate_ranges(ranges)?;
        self.state.lock().live.retire(ranges);
        Ok(())
    }

    fn finish(&self) -> io::Result<()> {
        let mut state = self.state.lock();
        let Some(mut file) = state.file.take() else {
            return Ok(());
        };
        state.closed_because = "already finished";
        state.live.clear();
        let mut close = Vec::with_capacity(format::RECORD_HEADER_SIZE as usize);
        format::put_close(&mut close, monotonic_ns());
        file.write_all(&close)
            .map_err(|err| self.write_error(err))?;
        // The marker mapping stays: perf only needs it to have existed, and
        // unmapping it is never required.
        Ok(())
    }
}

/// Writes one batch into the dump's buffer, region by region, keeping the
/// live set (see [`packed`]).
struct BatchWriter<'a, 'f> {
    dump: &'a JitDump,
    state: &'a mut State,
    tid: u32,
    /// The start of every region of the batch, sorted.
    batch_starts: &'a [u64],
    fallbacks: &'f mut UnwindFallbacks,
}

impl BatchWriter<'_, '_> {
    /// File offset the next buffered byte will have.
    fn position(&self) -> u64 {
        self.state.written + self.state.buffer.len() as u64
    }

    /// Writes `region`: its unwind data only if it has room, after writing
    /// again header-only the live regions whose `.eh_frame` it lands in,
    /// and before writing again the live neighbours its build-id marker
    /// covers (see [`packed`]).
    fn put_region(&mut self, region: &CodeRegion<'_>) -> io::Result<()> {
        let (start, size) = (region.start(), region.size());
        let end = start + size;
        if let Some(earlier) = self.state.live.fde_tail_over(start)
            && self.put_again_header_only(earlier)?
        {
            self.fallbacks.rewritten += 1;
        }
        let code_index = self.next_code_index();
        let marker = (self.state.dumped).marker_for(region.code, self.dump.marker_seed(code_index));
        let dumped_size = size + marker.map_or(0, |m| m.len() as u64);
        let mut unwind = PerfUnwindData::for_dumped_region(region, dumped_size)
            .map_err(|err| region.unwind_error(err))?;
        let mut extent = dumped_size;
        // Without unwinding records perf maps the code only.
        if self.dump.unwinding_records && unwind.mapped_size() > 0 {
            let with_fde = align_up(dumped_size, 8) + unwind.mapped_size();
            let room = start + with_fde;
            let next_in_batch = self.batch_starts.partition_point(|&s| s <= start);
            let taken = (self.batch_starts.get(next_in_batch)).is_some_and(|&next| next < room)
                || self.state.live.first_start_within(end, room).is_some();
            if taken {
                unwind = crate::unwind::perf_layout::header_only();
                self.fallbacks.header_only += 1;
            } else {
                extent = with_fde;
            }
        }
        let timestamp = monotonic_ns();
        let debug = if region.lines.is_empty() {
            None
        } else {
            let at = self.position();
            let from = self.state.buffer.len();
            format::put_debug_info(&mut self.state.buffer, region, timestamp);
            Some((at, self.state.buffer.len() - from))
        };
        if self.dump.unwinding_records {
            format::put_unwinding_info(&mut self.state.buffer, &unwind, timestamp);
        }
        let load = self.put_load(
            code_index,
            marker,
            start,
            region.name,
            region.code,
            timestamp,
        );
        self.state.live.insert(
            start,
            Written {
                size,
                extent,
                has_fde: extent > dumped_size,
                load,
                debug: debug.map(|(at, len)| (at, len as u32)),
            },
        );
        self.cover_neighbours(start, extent)
    }

    /// Writes again, after the region at `start`, the live regions written
    /// before it whose first bytes its mapping (`extent` bytes) covers: a
    /// build-id marker's 8 bytes reach into the next packed region. A copy
    /// written again has a marker too (the dump holds its bytes), so the
    /// sweep goes on, in address order, each region once, and stops after
    /// [`MAX_COVERED_NEIGHBOURS`]: identical functions packed from the top
    /// address down would otherwise write the whole run again per
    /// registration. (Regions of the batch still to come are not live yet:
    /// they are loaded later.)
    fn cover_neighbours(&mut self, start: u64, extent: u64) -> io::Result<()> {
        let size = self.state.live.get(start).map_or(0, |w| w.size);
        let (mut from, mut to) = (start + size, start + extent);
        for _ in 0..MAX_COVERED_NEIGHBOURS {
            let Some(neighbour) = self.state.live.first_start_within(from, to) else {
                return Ok(());
            };
            if self.put_again_header_only(neighbour)? {
                self.fallbacks.rewritten += 1;
            }
            let Some(again) = self.state.live.get(neighbour) else {
                return Ok(());
            };
            from = neighbour + again.size;
            to = to.max(neighbour + again.extent);
        }
        Ok(())
    }

    /// Writes the live region at `start` again with the header-only unwind
    /// form, from the records the dump holds: its line table, then a new
    /// `JIT_CODE_LOAD` whose mapping ends with its code (and marker). False
    /// if it cannot: no such region, or a dump that cannot be read back (a
    /// pipe), where the region keeps its first load.
    fn put_again_header_only(&mut self, start: u64) -> io::Result<bool> {
        let Some(earlier) = self.state.live.get(start) else {
            return Ok(false);
        };
        if !self.state.readable {
            return Ok(false);
        }
        let load_record = self.read_record(earlier.load)?;
        let (name, dumped) = format::code_load_parts(&load_record)
            .ok_or_else(|| io::Error::other("a CODE_LOAD record of the dump does not read back"))?;
        let code = dumped.get(..earlier.size as usize).ok_or_else(|| {
            io::Error::other("a CODE_LOAD record of the dump is shorter than its region")
        })?;
        let timestamp = monotonic_ns();
        let debug = match earlier.debug {
            Some(record) => {
                let bytes = self.read_record(record)?;
                let at = self.position();
                format::put_copy(&mut self.state.buffer, &bytes, timestamp);
                Some((at, record.1))
            }
            None => None,
        };
        if self.dump.unwinding_records {
            format::put_unwinding_info(
                &mut self.state.buffer,
                &crate::unwind::perf_layout::header_only(),
                timestamp,
            );
        }
        let code_index = self.next_code_index();
        let marker = (self.state.dumped).marker_for(code, self.dump.marker_seed(code_index));
        let load = self.put_load(code_index, marker, start, name, code, timestamp);
        self.state.live.insert(
            start,
            Written {
                size: earlier.size,
                extent: earlier.size + marker.map_or(0, |m| m.len() as u64),
                has_fde: false,
                load,
                debug,
            },
        );
        Ok(true)
    }

    /// Appends a CODE_LOAD record; its file offset and length.
    fn put_load(
        &mut self,
        code_index: u64,
        build_id_marker: Option<[u8; MARKER_LEN]>,
        start: u64,
        name: &str,
        code: &[u8],
        timestamp: u64,
    ) -> (u64, u32) {
        let at = self.position();
        let from = self.state.buffer.len();
        let load = CodeLoad {
            pid: self.dump.pid,
            tid: self.tid,
            code_index,
            build_id_marker,
            start,
            name,
            code,
        };
        format::put_code_load(&mut self.state.buffer, &load, timestamp);
        (at, (self.state.buffer.len() - from) as u32)
    }

    /// The bytes of a record this dump wrote: from the file, or from this
    /// batch's buffer.
    fn read_record(&self, (at, len): (u64, u32)) -> io::Result<Vec<u8>> {
        let base = self.state.written;
        if at >= base {
            let from = (at - base) as usize;
            return (self.state.buffer.get(from..from + len as usize))
                .map(<[u8]>::to_vec)
                .ok_or_else(|| io::Error::other("a record of this batch is out of range"));
        }
        let file =
            (self.state.file.as_ref()).ok_or_else(|| io::Error::other("the dump is closed"))?;
        let mut bytes = vec![0; len as usize];
        file.read_exact_at(&mut bytes, at).map_err(|err| {
            io::Error::new(
                err.kind(),
                format!("cannot read back a record to write its region again header-only: {err}"),
            )
        })?;
        Ok(bytes)
    }

    fn next_code_index(&mut self) -> u64 {
        let index = self.state.next_code_index;
        self.state.next_code_index += 1;
        index
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
