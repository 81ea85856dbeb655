//! Reading a vmprof profile written by any VM into the frames and stacks
//! the report needs.
//!
//! Code names follow vmprof's convention `class:function:line:file` (toyvm
//! writes `toy:fib:3:fib.toy`, CPython's PyPI `vmprof` writes
//! `py:inner:1:busy.py`); the class is not shown, the file may contain
//! colons. A name in another shape (a native symbol, say) is shown as it
//! is, and a code id the file never names as its hexadecimal address.
//!
//! A file without trailer (the profiler was killed) is read as far as its
//! records are whole, with a warning: a profile of a long run stopped by a
//! signal is still worth reading.

use std::collections::HashMap;
use std::path::Path;

use perfsupport::vmprof::format::PROFILE_LINES;
use perfsupport::vmprof::{
    META_CLOCK, META_CUT_FRAMES_MAX, META_CUT_SAMPLES, META_RECORDS, META_SIGNALS, ReadError,
    SampleView, stream_profile,
};

/// One code object as named in a profile.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Frame {
    /// The function name (`<main>` for a toyvm script body), or the whole
    /// code name when it is not `class:function:line:file`.
    pub name: String,
    /// The source file as the VM named it; empty when unknown (or named
    /// `-`).
    pub file: String,
    /// The line the function starts at; 0 when unknown.
    pub line: u32,
    /// True when the profile holds only the start of the file's name (a
    /// name longer than vmprof's cap): no file may be opened by it.
    pub file_cut: bool,
}

/// The longest sampling period a report believes: an hour.
pub const MAX_PERIOD_US: u64 = 3_600_000_000;

/// One distinct stack of a profile and how many samples had it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct StackCount {
    /// Indexes into [`VmProfile::frames`], root first.
    pub frames: Vec<usize>,
    /// In lines mode (`run --vmprof-lines`), the line each frame was
    /// executing (0: unknown); empty otherwise.
    pub lines: Vec<u32>,
    /// The thread the samples were taken on (0 when the file does not say).
    pub thread: u64,
    /// Samples with exactly this stack, lines and thread.
    pub count: u64,
}

/// A profile, ready for the report: its distinct stacks with their counts,
/// so memory follows the distinct stacks, not the samples.
#[derive(Debug, Default)]
pub struct VmProfile {
    /// The interpreter name from the HEADER record (`toyvm`, `cpython`...).
    pub interp: String,
    /// The program that was profiled (the `script` META record), if named.
    pub script: Option<String>,
    /// CPU time one sample stands for, in microseconds.
    pub period_us: u64,
    /// When profiling started, in nanoseconds since the Unix epoch (0 when
    /// the file does not say).
    pub start_ns: i64,
    /// Every frame that occurs in a sample.
    pub frames: Vec<Frame>,
    /// The distinct stacks, in the order they first occur.
    pub stacks: Vec<StackCount>,
    /// The number of samples (the sum of the counts).
    pub samples: u64,
    /// Whether the profile was recorded in lines mode.
    pub has_lines: bool,
    /// Only when loaded with `keep_order` (the Firefox export, a timeline):
    /// the index into `stacks` of every sample, in file order.
    pub order: Vec<u32>,
    /// Samples whose outermost frames were cut (deeper than the sampler
    /// keeps), and the most frames cut from one: from the profile's
    /// `cut_samples` and `cut_frames_max` META records, 0 without them.
    pub cut_samples: u64,
    /// See `cut_samples`.
    pub cut_frames_max: u64,
    /// The clock that sent the samples (the `clock` META record:
    /// `perf-task-clock` or `itimer-prof`), if the profile says.
    pub clock: Option<String>,
    /// The signals that made a sample (`signals` META), 0 if not said.
    pub signals: u64,
    /// The records written for them (`records` META), 0 if not said.
    pub records: u64,
}

#[cfg(test)]
impl VmProfile {
    /// A profile of `frames` with one sample per entry of `stacks` (and, in
    /// lines mode, of `lines`), identical samples counted together.
    pub fn of_samples(frames: Vec<Frame>, stacks: Vec<Vec<usize>>, lines: Vec<Vec<u32>>) -> Self {
        let has_lines = !lines.is_empty();
        let mut profile = VmProfile {
            interp: "toyvm".into(),
            script: Some("a.toy".into()),
            period_us: 1000,
            frames,
            has_lines,
            ..VmProfile::default()
        };
        let lines = lines.into_iter().map(Some).chain(std::iter::repeat(None));
        for (frames, lines) in stacks.into_iter().zip(lines) {
            let lines = lines.unwrap_or_default();
            profile.samples += 1;
            match (profile.stacks.iter_mut()).find(|s| s.frames == frames && s.lines == lines) {
                Some(stack) => stack.count += 1,
                None => profile.stacks.push(StackCount {
                    frames,
                    lines,
                    thread: 0,
                    count: 1,
                }),
            }
        }
        profile
    }
}

/// A loaded profile and what the reader had to warn about.
pub struct Loaded {
    /// The profile.
    pub profile: VmProfile,
    /// Set when the file has no trailer: why, phrased for a warning.
    pub incomplete: Option<String>,
}

/// Reads `path` sample by sample (never holding more than one), counting
/// the distinct stacks; with `keep_order`, also the stack of each sample.
/// The error says why it is not a usable profile (for `error: PATH:
/// <message>`).
pub fn load(path: &Path, keep_order: bool) -> Result<Loaded, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read the profile: {e}"))?;
    let input = std::io::BufReader::with_capacity(1 << 16, file);
    // Key: thread, depth, ids, lines; the value indexes `raw`.
    let mut index: HashMap<Vec<u64>, u32> = HashMap::new();
    let mut raw: Vec<(Vec<u64>, Vec<u64>, u64, u64)> = Vec::new();
    let mut order = Vec::new();
    let mut key = Vec::new();
    let mut samples = 0u64;
    let salvaged = stream_profile(input, |sample: SampleView<'_>| {
        key.clear();
        key.push(sample.thread);
        key.push(sample.stack.len() as u64);
        key.extend_from_slice(sample.stack);
        key.extend_from_slice(sample.lines);
        let at = match index.get(key.as_slice()) {
            Some(&at) => at,
            None => {
                let at = raw.len() as u32;
                index.insert(key.clone(), at);
                raw.push((
                    sample.stack.to_vec(),
                    sample.lines.to_vec(),
                    sample.thread,
                    0,
                ));
                at
            }
        };
        raw[at as usize].3 += 1;
        samples += 1;
        if keep_order {
            order.push(at);
        }
    })
    .map_err(describe_read_error)?;
    drop(index);
    let profile = salvaged.profile;
    let incomplete = match (&salvaged.cut, profile.has_trailer) {
        (_, true) => None,
        (Some(ReadError::Truncated { offset, what }), false) => Some(format!(
            "the profile has no trailer and ends inside {what} at offset {offset}; showing the {samples} whole samples before it (was the profiler killed?)"
        )),
        (_, false) => Some(format!(
            "the profile has no trailer; showing its {samples} samples (was the profiler killed?)"
        )),
    };
    let mut frames = Vec::new();
    let mut index_of: HashMap<u64, usize> = HashMap::new();
    let stacks = raw
        .into_iter()
        .map(|(ids, lines, thread, count)| StackCount {
            frames: (ids.iter())
                .map(|&id| {
                    *index_of.entry(id).or_insert_with(|| {
                        frames.push(match profile.name(id) {
                            Some(name) => parse_code_name(name),
                            None => Frame {
                                name: format!("{id:#x}"),
                                ..Frame::default()
                            },
                        });
                        frames.len() - 1
                    })
                })
                .collect(),
            lines: lines
                .iter()
                .map(|&l| u32::try_from(l).unwrap_or(0))
                .collect(),
            thread,
            count,
        })
        .collect();
    let meta_count = |key: &str| {
        (profile.meta_value(key))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let start_ns = profile.start_time.map_or(0, |t| {
        t.sec
            .saturating_mul(1_000_000_000)
            .saturating_add(t.usec.saturating_mul(1000))
    });
    Ok(Loaded {
        profile: VmProfile {
            has_lines: profile.mode & PROFILE_LINES != 0,
            cut_samples: meta_count(META_CUT_SAMPLES),
            cut_frames_max: meta_count(META_CUT_FRAMES_MAX),
            clock: profile.meta_value(META_CLOCK).map(str::to_owned),
            signals: meta_count(META_SIGNALS),
            records: meta_count(META_RECORDS),
            script: profile.meta_value("script").map(str::to_owned),
            interp: profile.interp,
            // A period is the file's word: clamped to an hour, so that
            // counts times periods cannot overflow.
            period_us: u64::try_from(profile.period_us)
                .unwrap_or(0)
                .min(MAX_PERIOD_US),
            start_ns,
            frames,
            stacks,
            samples,
            order,
        },
        incomplete,
    })
}

/// Splits `class:function:line:file` (perfsupport's format, escapes
/// undone); any other name is kept whole.
fn parse_code_name(name: &str) -> Frame {
    match perfsupport::vmprof::parse_code_name(name) {
        Some(parsed) => Frame {
            name: parsed.func_name,
            // `-` is how a VM says "no file" (toyvm's `<jit compiler>`):
            // every view then shows no location.
            file: if parsed.file == "-" {
                String::new()
            } else {
                parsed.file
            },
            line: parsed.line,
            file_cut: parsed.file_cut,
        },
        None => Frame {
            name: name.to_owned(),
            ..Frame::default()
        },
    }
}

/// The reader's error, phrased for someone who passed the wrong file.
fn describe_read_error(error: ReadError) -> String {
    match error {
        ReadError::Io(e) => format!("cannot read the profile: {e}"),
        ReadError::BadHeader(why) => format!("wrong magic: not a vmprof profile ({why})"),
        ReadError::Gzip => error.to_string(),
        ReadError::UnknownVersion(v) => {
            format!("unknown vmprof format version {v} (versions 0 to 7 are read)")
        }
        ReadError::Truncated { .. } => error.to_string(),
        ReadError::RPythonProfile => format!("cannot show this profile: {error}"),
        other => format!("corrupt profile: {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(name: &str, file: &str, line: u32) -> Frame {
        Frame {
            name: name.into(),
            file: file.into(),
            line,
            file_cut: false,
        }
    }

    #[test]
    fn code_names_of_any_class_split_into_function_line_and_file() {
        assert_eq!(
            parse_code_name("toy:<main>:1:a/b.toy"),
            frame("<main>", "a/b.toy", 1)
        );
        assert_eq!(
            parse_code_name("py:inner:12:/x/busy.py"),
            frame("inner", "/x/busy.py", 12)
        );
        assert_eq!(
            parse_code_name("toy:f:1:C:/a.toy"),
            frame("f", "C:/a.toy", 1)
        );
        // Escaped by perfsupport: the file comes back as it was.
        assert_eq!(
            parse_code_name("toy:f:1:work%3Av2.toy"),
            frame("f", "work:v2.toy", 1)
        );
        // Other shapes stay whole.
        for odd in ["toy:f:x:a.toy", "toy::1:a.toy", "malloc", "n:f:1"] {
            assert_eq!(parse_code_name(odd), frame(odd, "", 0));
        }
    }
}
