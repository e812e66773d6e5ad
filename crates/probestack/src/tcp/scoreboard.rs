//! The sender's SACK scoreboard: which bytes above the cumulative acknowledgment the
//! receiver has reported holding, from the SACK blocks of RFC 2018 §3, and the loss
//! recovery queries RFC 6675 §4 builds on them (`IsLost`, the pipe estimate of
//! `SetPipe`, and rule (1) of `NextSeg`).
//!
//! The board is a sorted list of disjoint, non-adjacent half-open ranges `[start, end)` of
//! sequence numbers, merged as blocks arrive. Sequence numbers wrap, so every comparison
//! is modular (RFC 9293 §3.4) or made on offsets from `snd_una`; the board is correct
//! across the 2^32 boundary as long as the sender's window is under 2^31 bytes, which
//! every TCP's is.
//!
//! What the board keeps and drops:
//!
//! - A block is accepted only if it lies within `[snd_una, snd_max]` and is not empty.
//!   Others are ignored: a block below `snd_una` is a D-SACK (RFC 2883) or stale, and one
//!   past `snd_max` reports data never sent, so it is bogus. Either would corrupt the
//!   loss and pipe estimates if kept. (A D-SACK block inside `[snd_una, snd_max]`
//!   repeats SACKed data and so adds nothing.)
//! - As the cumulative ACK advances, everything below it is forgotten and ranges
//!   straddling it are trimmed. SACKed data is never assumed delivered before that
//!   (RFC 2018 §8, reneging); after a retransmission timeout the caller should
//!   [`clear`](Scoreboard::clear) the board, as RFC 2018 §8 and RFC 6675 §5.1 advise.
//! - The board holds at most [`MAX_RANGES`] ranges, in storage allocated once. When a
//!   block would make one more, the highest range is dropped (which may be the new
//!   block itself). The lowest holes matter most to recovery, since they are
//!   retransmitted first, and a receiver reports its most recent blocks again and again
//!   (RFC 2018 §4), so what is forgotten at the top is soon relearnt.

use crate::wire::tcp::SeqNumber;

/// Most SACKed ranges the board remembers.
pub const MAX_RANGES: usize = 64;

/// RFC 6675's DupThresh: how many discontiguous SACKed pieces above a byte mark it lost.
pub const DUP_THRESH: usize = 3;

/// The highest DupThresh a sender raises its own to ([`Scoreboard::set_dup_thresh`]).
pub const MAX_DUP_THRESH: usize = 32;

/// Sequence spans at or above this cannot be ordered by modular comparison.
const HALF_SPACE: usize = 1 << 31;

/// A TCP sender's record of SACKed sequence ranges (RFC 2018, RFC 6675).
#[derive(Clone, Debug)]
pub struct Scoreboard {
    /// `[start, end)` ranges, sorted, disjoint, non-adjacent and non-empty, at most
    /// [`MAX_RANGES`] of them.
    ranges: Vec<(SeqNumber, SeqNumber)>,
    /// DupThresh for [`is_lost`](Self::is_lost): [`DUP_THRESH`] unless the sender has
    /// seen deeper reordering.
    dup_thresh: usize,
}

impl Default for Scoreboard {
    fn default() -> Scoreboard {
        Scoreboard::new()
    }
}

impl Scoreboard {
    /// An empty board, with room for [`MAX_RANGES`] ranges allocated up front.
    pub fn new() -> Scoreboard {
        Scoreboard {
            ranges: Vec::with_capacity(MAX_RANGES),
            dup_thresh: DUP_THRESH,
        }
    }

    /// DupThresh in force.
    pub fn dup_thresh(&self) -> usize {
        self.dup_thresh
    }

    /// Sets DupThresh, from [`DUP_THRESH`] to [`MAX_DUP_THRESH`]: a sender that has seen
    /// reordering deeper than three segments raises it so that the same reordering is
    /// not taken for a loss again (RFC 4653's idea; Linux's `tp->reordering`). Kept
    /// across [`clear`](Self::clear).
    pub fn set_dup_thresh(&mut self, n: usize) {
        self.dup_thresh = n.clamp(DUP_THRESH, MAX_DUP_THRESH);
    }

    /// Records the SACK blocks of one ACK whose cumulative acknowledgment is `snd_una`,
    /// with `snd_max` the highest sequence number sent. Returns how many bytes were
    /// SACKed for the first time.
    ///
    /// First forgets everything below `snd_una`, as [`advance`](Self::advance) does.
    /// Then each block `(left, right)` (RFC 2018 §3: `right` is the sequence number after
    /// the last byte) is merged in if `left < right`, `left >= snd_una` and
    /// `right <= snd_max`, and ignored otherwise: D-SACK blocks, stale blocks and bogus
    /// ones never enter the board. Nothing is accepted if `snd_max` is behind `snd_una`
    /// or 2^31 or more ahead of it.
    pub fn add_blocks(
        &mut self,
        blocks: &[(SeqNumber, SeqNumber)],
        snd_una: SeqNumber,
        snd_max: SeqNumber,
    ) -> usize {
        self.advance(snd_una);
        let window = snd_max.bytes_since(snd_una);
        if window >= HALF_SPACE {
            return 0;
        }
        let mut new = 0;
        for &(left, right) in blocks {
            let l = left.bytes_since(snd_una);
            let r = right.bytes_since(snd_una);
            if l < r && r <= window {
                new = self.insert(snd_una, l, r).saturating_add(new);
            }
        }
        new
    }

    /// Merges `[base + l, base + r)` into the board, where every stored range is known to
    /// start at or after `base`; returns the bytes it added.
    fn insert(&mut self, base: SeqNumber, l: usize, r: usize) -> usize {
        let off = |s: SeqNumber| s.bytes_since(base);
        // Ranges before `i` end strictly before `l`; ranges from `j` on start strictly
        // after `r`. Those in `i..j` overlap or touch the new block.
        let i = self.ranges.partition_point(|&(_, e)| off(e) < l);
        let j = self.ranges.partition_point(|&(s, _)| off(s) <= r);
        if i >= j {
            // Touches nothing: a range of its own.
            if self.ranges.len() >= MAX_RANGES {
                if i >= self.ranges.len() {
                    // The new block would be the highest range: it is what gets dropped.
                    return 0;
                }
                self.ranges.pop();
            }
            self.ranges.insert(i, (base + l, base + r));
            return r - l;
        }
        let start = l.min(off(self.ranges[i].0));
        let end = r.max(off(self.ranges[j - 1].1));
        let covered = self.ranges[i..j]
            .iter()
            .fold(0usize, |n, &(s, e)| n.saturating_add(e.bytes_since(s)));
        self.ranges[i] = (base + start, base + end);
        self.ranges.drain(i + 1..j);
        // The merged range is contiguous and contains the new block and ranges i..j, so
        // what it adds is its length less what they covered.
        (end - start).saturating_sub(covered)
    }

    /// The cumulative acknowledgment moved to `snd_una`: forgets every SACKed byte below
    /// it, trimming a range that straddles it.
    pub fn advance(&mut self, snd_una: SeqNumber) {
        self.ranges.retain(|&(_, e)| e.gt(snd_una));
        for range in &mut self.ranges {
            if range.0.lt(snd_una) {
                range.0 = snd_una;
            }
        }
    }

    /// Forgets everything (after a retransmission timeout, RFC 2018 §8).
    pub fn clear(&mut self) {
        self.ranges.clear();
    }

    /// Whether nothing is SACKed.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// How many bytes are SACKed in total (all above the last `snd_una` given).
    pub fn sacked_bytes(&self) -> usize {
        self.ranges
            .iter()
            .fold(0usize, |n, &(s, e)| n.saturating_add(e.bytes_since(s)))
    }

    /// Whether the byte with sequence number `seq` has been SACKed.
    pub fn is_sacked(&self, seq: SeqNumber) -> bool {
        self.ranges.iter().any(|&(s, e)| s.le(seq) && seq.lt(e))
    }

    /// The right edge of the highest SACKed range, the sequence number just past the
    /// highest SACKed byte (RFC 2018's "right edge"), or `None` if nothing is SACKed.
    pub fn highest_sacked(&self) -> Option<SeqNumber> {
        self.ranges.last().map(|&(_, e)| e)
    }

    /// Whether any byte above `seq` is SACKed.
    pub fn any_sacked_above(&self, seq: SeqNumber) -> bool {
        self.ranges.last().is_some_and(|&(_, e)| (seq + 1).lt(e))
    }

    /// How many discontiguous SACKed ranges have bytes above `seq`, and how many SACKed
    /// bytes lie above it.
    fn sacked_above(&self, seq: SeqNumber) -> (usize, usize) {
        let first_above = seq + 1;
        let mut pieces = 0;
        let mut bytes = 0;
        for &(s, e) in &self.ranges {
            let from = if s.ge(first_above) { s } else { first_above };
            if from.lt(e) {
                pieces += 1;
                bytes = e.bytes_since(from).saturating_add(bytes);
            }
        }
        (pieces, bytes)
    }

    /// RFC 6675 §4 `IsLost(seq)`: whether the byte `seq` is deemed lost because at least
    /// DupThresh (3 unless [set](Self::set_dup_thresh)) discontiguous SACKed ranges, or
    /// more than (DupThresh - 1) · `mss` SACKed bytes, lie above it.
    ///
    /// "Discontiguous SACKed sequences" are counted as separate ranges on the board. As
    /// `seq` rises, fewer SACKed bytes lie above it, so once a byte is not lost no byte
    /// after it is either.
    pub fn is_lost(&self, seq: SeqNumber, mss: usize) -> bool {
        let (pieces, bytes) = self.sacked_above(seq);
        pieces >= self.dup_thresh || bytes > (self.dup_thresh - 1).saturating_mul(mss)
    }

    /// RFC 6675 §4 `NextSeg()` rule (1), simplified: the first un-SACKed bytes at or after
    /// `from` that lie below the highest SACKed byte and are lost by
    /// [`is_lost`](Self::is_lost). Returns their start and length, the length capped at
    /// `mss` and at the next SACKed range, or `None` if there are none (or `mss` is 0).
    ///
    /// `from` should be at or after `snd_una`, and past RFC 6675's HighRxt (the highest
    /// byte already retransmitted in this recovery) so that nothing is sent twice.
    pub fn next_lost(&self, from: SeqNumber, mss: usize) -> Option<(SeqNumber, usize)> {
        if mss == 0 {
            return None;
        }
        let mut cursor = from;
        for &(s, e) in &self.ranges {
            if e.le(cursor) {
                // Entirely behind the cursor.
                continue;
            }
            if s.le(cursor) {
                // The cursor is inside this range: the hole, if any, starts at its end.
                cursor = e;
                continue;
            }
            // `[cursor, s)` is un-SACKed and lies below `s`, a SACKed byte. Every byte in
            // it has the same SACKed bytes above it, so it is lost as a whole or not at
            // all; and if it is not, no later hole is either.
            if !self.is_lost(cursor, mss) {
                return None;
            }
            return Some((cursor, s.bytes_since(cursor).min(mss)));
        }
        None
    }

    /// RFC 6675 §4 `SetPipe()`: the estimate of bytes still in the network, over the
    /// sequence space `[snd_una, snd_max)`.
    ///
    /// It counts each byte there that is neither SACKed nor lost by
    /// [`is_lost`](Self::is_lost) (RFC 6675's clause (a)), and adds
    /// `retransmitted_in_flight`, the bytes the caller has retransmitted during this
    /// recovery and not yet seen acknowledged, SACKed or deemed lost again (clause (b),
    /// which counts each retransmitted byte at or below HighRxt once more). The board does
    /// not know what was retransmitted, so the caller keeps that count.
    pub fn pipe(
        &self,
        snd_una: SeqNumber,
        snd_max: SeqNumber,
        mss: usize,
        retransmitted_in_flight: usize,
    ) -> usize {
        let window = snd_max.bytes_since(snd_una);
        if window >= HALF_SPACE {
            // `snd_max` behind `snd_una`: nothing outstanding.
            return retransmitted_in_flight;
        }
        // Walk the holes in offsets from `snd_una`, clipping ranges to the window. Within
        // one hole every byte has the same SACKed bytes above it, so one `is_lost` per
        // hole decides it.
        let mut in_flight = 0usize;
        let mut cursor = 0usize;
        for &(s, e) in &self.ranges {
            if s.lt(snd_una) && e.le(snd_una) {
                continue;
            }
            let so = if s.lt(snd_una) {
                0
            } else {
                s.bytes_since(snd_una).min(window)
            };
            let eo = e.bytes_since(snd_una).min(window);
            if so > cursor && !self.is_lost(snd_una + cursor, mss) {
                in_flight = in_flight.saturating_add(so - cursor);
            }
            cursor = cursor.max(eo);
        }
        if window > cursor && !self.is_lost(snd_una + cursor, mss) {
            in_flight = in_flight.saturating_add(window - cursor);
        }
        in_flight.saturating_add(retransmitted_in_flight)
    }

    /// The SACKed ranges `[start, end)`, lowest first.
    pub fn ranges(&self) -> impl Iterator<Item = (SeqNumber, SeqNumber)> + '_ {
        self.ranges.iter().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn seq(n: u32) -> SeqNumber {
        SeqNumber(n)
    }

    fn blk(l: u32, r: u32) -> (SeqNumber, SeqNumber) {
        (SeqNumber(l), SeqNumber(r))
    }

    fn ranges(b: &Scoreboard) -> Vec<(u32, u32)> {
        b.ranges().map(|(s, e)| (s.0, e.0)).collect()
    }

    #[test]
    fn empty_board() {
        let b = Scoreboard::new();
        assert!(b.is_empty());
        assert_eq!(b.sacked_bytes(), 0);
        assert_eq!(b.highest_sacked(), None);
        assert!(!b.is_sacked(seq(5)));
        assert!(!b.is_lost(seq(5), 100));
        assert_eq!(b.next_lost(seq(5), 100), None);
        assert_eq!(b.pipe(seq(0), seq(1000), 100, 0), 1000);
        assert_eq!(b.pipe(seq(0), seq(1000), 100, 300), 1300);
    }

    #[test]
    fn blocks_merge() {
        let mut b = Scoreboard::new();
        let (una, max) = (seq(1000), seq(5000));
        assert_eq!(b.add_blocks(&[blk(2000, 2100)], una, max), 100);
        assert_eq!(b.add_blocks(&[blk(3000, 3100)], una, max), 100);
        // Adjacent on the left: joins the first range.
        assert_eq!(b.add_blocks(&[blk(1900, 2000)], una, max), 100);
        assert_eq!(ranges(&b), vec![(1900, 2100), (3000, 3100)]);
        // Adjacent on the right: joins too.
        assert_eq!(b.add_blocks(&[blk(3100, 3150)], una, max), 50);
        assert_eq!(ranges(&b), vec![(1900, 2100), (3000, 3150)]);
        // A repeat adds nothing.
        assert_eq!(b.add_blocks(&[blk(1950, 2050)], una, max), 0);
        // Bridging both with overlap at each end: only the gap is new.
        assert_eq!(b.add_blocks(&[blk(2050, 3050)], una, max), 900);
        assert_eq!(ranges(&b), vec![(1900, 3150)]);
        // Several blocks in one ACK, in any order, one swallowing others.
        assert_eq!(
            b.add_blocks(
                &[blk(4000, 4100), blk(3500, 3600), blk(3400, 4200)],
                una,
                max
            ),
            100 + 100 + 600
        );
        assert_eq!(ranges(&b), vec![(1900, 3150), (3400, 4200)]);
        assert_eq!(b.sacked_bytes(), 1250 + 800);
        assert_eq!(b.highest_sacked(), Some(seq(4200)));
        assert!(b.is_sacked(seq(1900)));
        assert!(b.is_sacked(seq(3149)));
        assert!(!b.is_sacked(seq(3150)));
        assert!(!b.is_sacked(seq(1899)));
    }

    #[test]
    fn invalid_blocks_ignored() {
        let mut b = Scoreboard::new();
        let (una, max) = (seq(1000), seq(2000));
        let bad = [
            blk(900, 1000),  // D-SACK: below snd_una.
            blk(900, 1100),  // Straddles snd_una.
            blk(1500, 1500), // Empty.
            blk(1600, 1500), // Reversed.
            blk(1900, 2001), // Past snd_max.
            blk(3000, 3100), // Data never sent.
        ];
        assert_eq!(b.add_blocks(&bad, una, max), 0);
        assert!(b.is_empty());
        // The edges themselves are fine.
        assert_eq!(
            b.add_blocks(&[blk(1000, 1001), blk(1999, 2000)], una, max),
            2
        );
        // snd_max behind snd_una: nothing is valid.
        let mut c = Scoreboard::new();
        assert_eq!(c.add_blocks(&[blk(1100, 1200)], seq(1000), seq(900)), 0);
        assert!(c.is_empty());
    }

    #[test]
    fn advance_trims_and_drops() {
        let mut b = Scoreboard::new();
        let max = seq(10_000);
        b.add_blocks(
            &[blk(2000, 2100), blk(3000, 3100), blk(4000, 4100)],
            seq(1000),
            max,
        );
        b.advance(seq(2050));
        assert_eq!(ranges(&b), vec![(2050, 2100), (3000, 3100), (4000, 4100)]);
        b.advance(seq(3100));
        assert_eq!(ranges(&b), vec![(4000, 4100)]);
        assert_eq!(b.sacked_bytes(), 100);
        // add_blocks advances too.
        assert_eq!(b.add_blocks(&[blk(5000, 5001)], seq(4099), max), 1);
        assert_eq!(ranges(&b), vec![(4099, 4100), (5000, 5001)]);
        b.advance(seq(6000));
        assert!(b.is_empty());
        b.add_blocks(&[blk(7000, 7100)], seq(6000), max);
        b.clear();
        assert!(b.is_empty());
    }

    #[test]
    fn is_lost_thresholds() {
        let mss = 100;
        let mut b = Scoreboard::new();
        let (una, max) = (seq(0), seq(10_000));
        // Two small discontiguous pieces, 20 bytes: not lost.
        b.add_blocks(&[blk(500, 510), blk(700, 710)], una, max);
        assert!(!b.is_lost(seq(0), mss));
        // A third piece: DupThresh ranges above 0, lost; above 500, only two.
        b.add_blocks(&[blk(900, 910)], una, max);
        assert!(b.is_lost(seq(0), mss));
        assert!(b.is_lost(seq(499), mss));
        assert!(!b.is_lost(seq(510), mss));
        // Inside a range only the bytes above count: above 505 are 506..510, 700.., 900..
        // -> three pieces.
        assert!(b.is_lost(seq(505), mss));
        assert!(!b.is_lost(seq(509), mss));

        // Bytes: one range of exactly 2 * mss is not enough; one more byte is.
        let mut b = Scoreboard::new();
        b.add_blocks(&[blk(1000, 1200)], una, max);
        assert!(!b.is_lost(seq(0), mss));
        b.add_blocks(&[blk(1200, 1201)], una, max);
        assert!(b.is_lost(seq(0), mss));
        assert!(b.is_lost(seq(999), mss));
        // Above 1000 lie 1001..1201, exactly 200 bytes.
        assert!(!b.is_lost(seq(1000), mss));
        // Any SACKed byte above: up to the last range's end.
        assert!(b.any_sacked_above(seq(1199)));
        assert!(!b.any_sacked_above(seq(1200)));
        // A raised DupThresh asks for more, and stays across a clear.
        b.set_dup_thresh(4);
        assert!(!b.is_lost(seq(0), mss));
        b.add_blocks(&[blk(1300, 1400)], una, max);
        assert!(b.is_lost(seq(0), mss));
        b.clear();
        assert_eq!(b.dup_thresh(), 4);
        b.set_dup_thresh(1000);
        assert_eq!(b.dup_thresh(), MAX_DUP_THRESH);
        b.set_dup_thresh(0);
        assert_eq!(b.dup_thresh(), DUP_THRESH);
    }

    /// The board of RFC 6675's usual picture: with mss 100 and snd_una 1000, segments
    /// 1200, 1400 and 1600 SACKed.
    fn three_holes(base: u32) -> Scoreboard {
        let mut b = Scoreboard::new();
        let at = |n: u32| SeqNumber(base.wrapping_add(n));
        let blocks = [(at(200), at(300)), (at(400), at(500)), (at(600), at(700))];
        assert_eq!(b.add_blocks(&blocks, at(0), at(1000)), 300);
        b
    }

    #[test]
    fn next_lost_walks_holes_in_order() {
        let b = three_holes(1000);
        // 1000..1200 has three pieces above: lost, in mss chunks.
        assert_eq!(b.next_lost(seq(1000), 100), Some((seq(1000), 100)));
        assert_eq!(b.next_lost(seq(1100), 100), Some((seq(1100), 100)));
        // Capped by the next SACKed range.
        assert_eq!(b.next_lost(seq(1150), 100), Some((seq(1150), 50)));
        // A bigger mss is capped by the range too.
        assert_eq!(b.next_lost(seq(1000), 1460), Some((seq(1000), 200)));
        // From inside a SACKed range, the hole after it: 1300..1400 has two pieces and
        // 200 bytes above, not lost.
        assert_eq!(b.next_lost(seq(1200), 100), None);
        assert_eq!(b.next_lost(seq(1300), 100), None);
        assert_eq!(b.next_lost(seq(1000), 0), None);

        // With more SACKed above, the second hole becomes lost too and comes next.
        let mut b = three_holes(1000);
        b.add_blocks(&[blk(1800, 1900)], seq(1000), seq(2000));
        assert_eq!(b.next_lost(seq(1200), 100), Some((seq(1300), 100)));
        assert_eq!(b.next_lost(seq(1250), 30), Some((seq(1300), 30)));
        // Nothing above the highest SACKed byte is ever chosen.
        assert_eq!(b.next_lost(seq(1900), 100), None);
        assert_eq!(b.next_lost(seq(1950), 100), None);
    }

    #[test]
    fn pipe_matches_hand_count() {
        let b = three_holes(1000);
        // Outstanding 1000..2000. Lost: 1000..1200 (3 pieces above). Not lost, not SACKed:
        // 1300..1400 (2 pieces, 200 bytes above), 1500..1600, 1700..2000. SACKed: 300.
        // Pipe = 100 + 100 + 300 = 500, plus 150 retransmitted and in flight.
        assert_eq!(b.pipe(seq(1000), seq(2000), 100, 0), 500);
        assert_eq!(b.pipe(seq(1000), seq(2000), 100, 150), 650);
        // A smaller mss makes 1300..1400 lost as well (200 > 2 * 50).
        assert_eq!(b.pipe(seq(1000), seq(2000), 50, 0), 400);
        // snd_max behind snd_una: only the retransmissions.
        assert_eq!(b.pipe(seq(1000), seq(900), 100, 7), 7);
    }

    #[test]
    fn wraparound() {
        let base = u32::MAX - 500;
        let at = |n: u32| SeqNumber(base.wrapping_add(n));
        let b = three_holes(base);
        // The ranges straddle and pass 2^32 and stay in order.
        let r: Vec<_> = b.ranges().collect();
        assert_eq!(
            r,
            vec![(at(200), at(300)), (at(400), at(500)), (at(600), at(700))]
        );
        assert!(at(600).0 < at(0).0, "the test must actually wrap");
        assert_eq!(b.sacked_bytes(), 300);
        assert_eq!(b.highest_sacked(), Some(at(700)));
        assert!(b.is_sacked(at(650)));
        assert!(!b.is_sacked(at(550)));
        assert!(b.is_lost(at(0), 100));
        assert!(!b.is_lost(at(300), 100));
        assert_eq!(b.next_lost(at(150), 100), Some((at(150), 50)));
        assert_eq!(b.pipe(at(0), at(1000), 100, 0), 500);

        // A block across the boundary merges with ranges on both sides.
        let mut b = three_holes(base);
        assert_eq!(b.add_blocks(&[(at(250), at(650))], at(0), at(1000)), 200);
        assert_eq!(b.ranges().collect::<Vec<_>>(), vec![(at(200), at(700))]);
        b.advance(at(520)); // Past 2^32.
        assert_eq!(b.ranges().collect::<Vec<_>>(), vec![(at(520), at(700))]);
        assert_eq!(b.sacked_bytes(), 180);
    }

    #[test]
    fn full_board_drops_highest() {
        let mut b = Scoreboard::new();
        let (una, max) = (seq(0), seq(100_000));
        for k in 0..MAX_RANGES as u32 {
            assert_eq!(b.add_blocks(&[blk(10 * k + 5, 10 * k + 10)], una, max), 5);
        }
        let cap = b.ranges.capacity();
        assert_eq!(b.ranges().count(), MAX_RANGES);
        // A new highest range is not kept.
        assert_eq!(b.add_blocks(&[blk(5000, 5010)], una, max), 0);
        assert_eq!(b.highest_sacked(), Some(seq(10 * 63 + 10)));
        // A new lowest one pushes out the top range.
        assert_eq!(b.add_blocks(&[blk(0, 2)], una, max), 2);
        assert_eq!(b.ranges().count(), MAX_RANGES);
        assert_eq!(b.highest_sacked(), Some(seq(10 * 62 + 10)));
        // Merging still works when full, and storage never grew.
        assert_eq!(b.add_blocks(&[blk(2, 5)], una, max), 3);
        assert_eq!(b.ranges().next(), Some(blk(0, 10)));
        assert_eq!(b.ranges.capacity(), cap);
    }

    /// One step of the model test: an ACK with SACK blocks (as offsets from the model's
    /// base), or a bare cumulative ACK advance.
    #[derive(Clone, Debug)]
    enum Op {
        Sack(Vec<(u32, u32)>),
        Advance(u32),
    }

    /// A block edge: anywhere, or on a coarse grid so that blocks often touch or share
    /// edges exactly.
    fn edge() -> impl Strategy<Value = u32> {
        prop_oneof![0u32..600, (0u32..19).prop_map(|x| x * 32)]
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => proptest::collection::vec((edge(), edge()), 0..5).prop_map(Op::Sack),
            1 => (0u32..80).prop_map(Op::Advance),
        ]
    }

    const SPACE: usize = 600;
    const SND_MAX: u32 = 512;

    proptest! {
        #[test]
        fn matches_bitmap_model(
            base in prop_oneof![any::<u32>(), (u32::MAX - 700)..=u32::MAX],
            ops in proptest::collection::vec(op(), 0..16),
        ) {
            let at = |n: u32| SeqNumber(base.wrapping_add(n));
            let mut board = Scoreboard::new();
            let mut model = [false; SPACE];
            let mut una = 0u32;
            for op in ops {
                match op {
                    Op::Sack(blocks) => {
                        let mut want = 0;
                        for &(l, r) in &blocks {
                            if una <= l && l < r && r <= SND_MAX {
                                for bit in &mut model[l as usize..r as usize] {
                                    if !*bit {
                                        *bit = true;
                                        want += 1;
                                    }
                                }
                            }
                        }
                        let blocks: Vec<_> = blocks.iter().map(|&(l, r)| (at(l), at(r))).collect();
                        prop_assert_eq!(board.add_blocks(&blocks, at(una), at(SND_MAX)), want);
                    }
                    Op::Advance(d) => {
                        una = (una + d).min(SND_MAX);
                        for bit in &mut model[..una as usize] {
                            *bit = false;
                        }
                        board.advance(at(una));
                    }
                }
                prop_assert_eq!(board.sacked_bytes(), model.iter().filter(|&&b| b).count());
                for (i, &bit) in model.iter().enumerate() {
                    prop_assert_eq!(board.is_sacked(at(i as u32)), bit, "byte {}", i);
                }
                // Ranges are non-empty, sorted, and neither overlap nor touch.
                let r: Vec<_> = board.ranges().collect();
                for w in r.windows(2) {
                    prop_assert!(w[0].1.lt(w[1].0));
                }
                for &(s, e) in &r {
                    prop_assert!(s.lt(e));
                    prop_assert!(s.ge(at(una)));
                }
                let top = model.iter().rposition(|&b| b).map(|i| at(i as u32 + 1));
                prop_assert_eq!(board.highest_sacked(), top);
                prop_assert_eq!(board.is_empty(), top.is_none());
            }
        }

        #[test]
        fn pipe_and_next_lost_match_bytewise_model(
            base in prop_oneof![any::<u32>(), (u32::MAX - 700)..=u32::MAX],
            blocks in proptest::collection::vec((0u32..400, 1u32..60), 0..8),
            mss in 0usize..80,
            from in 0u32..400,
        ) {
            let at = |n: u32| SeqNumber(base.wrapping_add(n));
            let window = 400u32;
            let mut board = Scoreboard::new();
            let blocks: Vec<_> = blocks
                .iter()
                .map(|&(l, len)| (at(l), at((l + len).min(window))))
                .collect();
            board.add_blocks(&blocks, at(0), at(window));
            // Byte by byte, straight from the definitions.
            let mut pipe = 0;
            for i in 0..window {
                if !board.is_sacked(at(i)) && !board.is_lost(at(i), mss) {
                    pipe += 1;
                }
            }
            prop_assert_eq!(board.pipe(at(0), at(window), mss, 0), pipe);
            let highest = board.highest_sacked().map_or(0, |h| h.bytes_since(at(0)) as u32);
            let want = if mss == 0 {
                None
            } else {
                (from..highest)
                    .find(|&i| !board.is_sacked(at(i)) && board.is_lost(at(i), mss))
                    .map(|start| {
                        let len = (start..highest)
                            .take_while(|&i| !board.is_sacked(at(i)))
                            .count()
                            .min(mss);
                        (at(start), len)
                    })
            };
            prop_assert_eq!(board.next_lost(at(from), mss), want);
        }
    }
}
