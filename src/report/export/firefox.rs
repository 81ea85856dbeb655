//! `toyvm report --format firefox`: the Firefox Profiler's processed
//! format (open it at <https://profiler.firefox.com>), written with
//! `fxprof-processed-profile`, the crate samply uses.
//!
//! A vmprof profile records no time per sample, only their order and the
//! sampling interval. The samples are laid out in file order, one interval
//! apart, each with one interval of CPU time; the profile's product name
//! says so, since its timeline is reconstructed, not measured. Each thread
//! of the profile (the VM's, and the JIT compiler's when it was sampled:
//! its stacks end in `<jit compiler>`) is a thread here, the first one the
//! main thread. Frames are labels: the function name and its `file:line`.

use std::collections::HashMap;
use std::io::Write;

use fxprof_processed_profile::{
    CategoryColor, CategoryPairHandle, CpuDelta, Frame, FrameFlags, FrameInfo, Profile,
    ReferenceTimestamp, SamplingInterval, StackHandle, ThreadHandle, Timestamp,
};

use crate::report::load::VmProfile;
use crate::report::text::printable;

/// Builds the Firefox profile; `order` gives the stack (an index into
/// `profile.stacks`) of every sample, in file order.
pub fn build(profile: &VmProfile, order: &[u32]) -> Profile {
    let period_ns = profile.period_us.saturating_mul(1000).max(1);
    let script = profile.script.as_deref().unwrap_or("a vmprof profile");
    let product = format!(
        "{} {} (sample times reconstructed: vmprof records their order and interval, not their times)",
        profile.interp,
        printable(script)
    );
    let start_ms = profile.start_ns as f64 / 1e6;
    let mut fx = Profile::new(
        &product,
        ReferenceTimestamp::from_millis_since_unix_epoch(start_ms),
        SamplingInterval::from_nanos(period_ns),
    );
    let zero = Timestamp::from_nanos_since_reference(0);
    let process = fx.add_process(&printable(script), 0, zero);
    let category: CategoryPairHandle = fx.add_category("Toy", CategoryColor::Blue).into();
    let labels: Vec<_> = (profile.frames.iter())
        .map(|frame| {
            let label = if frame.file.is_empty() {
                frame.name.clone()
            } else {
                let file = frame.file.rsplit('/').next().unwrap_or(&frame.file);
                format!("{} {}:{}", frame.name, file, frame.line)
            };
            fx.intern_string(&label)
        })
        .collect();
    // The VM's thread, the one with the most samples, is the main thread.
    let mut per_thread: HashMap<u64, u64> = HashMap::new();
    for stack in &profile.stacks {
        *per_thread.entry(stack.thread).or_default() += stack.count;
    }
    let mut by_samples: Vec<(u64, u64)> = per_thread.into_iter().collect();
    by_samples.sort_by_key(|&(thread, samples)| (std::cmp::Reverse(samples), thread));
    let threads: HashMap<u64, ThreadHandle> = (by_samples.iter().enumerate())
        .map(|(rank, &(tid, _))| {
            let thread = fx.add_thread(process, tid as u32, zero, rank == 0);
            let name = if rank == 0 {
                "main".to_owned()
            } else {
                format!("thread {tid}")
            };
            fx.set_thread_name(thread, &name);
            (tid, thread)
        })
        .collect();
    let mut stacks: HashMap<usize, Option<StackHandle>> = HashMap::new();
    for (index, &stack_index) in order.iter().enumerate() {
        let stack = &profile.stacks[stack_index as usize];
        let thread = threads[&stack.thread];
        let handle = *stacks.entry(stack_index as usize).or_insert_with(|| {
            let frames = stack.frames.iter().map(|&frame| FrameInfo {
                frame: Frame::Label(labels[frame]),
                category_pair: category,
                flags: FrameFlags::empty(),
            });
            fx.intern_stack_frames(thread, frames)
        });
        let at = Timestamp::from_nanos_since_reference((index as u64).saturating_mul(period_ns));
        fx.add_sample(thread, at, handle, CpuDelta::from_nanos(period_ns), 1);
    }
    fx
}

/// Writes the Firefox profile of `profile` (see [`build`]) to `out`.
pub fn write(profile: &VmProfile, order: &[u32], mut out: impl Write) -> std::io::Result<()> {
    serde_json::to_writer(&mut out, &build(profile, order))?;
    out.write_all(b"\n")
}
