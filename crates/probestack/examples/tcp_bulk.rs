//! A profiling harness: the peers experiment's TCP bulk loop (A writes 64 KiB at a time
//! until its stack takes no more, both stacks are polled, B reads everything waiting
//! into a 256 KiB buffer) between two stacks on the memory link, for callgrind or perf.
//! Prints the rate, the segments A sent (for instructions per segment) and the segments
//! (ACKs) B sent.
//!
//! `cargo run --release -p probestack --example tcp_bulk -- [MIB] [MTU] [bsd|fast|queue|zero-copy|zero-copy-plain|zero-copy-queue]`
//!
//! `queue` runs `Tuning::fast()` on a frame queue instead of the memory link (no NIC model:
//! `lab peers`' "probestack fast, frame queue").
//!
//! `zero-copy` is the peers experiment's `probestack_zero_copy`: `Tuning::fast()` with
//! checksum elision off, NICs with checksum offload, TSO and header split, A loaning its
//! pattern and B taking whole pages. `zero-copy-queue` is `probestack_zero_copy_queue`:
//! `Tuning::fast()` on a frame queue, A loaning, B taking A's memory as it came across
//! (no offloads there: both stacks compute every checksum).

mod harness;

use probestack::buf::Loan;
use probestack::driver::NicConfig;
use probestack::probe::Counter;
use probestack::sim::{HostConfig, Pair};
use probestack::socket::tcp::TcpError;
use probestack::time::{Clock, RealClock};
use probestack::tuning::Tuning;

const WRITE: usize = 64 * 1024;
const READ: usize = 256 * 1024;
/// The pattern's period: a prime, so that a misplaced byte shows.
const PERIOD: usize = 251;
/// Bytes moved before the clock starts, as in `lab peers`.
const WARM: u64 = 4 << 20;

fn main() {
    let mib: u64 = harness::arg(1, 256);
    let mtu: usize = harness::arg(2, 1500);
    let mode = harness::word(3);
    let zero_copy = matches!(
        mode.as_deref(),
        Some("zero-copy" | "zero-copy-plain" | "zero-copy-queue")
    );
    let tuning = match mode.as_deref() {
        Some("zero-copy") => Tuning {
            checksum_elision: false,
            ..Tuning::fast()
        },
        // `lab bulk`'s `zero_copy` row: its `none` (checksums computed, in a separate
        // pass, no offloads) with zero-copy sockets.
        Some("zero-copy-plain") => Tuning {
            checksum_elision: false,
            fused_copy_checksum: false,
            checksum_offload: false,
            segmentation_offload: false,
            software_segmentation: false,
            ..Tuning::fast()
        },
        Some("zero-copy-queue") => Tuning::fast(),
        other => harness::tuning(other),
    };
    let mut host = HostConfig::with_mtu(mtu);
    host.stack.tuning = tuning;
    match mode.as_deref() {
        Some("zero-copy") => {
            host.nic = NicConfig {
                header_split: true,
                ..host.nic.with_offloads()
            }
        }
        Some("zero-copy-plain") => host.nic.header_split = true,
        _ => {}
    }
    let mut pair = if matches!(mode.as_deref(), Some("queue" | "zero-copy-queue")) {
        harness::queue_pair(host)
    } else {
        harness::pair(host)
    };
    let clock = RealClock::new();
    let (a, b) = harness::connect(&mut pair, &clock);
    if zero_copy {
        pair.b
            .tcp_set_zero_copy_receive(b, true)
            .expect("zero-copy");
    }

    let pattern: Vec<u8> = (0..WRITE + PERIOD).map(|i| (i % PERIOD) as u8).collect();
    let loan = Loan::new(pattern.clone());
    let mut buf = vec![0u8; READ];
    let (mut sent, mut got) = (0u64, 0u64);
    let mut step = |pair: &mut Pair, sent: &mut u64, got: &mut u64, write: bool| {
        if write {
            for _ in 0..1024 {
                let at = (*sent % PERIOD as u64) as usize;
                let r = if zero_copy {
                    let part = loan.slice(at..at + WRITE).expect("in the loan");
                    pair.a.tcp_send_loan(a, &part)
                } else {
                    pair.a.tcp_send(a, &pattern[at..at + WRITE])
                };
                match r {
                    Ok(n) => *sent += n as u64,
                    Err(TcpError::WouldBlock) => break,
                    Err(e) => panic!("send: {e}"),
                }
            }
        }
        let now = clock.now();
        pair.a.poll(now);
        pair.b.poll(now);
        if zero_copy {
            loop {
                match pair.b.tcp_recv_zero_copy(b, READ) {
                    Ok(Some(chunk)) => *got += chunk.len() as u64,
                    Ok(None) => panic!("the stream ended"),
                    Err(TcpError::WouldBlock) => return,
                    Err(e) => panic!("receive: {e}"),
                }
            }
        }
        loop {
            match pair.b.tcp_recv(b, &mut buf) {
                Ok(0) => panic!("the stream ended"),
                Ok(n) => *got += n as u64,
                Err(TcpError::WouldBlock) => break,
                Err(e) => panic!("receive: {e}"),
            }
        }
    };
    while got < WARM {
        step(&mut pair, &mut sent, &mut got, true);
    }
    let segments0 = pair.a.ledger().counters().get(Counter::TcpSegmentsOut);
    let acks0 = pair.b.ledger().counters().get(Counter::TcpSegmentsOut);
    let got0 = got;
    let start = std::time::Instant::now();
    while got - got0 < mib << 20 {
        step(&mut pair, &mut sent, &mut got, true);
    }
    let secs = start.elapsed().as_secs_f64();
    let segments = pair.a.ledger().counters().get(Counter::TcpSegmentsOut) - segments0;
    let acks = pair.b.ledger().counters().get(Counter::TcpSegmentsOut) - acks0;
    while got < sent {
        step(&mut pair, &mut sent, &mut got, false);
    }
    let bytes = got - got0;
    println!(
        "{bytes} bytes in {secs:.3} s at MTU {mtu}: {:.2} Gbit/s, {segments} segments from A, \
         {acks} from B",
        bytes as f64 * 8.0 / secs / 1e9
    );
}
