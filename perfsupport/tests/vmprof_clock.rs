//! vmprof's sampling clock (`perfsupport::vmprof::clock`): with per-thread
//! CPU clocks every busy thread gets one signal per interval of its own CPU
//! time, at 1,000 µs and at 100 µs (not the kernel's 250 Hz tick), each
//! signal is one record, and a thread that joins after the profile started
//! is sampled too.
//!
//! One profile per process at a time: the scenarios run in order, in one
//! test.

mod vmprof_support;

use std::path::Path;
use std::time::Duration;

use perfsupport::vmprof::{
    self, Clock, EnableOptions, META_CLOCK, META_RECORDS, META_SIGNALS, read_profile,
};
use vmprof_support::thread_cpu_time as thread_cpu;

/// Burns `cpu` of this thread's CPU time in user space, inside code
/// object `id`; returns the CPU time it took.
fn busy(id: vmprof::CodeId, cpu: Duration) -> Duration {
    let _running = vmprof::vmprof_execute_code(id);
    let start = thread_cpu();
    let mut x = 1u64;
    // The clock counts user-space time only (`exclude_kernel`): read the
    // thread's CPU time (a system call) rarely.
    while thread_cpu() - start < cpu {
        for _ in 0..1_000_000 {
            x = std::hint::black_box(x.wrapping_mul(3).wrapping_add(1));
        }
    }
    thread_cpu() - start
}

/// Profiles the enabling thread for 1 s of CPU and a thread that joins
/// after the start for 0.5 s, every `interval`; checks the rates.
fn profile_two_threads(dir: &Path, interval: Duration) {
    let path = dir.join(format!("clock-{}us.prof", interval.as_micros()));
    let class = vmprof::register_code_object_class("clk").unwrap();
    let main_code = vmprof::register_code(&vmprof::CodeIdCell::new(), &class, "main", 1, "c.py");
    let late_code = vmprof::register_code(&vmprof::CodeIdCell::new(), &class, "late", 2, "c.py");
    let mut options = EnableOptions::new("clocktest");
    options.interval = interval;
    vmprof::enable_path(&path, &options).expect("enable");
    let late = std::thread::spawn(move || {
        vmprof::join_current_thread();
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() } as u64;
        let cpu = busy(late_code, Duration::from_millis(500));
        vmprof::leave_current_thread();
        (tid, cpu)
    });
    // SAFETY: as above.
    let main_tid = unsafe { libc::gettid() } as u64;
    let main_cpu = busy(main_code, Duration::from_millis(1000));
    let (late_tid, late_cpu) = late.join().unwrap();
    let summary = vmprof::disable().expect("disable");
    let profile = read_profile(&path).expect("readable");
    let clock = profile.meta_value(META_CLOCK).unwrap_or("none");
    if clock != Clock::ThreadCpu.name() {
        let why = format!("clock is {clock}: this machine refuses perf_event_open");
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("{why}");
        }
        eprintln!("vmprof_clock: SKIPPED: {why}");
        return;
    }
    let signals: u64 = profile.meta_value(META_SIGNALS).unwrap().parse().unwrap();
    let records: u64 = profile.meta_value(META_RECORDS).unwrap().parse().unwrap();
    // One record per signal: none repeated for weight. A signal can still
    // lose its sample when another thread's handler holds the ring (the
    // two threads here are signalled independently); those are counted.
    assert!(
        records <= signals,
        "{records} records for {signals} signals"
    );
    assert_eq!(
        signals - records,
        summary.dropped_busy + summary.dropped_full
    );
    assert!(signals - records <= signals / 100, "{summary:?}");
    assert_eq!(records, summary.samples);
    let per_interval = |cpu: Duration| cpu.as_nanos() as f64 / interval.as_nanos() as f64;
    for (name, tid, code, cpu) in [
        ("enabling thread", main_tid, main_code, main_cpu),
        ("thread that joined later", late_tid, late_code, late_cpu),
    ] {
        let taken = (profile.samples.iter())
            .filter(|s| s.thread == tid && s.stack.last() == Some(&(code.get() as u64)))
            .count() as f64;
        let expected = per_interval(cpu);
        eprintln!(
            "{interval:?}: {name}: {taken} samples over {cpu:?} of CPU, {expected:.0} intervals"
        );
        assert!(
            (0.9 * expected..=1.1 * expected).contains(&taken),
            "{interval:?}: {name}: {taken} samples for {expected:.0} intervals of its CPU time"
        );
    }
}

#[test]
fn every_busy_thread_gets_one_sample_per_interval_of_its_cpu_time() {
    let dir = tempfile::tempdir().unwrap();
    for interval in [Duration::from_micros(1000), Duration::from_micros(100)] {
        profile_two_threads(dir.path(), interval);
    }
}
