//! What a command reads and what it writes, so that no output can replace
//! one of its inputs: `toyvm run --vmprof S S` once replaced the script by
//! the profile, and `toyvm report --flamegraph P P` the profile by the SVG.
//!
//! Every subcommand lists its files in one place (its `files` method, next
//! to its options); an option that writes a file belongs in that list.
//! [`refuse_overwriting_inputs`] runs before the command does anything.

use std::path::{Path, PathBuf};

/// A file a command writes, and the option that names it.
pub struct Output {
    /// The option as the user wrote it (`--vmprof`).
    pub option: &'static str,
    /// The file it writes.
    pub path: PathBuf,
}

/// The files of one command.
#[derive(Default)]
pub struct Files {
    /// Files it reads.
    pub inputs: Vec<PathBuf>,
    /// Files it writes.
    pub outputs: Vec<Output>,
}

/// Fails if an output is one of the inputs: the same file, under any name
/// (another spelling, a hard link, a symlink to it). An output that does
/// not exist yet cannot be an input that does. Two outputs naming the same
/// file (`-o x.svg --flamegraph x.svg`) are refused too: the second would
/// replace the first.
pub fn refuse_overwriting_inputs(files: &Files) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let identity = |path: &Path| std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()));
    let same_output = |a: &Path, b: &Path| {
        let absolute = |p: &Path| std::path::absolute(p).ok();
        (absolute(a).is_some() && absolute(a) == absolute(b))
            || (identity(a).is_some() && identity(a) == identity(b))
    };
    for (i, first) in files.outputs.iter().enumerate() {
        if let Some(second) =
            (files.outputs[i + 1..].iter()).find(|o| same_output(&first.path, &o.path))
        {
            return Err(format!(
                "{} {} and {} {} name the same file",
                first.option,
                first.path.display(),
                second.option,
                second.path.display()
            ));
        }
    }
    for output in &files.outputs {
        let Some(written) = identity(&output.path) else {
            continue;
        };
        if let Some(input) = files
            .inputs
            .iter()
            .find(|input| identity(input) == Some(written))
        {
            return Err(format!(
                "{} {} would overwrite the input {}",
                output.option,
                output.path.display(),
                input.display()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_output_naming_an_input_under_any_name_is_refused() {
        let dir = std::env::temp_dir().join(format!("toyvm-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let input = dir.join("s.toy");
        std::fs::write(&input, "print(1);\n").unwrap();
        let link = dir.join("link.toy");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&input, &link).unwrap();
        let files = |output: PathBuf| Files {
            inputs: vec![input.clone()],
            outputs: vec![Output {
                option: "--vmprof",
                path: output,
            }],
        };
        for same in [input.clone(), dir.join(".").join("s.toy"), link] {
            let refused = refuse_overwriting_inputs(&files(same)).unwrap_err();
            assert!(refused.contains("--vmprof"), "{refused}");
        }
        for other in [dir.join("p.prof"), dir.join("missing/p.prof")] {
            assert!(refuse_overwriting_inputs(&files(other)).is_ok());
        }
        let two = Files {
            inputs: vec![input.clone()],
            outputs: ["-o", "--flamegraph"]
                .into_iter()
                .map(|option| Output {
                    option,
                    path: dir.join("out.svg"),
                })
                .collect(),
        };
        let refused = refuse_overwriting_inputs(&two).unwrap_err();
        assert!(refused.contains("name the same file"), "{refused}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
