//! The output the book shows is true: `book/generate.sh` runs its commands
//! again, into a scratch directory (`BOOK_OUT`, nothing in the book is
//! written), and every file of `book/src/generated/` must match what the
//! commands print today, in substance:
//!
//! * names, frames, record kinds, structure, and what is deterministic
//!   (code sizes, offsets, line numbers, instructions) must be equal;
//! * what varies from run to run is normalised: generate.sh itself writes
//!   placeholders for pids, addresses, timings, sample counts and
//!   percentages (PID, ADDR, N, NN.N%), cuts sample-dependent lists at
//!   thresholds far from the measured values and picks perf samples by
//!   their frames; this test also replaces the runtime addresses in gdb's
//!   output and drops the few entries a sample reaches only now and then
//!   (see [`rule`]);
//! * no block may be empty: a command that prints nothing where the book
//!   shows output is a failure, in the committed file or in today's.
//!
//! The perf parts run only where `perf record` works, the gdb parts only
//! with gdb, the C mini-JIT with cc and pkg-config: without the tool they are
//! skipped with a loud message on a developer machine, and fail under
//! `CI=true`. `vmprofshow.txt` needs the PyPI `vmprofshow` (VMPROFSHOW=PATH
//! or on PATH); without it that one file is skipped, also on CI.
//!
//! To update the book after a change: `book/generate.sh`, and commit
//! `book/src/generated/` with the change.

mod common;
#[path = "../perfsupport/tests/vmprof_support/venv.rs"]
mod venv;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The tool a generated file needs besides toyvm, python3 and readelf.
fn tool_of(name: &str) -> Option<&'static str> {
    match name {
        "vmprofshow.txt" => Some("vmprofshow"),
        "vmprof-export-pprof.txt" => Some("go"),
        "minijit-dwarf-chain.txt" | "packed-register.txt" => Some("cc"),
        "packed-dwarf-chain.txt" => Some("perf"),
        n if n.starts_with("gdb-") => Some("gdb"),
        "perf-interp-stack.txt"
        | "perf-trampoline-stack.txt"
        | "perf-annotate.txt"
        | "perf-report.txt"
        | "perf-script-stack.txt"
        | "quick-jitdump-report.txt"
        | "quick-perf-map.txt"
        | "quick-perf-report.txt"
        | "readelf-frames.txt"
        | "readelf-lines-jit.txt"
        | "readelf-lines.txt"
        | "readelf-sections.txt"
        | "srcline-report.txt"
        | "toyvm-profile.txt"
        | "trampoline-objdump.txt"
        | "code-dies-perf-report.txt" => Some("perf"),
        _ => None,
    }
}

/// How a file is compared with today's output.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Rule {
    /// Line by line (after [`normalise`]).
    Exact,
    /// Line by line, after dropping the lines that contain one of these
    /// strings from both sides: entries that a sample lands in only now and
    /// then (a sample on the JIT compiler's thread, a call path just over the
    /// report's 0.5% limit). A dropped entry may have been the widest name
    /// of its table, so the padding before each line's last column is
    /// compared as two blanks whatever its width.
    Except(&'static [&'static str]),
    /// A gdb backtrace or session: runtime addresses become ADDR, frame
    /// numbers and repeats of the same frame (the unnamed frames gdb reads
    /// from JIT code it knows nothing about) go, and the line of frame #0
    /// (where the attach caught the loop) is not compared.
    Gdb,
}

/// The comparison rule of each generated file. The rest of the run-to-run
/// variation is normalised by generate.sh itself (placeholders, sorted
/// lists, thresholds far from the values measured).
fn rule(name: &str) -> Rule {
    match name {
        n if n.starts_with("gdb-") => Rule::Gdb,
        "vmprof-report.txt" => Rule::Except(&["<jit compiler>", "call paths under"]),
        "vmprofshow.txt" => Rule::Except(&["<jit compiler>"]),
        _ => Rule::Exact,
    }
}

/// What every file gets before comparison: trailing blanks go, and so do
/// trailing empty lines; then the file's [`Rule`] applies.
fn normalise(name: &str, text: &str) -> Vec<String> {
    let mut lines: Vec<String> = text.lines().map(|l| l.trim_end().to_string()).collect();
    while lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    // The book shows real counts and percentages; they vary from run to run.
    if counted(name) {
        lines = lines.iter().map(|l| numbers(l)).collect();
    }
    lines = lines.iter().map(|l| shares(l)).collect();
    if name == "toyvm-profile.txt" {
        // The code index of the hottest region follows the order in which
        // the background compiles finished; its name is compared.
        lines = lines.iter().map(|l| code_index(l)).collect();
    }
    match rule(name) {
        Rule::Exact => lines,
        Rule::Except(drop) => lines
            .into_iter()
            .filter(|l| !drop.iter().any(|d| l.contains(d)))
            .map(|l| last_column_padded_by_two(&l))
            .collect(),
        Rule::Gdb => {
            let mut out: Vec<String> = Vec::new();
            for line in &lines {
                let mut line = gdb_line(line);
                if let Some(frame) = line.strip_prefix('#') {
                    let digits = frame.chars().take_while(char::is_ascii_digit).count();
                    let first = &frame[..digits] == "0";
                    line = format!("# {}", frame[digits..].trim_start());
                    if first
                        && let Some(at) = line.rfind(':')
                        && line[at + 1..].chars().all(|c| c.is_ascii_digit())
                    {
                        line = format!("{}:LINE", &line[..at]);
                    }
                }
                if out.last() != Some(&line) || !line.starts_with('#') {
                    out.push(line);
                }
            }
            out
        }
    }
}

/// `line` with every percentage (`12.34%`, and perf annotate's `12.34 :`
/// column), blanks before it included, replaced by ` NN.N%` / ` NN.N :`:
/// the numbers vary, and so does the padding of their columns.
fn shares(line: &str) -> String {
    let bytes = line.as_bytes();
    let mut out = String::new();
    let mut i = 0;
    while i < bytes.len() {
        // A number with a decimal point at i, after blanks at `from`?
        let from = i;
        let mut j = i;
        while j < bytes.len() && bytes[j] == b' ' {
            j += 1;
        }
        let digits = |k: usize| bytes[k..].iter().take_while(|b| b.is_ascii_digit()).count();
        let whole = digits(j);
        if whole > 0
            && (from == 0 || !bytes[from - 1].is_ascii_alphanumeric() || j > from)
            && bytes.get(j + whole) == Some(&b'.')
        {
            let fraction = digits(j + whole + 1);
            let end = j + whole + 1 + fraction;
            if fraction > 0 && bytes.get(end) == Some(&b'%') {
                out.push_str(" NN.N%");
                i = end + 1;
                continue;
            }
            if fraction > 0 && line[end..].starts_with(" :") && line[..from].trim().is_empty() {
                out.push_str(" NN.N :");
                i = end + 2;
                continue;
            }
        }
        let c = line[i..].chars().next().expect("inside the line");
        out.push(c);
        i += c.len_utf8();
    }
    out
}

/// The files whose every number is a sample count or a share (a difference
/// of two profiles, `go tool pprof -top`): compared with [`numbers`].
fn counted(name: &str) -> bool {
    matches!(name, "vmprof-diff.txt" | "vmprof-export-pprof.txt")
}

/// `line` with every word that is a number (`412`, `+12.3`, `45.3%`, and
/// `412,` before a comma), blanks before it included, replaced by ` N`: the
/// numbers vary, and so does the padding of their columns. Words that only
/// contain digits (`x.toy:1`, `v2`) stay.
fn numbers(line: &str) -> String {
    let is_number = |word: &str| {
        let word = word.strip_suffix(',').unwrap_or(word);
        let word = word.strip_suffix('%').unwrap_or(word);
        let word = word.trim_start_matches(['+', '-']);
        let (whole, fraction) = word.split_once('.').unwrap_or((word, "0"));
        [whole, fraction]
            .iter()
            .all(|part| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()))
    };
    let mut out = String::new();
    let mut blanks = String::new();
    for piece in line.split_inclusive(' ') {
        let word = piece.trim_end_matches(' ');
        if word.is_empty() {
            blanks.push(' ');
            continue;
        }
        if is_number(word) {
            out.push_str(" N");
            if word.ends_with(',') {
                out.push(',');
            }
        } else {
            out.push_str(&blanks);
            out.push_str(word);
        }
        blanks = " ".repeat(piece.len() - word.len());
    }
    out
}

/// `line` with a run of two or more blanks before its last word cut to
/// two: the padding of a table column sized by the widest entry.
fn last_column_padded_by_two(line: &str) -> String {
    let body = line.trim_end();
    let Some(word_start) = body.rfind(' ').map(|at| at + 1) else {
        return line.to_string();
    };
    let head = body[..word_start].trim_end_matches(' ');
    if word_start - head.len() < 2 || head.trim_start().is_empty() {
        return line.to_string();
    }
    format!("{head}  {}", &body[word_start..])
}

/// `line` with the N of `jitted-PID-N.so` replaced by `N`.
fn code_index(line: &str) -> String {
    match line.split_once("jitted-PID-") {
        Some((head, tail)) => {
            let digits = tail.chars().take_while(char::is_ascii_digit).count();
            format!("{head}jitted-PID-N{}", &tail[digits..])
        }
        None => line.to_string(),
    }
}

/// A gdb output line with runtime addresses (0x and at least 8 hex digits)
/// replaced by ADDR.
fn gdb_line(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(at) = rest.find("0x") {
        out.push_str(&rest[..at]);
        let digits = rest[at + 2..]
            .chars()
            .take_while(|c| c.is_ascii_hexdigit())
            .count();
        if digits >= 8 {
            out.push_str("ADDR");
        } else {
            out.push_str(&rest[at..at + 2 + digits]);
        }
        rest = &rest[at + 2 + digits..];
    }
    out.push_str(rest);
    out
}

/// True for the lines a file shows about its commands rather than their
/// output: `$ command` lines and the `  (...)` notes generate.sh adds.
fn is_command(line: &str) -> bool {
    line.starts_with("$ ") || line.starts_with("  (")
}

/// The problems of one file: empty blocks, and differences in substance
/// between the committed text and today's.
fn differences(name: &str, committed: &str, fresh: &str) -> Vec<String> {
    let mut problems = Vec::new();
    for (which, text) in [("committed", committed), ("today's", fresh)] {
        if empty_block(text) {
            problems.push(format!(
                "{name}: the {which} output is empty (nothing but command lines)"
            ));
        }
    }
    diff_lines(
        name,
        &normalise(name, committed),
        &normalise(name, fresh),
        &mut problems,
    );
    problems
}

/// True when `text` has no line of output besides its command lines.
fn empty_block(text: &str) -> bool {
    !text
        .lines()
        .any(|l| !l.trim().is_empty() && !is_command(l.trim_end()))
}

/// The first difference of two line lists, with context, if any.
fn diff_lines(name: &str, old: &[String], new: &[String], problems: &mut Vec<String>) {
    if old == new {
        return;
    }
    let at = old
        .iter()
        .zip(new)
        .position(|(a, b)| a != b)
        .unwrap_or(old.len().min(new.len()));
    let show = |lines: &[String]| -> String {
        lines
            .iter()
            .skip(at.saturating_sub(2))
            .take(6)
            .map(|l| format!("    | {l}\n"))
            .collect()
    };
    problems.push(format!(
        "{name}: differs from line {} on ({} lines in the book, {} today)\n  book:\n{}  today:\n{}",
        at + 1,
        old.len(),
        new.len(),
        show(old),
        show(new)
    ));
}

/// The PyPI `vmprofshow`: VMPROFSHOW, or on PATH, or the one in the venv
/// the vmprof_pypi tests share (created on first use). Without one,
/// vmprofshow.txt is skipped loudly, and under `CI=true` the test fails.
fn vmprofshow() -> Option<PathBuf> {
    static FOUND: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    FOUND.get_or_init(find_vmprofshow).clone()
}

fn find_vmprofshow() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("VMPROFSHOW") {
        return Some(PathBuf::from(path));
    }
    let on_path = Command::new("sh")
        .args(["-c", "command -v vmprofshow"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    if on_path.is_some() {
        return on_path;
    }
    match venv::vmprof_venv("0.6.0") {
        Ok(venv) => Some(venv.join("bin/vmprofshow")),
        Err(why) => {
            venv::skip_or_fail(&format!("book_truth: vmprofshow.txt not checked: {why}"));
            None
        }
    }
}

/// Runs generate.sh into `out` with the toyvm under test.
fn generate(out: &Path) {
    let root = common::repo_root();
    let _ = std::fs::remove_dir_all(out);
    std::fs::create_dir_all(out).expect("scratch dir");
    let started = std::time::Instant::now();
    let output = Command::new("timeout")
        .args(["--kill-after=10", "900", "bash"])
        .arg(root.join("book/generate.sh"))
        .current_dir(&root)
        .env("BOOK_OUT", out)
        .env("TOYVM", env!("CARGO_BIN_EXE_toyvm"))
        // The examples `cargo test` built beside this test, wherever Cargo
        // builds (CARGO_TARGET_DIR): generate.sh builds nothing then.
        .env("EMBED", common::release_dir().join("examples/embed"))
        .env("PERF_E2E", common::release_dir().join("examples/e2e_vm"))
        .envs(vmprofshow().map(|v| ("VMPROFSHOW", v)))
        .output()
        .expect("run book/generate.sh");
    eprintln!(
        "generate.sh took {:.0?}; its messages:\n{}",
        started.elapsed(),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "book/generate.sh failed ({}):\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The `*.txt` files of a directory, by name.
fn texts(dir: &Path) -> BTreeMap<String, String> {
    std::fs::read_dir(dir)
        .expect("generated dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "txt"))
        .map(|p| {
            let name = p.file_name().expect("name").to_string_lossy().into_owned();
            (
                name,
                std::fs::read_to_string(&p).expect("read generated file"),
            )
        })
        .collect()
}

/// Whether the tool a file needs is usable here (see the module docs).
fn tool_usable(tool: &str) -> bool {
    const TEST: &str = "book_truth";
    match tool {
        "perf" => common::tool_or_skip(TEST, "perf", common::PERF_RECORD_PROBE),
        "gdb" => common::tool_or_skip(TEST, "gdb", &["--version"]),
        "go" => common::tool_or_skip(TEST, "go", &["version"]),
        "cc" => {
            common::tool_or_skip(TEST, "perf", common::PERF_RECORD_PROBE)
                && common::tool_or_skip(TEST, "cc", &["--version"])
                && common::tool_or_skip(TEST, "pkg-config", &["--version"])
        }
        "vmprofshow" => vmprofshow().is_some(),
        _ => unreachable!("unknown tool {tool}"),
    }
}

#[test]
fn percentages_and_their_padding_are_normalised() {
    assert_eq!(shares("    44.36%  [.] toy:jit:f"), " NN.N%  [.] toy:jit:f");
    assert_eq!(shares("     4.36%  [.] toy:jit:f"), " NN.N%  [.] toy:jit:f");
    assert_eq!(shares("   45.3%   12.0%    outer"), " NN.N% NN.N%    outer");
    assert_eq!(
        shares("     12.34 :    80:     push   %rbp"),
        " NN.N :    80:     push   %rbp"
    );
    assert_eq!(
        shares("<main> (x.toy:1): 100.0% total"),
        "<main> (x.toy:1): NN.N% total"
    );
    // Not a share: versions, offsets, names with digits.
    assert_eq!(shares("mdbook 0.5.4 at +12"), "mdbook 0.5.4 at +12");
    assert_eq!(shares("toy:jit:phase0:x.toy:10"), "toy:jit:phase0:x.toy:10");
}

#[test]
fn counts_and_their_padding_are_normalised() {
    assert_eq!(
        numbers("toyvm profile difference: 2003 samples before, 412 after"),
        "toyvm profile difference: N samples before, N after"
    );
    assert_eq!(
        numbers("          45.3     0.0  -45.3            99.9   100.0   +0.1  outer (p.toy:28)"),
        " N N N N N N  outer (p.toy:28)"
    );
    assert_eq!(
        numbers("       278 66.03% 66.03%        278 66.03%  inner_hot"),
        " N N N N N  inner_hot"
    );
    assert_eq!(numbers("1,"), " N,");
    // Not a number: names and places with digits, versions.
    assert_eq!(
        numbers("phase0 (x.toy:10) v2 0.5.4"),
        "phase0 (x.toy:10) v2 0.5.4"
    );
}

#[test]
fn the_book_shows_what_the_commands_print_today() {
    let root = common::repo_root();
    let committed = texts(&root.join("book/src/generated"));
    assert!(committed.len() >= 30, "book/src/generated has the files");
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("book-truth");
    generate(&out);
    let fresh = texts(&out);
    let mut problems = Vec::new();
    let mut usable: BTreeMap<&str, bool> = BTreeMap::new();
    for (name, text) in &committed {
        if let Some(tool) = tool_of(name)
            && !*usable.entry(tool).or_insert_with(|| tool_usable(tool))
        {
            continue;
        }
        match fresh.get(name) {
            Some(today) => problems.extend(differences(name, text, today)),
            None => problems.push(format!(
                "{name}: in the book, but generate.sh no longer writes it"
            )),
        }
    }
    for name in fresh.keys().filter(|n| !committed.contains_key(*n)) {
        problems.push(format!(
            "{name}: generate.sh writes it, but it is not committed in book/src/generated"
        ));
    }
    if problems.is_empty() {
        let _ = std::fs::remove_dir_all(&out);
    }
    assert!(
        problems.is_empty(),
        "the book's generated output is stale (run book/generate.sh and commit \
         book/src/generated; today's output is in {}):\n{}",
        out.display(),
        problems.join("\n")
    );
}

// --- Negative controls: the comparison finds a stale block --------------------

/// A committed file of the book.
fn committed(name: &str) -> String {
    std::fs::read_to_string(common::repo_root().join("book/src/generated").join(name))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// `text` with the first `from` replaced by `to` (which must be there).
fn stale(text: &str, from: &str, to: &str) -> String {
    assert!(text.contains(from), "the block contains {from:?}");
    text.replacen(from, to, 1)
}

#[test]
fn a_block_compares_equal_to_itself_and_to_its_normalised_variants() {
    for name in texts(&common::repo_root().join("book/src/generated")).keys() {
        let text = committed(name);
        assert_eq!(differences(name, &text, &text), Vec::<String>::new());
        let blanks: String = text.lines().map(|l| format!("{l}  \n")).collect();
        assert!(differences(name, &text, &blanks).is_empty(), "{name}");
    }
    // gdb: other addresses, another line in frame #0, more unnamed frames.
    let gdb = committed("gdb-backtrace-without-gdb.txt");
    let other = stale(
        &gdb,
        "#1  0x0000",
        "#1  0x0000000000000000 in ?? ()\n#2  0x0000",
    );
    let other = other.replace("0x00007", "0x00006");
    assert!(differences("gdb-backtrace-without-gdb.txt", &gdb, &other).is_empty());
    let with = committed("gdb-backtrace-with-gdb.txt");
    let first = with
        .lines()
        .find(|l| l.starts_with("#0 "))
        .expect("frame #0");
    let moved = with.replace(
        first,
        &format!("{}9", first.trim_end_matches(char::is_numeric)),
    );
    assert!(differences("gdb-backtrace-with-gdb.txt", &with, &moved).is_empty());
    // vmprof report: a sample on the compiler's thread adds a row that widens
    // the name column; the nesting of the other rows still counts.
    let report = committed("vmprof-report.txt");
    let wider = report
        .replace("  location", "   location")
        .replace("  profile_demo", "   profile_demo")
        .replace(
            "\n   NN.N%   NN.N%    outer",
            "\n   NN.N%   NN.N%    <jit compiler>  -\n   NN.N%   NN.N%    outer",
        );
    assert_ne!(wider, report);
    assert!(differences("vmprof-report.txt", &report, &wider).is_empty());
    let flatter = report.replace("      middle", "    middle");
    assert!(!differences("vmprof-report.txt", &report, &flatter).is_empty());
    // A profile difference with other counts and shares, and wider columns.
    let diff = committed("vmprof-diff.txt");
    let other = diff
        .replace(" samples before", "1 samples before")
        .replace("    +", "   -1")
        .replace(".0 ", ".5 ");
    assert_ne!(other, diff);
    assert!(differences("vmprof-diff.txt", &diff, &other).is_empty());
}

#[test]
fn a_stale_block_is_reported() {
    let cases = [
        // A code size and a branch offset of the compiled fib.
        ("jit-fib-code.txt", " bytes at ADDR", "1 bytes at ADDR"),
        // A function name in a perf stack.
        (
            "perf-trampoline-stack.txt",
            "toy:interp:middle:",
            "toy:interp:mid:",
        ),
        // A line number perf attributes samples to.
        (
            "srcline-report.txt",
            "profile_demo.toy:16",
            "profile_demo.toy:17",
        ),
        // A record kind of the jitdump.
        ("jitdump-records.txt", "CODE_LOAD", "CODE_MOVE"),
        // An offset in a line table.
        ("readelf-lines-jit.txt", "0x", "0x1"),
        // The command line: a flag left out.
        ("quick-perf-report.txt", "-F 999 ", ""),
        // A program's output.
        ("tour.txt", "334.75", "334.5"),
        // A frame of gdb's backtrace (not frame #0's line, which may vary).
        ("gdb-backtrace-with-gdb.txt", "Call<false>", "Call<true>"),
        // A function of a profile difference, and its line.
        ("vmprof-diff.txt", "middle (", "muddle ("),
        (
            "vmprof-diff.txt",
            "profile_demo.toy:22",
            "profile_demo.toy:23",
        ),
        // A function in go tool pprof's table.
        ("vmprof-export-pprof.txt", "inner_hot", "inner"),
    ];
    for (name, from, to) in cases {
        let book = committed(name);
        let problems = differences(name, &stale(&book, from, to), &book);
        assert!(
            !problems.is_empty(),
            "{name}: {from:?} -> {to:?} went unnoticed"
        );
        eprintln!("{name}: reported as expected:\n{}", problems.join("\n"));
    }
    // A line left out, and a line added.
    let book = committed("vmprof-folded.txt");
    let shorter: String = book
        .lines()
        .take(book.lines().count() - 1)
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(!differences("vmprof-folded.txt", &shorter, &book).is_empty());
    assert!(!differences("vmprof-folded.txt", &book, &format!("{book}x;y N\n")).is_empty());
}

#[test]
fn an_empty_block_is_reported() {
    for name in [
        "perf-interp-stack.txt",
        "perf-trampoline-stack.txt",
        "srcline-report.txt",
    ] {
        let book = committed(name);
        let commands: String = book
            .lines()
            .filter(|l| is_command(l))
            .map(|l| format!("{l}\n"))
            .collect();
        assert!(
            !empty_block(&book),
            "{name}: the committed block has output"
        );
        for (old, new) in [(&commands, &book), (&book, &commands)] {
            let problems = differences(name, old, new);
            assert!(
                problems.iter().any(|p| p.contains("is empty")),
                "{name}: an empty block went unnoticed: {problems:?}"
            );
        }
    }
    assert!(empty_block(""));
    assert!(empty_block("$ toyvm run x.toy\n  (a note)\n\n"));
}
