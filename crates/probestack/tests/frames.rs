//! Whole frames, Ethernet to transport, checked against an independent parser: frames we
//! emit parse with etherparse and agree with its checksums, and frames etherparse builds
//! parse with ours and verify.

use etherparse::{PacketBuilder, SlicedPacket, TransportSlice};
use probestack::sim::{ipv4_frame, ipv4_header};
use probestack::wire::ethernet::{self, EtherType, EthernetAddress, EthernetRepr};
use probestack::wire::icmpv4::{self, Icmpv4Repr};
use probestack::wire::ipv4::{self, IpProtocol, Ipv4Options, Ipv4Repr};
use probestack::wire::tcp::{self, AltChecksum, Control, SeqNumber, TcpRepr, TcpTimestamp};
use probestack::wire::udp::{self, UdpRepr};
use probestack::wire::{Checksum, Ipv4Address};
use proptest::prelude::*;

const SRC: Ipv4Address = Ipv4Address::new(198, 18, 0, 1);
const DST: Ipv4Address = Ipv4Address::new(198, 18, 0, 2);
const MAC_A: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 1]);
const MAC_B: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 2]);

/// Builds Ethernet + IPv4 around a transport message that `fill` writes into its slice.
fn frame(
    protocol: IpProtocol,
    l4_len: usize,
    options: &[u8],
    fill: impl FnOnce(&mut [u8]),
) -> Vec<u8> {
    let ip = Ipv4Repr {
        ident: 0x1234,
        dont_frag: true,
        options: Ipv4Options::new(options).unwrap(),
        ..ipv4_header(SRC, DST, protocol, l4_len)
    };
    ipv4_frame(MAC_A, MAC_B, &ip, fill)
}

/// The IPv4 header checksum etherparse computes for the frame equals the one we wrote.
fn check_ip(sliced: &SlicedPacket<'_>) -> etherparse::Ipv4Header {
    let Some(etherparse::NetSlice::Ipv4(ip)) = &sliced.net else {
        panic!("etherparse saw no IPv4 header");
    };
    let h = ip.header().to_header();
    assert_eq!(h.calc_header_checksum(), h.header_checksum);
    h
}

fn udp_frame(payload: &[u8], options: &[u8]) -> Vec<u8> {
    let repr = UdpRepr {
        src_port: 40000,
        dst_port: 9,
    };
    frame(
        IpProtocol::Udp,
        repr.buffer_len(payload.len()),
        options,
        |b| {
            repr.emit(
                &mut udp::Packet::new_unchecked(b),
                SRC,
                DST,
                payload,
                Checksum::Check,
            )
            .unwrap();
        },
    )
}

fn tcp_repr(payload: &[u8]) -> TcpRepr<'_> {
    TcpRepr {
        src_port: 40001,
        dst_port: 5201,
        control: Control::None,
        seq_number: SeqNumber(0xFFFF_FF00),
        ack_number: Some(SeqNumber(7)),
        psh: true,
        window_len: 65535,
        timestamp: Some(TcpTimestamp { tsval: 1, tsecr: 2 }),
        sack_ranges: [Some((10, 20)), Some((30, 40)), None, None],
        alt_checksum_data: Some(&[0xAB, 0xCD]),
        payload,
        ..TcpRepr::default()
    }
}

fn tcp_frame(repr: &TcpRepr<'_>) -> Vec<u8> {
    frame(IpProtocol::Tcp, repr.buffer_len(), &[], |b| {
        repr.emit(
            &mut tcp::Packet::new_unchecked(b),
            SRC,
            DST,
            Checksum::Check,
        )
        .unwrap();
    })
}

proptest! {
    #[test]
    fn udp_frames_agree_with_etherparse(
        payload in proptest::collection::vec(any::<u8>(), 0..1500),
        with_option in any::<bool>(),
    ) {
        // A router-alert option (RFC 2113) when asked, so IHL > 5 is exercised too.
        let options: &[u8] = if with_option { &[0x94, 0x04, 0x00, 0x00] } else { &[] };
        let buf = udp_frame(&payload, options);
        let sliced = SlicedPacket::from_ethernet(&buf).unwrap();
        let ip = check_ip(&sliced);
        let Some(TransportSlice::Udp(u)) = &sliced.transport else { panic!("no UDP") };
        let want = u.to_header().calc_checksum_ipv4(&ip, u.payload()).unwrap();
        prop_assert_eq!(u.checksum(), want);
        prop_assert_eq!(u.payload(), &payload[..]);
    }

    #[test]
    fn tcp_frames_agree_with_etherparse(payload in proptest::collection::vec(any::<u8>(), 0..1460)) {
        let buf = tcp_frame(&tcp_repr(&payload));
        let sliced = SlicedPacket::from_ethernet(&buf).unwrap();
        let ip = check_ip(&sliced);
        let Some(TransportSlice::Tcp(t)) = &sliced.transport else { panic!("no TCP") };
        let want = t.to_header().calc_checksum_ipv4(&ip, t.payload()).unwrap();
        prop_assert_eq!(t.checksum(), want);
        prop_assert_eq!(t.sequence_number(), 0xFFFF_FF00);
        prop_assert_eq!(t.payload(), &payload[..]);
    }

    #[test]
    fn icmp_frames_agree_with_etherparse(data in proptest::collection::vec(any::<u8>(), 0..1472)) {
        let repr = Icmpv4Repr::EchoRequest { ident: 0x55, seq_no: 3, data: &data };
        let buf = frame(IpProtocol::Icmp, repr.buffer_len(), &[], |b| {
            repr.emit(&mut icmpv4::Packet::new_unchecked(b), Checksum::Check).unwrap();
        });
        let sliced = SlicedPacket::from_ethernet(&buf).unwrap();
        check_ip(&sliced);
        let Some(TransportSlice::Icmpv4(i)) = &sliced.transport else { panic!("no ICMP") };
        let want = etherparse::Icmpv4Header::with_checksum(i.icmp_type(), i.payload());
        prop_assert_eq!(i.checksum(), want.checksum);
    }

    #[test]
    fn frames_etherparse_builds_parse_and_verify_here(
        payload in proptest::collection::vec(any::<u8>(), 0..1400),
        tcp_not_udp in any::<bool>(),
    ) {
        let b = PacketBuilder::ethernet2(MAC_A.0, MAC_B.0).ipv4(SRC.0, DST.0, 64);
        let mut buf = Vec::new();
        if tcp_not_udp {
            b.tcp(1000, 2000, 12345, 4096).ack(99).write(&mut buf, &payload).unwrap();
        } else {
            b.udp(1000, 2000).write(&mut buf, &payload).unwrap();
        }
        let f = ethernet::Frame::new_checked(&buf[..]).unwrap();
        prop_assert_eq!(EthernetRepr::parse(&f).unwrap().ethertype, EtherType::Ipv4);
        let p = ipv4::Packet::new_checked(f.payload()).unwrap();
        let ip = Ipv4Repr::parse(&p, Checksum::Check).unwrap();
        prop_assert_eq!((ip.src, ip.dst), (SRC, DST));
        if tcp_not_udp {
            let t = tcp::Packet::new_checked(p.payload()).unwrap();
            let r = TcpRepr::parse(&t, SRC, DST, Checksum::Check).unwrap();
            prop_assert_eq!(r.payload, &payload[..]);
            prop_assert_eq!(r.ack_number, Some(SeqNumber(99)));
        } else {
            let u = udp::Packet::new_checked(p.payload()).unwrap();
            UdpRepr::parse(&u, SRC, DST, Checksum::Check).unwrap();
            prop_assert_eq!(u.payload(), &payload[..]);
        }
    }
}

#[test]
fn a_flipped_bit_fails_our_verification() {
    let buf = udp_frame(b"probestack", &[]);
    let l4 = ethernet::HEADER_LEN + 20;
    for bit in 0..(buf.len() - l4) * 8 {
        let mut bad = buf.clone();
        bad[l4 + bit / 8] ^= 1 << (bit % 8);
        let u = udp::Packet::new_unchecked(&bad[l4..]);
        // A flip that leaves the checksum field zero reads as "no checksum" (RFC 768).
        if u.checksum() == 0 {
            continue;
        }
        assert!(!u.verify_checksum(SRC, DST), "bit {bit} went unnoticed");
    }
}

#[test]
fn alternate_checksum_request_reaches_the_wire() {
    let mut syn = tcp_repr(&[]);
    syn.control = Control::Syn;
    syn.ack_number = None;
    syn.max_seg_size = Some(1460);
    syn.window_scale = Some(7);
    syn.sack_permitted = true;
    syn.sack_ranges = [None; 4];
    syn.alt_checksum_data = None;
    syn.alt_checksum_request = Some(AltChecksum::NoChecksum);
    let buf = tcp_frame(&syn);
    let sliced = SlicedPacket::from_ethernet(&buf).unwrap();
    let Some(TransportSlice::Tcp(t)) = &sliced.transport else {
        panic!("no TCP")
    };
    // etherparse knows no RFC 1146 option but walks past it by its length.
    assert!(t.syn());
    let kinds: Vec<_> = t.options_iterator().map(|o| format!("{o:?}")).collect();
    assert!(
        kinds.iter().any(|k| k.contains("MaximumSegmentSize(1460)")),
        "{kinds:?}"
    );
    let ours = tcp::Packet::new_checked(&buf[ethernet::HEADER_LEN + 20..]).unwrap();
    let r = TcpRepr::parse(&ours, SRC, DST, Checksum::Check).unwrap();
    assert_eq!(r.alt_checksum_request, Some(AltChecksum::NoChecksum));
    assert_eq!(r.max_seg_size, Some(1460));
}
