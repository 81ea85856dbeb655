//! Registers compiled code's `.eh_frame` with the system unwinder (libgcc's
//! `__register_frame`), so Rust backtraces, panics and debuggers walk
//! through JIT frames. The one place with the FFI for it.
//!
//! libgcc takes a whole zero-terminated `.eh_frame` section with absolute
//! addresses (built by `perfsupport::unwind::eh_frame_for_register_frame`)
//! and keeps a pointer to it: the bytes are leaked, like the code they
//! describe (see `code_memory`), and never deregistered.

unsafe extern "C" {
    /// libgcc (and LLVM libunwind in libgcc-compatible mode) on Linux.
    fn __register_frame(begin: *const u8);
}

// ANCHOR: register_frame
/// Registers `eh_frame` (a whole section, CIE first, zero terminator last)
/// for the rest of the process.
pub fn register(eh_frame: Vec<u8>) {
    // Only a terminator: nothing to register.
    if eh_frame.len() <= 4 {
        return;
    }
    let bytes: &'static [u8] = Box::leak(eh_frame.into_boxed_slice());
    // SAFETY: `bytes` is a well-formed `.eh_frame` section (perfsupport's
    // builder writes CIE/FDE pairs with absptr addresses of live code, then
    // the terminator), and it is leaked, so it stays valid and unmoved for
    // as long as libgcc may read it.
    unsafe { __register_frame(bytes.as_ptr()) };
}
// ANCHOR_END: register_frame
