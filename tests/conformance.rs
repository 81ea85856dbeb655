//! The conformance suite: every `tests/conformance/**/*.toy` program, run
//! with `toyvm run` in every tier, must produce exactly the stdout, stderr
//! lines and exit status written in its comments:
//!
//! ```text
//! //> LINE        one expected stdout line, in order; all of stdout must match
//! //>             (alone) an empty stdout line
//! //! TEXT        stderr contains TEXT; several `//!` must appear in this order
//! //? exit N      expected exit status (default: 1 if there is a `//!`, else 0)
//! //? args A B    arguments after the script path
//! ```
//!
//! All tiers must agree (LANGUAGE.md, "Overview": identical stdout, stderr and exit
//! status), so each program's complete stderr is also compared across tiers.

mod common;

use std::path::{Path, PathBuf};

use common::{ToyRun, repo_root, toyvm_in};

/// The tiers every program runs in: the flags given to `toyvm run`.
/// The interpreter, the default tier (cost-scaled thresholds, compiled on
/// the background thread), everything compiled before it runs, and a tiny
/// threshold that mixes interpreted and compiled frames and enters loops
/// through OSR: compiled on the interpreter's thread, on the background
/// thread, and on a background thread made slow ([`SLOW_COMPILER`]), so
/// that code arrives while the interpreter has run on.
/// A code limit of three pages ([`THREE_PAGES`], `--jit-code-limit 12K`
/// on a 4K kernel) holds two or three units of compiled code, so larger
/// programs evict code and compile it again (`tests/code_cache.rs` checks
/// that they do).
/// Under `--jit-elf` ([`ELF_FILES`]) each batch runs from a file of its
/// own and queued requests are compiled as one batch: with the slow
/// compiler the queue fills, and under a code limit (six pages: each
/// file's chunk starts with a page of headers) code is evicted and its
/// addresses get new files.
/// `--gc-stress` collects at every allocation and poisons freed objects,
/// so a missing GC root (in the interpreter or in compiled code) shows up
/// as a mismatch here.
const TIERS: &[&[&str]] = &[
    &["--no-jit"],
    &[],
    &["--jit-threshold", "0"],
    &["--jit-threshold", "2"],
    &["--jit-threshold", "2", "--jit-background"],
    &["--jit-threshold", "2", "--jit-background", SLOW_COMPILER],
    &["--no-jit", "--gc-stress"],
    &["--jit-threshold", "0", "--gc-stress"],
    &["--jit-threshold", "2", "--jit-code-limit", THREE_PAGES],
    &[
        "--jit-threshold",
        "2",
        "--jit-background",
        "--jit-code-limit",
        THREE_PAGES,
    ],
    &[
        "--jit-threshold",
        "2",
        "--jit-background",
        SLOW_COMPILER,
        ELF_FILES,
    ],
    &[
        "--jit-threshold",
        "2",
        "--jit-background",
        "--jit-code-limit",
        SIX_PAGES,
        ELF_FILES,
    ],
];

/// The tiers run when the tests run under emulation ([`common::RUNNER_ENV`]
/// set: aarch64 under qemu-user on an x86_64 host, `tools/aarch64-tests`):
/// all of [`TIERS`] took 17 minutes there on 2 cores once, and about 520 s
/// by the four's 170 s on 2026-11-28, which brings the stage to its
/// 15-minute budget. These four keep what differs between architectures: the
/// interpreter, the default tier-up, everything compiled (every function's
/// code and calls between compiled functions) and eviction under a code
/// limit (chunks freed and their addresses reused).
const EMULATED_TIERS: &[&[&str]] = &[
    &["--no-jit"],
    &[],
    &["--jit-threshold", "0"],
    &["--jit-threshold", "2", "--jit-code-limit", THREE_PAGES],
];

/// The tiers of this run: [`TIERS`], or [`EMULATED_TIERS`] under a runner.
fn tiers() -> &'static [&'static [&'static str]] {
    if common::emulated() {
        EMULATED_TIERS
    } else {
        TIERS
    }
}

/// Not a size: a code limit of three pages ([`common::pages`]; limits are
/// counted in pages so the tiers hold the same code on 16K and 64K kernels).
const THREE_PAGES: &str = "(3 pages)";
/// Not a size: a code limit of six pages.
const SIX_PAGES: &str = "(6 pages)";

/// The flag as given to toyvm: a page count ([`THREE_PAGES`], ...) in bytes.
fn expand(flag: &str) -> String {
    (flag
        .strip_prefix('(')
        .and_then(|f| f.strip_suffix(" pages)")))
    .and_then(|n| n.parse().ok())
    .map_or_else(|| flag.to_string(), common::pages)
}

/// Not a flag: the tier runs with `--jit-elf --perf-dir DIR`, DIR a
/// directory of this test's ([`elf_dir`]).
const ELF_FILES: &str = "(--jit-elf)";

/// Where the `--jit-elf` tiers write their files: made once, emptied at
/// the end of the suite.
fn elf_dir() -> &'static Path {
    static DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("toyvm-conformance-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("the --jit-elf directory");
        dir
    })
}

/// Not a flag: the tier runs with `TOYVM_JIT_DELAY_US=300` (the compiler
/// thread sleeps before each request).
const SLOW_COMPILER: &str = "(TOYVM_JIT_DELAY_US=300)";

/// What a program's comments say it must do.
#[derive(Debug, Default)]
struct Expectation {
    stdout: Vec<String>,
    stderr: Vec<String>,
    exit: Option<i32>,
    args: Vec<String>,
}

impl Expectation {
    fn parse(source: &str) -> Result<Expectation, String> {
        let mut exp = Expectation::default();
        for (number, line) in source.lines().enumerate() {
            let line = line.trim_start();
            if let Some(rest) = line.strip_prefix("//>") {
                exp.stdout
                    .push(rest.strip_prefix(' ').unwrap_or(rest).to_string());
            } else if let Some(rest) = line.strip_prefix("//!") {
                exp.stderr
                    .push(rest.strip_prefix(' ').unwrap_or(rest).to_string());
            } else if let Some(rest) = line.strip_prefix("//?") {
                let mut words = rest.split_whitespace();
                match words.next() {
                    Some("exit") => {
                        let code = words.next().and_then(|w| w.parse().ok());
                        exp.exit = Some(code.ok_or(format!("line {}: bad exit", number + 1))?);
                    }
                    Some("args") => exp.args = words.map(str::to_string).collect(),
                    other => return Err(format!("line {}: unknown //? {other:?}", number + 1)),
                }
            }
        }
        Ok(exp)
    }

    fn exit_status(&self) -> i32 {
        self.exit
            .unwrap_or(if self.stderr.is_empty() { 0 } else { 1 })
    }

    /// Every mismatch between this expectation and one run, as readable lines.
    fn check(&self, run: &ToyRun) -> Vec<String> {
        let mut problems = Vec::new();
        let mut expected_stdout = self.stdout.join("\n");
        if !self.stdout.is_empty() {
            expected_stdout.push('\n');
        }
        if run.stdout != expected_stdout {
            problems.push(format!(
                "stdout differs\n--- expected\n{expected_stdout}--- actual\n{}",
                run.stdout
            ));
        }
        let mut rest = run.stderr.as_str();
        for needle in &self.stderr {
            match rest.find(needle.as_str()) {
                Some(at) => rest = &rest[at + needle.len()..],
                None => problems.push(format!(
                    "stderr lacks (in order) {needle:?}\n--- stderr\n{}",
                    run.stderr
                )),
            }
        }
        if self.stderr.is_empty() && !run.stderr.is_empty() {
            problems.push(format!("unexpected stderr\n{}", run.stderr));
        }
        if run.status != Some(self.exit_status()) {
            problems.push(format!(
                "exit status {:?}, expected {}",
                run.status,
                self.exit_status()
            ));
        }
        problems
    }
}

fn programs(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            programs(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "toy") {
            out.push(path);
        }
    }
}

/// Runs one program in every tier; returns its failures.
fn run_program(root: &Path, path: &Path) -> Vec<String> {
    let relative = path.strip_prefix(root).expect("program under the repo");
    let name = relative.to_string_lossy().into_owned();
    let source = std::fs::read_to_string(path).expect("readable program");
    let exp = match Expectation::parse(&source) {
        Ok(exp) => exp,
        Err(e) => return vec![format!("{name}: {e}")],
    };
    let mut failures = Vec::new();
    let mut first_stderr: Option<(String, String)> = None;
    for tier in tiers() {
        let flags: Vec<String> = (tier.iter())
            .filter(|&&f| f != SLOW_COMPILER && f != ELF_FILES)
            .map(|f| expand(f))
            .collect();
        let mut argv: Vec<&str> = vec!["run"];
        argv.extend(flags.iter().map(String::as_str));
        let elf = elf_dir().to_string_lossy();
        if tier.contains(&ELF_FILES) {
            argv.extend(["--jit-elf", "--perf-dir", &elf]);
        }
        argv.push(&name);
        argv.extend(exp.args.iter().map(String::as_str));
        let env: &[(&str, &str)] = match tier.contains(&SLOW_COMPILER) {
            true => &[("TOYVM_JIT_DELAY_US", "300")],
            false => &[],
        };
        let run = toyvm_in(root, &argv, env);
        let tier_name = tier.join(" ");
        for problem in exp.check(&run) {
            failures.push(format!("{name} [{tier_name}]: {problem}"));
        }
        match &first_stderr {
            None => first_stderr = Some((tier_name, run.stderr)),
            Some((first_tier, stderr)) if *stderr != run.stderr => failures.push(format!(
                "{name}: stderr of [{tier_name}] differs from [{first_tier}]\n{}\n---\n{stderr}",
                run.stderr
            )),
            Some(_) => {}
        }
    }
    failures
}

#[test]
fn conformance_suite() {
    let root = repo_root();
    let mut files = Vec::new();
    programs(&root.join("tests/conformance"), &mut files);
    assert!(
        files.len() >= 100,
        "expected the whole suite, found only {} programs",
        files.len()
    );
    let failures = common::parallel_map(&files, |path| run_program(&root, path));
    let _ = std::fs::remove_dir_all(elf_dir());
    let failures: Vec<String> = failures.into_iter().flatten().collect();
    assert!(
        failures.is_empty(),
        "{} of {} conformance checks failed:\n\n{}",
        failures.len(),
        files.len() * tiers().len(),
        failures.join("\n\n")
    );
    eprintln!(
        "conformance: {} programs x {} tiers passed",
        files.len(),
        tiers().len()
    );
}

/// The tiers with a code limit of three pages do evict and compile again: the
/// suite's evictions and recompiles under that limit (compiled on the
/// interpreter's thread, so the counts are the same on every run), from
/// `--jit-stats` (which the tiers above leave out: their stderr must match).
#[test]
fn the_code_limit_tier_evicts_and_compiles_again() {
    let root = repo_root();
    let mut files = Vec::new();
    programs(&root.join("tests/conformance"), &mut files);
    let three_pages = common::pages(3);
    let counts = common::parallel_map(&files, |path| {
        let name = path
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let source = std::fs::read_to_string(path).expect("readable program");
        let args = Expectation::parse(&source)
            .map(|e| e.args)
            .unwrap_or_default();
        let mut argv = vec![
            "run",
            "--jit-threshold",
            "2",
            "--jit-code-limit",
            &three_pages,
            "--jit-stats",
        ];
        argv.push(&name);
        argv.extend(args.iter().map(String::as_str));
        let run = toyvm_in(&root, &argv, &[]);
        let number = |what: &str| -> u64 {
            (run.stderr.lines())
                .filter_map(|l| l.strip_prefix("jit-stats (code cache): "))
                .filter_map(|l| {
                    l.split(&format!(" {what}"))
                        .next()?
                        .rsplit(' ')
                        .next()?
                        .parse::<u64>()
                        .ok()
                })
                .sum()
        };
        (number("evictions"), number("recompiles"))
    });
    let evictions: u64 = counts.iter().map(|c| c.0).sum();
    let recompiles: u64 = counts.iter().map(|c| c.1).sum();
    assert!(
        evictions > 0 && recompiles > 0,
        "{evictions} evictions, {recompiles} recompiles"
    );
}
