//! The runtime glue between compiled code and the VM: every signature
//! compiled code uses, the runtime helpers it calls ([`helpers`]), the heap
//! layout it reads inline ([`layout`]), entering and leaving a Toy frame
//! ([`frames`]), the native stack check ([`stack_guard`]), and the small
//! pieces of IR that only adapt one calling convention to another. This
//! component sees the VM only through `vm::abi`, and nothing else of this
//! crate.
//!
//! * The **native** signature of a Toy function, the **entry ABI** of
//!   `vm::abi` and the **OSR** signature ([`native_signature`],
//!   [`entry_signature`], [`osr_signature`]).
//! * The **imports**: the runtime helpers of [`crate::abi::helpers`] and the
//!   interpreter's entry, declared by one table ([`Imports`]) from which
//!   the symbol list, the `FuncId`s and the Cranelift signatures all come.
//!   Each row names the Rust function's type; the Cranelift signature is
//!   derived from that type ([`AbiType`]), and the compiler checks that the
//!   function has it, so the table cannot disagree with the helpers.
//! * The **entry shim** (entry ABI → native call) and the
//!   **interpreter-entry trampoline** (entry ABI → `interp_entry` with a
//!   fixed function index), built as IR by hand ([`build_entry_shim`],
//!   [`build_trampoline`]).

use cranelift_codegen::ir::{self, AbiParam, FuncRef, InstBuilder, MemFlagsData, Signature, types};
use cranelift_codegen::isa::CallConv;
use cranelift_frontend::FunctionBuilder;
use cranelift_jit::JITModule;
use cranelift_module::{FuncId, Linkage, Module};
use vm::abi::Vm;
use vm::bytecode::{Function, Type};

pub mod frames;
pub mod helpers;
pub mod layout;
pub mod stack_guard;

/// Cranelift type of a Toy value in a machine register.
pub fn clif_type(ty: &Type) -> ir::Type {
    match ty {
        Type::Float => types::F64,
        _ => types::I64,
    }
}

/// A signature of the host calling convention from its parameter and
/// return types.
pub fn signature(call_conv: CallConv, params: &[ir::Type], returns: &[ir::Type]) -> Signature {
    let mut sig = Signature::new(call_conv);
    sig.params.extend(params.iter().map(|&t| AbiParam::new(t)));
    sig.returns
        .extend(returns.iter().map(|&t| AbiParam::new(t)));
    sig
}

// ANCHOR: native_signature
/// The native signature of `f`: `(vm, base, p0, .., pn) -> (result,
/// status)` (see [`crate::translate`]).
pub fn native_signature(f: &Function, call_conv: CallConv) -> Signature {
    // `vm` and `base`, then the parameters in their machine types.
    let params: Vec<ir::Type> = [types::I64, types::I64]
        .into_iter()
        .chain(f.params.iter().map(|(_, ty)| clif_type(ty)))
        .collect();
    let ret = f.ret.as_ref().map_or(types::I64, clif_type);
    signature(call_conv, &params, &[ret, types::I32])
}
// ANCHOR_END: native_signature

/// The entry ABI `(vm, func, base) -> status` as a Cranelift signature.
pub fn entry_signature(call_conv: CallConv) -> Signature {
    signature(
        call_conv,
        &[types::I64, types::I32, types::I64],
        &[types::I32],
    )
}

/// The OSR signature `(vm, base, pc) -> status`.
pub fn osr_signature(call_conv: CallConv) -> Signature {
    signature(
        call_conv,
        &[types::I64, types::I64, types::I32],
        &[types::I32],
    )
}

/// The Cranelift type of a Rust type crossing the `extern "C"` boundary
/// (x86-64: pointers are 64 bits).
pub trait AbiType {
    /// Its Cranelift type.
    const CLIF: ir::Type;
}

impl AbiType for u32 {
    const CLIF: ir::Type = types::I32;
}
impl AbiType for u64 {
    const CLIF: ir::Type = types::I64;
}
impl AbiType for i64 {
    const CLIF: ir::Type = types::I64;
}
impl AbiType for f64 {
    const CLIF: ir::Type = types::F64;
}
impl<T: ?Sized> AbiType for *mut T {
    const CLIF: ir::Type = types::I64;
}

/// One imported function: its symbol, address and Cranelift signature.
#[derive(Clone, Debug)]
pub struct Import {
    /// The name compiled code imports it by.
    pub symbol: &'static str,
    /// The Rust function.
    pub address: *const u8,
    /// Parameter types, from the Rust function's type.
    pub params: Vec<ir::Type>,
    /// Return type, from the Rust function's type.
    pub ret: ir::Type,
}

/// Declares the import table: [`Imports`] (one `FuncId` per row), and
/// [`Imports::table`] (symbol, address and signature per row). Each row
/// `field: symbol = path(param types) -> return type;` also checks at
/// compile time that `path` has exactly that `extern "C"` type.
macro_rules! imports {
    ($( $(#[$doc:meta])* $field:ident: $symbol:literal = $($func:ident)::+ ($($param:ty),*) -> $ret:ty; )*) => {
        /// The imported functions, as declared in the JIT module.
        #[derive(Clone, Copy, Debug)]
        pub struct Imports {
            $( $(#[$doc])* pub $field: FuncId, )*
        }

        $( const _: unsafe extern "C" fn($($param),*) -> $ret = $($func)::+; )*

        impl Imports {
            /// Every import, in declaration order.
            pub fn table() -> Vec<Import> {
                vec![$( Import {
                    symbol: $symbol,
                    address: $($func)::+ as unsafe extern "C" fn($($param),*) -> $ret as *const u8,
                    params: vec![$(<$param as AbiType>::CLIF),*],
                    ret: <$ret as AbiType>::CLIF,
                }, )*]
            }

            /// Declares every import in `jit` (whose builder got the
            /// symbols of [`Imports::table`]).
            ///
            /// # Errors
            /// The module's message if a declaration fails.
            pub fn declare(jit: &mut JITModule, call_conv: CallConv) -> Result<Imports, String> {
                let mut ids = Imports::table().into_iter().map(|import| {
                    let sig = signature(call_conv, &import.params, &[import.ret]);
                    jit.declare_function(import.symbol, Linkage::Import, &sig)
                        .map_err(|e| e.to_string())
                });
                Ok(Imports {
                    $( $field: ids.next().ok_or("import table")??, )*
                })
            }
        }
    };
}

imports! {
    /// [`helpers::toy_jit_slow_op`].
    slow_op: "toy_jit_slow_op" = helpers::toy_jit_slow_op(*mut Vm<'static>, u32, *mut u64, u32) -> u32;
    /// [`helpers::toy_jit_pop`].
    pop: "toy_jit_pop" = helpers::toy_jit_pop(*mut Vm<'static>, u32, u32, u64, *mut u64) -> u32;
    /// [`helpers::toy_jit_fail`].
    fail: "toy_jit_fail" = helpers::toy_jit_fail(*mut Vm<'static>, u32, u32, u32) -> u32;
    /// [`helpers::toy_jit_index_error`].
    index_error: "toy_jit_index_error" = helpers::toy_jit_index_error(*mut Vm<'static>, u32, u32, i64, u64) -> u32;
    /// [`helpers::toy_jit_depth_exceeded`].
    depth_exceeded: "toy_jit_depth_exceeded" = helpers::toy_jit_depth_exceeded(*mut Vm<'static>) -> u32;
    /// [`helpers::toy_jit_push_trace`].
    push_trace: "toy_jit_push_trace" = helpers::toy_jit_push_trace(*mut Vm<'static>, u32, u32, u32) -> u32;
    /// [`helpers::toy_jit_str_cmp`].
    str_cmp: "toy_jit_str_cmp" = helpers::toy_jit_str_cmp(u64, u64) -> i64;
    /// [`helpers::toy_jit_str_len`].
    str_len: "toy_jit_str_len" = helpers::toy_jit_str_len(u64) -> i64;
    /// [`helpers::toy_jit_fmod`].
    fmod: "toy_jit_fmod" = helpers::toy_jit_fmod(f64, f64) -> f64;
    /// The interpreter's entry (`vm::abi::interp_entry`), for trampolines.
    interp_entry: "toy_interp_entry" = vm::abi::interp_entry(*mut Vm<'static>, u32, *mut u64) -> u32;
}

// ANCHOR: define_shim
/// Builds the entry shim of function `func` (`f`) into `b` (whose
/// signature is the entry ABI): enters the frame at `base` (see
/// [`crate::abi::frames`]; past the depth limit, records the depth error with
/// `depth_exceeded` and fails, as `interp_entry` does), loads the
/// arguments from the frame, calls the native function `native`, leaves
/// the frame and stores the result to `base[0]`. `locations`: vmprof
/// lines mode (the record's first location).
pub fn build_entry_shim(
    b: &mut FunctionBuilder<'_>,
    f: &Function,
    func: u32,
    locations: Option<&vm::abi::Locations>,
    native: FuncRef,
    depth_exceeded: FuncRef,
) {
    let entry = b.create_block();
    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    b.set_srcloc(ir::SourceLoc::default());
    let (vmv, base) = (b.block_params(entry)[0], b.block_params(entry)[2]);
    let too_deep = b.create_block();
    b.set_cold_block(too_deep);
    let room = frames::depth_room(b, vmv);
    let depth_ok = b.create_block();
    b.ins().brif(room.over, too_deep, &[], depth_ok, &[]);
    b.switch_to_block(depth_ok);
    let records = frames::frames(b, vmv);
    frames::push_record(b, vmv, records, room.depth1, base, func, locations);
    let mut args = vec![vmv, base];
    for (i, (_, ty)) in f.params.iter().enumerate() {
        let v = b
            .ins()
            .load(clif_type(ty), MemFlagsData::trusted(), base, (i * 8) as i32);
        args.push(v);
    }
    let call = b.ins().call(native, &args);
    let (result, status) = (b.inst_results(call)[0], b.inst_results(call)[1]);
    frames::pop_record(b, vmv);
    if f.ret.is_some() {
        b.ins().store(MemFlagsData::trusted(), result, base, 0);
    }
    b.ins().return_(&[status]);
    b.switch_to_block(too_deep);
    let call = b.ins().call(depth_exceeded, &[vmv]);
    let status = b.inst_results(call)[0];
    b.ins().return_(&[status]);
    b.seal_all_blocks();
}
// ANCHOR_END: define_shim

// ANCHOR: define_trampoline
/// Builds the interpreter-entry trampoline of function `func` into `b`
/// (whose signature is the entry ABI): `interp_entry(vm, func, base)`.
pub fn build_trampoline(b: &mut FunctionBuilder<'_>, interp_entry: FuncRef, func: u32) {
    let entry = b.create_block();
    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    let (vmv, base) = (b.block_params(entry)[0], b.block_params(entry)[2]);
    let fv = b.ins().iconst(types::I32, func as i64);
    // A normal call, never a tail call: the frame must stay visible.
    let call = b.ins().call(interp_entry, &[vmv, fv, base]);
    let status = b.inst_results(call)[0];
    b.ins().return_(&[status]);
    b.seal_all_blocks();
}
// ANCHOR_END: define_trampoline

#[cfg(test)]
mod tests {
    use super::*;
    use types::{F64, I32, I64};

    fn row(symbol: &str) -> Import {
        Imports::table()
            .into_iter()
            .find(|i| i.symbol == symbol)
            .unwrap_or_else(|| panic!("no import {symbol}"))
    }

    /// The signatures the table derives from the Rust types are the ones
    /// compiled code calls with (written out by hand, as the translator
    /// passes the arguments).
    #[test]
    fn each_row_has_the_signature_of_its_rust_function() {
        let expected: [(&str, &[ir::Type], ir::Type); 10] = [
            ("toy_jit_slow_op", &[I64, I32, I64, I32], I32),
            ("toy_jit_pop", &[I64, I32, I32, I64, I64], I32),
            ("toy_jit_fail", &[I64, I32, I32, I32], I32),
            ("toy_jit_index_error", &[I64, I32, I32, I64, I64], I32),
            ("toy_jit_depth_exceeded", &[I64], I32),
            ("toy_jit_push_trace", &[I64, I32, I32, I32], I32),
            ("toy_jit_str_cmp", &[I64, I64], I64),
            ("toy_jit_str_len", &[I64], I64),
            ("toy_jit_fmod", &[F64, F64], F64),
            ("toy_interp_entry", &[I64, I32, I64], I32),
        ];
        assert_eq!(Imports::table().len(), expected.len());
        for (symbol, params, ret) in expected {
            let import = row(symbol);
            assert_eq!(import.params, params, "{symbol}");
            assert_eq!(import.ret, ret, "{symbol}");
        }
    }

    #[test]
    fn each_row_points_at_its_own_function() {
        // Function addresses are not unique across codegen units, so the
        // row is checked by calling it.
        let fmod = row("toy_jit_fmod").address;
        // SAFETY: the table row's type (checked at compile time) is this.
        let fmod =
            unsafe { std::mem::transmute::<*const u8, extern "C" fn(f64, f64) -> f64>(fmod) };
        assert_eq!(fmod(7.5, 2.0), 1.5);
        let mut symbols: Vec<_> = Imports::table().iter().map(|i| i.symbol).collect();
        symbols.sort_unstable();
        symbols.dedup();
        assert_eq!(symbols.len(), Imports::table().len(), "unique symbols");
    }

    #[test]
    fn the_entry_signature_is_interp_entry_s() {
        let call_conv = CallConv::SystemV;
        let interp = row("toy_interp_entry");
        assert_eq!(
            entry_signature(call_conv),
            signature(call_conv, &interp.params, &[interp.ret])
        );
    }
}
