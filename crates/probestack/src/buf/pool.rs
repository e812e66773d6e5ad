//! [`Pool`]: fixed-size blocks by class, each class a free list with a one-behind cache in
//! front (paper 002 §6.4), or every block from the global allocator (cache off).
//!
//! See the module documentation of [`crate::buf`] for the design, the zeroing rule and the
//! accounting rules.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::packet::{Block, PacketBuf, NO_POOL};
use super::{BufChain, BufError, Segment};

/// The headroom the stack reserves in a buffer it will send: a virtio-net header (12),
/// Ethernet (14), IPv4 with options (up to 60) and TCP with options (up to 60), rounded up
/// to three cache lines.
pub const HEADROOM: usize = 192;

/// Block size of [`Class::Small`].
pub const SMALL_SIZE: usize = 256;
/// Block size of [`Class::Cluster`].
pub const CLUSTER_SIZE: usize = 2048;
/// Block size of [`Class::Jumbo9k`].
pub const JUMBO9K_SIZE: usize = 9216;
/// Block size of [`Class::Jumbo64k`]: 64 KiB and 256 bytes more, so that the largest IPv4
/// datagram, its Ethernet header and [`HEADROOM`] fit in one block.
pub const JUMBO64K_SIZE: usize = 64 * 1024 + 256;

// The promises in the table of classes, checked when the crate compiles.
const _: () = assert!(65535 + 14 + HEADROOM <= JUMBO64K_SIZE);
const _: () = assert!(9000 + 14 + HEADROOM <= JUMBO9K_SIZE);
const _: () = assert!(1500 + 14 + HEADROOM <= CLUSTER_SIZE);
const _: () = assert!(64 + HEADROOM <= SMALL_SIZE);

/// A size class of the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Class {
    /// 256 bytes: headers, ACKs, small datagrams.
    Small,
    /// 2 KiB: a 1500-byte Ethernet frame.
    Cluster,
    /// 9 KiB: a 9000-byte jumbo frame.
    Jumbo9k,
    /// 64 KiB + 256: a 65535-byte IP datagram with its link header and headroom.
    Jumbo64k,
}

/// The number of classes.
const CLASSES: usize = 4;

impl Class {
    /// Every class, smallest first.
    pub const ALL: [Class; CLASSES] = [
        Class::Small,
        Class::Cluster,
        Class::Jumbo9k,
        Class::Jumbo64k,
    ];

    /// The size of the class's blocks in bytes.
    pub const fn size(self) -> usize {
        match self {
            Class::Small => SMALL_SIZE,
            Class::Cluster => CLUSTER_SIZE,
            Class::Jumbo9k => JUMBO9K_SIZE,
            Class::Jumbo64k => JUMBO64K_SIZE,
        }
    }

    /// The class's position in [`Class::ALL`] and in [`PoolStats::classes`].
    pub const fn index(self) -> usize {
        self as usize
    }

    pub const fn name(self) -> &'static str {
        match self {
            Class::Small => "small",
            Class::Cluster => "cluster",
            Class::Jumbo9k => "jumbo9k",
            Class::Jumbo64k => "jumbo64k",
        }
    }

    /// The smallest class whose blocks hold `bytes`, if any does.
    #[inline]
    pub const fn fitting(bytes: usize) -> Option<Class> {
        if bytes <= SMALL_SIZE {
            Some(Class::Small)
        } else if bytes <= CLUSTER_SIZE {
            Some(Class::Cluster)
        } else if bytes <= JUMBO9K_SIZE {
            Some(Class::Jumbo9k)
        } else if bytes <= JUMBO64K_SIZE {
            Some(Class::Jumbo64k)
        } else {
            None
        }
    }

    /// The class whose blocks are exactly `capacity` bytes, if any is.
    #[inline]
    pub const fn of_capacity(capacity: usize) -> Option<Class> {
        match capacity {
            SMALL_SIZE => Some(Class::Small),
            CLUSTER_SIZE => Some(Class::Cluster),
            JUMBO9K_SIZE => Some(Class::Jumbo9k),
            JUMBO64K_SIZE => Some(Class::Jumbo64k),
            _ => None,
        }
    }
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How a pool is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolConfig {
    /// The Tuning switch of the same name (paper 002 §6.4). On: free lists with a
    /// one-behind cache per class. Off: every block from the global allocator and back.
    pub buffer_cache: bool,
    /// The most bytes (counted in whole blocks) that may be outstanding at once; `alloc`
    /// beyond it returns [`BufError::Exhausted`]. `usize::MAX` is no limit.
    pub limit_bytes: usize,
    /// The most bytes each class keeps on its free list (the cache slot comes on top);
    /// blocks freed beyond it go back to the global allocator.
    pub max_free_bytes_per_class: usize,
}

impl PoolConfig {
    /// A pool with the cache on or off, no limit, and 4 MiB of free blocks per class.
    pub const fn new(buffer_cache: bool) -> PoolConfig {
        PoolConfig {
            buffer_cache,
            limit_bytes: usize::MAX,
            max_free_bytes_per_class: 4 << 20,
        }
    }

    /// The same, with a limit on the bytes outstanding.
    pub const fn with_limit(self, limit_bytes: usize) -> PoolConfig {
        PoolConfig {
            limit_bytes,
            ..self
        }
    }
}

impl Default for PoolConfig {
    /// The cache on, no limit.
    fn default() -> Self {
        PoolConfig::new(true)
    }
}

/// The counters of one class. `allocs` and `outstanding` are derived when read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassStats {
    /// Blocks handed out: `cache_hits + free_list_hits + global_allocs`.
    pub allocs: u64,
    /// Allocations served by the one-behind cache.
    pub cache_hits: u64,
    /// Allocations served by the free list.
    pub free_list_hits: u64,
    /// Allocations served by the global allocator (a new zeroed block).
    pub global_allocs: u64,
    /// Blocks this pool handed out that came back to it through [`Pool::free`].
    pub frees: u64,
    /// Blocks another pool handed out that were freed into this one (buffers that crossed
    /// threads), taken into this class.
    pub foreign_frees: u64,
    /// Blocks this pool stopped counting through [`Pool::detach`].
    pub detached: u64,
    /// Blocks given back to the global allocator on a free (cache off, or free list full
    /// and no room in the depot).
    pub global_frees: u64,
    /// Blocks handed to the shared [`Depot`] (free list full) and taken from it (free
    /// list empty), a magazine at a time.
    pub to_depot: u64,
    pub from_depot: u64,
    /// Allocations in this class refused by the limit.
    pub exhausted: u64,
    /// Blocks handed out and not yet freed or detached: `allocs - frees - detached`.
    pub outstanding: u64,
    /// Blocks waiting in the cache slot and on the free list.
    pub free_blocks: u64,
}

/// Everything a pool has counted, readable at any time ([`Pool::stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// The mode the pool is in.
    pub buffer_cache: bool,
    /// Per class, indexed by [`Class::index`]; see also [`PoolStats::class`].
    pub classes: [ClassStats; CLASSES],
    /// The sums over the classes of the per-class counters of the same name.
    pub allocs: u64,
    pub cache_hits: u64,
    pub free_list_hits: u64,
    pub global_allocs: u64,
    pub frees: u64,
    pub foreign_frees: u64,
    pub detached: u64,
    pub global_frees: u64,
    pub to_depot: u64,
    pub from_depot: u64,
    pub exhausted: u64,
    pub outstanding: u64,
    pub free_blocks: u64,
    /// Requests larger than the largest class.
    pub too_large: u64,
    /// Foreign blocks whose capacity matched no class, given to the global allocator.
    pub rejected_frees: u64,
    /// Bytes outstanding, counted in whole blocks.
    pub bytes_outstanding: usize,
    /// The most bytes ever outstanding at once.
    pub peak_bytes: usize,
    /// The limit in force (`usize::MAX`: none).
    pub limit_bytes: usize,
}

impl PoolStats {
    /// The counters of one class.
    pub fn class(&self, class: Class) -> &ClassStats {
        &self.classes[class.index()]
    }
}

/// One class: the cache slot, the free list, and the counters.
struct ClassState {
    size: usize,
    /// The one-behind cache: the block freed last.
    cache: Option<Block>,
    /// Blocks freed before it, last freed on top.
    free: Vec<Block>,
    /// The most blocks `free` may hold.
    max_free: usize,
    /// Blocks beyond `max_free`, gathered into a magazine for the depot.
    spill: Magazine,
    /// Counters; `allocs`, `outstanding` and `free_blocks` are filled in by `stats`.
    c: ClassStats,
}

impl ClassState {
    fn new(class: Class, max_free_bytes: usize) -> ClassState {
        ClassState {
            size: class.size(),
            cache: None,
            free: Vec::new(),
            max_free: max_free_bytes / class.size(),
            spill: Vec::new(),
            c: ClassStats::default(),
        }
    }

    /// A block from the global allocator, zeroed (its first use).
    #[inline]
    fn fresh(&mut self) -> Block {
        self.c.global_allocs += 1;
        Block::fresh(self.size)
    }

    /// Drops every block the class keeps.
    fn release(&mut self) {
        let n = self.free.len() + self.spill.len() + usize::from(self.cache.is_some());
        self.c.global_frees += n as u64;
        self.cache = None;
        self.free = Vec::new();
        self.spill = Vec::new();
    }
}

/// Blocks a depot moves at a time: one lock per this many frees or allocations.
pub const MAGAZINE: usize = 32;

/// The most blocks a class keeps on its free list when it has a depot to pass the rest to.
const KEEP_WITH_DEPOT: usize = 4 * MAGAZINE;

/// Free blocks shared by the pools of stacks that hand buffers to each other: Bonwick's
/// depot of full magazines (USENIX 2001), in front of the global allocator.
///
/// Frames on the memory link cross from one stack's pool to the other's without a copy,
/// so with traffic mostly one way the sender's pool only ever allocates and the receiver's
/// only ever frees: the sender would take every block fresh (zeroed) from the global
/// allocator and the receiver give its surplus back. With a depot, a pool whose free list
/// is full hands the surplus over a magazine at a time, and a pool whose free list is
/// empty takes a magazine before it goes to the allocator. The memory link gives both its
/// NICs one depot (see [`crate::driver::Device::buffer_depot`]).
#[derive(Clone)]
pub struct Depot(Arc<DepotInner>);

/// A magazine: up to [`MAGAZINE`] free blocks of one class.
type Magazine = Vec<Block>;

struct DepotInner {
    /// Full magazines, per class.
    classes: [Mutex<Vec<Magazine>>; CLASSES],
    /// The most magazines each class keeps.
    max: [usize; CLASSES],
}

impl Depot {
    /// A depot keeping at most `max_bytes_per_class` of blocks in each class.
    pub fn new(max_bytes_per_class: usize) -> Depot {
        Depot(Arc::new(DepotInner {
            classes: Default::default(),
            max: Class::ALL.map(|c| max_bytes_per_class / (c.size() * MAGAZINE)),
        }))
    }

    /// Stores a full magazine, or gives it back when the class has no room.
    fn put(&self, class: Class, magazine: Magazine) -> Result<(), Magazine> {
        let i = class.index();
        // A poisoned lock only means another thread panicked holding it; the list of
        // magazines is still whole.
        let mut m = self.0.classes[i].lock().unwrap_or_else(|e| e.into_inner());
        if m.len() >= self.0.max[i] {
            return Err(magazine);
        }
        m.push(magazine);
        Ok(())
    }

    /// A full magazine of `class`, if the depot has one.
    fn take(&self, class: Class) -> Option<Magazine> {
        let mut m = self.0.classes[class.index()]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        m.pop()
    }

    /// Blocks waiting in the depot, per class.
    pub fn blocks(&self) -> [usize; CLASSES] {
        Class::ALL.map(|c| {
            let m = self.0.classes[c.index()]
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            m.len() * MAGAZINE
        })
    }
}

impl Default for Depot {
    /// 16 MiB per class.
    fn default() -> Self {
        Depot::new(16 << 20)
    }
}

impl fmt::Debug for Depot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Depot")
            .field("blocks", &self.blocks())
            .finish()
    }
}

/// Pool ids start at 1; 0 is [`NO_POOL`].
static NEXT_POOL_ID: AtomicU64 = AtomicU64::new(1);

/// A pool of fixed-size blocks in four classes (see [`Class`]).
///
/// One pool per stack, used from the stack's thread; blocks may leave for another thread
/// and be freed into another pool.
pub struct Pool {
    id: u64,
    buffer_cache: bool,
    limit: usize,
    bytes: usize,
    peak: usize,
    too_large: u64,
    rejected: u64,
    classes: [ClassState; CLASSES],
    /// Shared with other pools, if any.
    depot: Option<Depot>,
}

impl Pool {
    pub fn new(config: PoolConfig) -> Pool {
        let m = config.max_free_bytes_per_class;
        Pool {
            id: NEXT_POOL_ID.fetch_add(1, Ordering::Relaxed),
            buffer_cache: config.buffer_cache,
            limit: config.limit_bytes,
            bytes: 0,
            peak: 0,
            too_large: 0,
            rejected: 0,
            classes: Class::ALL.map(|c| ClassState::new(c, m)),
            depot: None,
        }
    }

    /// A pool with the cache on or off and the other settings at their defaults.
    pub fn with_cache(buffer_cache: bool) -> Pool {
        Pool::new(PoolConfig::new(buffer_cache))
    }

    /// A buffer from the smallest class whose block holds `headroom + len` bytes, with a
    /// window of `len` bytes starting `headroom` bytes into the block; the rest of the
    /// block is tailroom.
    ///
    /// The window's bytes are zero if the block is new and whatever its last user left if
    /// it is reused: the caller writes all of them (see the module documentation).
    #[inline]
    pub fn alloc(&mut self, len: usize, headroom: usize) -> Result<PacketBuf, BufError> {
        let Some(class) = len.checked_add(headroom).and_then(Class::fitting) else {
            self.too_large += 1;
            return Err(BufError::TooLarge {
                need: len.saturating_add(headroom),
                max: JUMBO64K_SIZE,
            });
        };
        let state = &mut self.classes[class.index()];
        let size = state.size;
        if size > self.limit.saturating_sub(self.bytes) {
            state.c.exhausted += 1;
            return Err(BufError::Exhausted {
                need: size,
                outstanding: self.bytes,
                limit: self.limit,
            });
        }
        let block = if self.buffer_cache {
            if let Some(block) = state.cache.take() {
                state.c.cache_hits += 1;
                block
            } else if let Some(block) = state.free.pop() {
                state.c.free_list_hits += 1;
                block
            } else if let Some(mut magazine) = self.depot.as_ref().and_then(|d| d.take(class)) {
                state.c.from_depot += magazine.len() as u64;
                let block = magazine.pop();
                state.free = magazine;
                match block {
                    Some(block) => {
                        state.c.free_list_hits += 1;
                        block
                    }
                    None => state.fresh(),
                }
            } else {
                state.fresh()
            }
        } else {
            state.fresh()
        };
        self.bytes += size;
        if self.bytes > self.peak {
            self.peak = self.bytes;
        }
        Ok(PacketBuf::from_recycled(
            block,
            headroom,
            headroom + len,
            self.id,
        ))
    }

    /// Takes a buffer back. Its block goes to the class's cache slot (the block there
    /// before moves onto the free list) with the cache on, or to the global allocator with
    /// it off.
    ///
    /// A buffer another pool handed out is accepted into the class its capacity matches
    /// (counted as a foreign free; this pool's outstanding figures do not change); one whose
    /// capacity matches no class goes to the global allocator (counted as rejected).
    #[inline]
    pub fn free(&mut self, buf: PacketBuf) {
        let own = buf.origin() == self.id;
        let block = buf.into_recycled();
        let Some(class) = Class::of_capacity(block.capacity()) else {
            // Only a foreign block can be here: every block this pool hands out has the
            // size of a class.
            self.rejected += 1;
            return;
        };
        let state = &mut self.classes[class.index()];
        if own {
            state.c.frees += 1;
            self.bytes = self.bytes.saturating_sub(state.size);
        } else {
            state.c.foreign_frees += 1;
        }
        if self.buffer_cache {
            if let Some(older) = state.cache.replace(block) {
                // With a depot to share with, a class keeps a few magazines and passes
                // the rest on, so blocks circulate as soon as traffic is one way.
                let keep = match self.depot {
                    Some(_) => state.max_free.min(KEEP_WITH_DEPOT),
                    None => state.max_free,
                };
                if state.free.len() < keep {
                    state.free.push(older);
                } else if let Some(depot) = &self.depot {
                    // One allocation per magazine, not a doubling series of them (a
                    // magazine handed to the depot leaves an empty Vec behind).
                    if state.spill.capacity() == 0 {
                        state.spill.reserve_exact(MAGAZINE);
                    }
                    state.spill.push(older);
                    if state.spill.len() == MAGAZINE {
                        let magazine = std::mem::take(&mut state.spill);
                        match depot.put(class, magazine) {
                            Ok(()) => state.c.to_depot += MAGAZINE as u64,
                            Err(_) => state.c.global_frees += MAGAZINE as u64,
                        }
                    }
                } else {
                    state.c.global_frees += 1;
                }
            }
        } else {
            state.c.global_frees += 1;
        }
    }

    /// Frees every packet buffer in a chain (external segments are simply dropped).
    pub fn free_chain(&mut self, chain: BufChain) {
        for seg in chain {
            if let Segment::Packet(buf) = seg {
                self.free(buf);
            }
        }
    }

    /// Stops counting a buffer this pool handed out, because it leaves the stack: a frame
    /// handed over to another stack's thread, which will free it into its own pool, or a
    /// block turned into an [`super::ExtBuf`] for a zero-copy receive. A buffer this pool
    /// does not count is returned unchanged.
    pub fn detach(&mut self, mut buf: PacketBuf) -> PacketBuf {
        if buf.origin() == self.id {
            if let Some(class) = Class::of_capacity(buf.capacity()) {
                let state = &mut self.classes[class.index()];
                state.c.detached += 1;
                self.bytes = self.bytes.saturating_sub(state.size);
            }
            buf.set_origin(NO_POOL);
        }
        buf
    }

    /// Whether this pool handed `buf` out and still counts it.
    pub fn owns(&self, buf: &PacketBuf) -> bool {
        buf.origin() == self.id
    }

    /// Shares free blocks with other pools through `depot` (cache on only), or stops.
    pub fn set_depot(&mut self, depot: Option<Depot>) {
        self.depot = depot;
    }

    /// Whether the cache is on.
    pub fn buffer_cache(&self) -> bool {
        self.buffer_cache
    }

    /// Switches the cache on or off between experiments. Switching it off gives every
    /// waiting block back to the global allocator. Outstanding buffers stay valid and are
    /// freed under the new mode.
    pub fn set_buffer_cache(&mut self, on: bool) {
        if !on {
            self.release_free_blocks();
        }
        self.buffer_cache = on;
    }

    /// Changes the limit on bytes outstanding (`usize::MAX`: none). Buffers already out
    /// stay out; a lower limit only refuses new allocations.
    pub fn set_limit(&mut self, limit_bytes: usize) {
        self.limit = limit_bytes;
    }

    /// Gives every block waiting in a cache slot or on a free list back to the global
    /// allocator.
    pub fn release_free_blocks(&mut self) {
        for state in &mut self.classes {
            state.release();
        }
    }

    /// Resets the peak to the bytes outstanding now (between experiments).
    pub fn reset_peak(&mut self) {
        self.peak = self.bytes;
    }

    /// Every counter, at this moment.
    pub fn stats(&self) -> PoolStats {
        let mut s = PoolStats {
            buffer_cache: self.buffer_cache,
            too_large: self.too_large,
            rejected_frees: self.rejected,
            bytes_outstanding: self.bytes,
            peak_bytes: self.peak,
            limit_bytes: self.limit,
            ..PoolStats::default()
        };
        for (out, state) in s.classes.iter_mut().zip(&self.classes) {
            let mut c = state.c;
            c.allocs = c.cache_hits + c.free_list_hits + c.global_allocs;
            c.outstanding = c.allocs.saturating_sub(c.frees + c.detached);
            c.free_blocks =
                (state.free.len() + state.spill.len()) as u64 + u64::from(state.cache.is_some());
            *out = c;
        }
        for c in s.classes {
            s.allocs += c.allocs;
            s.cache_hits += c.cache_hits;
            s.free_list_hits += c.free_list_hits;
            s.global_allocs += c.global_allocs;
            s.frees += c.frees;
            s.foreign_frees += c.foreign_frees;
            s.detached += c.detached;
            s.global_frees += c.global_frees;
            s.to_depot += c.to_depot;
            s.from_depot += c.from_depot;
            s.exhausted += c.exhausted;
            s.outstanding += c.outstanding;
            s.free_blocks += c.free_blocks;
        }
        s
    }
}

impl Default for Pool {
    fn default() -> Self {
        Pool::new(PoolConfig::default())
    }
}

impl fmt::Debug for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pool")
            .field("buffer_cache", &self.buffer_cache)
            .field("bytes_outstanding", &self.bytes)
            .field("limit_bytes", &self.limit)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buf::ExtBuf;
    use std::collections::{HashMap, HashSet};

    /// A small deterministic generator, so the tests need no seed from outside.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    fn class_of(buf: &PacketBuf) -> Class {
        Class::of_capacity(buf.capacity()).unwrap()
    }

    /// The invariants every pool keeps, whatever happened.
    fn check_sums(p: &Pool) {
        let s = p.stats();
        let mut bytes = 0;
        for class in Class::ALL {
            let c = s.class(class);
            assert_eq!(c.allocs, c.cache_hits + c.free_list_hits + c.global_allocs);
            assert_eq!(c.allocs, c.frees + c.detached + c.outstanding, "{class}");
            bytes += c.outstanding as usize * class.size();
        }
        assert_eq!(s.bytes_outstanding, bytes);
        assert!(s.peak_bytes >= s.bytes_outstanding);
        assert_eq!(s.allocs, s.frees + s.detached + s.outstanding);
    }

    #[test]
    fn classes_are_chosen_smallest_first() {
        let mut p = Pool::default();
        let cases = [
            (0, 0, Class::Small),
            (SMALL_SIZE, 0, Class::Small),
            (SMALL_SIZE - HEADROOM, HEADROOM, Class::Small),
            (SMALL_SIZE - HEADROOM + 1, HEADROOM, Class::Cluster),
            (1500 + 14, HEADROOM, Class::Cluster),
            (CLUSTER_SIZE, 0, Class::Cluster),
            (CLUSTER_SIZE + 1, 0, Class::Jumbo9k),
            (9000 + 14, HEADROOM, Class::Jumbo9k),
            (JUMBO9K_SIZE, 0, Class::Jumbo9k),
            (JUMBO9K_SIZE, 1, Class::Jumbo64k),
            (65535 + 14, HEADROOM, Class::Jumbo64k),
            (0, JUMBO64K_SIZE, Class::Jumbo64k),
        ];
        for (len, headroom, class) in cases {
            let b = p.alloc(len, headroom).unwrap();
            assert_eq!(class_of(&b), class, "len {len} headroom {headroom}");
            assert_eq!((b.len(), b.headroom()), (len, headroom));
            assert_eq!(b.tailroom(), class.size() - len - headroom);
            assert!(b.data().iter().all(|&x| x == 0), "a new block is zeroed");
            p.free(b);
        }
        assert_eq!(Class::fitting(JUMBO64K_SIZE + 1), None);
        for (i, c) in Class::ALL.into_iter().enumerate() {
            assert_eq!(c.index(), i);
            assert_eq!(Class::of_capacity(c.size()), Some(c));
            assert_eq!(Class::fitting(c.size()), Some(c));
        }
        check_sums(&p);
    }

    #[test]
    fn the_largest_datagram_with_ethernet_and_headroom_fits_and_takes_every_header() {
        let mut p = Pool::default();
        let mut b = p.alloc(65535 - 20 - 20, HEADROOM).unwrap();
        b.prepend(20).unwrap(); // TCP
        b.prepend(20).unwrap(); // IPv4
        assert_eq!(b.len(), 65535);
        b.prepend(14).unwrap(); // Ethernet
        b.prepend(12).unwrap(); // virtio-net
        assert_eq!(class_of(&b), Class::Jumbo64k);
        p.free(b);
    }

    #[test]
    fn too_large_requests_are_refused_and_counted() {
        let mut p = Pool::default();
        assert_eq!(
            p.alloc(JUMBO64K_SIZE, 1).unwrap_err(),
            BufError::TooLarge {
                need: JUMBO64K_SIZE + 1,
                max: JUMBO64K_SIZE
            }
        );
        assert_eq!(
            p.alloc(usize::MAX, 1).unwrap_err(),
            BufError::TooLarge {
                need: usize::MAX,
                max: JUMBO64K_SIZE
            }
        );
        let s = p.stats();
        assert_eq!((s.too_large, s.allocs, s.bytes_outstanding), (2, 0, 0));
    }

    #[test]
    fn one_behind_cache_hands_out_the_block_just_freed() {
        let mut p = Pool::with_cache(true);
        let a = p.alloc(1000, 0).unwrap();
        let addr = a.block_addr();
        p.free(a);
        for _ in 0..10 {
            let b = p.alloc(1000, HEADROOM).unwrap();
            assert_eq!(b.block_addr(), addr);
            p.free(b);
        }
        let s = p.stats();
        assert_eq!(s.class(Class::Cluster).global_allocs, 1);
        assert_eq!(s.class(Class::Cluster).cache_hits, 10);
        assert_eq!(s.class(Class::Cluster).free_list_hits, 0);

        // Two out, two back: the last freed comes out of the cache, the other off the list.
        let a = p.alloc(1000, 0).unwrap();
        let b = p.alloc(1000, 0).unwrap();
        let (aa, ba) = (a.block_addr(), b.block_addr());
        assert_ne!(aa, ba);
        p.free(a);
        p.free(b);
        assert_eq!(p.alloc(1000, 0).unwrap().block_addr(), ba);
        assert_eq!(p.alloc(1000, 0).unwrap().block_addr(), aa);
        let c = *p.stats().class(Class::Cluster);
        assert_eq!(
            (c.cache_hits, c.free_list_hits, c.global_allocs),
            (12, 1, 2)
        );
    }

    #[test]
    fn cache_off_takes_every_block_from_the_global_allocator() {
        let mut p = Pool::with_cache(false);
        let mut b = p.alloc(10, 0).unwrap();
        b.data_mut().fill(0xAB);
        p.free(b);
        for _ in 0..5 {
            let b = p.alloc(10, 0).unwrap();
            assert_eq!(b.data(), &[0; 10], "a new block every time, zeroed");
            p.free(b);
        }
        let s = p.stats();
        assert!(!s.buffer_cache);
        assert_eq!((s.allocs, s.global_allocs, s.global_frees), (6, 6, 6));
        assert_eq!((s.cache_hits, s.free_list_hits, s.free_blocks), (0, 0, 0));
        check_sums(&p);
    }

    #[test]
    fn a_reused_block_is_not_zeroed_again() {
        // Documented behaviour: the caller writes every byte it sends.
        let mut p = Pool::with_cache(true);
        let mut b = p.alloc(4, 0).unwrap();
        b.data_mut().copy_from_slice(b"old!");
        p.free(b);
        let b = p.alloc(4, 0).unwrap();
        assert_eq!(b.data(), b"old!");
    }

    /// A randomized run of allocations and frees: no block is ever out twice, every byte a
    /// holder writes is still there when it frees (no one else was handed the block), the
    /// counters add up at every step, and at the end every block is back.
    fn random_run(config: PoolConfig, seed: u64) {
        let mut p = Pool::new(config);
        let mut rng = Rng(seed);
        let mut live: Vec<(PacketBuf, u8)> = Vec::new();
        let mut out: HashSet<usize> = HashSet::new();
        let mut seen: HashSet<usize> = HashSet::new();
        let mut per_class: HashMap<Class, u64> = HashMap::new();
        for step in 0..4000u32 {
            if live.is_empty() || rng.below(100) < 55 {
                let len = match rng.below(4) {
                    0 => rng.below(64),
                    1 => rng.below(1600),
                    2 => rng.below(9000),
                    _ => rng.below(65536),
                } as usize;
                let headroom = rng.below(HEADROOM as u64 + 1) as usize;
                let mut b = p.alloc(len, headroom).unwrap();
                let addr = b.block_addr();
                assert!(
                    out.insert(addr),
                    "step {step}: block {addr:#x} handed out twice"
                );
                seen.insert(addr);
                *per_class.entry(class_of(&b)).or_default() += 1;
                let mark = (step % 251) as u8;
                b.data_mut().fill(mark);
                live.push((b, mark));
            } else {
                let i = rng.below(live.len() as u64) as usize;
                let (b, mark) = live.swap_remove(i);
                assert!(
                    b.data().iter().all(|&x| x == mark),
                    "step {step}: overwritten"
                );
                assert!(out.remove(&b.block_addr()));
                *per_class.get_mut(&class_of(&b)).unwrap() -= 1;
                p.free(b);
            }
            let s = p.stats();
            for class in Class::ALL {
                let want = per_class.get(&class).copied().unwrap_or(0);
                assert_eq!(s.class(class).outstanding, want);
            }
            if step % 97 == 0 {
                check_sums(&p);
            }
        }
        for (b, _) in live.drain(..) {
            p.free(b);
        }
        check_sums(&p);
        let s = p.stats();
        assert_eq!((s.outstanding, s.bytes_outstanding), (0, 0));
        assert_eq!(s.allocs, s.frees);
        // Every block made is back: waiting in the pool or given to the global allocator.
        assert_eq!(s.global_allocs, s.free_blocks + s.global_frees);
        if config.buffer_cache && config.max_free_bytes_per_class == usize::MAX {
            // Free lists without a bound keep every block ever made.
            assert_eq!(s.global_frees, 0);
            assert_eq!(s.free_blocks, s.global_allocs);
            assert_eq!(s.global_allocs as usize, seen.len());
            assert!(s.cache_hits + s.free_list_hits > s.global_allocs);
        } else if config.buffer_cache {
            assert!(
                s.global_frees > 0,
                "the 4 MiB bound on jumbo blocks was reached"
            );
            assert!(s.cache_hits + s.free_list_hits > 0);
        } else {
            assert_eq!((s.cache_hits, s.free_list_hits, s.free_blocks), (0, 0, 0));
            assert_eq!(s.global_allocs, s.allocs);
            assert_eq!(s.global_frees, s.frees);
        }
    }

    #[test]
    fn random_alloc_free_with_the_cache_on() {
        let unbounded = PoolConfig {
            max_free_bytes_per_class: usize::MAX,
            ..PoolConfig::new(true)
        };
        for seed in [1, 0x9E37_79B9_7F4A_7C15, 0xDEAD_BEEF] {
            random_run(unbounded, seed);
            random_run(PoolConfig::new(true), seed);
        }
    }

    #[test]
    fn random_alloc_free_with_the_cache_off() {
        for seed in [2, 0x2545_F491_4F6C_DD1D] {
            random_run(PoolConfig::new(false), seed);
        }
    }

    #[test]
    fn the_limit_refuses_counts_and_recovers() {
        for cache in [true, false] {
            let mut p = Pool::new(PoolConfig::new(cache).with_limit(2 * CLUSTER_SIZE + 100));
            let a = p.alloc(1000, 0).unwrap();
            let b = p.alloc(1000, 0).unwrap();
            assert_eq!(
                p.alloc(1000, 0).unwrap_err(),
                BufError::Exhausted {
                    need: CLUSTER_SIZE,
                    outstanding: 2 * CLUSTER_SIZE,
                    limit: 2 * CLUSTER_SIZE + 100
                }
            );
            // A small block does not fit in the 100 bytes left either.
            assert!(matches!(
                p.alloc(10, 0),
                Err(BufError::Exhausted { need: 256, .. })
            ));
            let s = p.stats();
            assert_eq!(s.exhausted, 2);
            assert_eq!(s.class(Class::Cluster).exhausted, 1);
            assert_eq!(s.class(Class::Small).exhausted, 1);
            assert_eq!(s.allocs, 2);
            assert_eq!(s.peak_bytes, 2 * CLUSTER_SIZE);
            p.free(a);
            let c = p.alloc(1000, 0).unwrap();
            p.free(b);
            p.free(c);
            let s = p.stats();
            assert_eq!((s.bytes_outstanding, s.peak_bytes), (0, 2 * CLUSTER_SIZE));
            check_sums(&p);
            p.reset_peak();
            assert_eq!(p.stats().peak_bytes, 0);

            // Limit zero refuses everything; lowering below what is out refuses, no panic.
            p.set_limit(0);
            assert!(matches!(p.alloc(0, 0), Err(BufError::Exhausted { .. })));
            p.set_limit(usize::MAX);
            let big = p.alloc(60000, 0).unwrap();
            p.set_limit(1);
            assert!(matches!(p.alloc(0, 0), Err(BufError::Exhausted { .. })));
            p.free(big);
            check_sums(&p);
        }
    }

    #[test]
    fn free_lists_are_bounded() {
        let mut p = Pool::new(PoolConfig {
            max_free_bytes_per_class: 2 * CLUSTER_SIZE,
            ..PoolConfig::new(true)
        });
        let bufs: Vec<_> = (0..5).map(|_| p.alloc(1000, 0).unwrap()).collect();
        for b in bufs {
            p.free(b);
        }
        let c = *p.stats().class(Class::Cluster);
        // One in the cache slot, two on the list, two back to the global allocator.
        assert_eq!((c.free_blocks, c.global_frees), (3, 2));
        check_sums(&p);
    }

    #[test]
    fn a_depot_circulates_blocks_between_a_sender_and_a_receiver() {
        let config = PoolConfig {
            max_free_bytes_per_class: 2 * CLUSTER_SIZE,
            ..PoolConfig::new(true)
        };
        let depot = Depot::new(4 * MAGAZINE * CLUSTER_SIZE);
        let (mut sender, mut receiver) = (Pool::new(config), Pool::new(config));
        sender.set_depot(Some(depot.clone()));
        receiver.set_depot(Some(depot.clone()));
        // Traffic one way: the sender allocates (a burst), the receiver frees.
        let n = 3 + 2 * MAGAZINE;
        let burst: Vec<_> = (0..n).map(|_| sender.alloc(1000, 0).unwrap()).collect();
        for b in burst {
            receiver.free(sender.detach(b));
        }
        // The receiver keeps its cache slot and two on its list; the rest went to the
        // depot in two magazines, and nothing back to the global allocator.
        let r = *receiver.stats().class(Class::Cluster);
        assert_eq!((r.free_blocks, r.to_depot, r.global_frees), (3, 64, 0));
        assert_eq!(depot.blocks()[Class::Cluster.index()], 2 * MAGAZINE);
        // The sender's next allocations come out of the depot, not the allocator.
        let before = sender.stats().class(Class::Cluster).global_allocs;
        let bufs: Vec<_> = (0..MAGAZINE)
            .map(|_| sender.alloc(1000, 0).unwrap())
            .collect();
        let s = *sender.stats().class(Class::Cluster);
        assert_eq!((s.global_allocs, s.from_depot), (before, MAGAZINE as u64));
        assert_eq!(depot.blocks()[Class::Cluster.index()], MAGAZINE);
        for b in bufs {
            sender.free(b);
        }
        check_sums(&sender);
        check_sums(&receiver);

        // In steady one-way traffic the sender stops allocating fresh blocks at all.
        let before = sender.stats().class(Class::Cluster).global_allocs;
        for _ in 0..10 * MAGAZINE {
            let b = sender.alloc(1000, 0).unwrap();
            receiver.free(sender.detach(b));
        }
        let fresh = sender.stats().class(Class::Cluster).global_allocs - before;
        assert!(fresh <= 1, "{fresh} fresh blocks");

        // A full depot gives the surplus to the allocator.
        let full = Depot::new(MAGAZINE * CLUSTER_SIZE);
        receiver.set_depot(Some(full.clone()));
        for _ in 0..3 * MAGAZINE {
            let b = sender.alloc(1000, 0).unwrap();
            receiver.free(sender.detach(b));
        }
        assert_eq!(full.blocks()[Class::Cluster.index()], MAGAZINE);
        assert!(receiver.stats().class(Class::Cluster).global_frees >= MAGAZINE as u64);
    }

    #[test]
    fn switching_the_cache_off_releases_waiting_blocks() {
        let mut p = Pool::with_cache(true);
        let bufs: Vec<_> = (0..3).map(|_| p.alloc(10, 0).unwrap()).collect();
        let out = p.alloc(10, 0).unwrap();
        for b in bufs {
            p.free(b);
        }
        assert_eq!(p.stats().free_blocks, 3);
        p.set_buffer_cache(false);
        assert!(!p.buffer_cache());
        let s = p.stats();
        assert_eq!((s.free_blocks, s.global_frees), (0, 3));
        p.free(out);
        let s = p.stats();
        assert_eq!((s.free_blocks, s.global_frees, s.outstanding), (0, 4, 0));
        p.set_buffer_cache(true);
        let b = p.alloc(10, 0).unwrap();
        p.free(b);
        assert_eq!(p.stats().free_blocks, 1);
        check_sums(&p);
    }

    #[test]
    fn blocks_cross_threads_and_are_freed_into_the_other_pool() {
        let mut a = Pool::with_cache(true);
        let mut frame = a.alloc(1500, HEADROOM).unwrap();
        frame.data_mut()[0] = 0x45;
        let addr = frame.block_addr();
        assert!(a.owns(&frame));
        // The sending side stops counting the frame as it leaves.
        let frame = a.detach(frame);
        assert!(!a.owns(&frame));
        let (b_stats, reused) = std::thread::spawn(move || {
            let mut b = Pool::with_cache(true);
            assert!(!b.owns(&frame));
            assert_eq!(frame.data()[0], 0x45);
            b.free(frame);
            let again = b.alloc(1000, 0).unwrap();
            let reused = again.block_addr();
            assert!(b.owns(&again));
            b.free(again);
            (b.stats(), reused)
        })
        .join()
        .unwrap();
        assert_eq!(reused, addr, "the foreign block was taken into the class");
        let c = b_stats.class(Class::Cluster);
        assert_eq!((c.foreign_frees, c.frees, c.cache_hits), (1, 1, 1));
        assert_eq!((c.global_allocs, c.outstanding), (0, 0));
        let s = a.stats();
        assert_eq!((s.allocs, s.detached, s.outstanding), (1, 1, 0));
        assert_eq!(s.bytes_outstanding, 0);
        check_sums(&a);
    }

    #[test]
    fn a_foreign_block_freed_without_detach_leaves_its_origin_counting_it() {
        let mut a = Pool::with_cache(true);
        let mut b = Pool::with_cache(false);
        let x = a.alloc(10, 0).unwrap();
        b.free(x);
        assert_eq!(a.stats().outstanding, 1);
        let s = b.stats();
        assert_eq!((s.foreign_frees, s.global_frees, s.outstanding), (1, 1, 0));
        check_sums(&a);
        check_sums(&b);
    }

    #[test]
    fn buffers_made_by_hand_are_adopted_when_their_size_matches_a_class() {
        let mut p = Pool::with_cache(true);
        let odd = PacketBuf::new(100, 0, 0).unwrap();
        p.free(odd);
        let fits = PacketBuf::new(CLUSTER_SIZE - 64, 64, 0).unwrap();
        let addr = fits.block_addr();
        p.free(fits);
        let s = p.stats();
        assert_eq!(
            (s.rejected_frees, s.foreign_frees, s.free_blocks),
            (1, 1, 1)
        );
        assert_eq!(p.alloc(1, 0).unwrap().capacity(), SMALL_SIZE);
        assert_eq!(p.alloc(300, 0).unwrap().block_addr(), addr);
        // Detaching a buffer the pool does not count changes nothing.
        let other = PacketBuf::new(1, 0, 0).unwrap();
        let _ = p.detach(other);
        assert_eq!(p.stats().detached, 0);
    }

    #[test]
    fn a_dropped_buffer_stays_outstanding_and_the_pool_carries_on() {
        let mut p = Pool::with_cache(true);
        drop(p.alloc(100, 0).unwrap());
        let s = p.stats();
        assert_eq!((s.outstanding, s.bytes_outstanding), (1, SMALL_SIZE));
        let b = p.alloc(100, 0).unwrap();
        p.free(b);
        check_sums(&p);
    }

    #[test]
    fn free_chain_returns_the_packet_segments() {
        let mut p = Pool::with_cache(true);
        let mut chain = BufChain::new();
        chain.push_back(p.alloc(10, 0).unwrap());
        chain.push_back(ExtBuf::from(vec![1, 2, 3]));
        chain.push_back(p.alloc(3000, 0).unwrap());
        p.free_chain(chain);
        let s = p.stats();
        assert_eq!((s.frees, s.outstanding, s.free_blocks), (2, 0, 2));
    }

    #[test]
    fn every_pool_has_its_own_id() {
        let a = Pool::default();
        let b = Pool::default();
        assert_ne!(a.id, b.id);
        assert_ne!(a.id, NO_POOL);
        assert!(format!("{a:?}").contains("buffer_cache: true"));
    }
}
