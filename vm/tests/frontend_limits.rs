//! The front end's limits: deep nesting and huge inputs end in a clear
//! error or a correct result, never a crash. Like `toyvm`, every test runs
//! the front end on a thread with a 512 MiB stack.

use vm::front::ast::{ExprKind, Program, StmtKind, Type};
use vm::front::check::check;
use vm::front::diag::Diagnostic;
use vm::front::parser::{MAX_EXPR_DEPTH, MAX_NESTING, parse};

/// Parses and checks `source` on a front-end-sized stack and hands the
/// result to `inspect` there too: a deep tree must also be dropped on a
/// big stack, since dropping it recurses.
fn front_end<T: Send + 'static>(
    source: String,
    inspect: impl FnOnce(Result<Program, Diagnostic>) -> T + Send + 'static,
) -> T {
    std::thread::Builder::new()
        .stack_size(512 << 20)
        .spawn(move || {
            let result = parse(&source).and_then(|mut program| {
                check(&mut program)?;
                Ok(program)
            });
            inspect(result)
        })
        .expect("spawn the front-end thread")
        .join()
        .expect("the front end does not panic")
}

fn error_message(source: String) -> String {
    front_end(source, |result| result.expect_err("an error").message)
}

fn valid(source: String, inspect: impl FnOnce(Program) + Send + 'static) {
    front_end(source, |result| inspect(result.expect("a valid program")));
}

#[test]
fn empty_file_is_an_empty_program() {
    valid(String::new(), |program| {
        assert!(program.functions.is_empty());
        assert!(program.main.body.stmts.is_empty());
        assert!(program.main.locals.is_empty());
    });
}

#[test]
fn ten_thousand_parentheses_are_a_clear_error() {
    let source = format!("print({}1{});", "(".repeat(10_000), ")".repeat(10_000));
    let d = front_end(source, |result| result.expect_err("too deep"));
    // `print(` is the first level, so the 1001st is the 1000th '('.
    assert_eq!(
        d.message,
        "expression nested too deeply (the limit is 1000 levels)"
    );
    assert_eq!((d.span.line, d.span.col), (1, 1006));
}

#[test]
fn nesting_up_to_the_limit_is_accepted() {
    let n = MAX_NESTING as usize - 1;
    let source = format!(
        "let x = {}1{};\nlet a = {}1{};\n{}{}",
        "(".repeat(n),
        ")".repeat(n),
        "[".repeat(n),
        "]".repeat(n),
        "{".repeat(n),
        "}".repeat(n),
    );
    valid(source, move |program| {
        let StmtKind::Let { init, .. } = &program.main.body.stmts[1].kind else {
            panic!("let expected");
        };
        let mut depth = 0;
        let mut ty = &init.ty;
        while let Type::Array(element) = ty {
            depth += 1;
            ty = element;
        }
        assert_eq!((depth, ty), (n, &Type::Int));
    });
}

#[test]
fn deep_unary_chains_and_blocks_are_clear_errors() {
    assert_eq!(
        error_message(format!("let x = {}1;", "-".repeat(100_000))),
        "expression nested too deeply (the limit is 1000 levels)"
    );
    assert_eq!(
        error_message(format!("{}{}", "{".repeat(100_000), "}".repeat(100_000))),
        "blocks nested too deeply (the limit is 1000 levels; each 'else if' counts as one)"
    );
    assert_eq!(
        error_message(format!(
            "let x = {}0{};",
            "[".repeat(100_000),
            "]".repeat(100_000)
        )),
        "expression nested too deeply (the limit is 1000 levels)"
    );
}

#[test]
fn a_twenty_thousand_term_chain_checks() {
    valid(
        format!("let x = 1{};\nprint(x);", " + 1".repeat(20_000)),
        |program| {
            let StmtKind::Let { init, .. } = &program.main.body.stmts[0].kind else {
                panic!("let expected");
            };
            assert_eq!(init.ty, Type::Int);
            // Left-deep: the right operand of the top node is a literal.
            let ExprKind::Binary { rhs, .. } = &init.kind else {
                panic!("binary expected");
            };
            assert!(matches!(rhs.kind, ExprKind::Int(1)));
        },
    );
}

#[test]
fn chains_at_the_depth_limit_check() {
    let terms = MAX_EXPR_DEPTH as usize - 1;
    valid(
        format!("let b = true{};", " && true".repeat(terms)),
        |program| {
            assert_eq!(program.main.locals[0].ty, Type::Bool);
        },
    );
}

#[test]
fn a_ten_megabyte_chain_is_a_clear_error() {
    let source = format!("let x = 1{};", "+1".repeat(5_000_000));
    assert!(source.len() > 10_000_000);
    assert_eq!(
        error_message(source),
        "expression too long or too deeply nested (the limit is 100000 levels)"
    );
}

#[test]
fn a_ten_megabyte_program_checks() {
    let line = "x = x + len(a) * 2 - 1; a[0] = x % 7;\n";
    let source = format!(
        "let x = 0; let a = [1];\n{}",
        line.repeat(10_000_000 / line.len())
    );
    valid(source, |program| {
        assert!(program.main.body.stmts.len() > 500_000);
    });
}

#[test]
fn a_huge_array_literal_checks() {
    let source = format!("let a = [0{}];", ", 1".repeat(1_000_000));
    valid(source, |program| {
        assert_eq!(program.main.locals[0].ty, Type::Array(Box::new(Type::Int)));
    });
}
