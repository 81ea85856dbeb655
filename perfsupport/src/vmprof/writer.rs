//! The writer thread: moves samples from the ring to the profile file.
//!
//! It owns the file for the whole session. Every [`DRAIN_PERIOD`] (or
//! [`BUSY_DRAIN_PERIOD`] while the ring fills fast) it
//! encodes, in one buffer written with one `write_all`:
//!
//! 1. (first round only) the static header, HEADER, TIME_N_ZONE and META;
//! 2. a VIRTUAL_IP record for every code registered since the last round
//!    (so codes registered after `enable` are named too);
//! 3. the samples drained from the ring: a sample of weight `w` becomes `w`
//!    identical STACKTRACE records (see `sampler` for why weights exist).
//!
//! When told to stop (after the sampler has stopped producing) it runs one
//! last round, appends the cut-stack META records if any stack was cut
//! (see [`super::format`]), then the TRAILER, and closes the file. The first I/O error
//! stops all writing; it is returned from the join, i.e. from `disable()`.
//! The thread blocks `SIGPROF`, so the timer's signals go to VM threads.

use std::fs::File;
use std::io::{self, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use super::clock::Clock;
use super::format::{
    Encoder, META_CLOCK, META_CUT_FRAMES_MAX, META_CUT_SAMPLES, META_RECORDS, META_SIGNALS, Timeval,
};
use super::registry::for_each_code_from;
use super::ring::{RING_WORDS, RingSample, SampleRing};

/// How often the writer drains the ring.
pub const DRAIN_PERIOD: Duration = Duration::from_millis(100);
/// How soon the writer drains again after a round that found the ring more
/// than a quarter full (deep stacks at a high rate).
pub const BUSY_DRAIN_PERIOD: Duration = Duration::from_millis(1);

/// What a finished profile contains, returned by `disable()`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProfileSummary {
    /// STACKTRACE records written (each stands for one sampling period).
    pub samples: u64,
    /// Signals whose stack was recorded (a signal may stand for several
    /// periods, see `sampler`).
    pub signals: u64,
    /// Signals whose sample was lost because the ring was full (the writer
    /// fell behind).
    pub dropped_full: u64,
    /// Signals whose sample was lost because a handler on another thread
    /// was writing to the ring at the same moment.
    pub dropped_busy: u64,
    /// VIRTUAL_IP records written.
    pub code_names: u64,
    /// STACKTRACE records whose stack was cut (deeper than the sampler's
    /// capacity: the outer frames are one `[outer frames cut]` frame).
    pub cut_samples: u64,
    /// The most outer frames cut from one sample.
    pub cut_frames_max: u64,
    /// Bytes written to the file.
    pub bytes: u64,
}

/// The header part of a profile, encoded by `enable` and written first.
pub(crate) struct Preamble {
    pub bytes: Vec<u8>,
    /// The clock the session samples with (META `clock` at the end).
    pub clock: Clock,
}

/// A running writer thread.
pub(crate) struct WriterThread {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<io::Result<ProfileSummary>>,
}

impl WriterThread {
    /// Starts the thread, which takes over `file`.
    pub fn spawn(
        file: File,
        preamble: Preamble,
        ring: &'static SampleRing,
    ) -> io::Result<WriterThread> {
        let stop = Arc::new(AtomicBool::new(false));
        let thread_stop = Arc::clone(&stop);
        let handle = crate::threads::spawn_helper("vmprof-writer", move || {
            block_sigprof();
            let mut session = Session::new(file, ring);
            session.run(preamble, &thread_stop)
        })?;
        Ok(WriterThread { stop, handle })
    }

    /// Asks for the final round and waits for it. Call only once the
    /// sampler can no longer push to the ring.
    pub fn finish(self) -> Result<io::Result<ProfileSummary>, ()> {
        self.stop.store(true, Ordering::SeqCst);
        self.handle.thread().unpark();
        self.handle.join().map_err(|_| ())
    }
}

/// Blocks SIGPROF in the calling thread so the kernel delivers the timer's
/// signals to the threads that run VM code.
fn block_sigprof() {
    // SAFETY: `set` is a local sigset initialised by sigemptyset before use;
    // pthread_sigmask only changes this thread's mask. Failure is harmless
    // (the handler finds an empty shadow stack here), so it is ignored.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGPROF);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

struct Session {
    file: File,
    ring: &'static SampleRing,
    encoder: Encoder,
    drained: Vec<RingSample>,
    stack: Vec<u64>,
    names_written: usize,
    error: Option<io::Error>,
    summary: ProfileSummary,
}

impl Session {
    fn new(file: File, ring: &'static SampleRing) -> Session {
        Session {
            file,
            ring,
            encoder: Encoder::new(),
            drained: Vec::new(),
            stack: Vec::new(),
            names_written: 0,
            error: None,
            summary: ProfileSummary::default(),
        }
    }

    fn run(&mut self, preamble: Preamble, stop: &AtomicBool) -> io::Result<ProfileSummary> {
        self.emit(&preamble.bytes);
        let preamble_clock = preamble.clock;
        loop {
            // Read the flag before draining: once it is set the sampler has
            // stopped, so this round gets every remaining sample.
            let stopping = stop.load(Ordering::SeqCst);
            let freed = self.round();
            if stopping {
                break;
            }
            let busy = freed > RING_WORDS / 4;
            thread::park_timeout(if busy {
                BUSY_DRAIN_PERIOD
            } else {
                DRAIN_PERIOD
            });
        }
        self.encoder.clear();
        self.summary.dropped_full = self.ring.dropped_full();
        self.summary.dropped_busy = self.ring.dropped_busy();
        let signals = self.summary.signals + self.summary.dropped_full + self.summary.dropped_busy;
        self.encoder.meta(META_CLOCK, preamble_clock.name());
        self.encoder.meta(META_SIGNALS, &signals.to_string());
        self.encoder
            .meta(META_RECORDS, &self.summary.samples.to_string());
        if self.summary.cut_samples > 0 {
            let (samples, frames) = (self.summary.cut_samples, self.summary.cut_frames_max);
            self.encoder.meta(META_CUT_SAMPLES, &samples.to_string());
            self.encoder.meta(META_CUT_FRAMES_MAX, &frames.to_string());
        }
        self.encoder.trailer(Timeval::now());
        let trailer = std::mem::take(&mut self.encoder);
        self.emit(trailer.bytes());
        match self.error.take() {
            Some(error) => Err(error),
            None => Ok(self.summary),
        }
    }

    /// Names new codes and writes drained samples; returns the ring words
    /// freed.
    fn round(&mut self) -> usize {
        self.encoder.clear();
        let encoder = &mut self.encoder;
        let mut named = 0;
        self.names_written = for_each_code_from(self.names_written, |id, name| {
            encoder.code_name(id, name);
            named += 1;
        });
        self.summary.code_names += named;
        self.drained.clear();
        let freed = self.ring.drain(&mut self.drained);
        for sample in &self.drained {
            self.stack.clear();
            self.stack.extend(sample.stack.iter().map(|&id| id as u64));
            for _ in 0..sample.weight {
                self.encoder.sample(&self.stack, sample.thread_id as u64);
            }
            self.summary.signals += 1;
            self.summary.samples += sample.weight as u64;
            if sample.cut > 0 {
                self.summary.cut_samples += sample.weight as u64;
                let cut = sample.cut as u64;
                self.summary.cut_frames_max = self.summary.cut_frames_max.max(cut);
            }
        }
        let batch = std::mem::take(&mut self.encoder);
        self.emit(batch.bytes());
        self.encoder = batch;
        freed
    }

    fn emit(&mut self, bytes: &[u8]) {
        if self.error.is_some() || bytes.is_empty() {
            return;
        }
        match self.file.write_all(bytes) {
            Ok(()) => self.summary.bytes += bytes.len() as u64,
            Err(error) => self.error = Some(error),
        }
    }
}
