//! `toyvm report --format pprof|firefox|speedscope` and `--diff`, checked
//! by the tools that read them:
//!
//! * pprof: `go tool pprof -top` names the same functions with the same
//!   self and total sample counts as `--format folded`, and `-top -lines`
//!   the same lines with the counts the profile itself holds;
//! * speedscope: the file validates against the JSON schema shipped in the
//!   npm `speedscope` package;
//! * Firefox: the processed format, checked structurally (threads, sample
//!   count, function names);
//! * `--diff`: a profile against itself changes nothing; the interpreter
//!   against the JIT shows where the time moved; the differential flame
//!   graph is drawn.
//!
//! The outside tools (`go`, `npm`, `python3` with a venv for `jsonschema`)
//! are skipped loudly on a developer machine and required under `CI=true`.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use common::{ToyRun, toyvm_in};

/// The speedscope release whose schema the file must match.
const SPEEDSCOPE: &str = "1.25.0";

/// A fresh directory for one test's files, under Cargo's scratch
/// directory for integration tests (inside `target/`, so that runs leave
/// nothing in `/tmp`; the profiles stay there to look at after a failure).
fn scratch(tag: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("exports-{tag}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

fn ok(run: ToyRun, what: &str) -> ToyRun {
    assert_eq!(run.status, Some(0), "{what}: {run:?}");
    run
}

/// A lines-mode profile of profile_demo.toy (deep enough stacks, several
/// functions), written once per test binary.
fn demo_profile() -> &'static Path {
    static PROFILE: OnceLock<PathBuf> = OnceLock::new();
    PROFILE.get_or_init(|| {
        let dir = scratch("demo");
        let script = common::repo_root().join("examples/scripts/profile_demo.toy");
        let path = dir.join("demo.prof");
        ok(
            toyvm_in(
                &dir,
                &[
                    "run",
                    "--vmprof",
                    path.to_str().unwrap(),
                    "--vmprof-lines",
                    "--vmprof-interval-us",
                    "200",
                    script.to_str().unwrap(),
                    "60000",
                    "100",
                ],
                &[],
            ),
            "recording",
        );
        path
    })
}

/// `toyvm report ARGS... PROFILE` in `dir`.
fn report(dir: &Path, args: &[&str], profile: &Path) -> ToyRun {
    let mut all: Vec<&str> = vec!["report"];
    all.extend_from_slice(args);
    all.push(profile.to_str().unwrap());
    toyvm_in(dir, &all, &[])
}

/// The demo profile exported as `format` (a JSON one): the scratch
/// directory, the file, and its JSON.
fn json_export(format: &str) -> (PathBuf, PathBuf, serde_json::Value) {
    let dir = scratch(format);
    let out = dir.join(format!("demo.{format}.json"));
    let args = ["--format", format, "-o", out.to_str().unwrap()];
    ok(report(&dir, &args, demo_profile()), format);
    let file = serde_json::from_slice(&std::fs::read(&out).unwrap()).expect("JSON");
    (dir, out, file)
}

/// Per function: (self, total) samples, from `--format folded`.
fn folded_counts(dir: &Path, profile: &Path) -> BTreeMap<String, (u64, u64)> {
    let folded = ok(report(dir, &["--format", "folded"], profile), "folded").stdout;
    let mut counts: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for line in folded.lines() {
        let (stack, n) = line.rsplit_once(' ').expect("stack count");
        let n: u64 = n.parse().expect("count");
        let frames: Vec<&str> = stack.split(';').collect();
        let mut seen: Vec<&str> = Vec::new();
        for frame in &frames {
            if !seen.contains(frame) {
                seen.push(frame);
                counts.entry(frame.to_string()).or_default().1 += n;
            }
        }
        counts
            .entry(frames.last().unwrap().to_string())
            .or_default()
            .0 += n;
    }
    counts
}

/// `go tool pprof ARGS... FILE`, or `None` off CI without go.
fn go_pprof(dir: &Path, args: &[&str], file: &Path) -> Option<String> {
    if !common::tool_or_skip("exports-pprof", "go", &["version"]) {
        return None;
    }
    let output = Command::new("go")
        .args(["tool", "pprof"])
        .args(args)
        .arg(file)
        .current_dir(dir)
        .env("HOME", dir)
        .env("PPROF_TMPDIR", dir)
        .output()
        .expect("run go tool pprof");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "go tool pprof {args:?}: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    Some(stdout)
}

/// The rows of `pprof -top`: name (the rest of the line after the five
/// number columns) -> (flat, cum).
fn top_rows(text: &str) -> BTreeMap<String, (u64, u64)> {
    let mut rows = BTreeMap::new();
    let mut in_table = false;
    for line in text.lines() {
        if line.trim_start().starts_with("flat") {
            in_table = true;
            continue;
        }
        if !in_table {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 6 {
            continue;
        }
        let name = fields[5..].join(" ");
        rows.insert(
            name,
            (
                fields[0].parse().expect("flat"),
                fields[3].parse().expect("cum"),
            ),
        );
    }
    rows
}

/// `toyvm report --format pprof -o DIR/demo.pb.gz PROFILE`; the file.
fn pprof_export(dir: &Path, profile: &Path) -> PathBuf {
    let pb = dir.join("demo.pb.gz");
    ok(
        report(
            dir,
            &["--format", "pprof", "-o", pb.to_str().unwrap()],
            profile,
        ),
        "pprof",
    );
    pb
}

#[test]
fn go_tool_pprof_reads_the_same_functions_and_counts_as_folded() {
    let dir = scratch("pprof");
    let profile = demo_profile();
    let pb = pprof_export(&dir, profile);
    let refused = report(&dir, &["--format", "pprof"], profile);
    assert_eq!(refused.status, Some(1), "{refused:?}");
    assert!(refused.stderr.contains("-o FILE"), "{}", refused.stderr);
    let Some(top) = go_pprof(
        &dir,
        &[
            "-top",
            "-nodecount=1000",
            "-nodefraction=0",
            "-sample_index=samples",
        ],
        &pb,
    ) else {
        return;
    };
    // pprof would drop `<main>` as C++ template arguments: toyvm writes
    // `‹main›` (pprof.rs).
    let expected: BTreeMap<String, (u64, u64)> = folded_counts(&dir, profile)
        .into_iter()
        .map(|(name, counts)| (name.replace('<', "‹").replace('>', "›"), counts))
        .collect();
    // Folded stacks write a blank inside a name as `_`.
    let rows: BTreeMap<String, (u64, u64)> = top_rows(&top)
        .into_iter()
        .map(|(name, counts)| (name.replace(' ', "_"), counts))
        .collect();
    assert_eq!(rows, expected, "{top}");
    // CPU time: the second sample type, in the profile's own unit.
    let cpu = go_pprof(&dir, &["-top", "-sample_index=cpu", "-unit=ms"], &pb).unwrap();
    assert!(cpu.contains("Type: cpu"), "{cpu}");
}

#[test]
fn go_tool_pprof_lines_match_the_profiles_own_lines() {
    let dir = scratch("pprof-lines");
    let profile = demo_profile();
    let pb = pprof_export(&dir, profile);
    let Some(top) = go_pprof(
        &dir,
        // -nodefraction=0: pprof drops nodes under 0.5% of the total by
        // default, and a line sampled a few times is such a node.
        &[
            "-top",
            "-lines",
            "-nodecount=1000",
            "-nodefraction=0",
            "-sample_index=samples",
        ],
        &pb,
    ) else {
        return;
    };
    // Self samples per (function, line) of the innermost frame, from the
    // profile read directly.
    let read = perfsupport::vmprof::read_profile(profile).expect("the profile");
    let mut expected: BTreeMap<String, u64> = BTreeMap::new();
    for sample in &read.samples {
        let (Some(&id), Some(&line)) = (sample.stack.last(), sample.lines.last()) else {
            continue;
        };
        let name = perfsupport::vmprof::parse_code_name(read.name(id).unwrap()).unwrap();
        if name.file.is_empty() || name.file == "-" {
            continue; // `<jit compiler>` has no file: pprof shows no line
        }
        let file = name.file.rsplit('/').next().unwrap().to_owned();
        let function = name.func_name.replace('<', "‹").replace('>', "›");
        *expected
            .entry(format!("{function} {file}:{line}"))
            .or_default() += 1;
    }
    let flat: BTreeMap<String, u64> = top_rows(&top)
        .into_iter()
        // Rows with a place (`file:line`); `‹jit compiler›` has none, as
        // go tool pprof shows it (older ones add " -").
        .filter(|(name, (flat, _))| {
            *flat > 0 && name.rsplit(' ').next().is_some_and(|at| at.contains(':'))
        })
        .map(|(name, (flat, _))| {
            // pprof prints `function path/file.toy:line`: keep the base name.
            let (function, at) = name.rsplit_once(' ').expect("function and place");
            let at = at.rsplit('/').next().unwrap();
            (format!("{function} {at}"), flat)
        })
        .collect();
    assert_eq!(flat, expected, "{top}");
}

/// python3 with `jsonschema`, in a venv under `target/`, made once.
fn jsonschema_python() -> Option<PathBuf> {
    if !common::tool_or_skip("exports-speedscope", "python3", &["-m", "venv", "--help"]) {
        return None;
    }
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .to_path_buf();
    let venv = target.join("jsonschema-venv");
    let python = venv.join("bin/python");
    let ready = venv.join(".ready");
    if !ready.exists() {
        let _ = std::fs::remove_dir_all(&venv);
        let made = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status();
        assert!(made.is_ok_and(|s| s.success()), "python3 -m venv");
        let installed = Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .arg("jsonschema==4.23.0")
            .status();
        assert!(
            installed.is_ok_and(|s| s.success()),
            "pip install jsonschema"
        );
        std::fs::write(&ready, "").unwrap();
    }
    Some(python)
}

/// `file-format-schema.json` of the npm `speedscope` package, unpacked
/// under `target/` once.
fn speedscope_schema() -> Option<PathBuf> {
    if !common::tool_or_skip("exports-speedscope", "npm", &["--version"]) {
        return None;
    }
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .to_path_buf();
    let dir = target.join(format!("speedscope-{SPEEDSCOPE}"));
    let schema = dir.join("package/dist/release/file-format-schema.json");
    if !schema.exists() {
        std::fs::create_dir_all(&dir).unwrap();
        let packed = Command::new("npm")
            .args(["pack", "--silent", &format!("speedscope@{SPEEDSCOPE}")])
            .current_dir(&dir)
            .output()
            .expect("run npm pack");
        assert!(packed.status.success(), "npm pack speedscope");
        let tarball = String::from_utf8_lossy(&packed.stdout).trim().to_owned();
        let unpacked = Command::new("tar")
            .args(["xzf", &tarball])
            .current_dir(&dir)
            .status();
        assert!(unpacked.is_ok_and(|s| s.success()), "tar xzf {tarball}");
    }
    Some(schema)
}

#[test]
fn the_speedscope_file_validates_against_speedscopes_schema() {
    let (dir, out, file) = json_export("speedscope");
    let profile = demo_profile();
    // Same stacks and weights as the folded report.
    let frames = file["shared"]["frames"].as_array().unwrap();
    let sampled = &file["profiles"][0];
    let period = perfsupport::vmprof::read_profile(profile)
        .unwrap()
        .period_us as u64;
    let mut stacks: BTreeMap<String, u64> = BTreeMap::new();
    let samples = sampled["samples"].as_array().unwrap();
    let weights = sampled["weights"].as_array().unwrap();
    for (stack, weight) in samples.iter().zip(weights) {
        let names: Vec<&str> = (stack.as_array().unwrap().iter())
            .map(|i| {
                frames[i.as_u64().unwrap() as usize]["name"]
                    .as_str()
                    .unwrap()
            })
            .collect();
        *stacks.entry(names.join(";")).or_default() += weight.as_u64().unwrap() / period;
    }
    let folded = ok(report(&dir, &["--format", "folded"], profile), "folded").stdout;
    let expected: BTreeMap<String, u64> = folded
        .lines()
        .map(|l| {
            let (stack, n) = l.rsplit_once(' ').unwrap();
            (stack.replace('_', " "), n.parse().unwrap())
        })
        .collect();
    let stacks: BTreeMap<String, u64> = stacks
        .into_iter()
        .map(|(k, v)| (k.replace('_', " "), v))
        .collect();
    assert_eq!(stacks, expected);
    let (Some(python), Some(schema)) = (jsonschema_python(), speedscope_schema()) else {
        return;
    };
    let check = Command::new(python)
        .args([
            "-c",
            "import json, sys, jsonschema\n\
             schema = json.load(open(sys.argv[1]))\n\
             jsonschema.validate(json.load(open(sys.argv[2])), schema)\n\
             print('valid')",
        ])
        .arg(&schema)
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
}

#[test]
fn the_firefox_profile_holds_every_sample_and_function() {
    let (_, _, file) = json_export("firefox");
    let profile = demo_profile();
    let read = perfsupport::vmprof::read_profile(profile).unwrap();
    let meta = &file["meta"];
    assert!(
        meta["product"].as_str().unwrap().contains("reconstructed"),
        "{meta}"
    );
    assert_eq!(
        meta["interval"].as_f64().unwrap(),
        read.period_us as f64 / 1000.0
    );
    let threads = file["threads"].as_array().unwrap();
    assert!(!threads.is_empty());
    assert_eq!(threads[0]["isMainThread"], true);
    let mut samples = 0u64;
    let mut names = std::collections::BTreeSet::new();
    for thread in threads {
        let table = &thread["samples"];
        let length = table["length"].as_u64().unwrap();
        samples += match table["weight"].as_array() {
            Some(weights) => weights.iter().map(|w| w.as_u64().unwrap()).sum(),
            None => length,
        };
        let strings = thread["stringArray"]
            .as_array()
            .or(file["shared"]["stringArray"].as_array())
            .expect("a string table");
        for name in thread["funcTable"]["name"].as_array().unwrap() {
            let label = strings[name.as_u64().unwrap() as usize].as_str().unwrap();
            names.insert(label.to_owned());
        }
    }
    assert_eq!(samples, read.samples.len() as u64);
    let expected: std::collections::BTreeSet<String> = (read.samples.iter())
        .flat_map(|s| s.stack.iter())
        .map(|&id| {
            // The label: the name, then `file:line` when the profile says.
            let name = perfsupport::vmprof::parse_code_name(read.name(id).unwrap()).unwrap();
            // `-` is toyvm's "no file" (`<jit compiler>`).
            match name.file.rsplit('/').next() {
                Some(file) if !file.is_empty() && file != "-" => {
                    format!("{} {file}:{}", name.func_name, name.line)
                }
                _ => name.func_name,
            }
        })
        .collect();
    assert_eq!(names, expected);
}

#[test]
fn diff_shows_where_the_time_moved() {
    let dir = scratch("diff");
    let script = common::repo_root().join("examples/scripts/profile_demo.toy");
    let record = |name: &str, tier: &[&str]| {
        let path = dir.join(name);
        let mut args = vec!["run", "--vmprof", path.to_str().unwrap()];
        args.extend_from_slice(tier);
        args.extend_from_slice(&[script.to_str().unwrap(), "40000", "100"]);
        ok(toyvm_in(&dir, &args, &[]), name);
        path
    };
    let before = record("interp.prof", &["--no-jit"]);
    let after = record("jit.prof", &["--jit-threshold", "0"]);
    let same = ok(
        report(&dir, &["--diff", before.to_str().unwrap()], &before),
        "diff itself",
    );
    assert!(
        same.stdout.contains("largest changes first"),
        "{}",
        same.stdout
    );
    for row in same.stdout.lines().skip(4) {
        let change: Vec<&str> = row.split_whitespace().collect();
        assert!(
            change.len() >= 7 && change[2] == "+0.0" && change[5] == "+0.0",
            "a profile against itself changed: {row}"
        );
    }
    let svg = dir.join("diff.svg");
    let moved = ok(
        report(
            &dir,
            &[
                "--diff",
                before.to_str().unwrap(),
                "--flamegraph",
                svg.to_str().unwrap(),
            ],
            &after,
        ),
        "diff",
    );
    assert!(moved.stdout.contains("inner_hot"), "{}", moved.stdout);
    let drawn = std::fs::read_to_string(&svg).unwrap();
    assert!(drawn.contains("<svg"), "not an SVG");
    // Differential frames carry their change in the tooltip.
    assert!(
        drawn.contains("samples") && drawn.contains('%'),
        "no frames"
    );
    let refused = report(
        &dir,
        &[
            "--diff",
            before.to_str().unwrap(),
            "--format",
            "pprof",
            "-o",
            "x.pb.gz",
        ],
        &after,
    );
    assert_eq!(refused.status, Some(1), "{refused:?}");
}

#[test]
fn an_export_never_overwrites_its_profile() {
    let dir = scratch("overwrite");
    let profile = dir.join("p.prof");
    std::fs::copy(demo_profile(), &profile).unwrap();
    let before = std::fs::read(&profile).unwrap();
    let refused = report(&dir, &["--format", "speedscope", "-o", "p.prof"], &profile);
    assert_eq!(refused.status, Some(1), "{refused:?}");
    assert!(
        refused.stderr.contains("-o p.prof would overwrite"),
        "{}",
        refused.stderr
    );
    assert_eq!(std::fs::read(&profile).unwrap(), before);
}
