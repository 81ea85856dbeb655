//! A frame's registers as the interpreter reads and writes them.

use crate::bytecode::Reg;

/// The frame's registers: register `r` is the 64-bit slot `r` of the
/// function's window on the value stack. Typed accessors keep the handlers
/// close to the instruction table's doc lines.
#[derive(Clone, Copy)]
#[repr(transparent)]
pub(super) struct Regs(*mut u64);

impl Regs {
    /// The registers of the frame whose register 0 is at `base`.
    #[inline(always)]
    pub(super) fn new(base: *mut u64) -> Regs {
        Regs(base)
    }

    /// Register 0's address.
    #[inline(always)]
    pub(super) fn base(self) -> *mut u64 {
        self.0
    }

    /// Register `r`'s raw bits.
    #[inline(always)]
    pub(super) unsafe fn get(self, r: Reg) -> u64 {
        // SAFETY: `r < frame_size` (verified), the frame is in the stack.
        unsafe { *self.0.add(r as usize) }
    }

    /// Sets register `r`'s raw bits.
    #[inline(always)]
    pub(super) unsafe fn set(self, r: Reg, v: u64) {
        // SAFETY: as for `get`.
        unsafe { *self.0.add(r as usize) = v }
    }

    /// Register `r` as an `int`.
    #[inline(always)]
    pub(super) unsafe fn int(self, r: Reg) -> i64 {
        // SAFETY: as for `get` (the caller's contract).
        unsafe { self.get(r) as i64 }
    }

    /// Register `r` as a `float`.
    #[inline(always)]
    pub(super) unsafe fn flt(self, r: Reg) -> f64 {
        // SAFETY: as for `get`.
        unsafe { f64::from_bits(self.get(r)) }
    }

    #[inline(always)]
    pub(super) unsafe fn set_int(self, r: Reg, v: i64) {
        // SAFETY: as for `set`.
        // SAFETY: as for `set`.
        unsafe { self.set(r, v as u64) }
    }

    #[inline(always)]
    pub(super) unsafe fn set_flt(self, r: Reg, v: f64) {
        // SAFETY: as for `set`.
        unsafe { self.set(r, v.to_bits()) }
    }

    #[inline(always)]
    pub(super) unsafe fn set_bool(self, r: Reg, v: bool) {
        // SAFETY: as for `set`.
        // SAFETY: as for `set`.
        unsafe { self.set(r, v as u64) }
    }

    /// The address of register `r` (a callee's window).
    #[inline(always)]
    pub(super) unsafe fn at(self, r: Reg) -> *mut u64 {
        // SAFETY: as for `get`: the address stays inside the frame.
        unsafe { self.0.add(r as usize) }
    }
}
