//! The book builds with mdbook, and none of its internal links or
//! `{{#include}}` directives point at something that does not exist.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn book_dir() -> PathBuf {
    common::repo_root().join("book")
}

/// Every Markdown file of the book's source.
fn chapters() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(book_dir().join("src"))
        .expect("book/src")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    files.sort();
    files
}

/// The targets of inline Markdown links `[text](target)` in `text`.
fn link_targets(text: &str) -> Vec<String> {
    let mut targets = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        if let Some(end) = rest.find(')') {
            targets.push(rest[..end].to_string());
        }
    }
    targets
}

/// The `path[:anchor]` arguments of `{{#include ...}}` directives.
fn includes(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("{{#include ") {
        rest = &rest[at + "{{#include ".len()..];
        if let Some(end) = rest.find("}}") {
            found.push(rest[..end].trim().to_string());
        }
    }
    found
}

/// GitHub-style heading ids of a Markdown file (what `#anchor` links name).
fn heading_ids(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| {
            l.trim_start_matches('#')
                .trim()
                .to_lowercase()
                .chars()
                .filter_map(|c| match c {
                    'a'..='z' | '0'..='9' | '-' | '_' => Some(c),
                    ' ' => Some('-'),
                    _ => None,
                })
                .collect()
        })
        .collect()
}

fn check_link(chapter: &Path, target: &str, problems: &mut Vec<String>) {
    if target.contains("://") || target.starts_with("mailto:") || target.is_empty() {
        return;
    }
    let (file, anchor) = match target.split_once('#') {
        Some((file, anchor)) => (file, Some(anchor)),
        None => (target, None),
    };
    let path = if file.is_empty() {
        chapter.to_path_buf()
    } else {
        chapter.parent().expect("chapter dir").join(file)
    };
    if !path.exists() {
        problems.push(format!("{}: broken link {target}", chapter.display()));
        return;
    }
    if let Some(anchor) = anchor.filter(|_| path.extension().is_some_and(|e| e == "md")) {
        let text = std::fs::read_to_string(&path).expect("linked chapter");
        if !heading_ids(&text).iter().any(|id| id == anchor) {
            problems.push(format!(
                "{}: no heading #{anchor} in {file}",
                chapter.display()
            ));
        }
    }
}

fn check_include(chapter: &Path, spec: &str, problems: &mut Vec<String>) {
    let (file, anchor) = match spec.split_once(':') {
        Some((file, anchor)) if !anchor.chars().all(|c| c.is_ascii_digit() || c == ':') => {
            (file, Some(anchor))
        }
        Some((file, _lines)) => (file, None),
        None => (spec, None),
    };
    let path = chapter.parent().expect("chapter dir").join(file);
    let Ok(text) = std::fs::read_to_string(&path) else {
        problems.push(format!(
            "{}: include of missing file {file}",
            chapter.display()
        ));
        return;
    };
    if let Some(anchor) = anchor {
        let start = format!("ANCHOR: {anchor}");
        let end = format!("ANCHOR_END: {anchor}");
        if !text.contains(&start) || !text.contains(&end) {
            problems.push(format!(
                "{}: {file} has no anchor {anchor}",
                chapter.display()
            ));
        }
    }
}

#[test]
fn internal_links_and_includes_resolve() {
    let mut problems = Vec::new();
    let chapters = chapters();
    assert!(chapters.len() >= 3, "the book has chapters");
    for chapter in &chapters {
        let text = std::fs::read_to_string(chapter).expect("chapter");
        for target in link_targets(&text) {
            check_link(chapter, &target, &mut problems);
        }
        for spec in includes(&text) {
            check_include(chapter, &spec, &mut problems);
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_book_builds_with_mdbook() {
    if Command::new("mdbook").arg("--version").output().is_err() {
        let message = "mdbook is not installed: `cargo install mdbook` (the book was not built)";
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{message}");
        eprintln!("SKIPPED: {message}");
        return;
    }
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("book-html");
    let build = Command::new("mdbook")
        .arg("build")
        .arg("--dest-dir")
        .arg(&out)
        .arg(book_dir())
        .output()
        .expect("run mdbook");
    let stderr = String::from_utf8_lossy(&build.stderr);
    assert!(build.status.success(), "mdbook build failed:\n{stderr}");
    // Free of warnings too (an include whose anchor moved, a missing
    // file, HTML it cannot parse): mdbook logs them as WARN and goes on.
    assert!(
        !stderr.contains("ERROR") && !stderr.contains("WARN"),
        "mdbook reported errors or warnings:\n{stderr}"
    );
    for chapter in chapters() {
        let stem = chapter
            .file_stem()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        if stem == "SUMMARY" {
            continue;
        }
        assert!(
            out.join(format!("{stem}.html")).exists(),
            "{stem}.md is not in SUMMARY.md, so mdbook did not build it"
        );
    }
}
