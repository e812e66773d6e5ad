//! Random conversations over TCP between two applications, checked against a model of the
//! byte streams: any mix of writes (copied, loaned, urgent), reads (copied or zero-copy),
//! idle time, half-closes, bulk streams and cuts of the link, on one connection or up to 20
//! at once (past the socket table's 16 slots, some made from SYN cookies), on either
//! device, at any MTU, with any of the tuning's switches and the connections' options,
//! with and without seeded faults on the link. Each side must read exactly what the
//! other's writes were taken for, in order, then the end of the stream; no call may fail
//! but as the model says it must (`WouldBlock` when it has to; `Shutdown` for a write after
//! the writer's shutdown); after both close, every connection goes, and every loaned byte
//! is given back. README "Random conversations" says how to run more of them.
//!
//! The directed tests (tests/tcp.rs, tests/tcp_states.rs) each check one mechanism in
//! the configuration it matters in; this one looks for the combinations nobody wrote a
//! test for (a window update owed through a zero-copy read, a half-close behind data
//! sent by reference and verified on read, SACK off against a peer with it on, ...).

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use common::conversation::{
    act, bytes, ends_survivor, stack_end_connection, stack_read, stack_write, Act, How, Step,
    Stream,
};
use common::tamper::{SeededFaults, Tamper, Tampered};
use common::wire_rules::Watch;
use probestack::buf::{Loan, PacketBuf};
use probestack::driver::pcap::{PcapMode, PcapWriter};
use probestack::driver::{ChecksumOffload, CopyMode, Device, FaultConfig, TxMeta};
use probestack::probe::Counter;
use probestack::sim::{HostConfig, Pair, ADDR_A, ADDR_B, MAC_A, MAC_B};
use probestack::socket::tcp::{TcpError, TcpHandle};
use probestack::tcp::State;
use probestack::time::Duration;
use probestack::tuning::Tuning;
use probestack::wire::Ipv4Address;
use proptest::prelude::*;

const PORT: u16 = 7000;
/// How long, in virtual time, a stream may take to arrive and a close to complete. Hours:
/// without timestamps or SACK, a receiver keeping one out-of-order range and a link that
/// loses and reorders a few percent, a sender retransmitting after a timeout gets no RTT
/// sample (Karn's rule, RFC 6298 §5.7), so its timer stays backed off to the minute and
/// each further loss costs one; a megabyte took 18 minutes so. Cheap: the clock jumps.
const PATIENCE: Duration = Duration::from_secs(4 * 3600);
/// The interval between keepalive probes where keepalive is on (after a second idle).
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
/// The side that connects (host A) and the side that listens (host B).
const SIDES: [&str; 2] = ["A", "B"];

/// What one host is: its tuning, its connection's options, its NIC (when the pair is on
/// the memory link) and how its application uses the socket.
#[derive(Clone, Debug)]
struct Host {
    tuning: Tuning,
    send_buffer: usize,
    recv_buffer: usize,
    window_scaling: bool,
    timestamps: bool,
    sack: bool,
    ecn: bool,
    delayed_ack_ms: u64,
    nic_checksum_offload: bool,
    nic_tso: bool,
    nic_header_split: bool,
    nic_pio: bool,
    nodelay: bool,
    zero_copy_receive: bool,
    rack: bool,
    tail_loss_probes: bool,
    spurious_undo: bool,
    keepalive: bool,
    limited_transmit: bool,
    max_ooo_ranges: usize,
}

#[derive(Clone, Debug)]
struct Setup {
    mtu: usize,
    on_frame_queue: bool,
    /// Per thousand frames, each way: lost, duplicated, held back, corrupted; and the seed.
    faults: Option<(u64, u64, u64, u64, u64)>,
    hosts: [Host; 2],
}

fn host() -> impl Strategy<Value = Host> {
    let buffer = || prop_oneof![Just(4 << 10), Just(16 << 10), Just(64 << 10), Just(1 << 20)];
    (
        common::conversation::tuning(),
        buffer(),
        buffer(),
        proptest::collection::vec(any::<bool>(), 15),
        prop_oneof![Just(0u64), Just(40), Just(200)],
        prop_oneof![Just(1usize), Just(3), Just(32)],
    )
        .prop_map(
            |(tuning, send_buffer, recv_buffer, b, delayed_ack_ms, max_ooo_ranges)| Host {
                tuning,
                send_buffer,
                recv_buffer,
                window_scaling: b[0],
                timestamps: b[1],
                sack: b[2],
                ecn: b[3],
                delayed_ack_ms,
                nic_checksum_offload: b[4],
                nic_tso: b[5],
                nic_header_split: b[6],
                nic_pio: b[7],
                nodelay: b[8],
                zero_copy_receive: b[9],
                rack: b[10],
                tail_loss_probes: b[11],
                spurious_undo: b[12],
                keepalive: b[13],
                limited_transmit: b[14],
                max_ooo_ranges,
            },
        )
}

/// A fault's rate in a thousand frames: mostly a few percent, sometimes a tenth.
fn rate() -> impl Strategy<Value = u64> {
    prop_oneof![4 => 0..30u64, 1 => 30..100u64]
}

fn setup() -> impl Strategy<Value = Setup> {
    (
        prop_oneof![Just(576), Just(1500), Just(4352), Just(9000), Just(65535)],
        any::<bool>(),
        proptest::option::of((rate(), rate(), rate(), rate(), any::<u64>())),
        [host(), host()],
    )
        .prop_map(|(mtu, on_frame_queue, faults, hosts)| Setup {
            mtu,
            on_frame_queue,
            faults,
            hosts,
        })
}

fn host_config(setup: &Setup, h: &Host, seed: u64) -> HostConfig {
    let mut c = HostConfig::with_mtu(setup.mtu);
    c.stack.tuning = h.tuning;
    let tcp = &mut c.stack.tcp;
    tcp.send_buffer = h.send_buffer;
    tcp.recv_buffer = h.recv_buffer;
    tcp.window_scaling = h.window_scaling;
    tcp.timestamps = h.timestamps;
    tcp.sack = h.sack;
    tcp.ecn = h.ecn;
    tcp.delayed_ack = Duration::from_millis(h.delayed_ack_ms);
    tcp.msl = Duration::from_secs(1);
    tcp.rack = h.rack;
    tcp.tail_loss_probes = h.tail_loss_probes;
    tcp.spurious_undo = h.spurious_undo;
    tcp.limited_transmit = h.limited_transmit;
    tcp.max_ooo_ranges = h.max_ooo_ranges;
    if h.keepalive {
        // Probes after a second idle, twenty of them five seconds apart: a peer that the
        // link silences for longer (cut, or its frames held back with nothing sent after
        // them, its ARP requests lost) is given up on, as it should be. (With nine, a
        // link losing and holding back some 8% of frames each way silenced one of a
        // conversation's 18 connections for the 45 s that took, in one case of some
        // 60,000.)
        tcp.keepalive = Some(Duration::from_secs(1));
        tcp.keepalive_interval = KEEPALIVE_INTERVAL;
        tcp.keepalive_probes = 20;
    }
    c.nic.checksum_offload = if h.nic_checksum_offload {
        ChecksumOffload {
            ipv4_tx: true,
            ipv4_rx: true,
            l4_tx: true,
            l4_rx: true,
        }
    } else {
        ChecksumOffload::default()
    };
    c.nic.tso = h.nic_tso;
    c.nic.header_split = h.nic_header_split;
    c.nic.copy_mode = if h.nic_pio {
        CopyMode::Pio
    } else {
        CopyMode::Dma
    };
    if let Some((lose, duplicate, hold, corrupt, s)) = setup.faults {
        // Where RFC 1146's "no checksum" may be agreed (either end's elision on, over the
        // NICs' CRC link), corruption that passes the CRC reaches the reader by design
        // (tests/tcp.rs, `elision_is_negotiated_and_then_corruption_gets_through`).
        let elided = setup.hosts.iter().any(|h| h.tuning.checksum_elision);
        let corrupt = if elided { 0 } else { corrupt };
        c.nic.rx_faults = FaultConfig {
            seed: s ^ seed,
            drop: lose as f64 / 1000.0,
            duplicate: duplicate as f64 / 1000.0,
            reorder: hold as f64 / 1000.0,
            reorder_depth: 3,
            flip_passed: corrupt as f64 / 1000.0,
            ..FaultConfig::lossy(0)
        };
    }
    c
}

/// A link that can be cut: while `down`, nothing an end sends gets through.
#[derive(Clone, Default)]
struct Cut(Arc<AtomicBool>);

impl Tamper for Cut {
    fn send(&mut self, frame: PacketBuf, meta: TxMeta) -> Vec<(PacketBuf, TxMeta)> {
        if self.0.load(Ordering::Relaxed) {
            Vec::new()
        } else {
            vec![(frame, meta)]
        }
    }
}

/// The pair `setup` describes, the switch that cuts its link, and what the watch on each
/// end's wire found broken (`common::wire_rules`; not kept where frames are corrupted,
/// whose headers it would read as sent). With `PROBESTACK_CONVERSATION_PCAP=FILE` set,
/// each end's frames go to FILE.a and FILE.b as that end sends them (before the link's
/// faults) and receives them (after), for a failing case run alone.
fn pair(setup: &Setup) -> (Pair, Cut, Arc<Mutex<Vec<String>>>) {
    let [a, b] = [0, 1].map(|i| host_config(setup, &setup.hosts[i], i as u64));
    let pcap = std::env::var("PROBESTACK_CONVERSATION_PCAP").ok();
    let cut = Cut::default();
    let faults = setup.faults.filter(|_| setup.on_frame_queue);
    let corrupts = setup.faults.is_some_and(|f| f.3 > 0);
    let broken = Arc::new(Mutex::new(Vec::new()));
    let end = |name: &'static str, s: u64| {
        let (cut, pcap, broken) = (cut.clone(), pcap.clone(), broken.clone());
        move |dev: Box<dyn Device + Send>| -> Box<dyn Device + Send> {
            let dev: Box<dyn Device + Send> = match faults {
                Some((lose, duplicate, hold, corrupt, seed)) => {
                    let tamper = SeededFaults::new(seed ^ s, lose, duplicate, hold, corrupt);
                    Box::new(Tampered { dev, tamper })
                }
                None => dev,
            };
            let dev: Box<dyn Device + Send> = Box::new(Tampered { dev, tamper: cut });
            let dev: Box<dyn Device + Send> = if corrupts {
                dev
            } else {
                let names = if s == 1 { ["A", "B"] } else { ["B", "A"] };
                let tamper = Watch::new(names, broken);
                Box::new(Tampered { dev, tamper })
            };
            match pcap {
                Some(path) => {
                    let file = std::fs::File::create(format!("{path}.{name}")).unwrap();
                    Box::new(PcapWriter::new(dev, file, PcapMode::Both).unwrap())
                }
                None => dev,
            }
        }
    };
    let (end_a, end_b) = (end("a", 1), end("b", 2));
    let mut p = if setup.on_frame_queue {
        Pair::on_frame_queue_with(a, b, |q| end_a(Box::new(q)), |q| end_b(Box::new(q))).unwrap()
    } else {
        Pair::with_devices(a, b, |n| end_a(Box::new(n)), |n| end_b(Box::new(n))).unwrap()
    };
    // ARP has no checksum. On the NICs' link, which corrupts frames past the CRC here, a
    // reply answered wrong twice in a row (asked again on a connection's negative advice,
    // and answered wrong again) leaves a wrong link address until it expires a minute
    // later, and a connect or keepalive may give up meanwhile, as in any stack that learns
    // addresses from ARP alone; so there the hosts know each other's. (The first such
    // case found keepalive giving no negative advice: tests/tcp.rs,
    // `a_stale_link_address_is_asked_again_after_three_keepalive_probes`.)
    let corrupts = setup.faults.is_some_and(|f| f.3 > 0);
    let elided = setup.hosts.iter().any(|h| h.tuning.checksum_elision);
    if corrupts && !setup.on_frame_queue && !elided {
        p.a.add_static_arp(0, ADDR_B, MAC_B);
        p.b.add_static_arp(0, ADDR_A, MAC_A);
    }
    (p, cut, broken)
}

/// One connection between the two applications: its socket on each side, and what each
/// of its streams holds so far (streams[i]: what side i writes and the other reads).
struct Conn {
    handles: [TcpHandle; 2],
    /// A's port.
    port: u16,
    streams: [Stream; 2],
    /// Whether each side reads this connection zero-copy.
    zero_copy: [bool; 2],
    /// The side whose application closed or aborted the connection ([`Act::End`]), its
    /// handle gone: the other side, the survivor, may then be reset.
    ended: Option<usize>,
    /// Whether the survivor's calls have told it the connection is over (reset, or timed
    /// out where the reset was lost): it makes no more calls but its close.
    over: bool,
    /// Whether the end sent no RST: an ABORT in CLOSING, LAST-ACK or TIME-WAIT only deletes
    /// the connection (RFC 9293 §3.10.5), so a survivor left in FIN-WAIT-2 with nothing to
    /// send hears nothing, and waits for the rest of a stream that will not come.
    quiet: bool,
}

impl Conn {
    /// Whether the conversation on this connection is over once both applications have
    /// shut down: each side has read to the end of the other's stream, or, once one side
    /// ended the connection, the survivor has read to the end or been told it is over.
    /// Where the link loses frames the RST may be lost, and a quiet abort sends none: a
    /// survivor that has sent its FIN and had it acknowledged has nothing more to send,
    /// so nothing draws a RST, and it waits in FIN-WAIT-2 for good (as in any TCP; its
    /// close ends it).
    fn finished(&self, p: &mut Pair, faults: bool) -> bool {
        match self.ended {
            None => self.streams.iter().all(|s| s.eof_seen),
            Some(side) => {
                let survivor = stack(p, 1 - side).tcp_state(self.handles[1 - side]);
                self.over
                    || self.streams[side].eof_seen
                    || (faults || self.quiet) && survivor == Ok(State::FinWait2)
            }
        }
    }
}

/// The two applications: their connections, how they read, and the loans they made.
struct Apps {
    conns: Vec<Conn>,
    listener: TcpHandle,
    cut: Cut,
    loans: Vec<Loan>,
}

fn stack(p: &mut Pair, side: usize) -> &mut probestack::stack::Stack {
    if side == 0 {
        &mut p.a
    } else {
        &mut p.b
    }
}

impl Apps {
    /// A makes `n` connections to B's listener at once ([`open`]). A backlog under `n`
    /// makes B answer the SYNs past it with SYN cookies (`TcpConfig::syn_cookies`), so
    /// some connections are made from cookies, without the options a cookie cannot carry.
    fn connect(
        p: &mut Pair,
        cut: Cut,
        setup: &Setup,
        n: usize,
        backlog: usize,
    ) -> Result<Apps, TestCaseError> {
        let listener = p.b.tcp_listen((ADDR_B, PORT), backlog).unwrap();
        let conns = open(p, setup, listener, &vec![0; n], backlog < n)?;
        Ok(Apps {
            conns,
            listener,
            cut,
            loans: Vec::new(),
        })
    }

    /// A's application opens one more connection ([`Act::Open`]), at most 24 in all.
    fn open(&mut self, p: &mut Pair, setup: &Setup, reuse: bool) -> Result<(), TestCaseError> {
        if self.conns.len() >= 24 {
            return Ok(());
        }
        // An old port only where the link delivers no segment late (it neither holds
        // frames back nor duplicates them): a connection aborted, or reset by its close,
        // skips TIME-WAIT, and a new one from its port a moment later would take the old
        // one's late segments for its own where their sequence numbers fall in its window
        // (RFC 9293 §3.4.1's hazard, which TIME-WAIT's 2·MSL guards against; the link's
        // held frames have no MSL). Found by the thirty-sixth session's hunt.
        let late = setup.faults.is_some_and(|f| f.1 > 0 || f.2 > 0);
        let ended = self.conns.iter().rev().find(|c| c.ended == Some(0));
        let port = ended.filter(|_| reuse && !late).map_or(0, |c| c.port);
        if port != 0 {
            // A millisecond on: the clock in the initial sequence numbers ticks every
            // 4 µs (RFC 9293 §3.4.1, RFC 6528), and the same ports a moment later
            // would draw the same numbers at both ends, as in any stack; the virtual
            // clock stands still between steps.
            p.run_for(Duration::from_millis(1));
        }
        let conns = open(p, setup, self.listener, &[port], false)?;
        self.conns.extend(conns);
        Ok(())
    }
}

/// A's application connects to B's `listener` from each of `ports` (0: an ephemeral
/// one; a port still held, an ephemeral one), all at once, then B accepts them; each
/// side sets its socket options. With `hello` (a backlog under the connections made, so
/// that some come from SYN cookies), A writes the first byte of each stream at once (a
/// cookie's ACK that finds the accept queue full is dropped, as Linux does, and only A's
/// data tries again).
fn open(
    p: &mut Pair,
    setup: &Setup,
    listener: TcpHandle,
    ports: &[u16],
    hello: bool,
) -> Result<Vec<Conn>, TestCaseError> {
    let connect = |p: &mut Pair, port: u16| {
        let config = p.a.tcp_default_config();
        let from = (Ipv4Address::UNSPECIFIED, port);
        match p.a.tcp_connect_from((ADDR_B, PORT), from, config, false) {
            Err(TcpError::AddrInUse) => p.a.tcp_connect((ADDR_B, PORT)),
            r => r,
        }
        .unwrap()
    };
    let n = ports.len();
    let mut clients: Vec<TcpHandle> = ports.iter().map(|&port| connect(p, port)).collect();
    let mut accepted = Vec::new();
    let faulty = setup.faults.is_some();
    let mut greeted = vec![!hello; n];
    // A SYN and a SYN-ACK lost in a row take their timeouts of 1 and 2 s.
    let connected = p.run_until(Duration::from_secs(600), |p| {
        while let Ok(s) = p.b.tcp_accept(listener) {
            accepted.push(s);
        }
        for (k, c) in clients.iter_mut().enumerate() {
            // On a faulty link every ACK of A's for B's SYN-ACKs may be lost, and B
            // then gives the half-open connection up (with a RST, which A takes): the
            // application connects again, as one would. (Found in the thirty-sixth
            // session: 17 connections on a link losing 8% of frames and corrupting 5%,
            // five ACKs in a row lost.) On a clean link no connect fails.
            if faulty && p.a.tcp_state(*c) == Ok(State::Closed) {
                p.a.tcp_close(*c).unwrap();
                *c = connect(p, 0);
                greeted[k] = !hello;
            }
            if !greeted[k] && p.a.tcp_state(*c) == Ok(State::Established) {
                greeted[k] = p.a.tcp_send(*c, &bytes(0, 0, 1)) == Ok(1);
            }
        }
        accepted.len() == n
            && clients
                .iter()
                .all(|&c| p.a.tcp_state(c) == Ok(State::Established))
    });
    prop_assert!(connected, "{} of {n} connections made", accepted.len());
    let mut conns = Vec::new();
    for c in clients {
        let port = p.a.tcp_local_addr(c).unwrap().1;
        let s = accepted
            .iter()
            .copied()
            .find(|&s| {
                p.b.tcp_endpoints(s)
                    .is_ok_and(|(_, remote)| remote.1 == port)
            })
            .unwrap();
        let handles = [c, s];
        for (side, h) in setup.hosts.iter().enumerate() {
            let st = stack(p, side);
            st.tcp_set_nodelay(handles[side], h.nodelay).unwrap();
            st.tcp_set_zero_copy_receive(handles[side], h.zero_copy_receive)
                .unwrap();
        }
        let mut streams: [Stream; 2] = Default::default();
        streams[0].written = usize::from(hello);
        let zero_copy = [0, 1].map(|i| setup.hosts[i].zero_copy_receive);
        conns.push(Conn {
            handles,
            port,
            streams,
            zero_copy,
            ended: None,
            over: false,
            quiet: false,
        });
    }
    Ok(conns)
}

impl Apps {
    fn write(
        &mut self,
        p: &mut Pair,
        k: usize,
        side: usize,
        len: usize,
        how: How,
    ) -> Result<(), TestCaseError> {
        let h = self.conns[k].handles[side];
        let data = bytes(side, self.conns[k].streams[side].written, len);
        let shut = self.conns[k].streams[side].shut;
        if self.conns[k].ended.is_some() {
            return self.survivor_write(p, k, side, &data);
        }
        let n = stack_write(
            stack(p, side),
            h,
            data,
            how,
            shut,
            SIDES[side],
            &mut self.loans,
        )?;
        self.conns[k].streams[side].written += n;
        Ok(())
    }

    /// A copied write by the survivor of ended connection `k`: taken (it may never
    /// arrive), refused as the model allows, or the news that the connection is over.
    fn survivor_write(
        &mut self,
        p: &mut Pair,
        k: usize,
        side: usize,
        data: &[u8],
    ) -> Result<(), TestCaseError> {
        if self.conns[k].over {
            return Ok(());
        }
        let shut = self.conns[k].streams[side].shut;
        match stack(p, side).tcp_send(self.conns[k].handles[side], data) {
            Ok(n) => {
                prop_assert!(!shut, "{} wrote after its shutdown", SIDES[side]);
                self.conns[k].streams[side].written += n;
            }
            Err(TcpError::WouldBlock) => prop_assert!(!shut),
            Err(TcpError::Shutdown) => prop_assert!(shut),
            Err(e) if ends_survivor(&e) => self.conns[k].over = true,
            Err(e) => return Err(TestCaseError::fail(format!("{} write: {e}", SIDES[side]))),
        }
        Ok(())
    }

    /// `side`'s application ends connection `k` (closes or aborts its socket), unless
    /// the connection is ended already.
    fn end(
        &mut self,
        p: &mut Pair,
        k: usize,
        side: usize,
        abort: bool,
    ) -> Result<(), TestCaseError> {
        let k = k % self.conns.len();
        if self.conns[k].ended.is_some() {
            return Ok(());
        }
        let r = stack_end_connection(stack(p, side), self.conns[k].handles[side], abort);
        prop_assert!(r.is_ok(), "{} end (abort: {abort}): {r:?}", SIDES[side]);
        self.conns[k].ended = Some(side);
        self.conns[k].quiet = r == Ok(true);
        // A FIN, if one goes, follows everything written; a RST is no end of stream.
        self.conns[k].streams[side].shut |= !abort;
        p.settle();
        Ok(())
    }

    /// Reads up to `max` bytes on `side`; whether it got anything new (data or the end).
    fn read(
        &mut self,
        p: &mut Pair,
        k: usize,
        side: usize,
        max: usize,
    ) -> Result<bool, TestCaseError> {
        let h = self.conns[k].handles[side];
        match self.conns[k].ended {
            Some(s) if s == side => return Ok(false),
            Some(_) if self.conns[k].over => return Ok(false),
            _ => {}
        }
        let got = stack_read(stack(p, side), h, max, self.conns[k].zero_copy[side]);
        let from = 1 - side;
        let stream = &mut self.conns[k].streams[from];
        match got {
            Ok(got) => stream.take(got, max, SIDES[side], from, SIDES[from]),
            Err(TcpError::WouldBlock) => Ok(false),
            Err(e) if self.conns[k].ended.is_some() && ends_survivor(&e) => {
                self.conns[k].over = true;
                Ok(false)
            }
            Err(e) => Err(TestCaseError::fail(format!(
                "{} read: {e} ({:?})",
                SIDES[side],
                stack(p, side).tcp_stats(h)
            ))),
        }
    }

    fn shutdown(&mut self, p: &mut Pair, k: usize, side: usize) -> Result<(), TestCaseError> {
        match self.conns[k].ended {
            Some(s) if s == side => return Ok(()),
            Some(_) if self.conns[k].over => return Ok(()),
            _ => {}
        }
        let r = stack(p, side).tcp_shutdown(self.conns[k].handles[side]);
        match r {
            Err(e) if self.conns[k].ended.is_some() && ends_survivor(&e) => {
                self.conns[k].over = true;
            }
            r => prop_assert!(r.is_ok(), "{} shutdown: {r:?}", SIDES[side]),
        }
        self.conns[k].streams[side].shut = true;
        Ok(())
    }

    /// Runs `step` on connection `k` (of those open, counted round).
    fn run(&mut self, p: &mut Pair, k: usize, step: Step) -> Result<(), TestCaseError> {
        let k = k % self.conns.len();
        let ended = self.conns[k].ended;
        match step {
            // The ended side's application has no socket; a stream to or from it would
            // never be read whole; options of a socket that may be reset do not matter.
            Step::Write { side, .. } | Step::Options { side, .. } if ended == Some(side) => {}
            Step::Stream { .. } | Step::Options { .. } if ended.is_some() => {}
            Step::Write { side, len, how } => self.write(p, k, side, len, how)?,
            Step::Read { side, max } => {
                self.read(p, k, side, max)?;
            }
            Step::Wait { ms } => p.run_for(Duration::from_millis(ms)),
            Step::Shutdown { side } => {
                if !self.conns[k].streams[side].shut {
                    self.shutdown(p, k, side)?;
                }
            }
            Step::Stream { side, len } => self.stream(p, k, side, len)?,
            Step::Cut { ms } => {
                // Then up for a keepalive interval, the applications idle meanwhile (so
                // that a probe or a retransmission gets through before another cut:
                // cuts in a row, keepalive's 101 s of patience exhausted, would end a
                // connection as they should).
                self.cut.0.store(true, Ordering::Relaxed);
                p.run_for(Duration::from_millis(ms));
                self.cut.0.store(false, Ordering::Relaxed);
                p.run_for(KEEPALIVE_INTERVAL);
            }
            Step::Options {
                side,
                nodelay,
                zero_copy,
            } => {
                let h = self.conns[k].handles[side];
                let st = stack(p, side);
                st.tcp_set_nodelay(h, nodelay).unwrap();
                st.tcp_set_zero_copy_receive(h, zero_copy).unwrap();
                self.conns[k].zero_copy[side] = zero_copy;
            }
        }
        p.settle();
        Ok(())
    }

    /// `side` writes `len` more bytes (copied, 64 KiB a call) while the other side reads
    /// everything that arrives, until it has read them all (nothing after a shutdown).
    fn stream(
        &mut self,
        p: &mut Pair,
        k: usize,
        side: usize,
        len: usize,
    ) -> Result<(), TestCaseError> {
        if self.conns[k].streams[side].shut {
            return Ok(());
        }
        let target = self.conns[k].streams[side].written + len;
        let mut failed = None;
        let done = p.run_until(PATIENCE, |p| {
            let mut turn = || -> Result<bool, TestCaseError> {
                loop {
                    let before = self.conns[k].streams[side].written;
                    if before == target {
                        break;
                    }
                    self.write(p, k, side, (target - before).min(64 << 10), How::Copy)?;
                    if self.conns[k].streams[side].written == before {
                        break;
                    }
                }
                while self.read(p, k, 1 - side, 256 << 10)? {}
                Ok(self.conns[k].streams[side].read.len() == target)
            };
            turn().unwrap_or_else(|e| {
                failed = Some(e);
                true
            })
        });
        if let Some(e) = failed {
            return Err(e);
        }
        let s = &self.conns[k].streams[side];
        prop_assert!(
            done,
            "{} read {} of the {} bytes {} wrote; A {:?}, B {:?}",
            SIDES[1 - side],
            s.read.len(),
            s.written,
            SIDES[side],
            p.a.tcp_stats(self.conns[k].handles[0]),
            p.b.tcp_stats(self.conns[k].handles[1]),
        );
        Ok(())
    }

    /// Both sides of every connection shut down and read to the end of the stream, then
    /// close: every connection must go, and every loan come back.
    fn finish(
        mut self,
        p: &mut Pair,
        faults: bool,
        holds_frames: bool,
    ) -> Result<(), TestCaseError> {
        for k in 0..self.conns.len() {
            for side in 0..2 {
                if !self.conns[k].streams[side].shut {
                    self.shutdown(p, k, side)?;
                }
            }
        }
        let ended = self.conns.iter().any(|c| c.ended.is_some());
        let mut failed = None;
        // Whether it came to an end is asked of each connection below.
        let _ = p.run_until(PATIENCE, |p| {
            for k in 0..self.conns.len() {
                for side in 0..2 {
                    loop {
                        match self.read(p, k, side, 100_000) {
                            Ok(true) => continue,
                            Ok(false) => break,
                            Err(e) => {
                                failed = Some(e);
                                return true;
                            }
                        }
                    }
                }
            }
            self.conns.iter().all(|c| c.finished(p, faults))
        });
        if let Some(e) = failed {
            return Err(e);
        }
        for (k, c) in self.conns.iter().enumerate() {
            let [a, b] = &c.streams;
            let states = [0, 1].map(|side| stack(p, side).tcp_state(c.handles[side]));
            prop_assert!(
                c.finished(p, faults),
                "connection {k} not ended after both shut down: B read {} of A's {} bytes (end seen: {}), A {} of B's {} ({}); ended by {:?} (survivor told: {}); states {:?}; A {:?}, B {:?}",
                a.read.len(),
                a.written,
                a.eof_seen,
                b.read.len(),
                b.written,
                b.eof_seen,
                c.ended.map(|side| SIDES[side]),
                c.over,
                states,
                p.a.tcp_stats(c.handles[0]),
                p.b.tcp_stats(c.handles[1]),
            );
        }
        for c in &self.conns {
            for side in (0..2).filter(|&side| c.ended != Some(side)) {
                stack(p, side).tcp_close(c.handles[side]).unwrap();
            }
        }
        p.b.tcp_close(self.listener).unwrap();
        // TIME-WAIT is 2 s here; a lost last ACK makes LAST-ACK retransmit its FIN.
        p.run_for(PATIENCE);
        for (side, name) in SIDES.iter().enumerate() {
            let st = stack(p, side);
            prop_assert_eq!(st.tcp_connection_count(), 0, "{} keeps a connection", name);
            if !faults && !ended {
                let resets = st.ledger().counters().get(Counter::TcpResetsOut);
                prop_assert_eq!(resets, 0, "{} sent resets on a clean link", name);
            }
        }
        // The frame queue's seeded faults hold a frame back until enough others have
        // gone, so at the end of a conversation one may stay held, slices of a loan in it.
        if !holds_frames {
            for (i, loan) in self.loans.iter().enumerate() {
                prop_assert!(loan.is_complete(), "loan {i} is still held");
            }
        }
        Ok(())
    }
}

/// Runs `steps` between the two applications of `setup` on one connection, then
/// finishes the conversation.
fn converse(setup: &Setup, steps: &[Step]) -> Result<(), TestCaseError> {
    let steps: Vec<(usize, Step)> = steps.iter().map(|&s| (0, s)).collect();
    converse_on(setup, 1, 1, &steps)
}

/// Runs `steps`, each on the connection its number names (counted round), between the
/// two applications of `setup` with `connections` open (made through a listener with
/// `backlog`), then finishes the conversation.
fn converse_on(
    setup: &Setup,
    connections: usize,
    backlog: usize,
    acts: &[(usize, impl Into<Act> + Copy)],
) -> Result<(), TestCaseError> {
    let (mut p, cut, broken) = pair(setup);
    let mut apps = Apps::connect(&mut p, cut, setup, connections, backlog)?;
    for &(k, act) in acts {
        match act.into() {
            Act::Do(step) => apps.run(&mut p, k, step)?,
            Act::End { side, abort } => apps.end(&mut p, k, side, abort)?,
            Act::Open { reuse } => apps.open(&mut p, setup, reuse)?,
        }
    }
    let faults = setup.faults.is_some();
    apps.finish(&mut p, faults, faults && setup.on_frame_queue)?;
    let broken = broken.lock().unwrap();
    prop_assert!(broken.is_empty(), "rules broken on the wire: {broken:#?}");
    Ok(())
}

proptest! {
    #![proptest_config(common::conversation::config(256))]

    /// Mostly one connection; sometimes a few; sometimes more than 16, where the socket
    /// table keeps its connections' timers in a queue (`tcp::timer_queue`). On a clean
    /// link the listener's backlog may be short of them by up to half, so that some are
    /// made from SYN cookies. (On a faulty link a cookie's ACK may be lost, and A, sending
    /// nothing yet, would never tell B of the connection it holds: SYN cookies' known
    /// weakness. A backlog much shorter than the connections made at once turns the
    /// cookies' ACKs away in rounds, all A's retransmissions in step, until the cookies
    /// expire, as Linux's would.)
    #[test]
    fn any_conversation_delivers_both_streams_whole_and_in_order(
        setup in setup(),
        connections in prop_oneof![6 => Just(1usize), 2 => 2..5usize, 1 => 17..21usize],
        shortfall in 0..11usize,
        acts in proptest::collection::vec((0..32usize, act(3000, 1 << 20, 10_000, true)), 0..60),
    ) {
        let backlog = if setup.faults.is_none() {
            connections - shortfall.min(connections / 2)
        } else {
            connections
        };
        converse_on(&setup, connections, backlog, &acts)?;
    }
}

// The conversations the property found failing, each the minimal case proptest shrank
// it to, kept as tests of their own (each fails with its fix undone). Two more have
// directed tests instead, since the fixes here changed the frames their cases made:
// tests/tcp_states.rs `a_window_shut_with_data_in_flight_is_probed_and_kept_open` and
// tests/tcp.rs `keepalive_leaves_a_connection_with_data_waiting_alone`.

/// A host with every switch (`bsd()`) and option off, `send_buffer`
/// and `recv_buffer` bytes of buffers, ACKs delayed `delayed_ack_ms`.
fn plain(send_buffer: usize, recv_buffer: usize, delayed_ack_ms: u64) -> Host {
    Host {
        tuning: Tuning::bsd(),
        send_buffer,
        recv_buffer,
        window_scaling: false,
        timestamps: false,
        sack: false,
        ecn: false,
        delayed_ack_ms,
        nic_checksum_offload: false,
        nic_tso: false,
        nic_header_split: false,
        nic_pio: false,
        nodelay: false,
        zero_copy_receive: false,
        rack: false,
        tail_loss_probes: false,
        spurious_undo: false,
        keepalive: false,
        limited_transmit: false,
        max_ooo_ranges: 32,
    }
}

/// Runs `acts`, all on one connection, between the applications of `setup`.
fn converse_acts(setup: &Setup, acts: &[Act]) {
    let acts: Vec<(usize, Act)> = acts.iter().map(|&a| (0, a)).collect();
    if let Err(e) = converse_on(setup, 1, 1, &acts) {
        panic!("{e}");
    }
}

fn regression(
    mtu: usize,
    on_frame_queue: bool,
    faults: Option<(u64, u64, u64, u64, u64)>,
    hosts: [Host; 2],
    steps: &[Step],
) {
    let setup = Setup {
        mtu,
        on_frame_queue,
        faults,
        hosts,
    };
    if let Err(e) = converse(&setup, steps) {
        panic!("{e}");
    }
}

/// B shuts down, then A writes and shuts down too. B's reads opened its window after A's
/// FIN and B sent a window update, which A, closed by then, answered with a RST.
#[test]
fn no_window_update_follows_the_peers_fin() {
    let h = plain(4096, 4096, 0);
    regression(
        576,
        false,
        None,
        [h.clone(), h],
        &[
            Step::Shutdown { side: 1 },
            Step::Write {
                side: 0,
                len: 1071,
                how: How::Copy,
            },
        ],
    );
}

/// After both shut down and the close completed, a write failed as "not connected",
/// where a socket shut down for sending says so.
#[test]
fn a_write_after_a_completed_close_is_refused_as_after_shutdown() {
    let h = plain(4096, 4096, 0);
    regression(
        576,
        true,
        None,
        [h.clone(), h],
        &[
            Step::Shutdown { side: 1 },
            Step::Shutdown { side: 0 },
            Step::Write {
                side: 0,
                len: 1,
                how: How::Copy,
            },
        ],
    );
}

/// B's last 977 bytes went by the persist timer's override into a window under a
/// segment; lost, their retransmission after the timeout was held back by silly-window
/// avoidance, with no persist timer running to override it, until B timed out.
#[test]
fn data_a_timeout_took_back_goes_again_into_a_window_under_a_segment() {
    let a = Host {
        tuning: Tuning {
            fused_copy_checksum: true,
            header_prediction: true,
            tcp_send_by_reference: true,
            tcp_verify_on_read: true,
            ..plain(0, 0, 0).tuning
        },
        ..plain(65536, 4096, 200)
    };
    let b = plain(16384, 65536, 40);
    regression(
        1500,
        true,
        Some((23, 9, 4, 12, 14088140592950397337)),
        [a, b],
        &[
            Step::Write {
                side: 1,
                len: 1659,
                how: How::Loan,
            },
            Step::Write {
                side: 1,
                len: 702,
                how: How::Copy,
            },
            Step::Write {
                side: 1,
                len: 1736,
                how: How::Copy,
            },
            Step::Write {
                side: 0,
                len: 24821,
                how: How::Copy,
            },
            Step::Wait { ms: 200 },
            Step::Write {
                side: 0,
                len: 1,
                how: How::Copy,
            },
            Step::Shutdown { side: 0 },
            Step::Write {
                side: 0,
                len: 1,
                how: How::Copy,
            },
        ],
    );
}

/// Both windows shut, both ends probing: each took the other's probe byte into space it
/// had not advertised, while neither counted its own probe in SND.NXT, so each one's
/// later segments lay one byte below the other's RCV.NXT and were dropped as old, ACKs
/// and FINs alike, for good.
#[test]
fn two_ends_probing_each_others_shut_window_keep_their_acks() {
    let h = plain(16384, 4096, 200);
    regression(
        65535,
        false,
        Some((0, 0, 0, 0, 2669564885305748)),
        [h.clone(), h],
        &[
            Step::Write {
                side: 0,
                len: 4097,
                how: How::Copy,
            },
            Step::Write {
                side: 1,
                len: 4097,
                how: How::Copy,
            },
            Step::Wait { ms: 1 },
            Step::Read { side: 1, max: 1 },
            Step::Read { side: 0, max: 1 },
            Step::Wait { ms: 600 },
        ],
    );
}

/// With A's out-of-order queue at its one range, the retransmitted segment at RCV.NXT
/// (in order, but not touching the queued range) was refused as a range too many, every
/// time, until B gave up and reset the connection.
#[test]
fn an_in_order_segment_is_taken_with_the_out_of_order_queue_full() {
    let a = Host {
        max_ooo_ranges: 1,
        ..plain(4096, 16384, 0)
    };
    let b = Host {
        max_ooo_ranges: 1,
        ..plain(16384, 4096, 0)
    };
    regression(
        576,
        false,
        Some((3, 33, 13, 0, 11014528225055658213)),
        [a, b],
        &[Step::Stream {
            side: 1,
            len: 160033,
        }],
    );
}

/// Both ends retransmitting after timeouts, SND.NXT taken back on both: each one's pure
/// ACKs carried that SND.NXT, below what the other had received, and were dropped as
/// old, so neither learned that its data had arrived; they retransmitted at each other
/// until one gave up.
#[test]
fn two_ends_retransmitting_after_timeouts_keep_their_acks() {
    let h = Host {
        tuning: Tuning {
            tcp_output_per_batch: true,
            ..plain(0, 0, 0).tuning
        },
        max_ooo_ranges: 3,
        ..plain(16384, 4096, 40)
    };
    let b = Host {
        recv_buffer: 16384,
        ..h.clone()
    };
    regression(
        576,
        false,
        Some((88, 0, 12, 0, 15941163567811887476)),
        [h, b],
        &[
            Step::Write {
                side: 0,
                len: 7505,
                how: How::Copy,
            },
            Step::Wait { ms: 201 },
            Step::Read { side: 1, max: 1072 },
            Step::Write {
                side: 0,
                len: 2,
                how: How::Copy,
            },
            Step::Write {
                side: 0,
                len: 1609,
                how: How::Copy,
            },
            Step::Read { side: 1, max: 1072 },
            Step::Stream {
                side: 1,
                len: 983562,
            },
            Step::Write {
                side: 1,
                len: 13401,
                how: How::Copy,
            },
            Step::Wait { ms: 1 },
            Step::Read { side: 0, max: 1264 },
            Step::Write {
                side: 0,
                len: 15010,
                how: How::Copy,
            },
            Step::Read { side: 1, max: 1072 },
        ],
    );
}

/// A's last write is loaned (zero-copy) and goes by reference to B's NIC, which does PIO:
/// the NIC copied the frame out and kept the emptied frame's block for its next receive,
/// fragments and all, so the loan stayed held after both connections were gone. A NIC now
/// drops a kept frame's fragments (`MemoryNic`'s `reclaim`).
#[test]
fn a_loan_is_not_held_by_a_nic_that_emptied_its_last_frame() {
    let a = Host {
        nodelay: true,
        keepalive: true,
        max_ooo_ranges: 1,
        ..plain(16384, 16384, 40)
    };
    let b = Host {
        nic_pio: true,
        max_ooo_ranges: 1,
        ..plain(4096, 1 << 20, 0)
    };
    let setup = Setup {
        mtu: 576,
        on_frame_queue: false,
        faults: Some((9, 13, 17, 27, 1899185615442801809)),
        hosts: [a, b],
    };
    let write = |side, len, how| Step::Write { side, len, how };
    let cut = |ms| Step::Cut { ms };
    let wait = |ms| Step::Wait { ms };
    let steps = [
        Step::Stream {
            side: 0,
            len: 307714,
        },
        write(1, 1, How::Copy),
        Step::Stream {
            side: 0,
            len: 507665,
        },
        write(1, 3753, How::Copy),
        cut(1001),
        write(0, 8040, How::Copy),
        cut(3930),
        Step::Read { side: 0, max: 1072 },
        cut(471),
        Step::Shutdown { side: 1 },
        Step::Read { side: 1, max: 1 },
        cut(8201),
        write(0, 1609, How::Copy),
        wait(2001),
        write(0, 5897, How::Copy),
        cut(1822),
        wait(2180),
        write(0, 41, How::Loan),
        wait(200),
    ];
    if let Err(e) = converse(&setup, &steps) {
        panic!("{e}");
    }
}

/// The watch on the wire's first find (`common::wire_rules`): A's first write of 65,537
/// bytes went whole into B's window of 65,535, which A had read from B's SYN-ACK scaled
/// by B's shift of 1, where a SYN's window is never scaled (RFC 7323 §2.2). B took what
/// its buffer held and A resent the rest, so the streams alone did not show it.
#[test]
fn the_window_of_a_syn_ack_is_not_scaled() {
    let a = Host {
        window_scaling: true,
        max_ooo_ranges: 1,
        ..plain(1 << 20, 4096, 0)
    };
    let b = Host {
        window_scaling: true,
        max_ooo_ranges: 1,
        ..plain(4096, 65536, 0)
    };
    regression(
        65535,
        false,
        None,
        [a, b],
        &[Step::Write {
            side: 0,
            len: 65537,
            how: How::Copy,
        }],
    );
}

/// The watch on the wire's second find: B resent a segment older than A's SND.WL1
/// carrying its newest ACK and a window shrunk to 344 bytes; A took the ACK but, by RFC
/// 9293's SND.WL1 test alone, not the window, so SND.UNA + SND.WND ran past B's right
/// edge and A sent 2 bytes over it. The window now comes with every ACK that advances
/// SND.UNA (as Linux's `tcp_may_update_window` has it).
#[test]
fn the_window_of_a_resent_segment_with_a_new_ack_is_taken() {
    let a = Host {
        max_ooo_ranges: 1,
        ..plain(65536, 65536, 40)
    };
    let b = Host {
        max_ooo_ranges: 1,
        ..plain(65536, 4096, 0)
    };
    regression(
        576,
        true,
        Some((1, 0, 30, 0, 8038772821606705240)),
        [a, b],
        &[
            Step::Write {
                side: 1,
                len: 55209,
                how: How::Copy,
            },
            Step::Stream {
                side: 0,
                len: 11602,
            },
        ],
    );
}

/// B, reading zero-copy from a 1 MiB buffer with no window scaling (a field of at most
/// 65,535), sent a "window update" after each read that offered the same 65,535: to A,
/// duplicate ACKs, three of which fast-retransmitted A's FIN; B acknowledged the copy
/// too, and that late ACK reached A closed, which answered it with a RST on a clean
/// link. A read now asks for an update only for more window than the field already says.
#[test]
fn a_read_sends_no_window_update_the_field_cannot_say() {
    let a = Host {
        max_ooo_ranges: 1,
        ..plain(65536, 4096, 0)
    };
    let mut b = Host {
        max_ooo_ranges: 1,
        zero_copy_receive: true,
        ..plain(4096, 1 << 20, 40)
    };
    b.tuning.tcp_send_by_reference = true;
    let setup = Setup {
        mtu: 9000,
        on_frame_queue: true,
        faults: None,
        hosts: [a, b],
    };
    let steps = [
        (
            21,
            Step::Write {
                side: 0,
                len: 1,
                how: How::Loan,
            },
        ),
        (
            3,
            Step::Write {
                side: 0,
                len: 8960,
                how: How::Copy,
            },
        ),
        (3, Step::Shutdown { side: 1 }),
        (
            3,
            Step::Write {
                side: 0,
                len: 1,
                how: How::Copy,
            },
        ),
        (0, Step::Cut { ms: 40 }),
        (
            0,
            Step::Write {
                side: 0,
                len: 8961,
                how: How::Loan,
            },
        ),
    ];
    if let Err(e) = converse_on(&setup, 3, 3, &steps) {
        panic!("{e}");
    }
}

/// B, with a 1 MiB buffer (window shift 5), answered a keepalive probe that reached it in
/// SYN-RECEIVED with an ACK offering the whole MiB, then sent its SYN-ACK again, which
/// pulled B's record of the edge it had offered back to the SYN-ACK's unscaled 65,535.
/// The windows after (each rounded down to 32 bytes from the edge on record) moved the
/// edge left by 62 bytes from the one the ACK had offered. Found by the watch on the wire
/// in the thirty-third session.
#[test]
fn a_syn_ack_sent_again_keeps_the_edge_an_earlier_ack_offered() {
    let a = Host {
        window_scaling: true,
        keepalive: true,
        max_ooo_ranges: 1,
        ..plain(4096, 4096, 0)
    };
    let b = Host {
        window_scaling: true,
        max_ooo_ranges: 1,
        ..plain(4096, 1 << 20, 0)
    };
    let setup = Setup {
        mtu: 576,
        on_frame_queue: true,
        faults: Some((0, 0, 7, 0, 7455779948663113123)),
        hosts: [a, b],
    };
    let steps = [(
        20,
        Step::Write {
            side: 0,
            len: 1,
            how: How::Copy,
        },
    )];
    if let Err(e) = converse_on(&setup, 3, 3, &steps) {
        panic!("{e}");
    }
}

/// A shuts down at once on a link that holds back 47% of frames. A's first SYN, held
/// back, reaches B after the connection closed there (B's FIN acknowledged, A's too): B's
/// listener takes it for a new connection and answers with a SYN-ACK, which acknowledges
/// A's SYN again; A, in TIME-WAIT, answers with its ACK, and B resets the half-open
/// connection (RFC 9293 §3.5, Figure 9, the old duplicate SYN). The watch took the
/// SYN-ACK for B's ACK going back; it now begins a connection anew at a SYN-ACK sent
/// after the connection closed on the sender's side (found by the thirty-fifth session's
/// hunt; likely the thirty-fourth's lost case).
#[test]
fn acks_do_not_go_back_on_a_reordering_link_after_a_shutdown() {
    let a = Host {
        max_ooo_ranges: 1,
        ..plain(4096, 4096, 40)
    };
    let b = Host {
        max_ooo_ranges: 1,
        ..plain(4096, 4096, 0)
    };
    regression(
        576,
        true,
        Some((0, 0, 47, 0, 15195375035782452450)),
        [a, b],
        &[Step::Shutdown { side: 0 }],
    );
}

/// B writes a byte more than A's window, and the link is cut again and again. B's
/// probes into the shut window went unanswered through the first cut (five in a row);
/// then A's read opened the window, and B's byte, sent at once, was lost to the next cut
/// and timed out seven times; the five were still counted, so B gave up at the twelfth.
/// The count of unanswered probes was to end when the window opened with nothing in
/// flight, but it asked whether SND.MAX was acknowledged, which the probes' own byte
/// always passes. (Found by the thirty-fifth session's hunt; the bug was older than it.)
#[test]
fn a_window_probed_across_cuts_is_not_given_up() {
    let a = Host {
        max_ooo_ranges: 1,
        ..plain(4096, 4096, 0)
    };
    let b = Host {
        max_ooo_ranges: 1,
        ..plain(16384, 4096, 0)
    };
    let cut = |ms| Step::Cut { ms };
    regression(
        4352,
        false,
        Some((0, 0, 0, 0, 0)),
        [a, b],
        &[
            Step::Write {
                side: 1,
                len: 4097,
                how: How::Copy,
            },
            Step::Wait { ms: 1 },
            cut(8200),
            Step::Read { side: 0, max: 2048 },
            cut(6201),
            cut(3763),
            cut(5437),
        ],
    );
}

/// A reconnects from the port of a connection it closed second (its LAST-ACK over, B in
/// TIME-WAIT). A's new SYN is not newer than what B's TIME-WAIT received (without
/// timestamps, RFC 6191 §2), so B answers it with the old incarnation's ACK; A's new
/// connection resets that and sends its SYN again, which opens the connection. The watch
/// took B's ACK for the new incarnation's; a side's segments before its SYN of an
/// incarnation are now the last one's (found by the thirty-sixth session's hunt once the
/// conversations reopened connections).
#[test]
fn a_time_wait_answering_a_new_syn_is_the_old_incarnation() {
    let h = Host {
        max_ooo_ranges: 1,
        ..plain(4096, 4096, 0)
    };
    let setup = Setup {
        mtu: 576,
        on_frame_queue: false,
        faults: None,
        hosts: [h.clone(), h],
    };
    let acts = [
        Act::Do(Step::Shutdown { side: 1 }),
        Act::Do(Step::Stream { side: 0, len: 250 }),
        Act::End {
            side: 0,
            abort: false,
        },
        Act::Open { reuse: true },
    ];
    converse_acts(&setup, &acts);
}

/// B aborts one of three connections just made, its RST lost; a late copy of A's first
/// SYN, held back on the link, reaches B's listener at the same virtual instant as the
/// connection's own. B's stack gave the new incarnation the same initial sequence number
/// (the ISN's clock had not moved), so A, established, took B's SYN-ACK for its own, and
/// the connection came back to life at B, unseen by B's application, ACKing A's data
/// with a window that never opened: A's FIN waited four hours. With the ISN's clock
/// moved a tick past the last ISN given, A answers the SYN-ACK with a challenge ACK,
/// which B's half-open connection resets. (Found by the thirty-sixth session's hunt.)
#[test]
fn a_late_syn_after_an_abort_does_not_reopen_the_connection_in_step() {
    let a = Host {
        max_ooo_ranges: 1,
        ..plain(65536, 4096, 0)
    };
    let b = Host {
        keepalive: true,
        max_ooo_ranges: 1,
        ..plain(4096, 4096, 0)
    };
    let setup = Setup {
        mtu: 576,
        on_frame_queue: true,
        faults: Some((46, 0, 18, 0, 18241843544456266332)),
        hosts: [a, b],
    };
    let acts = [
        (
            19,
            Act::End {
                side: 1,
                abort: true,
            },
        ),
        (2, Act::Do(Step::Shutdown { side: 0 })),
        (
            31,
            Act::Do(Step::Write {
                side: 0,
                len: 4097,
                how: How::Copy,
            }),
        ),
    ];
    if let Err(e) = converse_on(&setup, 3, 3, &acts) {
        panic!("{e}");
    }
}

/// A shuts down and aborts at once on a link that holds back 6% of frames; its first SYN,
/// held back, reaches B's listener after the RST, and B answers with a SYN-ACK of a new
/// incarnation (another initial sequence number), acknowledging A's SYN again, which A
/// resets. The watch took that SYN-ACK for the old connection's ACK going back; a SYN-ACK
/// with another initial sequence number now begins a connection anew, as one sent after
/// a close does (found by the thirty-sixth session's hunt).
#[test]
fn a_syn_ack_for_a_late_syn_after_an_abort_is_a_new_incarnation() {
    let h = Host {
        max_ooo_ranges: 1,
        ..plain(4096, 4096, 0)
    };
    let setup = Setup {
        mtu: 576,
        on_frame_queue: true,
        faults: Some((0, 0, 59, 0, 14172365982369863220)),
        hosts: [h.clone(), h],
    };
    let acts = [
        Act::Do(Step::Shutdown { side: 0 }),
        Act::End {
            side: 0,
            abort: true,
        },
        Act::Open { reuse: false },
    ];
    converse_acts(&setup, &acts);
}
