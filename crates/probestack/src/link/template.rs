//! Header templates: the Ethernet and IPv4 headers toward one destination, built once and
//! copied in front of each datagram that goes there, for `udp::template` (a socket's last
//! destination) and `tcp::template` (a connection's peer).
//!
//! 4.3BSD's `udp_output` prepends "a template of the IP header" (paper 002 §2) and its TCP
//! keeps a prebuilt IP and TCP header per connection (`t_template`); Clark, Jacobson,
//! Romkey and Salwen (1989) count the per-packet instructions left once output is that
//! short. A datagram sent through the layers looks its route up, builds an `Ipv4Repr` and
//! writes it field by field, resolves the next hop in the ARP cache and writes the
//! Ethernet header; with a template it copies 34 bytes and fills the three IP fields that
//! change: the total length, the identifier and the header checksum, the last from the
//! template's sum and the two others (RFC 1624's arithmetic) rather than by reading back
//! the header just written, whose stores the loads would wait on.
//!
//! A template holds while what it was built from holds: the route table and the
//! interface's ARP cache unchanged since (their generation numbers) and the next hop's
//! ARP entry not expired. Anything else (no route, an unresolved next hop, broadcast,
//! loopback) gets no template: those datagrams go through the layers, which resolve,
//! queue, refuse and count as usual, and the frames are the same bytes either way (the
//! transports' tests capture both and compare).

use crate::checksum;
use crate::ip::{SendAs, ECN_ECT0};
use crate::probe::{Layer, Op, Sampling, Side};
use crate::stack::Stack;
use crate::time::Instant;
use crate::wire::ethernet::{self, EtherType, EthernetRepr};
use crate::wire::ipv4::{self, IpProtocol};
use crate::wire::{Checksum, Ipv4Address};

/// Bytes a template holds: Ethernet and IPv4 without options.
pub(crate) const HEADERS_LEN: usize = ethernet::HEADER_LEN + ipv4::MIN_HEADER_LEN;
const IP_AT: usize = ethernet::HEADER_LEN;

/// The Ethernet and IPv4 headers toward one destination and the facts they were built
/// from.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LinkTemplate {
    /// The outgoing interface.
    pub iface: usize,
    /// The largest IP datagram the interface sends whole.
    pub mtu: usize,
    /// The source address written.
    pub src: Ipv4Address,
    route_generation: u64,
    arp_generation: u64,
    /// When the next hop's ARP entry expires (`None`: a static entry).
    arp_expires: Option<Instant>,
    /// The headers with zero total length, identifier and checksum.
    bytes: [u8; HEADERS_LEN],
    /// The one's complement sum of the IP header as built.
    ip_sum: u16,
}

impl Stack {
    /// Builds the headers toward `dst` for `protocol` as IP output and the link would
    /// write them for `send` (from its source, or the interface's address), or `None`
    /// where the layers must decide per datagram. A socket whose TTL or DSCP changes
    /// drops its template; ECT is set per datagram ([`write_link_template`]).
    ///
    /// [`write_link_template`]: Self::write_link_template
    pub(crate) fn link_template(
        &self,
        dst: Ipv4Address,
        protocol: IpProtocol,
        send: SendAs,
    ) -> Option<LinkTemplate> {
        if self.is_own_address(dst) || dst.is_broadcast() {
            return None;
        }
        let route = self.routes.lookup(dst)?;
        let i = self.ifaces.get(route.interface)?;
        if Some(route.next_hop) == i.broadcast || route.next_hop.is_broadcast() {
            return None;
        }
        let (mac, arp_expires) = i.arp.lookup_until(route.next_hop, self.now)?;
        let src = send.src.unwrap_or(i.cidr.address);
        let mut bytes = [0u8; HEADERS_LEN];
        EthernetRepr {
            source: i.mac,
            destination: mac,
            ethertype: EtherType::Ipv4,
        }
        .emit(&mut ethernet::Frame::new_unchecked(&mut bytes[..IP_AT]))
        .ok()?;
        // ECN zero in the template whatever `send` says: each datagram sets its own.
        let send = SendAs { ect: false, ..send };
        self.outgoing_header(src, dst, protocol, send)
            .emit_header(
                &mut ipv4::Packet::new_unchecked(&mut bytes[IP_AT..]),
                Checksum::Skip,
            )
            .ok()?;
        // The total length is each datagram's to write (and to add to the sum).
        bytes[IP_AT + 2..IP_AT + 4].fill(0);
        let ip_sum = checksum::header_sum(&bytes[IP_AT..]);
        Some(LinkTemplate {
            iface: route.interface,
            mtu: i.caps.mtu,
            src,
            route_generation: self.routes.generation(),
            arp_generation: i.arp.generation(),
            arp_expires,
            bytes,
            ip_sum,
        })
    }

    /// Whether `t` still describes the way to its destination.
    pub(crate) fn link_template_holds(&self, t: &LinkTemplate) -> bool {
        t.route_generation == self.routes.generation()
            && self
                .ifaces
                .get(t.iface)
                .is_some_and(|i| i.arp.generation() == t.arp_generation)
            && t.arp_expires.is_none_or(|e| self.now < e)
    }

    /// Writes `t`'s headers into the first [`HEADERS_LEN`] bytes of `frame`, for an IP
    /// datagram of `total_len` bytes, with a fresh identifier and the header checksum
    /// (in line from the template's sum, or with the general routine, as
    /// `Tuning::inline_ip_header_checksum` says).
    pub(crate) fn write_link_template(
        &mut self,
        s: impl Sampling,
        t: &LinkTemplate,
        frame: &mut [u8],
        total_len: u16,
        ect: bool,
    ) {
        let ident = self.next_ident();
        let _p = self.ledger.probe(s, Layer::Ip, Side::Send, Op::IpProto);
        frame[..HEADERS_LEN].copy_from_slice(&t.bytes);
        let ip = &mut frame[IP_AT..HEADERS_LEN];
        ip[2..4].copy_from_slice(&total_len.to_be_bytes());
        ip[4..6].copy_from_slice(&ident.to_be_bytes());
        let mut sum = t.ip_sum;
        if ect {
            // ECT(0) in the TOS octet, the low byte of the header's first word (zero in
            // the template), and so in the sum.
            ip[1] |= ECN_ECT0;
            sum = checksum::combine(sum, u16::from(ECN_ECT0));
        }
        let _c = self.ledger.probe(s, Layer::Ip, Side::Send, Op::Checksum);
        if self.tuning.inline_ip_header_checksum {
            let sum = checksum::combine(checksum::combine(sum, total_len), ident);
            ip[10..12].copy_from_slice(&checksum::finish(sum).to_be_bytes());
        } else {
            ipv4::Packet::new_unchecked(ip).fill_checksum_general(self.tuning.checksum);
        }
    }
}
