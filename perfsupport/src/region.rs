//! [`CodeRegion`]: one piece of machine code as profilers need to see it.
//!
//! A region is whatever the VM wants a profiler to name: a compiled function,
//! an interpreter-entry trampoline, a stub. It carries the live code bytes
//! (their address and length are what perf maps and jitdump describe), a
//! name, and optionally DWARF call-frame information and a line table.
//!
//! Regions borrow everything: building one costs nothing, and sinks copy what
//! they keep. The VM builds regions right after its JIT has made the code
//! final and executable, hands them to [`ProfilerSink::register`], and may
//! drop them afterwards.
//!
//! [`ProfilerSink::register`]: crate::ProfilerSink::register

use gimli::write::{CommonInformationEntry, FrameDescriptionEntry};
use std::io;

/// DWARF call-frame information for one region, as Cranelift produces it.
///
/// * `cie` comes from `isa.create_systemv_cie()`. It may be shared by all
///   regions. Its `fde_address_encoding` is ignored: every layout sets the
///   encoding it needs. A personality routine or LSDA is not supported
///   (registration fails with `InvalidInput`).
/// * `fde` comes from `UnwindInfo::to_fde(address)`, where `address` is
///   either the region's runtime start, `Address::Constant(start)`, or the
///   relocatable form [`REGION_START`](crate::unwind::REGION_START) (symbol 0,
///   addend 0). Its length must equal the region's code size.
///
/// The layout builders re-base the FDE for each layout (perf's
/// position-independent injected ELF in
/// [`unwind::perf_layout`](crate::unwind::perf_layout), or absolute
/// addresses for `__register_frame` in
/// [`unwind::eh_frame_for_register_frame`](crate::unwind::eh_frame_for_register_frame)),
/// so one `UnwindInfo` serves every sink.
#[derive(Clone, Copy, Debug)]
pub struct UnwindInfo<'a> {
    /// The common information entry (initial CFA rule, alignment factors).
    pub cie: &'a CommonInformationEntry,
    /// The frame description entry (CFA rules per code offset).
    pub fde: &'a FrameDescriptionEntry,
}

/// One row of a region's line table: from `offset` on (up to the next row's
/// offset, or the end of the code), the code belongs to `file:line:column`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LineEntry<'a> {
    /// Offset from the region start of the first instruction of this row.
    pub offset: u32,
    /// Source file name, shown by `perf report --sort srcline` as `file:line`.
    pub file: &'a str,
    /// 1-based line number.
    pub line: u32,
    /// 1-based column, or 0 if unknown. perf 6.1 ignores it (jitdump calls it
    /// the "discriminator"); other readers may use it.
    pub column: u32,
}

// ANCHOR: code_region
/// One region of generated machine code, described for profilers.
///
/// # Contract
///
/// The caller guarantees, when registering, that `code` is the **live,
/// final** machine code: the bytes at their executable address after all
/// relocations are applied (Cranelift patches calls during
/// `finalize_definitions`, so its compiled buffer is *not* what runs).
/// Build `code` with `std::slice::from_raw_parts(entry_ptr, size)` on the
/// JIT side, where the knowledge that this memory is readable lives.
#[derive(Clone, Copy, Debug)]
pub struct CodeRegion<'a> {
    /// The live code bytes; `code.as_ptr()` is the region's start address.
    pub code: &'a [u8],
    /// Symbol name shown by profilers, e.g. `toy::fib`: at least
    /// [`MIN_NAME_LEN`] bytes, without newline, carriage return or NUL
    /// (checked by [`CodeRegion::validate`]).
    pub name: &'a str,
    /// Call-frame information, if the code generator produced it.
    pub unwind: Option<UnwindInfo<'a>>,
    /// Line table rows sorted by `offset`, each offset inside the code; may be empty.
    pub lines: &'a [LineEntry<'a>],
}
// ANCHOR_END: code_region

impl<'a> CodeRegion<'a> {
    /// A region with no unwind information and no line table.
    pub fn new(code: &'a [u8], name: &'a str) -> Self {
        CodeRegion {
            code,
            name,
            unwind: None,
            lines: &[],
        }
    }

    /// The same region with call-frame information: an [`UnwindInfo`] (from
    /// Cranelift) or a [`&CallFrameInfo`](crate::unwind::CallFrameInfo) (see
    /// [`crate::unwind`]).
    pub fn with_unwind(self, unwind: impl Into<UnwindInfo<'a>>) -> Self {
        CodeRegion {
            unwind: Some(unwind.into()),
            ..self
        }
    }

    /// The same region with a line table (rows sorted by offset).
    pub fn with_lines(self, lines: &'a [LineEntry<'a>]) -> Self {
        CodeRegion { lines, ..self }
    }

    /// Runtime address of the first code byte.
    pub fn start(&self) -> u64 {
        self.code.as_ptr() as u64
    }

    /// Code size in bytes.
    pub fn size(&self) -> u64 {
        self.code.len() as u64
    }

    // `validate`, which also checks the unwind information, is in
    // `crate::validation`: the check builds the jitdump's unwind payload, and
    // `region` stays below `jitdump`.

    /// [`CodeRegion::validate`] without the unwind check, for the jitdump,
    /// whose payload builder makes the same check (with the same message)
    /// anyway.
    pub(crate) fn validate_except_unwind(&self) -> io::Result<()> {
        if let Some(problem) = name_problem(self.name) {
            return Err(self.invalid(&problem));
        }
        if self.code.is_empty() {
            return Err(self.invalid("code is empty"));
        }
        if self.code.len() > i32::MAX as usize {
            return Err(self.invalid("code is larger than 2 GiB"));
        }
        // Keep every jitdump record far below its u32 size field.
        let line_bytes: usize = self.lines.iter().map(|e| e.file.len() + 17).sum();
        if self.name.len() + line_bytes > MAX_METADATA_BYTES {
            return Err(self.invalid("name and line table are larger than 1 GiB"));
        }
        let mut previous = 0;
        for entry in self.lines {
            if entry.offset as usize >= self.code.len() {
                return Err(self.invalid(&format!(
                    "line entry offset {} is outside the {} code bytes",
                    entry.offset,
                    self.code.len()
                )));
            }
            if entry.offset < previous {
                return Err(self.invalid("line entries are not sorted by offset"));
            }
            // A file name is only ever written NUL-terminated (jitdump,
            // DWARF), never on a perf-map line: a newline in a path is
            // fine, a NUL would end it early.
            if entry.file.contains('\0') {
                return Err(self.invalid(&format!(
                    "line entry file name {:?} contains a NUL byte (it would end the string early)",
                    entry.file
                )));
            }
            previous = entry.offset;
        }
        Ok(())
    }

    /// An error of building this region's unwind data, naming the region.
    pub(crate) fn unwind_error(&self, err: io::Error) -> io::Error {
        self.invalid(&format!("unwind info: {err}"))
    }

    fn invalid(&self, problem: &str) -> io::Error {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("code region {:?}: {problem}", self.name),
        )
    }
}

/// Upper bound for a region's name plus line-table bytes.
const MAX_METADATA_BYTES: usize = 1 << 30;

// ANCHOR: min_name_len
/// The shortest name perf keeps: its perf-map parser skips lines whose name
/// is 2 bytes or less (`if (len + 2 >= line_len) continue;` in
/// `dso__load_perf_map`), so `f` or `ab` would silently vanish.
pub const MIN_NAME_LEN: usize = 3;
// ANCHOR_END: min_name_len

/// `text` with each control character written as its Rust escape (`\n`,
/// `\r`, `\u{1b}`), the rest as it is: a name built from a path (which
/// may hold a newline) then passes [`CodeRegion`]'s check, and a report or
/// a terminal shows it on one line without obeying escape sequences.
pub fn escape_control_chars(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Why perf would drop or misread `name`, if it would.
fn name_problem(name: &str) -> Option<String> {
    if name.len() < MIN_NAME_LEN {
        return Some(format!(
            "name is {} bytes; perf ignores names shorter than {MIN_NAME_LEN} (use a prefix, e.g. \"vm::{name}\")",
            name.len()
        ));
    }
    line_breaking_byte(name).map(|byte| format!("name contains {byte}"))
}

/// Describes the first byte of `text` that would end a perf-map line or a
/// NUL-terminated jitdump string early.
fn line_breaking_byte(text: &str) -> Option<&'static str> {
    // A byte scan: all three are ASCII, so they never occur inside a
    // multi-byte UTF-8 sequence.
    text.bytes().find_map(|b| match b {
        b'\n' => Some("a newline (it would split the perf-map line)"),
        b'\r' => Some("a carriage return (perf would keep it in the symbol)"),
        0 => Some("a NUL byte (it would end the string early)"),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_rejects_bad_regions() {
        let code = [0x90u8; 8];
        assert!(CodeRegion::new(&code, "toy::ok").validate().is_ok());
        let empty = CodeRegion::new(&[], "toy::empty");
        assert_eq!(
            empty.validate().unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        let outside = [LineEntry {
            offset: 8,
            file: "a.toy",
            line: 1,
            column: 0,
        }];
        let err = CodeRegion::new(&code, "toy::f")
            .with_lines(&outside)
            .validate()
            .unwrap_err();
        assert!(err.to_string().contains("outside"), "{err}");
        let unsorted = [
            LineEntry {
                offset: 4,
                file: "a.toy",
                line: 1,
                column: 0,
            },
            LineEntry {
                offset: 2,
                file: "a.toy",
                line: 2,
                column: 0,
            },
        ];
        let err = CodeRegion::new(&code, "toy::f")
            .with_lines(&unsorted)
            .validate()
            .unwrap_err();
        assert!(err.to_string().contains("not sorted"), "{err}");
    }

    #[test]
    fn names_perf_would_drop_or_misread_are_rejected() {
        let code = [0x90u8; 8];
        let check = |name: &str| {
            CodeRegion::new(&code, name)
                .validate()
                .map_err(|err| err.to_string())
        };
        assert!(check("abc").is_ok());
        assert!(check("toy::fib with spaces").is_ok());
        let err = check("ab").unwrap_err();
        assert_eq!(
            err,
            r#"code region "ab": name is 2 bytes; perf ignores names shorter than 3 (use a prefix, e.g. "vm::ab")"#
        );
        assert!(check("").unwrap_err().contains("name is 0 bytes"));
        assert!(check("toy::a\nb").unwrap_err().contains("newline"));
        assert!(check("toy::a\rb").unwrap_err().contains("carriage return"));
        assert!(check("toy::a\0b").unwrap_err().contains("NUL"));
        let lines = [LineEntry {
            offset: 0,
            file: "a\0.toy",
            line: 1,
            column: 0,
        }];
        let err = CodeRegion::new(&code, "toy::f")
            .with_lines(&lines)
            .validate()
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("file name \"a\\0.toy\" contains a NUL"),
            "{err}"
        );
    }
}
