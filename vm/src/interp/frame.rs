//! The entry ABI's types: the signature of every Toy function, its status
//! codes and the frame record each active frame has. [`crate::abi`]
//! explains the protocol and is where a tier takes these from.

use super::Vm;

// ANCHOR: entry_abi
/// The calling convention of every Toy function (see [`crate::abi`]).
pub type EntryFn = unsafe extern "C" fn(vm: *mut Vm<'_>, func: u32, base: *mut u64) -> u32;

/// Status returned by an [`EntryFn`]: the call completed.
pub const STATUS_OK: u32 = 0;
/// Status returned by an [`EntryFn`]: an error is recorded in the VM.
pub const STATUS_ERROR: u32 = 1;

/// One active frame: where its registers are and which function it runs.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct FrameRecord {
    /// Register 0 of the frame.
    pub base: *mut u64,
    /// Index of the function running in it.
    pub func: u32,
    /// Only while a vmprof session records lines ([`Vm::vmprof_lines`]):
    /// the [location](super::Locations) of an instruction on the line the frame is
    /// executing (instruction 0's when the frame is entered; the
    /// interpreter stores it at each instruction that starts a line,
    /// compiled code before each call, so a caller's is on its call's
    /// line). Stale otherwise; nothing but the sampler reads it.
    pub pc: u32,
}
// ANCHOR_END: entry_abi

// SAFETY: a null `base` and function 0 are a valid (inactive) record: all
// fields are plain integers and raw pointers.
unsafe impl crate::runtime::region::Zeroable for FrameRecord {}
