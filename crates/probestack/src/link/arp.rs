//! The ARP cache (RFC 826, RFC 1122 §2.3.2): resolved entries with a lifetime, static
//! entries, and for each address being resolved a bounded queue of packets waiting for the
//! answer (RFC 1122 §2.3.2.2: "SHOULD save (rather than discard) at least one packet").
//!
//! The cache holds packets of any type `P` and decides; the link layer sends the requests
//! and the packets.

use std::collections::VecDeque;

use crate::hash::TableMap;

use crate::time::{Duration, Instant};
use crate::wire::ethernet::EthernetAddress;
use crate::wire::Ipv4Address;

/// Timers and limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArpConfig {
    /// How long a learned entry lives (Linux's base reachable time is 30 s; BSD used 20 min).
    pub entry_lifetime: Duration,
    /// Time between requests for an unanswered address (RFC 1122 §2.3.2.1: at most one
    /// per second per address).
    pub request_interval: Duration,
    /// Requests sent before giving up and dropping the waiting packets.
    pub max_requests: u32,
    /// Packets kept per unresolved address; further ones push out the oldest.
    pub queue_per_address: usize,
    /// Entries the cache holds at most, resolved and pending together (Linux's
    /// `gc_thresh3` is 1024), so that traffic from or to many addresses (a spoofed flood
    /// from the local subnet) cannot grow it, or the packets its pending entries hold,
    /// without bound. At the limit a new address is refused (its packet dropped and
    /// counted) or not learned; expired entries leave at the next poll.
    pub max_entries: usize,
}

impl Default for ArpConfig {
    fn default() -> Self {
        ArpConfig {
            entry_lifetime: Duration::from_secs(60),
            request_interval: Duration::from_secs(1),
            max_requests: 3,
            queue_per_address: 8,
            max_entries: 1024,
        }
    }
}

#[derive(Debug)]
enum Entry<P> {
    Resolved {
        mac: EthernetAddress,
        /// `None` for a static entry.
        expires: Option<Instant>,
    },
    Pending {
        waiting: VecDeque<P>,
        requests_sent: u32,
        next_request: Instant,
    },
}

/// What to do with a packet for an address.
#[derive(Debug, PartialEq, Eq)]
pub enum Resolution<P> {
    /// Send now to this MAC.
    Resolved(EthernetAddress, P),
    /// Queued; send an ARP request for the address now.
    QueuedSendRequest,
    /// Queued behind a request already sent.
    Queued,
    /// Queued, and this older packet was pushed out of the full queue (count a drop).
    QueuedDropped(P),
    /// The cache is full ([`ArpConfig::max_entries`]): not queued (count a drop).
    TableFull(P),
}

/// Work the cache asks of the link layer after its timers run.
#[derive(Debug, Default)]
pub struct ArpTimers<P> {
    /// Addresses to send another request for.
    pub requests: Vec<Ipv4Address>,
    /// Packets dropped because their address never answered.
    pub unresolved: Vec<P>,
}

/// The cache of one interface.
#[derive(Debug)]
pub struct ArpCache<P> {
    config: ArpConfig,
    entries: TableMap<Ipv4Address, Entry<P>>,
    /// Changes whenever a mapping is set or forgotten, so that a header built from an
    /// answer (a socket's header template) can tell it is stale.
    generation: u64,
    /// No entry has a timer before this (a lower bound: an entry refreshed since may be
    /// due later): the stack asks on every poll, and a scan of the table is kept for the
    /// polls that may find something due, where it sets this exactly again.
    due: Option<Instant>,
}

impl<P> ArpCache<P> {
    pub fn new(config: ArpConfig) -> ArpCache<P> {
        ArpCache {
            config,
            entries: TableMap::default(),
            generation: 0,
            due: None,
        }
    }

    /// A permanent entry (like `arp -s`); replaces any learned one and releases packets
    /// waiting for it.
    pub fn insert_static(&mut self, ip: Ipv4Address, mac: EthernetAddress) -> Vec<P> {
        self.set(ip, mac, None)
    }

    /// The MAC for `ip`, if resolved and not expired.
    pub fn lookup(&self, ip: Ipv4Address, now: Instant) -> Option<EthernetAddress> {
        self.lookup_until(ip, now).map(|(mac, _)| mac)
    }

    /// The MAC for `ip` and until when it holds (`None`: a static entry), if resolved and
    /// not expired.
    pub fn lookup_until(
        &self,
        ip: Ipv4Address,
        now: Instant,
    ) -> Option<(EthernetAddress, Option<Instant>)> {
        match self.entries.get(&ip) {
            Some(Entry::Resolved { mac, expires }) if expires.is_none_or(|e| now < e) => {
                Some((*mac, *expires))
            }
            _ => None,
        }
    }

    /// A number that changes whenever a mapping is set or forgotten.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Resolves `ip` for `packet`: gives it back with the MAC when known, otherwise queues
    /// it and says whether a request should go out now.
    pub fn resolve(&mut self, ip: Ipv4Address, packet: P, now: Instant) -> Resolution<P> {
        if let Some(mac) = self.lookup(ip, now) {
            return Resolution::Resolved(mac, packet);
        }
        let cap = self.config.queue_per_address.max(1);
        if !self.entries.contains_key(&ip) && !self.has_room() {
            return Resolution::TableFull(packet);
        }
        match self.entries.get_mut(&ip) {
            Some(Entry::Pending { waiting, .. }) => {
                waiting.push_back(packet);
                if waiting.len() > cap {
                    if let Some(old) = waiting.pop_front() {
                        return Resolution::QueuedDropped(old);
                    }
                }
                Resolution::Queued
            }
            _ => {
                // Absent (and there is room), or resolved but expired: start resolving.
                let mut waiting = VecDeque::with_capacity(1);
                waiting.push_back(packet);
                let next_request = now + self.config.request_interval;
                self.note_timer(next_request);
                self.entries.insert(
                    ip,
                    Entry::Pending {
                        waiting,
                        requests_sent: 1,
                        next_request,
                    },
                );
                Resolution::QueuedSendRequest
            }
        }
    }

    /// Learns a mapping from an ARP packet (RFC 826 "merge"): updates an existing entry,
    /// or creates one when `create` (the packet was addressed to us). Returns the packets
    /// that were waiting for it, to be sent now. Static entries are never overwritten.
    pub fn learn(
        &mut self,
        ip: Ipv4Address,
        mac: EthernetAddress,
        create: bool,
        now: Instant,
    ) -> Vec<P> {
        let known = match self.entries.get(&ip) {
            Some(Entry::Resolved { expires: None, .. }) => return Vec::new(),
            known => known.is_some(),
        };
        if known || (create && self.has_room()) {
            self.set(ip, mac, Some(now + self.config.entry_lifetime))
        } else {
            Vec::new()
        }
    }

    /// Forgets a learned mapping for `ip` (a static one stays), so that the next packet
    /// there asks again: the link layer's part of "negative advice" from a transport
    /// whose peer stopped answering (RFC 1122 §3.3.1.4, §4.2.3.5). Returns whether there
    /// was one.
    pub fn forget_learned(&mut self, ip: Ipv4Address) -> bool {
        if !matches!(
            self.entries.get(&ip),
            Some(Entry::Resolved {
                expires: Some(_),
                ..
            })
        ) {
            return false;
        }
        self.entries.remove(&ip);
        self.generation += 1;
        true
    }

    /// Whether a new entry may be added. Expired entries go at the next
    /// [`poll`](Self::poll), which the stack runs on every turn.
    fn has_room(&self) -> bool {
        self.entries.len() < self.config.max_entries
    }

    /// Entries held (resolved and pending).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn set(&mut self, ip: Ipv4Address, mac: EthernetAddress, expires: Option<Instant>) -> Vec<P> {
        self.generation += 1;
        if let Some(t) = expires {
            self.note_timer(t);
        }
        match self.entries.insert(ip, Entry::Resolved { mac, expires }) {
            Some(Entry::Pending { waiting, .. }) => waiting.into(),
            _ => Vec::new(),
        }
    }

    /// Runs the timers: requests to repeat, packets to give up on, expired entries to
    /// forget.
    pub fn poll(&mut self, now: Instant) -> ArpTimers<P> {
        let mut out = ArpTimers {
            requests: Vec::new(),
            unresolved: Vec::new(),
        };
        // Most polls find nothing due.
        if !self.may_be_due(now) {
            return out;
        }
        let (interval, max) = (self.config.request_interval, self.config.max_requests);
        self.generation += 1;
        let mut due: Option<Instant> = None;
        let mut keep = |t: Instant| due = Some(due.map_or(t, |d| d.min(t)));
        self.entries.retain(|ip, e| match e {
            Entry::Resolved { expires, .. } => match *expires {
                Some(x) if now >= x => false,
                Some(x) => {
                    keep(x);
                    true
                }
                None => true,
            },
            Entry::Pending {
                waiting,
                requests_sent,
                next_request,
            } => {
                if now < *next_request {
                    keep(*next_request);
                    return true;
                }
                if *requests_sent >= max {
                    out.unresolved.extend(waiting.drain(..));
                    return false;
                }
                *requests_sent += 1;
                *next_request = now + interval;
                keep(*next_request);
                out.requests.push(*ip);
                true
            }
        });
        self.due = due;
        out
    }

    /// Whether a [`poll`](Self::poll) at `now` may have work (the cheap test the stack
    /// makes on every turn).
    pub fn may_be_due(&self, now: Instant) -> bool {
        self.due.is_some_and(|d| now >= d)
    }

    /// When [`poll`](Self::poll) may next have work: no timer is earlier (an entry
    /// refreshed since it was set may be due later, and the poll then finds nothing).
    pub fn next_deadline(&self) -> Option<Instant> {
        self.due
    }

    fn note_timer(&mut self, t: Instant) {
        self.due = Some(self.due.map_or(t, |d| d.min(t)));
    }

    /// Packets waiting for resolution, over all addresses.
    pub fn waiting(&self) -> usize {
        self.entries
            .values()
            .map(|e| match e {
                Entry::Pending { waiting, .. } => waiting.len(),
                Entry::Resolved { .. } => 0,
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IP: Ipv4Address = Ipv4Address::new(198, 18, 0, 9);
    const MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 9]);

    fn t(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    #[test]
    fn queues_until_learned_then_releases_in_order() {
        let mut c: ArpCache<i32> = ArpCache::new(ArpConfig::default());
        assert_eq!(c.resolve(IP, 1, t(0)), Resolution::QueuedSendRequest);
        assert_eq!(c.resolve(IP, 2, t(1)), Resolution::Queued);
        assert_eq!(c.waiting(), 2);
        // A packet not addressed to us does not create an entry, but updates one.
        assert_eq!(c.learn(IP, MAC, false, t(2)), vec![1, 2]);
        assert_eq!(c.resolve(IP, 3, t(3)), Resolution::Resolved(MAC, 3));
        assert!(c
            .learn(Ipv4Address::new(198, 18, 0, 10), MAC, false, t(3))
            .is_empty());
        assert_eq!(c.lookup(Ipv4Address::new(198, 18, 0, 10), t(3)), None);
    }

    #[test]
    fn the_cache_is_bounded_and_forgets_expired_entries_to_make_room() {
        let cfg = ArpConfig {
            max_entries: 4,
            ..ArpConfig::default()
        };
        let mut c: ArpCache<i32> = ArpCache::new(cfg);
        let ip = |i: u8| Ipv4Address::new(198, 18, 1, i);
        for i in 0..2 {
            assert_eq!(c.resolve(ip(i), 1, t(0)), Resolution::QueuedSendRequest);
        }
        for i in 2..4 {
            assert!(c.learn(ip(i), MAC, true, t(0)).is_empty());
        }
        assert_eq!(c.len(), 4);
        // Full: a new address is refused, and not learned; known ones still work.
        assert_eq!(c.resolve(ip(9), 5, t(1)), Resolution::TableFull(5));
        assert!(c.learn(ip(10), MAC, true, t(1)).is_empty());
        assert_eq!(c.lookup(ip(10), t(1)), None);
        assert_eq!(c.resolve(ip(0), 2, t(1)), Resolution::Queued);
        assert_eq!(c.resolve(ip(2), 3, t(1)), Resolution::Resolved(MAC, 3));
        assert_eq!(c.len(), 4);
        // Once the learned entries expire (forgotten at the next poll) they make room.
        let later = t(0) + cfg.entry_lifetime;
        c.poll(later);
        assert_eq!(c.resolve(ip(9), 6, later), Resolution::QueuedSendRequest);
        assert!(c.len() <= 4);
    }

    #[test]
    fn retries_then_gives_up_and_expires() {
        let cfg = ArpConfig::default();
        let mut c = ArpCache::new(cfg);
        assert_eq!(c.resolve(IP, 7, t(0)), Resolution::QueuedSendRequest);
        assert_eq!(c.next_deadline(), Some(t(1000)));
        assert!(c.poll(t(999)).requests.is_empty());
        assert_eq!(c.poll(t(1000)).requests, vec![IP]);
        assert_eq!(c.poll(t(2000)).requests, vec![IP]);
        let last = c.poll(t(3000));
        assert!(last.requests.is_empty());
        assert_eq!(last.unresolved, vec![7]);
        assert_eq!(c.waiting(), 0);
        // Learned entries expire after their lifetime.
        c.learn(IP, MAC, true, t(0));
        assert_eq!(c.lookup(IP, t(59_999)), Some(MAC));
        assert_eq!(c.lookup(IP, t(60_000)), None);
        c.poll(t(60_000));
        assert_eq!(c.next_deadline(), None);
    }

    #[test]
    fn negative_advice_forgets_a_learned_entry_and_not_a_static_one() {
        let mut c: ArpCache<u32> = ArpCache::new(ArpConfig::default());
        c.learn(IP, MAC, true, t(0));
        let generation = c.generation();
        assert!(c.forget_learned(IP));
        assert!(
            c.generation() > generation,
            "a template built on it goes stale"
        );
        assert_eq!(c.lookup(IP, t(1)), None);
        assert_eq!(c.resolve(IP, 7, t(1)), Resolution::QueuedSendRequest);
        assert!(
            !c.forget_learned(IP),
            "a pending entry is not a learned one"
        );
        c.insert_static(IP, MAC);
        assert!(!c.forget_learned(IP));
        assert_eq!(c.lookup(IP, t(1)), Some(MAC));
    }

    #[test]
    fn queue_is_bounded_and_static_entries_stay() {
        let mut c = ArpCache::new(ArpConfig {
            queue_per_address: 2,
            ..ArpConfig::default()
        });
        c.resolve(IP, 1, t(0));
        c.resolve(IP, 2, t(0));
        assert_eq!(c.resolve(IP, 3, t(0)), Resolution::QueuedDropped(1));
        assert_eq!(c.insert_static(IP, MAC), vec![2, 3]);
        let other = EthernetAddress([2, 0, 0, 0, 0, 0x77]);
        assert!(c.learn(IP, other, true, t(5)).is_empty());
        assert_eq!(c.lookup(IP, t(1 << 40)), Some(MAC));
        // The pending entry's request timer is a lower bound until a poll looks: then no
        // timer is left.
        assert!(c.next_deadline().is_some());
        assert!(c.poll(t(1_000)).requests.is_empty());
        assert_eq!(c.next_deadline(), None);
        assert!(!c.may_be_due(t(1 << 40)));
    }

    #[test]
    fn polls_scan_only_when_a_timer_may_be_due() {
        let mut c: ArpCache<u32> = ArpCache::new(ArpConfig::default());
        assert!(!c.may_be_due(t(0)));
        c.learn(IP, MAC, true, t(0));
        assert_eq!(c.next_deadline(), Some(t(60_000)));
        assert!(!c.may_be_due(t(59_999)));
        // Refreshed: the old expiry stays the bound until a poll looks, finds nothing
        // expired and sets the new one.
        c.learn(IP, MAC, true, t(30_000));
        assert!(c.may_be_due(t(60_000)));
        c.poll(t(60_000));
        assert_eq!(c.lookup(IP, t(60_000)), Some(MAC));
        assert_eq!(c.next_deadline(), Some(t(90_000)));
        c.poll(t(90_000));
        assert_eq!(c.lookup(IP, t(90_000)), None);
        assert_eq!(c.next_deadline(), None);
    }
}
