//! `probestack lab checksum`: Table 8 of paper 002 (copy vs copy-and-checksum, ns/byte) and
//! paper 000's "more than 2x faster checksum", rerun on this machine with every kernel,
//! and the checksum routines of two Rust stacks as peers measured in the same run.

use std::collections::BTreeMap;

use probestack::checksum::{self, Kernel};
use serde::Serialize;

use std::hint::black_box;

use crate::bench::{gbps, keep, round_robin, Case, Effort};
use crate::machine::{self, Machine};
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
    pub machine: Machine,
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
        let src = &src[..];
        // Each case that writes has its own destination, so all can be borrowed at once.
        let mut dsts: Vec<Vec<u8>> = vec![vec![0u8; size]; 3 + kernels.len()];
        let (d_memcpy, rest) = dsts.split_first_mut().expect("destinations");
        let (d_two, rest) = rest.split_first_mut().expect("destinations");
        let (d_fused, d_kernels) = rest.split_first_mut().expect("destinations");

        let mut cases = vec![Case::new("memcpy", || {
            d_memcpy.copy_from_slice(black_box(src));
            keep(&*d_memcpy);
        })];
        for &k in &kernels {
            cases.push(Case::new(k.name(), move || {
                keep(checksum::sum_with(k, black_box(src)))
            }));
        }
        for (&k, d) in kernels.iter().zip(d_kernels.iter_mut()) {
            cases.push(Case::new(format!("fused_{}", k.name()), move || {
                keep(checksum::copy_and_sum_with(k, d, black_box(src)))
            }));
        }
        cases.push(Case::new("best", || keep(checksum::sum(black_box(src)))));
        cases.push(Case::new("two_pass", || {
            d_two.copy_from_slice(black_box(src));
            keep(checksum::sum(d_two));
        }));
        cases.push(Case::new("fused", || {
            keep(checksum::copy_and_sum(d_fused, black_box(src)))
        }));
        cases.push(Case::new("smoltcp", || keep(smoltcp_sum(black_box(src)))));
        cases.push(Case::new("internet_checksum", || {
            keep(internet_checksum_sum(black_box(src)))
        }));
        let times = round_robin(effort, &mut cases);
        let ns: BTreeMap<String, f64> = cases.iter().map(|c| c.name.clone()).zip(times).collect();
        drop(cases);

        let g = |name: &str| gbps(size, ns[name]);
        let mut kernel_gbps: BTreeMap<String, f64> = kernels
            .iter()
            .map(|k| (k.name().to_string(), g(k.name())))
            .collect();
        kernel_gbps.insert("best".to_string(), g("best"));
        let fused_kernels = kernels
            .iter()
            .map(|k| (k.name().to_string(), g(&format!("fused_{}", k.name()))))
            .collect();
        let peers = ["smoltcp", "internet_checksum"]
            .into_iter()
            .map(|p| (p.to_string(), g(p)))
            .collect();
        rows.push(Row {
            size,
            memcpy_gbps: g("memcpy"),
            memcpy_ns_per_byte: ns["memcpy"] / size as f64,
            kernels: kernel_gbps,
            two_pass_copy_checksum_gbps: g("two_pass"),
            fused_copy_checksum_gbps: g("fused"),
            fused_ns_per_byte: ns["fused"] / size as f64,
            fused_kernels,
            peers,
        });
    }

    let header = pseudo_random(20);
    let h = &header[..];
    let mut cases = vec![
        Case::new("inline", || {
            keep(checksum::ipv4_header_checksum(black_box(h)))
        }),
        Case::new("general", || keep(checksum::sum(black_box(h)))),
        Case::new("rfc1071", || {
            keep(checksum::sum_with(Kernel::Rfc1071, black_box(h)))
        }),
        Case::new("smoltcp", || {
            keep(smoltcp::wire::checksum::data(black_box(h)))
        }),
        Case::new("internet_checksum", || {
            keep(internet_checksum_sum(black_box(h)))
        }),
    ];
    let ns = round_robin(effort, &mut cases);
    let ipv4_header_20 = HeaderRow {
        inline_ns: ns[0],
        general_ns: ns[1],
        rfc1071_ns: ns[2],
        peers_ns: [("smoltcp", ns[3]), ("internet_checksum", ns[4])]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    };

    Results {
        experiment: "checksum",
        machine: machine::describe(),
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
    gb.note(format!("machine: {}", r.machine.one_line()));
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
