//! `probestack lab throughput`: Tables 1 and 2 of paper 000 (Kay & Pasquale 1993) on this
//! machine.
//!
//! - **Table 1**: UDP and TCP throughput between two stacks over the memory link with the
//!   FDDI MTU (4352), large messages, and three ways of doing the transport checksum: the
//!   RFC 1071 reference loop (the paper's "unmodified"), the fastest kernel this CPU has
//!   ("optimized checksum"), and checksum elision ("checksum elimination": the link has a
//!   CRC and the next hop is the destination, so UDP sends a zero checksum and TCP
//!   negotiates RFC 1146's "no checksum").
//! - **Table 2**: send-side UDP throughput with a PIO device (the driver copies every frame
//!   into device memory, as the paper's old FDDI adapter without send DMA) and a DMA device
//!   (the NIC takes the host's buffer), each unmodified and with elision.
//!
//! Every variant is [`Tuning::fast`] with the switches that would hide the checksum's cost
//! turned off: no UDP fast path and no fused copy-and-checksum (copy, then sum, in two
//! passes, as the paper's stack did), no checksum offload or TSO on the NIC; then only the
//! checksum kernel and `checksum_elision` differ between rows.
//!
//! UDP: A sends [`UDP_MESSAGE`]-byte datagrams (two fragments each at this MTU) in batches
//! of [`UDP_BATCH`] to a socket on B; both stacks are polled on this thread, and B's
//! application reads every datagram. Full throughput is application bytes delivered per
//! wall second of the whole exchange; send-side throughput is bytes A's application handed
//! over per second of A's own work (its sends and its polls, which carry the frames to its
//! NIC), B's time set apart. TCP reuses `lab bulk`'s two-thread transfer
//! ([`bulk::run_cell_with`]): one-way, 128 KiB writes, the receiver not touching the data.
//! Figures are MB/s (10^6 bytes per second) as in the paper, medians over the timed runs.

use std::time::{Duration, Instant as WallInstant};

use probestack::checksum::Kernel;
use probestack::driver::CopyMode;
use probestack::probe::Counter;
use probestack::sim::{HostConfig, Pair, ADDR_B};
use probestack::socket::udp::UdpError;
use probestack::time::{Clock, RealClock};
use probestack::tuning::Tuning;
use probestack::wire::Ipv4Address;
use serde::Serialize;

use crate::bench::median;
use crate::experiments::bulk;
use crate::table::Table;

/// FDDI's MTU, as in paper 000.
pub const MTU: usize = 4352;
/// The UDP message: paper 000's largest size (it fragments in two at this MTU).
pub const UDP_MESSAGE: usize = 8192;
/// Datagrams A sends between two polls.
pub const UDP_BATCH: usize = 16;
const PORT: u16 = 9;

/// How the transport checksum is done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChecksumVariant {
    /// The RFC 1071 reference loop: paper 000's "unmodified".
    Rfc1071,
    /// The best kernel for this CPU: paper 000's "optimized checksum".
    Fast,
    /// No transport checksum where the link's CRC covers the hop: "checksum elimination".
    Elision,
}

impl ChecksumVariant {
    pub fn name(self) -> &'static str {
        match self {
            ChecksumVariant::Rfc1071 => "rfc1071",
            ChecksumVariant::Fast => "fast_checksum",
            ChecksumVariant::Elision => "elision",
        }
    }

    /// `Tuning::fast()` with the checksum-hiding switches off and this checksum.
    pub fn tuning(self) -> Tuning {
        Tuning {
            checksum: match self {
                ChecksumVariant::Fast => Kernel::best(),
                _ => Kernel::Rfc1071,
            },
            checksum_elision: self == ChecksumVariant::Elision,
            udp_fast_path: false,
            fused_copy_checksum: false,
            checksum_offload: false,
            segmentation_offload: false,
            software_segmentation: false,
            ..Tuning::fast()
        }
    }
}

/// How much to measure.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// UDP datagrams per timed run.
    pub udp_datagrams: usize,
    /// Timed UDP runs per cell (after a warm-up run); the median is reported.
    pub udp_runs: usize,
    /// The TCP transfer.
    pub tcp: bulk::Settings,
}

impl Settings {
    pub const QUICK: Settings = Settings {
        udp_datagrams: 4000,
        udp_runs: 5,
        tcp: bulk::Settings::QUICK,
    };
    pub const FULL: Settings = Settings {
        udp_datagrams: 20_000,
        udp_runs: 7,
        tcp: bulk::Settings::FULL,
    };
    /// The smallest run that fills both tables (the tests, the report's test level).
    pub const TINY: Settings = Settings {
        udp_datagrams: 40,
        udp_runs: 1,
        tcp: bulk::Settings {
            runs: 1,
            bytes_per_run: 256 << 10,
            ..bulk::Settings::QUICK
        },
    };
}

/// One row of Table 1.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// `udp` or `tcp`.
    pub protocol: &'static str,
    /// `rfc1071`, `fast_checksum` or `elision`.
    pub checksum: &'static str,
    /// Application payload delivered, 10^6 bytes per second (the median run).
    pub mb_per_s: f64,
    /// This row over the same protocol's `rfc1071` row, minus one (0.29 = +29%).
    pub gain_vs_rfc1071: Option<f64>,
    /// TCP: both ends agreed to send without checksums (RFC 1146). UDP: whether the
    /// tuning elides (the datagrams carry a zero checksum).
    pub checksum_elided: bool,
    pub runs: usize,
}

/// One row of Table 2.
#[derive(Clone, Debug, Serialize)]
pub struct SendRow {
    /// `pio` or `dma`.
    pub device: &'static str,
    /// `rfc1071` (unmodified) or `elision`.
    pub checksum: &'static str,
    /// Bytes A's application sent per second of A's work, 10^6 bytes per second.
    pub mb_per_s: f64,
    /// Over the same device's `rfc1071` row, minus one.
    pub gain_vs_unmodified: Option<f64>,
    pub runs: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct Results {
    pub experiment: &'static str,
    pub mtu: usize,
    pub udp_message: usize,
    pub udp_datagrams_per_run: usize,
    pub tcp_bytes_per_run: usize,
    pub checksum_kernel_fast: &'static str,
    pub rows: Vec<Row>,
    pub send_side: Vec<SendRow>,
    /// Cells that could not be measured, and why.
    pub failures: Vec<String>,
}

/// What one UDP run measured.
struct UdpRun {
    /// Wall time of the whole run.
    wall: Duration,
    /// A's share: its sends and polls.
    sender: Duration,
    bytes_sent: u64,
    bytes_received: u64,
}

/// A UDP connection of sorts: A's socket, B's bound socket, on a fresh pair.
struct UdpBench {
    pair: Pair,
    tx: probestack::socket::udp::UdpHandle,
    rx: probestack::socket::udp::UdpHandle,
    clock: RealClock,
    msg: Vec<u8>,
    buf: Vec<u8>,
}

impl UdpBench {
    fn new(host: HostConfig) -> Result<UdpBench, String> {
        let mut pair = Pair::new(host.clone(), host).map_err(|e| format!("memory link: {e}"))?;
        let rx = pair.b.udp_open();
        pair.b
            .udp_bind(rx, Ipv4Address::UNSPECIFIED, PORT)
            .map_err(|e| e.to_string())?;
        pair.b
            .udp_set_recv_buffer(rx, 16 << 20)
            .map_err(|e| e.to_string())?;
        let tx = pair.a.udp_open();
        Ok(UdpBench {
            pair,
            tx,
            rx,
            clock: RealClock::new(),
            msg: (0..UDP_MESSAGE).map(|i| (i * 31 + 7) as u8).collect(),
            buf: vec![0u8; 65536],
        })
    }

    /// Sends `n` datagrams and reads what arrives; gives up when nothing has arrived for
    /// a second after the last send.
    fn run(&mut self, n: usize) -> Result<UdpRun, String> {
        let start = WallInstant::now();
        let mut sender = Duration::ZERO;
        let (mut sent, mut bytes_sent, mut bytes_received) = (0usize, 0u64, 0u64);
        let mut received = 0usize;
        let mut last_progress = WallInstant::now();
        while received < n {
            let t = WallInstant::now();
            let batch = (n - sent).min(UDP_BATCH);
            for _ in 0..batch {
                match self.pair.a.udp_send_to(self.tx, &self.msg, ADDR_B, PORT) {
                    Ok(len) => {
                        sent += 1;
                        bytes_sent += len as u64;
                    }
                    // The transmit path is full: poll and carry on.
                    Err(UdpError::NoBuffer) => break,
                    Err(e) => return Err(format!("send: {e}")),
                }
            }
            self.pair.a.poll(self.clock.now());
            sender += t.elapsed();
            self.pair.b.poll(self.clock.now());
            let before = received;
            while let Ok(r) = self.pair.b.udp_recv_from(self.rx, &mut self.buf) {
                received += 1;
                bytes_received += r.len as u64;
            }
            if received > before {
                last_progress = WallInstant::now();
            } else if sent >= n && last_progress.elapsed() > Duration::from_secs(1) {
                // The rest were dropped (a queue overflowed): the run ends with what came.
                break;
            } else if last_progress.elapsed() > Duration::from_secs(10) {
                return Err(format!("UDP stalled: {received} of {n} datagrams arrived"));
            }
        }
        Ok(UdpRun {
            wall: start.elapsed(),
            sender,
            bytes_sent,
            bytes_received,
        })
    }
}

/// The median MB/s over `runs` timed runs (after ARP and a warm-up run) of `rate`, and
/// whether B received datagrams without a checksum (elided).
fn udp_cell(
    host: HostConfig,
    settings: Settings,
    rate: impl Fn(&UdpRun) -> f64,
) -> Result<(f64, usize, bool), String> {
    let mut bench = UdpBench::new(host)?;
    bench.run(1)?;
    bench.run(settings.udp_datagrams.clamp(1, 500))?;
    let runs = settings.udp_runs.max(1);
    let mut rates = Vec::with_capacity(runs);
    for _ in 0..runs {
        let r = bench.run(settings.udp_datagrams.max(1))?;
        if r.bytes_received == 0 {
            return Err("no datagram arrived".into());
        }
        rates.push(rate(&r));
    }
    let elided = bench
        .pair
        .b
        .ledger()
        .counters()
        .get(Counter::UdpNoChecksumIn)
        > 0;
    Ok((median(&mut rates), runs, elided))
}

fn mb_per_s(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / d.as_secs_f64().max(1e-9) / 1e6
}

/// Runs both tables; `progress` hears of each cell.
pub fn run(settings: Settings, mut progress: impl FnMut(&str)) -> Results {
    let mut rows = Vec::new();
    let mut failures = Vec::new();
    let variants = [
        ChecksumVariant::Rfc1071,
        ChecksumVariant::Fast,
        ChecksumVariant::Elision,
    ];
    for v in variants {
        progress(&format!("UDP, {}", v.name()));
        let mut host = HostConfig::with_mtu(MTU);
        host.stack.tuning = v.tuning();
        match udp_cell(host, settings, |r| mb_per_s(r.bytes_received, r.wall)) {
            Ok((mb, runs, elided)) => rows.push(Row {
                protocol: "udp",
                checksum: v.name(),
                mb_per_s: mb,
                gain_vs_rfc1071: None,
                checksum_elided: elided,
                runs,
            }),
            Err(e) => failures.push(format!("UDP {}: {e}", v.name())),
        }
    }
    let pattern = bulk::pattern();
    let tcp = bulk::Settings {
        runs: settings.tcp.runs.max(1),
        bytes_per_run: settings.tcp.bytes_per_run.max(1),
        ..settings.tcp
    };
    let expected = bulk::expected_digest(&pattern, tcp.bytes_per_run);
    for v in variants {
        progress(&format!("TCP, {}", v.name()));
        let mut host = HostConfig::with_mtu(MTU);
        host.stack.tuning = v.tuning();
        match bulk::run_cell_with(host, false, false, tcp, &pattern, expected, None) {
            Ok(f) => {
                let mut mbs: Vec<f64> = f
                    .run_ns
                    .iter()
                    .map(|ns| tcp.bytes_per_run as f64 / ns * 1e3)
                    .collect();
                rows.push(Row {
                    protocol: "tcp",
                    checksum: v.name(),
                    mb_per_s: median(&mut mbs),
                    gain_vs_rfc1071: None,
                    checksum_elided: f.checksum_elided,
                    runs: f.run_ns.len(),
                });
            }
            Err(e) => failures.push(format!("TCP {}: {e}", v.name())),
        }
    }
    for p in ["udp", "tcp"] {
        let base = rows
            .iter()
            .find(|r| r.protocol == p && r.checksum == "rfc1071")
            .map(|r| r.mb_per_s);
        for r in rows.iter_mut().filter(|r| r.protocol == p) {
            r.gain_vs_rfc1071 = base.filter(|b| *b > 0.0).map(|b| r.mb_per_s / b - 1.0);
        }
    }

    let mut send_side = Vec::new();
    for (device, mode) in [("pio", CopyMode::Pio), ("dma", CopyMode::Dma)] {
        for v in [ChecksumVariant::Rfc1071, ChecksumVariant::Elision] {
            progress(&format!("UDP send side, {device}, {}", v.name()));
            let mut host = HostConfig::with_mtu(MTU);
            host.stack.tuning = v.tuning();
            host.nic.copy_mode = mode;
            match udp_cell(host, settings, |r| mb_per_s(r.bytes_sent, r.sender)) {
                Ok((mb, runs, _)) => send_side.push(SendRow {
                    device,
                    checksum: v.name(),
                    mb_per_s: mb,
                    gain_vs_unmodified: None,
                    runs,
                }),
                Err(e) => failures.push(format!("UDP send side {device} {}: {e}", v.name())),
            }
        }
        let base = send_side
            .iter()
            .find(|r| r.device == device && r.checksum == "rfc1071")
            .map(|r| r.mb_per_s);
        for r in send_side.iter_mut().filter(|r| r.device == device) {
            r.gain_vs_unmodified = base.filter(|b| *b > 0.0).map(|b| r.mb_per_s / b - 1.0);
        }
    }
    Results {
        experiment: "throughput",
        mtu: MTU,
        udp_message: UDP_MESSAGE,
        udp_datagrams_per_run: settings.udp_datagrams,
        tcp_bytes_per_run: tcp.bytes_per_run,
        checksum_kernel_fast: Kernel::best().name(),
        rows,
        send_side,
        failures,
    }
}

fn gain(g: Option<f64>) -> String {
    g.map_or_else(|| "-".into(), |g| format!("{:+.0}%", g * 100.0))
}

/// Paper 000 Table 1, MB/s: (TCP, UDP) for unmodified, optimized checksum, elimination.
pub const PAPER_TABLE1: [(&str, f64, f64); 3] = [
    ("rfc1071", 2.1, 2.4),
    ("fast_checksum", 2.7, 3.2),
    ("elision", 3.1, 4.1),
];
/// Paper 000 Table 2, MB/s: (old adapter without send DMA, new adapter with it) for
/// unmodified and checksum elimination.
pub const PAPER_TABLE2: [(&str, f64, f64); 2] = [("rfc1071", 2.6, 3.3), ("elision", 4.1, 6.3)];

pub fn tables(r: &Results) -> Vec<Table> {
    let mut t = Table::new(
        format!(
            "Throughput between two stacks, MTU {}, MB/s (paper 000 Table 1: 000_3e29a2c865aeba9b.txt)",
            r.mtu
        ),
        &[
            "protocol", "checksum", "MB/s", "gain", "paper MB/s", "paper gain",
        ],
    );
    for row in &r.rows {
        let paper = PAPER_TABLE1.iter().find(|p| p.0 == row.checksum);
        let (paper_mb, paper_base) = match (row.protocol, paper) {
            ("tcp", Some(p)) => (Some(p.1), PAPER_TABLE1[0].1),
            (_, Some(p)) => (Some(p.2), PAPER_TABLE1[0].2),
            _ => (None, 1.0),
        };
        t.row(vec![
            row.protocol.to_string(),
            row.checksum.to_string(),
            format!("{:.1}", row.mb_per_s),
            gain(row.gain_vs_rfc1071),
            paper_mb.map_or("-".into(), |m| format!("{m:.1}")),
            paper_mb.map_or("-".into(), |m| gain(Some(m / paper_base - 1.0))),
        ]);
    }
    t.note(format!(
        "UDP: {}-byte datagrams ({} per run), both stacks on one thread; TCP: lab bulk's two-thread transfer of {} bytes per run, the receiver not touching the data",
        r.udp_message, r.udp_datagrams_per_run, r.tcp_bytes_per_run
    ));
    t.note(format!(
        "every row is Tuning::fast() without UDP fast path, fused copy+checksum or NIC offload; fast_checksum = the {} kernel",
        r.checksum_kernel_fast
    ));
    for f in &r.failures {
        t.note(format!("failed: {f}"));
    }
    let mut s = Table::new(
        "UDP send-side throughput, PIO vs DMA device, MB/s (paper 000 Table 2)",
        &[
            "device",
            "checksum",
            "MB/s",
            "gain",
            "paper MB/s",
            "paper gain",
        ],
    );
    for row in &r.send_side {
        let paper = PAPER_TABLE2.iter().find(|p| p.0 == row.checksum);
        let pick = |p: &(&str, f64, f64)| if row.device == "pio" { p.1 } else { p.2 };
        let paper_mb = paper.map(pick);
        let paper_base = pick(&PAPER_TABLE2[0]);
        s.row(vec![
            row.device.to_string(),
            row.checksum.to_string(),
            format!("{:.1}", row.mb_per_s),
            gain(row.gain_vs_unmodified),
            paper_mb.map_or("-".into(), |m| format!("{m:.1}")),
            paper_mb.map_or("-".into(), |m| gain(Some(m / paper_base - 1.0))),
        ]);
    }
    s.note("send side: bytes A's application sent per second of A's own work (sends and polls); the paper's old adapter had no send DMA (PIO), its new one had");
    vec![t, s]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variants_differ_only_in_the_checksum() {
        let (a, b, c) = (
            ChecksumVariant::Rfc1071.tuning(),
            ChecksumVariant::Fast.tuning(),
            ChecksumVariant::Elision.tuning(),
        );
        assert_eq!(a.checksum, Kernel::Rfc1071);
        assert_eq!(b.checksum, Kernel::best());
        assert!(c.checksum_elision && !a.checksum_elision && !b.checksum_elision);
        assert_eq!(
            Tuning {
                checksum: Kernel::Rfc1071,
                ..b
            },
            a
        );
        assert!(!a.udp_fast_path && !a.fused_copy_checksum && !a.checksum_offload);
    }

    #[test]
    fn a_tiny_run_fills_both_tables() {
        let settings = Settings::TINY;
        let r = run(settings, |_| {});
        assert!(r.failures.is_empty(), "{:?}", r.failures);
        assert_eq!(r.rows.len(), 6);
        assert_eq!(r.send_side.len(), 4);
        assert!(r.rows.iter().all(|x| x.mb_per_s > 0.0));
        let tcp_elided = r
            .rows
            .iter()
            .find(|x| x.protocol == "tcp" && x.checksum == "elision")
            .unwrap();
        assert!(
            tcp_elided.checksum_elided,
            "RFC 1146 negotiated on a CRC link"
        );
        // UDP: datagrams arrived without a checksum only where it is elided.
        for x in r.rows.iter().filter(|x| x.protocol == "udp") {
            assert_eq!(x.checksum_elided, x.checksum == "elision", "{x:?}");
        }
        assert_eq!(tables(&r).len(), 2);
    }
}
