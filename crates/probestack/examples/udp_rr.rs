//! A profiling harness: the peers experiment's UDP request/response loop (A sends 64
//! bytes, B echoes them, A takes the reply; both stacks polled on this thread until it
//! arrives), for callgrind or perf.
//!
//! `cargo run --release -p probestack --example udp_rr -- [SIZE] [ROUNDS] [bsd|fast|queue] [SAMPLE]`
//!
//! `queue` runs `Tuning::fast()` on a frame queue instead of the memory link (no NIC model:
//! `lab peers`' "probestack fast, frame queue").
//!
//! Prints the mean, median and 99th percentile round trip. `SAMPLE` sets both ledgers'
//! sampling (probe one message in SAMPLE; 0 never, 1 every; default the ledger's own):
//! with probes compiled in, the tail is where the sampled messages are.

mod harness;

use probestack::sim::ADDR_B;
use probestack::time::{Clock, RealClock};
use probestack::wire::Ipv4Address;

fn main() {
    let size: usize = harness::arg(1, 64);
    let rounds: usize = harness::arg(2, 100_000);
    let mut pair = harness::pair_for(1500, harness::word(3).as_deref());
    harness::sampling_arg(&pair, 4);
    let b = pair.b.udp_open();
    pair.b
        .udp_bind(b, Ipv4Address::UNSPECIFIED, 7)
        .expect("bind");
    let a = pair.a.udp_open();
    let clock = RealClock::new();
    let req = vec![0x5Au8; size];
    let mut buf_a = vec![0u8; 2048];
    let mut buf_b = vec![0u8; 2048];
    let mut done = 0u64;
    let mut rtts = Vec::with_capacity(rounds);
    let start = std::time::Instant::now();
    for _ in 0..rounds {
        let sent = std::time::Instant::now();
        if pair.a.udp_send_to(a, &req, ADDR_B, 7).is_err() {
            continue;
        }
        // At most a few turns: the first round also waits for ARP.
        for _ in 0..8 {
            let now = clock.now();
            pair.a.poll(now);
            pair.b.poll(now);
            if let Ok(r) = pair.b.udp_recv_from(b, &mut buf_b) {
                let _ = pair.b.udp_send_to(b, &buf_b[..r.len], r.from.0, r.from.1);
                pair.b.poll(now);
                pair.a.poll(now);
            }
            if pair.a.udp_recv_from(a, &mut buf_a).is_ok() {
                done += 1;
                rtts.push(sent.elapsed().as_nanos() as u64);
                break;
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    rtts.sort_unstable();
    let at =
        |q: f64| rtts.get(((rtts.len() as f64 * q) as usize).min(rtts.len().saturating_sub(1)));
    println!(
        "{done} round trips in {secs:.3} s: {:.0} ns per round trip; median {} ns, p99 {} ns",
        secs * 1e9 / done.max(1) as f64,
        at(0.5).copied().unwrap_or(0),
        at(0.99).copied().unwrap_or(0)
    );
}
