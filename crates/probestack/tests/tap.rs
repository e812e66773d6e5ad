//! The TAP device against the real Linux kernel: ping (with fragments), UDP both ways, and
//! a 4 MiB TCP transfer from a kernel socket with checksum and segmentation offload on.
//!
//! Each test makes its own network namespace (`psk-tap-<pid>-<n>`), moves its thread into
//! it, opens the TAP there and gives the Linux side 198.18.0.1/15; the stack is
//! 198.18.0.2/15. Nothing leaves the namespace, and only 198.18.0.0/15 is ever used. The
//! namespace is deleted, and the thread moved back, when the test ends, also on a panic.
//!
//! The tests need root, `/dev/net/tun` and `ip`; without them they say why and pass.
#![cfg(target_os = "linux")]

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration as StdDuration;

use common::netns::{
    datagram, skip_unless_able, udp_echo_from_linux, BulkSink, Netns, StopOnDrop, UdpFrame, Watched,
};
use probestack::driver::tap::{TapConfig, TapDevice, TapStats, TUN_F_CSUM, TUN_F_TSO4};
use probestack::driver::{Device, DeviceContext, TxMeta};
use probestack::ip::route::Ipv4Cidr;
use probestack::runner;
use probestack::stack::{InterfaceConfig, Stack, StackConfig};
use probestack::time::{Instant, RealClock};
use probestack::wire::ethernet::EthernetAddress;
use probestack::wire::Ipv4Address;

const STACK: Ipv4Address = Ipv4Address::new(198, 18, 0, 2);
const STACK_MAC: EthernetAddress = EthernetAddress([0x02, 0x00, 0x5e, 0x18, 0x00, 0x02]);
const TAP_NAME: &str = "psktap0";

/// A namespace with the TAP in it, the Linux side configured, and a stack on the TAP.
struct Setup {
    ns: Netns,
    stack: Stack,
    stats: Arc<Mutex<TapStats>>,
    offloads: u32,
}

fn setup(n: u32, config: TapConfig) -> Option<Setup> {
    let mut ns = Netns::create("tap", n)?;
    ns.enter();
    let tap = TapDevice::open(TAP_NAME, config).expect("open TAP");
    assert_eq!(tap.name(), TAP_NAME);
    let offloads = tap.offloads();
    ns.ip(&["link", "set", TAP_NAME, "up"]);
    ns.ip(&["addr", "add", "198.18.0.1/15", "dev", TAP_NAME]);
    let (tap, stats) = Watched::new(tap, TapDevice::stats);
    let mut stack = Stack::new(StackConfig::default());
    stack.add_interface(
        Box::new(tap),
        InterfaceConfig {
            mac: STACK_MAC,
            cidr: Ipv4Cidr::new(STACK, 15).unwrap(),
        },
    );
    Some(Setup {
        ns,
        stack,
        stats,
        offloads,
    })
}

#[test]
fn linux_pings_the_stack() {
    skip_unless_able!("/dev/net/tun", "ping");
    let Some(Setup {
        ns,
        mut stack,
        stats,
        ..
    }) = setup(1, TapConfig::default())
    else {
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
    eprintln!("tap stats: {st:?}");
    assert!(st.rx_frames >= 9 && st.tx_frames >= 9, "{st:?}");
    assert_eq!(st.rx_malformed + st.rx_too_long + st.rx_errors, 0);
}

#[test]
fn udp_both_ways() {
    skip_unless_able!("/dev/net/tun");
    let Some(Setup {
        ns: _ns,
        mut stack,
        stats,
        ..
    }) = setup(2, TapConfig::default())
    else {
        return;
    };
    udp_echo_from_linux(&mut stack, &[1, 100, 1472, 1473, 8000, 30000]);
    let st = *stats.lock().unwrap();
    eprintln!("tap stats: {st:?}");
    assert_eq!(st.rx_malformed + st.rx_too_long + st.rx_errors, 0);
}

#[test]
fn tcp_4mib_from_linux_with_offload() {
    skip_unless_able!("/dev/net/tun");
    const TOTAL: usize = 4 << 20;
    let Some(Setup {
        ns: _ns,
        mut stack,
        stats,
        offloads,
    }) = setup(
        3,
        TapConfig {
            offload: true,
            ..TapConfig::default()
        },
    )
    else {
        return;
    };
    eprintln!("offloads accepted: {offloads:#x}");
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
        let data: Vec<u8> = (0..TOTAL).map(common::netns::pattern).collect();
        let started = std::time::Instant::now();
        let mut sock = TcpStream::connect_timeout(
            &"198.18.0.2:5001".parse().unwrap(),
            StdDuration::from_secs(3),
        )
        .expect("connect");
        sock.set_read_timeout(Some(StdDuration::from_secs(20)))
            .unwrap();
        sock.set_write_timeout(Some(StdDuration::from_secs(20)))
            .unwrap();
        sock.write_all(&data).expect("write 4 MiB");
        sock.shutdown(Shutdown::Write).unwrap();
        // The stack closes after reading everything: end of stream here.
        let mut rest = Vec::new();
        sock.read_to_end(&mut rest)
            .expect("read until the stack's FIN");
        assert!(rest.is_empty());
        eprintln!("4 MiB in {:?}", started.elapsed());
    });
    let (got, intact) = *received.lock().unwrap();
    let st = *stats.lock().unwrap();
    eprintln!("tap stats: {st:?}");
    assert_eq!(got, TOTAL);
    assert!(intact, "data corrupted");
    assert_eq!(st.rx_malformed + st.rx_too_long + st.rx_errors, 0);
    if offloads & TUN_F_CSUM != 0 {
        assert!(st.rx_csum_partial > 0, "no NEEDS_CSUM frames: {st:?}");
    }
    if offloads & TUN_F_TSO4 != 0 {
        assert!(st.rx_gso_frames > 0, "no super-frames: {st:?}");
        assert!(st.rx_largest > 1514, "{st:?}");
    }
}

/// Frames written by the device itself: a transport checksum the device completes in
/// software (no offload) or leaves to the kernel with NEEDS_CSUM (offload), and an IPv4
/// header checksum it fills in; a frame with a wrong checksum is not delivered, which shows
/// the kernel checks what the software path wrote.
#[test]
fn transmit_checksums_reach_linux() {
    skip_unless_able!("/dev/net/tun");
    let ledger = probestack::probe::Ledger::new();
    let cx = DeviceContext {
        now: Instant::ZERO,
        ledger: &ledger,
    };
    let meta = TxMeta {
        ipv4_checksum: true,
        l4_checksum: Some((34, 6)),
        gso_size: 0,
    };
    for (n, offload) in [(4, false), (5, true)] {
        let Some(mut ns) = Netns::create("tap", n) else {
            return;
        };
        ns.enter();
        let mut tap = TapDevice::open(
            TAP_NAME,
            TapConfig {
                offload,
                ..TapConfig::default()
            },
        )
        .expect("open TAP");
        ns.ip(&["link", "set", TAP_NAME, "up"]);
        ns.ip(&["addr", "add", "198.18.0.1/15", "dev", TAP_NAME]);
        let mac = ns.mac_of(TAP_NAME);
        let udp = UdpFrame {
            src_mac: STACK_MAC,
            dst_mac: mac,
            src: (STACK, 40000),
            dst: (Ipv4Address::new(198, 18, 0, 1), 7000),
        };
        let sock = UdpSocket::bind("198.18.0.1:7000").expect("bind");
        sock.set_read_timeout(Some(StdDuration::from_millis(300)))
            .unwrap();
        let mut buf = [0u8; 2048];

        // A wrong UDP checksum (the IPv4 header's is right): Linux must drop it.
        let bad = udp.build(b"corrupt", Some(0x1234));
        let ip_only = TxMeta {
            ipv4_checksum: true,
            l4_checksum: None,
            gso_size: 0,
        };
        tap.transmit(bad, ip_only, &cx).expect("transmit");
        assert!(
            sock.recv_from(&mut buf).is_err(),
            "a bad checksum was delivered"
        );

        for len in [0usize, 1, 100, 1000, 1472] {
            let payload = datagram(len, len);
            let f = udp.build(&payload, None);
            tap.transmit(f, meta, &cx).expect("transmit");
            let (got, from) = sock.recv_from(&mut buf).expect("datagram from the device");
            assert_eq!(from, "198.18.0.2:40000".parse::<SocketAddr>().unwrap());
            assert_eq!(&buf[..got], &payload[..], "offload {offload}, {len} bytes");
        }
        let st = tap.stats();
        eprintln!("offload {offload}: {st:?}");
        if tap.offloads() & TUN_F_CSUM != 0 {
            assert_eq!(st.tx_csum_offloaded, 5);
        } else {
            assert_eq!(st.tx_csum_software, 5);
        }
        assert_eq!(st.tx_frames, 6);
        assert_eq!(st.tx_errors, 0);
        drop(sock);
        drop(tap);
        drop(ns);
    }
}
