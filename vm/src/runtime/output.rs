//! Buffered stdout that a signal-handling thread can still complete.
//!
//! [`Output`] collects `print`ed text in one buffer and writes it to the
//! sink when it grows large, before an error message, at exit, and after
//! every `print` when `line_buffered` (a terminal is watching, as C's stdio
//! does). Every tier prints through it (compiled code calls the
//! interpreter's slow path for `print`).
//!
//! # Stopping on a signal
//!
//! Text the script printed is the user's result: Ctrl-C must not lose it
//! (issue 11.6). The buffer therefore lives behind a mutex shared with a
//! [`PendingOutput`] handle. A signal thread (not a signal handler: it runs
//! in normal thread context, see the CLI's `signals` module) calls
//! [`PendingOutput::seal`]: it waits until no append or write-out is in
//! progress, and from then on holds the lock, so every later `print` of the
//! VM blocks and not one byte is written twice or lost. The sealer writes
//! the bytes it got and ends the process while still holding the lock.
//!
//! Appending and writing out both happen under the lock, so a sealer never
//! sees half a `print`, and bytes handed to the sink are always flushed
//! through it (`Write::flush`) before the lock is released: the sealer
//! finds the sink empty and the rest of the text in the buffer.

use std::io::Write;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::RuntimeError;

/// Write the buffer out when it holds this much.
const OUTPUT_CHUNK: usize = 1 << 16;

/// The run's stdout: see the [module docs](self).
pub struct Output<'m> {
    pending: Arc<Mutex<Vec<u8>>>,
    sink: &'m mut (dyn Write + Send),
    /// Write out after every `print`.
    pub line_buffered: bool,
}

impl<'m> Output<'m> {
    /// Buffers text for `sink`.
    pub fn new(sink: &'m mut (dyn Write + Send)) -> Output<'m> {
        Output {
            pending: Arc::new(Mutex::new(Vec::with_capacity(OUTPUT_CHUNK + 4096))),
            sink,
            line_buffered: false,
        }
    }

    /// Appends text; writes the buffer out if it is full.
    pub fn write(&mut self, text: &[u8]) -> Result<(), RuntimeError> {
        let mut buf = lock(&self.pending);
        buf.extend_from_slice(text);
        if buf.len() >= OUTPUT_CHUNK || self.line_buffered {
            return write_out(&mut buf, self.sink);
        }
        Ok(())
    }

    /// Writes everything buffered to the sink.
    pub fn flush(&mut self) -> Result<(), RuntimeError> {
        write_out(&mut lock(&self.pending), self.sink)
    }

    /// A handle another thread may use to take the unwritten text when the
    /// process must stop (see the [module docs](self)).
    pub fn pending(&self) -> PendingOutput {
        PendingOutput(Arc::clone(&self.pending))
    }
}

/// Writes `buf` to `sink` and empties it; a failed write drops the text
/// (it cannot be written later either) and becomes a runtime error.
fn write_out(buf: &mut Vec<u8>, sink: &mut (dyn Write + Send)) -> Result<(), RuntimeError> {
    let result = sink.write_all(buf).and_then(|()| sink.flush());
    buf.clear();
    result.map_err(|e| RuntimeError::Output(e.to_string()))
}

/// A poisoned lock only means a panic happened while printing; the bytes
/// are still the best record of what was printed.
fn lock(pending: &Mutex<Vec<u8>>) -> MutexGuard<'_, Vec<u8>> {
    pending.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The unwritten text of an [`Output`], shared with another thread.
#[derive(Clone)]
pub struct PendingOutput(Arc<Mutex<Vec<u8>>>);

impl PendingOutput {
    /// Stops the output for good: waits up to `timeout` for a `print` or a
    /// write-out in progress to end, then returns the text printed but not
    /// yet written. While the returned guard lives every `print` of the VM
    /// blocks, so hold it until the process exits. `None` if the VM is
    /// still writing after `timeout` (stdout is a pipe nobody reads).
    pub fn seal(&self, timeout: Duration) -> Option<MutexGuard<'_, Vec<u8>>> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.0.try_lock() {
                Ok(guard) => return Some(guard),
                Err(std::sync::TryLockError::Poisoned(p)) => return Some(p.into_inner()),
                Err(std::sync::TryLockError::WouldBlock) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(std::sync::TryLockError::WouldBlock) => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_is_buffered_until_flushed() {
        let mut sink: Vec<u8> = Vec::new();
        {
            let mut out = Output::new(&mut sink);
            out.write(b"hi\n").unwrap();
            assert!(out.pending().seal(Duration::ZERO).unwrap().as_slice() == b"hi\n");
            out.flush().unwrap();
        }
        assert_eq!(sink, b"hi\n");
    }

    #[test]
    fn line_buffered_output_is_written_at_once() {
        let mut sink: Vec<u8> = Vec::new();
        let mut out = Output::new(&mut sink);
        out.line_buffered = true;
        out.write(b"now\n").unwrap();
        assert!(out.pending().seal(Duration::ZERO).unwrap().is_empty());
        drop(out);
        assert_eq!(sink, b"now\n");
    }

    struct Broken;
    impl Write for Broken {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::from(std::io::ErrorKind::BrokenPipe))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn write_failures_become_errors_not_panics() {
        let mut sink = Broken;
        let mut out = Output::new(&mut sink);
        out.write(b"x").unwrap();
        assert!(matches!(out.flush(), Err(RuntimeError::Output(_))));
    }

    #[test]
    fn a_sealed_output_blocks_printing_and_keeps_every_byte_once() {
        let mut sink: Vec<u8> = Vec::new();
        let mut out = Output::new(&mut sink);
        out.write(b"one\n").unwrap();
        let pending = out.pending();
        let sealed = pending.seal(Duration::from_secs(1)).expect("idle output");
        assert_eq!(sealed.as_slice(), b"one\n");
        std::thread::scope(|s| {
            let printer = s.spawn(|| out.write(b"two\n"));
            std::thread::sleep(Duration::from_millis(20));
            assert!(!printer.is_finished(), "a print after the seal must wait");
            // A second sealer cannot take the lock while the first holds it.
            assert!(pending.seal(Duration::from_millis(5)).is_none());
            drop(sealed);
            printer.join().unwrap().unwrap();
        });
        out.flush().unwrap();
        drop(out);
        assert_eq!(sink, b"one\ntwo\n");
    }
}
