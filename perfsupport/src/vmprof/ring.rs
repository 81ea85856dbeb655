//! The sample ring: a fixed, statically allocated buffer of words between
//! the signal handler (producer) and the writer thread (consumer).
//!
//! # Protocol
//!
//! * Storage is a `static` array of [`RING_WORDS`] atomic words, so the
//!   handler never allocates. `head` and `tail` count words written and
//!   read since the ring was reset; a word lives at `index % RING_WORDS`.
//! * A sample is `[weight, thread_id, cut, n, word_0 … word_{n-1}]`: its
//!   stack root first (ids, or `id, line` pairs in lines mode), and how
//!   many outer frames were cut from it.
//! * **One producer at a time.** Handlers on different threads may run at
//!   once, so a producer first claims [`SampleRing::try_claim`] (an atomic
//!   swap, never a wait). A handler that finds the ring claimed, or finds too
//!   little free space, drops its sample and counts it; it never blocks.
//! * The producer stores the words (relaxed), then publishes them with a
//!   release store of `head`. The consumer loads `head` with acquire, reads
//!   the words, then frees them with a release store of `tail`, which the
//!   producer loads with acquire before reusing space.
//! * Only atomics and plain loads/stores are used: no locks, no allocation,
//!   no system calls, so every producer-side method is async-signal-safe.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// Capacity of the ring in words (512 KiB): about 1.5 s of samples of depth
/// 40 at 1 kHz, far more than the writer's 100 ms drain period.
pub const RING_WORDS: usize = 1 << 16;
/// Words of a sample record before its ids.
pub const SAMPLE_HEADER_WORDS: usize = 4;

/// The ring; see the module docs for the protocol.
pub struct SampleRing {
    words: [AtomicUsize; RING_WORDS],
    head: AtomicUsize,
    tail: AtomicUsize,
    claimed: AtomicBool,
    dropped_full: AtomicU64,
    dropped_busy: AtomicU64,
}

/// One sample read from the ring.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RingSample {
    /// How many sampling periods this sample stands for (≥ 1).
    pub weight: usize,
    /// OS thread id of the sampled thread.
    pub thread_id: usize,
    /// Outer frames left out of the stack (0: none).
    pub cut: usize,
    /// Code ids, root first (`id, line` pairs in lines mode).
    pub stack: Vec<usize>,
}

impl SampleRing {
    /// An empty ring (const, for a `static`).
    pub const fn new() -> SampleRing {
        SampleRing {
            words: [const { AtomicUsize::new(0) }; RING_WORDS],
            head: AtomicUsize::new(0),
            tail: AtomicUsize::new(0),
            claimed: AtomicBool::new(false),
            dropped_full: AtomicU64::new(0),
            dropped_busy: AtomicU64::new(0),
        }
    }

    /// Claims the producer side. Returns false (and the caller must drop its
    /// sample) if another producer holds it. Async-signal-safe.
    #[inline]
    pub fn try_claim(&self) -> bool {
        !self.claimed.swap(true, Ordering::SeqCst)
    }

    /// Gives the producer side back.
    #[inline]
    pub fn release_claim(&self) {
        self.claimed.store(false, Ordering::SeqCst);
    }

    /// True while a producer holds the claim.
    pub fn is_claimed(&self) -> bool {
        self.claimed.load(Ordering::SeqCst)
    }

    /// Counts a sample dropped because another producer held the claim.
    /// Async-signal-safe.
    #[inline]
    pub fn count_busy_drop(&self) {
        self.dropped_busy.fetch_add(1, Ordering::Relaxed);
    }

    /// Samples dropped because the ring was full, since the last reset.
    pub fn dropped_full(&self) -> u64 {
        self.dropped_full.load(Ordering::Relaxed)
    }

    /// Samples dropped because the claim was held, since the last reset.
    pub fn dropped_busy(&self) -> u64 {
        self.dropped_busy.load(Ordering::Relaxed)
    }

    // ANCHOR: ring_push
    /// Appends one sample whose `len` words, root first, are `id_at(0)`,
    /// `id_at(1)`, …, with `cut` outer frames left out; the caller holds the
    /// claim. Returns false (and counts a drop) when the ring is too full.
    /// Async-signal-safe if `id_at` is.
    pub fn push_with(
        &self,
        weight: usize,
        thread_id: usize,
        cut: usize,
        len: usize,
        id_at: impl Fn(usize) -> usize,
    ) -> bool {
        let needed = SAMPLE_HEADER_WORDS.saturating_add(len);
        let head = self.head.load(Ordering::Relaxed);
        let tail = self.tail.load(Ordering::Acquire);
        if RING_WORDS.saturating_sub(head.wrapping_sub(tail)) < needed {
            self.dropped_full.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let store = |offset: usize, word: usize| {
            self.words[head.wrapping_add(offset) % RING_WORDS].store(word, Ordering::Relaxed);
        };
        store(0, weight);
        store(1, thread_id);
        store(2, cut);
        store(3, len);
        for i in 0..len {
            store(SAMPLE_HEADER_WORDS + i, id_at(i));
        }
        self.head
            .store(head.wrapping_add(needed), Ordering::Release);
        true
    }
    // ANCHOR_END: ring_push

    /// Appends one sample given as a slice, root first; see
    /// [`SampleRing::push_with`]. (The sampler uses `push_with`.)
    #[cfg(test)]
    pub fn push(&self, weight: usize, thread_id: usize, stack: &[usize]) -> bool {
        self.push_with(weight, thread_id, 0, stack.len(), |i| stack[i])
    }

    /// Moves every published sample to `out` and returns how many words
    /// that freed. Only one consumer may call it at a time.
    pub fn drain(&self, out: &mut Vec<RingSample>) -> usize {
        let head = self.head.load(Ordering::Acquire);
        let mut tail = self.tail.load(Ordering::Relaxed);
        let word = |at: usize| self.words[at % RING_WORDS].load(Ordering::Relaxed);
        while tail != head {
            let weight = word(tail);
            let thread_id = word(tail.wrapping_add(1));
            let cut = word(tail.wrapping_add(2));
            // The producer wrote `n` itself, and never more than fits.
            let n = word(tail.wrapping_add(3)).min(RING_WORDS - SAMPLE_HEADER_WORDS);
            let first = tail.wrapping_add(SAMPLE_HEADER_WORDS);
            let stack = (0..n).map(|i| word(first.wrapping_add(i))).collect();
            out.push(RingSample {
                weight,
                thread_id,
                cut,
                stack,
            });
            tail = first.wrapping_add(n);
        }
        let freed = tail.wrapping_sub(self.tail.load(Ordering::Relaxed));
        self.tail.store(tail, Ordering::Release);
        freed
    }

    /// Empties the ring and the drop counters. Only while no producer can run
    /// (sampling off and the claim free) and no consumer runs.
    pub fn reset(&self) {
        self.head.store(0, Ordering::SeqCst);
        self.tail.store(0, Ordering::SeqCst);
        self.dropped_full.store(0, Ordering::SeqCst);
        self.dropped_busy.store(0, Ordering::SeqCst);
    }
}

impl Default for SampleRing {
    fn default() -> SampleRing {
        SampleRing::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_round_trip_and_wrap_around() {
        let ring = Box::new(SampleRing::new());
        let stack: Vec<usize> = (0..1000).map(|i| 8 + 4 * i).collect();
        let mut out = Vec::new();
        // Many more words than the ring holds, drained as we go.
        for round in 0..200 {
            assert!(ring.push(round + 1, 7, &stack[..round % 50 + 1]));
            assert!(ring.push(1, 7, &stack));
            ring.drain(&mut out);
            assert_eq!(out.len(), 2);
            assert_eq!(out[0].weight, round + 1);
            assert_eq!(out[0].stack, &stack[..round % 50 + 1]);
            assert_eq!(out[1].stack, stack);
            out.clear();
        }
        assert_eq!(ring.dropped_full(), 0);
    }

    #[test]
    fn a_full_ring_drops_and_counts() {
        let ring = Box::new(SampleRing::new());
        let stack = vec![8usize; 1000];
        let fits = RING_WORDS / (SAMPLE_HEADER_WORDS + stack.len());
        for _ in 0..fits {
            assert!(ring.push(1, 1, &stack));
        }
        assert!(!ring.push(1, 1, &stack));
        assert_eq!(ring.dropped_full(), 1);
        let mut out = Vec::new();
        ring.drain(&mut out);
        assert_eq!(out.len(), fits);
        assert!(ring.push(1, 1, &stack));
    }

    #[test]
    fn the_claim_is_exclusive() {
        let ring = Box::new(SampleRing::new());
        assert!(ring.try_claim());
        assert!(!ring.try_claim());
        ring.release_claim();
        assert!(ring.try_claim());
    }
}
