//! The report's figures, each the counterpart of one in a paper, built from the
//! experiments' results with [`super::svg`].

use std::collections::BTreeMap;

use super::svg::{stacked_bars, Axis, BarChart, LabelledRow, LinePlot, Series};
use crate::experiments::{bulk, checksum, cpu, discard, echo, mix, throughput};

/// One figure: its file name (without `.svg`), what it answers in which paper, the SVG.
#[derive(Clone, Debug)]
pub struct Figure {
    pub name: String,
    pub caption: String,
    pub svg: String,
}

impl Figure {
    fn line(name: &str, caption: &str, plot: LinePlot) -> Figure {
        Figure {
            name: name.to_string(),
            caption: caption.to_string(),
            svg: plot.to_svg(),
        }
    }

    fn bars(name: &str, caption: &str, chart: BarChart) -> Figure {
        Figure {
            name: name.to_string(),
            caption: caption.to_string(),
            svg: chart.to_svg(),
        }
    }
}

/// Paper 002 Table 8 as a plot: GB/s by size for every kernel, fused copy+checksum, and
/// memcpy as the reference.
pub fn checksum(r: &checksum::Results) -> Vec<Figure> {
    let mut series = Vec::new();
    for k in &r.available_kernels {
        series.push(Series::new(
            format!("checksum {k}"),
            r.rows
                .iter()
                .filter_map(|row| row.kernels.get(k).map(|g| (row.size as f64, *g)))
                .collect(),
        ));
    }
    series.push(Series::new(
        "fused copy+checksum",
        r.rows
            .iter()
            .map(|row| (row.size as f64, row.fused_copy_checksum_gbps))
            .collect(),
    ));
    series.push(Series::new(
        "copy, then checksum",
        r.rows
            .iter()
            .map(|row| (row.size as f64, row.two_pass_copy_checksum_gbps))
            .collect(),
    ));
    series.push(
        Series::new(
            "memcpy",
            r.rows
                .iter()
                .map(|row| (row.size as f64, row.memcpy_gbps))
                .collect(),
        )
        .dashed(),
    );
    vec![Figure::line(
        "checksum_gbps",
        "Checksum and copy speed by buffer size, every kernel against memcpy (paper 002 Table 8 as a plot; paper 000 §4.1's faster checksum)",
        LinePlot {
            title: "Checksum kernels vs memcpy".into(),
            x: Axis::log("buffer size (bytes)"),
            y: Axis::log("speed (GB/s)"),
            series,
            y_from_zero: false,
        },
    )]
}

fn echo_rows<'a>(r: &'a echo::Results, tuning: &str) -> Vec<&'a echo::Row> {
    r.rows.iter().filter(|x| x.tuning == tuning).collect()
}

fn us(ns: f64) -> f64 {
    ns / 1e3
}

/// Paper 000's figures from the echo experiment: operations by size (Figs. 1-2), send vs
/// receive (Figs. 4-7), copy components (Figs. 3, 8-9), layers (Fig. 10).
pub fn echo(r: &echo::Results) -> Vec<Figure> {
    let mut out = Vec::new();
    for tuning in ["bsd", "fast"] {
        let rows = echo_rows(r, tuning);
        let op = |k: &'static str| {
            Series::new(
                k.replace('_', "/"),
                rows.iter()
                    .map(|x| {
                        (
                            x.size as f64,
                            us(x.by_operation.get(k).copied().unwrap_or(0.0)),
                        )
                    })
                    .collect(),
            )
        };
        let mut series: Vec<Series> = ["checksum", "copy", "malloc_free", "other"]
            .into_iter()
            .map(op)
            .collect();
        series.push(Series::new(
            "total",
            rows.iter()
                .map(|x| (x.size as f64, us(x.total_ns)))
                .collect(),
        ));
        out.push(Figure::line(
            &format!("echo_operations_{tuning}"),
            &format!("Processing time per echo on the echoing host by operation and message size, {tuning} (paper 000 Figs. 1-2)"),
            LinePlot {
                title: format!("UDP echo by operation ({tuning})"),
                x: Axis::linear("message size (bytes)"),
                y: Axis::linear("time per message (µs)"),
                series,
                y_from_zero: true,
            },
        ));
    }
    let rows = echo_rows(r, "bsd");
    let side = |name: &str, f: &dyn Fn(&echo::Row) -> f64| {
        Series::new(
            name,
            rows.iter().map(|x| (x.size as f64, us(f(x)))).collect(),
        )
    };
    let get = |m: &BTreeMap<&'static str, f64>, k: &str| m.get(k).copied().unwrap_or(0.0);
    out.push(Figure::line(
        "echo_send_receive",
        "Send vs receive: checksum and copy time per echo by size, bsd (paper 000 Figs. 4-7)",
        LinePlot {
            title: "Send vs receive (bsd)".into(),
            x: Axis::linear("message size (bytes)"),
            y: Axis::linear("time per message (µs)"),
            series: vec![
                side("send checksum", &|x| get(&x.send.by_operation, "checksum")),
                side("receive checksum", &|x| {
                    get(&x.receive.by_operation, "checksum")
                }),
                side("send copy", &|x| get(&x.send.by_operation, "copy")),
                side("receive copy", &|x| get(&x.receive.by_operation, "copy")),
            ],
            y_from_zero: true,
        },
    ));
    let stacked = |key: &dyn Fn(&echo::Row) -> &BTreeMap<&'static str, f64>| -> Vec<LabelledRow> {
        rows.iter()
            .map(|x| LabelledRow {
                label: x.size.to_string(),
                parts: key(x)
                    .iter()
                    .map(|(k, v)| (k.to_string(), us(*v)))
                    .collect(),
            })
            .collect()
    };
    out.push(Figure::bars(
        "echo_copy_components",
        "COPY split into user-kernel copy, device copy and cache clear, by size, bsd on a PIO NIC (paper 000 Figs. 3, 8-9)",
        stacked_bars(
            "Copy components (bsd)",
            "message size (bytes)",
            "time per message (µs)",
            &stacked(&|x| &x.copy_components),
        ),
    ));
    out.push(Figure::bars(
        "echo_layers",
        "Processing time by layer and size, bsd (paper 000 Fig. 10)",
        stacked_bars(
            "Time by layer (bsd)",
            "message size (bytes)",
            "time per message (µs)",
            &stacked(&|x| &x.by_layer),
        ),
    ));
    out
}

/// Paper 002 Tables 2-7: the optimizations one at a time, UDP/IP/socket time per
/// datagram by size.
pub fn discard(r: &discard::Results) -> Vec<Figure> {
    let sizes: Vec<String> = discard::SIZES.iter().map(|s| s.to_string()).collect();
    let chart = BarChart {
        title: "Discard: optimizations one at a time".into(),
        x_label: "datagram size (bytes)".into(),
        y_label: "UDP/IP/socket time per datagram (µs)".into(),
        groups: sizes.iter().map(|s| format!("{s} B")).collect(),
        series: r
            .configs
            .iter()
            .map(|c| {
                (
                    c.name.clone(),
                    sizes
                        .iter()
                        .map(|s| c.ns_per_datagram.get(s).map_or(f64::NAN, |v| us(*v)))
                        .collect(),
                )
            })
            .collect(),
        stacked: false,
    };
    vec![Figure::bars(
        "discard_steps",
        "UDP/IP/socket time per datagram as each optimization is added, by size (paper 002 Tables 2-7)",
        chart,
    )]
}

/// Paper 004 Fig. 2: TCP bandwidth by MTU for each configuration, touching the data or not.
pub fn bulk(r: &bulk::Results) -> Vec<Figure> {
    let mut keys: Vec<(&str, bool)> = r
        .rows
        .iter()
        .map(|x| (x.config, x.app_touches_data))
        .collect();
    keys.sort();
    keys.dedup();
    let series = keys
        .iter()
        .map(|&(config, touch)| {
            let s = Series::new(
                format!("{config}{}", if touch { ", touching" } else { "" }),
                r.rows
                    .iter()
                    .filter(|x| x.config == config && x.app_touches_data == touch)
                    .map(|x| (x.mtu as f64, x.gbps))
                    .collect(),
            );
            if touch {
                s.dashed()
            } else {
                s
            }
        })
        .collect();
    vec![Figure::line(
        "bulk_mtu",
        "One-way TCP bandwidth between two stacks by link MTU, per configuration, the application touching the data (dashed) or not (paper 004 Fig. 2)",
        LinePlot {
            title: "TCP bandwidth vs MTU".into(),
            x: Axis::log("link MTU (bytes)"),
            y: Axis::linear("bandwidth (Gbit/s)"),
            series,
            y_from_zero: true,
        },
    )]
}

/// Paper 000 Tables 1-2 as gains over the unmodified checksum, ours beside the paper's.
pub fn throughput(r: &throughput::Results) -> Vec<Figure> {
    let mut groups = Vec::new();
    let (mut ours, mut paper) = (Vec::new(), Vec::new());
    for p in ["udp", "tcp"] {
        for (name, tcp_mb, udp_mb) in &throughput::PAPER_TABLE1[1..] {
            groups.push(format!("{} {}", p.to_uppercase(), name.replace('_', " ")));
            let base = throughput::PAPER_TABLE1[0];
            paper.push(if p == "tcp" {
                (tcp_mb / base.1 - 1.0) * 100.0
            } else {
                (udp_mb / base.2 - 1.0) * 100.0
            });
            ours.push(
                r.rows
                    .iter()
                    .find(|x| x.protocol == p && x.checksum == *name)
                    .and_then(|x| x.gain_vs_rfc1071)
                    .map_or(f64::NAN, |g| g * 100.0),
            );
        }
    }
    for (device, label) in [("pio", "PIO"), ("dma", "DMA")] {
        groups.push(format!("send {label} elision"));
        let base = throughput::PAPER_TABLE2[0];
        let el = throughput::PAPER_TABLE2[1];
        paper.push(if device == "pio" {
            (el.1 / base.1 - 1.0) * 100.0
        } else {
            (el.2 / base.2 - 1.0) * 100.0
        });
        ours.push(
            r.send_side
                .iter()
                .find(|x| x.device == device && x.checksum == "elision")
                .and_then(|x| x.gain_vs_unmodified)
                .map_or(f64::NAN, |g| g * 100.0),
        );
    }
    vec![Figure::bars(
        "throughput_gains",
        "Throughput gain over the RFC 1071 checksum: the fast checksum and checksum elision for UDP and TCP, and send-side elision on a PIO and a DMA device, ours beside paper 000's (Tables 1-2)",
        BarChart {
            title: "Throughput gain over the unmodified checksum".into(),
            x_label: "protocol and change".into(),
            y_label: "throughput gain (%)".into(),
            groups,
            series: vec![
                ("this machine".into(), ours),
                ("paper 000".into(), paper),
            ],
            stacked: false,
        },
    )]
}

/// Papers 001 Figs. 6-12: category breakdowns by size; and the aggregate shares beside
/// the paper's.
pub fn mix(r: &mix::Results) -> Vec<Figure> {
    let mut out = Vec::new();
    for protocol in ["tcp", "udp"] {
        let rows: Vec<LabelledRow> = r
            .rows
            .iter()
            .filter(|x| x.tuning == "bsd" && x.protocol == protocol)
            .map(|x| LabelledRow {
                label: x.size.to_string(),
                parts: x
                    .by_category
                    .iter()
                    .map(|(k, v)| (k.to_string(), us(*v)))
                    .collect(),
            })
            .collect();
        out.push(Figure::bars(
            &format!("mix_categories_{protocol}"),
            &format!("{} processing per message by paper 001's categories and message size, both hosts, bsd (paper 001 Figs. 6-12)", protocol.to_uppercase()),
            stacked_bars(
                &format!("{} by category (bsd)", protocol.to_uppercase()),
                "message size (bytes)",
                "time per message (µs)",
                &rows,
            ),
        ));
    }
    let mut groups = Vec::new();
    let mut series: Vec<(String, Vec<f64>)> = vec![
        ("this machine, bsd".into(), Vec::new()),
        ("this machine, fast".into(), Vec::new()),
        ("paper 001".into(), Vec::new()),
    ];
    for protocol in ["tcp", "udp"] {
        groups.push(protocol.to_uppercase());
        for (i, tuning) in ["bsd", "fast"].into_iter().enumerate() {
            series[i].1.push(
                r.aggregates
                    .iter()
                    .find(|a| a.tuning == tuning && a.protocol == protocol)
                    .map_or(f64::NAN, |a| a.non_data_touching_share * 100.0),
            );
        }
        series[2].1.push(
            mix::PAPER_NON_DATA_TOUCHING
                .iter()
                .find(|p| p.0 == protocol)
                .map_or(f64::NAN, |p| p.1 * 100.0),
        );
    }
    out.push(Figure::bars(
        "mix_shares",
        "Non-data-touching share of all processing under the message-size mix, ours beside paper 001's 84% (TCP) and 60% (UDP)",
        BarChart {
            title: "Non-data-touching share under the size mix".into(),
            x_label: "protocol".into(),
            y_label: "share of processing time (%)".into(),
            groups,
            series,
            stacked: false,
        },
    ));
    out
}

/// Paper 004 Fig. 3 from `lab cpu`: one stacked bar per (MTU, configuration) row.
pub fn cpu(r: &cpu::Results) -> Vec<Figure> {
    let rows: Vec<LabelledRow> = r
        .rows
        .iter()
        .map(|x| LabelledRow {
            label: format!("{} {}", x.mtu, x.config),
            parts: x
                .by_category
                .iter()
                .map(|(c, v)| (c.to_string(), *v))
                .collect(),
        })
        .collect();
    vec![receiver_cpu(&rows)]
}

/// The receiver's CPU by category, one stacked bar per labelled row (category → percent
/// of the elapsed time).
fn receiver_cpu(rows: &[LabelledRow]) -> Figure {
    Figure::bars(
        "cpu_receiver",
        "Receiver CPU by category at a fixed rate, per MTU and configuration (paper 004 Fig. 3)",
        stacked_bars(
            "Receiver CPU breakdown",
            "MTU (bytes) and configuration",
            "receiver CPU (%)",
            rows,
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_receiver_cpu_figure_stacks_each_rows_categories() {
        let rows = vec![
            LabelledRow {
                label: "1500 none".into(),
                parts: [
                    ("interrupts".to_string(), 20.0),
                    ("tcp/ip".to_string(), 12.0),
                ]
                .into(),
            },
            LabelledRow {
                label: "9000 none".into(),
                parts: [("interrupts".to_string(), 5.0), ("copy".to_string(), 24.0)].into(),
            },
        ];
        let f = receiver_cpu(&rows);
        assert_eq!(f.name, "cpu_receiver");
        assert!(f.svg.contains(">receiver CPU (%)</text>"));
        assert!(f.svg.contains(">1500 none</text>") && f.svg.contains(">copy</text>"));
        assert!(receiver_cpu(&[]).svg.contains("no data"));
    }
}
