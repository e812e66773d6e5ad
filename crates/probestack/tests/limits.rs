//! Resource limits under floods (issue 11, part 3), between two stacks on the memory link
//! with a virtual clock: each limit is configurable, holds under a flood, and is counted
//! when hit.
//!
//! - SYN flood: thousands of SYNs from spoofed 198.18.x.y addresses at a listener with a
//!   small backlog. With SYN cookies a legitimate client still connects and exchanges data
//!   during the flood, and the listener's connections and socket memory stay bounded;
//!   without them the client is shut out until the flood's half-open connections time out.
//! - Fragment flood: fragments of datagrams that never complete, held under the
//!   reassembly memory cap; a legitimate fragmented datagram still gets through.
//! - Socket memory: the stack-wide cap refuses the next socket (TCP or UDP) and drops an
//!   incoming connection's SYN.
//! - Out-of-order flood: islands past the out-of-order queue's range bound are dropped and
//!   counted, and the stream still arrives intact.
//!
//! The flood's frames are put in front of host B by [`Injector`], a device wrapped around
//! B's NIC, as if they had come off the wire; the spoofed hosts do not exist, so the same
//! device drops B's ARP requests for them (the SYN-ACKs B answers with wait for an ARP
//! reply that never comes, and are dropped when ARP gives up).

mod common;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use common::transfer::pattern;
use probestack::buf::PacketBuf;
use probestack::driver::{
    Device, DeviceCaps, DeviceContext, DeviceError, MemoryNic, RxChecksum, RxFrame, TxMeta,
};
use probestack::ip::reassembly::ReassemblyConfig;
use probestack::probe::Counter;
use probestack::sim::{ipv4_frame, ipv4_header, HostConfig, Pair, ADDR_A, ADDR_B, MAC_A, MAC_B};
use probestack::socket::tcp::{TcpError, TcpHandle};
use probestack::socket::udp::UdpError;
use probestack::stack::Stack;
use probestack::tcp::{State, TcpConfig};
use probestack::time::{Duration, Instant};
use probestack::wire::ethernet::{self, EtherType};
use probestack::wire::ipv4::{IpProtocol, Ipv4Repr};
use probestack::wire::tcp::{self as tcp_wire, Control, SeqNumber, TcpRepr};
use probestack::wire::{Checksum, Ipv4Address};

const PORT: u16 = 5001;

// ----------------------------------------------------------------------------------------
// The injector.

#[derive(Default)]
struct Shared {
    /// Frames to hand B before anything from the wire.
    inbox: VecDeque<PacketBuf>,
    /// ARP requests B sent for hosts that do not exist (dropped).
    arp_to_nowhere: u64,
    /// SYN-ACKs B sent: (destination, seq, ack, MSS, window scale, SACK permitted,
    /// timestamps).
    syn_acks: Vec<SynAck>,
}

#[derive(Clone, Copy, Debug)]
struct SynAck {
    to: (Ipv4Address, u16),
    seq: SeqNumber,
    ack: Option<SeqNumber>,
    mss: Option<u16>,
    window_scale: Option<u8>,
    sack_permitted: bool,
    timestamps: bool,
    /// The IP header's TTL and DSCP.
    ttl: u8,
    dscp: u8,
}

impl SynAck {
    fn parse(frame: &[u8]) -> Option<SynAck> {
        let eth = ethernet::Frame::new_checked(frame).ok()?;
        if eth.ethertype() != EtherType::Ipv4 {
            return None;
        }
        let ip = probestack::wire::ipv4::Packet::new_checked(eth.payload()).ok()?;
        let ip_repr = Ipv4Repr::parse(&ip, Checksum::Skip).ok()?;
        if ip_repr.protocol != IpProtocol::Tcp {
            return None;
        }
        let tcp = tcp_wire::Packet::new_checked(ip.payload()).ok()?;
        let t = TcpRepr::parse(&tcp, ip_repr.src, ip_repr.dst, Checksum::Check).ok()?;
        (t.control == Control::Syn && t.ack_number.is_some()).then_some(SynAck {
            to: (ip_repr.dst, t.dst_port),
            seq: t.seq_number,
            ack: t.ack_number,
            mss: t.max_seg_size,
            window_scale: t.window_scale,
            sack_permitted: t.sack_permitted,
            timestamps: t.timestamp.is_some(),
            ttl: ip_repr.ttl,
            dscp: ip_repr.dscp,
        })
    }
}

#[derive(Clone, Default)]
struct Net(Arc<Mutex<Shared>>);

impl Net {
    fn push(&self, frame: Vec<u8>) {
        let b = PacketBuf::from_slice(&frame, 0).unwrap();
        self.0.lock().unwrap().inbox.push_back(b);
    }

    fn pending(&self) -> usize {
        self.0.lock().unwrap().inbox.len()
    }

    fn arp_to_nowhere(&self) -> u64 {
        self.0.lock().unwrap().arp_to_nowhere
    }

    /// The SYN-ACKs B sent to `to`.
    fn syn_acks_to(&self, to: (Ipv4Address, u16)) -> Vec<SynAck> {
        let s = self.0.lock().unwrap();
        s.syn_acks.iter().filter(|x| x.to == to).copied().collect()
    }
}

/// B's NIC with the test's frames in front of what the wire brings.
struct Injector {
    inner: MemoryNic,
    net: Net,
    last_now: Instant,
}

/// An ARP request asking for an address other than A's.
fn arp_for_nowhere(frame: &[u8]) -> bool {
    let Ok(eth) = ethernet::Frame::new_checked(frame) else {
        return false;
    };
    // The target protocol address sits at bytes 24..28 of an Ethernet/IPv4 ARP packet.
    eth.ethertype() == EtherType::Arp
        && eth
            .payload()
            .get(24..28)
            .is_some_and(|tpa| tpa != ADDR_A.0.as_slice())
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
        self.last_now = cx.now;
        if arp_for_nowhere(frame.data()) {
            self.net.0.lock().unwrap().arp_to_nowhere += 1;
            return Ok(());
        }
        if let Some(x) = SynAck::parse(frame.data()) {
            self.net.0.lock().unwrap().syn_acks.push(x);
        }
        self.inner.transmit(frame, meta, cx)
    }

    fn tx_ready(&self) -> bool {
        self.inner.tx_ready()
    }

    fn take_notification(&mut self, cx: &DeviceContext<'_>) -> bool {
        self.last_now = cx.now;
        let raised = self.inner.take_notification(cx);
        raised || self.net.pending() > 0
    }

    fn receive(&mut self, cx: &DeviceContext<'_>) -> Option<RxFrame> {
        self.last_now = cx.now;
        if let Some(frame) = self.net.0.lock().unwrap().inbox.pop_front() {
            return Some(RxFrame {
                frame,
                checksum: RxChecksum::None,
            });
        }
        self.inner.receive(cx)
    }

    fn next_deadline(&self) -> Option<Instant> {
        let inner = self.inner.next_deadline();
        if self.net.pending() == 0 {
            inner
        } else {
            Some(inner.map_or(self.last_now, |t| t.min(self.last_now)))
        }
    }

    fn recycle(&mut self, frame: PacketBuf) {
        self.inner.recycle(frame);
    }
    fn buffer_depot(&self) -> Option<probestack::buf::Depot> {
        self.inner.buffer_depot()
    }
}

fn host() -> HostConfig {
    let mut h = HostConfig::with_mtu(1500);
    h.stack.tcp.msl = Duration::from_secs(1);
    h
}

/// A and B, with the injector on B's NIC.
fn pair_with(a: HostConfig, b: HostConfig) -> (Pair, Net) {
    let net = Net::default();
    let nb = net.clone();
    let p = Pair::with_devices(
        a,
        b,
        |n| Box::new(n),
        move |inner| {
            Box::new(Injector {
                inner,
                net: nb,
                last_now: Instant::ZERO,
            })
        },
    )
    .unwrap();
    (p, net)
}

/// The `i`-th spoofed source: an address in 198.18.1.0 – 198.19.255.255 (never A's or
/// B's) and a port.
fn spoofed(i: u32) -> (Ipv4Address, u16) {
    let host = 256 + i; // skip 198.18.0.x, where A and B live
    let addr = Ipv4Address::new(
        198,
        18 + ((host >> 16) & 1) as u8,
        (host >> 8) as u8,
        host as u8,
    );
    (addr, 1024 + (i.wrapping_mul(7919) % 60000) as u16)
}

/// A whole frame carrying `seg` from `src` to B.
fn tcp_frame(src: (Ipv4Address, u16), seg: &TcpRepr) -> Vec<u8> {
    let seg = TcpRepr {
        src_port: src.1,
        ..*seg
    };
    let ip = Ipv4Repr {
        dont_frag: true,
        ..ipv4_header(src.0, ADDR_B, IpProtocol::Tcp, seg.buffer_len())
    };
    ipv4_frame(MAC_A, MAC_B, &ip, |payload| {
        seg.emit(
            &mut tcp_wire::Packet::new_unchecked(payload),
            src.0,
            ADDR_B,
            Checksum::Check,
        )
        .unwrap();
    })
}

/// The `i`-th flood SYN, as a modern client sends it (MSS, window scale, SACK).
fn flood_syn(i: u32) -> Vec<u8> {
    let src = spoofed(i);
    tcp_frame(
        src,
        &TcpRepr {
            dst_port: PORT,
            control: Control::Syn,
            seq_number: SeqNumber(i.wrapping_mul(0x9e37_79b9)),
            window_len: 64240,
            max_seg_size: Some(1460),
            window_scale: Some(7),
            sack_permitted: true,
            ..TcpRepr::default()
        },
    )
}

fn count(s: &Stack, c: Counter) -> u64 {
    s.ledger().counters().get(c)
}

// ----------------------------------------------------------------------------------------
// SYN flood.

/// Backlog of the flooded listener.
const BACKLOG: usize = 8;
/// SYNs per batch, and a batch every `FLOOD_GAP`: 5,000 SYNs per second.
const FLOOD_BATCH: u32 = 50;
const FLOOD_GAP: Duration = Duration::from_millis(10);

/// What a flood run saw.
#[derive(Debug)]
struct FloodRun {
    syns: u32,
    /// When the legitimate exchange finished (from the start of the flood), if it did.
    done_after: Option<Duration>,
    /// The most connections B held at once, and the most socket memory it reserved.
    max_connections: usize,
    peak_socket_memory: usize,
    /// A's connection.
    client: Option<TcpHandle>,
}

/// The legitimate client: connects to B's echo server, sends `REQUEST` bytes, reads them
/// back.
const REQUEST: usize = 48 * 1024;

/// Floods B's listener for `flood_for` while A connects after the first batch, sends
/// `REQUEST` bytes and reads the echo; B accepts and echoes. Returns what it saw, with the
/// bytes A read back checked against what it sent.
fn syn_flood(cookies: bool, flood_for: Duration, run_for: Duration) -> (Pair, Net, FloodRun) {
    let mut b = host();
    b.stack.tcp.syn_cookies = cookies;
    // The flood's half-open connections outlast the client's three minutes of SYNs (8
    // SYN-ACK retransmissions, 243 s), so that without cookies the client is shut out for
    // as long as it tries, not let in by a race with their expiry.
    b.stack.tcp.max_syn_ack_retransmissions = 8;
    let (mut p, net) = pair_with(host(), b);
    let l = p.b.tcp_listen((ADDR_B, PORT), BACKLOG).unwrap();
    let start = p.now();
    let request = pattern(0, REQUEST);

    let mut syns = 0u32;
    let mut client: Option<TcpHandle> = None;
    let mut server: Option<TcpHandle> = None;
    let (mut sent, mut echoed, mut got) = (0usize, 0usize, Vec::new());
    let mut pending_echo: VecDeque<u8> = VecDeque::new();
    let mut done_after = None;
    let mut max_connections = 0;
    let mut next_batch = start;
    let end = start + run_for;
    let mut buf = vec![0u8; 16 * 1024];

    while p.now() < end {
        if p.now() >= next_batch && p.now() < start + flood_for {
            for _ in 0..FLOOD_BATCH {
                net.push(flood_syn(syns));
                syns += 1;
            }
            next_batch += FLOOD_GAP;
        }
        p.settle();
        if client.is_none() && syns > 0 {
            client = Some(p.a.tcp_connect((ADDR_B, PORT)).unwrap());
        }
        // The server: accept, echo what arrives.
        if server.is_none() {
            server = p.b.tcp_accept(l).ok();
        }
        if let Some(s) = server {
            while let Ok(n) = p.b.tcp_recv(s, &mut buf) {
                if n == 0 {
                    break;
                }
                pending_echo.extend(&buf[..n]);
            }
            while !pending_echo.is_empty() {
                let (front, _) = pending_echo.as_slices();
                match p.b.tcp_send(s, front) {
                    Ok(n) if n > 0 => {
                        pending_echo.drain(..n);
                        echoed += n;
                    }
                    _ => break,
                }
            }
        }
        // The client: send the request, read the echo.
        if let Some(c) = client {
            if p.a.tcp_state(c) == Ok(State::Established) && sent < REQUEST {
                if let Ok(n) = p.a.tcp_send(c, &request[sent..]) {
                    sent += n;
                }
            }
            while let Ok(n) = p.a.tcp_recv(c, &mut buf) {
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&buf[..n]);
            }
            if got.len() >= REQUEST && done_after.is_none() {
                done_after = Some(p.now() - start);
            }
        }
        max_connections = max_connections.max(p.b.tcp_connection_count());
        p.settle();
        max_connections = max_connections.max(p.b.tcp_connection_count());
        // On to the next batch, or the next timer, whichever comes first.
        let next = match p.settle() {
            Some(t) if t < next_batch || p.now() >= start + flood_for => t,
            _ if p.now() < start + flood_for => next_batch,
            Some(t) => t,
            None => end,
        };
        p.clock
            .advance_to(next.min(end).max(p.now() + Duration::from_micros(1)));
    }
    assert!(echoed <= REQUEST);
    if done_after.is_some() {
        assert_eq!(got, request, "the echo differs from the request");
    }
    let run = FloodRun {
        syns,
        done_after,
        max_connections,
        peak_socket_memory: p.b.socket_memory().peak,
        client,
    };
    (p, net, run)
}

/// With SYN cookies on (the default), a legitimate client connects, sends 48 KiB and reads
/// it back intact while 5,000 SYNs a second from spoofed addresses keep the backlog full;
/// the listener holds no more than its backlog plus the one real connection.
#[test]
fn syn_flood_with_cookies_lets_a_legitimate_client_through() {
    let flood = Duration::from_secs(2);
    let (p, net, run) = syn_flood(true, flood, flood);
    let b = &p.b;
    println!(
        "cookies on: {} SYNs; exchange done after {:?}; most connections {}; peak socket memory {} B; \
         cookies sent {}, accepted {}, rejected {}; listen overflows {}; ARP requests to spoofed hosts {}",
        run.syns,
        run.done_after,
        run.max_connections,
        run.peak_socket_memory,
        count(b, Counter::TcpSynCookiesSent),
        count(b, Counter::TcpSynCookiesAccepted),
        count(b, Counter::TcpSynCookiesRejected),
        count(b, Counter::TcpDropListenOverflow),
        net.arp_to_nowhere(),
    );
    assert_eq!(run.syns, 10_000);
    let done = run.done_after.expect("the legitimate exchange completed");
    assert!(
        done < flood,
        "done after {done:?}, the flood lasted {flood:?}"
    );
    // Bounded: the backlog's half-open connections plus the real one, however many SYNs.
    assert!(
        run.max_connections <= BACKLOG + 1,
        "{} connections",
        run.max_connections
    );
    let per_connection = {
        let c = TcpConfig::default();
        c.send_buffer + c.recv_buffer
    };
    assert!(run.peak_socket_memory <= (BACKLOG + 1) * per_connection);
    // Every SYN past the backlog was answered with a cookie, and the client's ACK (the
    // only one that came back) made its connection.
    let cookies_sent = count(b, Counter::TcpSynCookiesSent);
    assert_eq!(cookies_sent, u64::from(run.syns) - BACKLOG as u64 + 1);
    assert_eq!(count(b, Counter::TcpSynCookiesAccepted), 1);
    assert_eq!(count(b, Counter::TcpSynCookiesRejected), 0);
    assert_eq!(count(b, Counter::TcpDropListenOverflow), 0);
    assert_eq!(count(b, Counter::TcpPassiveOpens), 1);
    // The cookie connection carries none of the options the cookie cannot.
    let a = p.a.tcp_connection(run.client.unwrap()).unwrap();
    assert_eq!(a.mss().0, 1460);
    assert!(!a.timestamps_enabled() && !a.sack_enabled());
    assert_eq!(a.window_shifts(), (0, 0));
}

/// Without SYN cookies the same two-second flood shuts the legitimate client out: its SYN
/// and every retransmission of it find the backlog full of the flood's half-open
/// connections (which keep retransmitting their SYN-ACKs for minutes) and are dropped and
/// counted, until the client gives up after its SYN retransmissions (three minutes).
#[test]
fn syn_flood_without_cookies_shuts_the_client_out() {
    let flood = Duration::from_secs(2);
    let (p, _net, run) = syn_flood(false, flood, Duration::from_secs(200));
    let b = &p.b;
    let client = run.client.unwrap();
    println!(
        "cookies off: {} SYNs; exchange done after {:?}; most connections {}; listen overflows {}; client {:?} {:?}",
        run.syns,
        run.done_after,
        run.max_connections,
        count(b, Counter::TcpDropListenOverflow),
        p.a.tcp_state(client),
        p.a.tcp_error(client),
    );
    assert_eq!(run.done_after, None);
    assert_eq!(p.a.tcp_error(client), Ok(Some(TcpError::TimedOut)));
    assert_eq!(count(b, Counter::TcpSynCookiesSent), 0);
    assert_eq!(count(b, Counter::TcpPassiveOpens), 0);
    // Every flood SYN past the backlog, and the client's SYN and its seven retransmissions.
    let client_syns = 1 + u64::from(TcpConfig::default().max_syn_retransmissions);
    assert_eq!(
        count(b, Counter::TcpDropListenOverflow),
        u64::from(run.syns) - BACKLOG as u64 + client_syns
    );
    assert!(run.max_connections <= BACKLOG);
}

/// A SYN cookie's SYN-ACK carries its listener's TTL and DSCP (RFC 9293 MUST-48,
/// SHLD-22), as the SYN-ACK of a connection the listener keeps does; until the
/// thirty-fifth session it went with the stack's.
#[test]
fn a_cookies_syn_ack_carries_its_listeners_ttl_and_dscp() {
    let (mut p, net) = pair_with(host(), host());
    let l = p.b.tcp_listen((ADDR_B, PORT), BACKLOG).unwrap();
    let fields = probestack::ip::IpFields {
        ttl: Some(9),
        dscp: 10,
    };
    p.b.tcp_set_ip_fields(l, fields).unwrap();
    for i in 0..=BACKLOG as u32 {
        p.b.add_static_arp(0, spoofed(i).0, MAC_A);
        net.push(flood_syn(i));
    }
    p.settle();
    assert_eq!(count(&p.b, Counter::TcpSynCookiesSent), 1);
    for i in 0..=BACKLOG as u32 {
        let got = net.syn_acks_to(spoofed(i));
        assert!(!got.is_empty(), "SYN {i} unanswered");
        assert!(got.iter().all(|a| (a.ttl, a.dscp) == (9, 10)), "{got:?}");
    }
}

/// ACKs to a listener are looked at for cookies only while it sends them. Not flooded,
/// it answers a stray ACK with a RST and no cookie check; flooded (a SYN past its backlog
/// answered with a cookie), ACKs with forged cookies are refused, counted and answered
/// with RFC 9293's RST, and none makes a connection.
#[test]
fn forged_cookie_acks_are_rejected() {
    let (mut p, net) = pair_with(host(), host());
    let _l = p.b.tcp_listen((ADDR_B, PORT), BACKLOG).unwrap();
    let forged_ack = |i: u32| {
        tcp_frame(
            spoofed(100_000 + i),
            &TcpRepr {
                dst_port: PORT,
                seq_number: SeqNumber(i * 77 + 1),
                ack_number: Some(SeqNumber(i.wrapping_mul(0x0101_0101))),
                window_len: 1000,
                payload: b"GET / HTTP/1.0\r\n\r\n",
                ..TcpRepr::default()
            },
        )
    };
    net.push(forged_ack(0));
    p.settle();
    assert_eq!(count(&p.b, Counter::TcpSynCookiesRejected), 0);
    assert_eq!(count(&p.b, Counter::TcpResetsOut), 1);

    for i in 0..=BACKLOG as u32 {
        net.push(flood_syn(i));
    }
    p.settle();
    assert_eq!(count(&p.b, Counter::TcpSynCookiesSent), 1);
    let forged = 1000;
    for i in 1..=forged {
        net.push(forged_ack(i));
    }
    p.run_for(Duration::from_millis(10));
    assert_eq!(
        count(&p.b, Counter::TcpSynCookiesRejected),
        u64::from(forged)
    );
    assert_eq!(count(&p.b, Counter::TcpSynCookiesAccepted), 0);
    assert_eq!(p.b.tcp_connection_count(), BACKLOG);
    assert_eq!(count(&p.b, Counter::TcpResetsOut), 1 + u64::from(forged));
}

/// A client of the test's own making (its segments crafted here, B's replies captured),
/// against a listener whose backlog the flood has filled: B's SYN-ACK carries a cookie and
/// offers only an MSS; an ACK returning it with data and FIN makes an ESTABLISHED
/// connection whose data is read and whose FIN is seen; the same kind of ACK after the
/// cookie has expired is refused and counted.
#[test]
fn a_cookie_ack_with_data_makes_a_connection_and_an_old_one_is_refused() {
    let (mut p, net) = pair_with(host(), host());
    let l = p.b.tcp_listen((ADDR_B, PORT), BACKLOG).unwrap();
    for i in 0..BACKLOG as u32 {
        net.push(flood_syn(i));
    }
    p.settle();
    assert_eq!(count(&p.b, Counter::TcpSynCookiesSent), 0);

    // Two clients that exist, in the sense that B can reach their MAC (A's, which drops
    // what it is sent for an address not its own).
    let fresh = (Ipv4Address::new(198, 18, 200, 1), 40001);
    let stale = (Ipv4Address::new(198, 18, 200, 2), 40002);
    p.b.add_static_arp(0, fresh.0, MAC_A);
    p.b.add_static_arp(0, stale.0, MAC_A);
    let isn = SeqNumber(0x1234_5678);
    for who in [fresh, stale] {
        net.push(tcp_frame(
            who,
            &TcpRepr {
                dst_port: PORT,
                control: Control::Syn,
                seq_number: isn,
                window_len: 65535,
                max_seg_size: Some(1400),
                window_scale: Some(7),
                sack_permitted: true,
                ..TcpRepr::default()
            },
        ));
    }
    p.settle();
    assert_eq!(count(&p.b, Counter::TcpSynCookiesSent), 2);
    let cookie_of = |who| {
        let got = net.syn_acks_to(who);
        assert_eq!(got.len(), 1, "one SYN-ACK to {who:?}");
        let x = got[0];
        assert_eq!(x.ack, Some(isn + 1));
        // What the cookie cannot carry is not offered.
        assert_eq!(x.mss, Some(1460));
        assert!(x.window_scale.is_none() && !x.sack_permitted && !x.timestamps);
        x.seq
    };
    let (fresh_cookie, stale_cookie) = (cookie_of(fresh), cookie_of(stale));
    let ack_with_data = |cookie: SeqNumber| TcpRepr {
        dst_port: PORT,
        control: Control::Fin,
        seq_number: isn + 1,
        ack_number: Some(cookie + 1),
        window_len: 65535,
        payload: b"data on the cookie's ACK",
        ..TcpRepr::default()
    };

    net.push(tcp_frame(fresh, &ack_with_data(fresh_cookie)));
    p.settle();
    assert_eq!(count(&p.b, Counter::TcpSynCookiesAccepted), 1);
    let s =
        p.b.tcp_accept(l)
            .expect("the cookie's connection is queued");
    assert_eq!(p.b.tcp_state(s), Ok(State::CloseWait));
    let conn = p.b.tcp_connection(s).unwrap();
    // The MSS the cookie carried: the table's largest not above the client's 1400.
    assert_eq!(conn.mss().0, 1400);
    assert!(!conn.timestamps_enabled() && !conn.sack_enabled());
    let mut buf = [0u8; 64];
    let n = p.b.tcp_recv(s, &mut buf).unwrap();
    assert_eq!(&buf[..n], b"data on the cookie's ACK");
    assert_eq!(p.b.tcp_recv(s, &mut buf), Ok(0), "the FIN");

    // A cookie lives at most 128 s.
    let resets = count(&p.b, Counter::TcpResetsOut);
    p.run_for(Duration::from_secs(130));
    // The first flood's half-open connections have given up by now; a new flood makes
    // the listener send cookies again (and so look at ACKs for them).
    for i in 0..=BACKLOG as u32 {
        net.push(flood_syn(1000 + i));
    }
    p.settle();
    assert_eq!(count(&p.b, Counter::TcpSynCookiesSent), 3);
    net.push(tcp_frame(stale, &ack_with_data(stale_cookie)));
    p.settle();
    assert_eq!(count(&p.b, Counter::TcpSynCookiesRejected), 1);
    assert_eq!(count(&p.b, Counter::TcpSynCookiesAccepted), 1);
    assert!(count(&p.b, Counter::TcpResetsOut) > resets);
    assert_eq!(p.b.tcp_accept(l), Err(TcpError::WouldBlock));
}

#[test]
fn the_accept_queue_stays_within_the_backlog_when_cookies_filled_it() {
    // Backlog 2: two clients half open, two more admitted by cookies into the accept
    // queue; then the first two finish their handshakes and find no room.
    const SMALL: usize = 2;
    let (mut p, net) = pair_with(host(), host());
    let l = p.b.tcp_listen((ADDR_B, PORT), SMALL).unwrap();
    let isn = SeqNumber(0x0bad_cafe);
    let client = |i: u8| (Ipv4Address::new(198, 18, 201, i), 41000 + u16::from(i));
    let syn = TcpRepr {
        dst_port: PORT,
        control: Control::Syn,
        seq_number: isn,
        window_len: 65535,
        max_seg_size: Some(1460),
        ..TcpRepr::default()
    };
    let ack = |synack: SeqNumber| TcpRepr {
        dst_port: PORT,
        seq_number: isn + 1,
        ack_number: Some(synack + 1),
        window_len: 65535,
        ..TcpRepr::default()
    };
    for i in 0..4 {
        p.b.add_static_arp(0, client(i).0, MAC_A);
        net.push(tcp_frame(client(i), &syn));
        p.settle();
    }
    assert_eq!(
        count(&p.b, Counter::TcpSynCookiesSent),
        2,
        "the last two got cookies"
    );
    // The cookie clients complete first and fill the accept queue.
    for i in 2..4 {
        let cookie = net.syn_acks_to(client(i))[0].seq;
        net.push(tcp_frame(client(i), &ack(cookie)));
        p.settle();
    }
    assert_eq!(count(&p.b, Counter::TcpSynCookiesAccepted), 2);
    let overflows = count(&p.b, Counter::TcpDropListenOverflow);
    let resets = count(&p.b, Counter::TcpResetsOut);
    for i in 0..2 {
        let synack = net.syn_acks_to(client(i))[0].seq;
        net.push(tcp_frame(client(i), &ack(synack)));
        p.settle();
    }
    assert_eq!(
        count(&p.b, Counter::TcpDropListenOverflow),
        overflows + 2,
        "no room: counted"
    );
    assert_eq!(count(&p.b, Counter::TcpResetsOut), resets + 2, "and reset");
    let mut queued = 0;
    while p.b.tcp_accept(l).is_ok() {
        queued += 1;
    }
    assert_eq!(
        queued, SMALL,
        "the accept queue never held more than the backlog"
    );
}

// ----------------------------------------------------------------------------------------
// Fragment flood.

/// A first fragment (offset 0, More Fragments set) of a datagram that never completes.
fn flood_fragment(i: u32, offset: usize, len: usize) -> Vec<u8> {
    let ip = Ipv4Repr {
        ident: i as u16,
        more_frags: true,
        frag_offset: offset as u16,
        ..ipv4_header(spoofed(i).0, ADDR_B, IpProtocol::Udp, len)
    };
    ipv4_frame(MAC_A, MAC_B, &ip, |payload| payload.fill(0x5a))
}

/// 20,000 fragments of datagrams that never complete, from 2,000 spoofed sources, fill
/// the reassembly queue past its cap: what it holds stays under `max_bytes` and
/// `max_datagrams` throughout, the oldest datagrams are evicted and counted, fragments
/// whose datagram could never fit are refused and counted, and a legitimate fragmented
/// UDP datagram sent in the middle of the flood is still delivered whole.
#[test]
fn fragment_flood_is_held_under_the_reassembly_cap() {
    let cap = ReassemblyConfig {
        max_bytes: 60 * 1024,
        max_datagrams: 64,
        ..ReassemblyConfig::default()
    };
    let mut b = host();
    b.stack.reassembly = cap;
    let (mut p, net) = pair_with(host(), b);
    let rx = p.b.udp_open();
    p.b.udp_bind(rx, ADDR_B, 9000).unwrap();
    let tx = p.a.udp_open();
    let big = pattern(0, 8000); // six fragments at MTU 1500

    let mut frags = 0u64;
    let mut refused_sent = 0u64;
    let mut max_held = 0usize;
    let mut delivered = None;
    for round in 0..100u32 {
        for k in 0..200u32 {
            let i = round * 200 + k;
            if k == 0 {
                // 64,200 bytes in: its datagram could never fit under the 60 KiB cap.
                net.push(flood_fragment(i, 65000 - 8 * 100, 400));
                refused_sent += 1;
            } else {
                net.push(flood_fragment(i % 2000, (i as usize / 2000) * 1480, 1480));
            }
            frags += 1;
        }
        if round == 50 {
            p.a.udp_send_to(tx, &big, ADDR_B, 9000).unwrap();
        }
        p.run_for(Duration::from_millis(1));
        let r = p.b.reassembler();
        assert!(r.bytes_held() <= cap.max_bytes, "{} held", r.bytes_held());
        assert!(r.datagrams_held() <= cap.max_datagrams);
        max_held = max_held.max(r.bytes_held());
        let mut buf = vec![0u8; 16 * 1024];
        if let Ok(got) = p.b.udp_recv_from(rx, &mut buf) {
            delivered = Some(buf[..got.len].to_vec());
        }
    }
    let b = &p.b;
    println!(
        "fragment flood: {frags} fragments; most held {max_held} B of {} B; evicted {}, refused {}, reassembled {}",
        cap.max_bytes,
        count(b, Counter::IpFragEvicted),
        count(b, Counter::IpDropFragMemory),
        count(b, Counter::IpReassembled),
    );
    assert_eq!(
        delivered.as_deref(),
        Some(&big[..]),
        "the legitimate datagram"
    );
    assert_eq!(count(b, Counter::IpReassembled), 1);
    assert_eq!(count(b, Counter::IpDropFragMemory), refused_sent);
    let evicted = count(b, Counter::IpFragEvicted);
    assert_eq!(evicted, b.reassembler().stats().evicted_for_memory);
    // Nearly every flood datagram was pushed out to make room for a newer one.
    assert!(evicted > 19_000, "{evicted} evicted");
    assert!(max_held > cap.max_bytes / 2, "the flood did fill the queue");
}

// ----------------------------------------------------------------------------------------
// Socket memory.

/// Small buffers, so that a limit of a few connections is easy to state.
fn small_buffers() -> TcpConfig {
    TcpConfig {
        send_buffer: 16 * 1024,
        recv_buffer: 16 * 1024,
        ..TcpConfig::default()
    }
}

const PER_CONNECTION: usize = 32 * 1024;

#[test]
fn socket_memory_cap_refuses_the_next_socket() {
    let mut a = host();
    a.stack.tcp = small_buffers();
    a.stack.socket_memory_limit = 3 * PER_CONNECTION;
    let (mut p, _net) = pair_with(a, host());
    let _l = p.b.tcp_listen((ADDR_B, PORT), 8).unwrap();
    let conns: Vec<_> = (0..3)
        .map(|_| p.a.tcp_connect((ADDR_B, PORT)).unwrap())
        .collect();
    assert_eq!(p.a.socket_memory().reserved, 3 * PER_CONNECTION);
    assert_eq!(
        p.a.tcp_connect((ADDR_B, PORT)),
        Err(TcpError::NoSocketMemory)
    );
    assert_eq!(count(&p.a, Counter::StackDropSocketMemory), 1);
    // A UDP socket's receive queue counts against the same cap: binding one is refused
    // until its limit fits.
    let u = p.a.udp_open();
    assert_eq!(p.a.udp_bind(u, ADDR_A, 7000), Err(UdpError::NoSocketMemory));
    assert_eq!(count(&p.a, Counter::StackDropSocketMemory), 2);

    // Closing a connection gives its memory back once it is gone.
    p.a.tcp_abort(conns[0]).unwrap();
    assert_eq!(p.a.socket_memory().reserved, 2 * PER_CONNECTION);
    p.a.udp_set_recv_buffer(u, PER_CONNECTION).unwrap();
    p.a.udp_bind(u, ADDR_A, 7000).unwrap();
    assert_eq!(p.a.socket_memory().reserved, 3 * PER_CONNECTION);
    // Growing the bound socket's queue past the cap is refused; the old limit stays.
    assert_eq!(
        p.a.udp_set_recv_buffer(u, PER_CONNECTION + 1),
        Err(UdpError::NoSocketMemory)
    );
    assert_eq!(p.a.socket_memory().reserved, 3 * PER_CONNECTION);
    p.a.udp_close(u).unwrap();
    assert!(p.a.tcp_connect((ADDR_B, PORT)).is_ok());
    assert_eq!(p.a.socket_memory().peak, 3 * PER_CONNECTION);
}

#[test]
fn socket_memory_cap_drops_an_incoming_connection() {
    let mut b = host();
    b.stack.tcp = small_buffers();
    b.stack.socket_memory_limit = 2 * PER_CONNECTION;
    let (mut p, _net) = pair_with(host(), b);
    let l = p.b.tcp_listen((ADDR_B, PORT), 8).unwrap();
    let conns: Vec<_> = (0..3)
        .map(|_| p.a.tcp_connect((ADDR_B, PORT)).unwrap())
        .collect();
    p.run_for(Duration::from_millis(100));
    let established = conns
        .iter()
        .filter(|&&c| p.a.tcp_state(c) == Ok(State::Established))
        .count();
    assert_eq!(established, 2);
    assert_eq!(count(&p.b, Counter::StackDropSocketMemory), 1);
    assert_eq!(p.b.tcp_connection_count(), 2);
    assert_eq!(p.b.socket_memory().reserved, 2 * PER_CONNECTION);
    // One of B's connections goes: the third client's retransmitted SYN gets in.
    let s = p.b.tcp_accept(l).unwrap();
    p.b.tcp_abort(s).unwrap();
    assert!(p.run_until(Duration::from_secs(5), |p| conns
        .iter()
        .filter(|&&c| p.a.tcp_state(c) == Ok(State::Established))
        .count()
        == 2
        && p.b.tcp_connection_count() == 2
        && count(&p.b, Counter::TcpPassiveOpens) == 3));
}

// ----------------------------------------------------------------------------------------
// Out-of-order flood.

/// 200 one-island segments past a gap, at a connection whose out-of-order queue keeps
/// four islands: the first four are held, the other 196 are dropped and counted; the
/// stream then arrives intact (the held islands carry the stream's own bytes).
#[test]
fn out_of_order_flood_is_counted() {
    let mut a = host();
    a.stack.tcp.timestamps = false; // so the forged segments need no timestamp
    let mut b = host();
    b.stack.tcp.max_ooo_ranges = 4;
    let (mut p, net) = pair_with(a, b);
    let l = p.b.tcp_listen((ADDR_B, PORT), 8).unwrap();
    let c = p.a.tcp_connect((ADDR_B, PORT)).unwrap();
    let mut s = None;
    assert!(p.run_until(Duration::from_secs(1), |p| {
        s = s.or_else(|| p.b.tcp_accept(l).ok());
        s.is_some() && p.a.tcp_state(c) == Ok(State::Established)
    }));
    let s = s.unwrap();
    let ((_, a_port), _) = p.a.tcp_endpoints(c).unwrap();
    let conn = p.b.tcp_connection(s).unwrap();
    let (rcv_nxt, snd_nxt) = (conn.rcv_nxt(), conn.snd_nxt());
    let stream = pattern(0, 64 * 1024);
    let (islands, island_len) = (200usize, 16usize);
    for k in 1..=islands {
        let offset = 2 * k * island_len;
        let seg = TcpRepr {
            dst_port: PORT,
            seq_number: rcv_nxt + offset,
            ack_number: Some(snd_nxt),
            window_len: 65535,
            payload: &stream[offset..offset + island_len],
            ..TcpRepr::default()
        };
        net.push(tcp_frame((ADDR_A, a_port), &seg));
    }
    p.settle();
    let b = &p.b;
    println!(
        "ooo flood: {islands} islands; out of order {}, dropped for the range bound {}",
        count(b, Counter::TcpOutOfOrderSegments),
        count(b, Counter::TcpDropOutOfOrderFull),
    );
    assert_eq!(count(b, Counter::TcpOutOfOrderSegments), islands as u64);
    assert_eq!(count(b, Counter::TcpDropOutOfOrderFull), islands as u64 - 4);
    assert_eq!(p.b.tcp_stats(s).unwrap().ooo_dropped, islands as u64 - 4);

    // The real stream, through the held islands.
    let mut sent = 0;
    let mut got = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    assert!(p.run_until(Duration::from_secs(5), |p| {
        if sent < stream.len() {
            sent += p.a.tcp_send(c, &stream[sent..]).unwrap_or(0);
        }
        while let Ok(n) = p.b.tcp_recv(s, &mut buf) {
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        got.len() >= stream.len()
    }));
    assert_eq!(got, stream);
}
