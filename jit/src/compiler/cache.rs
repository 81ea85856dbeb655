//! The code cache's bookkeeping: which chunks of code memory each
//! function's compiled code lives in, which compiled code calls which
//! function directly, and which code to evict when a new batch needs room.
//!
//! Code is evicted in **units**: a function's *body* (its native function
//! and its entry shim) or its *OSR variant*. A unit may die only when
//! nothing can enter it any more:
//!
//! * **no activation runs in it**: the tiering policy passes the functions
//!   with a frame on the VM's stack (interpreted or compiled, OSR frames
//!   included), and no unit of those is chosen;
//! * **no compiled code calls it directly**: compiled callers call a
//!   compiled callee's native function by address, so evicting a body
//!   evicts every unit that calls it directly too (transitively); if one
//!   of those is running, none of them goes.
//!
//! Entry shims and OSR variants are reached only through the VM's entry
//! table and the policy's OSR cache, which the policy resets for every
//! evicted unit before it runs code again.
//!
//! **Which first**: memory is freed by the chunk (one batch's code), so the
//! cache picks a chunk and evicts every unit with code in it: the coldest
//! chunk, approximated by age. A unit's age is the time it was compiled or
//! last seen running at an eviction (a second chance, as the CLOCK
//! page-replacement algorithm gives), a chunk's the age of its warmest
//! unit. Compiled code counts nothing, so this is all the cache knows of
//! use; chunks holding only OSR variants a whole-function compile made
//! obsolete go first.

use std::collections::{HashMap, HashSet};

use crate::codegen::code_memory::ChunkId;

/// What a unit is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// The native function and the entry shim.
    Body,
    /// The OSR variant.
    Osr,
}

/// One function's unit of compiled code.
#[derive(Debug, Default)]
struct Unit {
    /// The chunk of each of its regions (a chunk may appear twice).
    chunks: Vec<ChunkId>,
    /// The functions whose body it calls directly.
    calls: Vec<u32>,
    /// When it was compiled or last seen running (see the module docs).
    age: u64,
}

/// One chunk as eviction sees it.
struct ChunkRank {
    /// The units with code in it.
    units: Vec<(u32, Kind)>,
    /// It holds only OSR variants made obsolete (these go first).
    all_obsolete: bool,
    /// The age of its warmest unit.
    age: u64,
}

/// Counts for `--jit-stats`.
#[derive(Clone, Copy, Debug, Default)]
pub struct CacheStats {
    /// Units (bodies or OSR variants) evicted to make room.
    pub evictions: u64,
    /// OSR variants freed because a whole-function compile made them
    /// obsolete.
    pub obsolete_freed: u64,
    /// Units compiled again after their eviction.
    pub recompiles: u64,
    /// Bytes of code memory given back.
    pub freed_bytes: u64,
    /// Most bytes of code memory held at once.
    pub peak_bytes: usize,
    /// Batches compiled and then dropped: they found no room under the
    /// limit (the policy bounds these, see `policy`).
    pub no_room: u64,
    /// Evictions and frees of obsolete OSR variants that gave bytes back.
    pub frees: u64,
}

/// The units of every function (see the module docs).
#[derive(Default)]
pub struct CodeCache {
    units: Vec<[Option<Unit>; 2]>,
    /// Units evicted and not compiled again yet.
    evicted: HashSet<(u32, Kind)>,
    clock: u64,
    /// Counts for `--jit-stats`.
    pub stats: CacheStats,
}

fn slot(kind: Kind) -> usize {
    match kind {
        Kind::Body => 0,
        Kind::Osr => 1,
    }
}

impl CodeCache {
    /// An empty cache for `functions` functions.
    pub fn new(functions: usize) -> CodeCache {
        CodeCache {
            units: (0..functions).map(|_| [None, None]).collect(),
            ..CodeCache::default()
        }
    }

    fn unit(&mut self, func: u32, kind: Kind) -> &mut Option<Unit> {
        &mut self.units[func as usize][slot(kind)]
    }

    /// Adds a region of `func`'s `kind` unit in `chunk`, whose code calls
    /// the bodies of `calls` directly.
    pub fn add(&mut self, func: u32, kind: Kind, chunk: ChunkId, calls: &[u32]) {
        self.clock += 1;
        let clock = self.clock;
        if self.evicted.remove(&(func, kind)) {
            self.stats.recompiles += 1;
        }
        let unit = self.unit(func, kind).get_or_insert_with(Unit::default);
        unit.chunks.push(chunk);
        unit.age = clock;
        for &c in calls {
            if c != func && !unit.calls.contains(&c) {
                unit.calls.push(c);
            }
        }
    }

    /// Notes the bytes held now (for the peak).
    pub fn held(&mut self, bytes: usize) {
        self.stats.peak_bytes = self.stats.peak_bytes.max(bytes);
    }

    /// Takes `func`'s `kind` unit out, `evicted` to make room (else it is
    /// obsolete): the chunks of its regions.
    pub fn remove(&mut self, func: u32, kind: Kind, evicted: bool) -> Vec<ChunkId> {
        let Some(unit) = self.unit(func, kind).take() else {
            return Vec::new();
        };
        if evicted {
            self.stats.evictions += 1;
            self.evicted.insert((func, kind));
        } else {
            self.stats.obsolete_freed += 1;
        }
        unit.chunks
    }

    // ANCHOR: victims
    // ANCHOR: victims
    /// The next units to evict: every unit with code in the coldest chunk
    /// that can be freed, with the units that must die with them (see the
    /// module docs), skipping chunks in `tried`. Memory is freed by the
    /// chunk (one batch's), so evicting a unit whose chunk keeps other live
    /// code would free nothing. `active[f]`: `f` has an activation.
    /// `obsolete(f)`: `f`'s OSR variant is obsolete (its chunk goes
    /// first). `None` when no chunk can be freed.
    pub fn victims(
        &mut self,
        active: &[bool],
        obsolete: impl Fn(u32) -> bool,
        tried: &mut HashSet<ChunkId>,
    ) -> Option<Vec<(u32, Kind)>> {
        let is_active = |f: u32| active.get(f as usize).copied().unwrap_or(true);
        // Units seen running get a second chance.
        self.clock += 1;
        for (f, units) in self.units.iter_mut().enumerate() {
            if is_active(f as u32) {
                for unit in units.iter_mut().flatten() {
                    unit.age = self.clock;
                }
            }
        }
        // Each chunk: the units with code in it, and its rank (a chunk is
        // as warm as its warmest unit; all-obsolete chunks first).
        let mut chunks: HashMap<ChunkId, ChunkRank> = HashMap::new();
        for (f, units) in self.units.iter().enumerate() {
            for (k, unit) in [Kind::Body, Kind::Osr].into_iter().zip(units) {
                let Some(unit) = unit else { continue };
                let first = k == Kind::Osr && obsolete(f as u32);
                for &c in &unit.chunks {
                    let rank = chunks.entry(c).or_insert(ChunkRank {
                        units: Vec::new(),
                        all_obsolete: true,
                        age: 0,
                    });
                    if !rank.units.contains(&(f as u32, k)) {
                        rank.units.push((f as u32, k));
                    }
                    rank.all_obsolete &= first;
                    rank.age = rank.age.max(unit.age);
                }
            }
        }
        let mut order: Vec<(bool, u64, ChunkId)> = (chunks.iter())
            .filter(|(c, _)| !tried.contains(c))
            .map(|(&c, rank)| (!rank.all_obsolete, rank.age, c))
            .collect();
        order.sort_unstable();
        for (_, _, c) in order {
            tried.insert(c);
            let mut all = Vec::new();
            for &(f, k) in &chunks[&c].units {
                for unit in self.with_direct_callers(f, k) {
                    if !all.contains(&unit) {
                        all.push(unit);
                    }
                }
            }
            if all.iter().all(|&(g, _)| !is_active(g)) {
                return Some(all);
            }
        }
        None
    }
    // ANCHOR_END: victims

    /// `(func, kind)` and every unit that calls it directly, transitively.
    fn with_direct_callers(&self, func: u32, kind: Kind) -> Vec<(u32, Kind)> {
        let mut all = vec![(func, kind)];
        let mut i = 0;
        while i < all.len() {
            let (callee, k) = all[i];
            i += 1;
            if k != Kind::Body {
                continue;
            }
            for (g, units) in self.units.iter().enumerate() {
                for (gk, unit) in [Kind::Body, Kind::Osr].into_iter().zip(units) {
                    let calls = unit.as_ref().is_some_and(|u| u.calls.contains(&callee));
                    if calls && !all.contains(&(g as u32, gk)) {
                        all.push((g as u32, gk));
                    }
                }
            }
        }
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_dies_with_its_direct_callers_and_never_while_running() {
        let mut cache = CodeCache::new(4);
        cache.add(0, Kind::Body, 1, &[]);
        cache.add(1, Kind::Body, 2, &[0]);
        cache.add(2, Kind::Osr, 3, &[1]);
        cache.add(3, Kind::Body, 4, &[]);
        let mut tried = HashSet::new();
        let none = [false; 4];
        // The oldest chunk is function 0's: its callers 1 and 2's variant
        // go too.
        let v = cache.victims(&none, |_| false, &mut tried).unwrap();
        assert_eq!(v, vec![(0, Kind::Body), (1, Kind::Body), (2, Kind::Osr)]);
        // With function 2 running, none of them may go: function 3 does.
        let mut tried = HashSet::new();
        let running = [false, false, true, false];
        let v = cache.victims(&running, |_| false, &mut tried).unwrap();
        assert_eq!(v, vec![(3, Kind::Body)]);
        let everything = [true; 4];
        assert!(
            cache
                .victims(&everything, |_| false, &mut HashSet::new())
                .is_none()
        );
    }

    #[test]
    fn obsolete_osr_variants_go_first() {
        let mut cache = CodeCache::new(2);
        cache.add(0, Kind::Body, 1, &[]);
        cache.add(1, Kind::Osr, 2, &[]);
        let v = cache.victims(&[false; 2], |f| f == 1, &mut HashSet::new());
        assert_eq!(v.unwrap(), vec![(1, Kind::Osr)]);
    }
}
