//! The TAP device against the real Linux kernel: ping (with fragments), UDP both ways, a
//! 4 MiB TCP transfer from a kernel socket with checksum and segmentation offload on, and
//! TCP both ways at once through a TAP that loses segments (loss recovery against Linux's).
//!
//! Each test makes its own network namespace (`psk-tap-<pid>-<n>`), moves its thread into
//! it, opens the TAP there and gives the Linux side 198.18.0.1/15; the stack is
//! 198.18.0.2/15. Nothing leaves the namespace, and only 198.18.0.0/15 is ever used. The
//! namespace is deleted, and the thread moved back, when the test ends, also on a panic.
//!
//! The tests need root, `/dev/net/tun` and `ip`; without them they say why and pass.
#![cfg(target_os = "linux")]

mod common;

use std::io::Read;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration as StdDuration;

use common::netns::{
    datagram, linux_sends_pattern, skip_unless_able, udp_echo_from_linux, BulkSink, BulkSource,
    Netns, StopOnDrop, UdpFrame, Watched,
};
use probestack::buf::PacketBuf;
use probestack::driver::tap::{TapConfig, TapDevice, TapStats, TUN_F_CSUM, TUN_F_TSO4};
use probestack::driver::{Device, DeviceCaps, DeviceContext, DeviceError, RxFrame, TxMeta};
use probestack::ip::route::Ipv4Cidr;
use probestack::probe::Counter;
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
    setup_wrapped(n, config, |tap| Box::new(tap))
}

/// [`setup`] with the stack's device made by `wrap` from the watched TAP.
fn setup_wrapped(
    n: u32,
    config: TapConfig,
    wrap: impl FnOnce(Watched<TapDevice, TapStats>) -> Box<dyn Device + Send>,
) -> Option<Setup> {
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
        wrap(tap),
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
        let took = linux_sends_pattern(TOTAL, StdDuration::from_secs(20));
        eprintln!("4 MiB in {took:?}");
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

/// Segments a [`Lossy`] device saw or lost, by side (0 transmit, 1 receive) and kind (0
/// with data, 1 without).
type SegmentCounts = [[usize; 2]; 2];

/// A device that loses every `every`-th TCP segment with data and every `every`-th
/// without (SYNs aside), each way, counted apart: a lossy link with Linux on the other
/// side, deterministic in what it drops (4 MiB each way are thousands of segments, so
/// each kind is lost on each side).
struct Lossy<D> {
    dev: D,
    every: usize,
    seen: SegmentCounts,
    lost: Arc<Mutex<SegmentCounts>>,
}

impl<D> Lossy<D> {
    /// Whether `frame` is a TCP segment (IPv4, no SYN) to lose, counting it on `side`.
    fn lose(&mut self, frame: &[u8], side: usize) -> bool {
        let ihl = usize::from(frame.get(14).copied().unwrap_or(0) & 0x0f) * 4;
        let tcp = frame.len() >= 14 + ihl + 20
            && frame[12..14] == [0x08, 0x00]
            && frame[23] == 6
            && frame[14 + ihl + 13] & 0x02 == 0;
        if !tcp {
            return false;
        }
        let total = usize::from(u16::from_be_bytes([frame[16], frame[17]]));
        let headers = ihl + usize::from(frame[14 + ihl + 12] >> 4) * 4;
        let kind = usize::from(total <= headers);
        self.seen[side][kind] += 1;
        let lose = self.seen[side][kind].is_multiple_of(self.every);
        if lose {
            self.lost.lock().unwrap()[side][kind] += 1;
        }
        lose
    }
}

impl<D: Device> Device for Lossy<D> {
    fn caps(&self) -> DeviceCaps {
        self.dev.caps()
    }
    fn transmit(
        &mut self,
        frame: PacketBuf,
        meta: TxMeta,
        cx: &DeviceContext<'_>,
    ) -> Result<(), DeviceError> {
        if self.lose(frame.data(), 0) {
            return Ok(());
        }
        self.dev.transmit(frame, meta, cx)
    }
    fn tx_ready(&self) -> bool {
        self.dev.tx_ready()
    }
    fn take_notification(&mut self, cx: &DeviceContext<'_>) -> bool {
        self.dev.take_notification(cx)
    }
    fn receive(&mut self, cx: &DeviceContext<'_>) -> Option<RxFrame> {
        loop {
            let f = self.dev.receive(cx)?;
            if !self.lose(f.frame.data(), 1) {
                return Some(f);
            }
        }
    }
    fn next_deadline(&self) -> Option<Instant> {
        self.dev.next_deadline()
    }
    fn readiness_fd(&self) -> Option<i32> {
        self.dev.readiness_fd()
    }
}

/// TCP both ways at once, 4 MiB each, between Linux and the stack through a TAP that
/// loses one TCP segment in 40 each way, of those with data and of the ACKs apart: each
/// side's loss recovery works against the other's SACK blocks (and D-SACKs), and every
/// byte arrives intact. Figures (not asserted: real time on a shared machine) are
/// printed.
#[test]
fn tcp_both_ways_through_a_lossy_tap() {
    skip_unless_able!("/dev/net/tun");
    const TOTAL: usize = 4 << 20;
    let lost = Arc::new(Mutex::new(SegmentCounts::default()));
    let counts = lost.clone();
    let Some(Setup {
        ns: _ns, mut stack, ..
    }) = setup_wrapped(6, TapConfig::default(), |tap| {
        Box::new(Lossy {
            dev: tap,
            every: 40,
            seen: SegmentCounts::default(),
            lost: counts,
        })
    })
    else {
        return;
    };
    let listener = stack.tcp_listen((STACK, 5001), 4).expect("listen");
    let linux = std::net::TcpListener::bind("198.18.0.1:5002").expect("bind in the namespace");
    let stop = AtomicBool::new(false);
    let sunk = Mutex::new((0usize, true, false));
    let started = std::time::Instant::now();
    std::thread::scope(|s| {
        let _stop = StopOnDrop(&stop);
        let stack = &mut stack;
        let sunk = &sunk;
        let stop = &stop;
        s.spawn(move || {
            let clock = RealClock::new();
            let mut sink = BulkSink::new(listener);
            let mut source =
                BulkSource::connect(stack, (Ipv4Address::new(198, 18, 0, 1), 5002), TOTAL);
            runner::run(stack, &clock, stop, |st, _| {
                sink.turn(st);
                source.turn(st);
                *sunk.lock().unwrap() = (sink.got, sink.intact, sink.eof);
            })
            .expect("runner");
        });
        // Linux reads what the stack sends, checking every byte.
        let reader = s.spawn(move || {
            let (mut conn, _) = linux.accept().expect("accept the stack's connection");
            conn.set_read_timeout(Some(StdDuration::from_secs(60)))
                .unwrap();
            let mut buf = vec![0u8; 64 * 1024];
            let (mut got, mut intact) = (0usize, true);
            loop {
                let n = conn.read(&mut buf).expect("read from the stack");
                if n == 0 {
                    break;
                }
                intact &= buf[..n]
                    .iter()
                    .enumerate()
                    .all(|(i, &b)| b == common::netns::pattern(got + i));
                got += n;
            }
            (got, intact)
        });
        // Linux writes to the stack.
        linux_sends_pattern(TOTAL, StdDuration::from_secs(60));
        let (got, intact) = reader.join().expect("reader");
        assert_eq!(got, TOTAL, "Linux got {got} of the stack's bytes");
        assert!(intact, "the stack's bytes arrived changed");
        stop.store(true, Ordering::Relaxed);
    });
    let (got, intact, eof) = *sunk.lock().unwrap();
    assert!(eof && got == TOTAL, "the stack got {got} of Linux's bytes");
    assert!(intact, "Linux's bytes arrived changed");
    let lost = *lost.lock().unwrap();
    let c = stack.ledger().counters();
    eprintln!(
        "both ways in {:?}; lost {:?} segments sent (with data, without), {:?} received; \
         the stack's TCP: {} fast retransmits ({} after the reordering window), {} loss \
         probes, {} lost retransmissions resent, {} timeouts, {} out-of-order segments in",
        started.elapsed(),
        lost[0],
        lost[1],
        c.get(Counter::TcpFastRetransmits),
        c.get(Counter::TcpReorderWindowLosses),
        c.get(Counter::TcpLossProbes),
        c.get(Counter::TcpLostRetransmissions),
        c.get(Counter::TcpRetransmitTimeouts),
        c.get(Counter::TcpOutOfOrderSegments),
    );
    // Data was lost each way, so each side's recovery had work (the streams are intact,
    // above), and the stack's sender resent what it lost.
    assert!(
        lost[0][0] > 0 && lost[1][0] > 0,
        "no data was lost: {lost:?}"
    );
    assert!(c.get(Counter::TcpRetransmittedSegments) > 0);
}
