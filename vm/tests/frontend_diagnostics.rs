//! End-to-end front-end errors as the user sees them: source text in,
//! rendered `PATH:LINE:COL: error: MESSAGE` with source line and caret out.

use vm::front::check::check;
use vm::front::diag::{Diagnostic, render, utf8_error};
use vm::front::parser::parse;

/// Parses and checks `source`; the rendered first error, if any.
fn compile(source: &str) -> Result<(), String> {
    let mut program = parse(source).map_err(|d| render("prog.toy", source, &d))?;
    check(&mut program).map_err(|d| render("prog.toy", source, &d))
}

fn rendered(source: &str) -> String {
    compile(source).expect_err("a compile error")
}

#[test]
fn a_type_error() {
    let source = "fn f() {}\n\nfn main() {\n    let x = 1 + true;\n}\n";
    assert_eq!(
        rendered(source),
        "prog.toy:4:17: error: mismatched types: expected int, found bool\n\
         \x20  4 |     let x = 1 + true;\n\
         \x20    |                 ^\n"
    );
}

#[test]
fn a_syntax_error_at_the_end_of_the_file() {
    assert_eq!(
        rendered("let x = 1\n"),
        "prog.toy:2:1: error: expected ';', found end of file\n\
         \x20  2 | \n\
         \x20    | ^\n"
    );
    assert_eq!(
        rendered("fn f() {\n  print(1);"),
        "prog.toy:2:12: error: expected '}', found end of file\n\
         \x20  2 |   print(1);\n\
         \x20    |            ^\n"
    );
}

#[test]
fn tabs_keep_the_caret_under_the_token() {
    let text = rendered("fn f() {\n\tif 1 { }\n}");
    assert_eq!(
        text,
        "prog.toy:2:5: error: mismatched types: expected bool, found int\n\
         \x20  2 |     if 1 { }\n\
         \x20    |        ^\n"
    );
}

#[test]
fn lexical_errors() {
    assert_eq!(
        rendered("print(\"a\\x\");"),
        "prog.toy:1:9: error: unknown escape sequence '\\x'\n\
         \x20  1 | print(\"a\\x\");\n\
         \x20    |         ^\n"
    );
    assert!(rendered("let big = 9223372036854775808;").starts_with(
        "prog.toy:1:11: error: integer literal does not fit in a signed 64-bit integer\n"
    ));
    assert!(compile("let small = -9223372036854775808;").is_ok());
}

#[test]
fn errors_deep_in_a_program_point_at_their_line() {
    let source = "fn fib(n: int) -> int {\n    if n < 2 { return n; }\n    return fib(n - 1) + fib(n - 2, 1);\n}\nprint(fib(30));\n";
    assert_eq!(
        rendered(source),
        "prog.toy:3:25: error: function 'fib' expects 1 argument, found 2\n\
         \x20  3 |     return fib(n - 1) + fib(n - 2, 1);\n\
         \x20    |                         ^\n"
    );
    assert!(
        rendered("print(1);\nwhile true {\n}\nbreak;\n")
            .starts_with("prog.toy:4:1: error: 'break' outside of a loop\n")
    );
    assert!(rendered("fn g() -> int {\n  print(1);\n}\n").starts_with(
        "prog.toy:1:1: error: missing return: function 'g' can reach the end of its body without returning int\n"
    ));
}

#[test]
fn invalid_utf8_is_located() {
    let bytes = [b"print(1);\nlet s = \"".as_slice(), &[0xC3, 0x28], b"\";\n"].concat();
    let err = std::str::from_utf8(&bytes).expect_err("not UTF-8");
    let d = utf8_error(&bytes, err);
    assert_eq!(
        d,
        Diagnostic::new(vm::front::ast::Span::new(2, 10), "file is not valid UTF-8")
    );
    // The caller renders it with the valid prefix (or a lossy copy).
    let lossy = String::from_utf8_lossy(&bytes);
    assert_eq!(
        render("bad.toy", &lossy, &d),
        "bad.toy:2:10: error: file is not valid UTF-8\n\
         \x20  2 | let s = \"\u{FFFD}(\";\n\
         \x20    |          ^\n"
    );
}

#[test]
fn valid_programs_compile() {
    compile("").expect("empty");
    compile("// just a comment\n").expect("comment");
    compile(
        "fn main() -> int { return 0; }\nlet code = main();\nprint(code);\nfor i in 0..3 { print(str(i) + \"!\"); }\n",
    )
    .expect("valid");
}
