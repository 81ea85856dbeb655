//! The C API from C: return codes and messages (linked statically), and the
//! SIGPROF handler's safety when the library is loaded with `dlopen`.

mod support;

use std::time::{Duration, Instant};
use support::{
    compile, library_dir, pkg_config, program, repo_root, run_ok, run_ok_without_map, scratch,
};

#[test]
fn bad_calls_return_codes_and_messages_from_the_static_library() {
    let dir = scratch("errors");
    let mut link = vec![library_dir().join("libperfsupport.a").display().to_string()];
    link.extend(
        pkg_config(&["--static", "--libs-only-l"])
            .into_iter()
            .filter(|f| f != "-lperfsupport"),
    );
    let source = repo_root().join("perfsupport-capi/tests/c/api_errors.c");
    let Some(binary) = compile(&[source], &dir.path().join("api_errors"), &link) else {
        return;
    };
    let output = run_ok_without_map(program(&binary).current_dir(dir.path()));
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.ends_with("0 failed\n"), "{text}");
    assert!(!text.contains("FAIL"), "{text}");
    // Not linked against the shared library: the dynamic loader lists what
    // it loads (what `ldd` does, and it works under an emulator too).
    let loaded = run_ok(program(&binary).env("LD_TRACE_LOADED_OBJECTS", "1"));
    let loaded = String::from_utf8_lossy(&loaded.stdout);
    assert!(loaded.contains("libc.so"), "{loaded}");
    assert!(!loaded.contains("libperfsupport.so"), "{loaded}");
}

#[test]
fn sampling_a_dlopened_library_never_touches_unattached_threads() {
    let dir = scratch("dlopen");
    let source = repo_root().join("perfsupport-capi/tests/c/dlopen_threads.c");
    let link = ["-ldl".to_string(), "-lpthread".to_string()];
    let Some(binary) = compile(&[source], &dir.path().join("dlopen_threads"), &link) else {
        return;
    };
    let profile = dir.path().join("dl.prof");
    let mut child = program(&binary)
        .arg(library_dir().join("libperfsupport.so"))
        .arg(&profile)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run dlopen_threads");
    // A deadlock in the handler would hang the child: give it a minute.
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("dlopen_threads hung: a SIGPROF handler deadlocked");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let output = child.wait_with_output().expect("output");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(status.success(), "dlopen_threads failed ({status}): {text}");
    let samples: u64 = text
        .split_whitespace()
        .find_map(|w| w.strip_prefix("samples="))
        .and_then(|n| n.parse().ok())
        .expect("samples=N");
    // 0.2 s of CPU at 50 us: thousands of intervals; the sampled thread
    // must be in the profile.
    assert!(samples > 0, "{text}");
    let read = ps::vmprof::read_profile(&profile).expect("our reader reads it");
    assert!(
        read.samples.iter().all(|s| s.stack.len() == 1),
        "only the attached thread's one frame is sampled"
    );
}
