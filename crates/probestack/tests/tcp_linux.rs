//! Random conversations over TCP between probestack and the Linux kernel, checked against
//! the same model of the byte streams as `tcp_conversations.rs`: the stack on a TAP in a
//! namespace of the case's own, Linux's sockets (std's, non-blocking, in line for urgent
//! data) on the other side of it, in real time. Drawn: who connects, one to three
//! connections; the stack's tuning and TCP options, the TAP's MTU and offloads; Linux's
//! SACK, timestamps, window scaling and ECN (the namespace's sysctls), its socket buffers
//! and Nagle; seeded loss, duplication and reordering of what the stack sends, loss of
//! what it receives, and cuts of the link. Each side must read exactly what the other's
//! writes were taken for, then the end of the stream; the stack's calls fail only as the
//! model says; on a clean link neither side resets; every loan comes back; and the
//! stack's segments keep the rules a watch on the wire checks (`common::wire_rules`).
//!
//! Each case takes about 1.5 s of real time; `cargo test --workspace` runs 12 from a
//! fixed seed, and `PROBESTACK_CONVERSATIONS` / `PROBESTACK_CONVERSATION_SEED` run more
//! (README "Random conversations"). The test needs root, `/dev/net/tun` and `ip`; without
//! them it says why and passes. Only 198.18.0.0/15 is used, inside the namespace.
#![cfg(target_os = "linux")]

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration as StdDuration, Instant as StdInstant};

use common::conversation::{
    act, bytes, ends_survivor, stack_end_connection, stack_read, stack_write, Act, How, Step,
    Stream,
};
use common::netns::{set_option, skip_unless_able, Netns};
use common::tamper::{Link, SeededFaults, Tampered};
use common::wire_rules::{Mirrored, Watch};
use probestack::buf::Loan;
use probestack::driver::tap::TapConfig;
use probestack::ip::route::Ipv4Cidr;
use probestack::probe::Counter;
use probestack::rng::Rng;
use probestack::socket::tcp::{TcpError, TcpHandle};
use probestack::stack::{InterfaceConfig, Stack, StackConfig};
use probestack::tcp::State;
use probestack::time::{Clock, Duration, RealClock};
use probestack::tuning::Tuning;
use probestack::wire::ethernet::EthernetAddress;
use probestack::wire::Ipv4Address;
use proptest::prelude::*;
use proptest::test_runner::{TestCaseError, TestRunner};

const STACK: Ipv4Address = Ipv4Address::new(198, 18, 0, 2);
const LINUX: Ipv4Address = Ipv4Address::new(198, 18, 0, 1);
const STACK_MAC: EthernetAddress = EthernetAddress([0x02, 0x00, 0x5e, 0x18, 0x00, 0x02]);
const TAP_NAME: &str = "psktap0";
const PORT: u16 = 7000;
/// How long a stream may take to arrive, or a close to complete, in real time: loss
/// after a cut backs the retransmission timers off to seconds.
const PATIENCE: StdDuration = StdDuration::from_secs(90);
/// Side 0 is the stack, side 1 Linux.
const SIDES: [&str; 2] = ["probestack", "Linux"];

/// The stack's end: its tuning, its connections' options, and how its application reads.
#[derive(Clone, Debug)]
struct StackEnd {
    tuning: Tuning,
    send_buffer: usize,
    recv_buffer: usize,
    window_scaling: bool,
    timestamps: bool,
    sack: bool,
    ecn: bool,
    delayed_ack_ms: u64,
    rack: bool,
    tail_loss_probes: bool,
    spurious_undo: bool,
    max_ooo_ranges: usize,
    nodelay: bool,
    zero_copy_receive: bool,
}

/// Linux's end: the namespace's TCP sysctls and its sockets' options.
#[derive(Clone, Debug)]
struct LinuxEnd {
    sack: bool,
    timestamps: bool,
    window_scaling: bool,
    /// `net.ipv4.tcp_ecn`: 0 never, 1 asks and answers, 2 answers only.
    ecn: u8,
    /// `SO_RCVBUF` and `SO_SNDBUF`, where set (Linux doubles what it is given).
    recv_buffer: Option<usize>,
    send_buffer: Option<usize>,
    nodelay: bool,
}

#[derive(Clone, Debug)]
struct Setup {
    mtu: usize,
    offload: bool,
    linux_connects: bool,
    /// Per thousand frames: of the stack's, lost, duplicated, held back; of Linux's,
    /// lost; and the seed.
    faults: Option<(u64, u64, u64, u64, u64)>,
    stack: StackEnd,
    linux: LinuxEnd,
}

fn stack_end() -> impl Strategy<Value = StackEnd> {
    let buffer = || prop_oneof![Just(4 << 10), Just(64 << 10), Just(1 << 20)];
    (
        common::conversation::tuning(),
        buffer(),
        buffer(),
        proptest::collection::vec(any::<bool>(), 9),
        prop_oneof![Just(0u64), Just(40), Just(200)],
        prop_oneof![Just(1usize), Just(3), Just(32)],
    )
        .prop_map(
            |(tuning, send_buffer, recv_buffer, b, delayed_ack_ms, max_ooo_ranges)| StackEnd {
                tuning,
                send_buffer,
                recv_buffer,
                window_scaling: b[0],
                timestamps: b[1],
                sack: b[2],
                ecn: b[3],
                delayed_ack_ms,
                rack: b[4],
                tail_loss_probes: b[5],
                spurious_undo: b[6],
                max_ooo_ranges,
                nodelay: b[7],
                zero_copy_receive: b[8],
            },
        )
}

fn linux_end() -> impl Strategy<Value = LinuxEnd> {
    let buffer = || proptest::option::of(prop_oneof![Just(4096usize), Just(65536)]);
    (
        proptest::collection::vec(any::<bool>(), 4),
        0..3u8,
        buffer(),
        buffer(),
    )
        .prop_map(|(b, ecn, recv_buffer, send_buffer)| LinuxEnd {
            sack: b[0],
            timestamps: b[1],
            window_scaling: b[2],
            ecn,
            recv_buffer,
            send_buffer,
            nodelay: b[3],
        })
}

/// A fault's rate in a thousand frames: a few percent at most (each loss may cost a
/// retransmission timeout of real time).
fn rate() -> impl Strategy<Value = u64> {
    0..30u64
}

fn setup() -> impl Strategy<Value = Setup> {
    (
        // A TAP's largest MTU is 65,535 less its Ethernet header.
        prop_oneof![Just(576), Just(1500), Just(9000), Just(65521)],
        any::<bool>(),
        any::<bool>(),
        proptest::option::of((rate(), rate(), rate(), rate(), any::<u64>())),
        stack_end(),
        linux_end(),
    )
        .prop_map(
            |(mtu, offload, linux_connects, faults, stack, linux)| Setup {
                mtu,
                offload,
                linux_connects,
                faults,
                stack,
                linux,
            },
        )
}

/// Sets one of the namespace's sysctls (the calling thread is in it).
fn sysctl(name: &str, value: impl ToString) {
    let path = format!("/proc/sys/net/ipv4/{name}");
    std::fs::write(&path, value.to_string()).unwrap_or_else(|e| panic!("{path}: {e}"));
}

/// Sets a Linux socket's buffers, as drawn.
fn set_buffers(fd: &impl AsRawFd, linux: &LinuxEnd) {
    if let Some(n) = linux.recv_buffer {
        set_option(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, n as i32);
    }
    if let Some(n) = linux.send_buffer {
        set_option(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, n as i32);
    }
}

struct Conn {
    stack: TcpHandle,
    /// The stack's port and Linux's.
    ports: [u16; 2],
    /// Linux's socket, until Linux's application ends the connection.
    linux: Option<TcpStream>,
    /// streams[i]: what side i writes and the other reads.
    streams: [Stream; 2],
    zero_copy: bool,
    /// The side whose application closed or aborted the connection ([`Act::End`]); the
    /// other is the survivor.
    ended: Option<usize>,
    /// Whether the survivor's calls have told it the connection is over (reset, or timed
    /// out): it makes no more calls but its close.
    over: bool,
    /// Whether the end sent no RST: an abort from CLOSING, LAST-ACK or TIME-WAIT (RFC
    /// 9293 §3.10.5, Linux's `tcp_need_reset`) only deletes the connection.
    quiet: bool,
}

impl Conn {
    fn linux(&mut self) -> &mut TcpStream {
        self.linux.as_mut().expect("Linux's socket is open")
    }

    /// Whether `side`'s application still makes calls on this connection: it has not
    /// ended it, and as the survivor it has not been told the connection is over.
    fn calls(&self, side: usize) -> bool {
        match self.ended {
            None => true,
            Some(s) => s != side && !self.over,
        }
    }
}

/// What the survivor of an ended connection may be told by a call of Linux's: reset, a
/// write after the reset (`EPIPE`), a shutdown after it (`ENOTCONN`), or timed out.
fn ends_linux_survivor(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::ConnectionReset
            | ErrorKind::BrokenPipe
            | ErrorKind::NotConnected
            | ErrorKind::TimedOut
    )
}

/// Closes `sock` at once with a RST (`SO_LINGER` of zero), as an abort.
fn abort_linux(sock: TcpStream) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt reads a `linger` at `&linger`, which outlives the call, from an
    // open socket's descriptor.
    let r = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0, "SO_LINGER: {}", std::io::Error::last_os_error());
    drop(sock);
}

/// Linux connects to the stack's `port` from its own port `from` (0: an ephemeral one).
/// A port Linux still holds for the stack's address and port (its TIME-WAIT; Linux
/// reuses one for a connect only on loopback) is refused: an ephemeral one then.
fn linux_dial(from: u16, port: u16) -> std::io::Result<TcpStream> {
    let to = std::net::SocketAddr::from(([198, 18, 0, 2], port));
    if from == 0 {
        return TcpStream::connect_timeout(&to, StdDuration::from_secs(30));
    }
    // SAFETY: socket(2) with constant arguments; the descriptor it returns is owned
    // below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new, open descriptor that nothing else owns.
    let sock = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    set_option(&sock, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1);
    let addr = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: from.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from_ne_bytes([198, 18, 0, 1]),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: bind reads a `sockaddr_in` of the length given at `&addr`, which outlives
    // the call, for an open socket's descriptor.
    let r = unsafe {
        libc::bind(
            sock.as_raw_fd(),
            (&addr as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    let to_c = libc::sockaddr_in {
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from_ne_bytes([198, 18, 0, 2]),
        },
        ..addr
    };
    // SAFETY: as for bind: a `sockaddr_in` of the length given, an open descriptor.
    let r = (r == 0).then(|| unsafe {
        libc::connect(
            sock.as_raw_fd(),
            (&to_c as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    });
    match r {
        Some(0) => Ok(TcpStream::from(sock)),
        _ => {
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EADDRINUSE | libc::EADDRNOTAVAIL) => {
                    TcpStream::connect_timeout(&to, StdDuration::from_secs(30))
                }
                _ => Err(e),
            }
        }
    }
}

/// The TCP state of Linux's socket (`TCP_INFO`'s `tcpi_state`, Linux's numbering).
fn linux_state(sock: &TcpStream) -> u8 {
    // SAFETY: `tcp_info` is plain integers, for which zero is a value.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes at `&mut info`, which outlives the
    // call, from an open socket's descriptor, and sets `len` to what it wrote.
    let r = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    assert_eq!(r, 0, "TCP_INFO: {}", std::io::Error::last_os_error());
    info.tcpi_state
}

/// Linux's `TCP_FIN_WAIT2` (include/net/tcp_states.h).
const LINUX_FIN_WAIT2: u8 = 5;

/// The stack, its clock, Linux's sockets and the model.
struct World {
    stack: Stack,
    clock: RealClock,
    conns: Vec<Conn>,
    down: Arc<AtomicBool>,
    loans: Vec<Loan>,
    listening: Option<Listening>,
}

impl World {
    /// Runs the stack for `ms` of real time (Linux's kernel runs on its own).
    fn pump(&mut self, ms: u64) {
        let quiet = |_: &mut World| Ok(false);
        let _ = self.pump_within(StdDuration::from_millis(ms), quiet);
    }

    /// Runs the stack, calling `turn` after each poll, until `turn` says done or the
    /// patience runs out; whether it was done.
    fn pump_until(
        &mut self,
        turn: impl FnMut(&mut World) -> Result<bool, TestCaseError>,
    ) -> Result<bool, TestCaseError> {
        self.pump_within(PATIENCE, turn)
    }

    /// [`pump_until`](Self::pump_until) for at most `within` (at least one poll).
    fn pump_within(
        &mut self,
        within: StdDuration,
        mut turn: impl FnMut(&mut World) -> Result<bool, TestCaseError>,
    ) -> Result<bool, TestCaseError> {
        let end = StdInstant::now() + within;
        loop {
            self.stack.poll(self.clock.now());
            if turn(self)? {
                return Ok(true);
            }
            if StdInstant::now() >= end {
                return Ok(false);
            }
            std::thread::sleep(StdDuration::from_micros(100));
        }
    }

    fn write(&mut self, k: usize, side: usize, len: usize, how: How) -> Result<(), TestCaseError> {
        if !self.conns[k].calls(side) {
            return Ok(());
        }
        let data = bytes(side, self.conns[k].streams[side].written, len);
        let shut = self.conns[k].streams[side].shut;
        if self.conns[k].ended.is_some() {
            return self.survivor_write(k, side, &data);
        }
        let took = if side == 0 {
            let h = self.conns[k].stack;
            stack_write(
                &mut self.stack,
                h,
                data,
                how,
                shut,
                SIDES[0],
                &mut self.loans,
            )?
        } else {
            let sock = self.conns[k].linux();
            let r = match how {
                // Linux has no loans: it copies.
                How::Copy | How::Loan => sock.write(&data),
                How::Urgent => {
                    // SAFETY: send reads `data.len()` bytes at `data`, which outlives
                    // the call, from an open socket's descriptor.
                    let n = unsafe {
                        libc::send(
                            sock.as_raw_fd(),
                            data.as_ptr().cast(),
                            data.len(),
                            libc::MSG_OOB | libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
                        )
                    };
                    usize::try_from(n).map_err(|_| std::io::Error::last_os_error())
                }
            };
            match r {
                Ok(n) => {
                    prop_assert!(!shut, "Linux wrote after its shutdown");
                    prop_assert!(n > 0 && n <= len, "Linux took {n} of {len}");
                    n
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    prop_assert!(!shut, "Linux would block after its shutdown");
                    0
                }
                Err(e) if e.kind() == ErrorKind::BrokenPipe => {
                    prop_assert!(shut, "Linux refused a write before its shutdown: {e}");
                    0
                }
                Err(e) => return Err(TestCaseError::fail(format!("Linux's write: {e}"))),
            }
        };
        self.conns[k].streams[side].written += took;
        Ok(())
    }

    /// A copied write by the survivor of ended connection `k`: taken (it may never
    /// arrive), refused as the model allows, or the news that the connection is over.
    fn survivor_write(&mut self, k: usize, side: usize, data: &[u8]) -> Result<(), TestCaseError> {
        let shut = self.conns[k].streams[side].shut;
        let r = if side == 0 {
            match self.stack.tcp_send(self.conns[k].stack, data) {
                Ok(n) => Ok(n),
                Err(TcpError::WouldBlock) => Ok(0),
                Err(TcpError::Shutdown) if shut => Ok(0),
                Err(e) if ends_survivor(&e) => Err(None),
                Err(e) => Err(Some(e.to_string())),
            }
        } else {
            match self.conns[k].linux().write(data) {
                Ok(n) => Ok(n),
                Err(e) if e.kind() == ErrorKind::WouldBlock => Ok(0),
                Err(e) if e.kind() == ErrorKind::BrokenPipe && shut => Ok(0),
                Err(e) if ends_linux_survivor(&e) => Err(None),
                Err(e) => Err(Some(e.to_string())),
            }
        };
        match r {
            Ok(n) => {
                prop_assert!(n == 0 || !shut, "{} wrote after its shutdown", SIDES[side]);
                self.conns[k].streams[side].written += n;
            }
            Err(None) => self.conns[k].over = true,
            Err(Some(e)) => return Err(TestCaseError::fail(format!("{} write: {e}", SIDES[side]))),
        }
        Ok(())
    }

    /// `side`'s application ends connection `k` (closes or aborts its socket), unless
    /// the connection is ended already.
    fn end(&mut self, k: usize, side: usize, abort: bool) -> Result<(), TestCaseError> {
        let k = k % self.conns.len();
        if self.conns[k].ended.is_some() {
            return Ok(());
        }
        let quiet = if side == 0 {
            let r = stack_end_connection(&mut self.stack, self.conns[k].stack, abort);
            prop_assert!(r.is_ok(), "the stack's end (abort: {abort}): {r:?}");
            r == Ok(true)
        } else {
            let sock = self.conns[k].linux.take().expect("Linux's socket is open");
            // Linux's `tcp_need_reset`: ESTABLISHED, CLOSE-WAIT, FIN-WAIT-1 and -2,
            // SYN-RECEIVED (1, 8, 4, 5, 3).
            let resets = matches!(linux_state(&sock), 1 | 3 | 4 | 5 | 8);
            if abort {
                abort_linux(sock);
            } else {
                drop(sock);
            }
            abort && !resets
        };
        self.conns[k].ended = Some(side);
        self.conns[k].quiet = quiet;
        // A FIN, if one goes, follows everything written; a RST is no end of stream.
        self.conns[k].streams[side].shut |= !abort;
        self.pump(1);
        Ok(())
    }

    /// Reads up to `max` bytes on `side`; whether it got anything new (data or the end).
    fn read(&mut self, k: usize, side: usize, max: usize) -> Result<bool, TestCaseError> {
        if !self.conns[k].calls(side) {
            return Ok(false);
        }
        let ended = self.conns[k].ended.is_some();
        let got: Result<Option<Vec<u8>>, String> = if side == 0 {
            let h = self.conns[k].stack;
            let r = stack_read(&mut self.stack, h, max, self.conns[k].zero_copy);
            match r {
                Err(TcpError::WouldBlock) => return Ok(false),
                Err(e) if ended && ends_survivor(&e) => {
                    self.conns[k].over = true;
                    return Ok(false);
                }
                r => r.map_err(|e| format!("{e} ({:?})", self.stack.tcp_stats(h))),
            }
        } else {
            let mut buf = vec![0u8; max];
            match self.conns[k].linux().read(&mut buf) {
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(false),
                Err(e) if ended && ends_linux_survivor(&e) => {
                    self.conns[k].over = true;
                    return Ok(false);
                }
                r => r
                    .map(|n| {
                        buf.truncate(n);
                        (n > 0).then_some(buf)
                    })
                    .map_err(|e| e.to_string()),
            }
        };
        let from = 1 - side;
        match got {
            Ok(got) => self.conns[k].streams[from].take(got, max, SIDES[side], from, SIDES[from]),
            Err(e) => Err(TestCaseError::fail(format!("{} read: {e}", SIDES[side]))),
        }
    }

    fn shutdown(&mut self, k: usize, side: usize) -> Result<(), TestCaseError> {
        if self.conns[k].streams[side].shut || !self.conns[k].calls(side) {
            return Ok(());
        }
        let ended = self.conns[k].ended.is_some();
        let over = if side == 0 {
            match self.stack.tcp_shutdown(self.conns[k].stack) {
                Err(e) if ended && ends_survivor(&e) => true,
                r => {
                    prop_assert!(r.is_ok(), "the stack's shutdown: {r:?}");
                    false
                }
            }
        } else {
            match self.conns[k].linux().shutdown(Shutdown::Write) {
                Err(e) if ended && ends_linux_survivor(&e) => true,
                r => {
                    prop_assert!(r.is_ok(), "Linux's shutdown: {r:?}");
                    false
                }
            }
        };
        self.conns[k].over |= over;
        self.conns[k].streams[side].shut = true;
        Ok(())
    }

    /// `side` writes `len` more bytes while the other reads everything that arrives,
    /// until it has read them all.
    fn stream(&mut self, k: usize, side: usize, len: usize) -> Result<(), TestCaseError> {
        if self.conns[k].streams[side].shut {
            return Ok(());
        }
        let target = self.conns[k].streams[side].written + len;
        let done = self.pump_until(|w| {
            loop {
                let before = w.conns[k].streams[side].written;
                if before == target {
                    break;
                }
                w.write(k, side, (target - before).min(64 << 10), How::Copy)?;
                if w.conns[k].streams[side].written == before {
                    break;
                }
            }
            while w.read(k, 1 - side, 256 << 10)? {}
            Ok(w.conns[k].streams[side].read.len() == target)
        })?;
        let s = &self.conns[k].streams[side];
        prop_assert!(
            done,
            "{} read {} of the {} bytes {} wrote; the stack's {:?}",
            SIDES[1 - side],
            s.read.len(),
            s.written,
            SIDES[side],
            self.stack.tcp_stats(self.conns[k].stack),
        );
        Ok(())
    }

    /// The connecting side's application opens one more connection ([`Act::Open`]), at
    /// most six in all; where `reuse` asks, from the port of a connection it ended, so
    /// that it meets what the listening side has left of the old one (TIME-WAIT, or a
    /// survivor that missed the RST).
    fn open(&mut self, setup: &Setup, reuse: bool) -> Result<(), TestCaseError> {
        if self.conns.len() >= 6 {
            return Ok(());
        }
        // An old port only where the stack's segments are not delivered late (see
        // tests/tcp_conversations.rs, `Apps::open`).
        let late = setup.faults.is_some_and(|f| f.1 > 0 || f.2 > 0);
        let side = usize::from(setup.linux_connects);
        let ended = self.conns.iter().rev().find(|c| c.ended == Some(side));
        let from = ended
            .filter(|_| reuse && !late)
            .map_or(0, |c| c.ports[side]);
        dial(self, setup, PORT, &[from])
    }

    fn run(&mut self, k: usize, step: Step) -> Result<(), TestCaseError> {
        let k = k % self.conns.len();
        let ended = self.conns[k].ended.is_some();
        match step {
            // A stream to or from an ended connection would never be read whole; options
            // of a socket that may be reset do not matter.
            Step::Stream { .. } | Step::Options { .. } if ended => {}
            Step::Write { side, len, how } => self.write(k, side, len, how)?,
            Step::Read { side, max } => {
                self.read(k, side, max)?;
            }
            Step::Wait { ms } => self.pump(ms),
            Step::Shutdown { side } => self.shutdown(k, side)?,
            Step::Stream { side, len } => self.stream(k, side, len)?,
            Step::Cut { ms } => {
                self.down.store(true, Ordering::Relaxed);
                self.pump(ms);
                self.down.store(false, Ordering::Relaxed);
            }
            Step::Options {
                side,
                nodelay,
                zero_copy,
            } => {
                if side == 0 {
                    let h = self.conns[k].stack;
                    self.stack.tcp_set_nodelay(h, nodelay).unwrap();
                    self.stack.tcp_set_zero_copy_receive(h, zero_copy).unwrap();
                    self.conns[k].zero_copy = zero_copy;
                } else {
                    self.conns[k].linux().set_nodelay(nodelay).unwrap();
                }
            }
        }
        self.pump(1);
        Ok(())
    }

    /// Both sides of every connection shut down and read to the end of the stream, then
    /// close: the stack's connections must go, and every loan come back.
    fn finish(mut self, clean: bool, holds_frames: bool) -> Result<(), TestCaseError> {
        let lossy = !clean;
        for k in 0..self.conns.len() {
            for side in 0..2 {
                self.shutdown(k, side)?;
            }
        }
        let ended = self.conns.iter().any(|c| c.ended.is_some());
        let done = self.pump_until(|w| {
            for k in 0..w.conns.len() {
                for side in 0..2 {
                    while w.read(k, side, 100_000)? {}
                }
            }
            // A survivor reads to the end of the stream or until it is told the
            // connection is over. A RST lost (faults, cuts) or never sent (a quiet
            // abort) leaves a survivor whose FIN was acknowledged in FIN-WAIT-2 with
            // nothing to send, which hears nothing more, as in any TCP; its close ends it.
            let stack = &w.stack;
            Ok(w.conns.iter().all(|c| match c.ended {
                None => c.streams.iter().all(|s| s.eof_seen),
                Some(side) => {
                    let waits = if side == 1 {
                        stack.tcp_state(c.stack) == Ok(State::FinWait2)
                    } else {
                        c.linux
                            .as_ref()
                            .is_some_and(|s| linux_state(s) == LINUX_FIN_WAIT2)
                    };
                    c.over || c.streams[side].eof_seen || (lossy || c.quiet) && waits
                }
            }))
        })?;
        for (k, c) in self.conns.iter().enumerate() {
            let [ours, theirs] = &c.streams;
            prop_assert!(
                done,
                "connection {k} not ended after both shut down: Linux read {} of the stack's {} bytes (end seen: {}), the stack {} of Linux's {} ({}); the stack's {:?}",
                ours.read.len(),
                ours.written,
                ours.eof_seen,
                theirs.read.len(),
                theirs.written,
                theirs.eof_seen,
                self.stack.tcp_stats(c.stack),
            );
        }
        if let Some(Listening::Stack(l)) = self.listening.take() {
            self.stack.tcp_close(l).unwrap();
        }
        let conns = std::mem::take(&mut self.conns);
        for c in conns {
            if c.ended != Some(0) {
                self.stack.tcp_close(c.stack).unwrap();
            }
            drop(c.linux);
        }
        // Both closed at once, each end may go through TIME-WAIT (here 2 x 250 ms).
        let gone = self.pump_until(|w| Ok(w.stack.tcp_connection_count() == 0))?;
        prop_assert!(gone, "the stack keeps a connection after both closed");
        if clean && !ended {
            let c = self.stack.ledger().counters();
            prop_assert_eq!(c.get(Counter::TcpResetsOut), 0, "the stack sent resets");
            prop_assert_eq!(c.get(Counter::TcpResetsIn), 0, "Linux sent resets");
        }
        // A frame the stack's seeded faults hold back waits for others to go; one may
        // stay held at the end, slices of a loan in it.
        if !holds_frames {
            for (i, loan) in self.loans.iter().enumerate() {
                prop_assert!(loan.is_complete(), "loan {i} is still held");
            }
        }
        Ok(())
    }
}

/// The stack's configuration for `setup`.
fn stack_config(setup: &Setup) -> StackConfig {
    let s = &setup.stack;
    let mut c = StackConfig {
        tuning: s.tuning,
        ..StackConfig::default()
    };
    let tcp = &mut c.tcp;
    tcp.send_buffer = s.send_buffer;
    tcp.recv_buffer = s.recv_buffer;
    tcp.window_scaling = s.window_scaling;
    tcp.timestamps = s.timestamps;
    tcp.sack = s.sack;
    tcp.ecn = s.ecn;
    tcp.delayed_ack = Duration::from_millis(s.delayed_ack_ms);
    tcp.msl = Duration::from_millis(250);
    // A connection closed in FIN-WAIT-2 whose peer is gone: gone in real time too.
    tcp.fin_wait2_timeout = Duration::from_secs(2);
    tcp.rack = s.rack;
    tcp.tail_loss_probes = s.tail_loss_probes;
    tcp.spurious_undo = s.spurious_undo;
    tcp.max_ooo_ranges = s.max_ooo_ranges;
    c
}

/// The listening end of the conversation's connections: the stack's listener, or Linux's.
enum Listening {
    Stack(TcpHandle),
    Linux(TcpListener),
}

/// Listens the way `setup` says and connects `n` times.
fn connect(w: &mut World, setup: &Setup, n: usize, port: u16) -> Result<(), TestCaseError> {
    w.listening = Some(if setup.linux_connects {
        Listening::Stack(w.stack.tcp_listen((STACK, port), n).unwrap())
    } else {
        let listener = TcpListener::bind(("198.18.0.1", port)).unwrap();
        listener.set_nonblocking(true).unwrap();
        // Accepted sockets take the listener's buffers (and so the window scale they
        // imply).
        set_buffers(&listener, &setup.linux);
        Listening::Linux(listener)
    });
    dial(w, setup, port, &vec![0; n])
}

/// The connecting side opens a connection to the listener on `port` from each of
/// `from` (0: an ephemeral port; the stack falls back to one where the port is still
/// held), all at once, and sets each end's options.
fn dial(w: &mut World, setup: &Setup, port: u16, from: &[u16]) -> Result<(), TestCaseError> {
    let linux = &setup.linux;
    let n = from.len();
    let mut pairs: Vec<(TcpHandle, TcpStream)> = Vec::new();
    match w.listening.take().expect("listening") {
        Listening::Stack(listener) => {
            // Threads made here start in this thread's namespace.
            let dialers: Vec<_> = from
                .iter()
                .map(|&from| std::thread::spawn(move || linux_dial(from, port)))
                .collect();
            let mut accepted = Vec::new();
            let done = w.pump_until(|w| {
                while let Ok(s) = w.stack.tcp_accept(listener) {
                    accepted.push(s);
                }
                Ok(accepted.len() == n && dialers.iter().all(|d| d.is_finished()))
            })?;
            prop_assert!(
                done,
                "{} of {n} connections from Linux accepted",
                accepted.len()
            );
            for d in dialers {
                let sock = d.join().unwrap();
                let sock =
                    sock.map_err(|e| TestCaseError::fail(format!("Linux's connect: {e}")))?;
                let port = sock.local_addr().unwrap().port();
                let s = accepted
                    .iter()
                    .copied()
                    .find(|&s| {
                        w.stack
                            .tcp_endpoints(s)
                            .is_ok_and(|(_, remote)| remote.1 == port)
                    })
                    .unwrap();
                set_buffers(&sock, linux);
                pairs.push((s, sock));
            }
            w.listening = Some(Listening::Stack(listener));
        }
        Listening::Linux(listener) => {
            let config = w.stack.tcp_default_config();
            let clients: Vec<TcpHandle> = from
                .iter()
                .map(|&p| {
                    let local = (Ipv4Address::UNSPECIFIED, p);
                    match w
                        .stack
                        .tcp_connect_from((LINUX, port), local, config, false)
                    {
                        Err(TcpError::AddrInUse) => w.stack.tcp_connect((LINUX, port)),
                        r => r,
                    }
                    .unwrap()
                })
                .collect();
            let mut accepted = Vec::new();
            let done = w.pump_until(|w| {
                while let Ok((s, _)) = listener.accept() {
                    accepted.push(s);
                }
                Ok(accepted.len() == n
                    && clients
                        .iter()
                        .all(|&c| w.stack.tcp_state(c) == Ok(State::Established)))
            })?;
            prop_assert!(done, "{} of {n} connections to Linux made", accepted.len());
            for c in clients {
                let port = w.stack.tcp_local_addr(c).unwrap().1;
                let at = accepted
                    .iter()
                    .position(|s| s.peer_addr().unwrap().port() == port)
                    .unwrap();
                pairs.push((c, accepted.swap_remove(at)));
            }
            w.listening = Some(Listening::Linux(listener));
        }
    }
    for (h, sock) in pairs {
        sock.set_nonblocking(true).unwrap();
        sock.set_nodelay(linux.nodelay).unwrap();
        // Urgent data stays in the stream, as the stack reads it (RFC 6093 §5).
        set_option(&sock, libc::SOL_SOCKET, libc::SO_OOBINLINE, 1);
        w.stack.tcp_set_nodelay(h, setup.stack.nodelay).unwrap();
        w.stack
            .tcp_set_zero_copy_receive(h, setup.stack.zero_copy_receive)
            .unwrap();
        let ports = [
            w.stack.tcp_local_addr(h).unwrap().1,
            sock.local_addr().unwrap().port(),
        ];
        w.conns.push(Conn {
            stack: h,
            ports,
            linux: Some(sock),
            streams: Default::default(),
            zero_copy: setup.stack.zero_copy_receive,
            ended: None,
            over: false,
            quiet: false,
        });
    }
    Ok(())
}

/// One conversation, in a namespace of its own (number `case`).
fn converse(
    case: u32,
    setup: &Setup,
    connections: usize,
    acts: &[(usize, Act)],
) -> Result<(), TestCaseError> {
    let mut ns = Netns::create("conv", case).expect("a namespace");
    ns.enter();
    let l = &setup.linux;
    sysctl("tcp_sack", u8::from(l.sack));
    sysctl("tcp_timestamps", u8::from(l.timestamps));
    sysctl("tcp_window_scaling", u8::from(l.window_scaling));
    sysctl("tcp_ecn", l.ecn);
    let tap = ns.tap(
        TAP_NAME,
        TapConfig {
            mtu: setup.mtu,
            offload: setup.offload,
        },
    );
    let down = Arc::new(AtomicBool::new(false));
    let (lose, duplicate, hold, lose_in, seed) = setup.faults.unwrap_or_default();
    let broken = Arc::new(Mutex::new(Vec::new()));
    // The watch sees what the stack sends before the link cuts or the faults touch it,
    // and what it receives after.
    let dev = Tampered {
        dev: Tampered {
            dev: Tampered {
                dev: Tampered {
                    dev: tap,
                    tamper: Mirrored::new(["Linux", "the stack"], broken.clone()),
                },
                tamper: SeededFaults::new(seed, lose, duplicate, hold, 0),
            },
            tamper: Link {
                down: down.clone(),
                lose_in,
                rng: Rng::new(seed ^ 1),
            },
        },
        tamper: Watch::new(["the stack", "Linux"], broken.clone()),
    };
    let mut stack = Stack::new(stack_config(setup));
    stack.add_interface(
        Box::new(dev),
        InterfaceConfig {
            mac: STACK_MAC,
            cidr: Ipv4Cidr::new(STACK, 15).unwrap(),
        },
    );
    let mut w = World {
        stack,
        clock: RealClock::new(),
        conns: Vec::new(),
        down,
        loans: Vec::new(),
        listening: None,
    };
    connect(&mut w, setup, connections, PORT)?;
    for &(k, act) in acts {
        match act {
            Act::Do(step) => w.run(k, step)?,
            Act::End { side, abort } => w.end(k, side, abort)?,
            Act::Open { reuse } => w.open(setup, reuse)?,
        }
    }
    let faults = setup.faults.is_some();
    let cuts = acts
        .iter()
        .any(|(_, a)| matches!(a, Act::Do(Step::Cut { .. })));
    w.finish(!faults && !cuts, faults)?;
    let broken = broken.lock().unwrap();
    prop_assert!(broken.is_empty(), "rules broken on the wire: {broken:#?}");
    Ok(())
}

/// Mostly one connection, sometimes two or three, each conversation up to 30 steps.
#[test]
fn any_conversation_with_linux_delivers_both_streams() {
    skip_unless_able!("/dev/net/tun");
    let case = AtomicU32::new(0);
    let mut runner = TestRunner::new(common::conversation::config(12));
    let strategy = (
        setup(),
        prop_oneof![3 => Just(1usize), 1 => 2..4usize],
        // Real time: waits under 300 ms, streams under 512 KB, cuts under 1.5 s.
        proptest::collection::vec((0..32usize, act(300, 1 << 19, 1500, true)), 0..30),
    );
    let result = runner.run(&strategy, |(setup, connections, acts)| {
        converse(
            case.fetch_add(1, Ordering::Relaxed),
            &setup,
            connections,
            &acts,
        )
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}
