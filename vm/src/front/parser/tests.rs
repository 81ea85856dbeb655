//! Parser unit tests. Expressions are checked through a fully
//! parenthesized rendering of the tree, which makes precedence and
//! associativity visible.

use super::*;
use crate::front::ast::Stmt;

/// Renders an expression with every operator application in parentheses.
fn show(e: &Expr) -> String {
    match &e.kind {
        ExprKind::Int(v) => v.to_string(),
        ExprKind::Float(v) => format!("{v:?}"),
        ExprKind::Bool(v) => v.to_string(),
        ExprKind::Str(s) => format!("{s:?}"),
        ExprKind::Local { name, .. } => name.clone(),
        ExprKind::Unary { op, operand } => {
            let sym = match op {
                UnOp::Neg => "-",
                UnOp::Not => "!",
            };
            format!("({sym}{})", show(operand))
        }
        ExprKind::Binary { op, lhs, rhs } => {
            format!("({} {} {})", show(lhs), op.symbol(), show(rhs))
        }
        ExprKind::Logic { op, lhs, rhs } => {
            let sym = match op {
                LogicOp::And => "&&",
                LogicOp::Or => "||",
            };
            format!("({} {sym} {})", show(lhs), show(rhs))
        }
        ExprKind::Call { name, args, .. } => {
            let args: Vec<String> = args.iter().map(show).collect();
            format!("{name}({})", args.join(", "))
        }
        ExprKind::Index { array, index } => format!("{}[{}]", show(array), show(index)),
        ExprKind::ArrayLit(items) => {
            let items: Vec<String> = items.iter().map(show).collect();
            format!("[{}]", items.join(", "))
        }
        ExprKind::ArrayRepeat { value, count } => format!("[{}; {}]", show(value), show(count)),
    }
}

/// Parses `let _ = SOURCE;` and renders the initializer.
fn expr(source: &str) -> String {
    let program = parse(&format!("let v = {source};")).expect("parses");
    match &program.main.body.stmts[0].kind {
        StmtKind::Let { init, .. } => show(init),
        other => panic!("not a let: {other:?}"),
    }
}

fn error(source: &str) -> (u32, u32, String) {
    let d = parse(source).expect_err("a syntax error");
    (d.span.line, d.span.col, d.message)
}

fn main_stmts(source: &str) -> Vec<Stmt> {
    parse(source).expect("parses").main.body.stmts
}

/// Runs `f` on a thread with the front end's 512 MiB stack.
fn big_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new()
        .stack_size(512 << 20)
        .spawn(f)
        .expect("spawn")
        .join()
        .expect("no panic")
}

#[test]
fn empty_source_is_an_empty_program() {
    let program = parse("").expect("parses");
    assert!(program.functions.is_empty());
    assert!(program.main.body.stmts.is_empty());
    assert_eq!(program.main.name, "<main>");
    assert_eq!(program.main.span, Span::new(1, 1));
    assert_eq!(program.main.ret, None);
    assert!(parse("  // nothing\n\n").is_ok());
}

#[test]
fn precedence_follows_the_table() {
    assert_eq!(expr("1 + 2 * 3"), "(1 + (2 * 3))");
    assert_eq!(expr("1 * 2 + 3"), "((1 * 2) + 3)");
    assert_eq!(expr("a || b && c"), "(a || (b && c))");
    assert_eq!(expr("a && b == c"), "(a && (b == c))");
    assert_eq!(expr("a == b < c"), "(a == (b < c))");
    assert_eq!(expr("a < b | c"), "(a < (b | c))");
    assert_eq!(expr("a | b ^ c"), "(a | (b ^ c))");
    assert_eq!(expr("a ^ b & c"), "(a ^ (b & c))");
    assert_eq!(expr("a & b << c"), "(a & (b << c))");
    assert_eq!(expr("a << b + c"), "(a << (b + c))");
    assert_eq!(expr("a + b % c"), "(a + (b % c))");
    assert_eq!(expr("-a * b"), "((-a) * b)");
    assert_eq!(expr("!f(x)[0]"), "(!f(x)[0])");
    assert_eq!(expr("-a[1][2]"), "(-a[1][2])");
    assert_eq!(
        expr("a * b + c << d & e ^ f | g > h == i && j || k"),
        "((((((((((a * b) + c) << d) & e) ^ f) | g) > h) == i) && j) || k)"
    );
}

#[test]
fn every_binary_operator_is_left_associative() {
    for op in [
        "||", "&&", "==", "!=", "<", "<=", ">", ">=", "|", "^", "&", "<<", ">>", "+", "-", "*",
        "/", "%",
    ] {
        assert_eq!(
            expr(&format!("a {op} b {op} c")),
            format!("((a {op} b) {op} c)"),
            "operator {op}"
        );
    }
}

#[test]
fn parentheses_override_precedence() {
    assert_eq!(expr("(1 + 2) * 3"), "((1 + 2) * 3)");
    assert_eq!(expr("a - (b - c)"), "(a - (b - c))");
    assert_eq!(expr("((x))"), "x");
}

#[test]
fn unary_operators_nest() {
    assert_eq!(expr("- -x"), "(-(-x))");
    assert_eq!(expr("!!b"), "(!(!b))");
    assert_eq!(expr("-x - -y"), "((-x) - (-y))");
}

#[test]
fn literals() {
    assert_eq!(expr("42"), "42");
    assert_eq!(expr("0x2A"), "42");
    assert_eq!(expr("9223372036854775807"), "9223372036854775807");
    assert_eq!(expr("2.5e-3"), "0.0025");
    assert_eq!(expr("true"), "true");
    assert_eq!(expr("\"a\\n\""), "\"a\\n\"");
}

#[test]
fn the_most_negative_int_is_a_literal() {
    assert_eq!(expr("-9223372036854775808"), "-9223372036854775808");
    assert_eq!(expr("-0x8000000000000000"), "-9223372036854775808");
    assert_eq!(
        expr("1 - -9223372036854775808 * 2"),
        "(1 - (-9223372036854775808 * 2))"
    );
    assert_eq!(expr("- -9223372036854775808"), "(--9223372036854775808)");
    let stmts = main_stmts("let v =   -9223372036854775808;");
    let StmtKind::Let { init, .. } = &stmts[0].kind else {
        panic!("let expected");
    };
    assert_eq!(init.span, Span::new(1, 11));
    assert!(matches!(init.kind, ExprKind::Int(i64::MIN)));
}

#[test]
fn out_of_range_integers_are_errors() {
    let msg = "integer literal does not fit in a signed 64-bit integer".to_string();
    assert_eq!(error("let v = 9223372036854775808;"), (1, 9, msg.clone()));
    assert_eq!(error("let v = 0x8000000000000000;"), (1, 9, msg.clone()));
    assert_eq!(error("let v = -9223372036854775809;"), (1, 10, msg.clone()));
    assert_eq!(
        error("let v = -9223372036854775808[0];"),
        (1, 10, msg.clone())
    );
    assert_eq!(error("let v = 99999999999999999999;"), (1, 9, msg));
}

#[test]
fn calls_indexing_and_arrays() {
    assert_eq!(expr("f()"), "f()");
    assert_eq!(expr("f(1, g(2), 3,)"), "f(1, g(2), 3)");
    assert_eq!(expr("a[i + 1][j]"), "a[(i + 1)][j]");
    assert_eq!(expr("f(x)[0]"), "f(x)[0]");
    assert_eq!(expr("[]"), "[]");
    assert_eq!(expr("[1, 2, 3,]"), "[1, 2, 3]");
    assert_eq!(expr("[[0; m]; n]"), "[[0; m]; n]");
    assert_eq!(expr("[1 + 2]"), "[(1 + 2)]");
}

#[test]
fn expression_spans() {
    let stmts = main_stmts("let v = a + f(b)[c * 2];");
    let StmtKind::Let { init, .. } = &stmts[0].kind else {
        panic!("let expected");
    };
    assert_eq!(init.span, Span::new(1, 11), "binary: the operator");
    let ExprKind::Binary { lhs, rhs, .. } = &init.kind else {
        panic!("binary expected");
    };
    assert_eq!(lhs.span, Span::new(1, 9), "name: its first character");
    assert_eq!(rhs.span, Span::new(1, 17), "index: the '['");
    let ExprKind::Index { array, index } = &rhs.kind else {
        panic!("index expected");
    };
    assert_eq!(array.span, Span::new(1, 13), "call: the callee name");
    assert_eq!(index.span, Span::new(1, 20));
    let stmts = main_stmts("let v = (-[1]);");
    let StmtKind::Let { init, .. } = &stmts[0].kind else {
        panic!("let expected");
    };
    assert_eq!(init.span, Span::new(1, 10), "unary: the operator");
    let ExprKind::Unary { operand, .. } = &init.kind else {
        panic!("unary expected");
    };
    assert_eq!(operand.span, Span::new(1, 11), "array literal: the '['");
}

#[test]
fn functions_and_main() {
    let program = parse(
        "print(1);\nfn f(a: int, b: [[str]],) -> [float] { return []; }\nfn g() {}\nlet x = 2;",
    )
    .expect("parses");
    assert_eq!(program.functions.len(), 2);
    let f = &program.functions[0];
    assert_eq!(f.name, "f");
    assert_eq!(f.span, Span::new(2, 1));
    assert_eq!(f.params.len(), 2);
    assert_eq!(f.params[0].name, "a");
    assert_eq!(f.params[0].ty, Type::Int);
    assert_eq!(f.params[0].span, Span::new(2, 6));
    assert_eq!(f.params[0].local, UNRESOLVED);
    assert_eq!(
        f.params[1].ty,
        Type::Array(Box::new(Type::Array(Box::new(Type::Str))))
    );
    assert_eq!(f.ret, Some(Type::Array(Box::new(Type::Float))));
    assert_eq!(f.body.span, Span::new(2, 38));
    assert_eq!(program.functions[1].name, "g");
    assert_eq!(program.functions[1].ret, None);
    assert_eq!(program.main.body.stmts.len(), 2);
}

#[test]
fn statements_and_their_spans() {
    let stmts = main_stmts(
        "let a: [int] = [];\n\
         a[0] += 1;\n\
         x = 2;\n\
         if a { } else if b { } else { }\n\
         while c { break; continue; }\n\
         for i in 0..n { }\n\
         { return; }\n\
         f(x);\n",
    );
    let spans: Vec<(u32, u32)> = stmts.iter().map(|s| (s.span.line, s.span.col)).collect();
    assert_eq!(
        spans,
        vec![
            (1, 1),
            (2, 6),
            (3, 3),
            (4, 1),
            (5, 1),
            (6, 1),
            (7, 1),
            (8, 1)
        ]
    );
    assert!(matches!(
        &stmts[0].kind,
        StmtKind::Let { name, ty: Some(Type::Array(_)), local: UNRESOLVED, .. } if name == "a"
    ));
    assert!(matches!(
        &stmts[1].kind,
        StmtKind::Assign {
            target: Expr {
                kind: ExprKind::Index { .. },
                ..
            },
            op: Some(BinOp::Add),
            ..
        }
    ));
    assert!(matches!(&stmts[2].kind, StmtKind::Assign { op: None, .. }));
    let StmtKind::If {
        else_block: Some(else_block),
        ..
    } = &stmts[3].kind
    else {
        panic!("if with else expected");
    };
    assert_eq!(else_block.span, Span::new(4, 15), "else if: the 'if'");
    assert!(matches!(
        &else_block.stmts[..],
        [Stmt {
            kind: StmtKind::If {
                else_block: Some(_),
                ..
            },
            ..
        }]
    ));
    let StmtKind::While { body, .. } = &stmts[4].kind else {
        panic!("while expected");
    };
    assert!(matches!(body.stmts[0].kind, StmtKind::Break));
    assert!(matches!(body.stmts[1].kind, StmtKind::Continue));
    let StmtKind::For { var, var_span, .. } = &stmts[5].kind else {
        panic!("for expected");
    };
    assert_eq!((var.as_str(), *var_span), ("i", Span::new(6, 5)));
    let StmtKind::Block(block) = &stmts[6].kind else {
        panic!("block expected");
    };
    assert!(matches!(block.stmts[0].kind, StmtKind::Return(None)));
    assert!(matches!(&stmts[7].kind, StmtKind::Expr(_)));
    let stmts = main_stmts("compound(); x -= 1; x *= 1; x /= 1; x %= 1; return 1 + 2;");
    let ops: Vec<Option<BinOp>> = stmts
        .iter()
        .filter_map(|s| match &s.kind {
            StmtKind::Assign { op, .. } => Some(*op),
            _ => None,
        })
        .collect();
    assert_eq!(
        ops,
        vec![
            Some(BinOp::Sub),
            Some(BinOp::Mul),
            Some(BinOp::Div),
            Some(BinOp::Rem)
        ]
    );
    assert!(matches!(stmts[5].kind, StmtKind::Return(Some(_))));
}

#[test]
fn syntax_errors_point_at_the_offending_token() {
    assert_eq!(
        error("let x = 1"),
        (1, 10, "expected ';', found end of file".into())
    );
    assert_eq!(
        error("let = 1;"),
        (1, 5, "expected a variable name, found '='".into())
    );
    assert_eq!(
        error("let x = ;"),
        (1, 9, "expected an expression, found ';'".into())
    );
    assert_eq!(
        error("let x = (1;"),
        (1, 11, "expected ')', found ';'".into())
    );
    assert_eq!(
        error("f(1 2);"),
        (1, 5, "expected ')', found integer literal".into())
    );
    assert_eq!(
        error("if x { "),
        (1, 8, "expected '}', found end of file".into())
    );
    assert_eq!(
        error("}"),
        (1, 1, "expected an expression, found '}'".into())
    );
    assert_eq!(
        error("fn (x: int) {}"),
        (1, 4, "expected a function name, found '('".into())
    );
    assert_eq!(
        error("fn f(x) {}"),
        (1, 7, "expected ':', found ')'".into())
    );
    assert_eq!(
        error("fn f(x: num) {}"),
        (1, 9, "unknown type 'num'".into())
    );
    assert_eq!(
        error("fn f() -> [int {}"),
        (1, 16, "expected ']', found '{'".into())
    );
    assert_eq!(
        error("let a: = 1;"),
        (1, 8, "expected a type, found '='".into())
    );
    assert_eq!(
        error("for i 0..3 {}"),
        (1, 7, "expected 'in', found integer literal".into())
    );
    assert_eq!(
        error("for i in 0 {}"),
        (1, 12, "expected '..', found '{'".into())
    );
    assert_eq!(
        error("while x print(1);"),
        (1, 9, "expected '{', found identifier 'print'".into())
    );
    assert_eq!(
        error("break"),
        (1, 6, "expected ';', found end of file".into())
    );
    assert_eq!(
        error("x = 1 = 2;"),
        (1, 7, "expected ';', found '='".into())
    );
    assert_eq!(
        error("let s = \"a\\q\";"),
        (1, 11, "unknown escape sequence '\\q'".into())
    );
    assert_eq!(
        error("if c {\n  fn g() {}\n}"),
        (
            2,
            3,
            "functions can only be declared at the top level".into()
        )
    );
    assert_eq!(
        error("x + 1;"),
        (1, 1, "expression statement must be a call".into())
    );
    assert_eq!(
        error("  x;"),
        (1, 3, "expression statement must be a call".into())
    );
    assert_eq!(
        error("f() = 3;"),
        (
            1,
            1,
            "invalid left-hand side of assignment: expected a variable or an array element".into()
        )
    );
    assert_eq!(
        error("(a + b) += 3;"),
        (
            1,
            1,
            "invalid left-hand side of assignment: expected a variable or an array element".into()
        )
    );
    assert_eq!(
        error("a <<= 1;"),
        (1, 5, "expected an expression, found '='".into())
    );
    assert_eq!(
        error("else { }"),
        (1, 1, "expected an expression, found 'else'".into())
    );
}

#[test]
fn deep_parentheses_are_a_clear_error() {
    big_stack(|| {
        let source = format!("let x = {}1{};", "(".repeat(10_000), ")".repeat(10_000));
        let d = parse(&source).expect_err("too deep");
        assert_eq!(
            d.message,
            "expression nested too deeply (the limit is 1000 levels)"
        );
        assert_eq!(d.span, Span::new(1, 9 + 1000));
        // Exactly at the limit is fine.
        let n = MAX_NESTING as usize;
        let source = format!("let x = {}1{};", "(".repeat(n), ")".repeat(n));
        assert!(parse(&source).is_ok());
    });
}

#[test]
fn deep_unary_arrays_indexes_and_types_are_clear_errors() {
    big_stack(|| {
        let nested = "expression nested too deeply (the limit is 1000 levels)";
        for source in [
            format!("let x = {}1;", "-".repeat(5000)),
            format!("let x = {}true;", "!".repeat(5000)),
            format!("let x = {}1{};", "[".repeat(5000), "]".repeat(5000)),
            format!("let x = {}1{};", "a[".repeat(5000), "]".repeat(5000)),
            format!("let x = {}1{};", "f(".repeat(5000), ")".repeat(5000)),
        ] {
            let d = parse(&source).expect_err("too deep");
            assert_eq!(d.message, nested, "{}", &source[..20]);
        }
        let d = parse(&format!(
            "let a: {}int{} = 1;",
            "[".repeat(5000),
            "]".repeat(5000)
        ))
        .expect_err("too deep");
        assert_eq!(
            d.message,
            "type nested too deeply (the limit is 1000 levels)"
        );
    });
}

#[test]
fn deep_blocks_and_else_if_chains_are_clear_errors() {
    big_stack(|| {
        let blocks =
            "blocks nested too deeply (the limit is 1000 levels; each 'else if' counts as one)";
        let d = parse(&format!("{}{}", "{".repeat(5000), "}".repeat(5000))).expect_err("deep");
        assert_eq!(d.message, blocks);
        assert_eq!(d.span, Span::new(1, 1001));
        let d = parse(&format!(
            "{}{}",
            "while true {".repeat(5000),
            "}".repeat(5000)
        ))
        .expect_err("deep");
        assert_eq!(d.message, blocks);
        let chain = format!("if a {{ }}{} else {{ }}", " else if a { }".repeat(5000));
        let d = parse(&chain).expect_err("deep");
        assert_eq!(d.message, blocks);
        let chain = format!("if a {{ }}{} else {{ }}", " else if a { }".repeat(500));
        assert!(parse(&chain).is_ok());
    });
}

#[test]
fn long_operator_chains_parse_iteratively() {
    big_stack(|| {
        let source = format!("let x = 1{};", " + 1".repeat(20_000));
        let program = parse(&source).expect("a long chain parses");
        assert_eq!(program.main.body.stmts.len(), 1);
        let source = format!("let x = a{};", "[0]".repeat(20_000));
        assert!(parse(&source).is_ok());
        let source = format!("let x = 1{};", " + 1".repeat(MAX_EXPR_DEPTH as usize + 10));
        let d = parse(&source).expect_err("too long");
        assert_eq!(
            d.message,
            "expression too long or too deeply nested (the limit is 100000 levels)"
        );
    });
}

/// A random expression over `a`..`e`, as (fully parenthesized form,
/// minimally parenthesized source, precedence level of the top).
fn random_expression(seed: &mut u64, depth: u32) -> (String, String, u8) {
    const OPS: [(&str, u8); 18] = [
        ("||", 1),
        ("&&", 2),
        ("==", 3),
        ("!=", 3),
        ("<", 4),
        ("<=", 4),
        (">", 4),
        (">=", 4),
        ("|", 5),
        ("^", 6),
        ("&", 7),
        ("<<", 8),
        (">>", 8),
        ("+", 9),
        ("-", 9),
        ("*", 10),
        ("/", 10),
        ("%", 10),
    ];
    let mut next = |n: u64| {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        (*seed % n) as usize
    };
    let choice = next(8);
    if depth == 0 || choice == 0 {
        let name = ["a", "b", "c", "d", "e"][next(5)];
        return (name.to_string(), name.to_string(), 13);
    }
    if choice == 1 {
        let (full, source, level) = random_expression(seed, depth - 1);
        let source = if level < 11 {
            format!("({source})")
        } else {
            source
        };
        return (format!("(-{full})"), format!("-{source}"), 11);
    }
    let (op, level) = OPS[next(OPS.len() as u64)];
    let (lhs_full, lhs, lhs_level) = random_expression(seed, depth - 1);
    let (rhs_full, rhs, rhs_level) = random_expression(seed, depth - 1);
    // Left associative: a left operand of the same level needs no
    // parentheses, a right one does.
    let lhs = if lhs_level < level {
        format!("({lhs})")
    } else {
        lhs
    };
    let rhs = if rhs_level <= level {
        format!("({rhs})")
    } else {
        rhs
    };
    (
        format!("({lhs_full} {op} {rhs_full})"),
        format!("{lhs} {op} {rhs}"),
        level,
    )
}

#[test]
fn random_expressions_parse_with_the_precedence_table() {
    let mut seed = 0x1234_5678_9ABC_DEF1;
    for _ in 0..2000 {
        let (full, source, _) = random_expression(&mut seed, 6);
        assert_eq!(expr(&source), full, "source: {source}");
    }
}
