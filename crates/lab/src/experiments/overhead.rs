//! `probestack lab overhead`: what the ledger's probes cost, measured in one run.
//!
//! The same workload runs in four builds and settings, and a control, round-robin (in a
//! rotated order each round), each rate the median of several rounds after a warm-up
//! round, each ratio the median of the rounds' ratios (a variant over the mean of the
//! probe-free build's two runs in the same round):
//!
//! - **probe-free**: a second copy of this tool built with `--no-default-features`, so
//!   every probe compiles to nothing (the driver builds it into `target/noprobes`);
//! - **never sampled**: probes compiled in, sampling off (the cost of the probes build's
//!   own code: the entries' branches, the messages' bookkeeping, the second copy);
//! - **sampled**: the default, one message in [`DEFAULT_SAMPLE_EVERY`] probed;
//! - **every message**: N = 1;
//! - **control**: the probe-free build again, whose ratio to itself is the run's noise.
//!
//! Every variant runs as a worker process (this tool or the probe-free copy, with
//! `--worker`), which times only the workload, not its own start-up.
//!
//! Ratios are throughput with probes / throughput without. The workloads, each between two
//! stacks on one thread: 64-byte UDP datagrams one way; a 64-byte ICMP echo ping-pong; and
//! TCP bulk one way at MTU 1500 (64 KiB writes, the reader not touching the data; the
//! rate is bytes per second, and a "message" for sampling is a segment).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant as WallInstant;

use probestack::probe::DEFAULT_SAMPLE_EVERY;
use probestack::sim::{HostConfig, Pair, ADDR_B};
use probestack::time::{Clock, RealClock};
use serde::Serialize;

use crate::bench::median;
use crate::table::Table;

/// The workloads, by name.
pub const WORKLOADS: [&str; 3] = ["udp_64", "icmp_echo_64", "tcp_bulk"];

/// Runs `name` for about `millis` of wall time with probes sampling one message in
/// `sample_every` (ignored in a probe-free build); returns messages per second.
pub fn run_workload(name: &str, sample_every: u32, millis: u64) -> Result<f64, String> {
    match name {
        "icmp_echo_64" => Ok(icmp_echo(64, sample_every, millis)),
        "udp_64" => udp_one_way(64, sample_every, millis),
        "tcp_bulk" => tcp_bulk(sample_every, millis),
        other => Err(format!(
            "unknown workload {other}; known: {}",
            WORKLOADS.join(", ")
        )),
    }
}

/// Ping-pong of `size`-byte ICMP echoes between two stacks on one thread: round trips per
/// second (each round trip is two messages on each host).
fn icmp_echo(size: usize, sample_every: u32, millis: u64) -> f64 {
    let host = HostConfig::with_mtu(1500);
    let mut pair = Pair::new(host.clone(), host).expect("memory link");
    pair.a.ledger().set_sample_every(sample_every);
    pair.b.ledger().set_sample_every(sample_every);
    let clock = RealClock::new();
    let data = vec![0x5Au8; size];
    let mut seq: u16 = 0;
    let mut round_trip = |pair: &mut Pair| {
        seq = seq.wrapping_add(1);
        let _ = pair.a.ping(ADDR_B, 7, seq, &data, clock.now());
        for _ in 0..1000 {
            let now = clock.now();
            pair.a.poll(now);
            pair.b.poll(now);
            if pair.a.take_echo_reply().is_some() {
                return;
            }
        }
    };
    // Warm up: ARP, caches, pools.
    for _ in 0..1000 {
        round_trip(&mut pair);
    }
    let start = WallInstant::now();
    let mut n: u64 = 0;
    while start.elapsed().as_millis() < millis as u128 {
        for _ in 0..256 {
            round_trip(&mut pair);
        }
        n += 256;
    }
    n as f64 / start.elapsed().as_secs_f64()
}

/// 64-byte UDP datagrams one way from A to B's socket, both stacks on one thread:
/// datagrams per second.
fn udp_one_way(size: usize, sample_every: u32, millis: u64) -> Result<f64, String> {
    let host = HostConfig::with_mtu(1500);
    let mut pair = Pair::new(host.clone(), host).map_err(|e| format!("memory link: {e}"))?;
    pair.a.ledger().set_sample_every(sample_every);
    pair.b.ledger().set_sample_every(sample_every);
    let clock = RealClock::new();
    let rx = pair.b.udp_open();
    pair.b
        .udp_bind(rx, probestack::wire::Ipv4Address::UNSPECIFIED, 9)
        .map_err(|e| e.to_string())?;
    let tx = pair.a.udp_open();
    let data = vec![0x5Au8; size];
    let mut buf = [0u8; 2048];
    let mut burst = |pair: &mut Pair| -> Result<u64, String> {
        for _ in 0..32 {
            pair.a
                .udp_send_to(tx, &data, ADDR_B, 9)
                .map_err(|e| e.to_string())?;
        }
        let now = clock.now();
        pair.a.poll(now);
        pair.b.poll(now);
        let mut got = 0;
        while pair.b.udp_recv_from(rx, &mut buf).is_ok() {
            got += 1;
        }
        Ok(got)
    };
    for _ in 0..200 {
        burst(&mut pair)?;
    }
    let start = WallInstant::now();
    let mut n: u64 = 0;
    while start.elapsed().as_millis() < millis as u128 {
        n += burst(&mut pair)?;
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

/// TCP one way from A to B at MTU 1500, both stacks on one thread: A's application
/// writes 64 KiB at a time while there is room, both stacks are polled, B's application
/// reads everything queued. Bytes per second delivered.
fn tcp_bulk(sample_every: u32, millis: u64) -> Result<f64, String> {
    let host = HostConfig::with_mtu(1500);
    let mut pair = Pair::new(host.clone(), host).map_err(|e| format!("memory link: {e}"))?;
    pair.a.ledger().set_sample_every(sample_every);
    pair.b.ledger().set_sample_every(sample_every);
    let clock = RealClock::new();
    let listener = pair
        .b
        .tcp_listen((ADDR_B, 5001), 1)
        .map_err(|e| e.to_string())?;
    let tx = pair
        .a
        .tcp_connect((ADDR_B, 5001))
        .map_err(|e| e.to_string())?;
    let mut rx = None;
    for _ in 0..10_000 {
        let now = clock.now();
        pair.a.poll(now);
        pair.b.poll(now);
        rx = pair.b.tcp_accept(listener).ok();
        if rx.is_some() {
            break;
        }
    }
    let rx = rx.ok_or("the TCP connection did not open")?;
    let data = vec![0x5Au8; 64 * 1024];
    let mut buf = vec![0u8; 256 * 1024];
    let mut round = |pair: &mut Pair| -> Result<u64, String> {
        while pair.a.tcp_send(tx, &data).is_ok() {}
        let now = clock.now();
        pair.a.poll(now);
        pair.b.poll(now);
        let mut got = 0;
        loop {
            match pair.b.tcp_recv(rx, &mut buf) {
                Ok(0) => return Err("the TCP connection closed".into()),
                Ok(n) => got += n as u64,
                Err(probestack::socket::tcp::TcpError::WouldBlock) => return Ok(got),
                Err(e) => return Err(e.to_string()),
            }
        }
    };
    let mut warm = 0;
    while warm < 16 << 20 {
        warm += round(&mut pair)?;
    }
    let start = WallInstant::now();
    let mut n: u64 = 0;
    while start.elapsed().as_millis() < millis as u128 {
        n += round(&mut pair)?;
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

#[derive(Clone, Debug, Serialize)]
pub struct WorkloadRow {
    pub workload: String,
    /// Round trips (or messages) per second, medians.
    pub probe_free_rate: f64,
    pub never_sampled_rate: f64,
    pub sampled_rate: f64,
    pub every_message_rate: f64,
    /// Throughput with probes / without: default sampling.
    pub sampled_ratio: f64,
    /// Throughput with probes / without: every message probed.
    pub every_message_ratio: f64,
    /// Throughput with probes compiled in but never sampled / without.
    pub never_sampled_ratio: f64,
    /// The control: the probe-free build measured again in each round, over its first
    /// measurement. The same program against itself, so its distance from 1 is the run's
    /// noise: the other ratios mean nothing closer to 1 than this.
    pub control_ratio: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Results {
    pub experiment: &'static str,
    pub sample_every_default: u32,
    pub rounds: usize,
    pub workloads: Vec<WorkloadRow>,
}

/// The workspace root, from this crate's manifest directory at build time.
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Builds the probe-free copy of the tool; returns its path.
fn build_probe_free() -> Result<PathBuf, String> {
    let root = workspace_root();
    let target = root.join("target/noprobes");
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .current_dir(&root)
        .args([
            "build",
            "--release",
            "--quiet",
            "--no-default-features",
            "-p",
            "probestack-lab",
        ])
        .arg("--target-dir")
        .arg(&target)
        .status()
        .map_err(|e| format!("running cargo to build the probe-free variant: {e}"))?;
    if !status.success() {
        return Err("building the probe-free variant failed".into());
    }
    Ok(target.join("release/probestack"))
}

fn worker_rate(
    binary: &Path,
    workload: &str,
    sample_every: u32,
    millis: u64,
) -> Result<f64, String> {
    let out = Command::new(binary)
        .args(["lab", "overhead", "--worker", workload, "--millis"])
        .arg(millis.to_string())
        .arg("--sample-every")
        .arg(sample_every.to_string())
        .output()
        .map_err(|e| format!("running {}: {e}", binary.display()))?;
    if !out.status.success() {
        return Err(format!(
            "the probe-free worker failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value =
        serde_json::from_str(text.trim()).map_err(|e| format!("worker output {text:?}: {e}"))?;
    v["rate"]
        .as_f64()
        .ok_or_else(|| format!("worker output {text:?} has no rate"))
}

/// Runs the comparison: `rounds` rounds (plus one warm-up) of `millis` per variant.
pub fn run(rounds: usize, millis: u64, mut progress: impl FnMut(&str)) -> Result<Results, String> {
    if !probestack::probe::Ledger::enabled() {
        return Err("this build has no probes; run `lab overhead` from a default build".into());
    }
    progress("building the probe-free variant (target/noprobes)");
    let free = build_probe_free()?;
    // Every variant runs as a worker process of its build, so that each starts alike
    // (fresh process, same memory layout story) and only the build and setting differ.
    let probed = std::env::current_exe().map_err(|e| format!("finding this program: {e}"))?;
    let mut rows = Vec::new();
    for w in WORKLOADS {
        let mut rates: [Vec<f64>; 5] = Default::default();
        let mut ratios: [Vec<f64>; 5] = Default::default();
        for round in 0..=rounds {
            progress(&format!("{w}: round {round} of {rounds}"));
            // The variants in a different order each round (a rotation), so that none
            // always runs first or right after another.
            let mut r = [0.0; 5];
            for k in 0..5 {
                let v = (round + k) % 5;
                r[v] = match v {
                    0 | 4 => worker_rate(&free, w, 0, millis)?,
                    1 => worker_rate(&probed, w, 0, millis)?,
                    2 => worker_rate(&probed, w, DEFAULT_SAMPLE_EVERY, millis)?,
                    _ => worker_rate(&probed, w, 1, millis)?,
                };
            }
            if round > 0 {
                // Each round's ratios to the probe-free build in the same round, so that a
                // drift of the machine's speed over the run cancels: to the mean of its
                // two runs there (the first and the control), which halves the reference's
                // own noise; the control's ratio is to the first alone, the noise of one
                // run against another.
                let reference = (r[0] + r[4]) / 2.0;
                for v in 0..5 {
                    rates[v].push(r[v]);
                    ratios[v].push(if v == 4 {
                        r[4] / r[0]
                    } else {
                        r[v] / reference
                    });
                }
            }
        }
        let [free_r, never, sampled, every, _] = rates.map(|mut v| median(&mut v));
        let [_, never_ratio, sampled_ratio, every_ratio, control_ratio] =
            ratios.map(|mut v| median(&mut v));
        rows.push(WorkloadRow {
            workload: w.to_string(),
            probe_free_rate: free_r,
            never_sampled_rate: never,
            sampled_rate: sampled,
            every_message_rate: every,
            sampled_ratio,
            every_message_ratio: every_ratio,
            never_sampled_ratio: never_ratio,
            control_ratio,
        });
    }
    Ok(Results {
        experiment: "overhead",
        sample_every_default: DEFAULT_SAMPLE_EVERY,
        rounds,
        workloads: rows,
    })
}

pub fn tables(r: &Results) -> Vec<Table> {
    let mut t = Table::new(
        "What the probes cost: throughput with probes / probe-free build",
        &[
            "workload",
            "probe-free /s",
            "never sampled",
            &format!("1 in {}", r.sample_every_default),
            "every message",
            "control",
        ],
    );
    for w in &r.workloads {
        t.row(vec![
            w.workload.clone(),
            format!("{:.0}", w.probe_free_rate),
            format!("{:.3}", w.never_sampled_ratio),
            format!("{:.3}", w.sampled_ratio),
            format!("{:.3}", w.every_message_ratio),
            format!("{:.3}", w.control_ratio),
        ]);
    }
    t.note(format!(
        "ratios: medians over {} rounds after a warm-up round of each round's ratio to the mean of the probe-free build's two runs in that round (the control's: to the first), variants measured round-robin in a rotated order; 1.000 = no cost",
        r.rounds
    ));
    t.note(
        "control: the probe-free build measured again, over itself: the run's noise, below which the other ratios say nothing",
    );
    vec![t]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_workload_runs_in_every_setting() {
        for w in WORKLOADS {
            for n in [0, 1, DEFAULT_SAMPLE_EVERY] {
                let rate = run_workload(w, n, 20).unwrap();
                assert!(rate > 0.0, "{w}");
            }
        }
        assert!(run_workload("nope", 1, 1).is_err());
    }
}
