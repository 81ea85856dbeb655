//! Distinct build-ids for byte-identical regions, without touching code.
//!
//! `perf inject --jit` writes one ELF object per CODE_LOAD and gives it a
//! build-id. perf builds with libcrypto hash the load address and the code
//! (MD5), older ones read `/dev/urandom`, and current upstream perf hashes
//! **only the code bytes** (SHA-1 of the `code_size` bytes the record holds).
//! With that last rule, two regions with the same bytes (the per-function
//! interpreter-entry trampolines, or two guest functions that compile alike)
//! get one build-id, perf merges their objects, and every sample shows one
//! name.
//!
//! So the dump makes each dumped byte string unique, and changes nothing
//! else:
//!
//! * a region whose bytes were not dumped before is dumped **exactly** as it
//!   runs, so `perf annotate` shows the live instructions;
//! * a region whose bytes were already dumped gets [`MARKER_LEN`] bytes
//!   **appended** after its code (its CODE_LOAD `code_size` grows by that
//!   much). On x86-64 they decode as one `nopl disp32(%rax,%rax,1)` whose
//!   displacement is the marker, so `perf annotate` shows every instruction
//!   that runs, then one `nop` after the last one, which never runs.
//!
//! The code is never modified, in memory or in the dump. The appended bytes
//! lie in the tail the VM reserves after each region
//! ([`reserved_region_size`](crate::unwind::reserved_region_size) counts
//! them), so the injected mapping still overlaps no other region.
//!
//! The dump remembers a 64-bit hash of every byte string it wrote. A hash
//! collision between two different byte strings only adds a marker that was
//! not needed; identical bytes are always caught.

use std::collections::HashSet;
use std::hash::{DefaultHasher, Hasher};

/// Bytes appended to the dumped copy of a region whose bytes were already
/// dumped.
pub use crate::unwind::perf_layout::MARKER_LEN;

// ANCHOR: marker_bytes
/// The marker bytes for `value`: on x86-64 the 8-byte no-op
/// `nopl value(%rax,%rax,1)` (`0f 1f 84 00` + disp32), so disassemblers
/// decode it cleanly after the function's last instruction; elsewhere the
/// value's bytes.
fn marker_bytes(value: u32) -> [u8; MARKER_LEN] {
    let [a, b, c, d] = value.to_le_bytes();
    if cfg!(target_arch = "x86_64") {
        [0x0f, 0x1f, 0x84, 0x00, a, b, c, d]
    } else {
        [a, b, c, d, !a, !b, !c, !d]
    }
}
// ANCHOR_END: marker_bytes

/// The byte strings a dump has written so far, as hashes.
#[derive(Debug, Default)]
pub(crate) struct DumpedCode {
    hashes: HashSet<u64>,
}

impl DumpedCode {
    /// Decides how `code` is dumped: `None` to dump it as it is (its bytes
    /// are new), or the marker to append. `seed` (unique per region of this
    /// dump, and per process) picks the first marker tried; the next values
    /// are tried until the marked copy is new too.
    pub(crate) fn marker_for(&mut self, code: &[u8], seed: u32) -> Option<[u8; MARKER_LEN]> {
        if self.hashes.insert(hash_of(code, &[])) {
            return None;
        }
        let mut value = seed;
        loop {
            let marker = marker_bytes(value);
            if self.hashes.insert(hash_of(code, &marker)) {
                return Some(marker);
            }
            value = value.wrapping_add(1);
        }
    }
}

/// Hash of `code` followed by `marker`, equal to the hash of the
/// concatenation (the hasher is streaming), so a marked copy that happens to
/// equal another region's bytes is caught too.
fn hash_of(code: &[u8], marker: &[u8]) -> u64 {
    // SipHash with fixed keys: the same bytes hash alike for the whole run.
    let mut hasher = DefaultHasher::new();
    hasher.write(code);
    hasher.write(marker);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_repeated_bytes_get_a_marker_and_every_copy_is_unique() {
        let mut dumped = DumpedCode::default();
        let tramp = [0x55, 0x48, 0x89, 0xe5, 0x5d, 0xc3];
        assert_eq!(dumped.marker_for(&tramp, 7), None, "first copy exact");
        assert_eq!(
            dumped.marker_for(&[0x90, 0xc3], 7),
            None,
            "other bytes exact"
        );
        let second = dumped.marker_for(&tramp, 7).expect("second copy marked");
        // Same seed: the next value is taken, the copy stays unique.
        let third = dumped.marker_for(&tramp, 7).expect("third copy marked");
        assert_ne!(second, third);
        // Bytes equal to an earlier marked copy are themselves marked.
        let marked: Vec<u8> = [&tramp[..], &second].concat();
        assert!(dumped.marker_for(&marked, 99).is_some());
    }

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn the_x86_64_marker_is_one_nop_with_the_value_as_displacement() {
        assert_eq!(
            marker_bytes(0x1234_5678),
            [0x0f, 0x1f, 0x84, 0x00, 0x78, 0x56, 0x34, 0x12]
        );
    }
}
