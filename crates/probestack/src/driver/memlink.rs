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
//!  transmit ─ copy (PIO) ─ offload (checksums, TSO) ─ FCS ─ tx ring
//!      ══ wire (faults, delay) ══ MAC: length, FCS ─ checksum offload
//!                                     └─ receive queue ─ notify (N or T)
//!                                                  └─ receive ─ copy (PIO)
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
//! - **Checksum offload** ([`NicConfig::checksum_offload`], paper 004 §3.2), acted on
//!   by the engines in `memlink/offload.rs`:
//!   - `l4_tx`: a frame whose [`TxMeta::l4_checksum`] is set has its TCP or UDP checksum
//!     completed by the NIC from the stack's pseudo-header seed, as its DMA engine reads
//!     the frame (counted in [`NicStats::tx_csum_offloaded`]). `ipv4_tx`: the NIC fills
//!     the IPv4 header checksum when [`TxMeta::ipv4_checksum`] asks. A request the NIC
//!     was not given the flag for is done by the driver in software before the frame goes
//!     to the device, as Linux does for a device without the feature
//!     (`skb_checksum_help`), and charged to the host (`Driver`, `Checksum`), so nothing
//!     leaves with a seed where a checksum belongs.
//!   - `ipv4_rx` and `l4_rx`: the receiving NIC verifies the IPv4 header and TCP or UDP
//!     checksums of each frame that passed its MAC, and tells the stack
//!     [`RxChecksum::Verified`] only when it checked everything the stack would then skip
//!     and all of it held; a wrong checksum is left to the stack (`None`), which drops
//!     and counts it as without offload. So a frame corrupted with its CRC recomputed
//!     (`FaultConfig::flip_passed`) is still caught. With `l4_rx` alone the NIC reports
//!     the raw sum ([`RxChecksum::RawSum`]): the stack must still check the IPv4 header.
//! - **TCP segmentation offload** ([`NicConfig::tso`], with `l4_tx`): the NIC takes TCP
//!   super-frames of up to a 65,535-byte datagram ([`DeviceCaps::tso_max`]) and cuts each
//!   into segments of [`TxMeta::gso_size`] data bytes, each with a copy of the headers,
//!   its own IPv4 length, identification and header checksum, sequence number, flags and
//!   completed checksum (the rules are in `memlink/offload.rs`), then sends each segment
//!   as an ordinary frame with its own FCS. A super-frame takes one slot of the transmit
//!   ring, as one descriptor does on a real NIC; its segments enter the wire one by one
//!   and meet its faults one by one. Counted in [`NicStats::tx_super_frames`] and
//!   [`NicStats::tx_segments`].
//! - **Who pays**: everything the NIC does (FCS, checksums, segmentation and the copies
//!   it makes of segments) is timed with [`Ledger::device_work`]: real wall time, but the
//!   device's, charged to no layer and subtracted from the host's share (the ledger's
//!   `device_ns`), as paper 004 counts a NIC's checksum engine; it is not split by
//!   operation. What the host does for the NIC (a PIO copy, a software checksum for a
//!   missing offload) stays the host's, in the `Driver` layer.
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
//!
//! [`Ledger::device_work`]: crate::probe::Ledger::device_work

use std::collections::VecDeque;
use std::fmt;

use super::coalesce::Coalescer;
use super::crc32::{check_fcs, check_fcs_parts, fcs, fcs_parts, Crc32, CrcPatch, FCS_LEN};
use super::faults::{FaultConfig, FaultConfigError, FaultStats, Wire};
use super::ring::{ring, Consumer, Producer, RingError, MAX_CAPACITY};
use super::{
    ChecksumOffload, CopyMode, Device, DeviceCaps, DeviceContext, DeviceError, RxChecksum, RxFrame,
    TxMeta,
};
use crate::buf::{
    Depot, ExtBuf, PacketBuf, PageRecycler, Pool, PoolConfig, TxOffload, HEADROOM, PAGE_SIZE,
};
use crate::checksum::{self, Accumulator};
use crate::probe::ledger::cold_path;
use crate::probe::{Counter, Counters, Layer, Op, Sampled, Sampling, Side, Unsampled};
use crate::time::{Duration, Instant};
use crate::wire::ethernet;

pub(crate) mod offload;

use offload::SuperFrame;

/// The least data a segment carrying a checksum the NIC completes must hold for the NIC
/// to send it by reference (its data left in the fragments it came in, read for the
/// checksum and the FCS, not copied): a page, the least header split at the other end
/// places in pages. Smaller segments cost more in references and per-piece work than the
/// copy saves (at MTU 1500 the zero-copy bulk harness ran 8% slower by reference), so the
/// NIC copies them, summing as it goes. Also what the NIC tells TCP as its
/// [`DeviceCaps::by_reference_min`]: at MTU 1500 TCP's own sends by reference ran slower
/// across the NICs (`lab bulk --mtu 1500 --configs integrated_copy_checksum --runs 3`
/// 7.7-8.0 → 6.4-7.2 Gbit/s; `examples/tcp_bulk 2048 1500` 18.7 → 16.0).
const BY_REFERENCE_MIN: usize = PAGE_SIZE;

/// The smallest MTU a NIC accepts (the datagram every IPv4 host must take, RFC 791).
pub const MIN_MTU: usize = 576;
/// The largest MTU a NIC accepts (the largest IPv4 datagram).
pub const MAX_MTU: usize = 65535;
/// The deepest queue a NIC accepts.
pub const MAX_QUEUE_DEPTH: usize = 65536;
/// Host buffers kept for PIO receive, from [`Device::recycle`] and emptied frames.
const RX_POOL_MAX: usize = 64;
/// Device blocks kept aside for PIO transmit when the one the peer gave back did not fit
/// the frame at hand (super-frames and their segments differ in size).
const DEVICE_SPARES_MAX: usize = 64;

const _: () = assert!(MAX_QUEUE_DEPTH <= MAX_CAPACITY);

/// One end's NIC.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NicConfig {
    /// The largest IP datagram a frame carries: 576 to 65535.
    pub mtu: usize,
    pub copy_mode: CopyMode,
    /// Checksum work the NIC does (see the module documentation), reported in
    /// [`DeviceCaps`].
    pub checksum_offload: ChecksumOffload,
    /// TCP segmentation offload: the NIC cuts TCP super-frames of up to 65,535 bytes of
    /// datagram ([`DeviceCaps::tso_max`]). Only together with `checksum_offload.l4_tx`: a
    /// NIC segments only what it also checksums, and without `l4_tx` the flag is dropped
    /// (`tso_max` 0), as Linux drops TSO from a device that cannot checksum
    /// (`netdev_fix_features`).
    pub tso: bool,
    /// Header/data split on receive (paper 004 §3.1): the DMA NIC puts the payload of
    /// each unfragmented TCP segment of at least a page in a buffer of its own that
    /// starts on a page boundary
    /// ([`ExtBuf::copy_page_aligned`](crate::buf::ExtBuf::copy_page_aligned)) and hands
    /// the stack the headers with the payload as the frame's fragment, so whole pages can
    /// reach the application without a copy. The placement is the NIC's DMA writing,
    /// device work.
    /// Ignored with PIO, where the CPU's own copy places the data.
    pub header_split: bool,
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
            tso: false,
            header_split: false,
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

    /// This configuration with every checksum offload and TCP segmentation offload on.
    pub fn with_offloads(self) -> NicConfig {
        NicConfig {
            checksum_offload: ChecksumOffload {
                ipv4_tx: true,
                ipv4_rx: true,
                l4_tx: true,
                l4_rx: true,
            },
            tso: true,
            ..self
        }
    }

    /// Whether the NIC cuts super-frames: `tso` with `l4_tx`.
    pub const fn segments(&self) -> bool {
        self.tso && self.checksum_offload.l4_tx
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
    /// Frames sent onto the wire, and their bytes (no FCS): a super-frame counts as the
    /// segments it was cut into.
    pub tx_frames: u64,
    pub tx_bytes: u64,
    pub tx_queue_full: u64,
    pub tx_too_large: u64,
    /// DMA frames copied for want of tailroom for the FCS.
    pub tx_bounced: u64,
    /// Frames sent with fragments (loaned data), which the NIC gathered.
    pub tx_gathered: u64,
    /// Frames whose fragments went to the other end with them, uncopied (DMA, nothing for
    /// the NIC to do to their bytes but read them for a checksum it completes): data a
    /// stack sent by reference or loaned, and the segments of such a super-frame.
    pub tx_fragments_passed: u64,
    /// Frames with fragments this NIC gathered on receipt because it reads frames whole
    /// (PIO, or a faulty wire, which must not alter the sender's memory).
    pub rx_gathered: u64,
    /// Received frames whose payload the NIC split off into page-aligned memory.
    pub rx_header_split: u64,
    /// Transport checksums the NIC completed (`l4_tx`): one per frame on the wire, so one
    /// per segment of a super-frame.
    pub tx_csum_offloaded: u64,
    /// Transport checksums the driver completed in software because the NIC was not
    /// given `l4_tx`.
    pub tx_csum_software: u64,
    /// Checksum requests whose field lay outside the frame: sent without the checksum.
    pub tx_csum_bad_request: u64,
    /// TCP super-frames the NIC cut (TSO).
    pub tx_super_frames: u64,
    /// The segments it cut them into.
    pub tx_segments: u64,
    pub rx_frames: u64,
    pub rx_bytes: u64,
    pub rx_bad_fcs: u64,
    pub rx_too_long: u64,
    pub rx_overrun: u64,
    /// Received frames the NIC verified and reported [`RxChecksum::Verified`].
    pub rx_csum_verified: u64,
    /// Received frames with a checksum the NIC found wrong (left to the stack, which
    /// drops them).
    pub rx_csum_bad: u64,
    /// Notifications the host took.
    pub notifications: u64,
}

/// An entry in the transmit ring: the bytes of a frame with their FCS, and when they were
/// sent; for a super-frame, its first segment, the others behind it in `more` (none for
/// an ordinary frame, which then allocates nothing).
struct WireFrame {
    frame: PacketBuf,
    /// A super-frame's other segments, boxed: the common entry, one frame, stays three
    /// words (moved into the ring with narrower loads than a `Vec`'s five-word entry
    /// took, which stalled on the stores that had just built it).
    #[expect(
        clippy::box_collection,
        reason = "one word in the ring entry, where a Vec takes three"
    )]
    more: Option<Box<Vec<PacketBuf>>>,
    sent_at: Instant,
}

impl WireFrame {
    /// Frames the entry puts on the wire.
    fn frames(&self) -> usize {
        1 + self.more.as_ref().map_or(0, |m| m.len())
    }
}

/// A frame in the receive queue (FCS checked and trimmed) with what the NIC found of its
/// checksums, as the host will take it, and when it arrived.
///
/// When header split will take the frame's payload and the receive checksum offload is on,
/// `rx.checksum` says nothing yet: the split checks the checksums as it copies the payload,
/// in one pass, and its result says whether it took the payload. (Not a flag here: a byte
/// stored beside the checksum and then copied with the entry was a load the CPU could not
/// forward from the store, the hottest instruction of the receive path in `perf`.)
struct Arrived {
    rx: RxFrame,
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
            segment_pool: {
                let mut pool = Pool::new(PoolConfig::new(true));
                pool.set_depot(Some(depot.clone()));
                pool
            },
            depot: depot.clone(),
            rx_pages: PageRecycler::default(),
            fcs_patch: CrcPatch::new(),
            config,
            peer_pio: peer.copy_mode == CopyMode::Pio,
            tx,
            rx,
            spares_in,
            spares_out,
            device_spares: Vec::new(),
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
    /// Device blocks from `spares_in` that did not fit a frame, for later ones.
    device_spares: Vec<PacketBuf>,
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
    /// Where a DMA NIC takes the buffers of the segments it cuts from a super-frame: the
    /// blocks the peer's stack freed come back through the shared depot, rather than
    /// every segment taking a fresh, zeroed block from the global allocator.
    segment_pool: Pool,
    /// The page-aligned blocks header split places payloads in, reused once the
    /// application has let go of them.
    rx_pages: PageRecycler,
    /// Sets an FCS right after the checksum it covers is completed (see
    /// [`MemoryNic::fcs_completing_checksum`]).
    fcs_patch: CrcPatch,
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

    /// Frames on their way to this NIC: in the ring or on the wire. A super-frame's
    /// segments count once while they are in the ring (they take one slot of it).
    pub fn in_flight(&self) -> usize {
        self.rx.len() + self.wire.len()
    }

    /// An empty device block for PIO transmit of `len` bytes and the FCS: the smallest
    /// one set aside that fits, or one the peer gave back, or new.
    fn device_block(&mut self, len: usize) -> Result<PacketBuf, DeviceError> {
        let need = len + FCS_LEN;
        let best = (self.device_spares.iter().enumerate())
            .filter(|(_, b)| b.capacity() >= need)
            .min_by_key(|(_, b)| b.capacity())
            .map(|(i, _)| i);
        if let Some(i) = best {
            let mut b = self.device_spares.swap_remove(i);
            if b.reset(0).is_ok() {
                return Ok(b);
            }
        }
        while let Some(mut b) = self.spares_in.pop() {
            if b.capacity() >= need && b.reset(0).is_ok() {
                return Ok(b);
            }
            if self.device_spares.len() < DEVICE_SPARES_MAX {
                self.device_spares.push(b);
            }
        }
        PacketBuf::new(0, 0, need.max(self.config.max_frame_len() + FCS_LEN))
            .map_err(|_| DeviceError::QueueFull)
    }

    /// A buffer of exactly `len` bytes (and room for the FCS) for a segment the NIC cuts
    /// out of a super-frame: a device block with PIO; with DMA a buffer of a pool class's
    /// size with the stack's headroom, since the receiving stack takes it over as it takes
    /// any DMA frame and its pool (and the pools' depot) can then reuse it.
    fn segment_buffer(&mut self, len: usize) -> Result<PacketBuf, DeviceError> {
        match self.config.copy_mode {
            CopyMode::Pio => {
                let mut b = self.device_block(len)?;
                b.append(len).map_err(|_| DeviceError::QueueFull)?;
                Ok(b)
            }
            CopyMode::Dma => {
                let mut b = self
                    .segment_pool
                    .alloc(len + FCS_LEN, HEADROOM)
                    .map_err(|_| DeviceError::QueueFull)?;
                b.trim_back(FCS_LEN).map_err(|_| DeviceError::QueueFull)?;
                // The segment leaves the NIC: the receiving stack frees it into its pool.
                Ok(self.segment_pool.detach(b))
            }
        }
    }

    /// A frame off the wire this NIC is done with (emptied by a PIO receive, or dropped): a
    /// PIO peer's device block goes back to the peer; another buffer serves this NIC's PIO
    /// receive; the rest is freed.
    fn reclaim(&mut self, buf: PacketBuf) {
        if self.peer_pio {
            // A full spares ring means the peer has plenty; this one is freed.
            self.give_back(buf);
        } else {
            self.keep_for_rx(buf);
        }
    }

    /// Gives a PIO peer's device block back to it, empty.
    fn give_back(&mut self, mut buf: PacketBuf) {
        let _ = buf.reset(0);
        let _ = self.spares_out.push(buf);
    }

    /// Keeps a buffer for PIO receive, if this NIC does PIO and has room for it.
    fn keep_for_rx(&mut self, mut buf: PacketBuf) {
        if self.config.copy_mode == CopyMode::Pio && self.rx_pool.len() < RX_POOL_MAX {
            // The block is kept, not what follows it: the fragments are the sender's
            // memory (a loan, a shared block), which would be held until the block's next
            // use, and a loan whose last frame was emptied so would never come back
            // (found by tests/tcp_conversations.rs: a loaned write, the last thing sent,
            // held after both connections were gone).
            let _ = buf.reset(0);
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
    #[inline(always)]
    fn pump(&mut self, s: impl Sampling, cx: &DeviceContext<'_>) {
        if self.wire.is_empty() && self.rx.is_drained() {
            // Nothing sent and nothing on the wire (the stack's receive loop asking once
            // more): only the coalescing timer runs.
            let now = cx.now.max(self.seen_until);
            self.coalescer.tick(now);
            self.seen_until = now;
            return;
        }
        self.pump_frames(s, cx);
    }

    /// [`Self::pump`] with frames to move.
    #[inline(never)]
    fn pump_frames(&mut self, s: impl Sampling, cx: &DeviceContext<'_>) {
        let now = cx.now.max(self.seen_until);
        let counters = cx.ledger.counters();
        let _device = cx.ledger.device_work(s);
        let depth = self.config.rx_queue_depth;
        // Flow control: frames leave the ring only while the receive queue has room for
        // them and for those already on the wire, so a slow receiver pushes back on the
        // sender's transmit queue (as 802.3x PAUSE frames would) instead of dropping. At
        // most a ring's worth per call, so a fast sender on another core cannot keep the
        // receiver here.
        for _ in 0..self.rx.capacity() {
            let queued = self.rx_queue.len() + self.wire.len();
            let Some(wf) = self
                .rx
                .pop_if(|wf| Self::admits(queued, wf.frames(), depth))
            else {
                break;
            };
            let mut wf = wf;
            if !self.takes_as_is(&wf.frame) {
                counters.inc(Counter::DriverRxGathered);
                match self.gathered(wf.frame) {
                    Some(f) => wf.frame = f,
                    None => continue,
                }
            }
            // A super-frame's other segments, when a NIC cut it by reference.
            if let Some(more) = wf.more.take() {
                wf.more = if more.iter().all(|f| self.takes_as_is(f)) {
                    Some(more)
                } else {
                    let whole: Vec<PacketBuf> = more
                        .into_iter()
                        .filter_map(|f| {
                            if self.takes_as_is(&f) {
                                return Some(f);
                            }
                            counters.inc(Counter::DriverRxGathered);
                            self.gathered(f)
                        })
                        .collect();
                    (!whole.is_empty()).then(|| Box::new(whole))
                };
            }
            if wf.more.is_none() {
                // A perfect wire with nothing on it delays nothing: straight to the MAC,
                // in the order the wire would have delivered it.
                if let Some(at) = self.wire.pass_through(wf.sent_at, now) {
                    let at = at.max(self.seen_until);
                    self.mac_receive(wf.frame, at, counters);
                    continue;
                }
            }
            for frame in std::iter::once(wf.frame).chain(wf.more.into_iter().flat_map(|m| *m)) {
                if let Some(dropped) = self.wire.inject(frame, wf.sent_at, counters) {
                    self.reclaim(dropped);
                }
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

    /// Whether flow control lets the next entry of the ring onto the wire: the receive
    /// queue and the wire must have room for all its frames (a super-frame's segments go
    /// together). An entry with more segments than the whole receive queue holds goes
    /// when the queue and the wire are empty, and the segments that do not fit are lost
    /// as overruns: a receive queue shallower than a super-frame is a configuration that
    /// cannot work without loss.
    fn admits_next(&self) -> bool {
        let queued = self.rx_queue.len() + self.wire.len();
        let depth = self.config.rx_queue_depth;
        match self.rx.peek() {
            Some(wf) => Self::admits(queued, wf.frames(), depth),
            None => queued < depth,
        }
    }

    /// Whether an entry of `frames` frames may leave the ring with `queued` frames in the
    /// receive queue and on the wire, which holds `depth` ([`Self::admits_next`]).
    #[inline]
    fn admits(queued: usize, frames: usize, depth: usize) -> bool {
        queued == 0 || queued + frames <= depth
    }

    /// The receiving MAC: length and FCS checks, the checksum offload, then the receive
    /// queue.
    #[inline(always)]
    fn mac_receive(&mut self, frame: PacketBuf, at: Instant, counters: &Counters) {
        let len = frame.len();
        let frags = frame.frags();
        let total = if frags.is_empty() {
            len
        } else {
            frame.total_len()
        };
        if total > self.config.max_frame_len() + FCS_LEN {
            self.stats.rx_too_long += 1;
            counters.inc(Counter::DriverDropTooLong);
            self.reclaim(frame);
            return;
        }
        // A frame header split will take has its checksums checked as the split copies
        // its payload, in one pass over the bytes; the others' are checked here, after
        // the FCS (over the window, and the fragments summed as the FCS reads them).
        let check_here = self.checks_received()
            && self
                .split_offset(&frame.data()[..len.saturating_sub(FCS_LEN)], total - len)
                .is_none();
        // (A frame too short for an FCS fails the check.)
        let (intact, frags_sum) = if frags.is_empty() {
            (check_fcs(frame.data()), None)
        } else if check_here {
            let (intact, sum) = check_fcs_summing_frags(frame.data(), frags);
            (intact, Some(sum))
        } else {
            let frags = frags.iter().map(|f| &f[..]);
            (check_fcs_parts(frame.data(), frags), None)
        };
        if !intact {
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
        let checksum = if check_here {
            let bytes = &frame.data()[..len - FCS_LEN];
            let moved = frags_sum.map(|acc| (acc.len(), acc.sum()));
            self.check_received(bytes, moved)
        } else {
            RxChecksum::None
        };
        self.coalescer.arrive(at);
        self.rx_queue.push_back(Arrived {
            rx: RxFrame { frame, checksum },
            at,
        });
        // The FCS comes off once the frame is in the queue: cut before, the 4-byte store
        // to the window's end was still in flight when the move into the queue loaded the
        // buffer 16 bytes at a time, a load the CPU cannot forward from the store (a
        // store-forwarding stall per frame, the hottest instruction of `pump_frames`).
        if let Some(a) = self.rx_queue.back_mut() {
            let _ = a.rx.frame.trim_back(FCS_LEN);
        }
    }

    /// Whether the NIC checks received frames' checksums (the receive offload).
    fn checks_received(&self) -> bool {
        let offload = self.config.checksum_offload;
        offload.ipv4_rx || offload.l4_rx
    }

    /// Whether a frame off the wire goes to the MAC as it came: one without fragments, or
    /// one whose fragments (data its sender passed by reference or loaned) a DMA NIC on a
    /// perfect wire takes as they are: it reads them for the FCS and any checksum it
    /// checks, and header split copies a payload of a page or more from them into its own
    /// pages. Any other is gathered first ([`gathered`](Self::gathered)): PIO reads frames
    /// whole, and a faulty wire must not alter its sender's memory.
    fn takes_as_is(&self, frame: &PacketBuf) -> bool {
        !frame.has_frags() || (self.config.copy_mode == CopyMode::Dma && self.wire.is_perfect())
    }

    /// A frame with fragments made one contiguous frame, its FCS (which ended the window)
    /// moved to the end: device work, a DMA engine writing the frame into one of this
    /// NIC's buffers. `None` (the frame lost) without a buffer for it, counted as an
    /// overrun, or for a window too short to hold the FCS, which no memory NIC sends.
    fn gathered(&mut self, mut frame: PacketBuf) -> Option<PacketBuf> {
        self.stats.rx_gathered += 1;
        let at = frame.len().checked_sub(FCS_LEN)?;
        let mut fcs = [0u8; FCS_LEN];
        fcs.copy_from_slice(&frame.data()[at..]);
        frame.trim_back(FCS_LEN).ok()?;
        let rest = frame.total_len() - frame.len();
        let mut whole = if frame.tailroom() >= rest + FCS_LEN {
            frame.linearize_in_place().ok()?;
            frame
        } else {
            let Ok(mut b) = self.segment_buffer(frame.total_len()) else {
                self.stats.rx_overrun += 1;
                self.reclaim(frame);
                return None;
            };
            let _ = frame.gather_into(b.data_mut());
            self.reclaim(frame);
            b
        };
        whole.extend_from_slice(&fcs).ok()?;
        Some(whole)
    }

    /// The receive checksum offload on a frame (with `moved`, the length and sum of the
    /// payload header split took out of it), counted.
    fn check_received(&mut self, frame: &[u8], moved: Option<(usize, u16)>) -> RxChecksum {
        let check = offload::check_received(frame, moved, self.config.checksum_offload);
        if check.bad {
            self.stats.rx_csum_bad += 1;
        }
        if check.checksum == RxChecksum::Verified {
            self.stats.rx_csum_verified += 1;
        }
        check.checksum
    }

    /// Where header split cuts this frame (its window, and `frags_len` bytes after it in
    /// fragments), if it takes its payload: a DMA NIC with the split on, and one
    /// unfragmented TCP segment with at least a page of payload.
    fn split_offset(&self, window: &[u8], frags_len: usize) -> Option<usize> {
        if self.config.copy_mode != CopyMode::Dma || !self.config.header_split {
            return None;
        }
        let len = window.len() + frags_len;
        offload::tcp_payload_offset_parts(window, len).filter(|&at| len - at >= PAGE_SIZE)
    }

    /// A frame with fragments made whole. With DMA the NIC's engine follows the
    /// fragment list itself (device work); with PIO the CPU's copy into device memory
    /// reads the fragments where they are (host work, the PIO copy the frame needs
    /// anyway, so it is not copied a second time).
    ///
    /// `sum_from`: the offset of a transport checksum the NIC will complete; the bytes
    /// gathered after it are summed as they are read (with DMA into the frame's own
    /// tailroom), and their offset and sum come back with the frame.
    fn gather(
        &mut self,
        s: impl Sampling,
        mut frame: PacketBuf,
        sum_from: Option<usize>,
        cx: &DeviceContext<'_>,
    ) -> Result<(PacketBuf, Option<(usize, u16)>), DeviceError> {
        let len = frame.total_len();
        self.stats.tx_gathered += 1;
        let mut whole = match self.config.copy_mode {
            CopyMode::Pio => {
                let mut block = {
                    let _device = cx.ledger.device_work(s);
                    self.device_block(len)?
                };
                let _copy = cx
                    .ledger
                    .probe(s, Layer::Driver, Side::Send, Op::DeviceCopy);
                block.append(len).map_err(|_| DeviceError::QueueFull)?;
                let _ = frame.gather_into(block.data_mut());
                block
            }
            CopyMode::Dma => {
                let _device = cx.ledger.device_work(s);
                // Into the frame's own tailroom when it has room for the FCS too, so the
                // buffer travels on as any DMA frame; else into one of the NIC's.
                if frame.tailroom() >= len - frame.len() + FCS_LEN {
                    let from = frame.len();
                    if sum_from.is_some_and(|start| start <= from) {
                        // A transport checksum the NIC completes: the fragments are summed
                        // as the engine reads them in, not read again after.
                        let mut acc = 0u16;
                        for f in frame.take_frags() {
                            let at = frame.len() - from;
                            let dst = frame.append(f.len()).map_err(|_| DeviceError::QueueFull)?;
                            acc = checksum::combine_at(acc, checksum::copy_and_sum(dst, &f), at);
                        }
                        return Ok((frame, Some((from, acc))));
                    }
                    if frame.linearize_in_place().is_ok() {
                        return Ok((frame, None));
                    }
                }
                let mut b = self.segment_buffer(len)?;
                let _ = frame.gather_into(b.data_mut());
                b
            }
        };
        whole.set_tx_offload(frame.tx_offload());
        Ok((whole, None))
    }

    /// Header/data split (device work; the caller has the span open): an Ethernet frame
    /// holding exactly one unfragmented IPv4 TCP segment with at least a page of payload
    /// keeps its headers, and its payload moves to a page-aligned buffer of its own,
    /// attached as the frame's fragment. Any other frame is left whole.
    ///
    /// Returns the length and sum of the payload it moved: the copy sums as it goes.
    fn split(&mut self, mut frame: PacketBuf) -> (PacketBuf, Option<(usize, u16)>) {
        let frags_len = frame.total_len() - frame.len();
        let Some(at) = self.split_offset(frame.data(), frags_len) else {
            return (frame, None);
        };
        let in_window = frame.len() - at;
        let payload_len = in_window + frags_len;
        let (payload, sum) = if frags_len == 0 {
            self.rx_pages.copy_and_sum_page_aligned(&frame.data()[at..])
        } else {
            // From the window's end and the fragments (data its sender passed by
            // reference), which the frame then lets go.
            let pieces =
                std::iter::once(&frame.data()[at..]).chain(frame.frags().iter().map(|f| &f[..]));
            self.rx_pages
                .copy_and_sum_page_aligned_parts(payload_len, pieces)
        };
        if frame.trim_back(in_window).is_err() {
            return (frame, None);
        }
        drop(frame.take_frags());
        frame.push_frag(payload);
        self.stats.rx_header_split += 1;
        (frame, Some((payload_len, sum)))
    }

    /// Appends the FCS (device work; the caller has the span open).
    #[inline(always)]
    fn append_fcs(frame: &mut PacketBuf) -> Result<(), DeviceError> {
        let sum = fcs(frame.data());
        frame
            .append(FCS_LEN)
            .map_err(|_| DeviceError::QueueFull)?
            .copy_from_slice(&sum);
        Ok(())
    }

    /// The driver's part: what `meta` asks for and the NIC was not given the offload for,
    /// done in software on the host's frame before the device sees it (host work, as
    /// Linux's `skb_checksum_help` for a device without the feature). A super-frame's
    /// segments get their IPv4 header checksums from the NIC, which cuts it.
    fn software_offloads(
        &mut self,
        s: impl Sampling,
        frame: &mut [u8],
        meta: TxMeta,
        cutting: bool,
        cx: &DeviceContext<'_>,
    ) {
        let caps = self.config.checksum_offload;
        if meta.ipv4_checksum && !caps.ipv4_tx && !cutting {
            let _p = cx.ledger.probe(s, Layer::Driver, Side::Send, Op::Checksum);
            offload::fill_ipv4_checksum(frame);
        }
        if let Some((start, offset)) = meta.l4_checksum.filter(|_| !caps.l4_tx) {
            let done = {
                let _p = cx.ledger.probe(s, Layer::Driver, Side::Send, Op::Checksum);
                offload::complete_checksum(frame, start.into(), offset.into())
            };
            if done {
                self.stats.tx_csum_software += 1;
            } else {
                self.stats.tx_csum_bad_request += 1;
            }
        }
    }

    /// The NIC's checksum work on an ordinary frame in its hands (device work; the caller
    /// has the span open).
    /// `summed`: the offset from which the frame's bytes were summed as they were gathered,
    /// and their sum.
    fn device_offloads(&mut self, frame: &mut [u8], meta: TxMeta, summed: Option<(usize, u16)>) {
        let caps = self.config.checksum_offload;
        if meta.ipv4_checksum && caps.ipv4_tx {
            offload::fill_ipv4_checksum(frame);
        }
        if let Some((start, offset)) = meta.l4_checksum.filter(|_| caps.l4_tx) {
            if offload::complete_checksum_summed(frame, start.into(), offset.into(), summed) {
                self.stats.tx_csum_offloaded += 1;
            } else {
                self.stats.tx_csum_bad_request += 1;
            }
        }
    }

    /// Cuts a super-frame into its segments (device work; the caller has the span open):
    /// the second to the last copied out into buffers of their own, then the super-frame's
    /// own buffer turned into the first and trimmed to it.
    fn cut(
        &mut self,
        mut frame: PacketBuf,
        plan: &SuperFrame,
    ) -> Result<(PacketBuf, Vec<PacketBuf>), DeviceError> {
        let n = plan.segments();
        let mut more = Vec::with_capacity(n - 1);
        for i in 1..n {
            let (_, len) = plan.segment(i);
            let mut segment = self.segment_buffer(len)?;
            plan.cut(frame.data(), i, segment.data_mut());
            more.push(segment);
        }
        plan.first_in_place(frame.data_mut());
        let (_, first) = plan.segment(0);
        frame
            .trim_back(frame.len() - first)
            .map_err(|_| DeviceError::QueueFull)?;
        self.stats.tx_super_frames += 1;
        self.stats.tx_segments += n as u64;
        self.stats.tx_csum_offloaded += n as u64;
        Ok((frame, more))
    }
    /// The segments of a super-frame whose data lies in its fragments (device work): each
    /// gets headers of its own, its data stays where it is, as slices of those fragments
    /// (Linux's GSO shares page fragments between the segments it cuts the same way), and
    /// the NIC reads it once, for the checksum and the FCS together
    /// ([`fcs_completing_checksum`](Self::fcs_completing_checksum)), and copies none of it.
    /// (Any of its data that lay in the frame's window is copied behind its headers.)
    /// Below [`BY_REFERENCE_MIN`] a segment is cut into a buffer of its own, copied and
    /// summed. A receiving NIC that reads frames whole gathers them.
    fn cut_parts(
        &mut self,
        s: impl Sampling,
        frame: PacketBuf,
        plan: &SuperFrame,
        cx: &DeviceContext<'_>,
    ) -> Result<(), DeviceError> {
        let by_reference = plan.mss() >= BY_REFERENCE_MIN;
        let mut segments = {
            let _device = cx.ledger.device_work(s);
            let n = plan.segments();
            let mut segments = Vec::with_capacity(n);
            for i in 0..n {
                segments.push(if by_reference {
                    self.cut_by_reference(&frame, plan, i)?
                } else {
                    let (_, len) = plan.segment(i);
                    let mut segment = self.segment_buffer(len)?;
                    plan.cut_with(frame.data(), i, segment.data_mut(), |range, out| {
                        copy_and_sum_parts(&frame, range, out)
                    });
                    Self::append_fcs(&mut segment)?;
                    segment
                });
            }
            if by_reference {
                self.stats.tx_fragments_passed += n as u64;
                cx.ledger
                    .counters()
                    .add(Counter::DriverTxFragmentsPassed, n as u64);
            } else {
                self.stats.tx_gathered += 1;
            }
            self.stats.tx_super_frames += 1;
            self.stats.tx_segments += n as u64;
            self.stats.tx_csum_offloaded += n as u64;
            segments
        };
        // The frame's own buffer (its headers) is done with; its block serves later
        // segments, and the loaned fragments are let go.
        self.segment_pool.free(frame);
        let frames = segments.len() as u64;
        let bytes = segments
            .iter()
            .map(|f| (f.total_len() - FCS_LEN) as u64)
            .sum();
        let first = segments.remove(0);
        let entry = WireFrame {
            frame: first,
            more: (!segments.is_empty()).then(|| Box::new(segments)),
            sent_at: cx.now,
        };
        self.enqueue(s, entry, frames, bytes, cx)
    }

    /// A frame with fragments (gathered first) or a super-frame the NIC cuts: the general
    /// transmit path.
    fn transmit_gathered_or_cut(
        &mut self,
        s: impl Sampling,
        frame: PacketBuf,
        meta: TxMeta,
        cx: &DeviceContext<'_>,
    ) -> Result<(), DeviceError> {
        let len = frame.total_len();
        let max = self.config.max_frame_len();
        let caps = self.config.checksum_offload;
        let dma_frags = frame.has_frags() && self.config.copy_mode == CopyMode::Dma;
        // A zero-copy super-frame on a DMA NIC: cut into segments that keep their data
        // where it is (`cut_parts`), not gathered into one frame first and cut from that.
        if dma_frags && meta.gso_size != 0 && self.config.segments() && caps.l4_tx {
            if let Some(plan) = SuperFrame::plan_parts(frame.data(), len, &meta) {
                self.check_room(plan.segment_frame_len(), max, cx)?;
                return self.cut_parts(s, frame, &plan, cx);
            }
        }
        // DMA hands a frame to the other end as the same buffer, and the fragments of a TCP
        // segment go with it, uncopied, when the NIC has nothing to do to their bytes but
        // read them (a checksum to complete, which it sums where they lie, from a page of
        // data on; nothing to cut): data a stack sent by reference, or loaned, stays where
        // it is (other protocols' it would copy; they are gathered below, device work).
        // The FCS, taken over the pieces, ends the window, before the fragments, so that it
        // comes off as any frame's does; a receiving NIC that reads frames whole gathers
        // them.
        if dma_frags
            && (meta.l4_checksum.is_none() || caps.l4_tx && len - frame.len() >= BY_REFERENCE_MIN)
            && !(meta.gso_size != 0 && self.config.segments() && !caps.l4_tx)
            && frame.tailroom() >= FCS_LEN
            && offload::starts_whole_tcp_segment(frame.data())
        {
            self.check_room(len, max, cx)?;
            let mut frame = frame;
            self.software_offloads(s, frame.data_mut(), meta, false, cx);
            {
                let _device = cx.ledger.device_work(s);
                // A transport checksum: completed over the window first, then the
                // fragments summed where they lie, as the FCS reads them.
                let summed = meta.l4_checksum.map(|_| (frame.len(), 0));
                self.device_offloads(frame.data_mut(), meta, summed);
                frame.set_tx_offload(TxOffload::default());
                let sum = match meta.l4_checksum {
                    Some((start, offset))
                        if offload::checksum_field_fits(
                            frame.len(),
                            start.into(),
                            offset.into(),
                        ) =>
                    {
                        let (start, offset) = (usize::from(start), usize::from(offset));
                        self.fcs_completing_checksum(&mut frame, start, start + offset)
                    }
                    _ => fcs_parts(
                        std::iter::once(frame.data()).chain(frame.frags().iter().map(|f| &f[..])),
                    ),
                };
                frame
                    .append(FCS_LEN)
                    .map_err(|_| DeviceError::QueueFull)?
                    .copy_from_slice(&sum);
            }
            self.stats.tx_fragments_passed += 1;
            cx.ledger.counters().inc(Counter::DriverTxFragmentsPassed);
            let entry = WireFrame {
                frame,
                more: None,
                sent_at: cx.now,
            };
            return self.enqueue(s, entry, 1, len as u64, cx);
        }
        // Scatter-gather: the frame's fragments (loaned data, a zero-copy send) are read
        // where they are, into one frame.
        let (mut frame, in_device_memory, summed) = if frame.has_frags() {
            let sum_from = meta
                .l4_checksum
                .filter(|_| self.config.checksum_offload.l4_tx)
                .map(|(start, _)| usize::from(start));
            let (frame, summed) = self.gather(s, frame, sum_from, cx)?;
            (frame, self.config.copy_mode == CopyMode::Pio, summed)
        } else {
            (frame, false, None)
        };
        // A super-frame the NIC cuts may be as long as the largest datagram (its IPv4
        // total length, which the plan checks against the frame, cannot say more), as
        // long as its segments fit the MTU; anything else must fit the MTU itself.
        let plan = if meta.gso_size != 0 && self.config.segments() {
            SuperFrame::plan(frame.data(), &meta)
        } else {
            None
        };
        match &plan {
            None => self.check_room(len, max, cx)?,
            Some(p) => self.check_room(p.segment_frame_len(), max, cx)?,
        }
        self.software_offloads(s, frame.data_mut(), meta, plan.is_some(), cx);
        let out = self.device_copy(s, frame, in_device_memory, plan.is_some(), len, cx)?;
        // The device's work, as its DMA engine reads the frame: checksums, segments, FCS.
        let (first, more) = {
            let _device = cx.ledger.device_work(s);
            let (mut first, mut more) = match &plan {
                Some(p) => self.cut(out, p)?,
                None => {
                    let mut out = out;
                    self.device_offloads(out.data_mut(), meta, summed);
                    (out, Vec::new())
                }
            };
            for f in std::iter::once(&mut first).chain(more.iter_mut()) {
                // Nothing is left for anyone to do to it.
                f.set_tx_offload(TxOffload::default());
                Self::append_fcs(f)?;
            }
            (first, more)
        };
        let frames = 1 + more.len() as u64;
        let bytes = std::iter::once(&first)
            .chain(&more)
            .map(|f| (f.len() - FCS_LEN) as u64)
            .sum::<u64>();
        let entry = WireFrame {
            frame: first,
            more: (!more.is_empty()).then(|| Box::new(more)),
            sent_at: cx.now,
        };
        self.enqueue(s, entry, frames, bytes, cx)
    }

    /// Whether a frame of `len` bytes (for a super-frame, its segments' length) may be
    /// sent now: it fits `max`, the peer is there and the transmit ring has a slot.
    #[inline]
    fn check_room(
        &mut self,
        len: usize,
        max: usize,
        cx: &DeviceContext<'_>,
    ) -> Result<(), DeviceError> {
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
        Ok(())
    }

    /// The frame (`len` bytes) where the device reads it from: copied into a device block
    /// with PIO (unless `in_device_memory` already), the buffer itself with DMA, copied
    /// into one with room for the FCS if it has none (unless `cutting`: a super-frame's
    /// buffer ends up holding its first segment, with room to spare).
    #[inline]
    fn device_copy(
        &mut self,
        s: impl Sampling,
        frame: PacketBuf,
        in_device_memory: bool,
        cutting: bool,
        len: usize,
        cx: &DeviceContext<'_>,
    ) -> Result<PacketBuf, DeviceError> {
        match self.config.copy_mode {
            CopyMode::Pio if in_device_memory => Ok(frame),
            CopyMode::Pio => {
                let mut block = {
                    // Device memory: the model's, not the host's.
                    let _device = cx.ledger.device_work(s);
                    self.device_block(len)?
                };
                let _copy = cx
                    .ledger
                    .probe(s, Layer::Driver, Side::Send, Op::DeviceCopy);
                block
                    .extend_from_slice(frame.data())
                    .map_err(|_| DeviceError::QueueFull)?;
                Ok(block)
            }
            CopyMode::Dma if cutting || frame.tailroom() >= FCS_LEN => Ok(frame),
            CopyMode::Dma => {
                self.stats.tx_bounced += 1;
                cx.ledger.counters().inc(Counter::DriverTxBounce);
                let _copy = cx
                    .ledger
                    .probe(s, Layer::Driver, Side::Send, Op::DeviceCopy);
                let mut b = PacketBuf::new(len, frame.headroom(), FCS_LEN)
                    .map_err(|_| DeviceError::QueueFull)?;
                b.data_mut().copy_from_slice(frame.data());
                Ok(b)
            }
        }
    }

    /// Puts an entry of `frames` frames and `bytes` bytes (FCS not counted) on the
    /// transmit ring, which `check_room` found a slot in.
    #[inline(always)]
    fn enqueue(
        &mut self,
        s: impl Sampling,
        entry: WireFrame,
        frames: u64,
        bytes: u64,
        cx: &DeviceContext<'_>,
    ) -> Result<(), DeviceError> {
        let pushed = {
            let _q = cx
                .ledger
                .probe(s, Layer::Driver, Side::Send, Op::DeviceQueue);
            self.tx.push(entry)
        };
        if pushed.is_err() {
            // Cannot happen (we are the only producer and checked), but stays typed.
            self.stats.tx_queue_full += 1;
            cx.ledger.counters().inc(Counter::DriverDropQueueFull);
            return Err(DeviceError::QueueFull);
        }
        self.stats.tx_frames += frames;
        self.stats.tx_bytes += bytes;
        cx.ledger.counters().inc(Counter::DriverFramesOut);
        Ok(())
    }
}

/// A piece of a frame's bytes: its window, or one of its fragments.
enum Piece<'a> {
    Window(&'a [u8]),
    Frag(&'a ExtBuf),
}

impl Piece<'_> {
    fn bytes(&self) -> &[u8] {
        match self {
            Piece::Window(w) => w,
            Piece::Frag(f) => f,
        }
    }
}

/// Calls `each` with every piece of `frame` that bytes `range` cover (offsets over its
/// window, then its fragments, as if they were one buffer), in order, and the part of the
/// piece they cover.
fn for_each_piece<'a>(
    frame: &'a PacketBuf,
    range: std::ops::Range<usize>,
    mut each: impl FnMut(Piece<'a>, std::ops::Range<usize>),
) {
    let pieces =
        std::iter::once(Piece::Window(frame.data())).chain(frame.frags().iter().map(Piece::Frag));
    let mut at = 0;
    for piece in pieces {
        let (start, end) = (at, at + piece.bytes().len());
        at = end;
        if end <= range.start {
            continue;
        }
        if start >= range.end {
            break;
        }
        each(
            piece,
            range.start.max(start) - start..range.end.min(end) - start,
        );
    }
}

/// Copies bytes `range` of `frame` (offsets over its window, then its fragments, as if
/// they were one buffer) into `out`, summing them in the same pass; returns the sum.
fn copy_and_sum_parts(frame: &PacketBuf, range: std::ops::Range<usize>, out: &mut [u8]) -> u16 {
    let mut acc = Accumulator::new();
    for_each_piece(frame, range, |piece, part| {
        let at = acc.len();
        acc.copy_and_add(&mut out[at..at + part.len()], &piece.bytes()[part]);
    });
    acc.sum()
}

/// Whether a frame given as its window (ending in the FCS) and its fragments is intact
/// (as `check_fcs_parts` says), and the fragments' sum (RFC 1071), from one read of them
/// (`Crc32::update_and_sum`).
fn check_fcs_summing_frags(window: &[u8], frags: &[ExtBuf]) -> (bool, Accumulator) {
    let mut sum = Accumulator::new();
    let Some((head, fcs)) = window.split_last_chunk::<FCS_LEN>() else {
        return (false, sum);
    };
    let mut crc = Crc32::new();
    crc.update(head);
    for f in frags {
        sum.add_sum(crc.update_and_sum(f), f.len());
    }
    (crc.finish().to_le_bytes() == *fcs, sum)
}

impl MemoryNic {
    /// The FCS of `frame` (its window, then its fragments), whose transport checksum
    /// (the field at `field`, for the datagram from `l4_start`; both offsets in the
    /// window) was completed over the window alone: the fragments are read once, both
    /// fed to the CRC and summed into the checksum (`Crc32::update_and_sum`), and the CRC,
    /// which saw the field before it was final, is then set right (`CrcPatch`). Two reads
    /// of each byte, one for the sum and one for the FCS, would cost about a third more
    /// (`examples/fused_passes.rs`).
    fn fcs_completing_checksum(
        &mut self,
        frame: &mut PacketBuf,
        l4_start: usize,
        field: usize,
    ) -> [u8; FCS_LEN] {
        let mut crc = Crc32::new();
        crc.update(frame.data());
        let mut rest = Accumulator::new();
        // The fragments follow the window: their place in the datagram decides how their
        // sums add.
        rest.add_sum(0, frame.len() - l4_start);
        for f in frame.frags() {
            let sum = crc.update_and_sum(f);
            rest.add_sum(sum, f.len());
        }
        let trailing = frame.total_len() - field - 2;
        let window = frame.data_mut();
        let before = [window[field], window[field + 1]];
        offload::add_to_checksum(window, field, rest.sum());
        let xor = [before[0] ^ window[field], before[1] ^ window[field + 1]];
        self.fcs_patch
            .after_xor(crc.finish(), &xor, trailing)
            .to_le_bytes()
    }

    /// Segment `i` of the super-frame `frame`, whose data lies in its fragments: a buffer
    /// of the NIC's with the segment's headers (and any of its data the frame's window
    /// held, copied), then the fragments' slices that hold the rest, by reference; the
    /// checksum and the FCS from one read of the data where it lies, the FCS at the
    /// window's end (as for any frame whose fragments go across).
    fn cut_by_reference(
        &mut self,
        frame: &PacketBuf,
        plan: &SuperFrame,
        i: usize,
    ) -> Result<PacketBuf, DeviceError> {
        let (range, _) = plan.segment(i);
        let window = frame.data();
        let headers = plan.header_len();
        let in_window = range.end.min(window.len()).saturating_sub(range.start);
        let mut segment = self.segment_buffer(headers + in_window)?;
        let mut acc = Accumulator::new();
        let mut cut = Ok(());
        for_each_piece(frame, range, |piece, part| match piece {
            // The window's part comes first, behind the headers.
            Piece::Window(w) => acc.copy_and_add(&mut segment.data_mut()[headers..], &w[part]),
            Piece::Frag(f) => match f.slice(part) {
                Ok(slice) => segment.push_frag(slice),
                // Not reached (the part lies within the fragment), but never a wrong sum.
                Err(_) => cut = Err(DeviceError::QueueFull),
            },
        });
        cut?;
        // The checksum over the headers and the window's part; the fragments' sum goes in
        // as the FCS reads them.
        plan.write_headers(window, i, &mut segment.data_mut()[..headers], acc.sum());
        let fcs = self.fcs_completing_checksum(&mut segment, plan.tcp_start(), plan.checksum_at());
        segment
            .append(FCS_LEN)
            .map_err(|_| DeviceError::QueueFull)?
            .copy_from_slice(&fcs);
        Ok(segment)
    }
}

impl MemoryNic {
    // The trait's methods for one sampling choice ([`Sampling`]).

    fn transmit_as(
        &mut self,
        s: impl Sampling,
        frame: PacketBuf,
        meta: TxMeta,
        cx: &DeviceContext<'_>,
    ) -> Result<(), DeviceError> {
        if frame.has_frags() || (meta.gso_size != 0 && self.config.segments()) {
            return self.transmit_gathered_or_cut(s, frame, meta, cx);
        }
        // An ordinary frame, what every small datagram is: the same steps without the
        // gather, the plan and the list of segments.
        let len = frame.len();
        self.check_room(len, self.config.max_frame_len(), cx)?;
        let mut frame = frame;
        let asks = meta.ipv4_checksum || meta.l4_checksum.is_some();
        if asks {
            self.software_offloads(s, frame.data_mut(), meta, false, cx);
        }
        let mut out = if self.config.copy_mode == CopyMode::Dma && frame.tailroom() >= FCS_LEN {
            // The DMA engine reads the buffer itself, which has room for the FCS.
            frame
        } else {
            self.device_copy(s, frame, false, false, len, cx)?
        };
        {
            // The device's work, as its DMA engine reads the frame: checksums, FCS.
            let _device = cx.ledger.device_work(s);
            if asks {
                self.device_offloads(out.data_mut(), meta, None);
            }
            // Nothing is left for anyone to do to it.
            out.set_tx_offload(TxOffload::default());
            Self::append_fcs(&mut out)?;
        }
        let entry = WireFrame {
            frame: out,
            more: None,
            sent_at: cx.now,
        };
        self.enqueue(s, entry, 1, len as u64, cx)
    }

    fn take_notification_as(&mut self, s: impl Sampling, cx: &DeviceContext<'_>) -> bool {
        self.pump(s, cx);
        let raised = self.coalescer.take(self.seen_until);
        if raised {
            self.stats.notifications += 1;
            cx.ledger.counters().inc(Counter::DriverNotifications);
        }
        raised
    }

    fn receive_as(&mut self, s: impl Sampling, cx: &DeviceContext<'_>) -> Option<RxFrame> {
        let mut out = None;
        self.receive_into(s, cx, |rx| out = Some(rx));
        out
    }

    /// The next received frame handed to `deliver`, if there is one (then true). In line
    /// in the receive burst, so that a frame is built where the batch takes it (see
    /// [`Device::receive_burst`] below).
    #[inline(always)]
    fn receive_into(
        &mut self,
        s: impl Sampling,
        cx: &DeviceContext<'_>,
        deliver: impl FnOnce(RxFrame),
    ) -> bool {
        self.pump(s, cx);
        loop {
            let arrived = {
                let _q = cx
                    .ledger
                    .probe(s, Layer::Driver, Side::Receive, Op::DeviceQueue);
                let Some(a) = self.rx_queue.pop_front() else {
                    return false;
                };
                let q = &self.rx_queue;
                self.coalescer.taken(q.len(), |i| q.get(i).map(|a| a.at));
                a
            };
            let mut rx = arrived.rx;
            let len = rx.frame.total_len();
            match self.config.copy_mode {
                CopyMode::Dma if self.config.header_split => {
                    let _device = cx.ledger.device_work(s);
                    // A payload moved means `mac_receive` left the check to this pass.
                    let (frame, moved) = self.split(rx.frame);
                    let checksum = if moved.is_some() && self.checks_received() {
                        self.check_received(frame.data(), moved)
                    } else {
                        rx.checksum
                    };
                    rx = RxFrame { frame, checksum };
                }
                // The buffer itself goes up.
                CopyMode::Dma => {}
                CopyMode::Pio => {
                    let host = {
                        let _alloc = cx
                            .ledger
                            .probe(s, Layer::Driver, Side::Receive, Op::BufAlloc);
                        self.host_buffer(len)
                    };
                    let Some(mut host) = host else {
                        // No memory for the copy: the frame is lost, as on a NIC whose
                        // driver cannot refill its ring.
                        self.stats.rx_overrun += 1;
                        cx.ledger.counters().inc(Counter::DriverDropRxOverrun);
                        self.reclaim(rx.frame);
                        continue;
                    };
                    {
                        let _copy =
                            cx.ledger
                                .probe(s, Layer::Driver, Side::Receive, Op::DeviceCopy);
                        host.data_mut().copy_from_slice(rx.frame.data());
                    }
                    let emptied = std::mem::replace(&mut rx.frame, host);
                    self.reclaim(emptied);
                }
            }
            self.stats.rx_frames += 1;
            self.stats.rx_bytes += len as u64;
            cx.ledger.counters().inc(Counter::DriverFramesIn);
            deliver(rx);
            return true;
        }
    }
}

impl Device for MemoryNic {
    fn caps(&self) -> DeviceCaps {
        DeviceCaps {
            mtu: self.config.mtu,
            has_crc: true,
            copy_mode: self.config.copy_mode,
            checksum_offload: self.config.checksum_offload,
            tso_max: if self.config.segments() { MAX_MTU } else { 0 },
            scatter_gather: true,
            by_reference_min: BY_REFERENCE_MIN,
            header_split: self.config.copy_mode == CopyMode::Dma && self.config.header_split,
        }
    }

    fn transmit(
        &mut self,
        frame: PacketBuf,
        meta: TxMeta,
        cx: &DeviceContext<'_>,
    ) -> Result<(), DeviceError> {
        // The unprobed copy through `transmit_unprobed` only, so that it has one caller
        // and is inlined there (as is the only copy in the probe-free build).
        if cx.ledger.sampled() {
            cold_path();
            self.transmit_as(Sampled, frame, meta, cx)
        } else {
            self.transmit_unprobed(frame, meta, cx)
        }
    }

    fn buffer_depot(&self) -> Option<Depot> {
        Some(self.depot.clone())
    }

    fn tx_ready(&self) -> bool {
        self.tx.is_abandoned() || self.tx.len() < self.tx.capacity()
    }

    /// An abandoned link takes (and loses) any number of frames, as `tx_ready` says.
    fn tx_room(&self) -> usize {
        if self.tx.is_abandoned() {
            usize::MAX
        } else {
            self.tx.capacity().saturating_sub(self.tx.len())
        }
    }

    fn take_notification(&mut self, cx: &DeviceContext<'_>) -> bool {
        crate::probe::ledger::sampled!(cx.ledger, s => self.take_notification_as(s, cx))
    }

    fn receive(&mut self, cx: &DeviceContext<'_>) -> Option<RxFrame> {
        if cx.ledger.sampled() {
            cold_path();
            self.receive_as(Sampled, cx)
        } else {
            self.receive_unprobed(cx)
        }
    }

    fn transmit_unprobed(
        &mut self,
        frame: PacketBuf,
        meta: TxMeta,
        cx: &DeviceContext<'_>,
    ) -> Result<(), DeviceError> {
        self.transmit_as(Unsampled, frame, meta, cx)
    }

    fn receive_unprobed(&mut self, cx: &DeviceContext<'_>) -> Option<RxFrame> {
        self.receive_as(Unsampled, cx)
    }

    /// The trait's loop with the NIC's own receive in line, so that each frame goes into
    /// the batch where it is built: through the default's call, a frame came back through
    /// memory as an `Option<RxFrame>` and was copied into the batch with a 16-byte load of
    /// stores narrower than it, which the CPU could not forward (86% of that loop's
    /// samples in `examples/udp_burst`).
    fn receive_burst(
        &mut self,
        cx: &DeviceContext<'_>,
        batch: &mut Vec<RxFrame>,
        max: usize,
        sampled: bool,
    ) -> bool {
        while batch.len() < max {
            let got = if sampled && cx.ledger.sampled() {
                cold_path();
                self.receive_into(Sampled, cx, |rx| batch.push(rx))
            } else {
                self.receive_into(Unsampled, cx, |rx| batch.push(rx))
            };
            if !got {
                return false;
            }
        }
        true
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
        if self.admits_next() {
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
            self.give_back(frame);
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

#[cfg(test)]
mod offload_tests;
