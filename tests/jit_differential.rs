//! Differential test: random well-typed Toy programs must behave the same
//! (stdout, stderr, exit status) in the interpreter and the JIT tiers.
//!
//! A small generator writes programs with ints, floats, bools, strings and
//! arrays, `if`/`while`/`for` (with `break`/`continue`), calls between
//! functions, recursion, and runtime errors that come up naturally (a
//! divisor that happens to be 0, an index out of range, `pop` of an empty
//! array, `parse_int` of bad text, the call-depth limit). Each program runs
//! with `--no-jit`, `--jit-threshold 0` (everything compiled),
//! `--jit-threshold 3` (OSR and mixed interpreted/compiled frames), the
//! same compiled on the background thread (`--jit-background`), and on a
//! slow background thread (`TOYVM_JIT_DELAY_US`: code arrives while the
//! interpreter has run on). The seed is fixed, so failures reproduce; a
//! mismatch prints the program.

mod common;

use std::fmt::Write as _;

/// Programs per run (about 20-40 s on a 2-core machine in release).
const PROGRAMS: usize = 400;
const SEED: u64 = 0x7010_5eed_2026;

/// xorshift64*: small, deterministic, good enough for program shapes.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ty {
    Int,
    Float,
    Bool,
    Str,
    IntArr,
    FloatArr,
}

impl Ty {
    fn name(self) -> &'static str {
        match self {
            Ty::Int => "int",
            Ty::Float => "float",
            Ty::Bool => "bool",
            Ty::Str => "str",
            Ty::IntArr => "[int]",
            Ty::FloatArr => "[float]",
        }
    }
}

/// A generated function's signature.
struct FnSig {
    name: String,
    params: Vec<Ty>,
    ret: Ty,
}

struct Gen {
    rng: Rng,
    out: String,
    indent: usize,
    /// Variables in scope: (name, type, assignable).
    scopes: Vec<Vec<(String, Ty, bool)>>,
    fns: Vec<FnSig>,
    /// Functions the current body may call (earlier ones only).
    callable: usize,
    fresh: usize,
    loop_depth: usize,
}

const INT_LITERALS: &[&str] = &[
    "0",
    "1",
    "2",
    "3",
    "7",
    "-1",
    "-5",
    "10",
    "100",
    "1000000007",
    "9223372036854775807",
    "(-9223372036854775807 - 1)",
    "0x7f",
    "1_000",
];
const FLOAT_LITERALS: &[&str] = &[
    "0.0", "1.5", "-2.25", "0.1", "3.0", "1e10", "2.5e-3", "-0.0",
];
const STR_LITERALS: &[&str] = &[
    "\"\"", "\"a\"", "\"toy\"", "\"12\"", "\"x y\"", "\"-7\"", "\"3.5\"", "\"\\n\"",
];

impl Gen {
    fn new(seed: u64) -> Gen {
        Gen {
            rng: Rng(seed | 1),
            out: String::new(),
            indent: 0,
            scopes: vec![Vec::new()],
            fns: Vec::new(),
            callable: 0,
            fresh: 0,
            loop_depth: 0,
        }
    }

    fn line(&mut self, text: &str) {
        for _ in 0..self.indent {
            self.out.push_str("    ");
        }
        self.out.push_str(text);
        self.out.push('\n');
    }

    fn var_of(&mut self, ty: Ty, assignable: bool) -> Option<String> {
        let vars: Vec<String> = self
            .scopes
            .iter()
            .flatten()
            .filter(|(_, t, a)| *t == ty && (*a || !assignable))
            .map(|(n, _, _)| n.clone())
            .collect();
        (!vars.is_empty()).then(|| self.rng.pick(&vars).clone())
    }

    fn declare(&mut self, ty: Ty, assignable: bool) -> String {
        self.fresh += 1;
        let name = format!("v{}", self.fresh);
        if let Some(scope) = self.scopes.last_mut() {
            scope.push((name.clone(), ty, assignable));
        }
        name
    }

    fn call_of(&mut self, ty: Ty, depth: usize) -> Option<String> {
        let candidates: Vec<usize> = (0..self.callable)
            .filter(|&i| self.fns[i].ret == ty)
            .collect();
        if candidates.is_empty() {
            return None;
        }
        let i = *self.rng.pick(&candidates);
        let params = self.fns[i].params.clone();
        let args: Vec<String> = params.iter().map(|&p| self.expr(p, depth + 1)).collect();
        Some(format!("{}({})", self.fns[i].name, args.join(", ")))
    }

    fn expr(&mut self, ty: Ty, depth: usize) -> String {
        let leaf = depth >= 3 || self.rng.chance(30);
        if !leaf
            && self.rng.chance(12)
            && let Some(call) = self.call_of(ty, depth)
        {
            return call;
        }
        if (leaf || self.rng.chance(25))
            && let Some(v) = self.var_of(ty, false)
        {
            return v;
        }
        let d = depth + 1;
        match ty {
            Ty::Int => {
                if leaf {
                    return self.rng.pick(INT_LITERALS).to_string();
                }
                match self.rng.below(9) {
                    0..=3 => {
                        let op = *self
                            .rng
                            .pick(&["+", "-", "*", "/", "%", "&", "|", "^", "<<", ">>"]);
                        format!("({} {op} {})", self.expr(Ty::Int, d), self.expr(Ty::Int, d))
                    }
                    4 => format!("-{}", self.expr(Ty::Int, d)),
                    5 => format!("int({})", self.expr(Ty::Float, d)),
                    6 => format!("len({})", self.expr(Ty::Str, d)),
                    7 => match self.var_of(Ty::IntArr, false) {
                        Some(a) => format!("{a}[{}]", self.index(d)),
                        None => self.rng.pick(INT_LITERALS).to_string(),
                    },
                    _ => match self.var_of(Ty::IntArr, false) {
                        Some(a) => format!("len({a})"),
                        None => "4".to_string(),
                    },
                }
            }
            Ty::Float => {
                if leaf {
                    return self.rng.pick(FLOAT_LITERALS).to_string();
                }
                match self.rng.below(7) {
                    0..=2 => {
                        let op = *self.rng.pick(&["+", "-", "*", "/", "%"]);
                        format!(
                            "({} {op} {})",
                            self.expr(Ty::Float, d),
                            self.expr(Ty::Float, d)
                        )
                    }
                    3 => format!("float({})", self.expr(Ty::Int, d)),
                    4 => format!("sqrt({})", self.expr(Ty::Float, d)),
                    5 => format!("-{}", self.expr(Ty::Float, d)),
                    _ => match self.var_of(Ty::FloatArr, false) {
                        Some(a) => format!("{a}[{}]", self.index(d)),
                        None => self.rng.pick(FLOAT_LITERALS).to_string(),
                    },
                }
            }
            Ty::Bool => {
                if leaf {
                    return self.rng.pick(&["true", "false"]).to_string();
                }
                match self.rng.below(6) {
                    0 | 1 => {
                        let op = *self.rng.pick(&["<", "<=", ">", ">=", "==", "!="]);
                        format!("({} {op} {})", self.expr(Ty::Int, d), self.expr(Ty::Int, d))
                    }
                    2 => {
                        let op = *self.rng.pick(&["<", "<=", ">", ">=", "==", "!="]);
                        format!(
                            "({} {op} {})",
                            self.expr(Ty::Float, d),
                            self.expr(Ty::Float, d)
                        )
                    }
                    3 => {
                        let op = *self.rng.pick(&["<", "<=", "==", "!="]);
                        format!("({} {op} {})", self.expr(Ty::Str, d), self.expr(Ty::Str, d))
                    }
                    4 => {
                        let op = *self.rng.pick(&["&&", "||"]);
                        format!(
                            "({} {op} {})",
                            self.expr(Ty::Bool, d),
                            self.expr(Ty::Bool, d)
                        )
                    }
                    _ => format!("!{}", self.expr(Ty::Bool, d)),
                }
            }
            Ty::Str => {
                if leaf {
                    return self.rng.pick(STR_LITERALS).to_string();
                }
                match self.rng.below(4) {
                    0 => format!("({} + {})", self.expr(Ty::Str, d), self.expr(Ty::Str, d)),
                    1 => format!("str({})", self.expr(Ty::Int, d)),
                    2 => format!("str({})", self.expr(Ty::Float, d)),
                    _ => format!("str({})", self.expr(Ty::Bool, d)),
                }
            }
            Ty::IntArr => match self.rng.below(3) {
                0 => format!(
                    "[{}, {}, {}]",
                    self.expr(Ty::Int, d),
                    self.expr(Ty::Int, d),
                    self.expr(Ty::Int, d)
                ),
                1 => format!(
                    "[{}; {}]",
                    self.expr(Ty::Int, d),
                    self.rng.pick(&["0", "3", "5", "-1"])
                ),
                _ => self
                    .var_of(ty, false)
                    .unwrap_or_else(|| "[1, 2, 3, 4, 5]".into()),
            },
            Ty::FloatArr => match self.rng.below(2) {
                0 => format!("[{}, {}]", self.expr(Ty::Float, d), self.expr(Ty::Float, d)),
                _ => format!("[{}; 4]", self.expr(Ty::Float, d)),
            },
        }
    }

    /// An index that is usually in range but not always.
    fn index(&mut self, depth: usize) -> String {
        if self.rng.chance(85) {
            self.rng.below(3).to_string()
        } else {
            format!("({} % 6)", self.expr(Ty::Int, depth))
        }
    }

    fn block(&mut self, stmts: usize) {
        self.scopes.push(Vec::new());
        self.indent += 1;
        for _ in 0..stmts {
            self.stmt();
        }
        self.indent -= 1;
        self.scopes.pop();
    }

    fn stmt(&mut self) {
        let nested = self.indent < 4;
        match self.rng.below(14) {
            0 | 1 => {
                let ty = *self.rng.pick(&[
                    Ty::Int,
                    Ty::Int,
                    Ty::Float,
                    Ty::Bool,
                    Ty::Str,
                    Ty::IntArr,
                    Ty::FloatArr,
                ]);
                let e = self.expr(ty, 0);
                let name = self.declare(ty, true);
                self.line(&format!("let {name}: {} = {e};", ty.name()));
            }
            2 | 3 => {
                let ty = *self.rng.pick(&[Ty::Int, Ty::Float, Ty::Str]);
                if let Some(v) = self.var_of(ty, true) {
                    let e = self.expr(ty, 1);
                    let op = match ty {
                        Ty::Int => *self.rng.pick(&["=", "+=", "-=", "*=", "/=", "%="]),
                        Ty::Float => *self.rng.pick(&["=", "+=", "-=", "*=", "/="]),
                        _ => "=",
                    };
                    self.line(&format!("{v} {op} {e};"));
                }
            }
            4 => {
                let ty = *self
                    .rng
                    .pick(&[Ty::Int, Ty::Float, Ty::Bool, Ty::Str, Ty::IntArr]);
                let e = self.expr(ty, 0);
                self.line(&format!("print({e});"));
            }
            5 => {
                let (arr, elem) = *self
                    .rng
                    .pick(&[(Ty::IntArr, Ty::Int), (Ty::FloatArr, Ty::Float)]);
                if let Some(a) = self.var_of(arr, false) {
                    match self.rng.below(3) {
                        0 => {
                            let e = self.expr(elem, 1);
                            self.line(&format!("push({a}, {e});"));
                        }
                        1 => {
                            let i = self.index(1);
                            let e = self.expr(elem, 1);
                            let op = *self.rng.pick(&["=", "+=", "*="]);
                            self.line(&format!("{a}[{i}] {op} {e};"));
                        }
                        _ => {
                            let name = self.declare(elem, true);
                            self.line(&format!("let {name} = pop({a});"));
                        }
                    }
                }
            }
            6 if nested => {
                let c = self.expr(Ty::Bool, 0);
                self.line(&format!("if {c} {{"));
                let n = self.rng.below(3) + 1;
                self.block(n);
                if self.rng.chance(50) {
                    self.line("} else {");
                    let n = self.rng.below(3) + 1;
                    self.block(n);
                }
                self.line("}");
            }
            7 if nested => {
                let hi = self.rng.below(12);
                let i = format!("i{}", self.fresh + 1);
                self.fresh += 1;
                self.line(&format!("for {i} in 0..{hi} {{"));
                self.scopes.push(vec![(i.clone(), Ty::Int, false)]);
                self.loop_depth += 1;
                let n = self.rng.below(3) + 1;
                self.block(n);
                if self.rng.chance(20) {
                    self.indent += 1;
                    let kw = *self.rng.pick(&["break", "continue"]);
                    let at = self.rng.below(6);
                    self.line(&format!("if {i} == {at} {{ {kw}; }}"));
                    self.indent -= 1;
                }
                self.loop_depth -= 1;
                self.scopes.pop();
                self.line("}");
            }
            8 if nested => {
                let w = self.declare(Ty::Int, false);
                let limit = self.rng.below(15);
                self.line(&format!("let {w} = 0;"));
                self.line(&format!("while {w} < {limit} {{"));
                self.loop_depth += 1;
                let n = self.rng.below(3) + 1;
                self.block(n);
                self.loop_depth -= 1;
                self.indent += 1;
                self.line(&format!("{w} += 1;"));
                self.indent -= 1;
                self.line("}");
            }
            9 => {
                let s = self.expr(Ty::Str, 1);
                let name = self.declare(Ty::Int, true);
                if self.rng.chance(60) {
                    self.line(&format!("let {name} = parse_int(str(len({s})));"));
                } else {
                    self.line(&format!("let {name} = parse_int({s});"));
                }
            }
            10 => {
                let n = self.expr(Ty::Int, 2);
                let name = self.declare(Ty::Int, true);
                self.line(&format!("let {name} = depth((({n}) % 40) + 5);"));
            }
            11 => {
                let ty = *self.rng.pick(&[Ty::Int, Ty::Float, Ty::Str]);
                if let Some(call) = self.call_of(ty, 0) {
                    self.line(&format!("print({call});"));
                }
            }
            _ => {
                let e = self.expr(Ty::Float, 0);
                let name = self.declare(Ty::Float, true);
                self.line(&format!("let {name} = {e};"));
            }
        }
    }

    fn function(&mut self, index: usize) {
        let nparams = self.rng.below(3) + 1;
        let params: Vec<Ty> = (0..nparams)
            .map(|_| *self.rng.pick(&[Ty::Int, Ty::Float, Ty::Str, Ty::IntArr]))
            .collect();
        let ret = *self.rng.pick(&[Ty::Int, Ty::Float, Ty::Str]);
        let name = format!("f{index}");
        self.scopes = vec![Vec::new()];
        let mut header = Vec::new();
        for &p in &params {
            let v = self.declare(p, true);
            header.push(format!("{v}: {}", p.name()));
        }
        self.line(&format!(
            "fn {name}({}) -> {} {{",
            header.join(", "),
            ret.name()
        ));
        self.callable = index;
        let n = self.rng.below(5) + 1;
        self.indent += 1;
        for _ in 0..n {
            self.stmt();
        }
        let e = self.expr(ret, 0);
        self.line(&format!("return {e};"));
        self.indent -= 1;
        self.line("}");
        self.fns.push(FnSig { name, params, ret });
    }

    fn program(mut self) -> String {
        self.line("fn depth(n: int) -> int {");
        self.line("    if n <= 0 { return 0; }");
        self.line("    return depth(n - 1) + 1;");
        self.line("}");
        let nfns = self.rng.below(4);
        for i in 0..nfns {
            self.function(i);
        }
        self.scopes = vec![Vec::new()];
        self.callable = nfns;
        let n = self.rng.below(12) + 4;
        for _ in 0..n {
            self.stmt();
        }
        // A hot loop so the threshold-3 tier enters it through OSR.
        self.line("let hot = 0;");
        self.line("for k in 0..50 { hot = (hot + k * 3) % 17; }");
        self.line("print(hot);");
        self.out
    }
}

#[test]
fn random_programs_agree_across_tiers() {
    let dir = std::env::temp_dir().join(format!("toyvm-jit-diff-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let mut rng = Rng(SEED);
    let mut errors = 0;
    let mut stdout_lines = 0;
    let mut failures = Vec::new();
    for n in 0..PROGRAMS {
        let source = Gen::new(rng.next()).program();
        let path = dir.join(format!("p{n}.toy"));
        std::fs::write(&path, &source).expect("write program");
        let path = path.to_string_lossy().into_owned();
        let background = ["run", "--jit-threshold", "3", "--jit-background"];
        let three_pages = common::pages(3);
        let runs: Vec<(String, common::ToyRun)> = [
            (vec!["run", "--no-jit"], None),
            (vec!["run", "--jit-threshold", "0"], None),
            (vec!["run", "--jit-threshold", "3"], None),
            (background.to_vec(), None),
            (background.to_vec(), Some(("TOYVM_JIT_DELAY_US", "200"))),
            // A code limit of three pages: code is evicted and compiled
            // again (tests/code_cache.rs checks that it is).
            (
                vec![
                    "run",
                    "--jit-threshold",
                    "3",
                    "--jit-code-limit",
                    &three_pages,
                ],
                None,
            ),
        ]
        .into_iter()
        .map(|(mut args, env)| {
            let mut tier = args[1..].join(" ");
            if let Some((k, v)) = env {
                tier = format!("{k}={v} {tier}");
            }
            args.extend(["--max-depth", "200", &path]);
            let env: Vec<_> = env.into_iter().collect();
            (tier, common::toyvm_in(&common::repo_root(), &args, &env))
        })
        .collect();
        let (_, reference) = &runs[0];
        assert!(
            reference.status.is_some(),
            "the interpreter crashed or hung on:\n{source}"
        );
        assert!(
            !reference.stderr.contains(": error: "),
            "the generator wrote an invalid program:\n{source}\n{}",
            reference.stderr
        );
        if reference.status != Some(0) {
            errors += 1;
        }
        stdout_lines += reference.stdout.lines().count();
        for (tier, run) in &runs[1..] {
            if run.stdout != reference.stdout
                || run.stderr != reference.stderr
                || run.status != reference.status
            {
                let mut report = String::new();
                let _ = writeln!(
                    report,
                    "program {n} differs in `{tier}`:\n{source}\n--- interpreter: status {:?}\n{}{}--- {tier}: status {:?}\n{}{}",
                    reference.status,
                    reference.stdout,
                    reference.stderr,
                    run.status,
                    run.stdout,
                    run.stderr
                );
                failures.push(report);
            }
        }
        if failures.len() >= 3 {
            break;
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!(
        "jit_differential: {PROGRAMS} programs, {errors} ended in a runtime error, {stdout_lines} stdout lines"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The generator must exercise the error paths too.
    assert!(
        errors > PROGRAMS / 20,
        "only {errors} programs stopped with an error"
    );
    assert!(
        errors < PROGRAMS * 9 / 10,
        "{errors} programs stopped with an error"
    );
}
