//! TCP interop with another stack: smoltcp 0.14 as the peer, on the same memory link the
//! probestack tests use. probestack sits on one `MemoryNic` (a `Stack` with an interface,
//! as `sim::Pair` builds it); smoltcp sits on the other through [`SmolNic`], an adapter
//! that implements `smoltcp::phy::Device` on top of probestack's `Device` trait. Both run
//! on this thread on one virtual clock that jumps to the earlier of the two stacks'
//! deadlines, so timers run as they would and a run replays exactly.
//!
//! Both directions: smoltcp connects to a probestack listener and sends 16 MiB, and
//! probestack connects to a smoltcp listener and sends 16 MiB; each checked by hash, each
//! closed in order (a FIN each way, no RST anywhere), each with the options the two ends
//! agreed checked against what smoltcp offered. Then both directions again over a wire
//! that loses frames, so that each side's retransmissions meet the other's receiver.
//!
//! A tap on smoltcp's NIC counts the segments each way (SYNs, FINs, RSTs, resends) and
//! keeps the latest for the report a failed assertion prints.
//!
//! Then random conversations (`any_conversation_with_smoltcp_delivers_both_streams`, as
//! `tcp_conversations.rs` holds them between two probestacks): writes, reads, idle time
//! and half-closes on both sides in any order, either side connecting, on clean and
//! faulty wires, each side reading exactly what the other wrote and both connections
//! ending.

mod common;

use std::cell::Cell;
use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use common::conversation::ends_survivor;
use common::tamper::Tampered;
use common::wire_rules::Watch;

use probestack::buf::PacketBuf;
use probestack::driver::{
    Device as NicDevice, DeviceContext, FaultConfig, MemoryLink, MemoryNic, NicConfig, TxMeta,
};
use probestack::ip::route::Ipv4Cidr;
use probestack::probe::{Counter, Ledger};
use probestack::sim::{ADDR_A, ADDR_B, MAC_A, MAC_B};
use probestack::socket::tcp::{TcpError, TcpHandle};
use probestack::stack::{InterfaceConfig, Stack, StackConfig};
use probestack::tcp::State;
use probestack::time::{Clock, Duration, Instant, VirtualClock};
use proptest::prelude::*;
use smoltcp::iface::{Config as SmolConfig, Interface, SocketHandle, SocketSet};
use smoltcp::phy::{self, DeviceCapabilities, Medium};
use smoltcp::socket::tcp as smol;
use smoltcp::wire::{EthernetAddress, HardwareAddress, IpAddress, IpCidr};

/// Bytes sent in each bulk transfer.
const TOTAL: usize = 16 << 20;
/// The port of whichever side listens.
const PORT: u16 = 5001;
/// smoltcp's own port when it connects.
const SMOL_LOCAL_PORT: u16 = 49_200;
/// smoltcp's socket buffers, each way: its receive buffer makes it offer a window shift of
/// 3 (256 KiB needs 19 bits, 3 more than the 16 of the window field).
const SMOL_BUFFER: usize = 256 * 1024;
const SMOL_WINDOW_SHIFT: u8 = 3;
/// The IP MTU the adapter tells smoltcp: less than the link's 1500, so that the MSS
/// smoltcp offers (this less 40 bytes of headers) differs from probestack's own 1460 and
/// a test can tell whose MSS probestack used.
const SMOL_IP_MTU: usize = 1400;
const SMOL_MSS: usize = SMOL_IP_MTU - 40;
/// What probestack offers on an MTU-1500 link.
const PROBESTACK_MSS: usize = 1460;
/// The Ethernet header, which smoltcp counts in its device MTU.
const ETHERNET_HEADER: usize = 14;
/// The frame check sequence the memory NIC appends in the buffer's tailroom.
const FCS_ROOM: usize = 4;

// ---------------------------------------------------------------------------------------
// What went over the wire, seen from smoltcp's NIC.

/// Counts of one direction's TCP segments, read off the frames.
#[derive(Clone, Copy, Debug, Default)]
struct Flow {
    segments: u64,
    data_segments: u64,
    syns: u64,
    fins: u64,
    rsts: u64,
    /// Segments that carried no sequence space not already sent.
    retransmits: u64,
    largest_payload: usize,
    /// The end of the highest sequence space seen.
    high: Option<u32>,
}

/// The fields of a TCP segment in an Ethernet frame that [`Flow`] needs.
struct SegmentView {
    seq: u32,
    ack: u32,
    flags: u8,
    window: u16,
    payload: usize,
}

const FIN: u8 = 0x01;
const SYN: u8 = 0x02;
const RST: u8 = 0x04;
const ACK: u8 = 0x10;
/// Segments the trace keeps, the latest.
const TRACE_LEN: usize = 40;

impl SegmentView {
    /// One line of a trace: flags, sequence and acknowledgment numbers, length, window.
    fn describe(&self) -> String {
        let mut flags = String::new();
        for (bit, name) in [(SYN, 'S'), (FIN, 'F'), (RST, 'R'), (ACK, '.')] {
            if self.flags & bit != 0 {
                flags.push(name);
            }
        }
        format!(
            "[{flags}] seq {} ack {} len {} win {}",
            self.seq, self.ack, self.payload, self.window
        )
    }
}

/// The TCP segment in `frame`, if it carries one (IPv4 and protocol 6).
fn segment_in(frame: &[u8]) -> Option<SegmentView> {
    if frame.get(12..14)? != [0x08, 0x00] {
        return None;
    }
    let ip = frame.get(ETHERNET_HEADER..)?;
    if *ip.get(9)? != 6 {
        return None;
    }
    let header = usize::from(ip.first()? & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([*ip.get(2)?, *ip.get(3)?]));
    let tcp = ip.get(header..total)?;
    let offset = usize::from(tcp.get(12)? >> 4) * 4;
    Some(SegmentView {
        seq: u32::from_be_bytes(tcp.get(4..8)?.try_into().ok()?),
        ack: u32::from_be_bytes(tcp.get(8..12)?.try_into().ok()?),
        flags: *tcp.get(13)?,
        window: u16::from_be_bytes(tcp.get(14..16)?.try_into().ok()?),
        payload: tcp.len().checked_sub(offset)?,
    })
}

impl Flow {
    fn see(&mut self, frame: &[u8]) {
        let Some(seg) = segment_in(frame) else {
            return;
        };
        self.segments += 1;
        let syn = seg.flags & SYN != 0;
        let fin = seg.flags & FIN != 0;
        self.syns += u64::from(syn);
        self.fins += u64::from(fin);
        self.rsts += u64::from(seg.flags & RST != 0);
        if seg.payload > 0 {
            self.data_segments += 1;
            self.largest_payload = self.largest_payload.max(seg.payload);
        }
        // Sequence space: the payload, and one each for SYN and FIN.
        let len = seg.payload + usize::from(syn) + usize::from(fin);
        if len == 0 {
            return;
        }
        let end = seg.seq.wrapping_add(len as u32);
        match self.high {
            // Serial-number arithmetic (RFC 1982): `end` not after `high`.
            Some(high) if (end.wrapping_sub(high) as i32) <= 0 => self.retransmits += 1,
            _ => self.high = Some(end),
        }
    }
}

/// Both directions, named from smoltcp's side.
#[derive(Clone, Copy, Debug, Default)]
struct Tap {
    /// smoltcp to probestack.
    sent: Flow,
    /// probestack to smoltcp.
    received: Flow,
}

/// The latest segments both ways, for a failure's report.
#[derive(Default)]
struct Trace(VecDeque<String>);

impl Trace {
    fn log(&mut self, now: Instant, way: &str, frame: &[u8]) {
        if let Some(seg) = segment_in(frame) {
            if self.0.len() == TRACE_LEN {
                self.0.pop_front();
            }
            let line = format!("{:>10} us {way} {}", now.as_micros(), seg.describe());
            self.0.push_back(line);
        }
    }
}

// ---------------------------------------------------------------------------------------
// The adapter: smoltcp's phy::Device on a memory NIC.

/// smoltcp's end of the memory link. Frames go in and out through probestack's `Device`
/// trait, with a ledger of this end's own for the NIC to charge its work to, and the time
/// the driver loop last set.
struct SmolNic {
    nic: MemoryNic,
    ledger: Ledger,
    now: Instant,
    tap: Tap,
    trace: Trace,
    /// Frames the NIC refused (none are expected: `transmit` asks first).
    tx_errors: u64,
}

/// A received frame; smoltcp reads it in place.
struct FrameIn {
    frame: PacketBuf,
}

/// Room to send one frame through the NIC.
struct FrameOut<'a> {
    port: &'a mut SmolNic,
}

impl phy::RxToken for FrameIn {
    fn consume<R, F>(self, f: F) -> R
    where
        F: FnOnce(&[u8]) -> R,
    {
        f(self.frame.data())
    }
}

impl phy::TxToken for FrameOut<'_> {
    fn consume<R, F>(self, len: usize, f: F) -> R
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        // Tailroom for the FCS, so the NIC's DMA path needs no bounce copy.
        let mut frame = PacketBuf::new(len, 0, FCS_ROOM).expect("a frame buffer");
        let r = f(frame.data_mut());
        let port = self.port;
        port.tap.sent.see(frame.data());
        port.trace
            .log(port.now, "smoltcp → probestack", frame.data());
        let cx = DeviceContext {
            now: port.now,
            ledger: &port.ledger,
        };
        let sent = port.nic.transmit(frame, TxMeta::default(), &cx);
        if sent.is_err() {
            port.tx_errors += 1;
        }
        r
    }
}

impl phy::Device for SmolNic {
    type RxToken<'a>
        = FrameIn
    where
        Self: 'a;
    type TxToken<'a>
        = FrameOut<'a>
    where
        Self: 'a;

    fn receive(
        &mut self,
        _timestamp: smoltcp::time::Instant,
    ) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        // A frame is taken only when an answer to it could go out too; otherwise it waits
        // in the NIC (its deadline says so) until probestack has drained the other way.
        if !self.nic.tx_ready() {
            return None;
        }
        let rx = {
            let cx = DeviceContext {
                now: self.now,
                ledger: &self.ledger,
            };
            // The notification latch is cleared as the stack's driver would; the frame
            // itself is what smoltcp polls for.
            self.nic.take_notification(&cx);
            self.nic.receive(&cx)?
        };
        self.tap.received.see(rx.frame.data());
        self.trace
            .log(self.now, "probestack → smoltcp", rx.frame.data());
        Some((FrameIn { frame: rx.frame }, FrameOut { port: self }))
    }

    fn transmit(&mut self, _timestamp: smoltcp::time::Instant) -> Option<Self::TxToken<'_>> {
        if self.nic.tx_ready() {
            Some(FrameOut { port: self })
        } else {
            None
        }
    }

    fn capabilities(&self) -> DeviceCapabilities {
        // The checksum capabilities stay at smoltcp's default: it computes and verifies
        // every checksum itself (and knows nothing of RFC 1146).
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ethernet;
        caps.max_transmission_unit = SMOL_IP_MTU + ETHERNET_HEADER;
        caps
    }
}

// ---------------------------------------------------------------------------------------
// Both stacks, one clock.

thread_local! {
    /// The virtual time in milliseconds, for smoltcp's timestamp clock (a plain `fn`, so
    /// it reads the time from here; each test runs on a thread of its own).
    static SMOL_MILLIS: Cell<u32> = const { Cell::new(1) };
}

fn smol_tsval() -> u32 {
    SMOL_MILLIS.with(Cell::get)
}

/// A smoltcp TCP socket with `buffer` bytes each way, offering timestamps or not.
fn smol_socket(buffer: usize, timestamps: bool) -> smol::Socket<'static> {
    let mut socket = smol::Socket::new(
        smol::SocketBuffer::new(vec![0u8; buffer]),
        smol::SocketBuffer::new(vec![0u8; buffer]),
    );
    if timestamps {
        socket.set_tsval_generator(Some(smol_tsval));
    }
    socket
}

fn to_smol(t: Instant) -> smoltcp::time::Instant {
    smoltcp::time::Instant::from_micros(i64::try_from(t.as_micros()).expect("time in range"))
}

fn from_smol(t: smoltcp::time::Instant) -> Instant {
    Instant::from_micros(u64::try_from(t.total_micros()).unwrap_or(0))
}

fn earlier(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, y) => x.or(y),
    }
}

/// probestack at [`ADDR_A`] and smoltcp at [`ADDR_B`] on a memory link, and the clock.
struct World {
    clock: VirtualClock,
    ps: Stack,
    iface: Interface,
    port: SmolNic,
    sockets: SocketSet<'static>,
    sock: SocketHandle,
    /// Instants at which the two stacks were still busy after many polls (the clock was
    /// then nudged on): a sign of a livelock, expected to stay zero.
    spins: u64,
    /// What the watch on probestack's wire found broken (`common::wire_rules`), checked
    /// when the world ends.
    broken: Arc<Mutex<Vec<String>>>,
}

impl Drop for World {
    fn drop(&mut self) {
        let broken = self.broken.lock().unwrap();
        if !std::thread::panicking() {
            assert!(broken.is_empty(), "rules broken on the wire: {broken:#?}");
        }
    }
}

impl World {
    /// `smol_timestamps`: whether smoltcp offers (and answers) RFC 7323 timestamps;
    /// `wire`: what the link does to frames each way (the seed differs per direction);
    /// `msl`: probestack's maximum segment lifetime (TIME-WAIT lasts twice that).
    fn new(smol_timestamps: bool, wire: FaultConfig, msl: Duration) -> World {
        let clock = VirtualClock::new();
        let nic = |seed: u64| NicConfig {
            rx_faults: FaultConfig {
                seed: wire.seed ^ seed,
                ..wire
            },
            ..NicConfig::default()
        };
        let (nic_ps, nic_smol) = MemoryLink::pair(nic(1), nic(2)).expect("memory link");

        let mut config = StackConfig::default();
        config.tcp.msl = msl;
        let mut ps = Stack::new(config);
        let broken = Arc::new(Mutex::new(Vec::new()));
        let watch = Watch::new(["probestack", "smoltcp"], broken.clone());
        ps.add_interface(
            Box::new(Tampered {
                dev: nic_ps,
                tamper: watch,
            }),
            InterfaceConfig {
                mac: MAC_A,
                cidr: Ipv4Cidr {
                    address: ADDR_A,
                    prefix_len: 15,
                },
            },
        );

        let mut port = SmolNic {
            nic: nic_smol,
            ledger: Ledger::new(),
            now: clock.now(),
            tap: Tap::default(),
            trace: Trace::default(),
            tx_errors: 0,
        };
        let mut smol_config = SmolConfig::new(HardwareAddress::Ethernet(EthernetAddress(MAC_B.0)));
        smol_config.random_seed = 0x5eed_5eed;
        let mut iface = Interface::new(smol_config, &mut port, to_smol(clock.now()));
        iface.update_ip_addrs(|addrs| {
            addrs
                .push(IpCidr::new(smol_addr(ADDR_B), 15))
                .expect("room for an address");
        });

        let mut sockets = SocketSet::new(Vec::new());
        let sock = sockets.add(smol_socket(SMOL_BUFFER, smol_timestamps));
        World {
            clock,
            ps,
            iface,
            port,
            sockets,
            sock,
            spins: 0,
            broken,
        }
    }

    fn now(&self) -> Instant {
        self.clock.now()
    }

    fn smol(&mut self) -> &mut smol::Socket<'static> {
        self.sockets.get_mut::<smol::Socket>(self.sock)
    }

    fn poll_smol(&mut self) {
        let now = self.now();
        self.port.now = now;
        SMOL_MILLIS.with(|ms| ms.set((now.as_nanos() / 1_000_000) as u32 + 1));
        self.iface
            .poll(to_smol(now), &mut self.port, &mut self.sockets);
    }

    /// The earliest deadline of probestack, smoltcp's interface and smoltcp's NIC.
    fn next_deadline(&mut self) -> Option<Instant> {
        let now = to_smol(self.now());
        let smol = self.iface.poll_at(now, &self.sockets).map(from_smol);
        earlier(
            earlier(self.ps.next_deadline(), self.port.nic.next_deadline()),
            smol,
        )
    }

    /// Polls both stacks at the current instant until neither has work due now; returns
    /// the next deadline (later than now), if any.
    fn settle(&mut self) -> Option<Instant> {
        for _ in 0..100_000 {
            let now = self.now();
            self.ps.poll(now);
            self.poll_smol();
            match self.next_deadline() {
                Some(t) if t <= now => continue,
                next => return next,
            }
        }
        self.spins += 1;
        self.clock.advance(Duration::from_micros(1));
        Some(self.now())
    }

    /// Runs until `done` holds (asked whenever both stacks have settled) or `timeout` of
    /// virtual time has passed; whether `done` held.
    fn run_until(&mut self, timeout: Duration, mut done: impl FnMut(&mut World) -> bool) -> bool {
        let limit = self.now() + timeout;
        loop {
            self.settle();
            if done(self) {
                return true;
            }
            let next = self.next_deadline();
            if next.is_some_and(|t| t <= self.now()) {
                continue;
            }
            if self.now() >= limit {
                return false;
            }
            match next {
                Some(t) if t <= limit => self.clock.advance_to(t),
                _ => self.clock.advance_to(limit),
            }
        }
    }

    fn run_for(&mut self, d: Duration) {
        self.run_until(d, |_| false);
    }

    /// smoltcp connects to a probestack listener; returns the listener and probestack's
    /// end once both are established (within `patience`).
    fn smol_connects(&mut self, patience: Duration) -> (TcpHandle, TcpHandle) {
        let listener = self.ps.tcp_listen((ADDR_A, PORT), 4).unwrap();
        let cx = self.iface.context();
        let socket = self.sockets.get_mut::<smol::Socket>(self.sock);
        socket
            .connect(cx, (smol_addr(ADDR_A), PORT), SMOL_LOCAL_PORT)
            .unwrap();
        let mut accepted = None;
        assert!(
            self.run_until(patience, |w| {
                accepted = accepted.or_else(|| w.ps.tcp_accept(listener).ok());
                accepted.is_some() && w.smol().state() == smol::State::Established
            }),
            "no handshake: smoltcp is {}",
            self.smol().state()
        );
        (listener, accepted.unwrap())
    }

    /// probestack connects to a smoltcp listener; returns its connection once both are
    /// established (within `patience`).
    fn ps_connects(&mut self, patience: Duration) -> TcpHandle {
        self.smol().listen(PORT).unwrap();
        let c = self.ps.tcp_connect((ADDR_B, PORT)).unwrap();
        assert!(
            self.run_until(patience, |w| w.ps.tcp_state(c) == Ok(State::Established)
                && w.smol().state() == smol::State::Established),
            "no handshake: {}",
            self.report(c)
        );
        c
    }

    /// What both sides say, for a failed assertion.
    fn report(&self, c: TcpHandle) -> String {
        let mut s = String::new();
        let now = self.now();
        let _ = writeln!(s, "at {} us", now.as_micros());
        match self.ps.tcp_connection(c) {
            Ok(conn) => {
                let _ = writeln!(
                    s,
                    "probestack: {:?}, snd_una {:?} snd_nxt {:?} rcv_nxt {:?} rcv_wnd {} cwnd {} \
                     stats {:?}",
                    conn.state(),
                    conn.snd_una(),
                    conn.snd_nxt(),
                    conn.rcv_nxt(),
                    conn.rcv_wnd(),
                    conn.cwnd(),
                    conn.stats()
                );
            }
            Err(e) => {
                let _ = writeln!(s, "probestack: {e}");
            }
        }
        let counters = self.ps.ledger().counters();
        for k in [
            Counter::TcpSegmentsIn,
            Counter::TcpSegmentsOut,
            Counter::TcpRetransmittedSegments,
            Counter::TcpRetransmitTimeouts,
            Counter::TcpFastRetransmits,
            Counter::TcpDropOutOfWindow,
            Counter::TcpDropBadChecksum,
            Counter::TcpDropMalformed,
            Counter::TcpDropPaws,
            Counter::TcpDropAckTooNew,
            Counter::TcpDropAckTooOld,
            Counter::TcpOutOfOrderSegments,
            Counter::TcpResetsIn,
            Counter::TcpResetsOut,
            Counter::TcpChallengeAcks,
        ] {
            let _ = write!(s, "{k:?} {} ", counters.get(k));
        }
        let socket = self.sockets.get::<smol::Socket>(self.sock);
        let (state, sq, rq) = (socket.state(), socket.send_queue(), socket.recv_queue());
        let _ = writeln!(
            s,
            "\nsmoltcp: {state}, send queue {sq}, receive queue {rq}\ntap {:?}\nspins {}, tx errors {}",
            self.port.tap, self.spins, self.port.tx_errors
        );
        let _ = writeln!(s, "the latest segments, as smoltcp's NIC saw them:");
        for line in &self.port.trace.0 {
            let _ = writeln!(s, "  {line}");
        }
        s
    }
}

fn smol_addr(a: probestack::wire::Ipv4Address) -> IpAddress {
    let [w, x, y, z] = a.octets();
    IpAddress::v4(w, x, y, z)
}

// ---------------------------------------------------------------------------------------
// Data and its check.

/// The stream's byte at `offset`: an odd multiplier mixes the position so that a byte
/// out of place (a segment at a wrong sequence number) changes the hash.
fn stream_byte(offset: usize) -> u8 {
    let x = (offset as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (x >> 56) as u8 ^ (offset >> 12) as u8
}

fn fill(offset: usize, out: &mut [u8]) {
    for (i, b) in out.iter_mut().enumerate() {
        *b = stream_byte(offset + i);
    }
}

/// FNV-1a over 64 bits, fed in pieces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Fnv(u64);

impl Fnv {
    fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

/// No RST either way, no frame refused, no livelock; `c` is probestack's connection.
fn no_resets(w: &World, c: TcpHandle) {
    let counters = w.ps.ledger().counters();
    let checks = [
        (counters.get(Counter::TcpResetsOut), "probestack sent a RST"),
        (counters.get(Counter::TcpResetsIn), "probestack took a RST"),
        (w.port.tap.sent.rsts, "smoltcp sent a RST"),
        (w.port.tap.received.rsts, "a RST reached smoltcp"),
        (w.port.tx_errors, "smoltcp's NIC refused frames"),
        (w.spins, "the two stacks kept each other busy"),
    ];
    for (count, what) in checks {
        assert_eq!(count, 0, "{what}\n{}", w.report(c));
    }
}

// ---------------------------------------------------------------------------------------
// The two directions.

/// A clean wire, but not an instant one: 100 µs each way, so that windows and ACK clocks
/// matter and the transfer takes virtual time.
fn clean_wire() -> FaultConfig {
    FaultConfig {
        latency: Duration::from_micros(100),
        ..FaultConfig::none()
    }
}

/// A wire that loses a frame in a hundred each way, with jitter (which keeps the order).
/// It neither duplicates nor reorders, because either can rightly draw a RST at the end,
/// which the no-RST check would take for a fault: a copy of the last ACK reaches a
/// connection already gone (RFC 9293 §3.10.7.1-2); an ACK overtaken by the FIN after it
/// is old news in TIME-WAIT, answered with an ACK (§3.10.7.4) that finds the peer gone.
fn lossy_wire(seed: u64) -> FaultConfig {
    FaultConfig {
        seed,
        drop: 0.01,
        latency: Duration::from_micros(100),
        jitter: Duration::from_micros(20),
        ..FaultConfig::none()
    }
}

/// Whether the wire delivers every frame once, intact (it may delay them).
fn loses_nothing(wire: &FaultConfig) -> bool {
    [
        wire.drop,
        wire.duplicate,
        wire.reorder,
        wire.flip_caught,
        wire.flip_passed,
    ]
    .iter()
    .all(|&p| p == 0.0)
}

/// smoltcp connects to a probestack listener and sends `total` bytes; both close in
/// order. On a clean wire nothing may be sent twice.
fn smoltcp_sends(wire: FaultConfig, total: usize, limit: Duration) -> World {
    let clean = loses_nothing(&wire);
    // How long a handshake or a close may take: on a clean wire nothing waits for a
    // retransmission; on a lossy one smoltcp's backed-off timer (up to a minute) may.
    let patience = Duration::from_secs(if clean { 1 } else { 300 });
    let mut w = World::new(false, wire, Duration::from_secs(1));
    let (listener, s) = w.smol_connects(patience);
    assert_eq!(w.ps.tcp_state(s), Ok(State::Established));
    assert_eq!(
        w.ps.tcp_endpoints(s),
        Ok(((ADDR_A, PORT), (ADDR_B, SMOL_LOCAL_PORT)))
    );

    // What the two agreed. probestack sends at most what smoltcp offered and receives
    // what it offered itself; each scales its window (smoltcp by the shift its buffer
    // needs); smoltcp asked for SACK, not for timestamps (it has no clock for them here),
    // and it does not know RFC 1146, so the checksums stay.
    let conn = w.ps.tcp_connection(s).unwrap();
    assert_eq!(conn.mss(), (SMOL_MSS, PROBESTACK_MSS));
    assert_eq!(conn.window_shifts().0, SMOL_WINDOW_SHIFT);
    assert!(conn.window_shifts().1 > 0);
    assert!(conn.sack_enabled());
    assert!(!conn.timestamps_enabled());
    assert!(!conn.checksum_elided());

    // The data, from smoltcp to probestack.
    let start = w.now();
    let (mut sent, mut got) = (0usize, 0usize);
    let (mut sent_hash, mut got_hash) = (Fnv::new(), Fnv::new());
    let mut buf = vec![0u8; 128 * 1024];
    let done = w.run_until(limit, |w| {
        let socket = w.smol();
        while sent < total && socket.can_send() {
            let n = socket
                .send(|room| {
                    let n = room.len().min(total - sent);
                    fill(sent, &mut room[..n]);
                    sent_hash.feed(&room[..n]);
                    (n, n)
                })
                .unwrap();
            sent += n;
        }
        loop {
            match w.ps.tcp_recv(s, &mut buf) {
                Ok(0) => panic!("end of stream after {got} bytes"),
                Ok(n) => {
                    got_hash.feed(&buf[..n]);
                    got += n;
                }
                Err(TcpError::WouldBlock) => break,
                Err(e) => panic!("probestack receive: {e}"),
            }
        }
        got == total
    });
    assert!(
        done,
        "stalled: smoltcp sent {sent}, probestack got {got} of {total}\n{}",
        w.report(s)
    );
    assert_eq!(
        sent_hash, got_hash,
        "the bytes received differ from those sent"
    );
    let elapsed = w.now() - start;
    // smoltcp filled segments up to the MSS it may send: its own, since probestack
    // offered more.
    assert_eq!(w.port.tap.sent.largest_payload, SMOL_MSS);
    if clean {
        assert_eq!(w.port.tap.sent.retransmits, 0, "{}", w.report(s));
    }

    // smoltcp closes: FIN-WAIT-1, FIN-WAIT-2 once probestack has acknowledged; probestack
    // sees the end of the stream in CLOSE-WAIT.
    w.smol().close();
    assert!(
        w.run_until(patience, |w| w.ps.tcp_state(s) == Ok(State::CloseWait)
            && w.smol().state() == smol::State::FinWait2),
        "smoltcp's FIN: {}",
        w.report(s)
    );
    assert_eq!(w.ps.tcp_recv(s, &mut buf), Ok(0));
    // probestack closes: LAST-ACK, then gone once smoltcp acknowledges, which is then in
    // TIME-WAIT.
    w.ps.tcp_close(s).unwrap();
    assert!(
        w.run_until(patience, |w| w.ps.tcp_state(s) == Err(TcpError::BadHandle)
            && w.smol().state() == smol::State::TimeWait),
        "probestack's FIN: {}",
        w.report(s)
    );
    // smoltcp's TIME-WAIT is 10 s.
    assert!(w.run_until(Duration::from_secs(15), |w| w.smol().state()
        == smol::State::Closed));
    w.ps.tcp_close(listener).unwrap();

    // One SYN and one FIN each way (a lossy wire may repeat them, and smoltcp's NIC sees
    // what arrives after the wire).
    let tap = w.port.tap;
    if clean {
        assert_eq!((tap.sent.syns, tap.received.syns), (1, 1), "{tap:?}");
        assert_eq!((tap.sent.fins, tap.received.fins), (1, 1), "{tap:?}");
    }
    no_resets(&w, s);
    let counters = w.ps.ledger().counters();
    assert_eq!(counters.get(Counter::TcpDropBadChecksum), 0);
    assert_eq!(counters.get(Counter::TcpNoChecksumIn), 0);
    if clean {
        assert_eq!(counters.get(Counter::TcpRetransmittedSegments), 0);
    }
    println!(
        "{} KiB smoltcp → probestack in {} ms of virtual time; {tap:?}",
        total >> 10,
        elapsed.as_millis()
    );
    w
}

/// probestack connects to a smoltcp listener and sends `total` bytes; both close in
/// order. On a clean wire nothing may be sent twice.
fn probestack_sends(wire: FaultConfig, total: usize, limit: Duration) -> World {
    let clean = loses_nothing(&wire);
    // How long a handshake or a close may take: on a clean wire nothing waits for a
    // retransmission; on a lossy one smoltcp's backed-off timer (up to a minute) may.
    let patience = Duration::from_secs(if clean { 1 } else { 300 });
    // probestack ends in TIME-WAIT here. On a clean wire it may be short; on a lossy one
    // it must outlast smoltcp's longest retransmission timeout (a minute), or a FIN
    // smoltcp sends again after probestack's ACK was lost finds no connection and draws
    // a RST.
    let msl = Duration::from_secs(if clean { 1 } else { 60 });
    let mut w = World::new(true, wire, msl);
    let c = w.ps_connects(patience);
    let local = w.ps.tcp_local_addr(c).unwrap();
    assert_eq!(
        w.smol().remote_endpoint().map(|e| (e.addr, e.port)),
        Some((smol_addr(local.0), local.1))
    );

    // What the two agreed: as the other way round, and this time smoltcp has a clock for
    // timestamps, so it answers probestack's offer.
    let conn = w.ps.tcp_connection(c).unwrap();
    assert_eq!(conn.mss(), (SMOL_MSS, PROBESTACK_MSS));
    assert_eq!(conn.window_shifts().0, SMOL_WINDOW_SHIFT);
    assert!(conn.window_shifts().1 > 0);
    assert!(conn.sack_enabled());
    assert!(conn.timestamps_enabled());
    assert!(!conn.checksum_elided());

    // The data, from probestack to smoltcp. The application closes as soon as the last
    // byte is queued, so the FIN follows the data still in probestack's send buffer.
    let start = w.now();
    let (mut sent, mut got) = (0usize, 0usize);
    let (mut sent_hash, mut got_hash) = (Fnv::new(), Fnv::new());
    let mut chunk = vec![0u8; 64 * 1024];
    let mut pending = 0..0;
    let mut closed = false;
    let done = w.run_until(limit, |w| {
        loop {
            if pending.is_empty() && sent < total {
                let n = chunk.len().min(total - sent);
                fill(sent, &mut chunk[..n]);
                pending = 0..n;
            }
            if pending.is_empty() {
                break;
            }
            match w.ps.tcp_send(c, &chunk[pending.clone()]) {
                Ok(n) => {
                    sent_hash.feed(&chunk[pending.start..pending.start + n]);
                    sent += n;
                    pending.start += n;
                }
                Err(TcpError::WouldBlock) => break,
                Err(e) => panic!("probestack send: {e}"),
            }
        }
        if sent == total && !closed {
            w.ps.tcp_close(c).unwrap();
            closed = true;
        }
        let socket = w.smol();
        while socket.can_recv() {
            let n = socket
                .recv(|data| {
                    got_hash.feed(data);
                    (data.len(), data.len())
                })
                .unwrap();
            got += n;
        }
        // With everything read, smoltcp reports the end of the stream.
        got == total && socket.recv(|d| (0, d.len())) == Err(smol::RecvError::Finished)
    });
    assert!(
        done,
        "stalled: probestack sent {sent}, smoltcp got {got} of {total}\n{}",
        w.report(c)
    );
    assert_eq!(
        sent_hash, got_hash,
        "the bytes received differ from those sent"
    );
    let elapsed = w.now() - start;
    // probestack filled segments to smoltcp's MSS less the 12 bytes of timestamps.
    assert_eq!(w.port.tap.received.largest_payload, SMOL_MSS - 12);
    if clean {
        assert_eq!(w.port.tap.received.retransmits, 0, "{}", w.report(c));
        let counters = w.ps.ledger().counters();
        assert_eq!(counters.get(Counter::TcpRetransmittedSegments), 0);
    }

    // smoltcp has the FIN (CLOSE-WAIT); probestack is in FIN-WAIT-2 once smoltcp has
    // acknowledged it. smoltcp closes: LAST-ACK, CLOSED on probestack's ACK; probestack
    // waits in TIME-WAIT.
    assert_eq!(w.smol().state(), smol::State::CloseWait);
    w.smol().close();
    assert!(
        w.run_until(patience, |w| w.smol().state() == smol::State::Closed
            && w.ps.tcp_state(c) == Ok(State::TimeWait)),
        "smoltcp's FIN: {}",
        w.report(c)
    );
    // After 2·MSL probestack lets go of the connection.
    w.run_for(msl + msl + Duration::from_secs(1));
    assert_eq!(w.ps.tcp_state(c), Err(TcpError::BadHandle));

    // One SYN and one FIN each way (a lossy wire may repeat them, and smoltcp's NIC sees
    // what arrives after the wire).
    let tap = w.port.tap;
    if clean {
        assert_eq!((tap.sent.syns, tap.received.syns), (1, 1), "{tap:?}");
        assert_eq!((tap.sent.fins, tap.received.fins), (1, 1), "{tap:?}");
    }
    no_resets(&w, c);
    let counters = w.ps.ledger().counters();
    assert_eq!(counters.get(Counter::TcpDropBadChecksum), 0);
    assert_eq!(counters.get(Counter::TcpNoChecksumIn), 0);
    if clean {
        // smoltcp's timestamps never go back (a frame the wire duplicated or held back
        // may carry an older one, and PAWS rightly drops it).
        assert_eq!(counters.get(Counter::TcpDropPaws), 0);
    }
    println!(
        "{} KiB probestack → smoltcp in {} ms of virtual time; {tap:?}",
        total >> 10,
        elapsed.as_millis()
    );
    w
}

// ---------------------------------------------------------------------------------------
// The tests.

#[test]
fn smoltcp_connects_and_sends_16_mib_to_probestack() {
    smoltcp_sends(clean_wire(), TOTAL, Duration::from_secs(60));
}

#[test]
fn probestack_connects_and_sends_16_mib_to_smoltcp() {
    probestack_sends(clean_wire(), TOTAL, Duration::from_secs(60));
}

#[test]
fn smoltcp_sends_to_probestack_over_a_lossy_wire() {
    let w = smoltcp_sends(lossy_wire(11), 4 << 20, Duration::from_secs(600));
    // smoltcp resent what was lost; probestack held what came after a gap meanwhile.
    assert!(w.port.tap.sent.retransmits > 0);
    assert!(w.ps.ledger().counters().get(Counter::TcpOutOfOrderSegments) > 0);
}

#[test]
fn probestack_sends_to_smoltcp_over_a_lossy_wire() {
    let w = probestack_sends(lossy_wire(12), 4 << 20, Duration::from_secs(600));
    // smoltcp's duplicate ACKs drive probestack's fast retransmit.
    let counters = w.ps.ledger().counters();
    assert!(counters.get(Counter::TcpRetransmittedSegments) > 0);
    assert!(counters.get(Counter::TcpFastRetransmits) > 0);
}

/// probestack sends to a smoltcp reader that takes one 1 KiB record from its 8 KiB buffer
/// each time data arrives. smoltcp's ACK then offers a window of 1 KiB: less than a
/// segment and less than half the largest window, so probestack's sender silly-window
/// avoidance holds the data back (RFC 9293 §3.8.6.2.1) until the override timeout sends
/// what fits, which RFC 1122 §4.2.3.4 puts between 0.1 and 1 second. The window never
/// closes completely, so nothing here is a zero-window probe to back off.
#[test]
fn small_window_is_overridden_within_a_second() {
    let mut w = World::new(true, clean_wire(), Duration::from_secs(1));
    *w.smol() = smol_socket(8 * 1024, true);
    w.smol().listen(PORT).unwrap();
    let c = w.ps.tcp_connect((ADDR_B, PORT)).unwrap();
    assert!(w.run_until(Duration::from_secs(1), |w| w.smol().state()
        == smol::State::Established));
    let data = vec![0x5a; 64 * 1024];
    assert_eq!(w.ps.tcp_send(c, &data), Ok(data.len()));

    let mut arrivals = Vec::new();
    let mut queued = 0;
    let mut record = [0u8; 1024];
    w.run_until(Duration::from_secs(600), |w| {
        let now = w.now();
        let socket = w.smol();
        if socket.recv_queue() > queued {
            arrivals.push(now);
            assert_eq!(socket.recv_slice(&mut record), Ok(record.len()));
        }
        queued = socket.recv_queue();
        arrivals.len() >= 24
    });
    assert_eq!(arrivals.len(), 24, "{}", w.report(c));
    let waits: Vec<u64> = arrivals
        .windows(2)
        .map(|p| (p[1] - p[0]).as_millis())
        .collect();
    assert!(
        waits.iter().all(|&ms| ms <= 1000),
        "waits between arrivals, in ms: {waits:?}"
    );
}

// ---------------------------------------------------------------------------------------
// Random conversations with smoltcp.

/// One step of a conversation between probestack's application (`smol: false`) and
/// smoltcp's (`smol: true`).
#[derive(Clone, Copy, Debug)]
enum Talk {
    Write {
        smol: bool,
        len: usize,
    },
    Read {
        smol: bool,
        max: usize,
    },
    Wait {
        ms: u64,
    },
    Shutdown {
        smol: bool,
    },
    /// One side's application aborts the connection (a RST; smoltcp's `abort`).
    Abort {
        smol: bool,
    },
}

fn talk() -> impl Strategy<Value = Talk> {
    let len = prop_oneof![1..64usize, 64..4096usize, 4096..300_000usize];
    prop_oneof![
        4 => (any::<bool>(), len.clone()).prop_map(|(smol, len)| Talk::Write { smol, len }),
        4 => (any::<bool>(), len).prop_map(|(smol, max)| Talk::Read { smol, max }),
        3 => prop_oneof![Just(0u64), 1..50u64, 50..3000u64].prop_map(|ms| Talk::Wait { ms }),
        1 => any::<bool>().prop_map(|smol| Talk::Shutdown { smol }),
        1 => any::<bool>().prop_map(|smol| Talk::Abort { smol }),
    ]
}

/// A byte of the stream one side writes: probestack's is [`stream_byte`], smoltcp's its
/// complement, so that bytes crossing over would show.
fn talk_byte(smol: bool, offset: usize) -> u8 {
    if smol {
        !stream_byte(offset)
    } else {
        stream_byte(offset)
    }
}

/// The two applications' view of a conversation: per side (0 probestack, 1 smoltcp), what
/// its writes were taken for, what it read of the other's stream, whether it shut down
/// and whether it saw the other's end.
#[derive(Default)]
struct Talkers {
    written: [usize; 2],
    read: [usize; 2],
    shut: [bool; 2],
    ended: [bool; 2],
    /// What smoltcp's socket has taken and its application not yet read, and whether
    /// the end of the stream came after it. smoltcp's application drains the socket after
    /// every poll ([`Talkers::pull`]): a smoltcp socket whose close completes (TIME-WAIT
    /// over, or its LAST-ACK acknowledged) resets, unread data and all.
    smol_inbox: VecDeque<u8>,
    smol_end: bool,
    /// The side whose application aborted the connection; the other, the survivor, may
    /// then be told it is over (reset; timed out where the RST was lost), which `over`
    /// notes, and makes no more calls.
    aborted: Option<usize>,
    over: bool,
}

/// How long a conversation's data and close may take in virtual time: smoltcp's timer
/// backs off to a minute, and a lossy wire may need several.
const TALK_PATIENCE: Duration = Duration::from_secs(4 * 3600);

impl Talkers {
    /// Whether `side`'s application still makes calls (see [`Talkers::aborted`]).
    fn calls(&self, side: usize) -> bool {
        match self.aborted {
            None => true,
            Some(a) => a != side && !self.over,
        }
    }

    fn write(&mut self, w: &mut World, c: TcpHandle, smol: bool, len: usize) {
        let i = usize::from(smol);
        if !self.calls(i) {
            return;
        }
        let data: Vec<u8> = (0..len)
            .map(|k| talk_byte(smol, self.written[i] + k))
            .collect();
        let taken = if smol {
            match w.smol().send_slice(&data) {
                Ok(n) => n,
                // A socket the RST closed refuses writes.
                Err(_) if self.aborted.is_some() => {
                    self.over = true;
                    0
                }
                Err(e) => {
                    assert!(self.shut[1], "smoltcp write: {e:?}\n{}", w.report(c));
                    0
                }
            }
        } else {
            match w.ps.tcp_send(c, &data) {
                Ok(n) => n,
                Err(TcpError::WouldBlock) => 0,
                Err(TcpError::Shutdown) if self.shut[0] => 0,
                Err(e) if self.aborted.is_some() && ends_survivor(&e) => {
                    self.over = true;
                    0
                }
                Err(e) => panic!("probestack write: {e}\n{}", w.report(c)),
            }
        };
        assert!(
            taken == 0 || !self.shut[i],
            "a write after shutdown was taken"
        );
        self.written[i] += taken;
    }

    /// Reads up to `max` on one side; whether it got anything new.
    fn read(&mut self, w: &mut World, c: TcpHandle, smol: bool, max: usize) -> bool {
        let (i, from) = (usize::from(smol), usize::from(!smol));
        if !self.calls(i) {
            return false;
        }
        let mut buf = vec![0u8; max];
        let got = if smol {
            self.pull(w, c);
            let n = max.min(self.smol_inbox.len());
            for (b, x) in buf.iter_mut().zip(self.smol_inbox.drain(..n)) {
                *b = x;
            }
            (n > 0 || !self.smol_end).then_some(n)
        } else {
            match w.ps.tcp_recv(c, &mut buf) {
                Ok(0) => None,
                Ok(n) => Some(n),
                Err(TcpError::WouldBlock) => Some(0),
                Err(e) if self.aborted.is_some() && ends_survivor(&e) => {
                    self.over = true;
                    Some(0)
                }
                Err(e) => panic!("probestack read: {e}\n{}", w.report(c)),
            }
        };
        match got {
            Some(n) => {
                let at = self.read[i];
                assert!(at + n <= self.written[from], "read past the writes");
                let expected = (0..n).map(|k| talk_byte(!smol, at + k));
                assert!(
                    buf[..n].iter().copied().eq(expected),
                    "bytes at {at} are not the stream's ({} reading)\n{}",
                    if smol { "smoltcp" } else { "probestack" },
                    w.report(c)
                );
                self.read[i] += n;
                n > 0
            }
            None => {
                assert!(
                    self.shut[from] && self.read[i] == self.written[from],
                    "the end of the stream at {} of {} (shut down: {})\n{}",
                    self.read[i],
                    self.written[from],
                    self.shut[from],
                    w.report(c)
                );
                !std::mem::replace(&mut self.ended[i], true)
            }
        }
    }

    /// smoltcp's application takes everything its socket holds.
    fn pull(&mut self, w: &mut World, c: TcpHandle) {
        let mut buf = [0u8; 16 * 1024];
        while !self.smol_end && self.calls(1) {
            let socket = w.smol();
            match socket.recv_slice(&mut buf) {
                Ok(0) => break,
                Ok(n) => self.smol_inbox.extend(&buf[..n]),
                Err(smol::RecvError::Finished) => self.smol_end = true,
                // A socket reset by a completed close (from TIME-WAIT) says this.
                // Reset: probestack's application aborted.
                Err(smol::RecvError::InvalidState)
                    if socket.state() == smol::State::Closed && self.aborted == Some(0) =>
                {
                    self.over = true;
                }
                Err(smol::RecvError::InvalidState)
                    if socket.state() == smol::State::Closed && self.shut[1] =>
                {
                    self.smol_end = true;
                }
                Err(e) => panic!("smoltcp read: {e:?}\n{}", w.report(c)),
            }
        }
    }

    fn shutdown(&mut self, w: &mut World, c: TcpHandle, smol: bool) {
        let i = usize::from(smol);
        if self.calls(i) {
            if smol {
                w.smol().close();
            } else {
                match w.ps.tcp_shutdown(c) {
                    Err(e) if self.aborted.is_some() && ends_survivor(&e) => {
                        self.over = true;
                    }
                    r => r.unwrap(),
                }
            }
        }
        self.shut[i] = true;
    }

    /// `smol`'s application aborts the connection, unless one side did already.
    fn abort(&mut self, w: &mut World, c: TcpHandle, smol: bool) {
        if self.aborted.is_some() {
            return;
        }
        if smol {
            w.smol().abort();
        } else {
            w.ps.tcp_abort(c).unwrap();
        }
        self.aborted = Some(usize::from(smol));
    }

    /// Whether the conversation is over: both sides read to the end of the other's
    /// stream, or, after an abort, the survivor read to the end or was told it is over
    /// (on a lossy wire the RST may be lost and a survivor in FIN-WAIT-2, with nothing to
    /// send, waits for good).
    fn finished(&self, w: &mut World, c: TcpHandle, lossy: bool) -> bool {
        match self.aborted {
            None => self.ended == [true, true],
            Some(a) => {
                let waits = if a == 1 {
                    w.ps.tcp_state(c) == Ok(State::FinWait2)
                } else {
                    w.smol().state() == smol::State::FinWait2
                };
                self.over || self.ended[1 - a] || lossy && waits
            }
        }
    }
}

/// A conversation: probestack connects to smoltcp or smoltcp to probestack, the steps
/// run, both sides shut down and read to the end, probestack closes; each side must have
/// read exactly what the other's writes were taken for, and both connections must end.
fn converse_with_smoltcp(
    smol_connects: bool,
    smol_timestamps: bool,
    wire: FaultConfig,
    steps: &[Talk],
) {
    // probestack's TIME-WAIT outlasts smoltcp's longest retransmission timeout.
    let mut w = World::new(smol_timestamps, wire, Duration::from_secs(60));
    let c = if smol_connects {
        let (listener, c) = w.smol_connects(TALK_PATIENCE);
        w.ps.tcp_close(listener).unwrap();
        c
    } else {
        w.ps_connects(TALK_PATIENCE)
    };
    let mut t = Talkers::default();
    for &step in steps {
        match step {
            Talk::Write { smol, len } => t.write(&mut w, c, smol, len),
            Talk::Read { smol, max } => {
                t.read(&mut w, c, smol, max);
            }
            Talk::Wait { ms } => {
                w.run_until(Duration::from_millis(ms), |w| {
                    t.pull(w, c);
                    false
                });
            }
            Talk::Shutdown { smol } => {
                if !t.shut[usize::from(smol)] {
                    t.shutdown(&mut w, c, smol);
                }
            }
            Talk::Abort { smol } => t.abort(&mut w, c, smol),
        }
        w.settle();
        t.pull(&mut w, c);
    }
    for smol in [false, true] {
        if !t.shut[usize::from(smol)] {
            t.shutdown(&mut w, c, smol);
        }
    }
    let lossy = !loses_nothing(&wire);
    let ended = w.run_until(TALK_PATIENCE, |w| {
        for smol in [false, true] {
            while t.read(w, c, smol, 64 * 1024) {}
        }
        t.finished(w, c, lossy)
    });
    assert!(
        ended,
        "not ended: probestack read {} of {}, smoltcp {} of {}\n{}",
        t.read[0],
        t.written[1],
        t.read[1],
        t.written[0],
        w.report(c)
    );
    if t.aborted != Some(0) {
        w.ps.tcp_close(c).unwrap();
    }
    if t.aborted == Some(0) && w.smol().state() == smol::State::FinWait2 {
        // smoltcp has no FIN-WAIT-2 timer: its application ends what nothing will.
        w.smol().abort();
    }
    assert!(
        w.run_until(TALK_PATIENCE, |w| w.ps.tcp_connection_count() == 0
            && w.smol().state() == smol::State::Closed),
        "not closed: {}",
        w.report(c)
    );
    if !lossy && t.aborted.is_none() {
        no_resets(&w, c);
    }
}

proptest! {
    #![proptest_config(common::conversation::config(64))]

    /// Random conversations with smoltcp, either one connecting, smoltcp with timestamps
    /// or without, on a clean wire or one that loses, duplicates and reorders a few frames
    /// in a hundred (RSTs are then not counted: a late copy of a segment can rightly draw
    /// one at the end, see [`lossy_wire`]).
    #[test]
    fn any_conversation_with_smoltcp_delivers_both_streams(
        smol_connects in any::<bool>(),
        smol_timestamps in any::<bool>(),
        faults in proptest::option::of((0.0..0.03f64, 0.0..0.02f64, 0.0..0.02f64)),
        seed in any::<u64>(),
        steps in proptest::collection::vec(talk(), 0..40),
    ) {
        let (drop, duplicate, reorder) = faults.unwrap_or_default();
        let wire = FaultConfig { drop, duplicate, reorder, reorder_depth: 2, ..lossy_wire(seed) };
        converse_with_smoltcp(smol_connects, smol_timestamps, wire, &steps);
    }
}

/// The watch on the wire's find with smoltcp as the peer: probestack's segments carrying
/// a D-SACK block (smoltcp had resent data it already held) went over smoltcp's MSS of
/// 1,360 by the block's bytes (1,360 of data and 12 of options in the minimal case),
/// since the options taken out of a segment's data counted the
/// out-of-order ranges' blocks but not the D-SACK block before them
/// (`Connection::segment_data_max`). On a path whose MTU the MSS came from, such a
/// segment is too large for it.
#[test]
fn a_segment_with_a_dsack_block_keeps_to_the_peers_mss() {
    let wire = FaultConfig {
        drop: 0.018_647_620_764_798_28,
        duplicate: 0.012_870_345_221_296_466,
        reorder: 0.0,
        reorder_depth: 2,
        ..lossy_wire(11_581_039_979_097_819_518)
    };
    let steps = [
        Talk::Write {
            smol: false,
            len: 1,
        },
        Talk::Write {
            smol: false,
            len: 2721,
        },
        Talk::Wait { ms: 1 },
        Talk::Write {
            smol: true,
            len: 1361,
        },
        Talk::Write {
            smol: false,
            len: 13600,
        },
    ];
    converse_with_smoltcp(true, false, wire, &steps);
}
