//! ARP (RFC 826), as this stack uses it: IPv4 addresses over Ethernet.
//!
//! ```text
//!  0        2        4    5    6        8
//! +--------+--------+----+----+--------+
//! | htype  | ptype  |hlen|plen|  oper  |
//! +--------+--------+----+----+--------+---------------+
//! | sender hardware address (hlen = 6)  | sender proto  |  8 .. 18
//! +-------------------------------------+ address (4)   |
//! | target hardware address (hlen = 6)  | target proto  | 18 .. 28
//! +-------------------------------------+ address (4)   |
//! ```
//!
//! RFC 826 sizes the four addresses by `hlen` and `plen`; the view follows those lengths,
//! and [`ArpRepr`] takes only hardware type 1 (Ethernet, 6-byte addresses) with protocol
//! type 0x0800 (IPv4, 4-byte addresses), a 28-byte packet. An Ethernet frame pads it to
//! 46 bytes; the padding is not the packet's.

use super::ethernet::{EtherType, EthernetAddress};
use super::{check_len, field, Error, Ipv4Address, Proto, Result};

/// The hardware type field (IANA "Hardware Types").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Hardware {
    Ethernet,
    Other(u16),
}

impl From<u16> for Hardware {
    fn from(v: u16) -> Self {
        match v {
            1 => Hardware::Ethernet,
            v => Hardware::Other(v),
        }
    }
}

impl From<Hardware> for u16 {
    fn from(h: Hardware) -> u16 {
        match h {
            Hardware::Ethernet => 1,
            Hardware::Other(v) => v,
        }
    }
}

/// The operation field (RFC 826: 1 request, 2 reply; IANA lists more, for RARP and
/// others).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operation {
    Request,
    Reply,
    Other(u16),
}

impl From<u16> for Operation {
    fn from(v: u16) -> Self {
        match v {
            1 => Operation::Request,
            2 => Operation::Reply,
            v => Operation::Other(v),
        }
    }
}

impl From<Operation> for u16 {
    fn from(o: Operation) -> u16 {
        match o {
            Operation::Request => 1,
            Operation::Reply => 2,
            Operation::Other(v) => v,
        }
    }
}

/// Byte offsets of the fixed fields; the addresses follow at offsets that depend on the
/// address lengths.
mod offset {
    pub const HARDWARE_TYPE: usize = 0;
    pub const PROTOCOL_TYPE: usize = 2;
    pub const HARDWARE_LEN: usize = 4;
    pub const PROTOCOL_LEN: usize = 5;
    pub const OPERATION: usize = 6;
    pub const SENDER_HARDWARE_ADDR: usize = 8;
}

/// Length of the fixed part, before the addresses.
pub const FIXED_LEN: usize = offset::SENDER_HARDWARE_ADDR;
/// Length of an ARP packet for IPv4 over Ethernet.
pub const PACKET_LEN: usize = FIXED_LEN + 2 * (ETHERNET_ADDR_LEN + IPV4_ADDR_LEN);

const ETHERNET_ADDR_LEN: usize = 6;
const IPV4_ADDR_LEN: usize = 4;

/// A view of an ARP packet, with addresses of the lengths its header gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// A view without checks; accessors panic if the buffer is shorter than the fixed
    /// part or, for the addresses, than the address lengths say.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// A view of a buffer checked to hold the fixed part and the four addresses its
    /// length fields call for (`Truncated` if not).
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let packet = Packet { buffer };
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks that the buffer holds the fixed part and the four addresses.
    pub fn check_len(&self) -> Result<()> {
        let buf = self.buffer.as_ref();
        check_len(Proto::Arp, buf, FIXED_LEN)?;
        check_len(Proto::Arp, buf, self.packet_len())
    }

    /// The buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    pub fn hardware_type(&self) -> Hardware {
        field::u16_at(self.buffer.as_ref(), offset::HARDWARE_TYPE).into()
    }

    pub fn protocol_type(&self) -> EtherType {
        field::u16_at(self.buffer.as_ref(), offset::PROTOCOL_TYPE).into()
    }

    /// Length of a hardware address, in bytes.
    pub fn hardware_len(&self) -> u8 {
        self.buffer.as_ref()[offset::HARDWARE_LEN]
    }

    /// Length of a protocol address, in bytes.
    pub fn protocol_len(&self) -> u8 {
        self.buffer.as_ref()[offset::PROTOCOL_LEN]
    }

    pub fn operation(&self) -> Operation {
        field::u16_at(self.buffer.as_ref(), offset::OPERATION).into()
    }

    /// Bytes the packet takes, by its length fields: the fixed part and four addresses.
    pub fn packet_len(&self) -> usize {
        FIXED_LEN + 2 * (self.hardware_len() as usize + self.protocol_len() as usize)
    }

    fn sender_protocol_at(&self) -> usize {
        offset::SENDER_HARDWARE_ADDR + self.hardware_len() as usize
    }

    fn target_hardware_at(&self) -> usize {
        self.sender_protocol_at() + self.protocol_len() as usize
    }

    fn target_protocol_at(&self) -> usize {
        self.target_hardware_at() + self.hardware_len() as usize
    }

    pub fn sender_hardware_addr(&self) -> &[u8] {
        &self.buffer.as_ref()[offset::SENDER_HARDWARE_ADDR..self.sender_protocol_at()]
    }

    pub fn sender_protocol_addr(&self) -> &[u8] {
        &self.buffer.as_ref()[self.sender_protocol_at()..self.target_hardware_at()]
    }

    pub fn target_hardware_addr(&self) -> &[u8] {
        &self.buffer.as_ref()[self.target_hardware_at()..self.target_protocol_at()]
    }

    pub fn target_protocol_addr(&self) -> &[u8] {
        &self.buffer.as_ref()[self.target_protocol_at()..self.packet_len()]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_hardware_type(&mut self, h: Hardware) {
        field::set_u16(self.buffer.as_mut(), offset::HARDWARE_TYPE, h.into());
    }

    pub fn set_protocol_type(&mut self, t: EtherType) {
        field::set_u16(self.buffer.as_mut(), offset::PROTOCOL_TYPE, t.into());
    }

    pub fn set_hardware_len(&mut self, len: u8) {
        self.buffer.as_mut()[offset::HARDWARE_LEN] = len;
    }

    pub fn set_protocol_len(&mut self, len: u8) {
        self.buffer.as_mut()[offset::PROTOCOL_LEN] = len;
    }

    pub fn set_operation(&mut self, op: Operation) {
        field::set_u16(self.buffer.as_mut(), offset::OPERATION, op.into());
    }

    /// Writes the sender hardware address; `addr` must be `hardware_len` bytes.
    pub fn set_sender_hardware_addr(&mut self, addr: &[u8]) {
        let (start, end) = (offset::SENDER_HARDWARE_ADDR, self.sender_protocol_at());
        self.buffer.as_mut()[start..end].copy_from_slice(addr);
    }

    /// Writes the sender protocol address; `addr` must be `protocol_len` bytes.
    pub fn set_sender_protocol_addr(&mut self, addr: &[u8]) {
        let (start, end) = (self.sender_protocol_at(), self.target_hardware_at());
        self.buffer.as_mut()[start..end].copy_from_slice(addr);
    }

    /// Writes the target hardware address; `addr` must be `hardware_len` bytes.
    pub fn set_target_hardware_addr(&mut self, addr: &[u8]) {
        let (start, end) = (self.target_hardware_at(), self.target_protocol_at());
        self.buffer.as_mut()[start..end].copy_from_slice(addr);
    }

    /// Writes the target protocol address; `addr` must be `protocol_len` bytes.
    pub fn set_target_protocol_addr(&mut self, addr: &[u8]) {
        let (start, end) = (self.target_protocol_at(), self.packet_len());
        self.buffer.as_mut()[start..end].copy_from_slice(addr);
    }
}

/// The operation of an ARP packet this stack handles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArpOperation {
    Request,
    Reply,
}

impl From<ArpOperation> for Operation {
    fn from(op: ArpOperation) -> Operation {
        match op {
            ArpOperation::Request => Operation::Request,
            ArpOperation::Reply => Operation::Reply,
        }
    }
}

/// A parsed ARP packet for IPv4 over Ethernet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ArpRepr {
    pub operation: ArpOperation,
    pub sender_hardware_addr: EthernetAddress,
    pub sender_protocol_addr: Ipv4Address,
    pub target_hardware_addr: EthernetAddress,
    pub target_protocol_addr: Ipv4Address,
}

impl ArpRepr {
    /// Parses an ARP packet for IPv4 over Ethernet.
    ///
    /// Errors, in order: a buffer shorter than the packet (`Truncated`); a hardware type
    /// other than Ethernet, a protocol type other than IPv4, or address lengths other
    /// than 6 and 4 (`Unsupported`: RFC 826 allows them, this stack does not speak
    /// them); operation 0, which IANA reserves (`BadField`); any operation but request and
    /// reply, such as RARP's (RFC 903) or InARP's (RFC 2390) (`Unsupported`).
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<ArpRepr> {
        packet.check_len()?;
        let unsupported = |field, value: u32| {
            Err(Error::Unsupported {
                proto: Proto::Arp,
                field,
                value,
            })
        };
        if let Hardware::Other(v) = packet.hardware_type() {
            return unsupported("hardware type", v as u32);
        }
        if packet.protocol_type() != EtherType::Ipv4 {
            return unsupported("protocol type", u16::from(packet.protocol_type()) as u32);
        }
        if packet.hardware_len() as usize != ETHERNET_ADDR_LEN {
            return unsupported("hardware address length", packet.hardware_len() as u32);
        }
        if packet.protocol_len() as usize != IPV4_ADDR_LEN {
            return unsupported("protocol address length", packet.protocol_len() as u32);
        }
        let operation = match packet.operation() {
            Operation::Request => ArpOperation::Request,
            Operation::Reply => ArpOperation::Reply,
            Operation::Other(0) => {
                return Err(Error::BadField {
                    proto: Proto::Arp,
                    field: "operation",
                    value: 0,
                })
            }
            Operation::Other(v) => return unsupported("operation", v as u32),
        };
        Ok(ArpRepr {
            operation,
            sender_hardware_addr: EthernetAddress::from_bytes(packet.sender_hardware_addr()),
            sender_protocol_addr: Ipv4Address::from_bytes(packet.sender_protocol_addr()),
            target_hardware_addr: EthernetAddress::from_bytes(packet.target_hardware_addr()),
            target_protocol_addr: Ipv4Address::from_bytes(packet.target_protocol_addr()),
        })
    }

    /// Bytes the packet takes (28).
    pub const fn buffer_len(&self) -> usize {
        PACKET_LEN
    }

    /// Writes the packet into the front of the buffer (`Truncated` if it is shorter than
    /// 28 bytes).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) -> Result<()> {
        check_len(Proto::Arp, packet.buffer.as_ref(), PACKET_LEN)?;
        packet.set_hardware_type(Hardware::Ethernet);
        packet.set_protocol_type(EtherType::Ipv4);
        packet.set_hardware_len(ETHERNET_ADDR_LEN as u8);
        packet.set_protocol_len(IPV4_ADDR_LEN as u8);
        packet.set_operation(self.operation.into());
        packet.set_sender_hardware_addr(&self.sender_hardware_addr.0);
        packet.set_sender_protocol_addr(&self.sender_protocol_addr.0);
        packet.set_target_hardware_addr(&self.target_hardware_addr.0);
        packet.set_target_protocol_addr(&self.target_protocol_addr.0);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ethernet::{EthernetRepr, Frame};
    use proptest::prelude::*;

    /// "Who has 10.0.0.2? Tell 10.0.0.1", from 02:00:00:00:00:01.
    const REQUEST: [u8; 28] = [
        0x00, 0x01, // Ethernet
        0x08, 0x00, // IPv4
        0x06, 0x04, // address lengths
        0x00, 0x01, // request
        0x02, 0x00, 0x00, 0x00, 0x00, 0x01, // sender MAC
        0x0a, 0x00, 0x00, 0x01, // sender IP
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // target MAC (unknown)
        0x0a, 0x00, 0x00, 0x02, // target IP
    ];

    fn request_repr() -> ArpRepr {
        ArpRepr {
            operation: ArpOperation::Request,
            sender_hardware_addr: EthernetAddress([2, 0, 0, 0, 0, 1]),
            sender_protocol_addr: Ipv4Address::new(10, 0, 0, 1),
            target_hardware_addr: EthernetAddress([0; 6]),
            target_protocol_addr: Ipv4Address::new(10, 0, 0, 2),
        }
    }

    #[test]
    fn parses_a_known_request() {
        let p = Packet::new_checked(&REQUEST[..]).unwrap();
        assert_eq!(p.hardware_type(), Hardware::Ethernet);
        assert_eq!(p.protocol_type(), EtherType::Ipv4);
        assert_eq!((p.hardware_len(), p.protocol_len()), (6, 4));
        assert_eq!(p.operation(), Operation::Request);
        assert_eq!(p.packet_len(), 28);
        assert_eq!(p.target_protocol_addr(), &[10, 0, 0, 2]);
        assert_eq!(ArpRepr::parse(&p).unwrap(), request_repr());
    }

    #[test]
    fn emits_the_known_request() {
        let mut buf = [0xFFu8; 28];
        request_repr()
            .emit(&mut Packet::new_unchecked(&mut buf[..]))
            .unwrap();
        assert_eq!(buf, REQUEST);
        assert_eq!(request_repr().buffer_len(), 28);
    }

    #[test]
    fn padding_after_the_packet_is_ignored() {
        let mut b = REQUEST.to_vec();
        b.resize(46, 0);
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(ArpRepr::parse(&p).unwrap(), request_repr());
    }

    #[test]
    fn short_buffer_is_truncated() {
        for n in 0..28 {
            let want = Error::Truncated {
                proto: Proto::Arp,
                needed: if n < 8 { 8 } else { 28 },
                available: n,
            };
            assert_eq!(Packet::new_checked(&REQUEST[..n]), Err(want));
            assert_eq!(
                ArpRepr::parse(&Packet::new_unchecked(&REQUEST[..n])),
                Err(want)
            );
        }
        let mut small = [0u8; 27];
        assert_eq!(
            request_repr().emit(&mut Packet::new_unchecked(&mut small[..])),
            Err(Error::Truncated {
                proto: Proto::Arp,
                needed: 28,
                available: 27
            })
        );
    }

    #[test]
    fn view_follows_the_length_fields() {
        // An ARP packet for some other pair: 8-byte hardware, 16-byte protocol addresses.
        let mut b = [0u8; 8 + 2 * (8 + 16)];
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.set_hardware_type(Hardware::Other(27));
        p.set_protocol_type(EtherType::Ipv6);
        p.set_hardware_len(8);
        p.set_protocol_len(16);
        p.set_operation(Operation::Reply);
        p.set_sender_hardware_addr(&[1; 8]);
        p.set_sender_protocol_addr(&[2; 16]);
        p.set_target_hardware_addr(&[3; 8]);
        p.set_target_protocol_addr(&[4; 16]);
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.packet_len(), 56);
        assert_eq!(p.sender_hardware_addr(), &[1; 8]);
        assert_eq!(p.sender_protocol_addr(), &[2; 16]);
        assert_eq!(p.target_hardware_addr(), &[3; 8]);
        assert_eq!(p.target_protocol_addr(), &[4; 16]);
        assert_eq!(
            ArpRepr::parse(&p),
            Err(Error::Unsupported {
                proto: Proto::Arp,
                field: "hardware type",
                value: 27
            })
        );
        assert_eq!(
            Packet::new_checked(&b[..55]).unwrap_err(),
            Error::Truncated {
                proto: Proto::Arp,
                needed: 56,
                available: 55
            }
        );
    }

    fn parse_modified(at: usize, bytes: &[u8]) -> Result<ArpRepr> {
        let mut b = REQUEST.to_vec();
        b.resize(64, 0);
        b[at..at + bytes.len()].copy_from_slice(bytes);
        ArpRepr::parse(&Packet::new_checked(&b[..])?)
    }

    #[test]
    fn other_types_and_lengths_are_unsupported() {
        let unsupported = |field, value| {
            Err(Error::Unsupported {
                proto: Proto::Arp,
                field,
                value,
            })
        };
        assert_eq!(parse_modified(0, &[0, 6]), unsupported("hardware type", 6));
        assert_eq!(
            parse_modified(2, &[0x86, 0xDD]),
            unsupported("protocol type", 0x86DD)
        );
        assert_eq!(
            parse_modified(4, &[8]),
            unsupported("hardware address length", 8)
        );
        assert_eq!(
            parse_modified(5, &[16]),
            unsupported("protocol address length", 16)
        );
        assert_eq!(parse_modified(6, &[0, 3]), unsupported("operation", 3));
        assert_eq!(parse_modified(6, &[0, 9]), unsupported("operation", 9));
        assert_eq!(
            parse_modified(6, &[0, 0]),
            Err(Error::BadField {
                proto: Proto::Arp,
                field: "operation",
                value: 0
            })
        );
        assert_eq!(
            parse_modified(6, &[0, 2]).map(|r| r.operation),
            Ok(ArpOperation::Reply)
        );
    }

    #[test]
    fn codes_convert_both_ways() {
        for v in [0u16, 1, 2, 3, 0xFFFF] {
            assert_eq!(u16::from(Hardware::from(v)), v);
            assert_eq!(u16::from(Operation::from(v)), v);
        }
    }

    prop_compose! {
        fn any_repr()(
            reply in any::<bool>(),
            sha in any::<[u8; 6]>(),
            spa in any::<[u8; 4]>(),
            tha in any::<[u8; 6]>(),
            tpa in any::<[u8; 4]>(),
        ) -> ArpRepr {
            ArpRepr {
                operation: if reply { ArpOperation::Reply } else { ArpOperation::Request },
                sender_hardware_addr: EthernetAddress(sha),
                sender_protocol_addr: Ipv4Address(spa),
                target_hardware_addr: EthernetAddress(tha),
                target_protocol_addr: Ipv4Address(tpa),
            }
        }
    }

    /// Every read path over arbitrary bytes: none may panic.
    fn exercise(bytes: &[u8]) {
        let _ = ArpRepr::parse(&Packet::new_unchecked(bytes));
        if let Ok(p) = Packet::new_checked(bytes) {
            let _ = (p.sender_hardware_addr(), p.sender_protocol_addr());
            let _ = (p.target_hardware_addr(), p.target_protocol_addr());
            let _ = (p.hardware_type(), p.protocol_type(), p.operation());
        }
    }

    proptest! {
        #[test]
        fn emit_then_parse_round_trips(r in any_repr(), pad in 0usize..30) {
            let mut buf = vec![0u8; PACKET_LEN + pad];
            r.emit(&mut Packet::new_unchecked(&mut buf[..])).unwrap();
            let p = Packet::new_checked(&buf[..]).unwrap();
            prop_assert_eq!(ArpRepr::parse(&p).unwrap(), r);
        }

        #[test]
        fn etherparse_agrees(r in any_repr()) {
            // A whole frame: Ethernet header, ARP, padding to the 60-byte minimum.
            let eth = EthernetRepr {
                source: r.sender_hardware_addr,
                destination: EthernetAddress::BROADCAST,
                ethertype: EtherType::Arp,
            };
            let mut frame = vec![0u8; 60];
            let mut f = Frame::new_unchecked(&mut frame[..]);
            eth.emit(&mut f).unwrap();
            r.emit(&mut Packet::new_unchecked(f.payload_mut())).unwrap();

            let sliced = etherparse::SlicedPacket::from_ethernet(&frame).unwrap();
            let Some(etherparse::NetSlice::Arp(a)) = sliced.net else {
                panic!("not ARP: {:?}", sliced.net)
            };
            prop_assert_eq!(a.hw_addr_type(), etherparse::ArpHardwareId::ETHERNET);
            prop_assert_eq!(a.proto_addr_type(), etherparse::EtherType::IPV4);
            prop_assert_eq!((a.hw_addr_size(), a.proto_addr_size()), (6, 4));
            let op = match r.operation {
                ArpOperation::Request => etherparse::ArpOperation::REQUEST,
                ArpOperation::Reply => etherparse::ArpOperation::REPLY,
            };
            prop_assert_eq!(a.operation(), op);
            prop_assert_eq!(a.sender_hw_addr(), &r.sender_hardware_addr.0[..]);
            prop_assert_eq!(a.sender_protocol_addr(), &r.sender_protocol_addr.0[..]);
            prop_assert_eq!(a.target_hw_addr(), &r.target_hardware_addr.0[..]);
            prop_assert_eq!(a.target_protocol_addr(), &r.target_protocol_addr.0[..]);
        }

        #[test]
        fn parses_what_etherparse_writes(r in any_repr()) {
            let op = match r.operation {
                ArpOperation::Request => etherparse::ArpOperation::REQUEST,
                ArpOperation::Reply => etherparse::ArpOperation::REPLY,
            };
            let a = etherparse::ArpPacket::new(
                etherparse::ArpHardwareId::ETHERNET,
                etherparse::EtherType::IPV4,
                op,
                &r.sender_hardware_addr.0,
                &r.sender_protocol_addr.0,
                &r.target_hardware_addr.0,
                &r.target_protocol_addr.0,
            ).unwrap();
            let bytes = a.to_bytes();
            prop_assert_eq!(bytes.len(), PACKET_LEN);
            prop_assert_eq!(ArpRepr::parse(&Packet::new_checked(&bytes[..]).unwrap()).unwrap(), r);
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            exercise(&bytes);
        }

        #[test]
        fn parse_never_panics_on_mutations(
            r in any_repr(),
            flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..6),
            cut in any::<prop::sample::Index>(),
        ) {
            let mut buf = vec![0u8; PACKET_LEN];
            r.emit(&mut Packet::new_unchecked(&mut buf[..])).unwrap();
            for (at, x) in flips {
                let i = at.index(buf.len());
                buf[i] ^= x;
            }
            exercise(&buf);
            let n = cut.index(buf.len() + 1);
            exercise(&buf[..n]);
        }
    }
}
