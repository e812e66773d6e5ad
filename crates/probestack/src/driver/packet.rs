//! [`PacketDevice`]: an AF_PACKET socket bound to one Linux interface, typically one end
//! of a veth pair: a real wire between two processes each running the stack, or between
//! the stack and the kernel (DESIGN.md §6; the facts behind the constants are in
//! `reference/tap-offload.md` §3.1 and `Documentation/networking/packet_mmap.rst`).
//!
//! # Opening
//!
//! [`PacketDevice::open`] makes a `SOCK_RAW` packet socket (packet(7)), non-blocking and
//! close-on-exec, with protocol 0 so that nothing is queued to it before it is set up;
//! then, in this order:
//!
//! 1. `PACKET_VNET_HDR`: every frame read or written carries the 10-byte virtio-net
//!    header in front, exactly as on the TAP, and the same code ([`super::vnet`]) acts on
//!    it. This is not optional: on a veth the kernel hands frames up with a partial
//!    checksum (only the pseudo-header sum in the field) whenever the sender left it to
//!    "hardware", and super-frames whole, and without the header a reader cannot tell.
//! 2. `PACKET_IGNORE_OUTGOING` (Linux 4.20): frames the kernel itself sends out of the
//!    interface are not looped to the socket. Where it is refused, every read also asks
//!    for the sender's `sockaddr_ll` and a frame with `sll_pkttype == PACKET_OUTGOING` is
//!    dropped and counted ([`PacketStats::rx_outgoing`]). The socket's own frames never come
//!    back to it either way (`dev_queue_xmit_nit` skips the sending socket).
//! 3. Socket buffers of [`SOCKET_BUFFER`] bytes (`SO_RCVBUFFORCE`, which root may use
//!    beyond `rmem_max`, else `SO_RCVBUF`; the same for sending), because a veth has no
//!    queue of its own: a frame sent to us is dropped at once when our receive buffer is
//!    full ([`PacketStats::kernel_drops`]).
//! 4. `PACKET_ADD_MEMBERSHIP` with `PACKET_MR_PROMISC`: the stack has a MAC address of its
//!    own, not the interface's, and a real NIC would filter its frames out otherwise. The
//!    membership ends with the socket. (A veth does not filter; there it changes nothing.)
//! 5. `bind` to the interface with `ETH_P_ALL`: from here on the socket sees every frame
//!    the interface receives.
//!
//! # Offloads
//!
//! Unlike a TAP, a packet socket negotiates nothing: what the kernel hands up depends on
//! the *sender's* interface features and on GRO on ours (`ethtool -k`), and frames written
//! with NEEDS_CSUM are accepted on any interface (the kernel finishes the checksum in
//! software, `skb_checksum_help`, where the interface cannot). So [`PacketConfig::offload`]
//! decides what the device *tells the stack* and how it sends:
//!
//! - **on**: [`DeviceCaps`] claim transport checksum offload both ways (and IPv4 header
//!   verification on receive), as the TAP does with `TUN_F_CSUM`; a transport checksum the
//!   stack leaves to the device goes out as NEEDS_CSUM; received frames whose checksum the
//!   kernel flagged (completed here from its seed, or DATA_VALID) are reported
//!   [`RxChecksum::Verified`](super::RxChecksum::Verified).
//! - **off**: no offload is claimed, transport checksums are completed in software before
//!   sending, and every received frame is reported unverified so that the stack checks it.
//!   A partial checksum is still completed here (the frame would be unusable otherwise),
//!   and a super-frame is still handed up whole; to have neither arrive, make the sending
//!   side a dumb NIC (`ethtool -K <peer> tx off tso off gso off`) and leave GRO off on ours.
//!
//! # What a veth does
//!
//! Measured on Linux 6.18 by `tests/packet.rs` (features switched with `SIOCETHTOOL`):
//!
//! - A fresh veth has `tx-checksumming`, `scatter-gather`, TSO (v4, v6, ECN), GSO and
//!   `rx-checksumming` on, and **GRO off**.
//! - **Linux TCP through the peer, defaults**: the skb crosses the veth unsegmented, so the
//!   socket reads **TSO super-frames**: of about 76 frames for 4 MiB, 71 were GSO TCPV4
//!   with NEEDS_CSUM, the largest 65,226 bytes. UDP datagrams that fit the MTU come with
//!   NEEDS_CSUM too; ICMP and IP fragments come fully checksummed.
//! - **Peer `tso off gso off`** (checksum offload still on): 2,900 MTU-sized frames, each
//!   NEEDS_CSUM. With **`tx off` as well** (a dumb NIC): the same frames fully
//!   checksummed, and **no flag at all**: a veth never sets DATA_VALID (it stopped marking
//!   CHECKSUM_NONE frames CHECKSUM_UNNECESSARY in Linux 4.4, because that let corrupt
//!   frames from real NICs through), so `rx_csum_valid` stays 0 on a veth.
//! - **Peer without TSO/GSO, GRO on at our end** (which also moves the veth to its NAPI
//!   path): the super-frames come back, about 74 of 80 frames GSO, up to 65,226 bytes. GRO
//!   coalesces what one NAPI poll finds, and Linux sends bursts of segments from its ACK
//!   processing in one softirq. So a packet socket receives super-frames on a veth when
//!   the peer has TSO (or GSO) or when our end has GRO.
//! - **Two stacks, one on each end**: even with GRO on at the receiving end nothing
//!   coalesced: 0 super-frames in 16 MiB. Each frame is a `sendmsg` of its own from a
//!   thread, and (presumably) the softirq it raises runs and delivers it when the call
//!   re-enables bottom halves, one frame per NAPI poll. A frame written with NEEDS_CSUM
//!   arrives with NEEDS_CSUM and the same seed (the veth moves the skb, CHECKSUM_PARTIAL
//!   and all) and the receiving device completes it; a fully checksummed one arrives with
//!   no flag.
//! - A veth has no queue (`noqueue`): the frame is handed to the other end during the
//!   `sendmsg`. When the receiving socket's buffer is full the frame is dropped there
//!   ([`PacketStats::kernel_drops`] of the receiving device); the sender is not told.
//!
//! # Receiving and sending
//!
//! The plain path: one `recvmsg` per frame (the header into a small array, the frame into
//! a 64 KiB block, the sender's address for `sll_pkttype`, `MSG_TRUNC` to catch a frame
//! longer than the block) and one `sendmsg` of the header and the frame to the bound
//! interface. The drain per wakeup is bounded by the stack's `rx_batch`, as for the TAP.
//!
//! A TPACKET_V3 receive ring was not built. The stack owns its packet buffers
//! ([`PacketBuf`]) and cannot lend a slot of a shared ring up the stack, so a ring would
//! still copy each frame once, out of the ring instead of out of the socket: it saves
//! system calls, not copies, and that saving is what the runner's epoll plus a bounded
//! drain already shares with the TAP. A `PACKET_TX_RING` (zero-copy send) would need the
//! same lending on the send side. The plain path keeps the device's cost comparable to the
//! TAP's, which is what the ledger measures; a ring remains a separate experiment.
//!
//! Frames that make no sense are dropped and counted (see [`super::vnet`]); so is a frame
//! the kernel could not describe in a virtio-net header (a GSO type it has no field for),
//! which `recvmsg` reports as EINVAL after consuming it ([`PacketStats::rx_undescribed`]).
//!
//! # What the stack is told
//!
//! [`DeviceCaps`]: the configured MTU; `has_crc: false` (no frame check sequence: no
//! checksum may be elided on its account); [`CopyMode::Pio`](super::CopyMode::Pio) (the kernel copies every frame
//! in and out); checksum offload as above. Readiness: [`Device::readiness_fd`] is the
//! socket (readable when a frame waits); [`Device::take_notification`] always says yes.

use std::cell::Cell;
use std::ffi::CString;
use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::vnet::{self, DeviceBlocks, Read, VnetStats, ETHERNET_HEADER_LEN};
use super::{Device, DeviceCaps, DeviceContext, DeviceError, RxFrame, TxMeta};
use crate::buf::PacketBuf;
use crate::time::Instant;

// From `include/uapi/linux/if_packet.h` (defined here: not every libc target has them).
/// `PACKET_ADD_MEMBERSHIP`.
const PACKET_ADD_MEMBERSHIP: libc::c_int = 1;
/// `PACKET_STATISTICS`: `struct tpacket_stats`, reset by each read.
const PACKET_STATISTICS: libc::c_int = 6;
/// `PACKET_VNET_HDR`: a `struct virtio_net_hdr` in front of every frame.
const PACKET_VNET_HDR: libc::c_int = 15;
/// `PACKET_IGNORE_OUTGOING` (Linux 4.20).
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
/// `PACKET_MR_PROMISC`.
const PACKET_MR_PROMISC: libc::c_ushort = 1;
/// `PACKET_OUTGOING` in `sll_pkttype`: a frame this host sent.
const PACKET_OUTGOING: u8 = 4;
/// `ETH_P_ALL`: every protocol.
const ETH_P_ALL: u16 = 0x0003;
/// `ARPHRD_ETHER`, the hardware type of an Ethernet interface.
const ARPHRD_ETHER: u16 = 1;
/// `IFNAMSIZ`: interface names are at most 15 bytes and a NUL.
const IFNAMSIZ: usize = 16;

/// The socket buffer sizes asked for, each way: room for about 64 super-frames or 2,800
/// full-sized frames.
pub const SOCKET_BUFFER: usize = 4 << 20;

/// How to open a [`PacketDevice`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketConfig {
    /// The largest IP datagram the stack sends in one frame; at most the interface's MTU
    /// (the kernel refuses longer frames with EMSGSIZE).
    pub mtu: usize,
    /// Claim checksum offload to the stack and send partial checksums; see the module
    /// documentation.
    pub offload: bool,
}

impl Default for PacketConfig {
    fn default() -> Self {
        PacketConfig {
            mtu: 1500,
            offload: false,
        }
    }
}

/// What a packet device did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PacketStats {
    /// The counters every device with virtio-net headers keeps (as [`super::tap::TapStats`]).
    pub vnet: VnetStats,
    /// Frames the kernel sent out of the interface and looped to the socket, dropped (only
    /// where `PACKET_IGNORE_OUTGOING` is refused).
    pub rx_outgoing: u64,
    /// Frames `recvmsg` refused with EINVAL: the kernel could not describe them in a
    /// virtio-net header and dropped them.
    pub rx_undescribed: u64,
    /// Frames the kernel queued to the socket (`tp_packets` of `PACKET_STATISTICS`).
    pub kernel_packets: u64,
    /// Frames the kernel dropped because the socket's receive buffer was full
    /// (`tp_drops`).
    pub kernel_drops: u64,
}

/// `struct packet_mreq`.
#[repr(C)]
struct PacketMreq {
    mr_ifindex: libc::c_int,
    mr_type: libc::c_ushort,
    mr_alen: libc::c_ushort,
    mr_address: [u8; 8],
}

/// `struct tpacket_stats`.
#[repr(C)]
#[derive(Default)]
struct TpacketStats {
    tp_packets: u32,
    tp_drops: u32,
}

/// The `struct ifreq` of `SIOCGIFHWADDR`: the name, then a `struct sockaddr` (family and
/// 14 bytes of address), padded to the union's 24 bytes.
#[repr(C)]
struct IfReqHwAddr {
    name: [u8; IFNAMSIZ],
    family: u16,
    data: [u8; 14],
    _pad: [u8; 8],
}

/// An AF_PACKET socket on one interface, with virtio-net headers; see the module
/// documentation.
#[derive(Debug)]
pub struct PacketDevice {
    fd: OwnedFd,
    name: String,
    ifindex: u32,
    mac: [u8; 6],
    config: PacketConfig,
    ignore_outgoing: bool,
    blocks: DeviceBlocks,
    stats: PacketStats,
    /// The kernel's counters so far: `PACKET_STATISTICS` resets them on each read.
    kernel: Cell<(u64, u64)>,
}

/// `setsockopt` of a plain value.
fn set_option<T>(fd: &OwnedFd, level: libc::c_int, name: libc::c_int, value: &T) -> io::Result<()> {
    // SAFETY: `value` points to a `T` of `size_of::<T>()` bytes, borrowed across the call;
    // the kernel only reads that many. `fd` is an open socket.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (value as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Checks a device configuration: an interface name the kernel can hold and an MTU an
/// IPv4 interface may have (RFC 791: every host takes 68-byte datagrams).
fn check(ifname: &str, config: &PacketConfig) -> io::Result<()> {
    if ifname.is_empty() || ifname.len() >= IFNAMSIZ || ifname.bytes().any(|b| b == 0 || b == b'/')
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("bad interface name {ifname:?}: 1 to 15 bytes, no NUL or '/'"),
        ));
    }
    if config.mtu < 68 || config.mtu > 65535 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("MTU {} outside 68..=65535", config.mtu),
        ));
    }
    Ok(())
}

/// The `sockaddr_ll` that binds a packet socket to interface `ifindex` for every
/// protocol.
fn bind_address(ifindex: u32) -> libc::sockaddr_ll {
    libc::sockaddr_ll {
        sll_family: libc::AF_PACKET as libc::c_ushort,
        sll_protocol: ETH_P_ALL.to_be(),
        sll_ifindex: ifindex as libc::c_int,
        sll_hatype: 0,
        sll_pkttype: 0,
        sll_halen: 0,
        sll_addr: [0; 8],
    }
}

impl PacketDevice {
    /// Opens a packet socket on the interface `ifname` (which must exist; it should be
    /// up). Needs CAP_NET_RAW.
    pub fn open(ifname: &str, config: PacketConfig) -> io::Result<PacketDevice> {
        check(ifname, &config)?;
        let cname = CString::new(ifname).map_err(|_| io::ErrorKind::InvalidInput)?;
        // SAFETY: `cname` is a NUL-terminated string alive across the call, which only
        // reads it.
        let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) };
        if ifindex == 0 {
            let e = io::Error::last_os_error();
            let kind = match e.raw_os_error() {
                Some(libc::ENODEV) => io::ErrorKind::NotFound,
                _ => e.kind(),
            };
            return Err(io::Error::new(kind, format!("interface {ifname}: {e}")));
        }

        // SAFETY: socket takes no memory and returns a new descriptor or -1. Protocol 0:
        // no frame is queued to the socket before `bind` names one.
        let raw = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` was just returned by socket, is valid, and nothing else owns it;
        // the OwnedFd closes it exactly once, on drop (also on the error paths below).
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };

        let on: libc::c_int = 1;
        set_option(&fd, libc::SOL_PACKET, PACKET_VNET_HDR, &on)?;
        let ignore_outgoing = match set_option(&fd, libc::SOL_PACKET, PACKET_IGNORE_OUTGOING, &on) {
            Ok(()) => true,
            // Before Linux 4.20: filter on sll_pkttype instead.
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOPROTOOPT | libc::EINVAL)) => false,
            Err(e) => return Err(e),
        };
        let size = SOCKET_BUFFER as libc::c_int;
        for (forced, plain) in [
            (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
            (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
        ] {
            if set_option(&fd, libc::SOL_SOCKET, forced, &size).is_err() {
                // Without CAP_NET_ADMIN: as much as `[rw]mem_max` allows.
                let _ = set_option(&fd, libc::SOL_SOCKET, plain, &size);
            }
        }
        let mreq = PacketMreq {
            mr_ifindex: ifindex as libc::c_int,
            mr_type: PACKET_MR_PROMISC,
            mr_alen: 0,
            mr_address: [0; 8],
        };
        set_option(&fd, libc::SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mreq)?;

        let addr = bind_address(ifindex);
        // SAFETY: `addr` is a `sockaddr_ll`, alive across the call, and the length passed
        // is its size; bind only reads it. `fd` is an open packet socket.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_ll).cast(),
                size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }

        let mut req = IfReqHwAddr {
            name: [0; IFNAMSIZ],
            family: 0,
            data: [0; 14],
            _pad: [0; 8],
        };
        req.name[..ifname.len()].copy_from_slice(ifname.as_bytes());
        // SAFETY: SIOCGIFHWADDR reads the name and writes a `struct sockaddr` into a
        // `struct ifreq`, which `IfReqHwAddr` lays out (40 bytes); `req` lives across the
        // call. `fd` is an open socket.
        let r = unsafe {
            libc::ioctl(
                fd.as_raw_fd(),
                libc::SIOCGIFHWADDR as _,
                &mut req as *mut IfReqHwAddr,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        if req.family != ARPHRD_ETHER {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "interface {ifname} is not Ethernet (hardware type {})",
                    req.family
                ),
            ));
        }
        let mut mac = [0u8; 6];
        mac.copy_from_slice(&req.data[..6]);

        Ok(PacketDevice {
            fd,
            name: ifname.to_owned(),
            ifindex,
            mac,
            config,
            ignore_outgoing,
            blocks: DeviceBlocks::default(),
            stats: PacketStats::default(),
            kernel: Cell::new((0, 0)),
        })
    }

    /// The interface's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The interface's index.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// The interface's own MAC address (the stack may use another: the socket is
    /// promiscuous).
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// The configuration the device was opened with.
    pub fn config(&self) -> PacketConfig {
        self.config
    }

    /// Whether the kernel took `PACKET_IGNORE_OUTGOING` (else outgoing frames are dropped
    /// here, by `sll_pkttype`).
    pub fn ignores_outgoing(&self) -> bool {
        self.ignore_outgoing
    }

    /// What the device did so far, with the kernel's counters brought up to date (one
    /// `getsockopt`).
    pub fn stats(&self) -> PacketStats {
        let mut k = TpacketStats::default();
        let mut len = size_of::<TpacketStats>() as libc::socklen_t;
        // SAFETY: PACKET_STATISTICS writes a `struct tpacket_stats` (two u32s), at most
        // `len` bytes, into `k`, and the new length into `len`; both live across the call.
        let r = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                PACKET_STATISTICS,
                (&mut k as *mut TpacketStats).cast(),
                &mut len,
            )
        };
        let (mut packets, mut drops) = self.kernel.get();
        if r == 0 {
            packets += u64::from(k.tp_packets);
            drops += u64::from(k.tp_drops);
            self.kernel.set((packets, drops));
        }
        PacketStats {
            kernel_packets: packets,
            kernel_drops: drops,
            ..self.stats
        }
    }

    fn offload(&self) -> bool {
        self.config.offload
    }

    /// The longest frame the device sends: the MTU and the Ethernet header.
    fn max_frame_len(&self) -> usize {
        self.config.mtu + ETHERNET_HEADER_LEN
    }
}

/// What a read's source address says about the frame: whether to skip it.
fn outgoing(addr: &libc::sockaddr_ll) -> bool {
    addr.sll_pkttype == PACKET_OUTGOING
}

impl Device for PacketDevice {
    fn caps(&self) -> DeviceCaps {
        vnet::caps(self.config.mtu, self.offload())
    }

    fn transmit(
        &mut self,
        frame: PacketBuf,
        meta: TxMeta,
        cx: &DeviceContext<'_>,
    ) -> Result<(), DeviceError> {
        let max = self.max_frame_len();
        let csum = self.offload();
        let fd = self.fd.as_raw_fd();
        vnet::transmit(
            frame,
            meta,
            csum,
            max,
            (&mut self.stats.vnet, &mut self.blocks),
            cx,
            |hdr, data| {
                let mut iov = vnet::iovecs(hdr, data);
                // SAFETY: msghdr is a plain C struct for which all zeroes is valid (no
                // name: the socket is bound; no control data).
                let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
                msg.msg_iov = iov.as_mut_ptr();
                msg.msg_iovlen = iov.len() as _;
                // SAFETY: `msg` points to the two iovecs, which describe memory borrowed
                // for the call (the header, the frame's window) with their exact lengths;
                // sendmsg only reads it despite the `*mut`. `fd` is open: `self` owns it.
                vnet::cvt(unsafe { libc::sendmsg(fd, &msg, 0) })
            },
        )
    }

    fn take_notification(&mut self, _cx: &DeviceContext<'_>) -> bool {
        // Reads are cheap to try: receive() says None on EAGAIN.
        true
    }

    fn receive(&mut self, cx: &DeviceContext<'_>) -> Option<RxFrame> {
        let fd = self.fd.as_raw_fd();
        let trust = self.offload();
        let PacketStats {
            vnet: stats,
            rx_outgoing,
            rx_undescribed,
            ..
        } = &mut self.stats;
        vnet::receive(&mut self.blocks, stats, trust, cx, |hdr, window| {
            let mut iov = vnet::iovecs_mut(hdr, window);
            // SAFETY: sockaddr_ll and msghdr are plain C structs for which all zeroes is
            // valid.
            let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            // SAFETY: as above.
            let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
            msg.msg_name = (&mut addr as *mut libc::sockaddr_ll).cast();
            msg.msg_namelen = size_of::<libc::sockaddr_ll>() as libc::socklen_t;
            msg.msg_iov = iov.as_mut_ptr();
            msg.msg_iovlen = iov.len() as _;
            // SAFETY: `msg` points to `addr` (with its size) and to the two iovecs, which
            // describe writable memory borrowed mutably for the call (the header array,
            // the block's window) with their exact lengths; the kernel writes at most
            // that much. `fd` is open: `self` owns it.
            match vnet::cvt(unsafe { libc::recvmsg(fd, &mut msg, 0) }) {
                Ok(_) if outgoing(&addr) => {
                    *rx_outgoing += 1;
                    Ok(Read::Skip)
                }
                Ok(n) => Ok(Read::Frame {
                    n,
                    truncated: msg.msg_flags & libc::MSG_TRUNC != 0,
                }),
                Err(e) => match e.raw_os_error() {
                    Some(libc::EAGAIN) => Ok(Read::Empty),
                    // packet_recvmsg: virtio_net_hdr_from_skb failed; the frame is gone.
                    Some(libc::EINVAL) => {
                        *rx_undescribed += 1;
                        Ok(Read::Skip)
                    }
                    _ => Err(e),
                },
            }
        })
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
        let s = self.stats();
        let mut c = s.vnet.named();
        c.extend([
            ("rx_outgoing", s.rx_outgoing),
            ("rx_undescribed", s.rx_undescribed),
            ("kernel_packets", s.kernel_packets),
            ("kernel_drops", s.kernel_drops),
        ]);
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_structs_have_the_kernels_sizes() {
        assert_eq!(size_of::<PacketMreq>(), 16);
        assert_eq!(size_of::<TpacketStats>(), 8);
        assert_eq!(size_of::<IfReqHwAddr>(), 40);
        assert_eq!(size_of::<libc::sockaddr_ll>(), 20);
        assert_eq!(vnet::VNET_HDR_LEN, 10);
    }

    #[test]
    fn names_and_mtus_are_checked() {
        let ok = PacketConfig::default();
        assert!(check("pv0", &ok).is_ok());
        assert!(check("fifteen-bytes-x", &ok).is_ok());
        for bad in ["", "sixteen-bytes-xx", "a/b", "a\0b"] {
            assert!(check(bad, &ok).is_err(), "{bad:?}");
        }
        for mtu in [0, 67, 65536] {
            assert!(check(
                "pv0",
                &PacketConfig {
                    mtu,
                    offload: false
                }
            )
            .is_err());
        }
        assert!(check(
            "pv0",
            &PacketConfig {
                mtu: 68,
                offload: true
            }
        )
        .is_ok());
    }

    #[test]
    fn binds_every_protocol_in_network_order() {
        let a = bind_address(7);
        assert_eq!(a.sll_family, libc::AF_PACKET as u16);
        assert_eq!(a.sll_protocol.to_ne_bytes(), [0x00, 0x03]);
        assert_eq!(a.sll_ifindex, 7);
    }

    #[test]
    fn outgoing_frames_are_recognised() {
        // SAFETY: all zeroes is a valid sockaddr_ll.
        let mut a: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        for (pkttype, out) in [(0, false), (1, false), (2, false), (3, false), (4, true)] {
            a.sll_pkttype = pkttype;
            assert_eq!(outgoing(&a), out);
        }
    }

    #[test]
    fn opening_a_missing_interface_fails_cleanly() {
        let e = PacketDevice::open("psk-no-such0", PacketConfig::default()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e:?}");
    }
}
