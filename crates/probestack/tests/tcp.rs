//! TCP between two stacks on the memory link, on a virtual clock: the handshake and the
//! closes of RFC 9293's state diagram, bulk transfers verified by hash under seeded faults,
//! corruption caught (or let through when both ends agreed to elide the checksum), the
//! timers, and the socket API's errors.

use probestack::driver::FaultConfig;
use probestack::probe::Counter;
use probestack::sim::{HostConfig, Pair, ADDR_A, ADDR_B};
use probestack::socket::tcp::{TcpError, TcpHandle};
use probestack::tcp::State;
use probestack::time::Duration;
use probestack::tuning::Tuning;

const PORT: u16 = 5001;

fn host(mtu: usize, tuning: Tuning) -> HostConfig {
    let mut h = HostConfig::with_mtu(mtu);
    h.stack.tuning = tuning;
    h.stack.tcp.msl = Duration::from_secs(1);
    h
}

fn pair(mtu: usize) -> Pair {
    Pair::new(host(mtu, Tuning::fast()), host(mtu, Tuning::fast())).unwrap()
}

/// Connects A to a listener on B; returns (A's stream, B's listener, B's stream).
fn connect(p: &mut Pair) -> (TcpHandle, TcpHandle, TcpHandle) {
    let l = p.b.tcp_listen((ADDR_B, PORT), 8).unwrap();
    let c = p.a.tcp_connect((ADDR_B, PORT)).unwrap();
    assert_eq!(p.a.tcp_state(c), Ok(State::SynSent));
    let mut s = None;
    assert!(p.run_until(Duration::from_secs(5), |p| {
        if s.is_none() {
            s = p.b.tcp_accept(l).ok();
        }
        s.is_some() && p.a.tcp_state(c) == Ok(State::Established)
    }));
    (c, l, s.unwrap())
}

/// Deterministic bytes that say where they are in the stream.
fn pattern(offset: usize, len: usize) -> Vec<u8> {
    (offset..offset + len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).rotate_left(7) as u8)
        .collect()
}

/// FNV-1a, 64-bit: a hash to compare what was sent with what arrived.
fn fnv(h: &mut u64, data: &[u8]) {
    for &b in data {
        *h ^= u64::from(b);
        *h = h.wrapping_mul(0x100_0000_01b3);
    }
}

/// Sends `total` bytes from `tx` on A to `rx` on B and checks them by hash; returns the
/// virtual time taken in milliseconds.
fn transfer(p: &mut Pair, tx: TcpHandle, rx: TcpHandle, total: usize, limit: Duration) -> u64 {
    let start = p.now();
    let (mut sent, mut got) = (0usize, 0usize);
    let (mut hs, mut hr) = (0xcbf2_9ce4_8422_2325u64, 0xcbf2_9ce4_8422_2325u64);
    let mut buf = vec![0u8; 256 * 1024];
    let chunk = 64 * 1024;
    let mut pending = Vec::new();
    let done = p.run_until(limit, |p| {
        loop {
            if pending.is_empty() && sent < total {
                let n = chunk.min(total - sent);
                pending = pattern(sent, n);
            }
            if pending.is_empty() {
                break;
            }
            match p.a.tcp_send(tx, &pending) {
                Ok(n) => {
                    fnv(&mut hs, &pending[..n]);
                    sent += n;
                    pending.drain(..n);
                }
                Err(TcpError::WouldBlock) => break,
                Err(e) => panic!("send: {e}"),
            }
        }
        loop {
            match p.b.tcp_recv(rx, &mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    fnv(&mut hr, &buf[..n]);
                    got += n;
                }
                Err(TcpError::WouldBlock) => break,
                Err(e) => panic!("recv: {e}"),
            }
        }
        got == total
    });
    assert!(
        done,
        "transfer stalled: sent {sent}, received {got} of {total}"
    );
    assert_eq!(hs, hr, "the bytes received differ from the bytes sent");
    (p.now() - start).as_millis()
}

#[test]
fn handshake_data_and_orderly_close() {
    let mut p = pair(1500);
    let (c, l, s) = connect(&mut p);
    assert_eq!(p.b.tcp_state(s), Ok(State::Established));
    let conn = p.a.tcp_connection(c).unwrap();
    // Negotiated: MSS from the MTU, scaling, timestamps, SACK.
    assert_eq!(conn.mss().0, 1460);
    assert!(conn.timestamps_enabled() && conn.sack_enabled());
    assert!(conn.window_shifts().0 > 0);

    assert_eq!(p.a.tcp_send(c, b"hello, world"), Ok(12));
    let mut buf = [0u8; 64];
    let mut n = 0;
    assert!(p.run_until(Duration::from_secs(1), |p| {
        n = p.b.tcp_recv(s, &mut buf).unwrap_or(0);
        n > 0
    }));
    assert_eq!(&buf[..n], b"hello, world");

    // A closes: FIN-WAIT-1 → FIN-WAIT-2; B sees end of stream (CLOSE-WAIT).
    p.a.tcp_close(c).unwrap();
    assert!(p.run_until(Duration::from_secs(1), |p| p.b.tcp_state(s)
        == Ok(State::CloseWait)));
    assert_eq!(p.b.tcp_recv(s, &mut buf), Ok(0));
    // B closes: LAST-ACK → CLOSED; A goes through TIME-WAIT.
    p.b.tcp_close(s).unwrap();
    p.run_for(Duration::from_millis(100));
    assert_eq!(
        p.b.tcp_state(s),
        Err(TcpError::BadHandle),
        "B's socket is gone"
    );
    p.b.tcp_close(l).unwrap();
    // After 2·MSL both sides hold nothing, and the port can be reused.
    p.run_for(Duration::from_secs(3));
    assert_eq!(p.a.ledger().counters().get(Counter::TcpResetsOut), 0);
    assert_eq!(p.b.ledger().counters().get(Counter::TcpResetsOut), 0);
    let l2 = p.b.tcp_listen((ADDR_B, PORT), 1);
    assert!(l2.is_ok());
}

#[test]
fn connection_refused_by_rst() {
    let mut p = pair(1500);
    let c = p.a.tcp_connect((ADDR_B, 9)).unwrap();
    assert!(p.run_until(Duration::from_secs(1), |p| p.a.tcp_state(c)
        == Ok(State::Closed)));
    assert_eq!(p.a.tcp_error(c), Ok(Some(TcpError::ConnectionRefused)));
    assert_eq!(
        p.a.tcp_recv(c, &mut [0; 4]),
        Err(TcpError::ConnectionRefused)
    );
    assert_eq!(p.b.ledger().counters().get(Counter::TcpDropNoSocket), 1);
}

#[test]
fn bulk_transfer_one_mib_clean() {
    let mut p = pair(1500);
    let (c, _l, s) = connect(&mut p);
    let ms = transfer(&mut p, c, s, 1 << 20, Duration::from_secs(10));
    // No latency on the link: only the last delayed ACK takes virtual time.
    assert!(ms <= 40, "{ms} ms");
    let b = p.b.ledger().counters();
    let a = p.a.ledger().counters();
    // A clean link loses nothing, and nearly every segment is predicted: B's data, A's
    // ACKs.
    assert_eq!(a.get(Counter::TcpRetransmittedSegments), 0);
    assert!(b.get(Counter::TcpPredictionDataHits) > 700);
    assert!(a.get(Counter::TcpPredictionAckHits) > 350);
}

fn faulty(seed: u64) -> FaultConfig {
    FaultConfig {
        seed,
        drop: 0.01,
        duplicate: 0.01,
        reorder: 0.01,
        reorder_hold: Duration::from_micros(200),
        latency: Duration::from_micros(50),
        jitter: Duration::from_micros(20),
        ..FaultConfig::none()
    }
}

fn bulk_under_faults(mtu: usize, total: usize, tuning: Tuning) {
    let mut a = host(mtu, tuning);
    let mut b = host(mtu, tuning);
    a.nic.rx_faults = faulty(7);
    b.nic.rx_faults = faulty(8);
    let mut p = Pair::new(a, b).unwrap();
    let (c, _l, s) = connect(&mut p);
    transfer(&mut p, c, s, total, Duration::from_secs(600));
    let ca = p.a.ledger().counters();
    assert!(ca.get(Counter::TcpRetransmittedSegments) > 0);
    assert!(ca.get(Counter::TcpFastRetransmits) > 0);
}

#[test]
fn bulk_64_mib_under_faults_mtu_1500() {
    bulk_under_faults(1500, 64 << 20, Tuning::fast());
}

#[test]
fn bulk_64_mib_under_faults_mtu_9000() {
    bulk_under_faults(9000, 64 << 20, Tuning::fast());
}

#[test]
fn bulk_under_faults_bsd_tuning() {
    bulk_under_faults(1500, 4 << 20, Tuning::bsd());
}

#[test]
fn both_directions_at_once_and_half_close() {
    let mut p = pair(1500);
    let (c, _l, s) = connect(&mut p);
    // A shuts down its side; B keeps sending and A keeps reading.
    p.a.tcp_shutdown(c).unwrap();
    assert!(p.run_until(Duration::from_secs(1), |p| p.a.tcp_state(c)
        == Ok(State::FinWait2)));
    assert_eq!(p.a.tcp_send(c, b"x"), Err(TcpError::Shutdown));
    let data = pattern(0, 300_000);
    let mut off = 0;
    let mut got = Vec::new();
    let mut buf = vec![0u8; 65536];
    assert!(p.run_until(Duration::from_secs(10), |p| {
        if off < data.len() {
            if let Ok(n) = p.b.tcp_send(s, &data[off..]) {
                off += n;
            }
        }
        while let Ok(n) = p.a.tcp_recv(c, &mut buf) {
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        got.len() == data.len()
    }));
    assert_eq!(got, data);
    p.b.tcp_close(s).unwrap();
    assert!(p.run_until(Duration::from_secs(1), |p| p.a.tcp_state(c)
        == Ok(State::TimeWait)));
    assert_eq!(p.a.tcp_recv(c, &mut buf), Ok(0));
    p.a.tcp_close(c).unwrap();
}

#[test]
fn simultaneous_open_and_close() {
    let mut p = pair(1500);
    let cfg = p.a.tcp_default_config();
    let a =
        p.a.tcp_connect_from((ADDR_B, 7000), Some(6000), cfg, false)
            .unwrap();
    let b =
        p.b.tcp_connect_from((ADDR_A, 6000), Some(7000), cfg, false)
            .unwrap();
    // Both SYNs cross: SYN-SENT → SYN-RECEIVED → ESTABLISHED on both sides.
    assert!(p.run_until(Duration::from_secs(5), |p| p.a.tcp_state(a)
        == Ok(State::Established)
        && p.b.tcp_state(b) == Ok(State::Established)));
    p.a.tcp_send(a, b"ping").unwrap();
    let mut buf = [0u8; 8];
    assert!(
        p.run_until(Duration::from_secs(1), |p| p.b.tcp_recv(b, &mut buf)
            == Ok(4))
    );
    // Both close at once: FIN-WAIT-1 → CLOSING → TIME-WAIT on both sides.
    p.a.tcp_shutdown(a).unwrap();
    p.b.tcp_shutdown(b).unwrap();
    assert_eq!(p.a.tcp_state(a), Ok(State::FinWait1));
    assert!(p.run_until(Duration::from_secs(1), |p| p.a.tcp_state(a)
        == Ok(State::TimeWait)
        && p.b.tcp_state(b) == Ok(State::TimeWait)));
    p.run_for(Duration::from_secs(3));
    assert_eq!(p.a.tcp_state(a), Ok(State::Closed));
}

#[test]
fn abort_resets_the_peer() {
    let mut p = pair(1500);
    let (c, _l, s) = connect(&mut p);
    p.a.tcp_abort(c).unwrap();
    assert!(p.run_until(Duration::from_secs(1), |p| p.b.tcp_state(s)
        == Ok(State::Closed)));
    assert_eq!(p.b.tcp_recv(s, &mut [0; 4]), Err(TcpError::ConnectionReset));
    assert_eq!(p.b.tcp_send(s, b"x"), Err(TcpError::ConnectionReset));
}

#[test]
fn close_with_unread_data_resets() {
    let mut p = pair(1500);
    let (c, _l, s) = connect(&mut p);
    p.a.tcp_send(c, b"unread").unwrap();
    assert!(p.run_until(Duration::from_secs(1), |p| p.b.tcp_recv_queued(s) == Ok(6)));
    p.b.tcp_close(s).unwrap();
    assert!(p.run_until(Duration::from_secs(1), |p| p.a.tcp_state(c)
        == Ok(State::Closed)));
    assert_eq!(p.a.tcp_error(c), Ok(Some(TcpError::ConnectionReset)));
}

#[test]
fn zero_window_then_reader_catches_up() {
    let mut a = host(1500, Tuning::fast());
    let mut b = host(1500, Tuning::fast());
    a.stack.tcp.send_buffer = 64 * 1024;
    b.stack.tcp.recv_buffer = 16 * 1024;
    let mut p = Pair::new(a, b).unwrap();
    let (c, _l, s) = connect(&mut p);
    // Fill B's window and leave it unread for a while: probes keep the connection up.
    let data = pattern(0, 48 * 1024);
    let n = p.a.tcp_send(c, &data).unwrap();
    assert_eq!(n, data.len());
    p.run_for(Duration::from_secs(20));
    // The window filled (but for less than a segment, which sender SWS avoidance keeps).
    assert!(p.b.tcp_recv_queued(s).unwrap() > 16 * 1024 - 1460);
    assert!(p.a.ledger().counters().get(Counter::TcpWindowProbes) > 0);
    assert_eq!(p.a.tcp_state(c), Ok(State::Established));
    let mut got = Vec::new();
    let mut buf = vec![0u8; 4096];
    assert!(p.run_until(Duration::from_secs(10), |p| {
        while let Ok(n) = p.b.tcp_recv(s, &mut buf) {
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        got.len() == data.len()
    }));
    assert_eq!(got, data);
}

#[test]
fn retransmission_gives_up_when_the_peer_vanishes() {
    let mut p = pair(1500);
    let (c, _l, _s) = connect(&mut p);
    // B vanishes, NIC and all: A's frames are lost, nothing answers.
    p.b = probestack::stack::Stack::new(probestack::stack::StackConfig::default());
    p.a.tcp_send(c, b"anyone there?").unwrap();
    assert!(p.run_until(Duration::from_secs(900), |p| p.a.tcp_state(c)
        == Ok(State::Closed)));
    assert_eq!(p.a.tcp_error(c), Ok(Some(TcpError::TimedOut)));
    assert!(p.a.ledger().counters().get(Counter::TcpRetransmitTimeouts) >= 12);
}

#[test]
fn corruption_is_caught_and_retransmitted() {
    let mut a = host(1500, Tuning::fast());
    let mut b = host(1500, Tuning::fast());
    // Elision off: the checksum is all that stands between corruption and the reader.
    a.stack.tuning.checksum_elision = false;
    b.stack.tuning.checksum_elision = false;
    b.nic.rx_faults = FaultConfig {
        seed: 3,
        flip_passed: 0.02,
        ..FaultConfig::none()
    };
    let mut p = Pair::new(a, b).unwrap();
    let (c, _l, s) = connect(&mut p);
    assert!(!p.a.tcp_connection(c).unwrap().checksum_elided());
    transfer(&mut p, c, s, 4 << 20, Duration::from_secs(120));
    assert!(p.b.ledger().counters().get(Counter::TcpDropBadChecksum) > 0);
    assert!(
        p.a.ledger()
            .counters()
            .get(Counter::TcpRetransmittedSegments)
            > 0
    );
}

#[test]
fn elision_is_negotiated_and_then_corruption_gets_through() {
    let mut p = pair(1500);
    let (c, _l, s) = connect(&mut p);
    // Fast tuning on a one-hop CRC link: both SYNs carried RFC 1146's "no checksum".
    assert!(p.a.tcp_connection(c).unwrap().checksum_elided());
    assert!(p.b.tcp_connection(s).unwrap().checksum_elided());
    p.a.tcp_send(c, &[0u8; 1000]).unwrap();
    p.run_for(Duration::from_millis(10));
    assert!(p.b.ledger().counters().get(Counter::TcpNoChecksumIn) > 0);

    // A peer that does not understand the option (BSD tuning) gets checksums.
    let mut p = Pair::new(host(1500, Tuning::fast()), host(1500, Tuning::bsd())).unwrap();
    let (c, _l, s) = connect(&mut p);
    assert!(!p.a.tcp_connection(c).unwrap().checksum_elided());
    assert!(!p.b.tcp_connection(s).unwrap().checksum_elided());
}

#[test]
fn header_prediction_switch() {
    for hp in [false, true] {
        let t = Tuning {
            header_prediction: hp,
            ..Tuning::fast()
        };
        let mut p = Pair::new(host(1500, t), host(1500, t)).unwrap();
        let (c, _l, s) = connect(&mut p);
        transfer(&mut p, c, s, 2 << 20, Duration::from_secs(10));
        let b = p.b.ledger().counters();
        let a = p.a.ledger().counters();
        let hits = b.get(Counter::TcpPredictionDataHits) + a.get(Counter::TcpPredictionAckHits);
        if hp {
            assert!(hits > 1000, "hits {hits}");
        } else {
            assert_eq!(hits, 0);
            assert_eq!(b.get(Counter::TcpPredictionMisses), 0);
        }
    }
}

#[test]
fn listen_backlog_overflow_is_counted() {
    let mut p = pair(1500);
    let l = p.b.tcp_listen((ADDR_B, PORT), 2).unwrap();
    let conns: Vec<_> = (0..4)
        .map(|_| p.a.tcp_connect((ADDR_B, PORT)).unwrap())
        .collect();
    p.run_for(Duration::from_millis(100));
    assert_eq!(
        p.b.ledger().counters().get(Counter::TcpDropListenOverflow),
        2
    );
    let established = conns
        .iter()
        .filter(|&&c| p.a.tcp_state(c) == Ok(State::Established))
        .count();
    assert_eq!(established, 2);
    // Accepting makes room: the others' SYN retransmissions get in.
    assert!(p.b.tcp_accept(l).is_ok());
    assert!(p.b.tcp_accept(l).is_ok());
    assert!(p.run_until(Duration::from_secs(10), |p| conns
        .iter()
        .all(|&c| p.a.tcp_state(c) == Ok(State::Established))));
}

#[test]
fn keepalive_notices_a_dead_peer() {
    let mut p = pair(1500);
    let (c, _l, _s) = connect(&mut p);
    p.a.tcp_set_keepalive(c, Some(Duration::from_secs(10)))
        .unwrap();
    // With the peer alive, probes are answered and the connection stays up.
    p.run_for(Duration::from_secs(60));
    assert_eq!(p.a.tcp_state(c), Ok(State::Established));
    assert!(p.a.ledger().counters().get(Counter::TcpKeepalives) > 0);
    // The peer vanishes, NIC and all: the probes go unanswered.
    p.b = probestack::stack::Stack::new(probestack::stack::StackConfig::default());
    p.run_for(Duration::from_secs(2000));
    assert_eq!(p.a.tcp_state(c), Ok(State::Closed));
    assert!(p.a.tcp_error(c).unwrap().is_some());
}
