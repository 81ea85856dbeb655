//! Running a loaded module in process for the fuzz targets that compare
//! tiers (`differential`, `code_limit`), included by `#[path]`.

use std::sync::Arc;

/// Runs `module` with no arguments, interpreted (`jit` `None`) or with a
/// JIT of these options, under a 64 MiB heap: (exit status, stdout,
/// stderr).
pub fn run(module: &vm::bytecode::Module, jit: Option<jit::JitOptions>) -> (i32, Vec<u8>, Vec<u8>) {
    let tier_up = jit.map(|options| {
        Arc::new(move || jit::tier_up(options.clone())) as vm::driver::TierUpFactory
    });
    let options = vm::driver::Options {
        tier_up,
        max_heap: 64 << 20,
        ..vm::driver::Options::default()
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let status = vm::driver::run_with(module, Vec::new(), &options, &mut out, &mut err);
    (status, out, err)
}
