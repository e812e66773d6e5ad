//! Fuzzing entry points: one per parser, and one for the whole stack's ingress
//! (DESIGN.md §9: "bad input is dropped and counted, never a panic").
//!
//! Each entry point takes arbitrary bytes and panics only when it finds a bug: a parser
//! that panics, a parse → emit → parse round trip that does not give back what it parsed,
//! a memory cap that does not hold, a connection that the input could not have touched
//! and that stops working. The same functions serve two drivers:
//!
//! - the cargo-fuzz project in `fuzz/` at the repository root (libFuzzer, nightly), one
//!   fuzz target per entry point, each a one-line call into this module;
//! - `tests/fuzz_smoke.rs`, a bounded run on stable that is part of `cargo test`: every
//!   entry point over a seeded stream of random and mutated inputs built from
//!   [`seeds`].
//!
//! # Input formats
//!
//! The parsers take the bytes as the protocol's own: a frame for
//! [`ethernet`](fn@ethernet), a packet for [`arp`], a datagram for [`ipv4`](fn@ipv4), a
//! message for [`icmpv4`](fn@icmpv4), a capture file for [`pcap`]. UDP and TCP are
//! checksummed over a pseudo-header, so [`udp`] and [`tcp`] read the source and
//! destination addresses from the first 8 bytes and the segment from the rest. The
//! stateful targets read records:
//!
//! - [`ipv4_reassembly`]: one configuration byte (the memory cap and the most datagrams),
//!   then 6-byte fragments `[key, offset (2), length (2), flags]` ([`FRAGMENT_RECORD`]).
//! - [`tcp_assembler`]: one byte for the most ranges, then 5-byte operations
//!   `[op, offset (2), length (2)]` ([`ASSEMBLER_RECORD`]).
//! - [`stack_ingress`]: frames, each behind a 3-byte header `[flags, length (2, big
//!   endian)]` ([`INGRESS_HEADER`]). `flags` bit 0 picks the host the frame arrives at (B,
//!   or A); bits 1-2 the checksum treatment (as sent; recomputed; recomputed and reported
//!   by the device as a raw sum; recomputed and reported as verified); bits 3-4 how far
//!   the virtual clock moves after the frame (not at all, 1 ms, 250 ms, 5 s); bits 5-7
//!   how the device hands it over (0 whole, 1-3 cut once at that many eighths of its
//!   length, 4-7 cut at 1-4 eighths and again halfway through the rest, each piece after
//!   the first a fragment, as a device that splits frames hands them). Recomputing
//!   checksums lets the fuzzer reach past checksum verification into the protocols, as a
//!   real attacker can.
//!
//! # The whole stack
//!
//! [`stack_ingress`] builds two hosts on a memory link ([`crate::sim::Pair`]) with UDP
//! sockets bound (one connected), a listener on each host, and TCP connections from B to
//! A (which, B not asking for RFC 1146's "no checksum", checksum their data, so that an
//! in-order segment to B waits unverified for a read) in several states: ESTABLISHED
//! with data in flight and A's receive window closed (so B probes it), FIN-WAIT-2 (B shut down sending; A in CLOSE-WAIT), TIME-WAIT, and
//! SYN-SENT to an address nobody answers. Each frame of the input is handed to a host's
//! device as received, and both hosts are polled while the clock moves. After every frame:
//! reassembly holds no more than its cap, the buffer pool no more than its limit, each
//! socket buffer and out-of-order queue no more than its size, each listener no more than
//! its backlog, the echo-reply queue no more than its length, and the number of
//! connections no more than the fixture made plus twice the backlogs (half-open and
//! queued). After the input, unless a
//! frame could have touched the ESTABLISHED connection legitimately (a TCP segment with its
//! ports, a fragment, ARP, an ICMP error: see [`may_touch_connection`]), the connection
//! must still carry data both ways, every byte as sent.
//!
//! `Stack` holds boxed devices and cannot be cloned, so the fixture is built for each
//! input: small buffers keep that to a fraction of a millisecond.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use crate::buf::PacketBuf;
use crate::checksum;
use crate::driver::{
    Device, DeviceCaps, DeviceContext, DeviceError, MemoryNic, NicConfig, RxChecksum, RxFrame,
    TxMeta,
};
use crate::ip::reassembly::{FragKey, Reassembler, ReassemblyConfig, ReassemblyError};
use crate::sim::{HostConfig, Pair, ADDR_A, ADDR_B, MAC_A, MAC_B};
use crate::socket::tcp::{Kind, TcpHandle};
use crate::socket::udp::UdpHandle;
use crate::stack::{Stack, StackConfig};
use crate::tcp::assembler::{Assembler, MAX_SACK_BLOCKS};
use crate::tcp::{State, TcpConfig};
use crate::time::{Duration, Instant};
use crate::wire::arp::{self as arp_wire, ArpOperation, ArpRepr};
use crate::wire::ethernet::{self, EtherType, EthernetAddress, EthernetRepr};
use crate::wire::icmpv4::{self, DstUnreachable, Icmpv4Repr, ParamProblem, TimeExceeded};
use crate::wire::ipv4::{self, IpProtocol, Ipv4Options, Ipv4Repr};
use crate::wire::source_route::SourceRoute;
use crate::wire::tcp::{self as tcp_wire, Control, SeqNumber, TcpOption, TcpRepr, TcpTimestamp};
use crate::wire::udp::{self as udp_wire, UdpRepr};
use crate::wire::{Checksum, Ipv4Address};

/// A fuzz target: its name (the cargo-fuzz target's) and its entry point.
#[derive(Clone, Copy, Debug)]
pub struct Target {
    pub name: &'static str,
    pub run: fn(&[u8]),
}

/// Every entry point, for drivers that run them all.
pub const TARGETS: &[Target] = &[
    Target {
        name: "ethernet",
        run: ethernet,
    },
    Target {
        name: "arp",
        run: arp,
    },
    Target {
        name: "ipv4",
        run: ipv4,
    },
    Target {
        name: "icmpv4",
        run: icmpv4,
    },
    Target {
        name: "udp",
        run: udp,
    },
    Target {
        name: "tcp",
        run: tcp,
    },
    Target {
        name: "pcap",
        run: pcap,
    },
    Target {
        name: "ipv4_reassembly",
        run: ipv4_reassembly,
    },
    Target {
        name: "tcp_assembler",
        run: tcp_assembler,
    },
    Target {
        name: "stack_ingress",
        run: stack_ingress,
    },
];

// ----------------------------------------------------------------------------------------
// Parsers.

/// An Ethernet II header: parse, emit, parse again; the same header and the same bytes.
pub fn ethernet(data: &[u8]) {
    let Ok(frame) = ethernet::Frame::new_checked(data) else {
        return;
    };
    let _ = (frame.destination(), frame.source(), frame.ethertype());
    let _ = frame.payload();
    let Ok(repr) = EthernetRepr::parse(&frame) else {
        return;
    };
    let mut out = vec![0u8; repr.header_len()];
    repr.emit(&mut ethernet::Frame::new_unchecked(&mut out[..]))
        .expect("a parsed Ethernet header emits");
    assert_eq!(
        out[..],
        data[..ethernet::HEADER_LEN],
        "Ethernet bytes changed"
    );
    let again = EthernetRepr::parse(&ethernet::Frame::new_unchecked(&out[..]))
        .expect("an emitted Ethernet header parses");
    assert_eq!(again, repr);
}

/// An ARP packet: parse, emit, parse again.
pub fn arp(data: &[u8]) {
    let Ok(packet) = arp_wire::Packet::new_checked(data) else {
        return;
    };
    let _ = (
        packet.hardware_type(),
        packet.protocol_type(),
        packet.operation(),
    );
    let _ = (packet.sender_hardware_addr(), packet.target_protocol_addr());
    let Ok(repr) = ArpRepr::parse(&packet) else {
        return;
    };
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut arp_wire::Packet::new_unchecked(&mut out[..]))
        .expect("a parsed ARP packet emits");
    let again = ArpRepr::parse(&arp_wire::Packet::new_unchecked(&out[..]))
        .expect("an emitted ARP packet parses");
    assert_eq!(again, repr);
}

/// An IPv4 datagram, header and options: the option walk alone, the truncated-datagram
/// parse (as for an ICMP quote), and parse → emit → parse with the checksum verified.
pub fn ipv4(data: &[u8]) {
    let _ = ipv4::check_options(data);
    if let Ok((repr, payload)) = Ipv4Repr::parse_truncated(data, Checksum::Skip) {
        assert!(payload.len() <= repr.payload_len);
        let _ = icmpv4::quote(data).expect("a datagram that parses truncated can be quoted");
    }
    let Ok(packet) = ipv4::Packet::new_checked(data) else {
        return;
    };
    let _ = (packet.options(), packet.payload(), packet.verify_checksum());
    let checked = Ipv4Repr::parse(&packet, Checksum::Check);
    let Ok(repr) = Ipv4Repr::parse(&packet, Checksum::Skip) else {
        assert!(checked.is_err(), "parses with the checksum but not without");
        return;
    };
    assert!(checked.is_err() || checked == Ok(repr));
    ipv4_options(&repr);
    let mut out = vec![0u8; repr.buffer_len()];
    let mut view = ipv4::Packet::new_unchecked(&mut out[..]);
    repr.emit(&mut view, Checksum::Check)
        .expect("a parsed IPv4 header emits");
    view.payload_mut().copy_from_slice(packet.payload());
    let view = ipv4::Packet::new_checked(&out[..]).expect("an emitted datagram is whole");
    let again = Ipv4Repr::parse(&view, Checksum::Check).expect("an emitted datagram parses");
    assert_eq!(again, repr);
    assert_eq!(view.payload(), packet.payload());
}

/// What the stack does with a header's options: a later fragment's copied ones are a
/// part of them; a source route found reparses from its bytes, and its way back is no
/// longer than the route recorded and ends at the source.
fn ipv4_options(repr: &Ipv4Repr) {
    let copied = repr.options.copied();
    assert!(copied.len() <= repr.options.len());
    if let Ok(Some(route)) = SourceRoute::find(repr.options.as_bytes()) {
        assert_eq!(SourceRoute::parse(&route.to_bytes()), Ok(route));
        assert_eq!(SourceRoute::find(copied.as_bytes()), Ok(Some(route)));
        if let Some(back) = crate::ip::SourceRouting::back_along(&route, repr.src) {
            assert!(back.gateways().len() <= route.recorded().len());
            let extras = crate::ip::IpExtras::new(&Ipv4Options::NONE, Some(&back), repr.src)
                .expect("a way back fits where the route came");
            let option = SourceRoute::find(extras.options.as_bytes())
                .unwrap()
                .unwrap();
            assert_eq!(option.addresses().last(), Some(&repr.src));
        }
    }
}

/// An ICMPv4 message: parse → emit → parse, and the constructors of error messages over
/// the same bytes taken as the invoking datagram.
pub fn icmpv4(data: &[u8]) {
    let Ok(packet) = icmpv4::Packet::new_checked(data) else {
        return;
    };
    let _ = (
        packet.msg_type(),
        packet.rest_of_header(),
        packet.verify_checksum(),
    );
    if let Ok(repr) = Icmpv4Repr::parse(&packet, Checksum::Skip) {
        let _ = repr.invoking_header();
        icmp_round_trip(&repr);
    }
    let _ = Icmpv4Repr::parse(&packet, Checksum::Check);
    let reason = DstUnreachable::ALL[usize::from(data[0]) % DstUnreachable::ALL.len()];
    let mtu = u16::from_be_bytes([data[1], data[2]]);
    if let Ok(repr) = Icmpv4Repr::dst_unreachable(reason, mtu, &data[3..]) {
        icmp_round_trip(&repr);
    }
    if let Ok(repr) = Icmpv4Repr::time_exceeded(TimeExceeded::TtlExpired, data) {
        icmp_round_trip(&repr);
    }
    // Code 0, the one code with a pointer.
    if let Ok(repr) = Icmpv4Repr::param_problem(ParamProblem::Pointer, data[0], &data[1..]) {
        icmp_round_trip(&repr);
    }
}

fn icmp_round_trip(repr: &Icmpv4Repr<'_>) {
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(
        &mut icmpv4::Packet::new_unchecked(&mut out[..]),
        Checksum::Check,
    )
    .expect("a parsed or constructed ICMP message emits");
    let again = Icmpv4Repr::parse(&icmpv4::Packet::new_unchecked(&out[..]), Checksum::Check)
        .expect("an emitted ICMP message parses");
    assert_eq!(&again, repr);
}

/// The pseudo-header addresses at the front of a UDP or TCP input, and the rest.
fn split_addresses(data: &[u8]) -> Option<(Ipv4Address, Ipv4Address, &[u8])> {
    let (addrs, rest) = data.split_at_checked(8)?;
    Some((
        Ipv4Address::from_bytes(&addrs[..4]),
        Ipv4Address::from_bytes(&addrs[4..]),
        rest,
    ))
}

/// A UDP datagram (after 8 bytes of pseudo-header addresses): parse → emit → parse.
pub fn udp(data: &[u8]) {
    let Some((src, dst, bytes)) = split_addresses(data) else {
        return;
    };
    let Ok(packet) = udp_wire::Packet::new_checked(bytes) else {
        return;
    };
    let _ = (packet.payload(), packet.verify_checksum(src, dst));
    let checked = UdpRepr::parse(&packet, src, dst, Checksum::Check);
    let Ok(repr) = UdpRepr::parse(&packet, src, dst, Checksum::Skip) else {
        assert!(checked.is_err(), "parses with the checksum but not without");
        return;
    };
    let mut out = vec![0u8; repr.buffer_len(packet.payload().len())];
    repr.emit(
        &mut udp_wire::Packet::new_unchecked(&mut out[..]),
        src,
        dst,
        packet.payload(),
        Checksum::Check,
    )
    .expect("a parsed UDP datagram emits");
    let view = udp_wire::Packet::new_checked(&out[..]).expect("an emitted datagram is whole");
    let again = UdpRepr::parse(&view, src, dst, Checksum::Check).expect("it parses");
    assert_eq!(again, repr);
    assert_eq!(view.payload(), packet.payload());
}

/// A TCP segment (after 8 bytes of pseudo-header addresses): the option walk over the
/// raw bytes with each option's own round trip, then the segment's parse → emit → parse.
pub fn tcp(data: &[u8]) {
    let Some((src, dst, bytes)) = split_addresses(data) else {
        return;
    };
    for option in tcp_wire::TcpOptions::new(bytes) {
        let Ok(option) = option else { break };
        let mut out = vec![0u8; option.buffer_len()];
        if option.emit(&mut out).is_ok() {
            let (again, rest) = TcpOption::parse(&out).expect("an emitted option parses");
            assert_eq!(again, option);
            assert!(rest.is_empty());
        }
    }
    let Ok(packet) = tcp_wire::Packet::new_checked(bytes) else {
        return;
    };
    let _ = (packet.options(), packet.payload(), packet.segment_len());
    let checked = TcpRepr::parse(&packet, src, dst, Checksum::Check);
    let Ok(repr) = TcpRepr::parse(&packet, src, dst, Checksum::Skip) else {
        assert!(checked.is_err(), "parses with the checksum but not without");
        return;
    };
    let _ = (repr.window_shift(), repr.segment_len());
    // Options this stack writes in its own layout may take more than the 40 bytes there
    // are (every option at once); such a repr cannot be emitted, and says so.
    let mut out = vec![0u8; repr.buffer_len()];
    let emitted = repr.emit(
        &mut tcp_wire::Packet::new_unchecked(&mut out[..]),
        src,
        dst,
        Checksum::Check,
    );
    if repr.header_len() > tcp_wire::MAX_HEADER_LEN {
        assert!(emitted.is_err());
        return;
    }
    emitted.expect("a parsed TCP segment whose options fit emits");
    let view = tcp_wire::Packet::new_checked(&out[..]).expect("an emitted segment is whole");
    let again = TcpRepr::parse(&view, src, dst, Checksum::Check).expect("it parses");
    assert_eq!(again, repr);
}

/// A pcap file: parse, write the records again, parse again; the same records.
pub fn pcap(data: &[u8]) {
    use crate::driver::pcap::{parse, PcapSink, SNAPLEN};
    let Ok((_, records)) = parse(data) else {
        return;
    };
    let mut sink = PcapSink::new(Vec::new()).expect("writing to memory");
    for r in &records {
        sink.write_record(Instant::from_nanos(r.time_ns), &r.data)
            .expect("writing to memory");
    }
    let (header, again) = parse(&sink.into_inner()).expect("a capture we wrote parses");
    assert!(header.nanos && !header.big_endian);
    assert_eq!(again.len(), records.len());
    for (a, r) in again.iter().zip(&records) {
        // The writer keeps at most its snaplen, and seconds that fit its 32-bit field.
        let kept = r.data.len().min(SNAPLEN as usize);
        assert_eq!(a.data, r.data[..kept]);
        assert_eq!(a.orig_len as usize, r.data.len());
        if r.time_ns / 1_000_000_000 <= u64::from(u32::MAX) {
            assert_eq!(a.time_ns, r.time_ns);
        }
    }
}

// ----------------------------------------------------------------------------------------
// IPv4 reassembly.

/// Bytes of one fragment in the [`ipv4_reassembly`] input.
pub const FRAGMENT_RECORD: usize = 6;

/// The input as a sequence of fragments fed to a [`Reassembler`] with a small cap.
///
/// The first byte sets the cap (1 KiB << (b & 7)) and the most datagrams (1 + (b >> 3 &
/// 7)). Each record `[key, offset (2), length (2), flags]`: key bits 0-1 pick one of four
/// datagrams and bits 2-7 the fill of the payload; the offset counts 8-byte blocks (13
/// bits, as on the wire); the length is in bytes (12 bits); flags bit 0 is More
/// Fragments, bits 1-4 the header's option words (past 10 the header is too long), bits
/// 5-6 how far the clock moves first (0, 1 ms, 10 s, 31 s, past the 30 s timeout).
///
/// After every fragment the held bytes and datagrams stay within the caps; a datagram that
/// completes has every byte from a fragment that was sent for it at that offset (payload
/// byte at offset `i` is `fill ^ i`, so a byte from nowhere or from the wrong place shows),
/// and its buffer goes back as the spare (`Reassembler::recycle`) as the stack's does.
pub fn ipv4_reassembly(data: &[u8]) {
    let Some((&config, records)) = data.split_first() else {
        return;
    };
    let cfg = ReassemblyConfig {
        timeout: Duration::from_secs(30),
        max_bytes: 1024 << (config & 7),
        max_datagrams: 1 + usize::from((config >> 3) & 7),
    };
    let mut r = Reassembler::new(cfg);
    let mut now = Instant::ZERO;
    // Every fragment sent, per key: (start, end, fill).
    let mut sent: [Vec<(usize, usize, u8)>; 4] = Default::default();
    for rec in records.chunks_exact(FRAGMENT_RECORD) {
        let which = usize::from(rec[0] & 3);
        let fill = rec[0] | 1;
        let offset = usize::from(u16::from_be_bytes([rec[1], rec[2]]) & 0x1FFF) * 8;
        let len = usize::from(u16::from_be_bytes([rec[3], rec[4]]) & 0x0FFF);
        let flags = rec[5];
        let more_frags = flags & 1 != 0;
        let header_len = 20 + 4 * usize::from((flags >> 1) & 0xF);
        now += match (flags >> 5) & 3 {
            0 => Duration::ZERO,
            1 => Duration::from_millis(1),
            2 => Duration::from_secs(10),
            _ => Duration::from_secs(31),
        };
        let expired = r.expire(now);
        assert!(expired
            .iter()
            .all(|e| e.first_fragment.as_ref().is_none_or(|q| q.len() >= 20)));
        let key = FragKey {
            src: Ipv4Address::new(198, 18, 0, 1 + which as u8),
            dst: ADDR_B,
            protocol: 17,
            ident: 0x4000 + which as u16,
        };
        let mut header = vec![0u8; header_len];
        header[0] = 0x40 | (header_len / 4).min(15) as u8;
        let payload: Vec<u8> = (offset..offset + len).map(|i| fill ^ i as u8).collect();
        sent[which].push((offset, offset + len, fill));
        let result = r.add(key, offset, more_frags, &header, &payload, now);
        assert!(
            r.bytes_held() <= cfg.max_bytes,
            "reassembly holds {} bytes, cap {}",
            r.bytes_held(),
            cfg.max_bytes
        );
        assert!(r.datagrams_held() <= cfg.max_datagrams);
        match result {
            Ok(Some(done)) => {
                assert!((20..=60).contains(&done.header.len()));
                assert!(done.header.len() + done.payload.len() <= ipv4::MAX_TOTAL_LEN);
                assert!(
                    sent[which]
                        .iter()
                        .any(|&(_, end, _)| end == done.payload.len()),
                    "reassembled length {} is the end of no fragment",
                    done.payload.len()
                );
                for (i, &b) in done.payload.iter().enumerate() {
                    assert!(
                        sent[which]
                            .iter()
                            .any(|&(s, e, f)| (s..e).contains(&i) && b == f ^ i as u8),
                        "reassembled byte {i} ({b:#04x}) came from no fragment"
                    );
                }
                // Given back, as the stack does: the next datagrams may grow into it,
                // and a stale byte of this one would show in theirs.
                r.recycle(done.payload);
            }
            Ok(None) => {}
            Err(ReassemblyError::Malformed) => {
                assert!(
                    header_len > 60 || (more_frags && (len == 0 || len % 8 != 0)),
                    "a well-formed fragment was called malformed"
                );
            }
            Err(_) => {}
        }
    }
    let stats = r.stats();
    assert_eq!(stats.fragments_in, (records.len() / FRAGMENT_RECORD) as u64);
}

// ----------------------------------------------------------------------------------------
// The TCP out-of-order assembler.

/// Bytes of one operation in the [`tcp_assembler`] input.
pub const ASSEMBLER_RECORD: usize = 5;

/// Operations on an [`Assembler`] checked against a plain model (a sorted list of merged
/// intervals, rebuilt by sorting after each insertion).
///
/// The first byte is `max_ranges` (0 to 63). Each record `[op, offset (2), length (2)]`:
/// op bits 0-1: 0 and 1 add the range, 2 takes the front, 3 asks for SACK blocks; op bit
/// 7 on an add puts the offset near `usize::MAX` (the clamping path; the model stops
/// following then, and only the structural checks go on).
pub fn tcp_assembler(data: &[u8]) {
    let Some((&max, records)) = data.split_first() else {
        return;
    };
    let max_ranges = usize::from(max & 63);
    let mut a = Assembler::new(max_ranges);
    let mut model: Option<Vec<(usize, usize)>> = Some(Vec::new());
    for rec in records.chunks_exact(ASSEMBLER_RECORD) {
        let offset = usize::from(u16::from_be_bytes([rec[1], rec[2]]));
        let len = usize::from(u16::from_be_bytes([rec[3], rec[4]]));
        match rec[0] & 3 {
            0 | 1 => {
                let offset = if rec[0] & 0x80 != 0 {
                    model = None;
                    usize::MAX - offset
                } else {
                    offset
                };
                let result = a.add(offset, len);
                if let Some(m) = &mut model {
                    let mut next = m.clone();
                    if len > 0 {
                        next.push((offset, offset + len));
                        next.sort_unstable();
                        next = merge_touching(&next);
                    }
                    match result {
                        Ok(()) => *m = next,
                        Err(_) => {
                            assert!(offset > 0, "refused in-order data");
                            assert!(next.len() > max_ranges.max(1), "refused a range that fits")
                        }
                    }
                }
            }
            2 => {
                let advanced = a.take_front();
                if let Some(m) = &mut model {
                    let want = match m.first() {
                        Some(&(0, end)) => {
                            m.remove(0);
                            for r in m.iter_mut() {
                                *r = (r.0 - end, r.1 - end);
                            }
                            end
                        }
                        _ => 0,
                    };
                    assert_eq!(advanced, want);
                }
            }
            _ => {
                let blocks = a.sack_ranges();
                let held: Vec<(usize, usize)> = a.ranges().collect();
                let reported: Vec<(usize, usize)> = blocks.iter().flatten().copied().collect();
                assert!(blocks[reported.len()..].iter().all(Option::is_none));
                let out_of_order = held.iter().filter(|r| r.0 > 0).count();
                assert_eq!(reported.len(), out_of_order.min(MAX_SACK_BLOCKS));
                for (i, b) in reported.iter().enumerate() {
                    assert!(
                        b.0 > 0 && held.contains(b),
                        "SACK block {b:?} is held by no range"
                    );
                    assert!(!reported[..i].contains(b), "SACK block {b:?} twice");
                }
            }
        }
        let held: Vec<(usize, usize)> = a.ranges().collect();
        // One more while in-order data (a range at 0) waits for `take_front`.
        let in_order = usize::from(held.first().is_some_and(|r| r.0 == 0));
        assert!(held.len() <= max_ranges.max(1) + in_order);
        assert_eq!(held.len(), a.range_count());
        assert!(held.iter().all(|r| r.0 < r.1));
        assert!(held.windows(2).all(|w| w[0].1 < w[1].0), "ranges {held:?}");
        assert_eq!(a.bytes(), held.iter().map(|r| r.1 - r.0).sum::<usize>());
        if let Some(m) = &model {
            assert_eq!(&held, m);
        }
    }
}

/// Sorted intervals with the overlapping and touching ones merged.
fn merge_touching(sorted: &[(usize, usize)]) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    for &(s, e) in sorted {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

// ----------------------------------------------------------------------------------------
// The whole stack.

/// Bytes before each frame in the [`stack_ingress`] input: flags, then the length.
pub const INGRESS_HEADER: usize = 3;

/// Most frames of one [`stack_ingress`] input that are used.
pub const INGRESS_MAX_FRAMES: usize = 256;

/// The TCP port of A's listener, which B's connections go to.
pub const PORT_A: u16 = 5001;
/// The TCP port of B's listener.
pub const PORT_B: u16 = 80;
/// B's UDP sockets: bound, and bound and connected to A's.
pub const UDP_PORT_B: u16 = 7;
pub const UDP_PORT_B_CONNECTED: u16 = 53;
pub const UDP_PORT_A: u16 = 5353;
/// An address on the link with a MAC that no host has: B's SYN-SENT connection goes there.
pub const ADDR_NOBODY: Ipv4Address = Ipv4Address::new(198, 18, 0, 9);
const MAC_NOBODY: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x09]);

/// Socket buffer sizes of the fixture: small, so it is quick to build and fills quickly.
const FIXTURE_BUFFER: usize = 8 * 1024;
const FIXTURE_BACKLOG: usize = 4;
const FIXTURE_UDP_RX: usize = 4 * 1024;

/// A device that hands its stack injected frames before what the link brings, and, while
/// `capture` holds a list, keeps the frames its stack transmits there instead of sending
/// them (their bytes, fragments gathered).
struct Injector {
    inner: MemoryNic,
    inbox: Arc<Mutex<VecDeque<RxFrame>>>,
    capture: Arc<Mutex<Option<Vec<Vec<u8>>>>>,
}

impl Device for Injector {
    fn caps(&self) -> DeviceCaps {
        self.inner.caps()
    }
    fn transmit(
        &mut self,
        frame: PacketBuf,
        meta: TxMeta,
        cx: &DeviceContext<'_>,
    ) -> Result<(), DeviceError> {
        let mut capture = self.capture.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(frames) = capture.as_mut() {
            let mut bytes = frame.data().to_vec();
            for f in frame.frags() {
                bytes.extend_from_slice(f);
            }
            frames.push(bytes);
            return Ok(());
        }
        drop(capture);
        self.inner.transmit(frame, meta, cx)
    }
    fn tx_ready(&self) -> bool {
        self.inner.tx_ready()
    }
    fn tx_room(&self) -> usize {
        self.inner.tx_room()
    }
    fn take_notification(&mut self, cx: &DeviceContext<'_>) -> bool {
        let raised = self.inner.take_notification(cx);
        raised
            || !self
                .inbox
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_empty()
    }
    fn receive(&mut self, cx: &DeviceContext<'_>) -> Option<RxFrame> {
        let injected = self
            .inbox
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop_front();
        injected.or_else(|| self.inner.receive(cx))
    }
    fn next_deadline(&self) -> Option<Instant> {
        self.inner.next_deadline()
    }
    fn recycle(&mut self, frame: PacketBuf) {
        self.inner.recycle(frame)
    }
    fn buffer_depot(&self) -> Option<crate::buf::Depot> {
        self.inner.buffer_depot()
    }
}

/// The two hosts of [`stack_ingress`] and the sockets and connections set up on them.
pub struct Fixture {
    pub pair: Pair,
    inbox: [Arc<Mutex<VecDeque<RxFrame>>>; 2],
    /// A's device's capture ([`Injector`]).
    capture_a: Arc<Mutex<Option<Vec<Vec<u8>>>>>,
    /// B's end and A's end of the ESTABLISHED connection.
    pub established: (TcpHandle, TcpHandle),
    /// The bytes each end has accepted for sending on it so far (B's, A's).
    sent: (usize, usize),
    /// B's end of the FIN-WAIT-2 connection and A's (CLOSE-WAIT).
    pub fin_wait: (TcpHandle, TcpHandle),
    /// B's SYN-SENT connection.
    pub syn_sent: TcpHandle,
    /// The listeners (B's, A's).
    pub listeners: (TcpHandle, TcpHandle),
    /// B's UDP sockets and A's.
    pub udp: [UdpHandle; 3],
    /// Connections the fixture made on each host (B, A), TIME-WAIT included.
    connections: (usize, usize),
}

/// The byte at position `i` of the stream a host sends on the ESTABLISHED connection.
fn stream_byte(from_b: bool, i: usize) -> u8 {
    let x = (i as u32).wrapping_mul(2_654_435_761) >> 24;
    x as u8 ^ if from_b { 0x5A } else { 0xC3 }
}

fn stream(from_b: bool, start: usize, len: usize) -> Vec<u8> {
    (start..start + len)
        .map(|i| stream_byte(from_b, i))
        .collect()
}

impl Fixture {
    /// Builds the hosts and brings the connections into their states. Panics if the
    /// stack cannot do what a fault-free link should let it (a bug, not the input's).
    pub fn new() -> Fixture {
        let tcp = TcpConfig {
            send_buffer: FIXTURE_BUFFER,
            recv_buffer: FIXTURE_BUFFER,
            msl: Duration::from_secs(10),
            ..TcpConfig::default()
        };
        let host = HostConfig {
            stack: StackConfig {
                reassembly: ReassemblyConfig {
                    timeout: Duration::from_secs(30),
                    max_bytes: 64 * 1024,
                    max_datagrams: 8,
                },
                buffer_limit_bytes: 2 << 20,
                echo_reply_queue: 16,
                tcp,
                // Routed datagrams taken, so that their handling is reached too.
                accept_source_route: true,
                // So that an input replays exactly.
                secrets: crate::stack::Secrets::Seeded,
                ..StackConfig::default()
            },
            nic: NicConfig::default(),
        };
        // B checksums its TCP segments even on this one-hop CRC link: its connections
        // (which it opens) do not ask for RFC 1146's "no checksum", so TCP data to B is
        // checksummed and its in-order segments wait unverified for a read
        // (`Tuning::tcp_verify_on_read`); A's listener still agrees to the option when a
        // SYN asks.
        let mut host_b = host.clone();
        host_b.stack.tuning.checksum_elision = false;
        let inbox_b = Arc::new(Mutex::new(VecDeque::new()));
        let inbox_a = Arc::new(Mutex::new(VecDeque::new()));
        let capture_a = Arc::new(Mutex::new(None));
        let (ib, ia, ca) = (inbox_b.clone(), inbox_a.clone(), capture_a.clone());
        let mut pair = Pair::with_devices(
            host,
            host_b,
            move |inner| {
                Box::new(Injector {
                    inner,
                    inbox: ia,
                    capture: ca,
                })
            },
            move |inner| {
                Box::new(Injector {
                    inner,
                    inbox: ib,
                    capture: Arc::default(),
                })
            },
        )
        .expect("the fixture's NIC configuration is valid");

        let listener_a = pair
            .a
            .tcp_listen((Ipv4Address::UNSPECIFIED, PORT_A), 8)
            .expect("A listens");
        let listener_b = pair
            .b
            .tcp_listen((Ipv4Address::UNSPECIFIED, PORT_B), FIXTURE_BACKLOG)
            .expect("B listens");

        let u_b = pair.b.udp_open();
        pair.b.udp_bind(u_b, ADDR_B, UDP_PORT_B).expect("bind");
        let u_b2 = pair.b.udp_open();
        pair.b
            .udp_bind(u_b2, Ipv4Address::UNSPECIFIED, UDP_PORT_B_CONNECTED)
            .expect("bind");
        pair.b
            .udp_connect(u_b2, ADDR_A, UDP_PORT_A)
            .expect("connect");
        let u_a = pair.a.udp_open();
        pair.a.udp_bind(u_a, ADDR_A, UDP_PORT_A).expect("bind");
        for (on_b, h) in [(true, u_b), (true, u_b2), (false, u_a)] {
            let stack = if on_b { &mut pair.b } else { &mut pair.a };
            stack
                .udp_set_recv_buffer(h, FIXTURE_UDP_RX)
                .expect("set the receive buffer");
        }

        let established = connect(&mut pair, listener_a);
        let fin_wait = connect(&mut pair, listener_a);
        let time_wait = connect(&mut pair, listener_a);
        pair.b.tcp_shutdown(fin_wait.0).expect("shutdown");
        pair.b.tcp_close(time_wait.0).expect("close");
        pair.a.tcp_close(time_wait.1).expect("close");
        let done = pair.run_until(Duration::from_secs(5), |p| {
            p.b.tcp_state(fin_wait.0) == Ok(State::FinWait2)
                && p.b.tcp_state(time_wait.0) == Ok(State::TimeWait)
        });
        assert!(done, "FIN-WAIT-2 and TIME-WAIT not reached");

        pair.b.add_static_arp(0, ADDR_NOBODY, MAC_NOBODY);
        let syn_sent = pair
            .b
            .tcp_connect((ADDR_NOBODY, 9))
            .expect("connect to nobody");
        pair.settle();
        assert_eq!(pair.b.tcp_state(syn_sent), Ok(State::SynSent));

        // Data in flight both ways; more from B than A's window takes, so B ends up
        // probing a zero window while the input arrives.
        let mut fixture = Fixture {
            pair,
            inbox: [inbox_b, inbox_a],
            capture_a,
            established,
            sent: (0, 0),
            fin_wait,
            syn_sent,
            listeners: (listener_b, listener_a),
            udp: [u_b, u_b2, u_a],
            connections: (4, 4),
        };
        fixture.send(true, FIXTURE_BUFFER + FIXTURE_BUFFER / 2);
        fixture.send(false, 3000);
        let now = fixture.pair.now();
        fixture.pair.b.poll(now);
        fixture
    }

    /// Offers `len` more bytes of the stream on the ESTABLISHED connection from B (or A);
    /// returns how many the send buffer took.
    fn send(&mut self, from_b: bool, len: usize) -> usize {
        let (stack, h, sent) = if from_b {
            (&mut self.pair.b, self.established.0, &mut self.sent.0)
        } else {
            (&mut self.pair.a, self.established.1, &mut self.sent.1)
        };
        let n = stack.tcp_send(h, &stream(from_b, *sent, len)).unwrap_or(0);
        *sent += n;
        n
    }

    /// The frame A sends at once on the ESTABLISHED connection when its application
    /// writes `len` more bytes (A's socket set to no-delay, A not polled, so that the
    /// segment acknowledges what A had and advertises the window it had), captured at
    /// A's device and not delivered: injected into B as it is, it is the in-order data
    /// segment B expects (header prediction's).
    pub fn next_data_from_a(&mut self, len: usize) -> Option<Vec<u8>> {
        *self.capture_a.lock().unwrap_or_else(|e| e.into_inner()) = Some(Vec::new());
        self.pair.a.tcp_set_nodelay(self.established.1, true).ok()?;
        self.send(false, len);
        let frames = self
            .capture_a
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()?;
        // To B's end of the ESTABLISHED connection (A's other connections share its port).
        let port_b = self.established_ports().0;
        frames.into_iter().find(|f| {
            let Some(Ok((ip, l4))) = f
                .get(ethernet::HEADER_LEN..)
                .map(|d| Ipv4Repr::parse_truncated(d, Checksum::Skip))
            else {
                return false;
            };
            tcp_wire::Packet::new_checked(l4).is_ok_and(|t| {
                ip.protocol == IpProtocol::Tcp
                    && t.dst_port() == port_b
                    && l4.len() - t.header_len() == len
            })
        })
    }

    /// Hands `frame` to host B (or A) as if its device had received it.
    pub fn inject(&mut self, to_b: bool, frame: &[u8], checksum: RxChecksum) {
        self.inject_split(to_b, frame, &[], checksum)
    }

    /// [`inject`](Self::inject) with the frame handed over in pieces, as a device that
    /// splits frames may: the window holds the bytes up to the first cut, each later
    /// piece is a fragment (`cuts` in order, each at most the frame's length).
    pub fn inject_split(&mut self, to_b: bool, frame: &[u8], cuts: &[usize], checksum: RxChecksum) {
        let head = cuts.first().map_or(frame.len(), |&c| c.min(frame.len()));
        let Ok(mut buf) = PacketBuf::from_slice(&frame[..head], 0) else {
            return;
        };
        let mut at = head;
        for end in cuts
            .iter()
            .skip(1)
            .map(|&c| c.min(frame.len()))
            .chain([frame.len()])
        {
            let end = end.max(at);
            buf.push_frag(crate::buf::ExtBuf::new(frame[at..end].to_vec()));
            at = end;
        }
        let frame = buf;
        self.inbox[usize::from(!to_b)]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back(RxFrame { frame, checksum });
    }

    /// The ports of the ESTABLISHED connection (B's, A's).
    pub fn established_ports(&self) -> (u16, u16) {
        let b = self
            .pair
            .b
            .tcp_local_addr(self.established.0)
            .map_or(0, |a| a.1);
        (b, PORT_A)
    }

    /// Checks every memory bound and count of both hosts; panics with what broke.
    pub fn check_bounds(&self) {
        for (name, stack, made) in [
            ("B", &self.pair.b, self.connections.0),
            ("A", &self.pair.a, self.connections.1),
        ] {
            check_stack_bounds(name, stack, made);
        }
        for (stack, h) in [
            (&self.pair.b, self.udp[0]),
            (&self.pair.b, self.udp[1]),
            (&self.pair.a, self.udp[2]),
        ] {
            let s = stack.udp_sockets.get(h).expect("the fixture's UDP socket");
            assert!(
                s.rx_bytes <= s.rx_limit,
                "UDP socket holds {} bytes, limit {}",
                s.rx_bytes,
                s.rx_limit
            );
        }
    }

    /// Sends more on the ESTABLISHED connection both ways and reads everything each end
    /// has been sent, checking every byte; panics if the connection does not carry it.
    pub fn check_established_works(&mut self) {
        let (hb, ha) = self.established;
        self.send(true, 1000);
        self.send(false, 1000);
        let mut got = (0usize, 0usize);
        let sent = self.sent;
        let mut buf = vec![0u8; 4096];
        let done = self.pair.run_until(Duration::from_secs(600), |p| {
            for (stack, h, got, from_b) in [
                (&mut p.a, ha, &mut got.0, true),
                (&mut p.b, hb, &mut got.1, false),
            ] {
                while let Ok(n) = stack.tcp_recv(h, &mut buf) {
                    if n == 0 {
                        break;
                    }
                    assert_eq!(
                        buf[..n],
                        stream(from_b, *got, n)[..],
                        "bytes altered on the ESTABLISHED connection"
                    );
                    *got += n;
                }
            }
            got == sent
        });
        assert!(
            done,
            "the ESTABLISHED connection stopped: received {got:?} of {sent:?}; states {:?} {:?}",
            self.pair.b.tcp_state(hb),
            self.pair.a.tcp_state(ha)
        );
        assert_eq!(self.pair.b.tcp_state(hb), Ok(State::Established));
        assert_eq!(self.pair.a.tcp_state(ha), Ok(State::Established));
    }
}

impl Default for Fixture {
    fn default() -> Self {
        Fixture::new()
    }
}

/// Opens a connection from B to A's listener; returns B's end and A's accepted end.
fn connect(pair: &mut Pair, listener_a: TcpHandle) -> (TcpHandle, TcpHandle) {
    let b = pair.b.tcp_connect((ADDR_A, PORT_A)).expect("B connects");
    let mut a = None;
    let done = pair.run_until(Duration::from_secs(5), |p| {
        if a.is_none() {
            a = p.a.tcp_accept(listener_a).ok();
        }
        a.is_some() && p.b.tcp_state(b) == Ok(State::Established)
    });
    assert!(done, "the fixture's connection did not open");
    (b, a.expect("accepted"))
}

/// The bounds one stack must keep whatever it receives.
fn check_stack_bounds(name: &str, stack: &Stack, connections_made: usize) {
    let r = stack.reassembler();
    let cap = r.config();
    assert!(
        r.bytes_held() <= cap.max_bytes,
        "{name}: reassembly holds {} bytes, cap {}",
        r.bytes_held(),
        cap.max_bytes
    );
    assert!(r.datagrams_held() <= cap.max_datagrams);
    let pool = stack.pool().stats();
    assert!(
        pool.bytes_outstanding <= pool.limit_bytes && pool.peak_bytes <= pool.limit_bytes,
        "{name}: pool holds {} bytes (peak {}), limit {}",
        pool.bytes_outstanding,
        pool.peak_bytes,
        pool.limit_bytes
    );
    assert!(stack.echo_replies.len() <= stack.config.echo_reply_queue);
    let mut backlogs = 0;
    let mut connections = 0;
    for i in 0..stack.tcp.slot_count() {
        match stack.tcp.at(i).map(|s| &s.kind) {
            Some(Kind::Listener(l)) => {
                // Half-open connections are bounded by the backlog, and so is the
                // accept queue (SYN cookies admit connections past the half-open ones).
                assert!(
                    l.embryonic <= l.backlog && l.accept_queue.len() <= l.backlog,
                    "{name}: listener holds {} half-open and {} queued, backlog {}",
                    l.embryonic,
                    l.accept_queue.len(),
                    l.backlog
                );
                backlogs += l.backlog;
            }
            Some(Kind::Stream(c)) => {
                connections += 1;
                let cfg = c.config();
                assert!(
                    c.rx.len() + c.rx.unverified() <= cfg.recv_buffer
                        && c.rx.capacity() <= cfg.recv_buffer,
                    "{name}: receive buffer holds {} and {} unverified of {} bytes",
                    c.rx.len(),
                    c.rx.unverified(),
                    cfg.recv_buffer
                );
                assert!(
                    c.tx.len() <= cfg.send_buffer && c.tx.capacity() <= cfg.send_buffer,
                    "{name}: send buffer holds {} of {} bytes",
                    c.tx.len(),
                    cfg.send_buffer
                );
                assert!(
                    c.ooo_range_count() <= cfg.max_ooo_ranges.max(1),
                    "{name}: {} out-of-order ranges, most {}",
                    c.ooo_range_count(),
                    cfg.max_ooo_ranges
                );
            }
            None => {}
        }
    }
    assert!(
        connections <= connections_made + 2 * backlogs,
        "{name}: {connections} connections from {connections_made} made and backlogs of {backlogs}"
    );
}

/// Whether `frame` could legitimately change the connection with TCP ports `ports`: a
/// TCP segment between those ports (whatever the addresses: a conservative reading), an
/// IPv4 fragment (it may complete such a segment), ARP (it may redirect a host's frames),
/// or an ICMP message other than an echo (an error may be about the connection). Judged
/// from the raw bytes, so that no parser's leniency decides it.
pub fn may_touch_connection(frame: &[u8], ports: (u16, u16)) -> bool {
    let Some(ethertype) = frame.get(12..14) else {
        return false;
    };
    match u16::from_be_bytes([ethertype[0], ethertype[1]]) {
        0x0806 => true,
        0x0800 => {
            let ip = &frame[14..];
            let (Some(&vihl), Some(flags)) = (ip.first(), ip.get(6..8)) else {
                return false;
            };
            if u16::from_be_bytes([flags[0], flags[1]]) & 0x3FFF != 0 {
                return true;
            }
            let ihl = usize::from(vihl & 0x0F) * 4;
            match ip.get(9) {
                Some(1) => !matches!(ip.get(ihl), Some(0) | Some(8)),
                Some(6) => match ip.get(ihl..ihl + 4) {
                    Some(p) => {
                        let sp = u16::from_be_bytes([p[0], p[1]]);
                        let dp = u16::from_be_bytes([p[2], p[3]]);
                        (sp, dp) == ports || (dp, sp) == ports
                    }
                    None => true,
                },
                _ => false,
            }
        }
        _ => false,
    }
}

/// Recomputes the IPv4 header checksum and, for a whole datagram, the TCP, UDP or ICMP
/// checksum, where the lengths allow; returns the raw sum of the transport bytes (as a
/// NIC reports it, [`RxChecksum::RawSum`]) when there are some.
pub fn fix_checksums(frame: &mut [u8]) -> Option<u16> {
    if frame.get(12..14) != Some(&[0x08, 0x00]) {
        return None;
    }
    let ip = &mut frame[14..];
    let ihl = usize::from(*ip.first()? & 0x0F) * 4;
    if ihl < ipv4::MIN_HEADER_LEN || ihl > ip.len() {
        return None;
    }
    ipv4::Packet::new_unchecked(&mut ip[..]).fill_checksum();
    let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    if total < ihl || total > ip.len() || u16::from_be_bytes([ip[6], ip[7]]) & 0x3FFF != 0 {
        return None;
    }
    let src = Ipv4Address::from_bytes(&ip[12..16]);
    let dst = Ipv4Address::from_bytes(&ip[16..20]);
    let protocol = ip[9];
    let l4 = &mut ip[ihl..total];
    match protocol {
        6 if l4.len() >= tcp_wire::HEADER_LEN => {
            tcp_wire::Packet::new_unchecked(&mut l4[..]).fill_checksum(src, dst)
        }
        17 if l4.len() >= udp_wire::HEADER_LEN => {
            let len = usize::from(u16::from_be_bytes([l4[4], l4[5]]));
            if (udp_wire::HEADER_LEN..=l4.len()).contains(&len) {
                udp_wire::Packet::new_unchecked(&mut l4[..]).fill_checksum(src, dst);
            }
        }
        1 if l4.len() >= icmpv4::HEADER_LEN => {
            icmpv4::Packet::new_unchecked(&mut l4[..]).fill_checksum()
        }
        _ => {}
    }
    Some(checksum::sum(l4))
}

/// Arbitrary frames into two hosts with sockets open and connections in several states;
/// see the [module documentation](self) for the input format and what is checked.
pub fn stack_ingress(data: &[u8]) {
    let mut fixture = Fixture::new();
    let ports = fixture.established_ports();
    let mut touched = false;
    let mut rest = data;
    let mut frames = 0;
    while let Some((head, after)) = rest.split_at_checked(INGRESS_HEADER) {
        if frames == INGRESS_MAX_FRAMES {
            break;
        }
        frames += 1;
        let flags = head[0];
        let len = usize::from(u16::from_be_bytes([head[1], head[2]])).min(after.len());
        let (frame, next) = after.split_at(len);
        rest = next;
        let to_b = flags & 1 == 0;
        let mut frame = frame.to_vec();
        let rx = match (flags >> 1) & 3 {
            0 => RxChecksum::None,
            1 => {
                fix_checksums(&mut frame);
                RxChecksum::None
            }
            2 => fix_checksums(&mut frame).map_or(RxChecksum::None, RxChecksum::RawSum),
            _ => {
                fix_checksums(&mut frame);
                RxChecksum::Verified
            }
        };
        touched |= may_touch_connection(&frame, ports);
        // Bits 5-7: the layout the device hands the frame in (whole, or cut at an eighth
        // of its length and, from 4 on, again halfway through the rest).
        let cut = usize::from(flags >> 5);
        let cuts = match cut {
            0 => Vec::new(),
            1..=3 => vec![frame.len() * cut / 8],
            _ => {
                let head = frame.len() * (cut - 3) / 8;
                vec![head, head + (frame.len() - head) / 2]
            }
        };
        fixture.inject_split(to_b, &frame, &cuts, rx);
        match (flags >> 3) & 3 {
            0 => {
                fixture.pair.settle();
            }
            1 => fixture.pair.run_for(Duration::from_millis(1)),
            2 => fixture.pair.run_for(Duration::from_millis(250)),
            _ => fixture.pair.run_for(Duration::from_secs(5)),
        }
        fixture.check_bounds();
    }
    if !touched {
        fixture.check_established_works();
        fixture.check_bounds();
    }
}

// ----------------------------------------------------------------------------------------
// Seeds: valid inputs of each kind, for a corpus and for the bounded run's mutations.

/// A frame from `src` to `dst` (addresses and MACs of the simulation) around `l4`.
fn frame_around(
    from_a: bool,
    protocol: IpProtocol,
    options: &[u8],
    l4_len: usize,
    fill: impl FnOnce(&mut [u8], Ipv4Address, Ipv4Address),
) -> Vec<u8> {
    let (src, dst, smac, dmac) = if from_a {
        (ADDR_A, ADDR_B, MAC_A, MAC_B)
    } else {
        (ADDR_B, ADDR_A, MAC_B, MAC_A)
    };
    let ip = Ipv4Repr {
        ident: 0x1234,
        options: Ipv4Options::new(options).expect("valid seed options"),
        ..crate::sim::ipv4_header(src, dst, protocol, l4_len)
    };
    crate::sim::ipv4_frame(smac, dmac, &ip, |b| fill(b, src, dst))
}

fn udp_frame(from_a: bool, dst_port: u16, payload: &[u8], options: &[u8]) -> Vec<u8> {
    let repr = UdpRepr {
        src_port: 40000,
        dst_port,
    };
    frame_around(
        from_a,
        IpProtocol::Udp,
        options,
        repr.buffer_len(payload.len()),
        |b, s, d| {
            repr.emit(
                &mut udp_wire::Packet::new_unchecked(b),
                s,
                d,
                payload,
                Checksum::Check,
            )
            .expect("seed UDP");
        },
    )
}

fn tcp_frame(from_a: bool, repr: &TcpRepr<'_>) -> Vec<u8> {
    frame_around(
        from_a,
        IpProtocol::Tcp,
        &[],
        repr.buffer_len(),
        |b, s, d| {
            repr.emit(
                &mut tcp_wire::Packet::new_unchecked(b),
                s,
                d,
                Checksum::Check,
            )
            .expect("seed TCP");
        },
    )
}

fn icmp_frame(from_a: bool, repr: &Icmpv4Repr<'_>) -> Vec<u8> {
    frame_around(
        from_a,
        IpProtocol::Icmp,
        &[],
        repr.buffer_len(),
        |b, _, _| {
            repr.emit(&mut icmpv4::Packet::new_unchecked(b), Checksum::Check)
                .expect("seed ICMP");
        },
    )
}

fn arp_frame(operation: ArpOperation) -> Vec<u8> {
    let repr = ArpRepr {
        operation,
        sender_hardware_addr: MAC_A,
        sender_protocol_addr: ADDR_A,
        target_hardware_addr: EthernetAddress([0; 6]),
        target_protocol_addr: ADDR_B,
    };
    let mut f = vec![0u8; ethernet::HEADER_LEN + repr.buffer_len()];
    EthernetRepr {
        source: MAC_A,
        destination: EthernetAddress::BROADCAST,
        ethertype: EtherType::Arp,
    }
    .emit(&mut ethernet::Frame::new_unchecked(&mut f[..]))
    .expect("seed Ethernet");
    repr.emit(&mut arp_wire::Packet::new_unchecked(
        &mut f[ethernet::HEADER_LEN..],
    ))
    .expect("seed ARP");
    f
}

/// A TCP segment with every option this stack knows.
fn full_tcp_repr(payload: &[u8], control: Control) -> TcpRepr<'_> {
    TcpRepr {
        src_port: 40001,
        dst_port: PORT_B,
        control,
        seq_number: SeqNumber(0x1000_0000),
        ack_number: (control != Control::Syn).then_some(SeqNumber(77)),
        psh: !payload.is_empty(),
        window_len: 4096,
        max_seg_size: (control == Control::Syn).then_some(1460),
        window_scale: (control == Control::Syn).then_some(7),
        sack_permitted: control == Control::Syn,
        timestamp: Some(TcpTimestamp { tsval: 5, tsecr: 9 }),
        sack_ranges: if control == Control::Syn {
            [None; 4]
        } else {
            [Some((100, 200)), Some((300, 400)), None, None]
        },
        payload,
        ..TcpRepr::default()
    }
}

/// Valid frames of every kind this stack handles, all addressed to host B.
fn frames_to_b() -> Vec<Vec<u8>> {
    let data: Vec<u8> = (0..200u8).collect();
    let echo = Icmpv4Repr::EchoRequest {
        ident: 7,
        seq_no: 1,
        data: &data[..56],
    };
    let invoking = udp_frame(false, 9, &data[..16], &[]);
    let unreachable = Icmpv4Repr::dst_unreachable(
        DstUnreachable::PortUnreachable,
        0,
        &invoking[ethernet::HEADER_LEN..],
    )
    .expect("seed quote");
    vec![
        udp_frame(true, UDP_PORT_B, &data, &[]),
        udp_frame(true, UDP_PORT_B, &data[..10], &[0x94, 0x04, 0x00, 0x00]),
        // Source routes through 198.18.0.99: complete (taken), then still going on.
        udp_frame(
            true,
            UDP_PORT_B,
            &data[..12],
            &[0x83, 7, 8, 198, 18, 0, 99, 1],
        ),
        udp_frame(
            true,
            UDP_PORT_B,
            &data[..12],
            &[0x89, 7, 4, 198, 18, 0, 99, 0],
        ),
        udp_frame(true, 9, &data[..30], &[]),
        tcp_frame(true, &full_tcp_repr(&[], Control::Syn)),
        tcp_frame(true, &full_tcp_repr(&data[..100], Control::None)),
        tcp_frame(true, &full_tcp_repr(&[], Control::Fin)),
        tcp_frame(true, &full_tcp_repr(&[], Control::Rst)),
        icmp_frame(true, &echo),
        icmp_frame(true, &unreachable),
        arp_frame(ArpOperation::Request),
        arp_frame(ArpOperation::Reply),
    ]
}

/// The data of the in-order segment from A that the [`stack_ingress`] seeds carry: with a
/// 66-byte frame header (Ethernet, IP, TCP with timestamps) a 264-byte frame, cut by the
/// input's layout 2 (two eighths of its length) exactly where its data starts, as a device
/// that splits headers from data hands it over.
const IN_ORDER_DATA: usize = 198;

/// The layout (bits 5-7 of a [`stack_ingress`] frame's flags) that cuts an in-order
/// segment of [`IN_ORDER_DATA`] bytes where its data starts.
const IN_ORDER_LAYOUT: u8 = 2;

/// The in-order data segment from A that B expects next on the ESTABLISHED connection of
/// a fixture as [`Fixture::new`] builds it (the fixture is deterministic, so every input's
/// fixture expects the same).
fn in_order_data_to_b() -> Vec<u8> {
    Fixture::new()
        .next_data_from_a(IN_ORDER_DATA)
        .expect("A sends the data it is given")
}

/// The two fragments of a UDP datagram from A to B, as frames.
fn fragment_frames() -> Vec<Vec<u8>> {
    let whole = udp_frame(true, UDP_PORT_B, &[0xAB; 64], &[]);
    let ip = &whole[ethernet::HEADER_LEN..];
    let payload = &ip[20..];
    [(0usize, 40usize, true), (40, payload.len(), false)]
        .iter()
        .map(|&(start, end, more_frags)| {
            let repr = Ipv4Repr {
                ident: 0x77,
                more_frags,
                frag_offset: start as u16,
                ..crate::sim::ipv4_header(ADDR_A, ADDR_B, IpProtocol::Udp, end - start)
            };
            crate::sim::ipv4_frame(MAC_A, MAC_B, &repr, |b| {
                b.copy_from_slice(&payload[start..end])
            })
        })
        .collect()
}

/// Valid inputs for the target `name`, built with the crate's emitters; empty for an
/// unknown name.
pub fn seeds(name: &str) -> Vec<Vec<u8>> {
    let frames = frames_to_b();
    let with_addresses = |l4: &[u8]| {
        let mut v = Vec::with_capacity(8 + l4.len());
        v.extend_from_slice(&ADDR_A.0);
        v.extend_from_slice(&ADDR_B.0);
        v.extend_from_slice(l4);
        v
    };
    let l4_of = |f: &Vec<u8>| {
        let ihl = usize::from(f[ethernet::HEADER_LEN] & 0x0F) * 4;
        f[ethernet::HEADER_LEN + ihl..].to_vec()
    };
    match name {
        "ethernet" => frames,
        "arp" => frames
            .iter()
            .filter(|f| f[12..14] == [0x08, 0x06])
            .map(|f| f[ethernet::HEADER_LEN..].to_vec())
            .collect(),
        "ipv4" => frames
            .iter()
            .chain(&fragment_frames())
            .filter(|f| f[12..14] == [0x08, 0x00])
            .map(|f| f[ethernet::HEADER_LEN..].to_vec())
            .collect(),
        "icmpv4" => frames
            .iter()
            .filter(|f| f[12..14] == [0x08, 0x00] && f[23] == 1)
            .map(l4_of)
            .collect(),
        "udp" => frames
            .iter()
            .filter(|f| f[12..14] == [0x08, 0x00] && f[23] == 17)
            .map(|f| with_addresses(&l4_of(f)))
            .collect(),
        "tcp" => frames
            .iter()
            .filter(|f| f[12..14] == [0x08, 0x00] && f[23] == 6)
            .map(|f| with_addresses(&l4_of(f)))
            .collect(),
        "pcap" => {
            let mut sink = crate::driver::pcap::PcapSink::new(Vec::new()).expect("memory");
            for (i, f) in frames.iter().enumerate() {
                sink.write_record(Instant::from_micros(i as u64 * 1500), f)
                    .expect("memory");
            }
            vec![sink.into_inner()]
        }
        "ipv4_reassembly" => vec![
            // Two fragments completing a datagram, then an overlap, then a timeout.
            vec![
                0x05, 0x04, 0x00, 0x00, 0x00, 0x40, 0x01, 0x04, 0x00, 0x08, 0x00, 0x20, 0x00, 0x05,
                0x00, 0x00, 0x00, 0x40, 0x01, 0x05, 0x00, 0x04, 0x00, 0x40, 0x01, 0x05, 0x00, 0x00,
                0x00, 0x10, 0x60,
            ],
        ],
        "tcp_assembler" => vec![vec![
            4, 0, 0, 10, 0, 5, 0, 0, 30, 0, 5, 3, 0, 0, 0, 0, 0, 0, 0, 0, 10, 2, 0, 0, 0, 0,
        ]],
        "stack_ingress" => {
            let mut input = Vec::new();
            for (i, f) in frames.iter().chain(&fragment_frames()).enumerate() {
                // Alternate the checksum treatments and the layouts, and let a little
                // time pass.
                let flags = (((i % 4) as u8) << 1) | (1 << 3) | (((i % 8) as u8) << 5);
                input.push(flags);
                input.extend_from_slice(&(f.len() as u16).to_be_bytes());
                input.extend_from_slice(f);
            }
            let mut one_each: Vec<Vec<u8>> = frames
                .iter()
                .map(|f| {
                    let mut v = vec![0];
                    v.extend_from_slice(&(f.len() as u16).to_be_bytes());
                    v.extend_from_slice(f);
                    v
                })
                .collect();
            one_each.push(input);
            // The next in-order segment on the ESTABLISHED connection, its data in a
            // fragment: B keeps it unverified, verifies it at its delayed-ACK timer (250 ms
            // later), as it is and with a data byte flipped (dropped there).
            let segment = in_order_data_to_b();
            let mut flipped = segment.clone();
            if let Some(last) = flipped.last_mut() {
                *last ^= 0x20;
            }
            for f in [segment, flipped] {
                let mut v = vec![(2 << 3) | (IN_ORDER_LAYOUT << 5)];
                v.extend_from_slice(&(f.len() as u16).to_be_bytes());
                v.extend_from_slice(&f);
                one_each.push(v);
            }
            one_each
        }
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_target_has_seeds_and_accepts_them() {
        for t in TARGETS {
            let seeds = seeds(t.name);
            assert!(!seeds.is_empty(), "no seeds for {}", t.name);
            for s in &seeds {
                (t.run)(s);
            }
        }
    }

    #[test]
    fn the_fixture_has_its_connections_in_their_states() {
        let f = Fixture::new();
        assert_eq!(f.pair.b.tcp_state(f.established.0), Ok(State::Established));
        assert_eq!(f.pair.b.tcp_state(f.fin_wait.0), Ok(State::FinWait2));
        assert_eq!(f.pair.a.tcp_state(f.fin_wait.1), Ok(State::CloseWait));
        assert_eq!(f.pair.b.tcp_state(f.syn_sent), Ok(State::SynSent));
        let time_wait = f
            .pair
            .b
            .tcp
            .connection_indices()
            .filter_map(|i| match f.pair.b.tcp.at(i).map(|s| &s.kind) {
                Some(Kind::Stream(c)) => Some(c.state()),
                _ => None,
            })
            .filter(|s| *s == State::TimeWait)
            .count();
        assert_eq!(time_wait, 1);
    }

    #[test]
    fn an_in_order_segment_in_a_fragment_is_verified_where_it_lies() {
        use crate::probe::Counter;
        let segment = in_order_data_to_b();
        assert_eq!(
            segment.len() * usize::from(IN_ORDER_LAYOUT) / 8,
            segment.len() - IN_ORDER_DATA,
            "the layout cuts where the data starts"
        );
        let counters = |f: &Fixture| {
            let c = f.pair.b.ledger().counters();
            [
                c.get(Counter::TcpSegmentsDeferred),
                c.get(Counter::TcpVerifiedUnread),
                c.get(Counter::TcpDropBadChecksum),
            ]
        };
        for corrupt in [false, true] {
            let mut frame = segment.clone();
            if corrupt {
                *frame.last_mut().unwrap() ^= 0x20;
            }
            let mut f = Fixture::new();
            let before = counters(&f);
            let hb = f.established.0;
            let queued = f.pair.b.tcp_recv_queued(hb);
            let cut = frame.len() - IN_ORDER_DATA;
            f.inject_split(true, &frame, &[cut], RxChecksum::None);
            // B alone: nothing else is on its way to it yet.
            let now = f.pair.now();
            f.pair.b.poll(now);
            f.check_bounds();
            assert_eq!(counters(&f)[0] - before[0], 1, "deferred");
            assert_eq!(
                f.pair.b.tcp_recv_queued(hb),
                queued,
                "not readable unverified"
            );
            f.pair.run_for(Duration::from_millis(250));
            f.check_bounds();
            let after = counters(&f);
            let got: Vec<u64> = after.iter().zip(before).map(|(a, b)| a - b).collect();
            let want = if corrupt { [1, 0, 1] } else { [1, 1, 0] };
            assert_eq!(
                got, want,
                "deferred, verified unread, failed (corrupt: {corrupt})"
            );
            let readable = queued.map(|q| q + if corrupt { 0 } else { IN_ORDER_DATA });
            assert_eq!(f.pair.b.tcp_recv_queued(hb), readable);
        }
    }

    /// Data injected into B that A never sent desynchronizes the connection: B's ACKs
    /// acknowledge what A never sent (A answers with a challenge ACK) and A's segments
    /// fall behind B's window (B answers each with an ACK). Without a limit on those
    /// answers the two ACK each other forever at one instant (the simulation's livelock
    /// panic); with it, a few segments in two seconds.
    #[test]
    fn injected_data_does_not_set_the_ends_acking_each_other_forever() {
        use crate::probe::Counter;
        let segment = in_order_data_to_b();
        let mut f = Fixture::new();
        let out = |f: &Fixture| {
            [&f.pair.a, &f.pair.b].map(|s| s.ledger().counters().get(Counter::TcpSegmentsOut))
        };
        let before = out(&f);
        f.inject_split(
            true,
            &segment,
            &[segment.len() - IN_ORDER_DATA],
            RxChecksum::None,
        );
        f.pair.run_for(Duration::from_secs(2));
        f.check_bounds();
        let after = out(&f);
        let sent = (after[0] - before[0]) + (after[1] - before[1]);
        assert!(sent < 40, "{sent} segments in two seconds");
        let suppressed = |s: &Stack| s.ledger().counters().get(Counter::TcpInvalidAcksSuppressed);
        assert!(suppressed(&f.pair.a) + suppressed(&f.pair.b) > 0);
    }

    #[test]
    fn the_established_connection_works_after_harmless_frames() {
        let mut f = Fixture::new();
        for frame in frames_to_b() {
            if !may_touch_connection(&frame, f.established_ports()) {
                f.inject(true, &frame, RxChecksum::None);
                f.pair.settle();
                f.check_bounds();
            }
        }
        f.check_established_works();
    }

    #[test]
    fn the_liveness_check_fails_when_the_connection_is_reset() {
        // What the check would report if a frame that may_touch_connection lets through
        // did reset the connection: here a RST at exactly RCV.NXT (RFC 5961 §3.2 accepts
        // it), which the check must not survive.
        let mut f = Fixture::new();
        let (b_port, a_port) = f.established_ports();
        f.pair.settle();
        let rcv_nxt = f
            .pair
            .b
            .tcp_connection(f.established.0)
            .expect("the connection")
            .rcv_nxt();
        let rst = TcpRepr {
            src_port: a_port,
            dst_port: b_port,
            control: Control::Rst,
            seq_number: rcv_nxt,
            ack_number: None,
            ..TcpRepr::default()
        };
        f.inject(true, &tcp_frame(true, &rst), RxChecksum::None);
        f.pair.settle();
        let outcome =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f.check_established_works()));
        assert!(
            outcome.is_err(),
            "a reset connection passed the liveness check"
        );
    }

    #[test]
    fn a_segment_on_the_connection_counts_as_touching_it() {
        let f = Fixture::new();
        let (b_port, a_port) = f.established_ports();
        let seg = TcpRepr {
            src_port: a_port,
            dst_port: b_port,
            ..full_tcp_repr(&[], Control::Rst)
        };
        assert!(may_touch_connection(
            &tcp_frame(true, &seg),
            (b_port, a_port)
        ));
        assert!(!may_touch_connection(
            &udp_frame(true, b_port, &[1], &[]),
            (b_port, a_port)
        ));
        assert!(may_touch_connection(
            &arp_frame(ArpOperation::Reply),
            (1, 2)
        ));
    }
}
