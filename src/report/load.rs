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
use perfsupport::vmprof::{META_CUT_FRAMES_MAX, META_CUT_SAMPLES, ReadError, read_salvaging};

/// One code object as named in a profile.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Frame {
    /// The function name (`<main>` for a toyvm script body), or the whole
    /// code name when it is not `class:function:line:file`.
    pub name: String,
    /// The source file as the VM named it; empty when unknown.
    pub file: String,
    /// The line the function starts at; 0 when unknown.
    pub line: u32,
    /// True when the profile holds only the start of the file's name (a
    /// name longer than vmprof's cap): no file may be opened by it.
    pub file_cut: bool,
}

/// A profile, ready for the report.
#[derive(Debug, Default)]
pub struct VmProfile {
    /// The interpreter name from the HEADER record (`toyvm`, `cpython`...).
    pub interp: String,
    /// The program that was profiled (the `script` META record), if named.
    pub script: Option<String>,
    /// CPU time one sample stands for, in microseconds.
    pub period_us: u64,
    /// Every frame that occurs in a sample.
    pub frames: Vec<Frame>,
    /// One entry per sample: indexes into `frames`, root first.
    pub stacks: Vec<Vec<usize>>,
    /// A profile in lines mode (`run --vmprof-lines`): per sample, the line
    /// each frame of its stack was executing (0: unknown). Empty otherwise.
    pub lines: Vec<Vec<u32>>,
    /// Samples whose outermost frames were cut (deeper than the sampler
    /// keeps), and the most frames cut from one: from the profile's
    /// `cut_samples` and `cut_frames_max` META records, 0 without them.
    pub cut_samples: u64,
    /// See `cut_samples`.
    pub cut_frames_max: u64,
}

/// A loaded profile and what the reader had to warn about.
pub struct Loaded {
    /// The profile.
    pub profile: VmProfile,
    /// Set when the file has no trailer: why, phrased for a warning.
    pub incomplete: Option<String>,
}

/// Reads `path`; the error says why it is not a usable profile (for
/// `error: PATH: <message>`).
pub fn load(path: &Path) -> Result<Loaded, String> {
    let salvaged = read_salvaging(path).map_err(describe_read_error)?;
    let profile = salvaged.profile;
    let incomplete = match (&salvaged.cut, profile.has_trailer) {
        (_, true) => None,
        (Some(ReadError::Truncated { offset, what }), false) => Some(format!(
            "the profile has no trailer and ends inside {what} at offset {offset}; showing the {} whole samples before it (was the profiler killed?)",
            profile.samples.len()
        )),
        (_, false) => Some(format!(
            "the profile has no trailer; showing its {} samples (was the profiler killed?)",
            profile.samples.len()
        )),
    };
    let mut frames = Vec::new();
    let mut index_of: HashMap<u64, usize> = HashMap::new();
    let mut stacks = Vec::with_capacity(profile.samples.len());
    for sample in &profile.samples {
        let stack = sample
            .stack
            .iter()
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
            .collect();
        stacks.push(stack);
    }
    let lines = if profile.mode & PROFILE_LINES != 0 {
        (profile.samples.iter())
            .map(|s| {
                let line = |&l: &u64| u32::try_from(l).unwrap_or(0);
                s.lines.iter().map(line).collect()
            })
            .collect()
    } else {
        Vec::new()
    };
    let meta_count = |key: &str| {
        (profile.meta_value(key))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Ok(Loaded {
        profile: VmProfile {
            lines,
            cut_samples: meta_count(META_CUT_SAMPLES),
            cut_frames_max: meta_count(META_CUT_FRAMES_MAX),
            script: profile.meta_value("script").map(str::to_owned),
            interp: profile.interp,
            period_us: u64::try_from(profile.period_us).unwrap_or(0),
            frames,
            stacks,
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
            file: parsed.file,
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
