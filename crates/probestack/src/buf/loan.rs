//! External buffers: [`ExtBuf`], a shared read-only block and a byte range in it, and
//! [`Loan`], the application's handle on memory it loaned to the stack (paper 004 §3.1).

use std::fmt;
use std::ops::{Bound, Deref, RangeBounds};
use std::sync::Arc;

use super::packet::{PacketBuf, NO_POOL};
use super::BufError;

/// The virtual-memory page size zero-copy receive works in (x86-64's 4 KiB).
pub const PAGE_SIZE: usize = 4096;

/// A range of bytes in a block shared through an `Arc`.
///
/// Cloning and slicing cost one reference-count increment and copy no data, so TCP can
/// keep a slice for retransmission while the device sends another, on another thread if
/// need be. The bytes are read-only: nothing reachable from an `ExtBuf` writes to them,
/// which is what makes loaned memory safe to share (see [`Loan`]).
#[derive(Clone)]
pub struct ExtBuf {
    block: Arc<Vec<u8>>,
    start: usize,
    end: usize,
}

impl ExtBuf {
    /// An external buffer over all of `data`, which the stack hands over (a zero-copy
    /// receive) or which nobody needs back. `Vec<u8>` and `Box<[u8]>` move in without a
    /// copy.
    pub fn new(data: impl Into<Vec<u8>>) -> ExtBuf {
        let block = Arc::new(data.into());
        let end = block.len();
        ExtBuf {
            block,
            start: 0,
            end,
        }
    }

    /// A copy of `data` that starts on a page boundary ([`PAGE_SIZE`]): what a NIC with
    /// header/data split deposits, so that whole pages can go to the application by
    /// reference (paper 004 §3.1). The block is over-allocated by less than a page to
    /// place the start; nothing but the copy is written.
    pub fn copy_page_aligned(data: &[u8]) -> ExtBuf {
        let mut block: Vec<u8> = Vec::with_capacity(data.len() + PAGE_SIZE - 1);
        let pad = block.as_ptr().align_offset(PAGE_SIZE).min(PAGE_SIZE - 1);
        block.resize(pad, 0);
        block.extend_from_slice(data);
        ExtBuf {
            block: Arc::new(block),
            start: pad,
            end: pad + data.len(),
        }
    }

    /// Whether the bytes start on a page boundary.
    pub fn is_page_aligned(&self) -> bool {
        (self.as_slice().as_ptr() as usize).is_multiple_of(PAGE_SIZE)
    }

    /// The bytes.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        &self.block[self.start..self.end]
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.end - self.start
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// A new `ExtBuf` over `range` of this one's bytes (offsets relative to this one),
    /// sharing the block.
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<ExtBuf, BufError> {
        let (s, e) = resolve(range, self.len())?;
        Ok(ExtBuf {
            block: Arc::clone(&self.block),
            start: self.start + s,
            end: self.start + e,
        })
    }

    /// Takes the first `n` bytes off as a new `ExtBuf` sharing the block; `self` keeps
    /// the rest.
    pub fn split_to(&mut self, n: usize) -> Result<ExtBuf, BufError> {
        let have = self.len();
        if n > have {
            return Err(BufError::TooShort { need: n, have });
        }
        let front = ExtBuf {
            block: Arc::clone(&self.block),
            start: self.start,
            end: self.start + n,
        };
        self.start += n;
        Ok(front)
    }

    /// Drops `n` bytes from the front of the range.
    #[inline]
    pub fn trim_front(&mut self, n: usize) -> Result<(), BufError> {
        let have = self.len();
        if n > have {
            return Err(BufError::TooShort { need: n, have });
        }
        self.start += n;
        Ok(())
    }

    /// Drops `n` bytes from the back of the range.
    #[inline]
    pub fn trim_back(&mut self, n: usize) -> Result<(), BufError> {
        let have = self.len();
        if n > have {
            return Err(BufError::TooShort { need: n, have });
        }
        self.end -= n;
        Ok(())
    }

    /// An empty range at the start of a new block of `capacity` bytes (zeroed once) that
    /// the range can grow over ([`append_exclusive`](Self::append_exclusive)): a block a
    /// sender copies data into and then hands out in slices.
    pub fn with_capacity(capacity: usize) -> ExtBuf {
        ExtBuf {
            block: Arc::new(vec![0; capacity]),
            start: 0,
            end: 0,
        }
    }

    /// Copies as much of `bytes` as the block has room for behind this range, if this is
    /// the only reference to the block, and grows the range over them; returns how many
    /// (0 once anything else holds the block: bytes anyone can read never change).
    pub fn append_exclusive(&mut self, bytes: &[u8]) -> usize {
        self.append_exclusive_with(bytes, <[u8]>::copy_from_slice)
    }

    /// [`append_exclusive`](Self::append_exclusive) with the copy done by `copy(dst,
    /// src)` (a copy that also sums, say), `dst` being the block's bytes behind the range.
    pub fn append_exclusive_with(
        &mut self,
        bytes: &[u8],
        copy: impl FnOnce(&mut [u8], &[u8]),
    ) -> usize {
        let Some(block) = Arc::get_mut(&mut self.block) else {
            return 0;
        };
        let n = bytes.len().min(block.len() - self.end);
        copy(&mut block[self.end..self.end + n], &bytes[..n]);
        self.end += n;
        n
    }

    /// Empties the range and puts it at the start of the block for reuse, if this is the
    /// only reference to the block; otherwise leaves it alone and returns false.
    pub fn reset_exclusive(&mut self) -> bool {
        if Arc::get_mut(&mut self.block).is_none() {
            return false;
        }
        (self.start, self.end) = (0, 0);
        true
    }

    /// The block's size (what [`append_exclusive`](Self::append_exclusive) can fill).
    pub fn block_capacity(&self) -> usize {
        self.block.len()
    }

    /// Where the range starts in its block.
    pub fn block_offset(&self) -> usize {
        self.start
    }

    /// Whether two external buffers share one block (one is a clone or slice of the
    /// other, or both come from one loan).
    pub fn same_block(&self, other: &ExtBuf) -> bool {
        Arc::ptr_eq(&self.block, &other.block)
    }

    /// The block as a writable [`PacketBuf`] (window = this range), without a copy, if this
    /// is the only reference to it; otherwise `self` back. Loaned memory never converts:
    /// its [`Loan`] holds a reference until it is reclaimed. A block that came from a pool
    /// can be freed into one again this way (after a zero-copy receive, say).
    pub fn try_into_packet(self) -> Result<PacketBuf, ExtBuf> {
        let ExtBuf { block, start, end } = self;
        match Arc::try_unwrap(block) {
            Ok(vec) => Ok(PacketBuf::from_block(
                vec.into_boxed_slice(),
                start,
                end,
                NO_POOL,
            )),
            Err(block) => Err(ExtBuf { block, start, end }),
        }
    }
}

/// The bounds of `range` within `0..len`, or an error naming them.
fn resolve(range: impl RangeBounds<usize>, len: usize) -> Result<(usize, usize), BufError> {
    let start = match range.start_bound() {
        Bound::Included(&s) => s,
        Bound::Excluded(&s) => s.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.saturating_add(1),
        Bound::Excluded(&e) => e,
        Bound::Unbounded => len,
    };
    if start > end || end > len {
        return Err(BufError::OutOfRange { start, end, len });
    }
    Ok((start, end))
}

/// A received block handed over whole: the window becomes the range, no copy. If the
/// buffer came from a pool, [`super::Pool::detach`] it first, or that pool keeps counting
/// it as outstanding.
impl From<PacketBuf> for ExtBuf {
    fn from(buf: PacketBuf) -> ExtBuf {
        if buf.has_frags() {
            // Fragments cannot join the block without a copy; never lose them.
            let mut all = vec![0; buf.total_len()];
            let _ = buf.gather_into(&mut all);
            return ExtBuf::new(all);
        }
        let (block, start, end) = buf.into_parts();
        ExtBuf {
            block: Arc::new(block.into_vec()),
            start,
            end,
        }
    }
}

impl From<Vec<u8>> for ExtBuf {
    fn from(data: Vec<u8>) -> ExtBuf {
        ExtBuf::new(data)
    }
}

impl From<Box<[u8]>> for ExtBuf {
    fn from(data: Box<[u8]>) -> ExtBuf {
        ExtBuf::new(data)
    }
}

impl Deref for ExtBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl AsRef<[u8]> for ExtBuf {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl fmt::Debug for ExtBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExtBuf")
            .field("range", &(self.start..self.end))
            .field("block_len", &self.block.len())
            .finish()
    }
}

/// Page-aligned blocks for a NIC's header/data split, used again once nothing refers to
/// them: the recycling of Linux's `page_pool`. A zero-copy receive hands the application
/// `ExtBuf`s into the NIC's block; when it has dropped them (and the stack its own), the
/// recycler's reference is the last one and the block takes a later payload, without an
/// allocation and the page faults of fresh memory. It looks at its oldest block only, as a
/// ring of receive buffers is refilled in order; a block still in use moves to the back.
#[derive(Debug, Default)]
pub struct PageRecycler {
    blocks: std::collections::VecDeque<Arc<Vec<u8>>>,
}

impl PageRecycler {
    /// Blocks kept for reuse (the depth of a receive ring); past it the oldest is let go
    /// (freed when its last `ExtBuf` drops).
    pub const KEPT: usize = 256;

    /// A page-aligned copy of `data`: in the oldest block if nothing else refers to it
    /// and it is large enough, else in a new one.
    pub fn copy_page_aligned(&mut self, data: &[u8]) -> ExtBuf {
        self.copy_with(data.len(), |dst| {
            dst.copy_from_slice(data);
            0
        })
        .0
    }

    /// The same, summing the bytes (RFC 1071) as they are copied, as a NIC's receive
    /// engine checks a checksum while its DMA places the data: the copy and the sum.
    pub fn copy_and_sum_page_aligned(&mut self, data: &[u8]) -> (ExtBuf, u16) {
        self.copy_with(data.len(), |dst| crate::checksum::copy_and_sum(dst, data))
    }

    /// The same for `len` bytes that lie in `pieces`, one after another (a frame's
    /// window and its fragments): one copy of each byte, summed as it goes.
    pub fn copy_and_sum_page_aligned_parts<'a>(
        &mut self,
        len: usize,
        pieces: impl IntoIterator<Item = &'a [u8]>,
    ) -> (ExtBuf, u16) {
        self.copy_with(len, |dst| {
            let mut acc = crate::checksum::Accumulator::new();
            for piece in pieces {
                let at = acc.len();
                let n = piece.len().min(dst.len() - at);
                acc.copy_and_add(&mut dst[at..at + n], &piece[..n]);
            }
            // Pieces shorter than `len` would leave a reused block's old bytes in place.
            debug_assert_eq!(acc.len(), dst.len(), "the pieces hold fewer bytes than len");
            acc.sum()
        })
    }

    fn copy_with(&mut self, len: usize, copy: impl FnOnce(&mut [u8]) -> u16) -> (ExtBuf, u16) {
        let free = match self.blocks.pop_front() {
            Some(block) => match Arc::try_unwrap(block) {
                Ok(block) => Some(block),
                Err(still_shared) => {
                    self.blocks.push_back(still_shared);
                    None
                }
            },
            None => None,
        };
        let fresh = || Vec::with_capacity(len + PAGE_SIZE - 1);
        let mut block = free.unwrap_or_else(fresh);
        let mut pad = block.as_ptr().align_offset(PAGE_SIZE).min(PAGE_SIZE - 1);
        if pad + len > block.capacity() {
            block = fresh();
            pad = block.as_ptr().align_offset(PAGE_SIZE).min(PAGE_SIZE - 1);
        }
        let end = pad + len;
        // Only bytes no earlier copy wrote are zeroed first; then the window is written.
        if block.len() < end {
            block.resize(end, 0);
        }
        block.truncate(end);
        let sum = copy(&mut block[pad..end]);
        let buf = ExtBuf {
            block: Arc::new(block),
            start: pad,
            end,
        };
        if self.blocks.len() >= Self::KEPT {
            self.blocks.pop_front();
        }
        self.blocks.push_back(Arc::clone(&buf.block));
        (buf, sum)
    }

    /// Blocks held (in use by the application or the stack, or free for reuse).
    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }
}

/// Memory the application loaned to the stack for a zero-copy send, as the application
/// holds it.
///
/// The application moves a `Vec<u8>` or `Box<[u8]>` in (no copy), gives the stack
/// [`ExtBuf`]s into it ([`Loan::ext`], [`Loan::slice`]), and keeps the `Loan`. The stack
/// cannot write to the memory, and the application cannot have it back while the stack
/// holds any `ExtBuf` into it: [`Loan::is_complete`] says when none is left (TCP dropped
/// the last slice once the data was acknowledged; across a device that hands fragments to
/// a stack in the same process, such as the frame queue, that stack's receive buffer may
/// hold slices until its application has read them) and [`Loan::try_reclaim`] returns the
/// memory only then. Paper 004 §3.1 gets the same guarantee from the MMU, by marking the
/// pages of a pending send copy-on-write until the receiver acknowledges; here the type
/// system and a reference count give it, at no cost per page.
pub struct Loan {
    block: Arc<Vec<u8>>,
}

impl Loan {
    /// Loans `data` (a `Vec<u8>` or `Box<[u8]>` moves in without a copy).
    pub fn new(data: impl Into<Vec<u8>>) -> Loan {
        Loan {
            block: Arc::new(data.into()),
        }
    }

    /// The loaned bytes, for the application to read while they are out.
    pub fn data(&self) -> &[u8] {
        &self.block
    }

    pub fn len(&self) -> usize {
        self.block.len()
    }

    pub fn is_empty(&self) -> bool {
        self.block.is_empty()
    }

    /// An external buffer over all of the loaned bytes, for the stack.
    pub fn ext(&self) -> ExtBuf {
        ExtBuf {
            block: Arc::clone(&self.block),
            start: 0,
            end: self.block.len(),
        }
    }

    /// An external buffer over `range` of the loaned bytes, for the stack.
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<ExtBuf, BufError> {
        let (start, end) = resolve(range, self.block.len())?;
        Ok(ExtBuf {
            block: Arc::clone(&self.block),
            start,
            end,
        })
    }

    /// How many `ExtBuf`s into the loan exist now, wherever they are.
    pub fn outstanding(&self) -> usize {
        Arc::strong_count(&self.block) - 1
    }

    /// Whether the stack holds no reference to the loaned memory any more. Once true it
    /// stays true until this `Loan` hands out another `ExtBuf`, and
    /// [`Loan::try_reclaim`] will succeed.
    pub fn is_complete(&self) -> bool {
        self.outstanding() == 0
    }

    /// The memory back, as it was loaned (the same allocation, unchanged), if the stack
    /// holds no reference to it; otherwise the loan back.
    pub fn try_reclaim(self) -> Result<Vec<u8>, Loan> {
        Arc::try_unwrap(self.block).map_err(|block| Loan { block })
    }
}

impl fmt::Debug for Loan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Loan")
            .field("len", &self.len())
            .field("outstanding", &self.outstanding())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + 3) as u8).collect()
    }

    #[test]
    fn a_block_grows_only_while_nothing_else_holds_it_and_is_reused_once_let_go() {
        let data = bytes(100);
        let mut b = ExtBuf::with_capacity(64);
        assert_eq!(b.append_exclusive(&data[..40]), 40);
        assert_eq!(
            b.append_exclusive(&data[40..]),
            24,
            "no more than the capacity"
        );
        assert_eq!((&b[..], b.block_capacity()), (&data[..64], 64));
        let mut b = ExtBuf::with_capacity(64);
        b.append_exclusive(&data[..10]);
        let slice = b.slice(2..6).unwrap();
        assert_eq!(b.append_exclusive(&data[10..]), 0, "a slice is out: frozen");
        assert!(!b.reset_exclusive(), "nor can it be emptied");
        assert_eq!((&slice[..], &b[..]), (&data[2..6], &data[..10]));
        drop(slice);
        let mut front = b.clone();
        front.trim_back(3).unwrap();
        drop(b);
        assert_eq!(
            front.append_exclusive(&data[50..52]),
            2,
            "alone again: it grows"
        );
        assert_eq!(&front[..], [&data[..7], &data[50..52]].concat());
        assert_eq!(front.block_offset(), 0);
        assert!(front.reset_exclusive());
        assert!(front.is_empty());
        assert_eq!(
            front.append_exclusive(&data[..5]),
            5,
            "reused from its start"
        );
        assert_eq!(&front[..], &data[..5]);
    }

    #[test]
    fn a_loan_completes_only_when_every_clone_and_slice_is_gone() {
        let data = bytes(10_000);
        let addr = data.as_ptr() as usize;
        let loan = Loan::new(data);
        assert!(loan.is_complete(), "nothing handed out yet");
        let whole = loan.ext();
        let copy = whole.clone();
        let mut part = loan.slice(100..5000).unwrap();
        let front = part.split_to(10).unwrap();
        let sub = part.slice(..=9).unwrap();
        assert_eq!(loan.outstanding(), 5);
        let mut held = vec![whole, copy, part, front, sub];
        while let Some(e) = held.pop() {
            assert!(!loan.is_complete());
            drop(e);
        }
        assert!(loan.is_complete());
        let back = loan.try_reclaim().unwrap();
        assert_eq!(back, bytes(10_000));
        assert_eq!(
            back.as_ptr() as usize,
            addr,
            "the same allocation, not a copy"
        );
    }

    #[test]
    fn reclaim_refuses_while_the_stack_holds_a_slice_on_another_thread() {
        let loan = Loan::new(bytes(4096).into_boxed_slice());
        let slice = loan.slice(1000..2460).unwrap();
        let (to_stack, stack_rx) = std::sync::mpsc::channel::<ExtBuf>();
        let (done_tx, done) = std::sync::mpsc::channel::<()>();
        let stack = std::thread::spawn(move || {
            let seg = stack_rx.recv().unwrap();
            let sum: u32 = seg.iter().map(|&b| b as u32).sum();
            done.recv().unwrap(); // hold the slice until told ("acknowledged")
            drop(seg);
            sum
        });
        to_stack.send(slice).unwrap();
        let loan = loan.try_reclaim().unwrap_err();
        assert!(!loan.is_complete());
        done_tx.send(()).unwrap();
        let sum = stack.join().unwrap();
        assert_eq!(
            sum,
            bytes(4096)[1000..2460]
                .iter()
                .map(|&b| b as u32)
                .sum::<u32>()
        );
        assert!(loan.is_complete());
        assert_eq!(loan.try_reclaim().unwrap(), bytes(4096));
    }

    #[test]
    fn a_page_aligned_copy_starts_on_a_page_and_holds_the_bytes() {
        for len in [0, 1, 4095, 4096, 10_000] {
            let data = bytes(len);
            let e = ExtBuf::copy_page_aligned(&data);
            assert_eq!(&*e, &data[..]);
            assert!(e.is_page_aligned() || len == 0, "{len}");
            if len > 1 {
                assert!(!e.slice(1..).unwrap().is_page_aligned());
            }
        }
    }

    #[test]
    fn slices_resolve_every_kind_of_range_and_refuse_bad_ones() {
        let e = ExtBuf::new(bytes(10));
        let all = bytes(10);
        assert_eq!(&*e.slice(..).unwrap(), &all[..]);
        assert_eq!(&*e.slice(2..).unwrap(), &all[2..]);
        assert_eq!(&*e.slice(..3).unwrap(), &all[..3]);
        assert_eq!(&*e.slice(..=3).unwrap(), &all[..=3]);
        assert_eq!(&*e.slice(2..=9).unwrap(), &all[2..=9]);
        assert_eq!(&*e.slice(10..).unwrap(), &all[10..]);
        assert!(e.slice(5..5).unwrap().is_empty());
        let excl = e.slice((Bound::Excluded(1), Bound::Excluded(4))).unwrap();
        assert_eq!(&*excl, &all[2..4]);
        // Slices of slices are relative.
        let inner = e.slice(3..8).unwrap().slice(1..3).unwrap();
        assert_eq!(&*inner, &all[4..6]);
        assert!(inner.same_block(&e));

        let (six, five) = (6, 5);
        let bad = [
            e.slice(0..11),
            e.slice(..=10),
            e.slice(11..),
            e.slice(six..five),
            e.slice(..=usize::MAX),
            e.slice((Bound::Excluded(usize::MAX), Bound::Unbounded)),
        ];
        for r in bad {
            assert!(
                matches!(r, Err(BufError::OutOfRange { len: 10, .. })),
                "{r:?}"
            );
        }
        assert_eq!(
            e.slice(six..five).unwrap_err(),
            BufError::OutOfRange {
                start: 6,
                end: 5,
                len: 10
            }
        );
        let loan = Loan::new(vec![1, 2, 3]);
        assert!(loan.slice(2..4).is_err());
        assert!(loan.is_complete(), "a refused slice holds nothing");
    }

    #[test]
    fn split_and_trims_refuse_past_the_end_and_change_nothing() {
        let mut e = ExtBuf::new(bytes(8));
        assert_eq!(
            e.split_to(9).unwrap_err(),
            BufError::TooShort { need: 9, have: 8 }
        );
        assert_eq!(
            e.trim_front(9).unwrap_err(),
            BufError::TooShort { need: 9, have: 8 }
        );
        assert_eq!(
            e.trim_back(9).unwrap_err(),
            BufError::TooShort { need: 9, have: 8 }
        );
        assert_eq!(&*e, &bytes(8)[..]);
        let head = e.split_to(0).unwrap();
        assert!(head.is_empty());
        e.trim_front(1).unwrap();
        e.trim_back(2).unwrap();
        assert_eq!(&*e, &bytes(8)[1..6]);
        let all = e.split_to(5).unwrap();
        assert!(e.is_empty());
        assert_eq!(all.as_ref(), &bytes(8)[1..6]);
    }

    #[test]
    fn a_received_block_becomes_shared_without_a_copy_and_back() {
        let mut b = PacketBuf::from_slice(b"..headerpayload", 0).unwrap();
        b.trim_front(8).unwrap();
        let addr = b.block_addr();
        let e = ExtBuf::from(b);
        assert_eq!(&*e, b"payload");
        assert_eq!(e.as_ptr() as usize, addr + 8);
        let keep = e.clone();
        let e = e.try_into_packet().unwrap_err();
        drop(keep);
        let p = e.try_into_packet().unwrap();
        assert_eq!(p.data(), b"payload");
        assert_eq!((p.headroom(), p.block_addr()), (8, addr));
    }

    #[test]
    fn loaned_memory_never_becomes_writable() {
        let loan = Loan::new(vec![9; 16]);
        let e = loan.ext();
        let e = e.try_into_packet().unwrap_err();
        assert_eq!(loan.outstanding(), 1);
        drop(e);
        assert_eq!(loan.try_reclaim().unwrap(), vec![9; 16]);
    }

    #[test]
    fn empty_loans_and_debug() {
        let loan = Loan::new(Vec::new());
        assert!(loan.is_empty() && loan.data().is_empty());
        assert_eq!(loan.len(), 0);
        let e = loan.ext();
        assert!(e.is_empty());
        assert!(format!("{loan:?}").contains("outstanding: 1"));
        assert!(format!("{e:?}").contains("range: 0..0"));
        drop(e);
        assert_eq!(loan.try_reclaim().unwrap(), Vec::<u8>::new());
    }

    #[test]
    fn the_page_recycler_reuses_a_block_only_once_nothing_refers_to_it() {
        let mut r = PageRecycler::default();
        let a = r.copy_page_aligned(&[1; 5000]);
        assert!(a.is_page_aligned());
        let at = a.as_ptr();
        // Still held: the next copy takes a new block.
        let b = r.copy_page_aligned(&[2; 6000]);
        assert_ne!(b.as_ptr(), at);
        assert!(b.iter().all(|&x| x == 2) && a.iter().all(|&x| x == 1));
        drop(a);
        // `a`'s block is the oldest and free now: `c` takes it, page-aligned as before.
        let c = r.copy_page_aligned(&[3; 4096]);
        assert_eq!(c.as_ptr(), at);
        assert!(c.is_page_aligned() && c.iter().all(|&x| x == 3));
        drop((b, c));
        let d = r.copy_page_aligned(&[4; 4500]);
        assert!(d.is_page_aligned() && d.len() == 4500 && d.iter().all(|&x| x == 4));
        // Two blocks in all: every copy since the second reused one.
        assert_eq!(r.len(), 2);
        // A payload larger than the free block gets a block of its own.
        drop(d);
        let big = r.copy_page_aligned(&[5; 40_000]);
        assert!(big.is_page_aligned() && big.iter().all(|&x| x == 5));
        // The summing copy: the same placement, and the RFC 1071 sum of what it copied.
        let data = bytes(9001);
        let (e, sum) = r.copy_and_sum_page_aligned(&data);
        assert!(e.is_page_aligned() && e[..] == data[..]);
        assert_eq!(sum, crate::checksum::sum(&data));
    }
}
