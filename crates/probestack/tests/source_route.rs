//! Source routes (RFC 791 §3.1, loose and strict): a host originates them (RFC 1122
//! §3.2.1.8 (c); RFC 9293 MUST-51 for a TCP active open), is the final destination of one
//! and answers along it reversed (ICMP echo, §3.2.2.6; a TCP connection it accepts, RFC
//! 9293 MUST-53), passes options to UDP applications both ways (§4.1.3.2), and drops one
//! that goes on past it (a host does not forward, §3.3.5). Taking them at all is
//! `StackConfig::accept_source_route`, off by default. Options that are no source route
//! TCP ignores (RFC 9293 MUST-50).
//!
//! Between A and B stands a gateway at [`GW`], written here from RFC 791 alone: each host's
//! NIC has it behind ([`Gateway`]), and a frame sent to its MAC whose source route goes on
//! has the next address put in its destination and the gateway's own recorded in its
//! place, and goes on to the host that address names.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use common::router::{Hop, Routed};
use common::transfer::{accepted_on_b, connect, transfer};
use probestack::buf::PacketBuf;
use probestack::driver::{Device, DeviceCaps, DeviceContext, DeviceError, RxFrame, TxMeta};
use probestack::ip::SourceRouting;
use probestack::probe::Counter;
use probestack::sim::{HostConfig, Pair, ADDR_A, ADDR_B, MAC_A, MAC_B};
use probestack::socket::tcp::{TcpError, TcpHandle};
use probestack::socket::udp::{UdpError, UdpHandle, MAX_UDP_PAYLOAD};
use probestack::tcp::State;
use probestack::time::{Duration, Instant};
use probestack::wire::ethernet::EthernetAddress;
use probestack::wire::ipv4::Ipv4Options;
use probestack::wire::source_route::SourceRoute;
use probestack::wire::Ipv4Address;

/// The gateway on the way, on the hosts' subnet.
const GW: Ipv4Address = Ipv4Address::new(198, 18, 0, 99);
const MAC_GW: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 0x99]);
/// An address past B that no one has.
const BEYOND: Ipv4Address = Ipv4Address::new(198, 18, 0, 200);

const LSRR: u8 = 0x83;
const SSRR: u8 = 0x89;

/// The frames a host sent, as it sent them (before the gateway touched them).
type Sent = Arc<Mutex<Vec<Vec<u8>>>>;

/// The gateway's part of the path behind one host's NIC. With `strict` set, it makes
/// the loose routes it forwards strict (another route, as far as the destination can
/// tell). With `blind` set, it does so to the next TCP segment alone and moves that
/// segment's sequence number out of the window (its two 16-bit halves swapped, which
/// keeps the checksum): a blind segment with the four-tuple and a route of its own.
struct Gateway {
    sent: Sent,
    strict: Arc<AtomicBool>,
    blind: Arc<AtomicBool>,
}

/// Where a header's source route option starts, if it has one (the options walked as
/// RFC 791 §3.1 lays them out).
fn route_at(ip: &[u8]) -> Option<usize> {
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    let mut at = 20;
    while at < ihl {
        match ip[at] {
            0 => return None,
            1 => at += 1,
            LSRR | SSRR => return Some(at),
            _ => at += usize::from(ip[at + 1]),
        }
    }
    None
}

/// The header checksum filled anew (RFC 1071, by hand).
fn fill_header_checksum(ip: &mut [u8]) {
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    ip[10..12].fill(0);
    let mut sum: u32 = ip[..ihl]
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
}

impl Hop for Gateway {
    fn forward(&mut self, frame: &mut PacketBuf) -> (bool, Option<PacketBuf>) {
        // The whole frame, data a sender passes by reference included.
        let mut whole = vec![0; frame.total_len()];
        frame.gather_into(&mut whole).unwrap();
        self.sent.lock().unwrap().push(whole);
        let f = frame.data_mut();
        if f[..6] != MAC_GW.0 || f[12..14] != [0x08, 0x00] {
            return (true, None);
        }
        let ip = &mut f[14..];
        let Some(o) = route_at(ip) else {
            return (true, None);
        };
        let (len, pointer) = (usize::from(ip[o + 1]), usize::from(ip[o + 2]));
        if ip[16..20] != GW.0 || pointer > len {
            return (true, None);
        }
        // RFC 791: the next address becomes the destination, ours is recorded in its
        // place, and the pointer moves on.
        let at = o + pointer - 1;
        let next: [u8; 4] = ip[at..at + 4].try_into().unwrap();
        ip[at..at + 4].copy_from_slice(&GW.0);
        ip[o + 2] += 4;
        if self.strict.load(Ordering::Relaxed) {
            ip[o] = SSRR;
        }
        if ip[9] == 6 && self.blind.swap(false, Ordering::Relaxed) {
            ip[o] = SSRR;
            let seq = usize::from(ip[0] & 0x0f) * 4 + 4;
            ip[seq..seq + 4].rotate_left(2);
        }
        ip[16..20].copy_from_slice(&next);
        fill_header_checksum(ip);
        let mac = if next == ADDR_A.0 { MAC_A } else { MAC_B };
        f[..6].copy_from_slice(&mac.0);
        (true, None)
    }
}

/// A and B with the gateway between them (each knows its MAC), B taking source routes
/// when `b_accepts`, A always; and what each sent.
fn routed_pair(b_accepts: bool) -> (Pair, Sent, Sent) {
    routed_pair_with(b_accepts, Arc::default(), Arc::default())
}

/// [`routed_pair`] with the switches that make the gateway turn A's loose routes strict,
/// and A's next segment blind.
fn routed_pair_with(
    b_accepts: bool,
    strict_for_a: Arc<AtomicBool>,
    blind_for_a: Arc<AtomicBool>,
) -> (Pair, Sent, Sent) {
    let (sent_a, sent_b) = (Sent::default(), Sent::default());
    let mut a = HostConfig::with_mtu(1500);
    a.stack.accept_source_route = true;
    let mut b = HostConfig::with_mtu(1500);
    b.stack.accept_source_route = b_accepts;
    let (ga, gb) = (
        Gateway {
            sent: sent_a.clone(),
            strict: strict_for_a,
            blind: blind_for_a,
        },
        Gateway {
            sent: sent_b.clone(),
            strict: Arc::default(),
            blind: Arc::default(),
        },
    );
    let mut p = Pair::with_devices(
        a,
        b,
        move |nic| Box::new(Routed::new(nic, ga)),
        move |nic| Box::new(Routed::new(nic, gb)),
    )
    .unwrap();
    p.a.add_static_arp(0, GW, MAC_GW);
    p.b.add_static_arp(0, GW, MAC_GW);
    (p, sent_a, sent_b)
}

/// The IPv4 datagrams in `sent` (Ethernet headers stripped).
fn datagrams(sent: &Sent) -> Vec<Vec<u8>> {
    let frames = sent.lock().unwrap();
    let ip = frames.iter().filter(|f| f[12..14] == [0x08, 0x00]);
    ip.map(|f| f[14..].to_vec()).collect()
}

/// The source route option of `ip`'s header: kind, pointer and addresses.
fn route_of(ip: &[u8]) -> Option<(u8, u8, Vec<Ipv4Address>)> {
    let o = route_at(ip)?;
    let len = usize::from(ip[o + 1]);
    let addresses = ip[o + 3..o + len].chunks(4).map(Ipv4Address::from_bytes);
    Some((ip[o], ip[o + 2], addresses.collect()))
}

fn via(gateways: &[Ipv4Address]) -> SourceRouting {
    SourceRouting::new(gateways, false).unwrap()
}

fn count(stack: &probestack::stack::Stack, c: Counter) -> u64 {
    stack.ledger().counters().get(c)
}

fn ping_via(p: &mut Pair, dst: Ipv4Address, gateways: &[Ipv4Address], data: &[u8]) {
    p.a.ping_via(dst, &via(gateways), (7, 1), data, Instant::ZERO)
        .unwrap();
    p.run_for(Duration::from_millis(5));
}

/// A pings B through the gateway: the request leaves for the gateway with B last on its
/// route; B answers along the route reversed (to the gateway first, A last on the
/// route), and the reply comes back to A.
#[test]
fn a_routed_ping_is_answered_along_the_route_reversed() {
    let (mut p, sent_a, sent_b) = routed_pair(true);
    ping_via(&mut p, ADDR_B, &[GW], b"by way of the gateway");
    let request = &datagrams(&sent_a)[0];
    assert_eq!(request[16..20], GW.0, "the first hop in the destination");
    assert_eq!(route_of(request), Some((LSRR, 4, vec![ADDR_B])));
    let reply = datagrams(&sent_b)
        .into_iter()
        .find(|d| d[9] == 1)
        .expect("B answered");
    assert_eq!(reply[16..20], GW.0);
    assert_eq!(route_of(&reply), Some((LSRR, 4, vec![ADDR_A])));
    let got = p.a.take_echo_reply().expect("the reply reached A");
    assert_eq!(
        (got.from, &got.data[..]),
        (ADDR_B, &b"by way of the gateway"[..])
    );
}

/// A request too large for one frame goes in fragments, each with the route (its option
/// has the copied flag, RFC 791 §3.2), and B reassembles it and answers along the route.
#[test]
fn every_fragment_carries_the_route() {
    let (mut p, sent_a, _) = routed_pair(true);
    let data: Vec<u8> = (0..4000u32).map(|i| i as u8).collect();
    ping_via(&mut p, ADDR_B, &[GW], &data);
    let fragments = datagrams(&sent_a);
    assert_eq!(fragments.len(), 3);
    for f in &fragments {
        assert_eq!(route_of(f), Some((LSRR, 4, vec![ADDR_B])));
    }
    let got = p.a.take_echo_reply().expect("the reply reached A");
    assert_eq!(got.data, data);
}

/// Off by default: B drops every source-routed datagram, counted, and answers nothing.
#[test]
fn source_routes_are_dropped_unless_accepted() {
    let (mut p, _, sent_b) = routed_pair(false);
    ping_via(&mut p, ADDR_B, &[GW], b"refused");
    assert_eq!(count(&p.b, Counter::IpDropSourceRoute), 1);
    assert!(datagrams(&sent_b).is_empty());
    assert!(p.a.take_echo_reply().is_none());
}

/// A route that goes on past B: B does not forward it; it drops it, counted, and answers
/// Source Route Failed (RFC 1122 §3.3.5, RFC 792 code 5).
#[test]
fn a_route_that_goes_on_past_this_host_fails() {
    let (mut p, _, sent_b) = routed_pair(true);
    ping_via(&mut p, BEYOND, &[GW, ADDR_B], b"further");
    assert_eq!(count(&p.b, Counter::IpDropSourceRouteFailed), 1);
    let error = datagrams(&sent_b)
        .into_iter()
        .find(|d| d[9] == 1)
        .expect("B answered");
    let ihl = usize::from(error[0] & 0x0f) * 4;
    assert_eq!((error[ihl], error[ihl + 1]), (3, 5), "type 3 code 5");
    assert_eq!(error[16..20], ADDR_A.0);
    assert!(p.a.take_echo_reply().is_none());
}

/// A route must fit one option: nine gateways at most (the first in the header's
/// destination, the other eight and the destination in the option's nine places), none
/// of them a broadcast or unspecified address.
#[test]
fn a_route_too_long_is_refused() {
    let (mut p, sent_a, _) = routed_pair(true);
    assert!(SourceRouting::new(&[GW; 10], false).is_none());
    assert!(SourceRouting::new(&[], false).is_none());
    assert!(SourceRouting::new(&[Ipv4Address::BROADCAST], false).is_none());
    assert!(SourceRouting::new(&[GW, Ipv4Address::UNSPECIFIED], false).is_none());
    p.a.ping_via(ADDR_B, &via(&[GW; 9]), (7, 1), b"", Instant::ZERO)
        .unwrap();
    p.run_for(Duration::from_millis(1));
    let (_, _, addresses) = route_of(&datagrams(&sent_a)[0]).unwrap();
    assert_eq!(addresses, [&[GW; 8][..], &[ADDR_B]].concat());
}

/// A record route option (RFC 791 §3.1, type 7, not copied into fragments) with room
/// for one address, padded to a word.
const RECORD_ROUTE: [u8; 8] = [7, 7, 4, 0, 0, 0, 0, 0];

/// A UDP socket on A bound to port 7, and B's on port 9.
fn udp_pair(p: &mut Pair) -> (UdpHandle, UdpHandle) {
    let a = p.a.udp_open();
    p.a.udp_bind(a, Ipv4Address::UNSPECIFIED, 7).unwrap();
    let b = p.b.udp_open();
    p.b.udp_bind(b, Ipv4Address::UNSPECIFIED, 9).unwrap();
    (a, b)
}

/// RFC 1122 §4.1.3.2: an application sets the options of its datagrams, and the other end's
/// application is given those each datagram carried, in order with the datagrams.
#[test]
fn udp_options_go_out_and_come_up() {
    let (mut p, sent_a, _) = routed_pair(false);
    let (a, b) = udp_pair(&mut p);
    p.a.udp_send_to(a, b"plain", ADDR_B, 9).unwrap();
    p.a.udp_set_ip_options(a, &RECORD_ROUTE[..7]).unwrap();
    p.a.udp_send_to(a, b"recorded", ADDR_B, 9).unwrap();
    p.a.udp_set_ip_options(a, &[]).unwrap();
    p.a.udp_send_to(a, b"plain again", ADDR_B, 9).unwrap();
    p.run_for(Duration::from_millis(1));
    let mut buf = [0u8; 64];
    let mut got = Vec::new();
    while let Ok(r) = p.b.udp_recv_from(b, &mut buf) {
        got.push((buf[..r.len].to_vec(), r.ip_options));
    }
    let recorded = Ipv4Options::new(&RECORD_ROUTE).unwrap();
    assert_eq!(
        got,
        [
            (b"plain".to_vec(), None),
            (b"recorded".to_vec(), Some(Box::new(recorded))),
            (b"plain again".to_vec(), None),
        ]
    );
    let headers: Vec<usize> = datagrams(&sent_a)
        .iter()
        .map(|d| usize::from(d[0] & 0x0f) * 4)
        .collect();
    assert_eq!(headers, [20, 28, 20]);
}

/// A datagram in fragments: the first carries every option, the later ones only those
/// with the copied flag (record route has not, RFC 791 §3.1); the receiver reassembles
/// it under the first one's header and passes its options up.
#[test]
fn later_fragments_leave_the_uncopied_options_out() {
    let (mut p, sent_a, _) = routed_pair(false);
    let (a, b) = udp_pair(&mut p);
    p.a.udp_set_ip_options(a, &RECORD_ROUTE).unwrap();
    let data: Vec<u8> = (0..4000u32).map(|i| (i * 7) as u8).collect();
    p.a.udp_send_to(a, &data, ADDR_B, 9).unwrap();
    p.run_for(Duration::from_millis(1));
    let headers: Vec<usize> = datagrams(&sent_a)
        .iter()
        .map(|d| usize::from(d[0] & 0x0f) * 4)
        .collect();
    assert_eq!(headers, [28, 20, 20]);
    let mut buf = vec![0u8; 5000];
    let r = p.b.udp_recv_from(b, &mut buf).unwrap();
    assert_eq!(&buf[..r.len], &data[..]);
    assert_eq!(
        r.ip_options,
        Some(Box::new(Ipv4Options::new(&RECORD_ROUTE).unwrap()))
    );
}

/// A source-routed datagram's route comes up with it, complete; B answers along it
/// reversed (`SourceRouting::back_along`), through the gateway, and A's answer arrives.
#[test]
fn udp_answers_along_the_route_back() {
    let (mut p, sent_a, sent_b) = routed_pair(true);
    let (a, b) = udp_pair(&mut p);
    p.a.udp_set_source_route(a, Some(via(&[GW]))).unwrap();
    p.a.udp_send_to(a, b"question", ADDR_B, 9).unwrap();
    p.run_for(Duration::from_millis(1));
    let question = &datagrams(&sent_a)[0];
    assert_eq!(question[16..20], GW.0);
    // Not one hop: no checksum elision on this CRC link (papers 000, 003).
    assert_ne!(udp_checksum(question), 0);
    let mut buf = [0u8; 64];
    let r = p.b.udp_recv_from(b, &mut buf).unwrap();
    assert_eq!((&buf[..r.len], r.from), (&b"question"[..], (ADDR_A, 7)));
    let options = r.ip_options.expect("the route came up");
    let route = SourceRoute::find(options.as_bytes()).unwrap().unwrap();
    assert!(route.is_complete());
    assert_eq!(route.recorded(), [GW]);
    let back = SourceRouting::back_along(&route, ADDR_A).unwrap();
    assert_eq!(back.gateways(), [GW]);
    p.b.udp_set_source_route(b, Some(back)).unwrap();
    p.b.udp_send_to(b, b"answer", ADDR_A, 7).unwrap();
    p.run_for(Duration::from_millis(1));
    let answer = datagrams(&sent_b).pop().unwrap();
    assert_eq!(answer[16..20], GW.0);
    assert_eq!(route_of(&answer), Some((LSRR, 4, vec![ADDR_A])));
    let r = p.a.udp_recv_from(a, &mut buf).unwrap();
    assert_eq!((&buf[..r.len], r.from), (&b"answer"[..], (ADDR_B, 9)));
    // Back to sending directly.
    p.b.udp_set_source_route(b, None).unwrap();
    p.b.udp_send_to(b, b"direct", ADDR_A, 7).unwrap();
    p.run_for(Duration::from_millis(1));
    let direct = datagrams(&sent_b).pop().unwrap();
    assert_eq!(direct[16..20], ADDR_A.0);
    assert_eq!(udp_checksum(&direct), 0, "one hop on a CRC link: elided");
}

/// The UDP checksum field of the datagram `ip`.
fn udp_checksum(ip: &[u8]) -> u16 {
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    u16::from_be_bytes([ip[ihl + 6], ip[ihl + 7]])
}

/// Options that are malformed, hold a source route (which has its own call) or do not
/// fit beside the socket's route are refused; a datagram too large for a header with
/// options is refused with the smaller maximum.
#[test]
fn udp_options_that_cannot_go_are_refused() {
    let (mut p, _, _) = routed_pair(false);
    let (a, _) = udp_pair(&mut p);
    let invalid = Err(UdpError::InvalidArgument);
    assert_eq!(p.a.udp_set_ip_options(a, &[7, 9, 4]), invalid);
    assert_eq!(
        p.a.udp_set_ip_options(a, &[LSRR, 7, 4, 1, 2, 3, 4]),
        invalid
    );
    assert_eq!(p.a.udp_set_ip_options(a, &[1; 41]), invalid);
    p.a.udp_set_ip_options(a, &[1; 32]).unwrap();
    // 32 + a route of two addresses (11 bytes, 12 padded) > 40.
    assert_eq!(p.a.udp_set_source_route(a, Some(via(&[GW, GW]))), invalid);
    p.a.udp_set_source_route(a, Some(via(&[GW]))).unwrap();
    assert_eq!(p.a.udp_set_ip_options(a, &[1; 36]), invalid);
    let big = vec![0u8; MAX_UDP_PAYLOAD];
    let max = MAX_UDP_PAYLOAD - 40;
    assert_eq!(
        p.a.udp_send_to(a, &big, ADDR_B, 9),
        Err(UdpError::MessageTooBig { max })
    );
}

/// The TCP segments among `datagrams` (IP headers kept).
fn tcp_segments(sent: &Sent) -> Vec<Vec<u8>> {
    datagrams(sent).into_iter().filter(|d| d[9] == 6).collect()
}

/// The kinds of the TCP options of segment `ip`.
fn tcp_option_kinds(ip: &[u8]) -> Vec<u8> {
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    let tcp = &ip[ihl..];
    let end = usize::from(tcp[12] >> 4) * 4;
    let (mut at, mut kinds) = (20, Vec::new());
    while at < end {
        kinds.push(tcp[at]);
        at += match tcp[at] {
            0 => break,
            1 => 1,
            _ => usize::from(tcp[at + 1]),
        };
    }
    kinds
}

/// A connection from A to B's port 80 along a route A names through the gateway; (A's
/// end, B's end).
fn connected_via_gw(p: &mut Pair) -> (TcpHandle, TcpHandle) {
    let listener = p.b.tcp_listen((ADDR_B, 80), 1).unwrap();
    let config = p.a.tcp_default_config();
    let a = p.a.tcp_connect_via((ADDR_B, 80), via(&[GW]), config);
    let a = a.unwrap();
    (a, accepted_on_b(p, listener, a))
}

/// RFC 9293 MUST-51 and MUST-53: A opens a connection along a route it names; B, whose
/// listener took the SYN that came by it, answers along the route reversed from its
/// SYN-ACK on. Every segment either way carries the route, and a full segment still
/// fits the MTU (the option's bytes come out of its data, §3.7.1); A asks for no
/// elided checksum (RFC 1146) on a path that passes a gateway.
#[test]
fn tcp_goes_along_a_named_route_and_is_answered_along_it() {
    let (mut p, sent_a, sent_b) = routed_pair(true);
    let (a, b) = connected_via_gw(&mut p);
    transfer(&mut p, a, b, 1 << 20, Duration::from_secs(10));
    p.b.tcp_send(b, b"back along the route").unwrap();
    p.run_for(Duration::from_millis(10));
    let mut buf = [0u8; 64];
    let n = p.a.tcp_recv(a, &mut buf).unwrap();
    assert_eq!(&buf[..n], b"back along the route");
    let (from_a, from_b) = (tcp_segments(&sent_a), tcp_segments(&sent_b));
    assert!(from_a.len() > 700 && from_b.len() > 10);
    for s in &from_a {
        assert_eq!(
            (s[16..20].to_vec(), route_of(s)),
            (GW.0.to_vec(), Some((LSRR, 4, vec![ADDR_B])))
        );
    }
    for s in &from_b {
        assert_eq!(
            (s[16..20].to_vec(), route_of(s)),
            (GW.0.to_vec(), Some((LSRR, 4, vec![ADDR_A])))
        );
    }
    let largest = from_a.iter().map(Vec::len).max().unwrap();
    assert_eq!(largest, 1500);
    assert!(
        !tcp_option_kinds(&from_a[0]).contains(&14),
        "alternate checksum asked"
    );
}

/// RFC 9293 SHLD-24 and MUST-52: when A's segments start to come by another route (the
/// gateway makes A's loose route strict), B's answers take the new one, reversed; A's
/// own segments keep the route its application named, though B's now come by the
/// strict one.
#[test]
fn a_later_route_replaces_a_learned_one_but_not_a_named_one() {
    let strict = Arc::new(AtomicBool::new(false));
    let (mut p, sent_a, sent_b) = routed_pair_with(true, strict.clone(), Arc::default());
    let (a, b) = connected_via_gw(&mut p);
    transfer(&mut p, a, b, 64 << 10, Duration::from_secs(10));
    let kind = |s: &Vec<u8>| route_of(s).map(|(k, _, _)| k);
    assert_eq!(kind(tcp_segments(&sent_b).last().unwrap()), Some(LSRR));
    strict.store(true, Ordering::Relaxed);
    let before = (tcp_segments(&sent_a).len(), tcp_segments(&sent_b).len());
    transfer(&mut p, a, b, 64 << 10, Duration::from_secs(10));
    p.b.tcp_send(b, b"strictly").unwrap();
    p.run_for(Duration::from_millis(10));
    let from_b = &tcp_segments(&sent_b)[before.1..];
    let from_a = &tcp_segments(&sent_a)[before.0..];
    assert!(!from_b.is_empty() && !from_a.is_empty());
    // B's first answers may have left before A's first strict segment came.
    let kinds: Vec<_> = from_b.iter().map(kind).collect();
    let first_strict = kinds
        .iter()
        .position(|&k| k == Some(SSRR))
        .expect("B took it");
    assert!(
        kinds[first_strict..].iter().all(|&k| k == Some(SSRR)),
        "B follows the new route: {kinds:?}"
    );
    assert!(
        from_a.iter().all(|s| kind(s) == Some(LSRR)),
        "A keeps its named route"
    );
    let mut buf = [0u8; 16];
    let n = p.a.tcp_recv(a, &mut buf).unwrap();
    assert_eq!(&buf[..n], b"strictly");
}

/// A segment with the connection's four-tuple that the connection does not accept (out
/// of the window here) does not turn its route, though it comes by another: were it to,
/// one blind datagram would send the connection's every segment through whoever named
/// the route. The segments that follow it, accepted, keep the route they came by.
#[test]
fn a_segment_the_connection_drops_does_not_turn_its_route() {
    let blind = Arc::new(AtomicBool::new(false));
    let (mut p, _sent_a, sent_b) = routed_pair_with(true, Arc::default(), blind.clone());
    let (a, b) = connected_via_gw(&mut p);
    transfer(&mut p, a, b, 64 << 10, Duration::from_secs(10));
    let kind = |s: &Vec<u8>| route_of(s).map(|(k, _, _)| k);
    let (before, dropped) = (
        tcp_segments(&sent_b).len(),
        count(&p.b, Counter::TcpDropOutOfWindow),
    );
    // One segment alone, which B answers with an ACK (RFC 9293 §3.10.7.4), then takes
    // when A sends it again.
    blind.store(true, Ordering::Relaxed);
    assert_eq!(p.a.tcp_send(a, b"blind"), Ok(5));
    p.run_for(Duration::from_secs(2));
    assert!(!blind.load(Ordering::Relaxed), "no segment went blind");
    assert_eq!(count(&p.b, Counter::TcpDropOutOfWindow), dropped + 1);
    let mut buf = [0u8; 8];
    assert_eq!(p.b.tcp_recv(b, &mut buf), Ok(5));
    let kinds: Vec<_> = tcp_segments(&sent_b)[before..].iter().map(kind).collect();
    assert!(kinds.len() >= 2, "{kinds:?}");
    assert!(
        kinds.iter().all(|&k| k == Some(LSRR)),
        "B took the blind segment's route: {kinds:?}"
    );
}

/// A socket's options and its source route go in one header, the route after the
/// options' own bytes (not after their padding, whose zero would end the list), and
/// both come up at the other end, the route complete.
#[test]
fn options_and_a_route_go_together() {
    let (mut p, sent_a, _) = routed_pair(true);
    let (a, b) = udp_pair(&mut p);
    p.a.udp_set_ip_options(a, &RECORD_ROUTE[..7]).unwrap();
    p.a.udp_set_source_route(a, Some(via(&[GW]))).unwrap();
    p.a.udp_send_to(a, b"both", ADDR_B, 9).unwrap();
    p.run_for(Duration::from_millis(1));
    assert_eq!(
        route_of(&datagrams(&sent_a)[0]),
        Some((LSRR, 4, vec![ADDR_B]))
    );
    let mut buf = [0u8; 16];
    let r = p.b.udp_recv_from(b, &mut buf).unwrap();
    let options = r.ip_options.expect("options came up");
    assert_eq!(options.as_bytes()[..3], RECORD_ROUTE[..3]);
    let route = SourceRoute::find(options.as_bytes()).unwrap().unwrap();
    assert!(route.is_complete());
}

/// Whether TCP segment `ip` has RST set.
fn is_rst(ip: &[u8]) -> bool {
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    ip[ihl + 13] & 0x04 != 0
}

/// Whether TCP segment `ip` is a SYN-ACK.
fn is_syn_ack(ip: &[u8]) -> bool {
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    ip[ihl + 13] & 0x12 == 0x12
}

/// RFC 9293 MUST-53 for the segments a connection sends outside its output: the RST
/// that ends a routed connection goes along its route, the named one from A, the one
/// learned and reversed from B; the other end is reset by it.
#[test]
fn a_routed_connections_reset_goes_along_its_route() {
    for b_aborts in [false, true] {
        let (mut p, sent_a, sent_b) = routed_pair(true);
        let (a, b) = connected_via_gw(&mut p);
        let (sent, back_to) = if b_aborts {
            (&sent_b, ADDR_A)
        } else {
            (&sent_a, ADDR_B)
        };
        let before = tcp_segments(sent).len();
        if b_aborts {
            p.b.tcp_abort(b).unwrap();
        } else {
            p.a.tcp_abort(a).unwrap();
        }
        p.run_for(Duration::from_millis(10));
        let rsts: Vec<_> = tcp_segments(sent)[before..]
            .iter()
            .filter(|s| is_rst(s))
            .cloned()
            .collect();
        assert_eq!(rsts.len(), 1, "b aborts: {b_aborts}");
        assert_eq!(
            (rsts[0][16..20].to_vec(), route_of(&rsts[0])),
            (GW.0.to_vec(), Some((LSRR, 4, vec![back_to]))),
            "b aborts: {b_aborts}"
        );
        let error = if b_aborts {
            p.a.tcp_error(a)
        } else {
            p.b.tcp_error(b)
        };
        assert_eq!(error, Ok(Some(TcpError::ConnectionReset)));
    }
}

/// What a host answers outside any connection to a segment that came by a source route
/// goes back along the route reversed (as Linux answers): the RST for a port nobody
/// listens on, and the SYN-ACK of a SYN cookie (the connection it may become takes the
/// route, so its SYN-ACK does too).
#[test]
fn answers_outside_a_connection_go_back_along_the_route() {
    let (mut p, _, sent_b) = routed_pair(true);
    let config = p.a.tcp_default_config();
    let refused = p.a.tcp_connect_via((ADDR_B, 81), via(&[GW]), config);
    let refused = refused.unwrap();
    p.run_for(Duration::from_millis(10));
    assert_eq!(
        p.a.tcp_error(refused),
        Ok(Some(TcpError::ConnectionRefused))
    );
    let back = (GW.0.to_vec(), Some((LSRR, 4, vec![ADDR_A])));
    let rsts: Vec<_> = tcp_segments(&sent_b)
        .into_iter()
        .filter(|s| is_rst(s))
        .collect();
    assert_eq!(rsts.len(), 1);
    assert_eq!((rsts[0][16..20].to_vec(), route_of(&rsts[0])), back);
    // Two SYNs in one poll for a backlog of one: the second is answered with a cookie.
    let _listener = p.b.tcp_listen((ADDR_B, 80), 1).unwrap();
    let before = tcp_segments(&sent_b).len();
    for _ in 0..2 {
        p.a.tcp_connect_via((ADDR_B, 80), via(&[GW]), config)
            .unwrap();
    }
    p.run_for(Duration::from_millis(10));
    assert_eq!(count(&p.b, Counter::TcpSynCookiesSent), 1);
    let syn_acks: Vec<_> = tcp_segments(&sent_b)[before..]
        .iter()
        .filter(|s| is_syn_ack(s))
        .cloned()
        .collect();
    assert_eq!(syn_acks.len(), 2);
    for s in &syn_acks {
        assert_eq!((s[16..20].to_vec(), route_of(s)), back);
    }
}

/// An ICMP error about a datagram that came by a source route goes back along the route
/// reversed (as Linux sends its errors): B's port unreachable for A's routed datagram to
/// a port nobody has reaches A by the gateway, and A's connected socket learns of it.
#[test]
fn an_icmp_error_goes_back_along_the_route() {
    let (mut p, _, sent_b) = routed_pair(true);
    let a = p.a.udp_open();
    p.a.udp_connect(a, ADDR_B, 99).unwrap();
    p.a.udp_set_source_route(a, Some(via(&[GW]))).unwrap();
    p.a.udp_send(a, b"anyone there?").unwrap();
    p.run_for(Duration::from_millis(5));
    let errors: Vec<_> = datagrams(&sent_b)
        .into_iter()
        .filter(|d| d[9] == 1)
        .collect();
    assert_eq!(errors.len(), 1);
    let ihl = usize::from(errors[0][0] & 0x0f) * 4;
    assert_eq!(errors[0][ihl], 3, "destination unreachable");
    assert_eq!(
        (errors[0][16..20].to_vec(), route_of(&errors[0])),
        (GW.0.to_vec(), Some((LSRR, 4, vec![ADDR_A])))
    );
    assert_eq!(
        p.a.udp_recv(a, &mut [0u8; 16]),
        Err(UdpError::ConnectionRefused)
    );
}

/// IP options that are no source route, for TCP's segments: a record route with room
/// for one address (RFC 791 §3.1), a no-operation, and an option of a type this stack
/// knows nothing of (158: copied, class 0, number 30, an experiment's, RFC 4727 §2.2)
/// with two bytes of its own.
const OTHER_OPTIONS: [u8; 12] = [7, 7, 4, 0, 0, 0, 0, 1, 0x9e, 4, 0xbe, 0xef];

/// The path behind one host's NIC that puts [`OTHER_OPTIONS`] in every TCP segment the
/// host sends, right after the fixed IP header, with the header length, total length
/// and header checksum made anew (the TCP checksum does not cover the IP header); and
/// logs the segments as they go on.
struct WithOptions {
    sent: Sent,
}

impl Hop for WithOptions {
    fn forward(&mut self, frame: &mut PacketBuf) -> (bool, Option<PacketBuf>) {
        let mut whole = vec![0; frame.total_len()];
        frame.gather_into(&mut whole).unwrap();
        if whole[12..14] == [0x08, 0x00] && whole[14 + 9] == 6 {
            let at = 14 + 20;
            whole.splice(at..at, OTHER_OPTIONS);
            let ip = &mut whole[14..];
            ip[0] += (OTHER_OPTIONS.len() / 4) as u8;
            let total = u16::from_be_bytes([ip[2], ip[3]]) + OTHER_OPTIONS.len() as u16;
            ip[2..4].copy_from_slice(&total.to_be_bytes());
            fill_header_checksum(ip);
            *frame = PacketBuf::from_slice(&whole, 0).unwrap();
        }
        self.sent.lock().unwrap().push(whole);
        (true, None)
    }
}

/// A NIC whose MTU, as its stack sees it, leaves room for [`OTHER_OPTIONS`], so that a
/// full-sized segment still fits the wire once [`WithOptions`] has put them in.
struct RoomForOptions<D>(D);

impl<D: Device> Device for RoomForOptions<D> {
    fn caps(&self) -> DeviceCaps {
        let caps = self.0.caps();
        DeviceCaps {
            mtu: caps.mtu - OTHER_OPTIONS.len(),
            ..caps
        }
    }
    fn transmit(
        &mut self,
        frame: PacketBuf,
        meta: TxMeta,
        cx: &DeviceContext<'_>,
    ) -> Result<(), DeviceError> {
        self.0.transmit(frame, meta, cx)
    }
    fn tx_ready(&self) -> bool {
        self.0.tx_ready()
    }
    fn tx_room(&self) -> usize {
        self.0.tx_room()
    }
    fn take_notification(&mut self, cx: &DeviceContext<'_>) -> bool {
        self.0.take_notification(cx)
    }
    fn receive(&mut self, cx: &DeviceContext<'_>) -> Option<RxFrame> {
        self.0.receive(cx)
    }
    fn next_deadline(&self) -> Option<Instant> {
        self.0.next_deadline()
    }
}

/// RFC 9293 MUST-50 (§3.9.2.1; RFC 1122 §3.2.1.8): TCP ignores the IP options it does
/// not understand. Every segment either way, SYN and SYN-ACK first, carries a record
/// route and an option of an unknown type (put in on the path): the connection opens, a
/// MiB goes from A to B in full-sized segments and a message comes back, nothing is sent
/// again, and no drop counter on either host moves.
#[test]
fn tcp_ignores_ip_options_it_does_not_understand() {
    let (sent_a, sent_b) = (Sent::default(), Sent::default());
    let (on_a, on_b) = (
        WithOptions {
            sent: sent_a.clone(),
        },
        WithOptions {
            sent: sent_b.clone(),
        },
    );
    let host = HostConfig::with_mtu(1500);
    let mut p = Pair::with_devices(
        host.clone(),
        host,
        move |nic| Box::new(Routed::new(RoomForOptions(nic), on_a)),
        move |nic| Box::new(Routed::new(RoomForOptions(nic), on_b)),
    )
    .unwrap();
    let (a, b) = connect(&mut p, 80);
    transfer(&mut p, a, b, 1 << 20, Duration::from_secs(10));
    p.b.tcp_send(b, b"options and all").unwrap();
    p.run_for(Duration::from_millis(10));
    let mut buf = [0u8; 32];
    let n = p.a.tcp_recv(a, &mut buf).unwrap();
    assert_eq!(&buf[..n], b"options and all");
    assert_eq!(p.a.tcp_state(a), Ok(State::Established));
    assert_eq!(p.b.tcp_state(b), Ok(State::Established));
    let (from_a, from_b) = (tcp_segments(&sent_a), tcp_segments(&sent_b));
    assert!(from_a.len() > 700 && from_b.len() > 10);
    let syn_only = |s: &[u8]| s[usize::from(s[0] & 0x0f) * 4 + 13] & 0x12 == 0x02;
    assert!(syn_only(&from_a[0]), "A's first segment is its SYN");
    assert!(is_syn_ack(&from_b[0]), "B's first segment is its SYN-ACK");
    for s in from_a.iter().chain(&from_b) {
        assert_eq!((s[0], &s[20..32]), (0x48, &OTHER_OPTIONS[..]));
    }
    assert_eq!(from_a.iter().map(Vec::len).max(), Some(1500));
    for host in [&p.a, &p.b] {
        for &c in Counter::ALL {
            if c.name().contains(".drop.") {
                assert_eq!(count(host, c), 0, "{}", c.name());
            }
        }
        assert_eq!(count(host, Counter::TcpRetransmittedSegments), 0);
    }
}
