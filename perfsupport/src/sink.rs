//! The [`ProfilerSink`] trait every profiler output implements, and
//! [`Profilers`], which fans one registration out to several sinks.
//!
//! # How a VM uses this crate
//!
//! 1. **At start-up, before the JIT makes any code executable:** create the
//!    sinks. [`JitDump::create_in`](crate::JitDump::create_in) maps the
//!    dump's marker page at once (perf drops anonymous exec mappings only
//!    *after* it); [`PerfMap::open`](crate::PerfMap::open) creates
//!    `/tmp/perf-<pid>.map` before cranelift-jit appends its own lines there.
//! 2. **When laying out code:** leave
//!    [`reserved_region_size`](crate::unwind::reserved_region_size) bytes per
//!    region (code, pad to 8, unwind payload, pad to 16) so perf's injected
//!    mappings never overlap. Use anonymous `mmap` memory, not the malloc heap.
//! 3. **After each JIT finalize** (relocations applied, memory `PROT_EXEC`),
//!    before the new code first runs: build one [`CodeRegion`] per function
//!    from the *live* bytes and call [`Profilers::register`] once for the
//!    batch. Print the returned [`SinkFailure`]s; a failed sink is disabled,
//!    the others keep going.
//! 4. **Optionally**, build
//!    [`eh_frame_for_register_frame`](crate::unwind::eh_frame_for_register_frame)
//!    bytes and pass them to libgcc's `__register_frame` so Rust panics and
//!    backtraces can cross JIT frames.
//! 5. **When code dies** (evicted, replaced, freed with its VM): call
//!    [`Profilers::retire`] with its ranges before the memory is reused
//!    (the GDB JIT interface unregisters it; see [`ProfilerSink::retire`]
//!    for what each sink can know). While a perf map is written, never give
//!    a freed range to code with another name: the map cannot say that code
//!    died.
//! 6. **In a forked child,** right after `fork()`: call
//!    [`Profilers::after_fork_child`]. The perf map continues in the child's
//!    own `perf-<child pid>.map`; the jitdump stops writing (create a new
//!    [`JitDump`](crate::JitDump) in the child if it will JIT).
//! 7. **At exit:** [`Profilers::finish`]. The files stay for `perf report`
//!    and `perf inject`.
//!
//! ```
//! use perfsupport::{CodeRegion, JitDump, LineEntry, PerfMap, Profilers};
//!
//! # fn main() -> std::io::Result<()> {
//! # let dir = std::env::temp_dir().join(format!("perfsupport-doc-{}", std::process::id()));
//! # std::fs::create_dir_all(&dir)?;
//! let mut profilers = Profilers::new();
//! let perf_map = PerfMap::in_dir(&dir); // PerfMap::new() for the real /tmp
//! perf_map.open()?;
//! profilers.add(Box::new(perf_map));
//! profilers.add(Box::new(JitDump::create_in(&dir)?));
//!
//! // ... the JIT compiles and finalizes; `code` is the live executable bytes ...
//! # let code: &[u8] = &[0x55, 0x48, 0x89, 0xe5, 0x5d, 0xc3];
//! let lines = [LineEntry { offset: 0, file: "fib.toy", line: 3, column: 1 }];
//! let region = CodeRegion::new(code, "toy::fib").with_lines(&lines);
//! for failure in profilers.register(&[region]) {
//!     eprintln!("toyvm: {failure}");
//! }
//!
//! for failure in profilers.finish() {
//!     eprintln!("toyvm: {failure}");
//! }
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok(())
//! # }
//! ```

use crate::region::CodeRegion;
use crate::validation::{validate_batch, validate_ranges};
use std::fmt;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

// ANCHOR: profiler_sink
/// A destination for code-region descriptions: a perf map, a jitdump, a
/// VMProf-style registry, ...
///
/// Modelled on wasmtime's `ProfilingAgent`. Sinks are shared between threads
/// (`&self` methods) and do their own locking.
pub trait ProfilerSink: Send + Sync {
    /// Short name used in error messages, e.g. `"perf map"`.
    fn name(&self) -> &str;

    /// Describes a batch of regions that just became executable.
    ///
    /// A batch is what one JIT finalize produced; sinks write it as a unit
    /// and flush it before returning, so a profiler reading mid-run sees only
    /// complete entries. The caller guarantees every region's code is live
    /// and final (see [`CodeRegion`]) and must call this before the code
    /// first runs, so samples in it can be attributed.
    ///
    /// # Errors
    ///
    /// `InvalidInput` if a region is malformed (nothing of the batch is
    /// written), any other kind for I/O failures.
    fn register(&self, regions: &[CodeRegion<'_>]) -> io::Result<()>;

    /// [`ProfilerSink::register`], counting into `fallbacks` the regions
    /// whose unwind data had to give way to packed code (only the jitdump
    /// has any, see [`UnwindFallbacks`]). The default registers and counts
    /// nothing.
    ///
    /// # Errors
    ///
    /// As [`ProfilerSink::register`].
    fn register_reporting(
        &self,
        regions: &[CodeRegion<'_>],
        fallbacks: &mut UnwindFallbacks,
    ) -> io::Result<()> {
        let _ = fallbacks;
        self.register(regions)
    }

    /// Flushes and closes the output at VM shutdown. Later `register` calls
    /// fail. Calling `finish` twice is harmless.
    ///
    /// # Errors
    ///
    /// The I/O error of the final write or flush.
    fn finish(&self) -> io::Result<()>;

    /// Called in a forked child right after `fork()`, before it starts
    /// threads: the child must not keep writing into its parent's files.
    /// The default does nothing (for sinks without files).
    ///
    /// # Errors
    ///
    /// The I/O error of setting up the child's own output.
    fn after_fork_child(&self) -> io::Result<()> {
        Ok(())
    }

    // ANCHOR: retire
    /// Says that the code at `ranges` (start address, size in bytes) is
    /// dead: it will not run again, and once this returns its addresses may
    /// hold other code. Call it before the memory is reused.
    ///
    /// What a sink can do about it depends on what its reader knows (the
    /// book's "When code dies" chapter): the GDB JIT interface unregisters
    /// the code's symbols; a jitdump needs nothing (new code at the same
    /// addresses is a new `JIT_CODE_LOAD`, and `perf inject` resolves by
    /// time); a perf map cannot say it at all, which is why a VM writing
    /// one must never give a freed range to code with another name. The
    /// default does nothing.
    ///
    /// # Errors
    ///
    /// The sink's failure to withdraw the code.
    fn retire(&self, ranges: &[(usize, usize)]) -> io::Result<()> {
        let _ = ranges;
        Ok(())
    }
    // ANCHOR_END: retire
}

/// Lets a VM keep a handle to a sink it also registers through
/// [`Profilers`], e.g. `profilers.add(Box::new(Arc::clone(&jitdump)))`.
impl<T: ProfilerSink + ?Sized> ProfilerSink for std::sync::Arc<T> {
    fn name(&self) -> &str {
        (**self).name()
    }

    fn register(&self, regions: &[CodeRegion<'_>]) -> io::Result<()> {
        (**self).register(regions)
    }

    fn register_reporting(
        &self,
        regions: &[CodeRegion<'_>],
        fallbacks: &mut UnwindFallbacks,
    ) -> io::Result<()> {
        (**self).register_reporting(regions, fallbacks)
    }

    fn finish(&self) -> io::Result<()> {
        (**self).finish()
    }

    fn after_fork_child(&self) -> io::Result<()> {
        (**self).after_fork_child()
    }

    fn retire(&self, ranges: &[(usize, usize)]) -> io::Result<()> {
        (**self).retire(ranges)
    }
}
// ANCHOR_END: profiler_sink

/// What a jitdump did about packed code in one registration (see
/// [`crate::jitdump`]'s `packed` rules): perf maps a region's code *and*
/// the `.eh_frame` after it, so a region with no room after its code for
/// its unwind data cannot keep its FDE.
///
/// Both kinds of region fall back to the frame-pointer chain under
/// `perf --call-graph dwarf`: full stacks only where the code keeps `rbp`
/// frames. Leave [`reserved_region_size`](crate::unwind::reserved_region_size)
/// bytes per region to keep DWARF unwinding.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UnwindFallbacks {
    /// Regions of this batch with unwind info, written header-only: the
    /// next region (of the batch, or live) starts inside their room.
    pub header_only: usize,
    /// Regions written again header-only (a new `JIT_CODE_LOAD`), each
    /// time code of this batch took their room or the build-id marker of
    /// a region of this batch covered their first bytes. Counts are exact
    /// only when the registration succeeded.
    pub rewritten: usize,
}

/// A sink that failed and was switched off by [`Profilers`].
#[derive(Debug)]
pub struct SinkFailure {
    /// The failing sink's [`ProfilerSink::name`].
    pub sink: String,
    /// What went wrong.
    pub error: io::Error,
    /// True when the sink was switched off (an I/O failure); false when only
    /// this batch was rejected (`InvalidInput`: nothing was written).
    pub disabled: bool,
}

impl fmt::Display for SinkFailure {
    /// `"<sink>: <error>; profiling output disabled"` for a disabled sink,
    /// `"<sink>: <error>; regions not registered"` for a rejected batch.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let consequence = if self.disabled {
            "profiling output disabled"
        } else {
            "regions not registered"
        };
        write!(f, "{}: {}; {consequence}", self.sink, self.error)
    }
}

impl std::error::Error for SinkFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

/// Several sinks registered as one.
///
/// The first I/O failure of a sink is returned once (for the VM to print)
/// and the sink is disabled: a half-written jitdump must not be extended,
/// and the other sinks keep going. Invalid regions (`InvalidInput`) are
/// reported every time but do not disable the sink, since nothing was
/// written.
#[derive(Default)]
pub struct Profilers {
    sinks: Vec<ActiveSink>,
}

struct ActiveSink {
    sink: Box<dyn ProfilerSink>,
    disabled: AtomicBool,
}

impl Profilers {
    /// No sinks: registering does nothing.
    pub fn new() -> Self {
        Profilers::default()
    }

    /// Adds a sink.
    pub fn add(&mut self, sink: Box<dyn ProfilerSink>) {
        self.sinks.push(ActiveSink {
            sink,
            disabled: AtomicBool::new(false),
        });
    }

    /// True when no sink was added (the VM can skip building regions).
    pub fn is_empty(&self) -> bool {
        self.sinks.is_empty()
    }

    /// Names of the sinks that are still enabled.
    pub fn active_sinks(&self) -> Vec<&str> {
        self.enabled().map(|active| active.sink.name()).collect()
    }

    // ANCHOR: profilers_register
    /// Registers a batch with every enabled sink and returns the failures
    /// (empty when all succeeded).
    ///
    /// The batch is validated once first ([`CodeRegion::validate`]): a
    /// malformed region is rejected by every sink alike, one failure per
    /// enabled sink (not disabled), and nothing of the batch is written
    /// anywhere.
    #[must_use = "print the failures: a failed sink stops writing"]
    pub fn register(&self, regions: &[CodeRegion<'_>]) -> Vec<SinkFailure> {
        self.register_reporting(regions, &mut UnwindFallbacks::default())
    }

    /// [`Profilers::register`], adding up in `fallbacks` what the sinks did
    /// about packed code (see [`UnwindFallbacks`]).
    #[must_use = "print the failures: a failed sink stops writing"]
    pub fn register_reporting(
        &self,
        regions: &[CodeRegion<'_>],
        fallbacks: &mut UnwindFallbacks,
    ) -> Vec<SinkFailure> {
        if let Err(error) = validate_batch(regions) {
            return self.refused_by_every_sink(&error);
        }
        self.for_each_enabled(|sink| sink.register_reporting(regions, fallbacks))
    }
    // ANCHOR_END: profilers_register

    /// Finishes every enabled sink (at VM shutdown) and returns the failures.
    #[must_use = "print the failures: the files may be incomplete"]
    pub fn finish(&self) -> Vec<SinkFailure> {
        self.for_each_enabled(|sink| sink.finish())
    }

    /// Calls [`ProfilerSink::after_fork_child`] on every enabled sink (in a
    /// forked child, right after `fork()`) and returns the failures.
    #[must_use = "print the failures: a failed sink stops writing"]
    pub fn after_fork_child(&self) -> Vec<SinkFailure> {
        self.for_each_enabled(|sink| sink.after_fork_child())
    }

    /// Calls [`ProfilerSink::retire`] on every enabled sink (dead code, before
    /// its memory is reused) and returns the failures.
    #[must_use = "print the failures: a failed sink stops writing"]
    ///
    /// The ranges are checked once first ([`validate_ranges`]: each has at
    /// least one byte and `start + size` does not overflow): a bad range is
    /// refused by every enabled sink alike (not disabled), and no sink
    /// forgets anything.
    pub fn retire(&self, ranges: &[(usize, usize)]) -> Vec<SinkFailure> {
        if ranges.is_empty() {
            return Vec::new();
        }
        if let Err(error) = validate_ranges(ranges) {
            return self.refused_by_every_sink(&error);
        }
        self.for_each_enabled(|sink| sink.retire(ranges))
    }

    /// One failure per enabled sink for input that every sink refuses
    /// alike, none of them disabled (bad input is the caller's, not the
    /// sink's).
    fn refused_by_every_sink(&self, error: &io::Error) -> Vec<SinkFailure> {
        (self.enabled())
            .map(|active| SinkFailure {
                sink: active.sink.name().to_string(),
                error: io::Error::new(error.kind(), error.to_string()),
                disabled: false,
            })
            .collect()
    }

    fn enabled(&self) -> impl Iterator<Item = &ActiveSink> {
        self.sinks
            .iter()
            .filter(|active| !active.disabled.load(Ordering::Relaxed))
    }

    fn for_each_enabled(
        &self,
        mut call: impl FnMut(&dyn ProfilerSink) -> io::Result<()>,
    ) -> Vec<SinkFailure> {
        let mut failures = Vec::new();
        for active in self.enabled() {
            if let Err(error) = call(active.sink.as_ref()) {
                let invalid_input = error.kind() == io::ErrorKind::InvalidInput;
                // `swap` makes sure only one thread reports an I/O failure.
                if invalid_input || !active.disabled.swap(true, Ordering::Relaxed) {
                    failures.push(SinkFailure {
                        sink: active.sink.name().to_string(),
                        error,
                        disabled: !invalid_input,
                    });
                }
            }
        }
        failures
    }
}

impl fmt::Debug for Profilers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Profilers")
            .field("active_sinks", &self.active_sinks())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;

    #[derive(Default)]
    struct Counting {
        registered: AtomicUsize,
        forks: AtomicUsize,
    }

    impl ProfilerSink for Counting {
        fn name(&self) -> &str {
            "counting"
        }
        fn register(&self, regions: &[CodeRegion<'_>]) -> io::Result<()> {
            self.registered.fetch_add(regions.len(), Ordering::Relaxed);
            Ok(())
        }
        fn finish(&self) -> io::Result<()> {
            Ok(())
        }
        fn after_fork_child(&self) -> io::Result<()> {
            self.forks.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }
    }

    #[test]
    fn a_shared_sink_stays_reachable_through_its_arc() {
        let sink = Arc::new(Counting::default());
        let mut profilers = Profilers::new();
        profilers.add(Box::new(Arc::clone(&sink)));
        let code = [0xc3u8; 8];
        let region = CodeRegion::new(&code[..4], "toy::f");
        let other = CodeRegion::new(&code[4..], "toy::g");
        assert!(profilers.register(&[region, other]).is_empty());
        assert!(profilers.after_fork_child().is_empty());
        assert!(profilers.finish().is_empty());
        assert_eq!(sink.registered.load(Ordering::Relaxed), 2);
        assert_eq!(sink.forks.load(Ordering::Relaxed), 1);
        assert_eq!(profilers.active_sinks(), ["counting"]);
        assert_eq!(
            format!("{profilers:?}"),
            r#"Profilers { active_sinks: ["counting"] }"#
        );
    }
}
