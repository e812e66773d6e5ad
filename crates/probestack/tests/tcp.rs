//! TCP between two stacks on the memory link, on a virtual clock: the handshake and the
//! closes of RFC 9293's state diagram, bulk transfers verified by hash under seeded faults,
//! corruption caught (or let through when both ends agreed to elide the checksum), the
//! timers, and the socket API's errors.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use common::capture::{
    assert_same_frames, captured_frames, captured_records, template_tunings, SharedBytes,
};
use common::router::{icmp_frame, quoted, Hop, Routed};
use common::tamper::{
    corrupt_first_fragment, refragmenting, tcp_segment, tcp_seq, LoseAndReorder, SeededFaults,
    Tamper, Tampered,
};
use common::transfer::{accepted_on_a, accepted_on_b, fnv, pattern, transfer};
use common::wire_rules::Watch;
use probestack::buf::PacketBuf;
use probestack::driver::pcap::{PcapMode, PcapWriter};
use probestack::driver::{Device, FaultConfig, MemoryNic, NicConfig, TxMeta};
use probestack::ip::IpFields;
use probestack::probe::Counter;
use probestack::sim::{HostConfig, Pair, ADDR_A, ADDR_B, MAC_A, MAC_B};
use probestack::socket::tcp::{TcpError, TcpHandle};
use probestack::tcp::{ConnStats, State, TcpConfig};
use probestack::time::{Duration, Instant};
use probestack::tuning::Tuning;
use probestack::wire::arp::{self as arp_wire, ArpOperation, ArpRepr};
use probestack::wire::ethernet;
use probestack::wire::icmpv4::{DstUnreachable, Icmpv4Repr};
use probestack::wire::ipv4;

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
    (c, l, accepted_on_b(p, l, c))
}

/// A TCP segment in a recorded frame, as an independent parser (etherparse) reads it.
#[derive(Clone, Copy, Debug)]
struct Seen {
    /// When the NIC sent (or received) the frame, on the virtual clock.
    at: Instant,
    seq: u32,
    ack: u32,
    syn: bool,
    fin: bool,
    rst: bool,
    psh: bool,
    ack_flag: bool,
    window: u16,
    /// Data bytes, by the IP header's total length.
    len: usize,
}

/// What a capture holds: the TCP segments recorded so far, in order.
trait Segments {
    fn segments(&self) -> Vec<Seen>;
}

impl Segments for SharedBytes {
    fn segments(&self) -> Vec<Seen> {
        use etherparse::{SlicedPacket, TransportSlice};
        captured_records(self)
            .iter()
            .filter_map(|r| {
                let sliced = SlicedPacket::from_ethernet(&r.data).ok()?;
                let Some(TransportSlice::Tcp(t)) = &sliced.transport else {
                    return None;
                };
                Some(Seen {
                    at: Instant::from_nanos(r.time_ns),
                    seq: t.sequence_number(),
                    ack: t.acknowledgment_number(),
                    syn: t.syn(),
                    fin: t.fin(),
                    rst: t.rst(),
                    psh: t.psh(),
                    ack_flag: t.ack(),
                    window: t.window_size(),
                    len: t.payload().len(),
                })
            })
            .collect()
    }
}

/// Two stacks configured as `a` and `b` on the memory link, each NIC's frames recorded
/// as `modes` says (A's, then B's), with the time each went or came.
fn recorded_pair(
    a: HostConfig,
    b: HostConfig,
    modes: [PcapMode; 2],
) -> (Pair, SharedBytes, SharedBytes) {
    let (at_a, at_b) = (SharedBytes::default(), SharedBytes::default());
    let wrap = |sink: SharedBytes, mode| {
        move |nic: MemoryNic| -> Box<dyn Device + Send> {
            Box::new(PcapWriter::new(nic, sink, mode).unwrap())
        }
    };
    let p = Pair::with_devices(
        a,
        b,
        wrap(at_a.clone(), modes[0]),
        wrap(at_b.clone(), modes[1]),
    )
    .unwrap();
    (p, at_a, at_b)
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
    for per_batch in [false, true] {
        let t = Tuning {
            tcp_output_per_batch: per_batch,
            ..Tuning::fast()
        };
        let mut p = Pair::new(host(1500, t), host(1500, t)).unwrap();
        let (c, _l, s) = connect(&mut p);
        let ms = transfer(&mut p, c, s, 1 << 20, Duration::from_secs(10));
        // No latency on the link: only the last delayed ACK takes virtual time.
        assert!(ms <= 40, "{ms} ms");
        let b = p.b.ledger().counters();
        let a = p.a.ledger().counters();
        // A clean link loses nothing, and nearly every segment is predicted: B's data,
        // A's ACKs (but for the handshake's few).
        assert_eq!(a.get(Counter::TcpRetransmittedSegments), 0);
        let data_segments = b.get(Counter::TcpSegmentsIn);
        let acks = a.get(Counter::TcpSegmentsIn);
        assert!(b.get(Counter::TcpPredictionDataHits) > data_segments * 95 / 100);
        assert!(a.get(Counter::TcpPredictionAckHits) >= (acks - 5) * 90 / 100);
        if per_batch {
            // One ACK per receive batch, not one per two segments.
            assert!(
                acks < data_segments / 4,
                "{acks} ACKs for {data_segments} segments"
            );
        } else {
            assert!(
                acks >= data_segments / 2,
                "{acks} ACKs for {data_segments} segments"
            );
        }
    }
}

/// Every segment B takes is demultiplexed through its PCB table, whose counts the stack
/// gives (`tcp_pcb_stats`); with `fast`'s one-behind receive cache one connection's
/// segments hit it, with `bsd`'s linear scan and no cache nothing is cached.
#[test]
fn tcp_pcb_lookups_and_cache_hits_are_counted() {
    for t in [Tuning::fast(), Tuning::bsd()] {
        let mut p = Pair::new(host(1500, t), host(1500, t)).unwrap();
        let (c, _l, s) = connect(&mut p);
        let before = p.b.tcp_pcb_stats();
        transfer(&mut p, c, s, 256 << 10, Duration::from_secs(10));
        let pcbs = p.b.tcp_pcb_stats().since(&before);
        let segments = p.b.ledger().counters().get(Counter::TcpSegmentsIn);
        assert!(
            pcbs.lookups >= segments * 9 / 10,
            "{pcbs:?}, {segments} segments"
        );
        assert_eq!(pcbs.unmatched, 0, "{pcbs:?}");
        if t.pcb_recv_cache {
            assert!(pcbs.recv_cache_hits >= pcbs.lookups * 9 / 10, "{pcbs:?}");
        } else {
            assert_eq!(pcbs.recv_cache_hits + pcbs.recv_cache_misses, 0, "{pcbs:?}");
            assert!(pcbs.examined >= pcbs.lookups, "{pcbs:?}");
        }
    }
}

fn bulk_under_faults(mtu: usize, total: usize, tuning: Tuning) {
    let mut a = host(mtu, tuning);
    let mut b = host(mtu, tuning);
    a.nic.rx_faults = FaultConfig::lossy(7);
    b.nic.rx_faults = FaultConfig::lossy(8);
    // Each end's segments held to TCP's rules on the wire (`common::wire_rules`).
    let broken = Arc::new(Mutex::new(Vec::new()));
    let watched = |names| {
        let broken = broken.clone();
        move |nic| -> Box<dyn Device + Send> {
            let tamper = Watch::new(names, broken);
            Box::new(Tampered { dev: nic, tamper })
        }
    };
    let mut p = Pair::with_devices(a, b, watched(["A", "B"]), watched(["B", "A"])).unwrap();
    let (c, _l, s) = connect(&mut p);
    transfer(&mut p, c, s, total, Duration::from_secs(600));
    let ca = p.a.ledger().counters();
    assert!(ca.get(Counter::TcpRetransmittedSegments) > 0);
    assert!(ca.get(Counter::TcpFastRetransmits) > 0);
    let broken = broken.lock().unwrap();
    assert!(broken.is_empty(), "rules broken on the wire: {broken:#?}");
}

#[test]
fn bulk_64_mib_under_faults_mtu_1500() {
    bulk_under_faults(1500, 64 << 20, Tuning::fast());
}

#[test]
fn bulk_64_mib_under_faults_mtu_9000() {
    bulk_under_faults(9000, 64 << 20, Tuning::fast());
}

/// Moves `total` bytes from A to B at `mtu` (`Tuning::fast()`, data by reference) through
/// a frame queue whose two directions are tampered with by `faults(seed)`, A's seed 21 and
/// B's 22; checked by hash.
fn through_faulty_queue<T: Tamper + 'static>(
    mtu: usize,
    total: usize,
    faults: impl Fn(u64) -> T,
) -> Pair {
    let wrap =
        |tamper: T| move |dev| -> Box<dyn Device + Send> { Box::new(Tampered { dev, tamper }) };
    let [to_a, to_b] = [21, 22].map(faults);
    let (a, b) = (host(mtu, Tuning::fast()), host(mtu, Tuning::fast()));
    let mut p = Pair::on_frame_queue_with(a, b, wrap(to_a), wrap(to_b)).unwrap();
    let (c, _l, s) = connect(&mut p);
    transfer(&mut p, c, s, total, Duration::from_secs(600));
    p
}

/// 64 MiB at MTU 9000 through a frame queue that loses, duplicates, reorders, delays and
/// corrupts frames (seeded), checked by hash: B's in-order segments wait unverified for its
/// reads (`Tuning::tcp_verify_on_read`) among out-of-order data, duplicates and holes.
#[test]
fn bulk_64_mib_under_faults_verified_on_read() {
    let p = through_faulty_queue(9000, 64 << 20, |seed| SeededFaults::new(seed, 5, 5, 10, 3));
    assert_sent_by_reference_and_verified_on_read_under_faults(&p);
}

/// The same at MTU 1500, where the frame queue takes segments by reference too
/// (`DeviceCaps::by_reference_min`): eight times the segments for the bytes, each summed
/// from one piece cut for it.
#[test]
fn bulk_16_mib_at_1500_under_faults_verified_on_read() {
    let p = through_faulty_queue(1500, 16 << 20, |seed| SeededFaults::new(seed, 5, 5, 10, 3));
    assert_sent_by_reference_and_verified_on_read_under_faults(&p);
}

fn assert_sent_by_reference_and_verified_on_read_under_faults(p: &Pair) {
    let ca = |k| p.a.ledger().counters().get(k);
    let cb = |k| p.b.ledger().counters().get(k);
    assert!(ca(Counter::TcpSegmentsByReference) > 1000);
    assert!(ca(Counter::TcpRetransmittedSegments) > 10);
    assert!(cb(Counter::TcpOutOfOrderSegments) > 10);
    assert!(cb(Counter::TcpSegmentsDeferred) > 1000);
    assert!(cb(Counter::TcpVerifiedOnRead) > 1000);
    assert!(cb(Counter::TcpDropBadChecksum) > 5);
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
        p.a.tcp_connect_from((ADDR_B, 7000), (ADDR_A, 6000), cfg, false)
            .unwrap();
    let b =
        p.b.tcp_connect_from((ADDR_A, 6000), (ADDR_B, 7000), cfg, false)
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

/// A connection on which A (a 64 KiB send buffer) has written `total` bytes of the
/// pattern to B (a 16 KiB receive buffer, not read): B's window fills and the rest waits
/// at A. Returns the pair, A's and B's ends, and the data.
fn filling_b_window(total: usize) -> (Pair, TcpHandle, TcpHandle, Vec<u8>) {
    let mut a = host(1500, Tuning::fast());
    let mut b = host(1500, Tuning::fast());
    a.stack.tcp.send_buffer = 64 * 1024;
    b.stack.tcp.recv_buffer = 16 * 1024;
    let mut p = Pair::new(a, b).unwrap();
    let (c, _l, s) = connect(&mut p);
    let data = pattern(0, total);
    assert_eq!(p.a.tcp_send(c, &data), Ok(total));
    (p, c, s, data)
}

/// B's window fills and stays shut while A probes it, then B reads it all. The link
/// loses nothing, so nothing is sent again: the data that follows the window's opening
/// starts with the byte the probes sent past the window, and is new data for all that
/// (counted so until the thirty-fifth session, and timed by no RTT sample).
#[test]
fn zero_window_then_reader_catches_up() {
    // Fill B's window and leave it unread for a while: probes keep the connection up.
    let (mut p, c, s, data) = filling_b_window(48 * 1024);
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
    let counters = p.a.ledger().counters();
    assert_eq!(counters.get(Counter::TcpRetransmittedSegments), 0);
    assert_eq!(counters.get(Counter::TcpRetransmitTimeouts), 0);
}

/// Zero-window probes back off (RFC 9293 §3.8.6.1): the first goes one RTO after the
/// window shut (SHLD-29), and each later one twice as long after the one before
/// (SHLD-30), up to a minute apart. B's window shuts with data waiting at A and B not
/// reading; by the times of the frames on the wire, A's one-byte probes go one RTO (200
/// ms, RFC 6298's floor as the stack has it) after B's ACK that shut it, then 0.4, 0.8,
/// ... 51.2 s apart, then 60 s apart from there on; each is counted (`TcpWindowProbes`)
/// and B answers each. (Until the thirty-fifth session the doubling stopped at 64 RTOs,
/// 12.8 s here.)
#[test]
fn zero_window_probes_back_off_by_doubling_to_a_minute() {
    let (mut a, mut b) = (host(1500, Tuning::fast()), host(1500, Tuning::fast()));
    a.stack.tcp.send_buffer = 64 * 1024;
    b.stack.tcp.recv_buffer = 16 * 1024;
    let (mut p, from_a, from_b) = recorded_pair(a, b, [PcapMode::TxOnly, PcapMode::TxOnly]);
    let (c, _l, s) = connect(&mut p);
    let data = pattern(0, 48 * 1024);
    assert_eq!(p.a.tcp_send(c, &data), Ok(data.len()));
    p.run_for(Duration::from_secs(400));
    assert_eq!(p.b.tcp_recv_queued(s), Ok(16 * 1024));
    let shut = from_b
        .segments()
        .into_iter()
        .find(|s| !s.syn && s.window == 0);
    let shut = shut.expect("B's window never shut");
    let probes: Vec<Seen> = from_a
        .segments()
        .into_iter()
        .filter(|s| s.len > 0 && s.at >= shut.at)
        .collect();
    // Each probe is the byte at the shut window's edge, sent again and again.
    assert!(
        probes.iter().all(|s| s.len == 1 && s.seq == shut.ack),
        "{probes:?}"
    );
    let mut times = vec![shut.at];
    times.extend(probes.iter().map(|s| s.at));
    let gaps: Vec<u64> = times
        .windows(2)
        .map(|w| (w[1] - w[0]).as_millis())
        .collect();
    // Probes 0.2 s after the window shut, then at 0.6, 1.4, ... 102.2, 162.2, ... s.
    assert!(gaps.len() >= 12, "{gaps:?}");
    let want: Vec<u64> = (0..gaps.len()).map(|i| (200u64 << i).min(60_000)).collect();
    assert_eq!(gaps, want);
    let counted = p.a.ledger().counters().get(Counter::TcpWindowProbes);
    assert_eq!(counted, probes.len() as u64);
    // B answered every probe with its window still shut.
    let answers = from_b
        .segments()
        .into_iter()
        .filter(|s| s.at > shut.at && s.ack == shut.ack && s.window == 0)
        .count();
    assert_eq!(answers, probes.len());
    assert_eq!(p.a.tcp_state(c), Ok(State::Established));
}

/// A peer that vanishes behind its shut window leaves the probes unanswered: after
/// three in a row (R1) the application is told (RFC 9293 SHLD-9, the soft error
/// `TimedOut`) and IP advised (MUST-20), as after three timeouts of a segment, long
/// before the connection is given up.
#[test]
fn probes_a_vanished_peer_leaves_unanswered_are_a_delivery_problem() {
    let (mut p, c, _s, _data) = filling_b_window(48 * 1024);
    p.run_for(Duration::from_secs(5));
    assert_eq!(p.a.tcp_soft_error(c), Ok(None), "probes answered");
    let probes = p.a.ledger().counters().get(Counter::TcpWindowProbes);
    p.b = probestack::stack::Stack::new(probestack::stack::StackConfig::default());
    assert!(p.run_until(Duration::from_secs(600), |p| {
        p.a.tcp_soft_error(c) == Ok(Some(TcpError::TimedOut))
    }));
    // The first probe after B went may count an ACK from before it.
    let after = p.a.ledger().counters().get(Counter::TcpWindowProbes) - probes;
    assert!((3..=4).contains(&after), "{after} probes");
    assert_eq!(p.a.tcp_state(c), Ok(State::Established));
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

/// R2, the retransmissions after which a connection is given up, lasts at least 100 s
/// (RFC 9293 §3.8.3, SHLD-11), and reaching it closes the connection (MUST-20). B
/// vanishes (A's link loses all A sends) and A sends a segment: by the times of A's
/// frames, the connection is given up 342 s after the segment's first retransmission
/// (RTOs from 200 ms doubled to the 60 s cap: 0.2 + 0.4 + ... + 51.2 + 4 × 60 s), after
/// its twelve retransmissions (`max_retransmissions`).
#[test]
fn a_vanished_peer_is_given_up_on_no_sooner_than_100_seconds_after_the_first_retransmission() {
    /// A's link, losing everything A sends once B is gone.
    struct Gone(Arc<AtomicBool>);
    impl Tamper for Gone {
        fn send(&mut self, frame: PacketBuf, meta: TxMeta) -> Vec<(PacketBuf, TxMeta)> {
            if self.0.load(Ordering::Relaxed) {
                return Vec::new();
            }
            vec![(frame, meta)]
        }
    }
    let gone = Arc::new(AtomicBool::new(false));
    let from_a = SharedBytes::default();
    let (sink, tamper) = (from_a.clone(), Gone(gone.clone()));
    let h = host(1500, Tuning::fast());
    // Recorded as A sends them, before the link loses them.
    let mut p = Pair::with_devices(
        h.clone(),
        h,
        move |nic| {
            let dev = Tampered { dev: nic, tamper };
            Box::new(PcapWriter::new(dev, sink, PcapMode::TxOnly).unwrap())
        },
        |nic| Box::new(nic),
    )
    .unwrap();
    let (c, _l, _s) = connect(&mut p);
    gone.store(true, Ordering::Relaxed);
    let seq = p.a.tcp_connection(c).unwrap().snd_nxt().0;
    assert_eq!(p.a.tcp_send(c, b"anyone there?"), Ok(13));
    assert!(p.run_until(Duration::from_secs(900), |p| p.a.tcp_state(c)
        == Ok(State::Closed)));
    let gave_up = p.now();
    assert_eq!(p.a.tcp_error(c), Ok(Some(TcpError::TimedOut)));
    let sent: Vec<Instant> = from_a
        .segments()
        .iter()
        .filter(|s| s.seq == seq && s.len == 13)
        .map(|s| s.at)
        .collect();
    assert!(sent.len() >= 2, "{sent:?}");
    let after = gave_up - sent[1];
    assert!(
        after >= Duration::from_secs(100),
        "given up {after:?} after the first retransmission"
    );
    assert_eq!(after.as_millis() / 1000, 342, "given up {after:?} after it");
    let stats = p.a.tcp_stats(c).unwrap();
    assert_eq!(stats.timeouts, 12, "{stats:?}");
}

/// The application sets R2 for a connection (RFC 9293 §3.8.3, MUST-21): through
/// `tcp_connect_with`'s `TcpConfig::max_retransmissions`, or the stack's default config
/// for the connections made after. Three connections from A to a B that then vanishes,
/// each sending a segment: one with the default (12), one connected with 3, and one
/// connected after the default was set to 5. Each is given up after exactly its number
/// of retransmission timeouts, the lower ones sooner (3 s and 12.6 s after the send),
/// while the default one is still trying; the stack counts all 20 timeouts
/// (`TcpRetransmitTimeouts`).
#[test]
fn the_application_sets_how_many_retransmissions_give_a_connection_up() {
    let mut p = pair(1500);
    let l = p.b.tcp_listen((ADDR_B, PORT), 8).unwrap();
    let default = p.a.tcp_connect((ADDR_B, PORT)).unwrap();
    let mut config = p.a.tcp_default_config();
    assert_eq!(config.max_retransmissions, 12);
    config.max_retransmissions = 3;
    let three = p.a.tcp_connect_with((ADDR_B, PORT), config).unwrap();
    config.max_retransmissions = 5;
    p.a.set_tcp_default_config(config);
    let five = p.a.tcp_connect((ADDR_B, PORT)).unwrap();
    let conns = [(three, 3), (five, 5), (default, 12)];
    for (c, _) in conns {
        accepted_on_b(&mut p, l, c);
    }
    p.b = probestack::stack::Stack::new(probestack::stack::StackConfig::default());
    for (c, _) in conns {
        assert_eq!(p.a.tcp_send(c, b"anyone there?"), Ok(13));
    }
    let start = p.now();
    let mut took = Vec::new();
    for (c, r2) in conns {
        assert!(p.run_until(Duration::from_secs(900), |p| p.a.tcp_state(c)
            == Ok(State::Closed)));
        took.push((p.now() - start).as_millis());
        assert_eq!(p.a.tcp_error(c), Ok(Some(TcpError::TimedOut)));
        assert_eq!(p.a.tcp_stats(c).unwrap().timeouts, r2, "R2 of {r2}");
        // The ones with more to go are still trying.
        for (other, more) in conns {
            if more > r2 {
                assert_eq!(p.a.tcp_state(other), Ok(State::Established));
            }
        }
    }
    assert!(took[0] < took[1] && took[1] < took[2], "{took:?} ms");
    assert_eq!(took[..2], [3_000, 12_600], "{took:?} ms");
    let timeouts = p.a.ledger().counters().get(Counter::TcpRetransmitTimeouts);
    assert_eq!(timeouts, 3 + 5 + 12);
}

/// A SYN nobody answers is sent again for three minutes (RFC 9293 MUST-23) before
/// connecting is given up: the SYN and seven retransmissions, the connection timed out
/// 183 s after the first.
#[test]
fn an_unanswered_syn_is_retransmitted_for_three_minutes() {
    let mut p = pair(1500);
    // Nothing at B: A's SYNs are lost, nothing answers.
    p.b = probestack::stack::Stack::new(probestack::stack::StackConfig::default());
    let start = p.now();
    let c = p.a.tcp_connect((ADDR_B, PORT)).unwrap();
    assert!(p.run_until(Duration::from_secs(900), |p| p.a.tcp_state(c)
        == Ok(State::Closed)));
    let took = p.now() - start;
    assert!(
        took >= Duration::from_secs(180) && took < Duration::from_secs(190),
        "gave up after {took:?}"
    );
    assert_eq!(p.a.tcp_error(c), Ok(Some(TcpError::TimedOut)));
    assert_eq!(
        p.a.ledger().counters().get(Counter::TcpRetransmitTimeouts),
        7
    );
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
    // Without SYN cookies, which would answer the SYNs past the backlog (tests/limits.rs).
    let mut config = p.b.tcp_default_config();
    config.syn_cookies = false;
    p.b.set_tcp_default_config(config);
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

/// Keepalives are off by default (RFC 9293 MUST-25): three idle hours send none. Turned
/// on with the default interval (MUST-28, two hours), the first probe goes when the
/// connection has been idle that long and not before (MUST-26).
#[test]
fn keepalives_are_off_by_default_and_wait_two_idle_hours_when_on() {
    let mut p = pair(1500);
    let (c, _l, _s) = connect(&mut p);
    let probes = |p: &Pair| p.a.ledger().counters().get(Counter::TcpKeepalives);
    p.run_for(Duration::from_secs(3 * 60 * 60));
    assert_eq!(probes(&p), 0);
    let idle = probestack::tcp::connection::KEEPALIVE_IDLE;
    p.a.tcp_set_keepalive(c, Some(idle)).unwrap();
    p.run_for(Duration::from_millis(idle.as_millis() - 1000));
    assert_eq!(probes(&p), 0, "a probe before two idle hours");
    p.run_for(Duration::from_secs(2));
    assert_eq!(probes(&p), 1);
    assert_eq!(p.a.tcp_state(c), Ok(State::Established));
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

/// A keepalive probe carries no data (RFC 9293 §3.8.4, SHLD-12): on the wire it is a
/// bare ACK whose sequence number is SND.UNA − 1, a byte B has acknowledged already, so
/// that a live peer answers it with an ACK (RFC 1122 §4.2.3.6). After an exchange of
/// data A turns keepalives on with a 10 s idle time: in 35 idle seconds it sends three
/// probes, 10 s apart (each answer starts the idle time again), and nothing else; every
/// one is zero bytes of data at SND.UNA − 1, acknowledging all B sent, with no flag but
/// ACK.
#[test]
fn a_keepalive_probe_is_a_bare_ack_one_byte_behind() {
    let h = host(1500, Tuning::fast());
    let (mut p, from_a, _) = recorded_pair(h.clone(), h, [PcapMode::TxOnly; 2]);
    let (c, _l, s) = connect(&mut p);
    transfer(&mut p, c, s, 10_000, Duration::from_secs(1));
    assert_eq!(p.b.tcp_send(s, b"reply"), Ok(5));
    let mut buf = [0u8; 8];
    assert!(
        p.run_until(Duration::from_secs(1), |p| p.a.tcp_recv(c, &mut buf)
            == Ok(5))
    );
    p.run_for(Duration::from_secs(1));
    let conn = p.a.tcp_connection(c).unwrap();
    let (una, rcv_nxt) = (conn.snd_una(), conn.rcv_nxt());
    assert_eq!(una, conn.snd_nxt(), "data unacknowledged");
    let before = from_a.segments().len();
    let start = p.now();
    p.a.tcp_set_keepalive(c, Some(Duration::from_secs(10)))
        .unwrap();
    p.run_for(Duration::from_secs(35));
    let probes = from_a.segments().split_off(before);
    assert_eq!(probes.len(), 3, "{probes:?}");
    for (i, probe) in probes.iter().enumerate() {
        assert_eq!(probe.len, 0, "probe {i} carries data");
        assert_eq!(probe.seq, (una - 1).0, "probe {i}");
        assert_eq!(probe.ack, rcv_nxt.0, "probe {i}");
        let flags = (probe.ack_flag, probe.syn, probe.fin, probe.rst, probe.psh);
        assert_eq!(flags, (true, false, false, false, false), "probe {i}");
        let idle = (probe.at - start).as_millis();
        assert_eq!(idle, 10_000 * (i as u64 + 1), "probe {i}");
    }
    assert_eq!(p.a.ledger().counters().get(Counter::TcpKeepalives), 3);
    assert_eq!(p.a.tcp_state(c), Ok(State::Established));
}

/// Keepalives are for an idle connection: one whose data waits on the peer's shut window
/// (A shut down behind it, in FIN-WAIT-1), probed by the persist timer at up to a minute
/// apart, is left to that timer. Before, the keepalive timer counted probes that no state
/// but ESTABLISHED and CLOSE-WAIT sends, and timed the connection out between two
/// persist probes the peer answered.
#[test]
fn keepalive_leaves_a_connection_with_data_waiting_alone() {
    let (mut a, mut b) = (host(1500, Tuning::fast()), host(1500, Tuning::fast()));
    a.stack.tcp.send_buffer = 64 << 10;
    // Three probes a second apart after a second idle: given up in 4 s.
    a.stack.tcp.keepalive = Some(Duration::from_secs(1));
    a.stack.tcp.keepalive_interval = Duration::from_secs(1);
    a.stack.tcp.keepalive_probes = 3;
    b.stack.tcp.recv_buffer = 16 << 10;
    let mut p = Pair::new(a, b).unwrap();
    let (c, _l, s) = connect(&mut p);
    let data = pattern(0, 300_000);
    let mut sent = 0;
    // B's reader is away: its window shuts with most of the data still in A's buffer.
    assert!(p.run_until(Duration::from_secs(10), |p| {
        sent += p.a.tcp_send(c, &data[sent..]).unwrap_or(0);
        p.a.tcp_connection(c).unwrap().snd_una() == p.a.tcp_connection(c).unwrap().snd_nxt()
            && p.b.tcp_recv_queued(s).unwrap() > 0
            && p.a.tcp_send_capacity(c).unwrap() == 0
    }));
    p.a.tcp_shutdown(c).unwrap();
    p.run_for(Duration::from_secs(600));
    assert_eq!(p.a.tcp_state(c), Ok(State::FinWait1));
    assert_eq!(p.a.tcp_error(c), Ok(None));
    assert!(p.a.ledger().counters().get(Counter::TcpWindowProbes) >= 10);
    // The reader comes back: everything arrives, then the end of the stream.
    let mut got = Vec::new();
    let mut buf = vec![0u8; 65536];
    assert!(p.run_until(Duration::from_secs(120), |p| {
        match p.b.tcp_recv(s, &mut buf) {
            Ok(0) => true,
            Ok(n) => {
                got.extend_from_slice(&buf[..n]);
                false
            }
            Err(_) => false,
        }
    }));
    assert!(got == data[..sent], "{} of {sent} bytes", got.len());
}

/// A peer that keeps its window shut and answers is probed for good (above); one that
/// vanishes behind a shut window is given up on after as many unanswered probes in a row
/// as retransmissions of a segment (`max_retransmissions`), as Linux's `tcp_probe_timer`
/// does. Before, the persist timer probed it forever.
#[test]
fn a_shut_window_whose_peer_vanished_is_given_up_on() {
    let mut b = host(1500, Tuning::fast());
    b.stack.tcp.recv_buffer = 16 << 10;
    let mut p = Pair::new(host(1500, Tuning::fast()), b).unwrap();
    let (c, _l, _s) = connect(&mut p);
    let data = pattern(0, 100_000);
    let mut sent = 0;
    // B's reader is away: its window shuts, and A's persist timer probes it.
    assert!(p.run_until(Duration::from_secs(10), |p| {
        sent += p.a.tcp_send(c, &data[sent..]).unwrap_or(0);
        p.a.ledger().counters().get(Counter::TcpWindowProbes) > 0
    }));
    p.run_for(Duration::from_secs(600));
    assert_eq!(
        p.a.tcp_state(c),
        Ok(State::Established),
        "answered probes go on"
    );
    // B vanishes, NIC and all.
    p.b = probestack::stack::Stack::new(probestack::stack::StackConfig::default());
    p.run_for(Duration::from_secs(3600));
    assert_eq!(p.a.tcp_state(c), Ok(State::Closed));
    assert_eq!(p.a.tcp_error(c), Ok(Some(TcpError::TimedOut)));
}

/// A router whose next hop carries at most `path_mtu`: a larger datagram from A is not
/// sent; A gets an ICMP fragmentation-needed about it instead (RFC 1191 §4), from B's
/// address, `reported_mtu` in its next-hop MTU field. With `forge`, the datagram goes
/// through all the same and the ICMP is an attacker's, its quoted sequence number moved by
/// `seq_shift`.
#[derive(Clone, Copy)]
struct NarrowPath {
    path_mtu: usize,
    reported_mtu: u16,
    forge: bool,
    seq_shift: u32,
}

impl Hop for NarrowPath {
    fn forward(&mut self, frame: &mut PacketBuf) -> (bool, Option<PacketBuf>) {
        // The headers are in the buffer; data sent by reference follows in fragments.
        if frame.total_len() - ethernet::HEADER_LEN <= self.path_mtu {
            return (true, None);
        }
        let quoted = quoted(&frame.data()[ethernet::HEADER_LEN..], self.seq_shift);
        let icmp =
            Icmpv4Repr::dst_unreachable(DstUnreachable::FragRequired, self.reported_mtu, &quoted)
                .unwrap();
        let error = icmp_frame(&icmp, (ADDR_B, MAC_B), (ADDR_A, MAC_A));
        (self.forge, Some(error))
    }
}

/// A transfer of 1 MiB from A to B on MTU-9000 links through [`NarrowPath`]; returns the
/// pair and A's connection.
fn transfer_over_narrow_path(path: NarrowPath) -> (Pair, TcpHandle) {
    let mut p = Pair::with_devices(
        host(9000, Tuning::fast()),
        host(9000, Tuning::fast()),
        |nic| Box::new(Routed::new(nic, path)),
        |n| Box::new(n),
    )
    .unwrap();
    let (c, _l, s) = connect(&mut p);
    assert_eq!(p.a.tcp_connection(c).unwrap().mss().0, 8960);
    transfer(&mut p, c, s, 1 << 20, Duration::from_secs(30));
    (p, c)
}

/// A path of `path_mtu` whose router reports `reported_mtu`.
fn narrow(path_mtu: usize, reported_mtu: u16) -> NarrowPath {
    NarrowPath {
        path_mtu,
        reported_mtu,
        forge: false,
        seq_shift: 0,
    }
}

/// A liar behind A's NIC: once told, it answers A's next frame with an ARP reply that puts
/// B at a MAC nobody has, as a stale or spoofed entry would (ARP's merge rule takes it,
/// RFC 826), and B hears nothing A sends there.
struct StaleArp(Arc<AtomicBool>);

/// The MAC nobody has.
const GONE: ethernet::EthernetAddress = ethernet::EthernetAddress([0x02, 0, 0, 0, 0, 0x66]);

impl Hop for StaleArp {
    fn forward(&mut self, _frame: &mut PacketBuf) -> (bool, Option<PacketBuf>) {
        if !self.0.swap(false, Ordering::Relaxed) {
            return (true, None);
        }
        let arp = ArpRepr {
            operation: ArpOperation::Reply,
            sender_hardware_addr: GONE,
            sender_protocol_addr: ADDR_B,
            target_hardware_addr: MAC_A,
            target_protocol_addr: ADDR_A,
        };
        let mut f = vec![0u8; ethernet::HEADER_LEN + arp_wire::PACKET_LEN];
        ethernet::EthernetRepr {
            source: GONE,
            destination: MAC_A,
            ethertype: ethernet::EtherType::Arp,
        }
        .emit(&mut ethernet::Frame::new_unchecked(&mut f[..]))
        .unwrap();
        arp.emit(&mut arp_wire::Packet::new_unchecked(
            &mut f[ethernet::HEADER_LEN..],
        ))
        .unwrap();
        (true, Some(PacketBuf::from_slice(&f, 0).unwrap()))
    }
}

/// A pair with [`StaleArp`] behind A's NIC (A as `a` says), and the switch that tells it
/// to lie.
fn behind_a_stale_arp(a: HostConfig) -> (Pair, Arc<AtomicBool>) {
    let poison = Arc::new(AtomicBool::new(false));
    let hop = StaleArp(poison.clone());
    let p = Pair::with_devices(
        a,
        host(1500, Tuning::fast()),
        move |nic| Box::new(Routed::new(nic, hop)),
        |n| Box::new(n),
    )
    .unwrap();
    (p, poison)
}

/// A's ARP entry for B goes stale (B "moved" to a MAC nobody has): at the third
/// retransmission of a segment TCP gives IP negative advice (RFC 1122 §4.2.3.5), the entry
/// is forgotten, A asks again, and the transfer goes on within seconds, where the entry
/// would have lived a minute.
#[test]
fn a_stale_link_address_is_asked_again_after_three_retransmissions() {
    let (mut p, poison) = behind_a_stale_arp(host(1500, Tuning::fast()));
    let (c, _l, s) = connect(&mut p);
    transfer(&mut p, c, s, 10_000, Duration::from_secs(1));
    poison.store(true, Ordering::Relaxed);
    let took = transfer(&mut p, c, s, 100_000, Duration::from_secs(10));
    let a = p.a.ledger().counters();
    assert_eq!(a.get(Counter::ArpForgottenOnAdvice), 1, "took {took} ms");
    assert!(a.get(Counter::TcpRetransmitTimeouts) >= 3);
}

/// The same with an idle connection whose keepalive probes go unanswered: at the third,
/// TCP gives IP negative advice as for a segment sent three times (RFC 1122 §4.2.3.5),
/// the entry is asked again, and the probes after it are answered. Before, nothing asked
/// again, and keepalive gave the connection up.
#[test]
fn a_stale_link_address_is_asked_again_after_three_keepalive_probes() {
    let mut a = host(1500, Tuning::fast());
    a.stack.tcp.keepalive = Some(Duration::from_secs(1));
    a.stack.tcp.keepalive_interval = Duration::from_secs(1);
    a.stack.tcp.keepalive_probes = 5;
    let (mut p, poison) = behind_a_stale_arp(a);
    let (c, _l, s) = connect(&mut p);
    transfer(&mut p, c, s, 10_000, Duration::from_secs(1));
    poison.store(true, Ordering::Relaxed);
    p.run_for(Duration::from_secs(60));
    assert_eq!(p.a.tcp_state(c), Ok(State::Established));
    let a = p.a.ledger().counters();
    assert_eq!(a.get(Counter::ArpForgottenOnAdvice), 1);
    assert!(a.get(Counter::TcpKeepalives) >= 3);
    transfer(&mut p, c, s, 10_000, Duration::from_secs(1));
}

#[test]
fn path_mtu_from_fragmentation_needed() {
    // A router that names the next-hop MTU (RFC 1191 §4): full-sized segments draw
    // fragmentation-needed, the MSS falls to fit, and the data gets through.
    let (p, c) = transfer_over_narrow_path(narrow(1500, 1500));
    assert_eq!(p.a.tcp_connection(c).unwrap().mss().0, 1460);
    let a = p.a.ledger().counters();
    assert_eq!(a.get(Counter::TcpPathMtuReductions), 1);
    // The lost segments went again at once, not after a retransmission timeout.
    assert_eq!(a.get(Counter::TcpRetransmitTimeouts), 0);

    // An older router that leaves the field zero: the next plateau below 9000 (RFC 1191
    // §7) is 8166, still too big; then 4352, then 2002, then 1492, which fits.
    let (p, c) = transfer_over_narrow_path(narrow(1500, 0));
    assert_eq!(p.a.tcp_connection(c).unwrap().mss().0, 1452);
    assert_eq!(
        p.a.ledger().counters().get(Counter::TcpPathMtuReductions),
        4
    );
}

#[test]
fn forged_fragmentation_needed_is_ignored() {
    // The path is really 9000 wide; an attacker answers segments with forged ICMP.
    for (reported, seq_shift) in [(68, 0), (1500, 1 << 30)] {
        let (p, c) = transfer_over_narrow_path(NarrowPath {
            forge: true,
            seq_shift,
            ..narrow(1500, reported)
        });
        // Below the floor (RFC 5927 §7.3), or quoting a sequence number not in flight
        // (§4.1): ignored, and the connection keeps its segment size.
        assert_eq!(p.a.tcp_connection(c).unwrap().mss().0, 8960);
        let a = p.a.ledger().counters();
        assert!(a.get(Counter::TcpIcmpIgnored) > 100);
        assert_eq!(a.get(Counter::TcpPathMtuReductions), 0);
    }
}

/// Blocking sockets, as an application on its own thread uses them: two stacks on two
/// threads with the real clock, 8 MiB from A to B checked by hash, and an orderly close.
#[test]
fn blocking_sockets_on_two_threads() {
    use probestack::driver::{MemoryLink, NicConfig};
    use probestack::ip::route::Ipv4Cidr;
    use probestack::stack::{InterfaceConfig, Stack, StackConfig};
    use probestack::time::{Clock, RealClock};

    const TOTAL: usize = 8 << 20;
    // Generous: a loaded machine may deschedule either thread for a while.
    let timeout = Duration::from_secs(60);
    let (nic_a, nic_b) = MemoryLink::pair(NicConfig::default(), NicConfig::default()).unwrap();
    let host = |nic, mac, address| {
        let mut s = Stack::new(StackConfig::default());
        let cidr = Ipv4Cidr {
            address,
            prefix_len: 15,
        };
        s.add_interface(Box::new(nic), InterfaceConfig { mac, cidr });
        s
    };
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let b = std::thread::spawn(move || {
        let mut b = host(nic_b, MAC_B, ADDR_B);
        let clock = RealClock::new();
        let l = b.tcp_listen((ADDR_B, PORT), 1).unwrap();
        ready_tx.send(()).unwrap();
        let s = b.tcp_accept_blocking(l, &clock, timeout).unwrap();
        let (mut hash, mut got) = (0xcbf2_9ce4_8422_2325u64, 0);
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = b.tcp_recv_blocking(s, &mut buf, &clock, timeout).unwrap();
            if n == 0 {
                break;
            }
            fnv(&mut hash, &buf[..n]);
            got += n;
        }
        b.tcp_close(s).unwrap();
        // LAST-ACK until A's ACK of our FIN.
        let end = clock.now() + timeout;
        while b.tcp_state(s).is_ok() && clock.now() < end {
            b.poll(clock.now());
            std::thread::yield_now();
        }
        (got, hash, b.tcp_state(s))
    });
    let mut a = host(nic_a, MAC_A, ADDR_A);
    let clock = RealClock::new();
    ready_rx.recv().unwrap();
    let c = a
        .tcp_connect_blocking((ADDR_B, PORT), &clock, timeout)
        .unwrap();
    assert_eq!(a.tcp_state(c), Ok(State::Established));
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    for off in (0..TOTAL).step_by(1 << 20) {
        let data = pattern(off, 1 << 20);
        fnv(&mut hash, &data);
        a.tcp_send_all_blocking(c, &data, &clock, timeout).unwrap();
    }
    a.tcp_shutdown(c).unwrap();
    // Wait for B's FIN: end of stream on A's side too.
    assert_eq!(a.tcp_recv_blocking(c, &mut [0; 16], &clock, timeout), Ok(0));
    a.tcp_close(c).unwrap();
    while !b.is_finished() {
        a.poll(clock.now());
        std::thread::yield_now();
    }
    let (got, b_hash, b_state) = b.join().unwrap();
    assert_eq!(got, TOTAL);
    assert_eq!(b_hash, hash);
    assert_eq!(
        b_state,
        Err(TcpError::BadHandle),
        "B's connection closed and freed"
    );
}

/// A flow held back by the receiver's window does not grow cwnd (RFC 7661's
/// cwnd-limited test): it stays near what the window lets out.
#[test]
fn cwnd_grows_only_while_it_limits() {
    let mut a = host(1500, Tuning::fast());
    let mut b = host(1500, Tuning::fast());
    a.stack.tcp.send_buffer = 1 << 20;
    b.stack.tcp.recv_buffer = 64 * 1024;
    let mut p = Pair::new(a, b).unwrap();
    let (c, _l, s) = connect(&mut p);
    transfer(&mut p, c, s, 8 << 20, Duration::from_secs(30));
    let cwnd = p.a.tcp_connection(c).unwrap().cwnd();
    assert!(cwnd <= 4 * 64 * 1024, "cwnd {cwnd}");
}

/// `n` request/response exchanges of 64 bytes on the connection `c` (A) to `s` (B), each
/// checked on both sides.
fn exchange_requests(p: &mut Pair, c: TcpHandle, s: TcpHandle, n: u32) {
    let mut buf = [0u8; 64];
    for i in 0..n {
        let request = i.to_be_bytes().repeat(16);
        assert_eq!(p.a.tcp_send(c, &request), Ok(64));
        assert!(p.run_until(Duration::from_secs(1), |p| p.b.tcp_recv_queued(s) == Ok(64)));
        assert_eq!(p.b.tcp_recv(s, &mut buf), Ok(64));
        assert_eq!(buf.to_vec(), request);
        assert_eq!(p.b.tcp_send(s, &buf), Ok(64));
        assert!(p.run_until(Duration::from_secs(1), |p| p.a.tcp_recv_queued(c) == Ok(64)));
        assert_eq!(p.a.tcp_recv(c, &mut buf), Ok(64));
        assert_eq!(buf.to_vec(), request);
    }
}

/// Request/response with Nagle off: every segment carries data and acknowledges the last
/// reply, which header prediction takes too.
#[test]
fn request_response_is_predicted() {
    let mut p = pair(1500);
    let (c, _l, s) = connect(&mut p);
    p.a.tcp_set_nodelay(c, true).unwrap();
    p.b.tcp_set_nodelay(s, true).unwrap();
    exchange_requests(&mut p, c, s, 200);
    for stack in [&p.a, &p.b] {
        let hits = stack
            .ledger()
            .counters()
            .get(Counter::TcpPredictionDataHits);
        assert!(hits >= 190, "{hits} of 200 requests or replies predicted");
    }
}

/// TCP output for a connection with nothing to send returns before any route lookup or
/// segment decision (`tcp.output_idle`): in request/response, every read (which opens no
/// window worth announcing) and the output after each request's input (which only starts
/// the delayed-ACK timer) take that path, and the segments sent are the ones the full
/// path sends.
#[test]
fn output_with_nothing_to_send_returns_at_once() {
    let mut p = pair(1500);
    let (c, _l, s) = connect(&mut p);
    p.a.tcp_set_nodelay(c, true).unwrap();
    p.b.tcp_set_nodelay(s, true).unwrap();
    let count =
        |p: &Pair, which: Counter| [&p.a, &p.b].map(|stack| stack.ledger().counters().get(which));
    let idle_before = count(&p, Counter::TcpOutputIdle);
    let out_before = count(&p, Counter::TcpSegmentsOut);
    exchange_requests(&mut p, c, s, 100);
    let idle = count(&p, Counter::TcpOutputIdle);
    let out = count(&p, Counter::TcpSegmentsOut);
    for end in 0..2 {
        let idle = idle[end] - idle_before[end];
        assert!(
            idle >= 190,
            "end {end}: {idle} idle outputs in 100 transactions"
        );
    }
    // What the full path sends (checked with the early return taken out): a segment per
    // request and per reply. B's window update at its first read (its SYN-ACK could offer
    // only an unscaled window) waits for the end of B's turn and rides on the first reply.
    assert_eq!([out[0] - out_before[0], out[1] - out_before[1]], [100, 100]);
}

/// The reads of one turn of the application send one window update however many calls
/// they take (`tcp_output_per_batch`, the update left for the next poll): B reads 64 KiB
/// a segment's worth a call, by copying reads and by zero-copy ones. With the switch off,
/// every read that opens the window by two segments sends an update of its own, as
/// 4.4BSD's `soreceive` asks TCP once per call.
#[test]
fn the_reads_of_one_turn_send_one_window_update() {
    for (per_batch, zero_copy) in [(true, false), (true, true), (false, false)] {
        let t = Tuning {
            tcp_output_per_batch: per_batch,
            ..Tuning::fast()
        };
        let mut p = Pair::new(host(1500, t), host(1500, t)).unwrap();
        let (c, _l, s) = connect(&mut p);
        let data = pattern(7, 64 * 1024);
        assert_eq!(p.a.tcp_send(c, &data), Ok(data.len()));
        assert!(
            p.run_until(Duration::from_secs(1), |p| p.b.tcp_recv_queued(s)
                == Ok(data.len()))
        );
        p.settle();
        let sent = |p: &Pair| p.b.ledger().counters().get(Counter::TcpSegmentsOut);
        let before = sent(&p);
        let (mut got, mut buf) = (Vec::new(), [0u8; 1448]);
        loop {
            let n = if zero_copy {
                match p.b.tcp_recv_zero_copy(s, buf.len()) {
                    Ok(Some(chunk)) => {
                        got.extend_from_slice(&chunk);
                        chunk.len()
                    }
                    _ => 0,
                }
            } else {
                let n = p.b.tcp_recv(s, &mut buf).unwrap_or(0);
                got.extend_from_slice(&buf[..n]);
                n
            };
            if n == 0 {
                break;
            }
        }
        assert_eq!(got, data);
        let during = sent(&p) - before;
        if per_batch {
            // The update waits for a poll, and the stack says one is due now.
            let due = p.b.next_deadline();
            assert!(due.is_some_and(|t| t <= p.now()), "next deadline {due:?}");
        }
        p.settle();
        let after = sent(&p) - before;
        if per_batch {
            assert_eq!((during, after), (0, 1), "updates during the reads, in all");
        } else {
            assert!(during >= 10, "{during} updates from 46 reads");
            assert_eq!(after, during);
        }
    }
}

/// Receiver silly-window avoidance (RFC 9293 §3.8.6.2.2, MUST-39): B's right edge stays
/// put until its reader has freed min(MSS, half the buffer) (1,460 bytes of an 8 KiB
/// buffer), and an update of its own goes only once the window can open by two segments
/// or half the buffer. B's window is filled and shut; B reads 1,000 bytes, then 459
/// more: it sends nothing, and a byte of data it then sends to A still offers a zero
/// window at the same ACK. One byte more (1,460 freed) moves the edge on B's next segment
/// by exactly that, still without an update of its own; reading 2,920 more, which lets
/// the window open by two segments past that edge, sends one update at once, offering
/// the 4,380 bytes free.
#[test]
fn a_read_freeing_less_than_an_mss_does_not_move_the_window_edge() {
    let mut b = host(1500, Tuning::fast());
    b.stack.tcp.recv_buffer = 8 * 1024;
    let modes = [PcapMode::TxOnly, PcapMode::TxOnly];
    let (mut p, _, from_b) = recorded_pair(host(1500, Tuning::fast()), b, modes);
    let (c, _l, s) = connect(&mut p);
    assert_eq!(p.b.tcp_connection(s).unwrap().mss().1, 1460);
    assert_eq!(p.b.tcp_connection(s).unwrap().window_shifts().1, 0);
    let data = pattern(0, 8 * 1024);
    assert_eq!(p.a.tcp_send(c, &data), Ok(data.len()));
    p.run_for(Duration::from_secs(1));
    assert_eq!(p.b.tcp_recv_queued(s), Ok(data.len()));
    let last = *from_b.segments().last().unwrap();
    assert_eq!(last.window, 0, "B's window did not shut");
    let shut_ack = last.ack;
    let mut buf = vec![0u8; 4096];
    // Reads of 1,000 and 459 bytes: nothing sent, and B's next segment keeps the edge.
    let sent = |p: &Pair| p.b.ledger().counters().get(Counter::TcpSegmentsOut);
    for n in [1000, 459] {
        let before = sent(&p);
        assert_eq!(p.b.tcp_recv(s, &mut buf[..n]), Ok(n));
        p.run_for(Duration::from_secs(1));
        assert_eq!(
            sent(&p),
            before,
            "a window update after a read of {n} bytes"
        );
    }
    // What B's next segment offers: one byte of data to A, with its ACK and window.
    let offered = |p: &mut Pair, byte: &[u8]| {
        assert_eq!(p.b.tcp_send(s, byte), Ok(1));
        p.run_for(Duration::from_secs(1));
        let seg = *from_b.segments().iter().rfind(|s| s.len == 1).unwrap();
        (seg.ack, seg.window)
    };
    assert_eq!(offered(&mut p, b"x"), (shut_ack, 0), "1,459 bytes freed");
    // A read that frees the 1,460th byte: the edge moves, on the next segment B sends.
    let before = sent(&p);
    assert_eq!(p.b.tcp_recv(s, &mut buf[..1]), Ok(1));
    p.run_for(Duration::from_secs(1));
    assert_eq!(sent(&p), before, "a window update for 1,460 bytes");
    assert_eq!(offered(&mut p, b"y"), (shut_ack, 1460), "1,460 bytes freed");
    // A read that lets the window open by two segments past that edge: an update goes
    // at once, offering all 4,380 bytes free.
    let (before, segments) = (sent(&p), from_b.segments().len());
    let start = p.now();
    assert_eq!(p.b.tcp_recv(s, &mut buf[..2920]), Ok(2920));
    assert!(p.run_until(Duration::from_secs(1), |p| sent(p) > before));
    assert!(p.now() - start < Duration::from_millis(1));
    p.run_for(Duration::from_secs(1));
    let update = &from_b.segments()[segments..];
    assert_eq!(update.len(), 1, "{update:?}");
    assert_eq!(
        (update[0].len, update[0].ack, update[0].window),
        (0, shut_ack, 4380)
    );
}

/// Nagle in Minshall's form: the short tail of a write goes at once when no other short
/// segment is unacknowledged, instead of waiting for the delayed ACK of the odd full
/// segment before it (40 ms on an otherwise instant link).
#[test]
fn nagle_does_not_hold_the_tail_of_a_write() {
    let t = Tuning {
        tcp_output_per_batch: false,
        ..Tuning::fast()
    };
    let mut p = Pair::new(host(1500, t), host(1500, t)).unwrap();
    let (c, _l, s) = connect(&mut p);
    assert!(p.a.tcp_connection(c).unwrap().timestamps_enabled());
    // 69 full segments of 1448 bytes (an odd number: the last one's ACK is delayed) and a
    // short tail; B does not read meanwhile, so no window update hurries an ACK.
    let total = 69 * 1448 + 100;
    assert_eq!(p.a.tcp_send(c, &pattern(0, total)), Ok(total));
    let start = p.now();
    assert!(
        p.run_until(Duration::from_secs(1), |p| p.b.tcp_recv_queued(s)
            == Ok(total))
    );
    let ms = (p.now() - start).as_millis();
    assert!(ms < 40, "the tail waited {ms} ms");
    // Two short writes in a row: the second waits for the first's ACK (Nagle proper).
    p.a.tcp_send(c, b"first").unwrap();
    p.a.tcp_send(c, b"second").unwrap();
    let out = p.a.ledger().counters().get(Counter::TcpSegmentsOut);
    p.a.tcp_send(c, b"third").unwrap();
    assert_eq!(p.a.ledger().counters().get(Counter::TcpSegmentsOut), out);
}

/// A bulk receiver whose application drains the buffer acknowledges a short segment at
/// once instead of delaying the ACK (Linux's `tcp_cleanup_rbuf`): the sender is holding
/// its next short segment until that ACK comes (Nagle), and nothing else would make it
/// the second of two. Without it the second short write waited out the 40 ms timer (as
/// the last bytes of `lab bulk`'s `zero_copy` runs sometimes did). A connection that
/// sends data too keeps delaying, its ACK riding on the data (the request/response tests
/// above count their segments exactly).
#[test]
fn a_read_that_drains_the_buffer_acknowledges_a_short_segment_at_once() {
    let mut p = pair(1500);
    let (c, _l, s) = connect(&mut p);
    let mut buf = vec![0u8; 64 * 1024];
    // Past B's first read, whose window update would acknowledge anything, and past the
    // update the transfer's last read left for the end of B's turn.
    transfer(&mut p, c, s, 100_000, Duration::from_secs(1));
    p.settle();
    let first = pattern(1, 416);
    assert_eq!(p.a.tcp_send(c, &first), Ok(first.len()));
    assert!(
        p.run_until(Duration::from_secs(1), |p| p.b.tcp_recv_queued(s)
            == Ok(first.len()))
    );
    // A short write while that short segment is unacknowledged: Nagle holds it.
    let out = p.a.ledger().counters().get(Counter::TcpSegmentsOut);
    let second = pattern(2, 1000);
    assert_eq!(p.a.tcp_send(c, &second), Ok(second.len()));
    assert_eq!(p.a.ledger().counters().get(Counter::TcpSegmentsOut), out);
    let start = p.now();
    assert_eq!(p.b.tcp_recv(s, &mut buf), Ok(first.len()));
    assert_eq!(&buf[..first.len()], &first[..]);
    assert!(
        p.run_until(Duration::from_secs(1), |p| p.b.tcp_recv_queued(s)
            == Ok(second.len()))
    );
    let ms = (p.now() - start).as_millis();
    assert!(ms < 40, "the second write waited {ms} ms for a delayed ACK");
    assert_eq!(p.b.tcp_recv(s, &mut buf), Ok(second.len()));
    assert_eq!(&buf[..second.len()], &second[..]);
    assert_eq!(p.b.ledger().counters().get(Counter::TcpDelayedAcks), 0);
}

/// Nagle's test applies to the short tail of a super-segment as to a short segment of its
/// own: while an earlier short segment is unacknowledged, a write of three full segments
/// and a little more sends the three now and the tail once that ACK is in, instead of all
/// four frames at once (as it did, so that a writer of 64 KiB at MTU 65535 sent a full
/// segment and a 53-byte one per write).
#[test]
fn nagle_holds_the_short_tail_of_a_super_segment() {
    let t = Tuning::fast();
    assert!(t.software_segmentation);
    let mut p = Pair::new(host(1500, t), host(1500, t)).unwrap();
    let (c, _l, s) = connect(&mut p);
    let mss = 1448;
    let frames = |p: &Pair| p.a.ledger().counters().get(Counter::TcpSegmentsOut);
    // A short segment goes at once and stays unacknowledged while the pair is not run.
    let before = frames(&p);
    assert_eq!(p.a.tcp_send(c, b"first"), Ok(5));
    assert_eq!(frames(&p), before + 1);
    let data = pattern(5, 3 * mss + 100);
    assert_eq!(p.a.tcp_send(c, &data), Ok(data.len()));
    assert_eq!(frames(&p), before + 4, "the tail went past Nagle");
    // B's ACK of "first" lets the tail go; everything arrives, in order.
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    assert!(p.run_until(Duration::from_secs(1), |p| {
        while let Ok(n) = p.b.tcp_recv(s, &mut buf) {
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        got.len() == 5 + data.len()
    }));
    assert_eq!(&got[..5], b"first");
    assert_eq!(&got[5..], &data[..]);
    assert_eq!(
        frames(&p) - before,
        5,
        "three full segments and the tail after the ACK"
    );
}

/// PSH goes on the segment that empties the send buffer and on no other (RFC 9293
/// §3.9.1.2: MUST-61 sets it "in the last buffered segment", and by SHLD-27 successive
/// pushes collapse as the data is cut into segments, instead of marking each). A writes 10,000 bytes,
/// then after a pause 10, then after another 50,000, more than its congestion window, so
/// that a flight ends with data still queued. Every segment that reaches B (read by
/// etherparse at B's NIC, after any cutting) carries PSH exactly when it ends a write.
/// With TCP's software segmentation, without it (each segment decided on its own), and
/// with the NIC's TSO cutting A's super-segments.
#[test]
fn psh_is_set_on_the_segment_that_empties_the_send_buffer_and_no_other() {
    let one_at_a_time = Tuning {
        software_segmentation: false,
        ..Tuning::fast()
    };
    let tso = Tuning {
        checksum_elision: false,
        ..Tuning::fast()
    };
    for (what, t, offload) in [
        ("software segmentation", Tuning::fast(), false),
        ("one segment at a time", one_at_a_time, false),
        ("TSO", tso, true),
    ] {
        let mut a = host(1500, t);
        if offload {
            a.nic = a.nic.with_offloads();
        }
        let modes = [PcapMode::TxOnly, PcapMode::RxOnly];
        let (mut p, _, at_b) = recorded_pair(a, host(1500, t), modes);
        let (c, _l, s) = connect(&mut p);
        let mut ends = Vec::new();
        let mut total = 0;
        for n in [10_000, 10, 50_000] {
            if n == 50_000 {
                let cwnd = p.a.tcp_connection(c).unwrap().cwnd();
                assert!(
                    cwnd < n,
                    "{what}: cwnd {cwnd} takes the write in one flight"
                );
            }
            assert_eq!(p.a.tcp_send(c, &pattern(total, n)), Ok(n), "{what}");
            total += n;
            ends.push(total);
            // The pause: all of it acknowledged before the next write.
            assert!(p.run_until(Duration::from_secs(1), |p| {
                p.b.tcp_recv_queued(s) == Ok(total) && p.a.tcp_send_queued(c) == Ok(0)
            }));
        }
        let segments = at_b.segments();
        let isn = segments.iter().find(|s| s.syn).unwrap().seq;
        let data: Vec<_> = segments.iter().filter(|s| s.len > 0).collect();
        // Nothing was sent twice, and every frame on the wire is one segment.
        assert_eq!(data.iter().map(|s| s.len).sum::<usize>(), total, "{what}");
        assert!(data.iter().all(|s| s.len <= 1448), "{what}");
        assert!(data.len() >= 43, "{what}: {} segments", data.len());
        let mut pushed = Vec::new();
        for seg in &data {
            let end = seg.seq.wrapping_sub(isn + 1) as usize + seg.len;
            assert_eq!(
                seg.psh,
                ends.contains(&end),
                "{what}: segment ending at {end}"
            );
            if seg.psh {
                pushed.push(end);
            }
        }
        assert_eq!(pushed, ends, "{what}");
        // No segment without data carries it either.
        assert!(segments.iter().all(|s| s.len > 0 || !s.psh), "{what}");
        if offload {
            let frames = p.a.ledger().counters().get(Counter::TcpSegmentsOut);
            assert!(
                frames < data.len() as u64,
                "{what}: {frames} frames from A, {} segments on the wire",
                data.len()
            );
        }
    }
}

/// The application can turn Nagle's algorithm off (RFC 9293 §3.7.4, MUST-17;
/// TCP_NODELAY, `tcp_set_nodelay`). On (the default), a short write while an earlier
/// short segment is unacknowledged waits for that segment's ACK, which B delays for its
/// 40 ms (B does not read, so nothing hurries it). After `tcp_set_nodelay(c, true)`, two
/// short writes in a row go at once, a segment each, and arrive without waiting.
#[test]
fn nodelay_turns_nagle_off_so_a_short_write_goes_at_once() {
    let mut p = pair(1500);
    let (c, _l, s) = connect(&mut p);
    let out = |p: &Pair| p.a.ledger().counters().get(Counter::TcpSegmentsOut);
    let before = out(&p);
    assert_eq!(p.a.tcp_send(c, b"first"), Ok(5));
    assert_eq!(out(&p), before + 1, "the first short write went at once");
    assert_eq!(p.a.tcp_send(c, b"second"), Ok(6));
    assert_eq!(out(&p), before + 1, "Nagle let the second short write go");
    let start = p.now();
    assert!(p.run_until(Duration::from_secs(1), |p| p.b.tcp_recv_queued(s) == Ok(11)));
    let waited = p.now() - start;
    assert!(
        waited >= Duration::from_millis(40),
        "the second write waited only {waited:?}"
    );
    assert_eq!(p.b.ledger().counters().get(Counter::TcpDelayedAcks), 1);
    p.run_for(Duration::from_millis(100));

    p.a.tcp_set_nodelay(c, true).unwrap();
    let before = out(&p);
    assert_eq!(p.a.tcp_send(c, b"third"), Ok(5));
    assert_eq!(p.a.tcp_send(c, b"fourth"), Ok(6));
    assert_eq!(out(&p), before + 2, "a short write waited with Nagle off");
    let start = p.now();
    assert!(p.run_until(Duration::from_secs(1), |p| p.b.tcp_recv_queued(s) == Ok(22)));
    let waited = p.now() - start;
    assert!(
        waited < Duration::from_millis(1),
        "the writes took {waited:?} with Nagle off"
    );
    let mut buf = [0u8; 32];
    assert_eq!(p.b.tcp_recv(s, &mut buf), Ok(22));
    assert_eq!(&buf[..22], b"firstsecondthirdfourth");
}

// ---------------------------------------------------------------------------------------
// The link template (`Tuning::tcp_header_template`).

/// Two stacks with `t`, A's transmitted frames captured.
fn captured_pair(t: Tuning) -> (Pair, SharedBytes) {
    common::capture::captured_pair(host(1500, t))
}

/// A connection from A to B carrying 300 KB each way, then closed by both; returns A's
/// frames and A's count of `counter`.
fn two_way_run(t: Tuning, counter: Counter) -> (Vec<Vec<u8>>, u64) {
    let (mut p, out) = captured_pair(t);
    let (c, l, s) = connect(&mut p);
    transfer(&mut p, c, s, 300_000, Duration::from_secs(10));
    // B to A: A's frames are ACKs now.
    let data = pattern(0, 300_000);
    let (mut sent, mut got) = (0, 0);
    let mut buf = vec![0u8; 64 * 1024];
    assert!(p.run_until(Duration::from_secs(10), |p| {
        if sent < data.len() {
            sent += p.b.tcp_send(s, &data[sent..]).unwrap_or(0);
        }
        while let Ok(n) = p.a.tcp_recv(c, &mut buf) {
            if n == 0 {
                break;
            }
            assert_eq!(&buf[..n], &data[got..got + n]);
            got += n;
        }
        got == data.len()
    }));
    p.a.tcp_close(c).unwrap();
    p.b.tcp_close(s).unwrap();
    p.b.tcp_close(l).unwrap();
    p.run_for(Duration::from_secs(3));
    assert_eq!(p.a.tcp_state(c), Err(TcpError::BadHandle));
    let count = p.a.ledger().counters().get(counter);
    (captured_frames(&out), count)
}

/// The template's frames are the layers' frames, byte for byte (data, ACKs, FIN), with
/// and without TCP checksums (elision on and off) and with either IP header checksum
/// routine.
#[test]
fn the_link_template_sends_the_frames_the_layers_send() {
    for with in template_tunings() {
        let without = Tuning {
            tcp_header_template: false,
            ..with
        };
        let (frames_t, sent_t) = two_way_run(with, Counter::TcpTemplateSent);
        let (frames_l, sent_l) = two_way_run(without, Counter::TcpTemplateSent);
        assert_eq!(sent_l, 0);
        // All but the SYN (sent before ARP answered) take the template.
        assert!(frames_t.len() > 200, "only {} frames", frames_t.len());
        assert!(
            sent_t + 1 >= frames_t.len() as u64 - 2,
            "{sent_t} of {} frames took the template",
            frames_t.len()
        );
        let what = format!(
            "elision {}, inline {}",
            with.checksum_elision, with.inline_ip_header_checksum
        );
        assert_same_frames(&frames_t, &frames_l, &what);
    }
}

/// TCP's software segmentation (`Tuning::software_segmentation`) sends the frames that
/// deciding each segment on its own sends, byte for byte (sequence numbers, PSH and FIN
/// on the right frame, IP identification, checksums), with and without checksums, either
/// IP header checksum routine, and through the template or the layers.
#[test]
fn software_segmentation_sends_the_frames_one_segment_at_a_time_sends() {
    let tunings = template_tunings().into_iter().chain([Tuning {
        tcp_header_template: false,
        ..Tuning::fast()
    }]);
    for with in tunings {
        assert!(with.software_segmentation);
        let without = Tuning {
            software_segmentation: false,
            ..with
        };
        let (frames_cut, trains) = two_way_run(with, Counter::TcpSoftwareSegmented);
        let (frames_one, none) = two_way_run(without, Counter::TcpSoftwareSegmented);
        assert_eq!(none, 0);
        assert!(trains > 10, "only {trains} super-segments were cut");
        let what = format!(
            "elision {}, inline {}, template {}",
            with.checksum_elision, with.inline_ip_header_checksum, with.tcp_header_template
        );
        assert_same_frames(&frames_cut, &frames_one, &what);
    }
}

/// A device with a short transmit queue (8 frames, where a super-segment could be cut
/// into 44): software segmentation cuts no more frames than the queue has room for, so
/// the device refuses none and nothing is sent twice; on the memory NICs and on a frame
/// queue.
#[test]
fn software_segmentation_cuts_no_more_than_the_device_has_room_for() {
    for queue in [false, true] {
        let mut h = host(1500, Tuning::fast());
        h.nic.tx_queue_depth = 8;
        let mut p = if queue {
            Pair::on_frame_queue(h.clone(), h).unwrap()
        } else {
            Pair::new(h.clone(), h).unwrap()
        };
        let (c, _l, s) = connect(&mut p);
        transfer(&mut p, c, s, 4 << 20, Duration::from_secs(30));
        let counters = p.a.ledger().counters();
        let what = if queue { "frame queue" } else { "memory NICs" };
        assert!(counters.get(Counter::TcpSoftwareSegmented) > 100, "{what}");
        assert_eq!(counters.get(Counter::StackDropDeviceRefused), 0, "{what}");
        assert_eq!(counters.get(Counter::TcpRetransmittedSegments), 0, "{what}");
    }
}

/// Data by reference (`Tuning::tcp_send_by_reference`) across a frame queue, which hands a
/// frame's fragments to the other end with it: at MTU 1500, 9000 and 65535 A's segments
/// carry slices of its send buffer's blocks, summed as they were written, and B keeps them
/// in its receive buffer as they are (almost none copied together, every checksum right);
/// at 1000 the segments are below the queue's `DeviceCaps::by_reference_min` and go from
/// the ring; with the switch off at either end the bytes arrive all the same (B copies
/// what A sent by reference).
#[test]
fn data_goes_by_reference_across_a_frame_queue_in_segments_of_a_kib_or_more() {
    let (on, off) = (
        Tuning::fast(),
        Tuning {
            tcp_send_by_reference: false,
            ..Tuning::fast()
        },
    );
    for (mtu, a, b) in [
        (9000, on, on),
        (65535, on, on),
        (1500, on, on),
        (1000, on, on),
        (9000, on, off),
        (9000, off, on),
    ] {
        let mut p = Pair::on_frame_queue(host(mtu, a), host(mtu, b)).unwrap();
        let (c, _l, s) = connect(&mut p);
        transfer(&mut p, c, s, 8 << 20, Duration::from_secs(30));
        let ca = |k| p.a.ledger().counters().get(k);
        let cb = |k| p.b.ledger().counters().get(k);
        let what = format!(
            "MTU {mtu}, A {}, B {}",
            a.tcp_send_by_reference, b.tcp_send_by_reference
        );
        let by_reference = a.tcp_send_by_reference && mtu >= 1500;
        let (sent, kept) = (
            ca(Counter::TcpSegmentsByReference),
            cb(Counter::TcpSegmentsInByReference),
        );
        assert_eq!(sent > 100, by_reference, "{what}: {sent} sent by reference");
        assert_eq!(sent == 0, !by_reference, "{what}");
        match (by_reference, b.tcp_send_by_reference) {
            (true, true) => {
                assert!(kept > sent / 2, "{what}: {kept} of {sent} kept");
                // Only where a segment straddles the ring's last bytes and a block.
                let copied = cb(Counter::StackRxLinearized);
                assert!(copied * 20 < kept, "{what}: {copied} copied together");
            }
            (true, false) => {
                assert_eq!(kept, 0, "{what}");
                assert!(cb(Counter::StackRxLinearized) > 0, "{what}");
            }
            (false, _) => assert_eq!(kept, 0, "{what}"),
        }
        assert_eq!(cb(Counter::TcpDropBadChecksum), 0, "{what}");
        assert_eq!(cb(Counter::TcpDropMalformed), 0, "{what}");
    }
}

/// Data by reference across the memory NICs: at MTU 9000 A's DMA hands each frame to B's
/// NIC with its fragments, uncopied, and B keeps them by reference; header split copies
/// each payload from the fragments into B's NIC's pages (which TCP keeps by reference in
/// turn); a receiving NIC that reads frames whole (PIO, a faulty wire) gathers them first;
/// and the bytes arrive all the same. At MTU 1500 the segments are below the NIC's
/// `DeviceCaps::by_reference_min` (a page) and go from the ring.
#[test]
fn data_by_reference_crosses_the_memory_nics_and_is_gathered_where_a_nic_reads_frames_whole() {
    use probestack::driver::CopyMode;
    let b = |change: &dyn Fn(&mut HostConfig)| {
        let mut h = host(9000, Tuning::fast());
        change(&mut h);
        h
    };
    let cases = [
        ("DMA", b(&|_| {}), true),
        ("PIO", b(&|h| h.nic.copy_mode = CopyMode::Pio), false),
        ("header split", b(&|h| h.nic.header_split = true), true),
        (
            "faulty wire",
            b(&|h| h.nic.rx_faults = FaultConfig::lossy(9)),
            false,
        ),
    ];
    for (what, b, passed) in cases {
        let a = host(9000, Tuning::fast());
        let mut p = Pair::new(a, b).unwrap();
        let (c, _l, s) = connect(&mut p);
        transfer(&mut p, c, s, 8 << 20, Duration::from_secs(60));
        let ca = |k| p.a.ledger().counters().get(k);
        let cb = |k| p.b.ledger().counters().get(k);
        let sent = ca(Counter::TcpSegmentsByReference);
        assert!(sent > 100, "{what}");
        assert!(ca(Counter::DriverTxFragmentsPassed) >= sent, "{what}");
        let (gathered, kept) = (
            cb(Counter::DriverRxGathered),
            cb(Counter::TcpSegmentsInByReference),
        );
        if passed {
            assert_eq!(gathered, 0, "{what}");
            // Header split hands TCP the payload as a fragment again (the NIC's page
            // block), which it keeps as it would the sender's.
            assert!(
                kept > sent / 2,
                "{what}: {kept} of {sent} kept by reference"
            );
        } else {
            assert!(gathered > sent / 2, "{what}: {gathered} gathered of {sent}");
            assert_eq!(kept, 0, "{what}");
        }
    }
    let mut p = Pair::new(host(1500, Tuning::fast()), host(1500, Tuning::fast())).unwrap();
    let (c, _l, s) = connect(&mut p);
    transfer(&mut p, c, s, 2 << 20, Duration::from_secs(60));
    assert_eq!(
        p.a.ledger().counters().get(Counter::TcpSegmentsByReference),
        0
    );
}

#[test]
fn data_by_reference_survives_loss_reordering_and_corruption() {
    let p = through_faulty_queue(9000, 16 << 20, |_| LoseAndReorder::default());
    let ca = |k| p.a.ledger().counters().get(k);
    let cb = |k| p.b.ledger().counters().get(k);
    assert!(ca(Counter::TcpRetransmittedSegments) > 10);
    assert!(cb(Counter::TcpOutOfOrderSegments) > 10);
    assert!(cb(Counter::TcpSegmentsInByReference) > 100);
    // Out-of-order data cannot be kept by reference: copied together, then queued.
    assert!(cb(Counter::StackRxLinearized) > 10);
    // The corrupted copies were caught (and the transfer's hash says nothing else got by).
    assert!(cb(Counter::TcpDropBadChecksum) > 10);
}

/// Whatever layout of fragments the device hands a frame in (headers cut anywhere, data
/// partly behind the header, in one fragment or several), the stack reads it: a transfer
/// arrives whole (its ACKs cut up too) with nothing dropped or sent again. On a frame
/// queue, with data by reference (9000) and without (1500); through the memory NICs,
/// which hand fragments on or gather them, with and without checksum offload, TSO and
/// header split.
#[test]
fn any_layout_of_fragments_is_read() {
    for (case, mtu, seed) in [
        ("frame queue", 1500, 7),
        ("frame queue", 9000, 11),
        ("memory NICs", 1500, 13),
        ("memory NICs", 9000, 17),
        ("memory NICs with offloads", 9000, 19),
    ] {
        let mut a = host(mtu, Tuning::fast());
        let mut b = host(mtu, Tuning::fast());
        let mut p = match case {
            "frame queue" => {
                Pair::on_frame_queue_with(a, b, refragmenting(seed), refragmenting(seed + 1))
                    .unwrap()
            }
            _ => {
                if case == "memory NICs with offloads" {
                    for h in [&mut a, &mut b] {
                        h.stack.tuning.checksum_elision = false;
                        h.nic = NicConfig {
                            header_split: true,
                            ..h.nic.with_offloads()
                        };
                    }
                }
                Pair::with_devices(a, b, refragmenting(seed), refragmenting(seed + 1)).unwrap()
            }
        };
        let (c, _l, s) = connect(&mut p);
        transfer(&mut p, c, s, 4 << 20, Duration::from_secs(120));
        // Nothing was lost or damaged, so nothing is dropped or sent again.
        for host in [&p.a, &p.b] {
            let c = host.ledger().counters();
            for k in [
                Counter::LinkDropMalformed,
                Counter::ArpDropMalformed,
                Counter::IpDropMalformed,
                Counter::TcpDropMalformed,
                Counter::TcpDropBadChecksum,
                Counter::TcpRetransmittedSegments,
            ] {
                assert_eq!(c.get(k), 0, "{k:?}, {case} at MTU {mtu}");
            }
        }
        let cb = |k| p.b.ledger().counters().get(k);
        if case == "frame queue" {
            assert!(cb(Counter::StackRxLinearized) > 100, "{case} at MTU {mtu}");
        }
        if case == "frame queue" && mtu == 9000 {
            assert!(cb(Counter::TcpSegmentsInByReference) > 10);
        }
    }
}

/// A connection's TTL and DSCP (RFC 9293 MUST-48, MUST-49) go into its segments, through
/// the link template or the layers: a listener's into the connections it accepts, their
/// SYN-ACKs included; a change mid-connection (SHLD-21) from the next segment on; the
/// RST of an abort (SHLD-22; until the thirty-fifth session it went with the stack's).
/// Values a header cannot carry are refused.
#[test]
fn a_connections_ttl_and_dscp_go_into_its_segments() {
    /// The TTL and DSCP of each TCP segment among `frames`.
    fn fields_of(frames: &[Vec<u8>]) -> Vec<(u8, u8)> {
        frames
            .iter()
            .filter(|f| f[12..14] == [0x08, 0x00] && f[14 + 9] == 6)
            .map(|f| (f[14 + 8], f[14 + 1] >> 2))
            .collect()
    }
    for template in [true, false] {
        let (mut p, out) = captured_pair(Tuning {
            tcp_header_template: template,
            ..Tuning::fast()
        });
        // A listens with its fields set; B connects.
        let l = p.a.tcp_listen((ADDR_A, PORT), 4).unwrap();
        let fields = IpFields {
            ttl: Some(9),
            dscp: 10,
        };
        p.a.tcp_set_ip_fields(l, fields).unwrap();
        let c = p.b.tcp_connect((ADDR_A, PORT)).unwrap();
        let s = accepted_on_a(&mut p, l, c);
        transfer(&mut p, s, c, 50_000, Duration::from_secs(5));
        let mid = captured_frames(&out).len();
        p.a.tcp_set_ip_fields(s, IpFields::default()).unwrap();
        transfer(&mut p, s, c, 50_000, Duration::from_secs(5));
        let frames = captured_frames(&out);
        let (first, then) = (fields_of(&frames[..mid]), fields_of(&frames[mid..]));
        assert!(first.len() > 30, "template {template}: {first:?}");
        assert!(first.iter().all(|&f| f == (9, 10)), "template {template}");
        assert!(then.len() > 30, "template {template}: {then:?}");
        assert!(then.iter().all(|&f| f == (64, 0)), "template {template}");
        // The RST an abort sends carries the connection's fields too (SHLD-22).
        p.a.tcp_set_ip_fields(s, fields).unwrap();
        let before = captured_frames(&out).len();
        p.a.tcp_abort(s).unwrap();
        p.run_for(Duration::from_millis(1));
        let rst = fields_of(&captured_frames(&out)[before..]);
        assert_eq!(rst, [(9, 10)], "template {template}");
    }
    let mut p = pair(1500);
    let (c, _l, _s) = connect(&mut p);
    let bad = IpFields {
        ttl: Some(0),
        dscp: 0,
    };
    assert_eq!(
        p.a.tcp_set_ip_fields(c, bad),
        Err(TcpError::InvalidArgument)
    );
}

/// A template goes stale when the next hop's MAC changes and when the route goes: the
/// next segment follows the new facts.
#[test]
fn a_stale_link_template_is_rebuilt_or_refused() {
    let (mut p, out) = captured_pair(Tuning::fast());
    let (c, _l, s) = connect(&mut p);
    transfer(&mut p, c, s, 10_000, Duration::from_secs(1));
    let count = |p: &Pair, k| p.a.ledger().counters().get(k);
    assert_eq!(count(&p, Counter::TcpTemplateBuilt), 1);
    assert!(count(&p, Counter::TcpTemplateSent) > 0);
    // B's MAC, as A knows it, changes: the next frame goes to the new MAC.
    let moved = ethernet::EthernetAddress([2, 0, 0, 0, 0, 0x42]);
    p.a.add_static_arp(0, ADDR_B, moved);
    assert_eq!(p.a.tcp_send(c, b"to the new MAC"), Ok(14));
    p.run_for(Duration::from_micros(50));
    let last = captured_frames(&out).pop().unwrap();
    assert_eq!(&last[..6], &moved.0, "the stale MAC was used");
    assert_eq!(count(&p, Counter::TcpTemplateBuilt), 2);
    // No route to B any more: the segments (the new one, or the unanswered one
    // retransmitted) are dropped as the layers drop them.
    let subnet: probestack::ip::route::Ipv4Cidr = "198.18.0.0/15".parse().unwrap();
    assert!(p.a.routes_mut().remove(subnet));
    let (sent, no_route) = (
        count(&p, Counter::TcpTemplateSent),
        count(&p, Counter::IpDropNoRoute),
    );
    assert_eq!(p.a.tcp_send(c, b"nowhere"), Ok(7));
    p.run_for(Duration::from_secs(2));
    assert_eq!(count(&p, Counter::TcpTemplateSent), sent);
    assert!(count(&p, Counter::IpDropNoRoute) > no_route);
}

#[test]
fn poll_returns_the_deadline_next_deadline_gives() {
    // `poll` finds the connections' earliest timer on its walk over them for the timers
    // due, instead of walking again; what it returns must be what `next_deadline` says
    // right after, while timers fire: retransmissions and delayed ACKs on a lossy link,
    // keepalives on the idle connection, then the close through TIME-WAIT.
    let mut a = host(1500, Tuning::fast());
    let mut b = host(1500, Tuning::fast());
    a.nic.rx_faults = FaultConfig::lossy(21);
    b.nic.rx_faults = FaultConfig::lossy(22);
    let mut p = Pair::new(a, b).unwrap();
    let (c, _l, s) = connect(&mut p);
    let total = 256 << 10;
    let data = pattern(0, total);
    let (mut sent, mut got, mut closed) = (0, 0, false);
    let mut idle_since: Option<Instant> = None;
    let mut buf = vec![0u8; 64 << 10];
    let mut polls = 0u32;
    let limit = p.now() + Duration::from_secs(120);
    while p.now() < limit && polls < 1_000_000 {
        if sent < total {
            sent += p.a.tcp_send(c, &data[sent..]).unwrap_or(0);
        } else if got == total && idle_since.is_none() {
            // Idle with keepalive: each probe's timer fires in a poll and sets the next,
            // so the deadline after the timers differs from the one before.
            p.b.tcp_set_keepalive(s, Some(Duration::from_secs(1)))
                .unwrap();
            idle_since = Some(p.now());
        } else if !closed && idle_since.is_some_and(|t| p.now() > t + Duration::from_secs(5)) {
            p.a.tcp_close(c).unwrap();
            closed = true;
        }
        let now = p.now();
        let da = p.a.poll(now);
        assert_eq!(da, p.a.next_deadline(), "A's poll at {now:?}");
        let db = p.b.poll(now);
        assert_eq!(db, p.b.next_deadline(), "B's poll at {now:?}");
        polls += 1;
        while let Ok(n) = p.b.tcp_recv(s, &mut buf) {
            if n == 0 {
                // A's FIN: B closes too, so A goes through TIME-WAIT.
                let _ = p.b.tcp_close(s);
                break;
            }
            assert_eq!(&buf[..n], &data[got..got + n]);
            got += n;
        }
        if got == total && p.a.tcp_state(c).is_err() {
            break;
        }
        // To the next deadline either stack has (asked again: B may have sent A a
        // segment since A's poll), or on by a millisecond when both have work now.
        let next = match (p.a.next_deadline(), p.b.next_deadline()) {
            (Some(x), Some(y)) => Some(x.min(y)),
            (x, y) => x.or(y),
        };
        match next {
            Some(t) if t > now => p.clock.advance_to(t),
            Some(_) => {}
            None => p.clock.advance(Duration::from_millis(1)),
        }
    }
    assert_eq!(got, total, "after {polls} polls");
    // A's connection went through TIME-WAIT and its timer freed it.
    assert_eq!(p.a.tcp_state(c), Err(TcpError::BadHandle));
    let ca = p.a.ledger().counters();
    assert!(ca.get(Counter::TcpRetransmittedSegments) > 0);
    assert!(p.b.ledger().counters().get(Counter::TcpKeepalives) >= 3);
}

// ---------------------------------------------------------------------------------------
// Loss recovery entered from the SACK scoreboard (RFC 6675 §5 step 2.b).

/// Which of A's TCP segments with data its NIC loses: those at the indices `lose` (in
/// the order they go, counted from when the plan is set), and the first of them again
/// `resends` more times. With `hold`, the first is not lost but delayed: it goes just
/// before its first retransmission, which then arrives second (reordering, not loss), or
/// right after the segment at the index `release_after` if that comes first.
/// Those at the indices `twice` go twice (the network's duplicates), the copies right
/// after the segment at the index `copies_after`.
#[derive(Default)]
struct LossPlan {
    seen: usize,
    lose: Vec<usize>,
    resends: usize,
    hold: bool,
    release_after: Option<usize>,
    twice: Vec<usize>,
    copies_after: usize,
    copies: Vec<(PacketBuf, TxMeta)>,
    /// The first lost segment's sequence number, once it went.
    seq: Option<[u8; 4]>,
    /// The segment held back (`hold`), until its retransmission comes.
    held: Option<(PacketBuf, TxMeta)>,
}

/// A's link, losing, holding back and copying segments as its `LossPlan` says.
struct Planned(Arc<Mutex<LossPlan>>);

impl Tamper for Planned {
    fn send(&mut self, frame: PacketBuf, meta: TxMeta) -> Vec<(PacketBuf, TxMeta)> {
        let Some((tcp, true)) = tcp_segment(frame.data()) else {
            return vec![(frame, meta)];
        };
        let seq = tcp_seq(frame.data(), tcp);
        let mut plan = self.0.lock().unwrap();
        let i = plan.seen;
        plan.seen += 1;
        if plan.lose.contains(&i) {
            if plan.hold && plan.seq.is_none() {
                plan.held = Some((frame, meta));
            }
            plan.seq.get_or_insert(seq);
            return Vec::new();
        }
        let mut out = Vec::new();
        if plan.seq == Some(seq) {
            out.extend(plan.held.take());
        }
        if plan.release_after == Some(i) {
            if let Some(held) = plan.held.take() {
                return vec![(frame, meta), held];
            }
        }
        if plan.twice.contains(&i) {
            let copy = PacketBuf::from_slice(frame.data(), frame.headroom()).unwrap();
            plan.copies.push((copy, meta));
        }
        if i == plan.copies_after && !plan.copies.is_empty() {
            out.push((frame, meta));
            out.append(&mut plan.copies);
            return out;
        }
        if plan.resends > 0 && plan.seq == Some(seq) {
            plan.resends -= 1;
            return out;
        }
        out.push((frame, meta));
        out
    }
}

/// A connection from A to B warmed up with 200 KB (its congestion window past ten
/// segments), then a flight of `segments` full segments written at once of which A's NIC
/// loses the one at index `lost`. Returns A's connection statistics before and after the
/// flight and the virtual time the flight took, in ms.
fn lose_one_of(segments: usize, lost: usize) -> (ConnStats, ConnStats, u64) {
    lose_in_flight(segments, &[lost], 0)
}

/// [`lose_one_of`] with the segments at the indices `lost` lost, and the first of them
/// lost again on its next `resends` retransmissions.
fn lose_in_flight(segments: usize, lost: &[usize], resends: usize) -> (ConnStats, ConnStats, u64) {
    lose_in_flight_with(segments, lost, resends, |_| {})
}

/// [`lose_in_flight`] with both ends' TCP settings changed by `tcp`.
fn lose_in_flight_with(
    segments: usize,
    lost: &[usize],
    resends: usize,
    tcp: impl Fn(&mut TcpConfig),
) -> (ConnStats, ConnStats, u64) {
    let plan = LossPlan {
        lose: lost.to_vec(),
        resends,
        ..LossPlan::default()
    };
    let f = run_flights(segments, vec![plan], tcp).remove(0);
    (f.before, f.after, f.ms)
}

/// A flight of [`run_flights`]: A's statistics before and after, the virtual time it
/// took, and A's congestion window and DupThresh at its end.
struct Flight {
    before: ConnStats,
    after: ConnStats,
    ms: u64,
    cwnd: usize,
    dup_thresh: usize,
}

/// The flight of [`lose_in_flight_with`], once for each of `plans`, one after the other on
/// the same connection, A's NIC following each plan in its turn.
fn run_flights(segments: usize, plans: Vec<LossPlan>, tcp: impl Fn(&mut TcpConfig)) -> Vec<Flight> {
    let plan = Arc::new(Mutex::new(LossPlan::default()));
    let arm = plan.clone();
    let host = || {
        let mut h = host(1500, Tuning::fast());
        tcp(&mut h.stack.tcp);
        h
    };
    let mut p = Pair::with_devices(
        host(),
        host(),
        |dev| {
            Box::new(Tampered {
                dev,
                tamper: Planned(arm),
            })
        },
        |n| Box::new(n),
    )
    .unwrap();
    let (c, _l, s) = connect(&mut p);
    transfer(&mut p, c, s, 200_000, Duration::from_secs(10));
    // A segment's data: the MSS less the 12 bytes of the timestamps option.
    let data = p.a.tcp_connection(c).unwrap().mss().0 - 12;
    let mut flights = Vec::new();
    for wanted in plans {
        let before = p.a.tcp_connection(c).unwrap().stats();
        *plan.lock().unwrap() = wanted;
        let ms = transfer(&mut p, c, s, segments * data, Duration::from_secs(10));
        let plan = plan.lock().unwrap();
        let all_lost = plan.resends == 0 && plan.lose.iter().all(|&i| i < plan.seen);
        assert!(all_lost, "not all were dropped");
        assert!(plan.held.is_none(), "the held segment never went");
        assert!(plan.copies.is_empty(), "the copies never went");
        let a = p.a.tcp_connection(c).unwrap();
        flights.push(Flight {
            before,
            after: a.stats(),
            ms,
            cwnd: a.cwnd(),
            dup_thresh: a.dup_thresh(),
        });
    }
    flights
}

/// One segment of a flight written at once is lost. B takes the rest in one receive batch
/// and answers them with one ACK (`tcp_output_per_batch`), whose SACK block covers those
/// above the hole: one duplicate ACK, not three, when the first is lost, and no duplicate
/// at all when a later one is (the ACK moves SND.UNA up to the hole); and A has nothing
/// more to send that would bring more. The scoreboard shows the hole lost (RFC 6675's
/// `IsLost` for ten segments; for three, of which two are SACKed, RFC 5827's early
/// retransmit), so A retransmits it at once instead of waiting for its retransmission
/// timer (200 ms at least).
#[test]
fn a_loss_the_sack_scoreboard_shows_is_retransmitted_without_three_duplicate_acks() {
    for (segments, lost) in [(10, 0), (10, 2), (3, 0)] {
        let (before, after, ms) = lose_one_of(segments, lost);
        let what = format!("segment {lost} of {segments} lost");
        assert_eq!(after.timeouts - before.timeouts, 0, "{what}: {after:?}");
        let fast = after.fast_retransmits - before.fast_retransmits;
        assert_eq!(fast, 1, "{what}: {after:?}");
        assert!(ms < 100, "{what}: the flight took {ms} ms");
    }
}

/// A retransmission lost in turn: the first of a flight of 100 segments is lost, and so is
/// its fast retransmission. The flight goes on (recovery's window lets new data out), and
/// the scoreboard soon shows three segments' worth of it, all sent after the
/// retransmission, SACKed: A sends the first segment a third time at once, without
/// waiting for its retransmission timer (200 ms at least), as it did before (one timeout).
/// With less sent after the retransmission, the reordering window decides.
#[test]
fn a_lost_retransmission_is_found_from_the_sack_scoreboard() {
    let (before, after, ms) = lose_in_flight(100, &[0], 1);
    assert_eq!(after.timeouts - before.timeouts, 0, "{after:?}");
    assert_eq!(
        after.fast_retransmits - before.fast_retransmits,
        1,
        "{after:?}"
    );
    let again = after.lost_retransmissions - before.lost_retransmissions;
    assert_eq!(again, 1, "{after:?}");
    assert!(ms < 100, "the flight took {ms} ms");
    // With `TcpConfig::rack` off, the retransmission timer.
    let (before, after, _) = lose_in_flight_with(100, &[0], 1, |t| t.rack = false);
    assert_eq!(after.timeouts - before.timeouts, 1, "{after:?}");
    assert_eq!(after.lost_retransmissions, 0, "{after:?}");
    // A flight of 27 or 28: only one or two segments go after the retransmission, too
    // few for `IsLost`; once SACKed, the reordering window passes and the third goes
    // (before the eleventh session: the retransmission timer).
    for segments in [27, 28] {
        let (before, after, _) = lose_in_flight(segments, &[0], 1);
        assert_eq!(after.timeouts - before.timeouts, 0, "{segments}: {after:?}");
        let again = after.lost_retransmissions - before.lost_retransmissions;
        assert_eq!(again, 1, "{segments}: {after:?}");
    }
}

/// Two of a flight of four lost, the first and the third: the scoreboard shows the second
/// and fourth SACKed, too little for `IsLost` (three segments' worth) and, with four out,
/// too many for early retransmit (fewer than four). A quarter of the smoothed RTT after
/// the ACK that SACKed them (the reordering window) the first is deemed lost and fast
/// retransmit starts; the partial ACK that follows resends the third. Without the window
/// (before the tenth session) A waited for its retransmission timer.
#[test]
fn a_loss_in_a_short_flight_is_found_when_the_reordering_window_passes() {
    let (before, after, ms) = lose_in_flight(4, &[0, 2], 0);
    assert_eq!(after.timeouts - before.timeouts, 0, "{after:?}");
    let window = after.reorder_window_losses - before.reorder_window_losses;
    assert_eq!(window, 1, "{after:?}");
    assert_eq!(
        after.fast_retransmits - before.fast_retransmits,
        1,
        "{after:?}"
    );
    assert!(ms < 100, "the flight took {ms} ms");
    // With `TcpConfig::rack` off, a tail loss probe two RTTs later brings the SACKs that
    // start it; with the probes off too, the retransmission timer.
    let (before, after, _) = lose_in_flight_with(4, &[0, 2], 0, |t| t.rack = false);
    assert_eq!(after.reorder_window_losses, 0, "{after:?}");
    assert_eq!(after.loss_probes - before.loss_probes, 1, "{after:?}");
    let (before, after, _) = lose_in_flight_with(4, &[0, 2], 0, |t| {
        t.rack = false;
        t.tail_loss_probes = false;
    });
    assert_eq!(after.timeouts - before.timeouts, 1, "{after:?}");
}

/// The tail of a flight lost, the last two of four, with nothing more to send: the ACK
/// of the first two shows no loss (no SACK block, no duplicate). Two smoothed RTTs later
/// the tail loss probe resends the last segment; its SACK shows the other one lost
/// (early retransmit: one of two outstanding SACKed), and fast retransmit sends it.
/// Without the probe, A waited for its retransmission timer (200 ms at least).
#[test]
fn a_lost_tail_is_found_by_a_loss_probe() {
    let (before, after, ms) = lose_in_flight(4, &[2, 3], 0);
    assert_eq!(after.timeouts - before.timeouts, 0, "{after:?}");
    assert_eq!(after.loss_probes - before.loss_probes, 1, "{after:?}");
    assert_eq!(
        after.fast_retransmits - before.fast_retransmits,
        1,
        "{after:?}"
    );
    assert!(ms < 100, "the flight took {ms} ms");
    // With `TcpConfig::tail_loss_probes` off, the retransmission timer.
    let off = |t: &mut TcpConfig| t.tail_loss_probes = false;
    let (before, after, _) = lose_in_flight_with(4, &[2, 3], 0, off);
    assert_eq!(after.timeouts - before.timeouts, 1, "{after:?}");
    assert_eq!(after.loss_probes, 0, "{after:?}");
}

/// Reordering, not loss: the first segment of a flight of 20 is delayed until after the
/// others, so the SACKs of those above it start a fast retransmit, and the original
/// arrives just before its retransmission. B reports the retransmission with a D-SACK
/// (RFC 2883); it was the recovery's only one, so the recovery was not needed and A puts
/// back the window it had (RFC 3708's detection, `TcpConfig::spurious_undo`), and raises
/// its DupThresh past the 19 segments that overtook the late one. In the next flight the
/// first segment arrives after the other 19 again, and, no longer taken for lost, is not
/// retransmitted. Off, the window stays halved and the next flight retransmits again.
#[test]
fn a_fast_retransmit_that_d_sacks_show_unneeded_is_undone() {
    let delay_first = || LossPlan {
        lose: vec![0],
        hold: true,
        ..LossPlan::default()
    };
    let after_the_rest = || LossPlan {
        release_after: Some(19),
        ..delay_first()
    };
    let on = run_flights(20, vec![delay_first(), after_the_rest()], |_| {});
    let (before, after) = (on[0].before, on[0].after);
    assert_eq!(
        after.fast_retransmits - before.fast_retransmits,
        1,
        "{after:?}"
    );
    assert_eq!(
        after.retransmitted_segments - before.retransmitted_segments,
        1
    );
    assert_eq!(after.spurious_undos - before.spurious_undos, 1, "{after:?}");
    assert_eq!(on[0].dup_thresh, 20);
    let (before, after) = (on[1].before, on[1].after);
    assert_eq!(after.fast_retransmits, before.fast_retransmits, "{after:?}");
    assert_eq!(after.retransmitted_segments, before.retransmitted_segments);
    let off = run_flights(20, vec![delay_first(), after_the_rest()], |t| {
        t.spurious_undo = false
    });
    let after = off[1].after;
    assert_eq!(after.fast_retransmits, 2, "{after:?}");
    assert_eq!(after.spurious_undos, 0, "{after:?}");
    assert_eq!(off[1].dup_thresh, 3);
    let (cwnd, cwnd_off) = (on[0].cwnd, off[0].cwnd);
    assert!(
        cwnd > cwnd_off * 3 / 2,
        "window {cwnd} undone, {cwnd_off} not"
    );
    // A segment really lost: its one retransmission gets no D-SACK, nothing is undone.
    let (before, after, _) = lose_one_of(20, 0);
    assert_eq!(
        after.fast_retransmits - before.fast_retransmits,
        1,
        "{after:?}"
    );
    assert_eq!(after.spurious_undos, 0, "{after:?}");
}

/// The network duplicates four segments of a flight of 20, the copies arriving after the
/// 16th: B answers each copy at once with an ACK whose only SACK block is a D-SACK (RFC
/// 2883), and the last three acknowledge nothing new. They are not duplicate ACKs in RFC
/// 6675 §2's sense (none SACKs new data), so they start no fast retransmit: nothing was
/// lost. (Counted as RFC 5681's duplicates, as before the eleventh session, they did, and
/// every such retransmission was unneeded.)
#[test]
fn acks_that_only_report_duplicates_start_no_fast_retransmit() {
    let plan = LossPlan {
        twice: vec![3, 4, 5, 6],
        copies_after: 15,
        ..LossPlan::default()
    };
    let f = run_flights(20, vec![plan], |_| {}).remove(0);
    let (before, after, ms) = (f.before, f.after, f.ms);
    assert_eq!(after.dup_acks_in - before.dup_acks_in, 0, "{after:?}");
    assert_eq!(
        after.fast_retransmits - before.fast_retransmits,
        0,
        "{after:?}"
    );
    assert_eq!(after.retransmitted_segments, before.retransmitted_segments);
    assert!(ms < 100, "the flight took {ms} ms");
}

/// With `tcp_output_per_batch`, B answers a receive batch with one ACK, except for
/// out-of-order data, which it acknowledges segment by segment as RFC 5681 §4.2 asks: the
/// nine segments after a lost one bring A nine duplicate ACKs, each with its SACK block.
#[test]
fn out_of_order_segments_are_acknowledged_one_by_one_in_a_batch() {
    let (before, after, _) = lose_one_of(10, 0);
    assert_eq!(after.dup_acks_in - before.dup_acks_in, 9, "{after:?}");
    assert_eq!(after.timeouts - before.timeouts, 0, "{after:?}");
}

// ---------------------------------------------------------------------------------------
// Urgent data (RFC 9293 §3.8.5).

/// Reads everything `s` on B has; returns it.
fn read_all_b(p: &mut Pair, s: TcpHandle) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    while let Ok(n) = p.b.tcp_recv(s, &mut buf) {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    out
}

/// Urgent data is signalled once, counted down as it is read, and read in line with the
/// rest of the stream.
#[test]
fn urgent_data_is_signalled_and_read_in_line() {
    let mut p = pair(1500);
    let (c, _l, s) = connect(&mut p);
    assert_eq!(p.a.tcp_send(c, b"normal data "), Ok(12));
    assert_eq!(p.a.tcp_send_urgent(c, b"URGENT"), Ok(6));
    assert_eq!(p.a.tcp_send(c, b" and after"), Ok(10));
    p.run_for(Duration::from_millis(50));
    assert_eq!(p.b.tcp_take_urgent_signal(s), Ok(true));
    assert_eq!(p.b.tcp_take_urgent_signal(s), Ok(false));
    // The urgent data is everything up to the end of "URGENT" (MUST-33).
    assert_eq!(p.b.tcp_urgent_remaining(s), Ok(18));
    let mut buf = [0u8; 15];
    assert_eq!(p.b.tcp_recv(s, &mut buf), Ok(15));
    assert_eq!(p.b.tcp_urgent_remaining(s), Ok(3));
    let rest = read_all_b(&mut p, s);
    assert_eq!([&buf[..], &rest].concat(), b"normal data URGENT and after");
    assert_eq!(p.b.tcp_urgent_remaining(s), Ok(0));
    assert_eq!(p.b.ledger().counters().get(Counter::TcpUrgentSignals), 1);
    // An urgent send of nothing marks nothing.
    assert_eq!(p.a.tcp_send_urgent(c, b""), Ok(0));
    p.run_for(Duration::from_millis(50));
    assert_eq!(p.b.tcp_take_urgent_signal(s), Ok(false));
}

/// What the mechanism is for: a receiver whose window is shut learns that urgent data is
/// waiting behind it, from the window probes that carry the pointer.
#[test]
fn urgent_data_is_signalled_through_a_shut_window() {
    let (mut p, c, s, data) = filling_b_window(40 * 1024);
    p.run_for(Duration::from_secs(1));
    let queued = p.b.tcp_recv_queued(s).unwrap();
    assert!(queued < data.len() && p.b.tcp_urgent_remaining(s) == Ok(0));
    assert_eq!(p.a.tcp_send_urgent(c, b"!"), Ok(1));
    // Nothing read on B: the signal comes through the shut window.
    assert!(
        p.run_until(Duration::from_secs(10), |p| p.b.tcp_take_urgent_signal(s)
            == Ok(true))
    );
    assert_eq!(
        p.b.tcp_recv_queued(s),
        Ok(queued),
        "B took no data past its window"
    );
    assert_eq!(p.b.tcp_urgent_remaining(s), Ok(data.len() + 1));
    // Reading catches up to the mark.
    let mut got = Vec::new();
    assert!(p.run_until(Duration::from_secs(10), |p| {
        got.extend(read_all_b(p, s));
        got.len() == data.len() + 1
    }));
    assert_eq!(&got[..data.len()], &data[..]);
    assert_eq!(got[data.len()], b'!');
    assert_eq!(p.b.tcp_urgent_remaining(s), Ok(0));
}

/// On the wire, read by an independent parser (etherparse): every segment A sends before
/// the end of its urgent data carries URG and a pointer to the octet after it (MUST-62),
/// 0xFFFF while that is further than the field reaches (MUST-31); none after. The data
/// arrives intact.
#[test]
fn urgent_pointers_on_the_wire_point_past_the_urgent_data() {
    use etherparse::{SlicedPacket, TransportSlice};
    let (mut p, out) = captured_pair(Tuning::fast());
    let (c, _l, s) = connect(&mut p);
    let normal = pattern(0, 1000);
    let urgent = pattern(1000, 100_000);
    let after = pattern(101_000, 5000);
    let mut sent = p.a.tcp_send(c, &normal).unwrap();
    let mut got = Vec::new();
    assert!(p.run_until(Duration::from_secs(10), |p| {
        if sent < 1000 + urgent.len() {
            sent += p.a.tcp_send_urgent(c, &urgent[sent - 1000..]).unwrap_or(0);
        } else if sent < 106_000 {
            sent += p.a.tcp_send(c, &after[sent - 101_000..]).unwrap_or(0);
        }
        got.extend(read_all_b(p, s));
        got.len() == 106_000
    }));
    assert_eq!(got, [normal, urgent, after].concat());
    let mut isn = None;
    let (mut urgent_segments, mut plain_after) = (0, 0);
    for frame in captured_frames(&out) {
        let Ok(sliced) = SlicedPacket::from_ethernet(&frame) else {
            continue;
        };
        let Some(TransportSlice::Tcp(t)) = &sliced.transport else {
            continue;
        };
        if t.syn() {
            isn = Some(t.sequence_number());
            continue;
        }
        // Stream offset of the segment's first byte, and of the urgent data's end.
        let offset = t.sequence_number().wrapping_sub(isn.unwrap() + 1) as usize;
        // (The first 1,000 bytes went before the urgent send, without URG.)
        let end = 101_000;
        if (1000..end).contains(&offset) && !t.payload().is_empty() {
            assert!(t.urg(), "no URG at offset {offset}");
            assert_eq!(
                usize::from(t.urgent_pointer()),
                (end - offset).min(0xFFFF),
                "at offset {offset}"
            );
            assert!(t.payload().len() <= 1460, "a super-segment in urgent mode");
            urgent_segments += 1;
        } else if offset >= end {
            assert!(!t.urg(), "URG past the urgent data, at offset {offset}");
            plain_after += usize::from(!t.payload().is_empty());
        }
    }
    assert!(urgent_segments >= 69, "{urgent_segments}");
    assert!(plain_after >= 4, "{plain_after}");
}

// ---------------------------------------------------------------------------------------
// ECN (RFC 3168).

/// A router behind A's NIC that marks Congestion Experienced on the ECN-capable frames A
/// sends while `marking` holds (RFC 3168 §5: only an ECT packet is marked), fixing the
/// IP header checksum, and counts them.
struct Marking {
    marking: Arc<AtomicBool>,
    marked: Arc<AtomicU64>,
}

impl Hop for Marking {
    fn forward(&mut self, frame: &mut PacketBuf) -> (bool, Option<PacketBuf>) {
        let data = frame.data_mut();
        let ect = data[12..14] == [0x08, 0x00] && data[ethernet::HEADER_LEN + 1] & 0b11 == 0b10;
        if self.marking.load(Ordering::Relaxed) && ect {
            let mut p = ipv4::Packet::new_unchecked(&mut data[ethernet::HEADER_LEN..]);
            p.set_ecn(0b11);
            p.fill_checksum();
            self.marked.fetch_add(1, Ordering::Relaxed);
        }
        (true, None)
    }
}

/// A TCP segment among A's frames: (flags, ECN field, payload length).
fn segments_of(frames: &[Vec<u8>]) -> Vec<(u8, u8, usize)> {
    frames
        .iter()
        .filter_map(|f| {
            let (at, _) = tcp_segment(f).or_else(|| {
                // A SYN: `tcp_segment` leaves those out.
                (f[12..14] == [0x08, 0x00] && f[23] == 6).then_some((34, false))
            })?;
            let total = usize::from(u16::from_be_bytes([f[16], f[17]]));
            let payload = total - (at - 14) - usize::from(f[at + 12] >> 4) * 4;
            Some((f[at + 13], f[15] & 0b11, payload))
        })
        .collect()
}

/// A router that lets everything through.
struct Through;

impl Hop for Through {
    fn forward(&mut self, _frame: &mut PacketBuf) -> (bool, Option<PacketBuf>) {
        (true, None)
    }
}

/// Two stacks configured as `a` and `b`, A's frames captured (as A sends them) and then
/// handed to `hop`.
fn captured_through(a: HostConfig, b: HostConfig, hop: impl Hop + 'static) -> (Pair, SharedBytes) {
    let out = SharedBytes::default();
    let sink = out.clone();
    let p = Pair::with_devices(
        a,
        b,
        move |nic| {
            let pcap = probestack::driver::pcap::PcapWriter::new(
                nic,
                sink,
                probestack::driver::pcap::PcapMode::TxOnly,
            )
            .unwrap();
            Box::new(Routed::new(pcap, hop))
        },
        |nic| Box::new(nic),
    )
    .unwrap();
    (p, out)
}

fn ecn_host(ecn: bool, template: bool) -> HostConfig {
    let mut h = host(
        1500,
        Tuning {
            tcp_header_template: template,
            ..Tuning::fast()
        },
    );
    h.stack.tcp.ecn = ecn;
    h
}

/// ECN is used only when both ends ask (RFC 3168 §6.1.1): the SYN carries ECE and CWR,
/// the SYN-ACK ECE; then A's data goes ECT(0) and its pure ACKs and SYN do not. With
/// either end off, nothing is marked. Through the link template and through the layers.
#[test]
fn ecn_is_negotiated_and_only_new_data_is_ecn_capable() {
    for (a_on, b_on, template) in [
        (true, true, true),
        (true, true, false),
        (true, false, true),
        (false, true, true),
    ] {
        let (mut p, out) =
            captured_through(ecn_host(a_on, template), ecn_host(b_on, template), Through);
        let (c, _l, s) = connect(&mut p);
        let both = a_on && b_on;
        assert_eq!(p.a.tcp_connection(c).unwrap().ecn_enabled(), both);
        assert_eq!(p.b.tcp_connection(s).unwrap().ecn_enabled(), both);
        transfer(&mut p, c, s, 100_000, Duration::from_secs(5));
        // B to A, so that A sends pure ACKs.
        assert_eq!(p.b.tcp_send(s, &pattern(0, 20_000)), Ok(20_000));
        let (mut got, mut buf) = (0, vec![0u8; 4096]);
        assert!(p.run_until(Duration::from_secs(5), |p| {
            got += p.a.tcp_recv(c, &mut buf).unwrap_or(0);
            got == 20_000
        }));
        let segs = segments_of(&captured_frames(&out));
        let syn = segs.iter().find(|s| s.0 & 0x02 != 0).unwrap();
        assert_eq!(syn.0 & 0xC0 == 0xC0, a_on, "the SYN's ECE and CWR");
        assert_eq!(syn.1, 0, "a SYN is never ECT");
        let data: Vec<_> = segs.iter().filter(|s| s.2 > 0).collect();
        let acks: Vec<_> = segs
            .iter()
            .filter(|s| s.2 == 0 && s.0 & 0x02 == 0)
            .collect();
        assert!(data.len() > 50 && acks.len() > 5);
        let want = if both { 0b10 } else { 0 };
        assert!(data.iter().all(|s| s.1 == want), "data: {:?}", &data[..3]);
        assert!(acks.iter().all(|s| s.1 == 0), "a pure ACK is never ECT");
    }
}

/// Congestion marked on the path (CE) reaches the sender as ECE: it halves its window
/// without losing anything (no retransmission), answers with CWR, which ends B's ECEs,
/// and the data arrives intact (RFC 3168 §6.1.2-3).
#[test]
fn congestion_experienced_reduces_the_window_without_a_loss() {
    let marking = Arc::new(AtomicBool::new(false));
    let marked = Arc::new(AtomicU64::new(0));
    let hop = Marking {
        marking: marking.clone(),
        marked: marked.clone(),
    };
    let (mut p, out) = captured_through(ecn_host(true, true), ecn_host(true, true), hop);
    let (c, _l, s) = connect(&mut p);
    transfer(&mut p, c, s, 200_000, Duration::from_secs(5));
    marking.store(true, Ordering::Relaxed);
    transfer(&mut p, c, s, 20_000, Duration::from_secs(5));
    marking.store(false, Ordering::Relaxed);
    transfer(&mut p, c, s, 200_000, Duration::from_secs(5));
    assert!(marked.load(Ordering::Relaxed) > 0);
    let (a, b) = (p.a.ledger().counters(), p.b.ledger().counters());
    assert!(b.get(Counter::TcpEcnCeIn) > 0);
    let reductions = a.get(Counter::TcpEcnReductions);
    assert!(reductions >= 1, "no reduction");
    assert_eq!(a.get(Counter::TcpRetransmittedSegments), 0);
    // CWR went out on new data, at most once per reduction (the last may still wait
    // for new data when the transfer ends).
    let cwr: Vec<_> = segments_of(&captured_frames(&out))
        .into_iter()
        .filter(|s| s.0 & 0x80 != 0 && s.0 & 0x02 == 0)
        .collect();
    assert!(!cwr.is_empty() && cwr.len() as u64 <= reductions, "{cwr:?}");
    assert!(cwr.iter().all(|s| s.2 > 0 && s.1 == 0b10), "{cwr:?}");
}

/// A router behind A's NIC that loses the `nth` ECN-capable frame A sends.
struct LosesOne {
    nth: u64,
    seen: u64,
}

impl Hop for LosesOne {
    fn forward(&mut self, frame: &mut PacketBuf) -> (bool, Option<PacketBuf>) {
        let data = frame.data();
        if data[12..14] == [0x08, 0x00] && data[ethernet::HEADER_LEN + 1] & 0b11 == 0b10 {
            self.seen += 1;
            return (self.seen != self.nth, None);
        }
        (true, None)
    }
}

/// A loss reduces the window too, and on a connection with ECN the reduction is
/// announced with CWR on the next new data (RFC 3168 §6.1.2), though no ECE came.
#[test]
fn a_loss_on_an_ecn_connection_is_announced_with_cwr() {
    let hop = LosesOne { nth: 40, seen: 0 };
    let (mut p, out) = captured_through(ecn_host(true, true), ecn_host(true, true), hop);
    let (c, _l, s) = connect(&mut p);
    transfer(&mut p, c, s, 400_000, Duration::from_secs(5));
    let a = p.a.ledger().counters();
    assert!(
        a.get(Counter::TcpRetransmittedSegments) > 0,
        "nothing was lost"
    );
    assert_eq!(a.get(Counter::TcpEcnReductions), 0, "no ECE came");
    let cwr: Vec<_> = segments_of(&captured_frames(&out))
        .into_iter()
        .filter(|s| s.0 & 0x80 != 0 && s.0 & 0x02 == 0)
        .collect();
    assert!(!cwr.is_empty(), "the reduction was not announced");
    assert!(cwr.iter().all(|s| s.2 > 0 && s.1 == 0b10), "{cwr:?}");
}

/// Flips a bit in a copy of the first fragment of every `every`-th frame that carries
/// fragments (data by reference; the sender's block is never written), the first `limit`
/// such frames at most.
struct CorruptFragments {
    every: u64,
    limit: u64,
    seen: u64,
}

impl Tamper for CorruptFragments {
    fn send(&mut self, mut frame: PacketBuf, meta: TxMeta) -> Vec<(PacketBuf, TxMeta)> {
        if frame.has_frags() {
            self.seen += 1;
            if self.seen.is_multiple_of(self.every) && self.seen / self.every <= self.limit {
                corrupt_first_fragment(&mut frame, 0x04);
            }
        }
        vec![(frame, meta)]
    }
}

/// A pair on a frame queue at MTU 9000 (data by reference), A's frames through
/// `CorruptFragments`, B verifying on read or not.
fn corrupting_pair(every: u64, limit: u64, verify_on_read: bool) -> Pair {
    let tuning = Tuning {
        tcp_verify_on_read: verify_on_read,
        ..Tuning::fast()
    };
    Pair::on_frame_queue_with(
        host(9000, tuning),
        host(9000, tuning),
        move |dev| -> Box<dyn Device + Send> {
            Box::new(Tampered {
                dev,
                tamper: CorruptFragments {
                    every,
                    limit,
                    seen: 0,
                },
            })
        },
        |dev| Box::new(dev),
    )
    .unwrap()
}

/// Verifying on read (`Tuning::tcp_verify_on_read`) delivers what verifying at input
/// delivers, corrupted segments caught either way and sent again: on, B's segments wait
/// unverified and B's reads verify them as they copy them; off, none waits.
#[test]
fn verifying_on_read_delivers_what_verifying_at_input_delivers() {
    for on in [true, false] {
        let mut p = corrupting_pair(37, u64::MAX, on);
        let (c, _l, s) = connect(&mut p);
        // The transfer checks every byte by hash.
        transfer(&mut p, c, s, 8 << 20, Duration::from_secs(60));
        let ca = |k| p.a.ledger().counters().get(k);
        let cb = |k| p.b.ledger().counters().get(k);
        let (deferred, in_read, unread) = (
            cb(Counter::TcpSegmentsDeferred),
            cb(Counter::TcpVerifiedOnRead),
            cb(Counter::TcpVerifiedUnread),
        );
        assert!(cb(Counter::TcpDropBadChecksum) > 5, "on: {on}");
        assert!(ca(Counter::TcpRetransmittedSegments) > 5, "on: {on}");
        if on {
            assert!(deferred > 500, "{deferred} deferred");
            assert!(
                in_read > deferred / 2,
                "{in_read} of {deferred} verified in reads"
            );
            assert!(deferred >= in_read + unread);
        } else {
            assert_eq!((deferred, in_read, unread), (0, 0, 0));
        }
    }
}

/// Unverified data is not acknowledged: B does not read, and A's data stays
/// unacknowledged until B's delayed-ACK timeout, when B verifies it where it lies and
/// acknowledges it; the read then returns it as sent.
#[test]
fn unread_data_is_verified_and_acknowledged_at_the_delayed_ack_timeout() {
    let mut p = corrupting_pair(1, 0, true);
    let (c, _l, s) = connect(&mut p);
    let data = pattern(0, 32 * 1024);
    assert_eq!(p.a.tcp_send(c, &data), Ok(data.len()));
    p.run_for(Duration::from_millis(5));
    let cb = |p: &Pair, k| p.b.ledger().counters().get(k);
    let unacked = |p: &Pair| {
        let conn = p.a.tcp_connection(c).unwrap();
        conn.snd_nxt().bytes_since(conn.snd_una())
    };
    assert!(cb(&p, Counter::TcpSegmentsDeferred) >= 3);
    // Everything A sent (all but the write's short end, which Nagle holds) waits at B,
    // neither acknowledged nor readable.
    let held = unacked(&p);
    assert!(held > data.len() / 2, "{held} unacknowledged");
    assert_eq!(p.b.tcp_recv_queued(s), Ok(0));
    p.run_for(Duration::from_millis(100));
    assert_eq!(unacked(&p), 0);
    assert_eq!(
        cb(&p, Counter::TcpVerifiedUnread),
        cb(&p, Counter::TcpSegmentsDeferred)
    );
    assert_eq!(p.b.tcp_recv_queued(s), Ok(data.len()));
    let mut got = vec![0u8; data.len() + 1];
    assert_eq!(p.b.tcp_recv(s, &mut got), Ok(data.len()));
    assert_eq!(&got[..data.len()], &data[..]);
    assert_eq!(cb(&p, Counter::TcpVerifiedOnRead), 0);
}

/// A read that finds only a segment that fails its checksum reports would-block, not the
/// end of the stream, and the segment comes again.
#[test]
fn a_read_of_only_a_failing_segment_would_block() {
    let mut p = corrupting_pair(1, 1, true);
    let (c, _l, s) = connect(&mut p);
    let data = pattern(0, 32 * 1024);
    assert_eq!(p.a.tcp_send(c, &data), Ok(data.len()));
    p.settle();
    let cb = |p: &Pair, k| p.b.ledger().counters().get(k);
    assert!(cb(&p, Counter::TcpSegmentsDeferred) >= 1);
    // The data verified at input first (the copied start of the write), exactly.
    let mut got = vec![0u8; data.len()];
    let mut n = p.b.tcp_recv_queued(s).unwrap();
    assert_eq!(p.b.tcp_recv(s, &mut got[..n]).unwrap_or(0), n);
    // Then only unverified segments, the first of which fails.
    assert_eq!(p.b.tcp_recv(s, &mut got[n..]), Err(TcpError::WouldBlock));
    assert_eq!(cb(&p, Counter::TcpDropBadChecksum), 1);
    assert_eq!(cb(&p, Counter::TcpVerifiedOnRead), 0);
    assert!(p.run_until(Duration::from_secs(5), |p| {
        n += p.b.tcp_recv(s, &mut got[n..]).unwrap_or(0);
        n == data.len()
    }));
    assert_eq!(&got[..n], &data[..]);
    assert!(
        p.a.ledger()
            .counters()
            .get(Counter::TcpRetransmittedSegments)
            >= 1
    );
}
