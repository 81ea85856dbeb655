//! The names compiled regions carry in perf maps, jitdump objects and
//! `disasm --jit` listings. One scheme, for every kind of region:
//!
//! | region | name |
//! |---|---|
//! | compiled function (native variant) | `toy:jit:<function>:<script>:<line>` |
//! | its entry shim (entry ABI → native call) | `toy:jit-entry:<function>:<script>:<line>` |
//! | OSR variant (enters at any loop header) | `toy:jit-osr:<function>:<script>:<line>` |
//! | interpreter-entry trampoline (`--perf`, `--perf-jitdump`) | `toy:interp:<function>:<script>:<line>` |
//!
//! `<function>` is the Toy name (`<main>` for the script body), `<script>`
//! the script path as given on the command line, and `<line>` the line of
//! the `fn` keyword (1 for `<main>`). Names are plain text with no spaces
//! unless the path has some; perf's map parser reads the rest of the line,
//! so spaces are fine. A control character in the path (a newline would
//! split the perf-map line, and perfsupport refuses such a name) is
//! written as its Rust escape: `a\nb.toy` for a path with a newline.

use vm::bytecode::Module;

use crate::codegen::role::Role;

// ANCHOR: region_name
/// The name of the region of function `func` with role `role` (see the
/// module docs).
pub fn region_name(module: &Module, func: u32, role: Role) -> String {
    let f = &module.functions[func as usize];
    let prefix = match role {
        Role::Native => "toy:jit",
        Role::EntryShim => "toy:jit-entry",
        Role::Osr => "toy:jit-osr",
        Role::Trampoline => "toy:interp",
    };
    let script = perfsupport::region::escape_control_chars(&module.path);
    format!("{prefix}:{}:{script}:{}", f.name, f.span.line)
}
// ANCHOR_END: region_name
