//! The Internet checksum (RFC 1071) and everything the stack does with it.
//!
//! # Conventions
//!
//! A *sum* here is the 16-bit ones'-complement sum of a byte string read as big-endian
//! 16-bit words (RFC 1071 §1), folded to 16 bits but **not** complemented, returned as a
//! plain number. The checksum field of a header holds the complement of a sum
//! ([`finish`]); a received header verifies when the sum over it, checksum field included,
//! is `0xFFFF` ([`verifies`]).
//!
//! Kernels read little-endian words and swap the folded result once at the end: a byte
//! swap commutes with the ones'-complement sum (RFC 1071 §2(B)), and since 2^16, 2^32 and
//! 2^64 are all 1 modulo 0xFFFF, any word width works with a single fold at the end.
//!
//! Partial sums of pieces of one datagram combine with [`combine_at`]: a piece that starts
//! at an odd offset has its sum byte-swapped first (RFC 1071 §2(B) again). The memory
//! address of a piece never matters, only its offset within the datagram.
//!
//! # Kernels
//!
//! [`Kernel`] names the interchangeable implementations, from the RFC 1071 reference that
//! 1993 kernels ran to AVX-512; [`Kernel::best`] picks the fastest one the CPU supports at
//! run time. Each kernel also has a fused copy-and-sum loop ([`copy_and_sum_with`]),
//! Partridge and Pink's "combined copy and checksum" (paper 002 §7).

mod reference;
mod scalar;
#[cfg(test)]
mod tests;
#[cfg(target_arch = "x86_64")]
mod x86;

use std::fmt;
use std::sync::atomic::{AtomicU8, Ordering};

/// One implementation of the ones'-complement sum.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kernel {
    /// RFC 1071 §4.1 in Rust: one 16-bit word per add into a 32-bit accumulator, carries
    /// folded back as they build up. The 1993 baseline.
    Rfc1071,
    /// The scheme of paper 000 (Kay & Pasquale 1993, §4.1): 32-bit loads split into two
    /// halves by shift and mask, the loop unrolled sixteen times, two accumulators
    /// alternating so that a load never waits on the add before it.
    Unrolled32,
    /// 64-bit loads on four independent add-with-carry chains, so the carry dependency
    /// never serialises the loop (Linux 6.5's `csum_partial` uses two).
    Chains64,
    /// AVX2: 32-bit lanes widened to 64 bits and added without carries.
    Avx2,
    /// AVX-512: 64-bit lane adds, carries caught by an unsigned compare into a mask and
    /// counted by a masked add: three vector operations per 64 bytes.
    Avx512,
}

impl Kernel {
    /// Every kernel, slowest first.
    pub const ALL: [Kernel; 5] = [
        Kernel::Rfc1071,
        Kernel::Unrolled32,
        Kernel::Chains64,
        Kernel::Avx2,
        Kernel::Avx512,
    ];

    /// Short stable name, used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Rfc1071 => "rfc1071",
            Kernel::Unrolled32 => "unrolled32",
            Kernel::Chains64 => "chains64",
            Kernel::Avx2 => "avx2",
            Kernel::Avx512 => "avx512",
        }
    }

    /// The kernel called `name`, if there is one.
    pub fn from_name(name: &str) -> Option<Kernel> {
        Kernel::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Whether this CPU can run the kernel (detected once, then a load and a bit test).
    pub fn is_available(self) -> bool {
        static AVAILABLE: AtomicU8 = AtomicU8::new(0);
        let mut bits = AVAILABLE.load(Ordering::Relaxed);
        if bits == 0 {
            bits = 0x80;
            for (i, k) in Kernel::ALL.into_iter().enumerate() {
                if k.detect() {
                    bits |= 1 << i;
                }
            }
            AVAILABLE.store(bits, Ordering::Relaxed);
        }
        bits & (1 << self as u8) != 0
    }

    fn detect(self) -> bool {
        match self {
            Kernel::Rfc1071 | Kernel::Unrolled32 | Kernel::Chains64 => true,
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => std::arch::is_x86_feature_detected!("avx2"),
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 => {
                std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512bw")
            }
            #[cfg(not(target_arch = "x86_64"))]
            Kernel::Avx2 | Kernel::Avx512 => false,
        }
    }

    /// The kernels this CPU can run, slowest first.
    pub fn available() -> impl Iterator<Item = Kernel> {
        Kernel::ALL.into_iter().filter(|k| k.is_available())
    }

    /// The fastest kernel this CPU supports, detected once.
    pub fn best() -> Kernel {
        static BEST: AtomicU8 = AtomicU8::new(u8::MAX);
        let cached = BEST.load(Ordering::Relaxed);
        if let Some(&k) = Kernel::ALL.get(cached as usize) {
            return k;
        }
        let best = Kernel::available()
            .last()
            .expect("the portable kernels are always available");
        let index = Kernel::ALL.iter().position(|&k| k == best).unwrap_or(0);
        BEST.store(index as u8, Ordering::Relaxed);
        best
    }

    /// `self` if the CPU can run it, else the best kernel it can run. Lets a caller ask
    /// for a kernel by name without checking first.
    pub fn or_best(self) -> Kernel {
        if self.is_available() {
            self
        } else {
            Kernel::best()
        }
    }
}

impl fmt::Display for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Below this many bytes the vector kernels hand over to the short scalar path: the set-up
/// and horizontal reduction of a vector loop cost more than they save on a short header.
const VECTOR_MIN_LEN: usize = 128;

/// Below this many bytes the dispatcher prefers AVX2 to AVX-512: the AVX-512 loop works
/// in 256-byte blocks and its reduction is longer, which does not pay until a few blocks
/// (measured with `probestack lab checksum --sizes 128,256,384,512,768,1024`).
const AVX512_MIN_LEN: usize = 512;

/// The kernel the dispatcher uses for `len` bytes: the best one, except that mid-sized
/// inputs take AVX2 where AVX-512 would be the best.
#[inline]
fn kernel_for(len: usize) -> Kernel {
    let best = Kernel::best();
    if best == Kernel::Avx512 && len < AVX512_MIN_LEN && Kernel::Avx2.is_available() {
        Kernel::Avx2
    } else {
        best
    }
}

/// The ones'-complement sum of `data` with the best kernel for this CPU and this length.
#[inline]
pub fn sum(data: &[u8]) -> u16 {
    if data.len() < VECTOR_MIN_LEN {
        return scalar::sum_short(data);
    }
    sum_with(kernel_for(data.len()), data)
}

/// The ones'-complement sum of `data` with a chosen kernel.
///
/// A kernel the CPU lacks falls back to the best one it has ([`Kernel::or_best`]).
/// Short data for a vector kernel, which would hand it to the short scalar path, goes
/// there from here, in line (every kernel gives the same sum).
#[inline]
pub fn sum_with(kernel: Kernel, data: &[u8]) -> u16 {
    if data.len() < VECTOR_MIN_LEN && matches!(kernel, Kernel::Avx2 | Kernel::Avx512) {
        return scalar::sum_short(data);
    }
    sum_dispatch(kernel, data)
}

/// Data under [`VECTOR_MIN_LEN`] copied and summed for a vector kernel: AVX-512's masked
/// loads and stores when that is the kernel and the CPU has it (one or two of each, no
/// loop, no tail), else the scalar short path. The lengths must be equal.
///
/// A sum without the copy stays scalar: AVX-512 did not pay there (IP and TCP headers,
/// short payloads verified: no change in `udp_burst`, `udp_rr` or `tcp_rr`), where the copy
/// took `udp_burst`'s 64-byte datagrams on a frame queue from 104.9 to 99.1 ns
/// (docs/per-packet-cost.md).
#[inline]
fn copy_and_sum_short(kernel: Kernel, dst: &mut [u8], src: &[u8]) -> u16 {
    #[cfg(target_arch = "x86_64")]
    if kernel == Kernel::Avx512 && kernel.is_available() {
        // SAFETY: the CPU supports AVX-512F/BW, checked just above; the callers checked
        // that the lengths are equal and under VECTOR_MIN_LEN (128) bytes.
        return unsafe { x86::copy_and_sum_short_avx512(dst, src) };
    }
    let _ = kernel;
    scalar::copy_and_sum_short(dst, src)
}

/// [`sum_with`] past its in-line short case.
fn sum_dispatch(kernel: Kernel, data: &[u8]) -> u16 {
    match kernel {
        Kernel::Rfc1071 => reference::sum(data),
        Kernel::Unrolled32 => scalar::sum_unrolled32(data),
        Kernel::Chains64 => scalar::sum_chains64(data),
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx2 if data.len() >= VECTOR_MIN_LEN && kernel.is_available() => {
            // SAFETY: the CPU supports AVX2, checked just above.
            unsafe { x86::sum_avx2(data) }
        }
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx512 if data.len() >= VECTOR_MIN_LEN && kernel.is_available() => {
            // SAFETY: the CPU supports AVX-512F and AVX-512BW, checked just above.
            unsafe { x86::sum_avx512(data) }
        }
        Kernel::Avx2 | Kernel::Avx512 if kernel.is_available() => scalar::sum_short(data),
        Kernel::Avx2 | Kernel::Avx512 => sum_dispatch(Kernel::best(), data),
    }
}

/// Copies `src` into `dst` and returns the sum of the bytes copied, in one pass over the
/// data, with the best kernel for this CPU.
///
/// # Panics
///
/// If `dst` and `src` differ in length (a caller's bug, as with `copy_from_slice`).
#[inline]
pub fn copy_and_sum(dst: &mut [u8], src: &[u8]) -> u16 {
    if src.len() < VECTOR_MIN_LEN && dst.len() == src.len() {
        return copy_and_sum_short(Kernel::best(), dst, src);
    }
    copy_and_sum_with(kernel_for(src.len()), dst, src)
}

/// Copies `src` into `dst` and returns the sum of the bytes copied, in one pass, using the
/// fused loop of a chosen kernel (paper 002 §7: "combined copy and checksum").
///
/// Short data for a vector kernel, which would hand it to the short scalar path, goes
/// there from here, in line (every kernel gives the same sum): a 64-byte payload's copy
/// pays no dispatch.
///
/// # Panics
///
/// If `dst` and `src` differ in length.
#[inline]
pub fn copy_and_sum_with(kernel: Kernel, dst: &mut [u8], src: &[u8]) -> u16 {
    if src.len() < VECTOR_MIN_LEN
        && dst.len() == src.len()
        && matches!(kernel, Kernel::Avx2 | Kernel::Avx512)
    {
        return copy_and_sum_short(kernel, dst, src);
    }
    copy_and_sum_dispatch(kernel, dst, src)
}

/// [`copy_and_sum_with`] past its in-line short case.
fn copy_and_sum_dispatch(kernel: Kernel, dst: &mut [u8], src: &[u8]) -> u16 {
    assert_eq!(
        dst.len(),
        src.len(),
        "copy_and_sum: destination and source lengths differ"
    );
    match kernel {
        Kernel::Rfc1071 => reference::copy_and_sum(dst, src),
        Kernel::Unrolled32 => scalar::copy_and_sum_unrolled32(dst, src),
        Kernel::Chains64 => scalar::copy_and_sum_chains64(dst, src),
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx2 if src.len() >= VECTOR_MIN_LEN && kernel.is_available() => {
            // SAFETY: the CPU supports AVX2, checked just above; the lengths are equal.
            unsafe { x86::copy_and_sum_avx2(dst, src) }
        }
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx512 if src.len() >= VECTOR_MIN_LEN && kernel.is_available() => {
            // SAFETY: the CPU supports AVX-512F/BW, checked just above; the lengths are equal.
            unsafe { x86::copy_and_sum_avx512(dst, src) }
        }
        Kernel::Avx2 | Kernel::Avx512 if kernel.is_available() => {
            scalar::copy_and_sum_short(dst, src)
        }
        Kernel::Avx2 | Kernel::Avx512 => copy_and_sum_dispatch(Kernel::best(), dst, src),
    }
}

/// The sum of a header of 20 to 60 bytes, summed in line with 32-bit loads and no loop
/// set-up: the "in-line IP header checksum" of paper 002 §6.1. Any other length takes the
/// general routine.
#[inline]
pub fn header_sum(header: &[u8]) -> u16 {
    scalar::header_sum(header)
}

/// The checksum field value for an IPv4 header whose checksum field is zero (or for any
/// header whose sum is wanted complemented): the in-line 20-byte path when the header has
/// no options.
#[inline]
pub fn ipv4_header_checksum(header: &[u8]) -> u16 {
    finish(header_sum(header))
}

/// Ones'-complement addition of two sums.
#[inline]
pub const fn combine(a: u16, b: u16) -> u16 {
    let s = a as u32 + b as u32;
    ((s & 0xFFFF) + (s >> 16)) as u16
}

/// Adds the sum `b` of a piece that starts `offset` bytes into the datagram to the sum `a`
/// of what precedes it. A piece at an odd offset has its bytes in the other halves of the
/// 16-bit words, so its sum is byte-swapped first (RFC 1071 §2(B)).
#[inline]
pub const fn combine_at(a: u16, b: u16, offset: usize) -> u16 {
    let b = if offset & 1 == 1 { b.swap_bytes() } else { b };
    combine(a, b)
}

/// Removes the sum `b` from the sum `a` (ones'-complement subtraction).
#[inline]
pub const fn subtract(a: u16, b: u16) -> u16 {
    combine(a, !b)
}

/// The value for a checksum field: the complement of the sum.
#[inline]
pub const fn finish(sum: u16) -> u16 {
    !sum
}

/// Whether a sum taken over a header with its checksum field in place verifies.
#[inline]
pub const fn verifies(sum: u16) -> bool {
    sum == 0xFFFF
}

/// The UDP rule (RFC 768): a computed checksum of zero is sent as all ones, because a zero
/// field means "no checksum".
#[inline]
pub const fn udp_field(checksum: u16) -> u16 {
    if checksum == 0 {
        0xFFFF
    } else {
        checksum
    }
}

/// Folds a 64-bit accumulator of ones'-complement words into 16 bits (end-around carry).
#[inline]
pub const fn fold64(x: u64) -> u16 {
    let x = (x & 0xFFFF_FFFF) + (x >> 32); // at most 33 bits
    let x = (x & 0xFFFF_FFFF) + (x >> 32); // at most 32 bits
    let x = (x & 0xFFFF) + (x >> 16); // at most 17 bits
    let x = (x & 0xFFFF) + (x >> 16); // 16 bits
    x as u16
}

/// The sum of the IPv4 pseudo-header of a TCP or UDP segment (RFC 793 §3.1, RFC 768):
/// source and destination address, zero, protocol, and the transport length (header plus
/// data).
#[inline]
pub fn pseudo_header_v4(src: [u8; 4], dst: [u8; 4], protocol: u8, length: u16) -> u16 {
    let s = u32::from_be_bytes(src) as u64;
    let d = u32::from_be_bytes(dst) as u64;
    fold64(s + d + protocol as u64 + length as u64)
}

/// RFC 1624 equation 3: the new checksum field after one 16-bit word of the covered data
/// changes from `old` to `new`: HC' = ~(~HC + ~m + m').
#[inline]
pub const fn update16(checksum: u16, old: u16, new: u16) -> u16 {
    !combine(combine(!checksum, !old), new)
}

/// RFC 1624 equation 3 for a 32-bit field (an address or a sequence number).
#[inline]
pub const fn update32(checksum: u16, old: u32, new: u32) -> u16 {
    let c = update16(checksum, (old >> 16) as u16, (new >> 16) as u16);
    update16(c, old as u16, new as u16)
}

/// A running sum over the pieces of one datagram, fed in order. It tracks the offset so
/// that pieces of odd length need no care from the caller.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Accumulator {
    sum: u16,
    len: usize,
}

impl Accumulator {
    /// An empty sum.
    pub const fn new() -> Accumulator {
        Accumulator { sum: 0, len: 0 }
    }

    /// Starts from a sum that covers no bytes of the datagram (a pseudo-header sum).
    pub const fn with_seed(seed: u16) -> Accumulator {
        Accumulator { sum: seed, len: 0 }
    }

    /// Adds the next `data.len()` bytes of the datagram.
    #[inline]
    pub fn add(&mut self, data: &[u8]) {
        self.add_sum(sum(data), data.len());
    }

    /// Adds the next bytes with a chosen kernel. Nothing to add costs nothing: no call
    /// into the kernel's dispatch (a datagram read whole leaves an empty rest to add).
    #[inline]
    pub fn add_with(&mut self, kernel: Kernel, data: &[u8]) {
        if !data.is_empty() {
            self.add_sum(sum_with(kernel, data), data.len());
        }
    }

    /// Copies the next bytes from `src` into `dst` while adding them, in one pass.
    #[inline]
    pub fn copy_and_add(&mut self, dst: &mut [u8], src: &[u8]) {
        self.add_sum(copy_and_sum(dst, src), src.len());
    }

    /// [`copy_and_add`](Self::copy_and_add) with a chosen kernel; empty pieces (the
    /// second half of a ring that did not wrap) cost nothing.
    ///
    /// # Panics
    ///
    /// If `dst` and `src` differ in length.
    #[inline]
    pub fn copy_and_add_with(&mut self, kernel: Kernel, dst: &mut [u8], src: &[u8]) {
        if src.is_empty() && dst.is_empty() {
            return;
        }
        self.add_sum(copy_and_sum_with(kernel, dst, src), src.len());
    }

    /// Adds the sum of the next `len` bytes, computed elsewhere (a NIC's partial sum, or a
    /// piece summed while it was copied).
    #[inline]
    pub fn add_sum(&mut self, piece: u16, len: usize) {
        self.sum = combine_at(self.sum, piece, self.len);
        self.len += len;
    }

    /// Bytes added so far.
    pub const fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing has been added.
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The sum so far.
    pub const fn sum(&self) -> u16 {
        self.sum
    }

    /// The checksum field value for what was added: the complement of the sum.
    pub const fn checksum(&self) -> u16 {
        finish(self.sum)
    }
}
