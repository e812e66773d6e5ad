//! The memory link: two NICs joined by a wire of memory (DESIGN.md §6), the default device
//! of a stack in one process.
//!
//! [`MemoryLink::pair`] makes two [`MemoryNic`]s. Each end is a [`Device`] and `Send`, so the
//! two stacks can run in one thread or on two cores. Each direction is a lock-free
//! single-producer, single-consumer [ring](super::ring) of frames, and in front of the
//! receiving NIC a [`Wire`](super::faults) that can drop, duplicate, reorder, delay and
//! corrupt them.
//!
//! # The NIC model
//!
//! ```text
//!  sender                                                    receiver
//!  transmit ─ copy (PIO) ─ FCS ─ tx ring ══ wire (faults, delay) ══ MAC: length, FCS
//!                                                    └─ receive queue ─ notify (N or T)
//!                                                                 └─ receive ─ copy (PIO)
//! ```
//!
//! - **MTU** ([`NicConfig::mtu`], 576 to 65535): `transmit` refuses a frame longer than
//!   MTU + 14 (the Ethernet header) with [`DeviceError::TooLarge`]; the receiving MAC drops
//!   one longer than its own limit (`driver.drop.too_long`), as a NIC drops a giant.
//! - **FCS**: transmit appends a real CRC-32 ([`super::crc32`]) and the receiving MAC checks
//!   it and drops a bad frame (`driver.drop.bad_fcs`), so neither the stack nor a pcap ever
//!   sees an FCS. Both are the device's work, charged to [`Ledger::device_work`], not to
//!   the host.
//! - **PIO or DMA** ([`NicConfig::copy_mode`]). With PIO the CPU copies the frame into a
//!   block of device memory on transmit and out of the receive queue into a host buffer on
//!   receive; both copies are real and charged to the host as `Op::DeviceCopy`. Device
//!   blocks the receiver has emptied go back to the sender on a ring of their own, so in a
//!   steady stream no memory is allocated. With DMA the [`PacketBuf`] itself crosses the
//!   link: the FCS goes in its tailroom (a buffer without 4 bytes of tailroom is copied
//!   into one that has, counted as `driver.tx_bounce`) and is trimmed off on arrival.
//! - **Queues and flow control**: the transmit ring holds [`NicConfig::tx_queue_depth`]
//!   frames; when it is full `transmit` fails with [`DeviceError::QueueFull`]
//!   (`driver.drop.queue_full`), and [`Device::tx_ready`] says so beforehand. The receive
//!   queue holds [`NicConfig::rx_queue_depth`] frames the host has not taken, and the
//!   receiving NIC takes frames off the ring only while the receive queue and the wire into
//!   it hold fewer than that: a slow receiver pushes back on the sender (as 802.3x PAUSE
//!   would) and the link loses nothing on its own. Only frames the wire duplicated can
//!   overflow the queue; they are dropped (`driver.drop.rx_overrun`).
//! - **Interrupt coalescing**: a notification after [`NicConfig::coalesce_frames`] frames
//!   or [`NicConfig::coalesce_time`] after the first frame not yet notified, whichever
//!   comes first (see `coalesce.rs`).
//! - **Checksum offload** flags are reported in [`DeviceCaps`]; the NIC does not act on
//!   them yet.
//!
//! # Time
//!
//! The sender stamps each frame with its `now`; the wire computes arrival times from those
//! stamps and the receiver sees a frame once its own `now` has reached the arrival time.
//! Both ends must therefore read the same time base: one [`crate::time::VirtualClock`]
//! (clones share it) or one [`crate::time::RealClock`] (it is `Copy`).
//!
//! A frame pushed by another thread does not wake the receiver: a stack on its own thread
//! polls (or spins); `next_deadline` covers frames already in the ring.

use std::collections::VecDeque;
use std::fmt;

use super::coalesce::Coalescer;
use super::crc32::{check_fcs, fcs, FCS_LEN};
use super::faults::{FaultConfig, FaultConfigError, FaultStats, Wire};
use super::ring::{ring, Consumer, Producer, RingError, MAX_CAPACITY};
use super::{
    ChecksumOffload, CopyMode, Device, DeviceCaps, DeviceContext, DeviceError, RxChecksum, RxFrame,
    TxMeta,
};
use crate::buf::{Depot, PacketBuf, HEADROOM};
use crate::probe::{Counter, Counters, Layer, Ledger, Op, Side};
use crate::time::{Duration, Instant};
use crate::wire::ethernet;

/// The smallest MTU a NIC accepts (the datagram every IPv4 host must take, RFC 791).
pub const MIN_MTU: usize = 576;
/// The largest MTU a NIC accepts (the largest IPv4 datagram).
pub const MAX_MTU: usize = 65535;
/// The deepest queue a NIC accepts.
pub const MAX_QUEUE_DEPTH: usize = 65536;
/// Host buffers kept for PIO receive, from [`Device::recycle`] and emptied frames.
const RX_POOL_MAX: usize = 64;

const _: () = assert!(MAX_QUEUE_DEPTH <= MAX_CAPACITY);

/// One end's NIC.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NicConfig {
    /// The largest IP datagram a frame carries: 576 to 65535.
    pub mtu: usize,
    pub copy_mode: CopyMode,
    /// Reported in [`DeviceCaps`]; not acted on yet.
    pub checksum_offload: ChecksumOffload,
    /// Frames the transmit ring holds (1 to 65536).
    pub tx_queue_depth: usize,
    /// Frames the receive queue holds before the host takes them (1 to 65536).
    pub rx_queue_depth: usize,
    /// N: notify after this many frames (at least 1).
    pub coalesce_frames: usize,
    /// T: notify this long after the first frame not yet notified.
    pub coalesce_time: Duration,
    /// What the wire does to frames on their way to this NIC.
    pub rx_faults: FaultConfig,
}

impl Default for NicConfig {
    /// MTU 1500, DMA, no offload, queues of 256, a notification per frame, a perfect wire.
    fn default() -> Self {
        NicConfig {
            mtu: 1500,
            copy_mode: CopyMode::default(),
            checksum_offload: ChecksumOffload::default(),
            tx_queue_depth: 256,
            rx_queue_depth: 256,
            coalesce_frames: 1,
            coalesce_time: Duration::ZERO,
            rx_faults: FaultConfig::none(),
        }
    }
}

impl NicConfig {
    /// The paper-000 NIC: MTU 1500, the CPU copies every frame (PIO), one notification per
    /// frame.
    pub fn bsd() -> NicConfig {
        NicConfig {
            copy_mode: CopyMode::Pio,
            ..NicConfig::default()
        }
    }

    /// Everything on: 64 KiB MTU, DMA hand-off, notification after 32 frames or 50 µs.
    pub fn fast() -> NicConfig {
        NicConfig {
            mtu: MAX_MTU,
            copy_mode: CopyMode::Dma,
            coalesce_frames: 32,
            coalesce_time: Duration::from_micros(50),
            ..NicConfig::default()
        }
    }

    /// The longest frame (Ethernet header onward, no FCS) the MTU allows.
    pub const fn max_frame_len(&self) -> usize {
        self.mtu + ethernet::HEADER_LEN
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(MIN_MTU..=MAX_MTU).contains(&self.mtu) {
            return Err(ConfigError::Mtu {
                mtu: self.mtu,
                min: MIN_MTU,
                max: MAX_MTU,
            });
        }
        for (which, depth) in [
            ("tx_queue_depth", self.tx_queue_depth),
            ("rx_queue_depth", self.rx_queue_depth),
        ] {
            if depth == 0 || depth > MAX_QUEUE_DEPTH {
                return Err(ConfigError::QueueDepth {
                    which,
                    depth,
                    max: MAX_QUEUE_DEPTH,
                });
            }
        }
        if self.coalesce_frames == 0 {
            return Err(ConfigError::CoalesceFrames);
        }
        self.rx_faults.validate().map_err(ConfigError::Faults)
    }
}

/// A NIC configuration that cannot be built.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ConfigError {
    Mtu {
        mtu: usize,
        min: usize,
        max: usize,
    },
    QueueDepth {
        which: &'static str,
        depth: usize,
        max: usize,
    },
    /// `coalesce_frames` is 0.
    CoalesceFrames,
    Faults(FaultConfigError),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ConfigError::Mtu { mtu, min, max } => {
                write!(f, "MTU {mtu} is not within {min}..={max}")
            }
            ConfigError::QueueDepth { which, depth, max } => {
                write!(f, "{which} {depth} is not within 1..={max}")
            }
            ConfigError::CoalesceFrames => write!(f, "coalesce_frames must be at least 1"),
            ConfigError::Faults(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for ConfigError {}

impl From<RingError> for ConfigError {
    fn from(e: RingError) -> Self {
        match e {
            RingError::Capacity { requested, max } => ConfigError::QueueDepth {
                which: "ring",
                depth: requested,
                max,
            },
        }
    }
}

/// What one NIC did, for tests and reports (the ledger's counters say the same per stack).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NicStats {
    pub tx_frames: u64,
    pub tx_bytes: u64,
    pub tx_queue_full: u64,
    pub tx_too_large: u64,
    /// DMA frames copied for want of tailroom for the FCS.
    pub tx_bounced: u64,
    pub rx_frames: u64,
    pub rx_bytes: u64,
    pub rx_bad_fcs: u64,
    pub rx_too_long: u64,
    pub rx_overrun: u64,
    /// Notifications the host took.
    pub notifications: u64,
}

/// A frame in the ring: the bytes with their FCS, and when they were sent.
struct WireFrame {
    frame: PacketBuf,
    sent_at: Instant,
}

/// A frame in the receive queue (FCS checked and trimmed).
struct Arrived {
    frame: PacketBuf,
    at: Instant,
}

/// Makes memory links.
#[derive(Debug)]
pub struct MemoryLink;

impl MemoryLink {
    /// Two NICs joined by a link: what `a` transmits `b` receives and the other way round.
    /// `a.rx_faults` is the wire from `b` to `a`, `b.rx_faults` the wire from `a` to `b`.
    pub fn pair(a: NicConfig, b: NicConfig) -> Result<(MemoryNic, MemoryNic), ConfigError> {
        a.validate()?;
        b.validate()?;
        let (a_tx, b_rx) = ring(a.tx_queue_depth)?;
        let (b_tx, a_rx) = ring(b.tx_queue_depth)?;
        // Device blocks a PIO sender used, given back by the receiver that emptied them.
        let (b_spares_out, a_spares_in) = ring(a.tx_queue_depth)?;
        let (a_spares_out, b_spares_in) = ring(b.tx_queue_depth)?;
        // Host buffers the link carries one way come back the other through the stacks'
        // shared depot (DMA hand-off; see `Device::buffer_depot`).
        let depot = Depot::default();
        let end = |config: NicConfig, peer: &NicConfig, tx, rx, spares_in, spares_out| MemoryNic {
            depot: depot.clone(),
            config,
            peer_pio: peer.copy_mode == CopyMode::Pio,
            tx,
            rx,
            spares_in,
            spares_out,
            wire: Wire::new(config.rx_faults),
            rx_queue: VecDeque::with_capacity(config.rx_queue_depth.min(1024)),
            coalescer: Coalescer::new(config.coalesce_frames, config.coalesce_time),
            rx_pool: Vec::new(),
            seen_until: Instant::ZERO,
            stats: NicStats::default(),
        };
        let nic_a = end(a, &b, a_tx, a_rx, a_spares_in, a_spares_out);
        let nic_b = end(b, &a, b_tx, b_rx, b_spares_in, b_spares_out);
        Ok((nic_a, nic_b))
    }
}

/// One end of a memory link.
pub struct MemoryNic {
    config: NicConfig,
    /// Whether the peer transmits with PIO, so that the device blocks it sent go back to it.
    peer_pio: bool,
    tx: Producer<WireFrame>,
    rx: Consumer<WireFrame>,
    /// Device blocks the peer gives back (for PIO transmit).
    spares_in: Consumer<PacketBuf>,
    /// Device blocks given back to the peer.
    spares_out: Producer<PacketBuf>,
    /// The wire into this NIC.
    wire: Wire,
    rx_queue: VecDeque<Arrived>,
    coalescer: Coalescer,
    /// Host buffers for PIO receive.
    rx_pool: Vec<PacketBuf>,
    /// The latest `now` the receiver has seen: nothing arrives earlier.
    seen_until: Instant,
    stats: NicStats,
    /// Shared with the NIC at the other end.
    depot: Depot,
}

impl MemoryNic {
    pub fn config(&self) -> &NicConfig {
        &self.config
    }

    pub fn stats(&self) -> NicStats {
        self.stats
    }

    /// The faults the wire into this NIC injected.
    pub fn fault_stats(&self) -> FaultStats {
        self.wire.stats()
    }

    /// Frames arrived and waiting for the host.
    pub fn rx_pending(&self) -> usize {
        self.rx_queue.len()
    }

    /// Whether the peer is still there.
    pub fn link_up(&self) -> bool {
        !self.tx.is_abandoned()
    }

    /// Frames on their way to this NIC: in the ring or on the wire.
    pub fn in_flight(&self) -> usize {
        self.rx.len() + self.wire.len()
    }

    /// A device block for PIO transmit of `len` bytes: one the peer gave back, or new.
    fn device_block(&mut self, len: usize) -> Result<PacketBuf, DeviceError> {
        let need = len + FCS_LEN;
        while let Some(mut b) = self.spares_in.pop() {
            if b.capacity() >= need && b.reset(0).is_ok() {
                return Ok(b);
            }
        }
        PacketBuf::new(0, 0, self.config.max_frame_len() + FCS_LEN)
            .map_err(|_| DeviceError::QueueFull)
    }

    /// A frame off the wire this NIC is done with (emptied by a PIO receive, or dropped): a
    /// PIO peer's device block goes back to the peer; another buffer serves this NIC's PIO
    /// receive; the rest is freed.
    fn reclaim(&mut self, buf: PacketBuf) {
        if self.peer_pio {
            // A full spares ring means the peer has plenty; this one is freed.
            let _ = self.spares_out.push(buf);
        } else {
            self.keep_for_rx(buf);
        }
    }

    /// Keeps a buffer for PIO receive, if this NIC does PIO and has room for it.
    fn keep_for_rx(&mut self, buf: PacketBuf) {
        if self.config.copy_mode == CopyMode::Pio && self.rx_pool.len() < RX_POOL_MAX {
            self.rx_pool.push(buf);
        }
    }

    /// A host buffer for a PIO receive of `len` bytes, with the stack's headroom.
    fn host_buffer(&mut self, len: usize) -> Option<PacketBuf> {
        while let Some(mut b) = self.rx_pool.pop() {
            if b.capacity() >= HEADROOM + len && b.reset(HEADROOM).is_ok() && b.append(len).is_ok()
            {
                return Some(b);
            }
        }
        PacketBuf::new(len, HEADROOM, 0).ok()
    }

    /// Runs the wire and the MAC up to `cx.now`: frames sent so far enter the wire, frames
    /// whose time has come pass the MAC into the receive queue, the coalescing timer runs.
    fn pump(&mut self, cx: &DeviceContext<'_>) {
        let now = cx.now.max(self.seen_until);
        let counters = cx.ledger.counters();
        let _device = cx.ledger.device_work();
        // Flow control: frames leave the ring only while the receive queue has room for
        // them and for those already on the wire, so a slow receiver pushes back on the
        // sender's transmit queue (as 802.3x PAUSE frames would) instead of dropping. At
        // most a ring's worth per call, so a fast sender on another core cannot keep the
        // receiver here.
        for _ in 0..self.rx.capacity() {
            if self.rx_queue.len() + self.wire.len() >= self.config.rx_queue_depth {
                break;
            }
            let Some(wf) = self.rx.pop() else { break };
            if let Some(dropped) = self.wire.inject(wf.frame, wf.sent_at, counters) {
                self.reclaim(dropped);
            }
        }
        self.wire.expire_hold(now, counters);
        while let Some(f) = self.wire.pop_due(now) {
            // A frame pushed late by another thread arrives when this NIC first sees it.
            let at = f.deliver_at.max(self.seen_until);
            self.mac_receive(f.frame, at, counters);
        }
        self.coalescer.tick(now);
        self.seen_until = now;
    }

    /// The receiving MAC: length and FCS checks, then the receive queue.
    fn mac_receive(&mut self, mut frame: PacketBuf, at: Instant, counters: &Counters) {
        let len = frame.len();
        if len > self.config.max_frame_len() + FCS_LEN {
            self.stats.rx_too_long += 1;
            counters.inc(Counter::DriverDropTooLong);
            self.reclaim(frame);
            return;
        }
        if !check_fcs(frame.data()) || frame.trim_back(FCS_LEN).is_err() {
            self.stats.rx_bad_fcs += 1;
            counters.inc(Counter::DriverDropBadFcs);
            self.reclaim(frame);
            return;
        }
        if self.rx_queue.len() >= self.config.rx_queue_depth {
            self.stats.rx_overrun += 1;
            counters.inc(Counter::DriverDropRxOverrun);
            self.reclaim(frame);
            return;
        }
        self.coalescer.arrive(at);
        self.rx_queue.push_back(Arrived { frame, at });
    }

    /// Appends the FCS in the device (device work).
    fn append_fcs(frame: &mut PacketBuf, ledger: &Ledger) -> Result<(), DeviceError> {
        let _device = ledger.device_work();
        let sum = fcs(frame.data());
        frame
            .extend_from_slice(&sum)
            .map_err(|_| DeviceError::QueueFull)
    }
}

impl Device for MemoryNic {
    fn caps(&self) -> DeviceCaps {
        DeviceCaps {
            mtu: self.config.mtu,
            has_crc: true,
            copy_mode: self.config.copy_mode,
            checksum_offload: self.config.checksum_offload,
            tso_max: 0,
        }
    }

    fn transmit(
        &mut self,
        frame: PacketBuf,
        _meta: TxMeta,
        cx: &DeviceContext<'_>,
    ) -> Result<(), DeviceError> {
        let len = frame.len();
        let max = self.config.max_frame_len();
        if len > max {
            self.stats.tx_too_large += 1;
            return Err(DeviceError::TooLarge { len, max });
        }
        if self.tx.is_abandoned() {
            return Err(DeviceError::LinkDown);
        }
        if self.tx.is_full() {
            self.stats.tx_queue_full += 1;
            cx.ledger.counters().inc(Counter::DriverDropQueueFull);
            return Err(DeviceError::QueueFull);
        }
        let mut out = match self.config.copy_mode {
            CopyMode::Pio => {
                let mut block = {
                    // Device memory: the model's, not the host's.
                    let _device = cx.ledger.device_work();
                    self.device_block(len)?
                };
                let _copy = cx.ledger.probe(Layer::Driver, Side::Send, Op::DeviceCopy);
                block
                    .extend_from_slice(frame.data())
                    .map_err(|_| DeviceError::QueueFull)?;
                block
            }
            CopyMode::Dma if frame.tailroom() >= FCS_LEN => frame,
            CopyMode::Dma => {
                self.stats.tx_bounced += 1;
                cx.ledger.counters().inc(Counter::DriverTxBounce);
                let _copy = cx.ledger.probe(Layer::Driver, Side::Send, Op::DeviceCopy);
                let mut b = PacketBuf::new(len, frame.headroom(), FCS_LEN)
                    .map_err(|_| DeviceError::QueueFull)?;
                b.data_mut().copy_from_slice(frame.data());
                b
            }
        };
        Self::append_fcs(&mut out, cx.ledger)?;
        let pushed = {
            let _q = cx.ledger.probe(Layer::Driver, Side::Send, Op::DeviceQueue);
            self.tx.push(WireFrame {
                frame: out,
                sent_at: cx.now,
            })
        };
        if pushed.is_err() {
            // Cannot happen (we are the only producer and checked), but stays typed.
            self.stats.tx_queue_full += 1;
            cx.ledger.counters().inc(Counter::DriverDropQueueFull);
            return Err(DeviceError::QueueFull);
        }
        self.stats.tx_frames += 1;
        self.stats.tx_bytes += len as u64;
        cx.ledger.counters().inc(Counter::DriverFramesOut);
        Ok(())
    }

    fn buffer_depot(&self) -> Option<Depot> {
        Some(self.depot.clone())
    }

    fn tx_ready(&self) -> bool {
        self.tx.is_abandoned() || self.tx.len() < self.tx.capacity()
    }

    fn take_notification(&mut self, cx: &DeviceContext<'_>) -> bool {
        self.pump(cx);
        let raised = self.coalescer.take(self.seen_until);
        if raised {
            self.stats.notifications += 1;
            cx.ledger.counters().inc(Counter::DriverNotifications);
        }
        raised
    }

    fn receive(&mut self, cx: &DeviceContext<'_>) -> Option<RxFrame> {
        self.pump(cx);
        loop {
            let arrived = {
                let _q = cx
                    .ledger
                    .probe(Layer::Driver, Side::Receive, Op::DeviceQueue);
                let a = self.rx_queue.pop_front()?;
                let q = &self.rx_queue;
                self.coalescer.taken(q.len(), |i| q.get(i).map(|a| a.at));
                a
            };
            let len = arrived.frame.len();
            let frame = match self.config.copy_mode {
                CopyMode::Dma => arrived.frame,
                CopyMode::Pio => {
                    let host = {
                        let _alloc = cx.ledger.probe(Layer::Driver, Side::Receive, Op::BufAlloc);
                        self.host_buffer(len)
                    };
                    let Some(mut host) = host else {
                        // No memory for the copy: the frame is lost, as on a NIC whose
                        // driver cannot refill its ring.
                        self.stats.rx_overrun += 1;
                        cx.ledger.counters().inc(Counter::DriverDropRxOverrun);
                        self.reclaim(arrived.frame);
                        continue;
                    };
                    {
                        let _copy = cx
                            .ledger
                            .probe(Layer::Driver, Side::Receive, Op::DeviceCopy);
                        host.data_mut().copy_from_slice(arrived.frame.data());
                    }
                    self.reclaim(arrived.frame);
                    host
                }
            };
            self.stats.rx_frames += 1;
            self.stats.rx_bytes += len as u64;
            cx.ledger.counters().inc(Counter::DriverFramesIn);
            return Some(RxFrame {
                frame,
                checksum: RxChecksum::None,
            });
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        let mut d = self.coalescer.next_deadline();
        let mut consider = |t: Option<Instant>| {
            if let Some(t) = t {
                d = Some(d.map_or(t, |d| d.min(t)));
            }
        };
        consider(self.wire.next_deadline());
        // Sent but not yet on the wire: it arrives no earlier than the wire's latency (if
        // flow control lets it leave the ring; else taking frames makes room first).
        if self.rx_queue.len() + self.wire.len() < self.config.rx_queue_depth {
            consider(self.rx.peek().map(|f| f.sent_at + self.wire.min_latency()));
        }
        // Frames already notified and not yet taken (a batch budget ran out): now.
        if self.rx_queue.len() > self.coalescer.unnotified() {
            consider(self.rx_queue.front().map(|a| a.at));
        }
        d
    }

    /// A PIO NIC keeps the buffer for its next receive; a DMA NIC gives a PIO peer's
    /// device block (which DMA handed up) back to the peer; anything else is freed.
    fn recycle(&mut self, frame: PacketBuf) {
        if self.config.copy_mode == CopyMode::Pio {
            self.keep_for_rx(frame);
        } else if self.peer_pio {
            let _ = self.spares_out.push(frame);
        }
    }
}

impl fmt::Debug for MemoryNic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryNic")
            .field("config", &self.config)
            .field("stats", &self.stats)
            .field("faults", &self.wire.stats())
            .field("rx_pending", &self.rx_queue.len())
            .field("in_flight", &self.in_flight())
            .finish()
    }
}

#[cfg(test)]
mod tests;
