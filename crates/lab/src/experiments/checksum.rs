//! `probestack lab checksum`: Table 8 of paper 002 (copy vs copy-and-checksum, ns/byte) and
//! paper 000's "more than 2x faster checksum", rerun on this machine with every kernel,
//! and the checksum routines of two Rust stacks as peers measured in the same run.

use std::collections::BTreeMap;

use probestack::checksum::{self, Kernel};
use serde::Serialize;

use crate::bench::{gbps, keep, ns_per_call, Effort};
use crate::table::Table;

/// The sizes of the issue: IP header-ish, small, the 1993 default MTU, Ethernet, jumbo,
/// 16 KiB, 64 KiB and 1 MiB.
pub const SIZES: [usize; 8] = [40, 64, 576, 1500, 9000, 16384, 65536, 1 << 20];

/// One size's figures, in GB/s (10^9 bytes per second) unless named otherwise.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub size: usize,
    pub memcpy_gbps: f64,
    pub memcpy_ns_per_byte: f64,
    /// Kernel name to GB/s, with `best` for the run-time dispatched default.
    pub kernels: BTreeMap<String, f64>,
    /// Copy, then checksum the copy with the best kernel.
    pub two_pass_copy_checksum_gbps: f64,
    /// One pass: the best kernel's fused copy-and-sum.
    pub fused_copy_checksum_gbps: f64,
    pub fused_ns_per_byte: f64,
    /// Each kernel's fused loop, GB/s.
    pub fused_kernels: BTreeMap<String, f64>,
    /// Peer name to GB/s.
    pub peers: BTreeMap<String, f64>,
}

/// A 20-byte IPv4 header, nanoseconds per checksum.
#[derive(Clone, Debug, Serialize)]
pub struct HeaderRow {
    /// The in-line 20-byte path (paper 002 §6.1).
    pub inline_ns: f64,
    /// The general routine with the best kernel.
    pub general_ns: f64,
    /// The RFC 1071 reference.
    pub rfc1071_ns: f64,
    pub peers_ns: BTreeMap<String, f64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Results {
    pub experiment: &'static str,
    pub best_kernel: String,
    pub available_kernels: Vec<String>,
    pub samples: usize,
    pub rows: Vec<Row>,
    pub ipv4_header_20: HeaderRow,
}

fn pseudo_random(n: usize) -> Vec<u8> {
    let mut x: u32 = 0x1234_5678;
    (0..n)
        .map(|_| {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (x >> 24) as u8
        })
        .collect()
}

/// smoltcp's checksum as smoltcp itself calls it. Its 32-bit accumulator overflows past
/// 128 KiB, so larger buffers are summed in 64 KiB pieces and combined with smoltcp's own
/// `combine` (no IP datagram is larger than 64 KiB, so this is how smoltcp would meet them).
fn smoltcp_sum(data: &[u8]) -> u16 {
    if data.len() <= 65536 {
        smoltcp::wire::checksum::data(data)
    } else {
        let sums: Vec<u16> = data
            .chunks(65536)
            .map(smoltcp::wire::checksum::data)
            .collect();
        smoltcp::wire::checksum::combine(&sums)
    }
}

fn internet_checksum_sum(data: &[u8]) -> [u8; 2] {
    internet_checksum::checksum(data)
}

/// Runs the experiment. `progress` is told each size as it starts.
pub fn run(sizes: &[usize], effort: Effort, mut progress: impl FnMut(usize)) -> Results {
    let kernels: Vec<Kernel> = Kernel::available().collect();
    let mut rows = Vec::new();
    for &size in sizes {
        progress(size);
        let src = pseudo_random(size);
        let mut dst = vec![0u8; size];
        let memcpy_ns = ns_per_call(effort, || {
            dst.copy_from_slice(std::hint::black_box(&src));
            keep(&dst);
        });
        let mut kernel_gbps = BTreeMap::new();
        let mut fused_kernels = BTreeMap::new();
        for &k in &kernels {
            let ns = ns_per_call(effort, || {
                keep(checksum::sum_with(k, std::hint::black_box(&src)))
            });
            kernel_gbps.insert(k.name().to_string(), gbps(size, ns));
            let ns = ns_per_call(effort, || {
                keep(checksum::copy_and_sum_with(
                    k,
                    &mut dst,
                    std::hint::black_box(&src),
                ))
            });
            fused_kernels.insert(k.name().to_string(), gbps(size, ns));
        }
        let best_ns = ns_per_call(effort, || keep(checksum::sum(std::hint::black_box(&src))));
        kernel_gbps.insert("best".to_string(), gbps(size, best_ns));
        let two_pass_ns = ns_per_call(effort, || {
            dst.copy_from_slice(std::hint::black_box(&src));
            keep(checksum::sum(&dst));
        });
        let fused_ns = ns_per_call(effort, || {
            keep(checksum::copy_and_sum(&mut dst, std::hint::black_box(&src)))
        });
        let mut peers = BTreeMap::new();
        let ns = ns_per_call(effort, || keep(smoltcp_sum(std::hint::black_box(&src))));
        peers.insert("smoltcp".to_string(), gbps(size, ns));
        let ns = ns_per_call(effort, || {
            keep(internet_checksum_sum(std::hint::black_box(&src)))
        });
        peers.insert("internet_checksum".to_string(), gbps(size, ns));

        rows.push(Row {
            size,
            memcpy_gbps: gbps(size, memcpy_ns),
            memcpy_ns_per_byte: memcpy_ns / size as f64,
            kernels: kernel_gbps,
            two_pass_copy_checksum_gbps: gbps(size, two_pass_ns),
            fused_copy_checksum_gbps: gbps(size, fused_ns),
            fused_ns_per_byte: fused_ns / size as f64,
            fused_kernels,
            peers,
        });
    }

    let header = pseudo_random(20);
    let mut peers_ns = BTreeMap::new();
    peers_ns.insert(
        "smoltcp".to_string(),
        ns_per_call(effort, || {
            keep(smoltcp::wire::checksum::data(std::hint::black_box(&header)))
        }),
    );
    peers_ns.insert(
        "internet_checksum".to_string(),
        ns_per_call(effort, || {
            keep(internet_checksum_sum(std::hint::black_box(&header)))
        }),
    );
    let ipv4_header_20 = HeaderRow {
        inline_ns: ns_per_call(effort, || {
            keep(checksum::ipv4_header_checksum(std::hint::black_box(
                &header,
            )))
        }),
        general_ns: ns_per_call(effort, || {
            keep(checksum::sum(std::hint::black_box(&header)))
        }),
        rfc1071_ns: ns_per_call(effort, || {
            keep(checksum::sum_with(
                Kernel::Rfc1071,
                std::hint::black_box(&header),
            ))
        }),
        peers_ns,
    };

    Results {
        experiment: "checksum",
        best_kernel: Kernel::best().name().to_string(),
        available_kernels: kernels.iter().map(|k| k.name().to_string()).collect(),
        samples: effort.samples,
        rows,
        ipv4_header_20,
    }
}

fn size_label(n: usize) -> String {
    match n {
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
        n if n >= 16384 && n % 1024 == 0 => format!("{} KiB", n >> 10),
        n => n.to_string(),
    }
}

fn f(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.0}")
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

/// Table 8 of paper 002, ns per byte (uncached data on the 1992 machines).
pub const PAPER_002_TABLE_8: [(&str, f64, f64); 6] = [
    ("HP9000/370", 122.0, 144.0),
    ("Sparcstation1", 164.0, 177.0),
    ("Sparcstation2", 109.0, 109.0),
    ("HP9000/720", 54.0, 54.0),
    ("DECstation 5000/133", 82.5, 99.5),
    ("DECstation 2100", 288.0, 292.0),
];

/// The tables the terminal and the report show.
pub fn tables(r: &Results) -> Vec<Table> {
    let kernel_names: Vec<&str> = r.available_kernels.iter().map(|s| s.as_str()).collect();
    let mut header = vec!["size", "memcpy"];
    header.extend(kernel_names.iter().copied());
    header.extend(["best", "2-pass", "fused", "smoltcp", "inet-cksum"]);
    let mut gb = Table::new(
        format!(
            "Checksum throughput, GB/s (data in cache; best kernel here: {})",
            r.best_kernel
        ),
        &header,
    );
    for row in &r.rows {
        let mut cells = vec![size_label(row.size), f(row.memcpy_gbps)];
        for k in &kernel_names {
            cells.push(f(row.kernels[*k]));
        }
        cells.push(f(row.kernels["best"]));
        cells.push(f(row.two_pass_copy_checksum_gbps));
        cells.push(f(row.fused_copy_checksum_gbps));
        cells.push(f(row.peers["smoltcp"]));
        cells.push(f(row.peers["internet_checksum"]));
        gb.row(cells);
    }
    gb.note(format!(
        "median of {} samples after a warm-up; 2-pass = copy then checksum; fused = one pass",
        r.samples
    ));
    gb.note(
        "smoltcp 0.14 wire::checksum::data (64 KiB pieces above 64 KiB); internet-checksum 0.2",
    );

    let mut t8 = Table::new(
        "Copy vs copy+checksum, ns/byte (paper 002 Table 8 beside this machine)",
        &["machine", "copy", "copy+checksum", "extra"],
    );
    for (m, c, cc) in PAPER_002_TABLE_8 {
        t8.row(vec![
            format!("{m} (002 Table 8)"),
            f(c),
            f(cc),
            format!("{:+.0}%", (cc / c - 1.0) * 100.0),
        ]);
    }
    for row in &r.rows {
        if [1500, 65536, 1 << 20].contains(&row.size) {
            t8.row(vec![
                format!("this machine, {} B", row.size),
                format!("{:.4}", row.memcpy_ns_per_byte),
                format!("{:.4}", row.fused_ns_per_byte),
                format!(
                    "{:+.0}%",
                    (row.fused_ns_per_byte / row.memcpy_ns_per_byte - 1.0) * 100.0
                ),
            ]);
        }
    }
    t8.note("the paper's data was uncached; ours is in L1/L2, where a copy is cheapest and the checksum's extra work shows most");

    let mut ratios = Table::new(
        "Paper vs ours: what the checksum kernels buy",
        &[
            "size",
            "unrolled32/rfc1071",
            "best/rfc1071",
            "best/smoltcp",
            "fused/memcpy time",
        ],
    );
    for row in &r.rows {
        ratios.row(vec![
            size_label(row.size),
            format!("{:.2}x", row.kernels["unrolled32"] / row.kernels["rfc1071"]),
            format!("{:.1}x", row.kernels["best"] / row.kernels["rfc1071"]),
            format!("{:.2}x", row.kernels["best"] / row.peers["smoltcp"]),
            format!("{:.2}", row.memcpy_gbps / row.fused_copy_checksum_gbps),
        ]);
    }
    ratios.note("paper 000 §4.1: the 32-bit, 16x unrolled, two-register checksum was more than 2x the MIPS 16-bit routine");
    let h = &r.ipv4_header_20;
    ratios.note(format!(
        "20-byte IPv4 header: in-line {:.1} ns, general {:.1} ns, RFC 1071 {:.1} ns, smoltcp {:.1} ns, internet-checksum {:.1} ns",
        h.inline_ns, h.general_ns, h.rfc1071_ns, h.peers_ns["smoltcp"], h.peers_ns["internet_checksum"]
    ));
    vec![gb, t8, ratios]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_tiny_run_has_every_field_the_json_promises() {
        let effort = Effort {
            samples: 1,
            sample_time: Duration::from_micros(50),
        };
        let r = run(&[40, 1500], effort, |_| {});
        let v = serde_json::to_value(&r).unwrap();
        let rows = v["rows"].as_array().unwrap();
        assert_eq!(rows.len(), 2);
        for row in rows {
            for key in [
                "size",
                "memcpy_gbps",
                "two_pass_copy_checksum_gbps",
                "fused_copy_checksum_gbps",
            ] {
                assert!(row[key].is_number(), "{key} missing");
            }
            assert!(row["kernels"]["best"].as_f64().unwrap() > 0.0);
            assert!(row["kernels"]["rfc1071"].as_f64().unwrap() > 0.0);
            assert!(row["peers"]["smoltcp"].as_f64().unwrap() > 0.0);
            assert!(row["peers"]["internet_checksum"].as_f64().unwrap() > 0.0);
        }
        let tables = tables(&r);
        assert_eq!(tables.len(), 3);
        assert!(tables[0].to_text().contains("1500"));
    }

    #[test]
    fn peers_agree_with_our_checksum() {
        let data = pseudo_random(200_000);
        for n in [0, 1, 20, 1500, 65536, 200_000] {
            let ours = checksum::sum(&data[..n]);
            assert_eq!(smoltcp_sum(&data[..n]), ours, "smoltcp at {n}");
            let ic = u16::from_be_bytes(internet_checksum_sum(&data[..n]));
            assert_eq!(ic, checksum::finish(ours), "internet-checksum at {n}");
        }
    }
}
