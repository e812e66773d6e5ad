//! TCP sockets, BSD-shaped: a listener (bind and listen in one call, then accept) and a
//! stream (connect, send, receive, shutdown, close). Like the UDP sockets they are
//! non-blocking handles into the stack; [`blocking`](crate::socket::blocking) waits.
//!
//! The socket layer's work is charged to `Layer::Socket`: argument and state checks, the
//! copies between the application's buffers and the connection's, and the accept queue.
//! A send or a receive runs TCP output at once (as 4.4BSD's `tcp_usrreq` calls
//! `tcp_output`), so data, ACKs and window updates leave without waiting for a poll.

use std::collections::VecDeque;

use crate::buf::ExtBuf;
use crate::ip::{IpFields, RouteTo, SourceRouting};
use crate::probe::{Counter, Layer, Op, Sampling, Side, TESTED};
use crate::socket::blocking::block_on;
use crate::stack::Stack;
use crate::tcp::connection::{ConnError, ConnStats, Connection, State, TcpConfig, ZeroCopyRx};
use crate::tcp::isn::IsnGenerator;
use crate::tcp::syn_cookie::SynCookies;
use crate::tcp::timer_queue::TimerQueue;
use crate::time::{earlier, Clock, Duration, Instant};
use crate::udp::pcb::{PcbError, PcbId};
use crate::wire::Ipv4Address;

/// An address and port: one end of a connection.
pub type Endpoint = (Ipv4Address, u16);

/// A TCP socket of a stack: a listener or a stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TcpHandle {
    pub(crate) index: usize,
    pub(crate) generation: u32,
}

/// What went wrong, as a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TcpError {
    /// Not now: no connection to accept, no data, no buffer space (non-blocking).
    WouldBlock,
    /// Another socket has this binding.
    AddrInUse,
    /// The local address is not one of the host's.
    AddrNotAvailable,
    /// No ephemeral port is free for this destination.
    NoPortsLeft,
    /// The operation needs a connection (or a listener) and this socket is not one.
    NotConnected,
    /// Sending after shutdown or close.
    Shutdown,
    /// The peer refused the connection (RST to our SYN).
    ConnectionRefused,
    /// The peer reset the connection.
    ConnectionReset,
    /// The connection timed out (retransmissions or keepalives unanswered), or a
    /// blocking call waited its whole timeout.
    TimedOut,
    /// No route to the destination.
    NoRoute,
    /// Not a valid destination (address 0 or port 0).
    InvalidAddress,
    /// The handle is closed or belongs to no socket.
    BadHandle,
    /// The connection's buffers would pass the stack's socket memory limit
    /// (`StackConfig::socket_memory_limit`; ENOBUFS).
    NoSocketMemory,
    /// An option's value is out of range (EINVAL): a TTL of 0, a DSCP past 63.
    InvalidArgument,
    /// ICMP said the network or the host cannot be reached (ENETUNREACH, EHOSTUNREACH):
    /// a connection that timed out after such an error, or the soft error itself
    /// ([`Stack::tcp_soft_error`]).
    NetworkUnreachable,
    HostUnreachable,
    /// ICMP said a segment's header was at fault (parameter problem; EPROTO), the soft
    /// error or the error of a connection that timed out after it.
    ProtocolError,
}

impl std::fmt::Display for TcpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TcpError::WouldBlock => "operation would block",
            TcpError::AddrInUse => "address in use",
            TcpError::AddrNotAvailable => "address not available",
            TcpError::NoPortsLeft => "no ephemeral port free",
            TcpError::NotConnected => "not connected",
            TcpError::Shutdown => "cannot send after shutdown",
            TcpError::ConnectionRefused => "connection refused",
            TcpError::ConnectionReset => "connection reset by peer",
            TcpError::TimedOut => "timed out",
            TcpError::NoRoute => "no route to host",
            TcpError::InvalidAddress => "invalid address",
            TcpError::BadHandle => "bad socket handle",
            TcpError::NoSocketMemory => "no socket buffer memory",
            TcpError::InvalidArgument => "invalid argument",
            TcpError::NetworkUnreachable => "network unreachable",
            TcpError::HostUnreachable => "host unreachable",
            TcpError::ProtocolError => "protocol error",
        })
    }
}

impl std::error::Error for TcpError {}

impl From<ConnError> for TcpError {
    fn from(e: ConnError) -> TcpError {
        match e {
            ConnError::Refused => TcpError::ConnectionRefused,
            ConnError::Reset => TcpError::ConnectionReset,
            ConnError::TimedOut => TcpError::TimedOut,
            ConnError::NetUnreachable => TcpError::NetworkUnreachable,
            ConnError::HostUnreachable => TcpError::HostUnreachable,
            ConnError::ProtocolError => TcpError::ProtocolError,
        }
    }
}

/// A listening socket.
pub(crate) struct Listener {
    pub local: (Ipv4Address, u16),
    /// Most connections handshaking or waiting to be accepted (listen's backlog).
    pub backlog: usize,
    /// Established connections not yet accepted (slot indices).
    pub accept_queue: VecDeque<usize>,
    /// Connections in SYN-RECEIVED.
    pub embryonic: usize,
    /// Settings the accepted connections start with.
    pub config: TcpConfig,
    /// The socket asked for RFC 1146 "no checksum" on its connections.
    pub no_checksum: bool,
    /// When it last answered a SYN with a cookie: ACKs are checked for cookies only
    /// while one it sent could still be valid.
    pub cookie_sent_at: Option<Instant>,
}

pub(crate) enum Kind {
    Listener(Listener),
    Stream(Box<Connection>),
}

pub(crate) struct TcpSocket {
    pub kind: Kind,
    pub pcb: Option<PcbId>,
    /// The listener a passively opened connection belongs to until it is accepted.
    pub parent: Option<usize>,
    /// Socket buffer bytes reserved for it against the stack's limit, given back when
    /// its slot is freed ([`Stack::tcp_free_slot`]).
    pub reserved: usize,
}

struct Slot {
    generation: u32,
    socket: Option<TcpSocket>,
    /// Lent out mutably since the timer queue last heard of its deadline (listed in
    /// `TcpSockets::touched`); always set while the table has no queue, so that lending
    /// costs nothing but this flag's test.
    touched: bool,
    /// The deadline the timer queue holds for it: its connection's earliest timer or
    /// an earlier time, `None` only when it has none
    /// ([`settle_timers`](TcpSockets::settle_timers)).
    queued: Option<Instant>,
}

impl Slot {
    /// The earliest timer of the connection in the slot, if it holds one.
    fn deadline(&self) -> Option<Instant> {
        match &self.socket {
            Some(TcpSocket {
                kind: Kind::Stream(c),
                ..
            }) => c.next_deadline(),
            _ => None,
        }
    }
}

/// Notes that slot `index` is lent out mutably, for the next
/// [`settle_timers`](TcpSockets::settle_timers): in line, only the test of the slot's
/// flag, which every lookup after the first in a poll finds set.
#[inline(always)]
fn lend(touched: &mut Vec<usize>, slot: &mut Slot, index: usize) {
    if !slot.touched {
        first_lend(touched, slot, index);
    }
}

/// [`lend`]'s first time for a slot since the last settle. Out of line: with the push
/// (and its growth path) in line at every lookup, the lookups' callers ran slower.
#[cold]
#[inline(never)]
fn first_lend(touched: &mut Vec<usize>, slot: &mut Slot, index: usize) {
    slot.touched = true;
    touched.push(index);
}

/// The stack's TCP sockets and what they share.
pub(crate) struct TcpSockets {
    slots: Vec<Slot>,
    free: Vec<usize>,
    pub isn: IsnGenerator,
    /// SYN cookies, under the ISN key (their hash input is tagged apart).
    pub cookies: SynCookies,
    pub port_key: [u8; 16],
    pub port_counter: u32,
    /// Settings new sockets start with.
    pub config: TcpConfig,
    /// Connections with output waiting for room in their device's transmit queue.
    pub blocked: Vec<usize>,
    /// Connections whose output waits for the end of the receive batch, or of the
    /// application's turn after a read (`tcp_output_per_batch`).
    pub deferred: Vec<usize>,
    /// The connections' timers ordered, once the table has more than [`QUEUE_FROM`]
    /// slots (`None` before: a walk over a few slots costs less than keeping a queue).
    /// It learns a connection's deadlines from [`settle_timers`](Self::settle_timers),
    /// which reads the slots lent out mutably since the last settle (`touched`): a
    /// connection's timers change only through `&mut` access, and every such access
    /// passes through [`get_mut`](Self::get_mut), [`at_mut`](Self::at_mut) or
    /// [`insert`](Self::insert).
    timers: Option<TimerQueue>,
    touched: Vec<usize>,
    /// The slots whose timers are due, as [`take_due`](Self::take_due) lists them (kept
    /// between polls for its allocation).
    pub due: Vec<usize>,
}

impl TcpSockets {
    pub fn new(config: TcpConfig, isn_key: [u8; 16], port_key: [u8; 16]) -> TcpSockets {
        TcpSockets {
            slots: Vec::new(),
            free: Vec::new(),
            isn: IsnGenerator::new(isn_key),
            cookies: SynCookies::new(isn_key),
            port_key,
            port_counter: 0,
            config,
            blocked: Vec::new(),
            deferred: Vec::new(),
            timers: None,
            touched: Vec::new(),
            due: Vec::new(),
        }
    }

    pub fn get(&self, h: TcpHandle) -> Option<&TcpSocket> {
        self.slots
            .get(h.index)
            .filter(|s| s.generation == h.generation)
            .and_then(|s| s.socket.as_ref())
    }

    /// The socket of a handle, lent out mutably (noted as [`at_mut`](Self::at_mut) says).
    #[inline(always)]
    pub fn get_mut(&mut self, h: TcpHandle) -> Option<&mut TcpSocket> {
        let slot = self.slots.get_mut(h.index)?;
        if slot.generation != h.generation || slot.socket.is_none() {
            return None;
        }
        lend(&mut self.touched, slot, h.index);
        slot.socket.as_mut()
    }

    pub fn at(&self, index: usize) -> Option<&TcpSocket> {
        self.slots.get(index).and_then(|s| s.socket.as_ref())
    }

    /// The socket at a slot, lent out mutably: the slot is noted for
    /// [`settle_timers`](Self::settle_timers), as whatever borrows it may change its
    /// timers.
    #[inline(always)]
    pub fn at_mut(&mut self, index: usize) -> Option<&mut TcpSocket> {
        let slot = self.slots.get_mut(index)?;
        slot.socket.as_ref()?;
        lend(&mut self.touched, slot, index);
        slot.socket.as_mut()
    }

    /// The connection at a slot, if the slot holds one.
    pub fn conn_mut(&mut self, index: usize) -> Option<&mut Connection> {
        match self.at_mut(index) {
            Some(TcpSocket {
                kind: Kind::Stream(c),
                ..
            }) => Some(c),
            _ => None,
        }
    }

    pub fn handle_of(&self, index: usize) -> Option<TcpHandle> {
        self.slots
            .get(index)
            .filter(|s| s.socket.is_some())
            .map(|s| TcpHandle {
                index,
                generation: s.generation,
            })
    }

    pub fn insert(&mut self, socket: TcpSocket) -> TcpHandle {
        let index = match self.free.pop() {
            Some(index) => {
                self.slots[index].socket = Some(socket);
                index
            }
            None => {
                self.slots.push(Slot {
                    generation: 0,
                    socket: Some(socket),
                    // Without a queue, set for good; with one, set by `lend` below.
                    touched: self.timers.is_none(),
                    queued: None,
                });
                if self.timers.is_none() && self.slots.len() > QUEUE_FROM {
                    self.start_queue();
                }
                self.slots.len() - 1
            }
        };
        // A connection may come with its timers already set.
        let slot = &mut self.slots[index];
        lend(&mut self.touched, slot, index);
        TcpHandle {
            index,
            generation: slot.generation,
        }
    }

    pub fn remove(&mut self, index: usize) -> Option<TcpSocket> {
        let slot = self.slots.get_mut(index)?;
        let s = slot.socket.take()?;
        slot.generation = slot.generation.wrapping_add(1);
        self.free.push(index);
        // A touched slot stays listed; settling finds it empty.
        if let (Some(_), Some(timers)) = (slot.queued.take(), &mut self.timers) {
            timers.set(index, None);
        }
        Some(s)
    }

    /// Slot indices of every connection.
    /// Slots in use or free: indices below this may hold a socket.
    pub fn slot_count(&self) -> usize {
        self.slots.len()
    }

    pub fn connection_indices(&self) -> impl Iterator<Item = usize> + '_ {
        self.slots.iter().enumerate().filter_map(|(i, s)| {
            matches!(
                s.socket,
                Some(TcpSocket {
                    kind: Kind::Stream(_),
                    ..
                })
            )
            .then_some(i)
        })
    }

    /// Starts the timer queue: every slot is listed for the next settle.
    fn start_queue(&mut self) {
        self.timers = Some(TimerQueue::new());
        self.touched.clear();
        for (index, slot) in self.slots.iter_mut().enumerate() {
            slot.touched = true;
            self.touched.push(index);
        }
    }

    /// Tells the timer queue the deadlines of the connections lent out mutably since it
    /// last heard. The queue holds each connection's earliest timer or an earlier time:
    /// a deadline that moved later (a retransmission timer restarted by an ACK, a
    /// delayed ACK sent with data) is left where it was and put right when it comes up
    /// ([`take_due`](Self::take_due)), which spares the heap the churn of timers restarted
    /// on nearly every segment; one that moved earlier, or went, is re-keyed at once.
    #[inline]
    pub fn settle_timers(&mut self) {
        if !self.touched.is_empty() {
            self.settle_touched();
        }
    }

    fn settle_touched(&mut self) {
        let Some(timers) = self.timers.as_mut() else {
            return;
        };
        while let Some(index) = self.touched.pop() {
            // Listed slots exist: the table never shrinks.
            let slot = &mut self.slots[index];
            slot.touched = false;
            let queued = match (slot.deadline(), slot.queued) {
                (Some(d), Some(q)) if q <= d => continue,
                (None, None) => continue,
                (d, _) => d,
            };
            slot.queued = queued;
            timers.set(index, queued);
        }
    }

    /// Lists the slots of the connections with a timer due at `now` in `self.due` (earliest
    /// first with a queue, in slot order without), and returns the earliest timer of the
    /// others. With a queue, each due slot is taken off it until it is settled again, so
    /// a connection whose timers stay due after they run is run once per call, not
    /// forever; one queued early whose timer has moved on goes back in at its time.
    #[inline]
    pub fn take_due(&mut self, now: Instant) -> Option<Instant> {
        if self.timers.is_some() {
            return self.take_due_queued(now);
        }
        // Usually none is due: a pass that only reads says so and finds the earliest,
        // and the pass that lists the due ones is left out.
        let mut any_due = false;
        let mut earliest: Option<Instant> = None;
        for slot in &self.slots {
            match slot.deadline() {
                Some(d) if d <= now => any_due = true,
                later => earliest = earlier(earliest, later),
            }
        }
        if any_due {
            let listed = self.slots.iter().map(Slot::deadline).enumerate();
            let due = listed.filter_map(|(i, d)| d.is_some_and(|d| d <= now).then_some(i));
            self.due.extend(due);
        }
        earliest
    }

    /// [`take_due`](Self::take_due) from the queue.
    #[inline(never)]
    fn take_due_queued(&mut self, now: Instant) -> Option<Instant> {
        self.settle_timers();
        let timers = self.timers.as_mut()?;
        while let Some(index) = timers.pop_due(now) {
            let slot = &mut self.slots[index];
            slot.queued = None;
            match slot.deadline() {
                Some(d) if d <= now => self.due.push(index),
                later => {
                    slot.queued = later;
                    timers.set(index, later);
                }
            }
        }
        timers.earliest()
    }

    /// When a connection's timer may next be due: the earliest; with a queue, earlier
    /// than that when a timer moved later since it was queued (then a poll at that time
    /// finds nothing due and the next answer is later); never later than the earliest.
    pub fn next_deadline(&mut self) -> Option<Instant> {
        self.settle_timers();
        match &self.timers {
            Some(timers) => timers.earliest(),
            None => self
                .slots
                .iter()
                .fold(None, |earliest, slot| earlier(earliest, slot.deadline())),
        }
    }
}

/// A table of more slots than this keeps its connections' timers in a queue
/// ([`TcpSockets::timers`]) from then on; a smaller one walks its slots at every poll.
/// The walk costs about 3 ns a connection (an idle poll took 22 ns with one connection,
/// 35 with ten, 280 with 100 and 1.4 µs with 500 before the queue, `examples/tcp_connect`);
/// keeping the queue up to date costs a settle for each connection a poll used, about
/// 7 ns: tried from the first slot, a one-connection TCP request/response transaction
/// ran 5.2% more instructions than with the walk (callgrind, `lab peers --one
/// tcp_rr_64`, 8,871 → 9,333). So a small table walks: an idle poll with sixteen
/// connections took 44-45 ns, less than the queue would cost a poll that uses most of
/// them; a larger table's idle polls cost no more than an empty one's.
const QUEUE_FROM: usize = 16;

/// RFC 6335 §6: the dynamic port range.
const EPHEMERAL: std::ops::RangeInclusive<u16> = 49152..=65535;

impl Stack {
    /// A listener on `local` (address 0.0.0.0 for all of the host's) with room for
    /// `backlog` connections handshaking or waiting to be accepted.
    pub fn tcp_listen(
        &mut self,
        local: (Ipv4Address, u16),
        backlog: usize,
    ) -> Result<TcpHandle, TcpError> {
        let _p = self
            .ledger
            .probe(TESTED, Layer::Socket, Side::Receive, Op::ArgCheck);
        if local.1 == 0 {
            return Err(TcpError::InvalidAddress);
        }
        if !local.0.is_unspecified() && !self.is_own_address(local.0) {
            return Err(TcpError::AddrNotAvailable);
        }
        let listener = Listener {
            local,
            backlog: backlog.max(1),
            accept_queue: VecDeque::new(),
            embryonic: 0,
            config: self.tcp.config,
            no_checksum: false,
            cookie_sent_at: None,
        };
        let h = self.tcp.insert(TcpSocket {
            kind: Kind::Listener(listener),
            pcb: None,
            parent: None,
            reserved: 0,
        });
        match self.tcp_pcbs.insert(local, None, h.index) {
            Ok(id) => {
                if let Some(s) = self.tcp.get_mut(h) {
                    s.pcb = Some(id);
                }
                Ok(h)
            }
            Err(e) => {
                // A listener reserves no socket memory.
                self.tcp.remove(h.index);
                Err(match e {
                    PcbError::AddrInUse => TcpError::AddrInUse,
                    _ => TcpError::AddrNotAvailable,
                })
            }
        }
    }

    /// An established connection from the listener's queue.
    pub fn tcp_accept(&mut self, h: TcpHandle) -> Result<TcpHandle, TcpError> {
        let _p = self
            .ledger
            .probe(TESTED, Layer::Socket, Side::Receive, Op::SocketBuffer);
        let s = self.tcp.get_mut(h).ok_or(TcpError::BadHandle)?;
        let Kind::Listener(l) = &mut s.kind else {
            return Err(TcpError::NotConnected);
        };
        let index = l.accept_queue.pop_front().ok_or(TcpError::WouldBlock)?;
        if let Some(c) = self.tcp.at_mut(index) {
            c.parent = None;
        }
        self.tcp.handle_of(index).ok_or(TcpError::BadHandle)
    }

    /// Opens a connection to `remote` from an ephemeral port (RFC 6056) on the outgoing
    /// interface's address. Returns at once with the SYN sent; the handle's state
    /// becomes ESTABLISHED when the handshake completes (or an error is reported).
    pub fn tcp_connect(&mut self, remote: (Ipv4Address, u16)) -> Result<TcpHandle, TcpError> {
        self.tcp_connect_with(remote, self.tcp.config)
    }

    /// [`tcp_connect`](Self::tcp_connect) with settings for this connection (buffer
    /// sizes, Nagle, keepalive...).
    pub fn tcp_connect_with(
        &mut self,
        remote: (Ipv4Address, u16),
        config: TcpConfig,
    ) -> Result<TcpHandle, TcpError> {
        self.tcp_connect_from(remote, (Ipv4Address::UNSPECIFIED, 0), config, false)
    }

    /// The general connect: from a given local address (the unspecified one: the
    /// outgoing interface's, RFC 9293 MUST-43 and MUST-44) and port (0: an ephemeral
    /// one), asking for RFC 1146 "no checksum" when `no_checksum` (the socket option of
    /// paper 000; the stack also asks on its own when `checksum_elision` is on and the
    /// route is one CRC hop). A local address that is not the host's is
    /// [`TcpError::AddrNotAvailable`].
    pub fn tcp_connect_from(
        &mut self,
        remote: (Ipv4Address, u16),
        local: (Ipv4Address, u16),
        config: TcpConfig,
        no_checksum: bool,
    ) -> Result<TcpHandle, TcpError> {
        self.tcp_open(remote, local, config, no_checksum, None)
    }

    /// [`tcp_connect_with`](Self::tcp_connect_with) along a source route through `via`'s
    /// gateways (RFC 9293 MUST-51: an application MUST be able to name one on an active
    /// open; it takes precedence over any route the peer's segments bring, MUST-52).
    /// Every segment carries it, and so has that many bytes less data (RFC 9293 §3.7.1).
    pub fn tcp_connect_via(
        &mut self,
        remote: (Ipv4Address, u16),
        via: SourceRouting,
        config: TcpConfig,
    ) -> Result<TcpHandle, TcpError> {
        self.tcp_open(
            remote,
            (Ipv4Address::UNSPECIFIED, 0),
            config,
            false,
            Some(via),
        )
    }

    /// The active open behind the connect calls.
    fn tcp_open(
        &mut self,
        remote: (Ipv4Address, u16),
        local: (Ipv4Address, u16),
        config: TcpConfig,
        no_checksum: bool,
        via: Option<SourceRouting>,
    ) -> Result<TcpHandle, TcpError> {
        let now = self.now;
        // Connecting is rare: its probes test the ledger's flag where they stand.
        let s = TESTED;
        let p = self
            .ledger
            .probe(s, Layer::Socket, Side::Send, Op::ArgCheck);
        if remote.1 == 0 || !self.is_unicast_peer(remote.0) {
            return Err(TcpError::InvalidAddress);
        }
        let route = match via {
            Some(v) => Some(RouteTo::new(v, remote.0, true).ok_or(TcpError::InvalidArgument)?),
            None => None,
        };
        // The way out: to the first gateway of a source route.
        let hop = route.map_or(remote.0, |r| r.first_hop());
        let route_addr = self.source_address_for(hop).ok_or(TcpError::NoRoute)?;
        let local_addr = match local.0 {
            a if a.is_unspecified() => route_addr,
            a if self.is_own_address(a) => a,
            _ => return Err(TcpError::AddrNotAvailable),
        };
        drop(p);
        let reserved = config.buffer_bytes();
        if !self.reserve_socket_memory(reserved) {
            return Err(TcpError::NoSocketMemory);
        }
        // The slot is taken first so that the PCB can name it; it holds the connection
        // once its port and initial sequence number are known.
        let h = self.tcp.insert(TcpSocket {
            kind: Kind::Listener(Listener {
                local: (local_addr, 0),
                backlog: 0,
                accept_queue: VecDeque::new(),
                embryonic: 0,
                config,
                no_checksum,
                cookie_sent_at: None,
            }),
            pcb: None,
            parent: None,
            reserved,
        });
        let port = match local.1 {
            0 => self.tcp_ephemeral_bind(s, local_addr, remote, h.index),
            p => {
                let _c = self.ledger.probe(s, Layer::Tcp, Side::Send, Op::PcbConnect);
                self.tcp_pcbs
                    .insert((local_addr, p), Some(remote), h.index)
                    .map(|id| (p, id))
                    .map_err(|_| TcpError::AddrInUse)
            }
        };
        let (port, id) = match port {
            Ok(x) => x,
            Err(e) => {
                self.tcp_free_slot(h.index);
                return Err(e);
            }
        };
        let local = (local_addr, port);
        let iss = self.tcp.isn.next_isn(local, remote, now);
        // A routed segment passes gateways: elision's one hop does not hold.
        let ask = no_checksum || (route.is_none() && self.checksum_elidable(remote.0));
        let mut conn = self.tcp_new_connection((local, remote), config, iss, ask, route);
        conn.connect();
        if let Some(sock) = self.tcp.get_mut(h) {
            sock.kind = Kind::Stream(Box::new(conn));
            sock.pcb = Some(id);
        }
        self.ledger.counters().inc(Counter::TcpActiveOpens);
        self.tcp_output(s, h.index);
        Ok(h)
    }

    /// Binds a connection's PCB to a free ephemeral port, trying from an offset chosen
    /// per destination (RFC 6056).
    fn tcp_ephemeral_bind(
        &mut self,
        s: impl Sampling,
        local_addr: Ipv4Address,
        remote: (Ipv4Address, u16),
        index: usize,
    ) -> Result<(u16, PcbId), TcpError> {
        let _c = self.ledger.probe(s, Layer::Tcp, Side::Send, Op::PcbConnect);
        self.tcp.port_counter = self.tcp.port_counter.wrapping_add(1);
        let first = crate::tcp::isn::ephemeral_port_offset(
            &self.tcp.port_key,
            local_addr,
            remote,
            self.tcp.port_counter,
            EPHEMERAL,
        );
        let span = u32::from(*EPHEMERAL.end() - *EPHEMERAL.start()) + 1;
        for i in 0..span {
            let port =
                *EPHEMERAL.start() + ((u32::from(first - *EPHEMERAL.start()) + i) % span) as u16;
            // A port with a listener on it is left to the listener.
            let listened = self
                .tcp_pcbs
                .iter()
                .any(|(_, b, _)| b.local.1 == port && b.foreign.is_none());
            if listened {
                continue;
            }
            if let Ok(id) = self
                .tcp_pcbs
                .insert((local_addr, port), Some(remote), index)
            {
                return Ok((port, id));
            }
        }
        Err(TcpError::NoPortsLeft)
    }

    fn tcp_conn(&self, h: TcpHandle) -> Result<&Connection, TcpError> {
        match &self.tcp.get(h).ok_or(TcpError::BadHandle)?.kind {
            Kind::Stream(c) => Ok(c),
            Kind::Listener(_) => Err(TcpError::NotConnected),
        }
    }

    fn tcp_conn_mut(&mut self, h: TcpHandle) -> Result<&mut Connection, TcpError> {
        match &mut self.tcp.get_mut(h).ok_or(TcpError::BadHandle)?.kind {
            Kind::Stream(c) => Ok(c),
            Kind::Listener(_) => Err(TcpError::NotConnected),
        }
    }

    /// Queues data to send; returns how much was taken (fewer bytes than given when the
    /// send buffer is full; [`TcpError::WouldBlock`] when it has no room at all).
    pub fn tcp_send(&mut self, h: TcpHandle, data: &[u8]) -> Result<usize, TcpError> {
        crate::probe::ledger::sampled!(self.ledger, s => {
            self.tcp_queue(s, h, data.len(), Op::UserCopy, |c| c.send_slices(data))
        })
    }

    /// Zero-copy send (paper 004 §3.1): queues as much of the loaned `data` as the send
    /// buffer has room for, by reference, and returns how much. The stack holds slices of
    /// the loan until the peer acknowledges them; the application learns that it may
    /// reuse the memory from [`Loan::is_complete`](crate::buf::Loan::is_complete) (or
    /// [`Loan::try_reclaim`](crate::buf::Loan::try_reclaim)) once every byte it loaned is
    /// acknowledged and no frame holds it. Over a device that cannot gather
    /// ([`DeviceCaps::scatter_gather`](crate::driver::DeviceCaps::scatter_gather)) the
    /// driver copies the data after all, counted as `driver.tx_linearized`. Errors as
    /// [`tcp_send`](Self::tcp_send).
    pub fn tcp_send_loan(&mut self, h: TcpHandle, data: &ExtBuf) -> Result<usize, TcpError> {
        crate::probe::ledger::sampled!(self.ledger, s => {
            self.tcp_queue(s, h, data.len(), Op::SocketCheck, |c| c.send_loan(data))
        })
    }

    /// Queues `data` as urgent data (RFC 9293 §3.8.5; `send` with `MSG_OOB` on a BSD
    /// socket), as [`tcp_send`](Self::tcp_send) does, and moves the urgent pointer past
    /// the last byte taken: the peer is told that urgent data is on its way and where it
    /// ends, through a closed window too (a window probe carries the pointer), and
    /// probestack sends it at once, Nagle or not. The data stays in the stream: a
    /// probestack peer reads it in order ([`tcp_urgent_remaining`](Self::tcp_urgent_remaining)
    /// says how much of what it reads is urgent); a BSD-style peer such as Linux, unless
    /// its socket has `SO_OOBINLINE`, takes the last urgent byte out of the stream as
    /// out-of-band data. New applications should not use it (RFC 9293 SHLD-13); a TCP
    /// must offer it (MUST-30). Errors as [`tcp_send`](Self::tcp_send).
    pub fn tcp_send_urgent(&mut self, h: TcpHandle, data: &[u8]) -> Result<usize, TcpError> {
        crate::probe::ledger::sampled!(self.ledger, s => {
            self.tcp_queue(s, h, data.len(), Op::UserCopy, |c| c.send_urgent(data))
        })
    }

    /// How much urgent data is still to be read on `h` (RFC 9293 MUST-33): the bytes from
    /// the next read up to the end of the peer's urgent data, counting any not yet
    /// arrived; 0 when there is none (normal mode).
    pub fn tcp_urgent_remaining(&self, h: TcpHandle) -> Result<usize, TcpError> {
        Ok(self.tcp_conn(h)?.urgent_remaining())
    }

    /// Whether urgent data arrived on `h` with none pending, or the end of the peer's
    /// urgent data moved on, since the last call (RFC 9293 MUST-32's signal, which a BSD
    /// socket raises as SIGURG); asking clears it. A sans-IO stack has no upcall: the
    /// application polls this as it polls readiness.
    pub fn tcp_take_urgent_signal(&mut self, h: TcpHandle) -> Result<bool, TcpError> {
        Ok(self.tcp_conn_mut(h)?.take_urgent_signal())
    }

    /// The checks the sends share, then `queue` (which takes what fits, charged to
    /// `op`), then output.
    fn tcp_queue(
        &mut self,
        s: impl Sampling,
        h: TcpHandle,
        len: usize,
        op: Op,
        queue: impl FnOnce(&mut Connection) -> usize,
    ) -> Result<usize, TcpError> {
        let n = {
            let _p = self
                .ledger
                .probe(s, Layer::Socket, Side::Send, Op::SocketCheck);
            // One lookup of the socket for the checks and the queueing.
            let c = match &mut self.tcp.get_mut(h).ok_or(TcpError::BadHandle)?.kind {
                Kind::Stream(c) => c,
                Kind::Listener(_) => return Err(TcpError::NotConnected),
            };
            if let Some(e) = c.error {
                return Err(e.into());
            }
            // A stream that cannot send and has no error is one whose sending side was
            // shut down: its FIN queued or sent, its close perhaps complete (CLOSED after
            // both FINs; a connect shut down before its SYN-ACK), as a BSD socket's
            // SS_CANTSENDMORE answers EPIPE in any state.
            if !c.state().can_send() || c.fin_queued() {
                return Err(TcpError::Shutdown);
            }
            if len == 0 {
                return Ok(0);
            }
            let _c = self.ledger.probe(s, Layer::Socket, Side::Send, op);
            queue(c)
        };
        if n == 0 {
            return Err(TcpError::WouldBlock);
        }
        self.ledger.set_message_size(s, n);
        self.tcp_output(s, h.index);
        Ok(n)
    }

    /// Takes received data; `Ok(0)` is the end of the stream (the peer's FIN, everything
    /// before it read).
    pub fn tcp_recv(&mut self, h: TcpHandle, buf: &mut [u8]) -> Result<usize, TcpError> {
        crate::probe::ledger::sampled!(self.ledger, s => self.tcp_recv_as(s, h, buf))
    }

    fn tcp_recv_as(
        &mut self,
        s: impl Sampling,
        h: TcpHandle,
        buf: &mut [u8],
    ) -> Result<usize, TcpError> {
        let n = {
            let _p = self
                .ledger
                .probe(s, Layer::Socket, Side::Receive, Op::SocketCheck);
            let Some(TcpSocket {
                kind: Kind::Stream(c),
                ..
            }) = self.tcp.get_mut(h)
            else {
                return Err(TcpError::BadHandle);
            };
            let asked_none = buf.is_empty();
            let nothing = |c: &Connection| match nothing_to_read(c) {
                Ok(()) => Ok(0),
                Err(TcpError::WouldBlock) if asked_none => Ok(0),
                Err(e) => Err(e),
            };
            if c.rx.is_empty() {
                return nothing(c);
            }
            let _c = self
                .ledger
                .probe(s, Layer::Socket, Side::Receive, Op::UserCopy);
            let n = c.recv_into(buf, self.tuning.checksum, &self.ledger, self.now);
            if n == 0 && c.rx.is_empty() {
                // Unverified segments were all there was, and they failed.
                return nothing(c);
            }
            if c.zero_copy_rx != ZeroCopyRx::Off {
                self.ledger
                    .counters()
                    .add(Counter::TcpZeroCopyRxOddBytes, n as u64);
            }
            // A read that opened no window worth announcing (the usual one) leaves
            // nothing to send: TCP output's idle answer, from the connection in hand.
            if c.output_idle() {
                self.ledger.counters().inc(Counter::TcpOutputIdle);
                return Ok(n);
            }
            n
        };
        self.tcp_output_after_read(s, h.index);
        Ok(n)
    }

    /// Zero-copy receive (paper 004 §3.1): with `on`, in-order data that a NIC with
    /// header/data split placed on page boundaries is kept as whole pages, handed to
    /// [`tcp_recv_zero_copy`](Self::tcp_recv_zero_copy) by reference; the rest ("odd
    /// data": the part of a segment past its last whole page, out-of-order data) is
    /// copied as usual. From a device that does not split
    /// ([`DeviceCaps::header_split`](crate::driver::DeviceCaps::header_split), looked up
    /// on the route to the peer now), the data a sender passed by reference and the device
    /// carried across (its loan, its shared blocks: a frame queue, the memory NIC's DMA)
    /// goes to the application as it came, whole segments, page boundaries or not (with
    /// `Tuning::tcp_send_by_reference` on here, which keeps such data by reference), and
    /// anything else is odd data: the sender's memory then stays held (its loan
    /// incomplete, its blocks not reused) until this application drops what it took,
    /// which is why Linux copies MSG_ZEROCOPY data looped to a local socket instead
    /// (Documentation/networking/msg_zerocopy.rst, its "Loopback" section). What
    /// the application gets each way is counted
    /// (`tcp.zero_copy.rx_page_bytes`, `tcp.zero_copy.rx_odd_bytes`).
    pub fn tcp_set_zero_copy_receive(&mut self, h: TcpHandle, on: bool) -> Result<(), TcpError> {
        let remote = self.tcp_conn(h)?.remote.0;
        let mode = if !on {
            ZeroCopyRx::Off
        } else if self.tcp_rx_header_split(remote) {
            ZeroCopyRx::Pages
        } else {
            ZeroCopyRx::AsSent
        };
        self.tcp_conn_mut(h)?.zero_copy_rx = mode;
        Ok(())
    }

    /// Takes up to `max` bytes from the front of the received stream without copying
    /// them when they are whole pages (see
    /// [`tcp_set_zero_copy_receive`](Self::tcp_set_zero_copy_receive)), with a copy
    /// otherwise. `Ok(None)` is the end of the stream, an empty buffer the answer to
    /// `max` 0 when data waits; errors as [`tcp_recv`](Self::tcp_recv). The application owns the buffer it gets; dropping it
    /// frees the pages.
    pub fn tcp_recv_zero_copy(
        &mut self,
        h: TcpHandle,
        max: usize,
    ) -> Result<Option<ExtBuf>, TcpError> {
        crate::probe::ledger::sampled!(self.ledger, s => self.tcp_recv_zero_copy_as(s, h, max))
    }

    fn tcp_recv_zero_copy_as(
        &mut self,
        s: impl Sampling,
        h: TcpHandle,
        max: usize,
    ) -> Result<Option<ExtBuf>, TcpError> {
        let chunk = {
            let p = self
                .ledger
                .probe(s, Layer::Socket, Side::Receive, Op::SocketCheck);
            let Some(TcpSocket {
                kind: Kind::Stream(c),
                ..
            }) = self.tcp.get_mut(h)
            else {
                return Err(TcpError::BadHandle);
            };
            if c.rx.is_empty() {
                return nothing_to_read(c).map(|()| None);
            }
            if max == 0 {
                return Ok(Some(ExtBuf::new(Vec::new())));
            }
            drop(p);
            // Pages change hands (socket buffer work); ring bytes are copied out.
            let op = if c.rx.front_is_shared() {
                Op::SocketBuffer
            } else {
                Op::UserCopy
            };
            let _c = self.ledger.probe(s, Layer::Socket, Side::Receive, op);
            c.take_chunk(max, self.tuning.checksum, &self.ledger, self.now)
        };
        let Some(chunk) = chunk else {
            return Err(TcpError::WouldBlock);
        };
        let counter = if chunk.copied {
            Counter::TcpZeroCopyRxOddBytes
        } else {
            Counter::TcpZeroCopyRxBytes
        };
        self.ledger.counters().add(counter, chunk.data.len() as u64);
        self.tcp_output_after_read(s, h.index);
        Ok(Some(chunk.data))
    }

    /// Bytes waiting to be read.
    pub fn tcp_recv_queued(&self, h: TcpHandle) -> Result<usize, TcpError> {
        Ok(self.tcp_conn(h)?.rx.len())
    }

    /// Room left in the send buffer.
    pub fn tcp_send_capacity(&self, h: TcpHandle) -> Result<usize, TcpError> {
        Ok(self.tcp_conn(h)?.tx.free())
    }

    /// Bytes in the send buffer not yet acknowledged.
    pub fn tcp_send_queued(&self, h: TcpHandle) -> Result<usize, TcpError> {
        Ok(self.tcp_conn(h)?.tx.len())
    }

    /// Shuts down the sending side: a FIN follows the queued data; receiving goes on.
    pub fn tcp_shutdown(&mut self, h: TcpHandle) -> Result<(), TcpError> {
        self.tcp_conn_mut(h)?.shutdown_write();
        self.tcp_output(TESTED, h.index);
        Ok(())
    }

    /// Closes the socket. A connection closes in order (FIN after the queued data) and
    /// lives on in the stack until the close completes; with unread data it is reset
    /// instead (RFC 1122 §4.2.2.13). A listener resets the connections it had not handed
    /// out.
    pub fn tcp_close(&mut self, h: TcpHandle) -> Result<(), TcpError> {
        let s = TESTED;
        let now = self.now;
        let sock = self.tcp.get_mut(h).ok_or(TcpError::BadHandle)?;
        match &mut sock.kind {
            Kind::Stream(c) => {
                let rst = c.release(now);
                if let Some(rst) = rst {
                    let (local, remote, path) = (c.local, c.remote, c.send_path());
                    self.tcp_send_rst(s, local, remote, rst, &path);
                }
                self.tcp_output(s, h.index);
                self.tcp_reap(h.index);
            }
            Kind::Listener(_) => {
                let Some(sock) = self.tcp_free_slot(h.index) else {
                    return Err(TcpError::BadHandle);
                };
                if let Some(id) = sock.pcb {
                    self.tcp_pcbs.remove(id);
                }
                // Children still handshaking or never accepted go with it.
                let children: Vec<usize> = self
                    .tcp
                    .connection_indices()
                    .filter(|&i| self.tcp.at(i).is_some_and(|c| c.parent == Some(h.index)))
                    .collect();
                for i in children {
                    if let Some(c) = self.tcp.conn_mut(i) {
                        c.released = true;
                        let rst = c.abort();
                        let (local, remote, path) = (c.local, c.remote, c.send_path());
                        if let Some(rst) = rst {
                            self.tcp_send_rst(s, local, remote, rst, &path);
                        }
                    }
                    self.tcp_reap(i);
                }
            }
        }
        Ok(())
    }

    /// Resets the connection (RST to the peer) and closes the socket.
    pub fn tcp_abort(&mut self, h: TcpHandle) -> Result<(), TcpError> {
        let c = self.tcp_conn_mut(h)?;
        c.released = true;
        let rst = c.abort();
        let (local, remote, path) = (c.local, c.remote, c.send_path());
        if let Some(rst) = rst {
            self.tcp_send_rst(TESTED, local, remote, rst, &path);
        }
        self.tcp_reap(h.index);
        Ok(())
    }

    /// The connection's state (a listener is in LISTEN).
    pub fn tcp_state(&self, h: TcpHandle) -> Result<State, TcpError> {
        match &self.tcp.get(h).ok_or(TcpError::BadHandle)?.kind {
            Kind::Stream(c) => Ok(c.state()),
            Kind::Listener(_) => Ok(State::Listen),
        }
    }

    /// The last soft error reported for the connection, until the peer next acknowledges
    /// new data: one ICMP reported (destination unreachable or time exceeded; RFC 9293
    /// §3.9.2.2, which has a TCP keep it for the application, SHLD-25, and not abort,
    /// MUST-56; on a synchronized connection a hard one, port or protocol unreachable, is
    /// kept so too, RFC 5461 §4), or else `TimedOut` once a segment or window probe has
    /// gone unanswered three times in a row (R1, RFC 9293 §3.8.3's SHLD-9: the delivery
    /// problem told before the connection is given up). Should the connection time out,
    /// this is its error.
    pub fn tcp_soft_error(&self, h: TcpHandle) -> Result<Option<TcpError>, TcpError> {
        Ok(self.tcp_conn(h)?.soft_error().map(TcpError::from))
    }

    /// The error that ended the connection, if one did.
    pub fn tcp_error(&self, h: TcpHandle) -> Result<Option<TcpError>, TcpError> {
        Ok(self.tcp_conn(h)?.error.map(TcpError::from))
    }

    /// The connection's local and remote address and port.
    pub fn tcp_endpoints(&self, h: TcpHandle) -> Result<(Endpoint, Endpoint), TcpError> {
        let c = self.tcp_conn(h)?;
        Ok((c.local, c.remote))
    }

    /// The local address and port: a listener's binding, a connection's own end.
    pub fn tcp_local_addr(&self, h: TcpHandle) -> Result<(Ipv4Address, u16), TcpError> {
        match &self.tcp.get(h).ok_or(TcpError::BadHandle)?.kind {
            Kind::Stream(c) => Ok(c.local),
            Kind::Listener(l) => Ok(l.local),
        }
    }

    /// The connection itself, read-only: negotiated options, windows, statistics.
    pub fn tcp_connection(&self, h: TcpHandle) -> Result<&Connection, TcpError> {
        self.tcp_conn(h)
    }

    /// Per-connection counts.
    pub fn tcp_stats(&self, h: TcpHandle) -> Result<ConnStats, TcpError> {
        Ok(self.tcp_conn(h)?.stats())
    }

    /// The TCP PCB table's lookup and cache statistics (the table and counts UDP's
    /// [`udp_pcb_stats`](Stack::udp_pcb_stats) gives for its own).
    pub fn tcp_pcb_stats(&self) -> crate::udp::pcb::PcbStats {
        self.tcp_pcbs.stats()
    }

    /// TCP_NODELAY: `true` turns Nagle's algorithm off.
    pub fn tcp_set_nodelay(&mut self, h: TcpHandle, nodelay: bool) -> Result<(), TcpError> {
        self.tcp_conn_mut(h)?.set_nagle(!nodelay);
        Ok(())
    }

    /// Sets the TTL and DSCP of the segments `h` sends (RFC 9293 MUST-48, MUST-49; `IP_TTL`
    /// and `IP_TOS`), from the next segment on; on a listener, of the connections it
    /// accepts from now on, their SYN-ACKs included. [`TcpError::InvalidArgument`] for a
    /// TTL of 0 or a DSCP past 63. (A SYN cookie's SYN-ACK and a RST, which belong to no
    /// connection, go with the stack's TTL and DSCP 0.)
    pub fn tcp_set_ip_fields(&mut self, h: TcpHandle, fields: IpFields) -> Result<(), TcpError> {
        if !fields.valid() {
            return Err(TcpError::InvalidArgument);
        }
        match &mut self.tcp.get_mut(h).ok_or(TcpError::BadHandle)?.kind {
            Kind::Stream(c) => c.set_ip_fields(fields),
            Kind::Listener(l) => l.config.ip_fields = fields,
        }
        Ok(())
    }

    /// Keepalive probes after `idle` without traffic (`None`: off, the default; RFC 9293
    /// MUST-24 to MUST-27). [`KEEPALIVE_IDLE`](crate::tcp::connection::KEEPALIVE_IDLE),
    /// two hours, is the default interval (MUST-28).
    pub fn tcp_set_keepalive(
        &mut self,
        h: TcpHandle,
        idle: Option<Duration>,
    ) -> Result<(), TcpError> {
        let now = self.now;
        self.tcp_conn_mut(h)?.set_keepalive(idle, now);
        Ok(())
    }

    /// Settings for the connections a listener accepts from now on (buffer sizes,
    /// Nagle...), and whether they ask for RFC 1146 "no checksum".
    pub fn tcp_set_listener_config(
        &mut self,
        h: TcpHandle,
        config: TcpConfig,
        no_checksum: bool,
    ) -> Result<(), TcpError> {
        match &mut self.tcp.get_mut(h).ok_or(TcpError::BadHandle)?.kind {
            Kind::Listener(l) => {
                l.config = config;
                l.no_checksum = no_checksum;
                Ok(())
            }
            Kind::Stream(_) => Err(TcpError::NotConnected),
        }
    }

    /// Frees a socket's slot and gives back the socket memory it reserved.
    pub(crate) fn tcp_free_slot(&mut self, index: usize) -> Option<TcpSocket> {
        let s = self.tcp.remove(index)?;
        self.release_socket_memory(s.reserved);
        Some(s)
    }

    /// TCP connections the stack holds, in any state (accepted or not, closing ones
    /// included): what a flood against a listener could make grow.
    pub fn tcp_connection_count(&self) -> usize {
        self.tcp.connection_indices().count()
    }

    /// The settings new sockets start with.
    pub fn tcp_default_config(&self) -> TcpConfig {
        self.tcp.config
    }

    pub fn set_tcp_default_config(&mut self, config: TcpConfig) {
        self.tcp.config = config;
    }

    /// Whether the socket is ready: a listener with a connection to accept; a stream with
    /// data (or end of stream, or an error) to read.
    pub fn tcp_can_recv(&self, h: TcpHandle) -> bool {
        match self.tcp.get(h).map(|s| &s.kind) {
            Some(Kind::Listener(l)) => !l.accept_queue.is_empty(),
            Some(Kind::Stream(c)) => {
                !c.rx.is_empty()
                    || c.error.is_some()
                    || matches!(
                        c.state(),
                        State::CloseWait
                            | State::LastAck
                            | State::Closing
                            | State::TimeWait
                            | State::Closed
                    )
            }
            None => false,
        }
    }

    /// Whether a send would take data now.
    pub fn tcp_can_send(&self, h: TcpHandle) -> bool {
        self.tcp_conn(h)
            .is_ok_and(|c| c.state().can_send() && c.tx.free() > 0)
    }
}

/// Blocking use (see [`crate::socket::blocking`]): each call polls the stack while it
/// waits, and gives up with [`TcpError::TimedOut`] after `timeout` of `clock` time.
impl Stack {
    /// Waits for a connection to accept.
    pub fn tcp_accept_blocking(
        &mut self,
        listener: TcpHandle,
        clock: &impl Clock,
        timeout: Duration,
    ) -> Result<TcpHandle, TcpError> {
        block_on(self, clock, timeout, |s| s.tcp_accept(listener))
    }

    /// Opens a connection and waits until it is established (or refused, or reset).
    pub fn tcp_connect_blocking(
        &mut self,
        remote: Endpoint,
        clock: &impl Clock,
        timeout: Duration,
    ) -> Result<TcpHandle, TcpError> {
        let h = self.tcp_connect(remote)?;
        let opened = block_on(self, clock, timeout, |s| {
            if let Some(e) = s.tcp_error(h)? {
                return Err(e);
            }
            match s.tcp_state(h)? {
                State::SynSent | State::SynReceived => Err(TcpError::WouldBlock),
                _ => Ok(h),
            }
        });
        if opened.is_err() {
            let _ = self.tcp_abort(h);
        }
        opened
    }

    /// Queues all of `data`, waiting for room in the send buffer as it goes (`timeout`
    /// bounds the whole call).
    pub fn tcp_send_all_blocking(
        &mut self,
        h: TcpHandle,
        mut data: &[u8],
        clock: &impl Clock,
        timeout: Duration,
    ) -> Result<(), TcpError> {
        let deadline = clock.now() + timeout;
        while !data.is_empty() {
            let left = deadline.saturating_since(clock.now());
            let n = block_on(self, clock, left, |s| s.tcp_send(h, data))?;
            data = &data[n..];
        }
        Ok(())
    }

    /// Waits for data (or the end of the stream, `Ok(0)`).
    pub fn tcp_recv_blocking(
        &mut self,
        h: TcpHandle,
        buf: &mut [u8],
        clock: &impl Clock,
        timeout: Duration,
    ) -> Result<usize, TcpError> {
        block_on(self, clock, timeout, |s| s.tcp_recv(h, buf))
    }
}

/// A read that finds nothing waiting: the end of the stream (`Ok`: the peer's FIN came,
/// or the connection is closed), the connection's error, or would-block.
fn nothing_to_read(c: &Connection) -> Result<(), TcpError> {
    if let Some(e) = c.error {
        return Err(e.into());
    }
    match c.state() {
        State::CloseWait | State::LastAck | State::Closing | State::TimeWait | State::Closed => {
            Ok(())
        }
        _ => Err(TcpError::WouldBlock),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::FaultConfig;
    use crate::sim::{HostConfig, Pair, ADDR_B};

    /// The timer queue against its definition, the earliest timer of each connection
    /// read from the connection itself: a slot has an entry exactly when its connection
    /// has a timer, never later than that timer, and the queue's earliest is the
    /// earliest entry. Settling reads only the slots lent out mutably since the last
    /// settle, so a change to a connection's timers made without passing through
    /// `at_mut` shows here (a timer set or moved earlier and not queued). A table with
    /// no queue keeps every slot marked lent, so that lending costs nothing.
    fn assert_queue_matches(stack: &mut Stack) {
        stack.tcp.settle_timers();
        let table = &stack.tcp;
        let Some(timers) = &table.timers else {
            assert!(table.slots.len() <= QUEUE_FROM);
            assert!(table.touched.is_empty());
            assert!(table.slots.iter().all(|s| s.touched && s.queued.is_none()));
            return;
        };
        let mut least: Option<Instant> = None;
        for (i, slot) in table.slots.iter().enumerate() {
            let queued = timers.deadline(i);
            assert_eq!(queued, slot.queued, "slot {i}");
            match (queued, slot.deadline()) {
                (None, None) => {}
                (Some(q), Some(d)) => assert!(q <= d, "slot {i} queued at {q:?}, due {d:?}"),
                (q, d) => panic!("slot {i} queued at {q:?}, due {d:?}"),
            }
            least = earlier(least, queued);
        }
        assert_eq!(timers.earliest(), least);
    }

    /// Connections on a lossy wire, opened (at most `connects` of them), written, read,
    /// closed and aborted in a seeded random order, with time moving on between: after
    /// every step both stacks' timer queues match their connections, and once every
    /// socket is closed the timers alone (retransmissions of the FINs, TIME-WAIT,
    /// FIN-WAIT-2) take every connection away, which they do only if the poll finds
    /// each one when it is due. Returns whether the stacks ended with a queue.
    fn random_workload(connects: usize) -> (bool, bool) {
        let mut a = HostConfig::with_mtu(1500);
        let mut b = HostConfig::with_mtu(1500);
        a.nic.rx_faults = FaultConfig {
            drop: 0.05,
            ..FaultConfig::lossy(31)
        };
        b.nic.rx_faults = FaultConfig {
            drop: 0.05,
            ..FaultConfig::lossy(32)
        };
        a.stack.tcp.send_buffer = 16 * 1024;
        a.stack.tcp.recv_buffer = 16 * 1024;
        b.stack.tcp = a.stack.tcp;
        // A connection whose peer is gone gives up at most (max_retransmissions + 1)
        // longest RTOs after its last ACK; the peer's RST usually ends it sooner (its
        // retransmissions after a timeout carry a checksum even where the two agreed to
        // none), but the faults may take every RST. After that, TIME-WAIT and
        // FIN-WAIT-2 (a minute each) and the ARP entries' last timers.
        let config = a.stack.tcp;
        let settle_secs =
            (u64::from(config.max_retransmissions) + 1) * config.rto.max.as_millis() / 1000 + 300;
        let mut p = Pair::new(a, b).unwrap();
        let listener = p.b.tcp_listen((ADDR_B, 80), 64).unwrap();
        let (mut ends_a, mut ends_b) = (Vec::new(), Vec::new());
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        let data = [0x5au8; 3000];
        let mut buf = [0u8; 4096];
        let mut opened = 0;
        for _ in 0..3000 {
            match next(8) {
                0 if ends_a.len() < 24 && opened < connects => {
                    if let Ok(h) = p.a.tcp_connect((ADDR_B, 80)) {
                        ends_a.push(h);
                        opened += 1;
                    }
                }
                1 | 2 if !ends_a.is_empty() => {
                    let h = ends_a[next(ends_a.len() as u64) as usize];
                    let _ = p.a.tcp_send(h, &data[..1 + next(3000) as usize]);
                }
                3 if !ends_b.is_empty() => {
                    let h = ends_b[next(ends_b.len() as u64) as usize];
                    let _ = p.b.tcp_recv(h, &mut buf[..1 + next(4096) as usize]);
                }
                4 if !ends_a.is_empty() && next(4) == 0 => {
                    let h = ends_a.swap_remove(next(ends_a.len() as u64) as usize);
                    let _ = p.a.tcp_close(h);
                }
                5 if !ends_b.is_empty() && next(4) == 0 => {
                    let h = ends_b.swap_remove(next(ends_b.len() as u64) as usize);
                    let _ = match next(2) {
                        0 => p.b.tcp_close(h),
                        _ => p.b.tcp_abort(h),
                    };
                }
                _ => p.run_for(Duration::from_micros(next(50_000))),
            }
            while let Ok(h) = p.b.tcp_accept(listener) {
                ends_b.push(h);
            }
            assert_queue_matches(&mut p.a);
            assert_queue_matches(&mut p.b);
        }
        for h in ends_a {
            let _ = p.a.tcp_close(h);
        }
        p.b.tcp_close(listener).unwrap();
        for h in ends_b {
            let _ = p.b.tcp_close(h);
        }
        for _ in 0..settle_secs {
            p.run_for(Duration::from_secs(1));
            assert_queue_matches(&mut p.a);
            assert_queue_matches(&mut p.b);
        }
        assert_eq!(
            p.a.tcp.connection_indices().count(),
            0,
            "A kept connections"
        );
        assert_eq!(
            p.b.tcp.connection_indices().count(),
            0,
            "B kept connections"
        );
        assert_eq!(p.a.next_deadline(), None);
        assert_eq!(p.b.next_deadline(), None);
        (p.a.tcp.timers.is_some(), p.b.tcp.timers.is_some())
    }

    #[test]
    fn timers_run_from_a_walk_over_a_small_table() {
        assert_eq!(random_workload(10), (false, false));
    }

    #[test]
    fn timers_run_from_the_queue_of_a_large_table() {
        assert_eq!(random_workload(usize::MAX), (true, true));
    }
}
