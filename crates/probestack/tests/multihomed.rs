//! A host with two addresses, reached at the one that is not its outgoing interface's
//! (RFC 1122 §3.3.4.2's weak end-system model, which probestack's IP input follows): what
//! it sends back goes from the address it was reached at. A UDP socket bound to that
//! address sends from it (RFC 1122 §4.1.3.5), a TCP connection made to it keeps it as its
//! local address in every segment (RFC 9293 MUST-45), as does one opened from it
//! (MUST-43), and an echo reply comes from the address the request went to (RFC 1122
//! §3.2.2.6). Listeners on one port at each address take their own connections (MUST-42);
//! a wildcard UDP socket learns which address each datagram was sent to.

mod common;

use common::transfer::{accepted_on_a, accepted_on_b};
use probestack::driver::queue::FrameQueue;
use probestack::ip::route::Ipv4Cidr;
use probestack::probe::Counter;
use probestack::sim::{HostConfig, Pair, ADDR_A, ADDR_B, MAC_B};
use probestack::socket::tcp::TcpError;
use probestack::socket::udp::UdpError;
use probestack::stack::InterfaceConfig;
use probestack::time::Duration;
use probestack::wire::ethernet::EthernetAddress;
use probestack::wire::Ipv4Address;

/// B's second address, on an interface of its own (198.19.0.0/24, a subnet nobody else is
/// on); B's route to A is through its first interface.
const SECOND: Ipv4Address = Ipv4Address::new(198, 19, 0, 2);

/// Two stacks on the memory link, B with a second interface at [`SECOND`]; A sends to
/// `SECOND` through B's first NIC (A's subnet, 198.18.0.0/15, holds it, and A is told B's
/// MAC for it). Returns the pair and the second interface's idle peer.
fn multihomed() -> (Pair, FrameQueue) {
    let mut p = Pair::new(HostConfig::with_mtu(1500), HostConfig::with_mtu(1500)).unwrap();
    let (second, peer) = FrameQueue::pair(1500, 64).unwrap();
    p.b.add_interface(
        Box::new(second),
        InterfaceConfig {
            mac: EthernetAddress([0x02, 0, 0, 0, 0, 0x22]),
            cidr: Ipv4Cidr::new(SECOND, 24).unwrap(),
        },
    );
    p.a.add_static_arp(0, SECOND, MAC_B);
    (p, peer)
}

#[test]
fn a_udp_socket_bound_to_the_second_address_sends_from_it() {
    let (mut p, _peer) = multihomed();
    let b = p.b.udp_open();
    p.b.udp_bind(b, SECOND, 9).unwrap();
    let a = p.a.udp_open();
    p.a.udp_bind(a, Ipv4Address::UNSPECIFIED, 4000).unwrap();
    p.a.udp_send_to(a, b"to the second address", SECOND, 9)
        .unwrap();
    let mut buf = [0u8; 64];
    let mut from = None;
    assert!(p.run_until(Duration::from_secs(1), |p| {
        if let Ok(r) = p.b.udp_recv_from(b, &mut buf) {
            from = Some(r.from);
        }
        from.is_some()
    }));
    assert_eq!(from, Some((ADDR_A, 4000)));
    p.b.udp_send_to(b, b"the answer", ADDR_A, 4000).unwrap();
    let mut got = None;
    assert!(
        p.run_until(Duration::from_secs(1), |p| {
            match p.a.udp_recv_from(a, &mut buf) {
                Ok(r) => got = Some((buf[..r.len].to_vec(), r.from)),
                Err(UdpError::WouldBlock) => {}
                Err(e) => panic!("{e}"),
            }
            got.is_some()
        }),
        "no answer; A's checksum drops: {}",
        p.a.ledger().counters().get(Counter::UdpDropBadChecksum)
    );
    assert_eq!(got, Some((b"the answer".to_vec(), (SECOND, 9))));
}

#[test]
fn a_tcp_connection_to_the_second_address_keeps_it() {
    let (mut p, _peer) = multihomed();
    let l = p.b.tcp_listen((Ipv4Address::UNSPECIFIED, 5001), 4).unwrap();
    let c = p.a.tcp_connect((SECOND, 5001)).unwrap();
    let s = accepted_on_b(&mut p, l, c);
    assert_eq!(p.b.tcp_local_addr(s), Ok((SECOND, 5001)));
    assert_eq!(p.b.tcp_send(s, b"from the second address"), Ok(23));
    let mut buf = [0u8; 64];
    let mut got = Vec::new();
    assert!(p.run_until(Duration::from_secs(5), |p| {
        while let Ok(n) = p.a.tcp_recv(c, &mut buf) {
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        got.len() == 23
    }));
    assert_eq!(got, b"from the second address");
}

#[test]
fn an_echo_reply_comes_from_the_address_pinged() {
    let (mut p, _peer) = multihomed();
    let now = p.now();
    p.a.ping(SECOND, 7, 1, b"ping", now).unwrap();
    let mut reply = None;
    assert!(p.run_until(Duration::from_secs(1), |p| {
        reply = p.a.take_echo_reply();
        reply.is_some()
    }));
    assert_eq!(reply.map(|r| r.from), Some(SECOND));
}

/// A connection opened from the second address (the local address an active open may
/// name, RFC 9293 MUST-43) goes from it, though its route leaves by the first interface;
/// an address that is not the host's is refused.
#[test]
fn a_tcp_connection_opened_from_the_second_address_goes_from_it() {
    let (mut p, _peer) = multihomed();
    let l = p.a.tcp_listen((ADDR_A, 5001), 4).unwrap();
    let cfg = p.b.tcp_default_config();
    let c =
        p.b.tcp_connect_from((ADDR_A, 5001), (SECOND, 0), cfg, false)
            .unwrap();
    let s = accepted_on_a(&mut p, l, c);
    assert_eq!(p.a.tcp_endpoints(s).map(|(_, remote)| remote.0), Ok(SECOND));
    assert_eq!(p.a.tcp_send(s, b"back to the second"), Ok(18));
    let mut buf = [0u8; 32];
    let mut got = 0;
    assert!(p.run_until(Duration::from_secs(5), |p| {
        got += p.b.tcp_recv(c, &mut buf[got..]).unwrap_or(0);
        got == 18
    }));
    let elsewhere = Ipv4Address::new(198, 18, 0, 99);
    assert_eq!(
        p.b.tcp_connect_from((ADDR_A, 5001), (elsewhere, 0), cfg, false),
        Err(TcpError::AddrNotAvailable)
    );
}

/// RFC 9293 MUST-44: an active open that names no local address asks IP for one, the
/// address of the interface the route to the peer leaves by: B's connection to A goes
/// from B's first address (A's listener sees it so), one to a host on the second
/// interface's subnet from the second address, before any SYN is answered.
#[test]
fn an_active_open_without_a_local_address_takes_the_routes_interface_address() {
    let (mut p, _peer) = multihomed();
    let l = p.a.tcp_listen((ADDR_A, 5001), 4).unwrap();
    let c = p.b.tcp_connect((ADDR_A, 5001)).unwrap();
    assert_eq!(p.b.tcp_endpoints(c).map(|(local, _)| local.0), Ok(ADDR_B));
    let s = accepted_on_a(&mut p, l, c);
    assert_eq!(p.a.tcp_endpoints(s).map(|(_, remote)| remote.0), Ok(ADDR_B));
    let on_second = Ipv4Address::new(198, 19, 0, 5);
    let c2 = p.b.tcp_connect((on_second, 5001)).unwrap();
    assert_eq!(p.b.tcp_endpoints(c2).map(|(local, _)| local.0), Ok(SECOND));
}

/// A socket bound to the wildcard address learns which of the host's addresses each
/// datagram was sent to, or that it was a broadcast (RFC 1122 §4.1.3.5; `IP_PKTINFO`), so
/// that it can answer from the address it was reached at.
#[test]
fn a_wildcard_udp_socket_learns_where_each_datagram_was_sent() {
    let (mut p, _peer) = multihomed();
    let b = p.b.udp_open();
    p.b.udp_bind(b, Ipv4Address::UNSPECIFIED, 9).unwrap();
    let a = p.a.udp_open();
    // 198.18.0.0/15's broadcast address, which both hosts' first interfaces are on.
    let broadcast = Ipv4Address::new(198, 19, 255, 255);
    for to in [SECOND, ADDR_B, broadcast] {
        p.a.udp_send_to(a, b"where?", to, 9).unwrap();
        let mut buf = [0u8; 16];
        let mut got = None;
        assert!(p.run_until(Duration::from_secs(1), |p| {
            got = p.b.udp_recv_from(b, &mut buf).ok();
            got.is_some()
        }));
        assert_eq!(got.map(|r| r.to), Some(to));
    }
}

/// Listeners on the same port at different local addresses, the wildcard among them,
/// each take the connections made to theirs (RFC 9293 MUST-42), the most specific first.
#[test]
fn listeners_on_one_port_at_each_address_take_their_own_connections() {
    let (mut p, _peer) = multihomed();
    let second = p.b.tcp_listen((SECOND, 80), 4).unwrap();
    let any = p.b.tcp_listen((Ipv4Address::UNSPECIFIED, 80), 4).unwrap();
    assert_eq!(
        p.b.tcp_listen((SECOND, 80), 4),
        Err(TcpError::AddrInUse),
        "the same binding twice"
    );
    for (to, listener, other) in [(SECOND, second, any), (ADDR_B, any, second)] {
        let c = p.a.tcp_connect((to, 80)).unwrap();
        let s = accepted_on_b(&mut p, listener, c);
        assert_eq!(p.b.tcp_local_addr(s), Ok((to, 80)));
        assert_eq!(p.b.tcp_accept(other), Err(TcpError::WouldBlock));
    }
}
