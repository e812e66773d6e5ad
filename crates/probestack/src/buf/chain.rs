//! [`BufChain`]: an ordered list of segments for scatter-gather, each a [`PacketBuf`] or an
//! [`ExtBuf`].

use std::collections::VecDeque;

use super::{BufError, ExtBuf, PacketBuf, Pool};

/// One piece of a chain: a buffer the chain owns and may write, or shared read-only
/// memory.
#[derive(Debug)]
pub enum Segment {
    Packet(PacketBuf),
    Ext(ExtBuf),
}

impl Segment {
    /// The segment's bytes (a packet buffer's window).
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        match self {
            Segment::Packet(p) => p.data(),
            Segment::Ext(e) => e.as_slice(),
        }
    }

    #[inline]
    pub fn len(&self) -> usize {
        match self {
            Segment::Packet(p) => p.len(),
            Segment::Ext(e) => e.len(),
        }
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[inline]
    fn trim_front(&mut self, n: usize) -> Result<(), BufError> {
        match self {
            Segment::Packet(p) => p.trim_front(n),
            Segment::Ext(e) => e.trim_front(n),
        }
    }
}

impl From<PacketBuf> for Segment {
    fn from(p: PacketBuf) -> Segment {
        Segment::Packet(p)
    }
}

impl From<ExtBuf> for Segment {
    fn from(e: ExtBuf) -> Segment {
        Segment::Ext(e)
    }
}

/// An ordered list of segments whose bytes, one after the other, are one message.
///
/// The total length is kept, so [`BufChain::len`] costs nothing. Segments may be empty.
/// Operations that cut bytes off take whole segments where they can and cut at most one
/// segment: an external segment is cut by slicing (shared, no copy), a packet segment by
/// copying the smaller of its two sides into a new buffer (it has one owner, so it cannot
/// be shared). Every operation that fails changes nothing.
#[derive(Debug, Default)]
pub struct BufChain {
    segs: VecDeque<Segment>,
    len: usize,
}

impl BufChain {
    /// An empty chain (allocates nothing until a segment is pushed).
    pub const fn new() -> BufChain {
        BufChain {
            segs: VecDeque::new(),
            len: 0,
        }
    }

    /// The number of bytes in all segments.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The number of segments, empty ones included.
    pub fn segment_count(&self) -> usize {
        self.segs.len()
    }

    /// The segments in order.
    pub fn segments(&self) -> impl ExactSizeIterator<Item = &Segment> + DoubleEndedIterator {
        self.segs.iter()
    }

    /// Each segment's bytes in order, one slice per segment (an empty segment gives an
    /// empty slice): what a scatter-gather device sends.
    pub fn slices(&self) -> impl ExactSizeIterator<Item = &[u8]> + DoubleEndedIterator {
        self.segs.iter().map(Segment::as_slice)
    }

    /// Adds a segment at the end.
    pub fn push_back(&mut self, seg: impl Into<Segment>) {
        let seg = seg.into();
        self.len += seg.len();
        self.segs.push_back(seg);
    }

    /// Adds a segment at the front (a header in front of a payload).
    pub fn push_front(&mut self, seg: impl Into<Segment>) {
        let seg = seg.into();
        self.len += seg.len();
        self.segs.push_front(seg);
    }

    /// Moves every segment of `other` to the end of this chain.
    pub fn push_chain(&mut self, mut other: BufChain) {
        self.len += other.len;
        self.segs.append(&mut other.segs);
    }

    /// Takes the first segment off.
    pub fn pop_front(&mut self) -> Option<Segment> {
        let seg = self.segs.pop_front()?;
        self.len -= seg.len();
        Some(seg)
    }

    /// Copies the whole chain into the front of `dst` and returns its length; `dst` must
    /// hold at least [`BufChain::len`] bytes.
    pub fn copy_to(&self, dst: &mut [u8]) -> Result<usize, BufError> {
        let Some(dst) = dst.get_mut(..self.len) else {
            return Err(BufError::TooShort {
                need: self.len,
                have: dst.len(),
            });
        };
        self.copy_range_to(0, dst)?;
        Ok(self.len)
    }

    /// Fills `dst` with the chain's bytes `offset..offset + dst.len()`.
    pub fn copy_range_to(&self, offset: usize, dst: &mut [u8]) -> Result<(), BufError> {
        let end = offset.saturating_add(dst.len());
        if end > self.len {
            return Err(BufError::TooShort {
                need: end,
                have: self.len,
            });
        }
        let mut skip = offset;
        let mut out = 0;
        for s in self.slices() {
            if out == dst.len() {
                break;
            }
            if skip >= s.len() {
                skip -= s.len();
                continue;
            }
            let s = &s[skip..];
            skip = 0;
            let n = s.len().min(dst.len() - out);
            dst[out..out + n].copy_from_slice(&s[..n]);
            out += n;
        }
        Ok(())
    }

    /// The chain's bytes in one vector (for tests and slow paths).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len);
        for s in self.slices() {
            v.extend_from_slice(s);
        }
        v
    }

    /// Drops the first `n` bytes, across segments. Segments emptied by it are removed;
    /// packet buffers among them are dropped (use [`BufChain::advance_free`] to give them
    /// back to a pool).
    pub fn advance(&mut self, n: usize) -> Result<(), BufError> {
        self.advance_with(n, drop)
    }

    /// [`BufChain::advance`], freeing the packet buffers it removes into `pool` (TCP
    /// dropping acknowledged data from its send queue).
    pub fn advance_free(&mut self, n: usize, pool: &mut Pool) -> Result<(), BufError> {
        self.advance_with(n, |p| pool.free(p))
    }

    fn advance_with(
        &mut self,
        n: usize,
        mut release: impl FnMut(PacketBuf),
    ) -> Result<(), BufError> {
        if n > self.len {
            return Err(BufError::TooShort {
                need: n,
                have: self.len,
            });
        }
        let mut left = n;
        while left > 0 {
            let Some(front) = self.segs.front_mut() else {
                break;
            };
            let flen = front.len();
            if flen <= left {
                left -= flen;
                if let Some(Segment::Packet(p)) = self.segs.pop_front() {
                    release(p);
                }
            } else {
                front.trim_front(left)?;
                left = 0;
            }
        }
        self.len -= n;
        Ok(())
    }

    /// Takes the first `n` bytes off as a new chain; `self` keeps the rest.
    ///
    /// Whole segments move. A segment the cut falls inside is shared if it is external
    /// (two slices of one block, no copy); if it is a packet buffer, the smaller side is
    /// copied into a new buffer of its own and the buffer itself stays with the larger
    /// side (keeping its headroom when that is the front). `n = 0` gives an empty chain,
    /// `n = len` the whole chain; `n > len` is an error.
    pub fn split_to(&mut self, n: usize) -> Result<BufChain, BufError> {
        if n > self.len {
            return Err(BufError::TooShort {
                need: n,
                have: self.len,
            });
        }
        // Find the cut first: the number of whole segments before it and the offset into
        // the next one, so that a failed copy leaves the chain as it was.
        let mut whole = 0;
        let mut left = n;
        for seg in &self.segs {
            if left == 0 || seg.len() > left {
                break;
            }
            left -= seg.len();
            whole += 1;
        }
        // `left > 0` here means the cut falls inside segment `whole`, at `left`.
        let cut = if left > 0 {
            let Some(seg) = self.segs.get_mut(whole) else {
                // Unreachable: `n <= len` leaves a segment holding the rest.
                return Err(BufError::TooShort {
                    need: n,
                    have: self.len,
                });
            };
            Some(match seg {
                Segment::Ext(e) => Segment::Ext(e.split_to(left)?),
                Segment::Packet(p) if left <= p.len() - left => {
                    // Copy the front; the buffer keeps the back.
                    let front = PacketBuf::from_slice(&p.data()[..left], 0)?;
                    p.trim_front(left)?;
                    Segment::Packet(front)
                }
                Segment::Packet(p) => {
                    // Copy the back into a new buffer that stays behind; the buffer (with
                    // its headroom) goes to the front chain.
                    let back = PacketBuf::from_slice(&p.data()[left..], 0)?;
                    let tail_len = back.len();
                    p.trim_back(tail_len)?;
                    let front = std::mem::replace(p, back);
                    Segment::Packet(front)
                }
            })
        } else {
            None
        };
        let mut head = BufChain::new();
        head.segs = self.segs.drain(..whole).collect();
        if let Some(seg) = cut {
            head.segs.push_back(seg);
        }
        head.len = n;
        self.len -= n;
        Ok(head)
    }
}

impl From<PacketBuf> for BufChain {
    fn from(p: PacketBuf) -> BufChain {
        let mut c = BufChain::new();
        c.push_back(p);
        c
    }
}

impl From<ExtBuf> for BufChain {
    fn from(e: ExtBuf) -> BufChain {
        let mut c = BufChain::new();
        c.push_back(e);
        c
    }
}

impl FromIterator<Segment> for BufChain {
    fn from_iter<I: IntoIterator<Item = Segment>>(iter: I) -> BufChain {
        let mut c = BufChain::new();
        c.extend(iter);
        c
    }
}

impl Extend<Segment> for BufChain {
    fn extend<I: IntoIterator<Item = Segment>>(&mut self, iter: I) {
        for seg in iter {
            self.push_back(seg);
        }
    }
}

impl IntoIterator for BufChain {
    type Item = Segment;
    type IntoIter = std::collections::vec_deque::IntoIter<Segment>;
    fn into_iter(self) -> Self::IntoIter {
        self.segs.into_iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buf::{Loan, PoolConfig};
    use proptest::prelude::*;

    fn bytes(n: usize, seed: u8) -> Vec<u8> {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    /// A chain of every kind of segment: packet buffers with headroom and tailroom,
    /// external slices of one loan, and empty segments of both kinds. Returns it with the
    /// bytes it should hold.
    fn mixed(loan: &Loan) -> (BufChain, Vec<u8>) {
        let mut c = BufChain::new();
        let mut want = Vec::new();
        let mut push = |c: &mut BufChain, seg: Segment| {
            want.extend_from_slice(seg.as_slice());
            c.push_back(seg);
        };
        push(&mut c, PacketBuf::new(0, 4, 4).unwrap().into());
        push(
            &mut c,
            PacketBuf::from_slice(&bytes(7, 1), 16).unwrap().into(),
        );
        push(&mut c, loan.slice(3..13).unwrap().into());
        push(&mut c, loan.slice(5..5).unwrap().into());
        push(
            &mut c,
            PacketBuf::from_slice(&bytes(1, 2), 0).unwrap().into(),
        );
        push(&mut c, loan.slice(20..41).unwrap().into());
        push(
            &mut c,
            PacketBuf::from_slice(&bytes(12, 3), 2).unwrap().into(),
        );
        push(&mut c, PacketBuf::new(0, 0, 0).unwrap().into());
        (c, want)
    }

    #[test]
    fn an_empty_chain_handles_every_boundary() {
        let mut c = BufChain::new();
        assert!(c.is_empty());
        assert_eq!(c.slices().count(), 0);
        assert_eq!(c.copy_to(&mut []).unwrap(), 0);
        c.copy_range_to(0, &mut []).unwrap();
        assert_eq!(
            c.copy_range_to(1, &mut []).unwrap_err(),
            BufError::TooShort { need: 1, have: 0 }
        );
        c.advance(0).unwrap();
        assert_eq!(
            c.advance(1).unwrap_err(),
            BufError::TooShort { need: 1, have: 0 }
        );
        assert!(c.split_to(0).unwrap().is_empty());
        assert!(c.split_to(1).is_err());
        assert!(c.pop_front().is_none());
    }

    #[test]
    fn slices_and_copies_give_the_concatenation() {
        let loan = Loan::new(bytes(64, 9));
        let (c, want) = mixed(&loan);
        assert_eq!(c.len(), want.len());
        assert_eq!(c.segment_count(), 8);
        assert_eq!(c.slices().count(), 8);
        assert_eq!(c.slices().flatten().copied().collect::<Vec<_>>(), want);
        assert_eq!(c.to_vec(), want);
        let mut dst = vec![0xEE; want.len() + 3];
        assert_eq!(c.copy_to(&mut dst).unwrap(), want.len());
        assert_eq!(&dst[..want.len()], &want[..]);
        assert_eq!(&dst[want.len()..], &[0xEE; 3]);
        assert_eq!(
            c.copy_to(&mut dst[..want.len() - 1]).unwrap_err(),
            BufError::TooShort {
                need: want.len(),
                have: want.len() - 1
            }
        );
        for off in 0..=want.len() {
            for len in 0..=want.len() - off {
                let mut out = vec![0; len];
                c.copy_range_to(off, &mut out).unwrap();
                assert_eq!(out, &want[off..off + len], "offset {off} len {len}");
            }
            let mut one_more = vec![0; want.len() - off + 1];
            assert!(c.copy_range_to(off, &mut one_more).is_err());
        }
        assert!(c.copy_range_to(usize::MAX, &mut [0]).is_err());
    }

    #[test]
    fn split_at_every_offset_gives_both_halves_and_shares_external_memory() {
        let loan = Loan::new(bytes(64, 9));
        let (_, want) = mixed(&loan);
        for n in 0..=want.len() {
            let (mut c, _) = mixed(&loan);
            let head = c.split_to(n).unwrap();
            assert_eq!(head.len(), n);
            assert_eq!(c.len(), want.len() - n);
            assert_eq!(head.to_vec(), &want[..n], "split at {n}");
            assert_eq!(c.to_vec(), &want[n..], "split at {n}");
            let mut joined = head;
            joined.push_chain(c);
            assert_eq!(joined.to_vec(), want);
            // Every external segment still points into the loan: nothing was copied.
            for seg in joined.segments() {
                if let Segment::Ext(e) = seg {
                    assert!(e.same_block(&loan.ext()));
                }
            }
        }
        let (mut c, _) = mixed(&loan);
        assert_eq!(
            c.split_to(want.len() + 1).unwrap_err(),
            BufError::TooShort {
                need: want.len() + 1,
                have: want.len()
            }
        );
        assert_eq!(c.to_vec(), want, "a refused split changes nothing");
        let all = c.split_to(want.len()).unwrap();
        assert_eq!(all.to_vec(), want);
        assert!(c.is_empty());
    }

    #[test]
    fn a_split_packet_keeps_its_headroom_on_the_larger_front() {
        let mut c = BufChain::from(PacketBuf::from_slice(&bytes(100, 0), 40).unwrap());
        let head = c.split_to(90).unwrap();
        let Some(Segment::Packet(p)) = head.segments().next() else {
            panic!("a packet segment");
        };
        assert_eq!((p.headroom(), p.len()), (40, 90));
        let Some(Segment::Packet(rest)) = c.segments().next() else {
            panic!("a packet segment");
        };
        assert_eq!((rest.headroom(), rest.data()), (0, &bytes(100, 0)[90..]));

        let mut c = BufChain::from(PacketBuf::from_slice(&bytes(100, 0), 40).unwrap());
        let head = c.split_to(10).unwrap();
        let Some(Segment::Packet(p)) = c.segments().next() else {
            panic!("a packet segment");
        };
        assert_eq!((p.headroom(), p.len()), (50, 90), "the buffer stays behind");
        assert_eq!(head.to_vec(), &bytes(100, 0)[..10]);
    }

    #[test]
    fn advance_at_every_offset_leaves_the_rest() {
        let loan = Loan::new(bytes(64, 9));
        let (_, want) = mixed(&loan);
        for n in 0..=want.len() {
            let (mut c, _) = mixed(&loan);
            c.advance(n).unwrap();
            assert_eq!(c.len(), want.len() - n);
            assert_eq!(c.to_vec(), &want[n..]);
            assert!(c.advance(c.len() + 1).is_err());
            assert_eq!(c.to_vec(), &want[n..]);
        }
        let (mut c, _) = mixed(&loan);
        c.advance(want.len()).unwrap();
        assert!(c.is_empty());
        drop(c);
        assert!(loan.is_complete());
    }

    #[test]
    fn advance_free_gives_packet_buffers_back_to_the_pool() {
        let mut pool = Pool::new(PoolConfig::new(true));
        let loan = Loan::new(bytes(100, 0));
        let mut c = BufChain::new();
        for _ in 0..3 {
            let mut p = pool.alloc(50, 10).unwrap();
            p.data_mut().fill(7);
            c.push_back(p);
            c.push_back(loan.slice(0..10).unwrap());
        }
        c.advance_free(125, &mut pool).unwrap();
        let s = pool.stats();
        assert_eq!((s.frees, s.outstanding), (2, 1));
        assert_eq!(c.len(), 180 - 125);
        assert_eq!(loan.outstanding(), 1);
        pool.free_chain(c);
        assert_eq!(pool.stats().outstanding, 0);
        assert!(loan.is_complete());
    }

    #[test]
    fn push_front_pop_front_and_collect() {
        let mut c: BufChain = [
            Segment::from(ExtBuf::new(b"payload".to_vec())),
            Segment::from(ExtBuf::new(Vec::new())),
        ]
        .into_iter()
        .collect();
        let mut hdr = PacketBuf::new(0, 20, 0).unwrap();
        hdr.prepend_from_slice(b"hdr:").unwrap();
        c.push_front(hdr);
        assert_eq!(c.to_vec(), b"hdr:payload");
        assert_eq!(c.pop_front().unwrap().as_slice(), b"hdr:");
        assert_eq!(c.len(), 7);
        assert_eq!(c.pop_front().unwrap().len(), 7);
        assert!(c.pop_front().unwrap().is_empty());
        assert!(c.pop_front().is_none());
        assert_eq!(c.len(), 0);
    }

    #[test]
    fn a_chain_crosses_threads() {
        let loan = Loan::new(bytes(1000, 1));
        let mut c = BufChain::from(loan.slice(..500).unwrap());
        c.push_back(PacketBuf::from_slice(b"tail", 0).unwrap());
        let got = std::thread::spawn(move || c.to_vec()).join().unwrap();
        assert_eq!(&got[..500], &bytes(1000, 1)[..500]);
        assert_eq!(&got[500..], b"tail");
        assert!(loan.is_complete());
    }

    /// One operation on a chain, for the model test.
    #[derive(Clone, Debug)]
    enum Op {
        PushPacket { data: Vec<u8>, headroom: usize },
        PushExt { start: usize, len: usize },
        PushFrontPacket(Vec<u8>),
        PopFront,
        Advance(usize),
        SplitTo(usize),
        CopyRange { offset: usize, len: usize },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (proptest::collection::vec(any::<u8>(), 0..40), 0usize..8)
                .prop_map(|(data, headroom)| Op::PushPacket { data, headroom }),
            (0usize..256, 0usize..64).prop_map(|(start, len)| Op::PushExt { start, len }),
            proptest::collection::vec(any::<u8>(), 0..8).prop_map(Op::PushFrontPacket),
            Just(Op::PopFront),
            (0usize..120).prop_map(Op::Advance),
            (0usize..120).prop_map(Op::SplitTo),
            (0usize..120, 0usize..60).prop_map(|(offset, len)| Op::CopyRange { offset, len }),
        ]
    }

    proptest! {
        /// Random operations on a chain against a `Vec<u8>` model. A refused operation must
        /// leave the chain as it was; at the end, the loan is complete once the chain and
        /// every split-off part are dropped.
        #[test]
        fn chain_matches_a_vec_model(ops in proptest::collection::vec(op(), 0..60)) {
            let source: Vec<u8> = (0..320u32).map(|i| (i * 13 + 5) as u8).collect();
            let loan = Loan::new(source.clone());
            let mut chain = BufChain::new();
            let mut model: Vec<u8> = Vec::new();
            let mut parts = Vec::new();
            for op in ops {
                match op {
                    Op::PushPacket { data, headroom } => {
                        chain.push_back(PacketBuf::from_slice(&data, headroom).unwrap());
                        model.extend_from_slice(&data);
                    }
                    Op::PushExt { start, len } => {
                        let e = loan.slice(start..start + len).unwrap();
                        chain.push_back(e);
                        model.extend_from_slice(&source[start..start + len]);
                    }
                    Op::PushFrontPacket(data) => {
                        chain.push_front(PacketBuf::from_slice(&data, 0).unwrap());
                        model.splice(0..0, data);
                    }
                    Op::PopFront => match chain.pop_front() {
                        Some(seg) => {
                            let n = seg.len();
                            prop_assert_eq!(seg.as_slice(), &model[..n]);
                            model.drain(..n);
                        }
                        None => prop_assert!(model.is_empty()),
                    },
                    Op::Advance(n) => {
                        let r = chain.advance(n);
                        if n <= model.len() {
                            prop_assert!(r.is_ok());
                            model.drain(..n);
                        } else {
                            prop_assert_eq!(r, Err(BufError::TooShort { need: n, have: model.len() }));
                        }
                    }
                    Op::SplitTo(n) => match chain.split_to(n) {
                        Ok(head) => {
                            prop_assert!(n <= model.len());
                            prop_assert_eq!(head.len(), n);
                            prop_assert_eq!(head.to_vec(), model.drain(..n).collect::<Vec<_>>());
                            parts.push(head);
                        }
                        Err(e) => {
                            prop_assert!(n > model.len());
                            prop_assert_eq!(e, BufError::TooShort { need: n, have: model.len() });
                        }
                    },
                    Op::CopyRange { offset, len } => {
                        let mut out = vec![0; len];
                        let r = chain.copy_range_to(offset, &mut out);
                        if offset + len <= model.len() {
                            prop_assert!(r.is_ok());
                            prop_assert_eq!(&out[..], &model[offset..offset + len]);
                        } else {
                            prop_assert!(r.is_err());
                        }
                    }
                }
                prop_assert_eq!(chain.len(), model.len());
                prop_assert_eq!(chain.slices().map(<[u8]>::len).sum::<usize>(), model.len());
                prop_assert_eq!(chain.to_vec(), model.clone());
            }
            drop(chain);
            drop(parts);
            prop_assert!(loan.is_complete());
            prop_assert_eq!(loan.try_reclaim().unwrap(), source);
        }
    }
}
