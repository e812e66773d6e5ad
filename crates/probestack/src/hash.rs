//! The hash of the stack's lookup tables (the ARP cache, the UDP PCB table's hashed
//! lookup): a keyed multiply-and-fold over machine words.
//!
//! The standard library's default, SipHash-1-3, costs about 190 instructions for the
//! 4-byte key of an ARP lookup, once per datagram sent: more than the IP header's
//! checksum. The keys here are a few words (an address, a port, an address-port tuple), so
//! each word is mixed in with one 64x64→128-bit multiplication whose halves are folded
//! together, the construction of wyhash and foldhash. Each table takes its own random key
//! from the standard library's per-process randomness, so someone who sends us packets
//! (choosing ARP senders on our subnet or UDP source ports) cannot precompute keys that
//! collide; a table's size is bounded besides (the ARP cache's 1024 entries, the sockets
//! the application opens). It is not a MAC: nothing here is secret for long against an
//! attacker who can time lookups, which is the same bargain Linux's jhash with a boot-time
//! seed makes for its neighbour and socket tables.

use std::hash::{BuildHasher, Hasher};

/// Odd 64-bit constants with well-spread bits (the fractional parts of π and e).
const P0: u64 = 0x243F_6A88_85A3_08D3;
const P1: u64 = 0xB7E1_5162_8AED_2A6B;

/// One multiply-and-fold: the 128-bit product's halves XORed together, so every input bit
/// reaches the low bits a table indexes with and the high bits hashbrown's tags use.
#[inline(always)]
fn fold_mul(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    (p as u64) ^ ((p >> 64) as u64)
}

/// Builds [`TableHasher`]s with a key of its own.
#[derive(Clone, Copy, Debug)]
pub struct TableHash {
    key: u64,
}

impl TableHash {
    /// A fresh random key (from the standard library's per-process random keys, which it
    /// varies for each `RandomState`).
    pub fn new() -> TableHash {
        let key = std::collections::hash_map::RandomState::new().hash_one(P0);
        TableHash { key }
    }

    /// A fixed key: reproducible iteration orders in tests.
    pub const fn with_key(key: u64) -> TableHash {
        TableHash { key }
    }
}

impl Default for TableHash {
    fn default() -> Self {
        TableHash::new()
    }
}

impl BuildHasher for TableHash {
    type Hasher = TableHasher;

    #[inline]
    fn build_hasher(&self) -> TableHasher {
        TableHasher { state: self.key }
    }
}

/// The hasher [`TableHash`] builds.
#[derive(Clone, Copy, Debug)]
pub struct TableHasher {
    state: u64,
}

impl TableHasher {
    #[inline(always)]
    fn mix(&mut self, word: u64) {
        self.state = fold_mul(self.state ^ word, P1);
    }
}

impl Hasher for TableHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.mix(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            // The length tells "ab" from "ab\0".
            self.mix(u64::from_le_bytes(w) ^ ((rest.len() as u64) << 59));
        }
    }

    #[inline]
    fn write_u8(&mut self, n: u8) {
        self.mix(u64::from(n));
    }

    #[inline]
    fn write_u16(&mut self, n: u16) {
        self.mix(u64::from(n));
    }

    #[inline]
    fn write_u32(&mut self, n: u32) {
        self.mix(u64::from(n));
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.mix(n);
    }

    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.mix(n as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        fold_mul(self.state, P0)
    }
}

/// A `HashMap` hashed with [`TableHash`].
pub type TableMap<K, V> = std::collections::HashMap<K, V, TableHash>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Ipv4Address;
    use std::collections::HashSet;

    #[test]
    fn equal_keys_hash_equal_and_keys_differ_by_key() {
        let a = TableHash::with_key(1);
        let b = TableHash::with_key(2);
        let ip = Ipv4Address::new(198, 18, 0, 2);
        assert_eq!(a.hash_one(ip), a.hash_one(Ipv4Address::new(198, 18, 0, 2)));
        assert_ne!(a.hash_one(ip), b.hash_one(ip));
        assert_ne!(TableHash::new().key, TableHash::new().key);
    }

    #[test]
    fn a_subnet_spreads_over_the_low_and_high_bits() {
        // Every address of a /16 (what a spoofed ARP flood could use): the low 10 bits (a
        // table of 1024 buckets) and the top 7 bits (hashbrown's tags) both spread evenly.
        let h = TableHash::with_key(0x1234_5678);
        let mut low = vec![0u32; 1024];
        let mut top = vec![0u32; 128];
        for i in 0..=u16::MAX {
            let [x, y] = i.to_be_bytes();
            let v = h.hash_one(Ipv4Address::new(198, 18, x, y));
            low[(v & 1023) as usize] += 1;
            top[(v >> 57) as usize] += 1;
        }
        // 64 per low bucket and 512 per tag on average.
        assert!(low.iter().all(|&n| (24..=112).contains(&n)), "{low:?}");
        assert!(top.iter().all(|&n| (400..=624).contains(&n)), "{top:?}");
    }

    #[test]
    fn byte_strings_of_different_lengths_differ() {
        let h = TableHash::with_key(7);
        let mut seen = HashSet::new();
        for len in 0..=24 {
            let bytes = vec![0u8; len];
            let mut s = h.build_hasher();
            s.write(&bytes);
            assert!(seen.insert(s.finish()), "length {len} collides");
        }
    }
}
