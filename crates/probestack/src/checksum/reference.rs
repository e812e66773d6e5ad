//! The RFC 1071 reference: the loop of RFC 1071 §4.1 ("C" implementation), one big-endian
//! 16-bit word per add into a 32-bit accumulator. The 1993 baseline that paper 000 set out
//! to beat, and the oracle every other kernel is tested against.
//!
//! RFC 1071's loop folds only at the end, so its 32-bit accumulator would overflow after
//! 65,537 words (128 KiB); this one folds the carries back whenever the top bit is set, as
//! the BSD `in_cksum` did with its REDUCE step, so it is right for any length.

/// The ones'-complement sum of `data`, 16 bits at a time.
pub(super) fn sum(data: &[u8]) -> u16 {
    let mut acc: u32 = 0;
    let mut words = data.chunks_exact(2);
    for w in &mut words {
        acc += u16::from_be_bytes([w[0], w[1]]) as u32;
        if acc & 0x8000_0000 != 0 {
            acc = (acc & 0xFFFF) + (acc >> 16);
        }
    }
    // An odd last byte is the high-order byte of a word padded with zero (RFC 1071 §4.1).
    if let [last] = words.remainder() {
        acc += (*last as u32) << 8;
    }
    while acc >> 16 != 0 {
        acc = (acc & 0xFFFF) + (acc >> 16);
    }
    acc as u16
}

/// Copies and sums one 16-bit word at a time: the fused loop written as a 1993 C
/// programmer would have.
pub(super) fn copy_and_sum(dst: &mut [u8], src: &[u8]) -> u16 {
    let mut acc: u32 = 0;
    let mut s = src.chunks_exact(2);
    let mut d = dst.chunks_exact_mut(2);
    for (dw, sw) in (&mut d).zip(&mut s) {
        dw[0] = sw[0];
        dw[1] = sw[1];
        acc += u16::from_be_bytes([sw[0], sw[1]]) as u32;
        if acc & 0x8000_0000 != 0 {
            acc = (acc & 0xFFFF) + (acc >> 16);
        }
    }
    if let ([last], [out]) = (s.remainder(), d.into_remainder()) {
        *out = *last;
        acc += (*last as u32) << 8;
    }
    while acc >> 16 != 0 {
        acc = (acc & 0xFFFF) + (acc >> 16);
    }
    acc as u16
}
