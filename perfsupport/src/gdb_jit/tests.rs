//! The object a debugger loads, read back with `object` and `gimli`; the
//! descriptor list after publishing and finishing.

use super::*;
use crate::region::{LineEntry, UnwindInfo};
use gimli::UnwindSection;
use gimli::write::{CallFrameInstruction, CommonInformationEntry, FrameDescriptionEntry};
use object::{Object, ObjectSection, ObjectSymbol, SectionKind};

/// Serializes the tests that count the process-wide descriptor list.
static LIST_COUNT: parking_lot::Mutex<()> = parking_lot::Mutex::new(());

fn cie() -> CommonInformationEntry {
    let mut cie = CommonInformationEntry::new(
        gimli::Encoding {
            format: gimli::Format::Dwarf32,
            version: 1,
            address_size: 8,
        },
        1,
        -8,
        gimli::X86_64::RA,
    );
    cie.add_instruction(CallFrameInstruction::Cfa(gimli::X86_64::RSP, 8));
    cie.add_instruction(CallFrameInstruction::Offset(gimli::X86_64::RA, -8));
    cie
}

fn fde(size: u32) -> FrameDescriptionEntry {
    let mut fde = FrameDescriptionEntry::new(crate::unwind::REGION_START, size);
    fde.add_instruction(1, CallFrameInstruction::CfaOffset(16));
    fde
}

#[test]
fn the_object_places_symbols_lines_and_cfi_at_the_live_code() {
    // Two regions further apart than one `.text` section may span, `a`
    // first: a section each, in address order.
    let far = elf_image::MAX_GAP as usize + 64;
    let mut memory = vec![0x90u8; far + 16];
    memory[far..].fill(0xc3);
    let (code_a, code_b) = (&memory[..32], &memory[far..]);
    let lines_a = [
        LineEntry {
            offset: 0,
            file: "fib.toy",
            line: 2,
            column: 1,
        },
        LineEntry {
            offset: 8,
            file: "fib.toy",
            line: 3,
            column: 5,
        },
    ];
    let (cie, fde_a) = (cie(), fde(32));
    let regions = [
        CodeRegion::new(code_a, "toy:jit:fib:fib.toy:2")
            .with_lines(&lines_a)
            .with_unwind(UnwindInfo {
                cie: &cie,
                fde: &fde_a,
            }),
        CodeRegion::new(code_b, "toy:interp:main"),
    ];
    let sink = GdbJit::with_source_dir(Path::new("/src"));
    let image = sink.build_object(&regions).unwrap();
    let file = object::File::parse(&*image).unwrap();
    assert_eq!(file.kind(), object::ObjectKind::Relocatable);

    let texts: Vec<_> = file
        .sections()
        .filter(|s| s.name() == Ok(".text"))
        .collect();
    assert_eq!(texts.len(), 2);
    assert_eq!(texts[0].address(), regions[0].start());
    assert_eq!(texts[0].size(), 32);
    assert_eq!(texts[0].kind(), SectionKind::UninitializedData);
    assert_eq!(texts[1].address(), regions[1].start());
    // No code bytes are copied.
    assert!(image.len() < 4096, "{} bytes", image.len());

    let symbols: Vec<_> = file
        .symbols()
        .filter(|s| s.kind() == object::SymbolKind::Text)
        .map(|s| (s.name().unwrap().to_string(), s.section_index(), s.size()))
        .collect();
    assert_eq!(
        symbols,
        [
            (
                "toy:jit:fib:fib.toy:2".to_string(),
                Some(texts[0].index()),
                32
            ),
            ("toy:interp:main".to_string(), Some(texts[1].index()), 16),
        ]
    );

    let start = regions[0].start();
    assert_eq!(
        crate::dwarf::line_rows(&file),
        [
            (start, "fib.toy".to_string(), 2),
            (start + 8, "fib.toy".to_string(), 3)
        ]
    );

    // The CFI: one FDE covering region 0 at its absolute address.
    let eh_frame = file.section_by_name(".eh_frame").unwrap();
    let data = eh_frame.data().unwrap();
    let eh = gimli::EhFrame::new(data, gimli::LittleEndian);
    let bases = gimli::BaseAddresses::default().set_eh_frame(eh_frame.address());
    let mut entries = eh.entries(&bases);
    let mut fdes = Vec::new();
    while let Some(entry) = entries.next().unwrap() {
        if let gimli::CieOrFde::Fde(partial) = entry {
            let fde = partial.parse(gimli::EhFrame::cie_from_offset).unwrap();
            fdes.push((fde.initial_address(), fde.len()));
        }
    }
    assert_eq!(fdes, [(start, 32)]);
}

#[test]
fn bad_batches_are_rejected_without_publishing() {
    let sink = GdbJit::new();
    let code = [0x90u8; 4];
    let outside = [LineEntry {
        offset: 9,
        file: "a.toy",
        line: 1,
        column: 0,
    }];
    let region = CodeRegion::new(&code, "toy:jit:f").with_lines(&outside);
    let err = sink.register(&[region]).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    assert_eq!(sink.published_objects(), 0);
    // A name with NUL would end early in `.strtab`: rejected like every sink does.
    let region = CodeRegion::new(&code, "toy:a\0b");
    let err = sink.register(&[region]).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    // An empty file name still becomes a valid DWARF string.
    let odd = [LineEntry {
        offset: 0,
        file: "",
        line: 1,
        column: 0,
    }];
    let region = CodeRegion::new(&code, "toy:jit:odd").with_lines(&odd);
    let image = sink.build_object(&[region]).unwrap();
    let file = object::File::parse(&*image).unwrap();
    assert!(file.symbols().any(|s| s.name() == Ok("toy:jit:odd")));
}

#[test]
fn publishing_links_one_entry_per_batch_and_finish_unlinks_them() {
    let code = [0x90u8; 32];
    let region = CodeRegion::new(&code[..16], "toy:jit:f");
    let other = CodeRegion::new(&code[16..], "toy:jit:g");
    let sink = GdbJit::new();
    let _counting = LIST_COUNT.lock();
    let before = descriptor::published_count();
    sink.register(&[region, other]).unwrap();
    sink.register(&[region]).unwrap();
    assert_eq!(sink.published_objects(), 2);
    assert_eq!(descriptor::published_count(), before + 2);
    sink.finish().unwrap();
    assert_eq!(sink.published_objects(), 0);
    assert_eq!(descriptor::published_count(), before);
    assert!(sink.register(&[region]).is_err());
}

#[test]
fn one_region_batches_are_merged_into_a_few_objects_naming_every_region() {
    let code = [0x90u8; 64 * 4];
    let names: Vec<String> = (0..64).map(|i| format!("toy:jit:f{i}")).collect();
    let lines: Vec<[LineEntry<'_>; 1]> = (0..64)
        .map(|i| {
            [LineEntry {
                offset: 0,
                file: "many.toy",
                line: i + 1,
                column: 0,
            }]
        })
        .collect();
    let cie = cie();
    let fde = fde(4);
    let sink = GdbJit::new();
    let _counting = LIST_COUNT.lock();
    let before = descriptor::published_count();
    for i in 0..64 {
        let region = CodeRegion::new(&code[i * 4..i * 4 + 4], &names[i])
            .with_lines(&lines[i])
            .with_unwind(UnwindInfo {
                cie: &cie,
                fde: &fde,
            });
        sink.register(&[region]).unwrap();
        // A binary counter of regions: one object per set bit of i + 1.
        let expected = (i as u32 + 1).count_ones() as usize;
        assert_eq!(
            sink.published_objects(),
            expected,
            "after {} batches",
            i + 1
        );
        assert_eq!(descriptor::published_count(), before + expected);
    }
    // 64 regions: one object, with every symbol once, at its own address,
    // and every region's line and FDE.
    let guard = sink.published.lock();
    let registry = guard.as_ref().unwrap();
    assert_eq!(registry.objects.len(), 1);
    let image = sink
        .build_merged(&registry.objects[0].regions, &[], registry)
        .unwrap();
    drop(guard);
    let file = object::File::parse(&*image).unwrap();
    let mut found: Vec<(String, u64)> = file
        .symbols()
        .filter(|s| s.name().is_ok_and(|n| n.starts_with("toy:jit:f")))
        .map(|s| {
            let section = file.section_by_index(s.section_index().unwrap()).unwrap();
            // Relocatable: the value is an offset in the section.
            (
                s.name().unwrap().to_owned(),
                section.address() + s.address(),
            )
        })
        .collect();
    found.sort_by_key(|&(_, address)| address);
    assert_eq!(found.len(), 64);
    for (i, (name, address)) in found.iter().enumerate() {
        assert_eq!(name, &names[i]);
        assert_eq!(*address, code[i * 4..].as_ptr() as u64);
    }
    let rows = crate::dwarf::line_rows(&file);
    assert_eq!(rows.len(), 64);
    assert!(rows.iter().enumerate().all(|(i, (address, file, line))| {
        *address == code[i * 4..].as_ptr() as u64 && file == "many.toy" && *line == i as u64 + 1
    }));
    let eh_frame = file.section_by_name(".eh_frame").unwrap().data().unwrap();
    let eh_frame = gimli::EhFrame::new(eh_frame, gimli::LittleEndian);
    let bases = gimli::BaseAddresses::default();
    let mut fdes = 0;
    let mut entries = eh_frame.entries(&bases);
    while let Some(entry) = entries.next().unwrap() {
        if let gimli::CieOrFde::Fde(partial) = entry {
            let fde = partial.parse(gimli::EhFrame::cie_from_offset).unwrap();
            assert_eq!(fde.initial_address(), code[fdes * 4..].as_ptr() as u64);
            fdes += 1;
        }
    }
    assert_eq!(fdes, 64);
    sink.finish().unwrap();
    assert_eq!(descriptor::published_count(), before);
}

#[test]
fn adjacent_regions_share_a_text_section_unless_another_objects_region_lies_between() {
    let code = [0x90u8; 48];
    let (a, b, c) = (&code[0..16], &code[16..32], &code[32..48]);
    let sink = GdbJit::new();
    let _counting = LIST_COUNT.lock();
    let text_sections = |image: &[u8]| {
        let file = object::File::parse(image).unwrap();
        file.sections()
            .filter(|s| s.name() == Ok(".text"))
            .map(|s| (s.address(), s.size()))
            .collect::<Vec<_>>()
    };
    // Alone, `a` and `c` (a gap of 16 bytes between them) share one section.
    let alone = sink
        .build_object(&[
            CodeRegion::new(a, "toy:jit:a"),
            CodeRegion::new(c, "toy:jit:c"),
        ])
        .unwrap();
    assert_eq!(text_sections(&alone), vec![(a.as_ptr() as u64, 48)]);
    // Once `b`, in that gap, is published, they need a section each.
    sink.register(&[CodeRegion::new(b, "toy:jit:b")]).unwrap();
    let apart = sink
        .build_object(&[
            CodeRegion::new(c, "toy:jit:c"),
            CodeRegion::new(a, "toy:jit:a"),
        ])
        .unwrap();
    assert_eq!(
        text_sections(&apart),
        vec![(a.as_ptr() as u64, 16), (c.as_ptr() as u64, 16)]
    );
    sink.finish().unwrap();
}

#[test]
fn retired_code_leaves_the_debugger_and_merged_objects_are_rebuilt_without_it() {
    let code = [0x90u8; 64];
    let (a, b, c) = (&code[0..16], &code[16..32], &code[32..48]);
    let sink = GdbJit::new();
    let _counting = LIST_COUNT.lock();
    let before = descriptor::published_count();
    // Two batches of one region each merge into one object.
    sink.register(&[CodeRegion::new(a, "toy:jit:a")]).unwrap();
    sink.register(&[CodeRegion::new(b, "toy:jit:b")]).unwrap();
    sink.register(&[CodeRegion::new(c, "toy:jit:c")]).unwrap();
    assert_eq!(sink.published_objects(), 2);
    let names = |sink: &GdbJit| -> Vec<String> {
        let guard = sink.published.lock();
        let registry = guard.as_ref().unwrap();
        let mut names: Vec<String> = (registry.objects.iter())
            .flat_map(|o| o.regions.iter().map(|r| r.name.clone()))
            .collect();
        names.sort();
        names
    };
    assert_eq!(names(&sink), ["toy:jit:a", "toy:jit:b", "toy:jit:c"]);
    // `a` dies: its merged object is rebuilt with `b` alone.
    sink.retire(&[(a.as_ptr() as usize, a.len())]).unwrap();
    assert_eq!(names(&sink), ["toy:jit:b", "toy:jit:c"]);
    assert_eq!(sink.published_objects(), 2);
    assert_eq!(descriptor::published_count(), before + 2);
    // `c` dies: its object goes; an address nothing covers changes nothing.
    sink.retire(&[(c.as_ptr() as usize, c.len()), (1, 1)])
        .unwrap();
    assert_eq!(names(&sink), ["toy:jit:b"]);
    assert_eq!(descriptor::published_count(), before + 1);
    sink.finish().unwrap();
    assert_eq!(descriptor::published_count(), before);
}
