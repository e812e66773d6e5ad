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
//! received). Each message is probed with probability 1/N ([`Ledger::set_sample_every`]).
//! An unprobed message runs code with no probes in it: the stack's paths are generic over
//! [`Sampling`], compiled once with probes ([`Sampled`]) and once without
//! ([`Unsampled`]), and each entry into the stack picks one copy with a single branch on
//! the ledger's state (`probe::ledger::sampled!`; a message's start draws and picks its
//! copy at once, `in_message!` in `stack.rs`). A sampled
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

/// The default sampling rate: one message in 1,024 is probed. A probed message costs two
/// to three times an unprobed one when messages are short (two TSC reads per probe; `lab
/// overhead`, every message probed: 0.32-0.46 of the probe-free throughput for 64-byte
/// datagrams), so 1 in 1,024 keeps the probed ones' share of the time near 0.1-0.2%, and
/// still gives a ledger thousands of probed messages a second at the rates these stacks
/// run.
pub const DEFAULT_SAMPLE_EVERY: u32 = 1024;

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
    bucketing: Cell<Bucketing>,
    message_size: Cell<usize>,
    message_start: Cell<u64>,
    open: RefCell<Vec<Frame>>,
    scratch: RefCell<Vec<(u16, u64)>>,
    buckets: RefCell<BTreeMap<u32, Bucket>>,
    /// Messages seen is this less the countdown (wrapping): each draw adds the message
    /// drawn and the gap to the next, so an unprobed message counts itself by running
    /// the countdown down, with no counter of its own to bump.
    seen_plus_countdown: Cell<u64>,
}

#[cfg(feature = "probes")]
impl Recorder {
    fn new(clock: ProbeClock) -> Recorder {
        Recorder {
            clock,
            sample_every: Cell::new(DEFAULT_SAMPLE_EVERY),
            rng: Cell::new(0x9E37_79B9_7F4A_7C15),
            bucketing: Cell::new(Bucketing::Exact),
            message_size: Cell::new(0),
            message_start: Cell::new(0),
            open: RefCell::new(Vec::with_capacity(32)),
            scratch: RefCell::new(Vec::with_capacity(64)),
            buckets: RefCell::new(BTreeMap::new()),
            seen_plus_countdown: Cell::new(0),
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

    /// Messages to skip before the next probed one: geometric with success 1/n, by
    /// inversion, floor(ln U / ln(1 - 1/n)), U uniform in (0, 1] from a xorshift
    /// generator; `u64::MAX` (never) for n = 0. Rather than a random draw per message, a
    /// countdown to the next probed message: the same independent 1-in-N choice per
    /// message (so periodic traffic cannot alias with it), but an unprobed message costs
    /// a decrement, not a random number and a division.
    fn gap(&self, n: u32) -> u64 {
        match n {
            0 => return u64::MAX,
            1 => return 0,
            _ => {}
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

    /// The gap to the next probed message, as the mark holds it: at most [`COUNTDOWN`]
    /// (about 1.07e9 messages; a longer draw, for N near that or sampling off, is cut to
    /// it, and a countdown that runs out with sampling off draws again).
    fn countdown(&self) -> u32 {
        self.gap(self.sample_every.get()).min(COUNTDOWN as u64) as u32
    }

    /// Starts the countdown afresh (a new rate or seed), keeping the count of messages
    /// seen and whether a message is open.
    fn restart_countdown(&self, mark: &Cell<u32>) {
        let m = mark.get();
        let seen = self
            .seen_plus_countdown
            .get()
            .wrapping_sub((m & COUNTDOWN) as u64);
        let g = self.countdown();
        mark.set((m & !COUNTDOWN) | g);
        self.seen_plus_countdown.set(seen.wrapping_add(g as u64));
    }

    /// An outermost message with the countdown at zero: it is probed (unless sampling is
    /// off), and the countdown to the next one is drawn. Returns the flag it set in the
    /// mark (see [`Entered`]).
    #[cold]
    #[inline(never)]
    fn draw_and_begin(&self, size: usize, mark: &Cell<u32>) -> u32 {
        let g = self.countdown();
        let seen = self.seen_plus_countdown.get();
        self.seen_plus_countdown
            .set(seen.wrapping_add(1).wrapping_add(g as u64));
        if self.sample_every.get() == 0 {
            mark.set(g | UNPROBED);
            return UNPROBED;
        }
        mark.set(g | PROBED);
        self.message_size.set(size);
        self.scratch.borrow_mut().clear();
        self.message_start.set(self.clock.now());
        PROBED
    }

    /// The end of a probed message: its probes go into its bucket.
    #[cold]
    #[inline(never)]
    fn record_message(&self) {
        let wall = self.clock.now().saturating_sub(self.message_start.get());
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
        let l = Ledger::with_clock(clock);
        l.set_sample_every(1);
        let n = 2_000;
        let mut best = f64::INFINITY;
        for _ in 0..5 {
            let m = l.begin_message(0);
            let t0 = clock.now();
            for _ in 0..n {
                l.rec.open_probe(0);
                l.rec.close_probe();
            }
            let outside = clock.now().saturating_sub(t0) as f64;
            let inside: u64 = l.rec.scratch.borrow().iter().map(|&(_, t)| t).sum();
            l.end_message(m);
            best = best.min((outside - inside as f64).max(0.0) / n as f64);
        }
        best
    })
}

/// Whether code runs for a probed message, as a type: a path of the stack generic over it
/// is compiled twice, and the copy for unprobed messages ([`Unsampled`]) has no probe code
/// in it at all. Code entering the stack reads [`Ledger::sampled`] once and takes one copy
/// or the other (the `sampled!` macro), so that an unprobed message pays one
/// predictable branch per entry, not a test at each of the probes it passes.
pub trait Sampling: Copy {
    /// Whether probes in this copy record (never without the `probes` feature).
    const ON: bool;

    /// [`ON`](Self::ON), for code that has a value of a type it cannot name (an `impl
    /// Sampling` argument).
    #[inline(always)]
    fn on(self) -> bool {
        Self::ON
    }
}

/// The copy of a path that runs for a probed message, or for code that cannot tell: each
/// of its probes tests the sampled flag where it stands and records when it is set.
#[derive(Clone, Copy, Debug)]
pub struct Sampled;

impl Sampling for Sampled {
    const ON: bool = cfg!(feature = "probes");
}

/// The copy of a path that runs for an unprobed message: its probes are compiled out.
#[derive(Clone, Copy, Debug)]
pub struct Unsampled;

impl Sampling for Unsampled {
    const ON: bool = false;
}

/// The copy for rarely run code that picks none (bind, connect, close, a TAP device's
/// system calls): with probes, [`Sampled`], whose probes test the sampled flag where they
/// stand; without, [`Unsampled`], so that the probe-free build has one copy of everything
/// and the compiler inlines it as it would the only one.
#[cfg(feature = "probes")]
pub const TESTED: Sampled = Sampled;
/// See the `probes` build's [`TESTED`].
#[cfg(not(feature = "probes"))]
pub const TESTED: Unsampled = Unsampled;

/// Marks the branch that calls it as rarely taken (what `std::hint::cold_path` does from
/// Rust 1.95, on the toolchains this crate supports): a call to a cold function. Also on
/// the error exits of hot paths, so that the code after them keeps its weight in the
/// optimizer's estimate (see `tcp_build_and_send`).
#[cold]
#[inline(never)]
pub(crate) fn cold_path() {}

/// Evaluates `$body` with `$s` bound to [`Sampled`] if `$ledger`'s open message is probed,
/// else to [`Unsampled`]: the one branch that picks the copy of a path a message runs.
/// Without the `probes` feature only the [`Unsampled`] copy exists, and no branch: the
/// probe-free build compiles the stack exactly once, as if there were no choice. (For
/// code in this crate only: the feature tested is this crate's.)
macro_rules! sampled {
    ($ledger:expr, $s:ident => $body:expr) => {{
        #[cfg(feature = "probes")]
        let r = if $ledger.sampled() {
            // Probed messages are the rare ones: their copy is kept out of line, so that
            // the compiler inlines the unprobed copy as it would the only one.
            $crate::probe::ledger::cold_path();
            let $s = $crate::probe::Sampled;
            $body
        } else {
            let $s = $crate::probe::Unsampled;
            $body
        };
        #[cfg(not(feature = "probes"))]
        let r = {
            let $s = $crate::probe::Unsampled;
            $body
        };
        r
    }};
}
pub(crate) use sampled;

// Where the ledger stands, in one word (the ledger's `mark`): the countdown of unprobed
// messages left before the next probed one in the low 30 bits, and above them whether a
// message is open: `UNPROBED` while an unprobed message is, `PROBED` while a probed one is.
// Outside any message the mark is the countdown alone, so the common start of a message
// (outside, countdown not at zero) is one range test on one load, and one add and store
// open it (the countdown taken down, the flag set).
/// The flag of an open unprobed message in the ledger's mark.
#[cfg(feature = "probes")]
const UNPROBED: u32 = 1 << 30;
/// The flag of an open probed message.
#[cfg(feature = "probes")]
const PROBED: u32 = 1 << 31;
/// The countdown's bits in the mark, and so the longest gap between probed messages.
#[cfg(feature = "probes")]
const COUNTDOWN: u32 = UNPROBED - 1;

/// A message [`Ledger::enter_message`] opened or joined: the flag it set in the mark
/// ([`UNPROBED`] or [`PROBED`] for a new outermost message, 0 for one that joined an open
/// message), which is what its end takes off again.
#[cfg(feature = "probes")]
#[derive(Clone, Copy, Debug)]
pub(crate) struct Entered {
    flag: u32,
}

#[cfg(feature = "probes")]
impl Entered {
    /// A new outermost message, not probed: the common case, which runs the unprobed copy.
    #[inline(always)]
    pub(crate) fn new_unprobed(self) -> bool {
        self.flag == UNPROBED
    }

    /// A new outermost message drawn for probing.
    #[inline(always)]
    pub(crate) fn drawn(self) -> bool {
        self.flag == PROBED
    }
}

/// The ledger of one stack: probes, sampling, buckets, and the counters beside them.
#[derive(Debug)]
pub struct Ledger {
    /// Unprobed messages left before the next probed one, and whether a message is open
    /// and probed ([`UNPROBED`], [`PROBED`]). Here rather than in the recorder, so that an
    /// entry reads one word beside the stack's other fields, without following a pointer
    /// first. Nested messages join the outermost and need no count of their own: the one
    /// that found the ledger outside set the flag and takes it off ([`Entered`]; the
    /// stack's `in_message!` keeps it where it stands, a [`Message`] or an
    /// [`OpenMessage`] carries it).
    #[cfg(feature = "probes")]
    mark: Cell<u32>,
    #[cfg(feature = "probes")]
    rec: Box<Recorder>,
    counters: Counters,
}

/// A message opened by [`Ledger::begin_message`], to be passed to
/// [`Ledger::end_message`]: what the ledger said when it opened (the flag it set, if it
/// was the outermost, and so whether it was drawn), and so what its end has to do.
#[must_use = "every begin_message needs its end_message"]
#[derive(Debug)]
pub struct OpenMessage {
    #[cfg(feature = "probes")]
    entered: Entered,
}

impl Default for Ledger {
    fn default() -> Self {
        Ledger::new()
    }
}

impl Ledger {
    /// A ledger probing one message in [`DEFAULT_SAMPLE_EVERY`].
    pub fn new() -> Ledger {
        #[cfg(feature = "probes")]
        return Ledger::with_clock(*ProbeClock::get());
        #[cfg(not(feature = "probes"))]
        Ledger {
            counters: Counters::new(),
        }
    }

    #[cfg(feature = "probes")]
    fn with_clock(clock: ProbeClock) -> Ledger {
        let l = Ledger {
            mark: Cell::new(0),
            rec: Box::new(Recorder::new(clock)),
            counters: Counters::new(),
        };
        l.rec.restart_countdown(&l.mark);
        l
    }

    /// Whether this build records probes (the `probes` cargo feature).
    pub const fn enabled() -> bool {
        cfg!(feature = "probes")
    }

    /// Probe one message in `n`: 1 probes every message, 0 none. The gap between probed
    /// messages is at most about 1.07e9 (the countdown's 30 bits), so an `n` near that or
    /// above probes a little more often than one in `n`.
    pub fn set_sample_every(&self, n: u32) {
        #[cfg(feature = "probes")]
        {
            self.rec.sample_every.set(n);
            self.rec.restart_countdown(&self.mark);
        }
        #[cfg(not(feature = "probes"))]
        let _ = n;
    }

    /// Seeds the sampling draw (for reproducible runs).
    pub fn set_sample_seed(&self, seed: u64) {
        #[cfg(feature = "probes")]
        {
            self.rec.rng.set(seed | 1);
            self.rec.restart_countdown(&self.mark);
        }
        #[cfg(not(feature = "probes"))]
        let _ = seed;
    }

    pub fn set_bucketing(&self, b: Bucketing) {
        #[cfg(feature = "probes")]
        self.rec.bucketing.set(b);
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
        let open = self.begin_message(size);
        #[cfg(not(feature = "probes"))]
        let _ = open;
        Message {
            #[cfg(feature = "probes")]
            ledger: self,
            #[cfg(feature = "probes")]
            open,
            _ledger: PhantomData,
        }
    }

    /// Opens a message without a guard, for code that must mutate its owner while the
    /// message is open: every `begin_message` needs its `end_message`, given what this
    /// returned.
    #[inline]
    pub fn begin_message(&self, size: usize) -> OpenMessage {
        #[cfg(feature = "probes")]
        return OpenMessage {
            entered: self.enter_message(size),
        };
        #[cfg(not(feature = "probes"))]
        {
            let _ = size;
            OpenMessage {}
        }
    }

    /// Closes the message [`begin_message`](Self::begin_message) opened.
    #[inline]
    pub fn end_message(&self, m: OpenMessage) {
        #[cfg(feature = "probes")]
        self.leave_message(m.entered);
        #[cfg(not(feature = "probes"))]
        let _ = m;
    }

    /// Opens a message of `size` bytes, or joins the one open. The common case, an
    /// outermost message not drawn for probing, is a range test of the mark, and the
    /// countdown taken down and the flag set in one add and store, in line; the caller
    /// knows from the answer which copy of its path to run and how to close the message,
    /// with nothing more to read.
    #[cfg(feature = "probes")]
    #[inline(always)]
    pub(crate) fn enter_message(&self, size: usize) -> Entered {
        let m = self.mark.get();
        // Outside, with a countdown of 1 or more.
        if m.wrapping_sub(1) < COUNTDOWN {
            self.mark.set(m - 1 + UNPROBED);
            return Entered { flag: UNPROBED };
        }
        let flag = if m > COUNTDOWN {
            0
        } else {
            self.rec.draw_and_begin(size, &self.mark)
        };
        Entered { flag }
    }

    /// Closes a message that was not drawn for probing: the mark goes back to what it was
    /// (outside, or the unprobed message this one joined) with whatever the countdown
    /// says now.
    #[cfg(feature = "probes")]
    #[inline(always)]
    pub(crate) fn leave_undrawn(&self, e: Entered) {
        self.mark.set(self.mark.get() - e.flag);
    }

    /// Closes the message [`enter_message`](Self::enter_message) opened, recording it if
    /// it was drawn for probing.
    #[cfg(feature = "probes")]
    #[inline(always)]
    pub(crate) fn leave_message(&self, e: Entered) {
        if e.drawn() {
            self.rec.record_message();
        }
        self.leave_undrawn(e);
    }

    /// Sets the open message's size (the receive path learns it late).
    #[inline]
    pub fn set_message_size(&self, s: impl Sampling, size: usize) {
        #[cfg(feature = "probes")]
        if s.on() && self.probed() {
            self.rec.message_size.set(size);
        }
        #[cfg(not(feature = "probes"))]
        let _ = (s, size);
    }

    /// Whether a probed message is open (the mark's top bit).
    #[cfg(feature = "probes")]
    #[inline(always)]
    fn probed(&self) -> bool {
        self.mark.get() & PROBED != 0
    }

    /// Whether the open message is being probed (always false without the `probes`
    /// feature). Code entering the stack reads it once and runs a path compiled for the
    /// answer (the `sampled!` macro).
    #[inline(always)]
    pub fn sampled(&self) -> bool {
        #[cfg(feature = "probes")]
        return self.probed();
        #[cfg(not(feature = "probes"))]
        false
    }

    /// Opens a probe charged to (`layer`, `side`, `op`) until the guard drops. In code
    /// compiled for an unprobed message (`s` is [`Unsampled`]) this is nothing at all.
    #[inline(always)]
    pub fn probe<S: Sampling>(&self, s: S, layer: Layer, side: Side, op: Op) -> Probe<'_> {
        let _ = s;
        #[cfg(feature = "probes")]
        if S::ON && self.probed() {
            let r = &*self.rec;
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
    pub fn device_work<S: Sampling>(&self, s: S) -> Probe<'_> {
        let _ = s;
        #[cfg(feature = "probes")]
        if S::ON && self.probed() {
            let r = &*self.rec;
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
    pub fn measure<S: Sampling, R>(
        &self,
        s: S,
        layer: Layer,
        side: Side,
        op: Op,
        f: impl FnOnce() -> R,
    ) -> R {
        let _p = self.probe(s, layer, side, op);
        f()
    }

    /// Messages opened so far, sampled or not.
    pub fn messages_seen(&self) -> u64 {
        #[cfg(feature = "probes")]
        return self
            .rec
            .seen_plus_countdown
            .get()
            .wrapping_sub((self.mark.get() & COUNTDOWN) as u64);
        #[cfg(not(feature = "probes"))]
        0
    }

    /// Forgets everything recorded (not the settings, not the counters).
    pub fn clear(&self) {
        #[cfg(feature = "probes")]
        {
            self.rec.buckets.borrow_mut().clear();
            self.rec
                .seen_plus_countdown
                .set((self.mark.get() & COUNTDOWN) as u64);
        }
    }

    /// What the ledger holds now, in nanoseconds, with the counters.
    pub fn snapshot(&self) -> super::Snapshot {
        #[cfg(feature = "probes")]
        {
            let r = &*self.rec;
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
            Snapshot {
                probes_enabled: true,
                clock: match c.source() {
                    super::clock::Source::Tsc => "tsc",
                    super::clock::Source::Monotonic => "monotonic",
                },
                ns_per_tick: c.ns_per_tick(),
                probe_overhead_ns: each_ns,
                sample_every: r.sample_every.get(),
                messages_seen: self.messages_seen(),
                buckets,
                counters: self.counters.snapshot(),
            }
        }
        #[cfg(not(feature = "probes"))]
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
    #[cfg(feature = "probes")]
    open: OpenMessage,
    _ledger: PhantomData<&'a Ledger>,
}

impl Message<'_> {
    /// Sets the size that decides the message's bucket (the receive path learns it late).
    #[inline]
    pub fn set_size(&self, size: usize) {
        #[cfg(feature = "probes")]
        self.ledger.set_message_size(TESTED, size);
        #[cfg(not(feature = "probes"))]
        let _ = size;
    }
}

impl Drop for Message<'_> {
    #[inline]
    fn drop(&mut self) {
        #[cfg(feature = "probes")]
        self.ledger.leave_message(self.open.entered);
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
