//! The GDB JIT interface: tells gdb (and lldb) about generated code, so a
//! debugger names JIT frames, shows their source lines and unwinds through
//! them.
//!
//! [`GdbJit`] is a [`ProfilerSink`]: for each batch it builds one in-memory
//! ELF object ([`elf_image`]) holding, for every region, a `.text` section at
//! the code's live address (no copy of the code), a function symbol, the
//! line table as DWARF ([`dwarf`]) and the region's CFI, then publishes it
//! through the standard `__jit_debug_descriptor` /
//! `__jit_debug_register_code` pair ([`descriptor`]).
//!
//! # Few objects, however many batches
//!
//! gdb's cost per registration grows with the number of objects it already
//! holds (measured: 1,000 one-function objects take 3.8 s under gdb, 2,000
//! take 11 s, 5,000 take 73 s; 900 functions in one object, 0.7 s). A VM
//! that compiles one function at a time registers one batch per function,
//! so the sink merges: objects are kept like the digits of a binary
//! counter. A new batch becomes an object; while the newest object holds at
//! least as many regions as the one before it, the two are replaced by one
//! object for both (published first, then the two old ones unpublished, so
//! no symbol is ever missing). At most about log2(regions) objects stay
//! published, and each region is rebuilt into a new object only about
//! log2(regions) times. The sink keeps a [`record::RegionRecord`] per region
//! (names, CFI, line rows: never the code) to rebuild from.
//!
//! Without a `GdbJit` nothing of this runs: the descriptor stays empty and
//! `__jit_debug_register_code` is never called.

mod descriptor;
mod elf_image;
mod record;

use crate::dwarf::RegionView;
use crate::region::CodeRegion;
use crate::sink::ProfilerSink;
use crate::validation::{validate_batch, validate_ranges};
use descriptor::Published;
use parking_lot::Mutex;
use record::RegionRecord;
use std::collections::BTreeSet;
use std::io;
use std::path::Path;

/// A [`ProfilerSink`] that publishes each batch to debuggers through the GDB
/// JIT interface (see the [module documentation](self)).
///
/// Objects stay published until [`ProfilerSink::finish`] (or drop), which
/// unpublishes them: call it only when the code will not run again.
pub struct GdbJit {
    comp_dir: String,
    /// What is published; `None` once finished.
    published: Mutex<Option<Registry>>,
}

/// What the sink has published.
#[derive(Default)]
struct Registry {
    /// The objects, oldest first.
    objects: Vec<Object>,
    /// The start address of every region in `objects`: a gap between two
    /// regions of one object that holds none of these can share their
    /// `.text` section (see [`elf_image`]).
    starts: BTreeSet<u64>,
}

impl Registry {
    /// True if `[end, start)` holds no published region.
    fn gap_is_free(&self, end: u64, start: u64) -> bool {
        self.starts.range(end..start).next().is_none()
    }
}

/// One published object and the regions it describes.
struct Object {
    regions: Vec<RegionRecord>,
    /// Dropping it unpublishes the object.
    _entry: Published,
}

impl GdbJit {
    /// A sink that resolves relative source paths of line tables against
    /// the current directory (what gdb's `list` opens).
    pub fn new() -> GdbJit {
        let cwd = std::env::current_dir().unwrap_or_else(|_| Path::new("/").to_path_buf());
        GdbJit::with_source_dir(&cwd)
    }

    /// A sink that resolves relative source paths against `dir`.
    pub fn with_source_dir(dir: &Path) -> GdbJit {
        GdbJit {
            comp_dir: dir.to_string_lossy().into_owned(),
            published: Mutex::new(Some(Registry::default())),
        }
    }

    /// Builds the ELF object a debugger would load for `regions`, without
    /// publishing it (for tests and tools that inspect it).
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a malformed region (see [`CodeRegion::validate`])
    /// or an empty batch; `Unsupported` on an architecture without an ELF
    /// machine code here.
    pub fn build_object(&self, regions: &[CodeRegion<'_>]) -> io::Result<Vec<u8>> {
        if regions.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "an empty batch has no object",
            ));
        }
        validate_batch(regions)?;
        let published = self.published.lock();
        let empty = Registry::default();
        self.build_new(regions, published.as_ref().unwrap_or(&empty))
    }

    /// The object for a validated batch, next to what is `published`.
    fn build_new(&self, regions: &[CodeRegion<'_>], published: &Registry) -> io::Result<Vec<u8>> {
        let views: Vec<RegionView<'_>> = regions.iter().map(RegionView::from).collect();
        elf_image::build(&views, &self.comp_dir, |end, start| {
            published.gap_is_free(end, start)
        })
    }

    /// The object for kept records (`a`'s regions, then `b`'s).
    fn build_merged(
        &self,
        a: &[RegionRecord],
        b: &[RegionRecord],
        published: &Registry,
    ) -> io::Result<Vec<u8>> {
        let records: Vec<&RegionRecord> = a.iter().chain(b).collect();
        let lines: Vec<_> = records.iter().map(|r| r.lines()).collect();
        let views: Vec<RegionView<'_>> = records
            .iter()
            .zip(&lines)
            .map(|(record, lines)| record.view(lines))
            .collect();
        // The regions of `a` and `b` are all in `starts`; in a gap between
        // two of them in address order, a start is another object's.
        elf_image::build(&views, &self.comp_dir, |end, start| {
            published.gap_is_free(end, start)
        })
    }

    /// How many objects this sink has published and not yet unpublished
    /// (batches merged as the [module documentation](self) describes).
    pub fn published_objects(&self) -> usize {
        self.published
            .lock()
            .as_ref()
            .map_or(0, |p| p.objects.len())
    }
}

impl Default for GdbJit {
    fn default() -> Self {
        GdbJit::new()
    }
}

impl GdbJit {
    // ANCHOR: merge_newest
    /// Merges the newest objects while the newest holds at least as many
    /// regions as the one before it (see the [module documentation](self)).
    /// On an error the objects stay as they are: published and correct,
    /// only more of them.
    fn merge_newest(&self, registry: &mut Registry) -> io::Result<()> {
        while let [.., older, newer] = registry.objects.as_slice()
            && newer.regions.len() >= older.regions.len()
        {
            let image = self.build_merged(&older.regions, &newer.regions, registry)?;
            // Published before the two old objects go: no moment without
            // the symbols (a pending breakpoint would be lost and reset).
            let entry = Published::publish(image);
            let newer = registry.objects.pop().expect("two objects");
            let mut older = registry.objects.pop().expect("two objects");
            older.regions.extend(newer.regions);
            drop(newer._entry);
            drop(older._entry);
            registry.objects.push(Object {
                regions: older.regions,
                _entry: entry,
            });
        }
        Ok(())
    }
    // ANCHOR_END: merge_newest
}

impl ProfilerSink for GdbJit {
    fn name(&self) -> &str {
        "gdb JIT interface"
    }

    fn register(&self, regions: &[CodeRegion<'_>]) -> io::Result<()> {
        if regions.is_empty() {
            return Ok(());
        }
        validate_batch(regions)?;
        let mut guard = self.published.lock();
        let Some(registry) = guard.as_mut() else {
            return Err(io::Error::other("the sink is finished"));
        };
        let image = self.build_new(regions, registry)?;
        registry
            .starts
            .extend(regions.iter().map(CodeRegion::start));
        registry.objects.push(Object {
            regions: regions.iter().map(RegionRecord::new).collect(),
            _entry: Published::publish(image),
        });
        self.merge_newest(registry)
    }

    /// Rebuilds every object that describes a retired region without it
    /// (published before the old object goes, so the other symbols never
    /// go missing), and unpublishes an object left with no region.
    fn retire(&self, ranges: &[(usize, usize)]) -> io::Result<()> {
        validate_ranges(ranges)?;
        // Checked above: `start + size` does not overflow.
        let dead = |r: &RegionRecord| {
            (ranges.iter())
                .any(|&(start, size)| r.start >= start as u64 && r.start < (start + size) as u64)
        };
        let mut guard = self.published.lock();
        let Some(registry) = guard.as_mut() else {
            return Ok(());
        };
        let objects = std::mem::take(&mut registry.objects);
        let mut failed = Ok(());
        for object in objects {
            if failed.is_err() || !object.regions.iter().any(dead) {
                registry.objects.push(object);
                continue;
            }
            let kept: Vec<RegionRecord> = (object.regions.iter())
                .filter(|r| !dead(r))
                .cloned()
                .collect();
            for r in object.regions.iter().filter(|r| dead(r)) {
                registry.starts.remove(&r.start);
            }
            if kept.is_empty() {
                drop(object);
                continue;
            }
            match self.build_merged(&kept, &[], registry) {
                Ok(image) => {
                    // Published before the old object goes.
                    let entry = Published::publish(image);
                    drop(object);
                    registry.objects.push(Object {
                        regions: kept,
                        _entry: entry,
                    });
                }
                Err(e) => {
                    // The old object stays, stale names and all: say so.
                    registry.objects.push(object);
                    failed = Err(e);
                }
            }
        }
        failed
    }

    fn finish(&self) -> io::Result<()> {
        // Dropping the entries unpublishes them, newest first.
        if let Some(mut registry) = self.published.lock().take() {
            while registry.objects.pop().is_some() {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
