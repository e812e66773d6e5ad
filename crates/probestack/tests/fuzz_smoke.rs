//! The bounded fuzz run of CI: every entry point of `probestack::fuzz` over a seeded,
//! deterministic stream of inputs (random bytes, and valid inputs from
//! `probestack::fuzz::seeds` with bit flips, truncations, length-field edits and splices).
//! A panic in any entry point fails the test, and the failing input is printed in hex so
//! that it can be replayed (`cargo +nightly fuzz run <target> <file>`) or turned into a
//! unit test.
//!
//! The long run is the cargo-fuzz project in `fuzz/` (see its `Cargo.toml`).
//!
//! `PROBESTACK_FUZZ_SEED_DIR=<dir>` makes `write_seed_corpus` write the seeds to
//! `<dir>/<target>/seed-<n>`, the cargo-fuzz corpus layout (`fuzz/corpus`).

use std::panic::{catch_unwind, AssertUnwindSafe};

use probestack::fuzz::{self, Target, TARGETS};
use probestack::rng::Rng;

/// Inputs per target. The parsers are cheap; the whole-stack target builds two hosts and
/// their connections for every input.
fn inputs_for(name: &str) -> usize {
    match name {
        "stack_ingress" => 20_000,
        "ipv4_reassembly" | "tcp_assembler" | "pcap" => 100_000,
        _ => 200_000,
    }
}

/// Interesting values for a length field: around zero, the byte and word limits, and the
/// input's own length.
fn interesting(rng: &mut Rng, len: usize) -> u16 {
    let choices = [
        0,
        1,
        2,
        4,
        5,
        7,
        8,
        15,
        20,
        40,
        60,
        0x7F,
        0x80,
        0xFF,
        0x100,
        0x5DC,
        0x7FFF,
        0x8000,
        0xFFFF,
        len as u16,
        len.wrapping_sub(1) as u16,
        len.wrapping_add(1) as u16,
        (len / 4) as u16,
    ];
    choices[rng.below(choices.len() as u64) as usize]
}

/// One to four mutations of `input`, `donor` giving the bytes of a splice.
fn mutate(rng: &mut Rng, input: &mut Vec<u8>, donor: &[u8]) {
    for _ in 0..1 + rng.below(4) {
        let len = input.len();
        match rng.below(7) {
            // Bit flips.
            0 | 1 if len > 0 => {
                for _ in 0..1 + rng.below(3) {
                    let i = rng.below(len as u64) as usize;
                    input[i] ^= 1 << rng.below(8);
                }
            }
            // Truncation.
            2 if len > 0 => input.truncate(rng.below(len as u64) as usize),
            // A length field (any byte or pair of bytes) set to an interesting value.
            3 if len >= 2 => {
                let i = rng.below(len as u64 - 1) as usize;
                let v = interesting(rng, len).to_be_bytes();
                if rng.chance(0.5) {
                    input[i..i + 2].copy_from_slice(&v);
                } else {
                    input[i] = v[1];
                }
            }
            // A nibble (IHL, data offset, version) set at random.
            4 if len > 0 => {
                let i = rng.below(len as u64) as usize;
                let n = rng.below(16) as u8;
                input[i] = if rng.chance(0.5) {
                    (input[i] & 0xF0) | n
                } else {
                    (input[i] & 0x0F) | n << 4
                };
            }
            // A splice: our head, the donor's tail.
            5 if !donor.is_empty() => {
                let cut = rng.below(len as u64 + 1) as usize;
                let from = rng.below(donor.len() as u64) as usize;
                input.truncate(cut);
                input.extend_from_slice(&donor[from..]);
            }
            // Random bytes appended.
            _ => {
                let mut extra = vec![0u8; rng.below(32) as usize];
                rng.fill(&mut extra);
                input.extend_from_slice(&extra);
            }
        }
    }
}

fn random_bytes(rng: &mut Rng, max: u64) -> Vec<u8> {
    let mut v = vec![0u8; rng.below(max + 1) as usize];
    rng.fill(&mut v);
    v
}

/// A generic input for `target`: random bytes, or a mutated seed.
fn input_for(rng: &mut Rng, seeds: &[Vec<u8>]) -> Vec<u8> {
    if seeds.is_empty() || rng.chance(0.15) {
        return random_bytes(rng, 512);
    }
    let mut input = seeds[rng.below(seeds.len() as u64) as usize].clone();
    let donor = &seeds[rng.below(seeds.len() as u64) as usize];
    if rng.chance(0.9) {
        mutate(rng, &mut input, donor);
    }
    input
}

/// A whole-stack input: up to 12 frames, each a valid frame (mutated or not), a segment
/// on the ESTABLISHED connection's ports, or random bytes, behind random flags that
/// mostly ask for checksums to be recomputed (so that the frames get past them).
fn stack_input(rng: &mut Rng, frames: &[Vec<u8>], ports: (u16, u16)) -> Vec<u8> {
    let mut input = Vec::new();
    for _ in 0..1 + rng.below(12) {
        let mut frame = match rng.below(10) {
            0 => random_bytes(rng, 200),
            1 => on_connection(rng, frames, ports),
            _ => frames[rng.below(frames.len() as u64) as usize].clone(),
        };
        if rng.chance(0.7) {
            let donor = &frames[rng.below(frames.len() as u64) as usize];
            mutate(rng, &mut frame, donor);
        }
        let mut flags = rng.next_u32() as u8;
        if rng.chance(0.8) {
            // Recompute the checksums (any of the three ways).
            flags = (flags & !0b110) | ((1 + rng.below(3) as u8) << 1);
        }
        if rng.chance(0.7) {
            flags &= !1; // to B, where most of the sockets are
        }
        input.push(flags);
        input.extend_from_slice(&(frame.len() as u16).to_be_bytes());
        input.extend_from_slice(&frame);
    }
    input
}

/// A TCP frame from A to B rewritten onto the ESTABLISHED connection's ports, with a
/// random sequence and acknowledgment number.
fn on_connection(rng: &mut Rng, frames: &[Vec<u8>], ports: (u16, u16)) -> Vec<u8> {
    let tcp: Vec<&Vec<u8>> = frames
        .iter()
        .filter(|f| f.len() > 54 && f[12..14] == [8, 0] && f[23] == 6)
        .collect();
    let mut f = tcp[rng.below(tcp.len() as u64) as usize].clone();
    let l4 = 14 + usize::from(f[14] & 0x0F) * 4;
    f[l4..l4 + 2].copy_from_slice(&ports.1.to_be_bytes());
    f[l4 + 2..l4 + 4].copy_from_slice(&ports.0.to_be_bytes());
    let mut seq = [0u8; 8];
    rng.fill(&mut seq);
    f[l4 + 4..l4 + 12].copy_from_slice(&seq);
    f
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Runs `target` over `n` inputs from `make`; on a panic, fails with the input.
fn run_target(target: &Target, n: usize, mut make: impl FnMut(&mut Rng) -> Vec<u8>) {
    let mut rng = Rng::new(0xF022 ^ target.name.len() as u64 ^ (n as u64) << 8);
    let started = std::time::Instant::now();
    for i in 0..n {
        let input = make(&mut rng);
        if let Err(e) = catch_unwind(AssertUnwindSafe(|| (target.run)(&input))) {
            let msg = e
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| e.downcast_ref::<&str>().copied())
                .unwrap_or("(no message)");
            panic!(
                "fuzz target {} panicked on input {i}: {msg}\ninput ({} bytes): {}",
                target.name,
                input.len(),
                hex(&input)
            );
        }
    }
    eprintln!("{:16} {n:6} inputs in {:?}", target.name, started.elapsed());
}

fn target(name: &str) -> &'static Target {
    TARGETS
        .iter()
        .find(|t| t.name == name)
        .expect("a target of that name")
}

macro_rules! smoke {
    ($($test:ident => $name:literal),* $(,)?) => {
        $(
            #[test]
            fn $test() {
                let seeds = fuzz::seeds($name);
                assert!(!seeds.is_empty());
                run_target(target($name), inputs_for($name), |rng| input_for(rng, &seeds));
            }
        )*
        /// The targets the macro made a test for.
        const SMOKED: &[&str] = &[$($name),*];
    };
}

smoke! {
    ethernet_smoke => "ethernet",
    arp_smoke => "arp",
    ipv4_smoke => "ipv4",
    icmpv4_smoke => "icmpv4",
    udp_smoke => "udp",
    tcp_smoke => "tcp",
    pcap_smoke => "pcap",
    ipv4_reassembly_smoke => "ipv4_reassembly",
    tcp_assembler_smoke => "tcp_assembler",
}

#[test]
fn stack_ingress_smoke() {
    let frames = fuzz::seeds("ethernet");
    let ports = fuzz::Fixture::new().established_ports();
    let seeds = fuzz::seeds("stack_ingress");
    run_target(
        target("stack_ingress"),
        inputs_for("stack_ingress"),
        |rng| {
            if rng.chance(0.1) {
                input_for(rng, &seeds)
            } else {
                stack_input(rng, &frames, ports)
            }
        },
    );
}

#[test]
fn every_target_is_smoked() {
    // The macro above, or the stack test, makes a test for every target in TARGETS.
    for t in TARGETS {
        assert!(
            SMOKED.contains(&t.name) || t.name == "stack_ingress",
            "{} has no smoke test",
            t.name
        );
    }
}

#[test]
fn write_seed_corpus() {
    let Some(dir) = std::env::var_os("PROBESTACK_FUZZ_SEED_DIR") else {
        eprintln!("PROBESTACK_FUZZ_SEED_DIR not set: no seed corpus written");
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    for t in TARGETS {
        let sub = dir.join(t.name);
        std::fs::create_dir_all(&sub).expect("create the corpus directory");
        for (i, s) in fuzz::seeds(t.name).iter().enumerate() {
            std::fs::write(sub.join(format!("seed-{i}")), s).expect("write a seed");
        }
    }
}
