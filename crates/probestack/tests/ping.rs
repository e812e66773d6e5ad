//! Two stacks over the memory link ping each other: every size up to 65,507 bytes at MTUs
//! 576, 1500, 9000 and 65535; under seeded drops, reordering and duplicates; fragment floods
//! and overlaps stay within the reassembly cap; a seeded run gives the same capture twice.

use std::io::Write;
use std::sync::{Arc, Mutex};

use probestack::driver::{
    Device, DeviceContext, FaultConfig, MemoryLink, NicConfig, PcapMode, PcapWriter, TxMeta,
};
use probestack::ip::reassembly::ReassemblyConfig;
use probestack::ip::route::Ipv4Cidr;
use probestack::probe::{Counter, Ledger};
use probestack::sim::{ipv4_frame, ipv4_header, HostConfig, Pair, ADDR_A, ADDR_B, MAC_A, MAC_B};
use probestack::stack::{InterfaceConfig, Stack, StackConfig};
use probestack::time::{Clock, Duration, Instant, VirtualClock};
use probestack::tuning::Tuning;
use probestack::wire::ipv4::{IpProtocol, Ipv4Repr};

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Pings B from A and waits for the reply; returns the data that came back.
fn ping_once(p: &mut Pair, seq: u16, data: &[u8]) -> Option<Vec<u8>> {
    let now = p.now();
    p.a.ping(ADDR_B, 0x77, seq, data, now).expect("ping sent");
    let mut got = None;
    p.run_until(Duration::from_secs(5), |p| {
        while let Some(r) = p.a.take_echo_reply() {
            if r.seq_no == seq && r.ident == 0x77 && r.from == ADDR_B {
                got = Some(r.data);
            }
        }
        got.is_some()
    });
    got
}

const SIZES: [usize; 12] = [
    0, 1, 56, 548, 1472, 1473, 4000, 8972, 9000, 30000, 65000, 65507,
];

#[test]
fn every_size_at_every_mtu() {
    for mtu in [576, 1500, 9000, 65535] {
        let mut p = Pair::new(HostConfig::with_mtu(mtu), HostConfig::with_mtu(mtu)).unwrap();
        for (i, &size) in SIZES.iter().enumerate() {
            let data = pattern(size, i as u8);
            let back = ping_once(&mut p, i as u16, &data);
            assert_eq!(back.as_deref(), Some(&data[..]), "mtu {mtu} size {size}");
        }
        let frag = p.b.ledger().counters().get(Counter::IpReassembled);
        if mtu < 65535 {
            assert!(frag > 0, "mtu {mtu}: large pings should have fragmented");
        }
        // Nothing incomplete is left: all that is held is the spare buffer, which IP gave
        // back after each datagram and the later large ones grew into.
        let r = p.b.reassembler();
        assert_eq!((r.datagrams_held(), r.bytes_held()), (0, r.spare_bytes()));
        if mtu < 65535 {
            assert!(
                r.stats().spare_reused > 0,
                "mtu {mtu}: the spare was never reused"
            );
            assert!(
                r.spare_bytes() >= 65_000,
                "mtu {mtu}: the largest buffer is kept"
            );
        }
        assert_eq!(p.a.ledger().counters().get(Counter::ArpRequestsOut), 1);
    }
}

#[test]
fn the_1993_tuning_delivers_the_same_bytes() {
    let mut host = HostConfig::with_mtu(1500);
    host.stack.tuning = Tuning::bsd();
    let mut p = Pair::new(host.clone(), host).unwrap();
    for (i, &size) in SIZES.iter().enumerate() {
        let data = pattern(size, 3);
        assert_eq!(
            ping_once(&mut p, i as u16, &data).as_deref(),
            Some(&data[..])
        );
    }
    // BSD searches the defrag queue for every datagram; fast only for fragments.
    assert!(p.b.ledger().counters().get(Counter::IpDefragLookups) > 0);
}

fn faulty(seed: u64) -> FaultConfig {
    FaultConfig {
        seed,
        drop: 0.02,
        duplicate: 0.02,
        reorder: 0.02,
        latency: Duration::from_micros(20),
        jitter: Duration::from_micros(30),
        ..FaultConfig::none()
    }
}

fn faulty_pair(seed: u64) -> Pair {
    let mut a = HostConfig::with_mtu(1500);
    let mut b = HostConfig::with_mtu(1500);
    a.nic.rx_faults = faulty(seed);
    b.nic.rx_faults = faulty(seed + 1);
    Pair::new(a, b).unwrap()
}

#[test]
fn fragmented_pings_survive_drops_reordering_and_duplicates() {
    let mut p = faulty_pair(42);
    let n = 60u16;
    let mut replies = Vec::new();
    for seq in 0..n {
        let now = p.now();
        p.a.ping(ADDR_B, 1, seq, &pattern(3000, seq as u8), now)
            .unwrap();
        p.run_for(Duration::from_millis(2));
        while let Some(r) = p.a.take_echo_reply() {
            replies.push(r);
        }
    }
    // Past the 30 s reassembly timeout: incomplete datagrams are gone.
    p.run_for(Duration::from_secs(31));
    while let Some(r) = p.a.take_echo_reply() {
        replies.push(r);
    }
    // Three fragments each way at 2% drop: about 89% should make it.
    assert!(replies.len() >= 30, "only {} of {n} replies", replies.len());
    for r in &replies {
        assert_eq!(
            r.data,
            pattern(3000, r.seq_no as u8),
            "reply {} altered",
            r.seq_no
        );
    }
    for s in [&p.a, &p.b] {
        let r = s.reassembler();
        assert_eq!((r.datagrams_held(), r.bytes_held()), (0, r.spare_bytes()));
    }
}

#[test]
fn a_seeded_run_gives_the_same_capture_twice() {
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);
    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let capture = || {
        let out = Shared::default();
        let sink = out.clone();
        let mut a = HostConfig::with_mtu(1500);
        let mut b = HostConfig::with_mtu(1500);
        a.nic.rx_faults = faulty(7);
        b.nic.rx_faults = faulty(8);
        let mut p = Pair::with_devices(
            a,
            b,
            |n| Box::new(n),
            move |n| Box::new(PcapWriter::new(n, sink, PcapMode::Both).unwrap()),
        )
        .unwrap();
        for seq in 0..20 {
            let now = p.now();
            p.a.ping(ADDR_B, 9, seq, &pattern(2500, 1), now).unwrap();
            p.run_for(Duration::from_millis(1));
        }
        p.run_for(Duration::from_millis(100));
        let bytes = out.0.lock().unwrap().clone();
        bytes
    };
    let (one, two) = (capture(), capture());
    assert!(
        one.len() > 24 + 20 * 1500,
        "capture too small: {}",
        one.len()
    );
    assert_eq!(one, two, "the same seed gave a different capture");
    check_capture(&one);
}

/// Every frame of a pcap parses with etherparse and its IPv4 and ICMP checksums verify;
/// tshark, when installed, reads the file and finds no bad checksum.
fn check_capture(pcap: &[u8]) {
    let magic = u32::from_le_bytes(pcap[..4].try_into().unwrap());
    assert!(
        magic == 0xa1b2_c3d4 || magic == 0xa1b2_3c4d,
        "pcap magic {magic:#x}"
    );
    let mut at = 24;
    let mut frames = 0;
    while at + 16 <= pcap.len() {
        let incl = u32::from_le_bytes(pcap[at + 8..at + 12].try_into().unwrap()) as usize;
        let frame = &pcap[at + 16..at + 16 + incl];
        let sliced =
            etherparse::SlicedPacket::from_ethernet(frame).expect("etherparse reads the frame");
        if let Some(etherparse::NetSlice::Ipv4(ip)) = &sliced.net {
            let h = ip.header().to_header();
            assert_eq!(h.calc_header_checksum(), h.header_checksum);
        }
        at += 16 + incl;
        frames += 1;
    }
    assert_eq!(at, pcap.len());
    assert!(frames > 20);
    tshark_check(pcap);
}

fn tshark_check(pcap: &[u8]) {
    let Ok(out) = std::process::Command::new("tshark").arg("-v").output() else {
        eprintln!("tshark not installed: skipping the tshark check of the capture");
        return;
    };
    if !out.status.success() {
        eprintln!("tshark not usable: skipping the tshark check");
        return;
    }
    let path = std::env::temp_dir().join(format!("probestack-ping-{}.pcap", std::process::id()));
    std::fs::write(&path, pcap).unwrap();
    let out = std::process::Command::new("tshark")
        .args(["-r"])
        .arg(&path)
        .args([
            "-o",
            "ip.check_checksum:TRUE",
            "-Y",
            "ip.checksum.status == \"Bad\" || icmp.checksum.status == \"Bad\"",
            "-T",
            "fields",
            "-e",
            "frame.number",
        ])
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&path);
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bad = String::from_utf8_lossy(&out.stdout);
    assert!(
        bad.trim().is_empty(),
        "tshark found bad checksums in frames {bad}"
    );
}

/// A host B alone on a link whose other end the test drives by hand.
fn lone_b(max_bytes: usize) -> (Stack, probestack::driver::MemoryNic, VirtualClock) {
    let (raw, nic_b) = MemoryLink::pair(NicConfig::default(), NicConfig::default()).unwrap();
    let mut b = Stack::new(StackConfig {
        reassembly: ReassemblyConfig {
            max_bytes,
            ..ReassemblyConfig::default()
        },
        ..StackConfig::default()
    });
    b.add_interface(
        Box::new(nic_b),
        InterfaceConfig {
            mac: MAC_B,
            cidr: Ipv4Cidr {
                address: ADDR_B,
                prefix_len: 15,
            },
        },
    );
    (b, raw, VirtualClock::new())
}

/// A fragment of a UDP datagram from A to B: `len` bytes at `offset`, more to come.
fn fragment_frame(ident: u16, offset: usize, len: usize, fill: u8) -> Vec<u8> {
    fragment_of(IpProtocol::Udp, ident, offset, len, fill)
}

fn fragment_of(protocol: IpProtocol, ident: u16, offset: usize, len: usize, fill: u8) -> Vec<u8> {
    let ip = Ipv4Repr {
        ident,
        more_frags: true,
        frag_offset: offset as u16,
        ..ipv4_header(ADDR_A, ADDR_B, protocol, len)
    };
    ipv4_frame(MAC_A, MAC_B, &ip, |payload| payload.fill(fill))
}

fn inject(raw: &mut probestack::driver::MemoryNic, frame: &[u8], now: Instant) {
    let ledger = Ledger::new();
    let cx = DeviceContext {
        now,
        ledger: &ledger,
    };
    let buf = probestack::buf::PacketBuf::from_slice(frame, 64).unwrap();
    raw.transmit(buf, TxMeta::default(), &cx).unwrap();
}

#[test]
fn a_fragment_flood_stays_within_the_memory_cap() {
    let cap = 256 * 1024;
    let (mut b, mut raw, clock) = lone_b(cap);
    for ident in 0..3000u16 {
        let now = clock.now();
        inject(&mut raw, &fragment_frame(ident, 0, 1480, 0xAA), now);
        b.poll(now);
        assert!(
            b.reassembler().bytes_held() <= cap,
            "held {}",
            b.reassembler().bytes_held()
        );
        clock.advance(Duration::from_micros(1));
    }
    let c = b.ledger().counters();
    assert_eq!(c.get(Counter::IpFragmentsIn), 3000);
    assert_eq!(c.get(Counter::IpReassembled), 0);
    let stats = b.reassembler().stats();
    assert!(
        stats.evicted_for_memory + stats.refused_for_memory > 0,
        "{stats:?}"
    );
    // After the timeout, nothing is held; Time Exceeded went out for the survivors.
    clock.advance(Duration::from_secs(31));
    b.poll(clock.now());
    assert_eq!(b.reassembler().bytes_held(), 0);
    let c = b.ledger().counters();
    assert!(c.get(Counter::IpReassemblyTimeout) > 0);
    // Time Exceeded (reassembly) went out for datagrams whose first fragment came, up to
    // the rate limit's burst.
    assert!(c.get(Counter::IcmpErrorsOut) > 0);
    assert!(c.get(Counter::IcmpErrorsOut) + c.get(Counter::IcmpErrorsRateLimited) > 0);
}

#[test]
fn overlapping_fragments_are_dropped_and_counted() {
    let (mut b, mut raw, clock) = lone_b(1 << 20);
    let now = clock.now();
    inject(&mut raw, &fragment_frame(1, 0, 1480, 0x11), now);
    inject(&mut raw, &fragment_frame(1, 8, 1480, 0x22), now);
    // The key stays poisoned: a fragment that would complete it is refused too.
    inject(&mut raw, &fragment_frame(1, 1480, 8, 0x33), now);
    b.poll(now);
    let c = b.ledger().counters();
    assert!(c.get(Counter::IpDropFragOverlap) >= 2);
    assert_eq!(c.get(Counter::IpReassembled), 0);
    assert_eq!(b.reassembler().bytes_held(), 0);
}

#[test]
fn two_stacks_on_two_threads() {
    use probestack::time::RealClock;
    let (nic_a, nic_b) = MemoryLink::pair(NicConfig::default(), NicConfig::default()).unwrap();
    let cidr = |address| Ipv4Cidr {
        address,
        prefix_len: 15,
    };
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop_b = stop.clone();
    // B lives on its own thread: it is built there and polls until told to stop.
    let b = std::thread::spawn(move || {
        let mut b = Stack::new(StackConfig::default());
        b.add_interface(
            Box::new(nic_b),
            InterfaceConfig {
                mac: MAC_B,
                cidr: cidr(ADDR_B),
            },
        );
        let clock = RealClock::new();
        while !stop_b.load(std::sync::atomic::Ordering::Relaxed) {
            b.poll(clock.now());
            std::thread::yield_now();
        }
        b.ledger().counters().get(Counter::IcmpEchoRequestsIn)
    });
    let mut a = Stack::new(StackConfig::default());
    a.add_interface(
        Box::new(nic_a),
        InterfaceConfig {
            mac: MAC_A,
            cidr: cidr(ADDR_A),
        },
    );
    let clock = RealClock::new();
    let mut replies = 0;
    for seq in 0..200u16 {
        let data = pattern(1000 + seq as usize * 50, seq as u8);
        a.ping(ADDR_B, 5, seq, &data, clock.now()).unwrap();
        let start = std::time::Instant::now();
        // Generous: a loaded machine may deschedule either thread for a while.
        while start.elapsed() < std::time::Duration::from_secs(10) {
            a.poll(clock.now());
            if let Some(r) = a.take_echo_reply() {
                assert_eq!(r.data, data, "reply {seq} altered");
                replies += 1;
                break;
            }
            std::thread::yield_now();
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let requests_seen_by_b = b.join().unwrap();
    assert_eq!(replies, 200);
    assert_eq!(requests_seen_by_b, 200);
}

#[test]
fn no_icmp_error_about_an_icmp_error() {
    let (mut b, mut raw, clock) = lone_b(1 << 20);
    // An incomplete ICMP datagram whose type byte (0xAA) is not a query: when its
    // reassembly times out, RFC 1122 §3.2.2 forbids an error about it.
    inject(
        &mut raw,
        &fragment_of(IpProtocol::Icmp, 9, 0, 1480, 0xAA),
        clock.now(),
    );
    b.poll(clock.now());
    clock.advance(Duration::from_secs(31));
    b.poll(clock.now());
    let c = b.ledger().counters();
    assert_eq!(c.get(Counter::IpReassemblyTimeout), 1);
    assert_eq!(c.get(Counter::IcmpErrorsOut), 0);
    // The same with an echo request's type byte (8) does get its Time Exceeded.
    inject(
        &mut raw,
        &fragment_of(IpProtocol::Icmp, 10, 0, 1480, 8),
        clock.now(),
    );
    b.poll(clock.now());
    clock.advance(Duration::from_secs(31));
    b.poll(clock.now());
    assert_eq!(b.ledger().counters().get(Counter::IcmpErrorsOut), 1);
}
