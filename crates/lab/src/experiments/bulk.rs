//! `probestack lab bulk`: a one-way TCP bulk transfer between two probestack stacks, one
//! stack per thread, as the papers' two workstations on the machine's two cores
//! (DESIGN.md §2).
//!
//! # The set-up
//!
//! Host A (the sender) and host B (the receiver) are the two stacks of a
//! [`probestack::sim::Pair`] at 198.18.0.1 and 198.18.0.2, joined by the memory link (both
//! NICs at their defaults apart from the MTU: DMA hand-off, no checksum offload, queues of
//! 256 frames, a notification per frame, a perfect wire). Both use the same [`Tuning`]
//! preset, `bsd` or `fast` (or one of paper 004's variants, [`Config`], which also set
//! the NICs' checksum offload and TSO), and the stack's default TCP settings (1 MiB send
//! and receive buffers, window scaling, timestamps, SACK, Nagle on). The connection is opened on the
//! calling thread; then each stack moves to a thread of its own, pinned to a core of its
//! own where the machine has two ([`crate::affinity`]), which polls it without sleeping
//! (it only yields its core, `sched_yield`, after 64 polls in a row that moved nothing),
//! reading the time from one shared [`RealClock`] (the memory link wants one time base
//! for both ends). One untimed cell warms the process up before the matrix.
//!
//! # What is measured
//!
//! A's application writes [`WRITE_SIZE`]-byte slices of a fixed 1 MiB pseudo-random
//! pattern, polling its stack after every write (Nagle on: in Minshall's form, so a run's
//! short last segment does not wait for a delayed ACK); B's application reads up to [`READ_SIZE`] bytes at a time until its socket would block,
//! then polls. One *run* moves
//! `bytes_per_run` bytes: B starts the clock, lets A begin, and stops the clock when it has
//! read the run's last byte. The figure is application payload delivered, in Gbit/s
//! (10^9 bits per second), the median over the timed runs, which follow one warm-up run on
//! the same connection (so ARP, the handshake, slow start and the buffer pools are behind
//! it). One connection per cell of the matrix: MTU × configuration × whether the
//! application touches the data. By default the configurations are `bsd` and `fast`
//! ([`CONFIGS`]); [`run_configs`] takes any of [`ALL_CONFIGS`], and issue 7's matrix is
//! [`MATRIX_MTUS`] × [`ALL_CONFIGS`]. With the NIC's checksum offload or TSO on, the NIC
//! model's work runs on the same two threads (the sender's transmit, the receiver's
//! receive): the figures are the host's time plus the NIC model's, not the host's alone
//! (the ledger, which could set the device's share apart, is not sampled here).
//!
//! When the application **touches the data**, B folds every byte it reads into a
//! [`Digest`] and compares the result with the digest of what A sent, after the clock has
//! stopped: the work is kept, and every such run checks that the bytes arrived intact (a
//! change confined to any one 8-byte word is always caught). When it does
//! **not**, B only copies the bytes out of the socket (the stack's copy) and looks at none
//! of them.
//!
//! Header prediction: `(data hits + ACK hits) / (hits + misses)` from both stacks' ledger
//! counters over the timed runs. `Tuning::bsd()` has header prediction off, so it counts
//! neither hits nor misses and its rate is `null`.
//!
//! A run that stops making progress for `stall_timeout` (or takes longer than
//! `run_timeout` in all) ends the cell with an error that says where each end stood; a cell
//! that fails is reported in `failures`, and the others still run.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration as WallDuration, Instant as WallInstant};

use probestack::buf::Loan;
use probestack::driver::NicConfig;
use probestack::probe::{Counter, Snapshot};
use probestack::sim::{HostConfig, Pair};
use probestack::socket::tcp::{TcpError, TcpHandle};
use probestack::stack::Stack;
use probestack::time::{Clock, Duration, RealClock};
use probestack::tuning::Tuning;
use serde::Serialize;

use crate::bench::median;
use crate::table::Table;

/// The link MTUs measured by default: Ethernet, FDDI, jumbo Ethernet, then up to the
/// largest IPv4 datagram.
pub const MTUS: [usize; 6] = [1500, 4352, 9000, 16384, 32768, 65535];
/// The MTUs of issue 7's full matrix (`--matrix`): Ethernet, then powers of two and their
/// midpoint up to the largest IPv4 datagram.
pub const MATRIX_MTUS: [usize; 7] = [1500, 4096, 8192, 16384, 24576, 32768, 65535];
/// Bytes the sending application hands to the stack per `tcp_send` (iperf3's default
/// TCP block).
pub const WRITE_SIZE: usize = 128 * 1024;
/// The receiving application's buffer: the most one `tcp_recv` returns.
pub const READ_SIZE: usize = 128 * 1024;
/// Length of the pattern the sender repeats; every run sends it from its start.
const PATTERN_LEN: usize = 1 << 20;
/// B's listening port.
const PORT: u16 = 5001;
/// How long the handshake may take.
const HANDSHAKE_TIMEOUT: WallDuration = WallDuration::from_secs(2);
/// Polls between two looks at the wall clock for a stall.
const POLLS_PER_CHECK: u32 = 1024;
/// Polls in a row that find nothing to do before a thread yields its core
/// (`sched_yield`): nearly free when the core is the thread's own, and it lets the other
/// thread run when the two share a core because the machine has other work.
const POLLS_BEFORE_YIELD: u32 = 64;

/// What both stacks and both NICs run: the basic presets `bsd` and `fast`, and the
/// variants of paper 004's Figure 2.
///
/// The paper-004 variants are [`Tuning::fast`] with three switches set as named and the
/// memory NIC's checksum flags and TSO to match; everything else (the NIC's DMA, queues,
/// one notification per frame) is as for `fast`. All four turn checksum elision off:
/// `fast` negotiates RFC 1146's "no checksum" on the memory link (it has a CRC), and a
/// variant that computes no checksum could not show what the checksum costs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Config {
    /// `Tuning::bsd()`, the default NIC.
    Bsd,
    /// `Tuning::fast()`, the default NIC (no offload, no TSO), so TCP checksums are
    /// elided by agreement (RFC 1146).
    Fast,
    /// Paper 004's `none`: the host copies the data and then sums it in a second pass on
    /// each side; no checksum offload on the NIC, no TSO.
    None,
    /// Paper 004's checksum offload: the sending NIC completes the TCP checksum from the
    /// pseudo-header seed and the receiving NIC verifies it (IPv4 and TCP, transmit and
    /// receive); the host only copies. No TSO.
    ChecksumOffload,
    /// Paper 004's integrated copy and checksum: the host sums the data while it copies it
    /// (`fused_copy_checksum`); no offload, no TSO.
    IntegratedCopyChecksum,
    /// Paper 004's zero-copy sockets: A loans its pattern and TCP sends it by reference
    /// (the NIC gathers it), B's NIC splits headers from page-aligned payloads and B's
    /// application takes whole pages by reference (`tcp_recv_zero_copy`), copying only
    /// the odd rest; the host still sums the data on both sides (no offload, no TSO).
    ZeroCopy,
    /// Zero-copy plus checksum offload: the host neither copies nor sums whole pages. No
    /// TSO, as in the paper.
    ZeroCopyOffload,
    /// Checksum offload plus TCP segmentation offload (super-segments of up to 64 KiB that
    /// the NIC cuts): beyond paper 004, which had no TSO.
    ChecksumOffloadTso,
}

/// The configurations `run` measures: the basic two.
pub const CONFIGS: [Config; 2] = [Config::Bsd, Config::Fast];
/// Paper 004's variants, in the order of its Figure 2, then TSO.
pub const PAPER004_CONFIGS: [Config; 6] = [
    Config::None,
    Config::ZeroCopy,
    Config::ChecksumOffload,
    Config::ZeroCopyOffload,
    Config::IntegratedCopyChecksum,
    Config::ChecksumOffloadTso,
];
/// Every configuration, in table order.
pub const ALL_CONFIGS: [Config; 8] = [
    Config::Bsd,
    Config::Fast,
    Config::None,
    Config::ZeroCopy,
    Config::ChecksumOffload,
    Config::ZeroCopyOffload,
    Config::IntegratedCopyChecksum,
    Config::ChecksumOffloadTso,
];

impl Config {
    pub fn name(self) -> &'static str {
        match self {
            Config::Bsd => "bsd",
            Config::Fast => "fast",
            Config::None => "none",
            Config::ChecksumOffload => "checksum_offload",
            Config::IntegratedCopyChecksum => "integrated_copy_checksum",
            Config::ChecksumOffloadTso => "checksum_offload_tso",
            Config::ZeroCopy => "zero_copy",
            Config::ZeroCopyOffload => "zero_copy_offload",
        }
    }

    /// Whether the applications loan and take pages (zero-copy sockets).
    pub fn zero_copy(self) -> bool {
        matches!(self, Config::ZeroCopy | Config::ZeroCopyOffload)
    }

    /// The configuration of a name ([`Config::name`]).
    pub fn from_name(name: &str) -> Option<Config> {
        ALL_CONFIGS.into_iter().find(|c| c.name() == name)
    }

    pub fn tuning(self) -> Tuning {
        let paper004 = |fused: bool, offload: bool, tso: bool| Tuning {
            checksum_elision: false,
            fused_copy_checksum: fused,
            checksum_offload: offload,
            segmentation_offload: tso,
            // Paper 004's stacks send one segment per frame unless the NIC cuts them.
            software_segmentation: false,
            ..Tuning::fast()
        };
        match self {
            Config::Bsd => Tuning::bsd(),
            Config::Fast => Tuning::fast(),
            Config::None | Config::ZeroCopy => paper004(false, false, false),
            Config::ChecksumOffload | Config::ZeroCopyOffload => paper004(false, true, false),
            Config::IntegratedCopyChecksum => paper004(true, false, false),
            Config::ChecksumOffloadTso => paper004(false, true, true),
        }
    }

    /// Both NICs' configuration at `mtu`: the default memory NIC (DMA, queues of 256, a
    /// notification per frame, no offload), with the offloads the variant names.
    pub fn nic(self, mtu: usize) -> NicConfig {
        let base = NicConfig {
            mtu,
            ..NicConfig::default()
        };
        match self {
            Config::Bsd | Config::Fast | Config::None | Config::IntegratedCopyChecksum => base,
            Config::ChecksumOffload => NicConfig {
                tso: false,
                ..base.with_offloads()
            },
            Config::ChecksumOffloadTso => base.with_offloads(),
            Config::ZeroCopy => NicConfig {
                header_split: true,
                ..base
            },
            Config::ZeroCopyOffload => NicConfig {
                tso: false,
                header_split: true,
                ..base.with_offloads()
            },
        }
    }
}

/// How much to measure.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// Timed runs per cell, after one warm-up run; the median is reported.
    pub runs: usize,
    /// Payload bytes one run moves.
    pub bytes_per_run: usize,
    /// A run during which nothing moves for this long has stalled.
    pub stall_timeout: WallDuration,
    /// The longest a run (or a wait between runs) may take.
    pub run_timeout: WallDuration,
}

impl Settings {
    /// Five timed runs of 8 MiB.
    pub const QUICK: Settings = Settings {
        runs: 5,
        bytes_per_run: 8 << 20,
        stall_timeout: WallDuration::from_secs(5),
        run_timeout: WallDuration::from_secs(60),
    };
    /// Five timed runs of 32 MiB.
    pub const FULL: Settings = Settings {
        runs: 5,
        bytes_per_run: 32 << 20,
        stall_timeout: WallDuration::from_secs(5),
        run_timeout: WallDuration::from_secs(60),
    };
}

// ---------------------------------------------------------------------------------------
// The digest the receiving application computes when it touches the data.

/// Odd multiplier of the digest (a 64-bit constant with well-mixed bits).
const MIX: u64 = 0x9E37_79B9_7F4A_7C15;

/// A 64-bit digest of a byte stream that reads every byte, 32 bytes per step in four
/// independent lanes (so it runs at several bytes per cycle and the receiver's figure
/// stays about the data, not the digest). Each lane takes one 8-byte word per step as
/// `lane = (lane ^ word) * MIX`, a bijection of the lane for a given word, so any change
/// confined to one word always changes the result. Words are counted from the start of
/// the stream, so the result does not depend on how the stream was cut into reads.
#[derive(Clone, Debug)]
pub struct Digest {
    lanes: [u64; 4],
    /// Bytes of the current 32-byte block not yet folded in.
    pending: [u8; 32],
    pending_len: usize,
    total: u64,
}

impl Default for Digest {
    fn default() -> Self {
        Digest::new()
    }
}

impl Digest {
    pub fn new() -> Digest {
        Digest {
            lanes: [1, 2, 3, 4],
            pending: [0; 32],
            pending_len: 0,
            total: 0,
        }
    }

    #[inline(always)]
    fn block(lanes: &mut [u64; 4], block: &[u8]) {
        for (lane, word) in lanes.iter_mut().zip(block.chunks_exact(8)) {
            let mut w = [0u8; 8];
            w.copy_from_slice(word);
            *lane = (*lane ^ u64::from_le_bytes(w)).wrapping_mul(MIX);
        }
    }

    /// Folds in the next bytes of the stream.
    pub fn update(&mut self, mut data: &[u8]) {
        self.total += data.len() as u64;
        if self.pending_len > 0 {
            let take = (32 - self.pending_len).min(data.len());
            self.pending[self.pending_len..self.pending_len + take].copy_from_slice(&data[..take]);
            self.pending_len += take;
            data = &data[take..];
            if self.pending_len < 32 {
                return;
            }
            let block = self.pending;
            Self::block(&mut self.lanes, &block);
            self.pending_len = 0;
        }
        let blocks = data.chunks_exact(32);
        let rest = blocks.remainder();
        for b in blocks {
            Self::block(&mut self.lanes, b);
        }
        self.pending[..rest.len()].copy_from_slice(rest);
        self.pending_len = rest.len();
    }

    /// The digest of everything folded in so far (the length included).
    pub fn finish(&self) -> u64 {
        let mut lanes = self.lanes;
        if self.pending_len > 0 {
            let mut last = [0u8; 32];
            last[..self.pending_len].copy_from_slice(&self.pending[..self.pending_len]);
            Self::block(&mut lanes, &last);
        }
        let mut h = self.total.wrapping_mul(MIX);
        for lane in lanes {
            h = (h ^ lane).wrapping_mul(MIX);
            h ^= h >> 29;
        }
        h
    }
}

/// The 1 MiB the sender repeats: bytes of a xorshift generator, so that no two places in
/// it look alike.
pub fn pattern() -> Vec<u8> {
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let mut out = Vec::with_capacity(PATTERN_LEN);
    while out.len() < PATTERN_LEN {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(PATTERN_LEN);
    out
}

/// The digest of one run's bytes: `len` bytes of `pattern`, repeated from its start.
pub fn expected_digest(pattern: &[u8], len: usize) -> u64 {
    let mut d = Digest::new();
    let mut left = len;
    while left > 0 {
        let n = left.min(pattern.len());
        d.update(&pattern[..n]);
        left -= n;
    }
    d.finish()
}

// ---------------------------------------------------------------------------------------
// Counters.

/// The ledger counters a cell reports, from one stack or summed over both.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Tally {
    pub hp_data_hits: u64,
    pub hp_ack_hits: u64,
    pub hp_misses: u64,
    pub segments_out: u64,
    pub retransmitted_segments: u64,
    pub retransmit_timeouts: u64,
    pub delayed_acks: u64,
    pub window_probes: u64,
    /// Frames the driver could not queue (the transmit ring was full).
    pub tx_queue_full: u64,
    /// Packet buffers the pool had to take from the global allocator.
    pub fresh_buffers: u64,
    /// Frames the driver took from the NIC, and the notifications that announced them.
    pub frames_in: u64,
    pub notifications: u64,
    /// Segments sent with loaned data by reference (zero-copy send).
    pub zero_copy_segments: u64,
    /// Bytes the receiving application took as whole pages by reference, and by copy
    /// ("odd data"), with zero-copy receive.
    pub rx_page_bytes: u64,
    pub rx_odd_bytes: u64,
}

impl Tally {
    fn of(stack: &Stack) -> Tally {
        let c = stack.ledger().counters();
        Tally {
            hp_data_hits: c.get(Counter::TcpPredictionDataHits),
            hp_ack_hits: c.get(Counter::TcpPredictionAckHits),
            hp_misses: c.get(Counter::TcpPredictionMisses),
            segments_out: c.get(Counter::TcpSegmentsOut),
            retransmitted_segments: c.get(Counter::TcpRetransmittedSegments),
            retransmit_timeouts: c.get(Counter::TcpRetransmitTimeouts),
            delayed_acks: c.get(Counter::TcpDelayedAcks),
            window_probes: c.get(Counter::TcpWindowProbes),
            tx_queue_full: c.get(Counter::DriverDropQueueFull),
            fresh_buffers: stack.pool().stats().global_allocs,
            frames_in: c.get(Counter::DriverFramesIn),
            notifications: c.get(Counter::DriverNotifications),
            zero_copy_segments: c.get(Counter::TcpZeroCopySegments),
            rx_page_bytes: c.get(Counter::TcpZeroCopyRxBytes),
            rx_odd_bytes: c.get(Counter::TcpZeroCopyRxOddBytes),
        }
    }

    /// What was counted between `earlier` and `self`.
    fn since(self, earlier: Tally) -> Tally {
        self.zip(earlier, |now, then| now - then)
    }

    /// Both stacks' counts together.
    fn plus(self, other: Tally) -> Tally {
        self.zip(other, |a, b| a + b)
    }

    /// `f` of each pair of counts.
    fn zip(self, o: Tally, f: impl Fn(u64, u64) -> u64) -> Tally {
        Tally {
            hp_data_hits: f(self.hp_data_hits, o.hp_data_hits),
            hp_ack_hits: f(self.hp_ack_hits, o.hp_ack_hits),
            hp_misses: f(self.hp_misses, o.hp_misses),
            segments_out: f(self.segments_out, o.segments_out),
            retransmitted_segments: f(self.retransmitted_segments, o.retransmitted_segments),
            retransmit_timeouts: f(self.retransmit_timeouts, o.retransmit_timeouts),
            delayed_acks: f(self.delayed_acks, o.delayed_acks),
            window_probes: f(self.window_probes, o.window_probes),
            tx_queue_full: f(self.tx_queue_full, o.tx_queue_full),
            fresh_buffers: f(self.fresh_buffers, o.fresh_buffers),
            frames_in: f(self.frames_in, o.frames_in),
            notifications: f(self.notifications, o.notifications),
            zero_copy_segments: f(self.zero_copy_segments, o.zero_copy_segments),
            rx_page_bytes: f(self.rx_page_bytes, o.rx_page_bytes),
            rx_odd_bytes: f(self.rx_odd_bytes, o.rx_odd_bytes),
        }
    }

    fn hp_hits(&self) -> u64 {
        self.hp_data_hits + self.hp_ack_hits
    }
}

// ---------------------------------------------------------------------------------------
// The two threads.

/// What the two threads share.
struct Shared {
    /// Runs B has started: A sends run `k` once this exceeds `k`.
    started: AtomicUsize,
    /// B has read every run.
    finished: AtomicBool,
    /// One thread gave up (or panicked); the other stops at its next look.
    abort: AtomicBool,
}

/// The error of a thread that stopped because the other one gave up.
const STOPPED: &str = "stopped: the other end gave up";

/// Raises `abort` if its thread unwinds, so the other thread does not wait in vain.
struct AbortOnPanic<'a>(&'a AtomicBool);

impl Drop for AbortOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::SeqCst);
        }
    }
}

/// One cell's plan, as both threads see it.
#[derive(Clone, Copy)]
struct Plan {
    /// The warm-up run and the timed runs.
    total_runs: usize,
    bytes: usize,
    touch: bool,
    /// A loans its pattern and B takes pages ([`Config::zero_copy`]).
    zero_copy: bool,
    /// A sends no faster than this many bytes per second (`lab cpu`), or as fast as it
    /// can.
    pace: Option<f64>,
    /// B works only when its stack has something due, and records every such turn in
    /// its ledger (`lab cpu`): its CPU time is then what it spent working.
    measure_cpu: bool,
    stall_timeout: WallDuration,
    run_timeout: WallDuration,
}

/// Where a connection stands, for error messages.
fn describe(stack: &Stack, h: TcpHandle) -> String {
    match stack.tcp_connection(h) {
        Ok(c) => {
            let s = c.stats();
            format!(
                "state {:?}, cwnd {} B, in flight {} B, send buffer {} B, receive buffer {} B, \
                 segments in/out {}/{}, retransmitted {}, timeouts {}, dup ACKs in {}, \
                 out of order in {}",
                c.state(),
                c.cwnd(),
                c.snd_nxt().bytes_since(c.snd_una()),
                stack.tcp_send_queued(h).unwrap_or(0),
                stack.tcp_recv_queued(h).unwrap_or(0),
                s.segments_in,
                s.segments_out,
                s.retransmitted_segments,
                s.timeouts,
                s.dup_acks_in,
                s.ooo_segments_in,
            )
        }
        Err(e) => format!("no connection ({e})"),
    }
}

/// Polls `stack` until `done` holds; an error after `limit`, or when the other thread has
/// given up.
fn wait_polling(
    stack: &mut Stack,
    h: TcpHandle,
    clock: RealClock,
    shared: &Shared,
    limit: WallDuration,
    what: &str,
    done: impl Fn() -> bool,
) -> Result<(), String> {
    let start = WallInstant::now();
    let mut polls = 0u32;
    loop {
        if done() {
            return Ok(());
        }
        if shared.abort.load(Ordering::Relaxed) {
            return Err(STOPPED.into());
        }
        stack.poll(clock.now());
        polls = polls.wrapping_add(1);
        if polls.is_multiple_of(POLLS_BEFORE_YIELD) {
            std::thread::yield_now();
        }
        if polls.is_multiple_of(POLLS_PER_CHECK) && start.elapsed() > limit {
            shared.abort.store(true, Ordering::SeqCst);
            return Err(format!(
                "waited {limit:?} for {what}; {}",
                describe(stack, h)
            ));
        }
    }
}

/// Watches a run for progress: an error when nothing has moved for the stall timeout or
/// the run has lasted its whole timeout. Looks at the wall clock only every
/// [`POLLS_PER_CHECK`] polls, and yields the core after every [`POLLS_BEFORE_YIELD`] polls
/// in a row that moved nothing.
struct Watchdog {
    start: WallInstant,
    last_progress: WallInstant,
    /// The count at the last look at the clock.
    last_count: usize,
    /// The count at the last poll.
    seen: usize,
    polls: u32,
    idle_polls: u32,
}

impl Watchdog {
    fn new() -> Watchdog {
        let now = WallInstant::now();
        Watchdog {
            start: now,
            last_progress: now,
            last_count: 0,
            seen: 0,
            polls: 0,
            idle_polls: 0,
        }
    }

    /// Called after each poll with the bytes moved so far; `Err` when the run is stuck or
    /// out of time.
    fn tick(&mut self, count: usize, plan: &Plan) -> Result<(), String> {
        if count == self.seen {
            self.idle_polls = self.idle_polls.wrapping_add(1);
            if self.idle_polls.is_multiple_of(POLLS_BEFORE_YIELD) {
                std::thread::yield_now();
            }
        } else {
            self.seen = count;
            self.idle_polls = 0;
        }
        self.polls = self.polls.wrapping_add(1);
        if !self.polls.is_multiple_of(POLLS_PER_CHECK) {
            return Ok(());
        }
        let now = WallInstant::now();
        if count != self.last_count {
            self.last_count = count;
            self.last_progress = now;
        }
        if now - self.last_progress > plan.stall_timeout {
            return Err(format!(
                "stalled: nothing moved for {:?}",
                now - self.last_progress
            ));
        }
        if now - self.start > plan.run_timeout {
            return Err(format!("the run took longer than {:?}", plan.run_timeout));
        }
        Ok(())
    }
}

/// A's thread: sends each run's bytes once B has started the run, then polls until B has
/// read everything. Returns its counters over the timed runs.
fn sender(
    mut stack: Stack,
    h: TcpHandle,
    clock: RealClock,
    pattern: &[u8],
    plan: Plan,
    shared: &Shared,
) -> Result<Tally, String> {
    let _guard = AbortOnPanic(&shared.abort);
    // Zero-copy: the pattern is loaned once and sent by reference again and again (as
    // netperf sends one buffer), never written while the stack holds it.
    let loan = plan.zero_copy.then(|| Loan::new(pattern.to_vec()));
    let mut before = Tally::of(&stack);
    for run in 0..plan.total_runs {
        wait_polling(
            &mut stack,
            h,
            clock,
            shared,
            plan.run_timeout,
            &format!("B to start run {run}"),
            || shared.started.load(Ordering::Acquire) > run,
        )
        .map_err(|e| format!("sender: {e}"))?;
        if run == 1 {
            before = Tally::of(&stack);
        }
        let mut sent = 0usize;
        let mut watchdog = Watchdog::new();
        let run_start = WallInstant::now();
        while sent < plan.bytes {
            if shared.abort.load(Ordering::Relaxed) {
                return Err(STOPPED.into());
            }
            if let Some(rate) = plan.pace {
                if sent as f64 >= rate * run_start.elapsed().as_secs_f64() {
                    // Ahead of the pace: only keep the stack going.
                    stack.poll(clock.now());
                    if let Err(e) = watchdog.tick(sent, &plan) {
                        shared.abort.store(true, Ordering::SeqCst);
                        return Err(format!("sender: run {run}: {e}"));
                    }
                    continue;
                }
            }
            let offset = sent % pattern.len();
            let n = WRITE_SIZE
                .min(pattern.len() - offset)
                .min(plan.bytes - sent);
            let queued = match &loan {
                Some(loan) => match loan.slice(offset..offset + n) {
                    Ok(part) => stack.tcp_send_loan(h, &part),
                    Err(e) => return Err(format!("sender: {e:?}")),
                },
                None => stack.tcp_send(h, &pattern[offset..offset + n]),
            };
            match queued {
                Ok(k) => sent += k,
                Err(TcpError::WouldBlock) => {}
                Err(e) => {
                    shared.abort.store(true, Ordering::SeqCst);
                    return Err(format!(
                        "sender: run {run}: send after {sent} bytes: {e}; {}",
                        describe(&stack, h)
                    ));
                }
            }
            stack.poll(clock.now());
            if let Err(e) = watchdog.tick(sent, &plan) {
                shared.abort.store(true, Ordering::SeqCst);
                return Err(format!(
                    "sender: run {run}: {e} ({sent} of {} bytes written); {}",
                    plan.bytes,
                    describe(&stack, h)
                ));
            }
        }
    }
    wait_polling(
        &mut stack,
        h,
        clock,
        shared,
        plan.run_timeout,
        "B to read the last run",
        || shared.finished.load(Ordering::Acquire),
    )
    .map_err(|e| format!("sender: {e}"))?;
    Ok(Tally::of(&stack).since(before))
}

/// What B's thread brings back.
struct Received {
    /// Wall time of each timed run, in ns.
    run_ns: Vec<f64>,
    /// The digest of each run, when the application touched the data.
    digests: Vec<u64>,
    /// Counters over the timed runs.
    tally: Tally,
    /// B's ledger over the timed runs, when it measured its CPU time.
    ledger: Option<Snapshot>,
}

/// B's thread: starts each run, reads until the run's bytes are in, stops the clock, and
/// (touching the data) checks the run's digest against `expected`.
fn receiver(
    mut stack: Stack,
    h: TcpHandle,
    clock: RealClock,
    plan: Plan,
    expected: u64,
    shared: &Shared,
) -> Result<Received, String> {
    let _guard = AbortOnPanic(&shared.abort);
    let mut buf = vec![0u8; READ_SIZE];
    let mut run_ns = Vec::with_capacity(plan.total_runs);
    let mut digests = Vec::with_capacity(plan.total_runs);
    let mut before = Tally::of(&stack);
    let fail = |stack: &Stack, run: usize, got: usize, e: String| {
        shared.abort.store(true, Ordering::SeqCst);
        format!(
            "receiver: run {run}: {e} ({got} of {} bytes read); {}",
            plan.bytes,
            describe(stack, h)
        )
    };
    if plan.measure_cpu {
        stack.ledger().set_sample_every(1);
    }
    for run in 0..plan.total_runs {
        if run == 1 {
            before = Tally::of(&stack);
            stack.ledger().clear();
        }
        let mut digest = Digest::new();
        let mut got = 0usize;
        let mut watchdog = Watchdog::new();
        let start = WallInstant::now();
        shared.started.store(run + 1, Ordering::Release);
        while got < plan.bytes {
            // With the CPU measured, B reads only when data waits, and each read is a
            // message of its ledger, as is each turn of work below.
            let idle = plan.measure_cpu && stack.tcp_recv_queued(h).is_ok_and(|n| n == 0);
            let m = (plan.measure_cpu && !idle).then(|| stack.ledger().begin_message(0));
            let read = if idle {
                Err(TcpError::WouldBlock)
            } else if plan.zero_copy {
                // Pages by reference; the application drops them when done.
                stack
                    .tcp_recv_zero_copy(h, READ_SIZE)
                    .map(|chunk| match chunk {
                        Some(chunk) => {
                            if plan.touch {
                                digest.update(&chunk);
                            }
                            chunk.len()
                        }
                        None => 0,
                    })
            } else {
                stack.tcp_recv(h, &mut buf).inspect(|&n| {
                    if plan.touch {
                        digest.update(&buf[..n]);
                    }
                })
            };
            if let Some(m) = m {
                stack.ledger().end_message(m);
            }
            match read {
                Ok(0) => return Err(fail(&stack, run, got, "end of stream".into())),
                Ok(n) => got += n,
                Err(TcpError::WouldBlock) => {
                    if shared.abort.load(Ordering::Relaxed) {
                        return Err(STOPPED.into());
                    }
                    let now = clock.now();
                    if !plan.measure_cpu {
                        stack.poll(now);
                    } else if stack.next_deadline().is_some_and(|d| d <= now) {
                        // Work is due (a frame arrived, a timer expired): the CPU's turn,
                        // as an interrupt would start it; otherwise B is idle, as a
                        // halted CPU would be.
                        let m = stack.ledger().begin_message(0);
                        stack.poll(now);
                        stack.ledger().end_message(m);
                    }
                    if let Err(e) = watchdog.tick(got, &plan) {
                        return Err(fail(&stack, run, got, e));
                    }
                }
                Err(e) => return Err(fail(&stack, run, got, format!("receive: {e}"))),
            }
        }
        let ns = start.elapsed().as_nanos() as f64;
        if got != plan.bytes {
            return Err(fail(&stack, run, got, "more bytes than were sent".into()));
        }
        if plan.touch {
            let d = black_box(digest.finish());
            if d != expected {
                return Err(fail(
                    &stack,
                    run,
                    got,
                    format!(
                        "the bytes differ from those sent (digest {d:016x}, sent {expected:016x})"
                    ),
                ));
            }
            digests.push(d);
        }
        if run >= 1 {
            run_ns.push(ns);
        }
    }
    shared.finished.store(true, Ordering::Release);
    Ok(Received {
        run_ns,
        digests,
        tally: Tally::of(&stack).since(before),
        ledger: plan.measure_cpu.then(|| stack.ledger().snapshot()),
    })
}

/// Joins a thread's result, a panic included.
fn joined<T>(r: std::thread::Result<Result<T, String>>, who: &str) -> Result<T, String> {
    match r {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(no message)".into());
            Err(format!("{who} panicked: {msg}"))
        }
    }
}

// ---------------------------------------------------------------------------------------
// One cell.

/// The figures of one cell, before they become a [`Row`].
pub struct CellFigures {
    /// Wall time of each timed run, in ns.
    pub run_ns: Vec<f64>,
    /// The receiver's digest of each run (warm-up included) when it touched the data.
    pub digests: Vec<u64>,
    /// Both stacks' counters over the timed runs, summed.
    pub both: Tally,
    pub sender: Tally,
    pub receiver: Tally,
    /// The sender's MSS.
    pub mss: usize,
    pub checksum_elided: bool,
    /// B's ledger over the timed runs, when it measured its CPU time
    /// ([`run_cell_paced`]).
    pub receiver_ledger: Option<Snapshot>,
    /// Each thread ran on a core of its own ([`crate::affinity`]); false when the process
    /// has fewer than two cores or the pinning failed.
    pub threads_pinned: bool,
}

/// Opens a connection from A to B on a fresh pair and runs one warm-up and `runs` timed
/// transfers of `bytes` each on two threads.
pub fn run_cell(
    mtu: usize,
    config: Config,
    touch: bool,
    settings: Settings,
    pattern: &[u8],
    expected: u64,
) -> Result<CellFigures, String> {
    run_cell_paced(mtu, config, touch, settings, pattern, expected, None)
}

/// A paced cell ([`run_cell_paced`]).
#[derive(Clone, Copy, Debug)]
pub struct Pace {
    /// The most A sends, payload bytes per second.
    pub bytes_per_sec: f64,
    /// Interrupt coalescing on both NICs (N frames, T), instead of a notification per
    /// frame.
    pub coalesce: Option<(usize, Duration)>,
}

/// [`run_cell`] with A sending at a paced rate, when given, and B measuring its CPU time
/// in its ledger ([`CellFigures::receiver_ledger`]): B then works only when its stack has
/// something due, and every turn of work and every read is a message of its ledger,
/// probed (one message in one), so the ledger holds all of B's work and nothing of its
/// idling (what `lab cpu` needs).
pub fn run_cell_paced(
    mtu: usize,
    config: Config,
    touch: bool,
    settings: Settings,
    pattern: &[u8],
    expected: u64,
    pace: Option<Pace>,
) -> Result<CellFigures, String> {
    let mut host = HostConfig::with_mtu(mtu);
    host.stack.tuning = config.tuning();
    host.nic = config.nic(mtu);
    if let Some((frames, time)) = pace.and_then(|p| p.coalesce) {
        host.nic.coalesce_frames = frames;
        host.nic.coalesce_time = time;
    }
    run_cell_with(
        host,
        config.zero_copy(),
        touch,
        settings,
        pattern,
        expected,
        pace,
    )
}

/// [`run_cell_paced`] for any host configuration (both hosts alike): other experiments
/// (`lab throughput`) measure their own tunings and NICs with the same transfer.
/// `zero_copy`: A loans its pattern and B takes pages ([`Config::zero_copy`]).
pub fn run_cell_with(
    host: HostConfig,
    zero_copy: bool,
    touch: bool,
    settings: Settings,
    pattern: &[u8],
    expected: u64,
    pace: Option<Pace>,
) -> Result<CellFigures, String> {
    let Pair {
        a: mut sa,
        b: mut sb,
        ..
    } = Pair::new(host.clone(), host).map_err(|e| format!("memory link: {e}"))?;
    let clock = RealClock::new();

    // The handshake, on this thread.
    let (c, s) = super::connect_stacks(&mut sa, &mut sb, PORT, &clock, HANDSHAKE_TIMEOUT)?;
    if zero_copy {
        sb.tcp_set_zero_copy_receive(s, true)
            .map_err(|e| e.to_string())?;
    }
    let conn = sa.tcp_connection(c).map_err(|e| e.to_string())?;
    let (mss, checksum_elided) = (conn.mss().0, conn.checksum_elided());

    let plan = Plan {
        total_runs: settings.runs.max(1) + 1,
        bytes: settings.bytes_per_run.max(1),
        touch,
        zero_copy,
        pace: pace.map(|p| p.bytes_per_sec),
        measure_cpu: pace.is_some(),
        stall_timeout: settings.stall_timeout,
        run_timeout: settings.run_timeout,
    };
    let shared = Shared {
        started: AtomicUsize::new(0),
        finished: AtomicBool::new(false),
        abort: AtomicBool::new(false),
    };
    // A core each (see `crate::affinity`): left to the scheduler, the two spinning
    // threads sometimes share one for a whole run, which halves the rate.
    let cores = crate::affinity::two_cores();
    let pin = move |core: Option<usize>| {
        core.is_some_and(|c| crate::affinity::pin_current_thread(c).is_ok())
    };
    let (sent, received, threads_pinned) = std::thread::scope(|scope| {
        let shared = &shared;
        let tx = scope.spawn(move || {
            let pinned = pin(cores.map(|c| c.0));
            (sender(sa, c, clock, pattern, plan, shared), pinned)
        });
        let rx = scope.spawn(move || {
            let pinned = pin(cores.map(|c| c.1));
            (receiver(sb, s, clock, plan, expected, shared), pinned)
        });
        let (tx, rx) = (joined_pinned(tx.join()), joined_pinned(rx.join()));
        (
            joined(tx.0, "sender"),
            joined(rx.0, "receiver"),
            tx.1 && rx.1,
        )
    });
    let (sender, received) = match (sent, received) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(a), Err(b)) if a == STOPPED => return Err(b),
        (Err(a), Err(b)) if b == STOPPED => return Err(a),
        (Err(a), Err(b)) => return Err(format!("{a}; {b}")),
        (Err(e), _) | (_, Err(e)) => return Err(e),
    };
    let receiver = received.tally;
    let both = sender.plus(receiver);
    Ok(CellFigures {
        receiver_ledger: received.ledger,
        run_ns: received.run_ns,
        digests: received.digests,
        both,
        sender,
        receiver,
        mss,
        checksum_elided,
        threads_pinned,
    })
}

/// A thread's result and whether it was pinned, a panic (not pinned, as far as anyone
/// knows) passed on to [`joined`].
fn joined_pinned<T>(
    r: std::thread::Result<(Result<T, String>, bool)>,
) -> (std::thread::Result<Result<T, String>>, bool) {
    match r {
        Ok((r, pinned)) => (Ok(r), pinned),
        Err(p) => (Err(p), false),
    }
}

// ---------------------------------------------------------------------------------------
// The matrix.

/// One cell of the matrix.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub mtu: usize,
    /// `bsd`, `fast`, or a paper-004 variant: `none`, `zero_copy`, `checksum_offload`,
    /// `zero_copy_offload`, `integrated_copy_checksum`, `checksum_offload_tso`
    /// ([`Config::name`]).
    pub config: &'static str,
    /// Whether the receiving application read every byte (and checked the digest).
    pub app_touches_data: bool,
    /// Payload delivered, 10^9 bits per second: the median over the timed runs.
    pub gbps: f64,
    /// (data hits + ACK hits) / (hits + misses) over both stacks and the timed runs;
    /// `null` when header prediction is off (no hits or misses counted).
    pub hp_hit_rate: Option<f64>,
    /// Timed runs (after one warm-up run).
    pub runs: usize,
    pub bytes_per_run: usize,
    pub gbps_min: f64,
    pub gbps_max: f64,
    /// Each timed run's figure, in the order run.
    pub run_gbps: Vec<f64>,
    /// The sender's MSS (payload of a full segment without options).
    pub mss: usize,
    /// The two threads ran on a core each (the process has two or more, and pinning
    /// worked); otherwise the scheduler placed them.
    pub threads_pinned: bool,
    /// Both ends agreed to send TCP without checksums (RFC 1146, `checksum_elision`).
    pub checksum_elided: bool,
    /// Runs (the warm-up included) whose bytes the receiver checked against the sender's
    /// digest: all of them when it touches the data, none otherwise.
    pub verified_runs: usize,
    /// Counters over all the timed runs together: both stacks summed...
    pub counters: Tally,
    /// ... the sender's (data segments) ...
    pub sender_counters: Tally,
    /// ... and the receiver's (ACKs).
    pub receiver_counters: Tally,
}

/// A cell that could not be measured, and why.
#[derive(Clone, Debug, Serialize)]
pub struct Failure {
    pub mtu: usize,
    pub config: &'static str,
    pub app_touches_data: bool,
    pub error: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct Results {
    pub experiment: &'static str,
    pub runs: usize,
    pub bytes_per_run: usize,
    pub write_size: usize,
    pub read_size: usize,
    pub note: String,
    pub rows: Vec<Row>,
    pub failures: Vec<Failure>,
}

pub const NOTE: &str = "A one-way TCP transfer between two probestack stacks in this \
    process, each polled without sleeping by its own thread, each thread pinned to a core \
    of its own where the machine has two (2 cores, both busy), joined by \
    the memory link (DMA NICs, a CRC-32 per frame, no loss). Gbit/s counts application \
    payload only. Both threads spin, so a figure also depends on what else runs on the \
    machine.";

/// What the paper-004 rows are, for the tables.
pub const PAPER004_NOTE: &str = "paper 004's variants, each Tuning::fast() with checksum \
    elision off: none = copy, then checksum in a second pass, no NIC offload; \
    zero_copy = A loans its buffer (sent by reference, the NIC gathers it) and B takes \
    whole pages the NIC placed (header split), copying only the odd rest, the host still \
    summing; checksum_offload = the NICs complete and verify the checksums (IPv4 and TCP), \
    the host only copies; zero_copy_offload = both; integrated_copy_checksum = the host \
    sums while it copies; checksum_offload_tso = checksum offload plus TSO (past paper 004, \
    which had no TSO); no TSO in the others. The NIC model's work (checksums, TSO cutting, \
    gathering, header split, the CRC) is real wall time on the same two threads, so these \
    figures are what the host spends plus the NIC model, not the host alone";

/// Runs the matrix `mtus` × bsd, fast × touching or not; `progress` hears of each cell.
pub fn run(
    mtus: &[usize],
    settings: Settings,
    progress: impl FnMut(&str),
) -> Result<Results, String> {
    run_configs(mtus, &CONFIGS, settings, progress)
}

/// Runs the matrix `mtus` × `configs` × touching or not; `progress` hears of each cell.
pub fn run_configs(
    mtus: &[usize],
    configs: &[Config],
    settings: Settings,
    mut progress: impl FnMut(&str),
) -> Result<Results, String> {
    let runs = settings.runs.max(1);
    let bytes = settings.bytes_per_run.max(1);
    let settings = Settings {
        runs,
        bytes_per_run: bytes,
        ..settings
    };
    let pattern = pattern();
    let expected = expected_digest(&pattern, bytes);
    // The process warms up first (the heap grows, the threads' first pages are touched,
    // the CPUs leave any idle state): one untimed cell, whose result is dropped; if it
    // fails, the same cell fails again below and says why.
    if let (Some(&mtu), Some(&config)) = (mtus.first(), configs.first()) {
        progress("warming up");
        let warm = Settings {
            runs: 1,
            ..settings
        };
        let _ = run_cell(mtu, config, false, warm, &pattern, expected);
    }
    let mut rows = Vec::new();
    let mut failures = Vec::new();
    for &mtu in mtus {
        for &config in configs {
            for touch in [false, true] {
                progress(&format!(
                    "MTU {mtu}, {}, {}",
                    config.name(),
                    if touch {
                        "touching the data"
                    } else {
                        "not touching the data"
                    }
                ));
                match run_cell(mtu, config, touch, settings, &pattern, expected) {
                    Ok(f) => {
                        let gbps: Vec<f64> =
                            f.run_ns.iter().map(|ns| bytes as f64 * 8.0 / ns).collect();
                        let hits = f.both.hp_hits();
                        let looked = hits + f.both.hp_misses;
                        rows.push(Row {
                            mtu,
                            config: config.name(),
                            app_touches_data: touch,
                            gbps: median(&mut gbps.clone()),
                            hp_hit_rate: (looked > 0).then(|| hits as f64 / looked as f64),
                            runs,
                            bytes_per_run: bytes,
                            gbps_min: gbps.iter().copied().fold(f64::INFINITY, f64::min),
                            gbps_max: gbps.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                            run_gbps: gbps.clone(),
                            mss: f.mss,
                            threads_pinned: f.threads_pinned,
                            checksum_elided: f.checksum_elided,
                            verified_runs: f.digests.len(),
                            counters: f.both,
                            sender_counters: f.sender,
                            receiver_counters: f.receiver,
                        });
                    }
                    Err(error) => failures.push(Failure {
                        mtu,
                        config: config.name(),
                        app_touches_data: touch,
                        error,
                    }),
                }
            }
        }
    }
    if rows.is_empty() && !failures.is_empty() {
        let all: Vec<String> = failures
            .iter()
            .map(|f| format!("MTU {} {}: {}", f.mtu, f.config, f.error))
            .collect();
        return Err(format!("no cell could be measured: {}", all.join(" | ")));
    }
    Ok(Results {
        experiment: "bulk",
        runs,
        bytes_per_run: bytes,
        write_size: WRITE_SIZE,
        read_size: READ_SIZE,
        note: NOTE.to_string(),
        rows,
        failures,
    })
}

fn find(r: &Results, mtu: usize, config: Config, touch: bool) -> Option<&Row> {
    r.rows
        .iter()
        .find(|x| x.mtu == mtu && x.config == config.name() && x.app_touches_data == touch)
}

fn failed(r: &Results, mtu: usize, config: Config, touch: bool) -> bool {
    r.failures
        .iter()
        .any(|x| x.mtu == mtu && x.config == config.name() && x.app_touches_data == touch)
}

/// The configurations the results hold, in [`ALL_CONFIGS`] order.
fn configs_of(r: &Results) -> Vec<Config> {
    ALL_CONFIGS
        .into_iter()
        .filter(|c| {
            r.rows.iter().any(|x| x.config == c.name())
                || r.failures.iter().any(|x| x.config == c.name())
        })
        .collect()
}

pub fn tables(r: &Results) -> Vec<Table> {
    let mut mtus: Vec<usize> = r
        .rows
        .iter()
        .map(|x| x.mtu)
        .chain(r.failures.iter().map(|x| x.mtu))
        .collect();
    mtus.sort_unstable();
    mtus.dedup();
    let configs = configs_of(r);
    // The cells in table order: (config, touches the data).
    let columns: Vec<(Config, bool)> = configs
        .iter()
        .flat_map(|&c| [(c, false), (c, true)])
        .collect();
    let label = |config: Config, touch: bool, prefix: &str| {
        format!(
            "{prefix}{}{}",
            config.name(),
            if touch { " touch" } else { "" }
        )
    };
    // With the two basic presets the hit rates share the Gbit/s table; with more, they get
    // a table of their own.
    let hp_apart = configs.len() > 2;

    let gbps_cell = |mtu: usize, config: Config, touch: bool| match find(r, mtu, config, touch) {
        Some(x) => format!("{:.2}", x.gbps),
        None if failed(r, mtu, config, touch) => "failed".into(),
        None => "-".into(),
    };
    let hp_cell = |mtu: usize, config: Config, touch: bool| match find(r, mtu, config, touch) {
        Some(x) => match x.hp_hit_rate {
            Some(h) => format!("{:.1}%", 100.0 * h),
            None => "off".into(),
        },
        None if failed(r, mtu, config, touch) => "failed".into(),
        None => "-".into(),
    };
    let mss_of = |mtu: usize| {
        r.rows
            .iter()
            .find(|x| x.mtu == mtu)
            .map_or("-".to_string(), |x| x.mss.to_string())
    };

    let mut headers = vec!["MTU".to_string(), "MSS".to_string()];
    headers.extend(columns.iter().map(|&(c, t)| label(c, t, "")));
    if !hp_apart {
        headers.extend(columns.iter().map(|&(c, t)| label(c, t, "hp ")));
    }
    let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
    let mut t = Table::new(
        format!(
            "TCP bulk transfer, one way, one stack per thread: Gbit/s of payload{} (median of {} runs of {} MiB)",
            if hp_apart { "" } else { " and header-prediction hit rate" },
            r.runs,
            r.bytes_per_run >> 20
        ),
        &headers,
    );
    for &mtu in &mtus {
        let mut cells = vec![mtu.to_string(), mss_of(mtu)];
        for &(config, touch) in &columns {
            cells.push(gbps_cell(mtu, config, touch));
        }
        if !hp_apart {
            for &(config, touch) in &columns {
                cells.push(hp_cell(mtu, config, touch));
            }
        }
        t.row(cells);
    }
    t.note(format!(
        "Gbit/s = 10^9 bits of application payload per second, from B's first read of a run to its last byte; \
         one warm-up run first, on the same connection; writes of {} KiB, reads of up to {} KiB",
        r.write_size >> 10,
        r.read_size >> 10
    ));
    t.note("touch: the receiving application folds every byte into a digest and checks it against the sender's; otherwise it only copies the bytes out of the socket");
    if !hp_apart {
        t.note("hp = (data hits + ACK hits) / (hits + misses), both stacks' ledgers; off: Tuning::bsd() has header prediction off");
    }
    if configs.iter().any(|c| PAPER004_CONFIGS.contains(c)) {
        t.note(PAPER004_NOTE);
    }
    t.note("for scale (reference/fast-stacks.md §5, this kind of 2-vCPU guest): Linux loopback across the two cores, netperf TCP_STREAM 7.0 Gb/s, iperf3 15.8 Gb/s");
    for f in &r.failures {
        t.note(format!(
            "failed: MTU {} {}{}: {}",
            f.mtu,
            f.config,
            if f.app_touches_data { " touch" } else { "" },
            f.error
        ));
    }
    t.note(NOTE);
    let mut out = vec![t];

    if hp_apart {
        let mut headers = vec!["MTU".to_string()];
        headers.extend(columns.iter().map(|&(c, t)| label(c, t, "")));
        let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
        let mut h = Table::new(
            "TCP bulk transfer: header-prediction hit rate over the timed runs",
            &headers,
        );
        for &mtu in &mtus {
            let mut cells = vec![mtu.to_string()];
            for &(config, touch) in &columns {
                cells.push(hp_cell(mtu, config, touch));
            }
            h.row(cells);
        }
        h.note("(data hits + ACK hits) / (hits + misses), both stacks' ledgers; off: Tuning::bsd() has header prediction off");
        out.push(h);
    }

    let mut d = Table::new(
        format!(
            "TCP bulk transfer: spread of the runs and what the stacks did over all {} timed runs",
            r.runs
        ),
        &[
            "MTU",
            "config",
            "touch",
            "Gbit/s min-max",
            "data segs/run",
            "ACKs/run",
            "hp hits/misses",
            "retransmits",
            "RTOs",
            "delayed ACKs",
            "tx ring full",
            "new buffers A/B",
            "no checksum",
        ],
    );
    let runs = r.runs.max(1) as f64;
    for &mtu in &mtus {
        for &(config, touch) in &columns {
            if let Some(x) = find(r, mtu, config, touch) {
                let c = &x.counters;
                d.row(vec![
                    mtu.to_string(),
                    x.config.to_string(),
                    if touch { "yes" } else { "no" }.to_string(),
                    format!("{:.2}-{:.2}", x.gbps_min, x.gbps_max),
                    format!("{:.0}", x.sender_counters.segments_out as f64 / runs),
                    format!("{:.0}", x.receiver_counters.segments_out as f64 / runs),
                    format!("{}/{}", c.hp_hits(), c.hp_misses),
                    c.retransmitted_segments.to_string(),
                    c.retransmit_timeouts.to_string(),
                    c.delayed_acks.to_string(),
                    c.tx_queue_full.to_string(),
                    format!(
                        "{}/{}",
                        x.sender_counters.fresh_buffers, x.receiver_counters.fresh_buffers
                    ),
                    if x.checksum_elided { "yes" } else { "no" }.to_string(),
                ]);
            }
        }
    }
    d.note("data segs: segments A sent (with TSO, super-segments the NIC cut); ACKs: segments B sent; the other counts are totals over the timed runs, both stacks; new buffers: packet buffers a stack's pool took from the global allocator; no checksum: the connection negotiated RFC 1146's checksum elision");
    out.push(d);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bulk_digest_does_not_depend_on_how_the_stream_is_cut() {
        let data: Vec<u8> = pattern()[..10_000].to_vec();
        let whole = {
            let mut d = Digest::new();
            d.update(&data);
            d.finish()
        };
        for cut in [1, 3, 7, 31, 32, 33, 1000, 4096] {
            let mut d = Digest::new();
            for piece in data.chunks(cut) {
                d.update(piece);
            }
            assert_eq!(d.finish(), whole, "pieces of {cut}");
        }
        // Any one byte changed, anywhere, changes the digest; so does the length.
        for i in [0, 1, 8, 31, 32, 5000, 9999] {
            let mut changed = data.clone();
            changed[i] ^= 0x40;
            let mut d = Digest::new();
            d.update(&changed);
            assert_ne!(d.finish(), whole, "byte {i}");
        }
        let mut shorter = Digest::new();
        shorter.update(&data[..9999]);
        assert_ne!(shorter.finish(), whole);
        let mut zeros = Digest::new();
        zeros.update(&[0u8; 3]);
        assert_ne!(zeros.finish(), Digest::new().finish());
    }

    #[test]
    fn bulk_one_mib_arrives_intact_on_two_threads() {
        let settings = Settings {
            runs: 1,
            bytes_per_run: 1 << 20,
            // Generous: tests run beside others on two cores.
            stall_timeout: WallDuration::from_secs(20),
            run_timeout: WallDuration::from_secs(60),
        };
        let pattern = pattern();
        // The expected digest, computed here from the bytes themselves.
        let mut d = Digest::new();
        d.update(&pattern[..1 << 20]);
        let expected = d.finish();
        assert_eq!(expected, expected_digest(&pattern, 1 << 20));
        for config in CONFIGS {
            let f = run_cell(1500, config, true, settings, &pattern, expected)
                .unwrap_or_else(|e| panic!("{}: {e}", config.name()));
            // The warm-up run and the timed run, each checked.
            assert_eq!(f.digests, vec![expected; 2], "{}", config.name());
            assert_eq!(f.run_ns.len(), 1);
            assert!(f.run_ns[0] > 0.0);
            assert_eq!(f.mss, 1460);
            assert!(f.sender.segments_out >= (1 << 20) / 1460);
        }
        // Header prediction: on with fast, counted; off with bsd, nothing counted.
        let f = run_cell(1500, Config::Bsd, false, settings, &pattern, expected).unwrap();
        assert_eq!(f.both.hp_hits() + f.both.hp_misses, 0);
        assert!(f.digests.is_empty());
    }

    #[test]
    fn bulk_rows_have_the_promised_fields() {
        let settings = Settings {
            runs: 1,
            bytes_per_run: 256 << 10,
            stall_timeout: WallDuration::from_secs(20),
            run_timeout: WallDuration::from_secs(60),
        };
        // An MTU the memory link refuses is reported as four failed cells, not a panic.
        let r = run(&[1500, 100], settings, |_| {}).unwrap();
        assert_eq!(r.failures.len(), 4, "{:?}", r.failures);
        assert!(r
            .failures
            .iter()
            .all(|f| f.mtu == 100 && f.error.contains("MTU")));
        assert_eq!(r.rows.len(), 4);
        let v = serde_json::to_value(&r).unwrap();
        for row in v["rows"].as_array().unwrap() {
            assert!(row["mtu"].is_u64());
            assert!(row["config"] == "bsd" || row["config"] == "fast");
            assert!(row["app_touches_data"].is_boolean());
            assert!(row["gbps"].as_f64().unwrap() > 0.0);
            // Pinned wherever the process has two cores to pin to.
            let cores = crate::affinity::two_cores().is_some();
            assert_eq!(row["threads_pinned"].as_bool(), Some(cores), "{row}");
            if row["config"] == "fast" {
                let hp = row["hp_hit_rate"].as_f64().unwrap();
                assert!((0.0..=1.0).contains(&hp));
            } else {
                assert!(row["hp_hit_rate"].is_null());
            }
        }
        assert_eq!(tables(&r).len(), 2);
    }

    #[test]
    fn bulk_configs_differ_as_named() {
        let names: Vec<&str> = ALL_CONFIGS.iter().map(|c| c.name()).collect();
        assert_eq!(
            names,
            [
                "bsd",
                "fast",
                "none",
                "zero_copy",
                "checksum_offload",
                "zero_copy_offload",
                "integrated_copy_checksum",
                "checksum_offload_tso"
            ]
        );
        for c in ALL_CONFIGS {
            assert_eq!(Config::from_name(c.name()), Some(c));
        }
        assert_eq!(Config::from_name("zero-copy"), None);
        let plain = NicConfig {
            mtu: 9000,
            ..NicConfig::default()
        };
        // The basic presets: as before, the default NIC.
        assert_eq!(Config::Bsd.tuning(), Tuning::bsd());
        assert_eq!(Config::Fast.tuning(), Tuning::fast());
        assert_eq!(Config::Bsd.nic(9000), plain);
        assert_eq!(Config::Fast.nic(9000), plain);
        // The paper-004 variants: fast but for elision and the three switches named...
        for c in PAPER004_CONFIGS {
            let t = c.tuning();
            assert!(!t.checksum_elision, "{}", c.name());
            assert_eq!(
                Tuning {
                    checksum_elision: true,
                    fused_copy_checksum: true,
                    checksum_offload: true,
                    segmentation_offload: true,
                    software_segmentation: true,
                    ..t
                },
                Tuning::fast(),
                "{}",
                c.name()
            );
            let nic = c.nic(9000);
            assert_eq!(nic.mtu, 9000);
            assert_eq!(
                NicConfig {
                    checksum_offload: Default::default(),
                    tso: false,
                    header_split: false,
                    ..nic
                },
                plain,
                "{}: only the offloads differ from the default NIC",
                c.name()
            );
        }
        // ... and each as its name says: (fused, offload in tuning and on both NIC
        // directions, TSO in tuning and NIC).
        for (c, fused, offload, tso, zero_copy) in [
            (Config::None, false, false, false, false),
            (Config::ZeroCopy, false, false, false, true),
            (Config::ChecksumOffload, false, true, false, false),
            (Config::ZeroCopyOffload, false, true, false, true),
            (Config::IntegratedCopyChecksum, true, false, false, false),
            (Config::ChecksumOffloadTso, false, true, true, false),
        ] {
            let (t, nic) = (c.tuning(), c.nic(1500));
            assert_eq!(c.zero_copy(), zero_copy, "{}", c.name());
            assert_eq!(nic.header_split, zero_copy, "{}", c.name());
            assert_eq!(t.fused_copy_checksum, fused, "{}", c.name());
            assert_eq!(t.checksum_offload, offload, "{}", c.name());
            assert_eq!(nic.checksum_offload.l4_tx, offload, "{}", c.name());
            assert_eq!(nic.checksum_offload.l4_rx, offload, "{}", c.name());
            assert_eq!(nic.checksum_offload.ipv4_tx, offload, "{}", c.name());
            assert_eq!(nic.checksum_offload.ipv4_rx, offload, "{}", c.name());
            assert_eq!(t.segmentation_offload, tso, "{}", c.name());
            assert_eq!(nic.segments(), tso, "{}", c.name());
        }
    }

    #[test]
    fn bulk_paper004_variants_deliver_intact_bytes() {
        let settings = Settings {
            runs: 1,
            bytes_per_run: 512 << 10,
            stall_timeout: WallDuration::from_secs(20),
            run_timeout: WallDuration::from_secs(60),
        };
        let pattern = pattern();
        let expected = expected_digest(&pattern, settings.bytes_per_run);
        for c in PAPER004_CONFIGS {
            let f = run_cell(1500, c, true, settings, &pattern, expected)
                .unwrap_or_else(|e| panic!("{}: {e}", c.name()));
            assert_eq!(f.digests, vec![expected; 2], "{}", c.name());
            // Checksums are computed (by the host or the NIC), not elided.
            assert!(!f.checksum_elided, "{}", c.name());
            assert_eq!(f.mss, 1460);
            let full_segments = (settings.bytes_per_run / 1460) as u64;
            if c == Config::ChecksumOffloadTso {
                // Super-segments: far fewer than one per MSS.
                assert!(
                    f.sender.segments_out < full_segments / 4,
                    "{}",
                    f.sender.segments_out
                );
            } else {
                assert!(f.sender.segments_out >= full_segments, "{}", c.name());
            }
            if c.zero_copy() {
                // Every data segment carried the loan by reference; at MTU 1500 no
                // payload is a page, so every byte reached B by copy (odd data).
                assert!(f.sender.zero_copy_segments >= full_segments, "{}", c.name());
                assert_eq!(f.receiver.rx_page_bytes, 0);
                assert_eq!(f.receiver.rx_odd_bytes, settings.bytes_per_run as u64);
            } else {
                assert_eq!(f.sender.zero_copy_segments + f.receiver.rx_odd_bytes, 0);
            }
        }
        // At MTU 9000 the NIC splits and whole pages reach the application.
        let f = run_cell(9000, Config::ZeroCopy, true, settings, &pattern, expected).unwrap();
        assert_eq!(f.digests, vec![expected; 2]);
        let r = f.receiver;
        assert_eq!(
            r.rx_page_bytes + r.rx_odd_bytes,
            settings.bytes_per_run as u64
        );
        assert!(r.rx_page_bytes * 2 > settings.bytes_per_run as u64, "{r:?}");
        // The rows name the variants; the hit rates get a table of their own.
        let r = run_configs(&[1500], &PAPER004_CONFIGS, settings, |_| {}).unwrap();
        assert!(r.failures.is_empty(), "{:?}", r.failures);
        let names: Vec<&str> = r.rows.iter().map(|x| x.config).collect();
        assert_eq!(
            names,
            [
                "none",
                "none",
                "zero_copy",
                "zero_copy",
                "checksum_offload",
                "checksum_offload",
                "zero_copy_offload",
                "zero_copy_offload",
                "integrated_copy_checksum",
                "integrated_copy_checksum",
                "checksum_offload_tso",
                "checksum_offload_tso"
            ]
        );
        assert!(r.rows.iter().all(|x| !x.checksum_elided));
        assert_eq!(tables(&r).len(), 3);
    }
}
