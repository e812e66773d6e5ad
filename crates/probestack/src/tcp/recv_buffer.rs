//! [`RecvBuffer`]: a TCP connection's receive buffer, holding copied bytes and data held
//! by reference: whole pages the NIC deposited (zero-copy receive, paper 004 §3.1) and
//! fragments a sender passed by reference (`Tuning::tcp_send_by_reference`).
//!
//! Copied bytes live in a [`ByteRing`], whose free space is the receive window and holds
//! out-of-order data until the hole before it fills (see `ring.rs`). The buffer also
//! keeps **shared** data: when a segment arrives in order and nothing is queued out of
//! order, TCP input may *stage* its data by reference ([`RecvBuffer::stage`]) instead of
//! copying it into the ring: a zero-copy receive connection the whole pages of a payload
//! its NIC split off and put on a page boundary
//! ([`crate::driver::NicConfig::header_split`]), copying only the rest, the "odd data",
//! into the ring; any connection the fragments a sending stack passed across an
//! in-memory device. If the connection accepts the segment,
//! [`commit`](RecvBuffer::commit) makes the staged data readable, then the odd bytes.
//!
//! The readable stream is then a sequence of runs, shared data and ring bytes, in
//! arrival order; `runs` records it only while shared data is held (empty `runs` means
//! every readable byte is in the ring, the ordinary case, which costs nothing extra).
//! Because data is staged only when nothing waits out of order, the ring's free space
//! holds no data when shared data joins the stream, and ring offsets stay relative to
//! `RCV.NXT`.
//!
//! Shared data counts against the window like copied bytes: the window is the ring's
//! free space less the shared bytes, so what the application has not read bounds what
//! the peer may send.
//!
//! Behind the readable stream the buffer may hold **unverified** segments
//! (`Tuning::tcp_verify_on_read`): in-order data kept by reference whose checksum TCP
//! input left to the application's read, which sums it as it copies it
//! ([`verify_front`](RecvBuffer::verify_front)). They are not yet received as far as
//! TCP is concerned (RCV.NXT stops before them, nothing acknowledges them), so they are
//! outside [`len`](RecvBuffer::len) and inside the window [`free`](RecvBuffer::free)
//! reports from RCV.NXT; the room after them is `free() - unverified()`.

use std::collections::VecDeque;

use super::ring::ByteRing;
use crate::buf::ExtBuf;
use crate::checksum::{self, Accumulator, Kernel};

/// A readable run of the stream.
#[derive(Debug)]
enum Run {
    /// Data by reference.
    Shared(ExtBuf),
    /// This many bytes at the front of the ring (after the runs before).
    Ring(usize),
}

/// What the front of the stream gave the application.
#[derive(Debug)]
pub struct Chunk {
    pub data: ExtBuf,
    /// Whether the bytes were copied (odd data, or a connection without shared data) rather
    /// than handed over by reference.
    pub copied: bool,
}

/// An in-order segment whose checksum is still to be verified: its data is the next
/// `frags` fragments of [`RecvBuffer::unverified_frags`].
#[derive(Debug)]
struct Unverified {
    frags: usize,
    len: usize,
    /// The pseudo-header's and the TCP header's sum: the data's completes it.
    header: Accumulator,
    /// The segment's TSval, for TS.Recent once it checks (RFC 7323 §4.3; updated from
    /// an unverified segment, a corrupted TSval would fail every later PAWS test).
    tsval: Option<u32>,
}

/// An unverified segment that checked: its length, how much of it the read copied (the
/// rest is now readable in the buffer), and its TSval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verified {
    pub len: usize,
    pub copied: usize,
    pub tsval: Option<u32>,
}

/// An unverified segment that did not check: it and every segment behind it were
/// dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Failed {
    /// The segments dropped behind the one that failed.
    pub behind: usize,
}

/// The receive buffer: copied bytes and shared data (see the module documentation).
pub struct RecvBuffer {
    ring: ByteRing,
    runs: VecDeque<Run>,
    shared: usize,
    staged: Vec<ExtBuf>,
    unverified: VecDeque<Unverified>,
    unverified_frags: VecDeque<ExtBuf>,
    unverified_len: usize,
}

impl RecvBuffer {
    pub fn new(capacity: usize) -> RecvBuffer {
        RecvBuffer {
            ring: ByteRing::new(capacity),
            runs: VecDeque::new(),
            shared: 0,
            staged: Vec::new(),
            unverified: VecDeque::new(),
            unverified_frags: VecDeque::new(),
            unverified_len: 0,
        }
    }

    pub fn capacity(&self) -> usize {
        self.ring.capacity()
    }

    /// Readable bytes (unverified segments not counted).
    pub fn len(&self) -> usize {
        self.ring.len() + self.shared
    }

    /// Whether there is nothing for a read: no readable bytes and no unverified segment.
    pub fn is_empty(&self) -> bool {
        self.len() == 0 && self.unverified_len == 0
    }

    /// Bytes of unverified segments.
    pub fn unverified(&self) -> usize {
        self.unverified_len
    }

    /// Keeps an in-order segment's fragments (`len` bytes in all) unverified, behind the
    /// readable stream and any unverified segment before it: `header` is the sum of its
    /// pseudo-header and TCP header. The caller has checked that nothing waits out of
    /// order and that the data fits `free() - unverified()`.
    pub fn defer(
        &mut self,
        frags: &mut Vec<ExtBuf>,
        len: usize,
        header: Accumulator,
        tsval: Option<u32>,
    ) {
        self.unverified.push_back(Unverified {
            frags: frags.len(),
            len,
            header,
            tsval,
        });
        self.unverified_frags.extend(frags.drain(..));
        self.unverified_len += len;
    }

    /// Verifies the front unverified segment, copying its first bytes into `dst` (as many
    /// as fit) and summing them on the way, the rest summed where it lies (paper 002
    /// §7.1's receive path). If it checks, the bytes not copied join the readable stream;
    /// if not, `dst` may have been written, and the segment and every one behind it are
    /// dropped (they follow a hole now). `None` when there is no unverified segment.
    pub fn verify_front(
        &mut self,
        dst: &mut [u8],
        kernel: Kernel,
    ) -> Option<Result<Verified, Failed>> {
        let seg = self.unverified.pop_front()?;
        self.unverified_len -= seg.len;
        let mut acc = seg.header;
        let mut copied = 0;
        for f in self.unverified_frags.range(..seg.frags) {
            let k = f.len().min(dst.len() - copied);
            acc.copy_and_add_with(kernel, &mut dst[copied..copied + k], &f[..k]);
            acc.add_with(kernel, &f[k..]);
            copied += k;
        }
        if !checksum::verifies(acc.sum()) {
            let behind = self.unverified.len();
            self.unverified.clear();
            self.unverified_frags.clear();
            self.unverified_len = 0;
            return Some(Err(Failed { behind }));
        }
        let mut skip = copied;
        for _ in 0..seg.frags {
            let Some(mut f) = self.unverified_frags.pop_front() else {
                break;
            };
            let k = skip.min(f.len());
            skip -= k;
            if k < f.len() && f.trim_front(k).is_ok() {
                self.push_shared(f);
            }
        }
        Some(Ok(Verified {
            len: seg.len,
            copied,
            tsval: seg.tsval,
        }))
    }

    /// The receive window: room left, counting shared data held.
    pub fn free(&self) -> usize {
        self.ring.free().saturating_sub(self.shared)
    }

    /// Readable bytes held by reference.
    pub fn shared(&self) -> usize {
        self.shared
    }

    /// See [`ByteRing::unreadable_slices_mut`].
    pub fn unreadable_slices_mut(&mut self, offset: usize, len: usize) -> (&mut [u8], &mut [u8]) {
        self.ring.unreadable_slices_mut(offset, len)
    }

    /// See [`ByteRing::write_unreadable`].
    pub fn write_unreadable(&mut self, offset: usize, data: &[u8]) -> usize {
        self.ring.write_unreadable(offset, data)
    }

    /// Stages data of an in-order segment held by reference (whole pages the NIC split
    /// off, or fragments the sender passed), in stream order, to be made readable ahead
    /// of any odd bytes written at offset 0 of the ring by the next
    /// [`commit`](Self::commit). The caller has checked that nothing waits out of order
    /// and that the staged data and the odd bytes fit the window.
    pub fn stage(&mut self, data: ExtBuf) {
        self.staged.push(data);
    }

    /// Forgets staged data the connection did not take (the segment was not accepted).
    pub fn unstage(&mut self) {
        self.staged.clear();
    }

    /// Makes `n` bytes readable: the staged data first (if any), then bytes from the
    /// ring's free space. Returns how many became readable.
    #[inline]
    pub fn commit(&mut self, n: usize) -> usize {
        let done = if self.staged.is_empty() {
            0
        } else {
            self.commit_staged(n)
        };
        let c = self.ring.commit(n - done);
        if c > 0 && !self.runs.is_empty() {
            match self.runs.back_mut() {
                Some(Run::Ring(r)) => *r += c,
                _ => self.runs.push_back(Run::Ring(c)),
            }
        }
        done + c
    }

    /// The staged data's part of [`commit`](Self::commit): up to `n` bytes of it made
    /// readable, the rest dropped; returns how many.
    #[inline(never)]
    fn commit_staged(&mut self, n: usize) -> usize {
        let mut done = 0;
        // Taken out for the loop and put back, keeping its capacity.
        let mut staged = std::mem::take(&mut self.staged);
        for mut p in staged.drain(..) {
            let k = p.len().min(n - done);
            if k == 0 {
                break;
            }
            if p.trim_back(p.len() - k).is_ok() {
                self.push_shared(p);
                done += k;
            }
        }
        self.staged = staged;
        done
    }

    /// Makes `p` readable at the end of the stream.
    fn push_shared(&mut self, p: ExtBuf) {
        if self.runs.is_empty() && !self.ring.is_empty() {
            self.runs.push_back(Run::Ring(self.ring.len()));
        }
        self.shared += p.len();
        self.runs.push_back(Run::Shared(p));
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
                Run::Shared(p) => {
                    let k = want.min(p.len());
                    dst[n..n + k].copy_from_slice(&p[..k]);
                    let _ = p.trim_front(k);
                    self.shared -= k;
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

    /// The front of the stream, at most `max` bytes, for a zero-copy read: shared data
    /// by reference, or (for ring bytes) a copy. `None` when nothing is readable.
    pub fn take_chunk(&mut self, max: usize) -> Option<Chunk> {
        if self.is_empty() || max == 0 {
            return None;
        }
        if let Some(Run::Shared(p)) = self.runs.front_mut() {
            let k = max.min(p.len());
            // A run taken whole moves out: splitting it would count a reference up for
            // the front and down again for the empty rest (two atomic operations, about 4%
            // of a zero-copy transfer's time at MTU 1500 in `perf annotate`).
            let data = if k < p.len() {
                p.split_to(k).ok()?
            } else if let Some(Run::Shared(whole)) = self.runs.pop_front() {
                whole
            } else {
                return None;
            };
            self.shared -= k;
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

    /// Whether the front of the stream is shared data (a zero-copy read takes it by
    /// reference) rather than ring bytes (it copies them).
    pub fn front_is_shared(&self) -> bool {
        matches!(self.runs.front(), Some(Run::Shared(_)))
    }
}

impl std::fmt::Debug for RecvBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvBuffer")
            .field("copied", &self.ring.len())
            .field("shared", &self.shared)
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
        b.stage(ExtBuf::copy_page_aligned(pages));
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
        assert_eq!((b.len(), b.shared()), (4 + 8196 + 4096 + 4, 8192 + 4096));
        assert_eq!(
            b.free(),
            64 * 1024 - b.len(),
            "pages count against the window"
        );

        let c = b.take_chunk(100).unwrap();
        assert!(c.copied);
        assert_eq!(&*c.data, b"lead");
        // A run taken in part, then the rest of it whole.
        let c = b.take_chunk(4096).unwrap();
        assert!(!c.copied && c.data.is_page_aligned());
        assert_eq!(&*c.data, &p1[..4096]);
        assert_eq!(b.shared(), 4096 + 4096);
        let c = b.take_chunk(usize::MAX).unwrap();
        assert!(!c.copied && c.data.is_page_aligned());
        assert_eq!(&*c.data, &p1[4096..]);
        assert_eq!(b.shared(), 4096);
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
        b.stage(ExtBuf::copy_page_aligned(&[7; 4096]));
        b.unstage();
        assert!(b.is_empty());
        b.write_unreadable(0, b"abc");
        assert_eq!(b.commit(3), 3, "the next commit takes ring bytes only");
        assert_eq!(b.shared(), 0);
        let mut out = [0u8; 3];
        assert_eq!(b.pop_into(&mut out), 3);
        assert_eq!(&out, b"abc");
    }

    #[test]
    fn a_partial_commit_takes_the_front_of_the_pages() {
        let mut b = RecvBuffer::new(16 * 1024);
        b.stage(ExtBuf::copy_page_aligned(&[9; 8192]));
        assert_eq!(b.commit(5000), 5000);
        assert_eq!((b.len(), b.shared()), (5000, 5000));
    }

    #[test]
    fn fragments_staged_together_become_readable_in_order_up_to_the_commit() {
        let mut b = RecvBuffer::new(16 * 1024);
        let block = ExtBuf::new((0..100u8).collect::<Vec<_>>());
        b.stage(block.slice(..30).unwrap());
        b.stage(block.slice(30..70).unwrap());
        b.stage(block.slice(70..).unwrap());
        assert_eq!(b.commit(50), 50, "the front 50 of the 100 staged");
        assert_eq!((b.len(), b.shared(), b.free()), (50, 50, 16 * 1024 - 50));
        b.write_unreadable(0, b"xy");
        assert_eq!(
            b.commit(2),
            2,
            "the rest was dropped with the commit; ring bytes next"
        );
        let mut out = [0u8; 60];
        assert_eq!(b.pop_into(&mut out), 52);
        assert_eq!(&out[..50], &(0..50u8).collect::<Vec<_>>()[..]);
        assert_eq!(&out[50..52], b"xy");
        assert!(b.is_empty());
    }

    /// A segment of `data` in fragments cut at `cuts`, deferred with the sum that makes
    /// it check (or not, with `good` false).
    fn defer(b: &mut RecvBuffer, data: &[u8], cuts: &[usize], good: bool) {
        let block = ExtBuf::new(data.to_vec());
        let mut at = 0;
        let mut frags = Vec::new();
        for &c in cuts.iter().chain([&data.len()]) {
            frags.push(block.slice(at..c).unwrap());
            at = c;
        }
        // The "header" sum that completes the data's to all ones.
        let field = checksum::finish(checksum::sum(data)) ^ u16::from(!good);
        let header = Accumulator::with_seed(field);
        b.defer(&mut frags, data.len(), header, Some(7));
    }

    #[test]
    fn unverified_segments_are_read_summed_and_the_rest_kept_readable() {
        let data: Vec<u8> = (0..1001u32).map(|i| (i * 7) as u8).collect();
        for (cuts, read) in [(&[][..], 1001), (&[1, 2, 500][..], 333), (&[3, 999][..], 0)] {
            let mut b = RecvBuffer::new(4096);
            b.write_unreadable(0, b"ab");
            assert_eq!(b.commit(2), 2);
            defer(&mut b, &data, cuts, true);
            assert_eq!((b.len(), b.unverified(), b.free()), (2, 1001, 4094));
            assert!(!b.is_empty());
            let mut out = vec![0u8; 2 + read];
            assert_eq!(b.pop_into(&mut out), 2, "readable bytes first");
            let v = b.verify_front(&mut out[2..], Kernel::best()).unwrap();
            assert_eq!(
                v,
                Ok(Verified {
                    len: 1001,
                    copied: read,
                    tsval: Some(7)
                })
            );
            assert_eq!(&out[2..], &data[..read], "cuts {cuts:?}");
            assert_eq!((b.len(), b.unverified()), (1001 - read, 0));
            let mut rest = vec![0u8; 2000];
            assert_eq!(b.pop_into(&mut rest), 1001 - read);
            assert_eq!(&rest[..1001 - read], &data[read..]);
            assert!(b.verify_front(&mut rest, Kernel::best()).is_none());
        }
    }

    #[test]
    fn a_failing_segment_drops_those_behind_it() {
        let data = [5u8; 301];
        let mut b = RecvBuffer::new(4096);
        defer(&mut b, &data, &[100], true);
        defer(&mut b, &data, &[7], false);
        defer(&mut b, &data, &[], true);
        defer(&mut b, &data, &[], true);
        let mut out = [0u8; 1000];
        assert!(matches!(
            b.verify_front(&mut out, Kernel::best()),
            Some(Ok(_))
        ));
        assert_eq!(
            b.verify_front(&mut out, Kernel::best()),
            Some(Err(Failed { behind: 2 }))
        );
        assert!(b.is_empty() && b.unverified() == 0);
        assert!(b.verify_front(&mut out, Kernel::best()).is_none());
        assert_eq!(b.free(), 4096);
    }

    /// What a read or the delayed-ACK timer does to the buffer, or what input hands it.
    #[derive(Clone, Debug)]
    enum Op {
        /// An in-order segment kept unverified: its data, where its fragments are cut
        /// (fractions of its length, in 1/16ths), and whether its checksum is right.
        Defer(Vec<u8>, Vec<usize>, bool),
        /// Bytes that became readable at once (the ring), taken only when nothing waits
        /// unverified, as the connection verifies unread segments before any other input.
        Commit(usize),
        /// A read into a buffer of this size: readable bytes first, else the front
        /// unverified segment verified as it is copied.
        Read(usize),
        /// The delayed-ACK timer: every unverified segment verified where it lies.
        Timer,
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        prop_oneof![
            4 => (
                proptest::collection::vec(any::<u8>(), 1..2500),
                proptest::collection::vec(0usize..=16, 0..4),
                proptest::bool::weighted(0.85),
            )
                .prop_map(|(d, c, g)| Op::Defer(d, c, g)),
            1 => (1usize..3000).prop_map(Op::Commit),
            4 => (0usize..4000).prop_map(Op::Read),
            1 => Just(Op::Timer),
        ]
    }

    proptest::proptest! {
        /// Against a model of the stream: whatever the fragments, reads and timers, the
        /// bytes read are the committed and verified bytes in order; a failing segment
        /// and those behind it are dropped and never read; the buffer's counts agree.
        #[test]
        fn reads_through_unverified_segments_match_a_model_of_the_stream(
            ops in proptest::collection::vec(op(), 1..40),
            kernel in proptest::sample::select(Kernel::available().collect::<Vec<_>>()),
        ) {
            let mut b = RecvBuffer::new(8192);
            let mut readable: VecDeque<u8> = VecDeque::new();
            let mut pending: VecDeque<(Vec<u8>, bool)> = VecDeque::new();
            let verified = |r: Result<Verified, Failed>,
                                dst: &[u8],
                                readable: &mut VecDeque<u8>,
                                pending: &mut VecDeque<(Vec<u8>, bool)>| {
                let (data, good) = pending.pop_front().expect("a segment was pending");
                match r {
                    Ok(v) => {
                        assert!(good, "a corrupted segment checked");
                        assert_eq!((v.len, v.copied), (data.len(), dst.len().min(data.len())));
                        assert_eq!(&dst[..v.copied], &data[..v.copied]);
                        readable.extend(&data[v.copied..]);
                    }
                    Err(Failed { behind }) => {
                        assert!(!good, "a good segment failed");
                        assert_eq!(behind, pending.len());
                        pending.clear();
                    }
                }
            };
            for op in ops {
                match op {
                    Op::Defer(data, cuts, good) => {
                        if data.len() > b.free().saturating_sub(b.unverified()) {
                            continue;
                        }
                        let mut at: Vec<usize> = cuts.iter().map(|c| data.len() * c / 16).collect();
                        at.sort_unstable();
                        let block = ExtBuf::new(data.clone());
                        let mut frags = Vec::new();
                        let mut from = 0;
                        for c in at.into_iter().chain([data.len()]) {
                            frags.push(block.slice(from..c).unwrap());
                            from = c;
                        }
                        let field = checksum::finish(checksum::sum(&data)) ^ u16::from(!good);
                        b.defer(&mut frags, data.len(), Accumulator::with_seed(field), None);
                        assert!(frags.is_empty(), "the fragments moved in");
                        pending.push_back((data, good));
                    }
                    Op::Commit(n) => {
                        if b.unverified() > 0 {
                            continue;
                        }
                        // As TCP input, no more than the window.
                        let n = n.min(b.free());
                        let data: Vec<u8> = (0..n).map(|i| (i * 13 + readable.len()) as u8).collect();
                        let k = b.write_unreadable(0, &data);
                        assert_eq!(b.commit(k), k);
                        readable.extend(&data[..k]);
                    }
                    Op::Read(n) => {
                        let mut dst = vec![0u8; n];
                        // `is_empty` counts unverified segments; the readable bytes first.
                        let ready = b.len();
                        if ready > 0 {
                            let k = b.pop_into(&mut dst);
                            assert_eq!(k, n.min(readable.len()));
                            let want: Vec<u8> = readable.drain(..k).collect();
                            assert_eq!(&dst[..k], &want[..]);
                        } else if let Some(r) = b.verify_front(&mut dst, kernel) {
                            verified(r, &dst, &mut readable, &mut pending);
                        } else {
                            assert!(pending.is_empty() && readable.is_empty());
                        }
                    }
                    Op::Timer => {
                        while let Some(r) = b.verify_front(&mut [], kernel) {
                            verified(r, &[], &mut readable, &mut pending);
                        }
                        assert!(pending.is_empty());
                    }
                }
                let unverified: usize = pending.iter().map(|(d, _)| d.len()).sum();
                assert_eq!((b.len(), b.unverified()), (readable.len(), unverified));
                assert_eq!(b.is_empty(), readable.is_empty() && pending.is_empty());
                assert_eq!(b.free() + b.len(), b.capacity());
            }
        }
    }
}
