//! Every kernel against an independent byte-wise oracle, over every length 0..=2048 at
//! every start alignment 0..64, on random, all-zero and all-ones data; the published test
//! vectors; partial sums split at every offset; the helpers.

use super::*;
use proptest::prelude::*;

/// The byte-wise oracle: byte i is the high half of a big-endian word when i is even, the
/// low half when it is odd (RFC 1071 §1), added into a wide accumulator and folded once.
fn oracle(data: &[u8]) -> u16 {
    let mut s: u64 = 0;
    for (i, &b) in data.iter().enumerate() {
        s += if i % 2 == 0 {
            (b as u64) << 8
        } else {
            b as u64
        };
    }
    while s >> 16 != 0 {
        s = (s & 0xFFFF) + (s >> 16);
    }
    s as u16
}

/// A small deterministic generator, so the tests need no seed from outside.
fn random_bytes(n: usize, mut seed: u64) -> Vec<u8> {
    (0..n)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 24) as u8
        })
        .collect()
}

/// A buffer whose start is 64-byte aligned, so `&buf[a..]` starts at alignment `a`.
#[repr(C, align(64))]
struct Aligned([u8; 2048 + 64]);

fn kernels() -> Vec<Kernel> {
    Kernel::available().collect()
}

#[test]
fn every_kernel_every_length_every_alignment() {
    let patterns: [Box<dyn Fn(usize) -> Vec<u8>>; 3] = [
        Box::new(|n| random_bytes(n, 0x9E37_79B9_7F4A_7C15)),
        Box::new(|n| vec![0x00; n]),
        Box::new(|n| vec![0xFF; n]),
    ];
    let mut buf = Box::new(Aligned([0; 2048 + 64]));
    let mut out = Box::new(Aligned([0; 2048 + 64]));
    for pattern in &patterns {
        let whole = pattern(2048);
        for len in 0..=2048 {
            let data = &whole[..len];
            let want = oracle(data);
            for align in 0..64 {
                buf.0[align..align + len].copy_from_slice(data);
                let slice = &buf.0[align..align + len];
                for k in kernels() {
                    assert_eq!(sum_with(k, slice), want, "{k} len {len} align {align}");
                    // The fused loop writes at a different alignment than it reads.
                    let oa = (align * 7 + 3) % 64;
                    let dst = &mut out.0[oa..oa + len];
                    dst.fill(0xA5);
                    assert_eq!(
                        copy_and_sum_with(k, dst, slice),
                        want,
                        "fused {k} len {len}"
                    );
                    assert_eq!(&out.0[oa..oa + len], data, "fused {k} copy, len {len}");
                }
            }
        }
    }
}

#[test]
fn fused_copy_leaves_bytes_around_destination_alone() {
    let src = random_bytes(300, 7);
    for k in kernels() {
        for len in [0, 1, 63, 64, 65, 127, 128, 129, 255, 256, 257, 299] {
            let mut dst = vec![0xEEu8; len + 32];
            copy_and_sum_with(k, &mut dst[16..16 + len], &src[..len]);
            assert!(dst[..16].iter().all(|&b| b == 0xEE), "{k} wrote before");
            assert!(
                dst[16 + len..].iter().all(|&b| b == 0xEE),
                "{k} wrote after"
            );
        }
    }
}

#[test]
fn rfc1071_section3_example() {
    let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
    for k in kernels() {
        assert_eq!(sum_with(k, &data), 0xDDF2, "{k}");
        assert_eq!(finish(sum_with(k, &data)), 0x220D, "{k}");
    }
}

const IPV4_HEADER: [u8; 20] = [
    0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8, 0x00, 0x01,
    0xc0, 0xa8, 0x00, 0xc7,
];

#[test]
fn standard_ipv4_header() {
    assert_eq!(ipv4_header_checksum(&IPV4_HEADER), 0xB861);
    for k in kernels() {
        assert_eq!(finish(sum_with(k, &IPV4_HEADER)), 0xB861, "{k}");
    }
    // Fed in chunks of 1, 2, 3, 4 and the rest.
    let mut acc = Accumulator::new();
    let mut rest = &IPV4_HEADER[..];
    for n in [1, 2, 3, 4] {
        acc.add(&rest[..n]);
        rest = &rest[n..];
    }
    acc.add(rest);
    assert_eq!(acc.checksum(), 0xB861);
    assert_eq!(acc.len(), 20);
    // With the checksum in place the header verifies.
    let mut h = IPV4_HEADER;
    h[10..12].copy_from_slice(&0xB861u16.to_be_bytes());
    assert!(verifies(header_sum(&h)));
}

#[test]
fn rfc1624_example() {
    // RFC 1624 §5: HC = 0xDD2F, m = 0x5555 changes to m' = 0x3285; equation 3 gives
    // 0x0000 where equation 2 would give 0xFFFF.
    assert_eq!(update16(0xDD2F, 0x5555, 0x3285), 0x0000);
}

#[test]
fn vpp_vectors() {
    // buf[i] = 0xf0 + ((i * 7) & 0xf); the published results are the checksum field
    // as a little-endian load reads it, i.e. byte-swapped.
    let buf: Vec<u8> = (0..65536usize)
        .map(|i| 0xf0 + ((i * 7) & 0xf) as u8)
        .collect();
    for (len, want) in [
        (1, 0xff0f),
        (2, 0x080f),
        (3, 0x0711),
        (4, 0x1210),
        (63, 0xda01),
        (64, 0xe100),
        (65, 0xe010),
        (65535, 0xfc84),
        (65536, 0x0384),
    ] {
        for k in kernels() {
            let got = finish(sum_with(k, &buf[..len])).swap_bytes();
            assert_eq!(got, want, "{k} len {len}");
        }
    }
}

#[test]
fn edge_values() {
    for k in kernels() {
        // Empty data sums to 0: its checksum field is 0xFFFF.
        assert_eq!(finish(sum_with(k, &[])), 0xFFFF, "{k}");
        // All ones: 0xFFFF for even lengths, 0xFF00 for odd lengths.
        assert_eq!(sum_with(k, &[0xFF; 100]), 0xFFFF, "{k}");
        assert_eq!(sum_with(k, &[0xFF; 101]), 0xFF00, "{k}");
        // Non-zero data never sums to 0x0000.
        assert_eq!(sum_with(k, &[0xFF, 0xFF, 0x00, 0x00]), 0xFFFF, "{k}");
    }
}

#[test]
fn lengths_around_and_past_64k() {
    let big = random_bytes((1 << 20) + 3, 42);
    let ones = vec![0xFFu8; (1 << 17) + 5];
    for len in [
        65533,
        65534,
        65535,
        65536,
        65537,
        131071,
        131072,
        131075,
        1 << 20,
    ] {
        let want = oracle(&big[..len]);
        let want_ones = oracle(&ones[..len.min(ones.len())]);
        for k in kernels() {
            assert_eq!(sum_with(k, &big[..len]), want, "{k} len {len}");
            assert_eq!(
                sum_with(k, &ones[..len.min(ones.len())]),
                want_ones,
                "{k} ones len {len}"
            );
        }
    }
}

#[test]
fn split_at_every_offset_combines_to_the_whole() {
    let data = random_bytes(1500, 3);
    let whole = sum(&data);
    for k in 0..=data.len() {
        let (a, b) = data.split_at(k);
        assert_eq!(combine_at(sum(a), sum(b), k), whole, "split at {k}");
        let mut acc = Accumulator::new();
        acc.add(a);
        acc.add(b);
        assert_eq!(acc.sum(), whole, "accumulator split at {k}");
    }
}

#[test]
fn header_sum_matches_for_every_header_length() {
    let data = random_bytes(80, 11);
    for len in 0..=80 {
        assert_eq!(header_sum(&data[..len]), oracle(&data[..len]), "len {len}");
    }
}

#[test]
fn pseudo_header_matches_summing_its_bytes() {
    let (src, dst) = ([198, 18, 0, 1], [198, 19, 255, 254]);
    let bytes = [
        198, 18, 0, 1, 198, 19, 255, 254, 0, 17, 0x05, 0xDC, // zero, UDP, length 1500
    ];
    assert_eq!(pseudo_header_v4(src, dst, 17, 1500), oracle(&bytes));
}

#[test]
fn udp_zero_is_sent_as_ones() {
    assert_eq!(udp_field(0), 0xFFFF);
    assert_eq!(udp_field(0x1234), 0x1234);
}

#[test]
fn best_kernel_is_available_and_stable() {
    let b = Kernel::best();
    assert!(b.is_available());
    assert_eq!(Kernel::best(), b);
    for k in Kernel::ALL {
        assert_eq!(Kernel::from_name(k.name()), Some(k));
        assert!(k.or_best().is_available());
    }
}

proptest! {
    #[test]
    fn pieces_in_any_cut_combine_to_the_whole(
        data in proptest::collection::vec(any::<u8>(), 0..3000),
        cuts in proptest::collection::vec(any::<usize>(), 0..6),
    ) {
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (data.len() + 1)).collect();
        cuts.push(0);
        cuts.push(data.len());
        cuts.sort_unstable();
        let mut acc = Accumulator::new();
        let mut combined = 0u16;
        for w in cuts.windows(2) {
            let piece = &data[w[0]..w[1]];
            acc.add(piece);
            combined = combine_at(combined, sum_with(Kernel::Rfc1071, piece), w[0]);
        }
        prop_assert_eq!(acc.sum(), oracle(&data));
        prop_assert_eq!(combined, oracle(&data));
    }

    #[test]
    fn incremental_update_equals_recomputing(
        words in proptest::collection::vec(any::<u16>(), 1..40),
        index in any::<usize>(),
        new in any::<u16>(),
        new32 in any::<u32>(),
    ) {
        let bytes = |w: &[u16]| w.iter().flat_map(|x| x.to_be_bytes()).collect::<Vec<u8>>();
        let i = index % words.len();
        let before = finish(oracle(&bytes(&words)));
        let mut changed = words.clone();
        changed[i] = new;
        let after = finish(oracle(&bytes(&changed)));
        // Equation 3 agrees with recomputation up to the two zeros of ones'-complement
        // arithmetic (RFC 1624 §3 and Errata 4782), so compare sums modulo 0xFFFF.
        let norm = |x: u16| if x == 0xFFFF { 0 } else { x };
        prop_assert_eq!(norm(update16(before, words[i], new)), norm(after));
        if words.len() >= 2 {
            let j = i.min(words.len() - 2);
            let old32 = (words[j] as u32) << 16 | words[j + 1] as u32;
            let mut c32 = words.clone();
            c32[j] = (new32 >> 16) as u16;
            c32[j + 1] = new32 as u16;
            let after32 = finish(oracle(&bytes(&c32)));
            prop_assert_eq!(norm(update32(before, old32, new32)), norm(after32));
        }
    }
}

#[test]
fn short_path_matches_for_every_short_length() {
    let data = random_bytes(VECTOR_MIN_LEN + 8, 5);
    for len in 0..data.len() {
        assert_eq!(
            scalar::sum_short(&data[..len]),
            oracle(&data[..len]),
            "len {len}"
        );
        assert_eq!(sum(&data[..len]), oracle(&data[..len]), "len {len}");
    }
}
