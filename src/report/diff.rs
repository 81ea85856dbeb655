//! `toyvm report --diff BEFORE AFTER`: what changed between two profiles
//! of the same program (before and after a change).
//!
//! The text lists the functions whose share of the samples changed most,
//! self and total, as percentage points: shares, not sample counts, so two
//! runs of different length compare. With `--flamegraph OUT.svg` it draws
//! a differential flame graph (inferno's, after Brendan Gregg's): the
//! frames of AFTER, red where they grew, blue where they shrank, with the
//! counts of BEFORE scaled to AFTER's total.

use std::collections::HashMap;
use std::fmt::Write as _;

use super::folded::folded_lines;
use super::load::VmProfile;
use super::text::{printable, shorten};
use super::tree::flat_profile;

/// Most functions listed.
pub const MAX_ROWS: usize = 20;

/// A function's shares in one profile, in percent.
#[derive(Clone, Copy, Default)]
struct Shares {
    total: f64,
    own: f64,
}

/// A function: name, file and first line (two functions may share a name).
type Key = (String, String, u32);

/// Each function's shares.
fn shares(profile: &VmProfile) -> HashMap<Key, Shares> {
    let samples = profile.samples.max(1) as f64;
    flat_profile(profile)
        .into_iter()
        .map(|entry| {
            let frame = &profile.frames[entry.frame];
            let share = Shares {
                total: 100.0 * entry.total as f64 / samples,
                own: 100.0 * entry.self_samples as f64 / samples,
            };
            ((frame.name.clone(), frame.file.clone(), frame.line), share)
        })
        .collect()
}

/// The text of the difference from `before` to `after`.
pub fn render(before: &VmProfile, after: &VmProfile) -> String {
    let (old, new) = (shares(before), shares(after));
    let mut keys: Vec<&Key> = old.keys().chain(new.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut rows: Vec<(&Key, Shares, Shares)> = keys
        .into_iter()
        .map(|key| {
            let a = old.get(key).copied().unwrap_or_default();
            let b = new.get(key).copied().unwrap_or_default();
            (key, a, b)
        })
        .collect();
    let change = |a: &Shares, b: &Shares| (b.own - a.own).abs().max((b.total - a.total).abs());
    rows.sort_by(|x, y| {
        change(&y.1, &y.2)
            .total_cmp(&change(&x.1, &x.2))
            .then_with(|| x.0.cmp(y.0))
    });
    let mut out = String::new();
    let _ = writeln!(
        out,
        "toyvm profile difference: {} samples before, {} after",
        before.samples, after.samples
    );
    let _ = writeln!(
        out,
        "\nShares of all samples, in percent (self: in its own code; total: with its callees), largest changes first"
    );
    let _ = writeln!(
        out,
        "  self: before   after  change   total: before   after  change  function"
    );
    for (key, a, b) in rows.iter().take(MAX_ROWS) {
        let file = key.1.rsplit('/').next().unwrap_or(&key.1);
        let name = if file.is_empty() {
            printable(&key.0).into_owned()
        } else {
            format!("{} ({}:{})", printable(&key.0), printable(file), key.2)
        };
        let _ = writeln!(
            out,
            "        {:>6.1}  {:>6.1}  {:>+6.1}          {:>6.1}  {:>6.1}  {:>+6.1}  {}",
            a.own,
            b.own,
            b.own - a.own,
            a.total,
            b.total,
            b.total - a.total,
            shorten(&name, 60)
        );
    }
    if rows.len() > MAX_ROWS {
        let _ = writeln!(out, "  ({} more functions)", rows.len() - MAX_ROWS);
    }
    out
}

/// The differential collapsed stacks (`stack BEFORE AFTER`), BEFORE scaled
/// to AFTER's total, for the flame graph.
pub fn differential_lines(before: &VmProfile, after: &VmProfile) -> Result<Vec<String>, String> {
    let join = |lines: Vec<String>| lines.join("\n").into_bytes();
    let mut out = Vec::new();
    let options = inferno::differential::Options {
        normalize: true,
        ..Default::default()
    };
    inferno::differential::from_readers(
        options,
        join(folded_lines(before)).as_slice(),
        join(folded_lines(after)).as_slice(),
        &mut out,
    )
    .map_err(|e| format!("cannot compare the stacks: {e}"))?;
    Ok(String::from_utf8_lossy(&out)
        .lines()
        .map(str::to_owned)
        .collect())
}
