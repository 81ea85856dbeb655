//! `perfsupport.h` is portable C99: a program calling every inline
//! function (and including the header twice) builds and runs with gcc and
//! clang in strict C99 and C11 modes and with tcc, the small compiler a
//! JIT that compiles C at run time would use (it has no `__atomic`
//! builtins).

mod support;

use support::{compile_with, program, repo_root, run_ok, scratch};

#[test]
fn every_inline_function_builds_and_runs_with_gcc_clang_and_tcc() {
    let source = repo_root().join("perfsupport-capi/tests/c/portable_header.c");
    let dir = scratch("portable");
    let compilers: [(&str, &[&str]); 5] = [
        ("gcc", &["-std=c99", "-pedantic", "-Wextra"]),
        ("gcc", &["-std=c11", "-pedantic", "-Wextra"]),
        ("clang", &["-std=c99", "-pedantic", "-Wextra"]),
        ("clang", &["-std=c11", "-pedantic", "-Wextra"]),
        ("tcc", &[]),
    ];
    for (index, (compiler, flags)) in compilers.into_iter().enumerate() {
        let out = dir.path().join(format!("portable-{index}"));
        let Some(binary) = compile_with(compiler, flags, std::slice::from_ref(&source), &out)
        else {
            continue;
        };
        let output = run_ok(&mut program(&binary));
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert_eq!(stdout, "portable: ok\n", "{compiler} {flags:?}");
    }
}
