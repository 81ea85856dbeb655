//! A process that runs many JIT-enabled VMs in turn (a program embedding
//! toyvm, the `differential` fuzz target) keeps a bounded number of memory
//! mappings: dropping a JIT withdraws what was registered for its code and
//! unmaps its code memory.
//!
//! Before, every JIT kept its 1 GiB reservation and the mappings its
//! batches split it into, and about 10,000 fuzz inputs in one process ran
//! out of `vm.max_map_count` (see `fuzz/README.md`).

use std::sync::Arc;

use vm::driver::{Options, TierUpFactory, load, run_with};

/// Compiled at a call, by OSR in a loop, recursively, with several
/// batches per run.
const PROGRAM: &str = "fn fib(n: int) -> int { if n < 2 { return n; } return fib(n - 1) + fib(n - 2); }\n\
    fn sum(n: int) -> int { let s = 0; for i in 0..n { s = s + i; } return s; }\n\
    fn twice(s: str) -> str { return s + s; }\n\
    print(fib(12));\nprint(sum(3000));\nfor i in 0..20 { print(twice(str(i))); }\n";

/// Lines of `/proc/self/maps`: one per mapping.
fn mappings() -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .expect("read /proc/self/maps")
        .lines()
        .count()
}

/// Runs `module` with a JIT made from `options`; returns stdout.
fn run(module: &vm::bytecode::Module, options: &jit::JitOptions) -> String {
    let options = options.clone();
    let make = move || jit::tier_up(options.clone());
    let options = Options {
        tier_up: Some(Arc::new(make) as TierUpFactory),
        ..Options::default()
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let status = run_with(module, Vec::new(), &options, &mut out, &mut err);
    assert_eq!(status, 0, "{}", String::from_utf8_lossy(&err));
    assert!(err.is_empty(), "{}", String::from_utf8_lossy(&err));
    String::from_utf8(out).expect("utf-8")
}

#[test]
fn dropped_jits_return_their_mappings() {
    let module = load("many.toy", PROGRAM.as_bytes()).expect("compiles");
    // Every function compiled at start; tiering up at calls and loops
    // (OSR); and with the GDB JIT interface, whose objects point at the
    // code too.
    let tiers = [
        jit::JitOptions {
            threshold: Some(0),
            ..jit::JitOptions::default()
        },
        jit::JitOptions {
            threshold: Some(5),
            ..jit::JitOptions::default()
        },
        jit::JitOptions {
            threshold: Some(5),
            gdb: true,
            ..jit::JitOptions::default()
        },
    ];
    let expected = run(&module, &tiers[0]);
    assert!(expected.starts_with("144\n4498500\n00\n"), "{expected}");
    // Warm up: the allocator's arenas, the driver's thread stacks.
    for options in &tiers {
        assert_eq!(run(&module, options), expected);
    }
    let before = mappings();
    let rounds = 200;
    for _ in 0..rounds {
        for options in &tiers {
            assert_eq!(run(&module, options), expected);
        }
    }
    let after = mappings();
    eprintln!("/proc/self/maps: {before} lines before, {after} after");
    // A JIT that keeps its memory leaves at least its reservation and one
    // executable mapping per batch behind: thousands of lines here.
    assert!(
        after <= before + 32,
        "{} JIT runs grew /proc/self/maps from {before} to {after} lines",
        rounds * tiers.len()
    );
}
