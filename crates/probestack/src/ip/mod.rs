//! IPv4 (RFC 791, RFC 1122 §3): input validation, reassembly, dispatch by protocol; output
//! with route lookup, header, identifier, header checksum, and fragmentation to the MTU.
//!
//! - [`route`]: the routing table.
//! - [`reassembly`]: the defragmentation queue with hole lists.
//! - `icmp`: echo, errors, rate limiting.
//! - `udp_short`: input's short path for the common UDP datagram.

mod icmp;
pub mod reassembly;
pub(crate) use icmp::IcmpError;
pub mod route;
mod udp_short;

use crate::buf::PacketBuf;
use crate::checksum;
use crate::driver::RxChecksum;
use crate::ip::reassembly::{FragKey, Reassembled, ReassemblyError};
use crate::probe::{Counter, Layer, Op, Sampling, Side};
use crate::stack::{SendError, Stack};
use crate::time::Instant;
use crate::wire::icmpv4::DstUnreachable;
use crate::wire::ipv4::{self, IpProtocol, Ipv4Options, Ipv4Repr};
use crate::wire::source_route::{self, SourceRoute};
use crate::wire::{Checksum, Ipv4Address};

/// The interface index of datagrams the host sent to itself.
pub(crate) const LOOPBACK: usize = usize::MAX;

/// The largest IPv4 datagram (RFC 791: the total length is 16 bits).
pub const MAX_DATAGRAM: usize = 65535;

/// Largest payload after a 20-byte header.
pub const MAX_PAYLOAD: usize = MAX_DATAGRAM - ipv4::MIN_HEADER_LEN;

/// The IP header fields a socket chooses for what it sends (`IP_TTL` and `IP_TOS` on a
/// BSD socket): RFC 1122 §4.1.4 has an application set them for UDP, RFC 9293 MUST-48
/// and MUST-49 for TCP.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IpFields {
    /// The time to live; `None` for the stack's (`StackConfig::ttl`). Never 0 (RFC 1122
    /// §3.2.1.7: a host must not send a datagram with a TTL of zero).
    pub ttl: Option<u8>,
    /// The Differentiated Services codepoint (RFC 2474: the TOS octet's six high bits;
    /// the two low ones are ECN's, left zero), 0 to 63.
    pub dscp: u8,
}

impl IpFields {
    /// Whether a socket may ask for these: a TTL other than 0, a DSCP that fits its six
    /// bits.
    pub fn valid(&self) -> bool {
        self.ttl != Some(0) && self.dscp < 64
    }
}

/// [`Stack::valid_source`] for an interface whose subnet broadcast address is
/// `broadcast`.
#[inline]
pub(crate) fn valid_source_on(src: Ipv4Address, broadcast: Option<Ipv4Address>) -> bool {
    let first = src.0[0];
    first != 127 && first < 224 && broadcast != Some(src)
}

/// How a transport has IP send a datagram: from which of the host's addresses (`None`:
/// the outgoing interface's), whether it may be fragmented, with the socket's TTL and
/// DSCP, and whether it is ECN-capable.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SendAs {
    /// A connection's or bound socket's local address (RFC 9293 MUST-45, RFC 1122
    /// §4.1.3.5), which under the weak end-system model need not be the outgoing
    /// interface's; it must be one of the host's.
    pub src: Option<Ipv4Address>,
    pub dont_frag: bool,
    pub fields: IpFields,
    /// ECT(0) in the ECN field (RFC 3168 §5): a transport that does ECN says so.
    pub ect: bool,
}

/// What a datagram carries beyond a plain header: IP options a socket set (RFC 1122
/// §3.2.1.8 has the transport specify them, §4.1.3.2 the UDP application), a source route
/// among them. Sent through [`Stack::ip_output_with`]; every other datagram has none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct IpExtras {
    /// The options, as they go on the wire (a source route's with them).
    pub options: Ipv4Options,
    /// With a source route: its first gateway, the header's destination (the final
    /// destination is the route option's last address, RFC 791 §3.1).
    pub first_hop: Option<Ipv4Address>,
}

impl IpExtras {
    /// None: a plain header.
    pub const NONE: IpExtras = IpExtras {
        options: Ipv4Options::NONE,
        first_hop: None,
    };

    /// `options` (none a source route) and, with `via`, a route through its gateways to
    /// `dst`. Errors: more gateways than an option holds, or more option bytes than a
    /// header holds.
    pub fn new(
        options: &Ipv4Options,
        via: Option<&SourceRouting>,
        dst: Ipv4Address,
    ) -> Result<IpExtras, ()> {
        let Some(via) = via else {
            return Ok(IpExtras {
                options: *options,
                first_hop: None,
            });
        };
        let (first_hop, rest) = via.gateways().split_first().ok_or(())?;
        let mut list = rest.to_vec();
        list.push(dst);
        let route = SourceRoute::new(via.strict, &list).map_err(|_| ())?;
        // After the options' own bytes, not their padding: a zero there ends the list.
        let bytes = [options.listed(), &route.to_bytes()].concat();
        Ok(IpExtras {
            options: Ipv4Options::new(&bytes).map_err(|_| ())?,
            first_hop: Some(*first_hop),
        })
    }
}

/// The gateways a source-routed datagram goes through, in order, before its destination
/// (RFC 791 §3.1; loose: others may lie between them, strict: none may), as an
/// application names them (RFC 1122 §3.2.1.8 (c): a host MUST be able to originate a
/// source route; RFC 9293 MUST-51 for a TCP active open) or as a received route reverses
/// to (RFC 9293 MUST-53).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SourceRouting {
    gateways: [Ipv4Address; source_route::MAX_ADDRESSES],
    len: u8,
    /// Strict (SSRR) or loose (LSRR).
    pub strict: bool,
}

impl SourceRouting {
    /// Through `gateways`, in order: at least one, and at most
    /// [`source_route::MAX_ADDRESSES`] (the first goes in the header's destination, the
    /// rest and the destination in the option's nine places). None may be unspecified,
    /// broadcast or multicast.
    pub fn new(gateways: &[Ipv4Address], strict: bool) -> Option<SourceRouting> {
        let fits = !gateways.is_empty() && gateways.len() <= source_route::MAX_ADDRESSES;
        let unicast = gateways
            .iter()
            .all(|g| !(g.is_unspecified() || g.is_broadcast() || g.is_multicast()));
        if !fits || !unicast {
            return None;
        }
        let mut r = SourceRouting {
            gateways: [Ipv4Address::UNSPECIFIED; source_route::MAX_ADDRESSES],
            len: gateways.len() as u8,
            strict,
        };
        r.gateways[..gateways.len()].copy_from_slice(gateways);
        Some(r)
    }

    /// The way back along a completed `route` a datagram from `source` arrived by
    /// (RFC 1122 §3.2.1.8 (c)): its recorded gateways in reverse order, the one recorded
    /// last first. `None` when it recorded none (the source is a neighbour). A first
    /// address that is the source's own is left out, a route that lists its sender (RFC
    /// 1812 §5.2.4.1 has routers correct it; Linux's `ip_options_echo` does the same).
    pub fn back_along(route: &SourceRoute, source: Ipv4Address) -> Option<SourceRouting> {
        let mut recorded = route.recorded();
        if recorded.first() == Some(&source) {
            recorded = &recorded[1..];
        }
        let gateways: Vec<Ipv4Address> = recorded.iter().rev().copied().collect();
        SourceRouting::new(&gateways, route.strict)
    }

    /// The gateways, first hop first.
    pub fn gateways(&self) -> &[Ipv4Address] {
        &self.gateways[..usize::from(self.len)]
    }
}

/// A source route to one destination and the options it makes (a TCP connection's: its
/// peer never changes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RouteTo {
    pub via: SourceRouting,
    pub extras: IpExtras,
    /// The application named it (RFC 9293 MUST-52: then it takes precedence over one a
    /// datagram brings), rather than a received datagram's route reversed.
    pub named: bool,
}

impl RouteTo {
    /// Through `via`'s gateways to `dst`; `None` if it does not fit in a header.
    pub fn new(via: SourceRouting, dst: Ipv4Address, named: bool) -> Option<RouteTo> {
        let extras = IpExtras::new(&Ipv4Options::NONE, Some(&via), dst).ok()?;
        Some(RouteTo { via, extras, named })
    }

    /// The first gateway: the way out of this host.
    pub fn first_hop(&self) -> Ipv4Address {
        self.via.gateways()[0]
    }
}

/// Records `addr` in a record route option (RFC 791 §3.1, type 7) at its pointer, if an
/// address fits there; a full one stays as it is.
fn record_route_hop(option: &mut [u8], addr: Ipv4Address) {
    let Some(&pointer) = option.get(2) else {
        return;
    };
    let at = usize::from(pointer);
    if at >= 4 && at + 3 <= option.len() {
        option[at - 1..at + 3].copy_from_slice(&addr.0);
        option[2] += 4;
    }
}

/// Records `stamp` in a timestamp option (RFC 791 §3.1, type 68) as its flag asks:
/// timestamps only (0), each after `addr` (1), or only where the next prespecified address
/// is `addr` (3). Without room, the overflow count (the high four bits of the fourth
/// byte) goes up by one, to at most 15.
fn timestamp_hop(option: &mut [u8], addr: Ipv4Address, stamp: u32) {
    let (Some(&pointer), Some(&flags)) = (option.get(2), option.get(3)) else {
        return;
    };
    let at = usize::from(pointer);
    let entry = match flags & 0x0F {
        0 => 4,
        1 | 3 => 8,
        _ => return,
    };
    if at < 5 || at + entry - 1 > option.len() {
        let overflow = (flags >> 4).saturating_add(1).min(15);
        option[3] = (overflow << 4) | (flags & 0x0F);
        return;
    }
    let slot = &mut option[at - 1..at - 1 + entry];
    match flags & 0x0F {
        0 => slot.copy_from_slice(&stamp.to_be_bytes()),
        1 => {
            slot[..4].copy_from_slice(&addr.0);
            slot[4..].copy_from_slice(&stamp.to_be_bytes());
        }
        // Prespecified: ours only if this slot names us.
        _ if slot[..4] != addr.0 => return,
        _ => slot[4..].copy_from_slice(&stamp.to_be_bytes()),
    }
    option[2] += entry as u8;
}

/// The ECN field's codepoints (RFC 3168 §5).
pub(crate) const ECN_ECT0: u8 = 0b10;
pub(crate) const ECN_CE: u8 = 0b11;

impl Stack {
    /// Whether `dst` is addressed to this host as received on `iface`: one of its
    /// addresses (the weak end-system model, RFC 1122 §3.3.4.2), the limited broadcast, or
    /// the interface's subnet broadcast.
    fn accepts(&self, iface: usize, dst: Ipv4Address) -> bool {
        // The receiving interface's own address first: almost every datagram, and no
        // walk over the other interfaces.
        if let Some(i) = self.ifaces.get(iface) {
            if dst == i.cidr.address || Some(dst) == i.broadcast {
                return true;
            }
        }
        dst.is_broadcast() || self.is_own_address(dst)
    }

    /// Whether `src` may be the source of a datagram received on `iface` (RFC 1122
    /// §3.2.1.3 has a host silently discard one whose source is invalid): not a
    /// broadcast address (the limited one, or the receiving interface's subnet's), not
    /// multicast or class E, not loopback ("MUST NOT appear outside a host"). Addresses
    /// in 0/8 are let through: a host learning its address sends from them (BOOTP,
    /// DHCP), which §3.2.1.3 allows.
    fn valid_source(&self, iface: usize, src: Ipv4Address) -> bool {
        valid_source_on(src, self.ifaces.get(iface).and_then(|i| i.broadcast))
    }

    /// Whether a datagram that came in a link-layer broadcast frame may go on to IP input
    /// (RFC 1122 §3.3.6: a host SHOULD silently discard one that does not name an IP
    /// broadcast or multicast destination). `datagram` starts at the IP header; one too
    /// short to hold a destination goes on, for IP input to count as malformed.
    pub(crate) fn ip_link_broadcast_ok(&self, iface: usize, datagram: &PacketBuf) -> bool {
        let Some(dst) = datagram.data().get(16..20) else {
            return true;
        };
        let dst = Ipv4Address::from_bytes(dst);
        dst.is_multicast() || dst.is_broadcast() || self.ifaces[iface].broadcast == Some(dst)
    }

    /// Sums a header with the routine the Tuning asks for: in line (paper 002 §6.1) or the
    /// general one with the configured kernel.
    fn ip_header_sum(&self, header: &[u8]) -> u16 {
        if self.tuning.inline_ip_header_checksum {
            checksum::header_sum(header)
        } else {
            checksum::sum_with(self.tuning.checksum, header)
        }
    }

    /// A datagram from the link (Ethernet header already stripped), or from loopback.
    pub(crate) fn ip_input(
        &mut self,
        s: impl Sampling,
        iface: usize,
        mut buf: PacketBuf,
        rx: RxChecksum,
        now: Instant,
    ) {
        if let Some(ip) = self.udp_short_eligible(iface, &buf) {
            return self.udp_short_input(s, ip, buf, rx, now);
        }
        self.ledger.counters().inc(Counter::IpPacketsIn);
        let mut parsed = {
            let _p = self.ledger.probe(s, Layer::Ip, Side::Receive, Op::IpProto);
            if buf.has_frags() {
                Self::parse_split(&buf)
            } else {
                // `parse` checks the lengths (`Packet::check_len`) itself: a checked view
                // first would check them twice.
                Ipv4Repr::parse(&ipv4::Packet::new_unchecked(buf.data()), Checksum::Skip)
            }
        };
        if parsed.is_err() && buf.has_frags() {
            // Only a whole TCP segment is read in pieces; anything else with fragments
            // (a UDP datagram of loaned data, an IP fragment) is copied together first.
            buf = match self.linearize_received(s, Layer::Ip, buf) {
                Ok(whole) => whole,
                Err(()) => return,
            };
            let _p = self.ledger.probe(s, Layer::Ip, Side::Receive, Op::IpProto);
            parsed = Ipv4Repr::parse(&ipv4::Packet::new_unchecked(buf.data()), Checksum::Skip);
        }
        // Used where the parse left it: moved out, it was copied with loads wider than
        // the parse's stores, which the CPU cannot forward (a stall every datagram).
        let Ok(repr) = &mut parsed else {
            self.ledger.counters().inc(Counter::IpDropMalformed);
            return self.free(s, Layer::Ip, Side::Receive, buf);
        };
        let header_len = repr.header_len();
        if rx != RxChecksum::Verified && iface != LOOPBACK {
            let ok = {
                let _p = self.ledger.probe(s, Layer::Ip, Side::Receive, Op::Checksum);
                checksum::verifies(self.ip_header_sum(&buf.data()[..header_len]))
            };
            if !ok {
                self.ledger.counters().inc(Counter::IpDropBadChecksum);
                return self.free(s, Layer::Ip, Side::Receive, buf);
            }
        }
        let accepted = {
            let _p = self.ledger.probe(s, Layer::Ip, Side::Receive, Op::IpProto);
            if !self.accepts(iface, repr.dst) {
                Err(Counter::IpDropNotForUs)
            } else if iface != LOOPBACK && !self.valid_source(iface, repr.src) {
                Err(Counter::IpDropBadSource)
            } else {
                // Drop link-layer padding past the total length (none, usually).
                match buf.len().saturating_sub(repr.buffer_len()) {
                    0 => Ok(()),
                    extra => buf.trim_back(extra).map_err(|_| Counter::IpDropMalformed),
                }
            }
        };
        if let Err(c) = accepted {
            self.ledger.counters().inc(c);
            return self.free(s, Layer::Ip, Side::Receive, buf);
        }

        let key = |repr: &Ipv4Repr| FragKey {
            src: repr.src,
            dst: repr.dst,
            protocol: repr.protocol.into(),
            ident: repr.ident,
        };
        if repr.is_fragment() {
            match self.reassemble(s, key(repr), repr, buf, now) {
                Some((r, b)) => {
                    *repr = r;
                    buf = b;
                }
                None => return,
            }
        } else if !self.tuning.defrag_check_only_fragments {
            // Paper 001 §7.6: Ultrix searched the defrag queue for every datagram.
            let _p = self
                .ledger
                .probe(s, Layer::Ip, Side::Receive, Op::DefragQueue);
            self.ledger.counters().inc(Counter::IpDefragLookups);
            std::hint::black_box(self.reassembler.contains(&key(repr)));
        }

        if !repr.options.is_empty() {
            if let Err(c) = self.ip_input_options(repr) {
                self.ledger.counters().inc(c);
                if c == Counter::IpDropSourceRouteFailed {
                    let code = DstUnreachable::SourceRouteFailed;
                    return self.icmp_dst_unreachable(s, code, 0, repr, buf, now);
                }
                return self.free(s, Layer::Ip, Side::Receive, buf);
            }
        }
        self.ledger.counters().inc(Counter::IpDelivered);
        match repr.protocol {
            IpProtocol::Icmp => self.icmp_input(s, iface, repr, buf, now),
            IpProtocol::Udp => self.udp_input(s, repr, buf, rx, now),
            IpProtocol::Tcp => self.tcp_input(s, repr, buf, rx, now),
            IpProtocol::Other(_) => {
                self.ledger.counters().inc(Counter::IpDropUnknownProtocol);
                self.icmp_dst_unreachable(s, DstUnreachable::ProtoUnreachable, 0, repr, buf, now);
            }
        }
    }

    /// What a datagram's options ask of this host: only a source route asks anything
    /// (RFC 791 §3.1; the others are passed up, RFC 1122 §3.2.1.8). `Err` with the drop's
    /// counter: a malformed route or two, any route when the stack takes none
    /// (`StackConfig::accept_source_route`), or one that goes on past this host.
    #[cold]
    fn ip_input_options(&self, repr: &Ipv4Repr) -> Result<(), Counter> {
        match SourceRoute::find(repr.options.as_bytes()) {
            Ok(None) => Ok(()),
            Err(_) => Err(Counter::IpDropMalformed),
            Ok(Some(_)) if !self.config.accept_source_route => Err(Counter::IpDropSourceRoute),
            Ok(Some(r)) if !r.is_complete() => Err(Counter::IpDropSourceRouteFailed),
            Ok(Some(_)) => Ok(()),
        }
    }

    /// The options an answer to the datagram `repr` heads carries to go back along the
    /// completed source route it came by, reversed (RFC 1122 §3.2.1.8 (c)); none if it
    /// came by none.
    pub(crate) fn ip_route_back(repr: &Ipv4Repr) -> IpExtras {
        if repr.options.is_empty() {
            return IpExtras::NONE;
        }
        Self::source_routing_back(repr)
            .and_then(|via| IpExtras::new(&Ipv4Options::NONE, Some(&via), repr.src).ok())
            .unwrap_or(IpExtras::NONE)
    }

    /// The options of the echo reply from `from` to the request `repr` heads (RFC 1122
    /// §3.2.2.6): its record route and timestamp options, with this host recorded in each
    /// where there is room, so that they cover the whole round trip (SHOULD); and the way
    /// back along its completed source route, reversed (MUST).
    pub(crate) fn ip_echo_reply_options(&self, repr: &Ipv4Repr, from: Ipv4Address) -> IpExtras {
        if repr.options.is_empty() {
            return IpExtras::NONE;
        }
        // RFC 791 §3.1: milliseconds since midnight UT, or (this host keeps no time of
        // day) any time with the high-order bit set.
        let stamp = ((self.now.as_micros() / 1000) as u32 & 0x7FFF_FFFF) | 0x8000_0000;
        let mut kept = Vec::new();
        for option in ipv4::each_option(repr.options.as_bytes()) {
            let mut option = option.to_vec();
            match option[0] {
                ipv4::OPTION_RECORD_ROUTE => record_route_hop(&mut option, from),
                ipv4::OPTION_TIMESTAMP => timestamp_hop(&mut option, from, stamp),
                _ => continue,
            }
            kept.extend_from_slice(&option);
        }
        let recorded = Ipv4Options::new(&kept).unwrap_or(Ipv4Options::NONE);
        let via = Self::source_routing_back(repr);
        // Both if they fit; the route back alone if not.
        IpExtras::new(&recorded, via.as_ref(), repr.src)
            .or_else(|()| IpExtras::new(&Ipv4Options::NONE, via.as_ref(), repr.src))
            .unwrap_or(IpExtras::NONE)
    }

    /// The way back along the completed source route `repr` arrived by, if it did.
    pub(crate) fn source_routing_back(repr: &Ipv4Repr) -> Option<SourceRouting> {
        match SourceRoute::find(repr.options.as_bytes()) {
            Ok(Some(route)) if route.is_complete() => SourceRouting::back_along(&route, repr.src),
            _ => None,
        }
    }

    /// The header of a datagram a NIC split (header/data split, zero-copy receive): the
    /// headers in the window, the payload in fragments. Only a whole TCP segment whose
    /// total length counts exactly those bytes is taken; anything else is malformed.
    fn parse_split(buf: &PacketBuf) -> crate::wire::Result<Ipv4Repr> {
        let repr = Ipv4Repr::parse_header(buf.data(), Checksum::Skip)?;
        let whole = repr.header_len() + repr.payload_len == buf.total_len();
        if !whole || repr.is_fragment() || repr.protocol != IpProtocol::Tcp {
            return Err(crate::wire::Error::Truncated {
                proto: crate::wire::Proto::Ipv4,
                needed: repr.header_len() + repr.payload_len,
                available: buf.total_len(),
            });
        }
        Ok(repr)
    }

    /// Adds a fragment to the reassembly queue; returns the whole datagram (with a header
    /// rewritten for it) when this fragment completes one.
    fn reassemble(
        &mut self,
        s: impl Sampling,
        key: FragKey,
        repr: &Ipv4Repr,
        buf: PacketBuf,
        now: Instant,
    ) -> Option<(Ipv4Repr, PacketBuf)> {
        self.ledger.counters().inc(Counter::IpFragmentsIn);
        let evicted_before = self.reassembler.stats().evicted_for_memory;
        let result = {
            let _p = self
                .ledger
                .probe(s, Layer::Ip, Side::Receive, Op::DefragQueue);
            let (header, payload) = buf.data().split_at(repr.header_len());
            self.reassembler.add(
                key,
                repr.frag_offset as usize,
                repr.more_frags,
                header,
                payload,
                now,
            )
        };
        self.free(s, Layer::Ip, Side::Receive, buf);
        // Datagrams this fragment pushed out to stay under the caps.
        let evicted = self.reassembler.stats().evicted_for_memory - evicted_before;
        if evicted > 0 {
            self.ledger.counters().add(Counter::IpFragEvicted, evicted);
        }
        let Reassembled { header, payload } = match result {
            Ok(Some(r)) => r,
            Ok(None) => return None,
            Err(e) => {
                let c = match e {
                    ReassemblyError::Overlap
                    | ReassemblyError::PoisonedByOverlap
                    | ReassemblyError::ConflictingEnd => Counter::IpDropFragOverlap,
                    ReassemblyError::NoMemory => Counter::IpDropFragMemory,
                    _ => Counter::IpDropFragMalformed,
                };
                self.ledger.counters().inc(c);
                return None;
            }
        };
        self.ledger.counters().inc(Counter::IpReassembled);
        // The first fragment's header, made the header of the whole datagram.
        let (mut whole, _) = Ipv4Repr::parse_truncated(&header, Checksum::Skip).ok()?;
        whole.payload_len = payload.len();
        whole.more_frags = false;
        whole.frag_offset = 0;
        let mut out = self
            .alloc(s, Layer::Ip, Side::Receive, whole.buffer_len())
            .ok()?;
        let emitted = {
            let _p = self
                .ledger
                .probe(s, Layer::Ip, Side::Receive, Op::DefragQueue);
            let mut p = ipv4::Packet::new_unchecked(out.data_mut());
            let r = whole.emit(&mut p, Checksum::Skip);
            if r.is_ok() {
                p.payload_mut().copy_from_slice(&payload);
            }
            // The buffer goes back for the next datagram (freed here, a 64 KiB one cost
            // the allocator's heap trimming and fresh pages for the next).
            self.reassembler.recycle(payload);
            r
        };
        if emitted.is_err() {
            self.free(s, Layer::Ip, Side::Receive, out);
            self.ledger.counters().inc(Counter::IpDropFragMalformed);
            return None;
        }
        Some((whole, out))
    }

    /// Whether a transport may leave its checksum out for `dst` (papers 000 and 003): the
    /// `checksum_elision` switch is on, the route's next hop is the destination itself,
    /// and the outgoing link protects frames with a CRC. Datagrams to this host itself
    /// never leave memory and qualify too.
    pub(crate) fn checksum_elidable(&self, dst: Ipv4Address) -> bool {
        if !self.tuning.checksum_elision {
            return false;
        }
        if self.is_own_address(dst) {
            return true;
        }
        self.routes.lookup(dst).is_some_and(|r| {
            r.next_hop_is_destination
                && self.ifaces.get(r.interface).is_some_and(|i| i.caps.has_crc)
        })
    }

    /// Negative advice from a transport whose peer at `dst` stopped answering (RFC 1122
    /// §3.3.1.4, §4.2.3.5): the next hop's learned link address is forgotten, so that
    /// the next datagram asks for it again (a peer that moved to another MAC, a next hop
    /// replaced). A static entry stays; this host has no other gateway to try.
    pub(crate) fn ip_negative_advice(&mut self, dst: Ipv4Address) {
        let Some(r) = self.routes.lookup(dst) else {
            return;
        };
        let forgot = self
            .ifaces
            .get_mut(r.interface)
            .is_some_and(|i| i.arp.forget_learned(r.next_hop));
        if forgot {
            self.ledger.counters().inc(Counter::ArpForgottenOnAdvice);
        }
    }

    /// The source address a datagram to `dst` leaves with: the outgoing interface's.
    pub(crate) fn source_address_for(&self, dst: Ipv4Address) -> Option<Ipv4Address> {
        if self.is_own_address(dst) {
            return Some(dst);
        }
        let r = self.routes.lookup(dst)?;
        self.ifaces.get(r.interface).map(|i| i.cidr.address)
    }

    /// Sends `payload` (a transport message in a buffer with headroom) to `dst` as
    /// `protocol`, as `send` says: from its source address, or the outgoing interface's;
    /// with its TTL and DSCP; fragmented to the MTU unless it says not to. With `extras`'
    /// options (`IpExtras::NONE` for none), a source route among them: then the header's
    /// destination is the route's first hop, and the route is looked up for it; `dst`,
    /// the final destination, is the route option's last address.
    pub(crate) fn ip_output_with(
        &mut self,
        s: impl Sampling,
        dst: Ipv4Address,
        protocol: IpProtocol,
        mut payload: PacketBuf,
        send: SendAs,
        extras: &IpExtras,
    ) -> Result<(), SendError> {
        let chosen = send.src;
        let now = self.now;
        let max = MAX_PAYLOAD - extras.options.len();
        if payload.total_len() > max {
            let len = payload.total_len();
            self.free(s, Layer::Ip, Side::Send, payload);
            return Err(SendError::TooLarge { len, max });
        }
        let dst = extras.first_hop.unwrap_or(dst);
        let route = {
            let _p = self.ledger.probe(s, Layer::Ip, Side::Send, Op::IpProto);
            if self.is_own_address(dst) {
                Ok(None)
            } else {
                match self.routes.lookup(dst) {
                    Some(r) if r.interface < self.ifaces.len() => Ok(Some(r)),
                    _ => Err(()),
                }
            }
        };
        let Ok(route) = route else {
            self.ledger.counters().inc(Counter::IpDropNoRoute);
            self.free(s, Layer::Ip, Side::Send, payload);
            return Err(SendError::NoRoute);
        };
        let (src, mtu) = match route {
            Some(r) => (
                chosen.unwrap_or(self.ifaces[r.interface].cidr.address),
                self.ifaces[r.interface].caps.mtu,
            ),
            None => (chosen.unwrap_or(dst), MAX_DATAGRAM),
        };
        let repr = Ipv4Repr {
            ident: self.next_ident(),
            payload_len: payload.total_len(),
            options: extras.options,
            ..self.outgoing_header(src, dst, protocol, send)
        };
        let hop = route.map(|r| (r.interface, r.next_hop));
        // A TCP super-segment is larger than the MTU on purpose: the device cuts it.
        let segmented_by_device = payload.tx_offload().gso_size != 0 && hop.is_some();
        if repr.buffer_len() > mtu && !segmented_by_device {
            if send.dont_frag {
                self.ledger.counters().inc(Counter::IpDropNeedFrag);
                self.free(s, Layer::Ip, Side::Send, payload);
                return Err(SendError::NeedsFragmentation { mtu });
            }
            return self.fragment_output(s, repr, hop, payload, mtu, now);
        }
        if !self.prepend_ip_header(s, &repr, &mut payload) {
            self.free(s, Layer::Ip, Side::Send, payload);
            return Err(SendError::NoBuffer);
        }
        self.ledger.counters().inc(Counter::IpPacketsOut);
        self.ip_to_link(s, hop, payload, now);
        Ok(())
    }

    /// The header IP output writes for a whole datagram, less its identifier and length
    /// (zero here): no options, what `send` asks (its source aside: `src` is the one
    /// chosen; the configured TTL unless the socket names one). Header templates
    /// (`link::template`) start from it, so that their frames and the layers' are the
    /// same bytes.
    pub(crate) fn outgoing_header(
        &self,
        src: Ipv4Address,
        dst: Ipv4Address,
        protocol: IpProtocol,
        send: SendAs,
    ) -> Ipv4Repr {
        Ipv4Repr {
            src,
            dst,
            protocol,
            ttl: send.fields.ttl.unwrap_or(self.config.ttl),
            dscp: send.fields.dscp,
            ecn: if send.ect { ECN_ECT0 } else { 0 },
            ident: 0,
            dont_frag: send.dont_frag,
            more_frags: false,
            frag_offset: 0,
            payload_len: 0,
            options: Ipv4Options::NONE,
        }
    }

    /// Hands a finished datagram to the link, or to the loopback queue.
    fn ip_to_link(
        &mut self,
        s: impl Sampling,
        hop: Option<(usize, Ipv4Address)>,
        datagram: PacketBuf,
        now: Instant,
    ) {
        match hop {
            Some((iface, next_hop)) => self.link_output(s, iface, next_hop, datagram, now),
            None => {
                // Our own input parses one contiguous buffer.
                let datagram = if datagram.has_frags() {
                    match self.linearize(s, datagram) {
                        Ok(d) => d,
                        Err(()) => return,
                    }
                } else {
                    datagram
                };
                self.loopback.push_back(datagram)
            }
        }
    }

    /// Writes the header into the buffer's headroom and fills its checksum.
    fn prepend_ip_header(&self, s: impl Sampling, repr: &Ipv4Repr, buf: &mut PacketBuf) -> bool {
        let _p = self.ledger.probe(s, Layer::Ip, Side::Send, Op::IpProto);
        if buf.prepend(repr.header_len()).is_err() {
            return false;
        }
        let mut p = ipv4::Packet::new_unchecked(buf.data_mut());
        // The header alone: the payload may go on in the buffer's fragments.
        if repr.emit_header(&mut p, Checksum::Skip).is_err() {
            return false;
        }
        let _c = self.ledger.probe(s, Layer::Ip, Side::Send, Op::Checksum);
        if self.tuning.inline_ip_header_checksum {
            p.fill_checksum();
        } else {
            p.fill_checksum_general(self.tuning.checksum);
        }
        true
    }

    /// RFC 791 §3.2 "Fragmentation": pieces of at most the MTU, each data part but the
    /// last a multiple of 8 bytes, each with its own header.
    fn fragment_output(
        &mut self,
        s: impl Sampling,
        repr: Ipv4Repr,
        hop: Option<(usize, Ipv4Address)>,
        payload: PacketBuf,
        mtu: usize,
        now: Instant,
    ) -> Result<(), SendError> {
        let payload = if payload.has_frags() {
            self.linearize(s, payload)
                .map_err(|()| SendError::NoBuffer)?
        } else {
            payload
        };
        let per_fragment = (mtu - repr.header_len()) / 8 * 8;
        let later_options = repr.options.copied();
        let total = payload.len();
        let mut offset = 0;
        let mut result = Ok(());
        while offset < total {
            let len = per_fragment.min(total - offset);
            let Ok(mut frag) = self.alloc(s, Layer::Ip, Side::Send, len) else {
                result = Err(SendError::NoBuffer);
                break;
            };
            {
                let _p = self.ledger.probe(s, Layer::Ip, Side::Send, Op::BufMisc);
                frag.data_mut()
                    .copy_from_slice(&payload.data()[offset..offset + len]);
            }
            let piece = Ipv4Repr {
                more_frags: offset + len < total,
                frag_offset: offset as u16,
                payload_len: len,
                // Only the first fragment carries every option (RFC 791 §3.2).
                options: if offset == 0 {
                    repr.options
                } else {
                    later_options
                },
                ..repr
            };
            if !self.prepend_ip_header(s, &piece, &mut frag) {
                self.free(s, Layer::Ip, Side::Send, frag);
                result = Err(SendError::NoBuffer);
                break;
            }
            self.ledger.counters().inc(Counter::IpFragmentsOut);
            self.ip_to_link(s, hop, frag, now);
            offset += len;
        }
        self.ledger.counters().inc(Counter::IpPacketsOut);
        self.free(s, Layer::Ip, Side::Send, payload);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::{MemoryLink, NicConfig};
    use crate::ip::reassembly::ReassemblyConfig;
    use crate::ip::route::Ipv4Cidr;
    use crate::sim::{ipv4_header, ADDR_A, ADDR_B, MAC_B};
    use crate::stack::{InterfaceConfig, StackConfig};

    /// Host B alone on a memory link (its peer's end dropped): frames are handed to its
    /// IP input directly.
    fn host_b(config: StackConfig) -> Stack {
        let (_peer, nic) = MemoryLink::pair(NicConfig::default(), NicConfig::default()).unwrap();
        let mut st = Stack::new(config);
        st.add_interface(
            Box::new(nic),
            InterfaceConfig {
                mac: MAC_B,
                cidr: Ipv4Cidr {
                    address: ADDR_B,
                    prefix_len: 15,
                },
            },
        );
        st
    }

    /// An interface's subnet broadcast address is taken as a destination and refused as
    /// a source; a /31 (RFC 3021) has none, so its peer's address is neither.
    #[test]
    fn the_subnet_broadcast_address_and_a_31_which_has_none() {
        let st = host_b(StackConfig::default());
        let subnet = Ipv4Address::new(198, 19, 255, 255);
        assert!(st.accepts(0, subnet) && st.is_broadcast_address(subnet));
        assert!(!st.valid_source(0, subnet));
        assert!(st.valid_source(0, ADDR_A) && st.valid_source(0, Ipv4Address::UNSPECIFIED));
        for bad in [
            [255, 255, 255, 255],
            [224, 0, 0, 9],
            [240, 1, 2, 3],
            [127, 0, 0, 1],
        ] {
            assert!(!st.valid_source(0, Ipv4Address(bad)), "{bad:?}");
        }
        let (_peer, nic) = MemoryLink::pair(NicConfig::default(), NicConfig::default()).unwrap();
        let mut p2p = Stack::new(StackConfig::default());
        let (ours, peer) = (
            Ipv4Address::new(198, 18, 9, 0),
            Ipv4Address::new(198, 18, 9, 1),
        );
        p2p.add_interface(
            Box::new(nic),
            InterfaceConfig {
                mac: MAC_B,
                cidr: Ipv4Cidr {
                    address: ours,
                    prefix_len: 31,
                },
            },
        );
        assert!(p2p.accepts(0, ours));
        assert!(!p2p.accepts(0, peer) && !p2p.is_broadcast_address(peer));
        assert!(p2p.valid_source(0, peer));
    }

    /// A datagram whose checksum is right, handed up with a raw sum from the "NIC": the
    /// stack trusts the raw sum (adding only the pseudo-header), so a wrong one drops the
    /// datagram and a right one delivers it.
    #[test]
    fn udp_uses_the_raw_sum_a_nic_reports() {
        let mut st = host_b(StackConfig::default());
        let rx = st.udp_open();
        st.udp_bind(rx, ADDR_B, 9).unwrap();
        let payload = b"raw sums from the NIC";
        let udp = crate::wire::udp::UdpRepr {
            src_port: 4000,
            dst_port: 9,
        };
        let udp_len = udp.buffer_len(payload.len());
        let ip = ipv4_header(ADDR_A, ADDR_B, IpProtocol::Udp, udp_len);
        let mut bytes = vec![0u8; ip.buffer_len()];
        ip.emit(
            &mut ipv4::Packet::new_unchecked(&mut bytes[..]),
            Checksum::Check,
        )
        .unwrap();
        udp.emit(
            &mut crate::wire::udp::Packet::new_unchecked(&mut bytes[20..]),
            ADDR_A,
            ADDR_B,
            payload,
            Checksum::Check,
        )
        .unwrap();
        let raw = checksum::sum(&bytes[20..]);
        let c = |st: &Stack, k| st.ledger().counters().get(k);
        for (reported, delivered) in [(raw ^ 0x0100, false), (raw, true)] {
            let buf = PacketBuf::from_slice(&bytes, 0).unwrap();
            st.ip_input(
                crate::probe::TESTED,
                0,
                buf,
                RxChecksum::RawSum(reported),
                Instant::ZERO,
            );
            assert_eq!(st.udp_queued(rx), usize::from(delivered), "{reported:#x}");
        }
        assert_eq!(c(&st, Counter::UdpDropBadChecksum), 1);
    }

    /// RFC 1122 §3.2.1.8 (c): the way back goes to the gateway recorded last first, then
    /// the others in reverse order; its option lists them and, last, the source.
    #[test]
    fn a_recorded_route_reverses() {
        let (s, r1, r2, r3) = (
            ADDR_A,
            Ipv4Address::new(198, 18, 1, 1),
            Ipv4Address::new(198, 18, 2, 1),
            Ipv4Address::new(198, 18, 3, 1),
        );
        let route = |kind: u8, pointer: u8, addresses: &[Ipv4Address]| {
            let mut o = vec![kind, (3 + 4 * addresses.len()) as u8, pointer];
            addresses.iter().for_each(|a| o.extend_from_slice(&a.0));
            SourceRoute::parse(&o).unwrap()
        };
        let back = SourceRouting::back_along(&route(0x83, 16, &[r1, r2, r3]), s).unwrap();
        assert_eq!((back.gateways(), back.strict), (&[r3, r2, r1][..], false));
        let extras = IpExtras::new(&Ipv4Options::NONE, Some(&back), s).unwrap();
        let option = [&[0x83, 15, 4][..], &r2.0, &r1.0, &s.0].concat();
        assert_eq!(extras.options, Ipv4Options::new(&option).unwrap());
        assert_eq!(extras.first_hop, Some(r3));
        // One strict gateway: straight back through it.
        let back = SourceRouting::back_along(&route(0x89, 8, &[r1]), s).unwrap();
        assert_eq!((back.gateways(), back.strict), (&[r1][..], true));
        // A route that lists its own source: left out. Nothing else recorded: no way
        // back needed.
        let listed = SourceRouting::back_along(&route(0x83, 12, &[s, r1]), s).unwrap();
        assert_eq!(listed.gateways(), [r1]);
        assert_eq!(SourceRouting::back_along(&route(0x83, 8, &[s]), s), None);
    }

    /// RFC 1122 §3.2.2.6: an echo reply's options are the request's record route with the
    /// replying host's address recorded (when there is room; a full one goes back as it
    /// came) and its source route reversed; other options stay behind.
    #[test]
    fn an_echo_reply_records_its_host_and_follows_the_route_back() {
        let st = host_b(StackConfig::default());
        let gw = Ipv4Address::new(198, 18, 0, 99);
        let request = |options: &[u8]| Ipv4Repr {
            options: Ipv4Options::new(options).unwrap(),
            ..ipv4_header(ADDR_A, ADDR_B, IpProtocol::Icmp, 8)
        };
        // A recorded itself as it sent the request.
        let record = [7, 11, 8, 198, 18, 0, 1, 0, 0, 0, 0];
        let reply = st.ip_echo_reply_options(&request(&record), ADDR_B);
        let recorded = [7, 11, 12, 198, 18, 0, 1, 198, 18, 0, 2];
        assert_eq!(reply.options, Ipv4Options::new(&recorded).unwrap());
        assert_eq!(reply.first_hop, None);
        let full = st.ip_echo_reply_options(&request(&recorded), ADDR_B);
        assert_eq!(full.options, Ipv4Options::new(&recorded).unwrap());
        // A completed loose route through the gateway, a full timestamp option (its
        // overflow counted), a router alert (left behind), the record.
        let mut options = vec![0x83, 7, 8, 198, 18, 0, 99, 0x44, 4, 5, 0, 0x94, 4, 0, 0];
        options.extend_from_slice(&record);
        let both = st.ip_echo_reply_options(&request(&options), ADDR_B);
        let mut expected = vec![0x44, 4, 5, 0x10];
        expected.extend_from_slice(&recorded);
        expected.extend_from_slice(&[0x83, 7, 4, 198, 18, 0, 1]);
        assert_eq!(both.options, Ipv4Options::new(&expected).unwrap());
        assert_eq!(both.first_hop, Some(gw));
        assert_eq!(
            st.ip_echo_reply_options(&request(&[]), ADDR_B),
            IpExtras::NONE
        );
    }

    /// RFC 791's timestamp option, each flag: a timestamp alone, an address and a
    /// timestamp, a timestamp only where the next prespecified address is ours; and the
    /// overflow count when there is no room, which stops at 15.
    #[test]
    fn a_timestamp_option_records_as_its_flag_asks() {
        let (us, them, t) = (ADDR_B, ADDR_A, 0x8000_1234u32);
        let stamp = t.to_be_bytes();
        let mut only = vec![0x44, 12, 5, 0x00, 0, 0, 0, 0, 0, 0, 0, 0];
        timestamp_hop(&mut only, us, t);
        assert_eq!(only, [&[0x44, 12, 9, 0x00][..], &stamp, &[0; 4]].concat());
        let mut paired = vec![0x44, 12, 5, 0x01, 0, 0, 0, 0, 0, 0, 0, 0];
        timestamp_hop(&mut paired, us, t);
        assert_eq!(paired, [&[0x44, 12, 13, 0x01][..], &us.0, &stamp].concat());
        let named = |first: Ipv4Address| {
            let mut o = vec![0x44, 12, 5, 0x03];
            o.extend_from_slice(&first.0);
            o.extend_from_slice(&[0; 4]);
            o
        };
        let mut ours = named(us);
        timestamp_hop(&mut ours, us, t);
        assert_eq!(ours, [&[0x44, 12, 13, 0x03][..], &us.0, &stamp].concat());
        let mut theirs = named(them);
        timestamp_hop(&mut theirs, us, t);
        assert_eq!(theirs, named(them));
        let mut full = vec![0x44, 8, 9, 0xF0, 0, 0, 0, 1];
        timestamp_hop(&mut full, us, t);
        assert_eq!(full, [0x44, 8, 9, 0xF0, 0, 0, 0, 1]);
        let mut record = vec![7, 7, 8, 1, 2, 3, 4];
        record_route_hop(&mut record, us);
        assert_eq!(record, [7, 7, 8, 1, 2, 3, 4], "a full record route stays");
    }

    /// First fragments of more datagrams than the reassembly memory cap holds: each is
    /// either still held or counted in `ip.drop.frag_evicted`, the datagrams evicted to
    /// make room (they were dropped without a word before).
    #[test]
    fn datagrams_evicted_at_the_memory_cap_are_counted() {
        let mut st = host_b(StackConfig {
            reassembly: ReassemblyConfig {
                max_bytes: 32 << 10,
                ..ReassemblyConfig::default()
            },
            ..StackConfig::default()
        });
        const SENT: u16 = 100;
        for ident in 0..SENT {
            let ip = Ipv4Repr {
                ident,
                more_frags: true,
                ..ipv4_header(ADDR_A, ADDR_B, IpProtocol::Udp, 1480)
            };
            let mut bytes = vec![0u8; ip.buffer_len()];
            ip.emit(
                &mut ipv4::Packet::new_unchecked(&mut bytes[..]),
                Checksum::Check,
            )
            .unwrap();
            let buf = PacketBuf::from_slice(&bytes, 0).unwrap();
            st.ip_input(
                crate::probe::TESTED,
                0,
                buf,
                RxChecksum::None,
                Instant::ZERO,
            );
        }
        let held = st.reassembler().datagrams_held() as u64;
        let c = st.ledger().counters();
        assert_eq!(c.get(Counter::IpFragmentsIn), u64::from(SENT));
        assert!(held > 0 && held < u64::from(SENT), "{held} held");
        assert_eq!(st.reassembler().stats().refused_for_memory, 0);
        assert_eq!(held + c.get(Counter::IpFragEvicted), u64::from(SENT));
    }
}
