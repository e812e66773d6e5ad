//! What fusing the memory NIC's passes would buy: the CRC-32's folding loop alone, with the
//! RFC 1071 sum in it, and with a copy and the sum in it, beside the crate's own `crc32`,
//! `checksum::sum`, `checksum::copy_and_sum`, `Crc32::update_and_sum` (the CRC and the sum
//! in one read, which the memory NIC uses since the eighteenth session) and a plain copy,
//! in ns per pass over the same bytes (data in cache, the best of 5 rounds after one to
//! warm up).
//!
//! `cargo run --release -p probestack --example fused_passes -- [BYTES]` (default 65536)
//!
//! The three loop kernels here are the measurement's, not the stack's: each runs the main
//! loop of the crate's AVX-512 CRC-32 (four 512-bit accumulators, two carry-less
//! multiplies and a three-way XOR per 64 bytes, with the crate's 2,048-bit folding
//! constant), plus, in two of them, the sum's two 64-bit adds per 64 bytes and the copy's
//! store, and none of the final reduction (a fixed few dozen instructions per call). So
//! they time what bounds a pass, the loop, and their results are not CRCs. README, "lab
//! peers", the zero-copy paragraphs.

use std::hint::black_box;
use std::time::Instant;

use probestack::checksum;
use probestack::driver::crc32::{crc32, Crc32};

/// Best of `rounds` rounds of `reps` calls, in ns per call.
fn ns_per_pass(rounds: usize, reps: usize, mut f: impl FnMut() -> u64) -> f64 {
    let mut best = f64::INFINITY;
    for round in 0..=rounds {
        let t = Instant::now();
        let mut x = 0u64;
        for _ in 0..reps {
            x ^= f();
        }
        black_box(x);
        let ns = t.elapsed().as_nanos() as f64 / reps as f64;
        if round > 0 {
            best = best.min(ns);
        }
    }
    best
}

fn main() {
    let bytes: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(65536)
        .max(256);
    let src: Vec<u8> = (0..bytes).map(|i| (i * 7 + 3) as u8).collect();
    let mut dst = vec![0u8; bytes];
    let reps = ((1usize << 30) / bytes).max(1);
    let rounds = 5;
    let mut rows: Vec<(&str, f64)> = vec![
        (
            "crc32 (the crate's)",
            ns_per_pass(rounds, reps, || u64::from(crc32(black_box(&src)))),
        ),
        (
            "checksum::sum",
            ns_per_pass(rounds, reps, || u64::from(checksum::sum(black_box(&src)))),
        ),
        (
            "checksum::copy_and_sum",
            ns_per_pass(rounds, reps, || {
                u64::from(checksum::copy_and_sum(black_box(&mut dst), black_box(&src)))
            }),
        ),
        (
            "crc32 + sum, one pass (the crate's)",
            ns_per_pass(rounds, reps, || {
                let mut crc = Crc32::new();
                let sum = crc.update_and_sum(black_box(&src));
                u64::from(crc.finish()) ^ u64::from(sum)
            }),
        ),
        (
            "copy (memcpy)",
            ns_per_pass(rounds, reps, || {
                dst.copy_from_slice(black_box(&src));
                u64::from(black_box(&dst)[0])
            }),
        ),
    ];
    rows.extend(loops::measure(&src, &mut dst, rounds, reps));
    println!("{bytes} bytes, ns per pass (best of {rounds} rounds of {reps})");
    for (name, ns) in rows {
        println!("  {name:34} {ns:9.1}");
    }
}

#[cfg(target_arch = "x86_64")]
mod loops {
    use super::ns_per_pass;
    use std::arch::x86_64::{
        __m512i, _mm512_add_epi64, _mm512_and_si512, _mm512_clmulepi64_epi128, _mm512_loadu_si512,
        _mm512_reduce_add_epi64, _mm512_set1_epi64, _mm512_set_epi64, _mm512_setzero_si512,
        _mm512_srli_epi64, _mm512_storeu_si512, _mm512_ternarylogic_epi64, _mm512_xor_si512,
    };
    use std::hint::black_box;

    /// The crate's folding constant across 2,048 bits (`driver::crc32`, `FOLD_2048`), in
    /// each 128-bit lane.
    #[target_feature(enable = "avx512f")]
    fn k2048() -> __m512i {
        let (lo, hi) = (0x1_1542_778A_i64, 0x1_322D_1430_i64);
        _mm512_set_epi64(hi, lo, hi, lo, hi, lo, hi, lo)
    }

    /// One accumulator folded 256 bytes on and `next` XORed in, as the CRC's loop does.
    #[inline]
    #[target_feature(enable = "avx512f,vpclmulqdq")]
    fn fold(a: __m512i, next: __m512i, k: __m512i) -> __m512i {
        let lo = _mm512_clmulepi64_epi128(a, k, 0x00);
        let hi = _mm512_clmulepi64_epi128(a, k, 0x11);
        _mm512_ternarylogic_epi64(lo, hi, next, 0x96)
    }

    /// The 32-bit halves of `v` added into `acc`'s 64-bit lanes (no carry is lost for
    /// inputs under 2^32 vectors).
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn add_halves(acc: &mut __m512i, v: __m512i) {
        let low = _mm512_set1_epi64(0xFFFF_FFFF);
        *acc = _mm512_add_epi64(*acc, _mm512_and_si512(v, low));
        *acc = _mm512_add_epi64(*acc, _mm512_srli_epi64(v, 32));
    }

    /// The fold over `src`'s whole 256-byte blocks, summing them with `SUM` and copying
    /// them into `dst` with `COPY`; returns the accumulators folded together (not a CRC).
    #[target_feature(enable = "avx512f,vpclmulqdq")]
    fn fold_loop<const SUM: bool, const COPY: bool>(src: &[u8], dst: &mut [u8]) -> u64 {
        let k = k2048();
        let mut acc = [_mm512_setzero_si512(); 4];
        let mut sums = [_mm512_setzero_si512(); 4];
        let blocks = src.len().min(dst.len()) / 256;
        for b in 0..blocks {
            for (i, (a, s)) in acc.iter_mut().zip(sums.iter_mut()).enumerate() {
                let at = 256 * b + 64 * i;
                // SAFETY: `at + 64 <= blocks * 256 <= src.len()`, so the 64 bytes read are
                // in `src`; the load has no alignment requirement.
                let v = unsafe { _mm512_loadu_si512(src.as_ptr().add(at).cast()) };
                if COPY {
                    // SAFETY: as above for `dst`, which is at least as long.
                    unsafe { _mm512_storeu_si512(dst.as_mut_ptr().add(at).cast(), v) };
                }
                if SUM {
                    add_halves(s, v);
                }
                *a = if b == 0 { v } else { fold(*a, v, k) };
            }
        }
        let x = _mm512_xor_si512(
            _mm512_xor_si512(acc[0], acc[1]),
            _mm512_xor_si512(acc[2], acc[3]),
        );
        let y = _mm512_add_epi64(
            _mm512_add_epi64(sums[0], sums[1]),
            _mm512_add_epi64(sums[2], sums[3]),
        );
        (_mm512_reduce_add_epi64(x) ^ _mm512_reduce_add_epi64(y)) as u64
    }

    pub fn measure(
        src: &[u8],
        dst: &mut [u8],
        rounds: usize,
        reps: usize,
    ) -> Vec<(&'static str, f64)> {
        if !(is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("vpclmulqdq")) {
            println!("fused_passes: no AVX-512 VPCLMULQDQ here, so no loop kernels measured");
            return Vec::new();
        }
        // SAFETY (each call below): the CPU has AVX-512F and VPCLMULQDQ, checked above.
        vec![
            (
                "fold loop (the CRC's)",
                ns_per_pass(rounds, reps, || unsafe {
                    fold_loop::<false, false>(black_box(src), dst)
                }),
            ),
            (
                "fold loop + sum",
                ns_per_pass(rounds, reps, || unsafe {
                    fold_loop::<true, false>(black_box(src), dst)
                }),
            ),
            (
                "fold loop + sum + copy",
                ns_per_pass(rounds, reps, || unsafe {
                    fold_loop::<true, true>(black_box(src), dst)
                }),
            ),
        ]
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod loops {
    pub fn measure(_: &[u8], _: &mut [u8], _: usize, _: usize) -> Vec<(&'static str, f64)> {
        println!("fused_passes: the loop kernels are x86-64 only");
        Vec::new()
    }
}
