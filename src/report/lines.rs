//! `toyvm report --lines`: the hottest lines of each function, with their
//! source text, from a profile recorded in lines mode (`toyvm run --vmprof
//! FILE --vmprof-lines`).
//!
//! For each function and line: **self**, the samples whose innermost frame
//! was executing that line (where the time went), and **total**, the
//! samples in which some frame of the function was on that line, its own
//! code or a call made from it (each sample counted once per line, so a
//! recursive call site is not counted twice). Functions come in the order
//! of the flat profile; each lists its lines by total, at most
//! [`MAX_LINES`] of them.

use std::collections::HashMap;
use std::fmt::Write as _;

use super::load::VmProfile;
use super::text::shorten;
use super::tree::flat_profile;

/// Most lines listed per function.
pub const MAX_LINES: usize = 10;
/// Source text longer than this is cut (with `…`).
const MAX_TEXT: usize = 60;

/// Per function, per line: `(total, self)` samples.
type LineCounts = HashMap<usize, HashMap<u32, (u64, u64)>>;

/// Counts the samples of each (function, line).
fn count(profile: &VmProfile) -> LineCounts {
    let mut counts: LineCounts = HashMap::new();
    let mut seen: Vec<(usize, u32)> = Vec::new();
    for (stack, lines) in profile.stacks.iter().zip(&profile.lines) {
        seen.clear();
        for (depth, (&frame, &line)) in stack.iter().zip(lines).enumerate() {
            let entry = (counts.entry(frame).or_default()).entry(line).or_default();
            if !seen.contains(&(frame, line)) {
                seen.push((frame, line));
                entry.0 += 1;
            }
            if depth + 1 == stack.len() {
                entry.1 += 1;
            }
        }
    }
    counts
}

/// Renders the lines report; `source(file)` gives a file's text, if
/// readable.
pub fn render(profile: &VmProfile, source: &dyn Fn(&str) -> Option<String>) -> String {
    let mut out = String::new();
    let samples = profile.stacks.len() as u64;
    if profile.lines.is_empty() {
        out.push_str(
            "\nNo line information: record the profile with `toyvm run --vmprof FILE --vmprof-lines`.\n",
        );
        return out;
    }
    if samples == 0 {
        return out;
    }
    let percent = |n: u64| 100.0 * n as f64 / samples as f64;
    let counts = count(profile);
    let mut texts: HashMap<&str, Option<Vec<String>>> = HashMap::new();
    let _ = writeln!(
        out,
        "\nHottest lines (total: the line or calls made from it; self: the line itself)"
    );
    for entry in flat_profile(profile) {
        let frame = &profile.frames[entry.frame];
        let Some(by_line) = counts.get(&entry.frame) else {
            continue;
        };
        let mut rows: Vec<(u32, u64, u64)> = (by_line.iter())
            .map(|(&line, &(total, own))| (line, total, own))
            .collect();
        rows.sort_by(|a, b| b.1.cmp(&a.1).then(b.2.cmp(&a.2)).then(a.0.cmp(&b.0)));
        let _ = writeln!(
            out,
            "\n  {} ({}:{}): {:.1}% total, {:.1}% self",
            frame.name,
            frame.file.rsplit('/').next().unwrap_or(&frame.file),
            frame.line,
            percent(entry.total),
            percent(entry.self_samples),
        );
        let _ = writeln!(
            out,
            "  {:>6}  {:>6}  {:>5}  source",
            "total", "self", "line"
        );
        let text = texts
            .entry(frame.file.as_str())
            .or_insert_with(|| source(&frame.file).map(|t| t.lines().map(str::to_owned).collect()));
        for &(line, total, own) in rows.iter().take(MAX_LINES) {
            let code = match (line, text.as_ref()) {
                (0, _) => "(line unknown)".to_owned(),
                (_, Some(text)) => (text.get(line as usize - 1))
                    .map_or(String::new(), |l| shorten(l.trim(), MAX_TEXT)),
                (_, None) => String::new(),
            };
            let _ = writeln!(
                out,
                "  {:>5.1}%  {:>5.1}%  {line:>5}  {code}",
                percent(total),
                percent(own)
            );
        }
        if rows.len() > MAX_LINES {
            let _ = writeln!(out, "  ({} more lines)", rows.len() - MAX_LINES);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::load::Frame;

    #[test]
    fn lines_count_self_at_the_leaf_and_total_once_per_sample() {
        let frame = |name: &str, line| Frame {
            name: name.into(),
            file: "a.toy".into(),
            line,
        };
        // <main> calls f at line 9; f recurses at line 3 and spins at 4.
        let profile = VmProfile {
            interp: "toyvm".into(),
            period_us: 1000,
            frames: vec![frame("<main>", 1), frame("f", 2)],
            stacks: vec![vec![0, 1, 1], vec![0, 1], vec![0, 1]],
            lines: vec![vec![9, 3, 4], vec![9, 4], vec![9, 3]],
            ..VmProfile::default()
        };
        let counts = count(&profile);
        assert_eq!(counts[&0][&9], (3, 0));
        assert_eq!(counts[&1][&4], (2, 2));
        assert_eq!(counts[&1][&3], (2, 1));
        let source = "x\nfn f() {\n  f();\n  spin();\n}\n\n\n\nf();\n";
        let text = render(&profile, &|file| {
            (file == "a.toy").then(|| source.to_owned())
        });
        assert!(text.contains(" 66.7%   66.7%      4  spin();"), "{text}");
        assert!(text.contains("100.0%    0.0%      9  f();"), "{text}");
    }
}
