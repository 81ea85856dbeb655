//! Packed code: the regions a dump described that are still live, and the
//! rule that keeps perf's injected mappings from overlapping them.
//!
//! `perf inject --jit` maps each `JIT_CODE_LOAD` over
//! `[start, start + ALIGN8(dumped) + mapped_size)` (the code, then the
//! `.eh_frame` it reads through the mapping), or over `[start, start +
//! dumped)` for the header-only unwind form (`mapped_size` 0). A later
//! mapping cuts an earlier one where they overlap. So a region whose tail
//! mapping covers the next function loses its `.eh_frame` when that
//! function is loaded after it (no DWARF stack through it at all), and
//! takes that function's first bytes when it is loaded after it.
//!
//! Most JITs place functions back to back and register them one at a
//! time. The dump therefore keeps one [`Written`] per live region (where
//! its records are in the file, never its code) and applies, per region:
//!
//! 1. **Room or header-only.** A region gets its FDE only if no other live
//!    code, and no other region of its batch, starts inside
//!    `[end, start + ALIGN8(size) + mapped_size)`. Otherwise it is written
//!    header-only: perf's unwinder then falls back to the frame-pointer
//!    chain in it (full stacks only for code that keeps `rbp` frames).
//! 2. **Rewrite on arrival.** When new code lands in the tail of a region
//!    already written with its FDE, that region is written again
//!    header-only first (a new `JIT_CODE_LOAD` from the bytes in the dump),
//!    so its later, shorter mapping no longer reaches the new code.
//! 3. **Markers.** A region whose bytes the dump already holds is dumped
//!    with an 8-byte build-id marker after it (see [`super::build_id`]),
//!    which perf maps too. A batch is written in address order, so a
//!    neighbour of the same batch is loaded after the marker and wins; a
//!    live neighbour registered earlier is written again after it (its
//!    copy has a marker too, so its own neighbour follows: at most 16 per
//!    region written, then the 17th keeps 8 bytes under the 16th's marker).
//!
//! A dump that cannot be read back (a pipe, a write-only file) cannot
//! write a region again: there rules 2 and 3 leave the earlier load as it
//! is. [`JitDump::create_in`](super::JitDump::create_in) opens its file
//! for reading and writing.
//!
//! Code that dies ([`super::JitDump`]'s `retire`) leaves the live set; new
//! code over a live region's bytes replaces it.

use std::collections::BTreeMap;

/// A live region the dump wrote: enough to write it again header-only.
#[derive(Clone, Copy, Debug)]
pub(super) struct Written {
    /// Code bytes (without any build-id marker).
    pub(super) size: u64,
    /// Bytes perf maps from the start for its latest `JIT_CODE_LOAD`.
    pub(super) extent: u64,
    /// The latest load carries an FDE (its extent covers `.eh_frame`).
    pub(super) has_fde: bool,
    /// File offset and length of its latest `JIT_CODE_LOAD` record.
    pub(super) load: (u64, u32),
    /// File offset and length of its latest `JIT_CODE_DEBUG_INFO` record.
    pub(super) debug: Option<(u64, u32)>,
}

/// The live regions of a dump, by start address. Their code ranges never
/// overlap: new code over old bytes replaces the old region.
#[derive(Debug, Default)]
pub(super) struct LiveCode {
    regions: BTreeMap<u64, Written>,
}

impl LiveCode {
    /// Records `region` at `start` as written (replacing what was there).
    pub(super) fn insert(&mut self, start: u64, region: Written) {
        self.regions.insert(start, region);
    }

    /// The live region at `start`.
    pub(super) fn get(&self, start: u64) -> Option<Written> {
        self.regions.get(&start).copied()
    }

    /// Forgets the live regions whose code overlaps `[start, end)`.
    pub(super) fn forget_overlapping(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        let dead: Vec<u64> = self.overlapping_code(start, end).collect();
        for key in dead {
            self.regions.remove(&key);
        }
    }

    /// The starts of live regions whose code overlaps `[start, end)`.
    fn overlapping_code(&self, start: u64, end: u64) -> impl Iterator<Item = u64> + '_ {
        // A region starting before `start` overlaps only if it reaches it;
        // codes are disjoint, so only the last one before `start` can.
        let before = (self.regions.range(..start).next_back())
            .filter(|(s, r)| **s + r.size > start)
            .map(|(s, _)| *s);
        before
            .into_iter()
            .chain(self.regions.range(start..end).map(|(s, _)| *s))
    }

    /// The live region before `start` whose mapping with an FDE reaches
    /// past it: new code at `start` must not stay under its `.eh_frame`
    /// (rule 2). Call after forgetting the regions the new code overlaps.
    /// Only the nearest region before `start` can be one: no live code
    /// ever lies in the tail of a region that keeps its FDE (rules 1, 2).
    pub(super) fn fde_tail_over(&self, start: u64) -> Option<u64> {
        let (&before, region) = self.regions.range(..start).next_back()?;
        (region.has_fde && before + region.extent > start).then_some(before)
    }

    /// The first live region whose code starts in `[from, to)`: live code
    /// in a region's room (rule 1), or a neighbour a mapping reaching to
    /// `to` covers (rule 3).
    pub(super) fn first_start_within(&self, from: u64, to: u64) -> Option<u64> {
        if from >= to {
            return None;
        }
        self.regions.range(from..to).next().map(|(s, _)| *s)
    }

    /// Forgets the regions whose code overlaps any of `ranges` (start,
    /// size): their code died.
    pub(super) fn retire(&mut self, ranges: &[(usize, usize)]) {
        for &(start, size) in ranges {
            let start = start as u64;
            self.forget_overlapping(start, start.saturating_add(size as u64));
        }
    }

    /// Forgets everything (the dump stopped).
    pub(super) fn clear(&mut self) {
        self.regions.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(size: u64, extent: u64, has_fde: bool) -> Written {
        Written {
            size,
            extent,
            has_fde,
            load: (0, 0),
            debug: None,
        }
    }

    #[test]
    fn tails_and_overlaps_are_found_by_address() {
        let mut live = LiveCode::default();
        live.insert(0x1000, written(0x20, 0x80, true));
        live.insert(0x2000, written(0x20, 0x20, false));
        // New code at 0x1040 lies under 0x1000's .eh_frame.
        assert_eq!(live.fde_tail_over(0x1040), Some(0x1000));
        // Past its mapping, or a region without an FDE: nothing.
        assert_eq!(live.fde_tail_over(0x1080), None);
        assert_eq!(live.fde_tail_over(0x2020), None);
        assert_eq!(live.first_start_within(0x1fff, 0x2001), Some(0x2000));
        assert_eq!(live.first_start_within(0x1001, 0x2000), None);
        assert_eq!(live.first_start_within(0x1001, 0x2001), Some(0x2000));
        assert_eq!(live.first_start_within(0x2000, 0x2000), None);
        // A retire of no bytes forgets nothing.
        live.retire(&[(0x1010, 0)]);
        assert!(live.get(0x1000).is_some());
        // New code over old bytes replaces them; retiring forgets them.
        live.forget_overlapping(0x1010, 0x1011);
        assert!(live.get(0x1000).is_none());
        live.retire(&[(0x2010, 1)]);
        assert!(live.get(0x2000).is_none());
    }
}
