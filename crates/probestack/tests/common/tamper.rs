//! A device that does something to the frames between a stack and its real device: loses,
//! holds back or copies them, as a test's [`Tamper`] says. Every other call goes straight
//! through, so the stack sees the device it wraps (`tap.rs` over a TAP, `tcp.rs` over the
//! memory NIC).

use probestack::buf::PacketBuf;
use probestack::driver::{Device, DeviceCaps, DeviceContext, DeviceError, RxFrame, TxMeta};
use probestack::time::Instant;

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
