//! ICMPv4 (RFC 792, RFC 1122 §3.2.2): echo replies, the errors the host sends (port and
//! protocol unreachable, time exceeded on reassembly), and the rules for when not to send
//! one, with a token-bucket rate limit (RFC 1812 §4.3.2.8); errors received go to the
//! transport whose datagram they quote.

use crate::buf::PacketBuf;
use crate::checksum;
use crate::ip::{IpExtras, SendAs, SourceRouting};
use crate::probe::{Counter, Layer, Op, Sampling, Side};
use crate::stack::{EchoReply, SendError, Stack};
use crate::time::Instant;
use crate::wire::icmpv4::{self, DstUnreachable, Icmpv4Repr, TimeExceeded};
use crate::wire::ipv4::{IpProtocol, Ipv4Options, Ipv4Repr};
use crate::wire::{Checksum, Ipv4Address};

/// What an ICMP error says of the datagram it quotes, for the transport that sent it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IcmpError {
    /// The destination's network cannot be reached (destination unreachable codes 0, 6,
    /// 9 and 11).
    Network,
    /// The destination host cannot be reached: codes 1, 5, 7, 8, 10 and 12 to 15, and
    /// time exceeded (the datagram's TTL ran out, or its fragments' reassembly).
    Host,
    /// The host is there and refuses: protocol or port unreachable (codes 2 and 3, RFC
    /// 9293 §3.9.2.2's hard errors).
    Refused,
    /// Fragmentation needed with Don't Fragment set (code 4), and the next-hop MTU
    /// (RFC 1191).
    FragNeeded { next_hop_mtu: u16 },
    /// A host or router on the way found the datagram's header at fault (parameter
    /// problem, RFC 792; a soft error for TCP, RFC 9293 §3.9.2.2).
    ParamProblem,
}

impl IcmpError {
    fn of(reason: DstUnreachable, next_hop_mtu: u16) -> IcmpError {
        use DstUnreachable as D;
        match reason {
            D::NetUnreachable | D::DstNetUnknown | D::NetProhibited | D::NetUnreachableForTos => {
                IcmpError::Network
            }
            D::ProtoUnreachable | D::PortUnreachable => IcmpError::Refused,
            D::FragRequired => IcmpError::FragNeeded { next_hop_mtu },
            _ => IcmpError::Host,
        }
    }
}

impl Stack {
    /// An ICMP message in `datagram` (whole, header included; `repr` is its header).
    pub(crate) fn icmp_input(
        &mut self,
        s: impl Sampling,
        iface: usize,
        repr: &Ipv4Repr,
        datagram: PacketBuf,
        now: Instant,
    ) {
        self.ledger.counters().inc(Counter::IcmpIn);
        let message = &datagram.data()[repr.header_len()..];
        let ok = {
            let _p = self.ledger.probe(s, Layer::Ip, Side::Receive, Op::Checksum);
            checksum::verifies(checksum::sum_with(self.tuning.checksum, message))
        };
        if !ok {
            self.ledger.counters().inc(Counter::IcmpDropBadChecksum);
            return self.free(s, Layer::Ip, Side::Receive, datagram);
        }
        // Source Quench (type 4): deprecated, and silently discarded (RFC 6633 §5; RFC
        // 9293 MUST-55 for TCP), counted as such rather than as malformed.
        if message.first() == Some(&4) {
            self.ledger.counters().inc(Counter::IcmpDropSourceQuench);
            return self.free(s, Layer::Ip, Side::Receive, datagram);
        }
        let parsed = {
            let _p = self.ledger.probe(s, Layer::Ip, Side::Receive, Op::IpProto);
            icmpv4::Packet::new_checked(message).and_then(|p| Icmpv4Repr::parse(&p, Checksum::Skip))
        };
        let Ok(icmp) = parsed else {
            self.ledger.counters().inc(Counter::IcmpDropMalformed);
            return self.free(s, Layer::Ip, Side::Receive, datagram);
        };
        let mut reply_buf = None;
        match icmp {
            Icmpv4Repr::EchoRequest {
                ident,
                seq_no,
                data,
            } => {
                self.ledger.counters().inc(Counter::IcmpEchoRequestsIn);
                self.ledger.set_message_size(s, data.len());
                // RFC 1122 §3.2.2.6: an echo to a broadcast address may be ignored; it is.
                if !repr.dst.is_broadcast()
                    && (iface == super::LOOPBACK || self.is_own_address(repr.dst))
                {
                    let reply = Icmpv4Repr::EchoReply {
                        ident,
                        seq_no,
                        data,
                    };
                    reply_buf = self.icmp_build(s, &reply);
                }
            }
            Icmpv4Repr::EchoReply {
                ident,
                seq_no,
                data,
            } => {
                self.ledger.counters().inc(Counter::IcmpEchoRepliesIn);
                self.ledger.set_message_size(s, data.len());
                let _p = self
                    .ledger
                    .probe(s, Layer::Ip, Side::Receive, Op::SocketBuffer);
                if self.echo_replies.len() < self.config.echo_reply_queue {
                    self.echo_replies.push_back(EchoReply {
                        from: repr.src,
                        ident,
                        seq_no,
                        data: data.to_vec(),
                        received_at: now,
                    });
                } else {
                    self.ledger.counters().inc(Counter::IcmpDropEchoQueueFull);
                }
            }
            Icmpv4Repr::DstUnreachable {
                reason,
                next_hop_mtu,
                ..
            } => self.icmp_error_in(s, &icmp, IcmpError::of(reason, next_hop_mtu)),
            // Reassembly time exceeded says a datagram lost a fragment, not that the host
            // cannot be reached: nothing for a transport to report (4.4BSD's
            // `inetctlerrmap` maps PRC_TIMXCEED_REASS to no error). Reported as
            // unreachable, a connected UDP socket's next send failed after one lost
            // fragment (found by tests/udp.rs's random traffic).
            Icmpv4Repr::TimeExceeded {
                reason: TimeExceeded::FragReassembly,
                ..
            } => self.ledger.counters().inc(Counter::IcmpErrorsIn),
            Icmpv4Repr::TimeExceeded { .. } => self.icmp_error_in(s, &icmp, IcmpError::Host),
            Icmpv4Repr::ParamProblem { .. } => {
                self.icmp_error_in(s, &icmp, IcmpError::ParamProblem)
            }
        }
        let to = repr.src;
        // An echo reply goes from the address the request was sent to (RFC 1122
        // §3.2.2.6), which need not be the outgoing interface's.
        let send = SendAs {
            src: self.is_own_address(repr.dst).then_some(repr.dst),
            ..SendAs::default()
        };
        self.free(s, Layer::Ip, Side::Receive, datagram);
        if let Some(buf) = reply_buf {
            let from = send
                .src
                .unwrap_or_else(|| self.source_address_for(to).unwrap_or(repr.dst));
            let options = self.ip_echo_reply_options(repr, from);
            let _ = self.ip_output_with(s, to, IpProtocol::Icmp, buf, send, &options);
        }
    }

    /// An ICMP error received: to the transport that sent the datagram it quotes, if
    /// this host sent it (RFC 1122 §3.2.2: UDP passes every error to its application,
    /// §4.1.3.3; TCP acts on it, RFC 9293 §3.9.2.2).
    fn icmp_error_in(&mut self, s: impl Sampling, icmp: &Icmpv4Repr, what: IcmpError) {
        self.ledger.counters().inc(Counter::IcmpErrorsIn);
        let Some((quoted, transport)) = icmp.invoking_header() else {
            return;
        };
        if !self.is_own_address(quoted.src) {
            return;
        }
        match quoted.protocol {
            IpProtocol::Udp => self.udp_icmp_error(&quoted, transport, what),
            IpProtocol::Tcp => self.tcp_icmp_error(s, &quoted, transport, what),
            _ => {}
        }
    }

    /// An ICMP message in a fresh buffer with headroom for the IP header below.
    fn icmp_build(&mut self, s: impl Sampling, icmp: &Icmpv4Repr<'_>) -> Option<PacketBuf> {
        let mut buf = self
            .alloc(s, Layer::Ip, Side::Send, icmp.buffer_len())
            .ok()?;
        let emitted = {
            let _p = self.ledger.probe(s, Layer::Ip, Side::Send, Op::IpProto);
            icmp.emit(
                &mut icmpv4::Packet::new_unchecked(buf.data_mut()),
                Checksum::Skip,
            )
        };
        if emitted.is_err() {
            self.free(s, Layer::Ip, Side::Send, buf);
            return None;
        }
        {
            let _c = self.ledger.probe(s, Layer::Ip, Side::Send, Op::Checksum);
            let field = checksum::finish(checksum::sum_with(self.tuning.checksum, buf.data()));
            icmpv4::Packet::new_unchecked(buf.data_mut()).set_checksum(field);
        }
        self.ledger.counters().inc(Counter::IcmpOut);
        Some(buf)
    }

    /// Sends an echo request.
    pub(crate) fn icmp_send_echo(
        &mut self,
        s: impl Sampling,
        dst: Ipv4Address,
        ident: u16,
        seq_no: u16,
        data: &[u8],
        via: Option<&SourceRouting>,
    ) -> Result<(), SendError> {
        let extras = IpExtras::new(&Ipv4Options::NONE, via, dst)
            .map_err(|()| SendError::InvalidSourceRoute)?;
        let req = Icmpv4Repr::EchoRequest {
            ident,
            seq_no,
            data,
        };
        let max = super::MAX_PAYLOAD - extras.options.len() - icmpv4::HEADER_LEN;
        if data.len() > max {
            return Err(SendError::TooLarge {
                len: data.len(),
                max,
            });
        }
        let buf = self.icmp_build(s, &req).ok_or(SendError::NoBuffer)?;
        self.ip_output_with(s, dst, IpProtocol::Icmp, buf, SendAs::default(), &extras)
    }

    /// RFC 1122 §3.2.2: never send an error about an ICMP error, a datagram to a
    /// broadcast or multicast address, a fragment other than the first, or a datagram
    /// whose source is not a unicast host.
    fn may_send_icmp_error(&self, repr: &Ipv4Repr, invoking: &[u8]) -> bool {
        if repr.dst.is_broadcast() || repr.dst.is_multicast() || repr.frag_offset != 0 {
            return false;
        }
        let src = repr.src;
        if src.is_unspecified() || src.is_broadcast() || src.is_multicast() || src.is_loopback() {
            return false;
        }
        if repr.protocol == IpProtocol::Icmp {
            // An error about an error is not allowed; about an echo it is.
            let body = invoking.get(repr.header_len()..).unwrap_or(&[]);
            let is_error = !matches!(body.first(), Some(0) | Some(8) | Some(13) | Some(14));
            if is_error {
                return false;
            }
        }
        true
    }

    /// Whether an error about this datagram may go out now: the RFC 1122 rules, then the
    /// rate limit (a refusal by the limit is counted).
    fn icmp_error_allowed(&mut self, repr: &Ipv4Repr, invoking: &[u8], now: Instant) -> bool {
        if !self.may_send_icmp_error(repr, invoking) {
            return false;
        }
        let allowed = self.icmp_limiter.allow(now);
        if !allowed {
            self.ledger.counters().inc(Counter::IcmpErrorsRateLimited);
        }
        allowed
    }

    /// Sends Destination Unreachable about `datagram` (whole, header included), and frees it.
    pub(crate) fn icmp_dst_unreachable(
        &mut self,
        s: impl Sampling,
        reason: DstUnreachable,
        next_hop_mtu: u16,
        repr: &Ipv4Repr,
        datagram: PacketBuf,
        now: Instant,
    ) {
        let buf = if self.icmp_error_allowed(repr, datagram.data(), now) {
            match Icmpv4Repr::dst_unreachable(reason, next_hop_mtu, datagram.data()) {
                Ok(m) => self.icmp_build(s, &m),
                Err(_) => None,
            }
        } else {
            None
        };
        self.free(s, Layer::Ip, Side::Receive, datagram);
        if let Some(b) = buf {
            self.icmp_error_out(s, repr, b);
        }
    }

    /// Sends the ICMP error `message` about the datagram whose header was `repr`: to its
    /// source, back along the source route it came by if it came by one (reversed, as
    /// Linux's `ip_options_echo` has it for the errors it sends).
    fn icmp_error_out(&mut self, s: impl Sampling, repr: &Ipv4Repr, message: PacketBuf) {
        self.ledger.counters().inc(Counter::IcmpErrorsOut);
        let back = Self::ip_route_back(repr);
        let send = SendAs::default();
        let _ = self.ip_output_with(s, repr.src, IpProtocol::Icmp, message, send, &back);
    }

    /// Sends Time Exceeded (fragment reassembly, code 1) quoting the first fragment.
    pub(crate) fn icmp_time_exceeded_reassembly(
        &mut self,
        s: impl Sampling,
        first: &[u8],
        now: Instant,
    ) {
        let Ok((repr, _)) = Ipv4Repr::parse_truncated(first, Checksum::Skip) else {
            return;
        };
        // The first fragment has offset 0; the rules apply as to any datagram.
        if !self.icmp_error_allowed(&repr, first, now) {
            return;
        }
        let Ok(m) = Icmpv4Repr::time_exceeded(TimeExceeded::FragReassembly, first) else {
            return;
        };
        if let Some(b) = self.icmp_build(s, &m) {
            self.icmp_error_out(s, &repr, b);
        }
    }
}
