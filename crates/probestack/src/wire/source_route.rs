//! The IPv4 source route options (RFC 791 §3.1): Loose Source and Record Route (type 131)
//! and Strict Source and Record Route (type 137), one of the options of an IPv4 header.
//!
//! ```text
//! +--------+--------+--------+---------//--------+
//! |  type  | length | pointer|     route data    |
//! +--------+--------+--------+---------//--------+
//! ```
//!
//! The route data is a list of addresses. The pointer counts from the option's first byte
//! (so 4 names the first address) and names the next address to visit: the gateway the
//! header's destination names replaces that destination with it, records its own address
//! in its place and moves the pointer on. Once the pointer passes the length the route is
//! complete: the datagram is at its final destination, and the list holds the route it
//! took, which the destination reverses to answer along it (RFC 1122 §3.2.1.8 (c);
//! `ip::SourceRouting::back_along`).

use super::{Error, Ipv4Address, Proto, Result};

/// Loose Source and Record Route: the listed gateways, any others between them.
pub const LSRR: u8 = 0x83;
/// Strict Source and Record Route: the listed gateways and no others.
pub const SSRR: u8 = 0x89;
/// Most addresses one option holds: (40 option bytes − 3) / 4.
pub const MAX_ADDRESSES: usize = 9;

/// A source route option: its kind, its addresses, and how far along it the datagram is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SourceRoute {
    /// Strict (SSRR) or loose (LSRR).
    pub strict: bool,
    addresses: [Ipv4Address; MAX_ADDRESSES],
    len: u8,
    /// Index of the next address to visit; `len` once the route is complete.
    next: u8,
}

impl SourceRoute {
    /// A route to send: `addresses` are the gateways after the first hop (which the
    /// header's destination names) and, last, the final destination; the pointer at the
    /// first of them. Errors: none or more than [`MAX_ADDRESSES`].
    pub fn new(strict: bool, addresses: &[Ipv4Address]) -> Result<SourceRoute> {
        if addresses.is_empty() || addresses.len() > MAX_ADDRESSES {
            return Err(Error::BadField {
                proto: Proto::Ipv4,
                field: "source route addresses",
                value: addresses.len() as u32,
            });
        }
        let mut route = SourceRoute {
            strict,
            addresses: [Ipv4Address::UNSPECIFIED; MAX_ADDRESSES],
            len: addresses.len() as u8,
            next: 0,
        };
        route.addresses[..addresses.len()].copy_from_slice(addresses);
        Ok(route)
    }

    /// Parses one option (its type byte first, as long as its length byte says). The
    /// length must hold whole addresses, and the pointer must name one of them or the
    /// place just past them (a complete route).
    pub fn parse(option: &[u8]) -> Result<SourceRoute> {
        let bad = |reason| Error::BadOption {
            proto: Proto::Ipv4,
            kind: option.first().copied().unwrap_or(0),
            reason,
        };
        let (&kind, &len, &pointer) = match option {
            [k, l, p, ..] => (k, l, p),
            _ => return Err(bad("shorter than its type, length and pointer")),
        };
        let strict = match kind {
            LSRR => false,
            SSRR => true,
            _ => return Err(bad("not a source route")),
        };
        let len = usize::from(len);
        if len < 3 || len > option.len() || (len - 3) % 4 != 0 {
            return Err(bad("length does not hold whole addresses"));
        }
        let count = (len - 3) / 4;
        if count > MAX_ADDRESSES {
            return Err(bad("more addresses than a header holds"));
        }
        let pointer = usize::from(pointer);
        if pointer < 4 || pointer % 4 != 0 || (pointer - 4) / 4 > count {
            return Err(bad("pointer names no address"));
        }
        let mut route = SourceRoute {
            strict,
            addresses: [Ipv4Address::UNSPECIFIED; MAX_ADDRESSES],
            len: count as u8,
            next: ((pointer - 4) / 4) as u8,
        };
        for (i, a) in option[3..len].chunks_exact(4).enumerate() {
            route.addresses[i] = Ipv4Address::from_bytes(a);
        }
        Ok(route)
    }

    /// The source route among a header's `options`, if there is one: `Err` for a
    /// malformed one or a second one (RFC 791 allows a source route once per header).
    pub fn find(options: &[u8]) -> Result<Option<SourceRoute>> {
        let mut found = None;
        for option in super::ipv4::each_option(options) {
            let kind = option[0];
            if kind == LSRR || kind == SSRR {
                if found.is_some() {
                    return Err(Error::BadOption {
                        proto: Proto::Ipv4,
                        kind,
                        reason: "a second source route",
                    });
                }
                found = Some(SourceRoute::parse(option)?);
            }
        }
        Ok(found)
    }

    /// Every address on the list.
    pub fn addresses(&self) -> &[Ipv4Address] {
        &self.addresses[..usize::from(self.len)]
    }

    /// The addresses already visited: on a complete route, the whole route taken.
    pub fn recorded(&self) -> &[Ipv4Address] {
        &self.addresses[..usize::from(self.next)]
    }

    /// Whether the datagram has visited every address: it is at its final destination.
    pub fn is_complete(&self) -> bool {
        self.next == self.len
    }

    /// Bytes the option takes.
    pub fn buffer_len(&self) -> usize {
        3 + 4 * usize::from(self.len)
    }

    /// The option's bytes (type, length, pointer, addresses).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.buffer_len());
        out.push(if self.strict { SSRR } else { LSRR });
        out.push(self.buffer_len() as u8);
        out.push(4 + 4 * self.next);
        for a in self.addresses() {
            out.extend_from_slice(&a.0);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const R1: Ipv4Address = Ipv4Address::new(198, 18, 1, 1);
    const R2: Ipv4Address = Ipv4Address::new(198, 18, 2, 1);
    const R3: Ipv4Address = Ipv4Address::new(198, 18, 3, 1);

    /// An option from its fields, by hand (the RFC 791 layout).
    fn option(kind: u8, pointer: u8, addresses: &[Ipv4Address]) -> Vec<u8> {
        let mut o = vec![kind, (3 + 4 * addresses.len()) as u8, pointer];
        for a in addresses {
            o.extend_from_slice(&a.0);
        }
        o
    }

    #[test]
    fn parses_where_the_pointer_stands() {
        let o = option(LSRR, 8, &[R1, R2, R3]);
        let r = SourceRoute::parse(&o).unwrap();
        assert!(!r.strict && !r.is_complete());
        assert_eq!(r.addresses(), [R1, R2, R3]);
        assert_eq!(r.recorded(), [R1]);
        assert_eq!(r.to_bytes(), o);
        let done = SourceRoute::parse(&option(SSRR, 16, &[R1, R2, R3])).unwrap();
        assert!(done.strict && done.is_complete());
        assert_eq!(done.recorded(), [R1, R2, R3]);
    }

    #[test]
    fn refuses_what_names_no_address() {
        for (o, what) in [
            (vec![LSRR, 2, 4], "length below 3"),
            (vec![LSRR, 6, 4, 1, 2, 3], "partial address"),
            (option(LSRR, 3, &[R1]), "pointer below 4"),
            (option(LSRR, 6, &[R1, R2]), "pointer inside an address"),
            (option(LSRR, 16, &[R1, R2]), "pointer past the end"),
            (vec![LSRR, 11, 4, 0, 0, 0, 0], "length past the option"),
            (option(0x07, 4, &[R1]), "record route"),
            (vec![LSRR], "too short"),
        ] {
            assert!(SourceRoute::parse(&o).is_err(), "{what}");
        }
    }

    #[test]
    fn finds_one_route_among_options() {
        let route = option(LSRR, 4, &[R1, R2]);
        let mut options = vec![1, 1];
        options.extend_from_slice(&[0x07, 7, 4, 0, 0, 0, 0]); // record route
        options.extend_from_slice(&route);
        options.push(0);
        let found = SourceRoute::find(&options).unwrap().unwrap();
        assert_eq!(found.addresses(), [R1, R2]);
        assert_eq!(SourceRoute::find(&[1, 1, 1, 0]).unwrap(), None);
        let twice = [route.clone(), route].concat();
        assert!(SourceRoute::find(&twice).is_err());
        assert!(SourceRoute::new(false, &[]).is_err());
        assert!(SourceRoute::new(false, &[R1; 10]).is_err());
    }
}
