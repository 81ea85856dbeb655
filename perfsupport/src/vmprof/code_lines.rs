//! The line tables of compiled code, for the sampler in lines mode.
//!
//! A sample in lines mode records the line each frame is executing. For a
//! frame that runs compiled code, the innermost one's line is known only
//! from the **interrupted program counter**: the VM cannot store it on
//! every instruction the way an interpreter can. A JIT therefore publishes,
//! for each region of machine code, which `(key, line)` every byte of it
//! belongs to ([`publish_code_lines`]), *before* the code first runs; the
//! signal handler looks the interrupted pc up here
//! ([`lookup`], used by [`super::frame_view`]).
//!
//! `key` is the VM's key of the code the bytes belong to, the same key as
//! in its frame records ([`super::FrameView::key_offset`]): for inlined
//! code, the inlined callee's. The handler uses a row's line only when its
//! key is the innermost frame's; otherwise (code running while another
//! frame is the innermost record: a callee's prologue before its record is
//! written, or a caller that has written its callee's record and not yet
//! called it; an inlined callee without a record of its own) it takes the
//! line from the frame record, like for a caller.
//!
//! # Signal safety
//!
//! The regions form a singly linked list of boxed nodes, pushed at the
//! front (writers take a mutex, so that only one changes the list at a
//! time). The handler walks it with acquire loads and binary-searches a
//! node's rows: no lock, no allocation, and a node's rows never change
//! after it is published.
//!
//! **Retraction** ([`retract_many_code_lines`]; toyvm's `CodeGen` calls it
//! before it frees a chunk of code) sets the node's `end` to 0 (no handler
//! matches it from then on), unlinks it, and frees it once no handler can
//! still be reading it. Each handler walk counts itself in `READERS` (a
//! SeqCst increment before it loads `HEAD`, a decrement after its last
//! read); the writer unlinks (SeqCst), then waits until it sees `READERS`
//! at 0. A walk that began before the unlink is counted and waited for; one
//! that began after cannot reach the node. The wait is for handlers that
//! are running (microseconds), never for one that has to be scheduled by
//! the waiting thread: a handler interrupting the writer itself runs to
//! completion first. So a JIT that frees its code gives the tables' memory
//! back too, and later code at the same addresses is never given them.
//!
//! The walk is linear in the number of regions: a few microseconds for a
//! thousand regions, once per sample.

use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

use super::fork::ForkSafeLock;

/// What one run of machine code belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct CodeLineRow {
    /// Offset from the region's start where the run begins; it lasts up
    /// to the next row's offset (the last one up to the region's end).
    pub offset: u32,
    /// The VM's key of the code (as in its frame records).
    pub key: u32,
    /// The source line; 0 when unknown.
    pub line: u32,
    /// For code inlined into another function: that function's key and
    /// the line of its call, used when the innermost frame is that
    /// function (the inlined call has no frame record of its own). For
    /// other code, the same as `key` and `line`.
    pub outer_key: u32,
    /// See `outer_key`.
    pub outer_line: u32,
}

impl CodeLineRow {
    /// A row for code that is not inlined.
    pub fn new(offset: u32, key: u32, line: u32) -> CodeLineRow {
        CodeLineRow {
            offset,
            key,
            line,
            outer_key: key,
            outer_line: line,
        }
    }

    /// The line this code is on for a frame whose key is `key`: `line`
    /// for the code's own function, `outer_line` for the function it was
    /// inlined into; `None` for any other.
    pub fn line_for(&self, key: u32) -> Option<u32> {
        if key == self.key {
            Some(self.line)
        } else if key == self.outer_key {
            Some(self.outer_line)
        } else {
            None
        }
    }
}

/// One published region.
struct Region {
    start: usize,
    /// One past the last byte; 0 once retracted.
    end: AtomicUsize,
    /// Sorted by offset, the first at offset 0 (checked when published).
    rows: Box<[CodeLineRow]>,
    /// The region published before it (changed only by the writer, when it
    /// unlinks a retracted region).
    next: AtomicPtr<Region>,
}

/// The newest region; each points to the one published before it.
static HEAD: AtomicPtr<Region> = AtomicPtr::new(std::ptr::null_mut());
/// Serialises writers (never taken by the handler).
pub(super) static PUBLISH: ForkSafeLock<()> = ForkSafeLock::new(());
/// Handler walks of the list in progress (see the module docs).
static READERS: AtomicUsize = AtomicUsize::new(0);
/// Tables published since the process started.
static PUBLISHED: AtomicUsize = AtomicUsize::new(0);

/// In a forked child (see `super::fork`): handlers that were walking the
/// tables in the parent's other threads are not in the child, and never
/// will count themselves out.
pub(super) fn forget_parent_readers() {
    READERS.store(0, Ordering::SeqCst);
}

// ANCHOR: publish_code_lines
/// Publishes the line table of the machine code `start .. start + len`:
/// from now on a sample interrupted in it gets its innermost line from
/// `rows` (sorted by offset; a region with no row at offset 0 gets line 0
/// for its first bytes). Call it before the code first runs.
///
/// The table stays until [`retract_code_lines`] (or the process exits);
/// the code must not be replaced by other code at the same addresses
/// without retracting it first.
pub fn publish_code_lines(start: *const u8, len: usize, mut rows: Vec<CodeLineRow>) {
    rows.sort_by_key(|row| row.offset);
    if rows.first().is_none_or(|row| row.offset != 0) {
        rows.insert(0, CodeLineRow::new(0, u32::MAX, 0));
    }
    let _writer = PUBLISH.lock();
    let region = Box::new(Region {
        start: start as usize,
        end: AtomicUsize::new((start as usize).saturating_add(len)),
        rows: rows.into_boxed_slice(),
        next: AtomicPtr::new(HEAD.load(Ordering::Acquire)),
    });
    // Release: the node is complete before a handler can reach it.
    HEAD.store(Box::into_raw(region), Ordering::Release);
    PUBLISHED.fetch_add(1, Ordering::Relaxed);
}
// ANCHOR_END: publish_code_lines

/// Stops using the table published for the code at `start` (e.g. before
/// that code is freed) and frees it (see the module docs).
pub fn retract_code_lines(start: *const u8) {
    retract_many_code_lines([start]);
}

/// [`retract_code_lines`] for every region in `starts`, in one walk of the
/// list (a JIT freeing all its code at once retracts thousands of regions).
pub fn retract_many_code_lines(starts: impl IntoIterator<Item = *const u8>) {
    let mut starts: Vec<usize> = starts.into_iter().map(|p| p as usize).collect();
    starts.sort_unstable();
    let _writer = PUBLISH.lock();
    // Unlink every matching node: `link` is the pointer that leads to the
    // current node (`HEAD` or the previous node's `next`).
    let mut unlinked: Vec<*mut Region> = Vec::new();
    let mut link: &AtomicPtr<Region> = &HEAD;
    loop {
        let node = link.load(Ordering::Acquire);
        // SAFETY: nodes in the list are live boxes; only this writer (under
        // `PUBLISH`) unlinks or frees them.
        let Some(region) = (unsafe { node.as_ref() }) else {
            break;
        };
        if starts.binary_search(&region.start).is_ok() {
            region.end.store(0, Ordering::Release);
            link.store(region.next.load(Ordering::Acquire), Ordering::SeqCst);
            unlinked.push(node);
        } else {
            link = &region.next;
        }
    }
    if unlinked.is_empty() {
        return;
    }
    // Walks that may have reached an unlinked node are counted in READERS;
    // walks that start now cannot reach one.
    while READERS.load(Ordering::SeqCst) != 0 {
        std::hint::spin_loop();
        std::thread::yield_now();
    }
    for node in unlinked {
        // SAFETY: the node came from `Box::into_raw` in `publish_code_lines`,
        // is unreachable from `HEAD`, and no handler walk that could hold
        // it is still running (READERS was 0 after the unlink).
        drop(unsafe { Box::from_raw(node) });
    }
}

/// How many line tables were published in this process, and how many of
/// them are still held (published and not retracted: retracted tables are
/// freed): a JIT that frees its code should leave the second number where
/// it found it.
pub fn table_counts() -> (usize, usize) {
    let _writer = PUBLISH.lock();
    let mut live = 0;
    let mut node = HEAD.load(Ordering::Acquire).cast_const();
    // SAFETY: nodes in the list are live boxes, freed only under `PUBLISH`.
    while let Some(region) = unsafe { node.as_ref() } {
        live += 1;
        node = region.next.load(Ordering::Acquire);
    }
    (PUBLISHED.load(Ordering::Relaxed), live)
}

// ANCHOR: lookup
/// The row of the machine code at `pc`, if a published region holds it.
/// Async-signal-safe: atomic loads and a binary search.
pub fn lookup(pc: usize) -> Option<CodeLineRow> {
    // Counted before the first load of the list (see the module docs).
    READERS.fetch_add(1, Ordering::SeqCst);
    let mut found = None;
    let mut node = HEAD.load(Ordering::SeqCst).cast_const();
    // SAFETY: a node reachable when this walk began is not freed before
    // READERS goes back down (the writer waits for it); its rows are
    // immutable once the release store that linked it published it.
    while let Some(region) = unsafe { node.as_ref() } {
        if region.start <= pc && pc < region.end.load(Ordering::Acquire) {
            let offset = u32::try_from(pc - region.start).unwrap_or(u32::MAX);
            // The last row at or before `offset` (row 0 is at offset 0).
            let at = region.rows.partition_point(|row| row.offset <= offset);
            found = Some(region.rows[at.max(1) - 1]);
            break;
        }
        node = region.next.load(Ordering::Acquire);
    }
    READERS.fetch_sub(1, Ordering::SeqCst);
    found
}
// ANCHOR_END: lookup

#[cfg(test)]
mod tests {
    use super::*;

    fn row(offset: u32, key: u32, line: u32) -> CodeLineRow {
        CodeLineRow::new(offset, key, line)
    }

    #[test]
    fn a_pc_finds_the_row_that_covers_it() {
        let code = [0u8; 64];
        let start = code.as_ptr();
        assert_eq!(lookup(start as usize), None);
        publish_code_lines(
            start,
            64,
            vec![row(16, 3, 12), row(0, 3, 10), row(40, 7, 2)],
        );
        let at = |offset: usize| lookup(start as usize + offset).map(|r| (r.key, r.line));
        assert_eq!(at(0), Some((3, 10)));
        assert_eq!(at(15), Some((3, 10)));
        assert_eq!(at(16), Some((3, 12)));
        assert_eq!(at(39), Some((3, 12)));
        assert_eq!(at(63), Some((7, 2)));
        assert_eq!(at(64), None);
        retract_code_lines(start);
        assert_eq!(at(0), None);
    }

    #[test]
    fn many_regions_are_retracted_in_one_call() {
        let code = [0u8; 96];
        let start = code.as_ptr();
        for k in 0..3 {
            publish_code_lines(start.wrapping_add(32 * k), 32, vec![row(0, k as u32, 1)]);
        }
        retract_many_code_lines([start.wrapping_add(64), start]);
        assert_eq!(lookup(start as usize), None);
        assert_eq!(lookup(start as usize + 40).map(|r| r.key), Some(1));
        assert_eq!(lookup(start as usize + 64), None);
        retract_code_lines(start.wrapping_add(32));
        assert_eq!(lookup(start as usize + 40), None);
    }

    #[test]
    fn bytes_before_the_first_row_have_no_line() {
        let code = [0u8; 8];
        let start = code.as_ptr();
        publish_code_lines(start, 8, vec![row(4, 1, 9)]);
        assert_eq!(lookup(start as usize), Some(row(0, u32::MAX, 0)));
        assert_eq!(lookup(start as usize + 5), Some(row(4, 1, 9)));
        retract_code_lines(start);
    }

    #[test]
    fn retracted_tables_are_freed_while_other_threads_look_up() {
        use std::sync::atomic::AtomicBool;
        let code = vec![0u8; 4096];
        let base = code.as_ptr() as usize;
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let stop = std::sync::Arc::clone(&stop);
                std::thread::spawn(move || {
                    let mut found = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        for k in 0..64 {
                            if let Some(row) = lookup(base + k * 64 + 3) {
                                // Whatever it finds is a row of that region.
                                assert_eq!(row.key, k as u32);
                                found += 1;
                            }
                        }
                    }
                    found
                })
            })
            .collect();
        for _ in 0..2000 {
            for k in 0..64usize {
                let start = (base + k * 64) as *const u8;
                publish_code_lines(start, 64, vec![row(0, k as u32, 1)]);
            }
            retract_many_code_lines((0..64).map(|k| (base + k * 64) as *const u8));
        }
        stop.store(true, Ordering::Relaxed);
        for reader in readers {
            reader.join().expect("a reader panicked");
        }
        // (Other tests publish too: the count of tables held is checked
        // by jit/tests/vmprof_lines_retract.rs, in a process of its own.)
        for k in 0..64 {
            assert_eq!(lookup(base + k * 64 + 3), None);
        }
    }
}
