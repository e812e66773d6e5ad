//! ICMPv4 (RFC 792), with the next-hop MTU of RFC 1191 §4.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |     Type      |     Code      |          Checksum             |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                       Rest of header                          |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                       Data ...
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-
//! ```
//!
//! The rest of the header depends on the type:
//!
//! ```text
//! Echo, Echo Reply (types 8, 0):     | Identifier        | Sequence Number   |
//! Destination Unreachable (type 3):  | unused (zero)     | Next-Hop MTU      |
//!                                      (the MTU only for code 4, RFC 1191 §4)
//! Time Exceeded (type 11):           | unused (zero)                         |
//! Parameter Problem (type 12):       | Pointer | unused (zero)               |
//!                                      (the pointer only for code 0)
//! ```
//!
//! The data of an echo is whatever the sender put there; the data of an error is the
//! start of the datagram the error is about, its "invoking" datagram: its IP header and
//! at least the first 8 bytes of its payload (RFC 792), enough to find its ports.
//!
//! The checksum covers the whole ICMP message, type to end of data (RFC 792). A view's
//! message is its whole buffer: give it the IP payload, which ends at the total length.

use super::ipv4::Ipv4Repr;
use super::{check_len, field, Checksum, Error, Proto, Result};
use crate::checksum;

/// The type field (IANA "ICMP Type Numbers").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Message {
    EchoReply,
    DstUnreachable,
    Redirect,
    EchoRequest,
    RouterAdvert,
    RouterSolicit,
    TimeExceeded,
    ParamProblem,
    Timestamp,
    TimestampReply,
    Other(u8),
}

impl From<u8> for Message {
    fn from(v: u8) -> Self {
        match v {
            0 => Message::EchoReply,
            3 => Message::DstUnreachable,
            5 => Message::Redirect,
            8 => Message::EchoRequest,
            9 => Message::RouterAdvert,
            10 => Message::RouterSolicit,
            11 => Message::TimeExceeded,
            12 => Message::ParamProblem,
            13 => Message::Timestamp,
            14 => Message::TimestampReply,
            v => Message::Other(v),
        }
    }
}

impl From<Message> for u8 {
    fn from(m: Message) -> u8 {
        match m {
            Message::EchoReply => 0,
            Message::DstUnreachable => 3,
            Message::Redirect => 5,
            Message::EchoRequest => 8,
            Message::RouterAdvert => 9,
            Message::RouterSolicit => 10,
            Message::TimeExceeded => 11,
            Message::ParamProblem => 12,
            Message::Timestamp => 13,
            Message::TimestampReply => 14,
            Message::Other(v) => v,
        }
    }
}

/// Codes of Destination Unreachable: 0 to 5 from RFC 792, 6 to 12 from RFC 1122
/// §3.2.2.1, 13 to 15 from RFC 1812 §5.2.7.1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DstUnreachable {
    NetUnreachable = 0,
    HostUnreachable = 1,
    ProtoUnreachable = 2,
    PortUnreachable = 3,
    /// Fragmentation needed and Don't Fragment set; carries the next-hop MTU (RFC 1191).
    FragRequired = 4,
    SourceRouteFailed = 5,
    DstNetUnknown = 6,
    DstHostUnknown = 7,
    SrcHostIsolated = 8,
    NetProhibited = 9,
    HostProhibited = 10,
    NetUnreachableForTos = 11,
    HostUnreachableForTos = 12,
    /// Communication administratively prohibited (RFC 1812).
    AdminProhibited = 13,
    HostPrecedenceViolation = 14,
    PrecedenceCutoff = 15,
}

impl DstUnreachable {
    /// Every code, in order.
    pub const ALL: [DstUnreachable; 16] = [
        DstUnreachable::NetUnreachable,
        DstUnreachable::HostUnreachable,
        DstUnreachable::ProtoUnreachable,
        DstUnreachable::PortUnreachable,
        DstUnreachable::FragRequired,
        DstUnreachable::SourceRouteFailed,
        DstUnreachable::DstNetUnknown,
        DstUnreachable::DstHostUnknown,
        DstUnreachable::SrcHostIsolated,
        DstUnreachable::NetProhibited,
        DstUnreachable::HostProhibited,
        DstUnreachable::NetUnreachableForTos,
        DstUnreachable::HostUnreachableForTos,
        DstUnreachable::AdminProhibited,
        DstUnreachable::HostPrecedenceViolation,
        DstUnreachable::PrecedenceCutoff,
    ];
}

impl TryFrom<u8> for DstUnreachable {
    type Error = Error;

    /// The code, or `BadField` for one no RFC defines.
    fn try_from(code: u8) -> Result<DstUnreachable> {
        DstUnreachable::ALL
            .get(code as usize)
            .copied()
            .ok_or(Error::BadField {
                proto: Proto::Icmpv4,
                field: "destination unreachable code",
                value: code as u32,
            })
    }
}

impl From<DstUnreachable> for u8 {
    fn from(c: DstUnreachable) -> u8 {
        c as u8
    }
}

/// Codes of Time Exceeded (RFC 792).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TimeExceeded {
    /// Time to live exceeded in transit.
    TtlExpired = 0,
    /// Fragment reassembly time exceeded.
    FragReassembly = 1,
}

impl TryFrom<u8> for TimeExceeded {
    type Error = Error;

    /// The code, or `BadField` for one RFC 792 does not define.
    fn try_from(code: u8) -> Result<TimeExceeded> {
        match code {
            0 => Ok(TimeExceeded::TtlExpired),
            1 => Ok(TimeExceeded::FragReassembly),
            _ => Err(Error::BadField {
                proto: Proto::Icmpv4,
                field: "time exceeded code",
                value: code as u32,
            }),
        }
    }
}

impl From<TimeExceeded> for u8 {
    fn from(c: TimeExceeded) -> u8 {
        c as u8
    }
}

/// Codes of Parameter Problem (RFC 792; 1 from RFC 1108, 2 from RFC 1812 §5.2.7.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ParamProblem {
    /// The pointer names the octet of the invoking datagram's header in error.
    Pointer = 0,
    /// A required option is missing.
    MissingOption = 1,
    /// The header or datagram length is wrong.
    BadLength = 2,
}

impl TryFrom<u8> for ParamProblem {
    type Error = Error;

    /// The code, or `BadField` for one no RFC defines.
    fn try_from(code: u8) -> Result<ParamProblem> {
        match code {
            0 => Ok(ParamProblem::Pointer),
            1 => Ok(ParamProblem::MissingOption),
            2 => Ok(ParamProblem::BadLength),
            _ => Err(Error::BadField {
                proto: Proto::Icmpv4,
                field: "parameter problem code",
                value: code as u32,
            }),
        }
    }
}

impl From<ParamProblem> for u8 {
    fn from(c: ParamProblem) -> u8 {
        c as u8
    }
}

/// Byte offsets of the header fields.
mod offset {
    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: usize = 2;
    /// The "rest of header" word.
    pub const REST: usize = 4;
    /// Echo: the first half of the rest of the header.
    pub const ECHO_IDENT: usize = 4;
    /// Echo: the second half.
    pub const ECHO_SEQ_NO: usize = 6;
    /// Fragmentation needed: the low 16 bits of the second word (RFC 1191 §4).
    pub const NEXT_HOP_MTU: usize = 6;
    pub const DATA: usize = 8;
}

/// Length of the ICMP header: type, code, checksum and the rest-of-header word.
pub const HEADER_LEN: usize = offset::DATA;

/// Bytes of the invoking datagram's payload an error quotes after its IP header (RFC 792:
/// "the internet header plus the first 64 bits of the original datagram's data").
pub const QUOTED_PAYLOAD_LEN: usize = 8;

/// A view of an ICMPv4 message. The message is the whole buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// A view without checks; accessors panic if the buffer is shorter than the header.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// A view of a buffer checked to hold the 8-byte header.
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        check_len(Proto::Icmpv4, buffer.as_ref(), HEADER_LEN)?;
        Ok(Packet { buffer })
    }

    /// The buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    pub fn msg_type(&self) -> Message {
        self.buffer.as_ref()[offset::TYPE].into()
    }

    pub fn msg_code(&self) -> u8 {
        self.buffer.as_ref()[offset::CODE]
    }

    pub fn checksum(&self) -> u16 {
        field::u16_at(self.buffer.as_ref(), offset::CHECKSUM)
    }

    /// The four bytes after the checksum, whatever the type makes of them.
    pub fn rest_of_header(&self) -> u32 {
        field::u32_at(self.buffer.as_ref(), offset::REST)
    }

    /// Echo identifier (meaningful for echo request and reply).
    pub fn echo_ident(&self) -> u16 {
        field::u16_at(self.buffer.as_ref(), offset::ECHO_IDENT)
    }

    /// Echo sequence number (meaningful for echo request and reply).
    pub fn echo_seq_no(&self) -> u16 {
        field::u16_at(self.buffer.as_ref(), offset::ECHO_SEQ_NO)
    }

    /// Next-hop MTU (meaningful for Destination Unreachable, code 4; RFC 1191 §4).
    pub fn next_hop_mtu(&self) -> u16 {
        field::u16_at(self.buffer.as_ref(), offset::NEXT_HOP_MTU)
    }

    /// The bytes after the header: echo data, or an error's invoking datagram.
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[offset::DATA..]
    }

    /// Whether the checksum, over the whole message, verifies.
    pub fn verify_checksum(&self) -> bool {
        checksum::verifies(checksum::sum(self.buffer.as_ref()))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_msg_type(&mut self, m: Message) {
        self.buffer.as_mut()[offset::TYPE] = m.into();
    }

    pub fn set_msg_code(&mut self, code: u8) {
        self.buffer.as_mut()[offset::CODE] = code;
    }

    pub fn set_checksum(&mut self, checksum: u16) {
        field::set_u16(self.buffer.as_mut(), offset::CHECKSUM, checksum);
    }

    pub fn set_rest_of_header(&mut self, rest: u32) {
        field::set_u32(self.buffer.as_mut(), offset::REST, rest);
    }

    pub fn set_echo_ident(&mut self, ident: u16) {
        field::set_u16(self.buffer.as_mut(), offset::ECHO_IDENT, ident);
    }

    pub fn set_echo_seq_no(&mut self, seq_no: u16) {
        field::set_u16(self.buffer.as_mut(), offset::ECHO_SEQ_NO, seq_no);
    }

    pub fn set_next_hop_mtu(&mut self, mtu: u16) {
        field::set_u16(self.buffer.as_mut(), offset::NEXT_HOP_MTU, mtu);
    }

    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[offset::DATA..]
    }

    /// Computes and writes the checksum over the whole message (RFC 792).
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = checksum::finish(checksum::sum(self.buffer.as_ref()));
        self.set_checksum(c);
    }
}

/// A parsed ICMPv4 message of a type this stack handles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Icmpv4Repr<'a> {
    EchoRequest {
        ident: u16,
        seq_no: u16,
        data: &'a [u8],
    },
    EchoReply {
        ident: u16,
        seq_no: u16,
        data: &'a [u8],
    },
    DstUnreachable {
        reason: DstUnreachable,
        /// The next-hop MTU for [`DstUnreachable::FragRequired`] (RFC 1191 §4; zero
        /// from a router older than RFC 1191); zero for every other code.
        next_hop_mtu: u16,
        /// The start of the datagram the error is about: its IP header and (RFC 792) at
        /// least 8 bytes of its payload.
        invoking: &'a [u8],
    },
    TimeExceeded {
        reason: TimeExceeded,
        invoking: &'a [u8],
    },
    ParamProblem {
        reason: ParamProblem,
        /// The octet of the invoking datagram the error points at (code 0; the high
        /// byte of the rest of the header, RFC 792).
        pointer: u8,
        invoking: &'a [u8],
    },
}

/// The part of `original`, an IPv4 datagram, that an error about it quotes: its IP header
/// and the first 8 bytes of its payload, or all of the payload if shorter (RFC 792).
///
/// Errors: `original` does not start with a valid IPv4 header (errors name
/// [`Proto::Ipv4`]; the header checksum is not checked).
pub fn quote(original: &[u8]) -> Result<&[u8]> {
    let (header, payload) = Ipv4Repr::parse_truncated(original, Checksum::Skip)?;
    let len = header.header_len() + payload.len().min(QUOTED_PAYLOAD_LEN);
    Ok(original.get(..len).unwrap_or(original))
}

/// Checks that an error's invoking datagram starts with an IPv4 header this stack can
/// read (its checksum is not checked: a router or NAT on the way may have changed it).
fn check_invoking(invoking: &[u8]) -> Result<()> {
    Ipv4Repr::parse_truncated(invoking, Checksum::Skip).map(|_| ())
}

impl<'a> Icmpv4Repr<'a> {
    /// Parses a message: the length, the checksum if `checksum` is [`Checksum::Check`],
    /// the type and code, and for an error the IPv4 header of the invoking datagram.
    ///
    /// Errors: a buffer under 8 bytes (`Truncated`); a bad checksum (`BadChecksum`); a
    /// type other than echo request/reply, destination unreachable, time exceeded and
    /// parameter problem (`Unsupported`, field "type"); a code the type does not define
    /// (`BadField`); an
    /// invoking datagram whose IPv4 header does not parse (the IPv4 error, naming
    /// [`Proto::Ipv4`]).
    ///
    /// The unused bytes of an error's rest-of-header are ignored (RFC 1122 §3.2.2 has
    /// senders zero them), so the next-hop MTU is read only for code 4 and a parameter
    /// problem's pointer only for code 0.
    pub fn parse<T>(packet: &Packet<&'a T>, checksum: Checksum) -> Result<Icmpv4Repr<'a>>
    where
        T: AsRef<[u8]> + ?Sized,
    {
        let buf: &'a [u8] = packet.buffer.as_ref();
        check_len(Proto::Icmpv4, buf, HEADER_LEN)?;
        if checksum == Checksum::Check && !packet.verify_checksum() {
            return Err(Error::BadChecksum {
                proto: Proto::Icmpv4,
            });
        }
        let data = buf.get(offset::DATA..).unwrap_or(&[]);
        let code = packet.msg_code();
        let echo_code = || {
            if code == 0 {
                Ok(())
            } else {
                Err(Error::BadField {
                    proto: Proto::Icmpv4,
                    field: "echo code",
                    value: code as u32,
                })
            }
        };
        match packet.msg_type() {
            Message::EchoRequest => {
                echo_code()?;
                Ok(Icmpv4Repr::EchoRequest {
                    ident: packet.echo_ident(),
                    seq_no: packet.echo_seq_no(),
                    data,
                })
            }
            Message::EchoReply => {
                echo_code()?;
                Ok(Icmpv4Repr::EchoReply {
                    ident: packet.echo_ident(),
                    seq_no: packet.echo_seq_no(),
                    data,
                })
            }
            Message::DstUnreachable => {
                let reason = DstUnreachable::try_from(code)?;
                check_invoking(data)?;
                let next_hop_mtu = match reason {
                    DstUnreachable::FragRequired => packet.next_hop_mtu(),
                    _ => 0,
                };
                Ok(Icmpv4Repr::DstUnreachable {
                    reason,
                    next_hop_mtu,
                    invoking: data,
                })
            }
            Message::TimeExceeded => {
                let reason = TimeExceeded::try_from(code)?;
                check_invoking(data)?;
                Ok(Icmpv4Repr::TimeExceeded {
                    reason,
                    invoking: data,
                })
            }
            Message::ParamProblem => {
                let reason = ParamProblem::try_from(code)?;
                check_invoking(data)?;
                // Only code 0 has a pointer; the other codes leave the word unused.
                let pointer = match reason {
                    ParamProblem::Pointer => (packet.rest_of_header() >> 24) as u8,
                    _ => 0,
                };
                Ok(Icmpv4Repr::ParamProblem {
                    reason,
                    pointer,
                    invoking: data,
                })
            }
            other => Err(Error::Unsupported {
                proto: Proto::Icmpv4,
                field: "type",
                value: u8::from(other) as u32,
            }),
        }
    }

    /// A Destination Unreachable about `original`, an IPv4 datagram as it was received,
    /// quoting its header and the first 8 bytes of its payload ([`quote`]).
    ///
    /// Errors: `original` has no valid IPv4 header (see [`quote`]); a nonzero
    /// `next_hop_mtu` with a code other than [`DstUnreachable::FragRequired`] (`BadField`).
    pub fn dst_unreachable(
        reason: DstUnreachable,
        next_hop_mtu: u16,
        original: &'a [u8],
    ) -> Result<Icmpv4Repr<'a>> {
        check_next_hop_mtu(reason, next_hop_mtu)?;
        Ok(Icmpv4Repr::DstUnreachable {
            reason,
            next_hop_mtu,
            invoking: quote(original)?,
        })
    }

    /// A Time Exceeded about `original`, an IPv4 datagram as it was received, quoting its
    /// header and the first 8 bytes of its payload ([`quote`]).
    pub fn time_exceeded(reason: TimeExceeded, original: &'a [u8]) -> Result<Icmpv4Repr<'a>> {
        Ok(Icmpv4Repr::TimeExceeded {
            reason,
            invoking: quote(original)?,
        })
    }

    /// A Parameter Problem about `original`, pointing at its octet `pointer` (code 0),
    /// quoting its header and the first 8 bytes of its payload ([`quote`]).
    pub fn param_problem(
        reason: ParamProblem,
        pointer: u8,
        original: &'a [u8],
    ) -> Result<Icmpv4Repr<'a>> {
        Ok(Icmpv4Repr::ParamProblem {
            reason,
            pointer,
            invoking: quote(original)?,
        })
    }

    /// Whether the message is an error (RFC 1122 §3.2.2: no error is ever sent about
    /// one).
    pub const fn is_error(&self) -> bool {
        matches!(
            self,
            Icmpv4Repr::DstUnreachable { .. }
                | Icmpv4Repr::TimeExceeded { .. }
                | Icmpv4Repr::ParamProblem { .. }
        )
    }

    /// The invoking datagram an error carries, or `None` for an echo.
    pub const fn invoking(&self) -> Option<&'a [u8]> {
        match *self {
            Icmpv4Repr::DstUnreachable { invoking, .. }
            | Icmpv4Repr::TimeExceeded { invoking, .. }
            | Icmpv4Repr::ParamProblem { invoking, .. } => Some(invoking),
            Icmpv4Repr::EchoRequest { .. } | Icmpv4Repr::EchoReply { .. } => None,
        }
    }

    /// The IPv4 header of the invoking datagram, parsed without its checksum, and the
    /// bytes of its payload the error carries (the start of the transport header, where
    /// the ports are). `None` for an echo, or for an error whose invoking datagram does
    /// not parse (which [`Icmpv4Repr::parse`] and the constructors never produce).
    ///
    /// The header's `payload_len` is what the original datagram's total length claims,
    /// not what is quoted.
    pub fn invoking_header(&self) -> Option<(Ipv4Repr, &'a [u8])> {
        Ipv4Repr::parse_truncated(self.invoking()?, Checksum::Skip).ok()
    }

    /// Bytes the message takes: the header and the data.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
            + match *self {
                Icmpv4Repr::EchoRequest { data, .. } | Icmpv4Repr::EchoReply { data, .. } => {
                    data.len()
                }
                Icmpv4Repr::DstUnreachable { invoking, .. }
                | Icmpv4Repr::TimeExceeded { invoking, .. }
                | Icmpv4Repr::ParamProblem { invoking, .. } => invoking.len(),
            }
    }

    /// Writes the message into the front of the packet, and with [`Checksum::Check`] its
    /// checksum, computed over the message's [`Icmpv4Repr::buffer_len`] bytes (size the
    /// buffer to match, as the checksum of a view covers the whole buffer); with
    /// [`Checksum::Skip`] the field is zero.
    ///
    /// Errors: a buffer shorter than the message (`Truncated`); a nonzero next-hop MTU
    /// with a code other than 4, or a nonzero parameter problem pointer with a code
    /// other than 0 (`BadField`); an invoking datagram that does not start with a valid
    /// IPv4 header (the IPv4 error). Everything emit accepts, parse returns.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet: &mut Packet<T>,
        checksum: Checksum,
    ) -> Result<()> {
        let len = self.buffer_len();
        check_len(Proto::Icmpv4, packet.buffer.as_ref(), len)?;
        let (msg_type, code, rest, data): (Message, u8, u32, &[u8]) = match *self {
            Icmpv4Repr::EchoRequest {
                ident,
                seq_no,
                data,
            } => (Message::EchoRequest, 0, echo_word(ident, seq_no), data),
            Icmpv4Repr::EchoReply {
                ident,
                seq_no,
                data,
            } => (Message::EchoReply, 0, echo_word(ident, seq_no), data),
            Icmpv4Repr::DstUnreachable {
                reason,
                next_hop_mtu,
                invoking,
            } => {
                check_next_hop_mtu(reason, next_hop_mtu)?;
                check_invoking(invoking)?;
                // RFC 1191 §4: the high 16 bits stay unused (zero).
                (
                    Message::DstUnreachable,
                    reason.into(),
                    next_hop_mtu as u32,
                    invoking,
                )
            }
            Icmpv4Repr::TimeExceeded { reason, invoking } => {
                check_invoking(invoking)?;
                (Message::TimeExceeded, reason.into(), 0, invoking)
            }
            Icmpv4Repr::ParamProblem {
                reason,
                pointer,
                invoking,
            } => {
                if reason != ParamProblem::Pointer && pointer != 0 {
                    return Err(Error::BadField {
                        proto: Proto::Icmpv4,
                        field: "parameter problem pointer",
                        value: u32::from(pointer),
                    });
                }
                check_invoking(invoking)?;
                let rest = u32::from(pointer) << 24;
                (Message::ParamProblem, reason.into(), rest, invoking)
            }
        };
        packet.set_msg_type(msg_type);
        packet.set_msg_code(code);
        packet.set_checksum(0);
        packet.set_rest_of_header(rest);
        let buf = packet.buffer.as_mut();
        buf[offset::DATA..len].copy_from_slice(data);
        if checksum == Checksum::Check {
            let c = checksum::finish(checksum::sum(&buf[..len]));
            packet.set_checksum(c);
        }
        Ok(())
    }
}

/// The rest-of-header word of an echo.
const fn echo_word(ident: u16, seq_no: u16) -> u32 {
    ((ident as u32) << 16) | seq_no as u32
}

/// Only code 4 carries a next-hop MTU (RFC 1191 §4); other codes leave the word zero.
fn check_next_hop_mtu(reason: DstUnreachable, next_hop_mtu: u16) -> Result<()> {
    if reason != DstUnreachable::FragRequired && next_hop_mtu != 0 {
        return Err(Error::BadField {
            proto: Proto::Icmpv4,
            field: "next-hop MTU (only for fragmentation needed)",
            value: next_hop_mtu as u32,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ipv4::{self, IpProtocol, Ipv4Options};
    use crate::wire::Ipv4Address;
    use proptest::prelude::*;

    /// Echo request, identifier 0x1234, sequence 1, data "abcd". The checksum by hand:
    /// 0x0800 + 0x1234 + 0x0001 + 0x6162 + 0x6364 = 0xDEFB, complemented 0x2104.
    const ECHO: [u8; 12] = [
        0x08, 0x00, 0x21, 0x04, 0x12, 0x34, 0x00, 0x01, b'a', b'b', b'c', b'd',
    ];

    /// The classic IPv4 header (UDP, 192.168.0.1 → 192.168.0.199, total length 115)
    /// followed by a UDP header from port 5353 to port 53.
    fn original_datagram() -> Vec<u8> {
        let mut d = vec![0u8; 115];
        d[..20].copy_from_slice(&[
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ]);
        d[20..28].copy_from_slice(&[0x14, 0xe9, 0x00, 0x35, 0x00, 0x5f, 0x12, 0x34]);
        d
    }

    #[test]
    fn parses_a_known_echo_request() {
        let p = Packet::new_checked(&ECHO[..]).unwrap();
        assert_eq!(p.msg_type(), Message::EchoRequest);
        assert_eq!(p.msg_code(), 0);
        assert_eq!(p.checksum(), 0x2104);
        assert_eq!(p.rest_of_header(), 0x1234_0001);
        assert!(p.verify_checksum());
        assert_eq!(
            Icmpv4Repr::parse(&p, Checksum::Check).unwrap(),
            Icmpv4Repr::EchoRequest {
                ident: 0x1234,
                seq_no: 1,
                data: b"abcd",
            }
        );
    }

    #[test]
    fn emits_the_known_echo_request() {
        let r = Icmpv4Repr::EchoRequest {
            ident: 0x1234,
            seq_no: 1,
            data: b"abcd",
        };
        assert_eq!(r.buffer_len(), 12);
        let mut buf = [0xFFu8; 12];
        r.emit(&mut Packet::new_unchecked(&mut buf[..]), Checksum::Check)
            .unwrap();
        assert_eq!(buf, ECHO);
        // Without data: 0x0800 + 1 + 1 = 0x0802, complemented 0xF7FD.
        let r = Icmpv4Repr::EchoRequest {
            ident: 1,
            seq_no: 1,
            data: &[],
        };
        let mut buf = [0u8; 8];
        r.emit(&mut Packet::new_unchecked(&mut buf[..]), Checksum::Check)
            .unwrap();
        assert_eq!(buf, [8, 0, 0xF7, 0xFD, 0, 1, 0, 1]);
        r.emit(&mut Packet::new_unchecked(&mut buf[..]), Checksum::Skip)
            .unwrap();
        assert_eq!(buf[2..4], [0, 0]);
    }

    #[test]
    fn builds_frag_needed_from_an_original_datagram() {
        let d = original_datagram();
        let r = Icmpv4Repr::dst_unreachable(DstUnreachable::FragRequired, 1400, &d).unwrap();
        assert_eq!(r.invoking(), Some(&d[..28]));
        assert_eq!(r.buffer_len(), 36);
        assert!(r.is_error());
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut Packet::new_unchecked(&mut buf[..]), Checksum::Check)
            .unwrap();
        assert_eq!(buf[..2], [3, 4]);
        assert_eq!(buf[4..8], [0, 0, 0x05, 0x78]); // RFC 1191 §4: MTU in bytes 6..8
        assert_eq!(buf[8..], d[..28]);
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert!(p.verify_checksum());
        assert_eq!(p.next_hop_mtu(), 1400);
        let back = Icmpv4Repr::parse(&p, Checksum::Check).unwrap();
        assert_eq!(back, r);

        // A transport finds its socket from the quoted header and ports.
        let (ip, transport) = back.invoking_header().unwrap();
        assert_eq!(ip.src, Ipv4Address::new(192, 168, 0, 1));
        assert_eq!(ip.dst, Ipv4Address::new(192, 168, 0, 199));
        assert_eq!(ip.protocol, IpProtocol::Udp);
        assert_eq!(ip.payload_len, 95);
        assert_eq!(transport, &[0x14, 0xe9, 0x00, 0x35, 0x00, 0x5f, 0x12, 0x34]);
    }

    #[test]
    fn builds_time_exceeded_from_a_short_datagram() {
        // A datagram with 3 bytes of payload: the quote is all of it.
        let mut d = original_datagram();
        d.truncate(23);
        d[2..4].copy_from_slice(&23u16.to_be_bytes());
        let r = Icmpv4Repr::time_exceeded(TimeExceeded::TtlExpired, &d).unwrap();
        assert_eq!(r.invoking(), Some(&d[..]));
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut Packet::new_unchecked(&mut buf[..]), Checksum::Check)
            .unwrap();
        assert_eq!(buf[..2], [11, 0]);
        assert_eq!(buf[4..8], [0; 4]);
        let back = Icmpv4Repr::parse(&Packet::new_checked(&buf[..]).unwrap(), Checksum::Check);
        assert_eq!(back, Ok(r));
        assert_eq!(r.invoking_header().unwrap().1, &d[20..23]);
    }

    #[test]
    fn error_constructors_refuse_bad_input() {
        let d = original_datagram();
        assert_eq!(
            Icmpv4Repr::dst_unreachable(DstUnreachable::PortUnreachable, 1400, &d),
            Err(Error::BadField {
                proto: Proto::Icmpv4,
                field: "next-hop MTU (only for fragmentation needed)",
                value: 1400
            })
        );
        assert_eq!(
            Icmpv4Repr::time_exceeded(TimeExceeded::FragReassembly, &d[..10]),
            Err(Error::Truncated {
                proto: Proto::Ipv4,
                needed: 20,
                available: 10
            })
        );
        let mut v6 = d.clone();
        v6[0] = 0x65;
        assert!(matches!(
            quote(&v6),
            Err(Error::BadField {
                proto: Proto::Ipv4,
                field: "version",
                ..
            })
        ));
    }

    #[test]
    fn short_buffer_is_truncated() {
        for n in 0..HEADER_LEN {
            let want = Error::Truncated {
                proto: Proto::Icmpv4,
                needed: 8,
                available: n,
            };
            assert_eq!(Packet::new_checked(&ECHO[..n]), Err(want));
            assert_eq!(
                Icmpv4Repr::parse(&Packet::new_unchecked(&ECHO[..n]), Checksum::Skip),
                Err(want)
            );
        }
        let r = Icmpv4Repr::EchoReply {
            ident: 0,
            seq_no: 0,
            data: b"abcd",
        };
        let mut small = [0u8; 11];
        assert_eq!(
            r.emit(&mut Packet::new_unchecked(&mut small[..]), Checksum::Check),
            Err(Error::Truncated {
                proto: Proto::Icmpv4,
                needed: 12,
                available: 11
            })
        );
    }

    #[test]
    fn bad_checksum_is_refused_unless_skipped() {
        for at in 0..ECHO.len() {
            let mut b = ECHO;
            b[at] ^= 0x10;
            let p = Packet::new_checked(&b[..]).unwrap();
            assert!(!p.verify_checksum(), "flip at {at}");
            assert_eq!(
                Icmpv4Repr::parse(&p, Checksum::Check),
                Err(Error::BadChecksum {
                    proto: Proto::Icmpv4
                })
            );
        }
        let mut b = ECHO;
        b[9] = 0;
        assert!(Icmpv4Repr::parse(&Packet::new_checked(&b[..]).unwrap(), Checksum::Skip).is_ok());
    }

    /// `bytes` with the checksum filled, parsed.
    fn parse_fixed(mut bytes: Vec<u8>) -> Result<()> {
        Packet::new_unchecked(&mut bytes[..]).fill_checksum();
        Icmpv4Repr::parse(&Packet::new_checked(&bytes[..])?, Checksum::Check).map(|_| ())
    }

    #[test]
    fn unknown_types_are_unsupported_and_unknown_codes_bad() {
        for t in [4u8, 5, 9, 10, 13, 14, 42, 255] {
            assert_eq!(
                parse_fixed(vec![t, 0, 0, 0, 0, 0, 0, 0]),
                Err(Error::Unsupported {
                    proto: Proto::Icmpv4,
                    field: "type",
                    value: t as u32
                })
            );
        }
        let mut err = vec![3, 16, 0, 0, 0, 0, 0, 0];
        err.extend_from_slice(&original_datagram()[..28]);
        assert_eq!(
            parse_fixed(err.clone()),
            Err(Error::BadField {
                proto: Proto::Icmpv4,
                field: "destination unreachable code",
                value: 16
            })
        );
        err[0] = 11;
        err[1] = 2;
        assert_eq!(
            parse_fixed(err),
            Err(Error::BadField {
                proto: Proto::Icmpv4,
                field: "time exceeded code",
                value: 2
            })
        );
        assert_eq!(
            parse_fixed(vec![0, 1, 0, 0, 0, 0, 0, 0]),
            Err(Error::BadField {
                proto: Proto::Icmpv4,
                field: "echo code",
                value: 1
            })
        );
    }

    #[test]
    fn error_with_a_bad_invoking_header_is_refused() {
        // No invoking datagram at all.
        assert_eq!(
            parse_fixed(vec![3, 3, 0, 0, 0, 0, 0, 0]),
            Err(Error::Truncated {
                proto: Proto::Ipv4,
                needed: 20,
                available: 0
            })
        );
        // An IHL past the quote.
        let mut err = vec![11, 0, 0, 0, 0, 0, 0, 0];
        let mut inner = original_datagram()[..28].to_vec();
        inner[0] = 0x48;
        err.extend_from_slice(&inner);
        assert_eq!(
            parse_fixed(err),
            Err(Error::Truncated {
                proto: Proto::Ipv4,
                needed: 32,
                available: 28
            })
        );
    }

    #[test]
    fn every_code_converts_both_ways() {
        for code in 0..=255u8 {
            match DstUnreachable::try_from(code) {
                Ok(c) => assert_eq!(u8::from(c), code),
                Err(_) => assert!(code > 15),
            }
            match TimeExceeded::try_from(code) {
                Ok(c) => assert_eq!(u8::from(c), code),
                Err(_) => assert!(code > 1),
            }
            assert_eq!(u8::from(Message::from(code)), code);
        }
        assert_eq!(
            DstUnreachable::try_from(4),
            Ok(DstUnreachable::FragRequired)
        );
        assert_eq!(
            DstUnreachable::try_from(13),
            Ok(DstUnreachable::AdminProhibited)
        );
    }

    #[test]
    fn next_hop_mtu_is_ignored_for_other_codes() {
        // A router may leave junk in the unused word; a receiver ignores it.
        let mut m = vec![3, 1, 0, 0, 0xAB, 0xCD, 0x05, 0xDC];
        m.extend_from_slice(&original_datagram()[..28]);
        Packet::new_unchecked(&mut m[..]).fill_checksum();
        let r = Icmpv4Repr::parse(&Packet::new_checked(&m[..]).unwrap(), Checksum::Check);
        assert!(matches!(
            r,
            Ok(Icmpv4Repr::DstUnreachable {
                reason: DstUnreachable::HostUnreachable,
                next_hop_mtu: 0,
                ..
            })
        ));
    }

    /// A parameter problem's pointer is the high byte of the rest of the header, read
    /// for code 0 only; code 3 is no code.
    #[test]
    fn a_parameter_problems_pointer_is_read_for_code_0_only() {
        for (code, want) in [(0u8, 9u8), (2, 0)] {
            let mut m = vec![12, code, 0, 0, 9, 0xCD, 0xEF, 0x01];
            m.extend_from_slice(&original_datagram()[..28]);
            Packet::new_unchecked(&mut m[..]).fill_checksum();
            let r = Icmpv4Repr::parse(&Packet::new_checked(&m[..]).unwrap(), Checksum::Check);
            let Ok(Icmpv4Repr::ParamProblem { pointer, .. }) = r else {
                panic!("{r:?}")
            };
            assert_eq!(pointer, want, "code {code}");
        }
        let mut m = vec![12, 3, 0, 0, 0, 0, 0, 0];
        m.extend_from_slice(&original_datagram()[..28]);
        assert!(matches!(
            parse_fixed(m),
            Err(Error::BadField {
                field: "parameter problem code",
                ..
            })
        ));
        let bad = Icmpv4Repr::ParamProblem {
            reason: ParamProblem::BadLength,
            pointer: 4,
            invoking: &original_datagram()[..28],
        };
        let mut buf = vec![0u8; bad.buffer_len()];
        assert!(bad
            .emit(&mut Packet::new_unchecked(&mut buf[..]), Checksum::Check)
            .is_err());
    }

    #[test]
    fn view_setters_write_each_field() {
        let mut b = [0u8; 10];
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.set_msg_type(Message::EchoReply);
        p.set_msg_code(0);
        p.set_echo_ident(0xABCD);
        p.set_echo_seq_no(0x0102);
        p.data_mut().copy_from_slice(&[7, 7]);
        p.fill_checksum();
        assert!(p.verify_checksum());
        assert_eq!((p.echo_ident(), p.echo_seq_no()), (0xABCD, 0x0102));
        p.set_next_hop_mtu(576);
        assert_eq!(p.next_hop_mtu(), 576);
        assert_eq!(p.rest_of_header(), 0xABCD_0240);
        p.set_rest_of_header(0);
        assert_eq!(p.data(), &[7, 7]);
        assert_eq!(p.into_inner()[0], 0);
    }

    // ---- Property tests ----

    prop_compose! {
        /// An IPv4 datagram (header, possibly with options, and payload) to quote.
        fn any_original()(
            src in any::<[u8; 4]>(),
            dst in any::<[u8; 4]>(),
            protocol in any::<u8>(),
            ttl in any::<u8>(),
            ident in any::<u16>(),
            nops in 0usize..=40,
            payload in proptest::collection::vec(any::<u8>(), 0..40),
        ) -> Vec<u8> {
            let repr = Ipv4Repr {
                src: Ipv4Address(src),
                dst: Ipv4Address(dst),
                protocol: protocol.into(),
                ttl,
                dscp: 0,
                ecn: 0,
                ident,
                dont_frag: true,
                more_frags: false,
                frag_offset: 0,
                payload_len: payload.len(),
                options: Ipv4Options::new(&vec![1u8; nops / 4 * 4]).unwrap(),
            };
            let mut buf = vec![0u8; repr.buffer_len()];
            let mut p = ipv4::Packet::new_unchecked(&mut buf[..]);
            repr.emit(&mut p, Checksum::Check).unwrap();
            p.payload_mut().copy_from_slice(&payload);
            buf
        }
    }

    fn any_dst_unreachable() -> impl Strategy<Value = (DstUnreachable, u16)> {
        (0usize..16, any::<u16>()).prop_map(|(i, mtu)| {
            let reason = DstUnreachable::ALL[i];
            let mtu = if reason == DstUnreachable::FragRequired {
                mtu
            } else {
                0
            };
            (reason, mtu)
        })
    }

    /// An owned description of a message, turned into an `Icmpv4Repr` borrowing from it.
    #[derive(Clone, Debug)]
    enum Spec {
        Echo(bool, u16, u16, Vec<u8>),
        Unreachable(DstUnreachable, u16, Vec<u8>),
        Exceeded(bool, Vec<u8>),
        Param(u8, u8, Vec<u8>),
    }

    impl Spec {
        fn repr(&self) -> Icmpv4Repr<'_> {
            match self {
                Spec::Echo(true, ident, seq_no, data) => Icmpv4Repr::EchoRequest {
                    ident: *ident,
                    seq_no: *seq_no,
                    data,
                },
                Spec::Echo(false, ident, seq_no, data) => Icmpv4Repr::EchoReply {
                    ident: *ident,
                    seq_no: *seq_no,
                    data,
                },
                Spec::Unreachable(reason, mtu, original) => {
                    Icmpv4Repr::dst_unreachable(*reason, *mtu, original).unwrap()
                }
                Spec::Exceeded(ttl, original) => {
                    let reason = if *ttl {
                        TimeExceeded::TtlExpired
                    } else {
                        TimeExceeded::FragReassembly
                    };
                    Icmpv4Repr::time_exceeded(reason, original).unwrap()
                }
                Spec::Param(code, pointer, original) => {
                    let reason = ParamProblem::try_from(*code % 3).unwrap();
                    let pointer = if reason == ParamProblem::Pointer {
                        *pointer
                    } else {
                        0
                    };
                    Icmpv4Repr::param_problem(reason, pointer, original).unwrap()
                }
            }
        }
    }

    fn any_spec() -> impl Strategy<Value = Spec> {
        prop_oneof![
            (
                any::<bool>(),
                any::<u16>(),
                any::<u16>(),
                proptest::collection::vec(any::<u8>(), 0..100)
            )
                .prop_map(|(req, i, s, d)| Spec::Echo(req, i, s, d)),
            (any_dst_unreachable(), any_original())
                .prop_map(|((r, m), o)| Spec::Unreachable(r, m, o)),
            (any::<bool>(), any_original()).prop_map(|(t, o)| Spec::Exceeded(t, o)),
            (any::<u8>(), any::<u8>(), any_original()).prop_map(|(c, p, o)| Spec::Param(c, p, o)),
        ]
    }

    fn emitted(r: &Icmpv4Repr) -> Vec<u8> {
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut Packet::new_unchecked(&mut buf[..]), Checksum::Check)
            .unwrap();
        buf
    }

    /// Every read path over arbitrary bytes: none may panic.
    fn exercise(bytes: &[u8]) {
        for c in [Checksum::Check, Checksum::Skip] {
            if let Ok(r) = Icmpv4Repr::parse(&Packet::new_unchecked(bytes), c) {
                let _ = (r.invoking_header(), r.buffer_len(), r.is_error());
            }
        }
        if let Ok(p) = Packet::new_checked(bytes) {
            let _ = (p.msg_type(), p.msg_code(), p.rest_of_header(), p.data());
            let _ = (p.next_hop_mtu(), p.verify_checksum());
        }
        let _ = quote(bytes);
    }

    proptest! {
        #[test]
        fn emit_then_parse_round_trips(spec in any_spec()) {
            let r = spec.repr();
            let buf = emitted(&r);
            let p = Packet::new_checked(&buf[..]).unwrap();
            prop_assert!(p.verify_checksum());
            prop_assert_eq!(Icmpv4Repr::parse(&p, Checksum::Check).unwrap(), r);
        }

        #[test]
        fn quote_is_header_and_eight_bytes(original in any_original()) {
            let q = quote(&original).unwrap();
            let header_len = ipv4::Packet::new_unchecked(&original[..]).header_len();
            let payload = original.len() - header_len;
            prop_assert_eq!(q, &original[..header_len + payload.min(8)]);
            let r = Icmpv4Repr::time_exceeded(TimeExceeded::TtlExpired, &original).unwrap();
            let (ip, transport) = r.invoking_header().unwrap();
            let whole = Ipv4Repr::parse(&ipv4::Packet::new_checked(&original[..]).unwrap(), Checksum::Check).unwrap();
            prop_assert_eq!(ip, whole);
            prop_assert_eq!(transport, &original[header_len..header_len + payload.min(8)]);
        }

        #[test]
        fn etherparse_agrees(spec in any_spec()) {
            use etherparse::icmpv4::{DestUnreachableHeader, TimeExceededCode};
            use etherparse::Icmpv4Type;
            let r = spec.repr();
            let buf = emitted(&r);
            let s = etherparse::Icmpv4Slice::from_slice(&buf).unwrap();
            let ty = s.icmp_type();
            // etherparse computes the same checksum from the fields and data.
            prop_assert_eq!(ty.calc_checksum(s.payload()), s.checksum());
            prop_assert_eq!(s.checksum(), Packet::new_checked(&buf[..]).unwrap().checksum());
            match r {
                Icmpv4Repr::EchoRequest { ident, seq_no, data } => {
                    let Icmpv4Type::EchoRequest(h) = ty else { panic!("{ty:?}") };
                    prop_assert_eq!((h.id, h.seq), (ident, seq_no));
                    prop_assert_eq!(s.payload(), data);
                }
                Icmpv4Repr::EchoReply { ident, seq_no, data } => {
                    let Icmpv4Type::EchoReply(h) = ty else { panic!("{ty:?}") };
                    prop_assert_eq!((h.id, h.seq), (ident, seq_no));
                    prop_assert_eq!(s.payload(), data);
                }
                Icmpv4Repr::DstUnreachable { reason, next_hop_mtu, invoking } => {
                    let Icmpv4Type::DestinationUnreachable(h) = ty else { panic!("{ty:?}") };
                    prop_assert_eq!(h.code_u8(), u8::from(reason));
                    if let DestUnreachableHeader::FragmentationNeeded { next_hop_mtu: m } = h {
                        prop_assert_eq!(m, next_hop_mtu);
                    }
                    prop_assert_eq!(s.payload(), invoking);
                }
                Icmpv4Repr::TimeExceeded { reason, invoking } => {
                    let Icmpv4Type::TimeExceeded(c) = ty else { panic!("{ty:?}") };
                    prop_assert_eq!(c, TimeExceededCode::from_u8(reason.into()).unwrap());
                    prop_assert_eq!(s.payload(), invoking);
                }
                Icmpv4Repr::ParamProblem { reason, pointer, invoking } => {
                    use etherparse::icmpv4::ParameterProblemHeader as P;
                    let Icmpv4Type::ParameterProblem(h) = ty else { panic!("{ty:?}") };
                    let want = match reason {
                        ParamProblem::Pointer => P::PointerIndicatesError(pointer),
                        ParamProblem::MissingOption => P::MissingRequiredOption,
                        ParamProblem::BadLength => P::BadLength,
                    };
                    prop_assert_eq!(h, want);
                    prop_assert_eq!(s.payload(), invoking);
                }
            }
        }

        #[test]
        fn etherparse_reads_icmp_inside_ipv4(spec in any_spec(), ident in any::<u16>()) {
            let r = spec.repr();
            let ip = Ipv4Repr {
                src: Ipv4Address::new(10, 0, 0, 1),
                dst: Ipv4Address::new(10, 0, 0, 2),
                protocol: IpProtocol::Icmp,
                ttl: 64,
                dscp: 0,
                ecn: 0,
                ident,
                dont_frag: false,
                more_frags: false,
                frag_offset: 0,
                payload_len: r.buffer_len(),
                options: Ipv4Options::NONE,
            };
            let mut buf = vec![0u8; ip.buffer_len()];
            let mut p = ipv4::Packet::new_unchecked(&mut buf[..]);
            ip.emit(&mut p, Checksum::Check).unwrap();
            r.emit(&mut Packet::new_unchecked(p.payload_mut()), Checksum::Check).unwrap();
            let sliced = etherparse::SlicedPacket::from_ip(&buf).unwrap();
            let Some(etherparse::TransportSlice::Icmpv4(s)) = sliced.transport else {
                panic!("no ICMP: {:?}", sliced.transport)
            };
            prop_assert_eq!(s.icmp_type().calc_checksum(s.payload()), s.checksum());
            prop_assert_eq!(s.slice().len(), r.buffer_len());
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..100)) {
            exercise(&bytes);
        }

        #[test]
        fn parse_never_panics_on_mutations(
            spec in any_spec(),
            flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..6),
            cut in any::<prop::sample::Index>(),
        ) {
            let mut buf = emitted(&spec.repr());
            for (at, x) in flips {
                let i = at.index(buf.len());
                buf[i] ^= x;
            }
            // Refill the checksum half the time so mutations reach past the check.
            if cut.index(2) == 0 {
                Packet::new_unchecked(&mut buf[..]).fill_checksum();
            }
            exercise(&buf);
            let n = cut.index(buf.len() + 1);
            exercise(&buf[..n]);
        }
    }
}
