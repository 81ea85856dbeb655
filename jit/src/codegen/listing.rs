//! What `disasm --jit` shows of a finished region: its IR as Cranelift
//! printed it, its final bytes and address, and its line table. The
//! pipeline makes one per region when asked to keep IR
//! ([`super::pipeline::CodeGen::keep_ir`]); `crate::disasm` renders them.

use perfsupport::CodeRegion;

/// The listing of one finished region: its IR and its final code.
#[derive(Clone, Debug)]
pub struct Listing {
    /// The region's name ([`super::names::region_name`]).
    pub name: String,
    /// The function it was compiled from.
    pub func: u32,
    /// Its Cranelift IR.
    pub ir: String,
    /// Where its code starts.
    pub address: u64,
    /// Its machine code, as finalized.
    pub code: Vec<u8>,
    /// (code offset, source line), sorted.
    pub lines: Vec<(u32, u32)>,
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
}
