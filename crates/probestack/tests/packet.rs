//! The AF_PACKET device on a veth pair: against the Linux kernel (ping with fragments, UDP
//! both ways, 4 MiB of TCP from a kernel socket with offload on and off), between two
//! devices (what a partial checksum and the veth's flags look like on the other end, and
//! outgoing frames kept away from the socket), and between two stacks, one on each end,
//! each driven by the runner in its own thread (16 MiB of TCP, offload on and off).
//!
//! Each test makes its own network namespace (`psk-pkt-<pid>-<n>`), moves its thread into
//! it and makes the veth pair `pv0`–`pv1` there. Against Linux, `pv1` is Linux's end with
//! 198.18.0.1/15 and the stack (198.18.0.2/15) opens the device on `pv0`; two stacks use
//! 198.18.0.1 and .2 and no Linux address at all. Nothing leaves the namespace, and only
//! 198.18.0.0/15 is ever used. The namespace is deleted, and the thread moved back, when
//! the test ends, also on a panic.
//!
//! The tests need root and `ip`; without them they say why and pass.
#![cfg(target_os = "linux")]

mod common;

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration as StdDuration;

use common::netns::{
    datagram, feature_on, linux_sends_pattern, set_feature, skip_unless_able, udp_echo_from_linux,
    BulkSink, BulkSource, Feature, Netns, StopOnDrop, UdpFrame, Watched,
};
use probestack::checksum;
use probestack::driver::packet::{PacketConfig, PacketDevice, PacketStats};
use probestack::driver::{Device, DeviceContext, RxChecksum, TxMeta};
use probestack::ip::route::Ipv4Cidr;
use probestack::probe::Ledger;
use probestack::runner;
use probestack::stack::{InterfaceConfig, Stack, StackConfig};
use probestack::time::{Instant, RealClock};
use probestack::wire::ethernet::EthernetAddress;
use probestack::wire::Ipv4Address;

const LINUX: Ipv4Address = Ipv4Address::new(198, 18, 0, 1);
const STACK: Ipv4Address = Ipv4Address::new(198, 18, 0, 2);
const MAC_A: EthernetAddress = EthernetAddress([0x02, 0x00, 0x5e, 0x18, 0x00, 0x01]);
const MAC_B: EthernetAddress = EthernetAddress([0x02, 0x00, 0x5e, 0x18, 0x00, 0x02]);
/// The end the stack (or stack A) opens.
const DEV: &str = "pv0";
/// Linux's end (or stack B's).
const PEER: &str = "pv1";

const OFF: PacketConfig = PacketConfig {
    mtu: 1500,
    offload: false,
};
const ON: PacketConfig = PacketConfig {
    mtu: 1500,
    offload: true,
};

/// A namespace with the veth pair `pv0`–`pv1` in it, both ends up, the calling thread
/// inside.
fn veth(n: u32) -> Option<Netns> {
    let mut ns = Netns::create("pkt", n)?;
    ns.enter();
    ns.ip(&["link", "add", DEV, "type", "veth", "peer", "name", PEER]);
    ns.ip(&["link", "set", DEV, "up"]);
    ns.ip(&["link", "set", PEER, "up"]);
    Some(ns)
}

/// A stack with one interface, a packet device on `dev`, whose statistics the test can
/// read while the stack runs.
fn stack_on(
    dev: &str,
    config: PacketConfig,
    mac: EthernetAddress,
    addr: Ipv4Address,
) -> (Stack, Arc<Mutex<PacketStats>>) {
    let device = PacketDevice::open(dev, config).expect("open packet device");
    assert!(
        device.ignores_outgoing(),
        "Linux ≥ 4.20 takes PACKET_IGNORE_OUTGOING"
    );
    let (device, stats) = Watched::new(device, PacketDevice::stats);
    let mut stack = Stack::new(StackConfig::default());
    stack.add_interface(
        Box::new(device),
        InterfaceConfig {
            mac,
            cidr: Ipv4Cidr::new(addr, 15).unwrap(),
        },
    );
    (stack, stats)
}

/// A namespace with Linux on `pv1` (198.18.0.1/15) and a stack on `pv0` (198.18.0.2).
fn with_linux(n: u32, config: PacketConfig) -> Option<(Netns, Stack, Arc<Mutex<PacketStats>>)> {
    let ns = veth(n)?;
    ns.ip(&["addr", "add", "198.18.0.1/15", "dev", PEER]);
    let (stack, stats) = stack_on(DEV, config, MAC_B, STACK);
    Some((ns, stack, stats))
}

fn no_drops(st: &PacketStats) {
    let v = &st.vnet;
    assert_eq!(v.rx_malformed + v.rx_too_long + v.rx_errors, 0, "{st:?}");
    assert_eq!(st.rx_undescribed + st.rx_outgoing, 0, "{st:?}");
}

#[test]
fn linux_pings_the_stack() {
    skip_unless_able!("ping");
    let Some((ns, mut stack, stats)) = with_linux(1, OFF) else {
        return;
    };
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let _stop = StopOnDrop(&stop);
        s.spawn(|| {
            let clock = RealClock::new();
            runner::run(&mut stack, &clock, &stop, |_, _| {}).expect("runner");
        });
        ns.ping_sizes("198.18.0.2");
    });
    let st = *stats.lock().unwrap();
    eprintln!("packet stats: {st:?}");
    assert!(st.vnet.rx_frames >= 12 && st.vnet.tx_frames >= 12, "{st:?}");
    no_drops(&st);
}

#[test]
fn udp_both_ways() {
    skip_unless_able!();
    let Some((_ns, mut stack, stats)) = with_linux(2, ON) else {
        return;
    };
    udp_echo_from_linux(&mut stack, &[1, 100, 1472, 1473, 8000, 30000, 65507]);
    let st = *stats.lock().unwrap();
    eprintln!("packet stats: {st:?}");
    no_drops(&st);
    // Linux leaves UDP checksums of unfragmented datagrams to the veth "hardware".
    assert!(st.vnet.rx_csum_partial > 0, "{st:?}");
}

/// How Linux's end and ours are set up for a transfer from Linux.
#[derive(Clone, Copy, Debug)]
enum Wire {
    /// The veth's defaults: checksum offload, TSO and GSO on, GRO off.
    Default,
    /// Linux's end a dumb NIC: tx-checksumming, TSO and GSO off.
    DumbPeer,
    /// Linux's end without TSO and GSO (checksum offload on).
    NoTso,
    /// As `NoTso`, and GRO on at our end.
    Gro,
}

/// 4 MiB from a Linux TCP socket to the stack, checked byte by byte; returns what the
/// device saw.
fn tcp_from_linux(n: u32, config: PacketConfig, wire: Wire) -> Option<PacketStats> {
    const TOTAL: usize = 4 << 20;
    let (_ns, mut stack, stats) = with_linux(n, config)?;
    let off: &[Feature] = match wire {
        Wire::Default => &[],
        Wire::DumbPeer => &[Feature::Tso, Feature::Gso, Feature::TxChecksum],
        Wire::NoTso | Wire::Gro => &[Feature::Tso, Feature::Gso],
    };
    for &f in off {
        set_feature(PEER, f, false).expect("ethtool");
    }
    if let Wire::Gro = wire {
        set_feature(DEV, Feature::Gro, true).expect("ethtool");
    }
    let peer = [
        Feature::TxChecksum,
        Feature::Tso,
        Feature::Gso,
        Feature::Gro,
    ]
    .map(|f| (f, feature_on(PEER, f).expect("ethtool")));
    eprintln!(
        "{PEER}: {peer:?}; {DEV} gro {:?}",
        feature_on(DEV, Feature::Gro)
    );
    let listener = stack.tcp_listen((STACK, 5001), 4).expect("listen");
    let stop = AtomicBool::new(false);
    let received = Mutex::new((0usize, true));
    std::thread::scope(|s| {
        let _stop = StopOnDrop(&stop);
        s.spawn(|| {
            let clock = RealClock::new();
            let mut sink = BulkSink::new(listener);
            runner::run(&mut stack, &clock, &stop, |st, _| {
                sink.turn(st);
                *received.lock().unwrap() = (sink.got, sink.intact);
            })
            .expect("runner");
        });
        let took = linux_sends_pattern(TOTAL, StdDuration::from_secs(20));
        eprintln!("4 MiB in {took:?}");
    });
    let (got, intact) = *received.lock().unwrap();
    let st = *stats.lock().unwrap();
    eprintln!("packet stats: {st:?}");
    assert_eq!(got, TOTAL);
    assert!(intact, "data corrupted");
    no_drops(&st);
    Some(st)
}

/// With the veth's default features Linux hands its TSO super-frames through whole, with
/// partial checksums; the device completes them and the stack takes them as verified.
#[test]
fn tcp_4mib_from_linux_offload_on() {
    skip_unless_able!();
    let Some(st) = tcp_from_linux(3, ON, Wire::Default) else {
        return;
    };
    assert!(st.vnet.rx_csum_partial > 0, "no NEEDS_CSUM frames: {st:?}");
    assert!(st.vnet.rx_gso_frames > 0, "no super-frames: {st:?}");
    assert!(st.vnet.rx_largest > 1514, "{st:?}");
}

/// The same frames arrive (the socket negotiates nothing), but the stack is told nothing
/// was verified and checks every segment itself, super-frames included.
#[test]
fn tcp_4mib_from_linux_offload_off() {
    skip_unless_able!();
    let Some(st) = tcp_from_linux(4, OFF, Wire::Default) else {
        return;
    };
    assert!(st.vnet.rx_gso_frames > 0, "{st:?}");
}

/// The peer's tx-checksumming, TSO and GSO off: every frame arrives MTU-sized and fully
/// checksummed, with no flag at all (a veth does not claim to have verified anything).
#[test]
fn tcp_4mib_from_linux_dumb_peer() {
    skip_unless_able!();
    let Some(st) = tcp_from_linux(5, OFF, Wire::DumbPeer) else {
        return;
    };
    assert_eq!(st.vnet.rx_gso_frames, 0, "{st:?}");
    assert_eq!(st.vnet.rx_csum_partial, 0, "{st:?}");
    assert_eq!(st.vnet.rx_csum_valid, 0, "{st:?}");
    assert!(st.vnet.rx_largest <= 1514, "{st:?}");
}

/// Linux's end without TSO and GSO but with checksum offload: MTU-sized frames, each with
/// a partial checksum.
#[test]
fn tcp_4mib_from_linux_no_tso() {
    skip_unless_able!();
    let Some(st) = tcp_from_linux(14, ON, Wire::NoTso) else {
        return;
    };
    assert_eq!(st.vnet.rx_gso_frames, 0, "{st:?}");
    assert!(st.vnet.rx_largest <= 1514, "{st:?}");
    assert!(st.vnet.rx_csum_partial > 2000, "{st:?}");
}

/// As above, with GRO on at our end (which also puts the veth on its NAPI path): the
/// kernel coalesces what arrives in one NAPI poll back into super-frames (Linux sends
/// bursts of segments from its ACK processing, in one softirq).
#[test]
fn tcp_4mib_from_linux_gro() {
    skip_unless_able!();
    let Some(st) = tcp_from_linux(13, ON, Wire::Gro) else {
        return;
    };
    eprintln!(
        "GRO: {} super-frames of {} frames, largest {} bytes",
        st.vnet.rx_gso_frames, st.vnet.rx_frames, st.vnet.rx_largest
    );
    assert!(st.vnet.rx_gso_frames > 0, "{st:?}");
    assert!(st.vnet.rx_largest > 1514, "{st:?}");
}

/// Frames written by the device itself reach Linux: a transport checksum completed in
/// software (offload off) or left to the kernel with NEEDS_CSUM (offload on), and an IPv4
/// header checksum filled in; a frame with a wrong checksum is not delivered.
#[test]
fn transmit_checksums_reach_linux() {
    skip_unless_able!();
    let ledger = Ledger::new();
    let cx = DeviceContext {
        now: Instant::ZERO,
        ledger: &ledger,
    };
    let meta = TxMeta {
        ipv4_checksum: true,
        l4_checksum: Some((34, 6)),
        gso_size: 0,
    };
    for (n, config) in [(6, OFF), (7, ON)] {
        let Some(ns) = veth(n) else {
            return;
        };
        ns.ip(&["addr", "add", "198.18.0.1/15", "dev", PEER]);
        let mut dev = PacketDevice::open(DEV, config).expect("open");
        let udp = UdpFrame {
            src_mac: MAC_B,
            dst_mac: ns.mac_of(PEER),
            src: (STACK, 40000),
            dst: (LINUX, 7000),
        };
        let sock = UdpSocket::bind("198.18.0.1:7000").expect("bind");
        sock.set_read_timeout(Some(StdDuration::from_millis(300)))
            .unwrap();
        let mut buf = [0u8; 2048];

        // A wrong UDP checksum (the IPv4 header's is right): Linux must drop it.
        let ip_only = TxMeta {
            ipv4_checksum: true,
            l4_checksum: None,
            gso_size: 0,
        };
        dev.transmit(udp.build(b"corrupt", Some(0x1234)), ip_only, &cx)
            .expect("transmit");
        assert!(
            sock.recv_from(&mut buf).is_err(),
            "a bad checksum was delivered"
        );
        for len in [0usize, 1, 100, 1000, 1472] {
            let payload = datagram(len, len);
            dev.transmit(udp.build(&payload, None), meta, &cx)
                .expect("transmit");
            let (got, from) = sock.recv_from(&mut buf).expect("datagram from the device");
            assert_eq!(from, "198.18.0.2:40000".parse::<SocketAddr>().unwrap());
            assert_eq!(&buf[..got], &payload[..], "{config:?}, {len} bytes");
        }
        let st = dev.stats();
        eprintln!("{config:?}: {st:?}");
        if config.offload {
            assert_eq!(st.vnet.tx_csum_offloaded, 5);
        } else {
            assert_eq!(st.vnet.tx_csum_software, 5);
        }
        assert_eq!(st.vnet.tx_frames, 6);
        assert_eq!(st.vnet.tx_errors, 0);
        // Too long for the MTU.
        let big = udp.build(&[0u8; 1473], None);
        assert!(dev.transmit(big, meta, &cx).is_err());
        assert_eq!(dev.stats().vnet.tx_too_large, 1);
    }
}

/// Receives from `dev` until a frame comes or a second passes.
fn receive_one(
    dev: &mut PacketDevice,
    cx: &DeviceContext<'_>,
) -> Option<probestack::driver::RxFrame> {
    let until = std::time::Instant::now() + StdDuration::from_secs(1);
    while std::time::Instant::now() < until {
        if let Some(f) = dev.receive(cx) {
            return Some(f);
        }
        std::thread::sleep(StdDuration::from_millis(1));
    }
    None
}

/// Whether a received UDP/IPv4 frame's checksum verifies.
fn udp_checksum_ok(f: &[u8]) -> bool {
    let seed = checksum::pseudo_header_v4(
        f[26..30].try_into().unwrap(),
        f[30..34].try_into().unwrap(),
        17,
        (f.len() - 34) as u16,
    );
    checksum::verifies(checksum::combine(seed, checksum::sum(&f[34..])))
}

/// Two devices on the two ends, no stack: a frame sent with NEEDS_CSUM arrives with
/// NEEDS_CSUM (the veth moves the skb as it is); a fully checksummed one arrives with no
/// flag. The receiving device's `offload` decides: on, it vouches for a partial one to the
/// stack and leaves the seed in place (nobody would read the sum); off, it completes the
/// checksum and the stack verifies it. Neither device sees its own frames.
#[test]
fn what_crosses_the_veth() {
    skip_unless_able!();
    let ledger = Ledger::new();
    let cx = DeviceContext {
        now: Instant::ZERO,
        ledger: &ledger,
    };
    let Some(_ns) = veth(8) else {
        return;
    };
    let meta = TxMeta {
        ipv4_checksum: true,
        l4_checksum: Some((34, 6)),
        gso_size: 0,
    };
    let udp = UdpFrame {
        src_mac: MAC_A,
        dst_mac: MAC_B.0,
        src: (LINUX, 40000),
        dst: (STACK, 7000),
    };
    for (tx, rx) in [(ON, ON), (ON, OFF), (OFF, ON), (OFF, OFF)] {
        let mut a = PacketDevice::open(DEV, tx).expect("open");
        let mut b = PacketDevice::open(PEER, rx).expect("open");
        let payload = datagram(9, 999);
        a.transmit(udp.build(&payload, None), meta, &cx)
            .expect("transmit");
        let f = receive_one(&mut b, &cx).expect("a frame across the veth");
        let data = f.frame.data();
        assert_eq!(data.len(), 14 + 20 + 8 + 999);
        assert_eq!(&data[42..], &payload[..]);
        let vouched = tx.offload && rx.offload;
        assert_eq!(udp_checksum_ok(data), !vouched, "{tx:?} -> {rx:?}");
        // A partial checksum stays partial across the veth; a full one comes with no
        // flag (a veth has not set CHECKSUM_UNNECESSARY on its own since Linux 4.4).
        let sb = b.stats();
        let partial = u64::from(tx.offload);
        assert_eq!(
            (sb.vnet.rx_csum_partial, sb.vnet.rx_csum_valid),
            (partial, 0)
        );
        let want = if vouched {
            RxChecksum::Verified
        } else {
            RxChecksum::None
        };
        assert_eq!(f.checksum, want, "{tx:?} -> {rx:?}");
        // Nothing came back to the sender, and nothing else crossed.
        assert!(a.receive(&cx).is_none());
        assert!(b.receive(&cx).is_none());
        let sa = a.stats();
        assert_eq!((sa.vnet.rx_frames, sa.rx_outgoing), (0, 0), "{sa:?}");
        assert_eq!(sb.kernel_packets, 1, "{sb:?}");
    }
}

/// Frames the kernel sends out of the interface (here ARP requests from Linux's own
/// address on `pv0`) never reach the device on `pv0`; the device on `pv1` sees them.
#[test]
fn outgoing_frames_are_ignored() {
    skip_unless_able!();
    let ledger = Ledger::new();
    let cx = DeviceContext {
        now: Instant::ZERO,
        ledger: &ledger,
    };
    let Some(ns) = veth(9) else {
        return;
    };
    ns.ip(&["addr", "add", "198.18.0.1/15", "dev", DEV]);
    let mut a = PacketDevice::open(DEV, OFF).expect("open");
    let mut b = PacketDevice::open(PEER, OFF).expect("open");
    // Nobody has 198.18.0.9: Linux asks for it, out of pv0.
    let sock = UdpSocket::bind("198.18.0.1:0").expect("bind");
    sock.send_to(b"anyone?", "198.18.0.9:9").expect("send_to");
    let f = receive_one(&mut b, &cx).expect("Linux's ARP request on pv1");
    assert_eq!(&f.frame.data()[12..14], &[0x08, 0x06], "ARP");
    assert_eq!(&f.frame.data()[38..42], &[198, 18, 0, 9]);
    std::thread::sleep(StdDuration::from_millis(50));
    assert!(
        a.receive(&cx).is_none(),
        "an outgoing frame reached pv0's socket"
    );
    let st = a.stats();
    assert_eq!(
        (st.vnet.rx_frames, st.rx_outgoing, st.kernel_packets),
        (0, 0, 0),
        "{st:?}"
    );
}

/// Two stacks, one on each end of the veth, no Linux address: A sends `TOTAL` bytes to B
/// over TCP, each stack driven by the runner in its own thread; B checks every byte.
fn two_stacks(n: u32, config: PacketConfig, gro: bool) -> Option<(PacketStats, PacketStats)> {
    const TOTAL: usize = 16 << 20;
    let ns = veth(n)?;
    if gro {
        set_feature(PEER, Feature::Gro, true).expect("ethtool");
    }
    let (mut a, stats_a) = stack_on(DEV, config, MAC_A, LINUX);
    let (mut b, stats_b) = stack_on(PEER, config, MAC_B, STACK);
    let listener = b.tcp_listen((STACK, 5001), 4).expect("listen");
    let mut source = BulkSource::connect(&mut a, (STACK, 5001), TOTAL);
    let stop = AtomicBool::new(false);
    let done = AtomicBool::new(false);
    let received = Mutex::new((0usize, true, false));
    let started = std::time::Instant::now();
    std::thread::scope(|s| {
        let _stop = StopOnDrop(&stop);
        s.spawn(|| {
            let clock = RealClock::new();
            runner::run(&mut a, &clock, &stop, |st, _| source.turn(st)).expect("runner A");
        });
        s.spawn(|| {
            let clock = RealClock::new();
            let mut sink = BulkSink::new(listener);
            runner::run(&mut b, &clock, &stop, |st, _| {
                sink.turn(st);
                *received.lock().unwrap() = (sink.got, sink.intact, sink.eof);
                if sink.eof {
                    done.store(true, Ordering::Relaxed);
                }
            })
            .expect("runner B");
        });
        let deadline = started + StdDuration::from_secs(60);
        while !done.load(Ordering::Relaxed) && std::time::Instant::now() < deadline {
            std::thread::sleep(StdDuration::from_millis(5));
        }
        let took = started.elapsed();
        eprintln!("16 MiB in {took:?}");
        if took > StdDuration::from_millis(500) {
            // Slow: a frame was lost somewhere; the veth counts its own drops.
            let out = ns.exec(&["ip", "-s", "link", "show", "type", "veth"]);
            eprintln!("{}", String::from_utf8_lossy(&out.stdout));
        }
    });
    let (got, intact, eof) = *received.lock().unwrap();
    let (sa, sb) = (*stats_a.lock().unwrap(), *stats_b.lock().unwrap());
    eprintln!("A: {sa:?}\nB: {sb:?}");
    assert!(eof, "no end of stream after {got} bytes");
    assert_eq!(got, TOTAL);
    assert!(intact, "data corrupted");
    no_drops(&sa);
    no_drops(&sb);
    Some((sa, sb))
}

#[test]
fn two_stacks_16mib_offload_on() {
    skip_unless_able!();
    let Some((a, b)) = two_stacks(10, ON, false) else {
        return;
    };
    // A's TCP hands the device super-segments (TSO), which cross the veth whole and
    // reach B's stack as they were sent.
    assert!(a.vnet.tx_gso_frames > 0, "{a:?}");
    assert_eq!(b.vnet.rx_gso_frames, a.vnet.tx_gso_frames, "{b:?}");
    assert!(b.vnet.rx_largest > 1514, "{b:?}");
}

#[test]
fn two_stacks_16mib_offload_off() {
    skip_unless_able!();
    let Some((a, b)) = two_stacks(11, OFF, false) else {
        return;
    };
    assert_eq!(a.vnet.tx_gso_frames + b.vnet.tx_gso_frames, 0);
    assert_eq!(a.vnet.rx_gso_frames + b.vnet.rx_gso_frames, 0);
    assert!(b.vnet.rx_largest <= 1514, "{b:?}");
}

/// GRO on the receiving end of the veth (which turns on the veth's NAPI path): the 16 MiB
/// still arrive intact (checked in `two_stacks`); how many super-frames GRO made is
/// printed, not asserted, since the kernel decides it.
#[test]
fn two_stacks_16mib_gro_on_the_receiver() {
    skip_unless_able!();
    let Some((_a, b)) = two_stacks(12, ON, true) else {
        return;
    };
    eprintln!(
        "with GRO on {PEER}: {} super-frames, largest {} bytes",
        b.vnet.rx_gso_frames, b.vnet.rx_largest
    );
}
