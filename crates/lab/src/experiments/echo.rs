//! `probestack lab echo`: the experiment of paper 000 (Kay & Pasquale 1993). Host A sends
//! a UDP message, host B echoes it back; 40 sizes from 1 to 8192 bytes, 100 repetitions
//! each, on a link with the FDDI MTU of 4352 so the larger messages fragment as in the
//! paper. Everything is measured on B, the echoing host, from its ledger: per message, by
//! operation (paper 000's CHECKSUM; COPY as user copy, device copy, cache clear;
//! MALLOC/FREE; OTHER) and by layer (socket, UDP, IP, link, driver), combined and send vs
//! receive, for `Tuning::bsd()` on a PIO NIC and `Tuning::fast()` on a DMA NIC.
//!
//! One ledger message on B spans the whole echo: the frames' receive processing (every
//! fragment), the application's receive, and its send; the application's own loop is not
//! in it.

use std::collections::BTreeMap;

use probestack::driver::CopyMode;
use probestack::probe::{Layer, Side, SnapshotBucket};
use probestack::sim::{HostConfig, Pair, ADDR_B};
use probestack::time::{Clock, RealClock};
use probestack::tuning::Tuning;
use probestack::wire::Ipv4Address;
use serde::Serialize;

use crate::table::Table;

/// FDDI's MTU (paper 000).
pub const MTU: usize = 4352;

/// Paper 000's 40 sizes between 1 and 8192 bytes: 1, then 39 evenly spaced to 8192.
pub fn sizes() -> Vec<usize> {
    std::iter::once(1)
        .chain((1..=39).map(|i| (8192 * i + 19) / 39))
        .collect()
}

/// A few of them, for `--quick`.
pub fn quick_sizes() -> Vec<usize> {
    vec![1, 210, 1050, 2101, 4201, 4412, 6302, 8192]
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Breakdown {
    /// checksum, copy, malloc_free, other (ns per message).
    pub by_operation: BTreeMap<&'static str, f64>,
    /// user_copy, device_copy, cache_clear (ns per message).
    pub copy_components: BTreeMap<&'static str, f64>,
    /// socket, udp, ip, link, driver (ns per message).
    pub by_layer: BTreeMap<&'static str, f64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub tuning: &'static str,
    pub size: usize,
    pub echoes: u64,
    /// B's processing per echo: host time less the probes' own cost.
    pub total_ns: f64,
    pub unaccounted_ns: f64,
    pub by_operation: BTreeMap<&'static str, f64>,
    pub copy_components: BTreeMap<&'static str, f64>,
    pub by_layer: BTreeMap<&'static str, f64>,
    pub send: Breakdown,
    pub receive: Breakdown,
}

#[derive(Clone, Debug, Serialize)]
pub struct Results {
    pub experiment: &'static str,
    pub mtu: usize,
    pub repetitions: usize,
    pub rows: Vec<Row>,
}

fn breakdown(b: &SnapshotBucket) -> Breakdown {
    let mut by_operation: BTreeMap<&'static str, f64> =
        ["checksum", "copy", "malloc_free", "other"]
            .map(|k| (k, 0.0))
            .into();
    by_operation.extend(b.by_coarse000());
    let c = b.by_class000();
    let copy_components = ["user_copy", "device_copy", "cache_clear"]
        .map(|k| (k, c.get(k).copied().unwrap_or(0.0)))
        .into();
    let mut by_layer: BTreeMap<&'static str, f64> = [
        Layer::Socket,
        Layer::Udp,
        Layer::Ip,
        Layer::Link,
        Layer::Driver,
    ]
    .map(|l| (l.name(), 0.0))
    .into();
    for (k, v) in b.by_layer() {
        if let Some(x) = by_layer.get_mut(k) {
            *x = v;
        }
    }
    Breakdown {
        by_operation,
        copy_components,
        by_layer,
    }
}

/// One tuning's run over the sizes.
fn run_tuning(
    name: &'static str,
    tuning: Tuning,
    sizes: &[usize],
    reps: usize,
) -> Result<Vec<Row>, String> {
    let mut host = HostConfig::with_mtu(MTU);
    host.stack.tuning = tuning;
    host.nic.copy_mode = if name == "bsd" {
        CopyMode::Pio
    } else {
        CopyMode::Dma
    };
    let mut p = Pair::new(host.clone(), host).map_err(|e| format!("memory link: {e}"))?;
    let clock = RealClock::new();
    let echo = p.b.udp_open();
    p.b.udp_bind(echo, Ipv4Address::UNSPECIFIED, 7)
        .map_err(|e| e.to_string())?;
    let client = p.a.udp_open();
    p.a.udp_connect(client, ADDR_B, 7)
        .map_err(|e| e.to_string())?;
    let ledger_b = p.b.ledger();
    ledger_b.set_sample_every(1);
    let mut buf_a = vec![0u8; 9000];
    let mut buf_b = vec![0u8; 9000];
    let mut rows = Vec::new();
    for &size in sizes {
        let msg: Vec<u8> = (0..size).map(|i| (i * 7) as u8).collect();
        // Three warm-up echoes, then the measured ones.
        for rep in 0..reps + 3 {
            if rep == 3 {
                p.b.ledger().clear();
            }
            p.a.udp_send(client, &msg).map_err(|e| e.to_string())?;
            p.a.poll(clock.now());
            // B: one ledger message for the whole echo.
            let m = p.b.ledger().begin_message(size);
            let mut echoed = false;
            for _ in 0..1000 {
                p.b.poll(clock.now());
                if let Ok(r) = p.b.udp_recv_from(echo, &mut buf_b) {
                    let _ = p.b.udp_send_to(echo, &buf_b[..r.len], r.from.0, r.from.1);
                    echoed = true;
                    break;
                }
                p.a.poll(clock.now());
            }
            p.b.ledger().end_message(m);
            if !echoed {
                return Err(format!("{name}: size {size}: B never got the message"));
            }
            let mut back = false;
            for _ in 0..1000 {
                p.a.poll(clock.now());
                p.b.poll(clock.now());
                if let Ok(r) = p.a.udp_recv_from(client, &mut buf_a) {
                    if buf_a[..r.len] != msg[..] {
                        return Err(format!("{name}: size {size}: the echo came back altered"));
                    }
                    back = true;
                    break;
                }
            }
            if !back {
                return Err(format!("{name}: size {size}: the echo never came back"));
            }
        }
        let snap = p.b.ledger().snapshot();
        let Some(b) = snap.bucket(size as u32) else {
            return Err(format!("{name}: size {size}: nothing in B's ledger"));
        };
        let all = breakdown(b);
        rows.push(Row {
            tuning: name,
            size,
            echoes: b.messages,
            total_ns: b.stack_ns_per_message(),
            unaccounted_ns: b.unaccounted_ns(),
            by_operation: all.by_operation,
            copy_components: all.copy_components,
            by_layer: all.by_layer,
            send: breakdown(&b.side(Side::Send)),
            receive: breakdown(&b.side(Side::Receive)),
        });
    }
    Ok(rows)
}

/// Runs both tunings.
pub fn run(
    sizes: &[usize],
    reps: usize,
    mut progress: impl FnMut(&str),
) -> Result<Results, String> {
    let mut rows = Vec::new();
    for (name, t) in [("bsd", Tuning::bsd()), ("fast", Tuning::fast())] {
        progress(name);
        rows.extend(run_tuning(name, t, sizes, reps.max(1))?);
    }
    Ok(Results {
        experiment: "echo",
        mtu: MTU,
        repetitions: reps,
        rows,
    })
}

fn us(ns: f64) -> String {
    format!("{:.2}", ns / 1e3)
}

pub fn tables(r: &Results) -> Vec<Table> {
    let mut out = Vec::new();
    for tuning in ["bsd", "fast"] {
        let mut t = Table::new(
            format!("UDP echo on B, µs per message by operation and by layer ({tuning}; paper 000 Figures 1, 3, 10)"),
            &[
                "size", "total", "checksum", "user copy", "dev. copy", "malloc/free", "other", "socket",
                "udp", "ip", "link", "driver", "unacc.",
            ],
        );
        for row in r.rows.iter().filter(|x| x.tuning == tuning) {
            let op = |k: &str| us(row.by_operation.get(k).copied().unwrap_or(0.0));
            let cp = |k: &str| us(row.copy_components.get(k).copied().unwrap_or(0.0));
            let l = |k: &str| us(row.by_layer.get(k).copied().unwrap_or(0.0));
            t.row(vec![
                row.size.to_string(),
                us(row.total_ns),
                op("checksum"),
                cp("user_copy"),
                cp("device_copy"),
                op("malloc_free"),
                op("other"),
                l("socket"),
                l("udp"),
                l("ip"),
                l("link"),
                l("driver"),
                us(row.unaccounted_ns),
            ]);
        }
        t.note(format!(
            "MTU {} (FDDI): sizes above {} fragment; {} echoes per size after 3 warm-ups; bsd uses a PIO NIC, fast a DMA NIC",
            r.mtu,
            r.mtu - 28,
            r.repetitions
        ));
        t.note("paper 000: checksum ≈0.330 µs/byte and nearly half of the time at 8192 B; copy ≈0.175 µs/byte; UDP the most expensive layer, then DRIVER, then SOCKET");
        out.push(t);
    }
    // Slopes: ns per byte between the smallest and largest size.
    let mut s = Table::new(
        "Per-byte slopes on B, ns/byte (1 → 8192 bytes; paper 000: checksum 330, copy 175)",
        &["tuning", "checksum", "copy", "total"],
    );
    for tuning in ["bsd", "fast"] {
        let rows: Vec<&Row> = r.rows.iter().filter(|x| x.tuning == tuning).collect();
        if let (Some(a), Some(b)) = (rows.first(), rows.last()) {
            let d = (b.size - a.size).max(1) as f64;
            let slope = |f: &dyn Fn(&Row) -> f64| format!("{:.3}", (f(b) - f(a)) / d);
            s.row(vec![
                tuning.to_string(),
                slope(&|x| x.by_operation.get("checksum").copied().unwrap_or(0.0)),
                slope(&|x| x.by_operation.get("copy").copied().unwrap_or(0.0)),
                slope(&|x| x.total_ns),
            ]);
        }
    }
    out.push(s);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forty_sizes_from_1_to_8192() {
        let s = sizes();
        assert_eq!(s.len(), 40);
        assert_eq!((s[0], s[39]), (1, 8192));
        assert!(s.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn a_tiny_run_has_every_field_the_json_promises() {
        let r = run(&[1, 5000], 3, |_| {}).unwrap();
        assert_eq!(r.rows.len(), 4);
        let v = serde_json::to_value(&r).unwrap();
        for row in v["rows"].as_array().unwrap() {
            for k in ["tuning", "size", "total_ns", "unaccounted_ns"] {
                assert!(!row[k].is_null(), "{k}");
            }
            for k in ["checksum", "copy", "malloc_free", "other"] {
                assert!(row["by_operation"][k].is_number(), "{k}");
                assert!(row["send"]["by_operation"][k].is_number());
                assert!(row["receive"]["by_operation"][k].is_number());
            }
            for k in ["socket", "udp", "ip", "link", "driver"] {
                assert!(row["by_layer"][k].is_number(), "{k}");
            }
        }
        // The 1993 tuning checksums every byte; at 5000 bytes that shows.
        let bsd5000 = r
            .rows
            .iter()
            .find(|x| x.tuning == "bsd" && x.size == 5000)
            .unwrap();
        assert!(bsd5000.by_operation["checksum"] > 0.0);
        assert!(
            bsd5000.copy_components["device_copy"] > 0.0,
            "PIO copies on the bsd NIC"
        );
        assert!(!tables(&r).is_empty());
    }
}
