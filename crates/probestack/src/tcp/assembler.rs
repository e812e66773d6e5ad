//! [`Assembler`]: the bookkeeping of TCP's out-of-order queue.
//!
//! RFC 9293 §3.10.7.4 ("seventh, process the segment text") has a receiver hold segments
//! that arrive within the window but begin beyond `RCV.NXT`, for processing once the
//! bytes before them arrive. Here the held text itself sits in the receive
//! [`ByteRing`], in the free space past its readable end, written at offset
//! `SEG.SEQ - RCV.NXT` ([`ByteRing::write_unreadable`]); the assembler records only
//! *which* byte ranges past `RCV.NXT` have arrived. Offsets are relative to the in-order
//! point: offset 0 is `RCV.NXT`.
//!
//! The receive path, per segment whose text starts at `offset` and runs `len` bytes:
//!
//! 1. write the text into the ring at `offset` past the readable end;
//! 2. [`add`](Assembler::add)`(offset, len)`; on [`TooManyRanges`], drop the segment
//!    (bytes written to the ring but never recorded are simply free space again);
//! 3. [`take_front`](Assembler::take_front) gives how far `RCV.NXT` moves (non-zero once
//!    the text at offset 0 is present); commit that many bytes in the ring
//!    ([`ByteRing::commit`]). The remaining ranges are rebased so that offset 0 is the
//!    new `RCV.NXT`.
//!
//! [`sack_ranges`](Assembler::sack_ranges) then gives the SACK blocks for the ACK
//! (RFC 2018 §4, see below).
//!
//! # Bounded work and memory
//!
//! The ranges are kept sorted, non-overlapping and non-adjacent in one `Vec`, allocated
//! once by [`Assembler::new`] (up to a preallocation limit; a larger bound grows the `Vec`
//! as needed), so `add` in steady state does a binary search and shifts a few entries,
//! and never allocates. A sender with gaps between one-byte segments could otherwise make
//! one range per two bytes of window, so the number of separate ranges is bounded by
//! `max_ranges`: a segment that would need one more is refused and changes nothing. (A
//! segment that fills or bridges gaps never needs more ranges, so it is always accepted;
//! so is one at offset 0, in order, which `take_front` takes at once: found refused by
//! tests/tcp_conversations.rs, with the queue full and the sender resending it for good.)
//!
//! # SACK block order (RFC 2018 §4)
//!
//! RFC 2018 §4 asks that the first SACK block hold the segment that triggered the ACK
//! (unless it advanced the cumulative ACK), and that the other blocks repeat the most
//! recently reported blocks first. Every successful `add` gives the range holding the
//! added bytes a fresh stamp from a counter (a range formed by merging takes the new,
//! newest, stamp), and [`sack_ranges`](Assembler::sack_ranges) reports the ranges by
//! stamp, newest first: the range holding the latest segment, then the others in order of
//! how recently they were last added to. A range at offset 0 is in order, not out of
//! order, and is never reported.
//!
//! # Never panics
//!
//! Every input is accepted: `max_ranges` 0 is taken as 1, a range reaching past
//! `usize::MAX` is clamped there, and an `add` left with no bytes (zero length, or clamped
//! to nothing) is a no-op.
//!
//! [`ByteRing`]: super::ring::ByteRing
//! [`ByteRing::write_unreadable`]: super::ring::ByteRing::write_unreadable
//! [`ByteRing::commit`]: super::ring::ByteRing::commit

/// The most SACK blocks a TCP header can carry (RFC 2018 §3: 40 bytes of options hold at
/// most 4 blocks; with the timestamp option, at most 3).
pub const MAX_SACK_BLOCKS: usize = 4;

/// The most ranges [`Assembler::new`] allocates room for up front; a larger bound grows
/// the storage only when that many ranges are really held.
const PREALLOCATED_RANGES_LIMIT: usize = 256;

/// Recording a range would need more separate ranges than allowed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooManyRanges;

/// One range of received bytes past the in-order point, and when it was last added to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ReceivedRange {
    /// First byte's offset from the in-order point.
    start: usize,
    /// Offset one past the last byte (`> start`).
    end: usize,
    /// The [`Assembler::next_stamp`] value of the last `add` that touched this range.
    stamp: u64,
}

/// Which byte ranges past the in-order point (`RCV.NXT`) have arrived, with the recency
/// needed to order SACK blocks (see the [module documentation](self)).
#[derive(Clone, Debug)]
pub struct Assembler {
    /// Sorted by offset; non-overlapping and non-adjacent (`end < next.start`).
    ranges: Vec<ReceivedRange>,
    /// The most separate ranges held (at least 1).
    max_ranges: usize,
    /// The stamp the next successful `add` gives its range. Wraps after 2^64 adds, which
    /// would only blur SACK order, never break the bookkeeping.
    next_stamp: u64,
}

impl Assembler {
    /// An empty assembler that holds at most `max_ranges` separate ranges (0 is taken as
    /// 1).
    pub fn new(max_ranges: usize) -> Assembler {
        let max_ranges = max_ranges.max(1);
        Assembler {
            ranges: Vec::with_capacity(max_ranges.min(PREALLOCATED_RANGES_LIMIT)),
            max_ranges,
            next_stamp: 0,
        }
    }

    /// The most separate ranges this assembler holds.
    pub fn max_ranges(&self) -> usize {
        self.max_ranges
    }

    /// Records that `[offset, offset + len)` has arrived (`offset` relative to the
    /// in-order point; the end is clamped at `usize::MAX`). Overlapping and adjacent
    /// ranges merge into one, which becomes the most recently added range. If the result
    /// would need more than `max_ranges` separate ranges, nothing is recorded and
    /// `Err(TooManyRanges)` is returned, unless the range starts at offset 0: that is the
    /// in-order data, which [`take_front`](Self::take_front) takes at once, so it is always
    /// recorded (refusing it would stall the stream at `RCV.NXT` for good, with the sender
    /// retransmitting the very segment that moves it). `len` 0 is a no-op returning `Ok`,
    /// and so is a range that the clamping leaves empty (one at offset `usize::MAX`).
    pub fn add(&mut self, offset: usize, len: usize) -> Result<(), TooManyRanges> {
        let end = offset.saturating_add(len);
        if end == offset {
            return Ok(());
        }
        // Ranges [first, past) overlap or touch the new one: the first whose end reaches
        // `offset`, up to the last whose start is at most `end`. (A range ending before
        // `offset` starts before `end`, so first <= past.)
        let first = self.ranges.partition_point(|r| r.end < offset);
        let past = self.ranges.partition_point(|r| r.start <= end);
        let stamp = self.next_stamp;
        if first == past {
            if self.ranges.len() >= self.max_ranges && offset > 0 {
                return Err(TooManyRanges);
            }
            self.ranges.insert(
                first,
                ReceivedRange {
                    start: offset,
                    end,
                    stamp,
                },
            );
        } else {
            let merged = ReceivedRange {
                start: offset.min(self.ranges[first].start),
                end: end.max(self.ranges[past - 1].end),
                stamp,
            };
            self.ranges[first] = merged;
            self.ranges.drain(first + 1..past);
        }
        self.next_stamp = self.next_stamp.wrapping_add(1);
        Ok(())
    }

    /// If a range starts at offset 0, removes it and returns its length, rebasing every
    /// remaining range by that length (the in-order point moved past it: `RCV.NXT`
    /// advances by the returned amount). Otherwise returns 0.
    pub fn take_front(&mut self) -> usize {
        let advanced = match self.ranges.first() {
            Some(front) if front.start == 0 => front.end,
            _ => return 0,
        };
        self.ranges.remove(0);
        for range in &mut self.ranges {
            // Ranges are non-adjacent, so every remaining one starts past `advanced`.
            range.start -= advanced;
            range.end -= advanced;
        }
        advanced
    }

    /// The number of separate ranges held (out-of-order islands, plus a range at offset 0
    /// until [`take_front`](Assembler::take_front) takes it).
    pub fn range_count(&self) -> usize {
        self.ranges.len()
    }

    /// Whether no range is held.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Whether every byte of `[offset, offset + len)` is already held (a duplicate, which
    /// RFC 2883 reports in a D-SACK block). `false` for no bytes.
    pub fn holds(&self, offset: usize, len: usize) -> bool {
        let end = offset.saturating_add(len);
        len > 0
            && self
                .ranges
                .iter()
                .any(|r| r.start <= offset && end <= r.end)
    }

    /// Bytes held in all ranges.
    pub fn bytes(&self) -> usize {
        self.ranges.iter().map(|r| r.end - r.start).sum()
    }

    /// Forgets every range (keeping the storage).
    pub fn clear(&mut self) {
        self.ranges.clear();
    }

    /// Up to [`MAX_SACK_BLOCKS`] ranges `(start, end)` for SACK blocks, in the order
    /// RFC 2018 §4 asks: first the range holding the most recently added bytes, then the
    /// others in order of how recently they were last added to, most recent first.
    /// Ranges starting at offset 0 are never reported (they are not out of order). The
    /// blocks come first in the array, `None` after them; a header with room for fewer
    /// blocks takes the first ones. Allocates nothing.
    pub fn sack_ranges(&self) -> [Option<(usize, usize)>; MAX_SACK_BLOCKS] {
        let mut blocks = [None; MAX_SACK_BLOCKS];
        // Stamps are unique among held ranges, so each pass picks the newest range older
        // than the one picked before it.
        let mut older_than: Option<u64> = None;
        for block in &mut blocks {
            let next = self
                .ranges
                .iter()
                .filter(|r| r.start > 0 && older_than.is_none_or(|stamp| r.stamp < stamp))
                .max_by_key(|r| r.stamp);
            let Some(range) = next else { break };
            *block = Some((range.start, range.end));
            older_than = Some(range.stamp);
        }
        blocks
    }

    /// The ranges `(start, end)` in offset order.
    pub fn ranges(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.ranges.iter().map(|r| (r.start, r.end))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ranges_of(assembler: &Assembler) -> Vec<(usize, usize)> {
        assembler.ranges().collect()
    }

    #[test]
    fn holds_only_ranges_wholly_inside_one_held_range() {
        let mut a = Assembler::new(8);
        a.add(100, 50).unwrap();
        a.add(200, 10).unwrap();
        assert!(a.holds(100, 50) && a.holds(120, 5) && a.holds(200, 10));
        assert!(!a.holds(90, 20), "starts before");
        assert!(!a.holds(140, 20), "runs past");
        assert!(!a.holds(140, 70), "spans a gap");
        assert!(!a.holds(120, 0), "no bytes");
        assert!(!a.holds(usize::MAX - 1, 5));
    }

    fn sack_of(assembler: &Assembler) -> Vec<(usize, usize)> {
        assembler.sack_ranges().into_iter().flatten().collect()
    }

    fn with_ranges(max_ranges: usize, ranges: &[(usize, usize)]) -> Assembler {
        let mut assembler = Assembler::new(max_ranges);
        for &(start, end) in ranges {
            assert_eq!(assembler.add(start, end - start), Ok(()));
        }
        assembler
    }

    #[test]
    fn empty_and_zero_length() {
        let mut assembler = Assembler::new(4);
        assert!(assembler.is_empty());
        assert_eq!(assembler.add(10, 0), Ok(()));
        assert!(assembler.is_empty());
        assert_eq!((assembler.range_count(), assembler.bytes()), (0, 0));
        assert_eq!(assembler.take_front(), 0);
        assert_eq!(assembler.sack_ranges(), [None; MAX_SACK_BLOCKS]);
        assert_eq!(Assembler::new(0).max_ranges(), 1);
    }

    #[test]
    fn overlaps_merge() {
        let mut assembler = with_ranges(8, &[(10, 20)]);
        assembler.add(15, 10).unwrap();
        assert_eq!(ranges_of(&assembler), [(10, 25)]);
        assembler.add(5, 7).unwrap();
        assert_eq!(ranges_of(&assembler), [(5, 25)]);
        assert_eq!(assembler.bytes(), 20);
    }

    #[test]
    fn adjacent_ranges_merge_on_either_side() {
        let mut assembler = with_ranges(8, &[(10, 20)]);
        assembler.add(20, 5).unwrap();
        assert_eq!(ranges_of(&assembler), [(10, 25)]);
        assembler.add(4, 6).unwrap();
        assert_eq!(ranges_of(&assembler), [(4, 25)]);
        // One byte apart is not adjacent.
        assembler.add(26, 4).unwrap();
        assert_eq!(ranges_of(&assembler), [(4, 25), (26, 30)]);
    }

    #[test]
    fn containment_either_way() {
        let mut assembler = with_ranges(8, &[(10, 20)]);
        assembler.add(12, 3).unwrap();
        assert_eq!(ranges_of(&assembler), [(10, 20)]);
        assembler.add(10, 10).unwrap();
        assert_eq!(ranges_of(&assembler), [(10, 20)]);
        assembler.add(5, 30).unwrap();
        assert_eq!(ranges_of(&assembler), [(5, 35)]);
    }

    #[test]
    fn one_range_bridges_several() {
        let mut assembler = with_ranges(8, &[(50, 60), (10, 20), (30, 40), (70, 80)]);
        assert_eq!(
            ranges_of(&assembler),
            [(10, 20), (30, 40), (50, 60), (70, 80)]
        );
        assembler.add(15, 40).unwrap();
        assert_eq!(ranges_of(&assembler), [(10, 60), (70, 80)]);
        assembler.add(60, 10).unwrap();
        assert_eq!(ranges_of(&assembler), [(10, 80)]);
        assert_eq!((assembler.range_count(), assembler.bytes()), (1, 70));
    }

    #[test]
    fn take_front_removes_the_in_order_range_and_rebases() {
        let mut assembler = with_ranges(8, &[(10, 20), (30, 35)]);
        assert_eq!(assembler.take_front(), 0);
        assembler.add(0, 4).unwrap();
        assert_eq!(assembler.take_front(), 4);
        assert_eq!(ranges_of(&assembler), [(6, 16), (26, 31)]);
        // The gap fills: the in-order point moves past the island it reaches.
        assembler.add(0, 6).unwrap();
        assert_eq!(ranges_of(&assembler), [(0, 16), (26, 31)]);
        assert_eq!(assembler.take_front(), 16);
        assert_eq!(ranges_of(&assembler), [(10, 15)]);
        assert_eq!(assembler.take_front(), 0);
        assembler.clear();
        assert!(assembler.is_empty());
    }

    #[test]
    fn too_many_ranges_changes_nothing() {
        let mut assembler = with_ranges(2, &[(10, 15), (20, 25)]);
        let before = sack_of(&assembler);
        assert_eq!(assembler.add(30, 5), Err(TooManyRanges));
        assert_eq!(assembler.add(17, 1), Err(TooManyRanges));
        assert_eq!(ranges_of(&assembler), [(10, 15), (20, 25)]);
        assert_eq!(sack_of(&assembler), before);
        // In-order data is never refused; it is taken at once.
        assembler.add(0, 5).unwrap();
        assert_eq!(ranges_of(&assembler), [(0, 5), (10, 15), (20, 25)]);
        assert_eq!(assembler.take_front(), 5);
        assert_eq!(ranges_of(&assembler), [(5, 10), (15, 20)]);
        let rebased: Vec<_> = before.iter().map(|&(l, r)| (l - 5, r - 5)).collect();
        assert_eq!(sack_of(&assembler), rebased);
        let mut assembler = with_ranges(2, &[(10, 15), (20, 25)]);
        // At the bound, filling, touching or bridging still works.
        assembler.add(25, 5).unwrap();
        assembler.add(0, 10).unwrap();
        assert_eq!(ranges_of(&assembler), [(0, 15), (20, 30)]);
        assembler.add(15, 5).unwrap();
        assert_eq!(ranges_of(&assembler), [(0, 30)]);
        // A bound of 0 is taken as 1.
        let mut single = Assembler::new(0);
        single.add(5, 5).unwrap();
        assert_eq!(single.add(20, 5), Err(TooManyRanges));
    }

    #[test]
    fn sack_order_is_most_recent_first() {
        let mut assembler = with_ranges(8, &[(10, 15), (20, 25), (30, 35)]);
        assert_eq!(sack_of(&assembler), [(30, 35), (20, 25), (10, 15)]);
        // A duplicate inside a range makes it the most recent.
        assembler.add(22, 1).unwrap();
        assert_eq!(sack_of(&assembler), [(20, 25), (30, 35), (10, 15)]);
        // A merge takes the newest stamp.
        assembler.add(15, 2).unwrap();
        assert_eq!(sack_of(&assembler), [(10, 17), (20, 25), (30, 35)]);
        assembler.add(40, 5).unwrap();
        assembler.add(17, 3).unwrap();
        assert_eq!(sack_of(&assembler), [(10, 25), (40, 45), (30, 35)]);
        // A range at offset 0 is in order: never reported, even when it is the newest.
        assembler.add(0, 10).unwrap();
        assert_eq!(sack_of(&assembler), [(40, 45), (30, 35)]);
        assert_eq!(assembler.take_front(), 25);
        assert_eq!(sack_of(&assembler), [(15, 20), (5, 10)]);
    }

    #[test]
    fn sack_reports_at_most_four_newest() {
        let assembler = with_ranges(
            8,
            &[(10, 11), (60, 61), (20, 21), (50, 51), (30, 31), (40, 41)],
        );
        assert_eq!(
            assembler.sack_ranges(),
            [
                Some((40, 41)),
                Some((30, 31)),
                Some((50, 51)),
                Some((20, 21))
            ]
        );
    }

    #[test]
    fn a_range_clamped_to_nothing_is_not_recorded() {
        // Found by the tcp_assembler fuzz target: at offset usize::MAX the clamped range
        // was empty, and was kept as a range with start == end.
        let mut assembler = Assembler::new(4);
        assembler.add(usize::MAX, 2562).unwrap();
        assert!(assembler.is_empty());
        assert_eq!(assembler.bytes(), 0);
        assert_eq!(assembler.sack_ranges(), [None; MAX_SACK_BLOCKS]);
    }

    #[test]
    fn extreme_offsets_clamp() {
        let mut assembler = Assembler::new(4);
        assembler.add(usize::MAX - 1, 10).unwrap();
        assembler.add(usize::MAX, 1).unwrap();
        assert_eq!(ranges_of(&assembler), [(usize::MAX - 1, usize::MAX)]);
        assembler.add(0, usize::MAX).unwrap();
        assert_eq!(ranges_of(&assembler), [(0, usize::MAX)]);
        assert_eq!(assembler.take_front(), usize::MAX);
        assert!(assembler.is_empty());
        // A huge bound does not allocate for it up front.
        let huge = Assembler::new(usize::MAX);
        assert_eq!(huge.max_ranges(), usize::MAX);
    }

    /// Offsets the model tracks.
    const SPAN: usize = 4096;

    #[derive(Clone, Debug)]
    enum Op {
        Add(usize, usize),
        TakeFront,
        Clear,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            12 => (0usize..3000, 0usize..600).prop_map(|(o, l)| Op::Add(o, l)),
            2 => (0usize..200).prop_map(|l| Op::Add(0, l)),
            3 => Just(Op::TakeFront),
            1 => Just(Op::Clear),
        ]
    }

    /// The runs of `true` in the bitmap, as (start, end).
    fn runs(received: &[bool]) -> Vec<(usize, usize)> {
        let mut runs = Vec::new();
        let mut start = None;
        for (i, &got) in received.iter().chain([&false]).enumerate() {
            match (got, start) {
                (true, None) => start = Some(i),
                (false, Some(s)) => {
                    runs.push((s, i));
                    start = None;
                }
                _ => {}
            }
        }
        runs
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Against a bitmap of received offsets, plus the list of accepted adds with their
        /// order: a run's recency is that of the newest add lying inside it.
        #[test]
        fn random_adds_match_a_bitmap_model(
            max_ranges in 0usize..10,
            ops in proptest::collection::vec(op(), 0..150),
        ) {
            let mut assembler = Assembler::new(max_ranges);
            let mut received = vec![false; SPAN];
            let mut accepted: Vec<(usize, usize, usize)> = Vec::new();
            let mut counter = 0;
            for op in ops {
                match op {
                    Op::Add(offset, len) => {
                        let mut candidate = received.clone();
                        candidate[offset..offset + len].fill(true);
                        // Within the bound, or no more ranges than before (filling,
                        // touching, bridging), or in order.
                        let count = runs(&candidate).len();
                        let fits = count <= max_ranges.max(1)
                            || count <= runs(&received).len()
                            || offset == 0;
                        let result = assembler.add(offset, len);
                        prop_assert_eq!(result.is_ok(), fits || len == 0);
                        if result.is_ok() && len > 0 {
                            received = candidate;
                            accepted.push((offset, offset + len, counter));
                            counter += 1;
                        }
                    }
                    Op::TakeFront => {
                        let leading = received.iter().take_while(|&&got| got).count();
                        prop_assert_eq!(assembler.take_front(), leading);
                        received.drain(..leading);
                        received.resize(SPAN, false);
                        accepted.retain(|&(start, _, _)| start >= leading);
                        for add in &mut accepted {
                            add.0 -= leading;
                            add.1 -= leading;
                        }
                    }
                    Op::Clear => {
                        assembler.clear();
                        received.fill(false);
                        accepted.clear();
                    }
                }
                let expected = runs(&received);
                prop_assert_eq!(ranges_of(&assembler), expected.clone());
                prop_assert_eq!(assembler.range_count(), expected.len());
                // One more while in-order data waits for `take_front`.
                let in_order = usize::from(expected.first().is_some_and(|r| r.0 == 0));
                prop_assert!(assembler.range_count() <= max_ranges.max(1) + in_order);
                prop_assert_eq!(assembler.is_empty(), expected.is_empty());
                prop_assert_eq!(assembler.bytes(), received.iter().filter(|&&got| got).count());

                let mut by_recency: Vec<(usize, (usize, usize))> = expected
                    .iter()
                    .filter(|&&(start, _)| start > 0)
                    .map(|&(start, end)| {
                        let newest = accepted
                            .iter()
                            .filter(|&&(s, e, _)| start <= s && e <= end)
                            .map(|&(_, _, order)| order)
                            .max()
                            .unwrap_or_default();
                        (newest, (start, end))
                    })
                    .collect();
                by_recency.sort_by_key(|&(recency, _)| std::cmp::Reverse(recency));
                let expected_sack: Vec<_> = by_recency
                    .into_iter()
                    .take(MAX_SACK_BLOCKS)
                    .map(|(_, range)| range)
                    .collect();
                let sack = assembler.sack_ranges();
                prop_assert_eq!(sack_of(&assembler), expected_sack.clone());
                // Blocks first, then only None.
                prop_assert!(sack[expected_sack.len()..].iter().all(Option::is_none));
            }
        }
    }
}
