//! IPv4 input's short path for the common datagram (`Tuning::udp_rx_short_path`): UDP,
//! a 20-byte header (no options), not a fragment, addressed to the receiving interface's
//! own address, in one whole buffer.
//!
//! Such a datagram is recognised from its header bytes alone ([`Stack::udp_short_eligible`]),
//! with the very conditions under which the general path's `Ipv4Repr::parse` succeeds and
//! its `accepts` and fragment tests pass. The short path then runs what the general path
//! runs after parsing, in the same order and with the same counters: `ip.packets_in`, the
//! header checksum (`ip.drop.bad_checksum`), the link-layer padding trimmed, `ip.delivered`,
//! and UDP input. What it leaves out is only what produces nothing for this datagram: the
//! `Ipv4Repr` (about 70 bytes built, returned and copied), the fragment key, the walk over
//! the interfaces for broadcast and own addresses, the defragmentation test. UDP builds
//! the header representation only if it has to quote the datagram in an ICMP error.
//!
//! Every other datagram (options, fragments, broadcast, another of our addresses, another
//! protocol, any length that does not add up, loopback, a split buffer) is not touched here
//! and takes the general path, which counts and refuses it as before. The equivalence is
//! tested by feeding the same frames through both paths (`tests/udp_short_path.rs`).

use crate::buf::PacketBuf;
use crate::driver::RxChecksum;
use crate::probe::{Counter, Layer, Op, Side};
use crate::stack::Stack;
use crate::time::Instant;
use crate::udp::UdpInputIp;
use crate::wire::ipv4::MIN_HEADER_LEN;
use crate::wire::Ipv4Address;

/// Version 4 and an IHL of 5 words: a header without options (RFC 791 §3.1).
const VERSION_4_IHL_5: u8 = 0x45;
/// The IP protocol number of UDP.
const PROTOCOL_UDP: u8 = 17;
/// More Fragments and the fragment offset: both zero for a whole datagram.
const MORE_FRAGS_AND_OFFSET: u16 = 0x3FFF;

/// What the short path learned from the header of an eligible datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ShortUdp {
    pub src: Ipv4Address,
    pub dst: Ipv4Address,
    /// The total length field: at least 20 and at most the buffer's length.
    pub total_len: usize,
}

impl Stack {
    /// Whether the datagram in `buf`, received on `iface`, takes the short path; if so, the
    /// header fields it needs. Counts nothing and changes nothing.
    #[inline]
    pub(crate) fn udp_short_eligible(&self, iface: usize, buf: &PacketBuf) -> Option<ShortUdp> {
        // The defragmentation test of paper 001 §7.6 (switch off) stays on the general
        // path, as does a split buffer (only TCP is taken split).
        if !self.tuning.udp_rx_short_path
            || !self.tuning.defrag_check_only_fragments
            || buf.has_frags()
        {
            return None;
        }
        // Loopback's index names no interface: `get` refuses it.
        let ours = self.ifaces.get(iface)?.cidr.address;
        let data = buf.data();
        let h = data.first_chunk::<MIN_HEADER_LEN>()?;
        let flags_frag = u16::from_be_bytes([h[6], h[7]]);
        let total_len = usize::from(u16::from_be_bytes([h[2], h[3]]));
        let dst = Ipv4Address([h[16], h[17], h[18], h[19]]);
        let eligible = h[0] == VERSION_4_IHL_5
            && h[9] == PROTOCOL_UDP
            && flags_frag & MORE_FRAGS_AND_OFFSET == 0
            && (MIN_HEADER_LEN..=data.len()).contains(&total_len)
            && dst == ours;
        eligible.then(|| ShortUdp {
            src: Ipv4Address([h[12], h[13], h[14], h[15]]),
            dst,
            total_len,
        })
    }

    /// The general path's work after parsing, for a datagram [`udp_short_eligible`]
    /// (Self::udp_short_eligible) accepted.
    #[inline]
    pub(crate) fn udp_short_input(
        &mut self,
        ip: ShortUdp,
        mut buf: PacketBuf,
        rx: RxChecksum,
        now: Instant,
    ) {
        self.ledger.counters().inc(Counter::IpPacketsIn);
        // Never loopback here, so only a NIC's verdict spares the sum.
        if rx != RxChecksum::Verified {
            let ok = {
                let _p = self.ledger.probe(Layer::Ip, Side::Receive, Op::Checksum);
                let header = &buf.data()[..MIN_HEADER_LEN];
                crate::checksum::verifies(self.ip_header_sum(header))
            };
            if !ok {
                self.ledger.counters().inc(Counter::IpDropBadChecksum);
                return self.free(Layer::Ip, Side::Receive, buf);
            }
        }
        let trimmed = {
            let _p = self.ledger.probe(Layer::Ip, Side::Receive, Op::IpProto);
            // Link-layer padding past the total length.
            match buf.len().saturating_sub(ip.total_len) {
                0 => Ok(()),
                extra => buf.trim_back(extra),
            }
        };
        if trimmed.is_err() {
            self.ledger.counters().inc(Counter::IpDropMalformed);
            return self.free(Layer::Ip, Side::Receive, buf);
        }
        self.ledger.counters().inc(Counter::IpDelivered);
        let udp = UdpInputIp {
            src: ip.src,
            dst: ip.dst,
            header_len: MIN_HEADER_LEN,
            repr: None,
        };
        self.udp_input_from(udp, buf, rx, now);
    }
}
