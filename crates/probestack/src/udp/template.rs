//! A socket's header template (`Tuning::udp_header_template`): the Ethernet and IPv4
//! headers toward its last destination (a [`LinkTemplate`]) and what its UDP header and
//! checksum need, kept so that the next datagram there copies 34 bytes, writes the 8 of
//! the UDP header and fills the lengths, the identifier and the checksums.
//!
//! 4.3BSD's `udp_output` prepends "a template of the IP header" (paper 002 §2). A datagram
//! sent through the layers looks its route up three times (the checksum choice, the
//! source address, IP output), resolves its next hop in the ARP cache and writes three
//! headers field by field. A template holds while the destination, the local binding and
//! the no-checksum option are the ones it was built for and the way there has not changed
//! (see `link::template`). Anything else (no route, an unresolved next hop, broadcast,
//! loopback, a checksum the device would complete, a datagram IP must fragment) goes
//! through the layers as before.

use crate::checksum;
use crate::ip::{IpFields, SendAs};
use crate::link::template::{LinkTemplate, HEADERS_LEN};
use crate::probe::{Counter, Layer, Op, Sampling, Side};
use crate::socket::udp::{UdpError, UdpHandle};
use crate::stack::Stack;
use crate::wire::ipv4::{self, IpProtocol};
use crate::wire::udp::{self as udp_wire, UdpRepr};
use crate::wire::Ipv4Address;

/// A socket's headers for one destination and the facts they were built from.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HeaderTemplate {
    dst: (Ipv4Address, u16),
    local: (Ipv4Address, u16),
    no_checksum: bool,
    /// The UDP checksum is left zero (paper 000's elision or the socket's option).
    elide: bool,
    link: LinkTemplate,
}

impl HeaderTemplate {
    /// Whether a datagram of `len` payload bytes goes whole in one frame under this
    /// template (a larger one is fragmented, by the layers).
    pub(crate) fn fits(&self, len: usize) -> bool {
        ipv4::MIN_HEADER_LEN + udp_wire::HEADER_LEN + len <= self.link.mtu
    }
}

impl Stack {
    /// The template `h` has for sending to `dst` now, built if it has none or a stale
    /// one; `None` when this datagram must go through the layers. In line in both callers:
    /// out of line it handed the template back through memory, 101 instructions a
    /// datagram in `examples/udp_burst`.
    #[inline(always)]
    pub(crate) fn udp_template(
        &mut self,
        s: impl Sampling,
        h: UdpHandle,
        dst: (Ipv4Address, u16),
        no_checksum: bool,
    ) -> Option<HeaderTemplate> {
        let sock = self.udp_sockets.get(h)?;
        let (local, fields) = (sock.local?, sock.ip_fields);
        let holds = |t: &HeaderTemplate| {
            t.dst == dst
                && t.local == local
                && t.no_checksum == no_checksum
                && self.link_template_holds(&t.link)
        };
        if let Some(t) = sock.template.filter(holds) {
            return Some(t);
        }
        if sock.sends_ip_options() {
            // IP options: through the layers, which write them.
            return None;
        }
        let t = self.udp_build_template(s, local, dst, no_checksum, fields)?;
        self.ledger.counters().inc(Counter::UdpTemplateBuilt);
        if let Some(sock) = self.udp_sockets.get_mut(h) {
            sock.template = Some(t);
        }
        Some(t)
    }

    /// Builds the template for `dst`, or `None` where the layers must decide per datagram.
    fn udp_build_template(
        &self,
        s: impl Sampling,
        local: (Ipv4Address, u16),
        dst: (Ipv4Address, u16),
        no_checksum: bool,
        fields: IpFields,
    ) -> Option<HeaderTemplate> {
        let _p = self.ledger.probe(s, Layer::Udp, Side::Send, Op::UdpProto);
        let src = (!local.0.is_unspecified()).then_some(local.0);
        let send = SendAs {
            src,
            fields,
            ..SendAs::default()
        };
        let link = self.link_template(dst.0, IpProtocol::Udp, send)?;
        let elide = no_checksum || self.checksum_elidable(dst.0);
        // A checksum the device would complete needs the offload flag per frame: the
        // layers set it.
        if !elide && self.udp_checksum_offloadable(dst.0, udp_wire::HEADER_LEN) {
            return None;
        }
        Some(HeaderTemplate {
            dst,
            local,
            no_checksum,
            elide,
            link,
        })
    }

    /// Sends one datagram of `parts` (`len` bytes in all) to `dst` with the socket's
    /// template; `None` (nothing sent, nothing allocated) when the datagram must go
    /// through the layers instead.
    pub(crate) fn udp_send_templated(
        &mut self,
        s: impl Sampling,
        h: UdpHandle,
        parts: &[&[u8]],
        len: usize,
        dst: (Ipv4Address, u16),
        no_checksum: bool,
    ) -> Option<Result<usize, UdpError>> {
        let t = self.udp_template(s, h, dst, no_checksum)?;
        if !t.fits(len) {
            return None;
        }
        let pcb = self.udp_sockets.get(h)?.pcb?;
        let sent = self.udp_send_on_template(s, &t, parts, len);
        if sent.is_ok() {
            self.udp_pcbs.note_sent(pcb);
        }
        Some(sent)
    }

    /// Sends one datagram of `parts` (`len` bytes in all, which [fit](HeaderTemplate::fits)
    /// the template) with a socket's template `t`. The caller notes the socket's PCB in the
    /// send cache (once for a batch: it is the same PCB every time).
    #[inline(always)]
    pub(crate) fn udp_send_on_template(
        &mut self,
        s: impl Sampling,
        t: &HeaderTemplate,
        parts: &[&[u8]],
        len: usize,
    ) -> Result<usize, UdpError> {
        let dst = t.dst;
        let udp_len = udp_wire::HEADER_LEN + len;
        let Ok(mut buf) = self.alloc(s, Layer::Socket, Side::Send, udp_len) else {
            return Err(UdpError::NoBuffer);
        };
        let payload_sum = self.udp_copy_in(s, &mut buf, parts, !t.elide);
        let emitted = {
            let _p = self.ledger.probe(s, Layer::Udp, Side::Send, Op::UdpProto);
            let mut udp = udp_wire::Packet::new_unchecked(buf.data_mut());
            let repr = UdpRepr {
                src_port: t.local.1,
                dst_port: dst.1,
            };
            let emitted = repr.emit_header(&mut udp, len);
            if let (Ok(()), Some(sum)) = (&emitted, payload_sum) {
                let header = &udp.into_inner()[..udp_wire::HEADER_LEN];
                let field = udp_checksum_field(t.link.src, dst.0, header, sum, len);
                udp_wire::Packet::new_unchecked(buf.data_mut()).set_checksum(field);
            }
            emitted
        };
        // As UDP output answers: a header that does not fit is a message too big, no
        // headroom no buffer.
        let refused = if emitted.is_err() {
            Some(UdpError::MessageTooBig {
                max: crate::socket::udp::MAX_UDP_PAYLOAD,
            })
        } else {
            buf.prepend(HEADERS_LEN).err().map(|_| UdpError::NoBuffer)
        };
        if let Some(e) = refused {
            self.free(s, Layer::Udp, Side::Send, buf);
            return Err(e);
        }
        let total_len = (ipv4::MIN_HEADER_LEN + udp_len) as u16;
        self.write_link_template(s, &t.link, buf.data_mut(), total_len, false);
        let counters = self.ledger.counters();
        counters.inc(Counter::UdpDatagramsOut);
        counters.inc(Counter::IpPacketsOut);
        counters.inc(Counter::UdpTemplateSent);
        let now = self.now;
        self.device_transmit(s, t.link.iface, buf, now);
        Ok(len)
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
