//! `.eh_frame` / `.eh_frame_hdr` bytes read back with `gimli::read` (an
//! independent parser), for both layouts, plus CPython's byte invariants.

mod common;

use common::{SPIN_CODE, align_up};
use gimli::read::{
    BaseAddresses, CfaRule, EhFrame, EhFrameHdr, RegisterRule, UnwindContext, UnwindSection,
};
use gimli::write::Address;
use gimli::{LittleEndian, X86_64};
use perfsupport::jitdump::MARKER_LEN;
use perfsupport::jitdump::{EH_FRAME_HDR_SIZE, PerfUnwindData, perf_unwind_data_size};
use perfsupport::unwind::CallFrameInfo;
use perfsupport::unwind::x86_64::{CfiRow, SavedRegister, frame_pointer_fde, system_v_cie};
use perfsupport::unwind::{REGION_START, eh_frame_for_register_frame, reserved_region_size};
use perfsupport::{CodeRegion, UnwindInfo};
use std::io;

/// The CFA rule and `rbp` rule expected at `offset` into a `push rbp;
/// mov rbp, rsp` ... `pop rbp; ret` function of `code_size` bytes.
fn expected_cfa(
    offset: u64,
    code_size: u64,
) -> (gimli::Register, i64, Option<RegisterRule<usize>>) {
    match offset {
        0 => (X86_64::RSP, 8, None),
        1..=3 => (X86_64::RSP, 16, Some(RegisterRule::Offset(-16))),
        _ if offset == code_size - 1 => (X86_64::RSP, 8, Some(RegisterRule::SameValue)),
        _ => (X86_64::RBP, 16, Some(RegisterRule::Offset(-16))),
    }
}

fn assert_row(row: &gimli::UnwindTableRow<usize>, offset: u64, code_size: u64) {
    let (register, cfa_offset, rbp_rule) = expected_cfa(offset, code_size);
    assert_eq!(
        row.cfa(),
        &CfaRule::RegisterAndOffset {
            register,
            offset: cfa_offset
        },
        "CFA at +{offset}"
    );
    assert_eq!(
        row.register(X86_64::RA),
        Some(RegisterRule::Offset(-8)),
        "return address at +{offset}"
    );
    assert_eq!(row.register(X86_64::RBP), rbp_rule, "rbp at +{offset}");
}

fn i32_at(bytes: &[u8], at: usize) -> i64 {
    i64::from(i32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()))
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap())
}

/// Parses the perf payload as if perf's injected ELF put the code at `text`,
/// and checks the CFA rules at every code offset through the header's table.
fn check_perf_layout_at(data: &PerfUnwindData, code_size: u64, text: u64) {
    let eh_frame_addr = text + align_up(code_size, 8);
    let hdr_addr = eh_frame_addr + data.eh_frame().len() as u64;
    let bases = BaseAddresses::default()
        .set_text(text)
        .set_eh_frame(eh_frame_addr)
        .set_eh_frame_hdr(hdr_addr);
    let eh_frame = EhFrame::new(data.eh_frame(), LittleEndian);
    let hdr = EhFrameHdr::new(data.eh_frame_hdr(), LittleEndian)
        .parse(&bases, 8)
        .expect("parse .eh_frame_hdr");
    assert_eq!(
        hdr.eh_frame_ptr(),
        gimli::Pointer::Direct(eh_frame_addr),
        "eh_frame_ptr must point at .eh_frame"
    );
    let table = hdr.table().expect("binary search table");
    let mut ctx = UnwindContext::new();
    for offset in 0..code_size {
        let fde = table
            .fde_for_address(&eh_frame, &bases, text + offset, EhFrame::cie_from_offset)
            .expect("FDE for a code address");
        assert_eq!(fde.initial_address(), text);
        assert_eq!(fde.len(), code_size);
        let row = fde
            .unwind_info_for_address(&eh_frame, &bases, &mut ctx, text + offset)
            .expect("row");
        assert_row(row, offset, code_size);
    }
    for outside in [text.wrapping_sub(1), text + code_size] {
        let found = table.fde_for_address(&eh_frame, &bases, outside, EhFrame::cie_from_offset);
        assert!(found.is_err(), "no FDE for {outside:#x}");
    }
}

#[test]
fn perf_layout_parses_with_gimli_and_matches_cpython_invariants() {
    let cie = system_v_cie();
    for code_size in [SPIN_CODE.len() as u64, 16, 100, 4093] {
        let fde = frame_pointer_fde(REGION_START, code_size as u32).unwrap();
        let unwind = UnwindInfo {
            cie: &cie,
            fde: &fde,
        };
        let data = PerfUnwindData::build(code_size, Some(unwind), 0).expect("build");

        assert_eq!(data.mapped_size(), data.bytes().len() as u64);
        assert_eq!(data.eh_frame_hdr().len(), EH_FRAME_HDR_SIZE);
        assert_eq!(
            perf_unwind_data_size(code_size, Some(unwind)).unwrap(),
            data.bytes().len() as u64
        );

        // perf 6.1 puts .text at 0x80; position independence: any address works.
        check_perf_layout_at(&data, code_size, 0x80);
        check_perf_layout_at(&data, code_size, 0x7f12_3456_7000);

        // Raw-byte invariants, as CPython's TestJitdumpFileFormat checks them.
        let eh = data.eh_frame();
        let eh_size = eh.len() as i64;
        let code_padded = align_up(code_size, 8) as i64;
        assert_eq!(&eh[eh.len() - 4..], &[0, 0, 0, 0], "zero terminator");
        let cie_len = u32_at(eh, 0) as usize;
        assert_eq!(u32_at(eh, 4), 0, "CIE id");
        assert_eq!(eh[8], 1, "CIE version");
        assert_eq!(&eh[9..12], b"zR\0", "augmentation");
        // code align 1, data align -8 (0x78), RA 16, aug length 1, FDE encoding 0x1b
        assert_eq!(&eh[12..17], &[1, 0x78, 16, 1, 0x1b]);
        let fde_off = 4 + cie_len;
        let pc_offset = fde_off + 8;
        assert_eq!(
            i32_at(eh, pc_offset),
            -(code_padded + pc_offset as i64),
            "initial_location == -(ALIGN8(code_size) + pc_offset)"
        );
        assert_eq!(u32_at(eh, pc_offset + 4) as u64, code_size, "address_range");

        let hdr = data.eh_frame_hdr();
        assert_eq!(&hdr[..4], &[1, 0x1b, 0x03, 0x3b]);
        assert_eq!(i32_at(hdr, 4), -(eh_size + 4), "eh_frame_ptr");
        assert_eq!(u32_at(hdr, 8), 1, "fde_count");
        assert_eq!(
            i32_at(hdr, 12),
            -(code_padded + eh_size),
            "initial_loc == -(ALIGN8(code_size) + eh_frame_size)"
        );
        assert_eq!(i32_at(hdr, 16), fde_off as i64 - eh_size, "fde_addr");

        assert_eq!(
            reserved_region_size(code_size, Some(unwind)).unwrap(),
            align_up(
                align_up(code_size + MARKER_LEN as u64, 8) + data.bytes().len() as u64,
                16
            ),
            "room for the code, a build-id marker and the unwind payload"
        );
    }
}

#[test]
fn fde_at_runtime_address_gives_the_same_perf_bytes() {
    let cie = system_v_cie();
    let start = 0x7f00_dead_b000u64;
    let symbolic = frame_pointer_fde(REGION_START, 11).unwrap();
    let absolute = frame_pointer_fde(Address::Constant(start), 11).unwrap();
    let a = PerfUnwindData::build(
        11,
        Some(UnwindInfo {
            cie: &cie,
            fde: &symbolic,
        }),
        start,
    );
    let b = PerfUnwindData::build(
        11,
        Some(UnwindInfo {
            cie: &cie,
            fde: &absolute,
        }),
        start,
    );
    assert_eq!(a.unwrap(), b.unwrap());
    // The size helper does not need the address.
    assert_eq!(
        perf_unwind_data_size(
            11,
            Some(UnwindInfo {
                cie: &cie,
                fde: &absolute
            })
        )
        .unwrap(),
        perf_unwind_data_size(
            11,
            Some(UnwindInfo {
                cie: &cie,
                fde: &symbolic
            })
        )
        .unwrap()
    );
}

#[test]
fn header_only_form_without_unwind_info() {
    let data = PerfUnwindData::build(11, None, 0).expect("build");
    assert_eq!(data.bytes().len(), EH_FRAME_HDR_SIZE);
    assert_eq!(data.mapped_size(), 0);
    assert!(data.eh_frame().is_empty());
    assert_eq!(
        data.bytes(),
        &[
            1, 0x1b, 0x03, 0x3b, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
        ]
    );
    let bases = BaseAddresses::default()
        .set_eh_frame_hdr(0x1000)
        .set_eh_frame(0x1000);
    let hdr = EhFrameHdr::new(data.eh_frame_hdr(), LittleEndian)
        .parse(&bases, 8)
        .expect("parse");
    // gimli, like libunwind, sees an empty table: no FDE, so unwinders fall
    // back to frame pointers instead of failing.
    assert!(hdr.table().is_none(), "fde_count must be 0");
    assert_eq!(
        reserved_region_size(11, None).unwrap(),
        align_up(16 + 20, 16)
    );
}

#[test]
fn register_frame_layout_uses_absolute_addresses() {
    let cie = system_v_cie();
    let first = SPIN_CODE.to_vec();
    let second = vec![0x90u8; 40];
    let fde_first = frame_pointer_fde(REGION_START, first.len() as u32).unwrap();
    let fde_second = frame_pointer_fde(Address::Constant(second.as_ptr() as u64), 40).unwrap();
    let plain = [0xc3u8; 4];
    let regions = [
        CodeRegion::new(&first, "toy::first").with_unwind(UnwindInfo {
            cie: &cie,
            fde: &fde_first,
        }),
        CodeRegion::new(&plain, "toy::no_cfi"),
        CodeRegion::new(&second, "toy::second").with_unwind(UnwindInfo {
            cie: &cie,
            fde: &fde_second,
        }),
    ];
    let bytes = eh_frame_for_register_frame(&regions).expect("build");
    assert_eq!(&bytes[bytes.len() - 4..], &[0, 0, 0, 0], "zero terminator");
    // An absptr CIE has an empty augmentation string (libgcc's default).
    assert_eq!(&bytes[8..10], &[1, 0]);

    let bases = BaseAddresses::default().set_eh_frame(bytes.as_ptr() as u64);
    let eh_frame = EhFrame::new(&bytes, LittleEndian);
    let mut fdes = 0;
    let mut entries = eh_frame.entries(&bases);
    while let Some(entry) = entries.next().expect("entry") {
        if let gimli::CieOrFde::Fde(partial) = entry {
            partial.parse(EhFrame::cie_from_offset).expect("FDE");
            fdes += 1;
        }
    }
    assert_eq!(fdes, 2, "the region without CFI is skipped");

    let mut ctx = UnwindContext::new();
    for code in [&first[..], &second[..]] {
        let start = code.as_ptr() as u64;
        for offset in [0u64, 1, 3, 4, 9, code.len() as u64 - 1] {
            let fde = eh_frame
                .fde_for_address(&bases, start + offset, EhFrame::cie_from_offset)
                .expect("FDE");
            assert_eq!(fde.initial_address(), start);
            assert_eq!(fde.len(), code.len() as u64);
            let row = fde
                .unwind_info_for_address(&eh_frame, &bases, &mut ctx, start + offset)
                .expect("row");
            assert_row(row, offset, code.len() as u64);
        }
        let after =
            eh_frame.fde_for_address(&bases, start + code.len() as u64, EhFrame::cie_from_offset);
        assert!(after.is_err());
    }
    assert_eq!(
        eh_frame_for_register_frame(&regions[1..2]).unwrap(),
        vec![0, 0, 0, 0]
    );
}

#[test]
fn inconsistent_unwind_info_is_rejected() {
    let cie = system_v_cie();
    let wrong_length = frame_pointer_fde(REGION_START, 12).unwrap();
    let err = PerfUnwindData::build(
        11,
        Some(UnwindInfo {
            cie: &cie,
            fde: &wrong_length,
        }),
        0,
    )
    .unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    assert!(err.to_string().contains("covers 12 bytes"), "{err}");

    let elsewhere = frame_pointer_fde(Address::Constant(0x5000), 11).unwrap();
    let err = PerfUnwindData::build(
        11,
        Some(UnwindInfo {
            cie: &cie,
            fde: &elsewhere,
        }),
        0x1000,
    )
    .unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidInput);

    // Absurd sizes are errors, not overflows.
    for unwind in [
        None,
        Some(UnwindInfo {
            cie: &cie,
            fde: &wrong_length,
        }),
    ] {
        let err = PerfUnwindData::build(u64::MAX, unwind, 0).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert!(reserved_region_size(u64::MAX, unwind).is_err());
    }

    let mut with_personality = system_v_cie();
    with_personality.personality = Some((gimli::DW_EH_PE_absptr, Address::Constant(0x1234)));
    let fde = frame_pointer_fde(REGION_START, 11).unwrap();
    let err = PerfUnwindData::build(
        11,
        Some(UnwindInfo {
            cie: &with_personality,
            fde: &fde,
        }),
        0,
    )
    .unwrap_err();
    assert!(err.to_string().contains("personality"), "{err}");
}

/// Parses the perf payload of `cfi` with `gimli::read` and returns, for
/// every code offset, the CFA rule and the rules of `registers`.
fn rows_seen_by_gimli(
    cfi: &CallFrameInfo,
    code_size: u64,
    registers: &[gimli::Register],
) -> Vec<(CfaRule<usize>, Vec<Option<RegisterRule<usize>>>)> {
    let data = PerfUnwindData::build(code_size, Some(cfi.unwind_info()), 0).expect("build");
    let text = 0x40_0000;
    let eh_frame_addr = text + align_up(code_size, 8);
    let bases = BaseAddresses::default()
        .set_text(text)
        .set_eh_frame(eh_frame_addr)
        .set_eh_frame_hdr(eh_frame_addr + data.eh_frame().len() as u64);
    let eh_frame = EhFrame::new(data.eh_frame(), LittleEndian);
    let mut ctx = UnwindContext::new();
    (0..code_size)
        .map(|offset| {
            let fde = eh_frame
                .fde_for_address(&bases, text + offset, EhFrame::cie_from_offset)
                .expect("FDE");
            let row = fde
                .unwind_info_for_address(&eh_frame, &bases, &mut ctx, text + offset)
                .expect("row");
            assert_eq!(row.register(X86_64::RA), Some(RegisterRule::Offset(-8)));
            let rules = registers.iter().map(|&r| row.register(r)).collect();
            (row.cfa().clone(), rules)
        })
        .collect()
}

fn cfa(register: gimli::Register, offset: i64) -> CfaRule<usize> {
    CfaRule::RegisterAndOffset { register, offset }
}

#[test]
fn rows_describe_a_prologue_without_frame_pointer() {
    // push rbx; sub rsp, 16; <15 bytes of body>; add rsp, 16; pop rbx; ret
    let rbx = [SavedRegister {
        register: X86_64::RBX,
        cfa_offset: -16,
    }];
    let rows = [
        CfiRow {
            offset: 1,
            cfa_register: X86_64::RSP,
            cfa_offset: 16,
            saved: &rbx,
        },
        CfiRow {
            offset: 5,
            cfa_register: X86_64::RSP,
            cfa_offset: 32,
            saved: &rbx,
        },
        CfiRow {
            offset: 24,
            cfa_register: X86_64::RSP,
            cfa_offset: 16,
            saved: &rbx,
        },
        CfiRow {
            offset: 25,
            cfa_register: X86_64::RSP,
            cfa_offset: 8,
            saved: &[],
        },
    ];
    let cfi = CallFrameInfo::x86_64_rows(26, &rows).expect("valid rows");
    let seen = rows_seen_by_gimli(&cfi, 26, &[X86_64::RBX, X86_64::RBP]);
    for (offset, (cfa_rule, rules)) in seen.iter().enumerate() {
        let (expected_cfa, rbx_rule) = match offset {
            0 => (cfa(X86_64::RSP, 8), None),
            1..=4 => (cfa(X86_64::RSP, 16), Some(RegisterRule::Offset(-16))),
            5..=23 => (cfa(X86_64::RSP, 32), Some(RegisterRule::Offset(-16))),
            24 => (cfa(X86_64::RSP, 16), Some(RegisterRule::Offset(-16))),
            _ => (cfa(X86_64::RSP, 8), Some(RegisterRule::SameValue)),
        };
        assert_eq!(cfa_rule, &expected_cfa, "CFA at +{offset}");
        assert_eq!(rules[0], rbx_rule, "rbx at +{offset}");
        assert_eq!(rules[1], None, "rbp is never touched (+{offset})");
    }
}

#[test]
fn frame_pointer_template_equals_its_rows() {
    let fp = CallFrameInfo::x86_64_frame_pointer(11).expect("11 bytes");
    let rbp = [SavedRegister {
        register: X86_64::RBP,
        cfa_offset: -16,
    }];
    let rows = [
        CfiRow {
            offset: 1,
            cfa_register: X86_64::RSP,
            cfa_offset: 16,
            saved: &rbp,
        },
        CfiRow {
            offset: 4,
            cfa_register: X86_64::RBP,
            cfa_offset: 16,
            saved: &rbp,
        },
        CfiRow {
            offset: 10,
            cfa_register: X86_64::RSP,
            cfa_offset: 8,
            saved: &[],
        },
    ];
    assert_eq!(fp, CallFrameInfo::x86_64_rows(11, &rows).unwrap());
    assert_eq!(fp.cie(), &system_v_cie());
    assert_eq!(fp.fde(), &frame_pointer_fde(REGION_START, 11).unwrap());
    let seen = rows_seen_by_gimli(&fp, 11, &[X86_64::RBP]);
    for (offset, (cfa_rule, rules)) in seen.iter().enumerate() {
        let (register, cfa_offset, rbp_rule) = expected_cfa(offset as u64, 11);
        assert_eq!(cfa_rule, &cfa(register, cfa_offset), "CFA at +{offset}");
        assert_eq!(rules[0], rbp_rule, "rbp at +{offset}");
    }
}

#[test]
fn malformed_rows_are_rejected_with_the_row_named() {
    let bad_slot = [SavedRegister {
        register: X86_64::RBX,
        cfa_offset: -12,
    }];
    let twice = [
        SavedRegister {
            register: X86_64::RBX,
            cfa_offset: -16,
        },
        SavedRegister {
            register: X86_64::RBX,
            cfa_offset: -24,
        },
    ];
    let row = |offset, cfa_offset, saved| CfiRow {
        offset,
        cfa_register: X86_64::RSP,
        cfa_offset,
        saved,
    };
    let cases: [(&[CfiRow<'_>], &str); 5] = [
        (
            &[row(8, 16, &[])],
            "CFI row 0: offset 8 is outside the 8 code bytes",
        ),
        (
            &[row(2, 16, &[]), row(2, 24, &[])],
            "CFI row 1: offset 2 does not follow",
        ),
        (&[row(1, -8, &[])], "CFI row 0: CFA offset -8 is negative"),
        (&[row(1, 16, &bad_slot)], "register 3 is saved at CFA-12"),
        (&[row(1, 16, &twice)], "register 3 is saved twice"),
    ];
    for (rows, message) in cases {
        let err = CallFrameInfo::x86_64_rows(8, rows).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert!(err.to_string().contains(message), "{err} lacks {message:?}");
    }
    let err = CallFrameInfo::x86_64_frame_pointer(5).unwrap_err();
    assert!(err.to_string().contains("at least 6 bytes"), "{err}");
    assert!(CallFrameInfo::x86_64_rows(0, &[]).is_err());
    // No rows: the entry state holds everywhere (a leaf that never touches rsp).
    let leaf = CallFrameInfo::x86_64_rows(3, &[]).expect("leaf");
    for (cfa_rule, _) in rows_seen_by_gimli(&leaf, 3, &[]) {
        assert_eq!(cfa_rule, cfa(X86_64::RSP, 8));
    }
}
