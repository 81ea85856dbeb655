//! toyvm's Cranelift tier.
//!
//! Empty until the JIT issue lands: hot functions will be compiled from
//! their typed bytecode to Cranelift IR, and interpreted functions will get
//! per-function interpreter-entry trampolines so perf sees them by name.
