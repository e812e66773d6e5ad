//! `probestack lab cpu`: where the receiver's CPU goes at a fixed rate (paper 004,
//! Figure 3).
//!
//! # The set-up
//!
//! The bulk transfer of [`super::bulk`] (two stacks on the memory link, one thread each),
//! with two changes ([`bulk::run_cell_paced`]): A sends no faster than a fixed rate that
//! every configuration sustains (paper 004 held 370 Mb/s with a slow sender; the default
//! here is [`DEFAULT_RATE_GBPS`]), and B does work only when its stack has something due
//! (a frame arrived, a timer expired), as a CPU woken by an interrupt would, and records
//! every turn of work and every read in its ledger with every message probed. B's
//! application does not touch the data (netperf's default, as in the paper's figure).
//!
//! # What is reported
//!
//! For each MTU of [`MTUS`] and each of paper 004's variants in [`CONFIGS`]:
//!
//! - `cpu_percent`: B's host time (the ledger's wall time of B's messages, less the NIC
//!   model's work and the probes' own cost) over the elapsed time of the timed runs;
//! - `by_category`: that time split into paper 004's classes, each in percent of the
//!   elapsed time, so that they add up to `cpu_percent` (the figure's stacked bars; when
//!   the probed cells alone exceed B's host time, `other` is 0 and they add up to more):
//!   `data_access` (copies and checksums: the ledger's DataMove and Checksum),
//!   `notification` (interrupt handling: OpSys, the driver's notification), `buffers`
//!   (buffer management: Mbuf), `driver` (the Link and Driver layers' remaining work),
//!   `tcp_ip` (the protocols, the socket layer's checks and queues), and `other` (host
//!   time inside B's messages that no probe covered);
//! - `device_percent`: the NIC model's work in B's messages (checksum offload, header
//!   split, the CRC), which paper 004 does not charge to the host;
//! - `rate_gbps`: the payload rate achieved, beside `target_gbps`.
//!
//! The paper has a virtual-memory class (page remapping); here pages change hands by a
//! reference count, charged to the socket layer, so there is no such class.

use std::collections::BTreeMap;

use probestack::probe::{Category, Layer, SnapshotBucket};
use probestack::time::Duration;
use serde::Serialize;

use super::bulk::{self, Config};
use crate::table::Table;

/// The MTUs of paper 004's Figure 3.
pub const MTUS: [usize; 3] = [1500, 8192, 32768];
/// The variants: none, then each optimization, then both.
pub const CONFIGS: [Config; 4] = [
    Config::None,
    Config::ChecksumOffload,
    Config::ZeroCopy,
    Config::ZeroCopyOffload,
];
/// The paced rate, Gbit/s of payload: well below what the slowest cell (MTU 1500, no
/// optimization) moves on two cores, so every cell sustains it.
pub const DEFAULT_RATE_GBPS: f64 = 2.0;
/// The categories, in the order of the table's columns.
pub const CATEGORIES: [&str; 6] = [
    "data_access",
    "notification",
    "buffers",
    "driver",
    "tcp_ip",
    "other",
];

/// How much to measure.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    pub rate_gbps: f64,
    /// Seconds each run lasts at the paced rate (its bytes follow).
    pub seconds_per_run: f64,
    /// Timed runs after one warm-up run; the ledger adds them up.
    pub runs: usize,
}

impl Settings {
    pub const QUICK: Settings = Settings {
        rate_gbps: DEFAULT_RATE_GBPS,
        seconds_per_run: 0.25,
        runs: 2,
    };
    pub const FULL: Settings = Settings {
        rate_gbps: DEFAULT_RATE_GBPS,
        seconds_per_run: 1.0,
        runs: 5,
    };
}

/// One cell: a configuration at an MTU.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub mtu: usize,
    /// A paper-004 variant ([`Config::name`]).
    pub config: &'static str,
    /// Payload rate achieved over the timed runs.
    pub rate_gbps: f64,
    pub target_gbps: f64,
    /// B's host time over the elapsed time, in percent.
    pub cpu_percent: f64,
    /// Category to percent of the elapsed time (adding up to `cpu_percent`, or above it
    /// when the probed cells alone exceed B's host time; `other` is then 0).
    pub by_category: BTreeMap<&'static str, f64>,
    /// The NIC model's work in B's messages, in percent of the elapsed time.
    pub device_percent: f64,
    /// B's messages (turns of work and reads) over the timed runs.
    pub messages: u64,
    /// B's host time over the timed runs, and their elapsed time, ns.
    pub busy_ns: f64,
    pub elapsed_ns: f64,
}

/// A cell that could not be measured.
#[derive(Clone, Debug, Serialize)]
pub struct Failure {
    pub mtu: usize,
    pub config: &'static str,
    pub error: String,
}

/// One interrupt-coalescing setting (paper 004 §3.4): MTU 1500, no optimization, the
/// paced rate, a notification after `coalesce_frames` frames or `coalesce_time_us`.
#[derive(Clone, Debug, Serialize)]
pub struct CoalesceRow {
    pub mtu: usize,
    pub coalesce_frames: usize,
    pub coalesce_time_us: u64,
    /// Frames B's driver took per notification, as measured.
    pub frames_per_notification: f64,
    /// B's host time per frame received, ns.
    pub ns_per_frame: f64,
    /// The part of it in notification handling (the driver's notification, OpSys).
    pub notify_ns_per_frame: f64,
    pub cpu_percent: f64,
    pub rate_gbps: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Results {
    pub rows: Vec<Row>,
    /// The per-frame cost as the coalescing limit N grows.
    pub coalescing: Vec<CoalesceRow>,
    pub failures: Vec<Failure>,
    pub notes: &'static str,
}

/// The coalescing limits measured (frames per notification), with a time limit long
/// enough that N, not T, ends each batch at the paced rate.
pub const COALESCE_FRAMES: [usize; 7] = [1, 2, 4, 8, 16, 32, 64];
pub const COALESCE_TIME_US: u64 = 1000;

const NOTES: &str = "receiver CPU at a paced rate (paper 004 Figure 3): B works only when its \
    stack has something due, every turn of work and every read probed; cpu_percent is B's \
    host time (NIC model's work and probe cost excluded) over the elapsed time; by_category \
    splits it into paper 004's classes in percent of the elapsed time";

/// Paper 004's class of a ledger cell.
pub fn category(layer: Layer, op: probestack::probe::Op) -> &'static str {
    match op.category() {
        Category::DataMove | Category::Checksum => "data_access",
        Category::OpSys => "notification",
        Category::Mbuf => "buffers",
        _ if matches!(layer, Layer::Link | Layer::Driver) => "driver",
        _ => "tcp_ip",
    }
}

/// The row for one cell from B's ledger over `elapsed_ns` of timed runs that moved
/// `bytes` of payload.
pub fn row(
    mtu: usize,
    config: Config,
    settings: Settings,
    ledger: &SnapshotBucket,
    elapsed_ns: f64,
    bytes: f64,
) -> Row {
    let elapsed = elapsed_ns.max(1.0);
    let percent = |ns: f64| 100.0 * ns / elapsed;
    let mut by_category: BTreeMap<&'static str, f64> =
        CATEGORIES.iter().map(|&c| (c, 0.0)).collect();
    for cell in &ledger.cells {
        *by_category
            .entry(category(cell.layer, cell.op))
            .or_default() += percent(cell.ns);
    }
    let messages = ledger.messages as f64;
    let busy = ledger.stack_ns_per_message() * messages;
    let accounted = ledger.accounted_ns() * messages;
    by_category.insert("other", percent((busy - accounted).max(0.0)));
    Row {
        mtu,
        config: config.name(),
        rate_gbps: bytes * 8.0 / elapsed,
        target_gbps: settings.rate_gbps,
        cpu_percent: percent(busy),
        by_category,
        device_percent: percent(ledger.device_ns),
        messages: ledger.messages,
        busy_ns: busy,
        elapsed_ns: elapsed,
    }
}

/// Runs every MTU × configuration, then MTU 1500 with each coalescing limit of
/// `coalesce_frames`; `progress` hears of each cell.
pub fn run(
    mtus: &[usize],
    configs: &[Config],
    coalesce_frames: &[usize],
    settings: Settings,
    mut progress: impl FnMut(&str),
) -> Result<Results, String> {
    if !(settings.rate_gbps > 0.0 && settings.rate_gbps.is_finite()) {
        return Err(format!(
            "rate {} Gbit/s: must be above 0",
            settings.rate_gbps
        ));
    }
    if coalesce_frames.contains(&0) {
        return Err("a coalescing limit is at least 1 frame".into());
    }
    let pace = settings.rate_gbps * 1e9 / 8.0;
    let bytes = ((pace * settings.seconds_per_run) as usize).max(64 << 10);
    let bulk_settings = bulk::Settings {
        runs: settings.runs.max(1),
        bytes_per_run: bytes,
        ..bulk::Settings::QUICK
    };
    let pattern = bulk::pattern();
    let mut rows = Vec::new();
    let mut coalescing = Vec::new();
    let mut failures = Vec::new();
    let cell = |mtu: usize, config: Config, coalesce: Option<(usize, Duration)>| {
        let paced = bulk::Pace {
            bytes_per_sec: pace,
            coalesce,
        };
        let f = bulk::run_cell_paced(mtu, config, false, bulk_settings, &pattern, 0, Some(paced))?;
        let ledger = f
            .receiver_ledger
            .as_ref()
            .ok_or("the receiver kept no ledger")?
            .merged();
        let elapsed: f64 = f.run_ns.iter().sum();
        let moved = (bytes * f.run_ns.len()) as f64;
        Ok::<_, String>((
            row(mtu, config, settings, &ledger, elapsed, moved),
            f.receiver,
        ))
    };
    for &mtu in mtus {
        for &config in configs {
            progress(&format!("MTU {mtu} {}", config.name()));
            match cell(mtu, config, None) {
                Ok((row, _)) => rows.push(row),
                Err(error) => failures.push(Failure {
                    mtu,
                    config: config.name(),
                    error,
                }),
            }
        }
    }
    for n in coalesce_frames {
        progress(&format!("MTU 1500 none, coalescing {n} frames"));
        let t = Duration::from_micros(COALESCE_TIME_US);
        match cell(1500, Config::None, Some((*n, t))) {
            Ok((row, tally)) => {
                let frames = tally.frames_in.max(1) as f64;
                let notify = row.by_category["notification"] / 100.0 * row.elapsed_ns;
                coalescing.push(CoalesceRow {
                    mtu: 1500,
                    coalesce_frames: *n,
                    coalesce_time_us: COALESCE_TIME_US,
                    frames_per_notification: frames / tally.notifications.max(1) as f64,
                    ns_per_frame: row.busy_ns / frames,
                    notify_ns_per_frame: notify / frames,
                    cpu_percent: row.cpu_percent,
                    rate_gbps: row.rate_gbps,
                });
            }
            Err(error) => failures.push(Failure {
                mtu: 1500,
                config: Config::None.name(),
                error,
            }),
        }
    }
    Ok(Results {
        rows,
        coalescing,
        failures,
        notes: NOTES,
    })
}

/// One table: a row per cell, the categories across.
pub fn tables(r: &Results) -> Vec<Table> {
    let mut header = vec!["MTU / config", "Gbit/s", "CPU %"];
    header.extend(CATEGORIES);
    header.push("NIC %");
    let mut t = Table::new(
        "Receiver CPU at a paced rate, percent of elapsed time (paper 004 Figure 3)",
        &header,
    );
    for row in &r.rows {
        let mut cells = vec![
            format!("{} {}", row.mtu, row.config),
            format!("{:.2}", row.rate_gbps),
            format!("{:.1}", row.cpu_percent),
        ];
        cells.extend(
            CATEGORIES
                .iter()
                .map(|c| format!("{:.1}", row.by_category.get(c).copied().unwrap_or(0.0))),
        );
        cells.push(format!("{:.1}", row.device_percent));
        t.row(cells);
    }
    for f in &r.failures {
        t.note(format!("MTU {} {}: failed: {}", f.mtu, f.config, f.error));
    }
    let mut c = Table::new(
        "Interrupt coalescing: the receiver's cost per frame as N grows (MTU 1500, none, paced)",
        &[
            "N frames",
            "frames/notification",
            "ns/frame",
            "vs first",
            "notification ns/frame",
            "CPU %",
            "Gbit/s",
        ],
    );
    let first = r.coalescing.first().map(|x| x.ns_per_frame);
    for row in &r.coalescing {
        c.row(vec![
            row.coalesce_frames.to_string(),
            format!("{:.1}", row.frames_per_notification),
            format!("{:.0}", row.ns_per_frame),
            first.map_or("-".into(), |f| {
                format!("{:+.0}%", (row.ns_per_frame / f - 1.0) * 100.0)
            }),
            format!("{:.0}", row.notify_ns_per_frame),
            format!("{:.1}", row.cpu_percent),
            format!("{:.2}", row.rate_gbps),
        ]);
    }
    c.note(format!(
        "a notification after N frames or {COALESCE_TIME_US} us; B's host time per frame \
         it took from the NIC (data, ACKs sent and all)"
    ));
    t.note(NOTES);
    t.note(
        "paper 004 (Monet, 370 Mb/s): ~95% CPU at 1500 B with ~65% in packet handling; \
         22% packet handling at 8 KB and 10% at 32 KB; data access 24% at 32 KB, ~15% with \
         zero-copy or checksum offload, ~0 with both (10% CPU in all)",
    );
    if r.coalescing.is_empty() {
        vec![t]
    } else {
        vec![t, c]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_rows_have_the_promised_fields_and_add_up() {
        let settings = Settings {
            rate_gbps: 0.5,
            seconds_per_run: 0.02,
            runs: 1,
        };
        let r = run(&[8192], &CONFIGS, &[1, 16], settings, |_| {}).unwrap();
        assert!(r.failures.is_empty(), "{:?}", r.failures);
        assert_eq!(r.rows.len(), 4);
        // Coalescing: a row per limit (how many frames a notification brings depends on
        // when B's thread runs, so only the shape is checked here).
        let limits: Vec<usize> = r.coalescing.iter().map(|c| c.coalesce_frames).collect();
        assert_eq!(limits, [1, 16]);
        for c in &r.coalescing {
            assert!(
                c.frames_per_notification >= 1.0 && c.ns_per_frame > 0.0,
                "{c:?}"
            );
            assert!(c.notify_ns_per_frame <= c.ns_per_frame, "{c:?}");
        }
        for row in &r.rows {
            // The classes add up to B's host time, unless the probed cells alone exceed
            // it (the probes' own cost is an estimate); then `other` is 0.
            let sum: f64 = row.by_category.values().sum();
            let other = row.by_category["other"];
            assert!(sum >= row.cpu_percent - 1e-6, "{row:?}");
            assert!(
                other == 0.0 || (sum - row.cpu_percent).abs() < 1e-6,
                "{row:?}"
            );
            assert!(row.by_category["data_access"] > 0.0, "{row:?}");
            assert!(row.cpu_percent > 0.0 && row.messages > 0, "{row:?}");
            assert_eq!(
                row.by_category.keys().copied().collect::<Vec<_>>().len(),
                CATEGORIES.len()
            );
            assert!(row.rate_gbps > 0.0);
        }
        let v = serde_json::to_value(&r).unwrap();
        for row in v["rows"].as_array().unwrap() {
            for key in ["mtu", "config", "rate_gbps", "cpu_percent", "by_category"] {
                assert!(!row[key].is_null(), "{key}");
            }
            assert!(row["by_category"]["data_access"].is_number());
        }
        assert_eq!(tables(&r).len(), 2);
    }

    #[test]
    fn ledger_cells_fall_in_paper_004_classes() {
        use probestack::probe::Op;
        assert_eq!(category(Layer::Socket, Op::UserCopy), "data_access");
        assert_eq!(category(Layer::Tcp, Op::Checksum), "data_access");
        assert_eq!(category(Layer::Driver, Op::Notify), "notification");
        assert_eq!(category(Layer::Ip, Op::BufFree), "buffers");
        assert_eq!(category(Layer::Driver, Op::DeviceQueue), "driver");
        assert_eq!(category(Layer::Link, Op::LinkProto), "driver");
        assert_eq!(category(Layer::Tcp, Op::TcpProto), "tcp_ip");
        assert_eq!(category(Layer::Socket, Op::SocketCheck), "tcp_ip");
    }

    #[test]
    fn a_rate_of_zero_is_refused() {
        let s = Settings {
            rate_gbps: 0.0,
            ..Settings::QUICK
        };
        assert!(run(&[1500], &CONFIGS, &[], s, |_| {}).is_err());
        assert!(run(&[1500], &CONFIGS, &[4, 0], Settings::QUICK, |_| {}).is_err());
    }
}
