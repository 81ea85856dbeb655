//! Reads a jitdump back: the file header and every record, as
//! [`format`](super::format) lays them out (perf's layout, native byte
//! order). For tools and tests that look inside a dump (`toyvm jitdump`),
//! not for perf, which has its own reader.
//!
//! The reader trusts nothing: sizes are checked against the file, and a
//! record that does not fit is an error naming its offset, never a panic.

use super::format::{HEADER_SIZE, MAGIC, RECORD_HEADER_SIZE, RecordId};
use std::fmt;

/// The 40-byte file header (see [`format::HEADER_SIZE`](super::format::HEADER_SIZE)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// `0x4A695444` ("JiTD") for a dump of this byte order.
    pub magic: u32,
    /// The format version (1).
    pub version: u32,
    /// The header's size, where the first record starts.
    pub total_size: u32,
    /// ELF `e_machine` of the writer.
    pub elf_mach: u32,
    /// Reserved (0).
    pub pad1: u32,
    /// The writing process.
    pub pid: u32,
    /// CLOCK_MONOTONIC ns when the dump was created.
    pub timestamp: u64,
    /// Flags (0).
    pub flags: u64,
}

/// One row of a `JIT_CODE_DEBUG_INFO` record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DebugEntry<'a> {
    /// Absolute address of the row's first instruction.
    pub addr: u64,
    /// 1-based line.
    pub line: u32,
    /// The `discrim` field (perfsupport stores the column there).
    pub discrim: u32,
    /// The file name, without its NUL.
    pub file: &'a [u8],
}

/// What a record holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record<'a> {
    /// `JIT_CODE_LOAD`.
    CodeLoad {
        /// Process and thread that wrote it.
        pid: u32,
        /// Kernel thread id.
        tid: u32,
        /// `vma` (the same as `code_addr`).
        vma: u64,
        /// Where the code runs.
        code_addr: u64,
        /// Unique per dump: perf names the object `jitted-PID-<index>.so`.
        code_index: u64,
        /// The symbol, without its NUL.
        name: &'a [u8],
        /// The dumped code (and build-id marker, if any).
        code: &'a [u8],
    },
    /// `JIT_CODE_DEBUG_INFO`.
    DebugInfo {
        /// The region the rows belong to.
        code_addr: u64,
        /// The rows, the sentinel at the end of the code included.
        entries: Vec<DebugEntry<'a>>,
        /// Bytes after the last row (the record is padded to 8).
        padding: usize,
    },
    /// `JIT_CODE_UNWINDING_INFO`.
    UnwindingInfo {
        /// What perf maps after the code (0: the header-only form).
        mapped_size: u64,
        /// `.eh_frame` (empty in the header-only form).
        eh_frame: &'a [u8],
        /// `.eh_frame_hdr` (20 bytes).
        eh_frame_hdr: &'a [u8],
        /// Bytes after the payload (the record is padded to 8).
        padding: usize,
    },
    /// `JIT_CODE_CLOSE`.
    Close,
    /// A record of another kind (`JIT_CODE_MOVE`, or unknown), skipped.
    Other {
        /// Its id.
        id: u32,
    },
}

impl Record<'_> {
    /// The record kind's name in perf's jitdump specification, and its id.
    pub fn kind(&self) -> (&'static str, u32) {
        match self {
            Record::CodeLoad { .. } => ("CODE_LOAD", RecordId::CodeLoad as u32),
            Record::DebugInfo { .. } => ("DEBUG_INFO", RecordId::DebugInfo as u32),
            Record::UnwindingInfo { .. } => ("UNWINDING_INFO", RecordId::UnwindingInfo as u32),
            Record::Close => ("CODE_CLOSE", RecordId::Close as u32),
            Record::Other { id } => ("(skipped)", *id),
        }
    }
}

/// A record and where it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordAt<'a> {
    /// File offset of the record's header.
    pub offset: usize,
    /// The record's size, its header included.
    pub total_size: u32,
    /// CLOCK_MONOTONIC ns.
    pub timestamp: u64,
    /// What it holds.
    pub record: Record<'a>,
}

/// Why a dump does not read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadError {
    /// File offset of the problem.
    pub offset: usize,
    /// What is wrong there.
    pub problem: String,
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at offset {:#x}: {}", self.offset, self.problem)
    }
}

impl std::error::Error for ReadError {}

/// Little helper over a byte slice with offsets for errors.
struct Bytes<'a> {
    data: &'a [u8],
    /// File offset of `data[0]`.
    base: usize,
}

impl<'a> Bytes<'a> {
    fn error(&self, at: usize, problem: impl Into<String>) -> ReadError {
        ReadError {
            offset: self.base + at,
            problem: problem.into(),
        }
    }

    fn take(&self, at: usize, len: usize) -> Result<&'a [u8], ReadError> {
        (self.data.get(at..at.saturating_add(len)))
            .filter(|bytes| bytes.len() == len)
            .ok_or_else(|| self.error(at, format!("{len} bytes needed, the record ends")))
    }

    fn u32(&self, at: usize) -> Result<u32, ReadError> {
        let bytes = self.take(at, 4)?;
        Ok(u32::from_ne_bytes(bytes.try_into().expect("4 bytes")))
    }

    fn u64(&self, at: usize) -> Result<u64, ReadError> {
        let bytes = self.take(at, 8)?;
        Ok(u64::from_ne_bytes(bytes.try_into().expect("8 bytes")))
    }

    /// A NUL-terminated string at `at`: its bytes, and the offset after
    /// the NUL.
    fn c_string(&self, at: usize) -> Result<(&'a [u8], usize), ReadError> {
        let rest = self.data.get(at..).unwrap_or(&[]);
        let len = (rest.iter().position(|&b| b == 0))
            .ok_or_else(|| self.error(at, "a string without its NUL"))?;
        Ok((&rest[..len], at + len + 1))
    }
}

/// Reads a whole dump: its header and records, in file order. A dump cut
/// short in its last record (a run that was killed) is an error.
///
/// # Errors
///
/// The first problem, with its offset: a wrong magic (another byte order),
/// a size that does not fit the file.
pub fn read(data: &[u8]) -> Result<(Header, Vec<RecordAt<'_>>), ReadError> {
    let file = Bytes { data, base: 0 };
    let header = Header {
        magic: file.u32(0)?,
        version: file.u32(4)?,
        total_size: file.u32(8)?,
        elf_mach: file.u32(12)?,
        pad1: file.u32(16)?,
        pid: file.u32(20)?,
        timestamp: file.u64(24)?,
        flags: file.u64(32)?,
    };
    if header.magic != MAGIC {
        return Err(file.error(
            0,
            format!(
                "magic {:#x}: not a jitdump of this byte order",
                header.magic
            ),
        ));
    }
    if header.total_size < HEADER_SIZE {
        return Err(file.error(
            8,
            format!("header size {} is below {HEADER_SIZE}", header.total_size),
        ));
    }
    let mut records = Vec::new();
    let mut offset = header.total_size as usize;
    while offset < data.len() {
        let id = file.u32(offset)?;
        let total_size = file.u32(offset + 4)?;
        let timestamp = file.u64(offset + 8)?;
        if (total_size as usize) < RECORD_HEADER_SIZE as usize {
            return Err(file.error(offset + 4, format!("record size {total_size}")));
        }
        let whole = file.take(offset, total_size as usize)?;
        let body = Bytes {
            data: &whole[RECORD_HEADER_SIZE as usize..],
            base: offset + RECORD_HEADER_SIZE as usize,
        };
        let record = record(id, &body)?;
        records.push(RecordAt {
            offset,
            total_size,
            timestamp,
            record,
        });
        offset += total_size as usize;
    }
    Ok((header, records))
}

/// The record with `id` whose body (after the 16-byte header) is `body`.
fn record<'a>(id: u32, body: &Bytes<'a>) -> Result<Record<'a>, ReadError> {
    Ok(match id {
        id if id == RecordId::CodeLoad as u32 => {
            let code_size = body.u64(24)?;
            let (name, code_at) = body.c_string(40)?;
            let code = body.take(code_at, usize::try_from(code_size).unwrap_or(usize::MAX))?;
            Record::CodeLoad {
                pid: body.u32(0)?,
                tid: body.u32(4)?,
                vma: body.u64(8)?,
                code_addr: body.u64(16)?,
                code_index: body.u64(32)?,
                name,
                code,
            }
        }
        id if id == RecordId::DebugInfo as u32 => {
            let code_addr = body.u64(0)?;
            let count = body.u64(8)?;
            let mut entries = Vec::new();
            let mut at = 16;
            for _ in 0..count {
                let (file, next) = body.c_string(at + 16)?;
                entries.push(DebugEntry {
                    addr: body.u64(at)?,
                    line: body.u32(at + 8)?,
                    discrim: body.u32(at + 12)?,
                    file,
                });
                at = next;
            }
            Record::DebugInfo {
                code_addr,
                entries,
                padding: body.data.len().saturating_sub(at),
            }
        }
        id if id == RecordId::UnwindingInfo as u32 => {
            let size = usize::try_from(body.u64(0)?).unwrap_or(usize::MAX);
            let header_size = usize::try_from(body.u64(8)?).unwrap_or(usize::MAX);
            if header_size > size {
                return Err(body.error(
                    8,
                    format!("eh_frame_hdr_size {header_size} > unwind_data_size {size}"),
                ));
            }
            let payload = body.take(24, size)?;
            let (eh_frame, eh_frame_hdr) = payload.split_at(size - header_size);
            Record::UnwindingInfo {
                mapped_size: body.u64(16)?,
                eh_frame,
                eh_frame_hdr,
                padding: body.data.len() - 24 - size,
            }
        }
        id if id == RecordId::Close as u32 => Record::Close,
        id => Record::Other { id },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jitdump::JitDump;
    use crate::region::{CodeRegion, LineEntry};
    use crate::sink::ProfilerSink;
    use crate::unwind::CallFrameInfo;

    #[test]
    fn what_the_writer_writes_reads_back() {
        let code = [
            0x55, 0x48, 0x89, 0xe5, 0x48, 0xff, 0xcf, 0x75, 0xfb, 0x5d, 0xc3,
        ];
        let unwind = CallFrameInfo::x86_64_frame_pointer(code.len() as u32).unwrap();
        let lines = [LineEntry {
            offset: 4,
            file: "r.toy",
            line: 2,
            column: 3,
        }];
        let file = tempfile::NamedTempFile::new().unwrap();
        let dump = JitDump::from_file(file.reopen().unwrap(), false).unwrap();
        let region = CodeRegion::new(&code, "toy::read")
            .with_unwind(unwind.unwind_info())
            .with_lines(&lines);
        dump.register(&[region]).unwrap();
        dump.finish().unwrap();
        let bytes = std::fs::read(file.path()).unwrap();
        let (header, records) = read(&bytes).unwrap();
        assert_eq!(header.pid, std::process::id());
        let kinds: Vec<&str> = records.iter().map(|r| r.record.kind().0).collect();
        assert_eq!(
            kinds,
            ["DEBUG_INFO", "UNWINDING_INFO", "CODE_LOAD", "CODE_CLOSE"]
        );
        let Record::CodeLoad {
            name,
            code: dumped,
            code_addr,
            ..
        } = &records[2].record
        else {
            panic!()
        };
        assert_eq!(
            (*name, *dumped, *code_addr),
            (&b"toy::read"[..], &code[..], code.as_ptr() as u64)
        );
        let Record::DebugInfo { entries, .. } = &records[0].record else {
            panic!()
        };
        assert_eq!(entries.len(), 2, "a row and the sentinel");
        assert_eq!(
            (entries[0].line, entries[0].discrim, entries[0].file),
            (2, 3, &b"r.toy"[..])
        );
        // Cut anywhere inside a record: an error, never a panic.
        for end in HEADER_SIZE as usize + 1..bytes.len() {
            let cut = read(&bytes[..end]);
            let boundary = records.iter().any(|r| r.offset == end);
            assert_eq!(cut.is_ok(), boundary, "cut at {end}");
        }
    }
}
