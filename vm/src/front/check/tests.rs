//! Checker unit tests: every rule, accepted and rejected.

use super::*;
use crate::front::ast::{Callee, Stmt, StmtKind};
use crate::front::parser::parse;

fn checked(source: &str) -> Program {
    let mut program = parse(source).expect("parses");
    if let Err(d) = check(&mut program) {
        panic!(
            "unexpected error {}:{}: {}",
            d.span.line, d.span.col, d.message
        );
    }
    program
}

fn ok(source: &str) {
    checked(source);
}

fn error(source: &str) -> (u32, u32, String) {
    let mut program = parse(source).expect("parses");
    let d = check(&mut program).expect_err("a type error");
    (d.span.line, d.span.col, d.message)
}

fn message(source: &str) -> String {
    error(source).2
}

/// The initializer of the `index`th statement of `<main>`, a `let`.
fn init(program: &Program, index: usize) -> &Expr {
    match &program.main.body.stmts[index].kind {
        StmtKind::Let { init, .. } => init,
        other => panic!("not a let: {other:?}"),
    }
}

fn int_array() -> Type {
    Type::Array(Box::new(Type::Int))
}

#[test]
fn empty_program_checks() {
    let program = checked("");
    assert!(program.main.locals.is_empty());
}

#[test]
fn literal_and_operator_types() {
    let program = checked(
        "let a = 1; let b = 1.5; let c = true; let d = \"s\";\n\
         let e = 1 + 2 * 3 % 4 - 5 / 6; let f = 1.0 / 2.0;\n\
         let g = \"a\" + \"b\"; let h = 1 < 2; let i = \"a\" <= \"b\"; let j = 1.0 >= 2.0;\n\
         let k = 1 == 2; let l = true != false; let m = \"a\" == \"b\"; let n = 0.5 == 0.5;\n\
         let o = 1 & 2 | 3 ^ 4 << 5 >> 6; let p = -1; let q = -1.5; let r = !true;\n\
         let s = true && false || true; let t = [1, 2]; let u = [[1.5]]; let v = [\"x\"; 3];\n\
         let w = t[0]; let x = u[0]; let y = len(t);",
    );
    let types: Vec<String> = (0..25).map(|i| init(&program, i).ty.to_string()).collect();
    assert_eq!(
        types,
        [
            "int",
            "float",
            "bool",
            "str",
            "int",
            "float",
            "str",
            "bool",
            "bool",
            "bool",
            "bool",
            "bool",
            "bool",
            "bool",
            "int",
            "int",
            "float",
            "bool",
            "bool",
            "[int]",
            "[[float]]",
            "[str]",
            "int",
            "[float]",
            "int"
        ]
    );
}

#[test]
fn every_subexpression_gets_a_type() {
    let program = checked("let a = [1]; let x = -a[0] + len(a) * 2;");
    let e = init(&program, 1);
    let ExprKind::Binary { lhs, rhs, .. } = &e.kind else {
        panic!("binary expected")
    };
    assert_eq!(lhs.ty, Type::Int);
    assert_eq!(rhs.ty, Type::Int);
    let ExprKind::Unary { operand, .. } = &lhs.kind else {
        panic!("unary expected")
    };
    assert_eq!(operand.ty, Type::Int);
    let ExprKind::Index { array, index } = &operand.kind else {
        panic!("index expected")
    };
    assert_eq!(array.ty, int_array());
    assert_eq!(index.ty, Type::Int);
}

#[test]
fn no_implicit_conversions() {
    assert_eq!(
        error("let x = 1 + 2.0;"),
        (1, 13, "mismatched types: expected int, found float".into())
    );
    assert_eq!(
        error("let x = 1 + true;"),
        (1, 13, "mismatched types: expected int, found bool".into())
    );
    assert_eq!(
        error("let x: float = 1;"),
        (1, 16, "mismatched types: expected float, found int".into())
    );
    assert_eq!(
        error("let x = 1.5 < 2;"),
        (1, 15, "mismatched types: expected float, found int".into())
    );
    assert_eq!(
        error("let x = \"a\" + 1;"),
        (1, 15, "mismatched types: expected str, found int".into())
    );
    // The operand's start, not its operator, is where the caret goes.
    assert_eq!(
        error("let x = 1 + (2.0 * 3.0);"),
        (1, 14, "mismatched types: expected int, found float".into())
    );
}

#[test]
fn operators_reject_wrong_types() {
    assert_eq!(
        error("let x = true + true;"),
        (1, 14, "operator '+' cannot be applied to type bool".into())
    );
    assert_eq!(
        message("let x = \"a\" - \"b\";"),
        "operator '-' cannot be applied to type str"
    );
    assert_eq!(
        message("let x = 1.5 % 2.5 & 1.0;"),
        "operator '&' cannot be applied to type float"
    );
    assert_eq!(
        message("let x = 1.5 << 2;"),
        "operator '<<' cannot be applied to type float"
    );
    assert_eq!(
        message("let x = true < false;"),
        "operator '<' cannot be applied to type bool"
    );
    assert_eq!(
        error("let a = [1]; let b = a == a;"),
        (
            1,
            24,
            "operator '==' cannot be applied to type [int] (arrays cannot be compared)".into()
        )
    );
    assert_eq!(
        message("let a = [1]; let b = a != [2];"),
        "operator '!=' cannot be applied to type [int] (arrays cannot be compared)"
    );
    assert_eq!(
        error("let x = -true;"),
        (1, 9, "operator '-' cannot be applied to type bool".into())
    );
    assert_eq!(
        message("let x = !1;"),
        "operator '!' cannot be applied to type int"
    );
    assert_eq!(
        error("let x = 1 && true;"),
        (1, 9, "mismatched types: expected bool, found int".into())
    );
    assert_eq!(
        error("let x = true || 0;"),
        (1, 17, "mismatched types: expected bool, found int".into())
    );
}

#[test]
fn variables_resolve_with_shadowing_and_fresh_ids() {
    let program = checked(
        "let x = 1;\nlet x = x + 1;\n{ let x = \"s\"; print(x); }\nprint(x);\nfor i in 0..x { let x = 2.0; print(x); }",
    );
    let main = &program.main;
    let names: Vec<(&str, String, u32)> = main
        .locals
        .iter()
        .map(|l| (l.name.as_str(), l.ty.to_string(), l.span.line))
        .collect();
    assert_eq!(
        names,
        vec![
            ("x", "int".to_string(), 1),
            ("x", "int".to_string(), 2),
            ("x", "str".to_string(), 3),
            ("i", "int".to_string(), 5),
            ("x", "float".to_string(), 5),
        ]
    );
    let stmts = &main.body.stmts;
    // `let x = x + 1` reads the first x and declares the second.
    let StmtKind::Let { init, local, .. } = &stmts[1].kind else {
        panic!("let expected")
    };
    assert_eq!(*local, 1);
    let ExprKind::Binary { lhs, .. } = &init.kind else {
        panic!("binary expected")
    };
    assert!(matches!(lhs.kind, ExprKind::Local { local: 0, .. }));
    // After the block, `x` is the second one again.
    let StmtKind::Expr(Expr {
        kind: ExprKind::Call { args, .. },
        ..
    }) = &stmts[3].kind
    else {
        panic!("call expected")
    };
    assert!(matches!(args[0].kind, ExprKind::Local { local: 1, .. }));
    let StmtKind::For { local, .. } = &stmts[4].kind else {
        panic!("for expected")
    };
    assert_eq!(*local, 3);
    assert_eq!(main.locals[3].span, Span::new(5, 5), "for: the variable");
    assert_eq!(main.locals[1].span, Span::new(2, 1), "let: the keyword");
}

#[test]
fn parameters_come_first() {
    let program = checked("fn f(a: int, b: [str]) -> int { let c = a; return c; }");
    let f = &program.functions[0];
    assert_eq!(f.params[0].local, 0);
    assert_eq!(f.params[1].local, 1);
    let names: Vec<&str> = f.locals.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, ["a", "b", "c"]);
    assert_eq!(f.locals[1].ty, Type::Array(Box::new(Type::Str)));
    assert_eq!(f.locals[0].span, Span::new(1, 6));
    assert_eq!(f.name, "f");
    assert_eq!(program.main.name, "<main>");
}

#[test]
fn unknown_and_out_of_scope_names() {
    assert_eq!(error("print(y);"), (1, 7, "unknown variable 'y'".into()));
    assert_eq!(
        error("{ let y = 1; }\nprint(y);"),
        (2, 7, "unknown variable 'y'".into())
    );
    assert_eq!(
        message("for i in 0..3 { }\nprint(i);"),
        "unknown variable 'i'"
    );
    assert_eq!(message("let x = x;"), "unknown variable 'x'");
    assert_eq!(error("foo(1);"), (1, 1, "unknown function 'foo'".into()));
    assert_eq!(
        message("fn f() {}\nlet x = f;"),
        "'f' is a function, not a variable"
    );
    assert_eq!(
        message("let x = len;"),
        "'len' is a function, not a variable"
    );
    assert_eq!(
        error("let g = 1;\ng(2);"),
        (2, 1, "'g' is a variable, not a function".into())
    );
    // Functions do not see the script body's locals.
    assert_eq!(
        error("let g = 1;\nfn f() -> int { return g; }"),
        (2, 24, "unknown variable 'g'".into())
    );
    // Locals may share a name with a function or builtin.
    ok("let len = 3; let a = [len]; print(len(a));");
}

#[test]
fn functions_are_visible_before_and_after_declaration() {
    let program = checked(
        "print(even(10));\n\
         fn even(n: int) -> bool { if n == 0 { return true; } return odd(n - 1); }\n\
         fn odd(n: int) -> bool { if n == 0 { return false; } return even(n - 1); }",
    );
    let StmtKind::Expr(Expr {
        kind: ExprKind::Call { callee, args, .. },
        ty,
        ..
    }) = &program.main.body.stmts[0].kind
    else {
        panic!("call expected")
    };
    assert_eq!(*callee, Callee::Builtin(Builtin::Print));
    assert_eq!(*ty, Type::Void);
    assert!(matches!(
        args[0].kind,
        ExprKind::Call {
            callee: Callee::Function(0),
            ..
        }
    ));
    assert_eq!(args[0].ty, Type::Bool);
}

#[test]
fn duplicate_and_builtin_function_names() {
    assert_eq!(
        error("fn f() {}\nfn g() {}\nfn f() {}"),
        (3, 1, "function 'f' is already defined".into())
    );
    assert_eq!(
        error("fn len(a: int) -> int { return a; }"),
        (1, 1, "cannot redefine builtin function 'len'".into())
    );
    assert_eq!(
        message("fn print() {}"),
        "cannot redefine builtin function 'print'"
    );
    assert_eq!(
        error("fn f(a: int, a: int) {}"),
        (1, 14, "parameter 'a' is declared more than once".into())
    );
    ok("fn main() {} main();");
}

#[test]
fn call_arity_and_argument_types() {
    let src = "fn f(a: int, b: str) {}\n";
    assert_eq!(
        error(&format!("{src}f(1, \"x\", 3);")),
        (2, 1, "function 'f' expects 2 arguments, found 3".into())
    );
    assert_eq!(
        error(&format!("{src}f(1.0, \"x\");")),
        (2, 3, "mismatched types: expected int, found float".into())
    );
    assert_eq!(
        message("fn g(a: int) {}\ng();"),
        "function 'g' expects 1 argument, found 0"
    );
    assert_eq!(
        message("print();"),
        "function 'print' expects 1 argument, found 0"
    );
    assert_eq!(
        message("print(1, 2);"),
        "function 'print' expects 1 argument, found 2"
    );
    assert_eq!(
        message("let c = clock(1);"),
        "function 'clock' expects 0 arguments, found 1"
    );
    assert_eq!(
        message("let a = [1]; push(a);"),
        "function 'push' expects 2 arguments, found 1"
    );
}

#[test]
fn void_calls_are_not_values() {
    let src = "fn g() {}\n";
    assert_eq!(
        error(&format!("{src}let x = g();")),
        (2, 9, "function 'g' does not return a value".into())
    );
    assert_eq!(
        message(&format!("{src}print(g());")),
        "function 'g' does not return a value"
    );
    assert_eq!(
        message(&format!("{src}let x = 1 + g();")),
        "function 'g' does not return a value"
    );
    assert_eq!(
        message("let a = [1]; let x = push(a, 2);"),
        "function 'push' does not return a value"
    );
    assert_eq!(
        message("let x = [print(1)];"),
        "function 'print' does not return a value"
    );
    // As a statement it is fine, and so is discarding a value.
    ok("fn g() {}\nfn h() -> int { return 1; }\ng(); h(); print(1);");
}

#[test]
fn builtin_signatures() {
    let program = checked(
        "let a = [1.5];\n\
         let l = len(a); let m = len(\"abc\"); push(a, 2.5); let p = pop(a);\n\
         let s = sqrt(2.0); let c = clock(); let g = args(); let i = parse_int(\"1\");\n\
         let f = parse_float(\"1.5\"); let j = int(1.5); let k = int(3); let x = float(3);\n\
         let y = float(1.5); let z = str(1); let z2 = str(1.5); let z3 = str(true); let z4 = str(\"s\");\n\
         print(a); print(1); print(true); print([[1]]);",
    );
    let types: Vec<String> = [1, 2, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17]
        .iter()
        .map(|&i| init(&program, i).ty.to_string())
        .collect();
    assert_eq!(
        types,
        [
            "int", "int", "float", "float", "float", "[str]", "int", "float", "int", "int",
            "float", "float", "str", "str", "str", "str"
        ]
    );
    let callees: Vec<Callee> = program.main.body.stmts[1..]
        .iter()
        .filter_map(|s| match &s.kind {
            StmtKind::Let {
                init:
                    Expr {
                        kind: ExprKind::Call { callee, .. },
                        ..
                    },
                ..
            }
            | StmtKind::Expr(Expr {
                kind: ExprKind::Call { callee, .. },
                ..
            }) => Some(*callee),
            _ => None,
        })
        .collect();
    assert!(callees.contains(&Callee::Builtin(Builtin::ParseFloat)));
    assert!(callees.iter().all(|c| matches!(c, Callee::Builtin(_))));
}

#[test]
fn builtin_argument_errors() {
    assert_eq!(
        error("let n = len(5);"),
        (
            1,
            13,
            "mismatched types: expected an array or str, found int".into()
        )
    );
    assert_eq!(
        message("push(1, 2);"),
        "mismatched types: expected an array, found int"
    );
    assert_eq!(
        message("let a = [1]; push(a, 1.5);"),
        "mismatched types: expected int, found float"
    );
    assert_eq!(
        message("let x = pop(\"s\");"),
        "mismatched types: expected an array, found str"
    );
    assert_eq!(
        message("let x = sqrt(2);"),
        "mismatched types: expected float, found int"
    );
    assert_eq!(
        message("let x = parse_int(2);"),
        "mismatched types: expected str, found int"
    );
    assert_eq!(
        message("let x = parse_float(2.0);"),
        "mismatched types: expected str, found float"
    );
    assert_eq!(
        message("let x = int(\"2\");"),
        "mismatched types: expected int or float, found str"
    );
    assert_eq!(
        message("let x = float(true);"),
        "mismatched types: expected int or float, found bool"
    );
    assert_eq!(
        message("let x = str([1]);"),
        "mismatched types: expected int, float, bool or str, found [int]"
    );
}

#[test]
fn indexing() {
    assert_eq!(
        error("let x = 5; let y = x[0];"),
        (1, 21, "cannot index into a value of type int".into())
    );
    assert_eq!(
        message("let s = \"abc\"; let c = s[0];"),
        "cannot index into a value of type str"
    );
    assert_eq!(
        error("let a = [1]; let y = a[1.0];"),
        (1, 24, "mismatched types: expected int, found float".into())
    );
    ok("let m = [[0; 3]; 3]; m[1][2] = 5; m[0][0] += m[1][2];");
}

#[test]
fn array_literals() {
    assert_eq!(
        error("let a = [1, 2.0];"),
        (1, 13, "mismatched types: expected int, found float".into())
    );
    assert_eq!(
        error("let a = [1; 2.0];"),
        (1, 13, "mismatched types: expected int, found float".into())
    );
    assert_eq!(
        error("let a: [float] = [1];"),
        (1, 19, "mismatched types: expected float, found int".into())
    );
    assert_eq!(
        error("let a: [int] = 1;"),
        (1, 16, "mismatched types: expected [int], found int".into())
    );
    ok("let a = [[1], [2, 3]]; let b: [[int]] = [[], [1]]; let c = [[1.5]; 2];");
}

#[test]
fn empty_array_literals_take_the_expected_type() {
    let program = checked(
        "fn f(a: [int]) -> [str] { return []; }\n\
         let a: [int] = [];\n\
         let b: [[int]] = [[], []];\n\
         let c: [[str]] = [[]; 3];\n\
         a = [];\n\
         b[0] = [];\n\
         push(b, []);\n\
         let d = f([]);",
    );
    assert_eq!(init(&program, 0).ty, int_array());
    assert_eq!(init(&program, 1).ty, Type::Array(Box::new(int_array())));
    let empty = "cannot infer the type of an empty array literal; annotate it";
    assert_eq!(error("let a = [];"), (1, 9, empty.into()));
    assert_eq!(message("print([]);"), empty);
    assert_eq!(message("let n = len([]);"), empty);
    assert_eq!(message("let a = [[]];"), empty);
    assert_eq!(
        message("let a: int = [];"),
        empty,
        "an expected non-array type does not type []"
    );
}

#[test]
fn assignments() {
    ok("let x = 1; x = 2; x += 1; x -= 1; x *= 2; x /= 2; x %= 2;");
    ok("let f = 1.5; f += 1.0; f %= 2.0; let s = \"a\"; s += \"b\"; s = \"c\";");
    ok("let a = [1]; a[0] = 2; a[0] += 3; let b = [\"x\"]; b[0] += \"y\";");
    assert_eq!(error("y = 1;"), (1, 1, "unknown variable 'y'".into()));
    assert_eq!(
        error("let x = 1; x = 1.5;"),
        (1, 16, "mismatched types: expected int, found float".into())
    );
    assert_eq!(
        error("let s = \"a\"; s -= \"b\";"),
        (1, 16, "operator '-=' cannot be applied to type str".into())
    );
    assert_eq!(
        message("let b = true; b += true;"),
        "operator '+=' cannot be applied to type bool"
    );
    assert_eq!(
        message("let a = [1]; a += [2];"),
        "operator '+=' cannot be applied to type [int]"
    );
    assert_eq!(
        message("let a = [1]; a[0] += 1.5;"),
        "mismatched types: expected int, found float"
    );
    assert_eq!(
        message("let a = 1; a[0] = 1;"),
        "cannot index into a value of type int"
    );
}

#[test]
fn conditions_must_be_bool() {
    assert_eq!(
        error("if 1 { }"),
        (1, 4, "mismatched types: expected bool, found int".into())
    );
    assert_eq!(
        message("if true { } else if \"s\" { }"),
        "mismatched types: expected bool, found str"
    );
    assert_eq!(
        message("while 0 { }"),
        "mismatched types: expected bool, found int"
    );
    assert_eq!(
        error("for i in 0.0..3 { }"),
        (1, 10, "mismatched types: expected int, found float".into())
    );
    assert_eq!(
        message("for i in 0..true { }"),
        "mismatched types: expected int, found bool"
    );
    ok("let n = 3; if n > 1 && n < 5 { } else if n == 0 { } else { }");
}

#[test]
fn break_and_continue_only_in_loops() {
    ok("while true { break; } for i in 0..3 { if i == 1 { continue; } { break; } }");
    assert_eq!(error("break;"), (1, 1, "'break' outside of a loop".into()));
    assert_eq!(
        error("if true {\n  continue;\n}"),
        (2, 3, "'continue' outside of a loop".into())
    );
    // Not across function boundaries, even when called from a loop.
    assert_eq!(
        error("fn f() { break; }\nwhile true { f(); }"),
        (1, 10, "'break' outside of a loop".into())
    );
    assert_eq!(
        message("for i in 0..2 { }\nbreak;"),
        "'break' outside of a loop"
    );
}

#[test]
fn return_values_match_the_signature() {
    ok("fn f() { return; }\nfn g() -> int { return 1; }\nreturn;");
    assert_eq!(
        error("fn f() {\n  return 1;\n}"),
        (
            2,
            3,
            "unexpected return value: function 'f' has no return type".into()
        )
    );
    assert_eq!(
        error("fn f() -> int {\n  return;\n}"),
        (
            2,
            3,
            "missing return value: function 'f' returns int".into()
        )
    );
    assert_eq!(
        error("fn f() -> int { return 1.0; }"),
        (1, 24, "mismatched types: expected int, found float".into())
    );
    assert_eq!(
        message("return 1;"),
        "unexpected return value: the script body has no return type"
    );
}

#[test]
fn every_path_must_return() {
    let missing = |name: &str, ty: &str| {
        format!(
            "missing return: function '{name}' can reach the end of its body without returning {ty}"
        )
    };
    assert_eq!(error("\nfn f() -> int { }"), (2, 1, missing("f", "int")));
    assert_eq!(
        message("fn f(c: bool) -> int { if c { return 1; } }"),
        missing("f", "int")
    );
    assert_eq!(
        message("fn f(c: bool) -> int { if c { return 1; } else if !c { return 2; } }"),
        missing("f", "int")
    );
    assert_eq!(
        message("fn f() -> str { while true { break; } }"),
        missing("f", "str")
    );
    assert_eq!(
        message("fn f(c: bool) -> int { while true { if c { break; } return 1; } }"),
        missing("f", "int")
    );
    assert_eq!(
        message("fn f() -> int { for i in 0..3 { return i; } }"),
        missing("f", "int")
    );
    assert_eq!(
        message("fn f(c: bool) -> int { while c { return 1; } }"),
        missing("f", "int")
    );
    ok("fn f() -> int { return 1; print(2); }");
    ok("fn f(c: bool) -> int { if c { return 1; } else { return 2; } }");
    ok("fn f(c: bool) -> int { if c { return 1; } else if !c { return 2; } else { return 3; } }");
    ok("fn f() -> int { { return 1; } }");
    ok("fn f() -> int { while true { } }");
    ok("fn f(c: bool) -> int { while true { while c { break; } if c { continue; } return 1; } }");
    ok("fn f(c: bool) -> int { while true { for i in 0..3 { break; } } }");
    ok("fn f(c: bool) -> int { if c { return 1; } return 2; }");
}

#[test]
fn expression_statements_may_discard_values() {
    let program = checked("fn h() -> int { return 1; } h();");
    let stmt: &Stmt = &program.main.body.stmts[0];
    let StmtKind::Expr(e) = &stmt.kind else {
        panic!("expression statement expected")
    };
    assert_eq!(e.ty, Type::Int);
}

#[test]
fn the_first_error_in_the_source_is_reported() {
    assert_eq!(
        error("fn f() -> int { return 1.0; }\nlet x = 1 + true;"),
        (1, 24, "mismatched types: expected int, found float".into())
    );
    assert_eq!(
        error("let x = 1 + true;\nfn f() -> int { return 1.0; }"),
        (1, 13, "mismatched types: expected int, found bool".into())
    );
}

#[test]
fn long_chains_check_on_the_front_end_stack() {
    std::thread::Builder::new()
        .stack_size(512 << 20)
        .spawn(|| {
            let source = format!("let x = 1{};\nprint(x);", " + 1".repeat(20_000));
            let program = checked(&source);
            assert_eq!(init(&program, 0).ty, Type::Int);
            let source = format!("let x = 1{} + 1.0;", " + 1".repeat(20_000));
            assert_eq!(
                error(&source).2,
                "mismatched types: expected int, found float"
            );
        })
        .expect("spawn")
        .join()
        .expect("no panic");
}
