//! Exports the GDB JIT interface symbols (defined in `perfsupport::gdb_jit`)
//! from the `toyvm` executable's dynamic symbol table, so that a shared
//! library with its own JIT (LLVM, wasmtime, another VM) binds to the same
//! `__jit_debug_descriptor` by ELF symbol interposition: one list of JIT
//! objects per process, as debuggers expect.
fn main() {
    // Without this line Cargo runs the script again, and so rebuilds the
    // crate and every test of it, whenever any file of the package changes
    // (a page of the book, a benchmark result).
    println!("cargo:rerun-if-changed=build.rs");
    let target_os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if target_os == "linux" {
        for symbol in ["__jit_debug_descriptor", "__jit_debug_register_code"] {
            println!("cargo:rustc-link-arg-bins=-Wl,--export-dynamic-symbol={symbol}");
        }
    }
}
