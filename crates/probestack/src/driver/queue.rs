//! The frame queue: two ends joined by a ring of frames each way and nothing else, the
//! device of the loopback kind that smoltcp's examples and benchmarks use (a queue of
//! frames between two interfaces), for measuring a stack on that device rather than on
//! the [memory link](super::memlink)'s NIC model.
//!
//! [`FrameQueue::pair`] makes the two ends. What one end transmits the other receives, in
//! order, as the same buffer (the stacks share a buffer depot, as over the memory link with
//! DMA, so a buffer goes back to the pool it came from), its external fragments with it
//! ([`DeviceCaps::scatter_gather`]: data a sender passed by reference reaches the receiver
//! by reference, as Linux's loopback and veth pass an skb's page fragments). There is no
//! CRC (so [`DeviceCaps::has_crc`] is false and checksum elision never applies), no wire
//! model, no notification delay, no checksum or segmentation offload, no copy: a frame is
//! due at the other end as soon as it is sent, and each poll of the receiver takes what is
//! waiting.
//!
//! Bad input is refused, not passed on: a frame longer than the MTU allows is dropped with
//! [`DeviceError::TooLarge`], and one sent into a full queue with
//! [`DeviceError::QueueFull`]; both are counted ([`Device::counters`]).

use std::fmt;

use super::ring::{ring, Consumer, Producer, RingError, MAX_CAPACITY};
use super::{
    ChecksumOffload, CopyMode, Device, DeviceCaps, DeviceContext, DeviceError, RxChecksum, RxFrame,
    TxMeta,
};
use crate::buf::{Depot, PacketBuf};
use crate::time::Instant;
use crate::wire::ethernet;

use super::memlink::{MAX_MTU, MIN_MTU};

/// The least data a TCP segment carries for the stack to send it by reference across a
/// frame queue ([`DeviceCaps::by_reference_min`]): the queue moves a frame's fragments to
/// the other end untouched, so by reference saves a copy at each end, which outweighs the
/// fragments' bookkeeping from MSS 1,448 (MTU 1500) on.
const BY_REFERENCE_MIN: usize = 1024;

/// Why a frame queue could not be made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueConfigError {
    /// The MTU must be from [`MIN_MTU`] to [`MAX_MTU`].
    Mtu(usize),
    /// The depth must be from 1 to the ring's largest capacity.
    Depth(usize),
}

impl fmt::Display for QueueConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            QueueConfigError::Mtu(m) => {
                write!(f, "MTU {m} is not within {MIN_MTU}..={MAX_MTU}")
            }
            QueueConfigError::Depth(d) => {
                write!(f, "queue depth {d} is not within 1..={MAX_CAPACITY}")
            }
        }
    }
}

impl std::error::Error for QueueConfigError {}

impl From<RingError> for QueueConfigError {
    fn from(e: RingError) -> Self {
        match e {
            RingError::Capacity { requested, .. } => QueueConfigError::Depth(requested),
        }
    }
}

/// What one end has counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueStats {
    pub tx_frames: u64,
    pub rx_frames: u64,
    /// Frames longer than the MTU allows, refused.
    pub tx_too_large: u64,
    /// Frames sent into a full queue, refused.
    pub tx_queue_full: u64,
}

/// One end of a frame queue.
pub struct FrameQueue {
    mtu: usize,
    tx: Producer<PacketBuf>,
    rx: Consumer<PacketBuf>,
    depot: Depot,
    stats: QueueStats,
}

impl FrameQueue {
    /// Two ends joined by queues of `depth` frames each way, for IP datagrams of up to
    /// `mtu` bytes.
    pub fn pair(mtu: usize, depth: usize) -> Result<(FrameQueue, FrameQueue), QueueConfigError> {
        if !(MIN_MTU..=MAX_MTU).contains(&mtu) {
            return Err(QueueConfigError::Mtu(mtu));
        }
        let (a_tx, b_rx) = ring(depth)?;
        let (b_tx, a_rx) = ring(depth)?;
        let depot = Depot::default();
        let end = |tx, rx| FrameQueue {
            mtu,
            tx,
            rx,
            depot: depot.clone(),
            stats: QueueStats::default(),
        };
        Ok((end(a_tx, a_rx), end(b_tx, b_rx)))
    }

    pub fn stats(&self) -> QueueStats {
        self.stats
    }
}

impl Device for FrameQueue {
    fn caps(&self) -> DeviceCaps {
        DeviceCaps {
            mtu: self.mtu,
            has_crc: false,
            copy_mode: CopyMode::Dma,
            checksum_offload: ChecksumOffload::default(),
            tso_max: 0,
            scatter_gather: true,
            by_reference_min: BY_REFERENCE_MIN,
            header_split: false,
        }
    }

    /// Queues the frame for the other end. The device offers no offloads, so the stack
    /// asks for none: `meta` is not looked at.
    fn transmit(
        &mut self,
        frame: PacketBuf,
        _meta: TxMeta,
        _cx: &DeviceContext<'_>,
    ) -> Result<(), DeviceError> {
        let max = self.mtu + ethernet::HEADER_LEN;
        let len = frame.total_len();
        if len > max {
            self.stats.tx_too_large += 1;
            return Err(DeviceError::TooLarge { len, max });
        }
        match self.tx.push(frame) {
            Ok(()) => {
                self.stats.tx_frames += 1;
                Ok(())
            }
            Err(_) => {
                self.stats.tx_queue_full += 1;
                Err(DeviceError::QueueFull)
            }
        }
    }

    fn tx_ready(&self) -> bool {
        self.tx.len() < self.tx.capacity()
    }

    fn tx_room(&self) -> usize {
        self.tx.capacity() - self.tx.len()
    }

    /// Frames are due as soon as they are sent: a notification whenever some wait.
    fn take_notification(&mut self, _cx: &DeviceContext<'_>) -> bool {
        !self.rx.is_empty()
    }

    fn receive(&mut self, _cx: &DeviceContext<'_>) -> Option<RxFrame> {
        let frame = self.rx.pop()?;
        self.stats.rx_frames += 1;
        Some(RxFrame {
            frame,
            checksum: RxChecksum::None,
        })
    }

    /// Now, while frames wait; else nothing.
    fn next_deadline(&self) -> Option<Instant> {
        (!self.rx.is_empty()).then_some(Instant::ZERO)
    }

    fn buffer_depot(&self) -> Option<Depot> {
        Some(self.depot.clone())
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let s = self.stats;
        vec![
            ("queue.tx_frames", s.tx_frames),
            ("queue.rx_frames", s.rx_frames),
            ("queue.drop.too_large", s.tx_too_large),
            ("queue.drop.queue_full", s.tx_queue_full),
        ]
    }
}

impl fmt::Debug for FrameQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FrameQueue")
            .field("mtu", &self.mtu)
            .field("in_flight_out", &self.tx.len())
            .field("waiting_in", &self.rx.len())
            .field("stats", &self.stats)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::Ledger;

    fn frame(len: usize) -> PacketBuf {
        let mut b = PacketBuf::new(len, crate::buf::HEADROOM, 0).unwrap();
        for (i, x) in b.data_mut().iter_mut().enumerate() {
            *x = i as u8;
        }
        b
    }

    #[test]
    fn frames_cross_in_order_and_oversized_or_excess_ones_are_refused_and_counted() {
        let ledger = Ledger::new();
        let cx = DeviceContext {
            now: Instant::ZERO,
            ledger: &ledger,
        };
        let (mut a, mut b) = FrameQueue::pair(1500, 2).unwrap();
        assert!(!b.take_notification(&cx));
        assert_eq!(b.next_deadline(), None);
        a.transmit(frame(60), TxMeta::default(), &cx).unwrap();
        a.transmit(frame(1514), TxMeta::default(), &cx).unwrap();
        assert!(!a.tx_ready());
        assert_eq!(
            a.transmit(frame(60), TxMeta::default(), &cx),
            Err(DeviceError::QueueFull)
        );
        assert_eq!(
            a.transmit(frame(1515), TxMeta::default(), &cx),
            Err(DeviceError::TooLarge {
                len: 1515,
                max: 1514
            })
        );
        assert!(b.take_notification(&cx));
        assert_eq!(b.next_deadline(), Some(Instant::ZERO));
        let got: Vec<usize> = std::iter::from_fn(|| b.receive(&cx))
            .map(|f| {
                assert_eq!(f.checksum, RxChecksum::None);
                assert!(f
                    .frame
                    .data()
                    .iter()
                    .enumerate()
                    .all(|(i, &x)| x == i as u8));
                f.frame.total_len()
            })
            .collect();
        assert_eq!(got, [60, 1514]);
        assert!(a.tx_ready() && b.receive(&cx).is_none());
        assert_eq!(
            a.stats(),
            QueueStats {
                tx_frames: 2,
                rx_frames: 0,
                tx_too_large: 1,
                tx_queue_full: 1
            }
        );
        assert_eq!(b.stats().rx_frames, 2);
        assert!(!a.caps().has_crc && a.caps().mtu == 1500);
    }

    /// The stack's receive loop: a burst takes frames in order up to its limit, says
    /// whether it filled it, and appends to what the batch already holds.
    #[test]
    fn a_receive_burst_takes_up_to_its_limit_in_order() {
        let ledger = Ledger::new();
        let cx = DeviceContext {
            now: Instant::ZERO,
            ledger: &ledger,
        };
        let (mut a, mut b) = FrameQueue::pair(1500, 8).unwrap();
        for len in 60..65 {
            a.transmit(frame(len), TxMeta::default(), &cx).unwrap();
        }
        let lens = |batch: &Vec<RxFrame>| -> Vec<usize> {
            batch.iter().map(|f| f.frame.total_len()).collect()
        };
        let mut batch = Vec::new();
        assert!(b.receive_burst(&cx, &mut batch, 3, false));
        assert_eq!(lens(&batch), [60, 61, 62]);
        assert!(!b.receive_burst(&cx, &mut batch, 8, true));
        assert_eq!(lens(&batch), [60, 61, 62, 63, 64]);
        assert!(!b.receive_burst(&cx, &mut batch, 8, false));
        assert_eq!(batch.len(), 5);
        assert_eq!(b.stats().rx_frames, 5);
    }

    /// Two stacks on the queue: UDP and TCP get through, and with no CRC on the link even
    /// `Tuning::fast()` computes and verifies every checksum (elision needs a CRC).
    #[test]
    fn two_stacks_talk_over_it_with_checksums() {
        use crate::probe::Counter;
        use crate::sim::{HostConfig, Pair, ADDR_B};
        use crate::time::Duration;
        use crate::tuning::Tuning;
        let mut host = HostConfig::with_mtu(1500);
        host.stack.tuning = Tuning::fast();
        let mut p = Pair::on_frame_queue(host.clone(), host).unwrap();
        let l = p.b.tcp_listen((ADDR_B, 7), 1).unwrap();
        let c = p.a.tcp_connect((ADDR_B, 7)).unwrap();
        let data: Vec<u8> = (0..200_000u32).map(|i| (i * 7) as u8).collect();
        let (mut sent, mut got, mut accepted) = (0, Vec::new(), None);
        let mut buf = [0u8; 4096];
        assert!(p.run_until(Duration::from_secs(10), |p| {
            accepted = accepted.or(p.b.tcp_accept(l).ok());
            if sent < data.len() {
                sent += p.a.tcp_send(c, &data[sent..]).unwrap_or(0);
            }
            if let Some(s) = accepted {
                while let Ok(n @ 1..) = p.b.tcp_recv(s, &mut buf) {
                    got.extend_from_slice(&buf[..n]);
                }
            }
            got.len() == data.len()
        }));
        assert_eq!(got, data);
        // (After TCP, so that ARP has resolved and holds back none of them.)
        let (ua, ub) = (p.a.udp_open(), p.b.udp_open());
        p.b.udp_bind(ub, ADDR_B, 9).unwrap();
        for i in 0..20u8 {
            p.a.udp_send_to(ua, &[i; 300], ADDR_B, 9).unwrap();
        }
        p.settle();
        for i in 0..20u8 {
            let mut d = [0u8; 400];
            let r = p.b.udp_recv_from(ub, &mut d).unwrap();
            assert_eq!(&d[..r.len], &[i; 300][..]);
        }
        let b = p.b.ledger().counters();
        assert_eq!(b.get(Counter::UdpNoChecksumIn), 0);
        assert_eq!(b.get(Counter::TcpNoChecksumIn), 0);
    }

    #[test]
    fn bad_configurations_are_refused() {
        assert_eq!(
            FrameQueue::pair(100, 8).unwrap_err(),
            QueueConfigError::Mtu(100)
        );
        assert_eq!(
            FrameQueue::pair(1500, 0).unwrap_err(),
            QueueConfigError::Depth(0)
        );
    }
}
