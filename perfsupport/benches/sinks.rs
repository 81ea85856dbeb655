//! Cost of describing one region to each sink.
//!
//! Every sample writes to a fresh unlinked temporary file (`tempfile()`), so
//! the numbers include the real `write(2)` to the page cache while the disk
//! use stays bounded.
//!
//! Targets: perf map entry < 1 µs, jitdump region with unwind + line info < 5 µs.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
#[path = "../tests/common/mod.rs"]
mod common;

use gimli::X86_64;
use gimli::write::{CallFrameInstruction, FrameDescriptionEntry};
use perfsupport::jitdump::PerfUnwindData;
use perfsupport::unwind::REGION_START;
use perfsupport::unwind::x86_64::system_v_cie;
use perfsupport::{CodeRegion, JitDump, LineEntry, PerfMap, ProfilerSink, UnwindInfo};
use std::hint::black_box;
use std::time::{Duration, Instant};

/// A typical small compiled function: 108 bytes (Cranelift's fib).
const CODE_SIZE: usize = 108;

/// Cranelift's unwind info for fib (measured): the rbp frame plus two
/// callee-saved registers.
fn fde() -> FrameDescriptionEntry {
    let mut fde = FrameDescriptionEntry::new(REGION_START, CODE_SIZE as u32);
    fde.add_instruction(1, CallFrameInstruction::CfaOffset(16));
    fde.add_instruction(1, CallFrameInstruction::Offset(X86_64::RBP, -16));
    fde.add_instruction(4, CallFrameInstruction::CfaRegister(X86_64::RBP));
    fde.add_instruction(12, CallFrameInstruction::Offset(X86_64::R12, -32));
    fde.add_instruction(17, CallFrameInstruction::Offset(X86_64::R13, -24));
    fde
}

fn lines() -> Vec<LineEntry<'static>> {
    (0..8)
        .map(|i| LineEntry {
            offset: i * 13,
            file: "examples/scripts/fib.toy",
            line: 3 + i,
            column: 5,
        })
        .collect()
}

fn perf_map_entry(c: &mut Criterion) {
    let code = vec![0x90u8; CODE_SIZE];
    c.bench_function("perf map: one entry per register call", |b| {
        b.iter_custom(|iters| {
            let map = PerfMap::from_file(tempfile::tempfile().expect("tempfile"));
            let region = CodeRegion::new(&code, "toy::fibonacci");
            let started = Instant::now();
            for _ in 0..iters {
                map.register(black_box(&[region])).expect("register");
            }
            started.elapsed()
        })
    });
}

/// Regions per batch in the batched benchmarks (one JIT finalize of a module).
const BATCH: usize = 64;

fn batched(c: &mut Criterion) {
    let code = vec![0x90u8; CODE_SIZE * BATCH];
    let names: Vec<String> = (0..BATCH).map(|i| format!("toy::function_{i}")).collect();
    let (cie, fde, lines) = (system_v_cie(), fde(), lines());
    let plain: Vec<CodeRegion> = (0..BATCH)
        .map(|i| {
            let bytes = &code[i * CODE_SIZE..(i + 1) * CODE_SIZE];
            CodeRegion::new(bytes, &names[i])
        })
        .collect();
    let full: Vec<CodeRegion> = plain
        .iter()
        .map(|r| {
            r.with_unwind(UnwindInfo {
                cie: &cie,
                fde: &fde,
            })
            .with_lines(&lines)
        })
        .collect();
    let mut group = c.benchmark_group("batch of 64 regions");
    group.throughput(Throughput::Elements(BATCH as u64));
    group.bench_function("perf map", |b| {
        b.iter_custom(|iters| {
            let map = PerfMap::from_file(tempfile::tempfile().expect("tempfile"));
            let started = Instant::now();
            for _ in 0..iters {
                map.register(black_box(&plain)).expect("register");
            }
            started.elapsed()
        })
    });
    group.bench_function("jitdump with unwind + 8 line rows", |b| {
        b.iter_custom(|iters| {
            let dump =
                JitDump::from_file(tempfile::tempfile().expect("tempfile"), false).expect("dump");
            let started = Instant::now();
            for _ in 0..iters {
                dump.register(black_box(&full)).expect("register");
            }
            started.elapsed()
        })
    });
    group.finish();
}

fn jitdump_region(c: &mut Criterion) {
    let code = vec![0x90u8; CODE_SIZE];
    let (cie, fde, lines) = (system_v_cie(), fde(), lines());
    c.bench_function("jitdump: one region with unwind + 8 line rows", |b| {
        b.iter_custom(|iters| {
            let dump =
                JitDump::from_file(tempfile::tempfile().expect("tempfile"), false).expect("dump");
            let region = CodeRegion::new(&code, "toy::fibonacci")
                .with_unwind(UnwindInfo {
                    cie: &cie,
                    fde: &fde,
                })
                .with_lines(&lines);
            let started = Instant::now();
            for _ in 0..iters {
                dump.register(black_box(&[region])).expect("register");
            }
            started.elapsed()
        })
    });
    c.bench_function("unwind: perf payload only (eh_frame + hdr)", |b| {
        let region = CodeRegion::new(&code, "toy::fibonacci").with_unwind(UnwindInfo {
            cie: &cie,
            fde: &fde,
        });
        b.iter(|| PerfUnwindData::for_region(black_box(&region)).expect("build"))
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = perf_map_entry, jitdump_region, batched
}
criterion_main!(benches);
