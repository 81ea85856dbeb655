//! The code limit never makes a run worse than no JIT: a program from the
//! generator of `tests/code_limit_stress.rs` (many functions, recursion,
//! loops, calls of many shapes), shaped by the input, runs under a code
//! limit the input picks (one page to 64 KiB), with compiles on the
//! interpreter's thread or the compiler thread, and
//!
//! * prints what the interpreter prints (stdout, stderr, exit status);
//! * takes at most 1.5 times the interpreter's time plus 0.5 s;
//! * compiles at most 3 batches that find no room per function and kind
//!   between two evictions that free bytes (`--jit-stats`' counts).
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::time::Instant;

#[path = "run.rs"]
mod run;
use run::run;

// The test's seeded generator is not used here (the bytes choose).
#[allow(dead_code)]
#[path = "../../tests/stress/program.rs"]
mod program;

/// Choices read from the fuzzer's bytes (zeros when they run out).
struct Bytes<'a>(&'a [u8]);

impl program::Choices for Bytes<'_> {
    fn next(&mut self, n: u32) -> u32 {
        let Some((&b, rest)) = self.0.split_first() else {
            return 0;
        };
        self.0 = rest;
        u32::from(b) % n
    }
}

const LIMITS: [usize; 5] = [4 << 10, 8 << 10, 12 << 10, 16 << 10, 64 << 10];

fuzz_target!(|data: &[u8]| {
    let Some((&shape, rest)) = data.split_first() else {
        return;
    };
    let functions = 1 + u32::from(shape % 8);
    let limit = LIMITS[usize::from(shape / 8) % LIMITS.len()];
    let background = shape >= 128;
    let source = program::program(&mut Bytes(rest), functions, 3, 20);
    let module = vm::driver::load("limit.toy", source.as_bytes()).expect("generated programs compile");
    let started = Instant::now();
    let interpreted = run(&module, None);
    let interpreted_time = started.elapsed().as_secs_f64();
    let options = jit::JitOptions {
        threshold: Some(2),
        background,
        stats: true,
        code_limit: Some(limit),
        ..jit::JitOptions::default()
    };
    let started = Instant::now();
    let (status, out, err) = run(&module, Some(options));
    let took = started.elapsed().as_secs_f64();
    let err = String::from_utf8_lossy(&err);
    assert_eq!(status, interpreted.0, "status under {limit} bytes:\n{source}\n{err}");
    assert!(out == interpreted.1, "output under {limit} bytes differs:\n{source}");
    assert!(
        took <= 1.5 * interpreted_time + 0.5,
        "{took:.2} s under {limit} bytes, {interpreted_time:.2} s interpreted:\n{source}"
    );
    let (no_room, frees) = program::no_room_counts(&err).expect("the code cache line");
    let most = 3 * 3 * (u64::from(functions) + 1) * (frees + 1);
    assert!(no_room <= most, "{no_room} compiles found no room (at most {most}):\n{source}");
});
