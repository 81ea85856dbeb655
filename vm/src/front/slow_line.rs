//! `toyvm run --slow-line LINE:NANOS`: known extra work at one source
//! line, the slowdown experiment that checks a profile (Mytkowicz et al.,
//! PLDI 2010): every route must move the line's share as predicted.
//!
//! A bytecode pass after compilation. Wherever control *enters* a slowed
//! line's code, it places an [`Op::Spin`] carrying the line's span: at the
//! first instruction of a function, after an instruction of another line
//! that falls through, and at the target of a jump from another line or of
//! a back-edge (a jump to itself or backwards, so each loop iteration
//! counts). Jumps within the line skip the spin, so a line runs it once per
//! entry however its code branches. Because the spin is an instruction of
//! the line like any other, every tier puts its time where the line's own
//! code is: the interpreter in the line's instruction handling, the JIT as
//! a machine-code loop at the line's addresses (in whole functions, OSR
//! variants and inlined copies alike), and so the line tables, perf maps,
//! jitdump ranges and vmprof lines all give it to the line and its
//! function.
//!
//! Without `--slow-line` this pass never runs: no instruction, no check.

use crate::bytecode::{Const, Function, MAX_SPIN, Module, Op};

/// Most nanoseconds one `--slow-line` may add per entry (one second).
pub const MAX_NANOS: u64 = 1_000_000_000;

/// One `--slow-line LINE:NANOS` request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlowLine {
    /// The script line, from 1.
    pub line: u32,
    /// Nanoseconds of busy CPU time per entry, `1..=MAX_NANOS`.
    pub nanos: u64,
}

impl std::str::FromStr for SlowLine {
    type Err = String;

    /// Parses `LINE:NANOS`.
    fn from_str(text: &str) -> Result<SlowLine, String> {
        let (line, nanos) = text
            .split_once(':')
            .ok_or_else(|| format!("'{text}' is not LINE:NANOS"))?;
        let line = match line.parse::<u32>() {
            Ok(line) if line >= 1 => line,
            _ => return Err(format!("'{line}' is not a line number (1 or more)")),
        };
        let nanos = match nanos.parse::<u64>() {
            Ok(n) if (1..=MAX_NANOS).contains(&n) => n,
            _ => {
                return Err(format!(
                    "'{nanos}' is not a number of nanoseconds from 1 to {MAX_NANOS}"
                ));
            }
        };
        Ok(SlowLine { line, nanos })
    }
}

/// Each slowed line of `module` with the functions whose code it is in
/// and the entries the interpreter counted ([`crate::bytecode::LineEntries`]):
/// what `--slow-line-counts` prints.
pub fn entries(module: &Module) -> Vec<(u32, Vec<&str>, u64)> {
    let mut lines = std::collections::BTreeMap::<u32, Vec<&str>>::new();
    for f in &module.functions {
        for (op, span) in f.code.iter().zip(&f.spans) {
            let names = lines.entry(span.line).or_default();
            if matches!(op, Op::Spin { .. }) && !names.contains(&f.name.as_str()) {
                names.push(&f.name);
            }
        }
    }
    (lines.into_iter())
        .filter(|(_, names)| !names.is_empty())
        .map(|(line, names)| (line, names, module.line_entries.get(line)))
        .collect()
}

/// Places the spins `requests` ask for into `module`, `iterations_per_ns`
/// turning nanoseconds into [`crate::runtime::spin`] iterations. A line
/// asked for twice adds both. Errors name the first request that cannot
/// hold: a line the script does not have, or one without code.
pub fn apply(
    module: &mut Module,
    requests: &[SlowLine],
    iterations_per_ns: f64,
) -> Result<(), String> {
    let lines = module.source.lines().count().max(1) as u32;
    let mut per_line = std::collections::BTreeMap::<u32, u64>::new();
    for request in requests {
        if request.line > lines {
            return Err(format!(
                "--slow-line {}:{}: {} has no line {} (it has {lines})",
                request.line, request.nanos, module.path, request.line
            ));
        }
        let has_code =
            (module.functions.iter()).any(|f| f.spans.iter().any(|s| s.line == request.line));
        if !has_code {
            return Err(format!(
                "--slow-line {}:{}: line {} of {} has no code to slow down",
                request.line, request.nanos, request.line, module.path
            ));
        }
        let iterations = ((request.nanos as f64) * iterations_per_ns)
            .round()
            .max(1.0) as u64;
        let total = per_line.entry(request.line).or_default();
        *total = (*total + iterations).min(MAX_SPIN as u64);
    }
    for f in &mut module.functions {
        instrument(f, &per_line)?;
    }
    module.line_entries = crate::bytecode::LineEntries::new(lines as usize + 1);
    Ok(())
}

/// Inserts the spins into one function, remapping every jump target.
fn instrument(
    f: &mut Function,
    per_line: &std::collections::BTreeMap<u32, u64>,
) -> Result<(), String> {
    let lines: Vec<u32> = f.spans.iter().map(|s| s.line).collect();
    let line = |pc: usize| lines[pc];
    let n = f.code.len();
    // Whether a jump from `from` to `to` enters `to`'s line.
    let enters = |from: usize, to: usize| line(from) != line(to) || to <= from;
    let mut entered_by_jump = vec![false; n];
    for (from, op) in f.code.iter().enumerate() {
        for to in op.targets() {
            let to = to as usize;
            if to < n && enters(from, to) {
                entered_by_jump[to] = true;
            }
        }
    }
    // Per instruction: does a spin go before it, and does the previous
    // instruction fall into it from the same line (then it must jump over
    // the spin, which is for entries only).
    let mut spin_before = vec![false; n];
    let mut hop_over = vec![false; n];
    for pc in 0..n {
        if !per_line.contains_key(&line(pc)) {
            continue;
        }
        let falls_in = pc > 0 && f.code[pc - 1].falls_through();
        let entered_by_fall = pc == 0 || (falls_in && line(pc - 1) != line(pc));
        spin_before[pc] = entered_by_fall || entered_by_jump[pc];
        hop_over[pc] = spin_before[pc] && falls_in && !entered_by_fall;
    }
    if !spin_before.contains(&true) {
        return Ok(());
    }
    // The constant each spin reads: its iteration count.
    let mut konst = std::collections::BTreeMap::new();
    for (&l, &iterations) in per_line {
        if (0..n).any(|pc| spin_before[pc] && line(pc) == l) {
            let k = u16::try_from(f.consts.len()).map_err(|_| {
                format!(
                    "--slow-line {l}: function {} has too many constants",
                    f.name
                )
            })?;
            f.consts.push(Const::Int(iterations as i64));
            konst.insert(l, k);
        }
    }
    // New positions: `spin_at[pc]` is where the spin before `pc` lands (or
    // `pc` itself), `new_pc[pc]` where `pc` lands.
    let mut spin_at = vec![0u32; n];
    let mut new_pc = vec![0u32; n];
    let mut next = 0u32;
    for pc in 0..n {
        next += hop_over[pc] as u32;
        spin_at[pc] = next;
        next += spin_before[pc] as u32;
        new_pc[pc] = next;
        next += 1;
    }
    let mut code = Vec::with_capacity(next as usize);
    let mut spans = Vec::with_capacity(next as usize);
    for pc in 0..n {
        let span = f.spans[pc];
        if hop_over[pc] {
            code.push(Op::Jmp { target: new_pc[pc] });
            spans.push(span);
        }
        if spin_before[pc] {
            code.push(Op::Spin {
                k: konst[&span.line],
            });
            spans.push(span);
        }
        let mut op = f.code[pc];
        if let Some(target) = op.target_mut() {
            let to = *target as usize;
            if to < n {
                *target = if spin_before[to] && enters(pc, to) {
                    spin_at[to]
                } else {
                    new_pc[to]
                };
            }
        }
        code.push(op);
        spans.push(span);
    }
    f.code = code;
    f.spans = spans;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bytecode::{Op, verify};

    fn module(source: &str) -> Module {
        let program = {
            let mut p = crate::front::parser::parse(source).unwrap();
            crate::front::check::check(&mut p).unwrap();
            p
        };
        let mut m = crate::front::compile::compile(&program, "t.toy").unwrap();
        m.source = source.to_string();
        m
    }

    fn spins_on(f: &Function, line: u32) -> usize {
        (f.code.iter().zip(&f.spans))
            .filter(|(op, s)| matches!(op, Op::Spin { .. }) && s.line == line)
            .count()
    }

    const LOOP: &str = "\
let total = 0;
let i = 0;
while i < 10 {
    total = total + i;
    i = i + 1;
}
print(total);
";

    #[test]
    fn parses_line_and_nanos() {
        assert_eq!(
            "12:3000".parse(),
            Ok(SlowLine {
                line: 12,
                nanos: 3000
            })
        );
        for bad in ["12", "0:5", "x:5", "3:0", "3:-1", "3:1000000001", "3:"] {
            assert!(bad.parse::<SlowLine>().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_spin_goes_wherever_a_line_is_entered_and_the_code_still_verifies() {
        let mut m = module(LOOP);
        let requests = [3, 4, 5].map(|line| SlowLine { line, nanos: 10 });
        apply(&mut m, &requests, 1.0).unwrap();
        verify(&m).unwrap();
        let main = &m.functions[m.main as usize];
        // The compiler tests a `while` condition twice: once before the
        // loop, then at the bottom of each iteration (entered from line 5).
        assert_eq!(spins_on(main, 3), 2, "{main:?}");
        assert_eq!(spins_on(main, 4), 1, "{main:?}");
        assert_eq!(spins_on(main, 5), 1, "{main:?}");
        assert_eq!(spins_on(main, 1) + spins_on(main, 7), 0);
    }

    #[test]
    fn the_back_edge_enters_through_the_spin() {
        let mut m = module(LOOP);
        apply(&mut m, &[SlowLine { line: 4, nanos: 5 }], 2.0).unwrap();
        let main = &m.functions[m.main as usize];
        let (from, to) = crate::bytecode::back_edges(&main.code).next().unwrap();
        assert!(matches!(main.code[to], Op::Spin { .. }), "{main:?}");
        assert_eq!((main.spans[from].line, main.spans[to].line), (3, 4));
        let Op::Spin { k } = main.code[to] else {
            unreachable!()
        };
        assert_eq!(main.consts[k as usize], Const::Int(10));
    }

    #[test]
    fn refuses_lines_without_code_or_outside_the_script() {
        let mut m = module(LOOP);
        let err = apply(&mut m, &[SlowLine { line: 99, nanos: 1 }], 1.0).unwrap_err();
        assert!(err.contains("no line 99 (it has 7)"), "{err}");
        let mut m = module("let x = 1;\n\nprint(x);\n");
        let err = apply(&mut m, &[SlowLine { line: 2, nanos: 1 }], 1.0).unwrap_err();
        assert!(err.contains("line 2 of t.toy has no code"), "{err}");
    }
}
