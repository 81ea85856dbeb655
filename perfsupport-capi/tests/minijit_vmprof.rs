//! examples/c-minijit's vmprof profile (a shadow stack pushed by C code and
//! by the generated code) read by our reader, the PyPI `vmprof` reader and
//! `toyvm report`.

mod support;

#[path = "../../perfsupport/tests/vmprof_support/venv.rs"]
mod venv;

use std::path::{Path, PathBuf};
use std::process::Command;
use support::{
    cross_target, library_dir, minijit, program, repo_root, run_ok, run_ok_without_map, scratch,
};

const LEAF: &str = "minijit:leaf:3:minijit.mj";
const MIDDLE: &str = "minijit:middle:8:minijit.mj";
const OUTER: &str = "minijit:outer:12:minijit.mj";
const MAIN: &str = "minijit:<main>:1:minijit.c";

/// Runs the mini-JIT with `--vmprof`; the profile's path.
fn profile(dir: &Path) -> Option<PathBuf> {
    let jit = minijit(dir)?;
    let path = dir.join("minijit.prof");
    run_ok_without_map(
        program(jit)
            .current_dir(dir)
            .args(["--perf-map-only", "--rounds", "4000", "--vmprof"])
            .arg(&path),
    );
    Some(path)
}

#[test]
fn generated_code_pushes_its_frames_on_the_shadow_stack() {
    let dir = scratch("vmprof");
    let Some(path) = profile(dir.path()) else {
        return;
    };
    let read = ps::vmprof::read_profile(&path).expect("readable");
    assert_eq!(read.interp, "minijit");
    let named = |id: u64| read.name(id).unwrap_or("?").to_string();
    let full = [MAIN, OUTER, MIDDLE, LEAF];
    assert!(
        read.samples
            .iter()
            .any(|s| s.stack.iter().map(|&id| named(id)).eq(full)),
        "no <main> > outer > middle > leaf sample"
    );
    assert!(
        read.samples
            .iter()
            .all(|s| s.stack.first().map(|&id| named(id)).as_deref() == Some(MAIN)),
        "every sample starts at <main>"
    );
}

#[test]
fn the_pypi_vmprof_reader_reads_the_profile() {
    let venv = match venv::vmprof_venv("0.6.0") {
        Ok(venv) => venv,
        Err(why) => return venv::skip_or_fail(&why),
    };
    let dir = scratch("pypi");
    let Some(path) = profile(dir.path()) else {
        return;
    };
    // argv: PROFILE MAIN OUTER MIDDLE LEAF
    let script = r#"
import sys, vmprof
path, expected = sys.argv[1], sys.argv[2:]
stats = vmprof.read_profile(path)
assert stats.interp == "minijit", stats.interp
names = set(stats.adr_dict.values())
for want in expected:
    assert want in names, (want, names)
tree = stats.get_tree()
assert tree.name == expected[0], tree.name
chain = [tree.name]
node = tree
while node.children:
    node = max(node.children.values(), key=lambda c: c.count)
    chain.append(node.name)
print(" > ".join(chain))
assert chain[:4] == expected, chain
print("samples", len(stats.profiles))
"#;
    let output = run_ok(
        Command::new(venv.join("bin/python"))
            .args(["-c", script])
            .arg(&path)
            .args([MAIN, OUTER, MIDDLE, LEAF]),
    );
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("samples"), "{text}");
}

/// The toyvm to run: `TOYVM_BIN` when set (tools/aarch64-tests points it
/// at the toyvm its own test build made: building one here, with this
/// package's features, would compile jit and toyvm once more), else one
/// built here for the target.
fn toyvm() -> PathBuf {
    if let Some(path) = std::env::var_os("TOYVM_BIN") {
        return PathBuf::from(path);
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    run_ok(
        Command::new(cargo)
            .args(["build", "--release", "-p", "toyvm", "--bin", "toyvm"])
            .args(cross_target().iter().flat_map(|t| ["--target", t]))
            .current_dir(repo_root()),
    );
    library_dir().join("toyvm")
}

#[test]
fn toyvm_report_reads_the_profile() {
    let toyvm = toyvm();
    let dir = scratch("report");
    let Some(path) = profile(dir.path()) else {
        return;
    };
    let output = run_ok(program(&toyvm).arg("report").arg(&path));
    let text = String::from_utf8_lossy(&output.stdout);
    for function in ["leaf", "middle", "outer"] {
        assert!(text.contains(function), "{function} missing from:\n{text}");
    }
    let folded = run_ok(program(&toyvm).args(["report", "--folded"]).arg(&path));
    let folded = String::from_utf8_lossy(&folded.stdout);
    assert!(
        folded.lines().any(|l| {
            let (stack, _) = l.rsplit_once(' ').unwrap_or((l, ""));
            let frames: Vec<&str> = stack.split(';').collect();
            frames.len() >= 4
                && frames[1].contains("outer")
                && frames[2].contains("middle")
                && frames[3].contains("leaf")
        }),
        "no <main>;outer;middle;leaf stack in:\n{folded}"
    );
}
