//! `toyvm disasm --jit`: every function's Cranelift IR and its machine code,
//! with the Toy source line each instruction belongs to, for teaching.
//!
//! Machine code is decoded with `iced-x86` (pure Rust, no C toolchain, and
//! it prints Intel syntax with the real runtime addresses) from the live
//! bytes after finalize, so relocated call targets show their final
//! addresses.

use std::fmt::Write as _;

use iced_x86::{Decoder, DecoderOptions, Formatter, Instruction, IntelFormatter};
use vm::bytecode::Module;

use crate::{Jit, JitOptions};

/// The listing of one region: its IR and, once final, its code.
#[derive(Clone, Debug)]
pub struct Listing {
    name: String,
    func: u32,
    ir: String,
    address: u64,
    code: Vec<u8>,
    /// (code offset, source line), sorted.
    lines: Vec<(u32, u32)>,
}

impl Listing {
    pub(crate) fn new(name: &str, func: u32, ir: String) -> Listing {
        Listing {
            name: name.to_string(),
            func,
            ir,
            address: 0,
            code: Vec::new(),
            lines: Vec::new(),
        }
    }

    pub(crate) fn set_code(&mut self, address: u64, code: Vec<u8>, lines: Vec<(u32, u32)>) {
        self.address = address;
        self.code = code;
        self.lines = lines;
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
/// the listings.
///
/// # Errors
/// A message if the JIT or the VM cannot start.
pub fn disassemble(module: &Module) -> Result<String, String> {
    let mut sink = std::io::sink();
    let mut vm = vm::runtime::Vm::new(module, Vec::new(), 1, &mut sink)?;
    let mut jit = Jit::new(JitOptions {
        threshold: None,
        ..JitOptions::default()
    })?;
    jit.listing = Some(Vec::new());
    let n = module.functions.len();
    jit.natives = vec![None; n];
    jit.shims = vec![false; n];
    jit.failed = vec![false; n];
    let order = super::callee_first_order(module);
    jit.compile_functions(&mut vm, &order, &order);
    let mut out = String::new();
    for listing in jit.listing.take().unwrap_or_default() {
        listing.render(module, &mut out);
    }
    Ok(out)
}
