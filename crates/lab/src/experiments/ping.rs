//! `probestack lab ping`: two stacks in one process over the memory link; A pings B at a
//! sweep of sizes (some large enough to fragment) and the lab prints round-trip times and,
//! from B's ledger, where B's time went, by layer.
//!
//! Both stacks run on this one thread, polled in turn with the real clock, so a round trip
//! is the processing time of both hosts plus the polling loop: there is no wire latency.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant as WallInstant;

use probestack::driver::{PcapMode, PcapWriter};
use probestack::probe::{Counter, Layer};
use probestack::sim::{HostConfig, Pair, ADDR_B};
use probestack::time::{Clock, RealClock};
use serde::Serialize;

use crate::bench::median;
use crate::table::Table;

/// The default sweep: small, one full Ethernet frame, one byte more (two fragments), and
/// up to the largest ICMP payload.
pub const SIZES: [usize; 8] = [56, 512, 1472, 1473, 4000, 8972, 30000, 65507];

#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub size: usize,
    pub mtu: usize,
    pub pings: usize,
    pub replies: usize,
    /// Frames B received per ping (fragments).
    pub frames_per_ping: f64,
    pub rtt_min_us: f64,
    pub rtt_median_us: f64,
    /// B's processing per ping, by layer, in microseconds.
    pub b_by_layer_us: BTreeMap<&'static str, f64>,
    /// B's host time per ping no probe covered.
    pub b_unaccounted_us: f64,
    /// B's NIC model's work per ping (CRC, wire): real time, but the device's.
    pub b_device_us: f64,
    /// The probes' own measured cost per ping on B (every message is probed here).
    pub b_probe_overhead_us: f64,
    /// The share of B's processing (host time less the probes' cost) the probes account for.
    pub b_accounted_share: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Results {
    pub experiment: &'static str,
    pub rows: Vec<Row>,
}

/// Runs `count` pings (after three of warm-up) at each size.
pub fn run(
    sizes: &[usize],
    mtu: usize,
    count: usize,
    pcap: Option<&Path>,
) -> Result<Results, String> {
    let host = HostConfig::with_mtu(mtu);
    let mut pair = match pcap {
        Some(path) => {
            let file = std::fs::File::create(path)
                .map_err(|e| format!("creating {}: {e}", path.display()))?;
            let out = std::io::BufWriter::new(file);
            Pair::with_devices(
                host.clone(),
                host,
                move |n| Box::new(PcapWriter::new(n, out, PcapMode::Both).expect("pcap header")),
                |n| Box::new(n),
            )
        }
        None => Pair::new(host.clone(), host),
    }
    .map_err(|e| format!("memory link: {e}"))?;
    pair.b.ledger().set_sample_every(1);
    let clock = RealClock::new();
    let mut rows = Vec::new();
    let mut seq: u16 = 0;
    for &size in sizes {
        if size > probestack::ip::MAX_PAYLOAD - 8 {
            return Err(format!("size {size}: the largest ICMP payload is 65507"));
        }
        let data: Vec<u8> = (0..size).map(|i| i as u8).collect();
        let mut rtts = Vec::with_capacity(count);
        let mut replies = 0;
        let frames_before = pair.b.ledger().counters().get(Counter::DriverFramesIn);
        for i in 0..count + 3 {
            if i == 3 {
                pair.b.ledger().clear();
            }
            seq = seq.wrapping_add(1);
            let start = WallInstant::now();
            pair.a
                .ping(ADDR_B, 0x1993, seq, &data, clock.now())
                .map_err(|e| format!("ping: {e}"))?;
            let mut got = false;
            // A reply that does not come within a second of polling is lost.
            while start.elapsed().as_secs() < 1 {
                let now = clock.now();
                pair.a.poll(now);
                pair.b.poll(now);
                if let Some(r) = pair.a.take_echo_reply() {
                    got = r.seq_no == seq && r.data == data;
                    if got {
                        break;
                    }
                }
            }
            if got && i >= 3 {
                replies += 1;
                rtts.push(start.elapsed().as_secs_f64() * 1e6);
            }
        }
        let frames = pair.b.ledger().counters().get(Counter::DriverFramesIn) - frames_before;
        let snap = pair.b.ledger().snapshot();
        let merged = snap.merged();
        // The ledger's views are per message (per frame here); scale them to per ping.
        let per_ping = merged.messages as f64 / count.max(1) as f64;
        let b_by_layer_us = Layer::ALL
            .iter()
            .map(|l| {
                let ns = merged.by_layer().get(l.name()).copied().unwrap_or(0.0);
                (l.name(), ns * per_ping / 1e3)
            })
            .collect();
        rows.push(Row {
            size,
            mtu,
            pings: count,
            replies,
            frames_per_ping: frames as f64 / (count + 3) as f64,
            rtt_min_us: rtts.iter().copied().fold(f64::INFINITY, f64::min),
            rtt_median_us: if rtts.is_empty() {
                0.0
            } else {
                median(&mut rtts)
            },
            b_by_layer_us,
            b_unaccounted_us: merged.unaccounted_ns() * per_ping / 1e3,
            b_device_us: merged.device_ns_per_message() * per_ping / 1e3,
            b_probe_overhead_us: merged.probe_overhead_ns * per_ping / 1e3,
            b_accounted_share: merged.accounted_share(),
        });
    }
    Ok(Results {
        experiment: "ping",
        rows,
    })
}

pub fn tables(r: &Results) -> Vec<Table> {
    let mut t = Table::new(
        "ICMP echo between two stacks in one process (memory link, one thread)",
        &[
            "size",
            "MTU",
            "frames",
            "replies",
            "RTT min µs",
            "RTT med µs",
            "B: ip µs",
            "link µs",
            "driver µs",
            "unacc. µs",
            "probes µs",
            "accounted",
            "B NIC µs",
        ],
    );
    for row in &r.rows {
        let l = |k: &str| format!("{:.2}", row.b_by_layer_us.get(k).copied().unwrap_or(0.0));
        t.row(vec![
            row.size.to_string(),
            row.mtu.to_string(),
            format!("{:.1}", row.frames_per_ping),
            format!("{}/{}", row.replies, row.pings),
            format!("{:.1}", row.rtt_min_us),
            format!("{:.1}", row.rtt_median_us),
            l("ip"),
            l("link"),
            l("driver"),
            format!("{:.2}", row.b_unaccounted_us),
            format!("{:.2}", row.b_probe_overhead_us),
            format!("{:.0}%", row.b_accounted_share * 100.0),
            format!("{:.2}", row.b_device_us),
        ]);
    }
    t.note("frames: frames B received per ping (fragments of the request, plus ARP once)");
    t.note("B's columns: B's processing per ping from its ledger (every message probed), echo request in and reply out");
    t.note("probes: the probes' own measured cost (every message probed); accounted: probed time / (B's host time less that cost)");
    t.note("B NIC: the work of B's NIC model (CRC-32, the wire) during B's messages: device time, not host time");
    vec![t]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_sweep_gets_every_reply_and_a_breakdown() {
        let r = run(&[56, 4000], 1500, 5, None).unwrap();
        assert_eq!(r.rows.len(), 2);
        for row in &r.rows {
            assert_eq!(row.replies, 5, "{row:?}");
            assert!(row.rtt_median_us > 0.0);
            assert!(row.b_by_layer_us["ip"] > 0.0);
        }
        assert!(
            r.rows[1].frames_per_ping >= 3.0,
            "4000 bytes at MTU 1500 fragment"
        );
        assert!(tables(&r)[0].to_text().contains("4000"));
    }

    #[test]
    fn oversize_is_an_error() {
        assert!(run(&[70000], 1500, 1, None).is_err());
    }
}
