//! [`CodeRegion::validate`]: the checks every sink relies on, so a bad region
//! is rejected by all sinks alike before anything is written.
//!
//! It sits above `region` (the checks on names, code and lines) and
//! `unwind` (the unwind check builds perf's unwind payload, the strictest
//! layout, `unwind::perf_layout`), and below the sinks, which call it.

use crate::region::CodeRegion;
use crate::unwind::perf_layout::perf_unwind_data_size;
use std::io;

impl CodeRegion<'_> {
    /// Checks what every sink relies on, so a bad region is rejected by all
    /// sinks alike before anything is written: non-empty code below 2 GiB
    /// (perf reads sizes as `int`); a name perf keeps intact (at least
    /// [`MIN_NAME_LEN`](crate::region::MIN_NAME_LEN) bytes, no `\n`, `\r` or
    /// NUL); name and line table below 1 GiB; a sorted line table inside the
    /// code whose file names have no `\n`, `\r` or NUL; and unwind
    /// information that describes exactly this code (see [`crate::unwind`]).
    ///
    /// [`Profilers::register`](crate::Profilers::register) calls it once per
    /// batch before any sink writes; each sink calls it again when used on
    /// its own.
    ///
    /// # Errors
    ///
    /// `InvalidInput`, naming the region and the problem.
    pub fn validate(&self) -> io::Result<()> {
        self.validate_except_unwind()?;
        if self.unwind.is_some() {
            perf_unwind_data_size(self.size(), self.unwind)
                .map_err(|err| self.unwind_error(err))?;
        }
        Ok(())
    }
}

/// Validates every region of a batch (see [`CodeRegion::validate`]) and
/// that no two of them share a code byte ([`check_disjoint`]).
pub(crate) fn validate_batch(regions: &[CodeRegion<'_>]) -> io::Result<()> {
    regions.iter().try_for_each(CodeRegion::validate)?;
    check_disjoint(regions)
}

/// Refuses a batch in which two regions' code overlaps: one finalize
/// cannot have put two functions in one byte, and perf would keep only
/// one of them.
pub(crate) fn check_disjoint(regions: &[CodeRegion<'_>]) -> io::Result<()> {
    let mut ranges: Vec<(u64, u64, &str)> = (regions.iter())
        .map(|r| (r.start(), r.start() + r.size(), r.name))
        .collect();
    ranges.sort_unstable();
    for pair in ranges.windows(2) {
        let ((start, end, name), (next, next_end, next_name)) = (pair[0], pair[1]);
        if next < end {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "code regions {name:?} ({start:#x}..{end:#x}) and {next_name:?} \
                     ({next:#x}..{next_end:#x}) of one batch overlap"
                ),
            ));
        }
    }
    Ok(())
}

/// Checks the ranges of dead code handed to `retire` (start address, size
/// in bytes): each names at least one byte and ends inside the address
/// space. A range of 0 bytes names no code, and one whose `start + size`
/// wraps around would make every sink's "is this region inside it?" test
/// wrong (the GDB sink once retired nothing for `{start, usize::MAX}` and
/// answered success).
///
/// [`Profilers::retire`](crate::Profilers::retire) calls it once before any
/// sink is told; each sink calls it again when used on its own, and a VM
/// (or an API over this crate) may call it to refuse bad ranges itself.
///
/// # Errors
///
/// `InvalidInput`, naming the range.
pub fn validate_ranges(ranges: &[(usize, usize)]) -> io::Result<()> {
    for (index, &(start, size)) in ranges.iter().enumerate() {
        let problem = if size == 0 {
            "has 0 bytes (a dead region has at least one)"
        } else if start.checked_add(size).is_none() {
            "ends past the end of the address space (start + size overflows)"
        } else {
            continue;
        };
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("dead code range {index} ({start:#x}, {size} bytes) {problem}"),
        ));
    }
    Ok(())
}
