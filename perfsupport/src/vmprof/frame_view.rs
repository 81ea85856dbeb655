//! Sampling a VM's own frame records instead of a shadow stack.
//!
//! Most VMs already write a record for every active call: toyvm's
//! `frames[1..=depth]`, Lua's `CallInfo` array, CPython's frame chain. Such
//! an array *is* a shadow stack, kept on every call anyway for the garbage
//! collector and tracebacks; a sampler that reads it directly costs the VM
//! nothing per call, where a separate [`ShadowStack`](super::ShadowStack)
//! costs a push and a pop on every call in every tier.
//!
//! [`install_frame_view`] describes such an array to the sampler for the
//! current thread. While the returned guard lives, each `SIGPROF` that
//! lands on this thread reads the view instead of the thread's shadow
//! stack.
//!
//! # What the sampler reads
//!
//! ```text
//! n = load usize [depth]                               ; active frames
//! for i in 0 .. n:                                     ; root first
//!     key = load u32 [records + (first + i) * stride + key_offset]
//!     id  = ids[key]                                   ; 0 if key >= ids.len()
//! ```
//!
//! A sample holds at most [`SHADOW_STACK_CAPACITY`] frames. A deeper stack
//! keeps its *innermost* frames, where the time is spent: the outermost
//! ones are replaced by one frame named [`CUT_FRAMES_NAME`], so readers see
//! that (and in how many samples) the root part of the stack was cut,
//! instead of a recursive function with all the self time.
//!
//! `key` is whatever the record holds to name its code (toyvm: the function
//! index); `ids` maps it to the code id from
//! [`register_code`](super::register_code).
//!
//! # Lines (a session with [`EnableOptions::lines`](super::EnableOptions::lines))
//!
//! With [`FrameView::lines`], each frame also gets the source line it is
//! executing. The VM keeps a `u32` **location** in each record, at
//! [`FrameLines::location_offset`]: the innermost frame's the instruction
//! it runs, a caller's its call instruction. A location is an instruction
//! index, or whatever the VM has at hand that is one linear in it: toyvm's
//! interpreter stores the low 32 bits of the instruction's address, which
//! it has in a register (at each instruction that starts a line), and
//! compiled code the same value before each call. [`FrameLines::bases`]
//! and [`FrameLines::shift`] turn it back into an index, and
//! [`FrameLines::lines`] maps `(key, index)` to a line. The innermost frame
//! is looked up first by the interrupted program counter, in the tables
//! compiled code published ([`super::code_lines`]): a row whose key is the
//! frame's gives the line, since compiled code does not store its location
//! on every instruction.
//!
//! ```text
//! line(frame i) = if i is innermost and code_lines(pc) has a row with
//!                    key = key_i:        its line
//!                    outer_key = key_i:  its outer_line (inlined code)
//!                 else lines[key_i][index], where
//!                    index = (load u32 [record_i + location_offset]
//!                             - bases[key_i]) >> shift     (mod 2^32)
//!                 (0 when out of range: unknown)
//! ```
//!
//! The cut frame's line is 0.
//!
//! # The protocol the VM keeps (the shadow stack's, for its own array)
//!
//! * **Call:** write the record `first + n` first, *then* store the new
//!   depth `n + 1`. A handler that interrupts the call between the two
//!   stores sees the old depth and never a stale record. Rust code needs a
//!   `compiler_fence` between them; Cranelift emits stores in program order.
//! * **Return:** store the old depth (one store: the handler sees either).
//! * The depth and the records stay at their addresses while the view is
//!   installed (the array must not be reallocated), and both are written
//!   only by the thread that installed the view.
//!
//! As with the shadow stack, no atomic instruction or fence is needed in
//! the VM's machine code: the handler runs on the same thread and sees that
//! thread's stores in program order. It reads with volatile loads.

use std::cell::{Cell, RefCell};
use std::marker::PhantomData;
use std::sync::atomic::{Ordering, compiler_fence};

use super::code_lines;
use super::registry::{CodeIdCell, get_unique_id, register_code, register_code_object_class};
use super::shadow_stack::SHADOW_STACK_CAPACITY;
use super::{CodeId, VmprofError};

/// The code class of [`CUT_FRAMES_NAME`].
pub const CUT_FRAMES_CLASS: &str = "vmprof";
/// The function name of the frame that stands for the outermost frames a
/// sample deeper than [`SHADOW_STACK_CAPACITY`] leaves out.
pub const CUT_FRAMES_NAME: &str = "[outer frames cut]";

/// The id of the [`CUT_FRAMES_NAME`] frame, registered by
/// [`install_frame_view`] (read by the signal handler: a `OnceLock` that is
/// set is read with one atomic load).
static CUT_FRAMES: CodeIdCell = CodeIdCell::new();

fn register_cut_frames() -> Result<CodeId, VmprofError> {
    let class = register_code_object_class(CUT_FRAMES_CLASS)?;
    Ok(register_code(&CUT_FRAMES, &class, CUT_FRAMES_NAME, 0, "-"))
}

// ANCHOR: frame_lines
/// Where each frame record keeps its location, how a location names an
/// instruction, and the line of every instruction; see the module docs.
#[derive(Debug)]
pub struct FrameLines {
    /// Byte offset, inside a record, of its `u32` location.
    pub location_offset: usize,
    /// Per key, the location of its instruction 0 (a key past the end: 0).
    /// Empty for a VM whose locations are instruction indexes.
    pub bases: Box<[u32]>,
    /// log2 of the distance from one instruction's location to the next's
    /// (below 32): 0 for indexes, 4 for addresses of 16-byte instructions.
    pub shift: u32,
    /// Per key, the line of each instruction index (0: unknown).
    pub lines: Box<[Box<[u32]>]>,
}

impl FrameLines {
    /// The line of the instruction at `location` in the code of `key`; 0
    /// when unknown. Async-signal-safe.
    fn line(&self, key: u32, location: u32) -> u32 {
        let base = self.bases.get(key as usize).copied().unwrap_or(0);
        // A location below the base wraps to a huge index: unknown.
        let index = location.wrapping_sub(base) >> self.shift;
        (self.lines.get(key as usize))
            .and_then(|table| table.get(index as usize))
            .copied()
            .unwrap_or(0)
    }
}
// ANCHOR_END: frame_lines

/// Where a VM keeps its frame records and how to name their code; see the
/// module docs.
#[derive(Debug)]
pub struct FrameView {
    /// The VM's count of active frames (`usize`).
    pub depth: *const usize,
    /// The address of record 0.
    pub records: *const u8,
    /// The index of the outermost frame's record (toyvm: 1).
    pub first: usize,
    /// Bytes from one record to the next.
    pub stride: usize,
    /// Byte offset, inside a record, of its `u32` code key.
    pub key_offset: usize,
    /// The code id of each key.
    pub ids: Box<[CodeId]>,
    /// How to find each frame's line, for sessions in lines mode; `None`:
    /// every line is 0 (unknown).
    pub lines: Option<FrameLines>,
}

impl FrameView {
    /// The number of active frames. Async-signal-safe.
    ///
    /// # Safety
    /// `self.depth` is valid for reads (the contract of
    /// [`install_frame_view`]).
    unsafe fn active_depth(&self) -> usize {
        // SAFETY: the caller's contract.
        let depth = unsafe { self.depth.read_volatile() };
        // Keep the records' loads after the depth's.
        compiler_fence(Ordering::SeqCst);
        depth
    }

    /// The code id of frame `index` (0 is the root), or 0 for a key outside
    /// the table. Async-signal-safe.
    ///
    /// # Safety
    /// `index` is below the depth just read by `stored_depth`, so the record
    /// is inside the array and was written (the contract of
    /// [`install_frame_view`]).
    unsafe fn id_at(&self, index: usize) -> usize {
        // SAFETY: the caller's contract.
        let key = unsafe { self.key_at(index) };
        self.ids.get(key as usize).map_or(0, |id| id.get())
    }

    /// The key of frame `index`. Async-signal-safe.
    ///
    /// # Safety
    /// As for [`FrameView::id_at`].
    unsafe fn key_at(&self, index: usize) -> u32 {
        // SAFETY: the caller's contract; the key is 4-byte aligned (checked
        // at install).
        unsafe { self.u32_at(index, self.key_offset) }
    }

    /// The `u32` at `offset` in the record of frame `index`.
    ///
    /// # Safety
    /// As for [`FrameView::id_at`]; `offset` is a 4-byte aligned field of
    /// the record (checked at install).
    unsafe fn u32_at(&self, index: usize, offset: usize) -> u32 {
        let at = (self.first + index) * self.stride + offset;
        // SAFETY: the caller's contract.
        unsafe { self.records.add(at).cast::<u32>().read_volatile() }
    }

    // ANCHOR: line_at
    /// The line frame `index` is executing, given the interrupted program
    /// counter `pc` when it is the innermost frame; 0 when unknown.
    /// Async-signal-safe.
    ///
    /// # Safety
    /// As for [`FrameView::id_at`].
    unsafe fn line_at(&self, index: usize, innermost_pc: Option<usize>) -> u32 {
        let Some(lines) = &self.lines else { return 0 };
        // SAFETY: the caller's contract.
        let key = unsafe { self.key_at(index) };
        if let Some(line) = innermost_pc
            .and_then(code_lines::lookup)
            .and_then(|row| row.line_for(key))
        {
            return line;
        }
        // SAFETY: the caller's contract; the offset was checked at install.
        let location = unsafe { self.u32_at(index, lines.location_offset) };
        lines.line(key, location)
    }
    // ANCHOR_END: line_at
}

thread_local! {
    // Static TLS (const initialiser, no destructor), so the signal handler
    // may read it; see `sampler`.
    static CURRENT: Cell<*const FrameView> = const { Cell::new(std::ptr::null()) };
    // The views installed on this thread and not yet uninstalled, oldest
    // first; `CURRENT` is the last. Never read by the handler.
    static INSTALLED: RefCell<Vec<*const FrameView>> = const { RefCell::new(Vec::new()) };
}

// ANCHOR: install_frame_view
/// Makes the sampler read `view` for samples taken on the current thread,
/// until the guard drops (which restores the view installed before, if
/// any).
///
/// # Safety
/// While the guard lives: `view.depth` and every record
/// `view.first ..= view.first + depth - 1` (as far as the capacity) are
/// valid for reads and do not move; they are written only by this thread,
/// following the protocol of the module docs (record before depth on a
/// call, one store on a return).
///
/// # Panics
/// If `records`, `stride` or `key_offset` would make a key unaligned for a
/// `u32` load, or a location's shift is 32 or more.
pub unsafe fn install_frame_view(view: FrameView) -> FrameViewGuard {
    let aligned = |n: usize| n.is_multiple_of(align_of::<u32>());
    let location_aligned = view
        .lines
        .as_ref()
        .is_none_or(|lines| aligned(lines.location_offset));
    assert!(
        aligned(view.records as usize)
            && aligned(view.stride)
            && aligned(view.key_offset)
            && location_aligned,
        "frame record keys and locations must be 4-byte aligned"
    );
    assert!(
        view.lines
            .as_ref()
            .is_none_or(|lines| lines.shift < u32::BITS),
        "a location shift must be below 32"
    );
    // Registered here, not in the handler (registering takes a lock).
    register_cut_frames().expect("the cut-frames class prefix is valid");
    let view = Box::new(view);
    // The view is complete before the handler can see it.
    compiler_fence(Ordering::SeqCst);
    INSTALLED.with(|installed| installed.borrow_mut().push(&*view));
    CURRENT.with(|current| current.set(&*view));
    // A thread that shows its frames runs VM code: sample it.
    super::clock::join_current_thread();
    FrameViewGuard {
        view,
        _not_send: PhantomData,
    }
}
// ANCHOR_END: install_frame_view

/// Uninstalls its [`FrameView`] when dropped. Bound to the thread that
/// installed it.
///
/// Guards may drop in any order: the sampler then reads the newest view
/// still installed. (Each guard once restored the view installed before
/// it, which after an out-of-order drop was a freed one.)
#[must_use = "the view is uninstalled when the guard drops"]
pub struct FrameViewGuard {
    view: Box<FrameView>,
    _not_send: PhantomData<Cell<*const ()>>,
}

impl Drop for FrameViewGuard {
    fn drop(&mut self) {
        super::clock::leave_current_thread();
        // While the thread's storage is torn down the list may be gone:
        // then no view stays installed.
        let newest = INSTALLED
            .try_with(|installed| {
                let mut installed = installed.borrow_mut();
                installed.retain(|&view| !std::ptr::eq(view, &*self.view));
                installed.last().copied().unwrap_or(std::ptr::null())
            })
            .unwrap_or(std::ptr::null());
        CURRENT.with(|current| current.set(newest));
        // The handler no longer sees the view before its memory goes.
        compiler_fence(Ordering::SeqCst);
    }
}

/// One sample's frames, read from the installed view: `frames` of them,
/// root first, the first standing for `cut` outer frames when `cut > 0`.
pub(crate) struct ViewSample<'a> {
    /// Frames in the sample (at most [`SHADOW_STACK_CAPACITY`]).
    pub frames: usize,
    /// Outer frames left out (0: none).
    pub cut: usize,
    view: &'a FrameView,
    pc: Option<usize>,
}

impl ViewSample<'_> {
    /// The code id and line of frame `i < self.frames` (0 is the root).
    /// Async-signal-safe.
    pub fn frame(&self, i: usize) -> (usize, u32) {
        let innermost = i + 1 == self.frames;
        let pc = self.pc.filter(|_| innermost);
        // Frame 0 stands for the `cut` outermost frames; frame i > 0 is
        // active frame `cut + i - 1`, up to the innermost, `depth - 1`.
        let active = match self.cut {
            0 => i,
            _ if i == 0 => {
                let marker = get_unique_id(&CUT_FRAMES).map_or(0, CodeId::get);
                return (marker, 0);
            }
            cut => cut + i - 1,
        };
        // SAFETY: `active` is below the depth `with_current_view` read,
        // and the view is live while `self` borrows it.
        unsafe { (self.view.id_at(active), self.view.line_at(active, pc)) }
    }
}

/// Reads the current thread's installed view for one sample (frames root
/// first, at most [`SHADOW_STACK_CAPACITY`]: a deeper stack gets the
/// [`CUT_FRAMES_NAME`] frame, then the innermost frames) and passes it to
/// `f`; `None` when no view is installed. `pc` is the interrupted program
/// counter, for the innermost frame's line. Async-signal-safe.
pub(crate) fn with_current_view<R>(
    pc: Option<usize>,
    f: impl FnOnce(&ViewSample<'_>) -> R,
) -> Option<R> {
    let view = CURRENT.with(Cell::get);
    // SAFETY: a non-null pointer is a live installed view (the guard
    // clears it before freeing); the contract of `install_frame_view`
    // covers the reads, and `ViewSample::frame` is only asked below
    // `depth`.
    let view = unsafe { view.as_ref()? };
    // SAFETY: as above.
    let depth = unsafe { view.active_depth() };
    let (frames, cut) = if depth <= SHADOW_STACK_CAPACITY {
        (depth, 0)
    } else {
        (SHADOW_STACK_CAPACITY, depth - (SHADOW_STACK_CAPACITY - 1))
    };
    Some(f(&ViewSample {
        frames,
        cut,
        view,
        pc,
    }))
}

/// The id of the [`CUT_FRAMES_NAME`] frame (registered by the first
/// [`install_frame_view`]).
pub fn cut_frames_id() -> Option<CodeId> {
    get_unique_id(&CUT_FRAMES)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A toyvm-like record: 8 bytes of payload, then the key.
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Record {
        base: usize,
        key: u32,
    }

    fn ids(raw: &[usize]) -> Box<[CodeId]> {
        raw.iter().map(|&r| CodeId::from_raw(r)).collect()
    }

    fn read_all() -> Option<Vec<usize>> {
        with_current_view(None, |s| (0..s.frames).map(|i| s.frame(i).0).collect())
    }

    #[test]
    fn the_view_reads_keys_root_first_through_the_table() {
        let depth = 2usize;
        let records = [
            Record { base: 0, key: 9 }, // unused slot 0
            Record { base: 0, key: 1 },
            Record { base: 0, key: 0 },
            Record { base: 0, key: 1 }, // above the depth
        ];
        assert_eq!(read_all(), None);
        // SAFETY: `depth` and `records` outlive the guard and do not move.
        let guard = unsafe {
            install_frame_view(FrameView {
                depth: &depth,
                records: records.as_ptr().cast(),
                first: 1,
                stride: size_of::<Record>(),
                key_offset: std::mem::offset_of!(Record, key),
                ids: ids(&[12, 16]),
                lines: None,
            })
        };
        assert_eq!(read_all(), Some(vec![16, 12]));
        drop(guard);
        assert_eq!(read_all(), None);
    }

    #[test]
    fn guards_dropped_out_of_order_leave_the_newest_live_view() {
        let depth = 1usize;
        let records = [Record { base: 0, key: 0 }];
        let view = |id: usize| FrameView {
            depth: &depth,
            records: records.as_ptr().cast(),
            first: 0,
            stride: size_of::<Record>(),
            key_offset: std::mem::offset_of!(Record, key),
            ids: ids(&[id]),
            lines: None,
        };
        // SAFETY: `depth` and `records` outlive every guard.
        let (older, newer) =
            unsafe { (install_frame_view(view(12)), install_frame_view(view(16))) };
        assert_eq!(read_all(), Some(vec![16]));
        // The older one first: the newer stays installed.
        drop(older);
        assert_eq!(read_all(), Some(vec![16]));
        drop(newer);
        assert_eq!(read_all(), None);
        // And the other way round, with three.
        // SAFETY: as above.
        let (a, b, c) = unsafe {
            (
                install_frame_view(view(20)),
                install_frame_view(view(24)),
                install_frame_view(view(28)),
            )
        };
        drop(c);
        assert_eq!(read_all(), Some(vec![24]));
        drop(a);
        assert_eq!(read_all(), Some(vec![24]));
        drop(b);
        assert_eq!(read_all(), None);
    }

    #[test]
    fn unknown_keys_read_as_zero() {
        let depth = 3;
        let records = [Record { base: 0, key: 7 }; 3];
        // SAFETY: as above.
        let _guard = unsafe {
            install_frame_view(FrameView {
                depth: &depth,
                records: records.as_ptr().cast(),
                first: 0,
                stride: size_of::<Record>(),
                key_offset: 8,
                ids: ids(&[12]),
                lines: None,
            })
        };
        assert_eq!(read_all(), Some(vec![0, 0, 0]));
    }

    #[test]
    fn deep_stacks_keep_the_innermost_frames_under_a_cut_marker() {
        // Root: key 0, then 1 ... : ids 100 + 4 * key, so every frame is
        // recognisable; 5 frames more than a sample holds.
        let depth = SHADOW_STACK_CAPACITY + 5;
        let records: Vec<Record> = (0..depth as u32)
            .map(|key| Record { base: 0, key })
            .collect();
        let table: Vec<usize> = (0..depth).map(|k| 100 + 4 * k).collect();
        // SAFETY: as above.
        let _guard = unsafe {
            install_frame_view(FrameView {
                depth: &depth,
                records: records.as_ptr().cast(),
                first: 0,
                stride: size_of::<Record>(),
                key_offset: 8,
                ids: ids(&table),
                lines: None,
            })
        };
        let marker = cut_frames_id().expect("registered by install").get();
        let cut = with_current_view(None, |s| s.cut).unwrap();
        assert_eq!(cut, 6);
        let read = read_all().unwrap();
        assert_eq!(read.len(), SHADOW_STACK_CAPACITY);
        assert_eq!(read[0], marker);
        // The innermost frame (the leaf) is last; the 6 outermost are cut.
        assert_eq!(read[SHADOW_STACK_CAPACITY - 1], 100 + 4 * (depth - 1));
        assert_eq!(read[1], 100 + 4 * 6);
        let name = super::super::code_name_of(cut_frames_id().unwrap()).unwrap();
        assert_eq!(name, format!("{CUT_FRAMES_CLASS}:{CUT_FRAMES_NAME}:0:-"));
    }

    /// A record with a location: 8 bytes of payload, the key, the
    /// location.
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct LineRecord {
        base: usize,
        key: u32,
        location: u32,
    }

    #[test]
    fn lines_come_from_the_locations_and_for_the_innermost_from_the_pc() {
        let depth = 3usize;
        let records = [
            LineRecord {
                base: 0,
                key: 0,
                location: 1,
            },
            LineRecord {
                base: 0,
                key: 1,
                location: 2,
            },
            LineRecord {
                base: 0,
                key: 1,
                location: 9,
            }, // out of the table
        ];
        // Key 0: locations 0..3 on lines 10..12; key 1: lines 20..22.
        let lines: Box<[Box<[u32]>]> = Box::new([Box::new([10, 11, 12]), Box::new([20, 21, 22])]);
        // SAFETY: `depth` and `records` outlive the guard and do not move.
        let _guard = unsafe {
            install_frame_view(FrameView {
                depth: &depth,
                records: records.as_ptr().cast(),
                first: 0,
                stride: size_of::<LineRecord>(),
                key_offset: std::mem::offset_of!(LineRecord, key),
                ids: ids(&[12, 16]),
                lines: Some(FrameLines {
                    location_offset: std::mem::offset_of!(LineRecord, location),
                    bases: Box::new([]),
                    shift: 0,
                    lines,
                }),
            })
        };
        let read = |pc| {
            with_current_view(pc, |s| {
                (0..s.frames).map(|i| s.frame(i)).collect::<Vec<_>>()
            })
            .unwrap()
        };
        // An unknown location reads as line 0.
        assert_eq!(read(None), vec![(12, 11), (16, 22), (16, 0)]);
        // Compiled code of key 1 at the interrupted pc: its line, for the
        // innermost frame only.
        let code = [0u8; 16];
        code_lines::publish_code_lines(
            code.as_ptr(),
            16,
            vec![code_lines::CodeLineRow::new(0, 1, 77)],
        );
        let pc = Some(code.as_ptr() as usize + 3);
        assert_eq!(read(pc), vec![(12, 11), (16, 22), (16, 77)]);
        // Code of another key (e.g. a callee's prologue, before its record):
        // the record's location.
        code_lines::retract_code_lines(code.as_ptr());
        code_lines::publish_code_lines(
            code.as_ptr(),
            16,
            vec![code_lines::CodeLineRow::new(0, 0, 5)],
        );
        assert_eq!(read(pc), vec![(12, 11), (16, 22), (16, 0)]);
        code_lines::retract_code_lines(code.as_ptr());
        // Code of key 0 inlined into key 1 at line 30: the call's line.
        code_lines::publish_code_lines(
            code.as_ptr(),
            16,
            vec![code_lines::CodeLineRow {
                outer_key: 1,
                outer_line: 30,
                ..code_lines::CodeLineRow::new(0, 0, 5)
            }],
        );
        assert_eq!(read(pc), vec![(12, 11), (16, 22), (16, 30)]);
        code_lines::retract_code_lines(code.as_ptr());
    }

    #[test]
    fn a_location_is_an_index_after_its_keys_base_and_shift() {
        // Key 0's instructions are 16 bytes apart from 0xffff_fff0 (its
        // code straddles a 4 GiB boundary), key 1's from 0x1000.
        let lines = FrameLines {
            location_offset: 0,
            bases: Box::new([0xffff_fff0, 0x1000]),
            shift: 4,
            lines: Box::new([Box::new([10, 11, 12]), Box::new([20, 21])]),
        };
        assert_eq!(lines.line(0, 0xffff_fff0), 10);
        assert_eq!(lines.line(0, 0x0000_0000), 11);
        assert_eq!(lines.line(0, 0x0000_0010), 12);
        assert_eq!(lines.line(1, 0x1010), 21);
        // Past the end, below the base, or a key without a table: unknown.
        assert_eq!(lines.line(0, 0x0000_0020), 0);
        assert_eq!(lines.line(1, 0x0ff0), 0);
        assert_eq!(lines.line(2, 0), 0);
        // Without bases, locations are indexes.
        let indexes = FrameLines {
            bases: Box::new([]),
            shift: 0,
            ..lines
        };
        assert_eq!(indexes.line(1, 1), 21);
    }

    #[test]
    fn nested_views_restore_the_outer_one() {
        let (d1, d2) = (1usize, 1usize);
        let (r1, r2) = ([Record { base: 0, key: 0 }], [Record { base: 0, key: 1 }]);
        let view = |depth: &usize, records: &[Record]| FrameView {
            depth,
            records: records.as_ptr().cast(),
            first: 0,
            stride: size_of::<Record>(),
            key_offset: 8,
            ids: ids(&[12, 16]),
            lines: None,
        };
        // SAFETY: as above.
        let outer = unsafe { install_frame_view(view(&d1, &r1)) };
        {
            // SAFETY: as above.
            let _inner = unsafe { install_frame_view(view(&d2, &r2)) };
            assert_eq!(read_all(), Some(vec![16]));
        }
        assert_eq!(read_all(), Some(vec![12]));
        drop(outer);
    }

    #[test]
    #[should_panic(expected = "4-byte aligned")]
    fn unaligned_keys_are_refused() {
        let depth = 0usize;
        let records = [0u8; 16];
        // SAFETY: never read: installing panics.
        let _guard = unsafe {
            install_frame_view(FrameView {
                depth: &depth,
                records: records.as_ptr(),
                first: 0,
                stride: 6,
                key_offset: 0,
                ids: ids(&[]),
                lines: None,
            })
        };
    }
}
