//! [`RecvBuffer`]: a TCP connection's receive buffer, holding copied bytes and whole pages
//! the NIC deposited (zero-copy receive, paper 004 §3.1).
//!
//! Copied bytes live in a [`ByteRing`], whose free space is the receive window and holds
//! out-of-order data until the hole before it fills (see `ring.rs`). A connection in
//! zero-copy receive mode also keeps **pages**: when a segment arrives in order, nothing
//! is queued out of order, and the NIC split its headers off and put its payload on a
//! page boundary ([`crate::driver::NicConfig::header_split`]), TCP input *stages* the
//! payload's whole pages by reference ([`RecvBuffer::stage_pages`]) and copies only the
//! rest, the "odd data", into the ring; if the connection accepts the segment,
//! [`commit`](RecvBuffer::commit) makes the pages readable, then the odd bytes.
//!
//! The readable stream is then a sequence of runs, pages and ring bytes, in arrival
//! order; `runs` records it only while pages are held (empty `runs` means every readable
//! byte is in the ring, the ordinary case, which costs nothing extra). Because pages are
//! staged only when nothing waits out of order, the ring's free space holds no data when
//! pages join the stream, and ring offsets stay relative to `RCV.NXT`.
//!
//! Pages count against the window like copied bytes: the window is the ring's free space
//! less the bytes in pages, so the application's unread pages bound what the peer may
//! send.

use std::collections::VecDeque;

use super::ring::ByteRing;
use crate::buf::ExtBuf;

/// A readable run of the stream.
#[derive(Debug)]
enum Run {
    /// Pages by reference.
    Pages(ExtBuf),
    /// This many bytes at the front of the ring (after the runs before).
    Ring(usize),
}

/// What the front of the stream gave the application.
#[derive(Debug)]
pub struct Chunk {
    pub data: ExtBuf,
    /// Whether the bytes were copied (odd data, or a connection without pages) rather
    /// than handed over by reference.
    pub copied: bool,
}

/// The receive buffer: copied bytes and pages (see the module documentation).
pub struct RecvBuffer {
    ring: ByteRing,
    runs: VecDeque<Run>,
    pages: usize,
    staged: Option<ExtBuf>,
}

impl RecvBuffer {
    pub fn new(capacity: usize) -> RecvBuffer {
        RecvBuffer {
            ring: ByteRing::new(capacity),
            runs: VecDeque::new(),
            pages: 0,
            staged: None,
        }
    }

    pub fn capacity(&self) -> usize {
        self.ring.capacity()
    }

    /// Readable bytes.
    pub fn len(&self) -> usize {
        self.ring.len() + self.pages
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The receive window: room left, counting pages held.
    pub fn free(&self) -> usize {
        self.ring.free().saturating_sub(self.pages)
    }

    /// Readable bytes held in pages.
    pub fn pages(&self) -> usize {
        self.pages
    }

    /// See [`ByteRing::unreadable_slices_mut`].
    pub fn unreadable_slices_mut(&mut self, offset: usize, len: usize) -> (&mut [u8], &mut [u8]) {
        self.ring.unreadable_slices_mut(offset, len)
    }

    /// See [`ByteRing::write_unreadable`].
    pub fn write_unreadable(&mut self, offset: usize, data: &[u8]) -> usize {
        self.ring.write_unreadable(offset, data)
    }

    /// Stages whole pages of an in-order segment to be made readable, ahead of the odd
    /// bytes written at offset 0 of the ring, by the next [`commit`](Self::commit). The
    /// caller has checked that nothing waits out of order and that the pages and the odd
    /// bytes fit the window.
    pub fn stage_pages(&mut self, pages: ExtBuf) {
        self.staged = Some(pages);
    }

    /// Forgets staged pages the connection did not take (the segment was not accepted).
    pub fn unstage(&mut self) {
        self.staged = None;
    }

    /// Makes `n` bytes readable: the staged pages first (if any), then bytes from the
    /// ring's free space. Returns how many became readable.
    #[inline]
    pub fn commit(&mut self, n: usize) -> usize {
        let mut done = 0;
        if let Some(p) = self.staged.take() {
            let k = p.len().min(n);
            if k > 0 {
                if self.runs.is_empty() && !self.ring.is_empty() {
                    self.runs.push_back(Run::Ring(self.ring.len()));
                }
                if let Ok(p) = p.slice(..k) {
                    self.runs.push_back(Run::Pages(p));
                    self.pages += k;
                    done = k;
                }
            }
        }
        let c = self.ring.commit(n - done);
        if c > 0 && !self.runs.is_empty() {
            match self.runs.back_mut() {
                Some(Run::Ring(r)) => *r += c,
                _ => self.runs.push_back(Run::Ring(c)),
            }
        }
        done + c
    }

    /// Copies readable bytes into `dst`, in stream order; returns how many.
    pub fn pop_into(&mut self, dst: &mut [u8]) -> usize {
        if self.runs.is_empty() {
            return self.ring.pop_into(dst);
        }
        let mut n = 0;
        while n < dst.len() {
            let Some(run) = self.runs.front_mut() else {
                break;
            };
            let want = dst.len() - n;
            let (took, emptied) = match run {
                Run::Pages(p) => {
                    let k = want.min(p.len());
                    dst[n..n + k].copy_from_slice(&p[..k]);
                    let _ = p.trim_front(k);
                    self.pages -= k;
                    (k, p.is_empty())
                }
                Run::Ring(r) => {
                    let k = self.ring.pop_into(&mut dst[n..n + want.min(*r)]);
                    *r -= k;
                    (k, *r == 0)
                }
            };
            n += took;
            if emptied {
                self.runs.pop_front();
            }
            if took == 0 {
                break;
            }
        }
        n
    }

    /// The front of the stream, at most `max` bytes, for a zero-copy read: pages by
    /// reference, or (for ring bytes) a copy. `None` when nothing is readable.
    pub fn take_chunk(&mut self, max: usize) -> Option<Chunk> {
        if self.is_empty() || max == 0 {
            return None;
        }
        if let Some(Run::Pages(p)) = self.runs.front_mut() {
            let k = max.min(p.len());
            let data = p.split_to(k).ok()?;
            self.pages -= k;
            if p.is_empty() {
                self.runs.pop_front();
            }
            return Some(Chunk {
                data,
                copied: false,
            });
        }
        let k = match self.runs.front() {
            Some(Run::Ring(r)) => max.min(*r),
            _ => max.min(self.ring.len()),
        };
        let (a, b) = self.ring.slices(0, k);
        let mut copy = Vec::with_capacity(k);
        copy.extend_from_slice(a);
        copy.extend_from_slice(b);
        self.ring.consume(copy.len());
        if let Some(Run::Ring(r)) = self.runs.front_mut() {
            *r -= copy.len();
            if *r == 0 {
                self.runs.pop_front();
            }
        }
        Some(Chunk {
            data: ExtBuf::new(copy),
            copied: true,
        })
    }

    /// Whether the front of the stream is pages (a zero-copy read takes them by
    /// reference) rather than ring bytes (it copies them).
    pub fn front_is_pages(&self) -> bool {
        matches!(self.runs.front(), Some(Run::Pages(_)))
    }
}

impl std::fmt::Debug for RecvBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvBuffer")
            .field("copied", &self.ring.len())
            .field("pages", &self.pages)
            .field("runs", &self.runs.len())
            .field("capacity", &self.capacity())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Receives `odd` then a segment of `pages` staged pages plus `tail` odd bytes.
    fn segment(b: &mut RecvBuffer, pages: &[u8], tail: &[u8]) -> usize {
        b.stage_pages(ExtBuf::copy_page_aligned(pages));
        b.write_unreadable(0, tail);
        b.commit(pages.len() + tail.len())
    }

    #[test]
    fn pages_and_odd_bytes_read_back_in_stream_order_by_copy_or_by_reference() {
        let mut b = RecvBuffer::new(64 * 1024);
        let p1: Vec<u8> = (0..8192).map(|i| i as u8).collect();
        let p2: Vec<u8> = (0..4096).map(|i| (i * 3) as u8).collect();
        b.write_unreadable(0, b"lead");
        assert_eq!(b.commit(4), 4);
        assert_eq!(segment(&mut b, &p1, b"odd1"), 8196);
        assert_eq!(segment(&mut b, &p2, b""), 4096);
        b.write_unreadable(0, b"tail");
        assert_eq!(b.commit(4), 4);
        assert_eq!((b.len(), b.pages()), (4 + 8196 + 4096 + 4, 8192 + 4096));
        assert_eq!(
            b.free(),
            64 * 1024 - b.len(),
            "pages count against the window"
        );

        let c = b.take_chunk(100).unwrap();
        assert!(c.copied);
        assert_eq!(&*c.data, b"lead");
        let c = b.take_chunk(usize::MAX).unwrap();
        assert!(!c.copied && c.data.is_page_aligned());
        assert_eq!(&*c.data, &p1[..]);
        let mut small = [0u8; 6];
        assert_eq!(b.pop_into(&mut small), 6, "a copying read crosses runs");
        assert_eq!(&small, b"odd1\x00\x03");
        let c = b.take_chunk(usize::MAX).unwrap();
        assert!(!c.copied);
        assert_eq!(&*c.data, &p2[2..]);
        let mut rest = [0u8; 10];
        assert_eq!(b.pop_into(&mut rest), 4);
        assert_eq!(&rest[..4], b"tail");
        assert!(b.is_empty() && b.take_chunk(10).is_none());
        assert_eq!(b.free(), 64 * 1024);
    }

    #[test]
    fn an_unaccepted_segment_leaves_nothing_behind() {
        let mut b = RecvBuffer::new(16 * 1024);
        b.stage_pages(ExtBuf::copy_page_aligned(&[7; 4096]));
        b.unstage();
        assert!(b.is_empty());
        b.write_unreadable(0, b"abc");
        assert_eq!(b.commit(3), 3, "the next commit takes ring bytes only");
        assert_eq!(b.pages(), 0);
        let mut out = [0u8; 3];
        assert_eq!(b.pop_into(&mut out), 3);
        assert_eq!(&out, b"abc");
    }

    #[test]
    fn a_partial_commit_takes_the_front_of_the_pages() {
        let mut b = RecvBuffer::new(16 * 1024);
        b.stage_pages(ExtBuf::copy_page_aligned(&[9; 8192]));
        assert_eq!(b.commit(5000), 5000);
        assert_eq!((b.len(), b.pages()), (5000, 5000));
    }
}
