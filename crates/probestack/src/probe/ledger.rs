//! The cost ledger: scoped probes with exclusive attribution, sampled per message, keyed by
//! message-size bucket.
//!
//! # How time is attributed
//!
//! A probe opens at a point of the code (`let _p = ledger.probe(layer, side, op);`) and
//! closes when its guard drops. Probes nest: the time of a probe opened inside another is
//! *subtracted* from the outer one, so each tick is charged to exactly one (layer, op, side)
//! and the ledger adds up to the time spent, with nothing counted twice (DESIGN.md §4).
//!
//! # Messages and sampling
//!
//! Work is grouped by message: `ledger.message(size)` opens one (a datagram sent, a frame
//! received). Each message is probed with probability 1/N ([`Ledger::set_sample_every`]);
//! a probe in an unsampled message costs one load and a predictable branch. A sampled
//! message's probes go to a small scratch list and are added to the bucket of the message's
//! size when it closes, so a receive path can learn the size late ([`Message::set_size`]).
//! The message's own wall time is kept too, so the part no probe covered is reported as
//! unaccounted, never hidden.
//!
//! Without the cargo feature `probes`, [`Probe`] and [`Message`] are empty types and every
//! call compiles to nothing; the ledger stays empty.

#[cfg(feature = "probes")]
use std::cell::{Cell, RefCell};
#[cfg(feature = "probes")]
use std::collections::BTreeMap;
use std::marker::PhantomData;

use super::counters::Counters;
#[cfg(feature = "probes")]
use super::ProbeClock;
use super::{Layer, Op, Side};
#[cfg(feature = "probes")]
use super::{Snapshot, SnapshotBucket, SnapshotCell};

/// How message sizes map to ledger buckets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Bucketing {
    /// Every size its own bucket: for experiments that sweep a list of sizes.
    #[default]
    Exact,
    /// Sizes rounded up to a power of two: for mixed traffic.
    PowerOfTwo,
}

impl Bucketing {
    /// The bucket key for a message of `size` bytes.
    pub fn bucket(self, size: usize) -> u32 {
        let size = u32::try_from(size).unwrap_or(u32::MAX);
        match self {
            Bucketing::Exact => size,
            Bucketing::PowerOfTwo if size == 0 => 0,
            Bucketing::PowerOfTwo => size.checked_next_power_of_two().unwrap_or(u32::MAX),
        }
    }
}

/// The default sampling rate: one message in 64 is probed.
pub const DEFAULT_SAMPLE_EVERY: u32 = 64;

#[cfg(feature = "probes")]
const OPS: usize = Op::ALL.len();
#[cfg(feature = "probes")]
const CELLS: usize = Layer::ALL.len() * OPS * Side::ALL.len();

/// The pseudo-cell of device work: timed so that it is subtracted from the probe around
/// it and from the host's share of the message, but charged to no layer.
#[cfg(feature = "probes")]
const DEVICE_CELL: u16 = u16::MAX;

#[cfg(feature = "probes")]
#[inline(always)]
fn cell_index(layer: Layer, side: Side, op: Op) -> u16 {
    ((layer as usize * OPS + op as usize) * 2 + side as usize) as u16
}

#[cfg(feature = "probes")]
fn cell_key(i: usize) -> (Layer, Side, Op) {
    let side = Side::ALL[i % 2];
    let op = Op::ALL[(i / 2) % OPS];
    let layer = Layer::ALL[i / 2 / OPS];
    (layer, side, op)
}

/// An open probe on the stack of open probes.
#[cfg(feature = "probes")]
#[derive(Clone, Copy, Debug)]
struct Frame {
    start: u64,
    /// Ticks spent in probes nested inside this one.
    nested: u64,
    cell: u16,
}

#[cfg(feature = "probes")]
#[derive(Clone, Debug)]
struct Bucket {
    ticks: Vec<u64>,
    counts: Vec<u64>,
    messages: u64,
    wall_ticks: u64,
    device_ticks: u64,
    /// Probes closed (device spans included), for the estimate of the probes' own cost.
    probes: u64,
}

#[cfg(feature = "probes")]
impl Bucket {
    fn new() -> Bucket {
        Bucket {
            ticks: vec![0; CELLS],
            counts: vec![0; CELLS],
            messages: 0,
            wall_ticks: 0,
            device_ticks: 0,
            probes: 0,
        }
    }
}

/// The recording half of the ledger, present only with the `probes` feature.
#[cfg(feature = "probes")]
#[derive(Debug)]
struct Recorder {
    clock: ProbeClock,
    sample_every: Cell<u32>,
    rng: Cell<u64>,
    /// Unprobed messages left before the next probed one.
    countdown: Cell<u64>,
    bucketing: Cell<Bucketing>,
    /// Open messages (nested ones join the outermost).
    message_depth: Cell<u32>,
    message_size: Cell<usize>,
    message_start: Cell<u64>,
    open: RefCell<Vec<Frame>>,
    scratch: RefCell<Vec<(u16, u64)>>,
    buckets: RefCell<BTreeMap<u32, Bucket>>,
    messages_seen: Cell<u64>,
}

#[cfg(feature = "probes")]
impl Recorder {
    fn new(clock: ProbeClock) -> Recorder {
        Recorder {
            clock,
            sample_every: Cell::new(DEFAULT_SAMPLE_EVERY),
            rng: Cell::new(0x9E37_79B9_7F4A_7C15),
            countdown: Cell::new(0),
            bucketing: Cell::new(Bucketing::Exact),
            message_depth: Cell::new(0),
            message_size: Cell::new(0),
            message_start: Cell::new(0),
            open: RefCell::new(Vec::with_capacity(32)),
            scratch: RefCell::new(Vec::with_capacity(64)),
            buckets: RefCell::new(BTreeMap::new()),
            messages_seen: Cell::new(0),
        }
    }

    #[cold]
    #[inline(never)]
    fn open_probe(&self, cell: u16) {
        let start = self.clock.now();
        self.open.borrow_mut().push(Frame {
            start,
            nested: 0,
            cell,
        });
    }

    #[cold]
    #[inline(never)]
    fn close_probe(&self) {
        let now = self.clock.now();
        let mut open = self.open.borrow_mut();
        let Some(f) = open.pop() else { return };
        let elapsed = now.saturating_sub(f.start);
        if let Some(parent) = open.last_mut() {
            parent.nested += elapsed;
        }
        drop(open);
        self.scratch
            .borrow_mut()
            .push((f.cell, elapsed.saturating_sub(f.nested)));
    }

    /// Decides whether the next message is probed: 1 in `sample_every`. Rather than a
    /// random draw per message, a countdown to the next probed message, drawn from the
    /// geometric distribution when it runs out: the same independent 1-in-N choice per
    /// message (so periodic traffic cannot alias with it), but an unprobed message costs a
    /// decrement, not a random number and a division.
    #[inline]
    fn draw(&self) -> bool {
        match self.sample_every.get() {
            0 => false,
            1 => true,
            n => {
                let c = self.countdown.get();
                if c > 0 {
                    self.countdown.set(c - 1);
                    false
                } else {
                    self.countdown.set(self.gap(n));
                    true
                }
            }
        }
    }

    /// Messages to skip before the next probed one: geometric with success 1/n, by
    /// inversion, floor(ln U / ln(1 - 1/n)), U uniform in (0, 1] from a xorshift generator.
    fn gap(&self, n: u32) -> u64 {
        if n <= 1 {
            return 0;
        }
        let mut x = self.rng.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng.set(x);
        let u = ((x >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
        let g = u.ln() / (1.0 - 1.0 / n as f64).ln();
        if g.is_finite() && g >= 0.0 {
            g as u64
        } else {
            0
        }
    }

    /// `sampled_flag` is the ledger's flag, which this sets for the message (it is false
    /// between messages: the end of a probed one clears it).
    #[inline]
    fn begin_message(&self, size: usize, sampled_flag: &Cell<bool>) {
        let depth = self.message_depth.get();
        self.message_depth.set(depth + 1);
        if depth > 0 {
            return;
        }
        self.messages_seen.set(self.messages_seen.get() + 1);
        // The common case, in line: the countdown to the next probed message runs on.
        let c = self.countdown.get();
        if c > 0 && self.sample_every.get() > 1 {
            self.countdown.set(c - 1);
            return;
        }
        self.draw_and_begin(size, sampled_flag);
    }

    #[cold]
    #[inline(never)]
    fn draw_and_begin(&self, size: usize, sampled_flag: &Cell<bool>) {
        let sampled = self.draw();
        sampled_flag.set(sampled);
        if sampled {
            self.message_size.set(size);
            self.scratch.borrow_mut().clear();
            self.message_start.set(self.clock.now());
        }
    }

    #[inline]
    fn end_message(&self, sampled: &Cell<bool>) {
        let depth = self.message_depth.get().saturating_sub(1);
        self.message_depth.set(depth);
        if depth > 0 || !sampled.get() {
            return;
        }
        self.record_message(sampled);
    }

    /// The end of a probed message: its probes go into its bucket.
    #[cold]
    #[inline(never)]
    fn record_message(&self, sampled: &Cell<bool>) {
        let wall = self.clock.now().saturating_sub(self.message_start.get());
        sampled.set(false);
        // Probes still open (a guard leaked out of its message) are abandoned.
        self.open.borrow_mut().clear();
        let key = self.bucketing.get().bucket(self.message_size.get());
        let mut buckets = self.buckets.borrow_mut();
        let b = buckets.entry(key).or_insert_with(Bucket::new);
        b.probes += self.scratch.borrow().len() as u64;
        for &(cell, ticks) in self.scratch.borrow().iter() {
            if cell == DEVICE_CELL {
                b.device_ticks += ticks;
            } else {
                b.ticks[cell as usize] += ticks;
                b.counts[cell as usize] += 1;
            }
        }
        b.messages += 1;
        b.wall_ticks += wall;
    }
}

/// What one probe costs the code around it, in ticks: the time an empty probe takes from
/// outside, less what the ledger charges to the probe itself. Measured once per process
/// on a private recorder (the best of five runs of 2,000 probes, so that a preemption does
/// not inflate it).
#[cfg(feature = "probes")]
fn probe_overhead_ticks(clock: ProbeClock) -> f64 {
    static COST: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *COST.get_or_init(|| {
        let r = Recorder::new(clock);
        let sampled = Cell::new(false);
        r.sample_every.set(1);
        let n = 2_000;
        let mut best = f64::INFINITY;
        for _ in 0..5 {
            r.begin_message(0, &sampled);
            let t0 = clock.now();
            for _ in 0..n {
                r.open_probe(0);
                r.close_probe();
            }
            let outside = clock.now().saturating_sub(t0) as f64;
            let inside: u64 = r.scratch.borrow().iter().map(|&(_, t)| t).sum();
            r.end_message(&sampled);
            best = best.min((outside - inside as f64).max(0.0) / n as f64);
        }
        best
    })
}

/// The ledger of one stack: probes, sampling, buckets, and the counters beside them.
#[derive(Debug)]
pub struct Ledger {
    /// Whether the open message is being probed. Here rather than in the recorder, so
    /// that a probe in an unprobed message reads one flag beside the stack's other fields
    /// and branches, without following a pointer first.
    #[cfg(feature = "probes")]
    sampled: Cell<bool>,
    #[cfg(feature = "probes")]
    rec: Option<Box<Recorder>>,
    counters: Counters,
}

impl Default for Ledger {
    fn default() -> Self {
        Ledger::new()
    }
}

impl Ledger {
    /// A ledger probing one message in [`DEFAULT_SAMPLE_EVERY`].
    pub fn new() -> Ledger {
        Ledger {
            #[cfg(feature = "probes")]
            sampled: Cell::new(false),
            #[cfg(feature = "probes")]
            rec: Some(Box::new(Recorder::new(*ProbeClock::get()))),
            counters: Counters::new(),
        }
    }

    /// Whether this build records probes (the `probes` cargo feature).
    pub const fn enabled() -> bool {
        cfg!(feature = "probes")
    }

    /// Probe one message in `n`: 1 probes every message, 0 none.
    pub fn set_sample_every(&self, n: u32) {
        #[cfg(feature = "probes")]
        if let Some(r) = &self.rec {
            r.sample_every.set(n);
            r.countdown.set(r.gap(n));
        }
        #[cfg(not(feature = "probes"))]
        let _ = n;
    }

    /// Seeds the sampling draw (for reproducible runs).
    pub fn set_sample_seed(&self, seed: u64) {
        #[cfg(feature = "probes")]
        if let Some(r) = &self.rec {
            r.rng.set(seed | 1);
            r.countdown.set(r.gap(r.sample_every.get()));
        }
        #[cfg(not(feature = "probes"))]
        let _ = seed;
    }

    pub fn set_bucketing(&self, b: Bucketing) {
        #[cfg(feature = "probes")]
        if let Some(r) = &self.rec {
            r.bucketing.set(b);
        }
        #[cfg(not(feature = "probes"))]
        let _ = b;
    }

    /// The counters kept beside the ledger.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Opens a message of `size` bytes (the size can be set later). Messages opened inside
    /// an open message are part of it.
    #[inline]
    pub fn message(&self, size: usize) -> Message<'_> {
        self.begin_message(size);
        Message {
            #[cfg(feature = "probes")]
            ledger: self,
            _ledger: PhantomData,
        }
    }

    /// Opens a message without a guard, for code that must mutate its owner while the
    /// message is open (the stack): every `begin_message` needs its `end_message`.
    #[inline]
    pub fn begin_message(&self, size: usize) {
        #[cfg(feature = "probes")]
        if let Some(r) = &self.rec {
            r.begin_message(size, &self.sampled);
        }
        #[cfg(not(feature = "probes"))]
        let _ = size;
    }

    /// Closes the message [`begin_message`](Self::begin_message) opened.
    #[inline]
    pub fn end_message(&self) {
        #[cfg(feature = "probes")]
        if let Some(r) = &self.rec {
            r.end_message(&self.sampled);
        }
    }

    /// Sets the open message's size (the receive path learns it late).
    #[inline]
    pub fn set_message_size(&self, size: usize) {
        #[cfg(feature = "probes")]
        if let (true, Some(r)) = (self.sampled.get(), &self.rec) {
            r.message_size.set(size);
        }
        #[cfg(not(feature = "probes"))]
        let _ = size;
    }

    /// Opens a probe charged to (`layer`, `side`, `op`) until the guard drops. Outside a
    /// sampled message this costs a load and a branch (and one more when the guard drops).
    #[inline(always)]
    pub fn probe(&self, layer: Layer, side: Side, op: Op) -> Probe<'_> {
        #[cfg(feature = "probes")]
        if let (true, Some(r)) = (self.sampled.get(), &self.rec) {
            r.open_probe(cell_index(layer, side, op));
            return Probe {
                rec: Some(r),
                _ledger: PhantomData,
            };
        }
        let _ = (layer, side, op);
        Probe {
            #[cfg(feature = "probes")]
            rec: None,
            _ledger: PhantomData,
        }
    }

    /// Opens a span of work the device does (a NIC model's CRC, DMA, checksum offload):
    /// real wall time, but the device's, not the host's (paper 004 §3.2), so it is charged
    /// to no layer and is subtracted from the probe around it.
    #[inline(always)]
    pub fn device_work(&self) -> Probe<'_> {
        #[cfg(feature = "probes")]
        if let (true, Some(r)) = (self.sampled.get(), &self.rec) {
            r.open_probe(DEVICE_CELL);
            return Probe {
                rec: Some(r),
                _ledger: PhantomData,
            };
        }
        Probe {
            #[cfg(feature = "probes")]
            rec: None,
            _ledger: PhantomData,
        }
    }

    /// Runs `f` inside a probe.
    #[inline(always)]
    pub fn measure<R>(&self, layer: Layer, side: Side, op: Op, f: impl FnOnce() -> R) -> R {
        let _p = self.probe(layer, side, op);
        f()
    }

    /// Messages opened so far, sampled or not.
    pub fn messages_seen(&self) -> u64 {
        #[cfg(feature = "probes")]
        if let Some(r) = &self.rec {
            return r.messages_seen.get();
        }
        0
    }

    /// Forgets everything recorded (not the settings, not the counters).
    pub fn clear(&self) {
        #[cfg(feature = "probes")]
        if let Some(r) = &self.rec {
            r.buckets.borrow_mut().clear();
            r.messages_seen.set(0);
        }
    }

    /// What the ledger holds now, in nanoseconds, with the counters.
    pub fn snapshot(&self) -> super::Snapshot {
        #[cfg(feature = "probes")]
        if let Some(r) = &self.rec {
            let c = r.clock;
            let each_ns = c.ns_per_tick() * probe_overhead_ticks(c);
            let buckets = r
                .buckets
                .borrow()
                .iter()
                .map(|(&size, b)| SnapshotBucket {
                    size,
                    messages: b.messages,
                    wall_ns: c.to_ns(b.wall_ticks),
                    device_ns: c.to_ns(b.device_ticks),
                    probes: b.probes,
                    probe_overhead_ns: b.probes as f64 * each_ns / b.messages.max(1) as f64,
                    cells: (0..CELLS)
                        .filter(|&i| b.counts[i] > 0)
                        .map(|i| {
                            let (layer, side, op) = cell_key(i);
                            SnapshotCell {
                                layer,
                                side,
                                op,
                                ns: c.to_ns(b.ticks[i]),
                                count: b.counts[i],
                            }
                        })
                        .collect(),
                })
                .collect();
            return Snapshot {
                probes_enabled: true,
                clock: match c.source() {
                    super::clock::Source::Tsc => "tsc",
                    super::clock::Source::Monotonic => "monotonic",
                },
                ns_per_tick: c.ns_per_tick(),
                probe_overhead_ns: each_ns,
                sample_every: r.sample_every.get(),
                messages_seen: r.messages_seen.get(),
                buckets,
                counters: self.counters.snapshot(),
            };
        }
        super::Snapshot {
            probes_enabled: false,
            clock: "none",
            ns_per_tick: 0.0,
            probe_overhead_ns: 0.0,
            sample_every: 0,
            messages_seen: 0,
            buckets: Vec::new(),
            counters: self.counters.snapshot(),
        }
    }
}

/// An open message; it closes when dropped.
#[must_use = "a message closes when this guard drops"]
pub struct Message<'a> {
    #[cfg(feature = "probes")]
    ledger: &'a Ledger,
    _ledger: PhantomData<&'a Ledger>,
}

impl Message<'_> {
    /// Sets the size that decides the message's bucket (the receive path learns it late).
    #[inline]
    pub fn set_size(&self, size: usize) {
        #[cfg(feature = "probes")]
        self.ledger.set_message_size(size);
        #[cfg(not(feature = "probes"))]
        let _ = size;
    }
}

impl Drop for Message<'_> {
    #[inline]
    fn drop(&mut self) {
        #[cfg(feature = "probes")]
        self.ledger.end_message();
    }
}

/// An open probe; its time is charged when it drops.
#[must_use = "a probe measures until this guard drops"]
pub struct Probe<'a> {
    #[cfg(feature = "probes")]
    rec: Option<&'a Recorder>,
    _ledger: PhantomData<&'a Ledger>,
}

impl Drop for Probe<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        #[cfg(feature = "probes")]
        if let Some(r) = self.rec {
            r.close_probe();
        }
    }
}
