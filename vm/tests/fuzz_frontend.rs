//! A bounded, deterministic fuzz test of the front end (lexer, parser,
//! checker and diagnostics rendering).
//!
//! Three generators feed it: random bytes, random soups of Toy tokens, and
//! mutations (delete, duplicate, swap, replace a token) of valid programs.
//! For every input the front end must return without panicking, and:
//! - an error's position lies inside the source (or just after the end of
//!   a line), its message is a non-empty lower-case phrase, and it renders;
//! - a program that checks has every variable and call resolved and every
//!   expression typed (`void` only for call statements).
//!
//! The generator is a fixed-seed xorshift, so a failure reproduces; the
//! case counts keep the run to a few seconds in a debug build.

use vm::front::ast::{
    Block, Callee, Expr, ExprKind, FnDecl, Program, Stmt, StmtKind, Type, UNRESOLVED,
};
use vm::front::check::check;
use vm::front::diag::{Diagnostic, render, utf8_error};
use vm::front::lexer::{TokenKind, tokenize};
use vm::front::parser::parse;

/// Cases per generator.
const CASES: usize = 30_000;

/// xorshift64*: small, fast, and good enough to pick test inputs.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n` (`n > 0`).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// Valid programs that together use every construct of the language.
const CORPUS: &[&str] = &[
    r#"
fn fib(n: int) -> int {
    if n < 2 { return n; }
    return fib(n - 1) + fib(n - 2);
}

fn greet(name: str) {          // no `->`: returns no value
    print("hello, " + name);
}

let n = 30;
print(fib(n));
greet("toy");
"#,
    r#"
fn even(n: int) -> bool { if n == 0 { return true; } else { return odd(n - 1); } }
fn odd(n: int) -> bool { if n == 0 { return false; } return even(n - 1); }
let a: [int] = [];
for i in 0..10 { push(a, i * i); }
let total = 0;
let i = 0;
while i < len(a) {
    if a[i] % 2 == 0 && even(a[i]) || false { total += a[i]; } else if !odd(3) { continue; } else { total -= 1; }
    i += 1;
}
print(total);
print(pop(a));
"#,
    r#"
fn norm(v: [float]) -> float {
    let s = 0.0;
    for i in 0..len(v) { s += v[i] * v[i]; }
    return sqrt(s);
}
let grid = [[0.5; 3]; 4];
grid[1][2] = 2.5e-3;
grid[0][0] *= 1e9;
print(norm(grid[1]));
let t0 = clock();
let bits = (0x2A & 0xff | 1 << 3) ^ -1 >> 2;
let s = "tab\tquote\"nl\n" + str(bits) + str(1.5) + str(true) + str("s");
print(int(2.9) + int(3) + parse_int("12"));
print(float(3) / parse_float("2.0") - float(1.0));
print(len(s) >= 3 != false);
let argv = args();
print(len(argv) <= 0);
print(clock() - t0 > 0.0);
"#,
    r#"
fn find(words: [str], w: str) -> int {
    let i = 0;
    while true {
        if i >= len(words) { return -1; }
        if words[i] == w { return i; }
        i = i + 1;
    }
}
fn nested() -> [[str]] { return [[], ["a", "b"]]; }
let words = ["x", "y"];
let words = nested()[1];
{
    let k = find(words, "b");
    print(k % 2);
    print(-9223372036854775808);
    print(1_000_000 / 7 % 3);
}
"#,
];

/// Every kind of token, with a few spellings of the valued ones.
const VOCABULARY: &[&str] = &[
    "fn",
    "let",
    "if",
    "else",
    "while",
    "for",
    "in",
    "break",
    "continue",
    "return",
    "true",
    "false",
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    ",",
    ";",
    ":",
    "->",
    "..",
    "+",
    "-",
    "*",
    "/",
    "%",
    "=",
    "+=",
    "-=",
    "*=",
    "/=",
    "%=",
    "==",
    "!=",
    "<",
    "<=",
    ">",
    ">=",
    "&&",
    "||",
    "!",
    "&",
    "|",
    "^",
    "<<",
    ">>",
    "0",
    "1",
    "42",
    "0x7f",
    "9223372036854775808",
    "1.5",
    "2e3",
    "\"s\"",
    "\"\\n\"",
    "x",
    "y",
    "n",
    "f",
    "g",
    "int",
    "float",
    "bool",
    "str",
    "print",
    "len",
    "push",
    "pop",
    "sqrt",
    "clock",
    "args",
    "parse_int",
    "parse_float",
    "//c\n",
    "\n",
];

/// Checks the invariants for one input; `source` is what the front end saw.
fn run_front_end(source: &str) {
    let result = parse(source).and_then(|mut program| {
        check(&mut program)?;
        Ok(program)
    });
    match result {
        Ok(program) => {
            check_resolved_function(&program, &program.main);
            for function in &program.functions {
                check_resolved_function(&program, function);
            }
        }
        Err(d) => check_diagnostic(source, &d),
    }
}

fn check_diagnostic(source: &str, d: &Diagnostic) {
    let lines: Vec<&str> = source.split('\n').collect();
    let line = d.span.line as usize;
    assert!(
        (1..=lines.len()).contains(&line),
        "line {line} outside 1..={} for {d:?} in {source:?}",
        lines.len()
    );
    let width = lines[line - 1].chars().count();
    assert!(
        (1..=width + 1).contains(&(d.span.col as usize)),
        "column outside 1..={} for {d:?} in {source:?}",
        width + 1
    );
    let first = d.message.chars().next().expect("a non-empty message");
    assert!(!first.is_uppercase(), "message starts lower case: {d:?}");
    let text = render("fuzz.toy", source, d);
    assert!(text.starts_with(&format!(
        "fuzz.toy:{}:{}: error: {}\n",
        d.span.line, d.span.col, d.message
    )));
    assert_eq!(text.lines().count(), 3, "{text}");
    assert!(text.ends_with("^\n"));
}

fn check_resolved_function(program: &Program, function: &FnDecl) {
    for (index, param) in function.params.iter().enumerate() {
        assert_eq!(param.local as usize, index);
    }
    check_resolved_block(program, function, &function.body);
}

fn check_resolved_block(program: &Program, function: &FnDecl, block: &Block) {
    for stmt in &block.stmts {
        check_resolved_stmt(program, function, stmt);
    }
}

fn check_local(function: &FnDecl, local: u32) {
    assert_ne!(local, UNRESOLVED);
    assert!((local as usize) < function.locals.len());
}

fn check_resolved_stmt(program: &Program, function: &FnDecl, stmt: &Stmt) {
    let value = |e: &Expr| {
        check_resolved_expr(program, function, e);
        assert_ne!(e.ty, Type::Void, "a value has a type: {e:?}");
    };
    match &stmt.kind {
        StmtKind::Let { init, local, .. } => {
            value(init);
            check_local(function, *local);
        }
        StmtKind::Assign {
            target, value: v, ..
        } => {
            value(target);
            value(v);
            assert_eq!(target.ty, v.ty);
        }
        StmtKind::If {
            cond,
            then_block,
            else_block,
        } => {
            value(cond);
            check_resolved_block(program, function, then_block);
            if let Some(block) = else_block {
                check_resolved_block(program, function, block);
            }
        }
        StmtKind::While { cond, body } => {
            value(cond);
            check_resolved_block(program, function, body);
        }
        StmtKind::For {
            start,
            end,
            body,
            local,
            ..
        } => {
            value(start);
            value(end);
            check_local(function, *local);
            check_resolved_block(program, function, body);
        }
        StmtKind::Return(Some(e)) => value(e),
        StmtKind::Break | StmtKind::Continue | StmtKind::Return(None) => {}
        StmtKind::Expr(e) => check_resolved_expr(program, function, e),
        StmtKind::Block(block) => check_resolved_block(program, function, block),
    }
}

fn check_resolved_expr(program: &Program, function: &FnDecl, e: &Expr) {
    let operand = |inner: &Expr| {
        check_resolved_expr(program, function, inner);
        assert_ne!(inner.ty, Type::Void);
    };
    match &e.kind {
        ExprKind::Int(_) | ExprKind::Float(_) | ExprKind::Bool(_) | ExprKind::Str(_) => {}
        ExprKind::Local { local, .. } => check_local(function, *local),
        ExprKind::Unary { operand: inner, .. } => operand(inner),
        ExprKind::Binary { lhs, rhs, .. } | ExprKind::Logic { lhs, rhs, .. } => {
            operand(lhs);
            operand(rhs);
            assert_eq!(lhs.ty, rhs.ty);
        }
        ExprKind::Call { args, callee, .. } => {
            match callee {
                Callee::Unresolved => panic!("unresolved call {e:?}"),
                Callee::Builtin(_) => {}
                Callee::Function(index) => {
                    assert!((*index as usize) < program.functions.len());
                }
            }
            args.iter().for_each(operand);
        }
        ExprKind::Index { array, index } => {
            operand(array);
            operand(index);
            assert_eq!(index.ty, Type::Int);
        }
        ExprKind::ArrayLit(items) => {
            items.iter().for_each(operand);
            assert!(matches!(e.ty, Type::Array(_)));
        }
        ExprKind::ArrayRepeat { value, count } => {
            operand(value);
            operand(count);
        }
    }
}

/// Source text for one token, so a token list can become a program again.
fn spell(kind: &TokenKind) -> String {
    match kind {
        TokenKind::Int(v) => v.to_string(),
        TokenKind::Float(v) => format!("{v:?}"),
        TokenKind::Str(s) => {
            let mut out = String::from("\"");
            for c in s.chars() {
                match c {
                    '\n' => out.push_str("\\n"),
                    '\t' => out.push_str("\\t"),
                    '\r' => out.push_str("\\r"),
                    '\\' => out.push_str("\\\\"),
                    '"' => out.push_str("\\\""),
                    '\0' => out.push_str("\\0"),
                    c => out.push(c),
                }
            }
            out.push('"');
            out
        }
        TokenKind::Ident(name) => name.clone(),
        TokenKind::Eof => String::new(),
        other => other.symbol().to_string(),
    }
}

/// Runs the whole fuzz campaign on the front end's 512 MiB stack.
fn on_front_end_stack(f: impl FnOnce() + Send + 'static) {
    std::thread::Builder::new()
        .stack_size(512 << 20)
        .spawn(f)
        .expect("spawn")
        .join()
        .expect("the front end never panics");
}

#[test]
fn corpus_programs_are_valid() {
    for source in CORPUS {
        let mut program = parse(source).expect("corpus parses");
        check(&mut program).expect("corpus checks");
        run_front_end(source);
    }
}

#[test]
fn random_bytes() {
    on_front_end_stack(|| {
        let mut rng = Rng(0x5EED_0001);
        for _ in 0..CASES {
            let len = rng.below(120);
            // Mostly printable ASCII, so that some inputs get past the lexer.
            let mut bytes = Vec::with_capacity(len);
            for _ in 0..len {
                match rng.below(12) {
                    0 => bytes.push(rng.next() as u8),
                    1 => bytes.push(b'\n'),
                    // Multi-byte characters, a tab, a carriage return and a
                    // byte order mark exercise the column counting.
                    2 => {
                        let text = rng.pick::<&str>(&["é", "€", "\t", "\r", "\u{feff}"]);
                        bytes.extend_from_slice(text.as_bytes());
                    }
                    _ => bytes.push(*rng.pick(b" abcfnilt019x_.\"\\(){}[];:,+-*/%=<>!&|^")),
                }
            }
            match std::str::from_utf8(&bytes) {
                Ok(source) => run_front_end(source),
                Err(err) => {
                    let d = utf8_error(&bytes, err);
                    let valid = std::str::from_utf8(&bytes[..err.valid_up_to()]).expect("prefix");
                    check_diagnostic(valid, &d);
                }
            }
        }
    });
}

#[test]
fn random_token_soups() {
    on_front_end_stack(|| {
        let mut rng = Rng(0x5EED_0002);
        for _ in 0..CASES {
            let len = rng.below(60);
            let mut source = String::new();
            for _ in 0..len {
                source.push_str(rng.pick::<&str>(VOCABULARY));
                source.push(if rng.below(8) == 0 { '\n' } else { ' ' });
            }
            run_front_end(&source);
        }
    });
}

#[test]
fn mutated_programs() {
    on_front_end_stack(|| {
        let mut rng = Rng(0x5EED_0003);
        let corpus: Vec<Vec<String>> = CORPUS
            .iter()
            .map(|source| {
                tokenize(source)
                    .expect("corpus lexes")
                    .iter()
                    .map(|t| spell(&t.kind))
                    .collect()
            })
            .collect();
        // Respelled but unmutated programs are still valid.
        for tokens in &corpus {
            let mut program = parse(&tokens.join(" ")).expect("respelled corpus parses");
            check(&mut program).expect("respelled corpus checks");
        }
        for _ in 0..CASES {
            let mut tokens = rng.pick(&corpus).clone();
            for _ in 0..=rng.below(3) {
                let i = rng.below(tokens.len());
                let j = rng.below(tokens.len());
                match rng.below(4) {
                    0 => {
                        tokens.remove(i);
                    }
                    1 => {
                        let copy = tokens[i].clone();
                        tokens.insert(j, copy);
                    }
                    2 => tokens.swap(i, j),
                    _ => tokens[i] = rng.pick::<&str>(VOCABULARY).to_string(),
                }
                if tokens.is_empty() {
                    break;
                }
            }
            let separator = if rng.below(2) == 0 { " " } else { "\n" };
            run_front_end(&tokens.join(separator));
        }
    });
}
