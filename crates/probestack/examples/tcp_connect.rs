//! A profiling harness: the cost of opening TCP connections, and of polling with many
//! open. B listens; A opens `CONNECTIONS` connections to it one after another, each
//! established, accepted and carrying one 64-byte message each way, all left open. Prints
//! the time per connection and the resident memory they added (from `/proc/self/status`),
//! so that the price of a connection's buffers (1 MiB each way by default) shows; then the
//! time of a poll with all of them open and idle, which a poll that visited every
//! connection would make grow with their number (the timer queue, `tcp::timer_queue`,
//! keeps it flat). Past the stack's socket memory limit (1 GiB: 512 connections at the
//! default buffers) A's next connect is refused; the harness says so and reports on the
//! connections it opened.
//!
//! `cargo run --release -p probestack --example tcp_connect -- [CONNECTIONS] [bsd|fast|queue]`

mod harness;

use probestack::sim::ADDR_B;
use probestack::time::{Clock, RealClock};

/// Resident memory, KiB (0 where `/proc` says nothing).
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn main() {
    let connections: usize = harness::arg(1, 200);
    let mut pair = harness::pair_for(1500, harness::word(2).as_deref());
    let clock = RealClock::new();
    let listener = pair
        .b
        .tcp_listen((ADDR_B, 5001), connections.min(1024))
        .expect("listen");
    let msg = [7u8; 64];
    let (mut buf_a, mut buf_b) = ([0u8; 64], [0u8; 64]);
    let rss_before = rss_kib();
    let start = std::time::Instant::now();
    let mut open = Vec::with_capacity(connections);
    for _ in 0..connections {
        let (a, b) = match harness::open(&mut pair, listener, &clock) {
            Ok(ends) => ends,
            Err(e) => {
                // Past the socket memory limit (the buffers counted at their full size,
                // `StackConfig::socket_memory_limit`): report what opened.
                println!(
                    "A's connection {} of {connections} refused: {e}",
                    open.len() + 1
                );
                break;
            }
        };
        // One message each way, as the smallest exchange a connection is opened for.
        assert_eq!(pair.a.tcp_send(a, &msg), Ok(msg.len()));
        let (mut b_got, mut b_sent, mut a_got) = (0, false, 0);
        while a_got < msg.len() {
            let now = clock.now();
            pair.a.poll(now);
            pair.b.poll(now);
            if b_got < msg.len() {
                b_got += pair.b.tcp_recv(b, &mut buf_b[b_got..]).unwrap_or(0);
            }
            if b_got == msg.len() && !b_sent {
                b_sent = pair.b.tcp_send(b, &msg) == Ok(msg.len());
            }
            a_got += pair.a.tcp_recv(a, &mut buf_a[a_got..]).unwrap_or(0);
        }
        assert_eq!((buf_a, buf_b), (msg, msg));
        open.push((a, b));
    }
    let secs = start.elapsed().as_secs_f64();
    let connections = open.len();
    let added = rss_kib().saturating_sub(rss_before);
    // Polls with every connection open and idle: what a poll costs as connections add up.
    const IDLE_POLLS: u32 = 100_000;
    let idle = std::time::Instant::now();
    for _ in 0..IDLE_POLLS {
        let now = clock.now();
        pair.a.poll(now);
        pair.b.poll(now);
    }
    let idle_ns = idle.elapsed().as_secs_f64() * 1e9 / f64::from(2 * IDLE_POLLS);
    println!(
        "{connections} connections opened, one exchange each, all left open: {:.1} us each, \
         resident memory +{} KiB ({:.0} KiB per connection, both ends)",
        secs * 1e6 / connections.max(1) as f64,
        added,
        added as f64 / connections.max(1) as f64
    );
    println!("then an idle poll: {idle_ns:.0} ns (each stack, clock read included)");
}
