//! The Firefox Profiler path: `samply import` of a `--perf-jitdump`
//! recording names the hot loop's Toy frames.
//!
//! perf records `tests/perf/nested.toy` (`<main> -> outer -> middle ->
//! inner_hot`, nearly all time in compiled `inner_hot`) with frame-pointer
//! call graphs; `samply import --save-only` turns the raw `perf.data` into a
//! Firefox Profiler profile, finding `jit-PID.dump` through the marker
//! mapping perf saw. The test walks the saved profile's **sample stacks**
//! (sample -> stack -> frame -> func -> name), not just its string table:
//! most samples must have compiled `inner_hot` (`toy:jit:inner_hot` or its
//! OSR variant `toy:jit-osr:inner_hot`) as their leaf, and most of those
//! must have `middle` and `outer` below it.
//!
//! Skipped loudly without perf or samply, except under `CI=true` (`.ci/run`
//! installs samply with `cargo install --locked samply`).

mod common;

use serde_json::Value;

const SCRIPT: &str = "tests/perf/nested.toy";

use common::PerfWork as Work;

/// Every sample's stack as function names, leaf first.
fn sample_stacks(profile: &Value) -> Vec<Vec<String>> {
    let shared = profile["shared"]["stringArray"].as_array();
    let mut stacks = Vec::new();
    for thread in profile["threads"].as_array().expect("threads") {
        // Newer profiles share one string table; older ones have one per thread.
        let strings = thread["stringArray"]
            .as_array()
            .or(shared)
            .expect("a string table");
        let prefix = thread["stackTable"]["prefix"].as_array().expect("prefix");
        let frame = thread["stackTable"]["frame"].as_array().expect("frame");
        let func = thread["frameTable"]["func"].as_array().expect("func");
        let name = thread["funcTable"]["name"].as_array().expect("name");
        for sample in thread["samples"]["stack"].as_array().expect("samples") {
            let mut names = Vec::new();
            let mut stack = sample.as_u64();
            while let Some(s) = stack {
                let s = s as usize;
                let f = frame[s].as_u64().expect("frame index") as usize;
                let fun = func[f].as_u64().expect("func index") as usize;
                let n = name[fun].as_u64().expect("name index") as usize;
                names.push(strings[n].as_str().unwrap_or("").to_string());
                stack = prefix[s].as_u64();
            }
            stacks.push(names);
        }
    }
    stacks
}

#[test]
fn samply_import_names_the_hot_loop_frames() {
    if !common::tool_or_skip("samply", "perf", &["--version"])
        || !common::tool_or_skip("samply", "samply", &["--version"])
    {
        return;
    }
    let work = Work::new("samply");
    let dir = work.dir.to_str().expect("utf-8 temp dir");
    let script = common::repo_root().join(SCRIPT);
    work.run_ok(
        "perf",
        &[
            "record",
            "-q",
            "-k",
            "1",
            "-e",
            "cpu-clock",
            "-g",
            "-o",
            "perf.data",
            "--",
            env!("CARGO_BIN_EXE_toyvm"),
            "run",
            "--perf-jitdump",
            "--perf-dir",
            dir,
            script.to_str().expect("utf-8 path"),
            "20",
            "4000000",
        ],
    );
    work.run_ok(
        "samply",
        &["import", "--save-only", "-o", "profile.json", "perf.data"],
    );
    let text = std::fs::read_to_string(work.dir.join("profile.json")).expect("profile.json");
    let profile: Value = serde_json::from_str(&text).expect("profile JSON");
    let stacks = sample_stacks(&profile);
    let leaf_hot: Vec<&Vec<String>> = stacks
        .iter()
        .filter(|s| {
            // The whole function or its OSR variant: the tier-up
            // compiles a hot loop's OSR variant first, and the whole
            // function only once it keeps being called.
            s.first().is_some_and(|f| {
                f.starts_with("toy:jit:inner_hot:") || f.starts_with("toy:jit-osr:inner_hot:")
            })
        })
        .collect();
    assert!(
        leaf_hot.len() * 2 > stacks.len(),
        "{} of {} samples in compiled inner_hot; first stacks: {:#?}",
        leaf_hot.len(),
        stacks.len(),
        &stacks[..stacks.len().min(5)]
    );
    let chained = leaf_hot
        .iter()
        .filter(|s| {
            let has = |f: &str| s.iter().any(|n| n.contains(&format!(":{f}:")));
            has("middle") && has("outer")
        })
        .count();
    assert!(
        chained * 2 > leaf_hot.len(),
        "only {chained} of {} inner_hot samples reach middle and outer: {:#?}",
        leaf_hot.len(),
        &leaf_hot[..leaf_hot.len().min(3)]
    );
}

/// Each thread's samples' leaf function names, in the order of the
/// samples (time order).
fn leaves_by_thread(profile: &Value) -> Vec<Vec<String>> {
    let shared = profile["shared"]["stringArray"].as_array();
    let mut threads = Vec::new();
    for thread in profile["threads"].as_array().expect("threads") {
        let strings = thread["stringArray"]
            .as_array()
            .or(shared)
            .expect("strings");
        let frame = thread["stackTable"]["frame"].as_array().expect("frame");
        let func = thread["frameTable"]["func"].as_array().expect("func");
        let name = thread["funcTable"]["name"].as_array().expect("name");
        let leaves = (thread["samples"]["stack"]
            .as_array()
            .expect("samples")
            .iter())
        .filter_map(|s| s.as_u64())
        .map(|s| {
            let f = frame[s as usize].as_u64().unwrap() as usize;
            let fun = func[f].as_u64().unwrap() as usize;
            let n = name[fun].as_u64().unwrap() as usize;
            strings[n].as_str().unwrap_or("").to_string()
        })
        .collect();
        threads.push(leaves);
    }
    threads
}

/// `examples/scripts/phases.toy` (eight functions hot one after another,
/// in rounds) under a code limit of four pages, so its code is evicted and compiled
/// again at reused addresses: samply, reading the jitdump, names each
/// sample for the phase running at its time (see
/// `tests/code_cache_profiles.rs` for the check).
#[test]
fn samply_names_evicted_and_recompiled_code_by_time() {
    if !common::tool_or_skip("samply", "perf", &["--version"])
        || !common::tool_or_skip("samply", "samply", &["--version"])
    {
        return;
    }
    let work = Work::new("samply-evict");
    let dir = work.dir.to_str().expect("utf-8 temp dir");
    let script = common::repo_root().join("examples/scripts/phases.toy");
    let toyvm = env!("CARGO_BIN_EXE_toyvm");
    let record = [
        "record",
        "-q",
        "-k",
        "1",
        "-e",
        "cpu-clock",
        "-F",
        "2000",
        "-o",
        "perf.data",
    ];
    let four_pages = common::pages(4);
    let mut args: Vec<&str> = record.to_vec();
    args.extend([
        "--",
        toyvm,
        "run",
        "--jit-threshold",
        "10",
        "--jit-code-limit",
        &four_pages,
    ]);
    args.extend([
        "--perf-jitdump",
        "--perf-dir",
        dir,
        script.to_str().unwrap(),
        "3",
        "20000",
    ]);
    work.run_ok("perf", &args);
    work.run_ok(
        "samply",
        &["import", "--save-only", "-o", "profile.json", "perf.data"],
    );
    let text = std::fs::read_to_string(work.dir.join("profile.json")).expect("profile.json");
    let profile: Value = serde_json::from_str(&text).expect("profile JSON");
    let phase = |name: &str| -> Option<u32> {
        let rest = name.strip_prefix("toy:")?;
        let at = rest.find("phase")?;
        rest[at + 5..].chars().next()?.to_digit(10)
    };
    let phases: Vec<u32> = (leaves_by_thread(&profile).into_iter())
        .map(|leaves| leaves.iter().filter_map(|l| phase(l)).collect::<Vec<u32>>())
        .max_by_key(Vec::len)
        .unwrap_or_default();
    assert!(phases.len() > 50, "{} samples in phase code", phases.len());
    let mut distinct = phases.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert!(distinct.len() >= 6, "phases sampled: {distinct:?}");
    let (mut rounds, mut last) = (0, None);
    for &p in &phases {
        if last.is_none_or(|l| p < l) {
            rounds += 1;
        }
        last = Some(p);
    }
    assert!(
        rounds <= 3,
        "the samples in time order imply {rounds} rounds: {phases:?}"
    );
}
