//! Cost of entering and leaving a frame: raw shadow-stack push + pop, and
//! the `vmprof_execute_code` guard with profiling off and on.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use perfsupport::vmprof::{
    CodeIdCell, EnableOptions, MAX_INTERVAL, ShadowStack, disable, enable_with, register_code,
    register_code_object_class, vmprof_execute_code,
};

fn frames(c: &mut Criterion) {
    static CODE: CodeIdCell = CodeIdCell::new();
    let class = register_code_object_class("toy").unwrap();
    let id = register_code(&CODE, &class, "bench", 1, "bench.toy");
    let mut group = c.benchmark_group("vmprof_frame");
    group.measurement_time(Duration::from_secs(2));

    ShadowStack::with_current(|stack| {
        group.bench_function("shadow_stack_push_pop", |b| {
            b.iter(|| {
                stack.push(black_box(id));
                stack.pop();
            })
        });
    });

    group.bench_function("execute_code_guard_profiling_off", |b| {
        b.iter(|| drop(black_box(vmprof_execute_code(black_box(id)))))
    });

    // Profiling on, with a 1 s interval so that samples do not disturb the
    // measurement; the output goes to /dev/null.
    let devnull = std::fs::File::options()
        .write(true)
        .open("/dev/null")
        .unwrap();
    let mut options = EnableOptions::new("bench");
    options.interval = MAX_INTERVAL;
    enable_with(devnull, &options).unwrap();
    group.bench_function("execute_code_guard_profiling_on", |b| {
        b.iter(|| drop(black_box(vmprof_execute_code(black_box(id)))))
    });
    disable().unwrap();
    group.finish();
}

criterion_group!(benches, frames);
criterion_main!(benches);
