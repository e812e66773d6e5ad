//! Devices: where frames leave and enter the stack (the Driver layer of the ledger).
//!
//! A [`Device`] moves whole Ethernet frames (header onward; the frame check sequence is
//! the device's own business). Devices are middleware in the style of smoltcp's `phy`: a
//! pcap writer or a fault injector wraps any device and is itself a device.
//!
//! Notification and batching follow a NIC: the device raises a notification (an interrupt)
//! after N frames or T microseconds (interrupt coalescing, paper 004 §3.4), and the stack
//! drains a batch of frames per notification.
//!
//! | file | what |
//! |---|---|
//! | `memlink.rs` | [`MemoryLink`]: two [`MemoryNic`]s on a wire of memory, with the NIC model (MTU, FCS, PIO or DMA, queues, coalescing) |
//! | `ring.rs` | the lock-free single-producer, single-consumer ring each direction of the link runs on |
//! | `crc32.rs` | CRC-32 of IEEE 802.3 (slicing-by-16), the frame check sequence |
//! | `faults.rs` | [`FaultConfig`]: seeded drops, duplicates, reordering, delay and bit flips on the wire |
//! | `coalesce.rs` | interrupt coalescing: notify after N frames or T |
//! | `pcap.rs` | [`PcapWriter`]: captures any device's frames in a file tshark reads |

mod coalesce;
pub mod crc32;
pub mod faults;
pub mod memlink;
#[cfg(target_os = "linux")]
pub mod packet;
pub mod pcap;
pub mod queue;
pub mod ring;
#[cfg(target_os = "linux")]
pub mod tap;
#[cfg(target_os = "linux")]
pub mod vnet;

pub use faults::{FaultConfig, FaultConfigError, FaultStats};
pub use memlink::{ConfigError, MemoryLink, MemoryNic, NicConfig, NicStats};
pub use pcap::{PcapMode, PcapSink, PcapWriter};
pub use queue::{FrameQueue, QueueConfigError, QueueStats};

use crate::buf::{PacketBuf, TxOffload};
use crate::probe::Ledger;
use crate::time::Instant;

/// Who copies a frame between host memory and the device (paper 000 Table 2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CopyMode {
    /// Programmed I/O: the CPU copies each frame into (and out of) device memory, the
    /// "device copy" of paper 000, charged to the host as `Op::DeviceCopy`.
    Pio,
    /// DMA-like hand-off: the device takes the buffer itself; the CPU copies nothing.
    #[default]
    Dma,
}

/// Checksum work the device can take over (paper 004 §3.2). The flags exist from the
/// start; the stack uses them when its `checksum_offload` switch is on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ChecksumOffload {
    /// Fills in IPv4 header checksums on transmit.
    pub ipv4_tx: bool,
    /// Verifies IPv4 header checksums on receive.
    pub ipv4_rx: bool,
    /// Completes TCP and UDP checksums from a pseudo-header seed on transmit
    /// (Linux's CHECKSUM_PARTIAL).
    pub l4_tx: bool,
    /// Verifies TCP and UDP checksums on receive, or reports the raw sum.
    pub l4_rx: bool,
}

/// What a device is and can do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceCaps {
    /// The largest IP datagram a frame can carry (the link MTU).
    pub mtu: usize,
    /// Whether frames are protected by a CRC on the wire (checksum elision may rely on it,
    /// papers 000 and 003).
    pub has_crc: bool,
    pub copy_mode: CopyMode,
    pub checksum_offload: ChecksumOffload,
    /// TCP segmentation offload: the largest IPv4 datagram (a TCP super-segment) the
    /// device cuts into MTU-sized segments itself ([`TxMeta::gso_size`]); 0 when it does
    /// not segment. Only together with `checksum_offload.l4_tx`.
    pub tso_max: usize,
    /// Scatter-gather: the device reads a frame's external fragments
    /// ([`PacketBuf::frags`]: the loaned data of a zero-copy send, the shared blocks TCP
    /// sends by reference) itself, as a NIC's DMA engine follows a descriptor list, or
    /// hands them to the other end with the frame (the frame queue). Without it the stack
    /// copies them into the frame first (counted as `driver.tx_linearized`), and TCP
    /// sends from its ring.
    pub scatter_gather: bool,
    /// With `scatter_gather`: the least data a TCP segment must carry for the stack to
    /// send it by reference on this device (`Tuning::tcp_send_by_reference`), as a Linux
    /// driver's tx-copybreak names the size below which it copies a frame rather than map
    /// its pieces. Each such segment costs reference counts, a fragment list and, at the
    /// other end, a run in the receive buffer; what it saves depends on the device. The
    /// frame queue hands the fragments across as they are, so the receiver reads the
    /// sender's block (one copy at each end instead of two): worth it from 1,024 bytes
    /// (MTU 1500 on a frame queue: `lab peers --one tcp_bulk_1500 --system
    /// probestack_fast_queue --millis 400`, five alternated pairs, medians 38.6 → 41.5
    /// Gbit/s). The memory NIC reads each piece for its CRC (shorter pieces, slower) and
    /// saves one copy: from a page (at MTU 1500 by reference was slower there; see
    /// `memlink.rs`).
    pub by_reference_min: usize,
    /// Header/data split (paper 004 §3.1): the device places the payload of a TCP
    /// segment with at least a page of it, page-aligned, in a buffer of its own, so that
    /// zero-copy receive hands the application whole pages and copies the rest. Without
    /// it, zero-copy receive hands over as it came what a sender passed by reference and
    /// the device carried across (`scatter_gather`: its loan, its shared blocks).
    pub header_split: bool,
}

/// What the device says about a received frame's transport checksum.
///
/// Its tag is a whole word (`repr(u64)`): a device writes it into the receive batch with
/// one 8-byte store, and the stack's poll, moving each [`RxFrame`] out of the batch,
/// reads it with one 8-byte load, which the CPU forwards from that store. With a one-byte
/// tag the load spanned the narrower store and padding no one wrote, could not be
/// forwarded, and waited for the store to reach the cache: the hottest instruction of
/// `poll` in `examples/tcp_rr` on a frame queue (18% of its samples); the word costs 8
/// bytes a frame in the batch and took that harness from 491 to 448 ns a transaction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(u64)]
pub enum RxChecksum {
    /// Nothing: the stack verifies it.
    #[default]
    None,
    /// The device verified the IP and transport checksums.
    Verified,
    /// The device summed the frame from the IP payload onward; the stack adds the
    /// pseudo-header and checks.
    RawSum(u16),
}

/// A received frame and what the device knows about it.
#[derive(Debug)]
pub struct RxFrame {
    pub frame: PacketBuf,
    pub checksum: RxChecksum,
}

/// Transmit offload requests attached to a frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TxMeta {
    /// Fill in the IPv4 header checksum.
    pub ipv4_checksum: bool,
    /// Complete the transport checksum: the field at `checksum_offset` within the frame
    /// holds the pseudo-header sum, and the device sums from `checksum_start` to the end
    /// (Linux's `csum_start`/`csum_offset`, virtio-net's NEEDS_CSUM).
    pub l4_checksum: Option<(u16, u16)>,
    /// A TCP super-frame (with `l4_checksum` set): cut it into segments of this many data
    /// bytes, each with a copy of the headers (virtio-net's GSO_TCPV4 `gso_size`); 0 for
    /// an ordinary frame.
    pub gso_size: u16,
}

impl TxMeta {
    /// The request for an Ethernet II frame carrying IPv4 whose buffer asks for
    /// `offload`: the IPv4 header's length and protocol place the transport checksum
    /// (16 bytes into TCP's header, 6 into UDP's).
    pub fn for_frame(frame: &[u8], offload: TxOffload) -> TxMeta {
        if !offload.l4_checksum {
            return TxMeta::default();
        }
        let (Some(&vihl), Some(&protocol)) = (frame.get(14), frame.get(23)) else {
            return TxMeta::default();
        };
        let start = 14 + usize::from(vihl & 0x0f) * 4;
        let offset = match protocol {
            6 => 16,
            17 => 6,
            _ => return TxMeta::default(),
        };
        TxMeta {
            ipv4_checksum: false,
            l4_checksum: Some((start as u16, offset)),
            gso_size: offload.gso_size,
        }
    }
}

/// Why a device refused a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceError {
    /// The transmit queue is full; try again after the next poll.
    QueueFull,
    /// The frame is larger than the MTU allows.
    TooLarge { len: usize, max: usize },
    /// The link is down (the other end is gone).
    LinkDown,
}

impl std::fmt::Display for DeviceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceError::QueueFull => write!(f, "transmit queue full"),
            DeviceError::TooLarge { len, max } => {
                write!(
                    f,
                    "frame of {len} bytes exceeds the device maximum of {max}"
                )
            }
            DeviceError::LinkDown => write!(f, "link down"),
        }
    }
}

impl std::error::Error for DeviceError {}

/// What a device needs from the stack on each call: the time, and the ledger to charge
/// host work to (and to set device work apart with [`Ledger::device_work`]).
#[derive(Clone, Copy)]
pub struct DeviceContext<'a> {
    pub now: Instant,
    pub ledger: &'a Ledger,
}

/// A network device.
pub trait Device {
    fn caps(&self) -> DeviceCaps;

    /// Sends one frame (Ethernet header onward). With DMA the device keeps the buffer;
    /// with PIO it copies the frame and the buffer can be reused. The frame has external
    /// fragments after its window only if [`DeviceCaps::scatter_gather`] says the device
    /// takes them.
    fn transmit(
        &mut self,
        frame: PacketBuf,
        meta: TxMeta,
        cx: &DeviceContext<'_>,
    ) -> Result<(), DeviceError>;

    /// Whether the transmit queue has room for a frame now, so that the stack need not
    /// build a frame only to lose it to [`DeviceError::QueueFull`] (`transmit` consumes
    /// the frame even when it refuses it). A link that is down says yes: its frames are
    /// lost ([`DeviceError::LinkDown`]) as on a wire with nobody at the other end, and the
    /// protocols' timers deal with that; waiting for room would wait forever. Devices
    /// that cannot tell say yes.
    fn tx_ready(&self) -> bool {
        true
    }

    /// How many frames the transmit queue has room for now (at least one exactly when
    /// [`tx_ready`](Self::tx_ready)), so that a sender of several frames at once (TCP's
    /// software segmentation) sends no more than fit. Devices that cannot tell say
    /// `usize::MAX` when ready.
    fn tx_room(&self) -> usize {
        if self.tx_ready() {
            usize::MAX
        } else {
            0
        }
    }

    /// Whether the device has raised a notification since the last call (an interrupt,
    /// after its coalescing rule). Clears it.
    fn take_notification(&mut self, cx: &DeviceContext<'_>) -> bool;

    /// The next received frame, if any. The stack takes frames after a notification, up
    /// to its batch budget, through [`receive_burst`](Self::receive_burst), whose default
    /// calls this.
    fn receive(&mut self, cx: &DeviceContext<'_>) -> Option<RxFrame>;

    /// [`transmit`](Self::transmit), called from the stack's copy for unprobed messages
    /// ([`crate::probe::Unsampled`]), where no probe records: a device that probes its own
    /// work runs its unprobed copy without asking the ledger which to run. The default
    /// asks (calls `transmit`).
    fn transmit_unprobed(
        &mut self,
        frame: PacketBuf,
        meta: TxMeta,
        cx: &DeviceContext<'_>,
    ) -> Result<(), DeviceError> {
        self.transmit(frame, meta, cx)
    }

    /// [`receive`](Self::receive), called from the stack's copy for unprobed messages; see
    /// [`transmit_unprobed`](Self::transmit_unprobed).
    fn receive_unprobed(&mut self, cx: &DeviceContext<'_>) -> Option<RxFrame> {
        self.receive(cx)
    }

    /// Received frames appended to `batch` until it holds `max` or the device has no
    /// more: the stack's receive loop, one call per batch (as DPDK's `rx_burst`) instead
    /// of one dynamically dispatched call per frame, so that each frame goes from the
    /// device's queue into the batch without a trip through a returned `Option` in
    /// memory. `sampled` says which copy to run ([`receive`](Self::receive), or
    /// [`receive_unprobed`](Self::receive_unprobed) for unprobed messages). Returns
    /// whether the batch was filled to `max`.
    fn receive_burst(
        &mut self,
        cx: &DeviceContext<'_>,
        batch: &mut Vec<RxFrame>,
        max: usize,
        sampled: bool,
    ) -> bool {
        while batch.len() < max {
            let frame = if sampled {
                self.receive(cx)
            } else {
                self.receive_unprobed(cx)
            };
            match frame {
                Some(f) => batch.push(f),
                None => return false,
            }
        }
        true
    }

    /// When the device next needs a poll (a coalescing timer, a delayed frame).
    fn next_deadline(&self) -> Option<Instant>;

    /// Gives a buffer the stack no longer needs back to the device's receive pool, so
    /// DMA hand-off can reuse it. Devices without a pool drop it.
    fn recycle(&mut self, _frame: PacketBuf) {}

    /// The buffer depot the stack's pool should share with the stack at the other end,
    /// when the device hands buffers across without copying (the memory link).
    fn buffer_depot(&self) -> Option<crate::buf::Depot> {
        None
    }

    /// A file descriptor that becomes readable when frames arrive, for a runner's epoll
    /// (a TAP or packet socket). In-memory devices have none: a runner polls them.
    fn readiness_fd(&self) -> Option<i32> {
        None
    }

    /// The device's own counters, by name, for a program to print (the stack's are in
    /// its ledger). Devices without any return none.
    fn counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
}

impl<D: Device + ?Sized> Device for Box<D> {
    fn caps(&self) -> DeviceCaps {
        (**self).caps()
    }
    fn transmit(
        &mut self,
        frame: PacketBuf,
        meta: TxMeta,
        cx: &DeviceContext<'_>,
    ) -> Result<(), DeviceError> {
        (**self).transmit(frame, meta, cx)
    }
    fn tx_ready(&self) -> bool {
        (**self).tx_ready()
    }
    fn tx_room(&self) -> usize {
        (**self).tx_room()
    }
    fn take_notification(&mut self, cx: &DeviceContext<'_>) -> bool {
        (**self).take_notification(cx)
    }
    fn receive(&mut self, cx: &DeviceContext<'_>) -> Option<RxFrame> {
        (**self).receive(cx)
    }
    fn transmit_unprobed(
        &mut self,
        frame: PacketBuf,
        meta: TxMeta,
        cx: &DeviceContext<'_>,
    ) -> Result<(), DeviceError> {
        (**self).transmit_unprobed(frame, meta, cx)
    }
    fn receive_unprobed(&mut self, cx: &DeviceContext<'_>) -> Option<RxFrame> {
        (**self).receive_unprobed(cx)
    }
    fn receive_burst(
        &mut self,
        cx: &DeviceContext<'_>,
        batch: &mut Vec<RxFrame>,
        max: usize,
        sampled: bool,
    ) -> bool {
        (**self).receive_burst(cx, batch, max, sampled)
    }
    fn next_deadline(&self) -> Option<Instant> {
        (**self).next_deadline()
    }
    fn recycle(&mut self, frame: PacketBuf) {
        (**self).recycle(frame)
    }
    fn buffer_depot(&self) -> Option<crate::buf::Depot> {
        (**self).buffer_depot()
    }
    fn readiness_fd(&self) -> Option<i32> {
        (**self).readiness_fd()
    }
    fn counters(&self) -> Vec<(&'static str, u64)> {
        (**self).counters()
    }
}
