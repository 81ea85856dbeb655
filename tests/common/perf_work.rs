//! A private work directory for runs of `perf` (and tools that read its
//! files), removed on drop.
//!
//! perf keeps a build-id cache (`~/.debug` by default) and copies every
//! injected JIT object into it; tests point it into the work directory
//! with a `perfconfig` (`[buildid] dir = ...`) so that runs leave nothing
//! behind and never share a cache. The directory is never under
//! `/tmp/perf-`: perf reads files there as perf maps.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The work directory; see the [module documentation](self).
pub struct PerfWork {
    pub dir: PathBuf,
}

impl PerfWork {
    /// A fresh, empty `toyvm-TAG-PID` under the system temp dir, with its
    /// `perfconfig` and build-id cache directory.
    pub fn new(tag: &str) -> PerfWork {
        let dir = std::env::temp_dir().join(format!("toyvm-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("buildid")).expect("work dir");
        std::fs::write(
            dir.join("perfconfig"),
            format!("[buildid]\n\tdir = {}\n", dir.join("buildid").display()),
        )
        .expect("perfconfig");
        PerfWork { dir }
    }

    /// `name` inside the work directory.
    pub fn path(&self, name: impl AsRef<Path>) -> PathBuf {
        self.dir.join(name)
    }

    /// `program` to run in the work directory with this directory's perf
    /// configuration (and no debuginfod lookups, which would hang offline).
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = Command::new(program);
        command
            .current_dir(&self.dir)
            .env("PERF_CONFIG", self.dir.join("perfconfig"))
            .env("DEBUGINFOD_URLS", "");
        command
    }

    /// Runs `program ARGS...` here, asserting success (the message has its
    /// stdout and stderr); its output.
    pub fn run_ok(&self, program: &str, args: &[&str]) -> Output {
        let out = self
            .command(program)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("run {program}: {e}"));
        assert!(
            out.status.success(),
            "{program} {args:?}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    /// Runs `perf ARGS...` here with extra environment variables.
    pub fn perf(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        self.command("perf")
            .args(args)
            .envs(env.iter().copied())
            .output()
            .expect("run perf")
    }
}

impl Drop for PerfWork {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
