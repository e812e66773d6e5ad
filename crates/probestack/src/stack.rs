//! The `Stack`: interfaces, routes, the IP and link layers' state, the buffer pool and the
//! ledger of one host (DESIGN.md §2).
//!
//! It does no I/O of its own and reads no clock: [`Stack::poll`] is told the time, moves
//! frames between the devices and the protocol layers, runs the timers that are due, and
//! returns when it next needs to run. Randomness (IP identifiers, later ISNs and ports)
//! comes from a seeded [`Rng`], so a run on a virtual clock replays exactly.
//!
//! The data flow, one call chain per frame: `poll` → driver batch → [`link`](crate::link)
//! (Ethernet, ARP) → [`ip`](crate::ip) (validation, reassembly, dispatch) → ICMP or a
//! transport; and down again for what they send.

use std::collections::VecDeque;

use crate::buf::{Pool, PoolConfig};
use crate::driver::{Device, DeviceCaps, DeviceContext, RxFrame};
use crate::ip::reassembly::{Reassembler, ReassemblyConfig};
use crate::ip::route::{Ipv4Cidr, NextHop, Route, RouteTable};
use crate::ip::SourceRouting;
use crate::link::arp::{ArpCache, ArpConfig};
use crate::probe::{Counter, Layer, Ledger, Op, Sampling, Side, TESTED};
use crate::rng::Rng;
use crate::socket::tcp::TcpSockets;
use crate::socket::udp::UdpSockets;
use crate::tcp::TcpConfig;
use crate::time::{earlier, Duration, Instant};
use crate::tuning::Tuning;
use crate::udp::pcb::PcbTable;
use crate::wire::ethernet::EthernetAddress;
use crate::wire::Ipv4Address;

/// How a stack is set up.
#[derive(Clone, Debug)]
pub struct StackConfig {
    pub tuning: Tuning,
    /// Seed of the stack's random numbers.
    pub seed: u64,
    /// Where the keys of the stack's ISNs, SYN cookies, timestamp offsets and ephemeral
    /// ports come from (RFC 6528, RFC 6056): the operating system by default, `seed` for
    /// a simulation that must replay exactly.
    pub secrets: Secrets,
    pub arp: ArpConfig,
    pub reassembly: ReassemblyConfig,
    /// Frames taken from a device per notification (the batch of interrupt coalescing).
    pub rx_batch: usize,
    /// TTL of datagrams the stack sends (RFC 1122 §3.2.1.7 asks for a configurable one;
    /// 64 is the usual value).
    pub ttl: u8,
    /// ICMP errors per second allowed, and the burst (RFC 1812 §4.3.2.8 rate limiting).
    pub icmp_errors_per_sec: u32,
    pub icmp_error_burst: u32,
    /// Echo replies kept for [`Stack::take_echo_reply`] before new ones are dropped.
    pub echo_reply_queue: usize,
    /// Cap on packet-buffer memory outstanding.
    pub buffer_limit_bytes: usize,
    /// Cap on the bytes reserved for socket buffers, all sockets together: a TCP
    /// connection's send and receive buffers, a bound UDP socket's receive queue limit.
    /// A socket that would pass it is refused (`NoSocketMemory`), a SYN or SYN-cookie ACK
    /// that would is dropped; either is counted in `stack.drop.socket_memory` (the
    /// equivalent of Linux's `tcp_mem` hard limit). See [`SocketMemory`].
    pub socket_memory_limit: usize,
    /// Settings new TCP sockets start with.
    pub tcp: TcpConfig,
    /// Whether datagrams carrying a source route (RFC 791 §3.1, LSRR and SSRR) are taken:
    /// off, every one is dropped and counted (`ip.drop.source_route`), as a Linux host
    /// does by default (`accept_source_route`) and RFC 7126 §4.3-4.4 recommends; on, one
    /// whose route is complete is taken, as RFC 1122 §3.2.1.8 (c) has a host be the final
    /// destination of a source route, and its route reversed for the answer (ICMP echo,
    /// RFC 1122 §3.2.2.6; a TCP connection it opens, RFC 9293 MUST-53), and one whose
    /// route goes on is dropped with a Source Route Failed (`ip.drop.source_route_failed`;
    /// a host does not forward, §3.3.5).
    pub accept_source_route: bool,
}

impl Default for StackConfig {
    fn default() -> Self {
        StackConfig {
            tuning: Tuning::fast(),
            seed: 0x5EED,
            secrets: Secrets::Os,
            arp: ArpConfig::default(),
            reassembly: ReassemblyConfig::default(),
            rx_batch: 64,
            ttl: 64,
            icmp_errors_per_sec: 100,
            icmp_error_burst: 50,
            echo_reply_queue: 1024,
            buffer_limit_bytes: 256 << 20,
            socket_memory_limit: DEFAULT_SOCKET_MEMORY_LIMIT,
            tcp: TcpConfig::default(),
            accept_source_route: false,
        }
    }
}

/// Where a stack's secret keys come from ([`StackConfig::secrets`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Secrets {
    /// Drawn from the operating system when the stack is made ([`crate::rng::os_random`]),
    /// so that no one outside the host can compute its ISNs or its SYN cookies (RFC 9293
    /// MUST-9; RFC 6528 §3 asks for a key of at least 128 bits, these are 128).
    Os,
    /// Drawn from [`StackConfig::seed`]'s sequence: the same on every run with the same
    /// seed, as a simulation that replays needs, and computable by anyone who knows the
    /// seed. For simulations and tests only.
    Seeded,
}

/// The default [`StackConfig::socket_memory_limit`]: 1 GiB, 512 TCP connections with the
/// default 1 MiB send and 1 MiB receive buffers (which are allocated when the connection
/// is made, so the cap bounds real memory).
pub const DEFAULT_SOCKET_MEMORY_LIMIT: usize = 1 << 30;

/// The stack-wide account of socket buffer memory: what is reserved against the limit,
/// and the most that ever was. A socket reserves its buffers' sizes when it is made (a
/// TCP connection: its send and receive buffer capacities, allocated then; a UDP socket:
/// its receive queue limit, when it is bound) and gives them back when it is freed, so
/// the account is of capacity promised, not bytes queued at the moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SocketMemory {
    pub limit: usize,
    pub reserved: usize,
    pub peak: usize,
}

impl SocketMemory {
    fn new(limit: usize) -> SocketMemory {
        SocketMemory {
            limit,
            ..SocketMemory::default()
        }
    }

    /// Takes `bytes` if they fit under the limit.
    fn try_reserve(&mut self, bytes: usize) -> bool {
        match self.reserved.checked_add(bytes) {
            Some(total) if total <= self.limit => {
                self.reserved = total;
                self.peak = self.peak.max(total);
                true
            }
            _ => false,
        }
    }

    fn release(&mut self, bytes: usize) {
        self.reserved = self.reserved.saturating_sub(bytes);
    }
}

/// An interface's addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InterfaceConfig {
    pub mac: EthernetAddress,
    /// The interface address and its subnet; a direct route to the subnet is added.
    pub cidr: Ipv4Cidr,
}

/// Why a send failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendError {
    /// No route to the destination.
    NoRoute,
    /// Larger than an IPv4 datagram can be.
    TooLarge { len: usize, max: usize },
    /// Don't-fragment was set and the datagram is larger than the path MTU.
    NeedsFragmentation { mtu: usize },
    /// No packet buffer could be had (the buffer memory limit).
    NoBuffer,
    /// A source route whose gateways and destination do not fit in one option.
    InvalidSourceRoute,
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SendError::NoRoute => write!(f, "no route to host"),
            SendError::TooLarge { len, max } => {
                write!(f, "message of {len} bytes is larger than the maximum {max}")
            }
            SendError::NeedsFragmentation { mtu } => {
                write!(f, "don't-fragment set and larger than the MTU of {mtu}")
            }
            SendError::NoBuffer => write!(f, "no buffer space"),
            SendError::InvalidSourceRoute => write!(f, "the source route does not fit"),
        }
    }
}

impl std::error::Error for SendError {}

/// An ICMP echo reply received.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EchoReply {
    pub from: Ipv4Address,
    pub ident: u16,
    pub seq_no: u16,
    pub data: Vec<u8>,
    pub received_at: Instant,
}

/// One interface: a device and what the stack keeps for it.
pub(crate) struct Interface {
    pub device: Box<dyn Device + Send>,
    pub caps: DeviceCaps,
    pub mac: EthernetAddress,
    pub cidr: Ipv4Cidr,
    /// The subnet's broadcast address; `None` for a /31 or /32, which have no host bits
    /// to spare (RFC 3021). Kept, as it is asked of every datagram received.
    pub broadcast: Option<Ipv4Address>,
    /// IP datagrams (no Ethernet header yet) waiting for their next hop's address.
    pub arp: ArpCache<crate::buf::PacketBuf>,
    /// The last batch ran out of budget with frames left: keep draining without waiting
    /// for another notification (as NAPI stays in polling mode).
    pub rx_more: bool,
}

/// A token bucket for ICMP errors.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RateLimiter {
    tokens: u64,
    burst: u64,
    per_sec: u64,
    last: Instant,
}

impl RateLimiter {
    fn new(per_sec: u32, burst: u32) -> RateLimiter {
        RateLimiter {
            tokens: burst as u64 * 1_000_000_000,
            burst: burst as u64 * 1_000_000_000,
            per_sec: per_sec as u64,
            last: Instant::ZERO,
        }
    }

    /// Takes one token if there is one. Tokens are kept in units of 1/10^9 so that the
    /// refill is exact in integer arithmetic.
    pub fn allow(&mut self, now: Instant) -> bool {
        let dt = (now - self.last).as_nanos();
        self.last = self.last.max(now);
        self.tokens = (self.tokens + dt.saturating_mul(self.per_sec)).min(self.burst);
        if self.tokens >= 1_000_000_000 {
            self.tokens -= 1_000_000_000;
            true
        } else {
            false
        }
    }
}

/// One host's TCP/IP stack.
pub struct Stack {
    pub(crate) config: StackConfig,
    pub(crate) tuning: Tuning,
    pub(crate) ledger: Ledger,
    pub(crate) rng: Rng,
    pub(crate) pool: Pool,
    pub(crate) ifaces: Vec<Interface>,
    pub(crate) routes: RouteTable,
    pub(crate) next_ident: u16,
    pub(crate) reassembler: Reassembler,
    pub(crate) socket_memory: SocketMemory,
    pub(crate) icmp_limiter: RateLimiter,
    pub(crate) echo_replies: VecDeque<EchoReply>,
    /// UDP's PCBs; each holds the index of its socket.
    pub(crate) udp_pcbs: PcbTable<usize>,
    pub(crate) udp_sockets: UdpSockets,
    /// TCP's PCBs (the same table and lookups as UDP's); each holds its socket's slot.
    pub(crate) tcp_pcbs: PcbTable<usize>,
    pub(crate) tcp: TcpSockets,
    /// Datagrams sent to one of our own addresses, delivered at the next poll.
    pub(crate) loopback: VecDeque<crate::buf::PacketBuf>,
    /// The frames of one receive batch, kept between polls so that draining allocates
    /// nothing (taken out while the batch runs up the stack).
    rx_batch: Vec<RxFrame>,
    pub(crate) now: Instant,
}

/// How many frames ahead of the one it runs up the stack the poll asks for a buffer's
/// header, and for its first bytes (`drain_device`; measured on `examples/tcp_bulk`: one
/// frame ahead only moved the wait into IP input).
const PREFETCH_HEADER_AHEAD: usize = 8;
const PREFETCH_DATA_AHEAD: usize = 4;

impl Stack {
    pub fn new(config: StackConfig) -> Stack {
        let mut rng = Rng::new(config.seed);
        let next_ident = rng.next_u32() as u16;
        let mut isn_key = [0u8; 16];
        rng.fill(&mut isn_key);
        let mut port_key = [0u8; 16];
        rng.fill(&mut port_key);
        if config.secrets == Secrets::Os {
            // After the seeded draws, so that what follows from the seed stays the same.
            crate::rng::os_random(&mut isn_key);
            crate::rng::os_random(&mut port_key);
        }
        let pool = Pool::new(
            PoolConfig::new(config.tuning.buffer_cache).with_limit(config.buffer_limit_bytes),
        );
        Stack {
            tuning: config.tuning,
            ledger: Ledger::new(),
            rng,
            pool,
            ifaces: Vec::new(),
            routes: RouteTable::new(),
            next_ident,
            reassembler: Reassembler::new(config.reassembly),
            socket_memory: SocketMemory::new(config.socket_memory_limit),
            icmp_limiter: RateLimiter::new(config.icmp_errors_per_sec, config.icmp_error_burst),
            echo_replies: VecDeque::new(),
            udp_pcbs: PcbTable::new(config.tuning.pcb_config()),
            udp_sockets: UdpSockets::default(),
            tcp_pcbs: PcbTable::new(config.tuning.pcb_config()),
            tcp: TcpSockets::new(config.tcp, isn_key, port_key),
            loopback: VecDeque::new(),
            rx_batch: Vec::with_capacity(config.rx_batch),
            now: Instant::ZERO,
            config,
        }
    }

    /// Adds an interface with its device and a direct route to its subnet; returns its
    /// index.
    pub fn add_interface(&mut self, device: Box<dyn Device + Send>, cfg: InterfaceConfig) -> usize {
        let index = self.ifaces.len();
        let caps = device.caps();
        if let Some(depot) = device.buffer_depot() {
            self.pool.set_depot(Some(depot));
        }
        self.ifaces.push(Interface {
            device,
            caps,
            mac: cfg.mac,
            cidr: cfg.cidr,
            broadcast: (cfg.cidr.prefix_len < 31).then(|| cfg.cidr.broadcast()),
            arp: ArpCache::new(self.config.arp),
            rx_more: false,
        });
        self.routes.add(Route {
            destination: cfg.cidr.network(),
            next_hop: NextHop::Direct,
            interface: index,
        });
        index
    }

    /// The file descriptors of the devices that have one ([`Device::readiness_fd`]), for a
    /// runner to wait on with epoll between polls.
    pub fn readiness_fds(&self) -> Vec<i32> {
        self.ifaces
            .iter()
            .filter_map(|i| i.device.readiness_fd())
            .collect()
    }

    /// The routing table, to add gateways and default routes.
    pub fn routes_mut(&mut self) -> &mut RouteTable {
        &mut self.routes
    }

    pub fn routes(&self) -> &RouteTable {
        &self.routes
    }

    /// A permanent ARP entry on an interface.
    pub fn add_static_arp(&mut self, iface: usize, ip: Ipv4Address, mac: EthernetAddress) {
        let Some(i) = self.ifaces.get_mut(iface) else {
            return;
        };
        let released = i.arp.insert_static(ip, mac);
        let now = self.now;
        for p in released {
            self.link_send_ipv4(TESTED, iface, mac, p, now);
        }
    }

    /// The interface's device capabilities.
    pub fn interface_caps(&self, iface: usize) -> Option<DeviceCaps> {
        self.ifaces.get(iface).map(|i| i.caps)
    }

    /// The counters the interface's device keeps itself ([`Device::counters`]).
    pub fn interface_counters(&self, iface: usize) -> Vec<(&'static str, u64)> {
        self.ifaces
            .get(iface)
            .map_or_else(Vec::new, |i| i.device.counters())
    }

    /// The interface's address.
    pub fn interface_cidr(&self, iface: usize) -> Option<Ipv4Cidr> {
        self.ifaces.get(iface).map(|i| i.cidr)
    }

    /// Whether `a` is one of this host's addresses.
    pub fn is_own_address(&self, a: Ipv4Address) -> bool {
        self.ifaces.iter().any(|i| i.cidr.address == a)
    }

    /// Whether `a` is a broadcast address here: the limited broadcast, or the broadcast
    /// address of an interface's subnet (one with host bits to spare: a /31 or /32 has
    /// none, RFC 3021).
    pub fn is_broadcast_address(&self, a: Ipv4Address) -> bool {
        a.is_broadcast() || self.ifaces.iter().any(|i| i.broadcast == Some(a))
    }

    /// Whether `a` may be the other end of a TCP connection, or the address one is made
    /// to: not unspecified, broadcast or multicast (RFC 9293 MUST-46, MUST-57, MUST-63),
    /// nor in 0/8 ("this network", RFC 1122 §3.2.1.3 (a)-(b): a source only while a host
    /// learns its address, never a destination), 127/8 (loopback, never off a host: this
    /// stack has no loopback interface) or 240/4 (reserved, RFC 1112 §4).
    pub(crate) fn is_unicast_peer(&self, a: Ipv4Address) -> bool {
        let first = a.0[0];
        !(first == 0
            || a.is_loopback()
            || first >= 240
            || a.is_multicast()
            || self.is_broadcast_address(a))
    }

    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    pub fn tuning(&self) -> Tuning {
        self.tuning
    }

    /// Changes the switches between experiments.
    pub fn set_tuning(&mut self, t: Tuning) {
        self.tuning = t;
        // Header templates were built under the old switches (checksum elision, offload).
        self.udp_sockets.forget_templates();
        self.pool.set_buffer_cache(t.buffer_cache);
        self.udp_pcbs.set_config(t.pcb_config());
        self.tcp_pcbs.set_config(t.pcb_config());
    }

    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    pub fn reassembler(&self) -> &Reassembler {
        &self.reassembler
    }

    /// Socket buffer memory: the limit, what is reserved now, the peak.
    pub fn socket_memory(&self) -> SocketMemory {
        self.socket_memory
    }

    /// Reserves `bytes` of socket buffer memory; when they would pass the limit, counts
    /// `stack.drop.socket_memory` and returns false.
    pub(crate) fn reserve_socket_memory(&mut self, bytes: usize) -> bool {
        let ok = self.socket_memory.try_reserve(bytes);
        if !ok {
            self.ledger.counters().inc(Counter::StackDropSocketMemory);
        }
        ok
    }

    /// Gives back what [`reserve_socket_memory`](Self::reserve_socket_memory) took.
    pub(crate) fn release_socket_memory(&mut self, bytes: usize) {
        self.socket_memory.release(bytes);
    }

    /// Moves frames and runs timers; returns when the stack next needs a poll (`None`:
    /// only when a device notifies).
    pub fn poll(&mut self, now: Instant) -> Option<Instant> {
        crate::probe::ledger::sampled!(self.ledger, s => self.poll_as(s, now))
    }

    fn poll_as(&mut self, s: impl Sampling, now: Instant) -> Option<Instant> {
        self.now = self.now.max(now);
        let now = self.now;

        for i in 0..self.ifaces.len() {
            self.drain_device(s, i, now);
            self.tcp_flush_deferred(s);
        }
        while let Some(p) = self.loopback.pop_front() {
            let rx = crate::driver::RxChecksum::None;
            let n = p.len();
            in_message!(self, from s, n, s => self.ip_input(s, crate::ip::LOOPBACK, p, rx, now));
        }
        self.tcp_flush_deferred(s);
        if !self.tcp.blocked.is_empty() {
            self.tcp_unblock(s);
        }
        // The timers' walk of the connections also finds their earliest deadline, so
        // the deadline returned needs no second walk (it equals `next_deadline()`).
        let tcp_deadline = self.run_timers(s, now);
        let _p = self
            .ledger
            .probe(s, Layer::Driver, Side::Receive, Op::Timer);
        self.deadline_given_tcp(tcp_deadline)
    }

    /// After a notification, takes up to a batch of frames and runs each up the stack.
    /// A batch that used its whole budget leaves the interface in polling mode, so the
    /// rest is taken at the next poll without another notification.
    fn drain_device(&mut self, s: impl Sampling, i: usize, now: Instant) {
        let mut batch = std::mem::take(&mut self.rx_batch);
        let budget = self.config.rx_batch.max(1);
        {
            let _p = self
                .ledger
                .probe(s, Layer::Driver, Side::Receive, Op::Notify);
            let cx = DeviceContext {
                now,
                ledger: &self.ledger,
            };
            let iface = &mut self.ifaces[i];
            let notified = iface.device.take_notification(&cx);
            if notified || iface.rx_more {
                iface.rx_more = iface.device.receive_burst(&cx, &mut batch, budget, s.on());
            }
        }
        if !batch.is_empty() {
            let mut frames = batch.drain(..);
            while let Some(rx) = frames.next() {
                // A batch of frames written long before is mostly out of cache: their
                // buffers' headers are asked for a few frames ahead, their first bytes
                // (which need the header to find) a little later.
                let ahead = frames.as_slice();
                if let Some(f) = ahead.get(PREFETCH_HEADER_AHEAD - 1) {
                    f.frame.prefetch_header();
                }
                if let Some(f) = ahead.get(PREFETCH_DATA_AHEAD - 1) {
                    f.frame.prefetch_data();
                }
                in_message!(self, from s, rx.frame.len(), s => self.link_input(s, i, rx, now));
            }
        }
        self.rx_batch = batch;
    }

    /// Runs the timers that are due; returns the earliest TCP timer left afterwards
    /// (what `TcpSockets::next_deadline` would then say).
    fn run_timers(&mut self, s: impl Sampling, now: Instant) -> Option<Instant> {
        for i in 0..self.ifaces.len() {
            if !self.ifaces[i].arp.may_be_due(now) {
                continue;
            }
            let timers = {
                let _p = self.ledger.probe(s, Layer::Link, Side::Send, Op::Timer);
                self.ifaces[i].arp.poll(now)
            };
            for p in timers.unresolved {
                self.ledger.counters().inc(Counter::ArpDropUnresolved);
                self.pool.free(p);
            }
            for ip in timers.requests {
                self.send_arp_request(s, i, ip, now);
            }
        }
        let tcp_deadline = self.tcp_timers(s, now);
        let expired = if self.reassembler.is_idle() {
            Vec::new()
        } else {
            let _p = self.ledger.probe(s, Layer::Ip, Side::Receive, Op::Timer);
            self.reassembler.expire(now)
        };
        for expired in expired {
            self.ledger.counters().inc(Counter::IpReassemblyTimeout);
            // RFC 1122 §3.3.2: Time Exceeded (code 1) only if the first fragment came.
            if let Some(first) = expired.first_fragment {
                self.icmp_time_exceeded_reassembly(s, &first, now);
            }
        }
        tcp_deadline
    }

    /// When the stack next needs a poll, as things stand (what [`poll`](Self::poll)
    /// returned, brought up to date with anything that arrived since, and with what the
    /// application's calls left for the next poll: now, after a TCP read that made a
    /// window update due under `tcp_output_per_batch`). Ask it after the application's
    /// turn. (It takes `&mut self` to bring the TCP timer queue up to date with the
    /// connections the application's calls changed.) With many TCP connections the
    /// answer may come early, never late: a timer that moved later since it was queued
    /// (`tcp::timer_queue`) is found not due at that time, and the poll then says when.
    pub fn next_deadline(&mut self) -> Option<Instant> {
        let tcp_deadline = self.tcp.next_deadline();
        self.deadline_given_tcp(tcp_deadline)
    }

    /// [`next_deadline`](Self::next_deadline) with the connections' earliest timer
    /// already known (`tcp_deadline`), as the poll's timer walk finds it.
    ///
    /// Always inlined: with each copy of `poll_as` calling it (and `next_deadline`), the
    /// compiler left it out of line in the probes build, a call per poll (`tcp_rr`: 53
    /// instructions a transaction).
    #[inline(always)]
    fn deadline_given_tcp(&self, tcp_deadline: Option<Instant>) -> Option<Instant> {
        let mut d = earlier(tcp_deadline, self.reassembler.next_deadline());
        for i in &self.ifaces {
            d = earlier(d, i.device.next_deadline());
            d = earlier(d, i.arp.next_deadline());
        }
        // Frames waiting, or output a read left for the end of the application's turn.
        if !self.loopback.is_empty()
            || !self.tcp.deferred.is_empty()
            || self.ifaces.iter().any(|i| i.rx_more)
        {
            d = earlier(d, Some(self.now));
        }
        if !self.tcp.blocked.is_empty() && self.ifaces.iter().any(|i| i.device.tx_ready()) {
            // A connection waits for a device that has room again.
            d = earlier(d, Some(self.now));
        }
        d
    }

    /// Sends an ICMP echo request (a ping) with `data`.
    pub fn ping(
        &mut self,
        dst: Ipv4Address,
        ident: u16,
        seq_no: u16,
        data: &[u8],
        now: Instant,
    ) -> Result<(), SendError> {
        self.now = self.now.max(now);
        in_message!(self, data.len(), s => self.icmp_send_echo(s, dst, ident, seq_no, data, None))
    }

    /// [`ping`](Self::ping) along a source route through `via`'s gateways (as `ping -g`
    /// does; RFC 1122 §3.2.1.8 (c) has a host originate source routes). Errors as `ping`,
    /// and `InvalidSourceRoute` when the route and the destination do not fit in one
    /// option.
    pub fn ping_via(
        &mut self,
        dst: Ipv4Address,
        via: &SourceRouting,
        (ident, seq_no): (u16, u16),
        data: &[u8],
        now: Instant,
    ) -> Result<(), SendError> {
        self.now = self.now.max(now);
        in_message!(self, data.len(), s => self.icmp_send_echo(s, dst, ident, seq_no, data, Some(via)))
    }

    /// The oldest echo reply received and not yet taken.
    pub fn take_echo_reply(&mut self) -> Option<EchoReply> {
        self.echo_replies.pop_front()
    }

    /// A fresh IP identifier (RFC 6864: unique per source, destination and protocol for
    /// the datagram's lifetime; a counter from a random start).
    pub(crate) fn next_ident(&mut self) -> u16 {
        self.next_ident = self.next_ident.wrapping_add(1);
        self.next_ident
    }

    /// How long reassembly keeps an incomplete datagram.
    pub fn reassembly_timeout(&self) -> Duration {
        self.config.reassembly.timeout
    }
}

/// Runs `$body` as one message of `$stack`'s ledger (a frame received, a datagram sent),
/// with `$s` bound to the copy of the path the message takes once the ledger has drawn
/// whether to probe it. `$body` must not return from the function around it, or the
/// message would stay open.
///
/// The common case, a new message not probed, runs the unprobed copy knowing it without a
/// second look at the ledger, and its end takes its flag off the mark again. Each copy of
/// `$body` appears once, so that what it calls has one caller in each copy and is inlined
/// there as in the probe-free build. A message opened inside another joins it, and the copy it runs
/// depends on where it is opened:
///
/// - `from $caller` (code of the stack, `$caller` the copy it runs): code in the unprobed
///   copy runs inside no message or inside an unprobed one, so the message it opens runs
///   the probed copy only if the ledger draws it; code in the probed copy goes on in it
///   (its probes test the flag, so it serves a nested message of either kind);
/// - without (an entry the application calls): inside a message of the application's
///   own, the probed copy (`lab echo` and `lab cpu` open those).
macro_rules! in_message {
    ($stack:expr, from $caller:expr, $size:expr, $s:ident => $body:expr) => {{
        let caller = $caller;
        let _ = caller; // (only the probes build asks it)
        $crate::stack::in_message!(@run $stack, $size,
            e => $crate::probe::Sampling::on(caller) || e.drawn(), $s => $body)
    }};
    ($stack:expr, $size:expr, $s:ident => $body:expr) => {
        $crate::stack::in_message!(@run $stack, $size, e => !e.new_unprobed(), $s => $body)
    };
    // `$probed`, given what the ledger said (`$e`), picks the probed copy.
    (@run $stack:expr, $size:expr, $e:ident => $probed:expr, $s:ident => $body:expr) => {{
        #[cfg(feature = "probes")]
        let r = {
            let $e = $stack.ledger.enter_message($size);
            if $probed {
                $crate::probe::ledger::cold_path();
                let $s = $crate::probe::Sampled;
                let r = $body;
                $stack.ledger.leave_message($e);
                r
            } else {
                let $s = $crate::probe::Unsampled;
                let r = $body;
                $stack.ledger.leave_undrawn($e);
                r
            }
        };
        #[cfg(not(feature = "probes"))]
        let r = {
            let _ = $size;
            let $s = $crate::probe::Unsampled;
            $body
        };
        r
    }};
}
pub(crate) use in_message;

#[cfg(test)]
mod tests {
    use super::*;

    /// By default the ISN key comes from the operating system (RFC 9293 MUST-9): two
    /// stacks made alike give the same 4-tuple at the same instant unrelated ISNs, and
    /// knowing the seed does not give them. Seeded, the same seed gives the same ISN, so
    /// a simulation replays.
    #[test]
    fn isns_are_unpredictable_unless_a_simulation_asks_for_its_seed() {
        let local = (Ipv4Address::new(198, 18, 0, 1), 40_000);
        let remote = (Ipv4Address::new(198, 18, 0, 2), 80);
        let now = Instant::from_millis(5);
        let isn = |secrets| {
            let st = Stack::new(StackConfig {
                secrets,
                ..StackConfig::default()
            });
            (st.tcp.isn.isn(local, remote, now), st.tcp.port_key)
        };
        let (seeded, os) = (isn(Secrets::Seeded), isn(Secrets::Os));
        assert_eq!(seeded, isn(Secrets::Seeded));
        assert_ne!(os.0, seeded.0);
        assert_ne!(os.1, seeded.1);
        let again = isn(Secrets::Os);
        assert_ne!(os.0, again.0, "two stacks drew the same ISN key");
        assert_ne!(os.1, again.1);
    }

    /// A message that begins in code running the unprobed copy (a delayed ACK sent from
    /// the timers, in a poll outside any message) and is drawn for probing runs the probed
    /// copy: `in_message!` picks the copy after the draw, not before. Were it to go on in
    /// the caller's copy, the message would be recorded with its wall time and no probes.
    #[cfg(feature = "probes")]
    #[test]
    fn a_message_begun_in_unprobed_code_runs_the_probed_copy() {
        use crate::sim::{HostConfig, Pair, ADDR_B};
        let mut p = Pair::new(HostConfig::with_mtu(1500), HostConfig::with_mtu(1500)).unwrap();
        p.a.ledger().set_sample_every(0);
        p.b.ledger().set_sample_every(0);
        let l = p.b.tcp_listen((ADDR_B, 7), 8).unwrap();
        let c = p.a.tcp_connect((ADDR_B, 7)).unwrap();
        let mut accepted = None;
        assert!(p.run_until(Duration::from_secs(1), |p| {
            accepted = accepted.or(p.b.tcp_accept(l).ok());
            accepted.is_some() && p.a.tcp_state(c) == Ok(crate::tcp::State::Established)
        }));
        p.run_for(Duration::from_secs(1));
        // One small segment: B delays its ACK (RFC 1122 §4.2.3.2) to its timer.
        assert_eq!(p.a.tcp_send(c, &[1u8; 100]), Ok(100));
        p.settle();
        assert_eq!(p.a.tcp_send_queued(c), Ok(100), "the ACK is not delayed");
        p.b.ledger().set_sample_every(1);
        p.b.ledger().clear();
        p.run_for(Duration::from_millis(500));
        assert_eq!(p.a.tcp_send_queued(c), Ok(0));
        let snap = p.b.ledger().snapshot();
        let ack = snap.merged();
        assert!(ack.messages >= 1, "no message probed");
        for layer in [Layer::Tcp, Layer::Ip, Layer::Driver] {
            assert!(
                ack.cells
                    .iter()
                    .any(|x| x.layer == layer && x.side == Side::Send),
                "no {layer:?} send probe in the ACK's message: {:?}",
                ack.cells
            );
        }
    }

    #[test]
    fn socket_memory_refuses_past_the_limit_and_gives_back() {
        let mut m = SocketMemory::new(100);
        assert!(m.try_reserve(60));
        assert!(!m.try_reserve(41));
        assert_eq!(m.reserved, 60);
        assert!(m.try_reserve(40));
        assert!(!m.try_reserve(1));
        m.release(70);
        assert_eq!((m.reserved, m.peak), (30, 100));
        // Overflowing sizes are refused, not wrapped.
        assert!(!m.try_reserve(usize::MAX));
        m.release(usize::MAX);
        assert_eq!(m.reserved, 0);
    }

    /// Output deferred to the end of a receive batch (`tcp_output_per_batch`) runs for
    /// every connection input marked, each once, and leaves the list empty: two
    /// connections each get two full segments in one batch, and each answers with its
    /// ACK (RFC 5681 §4.2: at once for every second segment).
    #[test]
    fn deferred_output_runs_for_every_connection_of_the_batch() {
        use crate::sim::{HostConfig, Pair, ADDR_B};
        let mut p = Pair::new(HostConfig::with_mtu(1500), HostConfig::with_mtu(1500)).unwrap();
        assert!(p.b.tuning().tcp_output_per_batch);
        let l = p.b.tcp_listen((ADDR_B, 7), 8).unwrap();
        let c = [
            p.a.tcp_connect((ADDR_B, 7)).unwrap(),
            p.a.tcp_connect((ADDR_B, 7)).unwrap(),
        ];
        let mut accepted = 0;
        assert!(p.run_until(Duration::from_secs(1), |p| {
            accepted += usize::from(p.b.tcp_accept(l).is_ok());
            accepted == 2
                && c.iter()
                    .all(|&h| p.a.tcp_state(h) == Ok(crate::tcp::State::Established))
        }));
        let counters = |s: &Stack| {
            let k = s.ledger().counters();
            (
                k.get(Counter::TcpSegmentsIn),
                k.get(Counter::TcpSegmentsOut),
            )
        };
        // Whatever the handshake left to say (window updates, delayed ACKs) is said, and
        // both stacks are polled at the time the segments go (their timers start then).
        p.run_for(Duration::from_secs(1));
        p.settle();
        // Two full segments: the MSS less the timestamps option (RFC 7323 §3.2).
        let mss = p.a.tcp_connection(c[0]).unwrap().mss().0;
        let data = vec![7u8; 2 * (mss - 12)];
        for h in c {
            assert_eq!(p.a.tcp_send(h, &data), Ok(data.len()));
        }
        let now = p.now();
        p.a.poll(now);
        let (in_before, out_before) = counters(&p.b);
        p.b.poll(now);
        let (seg_in, seg_out) = counters(&p.b);
        assert_eq!(seg_in - in_before, 4, "the four segments in one batch");
        assert_eq!(seg_out - out_before, 2, "an ACK from each connection");
        assert!(p.b.tcp.deferred.is_empty());
    }

    #[test]
    fn rate_limiter_allows_a_burst_then_the_rate() {
        let mut r = RateLimiter::new(10, 3);
        let t0 = Instant::from_millis(1);
        assert!(r.allow(t0) && r.allow(t0) && r.allow(t0));
        assert!(!r.allow(t0));
        // 100 ms later one token has come back.
        let t1 = Instant::from_millis(101);
        assert!(r.allow(t1));
        assert!(!r.allow(t1));
    }
}
