//! Wire formats: the bytes of each protocol, parsed and emitted.
//!
//! Each protocol has one file and two types, in the style of smoltcp's `wire`:
//!
//! - a **view** (`Frame`, `Packet`, ...) over a byte buffer `T: AsRef<[u8]>`, with one
//!   accessor per header field and, when `T: AsMut<[u8]>`, one setter per field. A view
//!   made with `new_checked` has been checked to be long enough for every accessor, so
//!   accessors never panic; `new_unchecked` is for buffers the caller sized itself.
//! - a **representation** (`...Repr`): a validated value that `parse`s from a view and
//!   `emit`s into one. Parsing checks everything the protocol requires and returns an
//!   [`Error`] that names what is wrong; it never panics, whatever the bytes.
//!
//! Checksums are computed with [`crate::checksum`]; whether a parser verifies them and an
//! emitter fills them in is the caller's choice ([`Checksum`]), because checksum offload,
//! elision and fused copy-and-verify all move that work elsewhere.

pub mod arp;
pub mod ethernet;
pub mod icmpv4;
pub mod ipv4;
pub mod source_route;
pub mod tcp;
pub mod udp;

use std::fmt;

/// The protocol a wire error is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Proto {
    Ethernet,
    Arp,
    Ipv4,
    Icmpv4,
    Udp,
    Tcp,
}

impl fmt::Display for Proto {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Proto::Ethernet => "Ethernet",
            Proto::Arp => "ARP",
            Proto::Ipv4 => "IPv4",
            Proto::Icmpv4 => "ICMPv4",
            Proto::Udp => "UDP",
            Proto::Tcp => "TCP",
        })
    }
}

/// What is wrong with a buffer that did not parse, or could not be emitted into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The buffer ends before the header, or before the length a header field claims.
    Truncated {
        proto: Proto,
        needed: usize,
        available: usize,
    },
    /// A header field holds a value the protocol does not allow.
    BadField {
        proto: Proto,
        field: &'static str,
        value: u32,
    },
    /// The checksum does not verify.
    BadChecksum { proto: Proto },
    /// An option is malformed: its length is impossible, or it runs past the header.
    BadOption {
        proto: Proto,
        kind: u8,
        reason: &'static str,
    },
    /// A value the protocol allows but this stack does not handle (an ARP hardware type
    /// other than Ethernet, say).
    Unsupported {
        proto: Proto,
        field: &'static str,
        value: u32,
    },
}

impl Error {
    /// The protocol the error is about.
    pub fn proto(&self) -> Proto {
        match *self {
            Error::Truncated { proto, .. }
            | Error::BadField { proto, .. }
            | Error::BadChecksum { proto }
            | Error::BadOption { proto, .. }
            | Error::Unsupported { proto, .. } => proto,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Error::Truncated {
                proto,
                needed,
                available,
            } => write!(
                f,
                "{proto}: truncated: needs {needed} bytes, buffer has {available}"
            ),
            Error::BadField {
                proto,
                field,
                value,
            } => write!(f, "{proto}: bad {field}: {value}"),
            Error::BadChecksum { proto } => write!(f, "{proto}: bad checksum"),
            Error::BadOption {
                proto,
                kind,
                reason,
            } => write!(f, "{proto}: bad option {kind}: {reason}"),
            Error::Unsupported {
                proto,
                field,
                value,
            } => write!(f, "{proto}: unsupported {field}: {value}"),
        }
    }
}

impl std::error::Error for Error {}

/// Result of parsing or emitting.
pub type Result<T> = std::result::Result<T, Error>;

/// What to do with a checksum: on parse, verify it or not; on emit, compute it or leave
/// the field zero (for UDP, zero means "no checksum", RFC 768).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Checksum {
    /// Verify on parse; compute on emit.
    #[default]
    Check,
    /// Trust on parse (a NIC verified it, or the peers agreed to elide it); write zero on
    /// emit (the NIC or a fused copy fills it in, or there is none).
    Skip,
}

/// Checks that `buf` holds at least `needed` bytes.
#[inline]
pub(crate) fn check_len(proto: Proto, buf: &[u8], needed: usize) -> Result<()> {
    if buf.len() < needed {
        Err(Error::Truncated {
            proto,
            needed,
            available: buf.len(),
        })
    } else {
        Ok(())
    }
}

/// Big-endian field access over byte slices, for the views. Callers index within a
/// length they checked.
pub(crate) mod field {
    #[inline]
    pub fn u16_at(b: &[u8], at: usize) -> u16 {
        u16::from_be_bytes([b[at], b[at + 1]])
    }

    #[inline]
    pub fn u32_at(b: &[u8], at: usize) -> u32 {
        u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
    }

    #[inline]
    pub fn set_u16(b: &mut [u8], at: usize, v: u16) {
        b[at..at + 2].copy_from_slice(&v.to_be_bytes());
    }

    #[inline]
    pub fn set_u32(b: &mut [u8], at: usize, v: u32) {
        b[at..at + 4].copy_from_slice(&v.to_be_bytes());
    }
}

/// An IPv4 address. A plain wrapper rather than `std::net::Ipv4Addr` so that it is `[u8;
/// 4]` in memory and free to convert; `From` conversions go both ways.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Ipv4Address(pub [u8; 4]);

/// One 32-bit word, not a length-prefixed byte slice (the derived hash): table lookups
/// keyed by addresses hash one word.
impl std::hash::Hash for Ipv4Address {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u32(u32::from_ne_bytes(self.0));
    }
}

impl Ipv4Address {
    pub const UNSPECIFIED: Ipv4Address = Ipv4Address([0, 0, 0, 0]);
    pub const BROADCAST: Ipv4Address = Ipv4Address([255, 255, 255, 255]);

    pub const fn new(a: u8, b: u8, c: u8, d: u8) -> Ipv4Address {
        Ipv4Address([a, b, c, d])
    }

    /// The address in the first four bytes of `b`, which the caller checked are there.
    pub fn from_bytes(b: &[u8]) -> Ipv4Address {
        Ipv4Address([b[0], b[1], b[2], b[3]])
    }

    pub const fn octets(&self) -> [u8; 4] {
        self.0
    }

    pub const fn is_unspecified(&self) -> bool {
        u32::from_be_bytes(self.0) == 0
    }

    pub const fn is_broadcast(&self) -> bool {
        u32::from_be_bytes(self.0) == u32::MAX
    }

    /// 224.0.0.0/4 (RFC 5771).
    pub const fn is_multicast(&self) -> bool {
        self.0[0] & 0xF0 == 0xE0
    }

    /// 127.0.0.0/8.
    pub const fn is_loopback(&self) -> bool {
        self.0[0] == 127
    }
}

impl fmt::Display for Ipv4Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c, d] = self.0;
        write!(f, "{a}.{b}.{c}.{d}")
    }
}

impl From<std::net::Ipv4Addr> for Ipv4Address {
    fn from(a: std::net::Ipv4Addr) -> Self {
        Ipv4Address(a.octets())
    }
}

impl From<Ipv4Address> for std::net::Ipv4Addr {
    fn from(a: Ipv4Address) -> Self {
        std::net::Ipv4Addr::from(a.0)
    }
}
