//! [`SendBuffer`]: a TCP connection's send buffer, holding copied bytes and loaned memory
//! (zero-copy send, paper 004 §3.1).
//!
//! The stream waiting to be acknowledged is, in order, the bytes in a [`ByteRing`] (what
//! the application wrote with a copy) and then a queue of [`ExtBuf`]s: memory the
//! application loaned, and blocks the buffer copied writes into to send them by reference
//! ([`push_shared`](SendBuffer::push_shared), `Tuning::tcp_send_by_reference`). TCP reads
//! the bytes of a segment at offset `SEG.SEQ - SND.UNA` with [`SendBuffer::pieces`]: ring
//! bytes as slices to copy, queued bytes as `ExtBuf` slices the frame carries by reference
//! to the device. An acknowledgment [`consume`](SendBuffer::consume)s from the front; a
//! loan's last reference goes when its last byte is acknowledged and no frame in flight
//! still holds it, which is the application's completion
//! ([`crate::buf::Loan::is_complete`]).
//!
//! Order is kept by one rule: the ring is used only while nothing is queued behind it. A
//! copying write that comes after a loan becomes a block of its own (a copy into a new
//! block, as the ring would have made), so bytes never overtake each other.
//!
//! **Shared blocks.** Sending by reference, a write is copied into blocks of
//! [`SHARED_BLOCK`] bytes, which segments then carry as fragments, uncopied, to a device
//! that gathers them (or, over an in-memory device that hands frames across, to the
//! receiving stack, which can keep them by reference too): the sender copies each byte
//! once, as 4.4BSD's `sosend` did into mbuf clusters that `tcp_output` then shared with
//! the driver (`m_copym`), where the ring costs a second copy into every frame. A block
//! grows while no segment holds a slice of it and, once acknowledged and let go by
//! everyone, is emptied and reused (its pages stay warm and nothing is allocated). Writes
//! under [`SHARED_WRITE_MIN`] use the ring while it may, or a block of their own size (a
//! shared block holds at least that much, so the blocks of a full buffer take at most four
//! times its capacity, and the spares kept for reuse twice more).
//!
//! Queued bytes count against the buffer's capacity like the ring's: `SO_SNDBUF` bounds
//! the memory the application has pinned in the stack.

use std::collections::VecDeque;

use super::ring::ByteRing;
use crate::buf::ExtBuf;
use crate::checksum::{self, Accumulator, Kernel};

/// The capacity of a block a write is copied into to be sent by reference: 64 KiB, the
/// data of the largest super-segment.
pub const SHARED_BLOCK: usize = 64 * 1024;

/// The smallest write (or rest of one) that gets a block of its own to be sent by
/// reference; smaller ones go to the ring while nothing is queued behind it, else into a
/// block of their own size.
pub const SHARED_WRITE_MIN: usize = SHARED_BLOCK / 4;

/// The size of the pieces whose sums a shared block keeps when its bytes are summed as
/// they are copied in and the writer names no segment size ([`Cuts`]): a segment's
/// checksum is then the sums of the whole pieces it holds plus its two ends summed (less
/// than a piece each).
pub const SUM_PIECE: usize = 2048;

/// Where the writer expects its segments to be cut: at buffer offset `next` and every
/// `every` bytes after (SND.MAX's offset and the segment's data size, for a sender whose
/// segments are full). A block's pieces then follow those cuts, one piece a segment, so
/// that a segment cut there is summed from its one piece's kept sum, no data read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cuts {
    pub next: usize,
    pub every: usize,
}

/// A block's pieces: `len` bytes each, the first one `len - offset` long (so that the
/// boundaries fall where [`Cuts`] said segments would start), the block offset `x` in
/// piece `(x + offset) / len`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Grid {
    len: usize,
    offset: usize,
}

impl Grid {
    const FIXED: Grid = Grid {
        len: SUM_PIECE,
        offset: 0,
    };

    /// For a block whose first byte is at buffer offset `start`.
    fn for_block(cuts: Option<Cuts>, start: usize) -> Grid {
        match cuts.filter(|c| c.every > 0) {
            Some(Cuts { next, every }) => {
                // The first cut at or after the block's start is `phase` bytes into it.
                let phase = (next % every + every - start % every) % every;
                Grid {
                    len: every,
                    offset: (every - phase) % every,
                }
            }
            None => Grid::FIXED,
        }
    }

    /// The piece holding block offset `x`, and its bounds.
    fn piece(self, x: usize) -> (usize, usize, usize) {
        let j = (x + self.offset) / self.len;
        let start = (j * self.len).saturating_sub(self.offset);
        (j, start, (j + 1) * self.len - self.offset)
    }
}

/// A part of the stream for one segment: bytes to copy, loaned bytes, or bytes the buffer
/// copied into a shared block (with their RFC 1071 sum when the block kept its pieces'
/// sums and the walk asked for it), the last two to send by reference.
#[derive(Debug)]
pub enum Piece<'a> {
    Copy(&'a [u8]),
    Loaned(ExtBuf),
    Shared(ExtBuf, Option<u16>),
}

/// Bytes queued behind the ring.
#[derive(Debug)]
struct Queued {
    data: ExtBuf,
    /// A block the buffer copied into (not the application's loan).
    own: bool,
    /// The sums of the block's pieces ([`Grid`]), kept while every byte copied into it
    /// was summed on the way.
    sums: Option<Vec<u16>>,
    grid: Grid,
}

/// The send buffer: copied bytes, then loaned ones and shared blocks (see the module
/// documentation).
pub struct SendBuffer {
    ring: ByteRing,
    queue: VecDeque<Queued>,
    queued: usize,
    loaned: usize,
    /// Acknowledged [`SHARED_BLOCK`]s (with their sums' memory), for reuse once nothing
    /// holds them.
    spares: VecDeque<Queued>,
}

impl SendBuffer {
    pub fn new(capacity: usize) -> SendBuffer {
        SendBuffer {
            ring: ByteRing::new(capacity),
            queue: VecDeque::new(),
            queued: 0,
            loaned: 0,
            spares: VecDeque::new(),
        }
    }

    pub fn capacity(&self) -> usize {
        self.ring.capacity()
    }

    /// Bytes queued (sent or not, not yet acknowledged).
    pub fn len(&self) -> usize {
        self.ring.len() + self.queued
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Room for more, copied or loaned.
    pub fn free(&self) -> usize {
        self.capacity().saturating_sub(self.len())
    }

    /// Bytes of the queue that are loaned memory.
    pub fn loaned(&self) -> usize {
        self.loaned
    }

    /// Copies in as much of `data` as fits; returns how much.
    pub fn push(&mut self, data: &[u8]) -> usize {
        if self.queue.is_empty() {
            return self.ring.push(data);
        }
        let n = data.len().min(self.free());
        if n > 0 {
            self.push_block(ExtBuf::new(data[..n].to_vec()));
        }
        n
    }

    /// Copies in as much of `data` as fits, into shared blocks to be sent by reference
    /// (see the module documentation); returns how much. With `sum`, the bytes are summed
    /// as they are copied, with that kernel, and the blocks keep their pieces' sums for
    /// the segments' checksums ([`for_each_piece`](Self::for_each_piece)), pieces cut
    /// where `cuts` says segments will be (else every [`SUM_PIECE`] bytes).
    #[inline(never)]
    pub fn push_shared(&mut self, data: &[u8], sum: Option<Kernel>, cuts: Option<Cuts>) -> usize {
        let n = data.len().min(self.free());
        if !self.writes_shared(data.len()) {
            return self.ring.push(data);
        }
        let mut rest = &data[..n];
        // The last block grows while no segment holds a slice of it.
        if let Some(last) = self.queue.back_mut().filter(|q| q.own) {
            let k = last.append(rest, sum);
            rest = &rest[k..];
            self.queued += k;
        }
        while !rest.is_empty() {
            let mut block = if rest.len() >= SHARED_WRITE_MIN {
                self.spare_block()
            } else {
                Queued {
                    data: ExtBuf::with_capacity(rest.len()),
                    own: true,
                    sums: Some(Vec::new()),
                    grid: Grid::FIXED,
                }
            };
            block.grid = Grid::for_block(cuts, self.len());
            let k = block.append(rest, sum);
            rest = &rest[k..];
            self.queued += k;
            self.queue.push_back(block);
        }
        n
    }

    /// Whether [`push_shared`](Self::push_shared) copies a write of `len` bytes into
    /// shared blocks: one of at least [`SHARED_WRITE_MIN`] (what fits of it), or any
    /// behind a queue; else it goes to the ring.
    #[inline]
    pub fn writes_shared(&self, len: usize) -> bool {
        len.min(self.free()) >= SHARED_WRITE_MIN || !self.queue.is_empty()
    }

    /// A [`SHARED_BLOCK`], empty: the spare acknowledged last if nothing holds it any
    /// more (its bytes are the likeliest still in the cache), else the oldest if nothing
    /// holds that (a receiver that kept slices by reference may hold the newer ones
    /// still), else a new one.
    fn spare_block(&mut self) -> Queued {
        for newest in [true, false] {
            let spare = if newest {
                self.spares.pop_back()
            } else {
                self.spares.pop_front()
            };
            if let Some(mut q) = spare {
                if q.data.reset_exclusive() {
                    q.sums.get_or_insert_with(Vec::new).clear();
                    return q;
                }
                self.spares.push_back(q);
            }
        }
        Queued {
            data: ExtBuf::with_capacity(SHARED_BLOCK),
            own: true,
            sums: Some(Vec::new()),
            grid: Grid::FIXED,
        }
    }

    fn push_block(&mut self, data: ExtBuf) {
        self.queued += data.len();
        self.queue.push_back(Queued {
            data,
            own: true,
            sums: None,
            grid: Grid::FIXED,
        });
    }

    /// Queues as much of the loaned `data` as fits, without copying; returns how much.
    pub fn push_loan(&mut self, data: &ExtBuf) -> usize {
        let n = data.len().min(self.free());
        if n > 0 {
            // A slice of the caller's range: the same block, one more reference.
            if let Ok(part) = data.slice(..n) {
                self.queue.push_back(Queued {
                    data: part,
                    own: false,
                    sums: None,
                    grid: Grid::FIXED,
                });
                self.queued += n;
                self.loaned += n;
            }
        }
        n
    }

    /// Drops `n` acknowledged bytes from the front; returns how many went.
    #[inline]
    pub fn consume(&mut self, n: usize) -> usize {
        let from_ring = self.ring.consume(n);
        let mut left = n - from_ring;
        while left > 0 {
            let Some(front) = self.queue.front_mut() else {
                break;
            };
            let k = left.min(front.data.len());
            self.queued -= k;
            if !front.own {
                self.loaned -= k;
            }
            left -= k;
            if k < front.data.len() {
                let _ = front.data.trim_front(k);
                break;
            }
            if let Some(q) = self.queue.pop_front() {
                self.retire(q);
            }
        }
        n - left
    }

    /// Keeps an acknowledged shared block for reuse, enough of them for a full buffer
    /// and as many again held elsewhere (the oldest let go past that).
    fn retire(&mut self, q: Queued) {
        if q.own && q.data.block_capacity() == SHARED_BLOCK {
            if self.spares.len() >= 2 * self.capacity().div_ceil(SHARED_BLOCK) {
                self.spares.pop_front();
            }
            self.spares.push_back(q);
        }
    }

    /// How many of the bytes `offset..offset + len` are copied ones (they come first).
    pub fn copied_part(&self, offset: usize, len: usize) -> usize {
        let len = len.min(self.len().saturating_sub(offset));
        len.min(self.ring.len().saturating_sub(offset))
    }

    /// The bytes `offset..offset + len` of the queue, in order, clamped to what is
    /// queued: ring bytes as at most two slices to copy, queued bytes as slices sharing
    /// their blocks.
    pub fn pieces(&self, offset: usize, len: usize) -> Vec<Piece<'_>> {
        let mut out = Vec::new();
        self.for_each_piece(offset, len, None, |p| out.push(p));
        out
    }

    /// [`pieces`](Self::pieces) without collecting them. With `sum`, a shared block's
    /// slice comes with its sum where the block kept its pieces' sums (the whole pieces'
    /// sums added, the ends summed with that kernel).
    pub fn for_each_piece<'a>(
        &'a self,
        offset: usize,
        len: usize,
        sum: Option<Kernel>,
        mut f: impl FnMut(Piece<'a>),
    ) {
        let ring_len = self.ring.len();
        let mut offset = offset;
        let mut len = len.min(self.len().saturating_sub(offset));
        if offset < ring_len {
            let here = len.min(ring_len - offset);
            let (a, b) = self.ring.slices(offset, here);
            for s in [a, b] {
                if !s.is_empty() {
                    f(Piece::Copy(s));
                }
            }
            len -= here;
            offset = 0;
        } else {
            offset -= ring_len;
        }
        self.for_each_queued(offset, len, sum, |s, own, total| {
            f(if own {
                Piece::Shared(s, total)
            } else {
                Piece::Loaned(s)
            })
        });
    }

    /// The queued bytes `offset..offset + len` (offsets into the queue, behind the ring),
    /// each slice of a block handed to `f` with whether the buffer copied it (a shared
    /// block) or it is loaned, and, with `sum`, a shared slice's sum where its block kept
    /// its pieces' sums. The walk [`for_each_piece`](Self::for_each_piece) makes, without
    /// its [`Piece`]: TCP output's attaching of slices (`attach_queued`) took a fifth of
    /// its time at MTU 1500 waiting on a load of that enum, built on the stack and copied
    /// in two halves on its way into the closure, a load spanning two stores.
    #[inline]
    pub fn for_each_queued(
        &self,
        offset: usize,
        len: usize,
        sum: Option<Kernel>,
        mut f: impl FnMut(ExtBuf, bool, Option<u16>),
    ) {
        let (mut offset, mut len) = (offset, len);
        for q in &self.queue {
            if len == 0 {
                break;
            }
            if offset >= q.data.len() {
                offset -= q.data.len();
                continue;
            }
            let here = len.min(q.data.len() - offset);
            if let Ok(s) = q.data.slice(offset..offset + here) {
                let total = match (q.own, sum, &q.sums) {
                    (true, Some(kernel), Some(sums)) => {
                        let written = q.data.block_offset() + q.data.len();
                        Some(slice_sum(kernel, sums, q.grid, &s, written))
                    }
                    _ => None,
                };
                f(s, q.own, total);
            }
            len -= here;
            offset = 0;
        }
    }

    /// Bytes copied into the ring, ahead of the queue.
    pub fn ring_len(&self) -> usize {
        self.ring.len()
    }
}

impl Queued {
    /// Copies as much of `bytes` into the block as it has room for, if nothing else
    /// holds it; returns how many. With `sum`, summed on the way into the pieces' sums;
    /// without, the block stops keeping sums (they would no longer cover it).
    fn append(&mut self, bytes: &[u8], sum: Option<Kernel>) -> usize {
        let at = self.data.block_offset() + self.data.len();
        match (sum, self.sums.as_mut()) {
            (Some(kernel), Some(sums)) => {
                let grid = self.grid;
                self.data.append_exclusive_with(bytes, |dst, src| {
                    copy_summing(kernel, sums, grid, at, dst, src)
                })
            }
            _ => {
                let k = self.data.append_exclusive(bytes);
                if k > 0 {
                    self.sums = None;
                }
                k
            }
        }
    }
}

/// Copies `src` into `dst`, the block's bytes from block offset `at` on, adding its sums
/// to `sums`, the block's pieces' (the last one perhaps partial, and completed here).
fn copy_summing(
    kernel: Kernel,
    sums: &mut Vec<u16>,
    grid: Grid,
    at: usize,
    dst: &mut [u8],
    src: &[u8],
) {
    let mut done = 0;
    while done < src.len() {
        let (_, start, end) = grid.piece(at + done);
        let within = at + done - start;
        let k = (end - (at + done)).min(src.len() - done);
        let s = checksum::copy_and_sum_with(kernel, &mut dst[done..done + k], &src[done..done + k]);
        match sums.last_mut() {
            Some(last) if within != 0 => *last = checksum::combine_at(*last, s, within),
            _ => sums.push(s),
        }
        done += k;
    }
}

/// The RFC 1071 sum of `slice`, a slice of a block whose pieces' sums are `sums` and whose
/// bytes up to block offset `written` are written: a piece it holds whole (to `written`,
/// for the piece still being written) by its kept sum, any other part summed.
fn slice_sum(kernel: Kernel, sums: &[u16], grid: Grid, slice: &ExtBuf, written: usize) -> u16 {
    let bytes = slice.as_slice();
    let at = slice.block_offset();
    let end = at + bytes.len();
    let mut acc = Accumulator::new();
    let mut x = at;
    while x < end {
        let (j, start, stop) = grid.piece(x);
        let to = stop.min(end);
        let part = &bytes[x - at..to - at];
        match sums.get(j) {
            Some(&s) if x == start && (to == stop || to == written) => acc.add_sum(s, part.len()),
            _ => acc.add_with(kernel, part),
        }
        x = to;
    }
    acc.sum()
}

impl std::fmt::Debug for SendBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendBuffer")
            .field("copied", &self.ring.len())
            .field("queued", &self.queued)
            .field("loaned", &self.loaned)
            .field("spares", &self.spares.len())
            .field("capacity", &self.capacity())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buf::Loan;

    /// The bytes `offset..offset + len` as the pieces give them.
    fn read(b: &SendBuffer, offset: usize, len: usize) -> Vec<u8> {
        let mut v = Vec::new();
        b.for_each_piece(offset, len, None, |p| match p {
            Piece::Copy(s) => v.extend_from_slice(s),
            Piece::Loaned(e) | Piece::Shared(e, _) => v.extend_from_slice(&e),
        });
        v
    }

    #[test]
    fn copies_and_loans_keep_their_order_and_a_loan_completes_when_acknowledged() {
        let mut b = SendBuffer::new(100);
        let loan = Loan::new((100..140u8).collect::<Vec<_>>());
        assert_eq!(b.push(&[1, 2, 3]), 3);
        assert_eq!(b.push_loan(&loan.ext()), 40);
        assert_eq!(b.push(&[7, 8]), 2, "after a loan a copy queues behind it");
        assert_eq!((b.len(), b.loaned(), b.free()), (45, 40, 55));
        let mut want = vec![1, 2, 3];
        want.extend(100..140u8);
        want.extend([7, 8]);
        assert_eq!(read(&b, 0, 45), want);
        assert_eq!(read(&b, 2, 5), want[2..7]);
        assert_eq!(
            (
                b.copied_part(0, 45),
                b.copied_part(2, 5),
                b.copied_part(5, 9)
            ),
            (3, 1, 0)
        );
        assert_eq!(read(&b, 44, 10), [8], "clamped to what is queued");
        assert!(read(&b, 50, 10).is_empty());
        let loaned_pieces = b
            .pieces(0, 45)
            .into_iter()
            .filter(|p| matches!(p, Piece::Loaned(e) if e.len() == 40))
            .count();
        assert_eq!(loaned_pieces, 1, "loaned bytes go by reference, uncopied");

        assert_eq!(b.consume(10), 10);
        assert!(!loan.is_complete(), "33 loaned bytes still unacknowledged");
        assert_eq!(read(&b, 0, 35), want[10..]);
        assert_eq!(b.consume(33), 33);
        assert!(loan.is_complete(), "every loaned byte acknowledged");
        assert_eq!(read(&b, 0, 10), [7, 8]);
        assert_eq!(b.consume(10), 2);
        assert!(b.is_empty());
        assert_eq!(b.push(&[9]), 1, "empty again: the ring takes copies");
        assert_eq!(b.loaned(), 0);
    }

    #[test]
    fn loans_and_copies_are_bounded_by_the_capacity() {
        let mut b = SendBuffer::new(10);
        let loan = Loan::new(vec![5; 25]);
        assert_eq!(b.push_loan(&loan.ext()), 10);
        assert_eq!(b.push_loan(&loan.ext()), 0);
        assert_eq!(b.push(&[1]), 0);
        assert_eq!(b.consume(4), 4);
        assert_eq!(b.push_loan(&loan.slice(10..).unwrap()), 4);
        assert_eq!(loan.outstanding(), 2);
        b.consume(100);
        assert!(loan.is_complete());
    }

    /// The stream as the pieces give it, with how many pieces of each kind.
    fn kinds(b: &SendBuffer) -> (usize, usize, usize) {
        let mut k = (0, 0, 0);
        b.for_each_piece(0, b.len(), None, |p| match p {
            Piece::Copy(_) => k.0 += 1,
            Piece::Loaned(_) => k.1 += 1,
            Piece::Shared(..) => k.2 += 1,
        });
        k
    }

    /// What a segment would hold of `offset..offset + len`: the shared blocks' slices.
    fn hold(b: &SendBuffer, offset: usize, len: usize) -> Vec<ExtBuf> {
        let mut v = Vec::new();
        b.for_each_piece(offset, len, None, |p| {
            if let Piece::Shared(e, _) = p {
                v.push(e)
            }
        });
        v
    }

    #[test]
    fn shared_writes_are_copied_once_into_blocks_that_grow_until_sent_and_are_reused() {
        let data: Vec<u8> = (0..4 * SHARED_BLOCK).map(|i| (i % 251) as u8).collect();
        let mut b = SendBuffer::new(2 * SHARED_BLOCK);
        assert_eq!(
            b.push_shared(&data[..100], None, None),
            100,
            "a small write: the ring"
        );
        assert_eq!(kinds(&b), (1, 0, 0));
        let big = SHARED_WRITE_MIN + 10;
        assert_eq!(b.push_shared(&data[100..100 + big], None, None), big);
        assert_eq!(
            b.push_shared(&data[100 + big..200 + big], None, None),
            100,
            "the block grows"
        );
        assert_eq!(kinds(&b), (1, 0, 1));
        let sent = hold(&b, 0, b.len());
        assert_eq!(sent.len(), 1);
        let at = 200 + big;
        assert_eq!(b.push_shared(&data[at..at + 50], None, None), 50);
        assert_eq!(
            kinds(&b),
            (1, 0, 2),
            "a block a segment holds stays as it was"
        );
        drop(sent);
        assert_eq!(read(&b, 0, b.len()), data[..at + 50]);
        assert_eq!(b.loaned(), 0, "shared blocks are copies, not loans");

        // Fill the buffer; everything is in order; a block is never larger than its size.
        let n = b.push_shared(&data[at + 50..], None, None);
        assert_eq!(b.len(), 2 * SHARED_BLOCK);
        assert_eq!(read(&b, 0, b.len()), data[..at + 50 + n]);
        assert!(b.queue.iter().all(|q| q.data.len() <= SHARED_BLOCK));
        assert_eq!(b.push_shared(&data[..10], None, None), 0, "full");

        // Acknowledged blocks nobody holds are reused, not allocated again.
        let held = hold(&b, b.len() - 1, 1);
        assert_eq!(b.consume(b.len()), 2 * SHARED_BLOCK);
        assert!(b.is_empty());
        let spares = b.spares.len();
        assert!(spares >= 2, "{spares} spares");
        assert_eq!(
            b.push_shared(&data[..SHARED_BLOCK], None, None),
            SHARED_BLOCK
        );
        assert_eq!(
            kinds(&b),
            (0, 0, 1),
            "not the ring: it is empty but the write is large"
        );
        assert_eq!(b.spares.len(), spares - 1, "a spare was taken");
        assert_eq!(
            held[0][0],
            data[at + 50 + n - 1],
            "a held slice never changes"
        );
        assert_eq!(read(&b, 0, b.len()), data[..SHARED_BLOCK]);
    }

    #[test]
    fn a_small_write_behind_a_sent_block_gets_a_block_of_its_own_size() {
        let data = vec![7u8; SHARED_WRITE_MIN];
        let mut b = SendBuffer::new(SHARED_BLOCK);
        b.push_shared(&data, None, None);
        let _sent = hold(&b, 0, 1);
        assert_eq!(b.push_shared(&[1, 2, 3], None, None), 3);
        let last = b.queue.back().map(|q| q.data.block_capacity());
        assert_eq!(last, Some(3));
        b.consume(b.len());
        assert_eq!(b.spares.len(), 1, "only full-size blocks are kept");
        assert_eq!(b.push_shared(&[4], None, None), 1);
        assert_eq!(
            kinds(&b),
            (1, 0, 0),
            "empty again: small writes use the ring"
        );
    }

    /// With the writer's cuts, a segment cut there is one piece, summed from the piece's
    /// kept sum and not from its bytes: a sum poisoned in the block comes back.
    #[test]
    fn a_segment_cut_where_the_writer_said_is_summed_from_its_piece() {
        let kernel = Kernel::best();
        let data: Vec<u8> = (0..SHARED_BLOCK as u32).map(|i| (i * 13) as u8).collect();
        let mut b = SendBuffer::new(2 * SHARED_BLOCK);
        let cuts = Cuts {
            next: 100,
            every: 1000,
        };
        assert_eq!(b.push_shared(&data, Some(kernel), Some(cuts)), data.len());
        let sum_of = |b: &SendBuffer, offset, len| {
            let mut sums = Vec::new();
            b.for_each_piece(offset, len, Some(kernel), |p| match p {
                Piece::Shared(_, Some(s)) => sums.push(s),
                other => panic!("{other:?}"),
            });
            sums
        };
        assert_eq!(sum_of(&b, 1100, 1000), [checksum::sum(&data[1100..2100])]);
        b.queue[0].sums.as_mut().unwrap()[2] = 0x1234;
        assert_eq!(sum_of(&b, 1100, 1000), [0x1234], "the piece's kept sum");
        // Cut elsewhere, the bytes are summed: the poisoned piece is not used whole.
        assert_eq!(sum_of(&b, 1101, 999), [checksum::sum(&data[1101..2100])]);
    }

    #[test]
    fn a_shared_slice_sum_from_the_pieces_sums_is_the_sum_of_its_bytes() {
        let kernel = Kernel::best();
        let mut rng = crate::rng::Rng::new(7);
        let data: Vec<u8> = (0..3 * SHARED_BLOCK)
            .map(|_| rng.next_u32() as u8)
            .collect();
        // The fixed grid, and grids cut for segments of several sizes, from several
        // places (odd ones too).
        let cuts = [
            None,
            Some(Cuts {
                next: 0,
                every: 1448,
            }),
            Some(Cuts {
                next: 777,
                every: 8948,
            }),
            Some(Cuts { next: 5, every: 3 }),
            Some(Cuts {
                next: 70_000,
                every: 65_483,
            }),
        ];
        for cuts in cuts {
            let mut b = SendBuffer::new(4 * SHARED_BLOCK);
            // Writes of odd sizes, so pieces are completed across writes and blocks.
            let mut at = 0;
            for size in [
                SHARED_WRITE_MIN + 1,
                3,
                999,
                40_000,
                17,
                SHARED_BLOCK,
                70_001,
            ] {
                let end = (at + size).min(data.len());
                assert_eq!(b.push_shared(&data[at..end], Some(kernel), cuts), end - at);
                at = end;
            }
            let queued = &data[..at];
            for _ in 0..500 {
                let offset = rng.below(queued.len() as u64) as usize;
                let len = 1 + rng.below(9000) as usize;
                let mut summed = 0;
                let mut acc = Accumulator::new();
                let mut bytes = Vec::new();
                b.for_each_piece(offset, len, Some(kernel), |p| match p {
                    Piece::Shared(e, Some(s)) => {
                        summed += 1;
                        acc.add_sum(s, e.len());
                        bytes.extend_from_slice(&e);
                    }
                    Piece::Copy(s) => {
                        acc.add_with(kernel, s);
                        bytes.extend_from_slice(s);
                    }
                    other => panic!("{other:?}"),
                });
                let want = &queued[offset..(offset + len).min(queued.len())];
                assert_eq!(bytes, want);
                assert_eq!(
                    acc.sum(),
                    checksum::sum(want),
                    "{cuts:?}: offset {offset} len {len}"
                );
                assert!(summed > 0 || offset + len <= SHARED_WRITE_MIN + 1);
            }
        }
        // Bytes copied without summing stop the block's sums: no stale sum is given.
        let mut c = SendBuffer::new(SHARED_BLOCK);
        c.push_shared(&data[..SHARED_WRITE_MIN], Some(kernel), None);
        c.push_shared(&data[..100], None, None);
        c.for_each_piece(0, c.len(), Some(kernel), |p| {
            assert!(matches!(p, Piece::Shared(_, None)), "{p:?}")
        });
    }

    #[test]
    fn the_blocks_of_a_full_buffer_take_at_most_four_times_its_capacity() {
        let capacity = 8 * SHARED_BLOCK;
        let data = vec![3u8; SHARED_WRITE_MIN];
        let mut b = SendBuffer::new(capacity);
        let mut held = Vec::new();
        // Every write sent at once (a segment holds its block), so none grows another's.
        while b.free() > 0 {
            let before = b.len();
            assert!(b.push_shared(&data, None, None) > 0);
            held.extend(hold(&b, before, b.len() - before));
        }
        let memory: usize = b.queue.iter().map(|q| q.data.block_capacity()).sum();
        assert_eq!(b.len(), capacity);
        assert!(memory <= 4 * capacity, "{memory} bytes of blocks");
        b.consume(capacity);
        drop(held);
        assert!(
            b.spares.len() <= 2 * capacity / SHARED_BLOCK,
            "{} spares",
            b.spares.len()
        );
    }
}
