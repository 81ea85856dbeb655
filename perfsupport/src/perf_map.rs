//! [`PerfMap`]: the `/tmp/perf-<pid>.map` symbol file that `perf report`
//! reads to name samples in anonymous executable memory.
//!
//! # Format
//!
//! One text line per region, documented in perf's `jit-interface.txt`:
//!
//! ```text
//! <start> <size> <name>\n
//! 7f3a1c0000 4a toy::fib
//! ```
//!
//! | field | encoding |
//! |---|---|
//! | start | runtime address, lowercase hex, no `0x` |
//! | size | code size in bytes, lowercase hex, no `0x` |
//! | name | the rest of the line; spaces allowed |
//!
//! perf 6.1's parser has sharp edges this writer works around or documents:
//!
//! * it overwrites the last byte of every line, assuming `\n`, so every line,
//!   including the last, ends in `\n`;
//! * a name containing `\n` would split the entry, and `\r` would stay in the
//!   symbol: such regions are rejected (as is NUL, which the jitdump cannot
//!   carry), before any sink writes;
//! * names of **2 bytes or fewer are silently dropped** by perf
//!   (`if (len + 2 >= line_len) continue;`): they are rejected too (see
//!   [`MIN_NAME_LEN`](crate::region::MIN_NAME_LEN)); use prefixed names like `toy::f`;
//! * with two entries for one address range, the **first line wins**, so a
//!   VM that reuses code addresses gets stale names (jitdump handles reuse).
//!
//! The file is read when `perf report` runs, so it is never deleted.
//!
//! # Design (mirrors CPython's `PyUnstable_PerfMapState_Init` /
//! `PyUnstable_WritePerfMapEntry` / `PyUnstable_PerfMapState_Fini`)
//!
//! * **An object, opened lazily.** [`PerfMap::new`] touches nothing; the file
//!   is created on the first [`register`](crate::ProfilerSink::register) (or
//!   an explicit [`PerfMap::open`]). Create one per process: a second
//!   `PerfMap` for the same path is refused, because it would take our live
//!   file for a stale one.
//! * **Safe creation.** The file is made by
//!   rules of [`create_output_file`](crate::create_output_file):
//!   exclusive, no symlinks, mode 0644. A file already there when we first
//!   open comes from a dead process with our pid and is replaced. Call
//!   [`PerfMap::open`] early at VM start-up, **before cranelift-jit defines
//!   any function**: under `perf record` (which sets `PERF_BUILDID_DIR`)
//!   cranelift-jit appends its own lines to the same file, and those would
//!   otherwise be taken for stale and discarded.
//! * **Append mode, whole batches.** The file is opened `O_APPEND`. A batch
//!   is formatted into a buffer and written with one `write_all`, so lines of
//!   other appenders (cranelift-jit) never land inside ours, and a profiler
//!   reading mid-run sees complete lines. A `parking_lot::Mutex` serializes
//!   our writers.
//! * **Shutdown.** [`finish`](crate::ProfilerSink::finish) closes the file;
//!   the file stays on disk.
//! * **fork.** [`PerfMap::after_fork_child`] gives a forked child its own
//!   `perf-<child pid>.map`, starting with the parent's entries (CPython 3.13
//!   does the same), because the child runs the parent's JIT code too.

use crate::region::CodeRegion;
use crate::safe_file::{
    PROFILER_FILE_MODE, PathClaim, WriteMode, create_replacing_stale, with_context,
};
use crate::sink::ProfilerSink;
use crate::validation::validate_batch;
use parking_lot::Mutex;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The directory perf reads maps from; perf has no setting to change it.
pub const PERF_MAP_DIR: &str = "/tmp";

/// A perf map sink writing `perf-<pid>.map`. See the [module docs](self).
#[derive(Debug)]
pub struct PerfMap {
    /// Directory of `perf-<pid>.map`; `None` when built from an open file.
    dir: Option<PathBuf>,
    state: Mutex<State>,
}

#[derive(Debug)]
enum State {
    /// Nothing created yet.
    Unopened,
    /// Writing to `file`.
    Open(OpenMap),
    /// Finished, or failed to follow a fork: further registrations fail.
    Closed,
}

#[derive(Debug)]
struct OpenMap {
    file: File,
    /// The claimed path, or `None` for a map built with [`PerfMap::from_file`].
    claim: Option<PathClaim>,
    /// Formatting buffer reused across batches (empty between batches).
    buffer: Vec<u8>,
    /// Bytes this process wrote to `file`, whole batches only. A forked
    /// child reads it from its copy of the parent's memory: what the parent
    /// had written when it forked, however much it writes afterwards.
    written: u64,
}

impl PerfMap {
    /// A perf map for `/tmp/perf-<pid>.map`, created on first use.
    pub fn new() -> PerfMap {
        PerfMap::in_dir(PERF_MAP_DIR)
    }

    /// A perf map for `<dir>/perf-<pid>.map`, created on first use. perf only
    /// reads `/tmp`; other directories are for tests and tools.
    pub fn in_dir(dir: impl Into<PathBuf>) -> PerfMap {
        PerfMap {
            dir: Some(dir.into()),
            state: Mutex::new(State::Unopened),
        }
    }

    /// A perf map writing to an already open file (for example `/dev/full`
    /// in failure tests, or a pipe). No stale-file handling; such a map
    /// cannot follow a fork.
    pub fn from_file(file: File) -> PerfMap {
        PerfMap {
            dir: None,
            state: Mutex::new(State::Open(OpenMap {
                file,
                claim: None,
                buffer: Vec::new(),
                written: 0,
            })),
        }
    }

    /// Creates the file now, if it is not open yet.
    ///
    /// # Errors
    ///
    /// The creation errors of
    /// [`create_output_file`](crate::create_output_file),
    /// `ResourceBusy` if a sink of this process already wrote that path, and an
    /// error if the map was finished.
    pub fn open(&self) -> io::Result<()> {
        let mut state = self.state.lock();
        self.ensure_open(&mut state).map(|_| ())
    }

    /// Path of the map file this process writes (or will write), `None` for a
    /// map built with [`PerfMap::from_file`].
    pub fn path(&self) -> Option<PathBuf> {
        match &*self.state.lock() {
            State::Open(OpenMap {
                claim: Some(claim), ..
            }) => Some(claim.path().to_path_buf()),
            _ => self.dir.as_deref().map(map_path_in),
        }
    }

    /// Call in the child right after `fork()`: starts the child's own
    /// `perf-<child pid>.map` with the lines the parent had written when it
    /// forked (not those it wrote since: the child's code may land at their
    /// addresses), and sends later entries there. Does nothing if the map was never opened
    /// or is finished.
    ///
    /// Only the forking thread survives a fork, so call this before the child
    /// starts threads. If another thread held the map's lock when the parent
    /// forked, the lock can never be released in the child: the call then
    /// fails, and the child must not use this map again (a registration
    /// would wait for that lock forever). Forking while no other thread
    /// registers avoids this.
    ///
    /// # Errors
    ///
    /// `WouldBlock` for the lock case above, `Unsupported` for a map built
    /// with [`PerfMap::from_file`], or the I/O error of creating the child's
    /// file or copying the parent's. On error the child stops writing.
    pub fn after_fork_child(&self) -> io::Result<()> {
        self.follow_fork()
    }

    fn follow_fork(&self) -> io::Result<()> {
        let Some(mut state) = self.state.try_lock() else {
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                "another thread held the lock when the process forked",
            ));
        };
        let parent = match std::mem::replace(&mut *state, State::Closed) {
            State::Open(parent) => parent,
            other => {
                *state = other;
                return Ok(());
            }
        };
        let (Some(dir), Some(parent_claim)) = (self.dir.as_deref(), parent.claim.as_ref()) else {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "a map built from an open file cannot follow a fork",
            ));
        };
        let child_path = map_path_in(dir);
        let claim = PathClaim::claim(&child_path)?;
        let mut child = create_replacing_stale(&child_path, PROFILER_FILE_MODE, WriteMode::Append)?;
        let inherited = read_lines_before_fork(&parent, parent_claim.path())?;
        child
            .write_all(&inherited)
            .map_err(|err| with_context(err, "cannot write", &child_path))?;
        *state = State::Open(OpenMap {
            file: child,
            claim: Some(claim),
            buffer: Vec::new(),
            written: inherited.len() as u64,
        });
        // `parent` drops here: closing our copy of the parent's descriptor
        // does not affect the parent.
        Ok(())
    }

    fn ensure_open<'s>(&self, state: &'s mut State) -> io::Result<&'s mut OpenMap> {
        if let State::Unopened = state {
            let dir = self
                .dir
                .as_deref()
                .ok_or_else(|| io::Error::other("no directory to create the map in"))?;
            let path = map_path_in(dir);
            let claim = PathClaim::claim(&path)?;
            let file = create_replacing_stale(&path, PROFILER_FILE_MODE, WriteMode::Append)?;
            *state = State::Open(OpenMap {
                file,
                claim: Some(claim),
                buffer: Vec::new(),
                written: 0,
            });
        }
        match state {
            State::Open(open) => Ok(open),
            _ => Err(io::Error::other(
                "closed (finished, or it could not follow a fork)",
            )),
        }
    }
}

/// A map dropped before anything was written in it (its owner failed to
/// start, say) gives its path back: otherwise every later map of this
/// process would be refused as "already written" with an empty file behind.
/// A map that wrote lines, or was finished, keeps its claim.
impl Drop for PerfMap {
    fn drop(&mut self) {
        if let State::Open(open) = std::mem::replace(self.state.get_mut(), State::Closed)
            && open.written == 0
            && let Some(claim) = open.claim
        {
            claim.release();
        }
    }
}

impl Default for PerfMap {
    fn default() -> Self {
        PerfMap::new()
    }
}

impl ProfilerSink for PerfMap {
    fn name(&self) -> &str {
        "perf map"
    }

    // ANCHOR: perf_map_register
    fn register(&self, regions: &[CodeRegion<'_>]) -> io::Result<()> {
        validate_batch(regions)?;
        let mut state = self.state.lock();
        let open = self.ensure_open(&mut state)?;
        open.buffer.clear();
        for region in regions {
            push_line(&mut open.buffer, region);
        }
        let result = open.file.write_all(&open.buffer);
        let length = open.buffer.len() as u64;
        open.buffer.clear();
        let Err(err) = result else {
            open.written += length;
            return Ok(());
        };
        let err = match open.claim.as_ref() {
            Some(claim) => with_context(err, "cannot write", claim.path()),
            None => with_context(err, "cannot write", Path::new("perf map")),
        };
        // Part of the batch may be in the file: a half line that perf would
        // misread, and a `written` count that no longer matches the file
        // (a forked child copies by it). The map stops here.
        *state = State::Closed;
        Err(err)
    }
    // ANCHOR_END: perf_map_register

    fn after_fork_child(&self) -> io::Result<()> {
        self.follow_fork()
    }

    fn finish(&self) -> io::Result<()> {
        let mut state = self.state.lock();
        if let State::Open(open) = std::mem::replace(&mut *state, State::Closed) {
            open.file.sync_data().or_else(|err| {
                // Pipes and character devices cannot sync; nothing is lost.
                if err.kind() == io::ErrorKind::InvalidInput {
                    Ok(())
                } else {
                    Err(err)
                }
            })?;
        }
        Ok(())
    }
}

/// Appends `"<start hex> <size hex> <name>\n"` (what `"{:x} {:x} {}\n"`
/// would print, without the formatting machinery: this is the hot path).
// ANCHOR: perf_map_line
fn push_line(out: &mut Vec<u8>, region: &CodeRegion<'_>) {
    push_hex(out, region.start());
    out.push(b' ');
    push_hex(out, region.size());
    out.push(b' ');
    out.extend_from_slice(region.name.as_bytes());
    out.push(b'\n');
}
// ANCHOR_END: perf_map_line

/// Appends `value` as lowercase hex without leading zeros or `0x`.
fn push_hex(out: &mut Vec<u8>, value: u64) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut digits = [0u8; 16];
    let mut at = digits.len();
    let mut rest = value;
    loop {
        at -= 1;
        digits[at] = DIGITS[(rest & 0xf) as usize];
        rest >>= 4;
        if rest == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

/// `<dir>/perf-<pid>.map` for the current process.
fn map_path_in(dir: &Path) -> PathBuf {
    dir.join(format!("perf-{}.map", std::process::id()))
}

/// Reads the first `parent.written` bytes of the parent's map (what it had
/// written when the process forked), up to the last complete line. The file
/// is reopened by path (our descriptor is write-only) without following
/// symlinks, and must be the very inode we were writing.
fn read_lines_before_fork(parent: &OpenMap, path: &Path) -> io::Result<Vec<u8>> {
    let ours = &parent.file;
    let reopened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|err| with_context(err, "cannot reopen parent map", path))?;
    let ours = ours.metadata()?;
    let theirs = reopened.metadata()?;
    if (ours.dev(), ours.ino()) != (theirs.dev(), theirs.ino()) {
        return Err(io::Error::other(format!(
            "{} was replaced since we created it; not copying it",
            path.display()
        )));
    }
    let mut contents = Vec::new();
    reopened
        .take(parent.written)
        .read_to_end(&mut contents)
        .map_err(|err| with_context(err, "cannot read parent map", path))?;
    let complete = contents
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    contents.truncate(complete);
    Ok(contents)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_matches_std_formatting() {
        for value in [0, 1, 0xf, 0x10, 0xdead_beef, 0x7f12_3456_7000, u64::MAX] {
            let mut out = Vec::new();
            push_hex(&mut out, value);
            assert_eq!(String::from_utf8(out).unwrap(), format!("{value:x}"));
        }
    }
}
