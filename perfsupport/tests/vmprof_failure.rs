//! Failures are reported, never panics: unwritable paths, a full disk, and
//! system calls interrupted by SIGPROF.

mod vmprof_support;

use std::io::Read;
use std::os::fd::AsRawFd;
use std::sync::mpsc;
use std::time::Duration;

use perfsupport::vmprof::{EnableOptions, VmprofError, disable, enable, enable_path, is_enabled};
use vmprof_support::*;

#[test]
fn enable_on_an_unwritable_path_is_an_error() {
    let _serial = serial();
    for path in [
        "/nonexistent-dir/x/profile.prof",
        "/proc/version/profile.prof",
    ] {
        let err = enable_path(path.as_ref(), &EnableOptions::new("toyvm"))
            .expect_err("cannot create a profile there");
        assert!(matches!(err, VmprofError::Io { .. }), "{path}: {err}");
        assert!(err.to_string().contains("profile file"), "{err}");
        assert!(!is_enabled());
    }
    // A directory is not a file either.
    let dir = std::env::temp_dir();
    assert!(enable_path(&dir, &EnableOptions::new("toyvm")).is_err());
    assert!(!is_enabled());
}

#[test]
fn enable_refuses_a_symlink_and_replaces_a_stale_profile_of_ours() {
    let _serial = serial();
    let target = fresh_path("symlink-target");
    std::fs::write(&target, b"precious").unwrap();
    let link = fresh_path("symlink.prof");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let err = enable_path(&link, &EnableOptions::new("toyvm")).expect_err("symlink refused");
    assert!(err.to_string().contains("symbolic link"), "{err}");
    assert_eq!(std::fs::read(&target).unwrap(), b"precious");
    assert!(!is_enabled());
    std::fs::remove_file(&link).unwrap();
    // A leftover regular file of ours is replaced by a complete profile.
    enable_path(&target, &EnableOptions::new("toyvm")).expect("replace stale file");
    disable().expect("disable");
    let profile = perfsupport::vmprof::read_profile(&target).expect("a profile now");
    assert!(profile.has_trailer);
    std::fs::remove_file(&target).unwrap();
}

#[test]
fn a_full_disk_is_reported_at_disable() {
    let _serial = serial();
    let full = std::fs::File::options()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full");
    enable(full, Duration::from_millis(1)).expect("enable");
    run_nested(workload(), Duration::from_millis(50));
    let err = disable().expect_err("writing to /dev/full fails");
    match &err {
        VmprofError::Io { source, .. } => {
            assert_eq!(source.raw_os_error(), Some(libc::ENOSPC), "{err}")
        }
        other => panic!("unexpected error {other}"),
    }
    assert!(err.to_string().contains("writing the profile"), "{err}");
    // The profiler is usable again.
    assert!(!is_enabled());
    let path = fresh_path("after-full.prof");
    enable_path(&path, &EnableOptions::new("toyvm")).expect("enable again");
    disable().expect("disable");
    std::fs::remove_file(&path).unwrap();
}

/// A blocking `read(2)` interrupted by SIGPROF is restarted (SA_RESTART),
/// not failed with EINTR: the VM's own I/O keeps working while profiling.
#[test]
fn blocking_system_calls_are_restarted_not_interrupted() {
    let _serial = serial();
    let path = fresh_path("restart.prof");
    enable_path(&path, &EnableOptions::new("toyvm")).expect("enable");
    let (mut reader, mut writer) = std::io::pipe().expect("pipe");
    let (tid_tx, tid_rx) = mpsc::channel();
    let blocked = std::thread::spawn(move || {
        // SAFETY: pthread_self has no preconditions.
        tid_tx.send(unsafe { libc::pthread_self() }).unwrap();
        let mut byte = [0u8; 1];
        // SAFETY: `byte` is a valid 1-byte buffer; the fd is open. A raw
        // read, because std's `read` does not retry EINTR either, but we
        // want to see exactly what the kernel returns.
        let n = unsafe { libc::read(reader.as_raw_fd(), byte.as_mut_ptr().cast(), 1) };
        let errno = std::io::Error::last_os_error();
        let rest = reader.read(&mut [0u8; 8]).unwrap_or(0);
        (n, errno, byte[0], rest)
    });
    let thread = tid_rx.recv().unwrap();
    std::thread::sleep(Duration::from_millis(20));
    for _ in 0..50 {
        // SAFETY: the thread is alive: it cannot return before we write.
        assert_eq!(unsafe { libc::pthread_kill(thread, libc::SIGPROF) }, 0);
        std::thread::sleep(Duration::from_millis(1));
    }
    std::io::Write::write_all(&mut writer, b"x").unwrap();
    drop(writer);
    let (n, errno, byte, _) = blocked.join().unwrap();
    assert_eq!(n, 1, "read failed with {errno}");
    assert_eq!(byte, b'x');
    disable().expect("disable");
    std::fs::remove_file(&path).unwrap();
}
