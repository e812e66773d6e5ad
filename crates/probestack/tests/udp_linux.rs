//! Random UDP traffic both ways between probestack and the Linux kernel, checked against
//! a model of what each side sent: the stack on a TAP in a namespace of the case's own,
//! a Linux UDP socket (std's, non-blocking) on the other side of it, in real time.
//! Drawn: the TAP's MTU and offloads; the stack's UDP and IP switches, whether its socket
//! is connected, sends without a checksum, and how large its receive queue is; the same
//! for Linux's socket (`SO_NO_CHECK`, `SO_RCVBUF`); datagrams of 4 to 65,507 bytes sent
//! every way the stack's application can (plain, gathered, batched, loaned) and, by
//! Linux, plain or as one `UDP_SEGMENT` send the kernel cuts into datagrams; reads into
//! buffers smaller or larger than the datagram; a side's socket closed for a while, the
//! other's datagrams to it refused with ICMP port unreachable; seeded loss, duplication
//! and reordering of what the stack sends and loss of what it receives.
//!
//! Every datagram a side reads is one the other sent, from its address and port, whole or
//! truncated and flagged so, intact, and never twice unless the link duplicates; neither
//! side ever sees a bad checksum (Linux's `InCsumErrors`, the stack's
//! `udp.drop.bad_checksum`); a call fails with "connection refused" only on a connected
//! socket after the other side's was closed; on a clean link each side gets every datagram, in order,
//! but as many as the drops both kernels counted (a full socket, no socket, a
//! reassembly given up, a queue that overflowed).
//!
//! `cargo test --workspace` runs 16 cases from a fixed seed; `PROBESTACK_CONVERSATIONS` /
//! `PROBESTACK_CONVERSATION_SEED` run more (README "Random conversations"). The test
//! needs root, `/dev/net/tun` and `ip`; without them it says why and passes. Only
//! 198.18.0.0/15 is used, inside the namespace.
#![cfg(target_os = "linux")]

mod common;

use std::collections::HashMap;
use std::io::ErrorKind;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration as StdDuration, Instant as StdInstant};

use common::datagrams::{payload, send_how, stack_send, udp_tuning, SendHow};
use common::netns::{set_option, skip_unless_able, Netns};
use common::tamper::{Link, SeededFaults, Tampered};
use common::wire_rules::IpWatch;
use probestack::driver::tap::TapConfig;
use probestack::ip::route::Ipv4Cidr;
use probestack::probe::Counter;
use probestack::rng::Rng;
use probestack::socket::udp::{UdpError, UdpHandle, MAX_UDP_PAYLOAD};
use probestack::stack::{InterfaceConfig, Stack, StackConfig};
use probestack::time::{Clock, RealClock};
use probestack::tuning::Tuning;
use probestack::wire::ethernet::EthernetAddress;
use probestack::wire::Ipv4Address;
use proptest::prelude::*;
use proptest::test_runner::{TestCaseError, TestRunner};

const STACK: Ipv4Address = Ipv4Address::new(198, 18, 0, 2);
const LINUX: Ipv4Address = Ipv4Address::new(198, 18, 0, 1);
const STACK_MAC: EthernetAddress = EthernetAddress([0x02, 0x00, 0x5e, 0x18, 0x00, 0x02]);
const TAP_NAME: &str = "psktap0";
const STACK_PORT: u16 = 4000;
const LINUX_PORT: u16 = 4001;
const STACK_ADDR: ([u8; 4], u16) = ([198, 18, 0, 2], STACK_PORT);
/// Side 0 is the stack, side 1 Linux; direction `d` is what side `d` sends.
const SIDES: [&str; 2] = ["probestack", "Linux"];
/// `UDP_SEGMENT` (linux/udp.h): the size of the datagrams one send is cut into.
const UDP_SEGMENT: i32 = 103;
/// `UDP_MAX_SEGMENTS` (linux/udp.h, 64 before Linux 6.9): at most this many a send.
const MAX_SEGMENTS: usize = 64;

#[derive(Clone, Debug)]
struct Setup {
    mtu: usize,
    offload: bool,
    /// Per thousand frames: of the stack's, lost, duplicated, held back; of Linux's,
    /// lost; and the seed.
    faults: Option<(u64, u64, u64, u64, u64)>,
    tuning: Tuning,
    /// Each side's socket: connected to the other's, sending without checksums, its
    /// receive queue's size (the stack's in bytes; Linux's `SO_RCVBUF`, or its own).
    connected: [bool; 2],
    no_checksum: [bool; 2],
    stack_recv_buffer: usize,
    linux_recv_buffer: Option<usize>,
}

#[derive(Clone, Copy, Debug)]
enum LinuxHow {
    Plain,
    /// One send of this many datagrams' worth, cut by the kernel (`UDP_SEGMENT`).
    Segmented(usize),
}

#[derive(Clone, Copy, Debug)]
enum Op {
    StackSends {
        len: usize,
        how: SendHow,
    },
    LinuxSends {
        len: usize,
        how: LinuxHow,
    },
    Read {
        side: usize,
        max: usize,
    },
    Wait {
        ms: u64,
    },
    /// `side` reads what its socket holds, closes it, and opens it again `ms` later; the
    /// other sends it `sends` datagrams of `len` bytes meanwhile, which are refused (ICMP
    /// port unreachable), as the other's socket, if connected, may then report.
    Close {
        side: usize,
        ms: u64,
        sends: usize,
        len: usize,
    },
}

fn setup() -> impl Strategy<Value = Setup> {
    let rate = || 0..30u64;
    (
        // A TAP's largest MTU is 65,535 less its Ethernet header.
        prop_oneof![Just(576), Just(1500), Just(4352), Just(9000), Just(65521)],
        any::<bool>(),
        proptest::option::of((rate(), rate(), rate(), rate(), any::<u64>())),
        udp_tuning(),
        [any::<bool>(), any::<bool>()],
        [
            prop_oneof![4 => Just(false), 1 => Just(true)],
            prop_oneof![4 => Just(false), 1 => Just(true)],
        ],
        prop_oneof![Just(8usize << 10), Just(64 << 10), Just(1 << 20)],
        proptest::option::of(prop_oneof![Just(4096usize), Just(65536), Just(1 << 20)]),
    )
        .prop_map(
            |(
                mtu,
                offload,
                faults,
                tuning,
                connected,
                no_checksum,
                stack_recv_buffer,
                linux_recv_buffer,
            )| Setup {
                mtu,
                offload,
                faults,
                tuning,
                connected,
                no_checksum,
                stack_recv_buffer,
                linux_recv_buffer,
            },
        )
}

fn op() -> impl Strategy<Value = Op> {
    let len = || prop_oneof![4 => 4..600usize, 2 => 600..9000usize, 1 => 9000..=MAX_UDP_PAYLOAD];
    let linux_how = prop_oneof![
        3 => Just(LinuxHow::Plain),
        1 => (2..=MAX_SEGMENTS).prop_map(LinuxHow::Segmented),
    ];
    prop_oneof![
        4 => (len(), send_how()).prop_map(|(len, how)| Op::StackSends { len, how }),
        4 => (len(), linux_how).prop_map(|(len, how)| Op::LinuxSends { len, how }),
        5 => (0..2usize, prop_oneof![4..64usize, 64..70_000usize])
            .prop_map(|(side, max)| Op::Read { side, max }),
        1 => prop_oneof![Just(0u64), 1..50u64].prop_map(|ms| Op::Wait { ms }),
        1 => (0..2usize, 0..300u64, 0..4usize, 4..2000usize)
            .prop_map(|(side, ms, sends, len)| Op::Close { side, ms, sends, len }),
    ]
}

/// What one side sent and the other read: the length of each datagram sent, by sequence
/// number, and the sequence numbers read.
#[derive(Default)]
struct Direction {
    sent: Vec<usize>,
    got: Vec<u32>,
}

impl Direction {
    /// Checks one datagram `side` read (`data`, from a datagram of `len` bytes, into a
    /// buffer of `max`, flagged `truncated` or not) against what the other sent.
    fn take(
        &mut self,
        side: usize,
        data: &[u8],
        len: usize,
        max: usize,
        truncated: bool,
        duplicates: bool,
    ) -> Result<(), TestCaseError> {
        let who = SIDES[side];
        prop_assert!(data.len() >= 4, "{who} read {} bytes", data.len());
        let seq = u32::from_be_bytes([data[0], data[1], data[2], data[3]]);
        let sent = self.sent.get(seq as usize).copied();
        prop_assert_eq!(sent, Some(len), "{} read datagram {}'s length", who, seq);
        prop_assert_eq!(data.len(), len.min(max), "{} read datagram {}", who, seq);
        prop_assert_eq!(truncated, len > max, "{} read datagram {}'s flag", who, seq);
        prop_assert!(
            data == &payload(seq, len)[..data.len()],
            "{who} read datagram {seq} ({len} bytes) altered"
        );
        prop_assert!(
            duplicates || !self.got.contains(&seq),
            "{who} read datagram {seq} twice"
        );
        self.got.push(seq);
        Ok(())
    }

    /// How many datagrams sent have not been read.
    fn missing(&self) -> usize {
        let mut got = self.got.clone();
        got.sort_unstable();
        got.dedup();
        self.sent.len() - got.len()
    }
}

/// Linux's counters in the calling thread's namespace (`/proc/thread-self/net/snmp`
/// and `dev`): `"Udp:InCsumErrors"`, `"Ip:ReasmFails"`, `"psktap0:tx_drop"`, ...
fn linux_counters() -> HashMap<String, u64> {
    let mut counters = HashMap::new();
    let snmp = std::fs::read_to_string("/proc/thread-self/net/snmp").expect("snmp");
    let lines: Vec<&str> = snmp.lines().collect();
    for pair in lines.chunks(2) {
        let [names, values] = pair else { continue };
        let mut names = names.split_whitespace();
        let Some(group) = names.next() else { continue };
        for (name, value) in names.zip(values.split_whitespace().skip(1)) {
            if let Ok(v) = value.parse() {
                counters.insert(format!("{group}{name}"), v);
            }
        }
    }
    // After the name: receive bytes, packets, errs, drop, ...; transmit from the ninth.
    let dev = std::fs::read_to_string("/proc/thread-self/net/dev").expect("net/dev");
    for line in dev.lines().skip(2) {
        let Some((name, fields)) = line.split_once(':') else {
            continue;
        };
        let fields: Vec<u64> = fields
            .split_whitespace()
            .map(|f| f.parse().unwrap_or(0))
            .collect();
        if fields.len() >= 12 {
            counters.insert(format!("{}:rx_drop", name.trim()), fields[3]);
            counters.insert(format!("{}:tx_drop", name.trim()), fields[11]);
        }
    }
    counters
}

/// The Linux counters whose every count may have cost a datagram, in each direction
/// (what Linux receives; what it sends).
const LINUX_DROPS: [&[&str]; 2] = [
    &[
        "Udp:RcvbufErrors",
        "Udp:NoPorts",
        "Ip:ReasmFails",
        "psktap0:rx_drop",
    ],
    &[
        "Udp:SndbufErrors",
        "Ip:OutDiscards",
        "Ip:FragFails",
        "psktap0:tx_drop",
    ],
];
/// The stack's, likewise (what it sends; what it receives).
const STACK_DROPS: [&[Counter]; 2] = [
    &[Counter::StackDropDeviceRefused],
    &[
        Counter::UdpDropFullSocket,
        Counter::UdpDropNoSocket,
        Counter::IpDropFragMemory,
        Counter::IpFragEvicted,
        Counter::IpReassemblyTimeout,
        Counter::StackDropNoBuffer,
        Counter::StackDropSocketMemory,
    ],
];

struct World {
    stack: Stack,
    clock: RealClock,
    sock: UdpHandle,
    linux: UdpSocket,
    dirs: [Direction; 2],
    /// Whether each side's socket may report a refusal: connected, after the other
    /// closed its socket.
    refusable: [bool; 2],
    /// Whether Linux may cut a send into datagrams (`UDP_SEGMENT`): not without
    /// checksums, nor once the kernel refused it here.
    linux_segments: bool,
    setup: Setup,
}

impl World {
    fn pump(&mut self, within: StdDuration) {
        let end = StdInstant::now() + within;
        loop {
            self.stack.poll(self.clock.now());
            if StdInstant::now() >= end {
                return;
            }
            std::thread::sleep(StdDuration::from_micros(100));
        }
    }

    fn stack_sends(&mut self, len: usize, how: SendHow) -> Result<(), TestCaseError> {
        let first = self.dirs[0].sent.len();
        let datagrams: Vec<Vec<u8>> = (0..how.datagrams())
            .map(|i| payload((first + i) as u32, len))
            .collect();
        let to = (!self.setup.connected[0]).then_some((LINUX, LINUX_PORT));
        match stack_send(&mut self.stack, self.sock, how, &datagrams, to) {
            Ok(n) => self.dirs[0].sent.extend(std::iter::repeat_n(len, n)),
            // The device's queue is full: nothing sent (a batch stops there).
            Err(UdpError::WouldBlock | UdpError::NoBuffer) => {}
            Err(UdpError::ConnectionRefused) if self.refusable[0] => {}
            Err(e) => return Err(TestCaseError::fail(format!("the stack's send: {e}"))),
        }
        Ok(())
    }

    /// One `send`/`sendto` of `data` on Linux's socket: whether it went.
    fn linux_send(&mut self, data: &[u8]) -> Result<bool, std::io::Error> {
        let r = if self.setup.connected[1] {
            self.linux.send(data)
        } else {
            self.linux.send_to(data, SocketAddr::from(STACK_ADDR))
        };
        match r {
            Ok(n) => {
                assert_eq!(n, data.len(), "Linux sent part of a datagram");
                Ok(true)
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => Ok(false),
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => Ok(false),
            Err(e) if e.kind() == ErrorKind::ConnectionRefused && self.refusable[1] => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn linux_sends(&mut self, len: usize, how: LinuxHow) -> Result<(), TestCaseError> {
        let first = self.dirs[1].sent.len();
        let n = match how {
            LinuxHow::Plain => 1,
            LinuxHow::Segmented(n) => n,
        };
        // The kernel cuts a send only into datagrams that need no fragments, at most 64
        // of them, 65,507 bytes in all; and not without checksums.
        let cut = n > 1
            && self.linux_segments
            && len <= self.setup.mtu - 28
            && n * len <= MAX_UDP_PAYLOAD;
        let fail = |e: std::io::Error| TestCaseError::fail(format!("Linux's send: {e}"));
        if cut {
            let data: Vec<u8> = (0..n)
                .flat_map(|i| payload((first + i) as u32, len))
                .collect();
            set_option(&self.linux, libc::SOL_UDP, UDP_SEGMENT, len as i32);
            let r = self.linux_send(&data);
            set_option(&self.linux, libc::SOL_UDP, UDP_SEGMENT, 0);
            match r {
                Ok(true) => self.dirs[1].sent.extend(std::iter::repeat_n(len, n)),
                Ok(false) => {}
                // Segmentation needs the device's checksum offload (the TAP's without
                // `TUN_F_CSUM`): sent one by one instead.
                Err(e) if e.raw_os_error() == Some(libc::EIO) => {
                    self.linux_segments = false;
                    return self.linux_sends(len, how);
                }
                Err(e) => return Err(fail(e)),
            }
        } else {
            for i in 0..n {
                if self
                    .linux_send(&payload((first + i) as u32, len))
                    .map_err(fail)?
                {
                    self.dirs[1].sent.push(len);
                } else {
                    break;
                }
            }
        }
        Ok(())
    }

    /// `side` reads one datagram into a buffer of `max` bytes; whether there was one.
    fn read(&mut self, side: usize, max: usize) -> Result<bool, TestCaseError> {
        let mut buf = vec![0u8; max];
        if side == 0 {
            match self.stack.udp_recv_from(self.sock, &mut buf) {
                Ok(r) => {
                    prop_assert_eq!(r.from, (LINUX, LINUX_PORT));
                    prop_assert_eq!(r.to, STACK);
                    let data = &buf[..r.len];
                    self.dirs[1].take(0, data, r.datagram_len, max, r.truncated, false)?;
                    Ok(true)
                }
                Err(UdpError::WouldBlock) => Ok(false),
                Err(UdpError::ConnectionRefused) if self.refusable[0] => Ok(false),
                Err(e) => Err(TestCaseError::fail(format!("the stack's read: {e}"))),
            }
        } else {
            // SAFETY: an all-zero sockaddr_in is a valid value of the type.
            let mut from: libc::sockaddr_in = unsafe { std::mem::zeroed() };
            let mut from_len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            // SAFETY: recvfrom writes at most `max` bytes into `buf`, which holds `max`,
            // and at most `from_len` bytes of address into `from`, which holds that many;
            // the descriptor is an open socket's. With MSG_TRUNC it returns the
            // datagram's whole length.
            let n = unsafe {
                libc::recvfrom(
                    self.linux.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    max,
                    libc::MSG_TRUNC | libc::MSG_DONTWAIT,
                    (&mut from as *mut libc::sockaddr_in).cast(),
                    &mut from_len,
                )
            };
            let Ok(len) = usize::try_from(n) else {
                let e = std::io::Error::last_os_error();
                let refused = e.kind() == ErrorKind::ConnectionRefused && self.refusable[1];
                if e.kind() == ErrorKind::WouldBlock || refused {
                    return Ok(false);
                }
                return Err(TestCaseError::fail(format!("Linux's read: {e}")));
            };
            let source = (
                Ipv4Address::from_bytes(&from.sin_addr.s_addr.to_ne_bytes()),
                u16::from_be(from.sin_port),
            );
            prop_assert_eq!(source, (STACK, STACK_PORT));
            let data = &buf[..len.min(max)];
            let duplicates = self.setup.faults.is_some_and(|f| f.1 > 0);
            self.dirs[0].take(1, data, len, max, len > max, duplicates)?;
            Ok(true)
        }
    }

    /// Whether `side`'s socket holds a datagram.
    fn holds(&self, side: usize) -> bool {
        if side == 0 {
            return self.stack.udp_queued(self.sock) > 0;
        }
        let mut n: libc::c_int = 0;
        // SAFETY: FIONREAD writes one int (the next datagram's length) at `n`, which
        // outlives the call, for an open socket's descriptor.
        let r = unsafe { libc::ioctl(self.linux.as_raw_fd(), libc::FIONREAD, &mut n) };
        assert_eq!(r, 0, "FIONREAD: {}", std::io::Error::last_os_error());
        n > 0
    }

    /// `side` reads everything its socket holds and closes it; the other sends it
    /// `sends` datagrams of `len` bytes; after `ms` of real time `side` opens its socket
    /// again as it was.
    fn close(
        &mut self,
        side: usize,
        ms: u64,
        sends: usize,
        len: usize,
    ) -> Result<(), TestCaseError> {
        while self.holds(side) {
            self.read(side, 70_000)?;
        }
        if side == 0 {
            self.stack.udp_close(self.sock).unwrap();
        } else {
            // Bound to another port meanwhile, so that the old one is free.
            self.linux = UdpSocket::bind(("198.18.0.1", 0)).unwrap();
        }
        self.refusable[1 - side] = self.setup.connected[1 - side];
        for _ in 0..sends {
            if side == 0 {
                self.linux_sends(len, LinuxHow::Plain)?;
            } else {
                self.stack_sends(len, SendHow::Plain)?;
            }
            self.pump(StdDuration::from_millis(1));
        }
        self.pump(StdDuration::from_millis(ms));
        if side == 0 {
            self.sock = stack_socket(&mut self.stack, &self.setup);
        } else {
            self.linux = linux_socket(&self.setup);
        }
        Ok(())
    }

    /// Each side reads everything that arrives until, for each direction, what is
    /// missing is no more than the drops counted (on a faulty link: for a short while).
    fn drain(&mut self, clean: bool) -> Result<(), TestCaseError> {
        let end = StdInstant::now() + StdDuration::from_secs(if clean { 20 } else { 1 });
        loop {
            self.stack.poll(self.clock.now());
            for side in 0..2 {
                while self.read(side, 70_000)? {}
            }
            let settled = (0..2).all(|d| self.accounted(d));
            if (clean && settled) || StdInstant::now() >= end {
                break;
            }
            std::thread::sleep(StdDuration::from_micros(200));
        }
        // Whatever is still on its way.
        self.pump(StdDuration::from_millis(50));
        for side in 0..2 {
            while self.read(side, 70_000)? {}
        }
        Ok(())
    }

    /// The drops counted that may each have cost a datagram of direction `d`, by
    /// counter (those above zero).
    fn drops(&self, d: usize) -> Vec<(String, u64)> {
        let linux = linux_counters();
        let c = self.stack.ledger().counters();
        let theirs = LINUX_DROPS[d]
            .iter()
            .map(|&k| (format!("Linux's {k}"), linux.get(k).copied().unwrap_or(0)));
        let ours = STACK_DROPS[d]
            .iter()
            .map(|&k| (format!("the stack's {}", k.name()), c.get(k)));
        theirs.chain(ours).filter(|(_, n)| *n > 0).collect()
    }

    /// Whether what direction `d` is missing is no more than its drops.
    fn accounted(&self, d: usize) -> bool {
        let drops: u64 = self.drops(d).iter().map(|(_, n)| n).sum();
        self.dirs[d].missing() as u64 <= drops
    }
}

/// The stack's socket, bound to its port, with `setup`'s options.
fn stack_socket(stack: &mut Stack, setup: &Setup) -> UdpHandle {
    let sock = stack.udp_open();
    stack.udp_bind(sock, STACK, STACK_PORT).unwrap();
    stack
        .udp_set_recv_buffer(sock, setup.stack_recv_buffer)
        .unwrap();
    stack
        .udp_set_no_checksum(sock, setup.no_checksum[0])
        .unwrap();
    if setup.connected[0] {
        stack.udp_connect(sock, LINUX, LINUX_PORT).unwrap();
    }
    sock
}

/// Linux's socket (the calling thread is in the namespace), likewise.
fn linux_socket(setup: &Setup) -> UdpSocket {
    let linux = UdpSocket::bind(("198.18.0.1", LINUX_PORT)).unwrap();
    linux.set_nonblocking(true).unwrap();
    if setup.connected[1] {
        linux.connect(SocketAddr::from(STACK_ADDR)).unwrap();
    }
    if let Some(n) = setup.linux_recv_buffer {
        set_option(&linux, libc::SOL_SOCKET, libc::SO_RCVBUF, n as i32);
    }
    set_option(
        &linux,
        libc::SOL_SOCKET,
        libc::SO_NO_CHECK,
        i32::from(setup.no_checksum[1]),
    );
    linux
}

/// One exchange, in a namespace of its own (number `case`).
fn exchange(case: u32, setup: &Setup, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut ns = Netns::create("udp", case).expect("a namespace");
    ns.enter();
    let tap = ns.tap(
        TAP_NAME,
        TapConfig {
            mtu: setup.mtu,
            offload: setup.offload,
        },
    );
    // Each side knows the other's link address: a datagram in more fragments than ARP
    // holds for an unresolved address would lose its first ones.
    let linux_mac = EthernetAddress(ns.mac_of(TAP_NAME));
    ns.ip(&[
        "neigh",
        "replace",
        "198.18.0.2",
        "lladdr",
        &STACK_MAC.to_string(),
        "dev",
        TAP_NAME,
        "nud",
        "permanent",
    ]);
    let (lose, duplicate, hold, lose_in, seed) = setup.faults.unwrap_or_default();
    // The IP watch sees the stack's datagrams before any fault.
    let broken = Arc::new(Mutex::new(Vec::new()));
    let dev = Tampered {
        dev: Tampered {
            dev: Tampered {
                dev: tap,
                tamper: SeededFaults::new(seed, lose, duplicate, hold, 0),
            },
            tamper: Link {
                down: Arc::new(AtomicBool::new(false)),
                lose_in,
                rng: Rng::new(seed ^ 1),
            },
        },
        tamper: IpWatch::new(broken.clone()),
    };
    let mut stack = Stack::new(StackConfig {
        tuning: setup.tuning,
        ..StackConfig::default()
    });
    stack.add_interface(
        Box::new(dev),
        InterfaceConfig {
            mac: STACK_MAC,
            cidr: Ipv4Cidr::new(STACK, 15).unwrap(),
        },
    );
    stack.add_static_arp(0, LINUX, linux_mac);

    let sock = stack_socket(&mut stack, setup);
    let linux = linux_socket(setup);
    let before = linux_counters();
    let mut w = World {
        stack,
        clock: RealClock::new(),
        sock,
        linux,
        dirs: Default::default(),
        refusable: [false; 2],
        linux_segments: !setup.no_checksum[1],
        setup: setup.clone(),
    };
    for &op in ops {
        match op {
            Op::StackSends { len, how } => w.stack_sends(len, how)?,
            Op::LinuxSends { len, how } => w.linux_sends(len, how)?,
            Op::Read { side, max } => {
                w.read(side, max)?;
            }
            Op::Wait { ms } => w.pump(StdDuration::from_millis(ms)),
            Op::Close {
                side,
                ms,
                sends,
                len,
            } => w.close(side, ms, sends, len)?,
        }
        w.pump(StdDuration::from_millis(1));
    }
    let clean = setup.faults.is_none();
    w.drain(clean)?;

    let after = linux_counters();
    let grew = |k: &str| after.get(k).unwrap_or(&0) - before.get(k).unwrap_or(&0);
    prop_assert_eq!(grew("Udp:InCsumErrors"), 0, "Linux saw bad UDP checksums");
    prop_assert_eq!(grew("Ip:InHdrErrors"), 0, "Linux saw bad IP headers");
    let c = w.stack.ledger().counters();
    prop_assert_eq!(
        c.get(Counter::UdpDropBadChecksum),
        0,
        "the stack saw bad UDP checksums"
    );
    prop_assert_eq!(c.get(Counter::UdpDropMalformed), 0);
    let broken = broken.lock().unwrap();
    prop_assert!(
        broken.is_empty(),
        "IP's rules broken on the wire: {broken:#?}"
    );
    if clean {
        for (d, dir) in w.dirs.iter().enumerate() {
            prop_assert!(
                w.accounted(d),
                "{} read {} of the {} datagrams {} sent; drops counted: {:?}",
                SIDES[1 - d],
                dir.sent.len() - dir.missing(),
                dir.sent.len(),
                SIDES[d],
                w.drops(d),
            );
            prop_assert!(
                dir.got.windows(2).all(|g| g[0] < g[1]),
                "{} read out of order: {:?}",
                SIDES[1 - d],
                dir.got
            );
        }
    }
    Ok(())
}

#[test]
fn any_udp_traffic_with_linux_delivers_only_what_was_sent() {
    skip_unless_able!("/dev/net/tun");
    let case = AtomicU32::new(0);
    let mut runner = TestRunner::new(common::conversation::config(16));
    let strategy = (setup(), proptest::collection::vec(op(), 0..60));
    let result = runner.run(&strategy, |(setup, ops)| {
        exchange(case.fetch_add(1, Ordering::Relaxed), &setup, &ops)
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}
