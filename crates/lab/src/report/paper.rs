//! Paper vs ours: for each reproduced table, the paper's figure (file and table or figure
//! number, from /work/shared/papers/numbers.md) beside ours and one sentence saying
//! whether the finding holds here. Every sentence that compares is computed from the
//! measured data: the verdict and the numbers in it come from the results, never from
//! text written in advance.

use crate::experiments::{bulk, checksum, cpu, discard, echo, mix, throughput};
use crate::table::Table;

const P000: &str = "000_3e29a2c865aeba9b.txt";
const P001: &str = "001_bb2453a0cb3f5669.txt";
const P002: &str = "002_8f0b153fbb2a5c8a.txt";
const P004: &str = "004_0b36c0caef4fc380.txt";

/// One finding: the paper's figure, ours, and the reading.
#[derive(Clone, Debug)]
pub struct Comparison {
    pub finding: String,
    /// Paper file and table or figure.
    pub source: String,
    pub paper: String,
    pub ours: String,
    pub reading: String,
}

/// The comparisons as a table titled for the section.
pub fn table(section: &str, c: &[Comparison]) -> Table {
    let mut t = Table::new(
        format!("Paper vs ours: {section}"),
        &["finding", "source", "paper", "this machine", "reading"],
    );
    for x in c {
        t.row(vec![
            x.finding.clone(),
            x.source.clone(),
            x.paper.clone(),
            x.ours.clone(),
            x.reading.clone(),
        ]);
    }
    t
}

fn holds(yes: bool) -> &'static str {
    if yes {
        "holds"
    } else {
        "does not hold"
    }
}

fn pct(x: f64) -> String {
    format!("{:.0}%", x * 100.0)
}

/// The row of `sizes` nearest `size`.
fn nearest<T>(rows: &[T], size: usize, key: impl Fn(&T) -> usize) -> Option<&T> {
    rows.iter().min_by_key(|r| key(r).abs_diff(size))
}

pub fn checksum(r: &checksum::Results) -> Vec<Comparison> {
    let mut out = Vec::new();
    if let Some(row) = nearest(&r.rows, 1500, |x| x.size) {
        let best = row.kernels.get("best").copied().unwrap_or(f64::NAN);
        let reference = row.kernels.get("rfc1071").copied().unwrap_or(f64::NAN);
        let ratio = best / reference;
        out.push(Comparison {
            finding: format!("faster checksum vs the reference loop ({} B)", row.size),
            source: format!("{P000} §4.1"),
            paper: "more than 2x".into(),
            ours: format!("{ratio:.1}x ({} vs rfc1071)", r.best_kernel),
            reading: format!(
                "The finding {}: the fast checksum ({}) is {ratio:.1}x the RFC 1071 reference here vs just over 2x in the paper.",
                holds(ratio > 2.0),
                r.best_kernel
            ),
        });
        let extra = row.fused_ns_per_byte / row.memcpy_ns_per_byte - 1.0;
        out.push(Comparison {
            finding: format!("copy+checksum vs copy, ns/byte ({} B)", row.size),
            source: format!("{P002} Table 8"),
            paper: "+0% to +20% (e.g. DECstation 5000/133 82.5 vs 99.5)".into(),
            ours: format!(
                "{:.3} vs {:.3} ({:+.0}%)",
                row.memcpy_ns_per_byte,
                row.fused_ns_per_byte,
                extra * 100.0
            ),
            reading: if extra <= 0.25 {
                format!("The finding holds: checksumming while copying costs {:+.0}% over the copy alone here, within the paper's 0% to 20% give or take.", extra * 100.0)
            } else {
                format!("The finding does not hold: checksumming while copying costs {:+.0}% over the copy alone here, where the paper found 0% to 20%; memcpy is much faster than the fused loop on this CPU.", extra * 100.0)
            },
        });
    }
    out
}

/// (checksum slope, copy slope) in ns/byte between the smallest and largest size.
fn slopes(rows: &[&echo::Row]) -> Option<(f64, f64)> {
    let (a, b) = (rows.first()?, rows.last()?);
    let d = b.size.checked_sub(a.size).filter(|d| *d > 0)? as f64;
    let get = |x: &echo::Row, k: &str| x.by_operation.get(k).copied().unwrap_or(0.0);
    Some((
        (get(b, "checksum") - get(a, "checksum")) / d,
        (get(b, "copy") - get(a, "copy")) / d,
    ))
}

pub fn echo(r: &echo::Results) -> Vec<Comparison> {
    let mut out = Vec::new();
    let bsd: Vec<&echo::Row> = r.rows.iter().filter(|x| x.tuning == "bsd").collect();
    if let Some((ck, cp)) = slopes(&bsd) {
        out.push(Comparison {
            finding: "checksum and copy cost per byte (bsd)".into(),
            source: format!("{P000} Figs. 1-2"),
            paper: "checksum 330 ns/B, copy 175 ns/B".into(),
            ours: format!("checksum {ck:.2} ns/B, copy {cp:.2} ns/B"),
            reading: format!(
                "The ordering {}: the checksum costs {:.1}x the copy per byte here vs 1.9x in the paper, and both are about {:.0}x cheaper per byte than on the DECstation.",
                if ck > cp { "holds" } else { "does not hold" },
                ck / cp.max(1e-9),
                (330.0 + 175.0) / (ck + cp).max(1e-9)
            ),
        });
    }
    if let Some(big) = bsd.last() {
        let total = big.total_ns.max(1e-9);
        let ck = big.by_operation.get("checksum").copied().unwrap_or(0.0) / total;
        out.push(Comparison {
            finding: format!("checksum share of processing at {} B (bsd)", big.size),
            source: format!("{P000} §3"),
            paper: "almost 50%".into(),
            ours: pct(ck),
            reading: format!(
                "The finding {}: the checksum takes {} of the echo's processing at {} B here vs almost half in the paper.",
                holds((0.35..=0.65).contains(&ck)),
                pct(ck),
                big.size
            ),
        });
        let cc = &big.copy_components;
        let sum: f64 = cc.values().sum::<f64>().max(1e-9);
        let share = |k: &str| cc.get(k).copied().unwrap_or(0.0) / sum;
        let (user, dev, clear) = (
            share("user_copy"),
            share("device_copy"),
            share("cache_clear"),
        );
        out.push(Comparison {
            finding: format!("COPY components at {} B (bsd, PIO NIC)", big.size),
            source: format!("{P000} Figs. 3, 8-9"),
            paper: "user 35%, device 50%, cache clear 10%".into(),
            ours: format!("user {}, device {}, cache clear {}", pct(user), pct(dev), pct(clear)),
            reading: format!(
                "The finding {}: the device copy is {} the largest part of COPY here (user {}, device {}).",
                holds(dev >= user && dev >= clear),
                if dev >= user && dev >= clear { "still" } else { "no longer" },
                pct(user),
                pct(dev)
            ),
        });
        let mut layers: Vec<(&str, f64)> = big.by_layer.iter().map(|(k, v)| (*k, *v)).collect();
        layers.sort_by(|a, b| b.1.total_cmp(&a.1));
        let order: Vec<&str> = layers.iter().take(3).map(|l| l.0).collect();
        out.push(Comparison {
            finding: format!("most expensive layers at {} B (bsd)", big.size),
            source: format!("{P000} Fig. 10"),
            paper: "UDP, then DRIVER, then SOCKET".into(),
            ours: order.join(", "),
            reading: format!(
                "The finding {}: the order here is {} (the paper's: udp, driver, socket).",
                holds(order == ["udp", "driver", "socket"]),
                order.join(", ")
            ),
        });
    }
    let side_slope = |f: &dyn Fn(&echo::Row) -> f64| {
        let (a, b) = (bsd.first()?, bsd.last()?);
        let d = b.size.checked_sub(a.size).filter(|d| *d > 0)? as f64;
        Some((f(b) - f(a)) / d)
    };
    let ck = |b: &echo::Breakdown| b.by_operation.get("checksum").copied().unwrap_or(0.0);
    if let (Some(rx), Some(tx)) = (
        side_slope(&|x| ck(&x.receive)),
        side_slope(&|x| ck(&x.send)),
    ) {
        out.push(Comparison {
            finding: "receive vs send checksum per byte (bsd)".into(),
            source: format!("{P000} Figs. 4-7"),
            paper: "receive 180 vs send 150 ns/B".into(),
            ours: format!("receive {rx:.2} vs send {tx:.2} ns/B"),
            reading: format!(
                "The finding {}: receiving checksums cost {:.2}x sending here vs 1.2x in the paper (its received data was not yet in the cache).",
                holds(rx > tx),
                rx / tx.max(1e-9)
            ),
        });
    }
    out
}

pub fn discard(r: &discard::Results) -> Vec<Comparison> {
    let mut out = Vec::new();
    let (Some(bsd), Some(fast)) = (
        r.configs.iter().find(|c| c.name == "bsd"),
        r.configs.iter().find(|c| c.name == "fast"),
    ) else {
        return out;
    };
    for (size, paper) in [("64", 0.32), ("512", 0.326)] {
        let (Some(a), Some(b)) = (
            bsd.ns_per_datagram.get(size),
            fast.ns_per_datagram.get(size),
        ) else {
            continue;
        };
        let gain = 1.0 - b / a;
        out.push(Comparison {
            finding: format!("UDP/IP/socket time saved by all optimizations, {size} B"),
            source: format!("{P002} Table 7 (386)"),
            paper: pct(paper),
            ours: format!("{} ({:.2} → {:.2} µs)", pct(gain), a / 1e3, b / 1e3),
            reading: format!(
                "The finding {}: the optimizations save {} of the UDP/IP/socket time per {size}-byte datagram here vs {} on the paper's 386.",
                holds(gain >= paper / 2.0),
                pct(gain),
                pct(paper)
            ),
        });
    }
    out
}

pub fn bulk(r: &bulk::Results) -> Vec<Comparison> {
    let mut out = Vec::new();
    let find = |mtu: usize, config: &str| {
        r.rows
            .iter()
            .find(|x| x.mtu == mtu && x.config == config && !x.app_touches_data)
    };
    let big = r
        .rows
        .iter()
        .map(|x| x.mtu)
        .filter(|m| (8000..=9000).contains(m))
        .max();
    if let (Some(m8), Some(a), Some(b)) =
        (big, find(1500, "fast"), big.and_then(|m| find(m, "fast")))
    {
        let gain = b.gbps / a.gbps - 1.0;
        out.push(Comparison {
            finding: format!("MTU {m8} vs 1500, fast, not touching"),
            source: format!("{P004} Fig. 2"),
            paper: "up to +70% with 8 KB frames".into(),
            ours: format!("{:+.0}% ({:.2} → {:.2} Gbit/s)", gain * 100.0, a.gbps, b.gbps),
            reading: format!(
                "The finding {}: {m8}-byte frames give {:+.0}% over 1500 here vs up to +70% in the paper.",
                holds(gain > 0.2),
                gain * 100.0
            ),
        });
    }
    let best = |config: &str, touch: bool| {
        r.rows
            .iter()
            .filter(|x| x.config == config && x.app_touches_data == touch)
            .map(|x| x.gbps)
            .fold(f64::NAN, f64::max)
    };
    let (no, yes) = (best("fast", false), best("fast", true));
    if no.is_finite() && yes.is_finite() {
        out.push(Comparison {
            finding: "peak bandwidth, application touching the data vs not (fast)".into(),
            source: format!("{P004} Fig. 2"),
            paper: "no optimizations: 824 vs under 630 Mb/s (-24%)".into(),
            ours: format!("{no:.2} vs {yes:.2} Gbit/s ({:+.0}%)", (yes / no - 1.0) * 100.0),
            reading: format!(
                "The finding {}: touching the data costs {:.0}% of the peak here vs about 24% in the paper.",
                holds(yes < no),
                (1.0 - yes / no) * 100.0
            ),
        });
    }
    out
}

/// Paper 004 Figure 3: where the receiver's CPU goes at a fixed rate.
pub fn cpu(r: &cpu::Results) -> Vec<Comparison> {
    let mut out = Vec::new();
    let find =
        |mtu: usize, config: &str| r.rows.iter().find(|x| x.mtu == mtu && x.config == config);
    // Per-packet work (everything but data access) as the MTU grows, no optimization.
    let handling = |x: &cpu::Row| x.cpu_percent - x.by_category["data_access"];
    if let (Some(a), Some(b)) = (find(1500, "none"), find(32768, "none")) {
        let (ha, hb) = (handling(a), handling(b));
        out.push(Comparison {
            finding: "packet handling (all but data access), MTU 1500 vs 32768, none".into(),
            source: format!("{P004} Fig. 3"),
            paper: "65% vs 10% of the CPU at 370 Mb/s".into(),
            ours: format!(
                "{ha:.1}% vs {hb:.1}% of the CPU at {:.1} Gbit/s",
                a.target_gbps
            ),
            reading: format!(
                "The finding {}: per-packet work falls {:.1}x from 1500- to 32768-byte frames here vs 6.5x in the paper; at {:.1} Gbit/s this CPU is {:.1}% busy at MTU 1500 where the paper's was 95% at 0.37.",
                holds(hb < ha / 2.0),
                ha / hb.max(1e-9),
                a.target_gbps,
                a.cpu_percent
            ),
        });
    }
    if let (Some(n), Some(z), Some(o), Some(b)) = (
        find(32768, "none"),
        find(32768, "zero_copy"),
        find(32768, "checksum_offload"),
        find(32768, "zero_copy_offload"),
    ) {
        let d = |x: &cpu::Row| x.by_category["data_access"];
        out.push(Comparison {
            finding: "data access at MTU 32768: none, zero-copy, offload, both".into(),
            source: format!("{P004} Fig. 3"),
            paper: "24%, ~15%, ~15%, ~0%".into(),
            ours: format!("{:.2}%, {:.2}%, {:.2}%, {:.2}%", d(n), d(z), d(o), d(b)),
            reading: format!(
                "The finding {}: each optimization alone cuts data access to {:.0}% (zero-copy) and {:.0}% (offload) of none's here, both together to {:.0}%, vs about 60% each and nearly 0 in the paper.",
                holds(d(z) < d(n) && d(o) < d(n) && d(b) < d(z).min(d(o))),
                100.0 * d(z) / d(n).max(1e-9),
                100.0 * d(o) / d(n).max(1e-9),
                100.0 * d(b) / d(n).max(1e-9)
            ),
        });
    }
    out
}

pub fn throughput(r: &throughput::Results) -> Vec<Comparison> {
    let mut out = Vec::new();
    for (protocol, col) in [("tcp", 1usize), ("udp", 2)] {
        for (i, name) in [(1usize, "fast_checksum"), (2, "elision")] {
            let p = throughput::PAPER_TABLE1[i];
            let base = throughput::PAPER_TABLE1[0];
            let paper = if col == 1 { p.1 / base.1 } else { p.2 / base.2 } - 1.0;
            let Some(g) = r
                .rows
                .iter()
                .find(|x| x.protocol == protocol && x.checksum == name)
                .and_then(|x| x.gain_vs_rfc1071)
            else {
                continue;
            };
            out.push(Comparison {
                finding: format!("{} throughput gain, {}", protocol.to_uppercase(), name.replace('_', " ")),
                source: format!("{P000} Table 1"),
                paper: format!("{:+.0}%", paper * 100.0),
                ours: format!("{:+.0}%", g * 100.0),
                reading: format!(
                    "The finding {}: {} raises {} throughput by {:+.0}% here vs {:+.0}% in the paper.",
                    holds(g > 0.05),
                    if name == "elision" { "checksum elision" } else { "the fast checksum" },
                    protocol.to_uppercase(),
                    g * 100.0,
                    paper * 100.0
                ),
            });
        }
    }
    let gain = |d: &str| {
        r.send_side
            .iter()
            .find(|x| x.device == d && x.checksum == "elision")
            .and_then(|x| x.gain_vs_unmodified)
    };
    if let (Some(pio), Some(dma)) = (gain("pio"), gain("dma")) {
        out.push(Comparison {
            finding: "send-side gain from elision, PIO vs DMA device".into(),
            source: format!("{P000} Table 2"),
            paper: "PIO +58%, DMA +91%".into(),
            ours: format!("PIO {:+.0}%, DMA {:+.0}%", pio * 100.0, dma * 100.0),
            reading: format!(
                "The finding {}: elision helps the DMA device {} the PIO one here ({:+.0}% vs {:+.0}%){}.",
                holds(dma > pio),
                if dma > pio { "more than" } else { "no more than" },
                dma * 100.0,
                pio * 100.0,
                if dma > pio {
                    ", as in the paper: without the device copy the checksum is a larger share"
                } else {
                    "; in the paper the device copy diluted the PIO gain"
                }
            ),
        });
    }
    out
}

pub fn mix(r: &mix::Results) -> Vec<Comparison> {
    let mut out = Vec::new();
    for a in r.aggregates.iter().filter(|a| a.tuning == "bsd") {
        let ours = a.non_data_touching_share;
        let paper = a.paper_non_data_touching_share;
        out.push(Comparison {
            finding: format!("non-data-touching share, {} (bsd)", a.protocol.to_uppercase()),
            source: format!("{P001} §6"),
            paper: pct(paper),
            ours: pct(ours),
            reading: format!(
                "The finding {}: non-data-touching work is {} of {} processing under the mix here vs {} in the paper{}.",
                holds(ours > 0.5),
                pct(ours),
                a.protocol.to_uppercase(),
                pct(paper),
                r.aggregates
                    .iter()
                    .find(|f| f.tuning == "fast" && f.protocol == a.protocol)
                    .map(|f| format!(", and {} with every optimization on", pct(f.non_data_touching_share)))
                    .unwrap_or_default()
            ),
        });
    }
    out
}
