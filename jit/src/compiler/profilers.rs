//! Opening the profiler outputs a run asks for: the jitdump, the perf map
//! and the GDB JIT interface, as perfsupport sinks the compiler reports
//! every finished batch to; and the JIT code files of `--jit-elf`
//! (`perfsupport::elf_code`), which the code generator publishes every
//! batch into.
//!
//! **One perf map and one jitdump per process.** perf reads
//! `/tmp/perf-<pid>.map` and `jit-<pid>.dump`: one file each per process,
//! whatever number of VMs (and JITs) the process runs, in turn or at once.
//! So the first JIT that asks opens them, and every later one shares them
//! ([`shared`]): each JIT registers its own batches, and finishing one JIT
//! leaves the files open for the others (each batch is flushed as it is
//! written, so nothing waits for the end). The GDB JIT interface is per
//! JIT: its objects go when the JIT's code goes.
//!
//! Opening the perf map also turns on the code arena's quarantine
//! (`codegen::arena`): from then on no freed address is given to other
//! code, since the map cannot say that code died.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use perfsupport::{
    CodeRegion, ElfCodeFiles, GdbJit, JitDump, PerfMap, ProfilerSink, Profilers, UnwindFallbacks,
};

use crate::codegen::arena;
use crate::options::{GDB_KEEP_DEAD_ENV, JitOptions, NO_QUARANTINE_ENV, NO_UNWIND_ENV};

/// The sinks `options` ask for, the process's JIT code files if they ask
/// for them (`--jit-elf`), and a warning for each that could not be opened
/// (the run goes on without it: compiled code then stays in anonymous
/// memory).
pub(super) fn open(options: &JitOptions) -> (Profilers, Option<Arc<ElfCodeFiles>>, Vec<String>) {
    let mut profilers = Profilers::new();
    let mut warnings = Vec::new();
    let elf = options
        .elf_dir
        .as_deref()
        .and_then(|dir| match shared::elf_code(dir) {
            Ok(files) => Some(files),
            Err(e) => {
                warnings.push(format!(
                    "toyvm: warning: --jit-elf: {e}; compiled code runs from anonymous memory \
                 (give --perf-dir a directory where files may be executed)"
                ));
                None
            }
        });
    if let Some(dir) = &options.jitdump_dir {
        match shared::jitdump(dir) {
            Ok(dump) => profilers.add(Box::new(Shared(dump))),
            Err(e) => warnings.push(format!(
                "toyvm: warning: cannot write the jitdump in {}: {e}",
                dir.display()
            )),
        }
    }
    if options.perf_map {
        match shared::perf_map() {
            Ok(map) => {
                if std::env::var_os(NO_QUARANTINE_ENV).is_none() {
                    arena::quarantine_freed_code();
                }
                profilers.add(Box::new(Shared(map)));
            }
            Err(e) => warnings.push(format!("toyvm: warning: cannot write the perf map: {e}")),
        }
    }
    if options.gdb {
        match std::env::var_os(GDB_KEEP_DEAD_ENV) {
            Some(_) => profilers.add(Box::new(KeepDead(GdbJit::new()))),
            None => profilers.add(Box::new(GdbJit::new())),
        }
    }
    (profilers, elf, warnings)
}

/// A process-wide sink as one JIT's: registers and retires through it, but
/// finishing the JIT leaves it open for the other JITs of the process.
struct Shared<T>(Arc<T>);

impl<T: ProfilerSink> ProfilerSink for Shared<T> {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn register(&self, regions: &[CodeRegion<'_>]) -> io::Result<()> {
        self.0.register(regions)
    }

    fn register_reporting(
        &self,
        regions: &[CodeRegion<'_>],
        fallbacks: &mut UnwindFallbacks,
    ) -> io::Result<()> {
        self.0.register_reporting(regions, fallbacks)
    }

    fn finish(&self) -> io::Result<()> {
        Ok(())
    }

    fn after_fork_child(&self) -> io::Result<()> {
        self.0.after_fork_child()
    }

    fn retire(&self, ranges: &[(usize, usize)]) -> io::Result<()> {
        self.0.retire(ranges)
    }
}

/// Test-only ([`GDB_KEEP_DEAD_ENV`]): a sink that is never told of dead
/// code.
struct KeepDead<T>(T);

impl<T: ProfilerSink> ProfilerSink for KeepDead<T> {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn register(&self, regions: &[CodeRegion<'_>]) -> io::Result<()> {
        self.0.register(regions)
    }

    fn finish(&self) -> io::Result<()> {
        self.0.finish()
    }
}

/// The process's perf map and jitdumps (one per directory asked for).
mod shared {
    use super::*;

    static PERF_MAP: Mutex<Option<Arc<PerfMap>>> = Mutex::new(None);
    static JITDUMPS: Mutex<Vec<(PathBuf, Arc<JitDump>)>> = Mutex::new(Vec::new());
    static ELF_CODE: Mutex<Vec<(PathBuf, Arc<ElfCodeFiles>)>> = Mutex::new(Vec::new());

    /// The process's JIT code files in `dir` (`dir/toyvm-PID/`), set up by
    /// the first caller; a failure is not kept, so each JIT reports it.
    pub(super) fn elf_code(dir: &Path) -> io::Result<Arc<ElfCodeFiles>> {
        let mut shared = ELF_CODE.lock();
        if let Some((_, files)) = shared.iter().find(|(d, _)| d == dir) {
            return Ok(Arc::clone(files));
        }
        let files = Arc::new(ElfCodeFiles::create(dir, "toyvm")?);
        shared.push((dir.to_path_buf(), Arc::clone(&files)));
        Ok(files)
    }

    /// The process's perf map, opened by the first caller.
    pub(super) fn perf_map() -> io::Result<Arc<PerfMap>> {
        let mut shared = PERF_MAP.lock();
        if let Some(map) = &*shared {
            return Ok(Arc::clone(map));
        }
        let map = PerfMap::new();
        map.open()?;
        let map = Arc::new(map);
        *shared = Some(Arc::clone(&map));
        Ok(map)
    }

    /// The process's jitdump in `dir`, created by the first caller.
    pub(super) fn jitdump(dir: &Path) -> io::Result<Arc<JitDump>> {
        let mut shared = JITDUMPS.lock();
        if let Some((_, dump)) = shared.iter().find(|(d, _)| d == dir) {
            return Ok(Arc::clone(dump));
        }
        let dump = JitDump::create_in(dir)?;
        let dump = match std::env::var_os(NO_UNWIND_ENV) {
            Some(_) => dump.without_unwinding_records(),
            None => dump,
        };
        let dump = Arc::new(dump);
        shared.push((dir.to_path_buf(), Arc::clone(&dump)));
        Ok(dump)
    }
}
