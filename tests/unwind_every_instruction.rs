//! At every instruction of every piece of code toyvm emits, the unwind info
//! says where the caller's frame is, and it says it right: the CFA the
//! `.eh_frame` row gives there equals the one the stack-pointer changes
//! before it leave. `tests/epilogue_cfi.rs` checks the rows at each `ret`;
//! this test checks all the others, statically, so that instructions on
//! paths no run takes (the error exits, the stack-overflow call, the `ud2`
//! of an OSR variant's entry check) are checked as well as the hot ones: a
//! profiler's sample or a debugger's stop can land on any of them, and one
//! wrong row there is a broken stack for whoever unwinds through it.
//!
//! The code and its CFI are read from the `--jit-elf` code files, as every
//! native unwinder reads them: toyvm runs a set of scripts in several tiers
//! (eagerly compiled, tiered with OSR, interpreted behind trampolines) and
//! the test walks each FDE of each file. For each FDE it simulates the
//! function over its disassembly (iced-x86 for an `EM_X86_64` file,
//! yaxpeax-arm for an `EM_AARCH64` one, chosen by the file and not by the
//! host, so the same test checks aarch64 files natively and under qemu):
//!
//! - It tracks how far the stack pointer is below the CFA (8 at entry on
//!   x86_64, where the call pushed the return address; 0 on aarch64) and,
//!   once the frame pointer is set from the stack pointer (`mov rbp, rsp`,
//!   `mov x29, sp`), how far the frame pointer is, and where the caller's
//!   frame pointer and the return address are saved.
//! - It models each instruction that writes the stack or frame pointer
//!   (push, pop, `sub`/`add` of an immediate, the frame-pointer moves,
//!   `leave`, aarch64's pre- and post-indexed stores and loads on `sp`,
//!   calls, returns). Any other instruction that writes one of them (found
//!   through iced-x86's used-register info, or yaxpeax-arm's destination
//!   and write-back operands), and any indirect jump, is a failure naming
//!   the instruction: nothing is skipped silently.
//! - At each instruction it evaluates the CFI row there and compares: a CFA
//!   of `sp+N` must have N equal to the simulated distance, a CFA of `fp+N`
//!   needs the frame pointer set and N its distance; a saved frame pointer
//!   or return address (`Offset` rule) must be at the slot the simulation
//!   saw it stored in, and a rule that leaves one in its register must
//!   come where the register still holds the caller's value.
//!
//! Control flow: the simulation follows the code as a worklist from the
//! FDE's start, through fall-through and every direct branch target, so
//! each instruction is checked with the frame of a path that reaches it
//! (after a `ret`, an unconditional jump or a trap, the next instruction
//! gets the frame of the branch that leads there). Where two paths meet,
//! their frames must agree, or that is reported too. The bytes no path
//! reaches are then sorted out: the constants reached instructions load
//! (RIP-relative operands, aarch64 `ldr` literals, inline or in the pool
//! after the code) and runs of zeros (alignment padding) are not code;
//! anything else is dead code (Cranelift sometimes leaves a `jmp` or `b`
//! after a `ret`), decoded straight through and checked with the body's
//! frame (the one most reached instructions run in), taken again after
//! each `ret`, jump or trap, since that is the row an unwinder must find
//! there (`tests/epilogue_cfi.rs` checks the same after each `ret`). This
//! is exact for Cranelift's code: its frame is fixed after the prologue
//! (no dynamic stack allocation), every epilogue undoes the whole prologue
//! and ends in `ret`, and it emits no indirect jumps here (toy has no
//! `switch` for a jump table; one would fail the test, not be skipped).
//!
//! The checker is plain code over bytes, independent of the host: the unit
//! tests at the end feed it hand-made code and CFI of both architectures
//! with a deliberately wrong row, and an instruction it cannot model, and
//! check that it reports them.

mod common;

use common::{parallel_map, repo_root, toyvm_in};
use gimli::{
    BaseAddresses, CfaRule, CieOrFde, EhFrame, EndianSlice, LittleEndian, Register, RegisterRule,
    UnwindContext, UnwindSection,
};
use object::{Object, ObjectSection, ObjectSymbol};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

// ---------------------------------------------------------------------------
// The architectures
// ---------------------------------------------------------------------------

/// The instruction set of a code file (its ELF machine, not the host's).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Isa {
    X86_64,
    AArch64,
}

impl Isa {
    /// The instruction set of an ELF file, if it is one the test decodes.
    fn of(elf: &object::File) -> Option<Isa> {
        match elf.architecture() {
            object::Architecture::X86_64 => Some(Isa::X86_64),
            object::Architecture::Aarch64 => Some(Isa::AArch64),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Isa::X86_64 => "x86_64",
            Isa::AArch64 => "aarch64",
        }
    }

    /// The DWARF numbers of the stack pointer, the frame pointer and the
    /// return-address column.
    fn registers(self) -> (Register, Register, Register) {
        match self {
            Isa::X86_64 => (gimli::X86_64::RSP, gimli::X86_64::RBP, gimli::X86_64::RA),
            Isa::AArch64 => (gimli::AArch64::SP, gimli::AArch64::X29, gimli::AArch64::X30),
        }
    }

    /// The frame at a function's first instruction: on x86_64 the call has
    /// pushed the return address (the CFA is `rsp` + 8 and the address is
    /// at CFA - 8); on aarch64 the CFA is `sp` itself and the return
    /// address is in the link register.
    fn entry_state(self) -> State {
        match self {
            Isa::X86_64 => State {
                sp: 8,
                fp: None,
                fp_slot: None,
                ra_slot: Some(8),
                ra_in_register: false,
            },
            Isa::AArch64 => State {
                sp: 0,
                fp: None,
                fp_slot: None,
                ra_slot: None,
                ra_in_register: true,
            },
        }
    }
}

// ---------------------------------------------------------------------------
// The simulated frame
// ---------------------------------------------------------------------------

/// The frame as the simulation knows it before one instruction. Distances
/// are in bytes below the CFA (the caller's stack pointer before the call).
#[derive(Clone, Debug, PartialEq, Eq)]
struct State {
    /// Where the stack pointer is.
    sp: i64,
    /// Where the frame pointer points, once set from the stack pointer;
    /// `None` while it still holds the caller's value.
    fp: Option<i64>,
    /// Where the caller's frame pointer is saved, while it is.
    fp_slot: Option<i64>,
    /// Where the return address is saved, while it is.
    ra_slot: Option<i64>,
    /// Whether the link register still holds the return address (aarch64,
    /// until a call overwrites it; never on x86_64).
    ra_in_register: bool,
}

impl State {
    /// Whether two paths meeting at one instruction agree on the frame.
    /// The link register is left out: once the return address is saved, a
    /// path with a call and one without both unwind through the slot.
    fn same_frame(&self, other: &State) -> bool {
        (self.sp, self.fp, self.fp_slot, self.ra_slot)
            == (other.sp, other.fp, other.fp_slot, other.ra_slot)
    }
}

/// A register the unwinder restores from a stack slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Saved {
    FramePointer,
    ReturnAddress,
}

/// One thing an instruction does to the frame; an instruction is a list of
/// them, applied in order. Offsets are bytes from the stack pointer at that
/// point (before the instruction's own write-back).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    /// Stores the register at `sp` + offset.
    Save(Saved, i64),
    /// Loads the register back from `sp` + offset.
    Restore(Saved, i64),
    /// `sp` += n (a push or `sub` is negative).
    AddSp(i64),
    /// `sp` = `fp` + n.
    SpFromFp(i64),
    /// `fp` = `sp` + n.
    FpFromSp(i64),
    /// A call overwrites the link register (aarch64's `bl`, `blr`).
    ClobberLinkRegister,
}

/// Where the code goes after one instruction (offsets in the region).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flow {
    /// To the next instruction (calls too: they come back with `sp` as it was).
    Next,
    /// Only to the target.
    Jump(u64),
    /// To the target or the next instruction.
    Branch(u64),
    /// Out of the function.
    Return,
    /// Nowhere: a trap (`ud2`, `udf`, `brk`, `int3`).
    Stop,
}

/// One decoded instruction, as the simulation sees it.
#[derive(Clone, Debug)]
struct Decoded {
    len: u64,
    text: String,
    ops: Vec<Op>,
    flow: Flow,
    /// The constant it loads relative to the program counter (offset in
    /// the region, size): data, not code.
    constant: Option<(u64, u64)>,
}

/// An instruction the decoder cannot decode or the simulation cannot model.
#[derive(Debug)]
struct Unmodeled {
    text: String,
    why: String,
}

/// Applies one instruction's ops to `state`, or says why they do not fit
/// it (a restore from a slot the register was not saved in, a frame-pointer
/// move with no frame pointer set).
fn apply(state: &State, ops: &[Op]) -> Result<State, String> {
    let mut s = state.clone();
    for &op in ops {
        match op {
            Op::Save(what, at) => match what {
                Saved::FramePointer => s.fp_slot = Some(s.sp - at),
                Saved::ReturnAddress => s.ra_slot = Some(s.sp - at),
            },
            Op::Restore(what, at) => {
                let slot = s.sp - at;
                restore(&mut s, what, slot)?
            }
            Op::AddSp(n) => s.sp -= n,
            Op::SpFromFp(n) => {
                let fp =
                    s.fp.ok_or("sets the stack pointer from a frame pointer not set")?;
                s.sp = fp - n;
            }
            Op::FpFromSp(n) => s.fp = Some(s.sp - n),
            Op::ClobberLinkRegister => s.ra_in_register = false,
        }
    }
    Ok(s)
}

/// Loads the frame pointer or return address from the slot `slot` below the
/// CFA: the caller's value again, if that is where it was saved.
fn restore(s: &mut State, what: Saved, slot: i64) -> Result<(), String> {
    let saved = match what {
        Saved::FramePointer => &mut s.fp_slot,
        Saved::ReturnAddress => &mut s.ra_slot,
    };
    if *saved != Some(slot) {
        return Err(format!(
            "loads the {what:?} from CFA-{slot}, but it was saved at {}",
            describe_slot(*saved)
        ));
    }
    *saved = None;
    match what {
        Saved::FramePointer => s.fp = None,
        Saved::ReturnAddress => s.ra_in_register = true,
    }
    Ok(())
}

fn describe_slot(slot: Option<i64>) -> String {
    slot.map_or("no slot".to_string(), |d| format!("CFA-{d}"))
}

// ---------------------------------------------------------------------------
// x86_64
// ---------------------------------------------------------------------------

/// Decodes the x86_64 instruction at the start of `code` (at `offset` in
/// its region) and models what it does to the frame.
fn decode_x86(code: &[u8], offset: u64) -> Result<Decoded, Unmodeled> {
    use iced_x86::{Decoder, DecoderOptions, Formatter, IntelFormatter, Mnemonic};
    let mut decoder = Decoder::with_ip(64, code, offset, DecoderOptions::NONE);
    let inst = decoder.decode();
    let mut text = String::new();
    IntelFormatter::new().format(&inst, &mut text);
    let fail = |why: &str| Unmodeled {
        text: text.clone(),
        why: why.to_string(),
    };
    if inst.is_invalid() || inst.mnemonic() == Mnemonic::INVALID {
        return Err(fail("not a valid instruction"));
    }
    let flow = x86_flow(&inst).map_err(fail)?;
    let ops = x86_ops(&inst).map_err(|why| fail(&why))?;
    let constant = (inst.is_ip_rel_memory_operand()).then(|| {
        (
            inst.ip_rel_memory_address(),
            inst.memory_size().size() as u64,
        )
    });
    Ok(Decoded {
        len: inst.len() as u64,
        text,
        ops,
        flow,
        constant,
    })
}

/// Where an x86_64 instruction goes next; an indirect jump is an error (its
/// targets are not in the code).
fn x86_flow(inst: &iced_x86::Instruction) -> Result<Flow, &'static str> {
    use iced_x86::FlowControl;
    Ok(match inst.flow_control() {
        FlowControl::Next | FlowControl::Call | FlowControl::IndirectCall => Flow::Next,
        FlowControl::UnconditionalBranch => Flow::Jump(inst.near_branch_target()),
        FlowControl::ConditionalBranch => Flow::Branch(inst.near_branch_target()),
        FlowControl::Return => Flow::Return,
        FlowControl::Interrupt | FlowControl::Exception => Flow::Stop,
        FlowControl::IndirectBranch => return Err("an indirect jump: its targets are unknown"),
        FlowControl::XbeginXabortXend => return Err("a transaction instruction"),
    })
}

/// What an x86_64 instruction does to `rsp`, `rbp` and their slots. The
/// forms Cranelift's prologues and epilogues use are modeled; any other
/// instruction that writes `rsp` or `rbp` is an error.
fn x86_ops(inst: &iced_x86::Instruction) -> Result<Vec<Op>, String> {
    use iced_x86::{FlowControl, Mnemonic, OpKind, Register as R};
    let reg = |i: u32| (inst.op_kind(i) == OpKind::Register).then(|| inst.op_register(i));
    let imm = matches!(
        inst.op_kind(1),
        OpKind::Immediate8to64 | OpKind::Immediate32to64 | OpKind::Immediate32
    )
    .then(|| inst.immediate(1) as i64);
    // A call pushes the return address and the callee's `ret` pops it.
    if matches!(
        inst.flow_control(),
        FlowControl::Call | FlowControl::IndirectCall | FlowControl::Return
    ) {
        return Ok(vec![]);
    }
    let pushed = inst.stack_pointer_increment() as i64;
    let ops = match (inst.mnemonic(), reg(0), reg(1), imm) {
        (Mnemonic::Push, Some(R::RBP), _, _) => {
            vec![Op::Save(Saved::FramePointer, -8), Op::AddSp(-8)]
        }
        (Mnemonic::Push, _, _, _) => vec![Op::AddSp(pushed)],
        (Mnemonic::Pop, Some(R::RBP), _, _) => {
            vec![Op::Restore(Saved::FramePointer, 0), Op::AddSp(8)]
        }
        (Mnemonic::Pop, Some(r), _, _) if !writes_frame(r) => vec![Op::AddSp(pushed)],
        (Mnemonic::Sub, Some(R::RSP), _, Some(n)) => vec![Op::AddSp(-n)],
        (Mnemonic::Add, Some(R::RSP), _, Some(n)) => vec![Op::AddSp(n)],
        (Mnemonic::Mov, Some(R::RBP), Some(R::RSP), _) => vec![Op::FpFromSp(0)],
        (Mnemonic::Mov, Some(R::RSP), Some(R::RBP), _) => vec![Op::SpFromFp(0)],
        (Mnemonic::Lea, Some(R::RSP), _, _)
            if inst.memory_base() == R::RBP && inst.memory_index() == R::None =>
        {
            vec![Op::SpFromFp(inst.memory_displacement64() as i64)]
        }
        (Mnemonic::Leave, _, _, _) => vec![
            Op::SpFromFp(0),
            Op::Restore(Saved::FramePointer, 0),
            Op::AddSp(8),
        ],
        _ => match x86_frame_write(inst) {
            Some(r) => {
                return Err(format!(
                    "writes {r:?} in a way the simulation does not model"
                ));
            }
            None => vec![],
        },
    };
    Ok(ops)
}

/// Whether `r` is (part of) `rsp` or `rbp`.
fn writes_frame(r: iced_x86::Register) -> bool {
    matches!(
        r.full_register(),
        iced_x86::Register::RSP | iced_x86::Register::RBP
    )
}

/// The frame register (`rsp` or `rbp`) an instruction writes, if any, from
/// iced-x86's used-register info (explicit and implicit operands).
fn x86_frame_write(inst: &iced_x86::Instruction) -> Option<iced_x86::Register> {
    use iced_x86::{InstructionInfoFactory, OpAccess};
    let mut factory = InstructionInfoFactory::new();
    let info = factory.info(inst);
    info.used_registers()
        .iter()
        .filter(|u| {
            matches!(
                u.access(),
                OpAccess::Write
                    | OpAccess::CondWrite
                    | OpAccess::ReadWrite
                    | OpAccess::ReadCondWrite
            )
        })
        .map(|u| u.register())
        .find(|&r| writes_frame(r))
}

// ---------------------------------------------------------------------------
// aarch64
// ---------------------------------------------------------------------------

/// Register 31 in a memory base or a `RegisterOrSP` operand: `sp`.
const SP: u16 = 31;
const FP: u16 = 29;
const LR: u16 = 30;

/// Decodes the aarch64 instruction at the start of `code` (at `offset` in
/// its region) and models what it does to the frame.
fn decode_arm(code: &[u8], offset: u64) -> Result<Decoded, Unmodeled> {
    use yaxpeax_arch::{Arch, Decoder, U8Reader};
    use yaxpeax_arm::armv8::a64::ARMv8;
    let word = code.get(..4).ok_or_else(|| Unmodeled {
        text: format!("{code:02x?}"),
        why: "a partial instruction word".into(),
    })?;
    let inst = <ARMv8 as Arch>::Decoder::default()
        .decode(&mut U8Reader::new(word))
        .map_err(|e| Unmodeled {
            text: format!(
                ".word {:#010x}",
                u32::from_le_bytes(word.try_into().unwrap())
            ),
            why: format!("not a valid instruction ({e})"),
        })?;
    let text = inst.to_string();
    let fail = |why: String| Unmodeled {
        text: text.clone(),
        why,
    };
    let flow = arm_flow(&inst, offset).map_err(|why| fail(why.to_string()))?;
    let ops = arm_ops(&inst).map_err(fail)?;
    Ok(Decoded {
        len: 4,
        text,
        ops,
        flow,
        constant: arm_literal(&inst, offset),
    })
}

/// The literal a `ldr` (literal) loads: its offset in the region and size.
fn arm_literal(inst: &yaxpeax_arm::armv8::a64::Instruction, offset: u64) -> Option<(u64, u64)> {
    use yaxpeax_arm::armv8::a64::{Opcode as O, Operand, SIMDSizeCode as V, SizeCode};
    let Operand::PCOffset(d) = inst.operands[1] else {
        return None;
    };
    let size = match (inst.opcode, inst.operands[0]) {
        (O::LDRSW, _) => 4,
        (O::LDR, Operand::Register(SizeCode::X, _)) => 8,
        (O::LDR, Operand::Register(SizeCode::W, _)) => 4,
        (O::LDR, Operand::SIMDRegister(size, _)) => match size {
            V::B => 1,
            V::H => 2,
            V::S => 4,
            V::D => 8,
            V::Q => 16,
        },
        _ => return None,
    };
    Some((offset.wrapping_add(d as u64), size))
}

/// Where an aarch64 instruction goes next; an indirect jump is an error.
fn arm_flow(
    inst: &yaxpeax_arm::armv8::a64::Instruction,
    offset: u64,
) -> Result<Flow, &'static str> {
    use yaxpeax_arm::armv8::a64::{Opcode as O, Operand};
    let target = || {
        inst.operands.iter().find_map(|op| match *op {
            Operand::PCOffset(d) => Some(offset.wrapping_add(d as u64)),
            _ => None,
        })
    };
    Ok(match inst.opcode {
        O::B => Flow::Jump(target().ok_or("b without a target")?),
        O::Bcc(_) | O::CBZ | O::CBNZ | O::TBZ | O::TBNZ => {
            Flow::Branch(target().ok_or("a branch without a target")?)
        }
        O::RET | O::RETAA | O::RETAB => Flow::Return,
        O::UDF | O::BRK | O::HLT => Flow::Stop,
        O::BR | O::BRAA | O::BRAAZ | O::BRAB | O::BRABZ => {
            return Err("an indirect jump: its targets are unknown");
        }
        O::ERET | O::ERETAA | O::ERETAB | O::DRPS => return Err("an exception return"),
        _ => Flow::Next,
    })
}

/// What an aarch64 instruction does to `sp`, `x29`, `x30` and their slots.
/// The forms Cranelift's prologues and epilogues use are modeled; any other
/// instruction that writes one of the three is an error.
fn arm_ops(inst: &yaxpeax_arm::armv8::a64::Instruction) -> Result<Vec<Op>, String> {
    use yaxpeax_arm::armv8::a64::Opcode as O;
    if let Some(ops) = arm_sp_memory_ops(inst)? {
        return Ok(ops);
    }
    if let Some(ops) = arm_add_sub_ops(inst) {
        return Ok(ops);
    }
    if matches!(
        inst.opcode,
        O::BL | O::BLR | O::BLRAA | O::BLRAAZ | O::BLRAB | O::BLRABZ
    ) {
        return Ok(vec![Op::ClobberLinkRegister]);
    }
    match arm_writes(inst)
        .into_iter()
        .find(|r| [SP, FP, LR].contains(r))
    {
        Some(r) => Err(format!(
            "writes {} in a way the simulation does not model",
            arm_name(r)
        )),
        None => Ok(vec![]),
    }
}

fn arm_name(r: u16) -> &'static str {
    match r {
        SP => "sp",
        FP => "x29",
        _ => "x30",
    }
}

/// The stores and loads Cranelift's prologues and epilogues use: `stp`,
/// `str`, `ldp`, `ldr` (and their unscaled forms) with `sp` as the base,
/// with or without pre-/post-index write-back. Saves and restores of `x29`
/// and `x30` are recorded. `None` for any other instruction.
fn arm_sp_memory_ops(
    inst: &yaxpeax_arm::armv8::a64::Instruction,
) -> Result<Option<Vec<Op>>, String> {
    use yaxpeax_arm::armv8::a64::{Opcode as O, Operand, SizeCode};
    let (pair, load) = match inst.opcode {
        O::STP => (true, false),
        O::STR | O::STUR => (false, false),
        O::LDP => (true, true),
        O::LDR | O::LDUR => (false, true),
        _ => return Ok(None),
    };
    let registers = if pair { 2 } else { 1 };
    let Some((base, access, writeback)) = memory_operand(&inst.operands[registers]) else {
        return Ok(None);
    };
    if base != SP {
        return Ok(None);
    }
    let mut ops = Vec::new();
    for (i, op) in inst.operands[..registers].iter().enumerate() {
        // A pair of x registers takes 8 bytes each.
        let at = access + 8 * i as i64;
        let saved = match *op {
            Operand::Register(SizeCode::X, FP) => Saved::FramePointer,
            Operand::Register(SizeCode::X, LR) => Saved::ReturnAddress,
            Operand::Register(_, FP | LR) => {
                return Err("moves part of x29 or x30 through the stack".into());
            }
            _ => continue,
        };
        ops.push(if load {
            Op::Restore(saved, at)
        } else {
            Op::Save(saved, at)
        });
    }
    if let Some(n) = writeback {
        ops.push(Op::AddSp(n));
    }
    Ok(Some(ops))
}

/// A memory operand with an immediate offset: its base register, the
/// offset of the access from the base as it was, and the base's write-back
/// (pre- or post-index), if any.
fn memory_operand(op: &yaxpeax_arm::armv8::a64::Operand) -> Option<(u16, i64, Option<i64>)> {
    use yaxpeax_arm::armv8::a64::Operand;
    match *op {
        Operand::RegPreIndex(base, off, writeback) => {
            Some((base, off as i64, writeback.then_some(off as i64)))
        }
        Operand::RegPostIndex(base, off) => Some((base, 0, Some(off as i64))),
        _ => None,
    }
}

/// `add`/`sub` of an immediate between `sp` and `x29`: `sub sp, sp, #N`,
/// `add sp, sp, #N`, `mov x29, sp` (`add x29, sp, #0`), `add sp, x29, #N`.
/// `None` for any other instruction (`x29` from `x29` is not modeled).
fn arm_add_sub_ops(inst: &yaxpeax_arm::armv8::a64::Instruction) -> Option<Vec<Op>> {
    use yaxpeax_arm::armv8::a64::{Opcode as O, Operand, SizeCode};
    let sign = match inst.opcode {
        O::ADD => 1,
        O::SUB => -1,
        _ => return None,
    };
    let n = match inst.operands[2] {
        Operand::Immediate(n) => n as i64,
        Operand::ImmShift(n, shift) => (n as i64) << shift,
        _ => return None,
    } * sign;
    let (Operand::RegisterOrSP(SizeCode::X, rd), Operand::RegisterOrSP(SizeCode::X, rn)) =
        (inst.operands[0], inst.operands[1])
    else {
        return None;
    };
    match (rd, rn) {
        (SP, SP) => Some(vec![Op::AddSp(n)]),
        (FP, SP) => Some(vec![Op::FpFromSp(n)]),
        (SP, FP) => Some(vec![Op::SpFromFp(n)]),
        _ => None,
    }
}

/// The general registers an aarch64 instruction writes (31 meaning `sp`;
/// the zero register is left out): its destination operands, the base of
/// a write-back addressing mode, and the link register of a call.
fn arm_writes(inst: &yaxpeax_arm::armv8::a64::Instruction) -> Vec<u16> {
    use yaxpeax_arm::armv8::a64::{Opcode as O, Operand};
    let mut out = Vec::new();
    let destinations = match inst.opcode {
        O::LDP | O::LDNP | O::LDPSW | O::LDXP | O::LDAXP => 2,
        _ if writes_no_operand(inst.opcode) => 0,
        _ => 1,
    };
    for op in &inst.operands[..destinations] {
        match *op {
            Operand::Register(_, r) if r != 31 => out.push(r),
            Operand::RegisterOrSP(_, r) => out.push(r),
            Operand::RegisterPair(_, r) => out.extend([r, r + 1]),
            _ => {}
        }
    }
    for op in &inst.operands {
        match *op {
            Operand::RegPreIndex(base, _, true)
            | Operand::RegPostIndex(base, _)
            | Operand::RegPostIndexReg(base, _) => out.push(base),
            _ => {}
        }
    }
    if matches!(
        inst.opcode,
        O::BL | O::BLR | O::BLRAA | O::BLRAAZ | O::BLRAB | O::BLRABZ
    ) {
        out.push(LR);
    }
    out
}

/// Whether an aarch64 opcode's first operand is read, not written: stores
/// (their status-register forms, `stxr` and friends, do write it), branches,
/// compares into flags, hints and traps. Every other opcode is taken to
/// write its first operand, which errs towards reporting.
#[rustfmt::skip]
fn writes_no_operand(opcode: yaxpeax_arm::armv8::a64::Opcode) -> bool {
    use yaxpeax_arm::armv8::a64::Opcode as O;
    matches!(
        opcode,
        O::STR | O::STRB | O::STRH | O::STRW | O::STUR | O::STURB | O::STURH | O::STP | O::STNP
            | O::STTR | O::STTRB | O::STTRH | O::STLR | O::STLLR | O::STLRB | O::STLLRB
            | O::STLRH | O::STLLRH | O::STLUR | O::STLURB | O::STLURH | O::ST1 | O::ST2 | O::ST3
            | O::ST4 | O::B | O::BR | O::Bcc(_) | O::BL | O::BLR | O::CBZ | O::CBNZ | O::TBZ
            | O::TBNZ | O::RET | O::CCMP | O::CCMN | O::FCMP | O::FCMPE | O::FCCMP | O::FCCMPE
            | O::PRFM | O::PRFUM | O::MSR | O::HINT | O::DMB(_) | O::DSB(_) | O::ISB | O::BRK
            | O::UDF | O::HLT | O::SVC
    )
}

// ---------------------------------------------------------------------------
// The CFI rows
// ---------------------------------------------------------------------------

/// The rules of one CFI row that the check reads, and the addresses (in
/// the region) it covers.
#[derive(Clone, Debug)]
struct RowRules {
    start: u64,
    end: u64,
    cfa: CfaRule<usize>,
    fp: Option<RegisterRule<usize>>,
    ra: Option<RegisterRule<usize>>,
}

type Slice<'a> = EndianSlice<'a, LittleEndian>;

/// Every row of an FDE's unwind table, with addresses made relative to
/// `region_start`.
fn fde_rows(
    eh: &EhFrame<Slice>,
    bases: &BaseAddresses,
    fde: &gimli::FrameDescriptionEntry<Slice>,
    isa: Isa,
    region_start: u64,
) -> Result<Vec<RowRules>, gimli::Error> {
    let (_, fp, ra) = isa.registers();
    let mut ctx = UnwindContext::new();
    let mut table = fde.rows(eh, bases, &mut ctx)?;
    let mut rows = Vec::new();
    while let Some(row) = table.next_row()? {
        rows.push(RowRules {
            start: row.start_address() - region_start,
            end: row.end_address() - region_start,
            cfa: row.cfa().clone(),
            fp: row.register(fp),
            ra: row.register(ra),
        });
    }
    Ok(rows)
}

/// The CFA a rule gives, as text (`rsp+16`).
fn cfa_text(isa: Isa, cfa: &CfaRule<usize>) -> String {
    let (sp, fp, _) = isa.registers();
    match cfa {
        CfaRule::RegisterAndOffset { register, offset } => {
            let name = match *register {
                r if r == sp => {
                    if isa == Isa::X86_64 {
                        "rsp"
                    } else {
                        "sp"
                    }
                }
                r if r == fp => {
                    if isa == Isa::X86_64 {
                        "rbp"
                    } else {
                        "x29"
                    }
                }
                _ => "another register",
            };
            format!("{name}{offset:+}")
        }
        CfaRule::Expression(_) => "an expression".into(),
    }
}

/// How the simulated state reads, for a report.
fn state_text(isa: Isa, s: &State) -> String {
    let (sp, fp) = if isa == Isa::X86_64 {
        ("rsp", "rbp")
    } else {
        ("sp", "x29")
    };
    let fp_text =
        s.fp.map_or(format!("{fp} the caller's"), |d| format!("{fp} = CFA-{d}"));
    format!(
        "{sp} = CFA-{}, {fp_text}, {fp} saved at {}, return address at {}{}",
        s.sp,
        describe_slot(s.fp_slot),
        describe_slot(s.ra_slot),
        if s.ra_in_register { " and in x30" } else { "" }
    )
}

/// What is wrong with `row` at an instruction where the simulation has
/// `state`, if anything.
fn check_row(isa: Isa, row: &RowRules, state: &State) -> Option<String> {
    let (sp, fp, _) = isa.registers();
    let cfa_ok = match row.cfa {
        CfaRule::RegisterAndOffset { register, offset } if register == sp => offset == state.sp,
        CfaRule::RegisterAndOffset { register, offset } if register == fp => {
            state.fp == Some(offset)
        }
        _ => false,
    };
    let fp_ok = saved_rule_ok(&row.fp, state.fp_slot, state.fp.is_none());
    let ra_ok = saved_rule_ok(&row.ra, state.ra_slot, state.ra_in_register);
    let problems: Vec<&str> = [
        (!cfa_ok).then_some("CFA"),
        (!fp_ok).then_some("frame pointer rule"),
        (!ra_ok).then_some("return address rule"),
    ]
    .into_iter()
    .flatten()
    .collect();
    if problems.is_empty() {
        return None;
    }
    Some(format!(
        "{}: CFI says CFA = {}, frame pointer {}, return address {}; simulated: {}",
        problems.join(", "),
        cfa_text(isa, &row.cfa),
        rule_text(&row.fp),
        rule_text(&row.ra),
        state_text(isa, state),
    ))
}

/// Whether the rule for a saved register (frame pointer, return address)
/// fits the simulation: `Offset(-N)` where it was stored at CFA-N, or no
/// rule / `SameValue` where the register itself still holds the value.
fn saved_rule_ok(rule: &Option<RegisterRule<usize>>, slot: Option<i64>, in_register: bool) -> bool {
    match rule {
        Some(RegisterRule::Offset(o)) => slot == Some(-o),
        None | Some(RegisterRule::SameValue) => in_register,
        _ => false,
    }
}

fn rule_text(rule: &Option<RegisterRule<usize>>) -> String {
    match rule {
        None => "unspecified".into(),
        Some(RegisterRule::Offset(o)) => format!("at CFA{o:+}"),
        Some(r) => format!("{r:?}"),
    }
}

// ---------------------------------------------------------------------------
// The walk over one FDE
// ---------------------------------------------------------------------------

/// One thing wrong, where it is.
#[derive(Clone, Debug)]
struct Finding {
    symbol: String,
    offset: u64,
    text: String,
    problem: String,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(
            f,
            "{} +{:#x} `{}`: {}",
            self.symbol, self.offset, self.text, self.problem
        )
    }
}

/// The outcome of checking one FDE.
#[derive(Debug, Default)]
struct RegionReport {
    /// Instructions checked, on some path from the entry or not.
    instructions: usize,
    /// Of those, the ones no path reaches (checked with the body's frame).
    dead: usize,
    /// Bytes of constants and zero padding, which are not checked.
    data_bytes: u64,
    findings: Vec<Finding>,
}

/// Checks one FDE (`code`, its bytes): every instruction a path from the
/// entry reaches, then the instructions no path reaches.
fn check_region(isa: Isa, symbol: &str, code: &[u8], rows: &[RowRules]) -> RegionReport {
    let mut report = RegionReport::default();
    let seen = walk_paths(isa, symbol, code, rows, &mut report);
    // Past an instruction the walk could not model, the code left for the
    // dead-code check would only repeat that finding.
    if report.findings.is_empty() {
        check_dead_code(isa, symbol, code, rows, &seen, &mut report);
    }
    report
}

/// What the walk knows of a reached instruction: the frame before it, its
/// length and the constant it loads.
struct Reached {
    state: State,
    len: u64,
    constant: Option<(u64, u64)>,
}

/// Simulates the code from its entry over every path (a worklist through
/// fall-through and direct branch targets) and checks the CFI row at each
/// instruction reached; returns what it saw at each.
fn walk_paths(
    isa: Isa,
    symbol: &str,
    code: &[u8],
    rows: &[RowRules],
    report: &mut RegionReport,
) -> BTreeMap<u64, Reached> {
    let mut seen: BTreeMap<u64, Reached> = BTreeMap::new();
    let mut work = vec![(0u64, isa.entry_state())];
    while let Some((at, state)) = work.pop() {
        if let Some(earlier) = seen.get(&at) {
            if !earlier.state.same_frame(&state) {
                let problem = format!(
                    "paths meet with different frames: {} and {}",
                    state_text(isa, &earlier.state),
                    state_text(isa, &state)
                );
                report.findings.push(finding(symbol, at, "", problem));
            }
            continue;
        }
        let Some(decoded) = decode_checked(isa, symbol, code, at, rows, &state, report) else {
            continue;
        };
        let reached = Reached {
            state: state.clone(),
            len: decoded.len,
            constant: decoded.constant,
        };
        seen.insert(at, reached);
        match next_states(isa, at, &decoded, &state) {
            Ok(next) => work.extend(next),
            Err(problem) => report
                .findings
                .push(finding(symbol, at, &decoded.text, problem)),
        }
    }
    seen
}

/// Decodes the instruction at `at` and checks the CFI row there against
/// `state`, counting it; `None` (and a finding) if it does not decode or
/// cannot be modeled.
fn decode_checked(
    isa: Isa,
    symbol: &str,
    code: &[u8],
    at: u64,
    rows: &[RowRules],
    state: &State,
    report: &mut RegionReport,
) -> Option<Decoded> {
    let Some(bytes) = code.get(at as usize..).filter(|b| !b.is_empty()) else {
        let problem = "the code runs or jumps past the end of its FDE".to_string();
        report.findings.push(finding(symbol, at, "", problem));
        return None;
    };
    let decoded = match decode(isa, bytes, at) {
        Ok(d) => d,
        Err(u) => {
            report.findings.push(finding(symbol, at, &u.text, u.why));
            return None;
        }
    };
    report.instructions += 1;
    let problem = match rows.iter().find(|r| r.start <= at && at < r.end) {
        Some(row) => check_row(isa, row, state),
        None => Some("no CFI row covers it".to_string()),
    };
    if let Some(problem) = problem {
        report
            .findings
            .push(finding(symbol, at, &decoded.text, problem));
    }
    Some(decoded)
}

fn finding(symbol: &str, offset: u64, text: &str, problem: String) -> Finding {
    Finding {
        symbol: symbol.to_string(),
        offset,
        text: text.to_string(),
        problem,
    }
}

/// Checks the code no path reaches (Cranelift sometimes leaves a dead
/// `jmp` after a `ret`): each run of bytes that no reached instruction
/// covers and no reached instruction loads as a constant, and that is not
/// all zeros (padding), is decoded straight through with the body's frame,
/// which it also takes again after a `ret`, a jump or a trap inside the
/// run. A run that does not decode into whole instructions is a finding.
fn check_dead_code(
    isa: Isa,
    symbol: &str,
    code: &[u8],
    rows: &[RowRules],
    seen: &BTreeMap<u64, Reached>,
    report: &mut RegionReport,
) {
    let mut covered = vec![false; code.len()];
    let mut mark = |start: u64, len: u64| {
        let end = (start.saturating_add(len)).min(code.len() as u64);
        for b in covered.iter_mut().take(end as usize).skip(start as usize) {
            *b = true;
        }
    };
    for (&at, r) in seen {
        mark(at, r.len);
        if let Some((start, len)) = r.constant {
            mark(start, len);
        }
    }
    let body = body_state(isa, seen);
    for (start, end) in gaps(&covered) {
        if code[start..end].iter().all(|&b| b == 0) {
            report.data_bytes += (end - start) as u64;
            continue;
        }
        let mut at = start as u64;
        let mut state = body.clone();
        while at < end as u64 {
            let Some(d) = decode_checked(isa, symbol, &code[..end], at, rows, &state, report)
            else {
                break;
            };
            report.dead += 1;
            state = match (d.flow, apply(&state, &d.ops)) {
                (Flow::Next | Flow::Branch(_), Ok(after)) => after,
                _ => body.clone(),
            };
            at += d.len;
        }
    }
}

/// The maximal runs of `false` in `covered`, as (start, end).
fn gaps(covered: &[bool]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < covered.len() {
        if covered[i] {
            i += 1;
            continue;
        }
        let start = i;
        while i < covered.len() && !covered[i] {
            i += 1;
        }
        out.push((start, i));
    }
    out
}

/// The body's frame: the frame most reached instructions run in (with a
/// fixed frame, as Cranelift keeps, the one between prologue and
/// epilogues); the entry frame for code that never sets one up.
fn body_state(isa: Isa, seen: &BTreeMap<u64, Reached>) -> State {
    let mut counts: Vec<(State, usize)> = Vec::new();
    for r in seen.values().filter(|r| r.state.fp.is_some()) {
        match counts.iter_mut().find(|(s, _)| s.same_frame(&r.state)) {
            Some((_, n)) => *n += 1,
            None => counts.push((r.state.clone(), 1)),
        }
    }
    (counts.into_iter())
        .max_by_key(|(_, n)| *n)
        .map_or_else(|| isa.entry_state(), |(s, _)| s)
}

/// Decodes one instruction of either architecture.
fn decode(isa: Isa, code: &[u8], offset: u64) -> Result<Decoded, Unmodeled> {
    match isa {
        Isa::X86_64 => decode_x86(code, offset),
        Isa::AArch64 => decode_arm(code, offset),
    }
}

/// The (offset, state) pairs an instruction leads to. At a `ret`, the
/// frame must be the entry one again (the code's own consistency, which
/// the simulation relies on).
fn next_states(isa: Isa, at: u64, d: &Decoded, state: &State) -> Result<Vec<(u64, State)>, String> {
    let after = apply(state, &d.ops)?;
    let next = at + d.len;
    Ok(match d.flow {
        Flow::Next => vec![(next, after)],
        Flow::Jump(target) => vec![(target, after)],
        Flow::Branch(target) => vec![(next, after.clone()), (target, after)],
        Flow::Stop => vec![],
        Flow::Return => {
            if !after.same_frame(&isa.entry_state()) {
                return Err(format!("returns with {}", state_text(isa, &after)));
            }
            vec![]
        }
    })
}

// ---------------------------------------------------------------------------
// The code files
// ---------------------------------------------------------------------------

/// What was checked, by architecture and region kind, and what was wrong.
#[derive(Debug, Default)]
struct Tally {
    /// (architecture, kind) -> (FDEs, instructions).
    counts: BTreeMap<(Isa, String), (usize, usize)>,
    /// architecture -> (instructions on no path, bytes of data and padding).
    dead: BTreeMap<Isa, (usize, u64)>,
    findings: Vec<Finding>,
}

impl Tally {
    fn add(&mut self, isa: Isa, kind: &str, report: RegionReport) {
        let entry = self.counts.entry((isa, kind.to_string())).or_default();
        entry.0 += 1;
        entry.1 += report.instructions;
        let dead = self.dead.entry(isa).or_default();
        dead.0 += report.dead;
        dead.1 += report.data_bytes;
        self.findings.extend(report.findings);
    }

    /// One line per architecture: instructions, FDEs, FDEs (and their
    /// instructions) by kind, and what no path reaches.
    fn summary(&self) -> Vec<String> {
        let mut by_isa: BTreeMap<Isa, Vec<(&str, usize, usize)>> = BTreeMap::new();
        for ((isa, kind), &(fdes, insts)) in &self.counts {
            by_isa
                .entry(*isa)
                .or_default()
                .push((kind.as_str(), fdes, insts));
        }
        by_isa
            .iter()
            .map(|(isa, kinds)| {
                let fdes: usize = kinds.iter().map(|k| k.1).sum();
                let insts: usize = kinds.iter().map(|k| k.2).sum();
                let (dead, data) = self.dead.get(isa).copied().unwrap_or_default();
                let per_kind: Vec<String> = (kinds.iter())
                    .map(|(kind, f, i)| format!("{kind} {f} with {i} instructions"))
                    .collect();
                format!(
                    "unwind_every_instruction: {}: {insts} instructions in {fdes} FDEs checked ({}); \
                     {dead} of the instructions on no path, checked with the body's frame; \
                     {data} bytes of constants and padding",
                    isa.name(),
                    per_kind.join(", ")
                )
            })
            .collect()
    }
}

/// The kind of a region from its symbol (`toy:jit-osr:f:file:1` is
/// `jit-osr`).
fn region_kind(symbol: &str) -> String {
    symbol
        .strip_prefix("toy:")
        .and_then(|rest| rest.split(':').next())
        .unwrap_or("unnamed")
        .to_string()
}

/// Checks every FDE of one code file.
fn check_file(path: &Path, tally: &mut Tally) {
    let bytes = std::fs::read(path).expect("code file");
    let elf = object::File::parse(&*bytes).expect("an ELF");
    let isa =
        Isa::of(&elf).unwrap_or_else(|| panic!("{}: {:?}", path.display(), elf.architecture()));
    let section = elf.section_by_name(".eh_frame").expect(".eh_frame");
    let mut eh = EhFrame::new(section.data().expect("data"), LittleEndian);
    eh.set_address_size(8);
    let bases = BaseAddresses::default().set_eh_frame(section.address());
    let symbols: Vec<(u64, u64, String)> = (elf.symbols())
        .filter(|s| s.size() > 0)
        .map(|s| (s.address(), s.size(), s.name().expect("name").to_string()))
        .collect();
    let mut entries = eh.entries(&bases);
    while let Some(entry) = entries.next().expect("an .eh_frame entry") {
        let CieOrFde::Fde(partial) = entry else {
            continue;
        };
        let fde = partial.parse(EhFrame::cie_from_offset).expect("an FDE");
        let (start, end) = (fde.initial_address(), fde.end_address());
        let symbol = (symbols.iter())
            .find(|(a, size, _)| *a <= start && start < a + size)
            .map_or_else(|| format!("{}:{start:#x}", path.display()), |s| s.2.clone());
        let text = (elf.sections())
            .find(|s| s.address() <= start && end <= s.address() + s.size())
            .unwrap_or_else(|| panic!("{symbol}: no section holds {start:#x}..{end:#x}"));
        let data = text.data().expect("code");
        let code = &data[(start - text.address()) as usize..(end - text.address()) as usize];
        let rows = fde_rows(&eh, &bases, &fde, isa, start).expect("the FDE's rows");
        tally.add(
            isa,
            &region_kind(&symbol),
            check_region(isa, &symbol, code, &rows),
        );
    }
}

/// Every file under `dir`, recursively (the code files are in
/// `DIR/toyvm-PID/`).
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("a directory").flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(files_under(&path));
        } else {
            out.push(path);
        }
    }
    out.sort();
    out
}

// ---------------------------------------------------------------------------
// The runs
// ---------------------------------------------------------------------------

/// A leaf called in a loop, small enough for the JIT to inline into its
/// caller, and a float constant (which Cranelift loads from a constant
/// pool next to the code).
const INLINED: &str = "\
fn sq(x: int) -> int { return x * x; }
fn half(x: float) -> float { return x * 0.5; }
fn sum(n: int) -> int {
    let s = 0;
    let f = 0.0;
    for i in 0..n { s = (s + sq(i)) % 1000003; f = f + half(float(i)); }
    return s + int(f) % 7;
}
let t = 0;
for k in 0..50 { t = (t + sum(200)) % 1000003; }
print(t);
";

/// A function with a `return` per `if` (the script of `tests/epilogue_cfi.rs`):
/// many epilogues, each followed by more of the body.
const MANY_RETURNS: &str = include_str!("unwind/many_returns.toy");

/// The toyvm options and script arguments of each run: scripts from
/// `tests/` and `examples/` in the tiers that make each kind of code.
fn runs(scratch: &Path) -> Vec<Vec<String>> {
    let inlined = scratch.join("inlined.toy");
    let returns = scratch.join("returns.toy");
    std::fs::write(&inlined, INLINED).expect("script");
    std::fs::write(&returns, MANY_RETURNS).expect("script");
    let (inlined, returns) = (inlined.display().to_string(), returns.display().to_string());
    let vmprof = scratch.join("inlined.prof").display().to_string();
    let mut runs: Vec<Vec<&str>> = vec![
        // Tiered: spin whole with its entry shim, OSR variants of warm_up
        // and outer, the others interpreted behind trampolines.
        vec!["--jit-threshold", "2", "tests/gdb/hot.toy", "1000"],
        vec!["--jit-threshold", "0", "tests/gdb/hot.toy", "1000"],
        vec!["--no-jit", "tests/gdb/hot.toy", "1000"],
        vec!["tests/gdb/hot.toy", "100000"],
        vec!["--jit-threshold", "2", "examples/scripts/fib.toy", "20"],
        vec!["examples/scripts/profile_demo.toy", "10", "10000"],
        vec![
            "--jit-threshold",
            "0",
            "examples/scripts/profile_demo.toy",
            "10",
            "1000",
        ],
        vec!["--jit-threshold", "0", "examples/scripts/arrays.toy"],
        vec!["--jit-threshold", "0", "examples/scripts/strings.toy"],
        vec!["--jit-threshold", "2", returns.as_str()],
        vec!["--jit-threshold", "0", returns.as_str()],
        vec!["--jit-threshold", "2", inlined.as_str()],
        vec![
            "--jit-threshold",
            "0",
            "--vmprof-inlined",
            "--vmprof",
            vmprof.as_str(),
            inlined.as_str(),
        ],
        vec!["--no-jit", inlined.as_str()],
    ];
    let programs = files_under(&repo_root().join("tests/conformance/programs"));
    let programs: Vec<String> = (programs.iter())
        .filter(|p| p.extension().is_some_and(|e| e == "toy"))
        .map(|p| p.display().to_string())
        .collect();
    for p in &programs {
        runs.push(vec!["--jit-threshold", "0", p.as_str()]);
        runs.push(vec!["--jit-threshold", "2", p.as_str()]);
    }
    (runs.into_iter())
        .map(|r| r.into_iter().map(String::from).collect())
        .collect()
}

/// Runs toyvm once with `--jit-elf --perf-dir DIR` before `args`, and
/// returns the code files it wrote.
fn code_files_of(run: &[String], dir: &Path) -> Vec<PathBuf> {
    let mut args = vec![
        "run",
        "--jit-elf",
        "--perf-dir",
        dir.to_str().expect("utf-8"),
    ];
    args.extend(run.iter().map(String::as_str));
    let out = toyvm_in(&repo_root(), &args, &[]);
    assert_eq!(out.status, Some(0), "toyvm {args:?}: {}", out.stderr);
    files_under(dir)
}

#[test]
fn the_cfi_matches_the_simulated_stack_at_every_instruction() {
    let scratch = tempfile::tempdir().expect("temp dir");
    let runs = runs(scratch.path());
    let dirs: Vec<PathBuf> = (0..runs.len())
        .map(|i| scratch.path().join(format!("run-{i}")))
        .collect();
    for d in &dirs {
        std::fs::create_dir(d).expect("run dir");
    }
    let work: Vec<(&Vec<String>, &PathBuf)> = runs.iter().zip(&dirs).collect();
    let files: Vec<PathBuf> = parallel_map(&work, |(run, dir)| code_files_of(run, dir))
        .into_iter()
        .flatten()
        .collect();
    let mut tally = Tally::default();
    for file in &files {
        check_file(file, &mut tally);
    }
    for line in tally.summary() {
        eprintln!("{line}");
    }
    report_findings(&tally.findings);
    let isas: Vec<Isa> = tally.counts.keys().map(|(isa, _)| *isa).collect();
    assert!(!isas.is_empty(), "no code files in {} runs", runs.len());
    for isa in isas {
        for kind in ["jit", "jit-osr", "jit-entry", "interp"] {
            let (fdes, insts) = tally
                .counts
                .get(&(isa, kind.to_string()))
                .copied()
                .unwrap_or_default();
            assert!(
                fdes > 0 && insts > 0,
                "{}: no `toy:{kind}:` code was checked: {:?}",
                isa.name(),
                tally.counts
            );
        }
    }
}

/// Prints the first findings and fails if there are any.
fn report_findings(findings: &[Finding]) {
    for f in findings.iter().take(20) {
        eprintln!("MISMATCH {f}");
    }
    assert!(
        findings.is_empty(),
        "{} instructions where the CFI and the simulated stack disagree (first 20 above)",
        findings.len()
    );
}

// ---------------------------------------------------------------------------
// The checker can fail
// ---------------------------------------------------------------------------

/// Hand-made code and CFI, checked as the code files are.
mod hand_made {
    use super::*;
    use gimli::write::{
        Address, CallFrameInstruction as I, CommonInformationEntry, FrameDescriptionEntry,
        FrameTable,
    };
    use gimli::{Encoding, Format};

    /// Where the hand-made code is (any address: the FDE names it).
    const CODE_ADDRESS: u64 = 0x1000;

    /// `.eh_frame` bytes of one CIE (with `cie` as initial instructions)
    /// and one FDE over `len` bytes at [`CODE_ADDRESS`].
    fn eh_frame(isa: Isa, len: u32, cie: &[I], fde: &[(u32, I)]) -> Vec<u8> {
        let encoding = Encoding {
            format: Format::Dwarf32,
            version: 1,
            address_size: 8,
        };
        let (_, _, ra) = isa.registers();
        let mut c = CommonInformationEntry::new(encoding, 1, -8, ra);
        for i in cie {
            c.add_instruction(i.clone());
        }
        let mut f = FrameDescriptionEntry::new(Address::Constant(CODE_ADDRESS), len);
        for (at, i) in fde {
            f.add_instruction(*at, i.clone());
        }
        let mut table = FrameTable::default();
        let id = table.add_cie(c);
        table.add_fde(id, f);
        let mut out = gimli::write::EhFrame(gimli::write::EndianVec::new(LittleEndian));
        table.write_eh_frame(&mut out).expect("write .eh_frame");
        out.0.into_vec()
    }

    /// Checks `code` against the single FDE of `eh_frame`, as
    /// [`check_file`] checks a code file's.
    fn check(isa: Isa, code: &[u8], eh_frame: &[u8]) -> RegionReport {
        let mut eh = EhFrame::new(eh_frame, LittleEndian);
        eh.set_address_size(8);
        let bases = BaseAddresses::default();
        let mut entries = eh.entries(&bases);
        while let Some(entry) = entries.next().expect("an entry") {
            if let CieOrFde::Fde(partial) = entry {
                let fde = partial.parse(EhFrame::cie_from_offset).expect("the FDE");
                let rows = fde_rows(&eh, &bases, &fde, isa, CODE_ADDRESS).expect("rows");
                return check_region(isa, "hand-made", code, &rows);
            }
        }
        panic!("no FDE");
    }

    /// `push rbp; mov rbp, rsp; mov eax, 42; pop rbp; ret`.
    const X86_CODE: &[u8] = &[0x55, 0x48, 0x89, 0xe5, 0xb8, 0x2a, 0, 0, 0, 0x5d, 0xc3];

    fn x86_cie() -> Vec<I> {
        vec![
            I::Cfa(gimli::X86_64::RSP, 8),
            I::Offset(gimli::X86_64::RA, -8),
        ]
    }

    /// The rows Cranelift writes for [`X86_CODE`], up to the `ret`.
    fn x86_body_rows() -> Vec<(u32, I)> {
        vec![
            (1, I::CfaOffset(16)),
            (1, I::Offset(gimli::X86_64::RBP, -16)),
            (4, I::CfaRegister(gimli::X86_64::RBP)),
        ]
    }

    /// The row at the `ret` of [`X86_CODE`]: the caller's frame again.
    fn x86_ret_rows() -> Vec<(u32, I)> {
        vec![
            (10, I::Cfa(gimli::X86_64::RSP, 8)),
            (10, I::SameValue(gimli::X86_64::RBP)),
        ]
    }

    #[test]
    fn right_x86_cfi_passes() {
        let rows = [x86_body_rows(), x86_ret_rows()].concat();
        let report = check(
            Isa::X86_64,
            X86_CODE,
            &eh_frame(Isa::X86_64, 11, &x86_cie(), &rows),
        );
        assert!(report.findings.is_empty(), "{:#?}", report.findings);
        assert_eq!(report.instructions, 5);
    }

    #[test]
    fn x86_ret_left_at_rbp_plus_16_is_reported() {
        let eh = eh_frame(Isa::X86_64, 11, &x86_cie(), &x86_body_rows());
        let report = check(Isa::X86_64, X86_CODE, &eh);
        let offsets: Vec<u64> = report.findings.iter().map(|f| f.offset).collect();
        assert_eq!(offsets, [10], "{:#?}", report.findings);
        let problem = &report.findings[0].problem;
        assert!(
            problem.contains("CFA = rbp+16") && problem.contains("rsp = CFA-8"),
            "{problem}"
        );
    }

    #[test]
    fn x86_wrong_offset_after_push_is_reported() {
        let mut rows = [x86_body_rows(), x86_ret_rows()].concat();
        rows[0] = (1, I::CfaOffset(24));
        let report = check(
            Isa::X86_64,
            X86_CODE,
            &eh_frame(Isa::X86_64, 11, &x86_cie(), &rows),
        );
        let offsets: Vec<u64> = report.findings.iter().map(|f| f.offset).collect();
        // The `mov rbp, rsp` (rsp+24) and, through rbp+24, the body and the `pop`.
        assert_eq!(offsets, [1, 4, 9], "{:#?}", report.findings);
    }

    #[test]
    fn x86_unmodeled_stack_pointer_write_is_reported() {
        // push rbp; mov rbp, rsp; and rsp, -16; mov rsp, rbp; pop rbp; ret
        let code = [
            0x55, 0x48, 0x89, 0xe5, 0x48, 0x83, 0xe4, 0xf0, 0x48, 0x89, 0xec, 0x5d, 0xc3,
        ];
        let rows = [
            x86_body_rows(),
            vec![
                (12, I::Cfa(gimli::X86_64::RSP, 8)),
                (12, I::SameValue(gimli::X86_64::RBP)),
            ],
        ]
        .concat();
        let report = check(
            Isa::X86_64,
            &code,
            &eh_frame(Isa::X86_64, 13, &x86_cie(), &rows),
        );
        assert_eq!(report.findings.len(), 1, "{:#?}", report.findings);
        let f = &report.findings[0];
        assert_eq!(
            (f.offset, f.text.as_str()),
            (4, "and rsp,0FFFFFFFFFFFFFFF0h")
        );
        assert!(f.problem.contains("RSP"), "{f}");
    }

    /// [`X86_CODE`] and then a dead `jmp` (to itself) that no path
    /// reaches, as Cranelift sometimes leaves after a `ret`: it is checked
    /// with the body's frame (`rbp` + 16), so a row left at the `ret`'s
    /// rule there is reported and the body's rule passes.
    #[test]
    fn dead_code_after_ret_is_checked_with_the_bodys_frame() {
        let code = [X86_CODE, &[0xeb, 0xfe]].concat();
        let rows = [x86_body_rows(), x86_ret_rows()].concat();
        let eh = eh_frame(Isa::X86_64, 13, &x86_cie(), &rows);
        let report = check(Isa::X86_64, &code, &eh);
        let offsets: Vec<u64> = report.findings.iter().map(|f| f.offset).collect();
        assert_eq!(offsets, [11], "{:#?}", report.findings);
        assert_eq!((report.instructions, report.dead), (6, 1));
        let body_again = vec![
            (11, I::Cfa(gimli::X86_64::RBP, 16)),
            (11, I::Offset(gimli::X86_64::RBP, -16)),
        ];
        let rows = [x86_body_rows(), x86_ret_rows(), body_again].concat();
        let eh = eh_frame(Isa::X86_64, 13, &x86_cie(), &rows);
        let report = check(Isa::X86_64, &code, &eh);
        assert!(report.findings.is_empty(), "{:#?}", report.findings);
    }

    /// `stp x29, x30, [sp, #-16]!; mov x29, sp; mov w0, #42;
    /// ldp x29, x30, [sp], #16; ret`.
    const ARM_CODE: &[u8] = &[
        0xfd, 0x7b, 0xbf, 0xa9, 0xfd, 0x03, 0x00, 0x91, 0x40, 0x05, 0x80, 0x52, 0xfd, 0x7b, 0xc1,
        0xa8, 0xc0, 0x03, 0x5f, 0xd6,
    ];

    /// The rows Cranelift writes for [`ARM_CODE`], up to the `ret`.
    fn arm_body_rows() -> Vec<(u32, I)> {
        vec![
            (4, I::CfaOffset(16)),
            (4, I::Offset(gimli::AArch64::X29, -16)),
            (4, I::Offset(gimli::AArch64::X30, -8)),
            (8, I::CfaRegister(gimli::AArch64::X29)),
        ]
    }

    fn arm_ret_rows() -> Vec<(u32, I)> {
        vec![
            (16, I::Cfa(gimli::AArch64::SP, 0)),
            (16, I::SameValue(gimli::AArch64::X29)),
            (16, I::SameValue(gimli::AArch64::X30)),
        ]
    }

    fn arm_cie() -> Vec<I> {
        vec![I::Cfa(gimli::AArch64::SP, 0)]
    }

    #[test]
    fn right_aarch64_cfi_passes() {
        let rows = [arm_body_rows(), arm_ret_rows()].concat();
        let report = check(
            Isa::AArch64,
            ARM_CODE,
            &eh_frame(Isa::AArch64, 20, &arm_cie(), &rows),
        );
        assert!(report.findings.is_empty(), "{:#?}", report.findings);
        assert_eq!(report.instructions, 5);
    }

    #[test]
    fn aarch64_ret_left_at_x29_plus_16_is_reported() {
        let eh = eh_frame(Isa::AArch64, 20, &arm_cie(), &arm_body_rows());
        let report = check(Isa::AArch64, ARM_CODE, &eh);
        let offsets: Vec<u64> = report.findings.iter().map(|f| f.offset).collect();
        assert_eq!(offsets, [16], "{:#?}", report.findings);
        let problem = &report.findings[0].problem;
        assert!(
            problem.contains("CFA = x29+16") && problem.contains("sp = CFA-0"),
            "{problem}"
        );
    }

    #[test]
    fn aarch64_return_address_in_the_wrong_slot_is_reported() {
        let mut rows = [arm_body_rows(), arm_ret_rows()].concat();
        rows[2] = (4, I::Offset(gimli::AArch64::X30, -16));
        let report = check(
            Isa::AArch64,
            ARM_CODE,
            &eh_frame(Isa::AArch64, 20, &arm_cie(), &rows),
        );
        let offsets: Vec<u64> = report.findings.iter().map(|f| f.offset).collect();
        assert_eq!(offsets, [4, 8, 12], "{:#?}", report.findings);
        assert!(report.findings[0].problem.contains("return address rule"));
    }
}
