//! Adversarial packets over a TAP: malformed IPv4, UDP and TCP headers, overlapping
//! fragments, a fragment flood, and RFC 5961's blind attacks on a connection with a Linux
//! peer. Each case is a burst forged with scapy (`tests/adversarial/send.py`, run with
//! Debian's `/usr/bin/python3` and `python3-scapy`) on the Linux side of the TAP; after
//! each, the stack's specific counters must have risen by exactly what the case sent, no
//! other drop counter may have moved, nothing forged may have reached an application
//! (every forged payload carries `EVIL`), and the stack must still serve: a UDP echo from a
//! Linux socket, and for the TCP cases an echo on the connection under attack whose bytes
//! are checked on both ends.
//!
//! One namespace (`psk-adv-<pid>-1`) with the TAP `pskadv0`; Linux is 198.18.0.1/15, the
//! stack 198.18.0.2/15, serving ICMP echo, and UDP and TCP echo on port 7, driven by the
//! runner on a thread of its own. The test thread reads the stack through a [`View`] the
//! application publishes at every turn: the counters of the stack's ledger, what the
//! echo services received, the connections' sequence numbers, the reassembly queue.
//!
//! Needs root, `/dev/net/tun`, `ip` and scapy; without them it says why and passes.
#![cfg(target_os = "linux")]

mod common;

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::AtomicBool;
use std::sync::Mutex;
use std::time::{Duration as StdDuration, Instant as StdInstant};

use common::netns::{python_module_missing, skip_unless_able, Netns, StopOnDrop};
use probestack::driver::tap::TapConfig;
use probestack::ip::reassembly::ReassemblyConfig;
use probestack::ip::route::Ipv4Cidr;
use probestack::probe::Counter;
use probestack::runner;
use probestack::socket::tcp::{TcpError, TcpHandle};
use probestack::socket::udp::{UdpError, UdpHandle};
use probestack::stack::{InterfaceConfig, Stack, StackConfig};
use probestack::tcp::State;
use probestack::time::RealClock;
use probestack::wire::ethernet::EthernetAddress;
use probestack::wire::Ipv4Address;

const STACK: Ipv4Address = Ipv4Address::new(198, 18, 0, 2);
const STACK_MAC: EthernetAddress = EthernetAddress([0x02, 0x00, 0x5e, 0x18, 0x00, 0x02]);
const LINUX: &str = "198.18.0.1";
const TAP_NAME: &str = "pskadv0";
const ECHO_PORT: u16 = 7;
const PYTHON: &str = "/usr/bin/python3";
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/adversarial/send.py");
/// What every forged payload carries.
const MARKER: &[u8] = b"EVIL";
/// The reassembly memory cap: small, so that a flood of 300 fragments passes it.
const FRAG_CAP: usize = 128 << 10;
/// How long a counter may take to move (the stack is on another thread).
const SETTLE: StdDuration = StdDuration::from_secs(5);

/// One echo connection as the stack sees it.
#[derive(Clone, Copy, Debug)]
struct ConnView {
    remote_port: u16,
    state: State,
    rcv_nxt: u32,
    snd_nxt: u32,
}

/// What the application publishes at every turn.
#[derive(Default)]
struct View {
    /// The ledger's counters, in `Counter::ALL` order.
    counters: Vec<u64>,
    /// Every datagram the UDP echo read: source port and payload.
    udp_in: Vec<(u16, Vec<u8>)>,
    /// Every byte each TCP echo connection read, by the peer's port.
    tcp_in: BTreeMap<u16, Vec<u8>>,
    conns: Vec<ConnView>,
    frag_bytes_held: usize,
    frag_datagrams_held: usize,
}

/// Where `c` is in `Counter::ALL`, and so in a [`View`]'s counters.
fn index(c: Counter) -> usize {
    Counter::ALL.iter().position(|&x| x == c).unwrap()
}

/// UDP and TCP echo on port 7, recording what they read into the [`View`].
struct Echo {
    udp: UdpHandle,
    listener: TcpHandle,
    /// Connection, peer's port, bytes read and not yet sent back.
    conns: Vec<(TcpHandle, u16, Vec<u8>)>,
    buf: Vec<u8>,
}

impl Echo {
    fn open(st: &mut Stack) -> Echo {
        let udp = st.udp_open();
        st.udp_bind(udp, STACK, ECHO_PORT).expect("bind UDP echo");
        let listener = st.tcp_listen((STACK, ECHO_PORT), 8).expect("listen");
        Echo {
            udp,
            listener,
            conns: Vec::new(),
            buf: vec![0; 65536],
        }
    }

    fn turn(&mut self, st: &mut Stack, view: &Mutex<View>) {
        let mut v = view.lock().unwrap();
        loop {
            match st.udp_recv_from(self.udp, &mut self.buf) {
                Ok(r) => {
                    v.udp_in.push((r.from.1, self.buf[..r.len].to_vec()));
                    // A full send queue loses the echo, as UDP may; the test sends again.
                    let _ = st.udp_send_to(self.udp, &self.buf[..r.len], r.from.0, r.from.1);
                }
                Err(UdpError::WouldBlock) => break,
                Err(e) => panic!("udp_recv_from: {e}"),
            }
        }
        loop {
            match st.tcp_accept(self.listener) {
                Ok(c) => {
                    let port = st.tcp_endpoints(c).expect("endpoints").1 .1;
                    self.conns.push((c, port, Vec::new()));
                }
                Err(TcpError::WouldBlock) => break,
                Err(e) => panic!("accept: {e:?}"),
            }
        }
        v.conns.clear();
        for (c, port, pending) in &mut self.conns {
            loop {
                match st.tcp_recv(*c, &mut self.buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        v.tcp_in
                            .entry(*port)
                            .or_default()
                            .extend_from_slice(&self.buf[..n]);
                        pending.extend_from_slice(&self.buf[..n]);
                    }
                    Err(_) => break,
                }
            }
            if let Ok(n) = st.tcp_send(*c, pending) {
                pending.drain(..n);
            }
            if let Ok(conn) = st.tcp_connection(*c) {
                v.conns.push(ConnView {
                    remote_port: *port,
                    state: conn.state(),
                    rcv_nxt: conn.rcv_nxt().0,
                    snd_nxt: conn.snd_nxt().0,
                });
            }
        }
        let counters = st.ledger().counters();
        v.counters.clear();
        v.counters
            .extend(Counter::ALL.iter().map(|&c| counters.get(c)));
        v.frag_bytes_held = st.reassembler().bytes_held();
        v.frag_datagrams_held = st.reassembler().datagrams_held();
    }
}

/// One packet the stack sent to Linux while the script listened.
#[derive(Debug)]
struct Reply {
    proto: u64,
    dport: Option<u64>,
    flags: String,
    seq: Option<u64>,
    ack: Option<u64>,
    payload: u64,
}

/// The test thread's side: the namespace, the view, and Linux's sockets.
struct Attacker<'a> {
    ns: &'a Netns,
    view: &'a Mutex<View>,
    linux_mac: String,
    udp: UdpSocket,
    /// A fresh source port for each case's forged packets.
    next_port: u16,
    serve_seq: usize,
}

impl Attacker<'_> {
    fn counters(&self) -> Vec<u64> {
        self.view.lock().unwrap().counters.clone()
    }

    /// Runs `case` of the script with `params`, from their `sport` or else a port of its
    /// own; returns the port and what the stack sent to Linux meanwhile.
    fn send(&mut self, case: &str, params: &[(&str, String)]) -> (u16, Vec<Reply>) {
        let sport = match params.iter().find(|(k, _)| *k == "sport") {
            Some((_, v)) => v.parse().expect("sport"),
            None => {
                self.next_port += 1;
                self.next_port
            }
        };
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.ns.name, PYTHON, SCRIPT, TAP_NAME])
            .args([
                &self.linux_mac,
                &STACK_MAC.to_string(),
                LINUX,
                "198.18.0.2",
                case,
            ])
            .arg(format!("sport={sport}"))
            .args(
                params
                    .iter()
                    .filter(|(k, _)| *k != "sport")
                    .map(|(k, v)| format!("{k}={v}")),
            );
        let out = common::netns::run(&mut cmd);
        let text = String::from_utf8_lossy(&out.stdout);
        let json: serde_json::Value = serde_json::from_str(text.trim())
            .unwrap_or_else(|e| panic!("{case}: bad output {text:?}: {e}"));
        let replies = json["replies"]
            .as_array()
            .expect("replies")
            .iter()
            .map(|r| Reply {
                proto: r["proto"].as_u64().unwrap(),
                dport: r["dport"].as_u64(),
                flags: r["flags"].as_str().unwrap_or("").to_string(),
                seq: r["seq"].as_u64(),
                ack: r["ack"].as_u64(),
                payload: r["payload"].as_u64().unwrap_or(0),
            })
            .collect();
        eprintln!("{case}: sent {}", json["sent"]);
        (sport, replies)
    }

    /// Waits until each counter of `expected` has risen from `before` by its amount, then
    /// checks that it rose by exactly that, and that no other drop counter moved.
    fn expect(&self, case: &str, before: &[u64], expected: &[(Counter, u64)]) {
        let started = StdInstant::now();
        loop {
            let now = self.counters();
            let delta = |c: Counter| now[index(c)] - before[index(c)];
            let reached = expected.iter().all(|&(c, n)| delta(c) >= n);
            if reached || started.elapsed() > SETTLE {
                let all_moved: Vec<_> = Counter::ALL
                    .iter()
                    .filter(|&&c| delta(c) != 0)
                    .map(|&c| (c.name(), delta(c)))
                    .collect();
                for &(c, n) in expected {
                    assert_eq!(delta(c), n, "{case}: {}; moved: {all_moved:?}", c.name());
                }
                for (i, c) in Counter::ALL.iter().enumerate() {
                    let named = expected.iter().any(|&(e, _)| e == *c);
                    if c.name().contains(".drop.") && !named {
                        assert_eq!(now[i], before[i], "{case}: moved: {all_moved:?}");
                    }
                }
                let moved: Vec<_> = expected
                    .iter()
                    .map(|&(c, _)| (c.name(), delta(c)))
                    .collect();
                eprintln!("{case}: {moved:?}");
                return;
            }
            std::thread::sleep(StdDuration::from_millis(10));
        }
    }

    /// A UDP echo round trip from a Linux socket: the stack still serves. The first
    /// datagram may wait for ARP, and a lost one is sent again, up to four times.
    fn udp_serves(&mut self, len: usize) {
        self.serve_seq += 1;
        let d: Vec<u8> = (0..len)
            .map(|i| (i * 7 + self.serve_seq * 13) as u8 | 1)
            .map(|b| if b == b'E' { b'e' } else { b })
            .collect();
        let mut buf = vec![0u8; 65536];
        for _ in 0..4 {
            self.udp
                .send_to(&d, (STACK.to_string(), ECHO_PORT))
                .expect("send_to");
            loop {
                match self.udp.recv_from(&mut buf) {
                    Ok((n, from)) => {
                        assert_eq!(from, SocketAddr::from(([198, 18, 0, 2], ECHO_PORT)));
                        if buf[..n] == d[..] {
                            return;
                        }
                        // An echo of an earlier try: read on.
                    }
                    Err(e)
                        if e.kind() == io::ErrorKind::WouldBlock
                            || e.kind() == io::ErrorKind::TimedOut =>
                    {
                        break
                    }
                    Err(e) => panic!("recv_from: {e}"),
                }
            }
        }
        panic!("no UDP echo of {len} bytes");
    }

    /// The TCP echo on `conn` returns exactly `text`, and nothing else is waiting.
    fn tcp_serves(&self, conn: &mut TcpStream, text: &[u8]) {
        conn.write_all(text).expect("write");
        let mut got = vec![0u8; text.len()];
        conn.read_exact(&mut got).expect("read the echo");
        assert_eq!(got, text, "the echo came back altered");
        conn.set_nonblocking(true).unwrap();
        let mut extra = [0u8; 64];
        match conn.read(&mut extra) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            other => panic!("bytes after the echo: {other:?}"),
        }
        conn.set_nonblocking(false).unwrap();
    }

    /// The stack's view of the echo connection whose peer is `port`, once it has read
    /// `read` bytes and sent them all back.
    fn conn(&self, port: u16, read: usize) -> ConnView {
        let started = StdInstant::now();
        loop {
            {
                let v = self.view.lock().unwrap();
                let got = v.tcp_in.get(&port).map_or(0, Vec::len);
                if let Some(c) = v.conns.iter().find(|c| c.remote_port == port) {
                    if got == read {
                        return *c;
                    }
                }
            }
            assert!(started.elapsed() < SETTLE, "no connection from port {port}");
            std::thread::sleep(StdDuration::from_millis(10));
        }
    }

    /// Nothing the stack's applications read carries the forged marker, and nothing came
    /// from the forged source ports in `ports`.
    fn nothing_forged_delivered(&self, ports: &[u16]) {
        let v = self.view.lock().unwrap();
        for (port, data) in &v.udp_in {
            assert!(
                !ports.contains(port),
                "a forged datagram from {port} delivered"
            );
            assert!(!contains(data, MARKER), "forged bytes delivered over UDP");
        }
        for data in v.tcp_in.values() {
            assert!(!contains(data, MARKER), "forged bytes delivered over TCP");
        }
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// A TSval a forged segment on `s`'s connection can carry and pass PAWS (RFC 7323 §5):
/// the one the Linux socket would send now (`TCP_TIMESTAMP`, in milliseconds), plus a
/// second, since Linux may still send a delayed ACK carrying a later one before the forged
/// segment arrives. No forged segment is accepted, so none moves the stack's TS.Recent.
fn forged_tsval(s: &TcpStream) -> u32 {
    let mut v: u32 = 0;
    let mut len = std::mem::size_of::<u32>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `v`, which lives across the call,
    // and the descriptor is open for the life of `s`.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_TIMESTAMP,
            (&mut v as *mut u32).cast(),
            &mut len,
        )
    };
    assert_eq!(r, 0, "TCP_TIMESTAMP: {}", io::Error::last_os_error());
    v.wrapping_add(1000)
}

/// Replies among `replies` to forged port `port`.
fn to_port(replies: &[Reply], port: u16) -> Vec<&Reply> {
    replies
        .iter()
        .filter(|r| r.proto == 1 || r.dport == Some(u64::from(port)))
        .collect()
}

#[test]
fn adversarial_packets_are_dropped_counted_and_survived() {
    skip_unless_able!("/dev/net/tun", "ping");
    if let Some(why) = python_module_missing(PYTHON, "scapy") {
        eprintln!("skipping: {why} (Debian: apt-get install python3-scapy)");
        return;
    }
    let started = StdInstant::now();
    let Some(mut ns) = Netns::create("adv", 1) else {
        return;
    };
    ns.enter();
    let tap = ns.tap(TAP_NAME, TapConfig::default());
    let linux_mac = ns
        .mac_of(TAP_NAME)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":");
    let mut stack = Stack::new(StackConfig {
        reassembly: ReassemblyConfig {
            max_bytes: FRAG_CAP,
            ..ReassemblyConfig::default()
        },
        ..StackConfig::default()
    });
    stack.add_interface(
        Box::new(tap),
        InterfaceConfig {
            mac: STACK_MAC,
            cidr: Ipv4Cidr::new(STACK, 15).unwrap(),
        },
    );
    let mut echo = Echo::open(&mut stack);
    let view = Mutex::new(View::default());
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let _stop = StopOnDrop(&stop);
        s.spawn(|| {
            let clock = RealClock::new();
            runner::run(&mut stack, &clock, &stop, |st, _| echo.turn(st, &view)).expect("runner");
        });
        let udp = UdpSocket::bind((LINUX, 0)).expect("bind");
        udp.set_read_timeout(Some(StdDuration::from_millis(500)))
            .unwrap();
        let mut a = Attacker {
            ns: &ns,
            view: &view,
            linux_mac,
            udp,
            next_port: 40000,
            serve_seq: 0,
        };
        // Serving before anything is sent (this also settles ARP both ways).
        a.udp_serves(100);
        ping_once(&ns);

        // Stateless cases: (script case, counters and what each must rise by).
        use Counter::*;
        let stateless: &[(&str, &[(Counter, u64)])] = &[
            ("ip_ihl_below_5", &[(IpDropMalformed, 2)]),
            ("ip_ihl_past_total_length", &[(IpDropMalformed, 2)]),
            ("ip_total_length_past_frame", &[(IpDropMalformed, 2)]),
            ("ip_total_length_below_header", &[(IpDropMalformed, 2)]),
            ("ip_bad_header_checksum", &[(IpDropBadChecksum, 1)]),
            ("udp_bad_checksum", &[(UdpDropBadChecksum, 1)]),
            ("udp_truncated_header", &[(UdpDropMalformed, 3)]),
            ("tcp_bad_checksum", &[(TcpDropBadChecksum, 1)]),
            ("tcp_data_offset_below_5", &[(TcpDropMalformed, 2)]),
            ("tcp_data_offset_past_segment", &[(TcpDropMalformed, 2)]),
            ("tcp_option_length_0", &[(TcpDropMalformed, 1)]),
            ("tcp_option_length_1", &[(TcpDropMalformed, 1)]),
            ("tcp_option_length_past_header", &[(TcpDropMalformed, 2)]),
            // The first overlap drops the datagram and poisons its key; the two fragments
            // after it (one would complete the datagram) meet the poisoned key.
            (
                "ip_overlapping_fragments",
                &[
                    (IpFragmentsIn, 4),
                    (IpDropFragOverlap, 3),
                    (IpReassembled, 0),
                ],
            ),
        ];
        let mut forged_ports = Vec::new();
        for &(case, expected) in stateless {
            let before = a.counters();
            let (port, replies) = a.send(case, &[]);
            forged_ports.push(port);
            a.expect(case, &before, expected);
            let answered = to_port(&replies, port);
            assert!(
                answered.is_empty(),
                "{case}: the stack answered {answered:?}"
            );
            a.udp_serves(64);
            a.nothing_forged_delivered(&forged_ports);
        }

        // A flood of first fragments that never complete: the reassembly memory stays
        // under its cap, and every fragment is either held or counted as dropped.
        let before = a.counters();
        let held_before = view.lock().unwrap().frag_datagrams_held;
        let (port, _) = a.send("ip_fragment_flood", &[("count", "300".into())]);
        forged_ports.push(port);
        let deadline = StdInstant::now() + SETTLE;
        let (held, bytes_held) = loop {
            let v = view.lock().unwrap();
            let i = index(IpFragmentsIn);
            if v.counters[i] - before[i] >= 300 || StdInstant::now() > deadline {
                break (v.frag_datagrams_held - held_before, v.frag_bytes_held);
            }
            drop(v);
            std::thread::sleep(StdDuration::from_millis(10));
        };
        eprintln!("ip_fragment_flood: {held} datagrams ({bytes_held} bytes) held");
        assert!(bytes_held <= FRAG_CAP, "{bytes_held} bytes held");
        assert!(held < 300, "the cap was never reached");
        // Every fragment is either held or counted as dropped at the cap.
        let dropped = 300 - held as u64;
        a.expect(
            "ip_fragment_flood",
            &before,
            &[(IpFragmentsIn, 300), (IpFragEvicted, dropped)],
        );
        // A datagram in three fragments still gets through (and evicts old ones).
        a.udp_serves(3000);
        a.nothing_forged_delivered(&forged_ports);

        // RFC 5961 and RFC 9293 §3.10.7.4 against a connection from a Linux socket.
        let mut conn = TcpStream::connect_timeout(
            &SocketAddr::from(([198, 18, 0, 2], ECHO_PORT)),
            StdDuration::from_secs(3),
        )
        .expect("connect");
        conn.set_read_timeout(Some(StdDuration::from_secs(5)))
            .unwrap();
        let port = conn.local_addr().unwrap().port();
        let mut sent: Vec<u8> = Vec::new();
        let hello = b"hello from linux\n";
        a.tcp_serves(&mut conn, hello);
        sent.extend_from_slice(hello);
        let connected: &[(&str, &[(Counter, u64)])] = &[
            // Far ahead of the window and wholly behind it: each dropped and ACKed.
            (
                "tcp_out_of_window",
                &[(TcpDropOutOfWindow, 2), (TcpChallengeAcks, 0)],
            ),
            // In the window but not at RCV.NXT: a challenge ACK, no reset (§3.2).
            ("tcp_blind_rst", &[(TcpChallengeAcks, 1), (TcpResetsIn, 0)]),
            // A SYN on an established connection: a challenge ACK (§4.2).
            ("tcp_blind_syn", &[(TcpChallengeAcks, 1), (TcpResetsIn, 0)]),
            // Data at RCV.NXT acknowledging what was never sent (§5.2).
            (
                "tcp_data_bad_ack",
                &[(TcpDropAckTooNew, 1), (TcpChallengeAcks, 1)],
            ),
        ];
        for (n, &(case, expected)) in connected.iter().enumerate() {
            let c = a.conn(port, sent.len());
            assert_eq!(c.state, State::Established);
            let before = a.counters();
            let params = [
                ("sport", port.to_string()),
                ("dport", ECHO_PORT.to_string()),
                ("rcv_nxt", c.rcv_nxt.to_string()),
                ("snd_nxt", c.snd_nxt.to_string()),
                ("tsval", forged_tsval(&conn).to_string()),
            ];
            let (_, replies) = a.send(case, &params);
            a.expect(case, &before, expected);
            // The stack's answers: pure ACKs at <SEQ=SND.NXT><ACK=RCV.NXT>.
            let acks: Vec<_> = replies
                .iter()
                .filter(|r| r.dport == Some(u64::from(port)))
                .collect();
            // One ACK at least: the two segments of `tcp_out_of_window` each draw one when
            // they arrive in different polls, and share one when the stack takes both in
            // one receive batch (it answers a batch with one ACK), which depends on how
            // busy the machine is; its counter checks that both were dropped.
            let wanted = 1;
            let exact = acks
                .iter()
                .filter(|r| {
                    r.flags == "A"
                        && r.payload == 0
                        && r.seq == Some(u64::from(c.snd_nxt))
                        && r.ack == Some(u64::from(c.rcv_nxt))
                })
                .count();
            assert!(
                exact >= wanted && acks.iter().all(|r| !r.flags.contains('R')),
                "{case}: wanted {wanted} ACKs, the stack sent {acks:?}"
            );
            let c = a.conn(port, sent.len());
            assert_eq!(c.state, State::Established, "{case}");
            let text = format!("still here after {case} ({n})\n");
            a.tcp_serves(&mut conn, text.as_bytes());
            sent.extend_from_slice(text.as_bytes());
            a.udp_serves(64);
        }
        // What the stack read is exactly what Linux wrote: nothing injected, nothing lost.
        assert_eq!(view.lock().unwrap().tcp_in.get(&port), Some(&sent));
        a.nothing_forged_delivered(&forged_ports);
        drop(conn);
        ping_once(&ns);
    });
    eprintln!("all cases in {:?}", started.elapsed());
    drop(ns);
}

/// One ping from Linux, which must come back: the stack still answers ICMP echo.
fn ping_once(ns: &Netns) {
    let out = ns.exec(&["ping", "-c", "1", "-W", "2", "198.18.0.2"]);
    assert!(
        out.status.success(),
        "ping: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}
