//! The vmprof CPU-profile file format: constants and record encoders.
//!
//! This module is the specification of what [`super::enable`] writes and
//! [`super::read_profile`] reads. The layout is the one the PyPI `vmprof`
//! readers 0.4.18.1, 0.5.0 and 0.6.0 all parse identically: **version 6**,
//! 64-bit little-endian words, no memory mode; lines mode
//! ([`PROFILE_LINES`]) when the session asks for it.
//!
//! # Primitive encodings
//!
//! | name     | size | encoding                                              |
//! |----------|------|-------------------------------------------------------|
//! | `u8`     | 1    | unsigned byte                                         |
//! | `word`   | 8    | C `long`: signed, little-endian                       |
//! | `addr`   | 8    | pointer-sized, signed, little-endian                  |
//! | `s64`    | 8    | signed little-endian (timestamps)                     |
//! | `be16`   | 2    | **big-endian** signed 16-bit (only the version field) |
//! | `string` | 8+N  | a `word` length N, then N bytes of UTF-8, no NUL      |
//!
//! # File layout
//!
//! ```text
//! static header (5 words, 40 bytes)
//! HEADER record                      must come before any STACKTRACE
//! { TIME_N_ZONE | META | STACKTRACE | VIRTUAL_IP }*   any order
//! TRAILER                            readers stop here
//! ```
//!
//! ## Static header
//!
//! | offset | size | value              | meaning                                     |
//! |--------|------|--------------------|---------------------------------------------|
//! | 0      | word | `0`                | checked `== 0`                              |
//! | 8      | word | `3`                | checked `== 3`; word-size and endian probe  |
//! | 16     | word | `0`                | checked `== 0`                              |
//! | 24     | word | period in µs       | the sampling interval                       |
//! | 32     | word | `0`                | "Windows-64" flag; always 0 here            |
//!
//! ## Records
//!
//! Every record starts with a one-byte marker.
//!
//! | marker | name          | payload, in order                                                          | size           |
//! |--------|---------------|----------------------------------------------------------------------------|----------------|
//! | `0x01` | STACKTRACE    | `word count` (= 1), `word depth`, `depth × addr` ids **innermost first**, `addr thread_id` | 25 + 8·depth |
//! | `0x02` | VIRTUAL_IP    | `addr id`, `string name`                                                   | 17 + len(name) |
//! | `0x03` | TRAILER       | `s64 tv_sec`, `s64 tv_usec`, 8 zero bytes (time zone, ignored)             | 25             |
//! | `0x05` | HEADER        | `be16 version` (= 6), `u8 mode` (0, or [`PROFILE_LINES`]), `u8 len`, `len` bytes interpreter name | 5 + len     |
//! | `0x06` | TIME_N_ZONE   | `s64 tv_sec`, `s64 tv_usec`, 8 zero bytes                                  | 25             |
//! | `0x07` | META          | `string key`, `string value`; keys never repeat                            | 17 + lengths   |
//! | `0x08` | NATIVE_SYMBOLS| same as VIRTUAL_IP (read, never written here)                               |                |
//!
//! Marker `0x04` (the deprecated INTERP_NAME) and every other byte are
//! rejected by the real readers, and by ours.
//!
//! ## Stack entries
//!
//! A STACKTRACE lists code ids **innermost (running) frame first, root
//! last**; readers reverse it so that the root comes first. Ids are
//! positive and even (odd means a native frame, zero or negative is read as
//! a line number), see [`super::CodeId`]. Empty stacks are never written.
//!
//! ## Lines mode
//!
//! With [`PROFILE_LINES`] in the HEADER's mode, every frame of a
//! STACKTRACE is **two** entries, `line, id` (innermost frame first, so the
//! innermost frame's line is the record's first entry), and `depth` counts
//! entries, twice the frames. `line` is the source line the frame was
//! executing: where the innermost frame was interrupted, a caller's call
//! site; `0` when unknown. The PyPI readers negate the lines (an entry
//! `<= 0` is a line, never a code) and count them in `node.lines` of the
//! tree node of the frame that follows them.
//!
//! ## Cut stacks
//!
//! A sample deeper than the sampler's capacity keeps its innermost frames
//! under one `[outer frames cut]` frame (see [`super::frame_view`]). When
//! some were cut, two META records at the end of the file (before the
//! TRAILER) say how many: [`META_CUT_SAMPLES`] (STACKTRACE records whose
//! stack was cut) and [`META_CUT_FRAMES_MAX`] (the most frames cut from
//! one sample).
//!
//! ## Example
//!
//! One sample `main → fib → fib` with `main = 8`, `fib = 16`:
//!
//! ```text
//! 01                          marker STACKTRACE
//! 01 00 00 00 00 00 00 00     count = 1
//! 03 00 00 00 00 00 00 00     depth = 3
//! 10 00 00 00 00 00 00 00     16  fib   (innermost)
//! 10 00 00 00 00 00 00 00     16  fib
//! 08 00 00 00 00 00 00 00     8   main  (root)
//! 01 00 00 00 00 00 00 00     thread id = 1
//! ```

/// Marker byte of a sample record.
pub const MARKER_STACKTRACE: u8 = 0x01;
/// Marker byte of a code-name record (`id → "class:func:line:file"`).
pub const MARKER_VIRTUAL_IP: u8 = 0x02;
/// Marker byte of the trailer; readers stop at it.
pub const MARKER_TRAILER: u8 = 0x03;
/// Deprecated interpreter-name marker: every current reader rejects it.
pub const MARKER_INTERP_NAME: u8 = 0x04;
/// Marker byte of the header record (version, mode, interpreter name).
pub const MARKER_HEADER: u8 = 0x05;
/// Marker byte of the start-time record.
pub const MARKER_TIME_N_ZONE: u8 = 0x06;
/// Marker byte of a key/value meta record.
pub const MARKER_META: u8 = 0x07;
/// Marker byte of a native-symbol record (same payload as VIRTUAL_IP).
pub const MARKER_NATIVE_SYMBOLS: u8 = 0x08;

/// Version from which samples carry a thread id.
pub const VERSION_THREAD_ID: i16 = 1;
/// Version from which the header carries a mode byte.
pub const VERSION_MODE_AWARE: i16 = 4;
/// Version from which the trailer carries the end time.
pub const VERSION_DURATION: i16 = 5;
/// The version we write: the newest every PyPI reader parses the same way.
pub const VERSION_TIMESTAMP: i16 = 6;
/// vmprof 0.6.0's version: every sample ends with an `s64` time in ns.
pub const VERSION_SAMPLE_TIME: i16 = 7;

/// Mode bit: one more `addr` (RSS in KiB) after each sample's thread id.
pub const PROFILE_MEMORY: u8 = 0x01;
/// Mode bit: each frame is a `(line, id)` pair of entries.
pub const PROFILE_LINES: u8 = 0x02;
/// Mode bit: native frames were sampled (informational).
pub const PROFILE_NATIVE: u8 = 0x04;
/// Mode bit: RPython `(kind, pc)` stacks. Never written here; rejected on read.
pub const PROFILE_RPYTHON: u8 = 0x08;
/// Mode bit: wall-clock sampling (informational).
pub const PROFILE_REAL_TIME: u8 = 0x10;

/// META key written at the end of a profile in which some stacks were
/// cut: how many STACKTRACE records have a cut stack.
pub const META_CUT_SAMPLES: &str = "cut_samples";
/// META key written at the end of every profile: the clock that sent the
/// samples ([`super::Clock::name`]: `perf-task-clock` or `itimer-prof`).
pub const META_CLOCK: &str = "clock";
/// META key written with [`META_CLOCK`]: the signals that made a sample.
pub const META_SIGNALS: &str = "signals";
/// META key written with [`META_CLOCK`]: the STACKTRACE records written
/// (more than [`META_SIGNALS`] when one signal of the process timer stood
/// for several intervals and its record was repeated).
pub const META_RECORDS: &str = "records";
/// META key written with [`META_CUT_SAMPLES`]: the most outer frames cut
/// from one sample.
pub const META_CUT_FRAMES_MAX: &str = "cut_frames_max";

/// Size in bytes of a `word` and an `addr` in the files we write and read.
pub const WORD_SIZE: usize = 8;
/// Size of the static header: five words.
pub const STATIC_HEADER_SIZE: usize = 5 * WORD_SIZE;
/// The deepest stack a reader accepts in one STACKTRACE record.
pub const MAX_STACK_DEPTH: usize = 65536;
/// The longest interpreter name the one-byte length in HEADER can carry.
pub const MAX_INTERP_NAME: usize = 255;

/// A wall-clock time as `gettimeofday` gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Timeval {
    /// Seconds since the Unix epoch.
    pub sec: i64,
    /// Microseconds within the second, `0..1_000_000`.
    pub usec: i64,
}

impl Timeval {
    /// The current wall-clock time (0 if the clock is before 1970).
    pub fn now() -> Timeval {
        let since_epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Timeval {
            sec: i64::try_from(since_epoch.as_secs()).unwrap_or(i64::MAX),
            usec: i64::from(since_epoch.subsec_micros()),
        }
    }

    /// Microseconds since the Unix epoch (saturating).
    pub fn as_micros(self) -> i64 {
        self.sec.saturating_mul(1_000_000).saturating_add(self.usec)
    }
}

/// Appends vmprof records to a byte buffer.
///
/// Each method writes exactly one record (or the static header) in the
/// layout the module documentation tabulates. The encoder never fails; the
/// caller validates lengths before (see [`Encoder::header`]).
#[derive(Debug, Default)]
pub(crate) struct Encoder {
    buf: Vec<u8>,
}

impl Encoder {
    /// An empty encoder.
    pub fn new() -> Encoder {
        Encoder::default()
    }

    /// The bytes encoded so far.
    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }

    /// Forgets the encoded bytes, keeping the allocation.
    pub fn clear(&mut self) {
        self.buf.clear();
    }

    fn word(&mut self, value: i64) {
        self.buf.extend_from_slice(&value.to_le_bytes());
    }

    fn addr(&mut self, value: u64) {
        // An `addr` is read as signed; ids are far below 2^63 in practice.
        self.buf.extend_from_slice(&value.to_le_bytes());
    }

    fn string(&mut self, bytes: &[u8]) {
        self.word(i64::try_from(bytes.len()).unwrap_or(i64::MAX));
        self.buf.extend_from_slice(bytes);
    }

    fn timeval(&mut self, time: Timeval) {
        self.word(time.sec);
        self.word(time.usec);
        self.buf.extend_from_slice(&[0; 8]);
    }

    /// The static header followed by the HEADER record (version 6, mode 0).
    ///
    /// `interp_name` must be at most [`MAX_INTERP_NAME`] bytes; longer names
    /// are cut (on a char boundary) so that the file stays readable.
    #[cfg(test)]
    pub fn header(&mut self, period_us: u64, interp_name: &str) {
        self.header_with_mode(period_us, interp_name, 0);
    }

    /// [`Encoder::header`] with the mode bits `mode` (e.g.
    /// [`PROFILE_LINES`]).
    pub fn header_with_mode(&mut self, period_us: u64, interp_name: &str, mode: u8) {
        for word in [0, 3, 0, i64::try_from(period_us).unwrap_or(i64::MAX), 0] {
            self.word(word);
        }
        let name = truncate_on_char_boundary(interp_name, MAX_INTERP_NAME);
        self.buf.push(MARKER_HEADER);
        self.buf.extend_from_slice(&VERSION_TIMESTAMP.to_be_bytes());
        self.buf.push(mode);
        self.buf.push(u8::try_from(name.len()).unwrap_or(u8::MAX));
        self.buf.extend_from_slice(name.as_bytes());
    }

    /// A TIME_N_ZONE record: the profile's start time.
    pub fn start_time(&mut self, time: Timeval) {
        self.buf.push(MARKER_TIME_N_ZONE);
        self.timeval(time);
    }

    /// A META record. Keys must not repeat within one file.
    pub fn meta(&mut self, key: &str, value: &str) {
        self.buf.push(MARKER_META);
        self.string(key.as_bytes());
        self.string(value.as_bytes());
    }

    /// A VIRTUAL_IP record naming code id `id`.
    pub fn code_name(&mut self, id: u64, name: &str) {
        self.buf.push(MARKER_VIRTUAL_IP);
        self.addr(id);
        self.string(name.as_bytes());
    }

    /// A STACKTRACE record for a stack given **root first** (as the shadow
    /// stack holds it); the record lists it innermost first. In lines mode
    /// the stack is `id, line` pairs, root first, so that the record gets
    /// `line, id` pairs innermost first.
    pub fn sample(&mut self, stack_root_first: &[u64], thread_id: u64) {
        self.buf.push(MARKER_STACKTRACE);
        self.word(1);
        self.word(i64::try_from(stack_root_first.len()).unwrap_or(i64::MAX));
        for &id in stack_root_first.iter().rev() {
            self.addr(id);
        }
        self.addr(thread_id);
    }

    /// The TRAILER record with the end time. Nothing may follow it.
    pub fn trailer(&mut self, time: Timeval) {
        self.buf.push(MARKER_TRAILER);
        self.timeval(time);
    }
}

/// The longest prefix of `text` that is at most `max_bytes` long and ends on
/// a char boundary.
pub fn truncate_on_char_boundary(text: &str, max_bytes: usize) -> &str {
    if text.len() <= max_bytes {
        return text;
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 214-byte example of vmprof-format.md, byte for byte.
    #[test]
    fn tiny_example_matches_the_research_note() {
        let start = Timeval {
            sec: 1_700_000_000,
            usec: 0,
        };
        let mut enc = Encoder::new();
        enc.header(1000, "toyvm");
        enc.start_time(start);
        enc.code_name(8, "toy:main:1:a.toy");
        enc.code_name(16, "toy:fib:3:a.toy");
        enc.sample(&[8, 16, 16], 1);
        enc.trailer(Timeval {
            sec: start.sec + 2,
            usec: 0,
        });
        let b = enc.bytes();
        assert_eq!(b.len(), 214);
        assert_eq!(&b[..16], &[0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&b[24..32], &1000i64.to_le_bytes());
        assert_eq!(&b[40..50], b"\x05\x00\x06\x00\x05toyvm");
        assert_eq!(b[50], MARKER_TIME_N_ZONE);
        // The sample: innermost first, root last.
        let s = 50 + 25 + (17 + 16) + (17 + 15);
        assert_eq!(b[s], MARKER_STACKTRACE);
        assert_eq!(&b[s + 9..s + 17], &3i64.to_le_bytes());
        assert_eq!(&b[s + 17..s + 25], &16i64.to_le_bytes());
        assert_eq!(&b[s + 33..s + 41], &8i64.to_le_bytes());
        assert_eq!(b[b.len() - 25], MARKER_TRAILER);
    }

    #[test]
    fn truncation_respects_char_boundaries() {
        assert_eq!(truncate_on_char_boundary("aé", 2), "a");
        assert_eq!(truncate_on_char_boundary("aé", 3), "aé");
        assert_eq!(truncate_on_char_boundary("", 0), "");
    }
}
