//! The cost model of the default tiering: how many events (calls plus
//! back-edges) a function must have run before compiling it pays.
//!
//! A compile costs time now; it gains a little on every later event. The
//! JIT cannot know the future, so it assumes what most tiering JITs assume:
//! a function that has run `n` events will run about `n` more. Compiling
//! at event `n` then pays when `n × gain per event ≥ compile time`, so the
//! threshold is the compile time divided by the gain per event, and grows
//! with the function's size:
//!
//! * **Compile time** is estimated from the size the compile budget
//!   measures ([`limits::compiled_ops`]: own instructions, block ends
//!   weighted, inlined leaves): [`COMPILE_US_FIXED`] plus
//!   [`COMPILE_NS_PER_OP`] per unit, fitted to `--jit-stats` on the
//!   large-program benchmarks (`bench/large/`): a 27-unit function with
//!   a loop compiles in 110-170 µs, a 14-unit leaf in about 60 µs plus
//!   40 µs for its entry shim.
//! * **Gain per event**: the interpreter runs a small loop iteration or a
//!   small call in about 15 ns (`bench/large/` `warm`: 30 M iterations in
//!   0.45 s), compiled code in 2-3 ns: about 12.5 ns, [`EVENTS_PER_US`]
//!   events per microsecond of compile.
//!
//! A 27-unit function then waits about 10,000 events instead of 1,000: a
//! function that runs 6,000 (the `warm` shape) stays interpreted and costs
//! nothing, one that runs millions (every small benchmark) loses a few
//! tens of microseconds of interpretation. An explicit `--jit-threshold N`
//! is taken literally (tests rely on exact tier-up points).

use vm::bytecode::Module;

use crate::limits;

/// Fixed part of a compile, in microseconds: IR building, finalizing,
/// publishing (see the module docs).
pub const COMPILE_US_FIXED: u64 = 30;

/// Compile time per unit of [`limits::compiled_ops`], in nanoseconds.
pub const COMPILE_NS_PER_OP: u64 = 3500;

/// Events per microsecond of compile time before compiling pays: the
/// inverse of the gain per event (about 12.5 ns).
pub const EVENTS_PER_US: u64 = 80;

/// The largest threshold: a big function with a hot loop gains much more
/// than 12.5 ns per iteration, so its estimate would wait far too long.
pub const MAX_THRESHOLD: u32 = 100_000;

/// Estimated compile time of `func` in microseconds.
pub fn compile_us(module: &Module, func: u32) -> u64 {
    let ops = limits::compiled_ops(module, func) as u64;
    COMPILE_US_FIXED + ops * COMPILE_NS_PER_OP / 1000
}

/// The threshold of `func`: the events after which its compile pays,
/// at least `base` (the default `--jit-threshold`) and at most
/// [`MAX_THRESHOLD`]; `base` for a function over the compile budget,
/// which is then refused at its first ask, as with a literal threshold.
pub fn threshold(module: &Module, func: u32, base: u32) -> u32 {
    // Over the compile budget: refused (and said so) at `base`, as before.
    if limits::compiled_ops(module, func) > limits::max_compiled_ops() {
        return base;
    }
    let events = compile_us(module, func) * EVENTS_PER_US;
    (events.min(MAX_THRESHOLD as u64) as u32).max(base)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bigger_functions_wait_longer_within_bounds() {
        let src = "fn leaf(x: int) -> int { return x * 3 + 1; }\n\
            fn looped(a: int) -> int { let s = 0; for i in 0..a { s = (s + i * a) % 1003; } return s; }\n\
            print(leaf(1) + looped(2));\n";
        let m = vm::driver::load("t.toy", src.as_bytes()).expect("compiles");
        let find = |name: &str| m.functions.iter().position(|f| f.name == name).unwrap() as u32;
        let (leaf, looped) = (find("leaf"), find("looped"));
        let t_leaf = threshold(&m, leaf, 1000);
        let t_loop = threshold(&m, looped, 1000);
        assert!(t_leaf > 1000, "{t_leaf}");
        assert!(t_loop > t_leaf, "{t_loop} vs {t_leaf}");
        assert!(t_loop <= MAX_THRESHOLD);
        // The base is a floor.
        assert_eq!(threshold(&m, leaf, MAX_THRESHOLD + 5), MAX_THRESHOLD + 5);
    }
}
