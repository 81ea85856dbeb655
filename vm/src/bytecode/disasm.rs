//! A readable listing of a module's bytecode (`toyvm dis`), for learning
//! how Toy compiles and for debugging the compiler.
//!
//! For each function: a header with its signature, its registers and their
//! types (named after the locals they hold), the call area and the constant
//! pool; then the instructions, each source line shown once above the
//! first instruction compiled from it:
//!
//! ```text
//! fn fib(n: int) -> int    [line 1]
//!   registers: r0 n: int, r1: int
//!   call area: r2..r2
//!
//!    2 |     if n < 2 { return n; }
//!      0  JmpIfNotLtIImm  r0(n), 2, ->2
//! ```

use std::fmt::Write;

use crate::bytecode::{Const, Function, Module, Operand, RegOperand};

/// The listing of every function of `module` (`<main>` last).
pub fn disassemble(module: &Module) -> String {
    let lines: Vec<&str> = module.source.lines().collect();
    let mut out = String::new();
    for (i, f) in module.functions.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        function(&mut out, module, f, &lines);
    }
    out
}

fn function(out: &mut String, module: &Module, f: &Function, lines: &[&str]) {
    let params: Vec<String> = f.params.iter().map(|(n, t)| format!("{n}: {t}")).collect();
    let ret = f
        .ret
        .as_ref()
        .map(|t| format!(" -> {t}"))
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "fn {}({}){ret}    [line {}]",
        f.name,
        params.join(", "),
        f.span.line
    );
    let regs: Vec<String> = f
        .reg_types
        .iter()
        .enumerate()
        .map(|(r, t)| match f.reg_names.get(r).cloned().flatten() {
            Some(name) => format!("r{r} {name}: {t}"),
            None => format!("r{r}: {t}"),
        })
        .collect();
    let _ = writeln!(
        out,
        "  registers: {}",
        if regs.is_empty() {
            "none".into()
        } else {
            regs.join(", ")
        }
    );
    if (f.frame_size as usize) > f.num_typed() {
        let _ = writeln!(
            out,
            "  call area: r{}..r{}",
            f.num_typed(),
            f.frame_size - 1
        );
    }
    for (k, c) in f.consts.iter().enumerate() {
        let _ = writeln!(out, "  k{k} = {}", constant(module, c));
    }
    out.push('\n');
    let mut shown_line = 0;
    for (pc, op) in f.code.iter().enumerate() {
        let line = f.spans.get(pc).map_or(0, |s| s.line);
        if line != shown_line && line > 0 {
            shown_line = line;
            let text = lines.get(line as usize - 1).copied().unwrap_or("");
            let _ = writeln!(out, "  {line:>4} | {}", text.trim_end());
        }
        let name = op.name();
        let operands: Vec<String> = op
            .operands()
            .iter()
            .map(|o| operand(module, f, o))
            .collect();
        let text = format!("  {pc:>6}  {name:<16}{}", operands.join(", "));
        out.push_str(text.trim_end());
        out.push('\n');
    }
}

fn constant(module: &Module, c: &Const) -> String {
    match c {
        Const::Int(i) => i.to_string(),
        Const::Float(x) => format!("{x:?}"),
        Const::Str(s) => format!(
            "{:?}",
            module.strings.get(*s as usize).map_or("", |s| s.as_str())
        ),
    }
}

fn operand(module: &Module, f: &Function, o: &Operand) -> String {
    match *o {
        Operand::Reg(RegOperand { reg: r, .. }) => {
            match f.reg_names.get(r as usize).cloned().flatten() {
                Some(name) => format!("r{r}({name})"),
                None => format!("r{r}"),
            }
        }
        Operand::Imm(i) => i.to_string(),
        Operand::Const(k) => match f.consts.get(k as usize) {
            Some(c) => format!("k{k}({})", constant(module, c)),
            None => format!("k{k}"),
        },
        Operand::Target(t) => format!("->{t}"),
        Operand::Func(i) => match module.functions.get(i as usize) {
            Some(callee) => format!("{}#{i}", callee.name),
            None => format!("#{i}"),
        },
        Operand::Type(t) => match module.types.get(t as usize) {
            Some(ty) => format!("type {ty}"),
            None => format!("type #{t}"),
        },
        Operand::Flag(name, v) => format!("{name}={v}"),
        Operand::Num(name, v) => format!("{name}={v}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver;

    #[test]
    fn listing_shows_header_source_lines_and_operands() {
        let src = "fn fib(n: int) -> int {\n    if n < 2 { return n; }\n    return fib(n - 1) + fib(n - 2);\n}\nprint(fib(10) + 0);\nprint(\"hi\");\n";
        let m = driver::load("t.toy", src.as_bytes()).unwrap();
        let text = disassemble(&m);
        let expected_fib = "\
fn fib(n: int) -> int    [line 1]
  registers: r0 n: int, r1: int, r2: int
  call area: r3..r3

     2 |     if n < 2 { return n; }
       0  JmpIfNotLtIImm  r0(n), 2, ->2
       1  Return          r0(n)
     3 |     return fib(n - 1) + fib(n - 2);
       2  AddIImm         r3, r0(n), -1
       3  Call            r1, fib#0, r3
       4  AddIImm         r3, r0(n), -2
       5  Call            r2, fib#0, r3
       6  AddI            r1, r1, r2
       7  Return          r1
";
        assert!(text.starts_with(expected_fib), "{text}");
        assert!(text.contains("fn <main>()    [line 1]"), "{text}");
        assert!(text.contains("k0 = \"hi\""), "{text}");
        assert!(text.contains("LoadConst       r"), "{text}");
        assert!(text.contains("Print           r"), "{text}");
        assert!(text.contains("type int"), "{text}");
    }
}
