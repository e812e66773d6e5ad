//! IPv4 reassembly: the defrag queue (RFC 791 §3.2, with RFC 815's hole descriptors).
//!
//! A [`Reassembler`] holds the datagrams whose fragments are still arriving. Each is
//! keyed by source, destination, protocol and identification, the four fields RFC 791
//! §3.2 says make fragments belong together ([`FragKey`]), and keeps:
//!
//! - a buffer for its payload, indexed by fragment offset, that grows as fragments arrive
//!   (never a 64 KiB allocation up front) and never past 65535 bytes less the first
//!   fragment's header (RFC 791 §3.1, Total Length);
//! - a **hole list** (RFC 815 §3): the ranges of payload not yet received, sorted. It
//!   starts as one hole from 0 to "infinity"; the last fragment (More Fragments clear)
//!   cuts that hole at the datagram's end. The datagram is complete when no hole remains;
//! - the list of fragments received (offset, length, More Fragments), which tells an exact
//!   duplicate from an overlap;
//! - the header of the fragment at offset 0, for the reassembled datagram's header and,
//!   on timeout, for the ICMP Time Exceeded message that quotes it (RFC 792; RFC 1122
//!   §3.3.2 sends it only if fragment zero arrived).
//!
//! # Overlaps, in the spirit of RFC 5722
//!
//! RFC 5722 §4 (IPv6) has a receiver discard the whole datagram when fragments overlap,
//! and RFC 8200 §4.5 allows exact duplicates to be dropped instead, the rest of the
//! datagram kept. The same rules here for IPv4, which has none of its own: a fragment
//! with the same offset, length, More Fragments flag and bytes as one already held is
//! ignored and counted; any other overlap, or fragments that disagree about where the
//! datagram ends, drop the datagram and **poison** its key until the dropped datagram's
//! timeout would have fired, so that an attacker cannot drop a datagram and then complete
//! it with bytes of their choosing. Poisoned keys are remembered apart from the queue, at
//! most `max_datagrams` of them (the oldest is forgotten first).
//!
//! # Memory
//!
//! [`Reassembler::bytes_held`] charges each incomplete datagram for what it really holds:
//! its payload buffer as allocated (holes inside it included), the saved header, its hole
//! and fragment descriptors, and the fixed size of its entry in the queue. (The growth
//! slack of the descriptor lists' `Vec`s is not charged; everything else is exact.) Before
//! a fragment is accepted, the reassembler checks that the bytes it adds fit under
//! `max_bytes`, and that a new datagram fits under `max_datagrams`:
//!
//! - if the fragment's datagram could not fit **even alone** (the cap is smaller than what
//!   it would hold after this fragment), the fragment is **refused**
//!   ([`ReassemblyError::NoMemory`], counted in `refused_for_memory`) and, since that
//!   datagram could then never complete, it is dropped too;
//! - otherwise the **oldest** other incomplete datagrams (by arrival of their first
//!   fragment) are **evicted** until it fits (counted in `evicted_for_memory`). Evicting
//!   the oldest rather than refusing the newest means a flood of fragments that never
//!   complete cannot lock the queue against datagrams that would for a whole timeout (a
//!   legitimate datagram's fragments arrive close together, so it is rarely the oldest),
//!   and what it pushes out is what was closest to timing out anyway. A flood can still
//!   evict legitimate datagrams; refusing would instead refuse them all.
//!
//! So `bytes_held() <= max_bytes` holds after every call. The buffer grows geometrically
//! (or straight to the datagram's length once the last fragment is known), but only into
//! room that is free: nothing is ever evicted for growth slack.
//!
//! **One spare buffer.** The caller may give a reassembled datagram's payload buffer back
//! ([`Reassembler::recycle`]) once it has copied the datagram out; the reassembler keeps
//! the largest one, charged in `bytes_held` like a datagram's and released before any
//! datagram is evicted, and a datagram whose buffer must grow past its allocation takes
//! it instead of allocating. Without it, every large datagram allocated its buffer afresh
//! and freed it again: at 64 KiB, above what the allocator keeps at the top of its heap,
//! each one cost two `brk` calls and about 14 page faults on fresh pages (`lab ping` at
//! 65,507 bytes), time the ledger could not place.
//!
//! # The queue
//!
//! The queue is a plain `Vec` of entries in arrival order, searched linearly, as 4.3BSD's
//! `ipq` list was: this is the 1993 data structure whose cost paper 001 §7.6 measured
//! ("Defrag Queue"), and [`Reassembler::contains`] is the search the stack makes for
//! every datagram when the `defrag_check_only_fragments` switch is off.
//!
//! # Timeouts
//!
//! A datagram's timer starts with its first fragment and is not restarted by later ones
//! (RFC 791 §3.2 sets it on the first fragment; RFC 1122 §3.3.2 recommends 60 to 120 s,
//! the default here is 30 s, Linux's `ipfrag_time`). [`Reassembler::add`] does not expire anything:
//! the stack calls [`Reassembler::expire`] from its poll, before or after `add`, and
//! sends Time Exceeded for what it returns.

use std::fmt;
use std::mem::size_of;

use crate::time::{Duration, Instant};
use crate::wire::ipv4::{Packet, MAX_HEADER_LEN, MAX_TOTAL_LEN, MIN_HEADER_LEN};
use crate::wire::Ipv4Address;

/// Fragment offsets count blocks of 8 bytes, so every fragment but the last carries a
/// multiple of 8 bytes (RFC 791 §2.3, §3.1 "Fragment Offset").
const FRAGMENT_BLOCK: usize = 8;

/// Bytes of the original payload an ICMP error quotes after the header (RFC 792).
const QUOTED_PAYLOAD_LEN: usize = 8;

/// End of the tail hole before the last fragment is known: RFC 815's "infinity". No
/// payload reaches it, as a payload is at most 65535 less a 20-byte header.
const UNBOUNDED: usize = MAX_TOTAL_LEN;

/// What makes fragments belong to one datagram (RFC 791 §3.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FragKey {
    pub src: Ipv4Address,
    pub dst: Ipv4Address,
    /// The protocol field, as its number.
    pub protocol: u8,
    pub ident: u16,
}

impl FragKey {
    /// The key of a datagram whose header the caller has checked
    /// ([`Packet::check_header_len`] or stronger).
    pub fn of_packet<T: AsRef<[u8]>>(packet: &Packet<T>) -> FragKey {
        FragKey {
            src: packet.source(),
            dst: packet.destination(),
            protocol: packet.protocol().into(),
            ident: packet.ident(),
        }
    }
}

/// Limits of a [`Reassembler`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReassemblyConfig {
    /// How long an incomplete datagram is kept, from its first fragment (RFC 791 §3.2).
    pub timeout: Duration,
    /// Most bytes held for incomplete datagrams, all of them together (see the module
    /// documentation for what is charged).
    pub max_bytes: usize,
    /// Most incomplete datagrams held at once; also the most poisoned keys remembered.
    pub max_datagrams: usize,
}

impl Default for ReassemblyConfig {
    /// 30 s, 4 MiB, 256 datagrams.
    fn default() -> Self {
        ReassemblyConfig {
            timeout: Duration::from_secs(30),
            max_bytes: 4 << 20,
            max_datagrams: 256,
        }
    }
}

/// A datagram put back together.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reassembled {
    /// The header of the fragment at offset 0, as it arrived (options included). Its
    /// total length, More Fragments flag, offset and checksum are still the fragment's:
    /// the caller rewrites them if it builds the whole datagram.
    pub header: Vec<u8>,
    /// The whole payload.
    pub payload: Vec<u8>,
}

/// An incomplete datagram dropped by [`Reassembler::expire`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expired {
    pub key: FragKey,
    /// The first fragment's header and the first 8 bytes of its payload, for an ICMP Time
    /// Exceeded message (RFC 792), if the fragment at offset 0 arrived; `None` if not, in
    /// which case no ICMP message is sent (RFC 1122 §3.3.2).
    pub first_fragment: Option<Vec<u8>>,
}

/// Why a fragment, and sometimes its datagram, was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ReassemblyError {
    /// The fragment is malformed and was dropped; its datagram is kept. A header shorter
    /// than 20 or longer than 60 bytes, an offset not a multiple of 8, or a fragment other
    /// than the last whose payload is empty or not a multiple of 8 bytes (RFC 791 §2.3).
    Malformed,
    /// The fragment would make the datagram longer than 65535 bytes with its first
    /// fragment's header (RFC 791 §3.1); the fragment and its datagram were dropped.
    TooLong,
    /// The fragment overlaps bytes already held without being an exact duplicate; the
    /// datagram was dropped and its key poisoned until its timeout (RFC 5722 §4).
    Overlap,
    /// The fragment disagrees with fragments already held about where the datagram ends
    /// (two different last fragments, data past the last fragment); the datagram was
    /// dropped and its key poisoned until its timeout, as for an overlap.
    ConflictingEnd,
    /// The fragment's datagram could not fit under the memory caps even alone; the
    /// fragment was refused and its datagram, if any, dropped.
    NoMemory,
    /// The fragment's key was poisoned by an overlap or conflicting end and has not timed
    /// out yet; the fragment was dropped.
    PoisonedByOverlap,
}

impl fmt::Display for ReassemblyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ReassemblyError::Malformed => "malformed fragment",
            ReassemblyError::TooLong => "reassembled datagram would exceed 65535 bytes",
            ReassemblyError::Overlap => "overlapping fragments: datagram dropped",
            ReassemblyError::ConflictingEnd => "fragments disagree on the end: datagram dropped",
            ReassemblyError::NoMemory => "no memory for the datagram: fragment refused",
            ReassemblyError::PoisonedByOverlap => "datagram was dropped for an overlap",
        })
    }
}

impl std::error::Error for ReassemblyError {}

/// What a [`Reassembler`] has done, `netstat -s` style. Fragment counts are per call to
/// [`Reassembler::add`]; datagram counts are per datagram.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ReassemblyStats {
    /// Calls to `add`.
    pub fragments_in: u64,
    /// Datagrams reassembled.
    pub datagrams_completed: u64,
    /// Exact duplicates ignored.
    pub duplicates_ignored: u64,
    /// Datagrams dropped because fragments overlapped.
    pub overlaps_dropped: u64,
    /// Datagrams dropped because fragments disagreed about the end.
    pub conflicting_ends_dropped: u64,
    /// Datagrams that grew into the spare buffer rather than a new allocation.
    pub spare_reused: u64,
    /// Fragments dropped because their key was poisoned.
    pub poisoned_fragments_dropped: u64,
    /// Malformed fragments dropped.
    pub malformed: u64,
    /// Fragments dropped for making their datagram longer than 65535 bytes.
    pub too_long: u64,
    /// Incomplete datagrams evicted to make room for another.
    pub evicted_for_memory: u64,
    /// Fragments refused because their datagram could not fit even alone.
    pub refused_for_memory: u64,
    /// Incomplete datagrams dropped by `expire`.
    pub timed_out: u64,
}

/// A range of payload not yet received, `[start, end)` (RFC 815 §3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Hole {
    start: usize,
    end: usize,
}

/// A fragment received: payload `[start, end)` and its More Fragments flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Received {
    start: usize,
    end: usize,
    more_frags: bool,
}

/// Where a fragment goes in its datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Placement {
    /// Inside the hole at this index of the hole list.
    IntoHole(usize),
    /// An exact duplicate of a fragment held (or an empty last fragment that agrees with
    /// the known end): nothing to do.
    Duplicate,
    /// Overlaps bytes held.
    Overlap,
    /// Disagrees about where the datagram ends.
    ConflictingEnd,
}

/// One incomplete datagram.
#[derive(Debug)]
struct Datagram {
    key: FragKey,
    /// When its first fragment arrived: the timer runs from here (RFC 791 §3.2).
    first_arrival: Instant,
    /// The payload, indexed by fragment offset: its length is what the fragments may
    /// fill; grown by copying into an exact allocation, or in place or into the spare
    /// buffer when their allocation is larger (charged as allocated).
    buffer: Vec<u8>,
    /// Ranges not yet received, sorted and disjoint (RFC 815).
    holes: Vec<Hole>,
    /// Fragments received, sorted by start and disjoint.
    received: Vec<Received>,
    /// Payload length, known once the last fragment arrived.
    payload_len: Option<usize>,
    /// Header of the fragment at offset 0, once it arrived.
    first_header: Option<Box<[u8]>>,
}

impl Datagram {
    fn new(key: FragKey, now: Instant) -> Datagram {
        Datagram {
            key,
            first_arrival: now,
            buffer: Vec::new(),
            holes: vec![Hole {
                start: 0,
                end: UNBOUNDED,
            }],
            received: Vec::new(),
            payload_len: None,
            first_header: None,
        }
    }

    /// Bytes this datagram is charged against `max_bytes`.
    fn charge(&self) -> usize {
        size_of::<Datagram>()
            + self.buffer.capacity()
            + self.first_header.as_ref().map_or(0, |h| h.len())
            + self.holes.len() * size_of::<Hole>()
            + self.received.len() * size_of::<Received>()
    }

    fn deadline(&self, timeout: Duration) -> Instant {
        self.first_arrival + timeout
    }

    /// End of the highest fragment received (0 if none): the list is sorted by start and
    /// disjoint, so it is the last one's end.
    fn received_end(&self) -> usize {
        self.received.last().map_or(0, |r| r.end)
    }

    /// Longest payload allowed: 65535 less the first fragment's header, or less the
    /// shortest header while fragment zero has not arrived (RFC 791 §3.1).
    fn payload_limit(&self, header_len_if_first: Option<usize>) -> usize {
        let header_len = self
            .first_header
            .as_ref()
            .map(|h| h.len())
            .or(header_len_if_first)
            .unwrap_or(MIN_HEADER_LEN);
        MAX_TOTAL_LEN.saturating_sub(header_len)
    }

    /// Decides where payload `[start, end)` goes, without changing anything.
    fn classify(&self, start: usize, end: usize, more_frags: bool, payload: &[u8]) -> Placement {
        // Exact duplicate: same offset, length, flag and bytes (RFC 8200 §4.5).
        let at = self.received.partition_point(|r| r.start < start);
        if let Some(r) = self.received.get(at) {
            if r.start == start
                && r.end == end
                && r.more_frags == more_frags
                && self.buffer.get(start..end) == Some(payload)
            {
                return Placement::Duplicate;
            }
        }
        // The end: the last fragment fixes it, and nothing may lie past it (RFC 791 §3.2,
        // "the total data length"). RFC 815 §3 step 5 relies on the same rule.
        match (self.payload_len, more_frags) {
            (Some(total), true) if end > total => return Placement::ConflictingEnd,
            (Some(total), false) if end != total => return Placement::ConflictingEnd,
            (None, false) if self.received_end() > end => return Placement::ConflictingEnd,
            // An empty last fragment that agrees with a known end carries nothing.
            (Some(_), false) if start == end => return Placement::Duplicate,
            _ => {}
        }
        // New bytes must lie inside one hole; anything else overlaps bytes held. The
        // first hole that ends at or after `end` is the only candidate: holes before it
        // end before `end`, holes after it start after its start.
        let candidate = self.holes.partition_point(|h| h.end < end);
        match self.holes.get(candidate) {
            Some(hole) if hole.start <= start => Placement::IntoHole(candidate),
            _ => Placement::Overlap,
        }
    }

    /// Puts payload `[start, end)` into the hole at `hole_index` (from `classify`); the
    /// buffer already reaches `end`. RFC 815 §3, steps 4 to 6: the hole is replaced by
    /// what is left of it before and after the fragment; nothing is left after the last
    /// fragment.
    fn place(
        &mut self,
        hole_index: usize,
        start: usize,
        more_frags: bool,
        header: &[u8],
        payload: &[u8],
    ) {
        let end = start + payload.len();
        let Some(&hole) = self.holes.get(hole_index) else {
            return;
        };
        let before = (hole.start < start).then_some(Hole {
            start: hole.start,
            end: start,
        });
        let after = (more_frags && end < hole.end).then_some(Hole {
            start: end,
            end: hole.end,
        });
        self.holes
            .splice(hole_index..=hole_index, before.into_iter().chain(after));
        if let Some(dst) = self.buffer.get_mut(start..end) {
            dst.copy_from_slice(payload);
        }
        let at = self.received.partition_point(|r| r.start < start);
        self.received.insert(
            at,
            Received {
                start,
                end,
                more_frags,
            },
        );
        if !more_frags {
            self.payload_len = Some(end);
        }
        if start == 0 && self.first_header.is_none() {
            self.first_header = Some(header.into());
        }
    }

    /// Grows the buffer to `new_len` bytes (never shrinks), keeping its contents: in
    /// place if its allocation is large enough, else into `spare` if that is, else into an
    /// exact new allocation. Returns the spare's allocation if it took it (its charge
    /// moves to this datagram).
    fn grow_buffer(&mut self, new_len: usize, spare: &mut Option<Vec<u8>>) -> usize {
        if new_len <= self.buffer.len() {
            return 0;
        }
        if new_len <= self.buffer.capacity() {
            self.buffer.resize(new_len, 0);
            return 0;
        }
        if let Some(mut grown) = spare.take_if(|b| b.capacity() >= new_len) {
            grown.clear();
            grown.extend_from_slice(&self.buffer);
            grown.resize(new_len, 0);
            self.buffer = grown;
            return self.buffer.capacity();
        }
        let mut grown = vec![0u8; new_len];
        if let Some(dst) = grown.get_mut(..self.buffer.len()) {
            dst.copy_from_slice(&self.buffer);
        }
        self.buffer = grown;
        0
    }

    fn is_complete(&self) -> bool {
        self.holes.is_empty() && self.payload_len.is_some()
    }

    /// The first fragment's header and first 8 payload bytes, if it arrived.
    fn first_fragment_quote(&self) -> Option<Vec<u8>> {
        let header = self.first_header.as_ref()?;
        let first_end = self
            .received
            .first()
            .filter(|r| r.start == 0)
            .map_or(0, |r| r.end);
        let quoted = first_end.min(QUOTED_PAYLOAD_LEN);
        let mut quote = Vec::with_capacity(header.len() + quoted);
        quote.extend_from_slice(header);
        quote.extend_from_slice(self.buffer.get(..quoted).unwrap_or(&[]));
        Some(quote)
    }

    /// The reassembled datagram; call when complete.
    fn into_reassembled(self) -> Reassembled {
        let total = self.payload_len.unwrap_or(0);
        let mut payload = self.buffer;
        payload.truncate(total);
        Reassembled {
            header: self.first_header.map(Vec::from).unwrap_or_default(),
            payload,
        }
    }
}

/// A key dropped for an overlap or conflicting end, refused until `until`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Poisoned {
    key: FragKey,
    until: Instant,
}

/// The defrag queue. See the module documentation.
#[derive(Debug)]
pub struct Reassembler {
    config: ReassemblyConfig,
    /// Incomplete datagrams in order of their first fragment's arrival, oldest first.
    queue: Vec<Datagram>,
    /// Keys refused after an overlap, oldest first.
    poisoned: Vec<Poisoned>,
    /// Sum of the queue's charges and the spare's allocation.
    bytes_held: usize,
    /// A payload buffer given back by [`recycle`](Self::recycle), empty, for the next
    /// datagram that grows past its own.
    spare: Option<Vec<u8>>,
    stats: ReassemblyStats,
}

impl Default for Reassembler {
    fn default() -> Self {
        Reassembler::new(ReassemblyConfig::default())
    }
}

impl Reassembler {
    pub fn new(config: ReassemblyConfig) -> Reassembler {
        Reassembler {
            config,
            queue: Vec::new(),
            poisoned: Vec::new(),
            bytes_held: 0,
            spare: None,
            stats: ReassemblyStats::default(),
        }
    }

    pub fn config(&self) -> &ReassemblyConfig {
        &self.config
    }

    /// Adds one fragment: its datagram's key, its offset in bytes, its More Fragments
    /// flag, its header (options included) and its payload, at time `now`.
    ///
    /// Returns the datagram when this fragment completes it, `Ok(None)` while it is
    /// incomplete (or when the fragment was an exact duplicate), or why the fragment was
    /// dropped ([`ReassemblyError`] says whether its datagram went with it). A fragment
    /// at offset 0 with More Fragments clear is a whole datagram and comes straight back.
    pub fn add(
        &mut self,
        key: FragKey,
        frag_offset_bytes: usize,
        more_frags: bool,
        header: &[u8],
        payload: &[u8],
        now: Instant,
    ) -> Result<Option<Reassembled>, ReassemblyError> {
        self.stats.fragments_in += 1;
        if self.is_poisoned(&key, now) {
            self.stats.poisoned_fragments_dropped += 1;
            return Err(ReassemblyError::PoisonedByOverlap);
        }
        let start = frag_offset_bytes;
        let malformed = !(MIN_HEADER_LEN..=MAX_HEADER_LEN).contains(&header.len())
            || !start.is_multiple_of(FRAGMENT_BLOCK)
            || (more_frags
                && (payload.is_empty() || !payload.len().is_multiple_of(FRAGMENT_BLOCK)));
        if malformed {
            self.stats.malformed += 1;
            return Err(ReassemblyError::Malformed);
        }
        let existing = self.queue.iter().position(|d| d.key == key);
        let header_len_if_first = (start == 0).then_some(header.len());

        // Length (RFC 791 §3.1): the payload may not pass 65535 less the first header.
        let limit = match existing {
            Some(i) => self.queue[i].payload_limit(header_len_if_first),
            None => MAX_TOTAL_LEN.saturating_sub(header_len_if_first.unwrap_or(MIN_HEADER_LEN)),
        };
        let end = match start.checked_add(payload.len()) {
            Some(end) if end <= limit => end,
            _ => return Err(self.drop_too_long(existing)),
        };
        if let Some(i) = existing {
            // Fragment zero may bring a longer header than was assumed so far.
            if self.queue[i].received_end() > limit {
                return Err(self.drop_too_long(existing));
            }
        }
        if existing.is_none() && start == 0 && !more_frags {
            // Not a fragment at all (RFC 791 §2.3): nothing to queue, nothing to evict.
            self.stats.datagrams_completed += 1;
            return Ok(Some(Reassembled {
                header: header.to_vec(),
                payload: payload.to_vec(),
            }));
        }

        let (index, hole_index) = match existing {
            Some(i) => match self.queue[i].classify(start, end, more_frags, payload) {
                Placement::IntoHole(h) => (i, h),
                Placement::Duplicate => {
                    self.stats.duplicates_ignored += 1;
                    return Ok(None);
                }
                Placement::Overlap => {
                    self.stats.overlaps_dropped += 1;
                    self.drop_and_poison(i);
                    return Err(ReassemblyError::Overlap);
                }
                Placement::ConflictingEnd => {
                    self.stats.conflicting_ends_dropped += 1;
                    self.drop_and_poison(i);
                    return Err(ReassemblyError::ConflictingEnd);
                }
            },
            None => {
                let datagram = Datagram::new(key, now);
                if self.config.max_datagrams == 0 || datagram.charge() > self.config.max_bytes {
                    self.stats.refused_for_memory += 1;
                    return Err(ReassemblyError::NoMemory);
                }
                // Check that the fragment fits before making room for the entry, so that
                // nothing is evicted for a fragment that is then refused.
                let need = Self::bytes_needed(&datagram, start, end, header);
                if datagram.charge().saturating_add(need) > self.config.max_bytes {
                    self.stats.refused_for_memory += 1;
                    return Err(ReassemblyError::NoMemory);
                }
                while self.queue.len() >= self.config.max_datagrams {
                    self.evict_oldest(None);
                }
                let charge = datagram.charge();
                self.make_room(charge, None);
                self.bytes_held += charge;
                self.queue.push(datagram);
                let i = self.queue.len() - 1;
                // A new datagram has one hole, from 0 to "infinity", which holds any
                // fragment under the limit.
                (i, 0)
            }
        };

        // Memory: refuse if the datagram cannot fit alone, else evict the oldest others.
        let need = Self::bytes_needed(&self.queue[index], start, end, header);
        if self.queue[index].charge().saturating_add(need) > self.config.max_bytes {
            self.stats.refused_for_memory += 1;
            self.remove_at(index);
            return Err(ReassemblyError::NoMemory);
        }
        let index = self.make_room(need, Some(index)).unwrap_or(index);

        // Grow into free room only, and into at most half of it so that the next
        // fragments' descriptors do not evict anyone: geometrically, or straight to the
        // end once it is known.
        let free = self
            .config
            .max_bytes
            .saturating_sub(self.bytes_held)
            .saturating_sub(need);
        let Some(datagram) = self.queue.get_mut(index) else {
            return Ok(None);
        };
        let old_charge = datagram.charge();
        let mut from_spare = 0;
        let min_len = datagram.buffer.len().max(end);
        if min_len > datagram.buffer.len() {
            let known_end = if more_frags {
                datagram.payload_len
            } else {
                Some(end)
            };
            let wanted = known_end.unwrap_or_else(|| {
                datagram
                    .buffer
                    .len()
                    .saturating_mul(2)
                    .clamp(min_len, limit.max(min_len))
            });
            let slack_room = min_len.saturating_add(free / 2);
            from_spare = datagram.grow_buffer(wanted.min(slack_room).max(min_len), &mut self.spare);
            if from_spare > 0 {
                self.stats.spare_reused += 1;
            }
        }
        datagram.place(hole_index, start, more_frags, header, payload);
        let new_charge = datagram.charge();
        self.bytes_held = self.bytes_held.saturating_sub(old_charge + from_spare) + new_charge;

        if datagram.is_complete() {
            let done = self.remove_at(index);
            self.stats.datagrams_completed += 1;
            return Ok(done.map(Datagram::into_reassembled));
        }
        Ok(None)
    }

    /// Drops the incomplete datagrams whose timer has run out (`now` at or past their
    /// first fragment's arrival plus the timeout, RFC 791 §3.2), and forgets poisoned
    /// keys as old. Returns the datagrams dropped, with what an ICMP Time Exceeded
    /// message (code 1, "fragment reassembly time exceeded") quotes.
    pub fn expire(&mut self, now: Instant) -> Vec<Expired> {
        if self.is_idle() {
            return Vec::new();
        }
        let timeout = self.config.timeout;
        self.poisoned.retain(|p| now < p.until);
        let mut expired = Vec::new();
        let mut i = 0;
        while let Some(datagram) = self.queue.get(i) {
            if now >= datagram.deadline(timeout) {
                if let Some(datagram) = self.remove_at(i) {
                    self.stats.timed_out += 1;
                    expired.push(Expired {
                        key: datagram.key,
                        first_fragment: datagram.first_fragment_quote(),
                    });
                }
            } else {
                i += 1;
            }
        }
        expired
    }

    /// When [`Reassembler::expire`] next has something to do: the earliest timer of a
    /// datagram or a poisoned key.
    #[inline]
    pub fn next_deadline(&self) -> Option<Instant> {
        if self.is_idle() {
            return None;
        }
        let timeout = self.config.timeout;
        let datagrams = self.queue.iter().map(|d| d.deadline(timeout));
        let poisoned = self.poisoned.iter().map(|p| p.until);
        datagrams.chain(poisoned).min()
    }

    /// Nothing queued and no key poisoned: no timer runs (the stack asks on every poll).
    #[inline]
    pub fn is_idle(&self) -> bool {
        self.queue.is_empty() && self.poisoned.is_empty()
    }

    /// Whether fragments of the datagram `key` are queued: a linear search of the queue,
    /// the check 4.3BSD's `ip_input` made for every datagram (paper 001 §7.6). Poisoned
    /// keys hold no fragments and do not count.
    pub fn contains(&self, key: &FragKey) -> bool {
        self.queue.iter().any(|d| d.key == *key)
    }

    /// Drops the fragments queued for `key`, if any, as 4.3BSD's `ip_input` did
    /// (`ip_freef`) when a whole datagram arrived with the key of a queued one. Returns
    /// whether there were any. Counted in no statistic.
    pub fn discard(&mut self, key: &FragKey) -> bool {
        match self.queue.iter().position(|d| d.key == *key) {
            Some(i) => self.remove_at(i).is_some(),
            None => false,
        }
    }

    /// Bytes charged for the incomplete datagrams and the spare buffer (see the module
    /// documentation); never more than `max_bytes`.
    pub fn bytes_held(&self) -> usize {
        self.bytes_held
    }

    /// Takes back a reassembled datagram's payload buffer once the caller is done with
    /// it, as the spare (see the module documentation): kept if it is larger than the
    /// spare held and fits under `max_bytes`, else freed.
    pub fn recycle(&mut self, mut buffer: Vec<u8>) {
        let size = buffer.capacity();
        if self.spare.as_ref().is_some_and(|b| b.capacity() >= size) {
            return;
        }
        self.release_spare();
        if size == 0 || self.bytes_held.saturating_add(size) > self.config.max_bytes {
            return;
        }
        buffer.clear();
        self.bytes_held += size;
        self.spare = Some(buffer);
    }

    /// Bytes the spare buffer holds (counted in [`bytes_held`](Self::bytes_held)).
    pub fn spare_bytes(&self) -> usize {
        self.spare.as_ref().map_or(0, Vec::capacity)
    }

    /// Frees the spare buffer, if any.
    fn release_spare(&mut self) {
        if let Some(b) = self.spare.take() {
            self.bytes_held = self.bytes_held.saturating_sub(b.capacity());
        }
    }

    /// Incomplete datagrams held.
    pub fn datagrams_held(&self) -> usize {
        self.queue.len()
    }

    pub fn stats(&self) -> ReassemblyStats {
        self.stats
    }

    /// Whether `key` is poisoned at `now`; forgets it if its time is up.
    fn is_poisoned(&mut self, key: &FragKey, now: Instant) -> bool {
        match self.poisoned.iter().position(|p| p.key == *key) {
            Some(i) if now < self.poisoned[i].until => true,
            Some(i) => {
                self.poisoned.remove(i);
                false
            }
            None => false,
        }
    }

    /// Most bytes `datagram` grows by when it takes payload `[start, end)`: the buffer's
    /// allocation up to `end`, the header if it is fragment zero's, one fragment
    /// descriptor, and one more hole (a hole split in two).
    fn bytes_needed(datagram: &Datagram, start: usize, end: usize, header: &[u8]) -> usize {
        let buffer = end.saturating_sub(datagram.buffer.capacity());
        let header = if start == 0 && datagram.first_header.is_none() {
            header.len()
        } else {
            0
        };
        buffer + header + size_of::<Received>() + size_of::<Hole>()
    }

    /// Frees the spare, then evicts the oldest datagrams other than the one at `keep`,
    /// until `need` more bytes fit under `max_bytes`. Returns where `keep` is afterwards.
    fn make_room(&mut self, need: usize, mut keep: Option<usize>) -> Option<usize> {
        if self.bytes_held.saturating_add(need) > self.config.max_bytes {
            self.release_spare();
        }
        while self.bytes_held.saturating_add(need) > self.config.max_bytes {
            let before = self.queue.len();
            keep = self.evict_oldest(keep);
            if self.queue.len() == before {
                break; // nothing left to evict; the caller checked it fits alone
            }
        }
        keep
    }

    /// Evicts the oldest datagram other than the one at `keep`. Returns where `keep` is
    /// afterwards.
    fn evict_oldest(&mut self, keep: Option<usize>) -> Option<usize> {
        let victim = if keep == Some(0) { 1 } else { 0 };
        if self.remove_at(victim).is_some() {
            self.stats.evicted_for_memory += 1;
            return keep.map(|k| if k > victim { k - 1 } else { k });
        }
        keep
    }

    /// Drops a datagram whose fragment made it too long (RFC 791 §3.1).
    fn drop_too_long(&mut self, existing: Option<usize>) -> ReassemblyError {
        self.stats.too_long += 1;
        if let Some(i) = existing {
            self.remove_at(i);
        }
        ReassemblyError::TooLong
    }

    /// Drops the datagram at `index` and refuses its key until its timer would have run
    /// out (RFC 5722 §4: the whole datagram is discarded, not only the fragment).
    fn drop_and_poison(&mut self, index: usize) {
        let Some(datagram) = self.remove_at(index) else {
            return;
        };
        if self.config.max_datagrams == 0 {
            return;
        }
        while self.poisoned.len() >= self.config.max_datagrams {
            self.poisoned.remove(0);
        }
        self.poisoned.push(Poisoned {
            key: datagram.key,
            until: datagram.deadline(self.config.timeout),
        });
    }

    /// Takes the datagram at `index` out of the queue and its charge off the total.
    fn remove_at(&mut self, index: usize) -> Option<Datagram> {
        if index >= self.queue.len() {
            return None;
        }
        let datagram = self.queue.remove(index);
        self.bytes_held = self.bytes_held.saturating_sub(datagram.charge());
        Some(datagram)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;
    use proptest::prelude::*;

    const T0: Instant = Instant::from_millis(1_000);

    fn key(ident: u16) -> FragKey {
        FragKey {
            src: Ipv4Address::new(198, 18, 0, 1),
            dst: Ipv4Address::new(198, 18, 0, 2),
            protocol: 17,
            ident,
        }
    }

    /// A 20-byte header, or a longer one with NOP options, marked with `tag` in its TTL
    /// so that tests can tell headers apart.
    fn header(len: usize, tag: u8) -> Vec<u8> {
        let mut h = vec![0u8; len];
        h[0] = 0x40 | (len / 4) as u8;
        h[8] = tag;
        h[9] = 17;
        for b in h.iter_mut().skip(MIN_HEADER_LEN) {
            *b = 1; // No Operation
        }
        h
    }

    struct Frag {
        offset: usize,
        more: bool,
        bytes: Vec<u8>,
    }

    /// Cuts `payload` into fragments of `size` bytes (a multiple of 8), as a sender would.
    fn fragment(payload: &[u8], size: usize) -> Vec<Frag> {
        if payload.is_empty() {
            return vec![Frag {
                offset: 0,
                more: false,
                bytes: Vec::new(),
            }];
        }
        let count = payload.len().div_ceil(size);
        payload
            .chunks(size)
            .enumerate()
            .map(|(i, chunk)| Frag {
                offset: i * size,
                more: i + 1 < count,
                bytes: chunk.to_vec(),
            })
            .collect()
    }

    fn random_payload(len: usize, seed: u64) -> Vec<u8> {
        let mut p = vec![0u8; len];
        Rng::new(seed).fill(&mut p);
        p
    }

    /// Checks what must hold after every call.
    fn check_invariants(r: &Reassembler) {
        let sum: usize = r.queue.iter().map(Datagram::charge).sum::<usize>() + r.spare_bytes();
        assert_eq!(r.bytes_held, sum, "bytes_held is the sum of charges");
        assert!(r.bytes_held <= r.config.max_bytes, "memory cap exceeded");
        assert!(r.queue.len() <= r.config.max_datagrams);
        assert!(r.poisoned.len() <= r.config.max_datagrams);
        for d in &r.queue {
            for w in d.holes.windows(2) {
                assert!(w[0].end < w[1].start, "holes sorted, disjoint, apart");
            }
            for w in d.received.windows(2) {
                assert!(w[0].end <= w[1].start, "fragments sorted and disjoint");
            }
            assert!(d.holes.iter().all(|h| h.start < h.end));
            assert!(d.received_end() <= d.buffer.len());
            assert!(d.buffer.len() <= MAX_TOTAL_LEN - MIN_HEADER_LEN);
            // Holes and fragments tile the payload up to the end (or to "infinity").
            let covered: usize = d.holes.iter().map(|h| h.end - h.start).sum::<usize>()
                + d.received.iter().map(|r| r.end - r.start).sum::<usize>();
            assert_eq!(covered, d.payload_len.unwrap_or(UNBOUNDED));
        }
    }

    fn add(
        r: &mut Reassembler,
        f: &Frag,
        ident: u16,
        now: Instant,
    ) -> Result<Option<Reassembled>, ReassemblyError> {
        let h = header(MIN_HEADER_LEN, if f.offset == 0 { 1 } else { 2 });
        let out = r.add(key(ident), f.offset, f.more, &h, &f.bytes, now);
        check_invariants(r);
        out
    }

    /// Feeds fragments in the given order; asserts only the last completes.
    fn feed_all(r: &mut Reassembler, frags: &[&Frag], ident: u16) -> Reassembled {
        let (last, rest) = frags.split_last().expect("at least one fragment");
        for f in rest {
            assert_eq!(add(r, f, ident, T0), Ok(None));
            assert!(r.contains(&key(ident)));
        }
        add(r, last, ident, T0)
            .expect("accepted")
            .expect("complete")
    }

    /// The spare (`recycle`): a buffer given back is charged while held, taken by the next
    /// datagram that grows past its own allocation (once: it then grows in place), and
    /// given back again; the bytes come out right each time.
    #[test]
    fn a_recycled_buffer_is_charged_and_reused() {
        let mut r = Reassembler::default();
        let first = random_payload(30_000, 1);
        let frags = fragment(&first, 1480);
        let done = feed_all(&mut r, &frags.iter().collect::<Vec<_>>(), 1);
        assert_eq!(done.payload, first);
        assert_eq!(r.stats().spare_reused, 0);
        let size = done.payload.capacity();
        assert!(size >= 30_000);
        r.recycle(done.payload);
        assert_eq!(
            (r.bytes_held(), r.spare_bytes()),
            (size, size),
            "the spare is charged"
        );
        // A smaller buffer does not replace it; a larger one would.
        r.recycle(vec![0; 100]);
        assert_eq!(r.bytes_held(), size);

        for ident in 2..5 {
            let payload = random_payload(20_000 + ident as usize, ident.into());
            let frags = fragment(&payload, 1480);
            assert_eq!(add(&mut r, &frags[0], ident, T0), Ok(None));
            // The first fragment took the spare, and the datagram is charged for all of it.
            assert_eq!(r.stats().spare_reused, u64::from(ident) - 1);
            assert_eq!(r.queue[0].buffer.capacity(), size);
            let rest: Vec<&Frag> = frags[1..].iter().collect();
            let done = feed_all(&mut r, &rest, ident);
            assert_eq!(done.payload, payload);
            assert_eq!(
                r.stats().spare_reused,
                u64::from(ident) - 1,
                "grown in place"
            );
            assert_eq!(r.bytes_held(), 0);
            r.recycle(done.payload);
            assert_eq!(r.bytes_held(), size);
        }
    }

    /// The spare never costs a datagram its place: it is freed before anything is
    /// evicted, and not kept when it would not fit under the cap.
    #[test]
    fn the_spare_goes_before_any_datagram_is_evicted() {
        let config = ReassemblyConfig {
            max_bytes: 20_000,
            ..ReassemblyConfig::default()
        };
        let mut r = Reassembler::new(config);
        r.recycle(vec![0; 30_000]);
        assert_eq!(r.bytes_held(), 0, "too large for the cap: freed");
        r.recycle(vec![0; 12_000]);
        assert_eq!(r.bytes_held(), 12_000);
        // One datagram held in the spare, a smaller spare given back, then another
        // datagram too large for that spare whose first fragment needs its room.
        let a = random_payload(6_000, 3);
        let b = random_payload(6_000, 4);
        let (fa, fb) = (fragment(&a, 2000), fragment(&b, 5600));
        assert_eq!(add(&mut r, &fa[0], 1, T0), Ok(None));
        assert_eq!(
            r.stats().spare_reused,
            1,
            "the first datagram took the spare"
        );
        r.recycle(vec![0; 5_000]);
        assert!(r.spare.is_some());
        assert_eq!(add(&mut r, &fb[0], 2, T0), Ok(None));
        assert!(
            r.spare.is_none(),
            "the spare was freed for the second datagram"
        );
        assert_eq!(r.datagrams_held(), 2);
        assert_eq!(add(&mut r, &fb[1], 2, T0).unwrap().unwrap().payload, b);
        let rest: Vec<&Frag> = fa[1..].iter().collect();
        assert_eq!(feed_all(&mut r, &rest, 1).payload, a);
        assert_eq!(r.stats().evicted_for_memory, 0);
        assert_eq!(r.stats().spare_reused, 1);
    }

    #[test]
    fn in_order_and_reverse_order_reassemble() {
        for (len, size) in [
            (3000, 1480),
            (65_507, 8192),
            (65_507, 1480),
            (9, 8),
            (8, 8),
            (1, 8),
        ] {
            let payload = random_payload(len, len as u64);
            let frags = fragment(&payload, size);
            let mut r = Reassembler::default();
            let in_order: Vec<&Frag> = frags.iter().collect();
            let done = feed_all(&mut r, &in_order, 1);
            assert_eq!(done.payload, payload);
            assert_eq!(done.header, header(MIN_HEADER_LEN, 1));
            let reverse: Vec<&Frag> = frags.iter().rev().collect();
            let done = feed_all(&mut r, &reverse, 2);
            assert_eq!(done.payload, payload);
            assert_eq!(done.header, header(MIN_HEADER_LEN, 1));
            assert_eq!((r.bytes_held(), r.datagrams_held()), (0, 0));
            assert_eq!(r.stats().datagrams_completed, 2);
            assert_eq!(r.stats().fragments_in, 2 * frags.len() as u64);
            assert!(!r.contains(&key(1)) && !r.contains(&key(2)));
        }
    }

    #[test]
    fn a_whole_datagram_comes_straight_back() {
        let mut r = Reassembler::default();
        let h = header(24, 9);
        let done = r.add(key(1), 0, false, &h, b"hello", T0).unwrap().unwrap();
        assert_eq!(
            done,
            Reassembled {
                header: h,
                payload: b"hello".to_vec()
            }
        );
        // It takes no room in the queue: a full queue loses nothing to it.
        let mut r = Reassembler::new(ReassemblyConfig {
            max_datagrams: 1,
            ..ReassemblyConfig::default()
        });
        let f = Frag {
            offset: 0,
            more: true,
            bytes: vec![1; 8],
        };
        add(&mut r, &f, 2, T0).unwrap();
        let done = r
            .add(key(1), 0, false, &header(20, 9), &[], T0)
            .unwrap()
            .unwrap();
        assert!(done.payload.is_empty());
        assert!(r.contains(&key(2)) && !r.contains(&key(1)));
        assert_eq!(r.stats().evicted_for_memory, 0);
        // Too long is too long, fragment or not.
        let err = r.add(key(3), 0, false, &header(20, 9), &vec![0; 65_516], T0);
        assert_eq!(err, Err(ReassemblyError::TooLong));
    }

    #[test]
    fn the_buffer_grows_with_the_fragments() {
        let mut r = Reassembler::default();
        let f = Frag {
            offset: 0,
            more: true,
            bytes: vec![7; 1480],
        };
        add(&mut r, &f, 1, T0).unwrap();
        assert!(
            r.bytes_held() < 2048,
            "held {} for 1480 bytes",
            r.bytes_held()
        );
        // The last fragment fixes the length: the buffer goes straight to it.
        let f = Frag {
            offset: 2960,
            more: false,
            bytes: vec![9; 40],
        };
        add(&mut r, &f, 1, T0).unwrap();
        assert_eq!(r.queue[0].buffer.len(), 3000);
        let f = Frag {
            offset: 1480,
            more: true,
            bytes: vec![8; 1480],
        };
        let done = add(&mut r, &f, 1, T0).unwrap().unwrap();
        assert_eq!(done.payload.len(), 3000);
        assert_eq!(&done.payload[1480..1488], &[8; 8]);
    }

    #[test]
    fn the_first_fragment_header_is_kept_whatever_the_order() {
        let payload = random_payload(4000, 5);
        let frags = fragment(&payload, 1000);
        let mut r = Reassembler::default();
        let first = header(60, 77);
        for f in frags.iter().rev() {
            let h = if f.offset == 0 {
                first.clone()
            } else {
                header(20, 3)
            };
            if let Some(done) = r.add(key(4), f.offset, f.more, &h, &f.bytes, T0).unwrap() {
                assert_eq!(done.header, first);
                assert_eq!(done.payload, payload);
                return;
            }
        }
        panic!("never completed");
    }

    #[test]
    fn exact_duplicates_are_ignored_and_counted() {
        let payload = random_payload(2000, 6);
        let frags = fragment(&payload, 512);
        let mut r = Reassembler::default();
        for f in &frags[..3] {
            assert_eq!(add(&mut r, f, 1, T0), Ok(None));
            assert_eq!(add(&mut r, f, 1, T0), Ok(None));
        }
        // The last fragment twice, before the datagram completes.
        assert_eq!(add(&mut r, &frags[0], 1, T0), Ok(None));
        assert_eq!(r.stats().duplicates_ignored, 4);
        let done = add(&mut r, &frags[3], 1, T0).unwrap().unwrap();
        assert_eq!(done.payload, payload);
        assert_eq!(r.stats().overlaps_dropped, 0);
    }

    #[test]
    fn overlaps_drop_the_datagram_and_poison_the_key_until_its_timeout() {
        let cases: [(usize, bool, &[u8]); 4] = [
            (8, true, &[5; 16]),  // straddles the first fragment's end
            (0, true, &[6; 16]),  // same range, different bytes
            (0, false, &[1; 16]), // same range and bytes, but claims to be last
            (0, true, &[1; 8]),   // inside the first fragment, shorter
        ];
        for (offset, more, bytes) in cases {
            let mut r = Reassembler::default();
            let first = Frag {
                offset: 0,
                more: true,
                bytes: vec![1; 16],
            };
            let t1 = T0 + Duration::from_secs(1);
            add(&mut r, &first, 1, T0).unwrap();
            add(&mut r, &first, 2, T0).unwrap(); // another datagram, untouched
            let bad = Frag {
                offset,
                more,
                bytes: bytes.to_vec(),
            };
            assert_eq!(add(&mut r, &bad, 1, t1), Err(ReassemblyError::Overlap));
            assert!(!r.contains(&key(1)) && r.contains(&key(2)));
            assert_eq!(r.stats().overlaps_dropped, 1);
            // The key stays poisoned, whatever arrives, until the dropped datagram's timer
            // would have fired: 30 s after its first fragment, not after the overlap.
            let rest = Frag {
                offset: 16,
                more: false,
                bytes: vec![2; 8],
            };
            let before = T0 + Duration::from_secs(30);
            let almost = Instant::from_nanos(before.as_nanos() - 1);
            for f in [&first, &rest] {
                assert_eq!(
                    add(&mut r, f, 1, almost),
                    Err(ReassemblyError::PoisonedByOverlap)
                );
            }
            assert_eq!(r.stats().poisoned_fragments_dropped, 2);
            assert_eq!(r.next_deadline(), Some(T0 + Duration::from_secs(30)));
            // Expiry reports the untouched datagram only, never the poisoned key.
            let expired = r.expire(before);
            assert_eq!(expired.len(), 1);
            assert_eq!(expired[0].key, key(2));
            assert_eq!(r.next_deadline(), None);
            // After the timeout the key is fresh.
            assert_eq!(add(&mut r, &first, 1, before), Ok(None));
            let done = add(&mut r, &rest, 1, before).unwrap().unwrap();
            assert_eq!(done.payload, [vec![1; 16], vec![2; 8]].concat());
        }
    }

    #[test]
    fn poison_is_forgotten_lazily_too() {
        let mut r = Reassembler::default();
        let f = Frag {
            offset: 0,
            more: true,
            bytes: vec![1; 16],
        };
        let g = Frag {
            offset: 8,
            more: true,
            bytes: vec![1; 16],
        };
        add(&mut r, &f, 1, T0).unwrap();
        assert_eq!(add(&mut r, &g, 1, T0), Err(ReassemblyError::Overlap));
        // No call to expire: add itself sees that the poison is old.
        let later = T0 + Duration::from_secs(31);
        assert_eq!(add(&mut r, &f, 1, later), Ok(None));
        assert!(r.poisoned.is_empty());
    }

    #[test]
    fn fragments_that_disagree_on_the_end_drop_the_datagram() {
        // [8, 16) never arrives, so no datagram here completes.
        let a = Frag {
            offset: 0,
            more: true,
            bytes: vec![1; 8],
        };
        let middle = Frag {
            offset: 16,
            more: true,
            bytes: vec![5; 8],
        };
        let last_at_24 = Frag {
            offset: 16,
            more: false,
            bytes: vec![2; 8],
        };
        let last_at_32 = Frag {
            offset: 24,
            more: false,
            bytes: vec![3; 8],
        };
        let last_at_8 = Frag {
            offset: 8,
            more: false,
            bytes: vec![],
        };
        let past_end = Frag {
            offset: 24,
            more: true,
            bytes: vec![4; 8],
        };
        for (first, second) in [
            (&last_at_24, &last_at_32), // two last fragments
            (&last_at_32, &last_at_24), // the other order
            (&last_at_24, &past_end),   // data past the end
            (&middle, &last_at_8),      // an end before data held
        ] {
            let mut r = Reassembler::default();
            add(&mut r, &a, 1, T0).unwrap();
            let _ = add(&mut r, first, 1, T0).unwrap();
            assert_eq!(
                add(&mut r, second, 1, T0),
                Err(ReassemblyError::ConflictingEnd)
            );
            assert!(!r.contains(&key(1)));
            assert_eq!(
                add(&mut r, &a, 1, T0),
                Err(ReassemblyError::PoisonedByOverlap)
            );
            assert_eq!(r.stats().conflicting_ends_dropped, 1);
        }
        // An empty last fragment that agrees with the known end changes nothing.
        let mut r = Reassembler::default();
        add(&mut r, &last_at_24, 1, T0).unwrap();
        let empty_at_24 = Frag {
            offset: 24,
            more: false,
            bytes: vec![],
        };
        assert_eq!(add(&mut r, &empty_at_24, 1, T0), Ok(None));
        assert_eq!(r.stats().duplicates_ignored, 1);
        // And an empty last fragment is a real end.
        let mut r = Reassembler::default();
        add(&mut r, &empty_at_24, 1, T0).unwrap();
        add(
            &mut r,
            &Frag {
                offset: 0,
                more: true,
                bytes: vec![1; 16],
            },
            1,
            T0,
        )
        .unwrap();
        let done = add(
            &mut r,
            &Frag {
                offset: 16,
                more: true,
                bytes: vec![2; 8],
            },
            1,
            T0,
        );
        assert_eq!(
            done.unwrap().unwrap().payload,
            [vec![1; 16], vec![2; 8]].concat()
        );
    }

    #[test]
    fn malformed_fragments_are_dropped_and_the_datagram_kept() {
        let mut r = Reassembler::default();
        let first = Frag {
            offset: 0,
            more: true,
            bytes: vec![1; 16],
        };
        add(&mut r, &first, 1, T0).unwrap();
        let bad = [
            Frag {
                offset: 16,
                more: true,
                bytes: vec![2; 12],
            }, // not a multiple of 8
            Frag {
                offset: 16,
                more: true,
                bytes: vec![],
            }, // empty, not last
            Frag {
                offset: 20,
                more: false,
                bytes: vec![2; 8],
            }, // offset not a multiple of 8
        ];
        for f in &bad {
            assert_eq!(add(&mut r, f, 1, T0), Err(ReassemblyError::Malformed));
        }
        let h = header(20, 0);
        assert_eq!(
            r.add(key(1), 16, false, &h[..19], &[2; 4], T0),
            Err(ReassemblyError::Malformed)
        );
        assert_eq!(
            r.add(key(1), 16, false, &[0; 64], &[2; 4], T0),
            Err(ReassemblyError::Malformed)
        );
        assert_eq!(r.stats().malformed, 5);
        assert!(r.contains(&key(1)));
        // A last fragment may have any length.
        let last = Frag {
            offset: 16,
            more: false,
            bytes: vec![2; 12],
        };
        let done = add(&mut r, &last, 1, T0).unwrap().unwrap();
        assert_eq!(done.payload, [vec![1; 16], vec![2; 12]].concat());
    }

    #[test]
    fn too_long_datagrams_are_dropped() {
        let limit = MAX_TOTAL_LEN - MIN_HEADER_LEN; // 65515 with a 20-byte header
                                                    // Exactly the largest datagram reassembles.
        let payload = random_payload(limit, 9);
        let frags = fragment(&payload, 8192);
        let mut r = Reassembler::default();
        let order: Vec<&Frag> = frags.iter().collect();
        assert_eq!(feed_all(&mut r, &order, 1).payload, payload);
        // One byte more is too long, and takes the datagram with it.
        let mut r = Reassembler::default();
        add(&mut r, &frags[0], 1, T0).unwrap();
        let over = Frag {
            offset: 65_512,
            more: false,
            bytes: vec![0; 8],
        }; // ends at 65520
        assert_eq!(add(&mut r, &over, 1, T0), Err(ReassemblyError::TooLong));
        assert!(!r.contains(&key(1)));
        // Absurd offsets, alone.
        for offset in [usize::MAX & !7, 1 << 40, 65_536] {
            let f = Frag {
                offset,
                more: true,
                bytes: vec![0; 8],
            };
            assert_eq!(add(&mut r, &f, 2, T0), Err(ReassemblyError::TooLong));
        }
        assert_eq!(r.stats().too_long, 4);
        assert_eq!(r.datagrams_held(), 0);
        // Fragment zero with a 60-byte header lowers the limit under data already held.
        let mut r = Reassembler::default();
        let tail = Frag {
            offset: 65_504,
            more: false,
            bytes: vec![0; 11],
        }; // ends at 65515
        add(&mut r, &tail, 3, T0).unwrap();
        let err = r.add(key(3), 0, true, &header(60, 1), &[0; 8], T0);
        assert_eq!(err, Err(ReassemblyError::TooLong));
        assert!(!r.contains(&key(3)));
        check_invariants(&r);
    }

    #[test]
    fn timeout_quotes_the_first_fragment_only_if_it_arrived() {
        let mut r = Reassembler::default();
        let first = Frag {
            offset: 0,
            more: true,
            bytes: (0..24).collect(),
        };
        let middle = Frag {
            offset: 24,
            more: true,
            bytes: vec![9; 8],
        };
        add(&mut r, &middle, 1, T0).unwrap();
        add(&mut r, &first, 2, T0 + Duration::from_secs(5)).unwrap();
        // A later fragment does not restart the timer (RFC 791 §3.2).
        add(&mut r, &middle, 2, T0 + Duration::from_secs(20)).unwrap();
        assert_eq!(r.next_deadline(), Some(T0 + Duration::from_secs(30)));
        assert!(r.expire(T0 + Duration::from_secs(29)).is_empty());
        let expired = r.expire(T0 + Duration::from_secs(30));
        assert_eq!(
            expired,
            vec![Expired {
                key: key(1),
                first_fragment: None
            }]
        );
        assert_eq!(r.next_deadline(), Some(T0 + Duration::from_secs(35)));
        let expired = r.expire(T0 + Duration::from_secs(60));
        let mut quote = header(MIN_HEADER_LEN, 1);
        quote.extend(0..8u8);
        assert_eq!(
            expired,
            vec![Expired {
                key: key(2),
                first_fragment: Some(quote)
            }]
        );
        assert_eq!(r.stats().timed_out, 2);
        assert_eq!(
            (r.bytes_held(), r.datagrams_held(), r.next_deadline()),
            (0, 0, None)
        );
    }

    #[test]
    fn contains_searches_by_the_whole_key() {
        let mut r = Reassembler::default();
        assert!(!r.contains(&key(1)));
        let f = Frag {
            offset: 0,
            more: true,
            bytes: vec![1; 8],
        };
        for ident in 1..=5 {
            add(&mut r, &f, ident, T0).unwrap();
        }
        assert!((1..=5).all(|i| r.contains(&key(i))));
        assert!(!r.contains(&key(6)));
        let k = key(3);
        assert!(!r.contains(&FragKey { protocol: 6, ..k }));
        assert!(!r.contains(&FragKey {
            src: Ipv4Address::new(198, 18, 0, 9),
            ..k
        }));
        assert!(!r.contains(&FragKey {
            dst: Ipv4Address::new(198, 18, 0, 9),
            ..k
        }));
        assert!(r.discard(&k));
        assert!(!r.discard(&k));
        assert!(!r.contains(&k));
        assert_eq!(r.datagrams_held(), 4);
        check_invariants(&r);
    }

    #[test]
    fn the_key_of_a_packet() {
        use crate::wire::ipv4::{IpProtocol, Ipv4Options, Ipv4Repr};
        use crate::wire::Checksum;
        let repr = Ipv4Repr {
            src: Ipv4Address::new(198, 18, 0, 1),
            dst: Ipv4Address::new(198, 18, 0, 2),
            protocol: IpProtocol::Udp,
            ttl: 64,
            dscp: 0,
            ecn: 0,
            ident: 0xBEEF,
            dont_frag: false,
            more_frags: true,
            frag_offset: 8,
            payload_len: 8,
            options: Ipv4Options::NONE,
        };
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit(&mut Packet::new_unchecked(&mut buf[..]), Checksum::Check)
            .unwrap();
        let k = FragKey::of_packet(&Packet::new_checked(&buf[..]).unwrap());
        assert_eq!(
            k,
            FragKey {
                ident: 0xBEEF,
                ..key(0)
            }
        );
    }

    #[test]
    fn a_flood_never_passes_the_cap_and_evicts_the_oldest() {
        let config = ReassemblyConfig {
            max_bytes: 64 * 1024,
            max_datagrams: 1000,
            ..ReassemblyConfig::default()
        };
        let mut r = Reassembler::new(config);
        let f = Frag {
            offset: 0,
            more: true,
            bytes: vec![0xAA; 1480],
        };
        for ident in 0..2000u16 {
            add(&mut r, &f, ident, T0).unwrap();
            assert!(r.bytes_held() <= config.max_bytes);
        }
        let s = r.stats();
        assert!(s.evicted_for_memory > 1900, "{s:?}");
        assert_eq!(s.evicted_for_memory as usize + r.datagrams_held(), 2000);
        assert!(r.contains(&key(1999)) && !r.contains(&key(0)));
        // A real datagram still gets through the flood.
        let payload = random_payload(3000, 1);
        let frags = fragment(&payload, 1480);
        let order: Vec<&Frag> = frags.iter().collect();
        assert_eq!(feed_all(&mut r, &order, 5000).payload, payload);
        assert_eq!(r.stats().refused_for_memory, 0);
    }

    #[test]
    fn the_datagram_count_is_capped_too() {
        let config = ReassemblyConfig {
            max_datagrams: 4,
            ..ReassemblyConfig::default()
        };
        let mut r = Reassembler::new(config);
        let f = Frag {
            offset: 0,
            more: true,
            bytes: vec![1; 8],
        };
        for ident in 0..10 {
            add(&mut r, &f, ident, T0).unwrap();
        }
        assert_eq!(r.datagrams_held(), 4);
        assert_eq!(r.stats().evicted_for_memory, 6);
        assert!((6..10).all(|i| r.contains(&key(i))));
        // No datagrams at all: everything is refused.
        let mut r = Reassembler::new(ReassemblyConfig {
            max_datagrams: 0,
            ..config
        });
        assert_eq!(add(&mut r, &f, 1, T0), Err(ReassemblyError::NoMemory));
        assert_eq!(r.stats().refused_for_memory, 1);
    }

    #[test]
    fn a_datagram_too_big_for_the_cap_alone_is_refused_without_evicting() {
        let config = ReassemblyConfig {
            max_bytes: 8 * 1024,
            ..ReassemblyConfig::default()
        };
        let mut r = Reassembler::new(config);
        let small = Frag {
            offset: 0,
            more: true,
            bytes: vec![1; 1024],
        };
        add(&mut r, &small, 1, T0).unwrap();
        // A fragment far out that needs a buffer past the cap: refused, nothing evicted.
        let far = Frag {
            offset: 16_000,
            more: true,
            bytes: vec![2; 8],
        };
        assert_eq!(add(&mut r, &far, 2, T0), Err(ReassemblyError::NoMemory));
        assert!(r.contains(&key(1)) && !r.contains(&key(2)));
        // The same for a datagram that already holds fragments: it can never complete, so
        // it goes.
        assert_eq!(add(&mut r, &far, 1, T0), Err(ReassemblyError::NoMemory));
        assert!(!r.contains(&key(1)));
        let s = r.stats();
        assert_eq!((s.refused_for_memory, s.evicted_for_memory), (2, 0));
        assert_eq!(r.bytes_held(), 0);
        // A cap smaller than an empty entry refuses everything.
        let mut r = Reassembler::new(ReassemblyConfig {
            max_bytes: 10,
            ..config
        });
        assert_eq!(add(&mut r, &small, 1, T0), Err(ReassemblyError::NoMemory));
    }

    #[test]
    fn growth_slack_comes_from_free_room_only() {
        // An older datagram of 4 KiB, then a newer one that needs 8 bytes past its 4 KiB
        // buffer: doubling to 8 KiB would pass the cap, so the buffer grows into half the
        // free room instead, and nothing is evicted.
        let config = ReassemblyConfig {
            max_bytes: 10 * 1024,
            ..ReassemblyConfig::default()
        };
        let mut r = Reassembler::new(config);
        let big = Frag {
            offset: 0,
            more: true,
            bytes: vec![1; 4096],
        };
        add(&mut r, &big, 1, T0).unwrap();
        add(&mut r, &big, 2, T0).unwrap();
        add(
            &mut r,
            &Frag {
                offset: 4096,
                more: true,
                bytes: vec![2; 8],
            },
            2,
            T0,
        )
        .unwrap();
        let grown = r.queue[1].buffer.len();
        assert!(grown > 4104 && grown < 8192, "grew to {grown}");
        let free = config.max_bytes - r.bytes_held();
        assert!(free >= grown - 4104, "kept at least half the room free");
        // The next fragment fits in the slack: no growth, no eviction.
        add(
            &mut r,
            &Frag {
                offset: 4104,
                more: true,
                bytes: vec![3; 8],
            },
            2,
            T0,
        )
        .unwrap();
        assert_eq!(r.queue[1].buffer.len(), grown);
        assert_eq!(r.stats().evicted_for_memory, 0);
        assert!(r.contains(&key(1)));
    }

    /// The fragments of a datagram in some order, with exact duplicates mixed in before
    /// the fragment that completes it.
    fn shuffled_with_duplicates(
        frags: &[Frag],
        seed: u64,
        duplicates: usize,
    ) -> (Vec<&Frag>, usize) {
        let mut rng = Rng::new(seed);
        let mut order: Vec<&Frag> = frags.iter().collect();
        for i in (1..order.len()).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            order.swap(i, j);
        }
        if order.len() < 2 {
            return (order, 0);
        }
        let completing = order.pop().expect("two or more");
        for _ in 0..duplicates {
            // Copy one fragment already sent to a later place, still before the end.
            let from = rng.below(order.len() as u64) as usize;
            let to = from + 1 + rng.below((order.len() - from) as u64) as usize;
            order.insert(to, order[from]);
        }
        order.push(completing);
        (order, duplicates)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]

        #[test]
        fn any_order_with_duplicates_reassembles(
            len in 1usize..=65_507,
            blocks in 1usize..=1024,
            seed in any::<u64>(),
            duplicates in 0usize..12,
        ) {
            let payload = random_payload(len, seed);
            let frags = fragment(&payload, blocks * 8);
            let (order, duplicates) = shuffled_with_duplicates(&frags, seed ^ 1, duplicates);
            let mut r = Reassembler::default();
            let first_header = header(24, 42);
            let (last, rest) = order.split_last().unwrap();
            for f in rest {
                let h = if f.offset == 0 { first_header.clone() } else { header(20, 7) };
                prop_assert_eq!(r.add(key(9), f.offset, f.more, &h, &f.bytes, T0), Ok(None));
                check_invariants(&r);
            }
            let h = if last.offset == 0 { first_header.clone() } else { header(20, 7) };
            let done = r.add(key(9), last.offset, last.more, &h, &last.bytes, T0);
            let done = done.unwrap().unwrap();
            prop_assert_eq!(done.header, first_header);
            prop_assert!(done.payload == payload);
            let s = r.stats();
            prop_assert_eq!(s.duplicates_ignored, duplicates as u64);
            prop_assert_eq!(s.datagrams_completed, 1);
            prop_assert_eq!((r.bytes_held(), r.datagrams_held()), (0, 0));
        }

        /// Arbitrary fragments: offsets, lengths, flags, idents, headers, time going back
        /// and forth. Nothing panics, the caps hold, and every fragment is accounted for.
        #[test]
        fn arbitrary_fragments_never_break_the_caps(
            ops in proptest::collection::vec(
                (0u16..6, 0usize..12, 0usize..70, any::<bool>(), 0u8..3, 0u64..50, any::<u8>()),
                1..300,
            ),
            max_bytes in 0usize..40_000,
            max_datagrams in 0usize..5,
        ) {
            let config = ReassemblyConfig {
                timeout: Duration::from_secs(10),
                max_bytes,
                max_datagrams,
            };
            let mut r = Reassembler::new(config);
            let mut accepted = 0u64;
            let mut errors = 0u64;
            for &(ident, offset_sel, len, more, header_sel, secs, fill) in &ops {
                let offset = match offset_sel {
                    0 => usize::MAX - 7,
                    1 => 65_528,
                    2 => 65_512,
                    3 => 3,
                    n => (n - 4) * 8 * 97,
                };
                let h = header([19, 20, 60][header_sel as usize], 0);
                let payload = vec![fill % 2; len * 13 % 8200];
                let now = Instant::from_millis(secs * 1000);
                match r.add(key(ident), offset, more, &h, &payload, now) {
                    Ok(done) => {
                        accepted += 1;
                        // Buffers given back become the spare, under the same caps.
                        if let Some(done) = done {
                            r.recycle(done.payload);
                        }
                    }
                    Err(_) => errors += 1,
                }
                check_invariants(&r);
                if secs % 7 == 0 {
                    r.expire(now);
                    check_invariants(&r);
                }
            }
            let s = r.stats();
            prop_assert_eq!(s.fragments_in, accepted + errors);
            prop_assert_eq!(
                errors,
                s.overlaps_dropped + s.conflicting_ends_dropped + s.poisoned_fragments_dropped
                    + s.malformed + s.too_long + s.refused_for_memory
            );
        }
    }
}
