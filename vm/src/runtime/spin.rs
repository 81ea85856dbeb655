//! Busy work of a known length, for `toyvm run --slow-line` (the slowdown
//! experiment that checks a profile: add known work at one line, see
//! whether the profile moves as predicted).
//!
//! The work is a count-down loop whose only dependency is one subtraction
//! per iteration, so it runs at about one iteration per cycle, touches no
//! memory and needs nothing a profiler could attribute elsewhere. The
//! interpreter runs [`spin`] inside the handler of [`Op::Spin`]
//! (`interp::handlers`); the JIT emits the same loop as machine code at the
//! line's own addresses (`jit::translate`), so the time lands on the line
//! in every tier. [`iterations_per_ns`] measures the loop once, on this
//! machine, to turn the nanoseconds asked for into iterations.
//!
//! [`Op::Spin`]: crate::bytecode::Op::Spin

#[cfg(doc)]
use crate::bytecode::SPIN_MULTIPLICATIONS;

/// Runs `rounds` rounds of the busy loop (none for 0).
///
/// A round is [`SPIN_MULTIPLICATIONS`] (four) dependent multiplications
/// and a count-down branch:
/// its time is the multiplications' latency (about 12 cycles), which no
/// front end, loop alignment or branch predictor changes, so the
/// interpreter's copy here and the JIT's copy in machine code (at its own
/// alignment) run at the same speed and one calibration
/// ([`iterations_per_ns`]) fits both. (A one-instruction count-down loop
/// ran twice as slow in JIT code as here, on AMD Zen: its speed was the
/// front end's, which depends on where the loop lands.)
#[inline(always)]
pub fn spin(rounds: u64) {
    if rounds == 0 {
        return;
    }
    // In assembly, so that it is the loop the JIT emits for `Op::Spin`
    // (`jit::translate`), whatever the Rust optimizer would make of it.
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: the loop counts a register it owns down to zero (it
        // starts above zero) and multiplies another; it reads and writes
        // no memory and no stack.
        unsafe {
            std::arch::asm!(
                "2:",
                "imul {x}, {x}",
                "imul {x}, {x}",
                "imul {x}, {x}",
                "imul {x}, {x}",
                "add {n}, -1",
                "test {n}, {n}",
                "jne 2b",
                n = inout(reg) rounds => _,
                x = inout(reg) 3u64 => _,
                options(nomem, nostack),
            );
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        // SAFETY: as on x86-64.
        unsafe {
            std::arch::asm!(
                "2:",
                "mul {x}, {x}, {x}",
                "mul {x}, {x}, {x}",
                "mul {x}, {x}, {x}",
                "mul {x}, {x}, {x}",
                "sub {n}, {n}, #1",
                "cbnz {n}, 2b",
                n = inout(reg) rounds => _,
                x = inout(reg) 3u64 => _,
                options(nomem, nostack),
            );
        }
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        let (mut n, mut x) = (rounds, 3u64);
        while n != 0 {
            for _ in 0..crate::bytecode::SPIN_MULTIPLICATIONS {
                x = std::hint::black_box(x.wrapping_mul(x));
            }
            n -= 1;
        }
    }
}

/// How many rounds of [`spin`] this thread runs per nanosecond of its
/// own CPU time: the best of ten short runs (about 0.2 ms each), so a
/// preemption or a cold cache cannot make the loop look slower than it is
/// (the rate then varies by about 2% from process to process).
/// About 2.5 ms in all: time the slowdown experiment adds outside the
/// slowed lines, so it is kept small against any run worth profiling (it
/// was 10 ms, 1.4 points of a 0.7 s run's share predictions).
pub fn iterations_per_ns() -> f64 {
    const ROUND: u64 = 50_000;
    spin(ROUND * 2); // warm up: frequency, caches
    let best_ns = (0..10)
        .map(|_| {
            let start = thread_cpu_ns();
            spin(ROUND);
            thread_cpu_ns().saturating_sub(start).max(1)
        })
        .min()
        .unwrap_or(1);
    ROUND as f64 / best_ns as f64
}

/// The calling thread's CPU time in nanoseconds.
fn thread_cpu_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes only the timespec we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    (now.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(now.tv_nsec as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spin_takes_time_in_proportion_to_its_count() {
        let rate = iterations_per_ns();
        // Any machine this runs on does between 0.005 and 2 rounds per
        // nanosecond (qemu's emulation is the slow end).
        assert!((0.005..2.0).contains(&rate), "{rate} rounds/ns");
        let time = |n| {
            let start = thread_cpu_ns();
            spin(n);
            thread_cpu_ns() - start
        };
        let short = (0..5).map(|_| time(125_000)).min().unwrap();
        let long = (0..5).map(|_| time(1_000_000)).min().unwrap();
        let ratio = long as f64 / short as f64;
        assert!(
            (4.0..16.0).contains(&ratio),
            "8x the rounds took {ratio}x the time"
        );
    }
}
