//! Programs generated for the code-limit stress test (`tests/code_limit_stress.rs`)
//! and its fuzz target (`fuzz/fuzz_targets/code_limit.rs`), which include
//! this file: many functions of many sizes, loops (OSR), direct and mutual
//! recursion, and calls of many shapes (in expressions, in loops, under a
//! condition, nested as arguments), so that a small code limit evicts code
//! that runs, is called, and calls.
//!
//! Every function takes a depth `d` and a value `x`; every call passes
//! `d - 1`, and a function returns at once when `d <= 0`, so each program
//! ends, with at most `CALLS` calls per function body and `depth` levels.
//! The values stay below 1,000,003 (every result is reduced), so nothing
//! overflows and the output is the same in every tier.

/// Where the choices come from: `next(n)` gives a number below `n` (`n >
/// 0`). The test draws them from a seeded generator, the fuzz target from
/// its input bytes.
pub trait Choices {
    /// A number in `0..n`.
    fn next(&mut self, n: u32) -> u32;
}

/// Calls one function body makes at most: the call tree grows as
/// `CALLS ^ depth`.
const CALLS: u32 = 3;

/// A program of `functions` functions (at least 1) whose `<main>` runs
/// `rounds` rounds, each calling into the functions `depth` levels deep.
pub fn program(c: &mut impl Choices, functions: u32, depth: u32, rounds: u32) -> String {
    let functions = functions.max(1);
    let mut out = String::new();
    for i in 0..functions {
        out += &function(c, i, functions);
    }
    out += "let total = 0;\n";
    out += &format!("for r in 0..{rounds} {{\n");
    // Each round enters every function, in phases of rounds of their own
    // half of the time: the working set moves.
    for f in 0..functions {
        let step = 1 + c.next(5);
        let call = format!("total = (total + f{f}({depth}, r * {step} + total % 97)) % 1000003;");
        match c.next(2) {
            0 => out += &format!("    {call}\n"),
            _ => out += &format!("    if (r / 50) % {functions} == {f} {{ {call} }}\n"),
        }
    }
    out += &format!("    if r % {} == 0 {{ print(total); }}\n", 1 + c.next(40));
    out += "}\nprint(total);\n";
    out
}

fn function(c: &mut impl Choices, i: u32, functions: u32) -> String {
    let mut body = String::new();
    let mut calls = 0;
    for n in 0..1 + c.next(5) {
        body += &statement(c, i, functions, &mut calls, n);
    }
    format!(
        "fn f{i}(d: int, x: int) -> int {{\n    if d <= 0 {{ return (x * {} + {i}) % 1000; }}\n    let s = x % 1000003;\n{body}    return s;\n}}\n",
        1 + c.next(9)
    )
}

/// A callee: often itself or a neighbour (recursion, mutual recursion),
/// else any function.
fn callee(c: &mut impl Choices, i: u32, functions: u32) -> u32 {
    match c.next(4) {
        0 => i,
        1 => (i + 1) % functions,
        _ => c.next(functions),
    }
}

/// Statement `n` of function `i`'s body.
fn statement(c: &mut impl Choices, i: u32, functions: u32, calls: &mut u32, n: u32) -> String {
    let (a, b, m) = (1 + c.next(30), c.next(100), 2 + c.next(9));
    // Without calls left, only arithmetic and loops.
    let kind = if *calls >= CALLS {
        c.next(2)
    } else {
        c.next(7)
    };
    if kind >= 2 {
        *calls += 1;
    }
    let g = callee(c, i, functions);
    match kind {
        0 => format!("    s = (s * {a} + {b}) % 1000003;\n"),
        1 => format!(
            "    for k in 0..{} {{ s = (s * {a} + k + {b}) % 1000003; }}\n",
            1 + c.next(300)
        ),
        2 => format!("    s = (s + f{g}(d - 1, s % {m}00)) % 1000003;\n"),
        3 => format!(
            "    for k in 0..{} {{ s = (s + f{g}(d - 1, s + k)) % 1000003; }}\n",
            1 + c.next(2)
        ),
        4 => format!("    if s % {m} == 0 {{ s = (s + f{g}(d - 1, s)) % 1000003; }}\n"),
        5 => {
            let h = callee(c, i, functions);
            *calls += 1;
            format!("    s = (s + f{g}(d - 1, f{h}(d - 1, s) % 1000)) % 1000003;\n")
        }
        _ => format!(
            "    let t{n} = f{g}(d - 1, x + {b});\n    s = (s * 3 + t{n} * {a}) % 1000003;\n"
        ),
    }
}

/// A small seeded generator (SplitMix64) for the test's programs.
pub struct Seeded(pub u64);

impl Choices for Seeded {
    fn next(&mut self, n: u32) -> u32 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) % u64::from(n)) as u32
    }
}

/// The numbers of `--jit-stats`' code cache line: (compiles that found no
/// room, times code was freed).
pub fn no_room_counts(stderr: &str) -> Option<(u64, u64)> {
    let line = stderr
        .lines()
        .find_map(|l| l.strip_prefix("jit-stats (code cache): "))?;
    let number_before = |what: &str| -> Option<u64> {
        let at = line.find(what)?;
        line[..at].trim_end().rsplit(' ').next()?.parse().ok()
    };
    Some((
        number_before(" compiles found no room")?,
        number_before(" times code was freed")?,
    ))
}
