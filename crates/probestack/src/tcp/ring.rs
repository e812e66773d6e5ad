//! [`ByteRing`]: the fixed-capacity byte ring behind a TCP connection's send buffer and
//! receive buffer.
//!
//! The ring owns one block of storage, no longer than its capacity, and wraps at the
//! block's end. Counted from its **head**, the block holds, in order and wrapping around
//! its end:
//!
//! - the **readable** bytes, `[0, len)`: what the application has written and TCP has not
//!   yet seen acknowledged (send buffer), or what has arrived in order and the application
//!   has not yet read (receive buffer);
//! - the **free space**, `[len, capacity)`. Its bytes are not readable, but they may be
//!   written before they become readable ([`ByteRing::write_unreadable`],
//!   [`ByteRing::unreadable_slices_mut`]) and then made readable in one step
//!   ([`ByteRing::commit`]).
//!
//! # Roles
//!
//! As a **send buffer**, the application [`push`](ByteRing::push)es bytes; TCP reads the
//! bytes of each segment it sends with [`slices`](ByteRing::slices) at offset
//! `SEG.SEQ - SND.UNA`, and [`consume`](ByteRing::consume)s what an ACK acknowledges.
//!
//! As a **receive buffer** (RFC 9293 §3.10.7.4, "seventh, process the segment text"), the
//! free space is the receive window: `RCV.WND` is [`free`](ByteRing::free). Segment text
//! that starts at `RCV.NXT` is copied (and checksummed in the same pass) into
//! [`unreadable_slices_mut`](ByteRing::unreadable_slices_mut)`(0, n)`; text that starts
//! beyond `RCV.NXT` is held for later processing, as the RFC says it should, by writing it
//! at offset `SEG.SEQ - RCV.NXT` with [`write_unreadable`](ByteRing::write_unreadable)
//! while the [`Assembler`](super::assembler::Assembler) records which ranges arrived. When
//! the bytes up to some point are all present, [`commit`](ByteRing::commit) makes them
//! readable and `RCV.NXT` advances by as much. The application reads with
//! [`pop_into`](ByteRing::pop_into) (or `slices` then `consume`).
//!
//! # The head moves only by consuming
//!
//! Offsets into the free space are counted from the readable end, which is
//! `head + len`. Some rings reset the head to 0 whenever they become empty, to keep the
//! next copies contiguous; this one never does, because the free space may hold
//! out-of-order bytes that have been written but not yet committed, and moving the head
//! would move the readable end away from them. So the head moves only when bytes are
//! consumed (or popped), by exactly their number, and a move into a new block (as the
//! storage grows, or [`ByteRing::set_capacity`] shrinks it) rebuilds the ring with the
//! head at 0, keeping both the readable bytes and the uncommitted bytes after them. The
//! price is that readable bytes may wrap, so readers always take two slices.
//!
//! [`push`](ByteRing::push) writes into the same free space as `write_unreadable`, so it
//! overwrites uncommitted bytes where it writes (and the uncommitted bytes further on
//! then sit that much closer to the readable end). A ring serves as a send buffer or as a
//! receive buffer, not both.
//!
//! # Storage on demand
//!
//! The block is allocated as the bytes in use first reach past it, not with the ring: a
//! write or commit that needs bytes beyond it moves the ring into a new block at least
//! twice as long (the first at least [`FIRST_BLOCK`], none longer than the capacity),
//! head at 0, readable and uncommitted bytes kept in order. So a connection that moves a
//! few kilobytes holds a few kilobytes, however large its buffers may grow, and opening
//! one costs no zeroing of a megabyte of storage (which touched every page: about 512
//! page faults per connection end at the default 1 MiB buffers). A ring that fills its
//! capacity allocates about log2(capacity / [`FIRST_BLOCK`]) times in all and copies less
//! than its capacity doing so; after that, nothing.
//!
//! # Cost and safety
//!
//! Every copy is at most two `copy_from_slice` calls and there are no per-byte loops. No
//! method panics: every offset and length is clamped to what exists (readable bytes for
//! reads, free space for unreadable writes), and a capacity of 0 works (everything
//! returns 0 or empty slices). A capacity beyond what the address space allows is
//! refused: `new` then gives a ring of capacity 0 and `set_capacity` returns `false`. If
//! a block cannot be allocated when it is needed, writes and commits take only what the
//! block it has holds (and say so in what they return).

use std::fmt;

/// The least storage a ring allocates when it first needs any.
pub const FIRST_BLOCK: usize = 4096;

/// A fixed-capacity ring of bytes: readable bytes from the head, then free space that can
/// be written before it is made readable (see the [module documentation](self)).
#[derive(Clone)]
pub struct ByteRing {
    /// The ring's storage, allocated on demand, never longer than `capacity`; the ring
    /// wraps at its end.
    storage: Box<[u8]>,
    /// The most bytes the ring holds.
    capacity: usize,
    /// Index in `storage` of the first readable byte (`< storage.len()`, or 0 when the
    /// storage is empty).
    head: usize,
    /// Number of readable bytes (`<= storage.len() <= capacity`).
    len: usize,
}

/// A span of the ring as physical positions in its storage: `first` bytes from `start`,
/// then `second` bytes from index 0 (non-zero only when the span wraps).
#[derive(Clone, Copy)]
struct PhysicalSpan {
    start: usize,
    first: usize,
    second: usize,
}

/// Whether a block of `capacity` bytes fits the address space (Rust's limit on any
/// allocation).
fn addressable(capacity: usize) -> bool {
    isize::try_from(capacity).is_ok()
}

/// Allocates zeroed storage of exactly `capacity` bytes, or `None` if that is impossible.
fn allocate(capacity: usize) -> Option<Box<[u8]>> {
    let mut storage = Vec::new();
    storage.try_reserve_exact(capacity).ok()?;
    storage.resize(capacity, 0);
    Some(storage.into_boxed_slice())
}

/// Copies `src` into the two pieces `dst` (which together are exactly `src.len()` long).
#[inline]
fn copy_into_pieces((first, second): (&mut [u8], &mut [u8]), src: &[u8]) {
    let (src_first, src_second) = src.split_at(first.len());
    first.copy_from_slice(src_first);
    // Most spans do not wrap: no call into `memcpy` for nothing (a dozen instructions).
    if !second.is_empty() {
        second.copy_from_slice(src_second);
    }
}

/// Copies the two pieces `src` into the front of `dst` (at least as long as both).
#[inline]
fn copy_from_pieces((first, second): (&[u8], &[u8]), dst: &mut [u8]) -> usize {
    let total = first.len() + second.len();
    let (dst_first, dst_second) = dst[..total].split_at_mut(first.len());
    dst_first.copy_from_slice(first);
    if !second.is_empty() {
        dst_second.copy_from_slice(second);
    }
    total
}

impl ByteRing {
    /// An empty ring holding up to `capacity` bytes, its storage not yet allocated. A
    /// capacity beyond what the address space allows gives a ring of capacity 0.
    pub fn new(capacity: usize) -> ByteRing {
        ByteRing {
            storage: Box::default(),
            capacity: if addressable(capacity) { capacity } else { 0 },
            head: 0,
            len: 0,
        }
    }

    /// A ring whose storage starts as a block of `block` bytes (at most the capacity),
    /// so that tests see it grow in small steps.
    #[cfg(test)]
    fn with_block(capacity: usize, block: usize) -> ByteRing {
        let mut ring = ByteRing::new(capacity);
        ring.storage = allocate(block.min(ring.capacity)).unwrap_or_default();
        ring
    }

    /// The most bytes the ring holds.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes of storage allocated so far (at most the capacity).
    pub fn allocated(&self) -> usize {
        self.storage.len()
    }

    /// Makes the storage reach at least `needed` bytes past the head (clamped to the
    /// capacity): a new block of the larger of `needed` and twice the old block (the
    /// first at least [`FIRST_BLOCK`]), holding the old block's bytes in order from the
    /// head, at index 0. Nothing changes if the block cannot be allocated.
    #[cold]
    #[inline(never)]
    fn grow(&mut self, needed: usize) {
        let old = self.storage.len();
        let size = if old == 0 {
            needed.max(FIRST_BLOCK)
        } else {
            needed.max(old.saturating_mul(2))
        }
        .min(self.capacity);
        if size <= old {
            return;
        }
        self.move_into(size);
    }

    /// Moves the ring into a new block of `size` bytes: as many of the old block's bytes
    /// as fit, in order from the head, at index 0. Returns `false`, changing nothing, if
    /// the block cannot be allocated.
    fn move_into(&mut self, size: usize) -> bool {
        let Some(mut storage) = allocate(size) else {
            return false;
        };
        let kept = size.min(self.storage.len());
        copy_from_pieces(self.pieces(0, kept), &mut storage);
        self.storage = storage;
        self.head = 0;
        true
    }

    /// The number of readable bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no byte is readable.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The free space after the readable bytes: `capacity - len` (the receive window when
    /// the ring is a receive buffer).
    #[inline]
    pub fn free(&self) -> usize {
        self.capacity - self.len
    }

    /// Changes the capacity, keeping the readable bytes and, after them, as many of the
    /// free space's bytes (written but uncommitted data) as the new capacity holds.
    /// Returns `false`, changing nothing, if `len` exceeds `capacity`, the capacity is
    /// beyond what the address space allows, or the storage cannot be allocated. Setting
    /// the current capacity changes nothing; a smaller one than the storage allocated
    /// moves the ring into a block of the new capacity, head at 0.
    pub fn set_capacity(&mut self, capacity: usize) -> bool {
        if self.len > capacity || !addressable(capacity) {
            return false;
        }
        if capacity < self.storage.len() && !self.move_into(capacity) {
            return false;
        }
        self.capacity = capacity;
        true
    }

    /// Appends as much of `data` as fits in the free space; returns the number of bytes
    /// appended. Overwrites uncommitted bytes where it writes (see the
    /// [module documentation](self)).
    #[inline]
    pub fn push(&mut self, data: &[u8]) -> usize {
        let appended = data.len().min(self.free());
        copy_into_pieces(self.unreadable_slices_mut(0, appended), &data[..appended]);
        self.len += appended;
        appended
    }

    /// The readable bytes in `[offset, offset + len)` counted from the head, as at most two
    /// contiguous slices (the second empty unless the bytes wrap around the storage's end;
    /// the first non-empty whenever the second is). Clamped to the readable bytes.
    #[inline]
    pub fn slices(&self, offset: usize, len: usize) -> (&[u8], &[u8]) {
        let start = offset.min(self.len);
        let len = len.min(self.len - start);
        self.pieces(start, len)
    }

    /// Removes `n` bytes from the front (clamped to `len`); returns the number removed.
    /// The head advances by exactly that many (it never jumps back to 0 on its own).
    #[inline]
    pub fn consume(&mut self, n: usize) -> usize {
        let removed = n.min(self.len);
        self.head = self.physical(removed);
        self.len -= removed;
        removed
    }

    /// Copies bytes from the front into `dst` (as many as are readable and fit) and
    /// removes them; returns the number copied.
    pub fn pop_into(&mut self, dst: &mut [u8]) -> usize {
        let copied = self.peek_at(0, dst);
        self.consume(copied)
    }

    /// Copies into `dst` the readable bytes starting `offset` after the head, as many as
    /// are readable and fit, without removing them; returns the number copied.
    pub fn peek_at(&self, offset: usize, dst: &mut [u8]) -> usize {
        copy_from_pieces(self.slices(offset, dst.len()), dst)
    }

    /// The free space in `[offset, offset + len)` counted from the end of the readable
    /// bytes, as at most two mutable contiguous slices (the second empty unless the space
    /// wraps around the storage's end). Clamped to the free space. Writing there does not
    /// make the bytes readable; [`commit`](ByteRing::commit) does. The receive path writes
    /// out-of-order segment text here, and copies (and checksums) in-order text here
    /// before committing it.
    #[inline]
    pub fn unreadable_slices_mut(&mut self, offset: usize, len: usize) -> (&mut [u8], &mut [u8]) {
        let free = self.free();
        let start = offset.min(free);
        let len = len.min(free - start);
        let end = self.len + start + len;
        let (start, len) = if end > self.storage.len() {
            self.grow(end);
            // Clamped again in case the block could not grow.
            let room = self.storage.len() - self.len;
            let start = start.min(room);
            (start, len.min(room - start))
        } else {
            (start, len)
        };
        let span = self.span(self.len + start, len);
        // A wrapped piece lies wholly before `span.start`, so one split serves both.
        let (low, high) = self.storage.split_at_mut(span.start);
        (&mut high[..span.first], &mut low[..span.second])
    }

    /// Copies `data` into the free space starting `offset` after the readable end,
    /// without making it readable; returns the number of bytes written (clamped to the
    /// free space).
    #[inline]
    pub fn write_unreadable(&mut self, offset: usize, data: &[u8]) -> usize {
        let (first, second) = self.unreadable_slices_mut(offset, data.len());
        let written = first.len() + second.len();
        copy_into_pieces((first, second), &data[..written]);
        written
    }

    /// Makes the next `n` bytes of the free space readable (clamped to the free space);
    /// returns the number made readable. Their content is whatever was last written there.
    #[inline]
    pub fn commit(&mut self, n: usize) -> usize {
        let mut committed = n.min(self.free());
        if self.len + committed > self.storage.len() {
            self.grow(self.len + committed);
            committed = committed.min(self.storage.len() - self.len);
        }
        self.len += committed;
        committed
    }

    /// The bytes of the logical span `[start, start + len)` counted from the head
    /// (`start + len <= storage.len()`), readable or not, as two pieces.
    #[inline]
    fn pieces(&self, start: usize, len: usize) -> (&[u8], &[u8]) {
        let span = self.span(start, len);
        (
            &self.storage[span.start..span.start + span.first],
            &self.storage[..span.second],
        )
    }

    /// The storage index of the byte `logical` positions after the head
    /// (`logical <= storage.len()`).
    #[inline]
    fn physical(&self, logical: usize) -> usize {
        // head < storage.len() (or both are 0) and logical <= storage.len(), so the sum
        // is below twice that (no overflow: storage is at most isize::MAX bytes) and one
        // subtraction wraps it.
        let position = self.head + logical;
        if position >= self.storage.len() {
            position - self.storage.len()
        } else {
            position
        }
    }

    /// The physical pieces of the logical span `[start, start + len)` counted from the head
    /// (`start + len <= storage.len()`).
    #[inline]
    fn span(&self, start: usize, len: usize) -> PhysicalSpan {
        let physical_start = self.physical(start);
        let first = len.min(self.storage.len() - physical_start);
        PhysicalSpan {
            start: physical_start,
            first,
            second: len - first,
        }
    }
}

impl fmt::Debug for ByteRing {
    /// The ring's shape, not its bytes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ByteRing")
            .field("capacity", &self.capacity)
            .field("head", &self.head)
            .field("len", &self.len)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::{BTreeMap, VecDeque};

    /// A distinct byte for each position, so misplaced bytes show.
    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    /// A ring of `capacity` whose head sits at `head`, empty.
    fn ring_with_head(capacity: usize, head: usize) -> ByteRing {
        let mut ring = ByteRing::new(capacity);
        assert_eq!(ring.push(&vec![0xee; head]), head);
        assert_eq!(ring.consume(head), head);
        assert!(ring.is_empty());
        ring
    }

    fn joined((first, second): (&[u8], &[u8])) -> Vec<u8> {
        [first, second].concat()
    }

    #[test]
    fn capacity_zero_does_nothing_and_never_panics() {
        let mut ring = ByteRing::new(0);
        assert_eq!((ring.capacity(), ring.len(), ring.free()), (0, 0, 0));
        assert!(ring.is_empty());
        assert_eq!(ring.push(b"abc"), 0);
        assert_eq!(ring.commit(5), 0);
        assert_eq!(ring.write_unreadable(0, b"abc"), 0);
        assert_eq!(ring.write_unreadable(usize::MAX, b"abc"), 0);
        assert_eq!(ring.consume(usize::MAX), 0);
        assert_eq!(ring.pop_into(&mut [0; 4]), 0);
        assert_eq!(ring.peek_at(usize::MAX, &mut [0; 4]), 0);
        assert_eq!(ring.slices(0, usize::MAX), (&[][..], &[][..]));
        let (a, b) = ring.unreadable_slices_mut(usize::MAX, usize::MAX);
        assert!(a.is_empty() && b.is_empty());
        assert!(ring.set_capacity(0));
        assert!(ring.set_capacity(4));
        assert_eq!(ring.push(b"abcdef"), 4);
        assert!(!ring.set_capacity(0));
    }

    #[test]
    fn push_pop_clamp_to_capacity_and_length() {
        let mut ring = ByteRing::new(5);
        assert_eq!(ring.push(b"abc"), 3);
        assert_eq!(ring.push(b"defg"), 2);
        assert_eq!((ring.len(), ring.free()), (5, 0));
        assert_eq!(ring.push(b"h"), 0);
        let mut dst = [0; 2];
        assert_eq!(ring.pop_into(&mut dst), 2);
        assert_eq!(&dst, b"ab");
        assert_eq!(ring.push(b"hijk"), 2);
        let mut all = [0; 9];
        assert_eq!(ring.peek_at(0, &mut all), 5);
        assert_eq!(&all[..5], b"cdehi");
        assert_eq!(ring.peek_at(3, &mut all), 2);
        assert_eq!(&all[..2], b"hi");
        assert_eq!(ring.peek_at(5, &mut all), 0);
        assert_eq!(ring.peek_at(usize::MAX, &mut all), 0);
        assert_eq!(joined(ring.slices(1, usize::MAX)), b"dehi");
        assert_eq!(joined(ring.slices(usize::MAX, usize::MAX)), b"");
        assert_eq!(ring.consume(usize::MAX), 5);
        assert!(ring.is_empty());
        assert_eq!(ring.commit(usize::MAX), 5);
        assert_eq!(ring.commit(1), 0);
    }

    /// Every capacity up to 9, every head position, every fill: the readable bytes read
    /// back right through `slices` (every sub-range), `peek_at` and `pop_into`, split at
    /// the storage's end.
    #[test]
    fn readable_bytes_wrap_at_every_boundary() {
        for capacity in 1..=9 {
            for head in 0..capacity {
                for fill in 0..=capacity {
                    let data = pattern(fill, head as u8);
                    let mut ring = ring_with_head(capacity, head);
                    assert_eq!(ring.push(&data), fill);
                    let (first, second) = ring.slices(0, usize::MAX);
                    assert_eq!(first.len(), fill.min(capacity - head));
                    assert_eq!(second.len(), fill - first.len());
                    for offset in 0..=fill + 1 {
                        for len in 0..=fill + 1 {
                            let from = offset.min(fill);
                            let to = (from + len).min(fill);
                            let (a, b) = ring.slices(offset, len);
                            assert!(b.is_empty() || !a.is_empty());
                            assert_eq!(joined((a, b)), &data[from..to]);
                            let mut dst = vec![0; len];
                            assert_eq!(ring.peek_at(offset, &mut dst), to - from);
                            assert_eq!(&dst[..to - from], &data[from..to]);
                        }
                    }
                    let mut dst = vec![0; fill + 2];
                    assert_eq!(ring.pop_into(&mut dst), fill);
                    assert_eq!(&dst[..fill], &data[..]);
                    assert!(ring.is_empty());
                    assert_eq!(ring.free(), capacity);
                }
            }
        }
    }

    /// Every capacity up to 8, head, readable fill, offset into the free space and write
    /// length: the uncommitted bytes land where committing then reads them.
    #[test]
    fn unreadable_writes_wrap_at_every_boundary() {
        for capacity in 1..=8 {
            for head in 0..capacity {
                for fill in 0..=capacity {
                    let free = capacity - fill;
                    for offset in 0..=free + 1 {
                        for len in 0..=free + 1 {
                            let mut ring = ring_with_head(capacity, head);
                            let readable = pattern(fill, 7);
                            ring.push(&readable);
                            let data = pattern(len, 101);
                            let expected = len.min(free - offset.min(free));
                            {
                                let (a, b) = ring.unreadable_slices_mut(offset, len);
                                assert_eq!(a.len() + b.len(), expected);
                                assert!(b.is_empty() || !a.is_empty());
                            }
                            assert_eq!(ring.write_unreadable(offset, &data), expected);
                            assert_eq!(ring.len(), fill);
                            assert_eq!(joined(ring.slices(0, usize::MAX)), readable);
                            let start = offset.min(free);
                            assert_eq!(ring.commit(start + expected), start + expected);
                            let mut all = vec![0; capacity];
                            assert_eq!(ring.peek_at(0, &mut all), fill + start + expected);
                            assert_eq!(&all[..fill], &readable[..]);
                            assert_eq!(&all[fill + start..][..expected], &data[..expected]);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn uncommitted_bytes_survive_the_ring_emptying() {
        let mut ring = ring_with_head(8, 5);
        ring.push(b"abc");
        // Out-of-order bytes two past the readable end, wrapping the storage's end.
        assert_eq!(ring.write_unreadable(2, b"XYZ"), 3);
        assert_eq!(ring.pop_into(&mut [0; 3]), 3);
        assert!(ring.is_empty());
        // The head did not jump back: the bytes are still two past the readable end.
        assert_eq!(ring.write_unreadable(0, b"mn"), 2);
        assert_eq!(ring.commit(5), 5);
        let mut all = [0; 5];
        assert_eq!(ring.pop_into(&mut all), 5);
        assert_eq!(&all, b"mnXYZ");
    }

    #[test]
    fn push_overwrites_uncommitted_bytes_where_it_writes() {
        let mut ring = ByteRing::new(6);
        ring.write_unreadable(0, b"uvwxyz");
        assert_eq!(ring.push(b"ab"), 2);
        assert_eq!(ring.commit(2), 2);
        let mut all = [0; 4];
        assert_eq!(ring.peek_at(0, &mut all), 4);
        assert_eq!(&all, b"abwx");
    }

    #[test]
    fn set_capacity_keeps_readable_and_uncommitted_bytes() {
        let mut ring = ring_with_head(6, 4);
        ring.push(b"abcd");
        ring.write_unreadable(0, b"ef");
        assert!(ring.set_capacity(10));
        assert_eq!((ring.capacity(), ring.len(), ring.free()), (10, 4, 6));
        // A larger capacity allocates nothing until the bytes reach past the block.
        assert_eq!(ring.allocated(), 6);
        assert_eq!(joined(ring.slices(0, usize::MAX)), b"abcd");
        assert_eq!(ring.write_unreadable(2, b"ghij"), 4);
        assert_eq!(ring.commit(usize::MAX), 6);
        assert_eq!(joined(ring.slices(0, usize::MAX)), b"abcdefghij");

        // Shrinking below the readable bytes fails and changes nothing.
        assert!(!ring.set_capacity(9));
        assert_eq!(joined(ring.slices(0, usize::MAX)), b"abcdefghij");
        assert_eq!(ring.consume(7), 7);
        ring.write_unreadable(0, b"klmnop");
        // Shrinking keeps the readable bytes and the uncommitted bytes that still fit.
        assert!(ring.set_capacity(5));
        assert_eq!((ring.capacity(), ring.len(), ring.free()), (5, 3, 2));
        assert_eq!(ring.commit(usize::MAX), 2);
        assert_eq!(joined(ring.slices(0, usize::MAX)), b"hijkl");
        // The same capacity is a no-op that succeeds.
        assert!(ring.set_capacity(5));
        assert_eq!(joined(ring.slices(0, usize::MAX)), b"hijkl");
    }

    /// Storage on demand: a connection's worth of small exchanges stays in the first
    /// block; filling the ring grows it to the capacity, bytes in order throughout.
    #[test]
    fn storage_grows_only_as_far_as_the_bytes_reach() {
        let capacity = 1 << 20;
        let mut ring = ByteRing::new(capacity);
        assert_eq!(
            (ring.capacity(), ring.allocated(), ring.free()),
            (capacity, 0, capacity)
        );
        let mut out = [0u8; 100];
        for i in 0..10_000u32 {
            let msg = pattern(100, i as u8);
            assert_eq!(ring.push(&msg), 100);
            assert_eq!(ring.pop_into(&mut out), 100);
            assert_eq!(out[..], msg[..]);
        }
        assert_eq!(ring.allocated(), FIRST_BLOCK);
        // Out-of-order bytes far ahead, then the ring filled: the block grows, the bytes
        // written before it grew are where they were put.
        assert_eq!(ring.write_unreadable(capacity - 10, &[7; 10]), 10);
        assert_eq!(ring.allocated(), capacity);
        let fill = pattern(capacity - 10, 3);
        assert_eq!(ring.push(&fill), capacity - 10);
        assert_eq!(ring.commit(usize::MAX), 10);
        let all = joined(ring.slices(0, usize::MAX));
        assert_eq!(&all[..capacity - 10], &fill[..]);
        assert_eq!(&all[capacity - 10..], &[7; 10]);
    }

    #[test]
    fn impossible_capacities_are_refused_not_panicked_on() {
        let ring = ByteRing::new(usize::MAX);
        assert_eq!(ring.capacity(), 0);
        let mut ring = ByteRing::new(4);
        ring.push(b"ab");
        assert!(!ring.set_capacity(usize::MAX));
        assert_eq!((ring.capacity(), ring.len()), (4, 2));
        assert_eq!(
            format!("{ring:?}"),
            "ByteRing { capacity: 4, head: 0, len: 2 }"
        );
    }

    /// One step of the random sequences.
    #[derive(Clone, Debug)]
    enum Op {
        Push(Vec<u8>),
        Consume(usize),
        Pop(usize),
        Peek(usize, usize),
        Slices(usize, usize),
        WriteUnreadable(usize, Vec<u8>),
        Commit(usize),
        SetCapacity(usize),
    }

    /// Mostly small amounts, sometimes an absurd one.
    fn amount() -> impl Strategy<Value = usize> {
        prop_oneof![6 => 0usize..80, 1 => Just(usize::MAX)]
    }

    fn op() -> impl Strategy<Value = Op> {
        let bytes = || proptest::collection::vec(any::<u8>(), 0..80);
        prop_oneof![
            4 => bytes().prop_map(Op::Push),
            2 => amount().prop_map(Op::Consume),
            2 => (0usize..80).prop_map(Op::Pop),
            2 => (amount(), 0usize..80).prop_map(|(o, l)| Op::Peek(o, l)),
            2 => (amount(), amount()).prop_map(|(o, l)| Op::Slices(o, l)),
            4 => (amount(), bytes()).prop_map(|(o, d)| Op::WriteUnreadable(o, d)),
            3 => amount().prop_map(Op::Commit),
            1 => (0usize..100).prop_map(Op::SetCapacity),
        ]
    }

    /// The ring as a deque of readable bytes (`None`: content never written, so
    /// unspecified) and a sparse map of uncommitted bytes keyed by offset past the
    /// readable end.
    struct Model {
        capacity: usize,
        readable: VecDeque<Option<u8>>,
        uncommitted: BTreeMap<usize, u8>,
    }

    impl Model {
        fn free(&self) -> usize {
            self.capacity - self.readable.len()
        }

        /// The readable end moved `n` bytes on: uncommitted offsets shift down.
        fn shift_uncommitted(&mut self, n: usize) {
            self.uncommitted = std::mem::take(&mut self.uncommitted)
                .into_iter()
                .filter(|&(offset, _)| offset >= n)
                .map(|(offset, byte)| (offset - n, byte))
                .collect();
        }
    }

    /// Readable bytes agree wherever the model knows them.
    fn agrees(actual: &[u8], expected: impl IntoIterator<Item = Option<u8>>) -> bool {
        let expected: Vec<_> = expected.into_iter().collect();
        actual.len() == expected.len()
            && actual
                .iter()
                .zip(&expected)
                .all(|(a, e)| e.is_none_or(|e| e == *a))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn random_sequences_match_a_deque_model(
            capacity in 0usize..64,
            block in 0usize..8,
            ops in proptest::collection::vec(op(), 0..120),
        ) {
            // From a block of 1 to 7 bytes the storage doubles many times, with bytes
            // wrapped round the block's end (0: as `new`, one step to the capacity).
            let mut ring = ByteRing::with_block(capacity, block);
            let mut model = Model {
                capacity,
                readable: VecDeque::new(),
                uncommitted: BTreeMap::new(),
            };
            for op in ops {
                match op {
                    Op::Push(data) => {
                        let n = data.len().min(model.free());
                        prop_assert_eq!(ring.push(&data), n);
                        model.readable.extend(data[..n].iter().copied().map(Some));
                        model.shift_uncommitted(n);
                    }
                    Op::Consume(k) => {
                        let n = k.min(model.readable.len());
                        prop_assert_eq!(ring.consume(k), n);
                        model.readable.drain(..n);
                    }
                    Op::Pop(k) => {
                        let n = k.min(model.readable.len());
                        let mut dst = vec![0; k];
                        prop_assert_eq!(ring.pop_into(&mut dst), n);
                        prop_assert!(agrees(&dst[..n], model.readable.drain(..n)));
                    }
                    Op::Peek(offset, k) => {
                        let from = offset.min(model.readable.len());
                        let n = k.min(model.readable.len() - from);
                        let mut dst = vec![0; k];
                        prop_assert_eq!(ring.peek_at(offset, &mut dst), n);
                        let expected = model.readable.range(from..from + n).copied();
                        prop_assert!(agrees(&dst[..n], expected));
                    }
                    Op::Slices(offset, k) => {
                        let from = offset.min(model.readable.len());
                        let n = k.min(model.readable.len() - from);
                        let (a, b) = ring.slices(offset, k);
                        prop_assert!(b.is_empty() || !a.is_empty());
                        let expected = model.readable.range(from..from + n).copied();
                        prop_assert!(agrees(&joined((a, b)), expected));
                    }
                    Op::WriteUnreadable(offset, data) => {
                        let from = offset.min(model.free());
                        let n = data.len().min(model.free() - from);
                        prop_assert_eq!(ring.write_unreadable(offset, &data), n);
                        for (i, &byte) in data[..n].iter().enumerate() {
                            model.uncommitted.insert(from + i, byte);
                        }
                    }
                    Op::Commit(k) => {
                        let n = k.min(model.free());
                        prop_assert_eq!(ring.commit(k), n);
                        for i in 0..n {
                            let byte = model.uncommitted.get(&i).copied();
                            model.readable.push_back(byte);
                        }
                        model.shift_uncommitted(n);
                    }
                    Op::SetCapacity(c) => {
                        let fits = model.readable.len() <= c;
                        prop_assert_eq!(ring.set_capacity(c), fits);
                        if fits {
                            model.capacity = c;
                            let room = model.free();
                            model.uncommitted.retain(|&offset, _| offset < room);
                        }
                    }
                }
                prop_assert_eq!(ring.capacity(), model.capacity);
                prop_assert_eq!(ring.len(), model.readable.len());
                prop_assert_eq!(ring.free(), model.free());
                prop_assert_eq!(ring.is_empty(), model.readable.is_empty());
                let readable = joined(ring.slices(0, usize::MAX));
                prop_assert!(agrees(&readable, model.readable.iter().copied()));
                let unreadable = {
                    let (a, b) = ring.unreadable_slices_mut(0, usize::MAX);
                    [&a[..], &b[..]].concat()
                };
                prop_assert_eq!(unreadable.len(), model.free());
                for (&offset, &byte) in &model.uncommitted {
                    prop_assert_eq!(unreadable[offset], byte);
                }
            }
        }
    }
}
