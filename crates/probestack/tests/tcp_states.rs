//! RFC 9293's state diagram (Figure 5, §3.3.2) transition by transition, and RFC 5961's
//! defences against blind in-window injection, between two stacks on the memory link with
//! a virtual clock.
//!
//! Many transitions last no longer than a round trip, so each NIC is wrapped in a [`Tap`]:
//! a middleware device that logs every TCP segment its host sends and lets a test drop or
//! hold segments on their way into a host (and release them later), or put a crafted
//! segment in front of a host as if it had come off the wire. A held ACK keeps a connection
//! in FIN-WAIT-1, CLOSING or LAST-ACK for as long as the test wants to look at it; a forged
//! segment plays the blind attacker of RFC 5961.
//!
//! Not every arrow of Figure 5 is reachable through the socket API:
//!
//! - LISTEN → SYN-SENT (a SEND on a listening socket turns it into an active open) is not
//!   offered: `tcp_send` on a listener is refused, as in the BSD socket API, and a
//!   connection is opened with `tcp_connect` from CLOSED instead
//!   (`listen_to_syn_sent_is_not_offered`).
//! - A passively opened connection has no handle until it is ESTABLISHED and accepted, so
//!   its SYN-RECEIVED is seen on the wire (its SYN-ACK, and nothing in the accept queue)
//!   rather than through `tcp_state`; SYN-RECEIVED with a handle comes from a simultaneous
//!   open.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use probestack::buf::PacketBuf;
use probestack::driver::{
    Device, DeviceCaps, DeviceContext, DeviceError, MemoryNic, RxChecksum, RxFrame, TxMeta,
};
use probestack::probe::Counter;
use probestack::sim::{ipv4_frame, ipv4_header, HostConfig, Pair, ADDR_A, ADDR_B, MAC_A, MAC_B};
use probestack::socket::tcp::{TcpError, TcpHandle};
use probestack::tcp::State;
use probestack::time::{Duration, Instant};
use probestack::tuning::Tuning;
use probestack::wire::ethernet::{self, EtherType};
use probestack::wire::ipv4::{self, IpProtocol, Ipv4Repr};
use probestack::wire::tcp::{self as tcp_wire, Control, SeqNumber, TcpRepr, TcpTimestamp};
use probestack::wire::{Checksum, Ipv4Address};

const PORT: u16 = 5001;

/// The maximum segment lifetime of these tests: TIME-WAIT lasts 2 s.
const MSL: Duration = Duration::from_secs(1);

/// Challenge ACKs a connection sends per second: `CHALLENGE_ACK_LIMIT` in
/// `src/tcp/connection.rs` (private there, so repeated here).
const CHALLENGE_ACK_LIMIT: u64 = 100;

// ----------------------------------------------------------------------------------------
// The tap.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Host {
    A,
    B,
}

impl Host {
    fn index(self) -> usize {
        match self {
            Host::A => 0,
            Host::B => 1,
        }
    }

    fn peer(self) -> Host {
        match self {
            Host::A => Host::B,
            Host::B => Host::A,
        }
    }

    fn addresses(self) -> (probestack::wire::Ipv4Address, ethernet::EthernetAddress) {
        match self {
            Host::A => (ADDR_A, MAC_A),
            Host::B => (ADDR_B, MAC_B),
        }
    }
}

/// A TCP segment as a tap saw it.
#[derive(Clone, Debug)]
struct Seg {
    /// When it was sent (or, for a segment a rule looks at, received).
    at: Instant,
    from: Host,
    src_port: u16,
    dst_port: u16,
    control: Control,
    seq: SeqNumber,
    ack: Option<SeqNumber>,
    window: u16,
    timestamp: Option<TcpTimestamp>,
    payload: Vec<u8>,
}

impl Seg {
    /// The TCP segment in an Ethernet frame, if it holds one.
    fn parse(frame: &[u8], at: Instant, from: Host) -> Option<Seg> {
        let eth = ethernet::Frame::new_checked(frame).ok()?;
        if eth.ethertype() != EtherType::Ipv4 {
            return None;
        }
        let ip = ipv4::Packet::new_checked(eth.payload()).ok()?;
        let ip_repr = Ipv4Repr::parse(&ip, Checksum::Skip).ok()?;
        if ip_repr.protocol != IpProtocol::Tcp {
            return None;
        }
        let tcp = tcp_wire::Packet::new_checked(ip.payload()).ok()?;
        let t = TcpRepr::parse(&tcp, ip_repr.src, ip_repr.dst, Checksum::Skip).ok()?;
        Some(Seg {
            at,
            from,
            src_port: t.src_port,
            dst_port: t.dst_port,
            control: t.control,
            seq: t.seq_number,
            ack: t.ack_number,
            window: t.window_len,
            timestamp: t.timestamp,
            payload: t.payload.to_vec(),
        })
    }

    /// An ACK carrying neither data nor SYN, FIN or RST.
    fn is_pure_ack(&self) -> bool {
        self.control == Control::None && self.ack.is_some() && self.payload.is_empty()
    }

    fn acks(&self, n: SeqNumber) -> bool {
        self.ack == Some(n)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Action {
    /// The segment is lost.
    Drop,
    /// The segment waits in the tap until [`Net::release`].
    Hold,
}

type Matcher = Box<dyn Fn(&Seg) -> bool + Send>;

/// What a tap does to segments arriving at host `to` that `matches` picks, for the next
/// `left` of them.
struct Rule {
    to: Host,
    action: Action,
    matches: Matcher,
    left: usize,
}

/// What the two taps share with the test.
#[derive(Default)]
struct Shared {
    /// Every TCP segment either host sent, in order.
    sent: Vec<Seg>,
    rules: Vec<Rule>,
    /// Frames held on their way into a host.
    held: Vec<(Host, RxFrame)>,
    /// Frames to hand to A and to B before anything from the wire.
    inbox: [VecDeque<PacketBuf>; 2],
    /// Segments dropped by a rule.
    dropped: Vec<Seg>,
}

/// The test's handle on the taps.
#[derive(Clone, Default)]
struct Net(Arc<Mutex<Shared>>);

impl Net {
    fn lock(&self) -> MutexGuard<'_, Shared> {
        self.0.lock().unwrap()
    }

    fn rule(
        &self,
        to: Host,
        action: Action,
        left: usize,
        matches: impl Fn(&Seg) -> bool + Send + 'static,
    ) {
        self.lock().rules.push(Rule {
            to,
            action,
            matches: Box::new(matches),
            left,
        });
    }

    /// Drops the next `n` segments arriving at `to` that `matches` picks.
    fn drop_into(&self, to: Host, n: usize, matches: impl Fn(&Seg) -> bool + Send + 'static) {
        self.rule(to, Action::Drop, n, matches);
    }

    /// Holds every segment arriving at `to` that `matches` picks, until released.
    fn hold_into(&self, to: Host, matches: impl Fn(&Seg) -> bool + Send + 'static) {
        self.rule(to, Action::Hold, usize::MAX, matches);
    }

    /// Removes the rules and delivers what they held, in the order it arrived; returns
    /// how many frames that was.
    fn release(&self) -> usize {
        let mut s = self.lock();
        s.rules.clear();
        let held = std::mem::take(&mut s.held);
        let n = held.len();
        for (to, rx) in held {
            s.inbox[to.index()].push_back(rx.frame);
        }
        n
    }

    fn held(&self) -> usize {
        self.lock().held.len()
    }

    fn dropped(&self) -> Vec<Seg> {
        self.lock().dropped.clone()
    }

    /// A mark in the log of segments sent: [`Net::sent_since`] lists what came after.
    fn mark(&self) -> usize {
        self.lock().sent.len()
    }

    fn sent(&self) -> Vec<Seg> {
        self.lock().sent.clone()
    }

    /// Segments `from` sent after `mark`.
    fn sent_since(&self, mark: usize, from: Host) -> Vec<Seg> {
        self.lock().sent[mark..]
            .iter()
            .filter(|s| s.from == from)
            .cloned()
            .collect()
    }

    /// Puts `seg`, from `from`, in front of the other host as if it had come off the wire:
    /// a whole frame, the IPv4 and TCP checksums computed.
    fn inject(&self, from: Host, seg: &TcpRepr) {
        let (src, _) = from.addresses();
        let (dst, _) = from.peer().addresses();
        self.inject_between(from.peer(), src, dst, seg);
    }

    /// Puts `seg`, from `src` to `dst` in its IP header, in front of host `to`, in a frame
    /// from the other host's MAC to `to`'s.
    fn inject_between(&self, to: Host, src: Ipv4Address, dst: Ipv4Address, seg: &TcpRepr) {
        let (_, src_mac) = to.peer().addresses();
        let (_, dst_mac) = to.addresses();
        let ip = Ipv4Repr {
            ident: 0x5961,
            dont_frag: true,
            ..ipv4_header(src, dst, IpProtocol::Tcp, seg.buffer_len())
        };
        let f = ipv4_frame(src_mac, dst_mac, &ip, |payload| {
            seg.emit(
                &mut tcp_wire::Packet::new_unchecked(payload),
                src,
                dst,
                Checksum::Check,
            )
            .unwrap();
        });
        let frame = PacketBuf::from_slice(&f, 0).unwrap();
        self.lock().inbox[to.index()].push_back(frame);
    }
}

/// A NIC with the test's hand on it: logs what its host sends; applies the rules to what
/// the host receives; hands the host injected and released frames first.
struct Tap {
    inner: MemoryNic,
    host: Host,
    net: Net,
    last_now: Instant,
}

impl Device for Tap {
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
        if let Some(seg) = Seg::parse(frame.data(), cx.now, self.host) {
            self.net.lock().sent.push(seg);
        }
        self.inner.transmit(frame, meta, cx)
    }

    fn tx_ready(&self) -> bool {
        self.inner.tx_ready()
    }

    fn take_notification(&mut self, cx: &DeviceContext<'_>) -> bool {
        self.last_now = cx.now;
        let raised = self.inner.take_notification(cx);
        raised || !self.net.lock().inbox[self.host.index()].is_empty()
    }

    fn receive(&mut self, cx: &DeviceContext<'_>) -> Option<RxFrame> {
        self.last_now = cx.now;
        if let Some(frame) = self.net.lock().inbox[self.host.index()].pop_front() {
            return Some(RxFrame {
                frame,
                checksum: RxChecksum::None,
            });
        }
        loop {
            let rx = self.inner.receive(cx)?;
            let Some(seg) = Seg::parse(rx.frame.data(), cx.now, self.host.peer()) else {
                return Some(rx);
            };
            let mut net = self.net.lock();
            let host = self.host;
            let rule = net
                .rules
                .iter_mut()
                .find(|r| r.to == host && r.left > 0 && (r.matches)(&seg));
            let Some(rule) = rule else {
                return Some(rx);
            };
            rule.left -= 1;
            match rule.action {
                Action::Drop => net.dropped.push(seg),
                Action::Hold => net.held.push((host, rx)),
            }
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        let inner = self.inner.next_deadline();
        if self.net.lock().inbox[self.host.index()].is_empty() {
            inner
        } else {
            // Injected frames are due at once.
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

// ----------------------------------------------------------------------------------------
// Helpers.

fn host() -> HostConfig {
    let mut h = HostConfig::with_mtu(1500);
    h.stack.tuning = Tuning::fast();
    h.stack.tcp.msl = MSL;
    h
}

/// Two stacks with a tap on each NIC.
fn tapped_with(a: HostConfig, b: HostConfig) -> (Pair, Net) {
    let net = Net::default();
    let (na, nb) = (net.clone(), net.clone());
    let p = Pair::with_devices(
        a,
        b,
        move |inner| {
            Box::new(Tap {
                inner,
                host: Host::A,
                net: na,
                last_now: Instant::ZERO,
            })
        },
        move |inner| {
            Box::new(Tap {
                inner,
                host: Host::B,
                net: nb,
                last_now: Instant::ZERO,
            })
        },
    )
    .unwrap();
    (p, net)
}

fn tapped() -> (Pair, Net) {
    tapped_with(host(), host())
}

/// Connects A to a listener on B; returns (A's stream, B's listener, B's stream).
fn connect(p: &mut Pair) -> (TcpHandle, TcpHandle, TcpHandle) {
    let l = p.b.tcp_listen((ADDR_B, PORT), 8).unwrap();
    let c = p.a.tcp_connect((ADDR_B, PORT)).unwrap();
    let mut s = None;
    assert!(p.run_until(Duration::from_secs(5), |p| {
        if s.is_none() {
            s = p.b.tcp_accept(l).ok();
        }
        s.is_some() && p.a.tcp_state(c) == Ok(State::Established)
    }));
    let s = s.unwrap();
    assert_eq!(p.b.tcp_state(s), Ok(State::Established));
    (c, l, s)
}

/// A simultaneous open (RFC 9293 Figure 8): A from port 6000 to B's 7000 and B from 7000
/// to A's 6000, both SYNs sent before either host has polled, so they cross.
fn simultaneous_connect(p: &mut Pair) -> (TcpHandle, TcpHandle) {
    let cfg = p.a.tcp_default_config();
    let a =
        p.a.tcp_connect_from((ADDR_B, 7000), (ADDR_A, 6000), cfg, false)
            .unwrap();
    let b =
        p.b.tcp_connect_from((ADDR_A, 6000), (ADDR_B, 7000), cfg, false)
            .unwrap();
    assert_eq!(p.a.tcp_state(a), Ok(State::SynSent));
    assert_eq!(p.b.tcp_state(b), Ok(State::SynSent));
    (a, b)
}

/// Runs until `done` holds, for at most `limit`; panics with `what` if it never does.
fn wait(p: &mut Pair, limit: Duration, what: &str, done: impl FnMut(&mut Pair) -> bool) {
    assert!(p.run_until(limit, done), "timed out waiting for {what}");
}

/// The sequence number of the FIN `c` on A sends when it shuts down now (its SND.NXT,
/// with nothing queued).
fn fin_seq(p: &Pair, c: TcpHandle) -> SeqNumber {
    assert_eq!(p.a.tcp_send_queued(c), Ok(0));
    p.a.tcp_connection(c).unwrap().snd_nxt()
}

/// The SYN `from` sent, and its initial sequence number.
fn first_syn(net: &Net, from: Host) -> Seg {
    net.sent()
        .into_iter()
        .find(|s| s.from == from && s.control == Control::Syn)
        .expect("a SYN was sent")
}

/// A segment from B to A on A's connection `c` as B itself would send it: B's port to A's,
/// and the window and timestamp option of B's latest segment, so that PAWS (RFC 7323 §5)
/// lets it through to the checks under test. The test fills in the rest.
fn from_b<'a>(p: &Pair, net: &Net, c: TcpHandle) -> TcpRepr<'a> {
    let (local, remote) = p.a.tcp_endpoints(c).unwrap();
    let last = net
        .sent()
        .into_iter()
        .rev()
        .find(|s| s.from == Host::B && s.src_port == remote.1 && s.dst_port == local.1)
        .expect("B has sent on this connection");
    TcpRepr {
        src_port: remote.1,
        dst_port: local.1,
        window_len: last.window,
        timestamp: last.timestamp,
        ..TcpRepr::default()
    }
}

/// A RST from B to A on A's connection `c` at `seq`, as B itself would send it
/// ([`from_b`]).
fn rst_from_b<'a>(p: &Pair, net: &Net, c: TcpHandle, seq: SeqNumber) -> TcpRepr<'a> {
    TcpRepr {
        control: Control::Rst,
        seq_number: seq,
        ..from_b(p, net, c)
    }
}

fn counter(p: &Pair, h: Host, c: Counter) -> u64 {
    match h {
        Host::A => p.a.ledger().counters().get(c),
        Host::B => p.b.ledger().counters().get(c),
    }
}

/// Reads everything queued on `h` (a stream on A).
fn read_all_a(p: &mut Pair, h: TcpHandle) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = p.a.tcp_recv(h, &mut buf) {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    out
}

// ----------------------------------------------------------------------------------------
// (A) RFC 9293 Figure 5, one transition at a time.

/// CLOSED → LISTEN: a passive OPEN. Before it a SYN to the port is refused with a RST;
/// after it the same SYN draws a SYN-ACK.
#[test]
fn closed_to_listen() {
    let (mut p, net) = tapped();
    let refused = p.a.tcp_connect((ADDR_B, PORT)).unwrap();
    wait(&mut p, Duration::from_secs(1), "the RST", |p| {
        p.a.tcp_state(refused) == Ok(State::Closed)
    });
    assert_eq!(
        p.a.tcp_error(refused),
        Ok(Some(TcpError::ConnectionRefused))
    );

    let l = p.b.tcp_listen((ADDR_B, PORT), 4).unwrap();
    assert_eq!(p.b.tcp_state(l), Ok(State::Listen));
    let mark = net.mark();
    let c = p.a.tcp_connect((ADDR_B, PORT)).unwrap();
    p.settle();
    let from_b = net.sent_since(mark, Host::B);
    assert!(
        from_b
            .iter()
            .any(|s| s.control == Control::Syn && s.ack.is_some()),
        "the listener answers a SYN with a SYN-ACK: {from_b:?}"
    );
    assert!(from_b.iter().all(|s| s.control != Control::Rst));
    assert_eq!(p.a.tcp_state(c), Ok(State::Established));
    assert_eq!(
        p.b.tcp_state(l),
        Ok(State::Listen),
        "the listener keeps listening"
    );
}

/// LISTEN → SYN-SENT is not offered by this API: a SEND on a listening socket does not
/// turn it into an active open (RFC 9293 §3.10.2 allows it; the BSD API does not), it is
/// refused and the socket keeps listening.
#[test]
fn listen_to_syn_sent_is_not_offered() {
    let (mut p, net) = tapped();
    let l = p.b.tcp_listen((ADDR_B, PORT), 4).unwrap();
    let mark = net.mark();
    assert_eq!(p.b.tcp_send(l, b"data"), Err(TcpError::NotConnected));
    p.run_for(Duration::from_secs(2));
    assert_eq!(p.b.tcp_state(l), Ok(State::Listen));
    assert!(net.sent_since(mark, Host::B).is_empty(), "no SYN went out");
}

/// LISTEN → SYN-RECEIVED on a SYN, then SYN-RECEIVED → ESTABLISHED on the ACK of our
/// SYN (passive side). A's ACK is held on its way into B to keep B in SYN-RECEIVED.
#[test]
fn listen_to_syn_received_to_established_passive() {
    let (mut p, net) = tapped();
    let l = p.b.tcp_listen((ADDR_B, PORT), 4).unwrap();
    net.hold_into(Host::B, Seg::is_pure_ack);
    let c = p.a.tcp_connect((ADDR_B, PORT)).unwrap();
    p.run_for(Duration::from_millis(100));

    // Step 1, LISTEN → SYN-RECEIVED: B answered the SYN with <SYN,ACK> acknowledging it;
    // the connection is not established, so nothing is queued for accept.
    let syn = first_syn(&net, Host::A);
    assert!(syn.ack.is_none());
    let syn_ack = net
        .sent()
        .into_iter()
        .find(|s| s.from == Host::B && s.control == Control::Syn)
        .expect("B sent a SYN-ACK");
    assert!(syn_ack.acks(syn.seq + 1));
    assert_eq!(net.held(), 1, "A's ACK of the SYN-ACK is held");
    assert_eq!(p.b.tcp_accept(l), Err(TcpError::WouldBlock));
    assert_eq!(p.b.tcp_state(l), Ok(State::Listen));
    assert_eq!(p.a.tcp_state(c), Ok(State::Established));
    assert_eq!(counter(&p, Host::B, Counter::TcpPassiveOpens), 0);

    // Step 2, SYN-RECEIVED → ESTABLISHED: the ACK arrives.
    assert_eq!(net.release(), 1);
    p.settle();
    let s = p.b.tcp_accept(l).expect("established and queued");
    assert_eq!(p.b.tcp_state(s), Ok(State::Established));
    assert_eq!(counter(&p, Host::B, Counter::TcpPassiveOpens), 1);
    assert_eq!(
        p.b.tcp_connection(s).unwrap().snd_una(),
        syn_ack.seq + 1,
        "the SYN is acknowledged"
    );
}

/// CLOSED → SYN-SENT on an active OPEN; then SYN-SENT → ESTABLISHED on the SYN-ACK.
#[test]
fn closed_to_syn_sent_to_established() {
    let (mut p, net) = tapped();
    let _l = p.b.tcp_listen((ADDR_B, PORT), 4).unwrap();
    net.hold_into(Host::A, |s| s.control == Control::Syn);
    let c = p.a.tcp_connect((ADDR_B, PORT)).unwrap();
    // Step 1, CLOSED → SYN-SENT: at once, and it stays there while no SYN-ACK comes.
    assert_eq!(p.a.tcp_state(c), Ok(State::SynSent));
    p.run_for(Duration::from_millis(100));
    assert_eq!(p.a.tcp_state(c), Ok(State::SynSent));
    let syn = first_syn(&net, Host::A);
    assert!(syn.ack.is_none(), "a SYN without ACK");
    assert_eq!(net.held(), 1);

    // Step 2, SYN-SENT → ESTABLISHED: the SYN-ACK arrives; A acknowledges B's SYN.
    let mark = net.mark();
    net.release();
    p.settle();
    assert_eq!(p.a.tcp_state(c), Ok(State::Established));
    let syn_ack = net
        .sent()
        .into_iter()
        .find(|s| s.from == Host::B && s.control == Control::Syn)
        .unwrap();
    assert!(syn_ack.acks(syn.seq + 1));
    let acks = net.sent_since(mark, Host::A);
    assert!(
        acks.iter()
            .any(|s| s.is_pure_ack() && s.acks(syn_ack.seq + 1)),
        "A acknowledged B's SYN: {acks:?}"
    );
    assert_eq!(p.a.tcp_connection(c).unwrap().rcv_nxt(), syn_ack.seq + 1);
}

/// SYN-SENT → SYN-RECEIVED (simultaneous open: a SYN without ACK arrives in SYN-SENT),
/// then SYN-RECEIVED → ESTABLISHED on the ACK of our SYN. Everything B sends with an ACK
/// is held on its way into A, so A stays in SYN-RECEIVED.
#[test]
fn syn_sent_to_syn_received_to_established_simultaneous_open() {
    let (mut p, net) = tapped();
    net.hold_into(Host::A, |s| s.ack.is_some());
    let (a, b) = simultaneous_connect(&mut p);
    p.run_for(Duration::from_millis(100));

    // Step 1: A got B's SYN in SYN-SENT and answered with its SYN again, now with ACK.
    assert_eq!(p.a.tcp_state(a), Ok(State::SynReceived));
    let syn_a = first_syn(&net, Host::A);
    let syn_b = first_syn(&net, Host::B);
    assert!(
        syn_a.ack.is_none() && syn_b.ack.is_none(),
        "the SYNs crossed"
    );
    let a_syn_ack = net
        .sent()
        .into_iter()
        .find(|s| s.from == Host::A && s.control == Control::Syn && s.ack.is_some())
        .expect("A sent <SYN,ACK>");
    assert_eq!(a_syn_ack.seq, syn_a.seq, "the same SYN, with an ACK");
    assert!(a_syn_ack.acks(syn_b.seq + 1));
    assert!(net.held() > 0);

    // Step 2: B's ACK of A's SYN arrives.
    net.release();
    wait(
        &mut p,
        Duration::from_millis(100),
        "both established",
        |p| {
            p.a.tcp_state(a) == Ok(State::Established) && p.b.tcp_state(b) == Ok(State::Established)
        },
    );
    let conn = p.a.tcp_connection(a).unwrap();
    assert_eq!(conn.snd_una(), syn_a.seq + 1);
    assert_eq!(conn.rcv_nxt(), syn_b.seq + 1);
    // And it carries data.
    p.b.tcp_send(b, b"after a simultaneous open").unwrap();
    p.run_for(Duration::from_millis(50));
    assert_eq!(read_all_a(&mut p, a), b"after a simultaneous open");
}

/// SYN-RECEIVED → LISTEN: a RST (at RCV.NXT) for a passively opened connection. The
/// connection disappears, the listener keeps listening, nothing is queued for accept, and
/// its backlog slot is free again.
#[test]
fn syn_received_to_listen_on_rst() {
    // Checksum elision off: with it, A's pure ACK carries no checksum, and once B's
    // connection is gone nothing tells B that the sum may be skipped, so B drops the ACK
    // as corrupt (`tcp.drop.bad_checksum`) instead of answering it with a RST below.
    let mut a = host();
    let mut b = host();
    a.stack.tuning.checksum_elision = false;
    b.stack.tuning.checksum_elision = false;
    let (mut p, net) = tapped_with(a, b);
    // A backlog of one: a second connection gets in only if the first one left it.
    let l = p.b.tcp_listen((ADDR_B, PORT), 1).unwrap();
    net.hold_into(Host::B, Seg::is_pure_ack);
    let c = p.a.tcp_connect((ADDR_B, PORT)).unwrap();
    p.run_for(Duration::from_millis(100));
    assert_eq!(net.held(), 1, "B is in SYN-RECEIVED, A's ACK held");
    let syn = first_syn(&net, Host::A);
    let (local, remote) = p.a.tcp_endpoints(c).unwrap();

    // A RST from A's endpoint at B's RCV.NXT (A's ISS + 1).
    net.inject(
        Host::A,
        &TcpRepr {
            src_port: local.1,
            dst_port: remote.1,
            control: Control::Rst,
            seq_number: syn.seq + 1,
            ..TcpRepr::default()
        },
    );
    p.settle();
    assert_eq!(counter(&p, Host::B, Counter::TcpResetsIn), 1);
    assert_eq!(p.b.tcp_state(l), Ok(State::Listen));
    assert_eq!(p.b.tcp_accept(l), Err(TcpError::WouldBlock));

    // A's held ACK now finds only the listener, which answers an ACK with a RST (RFC 9293
    // §3.10.7.2): A's half-open connection is reset, and still nothing to accept.
    let mark = net.mark();
    net.release();
    p.settle();
    assert!(net
        .sent_since(mark, Host::B)
        .iter()
        .any(|s| s.control == Control::Rst));
    assert_eq!(p.a.tcp_state(c), Ok(State::Closed));
    assert_eq!(p.a.tcp_error(c), Ok(Some(TcpError::ConnectionReset)));
    assert_eq!(p.b.tcp_accept(l), Err(TcpError::WouldBlock));
    assert_eq!(counter(&p, Host::B, Counter::TcpPassiveOpens), 0);

    // The backlog slot is free: a new connection is accepted.
    let c2 = p.a.tcp_connect((ADDR_B, PORT)).unwrap();
    let mut s = None;
    wait(&mut p, Duration::from_secs(1), "a new connection", |p| {
        s = s.or_else(|| p.b.tcp_accept(l).ok());
        s.is_some()
    });
    assert_eq!(p.a.tcp_state(c2), Ok(State::Established));
}

/// Not an arrow of Figure 5, but the other half of the RST rule in SYN-RECEIVED (RFC 9293
/// §3.10.7.4, second step): a connection that came from SYN-SENT (here a simultaneous
/// open) and is reset there was refused, and the application is told so rather than
/// seeing an orderly end of stream.
#[test]
fn syn_received_from_active_open_to_closed_on_rst_is_refused() {
    let (mut p, net) = tapped();
    net.hold_into(Host::A, |s| s.ack.is_some());
    let (a, _b) = simultaneous_connect(&mut p);
    p.run_for(Duration::from_millis(100));
    assert_eq!(p.a.tcp_state(a), Ok(State::SynReceived));
    let syn_b = first_syn(&net, Host::B);
    net.inject(
        Host::B,
        &TcpRepr {
            src_port: 7000,
            dst_port: 6000,
            control: Control::Rst,
            seq_number: syn_b.seq + 1,
            ..TcpRepr::default()
        },
    );
    p.settle();
    assert_eq!(p.a.tcp_state(a), Ok(State::Closed));
    assert_eq!(p.a.tcp_error(a), Ok(Some(TcpError::ConnectionRefused)));
    assert_eq!(
        p.a.tcp_recv(a, &mut [0; 4]),
        Err(TcpError::ConnectionRefused)
    );
}

/// SYN-RECEIVED → FIN-WAIT-1: CLOSE before the ACK of our SYN (RFC 9293 §3.10.4: with
/// nothing to send, a FIN goes out at once). Simultaneous open gives a SYN-RECEIVED
/// connection with a handle; B's ACKs are held on their way into A.
#[test]
fn syn_received_to_fin_wait_1_on_close() {
    let (mut p, net) = tapped();
    net.hold_into(Host::A, |s| s.ack.is_some());
    let (a, b) = simultaneous_connect(&mut p);
    p.run_for(Duration::from_millis(100));
    assert_eq!(p.a.tcp_state(a), Ok(State::SynReceived));
    let iss = first_syn(&net, Host::A).seq;

    let mark = net.mark();
    p.a.tcp_shutdown(a).unwrap();
    assert_eq!(p.a.tcp_state(a), Ok(State::FinWait1));
    p.settle();
    let fins: Vec<Seg> = net
        .sent_since(mark, Host::A)
        .into_iter()
        .filter(|s| s.control == Control::Fin)
        .collect();
    assert_eq!(fins.len(), 1, "one FIN, right after the SYN");
    assert_eq!(fins[0].seq, iss + 1);
    // The FIN (with its ACK of B's SYN) established B and closed B's receiving side.
    assert_eq!(p.b.tcp_state(b), Ok(State::CloseWait));
    assert_eq!(p.a.tcp_state(a), Ok(State::FinWait1));

    // B's ACKs arrive: SYN and FIN acknowledged, FIN-WAIT-2.
    net.release();
    p.settle();
    assert_eq!(p.a.tcp_state(a), Ok(State::FinWait2));
    assert_eq!(p.a.tcp_connection(a).unwrap().snd_una(), iss + 2);
}

/// SYN-RECEIVED → FIN-WAIT-1 when the FIN is lost as well: the SYN and the FIN are both
/// unacknowledged and must be sent again when the retransmission timer fires, without any
/// help from the peer (RFC 9293 §3.8.1, RFC 6298 §5.4).
#[test]
fn fin_wait_1_retransmits_syn_and_fin_when_both_are_unacknowledged() {
    let (mut p, net) = tapped();
    net.hold_into(Host::A, |s| s.ack.is_some());
    let (a, b) = simultaneous_connect(&mut p);
    p.run_for(Duration::from_millis(100));
    assert_eq!(p.a.tcp_state(a), Ok(State::SynReceived));
    let iss = first_syn(&net, Host::A).seq;
    net.drop_into(Host::B, 1, |s| s.control == Control::Fin);
    p.a.tcp_shutdown(a).unwrap();
    p.settle();
    assert_eq!(net.dropped().len(), 1, "the FIN was lost");
    assert_eq!(p.b.tcp_state(b), Ok(State::SynReceived));

    // Nothing from B gets through; A's timer must bring the FIN to B on its own.
    let mark = net.mark();
    wait(&mut p, Duration::from_secs(5), "B to see A's FIN", |p| {
        p.b.tcp_state(b) == Ok(State::CloseWait)
    });
    let again = net.sent_since(mark, Host::A);
    assert!(
        again
            .iter()
            .any(|s| s.control == Control::Syn && s.seq == iss && s.ack.is_some()),
        "A retransmitted its <SYN,ACK>: {again:?}"
    );
    assert!(
        again
            .iter()
            .any(|s| s.control == Control::Fin && s.seq == iss + 1),
        "A retransmitted its FIN: {again:?}"
    );
    assert!(counter(&p, Host::A, Counter::TcpRetransmitTimeouts) >= 1);
    net.release();
    wait(&mut p, Duration::from_secs(1), "FIN-WAIT-2", |p| {
        p.a.tcp_state(a) == Ok(State::FinWait2)
    });
}

/// SYN-SENT → CLOSED on CLOSE (RFC 9293 §3.10.4: delete the TCB). The connection keeps
/// no timer and sends nothing more; the SYN-ACK that comes later is answered with a RST,
/// which sends B's half-open connection back to LISTEN.
#[test]
fn syn_sent_to_closed_on_close() {
    let (mut p, net) = tapped();
    let l = p.b.tcp_listen((ADDR_B, PORT), 4).unwrap();
    net.hold_into(Host::A, |s| s.control == Control::Syn);
    let c = p.a.tcp_connect((ADDR_B, PORT)).unwrap();
    p.run_for(Duration::from_millis(10));
    assert_eq!(p.a.tcp_state(c), Ok(State::SynSent));

    p.a.tcp_shutdown(c).unwrap();
    assert_eq!(p.a.tcp_state(c), Ok(State::Closed));
    let mark = net.mark();
    p.run_for(Duration::from_secs(30));
    assert_eq!(p.a.tcp_state(c), Ok(State::Closed));
    assert_eq!(
        p.a.tcp_error(c),
        Ok(None),
        "closed by the user, not timed out"
    );
    assert!(
        net.sent_since(mark, Host::A).is_empty(),
        "no SYN is retransmitted"
    );
    assert_eq!(counter(&p, Host::A, Counter::TcpRetransmitTimeouts), 0);
    assert_eq!(counter(&p, Host::A, Counter::TcpDropTimeout), 0);

    // B's SYN-ACKs (the first and its retransmissions) now reach A, which resets.
    net.release();
    p.settle();
    assert!(net
        .sent_since(mark, Host::A)
        .iter()
        .all(|s| s.control == Control::Rst));
    assert_eq!(counter(&p, Host::B, Counter::TcpResetsIn), 1);
    assert_eq!(p.b.tcp_accept(l), Err(TcpError::WouldBlock));
    assert_eq!(p.b.tcp_state(l), Ok(State::Listen));

    // With tcp_close the connection goes at once, handle and all.
    let c2 = p.a.tcp_connect((ADDR_B, 9)).unwrap();
    assert_eq!(p.a.tcp_state(c2), Ok(State::SynSent));
    p.a.tcp_close(c2).unwrap();
    assert_eq!(p.a.tcp_state(c2), Err(TcpError::BadHandle));
}

/// Data written during SYN-SENT and then a shutdown: the FIN waits behind the data and
/// the SYN-ACK takes A to FIN-WAIT-1 (RFC 9293 §3.10.4's rule for pending sends), so
/// nothing written is lost.
#[test]
fn syn_sent_with_queued_data_to_fin_wait_1_on_shutdown() {
    let (mut p, net) = tapped();
    let l = p.b.tcp_listen((ADDR_B, PORT), 4).unwrap();
    net.hold_into(Host::A, |s| s.control == Control::Syn);
    let c = p.a.tcp_connect((ADDR_B, PORT)).unwrap();
    p.run_for(Duration::from_millis(10));
    assert_eq!(p.a.tcp_send(c, b"written early"), Ok(13));
    p.a.tcp_shutdown(c).unwrap();
    assert_eq!(p.a.tcp_state(c), Ok(State::SynSent));

    net.release();
    let mut b = None;
    wait(&mut p, Duration::from_secs(2), "B accepts", |p| {
        b = p.b.tcp_accept(l).ok();
        b.is_some()
    });
    let b = b.unwrap();
    p.settle();
    assert_eq!(p.a.tcp_state(c), Ok(State::FinWait2));
    let mut got = Vec::new();
    let mut buf = [0u8; 64];
    loop {
        match p.b.tcp_recv(b, &mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => panic!("B: {e}"),
        }
    }
    assert_eq!(got, b"written early", "the data, then end of stream");
    assert_eq!(p.b.tcp_state(b), Ok(State::CloseWait));
}

/// SYN-SENT → CLOSED on a RST that acknowledges our SYN (connection refused). A RST whose
/// ACK does not acknowledge the SYN, or without an ACK, is ignored (RFC 9293 §3.10.7.3,
/// RFC 5961 §3).
#[test]
fn syn_sent_to_closed_on_rst() {
    let (mut p, net) = tapped();
    net.hold_into(Host::A, |s| s.control == Control::Rst);
    let c = p.a.tcp_connect((ADDR_B, 9)).unwrap();
    p.run_for(Duration::from_millis(10));
    assert_eq!(
        net.held(),
        1,
        "B, with nothing on port 9, answered with a RST"
    );
    let iss = first_syn(&net, Host::A).seq;
    let (local, _) = p.a.tcp_endpoints(c).unwrap();
    let rst = |seq: u32, ack: Option<SeqNumber>| TcpRepr {
        src_port: 9,
        dst_port: local.1,
        control: Control::Rst,
        seq_number: SeqNumber(seq),
        ack_number: ack,
        ..TcpRepr::default()
    };
    // Unacceptable: an ACK of something else; and no ACK at all.
    net.inject(Host::B, &rst(0, Some(iss + 1000)));
    net.inject(Host::B, &rst(0, None));
    p.settle();
    assert_eq!(p.a.tcp_state(c), Ok(State::SynSent));
    assert_eq!(p.a.tcp_error(c), Ok(None));

    // B's own RST: <SEQ=0><ACK=ISS+1><CTL=RST,ACK>.
    net.release();
    p.settle();
    let b_rst = net
        .sent()
        .into_iter()
        .find(|s| s.from == Host::B && s.control == Control::Rst)
        .unwrap();
    assert!(b_rst.acks(iss + 1));
    assert_eq!(p.a.tcp_state(c), Ok(State::Closed));
    assert_eq!(p.a.tcp_error(c), Ok(Some(TcpError::ConnectionRefused)));
}

/// ESTABLISHED → FIN-WAIT-1 on CLOSE, ESTABLISHED → CLOSE-WAIT on the FIN, and
/// FIN-WAIT-1 → FIN-WAIT-2 on the ACK of the FIN (held until the test lets it go).
#[test]
fn established_to_fin_wait_1_and_close_wait_then_fin_wait_2() {
    let (mut p, net) = tapped();
    let (c, _l, s) = connect(&mut p);
    let fin = fin_seq(&p, c);
    net.hold_into(Host::A, move |s| s.acks(fin + 1));

    // ESTABLISHED → FIN-WAIT-1 at once.
    p.a.tcp_shutdown(c).unwrap();
    assert_eq!(p.a.tcp_state(c), Ok(State::FinWait1));
    p.run_for(Duration::from_millis(100));
    assert_eq!(p.a.tcp_state(c), Ok(State::FinWait1));
    let a_fin = net
        .sent()
        .into_iter()
        .find(|s| s.from == Host::A && s.control == Control::Fin)
        .unwrap();
    assert_eq!(a_fin.seq, fin);

    // ESTABLISHED → CLOSE-WAIT on B; its reader sees the end of the stream.
    assert_eq!(p.b.tcp_state(s), Ok(State::CloseWait));
    assert_eq!(p.b.tcp_recv(s, &mut [0; 8]), Ok(0));
    assert_eq!(counter(&p, Host::B, Counter::TcpFinsIn), 1);

    // FIN-WAIT-1 → FIN-WAIT-2.
    assert_eq!(net.held(), 1);
    net.release();
    p.settle();
    assert_eq!(p.a.tcp_state(c), Ok(State::FinWait2));
    assert_eq!(p.a.tcp_connection(c).unwrap().snd_una(), fin + 1);
    // Half-closed: B can still send to A.
    p.b.tcp_send(s, b"still open this way").unwrap();
    p.run_for(Duration::from_millis(50));
    assert_eq!(read_all_a(&mut p, c), b"still open this way");
}

/// FIN-WAIT-1 → CLOSING (simultaneous close: the peer's FIN arrives before the ACK of
/// ours), then CLOSING → TIME-WAIT on that ACK, held until the test lets it go.
#[test]
fn fin_wait_1_to_closing_to_time_wait() {
    let (mut p, net) = tapped();
    let (c, _l, s) = connect(&mut p);
    let fin = fin_seq(&p, c);
    net.hold_into(Host::A, move |s| s.acks(fin + 1));
    // Both close at the same instant: the FINs cross.
    p.a.tcp_shutdown(c).unwrap();
    p.b.tcp_shutdown(s).unwrap();
    p.run_for(Duration::from_millis(100));

    let b_fin = net
        .sent()
        .into_iter()
        .find(|s| s.from == Host::B && s.control == Control::Fin)
        .unwrap();
    assert!(b_fin.acks(fin), "B's FIN does not acknowledge A's");
    assert_eq!(p.a.tcp_state(c), Ok(State::Closing));
    // B got A's FIN and then A's ACK of its own: CLOSING → TIME-WAIT there already.
    assert_eq!(p.b.tcp_state(s), Ok(State::TimeWait));
    assert!(net
        .sent()
        .iter()
        .any(|s| s.from == Host::A && s.is_pure_ack() && s.acks(b_fin.seq + 1)));

    // CLOSING → TIME-WAIT on A.
    assert!(net.held() >= 1);
    net.release();
    p.settle();
    assert_eq!(p.a.tcp_state(c), Ok(State::TimeWait));
}

/// FIN-WAIT-1 → TIME-WAIT: the peer's FIN and its ACK of ours arrive in one segment (B's
/// separate ACK of A's FIN is lost).
#[test]
fn fin_wait_1_to_time_wait_on_fin_with_ack() {
    let (mut p, net) = tapped();
    let (c, _l, s) = connect(&mut p);
    let fin = fin_seq(&p, c);
    net.drop_into(Host::A, 1, move |s| s.is_pure_ack() && s.acks(fin + 1));
    p.a.tcp_shutdown(c).unwrap();
    p.settle();
    assert_eq!(p.b.tcp_state(s), Ok(State::CloseWait));
    assert_eq!(net.dropped().len(), 1);
    assert_eq!(p.a.tcp_state(c), Ok(State::FinWait1));

    p.b.tcp_shutdown(s).unwrap();
    p.settle();
    let b_fin = net
        .sent()
        .into_iter()
        .find(|s| s.from == Host::B && s.control == Control::Fin)
        .unwrap();
    assert!(b_fin.acks(fin + 1), "<FIN,ACK> acknowledging A's FIN");
    assert_eq!(p.a.tcp_state(c), Ok(State::TimeWait));
    assert_eq!(p.b.tcp_state(s), Ok(State::Closed));
}

/// FIN-WAIT-2 → TIME-WAIT on the peer's FIN.
#[test]
fn fin_wait_2_to_time_wait() {
    let (mut p, net) = tapped();
    let (c, _l, s) = connect(&mut p);
    p.a.tcp_shutdown(c).unwrap();
    p.run_for(Duration::from_millis(100));
    assert_eq!(p.a.tcp_state(c), Ok(State::FinWait2));
    let mark = net.mark();
    p.b.tcp_shutdown(s).unwrap();
    p.settle();
    assert_eq!(p.a.tcp_state(c), Ok(State::TimeWait));
    let b_fin = net
        .sent_since(mark, Host::B)
        .into_iter()
        .find(|s| s.control == Control::Fin)
        .unwrap();
    assert!(net
        .sent_since(mark, Host::A)
        .iter()
        .any(|s| s.is_pure_ack() && s.acks(b_fin.seq + 1)));
    assert_eq!(p.a.tcp_recv(c, &mut [0; 8]), Ok(0));
}

/// CLOSE-WAIT → LAST-ACK on CLOSE, and LAST-ACK → CLOSED on the ACK of the FIN (held until
/// the test lets it go).
#[test]
fn close_wait_to_last_ack_to_closed() {
    let (mut p, net) = tapped();
    let (c, _l, s) = connect(&mut p);
    p.a.tcp_shutdown(c).unwrap();
    p.run_for(Duration::from_millis(100));
    assert_eq!(p.b.tcp_state(s), Ok(State::CloseWait));

    let b_fin_seq = p.b.tcp_connection(s).unwrap().snd_nxt();
    net.hold_into(Host::B, move |s| s.acks(b_fin_seq + 1));
    let mark = net.mark();
    p.b.tcp_shutdown(s).unwrap();
    // CLOSE-WAIT → LAST-ACK at once, and there while the ACK is held (for less than the
    // 200 ms retransmission timeout, so that B sends its FIN once).
    assert_eq!(p.b.tcp_state(s), Ok(State::LastAck));
    p.run_for(Duration::from_millis(10));
    assert_eq!(p.b.tcp_state(s), Ok(State::LastAck));
    assert_eq!(p.a.tcp_state(c), Ok(State::TimeWait));
    let fins = net.sent_since(mark, Host::B);
    assert_eq!(fins.len(), 1);
    assert_eq!((fins[0].control, fins[0].seq), (Control::Fin, b_fin_seq));

    // LAST-ACK → CLOSED: an orderly end, no error.
    assert_eq!(net.held(), 1);
    net.release();
    p.settle();
    assert_eq!(p.b.tcp_state(s), Ok(State::Closed));
    assert_eq!(p.b.tcp_error(s), Ok(None));
    assert_eq!(p.b.tcp_recv(s, &mut [0; 8]), Ok(0));
    assert_eq!(counter(&p, Host::B, Counter::TcpResetsOut), 0);
    // Closing the socket now frees it.
    p.b.tcp_close(s).unwrap();
    assert_eq!(p.b.tcp_state(s), Err(TcpError::BadHandle));
}

/// TIME-WAIT → CLOSED when 2·MSL have passed since it began, and not before.
#[test]
fn time_wait_to_closed_after_2msl() {
    let (mut p, _net) = tapped();
    let (c, _l, s) = connect(&mut p);
    p.a.tcp_shutdown(c).unwrap();
    p.run_for(Duration::from_millis(100));
    p.b.tcp_shutdown(s).unwrap();
    wait(&mut p, Duration::from_secs(1), "TIME-WAIT", |p| {
        p.a.tcp_state(c) == Ok(State::TimeWait)
    });
    let entered = p.now();
    let two_msl = MSL + MSL;

    p.run_for(Duration::from_millis(two_msl.as_millis() - 1));
    assert_eq!(p.a.tcp_state(c), Ok(State::TimeWait), "1 ms short of 2·MSL");
    p.run_for(Duration::from_millis(2));
    assert_eq!(p.a.tcp_state(c), Ok(State::Closed));
    assert_eq!(p.a.tcp_error(c), Ok(None));
    assert!(p.now() - entered > two_msl);
    // The handle lives on until the application lets go.
    p.a.tcp_close(c).unwrap();
    assert_eq!(p.a.tcp_state(c), Err(TcpError::BadHandle));
}

/// A segment in TIME-WAIT: the peer lost our ACK of its FIN and sends the FIN again; it is
/// acknowledged again and the 2·MSL wait starts over from its arrival (RFC 9293
/// §3.10.7.4, eighth step), so our ACK outlives the peer's retransmissions. The second ACK
/// lets the peer go from LAST-ACK to CLOSED.
#[test]
fn time_wait_reacks_a_retransmitted_fin_and_restarts_2msl() {
    let (mut p, net) = tapped();
    let (c, _l, s) = connect(&mut p);
    p.a.tcp_shutdown(c).unwrap();
    p.run_for(Duration::from_millis(100));
    assert_eq!(p.a.tcp_state(c), Ok(State::FinWait2));
    let b_fin_seq = p.b.tcp_connection(s).unwrap().snd_nxt();
    // A's first ACK of B's FIN is lost.
    net.drop_into(Host::B, 1, move |s| {
        s.is_pure_ack() && s.acks(b_fin_seq + 1)
    });
    let mark = net.mark();
    p.b.tcp_shutdown(s).unwrap();
    p.settle();
    assert_eq!(p.a.tcp_state(c), Ok(State::TimeWait));
    assert_eq!(p.b.tcp_state(s), Ok(State::LastAck));
    let entered = p.now();

    // B's retransmission timer sends the FIN again; A acknowledges it again.
    wait(
        &mut p,
        Duration::from_secs(1),
        "B's LAST-ACK → CLOSED",
        |p| p.b.tcp_state(s) == Ok(State::Closed),
    );
    let b_fins: Vec<Seg> = net
        .sent_since(mark, Host::B)
        .into_iter()
        .filter(|s| s.control == Control::Fin)
        .collect();
    assert_eq!(b_fins.len(), 2, "the FIN and its retransmission");
    let a_acks: Vec<Seg> = net
        .sent_since(mark, Host::A)
        .into_iter()
        .filter(|s| s.is_pure_ack() && s.acks(b_fin_seq + 1))
        .collect();
    assert_eq!(a_acks.len(), 2, "both FINs acknowledged: {a_acks:?}");
    let again = a_acks[1].at;
    assert!(again > entered);
    assert_eq!(p.a.tcp_state(c), Ok(State::TimeWait));

    // 2·MSL from the first FIN has passed, but not from the second.
    let two_msl = MSL + MSL;
    let first_end = entered + two_msl + Duration::from_millis(1);
    p.run_for(first_end - p.now());
    assert_eq!(
        p.a.tcp_state(c),
        Ok(State::TimeWait),
        "the retransmitted FIN restarted the 2·MSL timer"
    );
    p.run_for(again + two_msl + Duration::from_millis(1) - p.now());
    assert_eq!(p.a.tcp_state(c), Ok(State::Closed));
}

/// Closing a socket with data unread (RFC 1122 §4.2.2.13's reset) leaves TIME-WAIT be:
/// B's stream came whole, so nothing is reset, and the 2·MSL wait goes on without the
/// application (MUST-13): when A's ACK of B's FIN is lost, B's FIN sent again is
/// acknowledged, not met with a RST. From LAST-ACK, where our FIN is unacknowledged, the
/// same close resets the peer (SHLD-3), where it used to end the connection silently.
#[test]
fn closing_with_data_unread_keeps_time_wait_and_resets_from_last_ack() {
    let (mut p, net) = tapped();
    let (c, l, s) = connect(&mut p);
    p.a.tcp_shutdown(c).unwrap();
    p.run_for(Duration::from_millis(100));
    assert_eq!(p.b.tcp_send(s, &[7; 100]), Ok(100));
    p.settle();
    let b_fin_seq = p.b.tcp_connection(s).unwrap().snd_nxt();
    net.drop_into(Host::B, 1, move |s| {
        s.is_pure_ack() && s.acks(b_fin_seq + 1)
    });
    p.b.tcp_shutdown(s).unwrap();
    p.settle();
    assert_eq!(p.a.tcp_state(c), Ok(State::TimeWait));
    assert_eq!(p.b.tcp_state(s), Ok(State::LastAck));
    p.a.tcp_close(c).unwrap();
    wait(
        &mut p,
        Duration::from_secs(1),
        "B's LAST-ACK → CLOSED",
        |p| p.b.tcp_state(s) == Ok(State::Closed),
    );
    assert_eq!(p.b.tcp_error(s), Ok(None), "B's FIN met a RST");
    assert_eq!(counter(&p, Host::A, Counter::TcpResetsOut), 0);

    // B in LAST-ACK with A's data unread: its close resets A.
    let c = p.a.tcp_connect((ADDR_B, PORT)).unwrap();
    let mut s = None;
    wait(&mut p, Duration::from_secs(1), "a second connection", |p| {
        s = s.or(p.b.tcp_accept(l).ok());
        s.is_some() && p.a.tcp_state(c) == Ok(State::Established)
    });
    let s = s.unwrap();
    assert_eq!(p.a.tcp_send(c, &[9; 100]), Ok(100));
    p.settle();
    p.a.tcp_shutdown(c).unwrap();
    p.run_for(Duration::from_millis(100));
    assert_eq!(p.b.tcp_state(s), Ok(State::CloseWait));
    let b_fin_seq = p.b.tcp_connection(s).unwrap().snd_nxt();
    net.hold_into(Host::B, move |s| s.acks(b_fin_seq + 1));
    p.b.tcp_shutdown(s).unwrap();
    p.run_for(Duration::from_millis(10));
    assert_eq!(p.b.tcp_state(s), Ok(State::LastAck));
    let resets = counter(&p, Host::B, Counter::TcpResetsOut);
    p.b.tcp_close(s).unwrap();
    assert_eq!(counter(&p, Host::B, Counter::TcpResetsOut), resets + 1);
}

/// A's port for the TIME-WAIT reopening tests: fixed, so that A's second connection is
/// the same 4-tuple as its first.
const A_PORT: u16 = 6000;

/// A connects from [`A_PORT`] to B's listener `l`, both ends established within
/// `limit`. Returns A's stream and B's.
fn connect_from_a_port(p: &mut Pair, l: TcpHandle, limit: Duration) -> (TcpHandle, TcpHandle) {
    let cfg = p.a.tcp_default_config();
    let c =
        p.a.tcp_connect_from((ADDR_B, PORT), (ADDR_A, A_PORT), cfg, false)
            .unwrap();
    let mut s = None;
    wait(p, limit, "a connection from A's port", |p| {
        s = s.or_else(|| p.b.tcp_accept(l).ok());
        s.is_some() && p.a.tcp_state(c) == Ok(State::Established)
    });
    (c, s.unwrap())
}

/// A connects from [`A_PORT`] to a listener on B; B sends 1 MiB, more than RFC 6528's
/// 4 µs clock moves an ISN on in the time it takes, then closes first (a shutdown,
/// keeping its handle) and ends in TIME-WAIT; A's connection closes and is let go.
/// Returns B's listener, B's stream in TIME-WAIT and A's FIN as it went.
fn b_in_time_wait(p: &mut Pair, net: &Net) -> (TcpHandle, TcpHandle, Seg) {
    let l = p.b.tcp_listen((ADDR_B, PORT), 8).unwrap();
    let (c, s) = connect_from_a_port(p, l, Duration::from_secs(1));
    let data: Vec<u8> = (0..1 << 20).map(|i: u32| (i % 251) as u8).collect();
    let (mut sent, mut got) = (0, Vec::new());
    while got.len() < data.len() {
        sent += p.b.tcp_send(s, &data[sent..]).unwrap_or(0);
        p.run_for(Duration::from_millis(1));
        got.extend(read_all_a(p, c));
    }
    assert!(got == data);
    p.b.tcp_shutdown(s).unwrap();
    p.run_for(Duration::from_millis(50));
    assert_eq!(p.a.tcp_recv(c, &mut [0; 8]), Ok(0));
    p.a.tcp_close(c).unwrap();
    wait(p, Duration::from_secs(1), "B in TIME-WAIT", |p| {
        p.b.tcp_state(s) == Ok(State::TimeWait)
    });
    p.run_for(Duration::from_millis(20));
    assert_eq!(p.a.tcp_state(c), Err(TcpError::BadHandle), "A let go");
    let a_fin = net
        .sent()
        .into_iter()
        .rfind(|s| s.from == Host::A && s.control == Control::Fin)
        .unwrap();
    (l, s, a_fin)
}

/// TIME-WAIT gives way to a newer SYN from the same port (RFC 9293 §3.6.1 MAY-2, RFC
/// 6191): A, whose connection ended with B closing first, connects again from the same
/// port at once. B's TIME-WAIT ends and its listener answers with a SYN-ACK whose ISS lies
/// past the old SND.NXT, so the connection opens in a round trip: no challenge ACK, no
/// RST, no second wait. B's handle on the old incarnation finds it CLOSED without error.
#[test]
fn time_wait_gives_way_to_a_newer_syn_from_the_same_port() {
    let (mut p, net) = tapped();
    let (l, old, _) = b_in_time_wait(&mut p, &net);
    let old_snd_nxt = p.b.tcp_connection(old).unwrap().snd_nxt();
    let mark = net.mark();
    let (c, s) = connect_from_a_port(&mut p, l, Duration::from_millis(100));
    assert_eq!(counter(&p, Host::B, Counter::TcpTimeWaitReopened), 1);
    let from_b = net.sent_since(mark, Host::B);
    assert_eq!(
        from_b[0].control,
        Control::Syn,
        "B answered with a SYN-ACK: {from_b:?}"
    );
    assert!(
        from_b[0].seq.gt(old_snd_nxt),
        "the new ISS {:?} lies past the old SND.NXT {old_snd_nxt:?}",
        from_b[0].seq
    );
    let all = net.sent_since(mark, Host::A).into_iter().chain(from_b);
    assert!(all.clone().all(|s| s.control != Control::Rst), "no RST");
    assert_eq!(counter(&p, Host::B, Counter::TcpChallengeAcks), 0);
    assert_eq!(p.b.tcp_state(old), Ok(State::Closed));
    assert_eq!(p.b.tcp_error(old), Ok(None));
    p.b.tcp_close(old).unwrap();
    still_works(&mut p, c, s);
}

/// TSvals carry an offset per pair of hosts (the stack's `IsnGenerator::ts_offset`, as
/// Linux's `secure_tcp_ts_off`): not the bare millisecond clock, which would tell a peer
/// how long the stack has run; the same for every connection from A to B, so that a new
/// incarnation's TSvals continue the old one's (RFC 6191); another from B to A.
#[test]
fn timestamps_carry_an_offset_per_pair_of_hosts() {
    let (mut p, net) = tapped();
    let (c1, l, _) = connect(&mut p);
    let c2 = p.a.tcp_connect((ADDR_B, PORT)).unwrap();
    wait(
        &mut p,
        Duration::from_secs(1),
        "the second connection",
        |p| p.a.tcp_state(c2) == Ok(State::Established),
    );
    let ports = [c1, c2].map(|c| p.a.tcp_endpoints(c).unwrap().0 .1);
    assert_ne!(ports[0], ports[1]);
    let offset = |s: &Seg| {
        let clock = (s.at.as_nanos() / 1_000_000) as u32;
        s.timestamp.unwrap().tsval.wrapping_sub(clock)
    };
    let syns: Vec<Seg> = net
        .sent()
        .into_iter()
        .filter(|s| s.control == Control::Syn)
        .collect();
    let from_a: Vec<u32> = syns
        .iter()
        .filter(|s| s.from == Host::A)
        .map(offset)
        .collect();
    let from_b: Vec<u32> = syns
        .iter()
        .filter(|s| s.from == Host::B)
        .map(offset)
        .collect();
    assert_eq!((from_a.len(), from_b.len()), (2, 2), "{syns:?}");
    assert_eq!(from_a[0], from_a[1], "one offset from A to B");
    assert_eq!(from_b[0], from_b[1], "one offset from B to A");
    assert_ne!(from_a[0], 0, "not the bare clock");
    assert_ne!(from_a[0], from_b[0]);
    // Every later segment too.
    assert!(net
        .sent()
        .iter()
        .filter(|s| s.from == Host::A)
        .all(|s| offset(s) == from_a[0]));
    p.b.tcp_close(l).unwrap();
}

/// A connection CLOSED at the end of TIME-WAIT, its handle still held by the application,
/// keeps no hold on its four-tuple (CLOSED has no TCB, RFC 9293 §3.3.2): A's SYN from the
/// same port goes to B's listener and opens a connection, instead of meeting the RST the
/// old connection's input gives a segment in CLOSED.
#[test]
fn a_closed_connection_still_held_leaves_its_four_tuple_to_the_listener() {
    let (mut p, net) = tapped();
    let (l, old, _) = b_in_time_wait(&mut p, &net);
    p.run_for(MSL + MSL);
    assert_eq!(p.b.tcp_state(old), Ok(State::Closed));
    let mark = net.mark();
    let (c, s) = connect_from_a_port(&mut p, l, Duration::from_millis(100));
    assert!(net
        .sent_since(mark, Host::B)
        .iter()
        .all(|s| s.control != Control::Rst));
    assert_eq!(counter(&p, Host::B, Counter::TcpTimeWaitReopened), 0);
    assert_eq!(p.b.tcp_state(old), Ok(State::Closed));
    still_works(&mut p, c, s);
}

/// A client that lost its connection (its RST lost too) connects again from the same
/// port: B's old connection answers the SYN with a challenge ACK (RFC 5961 §4), A's new
/// connection answers that with the RST that ends it, and sends its SYN again at once
/// behind the RST, so the connection opens in a round trip or two instead of after A's
/// one-second retransmission timeout.
#[test]
fn a_client_that_lost_its_connection_reconnects_from_the_same_port_at_once() {
    let (mut p, net) = tapped();
    let l = p.b.tcp_listen((ADDR_B, PORT), 8).unwrap();
    let (c, old) = connect_from_a_port(&mut p, l, Duration::from_secs(1));
    net.drop_into(Host::B, 1, |s| s.control == Control::Rst);
    p.a.tcp_abort(c).unwrap();
    p.run_for(Duration::from_millis(10));
    assert_eq!(p.b.tcp_state(old), Ok(State::Established), "B did not hear");
    let mark = net.mark();
    let (c, s) = connect_from_a_port(&mut p, l, Duration::from_millis(100));
    assert_eq!(p.b.tcp_state(old), Ok(State::Closed));
    assert_eq!(p.b.tcp_error(old), Ok(Some(TcpError::ConnectionReset)));
    assert_eq!(counter(&p, Host::B, Counter::TcpChallengeAcks), 1);
    let from_a: Vec<Control> = net
        .sent_since(mark, Host::A)
        .iter()
        .map(|s| s.control)
        .filter(|&c| c != Control::None)
        .collect();
    assert_eq!(from_a, [Control::Syn, Control::Rst, Control::Syn]);
    still_works(&mut p, c, s);
}

/// An abort after a retransmission timeout: A has B's data, its ACKs lost, and B's timer
/// has gone back to SND.UNA and sent the first segment again. B's RST carries the highest
/// sequence number B sent (RFC 9293 §3.10.5's SND.NXT), which is A's RCV.NXT, and resets
/// A. It carried the number the go-back left, below A's window, and A dropped it (RFC 5961
/// §3.2): A, with nothing to send, held its half of the connection for good. Found by the
/// random conversations once applications could end connections (tests/tcp_conversations.rs).
#[test]
fn an_abort_after_a_retransmission_timeout_resets_the_peer() {
    let (mut p, net) = tapped();
    let (c, _l, s) = connect(&mut p);
    net.drop_into(Host::B, usize::MAX, |s| s.from == Host::A);
    let data = [7u8; 4000];
    assert_eq!(p.b.tcp_send(s, &data), Ok(data.len()));
    wait(&mut p, Duration::from_secs(5), "B's timeout", |p| {
        p.b.tcp_stats(s).unwrap().timeouts == 1
    });
    let b = p.b.tcp_connection(s).unwrap();
    assert!(b.snd_nxt().lt(b.snd_una() + data.len()), "B went back");
    net.release();
    p.b.tcp_abort(s).unwrap();
    reset_within_3_s(&mut p, c);
}

/// A connection its application lets go of in FIN-WAIT-2 ends after `fin_wait2_timeout`
/// (60 s) though nothing more comes from the peer: here B's stack forgot the connection,
/// its RST lost. The timer started only where FIN-WAIT-2 began after the close, so a
/// connection shut down first and closed later stayed for good, with no handle left to
/// end it. Found by the random conversations once applications could end connections.
#[test]
fn a_connection_let_go_in_fin_wait_2_ends_after_the_timeout() {
    let (mut p, net) = tapped();
    let (c, _l, s) = connect(&mut p);
    p.a.tcp_shutdown(c).unwrap();
    wait(&mut p, Duration::from_secs(1), "A in FIN-WAIT-2", |p| {
        p.a.tcp_state(c) == Ok(State::FinWait2)
    });
    net.drop_into(Host::A, 1, |s| s.control == Control::Rst);
    p.b.tcp_abort(s).unwrap();
    p.run_for(Duration::from_millis(10));
    assert_eq!(p.a.tcp_state(c), Ok(State::FinWait2), "A did not hear");
    p.a.tcp_close(c).unwrap();
    p.run_for(Duration::from_secs(59));
    assert_eq!(p.a.tcp_connection_count(), 1);
    p.run_for(Duration::from_secs(2));
    assert_eq!(p.a.tcp_connection_count(), 0);
}

/// A challenge ACK carries the standard checksum on a connection that agreed to none
/// (RFC 1146): with B's listener gone, A's new SYN from the same port meets B's
/// TIME-WAIT and draws a challenge ACK (RFC 5961 §4); A's new connection, which agreed to
/// nothing, takes it in and answers with the RST that ends B's TIME-WAIT (then its SYN,
/// sent again at once, meets no listener and is refused). Without the checksum A dropped
/// the challenge ACK as corrupt, and every SYN A sent met the same fate until TIME-WAIT
/// ran out.
#[test]
fn a_challenge_ack_carries_a_checksum_where_none_was_agreed() {
    let (mut p, net) = tapped();
    let (l, old, _) = b_in_time_wait(&mut p, &net);
    assert!(p.b.tcp_connection(old).unwrap().checksum_elided());
    p.b.tcp_close(l).unwrap();
    let mark = net.mark();
    let cfg = p.a.tcp_default_config();
    let c =
        p.a.tcp_connect_from((ADDR_B, PORT), (ADDR_A, A_PORT), cfg, false)
            .unwrap();
    p.run_for(Duration::from_millis(10));
    let from_b = net.sent_since(mark, Host::B);
    assert!(from_b[0].is_pure_ack(), "the challenge ACK: {from_b:?}");
    let from_a = net.sent_since(mark, Host::A);
    assert!(
        from_a.iter().any(|s| s.control == Control::Rst),
        "A answered it: {from_a:?}"
    );
    assert_eq!(counter(&p, Host::A, Counter::TcpDropBadChecksum), 0);
    assert_eq!(p.b.tcp_state(old), Ok(State::Closed));
    // A's SYN, sent again behind the RST, finds no listener.
    assert_eq!(p.a.tcp_error(c), Ok(Some(TcpError::ConnectionRefused)));
}

/// B loses A's connection, which agreed to no checksums (RFC 1146), without a word (its
/// RST is lost): B's stack now drops A's unchecksummed segments as corrupt. After one
/// retransmission timeout A sends with the standard checksum, and B's answer, the RST for
/// a segment nobody wants, ends A's connection at once, not after every retransmission.
#[test]
fn a_peer_that_lost_the_connection_is_heard_after_one_timeout_despite_elision() {
    let (mut p, c) = b_forgets_a_connection_without_checksums();
    p.run_for(Duration::from_millis(10));
    p.a.tcp_send(c, b"anyone there?").unwrap();
    reset_within_3_s(&mut p, c);
    assert_eq!(counter(&p, Host::B, Counter::TcpDropBadChecksum), 1);
}

/// The same loss found by a keepalive probe: the probe carries the standard checksum, so
/// B's stack answers it with a RST instead of dropping it as corrupt (RFC 1122
/// §4.2.3.6's probe exists to draw that RST from a peer that restarted).
#[test]
fn a_keepalive_probe_carries_a_checksum_where_none_was_agreed() {
    let (mut p, c) = b_forgets_a_connection_without_checksums();
    p.a.tcp_set_keepalive(c, Some(Duration::from_secs(1)))
        .unwrap();
    reset_within_3_s(&mut p, c);
    assert_eq!(counter(&p, Host::B, Counter::TcpDropBadChecksum), 0);
}

/// Keepalive times its idle interval from segments the connection accepts: a peer that is
/// gone is given up on after its probes go unanswered (RFC 1122 §4.2.3.6), though
/// segments with its four-tuple that the connection drops (out of the window here: stale
/// ones, or blind ones) keep coming every 5 s. Before, every segment restarted the timer
/// and the probe count, and such a stream kept the connection for good.
#[test]
fn keepalive_gives_up_on_a_gone_peer_despite_segments_it_drops() {
    let (mut p, net) = tapped();
    let (c, _l, _s) = connect(&mut p);
    p.a.tcp_set_keepalive(c, Some(Duration::from_secs(10)))
        .unwrap();
    // B is gone: nothing it sends reaches A any more.
    net.drop_into(Host::A, usize::MAX, |_| true);
    let dropped = counter(&p, Host::A, Counter::TcpDropOutOfWindow);
    let started = p.now();
    let mut injected = 0;
    while p.a.tcp_state(c) != Ok(State::Closed) && p.now() - started < Duration::from_secs(900) {
        let rcv_nxt = p.a.tcp_connection(c).unwrap().rcv_nxt();
        let stale = TcpRepr {
            seq_number: rcv_nxt + (1 << 30),
            ..from_b(&p, &net, c)
        };
        net.inject(Host::B, &stale);
        injected += 1;
        p.run_for(Duration::from_secs(5));
    }
    assert_eq!(
        p.a.tcp_state(c),
        Ok(State::Closed),
        "still open after 900 s"
    );
    assert_eq!(p.a.tcp_error(c), Ok(Some(TcpError::TimedOut)));
    assert!(counter(&p, Host::A, Counter::TcpKeepalives) >= 9);
    let out_of_window = counter(&p, Host::A, Counter::TcpDropOutOfWindow) - dropped;
    assert!(
        out_of_window + 1 >= injected,
        "{out_of_window} of {injected}"
    );
}

/// A segment unanswered three times in a row (R1, RFC 9293 §3.8.3) is a delivery problem
/// the application hears of before the connection is given up (SHLD-9): the soft error
/// `TimedOut`, not after two timeouts, kept while the connection goes on, and forgotten
/// once the peer acknowledges new data.
#[test]
fn a_delivery_problem_is_told_after_three_timeouts_and_forgotten_once_answered() {
    let (mut p, net) = tapped();
    let (c, _l, s) = connect(&mut p);
    net.drop_into(Host::B, usize::MAX, |_| true);
    assert_eq!(p.a.tcp_send(c, b"lost"), Ok(4));
    for (timeouts, told) in [(2, None), (3, Some(TcpError::TimedOut))] {
        wait(&mut p, Duration::from_secs(10), "the timeouts", |p| {
            counter(p, Host::A, Counter::TcpRetransmitTimeouts) == timeouts
        });
        assert_eq!(p.a.tcp_soft_error(c), Ok(told), "after {timeouts}");
    }
    assert_eq!(p.a.tcp_state(c), Ok(State::Established));
    net.release();
    wait(
        &mut p,
        Duration::from_secs(10),
        "the data acknowledged",
        |p| p.a.tcp_send_queued(c) == Ok(0),
    );
    assert_eq!(p.a.tcp_soft_error(c), Ok(None));
    assert_eq!(p.b.tcp_recv(s, &mut [0; 8]), Ok(4));
}

/// A connection from A to B that agreed to no checksums (RFC 1146), which B's stack then
/// forgets without a word (its RST is lost on the way). Returns the pair and A's end.
fn b_forgets_a_connection_without_checksums() -> (Pair, TcpHandle) {
    let (mut p, net) = tapped();
    let (c, _l, s) = connect(&mut p);
    assert!(p.a.tcp_connection(c).unwrap().checksum_elided());
    net.drop_into(Host::A, 1, |s| s.control == Control::Rst);
    p.b.tcp_abort(s).unwrap();
    (p, c)
}

/// Runs until A's connection `c` is reset, for at most 3 s.
fn reset_within_3_s(p: &mut Pair, c: TcpHandle) {
    wait(p, Duration::from_secs(3), "A's connection reset", |p| {
        p.a.tcp_state(c) == Ok(State::Closed)
    });
    assert_eq!(p.a.tcp_error(c), Ok(Some(TcpError::ConnectionReset)));
}

/// TIME-WAIT keeps out a SYN that is not newer than the old incarnation by RFC 6191 §2's
/// test: with timestamps, an older TSval however new its sequence number (which PAWS
/// answers), or the same TSval with a sequence number not past RCV.NXT (a challenge ACK).
/// Without a timestamp, a sequence number not past RCV.NXT (dropped, RFC 7323 §3.2).
/// Each leaves TIME-WAIT as it was; the same TSval with a sequence number past RCV.NXT
/// opens the new incarnation. (B's answers are kept from A, whose stack would reset them.)
#[test]
fn time_wait_keeps_out_a_syn_that_is_not_newer() {
    let (mut p, net) = tapped();
    let (_l, old, a_fin) = b_in_time_wait(&mut p, &net);
    let ts_recent = a_fin.timestamp.unwrap().tsval;
    let rcv_nxt = p.b.tcp_connection(old).unwrap().rcv_nxt();
    assert_eq!(rcv_nxt, a_fin.seq + 1);
    net.drop_into(Host::A, usize::MAX, |_| true);
    let syn = |seq: SeqNumber, tsval: Option<u32>| TcpRepr {
        src_port: A_PORT,
        dst_port: PORT,
        control: Control::Syn,
        seq_number: seq,
        window_len: 8192,
        max_seg_size: Some(1460),
        timestamp: tsval.map(|tsval| TcpTimestamp { tsval, tsecr: 0 }),
        ..TcpRepr::default()
    };
    let older = [
        (rcv_nxt + 100_000, Some(ts_recent.wrapping_sub(1))),
        (rcv_nxt, Some(ts_recent)),
        // Without a timestamp the sequence number alone decides.
        (rcv_nxt, None),
    ];
    for (i, (seq, tsval)) in older.into_iter().enumerate() {
        let mark = net.mark();
        net.inject(Host::A, &syn(seq, tsval));
        p.settle();
        let sent = net.sent_since(mark, Host::B);
        if tsval.is_some() {
            assert_eq!(sent.len(), 1, "{i}: one answer: {sent:?}");
            assert!(
                sent[0].is_pure_ack() && sent[0].acks(rcv_nxt),
                "{i}: {sent:?}"
            );
        } else {
            // A connection with timestamps drops a segment without one (RFC 7323 §3.2).
            assert!(sent.is_empty(), "{i}: {sent:?}");
        }
        assert_eq!(p.b.tcp_state(old), Ok(State::TimeWait), "{i}");
    }
    assert_eq!(counter(&p, Host::B, Counter::TcpTimeWaitReopened), 0);

    let mark = net.mark();
    net.inject(Host::A, &syn(rcv_nxt + 1, Some(ts_recent)));
    p.settle();
    let sent = net.sent_since(mark, Host::B);
    assert_eq!(sent[0].control, Control::Syn, "{sent:?}");
    assert!(sent[0].acks(rcv_nxt + 2), "{sent:?}");
    assert_eq!(p.b.tcp_state(old), Ok(State::Closed));
    assert_eq!(counter(&p, Host::B, Counter::TcpTimeWaitReopened), 1);
}

// ----------------------------------------------------------------------------------------
// (B) RFC 5961: blind in-window attacks. A is the victim; forged segments claim to be
// from B's endpoint.

/// A connection with a little data each way, and counters to compare against.
fn victim() -> (Pair, Net, TcpHandle, TcpHandle) {
    let (mut p, net) = tapped();
    let (c, _l, s) = connect(&mut p);
    p.a.tcp_send(c, b"request").unwrap();
    p.b.tcp_send(s, b"response").unwrap();
    p.run_for(Duration::from_millis(100));
    assert_eq!(read_all_a(&mut p, c), b"response");
    let mut buf = [0u8; 16];
    assert_eq!(p.b.tcp_recv(s, &mut buf), Ok(7));
    p.run_for(Duration::from_millis(100));
    (p, net, c, s)
}

/// The connection still works both ways.
fn still_works(p: &mut Pair, c: TcpHandle, s: TcpHandle) {
    assert_eq!(p.a.tcp_state(c), Ok(State::Established));
    assert_eq!(p.b.tcp_state(s), Ok(State::Established));
    p.a.tcp_send(c, b"ping").unwrap();
    p.b.tcp_send(s, b"pong").unwrap();
    p.run_for(Duration::from_millis(100));
    let mut buf = [0u8; 16];
    assert_eq!(p.b.tcp_recv(s, &mut buf), Ok(4));
    assert_eq!(&buf[..4], b"ping");
    assert_eq!(read_all_a(p, c), b"pong");
}

/// A's challenge ACKs among `segs`: `<SEQ=SND.NXT><ACK=RCV.NXT><CTL=ACK>`.
fn challenge_acks(segs: &[Seg], snd_nxt: SeqNumber, rcv_nxt: SeqNumber) -> usize {
    segs.iter()
        .filter(|s| s.is_pure_ack() && s.seq == snd_nxt && s.acks(rcv_nxt))
        .count()
}

/// RFC 5961 §3.2: a RST in the window but not at RCV.NXT draws a challenge ACK and changes
/// nothing else.
#[test]
fn rst_in_window_draws_a_challenge_ack() {
    let (mut p, net, c, s) = victim();
    let conn = p.a.tcp_connection(c).unwrap();
    let (rcv_nxt, snd_nxt, wnd) = (conn.rcv_nxt(), conn.snd_nxt(), conn.rcv_wnd());
    assert!(wnd > 10_000);
    let mark = net.mark();
    for offset in [1, 1000, wnd - 1] {
        net.inject(Host::B, &rst_from_b(&p, &net, c, rcv_nxt + offset));
        p.settle();
    }
    assert_eq!(p.a.tcp_state(c), Ok(State::Established));
    assert_eq!(p.a.tcp_error(c), Ok(None));
    assert_eq!(counter(&p, Host::A, Counter::TcpResetsIn), 0);
    assert_eq!(counter(&p, Host::A, Counter::TcpChallengeAcks), 3);
    assert_eq!(p.a.tcp_stats(c).unwrap().challenge_acks, 3);
    let sent = net.sent_since(mark, Host::A);
    assert_eq!(sent.len(), 3, "one ACK per RST and nothing else: {sent:?}");
    assert_eq!(challenge_acks(&sent, snd_nxt, rcv_nxt), 3);
    still_works(&mut p, c, s);
}

/// RFC 5961 §3.2: a RST exactly at RCV.NXT resets the connection, with data on it or not.
#[test]
fn rst_at_rcv_nxt_resets() {
    // Bare, and carrying data (RFC 9293 SHLD-2, §3.5.3: diagnostics, say), which is not
    // delivered.
    for payload in [&b""[..], b"diagnostic: connection no longer wanted"] {
        let (mut p, net, c, _s) = victim();
        let rcv_nxt = p.a.tcp_connection(c).unwrap().rcv_nxt();
        let mark = net.mark();
        net.inject(
            Host::B,
            &TcpRepr {
                payload,
                ..rst_from_b(&p, &net, c, rcv_nxt)
            },
        );
        p.settle();
        assert_eq!(p.a.tcp_state(c), Ok(State::Closed));
        assert_eq!(p.a.tcp_error(c), Ok(Some(TcpError::ConnectionReset)));
        assert_eq!(
            p.a.tcp_recv(c, &mut [0; 64]),
            Err(TcpError::ConnectionReset)
        );
        assert_eq!(counter(&p, Host::A, Counter::TcpResetsIn), 1);
        assert_eq!(counter(&p, Host::A, Counter::TcpChallengeAcks), 0);
        assert!(
            net.sent_since(mark, Host::A).is_empty(),
            "a RST is never answered"
        );
    }
}

/// RFC 5961 §3.2 (and RFC 9293 §3.10.7.4): a RST outside the window is dropped without a
/// word.
#[test]
fn rst_outside_window_is_dropped_silently() {
    let (mut p, net, c, s) = victim();
    let conn = p.a.tcp_connection(c).unwrap();
    let (rcv_nxt, wnd) = (conn.rcv_nxt(), conn.rcv_wnd());
    let mark = net.mark();
    let outside = [
        rcv_nxt - 1,
        rcv_nxt - 100_000,
        rcv_nxt + wnd,
        rcv_nxt + wnd + 5000,
        rcv_nxt + (1 << 31),
    ];
    for seq in outside {
        net.inject(Host::B, &rst_from_b(&p, &net, c, seq));
        p.settle();
    }
    assert_eq!(p.a.tcp_state(c), Ok(State::Established));
    assert!(net.sent_since(mark, Host::A).is_empty(), "no reply at all");
    assert_eq!(counter(&p, Host::A, Counter::TcpChallengeAcks), 0);
    assert_eq!(counter(&p, Host::A, Counter::TcpResetsIn), 0);
    assert_eq!(p.a.tcp_stats(c).unwrap().challenge_acks, 0);
    still_works(&mut p, c, s);
}

/// RFC 5961 §4: a SYN in a synchronized state draws a challenge ACK, whatever its
/// sequence number, and never resets the connection.
#[test]
fn syn_in_synchronized_state_draws_a_challenge_ack() {
    let (mut p, net, c, s) = victim();
    let conn = p.a.tcp_connection(c).unwrap();
    let (rcv_nxt, snd_nxt, wnd) = (conn.rcv_nxt(), conn.snd_nxt(), conn.rcv_wnd());
    let mark = net.mark();
    // In the window (at RCV.NXT and further on), with and without an ACK.
    let syns = [
        (rcv_nxt, None),
        (rcv_nxt + 5000, None),
        (rcv_nxt + 1, Some(snd_nxt)),
    ];
    for (seq, ack) in syns {
        net.inject(
            Host::B,
            &TcpRepr {
                control: Control::Syn,
                seq_number: seq,
                ack_number: ack,
                max_seg_size: Some(1460),
                ..from_b(&p, &net, c)
            },
        );
        p.settle();
    }
    assert_eq!(p.a.tcp_state(c), Ok(State::Established));
    assert_eq!(counter(&p, Host::A, Counter::TcpChallengeAcks), 3);
    assert_eq!(p.a.tcp_stats(c).unwrap().challenge_acks, 3);
    let sent = net.sent_since(mark, Host::A);
    assert_eq!(challenge_acks(&sent, snd_nxt, rcv_nxt), 3, "{sent:?}");
    assert!(sent.iter().all(|s| s.control != Control::Rst));
    assert_eq!(counter(&p, Host::A, Counter::TcpResetsOut), 0);

    // Outside the window too (§4.2: "irrespective of the sequence number"): a counted,
    // rate-limited challenge ACK; the connection is untouched.
    let mark = net.mark();
    net.inject(
        Host::B,
        &TcpRepr {
            control: Control::Syn,
            seq_number: rcv_nxt + wnd + 10_000,
            ..from_b(&p, &net, c)
        },
    );
    p.settle();
    let sent = net.sent_since(mark, Host::A);
    assert_eq!(challenge_acks(&sent, snd_nxt, rcv_nxt), 1, "{sent:?}");
    assert_eq!(sent.len(), 1);
    assert_eq!(counter(&p, Host::A, Counter::TcpChallengeAcks), 4);
    still_works(&mut p, c, s);
}

/// RFC 7323 §3.2: once timestamps are on, a segment without one is dropped silently (its
/// data never delivered); a RST without one is still taken.
#[test]
fn segment_without_timestamp_is_dropped() {
    let (mut p, net, c, s) = victim();
    assert!(p.a.tcp_connection(c).unwrap().timestamps_enabled());
    let rcv_nxt = p.a.tcp_connection(c).unwrap().rcv_nxt();
    let snd_nxt = p.a.tcp_connection(c).unwrap().snd_nxt();
    let mark = net.mark();
    net.inject(
        Host::B,
        &TcpRepr {
            seq_number: rcv_nxt,
            ack_number: Some(snd_nxt),
            payload: b"NO TSOPT",
            timestamp: None,
            ..from_b(&p, &net, c)
        },
    );
    p.settle();
    assert_eq!(counter(&p, Host::A, Counter::TcpDropNoTimestamp), 1);
    assert!(net.sent_since(mark, Host::A).is_empty(), "dropped silently");
    assert_eq!(p.a.tcp_recv_queued(c), Ok(0));
    still_works(&mut p, c, s);

    let rcv_nxt = p.a.tcp_connection(c).unwrap().rcv_nxt();
    net.inject(
        Host::B,
        &TcpRepr {
            timestamp: None,
            ..rst_from_b(&p, &net, c, rcv_nxt)
        },
    );
    p.settle();
    assert_eq!(p.a.tcp_error(c), Ok(Some(TcpError::ConnectionReset)));
}

/// B's address "sends" A data at RCV.NXT with each of `acks`: A delivers none of it, and
/// counts each under `drop` and answers each with a challenge ACK (RFC 5961 §5.2).
fn forged_data_is_dropped(
    p: &mut Pair,
    net: &Net,
    c: TcpHandle,
    acks: &[SeqNumber],
    drop: Counter,
) {
    let conn = p.a.tcp_connection(c).unwrap();
    let (rcv_nxt, snd_nxt) = (conn.rcv_nxt(), conn.snd_nxt());
    let (dropped, challenged) = (
        counter(p, Host::A, drop),
        counter(p, Host::A, Counter::TcpChallengeAcks),
    );
    let mark = net.mark();
    for &ack in acks {
        net.inject(
            Host::B,
            &TcpRepr {
                seq_number: rcv_nxt,
                ack_number: Some(ack),
                psh: true,
                payload: b"FORGED",
                ..from_b(p, net, c)
            },
        );
        p.settle();
    }
    let n = acks.len() as u64;
    assert_eq!(p.a.tcp_recv_queued(c), Ok(0), "nothing delivered");
    assert_eq!(p.a.tcp_connection(c).unwrap().rcv_nxt(), rcv_nxt);
    assert_eq!(counter(p, Host::A, drop) - dropped, n);
    assert_eq!(
        counter(p, Host::A, Counter::TcpChallengeAcks) - challenged,
        n
    );
    let sent = net.sent_since(mark, Host::A);
    assert_eq!(
        challenge_acks(&sent, snd_nxt, rcv_nxt),
        acks.len(),
        "{sent:?}"
    );
}

/// RFC 5961 §5.2: data whose ACK acknowledges something never sent (beyond SND.NXT) is
/// dropped with an ACK; the data never reaches the application.
#[test]
fn data_with_ack_beyond_snd_nxt_is_dropped() {
    let (mut p, net, c, s) = victim();
    let snd_nxt = p.a.tcp_connection(c).unwrap().snd_nxt();
    let acks = [snd_nxt + 1, snd_nxt + 100_000];
    forged_data_is_dropped(&mut p, &net, c, &acks, Counter::TcpDropAckTooNew);
    // B's real data at the same sequence numbers is what A reads.
    p.b.tcp_send(s, b"genuine").unwrap();
    p.run_for(Duration::from_millis(100));
    assert_eq!(read_all_a(&mut p, c), b"genuine");
    still_works(&mut p, c, s);
}

/// RFC 5961 §5.2: data whose ACK is older than SND.UNA − MAX.SND.WND is dropped with an
/// ACK and not delivered; an ACK just inside that bound is acceptable. B advertises at
/// most 65,535 bytes (no window scaling, a 65,535-byte buffer), so MAX.SND.WND is exactly
/// that.
#[test]
fn data_with_ack_older_than_max_snd_wnd_is_dropped() {
    let mut b = host();
    b.stack.tcp.recv_buffer = 65_535;
    b.stack.tcp.window_scaling = false;
    let (mut p, net) = tapped_with(host(), b);
    let (c, _l, s) = connect(&mut p);
    // Move SND.UNA well past the ISS.
    let data = vec![7u8; 200_000];
    let mut off = 0;
    let mut got = 0;
    let mut buf = vec![0u8; 65_536];
    wait(&mut p, Duration::from_secs(10), "200 kB to B", |p| {
        if off < data.len() {
            off += p.a.tcp_send(c, &data[off..]).unwrap_or(0);
        }
        while let Ok(n) = p.b.tcp_recv(s, &mut buf) {
            if n == 0 {
                break;
            }
            got += n;
        }
        got == data.len() && p.a.tcp_send_queued(c) == Ok(0)
    });
    p.b.tcp_send(s, b"x").unwrap();
    p.run_for(Duration::from_millis(100));
    assert_eq!(read_all_a(&mut p, c), b"x");
    let conn = p.a.tcp_connection(c).unwrap();
    let (rcv_nxt, snd_una, snd_nxt) = (conn.rcv_nxt(), conn.snd_una(), conn.snd_nxt());
    assert_eq!(snd_una, snd_nxt);
    const MAX_SND_WND: usize = 65_535;

    let acks = [snd_una - (MAX_SND_WND + 1), snd_una - 1_000_000];
    forged_data_is_dropped(&mut p, &net, c, &acks, Counter::TcpDropAckTooOld);

    // At exactly SND.UNA − MAX.SND.WND the ACK is acceptable (a pure ACK, so that the
    // streams stay in step): processed quietly, no challenge ACK, nothing dropped.
    let mark = net.mark();
    net.inject(
        Host::B,
        &TcpRepr {
            seq_number: rcv_nxt,
            ack_number: Some(snd_una - MAX_SND_WND),
            ..from_b(&p, &net, c)
        },
    );
    p.settle();
    assert_eq!(counter(&p, Host::A, Counter::TcpDropAckTooOld), 2);
    assert_eq!(counter(&p, Host::A, Counter::TcpChallengeAcks), 2);
    assert!(net.sent_since(mark, Host::A).is_empty());

    // B's real data is what A reads.
    p.b.tcp_send(s, b"genuine").unwrap();
    p.run_for(Duration::from_millis(100));
    assert_eq!(read_all_a(&mut p, c), b"genuine");
    still_works(&mut p, c, s);
}

/// RFC 5961 §7: challenge ACKs are rate-limited. 250 bad RSTs within half a second draw
/// exactly the limit's worth; the rest are counted as suppressed. A second later the
/// budget is back.
#[test]
fn challenge_ack_rate_limit() {
    let (mut p, net, c, s) = victim();
    // Start clear of any earlier one-second window.
    p.run_for(Duration::from_secs(2));
    let conn = p.a.tcp_connection(c).unwrap();
    let (rcv_nxt, snd_nxt) = (conn.rcv_nxt(), conn.snd_nxt());
    let mark = net.mark();
    let start = p.now();
    for i in 0..250 {
        net.inject(Host::B, &rst_from_b(&p, &net, c, rcv_nxt + (1 + i * 7)));
        p.run_for(Duration::from_millis(2));
    }
    assert!(p.now() - start < Duration::from_secs(1));
    assert_eq!(p.a.tcp_state(c), Ok(State::Established));
    assert_eq!(
        counter(&p, Host::A, Counter::TcpChallengeAcks),
        CHALLENGE_ACK_LIMIT
    );
    assert_eq!(
        counter(&p, Host::A, Counter::TcpChallengeAcksSuppressed),
        250 - CHALLENGE_ACK_LIMIT
    );
    assert_eq!(
        p.a.tcp_stats(c).unwrap().challenge_acks,
        CHALLENGE_ACK_LIMIT
    );
    let sent = net.sent_since(mark, Host::A);
    assert_eq!(
        challenge_acks(&sent, snd_nxt, rcv_nxt) as u64,
        CHALLENGE_ACK_LIMIT
    );
    assert_eq!(sent.len() as u64, CHALLENGE_ACK_LIMIT, "nothing else");

    // A second on, the budget is back.
    p.run_for(Duration::from_secs(1));
    net.inject(Host::B, &rst_from_b(&p, &net, c, rcv_nxt + 3));
    p.settle();
    assert_eq!(
        counter(&p, Host::A, Counter::TcpChallengeAcks),
        CHALLENGE_ACK_LIMIT + 1
    );
    still_works(&mut p, c, s);
}

/// A short tail segment lost twice is sent again by the retransmission timer: after a
/// timeout takes SND.NXT back, Minshall's Nagle must not hold the short segment as if it
/// were still in flight (it would wait for its own acknowledgement forever). Found by
/// `probestack soak --seed 3`.
#[test]
fn a_lost_short_tail_is_retransmitted_after_a_timeout() {
    let (mut p, net) = tapped();
    let (a, _l, b) = connect(&mut p);
    net.drop_into(Host::B, 2, |s| {
        s.from == Host::A && !s.payload.is_empty() && s.payload.len() < 1000
    });
    let data: Vec<u8> = (0..3 * 1448 + 100).map(|i| i as u8).collect();
    assert_eq!(p.a.tcp_send(a, &data), Ok(data.len()));
    let total = data.len();
    wait(
        &mut p,
        Duration::from_secs(30),
        "the whole write at B",
        |p| p.b.tcp_recv_queued(b) == Ok(total),
    );
    assert_eq!(net.dropped().len(), 2, "the short tail was lost twice");
    assert!(counter(&p, Host::A, Counter::TcpRetransmitTimeouts) >= 1);
}

// ----------------------------------------------------------------------------------------
// (C) RFC 9293's address checks.

/// A SYN to a broadcast address (the limited one or the subnet's) or from a broadcast,
/// multicast or "this network" (0/8) one gets no SYN-ACK and makes no connection, and a
/// segment from such an address to a closed port gets no RST (RFC 9293 MUST-57 and
/// MUST-63, RFC 1122 §4.2.3.10): each is dropped and counted. Connecting to such an
/// address, or to a loopback (127/8) or reserved (240/4) one, is refused (MUST-46).
#[test]
fn segments_to_or_from_broadcast_and_multicast_addresses_are_dropped_unanswered() {
    let (mut p, net) = tapped();
    let l = p.b.tcp_listen((Ipv4Address::UNSPECIFIED, PORT), 8).unwrap();
    let syn = TcpRepr {
        src_port: 40000,
        dst_port: PORT,
        control: Control::Syn,
        seq_number: SeqNumber(1),
        window_len: 8192,
        max_seg_size: Some(1460),
        ..TcpRepr::default()
    };
    // 198.18.0.0/15's broadcast address, and a multicast group.
    let subnet = Ipv4Address::new(198, 19, 255, 255);
    let group = Ipv4Address::new(224, 0, 0, 1);
    // An address of "this network" (0/8), which IP lets through as a source for hosts
    // learning theirs (RFC 1122 §3.2.1.3) and TCP does not.
    let this_network = Ipv4Address::new(0, 1, 2, 3);
    for (src, dst) in [
        (ADDR_A, Ipv4Address::BROADCAST),
        (ADDR_A, subnet),
        (Ipv4Address::BROADCAST, ADDR_B),
        (group, ADDR_B),
        (subnet, ADDR_B),
        (this_network, ADDR_B),
    ] {
        net.inject_between(Host::B, src, dst, &syn);
    }
    let stray = TcpRepr {
        dst_port: 9999,
        control: Control::None,
        ack_number: Some(SeqNumber(77)),
        max_seg_size: None,
        ..syn
    };
    net.inject_between(Host::B, group, ADDR_B, &stray);
    net.inject_between(Host::B, ADDR_A, subnet, &stray);
    p.run_for(Duration::from_secs(3));
    assert!(
        net.sent().iter().all(|s| s.from != Host::B),
        "B answered: {:?}",
        net.sent()
    );
    // Those from a bad source IP drops first (RFC 1122 §3.2.1.3); TCP the rest.
    assert_eq!(counter(&p, Host::B, Counter::IpDropBadSource), 4);
    assert_eq!(counter(&p, Host::B, Counter::TcpDropNotUnicast), 4);
    assert_eq!(p.b.tcp_accept(l), Err(TcpError::WouldBlock));
    // The same SYN between unicast addresses draws a SYN-ACK.
    net.inject_between(Host::B, ADDR_A, ADDR_B, &syn);
    p.run_for(Duration::from_millis(10));
    assert!(net
        .sent()
        .iter()
        .any(|s| s.from == Host::B && s.control == Control::Syn));
    let loopback = Ipv4Address::new(127, 0, 0, 1);
    let reserved = Ipv4Address::new(240, 0, 0, 1);
    for dst in [
        Ipv4Address::BROADCAST,
        subnet,
        group,
        this_network,
        loopback,
        reserved,
    ] {
        assert_eq!(p.a.tcp_connect((dst, PORT)), Err(TcpError::InvalidAddress));
    }
}

// ----------------------------------------------------------------------------------------
// (D) A window shut with data in flight.

/// The peer's window shuts while data is in flight (a stale ACK the network reordered
/// behind newer ones, which RFC 9293's SND.WL1/WL2 test lets through; a receiver that
/// shrank its window): the data cannot go again as the window allows, so each
/// retransmission timeout sends its first byte as a zero-window probe (RFC 9293
/// §3.8.6.1), and while the peer answers, the timeouts do not count toward giving up
/// (RFC 1122 §4.2.2.17). Before, each timeout sent nothing, counted, and the connection
/// timed out after `max_retransmissions` of them; and at first those the peer left
/// unanswered were counted for the life of the connection, not in a row, so that over
/// an hour of a lossy path's lost probes a connection a random conversation held gave
/// up.
#[test]
fn a_window_shut_with_data_in_flight_is_probed_and_kept_open() {
    let (mut p, net, c, s) = victim();
    // The test speaks for B: nothing either host sends reaches the other.
    net.drop_into(Host::B, usize::MAX, |_| true);
    net.drop_into(Host::A, usize::MAX, |_| true);
    let conn = p.a.tcp_connection(c).unwrap();
    let (una, b_seq) = (conn.snd_una(), conn.rcv_nxt());
    assert_eq!(p.a.tcp_send(c, &[7; 1000]), Ok(1000));
    p.settle();
    let shut = |p: &Pair| TcpRepr {
        seq_number: b_seq,
        ack_number: Some(una),
        window_len: 0,
        ..from_b(p, &net, c)
    };
    net.inject(Host::B, &shut(&p));
    p.settle();
    // B answers every other probe (a lossy path): only unanswered timeouts in a row
    // count toward giving up, so three times the limit of them does not end it.
    let limit = p.a.tcp_default_config().max_retransmissions;
    for round in 0..3 * limit {
        let mark = net.mark();
        wait(&mut p, Duration::from_secs(120), "a probe", |_| {
            !net.sent_since(mark, Host::A).is_empty()
        });
        let sent = net.sent_since(mark, Host::A);
        assert!(
            sent.iter().all(|s| s.seq == una && s.payload.len() == 1),
            "round {round}: {sent:?}"
        );
        // B's answer: its window is still shut.
        if round % 2 == 0 {
            net.inject(Host::B, &shut(&p));
        }
    }
    assert_eq!(p.a.tcp_state(c), Ok(State::Established));
    // B's own segments go through again: its window is open, so it takes the next probe,
    // answers with its window, and the rest follows.
    net.release();
    let mut got = Vec::new();
    let mut buf = [0u8; 2048];
    wait(&mut p, Duration::from_secs(120), "the data", |p| {
        if let Ok(n) = p.b.tcp_recv(s, &mut buf) {
            got.extend_from_slice(&buf[..n]);
        }
        got.len() == 1000
    });
    assert!(got.iter().all(|&b| b == 7));
}

/// An ACK without data whose sequence number is the right edge of the receive window is
/// taken, as BSD's and Linux's acceptance tests take it (RFC 9293's table stops one
/// short): a peer that filled the window exactly and then had a timeout take SND.NXT
/// back sends its ACKs from SND.MAX, the edge. A RST there is outside (RFC 5961 §3.2,
/// `rst_outside_window_is_dropped_silently`).
#[test]
fn an_ack_at_the_right_edge_of_the_window_is_taken() {
    let (mut p, net, c, _s) = victim();
    // Nothing A sends reaches B: the test acknowledges it in B's name.
    net.drop_into(Host::B, usize::MAX, |_| true);
    let conn = p.a.tcp_connection(c).unwrap();
    let (una, rcv_nxt, wnd) = (conn.snd_una(), conn.rcv_nxt(), conn.rcv_wnd());
    assert_eq!(p.a.tcp_send(c, &[1; 100]), Ok(100));
    p.settle();
    net.inject(
        Host::B,
        &TcpRepr {
            seq_number: rcv_nxt + wnd,
            ack_number: Some(una + 100),
            ..from_b(&p, &net, c)
        },
    );
    p.settle();
    assert_eq!(p.a.tcp_connection(c).unwrap().snd_una(), una + 100);
    assert_eq!(counter(&p, Host::A, Counter::TcpDropOutOfWindow), 0);
}

// ----------------------------------------------------------------------------------------
// (E) RFC 9293 Appendix B requirements on the wire.

/// RFC 9293 MUST-15 (§3.7.1): a SYN without an MSS option means the peer takes segments
/// of 536 bytes of data (IPv4's default). A's SYN reaches B stripped of every option
/// (its real one is lost on the way), so B, on a 1500-byte MTU, sends A no segment with
/// more than 536 bytes of data, and fills segments to exactly 536. The limit is B's
/// alone: A, whose SYN-ACK carried B's MSS, sends B larger ones.
#[test]
fn a_syn_without_an_mss_option_gets_segments_of_536_bytes() {
    let (mut p, net) = tapped();
    let l = p.b.tcp_listen((ADDR_B, PORT), 4).unwrap();
    net.drop_into(Host::B, 1, |s| s.control == Control::Syn);
    let c = p.a.tcp_connect((ADDR_B, PORT)).unwrap();
    wait(&mut p, Duration::from_millis(100), "A's SYN lost", |_| {
        net.dropped().len() == 1
    });
    let syn = first_syn(&net, Host::A);
    // The same SYN with no options at all: no MSS, and no timestamps, whose 12 bytes
    // would come out of each segment's data.
    net.inject(
        Host::A,
        &TcpRepr {
            src_port: syn.src_port,
            dst_port: syn.dst_port,
            control: Control::Syn,
            seq_number: syn.seq,
            window_len: syn.window,
            ..TcpRepr::default()
        },
    );
    let mut s = None;
    wait(&mut p, Duration::from_secs(1), "the connection", |p| {
        s = s.or_else(|| p.b.tcp_accept(l).ok());
        s.is_some() && p.a.tcp_state(c) == Ok(State::Established)
    });
    let s = s.unwrap();
    assert_eq!(
        net.sent()
            .iter()
            .filter(|s| s.from == Host::A && s.control == Control::Syn)
            .count(),
        1,
        "B answered the stripped SYN, not a retransmission"
    );
    assert_eq!(p.b.tcp_connection(s).unwrap().mss().0, 536);
    assert!(!p.b.tcp_connection(s).unwrap().timestamps_enabled());

    let mark = net.mark();
    let data: Vec<u8> = (0..8192u32).map(|i| (i % 251) as u8).collect();
    let mut sent = 0;
    let mut got = Vec::new();
    wait(&mut p, Duration::from_secs(5), "8 KiB at A", |p| {
        sent += p.b.tcp_send(s, &data[sent..]).unwrap_or(0);
        got.extend(read_all_a(p, c));
        got.len() == data.len()
    });
    assert!(got == data);
    let lens: Vec<usize> = net
        .sent_since(mark, Host::B)
        .iter()
        .map(|s| s.payload.len())
        .filter(|&n| n > 0)
        .collect();
    assert!(lens.iter().all(|&n| n <= 536), "{lens:?}");
    assert!(
        lens.iter().filter(|&&n| n == 536).count() >= data.len() / 536,
        "full segments of 536: {lens:?}"
    );

    // The other way, B's SYN-ACK carried its MSS of 1460.
    let mark = net.mark();
    assert_eq!(p.a.tcp_send(c, &data), Ok(data.len()));
    p.run_for(Duration::from_millis(100));
    assert_eq!(p.b.tcp_recv_queued(s), Ok(data.len()));
    let longest = net
        .sent_since(mark, Host::A)
        .iter()
        .map(|s| s.payload.len())
        .max();
    assert_eq!(longest, Some(1460));
}

/// RFC 9293 SHLD-3 (§3.6.1, RFC 1122 §4.2.2.13): data that arrives after the application
/// closed its socket can never be read, and the sender is told so with a RST. B closes
/// with nothing unread, its FIN goes and is acknowledged (FIN-WAIT-2); A, in CLOSE-WAIT,
/// sends more; B answers it with a RST at the sequence number A expects, counts
/// `tcp.data_after_close`, and A's connection is reset.
#[test]
fn data_after_close_is_answered_with_a_rst() {
    let (mut p, net) = tapped();
    let (c, _l, s) = connect(&mut p);
    let fin = p.b.tcp_connection(s).unwrap().snd_nxt();
    let connections = p.b.tcp_connection_count();
    p.b.tcp_close(s).unwrap();
    p.run_for(Duration::from_millis(100));
    assert_eq!(p.a.tcp_state(c), Ok(State::CloseWait));
    assert_eq!(p.a.tcp_recv(c, &mut [0; 8]), Ok(0));
    assert!(
        net.sent()
            .iter()
            .any(|s| s.from == Host::A && s.is_pure_ack() && s.acks(fin + 1)),
        "B's FIN acknowledged: B is in FIN-WAIT-2"
    );
    assert_eq!(p.b.tcp_connection_count(), connections, "B still holds it");
    assert_eq!(counter(&p, Host::B, Counter::TcpResetsOut), 0);

    let mark = net.mark();
    assert_eq!(p.a.tcp_send(c, b"anyone reading?"), Ok(15));
    p.settle();
    let from_b = net.sent_since(mark, Host::B);
    assert_eq!(from_b.len(), 1, "{from_b:?}");
    assert_eq!(
        (from_b[0].control, from_b[0].seq),
        (Control::Rst, fin + 1),
        "a RST at A's RCV.NXT"
    );
    assert_eq!(counter(&p, Host::B, Counter::TcpDataAfterClose), 1);
    assert_eq!(counter(&p, Host::B, Counter::TcpResetsOut), 1);
    assert_eq!(p.a.tcp_state(c), Ok(State::Closed));
    assert_eq!(p.a.tcp_error(c), Ok(Some(TcpError::ConnectionReset)));
    p.run_for(Duration::from_millis(10));
    assert_eq!(p.b.tcp_connection_count(), connections - 1, "B let go");
}

/// RFC 9293 MUST-66 (§3.4, and §3.10.7.4's note): a RST is processed even when the
/// receive window is zero. A's 8 KiB receive buffer fills with B's data, unread, and A
/// advertises a zero window (data at RCV.NXT is then refused with an ACK); a RST at
/// RCV.NXT still resets A.
#[test]
fn a_rst_at_rcv_nxt_resets_a_zero_window() {
    let mut a = host();
    a.stack.tcp.recv_buffer = 8192;
    let (mut p, net) = tapped_with(a, host());
    let (c, _l, s) = connect(&mut p);
    assert_eq!(p.b.tcp_send(s, &[5; 32 * 1024]), Ok(32 * 1024));
    wait(&mut p, Duration::from_secs(5), "A's window shut", |p| {
        p.a.tcp_connection(c).unwrap().rcv_wnd() == 0
    });
    // A's delayed ACK of the last data goes out.
    p.run_for(Duration::from_millis(500));
    assert_eq!(p.a.tcp_recv_queued(c), Ok(8192));
    let last = net.sent().into_iter().rfind(|s| s.from == Host::A).unwrap();
    assert_eq!(last.window, 0, "A advertises a zero window: {last:?}");
    let rcv_nxt = p.a.tcp_connection(c).unwrap().rcv_nxt();
    let snd_nxt = p.a.tcp_connection(c).unwrap().snd_nxt();

    // The window is really shut: data at RCV.NXT is not taken, only acknowledged (and
    // counted, as B's own window probes are).
    let zero_window = counter(&p, Host::A, Counter::TcpDropZeroWindow);
    let mark = net.mark();
    net.inject(
        Host::B,
        &TcpRepr {
            seq_number: rcv_nxt,
            ack_number: Some(snd_nxt),
            payload: b"no room",
            ..from_b(&p, &net, c)
        },
    );
    p.settle();
    assert_eq!(p.a.tcp_recv_queued(c), Ok(8192));
    assert_eq!(p.a.tcp_connection(c).unwrap().rcv_nxt(), rcv_nxt);
    assert_eq!(
        counter(&p, Host::A, Counter::TcpDropZeroWindow),
        zero_window + 1
    );
    let acks = net.sent_since(mark, Host::A);
    assert!(
        acks.iter()
            .any(|s| s.is_pure_ack() && s.acks(rcv_nxt) && s.window == 0),
        "{acks:?}"
    );

    net.inject(Host::B, &rst_from_b(&p, &net, c, rcv_nxt));
    p.settle();
    assert_eq!(p.a.tcp_state(c), Ok(State::Closed));
    assert_eq!(p.a.tcp_error(c), Ok(Some(TcpError::ConnectionReset)));
    assert_eq!(counter(&p, Host::A, Counter::TcpResetsIn), 1);
}

/// RFC 9293 MUST-42 (§3.9.1.1): an application can LISTEN on a port while a connection
/// from that local port is in SYN-SENT or SYN-RECEIVED. B opens a connection from port
/// `PORT` (its SYN held on the way, so SYN-SENT), and another from `PORT + 1` in a
/// simultaneous open (the ACKs held, so SYN-RECEIVED); then listens on each port. Both
/// listens succeed, each listener accepts a new connection from A while the first one
/// waits, and each first connection then completes, its handshake segments going to it
/// and not to the listener on its port, and carries data.
#[test]
fn a_listen_on_a_port_with_a_connection_in_syn_sent_or_syn_received() {
    let (mut p, net) = tapped();
    let cfg = p.b.tcp_default_config();
    // SYN-SENT: B from PORT to a listener on A, B's SYN held on its way into A.
    let a_l = p.a.tcp_listen((ADDR_A, 9000), 4).unwrap();
    net.hold_into(Host::A, |s| s.control == Control::Syn && s.dst_port == 9000);
    let syn_sent =
        p.b.tcp_connect_from((ADDR_A, 9000), (ADDR_B, PORT), cfg, false)
            .unwrap();
    // SYN-RECEIVED: B from PORT + 1 and A from 6000 at once, A's <SYN,ACK> held on its
    // way into B.
    net.hold_into(Host::B, |s| s.src_port == 6000 && s.ack.is_some());
    let a_simul =
        p.a.tcp_connect_from((ADDR_B, PORT + 1), (ADDR_A, 6000), cfg, false)
            .unwrap();
    let syn_received =
        p.b.tcp_connect_from((ADDR_A, 6000), (ADDR_B, PORT + 1), cfg, false)
            .unwrap();
    p.run_for(Duration::from_millis(100));
    assert_eq!(p.b.tcp_state(syn_sent), Ok(State::SynSent));
    assert_eq!(p.b.tcp_state(syn_received), Ok(State::SynReceived));

    let mut listeners = Vec::new();
    for port in [PORT, PORT + 1] {
        let l = p.b.tcp_listen((ADDR_B, port), 4).unwrap();
        assert_eq!(p.b.tcp_state(l), Ok(State::Listen));
        let c = p.a.tcp_connect((ADDR_B, port)).unwrap();
        let mut s = None;
        wait(&mut p, Duration::from_secs(1), "a new connection", |p| {
            s = s.or_else(|| p.b.tcp_accept(l).ok());
            s.is_some() && p.a.tcp_state(c) == Ok(State::Established)
        });
        let s = s.unwrap();
        assert_eq!(p.b.tcp_endpoints(s).unwrap().0 .1, port);
        still_works(&mut p, c, s);
        listeners.push(l);
    }
    assert_eq!(p.b.tcp_state(syn_sent), Ok(State::SynSent));
    assert_eq!(p.b.tcp_state(syn_received), Ok(State::SynReceived));

    // The first connections complete.
    assert!(net.held() > 0);
    net.release();
    let mut a_sent = None;
    wait(
        &mut p,
        Duration::from_secs(5),
        "the first connections",
        |p| {
            a_sent = a_sent.or_else(|| p.a.tcp_accept(a_l).ok());
            a_sent.is_some()
                && p.b.tcp_state(syn_sent) == Ok(State::Established)
                && p.b.tcp_state(syn_received) == Ok(State::Established)
                && p.a.tcp_state(a_simul) == Ok(State::Established)
        },
    );
    for l in listeners {
        assert_eq!(p.b.tcp_accept(l), Err(TcpError::WouldBlock), "nothing more");
    }
    still_works(&mut p, a_sent.unwrap(), syn_sent);
    still_works(&mut p, a_simul, syn_received);
}
