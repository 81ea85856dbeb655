//! Opening the profiler outputs a run asks for: the jitdump, the perf map
//! and the GDB JIT interface, as perfsupport sinks the compiler reports
//! every finished batch to.

use perfsupport::{GdbJit, JitDump, PerfMap, Profilers};

use crate::options::{JitOptions, NO_UNWIND_ENV};

/// The sinks `options` ask for, and a warning for each that could not be
/// opened (the run goes on without it).
pub(super) fn open(options: &JitOptions) -> (Profilers, Vec<String>) {
    let mut profilers = Profilers::new();
    let mut warnings = Vec::new();
    if let Some(dir) = &options.jitdump_dir {
        match JitDump::create_in(dir) {
            Ok(dump) if std::env::var_os(NO_UNWIND_ENV).is_some() => {
                profilers.add(Box::new(dump.without_unwinding_records()))
            }
            Ok(dump) => profilers.add(Box::new(dump)),
            Err(e) => warnings.push(format!(
                "toyvm: warning: cannot write the jitdump in {}: {e}",
                dir.display()
            )),
        }
    }
    if options.perf_map {
        let map = PerfMap::new();
        match map.open() {
            Ok(()) => profilers.add(Box::new(map)),
            Err(e) => warnings.push(format!("toyvm: warning: cannot write the perf map: {e}")),
        }
    }
    if options.gdb {
        profilers.add(Box::new(GdbJit::new()));
    }
    (profilers, warnings)
}
