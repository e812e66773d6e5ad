//! UDP, the User Datagram Protocol (RFC 768).
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-------------------------------+-------------------------------+
//! |          source port          |       destination port        |
//! +-------------------------------+-------------------------------+
//! |            length             |           checksum            |
//! +-------------------------------+-------------------------------+
//! |                          data ...
//! +---------------------------------------------------------------
//! ```
//!
//! The length field counts the header and the data, so it is at least 8. The IP datagram
//! may carry bytes after it (link-layer padding): the datagram ends where the length field
//! says, and [`Packet::payload`] stops there.
//!
//! The checksum covers an IPv4 pseudo-header (source, destination, zero, protocol 17, UDP
//! length), the header and the data. It is optional over IPv4: a zero field means the
//! sender computed none, so a computed checksum of zero goes out as `0xFFFF` (RFC 768,
//! "Fields"). Sending zero on purpose is the checksum elision of paper 000 (Kay & Pasquale
//! 1993, "UDP Implementation"): [`Checksum::Skip`] on emit does exactly that.
//!
//! Besides [`UdpRepr::emit`], which copies a payload in, [`UdpRepr::emit_header`] writes only
//! the header so that the socket layer can copy the payload itself, summing it on the way
//! ([`crate::checksum::copy_and_sum`]), and then finish with
//! [`Packet::fill_checksum_with_payload_sum`].

use super::{check_len, field, Checksum, Error, Ipv4Address, Proto, Result};
use crate::checksum::{self, Accumulator};

/// The IP protocol number of UDP.
pub const PROTOCOL: u8 = 17;

/// Length of the UDP header.
pub const HEADER_LEN: usize = offset::PAYLOAD;

/// The most data one UDP datagram can carry: the length field is 16 bits and counts the
/// header too.
pub const MAX_PAYLOAD_LEN: usize = u16::MAX as usize - HEADER_LEN;

/// Byte offsets of the header fields.
mod offset {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const LENGTH: usize = 4;
    pub const CHECKSUM: usize = 6;
    pub const PAYLOAD: usize = 8;
}

/// The sum of the IPv4 pseudo-header for a UDP datagram of `length` bytes (RFC 768).
fn pseudo_header_sum(src: Ipv4Address, dst: Ipv4Address, length: u16) -> u16 {
    checksum::pseudo_header_v4(src.octets(), dst.octets(), PROTOCOL, length)
}

/// A view of a UDP datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// A view without checks; accessors panic if the buffer is shorter than the header,
    /// and [`payload`](Self::payload) panics if the length field is below 8 or past the end
    /// of the buffer.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// A view of a buffer checked to hold the header and as many bytes as the length field
    /// claims, so that no accessor panics.
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let packet = Packet { buffer };
        packet.check_len()?;
        Ok(packet)
    }

    /// The checks of [`new_checked`](Self::new_checked): the buffer holds the 8-byte header;
    /// the length field is at least 8 ([`Error::BadField`]) and no more than the buffer
    /// holds ([`Error::Truncated`]).
    pub fn check_len(&self) -> Result<()> {
        let bytes = self.buffer.as_ref();
        check_len(Proto::Udp, bytes, HEADER_LEN)?;
        let length = usize::from(field::u16_at(bytes, offset::LENGTH));
        if length < HEADER_LEN {
            return Err(Error::BadField {
                proto: Proto::Udp,
                field: "length",
                value: length as u32,
            });
        }
        check_len(Proto::Udp, bytes, length)
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

    /// The length field: header plus data, in bytes.
    pub fn len(&self) -> u16 {
        field::u16_at(self.buffer.as_ref(), offset::LENGTH)
    }

    /// Whether the datagram carries no data (its length field is exactly 8).
    pub fn is_empty(&self) -> bool {
        usize::from(self.len()) <= HEADER_LEN
    }

    /// The checksum field as sent; zero means "no checksum".
    pub fn checksum(&self) -> u16 {
        field::u16_at(self.buffer.as_ref(), offset::CHECKSUM)
    }

    /// The data: the bytes after the header, up to the length the length field gives.
    pub fn payload(&self) -> &[u8] {
        let length = usize::from(self.len());
        &self.buffer.as_ref()[offset::PAYLOAD..length]
    }

    /// Header and data as the length field bounds them, or `None` if the length field is
    /// impossible for this buffer (only an unchecked view can have that).
    fn datagram(&self) -> Option<&[u8]> {
        let bytes = self.buffer.as_ref();
        let length = usize::from(field::u16_at(bytes.get(..HEADER_LEN)?, offset::LENGTH));
        if length < HEADER_LEN {
            return None;
        }
        bytes.get(..length)
    }

    /// Whether the checksum verifies for a datagram from `src` to `dst`. A zero checksum
    /// field means the sender computed none, and verifies (RFC 768). Never panics: a view
    /// whose length field is impossible does not verify.
    pub fn verify_checksum(&self, src: Ipv4Address, dst: Ipv4Address) -> bool {
        let Some(datagram) = self.datagram() else {
            return false;
        };
        if self.checksum() == 0 {
            return true;
        }
        let mut sum = Accumulator::with_seed(pseudo_header_sum(src, dst, self.len()));
        sum.add(datagram);
        checksum::verifies(sum.sum())
    }

    /// [`verify_checksum`](Self::verify_checksum) for a receiver that summed the data
    /// itself, while copying it out (paper 002 §7): `payload_sum` is the ones'-complement
    /// sum of exactly [`payload`](Self::payload). Only the header is read here.
    pub fn verify_checksum_with_payload_sum(
        &self,
        src: Ipv4Address,
        dst: Ipv4Address,
        payload_sum: u16,
    ) -> bool {
        let Some(datagram) = self.datagram() else {
            return false;
        };
        if self.checksum() == 0 {
            return true;
        }
        let mut sum = Accumulator::with_seed(pseudo_header_sum(src, dst, self.len()));
        sum.add(&datagram[..HEADER_LEN]);
        sum.add_sum(payload_sum, datagram.len() - HEADER_LEN);
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

    /// Sets the length field (header plus data).
    pub fn set_len(&mut self, length: u16) {
        field::set_u16(self.buffer.as_mut(), offset::LENGTH, length);
    }

    pub fn set_checksum(&mut self, checksum: u16) {
        field::set_u16(self.buffer.as_mut(), offset::CHECKSUM, checksum);
    }

    /// The data, bounded by the length field, for writing.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let length = usize::from(self.len());
        &mut self.buffer.as_mut()[offset::PAYLOAD..length]
    }

    /// Computes the checksum over the pseudo-header, header and data and writes it; a
    /// computed zero is written as `0xFFFF`, since zero means "no checksum" (RFC 768).
    ///
    /// # Panics
    ///
    /// If the length field is below 8 or past the end of the buffer, which a view made by
    /// `new_checked` or written by [`UdpRepr::emit_header`] never has.
    pub fn fill_checksum(&mut self, src: Ipv4Address, dst: Ipv4Address) {
        self.set_checksum(0);
        let length = self.len();
        let mut sum = Accumulator::with_seed(pseudo_header_sum(src, dst, length));
        sum.add(&self.buffer.as_ref()[..usize::from(length)]);
        self.set_checksum(checksum::udp_field(sum.checksum()));
    }

    /// [`fill_checksum`](Self::fill_checksum) for a sender that summed the data itself
    /// while copying it in: `payload_sum` is the ones'-complement sum of exactly
    /// [`payload`](Self::payload). Only the header is read here.
    ///
    /// # Panics
    ///
    /// As [`fill_checksum`](Self::fill_checksum).
    pub fn fill_checksum_with_payload_sum(
        &mut self,
        src: Ipv4Address,
        dst: Ipv4Address,
        payload_sum: u16,
    ) {
        self.set_checksum(0);
        let length = self.len();
        let payload_len = usize::from(length)
            .checked_sub(HEADER_LEN)
            .expect("UDP length field below the header length");
        let mut sum = Accumulator::with_seed(pseudo_header_sum(src, dst, length));
        sum.add(&self.buffer.as_ref()[..HEADER_LEN]);
        sum.add_sum(payload_sum, payload_len);
        self.set_checksum(checksum::udp_field(sum.checksum()));
    }
}

/// A parsed UDP header. The data stays in the view ([`Packet::payload`]); emitting takes
/// it as an argument.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct UdpRepr {
    pub src_port: u16,
    pub dst_port: u16,
}

impl UdpRepr {
    /// Parses the header of a datagram from `src` to `dst`.
    ///
    /// The view is re-checked as [`Packet::new_checked`] does, so an unchecked view is
    /// safe to pass. With [`Checksum::Check`] a non-zero checksum field must verify
    /// ([`Error::BadChecksum`]); a zero field means "no checksum" and is accepted (RFC
    /// 768). Destination port 0 is reserved and cannot be addressed ([`Error::BadField`]);
    /// source port 0 is allowed, it means "no reply port" (RFC 768).
    pub fn parse<T: AsRef<[u8]>>(
        packet: &Packet<T>,
        src: Ipv4Address,
        dst: Ipv4Address,
        checksum: Checksum,
    ) -> Result<UdpRepr> {
        packet.check_len()?;
        if checksum == Checksum::Check && !packet.verify_checksum(src, dst) {
            return Err(Error::BadChecksum { proto: Proto::Udp });
        }
        let dst_port = packet.dst_port();
        if dst_port == 0 {
            return Err(Error::BadField {
                proto: Proto::Udp,
                field: "destination port",
                value: 0,
            });
        }
        Ok(UdpRepr {
            src_port: packet.src_port(),
            dst_port,
        })
    }

    /// Bytes the header takes.
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Bytes a datagram with `payload_len` bytes of data takes.
    pub const fn buffer_len(&self, payload_len: usize) -> usize {
        HEADER_LEN.saturating_add(payload_len)
    }

    /// Writes the header of a datagram that will carry `payload_len` bytes of data: ports,
    /// length field, and a zero checksum. The buffer need hold only the header: the caller
    /// then writes the data into [`Packet::payload_mut`] (or sends it from elsewhere, a
    /// zero-copy send's fragments) and, unless it sends no checksum, fills the checksum.
    ///
    /// Fails with [`Error::BadField`] if the length does not fit the 16-bit field, and with
    /// [`Error::Truncated`] if the buffer is shorter than the header.
    pub fn emit_header<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet: &mut Packet<T>,
        payload_len: usize,
    ) -> Result<()> {
        let Ok(length) = u16::try_from(self.buffer_len(payload_len)) else {
            return Err(Error::BadField {
                proto: Proto::Udp,
                field: "length",
                value: u32::try_from(self.buffer_len(payload_len)).unwrap_or(u32::MAX),
            });
        };
        check_len(Proto::Udp, packet.buffer.as_ref(), HEADER_LEN)?;
        packet.set_src_port(self.src_port);
        packet.set_dst_port(self.dst_port);
        packet.set_len(length);
        packet.set_checksum(0);
        Ok(())
    }

    /// Writes a whole datagram from `src` to `dst`: header, then `payload` copied in. With
    /// [`Checksum::Check`] the checksum is computed; with [`Checksum::Skip`] the field is
    /// zero, which for UDP means "no checksum" (paper 000's elision when the next hop is the
    /// destination on a link with a CRC).
    ///
    /// Errors as [`emit_header`](Self::emit_header), and [`Error::Truncated`] if the buffer
    /// is shorter than the datagram.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet: &mut Packet<T>,
        src: Ipv4Address,
        dst: Ipv4Address,
        payload: &[u8],
        checksum: Checksum,
    ) -> Result<()> {
        self.emit_header(packet, payload.len())?;
        check_len(
            Proto::Udp,
            packet.buffer.as_ref(),
            self.buffer_len(payload.len()),
        )?;
        packet.payload_mut().copy_from_slice(payload);
        if checksum == Checksum::Check {
            packet.fill_checksum(src, dst);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ethernet;
    use proptest::prelude::*;

    const SRC: Ipv4Address = Ipv4Address::new(192, 0, 2, 1);
    const DST: Ipv4Address = Ipv4Address::new(192, 0, 2, 2);

    /// 192.0.2.1:53000 -> 192.0.2.2:53, data "probe"; the checksum was computed by hand
    /// (a short Python sum, independent of this crate).
    const DATAGRAM: [u8; 13] = [
        0xcf, 0x08, // source port 53000
        0x00, 0x35, // destination port 53
        0x00, 0x0d, // length 13
        0x67, 0xbd, // checksum
        b'p', b'r', b'o', b'b', b'e',
    ];

    fn parse(bytes: &[u8], checksum: Checksum) -> Result<UdpRepr> {
        UdpRepr::parse(&Packet::new_checked(bytes)?, SRC, DST, checksum)
    }

    #[test]
    fn parses_a_known_datagram() {
        let p = Packet::new_checked(&DATAGRAM[..]).unwrap();
        assert_eq!(p.src_port(), 53000);
        assert_eq!(p.dst_port(), 53);
        assert_eq!(p.len(), 13);
        assert!(!p.is_empty());
        assert_eq!(p.checksum(), 0x67bd);
        assert_eq!(p.payload(), b"probe");
        assert!(p.verify_checksum(SRC, DST));
        let r = UdpRepr::parse(&p, SRC, DST, Checksum::Check).unwrap();
        assert_eq!(
            r,
            UdpRepr {
                src_port: 53000,
                dst_port: 53
            }
        );
        // The pseudo-header matters: another destination does not verify.
        let elsewhere = Ipv4Address::new(192, 0, 2, 3);
        assert!(!p.verify_checksum(SRC, elsewhere));
    }

    #[test]
    fn emits_the_known_datagram() {
        let repr = UdpRepr {
            src_port: 53000,
            dst_port: 53,
        };
        let mut buf = [0u8; 13];
        repr.emit(
            &mut Packet::new_unchecked(&mut buf[..]),
            SRC,
            DST,
            b"probe",
            Checksum::Check,
        )
        .unwrap();
        assert_eq!(buf, DATAGRAM);
        assert_eq!(repr.header_len(), 8);
        assert_eq!(repr.buffer_len(5), 13);
    }

    #[test]
    fn skip_emits_zero_and_zero_verifies() {
        let repr = UdpRepr {
            src_port: 1,
            dst_port: 2,
        };
        let mut buf = [0xAAu8; 11];
        repr.emit(
            &mut Packet::new_unchecked(&mut buf[..]),
            SRC,
            DST,
            b"abc",
            Checksum::Skip,
        )
        .unwrap();
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(p.checksum(), 0);
        assert!(p.verify_checksum(SRC, DST));
        // Any addresses verify: there is no checksum to check.
        assert!(p.verify_checksum(DST, SRC));
        assert_eq!(parse(&buf, Checksum::Check), Ok(repr));
    }

    #[test]
    fn zero_checksum_field_is_none_not_bad() {
        let mut b = DATAGRAM;
        b[6] = 0;
        b[7] = 0;
        b[8] ^= 0xFF; // the data is corrupt, but nobody promised a checksum
        assert!(parse(&b, Checksum::Check).is_ok());
    }

    #[test]
    fn computed_zero_is_sent_as_all_ones() {
        let repr = UdpRepr {
            src_port: 1234,
            dst_port: 5678,
        };
        // With two data bytes of zero the checksum field is some c = !s. Sending c itself
        // as the data makes the sum s + !s = 0xFFFF, whose complement is zero.
        let mut buf = [0u8; 10];
        repr.emit(
            &mut Packet::new_unchecked(&mut buf[..]),
            SRC,
            DST,
            &[0, 0],
            Checksum::Check,
        )
        .unwrap();
        let c = Packet::new_checked(&buf[..]).unwrap().checksum();
        repr.emit(
            &mut Packet::new_unchecked(&mut buf[..]),
            SRC,
            DST,
            &c.to_be_bytes(),
            Checksum::Check,
        )
        .unwrap();
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(p.checksum(), 0xFFFF);
        assert!(p.verify_checksum(SRC, DST));
        // etherparse applies the same rule.
        let theirs = etherparse::UdpHeader {
            source_port: 1234,
            destination_port: 5678,
            length: 10,
            checksum: 0,
        }
        .calc_checksum_ipv4_raw(SRC.0, DST.0, p.payload())
        .unwrap();
        assert_eq!(theirs, 0xFFFF);
    }

    #[test]
    fn short_buffer_is_truncated() {
        for n in 0..HEADER_LEN {
            assert_eq!(
                Packet::new_checked(&DATAGRAM[..n]),
                Err(Error::Truncated {
                    proto: Proto::Udp,
                    needed: 8,
                    available: n
                })
            );
        }
    }

    #[test]
    fn length_field_below_header_is_bad() {
        for length in 0..8u16 {
            let mut b = DATAGRAM;
            b[4..6].copy_from_slice(&length.to_be_bytes());
            assert_eq!(
                Packet::new_checked(&b[..]),
                Err(Error::BadField {
                    proto: Proto::Udp,
                    field: "length",
                    value: length as u32
                })
            );
            // Parsing an unchecked view runs the same checks and does not panic.
            let e = UdpRepr::parse(&Packet::new_unchecked(&b[..]), SRC, DST, Checksum::Skip);
            assert!(matches!(e, Err(Error::BadField { .. })));
            assert!(!Packet::new_unchecked(&b[..]).verify_checksum(SRC, DST));
        }
    }

    #[test]
    fn length_field_past_buffer_is_truncated() {
        let mut b = DATAGRAM;
        b[4..6].copy_from_slice(&14u16.to_be_bytes());
        assert_eq!(
            Packet::new_checked(&b[..]),
            Err(Error::Truncated {
                proto: Proto::Udp,
                needed: 14,
                available: 13
            })
        );
        assert!(!Packet::new_unchecked(&b[..]).verify_checksum(SRC, DST));
        // A buffer cut short of the length field.
        assert!(matches!(
            Packet::new_checked(&DATAGRAM[..12]),
            Err(Error::Truncated { needed: 13, .. })
        ));
    }

    #[test]
    fn payload_stops_at_the_length_field() {
        let mut b = DATAGRAM.to_vec();
        b.extend_from_slice(&[0xEE; 5]); // link-layer padding after the datagram
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.payload(), b"probe");
        assert!(p.verify_checksum(SRC, DST));
        assert!(parse(&b, Checksum::Check).is_ok());
    }

    #[test]
    fn bad_checksum_is_rejected_unless_skipped() {
        let mut b = DATAGRAM;
        b[10] ^= 0x01;
        assert_eq!(
            parse(&b, Checksum::Check),
            Err(Error::BadChecksum { proto: Proto::Udp })
        );
        assert!(parse(&b, Checksum::Skip).is_ok());
        let mut b = DATAGRAM;
        b[7] ^= 0x80; // the checksum field itself
        assert_eq!(
            parse(&b, Checksum::Check),
            Err(Error::BadChecksum { proto: Proto::Udp })
        );
    }

    #[test]
    fn destination_port_zero_is_bad() {
        let repr = UdpRepr {
            src_port: 0,
            dst_port: 0,
        };
        let mut buf = [0u8; 8];
        repr.emit(
            &mut Packet::new_unchecked(&mut buf[..]),
            SRC,
            DST,
            &[],
            Checksum::Check,
        )
        .unwrap();
        assert_eq!(
            parse(&buf, Checksum::Check),
            Err(Error::BadField {
                proto: Proto::Udp,
                field: "destination port",
                value: 0
            })
        );
        // Source port zero is fine.
        field::set_u16(&mut buf, 2, 7);
        field::set_u16(&mut buf, 6, 0);
        assert_eq!(
            parse(&buf, Checksum::Check),
            Ok(UdpRepr {
                src_port: 0,
                dst_port: 7
            })
        );
        assert!(Packet::new_checked(&buf[..]).unwrap().is_empty());
    }

    #[test]
    fn emit_into_a_short_buffer_fails() {
        let repr = UdpRepr {
            src_port: 1,
            dst_port: 2,
        };
        let mut buf = [0u8; 12];
        assert_eq!(
            repr.emit(
                &mut Packet::new_unchecked(&mut buf[..]),
                SRC,
                DST,
                b"probe",
                Checksum::Check
            ),
            Err(Error::Truncated {
                proto: Proto::Udp,
                needed: 13,
                available: 12
            })
        );
        let mut small = [0u8; 4];
        assert!(repr
            .emit_header(&mut Packet::new_unchecked(&mut small[..]), 0)
            .is_err());
    }

    #[test]
    fn emit_of_an_oversized_payload_fails() {
        let repr = UdpRepr {
            src_port: 1,
            dst_port: 2,
        };
        let mut buf = vec![0u8; 70_000];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        assert_eq!(
            repr.emit_header(&mut p, MAX_PAYLOAD_LEN + 1),
            Err(Error::BadField {
                proto: Proto::Udp,
                field: "length",
                value: 65_536
            })
        );
        assert!(repr.emit_header(&mut p, usize::MAX).is_err());
        repr.emit_header(&mut p, MAX_PAYLOAD_LEN).unwrap();
        assert_eq!(p.len(), u16::MAX);
    }

    #[test]
    fn header_then_fused_copy_matches_emit() {
        let repr = UdpRepr {
            src_port: 40000,
            dst_port: 9,
        };
        let data: Vec<u8> = (0..1001u32).map(|i| (i * 7) as u8).collect();
        let mut whole = vec![0u8; repr.buffer_len(data.len())];
        repr.emit(
            &mut Packet::new_unchecked(&mut whole[..]),
            SRC,
            DST,
            &data,
            Checksum::Check,
        )
        .unwrap();

        let mut fused = vec![0u8; repr.buffer_len(data.len())];
        let mut p = Packet::new_unchecked(&mut fused[..]);
        repr.emit_header(&mut p, data.len()).unwrap();
        assert_eq!(p.checksum(), 0);
        let payload_sum = checksum::copy_and_sum(p.payload_mut(), &data);
        p.fill_checksum_with_payload_sum(SRC, DST, payload_sum);
        assert_eq!(fused, whole);

        // The receive side: sum while copying out, then verify with the header alone.
        let p = Packet::new_checked(&fused[..]).unwrap();
        let mut out = vec![0u8; data.len()];
        let sum = checksum::copy_and_sum(&mut out, p.payload());
        assert!(p.verify_checksum_with_payload_sum(SRC, DST, sum));
        assert!(!p.verify_checksum_with_payload_sum(SRC, DST, sum.wrapping_add(1)));

        // Header then payload then the plain fill gives the same bytes too.
        let mut plain = vec![0u8; repr.buffer_len(data.len())];
        let mut p = Packet::new_unchecked(&mut plain[..]);
        repr.emit_header(&mut p, data.len()).unwrap();
        p.payload_mut().copy_from_slice(&data);
        p.fill_checksum(SRC, DST);
        assert_eq!(plain, whole);
    }

    #[test]
    fn setters_write_their_fields() {
        let mut buf = [0u8; 10];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_src_port(0x0102);
        p.set_dst_port(0x0304);
        p.set_len(10);
        p.set_checksum(0x0506);
        p.payload_mut().copy_from_slice(&[7, 8]);
        assert_eq!(buf, [1, 2, 3, 4, 0, 10, 5, 6, 7, 8]);
        assert_eq!(Packet::new_unchecked(buf).into_inner(), buf);
    }

    #[test]
    fn etherparse_frame_parses_and_verifies() {
        let payload = b"hello from etherparse";
        let builder = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .ipv4(SRC.0, DST.0, 64)
            .udp(5353, 5354);
        let mut frame = Vec::with_capacity(builder.size(payload.len()));
        builder.write(&mut frame, payload).unwrap();

        let eth = ethernet::Frame::new_checked(&frame[..]).unwrap();
        let ip = etherparse::Ipv4HeaderSlice::from_slice(eth.payload()).unwrap();
        let ip_header_len = usize::from(ip.ihl()) * 4;
        let ip_end = usize::from(ip.total_len());
        let udp_bytes = &eth.payload()[ip_header_len..ip_end];
        let p = Packet::new_checked(udp_bytes).unwrap();
        let src = Ipv4Address(ip.source());
        let dst = Ipv4Address(ip.destination());
        assert!(p.checksum() != 0);
        assert!(p.verify_checksum(src, dst));
        let r = UdpRepr::parse(&p, src, dst, Checksum::Check).unwrap();
        assert_eq!(
            r,
            UdpRepr {
                src_port: 5353,
                dst_port: 5354
            }
        );
        assert_eq!(p.payload(), payload);
    }

    fn any_repr() -> impl Strategy<Value = UdpRepr> {
        (any::<u16>(), 1u16..).prop_map(|(src_port, dst_port)| UdpRepr { src_port, dst_port })
    }

    fn any_address() -> impl Strategy<Value = Ipv4Address> {
        any::<[u8; 4]>().prop_map(Ipv4Address)
    }

    /// Parses `bytes` every way there is; the point is that none of it panics.
    fn parse_every_way(bytes: &[u8], src: Ipv4Address, dst: Ipv4Address) {
        let unchecked = Packet::new_unchecked(bytes);
        let _ = unchecked.verify_checksum(src, dst);
        let _ = unchecked.verify_checksum_with_payload_sum(src, dst, 0x1234);
        for checksum in [Checksum::Check, Checksum::Skip] {
            let _ = UdpRepr::parse(&unchecked, src, dst, checksum);
        }
        if let Ok(p) = Packet::new_checked(bytes) {
            let _ = (
                p.src_port(),
                p.dst_port(),
                p.len(),
                p.checksum(),
                p.payload(),
            );
            let _ = p.verify_checksum(src, dst);
            let _ = UdpRepr::parse(&p, src, dst, Checksum::Check);
        }
    }

    proptest! {
        #[test]
        fn emit_then_parse_round_trips(
            repr in any_repr(),
            src in any_address(),
            dst in any_address(),
            payload in proptest::collection::vec(any::<u8>(), 0..300),
            check in any::<bool>(),
        ) {
            let checksum = if check { Checksum::Check } else { Checksum::Skip };
            let mut buf = vec![0u8; repr.buffer_len(payload.len())];
            repr.emit(&mut Packet::new_unchecked(&mut buf[..]), src, dst, &payload, checksum).unwrap();
            let p = Packet::new_checked(&buf[..]).unwrap();
            prop_assert_eq!(UdpRepr::parse(&p, src, dst, Checksum::Check).unwrap(), repr);
            prop_assert_eq!(p.payload(), &payload[..]);
            prop_assert_eq!(usize::from(p.len()), HEADER_LEN + payload.len());
            prop_assert_eq!(p.checksum() == 0, !check);

            // The independent parser agrees on every field...
            let theirs = etherparse::UdpHeaderSlice::from_slice(&buf).unwrap();
            prop_assert_eq!(theirs.source_port(), repr.src_port);
            prop_assert_eq!(theirs.destination_port(), repr.dst_port);
            prop_assert_eq!(usize::from(theirs.length()), buf.len());
            prop_assert_eq!(theirs.checksum(), p.checksum());
            // ...and on the checksum, computed its own way.
            let expected = theirs
                .to_header()
                .calc_checksum_ipv4_raw(src.0, dst.0, &payload)
                .unwrap();
            if check {
                prop_assert_eq!(p.checksum(), expected);
            }
        }

        #[test]
        fn any_change_to_a_checksummed_datagram_is_caught(
            repr in any_repr(),
            payload in proptest::collection::vec(any::<u8>(), 1..100),
            at in any::<prop::sample::Index>(),
            flip in 1u8..,
        ) {
            let mut buf = vec![0u8; repr.buffer_len(payload.len())];
            repr.emit(&mut Packet::new_unchecked(&mut buf[..]), SRC, DST, &payload, Checksum::Check).unwrap();
            // Change one data byte: a single-byte error always changes the sum.
            let i = HEADER_LEN + at.index(payload.len());
            buf[i] ^= flip;
            prop_assert_eq!(
                parse(&buf, Checksum::Check),
                Err(Error::BadChecksum { proto: Proto::Udp })
            );
        }

        #[test]
        fn parse_never_panics_on_arbitrary_bytes(
            bytes in proptest::collection::vec(any::<u8>(), 0..64),
            src in any_address(),
            dst in any_address(),
        ) {
            parse_every_way(&bytes, src, dst);
        }

        #[test]
        fn parse_never_panics_on_mutated_datagrams(
            repr in any_repr(),
            payload in proptest::collection::vec(any::<u8>(), 0..40),
            flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..6),
            cut in any::<prop::sample::Index>(),
            extra in proptest::collection::vec(any::<u8>(), 0..8),
        ) {
            let mut buf = vec![0u8; repr.buffer_len(payload.len())];
            repr.emit(&mut Packet::new_unchecked(&mut buf[..]), SRC, DST, &payload, Checksum::Check).unwrap();
            for (at, x) in flips {
                let i = at.index(buf.len());
                buf[i] ^= x;
            }
            buf.extend_from_slice(&extra);
            parse_every_way(&buf, SRC, DST);
            let cut = cut.index(buf.len() + 1);
            parse_every_way(&buf[..cut], SRC, DST);
        }
    }
}
