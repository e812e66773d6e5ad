//! The virtio-net header, and the frame handling both real devices share: the TAP
//! ([`super::tap`]) and the AF_PACKET socket ([`super::packet`]) put the same 10-byte
//! header in front of every frame they read or write, and act on it the same way
//! (`reference/tap-offload.md` §1.2–1.4 and §3.1).
//!
//! # The header
//!
//! `struct virtio_net_hdr` of `include/uapi/linux/virtio_net.h` (Virtio 1.x §5.1.6, "the
//! legacy header"): `flags`, `gso_type`, then `hdr_len`, `gso_size`, `csum_start` and
//! `csum_offset`, 16 bits each in the host's byte order (the legacy layout; neither device
//! asks for little-endian). [`VnetHeader`] is its parsed form. The 12-byte variant only
//! adds `num_buffers`, which neither device uses.
//!
//! # Receiving (`accept_header`, `receive`)
//!
//! - **NEEDS_CSUM**: the transport checksum field at `csum_start + csum_offset` holds the
//!   pseudo-header sum over the whole L4 length (Linux's CHECKSUM_PARTIAL, the seed of
//!   `tcp_v4_send_check`); the device sums from `csum_start` to the end of the frame with
//!   the field in place, complements and stores the result (`complete_checksum`; 0 is
//!   stored as `0xFFFF`, which verifies the same and keeps UDP's "no checksum" meaning out
//!   of it, RFC 768).
//! - **DATA_VALID**: the kernel says the checksum was verified (CHECKSUM_UNNECESSARY).
//! - A TCP/IPv4 **GSO super-frame** (`gso_type` TCPV4, ECN bit allowed) is handed up whole:
//!   the stack takes a TCP segment longer than the MTU. `hdr_len` is only a hint
//!   (`include/linux/virtio_net.h` calls it so) and is not used.
//! - Anything else is dropped and counted: unknown flags, other GSO types, a GSO frame
//!   without NEEDS_CSUM or segment size, checksum offsets outside the frame or at an odd
//!   offset. Nothing the kernel hands up can make the device panic.
//!
//! Whether a completed or DATA_VALID frame is reported to the stack as
//! [`RxChecksum::Verified`] is the device's choice (`trust`): the TAP always reports it
//! (without `TUN_F_CSUM` the kernel sends it no partial checksums anyway); the packet
//! device only with offload on, so that without it the stack checks every frame itself.
//!
//! # Sending (`transmit`)
//!
//! The header is zero unless the stack asks for a transport checksum
//! ([`TxMeta::l4_checksum`]): with checksum offload the header carries NEEDS_CSUM and the
//! offsets and the kernel takes it from there (it checks them in `virtio_net_hdr_to_skb`);
//! without, the device completes the checksum in software first. An IPv4 header checksum
//! ([`TxMeta::ipv4_checksum`]) is always filled in here: the kernel never does it for a
//! frame written to it. A TCP super-frame ([`TxMeta::gso_size`], sent when the device
//! reports `tso_max`, i.e. with offload on) also carries GSO_TCPV4, the MSS and the
//! header length, and the kernel cuts it; its seed covers the whole super-frame, Linux's
//! convention (`reference/tap-offload.md` §1.4).

use std::io;

use super::memlink::offload::{checksum_field_fits, complete_checksum, fill_ipv4_checksum};
use super::{
    ChecksumOffload, CopyMode, DeviceCaps, DeviceContext, DeviceError, RxChecksum, RxFrame, TxMeta,
};
use crate::buf::{Depot, PacketBuf, Pool, PoolConfig, CLUSTER_SIZE, HEADROOM, JUMBO64K_SIZE};
use crate::probe::{Counter, Layer, Op, Sampling, Side, TESTED};

/// The length of the legacy `struct virtio_net_hdr`, which both devices use.
pub const VNET_HDR_LEN: usize = 10;

/// `VIRTIO_NET_HDR_F_NEEDS_CSUM`: the checksum is partial (a pseudo-header seed).
pub const VNET_F_NEEDS_CSUM: u8 = 1;
/// `VIRTIO_NET_HDR_F_DATA_VALID`: the checksum was verified (receive only).
pub const VNET_F_DATA_VALID: u8 = 2;
/// `VIRTIO_NET_HDR_F_RSC_INFO`: receive-segment-coalescing information in the GSO fields.
pub const VNET_F_RSC_INFO: u8 = 4;
/// `VIRTIO_NET_HDR_GSO_NONE`.
pub const VNET_GSO_NONE: u8 = 0;
/// `VIRTIO_NET_HDR_GSO_TCPV4`: a TCP/IPv4 super-frame, `gso_size` the MSS.
pub const VNET_GSO_TCPV4: u8 = 1;
/// `VIRTIO_NET_HDR_GSO_ECN`: ored into the GSO type, the segments carry ECN (CWR).
pub const VNET_GSO_ECN: u8 = 0x80;

pub(crate) const ETHERNET_HEADER_LEN: usize = 14;

/// The largest TCP super-frame sent (as an IP datagram): the kernel's `gso_max_size` is
/// 65,536 and the IPv4 total length field holds 65,535.
pub(crate) const MAX_SUPER_FRAME: usize = 65535;

/// Bytes of frame a receive block holds: the rest of a 64 KiB-class block after
/// [`HEADROOM`], more than the 65,550 bytes the largest super-frame takes (a 65,535-byte
/// IP datagram, its Ethernet header and a VLAN tag).
pub(crate) const RX_WINDOW: usize = JUMBO64K_SIZE - HEADROOM;

/// Frames up to this length are copied into a 2 KiB cluster on receive.
const SMALL_FRAME: usize = CLUSTER_SIZE - HEADROOM;

/// A `struct virtio_net_hdr`, its fields in the host's order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VnetHeader {
    pub flags: u8,
    pub gso_type: u8,
    pub hdr_len: u16,
    pub gso_size: u16,
    pub csum_start: u16,
    pub csum_offset: u16,
}

impl VnetHeader {
    /// Reads a header (16-bit fields in the host's byte order, the legacy layout).
    pub fn parse(bytes: &[u8; VNET_HDR_LEN]) -> VnetHeader {
        let field = |i: usize| u16::from_ne_bytes([bytes[i], bytes[i + 1]]);
        VnetHeader {
            flags: bytes[0],
            gso_type: bytes[1],
            hdr_len: field(2),
            gso_size: field(4),
            csum_start: field(6),
            csum_offset: field(8),
        }
    }

    /// The header's bytes.
    pub fn to_bytes(&self) -> [u8; VNET_HDR_LEN] {
        let mut b = [0u8; VNET_HDR_LEN];
        b[0] = self.flags;
        b[1] = self.gso_type;
        b[2..4].copy_from_slice(&self.hdr_len.to_ne_bytes());
        b[4..6].copy_from_slice(&self.gso_size.to_ne_bytes());
        b[6..8].copy_from_slice(&self.csum_start.to_ne_bytes());
        b[8..10].copy_from_slice(&self.csum_offset.to_ne_bytes());
        b
    }

    /// A header asking the kernel to finish a partial checksum: sum from `start` (from
    /// the first byte of the Ethernet frame) to the end, store at `start + offset`.
    pub fn partial_checksum(start: u16, offset: u16) -> VnetHeader {
        VnetHeader {
            flags: VNET_F_NEEDS_CSUM,
            csum_start: start,
            csum_offset: offset,
            ..VnetHeader::default()
        }
    }
}

/// What a device with virtio-net headers did: the counters the TAP and the packet device
/// share.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VnetStats {
    /// Frames handed to the stack, and their bytes (Ethernet header onward).
    pub rx_frames: u64,
    pub rx_bytes: u64,
    /// Frames handed to the kernel, and their bytes (Ethernet header onward).
    pub tx_frames: u64,
    pub tx_bytes: u64,
    /// Received frames with a partial checksum (NEEDS_CSUM), completed in software only
    /// when the device does not vouch for them to the stack (`trust` off).
    pub rx_csum_partial: u64,
    /// Received frames the kernel marked as verified (DATA_VALID).
    pub rx_csum_valid: u64,
    /// Received TCP/IPv4 super-frames (GSO), handed up whole.
    pub rx_gso_frames: u64,
    /// The largest frame received, in bytes.
    pub rx_largest: u64,
    /// Received frames dropped: a header that made no sense (unknown flags or GSO type,
    /// checksum offsets outside the frame) or a read shorter than the header.
    pub rx_malformed: u64,
    /// Received frames dropped because they did not fit the receive block.
    pub rx_too_long: u64,
    /// Reads that failed with anything but EAGAIN or EINTR.
    pub rx_errors: u64,
    /// Receive buffers that could not be allocated (the frame stays in the kernel).
    pub rx_no_buffer: u64,
    /// Frames sent with NEEDS_CSUM for the kernel to finish.
    pub tx_csum_offloaded: u64,
    /// TCP super-frames sent for the kernel to segment (GSO_TCPV4).
    pub tx_gso_frames: u64,
    /// Transport checksums the device completed in software before sending.
    pub tx_csum_software: u64,
    /// Sends refused because the kernel's queue was full (EAGAIN, ENOBUFS).
    pub tx_queue_full: u64,
    /// Sends refused because the frame was longer than the MTU allows.
    pub tx_too_large: u64,
    /// Writes that failed otherwise (or wrote less than the frame), and checksum requests
    /// whose offsets lay outside the frame (sent without the checksum).
    pub tx_errors: u64,
}

impl VnetStats {
    /// The counters by name, in a fixed order (for [`super::Device::counters`]).
    pub fn named(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("rx_frames", self.rx_frames),
            ("rx_bytes", self.rx_bytes),
            ("rx_gso_frames", self.rx_gso_frames),
            ("rx_largest", self.rx_largest),
            ("rx_csum_partial", self.rx_csum_partial),
            ("rx_csum_valid", self.rx_csum_valid),
            ("rx_malformed", self.rx_malformed),
            ("rx_too_long", self.rx_too_long),
            ("rx_errors", self.rx_errors),
            ("rx_no_buffer", self.rx_no_buffer),
            ("tx_frames", self.tx_frames),
            ("tx_bytes", self.tx_bytes),
            ("tx_csum_offloaded", self.tx_csum_offloaded),
            ("tx_gso_frames", self.tx_gso_frames),
            ("tx_csum_software", self.tx_csum_software),
            ("tx_queue_full", self.tx_queue_full),
            ("tx_too_large", self.tx_too_large),
            ("tx_errors", self.tx_errors),
        ]
    }
}

/// What a received frame's virtio-net header said, once acted on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RxHeader {
    pub checksum: RxChecksum,
    /// The frame had a partial checksum (NEEDS_CSUM).
    pub partial: bool,
    /// The kernel had verified the checksum (DATA_VALID).
    pub valid: bool,
    /// A TCP/IPv4 super-frame.
    pub gso: bool,
}

/// Reads a received frame's header and prepares the frame: completes a partial checksum
/// if `complete` (a device that vouches for the frame to the stack has no reason to: the
/// stack will not look, and Linux's own sockets do not either), recognises a super-frame. `None`: the header makes no sense for this frame, which is
/// dropped (unknown flags, a GSO type other than TCPv4, a GSO frame without NEEDS_CSUM or
/// with no segment size, checksum offsets outside the frame or at an odd offset); the
/// frame is then untouched.
pub(crate) fn accept_header(
    hdr: &[u8; VNET_HDR_LEN],
    frame: &mut [u8],
    complete: bool,
) -> Option<RxHeader> {
    let h = VnetHeader::parse(hdr);
    if h.flags & !(VNET_F_NEEDS_CSUM | VNET_F_DATA_VALID | VNET_F_RSC_INFO) != 0 {
        return None;
    }
    let gso = match h.gso_type & !VNET_GSO_ECN {
        VNET_GSO_NONE => false,
        VNET_GSO_TCPV4 if h.gso_size > 0 && h.flags & VNET_F_NEEDS_CSUM != 0 => true,
        _ => return None,
    };
    let mut out = RxHeader {
        checksum: RxChecksum::None,
        partial: false,
        valid: false,
        gso,
    };
    if h.flags & VNET_F_NEEDS_CSUM != 0 {
        let (start, offset) = (usize::from(h.csum_start), usize::from(h.csum_offset));
        let fits = checksum_field_fits(frame.len(), start, offset);
        if !fits || (complete && !complete_checksum(frame, start, offset)) {
            return None;
        }
        out.partial = true;
        out.checksum = RxChecksum::Verified;
    } else if h.flags & VNET_F_DATA_VALID != 0 {
        out.valid = true;
        out.checksum = RxChecksum::Verified;
    }
    Some(out)
}

/// What a device with virtio-net headers tells the stack: no CRC (a frame never crossed
/// a wire that would have checked it, so no checksum may be elided on its account); PIO
/// (the kernel copies every frame in and out); and with `offload`, transport checksums
/// left to the kernel and received ones vouched for, and TCP super-frames, which the
/// kernel takes on any write with a virtio-net header.
pub(crate) fn caps(mtu: usize, offload: bool) -> DeviceCaps {
    DeviceCaps {
        scatter_gather: false,
        by_reference_min: usize::MAX,
        header_split: false,
        mtu,
        has_crc: false,
        copy_mode: CopyMode::Pio,
        checksum_offload: ChecksumOffload {
            ipv4_tx: false,
            ipv4_rx: offload,
            l4_tx: offload,
            l4_rx: offload,
        },
        tso_max: if offload { MAX_SUPER_FRAME } else { 0 },
    }
}

/// Acts on a frame's transmit requests and returns the header to send in front of it:
/// fills in the IPv4 header checksum; with `csum_offload` leaves the transport checksum to
/// the kernel (NEEDS_CSUM), else completes it here. Checksum work is charged to the
/// driver layer.
pub(crate) fn prepare_tx(
    s: impl Sampling,
    frame: &mut [u8],
    meta: TxMeta,
    csum_offload: bool,
    stats: &mut VnetStats,
    cx: &DeviceContext<'_>,
) -> [u8; VNET_HDR_LEN] {
    let len = frame.len();
    let mut hdr = VnetHeader::default();
    if meta.ipv4_checksum {
        let _p = cx.ledger.probe(s, Layer::Driver, Side::Send, Op::Checksum);
        if !fill_ipv4_checksum(frame) {
            stats.tx_errors += 1;
        }
    }
    if let Some((start, offset)) = meta.l4_checksum {
        let (at, o) = (usize::from(start), usize::from(offset));
        if !checksum_field_fits(len, at, o) {
            stats.tx_errors += 1;
        } else if csum_offload {
            hdr = VnetHeader::partial_checksum(start, offset);
            stats.tx_csum_offloaded += 1;
            if meta.gso_size != 0 && offset == 16 {
                // A TCP super-frame (tap-offload.md §1.4): the checksum field holds the
                // pseudo-header sum over the whole super-frame's length, Linux's seed
                // convention; `hdr_len` is the headers through TCP's options.
                let tcp_header = frame.get(at + 12).map_or(20, |b| usize::from(b >> 4) * 4);
                hdr.gso_type = VNET_GSO_TCPV4;
                hdr.gso_size = meta.gso_size;
                hdr.hdr_len = (at + tcp_header) as u16;
                stats.tx_gso_frames += 1;
            }
        } else {
            let _p = cx.ledger.probe(s, Layer::Driver, Side::Send, Op::Checksum);
            complete_checksum(frame, at, o);
            stats.tx_csum_software += 1;
        }
    }
    hdr.to_bytes()
}

/// The two buffers one frame is written from: the virtio-net header, then the frame.
/// (`iovec` says `*mut`; the kernel only reads them on a write.)
pub(crate) fn iovecs(hdr: &[u8; VNET_HDR_LEN], frame: &[u8]) -> [libc::iovec; 2] {
    [
        libc::iovec {
            iov_base: hdr.as_ptr() as *mut libc::c_void,
            iov_len: hdr.len(),
        },
        libc::iovec {
            iov_base: frame.as_ptr() as *mut libc::c_void,
            iov_len: frame.len(),
        },
    ]
}

/// The two buffers one frame is read into: the virtio-net header, then the block's
/// window.
pub(crate) fn iovecs_mut(hdr: &mut [u8; VNET_HDR_LEN], window: &mut [u8]) -> [libc::iovec; 2] {
    [
        libc::iovec {
            iov_base: hdr.as_mut_ptr().cast(),
            iov_len: hdr.len(),
        },
        libc::iovec {
            iov_base: window.as_mut_ptr().cast(),
            iov_len: window.len(),
        },
    ]
}

/// Sends one frame through `write`, which makes one attempt at writing the two buffers
/// (the header, the frame) as one frame and says how many bytes went: the header
/// ([`prepare_tx`]), the write (charged as the device copy), and the outcome counted.
/// EINTR is tried again; EAGAIN and ENOBUFS are [`DeviceError::QueueFull`], EMSGSIZE
/// [`DeviceError::TooLarge`], anything else [`DeviceError::LinkDown`].
pub(crate) fn transmit(
    mut frame: PacketBuf,
    meta: TxMeta,
    csum_offload: bool,
    max: usize,
    (stats, blocks): (&mut VnetStats, &mut DeviceBlocks),
    cx: &DeviceContext<'_>,
    mut write: impl FnMut(&[u8; VNET_HDR_LEN], &[u8]) -> io::Result<usize>,
) -> Result<(), DeviceError> {
    // A TAP write is a system call: one test of the ledger's flag per probe is nothing
    // beside it.
    let s = TESTED;
    let len = frame.len();
    let max = if meta.gso_size != 0 && csum_offload {
        ETHERNET_HEADER_LEN + MAX_SUPER_FRAME
    } else {
        max
    };
    if len > max {
        stats.tx_too_large += 1;
        blocks.give_back(frame);
        return Err(DeviceError::TooLarge { len, max });
    }
    let hdr = prepare_tx(s, frame.data_mut(), meta, csum_offload, stats, cx);
    let written = {
        let _copy = cx
            .ledger
            .probe(s, Layer::Driver, Side::Send, Op::DeviceCopy);
        loop {
            match write(&hdr, frame.data()) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => break r,
            }
        }
    };
    {
        let _free = cx.ledger.probe(s, Layer::Driver, Side::Send, Op::BufFree);
        blocks.give_back(frame);
    }
    match written {
        Ok(n) if n == VNET_HDR_LEN + len => {
            stats.tx_frames += 1;
            stats.tx_bytes += len as u64;
            cx.ledger.counters().inc(Counter::DriverFramesOut);
            Ok(())
        }
        Ok(_) => {
            // Both devices take a whole frame or nothing; count it if not.
            stats.tx_errors += 1;
            Ok(())
        }
        Err(e) => match e.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::ENOBUFS) => {
                stats.tx_queue_full += 1;
                cx.ledger.counters().inc(Counter::DriverDropQueueFull);
                Err(DeviceError::QueueFull)
            }
            Some(libc::EMSGSIZE) => {
                stats.tx_too_large += 1;
                Err(DeviceError::TooLarge { len, max })
            }
            // EIO, EBADFD (a detached TAP), ENETDOWN, ENXIO (an interface down or gone)
            // and the rest: the kernel end cannot take frames.
            _ => {
                stats.tx_errors += 1;
                Err(DeviceError::LinkDown)
            }
        },
    }
}

/// What one read attempt found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Read {
    /// A frame: `n` bytes arrived, the header included; `truncated` when the kernel said
    /// the frame was longer than the buffers.
    Frame { n: usize, truncated: bool },
    /// A frame the device does not want (counted by the device); try the next.
    Skip,
    /// Nothing waits (EAGAIN).
    Empty,
}

/// The device's blocks: the receive block the next read goes into, kept between reads,
/// and a pool that shares a [`Depot`] with the stack's pool
/// ([`Device::buffer_depot`](super::Device::buffer_depot)). Blocks circulate as on the
/// memory link: a frame read is handed up in a block from this pool and freed into the
/// stack's, a frame written comes back here once written, and each pool passes its
/// surplus to the depot a magazine at a time and takes from it when empty. Without it,
/// every super-frame read took a new 64 KiB block and every super-segment the stack sent
/// left it to be allocated again: zeroed fresh pages and the allocator's heap growing and
/// trimming, for each frame.
#[derive(Debug)]
pub(crate) struct DeviceBlocks {
    block: Option<PacketBuf>,
    pool: Pool,
    depot: Depot,
}

impl Default for DeviceBlocks {
    fn default() -> Self {
        let depot = Depot::default();
        let mut pool = Pool::new(PoolConfig::new(true));
        pool.set_depot(Some(depot.clone()));
        DeviceBlocks {
            block: None,
            pool,
            depot,
        }
    }
}

impl DeviceBlocks {
    /// A block with an [`RX_WINDOW`]-byte window at [`HEADROOM`], ready for a read: the
    /// kept one if there is one, else one from the pool.
    fn take(&mut self) -> Option<PacketBuf> {
        if let Some(mut b) = self.block.take() {
            if b.reset(HEADROOM).is_ok() && b.append(RX_WINDOW).is_ok() {
                return Some(b);
            }
        }
        self.alloc(RX_WINDOW)
    }

    /// A buffer of `len` bytes at [`HEADROOM`] from the pool (which has no limit, so it
    /// refuses only what no class holds), no longer counted by it: it leaves for the
    /// stack, whose pool frees it.
    fn alloc(&mut self, len: usize) -> Option<PacketBuf> {
        let b = self.pool.alloc(len, HEADROOM).ok()?;
        Some(self.pool.detach(b))
    }

    /// Takes a written frame's buffer back into the pool.
    fn give_back(&mut self, frame: PacketBuf) {
        self.pool.free(frame);
    }

    /// The depot the stack's pool should share.
    pub(crate) fn depot(&self) -> Depot {
        self.depot.clone()
    }
}

/// The next received frame, read with `read` (one attempt; it fills the header and the
/// window and says what arrived; EINTR is tried again, other errors are counted and end
/// the drain). The frame's header is acted on ([`accept_header`]); with `trust` false a
/// frame is reported [`RxChecksum::None`] whatever the header said, so the stack verifies
/// it. Frames that make no sense are dropped and counted and the next one is read.
///
/// A frame that fits a 2 KiB cluster is copied into one, and the 64 KiB block stays for
/// the next read; a larger frame takes the block with it and the next read takes another
/// from the device's pool ([`DeviceBlocks`]). So a stream of small frames costs no 64 KiB
/// block each, and a super-frame is not copied twice.
pub(crate) fn receive(
    blocks: &mut DeviceBlocks,
    stats: &mut VnetStats,
    trust: bool,
    cx: &DeviceContext<'_>,
    mut read: impl FnMut(&mut [u8; VNET_HDR_LEN], &mut [u8]) -> io::Result<Read>,
) -> Option<RxFrame> {
    // As in `transmit`: a read is a system call.
    let s = TESTED;
    loop {
        let block = {
            let _alloc = cx
                .ledger
                .probe(s, Layer::Driver, Side::Receive, Op::BufAlloc);
            blocks.take()
        };
        let Some(mut block) = block else {
            stats.rx_no_buffer += 1;
            cx.ledger.counters().inc(Counter::DriverDropRxOverrun);
            return None;
        };
        let mut hdr = [0u8; VNET_HDR_LEN];
        let got = {
            let _copy = cx
                .ledger
                .probe(s, Layer::Driver, Side::Receive, Op::DeviceCopy);
            loop {
                match read(&mut hdr, block.data_mut()) {
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    r => break r,
                }
            }
        };
        let (n, truncated) = match got {
            Ok(Read::Frame { n, truncated }) => (n, truncated),
            Ok(Read::Skip) => {
                blocks.block = Some(block);
                continue;
            }
            Ok(Read::Empty) => {
                blocks.block = Some(block);
                return None;
            }
            Err(_) => {
                stats.rx_errors += 1;
                blocks.block = Some(block);
                return None;
            }
        };
        if n < VNET_HDR_LEN + ETHERNET_HEADER_LEN {
            stats.rx_malformed += 1;
            blocks.block = Some(block);
            continue;
        }
        let len = n - VNET_HDR_LEN;
        // A frame that filled the whole window may have been cut short (a TAP read does
        // not say).
        if truncated || len >= RX_WINDOW {
            stats.rx_too_long += 1;
            cx.ledger.counters().inc(Counter::DriverDropTooLong);
            blocks.block = Some(block);
            continue;
        }
        if block.trim_back(RX_WINDOW - len).is_err() {
            stats.rx_malformed += 1;
            continue;
        }
        let header = {
            let _p = cx
                .ledger
                .probe(s, Layer::Driver, Side::Receive, Op::Checksum);
            accept_header(&hdr, block.data_mut(), !trust)
        };
        let Some(header) = header else {
            stats.rx_malformed += 1;
            blocks.block = Some(block);
            continue;
        };
        stats.rx_csum_partial += u64::from(header.partial);
        stats.rx_csum_valid += u64::from(header.valid);
        stats.rx_gso_frames += u64::from(header.gso);
        let checksum = if trust {
            header.checksum
        } else {
            RxChecksum::None
        };
        let frame = if len <= SMALL_FRAME {
            let small = {
                let _alloc = cx
                    .ledger
                    .probe(s, Layer::Driver, Side::Receive, Op::BufAlloc);
                // A whole cluster (`SMALL_FRAME` at `HEADROOM` fills one): the frame's
                // tailroom stays.
                blocks
                    .alloc(SMALL_FRAME)
                    .and_then(|mut b| b.trim_back(SMALL_FRAME - len).is_ok().then_some(b))
            };
            match small {
                Some(mut small) => {
                    let _copy = cx
                        .ledger
                        .probe(s, Layer::Driver, Side::Receive, Op::DeviceCopy);
                    small.data_mut().copy_from_slice(block.data());
                    blocks.block = Some(block);
                    small
                }
                // No small block: hand up the large one instead.
                None => block,
            }
        } else {
            block
        };
        stats.rx_frames += 1;
        stats.rx_bytes += len as u64;
        stats.rx_largest = stats.rx_largest.max(len as u64);
        cx.ledger.counters().inc(Counter::DriverFramesIn);
        return Some(RxFrame { frame, checksum });
    }
}

/// The last OS error as an `io::Error`, or `Ok(v)` when `r` is not negative: the
/// convention of the system calls both devices make.
pub(crate) fn cvt(r: isize) -> io::Result<usize> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checksum;
    use crate::probe::Ledger;

    const ETHERTYPE_IPV4: [u8; 2] = [0x08, 0x00];
    use crate::time::Instant;

    #[test]
    fn header_round_trip_in_host_order() {
        let h = VnetHeader {
            flags: VNET_F_NEEDS_CSUM,
            gso_type: VNET_GSO_TCPV4 | VNET_GSO_ECN,
            hdr_len: 54,
            gso_size: 1448,
            csum_start: 34,
            csum_offset: 16,
        };
        let b = h.to_bytes();
        assert_eq!(VnetHeader::parse(&b), h);
        assert_eq!(&b[4..6], &1448u16.to_ne_bytes());
        assert_eq!(VnetHeader::parse(&[0; VNET_HDR_LEN]), VnetHeader::default());
        let p = VnetHeader::partial_checksum(34, 6).to_bytes();
        assert_eq!(p[0], VNET_F_NEEDS_CSUM);
        assert_eq!(u16::from_ne_bytes([p[6], p[7]]), 34);
        assert_eq!(u16::from_ne_bytes([p[8], p[9]]), 6);
    }

    #[test]
    fn fills_an_ipv4_header_checksum() {
        let mut f = vec![0u8; 14 + 20];
        f[12..14].copy_from_slice(&ETHERTYPE_IPV4);
        f[14] = 0x45;
        f[16..18].copy_from_slice(&20u16.to_be_bytes());
        f[22] = 64;
        f[23] = 17;
        f[26..30].copy_from_slice(&[198, 18, 0, 1]);
        f[30..34].copy_from_slice(&[198, 18, 0, 2]);
        assert!(fill_ipv4_checksum(&mut f));
        assert!(checksum::verifies(checksum::sum(&f[14..34])));
        assert!(!fill_ipv4_checksum(&mut f[..20]));
    }

    /// An Ethernet + IPv4 + `protocol` frame with `l4` as the transport header and
    /// payload, its transport checksum field at `field` (from the L4 start) holding the
    /// pseudo-header sum over the whole L4 length, as the kernel hands it up; and the
    /// checksum the field should end up with.
    fn partial_frame(protocol: u8, mut l4: Vec<u8>, field: usize) -> (Vec<u8>, u16) {
        let src = [198, 18, 0, 1];
        let dst = [198, 18, 0, 2];
        let pseudo = checksum::pseudo_header_v4(src, dst, protocol, l4.len() as u16);
        l4[field..field + 2].copy_from_slice(&[0, 0]);
        let full = checksum::finish(checksum::combine(pseudo, checksum::sum(&l4)));
        let want = if full == 0 { 0xFFFF } else { full };
        l4[field..field + 2].copy_from_slice(&pseudo.to_be_bytes());
        let mut f = vec![0u8; 14];
        f[12..14].copy_from_slice(&ETHERTYPE_IPV4);
        let mut ip = [0u8; 20];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&((20 + l4.len()) as u16).to_be_bytes());
        ip[8] = 64;
        ip[9] = protocol;
        ip[12..16].copy_from_slice(&src);
        ip[16..20].copy_from_slice(&dst);
        let c = checksum::ipv4_header_checksum(&ip);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        f.extend_from_slice(&ip);
        f.extend_from_slice(&l4);
        (f, want)
    }

    fn vnet(flags: u8, gso_type: u8, gso_size: u16, start: u16, offset: u16) -> [u8; 10] {
        VnetHeader {
            flags,
            gso_type,
            hdr_len: 54,
            gso_size,
            csum_start: start,
            csum_offset: offset,
        }
        .to_bytes()
    }

    fn l4(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 151 + 7) as u8).collect()
    }

    #[test]
    fn completes_partial_tcp_and_udp_checksums() {
        for len in [20, 21, 1480, 2999, 65_000] {
            let (mut f, want) = partial_frame(6, l4(len), 16);
            let h = accept_header(&vnet(VNET_F_NEEDS_CSUM, 0, 0, 34, 16), &mut f, true).unwrap();
            assert_eq!(h.checksum, RxChecksum::Verified);
            assert!(h.partial && !h.gso && !h.valid);
            assert_eq!(u16::from_be_bytes([f[50], f[51]]), want, "tcp {len}");
        }
        for len in [8, 9, 1000, 1473] {
            let (mut f, want) = partial_frame(17, l4(len), 6);
            accept_header(&vnet(VNET_F_NEEDS_CSUM, 0, 0, 34, 6), &mut f, true).unwrap();
            assert_eq!(u16::from_be_bytes([f[40], f[41]]), want, "udp {len}");
        }
    }

    #[test]
    fn a_trusted_partial_checksum_is_not_summed() {
        let (mut f, _) = partial_frame(6, l4(1480), 16);
        let before = f.clone();
        let h = accept_header(&vnet(VNET_F_NEEDS_CSUM, 0, 0, 34, 16), &mut f, false).unwrap();
        assert_eq!(h.checksum, RxChecksum::Verified);
        assert!(h.partial);
        assert_eq!(f, before, "the seed stays in the field; nothing was summed");
    }

    #[test]
    fn a_super_frame_is_accepted_whole() {
        let (mut f, want) = partial_frame(6, l4(20 + 14_480), 16);
        let h = accept_header(
            &vnet(
                VNET_F_NEEDS_CSUM,
                VNET_GSO_TCPV4 | VNET_GSO_ECN,
                1448,
                34,
                16,
            ),
            &mut f,
            true,
        )
        .unwrap();
        assert!(h.gso && h.partial);
        assert_eq!(u16::from_be_bytes([f[50], f[51]]), want);
    }

    #[test]
    fn data_valid_and_plain_frames() {
        let (mut f, _) = partial_frame(6, l4(40), 16);
        let before = f.clone();
        let h = accept_header(&vnet(VNET_F_DATA_VALID, 0, 0, 0, 0), &mut f, true).unwrap();
        assert_eq!(h.checksum, RxChecksum::Verified);
        assert!(h.valid && !h.partial);
        let h = accept_header(&vnet(0, 0, 0, 0, 0), &mut f, true).unwrap();
        assert_eq!(h.checksum, RxChecksum::None);
        assert_eq!(f, before, "nothing written without NEEDS_CSUM");
    }

    #[test]
    fn malformed_headers_are_refused() {
        let (f, _) = partial_frame(6, l4(40), 16);
        let n = f.len() as u16;
        let bad = [
            vnet(0x08, 0, 0, 0, 0),                             // unknown flag
            vnet(VNET_F_NEEDS_CSUM, 3, 1448, 34, 6),            // UFO
            vnet(VNET_F_NEEDS_CSUM, 4, 1448, 34, 16),           // TCPv6
            vnet(0, VNET_GSO_TCPV4, 1448, 0, 0),                // GSO without NEEDS_CSUM
            vnet(VNET_F_NEEDS_CSUM, VNET_GSO_TCPV4, 0, 34, 16), // no segment size
            vnet(VNET_F_NEEDS_CSUM, 0, 0, n, 0),                // start past the end
            vnet(VNET_F_NEEDS_CSUM, 0, 0, 34, 17),              // odd offset
            vnet(VNET_F_NEEDS_CSUM, 0, 0, 34, n - 35),          // field past the end
            vnet(VNET_F_NEEDS_CSUM, 0, 0, 0xFFFF, 0xFFFE),      // overflow-sized offsets
        ];
        for h in bad {
            let mut g = f.clone();
            assert_eq!(accept_header(&h, &mut g, true), None, "{h:?}");
            assert_eq!(accept_header(&h, &mut g, false), None, "{h:?}");
            assert_eq!(g, f, "a refused frame is untouched");
        }
    }

    #[test]
    fn any_header_on_any_frame_never_panics() {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..100_000 {
            let mut h = [0u8; 10];
            h[..8].copy_from_slice(&next().to_le_bytes());
            h[8..].copy_from_slice(&next().to_le_bytes()[..2]);
            // Small offsets often, so that the checksum path runs too.
            if next() % 2 == 0 {
                h[6..8].copy_from_slice(&((next() % 80) as u16).to_ne_bytes());
                h[8..10].copy_from_slice(&((next() % 40) as u16).to_ne_bytes());
                h[0] &= 3;
                h[1] &= 1;
            }
            let mut f = vec![0u8; (next() % 120) as usize];
            let _ = accept_header(&h, &mut f, true);
        }
    }

    #[test]
    fn software_completion_matches_the_offload_convention() {
        let (mut f, want) = partial_frame(17, l4(100), 6);
        assert!(complete_checksum(&mut f, 34, 6));
        assert_eq!(u16::from_be_bytes([f[40], f[41]]), want);
        assert!(!complete_checksum(&mut f, 34, 200));
    }

    fn cx(ledger: &Ledger) -> DeviceContext<'_> {
        DeviceContext {
            now: Instant::ZERO,
            ledger,
        }
    }

    #[test]
    fn transmit_headers_with_and_without_offload() {
        let ledger = Ledger::new();
        let cx = cx(&ledger);
        let meta = TxMeta {
            ipv4_checksum: true,
            l4_checksum: Some((34, 6)),
            gso_size: 0,
        };
        for offload in [false, true] {
            let (mut f, want) = partial_frame(17, l4(100), 6);
            f[24..26].copy_from_slice(&[0xAB, 0xCD]); // a stale IPv4 header checksum
            let seed = [f[40], f[41]];
            let mut stats = VnetStats::default();
            let mut blocks = DeviceBlocks::default();
            let mut sent = None;
            let r = transmit(
                PacketBuf::from_slice(&f, HEADROOM).unwrap(),
                meta,
                offload,
                1514,
                (&mut stats, &mut blocks),
                &cx,
                |h, d| {
                    sent = Some((*h, d.to_vec()));
                    Ok(h.len() + d.len())
                },
            );
            assert_eq!(r, Ok(()));
            let (h, d) = sent.unwrap();
            let h = VnetHeader::parse(&h);
            assert!(checksum::verifies(checksum::sum(&d[14..34])), "IPv4 header");
            if offload {
                assert_eq!(h, VnetHeader::partial_checksum(34, 6));
                assert_eq!([d[40], d[41]], seed, "the seed stays for the kernel");
                assert_eq!(stats.tx_csum_offloaded, 1);
            } else {
                assert_eq!(h, VnetHeader::default());
                assert_eq!(u16::from_be_bytes([d[40], d[41]]), want);
                assert_eq!(stats.tx_csum_software, 1);
            }
            assert_eq!((stats.tx_frames, stats.tx_bytes), (1, f.len() as u64));
        }
    }

    #[test]
    fn transmit_errors_are_counted() {
        let ledger = Ledger::new();
        let cx = cx(&ledger);
        let frame = || PacketBuf::from_slice(&[0u8; 60], 0).unwrap();
        let mut stats = VnetStats::default();
        let mut blocks = DeviceBlocks::default();
        let bad_offsets = TxMeta {
            ipv4_checksum: false,
            l4_checksum: Some((34, 40)),
            gso_size: 0,
        };
        let ok = |h: &[u8; 10], d: &[u8]| Ok(h.len() + d.len());
        assert_eq!(
            transmit(
                frame(),
                bad_offsets,
                true,
                1514,
                (&mut stats, &mut blocks),
                &cx,
                ok
            ),
            Ok(())
        );
        assert_eq!((stats.tx_errors, stats.tx_csum_offloaded), (1, 0));
        assert_eq!(
            transmit(
                frame(),
                TxMeta::default(),
                true,
                59,
                (&mut stats, &mut blocks),
                &cx,
                ok
            ),
            Err(DeviceError::TooLarge { len: 60, max: 59 })
        );
        let errno = |e: i32| move |_: &[u8; 10], _: &[u8]| Err(io::Error::from_raw_os_error(e));
        let cases = [
            (libc::EAGAIN, DeviceError::QueueFull),
            (libc::ENOBUFS, DeviceError::QueueFull),
            (libc::ENETDOWN, DeviceError::LinkDown),
        ];
        for (e, want) in cases {
            let r = transmit(
                frame(),
                TxMeta::default(),
                true,
                1514,
                (&mut stats, &mut blocks),
                &cx,
                errno(e),
            );
            assert_eq!(r, Err(want));
        }
        let mut tries = 0;
        let r = transmit(
            frame(),
            TxMeta::default(),
            true,
            1514,
            (&mut stats, &mut blocks),
            &cx,
            |h, d| {
                tries += 1;
                if tries < 3 {
                    Err(io::Error::from_raw_os_error(libc::EINTR))
                } else {
                    Ok(h.len() + d.len())
                }
            },
        );
        assert_eq!((r, tries), (Ok(()), 3));
        assert_eq!(stats.tx_queue_full, 2);
        assert_eq!(
            stats.tx_frames, 2,
            "the frame with bad offsets, and the last"
        );
    }

    /// What a scripted read returns: the outcome (a frame's `n` of 0 is filled in), the
    /// header and the frame.
    type Scripted = io::Result<(Read, [u8; 10], Vec<u8>)>;

    #[test]
    fn receive_acts_on_headers_and_skips_what_it_must() {
        let ledger = Ledger::new();
        let cx = cx(&ledger);
        let (small, _) = partial_frame(6, l4(100), 16);
        let (big, _) = partial_frame(6, l4(20 + 14_480), 16);
        let mut queue: Vec<Scripted> = vec![
            Ok((Read::Skip, [0; 10], vec![])),
            Ok((
                Read::Frame {
                    n: 12,
                    truncated: false,
                },
                [0; 10],
                vec![0; 2],
            )),
            Ok((
                Read::Frame {
                    n: 0,
                    truncated: true,
                },
                [0; 10],
                small.clone(),
            )),
            Ok((
                Read::Frame {
                    n: 0,
                    truncated: false,
                },
                vnet(0x40, 0, 0, 0, 0),
                small.clone(),
            )),
            Ok((
                Read::Frame {
                    n: 0,
                    truncated: false,
                },
                vnet(1, 0, 0, 34, 16),
                small.clone(),
            )),
            Ok((
                Read::Frame {
                    n: 0,
                    truncated: false,
                },
                vnet(1, VNET_GSO_TCPV4, 1448, 34, 16),
                big.clone(),
            )),
            Err(io::Error::from_raw_os_error(libc::EINTR)),
            Ok((
                Read::Frame {
                    n: 0,
                    truncated: false,
                },
                vnet(2, 0, 0, 0, 0),
                small.clone(),
            )),
            Ok((Read::Empty, [0; 10], vec![])),
            Err(io::Error::from_raw_os_error(libc::EBADF)),
        ];
        queue.reverse();
        let mut read = |h: &mut [u8; 10], w: &mut [u8]| -> io::Result<Read> {
            let (r, hdr, data) = queue.pop().unwrap()?;
            *h = hdr;
            w[..data.len()].copy_from_slice(&data);
            Ok(match r {
                Read::Frame { n: 0, truncated } => Read::Frame {
                    n: VNET_HDR_LEN + data.len(),
                    truncated,
                },
                r => r,
            })
        };
        let mut blocks = DeviceBlocks::default();
        let mut stats = VnetStats::default();
        // Skip, too short, truncated and a bad flag are passed over to the partial frame.
        // Trusted: vouched for, and not summed (the seed stays in the field).
        let f = receive(&mut blocks, &mut stats, true, &cx, &mut read).unwrap();
        assert_eq!(f.checksum, RxChecksum::Verified);
        assert_eq!(f.frame.len(), small.len());
        assert_eq!(f.frame.data(), &small[..]);
        assert_eq!((stats.rx_malformed, stats.rx_too_long), (2, 1));
        // The super-frame, not trusted: completed but left for the stack to verify.
        let f = receive(&mut blocks, &mut stats, false, &cx, &mut read).unwrap();
        assert_eq!(f.checksum, RxChecksum::None);
        assert_eq!(f.frame.len(), big.len());
        assert!(checksum::verifies(checksum::combine(
            checksum::pseudo_header_v4([198, 18, 0, 1], [198, 18, 0, 2], 6, 20 + 14_480),
            checksum::sum(&f.frame.data()[34..])
        )));
        // EINTR is tried again; DATA_VALID.
        let f = receive(&mut blocks, &mut stats, true, &cx, &mut read).unwrap();
        assert_eq!(f.checksum, RxChecksum::Verified);
        assert!(receive(&mut blocks, &mut stats, true, &cx, &mut read).is_none());
        assert!(receive(&mut blocks, &mut stats, true, &cx, &mut read).is_none());
        assert_eq!(stats.rx_errors, 1);
        assert_eq!(stats.rx_frames, 3);
        assert_eq!(
            (
                stats.rx_csum_partial,
                stats.rx_csum_valid,
                stats.rx_gso_frames
            ),
            (2, 1, 1)
        );
        assert_eq!(stats.rx_largest, big.len() as u64);
    }

    /// The device's blocks and the stack's circulate through the depot: super-frames read
    /// and freed by the stack, and super-segments the stack allocates and the device
    /// writes, take new 64 KiB blocks only until the first magazines come round.
    #[test]
    fn blocks_circulate_between_the_device_and_the_stack() {
        let ledger = Ledger::new();
        let cx = cx(&ledger);
        let mut blocks = DeviceBlocks::default();
        let mut stack = Pool::new(PoolConfig::new(true));
        stack.set_depot(Some(blocks.depot()));
        let (big, _) = partial_frame(6, l4(20 + 14_480), 16);
        let mut read = |h: &mut [u8; 10], w: &mut [u8]| -> io::Result<Read> {
            *h = vnet(1, VNET_GSO_TCPV4, 1448, 34, 16);
            w[..big.len()].copy_from_slice(&big);
            Ok(Read::Frame {
                n: VNET_HDR_LEN + big.len(),
                truncated: false,
            })
        };
        let mut stats = VnetStats::default();
        const FRAMES: u64 = 1000;
        for _ in 0..FRAMES {
            let f = receive(&mut blocks, &mut stats, true, &cx, &mut read).unwrap();
            assert_eq!(f.frame.capacity(), JUMBO64K_SIZE);
            stack.free(f.frame);
        }
        let (device, shared) = (blocks.pool.stats(), stack.stats());
        let jumbo = |s: &crate::buf::PoolStats| s.classes[crate::buf::Class::Jumbo64k.index()];
        assert_eq!(jumbo(&device).allocs, FRAMES);
        assert_eq!(jumbo(&device).outstanding, 0, "handed up, not counted");
        assert!(jumbo(&device).from_depot > FRAMES / 2, "{device:?}");
        assert!(jumbo(&device).global_allocs < FRAMES / 4, "{device:?}");
        assert_eq!(jumbo(&shared).global_frees, 0, "{shared:?}");

        // The other way: the stack's super-segments come back through the device.
        let before = jumbo(&stack.stats()).global_allocs;
        let meta = TxMeta {
            ipv4_checksum: true,
            l4_checksum: Some((34, 16)),
            gso_size: 1448,
        };
        for _ in 0..FRAMES {
            let mut seg = stack.alloc(big.len(), HEADROOM).unwrap();
            seg.data_mut().copy_from_slice(&big);
            let sent = transmit(
                seg,
                meta,
                true,
                1514,
                (&mut stats, &mut blocks),
                &cx,
                |h, d| Ok(h.len() + d.len()),
            );
            assert_eq!(sent, Ok(()));
        }
        assert_eq!(stats.tx_frames, FRAMES);
        let shared = stack.stats();
        assert!(
            jumbo(&shared).global_allocs - before < FRAMES / 4,
            "{shared:?}"
        );
        assert!(jumbo(&shared).from_depot > 0, "{shared:?}");
    }
}
