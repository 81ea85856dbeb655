//! `toyvm jitdump FILE`: a jitdump decoded as text, record by record, with
//! the byte layouts of the jitdump chapter (offsets, sizes, padding, the
//! unwind payload in hex). `--redact` replaces what differs from run to run
//! (pids, thread ids, timestamps, addresses) by placeholders, so two runs
//! can be compared; the book's listing is made that way.

use perfsupport::jitdump::reader::{self, Record};
use std::fmt::Write as _;
use std::path::PathBuf;

/// Arguments of `toyvm jitdump`.
#[derive(clap::Args)]
pub struct JitdumpArgs {
    /// Replace pids, thread ids, timestamps and addresses by PID, TID,
    /// TIME and ADDR (line-table rows as ADDR+offset), and show the code
    /// bytes of the first region only (later ones may hold addresses).
    #[arg(long)]
    redact: bool,
    /// The dump (`jit-PID.dump`).
    file: PathBuf,
}

impl JitdumpArgs {
    /// What the command reads (see `crate::files`).
    pub fn files(&self) -> crate::files::Files {
        crate::files::Files {
            inputs: vec![self.file.clone()],
            outputs: Vec::new(),
        }
    }
}

/// Runs `toyvm jitdump`.
pub fn run(args: JitdumpArgs) -> Result<u8, ()> {
    let bytes = std::fs::read(&args.file)
        .map_err(|e| say!("error: cannot read {}: {e}", args.file.display()))?;
    let text = decode(&bytes, args.redact).map_err(|e| {
        say!(
            "error: {}: not a readable jitdump: {e}",
            args.file.display()
        )
    })?;
    crate::print_stdout(&text)
}

/// The text of a dump (see the module docs).
pub fn decode(bytes: &[u8], redact: bool) -> Result<String, reader::ReadError> {
    let (header, records) = reader::read(bytes)?;
    let shown = |value: u64, placeholder: &str| {
        if redact {
            placeholder.to_string()
        } else {
            value.to_string()
        }
    };
    let address = |value: u64| {
        if redact {
            "ADDR".to_string()
        } else {
            format!("{value:#x}")
        }
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "file header: magic={:#x} version={} total_size={} elf_mach={} pad1={} pid={} timestamp={} flags={}",
        header.magic,
        header.version,
        header.total_size,
        header.elf_mach,
        header.pad1,
        shown(u64::from(header.pid), "PID"),
        shown(header.timestamp, "TIME"),
        header.flags
    );
    for at in &records {
        let (kind, id) = at.record.kind();
        let _ = writeln!(
            out,
            "\n@{:#06x} {kind} (id {id}) total_size={} timestamp={}",
            at.offset,
            at.total_size,
            shown(at.timestamp, "TIME")
        );
        match &at.record {
            Record::DebugInfo {
                code_addr,
                entries,
                padding,
            } => {
                let _ = writeln!(
                    out,
                    "  code_addr={} nr_entry={}",
                    address(*code_addr),
                    entries.len()
                );
                for entry in entries {
                    let place = if redact {
                        format!("ADDR+{:#x}", entry.addr.wrapping_sub(*code_addr))
                    } else {
                        format!("{:#x}", entry.addr)
                    };
                    let _ = writeln!(
                        out,
                        "  entry: addr={place} line={} discrim={} file={:?}",
                        entry.line,
                        entry.discrim,
                        String::from_utf8_lossy(entry.file)
                    );
                }
                let _ = writeln!(out, "  padding to 8: {padding} byte(s)");
            }
            Record::UnwindingInfo {
                mapped_size,
                eh_frame,
                eh_frame_hdr,
                padding,
            } => {
                let _ = writeln!(
                    out,
                    "  unwind_data_size={} eh_frame_hdr_size={} mapped_size={mapped_size}",
                    eh_frame.len() + eh_frame_hdr.len(),
                    eh_frame_hdr.len()
                );
                hex(&mut out, ".eh_frame", eh_frame);
                hex(&mut out, ".eh_frame_hdr", eh_frame_hdr);
                let _ = writeln!(out, "  padding to 8: {padding} byte(s)");
            }
            Record::CodeLoad {
                pid,
                tid,
                vma,
                code_addr,
                code_index,
                name,
                code,
            } => {
                let _ = writeln!(
                    out,
                    "  pid={} tid={} vma={} code_addr={} code_size={} code_index={code_index} name={:?}",
                    shown(u64::from(*pid), "PID"),
                    shown(u64::from(*tid), "TID"),
                    address(*vma),
                    address(*code_addr),
                    code.len(),
                    String::from_utf8_lossy(name)
                );
                let bytes = if redact && *code_index != 0 {
                    "...".to_string()
                } else {
                    code.iter()
                        .map(|b| format!("{b:02x}"))
                        .collect::<Vec<_>>()
                        .join(" ")
                };
                let _ = writeln!(
                    out,
                    "  code ({} bytes, exactly as they run): {bytes}",
                    code.len()
                );
                let _ = writeln!(
                    out,
                    "  56 + {} + 1 + {} = {} (no padding)",
                    name.len(),
                    code.len(),
                    56 + name.len() + 1 + code.len()
                );
            }
            Record::Close | Record::Other { .. } => {}
        }
    }
    Ok(out)
}

/// `bytes` as rows of 16, each with its offset.
fn hex(out: &mut String, label: &str, bytes: &[u8]) {
    let _ = writeln!(out, "  {label} ({} bytes):", bytes.len());
    for (row, chunk) in bytes.chunks(16).enumerate() {
        let text: Vec<String> = chunk.iter().map(|b| format!("{b:02x}")).collect();
        let _ = writeln!(out, "    +{:#04x}  {}", row * 16, text.join(" "));
    }
}
