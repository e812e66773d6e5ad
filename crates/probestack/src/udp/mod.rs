//! UDP (RFC 768): input (header checks, the checksum, demultiplexing to a socket) and
//! output (header, checksum, down to IP), each with the generic path of 4.3BSD and the
//! protocol-specific path of paper 002 §7, chosen by `Tuning::udp_fast_path`.
//!
//! - generic send: the socket layer copies the data into a buffer; UDP checksums the
//!   datagram in a second pass; with `sendto_without_connect` off, an unconnected sendto
//!   connects the PCB for the datagram and disconnects it after (paper 002 §6.2);
//! - protocol-specific send: the copy sums as it goes (one pass over the data);
//! - generic receive: the whole checksum is verified at input;
//! - protocol-specific receive: only the header is summed at input, and the data is
//!   verified while it is copied out to the application (paper 002 §7.1).
//!
//! [`pcb`] finds the socket a datagram belongs to, with the lookups of paper 002 §6.3.

pub mod pcb;
pub(crate) mod template;

use crate::buf::{PacketBuf, TxOffload};
use crate::checksum;
use crate::driver::RxChecksum;
use crate::ip::{IcmpError, SendAs};
use crate::probe::{Counter, Layer, Op, Sampling, Side};
use crate::socket::udp::{Queued, UdpError, UdpHandle};
use crate::stack::Stack;
use crate::time::Instant;
use crate::wire::icmpv4::DstUnreachable;
use crate::wire::ipv4::{self, IpProtocol, Ipv4Repr};
use crate::wire::udp::{self as udp_wire, UdpRepr};
use crate::wire::{Checksum, Ipv4Address};

/// What UDP input needs of the IP header of a datagram.
#[derive(Clone, Copy)]
pub(crate) struct UdpInputIp<'a> {
    pub src: Ipv4Address,
    pub dst: Ipv4Address,
    /// Bytes of the IP header at the front of the buffer.
    pub header_len: usize,
    /// The whole header, when the caller parsed it (the general path); `None` from the
    /// short path, which parses it only for an ICMP error.
    pub repr: Option<&'a Ipv4Repr>,
}

/// How a datagram being sent gets its checksum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum UdpChecksum {
    /// None: a zero field (the socket's no-checksum option, or checksum elision).
    Elided,
    /// The socket layer summed the payload while copying it (the protocol-specific path).
    PayloadSummed(u16),
    /// UDP output sums the whole datagram in a second pass (the generic path).
    SecondPass,
    /// The device completes it (`Tuning::checksum_offload`): only the pseudo-header sum
    /// goes in the field, as for TCP.
    Offloaded,
}

impl Stack {
    /// Whether the device toward `dst` will complete the checksum of a UDP datagram of
    /// `len` bytes: the switch on, the device able, and the datagram sent whole (a device
    /// sums one frame, not a datagram IP cut into fragments). Loopback has no device.
    pub(crate) fn udp_checksum_offloadable(&self, dst: Ipv4Address, len: usize) -> bool {
        if !self.tuning.checksum_offload || self.is_own_address(dst) {
            return false;
        }
        let caps = self
            .routes
            .lookup(dst)
            .and_then(|r| self.ifaces.get(r.interface))
            .map(|i| i.caps);
        caps.is_some_and(|c| c.checksum_offload.l4_tx && 20 + len <= c.mtu)
    }

    /// The sum of the pseudo-header and the whole datagram with the configured kernel.
    fn udp_full_sum(&self, src: Ipv4Address, dst: Ipv4Address, datagram: &[u8]) -> u16 {
        let seed =
            checksum::pseudo_header_v4(src.0, dst.0, udp_wire::PROTOCOL, datagram.len() as u16);
        let mut acc = checksum::Accumulator::with_seed(seed);
        acc.add_with(self.tuning.checksum, datagram);
        acc.sum()
    }

    /// A UDP datagram in `datagram` (the whole IP datagram; `repr` its header).
    #[inline]
    pub(crate) fn udp_input(
        &mut self,
        s: impl Sampling,
        repr: &Ipv4Repr,
        datagram: PacketBuf,
        rx: RxChecksum,
        now: Instant,
    ) {
        let ip = UdpInputIp {
            src: repr.src,
            dst: repr.dst,
            header_len: repr.header_len(),
            repr: Some(repr),
        };
        self.udp_input_from(s, ip, datagram, rx, now);
    }

    /// UDP input proper, given what it needs of the IP header: the general path's
    /// [`udp_input`](Self::udp_input) and IP's short path (`ip::udp_short`) both come here.
    #[inline]
    pub(crate) fn udp_input_from(
        &mut self,
        s: impl Sampling,
        ip: UdpInputIp<'_>,
        mut datagram: PacketBuf,
        rx: RxChecksum,
        now: Instant,
    ) {
        let UdpInputIp {
            src,
            dst,
            header_len: hl,
            repr,
        } = ip;
        let parsed = {
            let _p = self
                .ledger
                .probe(s, Layer::Udp, Side::Receive, Op::UdpProto);
            // `parse` checks the lengths itself (`Packet::check_len`).
            let p = udp_wire::Packet::new_unchecked(&datagram.data()[hl..]);
            UdpRepr::parse(&p, src, dst, Checksum::Skip)
                .map(|r| (r, p.len() as usize, p.checksum()))
        };
        let Ok((udp, udp_len, field)) = parsed else {
            self.ledger.counters().inc(Counter::UdpDropMalformed);
            return self.free(s, Layer::Udp, Side::Receive, datagram);
        };
        self.ledger.counters().inc(Counter::UdpDatagramsIn);
        self.ledger
            .set_message_size(s, udp_len - udp_wire::HEADER_LEN);

        // RFC 768: a zero field means the sender computed no checksum.
        let mut verify_on_copy = None;
        if let (RxChecksum::RawSum(raw), true) = (rx, field != 0) {
            // The NIC summed the datagram; only the pseudo-header is left to add.
            let ok = {
                let _p = self
                    .ledger
                    .probe(s, Layer::Udp, Side::Receive, Op::Checksum);
                let seed =
                    checksum::pseudo_header_v4(src.0, dst.0, udp_wire::PROTOCOL, udp_len as u16);
                checksum::verifies(checksum::combine(seed, raw))
            };
            if !ok {
                self.ledger.counters().inc(Counter::UdpDropBadChecksum);
                return self.free(s, Layer::Udp, Side::Receive, datagram);
            }
        } else if field != 0 && rx != RxChecksum::Verified {
            let message = &datagram.data()[hl..hl + udp_len];
            if self.tuning.udp_fast_path {
                // Paper 002 §7.1: sum only the header now; the data is summed as it is
                // copied out to the application.
                let _p = self
                    .ledger
                    .probe(s, Layer::Udp, Side::Receive, Op::Checksum);
                let seed =
                    checksum::pseudo_header_v4(src.0, dst.0, udp_wire::PROTOCOL, udp_len as u16);
                verify_on_copy = Some(checksum::combine(
                    seed,
                    checksum::header_sum(&message[..udp_wire::HEADER_LEN]),
                ));
            } else {
                let ok = {
                    let _p = self
                        .ledger
                        .probe(s, Layer::Udp, Side::Receive, Op::Checksum);
                    checksum::verifies(self.udp_full_sum(src, dst, message))
                };
                if !ok {
                    self.ledger.counters().inc(Counter::UdpDropBadChecksum);
                    return self.free(s, Layer::Udp, Side::Receive, datagram);
                }
            }
        } else if field == 0 {
            self.ledger.counters().inc(Counter::UdpNoChecksumIn);
        }

        let found = {
            let _p = self.ledger.probe(s, Layer::Udp, Side::Receive, Op::Demux);
            self.udp_pcbs
                .lookup(src, udp.src_port, dst, udp.dst_port)
                .map(|(_, &mut index)| index)
        };
        let handle = found.and_then(|i| self.udp_sockets.handle_of(i));
        let Some(handle) = handle else {
            if dst.is_broadcast() || !self.is_own_address(dst) {
                self.ledger
                    .counters()
                    .inc(Counter::UdpDropNoSocketBroadcast);
                return self.free(s, Layer::Udp, Side::Receive, datagram);
            }
            self.ledger.counters().inc(Counter::UdpDropNoSocket);
            // RFC 1122 §4.1.3.1: port unreachable. The short path built no header
            // representation: it is parsed now, from the header still in the buffer
            // (checked once already, so this cannot fail).
            let parsed = match repr {
                Some(r) => Ok(*r),
                None => Ipv4Repr::parse(
                    &ipv4::Packet::new_unchecked(datagram.data()),
                    Checksum::Skip,
                ),
            };
            match parsed {
                Ok(r) => self.icmp_dst_unreachable(
                    s,
                    DstUnreachable::PortUnreachable,
                    0,
                    &r,
                    datagram,
                    now,
                ),
                Err(_) => self.free(s, Layer::Udp, Side::Receive, datagram),
            }
            return;
        };

        let payload_len = udp_len - udp_wire::HEADER_LEN;
        let trimmed = datagram
            .trim_front(hl + udp_wire::HEADER_LEN)
            .and_then(|()| datagram.trim_back(datagram.len() - payload_len));
        if trimmed.is_err() {
            self.ledger.counters().inc(Counter::UdpDropMalformed);
            return self.free(s, Layer::Udp, Side::Receive, datagram);
        }
        let _p = self
            .ledger
            .probe(s, Layer::Socket, Side::Receive, Op::SocketBuffer);
        let Some(sock) = self.udp_sockets.get_mut(handle) else {
            drop(_p);
            return self.free(s, Layer::Udp, Side::Receive, datagram);
        };
        if sock.rx_bytes + payload_len > sock.rx_limit {
            self.ledger.counters().inc(Counter::UdpDropFullSocket);
            drop(_p);
            return self.free(s, Layer::Socket, Side::Receive, datagram);
        }
        sock.rx_bytes += payload_len;
        datagram.set_rx_dst(dst);
        if let Some(r) = repr.filter(|r| !r.options.is_empty()) {
            // Passed up with the datagram (RFC 1122 §4.1.3.2).
            sock.keep_rx_options(&r.options);
        }
        sock.rx
            .push_back(Queued::new((src, udp.src_port), datagram, verify_on_copy));
    }

    /// UDP output: the header, the checksum, and down to IP. `buf` holds room for the
    /// header and the payload after it; `plan` says how the checksum is done.
    pub(crate) fn udp_output(
        &mut self,
        s: impl Sampling,
        h: UdpHandle,
        dst: (Ipv4Address, u16),
        mut buf: PacketBuf,
        plan: UdpChecksum,
        connected: bool,
    ) -> Result<(), UdpError> {
        let Some(sock) = self.udp_sockets.get(h) else {
            self.free(s, Layer::Udp, Side::Send, buf);
            return Err(UdpError::BadHandle);
        };
        let (Some(id), Some(local)) = (sock.pcb, sock.local) else {
            self.free(s, Layer::Udp, Side::Send, buf);
            return Err(UdpError::BadHandle);
        };
        let fields = sock.ip_fields;
        let extras = match sock.ip_extras(dst.0) {
            Ok(e) => e,
            Err(e) => {
                self.free(s, Layer::Udp, Side::Send, buf);
                return Err(e);
            }
        };
        // 4.3BSD's sendto connected the PCB for the one datagram and disconnected it after
        // (paper 002 §6.2); `sendto_without_connect` sends to the address given.
        let pseudo_connect = !connected && !self.tuning.sendto_without_connect;
        if pseudo_connect {
            let _p = self.ledger.probe(s, Layer::Udp, Side::Send, Op::PcbConnect);
            if self.udp_pcbs.connect(id, dst).is_err() {
                drop(_p);
                self.free(s, Layer::Udp, Side::Send, buf);
                return Err(UdpError::AddrInUse);
            }
        }
        let src = if local.0.is_unspecified() {
            // The interface the first hop is reached by (a source route's first gateway).
            self.source_address_for(extras.first_hop.unwrap_or(dst.0))
        } else {
            Some(local.0)
        };
        let result = match src {
            None => {
                self.free(s, Layer::Udp, Side::Send, buf);
                self.ledger.counters().inc(Counter::IpDropNoRoute);
                Err(UdpError::NoRoute)
            }
            Some(src) => {
                // The payload may go on in the buffer's fragments (a zero-copy send).
                let payload_len = buf.total_len() - udp_wire::HEADER_LEN;
                let emitted = {
                    let _p = self.ledger.probe(s, Layer::Udp, Side::Send, Op::UdpProto);
                    let repr = UdpRepr {
                        src_port: local.1,
                        dst_port: dst.1,
                    };
                    repr.emit_header(
                        &mut udp_wire::Packet::new_unchecked(buf.data_mut()),
                        payload_len,
                    )
                };
                if emitted.is_err() {
                    self.free(s, Layer::Udp, Side::Send, buf);
                    Err(UdpError::MessageTooBig {
                        max: crate::socket::udp::MAX_UDP_PAYLOAD,
                    })
                } else {
                    if plan == UdpChecksum::Offloaded {
                        let _p = self.ledger.probe(s, Layer::Udp, Side::Send, Op::Checksum);
                        let seed = checksum::pseudo_header_v4(
                            src.0,
                            dst.0 .0,
                            udp_wire::PROTOCOL,
                            buf.total_len() as u16,
                        );
                        udp_wire::Packet::new_unchecked(buf.data_mut()).set_checksum(seed);
                        buf.set_tx_offload(TxOffload {
                            l4_checksum: true,
                            gso_size: 0,
                        });
                    } else if plan != UdpChecksum::Elided {
                        let _p = self.ledger.probe(s, Layer::Udp, Side::Send, Op::Checksum);
                        let field = match plan {
                            // Header and pseudo-header now; the payload was summed while copied.
                            UdpChecksum::PayloadSummed(p) => template::udp_checksum_field(
                                src,
                                dst.0,
                                &buf.data()[..udp_wire::HEADER_LEN],
                                p,
                                payload_len,
                            ),
                            // The generic path: a second pass over the whole datagram.
                            _ => checksum::udp_field(checksum::finish(self.udp_full_sum(
                                src,
                                dst.0,
                                buf.data(),
                            ))),
                        };
                        udp_wire::Packet::new_unchecked(buf.data_mut()).set_checksum(field);
                    }
                    self.ledger.counters().inc(Counter::UdpDatagramsOut);
                    let send = SendAs {
                        src: Some(src),
                        fields,
                        ..SendAs::default()
                    };
                    self.ip_output_with(s, dst.0, IpProtocol::Udp, buf, send, &extras)
                        .map_err(UdpError::from)
                }
            }
        };
        if pseudo_connect {
            let _p = self.ledger.probe(s, Layer::Udp, Side::Send, Op::PcbConnect);
            let _ = self.udp_pcbs.disconnect(id);
        }
        self.udp_pcbs.note_sent(id);
        result
    }

    /// An ICMP error about a datagram a socket here sent (`quoted` its IP header,
    /// `transport` the start of its UDP header): a connected socket reports it on its next
    /// call (RFC 1122 §4.1.3.3 passes every error to the application; BSD tells only a
    /// connected socket, the one that can tell whose datagram it was): port or protocol
    /// unreachable as [`UdpError::ConnectionRefused`], the others as
    /// [`UdpError::NetworkUnreachable`] or [`UdpError::HostUnreachable`].
    pub(crate) fn udp_icmp_error(&mut self, quoted: &Ipv4Repr, transport: &[u8], what: IcmpError) {
        let error = match what {
            IcmpError::Refused => UdpError::ConnectionRefused,
            IcmpError::Network => UdpError::NetworkUnreachable,
            IcmpError::ParamProblem => UdpError::ProtocolError,
            IcmpError::Host => UdpError::HostUnreachable,
            // UDP does not set Don't Fragment: not about a datagram of ours.
            IcmpError::FragNeeded { .. } => return,
        };
        if transport.len() < 4 {
            return;
        }
        let sport = u16::from_be_bytes([transport[0], transport[1]]);
        let dport = u16::from_be_bytes([transport[2], transport[3]]);
        let peer = (quoted.dst, dport);
        let found = self
            .udp_pcbs
            .iter()
            .find(|(_, b, _)| b.local.1 == sport && b.foreign == Some(peer))
            .map(|(_, _, &i)| i);
        if let Some(h) = found.and_then(|i| self.udp_sockets.handle_of(i)) {
            if let Some(s) = self.udp_sockets.get_mut(h) {
                s.error = Some(error);
                let counters = self.ledger.counters();
                counters.inc(Counter::UdpIcmpErrors);
                if error == UdpError::ConnectionRefused {
                    counters.inc(Counter::UdpConnectionRefused);
                }
            }
        }
    }
}
