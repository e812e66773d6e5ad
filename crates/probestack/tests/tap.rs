//! The TAP device against the real Linux kernel: ping (with fragments), UDP both ways, a
//! 4 MiB TCP transfer from a kernel socket with checksum and segmentation offload on, TCP
//! both ways at once through a TAP that loses segments (loss recovery against Linux's),
//! TCP urgent data both ways (Linux's `MSG_OOB`), and `ping -R`'s record route and `ping
//! -T`'s timestamps.
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
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration as StdDuration;

use common::netns::{
    datagram, linux_receives_pattern, linux_sends_pattern, skip_unless_able, udp_echo_from_linux,
    BulkSink, BulkSource, Netns, StopOnDrop, UdpFrame, Watched,
};
use common::tamper::{tcp_segment, tcp_seq, Tamper, Tampered};
use probestack::buf::PacketBuf;
use probestack::driver::tap::{TapConfig, TapDevice, TapStats, TUN_F_CSUM, TUN_F_TSO4};
use probestack::driver::{Device, DeviceContext, TxMeta};
use probestack::ip::route::Ipv4Cidr;
use probestack::probe::Counter;
use probestack::runner;
use probestack::stack::{InterfaceConfig, Stack, StackConfig};
use probestack::tcp::{Connection, TcpConfig};
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
    let tap = ns.tap(TAP_NAME, config);
    let offloads = tap.offloads();
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

/// `ping -R` and `ping -T tsandaddr`: Linux's echo request carries a record route, or a
/// timestamp option asking for addresses; the reply carries it back with the stack's
/// address recorded (RFC 1122 §3.2.2.6), which ping prints.
#[test]
fn linux_pings_with_record_route() {
    skip_unless_able!("/dev/net/tun", "ping");
    let Some(Setup { ns, mut stack, .. }) = setup(10, TapConfig::default()) else {
        return;
    };
    let stop = AtomicBool::new(false);
    let out = std::thread::scope(|s| {
        let _stop = StopOnDrop(&stop);
        s.spawn(|| {
            let clock = RealClock::new();
            runner::run(&mut stack, &clock, &stop, |_, _| {}).expect("runner");
        });
        let record = ns.exec(&["ping", "-R", "-c", "1", "-W", "2", "198.18.0.2"]);
        let stamps = ns.exec(&[
            "ping",
            "-T",
            "tsandaddr",
            "-c",
            "1",
            "-W",
            "2",
            "198.18.0.2",
        ]);
        [record, stamps]
    });
    for (out, section) in out.iter().zip(["RR:", "TS:"]) {
        let text = String::from_utf8_lossy(&out.stdout);
        eprintln!("{text}");
        assert!(out.status.success(), "ping failed:\n{text}");
        let recorded = text
            .split(section)
            .nth(1)
            .unwrap_or_else(|| panic!("no {section}:\n{text}"));
        assert!(
            recorded.contains("198.18.0.2"),
            "the stack not recorded:\n{text}"
        );
    }
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
        let mut tap = ns.tap(
            TAP_NAME,
            TapConfig {
                offload,
                ..TapConfig::default()
            },
        );
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

/// Segments a [`Lossy`] link saw or lost, by side (0 transmit, 1 receive) and kind (0
/// with data, 1 without).
type SegmentCounts = [[usize; 2]; 2];

/// A link that loses every `every`-th TCP segment with data and every `every`-th without
/// (SYNs aside), each way, counted apart: a lossy link with Linux on the other side,
/// deterministic in what it drops (4 MiB each way are thousands of segments, so each kind
/// is lost on each side).
struct Lossy {
    every: usize,
    seen: SegmentCounts,
    lost: Arc<Mutex<SegmentCounts>>,
}

impl Lossy {
    /// Whether `frame` is a TCP segment to lose, counting it on `side`.
    fn lose(&mut self, frame: &[u8], side: usize) -> bool {
        let Some((_, data)) = tcp_segment(frame) else {
            return false;
        };
        let kind = usize::from(!data);
        self.seen[side][kind] += 1;
        let lose = self.seen[side][kind].is_multiple_of(self.every);
        if lose {
            self.lost.lock().unwrap()[side][kind] += 1;
        }
        lose
    }
}

impl Tamper for Lossy {
    fn send(&mut self, frame: PacketBuf, meta: TxMeta) -> Vec<(PacketBuf, TxMeta)> {
        if self.lose(frame.data(), 0) {
            return Vec::new();
        }
        vec![(frame, meta)]
    }
    fn deliver(&mut self, frame: &[u8]) -> bool {
        !self.lose(frame, 1)
    }
}

/// A link that holds back every `every`-th TCP segment with data the stack sends (of those
/// sent while none is held) until the stack sends that segment again, and delivers it just before the copy: reordering
/// deep enough that the stack takes the segment for lost, and a retransmission that was
/// not needed, which Linux reports with a D-SACK. Counts the segments held.
struct Reordering {
    every: usize,
    seen: usize,
    held: Option<(PacketBuf, TxMeta)>,
    count: Arc<Mutex<usize>>,
}

impl Tamper for Reordering {
    fn send(&mut self, frame: PacketBuf, meta: TxMeta) -> Vec<(PacketBuf, TxMeta)> {
        let Some((tcp, true)) = tcp_segment(frame.data()) else {
            return vec![(frame, meta)];
        };
        if let Some((held, held_meta)) = self.held.take() {
            if tcp_seq(held.data(), tcp) == tcp_seq(frame.data(), tcp) {
                return vec![(held, held_meta), (frame, meta)];
            }
            self.held = Some((held, held_meta));
            return vec![(frame, meta)];
        }
        self.seen += 1;
        if self.seen.is_multiple_of(self.every) {
            self.held = Some((frame, meta));
            *self.count.lock().unwrap() += 1;
            return Vec::new();
        }
        vec![(frame, meta)]
    }
}

/// The stack sends `total` bytes of the pattern to a Linux listener at 198.18.0.1:5003,
/// which checks every byte; `watch` sees the stack's connection after every turn.
fn stack_sends_to_linux(
    stack: &mut Stack,
    total: usize,
    mut watch: impl FnMut(&Connection) + Send,
) {
    let linux = std::net::TcpListener::bind("198.18.0.1:5003").expect("bind in the namespace");
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let _stop = StopOnDrop(&stop);
        let stop = &stop;
        s.spawn(move || {
            let clock = RealClock::new();
            let mut source =
                BulkSource::connect(stack, (Ipv4Address::new(198, 18, 0, 1), 5003), total);
            runner::run(stack, &clock, stop, |st, _| {
                source.turn(st);
                if let Ok(c) = st.tcp_connection(source.handle()) {
                    watch(c);
                }
            })
            .expect("runner");
        });
        let (got, intact) = linux_receives_pattern(linux, StdDuration::from_secs(60));
        assert_eq!(got, total, "Linux got {got} of the stack's bytes");
        assert!(intact, "the stack's bytes arrived changed");
        stop.store(true, Ordering::Relaxed);
    });
}

/// The stack sends Linux 4 MiB through a TAP that holds back a data segment every 100
/// until the stack sends it again (`Reordering`): each time, the segments after it draw
/// SACKs from Linux, the stack retransmits it, and Linux, getting it twice, answers with
/// a D-SACK (RFC 2883, on by default in Linux). The stack must take those D-SACKs as
/// showing its response unneeded and undo it (`TcpConfig::spurious_undo`), raising its
/// DupThresh past the reordering; every byte must arrive intact. Figures printed.
#[test]
fn linux_d_sacks_undo_the_stacks_unneeded_fast_retransmits() {
    skip_unless_able!("/dev/net/tun");
    const TOTAL: usize = 4 << 20;
    let held = Arc::new(Mutex::new(0usize));
    let count = held.clone();
    let Some(Setup {
        ns: _ns, mut stack, ..
    }) = setup_wrapped(7, TapConfig::default(), |tap| {
        Box::new(Tampered {
            dev: tap,
            tamper: Reordering {
                every: 100,
                seen: 0,
                held: None,
                count,
            },
        })
    })
    else {
        return;
    };
    let mut dup_thresh = 0usize;
    let started = std::time::Instant::now();
    stack_sends_to_linux(&mut stack, TOTAL, |c| {
        dup_thresh = dup_thresh.max(c.dup_thresh())
    });
    let c = stack.ledger().counters();
    let held = *held.lock().unwrap();
    eprintln!(
        "4 MiB in {:?}; {held} segments held back; the stack's TCP: {} fast retransmits ({} \
         after the reordering window), {} segments retransmitted, {} responses undone, \
         DupThresh up to {dup_thresh}, {} timeouts",
        started.elapsed(),
        c.get(Counter::TcpFastRetransmits),
        c.get(Counter::TcpReorderWindowLosses),
        c.get(Counter::TcpRetransmittedSegments),
        c.get(Counter::TcpSpuriousUndos),
        c.get(Counter::TcpRetransmitTimeouts),
    );
    assert!(held > 0, "nothing was held back");
    assert!(c.get(Counter::TcpSpuriousUndos) > 0, "nothing was undone");
    assert!(dup_thresh > 3, "DupThresh stayed {dup_thresh}");
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
        Box::new(Tampered {
            dev: tap,
            tamper: Lossy {
                every: 40,
                seen: SegmentCounts::default(),
                lost: counts,
            },
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
        let reader = s.spawn(move || linux_receives_pattern(linux, StdDuration::from_secs(60)));
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

/// Sends `byte` as urgent data (`MSG_OOB`) on a Linux socket.
fn send_oob(sock: &TcpStream, byte: u8) {
    // SAFETY: send reads one byte at `&byte`, which outlives the call, from an open
    // socket's descriptor.
    let n = unsafe {
        libc::send(
            sock.as_raw_fd(),
            (&byte as *const u8).cast(),
            1,
            libc::MSG_OOB,
        )
    };
    assert_eq!(n, 1, "send(MSG_OOB): {}", std::io::Error::last_os_error());
}

/// Waits up to `within` for a Linux socket's out-of-band byte (the byte before the
/// urgent pointer, taken out of the stream) and returns it.
fn recv_oob(sock: &TcpStream, within: StdDuration) -> u8 {
    let deadline = std::time::Instant::now() + within;
    loop {
        let mut byte = 0u8;
        // SAFETY: recv writes at most one byte at `&mut byte`, which outlives the call,
        // from an open socket's descriptor; MSG_DONTWAIT keeps it from blocking.
        let n = unsafe {
            libc::recv(
                sock.as_raw_fd(),
                (&mut byte as *mut u8).cast(),
                1,
                libc::MSG_OOB | libc::MSG_DONTWAIT,
            )
        };
        if n == 1 {
            return byte;
        }
        // EINVAL: no urgent data yet; EAGAIN: its pointer came, the byte not yet.
        let e = std::io::Error::last_os_error();
        assert!(
            std::time::Instant::now() < deadline,
            "no out-of-band byte from the stack: {e}"
        );
        std::thread::sleep(StdDuration::from_millis(1));
    }
}

/// Urgent data both ways with Linux (RFC 9293 §3.8.5). Linux's `MSG_OOB` byte reaches
/// the stack as urgent data that ends after it (the signal, then the count of urgent
/// bytes left, which the stack reads in line); the stack's urgent byte reaches Linux as
/// its out-of-band byte, the one before the urgent pointer, which Linux's default
/// reading takes out of the stream. So both read the pointer as the octet after the
/// urgent data (MUST-62).
#[test]
fn urgent_data_both_ways_with_linux() {
    skip_unless_able!("/dev/net/tun");
    let Some(Setup {
        ns: _ns, mut stack, ..
    }) = setup(8, TapConfig::default())
    else {
        return;
    };
    let listener = stack.tcp_listen((STACK, 5001), 1).expect("listen");
    let stop = AtomicBool::new(false);
    // At the stack's first urgent signal: the urgent bytes left and the bytes already
    // read; and everything read.
    let seen = Mutex::new((None::<(usize, usize)>, Vec::new()));
    std::thread::scope(|s| {
        let _stop = StopOnDrop(&stop);
        s.spawn(|| {
            let clock = RealClock::new();
            let (mut conn, mut replied, mut closed) = (None, false, false);
            runner::run(&mut stack, &clock, &stop, |st, _| {
                if conn.is_none() {
                    conn = st.tcp_accept(listener).ok();
                }
                let Some(c) = conn else {
                    return;
                };
                let mut seen = seen.lock().unwrap();
                if st.tcp_take_urgent_signal(c) == Ok(true) && seen.0.is_none() {
                    seen.0 = Some((st.tcp_urgent_remaining(c).unwrap(), seen.1.len()));
                }
                let mut buf = [0u8; 64];
                while let Ok(n) = st.tcp_recv(c, &mut buf) {
                    if n == 0 && !closed {
                        closed = true;
                        st.tcp_close(c).expect("close");
                    }
                    if n == 0 {
                        break;
                    }
                    seen.1.extend_from_slice(&buf[..n]);
                }
                if !replied && seen.1.len() >= 4 {
                    replied = true;
                    // Two urgent bytes, so that a pointer one short would make Linux's
                    // out-of-band byte the `z`.
                    assert_eq!(st.tcp_send(c, b"xy"), Ok(2));
                    assert_eq!(st.tcp_send_urgent(c, b"z#"), Ok(2));
                }
            })
            .expect("runner");
        });
        let mut sock = TcpStream::connect_timeout(
            &"198.18.0.2:5001".parse().unwrap(),
            StdDuration::from_secs(3),
        )
        .expect("connect");
        sock.set_read_timeout(Some(StdDuration::from_secs(10)))
            .unwrap();
        sock.write_all(b"abc").unwrap();
        send_oob(&sock, b'!');
        assert_eq!(recv_oob(&sock, StdDuration::from_secs(10)), b'#');
        // The out-of-band byte is out of the stream: the rest is the normal data.
        sock.shutdown(Shutdown::Write).unwrap();
        let mut rest = Vec::new();
        sock.read_to_end(&mut rest)
            .expect("read until the stack's FIN");
        assert_eq!(rest, b"xyz");
    });
    let (at_signal, read) = &*seen.lock().unwrap();
    assert_eq!(read, b"abc!", "Linux's urgent byte is read in line");
    let (left, before) = at_signal.expect("the stack was signalled");
    assert_eq!(left + before, 4, "the urgent data ends after Linux's `!`");
}

/// ECN with Linux (RFC 3168): the stack asks for it in its SYN, Linux agrees (its default,
/// `tcp_ecn` 2, answers a request), the stack's data goes ECN-capable, and 4 MiB reach
/// Linux intact.
#[test]
fn ecn_with_linux() {
    skip_unless_able!("/dev/net/tun");
    const TOTAL: usize = 4 << 20;
    let Some(Setup {
        ns: _ns, mut stack, ..
    }) = setup(9, TapConfig::default())
    else {
        return;
    };
    let config = TcpConfig {
        ecn: true,
        ..stack.tcp_default_config()
    };
    stack.set_tcp_default_config(config);
    let mut agreed = None;
    stack_sends_to_linux(&mut stack, TOTAL, |c| {
        if c.state() == probestack::tcp::State::Established {
            agreed = Some(c.ecn_enabled());
        }
    });
    assert_eq!(agreed, Some(true), "ECN was not agreed");
}

/// Linux connects three times from one port to a listener on the stack, which closes
/// each connection first and so holds it in TIME-WAIT when the next SYN comes. Each new
/// SYN, newer by RFC 6191's test (Linux's TSvals run on between connections of the same
/// two hosts), ends TIME-WAIT and opens the next connection (RFC 9293 §3.6.1 MAY-2)
/// instead of drawing a challenge ACK and waiting a second for the SYN to go again.
#[test]
fn linux_reconnects_from_one_port_through_time_wait() {
    use std::os::fd::FromRawFd;
    skip_unless_able!("/dev/net/tun");
    let Some(Setup {
        ns: _ns, mut stack, ..
    }) = setup(11, TapConfig::default())
    else {
        return;
    };
    let listener = stack.tcp_listen((STACK, 5001), 4).expect("listen");
    let stop = AtomicBool::new(false);
    let served = Mutex::new(0u32);
    let stack = Mutex::new(stack);
    std::thread::scope(|s| {
        let _stop = StopOnDrop(&stop);
        s.spawn(|| {
            let clock = RealClock::new();
            let mut stack = stack.lock().unwrap();
            runner::run(&mut stack, &clock, &stop, |st, _| {
                // Each connection gets a greeting and is closed at once, by the stack.
                while let Ok(c) = st.tcp_accept(listener) {
                    st.tcp_send(c, b"hello").expect("send");
                    st.tcp_close(c).expect("close");
                    *served.lock().unwrap() += 1;
                }
            })
            .expect("runner");
        });
        for round in 0..3 {
            let started = std::time::Instant::now();
            // SAFETY: plain socket calls on a descriptor this block creates and then hands
            // to a `TcpStream`, which closes it; the address is a valid `sockaddr_in`.
            let sock = unsafe {
                let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
                assert!(fd >= 0, "socket");
                let one: libc::c_int = 1;
                libc::setsockopt(
                    fd,
                    libc::SOL_SOCKET,
                    libc::SO_REUSEADDR,
                    std::ptr::addr_of!(one).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                );
                let addr = |ip: [u8; 4], port: u16| libc::sockaddr_in {
                    sin_family: libc::AF_INET as libc::sa_family_t,
                    sin_port: port.to_be(),
                    sin_addr: libc::in_addr {
                        s_addr: u32::from_ne_bytes(ip),
                    },
                    sin_zero: [0; 8],
                };
                let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
                let local = addr([198, 18, 0, 1], 40000);
                let remote = addr(STACK.0, 5001);
                assert_eq!(
                    libc::bind(fd, std::ptr::addr_of!(local).cast(), len),
                    0,
                    "bind to port 40000 ({round})"
                );
                assert_eq!(
                    libc::connect(fd, std::ptr::addr_of!(remote).cast(), len),
                    0,
                    "connect ({round})"
                );
                TcpStream::from_raw_fd(fd)
            };
            let mut sock = sock;
            sock.set_read_timeout(Some(StdDuration::from_secs(5)))
                .unwrap();
            let mut got = Vec::new();
            sock.read_to_end(&mut got)
                .expect("read until the stack's FIN");
            assert_eq!(got, b"hello", "round {round}");
            drop(sock);
            eprintln!(
                "round {round}: connected and read in {:?}",
                started.elapsed()
            );
            // Linux's LAST-ACK ends when the stack's ACK of its FIN arrives.
            std::thread::sleep(StdDuration::from_millis(50));
        }
    });
    let stack = stack.into_inner().unwrap();
    let count = |c| stack.ledger().counters().get(c);
    assert_eq!(*served.lock().unwrap(), 3);
    assert_eq!(count(Counter::TcpTimeWaitReopened), 2);
    assert_eq!(count(Counter::TcpChallengeAcks), 0);
    assert_eq!(count(Counter::TcpResetsIn), 0);
}
