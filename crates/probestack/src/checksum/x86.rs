//! AVX2 and AVX-512 kernels, chosen at run time by CPU feature detection.
//!
//! Each is a `#[target_feature]` function: callers check the feature first (see
//! [`super::Kernel::is_available`]) and call it in an `unsafe` block. The only other unsafe
//! operations are the unaligned vector loads and stores, each within the slice it reads or
//! writes.

use std::arch::x86_64::*;

use super::fold64;
use super::scalar::{fold128, tail_total};

/// Adds the lanes of the accumulators into one total. The vectors are added together
/// first: each lane holds a sum of 32-bit halves far below 2^62, so four of them cannot
/// overflow a lane.
#[target_feature(enable = "avx2")]
fn lanes256(vs: &[__m256i]) -> u128 {
    let v = vs
        .iter()
        .fold(_mm256_setzero_si256(), |a, &v| _mm256_add_epi64(a, v));
    let mut lanes = [0u64; 4];
    // SAFETY: `lanes` is 32 writable bytes; the store is unaligned.
    unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast(), v) };
    lanes.iter().map(|&x| x as u128).sum()
}

/// Adds the two 32-bit halves of each 64-bit lane of `v` into `acc`: an `and` and a shift,
/// no shuffles, so the loop is not bound to the one shuffle port. Each lane gains at most
/// 2^33 per step, so a 64-bit lane cannot overflow for any slice that fits in memory.
#[target_feature(enable = "avx2")]
fn add_halves256(acc: __m256i, v: __m256i) -> __m256i {
    let low = _mm256_set1_epi64x(0xFFFF_FFFF);
    let a = _mm256_add_epi64(acc, _mm256_and_si256(v, low));
    _mm256_add_epi64(a, _mm256_srli_epi64::<32>(v))
}

/// AVX2: 128 bytes per iteration on four accumulators.
#[target_feature(enable = "avx2")]
pub(super) fn sum_avx2(data: &[u8]) -> u16 {
    let mut acc = [_mm256_setzero_si256(); 4];
    let mut blocks = data.chunks_exact(128);
    for blk in &mut blocks {
        for (j, a) in acc.iter_mut().enumerate() {
            // SAFETY: `blk` holds 128 bytes, so bytes 32j..32j+32 are in bounds.
            let v = unsafe { _mm256_loadu_si256(blk.as_ptr().add(32 * j).cast()) };
            *a = add_halves256(*a, v);
        }
    }
    let mut vecs = blocks.remainder().chunks_exact(32);
    for v in &mut vecs {
        // SAFETY: `v` holds 32 bytes.
        let v = unsafe { _mm256_loadu_si256(v.as_ptr().cast()) };
        acc[0] = add_halves256(acc[0], v);
    }
    fold128(lanes256(&acc) + tail_total(vecs.remainder())).swap_bytes()
}

/// AVX2 fused copy and sum: each vector loaded is stored to `dst` and added.
#[target_feature(enable = "avx2")]
pub(super) fn copy_and_sum_avx2(dst: &mut [u8], src: &[u8]) -> u16 {
    let mut acc = [_mm256_setzero_si256(); 2];
    let mut s = src.chunks_exact(64);
    let mut d = dst.chunks_exact_mut(64);
    for (db, sb) in (&mut d).zip(&mut s) {
        for (j, a) in acc.iter_mut().enumerate() {
            // SAFETY: both blocks hold 64 bytes, so bytes 32j..32j+32 are in bounds.
            let v = unsafe { _mm256_loadu_si256(sb.as_ptr().add(32 * j).cast()) };
            unsafe { _mm256_storeu_si256(db.as_mut_ptr().add(32 * j).cast(), v) };
            *a = add_halves256(*a, v);
        }
    }
    let rest = s.remainder();
    d.into_remainder().copy_from_slice(rest);
    fold128(lanes256(&acc) + tail_total(rest)).swap_bytes()
}

/// Reduces accumulator/carry-count pairs to one total: the accumulators are added into
/// the first with the same carry-catching step the loop uses, the counts (small numbers)
/// are added plainly, and only then are the eight lanes summed as scalars.
#[target_feature(enable = "avx512f")]
fn total512(acc: &[__m512i], carries: &[__m512i]) -> u128 {
    let mut a = acc[0];
    let mut c = carries
        .iter()
        .fold(_mm512_setzero_si512(), |s, &v| _mm512_add_epi64(s, v));
    for &v in &acc[1..] {
        add_carry512(&mut a, &mut c, v);
    }
    let mut lanes = [0u64; 8];
    // SAFETY: `lanes` is 64 writable bytes; the store is unaligned.
    unsafe { _mm512_storeu_si512(lanes.as_mut_ptr().cast(), a) };
    let counts = _mm512_reduce_add_epi64(c) as u64;
    lanes.iter().map(|&x| x as u128).sum::<u128>() + counts as u128
}

/// One step of the three-operation scheme: add the words, find the lanes that carried
/// (the new value is below the word added), count those carries. A carry out of a 64-bit
/// lane is worth 1 modulo 0xFFFF, so the count joins the total at the end.
#[target_feature(enable = "avx512f")]
fn add_carry512(acc: &mut __m512i, carries: &mut __m512i, v: __m512i) {
    *acc = _mm512_add_epi64(*acc, v);
    let carried = _mm512_cmplt_epu64_mask(*acc, v);
    *carries = _mm512_mask_add_epi64(*carries, carried, *carries, _mm512_set1_epi64(1));
}

/// The mask that selects the first `n` (<= 64) bytes of a vector: all of it at 64.
fn byte_mask(n: usize) -> __mmask64 {
    debug_assert!(n <= 64);
    u64::MAX.checked_shr(64 - n as u32).unwrap_or(0)
}

/// Adds the two 32-bit halves of each 64-bit lane of `v` into `acc`, as the AVX2 loop
/// does: each lane gains under 2^33 per call.
#[target_feature(enable = "avx512f")]
fn add_halves512(acc: __m512i, v: __m512i) -> __m512i {
    let low = _mm512_set1_epi64(0xFFFF_FFFF);
    let a = _mm512_add_epi64(acc, _mm512_and_si512(v, low));
    _mm512_add_epi64(a, _mm512_srli_epi64::<32>(v))
}

/// Copies `src` (at most 64 bytes) to the front of `dst` (at least as long) with one
/// masked load and one masked store, and returns the vector: `src`'s bytes, zeros after.
/// Masked-off bytes are neither read, written, nor able to fault, so nothing around
/// either slice is touched.
#[target_feature(enable = "avx512f,avx512bw")]
fn copy_masked(dst: &mut [u8], src: &[u8]) -> __m512i {
    debug_assert!(src.len() <= 64 && dst.len() >= src.len());
    let m = byte_mask(src.len().min(dst.len()).min(64));
    // SAFETY: the mask selects the first min(len, 64) bytes, within both slices.
    unsafe {
        let v = _mm512_maskz_loadu_epi8(m, src.as_ptr().cast());
        _mm512_mask_storeu_epi8(dst.as_mut_ptr().cast(), m, v);
        v
    }
}

/// AVX-512 copy and sum for data under 128 bytes (a small datagram's payload, a request):
/// one or two masked copies ([`copy_masked`]), with no loop and no tail code, where the
/// scalar short path walks 32-byte blocks, then words, then a 4-, 2- and 1-byte tail.
/// Masked-off bytes load as zero (the zero padding an odd length needs).
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) fn copy_and_sum_short_avx512(dst: &mut [u8], src: &[u8]) -> u16 {
    debug_assert!(src.len() < 128 && dst.len() == src.len());
    let n = src.len().min(dst.len());
    let (s, rest) = src[..n].split_at(n.min(64));
    let (d, rest_out) = dst[..n].split_at_mut(s.len());
    let mut lanes = add_halves512(_mm512_setzero_si512(), copy_masked(d, s));
    if !rest.is_empty() {
        lanes = add_halves512(lanes, copy_masked(rest_out, rest));
    }
    // Each lane is under 2^34 (two vectors' halves), so the eight add up in a u64.
    fold64(_mm512_reduce_add_epi64(lanes) as u64).swap_bytes()
}

/// AVX-512: 256 bytes per iteration on four accumulator/carry pairs; the last partial
/// vector is a masked load, which reads nothing past the slice.
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) fn sum_avx512(data: &[u8]) -> u16 {
    let mut acc = [_mm512_setzero_si512(); 4];
    let mut carries = [_mm512_setzero_si512(); 4];
    let mut blocks = data.chunks_exact(256);
    for blk in &mut blocks {
        for j in 0..4 {
            // SAFETY: `blk` holds 256 bytes, so bytes 64j..64j+64 are in bounds.
            let v = unsafe { _mm512_loadu_si512(blk.as_ptr().add(64 * j).cast()) };
            add_carry512(&mut acc[j], &mut carries[j], v);
        }
    }
    let mut vecs = blocks.remainder().chunks_exact(64);
    for v in &mut vecs {
        // SAFETY: `v` holds 64 bytes.
        let v = unsafe { _mm512_loadu_si512(v.as_ptr().cast()) };
        add_carry512(&mut acc[0], &mut carries[0], v);
    }
    let rest = vecs.remainder();
    if !rest.is_empty() {
        // SAFETY: the mask selects only the `rest.len()` bytes of `rest`; masked-off
        // bytes are neither read nor able to fault.
        let v = unsafe { _mm512_maskz_loadu_epi8(byte_mask(rest.len()), rest.as_ptr().cast()) };
        add_carry512(&mut acc[1], &mut carries[1], v);
    }
    fold128(total512(&acc, &carries)).swap_bytes()
}

/// AVX-512 fused copy and sum: each vector loaded is stored and added, 256 bytes per
/// iteration on four accumulator pairs (as in the sum loop, so that several cache lines are
/// in flight at once); the tail is a masked load and a masked store.
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) fn copy_and_sum_avx512(dst: &mut [u8], src: &[u8]) -> u16 {
    let mut acc = [_mm512_setzero_si512(); 4];
    let mut carries = [_mm512_setzero_si512(); 4];
    let mut s = src.chunks_exact(256);
    let mut d = dst.chunks_exact_mut(256);
    for (db, sb) in (&mut d).zip(&mut s) {
        let mut v = [_mm512_setzero_si512(); 4];
        for (j, x) in v.iter_mut().enumerate() {
            // SAFETY: the source block holds 256 bytes, so bytes 64j..64j+64 are in bounds.
            *x = unsafe { _mm512_loadu_si512(sb.as_ptr().add(64 * j).cast()) };
        }
        for (j, x) in v.iter().enumerate() {
            // SAFETY: the destination block holds 256 bytes, so bytes 64j..64j+64 are in
            // bounds.
            unsafe { _mm512_storeu_si512(db.as_mut_ptr().add(64 * j).cast(), *x) };
            add_carry512(&mut acc[j], &mut carries[j], *x);
        }
    }
    let mut s = s.remainder().chunks_exact(64);
    let mut d = d.into_remainder().chunks_exact_mut(64);
    for (db, sb) in (&mut d).zip(&mut s) {
        // SAFETY: both chunks hold 64 bytes.
        let v = unsafe { _mm512_loadu_si512(sb.as_ptr().cast()) };
        unsafe { _mm512_storeu_si512(db.as_mut_ptr().cast(), v) };
        add_carry512(&mut acc[0], &mut carries[0], v);
    }
    // `rest` and `out` have the same length: the caller checked that the slices are
    // equal in length, and both were cut the same way.
    let (rest, out) = (s.remainder(), d.into_remainder());
    if !rest.is_empty() {
        add_carry512(&mut acc[1], &mut carries[1], copy_masked(out, rest));
    }
    fold128(total512(&acc, &carries)).swap_bytes()
}
