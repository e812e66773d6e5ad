//! A connection's link template (`Tuning::tcp_header_template`): the Ethernet and IPv4
//! headers its segments travel under, a [`LinkTemplate`] built when the first segment goes
//! and again whenever it goes stale, copied in front of each segment.
//!
//! 4.3BSD's TCP keeps a prebuilt IP and TCP header per connection (`t_template`, made by
//! `tcp_template` when the connection opens). The TCP header itself changes in almost
//! every field from one segment to the next and is still written by
//! [`TcpRepr::emit`](crate::wire::tcp::TcpRepr); a connection's peer never changes, so its
//! template holds as long as the way there does (see `link::template`). A segment larger
//! than the interface's MTU that the device will not cut goes through the layers, which
//! refuse it as usual; the frames are the same bytes either way (tests/tcp.rs checks).

use crate::buf::PacketBuf;
use crate::ip::SendAs;
use crate::link::template::{LinkTemplate, HEADERS_LEN};
use crate::probe::{Counter, Layer, Op, Sampling, Side};
use crate::socket::tcp::{Kind, TcpSocket};
use crate::stack::Stack;
use crate::wire::ipv4::{self, IpProtocol};

impl Stack {
    /// The connection at `index`'s template, built if it has none or a stale one; `None`
    /// when its segments must go through the layers.
    fn tcp_link_template(&mut self, s: impl Sampling, index: usize) -> Option<LinkTemplate> {
        // Checked where the connection holds it, and copied out only when it holds.
        let (held, local, remote, fields) = match self.tcp.at(index) {
            Some(TcpSocket {
                kind: Kind::Stream(c),
                ..
            }) => (
                c.link_template.as_ref(),
                c.local.0,
                c.remote.0,
                c.ip_fields(),
            ),
            _ => return None,
        };
        if let Some(t) = held.filter(|t| self.link_template_holds(t)) {
            return Some(*t);
        }
        // A source-routed connection's segments carry options: through the layers.
        if self
            .tcp
            .conn_mut(index)
            .is_some_and(|c| c.source_route.is_some())
        {
            return None;
        }
        let t = {
            let _p = self.ledger.probe(s, Layer::Tcp, Side::Send, Op::TcpProto);
            // From the connection's address (RFC 9293 MUST-45); TCP sizes its segments
            // itself: Don't Fragment.
            let send = SendAs {
                src: Some(local),
                dont_frag: true,
                fields,
                ..SendAs::default()
            };
            self.link_template(remote, IpProtocol::Tcp, send)
        };
        if t.is_some() {
            self.ledger.counters().inc(Counter::TcpTemplateBuilt);
        }
        if let Some(c) = self.tcp.conn_mut(index) {
            c.link_template = t;
        }
        t
    }

    /// Sends the finished TCP segment in `segment` (its header and data written, its
    /// checksum or offload set) under the connection's template, ECN-capable if `ect`;
    /// gives the buffer back when the segment must go through the layers instead.
    pub(crate) fn tcp_send_templated(
        &mut self,
        s: impl Sampling,
        index: usize,
        mut segment: PacketBuf,
        ect: bool,
    ) -> Result<(), PacketBuf> {
        let Some(t) = self.tcp_link_template(s, index) else {
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
        self.write_link_template(s, &t, segment.data_mut(), total_len as u16, ect);
        let counters = self.ledger.counters();
        counters.inc(Counter::IpPacketsOut);
        counters.inc(Counter::TcpTemplateSent);
        let now = self.now;
        self.device_transmit(s, t.iface, segment, now);
        Ok(())
    }
}
