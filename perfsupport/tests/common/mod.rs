//! Helpers shared by the integration tests: a hand-written x86-64 function
//! and scratch directories.
#![allow(dead_code)] // each test binary uses a different subset

/// `fn spin(n: u64)`: `push rbp; mov rbp,rsp; loop: dec rdi; jnz loop; pop rbp; ret`.
/// Lines: 1 for the prologue (offset 0), 2 for the loop (offset 4), 3 for the
/// epilogue (offset 9).
pub const SPIN_CODE: [u8; 11] = [
    0x55, // 0: push rbp
    0x48, 0x89, 0xe5, // 1: mov rbp, rsp
    0x48, 0xff, 0xcf, // 4: dec rdi
    0x75, 0xfb, // 7: jnz 4
    0x5d, // 9: pop rbp
    0xc3, // 10: ret
];

/// Offsets where each source line of [`SPIN_CODE`] starts.
pub const SPIN_LINES: [(u32, u32); 3] = [(0, 1), (4, 2), (9, 3)];

/// Rounds up to a multiple of `align`.
pub fn align_up(value: u64, align: u64) -> u64 {
    value.div_ceil(align) * align
}

/// A fresh scratch directory whose path does not start with `/tmp/perf-`.
pub fn scratch_dir(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("psupport-{tag}-"))
        .tempdir()
        .expect("create scratch dir")
}
