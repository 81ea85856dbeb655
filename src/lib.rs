//! toyvm as a library: the embedding API ([`embed`]) a host uses to run
//! many VMs in one process. The `toyvm` command line is the binary of this
//! package (`src/main.rs`); the language, the interpreter and the JIT are
//! the `vm` and `jit` crates.

pub mod embed;
