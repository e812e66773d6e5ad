//! `probestack lab discard`: the experiment of paper 002 (Partridge and Pink, "A Faster
//! UDP"). A sends datagrams of 59, 64, 509 and 512 bytes with sendto on an unconnected
//! socket to a discard server on B (200,000 of each in the paper; `--quick` fewer), and the
//! lab reports:
//!
//! - a per-routine profile like 002 Table 1, from both hosts' ledgers: the socket send
//!   (sosend), UDP output, IP output, IP input (ipintr), UDP input, the checksum, and the
//!   socket receive (soreceive);
//! - the optimizations switched on one at a time in the paper's order (002 Tables 2-7):
//!   in-line IP header checksum, sendto without pseudo-connect, the PCB caches, the buffer
//!   cache, the protocol-specific send and receive paths with copy and checksum combined,
//!   then (past the paper) the per-destination header template, and last every switch of
//!   `Tuning::fast()`; for each, the UDP/IP/socket time per
//!   datagram (sending and receiving one datagram, from the ledgers, as the paper's
//!   "UDP/IP/socket total") and the wall time per datagram of the whole run;
//! - PCB cache hit rates on a mixed workload of 60 sockets and several sources (002 Table
//!   4b).

use std::collections::BTreeMap;

use probestack::probe::{Layer, Op, Side, SnapshotBucket};
use probestack::rng::Rng;
use probestack::sim::{HostConfig, Pair, ADDR_B};
use probestack::time::{Clock, RealClock};
use probestack::tuning::Tuning;
use probestack::udp::pcb::PcbLookup;
use probestack::wire::Ipv4Address;
use serde::Serialize;

use crate::bench::median;
use crate::table::Table;

pub const SIZES: [usize; 4] = [59, 64, 509, 512];

/// The paper's order of optimizations, each step adding one to the last.
pub fn steps() -> Vec<(&'static str, Tuning)> {
    let mut t = Tuning::bsd();
    let mut out = vec![("bsd", t)];
    t.inline_ip_header_checksum = true;
    out.push(("+inline_ip_header_checksum", t));
    t.sendto_without_connect = true;
    out.push(("+sendto_without_connect", t));
    t.pcb_recv_cache = true;
    t.pcb_send_cache = true;
    t.pcb_lookup = PcbLookup::MoveToFront;
    out.push(("+pcb_caches", t));
    t.buffer_cache = true;
    out.push(("+buffer_cache", t));
    t.udp_fast_path = true;
    out.push(("+udp_fast_path", t));
    // Past the paper: the headers built once per destination (4.3BSD's template).
    t.udp_header_template = true;
    out.push(("+udp_header_template", t));
    // IPv4 input's short path for the common UDP datagram (`ip::udp_short`).
    t.udp_rx_short_path = true;
    out.push(("+udp_rx_short_path", t));
    out.push(("fast", Tuning::fast()));
    out
}

#[derive(Clone, Debug, Serialize)]
pub struct Config {
    pub name: String,
    /// UDP/IP/socket time per datagram, sending and receiving (ns), by size.
    pub ns_per_datagram: BTreeMap<String, f64>,
    /// Wall time per datagram of the whole run, both hosts and the NIC models (ns).
    pub wall_ns_per_datagram: BTreeMap<String, f64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ProfileRow {
    pub size: usize,
    /// Routine (paper 002 Table 1 names) to ns per datagram.
    pub routines: BTreeMap<&'static str, f64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct CacheRates {
    pub sockets: usize,
    pub datagrams: u64,
    pub recv_cache_hit_rate: f64,
    pub send_cache_hit_rate: f64,
    /// PCBs examined per lookup, for the linear scan and for the chosen strategy.
    pub examined_per_lookup_linear: f64,
    pub examined_per_lookup_move_to_front: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Results {
    pub experiment: &'static str,
    pub datagrams: usize,
    pub profile_bsd: Vec<ProfileRow>,
    pub configs: Vec<Config>,
    pub cache_hit_rates: CacheRates,
}

/// The paper's routines, as (layer, side) sums of the ledger, checksum apart.
fn routines(send: &SnapshotBucket, recv: &SnapshotBucket) -> BTreeMap<&'static str, f64> {
    let layer = |b: &SnapshotBucket, l: Layer, side: Side| -> f64 {
        b.cells
            .iter()
            .filter(|c| c.layer == l && c.side == side && c.op != Op::Checksum)
            .map(|c| c.ns)
            .sum::<f64>()
            / b.messages.max(1) as f64
    };
    let checksum = |b: &SnapshotBucket| b.by_operation().get("checksum").copied().unwrap_or(0.0);
    BTreeMap::from([
        ("sosend", layer(send, Layer::Socket, Side::Send)),
        ("udp_output", layer(send, Layer::Udp, Side::Send)),
        ("ip_output", layer(send, Layer::Ip, Side::Send)),
        ("ipintr", layer(recv, Layer::Ip, Side::Receive)),
        ("udp_input", layer(recv, Layer::Udp, Side::Receive)),
        ("in_cksum", checksum(send) + checksum(recv)),
        ("soreceive", layer(recv, Layer::Socket, Side::Receive)),
    ])
}

/// Sends `n` datagrams of `size` from A to B's discard socket and returns (UDP/IP/socket
/// ns per datagram from the ledgers, wall ns per datagram, the routine profile).
fn discard_run(
    tuning: Tuning,
    size: usize,
    n: usize,
    sample_every: u32,
) -> Result<(f64, f64, BTreeMap<&'static str, f64>), String> {
    let mut host = HostConfig::with_mtu(1500);
    host.stack.tuning = tuning;
    host.nic.rx_queue_depth = 4096;
    host.nic.tx_queue_depth = 4096;
    let mut p = Pair::new(host.clone(), host).map_err(|e| format!("memory link: {e}"))?;
    let clock = RealClock::new();
    let server = p.b.udp_open();
    p.b.udp_bind(server, Ipv4Address::UNSPECIFIED, 9)
        .map_err(|e| e.to_string())?;
    p.b.udp_set_recv_buffer(server, 16 << 20)
        .map_err(|e| e.to_string())?;
    let client = p.a.udp_open();
    let msg = vec![0xA5u8; size];
    let mut buf = vec![0u8; 2048];
    let mut run = |p: &mut Pair, count: usize| -> Result<std::time::Duration, String> {
        let start = std::time::Instant::now();
        let (mut sent, mut received, mut idle) = (0, 0, 0);
        while received < count {
            // Batches of 64, as a sender would fill a socket buffer.
            let batch = (count - sent).min(64);
            for _ in 0..batch {
                p.a.udp_send_to(client, &msg, ADDR_B, 9)
                    .map_err(|e| e.to_string())?;
            }
            sent += batch;
            let now = clock.now();
            p.a.poll(now);
            p.b.poll(now);
            let before = received;
            while p.b.udp_recv_from(server, &mut buf).is_ok() {
                received += 1;
            }
            idle = if received == before { idle + 1 } else { 0 };
            if idle > 100_000 {
                return Err(format!("discard: only {received} of {count} arrived"));
            }
        }
        Ok(start.elapsed())
    };
    // Resolve B's address first, so no datagram waits on ARP.
    run(&mut p, 1)?;
    run(&mut p, 2000.min(n))?; // warm-up: ARP, pools, caches
    p.a.ledger().clear();
    p.b.ledger().clear();
    p.a.ledger().set_sample_every(sample_every);
    p.b.ledger().set_sample_every(sample_every);
    let wall = run(&mut p, n)?;
    let (sa, sb) = (p.a.ledger().snapshot(), p.b.ledger().snapshot());
    let (send, recv) = (sa.merged(), sb.merged());
    let profile = routines(&send, &recv);
    let stack_ns: f64 = [
        (&send, Layer::Socket),
        (&send, Layer::Udp),
        (&send, Layer::Ip),
        (&recv, Layer::Socket),
        (&recv, Layer::Udp),
        (&recv, Layer::Ip),
    ]
    .iter()
    .map(|(b, l)| b.by_layer().get(l.name()).copied().unwrap_or(0.0))
    .sum();
    Ok((stack_ns, wall.as_nanos() as f64 / n as f64, profile))
}

/// Table 4b's workload: 60 sockets on B, four sources on A, destinations drawn with
/// locality (most traffic to a few busy sockets), and B answering a quarter of the
/// datagrams from the socket that received them.
fn cache_rates(datagrams: u64) -> Result<CacheRates, String> {
    let mut examined = std::collections::HashMap::new();
    let mut rates = (0.0, 0.0);
    for lookup in [PcbLookup::Linear, PcbLookup::MoveToFront] {
        let mut t = Tuning::fast();
        t.pcb_lookup = lookup;
        let mut host = HostConfig::with_mtu(1500);
        host.stack.tuning = t;
        let mut p = Pair::new(host.clone(), host).map_err(|e| format!("memory link: {e}"))?;
        let clock = RealClock::new();
        let servers: Vec<_> = (0..60u16)
            .map(|i| {
                let h = p.b.udp_open();
                p.b.udp_bind(h, Ipv4Address::UNSPECIFIED, 2000 + i)
                    .map(|()| h)
            })
            .collect::<Result<_, _>>()
            .map_err(|e| e.to_string())?;
        let sources: Vec<_> = (0..4).map(|_| p.a.udp_open()).collect();
        let mut rng = Rng::new(2002);
        let mut buf = [0u8; 256];
        let before = p.b.udp_pcb_stats();
        for _ in 0..datagrams {
            // 70% to the four busiest sockets, the rest spread over all 60.
            let port_index = if rng.chance(0.7) {
                rng.below(4)
            } else {
                rng.below(60)
            } as usize;
            let src = sources[rng.below(4) as usize];
            p.a.udp_send_to(src, b"request", ADDR_B, 2000 + port_index as u16)
                .map_err(|e| e.to_string())?;
            let now = clock.now();
            p.a.poll(now);
            p.b.poll(now);
            let h = servers[port_index];
            if let Ok(r) = p.b.udp_recv_from(h, &mut buf) {
                if rng.chance(0.25) {
                    let _ = p.b.udp_send_to(h, b"reply", r.from.0, r.from.1);
                }
            }
        }
        let s = p.b.udp_pcb_stats().since(&before);
        examined.insert(lookup, s.examined as f64 / s.lookups.max(1) as f64);
        if lookup == PcbLookup::MoveToFront {
            let recv_total = (s.recv_cache_hits + s.recv_cache_misses).max(1) as f64;
            let send_total = (s.send_cache_hits + s.send_cache_misses).max(1) as f64;
            rates = (
                s.recv_cache_hits as f64 / recv_total,
                s.send_cache_hits as f64 / send_total,
            );
        }
    }
    Ok(CacheRates {
        sockets: 60,
        datagrams,
        recv_cache_hit_rate: rates.0,
        send_cache_hit_rate: rates.1,
        examined_per_lookup_linear: examined[&PcbLookup::Linear],
        examined_per_lookup_move_to_front: examined[&PcbLookup::MoveToFront],
    })
}

/// Runs the experiment with `n` datagrams per size and configuration, each figure the
/// median of `runs` runs.
pub fn run(n: usize, runs: usize, mut progress: impl FnMut(&str)) -> Result<Results, String> {
    progress("profile (bsd, every datagram probed)");
    let mut profile_bsd = Vec::new();
    for &size in &SIZES {
        let (_, _, routines) = discard_run(Tuning::bsd(), size, n.min(20_000), 1)?;
        profile_bsd.push(ProfileRow { size, routines });
    }
    let mut configs = Vec::new();
    for (name, t) in steps() {
        progress(name);
        let mut ns = BTreeMap::new();
        let mut wall = BTreeMap::new();
        for &size in &SIZES {
            let (mut a, mut b) = (Vec::new(), Vec::new());
            for _ in 0..runs.max(1) {
                let (stack_ns, wall_ns, _) = discard_run(t, size, n, 1)?;
                a.push(stack_ns);
                b.push(wall_ns);
            }
            ns.insert(size.to_string(), median(&mut a));
            wall.insert(size.to_string(), median(&mut b));
        }
        configs.push(Config {
            name: name.to_string(),
            ns_per_datagram: ns,
            wall_ns_per_datagram: wall,
        });
    }
    progress("cache hit rates (60 sockets)");
    let cache_hit_rates = cache_rates((n as u64).clamp(5_000, 100_000))?;
    Ok(Results {
        experiment: "discard",
        datagrams: n,
        profile_bsd,
        configs,
        cache_hit_rates,
    })
}

pub fn tables(r: &Results) -> Vec<Table> {
    let mut prof = Table::new(
        "Per-routine profile, bsd, ns per datagram (paper 002 Table 1)",
        &[
            "size",
            "sosend",
            "udp_output",
            "ip_output",
            "ipintr",
            "udp_input",
            "in_cksum",
            "soreceive",
        ],
    );
    for row in &r.profile_bsd {
        let mut cells = vec![row.size.to_string()];
        for k in [
            "sosend",
            "udp_output",
            "ip_output",
            "ipintr",
            "udp_input",
            "in_cksum",
            "soreceive",
        ] {
            cells.push(format!(
                "{:.0}",
                row.routines.get(k).copied().unwrap_or(0.0)
            ));
        }
        prof.row(cells);
    }
    prof.note("the paper's 386 at 64 B: sosend 25.94 s, udp_usrreq+output 29.17, ip_output 14.46, ipintr 18.99, udp_input 32.29, in_cksum 47.64, soreceive 28.88 (200,000 datagrams)");

    let mut steps = Table::new(
        "Optimizations one at a time: UDP/IP/socket ns per datagram, send + receive (paper 002 Tables 2-7)",
        &["configuration", "59 B", "64 B", "509 B", "512 B", "vs bsd (64 / 512)", "wall 64 B"],
    );
    let base = r.configs.first();
    for c in &r.configs {
        let g = |k: &str| c.ns_per_datagram.get(k).copied().unwrap_or(0.0);
        let saving = |k: &str| {
            base.and_then(|b| b.ns_per_datagram.get(k))
                .map(|b0| (1.0 - g(k) / b0) * 100.0)
                .unwrap_or(0.0)
        };
        steps.row(vec![
            c.name.clone(),
            format!("{:.0}", g("59")),
            format!("{:.0}", g("64")),
            format!("{:.0}", g("509")),
            format!("{:.0}", g("512")),
            format!("{:+.0}% / {:+.0}%", -saving("64"), -saving("512")),
            format!(
                "{:.0}",
                c.wall_ns_per_datagram.get("64").copied().unwrap_or(0.0)
            ),
        ]);
    }
    steps.note("paper 002 Table 7: all optimizations cut UDP/IP/socket time by 32% (386, 64 B) and 32.6% (512 B); each step adds one switch to the one above; fast = every switch");
    steps.note(format!("{} datagrams per size and configuration; the wall column includes both hosts, the NIC models and the loop", r.datagrams));

    let c = &r.cache_hit_rates;
    let mut cache = Table::new(
        "PCB caches on a mixed workload (paper 002 Table 4b)",
        &[
            "sockets",
            "datagrams",
            "recv cache hits",
            "send cache hits",
            "examined/lookup linear",
            "examined/lookup MTF",
        ],
    );
    cache.row(vec![
        c.sockets.to_string(),
        c.datagrams.to_string(),
        format!("{:.0}%", c.recv_cache_hit_rate * 100.0),
        format!("{:.0}%", c.send_cache_hit_rate * 100.0),
        format!("{:.1}", c.examined_per_lookup_linear),
        format!("{:.1}", c.examined_per_lookup_move_to_front),
    ]);
    cache.note("paper 002 Table 4b (SunOS file server, ~60-65 sockets): receive cache hits 57%, send cache hits 30%");
    vec![prof, steps, cache]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_go_from_bsd_to_fast_one_switch_at_a_time() {
        let s = steps();
        assert_eq!(s.first().unwrap().1, Tuning::bsd());
        assert_eq!(s.last().unwrap().1, Tuning::fast());
        assert_eq!(s.len(), 9);
    }

    #[test]
    fn a_tiny_run_has_every_field_the_json_promises() {
        let r = run(300, 1, |_| {}).unwrap();
        let v = serde_json::to_value(&r).unwrap();
        let configs = v["configs"].as_array().unwrap();
        assert_eq!(configs[0]["name"], "bsd");
        assert_eq!(configs.last().unwrap()["name"], "fast");
        for c in configs {
            for size in ["59", "64", "509", "512"] {
                assert!(c["ns_per_datagram"][size].as_f64().unwrap() > 0.0);
            }
        }
        assert!(v["cache_hit_rates"]["recv_cache_hit_rate"].is_number());
        assert!(r.cache_hit_rates.recv_cache_hit_rate > 0.0);
        assert_eq!(tables(&r).len(), 3);
    }
}
