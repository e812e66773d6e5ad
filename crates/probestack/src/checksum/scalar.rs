//! Portable kernels: paper 000's 32-bit scheme, 64-bit carry chains, the in-line header
//! sum, and their fused copy-and-sum loops.
//!
//! All of them load little-endian words and swap the folded sum once at the end
//! (RFC 1071 §2(B)); a short tail is zero-padded into one word, which is exactly the
//! "odd byte is the high half of a padded word" rule of RFC 1071 §4.1.

use super::{combine, fold64};

#[inline(always)]
fn le32(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

#[inline(always)]
fn le64(b: &[u8]) -> u64 {
    u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
}

/// Zero-pads up to 7 trailing bytes into one little-endian word, each byte at its own
/// position: a 4-, a 2- and a 1-byte load as the length's bits say, with no call to
/// `memcpy` (which costs more than the whole sum of a short header).
#[inline(always)]
pub(super) fn tail64(rest: &[u8]) -> u64 {
    debug_assert!(rest.len() < 8);
    let n = rest.len();
    let mut w = 0u64;
    let mut at = 0;
    if n & 4 != 0 {
        w = le32(rest) as u64;
        at = 4;
    }
    if n & 2 != 0 {
        w |= (u16::from_le_bytes([rest[at], rest[at + 1]]) as u64) << (8 * at);
        at += 2;
    }
    if n & 1 != 0 {
        w |= (rest[at] as u64) << (8 * at);
    }
    w
}

/// Folds a total of 64-bit little-endian words, held as 128 bits, into a 16-bit
/// little-endian sum (2^64 is 1 modulo 0xFFFF, so the high half just adds in).
#[inline(always)]
pub(super) fn fold128(t: u128) -> u16 {
    let (s, carry) = (t as u64).overflowing_add((t >> 64) as u64);
    combine(fold64(s), carry as u16)
}

// ---------------------------------------------------------------------------------------
// Paper 000: 32-bit loads, shift and mask, unrolled sixteen times, two accumulators.

/// Blocks of 64 bytes between folds: each block adds sixteen 16-bit halves to each
/// accumulator (under 2^20), so 4096 blocks stay below 2^32.
const UNROLLED32_BLOCKS_PER_FOLD: usize = 4096;

#[inline(always)]
fn halves(w: u32) -> u32 {
    (w & 0xFFFF) + (w >> 16)
}

/// Paper 000 §4.1: "reading memory in units of 32 bit words", two instructions (shift and
/// mask) to unpack the halves, the inner loop unrolled sixteen times, and two registers
/// in the data pipeline.
pub(super) fn sum_unrolled32(data: &[u8]) -> u16 {
    let mut total: u64 = 0;
    let mut blocks = data.chunks_exact(64);
    let mut n = 0;
    let (mut a, mut b) = (0u32, 0u32);
    for blk in &mut blocks {
        a += halves(le32(&blk[0..]));
        b += halves(le32(&blk[4..]));
        a += halves(le32(&blk[8..]));
        b += halves(le32(&blk[12..]));
        a += halves(le32(&blk[16..]));
        b += halves(le32(&blk[20..]));
        a += halves(le32(&blk[24..]));
        b += halves(le32(&blk[28..]));
        a += halves(le32(&blk[32..]));
        b += halves(le32(&blk[36..]));
        a += halves(le32(&blk[40..]));
        b += halves(le32(&blk[44..]));
        a += halves(le32(&blk[48..]));
        b += halves(le32(&blk[52..]));
        a += halves(le32(&blk[56..]));
        b += halves(le32(&blk[60..]));
        n += 1;
        if n == UNROLLED32_BLOCKS_PER_FOLD {
            total += a as u64 + b as u64;
            (a, b, n) = (0, 0, 0);
        }
    }
    total += a as u64 + b as u64;
    let mut words = blocks.remainder().chunks_exact(4);
    for w in &mut words {
        total += halves(le32(w)) as u64;
    }
    total += tail64(words.remainder());
    fold64(total).swap_bytes()
}

/// Paper 000's loop, storing each word it loads.
pub(super) fn copy_and_sum_unrolled32(dst: &mut [u8], src: &[u8]) -> u16 {
    let mut total: u64 = 0;
    let mut s = src.chunks_exact(64);
    let mut d = dst.chunks_exact_mut(64);
    let mut n = 0;
    let (mut a, mut b) = (0u32, 0u32);
    for (db, sb) in (&mut d).zip(&mut s) {
        for i in (0..64).step_by(8) {
            let w0 = le32(&sb[i..]);
            let w1 = le32(&sb[i + 4..]);
            db[i..i + 4].copy_from_slice(&w0.to_le_bytes());
            db[i + 4..i + 8].copy_from_slice(&w1.to_le_bytes());
            a += halves(w0);
            b += halves(w1);
        }
        n += 1;
        if n == UNROLLED32_BLOCKS_PER_FOLD {
            total += a as u64 + b as u64;
            (a, b, n) = (0, 0, 0);
        }
    }
    total += a as u64 + b as u64;
    let rest = s.remainder();
    d.into_remainder().copy_from_slice(rest);
    let mut words = rest.chunks_exact(4);
    for w in &mut words {
        total += halves(le32(w)) as u64;
    }
    total += tail64(words.remainder());
    fold64(total).swap_bytes()
}

// ---------------------------------------------------------------------------------------
// 64-bit words on four independent carry chains.

/// Adds a word to an accumulator, counting the carry out in a separate register, so each
/// chain is an `add` followed by an `adc $0` and the four chains overlap.
#[inline(always)]
fn add_carry(acc: &mut u64, carries: &mut u64, w: u64) {
    let (s, c) = acc.overflowing_add(w);
    *acc = s;
    *carries += c as u64;
}

#[inline(always)]
fn chains_total(acc: [u64; 4], carries: [u64; 4]) -> u128 {
    acc.iter().chain(carries.iter()).map(|&x| x as u128).sum()
}

/// 64-bit loads on four independent carry chains.
pub(super) fn sum_chains64(data: &[u8]) -> u16 {
    let mut acc = [0u64; 4];
    let mut carries = [0u64; 4];
    let mut blocks = data.chunks_exact(32);
    for blk in &mut blocks {
        add_carry(&mut acc[0], &mut carries[0], le64(&blk[0..]));
        add_carry(&mut acc[1], &mut carries[1], le64(&blk[8..]));
        add_carry(&mut acc[2], &mut carries[2], le64(&blk[16..]));
        add_carry(&mut acc[3], &mut carries[3], le64(&blk[24..]));
    }
    let mut words = blocks.remainder().chunks_exact(8);
    for (i, w) in (&mut words).enumerate() {
        add_carry(&mut acc[i], &mut carries[i], le64(w));
    }
    add_carry(&mut acc[3], &mut carries[3], tail64(words.remainder()));
    fold128(chains_total(acc, carries)).swap_bytes()
}

/// Four carry chains, storing each word they load.
pub(super) fn copy_and_sum_chains64(dst: &mut [u8], src: &[u8]) -> u16 {
    let mut acc = [0u64; 4];
    let mut carries = [0u64; 4];
    let mut s = src.chunks_exact(32);
    let mut d = dst.chunks_exact_mut(32);
    for (db, sb) in (&mut d).zip(&mut s) {
        for i in 0..4 {
            let w = le64(&sb[8 * i..]);
            db[8 * i..8 * i + 8].copy_from_slice(&w.to_le_bytes());
            add_carry(&mut acc[i], &mut carries[i], w);
        }
    }
    let rest = s.remainder();
    d.into_remainder().copy_from_slice(rest);
    let mut words = rest.chunks_exact(8);
    for (i, w) in (&mut words).enumerate() {
        add_carry(&mut acc[i], &mut carries[i], le64(w));
    }
    add_carry(&mut acc[3], &mut carries[3], tail64(words.remainder()));
    fold128(chains_total(acc, carries)).swap_bytes()
}

// ---------------------------------------------------------------------------------------
// Short data and headers.

/// Short data (under a few hundred bytes): 16-bit words into a 32-bit accumulator, which
/// cannot overflow before 65,537 words, so there are no carries to track and the compiler
/// widens the loop to SSE2 lanes of four words by itself.
#[inline]
pub(super) fn sum_short(data: &[u8]) -> u16 {
    debug_assert!(data.len() < 1 << 17, "sum_short is for short data");
    let mut words = data.chunks_exact(2);
    let t: u32 = (&mut words)
        .map(|w| u16::from_le_bytes([w[0], w[1]]) as u32)
        .sum();
    let odd = words.remainder().first().map_or(0, |&b| b as u64);
    fold64(t as u64 + odd).swap_bytes()
}

/// Short data copied and summed in one pass: 32-byte blocks of four 8-byte words, then
/// single words, each stored and added into a 128-bit total (an add and an
/// add-with-carry), then the zero-padded tail, copied with a 4-, a 2- and a 1-byte move
/// rather than a call to `memcpy`. For the lengths below the vector kernels' (a 64-byte
/// datagram's payload), where the four carry chains' set-up and reduction cost more than
/// the loop. The blocks are fixed-size arrays, so no word is bounds-checked.
#[inline]
pub(super) fn copy_and_sum_short(dst: &mut [u8], src: &[u8]) -> u16 {
    let mut t = 0u128;
    let mut s = src.chunks_exact(32);
    let mut d = dst.chunks_exact_mut(32);
    for (db, sb) in (&mut d).zip(&mut s) {
        let (Ok(db), Ok(sb)) = (<&mut [u8; 32]>::try_from(db), <&[u8; 32]>::try_from(sb)) else {
            unreachable!("chunks_exact gives whole blocks")
        };
        let w = [
            le64(&sb[0..]),
            le64(&sb[8..]),
            le64(&sb[16..]),
            le64(&sb[24..]),
        ];
        db[0..8].copy_from_slice(&w[0].to_le_bytes());
        db[8..16].copy_from_slice(&w[1].to_le_bytes());
        db[16..24].copy_from_slice(&w[2].to_le_bytes());
        db[24..32].copy_from_slice(&w[3].to_le_bytes());
        t += w[0] as u128;
        t += w[1] as u128;
        t += w[2] as u128;
        t += w[3] as u128;
    }
    let mut s = s.remainder().chunks_exact(8);
    let mut d = d.into_remainder().chunks_exact_mut(8);
    for (db, sb) in (&mut d).zip(&mut s) {
        let w = le64(sb);
        db.copy_from_slice(&w.to_le_bytes());
        t += w as u128;
    }
    let rest = s.remainder();
    let tail = d.into_remainder();
    let mut at = 0;
    if rest.len() & 4 != 0 {
        tail[..4].copy_from_slice(&rest[..4]);
        at = 4;
    }
    if rest.len() & 2 != 0 {
        tail[at..at + 2].copy_from_slice(&rest[at..at + 2]);
        at += 2;
    }
    if rest.len() & 1 != 0 {
        tail[at] = rest[at];
    }
    t += tail64(rest) as u128;
    fold128(t).swap_bytes()
}

/// The sum of a 20..=60-byte header whose length is a multiple of four (every IPv4 and
/// TCP header), with 32-bit loads into a 64-bit register: no carries to track and no
/// loop set-up. The plain 20-byte header is five loads and four adds (paper 002 §6.1).
#[inline]
pub(super) fn header_sum(h: &[u8]) -> u16 {
    if let Ok(h) = <&[u8; 20]>::try_from(h) {
        let t = le32(&h[0..]) as u64
            + le32(&h[4..]) as u64
            + le32(&h[8..]) as u64
            + le32(&h[12..]) as u64
            + le32(&h[16..]) as u64;
        return fold64(t).swap_bytes();
    }
    if (20..=60).contains(&h.len()) && h.len().is_multiple_of(4) {
        let t: u64 = h.chunks_exact(4).map(|w| le32(w) as u64).sum();
        return fold64(t).swap_bytes();
    }
    sum_short(h)
}

/// The total of `rest` as little-endian 64-bit words, the last one zero-padded: the tail of
/// a vector kernel, which always starts at an even offset.
#[inline]
pub(super) fn tail_total(rest: &[u8]) -> u128 {
    let mut words = rest.chunks_exact(8);
    let mut t: u128 = 0;
    for w in &mut words {
        t += le64(w) as u128;
    }
    t + tail64(words.remainder()) as u128
}
