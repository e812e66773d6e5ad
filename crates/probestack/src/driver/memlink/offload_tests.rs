//! The memory NIC's offloads: transmit checksums, TCP segmentation and receive
//! verification, checked against etherparse (an independent parser and checksum) and the
//! RFC 1071 reference kernel.

use etherparse::{NetSlice, SlicedPacket, TransportSlice};

use super::*;
use crate::buf::{ExtBuf, TxOffload};
use crate::checksum::{self, Kernel};
use crate::probe::Ledger;
use crate::rng::Rng;
use crate::sim::{ipv4_frame, ipv4_header, ADDR_A, ADDR_B, MAC_A, MAC_B};
use crate::wire::ipv4::{IpProtocol, Ipv4Options, Ipv4Repr};
use crate::wire::tcp::{self as tcp_wire, Control, SeqNumber, TcpRepr, TcpTimestamp};
use crate::wire::udp::{self as udp_wire, UdpRepr};
use crate::wire::Checksum;

fn cx(ledger: &Ledger) -> DeviceContext<'_> {
    DeviceContext {
        now: Instant::ZERO,
        ledger,
    }
}

fn bytes(rng: &mut Rng, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    rng.fill(&mut v);
    v
}

/// A router-alert option (RFC 2113), so that the transport does not start at byte 34.
const ROUTER_ALERT: [u8; 4] = [0x94, 0x04, 0x00, 0x00];

fn ip(protocol: IpProtocol, l4_len: usize, ident: u16, options: &[u8]) -> Ipv4Repr {
    Ipv4Repr {
        ident,
        dont_frag: true,
        options: Ipv4Options::new(options).unwrap(),
        ..ipv4_header(ADDR_A, ADDR_B, protocol, l4_len)
    }
}

/// Where the transport header starts in a frame (from its IHL).
fn l4_start(frame: &[u8]) -> usize {
    14 + usize::from(frame[14] & 0x0F) * 4
}

/// Replaces the transport checksum of a finished frame with the pseudo-header seed over
/// the transport length, as the stack leaves it for the device.
fn to_partial(mut f: Vec<u8>, field: usize) -> Vec<u8> {
    let start = l4_start(&f);
    let l4_len = f.len() - start;
    let protocol = f[23];
    let seed = checksum::pseudo_header_v4(ADDR_A.0, ADDR_B.0, protocol, l4_len as u16);
    f[start + field..start + field + 2].copy_from_slice(&seed.to_be_bytes());
    f
}

fn tcp_repr<'a>(payload: &'a [u8], seq: u32) -> TcpRepr<'a> {
    TcpRepr {
        src_port: 40001,
        dst_port: 5201,
        seq_number: SeqNumber(seq),
        ack_number: Some(SeqNumber(0x0102_0304)),
        window_len: 4321,
        timestamp: Some(TcpTimestamp {
            tsval: 0xAABB_CCDD,
            tsecr: 0x1122_3344,
        }),
        payload,
        ..TcpRepr::default()
    }
}

/// A TCP/IPv4 frame with its checksums right.
fn tcp_frame(repr: &TcpRepr<'_>, ident: u16, options: &[u8]) -> Vec<u8> {
    ipv4_frame(
        MAC_A,
        MAC_B,
        &ip(IpProtocol::Tcp, repr.buffer_len(), ident, options),
        |b| {
            repr.emit(
                &mut tcp_wire::Packet::new_unchecked(b),
                ADDR_A,
                ADDR_B,
                Checksum::Check,
            )
            .unwrap();
        },
    )
}

/// A UDP/IPv4 frame with its checksums right.
fn udp_frame(payload: &[u8], options: &[u8]) -> Vec<u8> {
    let repr = UdpRepr {
        src_port: 40000,
        dst_port: 9,
    };
    ipv4_frame(
        MAC_A,
        MAC_B,
        &ip(IpProtocol::Udp, repr.buffer_len(payload.len()), 7, options),
        |b| {
            repr.emit(
                &mut udp_wire::Packet::new_unchecked(b),
                ADDR_A,
                ADDR_B,
                payload,
                Checksum::Check,
            )
            .unwrap();
        },
    )
}

/// A buffer holding `f` as the stack allocates one: headroom, and tailroom for the FCS.
fn buf(f: &[u8]) -> PacketBuf {
    let mut b = PacketBuf::new(f.len(), HEADROOM, 4).unwrap();
    b.data_mut().copy_from_slice(f);
    b
}

fn meta(f: &[u8], gso_size: u16) -> TxMeta {
    TxMeta::for_frame(
        f,
        TxOffload {
            l4_checksum: true,
            gso_size,
        },
    )
}

fn drain(nic: &mut MemoryNic, l: &Ledger) -> Vec<RxFrame> {
    let mut v = Vec::new();
    while let Some(f) = nic.receive(&cx(l)) {
        v.push(f);
    }
    v
}

/// The same ones'-complement zero: a computed checksum of 0 may be sent as `0xFFFF`.
fn same_checksum(sent: u16, computed: u16) -> bool {
    sent == computed || (computed == 0 && sent == 0xFFFF)
}

/// Checks a frame as it left the NIC with etherparse: the IPv4 header checksum, and the
/// TCP or UDP checksum, are the ones etherparse computes.
fn check_with_etherparse(frame: &[u8]) -> SlicedPacket<'_> {
    let sliced = SlicedPacket::from_ethernet(frame).expect("etherparse reads the frame");
    let Some(NetSlice::Ipv4(ip)) = &sliced.net else {
        panic!("no IPv4 header");
    };
    let h = ip.header().to_header();
    assert_eq!(h.header_checksum, h.calc_header_checksum(), "IPv4 header");
    match &sliced.transport {
        Some(TransportSlice::Tcp(t)) => {
            let want = t.calc_checksum_ipv4(h.source, h.destination).unwrap();
            assert!(
                same_checksum(t.checksum(), want),
                "TCP {:#x} {want:#x}",
                t.checksum()
            );
        }
        Some(TransportSlice::Udp(u)) => {
            let want = u.to_header().calc_checksum_ipv4(&h, u.payload()).unwrap();
            assert_eq!(u.checksum(), want, "UDP");
        }
        _ => panic!("neither TCP nor UDP"),
    }
    sliced
}

/// Whether a transport segment verifies by the RFC 1071 reference kernel.
fn verifies_by_reference(frame: &[u8]) -> bool {
    let start = l4_start(frame);
    let total = usize::from(u16::from_be_bytes([frame[16], frame[17]]));
    let l4 = &frame[start..14 + total];
    let pseudo = checksum::pseudo_header_v4(ADDR_A.0, ADDR_B.0, frame[23], l4.len() as u16);
    checksum::verifies(checksum::combine(
        pseudo,
        checksum::sum_with(Kernel::Rfc1071, l4),
    ))
}

fn offloads(ipv4: bool, l4: bool) -> ChecksumOffload {
    ChecksumOffload {
        ipv4_tx: ipv4,
        ipv4_rx: ipv4,
        l4_tx: l4,
        l4_rx: l4,
    }
}

fn nic(mode: CopyMode, mtu: usize, offload: ChecksumOffload, tso: bool) -> NicConfig {
    NicConfig {
        mtu,
        copy_mode: mode,
        checksum_offload: offload,
        tso,
        ..NicConfig::default()
    }
}

#[test]
fn tso_is_reported_only_with_transport_checksum_offload() {
    let caps = |c: NicConfig| MemoryLink::pair(c, NicConfig::default()).unwrap().0.caps();
    let dma = CopyMode::Dma;
    assert_eq!(
        caps(nic(dma, 1500, offloads(true, true), true)).tso_max,
        65535
    );
    assert_eq!(caps(nic(dma, 1500, offloads(true, false), true)).tso_max, 0);
    assert_eq!(caps(nic(dma, 1500, offloads(true, true), false)).tso_max, 0);
    let all = NicConfig::default().with_offloads();
    assert_eq!(caps(all).checksum_offload, offloads(true, true));
    assert_eq!(caps(all).tso_max, 65535);
    assert_eq!(all.mtu, 1500);
    assert_eq!(caps(NicConfig::default()).tso_max, 0);
}

#[test]
fn transport_checksums_are_completed_by_the_nic() {
    let mut rng = Rng::new(21);
    for mode in [CopyMode::Pio, CopyMode::Dma] {
        let cfg = nic(mode, 9000, offloads(false, true), false);
        let (mut a, mut b) = MemoryLink::pair(cfg, cfg).unwrap();
        let l = Ledger::new();
        let mut sent = 0;
        for len in [0, 1, 2, 3, 17, 100, 1000, 1459, 1460, 8943] {
            for options in [&[][..], &ROUTER_ALERT[..]] {
                let data = bytes(&mut rng, len);
                let f = to_partial(tcp_frame(&tcp_repr(&data, 99), 1, options), 16);
                a.transmit(buf(&f), meta(&f, 0), &cx(&l)).unwrap();
                let data = bytes(&mut rng, len);
                let u = to_partial(udp_frame(&data, options), 6);
                a.transmit(buf(&u), meta(&u, 0), &cx(&l)).unwrap();
                sent += 2;
            }
        }
        let got = drain(&mut b, &l);
        assert_eq!(got.len(), sent);
        for f in &got {
            check_with_etherparse(f.frame.data());
            assert!(verifies_by_reference(f.frame.data()));
        }
        let s = a.stats();
        assert_eq!(s.tx_csum_offloaded, sent as u64, "{mode:?}");
        assert_eq!((s.tx_csum_software, s.tx_csum_bad_request), (0, 0));
        assert_eq!((s.tx_super_frames, s.tx_segments), (0, 0));
    }
}

#[test]
fn a_udp_checksum_of_zero_is_sent_as_all_ones() {
    // Choose the last two bytes so that the whole sum is 0xFFFF: the checksum is 0, which
    // UDP cannot send (RFC 768), so the NIC must send 0xFFFF.
    let mut data = vec![0x5Au8; 64];
    data[62..].copy_from_slice(&[0, 0]);
    let f = udp_frame(&data, &[]);
    let l4 = &f[34..];
    let mut zeroed = l4.to_vec();
    zeroed[6..8].copy_from_slice(&[0, 0]);
    let pseudo = checksum::pseudo_header_v4(ADDR_A.0, ADDR_B.0, 17, l4.len() as u16);
    let rest = checksum::combine(pseudo, checksum::sum(&zeroed));
    data[62..].copy_from_slice(&(!rest).to_be_bytes());
    let f = to_partial(udp_frame(&data, &[]), 6);
    let cfg = nic(CopyMode::Dma, 1500, offloads(false, true), false);
    let (mut a, mut b) = MemoryLink::pair(cfg, NicConfig::default()).unwrap();
    let l = Ledger::new();
    a.transmit(buf(&f), meta(&f, 0), &cx(&l)).unwrap();
    let got = drain(&mut b, &l);
    let d = got[0].frame.data();
    assert_eq!(&d[40..42], &[0xFF, 0xFF]);
    check_with_etherparse(d);
    assert!(verifies_by_reference(d));
}

#[test]
fn without_the_offload_the_driver_completes_checksums_on_the_host() {
    for (offload, mode) in [
        (offloads(false, false), CopyMode::Pio),
        (offloads(false, false), CopyMode::Dma),
        (offloads(true, true), CopyMode::Dma),
    ] {
        let cfg = nic(mode, 1500, offload, false);
        let (mut a, mut b) = MemoryLink::pair(cfg, NicConfig::default()).unwrap();
        let l = Ledger::new();
        l.set_sample_every(1);
        for i in 0..10u8 {
            let _m = l.message(1000);
            let mut f = to_partial(tcp_frame(&tcp_repr(&[i; 1000], 5), 3, &[]), 16);
            f[24..26].copy_from_slice(&[0xDE, 0xAD]); // a stale IPv4 header checksum
            let m = TxMeta {
                ipv4_checksum: true,
                ..meta(&f, 0)
            };
            a.transmit(buf(&f), m, &cx(&l)).unwrap();
        }
        for f in drain(&mut b, &l) {
            check_with_etherparse(f.frame.data());
        }
        let s = a.stats();
        let software = !offload.l4_tx;
        assert_eq!(s.tx_csum_software, if software { 10 } else { 0 });
        assert_eq!(s.tx_csum_offloaded, if software { 0 } else { 10 });
        if Ledger::enabled() {
            // The host pays for what it does in software; the NIC's work is the device's.
            let snap = l.snapshot().merged();
            let host_sums = snap
                .cells
                .iter()
                .find(|c| c.layer == Layer::Driver && c.op == Op::Checksum)
                .map_or(0, |c| c.count);
            assert_eq!(host_sums, if software { 20 } else { 0 }, "{offload:?}");
            assert!(snap.device_ns > 0.0);
        }
    }
}

#[test]
fn a_checksum_request_outside_the_frame_is_counted_and_sent_as_it_is() {
    for offload in [offloads(false, true), offloads(false, false)] {
        let cfg = nic(CopyMode::Dma, 1500, offload, false);
        let (mut a, mut b) = MemoryLink::pair(cfg, NicConfig::default()).unwrap();
        let l = Ledger::new();
        let f = tcp_frame(&tcp_repr(b"abc", 5), 3, &[]);
        let bad = TxMeta {
            l4_checksum: Some((34, f.len() as u16)),
            ..TxMeta::default()
        };
        a.transmit(buf(&f), bad, &cx(&l)).unwrap();
        let odd = TxMeta {
            l4_checksum: Some((34, 15)),
            ..TxMeta::default()
        };
        a.transmit(buf(&f), odd, &cx(&l)).unwrap();
        assert_eq!(a.stats().tx_csum_bad_request, 2);
        for g in drain(&mut b, &l) {
            assert_eq!(g.frame.data(), &f[..]);
        }
    }
}

/// A TCP super-frame of `data` after headers with timestamps (and an IP option when
/// asked), FIN, PSH and CWR set, its checksum field holding the seed over the whole
/// length, as the stack hands it to a device that segments.
fn super_frame(data: &[u8], seq: u32, ident: u16, options: &[u8]) -> Vec<u8> {
    let repr = TcpRepr {
        control: Control::Fin,
        psh: true,
        cwr: true,
        ece: true,
        ..tcp_repr(data, seq)
    };
    to_partial(tcp_frame(&repr, ident, options), 16)
}

#[test]
fn tso_cuts_a_super_frame_as_linux_does() {
    let mut rng = Rng::new(77);
    for mode in [CopyMode::Pio, CopyMode::Dma] {
        for (mtu, options) in [(1500, &[][..]), (9000, &ROUTER_ALERT[..]), (576, &[][..])] {
            let cfg = nic(mode, mtu, offloads(true, true), true);
            let (mut a, mut b) = MemoryLink::pair(cfg, cfg).unwrap();
            let l = Ledger::new();
            let ip_len = 20 + options.len();
            let mss = mtu - ip_len - 32;
            // Whole segments per super-frame, within the largest datagram.
            let ks: [usize; 3] = if mtu > 1500 { [3, 5, 6] } else { [7, 8, 9] };
            // Three rounds, so that PIO device blocks of both sizes go round.
            for k in ks {
                let data = bytes(&mut rng, k * mss + 123);
                let seq = 0xFFFF_FFFF - 2 * mss as u32; // wraps in the third segment
                let ident = 0xFFFE; // wraps too
                let f = super_frame(&data, seq, ident, options);
                assert!(f.len() <= 14 + 65535);
                let m = meta(&f, mss as u16);
                a.transmit(buf(&f), m, &cx(&l)).unwrap();
                let n = data.len().div_ceil(mss);
                let got = drain(&mut b, &l);
                assert_eq!(got.len(), n, "{mode:?} mtu {mtu}");
                let mut joined = Vec::new();
                for (i, g) in got.iter().enumerate() {
                    let d = g.frame.data();
                    assert!(d.len() <= 14 + mtu);
                    assert_eq!(&d[..14], &f[..14], "Ethernet header");
                    let sliced = check_with_etherparse(d);
                    let Some(NetSlice::Ipv4(ip)) = &sliced.net else {
                        unreachable!()
                    };
                    let h = ip.header().to_header();
                    assert_eq!(h.identification, ident.wrapping_add(i as u16));
                    assert!(h.dont_fragment);
                    assert_eq!(h.options.as_slice(), options);
                    assert_eq!(usize::from(h.total_len), d.len() - 14);
                    let Some(TransportSlice::Tcp(t)) = &sliced.transport else {
                        panic!("no TCP")
                    };
                    let last = i + 1 == n;
                    assert_eq!(t.sequence_number(), seq.wrapping_add((i * mss) as u32));
                    assert_eq!(t.acknowledgment_number(), 0x0102_0304);
                    assert!(t.ack() && t.ece());
                    assert_eq!(t.fin(), last, "FIN on the last segment only");
                    assert_eq!(t.psh(), last, "PSH on the last segment only");
                    assert_eq!(t.cwr(), i == 0, "CWR on the first segment only");
                    assert_eq!(t.window_size(), 4321);
                    assert_eq!(t.options(), &f[l4_start(&f) + 20..l4_start(&f) + 32]);
                    assert_eq!(
                        t.payload().len(),
                        if last { data.len() - i * mss } else { mss }
                    );
                    joined.extend_from_slice(t.payload());
                    assert!(verifies_by_reference(d));
                    assert_eq!(g.checksum, RxChecksum::Verified);
                }
                assert_eq!(joined, data);
            }
            let (sa, sb) = (a.stats(), b.stats());
            let segments = ks.iter().map(|k| *k as u64 + 1).sum::<u64>();
            assert_eq!((sa.tx_super_frames, sa.tx_segments), (3, segments));
            assert_eq!(sa.tx_frames, segments);
            assert_eq!(sa.tx_csum_offloaded, segments);
            assert_eq!((sb.rx_frames, sb.rx_bytes), (sa.tx_frames, sa.tx_bytes));
            assert_eq!(sb.rx_csum_verified, segments);
            assert_eq!(l.counters().get(Counter::DriverFramesOut), 3);
        }
    }
}

/// `f` as a zero-copy send hands it over: the headers and `in_window` data bytes in the
/// stack's buffer, the rest in two fragments (loaned memory).
fn loaned(f: &[u8], headers: usize, in_window: usize) -> PacketBuf {
    let split = headers + in_window;
    let mut b = buf(&f[..split]);
    let mid = split + (f.len() - split) / 3;
    b.push_frag(ExtBuf::new(f[split..mid].to_vec()));
    b.push_frag(ExtBuf::new(f[mid..].to_vec()));
    b
}

/// A received frame's bytes: its window, then its fragments.
fn whole(frame: &PacketBuf) -> Vec<u8> {
    let mut v = frame.data().to_vec();
    for f in frame.frags() {
        v.extend_from_slice(f);
    }
    v
}

/// A super-frame whose data lies in fragments (a zero-copy send) with the transport
/// checksum offloaded: from a page of data per segment on, the DMA NIC cuts it into
/// segments that keep their data in those fragments, read for the checksum and the FCS
/// and never copied, and a receiving NIC takes them as they are (header split copying
/// each payload into its pages); below a page it copies each segment, as it gathers an
/// ordinary frame. Either way every segment is right by etherparse, the receiving NIC
/// verifies it, and the data arrives whole; a PIO receiver gathers what came by
/// reference.
#[test]
fn a_loaned_super_frame_is_cut_by_reference_from_a_page_a_segment() {
    let mut rng = Rng::new(78);
    let headers = 14 + 20 + 32;
    for (mtu, k, rx_mode, split) in [
        (9000, 3, CopyMode::Dma, false),
        (9000, 3, CopyMode::Dma, true),
        (16384, 1, CopyMode::Dma, true),
        (9000, 2, CopyMode::Pio, false),
        (1500, 5, CopyMode::Dma, true),
    ] {
        let what = format!("mtu {mtu}, {k} segments, {rx_mode:?}, split {split}");
        let tx = nic(CopyMode::Dma, mtu, offloads(true, true), true);
        let rx = NicConfig {
            header_split: split,
            ..nic(rx_mode, mtu, offloads(true, true), true)
        };
        let (mut a, mut b) = MemoryLink::pair(tx, rx).unwrap();
        let l = Ledger::new();
        let mss = mtu - 20 - 32;
        // k - 1 whole segments and a short one: a single one is not cut at all.
        let data = bytes(&mut rng, (k - 1) * mss + mss / 2);
        let f = super_frame(&data, 1000, 7, &[]);
        a.transmit(loaned(&f, headers, 100), meta(&f, mss as u16), &cx(&l))
            .unwrap();
        let got = drain(&mut b, &l);
        assert_eq!(got.len(), k, "{what}");
        let by_reference = mss >= PAGE_SIZE;
        let mut joined = Vec::new();
        for g in &got {
            let d = whole(&g.frame);
            let sliced = check_with_etherparse(&d);
            assert!(verifies_by_reference(&d), "{what}");
            assert_eq!(g.checksum, RxChecksum::Verified, "{what}");
            let Some(TransportSlice::Tcp(t)) = &sliced.transport else {
                panic!("no TCP")
            };
            joined.extend_from_slice(t.payload());
            if split && rx_mode == CopyMode::Dma && t.payload().len() >= PAGE_SIZE {
                // The payload in the NIC's own page-aligned memory, after the headers.
                assert_eq!(g.frame.len(), headers, "{what}");
                assert!(g.frame.frags()[0].is_page_aligned(), "{what}");
            } else if by_reference && rx_mode == CopyMode::Dma {
                assert!(g.frame.has_frags(), "{what}");
            } else {
                assert!(!g.frame.has_frags(), "{what}");
            }
        }
        assert_eq!(joined, data, "{what}");
        let (sa, sb) = (a.stats(), b.stats());
        let passed = if by_reference { k as u64 } else { 0 };
        assert_eq!(sa.tx_fragments_passed, passed, "{what}");
        assert_eq!(sa.tx_csum_offloaded, k as u64, "{what}");
        let gathered = if by_reference && rx_mode == CopyMode::Pio {
            k as u64
        } else {
            0
        };
        assert_eq!(sb.rx_gathered, gathered, "{what}");
        assert_eq!(sb.rx_csum_verified, k as u64, "{what}");
    }
}

#[test]
fn a_super_frame_that_needs_no_cutting_is_an_ordinary_frame() {
    let cfg = nic(CopyMode::Dma, 1500, offloads(true, true), true);
    let (mut a, mut b) = MemoryLink::pair(cfg, cfg).unwrap();
    let l = Ledger::new();
    for len in [1000, 1448] {
        let f = super_frame(&vec![3u8; len], 1, 1, &[]);
        a.transmit(buf(&f), meta(&f, 1448), &cx(&l)).unwrap();
    }
    let got = drain(&mut b, &l);
    assert_eq!(got.len(), 2);
    for g in &got {
        let sliced = check_with_etherparse(g.frame.data());
        let Some(TransportSlice::Tcp(t)) = &sliced.transport else {
            panic!("no TCP")
        };
        assert!(t.fin() && t.psh() && t.cwr(), "flags untouched");
    }
    assert_eq!(a.stats().tx_super_frames, 0);
    assert_eq!(a.stats().tx_csum_offloaded, 2);
}

#[test]
fn what_tso_refuses() {
    let l = Ledger::new();
    let data = vec![1u8; 10_000];
    let f = super_frame(&data, 1, 1, &[]);
    // No TSO: a super-frame is just too long for the MTU.
    let plain = nic(CopyMode::Dma, 1500, offloads(true, true), false);
    let (mut a, _b) = MemoryLink::pair(plain, plain).unwrap();
    assert_eq!(
        a.transmit(buf(&f), meta(&f, 1448), &cx(&l)),
        Err(DeviceError::TooLarge {
            len: f.len(),
            max: 1514
        })
    );
    let cfg = nic(CopyMode::Dma, 1500, offloads(true, true), true);
    let (mut a, _b) = MemoryLink::pair(cfg, cfg).unwrap();
    // Segments that would not fit the MTU.
    assert_eq!(
        a.transmit(buf(&f), meta(&f, 1449), &cx(&l)),
        Err(DeviceError::TooLarge {
            len: 14 + 20 + 32 + 1449,
            max: 1514
        })
    );
    // Not TCP, or no checksum request where TCP's field is: nothing to cut.
    let u = udp_frame(&data, &[]);
    assert_eq!(
        a.transmit(buf(&u), meta(&u, 1448), &cx(&l)),
        Err(DeviceError::TooLarge {
            len: u.len(),
            max: 1514
        })
    );
    let no_request = TxMeta {
        gso_size: 1448,
        ..TxMeta::default()
    };
    assert!(a.transmit(buf(&f), no_request, &cx(&l)).is_err());
    // Longer than the largest datagram.
    let mut huge = super_frame(&[0u8; 65535 - 52], 1, 1, &[]);
    huge.extend_from_slice(&[0; 10]);
    assert!(a.transmit(buf(&huge), meta(&huge, 1448), &cx(&l)).is_err());
    assert_eq!(a.stats().tx_too_large, 4);
    assert_eq!(a.stats().tx_frames, 0);
}

#[test]
fn a_super_frame_takes_one_ring_slot_and_waits_for_receive_room() {
    let tx = NicConfig {
        tx_queue_depth: 2,
        ..nic(CopyMode::Dma, 1500, offloads(true, true), true)
    };
    let rx = NicConfig {
        rx_queue_depth: 16,
        ..NicConfig::default()
    };
    let (mut a, mut b) = MemoryLink::pair(tx, rx).unwrap();
    let l = Ledger::new();
    let f = super_frame(&[9u8; 10 * 1448], 1, 1, &[]);
    for _ in 0..2 {
        a.transmit(buf(&f), meta(&f, 1448), &cx(&l)).unwrap();
    }
    assert!(!a.tx_ready());
    assert_eq!(
        a.transmit(buf(&f), meta(&f, 1448), &cx(&l)),
        Err(DeviceError::QueueFull)
    );
    // Ten segments fit the receive queue of 16; the next ten wait in the ring.
    assert!(b.take_notification(&cx(&l)));
    assert_eq!((b.rx_pending(), b.in_flight()), (10, 1));
    assert!(a.tx_ready());
    let first = drain(&mut b, &l);
    assert_eq!(
        first.len(),
        20,
        "the second super-frame follows once there is room"
    );
    assert_eq!(b.stats().rx_overrun, 0);
}

#[test]
fn a_receive_queue_shallower_than_a_super_frame_overruns() {
    let tx = nic(CopyMode::Dma, 1500, offloads(true, true), true);
    let rx = NicConfig {
        rx_queue_depth: 4,
        ..NicConfig::default()
    };
    let (mut a, mut b) = MemoryLink::pair(tx, rx).unwrap();
    let l = Ledger::new();
    let f = super_frame(&[9u8; 10 * 1448], 1, 1, &[]);
    a.transmit(buf(&f), meta(&f, 1448), &cx(&l)).unwrap();
    assert_eq!(drain(&mut b, &l).len(), 4);
    assert_eq!(b.stats().rx_overrun, 6);
    assert!(b.take_notification(&cx(&l)));
    assert_eq!(b.next_deadline(), None, "nothing left to wait for");
}

/// What a NIC with `offload` reports for each frame, and its stats.
fn receive_with(offload: ChecksumOffload, frames: &[Vec<u8>]) -> (Vec<RxChecksum>, NicStats) {
    let rx = nic(CopyMode::Dma, 9000, offload, false);
    let (mut a, mut b) = MemoryLink::pair(
        NicConfig {
            mtu: 9000,
            ..NicConfig::default()
        },
        rx,
    )
    .unwrap();
    let l = Ledger::new();
    for f in frames {
        a.transmit(buf(f), TxMeta::default(), &cx(&l)).unwrap();
    }
    let got: Vec<_> = drain(&mut b, &l).iter().map(|f| f.checksum).collect();
    assert_eq!(got.len(), frames.len());
    (got, b.stats())
}

#[test]
fn the_receiving_nic_verifies_what_it_can_and_vouches_for_nothing_else() {
    use RxChecksum::{None as Unverified, Verified};
    let tcp = tcp_frame(&tcp_repr(&[7u8; 999], 1), 1, &[]);
    let tcp_opt = tcp_frame(&tcp_repr(&[7u8; 100], 1), 1, &ROUTER_ALERT);
    let udp = udp_frame(&[8u8; 1001], &[]);
    let mut udp_zero = udp_frame(&[8u8; 33], &[]);
    udp_zero[40..42].copy_from_slice(&[0, 0]);
    let icmp = ipv4_frame(MAC_A, MAC_B, &ip(IpProtocol::Icmp, 8, 1, &[]), |b| {
        b.copy_from_slice(&[8, 0, 0xF7, 0xFF, 0, 0, 0, 0]);
    });
    let mut padded = tcp_frame(&tcp_repr(&[], 1), 1, &[]);
    padded.extend_from_slice(&[0xEE; 10]); // Ethernet padding after the datagram
    let mut bad_tcp = tcp.clone();
    bad_tcp[200] ^= 0x10;
    let mut bad_ip = udp.clone();
    bad_ip[22] ^= 0x01; // the TTL
    let mut fragment = udp.clone();
    fragment[20] = 0x20; // more fragments
    fill_ip_checksum(&mut fragment);
    let mut udp_long = udp.clone();
    udp_long[38..40].copy_from_slice(&100u16.to_be_bytes()); // a UDP length short of the IP's
    let arp = {
        let mut f = vec![0u8; 42];
        f[12..14].copy_from_slice(&[0x08, 0x06]);
        f
    };
    let frames = [
        tcp.clone(),
        tcp_opt,
        udp.clone(),
        udp_zero,
        icmp.clone(),
        padded,
        bad_tcp.clone(),
        bad_ip,
        fragment,
        udp_long,
        arp,
    ];
    let (got, s) = receive_with(offloads(true, true), &frames);
    assert_eq!(
        got,
        [
            Verified, Verified, Verified, Verified, Verified, Verified, Unverified, Unverified,
            Unverified, Unverified, Unverified
        ]
    );
    assert_eq!((s.rx_csum_verified, s.rx_csum_bad), (6, 2));

    // The IPv4 header only: nothing transport-bearing is vouched for; ICMP is.
    let (got, s) = receive_with(offloads(true, false), &[tcp.clone(), udp.clone(), icmp]);
    assert_eq!(got, [Unverified, Unverified, Verified]);
    assert_eq!(s.rx_csum_verified, 1);
    // The transport only: the raw sum, since the stack must still check the IPv4 header.
    let rx = ChecksumOffload {
        l4_rx: true,
        ..ChecksumOffload::default()
    };
    let (got, s) = receive_with(rx, &[tcp.clone(), bad_tcp.clone()]);
    for (g, f) in got.iter().zip([&tcp, &bad_tcp]) {
        assert_eq!(*g, RxChecksum::RawSum(checksum::sum(&f[34..])));
    }
    assert_eq!((s.rx_csum_verified, s.rx_csum_bad), (0, 1));
    // Neither: nothing.
    let (got, _) = receive_with(ChecksumOffload::default(), &[tcp, udp]);
    assert_eq!(got, [Unverified, Unverified]);
}

fn fill_ip_checksum(f: &mut [u8]) {
    f[24..26].copy_from_slice(&[0, 0]);
    let c = checksum::ipv4_header_checksum(&f[14..34]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
}

#[test]
fn corruption_with_the_crc_recomputed_is_never_vouched_for() {
    for mode in [CopyMode::Pio, CopyMode::Dma] {
        let rx = NicConfig {
            rx_faults: FaultConfig {
                flip_passed: 1.0,
                ..FaultConfig::seeded(31)
            },
            rx_queue_depth: 4096,
            ..nic(mode, 1500, offloads(true, true), false)
        };
        let tx = NicConfig {
            tx_queue_depth: 4096,
            ..NicConfig::default()
        };
        let (mut a, mut b) = MemoryLink::pair(tx, rx).unwrap();
        let l = Ledger::new();
        let mut rng = Rng::new(8);
        let mut sent = Vec::new();
        for i in 0..1000 {
            let len = 1 + i % 1400;
            let data = bytes(&mut rng, len);
            let f = if i % 2 == 0 {
                tcp_frame(&tcp_repr(&data, i as u32), 1, &[])
            } else {
                udp_frame(&data, &[])
            };
            a.transmit(buf(&f), TxMeta::default(), &cx(&l)).unwrap();
            sent.push(f);
        }
        let got = drain(&mut b, &l);
        assert_eq!(got.len(), sent.len());
        let mut must_be_bad = 0;
        for (g, s) in got.iter().zip(&sent) {
            assert_ne!(g.checksum, RxChecksum::Verified, "{mode:?}");
            let at = (g.frame.data().iter().zip(s))
                .position(|(x, y)| x != y)
                .unwrap();
            // A flip in the version or header length makes the frame unreadable, and one
            // in UDP's length makes it disagree with IPv4's: the NIC leaves those to the
            // stack (which drops them as malformed) without calling them bad. Any other
            // flip fails a checksum.
            let udp = s[23] == 17;
            if at != 14 && !(udp && (at == 38 || at == 39)) {
                must_be_bad += 1;
            }
        }
        let bad = b.stats().rx_csum_bad;
        assert!((must_be_bad..=1000).contains(&bad), "{bad} {must_be_bad}");
        assert!(must_be_bad > 950);
        assert_eq!(b.stats().rx_csum_verified, 0);
    }
}

#[test]
fn a_seed_adjusted_for_a_length_is_the_seed_for_that_length() {
    let mut rng = Rng::new(5);
    for _ in 0..100_000 {
        let mut a = [0u8; 4];
        let mut b = [0u8; 4];
        rng.fill(&mut a);
        rng.fill(&mut b);
        let (old, new) = (rng.below(65536) as u16, rng.below(65536) as u16);
        let adjusted =
            super::offload::adjust_seed(checksum::pseudo_header_v4(a, b, 6, old), old, new);
        let want = checksum::pseudo_header_v4(a, b, 6, new);
        // Equal as ones'-complement numbers (0 and 0xFFFF are the same zero).
        assert_eq!(adjusted % 0xFFFF, want % 0xFFFF, "{a:?} {b:?} {old} {new}");
    }
}

/// The one-pass copy of a range that spans a frame's window and its fragments (a
/// zero-copy super-frame cut straight from the loan) gives the bytes and the sum the
/// contiguous frame gives, at every alignment of the range and the pieces.
#[test]
fn copy_and_sum_over_a_frames_parts_matches_the_contiguous_frame() {
    let mut rng = Rng::new(9);
    for _ in 0..200 {
        let window = 1 + (rng.next_u32() % 64) as usize;
        let mut whole = vec![0u8; window];
        rng.fill(&mut whole);
        let mut frame = PacketBuf::new(window, 0, 0).unwrap();
        frame.data_mut().copy_from_slice(&whole);
        for _ in 0..1 + rng.next_u32() % 4 {
            let mut part = vec![0u8; 1 + (rng.next_u32() % 300) as usize];
            rng.fill(&mut part);
            whole.extend_from_slice(&part);
            frame.push_frag(ExtBuf::new(part));
        }
        let start = (rng.next_u32() as usize) % whole.len();
        let end = start + (rng.next_u32() as usize) % (whole.len() - start + 1);
        let mut out = vec![0u8; end - start];
        let sum = copy_and_sum_parts(&frame, start..end, &mut out);
        assert_eq!(out, &whole[start..end]);
        assert_eq!(sum, checksum::sum(&whole[start..end]), "{start}..{end}");
    }
}

/// Checking a frame whose payload header split moved out (with the moved bytes' sum, taken
/// as they were copied) gives the verdict checking the whole frame gives: intact, a
/// corrupted payload, a corrupted header, each offload mode, payloads of odd length.
#[test]
fn checking_a_split_frame_with_its_payloads_sum_agrees_with_the_whole_frame() {
    let mut rng = Rng::new(31);
    for len in [4096, 4097, 5000, 8999] {
        let payload = bytes(&mut rng, len);
        let whole = tcp_frame(&tcp_repr(&payload, 7), 1, &[]);
        let mut bad_payload = whole.clone();
        let last = bad_payload.len() - 1;
        bad_payload[last] ^= 0x10;
        let mut bad_header = whole.clone();
        bad_header[l4_start(&whole) + 4] ^= 0x01;
        for frame in [whole, bad_payload, bad_header] {
            for (ipv4, l4) in [(true, true), (false, true), (true, false)] {
                let o = offloads(ipv4, l4);
                let at = frame.len() - len;
                let moved = (len, checksum::sum(&frame[at..]));
                assert_eq!(
                    super::offload::check_received(&frame[..at], Some(moved), o),
                    super::offload::check_received(&frame, None, o),
                    "payload {len}, offloads {ipv4}/{l4}"
                );
            }
        }
    }
}

/// Completing a checksum with the sum of the bytes gathered after the header (taken as
/// they were copied in) writes what completing it over the whole frame writes; a sum that
/// does not start after the field is not used.
#[test]
fn completing_a_checksum_with_a_gathered_sum_agrees_with_reading_everything() {
    let mut rng = Rng::new(77);
    for len in [1, 2, 3, 1460, 4097, 9000] {
        let payload = bytes(&mut rng, len);
        let field = 16;
        let whole = to_partial(tcp_frame(&tcp_repr(&payload, 3), 9, &[]), field);
        let start = l4_start(&whole);
        let mut plain = whole.clone();
        let mut fused = whole.clone();
        assert!(super::offload::complete_checksum(&mut plain, start, field));
        let from = whole.len() - len;
        let rest = checksum::sum(&whole[from..]);
        assert!(super::offload::complete_checksum_summed(
            &mut fused,
            start,
            field,
            Some((from, rest))
        ));
        assert_eq!(plain, fused, "payload {len}");
        assert!(verifies_by_reference(&plain));
        // A sum from inside the header is ignored: the whole frame is read.
        let mut guarded = whole.clone();
        assert!(super::offload::complete_checksum_summed(
            &mut guarded,
            start,
            field,
            Some((start + 4, 0x1234))
        ));
        assert_eq!(plain, guarded);
    }
}
