//! Loss recovery on the virtual clock: A sends B a pattern over the memory link, whose
//! wire drops (and, if asked, reorders and duplicates) a share of the frames each way;
//! prints the virtual time the transfer took and how A recovered (fast retransmits, loss
//! probes, lost retransmissions sent again, retransmission timeouts, congestion responses
//! undone). Deterministic: the same arguments give the same figures.
//!
//! `cargo run --release -p probestack --example tcp_loss -- [MIB] [DROP_%] [REORDER_%] [SEED] [bsd|fast] [no-rack,no-tlp,no-undo,no-lt,no-sack|all] [DEPTH]`
//!
//! `REORDER_%` also sets the share of duplicated frames (as `FaultConfig::lossy` has them
//! equal). The last word turns off `TcpConfig::rack`, `TcpConfig::tail_loss_probes`,
//! `TcpConfig::spurious_undo`, `TcpConfig::limited_transmit` and `TcpConfig::sack` at
//! both ends (`all` leaves them on). `DEPTH` is how many
//! frames a reordered one lets pass (`FaultConfig::reorder_depth`). Defaults: 16 MiB, 1%
//! dropped, none reordered, seed 7 (B's wire seed + 1), `Tuning::fast()`, MTU 1500, all
//! on, depth 1.

mod harness;

use probestack::driver::FaultConfig;
use probestack::sim::{HostConfig, Pair, ADDR_B};
use probestack::socket::tcp::TcpError;
use probestack::tcp::State;
use probestack::time::Duration;

fn main() {
    let mib: usize = harness::arg(1, 16);
    let drop: f64 = harness::arg(2, 1.0);
    let reorder: f64 = harness::arg(3, 0.0);
    let seed: u64 = harness::arg(4, 7);
    let tuning = harness::tuning(harness::word(5).as_deref());
    let off = harness::word(6).unwrap_or_default();
    let depth: u32 = harness::arg(7, 1);
    let wire = |seed| FaultConfig {
        drop: drop / 100.0,
        reorder: reorder / 100.0,
        duplicate: reorder / 100.0,
        reorder_depth: depth,
        ..FaultConfig::lossy(seed)
    };
    let host = |seed| {
        let mut h = HostConfig::with_mtu(1500);
        h.stack.tuning = tuning;
        h.stack.tcp.rack = !off.contains("no-rack");
        h.stack.tcp.tail_loss_probes = !off.contains("no-tlp");
        h.stack.tcp.spurious_undo = !off.contains("no-undo");
        h.stack.tcp.limited_transmit = !off.contains("no-lt");
        h.stack.tcp.sack = !off.contains("no-sack");
        h.nic.rx_faults = wire(seed);
        h
    };
    let mut p = Pair::new(host(seed), host(seed + 1)).expect("memory link");

    let listener = p.b.tcp_listen((ADDR_B, 5001), 1).expect("listen");
    let a = p.a.tcp_connect((ADDR_B, 5001)).expect("connect");
    let mut b = None;
    let open = p.run_until(Duration::from_secs(60), |p| {
        if b.is_none() {
            b = p.b.tcp_accept(listener).ok();
        }
        b.is_some() && p.a.tcp_state(a) == Ok(State::Established)
    });
    let b = b.filter(|_| open).expect("the connection did not open");

    let total = mib << 20;
    let byte = |i: usize| (i % 251) as u8;
    let data: Vec<u8> = (0..total).map(byte).collect();
    let (mut sent, mut got) = (0, 0);
    let mut buf = vec![0u8; 256 * 1024];
    let start = p.now();
    let done = p.run_until(Duration::from_secs(3600), |p| {
        if sent < total {
            match p.a.tcp_send(a, &data[sent..]) {
                Ok(n) => sent += n,
                Err(TcpError::WouldBlock) => {}
                Err(e) => panic!("send: {e}"),
            }
        }
        loop {
            match p.b.tcp_recv(b, &mut buf) {
                Ok(0) | Err(TcpError::WouldBlock) => break,
                Ok(n) => {
                    assert!(
                        buf[..n]
                            .iter()
                            .enumerate()
                            .all(|(i, &x)| x == byte(got + i)),
                        "byte {got} onward differs from what was sent"
                    );
                    got += n;
                }
                Err(e) => panic!("receive: {e}"),
            }
        }
        got == total
    });
    assert!(done, "the transfer stalled at {got} of {total} bytes");
    let ms = (p.now() - start).as_millis();
    let stats = p.a.tcp_connection(a).expect("A's connection").stats();
    println!(
        "{mib} MiB, {drop}% dropped, {reorder}% reordered (depth {depth}) and duplicated, \
         seed {seed}: \
         {ms} ms virtual, {} retransmission timeouts, {} fast retransmits ({} after the \
         reordering window), {} loss probes ({} repaired a loss), {} lost retransmissions \
         resent, {} segments retransmitted, {} responses undone, DupThresh {} at the end",
        stats.timeouts,
        stats.fast_retransmits,
        stats.reorder_window_losses,
        stats.loss_probes,
        stats.loss_probe_repairs,
        stats.lost_retransmissions,
        stats.retransmitted_segments,
        stats.spurious_undos,
        p.a.tcp_connection(a).expect("A's connection").dup_thresh()
    );
}
