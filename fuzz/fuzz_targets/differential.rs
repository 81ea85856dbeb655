//! Differential: a program generated from the input runs identically
//! (stdout, stderr, exit status) in the interpreter and with every function
//! compiled first (`--jit-threshold 0`) and tiering up (`--jit-threshold 5`).
//!
//! The bytes choose the expressions and statements of a function over ints
//! (arithmetic with wrapping, division and modulo that may fail, shifts,
//! comparisons, `if`, `while` with a bounded counter) that `<main>` calls in
//! a loop, so the JIT compiles it and runtime errors are compared too.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "run.rs"]
mod run;

/// Reads choices from the fuzzer's bytes (zeros when they run out).
struct Choices<'a> {
    bytes: &'a [u8],
    /// Loops made so far (each gets its own counter variable).
    loops: u32,
}

impl Choices<'_> {
    fn next(&mut self, n: u8) -> u8 {
        let Some((&b, rest)) = self.bytes.split_first() else {
            return 0;
        };
        self.bytes = rest;
        b % n
    }
}

const VARS: [&str; 4] = ["a", "b", "x", "y"];
const OPS: [&str; 10] = ["+", "-", "*", "/", "%", "&", "|", "^", "<<", ">>"];
const CMPS: [&str; 6] = ["<", "<=", "==", "!=", ">", ">="];

fn expr(c: &mut Choices<'_>, depth: u32) -> String {
    match if depth == 0 { c.next(2) } else { c.next(4) } {
        0 => VARS[c.next(4) as usize].to_string(),
        1 => (c.next(200) as i64 - 100).to_string(),
        2 => format!(
            "({} {} {})",
            expr(c, depth - 1),
            OPS[c.next(OPS.len() as u8) as usize],
            expr(c, depth - 1)
        ),
        _ => format!("(-{})", expr(c, depth - 1)),
    }
}

fn cond(c: &mut Choices<'_>) -> String {
    format!("{} {} {}", expr(c, 2), CMPS[c.next(6) as usize], expr(c, 2))
}

fn statements(c: &mut Choices<'_>, depth: u32, out: &mut String) {
    for _ in 0..=c.next(4) {
        match c.next(if depth == 0 { 2 } else { 4 }) {
            0 => *out += &format!("x = {};\n", expr(c, 3)),
            1 => *out += &format!("y = {};\n", expr(c, 3)),
            2 => {
                *out += &format!("if {} {{\n", cond(c));
                statements(c, depth - 1, out);
                *out += "} else {\n";
                statements(c, depth - 1, out);
                *out += "}\n";
            }
            _ => {
                c.loops += 1;
                let k = format!("k{}", c.loops);
                *out += &format!(
                    "let {k} = 0;\nwhile {k} < {} && {} {{\n",
                    c.next(8),
                    cond(c)
                );
                *out += &format!("{k} = {k} + 1;\n");
                statements(c, depth - 1, out);
                *out += "}\n";
            }
        }
    }
}

fn program(data: &[u8]) -> String {
    let mut c = Choices {
        bytes: data,
        loops: 0,
    };
    let mut body = String::new();
    statements(&mut c, 2, &mut body);
    let result = expr(&mut c, 3);
    format!(
        "fn f(a: int, b: int) -> int {{\nlet x = a;\nlet y = b;\n{body}return {result};\n}}\n\
         for i in 0..40 {{ print(f(i, i * 3 - 7)); }}\n"
    )
}

fn run(module: &vm::bytecode::Module, threshold: Option<u32>) -> (i32, Vec<u8>, Vec<u8>) {
    let options = threshold.map(|threshold| jit::JitOptions {
        threshold: Some(threshold),
        ..jit::JitOptions::default()
    });
    run::run(module, options)
}

fuzz_target!(|data: &[u8]| {
    let source = program(data);
    // A generated program may not type-check (e.g. shifts of a bool):
    // only programs the front end accepts are compared.
    let Ok(module) = vm::driver::load("diff.toy", source.as_bytes()) else {
        return;
    };
    let interpreted = run(&module, None);
    for threshold in [0, 5] {
        let compiled = run(&module, Some(threshold));
        assert!(
            compiled == interpreted,
            "threshold {threshold} differs on:\n{source}\ninterpreted: {:?} {} {}\ncompiled: {:?} {} {}",
            interpreted.0,
            String::from_utf8_lossy(&interpreted.1),
            String::from_utf8_lossy(&interpreted.2),
            compiled.0,
            String::from_utf8_lossy(&compiled.1),
            String::from_utf8_lossy(&compiled.2),
        );
    }
});
