//! `Tuning`: one switch per optimization from the papers, each selecting a different code
//! path that really runs (DESIGN.md §3). Two presets anchor the ends: [`Tuning::bsd`], the
//! 1993 BSD/Ultrix behaviour the papers started from, and [`Tuning::fast`], everything on.
//!
//! A switch joins this struct when the code path it selects exists; the design lists the
//! ones still to come.

use crate::checksum::Kernel;
use crate::udp::pcb::{PcbConfig, PcbLookup};

/// The optimization switches of one stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tuning {
    /// The checksum kernel (paper 000 §4.1): `Rfc1071` is the 1993 16-bit loop; the
    /// others are faster kernels, up to the best the CPU supports.
    pub checksum: Kernel,
    /// Packet buffers from a pool of fixed-size blocks with a one-behind cache (paper 002
    /// §6.4), or, off, from the global allocator for every buffer as a 1993 kernel did for
    /// each mbuf.
    pub buffer_cache: bool,
    /// The IPv4 header checksum summed in line for a 20-byte header (paper 002 §6.1), or,
    /// off, by the general checksum routine with its loop set-up.
    pub inline_ip_header_checksum: bool,
    /// Consult the reassembly queue only for fragments; off, search it for every datagram
    /// received, as paper 001 §7.6 observed of Ultrix.
    pub defrag_check_only_fragments: bool,
    /// UDP's protocol-specific send and receive paths (paper 002 §7.1): copy and checksum
    /// in one pass, and on receive the data verified while it is copied out; off, the
    /// generic socket paths (copy, then checksum in a second pass).
    pub udp_fast_path: bool,
    /// sendto on an unconnected socket sends to the address given (paper 002 §6.2); off,
    /// it connects the PCB for the datagram and disconnects it after, as 4.3BSD did.
    pub sendto_without_connect: bool,
    /// A UDP socket keeps the Ethernet, IP and UDP headers of its last destination built
    /// (`udp::template`; 4.3BSD's IP header template, Clark et al. 1989) and sends the
    /// next datagram there by copying them and filling the lengths, identifier and
    /// checksums; off, every datagram goes through UDP, IP (route lookups, header) and
    /// the link (ARP, Ethernet header) one layer after the other.
    pub udp_header_template: bool,
    /// A TCP connection keeps the Ethernet and IP headers toward its peer built
    /// (`tcp::template`; 4.3BSD's `t_template`) and sends each segment by copying them
    /// and filling the IP total length, identifier and checksum; off, every segment goes
    /// through IP (route lookup, header) and the link (ARP, Ethernet header).
    pub tcp_header_template: bool,
    /// IPv4 input's short path for the common datagram (`ip::udp_short`): UDP, no
    /// options, not a fragment, to the receiving interface's own address, on a whole
    /// buffer. It is recognised from the header bytes and runs the same checks and
    /// counters as the general path without building an `Ipv4Repr`; anything else takes
    /// the general path. Off: every datagram takes the general path.
    pub udp_rx_short_path: bool,
    /// How UDP finds a datagram's PCB (paper 002 §6.3.5): linear best-match scan,
    /// early exit with move-to-front, or hashed.
    pub pcb_lookup: PcbLookup,
    /// The one-behind receive and send PCB caches (paper 002 §6.3.1-6.3.4).
    pub pcb_recv_cache: bool,
    pub pcb_send_cache: bool,
    /// Checksum elision (papers 000 and 003): skip the transport checksum when the route's
    /// next hop is the destination and the interface's link has a CRC. UDP sends a zero
    /// field; TCP negotiates RFC 1146's alternate checksum.
    pub checksum_elision: bool,
    /// TCP copies data between its socket buffers and segments while summing it, in one
    /// pass (paper 002 §7, paper 004's integrated copy and checksum); off, the copy and
    /// the checksum are two passes. (UDP's one-pass paths belong to `udp_fast_path`.)
    pub fused_copy_checksum: bool,
    /// Jacobson's TCP header prediction (4.4BSD `tcp_input`): the expected pure ACK or
    /// in-order data segment takes a short path; off, every segment takes the full one.
    pub header_prediction: bool,
    /// TCP output once per receive batch. With interrupt coalescing the stack takes a
    /// batch of frames per notification (paper 004 §3.4); on, TCP input only marks the
    /// connections that have something to send, and their output (the ACK, a window
    /// update, the data an ACK let out) runs once after the batch, so one ACK answers the
    /// batch's segments, as Linux's GRO arranges. The output a read makes due (a window
    /// update) likewise waits for the next poll, so that the reads of one turn of the
    /// application send one update. Off: output after every segment, as 4.4BSD's
    /// `tcp_input` ends, and after every read.
    pub tcp_output_per_batch: bool,
    /// Transmit checksum offload (paper 004 §3.2): where the interface's device can
    /// complete a transport checksum, TCP and UDP put only the pseudo-header sum in the
    /// field and copy their data without summing it; the device (or the kernel, through a
    /// TAP) sums the segment or datagram (UDP: only a datagram sent whole, not one IP
    /// fragments). Off: the stack sums everything itself.
    pub checksum_offload: bool,
    /// TCP segmentation offload: where the device can also segment (and checksum
    /// offload is on), TCP hands it super-segments of up to 64 KiB of whole segments and
    /// the device cuts them, as Linux's TSO/GSO does. Off: one segment per frame.
    pub segmentation_offload: bool,
    /// TCP segmentation in software, where the device does not segment (Linux's GSO, done
    /// in TCP's output itself): when several whole segments may go at once, TCP decides
    /// them as one super-segment (the window, Nagle, the header, the timers, once) and
    /// then cuts it into frames as the device would (tests/tcp.rs checks the frames are
    /// the segments it would otherwise send), no more than the device's queue has room
    /// for. Off: each segment is decided on its own.
    pub software_segmentation: bool,
    /// TCP data by reference on links whose device gathers fragments (scatter-gather)
    /// and whose segments are large enough for it to pay on that device (at least its
    /// `DeviceCaps::by_reference_min` bytes of data: 1,024 on a frame queue, a page on
    /// the memory NIC): the send buffer copies writes into shared blocks and segments carry slices
    /// of them as fragments (one copy at the sender, as 4.4BSD's mbuf clusters, where the
    /// ring costs a second into every frame), and TCP input keeps the fragments of an
    /// in-order segment in the receive buffer by reference (over a device that hands
    /// frames across, such as the frame queue, the receiver reads the sender's block:
    /// Linux's loopback and veth pass an skb's page fragments so). Off: the ring, and
    /// fragments that arrive are copied.
    pub tcp_send_by_reference: bool,
    /// TCP's receive checksum verified in the application's read (paper 002 §7.1's
    /// receive path, for TCP; Van Jacobson's scheme as Linux's `tcp_rcv_established`
    /// describes it: a segment left on the socket's queue and checksummed as it is copied
    /// to the user in the reader's context). An in-order segment whose data arrived by
    /// reference (`tcp_send_by_reference`) and that header prediction expects (pure
    /// data, nothing acknowledged, the window unchanged) is kept unverified and
    /// unacknowledged, RCV.NXT before it; the read sums it as it copies it, then TCP takes
    /// it (RCV.NXT, TS.Recent, the ACK owed). A segment that fails is dropped, and those
    /// behind it. What no read took by the delayed-ACK timeout, or before a segment input
    /// must process in full, is verified in a pass of its own. It is the receiving side's
    /// copy and checksum fused, so it runs only with `fused_copy_checksum` (and
    /// `header_prediction`). Off: every segment is verified at input.
    pub tcp_verify_on_read: bool,
}

impl Tuning {
    /// The 1993 baseline: every optimization off.
    pub fn bsd() -> Tuning {
        Tuning {
            checksum: Kernel::Rfc1071,
            buffer_cache: false,
            inline_ip_header_checksum: false,
            defrag_check_only_fragments: false,
            udp_fast_path: false,
            sendto_without_connect: false,
            udp_header_template: false,
            tcp_header_template: false,
            udp_rx_short_path: false,
            pcb_lookup: PcbLookup::Linear,
            pcb_recv_cache: false,
            pcb_send_cache: false,
            checksum_elision: false,
            fused_copy_checksum: false,
            header_prediction: false,
            tcp_output_per_batch: false,
            checksum_offload: false,
            segmentation_offload: false,
            software_segmentation: false,
            tcp_send_by_reference: false,
            tcp_verify_on_read: false,
        }
    }

    /// Every optimization on, with the best checksum kernel for this CPU.
    pub fn fast() -> Tuning {
        Tuning {
            checksum: Kernel::best(),
            buffer_cache: true,
            inline_ip_header_checksum: true,
            defrag_check_only_fragments: true,
            udp_fast_path: true,
            sendto_without_connect: true,
            udp_header_template: true,
            tcp_header_template: true,
            udp_rx_short_path: true,
            pcb_lookup: PcbLookup::Hashed,
            pcb_recv_cache: true,
            pcb_send_cache: true,
            checksum_elision: true,
            fused_copy_checksum: true,
            header_prediction: true,
            tcp_output_per_batch: true,
            checksum_offload: true,
            segmentation_offload: true,
            software_segmentation: true,
            tcp_send_by_reference: true,
            tcp_verify_on_read: true,
        }
    }
}

impl Tuning {
    /// The PCB table settings these switches select.
    pub fn pcb_config(&self) -> PcbConfig {
        PcbConfig {
            lookup: self.pcb_lookup,
            recv_cache: self.pcb_recv_cache,
            send_cache: self.pcb_send_cache,
        }
    }
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning::fast()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_differ_in_every_switch() {
        let (b, f) = (Tuning::bsd(), Tuning::fast());
        assert_ne!(b.checksum, f.checksum);
        assert_ne!(b.buffer_cache, f.buffer_cache);
        assert_ne!(b.inline_ip_header_checksum, f.inline_ip_header_checksum);
        assert_ne!(b.defrag_check_only_fragments, f.defrag_check_only_fragments);
        assert_ne!(b.udp_fast_path, f.udp_fast_path);
        assert_ne!(b.sendto_without_connect, f.sendto_without_connect);
        assert_ne!(b.udp_header_template, f.udp_header_template);
        assert_ne!(b.udp_rx_short_path, f.udp_rx_short_path);
        assert_ne!(b.tcp_header_template, f.tcp_header_template);
        assert_ne!(b.pcb_config(), f.pcb_config());
        assert_ne!(b.checksum_elision, f.checksum_elision);
        assert_ne!(b.fused_copy_checksum, f.fused_copy_checksum);
        assert_ne!(b.header_prediction, f.header_prediction);
        assert_ne!(b.tcp_output_per_batch, f.tcp_output_per_batch);
        assert_ne!(b.checksum_offload, f.checksum_offload);
        assert_ne!(b.segmentation_offload, f.segmentation_offload);
        assert_ne!(b.software_segmentation, f.software_segmentation);
        assert_ne!(b.tcp_send_by_reference, f.tcp_send_by_reference);
        assert_ne!(b.tcp_verify_on_read, f.tcp_verify_on_read);
        assert!(f.checksum.is_available());
        assert_eq!(Tuning::default(), f);
    }
}
