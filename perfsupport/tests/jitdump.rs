//! jitdump files read back with an independent parser (`linux-perf-data`),
//! every record checked.

mod common;

use common::{SPIN_CODE, SPIN_LINES, align_up, scratch_dir};
use gimli::LittleEndian;
use gimli::read::{BaseAddresses, EhFrame, EhFrameHdr, UnwindSection};
use linux_perf_data::jitdump::{JitDumpReader, JitDumpRecord, JitDumpRecordType};
use perfsupport::jitdump::MARKER_LEN;
use perfsupport::jitdump::format::{ELF_MACHINE, HEADER_SIZE};
use perfsupport::unwind::REGION_START;
use perfsupport::unwind::x86_64::{frame_pointer_fde, system_v_cie};
use perfsupport::{CodeRegion, JitDump, LineEntry, ProfilerSink, UnwindInfo};
use std::os::unix::fs::PermissionsExt;

/// What the test expects for one region, in registration order.
struct Expected<'a> {
    region: CodeRegion<'a>,
}

/// One parsed record, owned.
#[derive(Debug)]
enum Parsed {
    DebugInfo {
        code_addr: u64,
        entries: Vec<(u64, u32, u32, String)>,
    },
    Unwinding {
        mapped_size: u64,
        payload: Vec<u8>,
    },
    Load {
        pid: u32,
        tid: u32,
        vma: u64,
        code_addr: u64,
        index: u64,
        name: String,
        code: Vec<u8>,
        record_size: u32,
    },
    Close,
}

fn read_dump(
    path: &std::path::Path,
) -> (linux_perf_data::jitdump::JitDumpHeader, Vec<(u64, Parsed)>) {
    let file = std::fs::File::open(path).expect("open dump");
    let mut reader = JitDumpReader::new(file).expect("jitdump header");
    let header = reader.header().clone();
    let mut records = Vec::new();
    while let Some(raw) = reader.next_record().expect("record") {
        let record_size = raw.record_size;
        let parsed = match raw.parse().expect("parse record") {
            JitDumpRecord::CodeDebugInfo(r) => Parsed::DebugInfo {
                code_addr: r.code_addr,
                entries: r
                    .entries
                    .iter()
                    .map(|e| {
                        let file = String::from_utf8(e.file_path.as_slice().to_vec()).unwrap();
                        (e.code_addr, e.line, e.column, file)
                    })
                    .collect(),
            },
            // linux-perf-data follows the spec text (header first); perf's
            // code reads `.eh_frame` first. Re-join the payload to get the
            // bytes as written, then split it the way perf does.
            JitDumpRecord::CodeUnwindingInfo(r) => Parsed::Unwinding {
                mapped_size: r.mapped_size,
                payload: [r.eh_frame_hdr.as_slice(), r.eh_frame.as_slice()].concat(),
            },
            JitDumpRecord::CodeLoad(r) => Parsed::Load {
                pid: r.pid,
                tid: r.tid,
                vma: r.vma,
                code_addr: r.code_addr,
                index: r.code_index,
                name: String::from_utf8(r.function_name.as_slice().to_vec()).unwrap(),
                code: r.code_bytes.as_slice().to_vec(),
                record_size,
            },
            JitDumpRecord::CodeClose => Parsed::Close,
            other => panic!("unexpected record {other:?}"),
        };
        records.push((raw.timestamp, parsed));
    }
    (header, records)
}

#[test]
fn every_record_reads_back_with_linux_perf_data() {
    let dir = scratch_dir("jitdump");
    let dump = JitDump::create_in(dir.path()).expect("create dump");
    let path = dump.path().expect("path").to_path_buf();
    assert_eq!(
        path,
        dir.path().join(format!("jit-{}.dump", std::process::id()))
    );
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o644
    );

    // The marker: an r-x private mapping of the dump, visible to perf.
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let marker_line = maps
        .lines()
        .find(|l| l.ends_with(path.to_str().unwrap()))
        .expect("marker mapping in /proc/self/maps");
    assert!(marker_line.contains(" r-xp "), "{marker_line}");

    let cie = system_v_cie();
    let fde = frame_pointer_fde(REGION_START, SPIN_CODE.len() as u32).unwrap();
    let spin = SPIN_CODE.to_vec();
    let lines: Vec<LineEntry> = SPIN_LINES
        .iter()
        .map(|&(offset, line)| LineEntry {
            offset,
            file: "fake.toy",
            line,
            column: line + 10,
        })
        .collect();
    let lines_only_code = vec![0x90u8, 0x90, 0xc3];
    let lines_only = [LineEntry {
        offset: 0,
        file: "other.toy",
        line: 7,
        column: 0,
    }];
    // Two byte-identical trampolines at different addresses.
    let tramp_bytes = [0x55, 0x48, 0x89, 0xe5, 0xbe, 1, 0, 0, 0, 0x5d, 0xc3];
    let tramp_a = tramp_bytes.to_vec();
    let tramp_b = tramp_bytes.to_vec();

    let batch1 = [
        CodeRegion::new(&spin, "toy::spin")
            .with_unwind(UnwindInfo {
                cie: &cie,
                fde: &fde,
            })
            .with_lines(&lines),
        CodeRegion::new(&lines_only_code, "toy::lines_only").with_lines(&lines_only),
    ];
    let batch2 = [
        CodeRegion::new(&tramp_a, "toy-tramp::a"),
        CodeRegion::new(&tramp_b, "toy-tramp::b"),
    ];
    let before = perfsupport_now();
    dump.register(&batch1).expect("batch 1");
    dump.register(&batch2).expect("batch 2");
    dump.finish().expect("finish");
    assert!(
        dump.register(&batch2).is_err(),
        "registering after finish fails"
    );
    dump.finish().expect("finishing twice is harmless");

    // The live code is never modified by the marker.
    assert_eq!(spin, SPIN_CODE);
    assert_eq!(tramp_a, tramp_bytes);

    let (header, records) = read_dump(&path);
    assert_eq!(&header.magic, b"DTiJ");
    assert_eq!(header.version, 1);
    assert_eq!(header.total_size, HEADER_SIZE);
    assert_eq!(header.elf_machine_arch, ELF_MACHINE);
    assert_eq!(header.pid, std::process::id());
    assert_eq!(header.flags, 0);
    assert!(header.timestamp <= before, "header timestamp from creation");

    // Timestamps: CLOCK_MONOTONIC, never decreasing, after the header's.
    let mut last = header.timestamp;
    for (timestamp, _) in &records {
        assert!(*timestamp >= last, "timestamps must not decrease");
        last = *timestamp;
    }
    assert!(last <= perfsupport_now());

    // Each batch is written in address order (see jitdump's packed code).
    fn in_address_order<'a>(batch: &[CodeRegion<'a>]) -> Vec<CodeRegion<'a>> {
        let mut sorted = batch.to_vec();
        sorted.sort_by_key(CodeRegion::start);
        sorted
    }
    let expected: Vec<Expected> = in_address_order(&batch1)
        .into_iter()
        .chain(in_address_order(&batch2))
        .map(|region| Expected { region })
        .collect();
    let second_tramp = in_address_order(&batch2)[1].name;
    let mut records = records.into_iter().map(|(_, r)| r);
    let tid = current_tid();
    let mut dumped_trampolines = Vec::new();
    for (index, exp) in expected.iter().enumerate() {
        let region = &exp.region;
        let start = region.start();
        let size = region.size();
        if !region.lines.is_empty() {
            let Some(Parsed::DebugInfo { code_addr, entries }) = records.next() else {
                panic!("DEBUG_INFO expected first for {}", region.name);
            };
            assert_eq!(code_addr, start);
            assert_eq!(entries.len(), region.lines.len() + 1, "rows + sentinel");
            for (entry, line) in entries.iter().zip(region.lines) {
                assert_eq!(
                    entry,
                    &(
                        start + u64::from(line.offset),
                        line.line,
                        line.column,
                        line.file.to_string()
                    )
                );
            }
            let last = region.lines.last().unwrap();
            assert_eq!(
                entries.last().unwrap(),
                &(start + size, last.line, last.column, last.file.to_string())
            );
        }
        let Some(Parsed::Unwinding {
            mapped_size,
            payload,
        }) = records.next()
        else {
            panic!("UNWINDING_INFO expected before LOAD for {}", region.name);
        };
        let Some(Parsed::Load {
            pid,
            tid: load_tid,
            vma,
            code_addr,
            index: code_index,
            name,
            code,
            record_size,
        }) = records.next()
        else {
            panic!("LOAD expected for {}", region.name);
        };
        assert_eq!(pid, std::process::id());
        assert_eq!(load_tid, tid);
        assert_eq!((vma, code_addr), (start, start));
        assert_eq!(
            code_index, index as u64,
            "indices are unique and consecutive"
        );
        assert_eq!(name, region.name);
        assert_eq!(
            record_size as usize,
            56 + name.len() + 1 + code.len(),
            "LOAD is never padded"
        );
        // The dumped bytes start with the live bytes, unchanged; only the
        // second copy of the trampoline bytes carries a marker, after them.
        assert_eq!(
            &code[..region.code.len()],
            region.code,
            "code never changed"
        );
        let marked = code.len() > region.code.len();
        assert_eq!(marked, region.name == second_tramp, "{}", region.name);
        if marked {
            assert_eq!(code.len(), region.code.len() + MARKER_LEN);
            if cfg!(target_arch = "x86_64") {
                assert_eq!(
                    &code[region.code.len()..][..4],
                    &[0x0f, 0x1f, 0x84, 0x00],
                    "a nopl"
                );
            }
        }
        if region.unwind.is_some() {
            assert_eq!(mapped_size, payload.len() as u64);
            // Split as perf does and check the header finds the FDE, with
            // .eh_frame after the dumped bytes.
            let (eh_frame, hdr) = payload.split_at(payload.len() - 20);
            let text = 0x80;
            let dumped = code.len() as u64;
            let bases = BaseAddresses::default()
                .set_text(text)
                .set_eh_frame(text + align_up(dumped, 8))
                .set_eh_frame_hdr(text + align_up(dumped, 8) + eh_frame.len() as u64);
            let parsed = EhFrameHdr::new(hdr, LittleEndian).parse(&bases, 8).unwrap();
            let fde = parsed
                .table()
                .unwrap()
                .fde_for_address(
                    &EhFrame::new(eh_frame, LittleEndian),
                    &bases,
                    text + 4,
                    EhFrame::cie_from_offset,
                )
                .unwrap();
            assert_eq!((fde.initial_address(), fde.len()), (text, size));
        } else {
            assert_eq!(mapped_size, 0);
            assert_eq!(payload.len(), 20, "header-only form");
            assert_eq!(&payload[8..12], &[0, 0, 0, 0], "fde_count 0");
        }
        if region.name.starts_with("toy-tramp::") {
            dumped_trampolines.push(code);
        }
    }
    assert!(
        matches!(records.next(), Some(Parsed::Close)),
        "CLOSE at the end"
    );
    assert!(records.next().is_none());
    assert_eq!(dumped_trampolines.len(), 2);
    assert_ne!(
        dumped_trampolines[0], dumped_trampolines[1],
        "identical code gives distinct dumped objects"
    );
}

#[test]
fn invalid_regions_write_nothing() {
    let file = tempfile::NamedTempFile::new().unwrap();
    let dump = JitDump::from_file(file.reopen().unwrap(), false).expect("dump");
    let code = [0xc3u8; 8];
    let (code, other) = code.split_at(4);
    let bad_lines = [LineEntry {
        offset: 9,
        file: "x.toy",
        line: 1,
        column: 0,
    }];
    let batch = [
        CodeRegion::new(code, "toy::good"),
        CodeRegion::new(other, "toy::bad").with_lines(&bad_lines),
    ];
    let err = dump.register(&batch).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    assert_eq!(
        std::fs::metadata(file.path()).unwrap().len(),
        u64::from(HEADER_SIZE)
    );
    // Unwind info that does not cover the code: rejected, naming the region.
    let wrong = perfsupport::CallFrameInfo::x86_64_frame_pointer(12).unwrap();
    let err = dump
        .register(&[
            batch[0],
            CodeRegion::new(other, "toy::bad").with_unwind(&wrong),
        ])
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"code region "toy::bad": unwind info: the FDE covers 12 bytes but the code has 4"#
    );
    assert_eq!(
        std::fs::metadata(file.path()).unwrap().len(),
        u64::from(HEADER_SIZE)
    );
    // The dump stays usable.
    dump.register(&batch[..1]).expect("good batch");
    dump.finish().unwrap();
    let (_, records) = read_dump(file.path());
    assert_eq!(records.len(), 3, "UNWINDING_INFO, LOAD, CLOSE");
    assert_eq!(JitDumpRecordType::JIT_CODE_LOAD.0, 0);
}

#[test]
fn concurrent_registration_keeps_records_whole_and_indices_unique() {
    let file = tempfile::NamedTempFile::new().unwrap();
    let dump = JitDump::from_file(file.reopen().unwrap(), false).expect("dump");
    let code = SPIN_CODE;
    std::thread::scope(|scope| {
        for thread in 0..4 {
            let dump = &dump;
            scope.spawn(move || {
                for i in 0..500 {
                    let name = format!("toy::t{thread}_{i}");
                    dump.register(&[CodeRegion::new(&code, &name)]).unwrap();
                }
            });
        }
    });
    dump.finish().unwrap();
    let (_, records) = read_dump(file.path());
    let mut indices = Vec::new();
    let mut names = std::collections::HashSet::new();
    for (_, record) in &records {
        if let Parsed::Load { index, name, .. } = record {
            indices.push(*index);
            assert!(names.insert(name.clone()));
        }
    }
    indices.sort_unstable();
    assert_eq!(indices, (0..2000).collect::<Vec<u64>>());
}

/// CLOCK_MONOTONIC now, read independently of the crate.
fn perfsupport_now() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out-pointer; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn current_tid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u32 }
}

/// The code bytes of every CODE_LOAD in the dump at `path`, in order.
fn dumped_code(path: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let (_, records) = read_dump(path);
    records
        .into_iter()
        .filter_map(|(_, record)| match record {
            Parsed::Load { name, code, .. } => Some((name, code)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_hot_loop_at_the_end_of_a_function_is_dumped_as_it_runs() {
    // xor eax, eax; loop: add rax, rdi; dec rdi; jnz loop; ret
    // (the last 8 bytes are the loop, which perf annotate must show as is)
    let sum = [
        0x31, 0xc0, 0x48, 0x01, 0xf8, 0x48, 0xff, 0xcf, 0x75, 0xf8, 0xc3,
    ];
    let file = tempfile::NamedTempFile::new().unwrap();
    let dump = JitDump::from_file(file.reopen().unwrap(), false).expect("dump");
    dump.register(&[CodeRegion::new(&sum, "minijit::sum")])
        .expect("register");
    dump.finish().unwrap();
    assert_eq!(
        dumped_code(file.path()),
        [("minijit::sum".to_string(), sum.to_vec())],
        "the dumped bytes are the live bytes"
    );
}

#[test]
fn identical_regions_get_distinct_code_only_build_ids() {
    use sha1::{Digest, Sha1};
    let tramp = [0x55, 0x48, 0x89, 0xe5, 0xff, 0xd6, 0x5d, 0xc3];
    let twin = [0x48, 0x8d, 0x04, 0x37, 0xc3]; // lea rax, [rdi + rsi]; ret
    // Each function at its own address, in the order of the batch, as a
    // JIT places them (a batch is written in address order).
    let mut arena = [0u8; 64];
    let at = [0, 16, 32, 48, 56];
    for (&offset, bytes) in at.iter().zip([&tramp[..], &twin, &tramp, &tramp, &twin]) {
        arena[offset..offset + bytes.len()].copy_from_slice(bytes);
    }
    let code = |i: usize, bytes: &[u8]| &arena[at[i]..at[i] + bytes.len()];
    let file = tempfile::NamedTempFile::new().unwrap();
    let dump = JitDump::from_file(file.reopen().unwrap(), false).expect("dump");
    let batch = [
        CodeRegion::new(code(0, &tramp), "toy-tramp::a"),
        CodeRegion::new(code(1, &twin), "toy::add"),
        CodeRegion::new(code(2, &tramp), "toy-tramp::b"),
        CodeRegion::new(code(3, &tramp), "toy-tramp::c"),
    ];
    dump.register(&batch).expect("batch 1");
    // A later batch with the same bytes again, as a second function.
    dump.register(&[CodeRegion::new(code(4, &twin), "toy::plus")])
        .expect("batch 2");
    dump.finish().unwrap();

    let loads = dumped_code(file.path());
    let names: Vec<&str> = loads.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        names,
        [
            "toy-tramp::a",
            "toy::add",
            "toy-tramp::b",
            "toy-tramp::c",
            "toy::plus"
        ]
    );
    // The first copy of each byte string is exact; repeats are the code
    // followed by a marker, never a change to the code.
    assert_eq!(loads[0].1, tramp);
    assert_eq!(loads[1].1, twin);
    for (copy, live) in [
        (&loads[2].1, &tramp[..]),
        (&loads[3].1, &tramp),
        (&loads[4].1, &twin),
    ] {
        assert_eq!(copy.len(), live.len() + MARKER_LEN);
        assert_eq!(&copy[..live.len()], live);
    }
    // Newer perf: build-id = SHA-1 of the CODE_LOAD code bytes alone.
    let build_ids: std::collections::HashSet<Vec<u8>> = loads
        .iter()
        .map(|(_, code)| Sha1::digest(code).to_vec())
        .collect();
    assert_eq!(
        build_ids.len(),
        loads.len(),
        "every object has its own build-id"
    );
}

/// perf reads anything under `/tmp/perf-` as a perf map, so a dump there
/// loses every JIT symbol. The check is on the resolved directory: `..`
/// and symlinks once got past it.
#[test]
fn a_directory_that_resolves_under_tmp_perf_is_refused() {
    let target = std::path::PathBuf::from(format!(
        "/tmp/perf-jitdump-dir-check-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&target).unwrap();
    let scratch = tempfile::Builder::new()
        .prefix("jitdump-dir-check-")
        .tempdir_in("/tmp")
        .unwrap();
    let link = scratch.path().join("link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let dotted = scratch.path().join("..").join(target.file_name().unwrap());
    for dir in [&dotted, &link, &target] {
        let err = JitDump::create_in(dir).expect_err("a dump under /tmp/perf-");
        assert_eq!(
            err.kind(),
            std::io::ErrorKind::InvalidInput,
            "{dir:?}: {err}"
        );
        assert!(err.to_string().contains("/tmp/perf-"), "{err}");
    }
    let left: Vec<_> = std::fs::read_dir(&target).unwrap().collect();
    std::fs::remove_dir_all(&target).unwrap();
    assert!(left.is_empty(), "files were created: {left:?}");
    // A directory that does not exist is an error that names it.
    let missing = scratch.path().join("missing");
    let err = JitDump::create_in(&missing).expect_err("a missing directory");
    assert!(err.to_string().contains("missing"), "{err}");
}
