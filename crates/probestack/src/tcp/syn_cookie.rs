//! SYN cookies (RFC 4987 §3.6): a listener whose backlog of half-open connections is full
//! answers a SYN without keeping any state, by choosing as its initial sequence number a
//! value it can later recognise in the ACK that completes the handshake.
//!
//! # The cookie
//!
//! The 32-bit ISN is laid out as D. J. Bernstein proposed and RFC 4987 §3.6 describes:
//!
//! ```text
//!  31      27 26  24 23                                        0
//! +----------+------+-------------------------------------------+
//! | t mod 32 | MSS  |  MAC(key, 4-tuple, client ISN, t, MSS)    |
//! +----------+------+-------------------------------------------+
//! ```
//!
//! - `t` is a coarse clock, one tick per [`COOKIE_PERIOD`] (64 s, RFC 4987's figure), so
//!   that cookies expire: a cookie is accepted while `t` has moved on by at most
//!   [`MAX_COOKIE_AGE`] ticks since it was made, which gives it a life of between 64 and
//!   128 s, ample for a handshake, short enough that a cookie seen on the wire is soon
//!   useless. Only `t mod 32` travels; the receiver rebuilds the full `t` from its own
//!   clock.
//! - the MSS field indexes [`MSS_TABLE`]: the largest entry not above the MSS the client's
//!   SYN offered, the one option the cookie carries. Window scaling, SACK and timestamps
//!   are not carried: the SYN-ACK made from a cookie offers none of them, so both ends
//!   agree to go without (RFC 7323 §1.3, RFC 2018 §2: each needs both SYNs).
//! - the MAC is the low 24 bits of SipHash-2-4 ([`siphash24`]) under a secret key, over a
//!   tag byte `b'C'`, the local and remote address and port, the client's ISN, the full
//!   `t` and the MSS index. The tag keeps its outputs apart from the ISN and port hashes
//!   of [`isn`](super::isn), so the same key may serve all three.
//!
//! # Checking an ACK
//!
//! An ACK for a listener that belongs to no connection may answer a cookie SYN-ACK: its
//! acknowledgment number less one is the cookie, its sequence number less one the
//! client's ISN (the ACK is the client's first segment after its SYN; data on it starts
//! at ISN + 1 too). [`SynCookies::check`] rebuilds `t` from the cookie's five bits and the
//! current tick, refuses a cookie older than [`MAX_COOKIE_AGE`], recomputes the MAC and
//! compares. A forger who knows the 4-tuple but not the key must guess 24 bits per
//! attempt (and must get the time and MSS bits right, which are visible, so they add
//! nothing): one chance in 2^24 per ACK, the same margin as Linux's and FreeBSD's cookies.
//!
//! Cookie ISNs do not increase with time as RFC 6528's do; they are used only while the
//! listener is flooded, as RFC 4987 §3.6 recommends.

use crate::tcp::isn::siphash24;
use crate::time::{Duration, Instant};
use crate::wire::tcp::SeqNumber;
use crate::wire::Ipv4Address;

/// One tick of the cookie clock `t` (RFC 4987 §3.6: "a slowly incrementing counter",
/// typically every 64 seconds).
pub const COOKIE_PERIOD: Duration = Duration::from_secs(64);

/// How many ticks of [`COOKIE_PERIOD`] a cookie survives: one, so it is accepted for at
/// least 64 s and at most 128 s after it was made.
pub const MAX_COOKIE_AGE: u32 = 1;

/// The longest a cookie is accepted after it was made: to the end of the tick after its
/// own.
pub const COOKIE_LIFETIME: Duration =
    Duration::from_nanos(COOKIE_PERIOD.as_nanos() * (MAX_COOKIE_AGE as u64 + 1));

/// The MSS values a cookie can carry, smallest first: the eight commonest (RFC 9293's
/// default 536; IPv6-minimum and tunnel paths; PPPoE; Ethernet's 1460; 9000-byte jumbo
/// frames), with one below 536 for the rare peer that asks for less.
pub const MSS_TABLE: [u16; 8] = [216, 536, 1220, 1360, 1400, 1440, 1460, 8960];

/// The MSS a peer that sends no MSS option accepts (RFC 9293 §3.7.1).
const DEFAULT_PEER_MSS: u16 = 536;

/// Domain separation: every cookie MAC input starts with this byte.
const TAG_COOKIE: u8 = b'C';

/// Bits of the cookie holding the MAC.
const MAC_BITS: u32 = 24;
const MAC_MASK: u32 = (1 << MAC_BITS) - 1;
/// The MSS index sits above the MAC, the time counter above it.
const MSS_SHIFT: u32 = MAC_BITS;
const TIME_SHIFT: u32 = 27;
/// `t` travels modulo 32 (5 bits).
const TIME_MASK: u32 = 0x1f;

/// Why an ACK's cookie was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CookieError {
    /// The cookie is older than [`MAX_COOKIE_AGE`] ticks (or from the future).
    Expired,
    /// The MAC does not match: not a cookie of ours for this 4-tuple and client ISN.
    BadMac,
}

/// The index in [`MSS_TABLE`] of the largest entry not above `mss` (the smallest entry
/// when `mss` is below all of them); a SYN without an MSS option counts as 536.
pub fn mss_index(mss: Option<u16>) -> u8 {
    let mss = mss.unwrap_or(DEFAULT_PEER_MSS);
    MSS_TABLE.iter().rposition(|&m| m <= mss).unwrap_or(0) as u8
}

/// Makes and checks SYN cookies under one secret key.
///
/// Its `Debug` output hides the key.
#[derive(Clone)]
pub struct SynCookies {
    key: [u8; 16],
}

impl std::fmt::Debug for SynCookies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SynCookies")
            .field("key", &"<secret>")
            .finish()
    }
}

/// The cookie clock at `now`: whole [`COOKIE_PERIOD`]s since time zero (truncated to 32
/// bits; only differences of a few ticks are ever used).
fn tick(now: Instant) -> u32 {
    (now.as_nanos() / COOKIE_PERIOD.as_nanos()) as u32
}

impl SynCookies {
    /// Cookies under the 128-bit secret `key` (the caller draws it at random and keeps
    /// it: a new key invalidates every cookie in flight).
    pub fn new(key: [u8; 16]) -> SynCookies {
        SynCookies { key }
    }

    /// The 24-bit MAC of a cookie for this connection, client ISN, full tick and MSS index.
    fn mac(
        &self,
        local: (Ipv4Address, u16),
        remote: (Ipv4Address, u16),
        client_isn: SeqNumber,
        t: u32,
        mss_index: u8,
    ) -> u32 {
        let mut input = [0u8; 22];
        input[0] = TAG_COOKIE;
        input[1..5].copy_from_slice(&local.0 .0);
        input[5..7].copy_from_slice(&local.1.to_be_bytes());
        input[7..11].copy_from_slice(&remote.0 .0);
        input[11..13].copy_from_slice(&remote.1.to_be_bytes());
        input[13..17].copy_from_slice(&client_isn.0.to_be_bytes());
        input[17..21].copy_from_slice(&t.to_be_bytes());
        input[21] = mss_index;
        siphash24(&self.key, &input) as u32 & MAC_MASK
    }

    /// The cookie to use as our ISN in the SYN-ACK to a SYN from `remote` to `local` with
    /// sequence number `client_isn` and MSS option `peer_mss`, at `now`. Also returns the
    /// MSS it encodes (what the connection will send with, if it is completed).
    pub fn make(
        &self,
        local: (Ipv4Address, u16),
        remote: (Ipv4Address, u16),
        client_isn: SeqNumber,
        peer_mss: Option<u16>,
        now: Instant,
    ) -> (SeqNumber, u16) {
        let t = tick(now);
        let m = mss_index(peer_mss);
        let mac = self.mac(local, remote, client_isn, t, m);
        let cookie = (t & TIME_MASK) << TIME_SHIFT | u32::from(m) << MSS_SHIFT | mac;
        (SeqNumber(cookie), MSS_TABLE[usize::from(m)])
    }

    /// Checks the ACK from `remote` to `local` with sequence number `seq` and
    /// acknowledgment number `ack`, at `now`: if `ack - 1` is a cookie we made for this
    /// 4-tuple and client ISN `seq - 1` no more than [`MAX_COOKIE_AGE`] ticks ago,
    /// returns the MSS it carries.
    pub fn check(
        &self,
        local: (Ipv4Address, u16),
        remote: (Ipv4Address, u16),
        seq: SeqNumber,
        ack: SeqNumber,
        now: Instant,
    ) -> Result<u16, CookieError> {
        let cookie = (ack - 1).0;
        let client_isn = seq - 1;
        let now_t = tick(now);
        let age = (now_t & TIME_MASK).wrapping_sub(cookie >> TIME_SHIFT) & TIME_MASK;
        if age > MAX_COOKIE_AGE {
            return Err(CookieError::Expired);
        }
        let t = now_t.wrapping_sub(age);
        let m = ((cookie >> MSS_SHIFT) & 0x7) as u8;
        if self.mac(local, remote, client_isn, t, m) != cookie & MAC_MASK {
            return Err(CookieError::BadMac);
        }
        Ok(MSS_TABLE[usize::from(m)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const LOCAL: (Ipv4Address, u16) = (Ipv4Address::new(198, 18, 0, 2), 80);
    const REMOTE: (Ipv4Address, u16) = (Ipv4Address::new(198, 18, 0, 1), 50000);

    fn cookies() -> SynCookies {
        SynCookies::new(*b"0123456789abcdef")
    }

    /// The ACK that completes the handshake: seq = client ISN + 1, ack = cookie + 1.
    fn ack_for(isn: SeqNumber, cookie: SeqNumber) -> (SeqNumber, SeqNumber) {
        (isn + 1, cookie + 1)
    }

    #[test]
    fn a_cookie_round_trips() {
        let c = cookies();
        let t0 = Instant::from_millis(1_000_000);
        let isn = SeqNumber(0xdead_beef);
        let (cookie, mss) = c.make(LOCAL, REMOTE, isn, Some(1460), t0);
        assert_eq!(mss, 1460);
        let (seq, ack) = ack_for(isn, cookie);
        assert_eq!(c.check(LOCAL, REMOTE, seq, ack, t0), Ok(1460));
        // Still good a little later, and across a tick boundary.
        let later = t0 + COOKIE_PERIOD;
        assert_eq!(c.check(LOCAL, REMOTE, seq, ack, later), Ok(1460));
    }

    #[test]
    fn a_tampered_tuple_is_refused() {
        let c = cookies();
        let now = Instant::from_millis(5_000);
        let isn = SeqNumber(7);
        let (cookie, _) = c.make(LOCAL, REMOTE, isn, Some(1460), now);
        let (seq, ack) = ack_for(isn, cookie);
        let other_port = (REMOTE.0, REMOTE.1 + 1);
        let other_addr = (Ipv4Address::new(198, 18, 9, 9), REMOTE.1);
        let other_local = (LOCAL.0, 81);
        assert_eq!(
            c.check(LOCAL, other_port, seq, ack, now),
            Err(CookieError::BadMac)
        );
        assert_eq!(
            c.check(LOCAL, other_addr, seq, ack, now),
            Err(CookieError::BadMac)
        );
        assert_eq!(
            c.check(other_local, REMOTE, seq, ack, now),
            Err(CookieError::BadMac)
        );
    }

    #[test]
    fn a_tampered_isn_or_cookie_is_refused() {
        let c = cookies();
        let now = Instant::from_millis(5_000);
        let isn = SeqNumber(123_456);
        let (cookie, _) = c.make(LOCAL, REMOTE, isn, Some(1460), now);
        let (seq, ack) = ack_for(isn, cookie);
        assert_eq!(
            c.check(LOCAL, REMOTE, seq + 1, ack, now),
            Err(CookieError::BadMac)
        );
        // One flipped MAC bit, and a different MSS index with the same MAC.
        assert_eq!(
            c.check(LOCAL, REMOTE, seq, SeqNumber(ack.0 ^ 1), now),
            Err(CookieError::BadMac)
        );
        let other_mss = SeqNumber(ack.0 ^ (1 << MSS_SHIFT));
        assert_eq!(
            c.check(LOCAL, REMOTE, seq, other_mss, now),
            Err(CookieError::BadMac)
        );
        // Another key does not know it.
        let stranger = SynCookies::new(*b"fedcba9876543210");
        assert_eq!(
            stranger.check(LOCAL, REMOTE, seq, ack, now),
            Err(CookieError::BadMac)
        );
    }

    #[test]
    fn an_old_cookie_expires() {
        let c = cookies();
        // Made at the very start of a tick: good for two ticks, gone at the third.
        let period = COOKIE_PERIOD.as_nanos();
        let at = |ticks: u64, less_ns: u64| Instant::from_nanos(ticks * period - less_ns);
        let t0 = at(10, 0);
        let isn = SeqNumber(99);
        let (cookie, _) = c.make(LOCAL, REMOTE, isn, None, t0);
        let (seq, ack) = ack_for(isn, cookie);
        let last_good = at(12, 1);
        assert_eq!(c.check(LOCAL, REMOTE, seq, ack, last_good), Ok(536));
        let expired = at(12, 0);
        assert_eq!(
            c.check(LOCAL, REMOTE, seq, ack, expired),
            Err(CookieError::Expired)
        );
        // 32 ticks later the five time bits match again: the MAC, over the full tick,
        // still refuses it.
        let wrapped = at(42, 0);
        assert_eq!(
            c.check(LOCAL, REMOTE, seq, ack, wrapped),
            Err(CookieError::BadMac)
        );
        // A cookie from the future (a clock that went back) is refused too.
        let before = at(9, 0);
        assert_eq!(
            c.check(LOCAL, REMOTE, seq, ack, before),
            Err(CookieError::Expired)
        );
    }

    #[test]
    fn mss_encoding_rounds_down_to_the_table() {
        assert_eq!(MSS_TABLE[usize::from(mss_index(None))], 536);
        assert_eq!(MSS_TABLE[usize::from(mss_index(Some(1460)))], 1460);
        assert_eq!(MSS_TABLE[usize::from(mss_index(Some(1459)))], 1440);
        assert_eq!(MSS_TABLE[usize::from(mss_index(Some(65495)))], 8960);
        assert_eq!(MSS_TABLE[usize::from(mss_index(Some(8959)))], 1460);
        // Below the whole table: the smallest entry.
        assert_eq!(mss_index(Some(0)), 0);
        assert_eq!(mss_index(Some(100)), 0);
        // The table is sorted, so "largest not above" is well defined.
        assert!(MSS_TABLE.windows(2).all(|w| w[0] < w[1]));
        // Every index travels in the cookie and comes back.
        let c = cookies();
        let now = Instant::from_millis(42);
        for (i, &m) in MSS_TABLE.iter().enumerate() {
            let isn = SeqNumber(i as u32 * 1000);
            let (cookie, encoded) = c.make(LOCAL, REMOTE, isn, Some(m), now);
            assert_eq!(encoded, m);
            assert_eq!((cookie.0 >> MSS_SHIFT) & 0x7, i as u32);
            let (seq, ack) = ack_for(isn, cookie);
            assert_eq!(c.check(LOCAL, REMOTE, seq, ack, now), Ok(m));
        }
    }

    /// Guessed ACKs for a known 4-tuple are refused: 100,000 from a fixed pseudo-random
    /// sequence (so the test is the same every run), with the time bits set to the current
    /// tick so that only the MAC stands in the way. Each passes with chance 2^-24.
    #[test]
    fn guessed_acks_are_refused() {
        let c = cookies();
        let now = Instant::from_millis(1_000);
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut passed = 0;
        for _ in 0..100_000 {
            // Knuth's MMIX LCG.
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let seq = SeqNumber((x >> 32) as u32);
            let guess =
                (x as u32 & !(TIME_MASK << TIME_SHIFT)) | (tick(now) & TIME_MASK) << TIME_SHIFT;
            if c.check(LOCAL, REMOTE, seq, SeqNumber(guess) + 1, now)
                .is_ok()
            {
                passed += 1;
            }
        }
        assert_eq!(passed, 0);
    }

    proptest! {
        /// Any SYN's cookie checks at once and within its life, with any client ISN
        /// (sequence arithmetic wraps) and any MSS.
        #[test]
        fn cookies_check_for_any_syn(
            isn in any::<u32>(),
            mss in proptest::option::of(any::<u16>()),
            port in 1u16..,
            ms in 0u64..10_000_000,
            later_ms in 0u64..64_000,
        ) {
            let c = cookies();
            let remote = (REMOTE.0, port);
            let now = Instant::from_millis(ms);
            let (cookie, encoded) = c.make(LOCAL, remote, SeqNumber(isn), mss, now);
            let (seq, ack) = ack_for(SeqNumber(isn), cookie);
            let then = now + Duration::from_millis(later_ms);
            prop_assert_eq!(c.check(LOCAL, remote, seq, ack, then), Ok(encoded));
        }

    }
}
