//! Our profiles, read by the real PyPI `vmprof` package.
//!
//! Creates (once, then reuses) a venv per reader version next to Cargo's
//! `target/tmp`, installs `vmprof==0.6.0` (required) and `vmprof==0.4.18.1`
//! (checked when it installs), records a profile of the nested workload with
//! our sampler, and runs `tests/vmprof_py/check_profile.py`, which calls
//! `vmprof.read_profile` and `vmprofshow FILE tree`.
//!
//! Without python3, venv or PyPI the 0.6.0 test is skipped with a loud
//! message, except when `CI=true`, where it fails.

#[path = "vmprof_support/venv.rs"]
mod venv;
mod vmprof_support;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use perfsupport::vmprof::{EnableOptions, Profile, disable, enable_path, read_profile};
use venv::{skip_or_fail, vmprof_venv};
use vmprof_support::*;

fn json_string(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// What check_profile.py must find, computed from our own reader.
fn expected_json(profile: &Profile, chain: &[u64], vmprofshow: &Path) -> String {
    let mut inclusive: BTreeMap<&str, usize> = BTreeMap::new();
    for sample in &profile.samples {
        let mut seen: Vec<u64> = sample.stack.clone();
        seen.sort_unstable();
        seen.dedup();
        for id in seen {
            *inclusive
                .entry(profile.name(id).unwrap_or("<unknown code>"))
                .or_default() += 1;
        }
    }
    let names: Vec<String> = profile
        .names
        .iter()
        .map(|(id, name)| format!("\"{id}\": {}", json_string(name)))
        .collect();
    let inclusive: Vec<String> = inclusive
        .iter()
        .map(|(name, n)| format!("{}: {n}", json_string(name)))
        .collect();
    let chain: Vec<String> = chain.iter().map(u64::to_string).collect();
    format!(
        "{{\"names\": {{{}}}, \"chain\": [{}], \"total\": {}, \"inclusive\": {{{}}}, \"vmprofshow\": {}}}",
        names.join(", "),
        chain.join(", "),
        profile.samples.len(),
        inclusive.join(", "),
        json_string(&vmprofshow.to_string_lossy()),
    )
}

/// Records the nested workload and checks it with the reader in `venv`.
fn check_with_real_reader(venv: &Path, version: &str) {
    let path = fresh_path(&format!("pypi-{version}.prof"));
    let w = workload();
    {
        let _serial = serial();
        enable_path(&path, &EnableOptions::new("toyvm")).expect("enable");
        run_nested(w, Duration::from_millis(300));
        disable().expect("disable");
    }
    let profile = read_profile(&path).expect("our reader");
    assert!(
        profile.samples.len() > 100,
        "{} samples",
        profile.samples.len()
    );
    let chain = [w.outer, w.middle, w.inner].map(|id| id.get() as u64);
    let expected = path.with_extension("json");
    std::fs::write(
        &expected,
        expected_json(&profile, &chain, &venv.join("bin/vmprofshow")),
    )
    .expect("write expected.json");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vmprof_py/check_profile.py");
    let output = Command::new(venv.join("bin/python"))
        .arg(&script)
        .arg(&path)
        .arg(&expected)
        .output()
        .expect("run check_profile.py");
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    eprintln!("--- vmprof {version} ---\n{report}");
    assert!(
        output.status.success(),
        "vmprof {version} disagrees with our profile:\n{report}"
    );
    assert!(report.contains("0 failure(s)"), "{report}");
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(&expected);
}

#[test]
fn vmprof_0_6_0_reads_our_profile() {
    match vmprof_venv("0.6.0") {
        Ok(venv) => check_with_real_reader(&venv, "0.6.0"),
        Err(why) => skip_or_fail(&why),
    }
}

#[test]
fn vmprof_0_4_18_1_reads_our_profile_when_it_installs() {
    match vmprof_venv("0.4.18.1") {
        Ok(venv) => check_with_real_reader(&venv, "0.4.18.1"),
        Err(why) => eprintln!(
            "{0}\nNOT CHECKED with vmprof 0.4.18.1 (optional): {why}\n{0}",
            "=".repeat(72)
        ),
    }
}
