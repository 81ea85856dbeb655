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
//! One object per batch, not per region: gdb's cost per registration grows
//! with the number of objects it already holds, so a VM that finalizes its
//! code in batches keeps a debugger usable with thousands of functions.
//!
//! Without a `GdbJit` nothing of this runs: the descriptor stays empty and
//! `__jit_debug_register_code` is never called.

mod descriptor;
mod dwarf;
mod elf_image;

use crate::region::{CodeRegion, validate_batch};
use crate::sink::ProfilerSink;
use descriptor::Published;
use parking_lot::Mutex;
use std::io;
use std::path::Path;

/// A [`ProfilerSink`] that publishes each batch to debuggers through the GDB
/// JIT interface (see the [module documentation](self)).
///
/// Objects stay published until [`ProfilerSink::finish`] (or drop), which
/// unpublishes them: call it only when the code will not run again.
pub struct GdbJit {
    comp_dir: String,
    published: Mutex<Option<Vec<Published>>>,
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
            published: Mutex::new(Some(Vec::new())),
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
        elf_image::build(regions, &self.comp_dir)
    }

    /// How many objects (batches) this sink has published and not yet
    /// unpublished.
    pub fn published_objects(&self) -> usize {
        self.published.lock().as_ref().map_or(0, Vec::len)
    }
}

impl Default for GdbJit {
    fn default() -> Self {
        GdbJit::new()
    }
}

impl ProfilerSink for GdbJit {
    fn name(&self) -> &str {
        "gdb JIT interface"
    }

    fn register(&self, regions: &[CodeRegion<'_>]) -> io::Result<()> {
        if regions.is_empty() {
            return Ok(());
        }
        let image = self.build_object(regions)?;
        let mut published = self.published.lock();
        let Some(list) = published.as_mut() else {
            return Err(io::Error::other("the sink is finished"));
        };
        list.push(Published::publish(image));
        Ok(())
    }

    fn finish(&self) -> io::Result<()> {
        // Dropping the entries unpublishes them, newest first.
        if let Some(mut list) = self.published.lock().take() {
            while list.pop().is_some() {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
