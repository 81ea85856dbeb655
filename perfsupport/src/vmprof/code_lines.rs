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
//! The regions form a singly linked list of leaked nodes, pushed at the
//! front with one atomic compare-and-swap (writers also take a mutex, so
//! that only one pushes at a time). The handler walks it with acquire loads
//! and binary-searches a node's rows: no lock, no allocation, and a node
//! never changes after it is published, except its `end`, which
//! [`retract_code_lines`] sets to 0 (one atomic store). Nodes are never
//! freed, since a handler may be reading one at any moment: a region costs
//! its rows' memory until the process exits. A JIT that frees code retracts
//! its tables first ([`retract_many_code_lines`]; toyvm's `CodeGen` does it
//! when dropped), so later code at the same addresses is never given them.
//!
//! The walk is linear in the number of regions: a few microseconds for a
//! thousand regions, once per sample.

use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

use parking_lot::Mutex;

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
    next: *const Region,
}

/// The newest region; each points to the one published before it.
static HEAD: AtomicPtr<Region> = AtomicPtr::new(std::ptr::null_mut());
/// Serialises writers (never taken by the handler).
static PUBLISH: Mutex<()> = Mutex::new(());

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
        next: HEAD.load(Ordering::Acquire),
    });
    // Release: the node is complete before a handler can reach it.
    HEAD.store(Box::into_raw(region), Ordering::Release);
}
// ANCHOR_END: publish_code_lines

/// Stops using the table published for the code at `start` (e.g. before
/// that code is freed). Its memory stays (see the module docs).
pub fn retract_code_lines(start: *const u8) {
    retract_many_code_lines([start]);
}

/// [`retract_code_lines`] for every region in `starts`, in one walk of the
/// list (a JIT freeing all its code at once retracts thousands of regions).
pub fn retract_many_code_lines(starts: impl IntoIterator<Item = *const u8>) {
    let mut starts: Vec<usize> = starts.into_iter().map(|p| p as usize).collect();
    starts.sort_unstable();
    let _writer = PUBLISH.lock();
    let mut node = HEAD.load(Ordering::Acquire).cast_const();
    // SAFETY: nodes are leaked boxes, never freed, immutable but for `end`.
    while let Some(region) = unsafe { node.as_ref() } {
        if starts.binary_search(&region.start).is_ok() {
            region.end.store(0, Ordering::Release);
        }
        node = region.next;
    }
}

/// How many line tables were published in this process, and how many of
/// them are still in use (not retracted): a JIT that frees its code should
/// leave the second number where it found it.
pub fn table_counts() -> (usize, usize) {
    let _writer = PUBLISH.lock();
    let (mut published, mut live) = (0, 0);
    let mut node = HEAD.load(Ordering::Acquire).cast_const();
    // SAFETY: nodes are leaked boxes, never freed, immutable but for `end`.
    while let Some(region) = unsafe { node.as_ref() } {
        published += 1;
        live += usize::from(region.end.load(Ordering::Acquire) != 0);
        node = region.next;
    }
    (published, live)
}

// ANCHOR: lookup
/// The row of the machine code at `pc`, if a published region holds it.
/// Async-signal-safe: atomic loads and a binary search.
pub fn lookup(pc: usize) -> Option<CodeLineRow> {
    let mut node = HEAD.load(Ordering::Acquire).cast_const();
    // SAFETY: nodes are leaked boxes, never freed; everything but `end` is
    // immutable once the release store of `HEAD` published it.
    while let Some(region) = unsafe { node.as_ref() } {
        if region.start <= pc && pc < region.end.load(Ordering::Acquire) {
            let offset = u32::try_from(pc - region.start).unwrap_or(u32::MAX);
            // The last row at or before `offset` (row 0 is at offset 0).
            let at = region.rows.partition_point(|row| row.offset <= offset);
            return Some(region.rows[at.max(1) - 1]);
        }
        node = region.next;
    }
    None
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
}
