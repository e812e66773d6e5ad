//! The memory NIC's offload engines (paper 004 §3.2): what the device does to a frame's
//! checksums, and to a TCP super-frame, as its DMA engine reads the frame on transmit or
//! writes it on receive. Plain functions over the frame's bytes (Ethernet header
//! onward), so that they can be tested without a link; [`super::MemoryNic`] decides when
//! each runs and charges it to the ledger as the device's work.
//!
//! The NIC parses frames the way hardware does: Ethernet II carrying IPv4 (no VLAN tag),
//! fields read at fixed offsets, anything it does not recognise left alone.
//!
//! # Transmit: completing a partial checksum
//!
//! The stack asks with [`TxMeta::l4_checksum`] `(start, offset)`: the 16-bit field at
//! `start + offset` holds the pseudo-header sum over the transport length, not
//! complemented (Linux's `CHECKSUM_PARTIAL`, virtio-net's `NEEDS_CSUM`). The NIC sums from
//! `start` to the end of the frame with that seed in place, folds, complements and stores
//! the result ([`complete_checksum`]). A result of 0 is stored as `0xFFFF`: in UDP a zero
//! field means "no checksum" (RFC 768), and in TCP `0xFFFF` verifies the same as 0 (they
//! are the two ones'-complement zeros), so the engine needs no protocol knowledge; Linux's
//! software fallback (`skb_checksum_help`) does the same.
//!
//! # Transmit: TCP segmentation offload
//!
//! A super-frame ([`TxMeta::gso_size`] ≠ 0) is one Ethernet + IPv4 + TCP header followed
//! by up to 64 KiB of data; the NIC cuts the data into pieces of `gso_size` bytes (the
//! last one shorter) and gives each a copy of the headers ([`SuperFrame`]). What changes
//! per segment is what Linux's software path does (`inet_gso_segment` for the IPv4
//! header, `tcp_gso_segment` for TCP's; described here, not copied):
//!
//! - IPv4 total length: the segment's own; identification: the super-frame's plus the
//!   segment's index (one more per segment); the header checksum recomputed;
//! - TCP sequence number: the super-frame's plus the data before the segment;
//! - FIN and PSH only on the last segment (they belong to the end of the data), CWR only
//!   on the first (it marks the first segment sent after a congestion window reduction,
//!   RFC 3168 §6.1.2); every other bit, the ACK number, the window and the options (such
//!   as timestamps) are copied as they are. URG needs no rule here: in urgent mode TCP
//!   sends one segment a frame, each with its own pointer, never a super-frame;
//! - the checksum: the seed in the super-frame covers the pseudo-header with the
//!   super-frame's whole TCP length, which no segment has. Linux adjusts the seed by the
//!   difference between the two lengths before completing each segment's checksum; the
//!   NIC here does the same with ones'-complement arithmetic ([`adjust_seed`]: take the old
//!   length out, put the segment's in), then completes the segment as above. Everything
//!   else in the pseudo-header (addresses, protocol) is the same for every segment.
//!
//! # Receive: verifying
//!
//! [`check_received`] verifies the IPv4 header checksum (with `ipv4_rx`) and the TCP or
//! UDP checksum (with `l4_rx`) of a frame that carries IPv4, and says what the stack may
//! skip. [`RxChecksum::Verified`] tells the stack to skip both the IP header and the
//! transport check, so it is reported only when the NIC checked everything those two
//! checks would, and it all held; a wrong checksum is reported as
//! [`RxChecksum::None`] so that the stack checks the frame itself, drops it and counts
//! the drop where it always has. See [`check_received`] for the cases.

use crate::checksum;
use crate::driver::{ChecksumOffload, RxChecksum, TxMeta};

/// Ethernet II header length; the IPv4 header follows it.
const ETH_LEN: usize = 14;
const ETHERTYPE_IPV4: [u8; 2] = [0x08, 0x00];
const PROTO_TCP: u8 = 6;
const PROTO_UDP: u8 = 17;
/// The TCP checksum field's offset within the TCP header.
const TCP_CHECKSUM: usize = 16;
/// The UDP checksum field's offset within the UDP header.
const UDP_CHECKSUM: usize = 6;
const TCP_FIN: u8 = 0x01;
const TCP_PSH: u8 = 0x08;
const TCP_CWR: u8 = 0x80;

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

/// The IPv4 header of a frame: its length in bytes, when the frame is Ethernet II
/// carrying IPv4 with a well-formed header length that fits.
fn ipv4_header_len(frame: &[u8]) -> Option<usize> {
    if frame.len() < ETH_LEN + 20 || frame[12..14] != ETHERTYPE_IPV4 {
        return None;
    }
    let vihl = frame[ETH_LEN];
    let ihl = usize::from(vihl & 0x0F) * 4;
    (vihl >> 4 == 4 && ihl >= 20 && ETH_LEN + ihl <= frame.len()).then_some(ihl)
}

/// Whether a frame's window (its headers, the data following in fragments) starts an
/// unfragmented IPv4 TCP segment: the frames whose fragments the NIC hands across, the
/// data TCP at the other end can keep by reference (anything else it would copy there).
pub(super) fn starts_whole_tcp_segment(window: &[u8]) -> bool {
    ipv4_header_len(window).is_some_and(|_| {
        let ip = &window[ETH_LEN..];
        ip[9] == PROTO_TCP && be16(ip, 6) & 0x3FFF == 0
    })
}

/// Where the TCP payload starts in a frame of `frame_len` bytes that is exactly one
/// unfragmented IPv4 TCP segment (no link padding, a TCP data offset that fits) and whose
/// first part, `window`, holds its headers (the rest may lie in fragments: data its sender
/// passed by reference): what a NIC with header/data split must know to place the
/// payload. `None` for any other frame.
pub(super) fn tcp_payload_offset_parts(window: &[u8], frame_len: usize) -> Option<usize> {
    let ihl = ipv4_header_len(window)?;
    let ip = &window[ETH_LEN..];
    let total = usize::from(be16(ip, 2));
    let is_fragment = be16(ip, 6) & 0x3FFF != 0;
    if ip[9] != PROTO_TCP
        || is_fragment
        || ETH_LEN + total != frame_len
        || total < ihl + 20
        || window.len() < ETH_LEN + ihl + 20
    {
        return None;
    }
    let data_offset = usize::from(ip[ihl + 12] >> 4) * 4;
    let at = ETH_LEN + ihl + data_offset;
    (data_offset >= 20 && ihl + data_offset <= total && at <= window.len()).then_some(at)
}

/// Stores the value for a checksum field, 0 as `0xFFFF` (see the module documentation).
fn store_checksum(frame: &mut [u8], at: usize, sum: u16) {
    let value = checksum::finish(sum);
    put16(frame, at, if value == 0 { 0xFFFF } else { value });
}

/// Adds to the checksum at `at`, completed over some of a datagram's bytes, the sum
/// `more` of the others (ones'-complement arithmetic: the field is the complement of the
/// sum it covered, so the new sum is that plus `more`, RFC 1071 §2). Summing the bytes in
/// two parts this way stores what one pass over all of them would.
pub(super) fn add_to_checksum(frame: &mut [u8], at: usize, more: u16) {
    let covered = checksum::finish(be16(frame, at));
    store_checksum(frame, at, checksum::combine(covered, more));
}

/// Completes a partial checksum: sums from `start` to the end of `frame` with the seed in
/// the field at `start + offset`, complements and stores. False, with the frame
/// untouched, when the field does not fit the frame or is not on a 16-bit boundary from
/// `start` (the request makes no sense).
/// The memory NIC and the virtio-net devices' software fallback share it.
pub(crate) fn complete_checksum(frame: &mut [u8], start: usize, offset: usize) -> bool {
    complete_checksum_summed(frame, start, offset, None)
}

/// The same, where the bytes from `summed.0` on were already summed (to `summed.1`) as
/// the NIC gathered them in: only the bytes before are read. A sum taken from before
/// `start`, or from before the checksum field's end, is not used.
pub(crate) fn complete_checksum_summed(
    frame: &mut [u8],
    start: usize,
    offset: usize,
    summed: Option<(usize, u16)>,
) -> bool {
    if !checksum_field_fits(frame.len(), start, offset) {
        return false;
    }
    let sum = match summed {
        Some((from, rest)) if from >= start + offset + 2 && from <= frame.len() => {
            checksum::combine_at(checksum::sum(&frame[start..from]), rest, from - start)
        }
        _ => checksum::sum(&frame[start..]),
    };
    store_checksum(frame, start + offset, sum);
    true
}

/// Whether a checksum field at `start + offset` lies in a frame of `len` bytes, on a
/// 16-bit boundary from `start`.
pub(crate) fn checksum_field_fits(len: usize, start: usize, offset: usize) -> bool {
    offset.is_multiple_of(2) && start < len && start + offset + 2 <= len
}

/// Fills in the IPv4 header checksum; false when the frame does not carry IPv4 (or has
/// a malformed header length).
pub(crate) fn fill_ipv4_checksum(frame: &mut [u8]) -> bool {
    let Some(ihl) = ipv4_header_len(frame) else {
        return false;
    };
    let header = &mut frame[ETH_LEN..ETH_LEN + ihl];
    put16(header, 10, 0);
    let value = checksum::ipv4_header_checksum(header);
    put16(header, 10, value);
    true
}

/// A pseudo-header sum over `old_len` transport bytes turned into the same sum over
/// `new_len`: the length is one 16-bit term of the sum, so take it out and put the new
/// one in (ones'-complement arithmetic, RFC 1071 §2). Linux's `tcp_gso_segment` adjusts
/// its seed the same way.
pub(super) fn adjust_seed(seed: u16, old_len: u16, new_len: u16) -> u16 {
    checksum::combine(checksum::subtract(seed, old_len), new_len)
}

/// A TCP/IPv4 super-frame the NIC can cut, and how.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct SuperFrame {
    /// The IPv4 header's length.
    ip_len: usize,
    /// Ethernet, IPv4 and TCP headers: what each segment copies.
    headers: usize,
    /// Data bytes after the headers.
    data: usize,
    /// Data bytes per segment (the last may have fewer).
    mss: usize,
}

impl SuperFrame {
    /// The plan for a frame that asks for segmentation, or `None` when it cannot or need
    /// not be cut: not TCP over IPv4 with the checksum request where TCP's field is, a
    /// fragment, a total length that disagrees with the frame, or no more data than one
    /// segment holds (then it is an ordinary frame and its seed is already right).
    pub(super) fn plan(frame: &[u8], meta: &TxMeta) -> Option<SuperFrame> {
        SuperFrame::plan_parts(frame, frame.len(), meta)
    }

    /// The same for a frame of `total_len` bytes whose first part, `window`, holds at
    /// least the headers (the rest in its fragments: a zero-copy send).
    pub(super) fn plan_parts(window: &[u8], total_len: usize, meta: &TxMeta) -> Option<SuperFrame> {
        let frame = window;
        let mss = usize::from(meta.gso_size);
        let ip_len = ipv4_header_len(frame)?;
        let ip = &frame[ETH_LEN..];
        let tcp_start = ETH_LEN + ip_len;
        let is_fragment = be16(ip, 6) & 0x3FFF != 0;
        if mss == 0
            || ip[9] != PROTO_TCP
            || is_fragment
            || usize::from(be16(ip, 2)) != total_len - ETH_LEN
            || meta.l4_checksum != Some((tcp_start as u16, TCP_CHECKSUM as u16))
            || frame.len() < tcp_start + 20
        {
            return None;
        }
        let tcp_len = usize::from(frame[tcp_start + 12] >> 4) * 4;
        let headers = tcp_start + tcp_len;
        if tcp_len < 20 || headers > frame.len() {
            return None;
        }
        let data = total_len - headers;
        (data > mss).then_some(SuperFrame {
            ip_len,
            headers,
            data,
            mss,
        })
    }

    /// Data bytes per segment (the last may have fewer).
    pub(super) fn mss(&self) -> usize {
        self.mss
    }

    /// The headers' length (Ethernet onward), which every segment repeats.
    pub(super) fn header_len(&self) -> usize {
        self.headers
    }

    /// Where the TCP header starts (Ethernet onward).
    pub(super) fn tcp_start(&self) -> usize {
        ETH_LEN + self.ip_len
    }

    /// Where the TCP checksum field lies (Ethernet onward).
    pub(super) fn checksum_at(&self) -> usize {
        self.tcp_start() + TCP_CHECKSUM
    }

    /// How many segments.
    pub(super) fn segments(&self) -> usize {
        self.data.div_ceil(self.mss)
    }

    /// The longest segment's frame (Ethernet header onward): the headers and `mss` bytes.
    pub(super) fn segment_frame_len(&self) -> usize {
        self.headers + self.mss
    }

    /// Where segment `i`'s data lies in the super-frame's data, and its frame's length.
    pub(super) fn segment(&self, i: usize) -> (std::ops::Range<usize>, usize) {
        let from = i * self.mss;
        let to = (from + self.mss).min(self.data);
        (
            self.headers + from..self.headers + to,
            self.headers + to - from,
        )
    }

    /// Rewrites a copy of the super-frame's headers (`headers`, Ethernet onward) into
    /// segment `i`'s and puts the segment's seed in the TCP checksum field.
    fn rewrite_headers(&self, headers: &mut [u8], i: usize) {
        let n = self.segments();
        let (range, _) = self.segment(i);
        let seg_data = range.len();
        let tcp_start = ETH_LEN + self.ip_len;
        let tcp_header = self.headers - tcp_start;
        let ip = &mut headers[ETH_LEN..tcp_start];
        put16(ip, 2, (self.ip_len + tcp_header + seg_data) as u16);
        put16(ip, 4, be16(ip, 4).wrapping_add(i as u16));
        put16(ip, 10, 0);
        let ip_checksum = checksum::ipv4_header_checksum(ip);
        put16(ip, 10, ip_checksum);
        let tcp = &mut headers[tcp_start..];
        let seq = u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]);
        tcp[4..8].copy_from_slice(&seq.wrapping_add((i * self.mss) as u32).to_be_bytes());
        if i + 1 < n {
            tcp[13] &= !(TCP_FIN | TCP_PSH);
        }
        if i > 0 {
            tcp[13] &= !TCP_CWR;
        }
        let super_len = (tcp_header + self.data) as u16;
        let seed = adjust_seed(
            be16(tcp, TCP_CHECKSUM),
            super_len,
            (tcp_header + seg_data) as u16,
        );
        put16(tcp, TCP_CHECKSUM, seed);
    }

    /// Completes a segment's checksum from its rewritten headers (its seed in place) and
    /// the sum of its data.
    fn finish(&self, headers: &mut [u8], data_sum: u16) {
        let tcp_start = ETH_LEN + self.ip_len;
        // The TCP header is a whole number of 32-bit words, so the data starts at an even
        // offset and its sum adds as it is.
        let sum = checksum::combine(checksum::sum(&headers[tcp_start..]), data_sum);
        store_checksum(headers, tcp_start + TCP_CHECKSUM, sum);
    }

    /// Writes segment `i` into `out` (exactly its frame's length), copying its data out of
    /// the super-frame `src` and summing it in the same pass, as a DMA engine would.
    pub(super) fn cut(&self, src: &[u8], i: usize, out: &mut [u8]) {
        self.cut_with(src, i, out, |range, data| {
            checksum::copy_and_sum(data, &src[range])
        });
    }

    /// The same, with the headers from `window` and the data copied (and summed) by
    /// `copy_data` from wherever the frame keeps it: the range is in the whole frame's
    /// offsets, and `copy_data` returns the data's sum.
    pub(super) fn cut_with(
        &self,
        window: &[u8],
        i: usize,
        out: &mut [u8],
        copy_data: impl FnOnce(std::ops::Range<usize>, &mut [u8]) -> u16,
    ) {
        let (range, len) = self.segment(i);
        debug_assert_eq!(out.len(), len);
        let (headers, data) = out.split_at_mut(self.headers);
        let data_sum = copy_data(range, data);
        self.write_headers(window, i, headers, data_sum);
    }

    /// Writes segment `i`'s headers into `headers` (exactly [`header_len`](Self::header_len)
    /// bytes) from the super-frame's, its checksum completed with `data_sum`, the sum of
    /// its data.
    pub(super) fn write_headers(&self, window: &[u8], i: usize, headers: &mut [u8], data_sum: u16) {
        headers.copy_from_slice(&window[..self.headers]);
        self.rewrite_headers(headers, i);
        self.finish(headers, data_sum);
    }

    /// Turns the super-frame itself into its first segment, in place; the caller trims the
    /// frame to the segment's length afterwards (and has cut the other segments from it
    /// before).
    pub(super) fn first_in_place(&self, frame: &mut [u8]) {
        let (range, _) = self.segment(0);
        let data_sum = checksum::sum(&frame[range]);
        let headers = &mut frame[..self.headers];
        self.rewrite_headers(headers, 0);
        self.finish(headers, data_sum);
    }
}

/// What the receiving NIC found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct RxCheck {
    /// What to tell the stack.
    pub checksum: RxChecksum,
    /// A checksum the NIC checked was wrong.
    pub bad: bool,
}

/// Checks a received frame's checksums with the offloads `offload` has on:
///
/// - not IPv4, or a header length that does not fit the frame: nothing (the stack drops
///   such a frame and counts why);
/// - `ipv4_rx`: the header checksum; when it is wrong, nothing more (`None`, bad);
/// - a total length that does not fit the frame: nothing more (the stack's to drop);
/// - `l4_rx`, TCP or UDP and not a fragment: the transport checksum over the IPv4
///   payload (its total length, not the frame's, which may be padded) with the
///   pseudo-header. UDP's zero field means "no checksum" and a UDP length that differs
///   from the IPv4 payload's is left to the stack. A fragment is never vouched for: its
///   transport checksum covers the whole datagram, and the stack hands the last
///   fragment's verdict up with the datagram it reassembles;
/// - the verdict: `Verified` when the header checksum held (`ipv4_rx`) and the transport
///   checksum held or the datagram has none the NIC can check (ICMP checks its own, and a
///   UDP zero field is no checksum); with `l4_rx` but not `ipv4_rx`, the stack must still
///   check the IPv4 header, which `Verified` would skip, so the NIC reports the raw sum of
///   the transport bytes instead ([`RxChecksum::RawSum`], the other form of receive
///   offload, which the stack may combine with the pseudo-header); otherwise `None`.
///
/// `moved`: the frame's last bytes went elsewhere (header split placed the payload in
/// pages) and were summed as they went; their length and sum, so that the transport
/// checksum is the sum of what `frame` still holds and theirs, without reading them again.
pub(super) fn check_received(
    frame: &[u8],
    moved: Option<(usize, u16)>,
    offload: ChecksumOffload,
) -> RxCheck {
    let none = RxCheck {
        checksum: RxChecksum::None,
        bad: false,
    };
    if !offload.ipv4_rx && !offload.l4_rx {
        return none;
    }
    let Some(ihl) = ipv4_header_len(frame) else {
        return none;
    };
    let ip = &frame[ETH_LEN..];
    // The header checksum first: it covers the total length read next.
    if offload.ipv4_rx && !checksum::verifies(checksum::header_sum(&ip[..ihl])) {
        return RxCheck {
            checksum: RxChecksum::None,
            bad: true,
        };
    }
    let total = usize::from(be16(ip, 2));
    let (moved_len, moved_sum) = moved.unwrap_or((0, 0));
    if total < ihl + moved_len || ETH_LEN + total > frame.len() + moved_len {
        return none;
    }
    let protocol = ip[9];
    let is_fragment = be16(ip, 6) & 0x3FFF != 0;
    // The transport bytes at hand, and the length of the whole transport message.
    let l4 = &ip[ihl..total - moved_len];
    let l4_len = total - ihl;
    // Whether the NIC may vouch for the transport: true when it verified it or there is
    // nothing it could verify.
    let transport_ok = match protocol {
        // After reassembly the stack passes the last fragment's verdict up with the
        // datagram, so no fragment is ever vouched for.
        _ if is_fragment => false,
        PROTO_TCP | PROTO_UDP if !offload.l4_rx => false,
        PROTO_TCP if l4.len() < 20 => false,
        PROTO_UDP if l4.len() < 8 || usize::from(be16(l4, 4)) != l4_len => false,
        PROTO_UDP if be16(l4, UDP_CHECKSUM) == 0 => true,
        PROTO_TCP | PROTO_UDP => {
            let raw = checksum::combine_at(checksum::sum(l4), moved_sum, l4.len());
            let src = [ip[12], ip[13], ip[14], ip[15]];
            let dst = [ip[16], ip[17], ip[18], ip[19]];
            let pseudo = checksum::pseudo_header_v4(src, dst, protocol, l4_len as u16);
            let ok = checksum::verifies(checksum::combine(pseudo, raw));
            if !offload.ipv4_rx {
                return RxCheck {
                    checksum: RxChecksum::RawSum(raw),
                    bad: !ok,
                };
            }
            if !ok {
                return RxCheck {
                    checksum: RxChecksum::None,
                    bad: true,
                };
            }
            true
        }
        _ => true,
    };
    if offload.ipv4_rx && transport_ok {
        RxCheck {
            checksum: RxChecksum::Verified,
            bad: false,
        }
    } else {
        none
    }
}
