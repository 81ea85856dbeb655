//! The crates' components and the one-way edges between them.
//!
//! `vm`, `jit` and `perfsupport` are each a stack of named components, one
//! folder (or file) of `src/` each, listed top to bottom in [`VM`], [`JIT`]
//! and [`PERFSUPPORT`] (the crates' top docs and the book's "Layers" page
//! draw the same stacks). A
//! component may use the components below it and never one above it, so
//! the `use` graph between components has no loop; loops inside one
//! component's folder are its own business. The JIT sees the VM only
//! through `vm::abi` (the façade a tier uses) and `vm::bytecode` (its
//! input).
//!
//! The graph is read from the source: every `crate::NAME` (also inside
//! `use crate::{...}`) outside comments and test code is an edge from the
//! file's component to `NAME`'s. Test code (a `#[cfg(test)]` module, which
//! the crates put last in a file, and `tests.rs` files) may reach anywhere.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

// ANCHOR: stacks
/// `vm`'s components, top to bottom.
const VM: &[&str] = &[
    "driver",   // host API: load a script, run it
    "abi",      // the façade a tier uses
    "vmprof",   // profiling a VM's Toy stack
    "front",    // lexer, parser, checker, bytecode compiler
    "interp",   // execution core: the Vm, the interpreter, tier-up
    "runtime",  // services: heap, output, print, builtins, errors
    "bytecode", // the instruction table, modules, verifier, listings
    "types",    // the vocabulary every stage shares
];

/// `jit`'s components, top to bottom.
const JIT: &[&str] = &[
    "disasm",    // `disasm --jit`: drives the compiler
    "policy",    // when to compile what
    "compiler",  // runs requests; owns Cranelift and the profilers
    "translate", // bytecode -> Cranelift IR, the compile budget
    "codegen",   // code memory and publishing
    "abi",       // signatures, helpers, shims, frames
    "options",   // JitOptions and switches
];

/// `perfsupport`'s components, top to bottom: the profilers, then what
/// they share. Siblings with no edge between them (the three sinks) may
/// stand in any order.
const PERFSUPPORT: &[&str] = &[
    "vmprof",     // sampling the VM's own stack (no sink)
    "gdb_jit",    // the GDB JIT interface sink
    "jitdump",    // the jitdump sink and its reader
    "perf_map",   // the perf map sink
    "elf_code",   // JIT code that runs from ELF files (code memory, no sink)
    "icache",     // new code made visible to instruction fetch (aarch64)
    "sink",       // ProfilerSink and Profilers
    "validation", // the checks every sink relies on
    "dwarf",      // the DWARF (lines, functions) of a batch of regions
    "unwind",     // describing frames; .eh_frame and perf's unwind layout
    "eh_frame",   // the CIE/FDE writer both layouts share
    "region",     // CodeRegion, the vocabulary
    "safe_file",  // creating output files safely
    "os",         // clocks, thread ids, mappings
    "threads",    // the thread registry
];
// ANCHOR_END: stacks

/// The paths of `vm` the JIT may name.
const VM_FOR_JIT: &[&str] = &["abi", "bytecode"];

/// The component of a file `rel` (relative to `src/`): its folder, or the
/// file's own name; `None` for the crate root.
fn component(rel: &Path) -> Option<String> {
    let first = rel.components().next()?.as_os_str().to_str()?.to_string();
    match first.strip_suffix(".rs") {
        Some("lib") => None,
        Some(name) => Some(name.to_string()),
        None => Some(first),
    }
}

/// Every `.rs` file under `dir`, relative to it.
fn sources(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("read src dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path.strip_prefix(dir).expect("under src").to_path_buf());
            }
        }
    }
    out.sort();
    out
}

/// The lines of `text` that are code outside tests: comment lines left
/// out, and nothing from the first `#[cfg(test)]` on.
fn code_lines(text: &str) -> impl Iterator<Item = &str> {
    text.lines()
        .take_while(|l| l.trim() != "#[cfg(test)]")
        .filter(|l| !l.trim_start().starts_with("//"))
}

/// The first path segments after each `prefix` (`crate::`, `vm::`) in
/// `line`, expanding `prefix{a, b::c}` groups.
fn named_after<'a>(line: &'a str, prefix: &str) -> Vec<&'a str> {
    let mut found = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find(prefix) {
        // `$crate::` (macros) and `foo_crate::` are not this crate.
        let before = rest[..at].chars().next_back();
        rest = &rest[at + prefix.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let item = item.trim();
                let name = item.split("::").next().unwrap_or("");
                if !name.is_empty() {
                    found.push(name);
                }
            }
        } else {
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            found.push(&rest[..end]);
        }
    }
    found
}

/// The edges between components of `crate_dir`, with the files behind
/// each, and (for a crate that uses `vm`) every `vm::NAME` it names.
type Edges = BTreeMap<(String, String), BTreeSet<String>>;

fn graph(crate_dir: &str) -> (Edges, Edges) {
    let src = common::repo_root().join(crate_dir).join("src");
    let (mut edges, mut vm_uses) = (Edges::new(), Edges::new());
    for rel in sources(&src) {
        if rel.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(src.join(&rel)).expect("read source");
        let from = component(&rel).unwrap_or_else(|| "<root>".into());
        let file = rel.display().to_string();
        for line in code_lines(&text) {
            for name in named_after(line, "crate::") {
                if name != from {
                    let key = (from.clone(), name.to_string());
                    edges.entry(key).or_default().insert(file.clone());
                }
            }
            for name in named_after(line, "vm::") {
                let key = (from.clone(), name.to_string());
                vm_uses.entry(key).or_default().insert(file.clone());
            }
        }
    }
    (edges, vm_uses)
}

/// The edges of `crate_dir` that do not go down the stack `layers`.
fn upward_edges(crate_dir: &str, layers: &[&str]) -> Vec<String> {
    against_the_stack(crate_dir, &graph(crate_dir).0, layers)
}

/// The edges of `edges` that do not go down the stack `layers`.
fn against_the_stack(crate_dir: &str, edges: &Edges, layers: &[&str]) -> Vec<String> {
    let rank = |c: &str| layers.iter().position(|&l| l == c);
    let mut bad = Vec::new();
    for ((from, to), files) in edges {
        let ok = match (from.as_str(), rank(from), rank(to)) {
            // The crate root declares the components and re-exports.
            ("<root>", _, Some(_)) => true,
            (_, Some(a), Some(b)) => a < b,
            _ => false,
        };
        if !ok {
            bad.push(format!("{crate_dir}: {from} -> {to} ({files:?})"));
        }
    }
    bad
}

#[test]
fn every_source_file_belongs_to_a_named_component() {
    for (crate_dir, layers) in [("vm", VM), ("jit", JIT), ("perfsupport", PERFSUPPORT)] {
        let src = common::repo_root().join(crate_dir).join("src");
        for rel in sources(&src) {
            if let Some(c) = component(&rel) {
                assert!(
                    layers.contains(&c.as_str()),
                    "{crate_dir}/src/{}: component `{c}` is not in the stack {layers:?}",
                    rel.display()
                );
            }
        }
    }
}

#[test]
fn vm_components_use_only_components_below_them() {
    let bad = upward_edges("vm", VM);
    assert!(
        bad.is_empty(),
        "edges against the stack:\n{}",
        bad.join("\n")
    );
}

#[test]
fn jit_components_use_only_components_below_them() {
    let bad = upward_edges("jit", JIT);
    assert!(
        bad.is_empty(),
        "edges against the stack:\n{}",
        bad.join("\n")
    );
}

#[test]
fn perfsupport_components_use_only_components_below_them() {
    // Its last circle was jitdump -> sink -> validation -> jitdump (the
    // unwind payload's size); the payload's layout lives in `unwind` now.
    let bad = upward_edges("perfsupport", PERFSUPPORT);
    assert!(
        bad.is_empty(),
        "edges against the stack:\n{}",
        bad.join("\n")
    );
    // The check sees the edges that are there.
    let (edges, _) = graph("perfsupport");
    assert!(edges.contains_key(&("jitdump".to_string(), "sink".to_string())));
}

#[test]
fn the_jit_sees_the_vm_only_through_abi_and_bytecode() {
    let (_, vm_uses) = graph("jit");
    let bad: Vec<String> = (vm_uses.iter())
        .filter(|((_, name), _)| !VM_FOR_JIT.contains(&name.as_str()))
        .map(|((from, name), files)| format!("{from} -> vm::{name} ({files:?})"))
        .collect();
    assert!(bad.is_empty(), "jit/src names:\n{}", bad.join("\n"));
    // The check sees the uses that are there.
    assert!(vm_uses.keys().any(|(_, name)| name == "abi"));
}

/// Negative controls: the reader finds the edges a loop or a forbidden
/// path would add, so the tests above can fail.
#[test]
fn the_reader_sees_edges_in_every_form() {
    assert_eq!(named_after("use crate::interp::Vm;", "crate::"), ["interp"]);
    assert_eq!(
        named_after("use crate::{front::ast, runtime};", "crate::"),
        ["front", "runtime"]
    );
    assert_eq!(
        named_after("let x = crate::abi::offsets::DEPTH;", "crate::"),
        ["abi"]
    );
    assert!(named_after("$crate::bytecode::Reg", "crate::").is_empty());
    assert_eq!(named_after("use vm::runtime::heap;", "vm::"), ["runtime"]);
    assert!(named_after("use jit::vm_like::x;", "vm::").is_empty());
    let code: Vec<&str> =
        code_lines("use a;\n// crate::x\n#[cfg(test)]\nmod tests { use crate::y; }").collect();
    assert_eq!(code, ["use a;"]);
    // An upward edge is reported: the real graph plus one edge against it.
    let (mut edges, _) = graph("vm");
    assert!(against_the_stack("vm", &edges, VM).is_empty());
    let up = ("runtime".to_string(), "interp".to_string());
    edges
        .entry(up)
        .or_default()
        .insert("runtime/heap.rs".into());
    let bad = against_the_stack("vm", &edges, VM);
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert!(bad[0].contains("runtime -> interp"), "{bad:?}");
}
