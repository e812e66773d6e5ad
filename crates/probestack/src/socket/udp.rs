//! UDP sockets, BSD-shaped: open, bind, connect, send, send-to, send-message (gather),
//! receive (with the sender and a truncation flag), close. The stack is non-blocking by
//! nature (sans-IO): a receive with nothing queued returns [`UdpError::WouldBlock`]; a
//! blocking adapter waits on the stack's poll outside the core.
//!
//! The socket layer's own work is charged to `Layer::Socket`: argument checks, the copy
//! in and out of the application's buffers, and the receive queue.

use std::collections::VecDeque;
use std::num::NonZeroU16;

use crate::buf::{ExtBuf, PacketBuf};
use crate::checksum;
use crate::ip::{IpExtras, IpFields, SourceRouting};
use crate::probe::{Counter, Layer, Op, Sampling, Side, Unsampled, TESTED};
use crate::stack::in_message;
use crate::stack::{SendError, Stack};
use crate::udp::pcb::{PcbError, PcbId};
use crate::udp::template::HeaderTemplate;
use crate::udp::UdpChecksum;
use crate::wire::ipv4::Ipv4Options;
use crate::wire::source_route::SourceRoute;
use crate::wire::udp as udp_wire;
use crate::wire::Ipv4Address;

/// A UDP socket of a stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct UdpHandle {
    pub(crate) index: usize,
    pub(crate) generation: u32,
}

/// What went wrong, as a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UdpError {
    /// Nothing to receive now (the socket is non-blocking).
    WouldBlock,
    /// Another socket has this exact binding.
    AddrInUse,
    /// The local address is not one of the host's.
    AddrNotAvailable,
    /// `send` on a socket that is not connected, or a destination of port 0 / address 0.
    NotConnected,
    /// Already bound (bind twice).
    AlreadyBound,
    /// No ephemeral port is free.
    NoPortsLeft,
    /// The datagram is larger than UDP over IPv4 can carry (65,507 bytes).
    MessageTooBig {
        max: usize,
    },
    /// An ICMP port unreachable came back for this connected socket (RFC 1122 §4.1.3.3).
    ConnectionRefused,
    /// No route to the destination.
    NoRoute,
    /// No packet buffer could be had.
    NoBuffer,
    /// The handle is closed or belongs to no socket.
    BadHandle,
    /// A blocking call waited its whole timeout.
    TimedOut,
    /// The socket's receive queue limit would pass the stack's socket memory limit
    /// (`StackConfig::socket_memory_limit`; ENOBUFS).
    NoSocketMemory,
    /// An option's value is out of range (EINVAL): a TTL of 0, a DSCP past 63.
    InvalidArgument,
    /// ICMP said the network or the host of this connected socket's peer cannot be
    /// reached (ENETUNREACH, EHOSTUNREACH; RFC 1122 §4.1.3.3).
    NetworkUnreachable,
    HostUnreachable,
    /// ICMP said a datagram's header was at fault (parameter problem; EPROTO).
    ProtocolError,
}

impl std::fmt::Display for UdpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UdpError::WouldBlock => write!(f, "operation would block"),
            UdpError::AddrInUse => write!(f, "address in use"),
            UdpError::AddrNotAvailable => write!(f, "address not available"),
            UdpError::NotConnected => write!(f, "not connected"),
            UdpError::AlreadyBound => write!(f, "already bound"),
            UdpError::NoPortsLeft => write!(f, "no ephemeral port free"),
            UdpError::MessageTooBig { max } => write!(f, "message too big (at most {max} bytes)"),
            UdpError::ConnectionRefused => write!(f, "connection refused"),
            UdpError::NoRoute => write!(f, "no route to host"),
            UdpError::NoBuffer => write!(f, "no buffer space"),
            UdpError::BadHandle => write!(f, "bad socket handle"),
            UdpError::TimedOut => write!(f, "timed out"),
            UdpError::NoSocketMemory => write!(f, "no socket buffer memory"),
            UdpError::InvalidArgument => write!(f, "invalid argument"),
            UdpError::NetworkUnreachable => write!(f, "network unreachable"),
            UdpError::HostUnreachable => write!(f, "host unreachable"),
            UdpError::ProtocolError => write!(f, "protocol error"),
        }
    }
}

impl std::error::Error for UdpError {}

/// The largest UDP payload over IPv4: 65,535 − 20 − 8.
pub const MAX_UDP_PAYLOAD: usize = 65_507;

/// A datagram received.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UdpRecv {
    /// Bytes copied into the buffer.
    pub len: usize,
    /// The datagram's full length (more than `len` when truncated).
    pub datagram_len: usize,
    pub from: (Ipv4Address, u16),
    /// The address the datagram was sent to: one of the host's, or a broadcast address
    /// (RFC 1122 §4.1.3.5 has UDP pass it up, so that a socket bound to the wildcard
    /// address can answer from the address it was reached at; `IP_PKTINFO`).
    pub to: Ipv4Address,
    /// The buffer was too small: the rest of the datagram was discarded (MSG_TRUNC).
    pub truncated: bool,
    /// The IP options the datagram carried, if any (RFC 1122 §4.1.3.2: UDP passes them
    /// to the application; `IP_RECVOPTS`). A completed source route among them is the
    /// way the datagram came: [`SourceRouting::back_along`] reverses it for an answer.
    /// Boxed: almost every datagram has none, and a receive returns one word for them.
    pub ip_options: Option<Box<Ipv4Options>>,
}

/// A datagram waiting in a socket's receive queue: its payload (the buffer's window), and
/// in one word the sender's address and port and, on the protocol-specific receive path
/// (paper 002 §7.1), the sum of the pseudo-header and UDP header, to be completed with the
/// payload's sum while it is copied out (none when the whole checksum was verified at
/// input, or there is none).
///
/// Two scalars, so that the entry goes into the queue from registers: as a struct of four
/// fields it was built on the stack with narrow stores and moved with a 16-byte load the
/// CPU could not forward from them, a store-forwarding stall per datagram. (The
/// datagram's destination address rides in the buffer's header,
/// [`PacketBuf::rx_dst`].)
#[derive(Debug)]
pub(crate) struct Queued {
    pub payload: PacketBuf,
    /// Address (bits 32-63), port (16-31), partial sum (0-15; zero for none).
    meta: u64,
}

impl Queued {
    pub fn new(
        from: (Ipv4Address, u16),
        payload: PacketBuf,
        verify_on_copy: Option<u16>,
    ) -> Queued {
        // One's complement has two zeros, 0 and 0xFFFF, which add alike to any sum that
        // is not zero itself: a zero sum is kept as 0xFFFF, so that 0 can mean none (it
        // does not occur: the pseudo-header's protocol and length make the sum nonzero).
        let sum = verify_on_copy.map_or(0, |v| if v == 0 { 0xFFFF } else { v });
        let addr = u32::from_be_bytes(from.0 .0);
        Queued {
            payload,
            meta: u64::from(addr) << 32 | u64::from(from.1) << 16 | u64::from(sum),
        }
    }

    /// The sender's address and port.
    pub fn from(&self) -> (Ipv4Address, u16) {
        let addr = Ipv4Address(((self.meta >> 32) as u32).to_be_bytes());
        (addr, (self.meta >> 16) as u16)
    }

    /// The partial sum the copy out completes, if the payload is still to be verified.
    pub fn verify_on_copy(&self) -> Option<u16> {
        NonZeroU16::new(self.meta as u16).map(NonZeroU16::get)
    }
}

const _: () = assert!(std::mem::size_of::<Queued>() == 16);

/// One UDP socket's state.
#[derive(Debug)]
pub(crate) struct UdpSocket {
    pub pcb: Option<PcbId>,
    pub local: Option<(Ipv4Address, u16)>,
    pub remote: Option<(Ipv4Address, u16)>,
    pub rx: VecDeque<Queued>,
    pub rx_bytes: usize,
    pub rx_limit: usize,
    /// Socket buffer bytes reserved against the stack's limit: `rx_limit` once bound
    /// (an unbound socket receives nothing and holds nothing), 0 before.
    pub reserved: usize,
    /// Paper 000's per-socket option: send without a checksum on any route.
    pub no_checksum: bool,
    /// The TTL and DSCP of its datagrams (RFC 1122 §4.1.4).
    pub ip_fields: IpFields,
    /// An error to report on the next call (ICMP port unreachable on a connected socket).
    pub error: Option<UdpError>,
    /// IP options both ways (RFC 1122 §4.1.3.2): what its datagrams carry, and those
    /// queued datagrams came with. None for almost every socket, so behind a pointer.
    pub ip_options: Option<Box<SocketIpOptions>>,
    /// The headers of the last destination sent to (`Tuning::udp_header_template`).
    pub template: Option<HeaderTemplate>,
}

/// A socket's IP options, both ways.
#[derive(Debug, Default)]
pub(crate) struct SocketIpOptions {
    /// The options its datagrams carry, a source route aside (`IP_OPTIONS`).
    options: Ipv4Options,
    /// The source route they take.
    route: Option<SourceRouting>,
    /// The options of queued datagrams that carried some, in queue order, each with the
    /// number of datagrams without options queued between it and the one before it (or
    /// the queue's head): found by place, so that the queue entries of the many
    /// datagrams without options stay as small as they are.
    rx: VecDeque<(usize, Ipv4Options)>,
    /// One past the queue position of the last datagram in `rx` (0 when empty).
    rx_end: usize,
}

impl UdpSocket {
    /// Notes the options of the datagram about to be queued.
    #[cold]
    pub fn keep_rx_options(&mut self, options: &Ipv4Options) {
        let at = self.rx.len();
        let o = self.ip_options.get_or_insert_with(Box::default);
        o.rx.push_back((at - o.rx_end, *options));
        o.rx_end = at + 1;
    }

    /// The options of the datagram just taken off the queue, if it had some.
    #[inline]
    fn take_rx_options(&mut self) -> Option<Box<Ipv4Options>> {
        match self.ip_options.as_deref_mut() {
            Some(o) if !o.rx.is_empty() => o.take_rx(),
            _ => None,
        }
    }

    /// What a datagram to `dst` carries beyond a plain header; `Err` when it does not
    /// fit in one (checked when the options were set, so not expected).
    #[inline]
    pub fn ip_extras(&self, dst: Ipv4Address) -> Result<IpExtras, UdpError> {
        match self.ip_options.as_deref() {
            Some(o) if !o.options.is_empty() || o.route.is_some() => {
                IpExtras::new(&o.options, o.route.as_ref(), dst)
                    .map_err(|()| UdpError::InvalidArgument)
            }
            _ => Ok(IpExtras::NONE),
        }
    }

    /// Where a datagram sent with `to` goes: `to`, or the connected peer (then `true`).
    fn destination(
        &self,
        to: Option<(Ipv4Address, u16)>,
    ) -> Result<((Ipv4Address, u16), bool), UdpError> {
        match (to, self.remote) {
            (Some(d), _) => Ok((d, false)),
            (None, Some(r)) => Ok((r, true)),
            (None, None) => Err(UdpError::NotConnected),
        }
    }

    /// Whether its datagrams take a source route.
    pub fn sends_source_route(&self) -> bool {
        self.ip_options
            .as_deref()
            .is_some_and(|o| o.route.is_some())
    }

    /// Whether its datagrams carry options.
    pub fn sends_ip_options(&self) -> bool {
        self.ip_options
            .as_deref()
            .is_some_and(|o| !o.options.is_empty() || o.route.is_some())
    }
}

impl SocketIpOptions {
    #[cold]
    fn take_rx(&mut self) -> Option<Box<Ipv4Options>> {
        self.rx_end -= 1;
        let (before, _) = self.rx.front_mut()?;
        if *before > 0 {
            *before -= 1;
            return None;
        }
        self.rx.pop_front().map(|(_, o)| Box::new(o))
    }
}

/// The default receive buffer limit (bytes of payload queued).
pub const DEFAULT_RX_LIMIT: usize = 256 * 1024;

pub(crate) struct Slot {
    generation: u32,
    socket: Option<UdpSocket>,
}

/// The stack's UDP sockets.
#[derive(Default)]
pub(crate) struct UdpSockets {
    slots: Vec<Slot>,
}

impl UdpSockets {
    /// Drops every socket's header template (the switches changed).
    pub fn forget_templates(&mut self) {
        for s in self.slots.iter_mut().filter_map(|s| s.socket.as_mut()) {
            s.template = None;
        }
    }

    pub fn get(&self, h: UdpHandle) -> Option<&UdpSocket> {
        self.slots
            .get(h.index)
            .filter(|s| s.generation == h.generation)
            .and_then(|s| s.socket.as_ref())
    }

    pub fn get_mut(&mut self, h: UdpHandle) -> Option<&mut UdpSocket> {
        self.slots
            .get_mut(h.index)
            .filter(|s| s.generation == h.generation)
            .and_then(|s| s.socket.as_mut())
    }

    pub fn handle_of(&self, index: usize) -> Option<UdpHandle> {
        self.slots
            .get(index)
            .filter(|s| s.socket.is_some())
            .map(|s| UdpHandle {
                index,
                generation: s.generation,
            })
    }

    fn open(&mut self) -> UdpHandle {
        let socket = UdpSocket {
            pcb: None,
            local: None,
            remote: None,
            rx: VecDeque::new(),
            rx_bytes: 0,
            rx_limit: DEFAULT_RX_LIMIT,
            reserved: 0,
            no_checksum: false,
            ip_fields: IpFields::default(),
            ip_options: None,
            template: None,
            error: None,
        };
        if let Some(index) = self.slots.iter().position(|s| s.socket.is_none()) {
            let slot = &mut self.slots[index];
            slot.socket = Some(socket);
            return UdpHandle {
                index,
                generation: slot.generation,
            };
        }
        self.slots.push(Slot {
            generation: 0,
            socket: Some(socket),
        });
        UdpHandle {
            index: self.slots.len() - 1,
            generation: 0,
        }
    }

    fn close(&mut self, h: UdpHandle) -> Option<UdpSocket> {
        let slot = self
            .slots
            .get_mut(h.index)
            .filter(|s| s.generation == h.generation)?;
        let s = slot.socket.take();
        slot.generation = slot.generation.wrapping_add(1);
        s
    }
}

/// RFC 6335 §6: the dynamic port range.
const EPHEMERAL: std::ops::RangeInclusive<u16> = 49152..=65535;

impl Stack {
    /// A new, unbound UDP socket.
    pub fn udp_open(&mut self) -> UdpHandle {
        self.udp_sockets.open()
    }

    /// Binds to `addr` (0.0.0.0 for any of the host's addresses) and `port` (0 for an
    /// ephemeral one).
    pub fn udp_bind(&mut self, h: UdpHandle, addr: Ipv4Address, port: u16) -> Result<(), UdpError> {
        let _p = self
            .ledger
            .probe(TESTED, Layer::Socket, Side::Send, Op::ArgCheck);
        let sock = self.udp_sockets.get(h).ok_or(UdpError::BadHandle)?;
        if sock.pcb.is_some() {
            return Err(UdpError::AlreadyBound);
        }
        if !addr.is_unspecified() && !self.is_own_address(addr) {
            return Err(UdpError::AddrNotAvailable);
        }
        drop(_p);
        self.udp_attach(TESTED, h, addr, port)
    }

    /// Inserts the socket's PCB, choosing an ephemeral port for port 0, and reserves its
    /// receive queue limit against the socket memory limit.
    fn udp_attach(
        &mut self,
        s: impl Sampling,
        h: UdpHandle,
        addr: Ipv4Address,
        port: u16,
    ) -> Result<(), UdpError> {
        let rx_limit = self.udp_sockets.get(h).ok_or(UdpError::BadHandle)?.rx_limit;
        let port = if port == 0 {
            self.udp_ephemeral_port(addr)?
        } else {
            port
        };
        if !self.reserve_socket_memory(rx_limit) {
            return Err(UdpError::NoSocketMemory);
        }
        let inserted = {
            let _p = self.ledger.probe(s, Layer::Udp, Side::Send, Op::PcbConnect);
            self.udp_pcbs.insert((addr, port), None, h.index)
        };
        let id = match inserted {
            Ok(id) => id,
            Err(e) => {
                self.release_socket_memory(rx_limit);
                return Err(match e {
                    PcbError::AddrInUse => UdpError::AddrInUse,
                    _ => UdpError::AddrNotAvailable,
                });
            }
        };
        let s = self.udp_sockets.get_mut(h).ok_or(UdpError::BadHandle)?;
        s.pcb = Some(id);
        s.local = Some((addr, port));
        s.reserved = rx_limit;
        Ok(())
    }

    /// A free port from the dynamic range, starting at a random point (RFC 6056 §3.3.1's
    /// simple randomisation).
    fn udp_ephemeral_port(&mut self, addr: Ipv4Address) -> Result<u16, UdpError> {
        let span = (*EPHEMERAL.end() - *EPHEMERAL.start()) as u64 + 1;
        let start = self.rng.below(span);
        for i in 0..span {
            let port = *EPHEMERAL.start() + ((start + i) % span) as u16;
            let taken = self.udp_pcbs.iter().any(|(_, b, _)| {
                b.local.1 == port
                    && (b.local.0 == addr || b.local.0.is_unspecified() || addr.is_unspecified())
            });
            if !taken {
                return Ok(port);
            }
        }
        Err(UdpError::NoPortsLeft)
    }

    /// Connects to `addr:port`: datagrams from elsewhere no longer reach the socket, and
    /// `send` goes there. An unbound socket is bound to an ephemeral port first.
    pub fn udp_connect(
        &mut self,
        h: UdpHandle,
        addr: Ipv4Address,
        port: u16,
    ) -> Result<(), UdpError> {
        if addr.is_unspecified() || port == 0 {
            return Err(UdpError::NotConnected);
        }
        let sock = self.udp_sockets.get(h).ok_or(UdpError::BadHandle)?;
        if sock.pcb.is_none() {
            self.udp_attach(TESTED, h, Ipv4Address::UNSPECIFIED, 0)?;
        }
        let s = self.udp_sockets.get_mut(h).ok_or(UdpError::BadHandle)?;
        let id = s.pcb.ok_or(UdpError::BadHandle)?;
        s.remote = Some((addr, port));
        s.error = None;
        let _p = self
            .ledger
            .probe(TESTED, Layer::Udp, Side::Send, Op::PcbConnect);
        self.udp_pcbs
            .connect(id, (addr, port))
            .map_err(|_| UdpError::AddrInUse)
    }

    /// Dissolves the association made by [`udp_connect`](Self::udp_connect).
    pub fn udp_disconnect(&mut self, h: UdpHandle) -> Result<(), UdpError> {
        let s = self.udp_sockets.get_mut(h).ok_or(UdpError::BadHandle)?;
        s.remote = None;
        s.error = None;
        if let Some(id) = s.pcb {
            let _p = self
                .ledger
                .probe(TESTED, Layer::Udp, Side::Send, Op::PcbConnect);
            let _ = self.udp_pcbs.disconnect(id);
        }
        Ok(())
    }

    /// Closes the socket; queued datagrams are freed.
    pub fn udp_close(&mut self, h: UdpHandle) -> Result<(), UdpError> {
        let s = self.udp_sockets.close(h).ok_or(UdpError::BadHandle)?;
        if let Some(id) = s.pcb {
            self.udp_pcbs.remove(id);
        }
        self.release_socket_memory(s.reserved);
        for q in s.rx {
            self.pool.free(q.payload);
        }
        Ok(())
    }

    /// The socket's local address and port, once bound.
    pub fn udp_local_addr(&self, h: UdpHandle) -> Option<(Ipv4Address, u16)> {
        self.udp_sockets.get(h).and_then(|s| s.local)
    }

    /// Paper 000's per-socket option: send with no checksum (a zero field) on any route.
    pub fn udp_set_no_checksum(&mut self, h: UdpHandle, on: bool) -> Result<(), UdpError> {
        self.udp_sockets
            .get_mut(h)
            .ok_or(UdpError::BadHandle)?
            .no_checksum = on;
        Ok(())
    }

    /// Sets the TTL and DSCP of the socket's datagrams (RFC 1122 §4.1.4; `IP_TTL` and
    /// `IP_TOS`). [`UdpError::InvalidArgument`] for a TTL of 0 or a DSCP past 63.
    pub fn udp_set_ip_fields(&mut self, h: UdpHandle, fields: IpFields) -> Result<(), UdpError> {
        if !fields.valid() {
            return Err(UdpError::InvalidArgument);
        }
        let sock = self.udp_sockets.get_mut(h).ok_or(UdpError::BadHandle)?;
        sock.ip_fields = fields;
        // Its headers are built again with them.
        sock.template = None;
        Ok(())
    }

    /// Sets the IP options of the socket's datagrams, as their bytes on the wire (RFC 791
    /// §3.1; RFC 1122 §4.1.3.2: an application MUST be able to; `IP_OPTIONS`); empty for
    /// none. A source route goes by [`udp_set_source_route`](Self::udp_set_source_route).
    /// [`UdpError::InvalidArgument`] for options that are malformed, hold a source route,
    /// or do not fit in a header beside the socket's route.
    pub fn udp_set_ip_options(&mut self, h: UdpHandle, options: &[u8]) -> Result<(), UdpError> {
        let options = Ipv4Options::new(options).map_err(|_| UdpError::InvalidArgument)?;
        if !matches!(SourceRoute::find(options.as_bytes()), Ok(None)) {
            return Err(UdpError::InvalidArgument);
        }
        self.udp_set_ip_out(h, |o| o.options = options)
    }

    /// Sends the socket's datagrams along a source route through `via`'s gateways, or
    /// (`None`) directly (RFC 1122 §3.2.1.8 (c): a host MUST be able to originate one;
    /// to answer a datagram that came by one, [`SourceRouting::back_along`] its route).
    /// [`UdpError::InvalidArgument`] when the route does not fit in a header beside the
    /// socket's other options.
    pub fn udp_set_source_route(
        &mut self,
        h: UdpHandle,
        via: Option<SourceRouting>,
    ) -> Result<(), UdpError> {
        self.udp_set_ip_out(h, |o| o.route = via)
    }

    /// Changes what the socket's datagrams carry with `change`, if the result fits in a
    /// header; otherwise nothing changes.
    fn udp_set_ip_out(
        &mut self,
        h: UdpHandle,
        change: impl FnOnce(&mut SocketIpOptions),
    ) -> Result<(), UdpError> {
        let sock = self.udp_sockets.get_mut(h).ok_or(UdpError::BadHandle)?;
        let o = sock.ip_options.get_or_insert_with(Box::default);
        let (options, route) = (o.options, o.route);
        change(o);
        // The destination does not change the size.
        if IpExtras::new(&o.options, o.route.as_ref(), Ipv4Address::UNSPECIFIED).is_err() {
            (o.options, o.route) = (options, route);
            return Err(UdpError::InvalidArgument);
        }
        // Templated datagrams carry no options: its datagrams go through the layers.
        sock.template = None;
        Ok(())
    }

    /// The receive buffer limit: payload bytes queued before arriving datagrams are dropped.
    /// On a bound socket the new limit is reserved against the socket memory limit in
    /// place of the old one; if it does not fit, the old limit stays and
    /// [`UdpError::NoSocketMemory`] is returned.
    pub fn udp_set_recv_buffer(&mut self, h: UdpHandle, bytes: usize) -> Result<(), UdpError> {
        let s = self.udp_sockets.get(h).ok_or(UdpError::BadHandle)?;
        if s.pcb.is_some() {
            let old = s.reserved;
            self.release_socket_memory(old);
            if !self.reserve_socket_memory(bytes) {
                self.reserve_socket_memory(old);
                return Err(UdpError::NoSocketMemory);
            }
            let s = self.udp_sockets.get_mut(h).ok_or(UdpError::BadHandle)?;
            s.reserved = bytes;
        }
        self.udp_sockets
            .get_mut(h)
            .ok_or(UdpError::BadHandle)?
            .rx_limit = bytes;
        Ok(())
    }

    /// The UDP PCB table's lookup and cache statistics.
    pub fn udp_pcb_stats(&self) -> crate::udp::pcb::PcbStats {
        self.udp_pcbs.stats()
    }

    /// Datagrams waiting to be received.
    pub fn udp_queued(&self, h: UdpHandle) -> usize {
        self.udp_sockets.get(h).map_or(0, |s| s.rx.len())
    }

    /// Sends `data` to the connected peer.
    pub fn udp_send(&mut self, h: UdpHandle, data: &[u8]) -> Result<usize, UdpError> {
        self.udp_send_msg(h, &[data], None)
    }

    /// Sends `data` to `addr:port`.
    pub fn udp_send_to(
        &mut self,
        h: UdpHandle,
        data: &[u8],
        addr: Ipv4Address,
        port: u16,
    ) -> Result<usize, UdpError> {
        self.udp_send_msg(h, &[data], Some((addr, port)))
    }

    /// Sends one datagram gathered from `parts` (sendmsg), to `to` or the connected peer.
    pub fn udp_send_msg(
        &mut self,
        h: UdpHandle,
        parts: &[&[u8]],
        to: Option<(Ipv4Address, u16)>,
    ) -> Result<usize, UdpError> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        in_message!(self, len, s => self.udp_sosend(s, h, parts, len, to))
    }

    /// Sends each of `datagrams` as a datagram of its own, in order, to `to` or the
    /// connected peer: sendmmsg(2) with one destination. Returns how many were sent: all
    /// of them, or those before the first that failed; when the first fails, its error.
    ///
    /// Nothing runs between the datagrams of a batch (no input, no timer), so the socket,
    /// its binding, its route and its header template stay as the first send left them,
    /// and what every send checks and looks up (the socket, a pending error, the
    /// destination, the local port, the template's validity) is done once: each further
    /// datagram is allocated, copied and summed, given its headers and handed to the
    /// device. Each datagram is a message of the ledger's own.
    pub fn udp_send_batch(
        &mut self,
        h: UdpHandle,
        datagrams: &[&[u8]],
        to: Option<(Ipv4Address, u16)>,
    ) -> Result<usize, UdpError> {
        let Some((first, rest)) = datagrams.split_first() else {
            return Ok(0);
        };
        self.udp_send_msg(h, &[first], to)?;
        let sock = self.udp_sockets.get(h).ok_or(UdpError::BadHandle)?;
        let ((dst, connected), no_checksum) = (sock.destination(to)?, sock.no_checksum);
        // The first send built the template if it could, so no probe is reached here; it
        // also put the socket's PCB in the send cache, where the batch leaves it.
        let template = |stack: &mut Stack| {
            stack
                .udp_template_path(connected)
                .then(|| stack.udp_template(Unsampled, h, dst, no_checksum))
                .flatten()
        };
        let mut templated = template(self);
        for (sent, data) in rest.iter().enumerate() {
            let parts = [*data];
            let r = match &templated {
                Some(t) if t.fits(data.len()) => {
                    let r = in_message!(self, data.len(), s => {
                        self.udp_send_on_template(s, t, &parts, data.len())
                    });
                    if r.is_ok() {
                        self.ledger.counters().inc(Counter::UdpBatchSent);
                    }
                    r
                }
                // No template, or a datagram IP fragments: through the layers, after
                // which the template is looked at again (the layers may have refreshed
                // what it was built on).
                _ => {
                    let r = self.udp_send_msg(h, &parts, to);
                    if templated.is_some() {
                        templated = template(self);
                    }
                    r
                }
            };
            if r.is_err() {
                return Ok(1 + sent);
            }
        }
        Ok(datagrams.len())
    }

    /// Whether a datagram goes by the socket's header template (if it has one) rather than
    /// through the layers: 4.3BSD's sendto, which connects the PCB for each datagram, is
    /// left to the layers.
    fn udp_template_path(&self, connected: bool) -> bool {
        self.tuning.udp_header_template && (connected || self.tuning.sendto_without_connect)
    }

    /// Zero-copy send (paper 004 §3.1): one datagram of the loaned `data`, to `to` or the
    /// connected peer, without copying it. The frame carries slices of the loan to the
    /// device, which holds them until it has transmitted the datagram: the loan completes
    /// ([`Loan::is_complete`](crate::buf::Loan::is_complete)) once the device is done
    /// with it. The host still reads the data to sum it unless the checksum is elided or
    /// offloaded. A datagram larger than the MTU is fragmented, and fragmenting copies it.
    pub fn udp_send_loan(
        &mut self,
        h: UdpHandle,
        data: &ExtBuf,
        to: Option<(Ipv4Address, u16)>,
    ) -> Result<usize, UdpError> {
        let len = data.len();
        in_message!(self, len, s => self.udp_send_loaned(s, h, data, len, to))
    }

    /// [`udp_send_loan`](Self::udp_send_loan) inside its message.
    fn udp_send_loaned(
        &mut self,
        s: impl Sampling,
        h: UdpHandle,
        data: &ExtBuf,
        len: usize,
        to: Option<(Ipv4Address, u16)>,
    ) -> Result<usize, UdpError> {
        let (dst, connected, no_checksum) = self.udp_send_target(s, h, len, to)?;
        let Ok(mut buf) = self.alloc(s, Layer::Socket, Side::Send, udp_wire::HEADER_LEN + len)
        else {
            return Err(UdpError::NoBuffer);
        };
        // Room for the data stays in the tailroom for a device to gather into.
        if buf.trim_back(len).is_err() {
            self.free(s, Layer::Socket, Side::Send, buf);
            return Err(UdpError::NoBuffer);
        }
        buf.push_frag(data.clone());
        let (elide, offload) =
            self.udp_checksum_choice(s, h, dst.0, no_checksum, udp_wire::HEADER_LEN + len);
        let plan = if elide {
            UdpChecksum::Elided
        } else if offload {
            UdpChecksum::Offloaded
        } else {
            // Read to be summed, never copied.
            let _p = self
                .ledger
                .probe(s, Layer::Socket, Side::Send, Op::Checksum);
            let mut acc = checksum::Accumulator::new();
            acc.add_with(self.tuning.checksum, data);
            UdpChecksum::PayloadSummed(acc.sum())
        };
        self.ledger.counters().inc(Counter::UdpZeroCopyDatagrams);
        self.udp_output(s, h, dst, buf, plan, connected)
            .map(|()| len)
    }

    /// Who does a datagram's checksum (of `len` bytes, UDP header included): nobody
    /// (paper 000's elision: the socket asks, or the next hop is the destination on a CRC
    /// link and elision is on), the device (`checksum_offload`, a datagram sent whole), or
    /// the host. Returns (elide, offload).
    fn udp_checksum_choice(
        &self,
        s: impl Sampling,
        h: UdpHandle,
        dst: Ipv4Address,
        no_checksum: bool,
        len: usize,
    ) -> (bool, bool) {
        let _p = self.ledger.probe(s, Layer::Udp, Side::Send, Op::UdpProto);
        // A source-routed datagram passes its gateways, whatever the way to `dst` is.
        let routed = || {
            self.udp_sockets
                .get(h)
                .is_some_and(UdpSocket::sends_source_route)
        };
        let elide = no_checksum || (self.checksum_elidable(dst) && !routed());
        (elide, !elide && self.udp_checksum_offloadable(dst, len))
    }

    /// The checks every send makes: the size, a pending error, where the datagram goes
    /// (`to` or the connected peer), and a local port (an ephemeral one if the socket has
    /// none). Returns the destination, whether it is the connected peer, and whether the
    /// socket sends without checksums.
    fn udp_send_target(
        &mut self,
        s: impl Sampling,
        h: UdpHandle,
        len: usize,
        to: Option<(Ipv4Address, u16)>,
    ) -> Result<((Ipv4Address, u16), bool, bool), UdpError> {
        let (dst, connected, no_checksum) = {
            let _p = self
                .ledger
                .probe(s, Layer::Socket, Side::Send, Op::ArgCheck);
            if len > MAX_UDP_PAYLOAD {
                return Err(UdpError::MessageTooBig {
                    max: MAX_UDP_PAYLOAD,
                });
            }
            let s = self.udp_sockets.get_mut(h).ok_or(UdpError::BadHandle)?;
            if let Some(e) = s.error.take() {
                return Err(e);
            }
            let (dst, connected) = s.destination(to)?;
            (dst, connected, s.no_checksum)
        };
        if dst.0.is_unspecified() || dst.1 == 0 {
            return Err(UdpError::NotConnected);
        }
        if self.udp_sockets.get(h).is_some_and(|s| s.pcb.is_none()) {
            self.udp_attach(s, h, Ipv4Address::UNSPECIFIED, 0)?;
        }
        Ok((dst, connected, no_checksum))
    }

    /// The socket layer's send: checks, then the copy into a packet buffer (two paths).
    fn udp_sosend(
        &mut self,
        s: impl Sampling,
        h: UdpHandle,
        parts: &[&[u8]],
        len: usize,
        to: Option<(Ipv4Address, u16)>,
    ) -> Result<usize, UdpError> {
        let (dst, connected, no_checksum) = self.udp_send_target(s, h, len, to)?;
        if self.udp_template_path(connected) {
            if let Some(r) = self.udp_send_templated(s, h, parts, len, dst, no_checksum) {
                return r;
            }
        }
        let Ok(mut buf) = self.alloc(
            s,
            Layer::Socket,
            Side::Send,
            crate::wire::udp::HEADER_LEN + len,
        ) else {
            return Err(UdpError::NoBuffer);
        };
        let (elide, offload) = self.udp_checksum_choice(s, h, dst.0, no_checksum, buf.len());
        let fused = self.tuning.udp_fast_path && !elide && !offload;
        let plan = match self.udp_copy_in(s, &mut buf, parts, fused) {
            _ if elide => UdpChecksum::Elided,
            _ if offload => UdpChecksum::Offloaded,
            Some(sum) => UdpChecksum::PayloadSummed(sum),
            None => UdpChecksum::SecondPass,
        };
        let r = self.udp_output(s, h, dst, buf, plan, connected);
        r.map(|()| len)
    }

    /// The copy in of `parts` after the UDP header's room in `buf`: with `sum`, on the
    /// protocol-specific path, it sums as it copies (paper 002 §7) and returns the sum.
    pub(crate) fn udp_copy_in(
        &self,
        s: impl Sampling,
        buf: &mut PacketBuf,
        parts: &[&[u8]],
        sum: bool,
    ) -> Option<u16> {
        let _p = self
            .ledger
            .probe(s, Layer::Socket, Side::Send, Op::UserCopy);
        let mut at = crate::wire::udp::HEADER_LEN;
        let mut acc = checksum::Accumulator::new();
        for part in parts {
            let dst = &mut buf.data_mut()[at..at + part.len()];
            if sum {
                acc.copy_and_add_with(self.tuning.checksum, dst, part);
            } else {
                dst.copy_from_slice(part);
            }
            at += part.len();
        }
        sum.then(|| acc.sum())
    }

    /// Receives one datagram, waiting up to `timeout` for one to arrive (blocking use; see
    /// [`crate::socket::blocking`]).
    pub fn udp_recv_from_blocking(
        &mut self,
        h: UdpHandle,
        buf: &mut [u8],
        clock: &impl crate::time::Clock,
        timeout: crate::time::Duration,
    ) -> Result<UdpRecv, UdpError> {
        crate::socket::blocking::block_on(self, clock, timeout, |s| s.udp_recv_from(h, buf))
    }

    /// Receives one datagram into `buf` (recvfrom / recvmsg). A datagram longer than the
    /// buffer is truncated and the rest discarded (`truncated` says so).
    ///
    /// On the protocol-specific path the data's checksum is verified while it is copied
    /// out (paper 002 §7.1): a datagram that fails is dropped and counted, and the call
    /// goes on to the next one (or reports `WouldBlock`). The bytes of the bad datagram may
    /// already have been written into `buf`.
    pub fn udp_recv_from(&mut self, h: UdpHandle, buf: &mut [u8]) -> Result<UdpRecv, UdpError> {
        self.udp_recv_msg(h, &mut [buf])
    }

    /// Receives one datagram into `buf`, without the sender (recv).
    pub fn udp_recv(&mut self, h: UdpHandle, buf: &mut [u8]) -> Result<usize, UdpError> {
        self.udp_recv_msg(h, &mut [buf]).map(|r| r.len)
    }

    /// Receives one datagram scattered over `bufs` in order (recvmsg); the rest of a
    /// datagram longer than all of them is discarded and `truncated` says so.
    pub fn udp_recv_msg(
        &mut self,
        h: UdpHandle,
        bufs: &mut [&mut [u8]],
    ) -> Result<UdpRecv, UdpError> {
        crate::probe::ledger::sampled!(self.ledger, s => self.udp_recv_msg_as(s, h, bufs))
    }

    fn udp_recv_msg_as(
        &mut self,
        s: impl Sampling,
        h: UdpHandle,
        bufs: &mut [&mut [u8]],
    ) -> Result<UdpRecv, UdpError> {
        loop {
            let q = {
                let _p = self
                    .ledger
                    .probe(s, Layer::Socket, Side::Receive, Op::SocketBuffer);
                let s = self.udp_sockets.get_mut(h).ok_or(UdpError::BadHandle)?;
                if let Some(e) = s.error.take() {
                    return Err(e);
                }
                let Some(q) = s.rx.pop_front() else {
                    return Err(UdpError::WouldBlock);
                };
                s.rx_bytes -= q.payload.len();
                let ip_options = s.take_rx_options();
                (q, ip_options)
            };
            let (q, ip_options) = q;
            let data = q.payload.data();
            let datagram_len = data.len();
            let (copied, ok) = {
                let _p = self
                    .ledger
                    .probe(s, Layer::Socket, Side::Receive, Op::UserCopy);
                let kernel = self.tuning.checksum;
                // On the protocol-specific path the copy sums as it goes; a truncated read
                // still verifies the whole datagram.
                let mut acc = q.verify_on_copy().map(checksum::Accumulator::with_seed);
                let mut at = 0;
                for buf in bufs.iter_mut() {
                    let n = buf.len().min(datagram_len - at);
                    let (dst, src) = (&mut buf[..n], &data[at..at + n]);
                    match acc.as_mut() {
                        Some(a) => a.copy_and_add_with(kernel, dst, src),
                        None => dst.copy_from_slice(src),
                    }
                    at += n;
                }
                if let Some(a) = acc.as_mut() {
                    a.add_with(kernel, &data[at..]);
                }
                (at, acc.is_none_or(|a| checksum::verifies(a.sum())))
            };
            let (from, to) = (q.from(), q.payload.rx_dst());
            self.free(s, Layer::Socket, Side::Receive, q.payload);
            if !ok {
                self.ledger.counters().inc(Counter::UdpDropBadChecksum);
                continue;
            }
            return Ok(UdpRecv {
                len: copied,
                datagram_len,
                from,
                to,
                truncated: copied < datagram_len,
                ip_options,
            });
        }
    }
}

impl From<SendError> for UdpError {
    fn from(e: SendError) -> Self {
        match e {
            SendError::NoRoute => UdpError::NoRoute,
            // Less than MAX_UDP_PAYLOAD when the socket sends IP options.
            SendError::TooLarge { max, .. } => UdpError::MessageTooBig {
                max: max.saturating_sub(crate::wire::udp::HEADER_LEN),
            },
            SendError::NeedsFragmentation { .. } => UdpError::MessageTooBig {
                max: MAX_UDP_PAYLOAD,
            },
            SendError::NoBuffer => UdpError::NoBuffer,
            SendError::InvalidSourceRoute => UdpError::InvalidArgument,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The queue entry's one word gives back the address, port and partial sum it was
    /// made with, at their extremes; a zero sum, the other zero of one's complement,
    /// comes back as 0xFFFF and still means "verify", never "verified".
    #[test]
    fn a_queued_datagram_keeps_its_sender_and_partial_sum() {
        let mut pool = crate::buf::Pool::with_cache(true);
        for (addr, port, sum) in [
            ([198, 18, 0, 1], 7, Some(0x1234)),
            ([255, 255, 255, 255], u16::MAX, Some(u16::MAX)),
            ([0, 0, 0, 0], 0, None),
            ([198, 19, 255, 254], 53, Some(0)),
        ] {
            let buf = pool.alloc(10, 0).unwrap();
            let q = Queued::new((Ipv4Address(addr), port), buf, sum);
            assert_eq!(q.from(), (Ipv4Address(addr), port));
            assert_eq!(
                q.verify_on_copy(),
                sum.map(|s| if s == 0 { 0xFFFF } else { s })
            );
            assert_eq!(q.payload.len(), 10);
            pool.free(q.payload);
        }
    }
}
