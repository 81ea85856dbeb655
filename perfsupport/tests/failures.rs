//! Failure injection: every I/O problem is an error the VM can print once;
//! nothing panics, nothing is written through a symlink.

mod common;

use common::scratch_dir;
use perfsupport::unwind::CallFrameInfo;
use perfsupport::{CodeRegion, JitDump, LineEntry, PerfMap, ProfilerSink, Profilers};
use std::io::{self, ErrorKind};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

const CODE: [u8; 8] = [0x55, 0x48, 0x89, 0xe5, 0x90, 0x5d, 0xc3, 0xcc];

fn region() -> CodeRegion<'static> {
    CodeRegion::new(&CODE, "toy::f")
}

fn dev_full() -> std::fs::File {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/full")
        .expect("open /dev/full")
}

#[test]
fn missing_directory() {
    let dir = Path::new("/nonexistent-psupport/deeper");
    let err = PerfMap::in_dir(dir).register(&[region()]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert!(
        err.to_string()
            .contains("/nonexistent-psupport/deeper/perf-"),
        "{err}"
    );
    let err = JitDump::create_in(dir).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert!(err.to_string().contains("jit-"), "{err}");
}

#[test]
fn read_only_directories_even_for_root() {
    for dir in ["/proc", "/sys"] {
        let err = PerfMap::in_dir(dir).open().unwrap_err();
        assert!(err.to_string().contains("cannot create"), "{dir}: {err}");
        let err = JitDump::create_in(dir).unwrap_err();
        assert!(err.to_string().contains("cannot create"), "{dir}: {err}");
    }
}

#[test]
fn no_space_left_on_device() {
    let map = PerfMap::from_file(dev_full());
    let err = map.register(&[region()]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::StorageFull, "{err}");
    // The header is written at creation, so a full disk shows up there.
    let err = JitDump::from_file(dev_full(), false).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::StorageFull, "{err}");
    assert!(err.to_string().contains("jitdump header"), "{err}");
}

#[test]
fn jitdump_stops_after_a_failed_write() {
    // A pipe whose reader goes away: the header fits, later writes fail
    // with EPIPE (the Rust runtime ignores SIGPIPE).
    let (reader, writer) = io::pipe().unwrap();
    let dump = JitDump::from_file(
        std::fs::File::from(std::os::fd::OwnedFd::from(writer)),
        false,
    )
    .unwrap();
    drop(reader);
    let err = dump.register(&[region()]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::BrokenPipe, "{err}");
    let err = dump.register(&[region()]).unwrap_err();
    assert!(
        err.to_string().contains("stopped after a failed write"),
        "no writes after a partial record: {err}"
    );
}

#[test]
fn marker_mapping_failure_is_reported() {
    // /dev/null cannot be mapped executable (or at all).
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
        .unwrap();
    assert!(JitDump::from_file(file, true).is_err());
}

#[test]
fn symlink_planted_at_the_target_is_refused() {
    let dir = scratch_dir("fail-symlink");
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "precious").unwrap();
    let pid = std::process::id();
    for name in [format!("perf-{pid}.map"), format!("jit-{pid}.dump")] {
        std::os::unix::fs::symlink(&victim, dir.path().join(name)).unwrap();
    }
    let err = PerfMap::in_dir(dir.path())
        .register(&[region()])
        .unwrap_err();
    assert!(err.to_string().contains("symbolic link"), "{err}");
    let err = JitDump::create_in(dir.path()).unwrap_err();
    assert!(err.to_string().contains("symbolic link"), "{err}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
}

#[test]
fn stale_dump_owned_by_us_is_replaced() {
    let dir = scratch_dir("fail-stale-dump");
    let path = dir.path().join(format!("jit-{}.dump", std::process::id()));
    std::fs::write(&path, vec![0xaa; 4096]).unwrap();
    let dump = JitDump::create_in(dir.path()).unwrap();
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        40,
        "fresh header only"
    );
    dump.finish().unwrap();
}

#[test]
fn dump_directory_perf_would_misread_is_refused() {
    let err = JitDump::create_in("/tmp/perf-psupport-test").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert!(err.to_string().contains("perf maps"), "{err}");
}

/// Counts calls, to prove a disabled sink is not called again.
struct Counting {
    inner: PerfMap,
    calls: Arc<AtomicUsize>,
}

impl ProfilerSink for Counting {
    fn name(&self) -> &str {
        "full disk map"
    }
    fn register(&self, regions: &[CodeRegion<'_>]) -> io::Result<()> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.register(regions)
    }
    fn finish(&self) -> io::Result<()> {
        self.inner.finish()
    }
}

#[test]
fn profilers_report_each_failure_once_and_keep_going() {
    let dir = scratch_dir("fail-fanout");
    let calls = Arc::new(AtomicUsize::new(0));
    let mut profilers = Profilers::new();
    assert!(profilers.is_empty());
    profilers.add(Box::new(Counting {
        inner: PerfMap::from_file(dev_full()),
        calls: calls.clone(),
    }));
    profilers.add(Box::new(PerfMap::in_dir(dir.path())));

    let failures = profilers.register(&[region()]);
    assert_eq!(failures.len(), 1);
    assert!(failures[0].disabled);
    assert_eq!(failures[0].sink, "full disk map");
    let message = failures[0].to_string();
    assert!(
        message.starts_with("full disk map: cannot write perf map: "),
        "{message}"
    );
    assert!(
        message.ends_with("; profiling output disabled"),
        "{message}"
    );

    for _ in 0..3 {
        assert!(profilers.register(&[region()]).is_empty(), "reported once");
    }
    assert_eq!(
        calls.load(Ordering::Relaxed),
        1,
        "the failed sink is not called again"
    );
    assert_eq!(profilers.active_sinks(), ["perf map"]);

    // Invalid input is reported every time but does not disable anything.
    let empty = CodeRegion::new(&[], "toy::empty");
    let failures = profilers.register(&[empty]);
    assert_eq!(failures.len(), 1);
    assert!(!failures[0].disabled);
    assert!(failures[0].to_string().ends_with("regions not registered"));
    assert_eq!(profilers.active_sinks(), ["perf map"]);

    assert!(profilers.finish().is_empty());
    let text = std::fs::read_to_string(dir.path().join(format!("perf-{}.map", std::process::id())))
        .unwrap();
    assert_eq!(text.lines().count(), 4, "the healthy sink got every batch");
}

/// A perf map and a jitdump in `dir`, behind one [`Profilers`].
fn both_sinks(dir: &Path) -> Profilers {
    let mut profilers = Profilers::new();
    let map = PerfMap::in_dir(dir);
    map.open().unwrap();
    profilers.add(Box::new(map));
    profilers.add(Box::new(JitDump::create_in(dir).unwrap()));
    profilers
}

#[test]
fn a_malformed_region_is_rejected_by_every_sink_alike() {
    let dir = scratch_dir("fail-alike");
    let profilers = both_sinks(dir.path());
    // Unwind info for 12 bytes on 8 bytes of code: only the jitdump reads
    // unwind info, yet the perf map must reject the batch too.
    let wrong = CallFrameInfo::x86_64_frame_pointer(12).unwrap();
    let lines = [LineEntry {
        offset: 0,
        file: "f.toy",
        line: 1,
        column: 0,
    }];
    let good = region().with_lines(&lines);
    let cases = [
        (
            region().with_unwind(&wrong),
            r#"code region "toy::f": unwind info: the FDE covers 12 bytes but the code has 8"#,
        ),
        (
            CodeRegion::new(&CODE, "ab"),
            r#"code region "ab": name is 2 bytes; perf ignores names shorter than 3"#,
        ),
        (
            CodeRegion::new(&CODE, "toy::a\0b"),
            r#"code region "toy::a\0b": name contains a NUL byte"#,
        ),
    ];
    for (bad, message) in cases {
        let failures = profilers.register(&[good, bad]);
        let sinks: Vec<&str> = failures.iter().map(|f| f.sink.as_str()).collect();
        assert_eq!(sinks, ["perf map", "jitdump"], "both sinks reject it");
        for failure in &failures {
            assert!(!failure.disabled, "nothing was written: the sink stays on");
            assert_eq!(failure.error.kind(), ErrorKind::InvalidInput);
            let text = failure.to_string();
            assert!(
                text.starts_with(&format!("{}: {message}", failure.sink)),
                "{text} lacks {message:?}"
            );
            assert_eq!(
                text.matches(&failure.sink).count(),
                1,
                "sink named once: {text}"
            );
            assert_eq!(
                text.matches("code region").count(),
                1,
                "region named once: {text}"
            );
        }
    }
    assert!(profilers.finish().is_empty());
    let pid = std::process::id();
    let map = std::fs::read(dir.path().join(format!("perf-{pid}.map"))).unwrap();
    assert!(
        map.is_empty(),
        "the perf map wrote nothing of a rejected batch"
    );
    let dump = std::fs::read(dir.path().join(format!("jit-{pid}.dump"))).unwrap();
    assert_eq!(
        dump.len(),
        40 + 16,
        "the jitdump holds its header and CLOSE only"
    );
}

#[test]
fn a_bad_dead_code_range_is_refused_by_every_sink_alike() {
    let dir = scratch_dir("retire-ranges");
    let mut profilers = both_sinks(dir.path());
    let gdb = Arc::new(perfsupport::GdbJit::new());
    profilers.add(Box::new(Arc::clone(&gdb)));
    assert!(profilers.register(&[region()]).is_empty());
    let start = CODE.as_ptr() as usize;
    for (bad, message) in [
        ((start, usize::MAX), "start + size overflows"),
        ((start, 0), "has 0 bytes"),
    ] {
        let failures = profilers.retire(&[(start, CODE.len()), bad]);
        let sinks: Vec<&str> = failures.iter().map(|f| f.sink.as_str()).collect();
        assert_eq!(
            sinks,
            ["perf map", "jitdump", "gdb JIT interface"],
            "every sink refuses it"
        );
        for failure in &failures {
            assert!(!failure.disabled, "bad input does not switch a sink off");
            assert_eq!(failure.error.kind(), ErrorKind::InvalidInput);
            assert!(failure.to_string().contains(message), "{failure}");
        }
        // The GDB sink alone (the sink the wrapping sum once fooled): it
        // refuses too, and forgets nothing of the good range beside it.
        let alone = gdb.retire(&[bad]).unwrap_err();
        assert_eq!(alone.kind(), ErrorKind::InvalidInput);
        assert_eq!(gdb.published_objects(), 1, "the live region is still named");
    }
    assert!(profilers.retire(&[(start, CODE.len())]).is_empty());
    assert_eq!(gdb.published_objects(), 0, "a good range retires it");
    assert!(profilers.finish().is_empty());
}

#[test]
fn errors_name_the_sink_once() {
    let dir = scratch_dir("fail-once");
    let profilers = both_sinks(dir.path());
    assert!(profilers.finish().is_empty());
    let mut messages: Vec<String> = profilers
        .register(&[region()])
        .iter()
        .map(ToString::to_string)
        .collect();
    messages.sort();
    assert_eq!(
        messages,
        [
            "jitdump: already finished; profiling output disabled",
            "perf map: closed (finished, or it could not follow a fork); profiling output disabled",
        ]
    );
}

#[test]
fn create_output_file_is_safe_for_the_vms_own_outputs() {
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch_dir("fail-output");
    let path = dir.path().join("flame.svg");
    std::fs::write(&path, "an earlier run's output").unwrap();
    let mut file = perfsupport::create_output_file(&path).expect("replaces our own file");
    file.write_all(b"<svg/>").unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"<svg/>");
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o644, "readable by all, writable by the owner only");
    // SAFETY: F_GETFD on a descriptor we own reads its flags, nothing else.
    let flags = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETFD) };
    assert_eq!(flags & libc::FD_CLOEXEC, libc::FD_CLOEXEC, "close-on-exec");

    let victim = dir.path().join("victim");
    std::fs::write(&victim, "precious").unwrap();
    let link = dir.path().join("report.txt");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let err = perfsupport::create_output_file(&link).unwrap_err();
    assert!(err.to_string().contains("symbolic link"), "{err}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    let err = perfsupport::create_output_file(dir.path()).unwrap_err();
    assert!(err.to_string().contains("not a regular file"), "{err}");
}
