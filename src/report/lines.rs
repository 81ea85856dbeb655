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

use super::load::{Frame, VmProfile};
use super::text::{printable, shorten};
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
    for stack in &profile.stacks {
        seen.clear();
        let depth_of_leaf = stack.frames.len().min(stack.lines.len());
        for (depth, (&frame, &line)) in stack.frames.iter().zip(&stack.lines).enumerate() {
            let entry = (counts.entry(frame).or_default()).entry(line).or_default();
            if !seen.contains(&(frame, line)) {
                seen.push((frame, line));
                entry.0 += stack.count;
            }
            if depth + 1 == depth_of_leaf {
                entry.1 += stack.count;
            }
        }
    }
    counts
}

/// The largest source file `--lines` reads.
pub const MAX_SOURCE_BYTES: u64 = 16 << 20;

/// The text of the source file `frame` names, or why it is not shown.
///
/// A profile is data from anywhere: the file it names is read only if it is
/// a regular file (not `/dev/stdin`, a FIFO or a device, which could block
/// or never end) of at most [`MAX_SOURCE_BYTES`], and only if the profile
/// holds its whole name (a shortened one could name another file).
pub fn read_source(frame: &Frame) -> Result<String, String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    if frame.file.is_empty() {
        return Err("the profile names no file".into());
    }
    if frame.file_cut {
        return Err("the profile holds only the start of the file's name".into());
    }
    // O_NONBLOCK: opening a FIFO for reading must not wait for a writer.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&frame.file)
        .map_err(|e| format!("cannot open {}: {e}", frame.file))?;
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot read {}: {e}", frame.file))?;
    if !meta.is_file() {
        return Err(format!("{} is not a regular file", frame.file));
    }
    if meta.len() > MAX_SOURCE_BYTES {
        return Err(format!(
            "{} is larger than {} MiB",
            frame.file,
            MAX_SOURCE_BYTES >> 20
        ));
    }
    let mut bytes = Vec::new();
    file.take(MAX_SOURCE_BYTES)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {}: {e}", frame.file))?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Renders the lines report; `source(frame)` gives the text of the file a
/// frame names, or why it is not shown. Functions and lines under
/// `min_percent` of all samples (total) are left out, the lines counted.
pub fn render(
    profile: &VmProfile,
    min_percent: f64,
    source: &dyn Fn(&Frame) -> Result<String, String>,
) -> String {
    let mut out = String::new();
    let samples = profile.samples;
    if !profile.has_lines {
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
    let mut texts: HashMap<&str, Result<Vec<String>, String>> = HashMap::new();
    let _ = writeln!(
        out,
        "\nHottest lines (total: the line or calls made from it; self: the line itself)"
    );
    for entry in flat_profile(profile) {
        let frame = &profile.frames[entry.frame];
        let Some(by_line) = counts.get(&entry.frame) else {
            continue;
        };
        if percent(entry.total) < min_percent {
            continue;
        }
        let mut rows: Vec<(u32, u64, u64)> = (by_line.iter())
            .map(|(&line, &(total, own))| (line, total, own))
            .collect();
        let shown = rows.len();
        rows.retain(|&(_, total, _)| percent(total) >= min_percent);
        let hidden = shown - rows.len();
        rows.sort_by(|a, b| b.1.cmp(&a.1).then(b.2.cmp(&a.2)).then(a.0.cmp(&b.0)));
        let _ = writeln!(
            out,
            "\n  {} ({}:{}): {:.1}% total, {:.1}% self",
            printable(&frame.name),
            printable(frame.file.rsplit('/').next().unwrap_or(&frame.file)),
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
            .or_insert_with(|| source(frame).map(|t| t.lines().map(str::to_owned).collect()));
        if let Err(why) = text {
            let _ = writeln!(out, "  (source not shown: {})", printable(why));
        }
        for &(line, total, own) in rows.iter().take(MAX_LINES) {
            let code = match (line, text.as_ref()) {
                (0, _) => "(line unknown)".to_owned(),
                (_, Ok(text)) => (text.get(line as usize - 1))
                    .map_or(String::new(), |l| shorten(l.trim(), MAX_TEXT)),
                (_, Err(_)) => String::new(),
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
        if hidden > 0 {
            let _ = writeln!(out, "  ({hidden} lines under {min_percent}% not shown)");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_count_self_at_the_leaf_and_total_once_per_sample() {
        let frame = |name: &str, line| Frame {
            name: name.into(),
            file: "a.toy".into(),
            line,
            file_cut: false,
        };
        // <main> calls f at line 9; f recurses at line 3 and spins at 4.
        let profile = VmProfile::of_samples(
            vec![frame("<main>", 1), frame("f", 2)],
            vec![vec![0, 1, 1], vec![0, 1], vec![0, 1]],
            vec![vec![9, 3, 4], vec![9, 4], vec![9, 3]],
        );
        let counts = count(&profile);
        assert_eq!(counts[&0][&9], (3, 0));
        assert_eq!(counts[&1][&4], (2, 2));
        assert_eq!(counts[&1][&3], (2, 1));
        let source = "x\nfn f() {\n  f();\n  spin();\n}\n\n\n\nf();\n";
        let source = |frame: &Frame| {
            (frame.file == "a.toy")
                .then(|| source.to_owned())
                .ok_or_else(|| "missing".to_owned())
        };
        let text = render(&profile, 0.0, &source);
        assert!(text.contains(" 66.7%   66.7%      4  spin();"), "{text}");
        assert!(text.contains("100.0%    0.0%      9  f();"), "{text}");
        assert!(!text.contains("not shown"), "{text}");
        // Over 70%: f's line 3 (66.7%) goes, and is counted; so does the
        // whole of a function under the limit (none here: f has 100%).
        let text = render(&profile, 70.0, &source);
        assert!(
            !text.contains("      3  f();") && !text.contains("      4  spin();"),
            "{text}"
        );
        assert!(text.contains("(2 lines under 70% not shown)"), "{text}");
        assert!(text.contains("100.0%    0.0%      9  f();"), "{text}");
    }
}
