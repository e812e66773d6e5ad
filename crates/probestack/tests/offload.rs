//! Checksum offload and TCP segmentation offload on the memory NIC, between two stacks on
//! a virtual clock: the checksums the NIC completes are right on the wire (by etherparse),
//! bulk TCP survives drops, duplicates and reordering with the NIC checksumming and
//! cutting super-frames at MTU 1500 and 9000, corruption the CRC does not see is still
//! caught when the receiving NIC verifies, and UDP (which does not ask for transmit
//! offload) works as before.

mod common;

use std::sync::{Arc, Mutex};

use common::transfer::{connect, transfer};
use etherparse::{NetSlice, SlicedPacket, TransportSlice};
use probestack::buf::PacketBuf;
use probestack::driver::{
    CopyMode, Device, DeviceCaps, DeviceContext, DeviceError, FaultConfig, MemoryNic, NicStats,
    RxChecksum, RxFrame, TxMeta,
};
use probestack::probe::Counter;
use probestack::sim::{HostConfig, Pair, ADDR_B};
use probestack::socket::udp::{UdpError, UdpHandle};
use probestack::time::{Duration, Instant};
use probestack::tuning::Tuning;
use probestack::wire::Ipv4Address;

const PORT: u16 = 5001;

/// What a watched NIC did, readable while its stack owns it.
#[derive(Default)]
struct Seen {
    stats: NicStats,
    /// The first frames received (as they came off the wire), with what the NIC said.
    frames: Vec<(Vec<u8>, RxChecksum)>,
}

const KEEP_FRAMES: usize = 3000;

/// A memory NIC that publishes its statistics and the frames it receives.
struct Watched {
    nic: MemoryNic,
    seen: Arc<Mutex<Seen>>,
}

impl Watched {
    fn publish(&self) {
        self.seen.lock().unwrap().stats = self.nic.stats();
    }
}

impl Device for Watched {
    fn caps(&self) -> DeviceCaps {
        self.nic.caps()
    }
    fn transmit(
        &mut self,
        frame: PacketBuf,
        meta: TxMeta,
        cx: &DeviceContext<'_>,
    ) -> Result<(), DeviceError> {
        let r = self.nic.transmit(frame, meta, cx);
        self.publish();
        r
    }
    fn tx_ready(&self) -> bool {
        self.nic.tx_ready()
    }
    fn take_notification(&mut self, cx: &DeviceContext<'_>) -> bool {
        let r = self.nic.take_notification(cx);
        self.publish();
        r
    }
    fn receive(&mut self, cx: &DeviceContext<'_>) -> Option<RxFrame> {
        let f = self.nic.receive(cx);
        if let Some(f) = &f {
            let mut seen = self.seen.lock().unwrap();
            if seen.frames.len() < KEEP_FRAMES {
                // The whole frame: a NIC may hand data its sender passed by reference up
                // in fragments behind the headers.
                let mut bytes = f.frame.data().to_vec();
                for frag in f.frame.frags() {
                    bytes.extend_from_slice(frag);
                }
                seen.frames.push((bytes, f.checksum));
            }
        }
        self.publish();
        f
    }
    fn next_deadline(&self) -> Option<Instant> {
        self.nic.next_deadline()
    }
    fn recycle(&mut self, frame: PacketBuf) {
        self.nic.recycle(frame)
    }
    fn buffer_depot(&self) -> Option<probestack::buf::Depot> {
        self.nic.buffer_depot()
    }
}

/// A pair whose NICs both have every offload, and whose stacks use them; checksum
/// elision off, so that there are checksums to offload.
struct World {
    p: Pair,
    a: Arc<Mutex<Seen>>,
    b: Arc<Mutex<Seen>>,
}

impl World {
    fn new(a: HostConfig, b: HostConfig) -> World {
        let (sa, sb) = (Arc::default(), Arc::default());
        let (wa, wb) = (Arc::clone(&sa), Arc::clone(&sb));
        let p = Pair::with_devices(
            a,
            b,
            |nic| Box::new(Watched { nic, seen: wa }),
            |nic| Box::new(Watched { nic, seen: wb }),
        )
        .unwrap();
        World { p, a: sa, b: sb }
    }

    fn stats_a(&self) -> NicStats {
        self.a.lock().unwrap().stats
    }

    fn stats_b(&self) -> NicStats {
        self.b.lock().unwrap().stats
    }
}

fn tuning(tso: bool) -> Tuning {
    Tuning {
        checksum_elision: false,
        checksum_offload: true,
        segmentation_offload: tso,
        ..Tuning::fast()
    }
}

fn host(mtu: usize, tso: bool) -> HostConfig {
    let mut h = HostConfig::with_mtu(mtu);
    h.stack.tuning = tuning(tso);
    h.stack.tcp.msl = Duration::from_secs(1);
    h.nic = h.nic.with_offloads();
    h
}

/// Same ones'-complement zero: a computed checksum of 0 may travel as 0xFFFF.
fn same_checksum(sent: u16, computed: u16) -> bool {
    sent == computed || (computed == 0 && sent == 0xFFFF)
}

/// Every IPv4 frame parses with etherparse and carries the IPv4 header and TCP or UDP
/// checksums etherparse computes; returns how many TCP frames carried data.
fn check_frames(frames: &[(Vec<u8>, RxChecksum)], mtu: usize) -> usize {
    let mut data_frames = 0;
    for (f, _) in frames {
        assert!(f.len() <= 14 + mtu, "a frame of {} bytes", f.len());
        let sliced = SlicedPacket::from_ethernet(f).expect("etherparse reads the frame");
        let Some(NetSlice::Ipv4(ip)) = &sliced.net else {
            continue; // ARP
        };
        let h = ip.header().to_header();
        assert_eq!(h.header_checksum, h.calc_header_checksum());
        match &sliced.transport {
            Some(TransportSlice::Tcp(t)) => {
                let want = t.calc_checksum_ipv4(h.source, h.destination).unwrap();
                assert!(same_checksum(t.checksum(), want), "TCP checksum");
                if !t.payload().is_empty() {
                    data_frames += 1;
                }
            }
            Some(TransportSlice::Udp(u)) => {
                let want = u.to_header().calc_checksum_ipv4(&h, u.payload()).unwrap();
                assert!(u.checksum() == 0 || u.checksum() == want, "UDP checksum");
            }
            _ => {}
        }
    }
    data_frames
}

#[test]
fn offloaded_checksums_are_right_on_the_wire() {
    let (dma, pio) = (CopyMode::Dma, CopyMode::Pio);
    for (mtu, tso, mode) in [
        (1500, false, dma),
        (1500, true, dma),
        (9000, true, dma),
        (1500, true, pio),
    ] {
        let (mut a, mut b) = (host(mtu, tso), host(mtu, tso));
        a.nic.copy_mode = mode;
        b.nic.copy_mode = mode;
        let mut w = World::new(a, b);
        let (c, s) = connect(&mut w.p, PORT);
        assert!(!w.p.a.tcp_connection(c).unwrap().checksum_elided());
        transfer(&mut w.p, c, s, 2 << 20, Duration::from_secs(30));
        // Some data back, so that both NICs complete checksums.
        assert_eq!(w.p.b.tcp_send(s, &[5u8; 5000]), Ok(5000));
        let mut buf = [0u8; 8192];
        let mut back = 0;
        assert!(w.p.run_until(Duration::from_secs(1), |p| {
            back += p.a.tcp_recv(c, &mut buf).unwrap_or(0);
            back == 5000
        }));
        for seen in [&w.a, &w.b] {
            let seen = seen.lock().unwrap();
            assert!(check_frames(&seen.frames, mtu) > 0);
            // A clean link: the NIC verified every IPv4 frame it received.
            assert_eq!(seen.stats.rx_csum_bad, 0);
            assert!(seen
                .frames
                .iter()
                .all(|(f, c)| f[12..14] != [8, 0] || *c == RxChecksum::Verified));
        }
        let (sa, sb) = (w.stats_a(), w.stats_b());
        // Every TCP segment either way left its checksum to the NIC (all but one ARP
        // frame each way).
        assert_eq!(sa.tx_csum_offloaded, sa.tx_frames - 1, "{sa:?}");
        assert_eq!(sb.tx_csum_offloaded, sb.tx_frames - 1, "{sb:?}");
        assert_eq!(sa.tx_csum_software + sb.tx_csum_software, 0);
        assert_eq!(sb.rx_csum_verified, sb.rx_frames - 1, "all but ARP");
        if tso {
            assert!(sa.tx_super_frames > 0);
            assert!(sa.tx_segments > 2 * sa.tx_super_frames);
        } else {
            assert_eq!(sa.tx_super_frames, 0);
        }
        let cb = w.p.b.ledger().counters();
        assert_eq!(cb.get(Counter::TcpDropBadChecksum), 0);
        assert_eq!(
            w.p.a
                .ledger()
                .counters()
                .get(Counter::TcpRetransmittedSegments),
            0
        );
    }
}

/// 16 MiB from A to B with checksum offload (and TSO when asked) under seeded drops,
/// duplicates and reordering; returns the sender's NIC statistics.
fn bulk_under_faults(mtu: usize, tso: bool) -> NicStats {
    let mut a = host(mtu, tso);
    let mut b = host(mtu, tso);
    a.nic.rx_faults = FaultConfig::lossy(17);
    b.nic.rx_faults = FaultConfig::lossy(18);
    let mut w = World::new(a, b);
    let (c, s) = connect(&mut w.p, PORT);
    transfer(&mut w.p, c, s, 16 << 20, Duration::from_secs(600));
    let ca = w.p.a.ledger().counters();
    assert!(ca.get(Counter::TcpRetransmittedSegments) > 0);
    assert!(ca.get(Counter::TcpFastRetransmits) > 0);
    let (sa, sb) = (w.stats_a(), w.stats_b());
    assert!(sa.tx_csum_offloaded > 0);
    assert_eq!(sa.tx_csum_software, 0);
    assert!(sb.rx_csum_verified > 0);
    assert_eq!(sb.rx_csum_bad, 0, "drops and reordering corrupt nothing");
    assert_eq!(
        w.p.b.ledger().counters().get(Counter::TcpDropBadChecksum),
        0
    );
    sa
}

#[test]
fn bulk_16_mib_with_checksum_offload_under_faults_mtu_1500() {
    let s = bulk_under_faults(1500, false);
    assert_eq!(s.tx_super_frames, 0);
}

#[test]
fn bulk_16_mib_with_checksum_offload_under_faults_mtu_9000() {
    let s = bulk_under_faults(9000, false);
    assert_eq!(s.tx_super_frames, 0);
}

#[test]
fn bulk_16_mib_with_tso_under_faults_mtu_1500() {
    let s = bulk_under_faults(1500, true);
    // Super-frames were cut, several segments each (under these faults 4.10 on average
    // before TCP's early retransmit, 3.97 with it); retransmissions (of single segments,
    // parts of them) went out as ordinary frames.
    assert!(s.tx_super_frames > 100, "{s:?}");
    assert!(s.tx_segments > 3 * s.tx_super_frames, "{s:?}");
    assert!(s.tx_frames > s.tx_segments);
}

#[test]
fn bulk_16_mib_with_tso_under_faults_mtu_9000() {
    let s = bulk_under_faults(9000, true);
    assert!(s.tx_super_frames > 20, "{s:?}");
    assert!(s.tx_segments > 2 * s.tx_super_frames, "{s:?}");
    assert!(s.tx_frames > s.tx_segments);
}

#[test]
fn corruption_is_caught_and_retransmitted_when_the_nic_verifies() {
    for tso in [false, true] {
        let a = host(1500, tso);
        let mut b = host(1500, tso);
        b.nic.rx_faults = FaultConfig {
            seed: 3,
            flip_passed: 0.02,
            ..FaultConfig::none()
        };
        let mut w = World::new(a, b);
        let (c, s) = connect(&mut w.p, PORT);
        transfer(&mut w.p, c, s, 4 << 20, Duration::from_secs(120));
        let sb = w.stats_b();
        let cb = w.p.b.ledger().counters();
        // The NIC saw the corruption, said nothing, and the stack dropped the frames.
        assert!(sb.rx_csum_bad > 20, "{sb:?}");
        assert!(sb.rx_csum_verified > 0);
        let dropped = cb.get(Counter::TcpDropBadChecksum) + cb.get(Counter::IpDropBadChecksum);
        assert!(dropped >= sb.rx_csum_bad * 9 / 10, "{dropped} {sb:?}");
        assert!(cb.get(Counter::TcpDropBadChecksum) > 0);
        let ca = w.p.a.ledger().counters();
        assert!(ca.get(Counter::TcpRetransmittedSegments) > 0);
        if tso {
            assert!(w.stats_a().tx_super_frames > 0);
        }
    }
}

/// A NIC that verifies only transport checksums reports each frame's raw sum; the stack
/// adds the pseudo-header to it instead of summing the segment again, and still catches
/// corruption the CRC did not see.
#[test]
fn a_raw_sum_from_the_nic_is_used_and_still_catches_corruption() {
    let a = host(1500, false);
    let mut b = host(1500, false);
    b.nic.checksum_offload.ipv4_rx = false;
    b.nic.rx_faults = FaultConfig {
        seed: 9,
        flip_passed: 0.02,
        ..FaultConfig::none()
    };
    let mut w = World::new(a, b);
    let (c, s) = connect(&mut w.p, PORT);
    transfer(&mut w.p, c, s, 4 << 20, Duration::from_secs(120));
    let raw =
        w.b.lock()
            .unwrap()
            .frames
            .iter()
            .filter(|(_, x)| matches!(x, RxChecksum::RawSum(_)))
            .count();
    assert!(raw > 100, "the NIC reported raw sums ({raw})");
    assert_eq!(w.stats_b().rx_csum_verified, 0);
    let cb = w.p.b.ledger().counters();
    assert!(cb.get(Counter::TcpDropBadChecksum) + cb.get(Counter::IpDropBadChecksum) > 20);
}

/// A payload that says what it should be, so a receiver can tell an intact datagram.
fn payload(seq: u32, len: usize) -> Vec<u8> {
    let mut v: Vec<u8> = (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).wrapping_add(seq) as u8)
        .collect();
    if len >= 4 {
        v[..4].copy_from_slice(&seq.to_be_bytes());
    }
    v
}

fn intact(d: &[u8]) -> bool {
    d.len() < 4 || payload(u32::from_be_bytes([d[0], d[1], d[2], d[3]]), d.len()) == d
}

fn recv_one(p: &mut Pair, h: UdpHandle) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; 70_000];
    let mut got = None;
    p.run_until(Duration::from_secs(2), |p| {
        match p.b.udp_recv_from(h, &mut buf) {
            Ok(r) => {
                got = Some(buf[..r.len].to_vec());
                true
            }
            Err(UdpError::WouldBlock) => false,
            Err(e) => panic!("recv: {e}"),
        }
    });
    got
}

#[test]
fn udp_with_offloads_on() {
    for (mtu, elide) in [(1500, false), (9000, false), (1500, true)] {
        let mut a = host(mtu, true);
        let mut b = host(mtu, true);
        a.stack.tuning.checksum_elision = elide;
        b.stack.tuning.checksum_elision = elide;
        let mut w = World::new(a, b);
        let rx = w.p.b.udp_open();
        w.p.b.udp_bind(rx, Ipv4Address::UNSPECIFIED, 9).unwrap();
        let tx = w.p.a.udp_open();
        // Small, a full frame, and datagrams that are fragmented.
        let sizes = [0, 1, 59, 512, 1472, 1473, 8000, 30000, 65507];
        for (i, size) in sizes.into_iter().enumerate() {
            let data = payload(i as u32, size);
            assert_eq!(w.p.a.udp_send_to(tx, &data, ADDR_B, 9), Ok(size));
            let got = recv_one(&mut w.p, rx).unwrap_or_else(|| panic!("{mtu} {size} lost"));
            assert_eq!(got, data, "mtu {mtu} size {size}");
        }
        check_frames(&w.b.lock().unwrap().frames, mtu);
        let (sender, receiver) = (w.stats_a(), w.stats_b());
        // UDP leaves the checksum of every datagram sent whole to the NIC (none when it
        // elides them; a fragmented one it sums itself); the wire check above found them
        // right. The receiving NIC verified what it could (every datagram that was not a
        // fragment) and found nothing wrong.
        let whole = sizes.iter().filter(|&&s| 28 + s <= mtu).count() as u64;
        let offloaded = if elide { 0 } else { whole };
        assert_eq!(
            sender.tx_csum_offloaded, offloaded,
            "mtu {mtu} elide {elide}"
        );
        assert_eq!(sender.tx_csum_software, 0);
        assert!(receiver.rx_csum_verified >= 5, "{receiver:?}");
        assert_eq!(receiver.rx_csum_bad, 0);
    }
}

#[test]
fn udp_corruption_is_caught_with_offloads_on() {
    let a = host(1500, true);
    let mut b = host(1500, true);
    b.nic.rx_faults = FaultConfig {
        flip_passed: 0.05,
        ..FaultConfig::seeded(11)
    };
    let mut w = World::new(a, b);
    let rx = w.p.b.udp_open();
    w.p.b.udp_bind(rx, Ipv4Address::UNSPECIFIED, 9).unwrap();
    w.p.b.udp_set_recv_buffer(rx, 64 << 20).unwrap();
    let tx = w.p.a.udp_open();
    for i in 0..2000 {
        w.p.a.udp_send_to(tx, &payload(i, 600), ADDR_B, 9).unwrap();
        w.p.run_for(Duration::from_micros(20));
    }
    w.p.run_for(Duration::from_millis(10));
    let mut buf = [0u8; 2000];
    let (mut good, mut bad) = (0, 0);
    while let Ok(r) = w.p.b.udp_recv_from(rx, &mut buf) {
        if intact(&buf[..r.len]) && r.len == 600 {
            good += 1;
        } else {
            bad += 1;
        }
    }
    assert_eq!(bad, 0, "a corrupted datagram was delivered");
    assert!(good > 1800, "{good}");
    let sb = w.stats_b();
    assert!(sb.rx_csum_bad > 50, "{sb:?}");
    assert!(w.p.b.ledger().counters().get(Counter::UdpDropBadChecksum) > 0);
}

#[test]
fn tso_works_when_the_peers_agreed_on_no_checksum() {
    // Tuning::fast() elides TCP checksums by agreement on the memory link (a CRC link);
    // super-segments must still go to the NIC to be cut, not be lost as too large.
    for mtu in [1500, 9000] {
        let mut h = host(mtu, true);
        h.stack.tuning.checksum_elision = true;
        let mut w = World::new(h.clone(), h);
        let (tx, rx) = connect(&mut w.p, PORT);
        assert!(w.p.a.tcp_connection(tx).unwrap().checksum_elided());
        transfer(&mut w.p, tx, rx, 4 << 20, Duration::from_secs(60));
        w.p.run_for(Duration::from_millis(1));
        let a = &w.p.a;
        assert_eq!(
            a.ledger().counters().get(Counter::IpDropNeedFrag),
            0,
            "mtu {mtu}"
        );
        assert!(
            w.stats_a().tx_super_frames > 0,
            "mtu {mtu}: the NIC cut super-frames"
        );
    }
}
