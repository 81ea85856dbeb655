//! `toyvm disasm --jit`: every function's Cranelift IR and its machine code,
//! with the Toy source line each instruction belongs to, for teaching.
//!
//! Machine code is decoded with `iced-x86` (pure Rust, no C toolchain, and
//! it prints Intel syntax with the real runtime addresses) from the live
//! bytes after finalize, so relocated call targets show their final
//! addresses.

use std::fmt::Write as _;

use iced_x86::{Decoder, DecoderOptions, Formatter, Instruction, IntelFormatter};
use perfsupport::CodeRegion;
use vm::bytecode::Module;

use crate::JitOptions;
use crate::tiering::Jit;

/// The listing of one finished region: its IR and its final code.
#[derive(Clone, Debug)]
pub struct Listing {
    pub(crate) name: String,
    func: u32,
    pub(crate) ir: String,
    address: u64,
    pub(crate) code: Vec<u8>,
    /// (code offset, source line), sorted.
    lines: Vec<(u32, u32)>,
}

impl Listing {
    /// The listing of `region` (of function `func`), whose IR was `ir`.
    pub(crate) fn new(name: &str, func: u32, ir: &str, region: &CodeRegion<'_>) -> Listing {
        Listing {
            name: name.to_string(),
            func,
            ir: ir.to_string(),
            address: region.start(),
            code: region.code.to_vec(),
            lines: region.lines.iter().map(|e| (e.offset, e.line)).collect(),
        }
    }

    fn render(&self, module: &Module, out: &mut String) {
        let f = &module.functions[self.func as usize];
        let source: Vec<&str> = module.source.lines().collect();
        let _ = writeln!(
            out,
            "== {} ({} bytes at {:#x}) ==",
            self.name,
            self.code.len(),
            self.address
        );
        let _ = writeln!(
            out,
            "-- Cranelift IR (srcloc = bytecode index of `{}`)",
            f.name
        );
        out.push_str(&self.ir);
        let _ = writeln!(out, "-- machine code");
        let mut decoder = Decoder::with_ip(64, &self.code, self.address, DecoderOptions::NONE);
        let mut formatter = IntelFormatter::new();
        let mut insn = Instruction::default();
        let mut text = String::new();
        let mut row = 0;
        let mut shown_line = None;
        while decoder.can_decode() {
            decoder.decode_out(&mut insn);
            let offset = (insn.ip() - self.address) as u32;
            while row + 1 < self.lines.len() && self.lines[row + 1].0 <= offset {
                row += 1;
            }
            if let Some(&(_, line)) = self.lines.get(row)
                && shown_line != Some(line)
            {
                shown_line = Some(line);
                let src = source.get(line as usize - 1).map_or("", |s| s.trim());
                let _ = writeln!(out, "  ; {}:{line}: {src}", module.path);
            }
            text.clear();
            formatter.format(&insn, &mut text);
            let _ = writeln!(out, "  {:#x} +{offset:<4} {text}", insn.ip());
        }
        out.push('\n');
    }
}

/// Compiles every function of `module` (and its entry shim) and renders
/// the listings; compile warnings go to `diagnostics`.
///
/// # Errors
/// A message if the JIT or the VM cannot start.
pub fn disassemble(
    module: &Module,
    diagnostics: &mut (dyn std::io::Write + Send),
) -> Result<String, String> {
    let mut sink = std::io::sink();
    let mut vm = vm::runtime::Vm::new(module, Vec::new(), 1, &mut sink)?;
    vm.set_diagnostics(diagnostics);
    let mut jit = Jit::new(JitOptions {
        threshold: None,
        ..JitOptions::default()
    })?;
    let listings = jit.compile_all_for_listing(&mut vm);
    let mut out = String::new();
    for listing in listings {
        listing.render(module, &mut out);
    }
    Ok(out)
}
