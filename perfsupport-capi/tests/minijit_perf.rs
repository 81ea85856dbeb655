//! examples/c-minijit under the real `perf`: perf map names and
//! frame-pointer stacks; `perf inject --jit` with DWARF unwinding through
//! the function without a frame pointer (and the negative control without
//! its CFI); `perf report --sort srcline` and `perf annotate`.

// perf cannot sample emulated code (the aarch64 stage runs under qemu):
// these run on x86-64 only; minijit_vmprof checks the aarch64 build.
#![cfg(target_arch = "x86_64")]

mod support;

use std::path::{Path, PathBuf};
use support::{minijit, missing, perf, record_dwarf_and_inject, run_ok, scratch};

/// The mini-JIT, or `None` when a tool is missing off CI.
fn setup(tag: &str) -> Option<(support::Scratch, PathBuf)> {
    if missing("perf", &["--version"]) {
        return None;
    }
    let dir = scratch(tag);
    let jit = minijit(dir.path())?;
    Some((dir, jit))
}

/// `perf script` call chains, innermost frame first, one per sample.
fn call_chains(dir: &Path, data: &str) -> Vec<Vec<String>> {
    let output = run_ok(perf(dir).args(["script", "-F", "ip,sym", "-i", data]));
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let mut chains = Vec::new();
    let mut chain = Vec::new();
    for line in text.lines().chain(std::iter::once("")) {
        let line = line.trim();
        if line.is_empty() {
            if !chain.is_empty() {
                chains.push(std::mem::take(&mut chain));
            }
            continue;
        }
        // "<ip> <symbol>"
        let symbol = line.split_once(' ').map_or("", |(_, s)| s).trim();
        chain.push(symbol.to_string());
    }
    chains
}

/// True if some chain has `frames` as consecutive frames.
fn has_sequence(chains: &[Vec<String>], frames: &[&str]) -> bool {
    chains.iter().any(|chain| {
        chain
            .windows(frames.len())
            .any(|w| w.iter().zip(frames).all(|(a, b)| a.starts_with(b)))
    })
}

fn summary(chains: &[Vec<String>]) -> String {
    let mut text = String::new();
    for chain in chains.iter().take(15) {
        text.push_str(&chain.join(" <- "));
        text.push('\n');
    }
    text
}

#[test]
fn perf_map_names_and_frame_pointer_stacks() {
    let Some((dir, jit)) = setup("fp") else {
        return;
    };
    let d = dir.path();
    run_ok(
        perf(d)
            .args(["record", "-q", "-e", "cpu-clock", "-g", "-o", "perf.data"])
            .arg(&jit)
            .args(["--perf-map-only", "--rounds", "3000"]),
    );
    let chains = call_chains(d, "perf.data");
    // middle has a frame pointer: its samples unwind to outer and the C
    // host, named by the perf map.
    assert!(
        has_sequence(&chains, &["minijit::middle", "minijit::outer", "run_jit"]),
        "no middle <- outer <- run_jit chain:\n{}",
        summary(&chains)
    );
    assert!(
        has_sequence(&chains, &["minijit::leaf"]),
        "no sample named minijit::leaf:\n{}",
        summary(&chains)
    );
}

/// Records with DWARF unwinding, injects the jitdump, returns the chains.
fn dwarf_chains(tag: &str, extra: &[&str]) -> Option<Vec<Vec<String>>> {
    let (dir, jit) = setup(tag)?;
    let d = dir.path();
    let mut args = vec!["--jitdump-dir", ".", "--rounds", "3000"];
    args.extend(extra);
    record_dwarf_and_inject(d, &jit, &args);
    Some(call_chains(d, "perf.jit.data"))
}

#[test]
fn dwarf_unwinding_goes_through_the_leaf_without_frame_pointer() {
    let Some(chains) = dwarf_chains("dwarf", &[]) else {
        return;
    };
    // Frame pointers alone would skip middle (leaf does not push rbp):
    // only leaf's CFI rows give leaf <- middle <- outer.
    assert!(
        has_sequence(
            &chains,
            &[
                "minijit::leaf",
                "minijit::middle",
                "minijit::outer",
                "run_jit"
            ]
        ),
        "no leaf <- middle <- outer <- run_jit chain:\n{}",
        summary(&chains)
    );
}

#[test]
fn without_cfi_the_leaf_loses_its_caller() {
    let Some(chains) = dwarf_chains("nocfi", &["--no-cfi"]) else {
        return;
    };
    assert!(
        has_sequence(&chains, &["minijit::leaf"]),
        "no leaf samples at all:\n{}",
        summary(&chains)
    );
    assert!(
        !has_sequence(&chains, &["minijit::leaf", "minijit::middle"]),
        "leaf <- middle unwound without CFI, so the control proves nothing:\n{}",
        summary(&chains)
    );
}

#[test]
fn srcline_and_annotate_show_the_lines_and_the_live_bytes() {
    let Some((dir, jit)) = setup("lines") else {
        return;
    };
    let d = dir.path();
    run_ok(
        perf(d)
            .args([
                "record",
                "-q",
                "-k",
                "1",
                "-e",
                "cpu-clock",
                "-o",
                "perf.data",
            ])
            .arg(&jit)
            .args(["--jitdump-dir"])
            .arg(d)
            .args(["--rounds", "3000"]),
    );
    run_ok(perf(d).args(["inject", "--jit", "-i", "perf.data", "-o", "perf.jit.data"]));
    let report = run_ok(perf(d).args([
        "report",
        "--stdio",
        "-i",
        "perf.jit.data",
        "--sort",
        "srcline",
        "--percent-limit",
        "3",
    ]));
    let report = String::from_utf8_lossy(&report.stdout);
    // leaf's and middle's hot loops are lines 5 and 9 of minijit.mj.
    for line in ["minijit.mj:5", "minijit.mj:9"] {
        assert!(report.contains(line), "{line} missing from:\n{report}");
    }
    let annotate = run_ok(perf(d).args([
        "annotate",
        "--stdio",
        "-i",
        "perf.jit.data",
        "minijit::leaf",
    ]));
    let annotate = String::from_utf8_lossy(&annotate.stdout);
    // The hot loop as it runs: add rax, rdi; dec rdi; jnz (AT&T syntax).
    for instruction in ["add    %rdi,%rax", "dec    %rdi", "jne"] {
        assert!(
            annotate.contains(instruction),
            "`{instruction}` missing from perf annotate:\n{annotate}"
        );
    }
    // The function's tail (shadow-stack pop, add rsp, ret) is intact too.
    for instruction in ["decq   (%rcx)", "add    $0x18,%rsp", "ret"] {
        assert!(
            annotate.contains(instruction),
            "`{instruction}` missing from perf annotate:\n{annotate}"
        );
    }
}
