//! Shared helpers for the vmprof integration tests: a serialising lock
//! (the sampler is process-wide), a nested synthetic workload, CPU clocks,
//! a deterministic pseudo-random sequence and fresh temporary paths.
#![allow(dead_code)] // each test binary uses a different subset

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use perfsupport::vmprof::{
    CodeClass, CodeId, CodeIdCell, register_code, register_code_object_class, vmprof_execute_code,
};

/// Holds the process-wide profiler for one test at a time.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The `toy` class, registered once.
pub fn toy_class() -> CodeClass {
    register_code_object_class("toy").expect("valid prefix")
}

/// The three code objects of the nested workload.
#[derive(Clone, Copy, Debug)]
pub struct Workload {
    pub outer: CodeId,
    pub middle: CodeId,
    pub inner: CodeId,
}

pub const OUTER_NAME: &str = "toy:<main>:1:examples/scripts/nested.toy";
pub const MIDDLE_NAME: &str = "toy:middle:5:examples/scripts/nested.toy";
pub const INNER_NAME: &str = "toy:inner:9:examples/scripts/nested.toy";

/// Registers (once per process) the outer, middle and inner codes.
pub fn workload() -> Workload {
    static OUTER: CodeIdCell = CodeIdCell::new();
    static MIDDLE: CodeIdCell = CodeIdCell::new();
    static INNER: CodeIdCell = CodeIdCell::new();
    let class = toy_class();
    let file = "examples/scripts/nested.toy";
    Workload {
        outer: register_code(&OUTER, &class, "<main>", 1, file),
        middle: register_code(&MIDDLE, &class, "middle", 5, file),
        inner: register_code(&INNER, &class, "inner", 9, file),
    }
}

/// CPU time used by the calling thread.
pub fn thread_cpu_time() -> Duration {
    clock(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// CPU time used by the whole process.
pub fn process_cpu_time() -> Duration {
    clock(libc::CLOCK_PROCESS_CPUTIME_ID)
}

fn clock(id: libc::clockid_t) -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid out-parameter.
    let rc = unsafe { libc::clock_gettime(id, &mut now) };
    assert_eq!(rc, 0, "clock_gettime");
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

/// Spins until the calling thread has used `cpu` more CPU time.
pub fn burn(cpu: Duration) {
    let end = thread_cpu_time() + cpu;
    let mut x = 1u64;
    // Reading the clock is a system call: done rarely, so that the work is
    // user-space time, which is what per-thread sampling clocks count
    // (`exclude_kernel`, see `perfsupport::vmprof::clock`).
    while thread_cpu_time() < end {
        for _ in 0..20_000 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    }
}

/// Runs outer → (middle → inner)* for about `cpu` of CPU time: a fifth of
/// each round in middle itself, the rest in inner.
///
/// Round lengths vary pseudo-randomly (1 to 3 ms). A fixed period would
/// alias with the sampler: the kernel delivers `ITIMER_PROF` on its tick
/// (every 4 ms at 250 Hz), so a 2 ms round is sampled at nearly the same
/// phase every time and the split comes out as, say, 50/50 instead of 20/80.
pub fn run_nested(w: Workload, cpu: Duration) {
    let end = thread_cpu_time() + cpu;
    let _outer = vmprof_execute_code(w.outer);
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    while thread_cpu_time() < end {
        let round_us = 1000 + xorshift64(&mut state) % 2000;
        let _middle = vmprof_execute_code(w.middle);
        burn(Duration::from_micros(round_us / 5));
        let _inner = vmprof_execute_code(w.inner);
        burn(Duration::from_micros(round_us - round_us / 5));
    }
}

/// Advances `state` by one step of xorshift64 (Marsaglia's 13/7/17 shifts)
/// and returns the new state: a cheap, deterministic sequence, so a run
/// repeats. `state` must not be 0.
pub fn xorshift64(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// A fresh path (nothing there) in Cargo's per-target temporary folder.
pub fn fresh_path(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(&dir).expect("target tmp dir");
    let path = dir.join(format!("{}-{}", std::process::id(), name));
    let _ = std::fs::remove_file(&path);
    path
}

/// The OS id of the calling thread.
pub fn gettid() -> u64 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u64 }
}
