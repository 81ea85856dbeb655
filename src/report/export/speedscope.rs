//! `toyvm report --format speedscope`: speedscope's file format
//! (<https://www.speedscope.app/file-format-schema.json>), one *sampled*
//! profile: the shared frame table (name, file, start line) and one sample
//! per distinct stack, root first, weighted by its CPU time in
//! microseconds. speedscope shows it as a time-ordered view, a left-heavy
//! view and a sandwich view.

use std::io::Write;

use serde_json::{Value, json};

use crate::report::load::VmProfile;

/// The file as JSON.
pub fn build(profile: &VmProfile) -> Value {
    let frames: Vec<Value> = profile
        .frames
        .iter()
        .map(|frame| {
            let mut entry = json!({ "name": frame.name });
            if !frame.file.is_empty() {
                entry["file"] = json!(frame.file);
                entry["line"] = json!(frame.line);
            }
            entry
        })
        .collect();
    let stacks: Vec<&_> = profile
        .stacks
        .iter()
        .filter(|s| !s.frames.is_empty())
        .collect();
    let samples: Vec<&[usize]> = stacks.iter().map(|s| s.frames.as_slice()).collect();
    let weights: Vec<u64> = stacks
        .iter()
        .map(|s| s.count.saturating_mul(profile.period_us))
        .collect();
    let total = weights.iter().fold(0u64, |sum, &w| sum.saturating_add(w));
    let name = profile.script.as_deref().unwrap_or("profile");
    json!({
        "$schema": "https://www.speedscope.app/file-format-schema.json",
        "exporter": format!("toyvm {}", env!("CARGO_PKG_VERSION")),
        "name": format!("{} profile of {name}", profile.interp),
        "activeProfileIndex": 0,
        "shared": { "frames": frames },
        "profiles": [{
            "type": "sampled",
            "name": name,
            "unit": "microseconds",
            "startValue": 0,
            "endValue": total,
            "samples": samples,
            "weights": weights,
        }],
    })
}

/// Writes the speedscope file of `profile` to `out`.
pub fn write(profile: &VmProfile, mut out: impl Write) -> std::io::Result<()> {
    serde_json::to_writer(&mut out, &build(profile))?;
    out.write_all(b"\n")
}
