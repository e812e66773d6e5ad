//! TCP (RFC 9293): the layer between IP and the stream sockets.
//!
//! - [`connection`]: one connection's state machine, windows, timers and congestion
//!   control, free of frames and devices;
//! - [`ring`]: the byte ring behind the receive buffer and the send buffer;
//!   [`send_buffer`]: the send buffer, copied bytes and loaned memory (zero-copy send);
//!   [`recv_buffer`]: the receive buffer, copied bytes and NIC pages (zero-copy receive);
//!   [`assembler`]: the out-of-order queue's
//!   bookkeeping; [`rtt`]: the RFC 6298 timer; [`scoreboard`]: the SACK scoreboard;
//!   [`isn`]: RFC 6528 initial sequence numbers and RFC 6056 ports; [`syn_cookie`]: RFC
//!   4987 §3.6 SYN cookies, for a listener whose backlog is full; `template`: a
//!   connection's prebuilt Ethernet and IP headers (`Tuning::tcp_header_template`);
//! - this module: input (parse, checksum, demultiplex, hand to the connection or the
//!   listener, RST for segments nobody wants) and output (segments to frames: header,
//!   data copied out of the send buffer and checksummed, down to IP), and the timers.
//!
//! The checksum follows the same switches as UDP: with `fused_copy_checksum` the data is
//! summed while it is copied (out of the send buffer on output; into the receive buffer on
//! input, for in-order data, before the segment is processed, so a segment that fails
//! changes nothing); without it the copy and the checksum are two passes. When both SYNs
//! carried RFC 1146's "no checksum", data segments carry none and none is verified.
//! Header prediction (`header_prediction`) is in [`connection`].
//!
//! The PCB table is the one UDP uses (paper 002 §6.3's lookups and caches): a listener is
//! a `<laddr|*, lport>` PCB, a connection a full four-tuple.
//!
//! # A listener under a SYN flood
//!
//! A listener's backlog bounds the connections it holds for it: those in SYN-RECEIVED
//! and those established and waiting to be accepted. A SYN that finds the accept queue
//! itself full is dropped (`tcp.drop.listen_overflow`): no connection could be queued.
//! One that finds the backlog full of half-open connections (a SYN flood from spoofed
//! addresses keeps it so, each held until its SYN-ACK retransmissions give up) is
//! answered with a SYN cookie when the listener's `TcpConfig::syn_cookies` is on
//! (RFC 4987 §3.6; `tcp.syn_cookies_sent`) and dropped when it is off. Nothing is kept for
//! a cookie: the ACK that returns it, an ACK for the listener matching no connection,
//! (looked at only while a cookie the listener sent could still be valid)
//! makes the connection, ESTABLISHED at once, if its cookie is valid and unexpired
//! (`tcp.syn_cookies_accepted`) and the accept queue has room; its data is delivered. An
//! ACK with a bad or expired cookie is counted (`tcp.syn_cookies_rejected`) and answered
//! with RFC 9293's RST. A new connection also reserves its buffers against the stack's
//! socket memory limit, and the SYN (or cookie ACK) is dropped when they do not fit
//! (`stack.drop.socket_memory`).

pub mod assembler;
pub mod connection;
pub mod isn;
pub mod recv_buffer;
pub mod ring;
pub mod rtt;
pub mod scoreboard;
pub mod send_buffer;
pub mod syn_cookie;
pub(crate) mod template;
pub(crate) mod timer_queue;

pub use connection::{ConnError, ConnStats, Connection, State, TcpConfig};
pub use syn_cookie::SynCookies;

use crate::buf::{ExtBuf, PacketBuf, TxOffload, PAGE_SIZE};
use crate::checksum::{self, Accumulator};
use crate::driver::RxChecksum;
use crate::ip::{IcmpError, IpExtras, IpFields, RouteTo, SendAs, ECN_CE};
use crate::probe::ledger::cold_path;
use crate::probe::{Counter, Layer, Op, Sampling, Side};
use crate::socket::tcp::{Kind, TcpSocket};
use crate::stack::in_message;
use crate::stack::Stack;
use crate::tcp::connection::{Outgoing, RstReply, ZeroCopyRx};
use crate::tcp::send_buffer::Piece;
use crate::time::Instant;
use crate::wire::ipv4::{IpProtocol, Ipv4Repr};
use crate::wire::tcp::{self as tcp_wire, Control, SeqNumber, TcpRepr};
use crate::wire::{Checksum, Ipv4Address};

use connection::SendCopy;
use connection::IP_TCP_HEADERS as HEADERS;

/// The smallest path MTU an ICMP fragmentation-needed may set. RFC 1191 §3 allows 68;
/// like Linux (`min_pmtu`, 552) we refuse to go that low, as RFC 5927 §7.3 suggests: a
/// forged message would otherwise shrink a connection to tiny segments.
pub const MIN_PATH_MTU: usize = 552;

/// What [`Stack::tcp_build_and_send`] builds of a segment: all of it, its header emitted
/// from its repr; or one frame of a super-segment TCP cuts itself ([`Cut`]), with the
/// header as emitted for the whole and patched for this frame, and this frame's part of
/// the data (as offsets into the send buffer, like the segment's own).
#[derive(Clone, Copy)]
enum Frame<'a> {
    Whole,
    Cut {
        header: &'a [u8],
        data_offset: usize,
        data_len: usize,
    },
}

/// Where a frame's parts go: [`Frame::layout`].
#[derive(Clone, Copy)]
struct Layout {
    header_len: usize,
    /// Where the frame's data starts in the send buffer.
    data_offset: usize,
    data_len: usize,
    /// The segment size for a device to cut the frame to (0: none).
    gso_size: u16,
}

impl Frame<'_> {
    /// This frame of segment `out`: its header's length, where its data starts in the
    /// send buffer and how long it is, and the segment size for a device to cut it to.
    #[inline]
    fn layout(self, out: &Outgoing) -> Layout {
        match self {
            Frame::Whole => Layout {
                header_len: out.repr.header_len(),
                data_offset: out.data_offset,
                data_len: out.data_len,
                gso_size: out.gso_size,
            },
            Frame::Cut {
                header,
                data_offset,
                data_len,
            } => Layout {
                header_len: header.len(),
                data_offset,
                data_len,
                gso_size: 0,
            },
        }
    }
}

/// Software segmentation (`Tuning::software_segmentation`): a super-segment, decided as
/// one, cut by TCP into the frames a device's segmentation offload would make of it (see
/// `driver::memlink::offload`): each with `gso_size` bytes of data (the last with the
/// rest), the sequence number advanced by the data before it, FIN and PSH on the last
/// alone and CWR on the first alone. The header is emitted once and patched for each
/// frame; each frame is then built and sent as any segment is (its own checksum, IP
/// identification and ledger message).
struct Cut {
    train: Outgoing,
    /// The train's header, patched for the frame [`next_frame`](Self::next_frame) gave.
    header: [u8; tcp_wire::MAX_HEADER_LEN],
    header_len: usize,
    /// Where the next frame's data starts, from the train's.
    offset: usize,
}

impl Cut {
    /// The train's header emitted; `None` if it cannot be.
    fn new(train: &Outgoing, src: Ipv4Address, dst: Ipv4Address) -> Option<Cut> {
        let header_len = train.repr.header_len();
        let mut header = [0u8; tcp_wire::MAX_HEADER_LEN];
        let mut p = tcp_wire::Packet::new_unchecked(header.get_mut(..header_len)?);
        train.repr.emit(&mut p, src, dst, Checksum::Skip).ok()?;
        Some(Cut {
            train: *train,
            header,
            header_len,
            offset: 0,
        })
    }

    /// Whether every frame has been given.
    fn finished(&self) -> bool {
        self.offset >= self.train.data_len
    }

    /// Patches the header for the next frame and gives that frame's data (its offset in
    /// the send buffer and length). Not to be called once [`finished`](Self::finished).
    fn next_frame(&mut self) -> (usize, usize) {
        let t = &self.train;
        let len = usize::from(t.gso_size).min(t.data_len - self.offset);
        let last = self.offset + len == t.data_len;
        let mut p = tcp_wire::Packet::new_unchecked(&mut self.header[..self.header_len]);
        p.set_seq_number(t.repr.seq_number + self.offset);
        p.set_fin(last && t.repr.control == Control::Fin);
        p.set_psh(last && t.repr.psh);
        p.set_cwr(self.offset == 0 && t.repr.cwr);
        let data_offset = t.data_offset + self.offset;
        self.offset += len;
        (data_offset, len)
    }

    /// The frame [`next_frame`](Self::next_frame) gave the data of.
    fn frame(&self, data_offset: usize, data_len: usize) -> Frame<'_> {
        Frame::Cut {
            header: &self.header[..self.header_len],
            data_offset,
            data_len,
        }
    }
}

/// The most frames one super-segment is cut into by TCP itself
/// (`Tuning::software_segmentation`): 44 at MSS 1,460 make the 64 KiB of a device's
/// super-segment.
const SOFTWARE_SEGMENTS_MAX: usize = 44;

/// Stands for the data of a segment whose fragments TCP input staged in the receive
/// buffer by reference (`data_in_rx`): the connection reads only the data's length and
/// never these bytes (zeros, as long as the largest datagram).
static DATA_IN_RX: [u8; crate::ip::MAX_DATAGRAM] = [0; crate::ip::MAX_DATAGRAM];

/// RFC 1191 §7's plateaus, for a router too old to say the next-hop MTU.
const MTU_PLATEAUS: [usize; 10] = [32000, 17914, 8166, 4352, 2002, 1492, 1006, 508, 296, 68];

/// How a segment sent outside a connection's output (a RST, a SYN cookie's SYN-ACK)
/// goes: its IP options (a source route) and its header's TTL and DSCP.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SendPath {
    pub extras: IpExtras,
    pub fields: IpFields,
}

impl SendPath {
    /// By `extras`, with the stack's TTL and DSCP 0.
    pub fn plain(extras: IpExtras) -> SendPath {
        SendPath {
            extras,
            fields: IpFields::default(),
        }
    }
}

impl Stack {
    /// The MSS to advertise to `dst`: the outgoing interface's MTU less 40 (RFC 9293
    /// §3.7.1; RFC 879).
    pub(crate) fn tcp_mss_for(&self, dst: Ipv4Address) -> usize {
        if self.is_own_address(dst) {
            return crate::ip::MAX_DATAGRAM - HEADERS;
        }
        self.routes
            .lookup(dst)
            .and_then(|r| self.ifaces.get(r.interface))
            .map_or(536, |i| i.caps.mtu.saturating_sub(HEADERS))
    }

    /// Whether data from `remote` arrives through a device that splits headers from data
    /// (the route to it; zero-copy receive's page rule).
    pub(crate) fn tcp_rx_header_split(&self, remote: Ipv4Address) -> bool {
        !self.is_own_address(remote)
            && self
                .routes
                .lookup(remote)
                .and_then(|r| self.ifaces.get(r.interface))
                .is_some_and(|i| i.caps.header_split)
    }

    /// Where a connection to `dst` copies its writes: into shared blocks sent by
    /// reference (`Tuning::tcp_send_by_reference`) when the route's device gathers
    /// fragments and its MTU makes segments of at least the device's
    /// [`by_reference_min`](crate::driver::DeviceCaps::by_reference_min), summed as they
    /// are copied when the segments' checksums will need it (the copy and the checksum
    /// fused, no offload); else into the ring. Not to our own addresses: loopback copies
    /// fragments together.
    pub(crate) fn tcp_send_copy_for(&self, dst: Ipv4Address) -> SendCopy {
        if !self.tuning.tcp_send_by_reference || self.is_own_address(dst) {
            return SendCopy::Ring;
        }
        let iface = self.routes.lookup(dst).map(|r| r.interface);
        let Some(caps) = iface.and_then(|i| self.ifaces.get(i)).map(|i| i.caps) else {
            return SendCopy::Ring;
        };
        if !caps.scatter_gather || caps.mtu.saturating_sub(HEADERS) < caps.by_reference_min {
            return SendCopy::Ring;
        }
        // The segments' checksums: the device's, or summed in the write's copy.
        let (offloaded, _) = self.tcp_offloads(iface);
        let sum = (self.tuning.fused_copy_checksum && !offloaded).then_some(self.tuning.checksum);
        SendCopy::Shared {
            sum,
            min_segment: caps.by_reference_min,
        }
    }

    /// A TCP segment in `datagram` (the whole IP datagram; `ip` its header).
    pub(crate) fn tcp_input(
        &mut self,
        s: impl Sampling,
        ip: &Ipv4Repr,
        datagram: PacketBuf,
        rx: RxChecksum,
        now: Instant,
    ) {
        let datagram = if datagram.has_frags() && !self.tcp_reads_frags_in_place(ip, &datagram) {
            // Copied together first, then read as any contiguous segment.
            match self.linearize_received(s, Layer::Tcp, datagram) {
                Ok(whole) => whole,
                Err(()) => return,
            }
        } else {
            datagram
        };
        // One call, so that the segment's input stays in line here.
        self.tcp_segment_input(s, ip, datagram, rx, now)
    }

    /// Whether a segment for a listener, or for no socket, is between unicast addresses;
    /// if not it is counted, to be dropped unanswered, so that no SYN-ACK or RST goes to
    /// or from a broadcast or multicast address (RFC 9293 MUST-57, MUST-63). A
    /// connection's ends are unicast already (connect and the listener see to it), so a
    /// segment that finds one is not asked.
    fn tcp_between_unicast(&self, ip: &Ipv4Repr) -> bool {
        let unicast = self.is_unicast_peer(ip.src) && self.is_unicast_peer(ip.dst);
        if !unicast {
            self.ledger.counters().inc(Counter::TcpDropNotUnicast);
        }
        unicast
    }

    /// Whether TCP input can read a segment whose data is in fragments where it lies
    /// ([`tcp_segment_input`](Self::tcp_segment_input)): one fragment (the payload a NIC
    /// split off, or one slice a sender passed), or several it will keep by reference
    /// (`Tuning::tcp_send_by_reference`, [`Connection::stages_by_reference`]); never data
    /// partly behind the header and partly in fragments, nor a header cut by the window
    /// (copied together first; what is still too short then, the input drops).
    #[cold]
    fn tcp_reads_frags_in_place(&mut self, ip: &Ipv4Repr, datagram: &PacketBuf) -> bool {
        let bytes = &datagram.data()[ip.header_len()..];
        let Ok(p) = tcp_wire::Packet::new_checked(bytes) else {
            return false;
        };
        let frags = datagram.frags();
        if bytes.len() > p.header_len() {
            return false;
        }
        if frags.len() == 1 {
            return true;
        }
        if !self.tuning.tcp_send_by_reference {
            return false;
        }
        let (sport, dport, seq) = (p.src_port(), p.dst_port(), p.seq_number());
        let frag_len = frags.iter().map(ExtBuf::len).sum();
        self.tcp_pcbs
            .lookup(ip.src, sport, ip.dst, dport)
            .map(|(_, &mut index)| index)
            .and_then(|i| self.tcp.conn_mut(i))
            .is_some_and(|c| c.stages_by_reference(seq, frag_len))
    }

    /// [`tcp_input`](Self::tcp_input) for a segment whose data is behind its header, in
    /// one fragment, or in several it keeps by reference.
    fn tcp_segment_input(
        &mut self,
        s: impl Sampling,
        ip: &Ipv4Repr,
        mut datagram: PacketBuf,
        rx: RxChecksum,
        now: Instant,
    ) {
        let hl = ip.header_len();
        // Data in fragments (IP input passes only whole TCP segments so): the payload a
        // NIC split off its headers, page-aligned, or data a sender passed by reference
        // (moved into the receive buffer below when it is kept so).
        let (window, mut frag_list) = datagram.window_and_frags_mut();
        let bytes = &window[hl..];
        let mut parsed = {
            let _p = self
                .ledger
                .probe(s, Layer::Tcp, Side::Receive, Op::TcpProto);
            tcp_wire::Packet::new_checked(bytes)
                .and_then(|p| TcpRepr::parse(&p, ip.src, ip.dst, Checksum::Skip))
        };
        // The segment is used where the parse left it (moving the large `TcpRepr` out of
        // the `Result` is a copy of every field).
        let Ok(seg) = &mut parsed else {
            self.ledger.counters().inc(Counter::TcpDropMalformed);
            return self.free(s, Layer::Tcp, Side::Receive, datagram);
        };
        let header_len = bytes.len() - seg.payload.len();
        let frag_len: usize = frag_list
            .as_deref()
            .map_or(0, |f| f.iter().map(ExtBuf::len).sum());
        let found = {
            let _p = self.ledger.probe(s, Layer::Tcp, Side::Receive, Op::Demux);
            self.tcp_pcbs
                .lookup(ip.src, seg.src_port, ip.dst, seg.dst_port)
                .map(|(_, &mut index)| index)
        };
        let mut conn = found.and_then(|i| self.tcp.conn_mut(i));
        // Verify on read (`Tuning::tcp_verify_on_read`): header prediction's pure data
        // segment, its data by reference, waits unverified for the application's read.
        // Any other segment for a connection holding such segments has them verified
        // first, so that input finds the connection as if they had been taken at arrival.
        let mut behind_bad = false;
        if let Some(c) = conn
            .as_deref_mut()
            .filter(|c| frag_len > 0 || c.rx.unverified() > 0)
        {
            let frags = frag_list.as_deref_mut();
            let header = &bytes[..header_len];
            let arrived = Arrival {
                ip,
                seg,
                header,
                frags,
                frag_len,
                rx,
            };
            match verify_on_read_input(&self.ledger, s, &self.tuning, c, arrived, now) {
                None => return self.free(s, Layer::Tcp, Side::Receive, datagram),
                Some(checked) => behind_bad = !checked,
            }
        }
        // Fragments a sender passed by reference go into the receive buffer as they are
        // when they are the next data and fit (a zero-copy receive connection on a
        // header-splitting NIC keeps its own rule, whole pages only).
        let by_reference = frag_len > 0
            && seg.payload.is_empty()
            && self.tuning.tcp_send_by_reference
            && conn
                .as_deref()
                .is_some_and(|c| c.stages_by_reference(seg.seq_number, frag_len));
        // What is kept by reference is staged in the receive buffer below (`data_in_rx`):
        // the connection reads only its length. Data in other fragments is read where it
        // lies.
        let (frags, staged): (&[ExtBuf], _) = match frag_list {
            Some(f) if by_reference => {
                seg.payload = &DATA_IN_RX[..frag_len];
                (&[], Some(f))
            }
            Some(f) => (f, None),
            None => (&[], None),
        };
        let split = match frags {
            [] => None,
            [payload] if seg.payload.is_empty() => {
                seg.payload = payload.as_slice();
                Some(payload)
            }
            // `tcp_input` copied anything else together, except fragments it meant to
            // keep by reference behind unverified segments that then failed.
            _ => {
                let counter = if behind_bad {
                    Counter::TcpDropBehindBadChecksum
                } else {
                    Counter::TcpDropMalformed
                };
                self.ledger.counters().inc(counter);
                return self.free(s, Layer::Tcp, Side::Receive, datagram);
            }
        };
        let tcp_len = header_len + seg.payload.len();
        self.ledger.counters().inc(Counter::TcpSegmentsIn);
        self.ledger.set_message_size(s, seg.payload.len());

        // The checksum: elided by agreement, verified by the NIC, summed while the data
        // is copied into the receive buffer, or verified in a pass of its own.
        let kernel = self.tuning.checksum;
        let fused = self.tuning.fused_copy_checksum;
        let mut data_in_rx = false;
        // RFC 1146: SYN and RST segments always carry the standard checksum.
        let elided = !matches!(seg.control, Control::Syn | Control::Rst)
            && conn.as_ref().is_some_and(|c| c.checksum_elided());
        let seed =
            checksum::pseudo_header_v4(ip.src.0, ip.dst.0, tcp_wire::PROTOCOL, tcp_len as u16);
        // A NIC that summed the transport bytes (RawSum) leaves only the pseudo-header to
        // add; the host sums only what no device vouched for.
        if let (RxChecksum::RawSum(raw), false) = (rx, elided) {
            let _p = self
                .ledger
                .probe(s, Layer::Tcp, Side::Receive, Op::Checksum);
            if !checksum::verifies(checksum::combine(seed, raw)) {
                drop(_p);
                self.ledger.counters().inc(Counter::TcpDropBadChecksum);
                return self.free(s, Layer::Tcp, Side::Receive, datagram);
            }
        }
        let verify = !elided && rx == RxChecksum::None;
        // Zero-copy receive on a header-splitting NIC: whole pages by reference, the odd
        // rest copied.
        let zero_copy = conn
            .as_ref()
            .is_some_and(|c| c.zero_copy_rx == ZeroCopyRx::Pages)
            && !seg.payload.is_empty();
        let pages = match (split, conn.as_deref_mut()) {
            (Some(payload), Some(c))
                if zero_copy
                    && payload.is_page_aligned()
                    && payload.len() >= PAGE_SIZE
                    && c.nothing_out_of_order()
                    && c.in_order_fits(seg.seq_number, payload.len()) =>
            {
                Some((c, payload, payload.len() / PAGE_SIZE * PAGE_SIZE))
            }
            _ => None,
        };
        if let Some((c, payload, whole)) = pages {
            let (paged, odd) = payload.split_at(whole);
            let mut acc = Accumulator::with_seed(seed);
            if verify {
                // The pages are read to be summed, never copied.
                let _p = self
                    .ledger
                    .probe(s, Layer::Tcp, Side::Receive, Op::Checksum);
                acc.add_sum(checksum::header_sum(&bytes[..header_len]), header_len);
                acc.add_with(kernel, paged);
            }
            {
                // The odd rest is copied as on the ordinary path: summed on the way with
                // `fused_copy_checksum`, else in a pass of its own.
                let _p = self
                    .ledger
                    .probe(s, Layer::Socket, Side::Receive, Op::SocketCopy);
                let (a, b) = c.rx.unreadable_slices_mut(0, odd.len());
                let (first, rest) = odd.split_at(a.len());
                if verify && fused {
                    acc.copy_and_add_with(kernel, a, first);
                    acc.copy_and_add_with(kernel, b, rest);
                } else {
                    a.copy_from_slice(first);
                    b.copy_from_slice(rest);
                }
            }
            if verify && !fused {
                let _p = self
                    .ledger
                    .probe(s, Layer::Tcp, Side::Receive, Op::Checksum);
                acc.add_with(kernel, odd);
            }
            if verify && !checksum::verifies(acc.sum()) {
                self.ledger.counters().inc(Counter::TcpDropBadChecksum);
                return self.free(s, Layer::Tcp, Side::Receive, datagram);
            }
            if let Ok(p) = payload.slice(..whole) {
                c.rx.stage(p);
            }
            data_in_rx = true;
        }
        if let (Some(frags), Some(c)) = (staged, conn.as_deref_mut()) {
            let check = verify.then_some((seed, kernel));
            if !stage_by_reference(&self.ledger, s, c, &bytes[..header_len], frags, check) {
                self.ledger.counters().inc(Counter::TcpDropBadChecksum);
                return self.free(s, Layer::Tcp, Side::Receive, datagram);
            }
            data_in_rx = true;
        }
        if elided {
            self.ledger.counters().inc(Counter::TcpNoChecksumIn);
        } else if verify && !data_in_rx {
            let ok = match conn {
                Some(c)
                    if fused
                        && !seg.payload.is_empty()
                        && c.in_order_fits(seg.seq_number, seg.payload.len()) =>
                {
                    // Copy the data to where it will be read and sum it on the way; it
                    // becomes readable only if the segment checks and is accepted.
                    let _p = self
                        .ledger
                        .probe(s, Layer::Socket, Side::Receive, Op::SocketCopy);
                    let mut acc = Accumulator::with_seed(seed);
                    acc.add_sum(checksum::header_sum(&bytes[..header_len]), header_len);
                    let (a, b) = c.rx.unreadable_slices_mut(0, seg.payload.len());
                    let (first, rest) = seg.payload.split_at(a.len());
                    acc.copy_and_add_with(kernel, a, first);
                    acc.copy_and_add_with(kernel, b, rest);
                    data_in_rx = true;
                    checksum::verifies(acc.sum())
                }
                _ => {
                    let _p = self
                        .ledger
                        .probe(s, Layer::Tcp, Side::Receive, Op::Checksum);
                    let mut acc = Accumulator::with_seed(seed);
                    acc.add_with(kernel, bytes);
                    if let Some(payload) = split {
                        acc.add_with(kernel, payload);
                    }
                    checksum::verifies(acc.sum())
                }
            };
            if !ok {
                self.ledger.counters().inc(Counter::TcpDropBadChecksum);
                return self.free(s, Layer::Tcp, Side::Receive, datagram);
            }
        }

        let hp = self.tuning.header_prediction;
        let Some(index) = found else {
            if !self.tcp_between_unicast(ip) {
                return self.free(s, Layer::Tcp, Side::Receive, datagram);
            }
            self.ledger.counters().inc(Counter::TcpDropNoSocket);
            if let Some(rst) = RstReply::for_segment(seg) {
                let (local, remote) = ((ip.dst, seg.dst_port), (ip.src, seg.src_port));
                self.tcp_send_rst(
                    s,
                    local,
                    remote,
                    rst,
                    &SendPath::plain(Self::ip_route_back(ip)),
                );
            }
            return self.free(s, Layer::Tcp, Side::Receive, datagram);
        };
        if seg.control == Control::Syn && self.tcp_reopen_time_wait(s, index, ip, seg, now) {
            return self.free(s, Layer::Tcp, Side::Receive, datagram);
        }
        let reply = match self.tcp.at_mut(index) {
            Some(TcpSocket {
                kind: Kind::Stream(c),
                parent,
                ..
            }) => {
                let was = c.state();
                // Congestion Experienced on the way (RFC 3168 §5).
                if ip.ecn == ECN_CE {
                    c.ce_in = true;
                }
                let reply = c.input(s, seg, data_in_rx, hp, &self.ledger, now);
                c.rx.unstage();
                let is = c.state();
                let endpoints = (c.local, c.remote);
                let parent = *parent;
                let reply = reply.map(|rst| (rst, c.send_path()));
                // A route the segment brings, once the segment proved itself (MUST-53,
                // SHLD-24): a blind one with the four-tuple must not turn the route.
                if !ip.options.is_empty() && c.segment_accepted() {
                    Self::tcp_route_update(c, ip);
                }
                Some((reply, endpoints, was, is, parent, c.take_ack_at_once()))
            }
            Some(TcpSocket {
                kind: Kind::Listener(_),
                ..
            }) => {
                let syn = seg.control == Control::Syn && seg.ack_number.is_none();
                let cookie_ack =
                    matches!(seg.control, Control::None | Control::Fin) && seg.ack_number.is_some();
                if !self.tcp_between_unicast(ip) {
                    // Dropped unanswered.
                } else if syn {
                    self.tcp_listener_syn(s, index, ip, seg, now, None);
                } else if cookie_ack && self.tcp_listener_cookie_ack(s, index, ip, seg, now) {
                    // A connection made from a cookie, or a cookie ACK dropped for want of
                    // room: either way, nothing more to do for this segment.
                } else if let Some(rst) = RstReply::for_segment(seg) {
                    // RFC 9293 §3.10.7.2: an ACK to a listener draws a RST; a RST is
                    // ignored; anything else is dropped.
                    if seg.ack_number.is_some() {
                        let (local, remote) = ((ip.dst, seg.dst_port), (ip.src, seg.src_port));
                        self.tcp_send_rst(
                            s,
                            local,
                            remote,
                            rst,
                            &SendPath::plain(Self::ip_route_back(ip)),
                        );
                    }
                }
                None
            }
            None => None,
        };
        self.free(s, Layer::Tcp, Side::Receive, datagram);
        let Some((reply, (local, remote), was, is, parent, at_once)) = reply else {
            return;
        };
        if let Some((rst, path)) = reply {
            self.tcp_send_rst(s, local, remote, rst, &path);
        }
        if was == State::SynReceived && is != State::SynReceived {
            self.tcp_handshake_done(s, index, parent, is);
        }
        // Out-of-order data is answered at once even in a batch (RFC 5681 §4.2): each such
        // ACK is a duplicate ACK, with SACK blocks, for the sender's loss recovery. A
        // connection this segment closed has nothing to send and gives up its PCB now,
        // not at the batch's end, so that the batch's next segment for its four-tuple (a
        // SYN sent right behind the RST that closed it) finds the listener.
        if self.tuning.tcp_output_per_batch && !at_once {
            if is == State::Closed {
                return self.tcp_reap(index);
            }
            return self.tcp_defer_output(index);
        }
        self.tcp_output(s, index);
        self.tcp_reap(index);
    }

    /// Output after the application read from connection `index`: what the read made
    /// due (a window update, the ACK a drained buffer owes) is sent now, or, with
    /// `tcp_output_per_batch`, at the end of the application's turn (the next poll), so
    /// that the reads of one turn send one update however many calls they took. A
    /// zero-copy reader takes a segment's data a call: answered at once, every second
    /// call opened the window by two segments (RFC 9293 §3.8.6.2.2's threshold) and sent
    /// an update, 0.39 ACKs a segment at MTU 1500 against 0.03 for a copying reader
    /// taking 256 KiB a call. 4.4BSD's `soreceive` likewise asks TCP once per call.
    pub(crate) fn tcp_output_after_read(&mut self, s: impl Sampling, index: usize) {
        // A read that made nothing due takes TCP output's idle answer at once.
        let idle = self.tcp.conn_mut(index).is_none_or(|c| c.output_idle());
        if self.tuning.tcp_output_per_batch && !idle {
            self.tcp_defer_output(index);
        } else {
            self.tcp_output(s, index);
        }
    }

    /// Marks connection `index` for output at the next flush of the deferred list
    /// (`tcp_output_per_batch`): the end of the receive batch, or of the application's
    /// turn.
    fn tcp_defer_output(&mut self, index: usize) {
        if !self.tcp.deferred.contains(&index) {
            self.tcp.deferred.push(index);
        }
    }

    /// The end of a receive batch: output for the connections input marked.
    #[inline]
    pub(crate) fn tcp_flush_deferred(&mut self, s: impl Sampling) {
        if !self.tcp.deferred.is_empty() {
            self.tcp_flush_deferred_now(s);
        }
    }

    fn tcp_flush_deferred_now(&mut self, s: impl Sampling) {
        // Output never leads back into input (a datagram to ourselves waits in the
        // loopback queue), so nothing is deferred meanwhile: the list is read in place
        // by index and emptied at the end, keeping its capacity.
        let mut next = 0;
        while let Some(&i) = self.tcp.deferred.get(next) {
            next += 1;
            // The usual case after input, a connection with nothing to send, is answered
            // here from the one lookup: it sends nothing, and one not CLOSED is not reaped.
            if self
                .tcp
                .conn_mut(i)
                .is_some_and(|c| !c.is_closed() && c.output_idle())
            {
                self.ledger.counters().inc(Counter::TcpOutputIdle);
                continue;
            }
            self.tcp_output(s, i);
            self.tcp_reap(i);
        }
        self.tcp.deferred.clear();
    }

    /// A SYN for connection `index`: if the connection is in TIME-WAIT, a listener
    /// takes SYNs on its local address and port, and the SYN is newer than anything the
    /// old incarnation saw ([`Connection::reopen_time_wait`]), the old incarnation ends
    /// (its PCB goes; a handle the application still holds finds it CLOSED, as after
    /// 2·MSL) and the listener takes the SYN, with an ISS past the old SND.NXT. Returns
    /// whether it did; if not, the SYN goes to the connection, which answers it with a
    /// challenge ACK (RFC 5961 §4), as it does with no listener (Linux answers both
    /// with an ACK too).
    ///
    /// Without this, a client that reuses its port after the server closed first
    /// (`nc -p`, a fixed-port client, a port range worn round) gets a challenge ACK,
    /// answers it with a RST that ends TIME-WAIT, and connects only when its SYN goes
    /// again (a second later from probestack, about 10 ms from Linux).
    #[cold]
    fn tcp_reopen_time_wait(
        &mut self,
        s: impl Sampling,
        index: usize,
        ip: &Ipv4Repr,
        syn: &TcpRepr,
        now: Instant,
    ) -> bool {
        let time_wait = match self.tcp.at(index) {
            Some(TcpSocket {
                kind: Kind::Stream(c),
                ..
            }) => c.state() == State::TimeWait,
            _ => false,
        };
        if !time_wait {
            return false;
        }
        // The most specific listener for the SYN's destination (the connection's own PCB,
        // being fully specified, is what a lookup finds first).
        let listener = self
            .tcp_pcbs
            .iter()
            .filter(|(_, b, _)| {
                b.foreign.is_none() && b.matches(ip.src, syn.src_port, ip.dst, syn.dst_port)
            })
            .max_by_key(|(_, b, _)| b.form())
            .map(|(_, _, &i)| i);
        let Some(listener) = listener else {
            return false;
        };
        let reopened = self
            .tcp
            .conn_mut(index)
            .and_then(|c| c.reopen_time_wait(syn));
        let Some(old_snd_nxt) = reopened else {
            return false;
        };
        self.ledger.counters().inc(Counter::TcpTimeWaitReopened);
        self.tcp_reap(index);
        self.tcp_listener_syn(s, listener, ip, syn, now, Some(old_snd_nxt));
        true
    }

    /// A SYN for a listener: a new connection in SYN-RECEIVED, if the backlog has room;
    /// a SYN cookie instead when it is full of half-open connections (see the module
    /// documentation). With `beyond`, the SND.NXT of an incarnation of the same
    /// connection that this SYN ended in TIME-WAIT, the ISS lies past it (RFC 9293
    /// MAY-2): RFC 6528's, if it does, else 2^16 + 1 past it (as Linux's
    /// `tcp_timewait_state_process` chooses).
    fn tcp_listener_syn(
        &mut self,
        s: impl Sampling,
        index: usize,
        ip: &Ipv4Repr,
        syn: &TcpRepr,
        now: Instant,
        beyond: Option<SeqNumber>,
    ) {
        let Some(TcpSocket {
            kind: Kind::Listener(l),
            ..
        }) = self.tcp.at_mut(index)
        else {
            return;
        };
        let (config, ask) = (l.config, l.no_checksum);
        let local = (ip.dst, syn.dst_port);
        let remote = (ip.src, syn.src_port);
        if l.accept_queue.len() >= l.backlog {
            self.ledger.counters().inc(Counter::TcpDropListenOverflow);
            return;
        }
        if l.embryonic + l.accept_queue.len() >= l.backlog {
            if config.syn_cookies {
                l.cookie_sent_at = Some(now);
                self.tcp_send_syn_cookie(s, ip, syn, &config, now);
            } else {
                self.ledger.counters().inc(Counter::TcpDropListenOverflow);
            }
            return;
        }
        let reserved = config.buffer_bytes();
        if !self.reserve_socket_memory(reserved) {
            return;
        }
        let mut iss = self.tcp.isn.next_isn(local, remote, now);
        if let Some(old) = beyond.filter(|&old| !iss.gt(old)) {
            iss = old + 65537;
        }
        // A SYN that came by a source route is answered along it reversed, and so is
        // every segment of the connection (RFC 9293 MUST-53).
        let route = Self::tcp_route_back(ip);
        let ask = ask || (route.is_none() && self.checksum_elidable(remote.0));
        let mut conn = self.tcp_new_connection((local, remote), config, iss, ask, route);
        conn.accept_syn(syn, now);
        let Some(h) = self.tcp_insert_child(s, index, local, remote, conn, reserved) else {
            return;
        };
        if let Some(TcpSocket {
            kind: Kind::Listener(l),
            ..
        }) = self.tcp.at_mut(index)
        {
            l.embryonic += 1;
        }
        self.tcp_output(s, h);
    }

    /// The way back along the source route `ip`'s datagram came by, if it came by one.
    fn tcp_route_back(ip: &Ipv4Repr) -> Option<RouteTo> {
        if ip.options.is_empty() {
            return None;
        }
        Self::source_routing_back(ip).and_then(|via| RouteTo::new(via, ip.src, false))
    }

    /// A connection between `ends` (local, remote) that goes along `route`, or directly:
    /// its MSS and its way of sending data are those of the way out (a route's first
    /// gateway), its segments carry the route, and with `ask` its SYN asks for RFC
    /// 1146's elided checksum.
    pub(crate) fn tcp_new_connection(
        &self,
        ends: ((Ipv4Address, u16), (Ipv4Address, u16)),
        config: TcpConfig,
        iss: SeqNumber,
        ask: bool,
        route: Option<RouteTo>,
    ) -> Connection {
        let (local, remote) = ends;
        let hop = route.map_or(remote.0, |r| r.first_hop());
        let mss = self.tcp_mss_for(hop);
        let mut conn = Connection::new(local, remote, config, iss, mss, ask);
        conn.ts_offset = self.tcp.isn.ts_offset(local.0, remote.0);
        conn.send_copy = self.tcp_send_copy_for(hop);
        conn.set_source_route(route);
        conn
    }

    /// A segment connection `c` accepted came with IP options: a source route other than
    /// the one the connection keeps replaces it, unless the application named that one
    /// (RFC 9293 SHLD-24, MUST-52).
    #[cold]
    fn tcp_route_update(c: &mut Connection, ip: &Ipv4Repr) {
        let Some(route) = Self::tcp_route_back(ip) else {
            return;
        };
        let kept = c.source_route.as_deref();
        if kept.is_none_or(|k| !k.named && k.via != route.via) {
            c.set_source_route(Some(route));
        }
    }

    /// Puts a passively opened connection (holding `reserved` bytes of socket memory) in
    /// a slot of its own with its PCB, its listener at `parent`. Returns its slot, or
    /// `None` (the memory given back) if the PCB could not be had.
    fn tcp_insert_child(
        &mut self,
        s: impl Sampling,
        parent: usize,
        local: (Ipv4Address, u16),
        remote: (Ipv4Address, u16),
        conn: Connection,
        reserved: usize,
    ) -> Option<usize> {
        let h = self.tcp.insert(TcpSocket {
            kind: Kind::Stream(Box::new(conn)),
            pcb: None,
            parent: Some(parent),
            reserved,
        });
        let inserted = {
            let _p = self
                .ledger
                .probe(s, Layer::Tcp, Side::Receive, Op::PcbConnect);
            self.tcp_pcbs.insert(local, Some(remote), h.index)
        };
        match inserted {
            Ok(id) => {
                if let Some(s) = self.tcp.at_mut(h.index) {
                    s.pcb = Some(id);
                }
                Some(h.index)
            }
            Err(_) => {
                self.tcp_free_slot(h.index);
                None
            }
        }
    }

    /// Answers `syn` (which came in `ip`) with a SYN-ACK whose ISN is a SYN cookie (RFC
    /// 4987 §3.6), keeping nothing. It offers only what the cookie can carry back: our
    /// MSS, and an unscaled window; no window scaling, timestamps or SACK. A SYN that came
    /// by a source route is answered along it reversed, as the connection will be.
    fn tcp_send_syn_cookie(
        &mut self,
        s: impl Sampling,
        ip: &Ipv4Repr,
        syn: &TcpRepr,
        config: &TcpConfig,
        now: Instant,
    ) {
        let (local, remote) = ((ip.dst, syn.dst_port), (ip.src, syn.src_port));
        let (cookie, _) =
            self.tcp
                .cookies
                .make(local, remote, syn.seq_number, syn.max_seg_size, now);
        let route = Self::tcp_route_back(ip);
        let hop = route.map_or(remote.0, |r| r.first_hop());
        let mss = self.tcp_mss_for(hop).min(usize::from(u16::MAX)) as u16;
        let repr = TcpRepr {
            src_port: local.1,
            dst_port: remote.1,
            control: Control::Syn,
            seq_number: cookie,
            ack_number: Some(syn.seq_number + 1),
            window_len: config.recv_buffer.min(usize::from(u16::MAX)) as u16,
            max_seg_size: Some(mss),
            ..TcpRepr::default()
        };
        let path = SendPath {
            extras: route.map_or(IpExtras::NONE, |r| r.extras),
            fields: config.ip_fields,
        };
        if self.tcp_send_bare(s, local, remote, &repr, &path) {
            self.ledger.counters().inc(Counter::TcpSynCookiesSent);
        }
    }

    /// An ACK (perhaps with data or FIN) for the listener at `index` that matched no
    /// connection: if it returns a valid SYN cookie, the connection is made, ESTABLISHED,
    /// queued for accept, and given the segment for its data. Returns whether the segment
    /// was taken care of (a connection made, or a valid cookie's ACK dropped for want of
    /// room); `false` for a segment with no valid cookie, after counting it when the
    /// listener uses cookies.
    fn tcp_listener_cookie_ack(
        &mut self,
        s: impl Sampling,
        index: usize,
        ip: &Ipv4Repr,
        seg: &TcpRepr,
        now: Instant,
    ) -> bool {
        let Some(TcpSocket {
            kind: Kind::Listener(l),
            ..
        }) = self.tcp.at(index)
        else {
            return false;
        };
        let Some(ack) = seg.ack_number else {
            return false;
        };
        // As Linux does, look for a cookie only while one we sent may still be valid: a
        // listener that has not been flooded lately gives a guesser nothing to find.
        let recent = l
            .cookie_sent_at
            .is_some_and(|t| now.saturating_since(t) < syn_cookie::COOKIE_LIFETIME);
        if !l.config.syn_cookies || !recent {
            return false;
        }
        let (config, queue_full) = (l.config, l.accept_queue.len() >= l.backlog);
        let local = (ip.dst, seg.dst_port);
        let remote = (ip.src, seg.src_port);
        let peer_mss = match self
            .tcp
            .cookies
            .check(local, remote, seg.seq_number, ack, now)
        {
            Ok(mss) => mss,
            Err(_) => {
                self.ledger.counters().inc(Counter::TcpSynCookiesRejected);
                return false;
            }
        };
        if queue_full {
            // As Linux does: the peer believes it is connected; its retransmitted data
            // (or a later ACK) tries again while the cookie lives.
            self.ledger.counters().inc(Counter::TcpDropListenOverflow);
            return true;
        }
        let reserved = config.buffer_bytes();
        if !self.reserve_socket_memory(reserved) {
            return true;
        }
        let iss = ack - 1;
        // The ACK's route reversed, as a SYN's would be (RFC 9293 MUST-53).
        let route = Self::tcp_route_back(ip);
        let mut conn = self.tcp_new_connection((local, remote), config, iss, false, route);
        conn.accept_cookie_ack(seg, iss, peer_mss, now);
        let Some(child) = self.tcp_insert_child(s, index, local, remote, conn, reserved) else {
            return true;
        };
        self.ledger.counters().inc(Counter::TcpSynCookiesAccepted);
        if let Some(TcpSocket {
            kind: Kind::Listener(l),
            ..
        }) = self.tcp.at_mut(index)
        {
            l.accept_queue.push_back(child);
            self.ledger.counters().inc(Counter::TcpPassiveOpens);
        }
        // The ACK itself, for its data and FIN, through the connection's normal input.
        let hp = self.tuning.header_prediction;
        let reply = match self.tcp.conn_mut(child) {
            Some(c) => c
                .input(s, seg, false, hp, &self.ledger, now)
                .map(|rst| (rst, c.send_path())),
            None => None,
        };
        if let Some((rst, path)) = reply {
            self.tcp_send_rst(s, local, remote, rst, &path);
        }
        self.tcp_output(s, child);
        self.tcp_reap(child);
        true
    }

    /// A passively opened connection left SYN-RECEIVED: into the accept queue when it
    /// became established (one that closed instead leaves the backlog when reaped).
    ///
    /// The accept queue holds at most the backlog: connections that SYN cookies admitted
    /// may have filled it while this one was half open, and then this one is reset and
    /// counted as an overflow (Linux drops the ACK instead and lets the peer retry).
    fn tcp_handshake_done(
        &mut self,
        s: impl Sampling,
        index: usize,
        parent: Option<usize>,
        state: State,
    ) {
        let Some(parent) = parent.filter(|_| state != State::Closed) else {
            return;
        };
        let Some(TcpSocket {
            kind: Kind::Listener(l),
            ..
        }) = self.tcp.at_mut(parent)
        else {
            return;
        };
        l.embryonic = l.embryonic.saturating_sub(1);
        if l.accept_queue.len() < l.backlog {
            l.accept_queue.push_back(index);
            self.ledger.counters().inc(Counter::TcpPassiveOpens);
            return;
        }
        self.ledger.counters().inc(Counter::TcpDropListenOverflow);
        if let Some(c) = self.tcp.conn_mut(index) {
            let (local, remote, path) = (c.local, c.remote, c.send_path());
            if let Some(rst) = c.abort() {
                self.tcp_send_rst(s, local, remote, rst, &path);
            }
        }
    }

    /// Frees a connection's slot and PCB once it is closed and nobody holds it: the
    /// application closed it, or it never got past its listener. A closed connection
    /// the application still holds loses its PCB alone: CLOSED has no TCB (RFC 9293
    /// §3.3.2), so its four-tuple's segments go to a listener, or draw the RST for no
    /// connection, as they would once the handle is let go (and as Linux unhashes a
    /// socket when it closes, whoever holds it).
    pub(crate) fn tcp_reap(&mut self, index: usize) {
        let (reap, held) = match self.tcp.at(index) {
            Some(TcpSocket {
                kind: Kind::Stream(c),
                parent,
                pcb,
                ..
            }) if c.is_closed() => {
                let reap = c.released || parent.is_some();
                (reap, !reap && pcb.is_some())
            }
            _ => (false, false),
        };
        if held {
            self.tcp_unhash(index);
        }
        if !reap {
            return;
        }
        let Some(s) = self.tcp_free_slot(index) else {
            return;
        };
        if let Some(id) = s.pcb {
            self.tcp_pcbs.remove(id);
        }
        if let Some(parent) = s.parent {
            if let Some(TcpSocket {
                kind: Kind::Listener(l),
                ..
            }) = self.tcp.at_mut(parent)
            {
                // Still in SYN-RECEIVED, or established and waiting in the queue.
                if let Some(pos) = l.accept_queue.iter().position(|&i| i == index) {
                    l.accept_queue.remove(pos);
                } else {
                    l.embryonic = l.embryonic.saturating_sub(1);
                }
            }
        }
    }

    /// Removes connection `index`'s PCB, leaving its slot.
    #[cold]
    fn tcp_unhash(&mut self, index: usize) {
        if let Some(id) = self.tcp.at_mut(index).and_then(|s| s.pcb.take()) {
            self.tcp_pcbs.remove(id);
        }
    }

    /// Sends what the connection has to send, segment by segment, while the outgoing
    /// device has room; when it has none, the connection waits for the next poll (the
    /// back-pressure a qdisc gives, instead of losing segments to a full queue). A
    /// connection with nothing to send ([`Connection::output_idle`], the usual case after
    /// a read or after input that only started the delayed-ACK timer) returns at once,
    /// before the route lookup.
    #[inline]
    pub(crate) fn tcp_output(&mut self, s: impl Sampling, index: usize) {
        match self.tcp.conn_mut(index) {
            Some(c) if c.output_idle() => {
                // Nothing to send: no route lookup, no segment decision.
                self.ledger.counters().inc(Counter::TcpOutputIdle);
            }
            Some(_) => self.tcp_output_segments(s, index),
            None => {}
        }
    }

    /// [`tcp_output`](Self::tcp_output) for a connection that may have something to send.
    fn tcp_output_segments(&mut self, s: impl Sampling, index: usize) {
        let now = self.now;
        let Some(remote) = self.tcp.conn_mut(index).map(|c| c.remote.0) else {
            return;
        };
        let iface = if self.is_own_address(remote) {
            None
        } else {
            self.routes.lookup(remote).map(|r| r.interface)
        };
        let (csum_offload, device_tso_max) = self.tcp_offloads(iface);
        // Software segmentation: super-segments where the device cuts none, and not
        // over loopback (no device, no MTU to cut to).
        let cut_here = device_tso_max == 0 && iface.is_some() && self.tuning.software_segmentation;
        let mut cut: Option<Cut> = None;
        loop {
            let mut room = usize::MAX;
            if let Some(i) = iface {
                room = self.ifaces.get(i).map_or(0, |i| i.device.tx_room());
                // A super-segment is cut to what the device had room for when it was
                // decided; its frames are not held back (they are already sent as far as
                // the connection is concerned).
                if room == 0 && cut.is_none() {
                    if !self.tcp.blocked.contains(&index) {
                        self.tcp.blocked.push(index);
                    }
                    return;
                }
            }
            // The next frame of the super-segment being cut, else the next segment.
            let decided = match cut {
                Some(_) => None,
                None => {
                    let Some(c) = self.tcp.conn_mut(index) else {
                        return;
                    };
                    let tso_max = if cut_here {
                        // As many whole segments as the device has room for.
                        let mss = c.segment_data_max();
                        room.min(SOFTWARE_SEGMENTS_MAX).saturating_mul(mss)
                    } else {
                        device_tso_max
                    };
                    let _p = self.ledger.probe(s, Layer::Tcp, Side::Send, Op::TcpProto);
                    c.next_segment(now, tso_max)
                }
            };
            // Used where `next_segment` left it, not moved out of the `Option`.
            let (segment, frame) = match (&mut cut, &decided) {
                (Some(c), _) => {
                    let (data_offset, data_len) = c.next_frame();
                    (&c.train, c.frame(data_offset, data_len))
                }
                (None, Some(out)) if cut_here && out.gso_size != 0 => {
                    cut = self.tcp_cut(index, out);
                    if cut.is_none() {
                        return;
                    }
                    continue;
                }
                (None, Some(out)) => (out, Frame::Whole),
                (None, None) => return,
            };
            // One call for both (the segment builder stays in line with one caller).
            if self
                .tcp_send_segment(s, index, segment, frame, csum_offload)
                .is_err()
            {
                return;
            }
            match &cut {
                Some(c) if !c.finished() => continue,
                Some(_) => {
                    cut = None;
                    self.ledger.counters().inc(Counter::TcpSoftwareSegmented);
                }
                None => {}
            }
            // Usually the segment just sent was all there was: stop without asking the
            // device and `next_segment` again.
            if self.tcp.conn_mut(index).is_none_or(|c| c.output_idle()) {
                return;
            }
        }
    }

    /// Starts cutting the super-segment `train` into frames (software segmentation):
    /// its header emitted once. `None` (counted) if the header cannot be emitted.
    fn tcp_cut(&mut self, index: usize, train: &Outgoing) -> Option<Cut> {
        let (src, dst) = self.tcp.conn_mut(index).map(|c| (c.local.0, c.remote.0))?;
        let cut = Cut::new(train, src, dst);
        if cut.is_none() {
            self.ledger.counters().inc(Counter::TcpDropMalformed);
        }
        cut
    }

    /// What the device toward a peer finishes for TCP (`Tuning::checksum_offload`,
    /// `Tuning::segmentation_offload`): whether it completes checksums, and the most data
    /// a super-segment for it to cut may hold (0: none). Loopback has no device and
    /// needs whole checksums.
    fn tcp_offloads(&self, iface: Option<usize>) -> (bool, usize) {
        let Some(caps) = iface.and_then(|i| self.ifaces.get(i)).map(|i| i.caps) else {
            return (false, 0);
        };
        let csum = self.tuning.checksum_offload && caps.checksum_offload.l4_tx;
        let tso = if csum && self.tuning.segmentation_offload && caps.tso_max > caps.mtu {
            // The datagram less IPv4's and TCP's largest headers.
            caps.tso_max.saturating_sub(20 + 60)
        } else {
            0
        };
        (csum, tso)
    }

    /// Builds the frame of one segment: header (emitted from `out.repr`, or copied as a
    /// cut super-segment's frames have it), the data copied out of the send buffer
    /// (summed on the way with `fused_copy_checksum`, else in a second pass, or not at
    /// all when the device completes the checksum), the checksum, and down to IP with
    /// don't-fragment set (TCP sizes its segments itself). One message to the ledger.
    /// Called from one place, so that it stays in line there.
    fn tcp_send_segment(
        &mut self,
        caller: impl Sampling,
        index: usize,
        out: &Outgoing,
        frame: Frame<'_>,
        csum_offload: bool,
    ) -> Result<(), ()> {
        let layout = frame.layout(out);
        in_message!(self, from caller, layout.data_len, s => {
            self.tcp_build_and_send(s, index, out, frame, layout, csum_offload)
        })
    }

    /// [`tcp_send_segment`](Self::tcp_send_segment) inside its message, `layout` being
    /// `frame`'s [`Frame::layout`].
    fn tcp_build_and_send(
        &mut self,
        s: impl Sampling,
        index: usize,
        out: &Outgoing,
        frame: Frame<'_>,
        layout: Layout,
        csum_offload: bool,
    ) -> Result<(), ()> {
        let Layout {
            header_len,
            data_offset,
            data_len,
            gso_size,
        } = layout;
        let total = header_len + data_len;
        // Copied bytes go into the frame's buffer behind the header; loaned bytes (a
        // zero-copy send) follow it as fragments, uncopied, for the device to gather.
        // The buffer is still sized for the whole segment: a DMA engine gathers the
        // fragments into its tailroom (as does a driver that must linearize), so the
        // buffer circulates through the pools like any other frame's.
        let copied = match self.tcp.conn_mut(index) {
            Some(c) => c.tx.copied_part(data_offset, data_len),
            None => return Err(()),
        };
        // The failures below are rare, and marked so: unmarked, each halves the weight
        // LLVM's static estimate gives the code after it, and four of them made the calls
        // at the end look cold (under 2% of the entry), which inlines nothing larger than
        // 45 there (`tcp_send_templated`, the walk over the send buffer's pieces then
        // stayed out of line whenever another copy of this path changed the inliner's
        // order: 88 instructions a segment in the probes build).
        let Ok(mut buf) = self.alloc(s, Layer::Tcp, Side::Send, total) else {
            cold_path();
            return Err(());
        };
        if buf.trim_back(data_len - copied).is_err() {
            cold_path();
            self.free(s, Layer::Tcp, Side::Send, buf);
            return Err(());
        }
        let Some(c) = self.tcp.conn_mut(index) else {
            cold_path();
            self.free(s, Layer::Tcp, Side::Send, buf);
            return Err(());
        };
        let (src, dst, fields) = (c.local.0, c.remote.0, c.ip_fields());
        let emitted = {
            let _p = self.ledger.probe(s, Layer::Tcp, Side::Send, Op::TcpProto);
            let space = &mut buf.data_mut()[..header_len];
            match frame {
                Frame::Whole => {
                    let mut p = tcp_wire::Packet::new_unchecked(space);
                    out.repr
                        .emit_sized(&mut p, src, dst, Checksum::Skip, header_len)
                }
                Frame::Cut { header, .. } => {
                    space.copy_from_slice(header);
                    Ok(())
                }
            }
        };
        if emitted.is_err() {
            cold_path();
            self.free(s, Layer::Tcp, Side::Send, buf);
            self.ledger.counters().inc(Counter::TcpDropMalformed);
            return Err(());
        }
        let kernel = self.tuning.checksum;
        // With the device summing, the copy is only a copy. A super-segment goes to the
        // device to be cut even when the peers agreed on no checksum (RFC 1146): the
        // device cuts only what it also checksums, and a checksum nobody verifies is
        // harmless (without this the datagram is too large for the link and is lost).
        let offload = csum_offload && (!out.no_checksum || gso_size != 0);
        let fused = self.tuning.fused_copy_checksum && !offload && !out.no_checksum;
        let mut payload_sum = fused.then(Accumulator::new);
        let mut loaned = false;
        let mut frag_sums = Some(Accumulator::new());
        {
            let _p = self
                .ledger
                .probe(s, Layer::Socket, Side::Send, Op::SocketCopy);
            // The ring's bytes come first (copied), then the queued ones (by reference).
            let (_, mut data) = buf.data_mut().split_at_mut(header_len);
            c.tx.for_each_piece(data_offset, copied, None, |piece| {
                if let Piece::Copy(src) = piece {
                    let (dst, rest) = std::mem::take(&mut data).split_at_mut(src.len());
                    match payload_sum.as_mut() {
                        Some(acc) => acc.copy_and_add_with(kernel, dst, src),
                        None => dst.copy_from_slice(src),
                    }
                    data = rest;
                }
            });
            if copied < data_len {
                let sum = (!offload && !out.no_checksum).then_some(kernel);
                let range = (data_offset + copied, data_len - copied);
                (loaned, frag_sums) = attach_queued(&c.tx, &mut buf, range, sum);
            }
        }
        if loaned {
            self.ledger.counters().inc(Counter::TcpZeroCopySegments);
        } else if buf.has_frags() {
            self.ledger.counters().inc(Counter::TcpSegmentsByReference);
        }
        if offload {
            // CHECKSUM_PARTIAL (tap-offload.md §1.4): the pseudo-header sum over the
            // whole segment's length, not complemented, for the device to sum on from.
            let _p = self.ledger.probe(s, Layer::Tcp, Side::Send, Op::Checksum);
            let seed = checksum::pseudo_header_v4(src.0, dst.0, tcp_wire::PROTOCOL, total as u16);
            tcp_wire::Packet::new_unchecked(buf.data_mut()).set_checksum(seed);
            buf.set_tx_offload(TxOffload {
                l4_checksum: true,
                gso_size,
            });
        } else if !out.no_checksum {
            let _p = self.ledger.probe(s, Layer::Tcp, Side::Send, Op::Checksum);
            let seed = checksum::pseudo_header_v4(src.0, dst.0, tcp_wire::PROTOCOL, total as u16);
            let mut acc = Accumulator::with_seed(seed);
            let segment = buf.data();
            acc.add_sum(checksum::header_sum(&segment[..header_len]), header_len);
            match payload_sum {
                Some(s) => acc.add_sum(s.sum(), s.len()),
                None => acc.add_with(kernel, &segment[header_len..]),
            }
            match frag_sums {
                Some(f) if f.is_empty() => {}
                Some(f) => acc.add_sum(f.sum(), f.len()),
                // Loaned bytes are read to be summed, never copied (zero-copy without
                // checksum offload still touches the data once, paper 004 §4).
                None => {
                    for f in buf.frags() {
                        acc.add_with(kernel, f);
                    }
                }
            }
            let field = checksum::finish(acc.sum());
            tcp_wire::Packet::new_unchecked(buf.data_mut()).set_checksum(field);
        }
        self.ledger.counters().inc(Counter::TcpSegmentsOut);
        if out.retransmission {
            self.ledger
                .counters()
                .inc(Counter::TcpRetransmittedSegments);
        }
        let buf = if self.tuning.tcp_header_template {
            match self.tcp_send_templated(s, index, buf, out.ect) {
                Ok(()) => return Ok(()),
                Err(buf) => buf,
            }
        } else {
            buf
        };
        let send = SendAs {
            src: Some(src),
            dont_frag: true,
            fields,
            ect: out.ect,
        };
        let extras = self
            .tcp
            .conn_mut(index)
            .map_or(IpExtras::NONE, |c| c.ip_extras());
        self.ip_output_with(s, dst, IpProtocol::Tcp, buf, send, &extras)
            .map_err(|_| ())
    }

    /// Sends a RST from `local` to `remote` (RFC 9293 §3.10.7.1) by `path`: a
    /// connection's (its source route, MUST-53: every segment of a connection takes it;
    /// its TTL and DSCP, SHLD-22), or, for a segment no connection took, the route it
    /// came by reversed (as Linux answers) and the stack's TTL.
    pub(crate) fn tcp_send_rst(
        &mut self,
        s: impl Sampling,
        local: (Ipv4Address, u16),
        remote: (Ipv4Address, u16),
        rst: RstReply,
        path: &SendPath,
    ) {
        let repr = TcpRepr {
            src_port: local.1,
            dst_port: remote.1,
            control: Control::Rst,
            seq_number: rst.seq,
            ack_number: rst.ack,
            ..TcpRepr::default()
        };
        if self.tcp_send_bare(s, local, remote, &repr, path) {
            self.ledger.counters().inc(Counter::TcpResetsOut);
        }
    }

    /// Sends a segment outside a connection's output (a RST, a SYN cookie's SYN-ACK),
    /// with its checksum, no data, by `path`; whether it went down to IP.
    fn tcp_send_bare(
        &mut self,
        s: impl Sampling,
        local: (Ipv4Address, u16),
        remote: (Ipv4Address, u16),
        repr: &TcpRepr,
        path: &SendPath,
    ) -> bool {
        if remote.0.is_broadcast() || remote.0.is_unspecified() {
            return false;
        }
        let Ok(mut buf) = self.alloc(s, Layer::Tcp, Side::Send, repr.buffer_len()) else {
            return false;
        };
        let emitted = {
            let _p = self.ledger.probe(s, Layer::Tcp, Side::Send, Op::TcpProto);
            let mut p = tcp_wire::Packet::new_unchecked(buf.data_mut());
            repr.emit(&mut p, local.0, remote.0, Checksum::Check)
        };
        if emitted.is_err() {
            self.free(s, Layer::Tcp, Side::Send, buf);
            return false;
        }
        self.ledger.counters().inc(Counter::TcpSegmentsOut);
        let send = SendAs {
            src: Some(local.0),
            dont_frag: true,
            fields: path.fields,
            ..SendAs::default()
        };
        let _ = self.ip_output_with(s, remote.0, IpProtocol::Tcp, buf, send, &path.extras);
        true
    }

    /// An ICMP error about a TCP segment we sent: `quoted` is the IP header it quotes
    /// and `transport` the start of the segment (at least the ports and sequence number,
    /// RFC 792). Fragmentation-needed lowers the connection's MSS (RFC 1191); the other
    /// errors go to the connection as RFC 9293 §3.9.2.2 has them
    /// ([`Connection::icmp_error`]): a soft error is kept for the application, a hard
    /// one (port or protocol unreachable) ends a connection still in SYN-SENT. An error
    /// that quotes no data in flight (RFC 5927 §4.1), or no connection, is ignored and
    /// counted.
    pub(crate) fn tcp_icmp_error(
        &mut self,
        s: impl Sampling,
        quoted: &Ipv4Repr,
        transport: &[u8],
        what: IcmpError,
    ) {
        let taken = transport.len() >= 8 && self.tcp_icmp_taken(s, quoted, transport, what);
        if !taken {
            self.ledger.counters().inc(Counter::TcpIcmpIgnored);
        }
    }

    /// [`tcp_icmp_error`](Self::tcp_icmp_error) for a quoted segment of at least 8
    /// bytes; whether a connection took the error.
    fn tcp_icmp_taken(
        &mut self,
        s: impl Sampling,
        quoted: &Ipv4Repr,
        transport: &[u8],
        what: IcmpError,
    ) -> bool {
        let port = |i: usize| u16::from_be_bytes([transport[i], transport[i + 1]]);
        let (sport, dport) = (port(0), port(2));
        let seq = tcp_wire::SeqNumber(u32::from_be_bytes([
            transport[4],
            transport[5],
            transport[6],
            transport[7],
        ]));
        let found = {
            let _p = self.ledger.probe(s, Layer::Tcp, Side::Receive, Op::Demux);
            self.tcp_pcbs
                .lookup(quoted.dst, dport, quoted.src, sport)
                .map(|(_, &mut index)| index)
        };
        let Some(index) = found else {
            return false;
        };
        let (error, hard) = match what {
            IcmpError::FragNeeded { next_hop_mtu } => {
                return self.tcp_path_mtu(s, index, quoted, seq, next_hop_mtu);
            }
            IcmpError::Network => (ConnError::NetUnreachable, false),
            IcmpError::Host => (ConnError::HostUnreachable, false),
            IcmpError::Refused => (ConnError::Refused, true),
            IcmpError::ParamProblem => (ConnError::ProtocolError, false),
        };
        let taken = self
            .tcp
            .conn_mut(index)
            .is_some_and(|c| c.icmp_error(seq, error, hard));
        if taken {
            self.ledger.counters().inc(Counter::TcpIcmpErrors);
            // A connection a hard error ended goes away as a reset one does.
            self.tcp_reap(index);
        }
        taken
    }

    /// Fragmentation-needed about the segment at `seq` of connection `index`, which the
    /// router says went over a next hop of `next_hop_mtu` (RFC 1191); whether the
    /// connection's MSS fell.
    fn tcp_path_mtu(
        &mut self,
        s: impl Sampling,
        index: usize,
        quoted: &Ipv4Repr,
        seq: tcp_wire::SeqNumber,
        next_hop_mtu: u16,
    ) -> bool {
        let mtu = match usize::from(next_hop_mtu) {
            // An RFC 1191 §5 router says it; an older one does not, so guess the next
            // plateau below the datagram that did not fit.
            0 => MTU_PLATEAUS
                .into_iter()
                .find(|&p| p < quoted.header_len() + quoted.payload_len)
                .unwrap_or(68),
            m => m,
        };
        let lowered = match self.tcp.conn_mut(index) {
            Some(c) if c.quotes_data_in_flight(seq) && mtu >= MIN_PATH_MTU => {
                c.path_mtu_reduced(mtu)
            }
            _ => false,
        };
        if lowered {
            self.ledger.counters().inc(Counter::TcpPathMtuReductions);
            self.tcp_output(s, index);
        }
        lowered
    }

    /// Output for the connections that found their device full.
    pub(crate) fn tcp_unblock(&mut self, s: impl Sampling) {
        let blocked = std::mem::take(&mut self.tcp.blocked);
        for i in blocked {
            self.tcp_output(s, i);
        }
    }

    /// Runs the timers of the connections that have one due, then their output; returns
    /// the earliest timer of any connection afterwards (what `TcpSockets::next_deadline`
    /// then returns). The connections come from the timer queue when the table has one,
    /// so that a poll with none due visits none.
    pub(crate) fn tcp_timers(&mut self, s: impl Sampling, now: Instant) -> Option<Instant> {
        // Usually nothing is due: then the list is left where it is, not moved out and
        // back (a poll with no TCP connection at all pays only this).
        let earliest = self.tcp.take_due(now);
        if self.tcp.due.is_empty() {
            return earliest;
        }
        let mut due = std::mem::take(&mut self.tcp.due);
        let kernel = self.tuning.checksum;
        for &i in &due {
            // Looked up again (and so noted for the queue once more): a timer's output may
            // free its own slot, never another's.
            let Some(c) = self.tcp.conn_mut(i) else {
                continue;
            };
            // Segments left for a read that did not come in time: verified here, so that
            // the ACK they owe goes now (`Connection::note_deferred`).
            if c.rx.unverified() > 0 {
                let _p = self
                    .ledger
                    .probe(s, Layer::Tcp, Side::Receive, Op::Checksum);
                c.verify_unread(kernel, &self.ledger, now);
            }
            let rst = {
                let _p = self.ledger.probe(s, Layer::Tcp, Side::Send, Op::Timer);
                c.on_timers(now, &self.ledger)
            };
            let (local, remote, advice) = (c.local, c.remote, c.take_negative_advice());
            let path = c.send_path();
            if advice {
                self.ip_negative_advice(remote.0);
            }
            if let Some(rst) = rst {
                self.tcp_send_rst(s, local, remote, rst, &path);
            }
            self.tcp_output(s, i);
            self.tcp_reap(i);
        }
        due.clear();
        self.tcp.due = due;
        self.tcp.next_deadline()
    }
}

/// A segment as TCP input has it before the connection sees it.
struct Arrival<'a, 'b> {
    ip: &'a Ipv4Repr,
    seg: &'a TcpRepr<'b>,
    /// The TCP header's bytes.
    header: &'a [u8],
    frags: Option<&'a mut Vec<ExtBuf>>,
    frag_len: usize,
    rx: RxChecksum,
}

/// Verify on read (`Tuning::tcp_verify_on_read`) at input, for a segment of `c` with data
/// in fragments or a connection holding unverified segments: header prediction's pure
/// data segment, its data by reference, is kept unverified for the application's read
/// (`None`: the caller frees the frame). Any other segment has the unverified segments
/// verified first, so that input finds the connection as if they had been taken at
/// arrival (`Some`: whether all checked). Out of line, as [`stage_by_reference`].
#[cold]
#[inline(never)]
fn verify_on_read_input(
    ledger: &crate::probe::Ledger,
    s: impl Sampling,
    tuning: &crate::tuning::Tuning,
    c: &mut Connection,
    a: Arrival<'_, '_>,
    now: Instant,
) -> Option<bool> {
    let defer = a.frag_len > 0
        && a.seg.payload.is_empty()
        && tuning.tcp_verify_on_read
        && tuning.fused_copy_checksum
        && tuning.header_prediction
        && tuning.tcp_send_by_reference
        && a.rx == RxChecksum::None
        && a.ip.ecn != ECN_CE
        && a.ip.options.is_empty()
        && !c.checksum_elided()
        && c.defers_verification(a.seg, a.frag_len);
    match a.frags {
        Some(frags) if defer => {
            {
                let _p = ledger.probe(s, Layer::Socket, Side::Receive, Op::SocketBuffer);
                let (ip, len) = (a.ip, a.header.len() + a.frag_len);
                let seed =
                    checksum::pseudo_header_v4(ip.src.0, ip.dst.0, tcp_wire::PROTOCOL, len as u16);
                let mut header = Accumulator::with_seed(seed);
                header.add_sum(checksum::header_sum(a.header), a.header.len());
                let tsval = a.seg.timestamp.map(|ts| ts.tsval);
                c.rx.defer(frags, a.frag_len, header, tsval);
                c.note_deferred(now);
            }
            ledger.set_message_size(s, a.frag_len);
            let counters = ledger.counters();
            counters.inc(Counter::TcpSegmentsIn);
            counters.inc(Counter::TcpSegmentsInByReference);
            counters.inc(Counter::TcpSegmentsDeferred);
            None
        }
        _ if c.rx.unverified() > 0 => Some(c.verify_unread(tuning.checksum, ledger, now)),
        _ => Some(true),
    }
}

/// Keeps a segment's fragments (data its sender passed by reference) in `c`'s receive
/// buffer, staged for the connection to take, once the segment checks: with `check`
/// (the pseudo-header's sum and the kernel), `header` and the fragments are summed, read
/// and never copied. Returns whether it checked. Out of line: the bulk path's alone, kept
/// out of the request/response path's instruction cache.
#[cold]
#[inline(never)]
fn stage_by_reference(
    ledger: &crate::probe::Ledger,
    s: impl Sampling,
    c: &mut Connection,
    header: &[u8],
    frags: &mut Vec<ExtBuf>,
    check: Option<(u16, checksum::Kernel)>,
) -> bool {
    if let Some((seed, kernel)) = check {
        let _p = ledger.probe(s, Layer::Tcp, Side::Receive, Op::Checksum);
        let mut acc = Accumulator::with_seed(seed);
        acc.add_sum(checksum::header_sum(header), header.len());
        for f in frags.iter() {
            acc.add_with(kernel, f);
        }
        if !checksum::verifies(acc.sum()) {
            return false;
        }
    }
    let _p = ledger.probe(s, Layer::Socket, Side::Receive, Op::SocketBuffer);
    // Moved, not cloned: the frame, freed next, would only let go of them.
    for f in frags.drain(..) {
        c.rx.stage(f);
    }
    ledger.counters().inc(Counter::TcpSegmentsInByReference);
    true
}

/// Attaches the send buffer's queued bytes `range` (offset, length: loaned memory, shared
/// blocks) to `buf` as fragments, uncopied. Returns whether any was loaned, and, when
/// every fragment came with its sum (a shared block's slice does when the block kept its
/// pieces' sums and `sum` asks; its ends are summed here, charged to the copy as the
/// fused sums are), their sum. Out of line, as [`stage_by_reference`].
#[cold]
#[inline(never)]
fn attach_queued(
    tx: &send_buffer::SendBuffer,
    buf: &mut PacketBuf,
    (offset, len): (usize, usize),
    sum: Option<checksum::Kernel>,
) -> (bool, Option<Accumulator>) {
    let mut loaned = false;
    let mut sums = Some(Accumulator::new());
    // The ring's bytes in the range are the caller's to copy.
    let ring = tx.ring_len();
    let (offset, len) = (
        offset.saturating_sub(ring),
        len.saturating_sub(ring.saturating_sub(offset)),
    );
    tx.for_each_queued(offset, len, sum, |e, own, s| {
        match (own, s, sums.as_mut()) {
            (false, ..) => {
                loaned = true;
                sums = None;
            }
            (true, Some(s), Some(acc)) => acc.add_sum(s, e.len()),
            (true, ..) => sums = None,
        }
        buf.push_frag(e)
    });
    (loaned, sums)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checksum::Kernel;
    use crate::tcp::send_buffer::SendBuffer;

    /// A segment that starts in the ring's last bytes and goes on into a shared block:
    /// the caller copies the ring's part, `attach_queued` attaches the block's part (no
    /// more) by reference, with the sum the block kept for it.
    #[test]
    fn a_range_starting_in_the_ring_attaches_only_the_queued_bytes() {
        let mut tx = SendBuffer::new(1 << 20);
        assert_eq!(tx.push(&[9u8; 100]), 100);
        let data: Vec<u8> = (0..40_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        assert_eq!(
            tx.push_shared(&data, Some(Kernel::best()), None),
            data.len()
        );
        for (offset, len) in [(60, 1000), (100, 1448), (0, 100), (99, 20_001)] {
            let mut buf = PacketBuf::from_slice(&[], 0).unwrap();
            let (loaned, sums) = attach_queued(&tx, &mut buf, (offset, len), Some(Kernel::best()));
            let queued = &data[offset.saturating_sub(100)..offset + len - 100];
            let attached: Vec<u8> = buf.frags().iter().flat_map(|f| f.to_vec()).collect();
            assert!(!loaned);
            assert_eq!(attached, queued, "{offset}+{len}");
            assert_eq!(
                sums.map(|s| s.sum()),
                Some(checksum::sum(queued)),
                "{offset}+{len}"
            );
        }
    }
}
