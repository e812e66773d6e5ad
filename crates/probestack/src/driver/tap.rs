//! [`TapDevice`]: a Linux TAP interface with virtio-net headers, the stack's link to the
//! real kernel (DESIGN.md §6; the facts behind every constant here are in
//! `reference/tap-offload.md`).
//!
//! # Opening
//!
//! [`TapDevice::open`] opens `/dev/net/tun` non-blocking and close-on-exec and attaches it
//! with `TUNSETIFF` and `IFF_TAP | IFF_NO_PI | IFF_VNET_HDR`: to the TAP of that name if
//! one exists (made with `ip tuntap add`), else to a new one that lives as long as the
//! descriptor. The virtio-net header is set to its **10-byte** legacy form with
//! `TUNSETVNETHDRSZ` (what QEMU and gVisor use; the 12-byte form only adds
//! `num_buffers`, which a TAP reader has no use for). The header's 16-bit fields are in
//! the host's byte order (the legacy layout).
//!
//! With [`TapConfig::offload`] the device asks `TUNSETOFFLOAD` for
//! `TUN_F_CSUM | TUN_F_TSO4`: the kernel may then hand up frames whose TCP or UDP
//! checksum is only a pseudo-header seed (NEEDS_CSUM) and TCP super-frames of up to
//! 64 KiB (GSO). A kernel that refuses (EINVAL) is asked for `TUN_F_CSUM` alone, and
//! then for nothing; [`TapDevice::offloads`] says what was accepted. Without offload the
//! device sets `TUNSETOFFLOAD 0`, and the kernel checksums and segments everything in
//! software before the frame reaches us.
//!
//! # Receiving and sending
//!
//! One `readv` per frame (the header into a small array, the frame into a 64 KiB block
//! [`HEADROOM`](crate::buf::HEADROOM) bytes in, room for any super-frame the kernel may
//! send), and one `writev` of the header and the frame. What the header means and what the
//! device does about it (completing a partial checksum, handing a TCP super-frame up whole,
//! dropping and counting what makes no sense, leaving a transport checksum to the kernel
//! or completing it in software) is shared with the AF_PACKET device and described in
//! [`super::vnet`]. Frames the TAP hands up are always reported as verified when the
//! header says the checksum was completed or checked: they come from the kernel's memory
//! and never crossed a wire. A read that fills the whole block is dropped as too long (it
//! may have been cut short). EAGAIN on a write is [`DeviceError::QueueFull`].
//!
//! # What the stack is told
//!
//! [`DeviceCaps`]: the configured MTU; `has_crc: false` (a TAP has no frame check
//! sequence, so no checksum may be elided on its account); [`CopyMode::Pio`](super::CopyMode::Pio) (the kernel
//! copies every frame in and out, as `read` and `write` do); transport checksum offload in
//! both directions, and IPv4 header verification on receive, exactly when `TUN_F_CSUM`
//! was accepted.
//!
//! Readiness: [`Device::readiness_fd`] is the tun descriptor (readable when a frame
//! waits). [`Device::take_notification`] always says yes; a `receive` that finds nothing
//! (EAGAIN) returns `None`, and the stack's `rx_batch` bounds the drain per poll.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::vnet::{self, DeviceBlocks, Read, ETHERNET_HEADER_LEN};
use super::{Device, DeviceCaps, DeviceContext, DeviceError, RxFrame, TxMeta};
use crate::buf::PacketBuf;
use crate::time::Instant;

pub use super::vnet::VNET_HDR_LEN;

/// `TUNSETIFF`, `_IOW('T', 202, int)`.
const TUNSETIFF: u64 = 0x4004_54ca;
/// `TUNSETOFFLOAD`, `_IOW('T', 208, unsigned int)`; the argument is the value itself.
const TUNSETOFFLOAD: u64 = 0x4004_54d0;
/// `TUNSETVNETHDRSZ`, `_IOW('T', 216, int)`; the argument points to an int.
const TUNSETVNETHDRSZ: u64 = 0x4004_54d8;

const IFF_TAP: i16 = 0x0002;
const IFF_NO_PI: i16 = 0x1000;
const IFF_VNET_HDR: i16 = 0x4000;
/// `IFNAMSIZ`: interface names are at most 15 bytes and a NUL.
const IFNAMSIZ: usize = 16;

/// `TUN_F_CSUM`: the reader accepts frames with a partial (seed-only) checksum.
pub const TUN_F_CSUM: u32 = 0x01;
/// `TUN_F_TSO4`: the reader accepts TCP/IPv4 super-frames (only together with CSUM).
pub const TUN_F_TSO4: u32 = 0x02;

/// How to open a [`TapDevice`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TapConfig {
    /// The largest IP datagram the stack sends in one frame (the Linux side's MTU should
    /// match; set it with `ip link set <tap> mtu`).
    pub mtu: usize,
    /// Ask for checksum offload and TCP segmentation offload (`TUN_F_CSUM | TUN_F_TSO4`).
    pub offload: bool,
}

impl Default for TapConfig {
    fn default() -> Self {
        TapConfig {
            mtu: 1500,
            offload: false,
        }
    }
}

/// What a TAP device did: the counters every device with virtio-net headers keeps.
pub type TapStats = vnet::VnetStats;

/// The `struct ifreq` of `TUNSETIFF`: the name, then the flags, padded to the union's 24
/// bytes.
#[repr(C)]
struct IfReq {
    name: [u8; IFNAMSIZ],
    flags: i16,
    _pad: [u8; 22],
}

/// A TAP interface with virtio-net headers; see the module documentation.
#[derive(Debug)]
pub struct TapDevice {
    fd: OwnedFd,
    name: String,
    config: TapConfig,
    offloads: u32,
    /// The block the next read goes into and the pool it and written frames circulate
    /// through with the stack's.
    blocks: DeviceBlocks,
    stats: TapStats,
}

/// The last OS error, as an `io::Error`.
fn os_error() -> io::Error {
    io::Error::last_os_error()
}

impl TapDevice {
    /// Attaches to the TAP `name` if it exists (made with `ip tuntap add`), else creates
    /// it. Needs CAP_NET_ADMIN (or ownership of a persistent TAP). An empty `name` lets
    /// the kernel choose one (`tap%d`); [`name`](Self::name) says which.
    pub fn open(name: &str, config: TapConfig) -> io::Result<TapDevice> {
        if name.len() >= IFNAMSIZ || name.bytes().any(|b| b == 0 || b == b'/') {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("bad interface name {name:?}: at most 15 bytes, no NUL or '/'"),
            ));
        }
        if config.mtu < 68 || config.mtu > 65535 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("MTU {} outside 68..=65535", config.mtu),
            ));
        }
        let path = b"/dev/net/tun\0";
        // SAFETY: `path` is a NUL-terminated byte string that lives across the call; open
        // reads it and returns a new descriptor or -1.
        let raw = unsafe {
            libc::open(
                path.as_ptr().cast(),
                libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
            )
        };
        if raw < 0 {
            return Err(os_error());
        }
        // SAFETY: `raw` was just returned by open, is valid, and nothing else owns it; the
        // OwnedFd closes it exactly once, on drop (also on the error paths below).
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };

        let mut req = IfReq {
            name: [0; IFNAMSIZ],
            flags: IFF_TAP | IFF_NO_PI | IFF_VNET_HDR,
            _pad: [0; 22],
        };
        req.name[..name.len()].copy_from_slice(name.as_bytes());
        // SAFETY: `fd` is an open tun descriptor; TUNSETIFF reads and writes a `struct
        // ifreq`, which `IfReq` lays out (16-byte name, flags, padding to 40 bytes), and
        // `req` lives across the call.
        if unsafe { libc::ioctl(fd.as_raw_fd(), TUNSETIFF as _, &mut req as *mut IfReq) } < 0 {
            return Err(os_error());
        }
        let end = req.name.iter().position(|&b| b == 0).unwrap_or(IFNAMSIZ);
        let name = String::from_utf8_lossy(&req.name[..end]).into_owned();

        let hdr_len = VNET_HDR_LEN as libc::c_int;
        // SAFETY: TUNSETVNETHDRSZ reads one int through the pointer, which points to
        // `hdr_len`, alive across the call.
        if unsafe {
            libc::ioctl(
                fd.as_raw_fd(),
                TUNSETVNETHDRSZ as _,
                &hdr_len as *const libc::c_int,
            )
        } < 0
        {
            return Err(os_error());
        }

        let wanted: &[u32] = if config.offload {
            &[TUN_F_CSUM | TUN_F_TSO4, TUN_F_CSUM, 0]
        } else {
            &[0]
        };
        let mut offloads = None;
        for &bits in wanted {
            // SAFETY: TUNSETOFFLOAD takes its argument by value (an unsigned long of
            // TUN_F_* bits); no memory is passed.
            let r =
                unsafe { libc::ioctl(fd.as_raw_fd(), TUNSETOFFLOAD as _, bits as libc::c_ulong) };
            if r == 0 {
                offloads = Some(bits);
                break;
            }
            let e = os_error();
            if e.raw_os_error() != Some(libc::EINVAL) {
                return Err(e);
            }
        }
        let offloads = offloads.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::Unsupported,
                "TUNSETOFFLOAD refused even 0 (no offloads)",
            )
        })?;

        Ok(TapDevice {
            fd,
            name,
            config,
            offloads,
            blocks: DeviceBlocks::default(),
            stats: TapStats::default(),
        })
    }

    /// The interface name (the kernel's, if it chose one).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The TUN_F_* bits TUNSETOFFLOAD accepted (0 without offload).
    pub fn offloads(&self) -> u32 {
        self.offloads
    }

    /// What the device did so far.
    pub fn stats(&self) -> TapStats {
        self.stats
    }

    /// The configuration the device was opened with.
    pub fn config(&self) -> TapConfig {
        self.config
    }

    fn csum_offload(&self) -> bool {
        self.offloads & TUN_F_CSUM != 0
    }

    /// The longest frame the device sends: the MTU and the Ethernet header.
    fn max_frame_len(&self) -> usize {
        self.config.mtu + ETHERNET_HEADER_LEN
    }
}

impl Device for TapDevice {
    fn caps(&self) -> DeviceCaps {
        vnet::caps(self.config.mtu, self.csum_offload())
    }

    fn transmit(
        &mut self,
        frame: PacketBuf,
        meta: TxMeta,
        cx: &DeviceContext<'_>,
    ) -> Result<(), DeviceError> {
        let max = self.max_frame_len();
        let csum = self.csum_offload();
        let fd = self.fd.as_raw_fd();
        vnet::transmit(
            frame,
            meta,
            csum,
            max,
            (&mut self.stats, &mut self.blocks),
            cx,
            |hdr, data| {
                let iov = vnet::iovecs(hdr, data);
                // SAFETY: both iovecs describe memory borrowed for the call (the header, the
                // frame's window), with their exact lengths; writev only reads it despite the
                // `*mut` in `iovec`. `fd` is open: `self` owns it.
                vnet::cvt(unsafe { libc::writev(fd, iov.as_ptr(), iov.len() as _) })
            },
        )
    }

    fn take_notification(&mut self, _cx: &DeviceContext<'_>) -> bool {
        // Reads are cheap to try: receive() says None on EAGAIN.
        true
    }

    fn receive(&mut self, cx: &DeviceContext<'_>) -> Option<RxFrame> {
        let fd = self.fd.as_raw_fd();
        vnet::receive(
            &mut self.blocks,
            &mut self.stats,
            true,
            cx,
            |hdr, window| {
                let iov = vnet::iovecs_mut(hdr, window);
                // SAFETY: both iovecs describe writable memory borrowed mutably for the call
                // (the header array, the block's window), with their exact lengths; the
                // kernel writes at most that much. `fd` is open: `self` owns it.
                match vnet::cvt(unsafe { libc::readv(fd, iov.as_ptr(), iov.len() as _) }) {
                    // A TAP read does not say whether the frame was cut short; the shared
                    // code drops one that filled the whole window.
                    Ok(n) => Ok(Read::Frame {
                        n,
                        truncated: false,
                    }),
                    Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => Ok(Read::Empty),
                    Err(e) => Err(e),
                }
            },
        )
    }

    fn next_deadline(&self) -> Option<Instant> {
        None
    }

    fn buffer_depot(&self) -> Option<crate::buf::Depot> {
        Some(self.blocks.depot())
    }

    fn readiness_fd(&self) -> Option<i32> {
        Some(self.fd.as_raw_fd())
    }
    fn counters(&self) -> Vec<(&'static str, u64)> {
        self.stats.named()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ifreq_is_the_kernels_size() {
        assert_eq!(std::mem::size_of::<IfReq>(), 40);
    }
}
