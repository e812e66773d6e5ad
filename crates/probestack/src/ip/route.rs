//! The routing table: longest-prefix match, each entry saying whether the next hop is the
//! destination itself (directly connected) or a gateway. Paper 000's checksum elision asks
//! exactly that question of the route ("the route structure includes a flag on whether the
//! next hop in the route is just a gateway or is the destination host").

use std::cell::Cell;

use crate::wire::Ipv4Address;

/// An address with a prefix length: an interface address or a route's destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ipv4Cidr {
    pub address: Ipv4Address,
    pub prefix_len: u8,
}

impl Ipv4Cidr {
    /// `None` when the prefix is longer than 32.
    pub fn new(address: Ipv4Address, prefix_len: u8) -> Option<Ipv4Cidr> {
        (prefix_len <= 32).then_some(Ipv4Cidr {
            address,
            prefix_len,
        })
    }

    pub fn netmask(&self) -> u32 {
        match self.prefix_len {
            0 => 0,
            n => u32::MAX << (32 - n as u32),
        }
    }

    pub fn contains(&self, a: Ipv4Address) -> bool {
        let m = self.netmask();
        u32::from_be_bytes(a.0) & m == u32::from_be_bytes(self.address.0) & m
    }

    /// The subnet's broadcast address (all host bits set).
    pub fn broadcast(&self) -> Ipv4Address {
        Ipv4Address((u32::from_be_bytes(self.address.0) | !self.netmask()).to_be_bytes())
    }

    /// The network part, host bits cleared.
    pub fn network(&self) -> Ipv4Cidr {
        Ipv4Cidr {
            address: Ipv4Address(
                (u32::from_be_bytes(self.address.0) & self.netmask()).to_be_bytes(),
            ),
            prefix_len: self.prefix_len,
        }
    }
}

impl std::str::FromStr for Ipv4Cidr {
    type Err = String;
    /// Parses `198.18.0.2/15`.
    fn from_str(s: &str) -> Result<Self, String> {
        let (a, p) = s
            .split_once('/')
            .ok_or_else(|| format!("{s}: expected ADDRESS/PREFIX"))?;
        let addr: std::net::Ipv4Addr = a.parse().map_err(|e| format!("{a}: {e}"))?;
        let prefix: u8 = p.parse().map_err(|e| format!("{p}: {e}"))?;
        Ipv4Cidr::new(addr.into(), prefix)
            .ok_or_else(|| format!("prefix {prefix} is longer than 32"))
    }
}

/// Where a route sends a datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NextHop {
    /// The destination is on the link: the next hop is the destination.
    Direct,
    /// Through this gateway.
    Gateway(Ipv4Address),
}

/// One entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route {
    pub destination: Ipv4Cidr,
    pub next_hop: NextHop,
    /// Index of the outgoing interface.
    pub interface: usize,
}

/// The answer to a lookup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RouteDecision {
    pub interface: usize,
    /// The address to resolve on the link: the destination or the gateway.
    pub next_hop: Ipv4Address,
    /// Whether the next hop is the destination (one hop, no router between).
    pub next_hop_is_destination: bool,
}

/// The table.
#[derive(Clone, Debug, Default)]
pub struct RouteTable {
    routes: Vec<Route>,
    /// The last destination looked up and its answer: one datagram asks up to four times
    /// (the checksum choice, the source address, IP output), and a flow asks for the same
    /// destination datagram after datagram, as the one-behind PCB caches of paper 002
    /// §6.3 bet. Emptied whenever the table changes.
    last: Cell<Option<(Ipv4Address, Option<RouteDecision>)>>,
    /// Changes with every route added or removed (for headers built from a lookup).
    generation: u64,
}

impl RouteTable {
    pub fn new() -> RouteTable {
        RouteTable::default()
    }

    /// Adds a route; one with the same destination is replaced.
    pub fn add(&mut self, route: Route) {
        let dest = route.destination.network();
        self.routes.retain(|r| r.destination.network() != dest);
        self.routes.push(Route {
            destination: dest,
            ..route
        });
        self.last.set(None);
        self.generation += 1;
    }

    /// Removes the route to `destination`; whether there was one.
    pub fn remove(&mut self, destination: Ipv4Cidr) -> bool {
        let dest = destination.network();
        let before = self.routes.len();
        self.routes.retain(|r| r.destination != dest);
        self.last.set(None);
        self.generation += 1;
        self.routes.len() != before
    }

    pub fn routes(&self) -> &[Route] {
        &self.routes
    }

    /// A number that changes whenever a route is added or removed.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The most specific route to `dst`.
    #[inline]
    pub fn lookup(&self, dst: Ipv4Address) -> Option<RouteDecision> {
        match self.last.get() {
            Some((d, decision)) if d == dst => decision,
            _ => {
                let decision = self.search(dst);
                self.last.set(Some((dst, decision)));
                decision
            }
        }
    }

    /// Longest-prefix match over the whole table.
    fn search(&self, dst: Ipv4Address) -> Option<RouteDecision> {
        let r = self
            .routes
            .iter()
            .filter(|r| r.destination.contains(dst))
            .max_by_key(|r| r.destination.prefix_len)?;
        Some(match r.next_hop {
            NextHop::Direct => RouteDecision {
                interface: r.interface,
                next_hop: dst,
                next_hop_is_destination: true,
            },
            NextHop::Gateway(g) => RouteDecision {
                interface: r.interface,
                next_hop: g,
                next_hop_is_destination: false,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cidr(s: &str) -> Ipv4Cidr {
        s.parse().unwrap()
    }

    #[test]
    fn longest_prefix_wins_and_says_if_the_hop_is_the_destination() {
        let mut t = RouteTable::new();
        t.add(Route {
            destination: cidr("198.18.0.0/15"),
            next_hop: NextHop::Direct,
            interface: 0,
        });
        t.add(Route {
            destination: cidr("0.0.0.0/0"),
            next_hop: NextHop::Gateway(Ipv4Address::new(198, 18, 0, 1)),
            interface: 0,
        });
        t.add(Route {
            destination: cidr("198.19.5.0/24"),
            next_hop: NextHop::Gateway(Ipv4Address::new(198, 18, 0, 254)),
            interface: 1,
        });
        let d = t.lookup(Ipv4Address::new(198, 18, 3, 4)).unwrap();
        assert!(d.next_hop_is_destination);
        assert_eq!(d.next_hop, Ipv4Address::new(198, 18, 3, 4));
        let g = t.lookup(Ipv4Address::new(198, 19, 5, 6)).unwrap();
        assert_eq!((g.interface, g.next_hop_is_destination), (1, false));
        let def = t.lookup(Ipv4Address::new(203, 0, 113, 1)).unwrap();
        assert_eq!(def.next_hop, Ipv4Address::new(198, 18, 0, 1));
        assert!(t.remove(cidr("0.0.0.0/0")));
        assert_eq!(t.lookup(Ipv4Address::new(203, 0, 113, 1)), None);
    }

    #[test]
    fn the_last_answer_is_forgotten_when_the_table_changes() {
        let mut t = RouteTable::new();
        let dst = Ipv4Address::new(198, 19, 5, 6);
        assert_eq!(t.lookup(dst), None);
        t.add(Route {
            destination: cidr("198.18.0.0/15"),
            next_hop: NextHop::Direct,
            interface: 0,
        });
        assert_eq!(t.lookup(dst).map(|d| d.interface), Some(0));
        // Asked again: the cached answer, and the same one.
        assert_eq!(t.lookup(dst).map(|d| d.interface), Some(0));
        t.add(Route {
            destination: cidr("198.19.5.0/24"),
            next_hop: NextHop::Gateway(Ipv4Address::new(198, 18, 0, 254)),
            interface: 1,
        });
        assert_eq!(t.lookup(dst).map(|d| d.interface), Some(1));
        assert!(t.remove(cidr("198.19.5.0/24")));
        assert_eq!(t.lookup(dst).map(|d| d.interface), Some(0));
    }

    #[test]
    fn cidr_arithmetic() {
        let c = cidr("198.18.0.2/15");
        assert!(c.contains(Ipv4Address::new(198, 19, 255, 255)));
        assert!(!c.contains(Ipv4Address::new(198, 20, 0, 0)));
        assert_eq!(c.broadcast(), Ipv4Address::new(198, 19, 255, 255));
        assert_eq!(c.network().address, Ipv4Address::new(198, 18, 0, 0));
        assert!("198.18.0.2/33".parse::<Ipv4Cidr>().is_err());
        assert!("198.18.0.2".parse::<Ipv4Cidr>().is_err());
        assert_eq!(cidr("0.0.0.0/0").netmask(), 0);
    }
}
