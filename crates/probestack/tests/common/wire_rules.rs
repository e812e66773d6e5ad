//! Rules of TCP checked on the wire: a [`Watch`] over an end's device sees each segment
//! the end sends and receives and records the rules its segments break (`tcp_linux.rs`
//! with Linux as the peer, `tcp_conversations.rs` with the stack as both ends).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use probestack::buf::PacketBuf;
use probestack::driver::TxMeta;
use probestack::wire::tcp::{Control, Packet as TcpPacket, SeqNumber, TcpRepr};
use probestack::wire::{Checksum, Ipv4Address};

use super::tamper::Tamper;

/// The TCP header of an Ethernet frame's IPv4 datagram (from the frame's first part,
/// which holds the headers; the data may follow in fragments) and how many data bytes the
/// segment carries, by the IP header's total length.
fn tcp_header(frame: &[u8]) -> Option<(TcpRepr<'_>, u32)> {
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
    let repr = TcpRepr::parse(&packet, src, dst, Checksum::Skip).ok()?;
    let total = usize::from(u16::from_be_bytes([frame[16], frame[17]]));
    let data = total.checked_sub(ihl + header_len)?;
    Some((repr, data as u32))
}

/// What [`Watch`] knows of one connection (by its own end's port and the peer's).
#[derive(Default)]
struct Watched {
    /// The window scale each end's SYN offered (its own, the peer's).
    offered: [Option<u8>; 2],
    /// The right edge of the peer's window (ACK + window, scaled) the end has been told,
    /// the furthest so far.
    peer_edge: Option<SeqNumber>,
    /// The right edge of the end's own window it has advertised, the furthest so far.
    own_edge: Option<SeqNumber>,
    /// The end of what the peer has sent the end (its FIN included).
    peer_sent: Option<SeqNumber>,
}

impl Watched {
    /// The shift that applies to `side`'s windows outside SYNs (RFC 7323 §2.2: both
    /// SYNs carried the option).
    fn shift(&self, side: usize) -> u8 {
        match self.offered {
            [Some(_), Some(_)] => self.offered[side].unwrap().min(14),
            _ => 0,
        }
    }
}

/// Rules an end's TCP segments must keep whatever the peer and the link, checked on the
/// wire as a tamper over the end's device (outermost: it sees what the end sends before
/// any fault, and what it receives after them): the end sends no data past the right
/// edge of the window the peer gave it (RFC 9293 §3.8.6.2.1; one byte past it for a
/// zero-window probe), does not move the right edge of its own window left
/// (§3.8.6.2.2, SHOULD NOT shrink; by less than a window-scale unit it may, below),
/// and acknowledges nothing the peer has not sent
/// (§3.10.7.4). A model of the byte streams cannot see these broken: TCP heals them (a
/// peer drops what overran its window, and the end resends it). What the watch finds
/// broken goes to `broken` (at most eight findings).
pub struct Watch {
    /// How the findings name the end and its peer.
    names: [&'static str; 2],
    conns: HashMap<(u16, u16), Watched>,
    broken: Arc<Mutex<Vec<String>>>,
}

impl Watch {
    pub fn new(names: [&'static str; 2], broken: Arc<Mutex<Vec<String>>>) -> Watch {
        Watch {
            names,
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

    /// The connection a segment `side` (0 the end, 1 its peer) sent belongs to, begun
    /// anew by a SYN, with the window scale a SYN offers noted; `None` for a RST or a
    /// connection the watch did not see begin.
    fn connection(&mut self, t: &TcpRepr, side: usize) -> Option<&mut Watched> {
        let key = if side == 0 {
            (t.src_port, t.dst_port)
        } else {
            (t.dst_port, t.src_port)
        };
        if t.control == Control::Syn && t.ack_number.is_none() {
            self.conns.insert(key, Watched::default());
        }
        let c = self.conns.get_mut(&key)?;
        if t.control == Control::Syn {
            c.offered[side] = t.window_scale;
        }
        (t.control != Control::Rst).then_some(c)
    }

    /// A segment the end sends.
    fn sent(&mut self, t: &TcpRepr, data: u32) {
        let names = self.names;
        let Some(c) = self.connection(t, 0) else {
            return;
        };
        let mut broken = Vec::new();
        if let (Some(edge), true) = (c.peer_edge, data > 0) {
            let end = t.seq_number + data as usize;
            if end.gt(edge + 1) {
                broken.push(format!(
                    "{} sent {data} bytes at {} past {}'s window, whose right edge is {}",
                    names[0], t.seq_number.0, names[1], edge.0
                ));
            }
        }
        if let Some(ack) = t.ack_number {
            if c.peer_sent.is_none_or(|sent| ack.gt(sent)) {
                broken.push(format!(
                    "{} acknowledged {} of {}'s data, which has sent up to {:?}",
                    names[0],
                    ack.0,
                    names[1],
                    c.peer_sent.map(|s| s.0)
                ));
            }
            if t.control != Control::Syn {
                let edge = ack + (usize::from(t.window_len) << c.shift(0));
                // A scaled field counts units of 2^shift bytes from RCV.NXT, which can
                // rarely say the edge kept exactly: the stack rounds down, and the edge
                // steps back by less than a unit (Linux rounds up and takes the bytes
                // over its buffer; the stack's ring has no room for them).
                let slack = (1usize << c.shift(0)) - 1;
                match c.own_edge {
                    Some(before) if (edge + slack).lt(before) => broken.push(format!(
                        "{} moved its window's right edge left, {} to {}",
                        names[0], before.0, edge.0
                    )),
                    Some(before) if edge.le(before) => {}
                    _ => c.own_edge = Some(edge),
                }
            }
        }
        for b in broken {
            self.broke(format!("port {} to {}: {b}", t.src_port, t.dst_port));
        }
    }

    /// A segment the end receives.
    fn received(&mut self, t: &TcpRepr, data: u32) {
        let Some(c) = self.connection(t, 1) else {
            return;
        };
        let end = t.seq_number + (data as usize + t.control.len());
        if c.peer_sent.is_none_or(|sent| end.gt(sent)) {
            c.peer_sent = Some(end);
        }
        if let Some(ack) = t.ack_number {
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

impl Tamper for Watch {
    fn send(&mut self, frame: PacketBuf, meta: TxMeta) -> Vec<(PacketBuf, TxMeta)> {
        if let Some((t, data)) = tcp_header(frame.data()) {
            self.sent(&t, data);
        }
        vec![(frame, meta)]
    }
    fn deliver(&mut self, frame: &[u8]) -> bool {
        if let Some((t, data)) = tcp_header(frame) {
            self.received(&t, data);
        }
        true
    }
}
