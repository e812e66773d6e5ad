//! The UDP protocol control block (PCB) table: which socket a received datagram belongs to,
//! with every lookup variant of paper 002 §6.3 ("A Faster UDP", Partridge and Pink).
//!
//! # Bindings and the most specific match
//!
//! A PCB is bound to a local address and port and, once connected, to a foreign address and
//! port ([`Binding`]). The local address may be the wildcard `0.0.0.0`; the foreign pair is
//! either both set or both wildcard. Paper 002 §6.3.1 lists three forms, to which 4.3BSD
//! adds a fourth (a socket connected without choosing a local address):
//!
//! | [`Form`] | binding | paper 002 §6.3.1 | wildcards |
//! |---|---|---|---|
//! | `Full` | `<laddr,lport><faddr,fport>` | type (1) | 0 |
//! | `Foreign` | `<*,lport><faddr,fport>` | — | 1 |
//! | `Local` | `<laddr,lport><*,*>` | type (2) | 1 |
//! | `Port` | `<*,lport><*,*>` | type (3) | 2 |
//!
//! A datagram (source address and port, destination address and port) goes to the matching
//! PCB with the fewest wildcards, as 4.3BSD's `in_pcblookup` does. 4.3BSD breaks the one
//! possible tie, `Foreign` against `Local`, by list order; here the connected PCB (`Foreign`)
//! wins, so that every strategy gives the same answer whatever the list order (and
//! move-to-front changes the order). The forms are thus totally ordered by specificity,
//! `Port < Local < Foreign < Full`. Since no two PCBs share a binding (no `SO_REUSEADDR`:
//! [`PcbError::AddrInUse`]), at most one PCB of each form matches a datagram, and the best
//! match is unique: there are no further ties to break.
//!
//! # Lookup strategies ([`PcbLookup`])
//!
//! - `Linear`: 4.3BSD. Scan the whole list, keeping the best match; stop early only on a
//!   `Full` (no-wildcard) match (paper 002 §6.3.5, first paragraph).
//! - `MoveToFront`: paper 002 §6.3.5. Stop at the first match that is `Full` or that
//!   *hides nothing* (no more specific PCB overlaps it, so nothing could beat it), and move
//!   the PCB found to the front of the doubly linked list (Gary Delp's suggestion).
//! - `Hashed`: the modern variant. Connected PCBs sit in a hash table keyed by their
//!   4-tuple (the local address of a `Foreign` PCB being `0.0.0.0`), the others in a table
//!   keyed by local port, each bucket listing the address-specific PCBs before the wildcard
//!   one. A lookup probes `(dst, dport, src, sport)`, then `(*, dport, src, sport)`, then
//!   walks the port's bucket: O(1) for connected PCBs.
//!
//! # One-behind caches and cache hiding (paper 002 §6.3.1-6.3.4)
//!
//! Independently of the strategy, two one-behind caches may be on ([`PcbConfig`]):
//!
//! - the **receive cache** holds the PCB that last received a datagram;
//! - the **send cache** holds the PCB that last sent one ([`PcbTable::note_sent`]), after
//!   Mogul's observation that half of all datagrams received are replies to the last one
//!   sent (§6.3.2). Like the receive cache, it is consulted on *receive*, after the receive
//!   cache and before the full lookup.
//!
//! A cache hits when the cached PCB's binding, wildcards and all, matches the datagram: a
//! wildcard server socket hits for every client, which is the point of §6.3.1. The danger is
//! **cache hiding**: a cached `<*,lport>` PCB would also match a datagram that a more specific
//! PCB on the same port should get. The rule of §6.3.1, kept exactly here: a PCB *could hide*
//! another when it is less specific and their bindings overlap (some datagram matches
//! both); every PCB keeps a count of the PCBs it could hide, updated whenever a PCB is added,
//! removed, connected or disconnected; a PCB whose count is nonzero is **uncacheable** and
//! never enters a cache; and both caches are emptied on every such change. A cacheable PCB
//! that matches a datagram is then always the best match for it: anything better would match
//! the same datagram, so overlap it and be more specific, so make it uncacheable. The same
//! count is what lets `MoveToFront` stop early.
//!
//! Overlapping PCBs share a local port, so keeping the counts costs O(PCBs on that port) per
//! change; `connect` and `disconnect` (which 4.3BSD's `sendto` calls around every datagram,
//! §6.2) cost the same.
//!
//! # Counting
//!
//! [`PcbStats`] counts lookups, cache hits and misses, and the entries each strategy
//! examined: PCBs compared on the list, or, for `Hashed`, one per hash probe plus one per
//! PCB compared in a port bucket. Cache checks are counted as hits and misses, not as
//! entries examined. [`PcbStats::counters`] maps them onto the stack's [`Counter`]s.

use crate::hash::TableMap;
use std::fmt;

use crate::probe::Counter;
use crate::wire::Ipv4Address;

/// How the table searches for a datagram's PCB (paper 002 §6.3.5); selected by the stack's
/// `pcb_lookup` switch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PcbLookup {
    /// 4.3BSD: scan every PCB, keep the best match, stop early only on an exact match.
    Linear,
    /// Stop at the first match that hides nothing, and move it to the front of the list.
    MoveToFront,
    /// Hash tables on the connected 4-tuple and on the local port.
    Hashed,
}

impl PcbLookup {
    pub const ALL: [PcbLookup; 3] = [PcbLookup::Linear, PcbLookup::MoveToFront, PcbLookup::Hashed];
}

/// The table's settings, changeable at any time ([`PcbTable::set_config`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PcbConfig {
    /// The lookup strategy (the stack's `pcb_lookup` switch).
    pub lookup: PcbLookup,
    /// The one-behind cache of the PCB that last received (`pcb_recv_cache`).
    pub recv_cache: bool,
    /// The one-behind cache of the PCB that last sent (`pcb_send_cache`).
    pub send_cache: bool,
}

impl PcbConfig {
    /// 4.3BSD: linear scan, no caches.
    pub const fn bsd() -> PcbConfig {
        PcbConfig {
            lookup: PcbLookup::Linear,
            recv_cache: false,
            send_cache: false,
        }
    }

    /// Hashed lookup with both caches.
    pub const fn fast() -> PcbConfig {
        PcbConfig {
            lookup: PcbLookup::Hashed,
            recv_cache: true,
            send_cache: true,
        }
    }
}

impl Default for PcbConfig {
    fn default() -> Self {
        PcbConfig::fast()
    }
}

/// The four forms of binding, from least to most specific (see the module documentation;
/// the derived order is the precedence lookups use).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Form {
    /// `<*,lport><*,*>`: paper 002 §6.3.1 type (3).
    Port,
    /// `<laddr,lport><*,*>`: type (2).
    Local,
    /// `<*,lport><faddr,fport>`: connected without a local address.
    Foreign,
    /// `<laddr,lport><faddr,fport>`: type (1).
    Full,
}

/// The addresses a PCB is bound to. Build one with [`Binding::new`], which checks it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Binding {
    /// Local address (`0.0.0.0`: any) and port (never 0).
    pub local: (Ipv4Address, u16),
    /// Foreign address and port when connected (neither is ever a wildcard).
    pub foreign: Option<(Ipv4Address, u16)>,
}

impl Binding {
    /// A checked binding: the local port and, if given, the foreign address and port must be
    /// specified (no ephemeral ports here; a connect to `0.0.0.0` is the caller's to map).
    pub fn new(
        local: (Ipv4Address, u16),
        foreign: Option<(Ipv4Address, u16)>,
    ) -> Result<Binding, PcbError> {
        if local.1 == 0 {
            return Err(PcbError::ZeroPort);
        }
        if let Some((addr, port)) = foreign {
            if port == 0 {
                return Err(PcbError::ZeroPort);
            }
            if addr.is_unspecified() {
                return Err(PcbError::UnspecifiedForeign);
            }
        }
        Ok(Binding { local, foreign })
    }

    pub fn form(&self) -> Form {
        match (self.local.0.is_unspecified(), self.foreign.is_some()) {
            (true, false) => Form::Port,
            (false, false) => Form::Local,
            (true, true) => Form::Foreign,
            (false, true) => Form::Full,
        }
    }

    /// Whether a datagram from `src:src_port` to `dst:dst_port` matches: every field that
    /// is not a wildcard equals the datagram's.
    pub fn matches(
        &self,
        src: Ipv4Address,
        src_port: u16,
        dst: Ipv4Address,
        dst_port: u16,
    ) -> bool {
        self.local.1 == dst_port
            && (self.local.0.is_unspecified() || self.local.0 == dst)
            && self.foreign.is_none_or(|f| f == (src, src_port))
    }

    fn matches_tuple(&self, t: &Tuple) -> bool {
        self.matches(t.src, t.src_port, t.dst, t.dst_port)
    }

    /// Whether some datagram matches both bindings.
    pub fn overlaps(&self, other: &Binding) -> bool {
        let (a, b) = (self.local.0, other.local.0);
        self.local.1 == other.local.1
            && (a.is_unspecified() || b.is_unspecified() || a == b)
            && match (self.foreign, other.foreign) {
                (Some(x), Some(y)) => x == y,
                _ => true,
            }
    }

    /// Whether this binding, if cached, could hide `other` (paper 002 §6.3.1): it is less
    /// specific, and some datagram matches both, which `other` should get.
    pub fn could_hide(&self, other: &Binding) -> bool {
        self.form() < other.form() && self.overlaps(other)
    }
}

/// A handle to a PCB. Stale handles (of removed PCBs) are recognized, never reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PcbId {
    index: u32,
    generation: u32,
}

/// Why a binding was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PcbError {
    /// Another PCB has the identical (local, foreign) binding.
    AddrInUse,
    /// A local or foreign port of 0.
    ZeroPort,
    /// A foreign address of `0.0.0.0`.
    UnspecifiedForeign,
    /// No such PCB (the handle is stale).
    NotFound,
    /// More than `u32::MAX` PCBs.
    TableFull,
}

impl fmt::Display for PcbError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PcbError::AddrInUse => "address already in use",
            PcbError::ZeroPort => "port 0",
            PcbError::UnspecifiedForeign => "foreign address 0.0.0.0",
            PcbError::NotFound => "no such PCB",
            PcbError::TableFull => "PCB table full",
        })
    }
}

impl std::error::Error for PcbError {}

/// What the table has counted since it was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PcbStats {
    /// Receive lookups ([`PcbTable::lookup`]).
    pub lookups: u64,
    /// Lookups that found no PCB.
    pub unmatched: u64,
    /// Lookups the receive cache answered, and those it did not (counted only while on).
    pub recv_cache_hits: u64,
    pub recv_cache_misses: u64,
    /// Lookups the send cache answered, and those it did not (counted only while on, and
    /// only when the receive cache missed).
    pub send_cache_hits: u64,
    pub send_cache_misses: u64,
    /// Entries the strategy examined (see the module documentation).
    pub examined: u64,
    /// PCBs moved to the front of the list by `MoveToFront`.
    pub moved_to_front: u64,
}

impl PcbStats {
    /// The counts since `earlier`, a snapshot of the same table.
    pub fn since(&self, earlier: &PcbStats) -> PcbStats {
        PcbStats {
            lookups: self.lookups.wrapping_sub(earlier.lookups),
            unmatched: self.unmatched.wrapping_sub(earlier.unmatched),
            recv_cache_hits: self.recv_cache_hits.wrapping_sub(earlier.recv_cache_hits),
            recv_cache_misses: self
                .recv_cache_misses
                .wrapping_sub(earlier.recv_cache_misses),
            send_cache_hits: self.send_cache_hits.wrapping_sub(earlier.send_cache_hits),
            send_cache_misses: self
                .send_cache_misses
                .wrapping_sub(earlier.send_cache_misses),
            examined: self.examined.wrapping_sub(earlier.examined),
            moved_to_front: self.moved_to_front.wrapping_sub(earlier.moved_to_front),
        }
    }

    /// The stack counters these counts feed, with their values (add a [`since`] delta).
    ///
    /// [`since`]: PcbStats::since
    pub fn counters(&self) -> [(Counter, u64); 6] {
        [
            (Counter::UdpPcbLookups, self.lookups),
            (Counter::UdpPcbExamined, self.examined),
            (Counter::UdpPcbRecvCacheHits, self.recv_cache_hits),
            (Counter::UdpPcbRecvCacheMisses, self.recv_cache_misses),
            (Counter::UdpPcbSendCacheHits, self.send_cache_hits),
            (Counter::UdpPcbSendCacheMisses, self.send_cache_misses),
        ]
    }
}

/// A received datagram's addresses.
#[derive(Clone, Copy, Debug)]
struct Tuple {
    src: Ipv4Address,
    src_port: u16,
    dst: Ipv4Address,
    dst_port: u16,
}

/// The key of a connected PCB in the hashed table: local address (`0.0.0.0` for the
/// `Foreign` form), local port, foreign address, foreign port.
type ConnKey = (Ipv4Address, u16, Ipv4Address, u16);

struct Pcb<T> {
    binding: Binding,
    value: T,
    /// Neighbours on the doubly linked list the scans walk (paper 002 §6.3.5).
    prev: Option<u32>,
    next: Option<u32>,
    /// How many PCBs this one could hide; nonzero means uncacheable (§6.3.1).
    hides: u32,
}

struct Slot<T> {
    generation: u32,
    pcb: Option<Pcb<T>>,
}

/// The PCBs bound to one local port.
#[derive(Default)]
struct PortGroup {
    /// All of them: the only PCBs one of them can overlap.
    members: Vec<u32>,
    /// The unconnected ones, most specific first for the hashed lookup: the
    /// address-specific ones (`Local`), then the wildcard ones (`Port`).
    unconnected_local: Vec<u32>,
    unconnected_any: Vec<u32>,
}

/// The UDP PCB table. `T` is what the stack keeps per PCB (a socket handle, a socket).
pub struct PcbTable<T> {
    config: PcbConfig,
    slots: Vec<Slot<T>>,
    /// Slots free for reuse.
    free: Vec<u32>,
    len: usize,
    /// The list's first PCB; new PCBs go in front, as 4.3BSD's `insque` after the head.
    head: Option<u32>,
    /// Connected PCBs by 4-tuple.
    connected: TableMap<ConnKey, u32>,
    ports: TableMap<u16, PortGroup>,
    recv_cache: Option<u32>,
    send_cache: Option<u32>,
    stats: PcbStats,
}

impl<T> PcbTable<T> {
    pub fn new(config: PcbConfig) -> PcbTable<T> {
        PcbTable {
            config,
            slots: Vec::new(),
            free: Vec::new(),
            len: 0,
            head: None,
            connected: TableMap::default(),
            ports: TableMap::default(),
            recv_cache: None,
            send_cache: None,
            stats: PcbStats::default(),
        }
    }

    pub fn config(&self) -> PcbConfig {
        self.config
    }

    /// Changes the settings. A cache switched off is emptied; the list order stays.
    pub fn set_config(&mut self, config: PcbConfig) {
        self.config = config;
        if !config.recv_cache {
            self.recv_cache = None;
        }
        if !config.send_cache {
            self.send_cache = None;
        }
    }

    pub fn set_strategy(&mut self, lookup: PcbLookup) {
        self.set_config(PcbConfig {
            lookup,
            ..self.config
        });
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn stats(&self) -> PcbStats {
        self.stats
    }

    /// Adds a PCB bound to `local` and, if given, connected to `foreign`. Refused, and
    /// `value` dropped, if the binding is invalid or another PCB has the identical one.
    pub fn insert(
        &mut self,
        local: (Ipv4Address, u16),
        foreign: Option<(Ipv4Address, u16)>,
        value: T,
    ) -> Result<PcbId, PcbError> {
        let binding = Binding::new(local, foreign)?;
        if self.find_identical(&binding).is_some() {
            return Err(PcbError::AddrInUse);
        }
        let pcb = Pcb {
            binding,
            value,
            prev: None,
            next: None,
            hides: 0,
        };
        let index = match self.free.pop() {
            Some(index) => {
                let Some(slot) = self.slots.get_mut(index as usize) else {
                    return Err(PcbError::TableFull);
                };
                slot.pcb = Some(pcb);
                index
            }
            None => {
                let Ok(index) = u32::try_from(self.slots.len()) else {
                    return Err(PcbError::TableFull);
                };
                self.slots.push(Slot {
                    generation: 0,
                    pcb: Some(pcb),
                });
                index
            }
        };
        self.len += 1;
        self.link_front(index);
        self.index_add(index);
        self.invalidate_caches();
        Ok(self.id_of(index))
    }

    /// Removes a PCB, giving back its value; `None` if the handle is stale.
    pub fn remove(&mut self, id: PcbId) -> Option<T> {
        let index = self.resolve(id)?;
        self.index_remove(index);
        self.unlink(index);
        let slot = self.slots.get_mut(index as usize)?;
        let pcb = slot.pcb.take()?;
        slot.generation = slot.generation.wrapping_add(1);
        self.free.push(index);
        self.len -= 1;
        self.invalidate_caches();
        Some(pcb.value)
    }

    /// Connects a PCB to `foreign`, keeping its local binding (4.3BSD `in_pcbconnect`
    /// without the choice of local address; use [`rebind`](Self::rebind) for that).
    pub fn connect(&mut self, id: PcbId, foreign: (Ipv4Address, u16)) -> Result<(), PcbError> {
        let local = self.binding(id).ok_or(PcbError::NotFound)?.local;
        self.rebind(id, local, Some(foreign))
    }

    /// Disconnects a PCB, keeping its local binding.
    pub fn disconnect(&mut self, id: PcbId) -> Result<(), PcbError> {
        let local = self.binding(id).ok_or(PcbError::NotFound)?.local;
        self.rebind(id, local, None)
    }

    /// Gives a PCB a new binding: the general form of connect and disconnect, for a connect
    /// that also fills in the local address and the disconnect that restores the wildcard
    /// (as 4.3BSD's `udp_output` does around a `sendto`, paper 002 §6.2). The PCB keeps its
    /// place in the list. On error nothing changes.
    pub fn rebind(
        &mut self,
        id: PcbId,
        local: (Ipv4Address, u16),
        foreign: Option<(Ipv4Address, u16)>,
    ) -> Result<(), PcbError> {
        let index = self.resolve(id).ok_or(PcbError::NotFound)?;
        let binding = Binding::new(local, foreign)?;
        let Some(old) = self.pcb(index).map(|p| p.binding) else {
            return Err(PcbError::NotFound);
        };
        if old == binding {
            return Ok(());
        }
        if self.find_identical(&binding).is_some() {
            return Err(PcbError::AddrInUse);
        }
        self.index_remove(index);
        if let Some(pcb) = self.pcb_mut(index) {
            pcb.binding = binding;
        }
        self.index_add(index);
        self.invalidate_caches();
        Ok(())
    }

    pub fn get(&self, id: PcbId) -> Option<&T> {
        let index = self.resolve(id)?;
        self.pcb(index).map(|p| &p.value)
    }

    pub fn get_mut(&mut self, id: PcbId) -> Option<&mut T> {
        let index = self.resolve(id)?;
        self.pcb_mut(index).map(|p| &mut p.value)
    }

    pub fn binding(&self, id: PcbId) -> Option<Binding> {
        let index = self.resolve(id)?;
        self.pcb(index).map(|p| p.binding)
    }

    /// Whether the PCB may enter a cache: it could hide no other PCB (§6.3.1).
    pub fn is_cacheable(&self, id: PcbId) -> Option<bool> {
        let index = self.resolve(id)?;
        self.pcb(index).map(|p| p.hides == 0)
    }

    /// The PCB in the receive cache.
    pub fn recv_cached(&self) -> Option<PcbId> {
        self.recv_cache.map(|i| self.id_of(i))
    }

    /// The PCB in the send cache.
    pub fn send_cached(&self) -> Option<PcbId> {
        self.send_cache.map(|i| self.id_of(i))
    }

    /// The PCBs in list order (the order the scans walk).
    pub fn iter(&self) -> Iter<'_, T> {
        Iter {
            table: self,
            cursor: self.head,
        }
    }

    /// Records that `id` sent a datagram, for the send cache (paper 002 §6.3.2). Call it
    /// after the send is over (after 4.3BSD's pseudo-disconnect, which would empty the
    /// cache). Returns whether the PCB was cached: the cache is on and the PCB cacheable.
    pub fn note_sent(&mut self, id: PcbId) -> bool {
        if !self.config.send_cache {
            return false;
        }
        match self.resolve(id) {
            Some(index) if self.pcb(index).is_some_and(|p| p.hides == 0) => {
                self.send_cache = Some(index);
                true
            }
            _ => false,
        }
    }

    /// The PCB a datagram from `src:src_port` to `dst:dst_port` belongs to: the most
    /// specific match, from the caches when they are on and hit, else by the strategy.
    pub fn lookup(
        &mut self,
        src: Ipv4Address,
        src_port: u16,
        dst: Ipv4Address,
        dst_port: u16,
    ) -> Option<(PcbId, &mut T)> {
        let t = Tuple {
            src,
            src_port,
            dst,
            dst_port,
        };
        let index = self.lookup_index(&t)?;
        // One look at the slot for both the handle and the value (`id_of` and `pcb_mut`
        // would each find it again).
        let slot = self.slots.get_mut(index as usize)?;
        let id = PcbId {
            index,
            generation: slot.generation,
        };
        slot.pcb.as_mut().map(|p| (id, &mut p.value))
    }

    fn lookup_index(&mut self, t: &Tuple) -> Option<u32> {
        self.stats.lookups += 1;
        if self.config.recv_cache {
            if let Some(index) = self.recv_cache.filter(|&i| self.cached_matches(i, t)) {
                self.stats.recv_cache_hits += 1;
                return Some(index);
            }
            self.stats.recv_cache_misses += 1;
        }
        if self.config.send_cache {
            if let Some(index) = self.send_cache.filter(|&i| self.cached_matches(i, t)) {
                self.stats.send_cache_hits += 1;
                if self.config.recv_cache {
                    self.recv_cache = Some(index);
                }
                return Some(index);
            }
            self.stats.send_cache_misses += 1;
        }
        let found = match self.config.lookup {
            PcbLookup::Linear => self.scan(t, false),
            PcbLookup::MoveToFront => {
                let found = self.scan(t, true);
                if let Some(index) = found {
                    if self.head != Some(index) {
                        self.unlink(index);
                        self.link_front(index);
                        self.stats.moved_to_front += 1;
                    }
                }
                found
            }
            PcbLookup::Hashed => self.hashed(t),
        };
        match found {
            Some(index) => {
                if self.config.recv_cache && self.pcb(index).is_some_and(|p| p.hides == 0) {
                    self.recv_cache = Some(index);
                }
            }
            None => self.stats.unmatched += 1,
        }
        found
    }

    /// A cache hit: the cached PCB's binding matches. Caches hold only cacheable PCBs and are
    /// emptied on every change, so a hit is the best match (see the module documentation).
    fn cached_matches(&self, index: u32, t: &Tuple) -> bool {
        self.pcb(index)
            .is_some_and(|p| p.hides == 0 && p.binding.matches_tuple(t))
    }

    /// The list scans: 4.3BSD's (`early_exit` false) and paper 002 §6.3.5's.
    fn scan(&mut self, t: &Tuple, early_exit: bool) -> Option<u32> {
        let mut best: Option<(u32, Form)> = None;
        let mut examined = 0;
        let mut cursor = self.head;
        while let Some(index) = cursor {
            let Some(pcb) = self.pcb(index) else { break };
            examined += 1;
            cursor = pcb.next;
            if !pcb.binding.matches_tuple(t) {
                continue;
            }
            let form = pcb.binding.form();
            // An exact match cannot be beaten; nor, with the marking, can a match that
            // hides nothing.
            if form == Form::Full || (early_exit && pcb.hides == 0) {
                best = Some((index, form));
                break;
            }
            if best.is_none_or(|(_, f)| form > f) {
                best = Some((index, form));
            }
        }
        self.stats.examined += examined;
        best.map(|(index, _)| index)
    }

    /// The hashed lookup: the two connected forms by 4-tuple, then the port's bucket of
    /// unconnected PCBs, most specific first.
    fn hashed(&mut self, t: &Tuple) -> Option<u32> {
        let mut examined = 1;
        let mut found = self
            .connected
            .get(&(t.dst, t.dst_port, t.src, t.src_port))
            .copied();
        if found.is_none() {
            examined += 1;
            found = self
                .connected
                .get(&(Ipv4Address::UNSPECIFIED, t.dst_port, t.src, t.src_port))
                .copied();
        }
        if found.is_none() {
            if let Some(group) = self.ports.get(&t.dst_port) {
                for &index in group.unconnected_local.iter().chain(&group.unconnected_any) {
                    examined += 1;
                    if self.pcb(index).is_some_and(|p| p.binding.matches_tuple(t)) {
                        found = Some(index);
                        break;
                    }
                }
            }
        }
        self.stats.examined += examined;
        found
    }

    fn invalidate_caches(&mut self) {
        self.recv_cache = None;
        self.send_cache = None;
    }

    fn id_of(&self, index: u32) -> PcbId {
        PcbId {
            index,
            generation: self.slots.get(index as usize).map_or(0, |s| s.generation),
        }
    }

    fn resolve(&self, id: PcbId) -> Option<u32> {
        let slot = self.slots.get(id.index as usize)?;
        (slot.generation == id.generation && slot.pcb.is_some()).then_some(id.index)
    }

    fn pcb(&self, index: u32) -> Option<&Pcb<T>> {
        self.slots.get(index as usize)?.pcb.as_ref()
    }

    fn pcb_mut(&mut self, index: u32) -> Option<&mut Pcb<T>> {
        self.slots.get_mut(index as usize)?.pcb.as_mut()
    }

    /// The PCB with exactly this binding.
    fn find_identical(&self, binding: &Binding) -> Option<u32> {
        if let Some((faddr, fport)) = binding.foreign {
            let (laddr, lport) = binding.local;
            return self.connected.get(&(laddr, lport, faddr, fport)).copied();
        }
        let group = self.ports.get(&binding.local.1)?;
        group
            .unconnected_local
            .iter()
            .chain(&group.unconnected_any)
            .copied()
            .find(|&i| self.pcb(i).is_some_and(|p| p.binding == *binding))
    }

    /// Enters a PCB, already holding its binding, in the port and connected indexes, and
    /// counts what it could hide and what could hide it (§6.3.1).
    fn index_add(&mut self, index: u32) {
        let Some(binding) = self.pcb(index).map(|p| p.binding) else {
            return;
        };
        let form = binding.form();
        let group = self.ports.entry(binding.local.1).or_default();
        let mut hides = 0;
        for &other in &group.members {
            let Some(pcb) = self
                .slots
                .get_mut(other as usize)
                .and_then(|s| s.pcb.as_mut())
            else {
                continue;
            };
            if pcb.binding.overlaps(&binding) {
                match pcb.binding.form().cmp(&form) {
                    std::cmp::Ordering::Less => pcb.hides = pcb.hides.saturating_add(1),
                    std::cmp::Ordering::Greater => hides += 1,
                    // Overlapping bindings of one form are identical, which insert refuses.
                    std::cmp::Ordering::Equal => {}
                }
            }
        }
        group.members.push(index);
        match form {
            Form::Local => group.unconnected_local.push(index),
            Form::Port => group.unconnected_any.push(index),
            Form::Foreign | Form::Full => {}
        }
        if let Some((faddr, fport)) = binding.foreign {
            let (laddr, lport) = binding.local;
            self.connected.insert((laddr, lport, faddr, fport), index);
        }
        if let Some(pcb) = self.pcb_mut(index) {
            pcb.hides = hides;
        }
    }

    /// Takes a PCB out of the indexes, and out of the counts of the PCBs it made
    /// uncacheable.
    fn index_remove(&mut self, index: u32) {
        let Some(binding) = self.pcb(index).map(|p| p.binding) else {
            return;
        };
        let form = binding.form();
        if let Some(group) = self.ports.get_mut(&binding.local.1) {
            for list in [
                &mut group.members,
                &mut group.unconnected_local,
                &mut group.unconnected_any,
            ] {
                if let Some(at) = list.iter().position(|&i| i == index) {
                    list.swap_remove(at);
                }
            }
            for &other in &group.members {
                let Some(pcb) = self
                    .slots
                    .get_mut(other as usize)
                    .and_then(|s| s.pcb.as_mut())
                else {
                    continue;
                };
                if pcb.binding.form() < form && pcb.binding.overlaps(&binding) {
                    pcb.hides = pcb.hides.saturating_sub(1);
                }
            }
            if group.members.is_empty() {
                self.ports.remove(&binding.local.1);
            }
        }
        if let Some((faddr, fport)) = binding.foreign {
            let key = (binding.local.0, binding.local.1, faddr, fport);
            if self.connected.get(&key) == Some(&index) {
                self.connected.remove(&key);
            }
        }
    }

    fn link_front(&mut self, index: u32) {
        let old_head = self.head;
        if let Some(pcb) = self.pcb_mut(index) {
            pcb.prev = None;
            pcb.next = old_head;
        }
        if let Some(next) = old_head.and_then(|h| self.pcb_mut(h)) {
            next.prev = Some(index);
        }
        self.head = Some(index);
    }

    fn unlink(&mut self, index: u32) {
        let Some((prev, next)) = self.pcb_mut(index).map(|p| (p.prev.take(), p.next.take())) else {
            return;
        };
        match prev {
            Some(p) => {
                if let Some(pcb) = self.pcb_mut(p) {
                    pcb.next = next;
                }
            }
            None => self.head = next,
        }
        if let Some(pcb) = next.and_then(|n| self.pcb_mut(n)) {
            pcb.prev = prev;
        }
    }

    /// Checks every internal invariant against a recomputation from scratch.
    #[cfg(test)]
    fn check_invariants(&self) {
        // The list holds every PCB once, with consistent back links.
        let mut on_list = Vec::new();
        let mut prev = None;
        let mut cursor = self.head;
        while let Some(i) = cursor {
            let p = self.pcb(i).expect("listed slot is occupied");
            assert_eq!(p.prev, prev, "back link of {i}");
            assert!(!on_list.contains(&i), "cycle at {i}");
            on_list.push(i);
            prev = Some(i);
            cursor = p.next;
        }
        let occupied: Vec<u32> = (0..self.slots.len() as u32)
            .filter(|&i| self.pcb(i).is_some())
            .collect();
        assert_eq!(on_list.len(), self.len);
        assert_eq!(occupied.len(), self.len);
        for &i in &occupied {
            let p = self.pcb(i).unwrap();
            let hides = occupied
                .iter()
                .filter(|&&j| j != i && p.binding.could_hide(&self.pcb(j).unwrap().binding))
                .count() as u32;
            assert_eq!(p.hides, hides, "hide count of {:?}", p.binding);
            let group = &self.ports[&p.binding.local.1];
            assert_eq!(group.members.iter().filter(|&&j| j == i).count(), 1);
            let key = p
                .binding
                .foreign
                .map(|f| (p.binding.local.0, p.binding.local.1, f.0, f.1));
            if let Some(key) = key {
                assert_eq!(self.connected.get(&key), Some(&i));
            }
        }
        let members: usize = self.ports.values().map(|g| g.members.len()).sum();
        assert_eq!(members, self.len);
        assert!(self.ports.values().all(|g| !g.members.is_empty()));
        let unconnected: usize = self
            .ports
            .values()
            .map(|g| g.unconnected_local.len() + g.unconnected_any.len())
            .sum();
        assert_eq!(unconnected + self.connected.len(), self.len);
        for cached in [self.recv_cache, self.send_cache].into_iter().flatten() {
            assert_eq!(
                self.pcb(cached).map(|p| p.hides),
                Some(0),
                "cached and cacheable"
            );
        }
        assert!(self.config.recv_cache || self.recv_cache.is_none());
        assert!(self.config.send_cache || self.send_cache.is_none());
    }
}

/// The PCBs in list order: handle, binding, value.
pub struct Iter<'a, T> {
    table: &'a PcbTable<T>,
    cursor: Option<u32>,
}

impl<'a, T> Iterator for Iter<'a, T> {
    type Item = (PcbId, Binding, &'a T);

    fn next(&mut self) -> Option<Self::Item> {
        let index = self.cursor?;
        let pcb = self.table.pcb(index)?;
        self.cursor = pcb.next;
        Some((self.table.id_of(index), pcb.binding, &pcb.value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    const fn ip(a: u8, b: u8, c: u8, d: u8) -> Ipv4Address {
        Ipv4Address::new(a, b, c, d)
    }

    type Endpoint = (Ipv4Address, u16);

    const ANY: Ipv4Address = Ipv4Address::UNSPECIFIED;
    // Our addresses, and peers' (198.18.0.0/15, DESIGN.md §6).
    const L1: Ipv4Address = ip(198, 18, 0, 1);
    const L2: Ipv4Address = ip(198, 18, 0, 2);
    const X: Ipv4Address = ip(198, 19, 0, 10);
    const Y: Ipv4Address = ip(198, 19, 0, 20);
    const Z: Ipv4Address = ip(198, 19, 0, 30);
    const P: u16 = 53;

    /// Every combination of the three switches.
    fn all_configs() -> Vec<PcbConfig> {
        let mut v = Vec::new();
        for lookup in PcbLookup::ALL {
            for recv_cache in [false, true] {
                for send_cache in [false, true] {
                    v.push(PcbConfig {
                        lookup,
                        recv_cache,
                        send_cache,
                    });
                }
            }
        }
        v
    }

    /// The reference: every PCB scanned, the most specific match taken, written apart from
    /// the table's code. Specificity is a score, as Linux's `compute_score`: 1 for a
    /// local address, 2 for a foreign address and port, so a connected PCB beats an
    /// address-bound one (the documented tie-break).
    #[derive(Default)]
    struct Reference {
        pcbs: Vec<(PcbId, Endpoint, Option<Endpoint>)>,
    }

    impl Reference {
        fn check(
            local: (Ipv4Address, u16),
            foreign: Option<(Ipv4Address, u16)>,
        ) -> Result<(), PcbError> {
            if local.1 == 0 || foreign.is_some_and(|f| f.1 == 0) {
                return Err(PcbError::ZeroPort);
            }
            if foreign.is_some_and(|f| f.0 == ANY) {
                return Err(PcbError::UnspecifiedForeign);
            }
            Ok(())
        }

        fn in_use(
            &self,
            except: Option<PcbId>,
            local: (Ipv4Address, u16),
            foreign: Option<(Ipv4Address, u16)>,
        ) -> bool {
            self.pcbs
                .iter()
                .any(|&(id, l, f)| Some(id) != except && l == local && f == foreign)
        }

        fn lookup(
            &self,
            src: Ipv4Address,
            sport: u16,
            dst: Ipv4Address,
            dport: u16,
        ) -> Option<PcbId> {
            let mut best: Option<(u32, PcbId)> = None;
            for &(id, (laddr, lport), foreign) in &self.pcbs {
                if lport != dport {
                    continue;
                }
                let mut score = 0;
                if laddr != ANY {
                    if laddr != dst {
                        continue;
                    }
                    score += 1;
                }
                if let Some((faddr, fport)) = foreign {
                    if (faddr, fport) != (src, sport) {
                        continue;
                    }
                    score += 2;
                }
                match best {
                    Some((s, _)) if s > score => {}
                    Some((s, _)) if s == score => panic!("reference found a tie"),
                    _ => best = Some((score, id)),
                }
            }
            best.map(|(_, id)| id)
        }
    }

    // ----- Scenario harness -----

    #[derive(Clone, Copy, Debug)]
    enum Step {
        /// Adds a PCB under a name.
        Bind(&'static str, (Ipv4Address, u16), Option<(Ipv4Address, u16)>),
        Remove(&'static str),
        Connect(&'static str, (Ipv4Address, u16)),
        Disconnect(&'static str),
        Rebind(&'static str, (Ipv4Address, u16), Option<(Ipv4Address, u16)>),
        Sent(&'static str),
        /// A datagram (src, sport, dst, dport) and who must get it; delivered twice, so
        /// that the second goes through any cache the first filled.
        Recv((Ipv4Address, u16, Ipv4Address, u16), Option<&'static str>),
    }

    /// Runs a scenario under every combination of the switches, checking each delivery
    /// against the expectation and the reference, and the invariants after every step.
    fn run(steps: &[Step]) {
        for config in all_configs() {
            let mut table: PcbTable<&'static str> = PcbTable::new(config);
            let mut reference = Reference::default();
            let mut ids: HashMap<&'static str, PcbId> = HashMap::new();
            for (n, step) in steps.iter().enumerate() {
                let at = format!("{config:?}, step {n}: {step:?}");
                match *step {
                    Step::Bind(name, local, foreign) => {
                        let id = table.insert(local, foreign, name).expect(&at);
                        ids.insert(name, id);
                        reference.pcbs.push((id, local, foreign));
                    }
                    Step::Remove(name) => {
                        assert_eq!(table.remove(ids[name]), Some(name), "{at}");
                        reference.pcbs.retain(|p| p.0 != ids[name]);
                    }
                    Step::Connect(name, foreign) => {
                        table.connect(ids[name], foreign).expect(&at);
                        reference
                            .pcbs
                            .iter_mut()
                            .find(|p| p.0 == ids[name])
                            .unwrap()
                            .2 = Some(foreign);
                    }
                    Step::Disconnect(name) => {
                        table.disconnect(ids[name]).expect(&at);
                        reference
                            .pcbs
                            .iter_mut()
                            .find(|p| p.0 == ids[name])
                            .unwrap()
                            .2 = None;
                    }
                    Step::Rebind(name, local, foreign) => {
                        table.rebind(ids[name], local, foreign).expect(&at);
                        let p = reference
                            .pcbs
                            .iter_mut()
                            .find(|p| p.0 == ids[name])
                            .unwrap();
                        (p.1, p.2) = (local, foreign);
                    }
                    Step::Sent(name) => {
                        table.note_sent(ids[name]);
                    }
                    Step::Recv((src, sport, dst, dport), expected) => {
                        let want = expected.map(|name| ids[name]);
                        assert_eq!(
                            reference.lookup(src, sport, dst, dport),
                            want,
                            "reference, {at}"
                        );
                        for _ in 0..2 {
                            let got = table.lookup(src, sport, dst, dport).map(|(id, v)| (id, *v));
                            assert_eq!(got, expected.map(|name| (ids[name], name)), "{at}");
                            table.check_invariants();
                        }
                    }
                }
                table.check_invariants();
            }
        }
    }

    use Step::*;

    // ----- Paper 002 §6.3.1: cache hiding, under all twelve settings -----

    /// §6.3.1's example: a datagram matches a type (3) PCB, which a cache keeps; the next
    /// matches it too, but also a type (1) PCB, which must get it.
    #[test]
    fn wildcard_port_pcb_never_hides_a_connected_one() {
        run(&[
            Bind("server", (ANY, P), None),
            Bind("conn", (L1, P), Some((Y, 2000))),
            Recv((X, 1000, L1, P), Some("server")),
            Recv((Y, 2000, L1, P), Some("conn")),
            Recv((X, 1000, L1, P), Some("server")),
            Recv((Y, 2000, L2, P), Some("server")),
            Recv((Y, 2001, L1, P), Some("server")),
            Recv((Y, 2000, L1, P), Some("conn")),
        ]);
    }

    /// The same, with the connected PCB added after the wildcard one was cached.
    #[test]
    fn pcb_added_after_the_wildcard_was_cached() {
        run(&[
            Bind("server", (ANY, P), None),
            Recv((X, 1000, L1, P), Some("server")),
            Sent("server"),
            Bind("conn", (L1, P), Some((Y, 2000))),
            Recv((Y, 2000, L1, P), Some("conn")),
            Recv((X, 1000, L1, P), Some("server")),
        ]);
    }

    /// Type (2) against type (3): a local-address-specific PCB and a wildcard-address one.
    #[test]
    fn local_address_pcb_against_wildcard_address_pcb() {
        for order in [true, false] {
            let (a, b) = (Bind("any", (ANY, P), None), Bind("l1", (L1, P), None));
            let binds = if order { [a, b] } else { [b, a] };
            run(&[
                binds[0],
                binds[1],
                Recv((X, 1000, L2, P), Some("any")),
                Recv((X, 1000, L1, P), Some("l1")),
                Recv((X, 1000, L2, P), Some("any")),
                Sent("any"),
                Recv((Y, 7, L1, P), Some("l1")),
                Sent("l1"),
                Recv((Y, 7, L2, P), Some("any")),
                Remove("l1"),
                Recv((X, 1000, L1, P), Some("any")),
            ]);
        }
    }

    /// All four forms on one port: each datagram goes to the most specific match.
    #[test]
    fn all_four_forms_on_one_port() {
        run(&[
            Bind("port", (ANY, P), None),
            Bind("local", (L1, P), None),
            Bind("foreign", (ANY, P), Some((X, 1000))),
            Bind("full", (L1, P), Some((Y, 2000))),
            Recv((Y, 2000, L1, P), Some("full")),
            Recv((Y, 2000, L2, P), Some("port")),
            Recv((X, 1000, L1, P), Some("foreign")),
            Recv((X, 1000, L2, P), Some("foreign")),
            Recv((Z, 1000, L1, P), Some("local")),
            Recv((Z, 1000, L2, P), Some("port")),
            Recv((Z, 1000, L2, P + 1), None),
            Remove("foreign"),
            Recv((X, 1000, L1, P), Some("local")),
            Remove("local"),
            Recv((X, 1000, L1, P), Some("port")),
            Recv((Y, 2000, L1, P), Some("full")),
            Remove("full"),
            Recv((Y, 2000, L1, P), Some("port")),
        ]);
    }

    /// The one tie of 4.3BSD's wildcard count: the connected PCB wins.
    #[test]
    fn connected_wildcard_local_beats_address_bound() {
        run(&[
            Bind("local", (L1, P), None),
            Bind("foreign", (ANY, P), Some((X, 1000))),
            Recv((X, 1000, L1, P), Some("foreign")),
            Recv((Z, 1000, L1, P), Some("local")),
            Recv((X, 1000, L2, P), Some("foreign")),
            Sent("local"),
            Recv((X, 1000, L1, P), Some("foreign")),
        ]);
    }

    /// Connecting and disconnecting change a PCB's specificity, and with it who hides whom.
    #[test]
    fn connect_and_disconnect_change_specificity() {
        run(&[
            Bind("any", (ANY, P), None),
            Bind("l1", (L1, P), None),
            Recv((X, 1000, L1, P), Some("l1")),
            Connect("l1", (Y, 2000)),
            Recv((X, 1000, L1, P), Some("any")),
            Recv((Y, 2000, L1, P), Some("l1")),
            Disconnect("l1"),
            Recv((X, 1000, L1, P), Some("l1")),
            Recv((X, 1000, L2, P), Some("any")),
            Connect("any", (X, 1000)),
            Recv((X, 1000, L2, P), Some("any")),
            Recv((X, 1000, L1, P), Some("any")),
            Recv((Z, 1000, L1, P), Some("l1")),
            Recv((Z, 1000, L2, P), None),
            Disconnect("any"),
            Recv((X, 1000, L1, P), Some("l1")),
            Recv((Z, 1000, L2, P), Some("any")),
        ]);
    }

    /// 4.3BSD's sendto (paper 002 §6.2): connect, send, disconnect. While connected the
    /// socket cannot receive from anyone else, the race the paper describes; afterwards the
    /// caches must not remember the connected binding.
    #[test]
    fn sendto_pseudo_connect_per_datagram() {
        run(&[
            Bind("server", (ANY, P), None),
            Bind("other", (ANY, P + 1), None),
            Recv((X, 1000, L1, P), Some("server")),
            Recv((X, 1000, L1, P + 1), Some("other")),
            Rebind("server", (L1, P), Some((Y, 2000))),
            Sent("server"),
            Recv((X, 1000, L1, P), None),
            Recv((Y, 2000, L1, P), Some("server")),
            Rebind("server", (ANY, P), None),
            Sent("server"),
            Recv((X, 1000, L2, P), Some("server")),
            Recv((Y, 2000, L1, P), Some("server")),
            Recv((X, 1000, L1, P + 1), Some("other")),
        ]);
    }

    /// Mogul's send cache (§6.3.2) obeys the same marking: a wildcard PCB that sent is not
    /// cached while it could hide a connected PCB, whose peer's reply must reach it.
    #[test]
    fn send_cache_never_hides() {
        run(&[
            Bind("server", (ANY, P), None),
            Bind("conn", (L1, P), Some((X, 1000))),
            Sent("server"),
            Recv((X, 1000, L1, P), Some("conn")),
            Recv((Z, 1000, L1, P), Some("server")),
            Sent("server"),
            Recv((X, 1000, L1, P), Some("conn")),
            Remove("conn"),
            Sent("server"),
            Recv((X, 1000, L1, P), Some("server")),
            Bind("conn2", (ANY, P), Some((X, 1000))),
            Recv((X, 1000, L1, P), Some("conn2")),
            Recv((X, 1001, L1, P), Some("server")),
        ]);
    }

    /// A cached PCB removed, and a new one with the same binding in its slot.
    #[test]
    fn cached_pcb_removed_and_replaced() {
        run(&[
            Bind("old", (ANY, P), None),
            Recv((X, 1000, L1, P), Some("old")),
            Sent("old"),
            Remove("old"),
            Recv((X, 1000, L1, P), None),
            Bind("new", (ANY, P), None),
            Recv((X, 1000, L1, P), Some("new")),
        ]);
    }

    // ----- Counting, move-to-front, hashing -----

    fn filled_table(config: PcbConfig) -> (PcbTable<u32>, Vec<PcbId>) {
        let mut t = PcbTable::new(config);
        let ids = (0..3u16)
            .map(|i| t.insert((ANY, 100 + i), None, u32::from(i)).unwrap())
            .collect();
        (t, ids)
    }

    #[test]
    fn receive_cache_hits_and_misses() {
        let config = PcbConfig {
            lookup: PcbLookup::Linear,
            recv_cache: true,
            send_cache: false,
        };
        let (mut t, ids) = filled_table(config);
        assert_eq!(t.lookup(X, 1, L1, 100).map(|r| r.0), Some(ids[0]));
        assert_eq!(t.recv_cached(), Some(ids[0]));
        assert_eq!(t.lookup(Y, 2, L2, 100).map(|r| r.0), Some(ids[0]));
        assert_eq!(t.lookup(X, 1, L1, 101).map(|r| r.0), Some(ids[1]));
        assert_eq!(t.lookup(X, 1, L1, 999).map(|r| r.0), None);
        let s = t.stats();
        assert_eq!(
            (s.lookups, s.recv_cache_hits, s.recv_cache_misses),
            (4, 1, 3)
        );
        assert_eq!(
            (s.send_cache_hits, s.send_cache_misses, s.unmatched),
            (0, 0, 1)
        );
        // A miss scans the whole list (no exact match); a hit examines nothing.
        assert_eq!(s.examined, 9);
        // Any change empties the cache.
        t.insert((ANY, 200), None, 9).unwrap();
        assert_eq!(t.recv_cached(), None);
        // An uncacheable PCB is not cached.
        let specific = t.insert((L1, 101), None, 7).unwrap();
        assert_eq!(t.is_cacheable(ids[1]), Some(false));
        assert_eq!(t.is_cacheable(specific), Some(true));
        assert_eq!(t.lookup(X, 1, L2, 101).map(|r| r.0), Some(ids[1]));
        assert_eq!(t.recv_cached(), None);
        let counters = t.stats().counters();
        assert_eq!(counters[0], (Counter::UdpPcbLookups, 5));
        assert_eq!(counters[2], (Counter::UdpPcbRecvCacheHits, 1));
    }

    /// The marking follows the table both ways: a wildcard PCB is uncacheable while a more
    /// specific PCB overlaps it, and cacheable (so cached, so hit) once that one is gone or
    /// no longer overlaps.
    #[test]
    fn marking_is_undone_when_the_hidden_pcb_goes() {
        for lookup in PcbLookup::ALL {
            let mut t = PcbTable::new(PcbConfig {
                lookup,
                recv_cache: true,
                send_cache: false,
            });
            let any = t.insert((ANY, P), None, 0).unwrap();
            let l1 = t.insert((L1, P), None, 1).unwrap();
            let conn = t.insert((L1, P), Some((X, 1000)), 2).unwrap();
            assert_eq!(t.is_cacheable(any), Some(false));
            assert_eq!(t.is_cacheable(l1), Some(false));
            assert_eq!(t.is_cacheable(conn), Some(true));
            assert_eq!(t.remove(l1), Some(1));
            assert_eq!(t.is_cacheable(any), Some(false));
            // Connected elsewhere, "conn" no longer overlaps "any".
            t.rebind(conn, (L1, P + 1), Some((X, 1000))).unwrap();
            assert_eq!(t.is_cacheable(any), Some(true));
            t.rebind(conn, (L1, P), Some((X, 1000))).unwrap();
            assert_eq!(t.is_cacheable(any), Some(false));
            t.disconnect(conn).unwrap();
            assert_eq!(t.is_cacheable(any), Some(false));
            assert_eq!(t.is_cacheable(conn), Some(true));
            assert_eq!(t.remove(conn), Some(2));
            assert_eq!(t.is_cacheable(any), Some(true));
            let before = t.stats();
            for _ in 0..3 {
                assert_eq!(t.lookup(X, 1000, L1, P).map(|r| r.0), Some(any));
            }
            let s = t.stats().since(&before);
            assert_eq!(
                (s.recv_cache_hits, s.recv_cache_misses),
                (2, 1),
                "{lookup:?}"
            );
        }
    }

    #[test]
    fn send_cache_hits_and_misses() {
        let config = PcbConfig {
            lookup: PcbLookup::Hashed,
            recv_cache: true,
            send_cache: true,
        };
        let (mut t, ids) = filled_table(config);
        let before = t.stats();
        assert!(t.note_sent(ids[2]));
        assert_eq!(t.send_cached(), Some(ids[2]));
        // The reply: a receive-cache miss (empty), a send-cache hit, which fills the
        // receive cache.
        assert_eq!(t.lookup(X, 1, L1, 102).map(|r| r.0), Some(ids[2]));
        assert_eq!(t.recv_cached(), Some(ids[2]));
        assert_eq!(t.lookup(X, 1, L1, 102).map(|r| r.0), Some(ids[2]));
        assert_eq!(t.lookup(X, 1, L1, 100).map(|r| r.0), Some(ids[0]));
        let s = t.stats().since(&before);
        assert_eq!((s.recv_cache_hits, s.recv_cache_misses), (1, 2));
        assert_eq!((s.send_cache_hits, s.send_cache_misses), (1, 1));
        assert_eq!(s.lookups, 3);
        // Off, nothing is cached.
        t.set_config(PcbConfig::bsd());
        assert_eq!((t.recv_cached(), t.send_cached()), (None, None));
        assert!(!t.note_sent(ids[0]));
    }

    #[test]
    fn move_to_front_reorders_the_list() {
        let config = PcbConfig {
            lookup: PcbLookup::MoveToFront,
            recv_cache: false,
            send_cache: false,
        };
        let (mut t, ids) = filled_table(config);
        let order = |t: &PcbTable<u32>| t.iter().map(|(id, _, _)| id).collect::<Vec<_>>();
        // New PCBs go in front, as 4.3BSD's.
        assert_eq!(order(&t), vec![ids[2], ids[1], ids[0]]);
        let before = t.stats();
        assert_eq!(t.lookup(X, 1, L1, 100).map(|r| r.0), Some(ids[0]));
        assert_eq!(order(&t), vec![ids[0], ids[2], ids[1]]);
        // Found last, then first: a wildcard that hides nothing ends the scan at once.
        assert_eq!(t.lookup(X, 1, L1, 100).map(|r| r.0), Some(ids[0]));
        let s = t.stats().since(&before);
        assert_eq!((s.examined, s.moved_to_front), (3 + 1, 1));
        assert_eq!(t.lookup(X, 1, L1, 101).map(|r| r.0), Some(ids[1]));
        assert_eq!(order(&t), vec![ids[1], ids[0], ids[2]]);
        // Linear keeps the order and scans to the end for a wildcard match.
        t.set_strategy(PcbLookup::Linear);
        let before = t.stats();
        assert_eq!(t.lookup(X, 1, L1, 101).map(|r| r.0), Some(ids[1]));
        assert_eq!(order(&t), vec![ids[1], ids[0], ids[2]]);
        assert_eq!(t.stats().since(&before).examined, 3);
    }

    /// With a PCB that could hide another, the early exit must pass it by.
    #[test]
    fn early_exit_skips_a_hiding_wildcard() {
        let config = PcbConfig {
            lookup: PcbLookup::MoveToFront,
            recv_cache: false,
            send_cache: false,
        };
        let mut t = PcbTable::new(config);
        let conn = t.insert((L1, P), Some((X, 1000)), "conn").unwrap();
        let any = t.insert((ANY, P), None, "any").unwrap();
        assert_eq!(t.is_cacheable(any), Some(false));
        // "any" is first on the list and matches, but hides "conn".
        assert_eq!(t.lookup(X, 1000, L1, P).map(|r| r.0), Some(conn));
        assert_eq!(t.stats().examined, 2);
        // For another peer nothing better exists, but "any" is marked: a full scan.
        assert_eq!(t.lookup(Y, 1000, L1, P).map(|r| r.0), Some(any));
        assert_eq!(t.stats().examined, 4);
    }

    #[test]
    fn hashed_lookup_examines_a_constant_number_of_entries() {
        let mut tables: Vec<PcbTable<u32>> = [PcbLookup::Hashed, PcbLookup::Linear]
            .into_iter()
            .map(|lookup| {
                PcbTable::new(PcbConfig {
                    lookup,
                    recv_cache: false,
                    send_cache: false,
                })
            })
            .collect();
        let peer = |i: u32| (ip(198, 19, (i >> 8) as u8, i as u8), 5000 + i as u16);
        for t in &mut tables {
            t.insert((ANY, P), None, u32::MAX).unwrap();
            for i in 0..1000 {
                t.insert((L1, 1000 + (i % 7) as u16), Some(peer(i)), i)
                    .unwrap();
            }
        }
        for t in &mut tables {
            for i in 0..1000 {
                let (a, p) = peer(i);
                assert_eq!(
                    t.lookup(a, p, L1, 1000 + (i % 7) as u16).map(|r| *r.1),
                    Some(i)
                );
            }
            assert_eq!(t.lookup(X, 1, L1, P).map(|r| *r.1), Some(u32::MAX));
        }
        // One probe per connected PCB; the wildcard: two probes and one bucket entry.
        assert_eq!(tables[0].stats().examined, 1000 + 3);
        // The linear scan walks about half the list for each.
        assert!(tables[1].stats().examined > 400_000);
    }

    #[test]
    fn bad_bindings_and_stale_handles_are_refused() {
        let mut t = PcbTable::new(PcbConfig::fast());
        assert_eq!(t.insert((L1, 0), None, 0), Err(PcbError::ZeroPort));
        assert_eq!(t.insert((L1, P), Some((X, 0)), 0), Err(PcbError::ZeroPort));
        assert_eq!(
            t.insert((L1, P), Some((ANY, 9)), 0),
            Err(PcbError::UnspecifiedForeign)
        );
        let a = t.insert((L1, P), None, 1).unwrap();
        assert_eq!(t.insert((L1, P), None, 2), Err(PcbError::AddrInUse));
        let b = t.insert((ANY, P), Some((X, 9)), 3).unwrap();
        assert_eq!(t.connect(a, (X, 9)), Ok(()));
        assert_eq!(t.rebind(b, (L1, P), Some((X, 9))), Err(PcbError::AddrInUse));
        assert_eq!(t.binding(b), Binding::new((ANY, P), Some((X, 9))).ok());
        assert_eq!(t.remove(a), Some(1));
        assert_eq!(t.remove(a), None);
        assert_eq!(t.connect(a, (X, 9)), Err(PcbError::NotFound));
        assert_eq!(t.disconnect(a), Err(PcbError::NotFound));
        assert_eq!(t.get(a), None);
        assert!(!t.note_sent(a));
        let c = t.insert((L1, P), None, 4).unwrap();
        assert_ne!(a, c, "a reused slot gets a new handle");
        assert_eq!(t.get_mut(c).map(|v| std::mem::replace(v, 5)), Some(4));
        assert_eq!(t.get(c), Some(&5));
        assert_eq!(t.len(), 2);
        t.check_invariants();
    }

    // ----- Randomized: every setting agrees with the reference -----

    const LOCAL_ADDRS: [Ipv4Address; 3] = [ANY, L1, L2];
    const LOCAL_PORTS: [u16; 3] = [P, P + 1, 0];
    const FOREIGN_ADDRS: [Ipv4Address; 3] = [X, Y, ANY];
    const FOREIGN_PORTS: [u16; 3] = [1000, 1001, 0];
    const SRC_ADDRS: [Ipv4Address; 4] = [X, Y, Z, ANY];
    const DST_ADDRS: [Ipv4Address; 4] = [L1, L2, ip(198, 18, 0, 3), Ipv4Address::BROADCAST];
    const SRC_PORTS: [u16; 3] = [1000, 1001, 0];
    const DST_PORTS: [u16; 3] = [P, P + 1, 0];

    #[derive(Clone, Debug)]
    enum Op {
        Insert((Ipv4Address, u16), Option<(Ipv4Address, u16)>),
        Remove(usize),
        Connect(usize, (Ipv4Address, u16)),
        Disconnect(usize),
        Rebind(usize, (Ipv4Address, u16), Option<(Ipv4Address, u16)>),
        Sent(usize),
        Lookup(Ipv4Address, u16, Ipv4Address, u16),
        /// Rotates the settings among the tables.
        Switch(usize),
    }

    /// Valid values mostly, the invalid last one (port 0, address 0.0.0.0) now and then.
    fn pick<V: Copy + fmt::Debug + 'static>(values: &'static [V]) -> impl Strategy<Value = V> {
        let last = values.len() - 1;
        prop_oneof![
            8 => (0..last).prop_map(move |i| values[i]),
            1 => Just(values[last]),
        ]
    }

    fn local() -> impl Strategy<Value = (Ipv4Address, u16)> {
        (prop::sample::select(&LOCAL_ADDRS[..]), pick(&LOCAL_PORTS))
    }

    fn foreign() -> impl Strategy<Value = (Ipv4Address, u16)> {
        (pick(&FOREIGN_ADDRS), pick(&FOREIGN_PORTS))
    }

    fn op() -> impl Strategy<Value = Op> {
        let id = 0..24usize;
        prop_oneof![
            4 => (local(), prop::option::of(foreign())).prop_map(|(l, f)| Op::Insert(l, f)),
            2 => id.clone().prop_map(Op::Remove),
            2 => (id.clone(), foreign()).prop_map(|(i, f)| Op::Connect(i, f)),
            2 => id.clone().prop_map(Op::Disconnect),
            1 => (id.clone(), local(), prop::option::of(foreign()))
                .prop_map(|(i, l, f)| Op::Rebind(i, l, f)),
            2 => id.prop_map(Op::Sent),
            10 => (
                prop::sample::select(&SRC_ADDRS[..]),
                prop::sample::select(&SRC_PORTS[..]),
                prop::sample::select(&DST_ADDRS[..]),
                prop::sample::select(&DST_PORTS[..]),
            )
                .prop_map(|(s, sp, d, dp)| Op::Lookup(s, sp, d, dp)),
            1 => (0..12usize).prop_map(Op::Switch),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        #[test]
        fn every_setting_agrees_with_the_reference(ops in prop::collection::vec(op(), 1..120)) {
            let configs = all_configs();
            let mut tables: Vec<PcbTable<usize>> =
                configs.iter().map(|&c| PcbTable::new(c)).collect();
            let mut reference = Reference::default();
            // Every handle ever issued, by insertion number (stale ones included).
            let mut issued: Vec<PcbId> = Vec::new();
            let handle = |issued: &Vec<PcbId>, i: usize| -> Option<PcbId> {
                (!issued.is_empty()).then(|| issued[i % issued.len()])
            };
            for op in &ops {
                match *op {
                    Op::Insert(l, f) => {
                        let want = Reference::check(l, f).and_then(|()| {
                            if reference.in_use(None, l, f) { Err(PcbError::AddrInUse) } else { Ok(()) }
                        });
                        let n = issued.len();
                        let got: Vec<_> = tables.iter_mut().map(|t| t.insert(l, f, n)).collect();
                        prop_assert!(got.iter().all(|g| *g == got[0]), "{got:?}");
                        prop_assert_eq!(got[0].map(|_| ()), want);
                        if let Ok(id) = got[0] {
                            issued.push(id);
                            reference.pcbs.push((id, l, f));
                        }
                    }
                    Op::Remove(i) => {
                        let Some(id) = handle(&issued, i) else { continue };
                        let live = reference.pcbs.iter().any(|p| p.0 == id);
                        for t in &mut tables {
                            prop_assert_eq!(t.remove(id).is_some(), live);
                        }
                        reference.pcbs.retain(|p| p.0 != id);
                    }
                    Op::Connect(i, _) | Op::Disconnect(i) | Op::Rebind(i, _, _) => {
                        let Some(id) = handle(&issued, i) else { continue };
                        let Some(at) = reference.pcbs.iter().position(|p| p.0 == id) else {
                            for t in &mut tables {
                                let r = match *op {
                                    Op::Connect(_, f) => t.connect(id, f),
                                    Op::Disconnect(_) => t.disconnect(id),
                                    Op::Rebind(_, l, f) => t.rebind(id, l, f),
                                    _ => unreachable!(),
                                };
                                prop_assert_eq!(r, Err(PcbError::NotFound));
                            }
                            continue;
                        };
                        let (old_l, old_f) = (reference.pcbs[at].1, reference.pcbs[at].2);
                        let (l, f) = match *op {
                            Op::Connect(_, f) => (old_l, Some(f)),
                            Op::Disconnect(_) => (old_l, None),
                            Op::Rebind(_, l, f) => (l, f),
                            _ => unreachable!(),
                        };
                        let want = Reference::check(l, f).and_then(|()| {
                            if (l, f) != (old_l, old_f) && reference.in_use(Some(id), l, f) {
                                Err(PcbError::AddrInUse)
                            } else {
                                Ok(())
                            }
                        });
                        for t in &mut tables {
                            let r = match *op {
                                Op::Connect(_, f) => t.connect(id, f),
                                Op::Disconnect(_) => t.disconnect(id),
                                _ => t.rebind(id, l, f),
                            };
                            prop_assert_eq!(r, want);
                            prop_assert_eq!(t.binding(id), Some(if want.is_ok() {
                                Binding { local: l, foreign: f }
                            } else {
                                Binding { local: old_l, foreign: old_f }
                            }));
                        }
                        if want.is_ok() {
                            (reference.pcbs[at].1, reference.pcbs[at].2) = (l, f);
                        }
                    }
                    Op::Sent(i) => {
                        let Some(id) = handle(&issued, i) else { continue };
                        for t in &mut tables {
                            let cached = t.note_sent(id);
                            prop_assert_eq!(
                                cached,
                                t.config().send_cache && t.is_cacheable(id) == Some(true)
                            );
                        }
                    }
                    Op::Lookup(s, sp, d, dp) => {
                        let want = reference.lookup(s, sp, d, dp);
                        for t in &mut tables {
                            let config = t.config();
                            let got = t.lookup(s, sp, d, dp).map(|(id, v)| (id, *v));
                            prop_assert_eq!(got.map(|g| g.0), want, "{:?}", config);
                            if let Some((id, v)) = got {
                                prop_assert_eq!(issued.get(v), Some(&id));
                            }
                        }
                    }
                    Op::Switch(k) => {
                        for (j, t) in tables.iter_mut().enumerate() {
                            t.set_config(configs[(j + k) % configs.len()]);
                        }
                    }
                }
                for t in &tables {
                    t.check_invariants();
                    prop_assert_eq!(t.len(), reference.pcbs.len());
                    let s = t.stats();
                    prop_assert!(s.recv_cache_hits + s.recv_cache_misses <= s.lookups);
                    prop_assert!(s.send_cache_hits + s.send_cache_misses <= s.lookups);
                }
            }
        }
    }
}
