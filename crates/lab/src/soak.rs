//! `probestack soak`: TCP and UDP transfers between two stacks on the memory link, in the
//! deterministic simulation (virtual clock), through a wire that drops, duplicates and
//! reorders 1% of frames each, delays every frame with jitter, and corrupts 0.1% of them
//! with the CRC recomputed (so the MAC passes them and only the transport checksum can
//! catch them).
//!
//! Phase 1, checksum elision off: every TCP stream must arrive whole and unaltered (checked
//! byte by byte against the generated pattern and by a 64-bit FNV-1a hash of each side),
//! and every UDP datagram delivered must be intact (each carries its sequence number and a
//! digest; UDP may lose datagrams, which are counted, never altered). Any byte lost or
//! altered fails the run.
//!
//! Phase 2, checksum elision on (`Tuning::fast()`: TCP negotiates RFC 1146's "no checksum"
//! on this one-hop CRC link and UDP sends a zero checksum), over the same corrupting wire
//! with the same seeds: corrupted payloads now reach the applications. They are counted,
//! not treated as failures: the risk papers 000 and 003 weigh, demonstrated.
//!
//! Each transfer is a new pair of stacks (a new connection), alternating TCP and UDP and
//! MTUs 1500 and 9000; every draw comes from `--seed`. A phase always does
//! [`MIN_TRANSFERS`] transfers, so the work (and, the simulation being deterministic, every
//! figure but the timings and peak memory) does not depend on the machine's speed;
//! `--seconds` only decides how many more are done.

use std::collections::BTreeMap;
use std::time::Instant as WallInstant;

use probestack::driver::FaultConfig;
use probestack::probe::Counter;
use probestack::sim::{HostConfig, Pair, ADDR_B};
use probestack::socket::tcp::TcpError;
use probestack::socket::udp::UdpError;
use probestack::stack::Stack;
use probestack::tcp::State;
use probestack::time::Duration;
use probestack::tuning::Tuning;
use probestack::wire::Ipv4Address;
use serde::Serialize;

use crate::table::Table;

/// Transfers every phase does whatever `--seconds` says: TCP and UDP at MTU 1500, then
/// TCP and UDP at MTU 9000.
pub const MIN_TRANSFERS: u64 = 4;
/// MTUs the transfers take in turn (two transfers, TCP then UDP, at each).
pub const MTUS: [usize; 2] = [1500, 9000];
/// Share of `--seconds` phase 1 gets; phase 2 gets the rest.
const PHASE1_SHARE: f64 = 0.7;
/// Virtual time a transfer may take before it counts as stalled.
const VIRTUAL_LIMIT: Duration = Duration::from_secs(1200);
/// Wall time a single transfer may take before it counts as hung.
const WALL_LIMIT_SECS: f64 = 600.0;
const PORT: u16 = 5001;
const UDP_PORT: u16 = 5002;
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
/// A UDP datagram: sequence number (8 bytes), digest (8 bytes), then the payload.
const UDP_HEADER: usize = 16;
const UDP_MAX: usize = 8192;
/// Datagrams in flight at once: sent together, then waited for.
const UDP_BATCH: u64 = 16;

#[derive(Clone, Copy, Debug)]
pub struct Settings {
    pub seconds: u64,
    pub seed: u64,
}

/// The seeded wire: drop, reorder and duplicate 1%, 50 µs latency with up to 20 µs of
/// jitter, 0.1% corrupted with the CRC recomputed.
pub fn faults(seed: u64) -> FaultConfig {
    FaultConfig {
        flip_passed: 0.001,
        ..FaultConfig::lossy(seed)
    }
}

/// The fault kinds this wire injects, by their counter names' last part.
pub const FAULT_KINDS: [&str; 5] = ["drop", "duplicate", "reorder", "delay", "flip_passed"];

/// One phase's figures.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Phase {
    pub checksum_elision: bool,
    pub transfers: u64,
    pub tcp_transfers: u64,
    pub udp_transfers: u64,
    /// Bytes of TCP stream and UDP datagram checked and found intact.
    pub bytes_verified: u64,
    pub tcp_bytes_verified: u64,
    pub udp_bytes_verified: u64,
    /// Bytes delivered to an application that differ from what was sent (TCP: stream bytes
    /// differing from the pattern at their offset; UDP: bytes of a datagram whose digest
    /// fails that differ from the datagram its sequence number names, or all of it).
    pub bytes_corrupted_delivered: u64,
    /// TCP stream bytes never delivered (a transfer that stalled, was reset, or ended early).
    pub tcp_bytes_lost: u64,
    /// TCP transfers that delivered at least one byte different from what was sent.
    pub tcp_transfers_corrupted: u64,
    /// TCP transfers that did not deliver their whole stream, with why.
    pub tcp_failures: Vec<String>,
    /// TCP connections that did not close in order after their transfer.
    pub tcp_unclean_closes: u64,
    pub udp_datagrams_sent: u64,
    /// Distinct datagrams delivered intact.
    pub udp_datagrams_verified: u64,
    pub udp_datagrams_lost: u64,
    /// Intact copies of a datagram already delivered (the wire duplicates frames).
    pub udp_datagrams_duplicate: u64,
    pub udp_datagrams_corrupted: u64,
    /// Datagrams delivered altered in a way no Internet checksum can see: the same
    /// ones'-complement sum as the datagram sent. The wire flips one bit in a frame, which
    /// the checksum always catches, but a datagram IP fragments crosses in several frames,
    /// and two flips in two of them, in the same bit of a 16-bit word and in opposite
    /// directions, cancel (RFC 1071's known blind spot; about one in 32 of the datagrams
    /// with two flipped fragments). Counted apart: not in `udp_datagrams_corrupted` or
    /// `bytes_corrupted_delivered`, and not a failure of phase 1.
    pub udp_datagrams_checksum_blind: u64,
    /// Frames the two stacks received from their NICs.
    pub frames_in: u64,
    /// Frames the two stacks handed to their NICs.
    pub frames_out: u64,
    /// Faults the wires injected, by kind (the `driver.fault.*` counters).
    pub faults_injected: BTreeMap<String, u64>,
    /// Packets the stacks dropped, by reason (nonzero `*.drop.*` counters).
    pub drops: BTreeMap<String, u64>,
    /// TCP segments retransmitted (`tcp.retransmitted_segments`).
    pub tcp_retransmitted_segments: u64,
    /// How TCP found its losses, by counter: fast retransmits (and those the reordering
    /// window started), loss probes, lost retransmissions resent, retransmission timeouts,
    /// and congestion responses undone (D-SACKs showed them unneeded).
    pub tcp_recovery: BTreeMap<String, u64>,
    pub virtual_seconds: f64,
    pub wall_seconds: f64,
}

impl Phase {
    /// Whether nothing was lost or altered (what phase 1 must show).
    pub fn clean(&self) -> bool {
        self.bytes_corrupted_delivered == 0
            && self.tcp_bytes_lost == 0
            && self.tcp_transfers_corrupted == 0
            && self.tcp_failures.is_empty()
            && self.udp_datagrams_corrupted == 0
    }
}

/// The soak's result: phase 1's figures at the top level, phase 2's in `elision_phase`.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub seed: u64,
    pub seconds: u64,
    /// Phase 1 lost or altered nothing.
    pub passed: bool,
    #[serde(flatten)]
    pub phase: Phase,
    pub elision_phase: Phase,
    /// Peak resident set of the process (VmHWM), in bytes; 0 where unknown.
    pub peak_rss_bytes: u64,
}

pub fn run(s: Settings, mut progress: impl FnMut(&str)) -> Report {
    let budget = s.seconds as f64;
    let phase = run_phase(s.seed, false, budget * PHASE1_SHARE, &mut progress);
    let elision_phase = run_phase(s.seed, true, budget * (1.0 - PHASE1_SHARE), &mut progress);
    Report {
        seed: s.seed,
        seconds: s.seconds,
        passed: phase.clean(),
        phase,
        elision_phase,
        peak_rss_bytes: peak_rss_bytes(),
    }
}

/// SplitMix64: the seed of transfer `i`, and the generator of every pattern.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn fnv(h: &mut u64, data: &[u8]) {
    for &b in data {
        *h ^= u64::from(b);
        *h = h.wrapping_mul(0x100_0000_01b3);
    }
}

/// The stream byte at `offset` of a transfer seeded `seed`, written into `out`.
fn pattern(seed: u64, offset: u64, out: &mut [u8]) {
    let mut i = offset;
    let mut k = 0;
    while k < out.len() {
        let word = mix(seed ^ (i >> 3)).to_le_bytes();
        let from = (i & 7) as usize;
        let n = (8 - from).min(out.len() - k);
        out[k..k + n].copy_from_slice(&word[from..from + n]);
        k += n;
        i += n as u64;
    }
}

fn run_phase(seed: u64, elision: bool, budget_secs: f64, progress: &mut impl FnMut(&str)) -> Phase {
    let start = WallInstant::now();
    let mut ph = Phase {
        checksum_elision: elision,
        ..Phase::default()
    };
    let mut i = 0u64;
    while i < MIN_TRANSFERS || start.elapsed().as_secs_f64() < budget_secs {
        // The same seeds in both phases: the same wire, the same transfers.
        let ts = mix(seed ^ mix(i));
        let mtu = MTUS[((i / 2) % MTUS.len() as u64) as usize];
        let mut p = pair(ts, mtu, elision);
        let virtual_start = p.now();
        if i.is_multiple_of(2) {
            let total = (4 << 20) + ts % (12 << 20);
            progress(&format!(
                "phase {}: transfer {i}: TCP, MTU {mtu}, {total} bytes",
                1 + u8::from(elision)
            ));
            tcp_transfer(&mut p, ts, total, &mut ph);
            ph.tcp_transfers += 1;
        } else {
            let total = (4 << 20) + ts % (4 << 20);
            progress(&format!(
                "phase {}: transfer {i}: UDP, MTU {mtu}, about {total} bytes",
                1 + u8::from(elision)
            ));
            udp_transfer(&mut p, ts, total, &mut ph);
            ph.udp_transfers += 1;
        }
        ph.virtual_seconds += (p.now() - virtual_start).as_nanos() as f64 / 1e9;
        account(&p.a, &mut ph);
        account(&p.b, &mut ph);
        ph.transfers += 1;
        i += 1;
    }
    ph.bytes_verified = ph.tcp_bytes_verified + ph.udp_bytes_verified;
    ph.wall_seconds = start.elapsed().as_secs_f64();
    ph
}

fn pair(ts: u64, mtu: usize, elision: bool) -> Pair {
    let host = |k: u64| {
        let mut h = HostConfig::with_mtu(mtu);
        h.stack.tuning = Tuning {
            checksum_elision: elision,
            ..Tuning::fast()
        };
        h.stack.seed = mix(ts ^ k);
        h.stack.tcp.msl = Duration::from_secs(1);
        h.nic.rx_faults = faults(mix(ts ^ (k << 8)));
        h
    };
    Pair::new(host(1), host(2)).expect("a valid memory link")
}

/// Adds a stack's counters to the phase: frames, faults, drops.
fn account(st: &Stack, ph: &mut Phase) {
    for (name, v) in st.ledger().counters().snapshot() {
        if v == 0 {
            continue;
        }
        match name {
            "driver.frames_in" => ph.frames_in += v,
            "driver.frames_out" => ph.frames_out += v,
            "tcp.retransmitted_segments" => ph.tcp_retransmitted_segments += v,
            "tcp.fast_retransmits"
            | "tcp.reorder_window_losses"
            | "tcp.loss_probes"
            | "tcp.lost_retransmissions"
            | "tcp.spurious_undos"
            | "tcp.retransmit_timeouts" => {
                *ph.tcp_recovery.entry(name.to_string()).or_default() += v;
            }
            _ => {}
        }
        if let Some(kind) = name.strip_prefix("driver.fault.") {
            *ph.faults_injected.entry(kind.to_string()).or_default() += v;
        } else if name.contains(".drop.") {
            *ph.drops.entry(name.to_string()).or_default() += v;
        }
    }
    for kind in FAULT_KINDS {
        ph.faults_injected.entry(kind.to_string()).or_default();
    }
}

/// Why a transfer stopped early, if it did.
enum Stop {
    Error(TcpError),
    EndOfStream,
    Hung,
}

/// A connection from A to B, `total` bytes of pattern from A to B, checked byte by byte
/// and by hash, then an orderly close.
fn tcp_transfer(p: &mut Pair, ts: u64, total: u64, ph: &mut Phase) {
    let l = p.b.tcp_listen((ADDR_B, PORT), 8).expect("listen");
    let c = p.a.tcp_connect((ADDR_B, PORT)).expect("connect");
    let mut s = None;
    let wall = WallInstant::now();
    let connected = p.run_until(Duration::from_secs(120), |p| {
        if s.is_none() {
            s = p.b.tcp_accept(l).ok();
        }
        (s.is_some() && p.a.tcp_state(c) == Ok(State::Established))
            || p.a.tcp_error(c).ok().flatten().is_some()
    });
    let Some(s) = s.filter(|_| connected && p.a.tcp_state(c) == Ok(State::Established)) else {
        ph.tcp_bytes_lost += total;
        ph.tcp_failures.push(format!(
            "transfer seed {ts:#x}: the connection did not open ({:?})",
            p.a.tcp_state(c)
        ));
        return;
    };
    let (mut sent, mut got) = (0u64, 0u64);
    let mut buf = vec![0u8; 256 * 1024];
    let mut want = vec![0u8; 256 * 1024];
    let mut pending: Vec<u8> = Vec::new();
    let mut pending_at = 0usize;
    let mut diff = 0u64;
    let mut stop = None;
    let chunk = 64 * 1024u64;
    let done = p.run_until(VIRTUAL_LIMIT, |p| {
        loop {
            if pending_at == pending.len() && sent < total {
                let n = chunk.min(total - sent) as usize;
                pending.resize(n, 0);
                pattern(ts, sent, &mut pending);
                pending_at = 0;
            }
            if pending_at == pending.len() {
                break;
            }
            match p.a.tcp_send(c, &pending[pending_at..]) {
                Ok(n) => {
                    sent += n as u64;
                    pending_at += n;
                }
                Err(TcpError::WouldBlock) => break,
                Err(e) => {
                    stop = Some(Stop::Error(e));
                    return true;
                }
            }
        }
        loop {
            match p.b.tcp_recv(s, &mut buf) {
                Ok(0) => {
                    if got < total {
                        stop = Some(Stop::EndOfStream);
                        return true;
                    }
                    break;
                }
                Ok(n) => {
                    pattern(ts, got, &mut want[..n]);
                    diff += buf[..n]
                        .iter()
                        .zip(&want[..n])
                        .filter(|(x, y)| x != y)
                        .count() as u64;
                    got += n as u64;
                }
                Err(TcpError::WouldBlock) => break,
                Err(e) => {
                    stop = Some(Stop::Error(e));
                    return true;
                }
            }
        }
        if wall.elapsed().as_secs_f64() > WALL_LIMIT_SECS {
            stop = Some(Stop::Hung);
            return true;
        }
        got >= total
    });
    ph.bytes_corrupted_delivered += diff;
    let intact = got.saturating_sub(diff);
    ph.tcp_bytes_verified += intact;
    if got < total || !done || stop.is_some() {
        ph.tcp_bytes_lost += total - got.min(total);
        let why = match stop {
            Some(Stop::Error(e)) => format!("{e:?}"),
            Some(Stop::EndOfStream) => "the stream ended early".to_string(),
            Some(Stop::Hung) => format!("no end after {WALL_LIMIT_SECS} s of wall time"),
            None => format!(
                "stalled for {} s of virtual time",
                VIRTUAL_LIMIT.as_millis() / 1000
            ),
        };
        let resets = |st: &Stack| {
            let c = st.ledger().counters();
            (c.get(Counter::TcpResetsOut), c.get(Counter::TcpResetsIn))
        };
        let (a_out, a_in) = resets(&p.a);
        let (b_out, b_in) = resets(&p.b);
        ph.tcp_failures.push(format!(
            "transfer seed {ts:#x}, MTU {}: {why}: sent {sent}, received {got} of {total} \
             (RSTs out/in: A {a_out}/{a_in}, B {b_out}/{b_in}; virtual {:?})",
            p.a.interface_caps(0).map_or(0, |c| c.mtu),
            p.now()
        ));
        return;
    }
    if diff > 0 {
        ph.tcp_transfers_corrupted += 1;
    }
    // An orderly close, under the same faults.
    let _ = p.a.tcp_close(c);
    let closed = p.run_until(Duration::from_secs(60), |p| {
        if matches!(p.b.tcp_recv(s, &mut buf), Ok(0)) {
            let _ = p.b.tcp_close(s);
        }
        matches!(
            p.a.tcp_state(c),
            Ok(State::TimeWait | State::Closed) | Err(_)
        ) && matches!(p.b.tcp_state(s), Ok(State::Closed) | Err(_))
    });
    if !closed {
        ph.tcp_unclean_closes += 1;
    }
}

/// Datagram `seq` of a transfer seeded `ts`: its sequence number, the digest of the rest,
/// then pattern bytes; 16 to 8192 bytes long.
fn datagram(ts: u64, seq: u64) -> Vec<u8> {
    let r = mix(ts ^ mix(seq ^ 0x5eed));
    let len = UDP_HEADER + (r % (UDP_MAX - UDP_HEADER + 1) as u64) as usize;
    let mut d = vec![0u8; len];
    d[..8].copy_from_slice(&seq.to_le_bytes());
    pattern(r, 0, &mut d[UDP_HEADER..]);
    let digest = digest(&d);
    d[8..16].copy_from_slice(&digest.to_le_bytes());
    d
}

/// FNV-1a of a datagram's sequence number, length and payload.
fn digest(d: &[u8]) -> u64 {
    let mut h = FNV_OFFSET;
    fnv(&mut h, &d[..8]);
    fnv(&mut h, &(d.len() as u64).to_le_bytes());
    fnv(&mut h, &d[UDP_HEADER..]);
    h
}

/// Datagrams of about `total` bytes from A to B, `UDP_BATCH` at a time, each checked.
fn udp_transfer(p: &mut Pair, ts: u64, total: u64, ph: &mut Phase) {
    let rx = p.b.udp_open();
    p.b.udp_bind(rx, Ipv4Address::UNSPECIFIED, UDP_PORT)
        .expect("bind");
    p.b.udp_set_recv_buffer(rx, 16 << 20).expect("recv buffer");
    let tx = p.a.udp_open();
    // Resolve ARP first (a ping, retried past the wire's drops): UDP has no retransmission,
    // and a first batch queued behind an unresolved address overflows ARP's queue, a loss
    // of the harness rather than of the wire.
    for try_no in 0..10 {
        let now = p.now();
        if p.a.ping(ADDR_B, 0x50a4, try_no, b"soak", now).is_ok()
            && p.run_until(Duration::from_secs(2), |p| p.a.take_echo_reply().is_some())
        {
            break;
        }
    }
    let mut seen: Vec<bool> = Vec::new();
    let mut buf = vec![0u8; 70_000];
    let (mut bytes, mut seq) = (0u64, 0u64);
    while bytes < total {
        let first = seq;
        for _ in 0..UDP_BATCH {
            let d = datagram(ts, seq);
            let mut tries = 0;
            loop {
                match p.a.udp_send_to(tx, &d, ADDR_B, UDP_PORT) {
                    Ok(_) => break,
                    Err(UdpError::WouldBlock | UdpError::NoBuffer) if tries < 100 => {
                        tries += 1;
                        p.run_for(Duration::from_micros(100));
                    }
                    Err(e) => panic!("UDP send (transfer seed {ts:#x}): {e:?}"),
                }
            }
            seen.push(false);
            bytes += d.len() as u64;
            seq += 1;
        }
        let last = seq;
        // Until every datagram of the batch is in, or 5 ms of virtual time (the rest lost).
        p.run_until(Duration::from_millis(5), |p| {
            while let Ok(r) = p.b.udp_recv_from(rx, &mut buf) {
                check_datagram(ts, &buf[..r.len], &mut seen, ph);
            }
            seen[first as usize..last as usize].iter().all(|&x| x)
        });
    }
    // Stragglers.
    p.run_for(Duration::from_millis(5));
    while let Ok(r) = p.b.udp_recv_from(rx, &mut buf) {
        check_datagram(ts, &buf[..r.len], &mut seen, ph);
    }
    ph.udp_datagrams_sent += seq;
    ph.udp_datagrams_lost += seen.iter().filter(|&&x| !x).count() as u64;
}

fn check_datagram(ts: u64, d: &[u8], seen: &mut [bool], ph: &mut Phase) {
    let seq = (d.len() >= UDP_HEADER).then(|| u64::from_le_bytes(d[..8].try_into().unwrap()));
    let expected = seq
        .filter(|&q| (q as usize) < seen.len())
        .map(|q| datagram(ts, q));
    let digest_ok = d.len() >= UDP_HEADER && digest(d).to_le_bytes() == d[8..16];
    match (seq, expected) {
        (Some(q), Some(e)) if digest_ok && e == d => {
            let slot = &mut seen[q as usize];
            if *slot {
                ph.udp_datagrams_duplicate += 1;
            } else {
                *slot = true;
                ph.udp_datagrams_verified += 1;
                ph.udp_bytes_verified += d.len() as u64;
            }
        }
        (_, Some(e)) if past_the_checksum(&e, d) => {
            ph.udp_datagrams_checksum_blind += 1;
        }
        (_, e) => {
            ph.udp_datagrams_corrupted += 1;
            ph.bytes_corrupted_delivered += match e {
                Some(e) if e.len() == d.len() => {
                    e.iter().zip(d).filter(|(x, y)| x != y).count() as u64
                }
                _ => d.len() as u64,
            };
        }
    }
}

/// The most frames a soak datagram crosses the wire in (8,192 bytes in IP fragments of
/// 1,480 at MTU 1500), so the most bits the wire can flip in one.
const UDP_MAX_FRAMES: usize = UDP_MAX.div_ceil(1480);

/// Whether `delivered` is `sent` altered only as the wire alters frames (single bits, no
/// more than one per frame the datagram crossed in) and with the same ones'-complement
/// sum (0 and 0xFFFF being the same number), so that no checksum could have seen it.
/// Anything else, such as fragments put back in the wrong order (which also keeps the
/// sum), is the stack's doing.
fn past_the_checksum(sent: &[u8], delivered: &[u8]) -> bool {
    if sent.len() != delivered.len() {
        return false;
    }
    let flips: Vec<u32> = sent
        .iter()
        .zip(delivered)
        .filter(|(a, b)| a != b)
        .map(|(a, b)| (a ^ b).count_ones())
        .collect();
    let norm = |x: u16| if x == 0xFFFF { 0 } else { x };
    flips.len() <= UDP_MAX_FRAMES
        && flips.iter().all(|&f| f == 1)
        && norm(probestack::checksum::sum(sent)) == norm(probestack::checksum::sum(delivered))
}

/// The process's peak resident set (VmHWM in /proc/self/status), in bytes; 0 if unknown.
pub fn peak_rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

pub fn tables(r: &Report) -> Vec<Table> {
    let mut t = Table::new(
        format!(
            "soak, seed {}: phase 1 checksums on (must be clean), phase 2 checksum elision on",
            r.seed
        ),
        &["", "phase 1 (checksums)", "phase 2 (elision)"],
    );
    let both = |t: &mut Table, name: &str, f: &dyn Fn(&Phase) -> String| {
        t.row(vec![name.to_string(), f(&r.phase), f(&r.elision_phase)]);
    };
    both(&mut t, "transfers (TCP + UDP)", &|p| {
        format!(
            "{} ({} + {})",
            p.transfers, p.tcp_transfers, p.udp_transfers
        )
    });
    both(&mut t, "frames in / out", &|p| {
        format!("{} / {}", p.frames_in, p.frames_out)
    });
    both(&mut t, "bytes verified", &|p| p.bytes_verified.to_string());
    both(&mut t, "  TCP / UDP", &|p| {
        format!("{} / {}", p.tcp_bytes_verified, p.udp_bytes_verified)
    });
    both(&mut t, "bytes corrupted delivered", &|p| {
        p.bytes_corrupted_delivered.to_string()
    });
    both(&mut t, "TCP bytes lost", &|p| p.tcp_bytes_lost.to_string());
    both(&mut t, "TCP transfers failed", &|p| {
        p.tcp_failures.len().to_string()
    });
    both(&mut t, "TCP transfers corrupted", &|p| {
        p.tcp_transfers_corrupted.to_string()
    });
    both(&mut t, "TCP unclean closes", &|p| {
        p.tcp_unclean_closes.to_string()
    });
    both(&mut t, "TCP segments retransmitted", &|p| {
        p.tcp_retransmitted_segments.to_string()
    });
    both(&mut t, "UDP datagrams sent", &|p| {
        p.udp_datagrams_sent.to_string()
    });
    both(&mut t, "  verified / lost / duplicate / corrupted", &|p| {
        format!(
            "{} / {} / {} / {}",
            p.udp_datagrams_verified,
            p.udp_datagrams_lost,
            p.udp_datagrams_duplicate,
            p.udp_datagrams_corrupted
        )
    });
    both(
        &mut t,
        "  altered past the checksum (its blind spot)",
        &|p| p.udp_datagrams_checksum_blind.to_string(),
    );
    both(&mut t, "virtual / wall seconds", &|p| {
        format!("{:.1} / {:.1}", p.virtual_seconds, p.wall_seconds)
    });
    // One row per key either phase has, of each counter map.
    type CounterMap = fn(&Phase) -> &BTreeMap<String, u64>;
    let maps: [(&str, CounterMap); 3] = [
        ("recovery", |p| &p.tcp_recovery),
        ("fault", |p| &p.faults_injected),
        ("drop", |p| &p.drops),
    ];
    for (label, map) in maps {
        let keys: std::collections::BTreeSet<&String> = map(&r.phase)
            .keys()
            .chain(map(&r.elision_phase).keys())
            .collect();
        for k in keys {
            both(&mut t, &format!("{label}: {k}"), &|p| {
                map(p).get(k).copied().unwrap_or(0).to_string()
            });
        }
    }
    let mut s = Table::new("soak: verdict".to_string(), &["", ""]);
    s.row(vec![
        "phase 1 lost or altered nothing".to_string(),
        if r.passed { "yes" } else { "NO" }.to_string(),
    ]);
    s.row(vec![
        "peak RSS (MiB)".to_string(),
        format!("{:.1}", r.peak_rss_bytes as f64 / (1 << 20) as f64),
    ]);
    let mut out = vec![t, s];
    let failures: Vec<&String> = r
        .phase
        .tcp_failures
        .iter()
        .chain(&r.elision_phase.tcp_failures)
        .collect();
    if !failures.is_empty() {
        let mut f = Table::new(
            "soak: TCP transfers that failed".to_string(),
            &["phase", "what"],
        );
        for x in &r.phase.tcp_failures {
            f.row(vec!["1".to_string(), x.clone()]);
        }
        for x in &r.elision_phase.tcp_failures {
            f.row(vec!["2".to_string(), x.clone()]);
        }
        out.push(f);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A datagram of the soak altered at bytes `p` and `q` (same parity, so the same byte
    /// of a 16-bit word) in bit `b`, one 0 to 1 and one 1 to 0: the ones'-complement sum
    /// is unchanged.
    fn cancelling_flips(d: &mut [u8]) {
        for b in 0..8 {
            let zero = (UDP_HEADER..d.len())
                .step_by(2)
                .find(|&i| d[i] >> b & 1 == 0);
            let one = (UDP_HEADER..d.len())
                .step_by(2)
                .find(|&i| d[i] >> b & 1 == 1);
            if let (Some(p), Some(q)) = (zero, one) {
                d[p] |= 1 << b;
                d[q] &= !(1 << b);
                return;
            }
        }
        panic!("no two bytes to flip");
    }

    #[test]
    fn a_datagram_altered_past_the_checksum_is_counted_apart_and_others_fail() {
        let ts = 0x5eed;
        let sent = datagram(ts, 0);
        let mut seen = vec![false];
        let mut ph = Phase::default();
        check_datagram(ts, &sent, &mut seen, &mut ph);
        assert_eq!(
            (ph.udp_datagrams_verified, ph.udp_datagrams_corrupted),
            (1, 0)
        );

        let mut blind = sent.clone();
        cancelling_flips(&mut blind);
        assert_ne!(blind, sent);
        check_datagram(ts, &blind, &mut seen, &mut ph);
        assert_eq!(ph.udp_datagrams_checksum_blind, 1);
        assert_eq!(
            (ph.udp_datagrams_corrupted, ph.bytes_corrupted_delivered),
            (0, 0)
        );
        assert!(ph.clean());

        // Two 8-byte blocks swapped (as fragments put back out of order would be) keep
        // the sum too, but the wire cannot do that: the stack's failure.
        let mut swapped = sent.clone();
        let (front, back) = swapped[UDP_HEADER..].split_at_mut(8);
        front.swap_with_slice(&mut back[..8]);
        assert_ne!(swapped, sent);
        check_datagram(ts, &swapped, &mut seen, &mut ph);
        assert_eq!(ph.udp_datagrams_corrupted, 1);
        assert!(!ph.clean());

        // One flip changes the sum: the checksum would have caught it, so its delivery
        // is the stack's failure.
        let mut seen_by_checksum = sent.clone();
        seen_by_checksum[UDP_HEADER + 1] ^= 0x04;
        let corrupted_bytes = ph.bytes_corrupted_delivered;
        check_datagram(ts, &seen_by_checksum, &mut seen, &mut ph);
        assert_eq!(ph.udp_datagrams_corrupted, 2);
        assert_eq!(ph.bytes_corrupted_delivered, corrupted_bytes + 1);
    }
}
