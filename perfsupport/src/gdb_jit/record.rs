//! What the debugger object of a region is built from, kept after
//! registration so that objects can be merged (see [`GdbJit`](super::GdbJit)).
//!
//! A [`CodeRegion`] borrows the caller's code, name, CFI and line table for
//! the duration of one `register` call. A [`RegionRecord`] owns copies of
//! everything the ELF object needs, and nothing of the code itself: the
//! object's `.text` is `SHT_NOBITS` at the live address, so the start and
//! the size are all it takes.

use crate::dwarf::RegionView;
use crate::region::{CodeRegion, LineEntry, UnwindInfo};
use gimli::write::{CommonInformationEntry, FrameDescriptionEntry};

/// One region as the debugger object describes it, owned.
#[derive(Clone)]
pub(super) struct RegionRecord {
    pub(super) start: u64,
    size: u64,
    pub(super) name: String,
    cfi: Option<(CommonInformationEntry, FrameDescriptionEntry)>,
    /// The line table's distinct file names, indexed by `rows`.
    files: Vec<String>,
    /// (offset, index into `files`, line, column) per line-table row.
    rows: Vec<(u32, usize, u32, u32)>,
}

impl RegionRecord {
    /// Copies what the debugger object needs from a validated region.
    pub(super) fn new(region: &CodeRegion<'_>) -> RegionRecord {
        let mut files: Vec<String> = Vec::new();
        let rows = region
            .lines
            .iter()
            .map(|entry| {
                // Line tables name one file, rarely a few: a scan is enough.
                let file = match files.iter().position(|f| f == entry.file) {
                    Some(i) => i,
                    None => {
                        files.push(entry.file.to_owned());
                        files.len() - 1
                    }
                };
                (entry.offset, file, entry.line, entry.column)
            })
            .collect();
        RegionRecord {
            start: region.start(),
            size: region.size(),
            name: region.name.to_owned(),
            cfi: region.unwind.map(|u| (u.cie.clone(), u.fde.clone())),
            files,
            rows,
        }
    }

    /// The line table as [`LineEntry`] rows borrowing this record.
    pub(super) fn lines(&self) -> Vec<LineEntry<'_>> {
        self.rows
            .iter()
            .map(|&(offset, file, line, column)| LineEntry {
                offset,
                file: &self.files[file],
                line,
                column,
            })
            .collect()
    }

    /// The view of this record, with `lines` from [`RegionRecord::lines`].
    pub(super) fn view<'a>(&'a self, lines: &'a [LineEntry<'a>]) -> RegionView<'a> {
        RegionView {
            start: self.start,
            size: self.size,
            name: &self.name,
            unwind: self.cfi.as_ref().map(|(cie, fde)| UnwindInfo { cie, fde }),
            lines,
        }
    }
}
