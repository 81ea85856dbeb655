//! Writer → reader round trips with the real SIGPROF sampler.

mod vmprof_support;

use std::time::Duration;

use perfsupport::vmprof::{
    CodeIdCell, EnableOptions, ShadowStack, VmprofError, disable, enable_path, enable_with,
    is_enabled, read_profile, register_code, vmprof_execute_code,
};
use vmprof_support::*;

#[test]
fn nested_workload_round_trips_with_cpu_proportional_counts() {
    let _serial = serial();
    let w = workload();
    let path = fresh_path("roundtrip.prof");
    let mut options = EnableOptions::new("toyvm");
    options
        .meta
        .push(("argv".into(), "toyvm run nested.toy".into()));
    enable_path(&path, &options).expect("enable");
    assert!(is_enabled());
    let cpu_before = process_cpu_time();
    run_nested(w, Duration::from_millis(300));
    // A code registered after enable is named in the file too.
    static LATE: CodeIdCell = CodeIdCell::new();
    let late = register_code(&LATE, &toy_class(), "late", 20, "late.toy");
    {
        let _outer = vmprof_execute_code(w.outer);
        let _late = vmprof_execute_code(late);
        burn(Duration::from_millis(30));
    }
    let cpu = process_cpu_time() - cpu_before;
    let summary = disable().expect("disable");
    assert!(!is_enabled());

    let profile = read_profile(&path).expect("our reader reads our file");
    let n = profile.samples.len();
    assert_eq!(n as u64, summary.samples);
    assert!(n > 100, "only {n} samples in {cpu:?} of CPU at 1 kHz");
    // One sample per millisecond of CPU, within what the tick allows.
    let expected = cpu.as_secs_f64() * 1000.0;
    eprintln!(
        "{n} samples ({} signals) for {expected:.0} ms of process CPU",
        summary.signals
    );
    assert!(
        (n as f64) > 0.75 * expected && (n as f64) < 1.1 * expected,
        "{n} samples for {expected:.0} ms of CPU"
    );
    let (o, m, i, l) = (
        w.outer.get() as u64,
        w.middle.get() as u64,
        w.inner.get() as u64,
        late.get() as u64,
    );
    let mut inner_leaves = 0;
    for sample in &profile.samples {
        assert_eq!(
            sample.stack[0], o,
            "every stack starts at outer: {:?}",
            sample.stack
        );
        let valid = [vec![o], vec![o, m], vec![o, m, i], vec![o, l]];
        assert!(
            valid.contains(&sample.stack),
            "unexpected stack {:?}",
            sample.stack
        );
        inner_leaves += usize::from(sample.stack.last() == Some(&i));
        assert_eq!(sample.thread, gettid());
    }
    assert!(
        inner_leaves * 2 > n,
        "inner is the leaf of only {inner_leaves} of {n}"
    );
    assert_eq!(profile.name(o), Some(OUTER_NAME));
    assert_eq!(profile.name(m), Some(MIDDLE_NAME));
    assert_eq!(profile.name(i), Some(INNER_NAME));
    assert_eq!(profile.name(l), Some("toy:late:20:late.toy"));
    assert_eq!(profile.interp, "toyvm");
    assert_eq!(profile.version, 6);
    assert_eq!(profile.period_us, 1000);
    assert_eq!(profile.meta_value("interp"), Some("toyvm"));
    assert_eq!(profile.meta_value("argv"), Some("toyvm run nested.toy"));
    assert!(profile.meta_value("start_time").is_some());
    assert!(profile.has_trailer);
    let (start, end) = (profile.start_time.unwrap(), profile.end_time.unwrap());
    assert!(start <= end);
    assert_eq!(summary.dropped_full + summary.dropped_busy, 0);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn a_run_shorter_than_one_interval_gives_a_complete_empty_profile() {
    let _serial = serial();
    let w = workload();
    let path = fresh_path("short.prof");
    let mut options = EnableOptions::new("toyvm");
    options.interval = Duration::from_millis(100);
    enable_path(&path, &options).expect("enable");
    {
        let _outer = vmprof_execute_code(w.outer);
    }
    let summary = disable().expect("disable");
    let profile = read_profile(&path).expect("valid file");
    assert_eq!(summary.samples, 0);
    assert!(profile.samples.is_empty());
    assert!(profile.has_trailer);
    assert_eq!(profile.period_us, 100_000);
    assert!(
        profile.names.len() >= 3,
        "names are written even without samples"
    );
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn enable_twice_and_disable_twice_are_errors_and_sessions_repeat() {
    let _serial = serial();
    let w = workload();
    for round in 0..3 {
        let path = fresh_path(&format!("repeat-{round}.prof"));
        enable_path(&path, &EnableOptions::new("toyvm")).expect("enable");
        let second = fresh_path("never.prof");
        let devnull = std::fs::File::options()
            .write(true)
            .open("/dev/null")
            .unwrap();
        assert!(matches!(
            enable_with(devnull, &EnableOptions::new("toyvm")),
            Err(VmprofError::AlreadyEnabled)
        ));
        assert!(!second.exists());
        run_nested(w, Duration::from_millis(30));
        let summary = disable().expect("disable");
        assert!(matches!(disable(), Err(VmprofError::NotEnabled)));
        let profile = read_profile(&path).expect("valid file");
        assert_eq!(profile.samples.len() as u64, summary.samples);
        assert!(summary.samples > 0, "round {round}: no samples");
        std::fs::remove_file(&path).unwrap();
    }
}

#[test]
fn guards_push_only_while_profiling() {
    let _serial = serial();
    let w = workload();
    let depth = || ShadowStack::with_current(ShadowStack::depth);
    {
        let _outer = vmprof_execute_code(w.outer);
        assert_eq!(depth(), 0, "off: no push");
    }
    let path = fresh_path("guards.prof");
    enable_path(&path, &EnableOptions::new("toyvm")).expect("enable");
    let outer = vmprof_execute_code(w.outer);
    assert_eq!(depth(), 1);
    disable().expect("disable");
    // Pushed while on: still popped after disable.
    drop(outer);
    assert_eq!(depth(), 0);
    std::fs::remove_file(&path).unwrap();
}

/// Pushes and pops the way JIT code does: plain word stores at the
/// documented offsets, through the raw pointer. The sampler must see them.
#[test]
fn inline_push_at_the_documented_offsets_is_sampled() {
    use perfsupport::vmprof::{SHADOW_STACK_DEPTH_OFFSET, SHADOW_STACK_IDS_OFFSET};
    use std::sync::atomic::{AtomicUsize, Ordering};

    let _serial = serial();
    let w = workload();
    let base = ShadowStack::current_ptr().cast::<u8>();
    // SAFETY: the offsets are inside the current thread's ShadowStack, whose
    // fields are AtomicUsize (8-byte aligned words); this thread is alive.
    let word = |offset: usize| unsafe { &*base.add(offset).cast::<AtomicUsize>() };
    let inline_push = |id: usize| {
        let depth = word(SHADOW_STACK_DEPTH_OFFSET).load(Ordering::Relaxed);
        word(SHADOW_STACK_IDS_OFFSET + 8 * depth).store(id, Ordering::Relaxed);
        std::sync::atomic::compiler_fence(Ordering::SeqCst);
        word(SHADOW_STACK_DEPTH_OFFSET).store(depth + 1, Ordering::Relaxed);
    };
    let inline_pop = || {
        let depth = word(SHADOW_STACK_DEPTH_OFFSET).load(Ordering::Relaxed);
        word(SHADOW_STACK_DEPTH_OFFSET).store(depth - 1, Ordering::Relaxed);
    };
    let path = fresh_path("inline.prof");
    enable_path(&path, &EnableOptions::new("toyvm")).expect("enable");
    for id in [w.outer, w.middle, w.inner] {
        inline_push(id.get());
    }
    burn(Duration::from_millis(100));
    for _ in 0..3 {
        inline_pop();
    }
    disable().expect("disable");
    assert_eq!(ShadowStack::with_current(ShadowStack::depth), 0);
    let profile = read_profile(&path).expect("readable");
    assert!(
        profile.samples.len() > 50,
        "{} samples",
        profile.samples.len()
    );
    let expected: Vec<u64> = [w.outer, w.middle, w.inner]
        .iter()
        .map(|id| id.get() as u64)
        .collect();
    assert!(profile.samples.iter().all(|s| s.stack == expected));
    std::fs::remove_file(&path).unwrap();
}

/// A VM that keeps its own frame records describes them with a frame view:
/// the sampler reads those records (through the key → id table) instead of
/// the shadow stack, and follows the depth as the VM calls and returns.
#[test]
fn a_frame_view_is_sampled_instead_of_the_shadow_stack() {
    use perfsupport::vmprof::{FrameView, install_frame_view};
    use std::sync::atomic::{Ordering, compiler_fence};

    #[repr(C)]
    struct Record {
        base: usize,
        key: u32,
    }
    let _serial = serial();
    let w = workload();
    // A VM-like frame array: slot 0 unused, keys index the table below.
    let mut records: Vec<Record> = (0..4).map(|_| Record { base: 0, key: 99 }).collect();
    let mut depth = 0usize;
    let (records_ptr, depth_ptr) = (records.as_mut_ptr(), &raw mut depth);
    // SAFETY: `records` and `depth` outlive the guard and do not move; only
    // this thread writes them, record before depth.
    let view = unsafe {
        install_frame_view(FrameView {
            depth: depth_ptr,
            records: records_ptr.cast_const().cast(),
            first: 1,
            stride: size_of::<Record>(),
            key_offset: std::mem::offset_of!(Record, key),
            ids: vec![w.inner, w.outer, w.middle].into_boxed_slice(),
            lines: None,
        })
    };
    // SAFETY: the same two locations, written as the protocol says.
    let call = |key: u32| unsafe {
        let d = depth_ptr.read_volatile() + 1;
        (*records_ptr.add(d)).key = key;
        compiler_fence(Ordering::SeqCst);
        depth_ptr.write_volatile(d);
    };
    // SAFETY: as above.
    let ret = || unsafe { depth_ptr.write_volatile(depth_ptr.read_volatile() - 1) };
    let path = fresh_path("frame_view.prof");
    enable_path(&path, &EnableOptions::new("toyvm")).expect("enable");
    // Something on the shadow stack that the view must hide.
    let _hidden = vmprof_execute_code(w.inner);
    call(1);
    call(2);
    burn(Duration::from_millis(100));
    call(0);
    burn(Duration::from_millis(100));
    ret();
    ret();
    ret();
    disable().expect("disable");
    drop(view);
    let profile = read_profile(&path).expect("readable");
    let (o, m, i) = (
        w.outer.get() as u64,
        w.middle.get() as u64,
        w.inner.get() as u64,
    );
    let two = profile.samples.iter().filter(|s| s.stack == [o, m]).count();
    let three = profile
        .samples
        .iter()
        .filter(|s| s.stack == [o, m, i])
        .count();
    assert_eq!(
        two + three,
        profile.samples.len(),
        "every sample is the view's stack: {:?}",
        profile.samples.iter().map(|s| &s.stack).collect::<Vec<_>>()
    );
    assert!(
        two > 30 && three > 30,
        "{two} samples at depth 2, {three} at 3"
    );
    std::fs::remove_file(&path).unwrap();
}
