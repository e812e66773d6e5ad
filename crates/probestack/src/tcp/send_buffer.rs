//! [`SendBuffer`]: a TCP connection's send buffer, holding copied bytes and loaned memory
//! (zero-copy send, paper 004 §3.1).
//!
//! The stream waiting to be acknowledged is, in order, the bytes in a [`ByteRing`] (what
//! the application wrote with a copy) and then a queue of [`ExtBuf`]s (memory the
//! application loaned). TCP reads the bytes of a segment at offset `SEG.SEQ - SND.UNA`
//! with [`SendBuffer::pieces`]: ring bytes as slices to copy, loaned bytes as `ExtBuf`
//! slices the frame carries by reference to the device. An acknowledgment
//! [`consume`](SendBuffer::consume)s from the front; a loan's last reference goes when
//! its last byte is acknowledged and no frame in flight still holds it, which is the
//! application's completion ([`crate::buf::Loan::is_complete`]).
//!
//! Order is kept by one rule: the ring is used only while no loan is queued. A copying
//! write that comes after a loan becomes a loaned-style chunk of its own (a copy into a
//! new block, as the ring would have made), so bytes never overtake each other.
//!
//! Loaned bytes count against the buffer's capacity like copied ones: `SO_SNDBUF` bounds
//! the memory the application has pinned in the stack.

use std::collections::VecDeque;

use super::ring::ByteRing;
use crate::buf::ExtBuf;

/// A part of the stream for one segment: bytes to copy, or loaned bytes to send by
/// reference.
#[derive(Debug)]
pub enum Piece<'a> {
    Copy(&'a [u8]),
    Loaned(ExtBuf),
}

/// The send buffer: copied bytes, then loaned ones (see the module documentation).
pub struct SendBuffer {
    ring: ByteRing,
    loans: VecDeque<ExtBuf>,
    loaned: usize,
}

impl SendBuffer {
    pub fn new(capacity: usize) -> SendBuffer {
        SendBuffer {
            ring: ByteRing::new(capacity),
            loans: VecDeque::new(),
            loaned: 0,
        }
    }

    pub fn capacity(&self) -> usize {
        self.ring.capacity()
    }

    /// Bytes queued (sent or not, not yet acknowledged).
    pub fn len(&self) -> usize {
        self.ring.len() + self.loaned
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
        if self.loans.is_empty() {
            return self.ring.push(data);
        }
        let n = data.len().min(self.free());
        if n > 0 {
            self.loans.push_back(ExtBuf::new(data[..n].to_vec()));
            self.loaned += n;
        }
        n
    }

    /// Queues as much of the loaned `data` as fits, without copying; returns how much.
    pub fn push_loan(&mut self, data: &ExtBuf) -> usize {
        let n = data.len().min(self.free());
        if n > 0 {
            // A slice of the caller's range: the same block, one more reference.
            if let Ok(part) = data.slice(..n) {
                self.loans.push_back(part);
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
            let Some(front) = self.loans.front_mut() else {
                break;
            };
            if front.len() <= left {
                left -= front.len();
                self.loaned -= front.len();
                self.loans.pop_front();
            } else {
                let _ = front.trim_front(left);
                self.loaned -= left;
                left = 0;
            }
        }
        n - left
    }

    /// How many of the bytes `offset..offset + len` are copied ones (they come first).
    pub fn copied_part(&self, offset: usize, len: usize) -> usize {
        let len = len.min(self.len().saturating_sub(offset));
        len.min(self.ring.len().saturating_sub(offset))
    }

    /// The bytes `offset..offset + len` of the queue, in order, clamped to what is
    /// queued: ring bytes as at most two slices to copy, loaned bytes as slices sharing
    /// the application's blocks.
    pub fn pieces(&self, offset: usize, len: usize) -> Vec<Piece<'_>> {
        let mut out = Vec::new();
        self.for_each_piece(offset, len, |p| out.push(p));
        out
    }

    /// [`pieces`](Self::pieces) without collecting them.
    pub fn for_each_piece<'a>(&'a self, offset: usize, len: usize, mut f: impl FnMut(Piece<'a>)) {
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
        for loan in &self.loans {
            if len == 0 {
                break;
            }
            if offset >= loan.len() {
                offset -= loan.len();
                continue;
            }
            let here = len.min(loan.len() - offset);
            if let Ok(s) = loan.slice(offset..offset + here) {
                f(Piece::Loaned(s));
            }
            len -= here;
            offset = 0;
        }
    }
}

impl std::fmt::Debug for SendBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendBuffer")
            .field("copied", &self.ring.len())
            .field("loaned", &self.loaned)
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
        b.for_each_piece(offset, len, |p| match p {
            Piece::Copy(s) => v.extend_from_slice(s),
            Piece::Loaned(e) => v.extend_from_slice(&e),
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
        assert_eq!((b.len(), b.loaned(), b.free()), (45, 42, 55));
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
}
