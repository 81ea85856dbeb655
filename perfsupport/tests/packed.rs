//! Packed code in the jitdump: regions placed back to back, registered in
//! one batch or one per call, in any order, with code dying in between.
//! perf maps each `JIT_CODE_LOAD` over its code *and* the `.eh_frame` after
//! it (`ALIGN8(size) + mapped_size`), a later mapping cutting an earlier
//! one. These tests replay that on the dump and check that every live
//! region's bytes end up under its own latest load, that every load with
//! an FDE keeps its whole mapping, and what `UnwindFallbacks` reports.

mod common;

use common::align_up;
use linux_perf_data::jitdump::{JitDumpReader, JitDumpRecord};
use perfsupport::unwind::CallFrameInfo;
use perfsupport::{CodeRegion, JitDump, LineEntry, ProfilerSink, UnwindFallbacks};
use std::collections::BTreeMap;
use std::io;

/// `push rbp; mov rbp, rsp; mov eax, id; pop rbp; ret`: 11 bytes, distinct
/// per `id`, with a frame pointer.
fn function(id: u32) -> [u8; 11] {
    let [a, b, c, d] = id.to_le_bytes();
    [0x55, 0x48, 0x89, 0xe5, 0xb8, a, b, c, d, 0x5d, 0xc3]
}

const LEN: usize = 11;

/// One CODE_LOAD as perf injects it.
#[derive(Clone, Debug)]
struct Load {
    name: String,
    start: u64,
    code_size: u64,
    /// `mapped_size` of the UNWINDING_INFO before it.
    mapped: u64,
    /// Lines of the DEBUG_INFO before it.
    lines: usize,
}

impl Load {
    /// The range perf maps: `ALIGN8(size) + mapped_size`, or the code only.
    fn end(&self) -> u64 {
        if self.mapped > 0 {
            self.start + align_up(self.code_size, 8) + self.mapped
        } else {
            self.start + self.code_size
        }
    }
}

/// The loads of the dump at `path`, in file order.
fn loads(path: &std::path::Path) -> Vec<Load> {
    let mut reader = JitDumpReader::new(std::fs::File::open(path).unwrap()).unwrap();
    let (mut mapped, mut lines) = (0, 0);
    let mut loads = Vec::new();
    while let Some(raw) = reader.next_record().unwrap() {
        match raw.parse().unwrap() {
            JitDumpRecord::CodeDebugInfo(r) => lines = r.entries.len(),
            JitDumpRecord::CodeUnwindingInfo(r) => mapped = r.mapped_size,
            JitDumpRecord::CodeLoad(r) => {
                loads.push(Load {
                    name: String::from_utf8(r.function_name.as_slice().to_vec()).unwrap(),
                    start: r.code_addr,
                    code_size: r.code_bytes.len() as u64,
                    mapped: std::mem::take(&mut mapped),
                    lines: std::mem::take(&mut lines),
                });
            }
            _ => {}
        }
    }
    loads
}

/// perf's view after injecting `loads` in order: for each byte address,
/// the index of the load whose mapping covers it last.
fn perf_view(loads: &[Load]) -> BTreeMap<u64, usize> {
    let mut owner = BTreeMap::new();
    for (index, load) in loads.iter().enumerate() {
        for address in load.start..load.end() {
            owner.insert(address, index);
        }
    }
    owner
}

/// Registers and retires in an arena, and checks perf's view of it.
struct Arena {
    bytes: Vec<u8>,
    file: tempfile::NamedTempFile,
    dump: JitDump,
    /// Live regions: start offset -> name.
    live: BTreeMap<usize, String>,
    unwind: CallFrameInfo,
}

impl Arena {
    fn new() -> Arena {
        let file = tempfile::NamedTempFile::new().unwrap();
        let dump = JitDump::from_file(file.reopen().unwrap(), false).unwrap();
        Arena {
            bytes: vec![0xcc; 4096],
            file,
            dump,
            live: BTreeMap::new(),
            unwind: CallFrameInfo::x86_64_frame_pointer(LEN as u32).unwrap(),
        }
    }

    fn address(&self, offset: usize) -> u64 {
        self.bytes.as_ptr() as u64 + offset as u64
    }

    /// Writes function `id` at each offset, registers them as one batch
    /// (in the order given) with unwind info and a line table.
    fn register(&mut self, placed: &[(usize, u32)]) -> io::Result<UnwindFallbacks> {
        for &(offset, id) in placed {
            self.bytes[offset..offset + LEN].copy_from_slice(&function(id));
        }
        let names: Vec<String> = placed
            .iter()
            .map(|(_, id)| format!("packed::f{id}"))
            .collect();
        let lines = [LineEntry {
            offset: 0,
            file: "packed.toy",
            line: 1,
            column: 0,
        }];
        let regions: Vec<CodeRegion<'_>> = (placed.iter().zip(&names))
            .map(|(&(offset, _), name)| {
                CodeRegion::new(&self.bytes[offset..offset + LEN], name)
                    .with_unwind(self.unwind.unwind_info())
                    .with_lines(&lines)
            })
            .collect();
        let mut fallbacks = UnwindFallbacks::default();
        self.dump.register_reporting(&regions, &mut fallbacks)?;
        for (&(offset, _), name) in placed.iter().zip(names) {
            self.live
                .retain(|&o, _| o + LEN <= offset || offset + LEN <= o);
            self.live.insert(offset, name);
        }
        Ok(fallbacks)
    }

    fn retire(&mut self, offset: usize) {
        self.live.remove(&offset);
        self.dump
            .retire(&[(self.address(offset) as usize, LEN)])
            .unwrap();
    }

    /// Every live region's bytes are under its own latest load (which has
    /// its line table), and every load with an FDE still owns its whole
    /// mapping where it matters: nothing live is under its `.eh_frame`.
    /// Returns the loads.
    fn check(&self) -> Vec<Load> {
        let loads = loads(self.file.path());
        let owner = perf_view(&loads);
        for (&offset, name) in &self.live {
            let start = self.address(offset);
            let latest = loads
                .iter()
                .rposition(|l| l.start == start && &l.name == name)
                .unwrap_or_else(|| panic!("{name} was never loaded"));
            for address in start..start + LEN as u64 {
                assert_eq!(
                    owner.get(&address),
                    Some(&latest),
                    "byte {:#x} of {name} belongs to {:?}\n{loads:#?}",
                    address - start,
                    owner.get(&address).map(|&i| &loads[i].name)
                );
            }
            assert_eq!(loads[latest].lines, 2, "{name} lost its line table");
            let load = &loads[latest];
            if load.mapped > 0 {
                // Its .eh_frame is whole: no live code under it, and no
                // later mapping cut it.
                for address in start..load.end() {
                    assert_eq!(owner.get(&address), Some(&latest), "{name}'s FDE was cut");
                }
            }
        }
        loads
    }
}

#[test]
fn a_packed_batch_keeps_the_fde_only_where_there_is_room() {
    let mut arena = Arena::new();
    // Given out of order: the dump writes them by address.
    let fallbacks = arena.register(&[(2 * LEN, 3), (0, 1), (LEN, 2)]).unwrap();
    assert_eq!(
        fallbacks,
        UnwindFallbacks {
            header_only: 2,
            rewritten: 0
        }
    );
    let loads = arena.check();
    let mapped: Vec<(&str, bool)> = (loads.iter())
        .map(|l| (l.name.as_str(), l.mapped > 0))
        .collect();
    assert_eq!(
        mapped,
        [
            ("packed::f1", false),
            ("packed::f2", false),
            ("packed::f3", true)
        ],
        "only the last region has room for its FDE"
    );
}

#[test]
fn code_landing_in_a_tail_rewrites_that_region_header_only_first() {
    let mut arena = Arena::new();
    assert_eq!(
        arena.register(&[(0, 1)]).unwrap(),
        UnwindFallbacks::default()
    );
    let fallbacks = arena.register(&[(LEN, 2)]).unwrap();
    assert_eq!(
        fallbacks,
        UnwindFallbacks {
            header_only: 0,
            rewritten: 1
        }
    );
    let loads = arena.check();
    let order: Vec<(&str, bool)> = (loads.iter())
        .map(|l| (l.name.as_str(), l.mapped > 0))
        .collect();
    assert_eq!(
        order,
        [
            ("packed::f1", true),
            ("packed::f1", false),
            ("packed::f2", true)
        ]
    );
    // The copy is f1's bytes as they run, then a build-id marker (perf
    // would otherwise merge the two objects).
    assert_eq!(
        loads[1].code_size,
        (LEN + perfsupport::jitdump::MARKER_LEN) as u64
    );
}

#[test]
fn code_placed_before_a_live_region_gets_no_fde() {
    let mut arena = Arena::new();
    arena.register(&[(64, 2)]).unwrap();
    let fallbacks = arena.register(&[(64 - LEN, 1)]).unwrap();
    assert_eq!(
        fallbacks,
        UnwindFallbacks {
            header_only: 1,
            rewritten: 0
        }
    );
    arena.check();
}

#[test]
fn dead_code_needs_no_rewrite_and_replaced_code_is_forgotten() {
    let mut arena = Arena::new();
    arena.register(&[(0, 1)]).unwrap();
    arena.retire(0);
    assert_eq!(
        arena.register(&[(LEN, 2)]).unwrap(),
        UnwindFallbacks::default()
    );
    // New code over the bytes of live code replaces it, without a retire.
    arena.register(&[(256, 3)]).unwrap();
    assert_eq!(
        arena.register(&[(256, 4)]).unwrap(),
        UnwindFallbacks::default()
    );
    arena.check();
}

#[test]
fn a_marker_over_a_live_neighbour_writes_the_neighbour_again_after_it() {
    let mut arena = Arena::new();
    // f5 is dumped once at 512; the same bytes again right before a live
    // f6 get a marker, which covers f6's first bytes.
    arena.register(&[(512, 5)]).unwrap();
    arena.register(&[(128 + LEN, 6)]).unwrap();
    let fallbacks = arena.register(&[(128, 5)]).unwrap();
    assert_eq!(
        fallbacks,
        UnwindFallbacks {
            header_only: 1,
            rewritten: 1
        }
    );
    let loads = arena.check();
    let last: Vec<&str> = loads
        .iter()
        .rev()
        .take(2)
        .map(|l| l.name.as_str())
        .collect();
    assert_eq!(last, ["packed::f6", "packed::f5"]);
}

#[test]
fn any_order_of_packed_registrations_and_deaths_stays_exact() {
    // A deterministic shuffle over 12 slots: register one or two
    // functions at a time, retire some, reuse slots. Functions come from
    // a pool of 5, so the same bytes recur and get build-id markers.
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move |n: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % n
    };
    for _round in 0..50 {
        let mut arena = Arena::new();
        for _step in 0..30 {
            let slot = next(12) as usize;
            let id = next(5) as u32;
            match next(4) {
                0 if arena.live.contains_key(&(slot * LEN)) => arena.retire(slot * LEN),
                1 => {
                    let other = next(12) as usize;
                    if other != slot {
                        let pair = [(other * LEN, next(5) as u32), (slot * LEN, id)];
                        arena.register(&pair).unwrap();
                    }
                }
                _ => {
                    arena.register(&[(slot * LEN, id)]).unwrap();
                }
            }
            arena.check();
        }
    }
}

#[test]
fn overlapping_regions_in_one_batch_are_refused() {
    let code = [0x90u8; 32];
    let dump = JitDump::from_file(tempfile::tempfile().unwrap(), false).unwrap();
    let err = dump
        .register(&[
            CodeRegion::new(&code[..20], "packed::a"),
            CodeRegion::new(&code[16..], "packed::b"),
        ])
        .unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    let message = err.to_string();
    assert!(
        message.contains("\"packed::a\"")
            && message.contains("\"packed::b\"")
            && message.contains("overlap"),
        "{message}"
    );
}

#[test]
fn repeated_bytes_in_one_batch_need_no_rewrite() {
    // f7 again right before a live neighbour of the same batch given
    // first: written by address, the neighbour is loaded after the marker.
    let mut arena = Arena::new();
    arena.register(&[(512, 7)]).unwrap();
    let fallbacks = arena.register(&[(LEN, 8), (0, 7)]).unwrap();
    assert_eq!(fallbacks.rewritten, 0, "{fallbacks:?}");
    arena.check();
}

#[test]
fn tiny_identical_regions_packed_top_down_stay_bounded() {
    // One-byte `ret` stubs, all alike, each registered right below the
    // one before: every stub's marker covers the next eight. The work per
    // registration is bounded, whatever the run's length.
    let bytes = vec![0xc3u8; 4096];
    let file = tempfile::NamedTempFile::new().unwrap();
    let dump = JitDump::from_file(file.reopen().unwrap(), false).unwrap();
    let name = "packed::stub".to_string();
    let mut most = 0;
    for offset in (0..2048).rev() {
        let region = CodeRegion::new(&bytes[offset..offset + 1], &name);
        let mut fallbacks = UnwindFallbacks::default();
        dump.register_reporting(&[region], &mut fallbacks).unwrap();
        most = most.max(fallbacks.rewritten);
    }
    assert!(most <= 16, "{most} regions written again for one");
    dump.finish().unwrap();
}

#[test]
fn a_dump_that_cannot_be_read_back_keeps_writing() {
    // A write-only file: packed code registered one per call cannot write
    // the earlier region again, and the dump goes on without it.
    let file = tempfile::NamedTempFile::new().unwrap();
    let write_only = std::fs::OpenOptions::new()
        .write(true)
        .open(file.path())
        .unwrap();
    let dump = JitDump::from_file(write_only, false).unwrap();
    let mut bytes = [0u8; 2 * LEN];
    bytes[..LEN].copy_from_slice(&function(1));
    bytes[LEN..].copy_from_slice(&function(2));
    let unwind = CallFrameInfo::x86_64_frame_pointer(LEN as u32).unwrap();
    for (range, name) in [(0..LEN, "packed::f1"), (LEN..2 * LEN, "packed::f2")] {
        let region = CodeRegion::new(&bytes[range], name).with_unwind(unwind.unwind_info());
        let mut fallbacks = UnwindFallbacks::default();
        dump.register_reporting(&[region], &mut fallbacks).unwrap();
        assert_eq!(fallbacks, UnwindFallbacks::default());
    }
    dump.finish().unwrap();
    let names: Vec<String> = loads(file.path()).into_iter().map(|l| l.name).collect();
    assert_eq!(names, ["packed::f1", "packed::f2"]);
}
