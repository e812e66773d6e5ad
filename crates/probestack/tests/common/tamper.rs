//! A device that does something to the frames between a stack and its real device: loses,
//! holds back or copies them, as a test's [`Tamper`] says. Every other call goes straight
//! through, so the stack sees the device it wraps (`tap.rs` over a TAP, `tcp.rs` over the
//! memory NIC).

use probestack::buf::PacketBuf;
use probestack::driver::{Device, DeviceCaps, DeviceContext, DeviceError, RxFrame, TxMeta};
use probestack::rng::Rng;
use probestack::time::Instant;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// What a test's link does to the frames.
pub trait Tamper: Send {
    /// The frames to hand the device for one the stack sends (none: lost or held).
    fn send(&mut self, frame: PacketBuf, meta: TxMeta) -> Vec<(PacketBuf, TxMeta)>;
    /// Whether the stack gets a frame the device received.
    fn deliver(&mut self, _frame: &[u8]) -> bool {
        true
    }
}

/// A device behind a [`Tamper`].
pub struct Tampered<D, T> {
    pub dev: D,
    pub tamper: T,
}

impl<D: Device, T: Tamper> Device for Tampered<D, T> {
    fn caps(&self) -> DeviceCaps {
        self.dev.caps()
    }
    fn transmit(
        &mut self,
        frame: PacketBuf,
        meta: TxMeta,
        cx: &DeviceContext<'_>,
    ) -> Result<(), DeviceError> {
        for (frame, meta) in self.tamper.send(frame, meta) {
            self.dev.transmit(frame, meta, cx)?;
        }
        Ok(())
    }
    fn tx_ready(&self) -> bool {
        self.dev.tx_ready()
    }
    fn tx_room(&self) -> usize {
        self.dev.tx_room()
    }
    fn take_notification(&mut self, cx: &DeviceContext<'_>) -> bool {
        self.dev.take_notification(cx)
    }
    fn receive(&mut self, cx: &DeviceContext<'_>) -> Option<RxFrame> {
        loop {
            let f = self.dev.receive(cx)?;
            if self.tamper.deliver(f.frame.data()) {
                return Some(f);
            }
        }
    }
    fn next_deadline(&self) -> Option<Instant> {
        self.dev.next_deadline()
    }
    fn recycle(&mut self, frame: PacketBuf) {
        self.dev.recycle(frame)
    }
    fn buffer_depot(&self) -> Option<probestack::buf::Depot> {
        self.dev.buffer_depot()
    }
    fn readiness_fd(&self) -> Option<i32> {
        self.dev.readiness_fd()
    }
    fn counters(&self) -> Vec<(&'static str, u64)> {
        self.dev.counters()
    }
}

/// For an Ethernet frame holding an IPv4 TCP segment that is not a SYN: where its TCP
/// header starts, and whether it carries data.
pub fn tcp_segment(frame: &[u8]) -> Option<(usize, bool)> {
    let ihl = usize::from(frame.get(14).copied().unwrap_or(0) & 0x0f) * 4;
    let tcp = frame.len() >= 14 + ihl + 20
        && frame[12..14] == [0x08, 0x00]
        && frame[23] == 6
        && frame[14 + ihl + 13] & 0x02 == 0;
    if !tcp {
        return None;
    }
    let total = usize::from(u16::from_be_bytes([frame[16], frame[17]]));
    let headers = ihl + usize::from(frame[14 + ihl + 12] >> 4) * 4;
    Some((14 + ihl, total > headers))
}

/// The sequence number of the TCP segment whose header starts at `at` in `frame`.
pub fn tcp_seq(frame: &[u8], at: usize) -> [u8; 4] {
    let mut seq = [0; 4];
    seq.copy_from_slice(&frame[at + 4..at + 8]);
    seq
}

/// Hands the device each frame's bytes in a new layout of fragments (seeded): the head
/// cut at the end of the frame's headers (half the frames) or somewhere in its payload,
/// the rest in one to four fragments, an empty one among them now and then; one frame in
/// sixteen cut anywhere, headers included.
/// The bytes stay the same, so a stack that reads any layout the device may hand it loses
/// nothing.
pub struct Refragment {
    state: u64,
}

impl Refragment {
    pub fn new(seed: u64) -> Refragment {
        Refragment { state: seed | 1 }
    }

    /// xorshift64: a number below `n` (`n` > 0).
    fn below(&mut self, n: usize) -> usize {
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        (self.state % n as u64) as usize
    }
}

/// A pair's device wrapper (`Pair::with_devices`, `Pair::on_frame_queue_with`) that puts
/// a [`Refragment`] seeded with `seed` in front of the device.
pub fn refragmenting<D: Device + Send + 'static>(
    seed: u64,
) -> impl FnOnce(D) -> Box<dyn Device + Send> {
    move |dev| {
        Box::new(Tampered {
            dev,
            tamper: Refragment::new(seed),
        })
    }
}

/// The length of an Ethernet frame's Ethernet, IPv4 and TCP or UDP headers, as far as the
/// frame says (14 for anything not IPv4).
fn headers_len(frame: &[u8]) -> usize {
    if frame.len() < 34 || frame[12..14] != [0x08, 0x00] {
        return 14.min(frame.len());
    }
    let ip = 14 + usize::from(frame[14] & 0x0f) * 4;
    let first_fragment = u16::from_be_bytes([frame[20], frame[21]]) & 0x1fff == 0;
    let l4 = match frame[23] {
        6 if first_fragment => frame.get(ip + 12).map_or(0, |b| usize::from(b >> 4) * 4),
        17 if first_fragment => 8,
        _ => 0,
    };
    (ip + l4).min(frame.len())
}

impl Tamper for Refragment {
    fn send(&mut self, frame: PacketBuf, meta: TxMeta) -> Vec<(PacketBuf, TxMeta)> {
        let mut bytes = vec![0; frame.total_len()];
        frame.gather_into(&mut bytes).expect("gather");
        let headers = headers_len(&bytes);
        let head = match self.below(16) {
            0 => self.below(headers.max(1)),
            1..=8 => headers,
            _ => headers + self.below(bytes.len() - headers + 1),
        };
        let mut out = PacketBuf::from_slice(&bytes[..head], 128).expect("head");
        out.set_tx_offload(frame.tx_offload());
        let rest = bytes.len() - head;
        let pieces = if rest == 0 {
            0
        } else {
            1 + self.below(4.min(rest))
        };
        // Distinct cuts inside the rest, in order: each piece at least a byte.
        let mut cuts: Vec<usize> = Vec::new();
        while cuts.len() + 1 < pieces {
            let c = 1 + self.below(rest - 1);
            if !cuts.contains(&c) {
                cuts.push(c);
            }
        }
        cuts.sort_unstable();
        let mut at = head;
        for end in cuts.into_iter().map(|c| head + c).chain([bytes.len()]) {
            if end > at {
                if self.below(8) == 0 {
                    out.push_frag(probestack::buf::ExtBuf::new(Vec::new()));
                }
                out.push_frag(probestack::buf::ExtBuf::new(bytes[at..end].to_vec()));
                at = end;
            }
        }
        vec![(out, meta)]
    }
}

/// Loses every 53rd frame, holds every 31st back until the next has gone, and flips a bit
/// in a copy of every 41st frame's first fragment (the sender's block is never written):
/// out-of-order segments, holes, retransmissions, and data by reference that fails its
/// checksum.
#[derive(Default)]
pub struct LoseAndReorder {
    sent: u64,
    held: Option<(PacketBuf, TxMeta)>,
}

impl Tamper for LoseAndReorder {
    fn send(&mut self, mut frame: PacketBuf, meta: TxMeta) -> Vec<(PacketBuf, TxMeta)> {
        self.sent += 1;
        if self.sent.is_multiple_of(53) {
            return Vec::new();
        }
        if self.sent.is_multiple_of(41) && frame.has_frags() {
            corrupt_first_fragment(&mut frame, 0x10);
        }
        if self.sent.is_multiple_of(31) && self.held.is_none() {
            self.held = Some((frame, meta));
            return Vec::new();
        }
        std::iter::once((frame, meta))
            .chain(self.held.take())
            .collect()
    }
}

/// Flips `bits` in the middle byte of a copy of `frame`'s first fragment, which takes its
/// place: the sender's block (data it passed by reference) is never written.
pub fn corrupt_first_fragment(frame: &mut PacketBuf, bits: u8) {
    let mut frags = frame.take_frags();
    let Some(first) = frags.first_mut() else {
        return;
    };
    let mut bad = first.to_vec();
    let middle = bad.len() / 2;
    if let Some(b) = bad.get_mut(middle) {
        *b ^= bits;
    }
    *first = probestack::buf::ExtBuf::new(bad);
    for f in frags {
        frame.push_frag(f);
    }
}

/// Seeded faults for a device that has none of its own (a frame queue): each frame sent is
/// lost, sent twice, held back until a few more have gone (reordered, delayed) or, if it
/// carries fragments, corrupted (a copy of its first, as [`corrupt_first_fragment`]),
/// each with its own probability in a thousand.
pub struct SeededFaults {
    pub rng: probestack::rng::Rng,
    pub lose: u64,
    pub duplicate: u64,
    pub hold: u64,
    pub corrupt: u64,
    held: Vec<(u64, PacketBuf, TxMeta)>,
    sent: u64,
}

impl SeededFaults {
    pub fn new(seed: u64, lose: u64, duplicate: u64, hold: u64, corrupt: u64) -> SeededFaults {
        SeededFaults {
            rng: probestack::rng::Rng::new(seed),
            lose,
            duplicate,
            hold,
            corrupt,
            held: Vec::new(),
            sent: 0,
        }
    }

    fn roll(&mut self, per_thousand: u64) -> bool {
        self.rng.below(1000) < per_thousand
    }
}

/// A copy of `frame` sharing its fragments.
fn duplicate(frame: &PacketBuf) -> Option<PacketBuf> {
    let mut copy = PacketBuf::from_slice(frame.data(), 0).ok()?;
    for f in frame.frags() {
        copy.push_frag(f.clone());
    }
    Some(copy)
}

impl Tamper for SeededFaults {
    fn send(&mut self, mut frame: PacketBuf, meta: TxMeta) -> Vec<(PacketBuf, TxMeta)> {
        self.sent += 1;
        let mut out = Vec::new();
        if !self.roll(self.lose) {
            if frame.has_frags() && self.roll(self.corrupt) {
                corrupt_first_fragment(&mut frame, 0x01);
            }
            if self.roll(self.duplicate) {
                out.extend(duplicate(&frame).map(|f| (f, meta)));
            }
            if self.roll(self.hold) {
                let until = self.sent + 1 + self.rng.below(8);
                self.held.push((until, frame, meta));
            } else {
                out.push((frame, meta));
            }
        }
        // Held frames go once enough others have.
        let sent = self.sent;
        let (due, kept): (Vec<_>, Vec<_>) = self.held.drain(..).partition(|h| h.0 <= sent);
        self.held = kept;
        out.extend(due.into_iter().map(|(_, f, m)| (f, m)));
        out
    }
}

/// The link between a stack and a real device (a TAP): cut both ways while `down`, and
/// losing some of what the device receives (`lose_in` per thousand frames; `tcp_linux.rs`,
/// `udp_linux.rs`).
pub struct Link {
    pub down: Arc<AtomicBool>,
    pub lose_in: u64,
    pub rng: Rng,
}

impl Tamper for Link {
    fn send(&mut self, frame: PacketBuf, meta: TxMeta) -> Vec<(PacketBuf, TxMeta)> {
        if self.down.load(Ordering::Relaxed) {
            Vec::new()
        } else {
            vec![(frame, meta)]
        }
    }
    fn deliver(&mut self, _frame: &[u8]) -> bool {
        !self.down.load(Ordering::Relaxed) && self.rng.below(1000) >= self.lose_in
    }
}
