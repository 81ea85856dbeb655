//! Relocating a compiled region for the address it will run at, before it
//! is written there.
//!
//! Cranelift leaves the addresses of what a region calls (helpers, other
//! compiled functions, libcalls) as relocations. The pipeline places every
//! batch itself (`pipeline::CodeGen::finish`): it knows each region's final
//! address before writing a byte, so it patches a copy of the code here and
//! then writes it once, already final. cranelift-jit's `JITModule` is only
//! the table of declarations the IR builder names functions by: nothing is
//! ever defined in it, so it keeps no record per compile (a recompiled
//! function reuses its ids), and a process that compiles without end holds
//! memory in proportion to its live code, not to its history.
//!
//! The relocation kinds are those Cranelift emits for non-PIC code:
//! 64-bit absolute addresses (imports called through a register) and
//! 32-bit PC-relative calls and references on x86-64; `bl` on aarch64.
//! A target out of reach of its relocation is an error (the batch is not
//! placed and its functions stay interpreted), never a wrapped offset.

use cranelift_codegen::binemit::Reloc;
use cranelift_module::{ModuleReloc, ModuleRelocTarget};

/// Patches `code`, which will run at address `at`, for its relocations;
/// `resolve` gives the address of each target (`None`: unknown).
///
/// # Errors
/// A message naming the relocation that cannot be applied: an unknown
/// target, an offset outside the code, a kind this JIT does not place, or
/// a target out of the relocation's reach.
pub fn apply(
    code: &mut [u8],
    at: usize,
    relocs: &[ModuleReloc],
    resolve: impl Fn(&ModuleRelocTarget) -> Option<usize>,
) -> Result<(), String> {
    for reloc in relocs {
        let offset = reloc.offset as usize;
        let target = resolve(&reloc.name)
            .ok_or_else(|| format!("relocation at +{offset}: unknown target {:?}", reloc.name))?;
        let what = (target as i128) + i128::from(reloc.addend);
        let place = (at as i128) + offset as i128;
        let out_of_reach = || {
            format!(
                "relocation {:?} at +{offset}: target {target:#x} is out of reach",
                reloc.kind
            )
        };
        match reloc.kind {
            Reloc::Abs8 => {
                let value = u64::try_from(what).map_err(|_| out_of_reach())?;
                patch(code, offset, &value.to_le_bytes())?;
            }
            Reloc::X86PCRel4 | Reloc::X86CallPCRel4 | Reloc::X86CallPLTRel4 => {
                let value = i32::try_from(what - place).map_err(|_| out_of_reach())?;
                patch(code, offset, &value.to_le_bytes())?;
            }
            Reloc::Arm64Call => {
                // `bl imm26`: the offset in instructions, signed 26 bits.
                let delta = what - place;
                let words = delta >> 2;
                if delta & 3 != 0 || !(-(1 << 25)..(1 << 25)).contains(&words) {
                    return Err(out_of_reach());
                }
                let old = read_u32(code, offset)?;
                let new = (old & !0x03ff_ffff) | (words as u32 & 0x03ff_ffff);
                patch(code, offset, &new.to_le_bytes())?;
            }
            kind => {
                return Err(format!(
                    "relocation at +{offset}: {kind:?} is not supported"
                ));
            }
        }
    }
    Ok(())
}

/// Writes `bytes` at `offset` of `code`.
fn patch(code: &mut [u8], offset: usize, bytes: &[u8]) -> Result<(), String> {
    let end = offset.checked_add(bytes.len()).filter(|&e| e <= code.len());
    let end = end.ok_or_else(|| format!("relocation at +{offset} is outside the code"))?;
    code[offset..end].copy_from_slice(bytes);
    Ok(())
}

fn read_u32(code: &[u8], offset: usize) -> Result<u32, String> {
    let bytes = (code.get(offset..offset + 4))
        .ok_or_else(|| format!("relocation at +{offset} is outside the code"))?;
    Ok(u32::from_le_bytes(bytes.try_into().expect("4 bytes")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cranelift_codegen::ir::UserExternalName;

    fn reloc(kind: Reloc, offset: u32, index: u32, addend: i64) -> ModuleReloc {
        let name = UserExternalName::new(0, index);
        ModuleReloc {
            kind,
            offset,
            name: ModuleRelocTarget::User {
                namespace: name.namespace,
                index: name.index,
            },
            addend,
        }
    }

    fn target(t: &ModuleRelocTarget) -> Option<usize> {
        match t {
            ModuleRelocTarget::User { index: 1, .. } => Some(0x1000_0000),
            ModuleRelocTarget::User { index: 2, .. } => Some(0x7fff_0000_0000),
            _ => None,
        }
    }

    #[test]
    fn absolute_and_pc_relative_relocations_are_patched_for_the_run_address() {
        let mut code = [0u8; 16];
        let relocs = [
            reloc(Reloc::Abs8, 0, 1, 8),
            reloc(Reloc::X86CallPCRel4, 8, 1, -4),
        ];
        apply(&mut code, 0x0fff_0000, &relocs, target).unwrap();
        assert_eq!(
            u64::from_le_bytes(code[0..8].try_into().unwrap()),
            0x1000_0008
        );
        // target - 4 - (at + 8)
        let rel = i32::from_le_bytes(code[8..12].try_into().unwrap());
        assert_eq!(rel as i64, 0x1000_0000 - 4 - (0x0fff_0000 + 8));
    }

    #[test]
    fn a_target_out_of_reach_or_unknown_is_an_error() {
        let mut code = [0u8; 8];
        let far = [reloc(Reloc::X86CallPCRel4, 0, 2, -4)];
        let err = apply(&mut code, 0x1000, &far, target).unwrap_err();
        assert!(err.contains("out of reach"), "{err}");
        let unknown = [reloc(Reloc::Abs8, 0, 9, 0)];
        assert!(apply(&mut code, 0x1000, &unknown, target).is_err());
        let outside = [reloc(Reloc::Abs8, 4, 1, 0)];
        assert!(apply(&mut code, 0x1000, &outside, target).is_err());
    }

    #[test]
    fn an_aarch64_call_keeps_its_opcode_and_reaches_128_mib() {
        // bl #0
        let mut code = 0x9400_0000u32.to_le_bytes();
        let relocs = [reloc(Reloc::Arm64Call, 0, 1, 0)];
        apply(&mut code, 0x1000_0000 - 8, &relocs, target).unwrap();
        assert_eq!(u32::from_le_bytes(code), 0x9400_0002);
        let mut code = 0x9400_0000u32.to_le_bytes();
        // 128 MiB ahead is one word too far; 128 MiB back is the last reach.
        assert!(apply(&mut code, 0x1000_0000 - (128 << 20), &relocs, target).is_err());
        assert!(apply(&mut code, 0x1000_0000 + (128 << 20), &relocs, target).is_ok());
    }
}
