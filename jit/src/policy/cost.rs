//! The cost model of the default tiering: how many events (calls plus
//! back-edges) a function must have run before compiling it pays.
//!
//! A compile costs time now; it gains a little on every later event. The
//! JIT cannot know the future, so it assumes what most tiering JITs assume:
//! a function that has run `n` events will run about `n` more. Compiling
//! at event `n` then pays when `n × gain per event ≥ compile time`, so the
//! threshold is the compile time divided by the gain per event:
//!
//! * **Compile time** is estimated from the size the compile budget
//!   measures ([`limits::compiled_ops`]: own instructions, block ends
//!   weighted, inlined leaves): [`COMPILE_US_FIXED`] plus
//!   [`COMPILE_NS_PER_OP`] per unit, fitted to `--jit-stats` on the
//!   large-program benchmarks (`bench/large/`): a 27-unit function with
//!   a loop compiles in 110-170 µs, a 14-unit leaf in about 60 µs plus
//!   40 µs for its entry shim.
//! * **Gain per event** is the work one event stands for
//!   ([`ops_per_event`]: the mean bytecode instructions of the innermost
//!   loop bodies, whose back-edges are most of a looping function's
//!   events, or the whole function for one without loops) times
//!   [`GAIN_PS_PER_OP`], what compiling saves per instruction run.
//!
//! Both grow with the code, so what decides is the code per event:
//! `warm`'s 5-instruction loop in a 27-unit function waits about 16,500
//! events (it runs 6,000: it stays interpreted and costs nothing);
//! `nbody`'s `advance`, four times the size, with innermost loops of 38
//! instructions on average, waits about 6,700, where a single gain of
//! 12.5 ns for every event, as this model first had, made it wait 30,600
//! and interpret for milliseconds of a 20 ms run. An explicit
//! `--jit-threshold N` is taken literally (tests rely on exact tier-up
//! points).

use vm::bytecode::{Function, Module};

use crate::translate::limits;

/// Fixed part of a compile, in microseconds: IR building, finalizing,
/// publishing (see the module docs).
pub const COMPILE_US_FIXED: u64 = 30;

/// Compile time per unit of [`limits::compiled_ops`], in nanoseconds.
pub const COMPILE_NS_PER_OP: u64 = 3500;

/// What compiled code saves per bytecode instruction run, in picoseconds:
/// the interpreter runs the six benchmarks at about 2 ns an instruction,
/// compiled code at a few tenths (`bench/RESULTS.md`, engines table).
pub const GAIN_PS_PER_OP: u64 = 1500;

/// What an interpreted call costs beyond its instructions (frame push and
/// return), counted as this many instructions for a function without loops.
pub const CALL_OPS: u64 = 4;

/// The largest threshold: the estimate would make a function that is
/// expensive to compile wait far too long if its loop is hot.
pub const MAX_THRESHOLD: u32 = 100_000;

/// Estimated compile time of `func` in microseconds.
pub fn compile_us(module: &Module, func: u32) -> u64 {
    let ops = limits::compiled_ops(module, func) as u64;
    COMPILE_US_FIXED + ops * COMPILE_NS_PER_OP / 1000
}

/// The bytecode instructions one event of `f` stands for: the mean length
/// of its innermost loop bodies (from a back-edge's target to the
/// back-edge, containing no other back-edge), whose back-edges are most of
/// a looping function's events; or, without loops, its code plus
/// [`CALL_OPS`] (a call runs it once, or less of it).
pub fn ops_per_event(f: &Function) -> u64 {
    let loops: Vec<(usize, usize)> = vm::bytecode::back_edges(&f.code)
        .map(|(from, target)| (target, from))
        .collect();
    let innermost: Vec<u64> = (loops.iter())
        .filter(|&&(start, end)| {
            !(loops.iter()).any(|&(s, e)| (s, e) != (start, end) && start <= s && e <= end)
        })
        .map(|&(start, end)| (end - start + 1) as u64)
        .collect();
    match innermost.len() as u64 {
        0 => f.code.len() as u64 + CALL_OPS,
        n => innermost.iter().sum::<u64>() / n,
    }
}

/// What compiling `func` gains per event, in picoseconds.
fn gain_ps(module: &Module, func: u32) -> u64 {
    ops_per_event(&module.functions[func as usize]) * GAIN_PS_PER_OP
}

/// The threshold of `func`: the events after which its compile pays,
/// at least `base` (the default `--jit-threshold`) and at most
/// [`MAX_THRESHOLD`]; `base` for a function over the compile budget,
/// which is then refused at its first ask, as with a literal threshold.
// ANCHOR: gain
pub fn threshold(module: &Module, func: u32, base: u32) -> u32 {
    // Over the compile budget: refused (and said so) at `base`, as before.
    if limits::compiled_ops(module, func) > limits::max_compiled_ops() {
        return base;
    }
    let events = compile_us(module, func) * 1_000_000 / gain_ps(module, func);
    (events.min(MAX_THRESHOLD as u64) as u32).max(base)
}
// ANCHOR_END: gain

/// How many activations of `func` that start interpreted and enter its
/// OSR variant after about `events` events (the tiering's re-ask
/// countdown) it takes before compiling `func` whole pays: each such start
/// loses `events` × its gain per event. At least 1, at most
/// [`MAX_THRESHOLD`]. A function whose calls each run one long loop (most
/// of the work in compiled code already) is then never compiled twice; one
/// called a million times is, early.
pub fn whole_after_asks(module: &Module, func: u32, events: u32) -> u32 {
    let asks =
        compile_us(module, func) * 1_000_000 / (gain_ps(module, func) * events.max(1) as u64);
    asks.clamp(1, MAX_THRESHOLD as u64) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn module(src: &str) -> Module {
        vm::driver::load("t.toy", src.as_bytes()).expect("compiles")
    }

    fn find(m: &Module, name: &str) -> u32 {
        m.functions.iter().position(|f| f.name == name).unwrap() as u32
    }

    #[test]
    fn a_loop_event_is_its_body_and_a_call_the_whole_function() {
        let m = module(
            "fn leaf(x: int) -> int { return x * 3 + 1; }\n\
             fn nested(n: int) -> int { let s = 0; for i in 0..n { s = s + i; for j in 0..n { s = (s + j) % 7; } } return s; }\n\
             print(leaf(1) + nested(2));\n",
        );
        let leaf = &m.functions[find(&m, "leaf") as usize];
        assert_eq!(ops_per_event(leaf), leaf.code.len() as u64 + CALL_OPS);
        // The inner loop (`s = (s + j) % 7` and its ForLoop) is shorter
        // than the outer one, which contains it.
        let nested = ops_per_event(&m.functions[find(&m, "nested") as usize]);
        assert!((2..=4).contains(&nested), "{nested}");
    }

    #[test]
    fn bigger_loop_bodies_wait_less_within_bounds() {
        let m = module(
            "fn small(a: int) -> int { let s = 0; for i in 0..a { s = (s + i * a) % 1003; } return s; }\n\
             fn big(a: int) -> float { let s = 0.0; let x = 1.5; for i in 0..a { s = s + x * x - x / 3.0 + x * s / 7.0 - s * 0.5 + x; } return s; }\n\
             print(small(2)); print(big(2));\n",
        );
        let (small, big) = (find(&m, "small"), find(&m, "big"));
        let t_small = threshold(&m, small, 1000);
        let t_big = threshold(&m, big, 1000);
        assert!(t_small > t_big, "{t_small} vs {t_big}");
        assert!(
            t_big >= 1000 && t_small <= MAX_THRESHOLD,
            "{t_big} {t_small}"
        );
        // The base is a floor.
        assert_eq!(threshold(&m, small, MAX_THRESHOLD + 5), MAX_THRESHOLD + 5);
        // Re-asks of a function with an OSR variant: fewer for the bigger
        // gain, fewer for a longer interpreted start.
        let (w_small, w_big) = (
            whole_after_asks(&m, small, 50),
            whole_after_asks(&m, big, 50),
        );
        assert!(w_small > w_big && w_big >= 1, "{w_small} vs {w_big}");
        assert!(whole_after_asks(&m, small, 500) < w_small);
    }
}
