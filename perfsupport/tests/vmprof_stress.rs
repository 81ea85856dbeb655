//! Signal-safety stress: SIGPROF at a high rate, from the timer and from a
//! thread that sends it with `pthread_kill`, while the profiled thread
//! pushes and pops millions of frames, some past the shadow stack's
//! capacity. No crash, no lost balance, and every recorded stack is a
//! prefix of a stack that really existed.

mod vmprof_support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use perfsupport::vmprof::{
    CodeId, CodeIdCell, EnableOptions, SHADOW_STACK_CAPACITY, ShadowStack, disable, enable_path,
    read_profile, register_code,
};
use vmprof_support::*;

/// How deep the worker goes: past the capacity, to test overflow.
const MAX_DEPTH: usize = SHADOW_STACK_CAPACITY + 200;

/// One id per depth, so the only valid stacks are prefixes of `ids`.
fn depth_ids() -> Vec<CodeId> {
    let class = toy_class();
    (0..MAX_DEPTH)
        .map(|depth| {
            // Leaked cells: code objects that live as long as the process.
            let cell: &'static CodeIdCell = Box::leak(Box::new(CodeIdCell::new()));
            register_code(
                cell,
                &class,
                &format!("level{depth}"),
                depth as u32,
                "stress.toy",
            )
        })
        .collect()
}

#[test]
fn high_rate_signals_during_millions_of_pushes_record_only_valid_prefixes() {
    let _serial = serial();
    let ids = depth_ids();
    let path = fresh_path("stress.prof");
    let mut options = EnableOptions::new("toyvm");
    options.interval = Duration::from_micros(100); // 10 kHz
    enable_path(&path, &options).expect("enable");

    let (tid_tx, tid_rx) = mpsc::channel();
    let stop = Arc::new(AtomicBool::new(false));
    let worker_ids = ids.clone();
    let worker = std::thread::spawn(move || {
        // SAFETY: pthread_self has no preconditions.
        tid_tx.send(unsafe { libc::pthread_self() }).unwrap();
        // It runs VM code: its own CPU clock samples it (the killer's
        // signals only interrupt it).
        perfsupport::vmprof::join_current_thread();
        let mut operations = 0u64;
        let mut rng = 0x9E37_79B9_7F4A_7C15u64;
        // Millions of operations, and long enough for many signals even in
        // a release build.
        let start = std::time::Instant::now();
        let long_enough = Duration::from_millis(300);
        ShadowStack::with_current(|stack| {
            let mut depth = 0usize;
            while operations < 6_000_000 || start.elapsed() < long_enough {
                xorshift64(&mut rng);
                // Random walk, biased to dive deep now and then.
                let up = if (rng >> 40).is_multiple_of(1000) {
                    MAX_DEPTH
                } else {
                    1 + (rng % 3) as usize
                };
                for _ in 0..up {
                    if depth == MAX_DEPTH {
                        break;
                    }
                    stack.push(worker_ids[depth]);
                    depth += 1;
                    operations += 1;
                }
                let down = 1 + ((rng >> 8) % 3) as usize;
                for _ in 0..down.min(depth) {
                    stack.pop();
                    depth -= 1;
                    operations += 1;
                }
            }
            while depth > 0 {
                stack.pop();
                depth -= 1;
            }
            assert_eq!(stack.depth(), 0);
        });
        perfsupport::vmprof::leave_current_thread();
        operations
    });
    let worker_thread = tid_rx.recv().unwrap();
    let killer_stop = Arc::clone(&stop);
    let killer = std::thread::spawn(move || {
        let mut sent = 0u64;
        while !killer_stop.load(Ordering::Relaxed) {
            // SAFETY: the worker thread is alive until `stop` is set (the
            // main thread sets it only after joining the worker).
            if unsafe { libc::pthread_kill(worker_thread, libc::SIGPROF) } != 0 {
                break;
            }
            sent += 1;
            std::thread::sleep(Duration::from_micros(20));
        }
        sent
    });
    let operations = worker.join().expect("worker survived");
    stop.store(true, Ordering::Relaxed);
    let sent = killer.join().unwrap();
    let summary = disable().expect("disable");

    let profile = read_profile(&path).expect("readable");
    let valid: Vec<u64> = ids.iter().map(|id| id.get() as u64).collect();
    for sample in &profile.samples {
        let n = sample.stack.len();
        assert!((1..=SHADOW_STACK_CAPACITY).contains(&n), "depth {n}");
        assert_eq!(sample.stack, valid[..n], "not a prefix of a real stack");
    }
    eprintln!(
        "{operations} push/pop, {sent} signals sent, {} samples from {} signals: {summary:?}",
        summary.samples, summary.signals
    );
    assert!(operations >= 6_000_000);
    assert!(summary.samples > 20, "too few samples: {summary:?}");
    std::fs::remove_file(&path).unwrap();
}
