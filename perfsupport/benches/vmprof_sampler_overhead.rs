//! CPU overhead of the sampler at 1 kHz on a CPU-bound loop.
//!
//! Criterion times a fixed amount of work (in process CPU time, so the
//! writer thread's work counts) with and without the sampler; afterwards a
//! direct comparison alternates 2-second runs of each and prints the
//! overhead in percent.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group};
use perfsupport::vmprof::{
    CodeId, CodeIdCell, DEFAULT_INTERVAL, EnableOptions, disable, enable_with, register_code,
    register_code_object_class, vmprof_execute_code,
};

/// Process CPU time.
fn cpu_time() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid out-parameter.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut now) };
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

/// Ten nested frames, as a small interpreter would have.
fn frame_ids() -> Vec<CodeId> {
    let class = register_code_object_class("toy").unwrap();
    (0..10)
        .map(|i| {
            let cell: &'static CodeIdCell = Box::leak(Box::new(CodeIdCell::new()));
            register_code(cell, &class, &format!("f{i}"), i, "bench.toy")
        })
        .collect()
}

/// A fixed amount of CPU-bound work under ten frames.
fn work(ids: &[CodeId], rounds: u64) -> u64 {
    let mut guards = Vec::new();
    for &id in ids {
        guards.push(vmprof_execute_code(id));
    }
    let mut x = 1u64;
    for _ in 0..rounds {
        x = black_box(
            x.wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407),
        );
    }
    while let Some(guard) = guards.pop() {
        drop(guard);
    }
    x
}

fn with_sampler<R>(on: bool, f: impl FnOnce() -> R) -> R {
    if !on {
        return f();
    }
    let devnull = std::fs::File::options()
        .write(true)
        .open("/dev/null")
        .unwrap();
    let mut options = EnableOptions::new("bench");
    options.interval = DEFAULT_INTERVAL;
    enable_with(devnull, &options).unwrap();
    let result = f();
    disable().unwrap();
    result
}

/// Rounds of `work` that take about `target` of CPU.
fn calibrate(ids: &[CodeId], target: Duration) -> u64 {
    let rounds = 10_000_000;
    let start = cpu_time();
    work(ids, rounds);
    let took = (cpu_time() - start).as_secs_f64();
    ((rounds as f64) * target.as_secs_f64() / took) as u64
}

fn sampler_overhead(c: &mut Criterion) {
    let ids = frame_ids();
    let rounds = calibrate(&ids, Duration::from_millis(200));
    let mut group = c.benchmark_group("vmprof_sampler_1khz");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(4));
    for on in [false, true] {
        let name = if on {
            "cpu_bound_200ms_sampler_on"
        } else {
            "cpu_bound_200ms_sampler_off"
        };
        group.bench_function(name, |b| {
            b.iter_custom(|iterations| {
                with_sampler(on, || {
                    let start = cpu_time();
                    for _ in 0..iterations {
                        black_box(work(&ids, rounds));
                    }
                    cpu_time() - start
                })
            })
        });
    }
    group.finish();
}

/// Five alternating pairs of 2 s runs without and with the sampler;
/// prints the median overhead.
fn direct_comparison() {
    let ids = frame_ids();
    let rounds = calibrate(&ids, Duration::from_secs(2));
    let mut overheads = Vec::new();
    for _ in 0..5 {
        let mut cpu = [0.0; 2];
        for (slot, on) in [false, true].into_iter().enumerate() {
            cpu[slot] = with_sampler(on, || {
                let start = cpu_time();
                black_box(work(&ids, rounds));
                (cpu_time() - start).as_secs_f64()
            });
        }
        overheads.push((cpu[1] - cpu[0]) / cpu[0] * 100.0);
        println!("sampler off {:.3} s CPU, on {:.3} s CPU", cpu[0], cpu[1]);
    }
    overheads.sort_by(f64::total_cmp);
    println!(
        "vmprof sampler overhead at 1 kHz: median {:+.2}% CPU (runs: {:?})",
        overheads[overheads.len() / 2],
        overheads
            .iter()
            .map(|o| format!("{o:+.2}%"))
            .collect::<Vec<_>>()
    );
}

criterion_group!(benches, sampler_overhead);

fn main() {
    benches();
    // `cargo test --benches` runs each bench once in test mode: skip the
    // long direct comparison there.
    if !std::env::args().any(|arg| arg == "--test") {
        direct_comparison();
    }
    criterion::Criterion::default()
        .configure_from_args()
        .final_summary();
}
