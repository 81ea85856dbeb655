//! What a compiled region is for: the one fact that decides its signature,
//! its name ([`crate::codegen::names`]), how it is translated and where it is
//! installed once final ([`crate::codegen::pipeline`]).

use cranelift_codegen::ir::Signature;
use cranelift_codegen::isa::CallConv;
use vm::bytecode::Function;

use crate::abi;

/// The role of a region of compiled code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// A compiled function, native calling convention (see
    /// [`crate::translate`]); compiled code calls it directly.
    Native,
    /// The entry shim of a compiled function: entry ABI → native call.
    /// Installed in the entry table.
    EntryShim,
    /// The OSR variant of a function, entering at the loop header its
    /// caller names (any back-edge target); cached for the interpreter's
    /// back-edges.
    Osr,
    /// The interpreter-entry trampoline of a function still interpreted
    /// (with a profiler: perf then names interpreted time). Installed in
    /// the entry table.
    Trampoline,
}

impl Role {
    /// The signature of a region of this role for function `f`.
    pub fn signature(self, f: &Function, call_conv: CallConv) -> Signature {
        match self {
            Role::Native => abi::native_signature(f, call_conv),
            Role::EntryShim | Role::Trampoline => abi::entry_signature(call_conv),
            Role::Osr => abi::osr_signature(call_conv),
        }
    }
}
