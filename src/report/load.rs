//! Reading a profile file and checking that toyvm wrote it.

use std::collections::HashMap;
use std::path::Path;

use perfsupport::vmprof::{ReadError, read_profile};

/// One Toy function as named in a profile: `toy:<name>:<line>:<file>`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Frame {
    /// The function name (`<main>` for the script body).
    pub name: String,
    /// The script path as given to `toyvm run`.
    pub file: String,
    /// The line of the function's `fn` keyword (1 for `<main>`).
    pub line: u32,
}

/// A toyvm profile: the frames and every sample's stack.
#[derive(Debug)]
pub struct ToyProfile {
    /// The script that was profiled (the `script` META record).
    pub script: String,
    /// CPU time one sample stands for, in microseconds.
    pub period_us: u64,
    /// Every frame that occurs in a sample.
    pub frames: Vec<Frame>,
    /// One entry per sample: indexes into `frames`, root first.
    pub stacks: Vec<Vec<usize>>,
}

/// Reads `path`, rejecting files toyvm did not write (with a message that
/// says why, for `toyvm report: PATH: <message>`).
pub fn load(path: &Path) -> Result<ToyProfile, String> {
    let profile = read_profile(path).map_err(describe_read_error)?;
    if profile.interp != vm::vmprof::INTERP_NAME {
        return Err(format!(
            "not a toyvm profile (it was written by '{}')",
            profile.interp
        ));
    }
    if !profile.has_trailer {
        return Err(
            "truncated profile: it has no trailer (was toyvm killed while profiling?)".into(),
        );
    }
    let script = profile.meta_value("script").unwrap_or("?").to_owned();
    let mut frames = Vec::new();
    let mut index_of: HashMap<u64, usize> = HashMap::new();
    let mut stacks = Vec::with_capacity(profile.samples.len());
    for sample in &profile.samples {
        let mut stack = Vec::with_capacity(sample.stack.len());
        for &id in &sample.stack {
            let index = match index_of.get(&id) {
                Some(&index) => index,
                None => {
                    let name = profile
                        .name(id)
                        .ok_or_else(|| format!("not a toyvm profile: code id {id} has no name"))?;
                    let frame = parse_code_name(name).ok_or_else(|| {
                        format!("not a toyvm profile: code name {name:?} is not toy:<function>:<line>:<file>")
                    })?;
                    frames.push(frame);
                    index_of.insert(id, frames.len() - 1);
                    frames.len() - 1
                }
            };
            stack.push(index);
        }
        stacks.push(stack);
    }
    Ok(ToyProfile {
        script,
        period_us: u64::try_from(profile.period_us).unwrap_or(0),
        frames,
        stacks,
    })
}

/// Splits `toy:<name>:<line>:<file>`; `None` for anything else but the
/// frame that stands for the outer frames a too-deep sample left out.
fn parse_code_name(name: &str) -> Option<Frame> {
    use perfsupport::vmprof::{CUT_FRAMES_CLASS, CUT_FRAMES_NAME};
    if name == format!("{CUT_FRAMES_CLASS}:{CUT_FRAMES_NAME}:0:-") {
        return Some(Frame {
            name: CUT_FRAMES_NAME.to_owned(),
            file: "-".to_owned(),
            line: 0,
        });
    }
    let rest = name
        .strip_prefix(vm::vmprof::CODE_CLASS)?
        .strip_prefix(':')?;
    let mut parts = rest.splitn(3, ':');
    let (func, line, file) = (parts.next()?, parts.next()?, parts.next()?);
    if func.is_empty() || file.contains(':') {
        return None;
    }
    Some(Frame {
        name: func.to_owned(),
        file: file.to_owned(),
        line: line.parse().ok()?,
    })
}

/// The reader's error, phrased for someone who passed the wrong file.
fn describe_read_error(error: ReadError) -> String {
    match error {
        ReadError::Io(e) => format!("cannot read the profile: {e}"),
        ReadError::BadHeader(why) => format!("wrong magic: not a vmprof profile ({why})"),
        ReadError::Gzip => error.to_string(),
        ReadError::UnknownVersion(v) => {
            format!("unknown vmprof format version {v} (toyvm writes version 6)")
        }
        ReadError::Truncated { .. } => error.to_string(),
        ReadError::RPythonProfile => format!("not a toyvm profile: {error}"),
        other => format!("corrupt profile: {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_names_split_into_function_line_and_file() {
        assert_eq!(
            parse_code_name("toy:<main>:1:a/b.toy"),
            Some(Frame {
                name: "<main>".into(),
                file: "a/b.toy".into(),
                line: 1
            })
        );
        assert_eq!(parse_code_name("py:main:1:a.py"), None);
        assert_eq!(parse_code_name("toy:f:x:a.toy"), None);
        assert_eq!(parse_code_name("toy:f:1:C:/a.toy"), None);
        assert_eq!(parse_code_name("toy::1:a.toy"), None);
    }
}
