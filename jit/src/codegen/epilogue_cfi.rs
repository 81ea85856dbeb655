//! Call-frame rows for every `ret`: Cranelift describes a function's
//! prologue only, so at each return its FDE still gives the frame the
//! epilogue has just popped.
//!
//! Cranelift's System V unwind info has a row after each prologue step
//! (the frame pointer saved and set, each callee-saved register stored)
//! and nothing after: the CFA stays "frame pointer + 16" to the end of the
//! function. That holds until the epilogue's last step restores the frame
//! pointer (`pop rbp` on x86-64, `ldp x29, x30, [sp], #16` on aarch64);
//! at the `ret` that follows, the frame pointer is already the caller's,
//! so an unwinder stopped there (a sample, a debugger's `stepi`) takes the
//! caller's frame for ours and loses the caller. A function has one
//! epilogue per `return`, anywhere in its body.
//!
//! So at each `ret` this adds the row of the function's entry (CFA = the
//! stack pointer + what the call pushed, every register the caller's), and
//! right after it restores the body's row (`DW_CFA_remember_state` /
//! `DW_CFA_restore_state`), since code after a `ret` is still inside the
//! frame:
//!
//! | at | x86-64 | aarch64 |
//! |---|---|---|
//! | the `ret` | CFA = `rsp` + 8; `rbp` and saved registers: same value | CFA = `sp` + 0; `x29`, `x30` and saved registers: same value |
//! | after it | the body's rule again | the body's rule again |
//!
//! Returns are found in the code: on aarch64 every instruction is one
//! aligned word, so `ret` is the word `0xd65f03c0`; on x86-64 the code is
//! decoded (iced-x86) and `ret` is the one-byte `0xc3`.

use cranelift_codegen::isa::TargetIsa;
use cranelift_codegen::isa::unwind::UnwindInst;
use cranelift_codegen::{Final, MachBufferFinalized};
use gimli::write::{CallFrameInstruction, FrameDescriptionEntry};
use gimli::{AArch64, Register, X86_64};

/// `ret` (`ret x30`) on aarch64, as a little-endian word.
const AARCH64_RET: u32 = 0xd65f_03c0;

/// Adds the rows for each `ret` in `code` (see the module docs) to `fde`,
/// which Cranelift made for it. `buffer` gives the registers the prologue
/// saved. Architectures other than x86-64 and aarch64 are left as they are.
pub fn add_return_rows(
    fde: &mut FrameDescriptionEntry,
    isa: &dyn TargetIsa,
    buffer: &MachBufferFinalized<Final>,
    code: &[u8],
) {
    let Some((entry_cfa, frame_registers, returns)) = host_frame(code) else {
        return;
    };
    let mut saved: Vec<Register> = frame_registers.to_vec();
    for (_, inst) in &buffer.unwind_info {
        if let UnwindInst::SaveReg { reg, .. } = inst {
            if let Ok(dwarf) = isa.map_regalloc_reg_to_dwarf((*reg).into()) {
                saved.push(Register(dwarf));
            }
        }
    }
    saved.sort_by_key(|r| r.0);
    saved.dedup();
    let len = code.len() as u32;
    for (at, ret_len) in returns {
        fde.add_instruction(at, CallFrameInstruction::RememberState);
        fde.add_instruction(at, entry_cfa.clone());
        for &register in &saved {
            fde.add_instruction(at, CallFrameInstruction::SameValue(register));
        }
        if at + ret_len < len {
            fde.add_instruction(at + ret_len, CallFrameInstruction::RestoreState);
        }
    }
}

/// The entry CFA rule, the frame registers and each `ret` (offset, length)
/// in `code`. The JIT compiles for the host, so the host's architecture.
type Frame = (CallFrameInstruction, &'static [Register], Vec<(u32, u32)>);

fn host_frame(code: &[u8]) -> Option<Frame> {
    if cfg!(target_arch = "x86_64") {
        Some((
            CallFrameInstruction::Cfa(X86_64::RSP, 8),
            &[X86_64::RBP],
            x86_64_returns(code),
        ))
    } else if cfg!(target_arch = "aarch64") {
        Some((
            CallFrameInstruction::Cfa(AArch64::SP, 0),
            &[AArch64::X29, AArch64::X30],
            aarch64_returns(code),
        ))
    } else {
        None
    }
}

/// Offsets of the `ret` words (each 4 bytes long).
pub fn aarch64_returns(code: &[u8]) -> Vec<(u32, u32)> {
    (code.chunks_exact(4).enumerate())
        .filter(|(_, word)| u32::from_le_bytes([word[0], word[1], word[2], word[3]]) == AARCH64_RET)
        .map(|(i, _)| (i as u32 * 4, 4))
        .collect()
}

/// Offsets of the `ret` instructions (each 1 byte long), by decoding.
pub fn x86_64_returns(code: &[u8]) -> Vec<(u32, u32)> {
    use iced_x86::{Decoder, DecoderOptions, Mnemonic};
    let mut decoder = Decoder::with_ip(64, code, 0, DecoderOptions::NONE);
    let mut returns = Vec::new();
    while decoder.can_decode() {
        let inst = decoder.decode();
        if inst.mnemonic() == Mnemonic::Ret && inst.len() == 1 {
            returns.push((inst.ip() as u32, 1));
        }
    }
    returns
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn returns_are_found_by_instruction_not_by_byte() {
        // mov eax, 0xc3c3c3c3 (the bytes of four `ret`s as an immediate);
        // ret; nop; ret
        let x86 = [0xb8, 0xc3, 0xc3, 0xc3, 0xc3, 0xc3, 0x90, 0xc3];
        assert_eq!(x86_64_returns(&x86), [(5, 1), (7, 1)]);
        // ldp x29, x30, [sp], #16; ret; nop; ret
        let mut arm = Vec::new();
        for word in [0xa8c1_7bfd_u32, AARCH64_RET, 0xd503_201f, AARCH64_RET] {
            arm.extend(word.to_le_bytes());
        }
        assert_eq!(aarch64_returns(&arm), [(4, 4), (12, 4)]);
    }
}
