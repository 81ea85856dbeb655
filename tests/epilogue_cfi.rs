//! At every `ret` of compiled code, the unwind info describes the frame
//! the epilogue has left (the caller's), not the one it just popped
//! (`jit/src/codegen/epilogue_cfi.rs`). Read from the `--jit-elf` code
//! files, as every native unwinder reads them: for each FDE, the rule at
//! each `ret` must be the function's entry rule (CFA = `rsp` + 8 / `sp` +
//! 0, the frame registers not on the stack), and the instruction after a
//! `ret` inside the function must be back in the body's rule (CFA from the
//! frame pointer). Runs natively on x86_64 and, in `tools/aarch64-tests`,
//! on aarch64 under qemu.

mod common;

use common::{repo_root, toyvm_in};
use gimli::{
    BaseAddresses, CfaRule, EhFrame, LittleEndian, Register, RegisterRule, UnwindContext,
    UnwindSection,
};
use object::{Object, ObjectSection, ObjectSymbol};

/// (stack pointer, frame pointer, CFA offset at entry, frame registers,
/// `ret` offsets and lengths in `code`).
struct Arch {
    sp: Register,
    fp: Register,
    entry_offset: i64,
    frame_registers: &'static [Register],
}

#[cfg(target_arch = "x86_64")]
const ARCH: Arch = Arch {
    sp: gimli::X86_64::RSP,
    fp: gimli::X86_64::RBP,
    entry_offset: 8,
    frame_registers: &[gimli::X86_64::RBP],
};
#[cfg(target_arch = "aarch64")]
const ARCH: Arch = Arch {
    sp: gimli::AArch64::SP,
    fp: gimli::AArch64::X29,
    entry_offset: 0,
    frame_registers: &[gimli::AArch64::X29, gimli::AArch64::X30],
};

/// Offsets and lengths of the `ret` instructions in `code`.
#[cfg(target_arch = "x86_64")]
fn returns(code: &[u8]) -> Vec<(u64, u64)> {
    use iced_x86::{Decoder, DecoderOptions, Mnemonic};
    let mut decoder = Decoder::with_ip(64, code, 0, DecoderOptions::NONE);
    let mut out = Vec::new();
    while decoder.can_decode() {
        let inst = decoder.decode();
        if inst.mnemonic() == Mnemonic::Ret {
            out.push((inst.ip(), inst.len() as u64));
        }
    }
    out
}

/// Offsets and lengths of the `ret` (`ret x30`) words in `code`.
#[cfg(target_arch = "aarch64")]
fn returns(code: &[u8]) -> Vec<(u64, u64)> {
    (code.chunks_exact(4).enumerate())
        .filter(|(_, w)| u32::from_le_bytes([w[0], w[1], w[2], w[3]]) == 0xd65f_03c0)
        .map(|(i, _)| (i as u64 * 4, 4))
        .collect()
}

/// A function with many returns (one per `if`), called often enough to be
/// compiled with its OSR variant and entry shim.
const MANY_RETURNS: &str = include_str!("unwind/many_returns.toy");

#[test]
fn every_ret_has_the_callers_frame_and_the_code_after_it_the_bodys() {
    let dir = tempfile::tempdir().expect("temp dir");
    let script = dir.path().join("returns.toy");
    std::fs::write(&script, MANY_RETURNS).expect("script");
    let files = dir.path().join("files");
    std::fs::create_dir(&files).expect("files dir");
    let run = toyvm_in(
        &repo_root(),
        &[
            "run",
            "--jit-threshold",
            "2",
            "--jit-elf",
            "--perf-dir",
            files.to_str().expect("utf-8"),
            script.to_str().expect("utf-8"),
        ],
        &[],
    );
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    assert_eq!(run.stdout.trim(), "58827");
    let mut checked_rets = 0;
    let mut checked_after = 0;
    let mut functions = Vec::new();
    for entry in std::fs::read_dir(&files).expect("files").flatten() {
        for file in std::fs::read_dir(entry.path())
            .expect("toyvm-PID")
            .flatten()
        {
            let bytes = std::fs::read(file.path()).expect("code file");
            let elf = object::File::parse(&*bytes).expect("an ELF");
            let section = elf.section_by_name(".eh_frame").expect(".eh_frame");
            let eh_data = section.data().expect("data");
            let mut eh = EhFrame::new(eh_data, LittleEndian);
            eh.set_address_size(8);
            let bases = BaseAddresses::default().set_eh_frame(section.address());
            let mut ctx = UnwindContext::new();
            for symbol in elf.symbols() {
                let (start, size) = (symbol.address(), symbol.size());
                let name = symbol.name().expect("name").to_owned();
                let text = elf
                    .sections()
                    .find(|s| s.address() <= start && start + size <= s.address() + s.size())
                    .expect("the symbol's section");
                let code = &text.data().expect("code")
                    [(start - text.address()) as usize..(start - text.address() + size) as usize];
                let mut rule = |pc: u64| -> (CfaRule<usize>, Vec<Register>) {
                    let row = eh
                        .unwind_info_for_address(&bases, &mut ctx, pc, EhFrame::cie_from_offset)
                        .unwrap_or_else(|e| panic!("{name} +{:#x}: no row: {e}", pc - start));
                    let on_stack = (ARCH.frame_registers.iter().copied())
                        .filter(|&r| matches!(row.register(r), Some(RegisterRule::Offset(_))))
                        .collect();
                    (row.cfa().clone(), on_stack)
                };
                let rets = returns(code);
                if rets.is_empty() {
                    continue;
                }
                functions.push(name.clone());
                for (at, len) in rets {
                    let (cfa, on_stack) = rule(start + at);
                    assert_eq!(
                        (cfa, on_stack),
                        (
                            CfaRule::RegisterAndOffset {
                                register: ARCH.sp,
                                offset: ARCH.entry_offset
                            },
                            vec![]
                        ),
                        "{name}: the `ret` at +{at:#x}"
                    );
                    checked_rets += 1;
                    if at + len < size {
                        let (cfa, _) = rule(start + at + len);
                        assert!(
                            matches!(cfa, CfaRule::RegisterAndOffset { register, .. } if register == ARCH.fp),
                            "{name}: after the `ret` at +{at:#x}: {cfa:?}"
                        );
                        checked_after += 1;
                    }
                }
            }
        }
    }
    eprintln!(
        "epilogue CFI: {checked_rets} returns and {checked_after} instructions after one, in {} functions",
        functions.len()
    );
    assert!(
        functions.iter().any(|f| f.starts_with("toy:jit:pick:")),
        "pick was compiled: {functions:?}"
    );
    assert!(
        checked_rets >= 7 && checked_after >= 6,
        "{checked_rets} {checked_after}"
    );
}
