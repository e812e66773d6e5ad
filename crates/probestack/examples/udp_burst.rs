//! A profiling harness: the peers experiment's UDP one-way loop (bursts of 32 datagrams
//! from A to B over the memory link, both stacks on this thread), for callgrind or perf.
//!
//! `cargo run --release -p probestack --example udp_burst -- [SIZE] [BURSTS] [bsd|fast|queue] [SAMPLE] [batch]`
//!
//! `queue` runs `Tuning::fast()` on a frame queue instead of the memory link (no NIC model:
//! `lab peers`' "probestack fast, frame queue").
//!
//! `SAMPLE` sets both ledgers' sampling (probe one message in SAMPLE; 0 never, 1 every;
//! default the ledger's own).
//!
//! `batch` sends each burst with one `udp_send_batch` (sendmmsg) instead of a send per
//! datagram (`lab peers`' "probestack fast, frame queue, batched sends" with `queue`).

mod harness;

use probestack::sim::ADDR_B;
use probestack::time::{Clock, RealClock};
use probestack::wire::Ipv4Address;

fn main() {
    let size: usize = harness::arg(1, 64);
    let bursts: usize = harness::arg(2, 20_000);
    let mut pair = harness::pair_for(1500, harness::word(3).as_deref());
    harness::sampling_arg(&pair, 4);
    let b = pair.b.udp_open();
    pair.b
        .udp_bind(b, Ipv4Address::UNSPECIFIED, 9)
        .expect("bind");
    let a = pair.a.udp_open();
    let clock = RealClock::new();
    let data = vec![0xA5u8; size];
    let batch = harness::word(5).as_deref() == Some("batch");
    let datagrams = vec![&data[..]; 32];
    let mut buf = vec![0u8; 2048];
    let (mut sent, mut got) = (0u64, 0u64);
    let start = std::time::Instant::now();
    for _ in 0..bursts {
        if batch {
            let n = pair.a.udp_send_batch(a, &datagrams, Some((ADDR_B, 9)));
            sent += n.unwrap_or(0) as u64;
        } else {
            for _ in 0..32 {
                if pair.a.udp_send_to(a, &data, ADDR_B, 9).is_ok() {
                    sent += 1;
                }
            }
        }
        let now = clock.now();
        pair.a.poll(now);
        pair.b.poll(now);
        while pair.b.udp_recv_from(b, &mut buf).is_ok() {
            got += 1;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "sent {sent} received {got} in {secs:.3} s: {:.2} M/s, {:.1} ns per datagram",
        got as f64 / secs / 1e6,
        secs * 1e9 / got.max(1) as f64
    );
}
