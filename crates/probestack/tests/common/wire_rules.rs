//! Rules of TCP and IP checked on the wire: a [`Watch`] over an end's device sees each
//! segment the end sends and receives and records the rules its segments break
//! (`tcp_linux.rs` with Linux as the peer, `tcp_conversations.rs` with the stack as both
//! ends, `tcp_smoltcp.rs`, `tcp.rs`); an [`IpWatch`] does the same for the fragments of
//! the datagrams it sends (`udp_linux.rs`).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use probestack::buf::PacketBuf;
use probestack::driver::TxMeta;
use probestack::wire::tcp::{Control, Packet as TcpPacket, SeqNumber, TcpRepr};
use probestack::wire::{Checksum, Ipv4Address};

use super::tamper::Tamper;

/// A TCP segment on the wire: its header, how many data bytes it carries (by the IP
/// header's total length: the frame's first part holds the headers, the data may follow
/// in fragments), and how long its TCP header is with options.
struct Segment<'a> {
    t: TcpRepr<'a>,
    data: usize,
    header_len: usize,
    /// The IP header's ECN field (RFC 3168 §5: 0 not ECT, 1 and 2 ECT, 3 CE).
    ecn: u8,
}

/// The TCP segment in an Ethernet frame's IPv4 datagram, if it holds one.
fn segment(frame: &[u8]) -> Option<Segment<'_>> {
    if frame.len() < 34 || frame[12..14] != [0x08, 0x00] || frame[23] != 6 {
        return None;
    }
    let ihl = usize::from(frame[14] & 0x0f) * 4;
    let (src, dst) = (
        Ipv4Address::from_bytes(&frame[26..30]),
        Ipv4Address::from_bytes(&frame[30..34]),
    );
    let packet = TcpPacket::new_checked(frame.get(14 + ihl..)?).ok()?;
    let header_len = packet.header_len();
    let t = TcpRepr::parse(&packet, src, dst, Checksum::Skip).ok()?;
    let total = usize::from(u16::from_be_bytes([frame[16], frame[17]]));
    let data = total.checked_sub(ihl + header_len)?;
    Some(Segment {
        t,
        data,
        header_len,
        ecn: frame[15] & 3,
    })
}

/// What [`Watch`] knows of one connection (by its own end's port and the peer's).
#[derive(Default)]
struct Watched {
    /// The sequence number of each end's SYN, once seen (its own, the peer's).
    isn: [Option<SeqNumber>; 2],
    /// The window scale each end's SYN offered.
    offered: [Option<u8>; 2],
    /// Whether each end's SYN carried timestamps, and SACK-permitted.
    timestamps: [bool; 2],
    sack_permitted: [bool; 2],
    /// The largest segment the peer takes: its SYN's MSS option, or 536 without one
    /// (RFC 9293 §3.7.1).
    peer_mss: Option<usize>,
    /// The right edge of the peer's window (ACK + window, scaled) the end has been told,
    /// the furthest so far.
    peer_edge: Option<SeqNumber>,
    /// The right edge of the end's own window it has advertised, the furthest so far.
    own_edge: Option<SeqNumber>,
    /// The end of what the peer has sent the end (its FIN included).
    peer_sent: Option<SeqNumber>,
    /// The furthest the end has acknowledged.
    own_ack: Option<SeqNumber>,
    /// Whether each end's SYN asked for ECN as its place in the handshake says (the
    /// initiator's ECE and CWR, the responder's ECE alone; RFC 3168 §6.1.1).
    ecn: [bool; 2],
    /// The end of the data the end has sent, the furthest so far.
    own_data_end: Option<SeqNumber>,
    /// Where the end's FIN is (its sequence number), once sent; whether the peer has
    /// acknowledged it.
    own_fin: Option<SeqNumber>,
    own_fin_acked: bool,
    /// Where the end of the peer's FIN is, once received.
    peer_fin: Option<SeqNumber>,
    /// The end's last TSval, and every TSval the peer has sent it.
    own_tsval: Option<u32>,
    peer_tsvals: HashSet<u32>,
}

// The rules, each kept by a segment the end sends: what it breaks, with `{end}` and
// `{peer}` for the names.
impl Watched {
    /// Whether the connection has closed on the end's side: its FIN acknowledged, the
    /// peer's acknowledged by it.
    fn closed(&self) -> bool {
        let acked_peers = match (self.peer_fin, self.own_ack) {
            (Some(fin), Some(ack)) => ack.ge(fin),
            _ => false,
        };
        self.own_fin_acked && acked_peers
    }

    /// The shift that applies to `side`'s windows outside SYNs (RFC 7323 §2.2: both
    /// SYNs carried the option).
    fn shift(&self, side: usize) -> u8 {
        match self.offered {
            [Some(own), Some(peer)] => [own, peer][side].min(14),
            _ => 0,
        }
    }

    /// MSS, timestamps and SACK.
    fn options_kept(&mut self, seg: &Segment, gso_size: usize, far: bool) -> Vec<String> {
        let (t, data) = (&seg.t, seg.data);
        let mut broken = Vec::new();
        // RFC 9293 §3.7.1: data and TCP options together no more than the peer's MSS;
        // and (SHLD-5) a SYN carries the MSS option where the MSS is not the default
        // 536; the stack sends it always (MAY-3).
        let piece = if gso_size > 0 { gso_size } else { data };
        let options = seg.header_len - 20;
        if let (Some(mss), true) = (self.peer_mss, piece > 0 && !far) {
            if piece + options > mss {
                broken.push(format!(
                    "{{end}} sent a segment of {piece} bytes and {options} of options, over {{peer}}'s MSS of {mss}"
                ));
            }
        }
        if t.control == Control::Syn && t.max_seg_size.is_none() {
            broken.push("{end} sent a SYN without an MSS option".into());
        }
        // MUST-65: the MSS option only in a SYN (SYN-ACKs included), never after.
        if t.control != Control::Syn && t.max_seg_size.is_some() {
            broken.push("{end} sent an MSS option on a segment that is not a SYN".into());
        }
        // RFC 7323 §3.2: once both SYNs carried timestamps, every segment but a RST
        // does; §5.4 and §4.3: TSval never goes back, and TSecr echoes a TSval the peer
        // sent (TS.Recent), 0 in the first SYN.
        if self.timestamps == [true, true] && t.control != Control::Syn && t.timestamp.is_none() {
            broken.push("{end} sent a segment without timestamps".into());
        }
        if let Some(ts) = t.timestamp {
            if self
                .own_tsval
                .is_some_and(|before| (ts.tsval.wrapping_sub(before) as i32) < 0)
            {
                broken.push(format!("{{end}}'s TSval went back to {}", ts.tsval));
            }
            self.own_tsval = Some(ts.tsval);
            let echo = t.ack_number.is_some() && self.timestamps[1];
            if echo && !self.peer_tsvals.contains(&ts.tsecr) {
                broken.push(format!(
                    "{{end}} echoed TSecr {}, which {{peer}} never sent",
                    ts.tsecr
                ));
            }
        }
        // RFC 2018 §2: SACK blocks only to a peer whose SYN permitted them; each block
        // (§4) data the peer sent, above the ACK, but a first one below it or inside the
        // second, which reports a duplicate (RFC 2883 §4).
        if t.sack_ranges[0].is_some() && !self.sack_permitted[1] {
            broken.push("{end} sent SACK blocks unpermitted".into());
        }
        let blocks: Vec<(SeqNumber, SeqNumber)> = t
            .sack_ranges
            .iter()
            .flatten()
            .map(|&(l, r)| (SeqNumber(l), SeqNumber(r)))
            .collect();
        for (i, &(l, r)) in blocks.iter().enumerate() {
            let ack = t.ack_number.unwrap_or(l);
            let inside_next = blocks.get(1).is_some_and(|&(l2, r2)| l2.le(l) && r.le(r2));
            let duplicate = i == 0 && (l.lt(ack) || inside_next);
            let received = self.peer_sent.is_some_and(|sent| r.le(sent));
            if !l.lt(r) || !received || !(duplicate || l.gt(ack)) {
                broken.push(format!(
                    "{{end}} sent a SACK block [{}, {}) with ACK {} of data {{peer}} sent up to {:?}",
                    l.0,
                    r.0,
                    ack.0,
                    self.peer_sent.map(|s| s.0)
                ));
            }
        }
        broken
    }

    /// RFC 3168 §6.1: ECT only on data segments sent the first time, and only with ECN
    /// agreed in both SYNs; ECE and CWR outside the SYNs only with it agreed.
    fn marks_kept(&mut self, seg: &Segment) -> Vec<String> {
        let (t, data) = (&seg.t, seg.data);
        let mut broken = Vec::new();
        let agreed = self.ecn == [true, true];
        let end = t.seq_number + data;
        let first_time = self.own_data_end.is_none_or(|e| end.gt(e));
        if seg.ecn != 0 {
            let why = if t.control == Control::Syn {
                Some("a SYN")
            } else if data == 0 {
                Some("a segment without data")
            } else if !agreed {
                Some("a connection without ECN agreed")
            } else if !first_time {
                Some("data sent again")
            } else {
                None
            };
            if let Some(why) = why {
                broken.push(format!("{{end}} marked {why} ECN-capable"));
            }
        }
        if data > 0 && first_time {
            self.own_data_end = Some(end);
        }
        if (t.ece || t.cwr) && t.control != Control::Syn && !agreed {
            broken.push("{end} set ECE or CWR without ECN agreed".into());
        }
        broken
    }

    /// The windows, the ACK and the FIN.
    fn sequence_kept(&mut self, seg: &Segment, far: bool) -> Vec<String> {
        let (t, data) = (&seg.t, seg.data);
        let mut broken = Vec::new();
        let end = t.seq_number + data;
        if let (Some(edge), true) = (self.peer_edge, data > 0) {
            if end.gt(edge + 1) {
                broken.push(format!(
                    "{{end}} sent {data} bytes at {} past {{peer}}'s window, whose right edge is {}",
                    t.seq_number.0, edge.0
                ));
            }
        }
        // Nothing after the FIN (RFC 9293 §3.6: it is the last of the stream).
        if t.control == Control::Fin {
            self.own_fin = Some(end);
        }
        if let (Some(fin), true) = (self.own_fin, data > 0) {
            if end.gt(fin) {
                broken.push(format!("{{end}} sent data past its FIN at {}", fin.0));
            }
        }
        let Some(ack) = t.ack_number else {
            return broken;
        };
        if self.peer_sent.is_none_or(|sent| ack.gt(sent)) {
            broken.push(format!(
                "{{end}} acknowledged {} of {{peer}}'s data, which has sent up to {:?}",
                ack.0,
                self.peer_sent.map(|s| s.0)
            ));
        }
        // RCV.NXT, which the ACK field carries, never goes back. (Whether the sequence
        // space goes out without gaps cannot be told here: a segment ARP or a full
        // device queue drops before the device is sent as far as TCP knows.)
        if self.own_ack.is_some_and(|before| ack.lt(before)) {
            broken.push(format!("{{end}}'s ACK went back to {}", ack.0));
        } else {
            self.own_ack = Some(ack);
        }
        if t.control != Control::Syn && !far {
            let edge = ack + (usize::from(t.window_len) << self.shift(0));
            // A scaled field counts units of 2^shift bytes from RCV.NXT, which can
            // rarely say the edge kept exactly: the stack rounds up where its buffer
            // holds the bytes that adds, else down, and then the edge steps back by
            // less than a unit (Linux rounds up and takes the bytes over its buffer; the
            // stack's ring has no room for them).
            let slack = (1usize << self.shift(0)) - 1;
            match self.own_edge {
                Some(before) if (edge + slack).lt(before) => broken.push(format!(
                    "{{end}} moved its window's right edge left, {} to {}",
                    before.0, edge.0
                )),
                Some(before) if edge.le(before) => {}
                _ => self.own_edge = Some(edge),
            }
        }
        broken
    }
}

/// Rules an end's TCP segments must keep whatever the peer and the link, checked on the
/// wire as a tamper over the end's device (outermost: it sees what the end sends before
/// any fault, and what it receives after them). The end sends:
///
/// - no data past the right edge of the window the peer gave it (RFC 9293 §3.8.6.2.1;
///   one byte past it for a zero-window probe);
/// - no right edge of its own window left of one it advertised (§3.8.6.2.2), but by
///   less than a window-scale unit (the field's precision; see `sequence_kept`);
/// - no acknowledgment of data the peer has not sent (§3.10.7.4), and no ACK field that
///   goes back;
/// - no segment whose data and options exceed the peer's MSS (§3.7.1), an MSS option
///   on every SYN, and none on any other segment (MUST-65);
/// - timestamps on every segment but a RST once both SYNs carried them (RFC 7323 §3.2),
///   a TSval that never goes back and a TSecr that echoes a TSval the peer sent (§5.4,
///   §4.3);
/// - SACK blocks only to a peer that permitted them (RFC 2018 §2), and only of data the
///   peer sent, above the ACK or reporting a duplicate (§4, RFC 2883 §4);
/// - ECN-capable marks only on data sent the first time, with ECN agreed, and ECE or
///   CWR only then (RFC 3168 §6.1);
/// - no data past its FIN.
///
/// A model of the byte streams cannot see these broken: TCP heals them, or the peer
/// does not mind (a peer drops what overran its window, and the end resends it). What
/// the watch finds broken goes to `broken` (at most eight findings).
pub struct Watch {
    /// How the findings name the end and its peer.
    names: [&'static str; 2],
    /// Watching the far end ([`Mirrored`]).
    far: bool,
    conns: HashMap<(u16, u16), Watched>,
    broken: Arc<Mutex<Vec<String>>>,
}

impl Watch {
    pub fn new(names: [&'static str; 2], broken: Arc<Mutex<Vec<String>>>) -> Watch {
        Watch {
            names,
            far: false,
            conns: HashMap::new(),
            broken,
        }
    }

    fn broke(&self, what: String) {
        let mut broken = self.broken.lock().unwrap();
        if broken.len() < 8 {
            broken.push(what);
        }
    }

    /// The connection a segment `side` (0 the end, 1 its peer) sent belongs to, with
    /// what a SYN offers noted (a SYN without ACK from a side whose SYN was seen with
    /// another sequence number begins it anew; one with the same is a copy, late or
    /// resent); `None` for a RST, a connection the watch did not see begin, or a
    /// segment from a side that has not sent its SYN of the incarnation yet. A SYN-ACK
    /// the end sends after the connection closed on its side (both FINs acknowledged), or
    /// with another initial sequence number than its SYN of the connection had (the
    /// connection reset meanwhile), begins it anew too: a late copy of the peer's SYN
    /// found a listener, which cannot tell it from a new one (RFC 9293 §3.5, Figure 9's
    /// old duplicate SYN), and the new incarnation acknowledges the SYN again.
    fn connection(&mut self, t: &TcpRepr, side: usize) -> Option<&mut Watched> {
        let key = if side == 0 {
            (t.src_port, t.dst_port)
        } else {
            (t.dst_port, t.src_port)
        };
        let syn = t.control == Control::Syn;
        let isn = Some(t.seq_number);
        let new = |c: &Watched| c.isn[side].is_some_and(|seen| seen != t.seq_number);
        if syn && t.ack_number.is_none() && self.conns.get(&key).is_none_or(new) {
            self.conns.insert(key, Watched::default());
        }
        let reopened = |c: &Watched| {
            let other_isn = c.isn[0].is_some_and(|seen| seen != t.seq_number);
            side == 0 && syn && t.ack_number.is_some() && (c.closed() || other_isn)
        };
        if self.conns.get(&key).is_some_and(reopened) {
            let old = self.conns.remove(&key)?;
            let fresh = Watched {
                isn: [None, old.isn[1]],
                offered: [None, old.offered[1]],
                timestamps: [false, old.timestamps[1]],
                sack_permitted: [false, old.sack_permitted[1]],
                peer_mss: old.peer_mss,
                ecn: [false, old.ecn[1]],
                peer_sent: t.ack_number,
                peer_tsvals: old.peer_tsvals,
                ..Watched::default()
            };
            self.conns.insert(key, fresh);
        }
        let c = self.conns.get_mut(&key)?;
        // A side's segments before its SYN of this incarnation are the last one's: the
        // answer of a TIME-WAIT, or of a survivor that missed the RST, to the new SYN.
        if !syn && c.isn[side].is_none() {
            return None;
        }
        if syn {
            c.isn[side] = isn;
            c.offered[side] = t.window_scale;
            c.timestamps[side] = t.timestamp.is_some();
            c.sack_permitted[side] = t.sack_permitted;
            c.ecn[side] = t.ece && t.cwr == t.ack_number.is_none();
            if side == 1 {
                c.peer_mss = Some(t.max_seg_size.map_or(536, usize::from));
            }
        }
        (t.control != Control::Rst).then_some(c)
    }

    /// A segment the end sends (a super-frame the device cuts into segments of
    /// `gso_size` bytes, when that is not 0).
    fn sent(&mut self, seg: &Segment, gso_size: usize) {
        let (names, far) = (self.names, self.far);
        let Some(c) = self.connection(&seg.t, 0) else {
            return;
        };
        let mut broken = c.options_kept(seg, gso_size, far);
        broken.extend(c.marks_kept(seg));
        broken.extend(c.sequence_kept(seg, far));
        for b in broken {
            let b = b.replace("{end}", names[0]).replace("{peer}", names[1]);
            self.broke(format!(
                "port {} to {}: {b}",
                seg.t.src_port, seg.t.dst_port
            ));
        }
    }

    /// A segment the end receives.
    fn received(&mut self, seg: &Segment) {
        let t = &seg.t;
        let Some(c) = self.connection(t, 1) else {
            return;
        };
        if let Some(ts) = t.timestamp {
            c.peer_tsvals.insert(ts.tsval);
        }
        let end = t.seq_number + (seg.data + t.control.len());
        if c.peer_sent.is_none_or(|sent| end.gt(sent)) {
            c.peer_sent = Some(end);
        }
        if t.control == Control::Fin {
            c.peer_fin = Some(end);
        }
        if let Some(ack) = t.ack_number {
            c.own_fin_acked |= c.own_fin.is_some_and(|fin| ack.gt(fin));
            let shift = if t.control == Control::Syn {
                0
            } else {
                c.shift(1)
            };
            let edge = ack + (usize::from(t.window_len) << shift);
            if c.peer_edge.is_none_or(|before| edge.gt(before)) {
                c.peer_edge = Some(edge);
            }
        }
    }
}

/// A [`Watch`] over the far end: placed innermost over a real device (a TAP), it holds
/// the peer's segments, as the device hands them in, to the same rules, and takes the
/// near end's as the peer receives them. Linux's TCP keeps them, so where it did not,
/// the rule would be wrong, not Linux: this checks the watch. Two rules are left out:
/// the MSS (frames from a device with receive offloads may be super-frames of several
/// segments) and the window's edge, which Linux moves left on purpose when it runs out
/// of receive memory (`tcp_select_window` offers a zero window under `ICSK_ACK_NOMEM`).
/// Linux's edge stepped back by 12-45 KB in two of the first 60 or so conversations,
/// both on a link with faults; that is the likeliest cause, not one this test can see.
pub struct Mirrored(Watch);

impl Mirrored {
    /// `names`: the far end's, then the near end's.
    pub fn new(names: [&'static str; 2], broken: Arc<Mutex<Vec<String>>>) -> Mirrored {
        Mirrored(Watch {
            far: true,
            ..Watch::new(names, broken)
        })
    }
}

impl Tamper for Mirrored {
    fn send(&mut self, frame: PacketBuf, meta: TxMeta) -> Vec<(PacketBuf, TxMeta)> {
        if let Some(seg) = segment(frame.data()) {
            self.0.received(&seg);
        }
        vec![(frame, meta)]
    }
    fn deliver(&mut self, frame: &[u8]) -> bool {
        if let Some(seg) = segment(frame) {
            self.0.sent(&seg, 0);
        }
        true
    }
}

impl Tamper for Watch {
    fn send(&mut self, frame: PacketBuf, meta: TxMeta) -> Vec<(PacketBuf, TxMeta)> {
        if let Some(seg) = segment(frame.data()) {
            self.sent(&seg, usize::from(meta.gso_size));
        }
        vec![(frame, meta)]
    }
    fn deliver(&mut self, frame: &[u8]) -> bool {
        if let Some(seg) = segment(frame) {
            self.received(&seg);
        }
        true
    }
}

/// Rules of the IPv4 datagrams an end sends, checked as a tamper over its device: each
/// frame's total length is the bytes it carries (RFC 791 §3.1); a fragment but the last
/// carries More Fragments and a multiple of 8 bytes, and none reaches past 65,535 bytes
/// (§3.2); and a fragmented datagram's identification is not one an earlier fragmented
/// datagram of the end used (RFC 6864 §4.1: unique for as long as its fragments may
/// meet another's; a case sends far fewer than 65,536), since a reused one can splice
/// two datagrams' fragments at the receiver, which then fails the checksum and counts a
/// drop, or worse. What it finds broken goes to `broken` (at most eight findings).
pub struct IpWatch {
    /// The identifications of the fragmented datagrams sent so far.
    ids: HashSet<u16>,
    broken: Arc<Mutex<Vec<String>>>,
}

impl IpWatch {
    pub fn new(broken: Arc<Mutex<Vec<String>>>) -> IpWatch {
        IpWatch {
            ids: HashSet::new(),
            broken,
        }
    }

    fn check(&mut self, header: &[u8], frame_len: usize) -> Option<String> {
        if header.len() < 34 || header[12..14] != [0x08, 0x00] {
            return None;
        }
        let ip = &header[14..];
        let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
        let id = u16::from_be_bytes([ip[4], ip[5]]);
        let flags_offset = u16::from_be_bytes([ip[6], ip[7]]);
        let more = flags_offset & 0x2000 != 0;
        let offset = usize::from(flags_offset & 0x1fff) * 8;
        let payload = total.checked_sub(usize::from(ip[0] & 0x0f) * 4)?;
        if total != frame_len - 14 {
            return Some(format!(
                "a frame of {frame_len} bytes holds a datagram of {total}"
            ));
        }
        if offset + payload > 65_535 {
            return Some(format!("fragment {id} at {offset} reaches past 65,535"));
        }
        if more && payload % 8 != 0 {
            return Some(format!("fragment {id} at {offset} carries {payload} bytes"));
        }
        if more && offset == 0 && !self.ids.insert(id) {
            return Some(format!(
                "identification {id} used again by a fragmented datagram"
            ));
        }
        None
    }
}

impl Tamper for IpWatch {
    fn send(&mut self, frame: PacketBuf, meta: TxMeta) -> Vec<(PacketBuf, TxMeta)> {
        if let Some(what) = self.check(frame.data(), frame.total_len()) {
            let mut broken = self.broken.lock().unwrap();
            if broken.len() < 8 {
                broken.push(what);
            }
        }
        vec![(frame, meta)]
    }
}
