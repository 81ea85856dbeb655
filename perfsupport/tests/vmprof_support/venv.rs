//! The PyPI `vmprof` reader in a cached venv, shared by the two tests that
//! check our profiles with it (`perfsupport/tests/vmprof_pypi.rs` and the
//! CLI's `tests/vmprof_pypi.rs`, which includes this file by path). Both use
//! the same venv directory under `target/`, so it is built once.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A venv with `vmprof==version`, created on first use.
pub fn vmprof_venv(version: &str) -> Result<PathBuf, String> {
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .ok_or("no target directory")?
        .to_path_buf();
    let venv = target.join(format!("vmprof-venv-{version}"));
    let python = venv.join("bin/python");
    let ready = venv.join(".perfsupport-ready");
    if ready.exists() && python.exists() {
        return Ok(venv);
    }
    let _ = std::fs::remove_dir_all(&venv);
    run(
        Command::new("python3").args(["-m", "venv"]).arg(&venv),
        "python3 -m venv",
    )?;
    run(
        Command::new(&python).args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            &format!("vmprof=={version}"),
        ]),
        &format!("pip install vmprof=={version}"),
    )?;
    run(
        Command::new(&python).args(["-c", "import vmprof"]),
        "import vmprof",
    )?;
    std::fs::write(&ready, version).map_err(|e| format!("writing {}: {e}", ready.display()))?;
    Ok(venv)
}

/// Runs `command`; its stdout, or why it failed.
pub fn run(command: &mut Command, what: &str) -> Result<String, String> {
    let output = command
        .output()
        .map_err(|e| format!("{what}: cannot run: {e}"))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(format!(
            "{what} failed ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

/// Skips the calling test loudly, or fails it under `CI=true`, where the
/// real reader is required.
pub fn skip_or_fail(why: &str) {
    let banner = "=".repeat(72);
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("the real vmprof reader is required in CI: {why}");
    }
    eprintln!("{banner}\nSKIPPING the real-vmprof-reader check: {why}\n{banner}");
}
