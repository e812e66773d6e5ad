//! A connection's link template: the Ethernet and IPv4 headers its segments travel under,
//! built once and copied in front of each segment (`Tuning::tcp_header_template`).
//!
//! 4.3BSD's TCP keeps a prebuilt IP and TCP header per connection (`t_template`, made by
//! `tcp_template` when the connection opens) and copies it into every segment; Clark,
//! Jacobson, Romkey and Salwen (1989) count the per-packet instructions that remain once
//! output is that short. A segment sent through the layers looks its route up, builds an
//! [`Ipv4Repr`] and writes it field by field, resolves the next hop in the ARP cache and
//! writes the Ethernet header; with the template it copies 34 bytes and fills the three
//! IP fields that change: the total length, the identifier and the header checksum (the
//! last from the template's sum and the two others, RFC 1624's arithmetic, as
//! `udp::template` does). The TCP header itself changes in almost every field from one
//! segment to the next and is still written by [`TcpRepr::emit`](crate::wire::tcp::TcpRepr).
//!
//! A connection's remote address never changes, so a template holds while what it was
//! built from holds: the route table and the interface's ARP cache unchanged since (their
//! generation numbers) and the next hop's ARP entry not expired. Anything else (no route,
//! an unresolved next hop, broadcast, loopback, a datagram larger than the interface's MTU
//! that the device will not cut) goes through the layers, which resolve, queue, refuse and
//! count as usual; the frames are the same bytes either way (tests/tcp.rs checks).

use crate::buf::PacketBuf;
use crate::checksum;
use crate::probe::{Counter, Layer, Op, Side};
use crate::stack::Stack;
use crate::time::Instant;
use crate::wire::ethernet::{self, EtherType, EthernetRepr};
use crate::wire::ipv4::{self, IpProtocol, Ipv4Options, Ipv4Repr};
use crate::wire::Checksum;

/// Bytes of headers the template holds: Ethernet and IPv4 without options.
pub(crate) const HEADERS_LEN: usize = ethernet::HEADER_LEN + ipv4::MIN_HEADER_LEN;
const IP_AT: usize = ethernet::HEADER_LEN;

/// The link and network headers toward a connection's peer and the facts they were
/// built from.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LinkTemplate {
    iface: usize,
    /// The largest IP datagram the interface sends whole.
    mtu: usize,
    route_generation: u64,
    arp_generation: u64,
    /// When the next hop's ARP entry expires (`None`: a static entry).
    arp_expires: Option<Instant>,
    /// The headers with zero total length, identifier and checksum.
    bytes: [u8; HEADERS_LEN],
    /// The one's complement sum of the IP header as built, to which a segment's header
    /// checksum adds its total length and identifier.
    ip_sum: u16,
}

impl Stack {
    /// The connection at `index`'s template, built if it has none or a stale one; `None`
    /// when its segments must go through the layers.
    fn tcp_link_template(&mut self, index: usize) -> Option<LinkTemplate> {
        let now = self.now;
        let route_generation = self.routes.generation();
        let c = self.tcp.conn_mut(index)?;
        if let Some(t) = c.link_template {
            let holds = t.route_generation == route_generation
                && self
                    .ifaces
                    .get(t.iface)
                    .is_some_and(|i| i.arp.generation() == t.arp_generation)
                && t.arp_expires.is_none_or(|e| now < e);
            if holds {
                return Some(t);
            }
        }
        let remote = c.remote.0;
        let t = self.tcp_build_link_template(remote);
        if t.is_some() {
            self.ledger.counters().inc(Counter::TcpTemplateBuilt);
        }
        if let Some(c) = self.tcp.conn_mut(index) {
            c.link_template = t;
        }
        t
    }

    /// Builds the headers toward `dst` as `ip_output` and the link would write them, or
    /// `None` where the layers must decide per segment.
    fn tcp_build_link_template(&self, dst: crate::wire::Ipv4Address) -> Option<LinkTemplate> {
        let _p = self.ledger.probe(Layer::Tcp, Side::Send, Op::TcpProto);
        if self.is_own_address(dst) || dst.is_broadcast() {
            return None;
        }
        let route = self.routes.lookup(dst)?;
        let i = self.ifaces.get(route.interface)?;
        if route.next_hop == i.cidr.broadcast() || route.next_hop.is_broadcast() {
            return None;
        }
        let (mac, arp_expires) = i.arp.lookup_until(route.next_hop, self.now)?;
        let mut bytes = [0u8; HEADERS_LEN];
        EthernetRepr {
            source: i.mac,
            destination: mac,
            ethertype: EtherType::Ipv4,
        }
        .emit(&mut ethernet::Frame::new_unchecked(&mut bytes[..IP_AT]))
        .ok()?;
        Ipv4Repr {
            src: i.cidr.address,
            dst,
            protocol: IpProtocol::Tcp,
            ttl: self.config.ttl,
            dscp: 0,
            ecn: 0,
            ident: 0,
            // TCP sizes its segments itself.
            dont_frag: true,
            more_frags: false,
            frag_offset: 0,
            payload_len: 0,
            options: Ipv4Options::NONE,
        }
        .emit_header(
            &mut ipv4::Packet::new_unchecked(&mut bytes[IP_AT..]),
            Checksum::Skip,
        )
        .ok()?;
        // The total length is each segment's to write (and to add to the sum).
        bytes[IP_AT + 2..IP_AT + 4].fill(0);
        let ip_sum = checksum::header_sum(&bytes[IP_AT..]);
        Some(LinkTemplate {
            iface: route.interface,
            mtu: i.caps.mtu,
            route_generation: self.routes.generation(),
            arp_generation: i.arp.generation(),
            arp_expires,
            bytes,
            ip_sum,
        })
    }

    /// Sends the finished TCP segment in `segment` (its header and data written, its
    /// checksum or offload set) under the connection's template; gives the buffer back
    /// when the segment must go through the layers instead.
    pub(crate) fn tcp_send_templated(
        &mut self,
        index: usize,
        mut segment: PacketBuf,
    ) -> Result<(), PacketBuf> {
        let Some(t) = self.tcp_link_template(index) else {
            return Err(segment);
        };
        let total_len = ipv4::MIN_HEADER_LEN + segment.total_len();
        // A super-segment is larger than the MTU on purpose: the device cuts it.
        let segmented_by_device = segment.tx_offload().gso_size != 0;
        if total_len > crate::ip::MAX_DATAGRAM || (total_len > t.mtu && !segmented_by_device) {
            return Err(segment);
        }
        if segment.prepend(HEADERS_LEN).is_err() {
            return Err(segment);
        }
        let ident = self.next_ident();
        {
            let _p = self.ledger.probe(Layer::Ip, Side::Send, Op::IpProto);
            let total_len = total_len as u16;
            let frame = segment.data_mut();
            frame[..HEADERS_LEN].copy_from_slice(&t.bytes);
            let ip = &mut frame[IP_AT..HEADERS_LEN];
            ip[2..4].copy_from_slice(&total_len.to_be_bytes());
            ip[4..6].copy_from_slice(&ident.to_be_bytes());
            let _c = self.ledger.probe(Layer::Ip, Side::Send, Op::Checksum);
            if self.tuning.inline_ip_header_checksum {
                let sum = checksum::combine(checksum::combine(t.ip_sum, total_len), ident);
                ip[10..12].copy_from_slice(&checksum::finish(sum).to_be_bytes());
            } else {
                ipv4::Packet::new_unchecked(ip).fill_checksum_general(self.tuning.checksum);
            }
        }
        let counters = self.ledger.counters();
        counters.inc(Counter::IpPacketsOut);
        counters.inc(Counter::TcpTemplateSent);
        let now = self.now;
        self.device_transmit(t.iface, segment, now);
        Ok(())
    }
}
