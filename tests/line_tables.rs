//! The JIT's line tables as `toyvm disasm --jit` shows them (the same rows
//! perf gets in the jitdump: both come from `jit::line_table`), without
//! perf: the `fn` line is only for the prologue and the cold code after the
//! last return, a compiled loop's instructions are all on the loop's lines,
//! and an inlined leaf's instructions carry the callee's lines.

mod common;

/// The source line markers (`; path:LINE: text`) of region `name`'s
/// machine code, in order, each with the number of instructions under it.
fn line_runs(listing: &str, name: &str) -> Vec<(u32, usize)> {
    let region = listing
        .split("\n== ")
        .find(|r| r.trim_start_matches("== ").starts_with(name))
        .unwrap_or_else(|| panic!("no region {name} in:\n{listing}"));
    let code = region
        .split("-- machine code\n")
        .nth(1)
        .expect("a machine-code section");
    let mut runs: Vec<(u32, usize)> = Vec::new();
    for row in code.lines() {
        let row = row.trim();
        if let Some(marker) = row.strip_prefix("; ") {
            let line = marker
                .split(':')
                .nth(1)
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("bad marker {row}"));
            runs.push((line, 0));
        } else if row.starts_with("0x") {
            runs.last_mut().expect("a marker first").1 += 1;
        }
    }
    runs
}

fn disasm(script: &str) -> String {
    let run = common::toyvm(&["disasm", "--jit", script]);
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    run.stdout
}

#[test]
fn a_compiled_loop_is_on_its_own_lines() {
    let listing = disasm("tests/line_tables/loop.toy");
    let runs = line_runs(&listing, "toy:jit:work:");
    let lines: Vec<u32> = runs.iter().map(|&(l, _)| l).collect();
    // Prologue on the `fn` line (2), then the body; the `fn` line comes
    // back only after the return (line 7): the shared cold error code.
    assert_eq!(lines.first(), Some(&2), "{runs:?}");
    let first_body = lines.iter().position(|&l| l != 2).expect("a body");
    let ret = lines.iter().position(|&l| l == 7).expect("the return line");
    assert!(
        lines[first_body..ret].iter().all(|&l| (3..=5).contains(&l)),
        "the loop's code must stay on lines 3-5: {runs:?}"
    );
    assert!(
        lines[ret..].iter().all(|&l| l == 7 || l == 2),
        "after the return only the return and the cold error code: {runs:?}"
    );
}

#[test]
fn inlined_leaf_code_carries_the_callees_lines() {
    let listing = disasm("tests/line_tables/inlined.toy");
    let runs = line_runs(&listing, "toy:jit:run:");
    let in_callee: usize = (runs.iter())
        .filter(|&&(l, _)| (3..=4).contains(&l))
        .map(|&(_, n)| n)
        .sum();
    assert!(
        in_callee >= 3,
        "the inlined `mix` (lines 3-4) should own its multiply and modulo: {runs:?}"
    );
    // The prologue is on the `fn` line (6); after it, the `fn` line comes
    // back only after the return (line 11): the shared cold error code.
    assert_eq!(runs[0].0, 6, "{runs:?}");
    let ret = runs
        .iter()
        .position(|&(l, _)| l == 11)
        .expect("the return line");
    assert!(
        runs[1..ret].iter().all(|&(l, _)| l != 6),
        "the loop and the inlined body must not touch the `fn` line: {runs:?}"
    );
}

#[test]
fn entering_a_callees_frame_is_on_the_calls_line() {
    // book/examples/fib.toy: `fn fib` on line 2, the two calls on line 4.
    // The caller enters each callee's frame (depth check, frame record),
    // so that code is on line 4; the `fn` line keeps Cranelift's prologue
    // (frame pointer, callee-saved registers) and the native stack check:
    // about a dozen instructions, where the depth check and the record
    // made it about thirty.
    let listing = disasm("book/examples/fib.toy");
    let runs = line_runs(&listing, "toy:jit:fib:");
    assert_eq!(runs[0].0, 2, "{runs:?}");
    assert!(
        runs[0].1 <= 16,
        "the `fn` line should hold only the prologue: {runs:?}"
    );
    let region = listing
        .split("\n== ")
        .find(|r| r.trim_start_matches("== ").starts_with("toy:jit:fib:"))
        .expect("fib's region");
    let code = region
        .split("-- machine code\n")
        .nth(1)
        .expect("machine code");
    // The instructions under each line marker, as (line, text).
    let mut line = 0;
    let mut on_line_4 = Vec::new();
    for row in code.lines().map(str::trim) {
        if let Some(marker) = row.strip_prefix("; ") {
            line = marker
                .split(':')
                .nth(1)
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
        } else if row.starts_with("0x") && line == 4 {
            on_line_4.push(row);
        }
    }
    // Direct calls of `fib` itself (helpers are called through a register).
    let calls = (on_line_4.iter())
        .filter(|r| r.contains(" call ") && !r.contains(" call r"))
        .count();
    assert_eq!(calls, 2, "both recursive calls on line 4: {on_line_4:#?}");
    // The depth limit (`vm.max_depth`, offset 8) is read on the call's line.
    assert!(
        on_line_4
            .iter()
            .any(|r| r.contains("+8]") || r.contains("+8h]")),
        "the depth check belongs to the call: {on_line_4:#?}"
    );
}
