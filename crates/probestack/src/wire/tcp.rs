//! TCP, the Transmission Control Protocol: the segment header of RFC 9293 §3.1 and the
//! options of RFC 9293 §3.2, RFC 7323 (window scale, timestamps), RFC 2018 (selective
//! acknowledgment) and RFC 1146 (alternate checksums).
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-------------------------------+-------------------------------+
//! |          source port          |       destination port        |
//! +-------------------------------+-------------------------------+
//! |                        sequence number                        |
//! +---------------------------------------------------------------+
//! |                     acknowledgment number                     |
//! +-------+-------+-+-+-+-+-+-+-+-+-------------------------------+
//! | data  |reser- |C|E|U|A|P|R|S|F|                               |
//! |offset | ved   |W|C|R|C|S|S|Y|I|            window             |
//! |       |       |R|E|G|K|H|T|N|N|                               |
//! +-------+-------+-+-+-+-+-+-+-+-+-------------------------------+
//! |           checksum            |        urgent pointer         |
//! +-------------------------------+-------------------------------+
//! |                 options (0 to 40 bytes) ...                   |
//! +---------------------------------------------------------------+
//! |                            data ...
//! +---------------------------------------------------------------
//! ```
//!
//! The data offset counts 32-bit words of header, options included: 5 to 15, so a header is
//! 20 to 60 bytes. A segment has no length field of its own; it is the whole buffer the
//! view is given, which the IP layer cuts to the datagram's total length.
//!
//! The checksum covers an IPv4 pseudo-header (source, destination, zero, protocol 6, TCP
//! length = header + data), the header and the data (RFC 9293 §3.1). Unlike UDP's, it is
//! never optional: zero is an ordinary checksum value. Two hosts that want to stop checking
//! (paper 000's elision on a CRC-protected hop) must agree to, with the Alternate Checksum
//! Request option ([`AltChecksum`]); the TCP layer decides, and parses with
//! [`Checksum::Skip`] once they have.

use std::fmt;
use std::iter::FusedIterator;
use std::ops::{Add, AddAssign, Sub};

use super::{check_len, field, Checksum, Error, Ipv4Address, Proto, Result};
use crate::checksum::{self, Accumulator};

/// The IP protocol number of TCP.
pub const PROTOCOL: u8 = 6;

/// Length of the fixed part of the header (data offset 5).
pub const HEADER_LEN: usize = offset::OPTIONS;

/// Longest header: data offset 15.
pub const MAX_HEADER_LEN: usize = 60;

/// Most option bytes a header can hold.
pub const MAX_OPTIONS_LEN: usize = MAX_HEADER_LEN - HEADER_LEN;

/// The largest window-scale shift a TCP uses (RFC 7323 §2.3): a received shift above this is
/// used as this.
pub const MAX_WINDOW_SHIFT: u8 = 14;

/// Most blocks one SACK option can carry (RFC 2018 §3: 2 + 8 × 4 = 34 bytes of the 40).
pub const MAX_SACK_BLOCKS: usize = 4;

/// Byte offsets of the header fields.
mod offset {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const SEQ_NUMBER: usize = 4;
    pub const ACK_NUMBER: usize = 8;
    /// Data offset in the high four bits, reserved bits in the low four.
    pub const DATA_OFFSET: usize = 12;
    pub const FLAGS: usize = 13;
    pub const WINDOW: usize = 14;
    pub const CHECKSUM: usize = 16;
    pub const URGENT: usize = 18;
    pub const OPTIONS: usize = 20;
}

/// The control bits in byte 13 (RFC 9293 §3.1; ECE and CWR from RFC 3168 §6.1).
mod flag {
    pub const FIN: u8 = 0x01;
    pub const SYN: u8 = 0x02;
    pub const RST: u8 = 0x04;
    pub const PSH: u8 = 0x08;
    pub const ACK: u8 = 0x10;
    pub const URG: u8 = 0x20;
    pub const ECE: u8 = 0x40;
    pub const CWR: u8 = 0x80;
}

/// Option kinds (the "Kind" byte of RFC 9293 §3.2 and of the RFCs that define each).
pub mod option_kind {
    /// End of option list (RFC 9293 §3.2).
    pub const END_OF_LIST: u8 = 0;
    /// No-operation, for alignment (RFC 9293 §3.2).
    pub const NO_OPERATION: u8 = 1;
    /// Maximum segment size (RFC 9293 §3.2, §3.7.1).
    pub const MAX_SEG_SIZE: u8 = 2;
    /// Window scale (RFC 7323 §2.2).
    pub const WINDOW_SCALE: u8 = 3;
    /// SACK permitted (RFC 2018 §2).
    pub const SACK_PERMITTED: u8 = 4;
    /// SACK blocks (RFC 2018 §3).
    pub const SACK: u8 = 5;
    /// Timestamps (RFC 7323 §3.2).
    pub const TIMESTAMPS: u8 = 8;
    /// Alternate checksum request (RFC 1146).
    pub const ALT_CHECKSUM_REQUEST: u8 = 14;
    /// Alternate checksum data (RFC 1146).
    pub const ALT_CHECKSUM_DATA: u8 = 15;
}

/// A sequence number: a point in the 2^32 circular sequence space of RFC 9293 §3.4.
///
/// Arithmetic wraps. Comparisons are modular, so `SeqNumber` deliberately has no `Ord`:
/// `a.lt(b)` holds when `b` is less than 2^31 ahead of `a`, and two numbers exactly 2^31
/// apart compare "less than" both ways (RFC 1982 §3.2 leaves that case undefined).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SeqNumber(pub u32);

impl SeqNumber {
    /// The signed distance from `other` to `self`: positive when `self` is ahead.
    const fn distance(self, other: SeqNumber) -> i32 {
        self.0.wrapping_sub(other.0) as i32
    }

    /// `self` comes before `other` (RFC 9293 §3.4's "<" on sequence numbers).
    pub const fn lt(self, other: SeqNumber) -> bool {
        self.distance(other) < 0
    }

    /// `self` comes before `other` or is it.
    pub const fn le(self, other: SeqNumber) -> bool {
        self.distance(other) <= 0
    }

    /// `self` comes after `other`.
    pub const fn gt(self, other: SeqNumber) -> bool {
        self.distance(other) > 0
    }

    /// `self` comes after `other` or is it.
    pub const fn ge(self, other: SeqNumber) -> bool {
        self.distance(other) >= 0
    }

    /// How many sequence numbers `self` is past `earlier`, counting forwards round the
    /// circle: always in `0..2^32`, so meaningful only when `earlier.le(self)`.
    pub const fn bytes_since(self, earlier: SeqNumber) -> usize {
        self.0.wrapping_sub(earlier.0) as usize
    }
}

impl Add<usize> for SeqNumber {
    type Output = SeqNumber;

    /// Advances by `n`, modulo 2^32. A TCP never advances by 2^31 or more at once (no
    /// window is that large), so the reduction of `n` modulo 2^32 is never visible.
    fn add(self, n: usize) -> SeqNumber {
        SeqNumber(self.0.wrapping_add(n as u32))
    }
}

impl AddAssign<usize> for SeqNumber {
    fn add_assign(&mut self, n: usize) {
        *self = *self + n;
    }
}

impl Sub<usize> for SeqNumber {
    type Output = SeqNumber;

    /// Steps back by `n`, modulo 2^32.
    fn sub(self, n: usize) -> SeqNumber {
        SeqNumber(self.0.wrapping_sub(n as u32))
    }
}

impl Sub for SeqNumber {
    type Output = i32;

    /// The signed distance from `other` to `self`, modulo 2^32: positive when `self` is
    /// ahead.
    fn sub(self, other: SeqNumber) -> i32 {
        self.distance(other)
    }
}

impl fmt::Display for SeqNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A checksum algorithm number of the Alternate Checksum Request option (RFC 1146).
///
/// RFC 1146 defines 0 (the TCP checksum), 1 (8-bit Fletcher, a 16-bit check value) and 2
/// (16-bit Fletcher, a 32-bit check value). Its predecessor RFC 1145 also listed 3,
/// "Redundant Checksum Avoidance", which RFC 1146 dropped; paper 000 (Kay & Pasquale 1993,
/// "TCP Implementation") proposes an alternate-checksum value that means "no data
/// checksum" so that two hosts on one CRC-protected hop can agree to skip it. This stack
/// uses 3 for that value, [`AltChecksum::NoChecksum`]. Both RFCs are historic, so no
/// registry holds the number.
///
/// Per RFC 1146, the request rides on SYN segments only, both sides must name the same
/// algorithm for it to take effect, and SYN and RST segments always carry the standard
/// checksum. Those are rules for the TCP layer; the wire format only carries the number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AltChecksum {
    /// 0: the standard TCP checksum.
    Tcp,
    /// 1: 8-bit Fletcher (RFC 1146 appendix I).
    Fletcher8,
    /// 2: 16-bit Fletcher (RFC 1146 appendix II).
    Fletcher16,
    /// 3: no data checksum (RFC 1145's "Redundant Checksum Avoidance"; paper 000).
    NoChecksum,
    /// Any other number.
    Other(u8),
}

impl From<u8> for AltChecksum {
    fn from(v: u8) -> Self {
        match v {
            0 => AltChecksum::Tcp,
            1 => AltChecksum::Fletcher8,
            2 => AltChecksum::Fletcher16,
            3 => AltChecksum::NoChecksum,
            v => AltChecksum::Other(v),
        }
    }
}

impl From<AltChecksum> for u8 {
    fn from(a: AltChecksum) -> u8 {
        match a {
            AltChecksum::Tcp => 0,
            AltChecksum::Fletcher8 => 1,
            AltChecksum::Fletcher16 => 2,
            AltChecksum::NoChecksum => 3,
            AltChecksum::Other(v) => v,
        }
    }
}

/// The two values of the Timestamps option (RFC 7323 §3.2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TcpTimestamp {
    /// TSval: the sender's clock when it sent the segment.
    pub tsval: u32,
    /// TSecr: the TSval being echoed back (meaningful when ACK is set).
    pub tsecr: u32,
}

/// One TCP option (RFC 9293 §3.2 and the RFCs cited on each variant).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TcpOption<'a> {
    /// Kind 0, one byte: the option list ends here; what follows is padding.
    EndOfList,
    /// Kind 1, one byte: padding between options.
    NoOperation,
    /// Kind 2, length 4: the largest segment the sender will receive (RFC 9293 §3.7.1).
    MaxSegmentSize(u16),
    /// Kind 3, length 3: the sender's window shift (RFC 7323 §2.2). Kept as sent; a shift
    /// above [`MAX_WINDOW_SHIFT`] is used as 14 (RFC 7323 §2.3), which is the TCP layer's
    /// business.
    WindowScale(u8),
    /// Kind 4, length 2: the sender can receive SACK blocks (RFC 2018 §2).
    SackPermitted,
    /// Kind 5, length 2 + 8n with n = 1..=4: blocks of received data, each its left edge
    /// and the sequence number just past its right edge (RFC 2018 §3). The blocks fill the
    /// array from the front.
    SackRange([Option<(u32, u32)>; MAX_SACK_BLOCKS]),
    /// Kind 8, length 10: TSval and TSecr (RFC 7323 §3.2).
    Timestamp(TcpTimestamp),
    /// Kind 14, length 3: the checksum algorithm the sender asks to use (RFC 1146).
    AltChecksumRequest(AltChecksum),
    /// Kind 15, length N >= 2: check bytes of an alternate checksum that do not fit the
    /// checksum field (RFC 1146).
    AltChecksumData(&'a [u8]),
    /// Any other kind, skipped by its length.
    Unknown { kind: u8, data: &'a [u8] },
}

/// A malformed-option error.
const fn bad_option(kind: u8, reason: &'static str) -> Error {
    Error::BadOption {
        proto: Proto::Tcp,
        kind,
        reason,
    }
}

/// The data of an option as a fixed-size array, or an error naming the option's rule.
fn fixed<const N: usize>(kind: u8, data: &[u8], reason: &'static str) -> Result<[u8; N]> {
    <[u8; N]>::try_from(data).map_err(|_| bad_option(kind, reason))
}

impl<'a> TcpOption<'a> {
    /// Parses the option at the front of `bytes` and returns it with the bytes after it.
    ///
    /// Fails with [`Error::BadOption`] when the length byte is missing, below 2, or runs
    /// past `bytes`, or when a known kind has a length its RFC does not allow; with
    /// [`Error::Truncated`] when `bytes` is empty.
    pub fn parse(bytes: &'a [u8]) -> Result<(TcpOption<'a>, &'a [u8])> {
        let Some((&kind, after_kind)) = bytes.split_first() else {
            return Err(Error::Truncated {
                proto: Proto::Tcp,
                needed: 1,
                available: 0,
            });
        };
        match kind {
            option_kind::END_OF_LIST => return Ok((TcpOption::EndOfList, after_kind)),
            option_kind::NO_OPERATION => return Ok((TcpOption::NoOperation, after_kind)),
            _ => {}
        }
        // Every other option is kind, length (counting both), data (RFC 9293 §3.1).
        let Some(&length) = after_kind.first() else {
            return Err(bad_option(kind, "length byte runs past the header"));
        };
        let length = usize::from(length);
        if length < 2 {
            return Err(bad_option(kind, "length below 2"));
        }
        let (Some(data), Some(rest)) = (bytes.get(2..length), bytes.get(length..)) else {
            return Err(bad_option(kind, "runs past the header"));
        };
        let option = match kind {
            option_kind::MAX_SEG_SIZE => TcpOption::MaxSegmentSize(u16::from_be_bytes(fixed(
                kind,
                data,
                "MSS length is not 4",
            )?)),
            option_kind::WINDOW_SCALE => {
                let [shift] = fixed(kind, data, "window scale length is not 3")?;
                TcpOption::WindowScale(shift)
            }
            option_kind::SACK_PERMITTED => {
                let [] = fixed(kind, data, "SACK-permitted length is not 2")?;
                TcpOption::SackPermitted
            }
            option_kind::SACK => {
                if data.is_empty()
                    || !data.len().is_multiple_of(8)
                    || data.len() > 8 * MAX_SACK_BLOCKS
                {
                    return Err(bad_option(kind, "SACK length is not 2 + 8n, n = 1..=4"));
                }
                let mut blocks = [None; MAX_SACK_BLOCKS];
                for (slot, edges) in blocks.iter_mut().zip(data.chunks_exact(8)) {
                    let (left, right) = edges.split_at(4);
                    let left = fixed(kind, left, "SACK edge")?;
                    let right = fixed(kind, right, "SACK edge")?;
                    *slot = Some((u32::from_be_bytes(left), u32::from_be_bytes(right)));
                }
                TcpOption::SackRange(blocks)
            }
            option_kind::TIMESTAMPS => {
                let values: [u8; 8] = fixed(kind, data, "timestamps length is not 10")?;
                let (tsval, tsecr) = values.split_at(4);
                TcpOption::Timestamp(TcpTimestamp {
                    tsval: u32::from_be_bytes(fixed(kind, tsval, "TSval")?),
                    tsecr: u32::from_be_bytes(fixed(kind, tsecr, "TSecr")?),
                })
            }
            option_kind::ALT_CHECKSUM_REQUEST => {
                let [number] = fixed(kind, data, "alternate checksum request length is not 3")?;
                TcpOption::AltChecksumRequest(number.into())
            }
            option_kind::ALT_CHECKSUM_DATA => TcpOption::AltChecksumData(data),
            kind => TcpOption::Unknown { kind, data },
        };
        Ok((option, rest))
    }

    /// The option's kind byte.
    pub fn kind(&self) -> u8 {
        match *self {
            TcpOption::EndOfList => option_kind::END_OF_LIST,
            TcpOption::NoOperation => option_kind::NO_OPERATION,
            TcpOption::MaxSegmentSize(_) => option_kind::MAX_SEG_SIZE,
            TcpOption::WindowScale(_) => option_kind::WINDOW_SCALE,
            TcpOption::SackPermitted => option_kind::SACK_PERMITTED,
            TcpOption::SackRange(_) => option_kind::SACK,
            TcpOption::Timestamp(_) => option_kind::TIMESTAMPS,
            TcpOption::AltChecksumRequest(_) => option_kind::ALT_CHECKSUM_REQUEST,
            TcpOption::AltChecksumData(_) => option_kind::ALT_CHECKSUM_DATA,
            TcpOption::Unknown { kind, .. } => kind,
        }
    }

    /// Bytes the option takes on the wire.
    pub fn buffer_len(&self) -> usize {
        match *self {
            TcpOption::EndOfList | TcpOption::NoOperation => 1,
            TcpOption::MaxSegmentSize(_) => 4,
            TcpOption::WindowScale(_) => 3,
            TcpOption::SackPermitted => 2,
            TcpOption::SackRange(blocks) => 2 + 8 * blocks.iter().flatten().count(),
            TcpOption::Timestamp(_) => 10,
            TcpOption::AltChecksumRequest(_) => 3,
            TcpOption::AltChecksumData(data) | TcpOption::Unknown { data, .. } => {
                data.len().saturating_add(2)
            }
        }
    }

    /// Writes the option at the front of `buf` and returns the bytes written.
    ///
    /// A SACK option writes its `Some` blocks in order. Fails with [`Error::BadOption`] for
    /// a SACK option with no blocks or an option whose length does not fit its length
    /// byte, and with [`Error::Truncated`] when `buf` is too short.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let len = self.buffer_len();
        let kind = self.kind();
        let Ok(length_byte) = u8::try_from(len) else {
            return Err(bad_option(kind, "longer than 255 bytes"));
        };
        if let TcpOption::SackRange(blocks) = self {
            if blocks.iter().flatten().next().is_none() {
                return Err(bad_option(kind, "SACK option with no blocks"));
            }
        }
        let Some(out) = buf.get_mut(..len) else {
            return Err(Error::Truncated {
                proto: Proto::Tcp,
                needed: len,
                available: buf.len(),
            });
        };
        out[0] = kind;
        if len == 1 {
            return Ok(1);
        }
        out[1] = length_byte;
        let data = &mut out[2..];
        match *self {
            TcpOption::EndOfList | TcpOption::NoOperation | TcpOption::SackPermitted => {}
            TcpOption::MaxSegmentSize(mss) => field::set_u16(data, 0, mss),
            TcpOption::WindowScale(shift) => data[0] = shift,
            TcpOption::SackRange(blocks) => {
                for ((left, right), edges) in blocks.iter().flatten().zip(data.chunks_exact_mut(8))
                {
                    field::set_u32(edges, 0, *left);
                    field::set_u32(edges, 4, *right);
                }
            }
            TcpOption::Timestamp(ts) => {
                field::set_u32(data, 0, ts.tsval);
                field::set_u32(data, 4, ts.tsecr);
            }
            TcpOption::AltChecksumRequest(number) => data[0] = number.into(),
            TcpOption::AltChecksumData(bytes) | TcpOption::Unknown { data: bytes, .. } => {
                data.copy_from_slice(bytes)
            }
        }
        Ok(len)
    }
}

/// The options in a header's option bytes, in order.
///
/// Yields [`TcpOption::EndOfList`] and then stops, since what follows it is padding (RFC
/// 9293 §3.1). A malformed option yields its error and then stops: with a bad length there
/// is no telling where the next option starts.
#[derive(Clone, Debug)]
pub struct TcpOptions<'a> {
    rest: &'a [u8],
    done: bool,
}

impl<'a> TcpOptions<'a> {
    /// The options in `bytes` (the option bytes of a header, without the fixed 20).
    pub const fn new(bytes: &'a [u8]) -> TcpOptions<'a> {
        TcpOptions {
            rest: bytes,
            done: false,
        }
    }
}

impl<'a> Iterator for TcpOptions<'a> {
    type Item = Result<TcpOption<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done || self.rest.is_empty() {
            return None;
        }
        match TcpOption::parse(self.rest) {
            Ok((option, rest)) => {
                self.rest = rest;
                self.done = option == TcpOption::EndOfList;
                Some(Ok(option))
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

impl FusedIterator for TcpOptions<'_> {}

/// The sum of the IPv4 pseudo-header for a segment of `length` bytes (RFC 9293 §3.1).
fn pseudo_header_sum(src: Ipv4Address, dst: Ipv4Address, length: u16) -> u16 {
    checksum::pseudo_header_v4(src.octets(), dst.octets(), PROTOCOL, length)
}

/// The ones'-complement sum of a whole segment and its pseudo-header, or `None` if the
/// segment is too long for the pseudo-header's 16-bit length (no IPv4 datagram is).
fn segment_sum(segment: &[u8], src: Ipv4Address, dst: Ipv4Address) -> Option<u16> {
    let length = u16::try_from(segment.len()).ok()?;
    let mut sum = Accumulator::with_seed(pseudo_header_sum(src, dst, length));
    sum.add(segment);
    Some(sum.sum())
}

/// A view of a TCP segment: the whole buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// A view without checks; accessors panic if the buffer is shorter than 20 bytes, and
    /// the option and payload accessors if the data offset is below 5 or past the buffer.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// A view of a buffer checked to hold the whole header its data offset claims, so that
    /// no accessor panics.
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let packet = Packet { buffer };
        packet.check_len()?;
        Ok(packet)
    }

    /// The checks of [`new_checked`](Self::new_checked): the buffer holds the 20-byte fixed
    /// header; the data offset is at least 5 ([`Error::BadField`]); the buffer holds the
    /// header the data offset claims ([`Error::Truncated`]).
    pub fn check_len(&self) -> Result<()> {
        let bytes = self.buffer.as_ref();
        check_len(Proto::Tcp, bytes, HEADER_LEN)?;
        let data_offset = bytes[offset::DATA_OFFSET] >> 4;
        if data_offset < 5 {
            return Err(Error::BadField {
                proto: Proto::Tcp,
                field: "data offset",
                value: u32::from(data_offset),
            });
        }
        check_len(Proto::Tcp, bytes, usize::from(data_offset) * 4)
    }

    /// The buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    pub fn src_port(&self) -> u16 {
        field::u16_at(self.buffer.as_ref(), offset::SRC_PORT)
    }

    pub fn dst_port(&self) -> u16 {
        field::u16_at(self.buffer.as_ref(), offset::DST_PORT)
    }

    pub fn seq_number(&self) -> SeqNumber {
        SeqNumber(field::u32_at(self.buffer.as_ref(), offset::SEQ_NUMBER))
    }

    /// The acknowledgment field, whether or not ACK is set.
    pub fn ack_number(&self) -> SeqNumber {
        SeqNumber(field::u32_at(self.buffer.as_ref(), offset::ACK_NUMBER))
    }

    /// The data offset field: header length in 32-bit words.
    pub fn data_offset(&self) -> u8 {
        self.buffer.as_ref()[offset::DATA_OFFSET] >> 4
    }

    /// Header length in bytes, options included.
    pub fn header_len(&self) -> usize {
        usize::from(self.data_offset()) * 4
    }

    /// The four reserved bits between the data offset and CWR (RFC 9293 §3.1: sent as
    /// zero, ignored on receipt).
    pub fn reserved(&self) -> u8 {
        self.buffer.as_ref()[offset::DATA_OFFSET] & 0x0F
    }

    /// The eight control bits as one byte (CWR in the high bit, FIN in the low).
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[offset::FLAGS]
    }

    fn flag(&self, mask: u8) -> bool {
        self.flags() & mask != 0
    }

    pub fn fin(&self) -> bool {
        self.flag(flag::FIN)
    }

    pub fn syn(&self) -> bool {
        self.flag(flag::SYN)
    }

    pub fn rst(&self) -> bool {
        self.flag(flag::RST)
    }

    pub fn psh(&self) -> bool {
        self.flag(flag::PSH)
    }

    pub fn ack(&self) -> bool {
        self.flag(flag::ACK)
    }

    pub fn urg(&self) -> bool {
        self.flag(flag::URG)
    }

    pub fn ece(&self) -> bool {
        self.flag(flag::ECE)
    }

    pub fn cwr(&self) -> bool {
        self.flag(flag::CWR)
    }

    /// The window field as sent, before any window scaling.
    pub fn window_len(&self) -> u16 {
        field::u16_at(self.buffer.as_ref(), offset::WINDOW)
    }

    pub fn checksum(&self) -> u16 {
        field::u16_at(self.buffer.as_ref(), offset::CHECKSUM)
    }

    /// The urgent pointer field, whether or not URG is set.
    pub fn urgent_pointer(&self) -> u16 {
        field::u16_at(self.buffer.as_ref(), offset::URGENT)
    }

    /// The option bytes: from the end of the fixed header to the data offset.
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[offset::OPTIONS..self.header_len()]
    }

    /// The options, parsed one by one.
    pub fn options_iter(&self) -> TcpOptions<'_> {
        TcpOptions::new(self.options())
    }

    /// The data: everything after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }

    /// SEG.LEN of RFC 9293 §3.4: the data length, plus one for SYN and one for FIN.
    pub fn segment_len(&self) -> usize {
        self.payload().len() + usize::from(self.syn()) + usize::from(self.fin())
    }

    /// Whether the checksum verifies for a segment from `src` to `dst`. Never panics: a
    /// buffer shorter than 20 bytes or longer than 65,535 does not verify.
    pub fn verify_checksum(&self, src: Ipv4Address, dst: Ipv4Address) -> bool {
        let segment = self.buffer.as_ref();
        segment.len() >= HEADER_LEN
            && segment_sum(segment, src, dst).is_some_and(checksum::verifies)
    }

    /// [`verify_checksum`](Self::verify_checksum) for a receiver that summed the data
    /// itself while copying it out: `payload_sum` is the ones'-complement sum of exactly
    /// [`payload`](Self::payload). Only the header is read here.
    pub fn verify_checksum_with_payload_sum(
        &self,
        src: Ipv4Address,
        dst: Ipv4Address,
        payload_sum: u16,
    ) -> bool {
        let segment = self.buffer.as_ref();
        if self.check_len().is_err() {
            return false;
        }
        let Ok(length) = u16::try_from(segment.len()) else {
            return false;
        };
        let header_len = self.header_len();
        let mut sum = Accumulator::with_seed(pseudo_header_sum(src, dst, length));
        sum.add(&segment[..header_len]);
        sum.add_sum(payload_sum, segment.len() - header_len);
        checksum::verifies(sum.sum())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_src_port(&mut self, port: u16) {
        field::set_u16(self.buffer.as_mut(), offset::SRC_PORT, port);
    }

    pub fn set_dst_port(&mut self, port: u16) {
        field::set_u16(self.buffer.as_mut(), offset::DST_PORT, port);
    }

    pub fn set_seq_number(&mut self, seq: SeqNumber) {
        field::set_u32(self.buffer.as_mut(), offset::SEQ_NUMBER, seq.0);
    }

    pub fn set_ack_number(&mut self, ack: SeqNumber) {
        field::set_u32(self.buffer.as_mut(), offset::ACK_NUMBER, ack.0);
    }

    /// Sets the data offset from a header length in bytes, a multiple of 4 from 20 to 60;
    /// the reserved bits are kept. Other lengths are the caller's bug: the length is divided
    /// by 4 and only the low four bits of the result are kept.
    pub fn set_header_len(&mut self, len: usize) {
        let words = ((len / 4) & 0x0F) as u8;
        let byte = &mut self.buffer.as_mut()[offset::DATA_OFFSET];
        *byte = (words << 4) | (*byte & 0x0F);
    }

    /// Sets the four reserved bits (only the low four bits of `bits` are used).
    pub fn set_reserved(&mut self, bits: u8) {
        let byte = &mut self.buffer.as_mut()[offset::DATA_OFFSET];
        *byte = (*byte & 0xF0) | (bits & 0x0F);
    }

    /// Sets all eight control bits at once.
    pub fn set_flags(&mut self, flags: u8) {
        self.buffer.as_mut()[offset::FLAGS] = flags;
    }

    fn set_flag(&mut self, mask: u8, on: bool) {
        let flags = self.flags();
        self.set_flags(if on { flags | mask } else { flags & !mask });
    }

    pub fn set_fin(&mut self, on: bool) {
        self.set_flag(flag::FIN, on);
    }

    pub fn set_syn(&mut self, on: bool) {
        self.set_flag(flag::SYN, on);
    }

    pub fn set_rst(&mut self, on: bool) {
        self.set_flag(flag::RST, on);
    }

    pub fn set_psh(&mut self, on: bool) {
        self.set_flag(flag::PSH, on);
    }

    pub fn set_ack(&mut self, on: bool) {
        self.set_flag(flag::ACK, on);
    }

    pub fn set_urg(&mut self, on: bool) {
        self.set_flag(flag::URG, on);
    }

    pub fn set_ece(&mut self, on: bool) {
        self.set_flag(flag::ECE, on);
    }

    pub fn set_cwr(&mut self, on: bool) {
        self.set_flag(flag::CWR, on);
    }

    pub fn set_window_len(&mut self, window: u16) {
        field::set_u16(self.buffer.as_mut(), offset::WINDOW, window);
    }

    pub fn set_checksum(&mut self, checksum: u16) {
        field::set_u16(self.buffer.as_mut(), offset::CHECKSUM, checksum);
    }

    pub fn set_urgent_pointer(&mut self, pointer: u16) {
        field::set_u16(self.buffer.as_mut(), offset::URGENT, pointer);
    }

    /// The option bytes, for writing.
    pub fn options_mut(&mut self) -> &mut [u8] {
        let header_len = self.header_len();
        &mut self.buffer.as_mut()[offset::OPTIONS..header_len]
    }

    /// The data, for writing.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let header_len = self.header_len();
        &mut self.buffer.as_mut()[header_len..]
    }

    /// Computes the checksum over the pseudo-header and the whole buffer and writes it.
    /// Zero is written as zero: TCP has no "no checksum" value.
    ///
    /// A buffer longer than 65,535 bytes cannot be a segment in IPv4: its field is left
    /// zero (and [`verify_checksum`](Self::verify_checksum) rejects it).
    ///
    /// # Panics
    ///
    /// If the buffer is shorter than 20 bytes.
    pub fn fill_checksum(&mut self, src: Ipv4Address, dst: Ipv4Address) {
        self.set_checksum(0);
        if let Some(sum) = segment_sum(self.buffer.as_ref(), src, dst) {
            self.set_checksum(checksum::finish(sum));
        }
    }

    /// [`fill_checksum`](Self::fill_checksum) for a sender that summed the data itself
    /// while copying it in: `payload_sum` is the ones'-complement sum of exactly
    /// [`payload`](Self::payload). Only the header is read here.
    ///
    /// # Panics
    ///
    /// If the data offset is below 5 or past the buffer (never, for a view made by
    /// `new_checked` or written by [`TcpRepr::emit`]).
    pub fn fill_checksum_with_payload_sum(
        &mut self,
        src: Ipv4Address,
        dst: Ipv4Address,
        payload_sum: u16,
    ) {
        self.set_checksum(0);
        let header_len = self.header_len();
        assert!(header_len >= HEADER_LEN, "TCP data offset below 5");
        let segment = self.buffer.as_ref();
        let Ok(length) = u16::try_from(segment.len()) else {
            return;
        };
        let mut sum = Accumulator::with_seed(pseudo_header_sum(src, dst, length));
        sum.add(&segment[..header_len]);
        sum.add_sum(payload_sum, segment.len() - header_len);
        self.set_checksum(checksum::finish(sum.sum()));
    }
}

/// The connection-control bit of a segment: at most one of SYN, FIN and RST.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Control {
    /// None of the three.
    #[default]
    None,
    /// SYN: synchronize sequence numbers (opens a connection).
    Syn,
    /// FIN: no more data from the sender.
    Fin,
    /// RST: reset the connection.
    Rst,
}

impl Control {
    /// The sequence space the control bit takes (RFC 9293 §3.4: SYN and FIN take one).
    pub const fn len(self) -> usize {
        match self {
            Control::Syn | Control::Fin => 1,
            Control::None | Control::Rst => 0,
        }
    }

    /// Whether the control bit takes no sequence space.
    pub const fn is_empty(self) -> bool {
        self.len() == 0
    }
}

/// A parsed TCP segment: header fields, the options this stack knows, and the data.
///
/// At the wire level a segment may set at most one of SYN, FIN and RST: a segment with two
/// or more is rejected by [`parse`](Self::parse) with [`Error::BadField`]. A correct TCP
/// never sends one (SYN+FIN is a scanner's probe), so this stack drops them before the TCP
/// layer, as smoltcp does, rather than carry combinations RFC 9293 §3.10.7 would only sort
/// out by the order of its checks. A TCP layer that wants to see them can read the raw bits
/// on the [`Packet`] view and parse with its own rules.
///
/// Option fields are `None`/`false`/empty when the option is absent. If an option appears
/// more than once, the last one wins. Unknown options are skipped (the view's
/// [`Packet::options_iter`] still shows them). Options that belong on a SYN only (MSS,
/// window scale, SACK-permitted, alternate checksum request) are kept whatever the flags:
/// whether to heed them is the TCP layer's decision.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TcpRepr<'a> {
    pub src_port: u16,
    pub dst_port: u16,
    pub control: Control,
    pub seq_number: SeqNumber,
    /// The acknowledgment number; `Some` exactly when ACK is set.
    pub ack_number: Option<SeqNumber>,
    /// PSH: push the data to the receiving application.
    pub psh: bool,
    /// ECE: ECN echo (RFC 3168 §6.1).
    pub ece: bool,
    /// CWR: congestion window reduced (RFC 3168 §6.1).
    pub cwr: bool,
    /// The window field as sent, before scaling.
    pub window_len: u16,
    /// The urgent pointer; `Some` exactly when URG is set.
    pub urgent_pointer: Option<u16>,
    /// Maximum segment size option (RFC 9293 §3.7.1).
    pub max_seg_size: Option<u16>,
    /// Window scale option, the shift as sent (RFC 7323 §2.2); see
    /// [`window_shift`](Self::window_shift) for the shift to use.
    pub window_scale: Option<u8>,
    /// SACK-permitted option (RFC 2018 §2).
    pub sack_permitted: bool,
    /// SACK blocks (RFC 2018 §3), from the front; all `None` for no SACK option. On emit,
    /// the `Some` blocks are written in order.
    pub sack_ranges: [Option<(u32, u32)>; MAX_SACK_BLOCKS],
    /// Timestamps option (RFC 7323 §3.2).
    pub timestamp: Option<TcpTimestamp>,
    /// Alternate checksum request option (RFC 1146).
    pub alt_checksum_request: Option<AltChecksum>,
    /// Alternate checksum data option (RFC 1146): the check bytes.
    pub alt_checksum_data: Option<&'a [u8]>,
    /// The data.
    pub payload: &'a [u8],
}

/// Where each option goes when a [`TcpRepr`] is emitted: NOPs before it, then the option.
type OptionSlot<'a> = (usize, Option<TcpOption<'a>>);

impl<'a> TcpRepr<'a> {
    /// Parses a segment from `src` to `dst`.
    ///
    /// The view is re-checked as [`Packet::new_checked`] does, so an unchecked view is safe
    /// to pass. With [`Checksum::Check`] the checksum must verify ([`Error::BadChecksum`]).
    /// Destination port 0 is reserved ([`Error::BadField`]), as is a segment with more than
    /// one of SYN, FIN and RST (see the type's documentation). Malformed options fail with
    /// [`Error::BadOption`].
    // Always inlined: called from both copies of the stack's receive path (probed and
    // not, `probe::Sampling`), it had two callers and stayed out of line in the probes
    // build, where the probe-free build inlines it (`tcp_rr`: 71 instructions a
    // transaction).
    #[inline(always)]
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        packet: &Packet<&'a T>,
        src: Ipv4Address,
        dst: Ipv4Address,
        checksum: Checksum,
    ) -> Result<TcpRepr<'a>> {
        packet.check_len()?;
        if checksum == Checksum::Check && !packet.verify_checksum(src, dst) {
            return Err(Error::BadChecksum { proto: Proto::Tcp });
        }
        let dst_port = packet.dst_port();
        if dst_port == 0 {
            return Err(Error::BadField {
                proto: Proto::Tcp,
                field: "destination port",
                value: 0,
            });
        }
        let control = match (packet.syn(), packet.fin(), packet.rst()) {
            (false, false, false) => Control::None,
            (true, false, false) => Control::Syn,
            (false, true, false) => Control::Fin,
            (false, false, true) => Control::Rst,
            _ => {
                return Err(Error::BadField {
                    proto: Proto::Tcp,
                    field: "flags (more than one of SYN, FIN, RST)",
                    value: u32::from(packet.flags()),
                })
            }
        };

        // Borrow the bytes for 'a, not for the life of `packet`.
        let buffer: &'a T = packet.buffer;
        let bytes: &'a [u8] = buffer.as_ref();
        let header_len = packet.header_len();
        let mut repr = TcpRepr {
            src_port: packet.src_port(),
            dst_port,
            control,
            seq_number: packet.seq_number(),
            ack_number: packet.ack().then(|| packet.ack_number()),
            psh: packet.psh(),
            ece: packet.ece(),
            cwr: packet.cwr(),
            window_len: packet.window_len(),
            urgent_pointer: packet.urg().then(|| packet.urgent_pointer()),
            payload: &bytes[header_len..],
            ..TcpRepr::default()
        };
        let options = &bytes[HEADER_LEN..header_len];
        // The usual options after the handshake, NOP, NOP, timestamps (what `emit`
        // writes, and RFC 7323 Appendix A suggests), and no options at all take a short
        // path; the loop would find the same.
        if let [option_kind::NO_OPERATION, option_kind::NO_OPERATION, option_kind::TIMESTAMPS, 10, ts @ ..] =
            options
        {
            if ts.len() == 8 {
                repr.timestamp = Some(TcpTimestamp {
                    tsval: field::u32_at(ts, 0),
                    tsecr: field::u32_at(ts, 4),
                });
                return Ok(repr);
            }
        }
        for option in TcpOptions::new(options) {
            match option? {
                TcpOption::EndOfList | TcpOption::NoOperation | TcpOption::Unknown { .. } => {}
                TcpOption::MaxSegmentSize(mss) => repr.max_seg_size = Some(mss),
                TcpOption::WindowScale(shift) => repr.window_scale = Some(shift),
                TcpOption::SackPermitted => repr.sack_permitted = true,
                TcpOption::SackRange(blocks) => repr.sack_ranges = blocks,
                TcpOption::Timestamp(ts) => repr.timestamp = Some(ts),
                TcpOption::AltChecksumRequest(n) => repr.alt_checksum_request = Some(n),
                TcpOption::AltChecksumData(data) => repr.alt_checksum_data = Some(data),
            }
        }
        Ok(repr)
    }

    /// The window shift to use: the window scale option's shift, capped at
    /// [`MAX_WINDOW_SHIFT`] (RFC 7323 §2.3).
    pub fn window_shift(&self) -> Option<u8> {
        self.window_scale.map(|shift| shift.min(MAX_WINDOW_SHIFT))
    }

    /// SEG.LEN of RFC 9293 §3.4: data length plus one for SYN or FIN.
    pub fn segment_len(&self) -> usize {
        self.payload.len() + self.control.len()
    }

    /// The options in the order [`emit`](Self::emit) writes them, each with the NOPs that
    /// align it. The layout keeps the 4- and 8-byte fields on 32-bit boundaries: MSS;
    /// NOP, window scale; SACK-permitted and timestamps (together 12 bytes, otherwise each
    /// after two NOPs); NOP, NOP, SACK; NOP, alternate checksum request; NOP, NOP,
    /// alternate checksum data. The list is then padded with zeros (EOL) to a multiple of 4.
    fn option_layout(&self) -> [OptionSlot<'a>; 7] {
        let sack_blocks = self.sack_ranges.iter().flatten().count();
        [
            (0, self.max_seg_size.map(TcpOption::MaxSegmentSize)),
            (1, self.window_scale.map(TcpOption::WindowScale)),
            (
                if self.timestamp.is_some() { 0 } else { 2 },
                self.sack_permitted.then_some(TcpOption::SackPermitted),
            ),
            (
                if self.sack_permitted { 0 } else { 2 },
                self.timestamp.map(TcpOption::Timestamp),
            ),
            (
                2,
                (sack_blocks > 0).then_some(TcpOption::SackRange(self.sack_ranges)),
            ),
            (
                1,
                self.alt_checksum_request.map(TcpOption::AltChecksumRequest),
            ),
            (2, self.alt_checksum_data.map(TcpOption::AltChecksumData)),
        ]
    }

    /// Whether the only option to emit is timestamps, if any: what every segment after
    /// the handshake carries unless it has SACK blocks or RFC 1146 data. [`emit`](Self::emit)
    /// and [`header_len`](Self::header_len) take a short path for it.
    fn timestamp_only(&self) -> bool {
        self.max_seg_size.is_none()
            && self.window_scale.is_none()
            && !self.sack_permitted
            && self.sack_ranges == [None; MAX_SACK_BLOCKS]
            && self.alt_checksum_request.is_none()
            && self.alt_checksum_data.is_none()
    }

    /// Option bytes before padding.
    fn options_len(&self) -> usize {
        if self.timestamp_only() {
            // Two NOPs and the 10-byte option, as `option_layout` places it.
            return if self.timestamp.is_some() { 12 } else { 0 };
        }
        self.option_layout()
            .iter()
            .filter_map(|(nops, option)| option.map(|o| nops + o.buffer_len()))
            .fold(0, usize::saturating_add)
    }

    /// Bytes the header takes: 20 plus the options padded to a multiple of 4. May exceed
    /// [`MAX_HEADER_LEN`], in which case [`emit`](Self::emit) fails.
    pub fn header_len(&self) -> usize {
        HEADER_LEN.saturating_add(self.options_len().next_multiple_of(4))
    }

    /// Bytes the whole segment takes: header and data.
    pub fn buffer_len(&self) -> usize {
        self.header_len().saturating_add(self.payload.len())
    }

    /// Writes the segment from `src` to `dst` into the first
    /// [`buffer_len`](Self::buffer_len) bytes of the packet's buffer: header, options,
    /// padding and data. With [`Checksum::Check`] the checksum is computed over those bytes;
    /// with [`Checksum::Skip`] the field is zero (for a NIC to fill, or after the peers
    /// agreed on [`AltChecksum::NoChecksum`]). Reserved bits are written as zero; the ACK
    /// and urgent fields as zero when their flag is clear.
    ///
    /// Fails with [`Error::BadField`] when the options take more than 40 bytes or the
    /// segment more than 65,535, and with [`Error::Truncated`] when the buffer is too short.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet: &mut Packet<T>,
        src: Ipv4Address,
        dst: Ipv4Address,
        checksum: Checksum,
    ) -> Result<()> {
        self.emit_sized(packet, src, dst, checksum, self.header_len())
    }

    /// [`emit`](Self::emit) with the [`header_len`](Self::header_len) its caller already
    /// computed (TCP output sizes the frame by it first), so that it is not computed again.
    pub(crate) fn emit_sized<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet: &mut Packet<T>,
        src: Ipv4Address,
        dst: Ipv4Address,
        checksum: Checksum,
        header_len: usize,
    ) -> Result<()> {
        debug_assert_eq!(header_len, self.header_len());
        if header_len > MAX_HEADER_LEN {
            return Err(Error::BadField {
                proto: Proto::Tcp,
                field: "options length (at most 40 bytes)",
                value: u32::try_from(header_len - HEADER_LEN).unwrap_or(u32::MAX),
            });
        }
        let total = header_len.saturating_add(self.payload.len());
        if total > usize::from(u16::MAX) {
            return Err(Error::BadField {
                proto: Proto::Tcp,
                field: "segment length",
                value: u32::try_from(total).unwrap_or(u32::MAX),
            });
        }
        check_len(Proto::Tcp, packet.buffer.as_ref(), total)?;

        let mut segment = Packet::new_unchecked(&mut packet.buffer.as_mut()[..total]);
        segment.set_src_port(self.src_port);
        segment.set_dst_port(self.dst_port);
        segment.set_seq_number(self.seq_number);
        segment.set_ack_number(self.ack_number.unwrap_or_default());
        segment.buffer[offset::DATA_OFFSET] = 0;
        segment.set_header_len(header_len);
        let mut flags = 0;
        for (on, mask) in [
            (self.control == Control::Fin, flag::FIN),
            (self.control == Control::Syn, flag::SYN),
            (self.control == Control::Rst, flag::RST),
            (self.psh, flag::PSH),
            (self.ack_number.is_some(), flag::ACK),
            (self.urgent_pointer.is_some(), flag::URG),
            (self.ece, flag::ECE),
            (self.cwr, flag::CWR),
        ] {
            if on {
                flags |= mask;
            }
        }
        segment.set_flags(flags);
        segment.set_window_len(self.window_len);
        segment.set_checksum(0);
        segment.set_urgent_pointer(self.urgent_pointer.unwrap_or(0));

        // The options' bytes, by the length just computed rather than read back.
        let options = &mut segment.buffer[offset::OPTIONS..header_len];
        if self.timestamp_only() {
            // The common case, written directly: NOP, NOP, timestamps (12 bytes, no
            // padding), or no options.
            if let (Some(ts), [nop1, nop2, kind, len, values @ ..]) = (self.timestamp, options) {
                (*nop1, *nop2) = (option_kind::NO_OPERATION, option_kind::NO_OPERATION);
                (*kind, *len) = (option_kind::TIMESTAMPS, 10);
                field::set_u32(values, 0, ts.tsval);
                field::set_u32(values, 4, ts.tsecr);
            }
        } else {
            let mut at = 0;
            for (nops, option) in self.option_layout() {
                let Some(option) = option else { continue };
                let nop_bytes = &mut options[at..at + nops];
                nop_bytes.fill(option_kind::NO_OPERATION);
                at += nops;
                at += option.emit(&mut options[at..])?;
            }
            // End of option list, then zero padding (RFC 9293 §3.1): both are zero bytes.
            options[at..].fill(option_kind::END_OF_LIST);
        }

        // A header alone (TCP output writes its data itself) skips the empty copy.
        if !self.payload.is_empty() {
            segment.payload_mut().copy_from_slice(self.payload);
        }
        if checksum == Checksum::Check {
            segment.fill_checksum(src, dst);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ethernet;
    use etherparse::TcpOptionElement;
    use proptest::prelude::*;

    const CLIENT: Ipv4Address = Ipv4Address::new(10, 0, 0, 1);
    const SERVER: Ipv4Address = Ipv4Address::new(10, 0, 0, 2);

    /// A Linux-style SYN, 10.0.0.1:40000 -> 10.0.0.2:80: MSS 1460, SACK-permitted,
    /// timestamps, NOP, window scale 7. Checksum computed by hand (a short Python sum,
    /// independent of this crate).
    const SYN: [u8; 40] = [
        0x9c, 0x40, 0x00, 0x50, // ports 40000 -> 80
        0x01, 0x02, 0x03, 0x04, // seq
        0x00, 0x00, 0x00, 0x00, // ack
        0xa0, 0x02, // data offset 10, SYN
        0xfa, 0xf0, // window 64240
        0x54, 0x10, // checksum
        0x00, 0x00, // urgent
        0x02, 0x04, 0x05, 0xb4, // MSS 1460
        0x04, 0x02, // SACK permitted
        0x08, 0x0a, 0x11, 0x22, 0x33, 0x44, 0x00, 0x00, 0x00, 0x00, // timestamps
        0x01, // NOP
        0x03, 0x03, 0x07, // window scale 7
    ];

    /// The reply's data, 10.0.0.2:80 -> 10.0.0.1:40000, ACK|PSH, NOP NOP timestamps, and
    /// "hello"; the sequence number is near the wrap. Checksum computed by hand.
    const DATA: [u8; 37] = [
        0x00, 0x50, 0x9c, 0x40, // ports 80 -> 40000
        0xff, 0xff, 0xff, 0xf0, // seq
        0x01, 0x02, 0x03, 0x05, // ack
        0x80, 0x18, // data offset 8, ACK|PSH
        0x01, 0xf6, // window 502
        0x37, 0xf2, // checksum
        0x00, 0x00, // urgent
        0x01, 0x01, 0x08, 0x0a, 0x00, 0x00, 0x00, 0x05, 0x11, 0x22, 0x33, 0x44, // ts
        b'h', b'e', b'l', b'l', b'o',
    ];

    fn data_repr() -> TcpRepr<'static> {
        TcpRepr {
            src_port: 80,
            dst_port: 40000,
            seq_number: SeqNumber(0xffff_fff0),
            ack_number: Some(SeqNumber(0x0102_0305)),
            psh: true,
            window_len: 502,
            timestamp: Some(TcpTimestamp {
                tsval: 5,
                tsecr: 0x1122_3344,
            }),
            payload: b"hello",
            ..TcpRepr::default()
        }
    }

    fn parse(bytes: &[u8], src: Ipv4Address, dst: Ipv4Address) -> Result<TcpRepr<'_>> {
        TcpRepr::parse(&Packet::new_checked(bytes)?, src, dst, Checksum::Check)
    }

    fn emit_to_vec(repr: &TcpRepr, src: Ipv4Address, dst: Ipv4Address) -> Vec<u8> {
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit(
            &mut Packet::new_unchecked(&mut buf[..]),
            src,
            dst,
            Checksum::Check,
        )
        .unwrap();
        buf
    }

    fn bad_option_kind(e: Error) -> Option<u8> {
        match e {
            Error::BadOption {
                proto: Proto::Tcp,
                kind,
                ..
            } => Some(kind),
            _ => None,
        }
    }

    // ---- sequence numbers ----

    #[test]
    fn seq_numbers_wrap() {
        let near_end = SeqNumber(0xFFFF_FFF0);
        let past = near_end + 0x20;
        assert_eq!(past, SeqNumber(0x10));
        assert!(near_end.lt(past) && near_end.le(past));
        assert!(past.gt(near_end) && past.ge(near_end));
        assert!(!past.lt(near_end) && !near_end.gt(past));
        assert_eq!(past - near_end, 0x20);
        assert_eq!(near_end - past, -0x20);
        assert_eq!(past.bytes_since(near_end), 0x20);
        assert_eq!(past - 0x20usize, near_end);
        let mut s = near_end;
        s += 0x10;
        assert_eq!(s, SeqNumber(0));
        assert!(s.le(s) && s.ge(s) && !s.lt(s) && !s.gt(s));
        assert_eq!(SeqNumber(0) - 1usize, SeqNumber(u32::MAX));
        assert!(SeqNumber(u32::MAX).lt(SeqNumber(0)));
        assert_eq!(SeqNumber(7).to_string(), "7");
        // Plain integer order would say the opposite.
        assert!(SeqNumber(0x8000_0001).lt(SeqNumber(1)));
    }

    #[test]
    fn control_takes_sequence_space() {
        assert_eq!(Control::Syn.len(), 1);
        assert_eq!(Control::Fin.len(), 1);
        assert!(Control::None.is_empty() && Control::Rst.is_empty());
        let repr = TcpRepr {
            control: Control::Fin,
            payload: b"abc",
            ..TcpRepr::default()
        };
        assert_eq!(repr.segment_len(), 4);
    }

    // ---- known bytes ----

    #[test]
    fn parses_a_known_syn() {
        let p = Packet::new_checked(&SYN[..]).unwrap();
        assert_eq!(p.src_port(), 40000);
        assert_eq!(p.dst_port(), 80);
        assert_eq!(p.seq_number(), SeqNumber(0x0102_0304));
        assert_eq!(p.data_offset(), 10);
        assert_eq!(p.header_len(), 40);
        assert_eq!(p.reserved(), 0);
        assert!(p.syn() && !p.ack() && !p.fin() && !p.rst() && !p.psh() && !p.urg());
        assert!(!p.ece() && !p.cwr());
        assert_eq!(p.flags(), 0x02);
        assert_eq!(p.window_len(), 64240);
        assert_eq!(p.checksum(), 0x5410);
        assert_eq!(p.urgent_pointer(), 0);
        assert_eq!(p.options().len(), 20);
        assert!(p.payload().is_empty());
        assert_eq!(p.segment_len(), 1);
        assert!(p.verify_checksum(CLIENT, SERVER));
        assert!(!p.verify_checksum(CLIENT, Ipv4Address::new(10, 0, 0, 3)));

        let options: Vec<_> = p.options_iter().collect::<Result<_>>().unwrap();
        assert_eq!(
            options,
            [
                TcpOption::MaxSegmentSize(1460),
                TcpOption::SackPermitted,
                TcpOption::Timestamp(TcpTimestamp {
                    tsval: 0x1122_3344,
                    tsecr: 0
                }),
                TcpOption::NoOperation,
                TcpOption::WindowScale(7),
            ]
        );

        let r = parse(&SYN, CLIENT, SERVER).unwrap();
        assert_eq!(
            r,
            TcpRepr {
                src_port: 40000,
                dst_port: 80,
                control: Control::Syn,
                seq_number: SeqNumber(0x0102_0304),
                ack_number: None,
                window_len: 64240,
                max_seg_size: Some(1460),
                window_scale: Some(7),
                sack_permitted: true,
                timestamp: Some(TcpTimestamp {
                    tsval: 0x1122_3344,
                    tsecr: 0
                }),
                ..TcpRepr::default()
            }
        );
        assert_eq!(r.window_shift(), Some(7));
        assert_eq!(r.segment_len(), 1);
        // Our layout differs from Linux's but is as long.
        assert_eq!(r.header_len(), 40);
    }

    #[test]
    fn parses_and_emits_known_data() {
        let r = parse(&DATA, SERVER, CLIENT).unwrap();
        assert_eq!(r, data_repr());
        let p = Packet::new_checked(&DATA[..]).unwrap();
        assert_eq!(p.payload(), b"hello");
        assert_eq!(p.segment_len(), 5);
        // Our layout for timestamps alone is NOP NOP TS, so the bytes come out identical.
        assert_eq!(emit_to_vec(&data_repr(), SERVER, CLIENT), DATA);
        assert_eq!(data_repr().header_len(), 32);
        assert_eq!(data_repr().buffer_len(), 37);
    }

    #[test]
    fn timestamp_only_short_paths_agree_with_the_general_ones() {
        // Lengths: the short path's against the sum over the layout.
        for timestamp in [None, data_repr().timestamp] {
            let r = TcpRepr {
                timestamp,
                ..data_repr()
            };
            let general: usize = r
                .option_layout()
                .iter()
                .filter_map(|(nops, option)| option.map(|o| nops + o.buffer_len()))
                .sum();
            assert!(r.timestamp_only());
            assert_eq!(r.options_len(), general);
        }
        let without = TcpRepr {
            timestamp: None,
            ..data_repr()
        };
        let bytes = emit_to_vec(&without, SERVER, CLIENT);
        assert_eq!(bytes.len(), 25);
        assert_eq!(parse(&bytes, SERVER, CLIENT).unwrap(), without);

        // Parsing: other layouts take the loop, and the same options give the same repr.
        let trusted = |bytes: &[u8]| {
            let bytes = bytes.to_vec();
            let p = Packet::new_checked(&bytes[..]).unwrap();
            let r = TcpRepr::parse(&p, SERVER, CLIENT, Checksum::Skip);
            r.map(|r| (r.timestamp, r.max_seg_size, r.payload.to_vec()))
        };
        let short = trusted(&DATA).unwrap();
        assert_eq!(short, (data_repr().timestamp, None, b"hello".to_vec()));
        // Padded with an EOL word after the timestamps.
        let mut padded = DATA[..32].to_vec();
        padded.extend([0, 0, 0, 0]);
        padded.extend(b"hello");
        padded[12] = 0x90;
        assert_eq!(trusted(&padded).unwrap(), short);
        // The same 12 bytes in another order.
        let mut reordered = DATA;
        reordered[20..32].copy_from_slice(&[8, 10, 0, 0, 0, 5, 0x11, 0x22, 0x33, 0x44, 1, 1]);
        assert_eq!(trusted(&reordered).unwrap(), short);
        // Twelve bytes that are not NOP NOP timestamps.
        let mut mss = DATA;
        mss[20..32].copy_from_slice(&[2, 4, 5, 0xb4, 1, 1, 1, 1, 1, 1, 1, 1]);
        assert_eq!(
            trusted(&mss).unwrap(),
            (None, Some(1460), b"hello".to_vec())
        );
        // A timestamps option with a wrong length is still refused.
        let mut bad = DATA;
        bad[23] = 11;
        assert!(trusted(&bad).is_err());
    }

    #[test]
    fn skip_writes_zero_checksum() {
        let mut buf = vec![0xAAu8; 37];
        data_repr()
            .emit(
                &mut Packet::new_unchecked(&mut buf[..]),
                SERVER,
                CLIENT,
                Checksum::Skip,
            )
            .unwrap();
        assert_eq!(&buf[16..18], &[0, 0]);
        // Zero is no "no checksum" in TCP: it fails when checked, passes when trusted.
        assert_eq!(
            parse(&buf, SERVER, CLIENT),
            Err(Error::BadChecksum { proto: Proto::Tcp })
        );
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(
            TcpRepr::parse(&p, SERVER, CLIENT, Checksum::Skip),
            Ok(data_repr())
        );
        // Filling it afterwards gives the known bytes.
        let mut p = Packet::new_checked(&mut buf[..]).unwrap();
        p.fill_checksum(SERVER, CLIENT);
        assert_eq!(buf, DATA);
    }

    #[test]
    fn fused_checksum_paths_match() {
        let payload: Vec<u8> = (0..777u32).map(|i| (i * 13 + 5) as u8).collect();
        let repr = TcpRepr {
            payload: &payload,
            ..data_repr()
        };
        let whole = emit_to_vec(&repr, SERVER, CLIENT);

        let mut buf = vec![0u8; repr.buffer_len()];
        let empty_payload = TcpRepr {
            payload: &[],
            ..repr
        };
        // Header from a repr without data, then the data copied and summed in one pass.
        let mut p = Packet::new_unchecked(&mut buf[..]);
        empty_payload
            .emit(&mut p, SERVER, CLIENT, Checksum::Skip)
            .unwrap();
        let sum = checksum::copy_and_sum(p.payload_mut(), &payload);
        p.fill_checksum_with_payload_sum(SERVER, CLIENT, sum);
        assert_eq!(buf, whole);

        let p = Packet::new_checked(&buf[..]).unwrap();
        assert!(p.verify_checksum_with_payload_sum(SERVER, CLIENT, checksum::sum(p.payload())));
        assert!(!p.verify_checksum_with_payload_sum(SERVER, CLIENT, 0x1234));
    }

    #[test]
    fn setters_write_their_fields() {
        let mut p = Packet::new_unchecked([0u8; 24]);
        p.set_src_port(0x0102);
        p.set_dst_port(0x0304);
        p.set_seq_number(SeqNumber(0x0506_0708));
        p.set_ack_number(SeqNumber(0x090a_0b0c));
        p.set_header_len(24);
        p.set_reserved(0x0F);
        p.set_window_len(0x0d0e);
        p.set_checksum(0x0f10);
        p.set_urgent_pointer(0x1112);
        for (set, mask) in [
            (Packet::set_fin as fn(&mut Packet<[u8; 24]>, bool), 0x01u8),
            (Packet::set_syn, 0x02),
            (Packet::set_rst, 0x04),
            (Packet::set_psh, 0x08),
            (Packet::set_ack, 0x10),
            (Packet::set_urg, 0x20),
            (Packet::set_ece, 0x40),
            (Packet::set_cwr, 0x80),
        ] {
            set(&mut p, true);
            assert_eq!(p.flags() & mask, mask);
            set(&mut p, false);
            assert_eq!(p.flags() & mask, 0);
            set(&mut p, true);
        }
        p.options_mut().copy_from_slice(&[1, 1, 1, 0]);
        assert!(p.payload_mut().is_empty());
        let buf = p.into_inner();
        assert_eq!(
            buf,
            [
                1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0x6F, 0xFF, 13, 14, 15, 16, 17, 18, 1, 1, 1,
                0
            ]
        );
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(p.reserved(), 0x0F);
        assert!(p.fin() && p.syn() && p.rst() && p.psh() && p.ack() && p.urg());
        assert!(p.ece() && p.cwr());
    }

    // ---- errors ----

    #[test]
    fn short_buffer_is_truncated() {
        for n in 0..HEADER_LEN {
            assert_eq!(
                Packet::new_checked(&DATA[..n]),
                Err(Error::Truncated {
                    proto: Proto::Tcp,
                    needed: 20,
                    available: n
                })
            );
        }
    }

    #[test]
    fn data_offset_below_five_is_bad() {
        for words in 0..5u8 {
            let mut b = DATA;
            b[12] = words << 4;
            assert_eq!(
                Packet::new_checked(&b[..]),
                Err(Error::BadField {
                    proto: Proto::Tcp,
                    field: "data offset",
                    value: words as u32
                })
            );
            let unchecked = Packet::new_unchecked(&b[..]);
            assert!(TcpRepr::parse(&unchecked, SERVER, CLIENT, Checksum::Skip).is_err());
            assert!(!unchecked.verify_checksum_with_payload_sum(SERVER, CLIENT, 0));
        }
    }

    #[test]
    fn data_offset_past_buffer_is_truncated() {
        // The 40-byte SYN header, cut anywhere inside its options.
        for n in HEADER_LEN..40 {
            assert_eq!(
                Packet::new_checked(&SYN[..n]),
                Err(Error::Truncated {
                    proto: Proto::Tcp,
                    needed: 40,
                    available: n
                })
            );
        }
        let mut b = DATA;
        b[12] = 0xF0; // 60 bytes of header claimed, 37 present
        assert!(matches!(
            Packet::new_checked(&b[..]),
            Err(Error::Truncated { needed: 60, .. })
        ));
    }

    /// A segment with `options` (padded with zeros to a multiple of 4), checksummed.
    fn with_options(options: &[u8]) -> Vec<u8> {
        let padded = options.len().next_multiple_of(4);
        let mut b = vec![0u8; HEADER_LEN + padded];
        b[..HEADER_LEN].copy_from_slice(&DATA[..HEADER_LEN]);
        b[12] = (((HEADER_LEN + padded) / 4) as u8) << 4;
        b[HEADER_LEN..HEADER_LEN + options.len()].copy_from_slice(options);
        Packet::new_unchecked(&mut b[..]).fill_checksum(SERVER, CLIENT);
        b
    }

    fn option_error(options: &[u8]) -> Option<u8> {
        bad_option_kind(parse(&with_options(options), SERVER, CLIENT).unwrap_err())
    }

    #[test]
    fn option_length_zero_or_one_is_bad() {
        for kind in [2u8, 5, 8, 14, 15, 99] {
            assert_eq!(option_error(&[kind, 0, 0, 0]), Some(kind));
            assert_eq!(option_error(&[1, kind, 1, 0]), Some(kind));
        }
        let e = parse(&with_options(&[2, 1, 0, 0]), SERVER, CLIENT).unwrap_err();
        assert_eq!(
            e,
            Error::BadOption {
                proto: Proto::Tcp,
                kind: 2,
                reason: "length below 2"
            }
        );
    }

    #[test]
    fn option_running_past_the_header_is_bad() {
        // Length says 10, four bytes of option space remain.
        assert_eq!(option_error(&[8, 10, 0, 0]), Some(8));
        // Unknown kinds too: skipping by a length that runs out is no skip at all.
        assert_eq!(option_error(&[1, 1, 200, 3]), Some(200));
        // The length byte itself past the end: kind in the last option byte.
        assert_eq!(option_error(&[1, 1, 1, 2]), Some(2));
        assert_eq!(
            TcpOption::parse(&[3]),
            Err(bad_option(3, "length byte runs past the header"))
        );
        assert!(matches!(
            TcpOption::parse(&[]),
            Err(Error::Truncated { .. })
        ));
    }

    #[test]
    fn known_options_with_wrong_lengths_are_bad() {
        let cases: &[&[u8]] = &[
            &[2, 3, 5],                          // MSS, length 3
            &[2, 5, 5, 0xb4, 0],                 // MSS, length 5
            &[3, 2],                             // window scale, length 2
            &[3, 4, 7, 0],                       // window scale, length 4
            &[4, 3, 0],                          // SACK permitted, length 3
            &[5, 2],                             // SACK, no blocks
            &[5, 9, 0, 0, 0, 0, 0, 0, 0],        // SACK, 2 + 7
            &[5, 11, 0, 0, 0, 0, 0, 0, 0, 0, 0], // SACK, 2 + 9
            &[8, 9, 0, 0, 0, 0, 0, 0, 0],        // timestamps, length 9
            &[8, 11, 0, 0, 0, 0, 0, 0, 0, 0, 0], // timestamps, length 11
            &[14, 2],                            // alternate checksum request, length 2
            &[14, 4, 1, 0],                      // alternate checksum request, length 4
        ];
        for &case in cases {
            assert_eq!(option_error(case), Some(case[0]), "{case:?}");
        }
        // Five SACK blocks cannot fit in a header, but a bare option list can say so.
        let mut five = vec![5u8, 42];
        five.extend_from_slice(&[0; 40]);
        assert_eq!(
            TcpOption::parse(&five).map_err(bad_option_kind),
            Err(Some(5))
        );
    }

    #[test]
    fn bad_checksum_is_rejected_unless_skipped() {
        for i in [0, 5, 13, 17, 25, 36] {
            let mut b = DATA;
            b[i] ^= 0x04;
            let p = Packet::new_checked(&b[..]).unwrap();
            assert_eq!(
                TcpRepr::parse(&p, SERVER, CLIENT, Checksum::Check).map(|_| ()),
                Err(Error::BadChecksum { proto: Proto::Tcp }),
                "byte {i}"
            );
        }
        let mut b = DATA;
        b[36] ^= 0x04;
        let p = Packet::new_checked(&b[..]).unwrap();
        assert!(TcpRepr::parse(&p, SERVER, CLIENT, Checksum::Skip).is_ok());
        // The pseudo-header counts: the right segment from another host fails. (Swapping
        // source and destination would not show it: the sum commutes.)
        assert_eq!(
            parse(&DATA, Ipv4Address::new(10, 0, 0, 3), CLIENT),
            Err(Error::BadChecksum { proto: Proto::Tcp })
        );
    }

    #[test]
    fn destination_port_zero_is_bad() {
        let repr = TcpRepr {
            dst_port: 0,
            ..data_repr()
        };
        let b = emit_to_vec(&repr, SERVER, CLIENT);
        assert_eq!(
            parse(&b, SERVER, CLIENT),
            Err(Error::BadField {
                proto: Proto::Tcp,
                field: "destination port",
                value: 0
            })
        );
    }

    #[test]
    fn two_connection_controls_are_bad() {
        for (syn, fin, rst) in [
            (true, true, false),
            (true, false, true),
            (false, true, true),
            (true, true, true),
        ] {
            let mut b = DATA;
            let mut p = Packet::new_unchecked(&mut b[..]);
            p.set_syn(syn);
            p.set_fin(fin);
            p.set_rst(rst);
            p.fill_checksum(SERVER, CLIENT);
            let e = parse(&b, SERVER, CLIENT).unwrap_err();
            assert!(
                matches!(e, Error::BadField { proto: Proto::Tcp, value, .. } if value == u32::from(b[13])),
                "{e}"
            );
        }
    }

    #[test]
    fn too_many_options_is_an_error() {
        let blocks = [Some((1, 2)), Some((3, 4)), Some((5, 6)), Some((7, 8))];
        let repr = TcpRepr {
            max_seg_size: Some(1460),
            window_scale: Some(7),
            sack_permitted: true,
            sack_ranges: blocks,
            ..data_repr()
        };
        // 4 + 4 + 12 + 36 = 56 bytes of options.
        assert_eq!(repr.header_len(), 76);
        let mut buf = [0u8; 200];
        assert_eq!(
            repr.emit(
                &mut Packet::new_unchecked(&mut buf[..]),
                SERVER,
                CLIENT,
                Checksum::Check
            ),
            Err(Error::BadField {
                proto: Proto::Tcp,
                field: "options length (at most 40 bytes)",
                value: 56
            })
        );
        // A huge alternate checksum data option does not panic either.
        let big = vec![0u8; 1000];
        let repr = TcpRepr {
            alt_checksum_data: Some(&big),
            ..TcpRepr::default()
        };
        assert!(repr
            .emit(
                &mut Packet::new_unchecked(&mut buf[..]),
                SERVER,
                CLIENT,
                Checksum::Check
            )
            .is_err());
        // Exactly 40 is fine: timestamps (12) + four SACK blocks (36) is too much, three
        // blocks (28) is exactly 40.
        let repr = TcpRepr {
            sack_ranges: [Some((1, 2)), Some((3, 4)), Some((5, 6)), None],
            ..data_repr()
        };
        assert_eq!(repr.header_len(), 60);
        let b = emit_to_vec(&repr, SERVER, CLIENT);
        assert_eq!(parse(&b, SERVER, CLIENT), Ok(repr));
    }

    #[test]
    fn emit_into_a_short_buffer_fails() {
        let mut buf = [0u8; 36];
        assert_eq!(
            data_repr().emit(
                &mut Packet::new_unchecked(&mut buf[..]),
                SERVER,
                CLIENT,
                Checksum::Check
            ),
            Err(Error::Truncated {
                proto: Proto::Tcp,
                needed: 37,
                available: 36
            })
        );
        let big = vec![0u8; 70_000];
        let repr = TcpRepr {
            payload: &big,
            ..data_repr()
        };
        let mut buf = vec![0u8; 70_100];
        assert!(matches!(
            repr.emit(
                &mut Packet::new_unchecked(&mut buf[..]),
                SERVER,
                CLIENT,
                Checksum::Check
            ),
            Err(Error::BadField {
                field: "segment length",
                ..
            })
        ));
    }

    #[test]
    fn option_emit_errors() {
        let mut buf = [0u8; 64];
        assert_eq!(
            TcpOption::SackRange([None; 4]).emit(&mut buf),
            Err(bad_option(5, "SACK option with no blocks"))
        );
        let long = [0u8; 300];
        assert!(matches!(
            TcpOption::AltChecksumData(&long).emit(&mut buf),
            Err(Error::BadOption { kind: 15, .. })
        ));
        assert!(matches!(
            TcpOption::Timestamp(TcpTimestamp::default()).emit(&mut buf[..9]),
            Err(Error::Truncated {
                needed: 10,
                available: 9,
                ..
            })
        ));
    }

    // ---- option semantics ----

    #[test]
    fn unknown_options_are_skipped_by_length() {
        // Kind 30 (MPTCP) with 2 data bytes, then MSS.
        let b = with_options(&[30, 4, 0xAB, 0xCD, 2, 4, 0x05, 0xDC]);
        let p = Packet::new_checked(&b[..]).unwrap();
        let options: Vec<_> = p.options_iter().collect::<Result<_>>().unwrap();
        assert_eq!(
            options,
            [
                TcpOption::Unknown {
                    kind: 30,
                    data: &[0xAB, 0xCD]
                },
                TcpOption::MaxSegmentSize(1500)
            ]
        );
        assert_eq!(options[0].kind(), 30);
        assert_eq!(options[0].buffer_len(), 4);
        let r = parse(&b, SERVER, CLIENT).unwrap();
        assert_eq!(r.max_seg_size, Some(1500));
        // An unknown option emits as it parsed.
        let mut out = [0u8; 4];
        assert_eq!(options[0].emit(&mut out), Ok(4));
        assert_eq!(out, [30, 4, 0xAB, 0xCD]);
    }

    #[test]
    fn end_of_list_ends_the_list() {
        // After EOL comes padding; even garbage there is not parsed.
        let b = with_options(&[2, 4, 0x05, 0xB4, 0, 0xFF, 0x01, 0xFF]);
        let p = Packet::new_checked(&b[..]).unwrap();
        let options: Vec<_> = p.options_iter().collect::<Result<_>>().unwrap();
        assert_eq!(
            options,
            [TcpOption::MaxSegmentSize(1460), TcpOption::EndOfList]
        );
        assert_eq!(parse(&b, SERVER, CLIENT).unwrap().max_seg_size, Some(1460));
    }

    /// The header's options are padded to a 32-bit boundary with zeros (RFC 9293 §3.1,
    /// MUST-69), whatever the buffer held: RFC 1146 data of one byte takes two NOPs and
    /// three bytes, so three bytes of padding follow.
    #[test]
    fn options_are_padded_with_zeros() {
        let repr = TcpRepr {
            src_port: 1,
            dst_port: 2,
            alt_checksum_data: Some(&[0xAB]),
            ..TcpRepr::default()
        };
        assert_eq!(repr.header_len(), HEADER_LEN + 8);
        let mut buf = vec![0xFFu8; repr.buffer_len()];
        repr.emit(
            &mut Packet::new_unchecked(&mut buf[..]),
            SERVER,
            CLIENT,
            Checksum::Skip,
        )
        .unwrap();
        let options = &buf[HEADER_LEN..HEADER_LEN + 8];
        assert_eq!(
            options,
            [1, 1, option_kind::ALT_CHECKSUM_DATA, 3, 0xAB, 0, 0, 0]
        );
    }

    #[test]
    fn option_iterator_stops_after_an_error() {
        let mut it = TcpOptions::new(&[1, 2, 3, 1, 1]);
        assert_eq!(it.next(), Some(Ok(TcpOption::NoOperation)));
        assert!(matches!(
            it.next(),
            Some(Err(Error::BadOption { kind: 2, .. }))
        ));
        assert_eq!(it.next(), None);
        assert_eq!(it.next(), None);
    }

    #[test]
    fn window_scale_above_fourteen_is_kept_and_capped_on_use() {
        let b = with_options(&[1, 3, 3, 200]);
        let r = parse(&b, SERVER, CLIENT).unwrap();
        assert_eq!(r.window_scale, Some(200));
        assert_eq!(r.window_shift(), Some(MAX_WINDOW_SHIFT));
        let r = TcpRepr {
            window_scale: Some(14),
            ..r
        };
        assert_eq!(r.window_shift(), Some(14));
        assert_eq!(TcpRepr::default().window_shift(), None);
    }

    #[test]
    fn alternate_checksum_numbers() {
        for (n, a) in [
            (0u8, AltChecksum::Tcp),
            (1, AltChecksum::Fletcher8),
            (2, AltChecksum::Fletcher16),
            (3, AltChecksum::NoChecksum),
            (4, AltChecksum::Other(4)),
            (255, AltChecksum::Other(255)),
        ] {
            assert_eq!(AltChecksum::from(n), a);
            assert_eq!(u8::from(a), n);
        }
        // Both RFC 1146 options, parsed from known bytes: request 3 ("no checksum"), and
        // four data bytes.
        let b = with_options(&[1, 14, 3, 3, 1, 1, 15, 6, 0xDE, 0xAD, 0xBE, 0xEF]);
        let r = parse(&b, SERVER, CLIENT).unwrap();
        assert_eq!(r.alt_checksum_request, Some(AltChecksum::NoChecksum));
        assert_eq!(r.alt_checksum_data, Some(&[0xDE, 0xAD, 0xBE, 0xEF][..]));
        // Our emitter uses the same layout, so the bytes come out identical.
        assert_eq!(emit_to_vec(&r, SERVER, CLIENT), b);
        // An empty data option (length 2) is allowed.
        let b = with_options(&[15, 2]);
        let r = parse(&b, SERVER, CLIENT).unwrap();
        assert_eq!(r.alt_checksum_data, Some(&[][..]));
    }

    #[test]
    fn repeated_options_last_wins() {
        let b = with_options(&[2, 4, 0, 100, 2, 4, 0, 200]);
        assert_eq!(parse(&b, SERVER, CLIENT).unwrap().max_seg_size, Some(200));
    }

    #[test]
    fn ack_and_urgent_fields_follow_their_flags() {
        // ACK clear: the ack field is ignored, whatever it holds.
        let mut b = DATA;
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.set_ack(false);
        p.set_urgent_pointer(9); // URG clear: ignored too
        p.fill_checksum(SERVER, CLIENT);
        let r = parse(&b, SERVER, CLIENT).unwrap();
        assert_eq!(r.ack_number, None);
        assert_eq!(r.urgent_pointer, None);
        // URG set: the pointer is read.
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.set_urg(true);
        p.fill_checksum(SERVER, CLIENT);
        assert_eq!(parse(&b, SERVER, CLIENT).unwrap().urgent_pointer, Some(9));
        // Emitting writes zeros for absent fields, and zero reserved bits.
        let repr = TcpRepr {
            ack_number: None,
            ..data_repr()
        };
        let mut buf = vec![0xFFu8; repr.buffer_len()];
        repr.emit(
            &mut Packet::new_unchecked(&mut buf[..]),
            SERVER,
            CLIENT,
            Checksum::Check,
        )
        .unwrap();
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(p.ack_number(), SeqNumber(0));
        assert_eq!(p.urgent_pointer(), 0);
        assert_eq!(p.reserved(), 0);
        assert_eq!(p.flags(), flag::PSH);
    }

    #[test]
    fn reserved_bits_are_ignored_on_receipt() {
        let mut b = DATA;
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.set_reserved(0x0F);
        p.fill_checksum(SERVER, CLIENT);
        assert_eq!(parse(&b, SERVER, CLIENT), Ok(data_repr()));
    }

    // ---- etherparse ----

    #[test]
    fn etherparse_frame_parses_and_verifies() {
        let payload = b"GET / HTTP/1.0\r\n\r\n";
        let builder = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .ipv4(CLIENT.0, SERVER.0, 64)
            .tcp(40000, 80, 0xFFFF_FF00, 1024)
            .ack(0x1234_5678)
            .psh()
            .options(&[
                TcpOptionElement::Noop,
                TcpOptionElement::Noop,
                TcpOptionElement::Timestamp(77, 88),
                TcpOptionElement::Noop,
                TcpOptionElement::Noop,
                TcpOptionElement::SelectiveAcknowledgement((1, 2), [Some((3, 4)), None, None]),
            ])
            .unwrap();
        let mut frame = Vec::with_capacity(builder.size(payload.len()));
        builder.write(&mut frame, payload).unwrap();

        let eth = ethernet::Frame::new_checked(&frame[..]).unwrap();
        let ip = etherparse::Ipv4HeaderSlice::from_slice(eth.payload()).unwrap();
        let ip_header_len = usize::from(ip.ihl()) * 4;
        let ip_end = usize::from(ip.total_len());
        let segment = &eth.payload()[ip_header_len..ip_end];
        let src = Ipv4Address(ip.source());
        let dst = Ipv4Address(ip.destination());
        let p = Packet::new_checked(segment).unwrap();
        assert!(p.verify_checksum(src, dst));
        let r = TcpRepr::parse(&p, src, dst, Checksum::Check).unwrap();
        assert_eq!(
            r,
            TcpRepr {
                src_port: 40000,
                dst_port: 80,
                seq_number: SeqNumber(0xFFFF_FF00),
                ack_number: Some(SeqNumber(0x1234_5678)),
                psh: true,
                window_len: 1024,
                timestamp: Some(TcpTimestamp {
                    tsval: 77,
                    tsecr: 88
                }),
                sack_ranges: [Some((1, 2)), Some((3, 4)), None, None],
                payload,
                ..TcpRepr::default()
            }
        );
        // And with our own layout, the same header bytes as etherparse wrote.
        assert_eq!(emit_to_vec(&r, src, dst), segment);
    }

    // ---- properties ----

    fn any_address() -> impl Strategy<Value = Ipv4Address> {
        any::<[u8; 4]>().prop_map(Ipv4Address)
    }

    fn any_sack_ranges() -> impl Strategy<Value = [Option<(u32, u32)>; MAX_SACK_BLOCKS]> {
        proptest::collection::vec(any::<(u32, u32)>(), 0..=MAX_SACK_BLOCKS).prop_map(|blocks| {
            let mut ranges = [None; MAX_SACK_BLOCKS];
            for (slot, block) in ranges.iter_mut().zip(blocks) {
                *slot = Some(block);
            }
            ranges
        })
    }

    fn any_control() -> impl Strategy<Value = Control> {
        prop_oneof![
            Just(Control::None),
            Just(Control::Syn),
            Just(Control::Fin),
            Just(Control::Rst)
        ]
    }

    /// Everything a TcpRepr holds except the two borrowed slices.
    #[derive(Debug, Clone)]
    struct Fields {
        ports: (u16, u16),
        control: Control,
        seq: u32,
        ack: Option<u32>,
        bits: (bool, bool, bool),
        window: u16,
        urgent: Option<u16>,
        mss: Option<u16>,
        window_scale: Option<u8>,
        sack_permitted: bool,
        sack_ranges: [Option<(u32, u32)>; MAX_SACK_BLOCKS],
        timestamp: Option<(u32, u32)>,
        alt_request: Option<u8>,
    }

    fn any_fields() -> impl Strategy<Value = Fields> {
        (
            (any::<u16>(), 1u16..),
            any_control(),
            any::<u32>(),
            any::<Option<u32>>(),
            any::<(bool, bool, bool)>(),
            any::<u16>(),
            any::<Option<u16>>(),
            (
                any::<Option<u16>>(),
                any::<Option<u8>>(),
                any::<bool>(),
                any_sack_ranges(),
                any::<Option<(u32, u32)>>(),
                any::<Option<u8>>(),
            ),
        )
            .prop_map(
                |(ports, control, seq, ack, bits, window, urgent, options)| {
                    let (mss, window_scale, sack_permitted, sack_ranges, timestamp, alt_request) =
                        options;
                    Fields {
                        ports,
                        control,
                        seq,
                        ack,
                        bits,
                        window,
                        urgent,
                        mss,
                        window_scale,
                        sack_permitted,
                        sack_ranges,
                        timestamp,
                        alt_request,
                    }
                },
            )
    }

    fn build<'a>(f: &Fields, alt_data: Option<&'a [u8]>, payload: &'a [u8]) -> TcpRepr<'a> {
        TcpRepr {
            src_port: f.ports.0,
            dst_port: f.ports.1,
            control: f.control,
            seq_number: SeqNumber(f.seq),
            ack_number: f.ack.map(SeqNumber),
            psh: f.bits.0,
            ece: f.bits.1,
            cwr: f.bits.2,
            window_len: f.window,
            urgent_pointer: f.urgent,
            max_seg_size: f.mss,
            window_scale: f.window_scale,
            sack_permitted: f.sack_permitted,
            sack_ranges: f.sack_ranges,
            timestamp: f
                .timestamp
                .map(|(tsval, tsecr)| TcpTimestamp { tsval, tsecr }),
            alt_checksum_request: f.alt_request.map(AltChecksum::from),
            alt_checksum_data: alt_data,
            payload,
        }
    }

    /// Drops options, SACK blocks last, until the header fits in 60 bytes.
    fn fit_options(repr: &mut TcpRepr) {
        let droppers: [fn(&mut TcpRepr); 6] = [
            |r| r.alt_checksum_data = None,
            |r| r.alt_checksum_request = None,
            |r| r.max_seg_size = None,
            |r| r.window_scale = None,
            |r| r.timestamp = None,
            |r| r.sack_permitted = false,
        ];
        for drop_one in droppers {
            if repr.header_len() <= MAX_HEADER_LEN {
                return;
            }
            drop_one(repr);
        }
        // Four SACK blocks alone take 36 bytes, so they always fit.
        assert!(repr.header_len() <= MAX_HEADER_LEN);
    }

    fn any_option() -> impl Strategy<Value = (u8, Vec<u8>, TcpOption<'static>)> {
        // The borrowed variants are rebuilt from the vector in the test; the third field
        // carries the owned ones.
        prop_oneof![
            Just((0, vec![], TcpOption::EndOfList)),
            Just((1, vec![], TcpOption::NoOperation)),
            any::<u16>().prop_map(|v| (2, vec![], TcpOption::MaxSegmentSize(v))),
            any::<u8>().prop_map(|v| (3, vec![], TcpOption::WindowScale(v))),
            Just((4, vec![], TcpOption::SackPermitted)),
            any_sack_ranges()
                .prop_filter("a SACK option has a block", |r| r[0].is_some())
                .prop_map(|r| (5, vec![], TcpOption::SackRange(r))),
            any::<(u32, u32)>().prop_map(|(tsval, tsecr)| {
                (
                    8,
                    vec![],
                    TcpOption::Timestamp(TcpTimestamp { tsval, tsecr }),
                )
            }),
            any::<u8>().prop_map(|v| (14, vec![], TcpOption::AltChecksumRequest(v.into()))),
            proptest::collection::vec(any::<u8>(), 0..38).prop_map(|d| (
                15,
                d,
                TcpOption::EndOfList
            )),
            (
                any::<u8>().prop_filter("an unknown kind", |k| {
                    ![0, 1, 2, 3, 4, 5, 8, 14, 15].contains(k)
                }),
                proptest::collection::vec(any::<u8>(), 0..38)
            )
                .prop_map(|(k, d)| (k, d, TcpOption::EndOfList)),
        ]
    }

    /// Our options as etherparse models them, in order, up to the first kind it does not
    /// know (it stops there).
    fn etherparse_view(options: &[TcpOption]) -> (Vec<TcpOptionElement>, Option<u8>) {
        let mut known = Vec::new();
        for option in options {
            known.push(match *option {
                TcpOption::NoOperation => TcpOptionElement::Noop,
                TcpOption::EndOfList => break,
                TcpOption::MaxSegmentSize(v) => TcpOptionElement::MaximumSegmentSize(v),
                TcpOption::WindowScale(v) => TcpOptionElement::WindowScale(v),
                TcpOption::SackPermitted => TcpOptionElement::SelectiveAcknowledgementPermitted,
                TcpOption::SackRange(b) => TcpOptionElement::SelectiveAcknowledgement(
                    b[0].expect("a parsed SACK option has a first block"),
                    [b[1], b[2], b[3]],
                ),
                TcpOption::Timestamp(ts) => TcpOptionElement::Timestamp(ts.tsval, ts.tsecr),
                ref other => return (known, Some(other.kind())),
            });
        }
        (known, None)
    }

    /// Parses `bytes` every way there is; the point is that none of it panics.
    fn parse_every_way(bytes: &[u8], src: Ipv4Address, dst: Ipv4Address) {
        let unchecked = Packet::new_unchecked(bytes);
        let _ = unchecked.verify_checksum(src, dst);
        let _ = unchecked.verify_checksum_with_payload_sum(src, dst, 0xBEEF);
        for checksum in [Checksum::Check, Checksum::Skip] {
            let _ = TcpRepr::parse(&unchecked, src, dst, checksum);
        }
        if let Ok(p) = Packet::new_checked(bytes) {
            let _ = (p.seq_number(), p.ack_number(), p.flags(), p.reserved());
            let _ = (p.options(), p.payload(), p.segment_len());
            for option in p.options_iter().flatten() {
                let _ = option.emit(&mut [0u8; 64]);
            }
            if let Ok(r) = TcpRepr::parse(&p, src, dst, Checksum::Skip) {
                // Whatever parsed emits again (or says why not) without panicking.
                let mut out = vec![0u8; r.buffer_len().min(70_000)];
                let _ = r.emit(
                    &mut Packet::new_unchecked(&mut out[..]),
                    src,
                    dst,
                    Checksum::Check,
                );
                let _ = (r.header_len(), r.segment_len(), r.window_shift());
            }
        }
        TcpOptions::new(bytes).for_each(drop);
    }

    proptest! {
        #[test]
        fn seq_number_comparisons_are_modular(a in any::<u32>(), d in 1u32..0x8000_0000) {
            let a = SeqNumber(a);
            let b = a + d as usize;
            prop_assert!(a.lt(b) && a.le(b) && !a.ge(b) && !a.gt(b));
            prop_assert!(b.gt(a) && b.ge(a) && !b.le(a) && !b.lt(a));
            prop_assert_eq!(b - a, d as i32);
            prop_assert_eq!(a - b, -(d as i32));
            prop_assert_eq!(b.bytes_since(a), d as usize);
            prop_assert_eq!(b - d as usize, a);
        }

        #[test]
        fn emit_then_parse_round_trips(
            fields in any_fields(),
            alt_data in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..12)),
            payload in proptest::collection::vec(any::<u8>(), 0..300),
            src in any_address(),
            dst in any_address(),
        ) {
            let mut repr = build(&fields, alt_data.as_deref(), &payload);
            let mut buf = vec![0u8; repr.buffer_len()];
            if repr.header_len() > MAX_HEADER_LEN {
                let emitted = repr.emit(&mut Packet::new_unchecked(&mut buf[..]), src, dst, Checksum::Check);
                let too_long = matches!(emitted, Err(Error::BadField { proto: Proto::Tcp, .. }));
                prop_assert!(too_long);
                // Then drop options until the rest fit, and go on with those.
                fit_options(&mut repr);
                buf = vec![0u8; repr.buffer_len()];
            }
            repr.emit(&mut Packet::new_unchecked(&mut buf[..]), src, dst, Checksum::Check).unwrap();
            let p = Packet::new_checked(&buf[..]).unwrap();
            prop_assert_eq!(TcpRepr::parse(&p, src, dst, Checksum::Check).unwrap(), repr);
            prop_assert_eq!(p.header_len(), repr.header_len());
            prop_assert!(p.header_len().is_multiple_of(4));
            prop_assert_eq!(p.segment_len(), repr.segment_len());

            // etherparse reads the same header...
            let theirs = etherparse::TcpHeaderSlice::from_slice(&buf).unwrap();
            prop_assert_eq!(theirs.source_port(), repr.src_port);
            prop_assert_eq!(theirs.destination_port(), repr.dst_port);
            prop_assert_eq!(theirs.sequence_number(), repr.seq_number.0);
            prop_assert_eq!(theirs.ack(), repr.ack_number.is_some());
            prop_assert_eq!(theirs.acknowledgment_number(), repr.ack_number.unwrap_or_default().0);
            prop_assert_eq!(usize::from(theirs.data_offset()) * 4, repr.header_len());
            prop_assert_eq!(theirs.syn(), repr.control == Control::Syn);
            prop_assert_eq!(theirs.fin(), repr.control == Control::Fin);
            prop_assert_eq!(theirs.rst(), repr.control == Control::Rst);
            prop_assert_eq!(theirs.psh(), repr.psh);
            prop_assert_eq!(theirs.ece(), repr.ece);
            prop_assert_eq!(theirs.cwr(), repr.cwr);
            prop_assert_eq!(theirs.urg(), repr.urgent_pointer.is_some());
            prop_assert_eq!(theirs.urgent_pointer(), repr.urgent_pointer.unwrap_or(0));
            prop_assert_eq!(theirs.window_size(), repr.window_len);
            prop_assert_eq!(theirs.options(), p.options());
            // ...computes the same checksum its own way...
            let expected = theirs.calc_checksum_ipv4_raw(src.0, dst.0, &payload).unwrap();
            prop_assert_eq!(theirs.checksum(), expected);
            // ...and reads the same options, up to the RFC 1146 ones it does not know.
            let ours: Vec<_> = p.options_iter().collect::<Result<_>>().unwrap();
            let (known, stop) = etherparse_view(&ours);
            let mut their_options = Vec::new();
            let mut their_stop = None;
            for option in theirs.options_iterator() {
                match option {
                    Ok(o) => their_options.push(o),
                    Err(etherparse::TcpOptionReadError::UnknownId(kind)) => {
                        their_stop = Some(kind);
                        break;
                    }
                    Err(e) => prop_assert!(false, "etherparse rejected our options: {e:?}"),
                }
            }
            prop_assert_eq!(their_options, known);
            prop_assert_eq!(their_stop, stop);
        }

        #[test]
        fn option_emit_then_parse_round_trips(
            (kind, data, owned) in any_option(),
            trailing in proptest::collection::vec(any::<u8>(), 0..8),
        ) {
            let option = match kind {
                option_kind::ALT_CHECKSUM_DATA => TcpOption::AltChecksumData(&data),
                0..=5 | 8 | 14 => owned,
                kind => TcpOption::Unknown { kind, data: &data },
            };
            let mut buf = vec![0u8; option.buffer_len() + trailing.len()];
            prop_assert_eq!(option.emit(&mut buf), Ok(option.buffer_len()));
            prop_assert_eq!(buf[0], option.kind());
            buf[option.buffer_len()..].copy_from_slice(&trailing);
            let (parsed, rest) = TcpOption::parse(&buf).unwrap();
            prop_assert_eq!(parsed, option);
            prop_assert_eq!(rest, &trailing[..]);
        }

        #[test]
        fn skip_then_fill_equals_check(
            fields in any_fields(),
            payload in proptest::collection::vec(any::<u8>(), 0..100),
            src in any_address(),
            dst in any_address(),
        ) {
            let repr = build(&fields, None, &payload);
            prop_assume!(repr.header_len() <= MAX_HEADER_LEN);
            let checked = emit_to_vec(&repr, src, dst);
            let mut skipped = vec![0u8; repr.buffer_len()];
            let mut p = Packet::new_unchecked(&mut skipped[..]);
            repr.emit(&mut p, src, dst, Checksum::Skip).unwrap();
            prop_assert_eq!(p.checksum(), 0);
            p.fill_checksum(src, dst);
            prop_assert_eq!(skipped, checked);
        }

        #[test]
        fn any_data_byte_change_is_caught(
            payload in proptest::collection::vec(any::<u8>(), 1..100),
            at in any::<prop::sample::Index>(),
            flip in 1u8..,
        ) {
            let repr = TcpRepr { payload: &payload, ..data_repr() };
            let mut buf = emit_to_vec(&repr, SERVER, CLIENT);
            let i = repr.header_len() + at.index(payload.len());
            buf[i] ^= flip;
            prop_assert_eq!(
                parse(&buf, SERVER, CLIENT).map(|_| ()),
                Err(Error::BadChecksum { proto: Proto::Tcp })
            );
        }

        #[test]
        fn parse_never_panics_on_arbitrary_bytes(
            bytes in proptest::collection::vec(any::<u8>(), 0..100),
            src in any_address(),
            dst in any_address(),
        ) {
            parse_every_way(&bytes, src, dst);
        }

        #[test]
        fn parse_never_panics_on_random_options(
            options in proptest::collection::vec(any::<u8>(), 0..=40),
            kinds in proptest::collection::vec(
                prop_oneof![Just(0u8), Just(1), Just(2), Just(3), Just(4), Just(5), Just(8), Just(14), Just(15), any::<u8>()],
                0..8
            ),
            lengths in proptest::collection::vec(0u8..16, 0..8),
        ) {
            // Random bytes, with plausible kinds and short lengths sprinkled in so that the
            // interesting paths are reached, behind a valid fixed header.
            let mut options = options;
            for (i, (kind, length)) in kinds.iter().zip(&lengths).enumerate() {
                if let Some(b) = options.get_mut(i * 5) { *b = *kind; }
                if let Some(b) = options.get_mut(i * 5 + 1) { *b = *length; }
            }
            let b = with_options(&options);
            parse_every_way(&b, SERVER, CLIENT);
            // With a valid checksum, parsing reaches the options; a failure must name one.
            if let Err(e) = parse(&b, SERVER, CLIENT) {
                prop_assert!(matches!(e, Error::BadOption { .. } | Error::BadField { .. }), "{e}");
            }
        }

        #[test]
        fn parse_never_panics_on_mutated_segments(
            fields in any_fields(),
            payload in proptest::collection::vec(any::<u8>(), 0..40),
            flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..6),
            cut in any::<prop::sample::Index>(),
        ) {
            let repr = build(&fields, Some(&[1, 2, 3]), &payload);
            prop_assume!(repr.header_len() <= MAX_HEADER_LEN);
            let mut buf = emit_to_vec(&repr, SERVER, CLIENT);
            for (at, x) in flips {
                let i = at.index(buf.len());
                buf[i] ^= x;
            }
            parse_every_way(&buf, SERVER, CLIENT);
            let cut = cut.index(buf.len() + 1);
            parse_every_way(&buf[..cut], SERVER, CLIENT);
        }
    }
}
