//! End-to-end tests of the back end: Toy source → `driver::load` →
//! `driver::run_with`, checking stdout, stderr and the exit status.

use vm::driver::{self, Options};

struct Outcome {
    status: i32,
    stdout: String,
    stderr: String,
}

fn run_opts(source: &str, args: &[&str], options: &Options) -> Outcome {
    let module = match driver::load("t.toy", source.as_bytes()) {
        Ok(m) => m,
        Err(e) => panic!("compile error:\n{e}"),
    };
    let mut out = Vec::new();
    let mut err = Vec::new();
    let status = driver::run_with(
        &module,
        args.iter().map(|s| s.to_string()).collect(),
        options,
        &mut out,
        &mut err,
    );
    Outcome {
        status,
        stdout: String::from_utf8(out).unwrap(),
        stderr: String::from_utf8(err).unwrap(),
    }
}

fn run(source: &str) -> Outcome {
    run_opts(source, &[], &Options::default())
}

/// Runs a program that must succeed; returns its stdout.
fn ok(source: &str) -> String {
    let o = run(source);
    assert_eq!(o.status, 0, "stderr: {}", o.stderr);
    assert_eq!(o.stderr, "");
    o.stdout
}

#[test]
fn fib_and_calls() {
    let src = "fn fib(n: int) -> int {\n    if n < 2 { return n; }\n    return fib(n - 1) + fib(n - 2);\n}\nprint(fib(20));\n";
    assert_eq!(ok(src), "6765\n");
}

#[test]
fn print_formats() {
    let src = r#"
print(42);
print(-7);
print(1.0);
print(0.1);
print(1e100);
print(0.0 / 0.0);
print(1.0 / 0.0);
print(-1.0 / 0.0);
print(true);
print(false);
print("raw \"text\"");
print([1, 2, 3]);
print(["a", "b\"c"]);
print([[1.5], [], [2.0, 3.0]]);
print([true]);
let e: [int] = [];
print(e);
"#;
    assert_eq!(
        ok(src),
        "42\n-7\n1.0\n0.1\n1e100\nNaN\ninf\n-inf\ntrue\nfalse\nraw \"text\"\n[1, 2, 3]\n[\"a\", \"b\\\"c\"]\n[[1.5], [], [2.0, 3.0]]\n[true]\n[]\n"
    );
}

#[test]
fn integer_arithmetic_wraps_and_truncates() {
    let src = r#"
let big = 9223372036854775807;
print(big + 1);
print(-big - 1 - 1);
print(big * 2);
let min = -big - 1;
print(min / -1);
print(min % -1);
print(-min);
print(7 / -2);
print(-7 % 3);
print(7 % -3);
print(1 << 65);
print(-16 >> 2);
print(-1 >> 70);
print(6 & 3);
print(6 | 3);
print(6 ^ 3);
let x = 5;
x += 3; x -= 1; x *= 4; x /= 3; x %= 5;
print(x);
"#;
    assert_eq!(
        ok(src),
        "-9223372036854775808\n9223372036854775807\n-2\n-9223372036854775808\n0\n-9223372036854775808\n-3\n-1\n1\n2\n-4\n-1\n2\n7\n5\n4\n"
    );
}

#[test]
fn float_arithmetic_and_conversions() {
    let src = r#"
print(7.5 % 2.0);
print(-7.5 % 2.0);
print(int(3.99));
print(int(-3.99));
print(int(1e300));
print(int(-1e300));
print(int(0.0 / 0.0));
print(float(3));
print(sqrt(2.0));
print(str(12) + str(0.5) + str(true) + str("s"));
print(parse_int("-42") + 1);
print(parse_float("2.5e3"));
print(-(2.5));
"#;
    assert_eq!(
        ok(src),
        "1.5\n-1.5\n3\n-3\n9223372036854775807\n-9223372036854775808\n0\n3.0\n1.4142135623730951\n120.5trues\n-41\n2500.0\n-2.5\n"
    );
}

#[test]
fn comparisons_and_logic() {
    let src = r#"
let a = 3;
let b = 5;
print(a < b);
print(a > b);
print(a <= 3);
print(a >= 4);
print(a == 3 && b != 5);
print(a == 3 || b / 0 == 1);
print(!(a < b));
print("abc" < "abd");
print("b" > "abc");
print("x" == "x");
print("x" != "x");
print(1.5 < 2.5);
print(0.0 / 0.0 == 0.0 / 0.0);
print(true == false);
let n = 0.0 / 0.0;
if n < 1.0 { print("bad"); } else { print("nan is not less"); }
if !(n >= 1.0) { print("not ge"); }
let s = 0;
while s < 10 && s != 7 { s += 1; }
print(s);
"#;
    assert_eq!(
        ok(src),
        "true\nfalse\ntrue\nfalse\nfalse\ntrue\nfalse\ntrue\ntrue\ntrue\nfalse\ntrue\nfalse\nfalse\nnan is not less\nnot ge\n7\n"
    );
}

#[test]
fn loops_break_continue_and_for_semantics() {
    let src = r#"
let total = 0;
for i in 0..10 {
    if i == 2 { continue; }
    if i == 6 { break; }
    total += i;
}
print(total);
let n = 3;
for i in 0..n {
    n = 100;
    i = i * 10;
    print(i);
}
for i in 5..2 { print("never"); }
let j = 0;
while true {
    j += 1;
    if j < 3 { continue; }
    break;
}
print(j);
let count = 0;
for a in 0..3 { for b in 0..3 { if b > a { break; } count += 1; } }
print(count);
"#;
    assert_eq!(ok(src), "13\n0\n10\n20\n3\n6\n");
}

#[test]
fn arrays_share_by_reference_and_repeat_copies_deeply() {
    let src = r#"
let a = [1, 2, 3];
let b = a;
b[0] = 10;
push(a, 4);
print(a);
print(len(b));
print(pop(b));
print(a);
let grid = [[0; 3]; 2];
grid[0][1] = 5;
print(grid);
let row = [7, 8];
let rows = [row; 2];
rows[0][0] = 0;
print(rows);
print(row);
let names = ["x"; 3];
print(names);
let cube = [[[1; 2]; 2]; 2];
cube[1][1][1] = 9;
print(cube);
let c = [1, 2];
c[1] += 40;
print(c);
let zero = [0.5; 0];
print(zero);
"#;
    assert_eq!(
        ok(src),
        "[10, 2, 3, 4]\n4\n4\n[10, 2, 3]\n[[0, 5, 0], [0, 0, 0]]\n[[0, 8], [7, 8]]\n[7, 8]\n[\"x\", \"x\", \"x\"]\n[[[1, 1], [1, 1]], [[1, 1], [1, 9]]]\n[1, 42]\n[]\n"
    );
}

#[test]
fn evaluation_order_is_left_to_right_with_target_once() {
    let src = r#"
fn idx(log: [str], name: str, v: int) -> int {
    push(log, name);
    return v;
}
let log: [str] = [];
let a = [1, 2, 3];
a[idx(log, "i", 1)] += idx(log, "e", 10);
print(a);
print(log);
let l2: [str] = [];
let x = idx(l2, "a", 1) + idx(l2, "b", 2) * idx(l2, "c", 3);
print(x);
print(l2);
"#;
    assert_eq!(
        ok(src),
        "[1, 12, 3]\n[\"i\", \"e\"]\n7\n[\"a\", \"b\", \"c\"]\n"
    );
}

#[test]
fn strings() {
    let src = r#"
let s = "héllo";
print(len(s));
let t = s + ", " + "world";
print(t);
let acc = "";
for i in 0..5 { acc = acc + str(i); }
print(acc);
print("tab\there\\n");
"#;
    assert_eq!(ok(src), "6\nhéllo, world\n01234\ntab\there\\n\n");
}

#[test]
fn args_and_clock() {
    let src = r#"
let a = args();
print(a);
print(len(a));
a[0] = "changed";
print(args());
let t0 = clock();
let t1 = clock();
print(t1 >= t0);
"#;
    let o = run_opts(src, &["10", "x"], &Options::default());
    assert_eq!(o.status, 0, "{}", o.stderr);
    assert_eq!(o.stdout, "[\"10\", \"x\"]\n2\n[\"10\", \"x\"]\ntrue\n");
}

#[test]
fn functions_with_many_kinds_of_arguments() {
    let src = r#"
fn describe(name: str, xs: [int], scale: float, flag: bool) -> str {
    let total = 0;
    for i in 0..len(xs) { total += xs[i]; }
    return name + "=" + str(float(total) * scale) + " " + str(flag);
}
fn nothing() { }
fn early(n: int) {
    if n > 0 { print("positive"); return; }
    print("not positive");
}
nothing();
early(1);
early(-1);
print(describe("sum", [1, 2, 3], 0.5, !false));
print(describe("x" + "y", [len("abc")], 2.0, 1 > 2));
"#;
    assert_eq!(
        ok(src),
        "positive\nnot positive\nsum=3.0 true\nxy=6.0 false\n"
    );
}

#[test]
fn mutual_recursion_and_functions_declared_later() {
    let src = r#"
print(is_even(10));
print(is_odd(7));
fn is_even(n: int) -> bool { if n == 0 { return true; } return is_odd(n - 1); }
fn is_odd(n: int) -> bool { if n == 0 { return false; } return is_even(n - 1); }
"#;
    assert_eq!(ok(src), "true\ntrue\n");
}

#[test]
fn gc_stress_keeps_live_data() {
    // Builds far more garbage than the collection threshold while nested
    // arrays and strings held in locals, arrays and frames must survive.
    let src = r#"
fn make(n: int) -> [[str]] {
    let rows: [[str]] = [];
    for i in 0..n {
        let row: [str] = [];
        for j in 0..3 { push(row, str(i) + ":" + str(j)); }
        push(rows, row);
    }
    return rows;
}
fn churn(depth: int, keep: [int]) -> int {
    let junk = [0; 1000];
    junk[0] = depth;
    let s = "x" + str(depth);
    if depth == 0 { return len(keep); }
    return churn(depth - 1, keep) + junk[0] - depth + len(s) - len(s);
}
let keep = make(50);
let total = 0;
for round in 0..300 {
    let garbage = make(20);
    total += len(garbage);
    total += churn(5, [1, 2, 3]);
}
print(total);
print(keep[0]);
print(keep[49][2]);
print(len(keep));
"#;
    let expected = "6900\n[\"0:0\", \"0:1\", \"0:2\"]\n49:2\n50\n";
    assert_eq!(ok(src), expected);
    // Again, collecting at every allocation (fewer rounds: it is slow).
    let stress = Options {
        gc_stress: true,
        ..Options::default()
    };
    let small = src
        .replace("0..300", "0..3")
        .replace("print(total);", "print(total + 297 * 23);");
    let o = run_opts(&small, &[], &stress);
    assert_eq!(
        (o.status, o.stdout.as_str(), o.stderr.as_str()),
        (0, expected, "")
    );
}

#[test]
fn gc_stress_every_feature() {
    // Each allocating instruction collects; everything must stay intact.
    let src = r#"
fn pair(a: str, b: str) -> [str] { return [a, b]; }
let grid = [[1, 2]; 3];
let words: [str] = [];
for i in 0..20 {
    push(words, "w" + str(i));
    let p = pair(str(i), words[i]);
    grid[i % 3][0] += len(p);
}
let copy = [words; 2];
print(grid);
print(copy[1][19]);
print(len(copy[0]));
let s = "";
for i in 0..10 { s = s + str(float(i) * 1.5); }
print(s);
print(args());
"#;
    let stress = Options {
        gc_stress: true,
        ..Options::default()
    };
    let o = run_opts(src, &["a1"], &stress);
    assert_eq!(o.stderr, "");
    assert_eq!(
        o.stdout,
        "[[15, 2], [15, 2], [13, 2]]\nw19\n20\n0.01.53.04.56.07.59.010.512.013.5\n[\"a1\"]\n"
    );
}

#[test]
fn division_by_zero_reports_position_and_traceback() {
    let src = "fn f(x: int) -> int {\n    return 10 / x;\n}\nprint(1);\nprint(f(0));\n";
    let o = run(src);
    assert_eq!(o.status, 1);
    assert_eq!(o.stdout, "1\n");
    assert_eq!(
        o.stderr,
        "error: integer division by zero\n  at f (t.toy:2:15)\n  at <main> (t.toy:5:7)\n"
    );
}

#[test]
fn runtime_error_messages() {
    let cases = [
        ("print(1 % 0);", "integer modulo by zero"),
        (
            "let a = [1, 2, 3]; print(a[5]);",
            "index 5 out of range for array of length 3",
        ),
        (
            "let a = [1, 2, 3]; a[-1] = 0;",
            "index -1 out of range for array of length 3",
        ),
        (
            "let a: [int] = []; print(pop(a));",
            "pop from an empty array",
        ),
        ("let n = -3; let a = [0; n];", "negative array length: -3"),
        (
            "print(parse_int(\"abc\"));",
            "parse_int: invalid integer \"abc\"",
        ),
        (
            "print(parse_float(\"abc\"));",
            "parse_float: invalid float \"abc\"",
        ),
        ("let x = 0; x /= x;", "integer division by zero"),
        ("let a = [1]; a[0] %= 0;", "integer modulo by zero"),
    ];
    for (src, message) in cases {
        let o = run(src);
        assert_eq!(o.status, 1, "{src}");
        let first = o.stderr.lines().next().unwrap_or("");
        assert_eq!(first, format!("error: {message}"), "{src}");
        assert!(
            o.stderr
                .lines()
                .nth(1)
                .unwrap_or("")
                .starts_with("  at <main> (t.toy:1:"),
            "{}",
            o.stderr
        );
    }
}

#[test]
fn recursion_up_to_the_depth_limit() {
    let src = "fn down(n: int) -> int { if n == 0 { return 0; } return 1 + down(n - 1); }\nprint(down(parse_int(args()[0])));\n";
    // <main> is one frame and down(n) needs n + 1, so down(9998) fits in
    // 10000 frames and down(9999) does not.
    let o = run_opts(src, &["9998"], &Options::default());
    assert_eq!(
        (o.status, o.stdout.as_str(), o.stderr.as_str()),
        (0, "9998\n", "")
    );
    let o = run_opts(src, &["9999"], &Options::default());
    assert_eq!(o.status, 1);
    let lines: Vec<&str> = o.stderr.lines().collect();
    assert_eq!(
        lines[0],
        "error: call depth exceeded the limit of 10000 frames"
    );
    assert_eq!(lines.len(), 1 + 10 + 1 + 10);
    assert_eq!(lines[1], "  at down (t.toy:1:61)");
    assert_eq!(lines[11], "  ... 9980 frames omitted ...");
    assert_eq!(lines[21], "  at <main> (t.toy:2:7)");
}

#[test]
fn max_depth_option_is_honoured() {
    let src = "fn down(n: int) -> int { if n == 0 { return 0; } return 1 + down(n - 1); }\nprint(down(parse_int(args()[0])));\n";
    let small = Options {
        max_depth: 50,
        ..Options::default()
    };
    let o = run_opts(src, &["48"], &small);
    assert_eq!(o.stdout, "48\n");
    let o = run_opts(src, &["49"], &small);
    assert_eq!(
        o.stderr.lines().next(),
        Some("error: call depth exceeded the limit of 50 frames")
    );
    // A deep limit runs on a thread with a big enough native stack.
    let deep = Options {
        max_depth: 100_000,
        ..Options::default()
    };
    let o = run_opts(src, &["99998"], &deep);
    assert_eq!(
        (o.status, o.stdout.as_str()),
        (0, "99998\n"),
        "{}",
        o.stderr
    );
}

#[test]
fn compile_errors_are_rendered() {
    let err = driver::load("bad.toy", b"let x = 1 + true;\n").unwrap_err();
    assert!(err.starts_with("bad.toy:1:"), "{err}");
    let err = driver::load("bad.toy", b"print(1);\n\xff\n").unwrap_err();
    assert!(err.starts_with("bad.toy:2:1: error:"), "{err}");
}

#[test]
fn empty_program_runs() {
    assert_eq!(ok(""), "");
}

#[test]
fn many_locals_and_registers() {
    let mut src = String::new();
    for i in 0..200 {
        src += &format!("let v{i} = {i};\n");
    }
    src += "print(v0 + v199);\n";
    assert_eq!(ok(&src), "199\n");
    // Scoped locals free their registers, so many blocks are fine.
    let mut src = String::new();
    for i in 0..2000 {
        src += &format!("{{ let a{i} = {i}; let s{i} = str(a{i}); }}\n");
    }
    assert_eq!(ok(&src), "");
}

#[test]
fn too_many_live_locals_is_a_compile_error_not_a_crash() {
    let mut src = String::new();
    for i in 0..400 {
        src += &format!("let v{i} = {i};\n");
    }
    let err = driver::load("big.toy", src.as_bytes()).unwrap_err();
    assert!(err.contains("too many registers"), "{err}");
}
