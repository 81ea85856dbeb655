//! Profiles written by `toyvm run --vmprof`, read by the real PyPI `vmprof`
//! package: `vmprof.read_profile` finds `<main>` at the root, the exact Toy
//! call chain and our sample counts, and `vmprofshow FILE tree` prints the
//! Toy names.
//!
//! The test creates (once, then reuses) a venv per reader version under
//! `target/` (the same `target/vmprof-venv-VERSION` cache as perfsupport's
//! test) and installs `vmprof==0.6.0` (required) and `vmprof==0.4.18.1`
//! (checked when it installs). Without python3, venv or PyPI the 0.6.0 test
//! is skipped with a loud message, except when `CI=true`, where it fails.

mod common;
#[path = "../perfsupport/tests/vmprof_support/venv.rs"]
mod venv;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::toyvm;
use perfsupport::vmprof::read_profile;
use serde_json::Value;
use venv::{run, skip_or_fail, vmprof_venv};

const SCRIPT: &str = "tests/vmprof/nested.toy";
const CHAIN: [&str; 4] = [
    "toy:<main>:1:tests/vmprof/nested.toy",
    "toy:outer:17:tests/vmprof/nested.toy",
    "toy:middle:13:tests/vmprof/nested.toy",
    "toy:inner_hot:5:tests/vmprof/nested.toy",
];

/// Profiles nested.toy and checks what the reader in `venv` makes of it.
fn check_with_real_reader(venv: &Path, version: &str) {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vmprof_pypi");
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(format!("nested-{version}.prof"));
    let _ = std::fs::remove_file(&path);
    let profiled = toyvm(&[
        "run",
        "--vmprof",
        path.to_str().expect("utf-8"),
        SCRIPT,
        "300",
    ]);
    assert_eq!(profiled.status, Some(0), "stderr: {}", profiled.stderr);

    // Our own reading, to compare counts with.
    let ours = read_profile(&path).expect("our reader");
    let mut inclusive: BTreeMap<String, u64> = BTreeMap::new();
    for sample in &ours.samples {
        let mut ids = sample.stack.clone();
        ids.sort_unstable();
        ids.dedup();
        for id in ids {
            *inclusive
                .entry(ours.name(id).expect("named").to_owned())
                .or_default() += 1;
        }
    }
    let total = ours.samples.len() as u64;
    assert!(total >= 50, "{total} samples");

    let reader = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vmprof/read_with_vmprof.py");
    let json = run(
        Command::new(venv.join("bin/python"))
            .arg(&reader)
            .arg(&path)
            .arg(venv.join("bin/vmprofshow")),
        "read_with_vmprof.py",
    )
    .unwrap_or_else(|e| panic!("vmprof {version} cannot read our profile: {e}"));
    let found: Value = serde_json::from_str(&json).expect("JSON from read_with_vmprof.py");
    eprintln!("--- vmprof {version} ---\n{found:#}");

    assert_eq!(found["interp"], "toyvm");
    assert_eq!(found["samples"], total, "the reader counts our samples");
    // Every sample starts at <main>, also those taken on the background
    // compiler thread (`<main>` -> `<jit compiler>`, see
    // `vm::vmprof::COMPILER_FRAME`): the reader hangs every stack under the
    // first sample's root.
    assert_eq!(found["roots"], serde_json::json!([CHAIN[0]]), "{found}");
    let top: BTreeMap<String, u64> = found["top"]
        .as_object()
        .expect("top is an object")
        .iter()
        .map(|(k, v)| (k.clone(), v.as_u64().expect("count")))
        .collect();
    assert_eq!(top, inclusive, "top_profile matches our inclusive counts");

    // The tree is exactly <main> -> outer -> middle -> inner_hot, with
    // nearly all time in inner_hot.
    let tree = found["tree"].as_array().expect("tree");
    for (depth, name) in CHAIN.iter().enumerate() {
        let node = &tree[depth];
        assert_eq!(node[0], depth as u64, "{tree:?}");
        assert_eq!(node[1], *name, "{tree:?}");
    }
    assert_eq!(tree[0][2], total);
    let inner = tree[3][2].as_u64().expect("count");
    assert!(
        inner * 100 >= total * 90,
        "inner_hot has {inner} of {total}"
    );

    let shown = found["vmprofshow"].as_str().expect("vmprofshow text");
    assert!(!shown.contains("Fatal"), "{shown}");
    for func in ["<main>", "outer", "middle", "inner_hot"] {
        assert!(
            shown.contains(func),
            "vmprofshow tree lacks {func}:\n{shown}"
        );
    }
    assert!(shown.contains("tests/vmprof/nested.toy:5"), "{shown}");
    let _ = std::fs::remove_file(&path);
}

#[test]
fn vmprof_0_6_0_reads_toyvm_profiles() {
    match vmprof_venv("0.6.0") {
        Ok(venv) => check_with_real_reader(&venv, "0.6.0"),
        Err(why) => skip_or_fail(&why),
    }
}

#[test]
fn vmprof_0_4_18_1_reads_toyvm_profiles_when_it_installs() {
    match vmprof_venv("0.4.18.1") {
        Ok(venv) => check_with_real_reader(&venv, "0.4.18.1"),
        Err(why) => eprintln!(
            "{0}\nNOT CHECKED with vmprof 0.4.18.1 (optional): {why}\n{0}",
            "=".repeat(72)
        ),
    }
}
