//! The promises `perfsupport.h` makes next to each call, checked by a C
//! program (tests/c/header_contract.c): error codes of conflicting opens,
//! the default jitdump directory, the smallest regions, what is copied.

mod support;

use support::{compile, pkg_config, program, repo_root, run_ok, scratch};

#[test]
fn the_header_says_what_the_library_does() {
    let source = repo_root().join("perfsupport-capi/tests/c/header_contract.c");
    let dir = scratch("contract");
    let link = pkg_config(&["--libs"]);
    let Some(binary) = compile(&[source], &dir.path().join("header_contract"), &link) else {
        return;
    };
    // $JITDUMPDIR set, set but empty (= unset), and unset: /tmp.
    let jitdump_dir = dir.path().join("dumps");
    std::fs::create_dir_all(&jitdump_dir).unwrap();
    for env in [Some(jitdump_dir.as_os_str()), Some("".as_ref()), None] {
        let mut command = program(&binary);
        command.current_dir(dir.path());
        match env {
            Some(value) => command.env("JITDUMPDIR", value),
            None => command.env_remove("JITDUMPDIR"),
        };
        let output = run_ok(&mut command);
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            stdout.ends_with("0 failed\n"),
            "JITDUMPDIR={env:?}:\n{stdout}"
        );
        let expected = if env.is_some_and(|v| !v.is_empty()) {
            "the dump is in $JITDUMPDIR"
        } else {
            "the dump is in /tmp"
        };
        assert!(stdout.contains(expected), "{stdout}");
    }
    // Nothing was left in the current directory (the old default).
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n.to_string_lossy().starts_with("jit-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}
