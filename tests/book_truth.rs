//! The book as a reader types it. `book/reader.py` runs every command of
//! every chapter's ```` ```console ```` blocks, as typed, chapter by chapter
//! in `SUMMARY.md` order, each chapter in one fresh bash session, in a fresh
//! copy of the repository with `HOME` in a temporary directory, after the
//! quick start's build step (this test's own release build). It fails on a
//! command that fails where the book shows no `[exit status N]`, and on
//! output that differs from the book's under its normalisation (pids,
//! addresses, sample counts and durations as placeholders, percentages
//! compared as placeholders, `...` for an abridged listing). The book's
//! command blocks are the one source: `book/generate.sh` writes today's
//! output into them with the same script.
//!
//! Commands that need a tool this machine lacks (perf that may record, gdb,
//! go, cc, inferno) end their chapter's run with a loud message on a
//! developer machine and fail under `CI=true`. The PyPI `vmprofshow` is the
//! one the vmprof tests install in a venv; the reader's test links it where
//! the book installs it (`~/vmprof-venv`).
//!
//! Besides: the comparison's negative controls (`reader.py --self-test`),
//! and two claims of the book that are not command output: the prose about
//! `report --diff` follows the direction of the shares shown beside it, and
//! the jitdump layout picture puts the next region where perfsupport does.
//!
//! To update the book after a change: `book/generate.sh`, and commit the
//! chapters it rewrote.

mod common;
#[path = "../perfsupport/tests/vmprof_support/venv.rs"]
mod venv;

use std::path::PathBuf;
use std::process::Command;

fn book(chapter: &str) -> String {
    let path = common::repo_root().join("book/src").join(chapter);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The PyPI vmprof the vmprof tests use, in its venv; None (with a loud
/// message, a failure under CI=true) when it cannot be installed.
fn vmprof_venv() -> Option<PathBuf> {
    match venv::vmprof_venv("0.6.0") {
        Ok(venv) => Some(venv),
        Err(why) => {
            venv::skip_or_fail(&format!(
                "book_truth: no PyPI vmprof, the vmprofshow commands fail: {why}"
            ));
            None
        }
    }
}

#[test]
fn every_command_of_the_book_prints_what_the_book_shows() {
    let root = common::repo_root();
    let started = std::time::Instant::now();
    let output = Command::new("timeout")
        .args(["--kill-after=10", "1800", "python3"])
        .arg(root.join("book/reader.py"))
        .arg("--release-dir")
        .arg(common::release_dir())
        .args(vmprof_venv().map(|v| format!("--vmprof-venv={}", v.display())))
        .current_dir(&root)
        .output()
        .expect("run book/reader.py");
    let report = String::from_utf8_lossy(&output.stderr);
    eprintln!("book/reader.py took {:.0?}:\n{report}", started.elapsed());
    assert!(
        output.status.success(),
        "the book differs from what its commands print today ({}); run book/generate.sh \
         and commit the chapters it rewrites, or fix what broke:\n{report}",
        output.status
    );
    // Everything ran: at least as many commands as the book had when this
    // test was written, and no more than five shown but not run.
    let ran: usize = report
        .lines()
        .find_map(|l| {
            l.strip_prefix("reader.py: ")?
                .split_once(" commands run")?
                .0
                .parse()
                .ok()
        })
        .expect("the report counts the commands");
    if !report.contains("SKIPPED") {
        assert!(ran >= 150, "only {ran} commands ran:\n{report}");
    }
}

#[test]
fn the_comparison_notices_what_it_must() {
    let output = Command::new("python3")
        .arg(common::repo_root().join("book/reader.py"))
        .arg("--self-test")
        .output()
        .expect("run book/reader.py --self-test");
    let text = String::from_utf8_lossy(&output.stdout);
    eprintln!("{text}{}", String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "{text}");
    assert!(
        text.lines().filter(|l| l.contains(" ok ")).count() >= 20,
        "{text}"
    );
}

/// The `self` change of `function` in the rows the book shows for
/// `toyvm report --diff` (`before after change function`).
fn self_change(rows: &str, function: &str) -> f64 {
    let row = rows
        .lines()
        .find(|l| l.split_whitespace().nth(3) == Some(function))
        .unwrap_or_else(|| panic!("no {function} row in:\n{rows}"));
    row.split_whitespace()
        .nth(2)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no self change in {row:?}"))
}

#[test]
fn the_diff_prose_follows_the_shares_it_explains() {
    let chapter = book("reading-profiles.md");
    let command = "$ toyvm report --diff before.prof after.prof | awk";
    let at = chapter.find(command).expect("the diff rows command");
    let rows = &chapter[at..at + chapter[at..].find("```").expect("block end")];
    let middle = self_change(rows, "middle");
    let inner = self_change(rows, "inner_hot");
    // The prose right after the block, with its line breaks as blanks.
    let prose = chapter[at..]
        .split("```")
        .nth(1)
        .expect("prose after the block");
    let prose = prose.split_whitespace().collect::<Vec<_>>().join(" ");
    let (gained, lost) = (
        "`middle`'s own code gained share from `inner_hot`",
        "`middle`'s own code lost share to `inner_hot`",
    );
    assert!(
        middle * inner < 0.0,
        "the two shares move apart: {middle}, {inner}"
    );
    let said = if middle > 0.0 { gained } else { lost };
    assert!(
        prose.contains(said),
        "middle's self share changes by {middle:+} and inner_hot's by {inner:+}: the prose \
         must say {said:?}:\n{prose}"
    );
}

/// `key=NUMBER` in `text`, after `from`.
fn field(text: &str, from: &str, key: &str) -> u64 {
    let rest = &text[text
        .find(from)
        .unwrap_or_else(|| panic!("{from} not found"))..];
    let at = rest
        .find(&format!("{key}="))
        .unwrap_or_else(|| panic!("{key}= not found"));
    let digits: String = rest[at + key.len() + 1..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().expect("a number")
}

#[test]
fn the_layout_picture_puts_the_next_region_where_perfsupport_does() {
    // The first region of the jitdump the chapter decodes: its code size and
    // the size of its unwind payload.
    let chapter = book("jitdump.md");
    let records = &chapter[chapter
        .find("$ toyvm jitdump --redact")
        .expect("the decoded dump")..];
    let unwind = field(records, "UNWINDING_INFO (id", "unwind_data_size");
    let code = field(records, "CODE_LOAD (id", "code_size");
    let align = |n: u64, to: u64| n.div_ceil(to) * to;
    let marker = perfsupport::unwind::MARKER_LEN as u64;
    let next = align(align(code + marker, 8) + unwind, 16);
    let svg =
        std::fs::read_to_string(common::repo_root().join("book/src/images/jitdump-layout.svg"))
            .expect("the picture");
    let label = svg
        .split("id=\"next-region-address\"")
        .nth(1)
        .and_then(|s| s.split('>').nth(1))
        .and_then(|s| s.split('<').next())
        .expect("the picture labels the next region's address");
    assert_eq!(
        label,
        format!("T+{next:#x}"),
        "code_size {code} + the {marker}-byte marker, padded to 8, + unwind_data_size {unwind}, \
         padded to 16"
    );
}
