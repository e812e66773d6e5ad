//! `probestack lab peers`: probestack beside other stacks on the same UDP workloads.
//!
//! The systems:
//!
//! - **probestack** with `Tuning::fast()` and with `Tuning::bsd()`: two stacks in one
//!   process on one thread, joined by the memory link ([`probestack::sim::Pair`]), polled
//!   with a [`RealClock`];
//! - **smoltcp 0.14**: two `Interface`s in one process on one thread, joined by [`Link`], a
//!   pair of frame queues written here (Ethernet, MTU 1500, checksums computed and verified
//!   by smoltcp as its default capabilities ask), at 198.18.0.1/15 and 198.18.0.2/15;
//! - **the Linux kernel**: two `std::net::UdpSocket`s on 127.0.0.1, non-blocking, driven in
//!   the same shape (the kernel needs no polling; each send and receive is a system call).
//!
//! The workloads:
//!
//! - **one way**, 64- and 512-byte datagrams: A sends a burst of [`BURST`], both ends are
//!   polled, B receives everything queued; only datagrams that arrive whole and unchanged
//!   count. Datagrams per second and ns per datagram.
//! - **request/response**, 64 bytes: A sends, B echoes, A receives and checks the reply,
//!   one at a time; the round-trip time, median and p99.
//!
//! Each figure is the median over several runs after a warm-up run; within a round every
//! system runs once, in turn (the starting system rotating from round to round), so a slow
//! spell of the machine hits all alike. Every run builds its systems afresh and warms them
//! (ARP, caches, pools) before it starts timing.
//!
//! TCP joins when probestack has TCP.

use std::collections::VecDeque;
use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::time::Instant as WallInstant;

use probestack::sim::{HostConfig, Pair, ADDR_B};
use probestack::socket::udp::{UdpError, UdpHandle};
use probestack::time::{Clock, Instant, RealClock};
use probestack::tuning::Tuning;
use serde::Serialize;
use smoltcp::iface::{Config as SmolConfig, Interface, SocketHandle, SocketSet};
use smoltcp::phy::{Device, DeviceCapabilities, Medium, RxToken, TxToken};
use smoltcp::socket::udp as smol_udp;
use smoltcp::wire::{EthernetAddress, HardwareAddress, IpAddress, IpCidr, IpEndpoint};

use crate::bench::median;
use crate::table::Table;

/// Datagrams A sends before the ends are polled, in the one-way workload.
pub const BURST: usize = 32;
/// The request/response size.
pub const RR_SIZE: usize = 64;
/// The one-way sizes.
pub const ONE_WAY_SIZES: [usize; 2] = [64, 512];
/// B's UDP port (the discard/echo side).
const PORT_B: u16 = 9;
/// A's UDP port on smoltcp (probestack and the kernel pick an ephemeral one).
const PORT_A: u16 = 49152;
/// A request/response that takes longer than this is an error.
const RR_TIMEOUT_NS: u64 = 1_000_000_000;

/// The systems compared, in table order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum System {
    ProbestackFast,
    ProbestackBsd,
    Smoltcp,
    LinuxLoopback,
}

pub const SYSTEMS: [System; 4] = [
    System::ProbestackFast,
    System::ProbestackBsd,
    System::Smoltcp,
    System::LinuxLoopback,
];

impl System {
    /// The name in the JSON.
    pub fn name(self) -> &'static str {
        match self {
            System::ProbestackFast => "probestack_fast",
            System::ProbestackBsd => "probestack_bsd",
            System::Smoltcp => "smoltcp",
            System::LinuxLoopback => "linux_loopback",
        }
    }

    /// The name in the tables.
    fn label(self) -> &'static str {
        match self {
            System::ProbestackFast => "probestack fast",
            System::ProbestackBsd => "probestack bsd",
            System::Smoltcp => "smoltcp 0.14",
            System::LinuxLoopback => "Linux loopback",
        }
    }
}

/// How long to measure.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// Runs whose median is reported (after one warm-up run).
    pub runs: usize,
    /// Wall time of one timed run of one system, in milliseconds.
    pub millis: u64,
}

impl Settings {
    pub const QUICK: Settings = Settings {
        runs: 5,
        millis: 40,
    };
    pub const FULL: Settings = Settings {
        runs: 7,
        millis: 200,
    };
}

// ---------------------------------------------------------------------------------------
// The two ends, as each system offers them.

/// Host A and host B of one system, both driven by the caller on one thread.
trait Peers {
    /// A sends `data` to B; false when the system has no room for it now.
    fn send_a(&mut self, data: &[u8]) -> Result<bool, String>;
    /// Lets A's stack do its work (receive frames, transmit queued ones).
    fn poll_a(&mut self, now: Instant);
    fn poll_b(&mut self, now: Instant);
    /// B receives one datagram into `buf`: its length, or `None` when nothing is queued.
    fn recv_b(&mut self, buf: &mut [u8]) -> Result<Option<usize>, String>;
    /// B receives one datagram and sends it back to its sender; false when nothing is
    /// queued.
    fn echo_b(&mut self, buf: &mut [u8]) -> Result<bool, String>;
    /// A receives one datagram.
    fn recv_a(&mut self, buf: &mut [u8]) -> Result<Option<usize>, String>;
}

/// Two probestack stacks on the memory link.
struct StackPeers {
    pair: Pair,
    a: UdpHandle,
    b: UdpHandle,
}

impl StackPeers {
    fn new(tuning: Tuning) -> Result<StackPeers, String> {
        let mut host = HostConfig::with_mtu(1500);
        host.stack.tuning = tuning;
        let mut pair =
            Pair::new(host.clone(), host).map_err(|e| format!("probestack memory link: {e:?}"))?;
        let b = pair.b.udp_open();
        pair.b
            .udp_bind(b, probestack::wire::Ipv4Address::UNSPECIFIED, PORT_B)
            .map_err(|e| format!("probestack bind: {e}"))?;
        let a = pair.a.udp_open();
        Ok(StackPeers { pair, a, b })
    }
}

fn stack_recv(
    r: Result<probestack::socket::udp::UdpRecv, UdpError>,
) -> Result<Option<usize>, String> {
    match r {
        Ok(r) if r.truncated => Ok(Some(0)),
        Ok(r) => Ok(Some(r.len)),
        Err(UdpError::WouldBlock) => Ok(None),
        Err(e) => Err(format!("probestack receive: {e}")),
    }
}

impl Peers for StackPeers {
    fn send_a(&mut self, data: &[u8]) -> Result<bool, String> {
        self.pair
            .a
            .udp_send_to(self.a, data, ADDR_B, PORT_B)
            .map(|_| true)
            .map_err(|e| format!("probestack send: {e}"))
    }

    fn poll_a(&mut self, now: Instant) {
        self.pair.a.poll(now);
    }

    fn poll_b(&mut self, now: Instant) {
        self.pair.b.poll(now);
    }

    fn recv_b(&mut self, buf: &mut [u8]) -> Result<Option<usize>, String> {
        stack_recv(self.pair.b.udp_recv_from(self.b, buf))
    }

    fn echo_b(&mut self, buf: &mut [u8]) -> Result<bool, String> {
        match self.pair.b.udp_recv_from(self.b, buf) {
            Ok(r) => {
                self.pair
                    .b
                    .udp_send_to(self.b, &buf[..r.len], r.from.0, r.from.1)
                    .map_err(|e| format!("probestack reply: {e}"))?;
                Ok(true)
            }
            Err(UdpError::WouldBlock) => Ok(false),
            Err(e) => Err(format!("probestack receive: {e}")),
        }
    }

    fn recv_a(&mut self, buf: &mut [u8]) -> Result<Option<usize>, String> {
        stack_recv(self.pair.a.udp_recv_from(self.a, buf))
    }
}

/// Frames a [`Link`] holds per direction before transmit says "no room" (as the memory
/// link's default queues).
const LINK_DEPTH: usize = 256;
/// smoltcp's Ethernet MTU counts the 14-byte header: IP MTU 1500.
const SMOL_ETHERNET_MTU: usize = 1500 + 14;

/// One direction of a [`Link`]: frames in flight, and spent frame buffers for reuse (so the
/// link allocates nothing once warm, as the memory link's pool does not).
#[derive(Default)]
struct Lane {
    frames: VecDeque<Vec<u8>>,
    spare: Vec<Vec<u8>>,
}

/// A wire between two smoltcp interfaces: a queue of frames each way.
#[derive(Default)]
struct Link {
    a_to_b: Lane,
    b_to_a: Lane,
}

impl Link {
    fn port_a(&mut self) -> Port<'_> {
        Port {
            rx: &mut self.b_to_a,
            tx: &mut self.a_to_b,
        }
    }

    fn port_b(&mut self) -> Port<'_> {
        Port {
            rx: &mut self.a_to_b,
            tx: &mut self.b_to_a,
        }
    }
}

/// One end of a [`Link`], as a smoltcp device.
struct Port<'l> {
    rx: &'l mut Lane,
    tx: &'l mut Lane,
}

/// A received frame; its buffer goes back to the lane's spares once read.
struct FrameIn<'a> {
    frame: Vec<u8>,
    spare: &'a mut Vec<Vec<u8>>,
}

/// Room for one frame to send.
struct FrameOut<'a> {
    lane: &'a mut Lane,
}

impl RxToken for FrameIn<'_> {
    fn consume<R, F>(self, f: F) -> R
    where
        F: FnOnce(&[u8]) -> R,
    {
        let r = f(&self.frame);
        self.spare.push(self.frame);
        r
    }
}

impl TxToken for FrameOut<'_> {
    fn consume<R, F>(self, len: usize, f: F) -> R
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        let mut frame = self.lane.spare.pop().unwrap_or_default();
        frame.clear();
        frame.resize(len, 0);
        let r = f(&mut frame);
        self.lane.frames.push_back(frame);
        r
    }
}

impl Device for Port<'_> {
    type RxToken<'a>
        = FrameIn<'a>
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
        let frame = self.rx.frames.pop_front()?;
        Some((
            FrameIn {
                frame,
                spare: &mut self.rx.spare,
            },
            FrameOut { lane: self.tx },
        ))
    }

    fn transmit(&mut self, _timestamp: smoltcp::time::Instant) -> Option<Self::TxToken<'_>> {
        if self.tx.frames.len() >= LINK_DEPTH {
            return None;
        }
        Some(FrameOut { lane: self.tx })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        // Checksum capabilities stay at the default: smoltcp computes every checksum on
        // send and verifies it on receive.
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ethernet;
        caps.max_transmission_unit = SMOL_ETHERNET_MTU;
        caps
    }
}

/// Two smoltcp interfaces on a [`Link`].
struct SmolPeers {
    link: Link,
    a: Interface,
    b: Interface,
    sockets_a: SocketSet<'static>,
    sockets_b: SocketSet<'static>,
    socket_a: SocketHandle,
    socket_b: SocketHandle,
}

const SMOL_ADDR_A: IpAddress = IpAddress::v4(198, 18, 0, 1);
const SMOL_ADDR_B: IpAddress = IpAddress::v4(198, 18, 0, 2);

fn smol_now(now: Instant) -> smoltcp::time::Instant {
    smoltcp::time::Instant::from_micros(i64::try_from(now.as_micros()).unwrap_or(i64::MAX))
}

impl SmolPeers {
    fn new(now: Instant) -> Result<SmolPeers, String> {
        let mut link = Link::default();
        let iface = |port: &mut Port<'_>, mac: u8, addr: IpAddress| -> Result<Interface, String> {
            let mut config = SmolConfig::new(HardwareAddress::Ethernet(EthernetAddress([
                2, 0, 0, 0, 0, mac,
            ])));
            config.random_seed = u64::from(mac);
            let mut iface = Interface::new(config, port, smol_now(now));
            let mut pushed = false;
            iface.update_ip_addrs(|addrs| pushed = addrs.push(IpCidr::new(addr, 15)).is_ok());
            if pushed {
                Ok(iface)
            } else {
                Err("smoltcp: cannot add the interface's address".into())
            }
        };
        let a = iface(&mut link.port_a(), 1, SMOL_ADDR_A)?;
        let b = iface(&mut link.port_b(), 2, SMOL_ADDR_B)?;
        // Room for many bursts each way: 256 datagrams, 256 KiB (probestack's default
        // receive limit).
        let socket = || {
            let buffer = || {
                smol_udp::PacketBuffer::new(
                    vec![smol_udp::PacketMetadata::EMPTY; 256],
                    vec![0u8; 256 * 1024],
                )
            };
            smol_udp::Socket::new(buffer(), buffer())
        };
        let mut sa = socket();
        sa.bind(IpEndpoint::new(SMOL_ADDR_A, PORT_A))
            .map_err(|e| format!("smoltcp bind: {e}"))?;
        let mut sb = socket();
        sb.bind(IpEndpoint::new(SMOL_ADDR_B, PORT_B))
            .map_err(|e| format!("smoltcp bind: {e}"))?;
        let mut sockets_a = SocketSet::new(Vec::new());
        let socket_a = sockets_a.add(sa);
        let mut sockets_b = SocketSet::new(Vec::new());
        let socket_b = sockets_b.add(sb);
        Ok(SmolPeers {
            link,
            a,
            b,
            sockets_a,
            sockets_b,
            socket_a,
            socket_b,
        })
    }
}

fn smol_recv(
    r: Result<(usize, smol_udp::UdpMetadata), smol_udp::RecvError>,
) -> Result<Option<usize>, String> {
    match r {
        Ok((n, _)) => Ok(Some(n)),
        Err(smol_udp::RecvError::Exhausted) => Ok(None),
        // Dropped by smoltcp: received, but not whole.
        Err(smol_udp::RecvError::Truncated) => Ok(Some(0)),
    }
}

impl Peers for SmolPeers {
    fn send_a(&mut self, data: &[u8]) -> Result<bool, String> {
        self.sockets_a
            .get_mut::<smol_udp::Socket>(self.socket_a)
            .send_slice(data, IpEndpoint::new(SMOL_ADDR_B, PORT_B))
            .map(|()| true)
            .map_err(|e| format!("smoltcp send: {e}"))
    }

    fn poll_a(&mut self, now: Instant) {
        let mut port = self.link.port_a();
        self.a.poll(smol_now(now), &mut port, &mut self.sockets_a);
    }

    fn poll_b(&mut self, now: Instant) {
        let mut port = self.link.port_b();
        self.b.poll(smol_now(now), &mut port, &mut self.sockets_b);
    }

    fn recv_b(&mut self, buf: &mut [u8]) -> Result<Option<usize>, String> {
        smol_recv(
            self.sockets_b
                .get_mut::<smol_udp::Socket>(self.socket_b)
                .recv_slice(buf),
        )
    }

    fn echo_b(&mut self, buf: &mut [u8]) -> Result<bool, String> {
        let socket = self.sockets_b.get_mut::<smol_udp::Socket>(self.socket_b);
        match socket.recv_slice(buf) {
            Ok((n, meta)) => {
                socket
                    .send_slice(&buf[..n], meta.endpoint)
                    .map_err(|e| format!("smoltcp reply: {e}"))?;
                Ok(true)
            }
            Err(smol_udp::RecvError::Exhausted) => Ok(false),
            Err(e) => Err(format!("smoltcp receive: {e}")),
        }
    }

    fn recv_a(&mut self, buf: &mut [u8]) -> Result<Option<usize>, String> {
        smol_recv(
            self.sockets_a
                .get_mut::<smol_udp::Socket>(self.socket_a)
                .recv_slice(buf),
        )
    }
}

/// Two kernel UDP sockets on 127.0.0.1, non-blocking.
struct KernelPeers {
    a: UdpSocket,
    b: UdpSocket,
    addr_b: SocketAddr,
}

impl KernelPeers {
    fn new() -> Result<KernelPeers, String> {
        let open = || -> Result<UdpSocket, String> {
            let s = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))
                .map_err(|e| format!("cannot open a UDP socket on 127.0.0.1: {e}"))?;
            s.set_nonblocking(true)
                .map_err(|e| format!("cannot make a UDP socket non-blocking: {e}"))?;
            Ok(s)
        };
        let a = open()?;
        let b = open()?;
        let addr_b = b
            .local_addr()
            .map_err(|e| format!("the loopback socket has no address: {e}"))?;
        Ok(KernelPeers { a, b, addr_b })
    }
}

fn kernel_recv(r: std::io::Result<(usize, SocketAddr)>) -> Result<Option<usize>, String> {
    match r {
        Ok((n, _)) => Ok(Some(n)),
        Err(e) if e.kind() == ErrorKind::WouldBlock => Ok(None),
        Err(e) => Err(format!("recvfrom on 127.0.0.1: {e}")),
    }
}

impl Peers for KernelPeers {
    fn send_a(&mut self, data: &[u8]) -> Result<bool, String> {
        match self.a.send_to(data, self.addr_b) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == ErrorKind::WouldBlock => Ok(false),
            Err(e) => Err(format!("sendto on 127.0.0.1: {e}")),
        }
    }

    /// The kernel does its work inside the system calls.
    fn poll_a(&mut self, _now: Instant) {}

    fn poll_b(&mut self, _now: Instant) {}

    fn recv_b(&mut self, buf: &mut [u8]) -> Result<Option<usize>, String> {
        kernel_recv(self.b.recv_from(buf))
    }

    fn echo_b(&mut self, buf: &mut [u8]) -> Result<bool, String> {
        match self.b.recv_from(buf) {
            Ok((n, from)) => loop {
                match self.b.send_to(&buf[..n], from) {
                    Ok(_) => return Ok(true),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => continue,
                    Err(e) => return Err(format!("sendto on 127.0.0.1: {e}")),
                }
            },
            Err(e) if e.kind() == ErrorKind::WouldBlock => Ok(false),
            Err(e) => Err(format!("recvfrom on 127.0.0.1: {e}")),
        }
    }

    fn recv_a(&mut self, buf: &mut [u8]) -> Result<Option<usize>, String> {
        kernel_recv(self.a.recv_from(buf))
    }
}

// ---------------------------------------------------------------------------------------
// The workloads, generic over the system.

/// One timed run of the one-way workload.
#[derive(Clone, Copy, Debug)]
pub struct OneWayRun {
    /// Datagrams the system accepted from A.
    pub sent: u64,
    /// Datagrams B received whole and unchanged.
    pub intact: u64,
    pub seconds: f64,
}

impl OneWayRun {
    pub fn rate(&self) -> f64 {
        self.intact as f64 / self.seconds
    }
}

/// A datagram of `size` bytes whose first 8 bytes will carry a sequence number.
fn template(size: usize) -> Vec<u8> {
    (0..size)
        .map(|i| (i as u8).wrapping_mul(31) ^ 0xA5)
        .collect()
}

fn stamp(data: &mut [u8], seq: u64) {
    let n = data.len().min(8);
    data[..n].copy_from_slice(&seq.to_le_bytes()[..n]);
}

/// One burst: A sends [`BURST`] datagrams, both ends are polled, B takes everything
/// queued. Returns (sent, intact).
fn burst<P: Peers>(
    p: &mut P,
    clock: &RealClock,
    data: &mut [u8],
    seq: &mut u64,
    buf: &mut [u8],
) -> Result<(u64, u64), String> {
    let mut sent = 0;
    for _ in 0..BURST {
        *seq += 1;
        stamp(data, *seq);
        if p.send_a(data)? {
            sent += 1;
        }
    }
    let now = clock.now();
    p.poll_a(now);
    p.poll_b(now);
    let mut intact = 0;
    let head = data.len().min(8);
    while let Some(n) = p.recv_b(buf)? {
        if n == data.len() && buf[head..n] == data[head..] {
            intact += 1;
        }
    }
    Ok((sent, intact))
}

fn one_way_on<P: Peers>(p: &mut P, size: usize, millis: u64) -> Result<OneWayRun, String> {
    let clock = RealClock::new();
    let mut data = template(size);
    let mut buf = vec![0u8; 2048];
    let mut seq = 0;
    // Warm up (ARP, caches, pools), then drain what is still on its way.
    for _ in 0..100 {
        burst(p, &clock, &mut data, &mut seq, &mut buf)?;
    }
    for _ in 0..4 {
        let now = clock.now();
        p.poll_a(now);
        p.poll_b(now);
        while p.recv_b(&mut buf)?.is_some() {}
    }
    let start = WallInstant::now();
    let (mut sent, mut intact) = (0u64, 0u64);
    while start.elapsed().as_millis() < u128::from(millis) {
        let (s, i) = burst(p, &clock, &mut data, &mut seq, &mut buf)?;
        sent += s;
        intact += i;
    }
    let seconds = start.elapsed().as_secs_f64();
    if sent == 0 {
        return Err("no datagram could be sent".into());
    }
    Ok(OneWayRun {
        sent,
        intact,
        seconds,
    })
}

/// One request/response: its round-trip time in ns, the reply checked against the request.
fn round_trip<P: Peers>(
    p: &mut P,
    clock: &RealClock,
    req: &mut [u8],
    seq: u64,
    buf_a: &mut [u8],
    buf_b: &mut [u8],
) -> Result<u64, String> {
    stamp(req, seq);
    let t0 = clock.now();
    while !p.send_a(req)? {
        if clock.now().saturating_since(t0).as_nanos() > RR_TIMEOUT_NS {
            return Err("no room to send a request for 1 s".into());
        }
    }
    let mut now = t0;
    let mut answered = false;
    loop {
        p.poll_a(now);
        p.poll_b(now);
        if !answered && p.echo_b(buf_b)? {
            answered = true;
            p.poll_b(now);
            p.poll_a(now);
        }
        if let Some(n) = p.recv_a(buf_a)? {
            let t1 = clock.now();
            if buf_a[..n] != *req {
                return Err(format!("request {seq}: the reply differs from the request"));
            }
            return Ok(t1.saturating_since(t0).as_nanos());
        }
        now = clock.now();
        if now.saturating_since(t0).as_nanos() > RR_TIMEOUT_NS {
            return Err(format!("request {seq}: no reply within 1 s"));
        }
    }
}

/// One timed run of request/response: every round-trip time, in ns.
fn rr_on<P: Peers>(p: &mut P, size: usize, millis: u64) -> Result<Vec<f64>, String> {
    let clock = RealClock::new();
    let mut req = template(size);
    let mut buf_a = vec![0u8; 2048];
    let mut buf_b = vec![0u8; 2048];
    let mut seq = 0;
    for _ in 0..200 {
        seq += 1;
        round_trip(p, &clock, &mut req, seq, &mut buf_a, &mut buf_b)?;
    }
    let mut rtts = Vec::new();
    let start = WallInstant::now();
    while start.elapsed().as_millis() < u128::from(millis) {
        seq += 1;
        let ns = round_trip(p, &clock, &mut req, seq, &mut buf_a, &mut buf_b)?;
        rtts.push(ns as f64);
    }
    if rtts.is_empty() {
        return Err("no round trip completed".into());
    }
    Ok(rtts)
}

/// One run of the one-way workload on `system`, built afresh.
pub fn one_way(system: System, size: usize, millis: u64) -> Result<OneWayRun, String> {
    match system {
        System::ProbestackFast => one_way_on(&mut StackPeers::new(Tuning::fast())?, size, millis),
        System::ProbestackBsd => one_way_on(&mut StackPeers::new(Tuning::bsd())?, size, millis),
        System::Smoltcp => one_way_on(&mut SmolPeers::new(RealClock::new().now())?, size, millis),
        System::LinuxLoopback => one_way_on(&mut KernelPeers::new()?, size, millis),
    }
}

/// One run of request/response on `system`, built afresh: the round-trip times in ns.
pub fn request_response(system: System, size: usize, millis: u64) -> Result<Vec<f64>, String> {
    match system {
        System::ProbestackFast => rr_on(&mut StackPeers::new(Tuning::fast())?, size, millis),
        System::ProbestackBsd => rr_on(&mut StackPeers::new(Tuning::bsd())?, size, millis),
        System::Smoltcp => rr_on(&mut SmolPeers::new(RealClock::new().now())?, size, millis),
        System::LinuxLoopback => rr_on(&mut KernelPeers::new()?, size, millis),
    }
}

/// The `q` quantile (0 to 1) of sorted `xs`, nearest rank.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

// ---------------------------------------------------------------------------------------
// The experiment.

/// One figure of one system.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// `udp_one_way_64`, `udp_one_way_512`, `udp_rr_64_median`, `udp_rr_64_p99`.
    pub workload: String,
    /// `probestack_fast`, `probestack_bsd`, `smoltcp`, `linux_loopback`.
    pub system: &'static str,
    /// The median over the runs.
    pub value: f64,
    /// `datagrams/s` or `ns`.
    pub unit: &'static str,
    pub higher_is_better: bool,
    /// probestack fast against this system, oriented so that above 1 means probestack fast
    /// is better: fast / system for rates, system / fast for latencies.
    pub ratio_vs_probestack: f64,
    /// The smallest and largest per-run figures.
    pub run_min: f64,
    pub run_max: f64,
    /// One way only: 1e9 / value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ns_per_datagram: Option<f64>,
    /// One way only: datagrams received intact / datagrams sent, over all runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delivered_fraction: Option<f64>,
}

/// A system left out of a workload, and why.
#[derive(Clone, Debug, Serialize)]
pub struct Skipped {
    pub workload: String,
    pub system: &'static str,
    pub reason: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct Results {
    pub experiment: &'static str,
    pub runs: usize,
    pub millis_per_run: u64,
    pub burst: usize,
    /// What is and is not comparable.
    pub note: String,
    pub skipped: Vec<Skipped>,
    pub rows: Vec<Row>,
}

pub const NOTE: &str = "probestack and smoltcp run both hosts in this process on one thread \
    and make no system calls: a figure is both ends' protocol processing plus the polling \
    loop, over an in-memory link. The kernel's figures include a system call per send and \
    per receive (and one empty receive per burst or spin) and the loopback device, with \
    both sockets in this thread. So probestack against smoltcp compares stacks; against \
    Linux it compares a library stack with the kernel's whole path, not protocol code alone. \
    Also: probestack fast elides the UDP checksum on its one-hop CRC link (bsd and smoltcp \
    compute and verify it; on loopback Linux leaves it to the device's checksum offload, \
    so it is neither computed nor verified); probestack's memory link computes and checks a CRC-32 per frame, the \
    smoltcp link here does not; probestack's ledger samples 1 message in 64 (its default).";

/// Per-run figures of one system in one workload; `None` once it has failed.
struct Series {
    values: Vec<f64>,
    sent: u64,
    intact: u64,
    error: Option<String>,
}

impl Series {
    fn new() -> Series {
        Series {
            values: Vec::new(),
            sent: 0,
            intact: 0,
            error: None,
        }
    }
}

/// Runs `measure` for every system, round-robin, one warm-up round and `runs` rounds.
/// Errors of probestack or smoltcp end the experiment; the kernel's leave it out.
fn rounds<T>(
    runs: usize,
    mut measure: impl FnMut(System) -> Result<T, String>,
    mut keep: impl FnMut(&mut Series, T),
    mut progress: impl FnMut(usize),
) -> Result<Vec<Series>, String> {
    let mut series: Vec<Series> = SYSTEMS.iter().map(|_| Series::new()).collect();
    for round in 0..=runs {
        progress(round);
        for k in 0..SYSTEMS.len() {
            let i = (round + k) % SYSTEMS.len();
            let system = SYSTEMS[i];
            if series[i].error.is_some() {
                continue;
            }
            match measure(system) {
                Ok(x) if round > 0 => keep(&mut series[i], x),
                Ok(_) => {}
                Err(e) if system == System::LinuxLoopback => series[i].error = Some(e),
                Err(e) => return Err(format!("{}: {e}", system.name())),
            }
        }
    }
    Ok(series)
}

/// Runs every workload on every system.
pub fn run(settings: Settings, mut progress: impl FnMut(&str)) -> Result<Results, String> {
    let runs = settings.runs.max(1);
    let millis = settings.millis.max(1);
    let mut rows = Vec::new();
    let mut skipped = Vec::new();
    let mut emit = |workload: String,
                    series: &mut [Series],
                    unit: &'static str,
                    higher_is_better: bool,
                    per_datagram: bool,
                    rows: &mut Vec<Row>| {
        let fast = median(&mut series[0].values.clone());
        for (i, s) in series.iter_mut().enumerate() {
            let system = SYSTEMS[i];
            if let Some(e) = &s.error {
                skipped.push(Skipped {
                    workload: workload.clone(),
                    system: system.name(),
                    reason: e.clone(),
                });
                continue;
            }
            let run_min = s.values.iter().copied().fold(f64::INFINITY, f64::min);
            let run_max = s.values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let value = median(&mut s.values);
            let ratio = if higher_is_better {
                fast / value
            } else {
                value / fast
            };
            rows.push(Row {
                workload: workload.clone(),
                system: system.name(),
                value,
                unit,
                higher_is_better,
                ratio_vs_probestack: if i == 0 { 1.0 } else { ratio },
                run_min,
                run_max,
                ns_per_datagram: per_datagram.then(|| 1e9 / value),
                delivered_fraction: per_datagram.then(|| s.intact as f64 / s.sent.max(1) as f64),
            });
        }
    };

    for size in ONE_WAY_SIZES {
        let name = format!("udp_one_way_{size}");
        let mut series = rounds(
            runs,
            |system| one_way(system, size, millis),
            |s, r| {
                s.values.push(r.rate());
                s.sent += r.sent;
                s.intact += r.intact;
            },
            |round| progress(&format!("{name}: round {round} of {runs}")),
        )?;
        for (i, s) in series.iter_mut().enumerate() {
            if s.error.is_none() && s.values.iter().any(|v| *v <= 0.0) {
                let e = "a run delivered no datagram intact".to_string();
                if SYSTEMS[i] == System::LinuxLoopback {
                    s.error = Some(e);
                } else {
                    return Err(format!("{name}, {}: {e}", SYSTEMS[i].name()));
                }
            }
        }
        emit(name, &mut series, "datagrams/s", true, true, &mut rows);
    }

    let name = format!("udp_rr_{RR_SIZE}");
    let mut p99s: Vec<Vec<f64>> = vec![Vec::new(); SYSTEMS.len()];
    let mut medians = rounds(
        runs,
        |system| {
            let mut rtts = request_response(system, RR_SIZE, millis)?;
            rtts.sort_by(|a, b| a.total_cmp(b));
            Ok((system, quantile(&rtts, 0.5), quantile(&rtts, 0.99)))
        },
        |s, (system, m, p)| {
            s.values.push(m);
            if let Some(i) = SYSTEMS.iter().position(|x| *x == system) {
                p99s[i].push(p);
            }
        },
        |round| progress(&format!("{name}: round {round} of {runs}")),
    )?;
    let mut tails: Vec<Series> = medians
        .iter()
        .zip(p99s)
        .map(|(m, values)| Series {
            values,
            sent: 0,
            intact: 0,
            error: m.error.clone(),
        })
        .collect();
    emit(
        format!("{name}_median"),
        &mut medians,
        "ns",
        false,
        false,
        &mut rows,
    );
    emit(
        format!("{name}_p99"),
        &mut tails,
        "ns",
        false,
        false,
        &mut rows,
    );

    Ok(Results {
        experiment: "peers",
        runs,
        millis_per_run: millis,
        burst: BURST,
        note: NOTE.to_string(),
        skipped,
        rows,
    })
}

fn find<'r>(r: &'r Results, workload: &str, system: System) -> Option<&'r Row> {
    r.rows
        .iter()
        .find(|x| x.workload == workload && x.system == system.name())
}

fn skip_notes(t: &mut Table, r: &Results, workloads: &[&str]) {
    for s in r
        .skipped
        .iter()
        .filter(|s| workloads.contains(&s.workload.as_str()))
    {
        t.note(format!("{}: not measured: {}", s.system, s.reason));
    }
}

pub fn tables(r: &Results) -> Vec<Table> {
    let mut out = Vec::new();
    let rounds_note = format!(
        "median of {} runs of {} ms each after a warm-up run, systems measured round-robin; \
         ratio = probestack fast / system, above 1 means probestack fast is better",
        r.runs, r.millis_per_run
    );
    for size in ONE_WAY_SIZES {
        let w = format!("udp_one_way_{size}");
        let mut t = Table::new(
            format!(
                "UDP one way, {size}-byte datagrams (bursts of {}, both ends on one thread)",
                r.burst
            ),
            &[
                "system",
                "datagrams/s",
                "ns/datagram",
                "runs (M/s)",
                "delivered",
                "fast / system",
            ],
        );
        for system in SYSTEMS {
            if let Some(x) = find(r, &w, system) {
                t.row(vec![
                    system.label().to_string(),
                    format!("{:.2} M", x.value / 1e6),
                    format!("{:.0}", x.ns_per_datagram.unwrap_or(0.0)),
                    format!("{:.2}-{:.2}", x.run_min / 1e6, x.run_max / 1e6),
                    format!("{:.1}%", 100.0 * x.delivered_fraction.unwrap_or(0.0)),
                    format!("{:.2}", x.ratio_vs_probestack),
                ]);
            }
        }
        t.note(rounds_note.clone());
        skip_notes(&mut t, r, &[w.as_str()]);
        out.push(t);
    }
    let wm = format!("udp_rr_{RR_SIZE}_median");
    let wp = format!("udp_rr_{RR_SIZE}_p99");
    let mut t = Table::new(
        format!("UDP request/response, {RR_SIZE} bytes, one at a time: round-trip time"),
        &[
            "system",
            "median",
            "p99",
            "runs (median)",
            "system / fast (median)",
            "system / fast (p99)",
        ],
    );
    for system in SYSTEMS {
        if let (Some(m), Some(p)) = (find(r, &wm, system), find(r, &wp, system)) {
            t.row(vec![
                system.label().to_string(),
                format!("{:.2} µs", m.value / 1e3),
                format!("{:.2} µs", p.value / 1e3),
                format!("{:.2}-{:.2} µs", m.run_min / 1e3, m.run_max / 1e3),
                format!("{:.2}", m.ratio_vs_probestack),
                format!("{:.2}", p.ratio_vs_probestack),
            ]);
        }
    }
    t.note(format!(
        "{rounds_note}; p99 is the median of the runs' 99th percentiles"
    ));
    skip_notes(&mut t, r, &[wm.as_str(), wp.as_str()]);
    t.note(NOTE);
    out.push(t);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The workload names the JSON promises, in order.
    fn workload_names() -> Vec<String> {
        let mut names: Vec<String> = ONE_WAY_SIZES
            .iter()
            .map(|s| format!("udp_one_way_{s}"))
            .collect();
        names.push(format!("udp_rr_{RR_SIZE}_median"));
        names.push(format!("udp_rr_{RR_SIZE}_p99"));
        names
    }

    const IN_PROCESS: [System; 3] = [
        System::ProbestackFast,
        System::ProbestackBsd,
        System::Smoltcp,
    ];

    #[test]
    fn peers_tiny_run_gives_every_row_with_positive_values() {
        let r = run(Settings { runs: 5, millis: 3 }, |_| {}).unwrap();
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["experiment"], "peers");
        let rows = json["rows"].as_array().unwrap();
        for w in workload_names() {
            for system in SYSTEMS {
                let skipped = r
                    .skipped
                    .iter()
                    .any(|s| s.workload == w && s.system == system.name());
                let row = rows
                    .iter()
                    .find(|x| x["workload"] == w.as_str() && x["system"] == system.name());
                if system == System::LinuxLoopback && skipped {
                    assert!(row.is_none(), "{w}: a skipped system has no row");
                    continue;
                }
                let row = row.unwrap_or_else(|| panic!("no row for {w}, {}", system.name()));
                let value = row["value"].as_f64().unwrap();
                assert!(value > 0.0 && value.is_finite(), "{w} {}", system.name());
                let ratio = row["ratio_vs_probestack"].as_f64().unwrap();
                assert!(ratio > 0.0 && ratio.is_finite(), "{w} {}", system.name());
                assert!(row["unit"].is_string());
                assert!(row["higher_is_better"].is_boolean());
                if system == System::ProbestackFast {
                    assert_eq!(ratio, 1.0);
                }
            }
        }
        assert!(!tables(&r).is_empty());
    }

    #[test]
    fn peers_in_process_datagrams_arrive_intact() {
        for system in IN_PROCESS {
            for size in ONE_WAY_SIZES {
                let run = one_way(system, size, 5).unwrap();
                assert!(run.sent > 0, "{}", system.name());
                assert_eq!(run.intact, run.sent, "{} at {size} bytes", system.name());
            }
            // Every reply is compared with its request inside the run.
            let rtts = request_response(system, RR_SIZE, 5).unwrap();
            assert!(rtts.iter().all(|x| *x > 0.0), "{}", system.name());
        }
    }

    #[test]
    fn peers_smoltcp_link_carries_checked_datagrams() {
        // A datagram whose payload is changed on the wire must not reach B: smoltcp
        // verifies the UDP checksum, as the default capabilities ask.
        let clock = RealClock::new();
        let mut p = SmolPeers::new(clock.now()).unwrap();
        let mut buf = vec![0u8; 2048];
        let data = template(64);
        // Resolve ARP first.
        assert!(p.send_a(&data).unwrap());
        for _ in 0..4 {
            let now = clock.now();
            p.poll_a(now);
            p.poll_b(now);
        }
        assert_eq!(p.recv_b(&mut buf).unwrap(), Some(64));
        assert!(p.send_a(&data).unwrap());
        p.poll_a(clock.now());
        let frame = p.link.a_to_b.frames.back_mut().unwrap();
        let last = frame.len() - 1;
        frame[last] ^= 0x01;
        p.poll_b(clock.now());
        assert_eq!(p.recv_b(&mut buf).unwrap(), None);
        // And one unchanged gets through.
        assert!(p.send_a(&data).unwrap());
        p.poll_a(clock.now());
        p.poll_b(clock.now());
        assert_eq!(p.recv_b(&mut buf).unwrap(), Some(64));
        assert_eq!(buf[..64], data[..]);
    }

    #[test]
    fn peers_quantiles() {
        let xs: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&xs, 0.5), 50.0);
        assert_eq!(quantile(&xs, 0.99), 99.0);
        assert_eq!(quantile(&[7.0], 0.99), 7.0);
    }
}
