//! The repository stands on its own: no tracked file points outside it,
//! every comment that cites the language reference names a section that
//! `LANGUAGE.md` has, and README's status numbers are the ones
//! `bench/RESULTS.md` holds (README's block is derived from it by
//! `bench/summarize.py`, which the benchmark runner calls).
//!
//! The checks that need an outside tool (`git` to list the tracked files,
//! `python3` to run `bench/summarize.py`) are skipped loudly on a developer
//! machine without it, and fail under `CI=true`.

mod common;

use std::process::Command;

use common::repo_root;

/// Skips the calling test with a loud message, or fails it under `CI=true`.
fn missing_tool(why: &str) {
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI=true, so this is a failure: {why}"
    );
    eprintln!("SKIPPED (not a pass): {why}");
}

/// The repository's tracked files (relative paths), or `None` when git
/// cannot list them (git missing, or not a git checkout).
fn tracked_files() -> Option<Vec<String>> {
    let output = Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(repo_root())
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    let names = String::from_utf8(output.stdout).ok()?;
    Some(
        names
            .split('\0')
            .filter(|n| !n.is_empty())
            .map(String::from)
            .collect(),
    )
}

/// The text of a tracked file, or `None` for binary files.
fn text_of(path: &str) -> Option<String> {
    String::from_utf8(std::fs::read(repo_root().join(path)).ok()?).ok()
}

#[test]
fn no_tracked_file_outside_ci_references_the_directory_beside_the_repository() {
    let Some(files) = tracked_files() else {
        missing_tool("self_contained: `git ls-files` failed (git missing or not a checkout)");
        return;
    };
    // Spelled in two pieces so that this file does not match itself.
    let needle = format!("{}/{}", "..", "shared");
    let offenders: Vec<String> = files
        .iter()
        .filter(|path| !path.starts_with(".ci/"))
        .filter_map(|path| {
            let text = text_of(path)?;
            let lines: Vec<String> = text
                .lines()
                .enumerate()
                .filter(|(_, line)| line.contains(&needle))
                .map(|(i, line)| format!("{path}:{}: {}", i + 1, line.trim()))
                .collect();
            (!lines.is_empty()).then(|| lines.join("\n"))
        })
        .collect();
    assert!(
        offenders.is_empty(),
        "tracked files must not depend on anything outside the repository:\n{}",
        offenders.join("\n")
    );
}

/// The headings (`## ...`, `### ...`) of LANGUAGE.md.
fn language_sections() -> Vec<String> {
    let text = std::fs::read_to_string(repo_root().join("LANGUAGE.md")).expect("read LANGUAGE.md");
    text.lines()
        .filter(|line| line.starts_with("## ") || line.starts_with("### "))
        .map(|line| line.trim_start_matches('#').trim().to_string())
        .collect()
}

/// The section names cited in `text` the way `(LANGUAGE.md, "Builtins")` cites one.
fn cited_sections(text: &str) -> Vec<String> {
    let marker = "LANGUAGE.md, \"";
    text.match_indices(marker)
        .filter_map(|(at, _)| {
            let rest = &text[at + marker.len()..];
            rest.find('"').map(|end| rest[..end].to_string())
        })
        .collect()
}

#[test]
fn citations_of_the_language_reference_name_its_sections() {
    let Some(files) = tracked_files() else {
        missing_tool("self_contained: `git ls-files` failed (git missing or not a checkout)");
        return;
    };
    let sections = language_sections();
    assert!(
        sections.iter().any(|s| s == "Runtime errors"),
        "LANGUAGE.md lost its sections? found {sections:?}"
    );
    let mut citations = 0;
    let mut broken = Vec::new();
    for path in &files {
        let Some(text) = text_of(path) else { continue };
        for section in cited_sections(&text) {
            citations += 1;
            if !sections.contains(&section) {
                broken.push(format!("{path}: LANGUAGE.md has no section \"{section}\""));
            }
        }
    }
    assert!(
        citations >= 10,
        "the front end's comments cite LANGUAGE.md by section; found only {citations} citations"
    );
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

#[test]
fn citation_parsing_finds_each_quoted_section() {
    let text = r#"(LANGUAGE.md, "Builtins") and LANGUAGE.md, "Limits"; LANGUAGE.md alone"#;
    assert_eq!(cited_sections(text), ["Builtins", "Limits"]);
}

/// The part of README.md from the status begin marker to the end marker,
/// both included, with its final newline.
fn readme_status_block() -> String {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).expect("read README.md");
    let begin = readme
        .find("<!-- status:begin")
        .expect("README.md has a status block (<!-- status:begin ...)");
    let end_marker = "<!-- status:end -->";
    let end = readme[begin..]
        .find(end_marker)
        .map(|i| begin + i + end_marker.len())
        .expect("README.md's status block ends with <!-- status:end -->");
    format!("{}\n", &readme[begin..end])
}

#[test]
fn readme_status_numbers_are_the_ones_in_bench_results() {
    let output = match Command::new("python3")
        .args(["bench/summarize.py", "--status", "bench/RESULTS.md"])
        .current_dir(repo_root())
        .output()
    {
        Ok(output) => output,
        Err(e) => {
            missing_tool(&format!("self_contained: cannot run python3: {e}"));
            return;
        }
    };
    assert!(
        output.status.success(),
        "bench/summarize.py --status failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let expected = String::from_utf8(output.stdout).expect("UTF-8 status block");
    assert!(
        expected.contains("| default |"),
        "the status block has no default-size row:\n{expected}"
    );
    assert_eq!(
        readme_status_block(),
        expected,
        "README.md's status block is stale: run \
         `python3 bench/summarize.py --readme README.md bench/RESULTS.md`"
    );
}
