//! [`PacketBuf`]: one contiguous block with a movable data window, headroom in front of it
//! and tailroom behind it.

use std::fmt;

use super::{BufError, ExtBuf};
use crate::wire::Ipv4Address;

/// A hint to the CPU that the line holding `p` will be read soon (x86-64; elsewhere,
/// nothing).
#[inline(always)]
fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint: it reads nothing the program sees, cannot fault, and
    // is defined for any address; SSE, which it needs, is part of every x86-64 CPU.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// The largest block a buffer has: its window's ends are 32-bit.
const MAX_BLOCK: usize = u32::MAX as usize;

/// The origin of a buffer no pool counts (made by [`PacketBuf::new`], or detached).
pub(super) const NO_POOL: u64 = 0;

/// One block of memory and a data window `start..end` inside it.
///
/// The bytes before the window are the headroom, the bytes after it the tailroom. Every
/// operation that moves the window checks the room it needs and returns a [`BufError`]
/// without changing anything when it is not there; none panics.
///
/// A `PacketBuf` is `Send`: two stacks on two threads hand frames over without copying.
/// It is deliberately not `Clone`: one owner for each block, so a pool never gets the same
/// block back twice.
pub struct PacketBuf(Box<Inner>);

/// A buffer's header: the block, the window, the pool, the offload requests, the
/// fragments. Behind a pointer, as an mbuf's or an `sk_buff`'s is, so that a buffer moved
/// by value from layer to layer and queue to queue is one word, not the 48 bytes of its
/// header: a header built or changed field by field and then moved at once was loaded
/// back 16 bytes at a time, which the CPU cannot forward from the narrower stores just
/// made (a stall each time, the hottest instructions of the receive path in `perf`). The
/// pool recycles the header with its block ([`Block`]).
#[derive(Debug)]
pub(super) struct Inner {
    /// At most `u32::MAX` bytes (checked where a block is made), so that the window's ends
    /// fit in 32 bits each.
    block: Box<[u8]>,
    start: u32,
    end: u32,
    /// The id of the pool that handed the block out and counts it as outstanding, or
    /// [`NO_POOL`].
    origin: u64,
    /// Work left for the device on transmit.
    tx_offload: TxOffload,
    /// On receive, the IP destination address of the datagram, kept for the socket that
    /// queues it (UDP's `recvmsg` reports it: `IP_PKTINFO`), as an `sk_buff` keeps its
    /// layers' facts. Set by UDP input before anything reads it; it fills padding the
    /// header had.
    rx_dst: [u8; 4],
    /// External data that follows the window, in order: the payload of a zero-copy send
    /// (memory the application loaned), as the page fragments of Linux's `sk_buff` follow
    /// its linear part. The window holds the headers the layers prepend; the fragments
    /// are never copied by the stack. `None` for a block that never carried any; a block
    /// that did keeps its emptied list for its next use (on a link where data goes by
    /// reference every frame has fragments, and would allocate and free the list). Boxed,
    /// so that a header without fragments carries one word for them rather than a
    /// `Vec`'s three (the header was moved by value before it went behind a pointer; it
    /// is still read on every access).
    // The box is the point (one word in every header; the extra allocation is paid only
    // by a block's first frame with fragments), not an accident.
    #[allow(clippy::box_collection)]
    frags: Option<Box<Vec<ExtBuf>>>,
}

/// What a frame on its way out leaves for the device to finish: Linux keeps the same two
/// facts in its `sk_buff` (`ip_summed == CHECKSUM_PARTIAL`, `gso_size`). The layers set
/// it; the link turns it into the device's transmit request. A buffer from a pool starts
/// with none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TxOffload {
    /// The transport checksum field holds only the pseudo-header sum (not complemented);
    /// the device sums the transport header and data into it.
    pub l4_checksum: bool,
    /// A TCP super-segment the device cuts into segments of this many data bytes; 0 for
    /// an ordinary frame.
    pub gso_size: u16,
}

impl PacketBuf {
    /// A buffer of its own (not from a pool): a zeroed block of exactly
    /// `headroom + len + tailroom` bytes, with a window of `len` zero bytes after
    /// `headroom`.
    pub fn new(len: usize, headroom: usize, tailroom: usize) -> Result<PacketBuf, BufError> {
        let capacity = headroom
            .checked_add(len)
            .and_then(|n| n.checked_add(tailroom))
            .ok_or(BufError::TooLarge {
                need: usize::MAX,
                max: MAX_BLOCK,
            })?;
        if capacity > MAX_BLOCK {
            return Err(BufError::TooLarge {
                need: capacity,
                max: MAX_BLOCK,
            });
        }
        Ok(PacketBuf(Box::new(Inner {
            block: zeroed_block(capacity)?,
            // Both at most `capacity`, which fits.
            start: headroom as u32,
            end: (headroom + len) as u32,
            origin: NO_POOL,
            tx_offload: TxOffload::default(),
            rx_dst: [0; 4],
            frags: None,
        })))
    }

    /// A buffer of its own holding a copy of `data` after `headroom` bytes, with no
    /// tailroom.
    pub fn from_slice(data: &[u8], headroom: usize) -> Result<PacketBuf, BufError> {
        let mut buf = PacketBuf::new(data.len(), headroom, 0)?;
        buf.data_mut().copy_from_slice(data);
        Ok(buf)
    }

    /// The IP destination address UDP input noted for a received datagram
    /// ([`set_rx_dst`](Self::set_rx_dst)); meaningless for any other buffer.
    #[inline]
    pub fn rx_dst(&self) -> Ipv4Address {
        Ipv4Address(self.0.rx_dst)
    }

    /// Notes the IP destination address of the received datagram this buffer holds.
    #[inline]
    pub fn set_rx_dst(&mut self, dst: Ipv4Address) {
        self.0.rx_dst = dst.0;
    }

    /// The bytes in the window.
    #[inline]
    pub fn data(&self) -> &[u8] {
        &self.0.block[self.0.start as usize..self.0.end as usize]
    }

    /// The bytes in the window, to write.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.0.block[self.0.start as usize..self.0.end as usize]
    }

    /// Asks the CPU to start bringing the buffer's header (the window's ends, the block's
    /// address) into its cache, for a receive loop a few frames ahead of its use.
    #[inline]
    pub fn prefetch_header(&self) {
        prefetch(std::ptr::from_ref::<Inner>(&self.0).cast());
    }

    /// Asks the CPU to start bringing the window's first bytes (a frame's headers) into
    /// its cache. Reads the header: call [`prefetch_header`](Self::prefetch_header) some
    /// time before.
    #[inline]
    pub fn prefetch_data(&self) {
        prefetch(self.0.block.as_ptr().wrapping_add(self.0.start as usize));
    }

    /// The number of bytes in the window.
    #[inline]
    pub fn len(&self) -> usize {
        (self.0.end - self.0.start) as usize
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.0.start == self.0.end
    }

    /// Bytes free in front of the window.
    #[inline]
    pub fn headroom(&self) -> usize {
        self.0.start as usize
    }

    /// Bytes free behind the window.
    #[inline]
    pub fn tailroom(&self) -> usize {
        self.0.block.len() - self.0.end as usize
    }

    /// The size of the whole block.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.0.block.len()
    }

    /// Grows the window by `n` bytes at the front, taken from the headroom, and returns
    /// them for the caller to write (a header). Their contents are unspecified: the caller
    /// writes all of them.
    #[inline]
    pub fn prepend(&mut self, n: usize) -> Result<&mut [u8], BufError> {
        let start = self.0.start as usize;
        if n > start {
            return Err(BufError::NoHeadroom {
                need: n,
                have: start,
            });
        }
        // `n` is at most `start`, which fits.
        self.0.start -= n as u32;
        Ok(&mut self.0.block[start - n..start])
    }

    /// Prepends a copy of `bytes`.
    pub fn prepend_from_slice(&mut self, bytes: &[u8]) -> Result<(), BufError> {
        self.prepend(bytes.len())?.copy_from_slice(bytes);
        Ok(())
    }

    /// Grows the window by `n` bytes at the back, taken from the tailroom, and returns them
    /// for the caller to write. Their contents are unspecified: the caller writes all of
    /// them.
    #[inline]
    pub fn append(&mut self, n: usize) -> Result<&mut [u8], BufError> {
        let have = self.tailroom();
        if n > have {
            return Err(BufError::NoTailroom { need: n, have });
        }
        let old_end = self.0.end as usize;
        // `n` is at most the tailroom: the new end is within the block, which fits.
        self.0.end += n as u32;
        Ok(&mut self.0.block[old_end..old_end + n])
    }

    /// Appends a copy of `bytes`.
    pub fn extend_from_slice(&mut self, bytes: &[u8]) -> Result<(), BufError> {
        self.append(bytes.len())?.copy_from_slice(bytes);
        Ok(())
    }

    /// Drops `n` bytes from the front of the window (a header, once parsed): they become
    /// headroom.
    #[inline]
    pub fn trim_front(&mut self, n: usize) -> Result<(), BufError> {
        let have = self.len();
        if n > have {
            return Err(BufError::TooShort { need: n, have });
        }
        // `n` is at most the window's length, which fits.
        self.0.start += n as u32;
        Ok(())
    }

    /// Drops `n` bytes from the back of the window (padding, a trailer): they become
    /// tailroom.
    #[inline]
    pub fn trim_back(&mut self, n: usize) -> Result<(), BufError> {
        let have = self.len();
        if n > have {
            return Err(BufError::TooShort { need: n, have });
        }
        self.0.end -= n as u32;
        Ok(())
    }

    /// What the device is asked to finish on transmit.
    #[inline]
    pub fn tx_offload(&self) -> TxOffload {
        self.0.tx_offload
    }

    #[inline]
    pub fn set_tx_offload(&mut self, offload: TxOffload) {
        self.0.tx_offload = offload;
    }

    /// Empties the window and places it `headroom` bytes into the block.
    pub fn reset(&mut self, headroom: usize) -> Result<(), BufError> {
        if headroom > self.0.block.len() {
            return Err(BufError::TooLarge {
                need: headroom,
                max: self.0.block.len(),
            });
        }
        // At most the block's length, which fits.
        self.0.start = headroom as u32;
        self.0.end = headroom as u32;
        self.0.tx_offload = TxOffload::default();
        self.clear_frags();
        Ok(())
    }

    /// Appends external data after the window (and after the fragments already there),
    /// without copying it. Empty data is not kept.
    pub fn push_frag(&mut self, frag: ExtBuf) {
        if !frag.is_empty() {
            self.0.frags.get_or_insert_with(Box::default).push(frag);
        }
    }

    /// The external data after the window, in order.
    #[inline]
    pub fn frags(&self) -> &[ExtBuf] {
        self.0.frags.as_deref().map_or(&[], Vec::as_slice)
    }

    /// The window to read and the external data to take from, at once: TCP input reads
    /// a segment's header in the one while it moves the data it keeps by reference out of
    /// the other (a move, where a clone would count each fragment's reference up, and
    /// freeing the frame count it down again). `None` for a buffer that never carried
    /// fragments.
    #[inline]
    pub fn window_and_frags_mut(&mut self) -> (&[u8], Option<&mut Vec<ExtBuf>>) {
        let inner = &mut *self.0;
        (
            &inner.block[inner.start as usize..inner.end as usize],
            inner.frags.as_deref_mut(),
        )
    }

    /// Whether external data follows the window.
    #[inline]
    pub fn has_frags(&self) -> bool {
        self.0.frags.as_ref().is_some_and(|f| !f.is_empty())
    }

    /// Takes the external data off the buffer.
    pub fn take_frags(&mut self) -> Vec<ExtBuf> {
        self.0.frags.take().map_or_else(Vec::new, |f| *f)
    }

    /// Drops the external data, keeping the list's memory for the block's next use (a
    /// frame that carries data by reference, every one on such a link, would otherwise
    /// allocate and free it each time).
    #[inline]
    fn clear_frags(&mut self) {
        if let Some(f) = self.0.frags.as_mut() {
            f.clear();
        }
    }

    /// The bytes the buffer stands for: the window and the fragments after it.
    #[inline]
    pub fn total_len(&self) -> usize {
        self.len() + self.frags().iter().map(ExtBuf::len).sum::<usize>()
    }

    /// Copies the window and then each fragment into `dst`, which must be
    /// [`total_len`](Self::total_len) bytes long (a scatter-gather read: what a DMA engine
    /// does for a device, or a driver's copy for one that cannot gather).
    pub fn gather_into(&self, dst: &mut [u8]) -> Result<(), BufError> {
        let total = self.total_len();
        if dst.len() != total {
            return Err(BufError::TooShort {
                need: total,
                have: dst.len(),
            });
        }
        let (head, mut rest) = dst.split_at_mut(self.len());
        head.copy_from_slice(self.data());
        for f in self.frags() {
            let (piece, tail) = rest.split_at_mut(f.len());
            piece.copy_from_slice(f);
            rest = tail;
        }
        Ok(())
    }

    /// Copies the fragments into the tailroom, so that the window holds everything, if
    /// the tailroom is large enough; otherwise changes nothing.
    pub fn linearize_in_place(&mut self) -> Result<(), BufError> {
        let need = self.total_len() - self.len();
        if need > self.tailroom() {
            return Err(BufError::NoTailroom {
                need,
                have: self.tailroom(),
            });
        }
        let Some(mut frags) = self.0.frags.take() else {
            return Ok(());
        };
        // The tailroom was checked: nothing below fails.
        for f in frags.drain(..) {
            self.extend_from_slice(&f)?;
        }
        self.0.frags = Some(frags);
        Ok(())
    }

    /// A buffer over `block` with the window `start..end`, counted by pool `origin`. The
    /// caller (the pool) guarantees `start <= end <= block.len()`.
    #[inline]
    pub(super) fn from_block(block: Box<[u8]>, start: usize, end: usize, origin: u64) -> Self {
        debug_assert!(start <= end && end <= block.len() && block.len() <= MAX_BLOCK);
        PacketBuf(Box::new(Inner {
            block,
            start: start as u32,
            end: end as u32,
            origin,
            tx_offload: TxOffload::default(),
            rx_dst: [0; 4],
            frags: None,
        }))
    }

    /// A buffer over a recycled `block` (its header with it) with the window
    /// `start..end`, counted by pool `origin`. The caller (the pool) guarantees
    /// `start <= end <= block.capacity()`.
    #[inline]
    pub(super) fn from_recycled(block: Block, start: usize, end: usize, origin: u64) -> Self {
        let mut inner = block.0;
        debug_assert!(start <= end && end <= inner.block.len());
        inner.start = start as u32;
        inner.end = end as u32;
        inner.origin = origin;
        PacketBuf(inner)
    }

    /// The block with its header, for the pool to hand out again: fragments and offload
    /// requests dropped.
    #[inline]
    pub(super) fn into_recycled(self) -> Block {
        let mut buf = self;
        buf.clear_frags();
        let mut inner = buf.0;
        inner.tx_offload = TxOffload::default();
        Block(inner)
    }

    /// The block and the window, giving up the buffer.
    #[inline]
    pub(super) fn into_parts(self) -> (Box<[u8]>, usize, usize) {
        let inner = *self.0;
        (inner.block, inner.start as usize, inner.end as usize)
    }

    #[inline]
    pub(super) fn origin(&self) -> u64 {
        self.0.origin
    }

    #[inline]
    pub(super) fn set_origin(&mut self, origin: u64) {
        self.0.origin = origin;
    }

    /// The address of the block: tests use it to tell blocks apart.
    #[cfg(test)]
    pub(super) fn block_addr(&self) -> usize {
        self.0.block.as_ptr() as usize
    }
}

/// A zeroed block of `size` bytes, or a typed error if the allocator cannot provide it.
fn zeroed_block(size: usize) -> Result<Box<[u8]>, BufError> {
    let mut v = Vec::new();
    v.try_reserve_exact(size)
        .map_err(|_| BufError::OutOfMemory { size })?;
    v.resize(size, 0);
    Ok(v.into_boxed_slice())
}

impl AsRef<[u8]> for PacketBuf {
    fn as_ref(&self) -> &[u8] {
        self.data()
    }
}

impl AsMut<[u8]> for PacketBuf {
    fn as_mut(&mut self) -> &mut [u8] {
        self.data_mut()
    }
}

impl fmt::Debug for PacketBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PacketBuf")
            .field("headroom", &self.headroom())
            .field("len", &self.len())
            .field("tailroom", &self.tailroom())
            .field("pooled", &(self.0.origin != NO_POOL))
            .field("frags", &self.frags().len())
            .finish()
    }
}

// Moved several times per packet by every layer: one word.
const _: () = assert!(std::mem::size_of::<PacketBuf>() == std::mem::size_of::<usize>());
// The header: `rx_dst` took padding it had, not room.
const _: () = assert!(std::mem::size_of::<Inner>() == 48);

/// A free block of a pool, with the header it was handed out in (recycled together).
#[derive(Debug)]
pub(super) struct Block(Box<Inner>);

impl Block {
    /// A zeroed block of `size` bytes from the global allocator, with a header.
    pub(super) fn fresh(size: usize) -> Block {
        Block(Box::new(Inner {
            block: vec![0u8; size].into_boxed_slice(),
            start: 0,
            end: 0,
            origin: NO_POOL,
            tx_offload: TxOffload::default(),
            rx_dst: [0; 4],
            frags: None,
        }))
    }

    /// The block's size.
    #[inline]
    pub(super) fn capacity(&self) -> usize {
        self.0.block.len()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn fragments_follow_the_window_uncopied_until_gathered() {
        let loan = crate::buf::Loan::new((0..100u8).collect::<Vec<_>>());
        let mut b = PacketBuf::new(4, 8, 60).unwrap();
        b.data_mut().copy_from_slice(b"head");
        b.push_frag(loan.slice(10..20).unwrap());
        b.push_frag(loan.slice(..0).unwrap()); // empty: not kept
        b.push_frag(loan.slice(90..).unwrap());
        assert_eq!((b.len(), b.total_len(), b.frags().len()), (4, 24, 2));
        assert_eq!(loan.outstanding(), 2, "the buffer holds the loan");
        b.prepend_from_slice(b"IP").unwrap();
        let mut out = vec![0; b.total_len()];
        b.gather_into(&mut out).unwrap();
        let mut want = b"IPhead".to_vec();
        want.extend(10..20u8);
        want.extend(90..100u8);
        assert_eq!(out, want);
        assert!(b.gather_into(&mut [0; 3]).is_err());
        b.linearize_in_place().unwrap();
        assert_eq!((b.data(), b.has_frags()), (&want[..], false));
        assert!(loan.is_complete(), "linearized: the loan is free");

        let mut small = PacketBuf::new(1, 0, 2).unwrap();
        small.push_frag(loan.slice(0..3).unwrap());
        assert!(small.linearize_in_place().is_err());
        assert_eq!(small.total_len(), 4, "a refused linearize changes nothing");
        small.reset(0).unwrap();
        assert!(
            loan.is_complete(),
            "a reset buffer lets go of its fragments"
        );
    }

    use super::*;
    use proptest::prelude::*;

    #[test]
    fn new_lays_out_headroom_window_tailroom() {
        let b = PacketBuf::new(10, 20, 30).unwrap();
        assert_eq!(
            (b.headroom(), b.len(), b.tailroom(), b.capacity()),
            (20, 10, 30, 60)
        );
        assert_eq!(b.data(), &[0; 10]);
        assert!(!b.is_empty());
        let e = PacketBuf::new(0, 0, 0).unwrap();
        assert!(e.is_empty());
        assert_eq!(e.capacity(), 0);
    }

    #[test]
    fn prepend_exactly_the_headroom_then_one_more_fails() {
        let mut b = PacketBuf::from_slice(b"payload", 14).unwrap();
        b.prepend(6).unwrap().copy_from_slice(b"header");
        b.prepend_from_slice(b"ethernet-hdr").unwrap_err();
        b.prepend(8).unwrap().copy_from_slice(b"ethernet");
        assert_eq!(b.headroom(), 0);
        assert_eq!(b.data(), b"ethernetheaderpayload");
        assert_eq!(
            b.prepend(1).unwrap_err(),
            BufError::NoHeadroom { need: 1, have: 0 }
        );
        assert_eq!(b.prepend(0).unwrap(), &mut [] as &mut [u8]);
        assert_eq!(b.data(), b"ethernetheaderpayload");
    }

    #[test]
    fn append_exactly_the_tailroom_then_one_more_fails() {
        let mut b = PacketBuf::new(0, 4, 5).unwrap();
        b.extend_from_slice(b"abc").unwrap();
        assert_eq!(
            b.extend_from_slice(b"def").unwrap_err(),
            BufError::NoTailroom { need: 3, have: 2 }
        );
        b.append(2).unwrap().copy_from_slice(b"de");
        assert_eq!(b.tailroom(), 0);
        assert_eq!(
            b.append(1).unwrap_err(),
            BufError::NoTailroom { need: 1, have: 0 }
        );
        assert_eq!(b.data(), b"abcde");
        assert_eq!(
            b.append(usize::MAX).unwrap_err(),
            BufError::NoTailroom {
                need: usize::MAX,
                have: 0
            }
        );
    }

    #[test]
    fn trims_move_the_window_and_refuse_past_the_length() {
        let mut b = PacketBuf::from_slice(b"0123456789", 2).unwrap();
        b.trim_front(3).unwrap();
        b.trim_back(2).unwrap();
        assert_eq!(b.data(), b"34567");
        assert_eq!((b.headroom(), b.tailroom()), (5, 2));
        assert_eq!(
            b.trim_front(6).unwrap_err(),
            BufError::TooShort { need: 6, have: 5 }
        );
        assert_eq!(
            b.trim_back(usize::MAX).unwrap_err(),
            BufError::TooShort {
                need: usize::MAX,
                have: 5
            }
        );
        assert_eq!(b.data(), b"34567");
        b.trim_front(5).unwrap();
        assert!(b.is_empty());
        b.trim_back(0).unwrap();
        // What was stripped is headroom again: the header can be rebuilt in place.
        b.prepend(3).unwrap();
        assert_eq!(b.data(), b"567");
    }

    #[test]
    fn reset_places_an_empty_window() {
        let mut b = PacketBuf::from_slice(b"abc", 1).unwrap();
        b.reset(4).unwrap();
        assert_eq!((b.headroom(), b.len(), b.tailroom()), (4, 0, 0));
        b.reset(0).unwrap();
        assert_eq!((b.headroom(), b.len(), b.tailroom()), (0, 0, 4));
        assert_eq!(
            b.reset(5).unwrap_err(),
            BufError::TooLarge { need: 5, max: 4 }
        );
        assert_eq!((b.headroom(), b.tailroom()), (0, 4));
    }

    #[test]
    fn impossible_sizes_are_errors_not_panics() {
        assert!(matches!(
            PacketBuf::new(usize::MAX, 1, 0),
            Err(BufError::TooLarge { .. })
        ));
        assert!(matches!(
            PacketBuf::new(1, usize::MAX, 1),
            Err(BufError::TooLarge { .. })
        ));
        // Blocks are at most 4 GiB − 1 (the window's ends are 32-bit).
        assert!(matches!(
            PacketBuf::new(usize::MAX, 0, 0),
            Err(BufError::TooLarge { .. })
        ));
        assert!(matches!(
            PacketBuf::new(MAX_BLOCK, 0, 1),
            Err(BufError::TooLarge { need, max }) if need == MAX_BLOCK + 1 && max == MAX_BLOCK
        ));
    }

    #[test]
    fn as_ref_and_as_mut_are_the_window() {
        let mut b = PacketBuf::from_slice(b"xyz", 3).unwrap();
        b.as_mut()[0] = b'X';
        assert_eq!(b.as_ref(), b"Xyz");
        let dbg = format!("{b:?}");
        assert!(
            dbg.contains("headroom: 3") && dbg.contains("len: 3"),
            "{dbg}"
        );
    }

    #[test]
    fn a_buffer_crosses_threads_without_a_copy() {
        let b = PacketBuf::from_slice(b"frame", 8).unwrap();
        let addr = b.block_addr();
        let (b, addr2) = std::thread::spawn(move || {
            let a = b.block_addr();
            (b, a)
        })
        .join()
        .unwrap();
        assert_eq!(addr, addr2);
        assert_eq!(b.data(), b"frame");
    }

    /// One operation on a buffer, for the model test.
    #[derive(Clone, Debug)]
    enum Op {
        Prepend(Vec<u8>),
        Append(Vec<u8>),
        TrimFront(usize),
        TrimBack(usize),
        Reset(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..24).prop_map(Op::Prepend),
            proptest::collection::vec(any::<u8>(), 0..24).prop_map(Op::Append),
            (0usize..40).prop_map(Op::TrimFront),
            (0usize..40).prop_map(Op::TrimBack),
            (0usize..80).prop_map(Op::Reset),
        ]
    }

    proptest! {
        /// Random operations against a model: (headroom, data, tailroom) as numbers and a
        /// vector. A refused operation must leave the buffer as it was.
        #[test]
        fn operations_match_a_model(
            head in 0usize..32, init in proptest::collection::vec(any::<u8>(), 0..32),
            tail in 0usize..32, ops in proptest::collection::vec(op(), 0..40),
        ) {
            let mut b = PacketBuf::new(init.len(), head, tail).unwrap();
            b.data_mut().copy_from_slice(&init);
            let cap = head + init.len() + tail;
            let (mut h, mut data) = (head, init.clone());
            for op in ops {
                match op {
                    Op::Prepend(bytes) => {
                        let r = b.prepend_from_slice(&bytes);
                        if bytes.len() <= h {
                            prop_assert!(r.is_ok());
                            h -= bytes.len();
                            data.splice(0..0, bytes);
                        } else {
                            prop_assert_eq!(r, Err(BufError::NoHeadroom { need: bytes.len(), have: h }));
                        }
                    }
                    Op::Append(bytes) => {
                        let t = cap - h - data.len();
                        let r = b.extend_from_slice(&bytes);
                        if bytes.len() <= t {
                            prop_assert!(r.is_ok());
                            data.extend_from_slice(&bytes);
                        } else {
                            prop_assert_eq!(r, Err(BufError::NoTailroom { need: bytes.len(), have: t }));
                        }
                    }
                    Op::TrimFront(n) => {
                        let r = b.trim_front(n);
                        if n <= data.len() {
                            prop_assert!(r.is_ok());
                            h += n;
                            data.drain(..n);
                        } else {
                            prop_assert_eq!(r, Err(BufError::TooShort { need: n, have: data.len() }));
                        }
                    }
                    Op::TrimBack(n) => {
                        let r = b.trim_back(n);
                        if n <= data.len() {
                            prop_assert!(r.is_ok());
                            data.truncate(data.len() - n);
                        } else {
                            prop_assert_eq!(r, Err(BufError::TooShort { need: n, have: data.len() }));
                        }
                    }
                    Op::Reset(n) => {
                        let r = b.reset(n);
                        if n <= cap {
                            prop_assert!(r.is_ok());
                            h = n;
                            data.clear();
                        } else {
                            prop_assert_eq!(r, Err(BufError::TooLarge { need: n, max: cap }));
                        }
                    }
                }
                prop_assert_eq!(b.data(), &data[..]);
                prop_assert_eq!(b.headroom(), h);
                prop_assert_eq!(b.tailroom(), cap - h - data.len());
                prop_assert_eq!(b.capacity(), cap);
            }
        }
    }
}
