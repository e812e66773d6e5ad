//! `probestack lab mix`: the aggregate of papers 001 and 003 (Kay & Pasquale, SIGCOMM 1993
//! and ToN 1996). For TCP and UDP, the stack's processing per message is broken down by
//! paper 001's categories (DataMove, Checksum, ProtSpec, Mbuf, OpSys, ErrorChk, DataStruct)
//! at each message size of a size distribution, then weighted by how often each size
//! occurs. The result is the share of all processing that touches the data (DataMove and
//! Checksum) and the share that does not, which paper 001 found to be 84% (TCP) and 60%
//! (UDP) non-data-touching under its traffic.
//!
//! # The message-size distribution
//!
//! The papers give the shape of their traffic but not a table of it: "most messages are
//! either very small or very large", small ones being 64-128 byte control messages and
//! large ones multiple-kilobyte bulk data, small far outnumbering large, and "fewer than
//! 10% of UDP messages fragment" (paper 003 §1; paper 001 §6, summarised in
//! /work/shared/papers/numbers.md). [`DEFAULT_TCP`] and [`DEFAULT_UDP`] are our bimodal
//! model of that description, not the papers' measured data: 80% (TCP) and 65% (UDP) of
//! messages are 64 or 128 bytes, the rest spread over 512 B to 8 KiB, and 5% of UDP
//! messages are 8 KiB, which fragment at the FDDI MTU of 4352 used here as in paper 000.
//! A user with real traffic can supply it instead: `--sizes-csv FILE` (one size per line,
//! or `tcp,SIZE` / `udp,SIZE`) or `--pcap FILE` (every IPv4 TCP segment with data and every
//! UDP datagram of an Ethernet capture gives its payload size).
//!
//! Sizes are measured on a grid ([`GRID`]); each sample counts for the grid size nearest
//! to it on a log scale, so a capture of thousands of distinct sizes costs a dozen
//! measurements.
//!
//! # What is measured
//!
//! Two stacks over the memory link, both ledgers probing every message. For each size, A
//! sends `messages` messages to B one at a time (TCP: on one connection with Nagle off,
//! each message read whole by B before the next is sent; UDP: datagrams to a bound socket
//! on B), after [`WARM_UP`] unmeasured ones. The category times of both hosts (A's send path and its ACK processing, B's
//! receive path and its ACKs) are summed and divided by the messages sent: the cost of one
//! application message, end to end, in both stacks. Both tunings are measured: `bsd` (the
//! 1993 stack the papers measured, PIO NIC) and `fast` (DMA NIC).

use std::collections::BTreeMap;
use std::path::Path;

use probestack::driver::CopyMode;
use probestack::probe::{Category, Snapshot};
use probestack::sim::{HostConfig, Pair, ADDR_B};
use probestack::time::{Clock, RealClock};
use probestack::tuning::Tuning;
use probestack::wire::Ipv4Address;
use serde::Serialize;

use crate::table::Table;

/// FDDI's MTU, as in papers 000 and 001.
pub const MTU: usize = 4352;
/// The sizes measured: every sample is counted at the nearest of these (log scale).
pub const GRID: [usize; 12] = [
    64, 128, 256, 512, 1024, 1460, 2048, 4096, 8192, 16384, 32768, 65000,
];
/// Our bimodal model of paper 003's TCP traffic: (size, share of messages).
pub const DEFAULT_TCP: [(usize, f64); 6] = [
    (64, 0.50),
    (128, 0.30),
    (512, 0.05),
    (1024, 0.05),
    (4096, 0.05),
    (8192, 0.05),
];
/// Our bimodal model of paper 003's UDP traffic: (size, share of messages).
pub const DEFAULT_UDP: [(usize, f64); 6] = [
    (64, 0.35),
    (128, 0.30),
    (512, 0.15),
    (1024, 0.10),
    (4096, 0.05),
    (8192, 0.05),
];
/// Messages sent at each size before the ledgers are cleared: ARP, pools, caches, the
/// connection's first ACKs.
pub const WARM_UP: usize = 50;
/// Paper 001's non-data-touching shares under its traffic.
pub const PAPER_NON_DATA_TOUCHING: [(&str, f64); 2] = [("tcp", 0.84), ("udp", 0.60)];
/// Where the default distribution comes from.
pub const DEFAULT_SOURCE: &str = "bimodal model of paper 003 §1 and paper 001: most \
    messages 64-128 B control messages, the rest multi-KB bulk; under 10% of UDP messages \
    fragment (our weights, not the papers' data)";

/// How often each size occurs, per protocol.
#[derive(Clone, Debug, Serialize)]
pub struct Distribution {
    /// Where it came from (the default model, a CSV, a capture).
    pub source: String,
    /// Grid size to share of messages (summing to 1, or empty when none were seen).
    pub tcp: BTreeMap<usize, f64>,
    pub udp: BTreeMap<usize, f64>,
    /// Samples read.
    pub samples: u64,
    /// Lines or records that gave no size (bad lines, non-IPv4 frames, pure ACKs).
    pub skipped: u64,
}

impl Distribution {
    /// The documented default ([`DEFAULT_TCP`], [`DEFAULT_UDP`]).
    pub fn default_model() -> Distribution {
        Distribution {
            source: DEFAULT_SOURCE.to_string(),
            tcp: DEFAULT_TCP.into_iter().collect(),
            udp: DEFAULT_UDP.into_iter().collect(),
            samples: 0,
            skipped: 0,
        }
    }

    /// From counts per protocol.
    fn from_samples(source: String, tcp: &[usize], udp: &[usize], skipped: u64) -> Distribution {
        let shares = |v: &[usize]| {
            let mut m: BTreeMap<usize, f64> = BTreeMap::new();
            for &s in v {
                *m.entry(nearest_grid(s)).or_insert(0.0) += 1.0;
            }
            let n = v.len().max(1) as f64;
            m.values_mut().for_each(|x| *x /= n);
            m
        };
        Distribution {
            source,
            tcp: shares(tcp),
            udp: shares(udp),
            samples: (tcp.len() + udp.len()) as u64,
            skipped,
        }
    }

    /// Sizes from a CSV: one per line, `SIZE` (counts for both protocols) or
    /// `tcp,SIZE` / `udp,SIZE`. Blank lines and `#` comments are ignored; other lines that
    /// give no size (a header, a zero, garbage) are counted as skipped.
    pub fn from_csv(path: &Path) -> Result<Distribution, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("reading {}: {e}", path.display()))?;
        let (mut tcp, mut udp, mut skipped) = (Vec::new(), Vec::new(), 0u64);
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let fields: Vec<&str> = line.split(',').map(str::trim).collect();
            let parsed = match fields.as_slice() {
                [size] => size.parse::<usize>().ok().map(|s| (None, s)),
                [proto, size] => size.parse::<usize>().ok().and_then(|s| {
                    match proto.to_ascii_lowercase().as_str() {
                        "tcp" => Some((Some(true), s)),
                        "udp" => Some((Some(false), s)),
                        _ => None,
                    }
                }),
                _ => None,
            };
            match parsed {
                Some((_, 0)) | None => skipped += 1,
                Some((None, s)) => {
                    tcp.push(s);
                    udp.push(s);
                }
                Some((Some(true), s)) => tcp.push(s),
                Some((Some(false), s)) => udp.push(s),
            }
        }
        if tcp.is_empty() && udp.is_empty() {
            return Err(format!("{}: no message sizes in it", path.display()));
        }
        Ok(Distribution::from_samples(
            format!("sizes from {}", path.display()),
            &tcp,
            &udp,
            skipped,
        ))
    }

    /// Sizes from an Ethernet pcap: the payload of every IPv4 TCP segment that carries
    /// data and of every UDP datagram (first fragments, whose UDP header gives the
    /// datagram's length). Everything else is counted as skipped.
    pub fn from_pcap(path: &Path) -> Result<Distribution, String> {
        let bytes = std::fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
        let (header, records) = probestack::driver::pcap::parse(&bytes)
            .map_err(|e| format!("{}: not a pcap capture: {e}", path.display()))?;
        if header.linktype != probestack::driver::pcap::LINKTYPE_ETHERNET {
            return Err(format!(
                "{}: link type {} (only Ethernet captures, type 1, are read)",
                path.display(),
                header.linktype
            ));
        }
        let (mut tcp, mut udp, mut skipped) = (Vec::new(), Vec::new(), 0u64);
        for r in &records {
            match payload_size(&r.data) {
                Some((true, s)) if s > 0 => tcp.push(s),
                Some((false, s)) if s > 0 => udp.push(s),
                _ => skipped += 1,
            }
        }
        if tcp.is_empty() && udp.is_empty() {
            return Err(format!(
                "{}: no TCP data or UDP datagram in {} records",
                path.display(),
                records.len()
            ));
        }
        Ok(Distribution::from_samples(
            format!("sizes from the capture {}", path.display()),
            &tcp,
            &udp,
            skipped,
        ))
    }
}

/// (is TCP, payload bytes) of an Ethernet frame carrying IPv4 TCP or UDP, or `None`.
/// Reads only the headers' length fields (RFC 791 §3.1, RFC 793 §3.1, RFC 768); a frame
/// too short for what its headers claim gives `None`.
fn payload_size(frame: &[u8]) -> Option<(bool, usize)> {
    let ethertype = u16::from_be_bytes([*frame.get(12)?, *frame.get(13)?]);
    if ethertype != 0x0800 {
        return None;
    }
    let ip = frame.get(14..)?;
    if ip.first()? >> 4 != 4 {
        return None;
    }
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([*ip.get(2)?, *ip.get(3)?]));
    let fragment_offset = u16::from_be_bytes([*ip.get(6)?, *ip.get(7)?]) & 0x1fff;
    if ihl < 20 || total < ihl || fragment_offset != 0 {
        return None;
    }
    let transport = ip.get(ihl..)?;
    match ip.get(9)? {
        6 => {
            let offset = usize::from(transport.get(12)? >> 4) * 4;
            (offset >= 20 && total >= ihl + offset).then(|| (true, total - ihl - offset))
        }
        17 => {
            // The UDP length covers the whole datagram, fragments included.
            let len = usize::from(u16::from_be_bytes([*transport.get(4)?, *transport.get(5)?]));
            (len >= 8).then(|| (false, len - 8))
        }
        _ => None,
    }
}

/// The grid size nearest to `size` on a log scale.
pub fn nearest_grid(size: usize) -> usize {
    let l = (size.max(1) as f64).ln();
    GRID.into_iter()
        .min_by(|a, b| {
            let da = ((*a as f64).ln() - l).abs();
            let db = ((*b as f64).ln() - l).abs();
            da.total_cmp(&db)
        })
        .unwrap_or(GRID[0])
}

/// One protocol at one size.
#[derive(Clone, Debug, Serialize)]
pub struct SizeRow {
    pub tuning: &'static str,
    pub protocol: &'static str,
    pub size: usize,
    /// Share of messages of this size in the distribution.
    pub weight: f64,
    /// Both hosts' probed time per application message, ns.
    pub ns_per_message: f64,
    /// Paper 001 category to ns per message.
    pub by_category: BTreeMap<&'static str, f64>,
    pub data_touching_ns: f64,
    pub non_data_touching_ns: f64,
}

/// One protocol's aggregate over the distribution.
#[derive(Clone, Debug, Serialize)]
pub struct Aggregate {
    pub tuning: &'static str,
    pub protocol: &'static str,
    /// Category to share of the weighted total (0 to 1).
    pub by_category_share: BTreeMap<&'static str, f64>,
    pub data_touching_share: f64,
    pub non_data_touching_share: f64,
    /// Paper 001's non-data-touching share for this protocol.
    pub paper_non_data_touching_share: f64,
    /// Weighted mean processing per message, ns.
    pub mean_ns_per_message: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Results {
    pub experiment: &'static str,
    pub mtu: usize,
    pub messages_per_size: usize,
    pub distribution: Distribution,
    pub rows: Vec<SizeRow>,
    pub aggregates: Vec<Aggregate>,
}

/// Total ns by category over every bucket of a snapshot.
fn category_totals(s: &Snapshot, into: &mut BTreeMap<&'static str, f64>) {
    for b in &s.buckets {
        for c in &b.cells {
            *into.entry(c.op.category().name()).or_insert(0.0) += c.ns;
        }
    }
}

fn host(tuning_name: &str) -> HostConfig {
    let mut h = HostConfig::with_mtu(MTU);
    if tuning_name == "bsd" {
        h.stack.tuning = Tuning::bsd();
        h.nic.copy_mode = CopyMode::Pio;
    } else {
        h.stack.tuning = Tuning::fast();
        h.nic.copy_mode = CopyMode::Dma;
    }
    h.nic.rx_queue_depth = 1024;
    h.nic.tx_queue_depth = 1024;
    h
}

/// Per-message category times for UDP at each size of `sizes`.
fn measure_udp(
    tuning: &'static str,
    sizes: &[usize],
    n: usize,
) -> Result<Vec<BTreeMap<&'static str, f64>>, String> {
    let h = host(tuning);
    let mut p = Pair::new(h.clone(), h).map_err(|e| format!("memory link: {e}"))?;
    let clock = RealClock::new();
    let rx = p.b.udp_open();
    p.b.udp_bind(rx, Ipv4Address::UNSPECIFIED, 9)
        .map_err(|e| e.to_string())?;
    p.b.udp_set_recv_buffer(rx, 16 << 20)
        .map_err(|e| e.to_string())?;
    let tx = p.a.udp_open();
    let mut buf = vec![0u8; 65536];
    let mut out = Vec::new();
    for &size in sizes {
        let msg: Vec<u8> = (0..size).map(|i| (i * 13 + 1) as u8).collect();
        let one = |p: &mut Pair| -> Result<(), String> {
            p.a.udp_send_to(tx, &msg, ADDR_B, 9)
                .map_err(|e| format!("UDP send of {size} bytes: {e}"))?;
            for _ in 0..10_000 {
                let now = clock.now();
                p.a.poll(now);
                p.b.poll(now);
                if p.b.udp_recv_from(rx, &mut buf).is_ok() {
                    return Ok(());
                }
            }
            Err(format!("UDP: a {size}-byte datagram never arrived"))
        };
        // Warm-up (ARP, pools, caches), then the measured messages.
        let totals = probed(&mut p, n, one)?;
        out.push(totals);
    }
    Ok(out)
}

/// `one` message exchange after [`WARM_UP`] unprobed ones, `n` times with both hosts'
/// ledgers probing every message: the ns per message by category, both hosts together.
fn probed(
    p: &mut Pair,
    n: usize,
    mut one: impl FnMut(&mut Pair) -> Result<(), String>,
) -> Result<BTreeMap<&'static str, f64>, String> {
    for _ in 0..WARM_UP {
        one(p)?;
    }
    for l in [p.a.ledger(), p.b.ledger()] {
        l.clear();
        l.set_sample_every(1);
    }
    for _ in 0..n {
        one(p)?;
    }
    let mut totals = BTreeMap::new();
    for l in [p.a.ledger(), p.b.ledger()] {
        category_totals(&l.snapshot(), &mut totals);
        l.set_sample_every(0);
    }
    totals.values_mut().for_each(|v| *v /= n as f64);
    Ok(totals)
}

/// Per-message category times for TCP at each size of `sizes`, one connection.
fn measure_tcp(
    tuning: &'static str,
    sizes: &[usize],
    n: usize,
) -> Result<Vec<BTreeMap<&'static str, f64>>, String> {
    let h = host(tuning);
    let mut p = Pair::new(h.clone(), h).map_err(|e| format!("memory link: {e}"))?;
    let clock = RealClock::new();
    let (c, s) = super::connect_stacks(
        &mut p.a,
        &mut p.b,
        5002,
        &clock,
        std::time::Duration::from_secs(2),
    )
    .map_err(|e| format!("TCP: {e}"))?;
    p.a.tcp_set_nodelay(c, true).map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; 65536];
    let mut out = Vec::new();
    for &size in sizes {
        let msg: Vec<u8> = (0..size).map(|i| (i * 13 + 1) as u8).collect();
        let one = |p: &mut Pair| -> Result<(), String> {
            let (mut sent, mut got) = (0, 0);
            for _ in 0..200_000 {
                if sent < size {
                    sent += p.a.tcp_send(c, &msg[sent..]).unwrap_or(0);
                }
                let now = clock.now();
                p.a.poll(now);
                p.b.poll(now);
                while let Ok(k) = p.b.tcp_recv(s, &mut buf) {
                    if k == 0 {
                        break;
                    }
                    got += k;
                }
                if got >= size {
                    return Ok(());
                }
            }
            Err(format!(
                "TCP: a {size}-byte message did not arrive ({got} bytes did)"
            ))
        };
        let totals = probed(&mut p, n, one)?;
        out.push(totals);
    }
    Ok(out)
}

/// Runs both protocols and both tunings over `dist`, `n` messages per size.
pub fn run(
    dist: Distribution,
    n: usize,
    mut progress: impl FnMut(&str),
) -> Result<Results, String> {
    let n = n.max(1);
    let mut rows = Vec::new();
    let mut aggregates = Vec::new();
    for tuning in ["bsd", "fast"] {
        for protocol in ["tcp", "udp"] {
            let weights = if protocol == "tcp" {
                &dist.tcp
            } else {
                &dist.udp
            };
            if weights.is_empty() {
                continue;
            }
            progress(&format!("{tuning}, {protocol}"));
            let sizes: Vec<usize> = weights.keys().copied().collect();
            let measured = if protocol == "tcp" {
                measure_tcp(tuning, &sizes, n)?
            } else {
                measure_udp(tuning, &sizes, n)?
            };
            let mut weighted: BTreeMap<&'static str, f64> =
                Category::ALL.iter().map(|c| (c.name(), 0.0)).collect();
            for (&size, m) in sizes.iter().zip(measured) {
                let weight = weights[&size];
                let mut by_category: BTreeMap<&'static str, f64> =
                    Category::ALL.iter().map(|c| (c.name(), 0.0)).collect();
                by_category.extend(m);
                let touching = |dt: bool| {
                    Category::ALL
                        .iter()
                        .filter(|c| c.touches_data() == dt)
                        .map(|c| by_category[c.name()])
                        .sum::<f64>()
                };
                for (k, v) in &by_category {
                    *weighted.entry(k).or_insert(0.0) += weight * v;
                }
                rows.push(SizeRow {
                    tuning,
                    protocol,
                    size,
                    weight,
                    ns_per_message: by_category.values().sum(),
                    data_touching_ns: touching(true),
                    non_data_touching_ns: touching(false),
                    by_category,
                });
            }
            let total: f64 = weighted.values().sum();
            let share = |v: f64| if total > 0.0 { v / total } else { 0.0 };
            let dt: f64 = Category::ALL
                .iter()
                .filter(|c| c.touches_data())
                .map(|c| weighted[c.name()])
                .sum();
            aggregates.push(Aggregate {
                tuning,
                protocol,
                by_category_share: weighted.iter().map(|(k, v)| (*k, share(*v))).collect(),
                data_touching_share: share(dt),
                non_data_touching_share: share(total - dt),
                paper_non_data_touching_share: PAPER_NON_DATA_TOUCHING
                    .iter()
                    .find(|p| p.0 == protocol)
                    .map_or(f64::NAN, |p| p.1),
                mean_ns_per_message: total,
            });
        }
    }
    Ok(Results {
        experiment: "mix",
        mtu: MTU,
        messages_per_size: n,
        distribution: dist,
        rows,
        aggregates,
    })
}

fn pct(x: f64) -> String {
    format!("{:.0}%", x * 100.0)
}

pub fn tables(r: &Results) -> Vec<Table> {
    let mut out = Vec::new();
    let names: Vec<&str> = Category::ALL.iter().map(|c| c.name()).collect();
    for tuning in ["bsd", "fast"] {
        let mut header = vec!["protocol", "size", "weight", "total µs"];
        header.extend(&names);
        header.push("non-data-touching");
        let mut t = Table::new(
            format!("Processing per message by paper 001's categories, µs, both hosts ({tuning}; paper 001 Figs. 6-12)"),
            &header,
        );
        for row in r.rows.iter().filter(|x| x.tuning == tuning) {
            let mut cells = vec![
                row.protocol.to_string(),
                row.size.to_string(),
                pct(row.weight),
                format!("{:.2}", row.ns_per_message / 1e3),
            ];
            for n in &names {
                cells.push(format!(
                    "{:.2}",
                    row.by_category.get(n).copied().unwrap_or(0.0) / 1e3
                ));
            }
            let total = row.ns_per_message;
            cells.push(if total > 0.0 {
                pct(row.non_data_touching_ns / total)
            } else {
                "-".into()
            });
            t.row(cells);
        }
        t.note(format!(
            "MTU {}; {} messages per size; {tuning}: {}",
            r.mtu,
            r.messages_per_size,
            if tuning == "bsd" {
                "Tuning::bsd(), PIO NIC"
            } else {
                "Tuning::fast(), DMA NIC"
            }
        ));
        out.push(t);
    }
    let mut a = Table::new(
        "Data-touching vs non-data-touching under the size mix (paper 001 §6: 001_bb2453a0cb3f5669.txt)",
        &[
            "tuning",
            "protocol",
            "mean µs/msg",
            "data-touching",
            "non-data-touching",
            "paper non-data-touching",
        ],
    );
    for g in &r.aggregates {
        a.row(vec![
            g.tuning.to_string(),
            g.protocol.to_string(),
            format!("{:.2}", g.mean_ns_per_message / 1e3),
            pct(g.data_touching_share),
            pct(g.non_data_touching_share),
            pct(g.paper_non_data_touching_share),
        ]);
    }
    a.note(format!("distribution: {}", r.distribution.source));
    if r.distribution.samples > 0 {
        a.note(format!(
            "{} samples, {} skipped; sizes counted at the nearest of {:?}",
            r.distribution.samples, r.distribution.skipped, GRID
        ));
    }
    let w = |m: &BTreeMap<usize, f64>| {
        m.iter()
            .map(|(s, x)| format!("{s} B {}", pct(*x)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    a.note(format!("TCP sizes: {}", w(&r.distribution.tcp)));
    a.note(format!("UDP sizes: {}", w(&r.distribution.udp)));
    out.push(a);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_model_is_bimodal_and_sums_to_one() {
        for d in [DEFAULT_TCP, DEFAULT_UDP] {
            let sum: f64 = d.iter().map(|x| x.1).sum();
            assert!((sum - 1.0).abs() < 1e-9);
            let small: f64 = d.iter().filter(|x| x.0 <= 128).map(|x| x.1).sum();
            assert!(small >= 0.5, "small messages dominate");
            assert!(d.iter().all(|x| GRID.contains(&x.0)));
        }
        let fragmenting: f64 = DEFAULT_UDP
            .iter()
            .filter(|x| x.0 > MTU - 28)
            .map(|x| x.1)
            .sum();
        assert!(
            fragmenting < 0.10,
            "paper: fewer than 10% of UDP messages fragment"
        );
    }

    #[test]
    fn sizes_snap_to_the_nearest_grid_point() {
        assert_eq!(nearest_grid(1), 64);
        assert_eq!(nearest_grid(100), 128);
        assert_eq!(nearest_grid(1400), 1460);
        assert_eq!(nearest_grid(9000), 8192);
        assert_eq!(nearest_grid(1 << 20), 65000);
    }

    #[test]
    fn csv_lines_give_sizes_and_bad_lines_are_counted() {
        let dir = std::env::temp_dir().join(format!("mix-csv-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("sizes.csv");
        std::fs::write(&f, "size\n64\n# c\n\ntcp,8192\nudp,100\nudp,0\nfoo,9\n").unwrap();
        let d = Distribution::from_csv(&f).unwrap();
        assert_eq!(d.samples, 4);
        assert_eq!(d.skipped, 3);
        assert_eq!(d.tcp, BTreeMap::from([(64, 0.5), (8192, 0.5)]));
        assert_eq!(d.udp, BTreeMap::from([(64, 0.5), (128, 0.5)]));
        std::fs::write(&f, "nothing\n").unwrap();
        assert!(Distribution::from_csv(&f).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn payload_sizes_come_from_the_headers() {
        let mut frame = vec![0u8; 14 + 20 + 20 + 100];
        frame[12] = 0x08;
        frame[14] = 0x45;
        frame[16..18].copy_from_slice(&140u16.to_be_bytes());
        frame[23] = 6;
        frame[34 + 12] = 5 << 4;
        assert_eq!(payload_size(&frame), Some((true, 100)));
        frame[23] = 17;
        frame[34 + 4..34 + 6].copy_from_slice(&120u16.to_be_bytes());
        assert_eq!(payload_size(&frame), Some((false, 112)));
        frame[12] = 0x86; // not IPv4
        assert_eq!(payload_size(&frame), None);
        assert_eq!(payload_size(&frame[..10]), None);
    }

    #[test]
    fn a_tiny_run_gives_shares_that_add_up() {
        let dist = Distribution {
            source: "test".into(),
            tcp: BTreeMap::from([(64, 0.5), (4096, 0.5)]),
            udp: BTreeMap::from([(64, 0.5), (8192, 0.5)]),
            samples: 0,
            skipped: 0,
        };
        let r = run(dist, 3, |_| {}).unwrap();
        assert_eq!(r.aggregates.len(), 4);
        for g in &r.aggregates {
            assert!(
                (g.data_touching_share + g.non_data_touching_share - 1.0).abs() < 1e-9,
                "{g:?}"
            );
            assert!(g.mean_ns_per_message > 0.0);
        }
        // The 1993 tuning checksums every byte: an 8 KiB datagram touches its data.
        let big = r
            .rows
            .iter()
            .find(|x| x.tuning == "bsd" && x.protocol == "udp" && x.size == 8192)
            .unwrap();
        assert!(big.by_category["Checksum"] > 0.0 && big.by_category["DataMove"] > 0.0);
        assert_eq!(tables(&r).len(), 3);
    }
}
