//! The Ethernet FCS's speed: nanoseconds per frame for the CRC-32 the memory link computes
//! on transmit and checks on receive, at a few frame lengths, with the routine this CPU
//! gets ([`crc32`]) and the portable slicing-by-16 one for comparison.
//!
//! `cargo run --release -p probestack --example crc_speed -- [ROUNDS]`
//!
//! Each figure is the best of `ROUNDS` (default 7) runs over a fixed number of bytes, so
//! that a neighbour on a shared machine costs a run, not the figure.

use probestack::driver::crc32::{crc32, crc32_slice16};
use std::hint::black_box;
use std::time::Instant;

/// Bytes hashed per run at each length: enough for the clock's resolution not to matter.
const BYTES_PER_RUN: usize = 64 << 20;

fn ns_per_frame(f: fn(&[u8]) -> u32, buf: &[u8], len: usize, rounds: usize) -> f64 {
    let frames = (BYTES_PER_RUN / len).max(1);
    // Frames start at every offset in a window, as frames in a pool's buffers do.
    let starts = buf.len() - len;
    let mut best = f64::INFINITY;
    for _ in 0..rounds {
        let mut acc = 0u32;
        let t = Instant::now();
        for i in 0..frames {
            let s = (i * 7) % starts.max(1);
            acc ^= f(black_box(&buf[s..s + len]));
        }
        let ns = t.elapsed().as_nanos() as f64 / frames as f64;
        black_box(acc);
        best = best.min(ns);
    }
    best
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(7);
    let mut buf = vec![0u8; 9000 + 64];
    let mut x = 0x1234_5678u32;
    for b in &mut buf {
        // A small xorshift: data that is not all one value.
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        *b = x as u8;
    }
    println!(
        "{:>6}  {:>10}  {:>10}  {:>8}",
        "bytes", "crc32 ns", "slice16 ns", "GB/s"
    );
    for len in [64usize, 106, 134, 200, 256, 1514, 9000] {
        let fast = ns_per_frame(crc32, &buf, len, rounds);
        let slice = ns_per_frame(crc32_slice16, &buf, len, rounds);
        println!(
            "{len:>6}  {fast:>10.1}  {slice:>10.1}  {:>8.2}",
            len as f64 / fast
        );
    }
}
