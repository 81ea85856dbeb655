//! The process-wide code arena: one `PROT_NONE` reservation that every JIT
//! of the process takes its code chunks from, and gives them back to.
//!
//! One arena, not one reservation per JIT, because of the perf map. A perf
//! map has no timestamps: perf cannot tell two owners of one address apart,
//! so while a map is written, a freed range must never hold code with
//! another name. Once any JIT of the process writes the map
//! ([`quarantine_freed_code`]), freed chunks are **quarantined**: their
//! pages go back to the system (the range is mapped `PROT_NONE` again, so
//! it costs no memory) but their addresses are never handed out again.
//! Quarantined ranges sit inside the one reservation and merge with the
//! untouched `PROT_NONE` around them, so a process that runs VM after VM
//! under a perf map keeps a flat mapping count; what it spends is address
//! space, the size of all the code it ever compiled (a few kilobytes per
//! function), out of [`RESERVATION`]. When that is used up, compiles fail
//! with "JIT code memory is full" and the functions stay interpreted.
//!
//! Without a perf map, freed chunks are reused at once (first fit, merged
//! with free neighbours): jitdump, the GDB JIT interface and vmprof are
//! told about the death and tell the new code apart by time.
//!
//! Every chunk is followed by one guard page that stays `PROT_NONE`, so the
//! executable mappings of two chunks never touch and never merge (perf
//! would see one big anonymous mapping hiding the older chunk's jitdump
//! objects, see `code_memory`).

use std::collections::BTreeMap;
use std::io;

use parking_lot::Mutex;

/// Address space reserved for all the code of the process (nothing is
/// committed until used); halved until the kernel grants it.
pub const RESERVATION: usize = 64 << 30;

/// The smallest reservation tried.
const MIN_RESERVATION: usize = 256 << 20;

/// A run of pages handed to one JIT, followed by its guard page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// Address of the first page.
    pub start: usize,
    /// Usable bytes (whole pages); the guard page follows.
    pub len: usize,
}

/// What the arena holds, for `--jit-stats` and the tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ArenaStats {
    /// Bytes in chunks handed out now (guard pages not counted).
    pub in_use: usize,
    /// Bytes of freed chunks kept in quarantine (address space only).
    pub quarantined: usize,
}

struct Arena {
    base: usize,
    size: usize,
    page: usize,
    /// Free ranges (start -> length), disjoint and never adjacent.
    free: BTreeMap<usize, usize>,
    /// Freed chunks are quarantined from now on.
    quarantine: bool,
    stats: ArenaStats,
}

static ARENA: Mutex<Option<Arena>> = Mutex::new(None);

/// The page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

/// Maps `[start, start + len)` as fresh inaccessible, unbacked memory.
///
/// # Safety
/// The range is page aligned, inside the arena and holds no code that can
/// still run.
unsafe fn map_none(start: usize, len: usize) -> io::Result<()> {
    // SAFETY: the caller's contract; MAP_FIXED replaces exactly that range
    // of our own reservation.
    let p = unsafe {
        libc::mmap(
            start as *mut libc::c_void,
            len,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

impl Arena {
    fn reserve() -> io::Result<Arena> {
        let page = page_size();
        let mut size = RESERVATION;
        loop {
            // SAFETY: an anonymous private mapping at an address of the
            // kernel's choosing touches no existing memory.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    size,
                    libc::PROT_NONE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                    -1,
                    0,
                )
            };
            if p != libc::MAP_FAILED {
                let base = p as usize;
                return Ok(Arena {
                    base,
                    size,
                    page,
                    free: BTreeMap::from([(base, size)]),
                    quarantine: false,
                    stats: ArenaStats::default(),
                });
            }
            if size <= MIN_RESERVATION {
                return Err(io::Error::last_os_error());
            }
            size /= 2;
        }
    }

    fn take(&mut self, bytes: usize) -> io::Result<Chunk> {
        let len = bytes.max(1).div_ceil(self.page) * self.page;
        let want = len + self.page;
        let (&at, &free_len) = (self.free.iter())
            .find(|&(_, &l)| l >= want)
            .ok_or_else(|| io::Error::new(io::ErrorKind::OutOfMemory, "JIT code memory is full"))?;
        self.free.remove(&at);
        if free_len > want {
            self.free.insert(at + want, free_len - want);
        }
        self.stats.in_use += len;
        Ok(Chunk { start: at, len })
    }

    // ANCHOR: give_back
    fn give_back(&mut self, chunk: Chunk) {
        debug_assert!(chunk.start >= self.base && chunk.start + chunk.len < self.base + self.size);
        // SAFETY: the chunk is ours and its owner guarantees that no code in
        // it runs or is called again (`give_back`'s contract).
        if unsafe { map_none(chunk.start, chunk.len) }.is_err() {
            // The pages stay mapped: never reuse them.
            self.stats.in_use -= chunk.len;
            self.stats.quarantined += chunk.len;
            return;
        }
        self.stats.in_use -= chunk.len;
        if self.quarantine {
            self.stats.quarantined += chunk.len;
            return;
        }
        let (mut start, mut len) = (chunk.start, chunk.len + self.page);
        if let Some((&prev, &prev_len)) = self.free.range(..start).next_back()
            && prev + prev_len == start
        {
            self.free.remove(&prev);
            start = prev;
            len += prev_len;
        }
        if let Some(next_len) = self.free.remove(&(start + len)) {
            len += next_len;
        }
        self.free.insert(start, len);
    }
    // ANCHOR_END: give_back
}

/// Takes a chunk of at least `bytes` (rounded up to pages), inaccessible
/// until its owner changes the protection.
///
/// # Errors
/// The reservation cannot be made, or it has no free run that large.
pub fn take(bytes: usize) -> io::Result<Chunk> {
    let mut arena = ARENA.lock();
    if arena.is_none() {
        *arena = Some(Arena::reserve()?);
    }
    arena.as_mut().expect("reserved").take(bytes)
}

/// Gives `chunk` back: its pages are released at once; its addresses are
/// handed out again unless the quarantine is on.
///
/// # Safety
/// `chunk` came from [`take`] and is given back once; no code in it runs
/// or is called again, and nothing (the system unwinder, a profiler that
/// resolves addresses while the process runs) still describes it.
pub unsafe fn give_back(chunk: Chunk) {
    if let Some(arena) = ARENA.lock().as_mut() {
        arena.give_back(chunk);
    }
}

/// From now on, freed chunks are quarantined (see the module docs): called
/// when a perf map is opened. It stays on for the life of the process,
/// since the map names every address it ever listed until perf reads it.
pub fn quarantine_freed_code() {
    let mut arena = ARENA.lock();
    if arena.is_none() {
        // Nothing handed out yet: reserve now, so the flag has a home.
        match Arena::reserve() {
            Ok(a) => *arena = Some(a),
            Err(_) => return,
        }
    }
    if let Some(arena) = arena.as_mut() {
        arena.quarantine = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_are_page_runs_with_a_guard_page_between() {
        let page = page_size();
        let a = take(1).unwrap();
        let b = take(page + 1).unwrap();
        assert_eq!(a.len, page);
        assert_eq!(b.len, 2 * page);
        assert!(b.start >= a.start + a.len + page || a.start >= b.start + b.len + page);
        // SAFETY: nothing runs in either chunk.
        unsafe {
            give_back(a);
            give_back(b);
        }
    }
}
