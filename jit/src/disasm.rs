//! `toyvm disasm --jit`: every function's Cranelift IR and its machine code,
//! with the Toy source line each instruction belongs to, for teaching.
//!
//! It drives the `Compiler` directly, with no policy and no profilers:
//! every function and its entry shim, callees first, in one batch, keeping
//! each region's `Listing`. Machine code is decoded from the live bytes
//! after finalize, so relocated call targets show their final addresses,
//! by a pure-Rust decoder (no C toolchain) for the host's architecture:
//! `iced-x86` on x86-64 (Intel syntax), `yaxpeax-arm` on aarch64 (ARM's
//! syntax; branch targets as `$+offset`). On any other host the listing
//! shows the bytes, four per line, and says it cannot decode them.

use std::fmt::Write as _;

use vm::abi::Vm;
use vm::bytecode::Module;

use crate::codegen::listing::Listing;
use crate::compiler::{Action, Compiler, Request};
use crate::options::JitOptions;
use crate::policy::callgraph;
use crate::translate::limits;

/// Compiles every function of `module` (and its entry shim) and renders
/// the listings; compile warnings go to `diagnostics`.
///
/// # Errors
/// A message if the JIT or the VM cannot start.
pub fn disassemble(
    module: &Module,
    diagnostics: &mut (dyn std::io::Write + Send),
) -> Result<String, String> {
    let mut out = String::new();
    for listing in listings(module, diagnostics, None)? {
        render(&listing, module, &mut out);
    }
    Ok(out)
}

/// The listings of every region that compiled (`fail`: test-only, the
/// region whose compile fails).
pub(crate) fn listings(
    module: &Module,
    diagnostics: &mut (dyn std::io::Write + Send),
    fail: Option<String>,
) -> Result<Vec<Listing>, String> {
    let mut sink = std::io::sink();
    // The compiler reads the program (constants included) from a VM.
    let vm = Vm::new(module, Vec::new(), 1, &mut sink)?;
    let (mut compiler, _) = Compiler::new(&JitOptions::default())?;
    #[cfg(test)]
    compiler.fail_region(fail);
    #[cfg(not(test))]
    let _ = fail;
    compiler.reset(module.functions.len());
    compiler.keep_listings();
    let order = callgraph::callee_first_order(module);
    // The compiler leaves these out quietly (the run's `--jit-stats` says
    // so); a listing that only lacks them would look complete.
    for &func in &order {
        if let Err(over) = limits::check_budget(module, func) {
            let _ = writeln!(
                diagnostics,
                "toyvm: disasm --jit: {} is not shown: {} instructions, over the compile budget of {} (it always runs interpreted)",
                module.functions[func as usize].name, over.ops, over.budget
            );
        }
    }
    let request = Request::Compile {
        funcs: order.clone(),
        entered: order,
    };
    let mut actions = Vec::new();
    compiler.run(&*vm, &request, &mut actions);
    for action in actions {
        if let Action::Warn(line) = action {
            let _ = writeln!(diagnostics, "{line}");
        }
    }
    Ok(compiler.listings.take().unwrap_or_default())
}

/// Writes `listing` as `disasm --jit` shows it: a header, the IR, and the
/// machine code with each source line before the instructions it owns.
fn render(listing: &Listing, module: &Module, out: &mut String) {
    let f = &module.functions[listing.func as usize];
    let source: Vec<&str> = module.source.lines().collect();
    let _ = writeln!(
        out,
        "== {} ({} bytes at {:#x}) ==",
        listing.name,
        listing.code.len(),
        listing.address
    );
    let _ = writeln!(
        out,
        "-- Cranelift IR (srcloc = bytecode index of `{}`)",
        f.name
    );
    out.push_str(&listing.ir);
    let _ = writeln!(out, "-- machine code");
    let mut row = 0;
    let mut shown_line = None;
    for (offset, text) in decode(&listing.code, listing.address) {
        while row + 1 < listing.lines.len() && listing.lines[row + 1].0 <= offset {
            row += 1;
        }
        if let Some(&(_, line)) = listing.lines.get(row)
            && shown_line != Some(line)
        {
            shown_line = Some(line);
            let src = source.get(line as usize - 1).map_or("", |s| s.trim());
            let _ = writeln!(out, "  ; {}:{line}: {src}", module.path);
        }
        let ip = listing.address + u64::from(offset);
        let _ = writeln!(out, "  {ip:#x} +{offset:<4} {text}");
    }
    out.push('\n');
}

/// Each instruction of `code` (which runs at `address`): its offset and
/// its text.
#[cfg(target_arch = "x86_64")]
fn decode(code: &[u8], address: u64) -> Vec<(u32, String)> {
    use iced_x86::{Decoder, DecoderOptions, Formatter, Instruction, IntelFormatter};
    let mut decoder = Decoder::with_ip(64, code, address, DecoderOptions::NONE);
    let region = address..address + code.len() as u64;
    let mut formatter = IntelFormatter::with_options(Some(Box::new(InRegion(region))), None);
    let mut insn = Instruction::default();
    let mut out = Vec::new();
    while decoder.can_decode() {
        decoder.decode_out(&mut insn);
        let mut text = String::new();
        formatter.format(&insn, &mut text);
        out.push(((insn.ip() - address) as u32, text));
    }
    out
}

/// Each instruction of `code`: its offset and its text (a word that is not
/// an instruction, such as a constant, as `.word`).
#[cfg(target_arch = "aarch64")]
fn decode(code: &[u8], _address: u64) -> Vec<(u32, String)> {
    use yaxpeax_arch::{Arch, Decoder, U8Reader};
    use yaxpeax_arm::armv8::a64::ARMv8;
    let decoder = <ARMv8 as Arch>::Decoder::default();
    (code.chunks(4).enumerate())
        .map(|(i, word)| {
            let offset = i as u64 * 4;
            let text = match decoder.decode(&mut U8Reader::new(word)) {
                Ok(insn) => in_region(&insn.to_string(), offset, code.len() as u64),
                Err(_) => {
                    let hex: Vec<String> = word.iter().rev().map(|b| format!("{b:02x}")).collect();
                    format!(".word 0x{}", hex.concat())
                }
            };
            (offset as u32, text)
        })
        .collect()
}

/// A branch target relative to the instruction (yaxpeax's `$+0x10`,
/// `$-0x8`) inside the region, named by its offset (`<+N>`) as on x86-64.
#[cfg(target_arch = "aarch64")]
fn in_region(text: &str, offset: u64, len: u64) -> String {
    let Some(at) = text.find("$+0x").or_else(|| text.find("$-0x")) else {
        return text.to_string();
    };
    let digits: String = text[at + 4..]
        .chars()
        .take_while(char::is_ascii_hexdigit)
        .collect();
    let Ok(delta) = u64::from_str_radix(&digits, 16) else {
        return text.to_string();
    };
    let target = match &text[at + 1..at + 2] {
        "+" => offset.checked_add(delta),
        _ => offset.checked_sub(delta),
    };
    match target {
        Some(t) if t < len => {
            format!("{}<+{t}>{}", &text[..at], &text[at + 4 + digits.len()..])
        }
        _ => text.to_string(),
    }
}

/// The bytes, four per line: no decoder for this architecture.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn decode(code: &[u8], _address: u64) -> Vec<(u32, String)> {
    (code.chunks(4).enumerate())
        .map(|(i, bytes)| {
            let hex: Vec<String> = bytes.iter().map(|b| format!("{b:02x}")).collect();
            let text = format!(
                ".byte {} (no disassembler for this architecture)",
                hex.join(" ")
            );
            (i as u32 * 4, text)
        })
        .collect()
}

/// Names a jump or call target inside the region by its offset (`<+40>`,
/// as the listing's offset column counts), so a listing reads the same on
/// every run; targets elsewhere keep their runtime address.
#[cfg(target_arch = "x86_64")]
struct InRegion(std::ops::Range<u64>);

#[cfg(target_arch = "x86_64")]
impl iced_x86::SymbolResolver for InRegion {
    fn symbol(
        &mut self,
        _instruction: &iced_x86::Instruction,
        _operand: u32,
        _instruction_operand: Option<u32>,
        address: u64,
        _address_size: u32,
    ) -> Option<iced_x86::SymbolResult<'_>> {
        self.0.contains(&address).then(|| {
            iced_x86::SymbolResult::with_string(address, format!("<+{}>", address - self.0.start))
        })
    }
}

#[cfg(test)]
mod tests {
    const PROGRAM: &str = "fn f1(x: int) -> int { let y = 0; for i in 0..x { y = y + i; } return y; }\n\
        fn f2(x: int) -> int { let y = 1; for i in 0..x { y = y * 2; } return y; }\n\
        fn f3(x: int) -> int { let y = 2; for i in 0..x { y = y - i; } return y; }\n\
        print(f1(3) + f2(3) + f3(3));\n";

    /// `disasm --jit`'s listings as (region name, IR, code size), with the
    /// compile of region `fail` failing.
    fn listed(fail: Option<&str>) -> Vec<(String, String, usize)> {
        let module = vm::driver::load("t.toy", PROGRAM.as_bytes()).expect("compiles");
        let mut diagnostics = Vec::new();
        let listings =
            super::listings(&module, &mut diagnostics, fail.map(String::from)).expect("JIT starts");
        let warned = String::from_utf8_lossy(&diagnostics);
        assert_eq!(
            warned.contains("injected failure"),
            fail.is_some(),
            "{warned}"
        );
        // The IR without its first line, which names the region by its
        // `FuncId`, and with the `FuncId`s of called functions (`u0:N`)
        // blanked: ids are numbered in declaration order, so they shift
        // when a compile fails.
        let body = |ir: &str| {
            let body = ir.split_once('\n').map_or("", |(_, b)| b);
            let mut out = String::with_capacity(body.len());
            let mut rest = body;
            while let Some(at) = rest.find("u0:") {
                out.push_str(&rest[..at + 3]);
                out.push('_');
                rest = rest[at + 3..].trim_start_matches(|c: char| c.is_ascii_digit());
            }
            out.push_str(rest);
            out
        };
        (listings.into_iter())
            .map(|l| (l.name, body(&l.ir), l.code.len()))
            .collect()
    }

    #[test]
    fn jumps_inside_a_region_show_its_offset() {
        let module = vm::driver::load("t.toy", PROGRAM.as_bytes()).expect("compiles");
        let mut diagnostics = Vec::new();
        let listings = super::listings(&module, &mut diagnostics, None).expect("JIT starts");
        let f1 = (listings.iter())
            .find(|l| l.name.starts_with("toy:jit:f1:"))
            .expect("f1 compiled");
        let mut out = String::new();
        super::render(f1, &module, &mut out);
        // f1's loop jumps back to its header: a jump to `<+N>`, N inside it.
        let targets: Vec<u64> = (out.lines())
            .filter_map(|l| l.split_once("<+")?.1.split_once('>')?.0.parse().ok())
            .collect();
        assert!(!targets.is_empty(), "{out}");
        assert!(targets.iter().all(|&t| t < f1.code.len() as u64), "{out}");
        let absolute = format!("{:X}h", f1.address + targets[0]);
        assert!(!out.contains(&absolute), "{out}");
    }

    /// Every region, leaves included, starts by pushing a frame record
    /// (`preserve_frame_pointers`), so frame-pointer unwinders (perf's
    /// `--call-graph fp`, eBPF profilers) walk through compiled code; and on
    /// aarch64 no return address is signed (no PAC) and there are no BTI
    /// landing pads: an unwinder reads `x30` as a plain address.
    #[test]
    fn every_region_keeps_a_frame_record_and_plain_return_addresses() {
        let leaf = "fn triple(x: int) -> int { return x * 3 + 1; }\nprint(triple(13));\n";
        let module = vm::driver::load("leaf.toy", leaf.as_bytes()).expect("compiles");
        let mut diagnostics = Vec::new();
        let listings = super::listings(&module, &mut diagnostics, None).expect("JIT starts");
        assert!(
            listings
                .iter()
                .any(|l| l.name.starts_with("toy:jit:triple:")),
            "the leaf was compiled"
        );
        let prologue: [&str; 2] = if cfg!(target_arch = "aarch64") {
            ["stp x29, x30, [sp, #-0x10]!", "mov x29, sp"]
        } else {
            ["push rbp", "mov rbp,rsp"]
        };
        for listing in &listings {
            let mut out = String::new();
            super::render(listing, &module, &mut out);
            let code: Vec<&str> = (out.lines())
                .filter_map(|l| l.trim_start().strip_prefix("0x"))
                .map(|l| l.splitn(3, char::is_whitespace).nth(2).unwrap_or("").trim())
                .collect();
            assert_eq!(code[..2], prologue, "{}:\n{out}", listing.name);
            let signed = ["paci", "auti", "retaa", "retab", "bti"];
            assert!(
                !code.iter().any(|i| signed.iter().any(|s| i.starts_with(s))),
                "{}: signed return addresses or BTI:\n{out}",
                listing.name
            );
        }
    }

    #[test]
    fn listings_pair_with_their_own_regions_after_a_failed_compile() {
        let all = listed(None);
        let failed = "toy:jit:f2:t.toy:2";
        assert!(all.iter().any(|(name, _, _)| name == failed), "{all:?}");
        let with_failure = listed(Some(failed));
        // The failed function has neither its native function nor its shim.
        let expected: Vec<_> = (all.iter())
            .filter(|(name, _, _)| !name.contains(":f2:"))
            .cloned()
            .collect();
        assert_eq!(with_failure.len(), expected.len());
        for (got, want) in with_failure.iter().zip(&expected) {
            assert_eq!(got.0, want.0);
            // `<main>` calls f2: through the entry table once f2 failed,
            // so its own code differs. Every other region is unchanged.
            if got.0.contains(":<main>:") {
                continue;
            }
            assert_eq!(got.1, want.1, "IR of {}", got.0);
            assert_eq!(got.2, want.2, "code of {}", got.0);
        }
    }
}
