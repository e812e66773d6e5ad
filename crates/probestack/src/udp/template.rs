//! A socket's header template: the Ethernet, IPv4 and UDP headers of its last destination,
//! built once and copied in front of each datagram it sends there (`Tuning::
//! udp_header_template`).
//!
//! 4.3BSD's `udp_output` prepends "a template of the IP header" (paper 002 §2) and its TCP
//! keeps a whole prebuilt IP and TCP header per connection (`t_template`); Clark, Jacobson,
//! Romkey and Salwen (1989) counted the per-packet instructions that remain once output is
//! this short. A datagram sent through the layers looks up its route three times (the
//! checksum choice, the source address, IP output), resolves its next hop in the ARP cache,
//! and writes three headers field by field; with the template it copies 42 bytes and fills
//! the four fields that change: the IP total length, identifier and header checksum, and
//! the UDP length and checksum.
//!
//! A template holds only while what it was built from holds: the same destination, local
//! binding and no-checksum option, the route table and the interface's ARP cache
//! unchanged since (their generation numbers), and the ARP entry not expired. Anything
//! else (no route, an unresolved next hop, broadcast, loopback, a checksum the device
//! would complete, a datagram IP must fragment) goes through the layers as before, which
//! resolve, queue and count as usual.

use crate::checksum;
use crate::probe::{Counter, Layer, Op, Side};
use crate::socket::udp::{UdpError, UdpHandle};
use crate::stack::Stack;
use crate::time::Instant;
use crate::wire::ethernet::{self, EtherType, EthernetRepr};
use crate::wire::ipv4::{self, IpProtocol, Ipv4Options, Ipv4Repr};
use crate::wire::udp::{self as udp_wire, UdpRepr};
use crate::wire::{Checksum, Ipv4Address};

/// Bytes of headers in front of the payload: Ethernet, IPv4 without options, UDP.
pub(crate) const HEADERS_LEN: usize =
    ethernet::HEADER_LEN + ipv4::MIN_HEADER_LEN + udp_wire::HEADER_LEN;
const IP_AT: usize = ethernet::HEADER_LEN;
const UDP_AT: usize = IP_AT + ipv4::MIN_HEADER_LEN;

/// The headers for one destination and the facts they were built from.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HeaderTemplate {
    dst: (Ipv4Address, u16),
    local: (Ipv4Address, u16),
    no_checksum: bool,
    iface: usize,
    /// The largest IP datagram the interface sends whole.
    mtu: usize,
    /// The UDP checksum is left zero (paper 000's elision or the socket's option).
    elide: bool,
    src: Ipv4Address,
    route_generation: u64,
    arp_generation: u64,
    /// When the next hop's ARP entry expires (`None`: a static entry).
    arp_expires: Option<Instant>,
    /// The headers with zero lengths, identifier and checksums.
    bytes: [u8; HEADERS_LEN],
    /// The one's complement sum of the IP header as built: a datagram's header checksum
    /// adds its total length and identifier to it (RFC 1624's arithmetic) rather than
    /// reading back the header it has just written, whose stores the loads would wait on.
    ip_sum: u16,
}

impl Stack {
    /// The template `h` has for sending to `dst` now, built if it has none or a stale
    /// one; `None` when this datagram must go through the layers.
    fn udp_template(
        &mut self,
        h: UdpHandle,
        dst: (Ipv4Address, u16),
        no_checksum: bool,
    ) -> Option<HeaderTemplate> {
        let now = self.now;
        let s = self.udp_sockets.get(h)?;
        let local = s.local?;
        if let Some(t) = s.template {
            let holds = t.dst == dst
                && t.local == local
                && t.no_checksum == no_checksum
                && t.route_generation == self.routes.generation()
                && self.ifaces[t.iface].arp.generation() == t.arp_generation
                && t.arp_expires.is_none_or(|e| now < e);
            if holds {
                return Some(t);
            }
        }
        let t = self.udp_build_template(local, dst, no_checksum)?;
        self.ledger.counters().inc(Counter::UdpTemplateBuilt);
        if let Some(s) = self.udp_sockets.get_mut(h) {
            s.template = Some(t);
        }
        Some(t)
    }

    /// Builds the headers for `dst`, or `None` where the layers must decide per datagram.
    fn udp_build_template(
        &self,
        local: (Ipv4Address, u16),
        dst: (Ipv4Address, u16),
        no_checksum: bool,
    ) -> Option<HeaderTemplate> {
        let _p = self.ledger.probe(Layer::Udp, Side::Send, Op::UdpProto);
        if self.is_own_address(dst.0) || dst.0.is_broadcast() {
            return None;
        }
        let route = self.routes.lookup(dst.0)?;
        let i = self.ifaces.get(route.interface)?;
        if route.next_hop == i.cidr.broadcast() || route.next_hop.is_broadcast() {
            return None;
        }
        let (mac, arp_expires) = i.arp.lookup_until(route.next_hop, self.now)?;
        let elide = no_checksum || self.checksum_elidable(dst.0);
        // A checksum the device would complete needs the offload flag per frame: the
        // layers set it.
        if !elide && self.udp_checksum_offloadable(dst.0, udp_wire::HEADER_LEN) {
            return None;
        }
        let src = if local.0.is_unspecified() {
            i.cidr.address
        } else {
            local.0
        };
        let mut bytes = [0u8; HEADERS_LEN];
        EthernetRepr {
            source: i.mac,
            destination: mac,
            ethertype: EtherType::Ipv4,
        }
        .emit(&mut ethernet::Frame::new_unchecked(&mut bytes[..IP_AT]))
        .ok()?;
        Ipv4Repr {
            src,
            dst: dst.0,
            protocol: IpProtocol::Udp,
            ttl: self.config.ttl,
            dscp: 0,
            ecn: 0,
            ident: 0,
            dont_frag: false,
            more_frags: false,
            frag_offset: 0,
            payload_len: 0,
            options: Ipv4Options::NONE,
        }
        .emit_header(
            &mut ipv4::Packet::new_unchecked(&mut bytes[IP_AT..UDP_AT]),
            Checksum::Skip,
        )
        .ok()?;
        UdpRepr {
            src_port: local.1,
            dst_port: dst.1,
        }
        .emit_header(
            &mut udp_wire::Packet::new_unchecked(&mut bytes[UDP_AT..]),
            0,
        )
        .ok()?;
        // The total length is each datagram's to write (and to add to the sum).
        bytes[IP_AT + 2..IP_AT + 4].fill(0);
        let ip_sum = checksum::header_sum(&bytes[IP_AT..UDP_AT]);
        Some(HeaderTemplate {
            dst,
            local,
            no_checksum,
            iface: route.interface,
            mtu: i.caps.mtu,
            elide,
            src,
            route_generation: self.routes.generation(),
            arp_generation: i.arp.generation(),
            arp_expires,
            bytes,
            ip_sum,
        })
    }

    /// Sends one datagram of `parts` (`len` bytes in all) to `dst` with the socket's
    /// template; `None` (nothing sent, nothing allocated) when the datagram must go
    /// through the layers instead.
    pub(crate) fn udp_send_templated(
        &mut self,
        h: UdpHandle,
        parts: &[&[u8]],
        len: usize,
        dst: (Ipv4Address, u16),
        no_checksum: bool,
    ) -> Option<Result<usize, UdpError>> {
        let t = self.udp_template(h, dst, no_checksum)?;
        let udp_len = udp_wire::HEADER_LEN + len;
        if ipv4::MIN_HEADER_LEN + udp_len > t.mtu {
            return None;
        }
        let pcb = self.udp_sockets.get(h)?.pcb?;
        let Ok(mut buf) = self.alloc(Layer::Socket, Side::Send, udp_len) else {
            return Some(Err(UdpError::NoBuffer));
        };
        let payload_sum = self.udp_copy_in(&mut buf, parts, !t.elide);
        let ident = self.next_ident();
        let filled = {
            let _p = self.ledger.probe(Layer::Udp, Side::Send, Op::UdpProto);
            match buf.prepend(UDP_AT) {
                Ok(_) => {
                    let frame = buf.data_mut();
                    frame[..HEADERS_LEN].copy_from_slice(&t.bytes);
                    let udp = &mut frame[UDP_AT..HEADERS_LEN];
                    udp[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
                    if let Some(sum) = payload_sum {
                        let field = udp_checksum_field(t.src, dst.0, udp, sum, len);
                        udp[6..8].copy_from_slice(&field.to_be_bytes());
                    }
                    true
                }
                Err(_) => false,
            }
        };
        if !filled {
            self.free(Layer::Udp, Side::Send, buf);
            return Some(Err(UdpError::NoBuffer));
        }
        {
            let _p = self.ledger.probe(Layer::Ip, Side::Send, Op::IpProto);
            let total_len = (ipv4::MIN_HEADER_LEN + udp_len) as u16;
            let ip = &mut buf.data_mut()[IP_AT..UDP_AT];
            ip[2..4].copy_from_slice(&total_len.to_be_bytes());
            ip[4..6].copy_from_slice(&ident.to_be_bytes());
            let _c = self.ledger.probe(Layer::Ip, Side::Send, Op::Checksum);
            if self.tuning.inline_ip_header_checksum {
                // The two fields that changed, added to the template's sum.
                let sum = checksum::combine(checksum::combine(t.ip_sum, total_len), ident);
                ip[10..12].copy_from_slice(&checksum::finish(sum).to_be_bytes());
            } else {
                ipv4::Packet::new_unchecked(ip).fill_checksum_general(self.tuning.checksum);
            }
        }
        let counters = self.ledger.counters();
        counters.inc(Counter::UdpDatagramsOut);
        counters.inc(Counter::IpPacketsOut);
        counters.inc(Counter::UdpTemplateSent);
        let now = self.now;
        self.device_transmit(t.iface, buf, now);
        self.udp_pcbs.note_sent(pcb);
        Some(Ok(len))
    }
}

/// The UDP checksum field (RFC 768) of a datagram from `src` to `dst` whose 8-byte
/// `header` is written (checksum zero) and whose `payload_len` bytes sum to `payload_sum`.
/// Zero is sent as all ones, zero meaning "no checksum".
pub(crate) fn udp_checksum_field(
    src: Ipv4Address,
    dst: Ipv4Address,
    header: &[u8],
    payload_sum: u16,
    payload_len: usize,
) -> u16 {
    let seed = checksum::pseudo_header_v4(
        src.0,
        dst.0,
        udp_wire::PROTOCOL,
        (udp_wire::HEADER_LEN + payload_len) as u16,
    );
    let mut acc = checksum::Accumulator::with_seed(seed);
    acc.add_sum(checksum::header_sum(header), udp_wire::HEADER_LEN);
    acc.add_sum(payload_sum, payload_len);
    checksum::udp_field(checksum::finish(acc.sum()))
}
