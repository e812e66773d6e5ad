//! A profiling harness: the peers experiment's TCP request/response loop (64-byte
//! requests echoed back, Nagle off at both ends) between two stacks on the memory link,
//! both polled on this thread, for callgrind or perf. Each transaction is driven as
//! `lab peers` drives it: A writes the request, both stacks are polled, B reads it whole
//! and writes it back, both are polled again, A reads the response and checks it.
//!
//! `cargo run --release -p probestack --example tcp_rr -- [TRANSACTIONS] [SIZE] [bsd|fast|queue]`
//!
//! `queue` runs `Tuning::fast()` on a frame queue instead of the memory link (no NIC model:
//! `lab peers`' "probestack fast, frame queue").

mod harness;

use probestack::probe::Counter;
use probestack::sim::Pair;
use probestack::socket::tcp::{TcpError, TcpHandle};
use probestack::stack::Stack;
use probestack::time::{Clock, RealClock};

/// Warm-up transactions before the clock starts, as in `lab peers`.
const WARM: usize = 200;

fn main() {
    let transactions: usize = harness::arg(1, 20_000);
    let size: usize = harness::arg(2, 64);
    let mut pair = harness::pair_for(1500, harness::word(3).as_deref());
    let clock = RealClock::new();
    let (a, b) = harness::connect(&mut pair, &clock);
    pair.a.tcp_set_nodelay(a, true).expect("nodelay");
    pair.b.tcp_set_nodelay(b, true).expect("nodelay");

    let mut req = vec![0u8; size];
    let mut buf_a = vec![0u8; size];
    let mut buf_b = vec![0u8; size];
    for seq in 0..WARM as u64 {
        transaction(
            &mut pair,
            (a, b),
            &clock,
            &mut req,
            seq,
            (&mut buf_a, &mut buf_b),
        );
    }
    let start = std::time::Instant::now();
    for seq in 0..transactions as u64 {
        transaction(
            &mut pair,
            (a, b),
            &clock,
            &mut req,
            WARM as u64 + seq,
            (&mut buf_a, &mut buf_b),
        );
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{transactions} transactions of {size} bytes in {secs:.3} s: {:.1} k/s, {:.0} ns each",
        transactions as f64 / secs / 1e3,
        secs * 1e9 / transactions.max(1) as f64
    );
    let count = |c: Counter| pair.a.ledger().counters().get(c) + pair.b.ledger().counters().get(c);
    println!(
        "both ends: {} segments, header prediction {} data + {} ACK hits, {} misses; {} idle outputs",
        count(Counter::TcpSegmentsOut),
        count(Counter::TcpPredictionDataHits),
        count(Counter::TcpPredictionAckHits),
        count(Counter::TcpPredictionMisses),
        count(Counter::TcpOutputIdle)
    );
}

fn send(stack: &mut Stack, h: TcpHandle, data: &[u8]) -> usize {
    match stack.tcp_send(h, data) {
        Ok(n) => n,
        Err(TcpError::WouldBlock) => 0,
        Err(e) => panic!("send: {e}"),
    }
}

fn recv(stack: &mut Stack, h: TcpHandle, buf: &mut [u8]) -> usize {
    match stack.tcp_recv(h, buf) {
        Ok(0) => panic!("the stream ended"),
        Ok(n) => n,
        Err(TcpError::WouldBlock) => 0,
        Err(e) => panic!("receive: {e}"),
    }
}

/// One transaction, as `lab peers` runs it (crates/lab/src/experiments/peers.rs).
fn transaction(
    pair: &mut Pair,
    (a, b): (TcpHandle, TcpHandle),
    clock: &RealClock,
    req: &mut [u8],
    seq: u64,
    (buf_a, buf_b): (&mut [u8], &mut [u8]),
) {
    let n = req.len();
    req[..8.min(n)].copy_from_slice(&seq.to_le_bytes()[..8.min(n)]);
    let (mut a_sent, mut b_got, mut b_sent, mut a_got) = (0, 0, 0, 0);
    for _ in 0..1_000_000 {
        if a_sent < n {
            a_sent += send(&mut pair.a, a, &req[a_sent..]);
        }
        let now = clock.now();
        pair.a.poll(now);
        pair.b.poll(now);
        while b_got < n {
            match recv(&mut pair.b, b, &mut buf_b[b_got..n]) {
                0 => break,
                k => b_got += k,
            }
        }
        if b_got == n && b_sent < n {
            b_sent += send(&mut pair.b, b, &buf_b[b_sent..n]);
            pair.b.poll(now);
            pair.a.poll(now);
        }
        while a_got < n {
            match recv(&mut pair.a, a, &mut buf_a[a_got..n]) {
                0 => break,
                k => a_got += k,
            }
        }
        if a_got == n {
            assert_eq!(
                &buf_a[..n],
                &req[..],
                "transaction {seq}: the response differs"
            );
            return;
        }
    }
    panic!("transaction {seq}: no response");
}
