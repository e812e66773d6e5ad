//! The stack's seeded random numbers (DESIGN.md §2): ephemeral ports, ISNs' secret, fault
//! injection. SplitMix64 (Steele, Lea and Flood, OOPSLA 2014): small, fast, and the same
//! sequence for the same seed on every machine, so a seeded run replays exactly.

/// A seeded generator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rng {
    state: u64,
}

impl Rng {
    pub const fn new(seed: u64) -> Rng {
        Rng { state: seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    /// A number in `0..n` (`n` > 0), by Lemire's multiply-shift (nearly unbiased).
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// True with probability `p` (0.0 to 1.0).
    pub fn chance(&mut self, p: f64) -> bool {
        let unit = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        p > 0.0 && unit < p
    }

    pub fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}

/// Fills `buf` with random bytes from the operating system (`/dev/urandom`), for the
/// stack's secret keys ([`crate::stack::Secrets::Os`]). Where that cannot be read, from
/// the standard library's hasher keys, which it draws from the operating system once a
/// thread (`RandomState`), each 8 bytes hashed from a fresh state with a counter.
pub fn os_random(buf: &mut [u8]) {
    use std::io::Read;
    let read = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(buf));
    if read.is_ok() {
        return;
    }
    use std::hash::{BuildHasher, Hasher};
    for (i, chunk) in buf.chunks_mut(8).enumerate() {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_usize(i);
        chunk.copy_from_slice(&h.finish().to_le_bytes()[..chunk.len()]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_sequence_and_ranges_hold() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        assert_ne!(Rng::new(1).next_u64(), Rng::new(2).next_u64());
        let mut r = Rng::new(3);
        for _ in 0..1000 {
            assert!(r.below(10) < 10);
        }
        let hits = (0..10_000).filter(|_| r.chance(0.25)).count();
        // Binomial(10000, 0.25): mean 2500, sd 43; 2200..2800 is 7 sigma.
        assert!((2200..2800).contains(&hits), "{hits}");
        assert!(!r.chance(0.0));
        let mut buf = [0u8; 13];
        r.fill(&mut buf);
        assert!(buf.iter().any(|&x| x != 0));
    }

    #[test]
    fn the_operating_systems_bytes_differ_from_call_to_call() {
        let (mut a, mut b) = ([0u8; 16], [0u8; 16]);
        os_random(&mut a);
        os_random(&mut b);
        assert_ne!(a, b, "two 128-bit draws were equal");
    }
}
