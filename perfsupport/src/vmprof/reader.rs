//! Reads vmprof CPU profiles (the layout of [`super::format`]) into a
//! [`Profile`].
//!
//! The reader accepts what the PyPI readers accept for non-RPython
//! profiles with 8-byte little-endian words: versions 0 to 7, the memory and
//! lines modes (lines are kept in [`Sample::lines`], memory words skipped), names from
//! VIRTUAL_IP and NATIVE_SYMBOLS, and a missing trailer. Everything after
//! a TRAILER is ignored, as the real readers do.
//!
//! A profiler killed while writing (SIGKILL, a crash, a full disk) leaves a
//! file without trailer that may end inside a record. [`salvage_profile`]
//! reads such a file up to the last whole record and says where it was
//! cut; [`parse_profile`] treats the cut as an error.
//!
//! It rejects, with a [`ReadError`] naming the byte offset: truncated
//! records, a wrong static header, 4-byte or big-endian words, gzip input,
//! unknown versions, RPython profiles, unknown markers (including the
//! deprecated `0x04`), a sample before the HEADER, a second HEADER, a
//! sample `count` other than 1, depths above 65536, repeated META keys and
//! invalid UTF-8. It never panics, and allocates at most in proportion to
//! the input's size.

use std::collections::HashMap;
use std::fmt;
use std::io::Read;
use std::path::Path;

use super::format::*;

/// A parsed profile.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Profile {
    /// The sampling interval from the static header, in microseconds.
    pub period_us: i64,
    /// The format version from the HEADER record.
    pub version: i16,
    /// The mode bits from the HEADER record (0 before version 4).
    pub mode: u8,
    /// The interpreter name from the HEADER record.
    pub interp: String,
    /// META records, in file order.
    pub meta: Vec<(String, String)>,
    /// Code names by id.
    pub names: HashMap<u64, String>,
    /// The samples, in file order.
    pub samples: Vec<Sample>,
    /// The start time (TIME_N_ZONE), if present.
    pub start_time: Option<Timeval>,
    /// The end time (TRAILER, version ≥ 5), if present.
    pub end_time: Option<Timeval>,
    /// Whether the file ended with a TRAILER record.
    pub has_trailer: bool,
}

impl Profile {
    /// The value of META record `key`.
    pub fn meta_value(&self, key: &str) -> Option<&str> {
        self.meta
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The name of code `id`, if the file names it.
    pub fn name(&self, id: u64) -> Option<&str> {
        self.names.get(&id).map(String::as_str)
    }
}

/// One STACKTRACE record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sample {
    /// Code ids, **root first** (the file stores them innermost first).
    pub stack: Vec<u64>,
    /// In lines mode, the line each frame of `stack` was executing (same
    /// order; 0: unknown); empty otherwise.
    pub lines: Vec<u64>,
    /// The thread id (0 before version 1).
    pub thread: u64,
}

/// Why a profile could not be read.
#[derive(Debug)]
pub enum ReadError {
    /// The file could not be read.
    Io(std::io::Error),
    /// The data ends inside a record.
    Truncated {
        /// Where the record started.
        offset: usize,
        /// Which part was cut.
        what: &'static str,
    },
    /// The first bytes are not a vmprof static header.
    BadHeader(&'static str),
    /// The file is gzip-compressed; decompress it first.
    Gzip,
    /// The HEADER's version is not one this reader knows.
    UnknownVersion(i16),
    /// The profile has RPython stacks (interpreter `pypy` or mode 0x08).
    RPythonProfile,
    /// A marker byte that starts no known record.
    BadMarker {
        /// Offset of the marker.
        offset: usize,
        /// The byte found.
        marker: u8,
    },
    /// A record is malformed.
    BadRecord {
        /// Where the record started.
        offset: usize,
        /// What is wrong.
        problem: String,
    },
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Io(e) => write!(f, "cannot read the profile: {e}"),
            ReadError::Truncated { offset, what } => {
                write!(
                    f,
                    "truncated vmprof profile: the file ends inside {what} at offset {offset}"
                )
            }
            ReadError::BadHeader(why) => write!(f, "not a vmprof profile: {why}"),
            ReadError::Gzip => write!(f, "the profile is gzip-compressed; gunzip it first"),
            ReadError::UnknownVersion(v) => write!(f, "unknown vmprof format version {v}"),
            ReadError::RPythonProfile => {
                write!(f, "RPython (PyPy) profiles are not supported")
            }
            ReadError::BadMarker { offset, marker } => {
                write!(
                    f,
                    "bad vmprof record marker 0x{marker:02x} at offset {offset}"
                )
            }
            ReadError::BadRecord { offset, problem } => {
                write!(f, "bad vmprof record at offset {offset}: {problem}")
            }
        }
    }
}

impl std::error::Error for ReadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReadError::Io(e) => Some(e),
            _ => None,
        }
    }
}

/// Reads and parses the profile at `path`.
pub fn read_profile(path: &Path) -> Result<Profile, ReadError> {
    let salvaged = read_salvaging(path)?;
    match salvaged.cut {
        Some(cut) => Err(cut),
        None => Ok(salvaged.profile),
    }
}

/// Reads the profile at `path` with [`salvage_profile`], from the file as
/// it goes (the file is never held in memory whole).
pub fn read_salvaging(path: &Path) -> Result<Salvaged, ReadError> {
    let file = std::fs::File::open(path).map_err(ReadError::Io)?;
    collect_samples(std::io::BufReader::with_capacity(1 << 16, file))
}

/// Parses a whole profile held in memory.
pub fn parse_profile(bytes: &[u8]) -> Result<Profile, ReadError> {
    let salvaged = salvage_profile(bytes)?;
    match salvaged.cut {
        Some(cut) => Err(cut),
        None => Ok(salvaged.profile),
    }
}

/// A profile read as far as it is whole (see [`salvage_profile`]).
#[derive(Debug)]
pub struct Salvaged {
    /// Every record before the cut.
    pub profile: Profile,
    /// Why reading stopped early: the [`ReadError::Truncated`] of a record
    /// cut short at the end of the file; `None` if the file ends at a
    /// record boundary.
    pub cut: Option<ReadError>,
}

/// Parses a profile whose writer may have been killed: a file that ends
/// inside a record after the HEADER yields the records before it (and the
/// cut). Every other problem is an error, as for [`parse_profile`].
pub fn salvage_profile(bytes: &[u8]) -> Result<Salvaged, ReadError> {
    collect_samples(bytes)
}

/// [`stream_profile`], keeping every sample in [`Profile::samples`].
fn collect_samples(input: impl Read) -> Result<Salvaged, ReadError> {
    let mut samples = Vec::new();
    let mut salvaged = stream_profile(input, |sample| {
        samples.push(Sample {
            stack: sample.stack.to_vec(),
            lines: sample.lines.to_vec(),
            thread: sample.thread,
        });
    })?;
    salvaged.profile.samples = samples;
    Ok(salvaged)
}

// ANCHOR: stream_profile
/// One sample as [`stream_profile`] hands it over: borrowed, valid for the
/// call only.
#[derive(Clone, Copy, Debug)]
pub struct SampleView<'a> {
    /// Code ids, root first.
    pub stack: &'a [u64],
    /// In lines mode, the line of each frame of `stack`; empty otherwise.
    pub lines: &'a [u64],
    /// The thread id (0 before version 1).
    pub thread: u64,
}

/// Reads a profile from `input` as [`salvage_profile`] does, but hands each
/// sample to `on_sample` instead of keeping it: [`Profile::samples`] stays
/// empty, and memory does not grow with the number of samples (a report
/// that counts distinct stacks reads ten million samples in the memory of
/// their few hundred stacks).
pub fn stream_profile(
    input: impl Read,
    mut on_sample: impl FnMut(SampleView<'_>),
) -> Result<Salvaged, ReadError> {
    let mut parser = Parser {
        input,
        pos: 0,
        record: 0,
        seen_header: false,
        version: 0,
        mode: 0,
        buf: Vec::new(),
        stack: Vec::new(),
        lines: Vec::new(),
    };
    let mut profile = Profile {
        period_us: parser.static_header()?,
        ..Profile::default()
    };
    match parser.records(&mut profile, &mut on_sample) {
        Ok(()) => Ok(Salvaged { profile, cut: None }),
        Err(cut @ ReadError::Truncated { .. }) if parser.seen_header => Ok(Salvaged {
            profile,
            cut: Some(cut),
        }),
        Err(error) => Err(error),
    }
}
// ANCHOR_END: stream_profile

struct Parser<R> {
    input: R,
    /// Bytes consumed so far.
    pos: usize,
    /// Start of the record being parsed, for error messages.
    record: usize,
    /// Whether the HEADER record has been read.
    seen_header: bool,
    /// The HEADER's version and mode.
    version: i16,
    mode: u8,
    /// Scratch space for the bytes of the field being read.
    buf: Vec<u8>,
    /// The sample being read (reused: no allocation per sample).
    stack: Vec<u64>,
    lines: Vec<u64>,
}

impl<R: Read> Parser<R> {
    /// The next `n` bytes; `Truncated` if the input ends first. Allocates
    /// only as the bytes arrive, so a length field that lies cannot make it
    /// reserve more than the input holds.
    fn take(&mut self, n: usize, what: &'static str) -> Result<&[u8], ReadError> {
        self.buf.clear();
        let got = (&mut self.input)
            .take(n as u64)
            .read_to_end(&mut self.buf)
            .map_err(ReadError::Io)?;
        self.pos += got;
        if got < n {
            return Err(ReadError::Truncated {
                offset: self.record,
                what,
            });
        }
        Ok(&self.buf)
    }

    /// Fills `out` whole, or `Truncated`.
    fn fill(&mut self, out: &mut [u8], what: &'static str) -> Result<(), ReadError> {
        let mut done = 0;
        while done < out.len() {
            match self.input.read(&mut out[done..]) {
                Ok(0) => {
                    self.pos += done;
                    return Err(ReadError::Truncated {
                        offset: self.record,
                        what,
                    });
                }
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(ReadError::Io(e)),
            }
        }
        self.pos += done;
        Ok(())
    }

    /// The next marker byte, or `None` at the end of the input.
    fn marker(&mut self) -> Result<Option<u8>, ReadError> {
        let mut byte = [0u8];
        loop {
            match self.input.read(&mut byte) {
                Ok(0) => return Ok(None),
                Ok(_) => {
                    self.pos += 1;
                    return Ok(Some(byte[0]));
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(ReadError::Io(e)),
            }
        }
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, ReadError> {
        let mut raw = [0u8];
        self.fill(&mut raw, what)?;
        Ok(raw[0])
    }

    fn word(&mut self, what: &'static str) -> Result<i64, ReadError> {
        let mut raw = [0u8; 8];
        self.fill(&mut raw, what)?;
        Ok(i64::from_le_bytes(raw))
    }

    fn bad(&self, problem: impl Into<String>) -> ReadError {
        ReadError::BadRecord {
            offset: self.record,
            problem: problem.into(),
        }
    }

    fn string(&mut self, what: &'static str) -> Result<String, ReadError> {
        let len = self.word(what)?;
        let len =
            usize::try_from(len).map_err(|_| self.bad(format!("negative length in {what}")))?;
        let bytes = self.take(len, what)?.to_vec();
        String::from_utf8(bytes).map_err(|_| self.bad(format!("{what} is not UTF-8")))
    }

    fn timeval(&mut self, what: &'static str) -> Result<Timeval, ReadError> {
        let sec = self.word(what)?;
        let usec = self.word(what)?;
        self.word(what)?;
        Ok(Timeval { sec, usec })
    }

    fn static_header(&mut self) -> Result<i64, ReadError> {
        let mut b = [0u8; STATIC_HEADER_SIZE];
        let mut got = 0;
        while got < b.len() {
            match self.input.read(&mut b[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(ReadError::Io(e)),
            }
        }
        self.pos = got;
        if got >= 2 && b[..2] == [0x1f, 0x8b] {
            return Err(ReadError::Gzip);
        }
        if got < STATIC_HEADER_SIZE {
            return Err(ReadError::BadHeader(
                "shorter than the 40-byte static header",
            ));
        }
        if b[4] == 3 || b[7] == 3 {
            return Err(ReadError::BadHeader("4-byte words are not supported"));
        }
        if b[15] == 3 && b[8] != 3 {
            return Err(ReadError::BadHeader(
                "big-endian profiles are not supported",
            ));
        }
        let words: Vec<i64> = (b.chunks_exact(8))
            .map(|w| i64::from_le_bytes(w.try_into().unwrap_or([0; 8])))
            .collect();
        if words[0] != 0 || words[1] != 3 || words[2] != 0 {
            return Err(ReadError::BadHeader(
                "the static header must start with the words 0, 3, 0",
            ));
        }
        if words[4] != 0 && words[4] != 1 {
            return Err(ReadError::BadHeader(
                "the static header's last word must be 0 or 1",
            ));
        }
        Ok(words[3])
    }

    /// Reads the records after the static header into `profile`, handing
    /// each sample to `on_sample`.
    fn records(
        &mut self,
        profile: &mut Profile,
        on_sample: &mut impl FnMut(SampleView<'_>),
    ) -> Result<(), ReadError> {
        loop {
            self.record = self.pos;
            let Some(marker) = self.marker()? else {
                return Ok(());
            };
            match marker {
                MARKER_HEADER => {
                    if self.seen_header {
                        return Err(self.bad("a second HEADER record"));
                    }
                    self.header(profile)?;
                    self.seen_header = true;
                }
                MARKER_TIME_N_ZONE => profile.start_time = Some(self.timeval("TIME_N_ZONE")?),
                MARKER_META => {
                    let key = self.string("a META key")?;
                    let value = self.string("a META value")?;
                    if profile.meta_value(&key).is_some() {
                        return Err(self.bad(format!("META key {key:?} repeats")));
                    }
                    profile.meta.push((key, value));
                }
                MARKER_VIRTUAL_IP | MARKER_NATIVE_SYMBOLS => {
                    let id = self.word("a code id")? as u64;
                    let name = self.string("a code name")?;
                    profile.names.insert(id, name);
                }
                MARKER_STACKTRACE => {
                    if !self.seen_header {
                        return Err(self.bad("a sample before the HEADER record"));
                    }
                    let thread = self.sample()?;
                    on_sample(SampleView {
                        stack: &self.stack,
                        lines: &self.lines,
                        thread,
                    });
                }
                MARKER_TRAILER => {
                    if profile.version >= VERSION_DURATION {
                        profile.end_time = Some(self.timeval("the TRAILER")?);
                    }
                    profile.has_trailer = true;
                    return Ok(());
                }
                _ => {
                    return Err(ReadError::BadMarker {
                        offset: self.record,
                        marker,
                    });
                }
            }
        }
    }

    fn header(&mut self, profile: &mut Profile) -> Result<(), ReadError> {
        let mut raw = [0u8; 2];
        self.fill(&mut raw, "the HEADER")?;
        let version = i16::from_be_bytes(raw);
        if !(0..=VERSION_SAMPLE_TIME).contains(&version) {
            return Err(ReadError::UnknownVersion(version));
        }
        let mode = if version >= VERSION_MODE_AWARE {
            self.u8("the HEADER")?
        } else if version == 3 {
            PROFILE_MEMORY
        } else {
            0
        };
        let len = self.u8("the HEADER")?;
        let name = self.take(usize::from(len), "the HEADER")?.to_vec();
        let interp =
            String::from_utf8(name).map_err(|_| self.bad("the interpreter name is not UTF-8"))?;
        if interp == "pypy" || mode & PROFILE_RPYTHON != 0 {
            return Err(ReadError::RPythonProfile);
        }
        profile.version = version;
        profile.mode = mode;
        profile.interp = interp;
        self.version = version;
        self.mode = mode;
        Ok(())
    }

    /// Reads one STACKTRACE into `self.stack` and `self.lines` (root
    /// first); returns its thread id.
    fn sample(&mut self) -> Result<u64, ReadError> {
        let count = self.word("a STACKTRACE")?;
        if count != 1 {
            return Err(self.bad(format!("sample count {count}, expected 1")));
        }
        let depth = self.word("a STACKTRACE")?;
        let depth = usize::try_from(depth)
            .ok()
            .filter(|&d| d <= MAX_STACK_DEPTH)
            .ok_or_else(|| {
                self.bad(format!("stack depth {depth} outside 0..={MAX_STACK_DEPTH}"))
            })?;
        self.take(depth * WORD_SIZE, "a STACKTRACE")?;
        let words = (self.buf.chunks_exact(WORD_SIZE))
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])));
        self.stack.clear();
        self.lines.clear();
        if self.mode & PROFILE_LINES != 0 {
            // Every frame is (line, id); an odd last entry is a lone line.
            let mut words = words;
            while let (Some(line), Some(id)) = (words.next(), words.next()) {
                self.lines.push(line);
                self.stack.push(id);
            }
        } else {
            self.stack.extend(words);
        }
        self.stack.reverse();
        self.lines.reverse();
        let thread = if self.version >= VERSION_THREAD_ID {
            self.word("a STACKTRACE")? as u64
        } else {
            0
        };
        if self.mode & PROFILE_MEMORY != 0 {
            self.word("a STACKTRACE")?;
        }
        if self.version >= VERSION_SAMPLE_TIME {
            self.word("a STACKTRACE")?;
        }
        Ok(thread)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> Vec<u8> {
        let mut enc = Encoder::new();
        enc.header(1000, "toyvm");
        enc.start_time(Timeval {
            sec: 1_700_000_000,
            usec: 5,
        });
        enc.meta("os", "linux");
        enc.code_name(8, "toy:main:1:a.toy");
        enc.code_name(16, "toy:fib:3:a.toy");
        enc.sample(&[8, 16, 16], 1);
        enc.trailer(Timeval {
            sec: 1_700_000_002,
            usec: 0,
        });
        enc.bytes().to_vec()
    }

    #[test]
    fn reads_what_the_encoder_writes() {
        let p = parse_profile(&tiny()).unwrap();
        assert_eq!(p.period_us, 1000);
        assert_eq!(p.version, 6);
        assert_eq!(p.interp, "toyvm");
        assert_eq!(p.meta_value("os"), Some("linux"));
        assert_eq!(p.name(16), Some("toy:fib:3:a.toy"));
        assert_eq!(
            p.samples,
            vec![Sample {
                stack: vec![8, 16, 16],
                lines: vec![],
                thread: 1
            }]
        );
        assert_eq!(
            p.start_time,
            Some(Timeval {
                sec: 1_700_000_000,
                usec: 5
            })
        );
        assert_eq!(p.end_time.map(|t| t.sec), Some(1_700_000_002));
        assert!(p.has_trailer);
    }

    #[test]
    fn lines_mode_keeps_each_frames_line() {
        let mut enc = Encoder::new();
        enc.header_with_mode(1000, "toyvm", PROFILE_LINES);
        // Root first, `id, line` pairs: main at line 7 calls fib, at 4.
        enc.sample(&[8, 7, 16, 4], 1);
        let bytes = enc.bytes().to_vec();
        // The record lists `line, id` innermost first.
        let entries = &bytes[bytes.len() - 40..bytes.len() - 8];
        let words: Vec<u64> = (entries.chunks_exact(8))
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(words, [4, 16, 7, 8]);
        let p = parse_profile(&bytes).unwrap();
        assert_eq!(p.mode, PROFILE_LINES);
        assert_eq!(p.samples[0].stack, [8, 16]);
        assert_eq!(p.samples[0].lines, [7, 4]);
    }

    #[test]
    fn every_truncation_is_an_error_or_a_record_boundary() {
        let data = tiny();
        for cut in 0..data.len() {
            match parse_profile(&data[..cut]) {
                Ok(p) => assert!(!p.has_trailer),
                Err(e) => assert!(!e.to_string().is_empty()),
            }
        }
        // Cut inside the sample record: a truncation error.
        let err = parse_profile(&data[..data.len() - 30]).unwrap_err();
        assert!(matches!(err, ReadError::Truncated { .. }), "{err}");
    }

    #[test]
    fn salvaging_keeps_every_whole_record_before_a_cut() {
        let data = tiny();
        let whole = parse_profile(&data).unwrap();
        // Cut inside the sample record: nothing of it, everything before.
        let cut = salvage_profile(&data[..data.len() - 30]).unwrap();
        assert!(matches!(cut.cut, Some(ReadError::Truncated { .. })));
        assert!(cut.profile.samples.is_empty() && !cut.profile.has_trailer);
        assert_eq!(cut.profile.names, whole.names);
        // Cut inside the trailer: the sample is kept.
        let cut = salvage_profile(&data[..data.len() - 3]).unwrap();
        assert_eq!(cut.profile.samples, whole.samples);
        assert!(cut.cut.is_some() && !cut.profile.has_trailer);
        // A whole file has no cut; a cut before the HEADER is no profile.
        assert!(salvage_profile(&data).unwrap().cut.is_none());
        assert!(salvage_profile(&data[..45]).is_err());
        // Damage other than a cut is still an error.
        let mut v = data.clone();
        v.truncate(v.len() - 25);
        v.push(0x04);
        assert!(salvage_profile(&v).is_err());
    }

    #[test]
    fn rejects_foreign_files_clearly() {
        let data = tiny();
        let err = |bytes: &[u8]| parse_profile(bytes).unwrap_err().to_string();
        assert!(err(b"hello world, this is not a vmprof profile at all").contains("not a vmprof"));
        assert!(err(&[0x1f, 0x8b, 0]).contains("gzip"));
        let mut v = data.clone();
        v[41] = 0x7f; // version 0x7f06
        assert!(err(&v).contains("unknown vmprof format version"));
        let mut v = data.clone();
        v.truncate(v.len() - 25);
        v.push(0x04);
        assert!(err(&v).contains("bad vmprof record marker 0x04"));
        let mut v = data.clone();
        v[43] = PROFILE_RPYTHON; // the HEADER's mode byte
        assert!(matches!(parse_profile(&v), Err(ReadError::RPythonProfile)));
    }
}
