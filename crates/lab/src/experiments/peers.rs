//! `probestack lab peers`: probestack beside other stacks on the same UDP and TCP
//! workloads.
//!
//! The systems:
//!
//! - **probestack** with `Tuning::fast()` and with `Tuning::bsd()`: two stacks in one
//!   process on one thread, joined by the memory link ([`probestack::sim::Pair`]), polled
//!   with a [`RealClock`];
//! - **smoltcp 0.14**: two `Interface`s in one process on one thread, joined by [`Link`], a
//!   pair of frame queues written here (Ethernet, device MTU = IP MTU + 14, checksums
//!   computed and verified by smoltcp as its default capabilities ask), at 198.18.0.1/15
//!   and 198.18.0.2/15; and the same two interfaces on probestack's memory NICs
//!   ([`memlink`]), so that the device below the two stacks is the same;
//! - **the Linux kernel**: two `std::net::UdpSocket`s, or a `TcpStream` pair, on
//!   127.0.0.1, non-blocking, driven in the same shape from this one thread (the kernel
//!   needs no polling; each send and receive is a system call);
//! - **the Linux kernel over a veth pair** (when this process may make network namespaces):
//!   the same sockets, A's made in one namespace of this run's own at 198.18.0.1 and B's in
//!   another at 198.18.0.2, the two joined by a veth pair whose MTU follows the TCP bulk
//!   table's ([`kernel`]). Unprivileged, it is left out with the reason.
//!
//! The workloads:
//!
//! - **UDP one way**, 64- and 512-byte datagrams: A sends a burst of [`BURST`], both ends
//!   are polled, B receives everything queued; only datagrams that arrive whole and
//!   unchanged count. Datagrams per second and ns per datagram.
//! - **UDP request/response**, 64 bytes: A sends, B echoes, A receives and checks the
//!   reply, one at a time; the round-trip time, median and p99.
//! - **TCP bulk** one way at IP MTU 1500, 9000 and 65535: A's application writes
//!   [`TCP_WRITE`] bytes at a time until its stack takes no more, both ends are polled,
//!   B's application reads everything waiting (and does not look at it). Gbit/s of
//!   payload delivered to B's application. When the clock stops, A stops writing and every
//!   byte it wrote must still reach B; a transfer that makes no progress for two seconds
//!   is an error. The loopback device's MTU is fixed at [`LOOPBACK_MTU`], so the kernel
//!   on loopback is measured once, in the 65535 table; on the veth, at every MTU.
//! - **TCP request/response**, 64 bytes each way, Nagle off at both ends: A writes a
//!   request, B reads it whole and writes it back, A reads the response whole and checks
//!   it; one outstanding. Transactions per second.
//!
//! Each figure is the median over several runs after a warm-up run; within a round every
//! system runs once, in turn (the starting system rotating from round to round), so a slow
//! spell of the machine hits all alike. Every run builds its systems afresh and warms them
//! (ARP, caches, pools; for TCP the connection's handshake and slow start, with 4 MiB or
//! 200 transactions) before it starts timing. [`NOTE`], [`TCP_NOTE`] and
//! [`kernel::VETH_NOTE`] say what is and is not comparable.

use std::collections::VecDeque;
use std::time::Instant as WallInstant;

use probestack::buf::Loan;
use probestack::probe::Counter;
use probestack::sim::{HostConfig, Pair, ADDR_B};
use probestack::socket::tcp::{TcpError, TcpHandle};
use probestack::socket::udp::{UdpError, UdpHandle};
use probestack::tcp::State;
use probestack::time::{Clock, Instant, RealClock};
use probestack::tuning::Tuning;
use serde::Serialize;
use smoltcp::iface::{Config as SmolConfig, Interface, SocketHandle, SocketSet};
use smoltcp::phy::{Device, DeviceCapabilities, Medium, RxToken, TxToken};
use smoltcp::socket::tcp as smol_tcp;
use smoltcp::socket::udp as smol_udp;
use smoltcp::wire::{EthernetAddress, HardwareAddress, IpAddress, IpCidr, IpEndpoint};

use crate::bench::median;
use kernel::{KernelPath, KernelPeers, KernelStreams, Veth};

mod kernel;
use crate::table::Table;

mod devices;
mod floors;
mod memlink;

use memlink::NicWire;

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
    /// `Tuning::fast()` on a [`FrameQueue`](probestack::driver::FrameQueue), the same kind
    /// of device as smoltcp's frame queue (no NIC model under the stacks): the two stacks
    /// compared on smoltcp's own terms.
    ProbestackQueue,
    /// TCP bulk only: `Tuning::fast()` with paper 004's end-system optimizations on both
    /// sides: zero-copy sockets (A loans, B takes whole pages the NIC split off) and the
    /// NICs' checksum offload and TSO (checksum elision off, so the NICs compute the
    /// checksums `fast` would have agreed to leave out).
    ProbestackZeroCopy,
    /// TCP bulk only: zero-copy sockets on a frame queue (A loans; B's zero-copy receive,
    /// on a device without header split, takes A's loaned memory as it came across),
    /// `Tuning::fast()`; the queue has no offloads, so the stacks compute and verify
    /// every checksum themselves, as smoltcp does on the same device.
    ProbestackZeroCopyQueue,
    /// UDP one way only: [`System::ProbestackQueue`] with each burst sent by one batched
    /// send (`Stack::udp_send_batch`, sendmmsg), which makes the socket's checks and
    /// looks its template up once a burst rather than once a datagram.
    ProbestackBatchQueue,
    Smoltcp,
    /// smoltcp on probestack's memory NICs, configured as probestack's hosts have them
    /// ([`memlink::NicWire`]): the same CRC-32 and frame moves below both stacks.
    SmoltcpMemlink,
    LinuxLoopback,
    /// The kernel over a veth pair between two namespaces of this run's own.
    LinuxVeth,
}

/// Why [`System::ProbestackZeroCopy`] and [`System::ProbestackZeroCopyQueue`] have no
/// figure outside TCP bulk.
const BULK_ONLY: &str = "zero-copy sockets are measured on TCP bulk only";

/// Why [`System::ProbestackBatchQueue`] has no figure outside UDP one way.
const ONE_WAY_ONLY: &str = "batched sends are measured on UDP one way only";

/// The systems of every workload.
pub const SYSTEMS: [System; 7] = [
    System::ProbestackFast,
    System::ProbestackBsd,
    System::ProbestackQueue,
    System::Smoltcp,
    System::SmoltcpMemlink,
    System::LinuxLoopback,
    System::LinuxVeth,
];

/// The systems of UDP one way: every one, and probestack's batched sends on a frame
/// queue.
pub const ONE_WAY_SYSTEMS: [System; 8] = [
    System::ProbestackFast,
    System::ProbestackBsd,
    System::ProbestackQueue,
    System::ProbestackBatchQueue,
    System::Smoltcp,
    System::SmoltcpMemlink,
    System::LinuxLoopback,
    System::LinuxVeth,
];

/// The systems of TCP bulk: every one, and probestack with zero-copy sockets on either
/// device.
pub const BULK_SYSTEMS: [System; 9] = [
    System::ProbestackFast,
    System::ProbestackBsd,
    System::ProbestackZeroCopy,
    System::ProbestackQueue,
    System::ProbestackZeroCopyQueue,
    System::Smoltcp,
    System::SmoltcpMemlink,
    System::LinuxLoopback,
    System::LinuxVeth,
];

impl System {
    /// The name in the JSON.
    pub fn name(self) -> &'static str {
        match self {
            System::ProbestackFast => "probestack_fast",
            System::ProbestackBsd => "probestack_bsd",
            System::ProbestackZeroCopy => "probestack_zero_copy",
            System::ProbestackQueue => "probestack_fast_queue",
            System::ProbestackZeroCopyQueue => "probestack_zero_copy_queue",
            System::ProbestackBatchQueue => "probestack_fast_batch_queue",
            System::Smoltcp => "smoltcp",
            System::SmoltcpMemlink => "smoltcp_memlink",
            System::LinuxLoopback => "linux_loopback",
            System::LinuxVeth => "linux_veth",
        }
    }

    /// The name in the tables.
    fn label(self) -> &'static str {
        match self {
            System::ProbestackFast => "probestack fast",
            System::ProbestackBsd => "probestack bsd",
            System::ProbestackZeroCopy => "probestack zero-copy + offload",
            System::ProbestackQueue => "probestack fast, frame queue",
            System::ProbestackZeroCopyQueue => "probestack zero-copy, frame queue",
            System::ProbestackBatchQueue => "probestack fast, frame queue, batched sends",
            System::Smoltcp => "smoltcp 0.14",
            System::SmoltcpMemlink => "smoltcp 0.14, memory NIC",
            System::LinuxLoopback => "Linux loopback",
            System::LinuxVeth => "Linux veth",
        }
    }

    /// The kernel's systems, whose failures leave them out rather than end the experiment.
    fn is_kernel(self) -> bool {
        matches!(self, System::LinuxLoopback | System::LinuxVeth)
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
    /// Whether A sends a burst with one batched send ([`send_batch_a`](Self::send_batch_a))
    /// rather than a send per datagram.
    fn batches(&self) -> bool {
        false
    }
    /// A sends each of `datagrams` to B with one call: how many the system took.
    fn send_batch_a(&mut self, _datagrams: &[&[u8]]) -> Result<u64, String> {
        Err("this system has no batched send".into())
    }
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

/// The device under two probestack stacks.
#[derive(Clone, Copy)]
enum StackDevice {
    /// The memory link's NICs (every probestack row but one).
    MemoryNic,
    /// A frame queue ([`System::ProbestackQueue`]).
    FrameQueue,
}
const NIC: StackDevice = StackDevice::MemoryNic;
const QUEUE: StackDevice = StackDevice::FrameQueue;

/// Two probestack stacks at A and B on `device`.
fn stack_pair(host: HostConfig, device: StackDevice) -> Result<Pair, String> {
    match device {
        StackDevice::MemoryNic => {
            Pair::new(host.clone(), host).map_err(|e| format!("probestack memory link: {e}"))
        }
        StackDevice::FrameQueue => Pair::on_frame_queue(host.clone(), host)
            .map_err(|e| format!("probestack frame queue: {e}")),
    }
}

/// Two probestack stacks on the memory link (or a frame queue).
struct StackPeers {
    pair: Pair,
    a: UdpHandle,
    b: UdpHandle,
    /// A sends bursts with `udp_send_batch`.
    batch: bool,
}

impl StackPeers {
    fn new(tuning: Tuning, device: StackDevice) -> Result<StackPeers, String> {
        let mut host = HostConfig::with_mtu(1500);
        host.stack.tuning = tuning;
        let mut pair = stack_pair(host, device)?;
        let b = pair.b.udp_open();
        pair.b
            .udp_bind(b, probestack::wire::Ipv4Address::UNSPECIFIED, PORT_B)
            .map_err(|e| format!("probestack bind: {e}"))?;
        let a = pair.a.udp_open();
        Ok(StackPeers {
            pair,
            a,
            b,
            batch: false,
        })
    }

    /// [`StackPeers::new`] with A sending each burst in one batch.
    fn batched(tuning: Tuning, device: StackDevice) -> Result<StackPeers, String> {
        let mut p = StackPeers::new(tuning, device)?;
        p.batch = true;
        Ok(p)
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

    fn batches(&self) -> bool {
        self.batch
    }

    fn send_batch_a(&mut self, datagrams: &[&[u8]]) -> Result<u64, String> {
        self.pair
            .a
            .udp_send_batch(self.a, datagrams, Some((ADDR_B, PORT_B)))
            .map(|n| n as u64)
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
/// The Ethernet header, which smoltcp's device MTU counts and an IP MTU does not.
const ETHERNET_HEADER: usize = 14;

/// One direction of a [`Link`]: frames in flight, and spent frame buffers for reuse (so the
/// link allocates nothing once warm, as the memory link's pool does not).
#[derive(Default)]
struct Lane {
    frames: VecDeque<Vec<u8>>,
    spare: Vec<Vec<u8>>,
}

/// A wire between two smoltcp interfaces: a queue of frames each way.
struct Link {
    a_to_b: Lane,
    b_to_a: Lane,
    /// The device MTU both ends report: the IP MTU plus the Ethernet header.
    ethernet_mtu: usize,
}

impl Link {
    /// A link whose frames carry IP datagrams of up to `ip_mtu` bytes.
    fn new(ip_mtu: usize) -> Link {
        Link {
            a_to_b: Lane::default(),
            b_to_a: Lane::default(),
            ethernet_mtu: ip_mtu + ETHERNET_HEADER,
        }
    }
}

/// What joins smoltcp's two interfaces: a smoltcp device for each end.
trait SmolWire {
    type Port<'a>: Device
    where
        Self: 'a;

    /// `end`'s device, for a poll at `now`.
    fn port(&mut self, end: End, now: Instant) -> Self::Port<'_>;
}

impl SmolWire for Link {
    type Port<'a> = Port<'a>;

    fn port(&mut self, end: End, _now: Instant) -> Port<'_> {
        let (rx, tx) = match end {
            End::A => (&mut self.b_to_a, &mut self.a_to_b),
            End::B => (&mut self.a_to_b, &mut self.b_to_a),
        };
        Port {
            rx,
            tx,
            ethernet_mtu: self.ethernet_mtu,
        }
    }
}

/// One end of a [`Link`], as a smoltcp device.
struct Port<'l> {
    rx: &'l mut Lane,
    tx: &'l mut Lane,
    ethernet_mtu: usize,
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
        smol_caps(self.ethernet_mtu)
    }
}

/// What every smoltcp device here reports: Ethernet frames of up to `ethernet_mtu` bytes.
/// Checksum capabilities stay at the default: smoltcp computes every checksum on send
/// and verifies it on receive. `max_burst_size` stays `None`: smoltcp does not clamp the
/// TCP window it advertises to a burst of frames.
fn smol_caps(ethernet_mtu: usize) -> DeviceCapabilities {
    let mut caps = DeviceCapabilities::default();
    caps.medium = Medium::Ethernet;
    caps.max_transmission_unit = ethernet_mtu;
    caps
}

/// Two smoltcp interfaces on a wire, a UDP socket on each.
struct SmolPeers<W> {
    link: W,
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

/// The interfaces of A and B on `link`.
fn smol_interfaces<W: SmolWire>(
    mut link: W,
    now: Instant,
) -> Result<(W, Interface, Interface), String> {
    let iface = |port: &mut W::Port<'_>, mac: u8, addr: IpAddress| -> Result<Interface, String> {
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
    let a = iface(&mut link.port(End::A, now), 1, SMOL_ADDR_A)?;
    let b = iface(&mut link.port(End::B, now), 2, SMOL_ADDR_B)?;
    Ok((link, a, b))
}

impl<W: SmolWire> SmolPeers<W> {
    /// The peers on `link`, which carries IP datagrams of up to 1500 bytes.
    fn new(link: W, now: Instant) -> Result<SmolPeers<W>, String> {
        let (link, a, b) = smol_interfaces(link, now)?;
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

impl<W: SmolWire> Peers for SmolPeers<W> {
    fn send_a(&mut self, data: &[u8]) -> Result<bool, String> {
        self.sockets_a
            .get_mut::<smol_udp::Socket>(self.socket_a)
            .send_slice(data, IpEndpoint::new(SMOL_ADDR_B, PORT_B))
            .map(|()| true)
            .map_err(|e| format!("smoltcp send: {e}"))
    }

    fn poll_a(&mut self, now: Instant) {
        let mut port = self.link.port(End::A, now);
        self.a.poll(smol_now(now), &mut port, &mut self.sockets_a);
    }

    fn poll_b(&mut self, now: Instant) {
        let mut port = self.link.port(End::B, now);
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
/// queued. Returns (sent, intact). `data` holds one datagram, stamped and sent [`BURST`]
/// times, or for a system that [`batches`](Peers::batches) [`BURST`] of them, each
/// stamped, then sent together.
fn burst<P: Peers>(
    p: &mut P,
    clock: &RealClock,
    data: &mut [Vec<u8>],
    seq: &mut u64,
    buf: &mut [u8],
) -> Result<(u64, u64), String> {
    let mut sent = 0;
    if p.batches() {
        for d in data.iter_mut() {
            *seq += 1;
            stamp(d, *seq);
        }
        let datagrams: [&[u8]; BURST] = std::array::from_fn(|i| &data[i][..]);
        sent = p.send_batch_a(&datagrams)?;
    } else {
        let data = &mut data[0];
        for _ in 0..BURST {
            *seq += 1;
            stamp(data, *seq);
            if p.send_a(data)? {
                sent += 1;
            }
        }
    }
    let now = clock.now();
    p.poll_a(now);
    p.poll_b(now);
    let mut intact = 0;
    let data = &data[0];
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
    let mut data = vec![template(size); if p.batches() { BURST } else { 1 }];
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

/// smoltcp's UDP peers on `link`, built now.
fn smol_peers<W: SmolWire>(link: W) -> Result<SmolPeers<W>, String> {
    SmolPeers::new(link, RealClock::new().now())
}

/// One run of the one-way workload on `system`, built afresh (the kernel's sockets on
/// `veth`, for [`System::LinuxVeth`]).
pub fn one_way(
    system: System,
    size: usize,
    millis: u64,
    veth: Option<&Veth>,
) -> Result<OneWayRun, String> {
    match system {
        System::ProbestackFast => {
            one_way_on(&mut StackPeers::new(Tuning::fast(), NIC)?, size, millis)
        }
        System::ProbestackBsd => {
            one_way_on(&mut StackPeers::new(Tuning::bsd(), NIC)?, size, millis)
        }
        System::ProbestackQueue => {
            one_way_on(&mut StackPeers::new(Tuning::fast(), QUEUE)?, size, millis)
        }
        System::ProbestackBatchQueue => one_way_on(
            &mut StackPeers::batched(Tuning::fast(), QUEUE)?,
            size,
            millis,
        ),
        System::Smoltcp => one_way_on(&mut smol_peers(Link::new(1500))?, size, millis),
        System::SmoltcpMemlink => one_way_on(&mut smol_peers(NicWire::new(1500)?)?, size, millis),
        System::LinuxLoopback => {
            one_way_on(&mut KernelPeers::new(KernelPath::Loopback)?, size, millis)
        }
        System::LinuxVeth => one_way_on(
            &mut KernelPeers::new(kernel::veth_path(veth)?)?,
            size,
            millis,
        ),
        System::ProbestackZeroCopy | System::ProbestackZeroCopyQueue => Err(BULK_ONLY.into()),
    }
}

/// One run of request/response on `system`, built afresh: the round-trip times in ns.
pub fn request_response(
    system: System,
    size: usize,
    millis: u64,
    veth: Option<&Veth>,
) -> Result<Vec<f64>, String> {
    match system {
        System::ProbestackFast => rr_on(&mut StackPeers::new(Tuning::fast(), NIC)?, size, millis),
        System::ProbestackBsd => rr_on(&mut StackPeers::new(Tuning::bsd(), NIC)?, size, millis),
        System::ProbestackQueue => {
            rr_on(&mut StackPeers::new(Tuning::fast(), QUEUE)?, size, millis)
        }
        System::Smoltcp => rr_on(&mut smol_peers(Link::new(1500))?, size, millis),
        System::SmoltcpMemlink => rr_on(&mut smol_peers(NicWire::new(1500)?)?, size, millis),
        System::LinuxLoopback => rr_on(&mut KernelPeers::new(KernelPath::Loopback)?, size, millis),
        System::LinuxVeth => rr_on(
            &mut KernelPeers::new(kernel::veth_path(veth)?)?,
            size,
            millis,
        ),
        System::ProbestackZeroCopy | System::ProbestackZeroCopyQueue => Err(BULK_ONLY.into()),
        System::ProbestackBatchQueue => Err(ONE_WAY_ONLY.into()),
    }
}

/// The `q` quantile (0 to 1) of sorted `xs`, nearest rank.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

// ---------------------------------------------------------------------------------------
// TCP: one connection from A to B, as each system offers it.

/// The IP MTUs of the bulk workload.
pub const TCP_MTUS: [usize; 3] = [1500, 9000, 65535];
/// The loopback device's MTU. It is fixed (changing it needs privileges and would change
/// the machine), so the kernel's bulk figure is measured once, beside the others' at 65535.
pub const LOOPBACK_MTU: usize = 65536;
/// What A's application writes at a time in the bulk workload.
pub const TCP_WRITE: usize = 64 * 1024;
/// What B's application reads into in the bulk workload.
const TCP_READ: usize = 256 * 1024;
/// The request and the response of TCP request/response.
pub const TCP_RR_SIZE: usize = 64;
/// smoltcp's socket buffers, each way at each end (probestack's default is the same);
/// smoltcp derives its window scale from the receive buffer's size.
const SMOL_TCP_BUFFER: usize = 1 << 20;
/// B's TCP port.
const TCP_PORT_B: u16 = 5001;
/// Bytes a bulk run moves before it starts timing (slow start, caches, pools).
const TCP_WARM_BYTES: u64 = 4 << 20;
/// Transactions a request/response run makes before it starts timing.
const TCP_WARM_TRANSACTIONS: usize = 200;
/// A connection that does not open within this time, or a transfer that moves nothing
/// for this long, is an error.
const TCP_STALL: std::time::Duration = std::time::Duration::from_secs(2);
/// Writes A makes in one step of the bulk workload at most (the stacks' buffers fill long
/// before).
const TCP_WRITES_PER_STEP: usize = 1024;
/// The byte at stream offset `i` is `i % PATTERN_PERIOD`: a prime, so that a lost, repeated
/// or misplaced segment changes what B reads.
const PATTERN_PERIOD: usize = 251;

/// One end of the connection: A connected to B.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    A,
    B,
}

/// The two ends of one TCP connection, both driven by the caller on one thread.
trait Streams {
    /// Queues `data` on `end`'s side: the bytes taken, 0 when the send buffer is full.
    fn send(&mut self, end: End, data: &[u8]) -> Result<usize, String>;
    /// Reads what `end` has received into `buf`: `None` when nothing is waiting. The end of
    /// the stream is an error (nobody closes in these workloads).
    fn recv(&mut self, end: End, buf: &mut [u8]) -> Result<Option<usize>, String>;
    /// Lets `end`'s stack do its work.
    fn poll(&mut self, end: End, now: Instant);
    /// Segments both ends have retransmitted, where the system counts them.
    fn retransmitted(&self) -> Option<u64> {
        None
    }
}

/// Two probestack stacks on the memory link, connected.
struct StackStreams {
    pair: Pair,
    a: TcpHandle,
    b: TcpHandle,
    /// Zero-copy sockets: A's loan of the stream pattern (its writes are slices of it),
    /// the bytes A has queued so far (where the next write starts in the pattern), and
    /// whether B copies what it takes into the caller's buffer (to be checked; timed runs
    /// never copy).
    zero_copy: Option<(Loan, u64, bool)>,
}

impl StackStreams {
    fn connect(
        tuning: Tuning,
        mtu: usize,
        nodelay: bool,
        device: StackDevice,
        clock: &RealClock,
    ) -> Result<StackStreams, String> {
        let mut host = HostConfig::with_mtu(mtu);
        host.stack.tuning = tuning;
        StackStreams::connect_hosts(host, device, nodelay, clock)
    }

    /// Zero-copy sockets on NICs with checksum offload, TSO and header split, as
    /// [`System::ProbestackZeroCopy`], or on a frame queue (no offloads), as
    /// [`System::ProbestackZeroCopyQueue`]; with `copy_out`, B copies what it takes into
    /// the caller's buffer so that it can be checked.
    fn connect_zero_copy(
        mtu: usize,
        device: StackDevice,
        copy_out: bool,
        clock: &RealClock,
    ) -> Result<StackStreams, String> {
        let mut host = HostConfig::with_mtu(mtu);
        // Checksums computed (by the NICs): with elision on, fast() would agree on no
        // TCP checksum on this CRC link and the offload would have nothing to do. A frame
        // queue takes only the MTU and depth from the NIC settings (no CRC, no offloads,
        // no split: the stacks compute every checksum).
        host.stack.tuning = Tuning {
            checksum_elision: false,
            ..Tuning::fast()
        };
        host.nic = probestack::driver::NicConfig {
            header_split: true,
            ..host.nic.with_offloads()
        };
        let mut s = StackStreams::connect_hosts(host, device, false, clock)?;
        s.pair
            .b
            .tcp_set_zero_copy_receive(s.b, true)
            .map_err(|e| format!("probestack zero-copy receive: {e}"))?;
        s.zero_copy = Some((Loan::new(stream_pattern()), 0, copy_out));
        Ok(s)
    }

    fn connect_hosts(
        host: HostConfig,
        device: StackDevice,
        nodelay: bool,
        clock: &RealClock,
    ) -> Result<StackStreams, String> {
        let mut pair = stack_pair(host, device)?;
        let listener = pair
            .b
            .tcp_listen((ADDR_B, TCP_PORT_B), 1)
            .map_err(|e| format!("probestack listen: {e}"))?;
        let a = pair
            .a
            .tcp_connect((ADDR_B, TCP_PORT_B))
            .map_err(|e| format!("probestack connect: {e}"))?;
        let start = WallInstant::now();
        let mut b = None;
        loop {
            let now = clock.now();
            pair.a.poll(now);
            pair.b.poll(now);
            if b.is_none() {
                match pair.b.tcp_accept(listener) {
                    Ok(h) => b = Some(h),
                    Err(TcpError::WouldBlock) => {}
                    Err(e) => return Err(format!("probestack accept: {e}")),
                }
            }
            if let Ok(Some(e)) = pair.a.tcp_error(a) {
                return Err(format!("probestack connect: {e}"));
            }
            if let (Some(b), Ok(State::Established)) = (b, pair.a.tcp_state(a)) {
                pair.b
                    .tcp_close(listener)
                    .map_err(|e| format!("probestack close: {e}"))?;
                if nodelay {
                    pair.a
                        .tcp_set_nodelay(a, true)
                        .and_then(|()| pair.b.tcp_set_nodelay(b, true))
                        .map_err(|e| format!("probestack nodelay: {e}"))?;
                }
                return Ok(StackStreams {
                    pair,
                    a,
                    b,
                    zero_copy: None,
                });
            }
            if start.elapsed() > TCP_STALL {
                return Err(format!(
                    "probestack: the connection did not open within {TCP_STALL:?}"
                ));
            }
        }
    }

    fn end(&mut self, end: End) -> (&mut probestack::stack::Stack, TcpHandle) {
        match end {
            End::A => (&mut self.pair.a, self.a),
            End::B => (&mut self.pair.b, self.b),
        }
    }
}

impl Streams for StackStreams {
    fn send(&mut self, end: End, data: &[u8]) -> Result<usize, String> {
        if let (End::A, Some((loan, sent, _))) = (end, self.zero_copy.as_mut()) {
            // The caller writes the pattern from where the stream stands: the same bytes
            // in the loan, sent by reference.
            let at = (*sent % PATTERN_PERIOD as u64) as usize;
            let part = loan
                .slice(at..at + data.len())
                .map_err(|e| format!("probestack loan: {e:?}"))?;
            // The caller writes the pattern from where the stream stands; so do we.
            debug_assert_eq!(&part[..], data);
            return match self.pair.a.tcp_send_loan(self.a, &part) {
                Ok(n) => {
                    *sent += n as u64;
                    Ok(n)
                }
                Err(TcpError::WouldBlock) => Ok(0),
                Err(e) => Err(format!("probestack send: {e}")),
            };
        }
        let (stack, h) = self.end(end);
        match stack.tcp_send(h, data) {
            Ok(n) => Ok(n),
            Err(TcpError::WouldBlock) => Ok(0),
            Err(e) => Err(format!("probestack send: {e}")),
        }
    }

    fn recv(&mut self, end: End, buf: &mut [u8]) -> Result<Option<usize>, String> {
        if let (End::B, Some(&(_, _, copy_out))) = (end, self.zero_copy.as_ref()) {
            return match self.pair.b.tcp_recv_zero_copy(self.b, buf.len()) {
                Ok(Some(chunk)) => {
                    if copy_out {
                        buf[..chunk.len()].copy_from_slice(&chunk);
                    }
                    Ok(Some(chunk.len()))
                }
                Ok(None) => Err("probestack: the stream ended".into()),
                Err(TcpError::WouldBlock) => Ok(None),
                Err(e) => Err(format!("probestack receive: {e}")),
            };
        }
        let (stack, h) = self.end(end);
        match stack.tcp_recv(h, buf) {
            Ok(0) => Err("probestack: the stream ended".into()),
            Ok(n) => Ok(Some(n)),
            Err(TcpError::WouldBlock) => Ok(None),
            Err(e) => Err(format!("probestack receive: {e}")),
        }
    }

    fn poll(&mut self, end: End, now: Instant) {
        self.end(end).0.poll(now);
    }

    fn retransmitted(&self) -> Option<u64> {
        let count = |s: &probestack::stack::Stack| {
            s.ledger().counters().get(Counter::TcpRetransmittedSegments)
        };
        Some(count(&self.pair.a) + count(&self.pair.b))
    }
}

/// Two smoltcp interfaces on a wire, a TCP socket on each, connected.
struct SmolStreams<W> {
    link: W,
    a: Interface,
    b: Interface,
    sockets_a: SocketSet<'static>,
    sockets_b: SocketSet<'static>,
    socket_a: SocketHandle,
    socket_b: SocketHandle,
}

impl<W: SmolWire> SmolStreams<W> {
    fn connect(link: W, nodelay: bool, clock: &RealClock) -> Result<SmolStreams<W>, String> {
        let (link, mut a, b) = smol_interfaces(link, clock.now())?;
        let socket = || {
            let buffer = || smol_tcp::SocketBuffer::new(vec![0u8; SMOL_TCP_BUFFER]);
            let mut s = smol_tcp::Socket::new(buffer(), buffer());
            s.set_nagle_enabled(!nodelay);
            s
        };
        let mut sb = socket();
        sb.listen(TCP_PORT_B)
            .map_err(|e| format!("smoltcp listen: {e}"))?;
        let mut sa = socket();
        sa.connect(
            a.context(),
            IpEndpoint::new(SMOL_ADDR_B, TCP_PORT_B),
            PORT_A,
        )
        .map_err(|e| format!("smoltcp connect: {e}"))?;
        let mut sockets_a = SocketSet::new(Vec::new());
        let socket_a = sockets_a.add(sa);
        let mut sockets_b = SocketSet::new(Vec::new());
        let socket_b = sockets_b.add(sb);
        let mut s = SmolStreams {
            link,
            a,
            b,
            sockets_a,
            sockets_b,
            socket_a,
            socket_b,
        };
        let start = WallInstant::now();
        loop {
            let now = clock.now();
            s.poll(End::A, now);
            s.poll(End::B, now);
            let state = |set: &SocketSet<'_>, h| set.get::<smol_tcp::Socket>(h).state();
            let (sa, sb) = (
                state(&s.sockets_a, s.socket_a),
                state(&s.sockets_b, s.socket_b),
            );
            if sa == smol_tcp::State::Established && sb == smol_tcp::State::Established {
                return Ok(s);
            }
            if sa == smol_tcp::State::Closed {
                return Err("smoltcp: the connection was refused or reset".into());
            }
            if start.elapsed() > TCP_STALL {
                return Err(format!(
                    "smoltcp: the connection did not open within {TCP_STALL:?} (A {sa}, B {sb})"
                ));
            }
        }
    }

    fn socket(&mut self, end: End) -> &mut smol_tcp::Socket<'static> {
        match end {
            End::A => self.sockets_a.get_mut(self.socket_a),
            End::B => self.sockets_b.get_mut(self.socket_b),
        }
    }
}

impl<W: SmolWire> Streams for SmolStreams<W> {
    fn send(&mut self, end: End, data: &[u8]) -> Result<usize, String> {
        self.socket(end)
            .send_slice(data)
            .map_err(|e| format!("smoltcp send: {e}"))
    }

    fn recv(&mut self, end: End, buf: &mut [u8]) -> Result<Option<usize>, String> {
        match self.socket(end).recv_slice(buf) {
            Ok(0) => Ok(None),
            Ok(n) => Ok(Some(n)),
            Err(smol_tcp::RecvError::Finished) => Err("smoltcp: the stream ended".into()),
            Err(e) => Err(format!("smoltcp receive: {e}")),
        }
    }

    fn poll(&mut self, end: End, now: Instant) {
        let mut port = self.link.port(end, now);
        let (iface, sockets) = match end {
            End::A => (&mut self.a, &mut self.sockets_a),
            End::B => (&mut self.b, &mut self.sockets_b),
        };
        iface.poll(smol_now(now), &mut port, sockets);
    }
}

/// One timed run of TCP bulk.
#[derive(Clone, Copy, Debug)]
pub struct BulkRun {
    /// Bytes B's application read while the clock ran.
    pub bytes: u64,
    pub seconds: f64,
    /// Segments retransmitted over the whole run, where the system counts them.
    pub retransmitted: Option<u64>,
}

impl BulkRun {
    /// Payload delivered to B's application, in Gbit/s.
    pub fn gbits(&self) -> f64 {
        self.bytes as f64 * 8.0 / self.seconds / 1e9
    }
}

/// The bytes A writes from: [`TCP_WRITE`] bytes start at every offset below
/// [`PATTERN_PERIOD`], so a write is a slice, never a fill.
fn stream_pattern() -> Vec<u8> {
    (0..TCP_WRITE + PATTERN_PERIOD)
        .map(|i| (i % PATTERN_PERIOD) as u8)
        .collect()
}

/// Where a bulk transfer stands.
struct Flow {
    /// Bytes A's application wrote and B's read.
    sent: u64,
    got: u64,
    /// Compare every byte B reads with the byte A wrote there (tests only: timed runs
    /// leave the bytes alone).
    check: bool,
    /// How long a transfer may make no progress, and since when it has made none.
    stall: std::time::Duration,
    idle_since: Option<WallInstant>,
}

/// One step of a bulk transfer: A writes until its stack takes no more (if `write`), both
/// ends are polled, B reads everything waiting. Returns the bytes B read.
fn bulk_step<S: Streams>(
    s: &mut S,
    clock: &RealClock,
    pattern: &[u8],
    buf: &mut [u8],
    flow: &mut Flow,
    write: bool,
) -> Result<u64, String> {
    if write {
        for _ in 0..TCP_WRITES_PER_STEP {
            let at = (flow.sent % PATTERN_PERIOD as u64) as usize;
            let n = s.send(End::A, &pattern[at..at + TCP_WRITE])?;
            if n == 0 {
                break;
            }
            flow.sent += n as u64;
        }
    }
    let now = clock.now();
    s.poll(End::A, now);
    s.poll(End::B, now);
    let mut got = 0u64;
    while let Some(n) = s.recv(End::B, buf)? {
        if flow.check {
            let at = flow.got + got;
            if let Some(j) = buf[..n]
                .iter()
                .zip(at..)
                .position(|(b, i)| *b != (i % PATTERN_PERIOD as u64) as u8)
            {
                return Err(format!(
                    "byte {} of the stream differs from the byte written there",
                    at + j as u64
                ));
            }
        }
        got += n as u64;
    }
    flow.got += got;
    if flow.got > flow.sent {
        return Err(format!(
            "B read {} bytes, more than the {} A wrote",
            flow.got, flow.sent
        ));
    }
    if got > 0 {
        flow.idle_since = None;
    } else {
        let since = *flow.idle_since.get_or_insert_with(WallInstant::now);
        if since.elapsed() > flow.stall {
            return Err(format!(
                "the transfer stalled: A wrote {} bytes, B read {}, then nothing for {:?}",
                flow.sent, flow.got, flow.stall
            ));
        }
    }
    Ok(got)
}

/// One run of TCP bulk on connected `s`: warm-up, `millis` timed, then A stops writing and
/// every byte it wrote must reach B (an error otherwise).
fn bulk_on<S: Streams>(
    s: &mut S,
    clock: &RealClock,
    millis: u64,
    check: bool,
    stall: std::time::Duration,
) -> Result<BulkRun, String> {
    let pattern = stream_pattern();
    let mut buf = vec![0u8; TCP_READ];
    let mut flow = Flow {
        sent: 0,
        got: 0,
        check,
        stall,
        idle_since: None,
    };
    while flow.got < TCP_WARM_BYTES {
        bulk_step(s, clock, &pattern, &mut buf, &mut flow, true)?;
    }
    let start = WallInstant::now();
    let mut bytes = 0u64;
    while start.elapsed().as_millis() < u128::from(millis) {
        bytes += bulk_step(s, clock, &pattern, &mut buf, &mut flow, true)?;
    }
    let seconds = start.elapsed().as_secs_f64();
    // A stops writing; what it wrote must all arrive.
    flow.idle_since = None;
    while flow.got < flow.sent {
        bulk_step(s, clock, &pattern, &mut buf, &mut flow, false)?;
    }
    if bytes == 0 {
        return Err("no byte was delivered while the clock ran".into());
    }
    Ok(BulkRun {
        bytes,
        seconds,
        retransmitted: s.retransmitted(),
    })
}

/// One timed run of TCP request/response.
#[derive(Clone, Copy, Debug)]
pub struct RrRun {
    pub transactions: u64,
    pub seconds: f64,
}

impl RrRun {
    pub fn rate(&self) -> f64 {
        self.transactions as f64 / self.seconds
    }
}

/// One transaction: A writes the request, B reads it whole and writes it back, A reads
/// the response whole and checks it against the request.
fn transaction<S: Streams>(
    s: &mut S,
    clock: &RealClock,
    req: &mut [u8],
    seq: u64,
    bufs: (&mut [u8], &mut [u8]),
    timeout_ns: u64,
) -> Result<(), String> {
    let (buf_a, buf_b) = bufs;
    let n = req.len();
    stamp(req, seq);
    // The clock is read once per turn of the loop, for the polls, and the timeout is
    // measured from the first turn's reading: a transaction that completes in one turn
    // (the usual case) reads it once. (A clock read costs tens of ns here: reading it
    // three times per transaction put 7.5% of probestack's loop in `clock_gettime`.)
    let mut t0 = None;
    let (mut a_sent, mut b_got, mut b_sent, mut a_got) = (0, 0, 0, 0);
    loop {
        if a_sent < n {
            a_sent += s.send(End::A, &req[a_sent..])?;
        }
        let now = clock.now();
        let t0 = *t0.get_or_insert(now);
        if now.saturating_since(t0).as_nanos() > timeout_ns {
            return Err(format!(
                "transaction {seq}: no response within {} ms (request {a_sent} of {n} bytes \
                 taken, {b_got} read by B, {b_sent} written back, {a_got} read by A)",
                timeout_ns / 1_000_000
            ));
        }
        s.poll(End::A, now);
        s.poll(End::B, now);
        while b_got < n {
            match s.recv(End::B, &mut buf_b[b_got..n])? {
                Some(k) => b_got += k,
                None => break,
            }
        }
        if b_got == n && b_sent < n {
            b_sent += s.send(End::B, &buf_b[b_sent..n])?;
            s.poll(End::B, now);
            s.poll(End::A, now);
        }
        while a_got < n {
            match s.recv(End::A, &mut buf_a[a_got..n])? {
                Some(k) => a_got += k,
                None => break,
            }
        }
        if a_got == n {
            if buf_a[..n] != *req {
                return Err(format!(
                    "transaction {seq}: the response differs from the request"
                ));
            }
            return Ok(());
        }
    }
}

/// One run of TCP request/response on connected `s`.
fn rr_stream_on<S: Streams>(
    s: &mut S,
    clock: &RealClock,
    millis: u64,
    timeout_ns: u64,
) -> Result<RrRun, String> {
    let mut req = template(TCP_RR_SIZE);
    let mut buf_a = vec![0u8; TCP_RR_SIZE];
    let mut buf_b = vec![0u8; TCP_RR_SIZE];
    let mut seq = 0;
    for _ in 0..TCP_WARM_TRANSACTIONS {
        seq += 1;
        transaction(
            s,
            clock,
            &mut req,
            seq,
            (&mut buf_a, &mut buf_b),
            timeout_ns,
        )?;
    }
    let start = WallInstant::now();
    let mut transactions = 0u64;
    // The time is checked every 16 transactions, not every one (see `transaction`).
    while !transactions.is_multiple_of(16) || start.elapsed().as_millis() < u128::from(millis) {
        seq += 1;
        transaction(
            s,
            clock,
            &mut req,
            seq,
            (&mut buf_a, &mut buf_b),
            timeout_ns,
        )?;
        transactions += 1;
    }
    Ok(RrRun {
        transactions,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// One run of TCP bulk on `system` at IP MTU `mtu` (the kernel's loopback has its own;
/// the caller sets `veth`'s), connection and all built afresh; with `check`, B compares
/// every byte it reads.
fn tcp_bulk_checked(
    system: System,
    mtu: usize,
    millis: u64,
    check: bool,
    veth: Option<&Veth>,
) -> Result<BulkRun, String> {
    let clock = RealClock::new();
    let stack = |tuning, device| StackStreams::connect(tuning, mtu, false, device, &clock);
    // Every system's streams, built their own way, then the same run.
    macro_rules! run {
        ($streams:expr) => {
            bulk_on(&mut $streams?, &clock, millis, check, TCP_STALL)
        };
    }
    match system {
        System::ProbestackFast => run!(stack(Tuning::fast(), NIC)),
        System::ProbestackBsd => run!(stack(Tuning::bsd(), NIC)),
        System::ProbestackQueue => run!(stack(Tuning::fast(), QUEUE)),
        System::ProbestackZeroCopy => {
            run!(StackStreams::connect_zero_copy(mtu, NIC, check, &clock))
        }
        System::ProbestackZeroCopyQueue => {
            run!(StackStreams::connect_zero_copy(mtu, QUEUE, check, &clock))
        }
        System::Smoltcp => run!(SmolStreams::connect(Link::new(mtu), false, &clock)),
        System::SmoltcpMemlink => run!(SmolStreams::connect(NicWire::new(mtu)?, false, &clock)),
        System::LinuxLoopback => run!(KernelStreams::connect(KernelPath::Loopback, false)),
        System::LinuxVeth => run!(KernelStreams::connect(kernel::veth_path(veth)?, false)),
        System::ProbestackBatchQueue => Err(ONE_WAY_ONLY.into()),
    }
}

/// One run of TCP bulk on `system` at IP MTU `mtu`, built afresh (`veth`'s MTU set by
/// the caller).
pub fn tcp_bulk(
    system: System,
    mtu: usize,
    millis: u64,
    veth: Option<&Veth>,
) -> Result<BulkRun, String> {
    tcp_bulk_checked(system, mtu, millis, false, veth)
}

/// One run of TCP request/response on `system` (MTU 1500; loopback's own for the kernel;
/// `veth`'s as the caller set it), Nagle off at both ends, built afresh.
pub fn tcp_request_response(
    system: System,
    millis: u64,
    veth: Option<&Veth>,
) -> Result<RrRun, String> {
    let clock = RealClock::new();
    let stack = |tuning, device| StackStreams::connect(tuning, 1500, true, device, &clock);
    macro_rules! run {
        ($streams:expr) => {
            rr_stream_on(&mut $streams?, &clock, millis, RR_TIMEOUT_NS)
        };
    }
    match system {
        System::ProbestackFast => run!(stack(Tuning::fast(), NIC)),
        System::ProbestackBsd => run!(stack(Tuning::bsd(), NIC)),
        System::ProbestackQueue => run!(stack(Tuning::fast(), QUEUE)),
        System::Smoltcp => run!(SmolStreams::connect(Link::new(1500), true, &clock)),
        System::SmoltcpMemlink => run!(SmolStreams::connect(NicWire::new(1500)?, true, &clock)),
        System::LinuxLoopback => run!(KernelStreams::connect(KernelPath::Loopback, true)),
        System::LinuxVeth => run!(KernelStreams::connect(kernel::veth_path(veth)?, true)),
        System::ProbestackZeroCopy | System::ProbestackZeroCopyQueue => Err(BULK_ONLY.into()),
        System::ProbestackBatchQueue => Err(ONE_WAY_ONLY.into()),
    }
}

// ---------------------------------------------------------------------------------------
// The experiment.

/// One figure of one system.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// `udp_one_way_64`, `udp_one_way_512`, `udp_rr_64_median`, `udp_rr_64_p99`,
    /// `tcp_bulk_1500`, `tcp_bulk_9000`, `tcp_bulk_65535`, `tcp_rr_64`.
    pub workload: String,
    /// `probestack_fast`, `probestack_bsd`, `probestack_zero_copy` (TCP bulk only),
    /// `probestack_fast_queue`, `probestack_zero_copy_queue` (TCP bulk only), `smoltcp`,
    /// `smoltcp_memlink`, `linux_loopback`, `linux_veth`.
    pub system: &'static str,
    /// The median over the runs.
    pub value: f64,
    /// `datagrams/s`, `ns`, `Gbit/s` or `transactions/s`.
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
    /// TCP bulk only: the IP MTU of the link measured (the loopback device's 65536 for the
    /// kernel on loopback, whose bulk figure is reported once, under `tcp_bulk_65535`; the
    /// veth driver's largest for the kernel on the veth if the MTU asked is more).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link_mtu: Option<usize>,
    /// TCP bulk, probestack only: segments both ends retransmitted, summed over the
    /// reported runs (warm-up and drain included). A clean link should need none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retransmitted_segments: Option<u64>,
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
    /// The size of A's writes in TCP bulk.
    pub tcp_write: usize,
    /// What is and is not comparable.
    pub note: String,
    pub skipped: Vec<Skipped>,
    pub rows: Vec<Row>,
    /// The two devices under the in-process rows alone: ns per frame from A to B.
    pub devices: Vec<devices::DeviceRow>,
    /// The UDP, TCP and end-system issues' targets against the floors of the work the
    /// devices and the copying sockets do ([`floors`]), and the passes timed for them.
    pub floors: Vec<floors::Floor>,
    pub passes: Vec<floors::Pass>,
    pub floors_note: &'static str,
}

pub const NOTE: &str = "probestack and smoltcp run both hosts in this process on one thread \
    and make no system calls: a figure is both ends' protocol processing plus the polling \
    loop, over an in-memory link. The kernel's figures include a system call per send and \
    per receive (and one empty receive per burst or spin) and the loopback device, with \
    both sockets in this thread. So probestack against smoltcp compares stacks; against \
    Linux it compares a library stack with the kernel's whole path, not protocol code alone. \
    Also: probestack fast elides the UDP checksum on its one-hop CRC link (bsd and smoltcp \
    compute and verify it; on loopback Linux leaves it to the device's checksum offload, \
    so it is neither computed nor verified); probestack's memory link computes and checks \
    a CRC-32 per frame and moves frames through a ring, a wire and a receive queue, the \
    smoltcp link (two frame queues) does not: the row \"smoltcp 0.14, memory NIC\" runs \
    smoltcp on probestack's memory NICs, configured as probestack's, so that probestack \
    fast against it compares the two stacks alone on the same device; and the row \
    \"probestack fast, frame queue\" runs probestack on a frame queue of its own (a ring \
    each way, no CRC, so that fast computes and verifies every checksum as smoltcp does), \
    the same kind of device as smoltcp's, to compare the two stacks on smoltcp's terms.";

/// The last sentence of [`NOTE`]: how often probestack's ledger probes here.
fn sampling_note() -> String {
    format!(
        "probestack's ledger samples 1 message in {} (its default).",
        probestack::probe::DEFAULT_SAMPLE_EVERY
    )
}

pub const TCP_NOTE: &str = "TCP: every run opens a fresh connection and moves 4 MiB (bulk) \
    or 200 transactions (request/response) before the clock starts; after a bulk run's \
    clock stops, A stops writing and every byte it wrote must reach B, in order. Bulk: A's \
    application writes 64 KiB at a time until its stack takes no more, both ends are \
    polled, B's application reads everything waiting into a 256 KiB buffer without looking \
    at it; Gbit/s counts the payload it read, headers excluded. probestack: 1 MiB send and \
    receive buffers, window scaling, timestamps and SACK negotiated, Reno congestion \
    control from an initial window of 10 segments; fast sends one ACK per receive batch \
    (tcp_output_per_batch), bsd one for every second segment (delayed ACK 40 ms \
    otherwise); fast negotiates RFC 1146's alternate checksum on its \
    one-hop CRC link, so it computes and verifies no TCP checksum, and takes header \
    prediction's fast path; bsd sums every segment with RFC 1071's loop and takes the full \
    input path. smoltcp 0.14: device MTU = IP MTU + 14, no max burst size (so no clamp on \
    the window it advertises), 1 MiB socket buffers (window scale 5), built without its \
    congestion-control features (so no congestion control: it sends whatever the peer's \
    window allows), no timestamps (no generator set), SACK blocks sent but none acted on \
    (no SACK recovery: irrelevant on a link that loses nothing), delayed ACK 10 ms with an \
    ACK at once when more than one MSS is unacknowledged; its poll takes in every waiting \
    frame before it transmits, so one ACK answers a whole batch of segments, as in \
    probestack fast; it computes and verifies every TCP \
    checksum in software. So the per-byte work differs: probestack fast computes no TCP \
    checksum, but its memory link computes and checks a CRC-32 over every frame; smoltcp \
    sums every segment and its link computes no CRC; probestack bsd pays both; smoltcp on \
    the memory NICs pays both too (it has no use for the link's CRC). Linux: \
    TcpStream on 127.0.0.1, non-blocking, both ends in this thread, default (autotuned) \
    buffers; the loopback device's MTU is fixed at 65536 (changing it needs privileges), \
    so the kernel's bulk figure is reported once, beside MTU 65535, and it leaves \
    checksums to loopback's offload (none computed). Request/response: 64 bytes each way, \
    one transaction outstanding, Nagle off at both ends (probestack tcp_set_nodelay, \
    smoltcp set_nagle_enabled(false), Linux TCP_NODELAY), MTU 1500 for the in-process \
    stacks; A checks each response against its request.";

/// Per-run figures of one system in one workload; `None` once it has failed.
struct Series {
    values: Vec<f64>,
    sent: u64,
    intact: u64,
    /// TCP bulk, where the system counts them: retransmitted segments over the runs.
    retransmitted: Option<u64>,
    error: Option<String>,
}

impl Series {
    fn new() -> Series {
        Series {
            values: Vec::new(),
            sent: 0,
            intact: 0,
            retransmitted: None,
            error: None,
        }
    }
}

/// Runs `measure` for every system, round-robin, one warm-up round and `runs` rounds.
/// A system `leave_out` gives a reason for is not measured. Errors of probestack or
/// smoltcp end the experiment; the kernel's leave it out.
fn rounds<T>(
    systems: &[System],
    runs: usize,
    leave_out: impl Fn(System) -> Option<String>,
    mut measure: impl FnMut(System) -> Result<T, String>,
    mut keep: impl FnMut(&mut Series, T),
    mut progress: impl FnMut(usize),
) -> Result<Vec<Series>, String> {
    let mut series: Vec<Series> = systems
        .iter()
        .map(|&system| Series {
            error: leave_out(system),
            ..Series::new()
        })
        .collect();
    for round in 0..=runs {
        progress(round);
        for k in 0..systems.len() {
            let i = (round + k) % systems.len();
            let system = systems[i];
            if series[i].error.is_some() {
                continue;
            }
            match measure(system) {
                Ok(x) if round > 0 => keep(&mut series[i], x),
                Ok(_) => {}
                Err(e) if system.is_kernel() => series[i].error = Some(e),
                Err(e) => return Err(format!("{}: {e}", system.name())),
            }
        }
    }
    Ok(series)
}

/// What a workload's figures are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Figure {
    /// UDP one way: datagrams per second.
    Datagrams,
    /// UDP request/response: round-trip time in ns.
    RoundTrip,
    /// TCP bulk at this IP MTU: Gbit/s.
    Bulk(usize),
    /// TCP request/response: transactions per second.
    Transactions,
}

impl Figure {
    fn unit(self) -> &'static str {
        match self {
            Figure::Datagrams => "datagrams/s",
            Figure::RoundTrip => "ns",
            Figure::Bulk(_) => "Gbit/s",
            Figure::Transactions => "transactions/s",
        }
    }

    fn higher_is_better(self) -> bool {
        self != Figure::RoundTrip
    }
}

/// The rows (or the reasons for their absence) of one workload.
fn emit(
    systems: &[System],
    rows: &mut Vec<Row>,
    skipped: &mut Vec<Skipped>,
    workload: String,
    series: &mut [Series],
    figure: Figure,
) {
    let fast = median(&mut series[0].values.clone());
    let higher_is_better = figure.higher_is_better();
    let per_datagram = figure == Figure::Datagrams;
    for (i, s) in series.iter_mut().enumerate() {
        let system = systems[i];
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
            unit: figure.unit(),
            higher_is_better,
            ratio_vs_probestack: if i == 0 { 1.0 } else { ratio },
            run_min,
            run_max,
            ns_per_datagram: per_datagram.then(|| 1e9 / value),
            delivered_fraction: per_datagram.then(|| s.intact as f64 / s.sent.max(1) as f64),
            link_mtu: match figure {
                Figure::Bulk(_) if system == System::LinuxLoopback => Some(LOOPBACK_MTU),
                Figure::Bulk(mtu) => Some(mtu),
                _ => None,
            },
            retransmitted_segments: s.retransmitted,
        });
    }
}

/// Runs every workload on every system.
pub fn run(settings: Settings, mut progress: impl FnMut(&str)) -> Result<Results, String> {
    let runs = settings.runs.max(1);
    let millis = settings.millis.max(1);
    let mut rows = Vec::new();
    let mut skipped = Vec::new();
    // The kernel's veth pair, made once for the whole run, or why there is none.
    let veth = Veth::new();
    // Every system, but the veth's kernel when the veth could not be made.
    let measure_all = |system: System| match &veth {
        Err(why) if system == System::LinuxVeth => Some(why.clone()),
        _ => None,
    };
    let veth_ok = veth.as_ref().ok();

    for size in ONE_WAY_SIZES {
        let name = format!("udp_one_way_{size}");
        let mut series = rounds(
            &ONE_WAY_SYSTEMS,
            runs,
            measure_all,
            |system| one_way(system, size, millis, veth_ok),
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
                if ONE_WAY_SYSTEMS[i].is_kernel() {
                    s.error = Some(e);
                } else {
                    return Err(format!("{name}, {}: {e}", ONE_WAY_SYSTEMS[i].name()));
                }
            }
        }
        emit(
            &ONE_WAY_SYSTEMS,
            &mut rows,
            &mut skipped,
            name,
            &mut series,
            Figure::Datagrams,
        );
    }

    progress("devices alone");
    let devices = devices::measure(runs, millis)?;

    let name = format!("udp_rr_{RR_SIZE}");
    let mut p99s: Vec<Vec<f64>> = vec![Vec::new(); SYSTEMS.len()];
    let mut medians = rounds(
        &SYSTEMS,
        runs,
        measure_all,
        |system| {
            let mut rtts = request_response(system, RR_SIZE, millis, veth_ok)?;
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
            error: m.error.clone(),
            ..Series::new()
        })
        .collect();
    emit(
        &SYSTEMS,
        &mut rows,
        &mut skipped,
        format!("{name}_median"),
        &mut medians,
        Figure::RoundTrip,
    );
    emit(
        &SYSTEMS,
        &mut rows,
        &mut skipped,
        format!("{name}_p99"),
        &mut tails,
        Figure::RoundTrip,
    );

    let largest = TCP_MTUS[TCP_MTUS.len() - 1];
    for mtu in TCP_MTUS {
        let name = format!("tcp_bulk_{mtu}");
        // The veth's MTU for this table (the driver's largest if `mtu` is more).
        let veth_mtu = veth
            .as_ref()
            .map_err(Clone::clone)
            .and_then(|v| v.set_mtu(mtu));
        let mut series = rounds(
            &BULK_SYSTEMS,
            runs,
            |system| match system {
                System::LinuxLoopback if mtu != largest => Some(format!(
                    "the loopback device's MTU is fixed at {LOOPBACK_MTU}; the kernel's \
                     TCP bulk is reported once, under tcp_bulk_{largest}"
                )),
                System::LinuxVeth => veth_mtu.as_ref().err().cloned(),
                _ => None,
            },
            |system| tcp_bulk(system, mtu, millis, veth_ok),
            |s, r| {
                s.values.push(r.gbits());
                if let Some(n) = r.retransmitted {
                    *s.retransmitted.get_or_insert(0) += n;
                }
            },
            |round| progress(&format!("{name}: round {round} of {runs}")),
        )?;
        emit(
            &BULK_SYSTEMS,
            &mut rows,
            &mut skipped,
            name,
            &mut series,
            Figure::Bulk(mtu),
        );
        if let Ok(m) = veth_mtu {
            kernel::note_veth_mtu(&mut rows, &format!("tcp_bulk_{mtu}"), m);
        }
    }

    let name = format!("tcp_rr_{TCP_RR_SIZE}");
    // The veth at the in-process stacks' MTU.
    let veth_rr = veth
        .as_ref()
        .map_err(Clone::clone)
        .and_then(|v| v.set_mtu(1500));
    let mut series = rounds(
        &SYSTEMS,
        runs,
        |system| match system {
            System::LinuxVeth => veth_rr.as_ref().err().cloned(),
            _ => None,
        },
        |system| tcp_request_response(system, millis, veth_ok),
        |s, r| s.values.push(r.rate()),
        |round| progress(&format!("{name}: round {round} of {runs}")),
    )?;
    emit(
        &SYSTEMS,
        &mut rows,
        &mut skipped,
        name,
        &mut series,
        Figure::Transactions,
    );

    progress("floors");
    let passes = floors::measure_passes(runs);
    let floors = floors::floors(&rows, &devices, &passes);

    Ok(Results {
        experiment: "peers",
        runs,
        millis_per_run: millis,
        burst: BURST,
        tcp_write: TCP_WRITE,
        note: format!(
            "{NOTE} {} {TCP_NOTE} {}",
            sampling_note(),
            kernel::VETH_NOTE
        ),
        skipped,
        rows,
        devices,
        floors,
        passes,
        floors_note: floors::NOTE,
    })
}

/// What one run of one workload on one system did ([`run_one`]).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct OneRun {
    /// Datagrams delivered intact, round trips, bytes delivered or transactions.
    pub units: u64,
    /// What `units` counts.
    pub unit: &'static str,
    pub seconds: f64,
}

/// One timed run of `workload` (as the progress lines name them: `udp_one_way_64`,
/// `udp_rr_64`, `tcp_bulk_1500`, `tcp_rr_64`, ...) on the system named `system` (a
/// `--json` row's), built afresh and warmed up as in [`run`], for a profiler (`perf
/// record`, callgrind) to watch one stack at a time: `scripts/instructions_vs_smoltcp.sh`
/// divides the difference of two runs' instructions by the difference of their units.
/// The kernel over veth needs the namespaces the full run makes, so is not offered.
pub fn run_one(workload: &str, system: &str, millis: u64) -> Result<OneRun, String> {
    let offered = || {
        BULK_SYSTEMS
            .iter()
            .chain(&[System::ProbestackBatchQueue])
            .filter(|s| **s != System::LinuxVeth)
    };
    let Some(&system) = offered().find(|s| s.name() == system) else {
        let names: Vec<&str> = offered().map(|s| s.name()).collect();
        return Err(format!(
            "unknown system {system:?} (one of {})",
            names.join(", ")
        ));
    };
    let millis = millis.max(1);
    let one = |units: u64, unit, seconds| OneRun {
        units,
        unit,
        seconds,
    };
    let size_of = |prefix: &str| {
        workload
            .strip_prefix(prefix)
            .and_then(|n| n.parse::<usize>().ok())
    };
    if let Some(size) = size_of("udp_one_way_").filter(|s| ONE_WAY_SIZES.contains(s)) {
        let r = one_way(system, size, millis, None)?;
        return Ok(one(r.intact, "datagrams", r.seconds));
    }
    if workload == format!("udp_rr_{RR_SIZE}") {
        // The round trips' own times added up (the run's set-up is not in them).
        let rtts = request_response(system, RR_SIZE, millis, None)?;
        let seconds = rtts.iter().sum::<f64>() / 1e9;
        return Ok(one(rtts.len() as u64, "round trips", seconds));
    }
    if let Some(mtu) = size_of("tcp_bulk_").filter(|m| TCP_MTUS.contains(m)) {
        let r = tcp_bulk(system, mtu, millis, None)?;
        return Ok(one(r.bytes, "bytes", r.seconds));
    }
    if workload == format!("tcp_rr_{TCP_RR_SIZE}") {
        let r = tcp_request_response(system, millis, None)?;
        return Ok(one(r.transactions, "transactions", r.seconds));
    }
    Err(format!(
        "unknown workload {workload:?} (udp_one_way_64, udp_one_way_512, udp_rr_{RR_SIZE}, \
         tcp_bulk_1500, tcp_bulk_9000, tcp_bulk_65535, tcp_rr_{TCP_RR_SIZE})"
    ))
}

fn find<'r>(r: &'r Results, workload: &str, system: System) -> Option<&'r Row> {
    find_row(&r.rows, workload, system)
}

/// smoltcp's best TCP bulk figure in Gbit/s among `rows`, at any MTU, on either device
/// (NaN if it has none).
fn smoltcp_best_bulk(rows: &[Row]) -> f64 {
    TCP_MTUS
        .iter()
        .flat_map(|m| {
            let w = format!("tcp_bulk_{m}");
            [System::Smoltcp, System::SmoltcpMemlink]
                .map(|s| find_row(rows, &w, s).map(|x| x.value))
        })
        .flatten()
        .fold(f64::NAN, f64::max)
}

fn find_row<'r>(rows: &'r [Row], workload: &str, system: System) -> Option<&'r Row> {
    rows.iter()
        .find(|x| x.workload == workload && x.system == system.name())
}

/// `system` against smoltcp on its frame queue in `workload`, oriented so that above 1
/// means `system` is better; `None` when either was not measured.
fn against_smoltcp(r: &Results, workload: &str, system: System) -> Option<f64> {
    let (x, s) = (
        find(r, workload, system)?,
        find(r, workload, System::Smoltcp)?,
    );
    Some(if x.higher_is_better {
        x.value / s.value
    } else {
        s.value / x.value
    })
}

/// probestack fast on a frame queue against smoltcp on its own: the same kind of device
/// under both stacks, so the ratio is the stacks'.
fn same_device_note(t: &mut Table, r: &Results, workload: &str) {
    if let Some(ratio) = against_smoltcp(r, workload, System::ProbestackQueue) {
        t.note(format!(
            "on the same kind of device (a frame queue, no NIC model, checksums computed by \
             both): probestack fast / smoltcp {ratio:.2} (above 1, probestack is better)"
        ));
    }
}

/// Batched sends against smoltcp on the same kind of device.
fn batch_note(t: &mut Table, r: &Results, workload: &str) {
    if let Some(ratio) = against_smoltcp(r, workload, System::ProbestackBatchQueue) {
        t.note(format!(
            "batched sends: each burst in one udp_send_batch call (sendmmsg), the socket's \
             checks and template made once a burst; smoltcp has no batched send (each send \
             copies into the socket's ring, its poll sends them all). On a frame queue, \
             probestack fast with batched sends / smoltcp {ratio:.2}"
        ));
    }
}

fn skip_notes(t: &mut Table, r: &Results, workloads: &[&str]) {
    let mut said: Vec<String> = Vec::new();
    for (i, s) in r.skipped.iter().enumerate() {
        if !workloads.contains(&s.workload.as_str()) {
            continue;
        }
        let note = if kernel::veth_reason_given_above(&r.skipped[..i], s, workloads) {
            format!("{}: not measured (as above)", s.system)
        } else {
            format!("{}: not measured: {}", s.system, s.reason)
        };
        if s.system != System::LinuxVeth.name() || !said.contains(&note) {
            t.note(note.clone());
            said.push(note);
        }
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
        for system in ONE_WAY_SYSTEMS {
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
        same_device_note(&mut t, r, &w);
        batch_note(&mut t, r, &w);
        out.push(t);
    }
    if !r.devices.is_empty() {
        let mut t = Table::new(
            format!(
                "The devices alone: one {}-byte frame (a 64-byte UDP datagram's) from A to B, \
                 bursts of {}, no stack",
                devices::FRAME_BYTES,
                r.burst
            ),
            &["device", "ns/frame", "runs (ns)"],
        );
        for (d, kind) in r.devices.iter().zip(devices::DeviceKind::ALL) {
            t.row(vec![
                kind.label().to_string(),
                format!("{:.0}", d.ns_per_frame),
                format!("{:.0}-{:.0}", d.run_min, d.run_max),
            ]);
        }
        t.note(
            "through smoltcp's device interface, as the smoltcp rows use it: A writes the frame \
             into a transmit token, B reads it from a receive token; the memory NIC computes \
             and checks a CRC-32 and moves the frame through its ring, wire and receive \
             queue, the frame queue moves it through a VecDeque",
        );
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
    same_device_note(&mut t, r, &wm);
    t.note(NOTE);
    t.note(sampling_note());
    t.note(kernel::VETH_NOTE);
    out.push(t);

    for mtu in TCP_MTUS {
        let w = format!("tcp_bulk_{mtu}");
        let mut t = Table::new(
            format!(
                "TCP bulk one way, IP MTU {mtu}: payload delivered to B's application \
                 ({} KiB writes, both ends on one thread)",
                r.tcp_write / 1024
            ),
            &[
                "system",
                "Gbit/s",
                "runs (Gbit/s)",
                "retransmitted",
                "fast / system",
            ],
        );
        for system in BULK_SYSTEMS {
            if let Some(x) = find(r, &w, system) {
                let label = match x.link_mtu {
                    Some(m) if m != mtu => format!("{} (MTU {m})", system.label()),
                    _ => system.label().to_string(),
                };
                t.row(vec![
                    label,
                    format!("{:.2}", x.value),
                    format!("{:.2}-{:.2}", x.run_min, x.run_max),
                    x.retransmitted_segments
                        .map_or_else(|| "not counted".to_string(), |n| n.to_string()),
                    format!("{:.2}", x.ratio_vs_probestack),
                ]);
            }
        }
        t.note(rounds_note.clone());
        skip_notes(&mut t, r, &[w.as_str()]);
        same_device_note(&mut t, r, &w);
        // Paper 004's end-system optimizations against smoltcp's best in this run, on
        // either link.
        let smol_best = smoltcp_best_bulk(&r.rows);
        for system in [System::ProbestackZeroCopy, System::ProbestackZeroCopyQueue] {
            if let Some(zc) = find(r, &w, system).filter(|_| smol_best > 0.0) {
                t.note(format!(
                    "{} / smoltcp's best TCP bulk figure in this run ({smol_best:.2} \
                     Gbit/s): {:.2}x",
                    system.label(),
                    zc.value / smol_best
                ));
            }
        }
        out.push(t);
    }
    let w = format!("tcp_rr_{TCP_RR_SIZE}");
    let mut t = Table::new(
        format!("TCP request/response, {TCP_RR_SIZE} bytes each way, one outstanding, Nagle off"),
        &[
            "system",
            "transactions/s",
            "µs/transaction",
            "runs (k/s)",
            "fast / system",
        ],
    );
    for system in SYSTEMS {
        if let Some(x) = find(r, &w, system) {
            t.row(vec![
                system.label().to_string(),
                format!("{:.0} k", x.value / 1e3),
                format!("{:.2}", 1e6 / x.value),
                format!("{:.0}-{:.0}", x.run_min / 1e3, x.run_max / 1e3),
                format!("{:.2}", x.ratio_vs_probestack),
            ]);
        }
    }
    t.note(rounds_note);
    skip_notes(&mut t, r, &[w.as_str()]);
    same_device_note(&mut t, r, &w);
    t.note(TCP_NOTE);
    out.push(t);
    if !r.floors.is_empty() {
        out.push(floors_table(r));
    }
    out
}

/// The targets against their floors ([`floors`]).
fn floors_table(r: &Results) -> Table {
    let mut t = Table::new(
        "The targets against their floors: what a target allows per datagram or segment, \
         beside the work the device and the copying sockets do whatever the stack costs",
        &[
            "target",
            "smoltcp",
            "budget",
            "floor, memory NIC",
            "floor / budget",
            "floor, frame queue",
            "floor / budget",
            "streamed, frame queue",
            "streamed / budget",
        ],
    );
    let ns = |x: f64| {
        if x >= 1e3 {
            format!("{:.2} µs", x / 1e3)
        } else {
            format!("{x:.0} ns")
        }
    };
    for f in &r.floors {
        let label = match f.target {
            "udp_one_way_64_2x" => "UDP one way 64 B: 2x smoltcp",
            "tcp_bulk_1500_2x" => "TCP bulk, MTU 1500: 2x smoltcp",
            "tcp_bulk_9000_2x" => "TCP bulk, MTU 9000: 2x smoltcp",
            _ => "TCP bulk, MTU 65535, zero-copy (+ offload on the NIC): 3x smoltcp's best",
        };
        let smoltcp = if f.smoltcp_unit == "datagrams/s" {
            format!("{:.0} ns/datagram", 1e9 / f.smoltcp_value)
        } else {
            format!("{:.1} {}", f.smoltcp_value, f.smoltcp_unit)
        };
        let (queue, queue_ratio) = match f.floor_frame_queue_ns {
            Some(q) => (ns(q), format!("{:.2}", q / f.budget_ns)),
            None => ("(not measured)".into(), String::new()),
        };
        let (streamed, streamed_ratio) = match f.floor_frame_queue_streamed_ns {
            Some(q) => (ns(q), format!("{:.2}", q / f.budget_ns)),
            None => (String::new(), String::new()),
        };
        t.row(vec![
            label.to_string(),
            smoltcp,
            ns(f.budget_ns),
            ns(f.floor_memory_nic_ns),
            format!("{:.2}", f.floor_memory_nic_ns / f.budget_ns),
            queue,
            queue_ratio,
            streamed,
            streamed_ratio,
        ]);
    }
    t.note(r.floors_note);
    for f in &r.floors {
        t.note(format!(
            "{} on the memory NIC: {}",
            f.target, f.memory_nic_work
        ));
    }
    t
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
        names.extend(TCP_MTUS.iter().map(|m| format!("tcp_bulk_{m}")));
        names.push(format!("tcp_rr_{TCP_RR_SIZE}"));
        names
    }

    /// The unit a workload's rows promise.
    fn unit_of(workload: &str) -> &'static str {
        if workload.starts_with("udp_one_way") {
            "datagrams/s"
        } else if workload.starts_with("udp_rr") {
            "ns"
        } else if workload.starts_with("tcp_bulk") {
            "Gbit/s"
        } else {
            "transactions/s"
        }
    }

    const IN_PROCESS: [System; 4] = [
        System::ProbestackFast,
        System::ProbestackBsd,
        System::Smoltcp,
        System::SmoltcpMemlink,
    ];

    #[test]
    fn peers_tiny_run_gives_every_row_with_positive_values() {
        let r = run(Settings { runs: 5, millis: 3 }, |_| {}).unwrap();
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["experiment"], "peers");
        let rows = json["rows"].as_array().unwrap();
        for w in workload_names() {
            let systems = if w.starts_with("tcp_bulk") {
                &BULK_SYSTEMS[..]
            } else if w.starts_with("udp_one_way") {
                &ONE_WAY_SYSTEMS[..]
            } else {
                &SYSTEMS[..]
            };
            for &system in systems {
                let skipped = r
                    .skipped
                    .iter()
                    .any(|s| s.workload == w && s.system == system.name());
                let row = rows
                    .iter()
                    .find(|x| x["workload"] == w.as_str() && x["system"] == system.name());
                // The kernel's bulk is measured once, at its own MTU, beside 65535.
                let once = w.starts_with("tcp_bulk") && w != "tcp_bulk_65535";
                if system == System::LinuxLoopback && once {
                    assert!(skipped, "{w}: the kernel is left out");
                }
                if system.is_kernel() && skipped {
                    assert!(row.is_none(), "{w}: a skipped system has no row");
                    continue;
                }
                let row = row.unwrap_or_else(|| panic!("no row for {w}, {}", system.name()));
                let value = row["value"].as_f64().unwrap();
                assert!(value > 0.0 && value.is_finite(), "{w} {}", system.name());
                let ratio = row["ratio_vs_probestack"].as_f64().unwrap();
                assert!(ratio > 0.0 && ratio.is_finite(), "{w} {}", system.name());
                assert_eq!(row["unit"], unit_of(&w), "{w}");
                assert_eq!(row["higher_is_better"], unit_of(&w) != "ns", "{w}");
                if system == System::ProbestackFast {
                    assert_eq!(ratio, 1.0);
                }
                if let Some(mtu) = w.strip_prefix("tcp_bulk_") {
                    let want = if system == System::LinuxLoopback {
                        LOOPBACK_MTU.to_string()
                    } else {
                        mtu.to_string()
                    };
                    if system == System::LinuxVeth {
                        // The asked MTU, or the veth driver's largest below it.
                        let got = row["link_mtu"].as_u64().unwrap();
                        assert!(got >= 1500 && got <= mtu.parse().unwrap(), "{w}: {got}");
                    } else {
                        assert_eq!(row["link_mtu"].to_string(), want, "{w}");
                    }
                    let counted = row.get("retransmitted_segments").is_some();
                    let probestack = matches!(
                        system,
                        System::ProbestackFast
                            | System::ProbestackBsd
                            | System::ProbestackZeroCopy
                            | System::ProbestackQueue
                            | System::ProbestackZeroCopyQueue
                    );
                    assert_eq!(counted, probestack, "{w} {}", system.name());
                }
            }
        }
        // Where namespaces can be made, the veth is measured in every workload.
        if kernel::veth_unavailable().is_none() {
            assert!(
                r.skipped
                    .iter()
                    .all(|s| s.system != System::LinuxVeth.name()),
                "{:?}",
                r.skipped
            );
        }
        let printed = tables(&r);
        // The tables of the workloads, the devices' and the floors'.
        assert_eq!(
            printed.len(),
            ONE_WAY_SIZES.len() + 2 + TCP_MTUS.len() + 1 + 1
        );
        let devices: Vec<&str> = r.devices.iter().map(|d| d.device).collect();
        assert_eq!(devices, ["frame_queue", "memory_nic"]);
        // Every target beside its floors, each figure measured.
        let targets: Vec<&str> = json["floors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["target"].as_str().unwrap())
            .collect();
        assert_eq!(
            targets,
            [
                "udp_one_way_64_2x",
                "tcp_bulk_1500_2x",
                "tcp_bulk_9000_2x",
                "tcp_bulk_65535_zero_copy_offload_3x"
            ]
        );
        for f in &r.floors {
            assert!(f.budget_ns > 0.0 && f.budget_ns.is_finite(), "{}", f.target);
            assert!(f.floor_memory_nic_ns > 0.0, "{}", f.target);
            // The copying floors streamed as a transfer holds the data: the TCP bulk
            // targets at 1500 and 9000 only.
            let copying = matches!(f.target, "tcp_bulk_1500_2x" | "tcp_bulk_9000_2x");
            assert_eq!(
                f.floor_frame_queue_streamed_ns.is_some_and(|n| n > 0.0),
                copying,
                "{}",
                f.target
            );
        }
        assert_eq!(
            r.passes.len(),
            5 * TCP_MTUS.len() + floors::STREAMED_MTUS.len()
        );
        assert!(r.passes.iter().all(|p| p.ns > 0.0 && p.ns.is_finite()));
    }

    /// Runs of TCP bulk on `system` at every MTU it is measured at, B checking every byte
    /// it reads; `None` when the kernel cannot open a loopback connection here. The veth
    /// has its own test (kernel.rs), which needs root.
    fn checked_bulk(system: System) -> Vec<(usize, Option<BulkRun>)> {
        if system == System::LinuxVeth {
            return Vec::new();
        }
        if system == System::LinuxLoopback {
            let run = match KernelStreams::connect(KernelPath::Loopback, false) {
                Ok(mut s) => Some(bulk_on(&mut s, &RealClock::new(), 3, true, TCP_STALL).unwrap()),
                Err(e) => {
                    eprintln!("no loopback TCP here: {e}");
                    None
                }
            };
            return vec![(LOOPBACK_MTU, run)];
        }
        TCP_MTUS
            .iter()
            .map(|&mtu| {
                let run = tcp_bulk_checked(system, mtu, 3, true, None).unwrap();
                (mtu, Some(run))
            })
            .collect()
    }

    /// Every datagram a batch sends arrives whole, in both sizes (each stamped with its
    /// own sequence number, compared past it).
    #[test]
    fn peers_batched_bursts_arrive_intact() {
        for size in ONE_WAY_SIZES {
            let r = one_way(System::ProbestackBatchQueue, size, 3, None).unwrap();
            assert!(r.sent > 0, "{size}");
            assert_eq!(r.intact, r.sent, "{size}");
        }
    }

    #[test]
    fn peers_one_run_counts_its_units_and_names_what_it_does_not_know() {
        for (workload, unit) in [
            ("udp_one_way_64", "datagrams"),
            ("udp_rr_64", "round trips"),
            ("tcp_bulk_1500", "bytes"),
            ("tcp_rr_64", "transactions"),
        ] {
            for system in ["probestack_fast_queue", "smoltcp"] {
                let r = run_one(workload, system, 3).unwrap();
                assert_eq!(r.unit, unit, "{workload} on {system}");
                assert!(
                    r.units > 0 && r.seconds > 0.0,
                    "{workload} on {system}: {r:?}"
                );
            }
        }
        let r = run_one("udp_one_way_64", "probestack_fast_batch_queue", 3).unwrap();
        assert!(r.units > 0, "{r:?}");
        let e = run_one("udp_rr_64", "probestack_fast_batch_queue", 3).unwrap_err();
        assert_eq!(e, ONE_WAY_ONLY);
        let e = run_one("udp_one_way_65", "smoltcp", 3).unwrap_err();
        assert!(e.contains("unknown workload"), "{e}");
        let e = run_one("tcp_rr_64", "linux_veth", 3).unwrap_err();
        assert!(e.contains("unknown system") && e.contains("smoltcp"), "{e}");
    }

    #[test]
    fn peers_tcp_streams_arrive_intact() {
        for system in BULK_SYSTEMS {
            // Every byte B reads is compared with the byte A wrote at that offset, and
            // everything A wrote must arrive before the run ends.
            for (mtu, run) in checked_bulk(system) {
                if let Some(run) = run {
                    assert!(run.bytes > 0, "{} at MTU {mtu}", system.name());
                    assert!(run.gbits() > 0.0, "{} at MTU {mtu}", system.name());
                }
            }
            if system == System::LinuxVeth {
                continue;
            }
            if matches!(
                system,
                System::ProbestackZeroCopy | System::ProbestackZeroCopyQueue
            ) {
                assert_eq!(
                    tcp_request_response(system, 3, None).unwrap_err(),
                    BULK_ONLY,
                    "bulk only"
                );
                continue;
            }
            // Every response is compared with its request inside the run.
            if system == System::LinuxLoopback
                && KernelStreams::connect(KernelPath::Loopback, true).is_err()
            {
                continue;
            }
            let rr = tcp_request_response(system, 3, None).unwrap();
            assert!(rr.transactions > 0, "{}", system.name());
        }
    }

    #[test]
    fn peers_tcp_takes_the_mtu_asked() {
        let clock = RealClock::new();
        for mtu in TCP_MTUS {
            // probestack: the MSS follows the MTU (IP and TCP headers of 20 bytes each).
            for tuning in [Tuning::fast(), Tuning::bsd()] {
                let s = StackStreams::connect(tuning, mtu, false, NIC, &clock).unwrap();
                let c = s.pair.a.tcp_connection(s.a).unwrap();
                assert_eq!(c.mss(), (mtu - 40, mtu - 40));
            }
            // smoltcp: a full window goes out in frames of the Ethernet MTU asked.
            let mut s = SmolStreams::connect(Link::new(mtu), false, &clock).unwrap();
            let data = stream_pattern();
            assert_eq!(s.send(End::A, &data[..TCP_WRITE]).unwrap(), TCP_WRITE);
            s.poll(End::A, clock.now());
            let largest = s.link.a_to_b.frames.iter().map(Vec::len).max();
            assert_eq!(largest, Some(mtu + ETHERNET_HEADER), "MTU {mtu}");
        }
    }

    #[test]
    fn peers_zero_copy_runs_zero_copy_with_checksums_offloaded() {
        let clock = RealClock::new();
        let mut s = StackStreams::connect_zero_copy(9000, NIC, true, &clock).unwrap();
        let c = s.pair.a.tcp_connection(s.a).unwrap();
        assert!(!c.checksum_elided(), "checksums are computed, by the NICs");
        let run = bulk_on(&mut s, &clock, 3, true, TCP_STALL).unwrap();
        assert!(run.bytes > 0);
        let count = |st: &probestack::stack::Stack, k| st.ledger().counters().get(k);
        assert!(count(&s.pair.a, Counter::TcpZeroCopySegments) > 0);
        assert!(count(&s.pair.b, Counter::TcpZeroCopyRxBytes) > 0);
        assert_eq!(count(&s.pair.b, Counter::TcpNoChecksumIn), 0);
    }

    #[test]
    fn peers_zero_copy_on_a_frame_queue_copies_nothing_and_checks_every_sum() {
        let clock = RealClock::new();
        let mut s = StackStreams::connect_zero_copy(65535, QUEUE, true, &clock).unwrap();
        let run = bulk_on(&mut s, &clock, 3, true, TCP_STALL).unwrap();
        assert!(run.bytes > 0);
        let count = |st: &probestack::stack::Stack, k| st.ledger().counters().get(k);
        assert!(count(&s.pair.a, Counter::TcpZeroCopySegments) > 0);
        // B's application took A's loaned memory, none of it copied by the stack...
        assert!(count(&s.pair.b, Counter::TcpZeroCopyRxBytes) >= run.bytes);
        assert_eq!(count(&s.pair.b, Counter::TcpZeroCopyRxOddBytes), 0);
        assert_eq!(count(&s.pair.b, Counter::StackRxLinearized), 0);
        // ... and verified every segment's checksum (no CRC, no offload on a queue).
        assert_eq!(count(&s.pair.b, Counter::TcpNoChecksumIn), 0);
        assert!(!s.pair.a.tcp_connection(s.a).unwrap().checksum_elided());
    }

    /// Wraps a system so that B hears nothing: its stack is never polled and it never
    /// reads.
    struct Deaf<S>(S);

    impl<S: Streams> Streams for Deaf<S> {
        fn send(&mut self, end: End, data: &[u8]) -> Result<usize, String> {
            self.0.send(end, data)
        }

        fn recv(&mut self, end: End, buf: &mut [u8]) -> Result<Option<usize>, String> {
            match end {
                End::A => self.0.recv(end, buf),
                End::B => Ok(None),
            }
        }

        fn poll(&mut self, end: End, now: Instant) {
            if end == End::A {
                self.0.poll(end, now);
            }
        }
    }

    /// Wraps a system so that one byte B reads, well into the stream, is changed.
    struct Garbled<S> {
        inner: S,
        reads: usize,
    }

    impl<S: Streams> Streams for Garbled<S> {
        fn send(&mut self, end: End, data: &[u8]) -> Result<usize, String> {
            self.inner.send(end, data)
        }

        fn recv(&mut self, end: End, buf: &mut [u8]) -> Result<Option<usize>, String> {
            let r = self.inner.recv(end, buf)?;
            if let (End::B, Some(n)) = (end, r) {
                self.reads += 1;
                if self.reads == 5 {
                    buf[n / 2] ^= 0x40;
                }
            }
            Ok(r)
        }

        fn poll(&mut self, end: End, now: Instant) {
            self.inner.poll(end, now);
        }
    }

    #[test]
    fn peers_tcp_stalls_end_in_errors() {
        let clock = RealClock::new();
        let stall = std::time::Duration::from_millis(50);
        // Bulk: nothing reaches B's application, so the warm-up never ends; the stall
        // timeout ends the run.
        let s = StackStreams::connect(Tuning::fast(), 1500, false, NIC, &clock).unwrap();
        let start = WallInstant::now();
        let e = bulk_on(&mut Deaf(s), &clock, 1, false, stall).unwrap_err();
        assert!(e.contains("stalled"), "{e}");
        assert!(start.elapsed() < std::time::Duration::from_secs(10));
        let s = SmolStreams::connect(Link::new(1500), false, &clock).unwrap();
        let e = bulk_on(&mut Deaf(s), &clock, 1, false, stall).unwrap_err();
        assert!(e.contains("stalled"), "{e}");
        // Request/response: no response comes; the transaction times out.
        let s = StackStreams::connect(Tuning::fast(), 1500, true, NIC, &clock).unwrap();
        let e = rr_stream_on(&mut Deaf(s), &clock, 1, 50_000_000).unwrap_err();
        assert!(e.contains("no response"), "{e}");
    }

    #[test]
    fn peers_tcp_check_catches_a_changed_byte() {
        let clock = RealClock::new();
        let s = StackStreams::connect(Tuning::fast(), 1500, false, NIC, &clock).unwrap();
        let mut g = Garbled { inner: s, reads: 0 };
        let e = bulk_on(&mut g, &clock, 1, true, TCP_STALL).unwrap_err();
        assert!(e.contains("differs"), "{e}");
    }

    #[test]
    fn peers_in_process_datagrams_arrive_intact() {
        for system in IN_PROCESS {
            for size in ONE_WAY_SIZES {
                let run = one_way(system, size, 5, None).unwrap();
                assert!(run.sent > 0, "{}", system.name());
                assert_eq!(run.intact, run.sent, "{} at {size} bytes", system.name());
            }
            // Every reply is compared with its request inside the run.
            let rtts = request_response(system, RR_SIZE, 5, None).unwrap();
            assert!(rtts.iter().all(|x| *x > 0.0), "{}", system.name());
        }
    }

    #[test]
    fn peers_smoltcp_link_carries_checked_datagrams() {
        // A datagram whose payload is changed on the wire must not reach B: smoltcp
        // verifies the UDP checksum, as the default capabilities ask.
        let clock = RealClock::new();
        let mut p = SmolPeers::new(Link::new(1500), clock.now()).unwrap();
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
