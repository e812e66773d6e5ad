//! IPv4 (RFC 791 §3.1).
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |Version|  IHL  |   DSCP    |ECN|          Total Length         |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |         Identification        |R|D|M|     Fragment Offset     |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  Time to Live |    Protocol   |         Header Checksum       |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                       Source Address                          |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                    Destination Address                        |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                 Options (0 to 40 bytes)       |    Padding    |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                 Payload (up to Total Length) ...
//! ```
//!
//! The second byte was the Type of Service of RFC 791; RFC 2474 §3 made its upper six bits
//! the DSCP and RFC 3168 §5 the lower two the ECN field. Flags: R is reserved and must be
//! zero, D is Don't Fragment, M is More Fragments (RFC 791 §3.1).
//!
//! The payload of a datagram ends at its Total Length, not at the end of the buffer: an
//! Ethernet frame pads a short datagram to 46 bytes of payload, and the padding is not the
//! datagram's.

use std::fmt;

use super::{check_len, field, Checksum, Error, Ipv4Address, Proto, Result};
use crate::checksum;

/// The protocol field (IANA "Assigned Internet Protocol Numbers").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IpProtocol {
    Icmp,
    Tcp,
    Udp,
    Other(u8),
}

impl From<u8> for IpProtocol {
    fn from(v: u8) -> Self {
        match v {
            1 => IpProtocol::Icmp,
            6 => IpProtocol::Tcp,
            17 => IpProtocol::Udp,
            v => IpProtocol::Other(v),
        }
    }
}

impl From<IpProtocol> for u8 {
    fn from(p: IpProtocol) -> u8 {
        match p {
            IpProtocol::Icmp => 1,
            IpProtocol::Tcp => 6,
            IpProtocol::Udp => 17,
            IpProtocol::Other(v) => v,
        }
    }
}

impl fmt::Display for IpProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IpProtocol::Icmp => f.write_str("ICMP"),
            IpProtocol::Tcp => f.write_str("TCP"),
            IpProtocol::Udp => f.write_str("UDP"),
            IpProtocol::Other(v) => write!(f, "protocol {v}"),
        }
    }
}

/// Byte offsets of the header fields.
mod offset {
    pub const VERSION_IHL: usize = 0;
    pub const DSCP_ECN: usize = 1;
    pub const TOTAL_LEN: usize = 2;
    pub const IDENT: usize = 4;
    pub const FLAGS_FRAG: usize = 6;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: usize = 10;
    pub const SOURCE: usize = 12;
    pub const DESTINATION: usize = 16;
    pub const OPTIONS: usize = 20;
}

/// Length of a header without options.
pub const MIN_HEADER_LEN: usize = offset::OPTIONS;
/// Length of the longest header: IHL is four bits, counting 32-bit words.
pub const MAX_HEADER_LEN: usize = 60;
/// Most option bytes a header holds.
pub const MAX_OPTIONS_LEN: usize = MAX_HEADER_LEN - MIN_HEADER_LEN;
/// The largest datagram: Total Length is 16 bits.
pub const MAX_TOTAL_LEN: usize = u16::MAX as usize;

/// Bits of the flags-and-fragment-offset word (RFC 791 §3.1).
const FLAG_RESERVED: u16 = 0x8000;
const FLAG_DONT_FRAG: u16 = 0x4000;
const FLAG_MORE_FRAGS: u16 = 0x2000;
const FRAG_OFFSET_MASK: u16 = 0x1FFF;

/// Option types with a meaning of their own to the walk (RFC 791 §3.1, "Options").
const OPTION_END: u8 = 0;
const OPTION_NOP: u8 = 1;

/// Checks the options of a header for length, without interpreting them (RFC 791 §3.1).
///
/// End of Option List (type 0) ends the list: what follows it is padding. No Operation
/// (type 1) is a single byte. Every other option is a type byte, a length byte counting
/// the type and length bytes themselves (so at least 2), and data, and must end within
/// the options.
pub fn check_options(options: &[u8]) -> Result<()> {
    let mut at = 0;
    while let Some(&kind) = options.get(at) {
        match kind {
            OPTION_END => return Ok(()),
            OPTION_NOP => at += 1,
            _ => {
                let Some(&len) = options.get(at + 1) else {
                    return Err(Error::BadOption {
                        proto: Proto::Ipv4,
                        kind,
                        reason: "no room for the length byte",
                    });
                };
                if len < 2 {
                    return Err(Error::BadOption {
                        proto: Proto::Ipv4,
                        kind,
                        reason: "length below 2",
                    });
                }
                let end = at + len as usize;
                if end > options.len() {
                    return Err(Error::BadOption {
                        proto: Proto::Ipv4,
                        kind,
                        reason: "runs past the end of the header",
                    });
                }
                at = end;
            }
        }
    }
    Ok(())
}

/// Record Route (RFC 791 §3.1, type 7): a pointer and room for the addresses of the
/// hosts and gateways a datagram passes, each recording its own.
pub const OPTION_RECORD_ROUTE: u8 = 7;

/// Internet Timestamp (RFC 791 §3.1, type 68): a pointer, an overflow count and a flag,
/// and room for timestamps, alone or each after an address.
pub const OPTION_TIMESTAMP: u8 = 0x44;

/// Each option of a header's `options` bytes but the no-operations, as its bytes (type
/// first), up to the End of Option List (RFC 791 §3.1). An option whose length byte is
/// impossible ends the walk with what is left ([`check_options`] refuses such options).
pub fn each_option(options: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut at = 0;
    std::iter::from_fn(move || loop {
        match *options.get(at)? {
            OPTION_END => return None,
            OPTION_NOP => at += 1,
            _ => {
                let len = options.get(at + 1).map_or(2, |&l| usize::from(l).max(2));
                let end = (at + len).min(options.len());
                let option = &options[at..end];
                at = end;
                return Some(option);
            }
        }
    })
}

/// The options of a header, kept as bytes: up to 40 of them, a multiple of 4, checked by
/// [`check_options`]. Fixed-size so that [`Ipv4Repr`] stays `Copy`. The length is a
/// word, so that the whole is six words with no padding, built and moved a word at a
/// time: with a byte for the length it sat at an odd offset and was moved in overlapping
/// 4-byte pieces (its padding too), whose loads the CPU could not forward from the
/// stores that built it, a stall in every header parsed.
#[derive(Clone, Copy)]
pub struct Ipv4Options {
    bytes: [u8; MAX_OPTIONS_LEN],
    len: usize,
}

impl Ipv4Options {
    /// No options.
    pub const NONE: Ipv4Options = Ipv4Options {
        bytes: [0; MAX_OPTIONS_LEN],
        len: 0,
    };

    /// Options from their bytes, padded with zeros (End of Option List) to a multiple of
    /// four bytes, as the header length counts 32-bit words (RFC 791 §3.1, "Padding").
    ///
    /// Errors: more than 40 bytes after padding (`BadField`), or an option whose length
    /// is impossible (`BadOption`).
    pub fn new(options: &[u8]) -> Result<Ipv4Options> {
        if options.is_empty() {
            // Almost every datagram.
            return Ok(Ipv4Options::NONE);
        }
        let padded = options.len().div_ceil(4) * 4;
        if padded > MAX_OPTIONS_LEN {
            return Err(Error::BadField {
                proto: Proto::Ipv4,
                field: "options length",
                value: u32::try_from(options.len()).unwrap_or(u32::MAX),
            });
        }
        check_options(options)?;
        let mut bytes = [0; MAX_OPTIONS_LEN];
        bytes[..options.len()].copy_from_slice(options);
        Ok(Ipv4Options { bytes, len: padded })
    }

    /// The option bytes, padding included.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    /// Bytes the options take in the header.
    pub const fn len(&self) -> usize {
        self.len
    }

    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The option bytes before the End of Option List: without the padding, so that
    /// other options can follow them (after an End of Option List a parser reads none).
    pub fn listed(&self) -> &[u8] {
        let bytes = self.as_bytes();
        let mut at = 0;
        while let Some(&kind) = bytes.get(at) {
            at += match kind {
                OPTION_END => break,
                OPTION_NOP => 1,
                // Checked when the options were made: at least 2, within the bytes.
                _ => usize::from(bytes[at + 1]),
            };
        }
        &bytes[..at]
    }

    /// The options a fragment after the first carries: those whose type has the copied
    /// flag (its high bit) set, such as a source route (RFC 791 §3.1 "copied flag", §3.2
    /// fragmentation); no-operations and padding are left out, and the rest padded again.
    pub fn copied(&self) -> Ipv4Options {
        let mut kept = [0u8; MAX_OPTIONS_LEN];
        let mut n = 0;
        for option in each_option(self.as_bytes()).filter(|o| o[0] & 0x80 != 0) {
            kept[n..n + option.len()].copy_from_slice(option);
            n += option.len();
        }
        Ipv4Options::new(&kept[..n]).unwrap_or(Ipv4Options::NONE)
    }
}

impl Default for Ipv4Options {
    fn default() -> Self {
        Ipv4Options::NONE
    }
}

impl PartialEq for Ipv4Options {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for Ipv4Options {}

impl std::hash::Hash for Ipv4Options {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state);
    }
}

impl fmt::Debug for Ipv4Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Ipv4Options")
            .field(&self.as_bytes())
            .finish()
    }
}

/// A view of an IPv4 datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// A view without checks; accessors panic if the buffer is shorter than the header,
    /// or, for the options and payload, than the lengths the header claims.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// A view of a buffer checked to hold the whole datagram, as [`Packet::check_len`]
    /// describes.
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let packet = Packet { buffer };
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks the header's own lengths against each other and against the buffer, but
    /// not the payload: for a datagram of which only the front is at hand, such as the
    /// one an ICMP error quotes.
    ///
    /// Errors, in order: a buffer under 20 bytes (`Truncated`); a version other than 4
    /// (`BadField`); an IHL under 5 (`BadField`); a buffer shorter than the IHL says
    /// (`Truncated`); a total length shorter than the header (`BadField`).
    pub fn check_header_len(&self) -> Result<()> {
        let buf = self.buffer.as_ref();
        check_len(Proto::Ipv4, buf, MIN_HEADER_LEN)?;
        if self.version() != 4 {
            return Err(Error::BadField {
                proto: Proto::Ipv4,
                field: "version",
                value: self.version() as u32,
            });
        }
        let header_len = self.header_len();
        if header_len < MIN_HEADER_LEN {
            return Err(Error::BadField {
                proto: Proto::Ipv4,
                field: "IHL",
                value: (header_len / 4) as u32,
            });
        }
        check_len(Proto::Ipv4, buf, header_len)?;
        if (self.total_len() as usize) < header_len {
            return Err(Error::BadField {
                proto: Proto::Ipv4,
                field: "total length",
                value: self.total_len() as u32,
            });
        }
        Ok(())
    }

    /// Checks, beyond [`Packet::check_header_len`], that the buffer holds the total length
    /// (`Truncated` if not). After this every accessor is safe to call. The buffer may be
    /// longer than the datagram (link-layer padding).
    pub fn check_len(&self) -> Result<()> {
        self.check_header_len()?;
        check_len(Proto::Ipv4, self.buffer.as_ref(), self.total_len() as usize)
    }

    /// The buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[offset::VERSION_IHL] >> 4
    }

    /// Header length in bytes: the IHL field times four.
    pub fn header_len(&self) -> usize {
        (self.buffer.as_ref()[offset::VERSION_IHL] & 0x0F) as usize * 4
    }

    /// Differentiated Services code point (RFC 2474 §3): six bits.
    pub fn dscp(&self) -> u8 {
        self.buffer.as_ref()[offset::DSCP_ECN] >> 2
    }

    /// Explicit Congestion Notification (RFC 3168 §5): two bits.
    pub fn ecn(&self) -> u8 {
        self.buffer.as_ref()[offset::DSCP_ECN] & 0x03
    }

    /// Length of the datagram, header included.
    pub fn total_len(&self) -> u16 {
        field::u16_at(self.buffer.as_ref(), offset::TOTAL_LEN)
    }

    pub fn ident(&self) -> u16 {
        field::u16_at(self.buffer.as_ref(), offset::IDENT)
    }

    fn flags_frag(&self) -> u16 {
        field::u16_at(self.buffer.as_ref(), offset::FLAGS_FRAG)
    }

    /// The reserved flag, which RFC 791 says must be zero.
    pub fn reserved_flag(&self) -> bool {
        self.flags_frag() & FLAG_RESERVED != 0
    }

    pub fn dont_frag(&self) -> bool {
        self.flags_frag() & FLAG_DONT_FRAG != 0
    }

    pub fn more_frags(&self) -> bool {
        self.flags_frag() & FLAG_MORE_FRAGS != 0
    }

    /// Fragment offset in bytes: the field counts units of eight bytes.
    pub fn frag_offset(&self) -> u16 {
        (self.flags_frag() & FRAG_OFFSET_MASK) * 8
    }

    /// Whether the datagram is a fragment: More Fragments set or a nonzero offset
    /// (RFC 791 §2.3, "Fragmentation").
    pub fn is_fragment(&self) -> bool {
        self.more_frags() || self.frag_offset() != 0
    }

    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[offset::TTL]
    }

    pub fn protocol(&self) -> IpProtocol {
        self.buffer.as_ref()[offset::PROTOCOL].into()
    }

    pub fn checksum(&self) -> u16 {
        field::u16_at(self.buffer.as_ref(), offset::CHECKSUM)
    }

    pub fn source(&self) -> Ipv4Address {
        Ipv4Address::from_bytes(&self.buffer.as_ref()[offset::SOURCE..])
    }

    pub fn destination(&self) -> Ipv4Address {
        Ipv4Address::from_bytes(&self.buffer.as_ref()[offset::DESTINATION..])
    }

    /// The option bytes, padding included: from byte 20 to the header length.
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[offset::OPTIONS..self.header_len()]
    }

    /// The header, options included.
    pub fn header(&self) -> &[u8] {
        &self.buffer.as_ref()[..self.header_len()]
    }

    /// The bytes from the end of the header to the total length.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..self.total_len() as usize]
    }

    /// Whether the header checksum verifies, summed with the in-line header routine
    /// (paper 002 §6.1).
    pub fn verify_checksum(&self) -> bool {
        checksum::verifies(checksum::header_sum(self.header()))
    }

    /// Whether the header checksum verifies, summed with the general routine and a chosen
    /// kernel.
    pub fn verify_checksum_general(&self, kernel: checksum::Kernel) -> bool {
        checksum::verifies(checksum::sum_with(kernel, self.header()))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_version(&mut self, version: u8) {
        let b = &mut self.buffer.as_mut()[offset::VERSION_IHL];
        *b = (*b & 0x0F) | (version << 4);
    }

    /// Sets the IHL field to `len / 4`. The length should be a multiple of four from 20
    /// to 60; the field keeps the low four bits of `len / 4`.
    pub fn set_header_len(&mut self, len: usize) {
        let b = &mut self.buffer.as_mut()[offset::VERSION_IHL];
        *b = (*b & 0xF0) | ((len / 4) as u8 & 0x0F);
    }

    /// Sets the DSCP; only the low six bits of `dscp` are kept.
    pub fn set_dscp(&mut self, dscp: u8) {
        let b = &mut self.buffer.as_mut()[offset::DSCP_ECN];
        *b = (*b & 0x03) | (dscp << 2);
    }

    /// Sets the ECN field; only the low two bits of `ecn` are kept.
    pub fn set_ecn(&mut self, ecn: u8) {
        let b = &mut self.buffer.as_mut()[offset::DSCP_ECN];
        *b = (*b & 0xFC) | (ecn & 0x03);
    }

    pub fn set_total_len(&mut self, len: u16) {
        field::set_u16(self.buffer.as_mut(), offset::TOTAL_LEN, len);
    }

    pub fn set_ident(&mut self, ident: u16) {
        field::set_u16(self.buffer.as_mut(), offset::IDENT, ident);
    }

    fn set_flag(&mut self, bit: u16, on: bool) {
        let old = self.flags_frag();
        let new = if on { old | bit } else { old & !bit };
        field::set_u16(self.buffer.as_mut(), offset::FLAGS_FRAG, new);
    }

    pub fn set_reserved_flag(&mut self, on: bool) {
        self.set_flag(FLAG_RESERVED, on);
    }

    pub fn set_dont_frag(&mut self, on: bool) {
        self.set_flag(FLAG_DONT_FRAG, on);
    }

    pub fn set_more_frags(&mut self, on: bool) {
        self.set_flag(FLAG_MORE_FRAGS, on);
    }

    /// Sets the fragment offset, in bytes; the field holds `offset / 8`, so the low three
    /// bits of `offset` are dropped ([`Ipv4Repr::emit`] refuses such an offset).
    pub fn set_frag_offset(&mut self, offset: u16) {
        let word = (self.flags_frag() & !FRAG_OFFSET_MASK) | (offset / 8);
        field::set_u16(self.buffer.as_mut(), offset::FLAGS_FRAG, word);
    }

    pub fn set_ttl(&mut self, ttl: u8) {
        self.buffer.as_mut()[offset::TTL] = ttl;
    }

    pub fn set_protocol(&mut self, protocol: IpProtocol) {
        self.buffer.as_mut()[offset::PROTOCOL] = protocol.into();
    }

    pub fn set_checksum(&mut self, checksum: u16) {
        field::set_u16(self.buffer.as_mut(), offset::CHECKSUM, checksum);
    }

    pub fn set_source(&mut self, a: Ipv4Address) {
        self.buffer.as_mut()[offset::SOURCE..offset::DESTINATION].copy_from_slice(&a.0);
    }

    pub fn set_destination(&mut self, a: Ipv4Address) {
        self.buffer.as_mut()[offset::DESTINATION..offset::OPTIONS].copy_from_slice(&a.0);
    }

    /// The option bytes, for writing: from byte 20 to the header length.
    pub fn options_mut(&mut self) -> &mut [u8] {
        let end = self.header_len();
        &mut self.buffer.as_mut()[offset::OPTIONS..end]
    }

    /// The payload, for writing: from the end of the header to the total length.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let (start, end) = (self.header_len(), self.total_len() as usize);
        &mut self.buffer.as_mut()[start..end]
    }

    /// Computes and writes the header checksum with the in-line header routine, the
    /// "in-line IP header checksum" of paper 002 §6.1.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = checksum::ipv4_header_checksum(self.header());
        self.set_checksum(c);
    }

    /// Computes and writes the header checksum with the general routine and a chosen
    /// kernel, the alternative paper 002 §6.1 measures the in-line path against.
    pub fn fill_checksum_general(&mut self, kernel: checksum::Kernel) {
        self.set_checksum(0);
        let c = checksum::finish(checksum::sum_with(kernel, self.header()));
        self.set_checksum(c);
    }
}

/// A parsed IPv4 header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ipv4Repr {
    pub src: Ipv4Address,
    pub dst: Ipv4Address,
    pub protocol: IpProtocol,
    pub ttl: u8,
    /// Six bits (RFC 2474).
    pub dscp: u8,
    /// Two bits (RFC 3168).
    pub ecn: u8,
    pub ident: u16,
    pub dont_frag: bool,
    pub more_frags: bool,
    /// Fragment offset in bytes, a multiple of 8.
    pub frag_offset: u16,
    /// Bytes after the header: total length minus header length.
    pub payload_len: usize,
    pub options: Ipv4Options,
}

impl Ipv4Repr {
    /// Parses the header of a whole datagram: [`Packet::check_len`], then the header
    /// checksum if `checksum` is [`Checksum::Check`] (in-line routine; to use the general
    /// one, pass [`Checksum::Skip`] and call [`Packet::verify_checksum_general`]), then the
    /// options ([`check_options`]).
    ///
    /// The reserved flag is ignored rather than refused: RFC 791 has senders clear it and
    /// says nothing of receivers, and RFC 1122 §1.2.2 asks receivers to be liberal.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>, checksum: Checksum) -> Result<Ipv4Repr> {
        packet.check_len()?;
        Ipv4Repr::parse_checked_header(packet, checksum)
    }

    /// Parses the header at the front of `bytes`, which may hold only the start of the
    /// datagram: the quote in an ICMP error (RFC 792), say, which carries the header and
    /// 8 bytes of payload of a datagram of any length. The header is checked as
    /// [`Packet::check_header_len`] describes, then as [`Ipv4Repr::parse`] does.
    ///
    /// Returns the header, whose `payload_len` is what the total length field claims, and
    /// the payload bytes at hand (up to the total length).
    pub fn parse_truncated(bytes: &[u8], checksum: Checksum) -> Result<(Ipv4Repr, &[u8])> {
        let repr = Ipv4Repr::parse_header(bytes, checksum)?;
        let packet = Packet::new_unchecked(bytes);
        let end = bytes.len().min(packet.total_len() as usize);
        let payload = bytes.get(packet.header_len()..end).unwrap_or(&[]);
        Ok((repr, payload))
    }

    /// [`parse_truncated`](Self::parse_truncated)'s header alone, in line: for a datagram
    /// whose payload lies elsewhere (in a frame's fragments), built where the caller
    /// keeps it. Through `parse_truncated`, out of line, the header was built, copied
    /// into its result and copied out of that again, the last copy's loads wider than the
    /// stores before them (IP input's hottest instruction at MTU 1500 by reference, 11%
    /// of its samples).
    #[inline(always)]
    pub fn parse_header(bytes: &[u8], checksum: Checksum) -> Result<Ipv4Repr> {
        let packet = Packet::new_unchecked(bytes);
        packet.check_header_len()?;
        Ipv4Repr::parse_checked_header(&packet, checksum)
    }

    /// The rest of parsing, for a packet whose header lengths were checked. In line: the
    /// header is then built where the caller keeps it, not built and copied out.
    #[inline(always)]
    fn parse_checked_header<T: AsRef<[u8]>>(
        packet: &Packet<T>,
        checksum: Checksum,
    ) -> Result<Ipv4Repr> {
        if checksum == Checksum::Check && !packet.verify_checksum() {
            return Err(Error::BadChecksum { proto: Proto::Ipv4 });
        }
        let options = Ipv4Options::new(packet.options())?;
        // The fixed header as an array: its fields read without a bounds check each.
        let Some(fixed) = packet.buffer.as_ref().first_chunk::<MIN_HEADER_LEN>() else {
            return Err(Error::Truncated {
                proto: Proto::Ipv4,
                needed: MIN_HEADER_LEN,
                available: packet.buffer.as_ref().len(),
            });
        };
        let fixed = Packet::new_unchecked(fixed);
        Ok(Ipv4Repr {
            src: fixed.source(),
            dst: fixed.destination(),
            protocol: fixed.protocol(),
            ttl: fixed.ttl(),
            dscp: fixed.dscp(),
            ecn: fixed.ecn(),
            ident: fixed.ident(),
            dont_frag: fixed.dont_frag(),
            more_frags: fixed.more_frags(),
            frag_offset: fixed.frag_offset(),
            payload_len: (fixed.total_len() as usize).saturating_sub(packet.header_len()),
            options,
        })
    }

    /// Bytes the header takes, options included.
    pub const fn header_len(&self) -> usize {
        MIN_HEADER_LEN + self.options.len()
    }

    /// Bytes the datagram takes: header and payload.
    pub const fn buffer_len(&self) -> usize {
        self.header_len() + self.payload_len
    }

    /// Whether the datagram is a fragment: More Fragments set or a nonzero offset
    /// (RFC 791 §2.3, "Fragmentation").
    pub const fn is_fragment(&self) -> bool {
        self.more_frags || self.frag_offset != 0
    }

    /// Writes the header into the front of the packet, and with [`Checksum::Check`] the
    /// header checksum (in-line routine); with [`Checksum::Skip`] the field is zero. The
    /// payload is the caller's to write, into [`Packet::payload_mut`].
    ///
    /// Errors: a DSCP over 63, an ECN over 3, a fragment offset not a multiple of 8, or a
    /// total length over 65535 (`BadField`); a buffer shorter than the total length
    /// (`Truncated`).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet: &mut Packet<T>,
        checksum: Checksum,
    ) -> Result<()> {
        self.emit_into(packet, checksum, true)
    }

    /// Writes the header alone into a buffer that need hold only the header: the payload
    /// follows elsewhere (a frame's fragments, the loaned data of a zero-copy send). The
    /// total length still says header plus `payload_len`.
    pub fn emit_header<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet: &mut Packet<T>,
        checksum: Checksum,
    ) -> Result<()> {
        self.emit_into(packet, checksum, false)
    }

    /// [`emit`](Self::emit) when `whole` (the buffer holds the datagram), else
    /// [`emit_header`](Self::emit_header).
    fn emit_into<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet: &mut Packet<T>,
        checksum: Checksum,
        whole: bool,
    ) -> Result<()> {
        if self.dscp > 0x3F {
            return Err(Error::BadField {
                proto: Proto::Ipv4,
                field: "DSCP",
                value: self.dscp as u32,
            });
        }
        if self.ecn > 0x03 {
            return Err(Error::BadField {
                proto: Proto::Ipv4,
                field: "ECN",
                value: self.ecn as u32,
            });
        }
        if !self.frag_offset.is_multiple_of(8) {
            return Err(Error::BadField {
                proto: Proto::Ipv4,
                field: "fragment offset",
                value: self.frag_offset as u32,
            });
        }
        let total_len = self
            .header_len()
            .checked_add(self.payload_len)
            .filter(|&n| n <= MAX_TOTAL_LEN)
            .ok_or(Error::BadField {
                proto: Proto::Ipv4,
                field: "payload length",
                value: u32::try_from(self.payload_len).unwrap_or(u32::MAX),
            })?;
        let need = if whole { total_len } else { self.header_len() };
        check_len(Proto::Ipv4, packet.buffer.as_ref(), need)?;
        self.write_header(packet, total_len, checksum);
        Ok(())
    }

    fn write_header<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet: &mut Packet<T>,
        total_len: usize,
        checksum: Checksum,
    ) {
        packet.set_version(4);
        packet.set_header_len(self.header_len());
        packet.set_dscp(self.dscp);
        packet.set_ecn(self.ecn);
        packet.set_total_len(total_len as u16);
        packet.set_ident(self.ident);
        // Flags and offset in one write: the reserved bit is cleared (RFC 791 §3.1).
        let mut word = self.frag_offset / 8;
        if self.dont_frag {
            word |= FLAG_DONT_FRAG;
        }
        if self.more_frags {
            word |= FLAG_MORE_FRAGS;
        }
        field::set_u16(packet.buffer.as_mut(), offset::FLAGS_FRAG, word);
        packet.set_ttl(self.ttl);
        packet.set_protocol(self.protocol);
        packet.set_source(self.src);
        packet.set_destination(self.dst);
        packet
            .options_mut()
            .copy_from_slice(self.options.as_bytes());
        match checksum {
            Checksum::Check => packet.fill_checksum(),
            Checksum::Skip => packet.set_checksum(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A UDP datagram's header from 192.168.0.1 to 192.168.0.199, total length 115, the
    /// classic worked example of the IPv4 header checksum (checksum 0xB861).
    const HEADER: [u8; 20] = [
        0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8, 0x00,
        0x01, 0xc0, 0xa8, 0x00, 0xc7,
    ];

    fn datagram() -> Vec<u8> {
        let mut d = vec![0u8; 0x73];
        d[..20].copy_from_slice(&HEADER);
        for (i, b) in d[20..].iter_mut().enumerate() {
            *b = i as u8;
        }
        d
    }

    #[test]
    fn parses_the_classic_header() {
        let d = datagram();
        let p = Packet::new_checked(&d[..]).unwrap();
        assert_eq!(p.version(), 4);
        assert_eq!(p.header_len(), 20);
        assert_eq!((p.dscp(), p.ecn()), (0, 0));
        assert_eq!(p.total_len(), 115);
        assert_eq!(p.ident(), 0);
        assert!(p.dont_frag() && !p.more_frags() && !p.reserved_flag());
        assert_eq!(p.frag_offset(), 0);
        assert_eq!(p.ttl(), 64);
        assert_eq!(p.protocol(), IpProtocol::Udp);
        assert_eq!(p.checksum(), 0xB861);
        assert!(p.verify_checksum());
        for k in checksum::Kernel::available() {
            assert!(p.verify_checksum_general(k), "{k}");
        }
        assert_eq!(p.options(), &[] as &[u8]);
        assert_eq!(p.payload().len(), 95);
        assert_eq!(p.payload()[..3], [0, 1, 2]);

        let r = Ipv4Repr::parse(&p, Checksum::Check).unwrap();
        assert_eq!(
            r,
            Ipv4Repr {
                src: Ipv4Address::new(192, 168, 0, 1),
                dst: Ipv4Address::new(192, 168, 0, 199),
                protocol: IpProtocol::Udp,
                ttl: 64,
                dscp: 0,
                ecn: 0,
                ident: 0,
                dont_frag: true,
                more_frags: false,
                frag_offset: 0,
                payload_len: 95,
                options: Ipv4Options::NONE,
            }
        );
        assert!(!r.is_fragment());
        assert_eq!(r.buffer_len(), 115);
    }

    #[test]
    fn fills_the_classic_checksum_both_ways() {
        for k in checksum::Kernel::available() {
            let mut d = datagram();
            let mut p = Packet::new_checked(&mut d[..]).unwrap();
            p.set_checksum(0x1234);
            p.fill_checksum();
            assert_eq!(p.checksum(), 0xB861);
            p.set_checksum(0);
            p.fill_checksum_general(k);
            assert_eq!(p.checksum(), 0xB861, "{k}");
        }
    }

    #[test]
    fn emits_the_classic_header() {
        let d = datagram();
        let r = Ipv4Repr::parse(&Packet::new_checked(&d[..]).unwrap(), Checksum::Check).unwrap();
        let mut out = [0xAAu8; 0x73];
        r.emit(&mut Packet::new_unchecked(&mut out[..]), Checksum::Check)
            .unwrap();
        assert_eq!(out[..20], HEADER);
        r.emit(&mut Packet::new_unchecked(&mut out[..]), Checksum::Skip)
            .unwrap();
        assert_eq!(out[10..12], [0, 0]);
    }

    #[test]
    fn the_header_alone_is_emitted_for_a_payload_kept_elsewhere() {
        let d = datagram();
        let r = Ipv4Repr::parse(&Packet::new_checked(&d[..]).unwrap(), Checksum::Check).unwrap();
        let mut header = [0xAAu8; 20];
        r.emit_header(&mut Packet::new_unchecked(&mut header[..]), Checksum::Check)
            .unwrap();
        assert_eq!(header, HEADER, "total length 0x73 and the classic checksum");
        assert!(r
            .emit(&mut Packet::new_unchecked(&mut header[..]), Checksum::Check)
            .is_err());
        let too_big = Ipv4Repr {
            payload_len: 65_516,
            ..r
        };
        assert!(too_big
            .emit_header(&mut Packet::new_unchecked(&mut header[..]), Checksum::Skip)
            .is_err());
    }

    #[test]
    fn payload_stops_at_total_length() {
        // Ethernet padding after the datagram is not payload.
        let mut d = datagram();
        d.extend_from_slice(&[0xEE; 7]);
        let p = Packet::new_checked(&d[..]).unwrap();
        assert_eq!(p.payload().len(), 95);
        assert_eq!(
            Ipv4Repr::parse(&p, Checksum::Check).unwrap().payload_len,
            95
        );
    }

    #[test]
    fn every_field_has_a_setter() {
        let mut b = [0u8; 28];
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.set_version(4);
        p.set_header_len(24);
        p.set_dscp(46);
        p.set_ecn(3);
        p.set_total_len(28);
        p.set_ident(0xBEEF);
        p.set_reserved_flag(true);
        p.set_dont_frag(true);
        p.set_more_frags(true);
        p.set_frag_offset(8 * 0x1FFF);
        p.set_ttl(1);
        p.set_protocol(IpProtocol::Other(200));
        p.set_source(Ipv4Address::new(10, 0, 0, 1));
        p.set_destination(Ipv4Address::new(10, 0, 0, 2));
        p.options_mut().copy_from_slice(&[1, 1, 1, 0]);
        p.payload_mut().copy_from_slice(&[9, 8, 7, 6]);
        p.fill_checksum();
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!((p.version(), p.header_len()), (4, 24));
        assert_eq!((p.dscp(), p.ecn()), (46, 3));
        assert_eq!((p.total_len(), p.ident()), (28, 0xBEEF));
        assert!(p.reserved_flag() && p.dont_frag() && p.more_frags());
        assert_eq!(p.frag_offset(), 65528);
        assert_eq!((p.ttl(), p.protocol()), (1, IpProtocol::Other(200)));
        assert_eq!(p.source(), Ipv4Address::new(10, 0, 0, 1));
        assert_eq!(p.destination(), Ipv4Address::new(10, 0, 0, 2));
        assert_eq!(p.options(), &[1, 1, 1, 0]);
        assert_eq!(p.payload(), &[9, 8, 7, 6]);
        assert!(p.verify_checksum());
        // Clearing each flag leaves the others.
        let mut b2 = b;
        let mut p = Packet::new_unchecked(&mut b2[..]);
        p.set_dont_frag(false);
        assert!(p.reserved_flag() && !p.dont_frag() && p.more_frags());
        assert_eq!(p.frag_offset(), 65528);
        p.set_frag_offset(0);
        assert!(p.reserved_flag() && p.more_frags());
        // The reserved flag does not stop parsing.
        let r = Ipv4Repr::parse(&Packet::new_checked(&b[..]).unwrap(), Checksum::Check).unwrap();
        assert!(r.is_fragment());
        assert_eq!(r.options.as_bytes(), &[1, 1, 1, 0]);
    }

    #[test]
    fn protocol_numbers_convert_both_ways() {
        for v in 0..=255u8 {
            assert_eq!(u8::from(IpProtocol::from(v)), v);
        }
        assert_eq!(IpProtocol::from(1), IpProtocol::Icmp);
        assert_eq!(IpProtocol::from(6), IpProtocol::Tcp);
        assert_eq!(IpProtocol::from(17), IpProtocol::Udp);
        assert_eq!(IpProtocol::from(89), IpProtocol::Other(89));
    }

    fn expect_err(bytes: &[u8], want: Error) {
        assert_eq!(Packet::new_checked(bytes).unwrap_err(), want);
        assert_eq!(
            Ipv4Repr::parse(&Packet::new_unchecked(bytes), Checksum::Skip).unwrap_err(),
            want
        );
    }

    #[test]
    fn short_buffer_is_truncated() {
        let d = datagram();
        for n in 0..20 {
            expect_err(
                &d[..n],
                Error::Truncated {
                    proto: Proto::Ipv4,
                    needed: 20,
                    available: n,
                },
            );
        }
    }

    #[test]
    fn total_length_past_the_buffer_is_truncated() {
        let d = datagram();
        for n in 20..0x73 {
            expect_err(
                &d[..n],
                Error::Truncated {
                    proto: Proto::Ipv4,
                    needed: 0x73,
                    available: n,
                },
            );
        }
    }

    #[test]
    fn ihl_past_the_buffer_is_truncated() {
        let mut d = HEADER;
        d[0] = 0x4F; // 60 bytes
        expect_err(
            &d,
            Error::Truncated {
                proto: Proto::Ipv4,
                needed: 60,
                available: 20,
            },
        );
    }

    #[test]
    fn bad_version_is_refused() {
        for v in [0u8, 6, 15] {
            let mut d = datagram();
            d[0] = (v << 4) | 5;
            expect_err(
                &d,
                Error::BadField {
                    proto: Proto::Ipv4,
                    field: "version",
                    value: v as u32,
                },
            );
        }
    }

    #[test]
    fn ihl_below_five_is_refused() {
        for ihl in 0..5u8 {
            let mut d = datagram();
            d[0] = 0x40 | ihl;
            expect_err(
                &d,
                Error::BadField {
                    proto: Proto::Ipv4,
                    field: "IHL",
                    value: ihl as u32,
                },
            );
        }
    }

    #[test]
    fn total_length_below_the_header_is_refused() {
        let mut d = datagram();
        d[2..4].copy_from_slice(&19u16.to_be_bytes());
        expect_err(
            &d,
            Error::BadField {
                proto: Proto::Ipv4,
                field: "total length",
                value: 19,
            },
        );
        // With options the header is longer; a total length between 20 and it is short.
        let mut b = [0u8; 24];
        b[0] = 0x46;
        b[2..4].copy_from_slice(&22u16.to_be_bytes());
        expect_err(
            &b,
            Error::BadField {
                proto: Proto::Ipv4,
                field: "total length",
                value: 22,
            },
        );
    }

    #[test]
    fn bad_checksum_is_refused_unless_skipped() {
        let mut d = datagram();
        d[11] ^= 1;
        let p = Packet::new_checked(&d[..]).unwrap();
        assert!(!p.verify_checksum());
        assert!(!p.verify_checksum_general(checksum::Kernel::Rfc1071));
        assert_eq!(
            Ipv4Repr::parse(&p, Checksum::Check),
            Err(Error::BadChecksum { proto: Proto::Ipv4 })
        );
        assert!(Ipv4Repr::parse(&p, Checksum::Skip).is_ok());
    }

    /// A 20-byte header followed by `options` (a multiple of 4), checksum filled.
    fn with_options(options: &[u8]) -> Vec<u8> {
        let len = 20 + options.len();
        let mut b = vec![0u8; len];
        b[..20].copy_from_slice(&HEADER);
        b[20..].copy_from_slice(options);
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.set_header_len(len);
        p.set_total_len(len as u16);
        p.fill_checksum();
        b
    }

    fn option_error(options: &[u8]) -> Error {
        let b = with_options(options);
        let p = Packet::new_checked(&b[..]).unwrap();
        Ipv4Repr::parse(&p, Checksum::Check).unwrap_err()
    }

    #[test]
    fn bad_option_lengths_are_refused() {
        let bad = |kind, reason| Error::BadOption {
            proto: Proto::Ipv4,
            kind,
            reason,
        };
        // Length 0 and 1 cannot cover the type and length bytes.
        assert_eq!(option_error(&[0x44, 0, 0, 0]), bad(0x44, "length below 2"));
        assert_eq!(option_error(&[1, 0x07, 1, 0]), bad(0x07, "length below 2"));
        // Runs past the header: a record route claiming 39 bytes in 8.
        assert_eq!(
            option_error(&[0x07, 39, 4, 0, 0, 0, 0, 0]),
            bad(0x07, "runs past the end of the header")
        );
        assert_eq!(
            option_error(&[1, 1, 0x83, 3]),
            bad(0x83, "runs past the end of the header")
        );
        // The length byte itself falls past the header.
        assert_eq!(
            option_error(&[1, 1, 1, 0x94]),
            bad(0x94, "no room for the length byte")
        );
    }

    #[test]
    fn good_options_parse() {
        // Router alert (RFC 2113), NOPs, end of list with junk after it.
        for opts in [
            &[0x94, 4, 0, 0][..],
            &[1, 1, 1, 1],
            &[1, 0x94, 4, 0, 0, 0, 0xFF, 0xFF],
            &[0x07, 7, 4, 0, 0, 0, 0, 0],
            &[
                0x44, 40, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
            ],
        ] {
            let b = with_options(opts);
            let r =
                Ipv4Repr::parse(&Packet::new_checked(&b[..]).unwrap(), Checksum::Check).unwrap();
            assert_eq!(r.options.as_bytes(), opts);
            assert_eq!(r.header_len(), 20 + opts.len());
        }
    }

    #[test]
    fn options_pad_to_words_and_refuse_overlong() {
        let o = Ipv4Options::new(&[0x94, 4, 0, 0, 1]).unwrap();
        assert_eq!(o.as_bytes(), &[0x94, 4, 0, 0, 1, 0, 0, 0]);
        assert_eq!(o.len(), 8);
        assert!(Ipv4Options::new(&[]).unwrap().is_empty());
        assert_eq!(
            Ipv4Options::new(&[1; 41]),
            Err(Error::BadField {
                proto: Proto::Ipv4,
                field: "options length",
                value: 41
            })
        );
        assert!(Ipv4Options::new(&[1; 40]).is_ok());
    }

    /// A fragment after the first keeps only the options with the copied flag: here the
    /// source route (type 0x83) and the router alert (0x94), not record route (7) or
    /// timestamp (0x44), and not the no-operations.
    #[test]
    fn later_fragments_keep_the_copied_options() {
        let lsrr = [0x83, 7, 4, 198, 18, 0, 9];
        let record = [0x07, 7, 4, 0, 0, 0, 0];
        let stamp = [0x44, 4, 5, 0];
        let alert = [0x94, 4, 0, 0];
        let all = [&[1][..], &record, &lsrr, &stamp, &alert].concat();
        let o = Ipv4Options::new(&all).unwrap();
        let kept = [&lsrr[..], &alert].concat();
        assert_eq!(o.copied(), Ipv4Options::new(&kept).unwrap());
        assert_eq!(o.copied().len(), 12);
        assert_eq!(o.listed(), &all[..]);
        assert_eq!(Ipv4Options::new(&lsrr).unwrap().listed(), &lsrr[..]);
        assert!(Ipv4Options::new(&record).unwrap().copied().is_empty());
        assert!(Ipv4Options::NONE.copied().is_empty());
    }

    #[test]
    fn emit_refuses_bad_fields() {
        let d = datagram();
        let good = Ipv4Repr::parse(&Packet::new_checked(&d[..]).unwrap(), Checksum::Check).unwrap();
        let mut buf = vec![0u8; 70000];
        let mut emit =
            |r: Ipv4Repr| r.emit(&mut Packet::new_unchecked(&mut buf[..]), Checksum::Check);
        let field_err = |field, value| Error::BadField {
            proto: Proto::Ipv4,
            field,
            value,
        };
        assert_eq!(
            emit(Ipv4Repr { dscp: 64, ..good }),
            Err(field_err("DSCP", 64))
        );
        assert_eq!(emit(Ipv4Repr { ecn: 4, ..good }), Err(field_err("ECN", 4)));
        assert_eq!(
            emit(Ipv4Repr {
                frag_offset: 12,
                ..good
            }),
            Err(field_err("fragment offset", 12))
        );
        assert_eq!(
            emit(Ipv4Repr {
                payload_len: 65516,
                ..good
            }),
            Err(field_err("payload length", 65516))
        );
        assert_eq!(
            emit(Ipv4Repr {
                payload_len: usize::MAX,
                ..good
            }),
            Err(field_err("payload length", u32::MAX))
        );
        assert!(emit(Ipv4Repr {
            payload_len: 65515,
            ..good
        })
        .is_ok());
        // Buffer too small for the total length.
        let mut small = [0u8; 114];
        assert_eq!(
            good.emit(&mut Packet::new_unchecked(&mut small[..]), Checksum::Check),
            Err(Error::Truncated {
                proto: Proto::Ipv4,
                needed: 115,
                available: 114
            })
        );
    }

    #[test]
    fn parse_truncated_reads_a_quoted_header() {
        let d = datagram();
        // An ICMP error quotes the header and 8 bytes of a 115-byte datagram.
        let (r, rest) = Ipv4Repr::parse_truncated(&d[..28], Checksum::Check).unwrap();
        assert_eq!(r.payload_len, 95);
        assert_eq!(rest, &d[20..28]);
        // More than the datagram: the payload stops at the total length.
        let mut long = d.clone();
        long.extend_from_slice(&[0; 10]);
        let (_, rest) = Ipv4Repr::parse_truncated(&long, Checksum::Check).unwrap();
        assert_eq!(rest.len(), 95);
        // The header itself must be whole.
        assert_eq!(
            Ipv4Repr::parse_truncated(&d[..19], Checksum::Skip).unwrap_err(),
            Error::Truncated {
                proto: Proto::Ipv4,
                needed: 20,
                available: 19
            }
        );
    }

    fn any_options() -> impl Strategy<Value = Ipv4Options> {
        // Build option lists from well-formed pieces, then pad.
        let piece = prop_oneof![
            Just(vec![OPTION_NOP]),
            (2u8..=255, proptest::collection::vec(any::<u8>(), 0..10)).prop_map(|(kind, data)| {
                let mut v = vec![kind, data.len() as u8 + 2];
                v.extend(data);
                v
            }),
        ];
        proptest::collection::vec(piece, 0..5).prop_map(|pieces| {
            let mut all: Vec<u8> = pieces.concat();
            all.truncate(40);
            // Truncation may cut an option; cut back to the last whole one.
            let mut at = 0;
            let mut whole = 0;
            while at < all.len() {
                let step = if all[at] == OPTION_NOP {
                    1
                } else if at + 1 < all.len() {
                    all[at + 1] as usize
                } else {
                    usize::MAX
                };
                if step == usize::MAX || at + step > all.len() {
                    break;
                }
                at += step;
                whole = at;
            }
            all.truncate(whole);
            Ipv4Options::new(&all).unwrap()
        })
    }

    prop_compose! {
        fn any_repr()(
            src in any::<[u8; 4]>(),
            dst in any::<[u8; 4]>(),
            protocol in any::<u8>(),
            ttl in any::<u8>(),
            dscp in 0u8..64,
            ecn in 0u8..4,
            ident in any::<u16>(),
            dont_frag in any::<bool>(),
            more_frags in any::<bool>(),
            frag_units in 0u16..=0x1FFF,
            payload_len in 0usize..200,
            options in any_options(),
        ) -> Ipv4Repr {
            Ipv4Repr {
                src: Ipv4Address(src),
                dst: Ipv4Address(dst),
                protocol: protocol.into(),
                ttl,
                dscp,
                ecn,
                ident,
                dont_frag,
                more_frags,
                frag_offset: frag_units * 8,
                payload_len,
                options,
            }
        }
    }

    fn emitted(r: &Ipv4Repr) -> Vec<u8> {
        let mut buf = vec![0u8; r.buffer_len()];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        r.emit(&mut p, Checksum::Check).unwrap();
        for (i, b) in p.payload_mut().iter_mut().enumerate() {
            *b = (i * 7) as u8;
        }
        buf
    }

    proptest! {
        #[test]
        fn emit_then_parse_round_trips(r in any_repr()) {
            let buf = emitted(&r);
            let p = Packet::new_checked(&buf[..]).unwrap();
            prop_assert!(p.verify_checksum());
            prop_assert_eq!(Ipv4Repr::parse(&p, Checksum::Check).unwrap(), r);
            prop_assert_eq!(p.payload().len(), r.payload_len);
            prop_assert_eq!(p.is_fragment(), r.is_fragment());
        }

        #[test]
        fn in_line_and_general_checksums_agree(r in any_repr()) {
            let mut buf = emitted(&r);
            let want = Packet::new_checked(&buf[..]).unwrap().checksum();
            for k in checksum::Kernel::available() {
                let mut p = Packet::new_checked(&mut buf[..]).unwrap();
                p.fill_checksum_general(k);
                prop_assert_eq!(p.checksum(), want);
                prop_assert!(p.verify_checksum_general(k));
            }
        }

        #[test]
        fn etherparse_agrees(r in any_repr()) {
            let buf = emitted(&r);
            let h = etherparse::Ipv4HeaderSlice::from_slice(&buf).unwrap();
            prop_assert_eq!(h.version(), 4);
            prop_assert_eq!(h.ihl() as usize * 4, r.header_len());
            prop_assert_eq!(h.dcp().value(), r.dscp);
            prop_assert_eq!(h.ecn().value(), r.ecn);
            prop_assert_eq!(h.total_len() as usize, r.buffer_len());
            prop_assert_eq!(h.identification(), r.ident);
            prop_assert_eq!(h.dont_fragment(), r.dont_frag);
            prop_assert_eq!(h.more_fragments(), r.more_frags);
            prop_assert_eq!(h.fragments_offset().byte_offset(), r.frag_offset);
            prop_assert_eq!(h.ttl(), r.ttl);
            prop_assert_eq!(h.protocol().0, u8::from(r.protocol));
            prop_assert_eq!(h.source(), r.src.0);
            prop_assert_eq!(h.destination(), r.dst.0);
            prop_assert_eq!(h.options(), r.options.as_bytes());
            // etherparse computes the same header checksum from the fields.
            prop_assert_eq!(h.to_header().calc_header_checksum(), h.header_checksum());
            prop_assert_eq!(h.header_checksum(), Packet::new_checked(&buf[..]).unwrap().checksum());
        }

        #[test]
        fn parses_what_etherparse_writes(r in any_repr()) {
            let mut h = etherparse::Ipv4Header::new(
                r.payload_len as u16,
                r.ttl,
                etherparse::IpNumber(r.protocol.into()),
                r.src.0,
                r.dst.0,
            ).unwrap();
            h.dscp = etherparse::IpDscp::try_new(r.dscp).unwrap();
            h.ecn = etherparse::IpEcn::try_new(r.ecn).unwrap();
            h.identification = r.ident;
            h.dont_fragment = r.dont_frag;
            h.more_fragments = r.more_frags;
            h.fragment_offset = etherparse::IpFragOffset::try_new(r.frag_offset / 8).unwrap();
            h.options = r.options.as_bytes().try_into().unwrap();
            h.set_payload_len(r.payload_len).unwrap();
            h.header_checksum = h.calc_header_checksum();
            let mut buf = h.to_bytes().to_vec();
            buf.resize(r.buffer_len(), 0x5A);
            let p = Packet::new_checked(&buf[..]).unwrap();
            prop_assert_eq!(Ipv4Repr::parse(&p, Checksum::Check).unwrap(), r);
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..100)) {
            exercise(&bytes);
        }

        #[test]
        fn parse_never_panics_on_mutations(
            r in any_repr(),
            flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..6),
            cut in any::<prop::sample::Index>(),
        ) {
            let mut buf = emitted(&r);
            for (at, x) in flips {
                let i = at.index(buf.len());
                buf[i] ^= x;
            }
            exercise(&buf);
            let n = cut.index(buf.len() + 1);
            exercise(&buf[..n]);
        }
    }

    /// Every read path over arbitrary bytes: none may panic.
    fn exercise(bytes: &[u8]) {
        let _ = Ipv4Repr::parse(&Packet::new_unchecked(bytes), Checksum::Check);
        let _ = Ipv4Repr::parse(&Packet::new_unchecked(bytes), Checksum::Skip);
        let _ = Ipv4Repr::parse_truncated(bytes, Checksum::Check);
        if let Ok(p) = Packet::new_checked(bytes) {
            let _ = (p.options(), p.payload(), p.header(), p.verify_checksum());
            let _ = (p.frag_offset(), p.dscp(), p.ecn(), p.protocol(), p.source());
            let _ = p.verify_checksum_general(checksum::Kernel::Chains64);
        }
        let _ = check_options(bytes);
        let _ = Ipv4Options::new(bytes);
    }
}
