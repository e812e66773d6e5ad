//! ICMP errors about what a host sent, back at the transport that sent it: TCP keeps a soft
//! error for the application and does not abort (RFC 9293 §3.9.2.2, MUST-56, SHLD-25),
//! reports it if the connection then times out, and ends a connect on a hard one (SHLD-26;
//! a live connection keeps it as a soft one, RFC 5461 §4); an error that quotes no data in
//! flight is ignored (RFC 5927 §4.1). A connected UDP socket is told of every error (RFC
//! 1122 §4.1.3.3) but a reassembly time exceeded, which says a datagram was lost.
//!
//! A's NIC has a router behind it (`common::router`, [`Router`]) that loses the frames a
//! rule picks and answers each with an ICMP error quoting it, as a router on the way
//! would.

mod common;

use std::sync::{Arc, Mutex};

use common::router::{icmp_frame, quoted, Hop, Routed};
use common::transfer::{accepted_on_b, connect};
use probestack::buf::PacketBuf;
use probestack::probe::Counter;
use probestack::sim::{HostConfig, Pair, ADDR_A, ADDR_B, MAC_A, MAC_B};
use probestack::socket::tcp::{TcpError, TcpHandle};
use probestack::socket::udp::UdpError;
use probestack::tcp::State;
use probestack::time::Duration;
use probestack::wire::ethernet;
use probestack::wire::icmpv4::{DstUnreachable, Icmpv4Repr, ParamProblem, TimeExceeded};
use probestack::wire::Ipv4Address;

/// The router that sends the errors, on A's subnet.
const ROUTER: Ipv4Address = Ipv4Address::new(198, 18, 0, 254);

/// The error a rule answers with.
#[derive(Clone, Copy, Debug)]
enum Answer {
    Unreachable(DstUnreachable),
    TtlExpired,
    /// A reassembly that timed out at the destination, as B would answer it.
    ReassemblyExpired,
    /// A parameter problem pointing at the quoted header's TTL.
    HeaderAtFault,
    /// A Source Quench (type 4, code 0), which RFC 6633 deprecated.
    SourceQuench,
}

/// Which of A's frames the router loses and answers, and how far the quoted TCP sequence
/// number is moved (a forged error's).
#[derive(Clone, Copy)]
struct Rule {
    answer: Answer,
    /// The IP protocol of the datagrams it loses; with `syn_only`, TCP SYNs alone.
    protocol: u8,
    syn_only: bool,
    seq_shift: u32,
}

/// The router behind A's NIC: loses the datagrams the rule (which the test changes
/// through the handle) picks and answers each with the rule's error, from [`ROUTER`].
struct Router {
    rule: Arc<Mutex<Option<Rule>>>,
}

impl Hop for Router {
    fn forward(&mut self, frame: &mut PacketBuf) -> (bool, Option<PacketBuf>) {
        let data = frame.data();
        let rule = *self.rule.lock().unwrap();
        let Some(rule) = rule.filter(|_| data[12..14] == [0x08, 0x00]) else {
            return (true, None);
        };
        let datagram = &data[ethernet::HEADER_LEN..];
        let ihl = usize::from(datagram[0] & 0x0f) * 4;
        let syn = datagram.get(ihl + 13).is_some_and(|f| f & 0x02 != 0);
        if datagram[9] != rule.protocol || (rule.syn_only && !syn) {
            return (true, None);
        }
        let quoted = quoted(datagram, rule.seq_shift);
        let icmp = match rule.answer {
            Answer::Unreachable(code) => Icmpv4Repr::dst_unreachable(code, 0, &quoted),
            Answer::TtlExpired => Icmpv4Repr::time_exceeded(TimeExceeded::TtlExpired, &quoted),
            Answer::ReassemblyExpired => {
                Icmpv4Repr::time_exceeded(TimeExceeded::FragReassembly, &quoted)
            }
            Answer::HeaderAtFault => Icmpv4Repr::param_problem(ParamProblem::Pointer, 8, &quoted),
            // Laid out as a network unreachable (code 0 and an unused word too), its type
            // changed below.
            Answer::SourceQuench => {
                Icmpv4Repr::dst_unreachable(DstUnreachable::NetUnreachable, 0, &quoted)
            }
        }
        .unwrap();
        let mut frame = icmp_frame(&icmp, (ROUTER, MAC_B), (ADDR_A, MAC_A));
        if let Answer::SourceQuench = rule.answer {
            // Type 3 → 4 in the first 16-bit word: the checksum falls by 0x0100 (RFC 1624).
            let at = ethernet::HEADER_LEN + 20;
            let f = frame.data_mut();
            f[at] = 4;
            let sum = u16::from_be_bytes([f[at + 2], f[at + 3]]);
            let (sum, carry) = sum.overflowing_sub(0x0100);
            let sum = if carry { sum - 1 } else { sum };
            f[at + 2..at + 4].copy_from_slice(&sum.to_be_bytes());
        }
        (false, Some(frame))
    }
}

/// Two stacks, A behind the router; returns the pair and the handle on the rule.
fn routed() -> (Pair, Arc<Mutex<Option<Rule>>>) {
    let rule = Arc::new(Mutex::new(None));
    let router = Router { rule: rule.clone() };
    let host = HostConfig::with_mtu(1500);
    let p = Pair::with_devices(
        host.clone(),
        host,
        move |nic| Box::new(Routed::new(nic, router)),
        |nic| Box::new(nic),
    )
    .unwrap();
    (p, rule)
}

fn tcp_rule(answer: Answer) -> Option<Rule> {
    Some(Rule {
        answer,
        protocol: 6,
        syn_only: false,
        seq_shift: 0,
    })
}

fn count(p: &Pair, c: Counter) -> u64 {
    p.a.ledger().counters().get(c)
}

/// Sends `msg` from A's `c` and runs until B's `s` has read it all and A holds none of it
/// unacknowledged (within 10 s); whether it did.
fn delivered(p: &mut Pair, c: TcpHandle, s: TcpHandle, msg: &[u8]) -> bool {
    assert_eq!(p.a.tcp_send(c, msg), Ok(msg.len()));
    let mut buf = vec![0u8; msg.len()];
    let mut got = 0;
    p.run_until(Duration::from_secs(10), |p| {
        got += p.b.tcp_recv(s, &mut buf[got..]).unwrap_or(0);
        got == msg.len() && p.a.tcp_send_queued(c) == Ok(0)
    }) && buf == msg
}

/// A soft error (host unreachable) about data in flight is kept for the application, and
/// the connection goes on; once the peer acknowledges new data it is forgotten.
#[test]
fn a_soft_error_is_kept_for_the_application_and_aborts_nothing() {
    let (mut p, rule) = routed();
    let (c, s) = connect(&mut p, 5001);
    *rule.lock().unwrap() = tcp_rule(Answer::Unreachable(DstUnreachable::HostUnreachable));
    assert_eq!(p.a.tcp_send(c, b"through a flaky router"), Ok(22));
    p.run_for(Duration::from_secs(1));
    assert_eq!(p.a.tcp_state(c), Ok(State::Established));
    assert_eq!(p.a.tcp_soft_error(c), Ok(Some(TcpError::HostUnreachable)));
    assert_eq!(p.a.tcp_error(c), Ok(None));
    assert!(count(&p, Counter::TcpIcmpErrors) > 0);
    // The way clears: the retransmission gets through and its ACK clears the error.
    *rule.lock().unwrap() = None;
    let mut buf = [0u8; 64];
    let mut got = 0;
    assert!(p.run_until(Duration::from_secs(10), |p| {
        got += p.b.tcp_recv(s, &mut buf[got..]).unwrap_or(0);
        got == 22 && p.a.tcp_send_queued(c) == Ok(0)
    }));
    assert_eq!(&buf[..22], b"through a flaky router");
    assert_eq!(p.a.tcp_soft_error(c), Ok(None));
    // A parameter problem is a soft error too (RFC 9293 §3.9.2.2).
    *rule.lock().unwrap() = tcp_rule(Answer::HeaderAtFault);
    assert_eq!(p.a.tcp_send(c, b"again"), Ok(5));
    p.run_for(Duration::from_secs(1));
    assert_eq!(p.a.tcp_state(c), Ok(State::Established));
    assert_eq!(p.a.tcp_soft_error(c), Ok(Some(TcpError::ProtocolError)));
}

/// RFC 9293 MUST-56 (§3.9.2.2, and SHLD-25): a time exceeded (TTL expired, RFC 792 code
/// 0) is a soft error and aborts nothing (see [`soft_error_aborts_nothing`]).
#[test]
fn a_time_exceeded_is_a_soft_error_that_aborts_nothing() {
    soft_error_aborts_nothing(Answer::TtlExpired);
}

/// RFC 9293 MUST-56 and SHLD-25 (§3.9.2.2) for destination unreachable code 5, source
/// route failed: a soft error, unlike codes 2 to 4 (SHLD-26), that aborts nothing (see
/// [`soft_error_aborts_nothing`]).
#[test]
fn a_source_route_failed_is_a_soft_error_that_aborts_nothing() {
    soft_error_aborts_nothing(Answer::Unreachable(DstUnreachable::SourceRouteFailed));
}

/// The router answers with `answer`, which the stack takes as a soft error (host
/// unreachable, as `IcmpError::Host` maps both answers). About the SYN, it leaves the
/// connect in SYN-SENT (a hard error would end it), and the SYN sent again once the router
/// lets it by opens the connection, which clears the soft error (as Linux clears
/// `sk_err_soft` on any acceptable ACK; until the thirty-fifth session it stayed until new
/// data). About data in flight: a second after the router answers A's segment so (its
/// retransmission too), the connection is still ESTABLISHED, with no error, and keeps the
/// soft error; once the router lets the segments by, the retransmission gets through, its
/// ACK clears the soft error, and the connection goes on.
fn soft_error_aborts_nothing(answer: Answer) {
    let (mut p, rule) = routed();
    let l = p.b.tcp_listen((ADDR_B, 5001), 4).unwrap();
    *rule.lock().unwrap() = Some(Rule {
        answer,
        protocol: 6,
        syn_only: true,
        seq_shift: 0,
    });
    let c = p.a.tcp_connect((ADDR_B, 5001)).unwrap();
    p.run_for(Duration::from_millis(10));
    assert_eq!(count(&p, Counter::TcpIcmpErrors), 1);
    assert_eq!(
        p.a.tcp_state(c),
        Ok(State::SynSent),
        "the connect was ended"
    );
    assert_eq!(p.a.tcp_error(c), Ok(None));
    assert_eq!(p.a.tcp_soft_error(c), Ok(Some(TcpError::HostUnreachable)));
    *rule.lock().unwrap() = None;
    let s = accepted_on_b(&mut p, l, c);
    assert_eq!(p.a.tcp_soft_error(c), Ok(None));
    assert!(delivered(&mut p, c, s, b"hello"));
    *rule.lock().unwrap() = tcp_rule(answer);
    assert_eq!(p.a.tcp_send(c, b"it went astray"), Ok(14));
    p.run_for(Duration::from_secs(1));
    assert!(
        count(&p, Counter::TcpIcmpErrors) > 1,
        "no error about the data"
    );
    assert_eq!(p.a.tcp_state(c), Ok(State::Established));
    assert_eq!(p.a.tcp_error(c), Ok(None));
    assert_eq!(p.a.tcp_soft_error(c), Ok(Some(TcpError::HostUnreachable)));
    *rule.lock().unwrap() = None;
    let mut buf = [0u8; 32];
    let mut got = 0;
    assert!(p.run_until(Duration::from_secs(10), |p| {
        got += p.b.tcp_recv(s, &mut buf[got..]).unwrap_or(0);
        got == 14 && p.a.tcp_send_queued(c) == Ok(0)
    }));
    assert_eq!(&buf[..14], b"it went astray");
    assert_eq!(p.a.tcp_soft_error(c), Ok(None));
    assert_eq!(p.a.tcp_state(c), Ok(State::Established));
    assert!(delivered(&mut p, c, s, b"more"));
}

/// A Source Quench about data in flight is discarded unheeded (RFC 9293 MUST-55, RFC 6633
/// §5) and counted as such: no soft error, no change to the congestion window, the
/// connection goes on.
#[test]
fn a_source_quench_is_discarded_unheeded() {
    let (mut p, rule) = routed();
    let (c, s) = connect(&mut p, 5001);
    let cwnd = p.a.tcp_connection(c).unwrap().cwnd();
    *rule.lock().unwrap() = tcp_rule(Answer::SourceQuench);
    assert_eq!(p.a.tcp_send(c, b"quench"), Ok(6));
    p.run_for(Duration::from_millis(1));
    *rule.lock().unwrap() = None;
    assert_eq!(count(&p, Counter::IcmpDropSourceQuench), 1);
    assert_eq!(count(&p, Counter::IcmpDropMalformed), 0);
    assert_eq!(count(&p, Counter::IcmpDropBadChecksum), 0);
    assert_eq!(p.a.tcp_soft_error(c), Ok(None));
    assert_eq!(p.a.tcp_connection(c).unwrap().cwnd(), cwnd);
    let mut buf = [0u8; 8];
    assert!(
        p.run_until(Duration::from_secs(2), |p| p.b.tcp_recv(s, &mut buf)
            == Ok(6))
    );
    assert_eq!(p.a.tcp_state(c), Ok(State::Established));
}

/// A connection that times out after soft errors reports the last of them, not
/// `TimedOut` (time exceeded: the host is unreachable).
#[test]
fn a_connection_that_times_out_reports_its_soft_error() {
    let (mut p, rule) = routed();
    let (c, _s) = connect(&mut p, 5001);
    *rule.lock().unwrap() = tcp_rule(Answer::TtlExpired);
    assert_eq!(p.a.tcp_send(c, b"lost"), Ok(4));
    assert!(p.run_until(Duration::from_secs(900), |p| p.a.tcp_state(c)
        == Ok(State::Closed)));
    assert_eq!(p.a.tcp_error(c), Ok(Some(TcpError::HostUnreachable)));
    // The network unreachable, likewise.
    let (mut p, rule) = routed();
    let (c, _s) = connect(&mut p, 5001);
    *rule.lock().unwrap() = tcp_rule(Answer::Unreachable(DstUnreachable::NetUnreachable));
    assert_eq!(p.a.tcp_send(c, b"lost"), Ok(4));
    assert!(p.run_until(Duration::from_secs(900), |p| p.a.tcp_state(c)
        == Ok(State::Closed)));
    assert_eq!(p.a.tcp_error(c), Ok(Some(TcpError::NetworkUnreachable)));
}

/// A hard error (port unreachable) about the SYN ends the connect at once; one that quotes
/// a sequence number not in flight (forged) is ignored; on a live connection a hard error
/// is kept as a soft one.
#[test]
fn a_hard_error_ends_a_connect_and_only_a_connect() {
    let (mut p, rule) = routed();
    let l = p.b.tcp_listen((ADDR_B, 5001), 4).unwrap();
    let hard = Rule {
        answer: Answer::Unreachable(DstUnreachable::PortUnreachable),
        protocol: 6,
        syn_only: true,
        seq_shift: 0,
    };
    *rule.lock().unwrap() = Some(Rule {
        seq_shift: 1000,
        ..hard
    });
    let c = p.a.tcp_connect((ADDR_B, 5001)).unwrap();
    p.run_for(Duration::from_millis(10));
    assert_eq!(
        p.a.tcp_state(c),
        Ok(State::SynSent),
        "a forged error was taken"
    );
    assert!(count(&p, Counter::TcpIcmpIgnored) > 0);
    *rule.lock().unwrap() = Some(hard);
    let c = p.a.tcp_connect((ADDR_B, 5001)).unwrap();
    p.run_for(Duration::from_millis(10));
    assert_eq!(p.a.tcp_state(c), Ok(State::Closed));
    assert_eq!(p.a.tcp_error(c), Ok(Some(TcpError::ConnectionRefused)));
    // Established: the same error is soft.
    *rule.lock().unwrap() = None;
    p.b.tcp_close(l).unwrap();
    let (c, _s) = connect(&mut p, 5001);
    *rule.lock().unwrap() = tcp_rule(Answer::Unreachable(DstUnreachable::PortUnreachable));
    assert_eq!(p.a.tcp_send(c, b"still here"), Ok(10));
    p.run_for(Duration::from_secs(1));
    assert_eq!(p.a.tcp_state(c), Ok(State::Established));
    assert_eq!(p.a.tcp_soft_error(c), Ok(Some(TcpError::ConnectionRefused)));
}

/// A hard error about a passive open's SYN-ACK ends the embryonic connection (SHLD-26),
/// so that its place in the listener's backlog goes to the next SYN at once rather than
/// after two minutes of SYN-ACKs. A listens with room for one (no SYN cookies); B's
/// first connect is answered by a port unreachable from A's router, its second (from
/// another port) gets in at once.
#[test]
fn a_hard_error_ends_a_passive_open_and_frees_its_place() {
    let (mut p, rule) = routed();
    let config = probestack::tcp::TcpConfig {
        syn_cookies: false,
        ..p.a.tcp_default_config()
    };
    p.a.set_tcp_default_config(config);
    let l = p.a.tcp_listen((ADDR_A, 5002), 1).unwrap();
    *rule.lock().unwrap() = Some(Rule {
        answer: Answer::Unreachable(DstUnreachable::PortUnreachable),
        protocol: 6,
        syn_only: true,
        seq_shift: 0,
    });
    let first = p.b.tcp_connect((ADDR_A, 5002)).unwrap();
    p.run_for(Duration::from_millis(10));
    assert_eq!(count(&p, Counter::TcpIcmpErrors), 1);
    *rule.lock().unwrap() = None;
    let second = p.b.tcp_connect((ADDR_A, 5002)).unwrap();
    assert!(
        p.run_until(Duration::from_millis(100), |p| p.b.tcp_state(second)
            == Ok(State::Established)),
        "the backlog was still full"
    );
    assert!(p.a.tcp_accept(l).is_ok());
    assert_eq!(p.b.tcp_state(first), Ok(State::SynSent));
}

/// A connected UDP socket is told of the errors about its datagrams on its next call:
/// network and host unreachable, time exceeded; an unconnected one is not.
#[test]
fn a_connected_udp_socket_is_told_of_every_error() {
    let (mut p, rule) = routed();
    let a = p.a.udp_open();
    p.a.udp_connect(a, ADDR_B, 9).unwrap();
    let mut buf = [0u8; 16];
    for (answer, want) in [
        (
            Answer::Unreachable(DstUnreachable::NetUnreachable),
            UdpError::NetworkUnreachable,
        ),
        (
            Answer::Unreachable(DstUnreachable::HostUnreachable),
            UdpError::HostUnreachable,
        ),
        (Answer::TtlExpired, UdpError::HostUnreachable),
        (
            Answer::Unreachable(DstUnreachable::PortUnreachable),
            UdpError::ConnectionRefused,
        ),
        (Answer::HeaderAtFault, UdpError::ProtocolError),
    ] {
        *rule.lock().unwrap() = Some(Rule {
            answer,
            protocol: 17,
            syn_only: false,
            seq_shift: 0,
        });
        p.a.udp_send(a, b"anyone?").unwrap();
        p.run_for(Duration::from_millis(10));
        assert_eq!(p.a.udp_recv(a, &mut buf), Err(want), "{answer:?}");
        assert_eq!(p.a.udp_recv(a, &mut buf), Err(UdpError::WouldBlock));
    }
    assert_eq!(count(&p, Counter::UdpIcmpErrors), 5);
    let unconnected = p.a.udp_open();
    p.a.udp_send_to(unconnected, b"anyone?", ADDR_B, 9).unwrap();
    p.run_for(Duration::from_millis(10));
    assert_eq!(
        p.a.udp_recv(unconnected, &mut buf),
        Err(UdpError::WouldBlock)
    );
}

/// Reassembly time exceeded (RFC 792 code 1) says one datagram lost a fragment on its way,
/// not that the host cannot be reached: counted, and no error to the socket, as 4.4BSD's
/// `inetctlerrmap` has it (and Linux's UDP without IP_RECVERR). Before, a connected
/// socket's next call failed as "host unreachable" after one lost fragment (found by the
/// random traffic of `tests/udp.rs`).
#[test]
fn a_reassembly_time_exceeded_is_no_error_to_a_socket() {
    let (mut p, rule) = routed();
    let a = p.a.udp_open();
    p.a.udp_connect(a, ADDR_B, 9).unwrap();
    *rule.lock().unwrap() = Some(Rule {
        answer: Answer::ReassemblyExpired,
        protocol: 17,
        syn_only: false,
        seq_shift: 0,
    });
    p.a.udp_send(a, b"anyone?").unwrap();
    p.run_for(Duration::from_millis(10));
    let mut buf = [0u8; 16];
    assert_eq!(p.a.udp_recv(a, &mut buf), Err(UdpError::WouldBlock));
    assert_eq!(p.a.udp_send(a, b"again"), Ok(5));
    assert_eq!(count(&p, Counter::IcmpErrorsIn), 1);
    assert_eq!(count(&p, Counter::UdpIcmpErrors), 0);
}
