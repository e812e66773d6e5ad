//! The Ethernet frame check sequence: CRC-32 of IEEE 802.3.
//!
//! The polynomial is 0x04C11DB7, processed bit-reflected (0xEDB88320), with the register
//! starting at all ones and complemented at the end. Ethernet sends the 32-bit result least
//! significant byte first, so the four FCS bytes after a frame are
//! `crc32(frame).to_le_bytes()`, and the CRC of a frame followed by its correct FCS is
//! always the constant [`RESIDUE`] (0x2144DF1C before the final complement, the "magic
//! number" a receiver's MAC compares against).
//!
//! [`crc32`] is table-driven, slicing-by-16 (Intel's slicing-by-8 generalised, as in
//! zlib and Linux's `crc32_le`): sixteen 256-entry tables, computed at compile time, let
//! one step fold sixteen bytes with sixteen independent lookups, where the classic
//! Sarwate loop takes one lookup per byte and waits on each. [`crc32_bitwise`] is the
//! definition, one bit at a time: the reference the fast routine is tested against.
//!
//! On x86-64 with PCLMULQDQ, data of 16 bytes and more is folded with carry-less
//! multiplication instead: short frames' blocks each folded straight onto the last by the
//! power of x their distance asks, so that the multiplies do not wait on each other
//! (`x86::update_clmul_short`),
//! four from 128 bytes (`x86::update_clmul`), and four lanes at a time with AVX-512's
//! VPCLMULQDQ from 256 (`x86::update_vpclmul`; below 2,048, with AVX-512, most lengths
//! take `x86::update_short_512`, which reads the data as if zeros preceded it and folds
//! every block onto the last, four to a 512-bit multiply, for a shorter chain of dependent
//! steps), the last 1 to
//! 15 bytes in one more fold rather than through the tables: Gopal et al., "Fast CRC
//! Computation for Generic Polynomials Using PCLMULQDQ Instruction" (Intel, 2009), the
//! method Linux's `crc32-pclmul` and zlib-ng use; several times faster than slicing on a
//! 1500-byte frame, and about 100 instructions for a 106-byte one (`examples/crc_speed.rs`
//! times them).
//! The short routine's independent multiplies are for latency, which is what a frame's
//! CRC in the stack's path waits on: `examples/udp_burst` went from ~272 to ~265 ns per
//! datagram with them, while `crc_speed`, whose frames overlap one another, times a
//! 106-byte frame a little slower (13.2 → 14.7 ns) for the extra key loads.
//!
//! On the memory link a CRC is the NIC's work, not the host's: callers charge it to
//! [`crate::probe::Ledger::device_work`]. Its speed still matters, for wall-clock
//! throughput: a real NIC computes the FCS in hardware, at no cost to the host's time.

use crate::checksum;

/// The reflected IEEE 802.3 polynomial.
pub const POLY: u32 = 0xEDB8_8320;

/// Bytes of the frame check sequence.
pub const FCS_LEN: usize = 4;

/// The CRC (as [`crc32`] returns it, complemented) of any frame followed by its correct
/// FCS.
pub const RESIDUE: u32 = 0x2144_DF1C;

const fn make_tables() -> [[u32; 256]; 16] {
    let mut t = [[0u32; 256]; 16];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { (c >> 1) ^ POLY } else { c >> 1 };
            k += 1;
        }
        t[0][i] = c;
        i += 1;
    }
    // t[s][i] is the CRC register after byte i followed by s zero bytes.
    let mut s = 1;
    while s < 16 {
        let mut i = 0;
        while i < 256 {
            let prev = t[s - 1][i];
            t[s][i] = (prev >> 8) ^ t[0][(prev & 0xFF) as usize];
            i += 1;
        }
        s += 1;
    }
    t
}

static TABLES: [[u32; 256]; 16] = make_tables();

/// A CRC-32 over data given in pieces (a frame in a chain of buffers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Crc32 {
    /// The register, not yet complemented.
    state: u32,
}

impl Default for Crc32 {
    fn default() -> Self {
        Crc32::new()
    }
}

impl Crc32 {
    pub const fn new() -> Crc32 {
        Crc32 { state: !0 }
    }

    /// Feeds `data`.
    #[inline]
    pub fn update(&mut self, data: &[u8]) {
        self.state = update(self.state, data);
    }

    /// The CRC of everything fed so far.
    #[inline]
    pub const fn finish(&self) -> u32 {
        !self.state
    }

    /// Feeds `data` and returns its RFC 1071 sum, as `checksum::sum` gives it: one read
    /// of the bytes for both where the CPU has AVX-512's VPCLMULQDQ and the data is long
    /// enough for that loop (`x86::update_vpclmul_summing`), else the two passes one
    /// after the other. A NIC that completes a checksum and computes the FCS over the
    /// same data does both as it reads it once (the memory NIC's by-reference send,
    /// `memlink.rs`); the checksum field, which the FCS covers too, is then set right
    /// with [`CrcPatch`].
    pub fn update_and_sum(&mut self, data: &[u8]) -> u16 {
        #[cfg(target_arch = "x86_64")]
        if data.len() >= x86::MIN_LEN_512 && x86::level() == x86::Level::Vpclmul {
            // SAFETY: `level` checked the CPU's features; the length is enough.
            let (state, head, summed) =
                unsafe { x86::update_vpclmul_summing::<true>(self.state, data) };
            self.state = state;
            // The vectors summed little-endian words; what they left starts at a multiple
            // of 64 bytes, an even offset, so its sum adds as it is.
            return checksum::combine(head.swap_bytes(), checksum::sum(&data[summed..]));
        }
        self.update(data);
        checksum::sum(data)
    }
}

/// x^(2^k) mod P for k = 0 to 63, bit-reflected as the register holds a remainder (bit
/// 31 is x^0, bit 0 is x^31).
static X_POW2: [u32; 64] = {
    let mut t = [0u32; 64];
    t[0] = 0x4000_0000;
    let mut k = 1;
    while k < 64 {
        t[k] = mul_mod_p_bits(t[k - 1], t[k - 1]);
        k += 1;
    }
    t
};

/// a·b mod P, both bit-reflected: for each power x^i in `a`, b·x^i added in, b·x being a
/// shift towards bit 0 and P's remainder in place of the x^32 that falls off.
const fn mul_mod_p_bits(a: u32, mut b: u32) -> u32 {
    let mut p = 0;
    let mut i = 0;
    while i < 32 {
        if a & (0x8000_0000 >> i) != 0 {
            p ^= b;
        }
        b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
        i += 1;
    }
    p
}

/// a·b mod P, both bit-reflected: one carry-less multiply where the CPU has it (the
/// product's high-degree half reduced by four table lookups, which is what feeding a
/// register four zero bytes does), else [`mul_mod_p_bits`].
fn mul_mod_p(a: u32, b: u32) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if x86::level() != x86::Level::Table {
        // SAFETY: `level` checked that the CPU has PCLMULQDQ.
        let c = unsafe { x86::clmul32(a, b) } << 1;
        // Bit m of `c` is x^(63 − m): its low half is a remainder's worth of x^32 to x^63,
        // that is L·x^32 with L read as a register; its high half is x^0 to x^31 as is.
        let (lo, hi) = (c as u32, (c >> 32) as u32);
        let t = &TABLES;
        return hi
            ^ t[3][(lo & 0xFF) as usize]
            ^ t[2][((lo >> 8) & 0xFF) as usize]
            ^ t[1][((lo >> 16) & 0xFF) as usize]
            ^ t[0][(lo >> 24) as usize];
    }
    mul_mod_p_bits(a, b)
}

/// Sets a CRC-32 right after bytes it covers have changed, without reading the message
/// again: the CRC is linear, so XORing D into bytes that `n` more bytes follow changes it
/// by the CRC (from a zero register) of D followed by `n` zero bytes, which is D's
/// times x^(8n) mod P. That factor is kept for the last `n` asked (the segments of one
/// TSO super-frame all have the same length behind their checksum field), so a patch
/// costs a table lookup per changed byte and one multiplication.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CrcPatch {
    trailing: usize,
    factor: u32,
}

impl Default for CrcPatch {
    fn default() -> Self {
        CrcPatch::new()
    }
}

impl CrcPatch {
    /// A patch with no factor computed yet.
    pub const fn new() -> CrcPatch {
        // x^0: nothing follows.
        CrcPatch {
            trailing: 0,
            factor: 0x8000_0000,
        }
    }

    /// The CRC-32 (as [`crc32`] gives it) of a message whose CRC was `crc`, after `xor`
    /// is XORed into bytes of it that `trailing` more bytes follow.
    pub fn after_xor(&mut self, crc: u32, xor: &[u8], trailing: usize) -> u32 {
        if trailing != self.trailing {
            let mut f = 0x8000_0000;
            let mut e = 8 * trailing as u64;
            let mut k = 0;
            while e != 0 {
                if e & 1 != 0 {
                    f = mul_mod_p(f, X_POW2[k]);
                }
                e >>= 1;
                k += 1;
            }
            *self = CrcPatch {
                trailing,
                factor: f,
            };
        }
        let t = &TABLES[0];
        let d = xor.iter().fold(0u32, |r, &b| {
            (r >> 8) ^ t[((r ^ u32::from(b)) & 0xFF) as usize]
        });
        crc ^ mul_mod_p(d, self.factor)
    }
}

/// The CRC-32 of `data`, slicing-by-16.
#[inline]
pub fn crc32(data: &[u8]) -> u32 {
    !update(!0, data)
}

/// Feeds `data` to the register `crc` (not complemented) with the fastest routine this
/// machine has.
#[inline]
fn update(crc: u32, data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if data.len() >= x86::MIN_LEN {
        match x86::level() {
            x86::Level::Vpclmul if x86::takes_short_512(data.len()) => {
                // SAFETY: `level` checked the CPU's features; the length is one it takes.
                return unsafe { x86::update_short_512(crc, data) };
            }
            x86::Level::Vpclmul if data.len() >= x86::MIN_LEN_512 => {
                // SAFETY: `level` checked the CPU's features; the length is enough.
                return unsafe { x86::update_vpclmul(crc, data) };
            }
            x86::Level::Vpclmul | x86::Level::Pclmul if data.len() >= x86::MIN_LEN_4 => {
                // SAFETY: `level` checked the CPU's features; the length is enough.
                return unsafe { x86::update_clmul(crc, data) };
            }
            x86::Level::Vpclmul | x86::Level::Pclmul => {
                // SAFETY: `level` checked the CPU's features; the length is enough.
                return unsafe { x86::update_clmul_short(crc, data) };
            }
            x86::Level::Table => {}
        }
    }
    update_slice16(crc, data)
}

/// The slicing-by-16 CRC-32 of `data`, whatever the CPU: for comparison and tests.
pub fn crc32_slice16(data: &[u8]) -> u32 {
    !update_slice16(!0, data)
}

/// The CRC-32 of `data` one bit at a time: the definition, for tests.
pub fn crc32_bitwise(data: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in data {
        c ^= b as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 { (c >> 1) ^ POLY } else { c >> 1 };
        }
    }
    !c
}

/// The CRC-32 of `data` a byte at a time with one table (Sarwate's loop), for comparison.
pub fn crc32_bytewise(data: &[u8]) -> u32 {
    let t = &TABLES[0];
    let mut c = !0u32;
    for &b in data {
        c = (c >> 8) ^ t[((c ^ b as u32) & 0xFF) as usize];
    }
    !c
}

fn update_slice16(mut crc: u32, data: &[u8]) -> u32 {
    let t = &TABLES;
    let mut chunks = data.chunks_exact(16);
    for c in &mut chunks {
        let a = u32::from_le_bytes([c[0], c[1], c[2], c[3]]) ^ crc;
        crc = t[15][(a & 0xFF) as usize]
            ^ t[14][((a >> 8) & 0xFF) as usize]
            ^ t[13][((a >> 16) & 0xFF) as usize]
            ^ t[12][(a >> 24) as usize]
            ^ t[11][c[4] as usize]
            ^ t[10][c[5] as usize]
            ^ t[9][c[6] as usize]
            ^ t[8][c[7] as usize]
            ^ t[7][c[8] as usize]
            ^ t[6][c[9] as usize]
            ^ t[5][c[10] as usize]
            ^ t[4][c[11] as usize]
            ^ t[3][c[12] as usize]
            ^ t[2][c[13] as usize]
            ^ t[1][c[14] as usize]
            ^ t[0][c[15] as usize];
    }
    // The rest in steps of 8 and 4 with the same tables (table k is a byte followed by k
    // zero bytes), then a byte at a time: at most 3 dependent lookups instead of 15.
    let mut rest = chunks.remainder();
    if let Some((c, r)) = rest.split_first_chunk::<8>() {
        let a = u32::from_le_bytes([c[0], c[1], c[2], c[3]]) ^ crc;
        crc = t[7][(a & 0xFF) as usize]
            ^ t[6][((a >> 8) & 0xFF) as usize]
            ^ t[5][((a >> 16) & 0xFF) as usize]
            ^ t[4][(a >> 24) as usize]
            ^ t[3][c[4] as usize]
            ^ t[2][c[5] as usize]
            ^ t[1][c[6] as usize]
            ^ t[0][c[7] as usize];
        rest = r;
    }
    if let Some((c, r)) = rest.split_first_chunk::<4>() {
        let a = u32::from_le_bytes(*c) ^ crc;
        crc = t[3][(a & 0xFF) as usize]
            ^ t[2][((a >> 8) & 0xFF) as usize]
            ^ t[1][((a >> 16) & 0xFF) as usize]
            ^ t[0][(a >> 24) as usize];
        rest = r;
    }
    for &b in rest {
        crc = (crc >> 8) ^ t[0][((crc ^ b as u32) & 0xFF) as usize];
    }
    crc
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    //! CRC-32 by folding with carry-less multiplication (Gopal et al. 2009, §4 for the
    //! folding and §5's Barrett reduction), in the bit-reflected form Ethernet uses.
    //!
    //! The data is a polynomial over GF(2). Folding replaces a 128-bit block A followed
    //! by `d` more bits with A·x^d mod P, which has the same remainder; split A into
    //! halves and that is two 64×64 carry-less products by precomputed constants (powers
    //! of x modulo P, pre-shifted for the reflected domain) XORed into the block `d` bits
    //! on. Then the last 128 bits are reduced to 64, to 32, and Barrett's reduction gives
    //! the remainder.
    //!
    //! Four routines share that end ([`reduce`], after [`finish`]'s tail), by length:
    //!
    //! - [`update_clmul_short`] (16 bytes up): every block folded straight onto the last
    //!   whole block, each by the power of x its own distance asks ([`FOLD_BLOCKS`]), so
    //!   the multiplies are independent and run side by side: a 106-byte frame's six
    //!   blocks cost one multiply's latency, not six in a chain.
    //! - [`update_clmul`] (128 bytes up): four accumulators 64 bytes apart keep four
    //!   multiplies in flight, then are folded into one.
    //! - [`update_vpclmul`] (256 bytes up, with AVX-512): the same, four lanes at a time.
    //! - [`update_short_512`] (16 to 2,047 bytes with AVX-512, but not 1 to 3 past a whole
    //!   block): the data as if zeros preceded it to a whole number of blocks, so no tail
    //!   fold at the end, and every block folded onto the last four at a time.
    //!
    //! The last 1 to 15 bytes are not fed through a table byte by byte: [`fold_tail`] loads
    //! the last 16 bytes of the data (overlapping bytes already folded) and shuffles the
    //! accumulator so that the whole tail takes one more fold, as Intel's paper and Linux's
    //! `crc-pclmul-template.S` do for a partial last block.

    use std::arch::x86_64::{
        __m128i, _mm_and_si128, _mm_blendv_epi8, _mm_clmulepi64_si128, _mm_cvtsi32_si128,
        _mm_extract_epi32, _mm_loadu_si128, _mm_set_epi32, _mm_set_epi64x, _mm_shuffle_epi8,
        _mm_srli_si128, _mm_xor_si128,
    };
    use std::sync::atomic::{AtomicU8, Ordering};

    /// The shortest input the folding routines take: one block.
    pub const MIN_LEN: usize = 16;

    /// The shortest input [`update_clmul`] takes. Its four accumulators need 64 bytes; up
    /// to twice that, merging them costs the folds they save (measured with
    /// `examples/crc_speed.rs`).
    pub const MIN_LEN_4: usize = 128;

    // The constants for the reflected polynomial 0x04C11DB7 (from the paper's method;
    // the same values appear in Linux's arch/x86/crypto/crc32-pclmul_asm.S):
    /// x^(4·128+32) mod P and x^(4·128−32) mod P: fold across 512 bits.
    const FOLD_512: (i64, i64) = (0x1_5444_2BD4, 0x1_C6E4_1596);
    /// x^(128+32) mod P and x^(128−32) mod P: fold across 128 bits.
    const FOLD_128: (i64, i64) = (0x1_7519_97D0, 0x0_CCAA_009E);
    /// x^64 mod P: from 64 bits to 32.
    const FOLD_64: i64 = 0x1_63CD_6124;

    /// x^k mod P in the folding constants' form: the 32-bit remainder bit-reflected and
    /// shifted up one (a 33-bit value), as the constants above are. Computed a bit at a
    /// time from P = 0x04C11DB7 (x^32 implied).
    const fn fold_key(k: u32) -> i64 {
        let mut r: u32 = 1;
        let mut i = 0;
        while i < k {
            let carry = r & 0x8000_0000 != 0;
            r <<= 1;
            if carry {
                r ^= 0x04C1_1DB7;
            }
            i += 1;
        }
        (r.reverse_bits() as i64) << 1
    }

    /// The blocks [`update_clmul_short`] folds at once: the most a block can be before the
    /// last whole one in a frame shorter than [`MIN_LEN_4`].
    const SHORT_BLOCKS: usize = MIN_LEN_4 / 16 - 1;

    /// x^(128·d+32) mod P and x^(128·d−32) mod P for d = 1 to [`SHORT_BLOCKS`] (at index
    /// d − 1): fold a block across the d blocks after it. Laid out as a register holds
    /// them (low half first), so that one load fetches a pair.
    static FOLD_BLOCKS: [[i64; 2]; SHORT_BLOCKS] = {
        let mut t = [[0; 2]; SHORT_BLOCKS];
        let mut d = 1;
        while d <= SHORT_BLOCKS {
            let bits = 128 * d as u32;
            t[d - 1] = [fold_key(bits + 32), fold_key(bits - 32)];
            d += 1;
        }
        t
    };

    // The computed keys agree with the published ones.
    const _: () = assert!(fold_key(160) == FOLD_128.0 && fold_key(96) == FOLD_128.1);
    const _: () = assert!(fold_key(544) == FOLD_512.0 && fold_key(480) == FOLD_512.1);
    const _: () = assert!(fold_key(64) == FOLD_64);
    /// P itself and μ = x^64 / P, for Barrett's reduction.
    const POLY_P: i64 = 0x1_DB71_0641;
    const MU: i64 = 0x1_F701_1641;

    /// What this CPU can do, from the best down.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Level {
        /// AVX-512F and VPCLMULQDQ, and everything `Pclmul` needs.
        Vpclmul,
        /// PCLMULQDQ, SSSE3 and SSE4.1.
        Pclmul,
        /// None of it: the table routine.
        Table,
    }

    /// [`Level`] as detected, cached: 0 before the first look.
    static LEVEL: AtomicU8 = AtomicU8::new(0);

    /// What this CPU can do: one load after the first call (a frame's CRC is short work;
    /// three feature tests per call showed in the profile).
    #[inline]
    pub fn level() -> Level {
        match LEVEL.load(Ordering::Relaxed) {
            1 => Level::Vpclmul,
            2 => Level::Pclmul,
            3 => Level::Table,
            _ => detect(),
        }
    }

    #[cold]
    fn detect() -> Level {
        use std::arch::is_x86_feature_detected as has;
        let level = if !(has!("pclmulqdq") && has!("ssse3") && has!("sse4.1")) {
            Level::Table
        } else if has!("avx512f") && has!("vpclmulqdq") {
            Level::Vpclmul
        } else {
            Level::Pclmul
        };
        let code = match level {
            Level::Vpclmul => 1,
            Level::Pclmul => 2,
            Level::Table => 3,
        };
        // Every thread computes the same value: a race stores it twice.
        LEVEL.store(code, Ordering::Relaxed);
        level
    }

    /// Whether the 128-bit routines can run here.
    #[cfg(test)]
    pub fn available() -> bool {
        level() != Level::Table
    }

    /// Loads the 16 bytes of `block`.
    #[inline]
    #[target_feature(enable = "sse2")]
    fn load(block: &[u8; 16]) -> __m128i {
        // SAFETY: `block` is 16 readable bytes; the load has no alignment requirement.
        unsafe { _mm_loadu_si128(block.as_ptr().cast()) }
    }

    /// `acc`'s low half times `keys`' low half, XOR its high half times `keys`' high half,
    /// XOR `next`: `acc` folded onto the block the keys' distance further on.
    #[inline]
    #[target_feature(enable = "pclmulqdq,sse2")]
    fn fold(acc: __m128i, next: __m128i, keys: __m128i) -> __m128i {
        let lo = _mm_clmulepi64_si128(acc, keys, 0x00);
        let hi = _mm_clmulepi64_si128(acc, keys, 0x11);
        _mm_xor_si128(_mm_xor_si128(lo, hi), next)
    }

    /// Feeds `data` (at least [`MIN_LEN`] bytes, made for fewer than [`MIN_LEN_4`]) to the
    /// register `crc` (not complemented): each whole block but the last is multiplied by
    /// the key of its distance from the last ([`FOLD_BLOCKS`]) and the products are XORed
    /// onto it. Longer data's leading blocks are first folded one at a time.
    ///
    /// # Safety
    ///
    /// The CPU must have PCLMULQDQ, SSSE3 and SSE4.1 ([`level`] not `Table`).
    #[target_feature(enable = "pclmulqdq,sse2,ssse3,sse4.1")]
    pub unsafe fn update_clmul_short(crc: u32, data: &[u8]) -> u32 {
        let Some((first, rest)) = data.as_chunks::<16>().0.split_first() else {
            // Not reached (callers pass at least a block), but stays correct.
            return super::update_slice16(crc, data);
        };
        // The register enters the first block: the message's first 32 bits, reflected.
        let mut acc = _mm_xor_si128(load(first), _mm_cvtsi32_si128(crc as i32));
        let (serial, rest) = rest.split_at(rest.len().saturating_sub(SHORT_BLOCKS));
        let k128 = _mm_set_epi64x(FOLD_128.1, FOLD_128.0);
        for b in serial {
            acc = fold(acc, load(b), k128);
        }
        // `acc` and then `rest`, at most SHORT_BLOCKS blocks: all onto the last at once.
        // The block d blocks before the last takes the keys at index d − 1: `acc` the
        // farthest, the middle blocks nearer and nearer.
        let key = |pair: &[i64; 2]| {
            // SAFETY: `pair` is 16 readable bytes; the load has no alignment requirement.
            unsafe { _mm_loadu_si128(pair.as_ptr().cast()) }
        };
        // (`rest` has at most SHORT_BLOCKS blocks, so there are keys for all of it.)
        let keys = FOLD_BLOCKS.get(..rest.len()).and_then(|k| k.split_last());
        let x = match (rest.split_last(), keys) {
            (Some((last, middle)), Some((farthest, nearer))) => {
                let mut x = fold(acc, load(last), key(farthest));
                for (b, k) in middle.iter().zip(nearer.iter().rev()) {
                    x = fold(load(b), x, key(k));
                }
                x
            }
            _ => acc,
        };
        finish(x, &[], data)
    }

    /// Feeds `data` (at least [`MIN_LEN_4`] bytes, 64 would do) to the register `crc` (not
    /// complemented), with four accumulators.
    ///
    /// # Safety
    ///
    /// The CPU must have PCLMULQDQ, SSSE3 and SSE4.1 ([`level`] not `Table`).
    #[target_feature(enable = "pclmulqdq,sse2,ssse3,sse4.1")]
    pub unsafe fn update_clmul(crc: u32, data: &[u8]) -> u32 {
        let blocks = data.as_chunks::<16>().0;
        let Some((first, rest)) = blocks.split_first_chunk::<4>() else {
            // Not reached (callers pass at least 64 bytes), but stays correct.
            return super::update_slice16(crc, data);
        };
        // Four accumulators over the first 64 bytes; the register enters the first.
        let mut acc = [
            _mm_xor_si128(load(&first[0]), _mm_cvtsi32_si128(crc as i32)),
            load(&first[1]),
            load(&first[2]),
            load(&first[3]),
        ];
        let k512 = _mm_set_epi64x(FOLD_512.1, FOLD_512.0);
        let k128 = _mm_set_epi64x(FOLD_128.1, FOLD_128.0);
        let (quads, singles) = rest.as_chunks::<4>();
        for quad in quads {
            for (a, b) in acc.iter_mut().zip(quad) {
                *a = fold(*a, load(b), k512);
            }
        }
        let mut x = fold(acc[0], acc[1], k128);
        x = fold(x, acc[2], k128);
        x = fold(x, acc[3], k128);
        finish(x, singles, data)
    }

    /// The pshufb masks of [`fold_tail`]: 16 bytes that select zero, the identity, and
    /// 16 more that select zero. 16 bytes from offset `16 − s` move each byte `s` places
    /// up (towards the end of the message); from offset `16 + r`, `r` places down, and
    /// their high bits mark the `r` places left empty at the top.
    static SHUFFLE: [u8; 48] = {
        let mut t = [0x80u8; 48];
        let mut i = 0;
        while i < 16 {
            t[16 + i] = i as u8;
            i += 1;
        }
        t
    };

    /// The 16 mask bytes of [`SHUFFLE`] from `at` (0 to 32).
    #[inline]
    #[target_feature(enable = "sse2")]
    fn shuffle_mask(at: usize) -> __m128i {
        let bytes: &[u8; 16] = SHUFFLE[at..][..16].try_into().unwrap_or(&[0x80; 16]);
        load(bytes)
    }

    /// The accumulator `x` followed by the last `r` bytes (1 to 15) of `data`, folded to
    /// one accumulator again. The 16 + `r` bytes of that message are `x`'s first `r`
    /// bytes, which cross a 128-bit boundary and are folded by 128 bits, and a block of
    /// `x`'s other `16 − r` bytes followed by the tail. `data` is at least 16 bytes, so
    /// its last 16 load at once: the bytes in front of the tail were already folded and
    /// the blend keeps `x`'s there.
    #[inline]
    #[target_feature(enable = "pclmulqdq,sse2,ssse3,sse4.1")]
    fn fold_tail(x: __m128i, data: &[u8], r: usize) -> __m128i {
        debug_assert!((1..16).contains(&r) && data.len() >= 16);
        let Some(last) = data.last_chunk::<16>() else {
            return x;
        };
        // x's first r bytes at the top of a block (the bytes before them zero, which
        // leading a message change nothing).
        let crossing = _mm_shuffle_epi8(x, shuffle_mask(r));
        // x's other bytes moved down by r, and the tail's r bytes in the places left.
        let down = shuffle_mask(16 + r);
        let block = _mm_blendv_epi8(_mm_shuffle_epi8(x, down), load(last), down);
        fold(crossing, block, _mm_set_epi64x(FOLD_128.1, FOLD_128.0))
    }

    /// Folds the 16-byte `blocks` into `x` one at a time, then the tail of `data` after
    /// them (`data.len() % 16` bytes), and reduces the result to the CRC register.
    #[target_feature(enable = "pclmulqdq,sse2,ssse3,sse4.1")]
    fn finish(mut x: __m128i, blocks: &[[u8; 16]], data: &[u8]) -> u32 {
        let k128 = _mm_set_epi64x(FOLD_128.1, FOLD_128.0);
        for b in blocks {
            x = fold(x, load(b), k128);
        }
        let r = data.len() % 16;
        if r != 0 {
            x = fold_tail(x, data, r);
        }
        reduce(x)
    }

    /// The register from the last 128 bits: to 64, to 32, then Barrett's reduction.
    #[inline]
    #[target_feature(enable = "pclmulqdq,sse2,sse4.1")]
    fn reduce(mut x: __m128i) -> u32 {
        let k128 = _mm_set_epi64x(FOLD_128.1, FOLD_128.0);
        // 128 bits to 64: the low half times x^(128−32) mod P onto the high half.
        let low32 = _mm_set_epi32(0, 0, 0, -1);
        x = _mm_xor_si128(_mm_clmulepi64_si128(x, k128, 0x10), _mm_srli_si128(x, 8));
        // 64 bits to 32.
        let k64 = _mm_set_epi64x(0, FOLD_64);
        x = _mm_xor_si128(
            _mm_clmulepi64_si128(_mm_and_si128(x, low32), k64, 0x00),
            _mm_srli_si128(x, 4),
        );
        // Barrett: the quotient estimate T1 = ⌊x·μ⌋, then x − T1·P leaves the remainder
        // in the second 32-bit lane.
        let pmu = _mm_set_epi64x(MU, POLY_P);
        let t1 = _mm_clmulepi64_si128(_mm_and_si128(x, low32), pmu, 0x10);
        let t2 = _mm_clmulepi64_si128(_mm_and_si128(t1, low32), pmu, 0x00);
        _mm_extract_epi32(_mm_xor_si128(x, t2), 1) as u32
    }

    /// The shortest input [`update_vpclmul`] takes: its four 64-byte accumulators.
    pub const MIN_LEN_512: usize = 256;

    /// The longest input [`update_short_512`] takes, and one more: a 1,514-byte frame and
    /// anything shorter. Longer data is throughput's, [`update_vpclmul`]'s loop.
    pub const MAX_LEN_SHORT_512: usize = 2048;

    /// The most blocks [`update_short_512`] folds onto the last: what data under
    /// [`MAX_LEN_SHORT_512`] can have, with zeros before it to a whole number of blocks.
    const SHORT_512_BLOCKS: usize = MAX_LEN_SHORT_512 / 16 - 1;

    /// The keys of [`FOLD_BLOCKS`]' kind (x^(128·d+32) mod P and x^(128·d−32) mod P) for
    /// distances d = [`SHORT_512_BLOCKS`] down to 1, farthest first, so that four blocks
    /// in a row (distances d to d − 3) find theirs in one 64-byte load. Computed in one
    /// pass over the powers of x, as [`fold_key`] computes one.
    static FOLD_BLOCKS_FAR_FIRST: [[i64; 2]; SHORT_512_BLOCKS] = {
        let mut t = [[0; 2]; SHORT_512_BLOCKS];
        let mut r: u32 = 1;
        let mut k: u32 = 0;
        let last = 128 * SHORT_512_BLOCKS as u32 + 32;
        while k <= last {
            // r is x^k mod P.
            let key = (r.reverse_bits() as i64) << 1;
            if k >= 96 && (k + 32).is_multiple_of(128) {
                t[SHORT_512_BLOCKS - (k + 32) as usize / 128][1] = key;
            }
            if k >= 160 && (k - 32).is_multiple_of(128) {
                t[SHORT_512_BLOCKS - (k - 32) as usize / 128][0] = key;
            }
            let carry = r & 0x8000_0000 != 0;
            r <<= 1;
            if carry {
                r ^= 0x04C1_1DB7;
            }
            k += 1;
        }
        t
    };

    /// Whether [`update_short_512`] takes `len` bytes: 16 to 2,047, and not one to three
    /// past a whole number of blocks (there the register would straddle the first two
    /// blocks; folding its second part in on its own, beside the data, made `tcp_rr`'s
    /// 130-byte frames slower in the stack's path, 580 → 605 ns a transaction, though
    /// faster alone, so those lengths keep the other routines).
    #[inline]
    pub fn takes_short_512(len: usize) -> bool {
        (MIN_LEN..MAX_LEN_SHORT_512).contains(&len) && !(1..4).contains(&(len % 16))
    }

    /// Feeds the lengths [`takes_short_512`] allows to the register `crc` along a shorter
    /// chain of dependent steps than the other routines': a frame's FCS in the stack's path
    /// waits on the CRC's latency more than on its throughput (`examples/nic_frames`, two
    /// CRC-32s a frame: 50.8 → 45.5 ns at 106 bytes against [`update_clmul_short`], 71.0 →
    /// 55.5 at 554 and 95.3 → 84.6 at 1,514 against [`update_vpclmul`], whose folding
    /// loop and final folds each wait on the one before).
    ///
    /// - The data is taken as if zeros preceded it up to a whole number of blocks (leading
    ///   zeros change nothing to a CRC once the register is in the message), so there is
    ///   no tail to fold at the end: the first block, with the register XORed into the
    ///   data's first four bytes, is shifted into place by one shuffle.
    /// - Every block but the last is folded straight onto the last by the key of its
    ///   distance, four blocks to a 512-bit multiply: one multiply's latency in all.
    ///
    /// # Safety
    ///
    /// As [`update_vpclmul`], and [`takes_short_512`] must allow `data`'s length.
    #[target_feature(enable = "avx512f,vpclmulqdq,pclmulqdq,sse2,ssse3,sse4.1")]
    pub unsafe fn update_short_512(crc: u32, data: &[u8]) -> u32 {
        use std::arch::x86_64::{
            __m512i, _mm512_clmulepi64_epi128, _mm512_extracti32x4_epi32, _mm512_loadu_si512,
            _mm512_setzero_si512, _mm512_ternarylogic_epi64,
        };
        let n = data.len();
        let pad = (16 - n % 16) % 16;
        let Some(head) = data.first_chunk::<16>() else {
            return super::update_slice16(crc, data);
        };
        if !takes_short_512(n) {
            // Not reached (callers check), but stays correct.
            return super::update_slice16(crc, data);
        }
        // The register enters the data's first 32 bits; the first block is the data's
        // first 16 − pad bytes, moved up by pad behind the zeros.
        let mut first = _mm_xor_si128(load(head), _mm_cvtsi32_si128(crc as i32));
        if pad != 0 {
            first = _mm_shuffle_epi8(first, shuffle_mask(16 - pad));
        }
        let (blocks, _) = data[16 - pad..].as_chunks::<16>();
        let Some((last, middle)) = blocks.split_last() else {
            return super::update_slice16(crc, data);
        };
        let key = |d: usize| {
            let pair = &FOLD_BLOCKS_FAR_FIRST[SHORT_512_BLOCKS - d];
            // SAFETY: `pair` is 16 readable bytes; the load has no alignment requirement.
            unsafe { _mm_loadu_si128(pair.as_ptr().cast()) }
        };
        let m = middle.len();
        // The first block is m + 1 blocks before the last, middle block i m − i.
        let mut x = fold(first, load(last), key(m + 1));
        let mut acc = _mm512_setzero_si512();
        let mut i = 0;
        while m - i >= 4 {
            let four = &middle[i..i + 4];
            // SAFETY: four 16-byte blocks, 64 contiguous readable bytes; no alignment
            // requirement.
            let v: __m512i = unsafe { _mm512_loadu_si512(four.as_ptr().cast()) };
            let keys = &FOLD_BLOCKS_FAR_FIRST[SHORT_512_BLOCKS - (m - i)..][..4];
            // SAFETY: as above, four 16-byte pairs.
            let k: __m512i = unsafe { _mm512_loadu_si512(keys.as_ptr().cast()) };
            let lo = _mm512_clmulepi64_epi128(v, k, 0x00);
            let hi = _mm512_clmulepi64_epi128(v, k, 0x11);
            acc = _mm512_ternarylogic_epi64(acc, lo, hi, 0x96);
            i += 4;
        }
        for (j, b) in middle[i..].iter().enumerate() {
            x = fold(load(b), x, key(m - i - j));
        }
        x = _mm_xor_si128(
            _mm_xor_si128(x, _mm512_extracti32x4_epi32(acc, 0)),
            _mm_xor_si128(
                _mm512_extracti32x4_epi32(acc, 1),
                _mm_xor_si128(
                    _mm512_extracti32x4_epi32(acc, 2),
                    _mm512_extracti32x4_epi32(acc, 3),
                ),
            ),
        );
        reduce(x)
    }

    /// x^(16·128+32) mod P and x^(16·128−32) mod P: fold across 2048 bits, four 512-bit
    /// accumulators apart (computed as the paper's constants are; the 512- and 128-bit
    /// ones above come out of the same formula).
    const FOLD_2048: (i64, i64) = (0x1_1542_778A, 0x1_322D_1430);

    /// The same folding four 128-bit lanes at a time with AVX-512's VPCLMULQDQ: four
    /// 512-bit accumulators take 256 bytes per step, are folded into one, its four lanes
    /// into one, and [`finish`] does the rest.
    ///
    /// # Safety
    ///
    /// The CPU must have AVX-512F, VPCLMULQDQ, PCLMULQDQ, SSSE3 and SSE4.1 ([`level`]
    /// `Vpclmul`), and `data` must hold at least [`MIN_LEN_512`] bytes.
    #[target_feature(enable = "avx512f,vpclmulqdq,pclmulqdq,sse2,ssse3,sse4.1")]
    pub unsafe fn update_vpclmul(crc: u32, data: &[u8]) -> u32 {
        // SAFETY: the caller's promise is this function's.
        unsafe { update_vpclmul_summing::<false>(crc, data).0 }
    }

    /// [`update_vpclmul`] that also sums the data (RFC 1071) as it loads it, when `SUM`:
    /// the register and the sum of the bytes its vectors loaded, each 64 bytes' 32-bit
    /// words added into 64-bit lanes (two adds beside the two multiplies a vector costs:
    /// the sum runs in the multiplier's shadow, `examples/fused_passes.rs`), folded to 16
    /// bits little-endian. Returns the register and how many leading bytes the sum
    /// covers (a multiple of 64; the caller sums the rest).
    ///
    /// # Safety
    ///
    /// As [`update_vpclmul`].
    #[target_feature(enable = "avx512f,vpclmulqdq,pclmulqdq,sse2,ssse3,sse4.1")]
    pub unsafe fn update_vpclmul_summing<const SUM: bool>(
        crc: u32,
        data: &[u8],
    ) -> (u32, u16, usize) {
        use std::arch::x86_64::{
            __m512i, _mm512_add_epi64, _mm512_and_si512, _mm512_broadcast_i32x4,
            _mm512_clmulepi64_epi128, _mm512_extracti32x4_epi32, _mm512_loadu_si512,
            _mm512_reduce_add_epi64, _mm512_set1_epi64, _mm512_setzero_si512, _mm512_srli_epi64,
            _mm512_ternarylogic_epi64, _mm512_xor_si512, _mm512_zextsi128_si512,
        };
        let load64 = |b: &[[u8; 16]]| -> __m512i {
            debug_assert!(b.len() >= 4);
            // SAFETY: `b` holds at least four 16-byte blocks, 64 contiguous readable bytes;
            // the load has no alignment requirement.
            unsafe { _mm512_loadu_si512(b.as_ptr().cast()) }
        };
        // a·k (low halves, high halves) XOR next, in each of the four lanes.
        let fold4 = |a: __m512i, next: __m512i, k: __m512i| -> __m512i {
            let lo = _mm512_clmulepi64_epi128(a, k, 0x00);
            let hi = _mm512_clmulepi64_epi128(a, k, 0x11);
            _mm512_ternarylogic_epi64(lo, hi, next, 0x96)
        };
        // The two 32-bit halves of each 64-bit lane of `v` added into `acc`'s lanes: no
        // carry is lost below 2^31 vectors.
        let low32 = _mm512_set1_epi64(0xFFFF_FFFF);
        let add = |acc: &mut __m512i, v: __m512i| {
            if SUM {
                *acc = _mm512_add_epi64(*acc, _mm512_and_si512(v, low32));
                *acc = _mm512_add_epi64(*acc, _mm512_srli_epi64(v, 32));
            }
        };
        let blocks = data.as_chunks::<16>().0;
        if blocks.len() < 16 {
            // Not reached (callers pass at least 256 bytes), but stays correct.
            return (super::update_slice16(crc, data), 0, 0);
        }
        let (first, mut rest) = blocks.split_at(16);
        let seed = _mm512_zextsi128_si512(_mm_cvtsi32_si128(crc as i32));
        let mut acc = [
            load64(&first[0..4]),
            load64(&first[4..8]),
            load64(&first[8..12]),
            load64(&first[12..16]),
        ];
        let mut sums = [_mm512_setzero_si512(); 4];
        for (s, a) in sums.iter_mut().zip(acc) {
            add(s, a);
        }
        acc[0] = _mm512_xor_si512(acc[0], seed);
        let k2048 = _mm512_broadcast_i32x4(_mm_set_epi64x(FOLD_2048.1, FOLD_2048.0));
        while rest.len() >= 16 {
            let (step, more) = rest.split_at(16);
            for (i, (a, s)) in acc.iter_mut().zip(sums.iter_mut()).enumerate() {
                let v = load64(&step[4 * i..4 * i + 4]);
                add(s, v);
                *a = fold4(*a, v, k2048);
            }
            rest = more;
        }
        let k512 = _mm512_broadcast_i32x4(_mm_set_epi64x(FOLD_512.1, FOLD_512.0));
        let mut x = fold4(acc[0], acc[1], k512);
        x = fold4(x, acc[2], k512);
        x = fold4(x, acc[3], k512);
        while rest.len() >= 4 {
            let (step, more) = rest.split_at(4);
            let v = load64(step);
            add(&mut sums[0], v);
            x = fold4(x, v, k512);
            rest = more;
        }
        let summed = data.len() - (data.len() % 16 + rest.len() * 16);
        let sum = if SUM {
            let all = _mm512_add_epi64(
                _mm512_add_epi64(sums[0], sums[1]),
                _mm512_add_epi64(sums[2], sums[3]),
            );
            crate::checksum::fold64(_mm512_reduce_add_epi64(all) as u64)
        } else {
            0
        };
        let k128 = _mm_set_epi64x(FOLD_128.1, FOLD_128.0);
        let mut y = fold(
            _mm512_extracti32x4_epi32(x, 0),
            _mm512_extracti32x4_epi32(x, 1),
            k128,
        );
        y = fold(y, _mm512_extracti32x4_epi32(x, 2), k128);
        y = fold(y, _mm512_extracti32x4_epi32(x, 3), k128);
        (finish(y, rest, data), sum, summed)
    }

    /// The carry-less product of `a` and `b`.
    ///
    /// # Safety
    ///
    /// The CPU must have PCLMULQDQ ([`level`] not `Table`).
    #[target_feature(enable = "pclmulqdq,sse2")]
    pub unsafe fn clmul32(a: u32, b: u32) -> u64 {
        use std::arch::x86_64::_mm_cvtsi128_si64;
        let p = _mm_clmulepi64_si128(
            _mm_cvtsi32_si128(a as i32),
            _mm_cvtsi32_si128(b as i32),
            0x00,
        );
        _mm_cvtsi128_si64(p) as u64
    }
}

/// The four FCS bytes for `frame`, in the order Ethernet sends them.
#[inline]
pub fn fcs(frame: &[u8]) -> [u8; FCS_LEN] {
    crc32(frame).to_le_bytes()
}

/// The FCS of a frame given as its window then its fragments (a scatter-gather frame).
pub fn fcs_parts<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> [u8; FCS_LEN] {
    let mut crc = Crc32::new();
    for p in parts {
        crc.update(p);
    }
    crc.finish().to_le_bytes()
}

/// Whether a scatter-gather frame is intact: its window ends in the FCS of the rest of
/// the window followed by `frags` (where the memory NIC puts it; see `memlink.rs`).
pub fn check_fcs_parts<'a>(window: &'a [u8], frags: impl IntoIterator<Item = &'a [u8]>) -> bool {
    match window.split_last_chunk::<FCS_LEN>() {
        Some((head, tail)) => *tail == fcs_parts(std::iter::once(head).chain(frags)),
        None => false,
    }
}

/// Whether `frame_with_fcs` (a frame followed by its four FCS bytes) is intact. Shorter
/// than an FCS is not.
#[inline]
pub fn check_fcs(frame_with_fcs: &[u8]) -> bool {
    match frame_with_fcs.split_last_chunk::<FCS_LEN>() {
        Some((frame, tail)) => u32::from_le_bytes(*tail) == crc32(frame),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    #[test]
    fn a_frame_in_pieces_has_the_fcs_of_its_bytes_and_a_flip_in_any_piece_fails_it() {
        let mut rng = Rng::new(11);
        let bytes: Vec<u8> = (0..9000).map(|_| rng.next_u32() as u8).collect();
        let (head, rest) = bytes.split_at(54);
        let (a, b) = rest.split_at(4000);
        assert_eq!(fcs_parts([head, a, b]), fcs(&bytes));
        let mut window = head.to_vec();
        window.extend_from_slice(&fcs_parts([head, a, b]));
        assert!(check_fcs_parts(&window, [a, b]));
        for piece in 0..3 {
            let mut parts = [window.clone(), a.to_vec(), b.to_vec()];
            let at = rng.below(parts[piece].len() as u64) as usize;
            parts[piece][at] ^= 1 << rng.below(8);
            let [w, x, y] = &parts;
            assert!(
                !check_fcs_parts(w, [&x[..], &y[..]]),
                "a flip in piece {piece}"
            );
        }
        assert!(!check_fcs_parts(&[1, 2, 3], []), "shorter than an FCS");
    }

    #[test]
    fn check_value_and_known_vectors() {
        // The catalogue's check value: CRC-32/ISO-HDLC of "123456789".
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32_bitwise(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32_bytewise(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
        assert_eq!(crc32(b"a"), 0xE8B7_BE43);
        assert_eq!(
            crc32(b"The quick brown fox jumps over the lazy dog"),
            0x414F_A339
        );
        assert_eq!(crc32(&[0u8; 32]), 0x190A_55AD);
        assert_eq!(crc32(&[0xFFu8; 32]), 0xFF6C_AB0B);
    }

    #[test]
    fn slicing_matches_the_bitwise_definition_at_every_length_and_offset() {
        let mut rng = Rng::new(0xC0C0);
        let mut buf = vec![0u8; 1600];
        rng.fill(&mut buf);
        // Every length a short frame can have, and every start within a 16-byte block
        // (frames start wherever a buffer's headroom leaves them).
        for start in 0..17 {
            for len in 0..=600 {
                let d = &buf[start..start + len];
                assert_eq!(crc32(d), crc32_bitwise(d), "start {start} len {len}");
            }
        }
        for len in [1499, 1500, 1514, 1518, 1583] {
            assert_eq!(crc32(&buf[..len]), crc32_bitwise(&buf[..len]));
            assert_eq!(crc32(&buf[..len]), crc32_bytewise(&buf[..len]));
        }
        let mut big = vec![0u8; 65_535 + 14];
        rng.fill(&mut big);
        assert_eq!(crc32(&big), crc32_bitwise(&big));
    }

    #[test]
    fn the_fastest_routine_matches_slicing_at_every_length_and_offset() {
        let mut rng = Rng::new(0xF01D);
        let mut buf = vec![0u8; 70_000];
        rng.fill(&mut buf);
        for start in 0..17 {
            for len in (0..=600).chain([1499, 1500, 1514, 1518, 9014, 9018, 65_549]) {
                let d = &buf[start..start + len];
                assert_eq!(crc32(d), crc32_slice16(d), "start {start} len {len}");
            }
        }
        // The 128-bit routines on their own, at lengths the others take on this CPU:
        // every tail length, either side of each routine's threshold.
        #[cfg(target_arch = "x86_64")]
        if x86::available() {
            for start in [0, 3, 15] {
                for len in (16..=300).chain([1514, 9018]) {
                    let d = &buf[start..start + len];
                    let want = crc32_slice16(d);
                    // SAFETY: `available` checked the CPU; `len` is at least `MIN_LEN`.
                    let c = !unsafe { x86::update_clmul_short(!0, d) };
                    assert_eq!(c, want, "short, start {start} len {len}");
                    if len >= 64 {
                        // SAFETY: as above; four blocks are enough for four accumulators.
                        let c = !unsafe { x86::update_clmul(!0, d) };
                        assert_eq!(c, want, "four lanes, start {start} len {len}");
                    }
                }
            }
        }
        // Every length the short 512-bit routine takes, and past it: each distance's keys.
        for len in 600..2100 {
            let d = &buf[len % 17..len % 17 + len];
            assert_eq!(crc32(d), crc32_slice16(d), "len {len}");
        }
        // Runs of ones and zeros, where a wrong constant shows at once.
        for fill in [0x00u8, 0xFF, 0x80, 0x01] {
            let d = vec![fill; 1000];
            assert_eq!(crc32(&d), crc32_bitwise(&d), "fill {fill:#x}");
        }
    }

    #[test]
    fn a_crc_fed_and_summed_in_one_pass_matches_the_two_passes_at_every_length_and_offset() {
        let mut rng = Rng::new(0x5117);
        let mut buf = vec![0u8; 70_000];
        rng.fill(&mut buf);
        for start in [0, 1, 2, 3, 17, 63] {
            for len in (0..=700).chain([1460, 4096, 8960, 9001, 16_384, 65_483, 65_536]) {
                let d = &buf[start..start + len];
                let mut c = Crc32::new();
                c.update(&buf[..5]);
                let sum = c.update_and_sum(d);
                let mut want = Crc32::new();
                want.update(&buf[..5]);
                want.update(d);
                assert_eq!(c, want, "crc, start {start} len {len}");
                assert_eq!(sum, checksum::sum(d), "sum, start {start} len {len}");
                assert_eq!(
                    sum,
                    checksum::sum_with(checksum::Kernel::Rfc1071, d),
                    "RFC 1071 reference, start {start} len {len}"
                );
            }
        }
        // Words that carry out of every lane, where a lost carry shows.
        for fill in [0xFFu8, 0x80, 0x00] {
            let d = vec![fill; 65_536];
            let mut c = Crc32::new();
            assert_eq!(c.update_and_sum(&d), checksum::sum(&d), "fill {fill:#x}");
            assert_eq!(c.finish(), crc32(&d));
        }
    }

    #[test]
    fn a_patched_crc_is_the_crc_of_the_changed_message() {
        let mut rng = Rng::new(0xFA7C);
        let mut patch = CrcPatch::new();
        for len in [2usize, 3, 16, 54, 1514, 9014, 65_549] {
            let mut msg = vec![0u8; len];
            rng.fill(&mut msg);
            for _ in 0..8 {
                let width = 1 + rng.below(4.min(len as u64)) as usize;
                let at = rng.below((len - width + 1) as u64) as usize;
                let mut xor = vec![0u8; width];
                rng.fill(&mut xor);
                let before = crc32(&msg);
                for (m, x) in msg[at..at + width].iter_mut().zip(&xor) {
                    *m ^= x;
                }
                let trailing = len - at - width;
                assert_eq!(
                    patch.after_xor(before, &xor, trailing),
                    crc32_bitwise(&msg),
                    "len {len} at {at} width {width}"
                );
            }
        }
        // The fast multiplication against the definition's.
        for _ in 0..1000 {
            let (a, b) = (rng.next_u32(), rng.next_u32());
            assert_eq!(mul_mod_p(a, b), mul_mod_p_bits(a, b));
        }
    }

    #[test]
    fn a_running_crc_goes_on_right_through_every_short_length() {
        // A register that is not all ones (a frame in pieces) entering data of every
        // length the short routines take, at every start within a block: where the
        // register lands in the first block, or straddles two, shows.
        let mut rng = Rng::new(0x5EED);
        let mut buf = vec![0u8; 400];
        rng.fill(&mut buf);
        for lead in [1usize, 5, 13] {
            for start in 0..17 {
                for len in 0..=300 {
                    let d = &buf[start + lead..start + lead + len];
                    let mut c = Crc32::new();
                    c.update(&buf[start..start + lead]);
                    c.update(d);
                    assert_eq!(
                        c.finish(),
                        crc32_slice16(&buf[start..start + lead + len]),
                        "lead {lead} start {start} len {len}"
                    );
                }
            }
        }
    }

    #[test]
    fn pieces_give_the_same_crc_as_the_whole() {
        let mut rng = Rng::new(5);
        let mut buf = vec![0u8; 700];
        rng.fill(&mut buf);
        for cut in [0, 1, 15, 16, 17, 333, 699, 700] {
            let mut c = Crc32::default();
            c.update(&buf[..cut]);
            c.update(&buf[cut..]);
            assert_eq!(c.finish(), crc32(&buf));
        }
    }

    #[test]
    fn fcs_is_sent_low_byte_first_and_leaves_the_residue() {
        assert_eq!(fcs(b"123456789"), [0x26, 0x39, 0xF4, 0xCB]);
        let mut rng = Rng::new(9);
        for len in [0usize, 1, 14, 60, 64, 1514] {
            let mut f = vec![0u8; len];
            rng.fill(&mut f);
            let sum = fcs(&f);
            f.extend_from_slice(&sum);
            assert!(check_fcs(&f));
            // The receiver's shortcut: the CRC over frame and FCS is a constant.
            assert_eq!(crc32(&f), RESIDUE);
            // Every single-bit error is caught, in the frame and in the FCS.
            for bit in 0..f.len() * 8 {
                f[bit / 8] ^= 1 << (bit % 8);
                assert!(!check_fcs(&f), "len {len} bit {bit}");
                f[bit / 8] ^= 1 << (bit % 8);
            }
        }
        assert!(!check_fcs(&[1, 2, 3]));
        assert!(!check_fcs(&[]));
    }

    #[test]
    fn every_two_bit_error_in_a_small_frame_is_caught() {
        let mut rng = Rng::new(10);
        let mut f = vec![0u8; 64];
        rng.fill(&mut f);
        let sum = fcs(&f);
        f.extend_from_slice(&sum);
        let bits = f.len() * 8;
        for i in 0..bits {
            for j in i + 1..bits {
                f[i / 8] ^= 1 << (i % 8);
                f[j / 8] ^= 1 << (j % 8);
                assert!(!check_fcs(&f), "bits {i} {j}");
                f[i / 8] ^= 1 << (i % 8);
                f[j / 8] ^= 1 << (j % 8);
            }
        }
    }
}
