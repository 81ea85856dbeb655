//! vmprof lines mode: how a frame record names the instruction its frame
//! is at ([`FrameRecord::pc`](crate::abi::FrameRecord::pc)).
//!
//! The record holds a **location**: the low 32 bits of the address of the
//! instruction's [`Slot`] in the interpreter's code of its function, its
//! program counter. The sampler turns it back into a bytecode index with
//! the function's base, the location of its instruction 0:
//!
//! ```text
//! location(func, pc) = base[func] + pc * 16      (mod 2^32)
//! pc                 = (location - base[func]) >> 4
//! ```
//!
//! An address, not the index, because the interpreter has the address in
//! a register (`ip`, see `handlers`): an instruction that starts a line
//! stores it with one load (the record's address) and one store, where the
//! index cost two more instructions and a second load on every line start
//! (`(ip - code) >> 4`). In `mandelbrot`, five of the fourteen instructions
//! of the inner loop start a line, and the index made `--vmprof-lines`
//! cost the interpreter 6-7% (`bench/RESULTS.md`). CPython's frames keep
//! an instruction pointer for the same reason. The low 32 bits are enough:
//! a function's slots are one allocation, far smaller than 4 GiB, so the
//! difference modulo 2^32 is exact.
//!
//! Compiled code stores the same locations (before each call, see the
//! JIT's `translate::lines`), from [`Locations::at`]: an OSR variant
//! continues the record of an interpreted activation, and the sampler
//! needs one encoding per function.

use super::handlers::{STRIDE, Slot};
use crate::bytecode::Op;

/// log2 of the bytes from one instruction's location to the next (the
/// size of a [`Slot`]).
pub const LOCATION_SHIFT: u32 = STRIDE.trailing_zeros();

const _: () = assert!(1 << LOCATION_SHIFT == STRIDE);

/// The location of the instruction at `ip` (see the module docs).
#[inline(always)]
pub(super) fn location(ip: *const Op) -> u32 {
    // Truncation is the encoding: the low 32 bits of the address.
    ip as usize as u32
}

/// Every function's base: the location of its instruction 0. Valid while
/// the VM keeps its slots, which it builds once per session
/// (`Vm::record_lines`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Locations {
    bases: Box<[u32]>,
}

impl Locations {
    /// The locations of the slots `code`, per function.
    pub(crate) fn of<'s>(code: impl Iterator<Item = &'s [Slot]>) -> Locations {
        Locations {
            bases: code.map(|slots| location(slots.as_ptr().cast())).collect(),
        }
    }

    /// The location of instruction `pc` of function `func` (0 for a
    /// function the VM does not have).
    pub fn at(&self, func: u32, pc: u32) -> u32 {
        let base = self.bases.get(func as usize).copied().unwrap_or(0);
        base.wrapping_add(pc << LOCATION_SHIFT)
    }

    /// Per function, the location of its instruction 0.
    pub fn bases(&self) -> &[u32] {
        &self.bases
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_location_is_its_slots_address_and_maps_back_to_its_index() {
        let src = "fn f(n: int) -> int {\n  let s = 0;\n  for i in 0..n { s += i; }\n  return s;\n}\nprint(f(3));\n";
        let m = crate::driver::load("t.toy", src.as_bytes()).expect("compiles");
        let code: Vec<Box<[Slot]>> = (m.functions.iter())
            .map(|f| super::super::handlers::slots(f, true))
            .collect();
        let locations = Locations::of(code.iter().map(|c| &**c));
        assert_eq!(locations.bases().len(), m.functions.len());
        for (func, slots) in code.iter().enumerate() {
            for pc in 0..slots.len() as u32 {
                let at = locations.at(func as u32, pc);
                let ip: *const Op = (&slots[pc as usize] as *const Slot).cast();
                assert_eq!(at, location(ip));
                // What the sampler computes (`perfsupport::vmprof::FrameLines`).
                let base = locations.bases()[func];
                assert_eq!(at.wrapping_sub(base) >> LOCATION_SHIFT, pc);
            }
        }
        assert_eq!(locations.at(99, 0), 0);
    }
}
