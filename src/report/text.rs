//! The terminal report: a header, the call tree and the flat profile, in
//! aligned columns.

use std::fmt::Write as _;

use super::load::{Frame, VmProfile};
use super::tree::{CallTree, flat_profile};

/// Function names longer than this are cut (with `…`) to keep columns
/// aligned.
const MAX_NAME: usize = 40;
/// Deeper tree levels are not indented further, so lines stay readable.
const MAX_INDENT_LEVELS: usize = 24;

/// Renders the whole report. Tree nodes under `min_percent` of all
/// samples are left out (the flat profile lists every function).
pub fn render(profile: &VmProfile, min_percent: f64) -> String {
    let mut out = String::new();
    let samples = profile.samples;
    let cpu_ms = samples.saturating_mul(profile.period_us) / 1000;
    let of = match &profile.script {
        Some(script) => format!(" of {}", printable(script)),
        None => String::new(),
    };
    let _ = writeln!(
        out,
        "{} profile{of}: {samples} samples, one per {} µs of CPU time ({}.{:03} s)",
        profile.interp,
        profile.period_us,
        cpu_ms / 1000,
        cpu_ms % 1000
    );
    if let Some(clock) = &profile.clock {
        let _ = writeln!(
            out,
            "{}",
            clock_line(clock, profile.signals, profile.records)
        );
    }
    if profile.cut_samples > 0 {
        let _ = writeln!(
            out,
            "{} samples had their outermost frames cut (at most {} frames each): they show under `[outer frames cut]`",
            profile.cut_samples, profile.cut_frames_max
        );
    }
    if samples == 0 {
        out.push_str("\nNo samples: the script used less CPU time than one sampling interval.\n");
        return out;
    }
    let percent = |n: u64| 100.0 * n as f64 / samples as f64;

    let tree = CallTree::build(profile);
    let mut rows = Vec::new();
    let mut hidden = 0usize;
    // Depth-first, children in order (largest total first).
    let mut todo: Vec<(usize, usize)> = tree.nodes[0]
        .children
        .iter()
        .rev()
        .map(|&c| (c, 0))
        .collect();
    while let Some((index, level)) = todo.pop() {
        let node = &tree.nodes[index];
        if percent(node.total) < min_percent {
            hidden += 1;
            continue;
        }
        let indent = "  ".repeat(level.min(MAX_INDENT_LEVELS));
        rows.push((
            percent(node.total),
            percent(node.self_samples),
            format!("{indent}{}", short_name(&profile.frames[node.frame].name)),
            location(&profile.frames[node.frame]),
        ));
        todo.extend(node.children.iter().rev().map(|&c| (c, level + 1)));
    }
    let _ = writeln!(
        out,
        "\nCall tree (total: in the function and its callees; self: in its own code; direct recursion folded)"
    );
    table(&mut out, &rows);
    if hidden > 0 {
        let _ = writeln!(
            out,
            "  ({hidden} call paths under {min_percent}% not shown)"
        );
    }

    let flat: Vec<_> = flat_profile(profile)
        .into_iter()
        .map(|e| {
            (
                percent(e.total),
                percent(e.self_samples),
                short_name(&profile.frames[e.frame].name),
                location(&profile.frames[e.frame]),
            )
        })
        .collect();
    let _ = writeln!(out, "\nFlat profile (sorted by total)");
    table(&mut out, &flat);
    out
}

/// Writes `total self function location` rows under a header line.
/// The header line that says which clock sampled and how many signals made
/// how many records (one each with per-thread clocks; more records than
/// signals when the process timer's tick made one signal stand for several
/// intervals).
fn clock_line(clock: &str, signals: u64, records: u64) -> String {
    let what = match clock {
        "perf-task-clock" => "each thread's CPU clock (perf task-clock)".to_string(),
        "itimer-prof" => "the process CPU timer (setitimer, on the kernel's tick)".to_string(),
        other => format!("the clock `{}`", printable(other)),
    };
    let repeated = if records > signals {
        ", records repeated for the CPU time a signal stood for".to_string()
    } else {
        String::new()
    };
    format!("sampled by {what}: {signals} signals, {records} records{repeated}")
}

fn table(out: &mut String, rows: &[(f64, f64, String, String)]) {
    let width = rows
        .iter()
        .map(|r| r.2.chars().count())
        .chain(["function".len()])
        .max()
        .unwrap_or(0);
    let _ = writeln!(
        out,
        "  {:>6}  {:>6}  {:<width$}  location",
        "total", "self", "function"
    );
    for (total, self_pct, name, location) in rows {
        let _ = writeln!(
            out,
            "  {total:>5.1}%  {self_pct:>5.1}%  {name:<width$}  {location}"
        );
    }
}

/// `name`, cut to [`MAX_NAME`] characters.
fn short_name(name: &str) -> String {
    shorten(&printable(name), MAX_NAME)
}

/// `text`, cut to `max` characters (the last one an ellipsis when cut).
pub(super) fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(max - 1).collect();
    cut.push('…');
    cut
}

/// `file:line` with only the file's last path component: the script's
/// directory is the same for every function. `-` when the profile does not
/// say.
fn location(frame: &Frame) -> String {
    if frame.file.is_empty() {
        return "-".to_owned();
    }
    let file = frame.file.rsplit('/').next().unwrap_or(&frame.file);
    format!("{}:{}", printable(file), frame.line)
}

/// A name or path from a profile can hold anything: a newline would break
/// the columns, an escape sequence would drive the terminal.
pub use perfsupport::region::escape_control_chars as printable;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_names_are_cut_and_locations_keep_the_file_name() {
        let long = "f".repeat(100);
        assert_eq!(short_name(&long).chars().count(), MAX_NAME);
        assert!(short_name(&long).ends_with('…'));
        assert_eq!(short_name("fib"), "fib");
        let frame = Frame {
            name: "fib".into(),
            file: "examples/scripts/fib.toy".into(),
            line: 3,
            file_cut: false,
        };
        assert_eq!(location(&frame), "fib.toy:3");
        let native = Frame {
            name: "malloc".into(),
            file: String::new(),
            line: 0,
            file_cut: false,
        };
        assert_eq!(location(&native), "-");
        let odd = Frame {
            name: "f\u{1b}[31m".into(),
            file: "/x/a\nb.toy".into(),
            line: 2,
            file_cut: false,
        };
        assert_eq!(location(&odd), "a\\nb.toy:2");
        assert_eq!(short_name(&odd.name), "f\\u{1b}[31m");
    }
}
