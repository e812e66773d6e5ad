//! Ethernet II (IEEE 802.3 with a type field; RFC 894 for IPv4 over it).
//!
//! ```text
//!  0                   6                  12      14
//! +-------------------+-------------------+-------+----------------
//! | destination       | source            | type  | payload ...
//! +-------------------+-------------------+-------+----------------
//! ```
//!
//! The frame check sequence is the driver's business (the NIC appends and strips it), so a
//! frame here ends with its payload.

use std::fmt;

use super::{check_len, field, Error, Proto, Result};

/// A 48-bit MAC address.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EthernetAddress(pub [u8; 6]);

impl EthernetAddress {
    pub const BROADCAST: EthernetAddress = EthernetAddress([0xFF; 6]);

    /// The address in the first six bytes of `b`, which the caller checked are there.
    pub fn from_bytes(b: &[u8]) -> EthernetAddress {
        let mut a = [0; 6];
        a.copy_from_slice(&b[..6]);
        EthernetAddress(a)
    }

    pub const fn is_broadcast(&self) -> bool {
        matches!(self.0, [0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF])
    }

    /// The group bit: the least significant bit of the first octet.
    pub const fn is_multicast(&self) -> bool {
        self.0[0] & 1 == 1
    }

    /// A unicast address: neither broadcast nor multicast.
    pub const fn is_unicast(&self) -> bool {
        !self.is_multicast()
    }

    /// The locally administered bit (second least significant bit of the first octet).
    pub const fn is_local(&self) -> bool {
        self.0[0] & 2 == 2
    }
}

impl fmt::Display for EthernetAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

/// The EtherType field. Values below 0x0600 are 802.3 lengths, not types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EtherType {
    Ipv4,
    Arp,
    Ipv6,
    Other(u16),
}

impl From<u16> for EtherType {
    fn from(v: u16) -> Self {
        match v {
            0x0800 => EtherType::Ipv4,
            0x0806 => EtherType::Arp,
            0x86DD => EtherType::Ipv6,
            v => EtherType::Other(v),
        }
    }
}

impl From<EtherType> for u16 {
    fn from(t: EtherType) -> u16 {
        match t {
            EtherType::Ipv4 => 0x0800,
            EtherType::Arp => 0x0806,
            EtherType::Ipv6 => 0x86DD,
            EtherType::Other(v) => v,
        }
    }
}

/// Byte offsets of the header fields.
mod offset {
    pub const DESTINATION: usize = 0;
    pub const SOURCE: usize = 6;
    pub const ETHERTYPE: usize = 12;
    pub const PAYLOAD: usize = 14;
}

/// Length of the Ethernet II header.
pub const HEADER_LEN: usize = offset::PAYLOAD;

/// A view of an Ethernet II frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Frame<T> {
    /// A view without checks; accessors panic if the buffer is shorter than the header.
    pub const fn new_unchecked(buffer: T) -> Frame<T> {
        Frame { buffer }
    }

    /// A view of a buffer checked to hold the whole header.
    pub fn new_checked(buffer: T) -> Result<Frame<T>> {
        check_len(Proto::Ethernet, buffer.as_ref(), HEADER_LEN)?;
        Ok(Frame { buffer })
    }

    /// The buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    pub fn destination(&self) -> EthernetAddress {
        EthernetAddress::from_bytes(&self.buffer.as_ref()[offset::DESTINATION..])
    }

    pub fn source(&self) -> EthernetAddress {
        EthernetAddress::from_bytes(&self.buffer.as_ref()[offset::SOURCE..])
    }

    pub fn ethertype(&self) -> EtherType {
        field::u16_at(self.buffer.as_ref(), offset::ETHERTYPE).into()
    }

    /// The bytes after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[offset::PAYLOAD..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Frame<T> {
    pub fn set_destination(&mut self, a: EthernetAddress) {
        self.buffer.as_mut()[offset::DESTINATION..offset::SOURCE].copy_from_slice(&a.0);
    }

    pub fn set_source(&mut self, a: EthernetAddress) {
        self.buffer.as_mut()[offset::SOURCE..offset::ETHERTYPE].copy_from_slice(&a.0);
    }

    pub fn set_ethertype(&mut self, t: EtherType) {
        field::set_u16(self.buffer.as_mut(), offset::ETHERTYPE, t.into());
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[offset::PAYLOAD..]
    }
}

/// A parsed Ethernet II header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EthernetRepr {
    pub source: EthernetAddress,
    pub destination: EthernetAddress,
    pub ethertype: EtherType,
}

impl EthernetRepr {
    /// Parses the header. A type field below 0x0600 is an IEEE 802.3 length, which this
    /// stack does not carry.
    pub fn parse<T: AsRef<[u8]>>(frame: &Frame<T>) -> Result<EthernetRepr> {
        check_len(Proto::Ethernet, frame.buffer.as_ref(), HEADER_LEN)?;
        let raw = field::u16_at(frame.buffer.as_ref(), offset::ETHERTYPE);
        if raw < 0x0600 {
            return Err(Error::Unsupported {
                proto: Proto::Ethernet,
                field: "ethertype (an 802.3 length)",
                value: raw as u32,
            });
        }
        Ok(EthernetRepr {
            source: frame.source(),
            destination: frame.destination(),
            ethertype: raw.into(),
        })
    }

    /// Bytes the header takes.
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header into the front of the frame.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, frame: &mut Frame<T>) -> Result<()> {
        check_len(Proto::Ethernet, frame.buffer.as_ref(), HEADER_LEN)?;
        frame.set_destination(self.destination);
        frame.set_source(self.source);
        frame.set_ethertype(self.ethertype);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const FRAME: [u8; 18] = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // destination
        0x02, 0x00, 0x00, 0x00, 0x00, 0x01, // source
        0x08, 0x06, // ARP
        0xde, 0xad, 0xbe, 0xef,
    ];

    #[test]
    fn parses_a_frame() {
        let f = Frame::new_checked(&FRAME[..]).unwrap();
        let r = EthernetRepr::parse(&f).unwrap();
        assert!(r.destination.is_broadcast());
        assert_eq!(r.source, EthernetAddress([2, 0, 0, 0, 0, 1]));
        assert!(r.source.is_local() && r.source.is_unicast());
        assert_eq!(r.ethertype, EtherType::Arp);
        assert_eq!(f.payload(), &[0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(r.source.to_string(), "02:00:00:00:00:01");
    }

    #[test]
    fn short_buffer_is_truncated() {
        for n in 0..HEADER_LEN {
            assert_eq!(
                Frame::new_checked(&FRAME[..n]),
                Err(Error::Truncated {
                    proto: Proto::Ethernet,
                    needed: 14,
                    available: n
                })
            );
        }
    }

    #[test]
    fn length_field_is_unsupported() {
        let mut b = FRAME;
        b[12..14].copy_from_slice(&0x05DCu16.to_be_bytes());
        let e = EthernetRepr::parse(&Frame::new_checked(&b[..]).unwrap()).unwrap_err();
        assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    }

    fn any_repr() -> impl Strategy<Value = EthernetRepr> {
        (any::<[u8; 6]>(), any::<[u8; 6]>(), 0x0600u16..).prop_map(|(s, d, t)| EthernetRepr {
            source: EthernetAddress(s),
            destination: EthernetAddress(d),
            ethertype: t.into(),
        })
    }

    proptest! {
        #[test]
        fn emit_then_parse_round_trips(repr in any_repr(), payload in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut buf = vec![0u8; HEADER_LEN + payload.len()];
            let mut f = Frame::new_unchecked(&mut buf[..]);
            repr.emit(&mut f).unwrap();
            f.payload_mut().copy_from_slice(&payload);
            let f = Frame::new_checked(&buf[..]).unwrap();
            prop_assert_eq!(EthernetRepr::parse(&f).unwrap(), repr);
            // The independent parser agrees.
            let (eth, rest) = etherparse::Ethernet2Header::from_slice(&buf).unwrap();
            prop_assert_eq!(eth.source, repr.source.0);
            prop_assert_eq!(eth.destination, repr.destination.0);
            prop_assert_eq!(eth.ether_type.0, u16::from(repr.ethertype));
            prop_assert_eq!(rest, &payload[..]);
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            if let Ok(f) = Frame::new_checked(&bytes[..]) {
                let _ = EthernetRepr::parse(&f);
            }
        }
    }
}
