//! Registers compiled code's `.eh_frame` with the system unwinder (libgcc's
//! `__register_frame`), so Rust backtraces, panics and debuggers walk
//! through JIT frames. The one place with the FFI for it.
//!
//! libgcc takes a whole zero-terminated `.eh_frame` section with absolute
//! addresses (built by `perfsupport::unwind::eh_frame_for_register_frame`)
//! and keeps a pointer to it: [`Registrations`] owns the bytes of every
//! section it registered and withdraws them (`__deregister_frame`) when
//! dropped, which the pipeline does before it unmaps the code they
//! describe (see `code_memory`): an address of freed code may be mapped
//! again for other code, and the unwinder must not find the old entries.

unsafe extern "C" {
    /// libgcc (and LLVM libunwind in libgcc-compatible mode) on Linux.
    fn __register_frame(begin: *const u8);
    /// Withdraws a section registered with `__register_frame` (libgcc
    /// aborts for one it does not know).
    fn __deregister_frame(begin: *const u8);
}

// ANCHOR: register_frame
/// The `.eh_frame` sections registered for one JIT's code; dropping it
/// withdraws them.
#[derive(Default)]
pub struct Registrations {
    /// Every registered section; a boxed slice never moves its bytes.
    sections: Vec<Box<[u8]>>,
}

impl Registrations {
    /// Registers `eh_frame` (a whole section, CIE first, zero terminator
    /// last) until `self` is dropped.
    ///
    /// # Safety
    /// `eh_frame` must be a well-formed `.eh_frame` section (libgcc parses
    /// it without checks, now and at every later unwind) whose FDEs
    /// describe code that stays mapped, and is described truly, until
    /// `self` is dropped: the unwinder reads through these addresses
    /// whenever any thread unwinds, and a wrong rule makes it read or
    /// return to garbage.
    pub unsafe fn register(&mut self, eh_frame: Vec<u8>) {
        // Only a terminator: nothing to register.
        if eh_frame.len() <= 4 {
            return;
        }
        let bytes = eh_frame.into_boxed_slice();
        // SAFETY: `bytes` is a well-formed section describing live code
        // (the caller's contract); it is kept in `sections`, unmoved and
        // unchanged, until `drop` has deregistered it.
        unsafe { __register_frame(bytes.as_ptr()) };
        self.sections.push(bytes);
    }
}

impl Drop for Registrations {
    fn drop(&mut self) {
        for bytes in self.sections.drain(..).rev() {
            // SAFETY: `bytes` was registered by `register` and not
            // deregistered since (each section is drained once); libgcc
            // forgets it before the bytes are freed at the end of this
            // iteration.
            unsafe { __deregister_frame(bytes.as_ptr()) };
        }
    }
}
// ANCHOR_END: register_frame

#[cfg(test)]
mod tests {
    use super::*;
    use gimli::write::{CallFrameInstruction, CommonInformationEntry, FrameDescriptionEntry};
    use perfsupport::{CodeRegion, UnwindInfo};

    /// `struct dwarf_eh_bases` of libgcc's `unwind-dw2-fde.h`.
    #[repr(C)]
    struct DwarfEhBases {
        tbase: *mut u8,
        dbase: *mut u8,
        func: *mut u8,
    }

    unsafe extern "C" {
        /// libgcc: the FDE covering `pc`, or null.
        fn _Unwind_Find_FDE(pc: *mut u8, bases: *mut DwarfEhBases) -> *const u8;
    }

    /// True if the system unwinder has an FDE for `pc`.
    fn unwinder_knows(pc: *const u8) -> bool {
        let mut bases = DwarfEhBases {
            tbase: std::ptr::null_mut(),
            dbase: std::ptr::null_mut(),
            func: std::ptr::null_mut(),
        };
        // SAFETY: a lookup only; `bases` is a valid out parameter.
        !unsafe { _Unwind_Find_FDE(pc.cast_mut(), &mut bases) }.is_null()
    }

    #[test]
    fn dropping_the_registrations_withdraws_them() {
        // Stand-in "code": a heap buffer this test owns, so no other code
        // (and no other test) has unwind info at these addresses.
        let code = vec![0xc3u8; 64];
        let mut cie = CommonInformationEntry::new(
            gimli::Encoding {
                address_size: 8,
                format: gimli::Format::Dwarf32,
                version: 1,
            },
            1,
            -8,
            gimli::X86_64::RA,
        );
        cie.add_instruction(CallFrameInstruction::Cfa(gimli::X86_64::RSP, 8));
        cie.add_instruction(CallFrameInstruction::Offset(gimli::X86_64::RA, -8));
        let fde = FrameDescriptionEntry::new(perfsupport::unwind::REGION_START, code.len() as u32);
        let region = CodeRegion::new(&code, "stand-in").with_unwind(UnwindInfo {
            cie: &cie,
            fde: &fde,
        });
        let eh_frame =
            perfsupport::unwind::eh_frame_for_register_frame(&[region]).expect("eh_frame");
        let pc = code[10..].as_ptr();
        assert!(!unwinder_knows(pc));
        let mut registrations = Registrations::default();
        // SAFETY: perfsupport built the section for `code`, which outlives
        // `registrations`; the CIE and FDE describe a frame-less function
        // truly (the return address at the CFA - 8).
        unsafe { registrations.register(eh_frame) };
        assert!(unwinder_knows(pc), "registered");
        drop(registrations);
        assert!(!unwinder_knows(pc), "withdrawn");
    }
}
