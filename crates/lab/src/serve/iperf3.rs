//! An iperf3-compatible server (issue 8): stock `iperf3 -c <host>` can run a test against
//! it. A poll-driven state machine over probestack's non-blocking sockets, written from the
//! protocol as iperf3 (3.12) speaks it:
//!
//! 1. The client opens the control connection to the port and sends its cookie, 37 bytes
//!    (36 printable characters and a NUL) that name the test.
//! 2. The server answers with state bytes: PARAM_EXCHANGE (9); the client sends its
//!    parameters as JSON (a 4-byte big-endian length, then the text).
//! 3. CREATE_STREAMS (10): the client opens its data streams. A TCP stream is a connection
//!    to the same port that starts with the cookie; a UDP stream is a socket that sends a
//!    4-byte "connect" datagram to the port and waits for the server's 4-byte reply.
//! 4. With every stream there, TEST_START (1) and TEST_RUNNING (2): data flows, from the
//!    client (the default) or from the server (`-R`).
//! 5. The client sends TEST_END (4) when its time is up; the server answers
//!    EXCHANGE_RESULTS (13), reads the client's results JSON and sends its own (per stream:
//!    bytes, retransmits, jitter, errors, packets), then DISPLAY_RESULTS (14).
//! 6. The client sends IPERF_DONE (16) and closes; the server listens for the next test.
//!
//! A UDP datagram starts with the sender's clock (seconds and microseconds, 32 bits each,
//! big-endian) and a packet counter (32 bits, or 64 with `udp_counters_64bit`); the
//! receiver counts loss and reordering from the counter and jitter (RFC 1889's running
//! estimate) from the clocks. Anything that goes wrong is counted in [`Iperf3Stats`] and
//! ends that test only; the server goes back to listening.

use probestack::socket::tcp::{TcpError, TcpHandle};
use probestack::socket::udp::{UdpError, UdpHandle};
use probestack::stack::Stack;
use probestack::time::{Duration, Instant};
use probestack::wire::Ipv4Address;
use serde_json::{json, Value};

/// The cookie's size on the wire: 36 characters and the C string's NUL.
pub const COOKIE_SIZE: usize = 37;

// The control connection's state bytes (iperf_api.h).
const TEST_START: u8 = 1;
const TEST_RUNNING: u8 = 2;
const TEST_END: u8 = 4;
const PARAM_EXCHANGE: u8 = 9;
const CREATE_STREAMS: u8 = 10;
const SERVER_TERMINATE: u8 = 11;
const CLIENT_TERMINATE: u8 = 12;
const EXCHANGE_RESULTS: u8 = 13;
const DISPLAY_RESULTS: u8 = 14;
const IPERF_DONE: u8 = 16;
/// -1 as a signed byte: the server is busy with another test.
const ACCESS_DENIED: u8 = 0xff;
/// -2 as a signed byte, followed by iperf's error number and errno (4 bytes each).
const SERVER_ERROR: u8 = 0xfe;
/// iperf's IEUNIMP: "an option you are trying to set is not supported by the server".
const IE_UNIMPLEMENTED: u32 = 13;

/// The server's reply to a UDP stream's connect datagram. iperf3 writes the integer in
/// host order; on the x86 and ARM hosts that run it that is little-endian ("6789").
const UDP_CONNECT_REPLY: u32 = 0x3938_3736;

/// The largest JSON message accepted on the control connection.
const MAX_JSON: usize = 256 * 1024;
/// At most this many streams in one test (iperf3's own limit is 128).
const MAX_STREAMS: usize = 128;
/// The largest block a client may ask the server to send (`-l`).
const MAX_BLOCK: usize = 1 << 20;
/// The largest UDP datagram the server sends.
const MAX_UDP_BLOCK: usize = 65_507;
/// Datagrams a UDP sender writes in one poll at most, when it has fallen behind.
const MAX_UDP_BURST: usize = 256;
/// Connections waiting for their cookie, at most.
const MAX_PENDING: usize = 64;
/// A connection that has not sent its cookie in this long is closed.
const COOKIE_TIMEOUT: Duration = Duration::from_secs(10);
/// A test in which nothing moves (no byte read or written) for this long is abandoned.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// The UDP receive buffer: a second of 16 Mbit/s.
const UDP_RX_BUFFER: usize = 2 << 20;

/// What the server has done since it started.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Iperf3Stats {
    /// Tests that got as far as a control connection with a cookie.
    pub tests_started: u64,
    /// Tests that ran to IPERF_DONE (or the client's close after the results).
    pub tests_completed: u64,
    /// Payload bytes received on data streams (UDP: whole datagrams, headers included).
    pub bytes_received: u64,
    /// Payload bytes sent on data streams.
    pub bytes_sent: u64,
    /// UDP datagrams counted as lost, over all tests.
    pub udp_lost: u64,
    /// UDP datagrams that arrived out of order, over all tests.
    pub udp_out_of_order: u64,
    /// UDP datagrams ignored because their counter jumped implausibly far ahead (more
    /// than [`MAX_COUNTER_JUMP`]): forged or corrupt, they would make the loss count
    /// meaningless.
    pub udp_ignored: u64,
    /// Clients turned away because a test was running.
    pub access_denied: u64,
    /// Tests that failed: protocol errors, unsupported options, clients that vanished.
    pub errors: u64,
    /// Why the last failed test failed.
    pub last_error: Option<String>,
    /// The results JSON the server sent in its last results exchange.
    pub last_results: Option<Value>,
}

/// The test's parameters, from the client's JSON.
#[derive(Clone, Debug)]
struct Params {
    udp: bool,
    reverse: bool,
    parallel: usize,
    /// The block size (`-l`): what the server writes at a time in reverse mode.
    len: usize,
    /// Seconds (`-t`); 0 when the test ends by bytes or blocks.
    duration: u64,
    /// Seconds at the start not counted (`-O`).
    omit: u64,
    /// Bits a second per stream (`-b`): the pace of a UDP sender; 0 for no limit.
    rate: u64,
    /// UDP counters are 64 bits wide.
    udp64: bool,
    /// The client wants the server's report in the results.
    server_output: bool,
}

impl Params {
    /// Reads the client's parameters; `Err` for what this server does not do.
    fn parse(v: &Value) -> Result<Params, String> {
        let obj = v
            .as_object()
            .ok_or("the parameters are not a JSON object")?;
        let flag = |name: &str| obj.get(name).is_some_and(|x| x.as_bool() != Some(false));
        let int = |name: &str| obj.get(name).and_then(Value::as_u64);
        if flag("sctp") {
            return Err("SCTP is not supported".into());
        }
        if flag("bidirectional") {
            return Err("bidirectional tests are not supported".into());
        }
        let udp = flag("udp");
        let reverse = flag("reverse");
        let parallel = int("parallel").unwrap_or(1) as usize;
        if parallel == 0 || parallel > MAX_STREAMS {
            return Err(format!("{parallel} streams (1 to {MAX_STREAMS})"));
        }
        let default_len: usize = if udp { 1460 } else { 128 * 1024 };
        let len = match int("len").map_or(default_len, |n| n as usize) {
            0 => default_len,
            n => n.min(MAX_BLOCK),
        };
        Ok(Params {
            udp,
            reverse,
            parallel,
            len,
            duration: int("time").unwrap_or(10),
            omit: int("omit").unwrap_or(0),
            rate: int("bandwidth").unwrap_or(if udp { 1 << 20 } else { 0 }),
            udp64: flag("udp_counters_64bit"),
            server_output: flag("get_server_output"),
        })
    }
}

/// One data stream of the running test.
#[derive(Debug)]
struct Stream {
    /// iperf3's numbering: 1, then 3, 4, 5, ... (its list insertion counts from 2).
    id: u32,
    kind: StreamKind,
    bytes: u64,
    /// UDP: the highest packet counter seen.
    packets: u64,
    /// UDP: datagrams lost (the counter's gaps, less late arrivals that filled them).
    lost: u64,
    out_of_order: u64,
    /// UDP: the running jitter estimate, seconds.
    jitter: f64,
    /// UDP: the last datagram's transit time (arrival less its send stamp), seconds.
    transit: Option<f64>,
    /// Reverse mode: where the next write starts in the block.
    offset: usize,
    eof: bool,
    /// Bytes, packets and losses during the omitted seconds, left out of the results.
    omitted: (u64, u64, u64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StreamKind {
    Tcp(TcpHandle),
    Udp((Ipv4Address, u16)),
}

impl Stream {
    fn new(id: u32, kind: StreamKind) -> Stream {
        Stream {
            id,
            kind,
            bytes: 0,
            packets: 0,
            lost: 0,
            out_of_order: 0,
            jitter: 0.0,
            transit: None,
            offset: 0,
            eof: false,
            omitted: (0, 0, 0),
        }
    }

    /// Bytes, packets and losses since the omitted seconds.
    fn counted(&self) -> (u64, u64, u64) {
        let (b, p, l) = self.omitted;
        (
            self.bytes - b,
            self.packets - p,
            self.lost.saturating_sub(l),
        )
    }

    /// Counts one UDP datagram of the test: loss and order from its counter, jitter from
    /// its stamp. False, counting nothing, for a datagram too short for its header or
    /// whose counter jumps more than [`MAX_COUNTER_JUMP`] ahead.
    fn udp_datagram(&mut self, data: &[u8], udp64: bool, now: Instant) -> bool {
        let header = if udp64 { 16 } else { 12 };
        if data.len() < header {
            return false;
        }
        let word = |i: usize| u32::from_be_bytes([data[i], data[i + 1], data[i + 2], data[i + 3]]);
        let (sec, usec) = (word(0), word(4));
        let count = if udp64 {
            (u64::from(word(8)) << 32) | u64::from(word(12))
        } else {
            u64::from(word(8))
        };
        if count.saturating_sub(self.packets) > MAX_COUNTER_JUMP {
            return false;
        }
        self.bytes += data.len() as u64;
        if count > self.packets {
            // A gap in the counter: the missing datagrams are lost until they turn up.
            self.lost += count - self.packets - 1;
            self.packets = count;
        } else {
            self.out_of_order += 1;
            self.lost = self.lost.saturating_sub(1);
        }
        let sent = f64::from(sec) + f64::from(usec) / 1e6;
        let arrived = now.as_nanos() as f64 / 1e9;
        let transit = arrived - sent;
        if let Some(prev) = self.transit {
            let d = (transit - prev).abs();
            self.jitter += (d - self.jitter) / 16.0;
        }
        self.transit = Some(transit);
        true
    }
}

/// The furthest a UDP stream's datagram counter may jump ahead of the highest seen: 2^24
/// datagrams lost in a row is already beyond any real test.
const MAX_COUNTER_JUMP: u64 = 1 << 24;

/// Where the test is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// PARAM_EXCHANGE sent; waiting for the parameters' JSON.
    Params,
    /// CREATE_STREAMS sent; waiting for the streams.
    Streams,
    /// TEST_RUNNING sent; data flows until the client's TEST_END.
    Running,
    /// EXCHANGE_RESULTS sent; waiting for the client's results.
    Results,
    /// DISPLAY_RESULTS sent; waiting for IPERF_DONE.
    Display,
}

/// The test in progress, from its control connection.
struct Session {
    ctrl: TcpHandle,
    cookie: [u8; COOKIE_SIZE],
    phase: Phase,
    /// Control bytes read but not yet understood.
    rx: Vec<u8>,
    /// Control bytes waiting for room in the send buffer.
    tx: Vec<u8>,
    ctrl_eof: bool,
    params: Option<Params>,
    streams: Vec<Stream>,
    udp: Option<UdpHandle>,
    /// Reverse mode: the block written over and over.
    block: Vec<u8>,
    started: Option<Instant>,
    /// When the omitted seconds (`-O`) ended and counting began.
    counted_from: Option<Instant>,
    omit_over: bool,
    ended: Option<Instant>,
    last_activity: Instant,
    /// Wall-clock time spent in `poll` for this test, and when the test began and ended
    /// (for the CPU utilisation the results report).
    busy: std::time::Duration,
    wall_start: Option<std::time::Instant>,
    wall_end: Option<std::time::Instant>,
}

impl Session {
    fn new(ctrl: TcpHandle, cookie: [u8; COOKIE_SIZE], now: Instant) -> Session {
        Session {
            ctrl,
            cookie,
            phase: Phase::Params,
            rx: Vec::new(),
            tx: vec![PARAM_EXCHANGE],
            ctrl_eof: false,
            params: None,
            streams: Vec::new(),
            udp: None,
            block: Vec::new(),
            started: None,
            counted_from: None,
            omit_over: false,
            ended: None,
            last_activity: now,
            busy: std::time::Duration::ZERO,
            wall_start: None,
            wall_end: None,
        }
    }

    /// The id iperf3 gives the next stream.
    fn next_id(&self) -> u32 {
        match self.streams.len() {
            0 => 1,
            n => n as u32 + 2,
        }
    }

    /// A timed test still running well after its time: the client is gone.
    fn overdue(&self, now: Instant) -> bool {
        match (self.phase, self.started, &self.params) {
            (Phase::Running, Some(t), Some(p)) if p.duration > 0 => {
                now - t >= Duration::from_secs(p.duration + p.omit) + IDLE_TIMEOUT
            }
            _ => false,
        }
    }

    fn wants_streams(&self) -> bool {
        self.phase == Phase::Streams
            && self
                .params
                .as_ref()
                .is_some_and(|p| self.streams.len() < p.parallel)
    }
}

/// A connection accepted but not yet identified by its cookie.
struct Pending {
    h: TcpHandle,
    buf: Vec<u8>,
    since: Instant,
}

/// What a step of the session came to.
enum Outcome {
    Continue,
    Completed,
    Failed(String),
}

/// The iperf3 server: one listener, one test at a time.
pub struct Iperf3Server {
    port: u16,
    listener: TcpHandle,
    pending: Vec<Pending>,
    session: Option<Session>,
    stats: Iperf3Stats,
    scratch: Vec<u8>,
}

impl Iperf3Server {
    /// Listens on `port` (iperf3's is 5201) on all of the stack's addresses.
    pub fn new(stack: &mut Stack, port: u16) -> Result<Iperf3Server, String> {
        let listener = stack
            .tcp_listen((Ipv4Address::UNSPECIFIED, port), MAX_STREAMS + 8)
            .map_err(|e| format!("iperf3: listen on port {port}: {e}"))?;
        Ok(Iperf3Server {
            port,
            listener,
            pending: Vec::new(),
            session: None,
            stats: Iperf3Stats::default(),
            scratch: vec![0; 256 * 1024],
        })
    }

    /// The port the server listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// What the server has done so far.
    pub fn stats(&self) -> Iperf3Stats {
        self.stats.clone()
    }

    /// Whether a test is in progress.
    pub fn busy(&self) -> bool {
        self.session.is_some()
    }

    /// The application's turn: accept, read, write, advance the test's state.
    pub fn poll(&mut self, stack: &mut Stack, now: Instant) {
        let wall = std::time::Instant::now();
        self.accept(stack, now);
        self.identify(stack, now);
        if let Some(mut s) = self.session.take() {
            let outcome = self.step(&mut s, stack, now);
            s.busy += wall.elapsed();
            match outcome {
                Outcome::Continue => self.session = Some(s),
                Outcome::Completed => {
                    self.stats.tests_completed += 1;
                    self.close_session(stack, s);
                }
                Outcome::Failed(why) => {
                    self.stats.errors += 1;
                    self.stats.last_error = Some(why);
                    self.close_session(stack, s);
                }
            }
        }
    }

    /// Takes every connection the listener has ready.
    fn accept(&mut self, stack: &mut Stack, now: Instant) {
        loop {
            match stack.tcp_accept(self.listener) {
                Ok(h) => {
                    if self.pending.len() >= MAX_PENDING {
                        let _ = stack.tcp_abort(h);
                        self.stats.errors += 1;
                        self.stats.last_error = Some("too many connections at once".into());
                    } else {
                        self.pending.push(Pending {
                            h,
                            buf: Vec::with_capacity(COOKIE_SIZE),
                            since: now,
                        });
                    }
                }
                Err(TcpError::WouldBlock) => break,
                Err(e) => {
                    self.stats.errors += 1;
                    self.stats.last_error = Some(format!("accept: {e}"));
                    break;
                }
            }
        }
    }

    /// Reads cookies: the first makes a test's control connection, those that match the
    /// test while it wants streams become its streams, the rest are turned away.
    fn identify(&mut self, stack: &mut Stack, now: Instant) {
        let mut i = 0;
        while i < self.pending.len() {
            let p = &mut self.pending[i];
            let mut gone = false;
            while p.buf.len() < COOKIE_SIZE {
                let mut b = [0u8; COOKIE_SIZE];
                let want = COOKIE_SIZE - p.buf.len();
                match stack.tcp_recv(p.h, &mut b[..want]) {
                    Ok(0) => {
                        gone = true;
                        break;
                    }
                    Ok(n) => p.buf.extend_from_slice(&b[..n]),
                    Err(TcpError::WouldBlock) => break,
                    Err(_) => {
                        gone = true;
                        break;
                    }
                }
            }
            if gone || (p.buf.len() < COOKIE_SIZE && now - p.since >= COOKIE_TIMEOUT) {
                let p = self.pending.remove(i);
                let _ = stack.tcp_close(p.h);
                continue;
            }
            if p.buf.len() < COOKIE_SIZE {
                i += 1;
                continue;
            }
            // In arrival order, so that stream ids follow the client's connect order.
            let p = self.pending.remove(i);
            let mut cookie = [0u8; COOKIE_SIZE];
            cookie.copy_from_slice(&p.buf);
            match &mut self.session {
                None => {
                    self.stats.tests_started += 1;
                    self.session = Some(Session::new(p.h, cookie, now));
                }
                Some(s) if s.cookie == cookie && s.wants_streams() => {
                    if s.params.as_ref().is_some_and(|p| !p.udp) {
                        let id = s.next_id();
                        s.streams.push(Stream::new(id, StreamKind::Tcp(p.h)));
                        s.last_activity = now;
                    } else {
                        let _ = stack.tcp_close(p.h);
                    }
                }
                Some(_) => {
                    // iperf3's answer to a second client: busy.
                    let _ = stack.tcp_send(p.h, &[ACCESS_DENIED]);
                    let _ = stack.tcp_close(p.h);
                    self.stats.access_denied += 1;
                }
            }
        }
    }

    /// One turn of the test: control bytes in, data streams served, state advanced,
    /// control bytes out.
    fn step(&mut self, s: &mut Session, stack: &mut Stack, now: Instant) -> Outcome {
        match self.step_inner(s, stack, now) {
            Ok(done) => {
                flush(s, stack);
                if done {
                    Outcome::Completed
                } else if now - s.last_activity >= IDLE_TIMEOUT {
                    Outcome::Failed("the client went quiet".into())
                } else if s.overdue(now) {
                    Outcome::Failed("the test ran long past its time".into())
                } else {
                    Outcome::Continue
                }
            }
            Err(why) => {
                flush(s, stack);
                Outcome::Failed(why)
            }
        }
    }

    fn step_inner(
        &mut self,
        s: &mut Session,
        stack: &mut Stack,
        now: Instant,
    ) -> Result<bool, String> {
        // Control bytes in.
        while !s.ctrl_eof {
            match stack.tcp_recv(s.ctrl, &mut self.scratch) {
                Ok(0) => s.ctrl_eof = true,
                Ok(n) => {
                    if s.rx.len() + n > MAX_JSON + 8 {
                        return Err("too much on the control connection".into());
                    }
                    s.rx.extend_from_slice(&self.scratch[..n]);
                    s.last_activity = now;
                }
                Err(TcpError::WouldBlock) => break,
                Err(e) => return Err(format!("control connection: {e}")),
            }
        }
        // Data before control: what arrived before TEST_END counts.
        self.serve_streams(s, stack, now)?;
        loop {
            match s.phase {
                Phase::Params => {
                    let Some(v) = take_json(&mut s.rx)? else {
                        break;
                    };
                    let params = match Params::parse(&v) {
                        Ok(p) => p,
                        Err(why) => {
                            s.tx.push(SERVER_ERROR);
                            s.tx.extend_from_slice(&IE_UNIMPLEMENTED.to_be_bytes());
                            s.tx.extend_from_slice(&0u32.to_be_bytes());
                            return Err(why);
                        }
                    };
                    if params.udp {
                        let u = stack.udp_open();
                        if let Err(e) = stack.udp_bind(u, Ipv4Address::UNSPECIFIED, self.port) {
                            let _ = stack.udp_close(u);
                            return Err(format!("UDP bind on port {}: {e}", self.port));
                        }
                        let _ = stack.udp_set_recv_buffer(u, UDP_RX_BUFFER);
                        s.udp = Some(u);
                    }
                    if params.reverse {
                        let len = if params.udp {
                            params.len.clamp(16, MAX_UDP_BLOCK)
                        } else {
                            params.len
                        };
                        s.block = (0..len)
                            .map(|i| (i as u32).wrapping_mul(2_654_435_761).rotate_left(9) as u8)
                            .collect();
                    }
                    s.params = Some(params);
                    s.tx.push(CREATE_STREAMS);
                    s.phase = Phase::Streams;
                }
                Phase::Streams => {
                    if !s.wants_streams() {
                        s.tx.extend_from_slice(&[TEST_START, TEST_RUNNING]);
                        s.phase = Phase::Running;
                        s.started = Some(now);
                        if s.params.as_ref().is_some_and(|p| p.omit == 0) {
                            s.omit_over = true;
                            s.counted_from = Some(now);
                        }
                        s.wall_start = Some(std::time::Instant::now());
                        continue;
                    }
                    if let Some(b) = take_byte(&mut s.rx) {
                        return Err(unexpected(b, "while the streams connect"));
                    }
                    break;
                }
                Phase::Running => match take_byte(&mut s.rx) {
                    None => break,
                    Some(TEST_END) => {
                        s.ended = Some(now);
                        s.wall_end = Some(std::time::Instant::now());
                        // As iperf3's server does, end the TCP streams here. A reverse
                        // client drains them with blocking reads of whole blocks once the
                        // test is over, and only the end of the stream lets the last,
                        // partial block complete; without it the client never reads the
                        // control connection again.
                        for st in &s.streams {
                            if let StreamKind::Tcp(h) = st.kind {
                                let _ = stack.tcp_shutdown(h);
                            }
                        }
                        s.tx.push(EXCHANGE_RESULTS);
                        s.phase = Phase::Results;
                    }
                    Some(b) => return Err(unexpected(b, "during the test")),
                },
                Phase::Results => {
                    let Some(v) = take_json(&mut s.rx)? else {
                        break;
                    };
                    if !v.get("streams").is_some_and(Value::is_array) {
                        return Err("the client's results have no streams".into());
                    }
                    let results = self.results(s, stack);
                    let text = results.to_string();
                    s.tx.extend_from_slice(&(text.len() as u32).to_be_bytes());
                    s.tx.extend_from_slice(text.as_bytes());
                    s.tx.push(DISPLAY_RESULTS);
                    self.stats.last_results = Some(results);
                    s.phase = Phase::Display;
                }
                Phase::Display => match take_byte(&mut s.rx) {
                    None => break,
                    Some(IPERF_DONE) => return Ok(true),
                    Some(b) => return Err(unexpected(b, "after the results")),
                },
            }
        }
        if s.ctrl_eof {
            // iperf3 clients send IPERF_DONE before they close, but once the results are
            // out a close is as good.
            return if s.phase == Phase::Display {
                Ok(true)
            } else {
                Err("the client closed the control connection mid-test".into())
            };
        }
        Ok(false)
    }

    /// Moves data: reads (or, in reverse, writes) the TCP streams and reads the UDP socket.
    fn serve_streams(
        &mut self,
        s: &mut Session,
        stack: &mut Stack,
        now: Instant,
    ) -> Result<(), String> {
        let Some(params) = s.params.clone() else {
            return Ok(());
        };
        let running = s.phase == Phase::Running;
        if running && !s.omit_over {
            let omit = Duration::from_secs(params.omit);
            if s.started.is_some_and(|t| now - t >= omit) {
                // The omitted seconds are over: count from here, as iperf3 does.
                s.omit_over = true;
                s.counted_from = Some(now);
                for st in &mut s.streams {
                    st.omitted = (st.bytes, st.packets, st.lost);
                    st.jitter = 0.0;
                }
            }
        }
        for st in &mut s.streams {
            let StreamKind::Tcp(h) = st.kind else {
                continue;
            };
            if params.reverse && running {
                while !s.block.is_empty() {
                    match stack.tcp_send(h, &s.block[st.offset..]) {
                        Ok(0) => break,
                        Ok(n) => {
                            st.bytes += n as u64;
                            st.offset = (st.offset + n) % s.block.len();
                            self.stats.bytes_sent += n as u64;
                            s.last_activity = now;
                        }
                        Err(TcpError::WouldBlock) => break,
                        Err(e) => return Err(format!("stream {}: {e}", st.id)),
                    }
                }
            }
            // Read in either mode: the client sends nothing in reverse, but whatever it
            // does send must be read, or closing would reset the connection.
            while !st.eof {
                match stack.tcp_recv(h, &mut self.scratch) {
                    Ok(0) => st.eof = true,
                    Ok(n) => {
                        if running && !params.reverse {
                            st.bytes += n as u64;
                            self.stats.bytes_received += n as u64;
                        }
                        s.last_activity = now;
                    }
                    Err(TcpError::WouldBlock) => break,
                    Err(e) if running => return Err(format!("stream {}: {e}", st.id)),
                    Err(_) => st.eof = true,
                }
            }
        }
        if let (Some(u), Some(start), true) = (s.udp, s.started, params.reverse && running) {
            // Reverse UDP: each stream paced at the rate, stamped and counted.
            let elapsed = (now - start).as_secs_f64();
            let due = (params.rate as f64 / 8.0 * elapsed) as u64;
            let len = s.block.len() as u64;
            for st in &mut s.streams {
                let StreamKind::Udp(to) = st.kind else {
                    continue;
                };
                let mut burst = 0;
                while (params.rate == 0 || st.bytes + len <= due) && burst < MAX_UDP_BURST {
                    let us = now.as_micros();
                    s.block[0..4].copy_from_slice(&((us / 1_000_000) as u32).to_be_bytes());
                    s.block[4..8].copy_from_slice(&((us % 1_000_000) as u32).to_be_bytes());
                    let count = st.packets + 1;
                    if params.udp64 {
                        s.block[8..16].copy_from_slice(&count.to_be_bytes());
                    } else {
                        s.block[8..12].copy_from_slice(&(count as u32).to_be_bytes());
                    }
                    if stack.udp_send_to(u, &s.block, to.0, to.1).is_err() {
                        break;
                    }
                    st.packets = count;
                    st.bytes += len;
                    self.stats.bytes_sent += len;
                    s.last_activity = now;
                    burst += 1;
                }
            }
        }
        if let Some(u) = s.udp {
            loop {
                let got = match stack.udp_recv_from(u, &mut self.scratch) {
                    Ok(r) => r,
                    Err(UdpError::WouldBlock) => break,
                    Err(e) => return Err(format!("UDP receive: {e}")),
                };
                let data = &self.scratch[..got.len];
                let known = s
                    .streams
                    .iter()
                    .position(|st| st.kind == StreamKind::Udp(got.from));
                match known {
                    Some(i) if running && !params.reverse => {
                        let st = &mut s.streams[i];
                        let (lost, ooo) = (st.lost, st.out_of_order);
                        if !st.udp_datagram(data, params.udp64, now) {
                            self.stats.udp_ignored += 1;
                        }
                        self.stats.bytes_received += got.len as u64;
                        self.stats.udp_out_of_order += st.out_of_order - ooo;
                        // Loss can shrink when a late datagram fills a gap.
                        self.stats.udp_lost = self
                            .stats
                            .udp_lost
                            .saturating_add(st.lost)
                            .saturating_sub(lost);
                        s.last_activity = now;
                    }
                    Some(_) if s.phase == Phase::Streams => {
                        // The connect datagram again: the reply was lost.
                        udp_reply(stack, u, got.from);
                    }
                    Some(_) => {}
                    None if s.wants_streams() => {
                        let id = s.next_id();
                        s.streams.push(Stream::new(id, StreamKind::Udp(got.from)));
                        udp_reply(stack, u, got.from);
                        s.last_activity = now;
                    }
                    None => {}
                }
            }
        }
        Ok(())
    }

    /// The server's results JSON, as iperf3's `send_results` lays it out.
    fn results(&self, s: &Session, stack: &Stack) -> Value {
        let params = s.params.as_ref();
        let reverse = params.is_some_and(|p| p.reverse);
        let udp = params.is_some_and(|p| p.udp);
        let seconds = match (s.counted_from, s.ended) {
            (Some(a), Some(b)) => (b - a).as_secs_f64(),
            _ => 0.0,
        };
        let cpu = match (s.wall_start, s.wall_end) {
            (Some(a), Some(b)) if b > a => {
                (s.busy.as_secs_f64() / (b - a).as_secs_f64() * 100.0).clamp(0.0, 100.0)
            }
            _ => 0.0,
        };
        // The receiver has no retransmissions to report (-1); a TCP sender has them.
        let sender_has_retransmits = match (reverse, udp) {
            (false, _) => -1,
            (true, false) => 1,
            (true, true) => 0,
        };
        let streams: Vec<Value> = s
            .streams
            .iter()
            .map(|st| {
                let retransmits = match st.kind {
                    StreamKind::Tcp(h) if reverse => stack
                        .tcp_stats(h)
                        .map(|c| c.retransmitted_segments as i64)
                        .unwrap_or(0),
                    _ => -1,
                };
                let (bytes, packets, lost) = st.counted();
                json!({
                    "id": st.id,
                    "bytes": bytes,
                    "retransmits": retransmits,
                    "jitter": st.jitter,
                    "errors": lost,
                    "packets": packets,
                    "start_time": 0.0,
                    "end_time": seconds,
                })
            })
            .collect();
        let mut out = json!({
            "cpu_util_total": cpu,
            "cpu_util_user": cpu,
            "cpu_util_system": 0.0,
            "sender_has_retransmits": sender_has_retransmits,
            "streams": streams,
        });
        if params.is_some_and(|p| p.server_output) {
            let mut text = String::from("probestack iperf3 server\n");
            for st in &s.streams {
                let (bytes, packets, lost) = st.counted();
                let rate = if seconds > 0.0 {
                    bytes as f64 * 8.0 / seconds / 1e6
                } else {
                    0.0
                };
                text.push_str(&format!(
                    "[{:3}] {:.2} s {} bytes {:.2} Mbit/s {}\n",
                    st.id,
                    seconds,
                    bytes,
                    rate,
                    if reverse { "sender" } else { "receiver" }
                ));
                if udp {
                    text.push_str(&format!(
                        "      jitter {:.3} ms, lost {}/{}, out of order {}\n",
                        st.jitter * 1e3,
                        lost,
                        packets,
                        st.out_of_order
                    ));
                }
            }
            out["server_output_text"] = Value::String(text);
        }
        out
    }

    /// Closes the test's sockets; the listener stays.
    fn close_session(&mut self, stack: &mut Stack, s: Session) {
        for st in &s.streams {
            if let StreamKind::Tcp(h) = st.kind {
                // Drain what is left so that the close is a FIN, not a reset.
                while let Ok(n) = stack.tcp_recv(h, &mut self.scratch) {
                    if n == 0 {
                        break;
                    }
                }
                let _ = stack.tcp_close(h);
            }
        }
        if let Some(u) = s.udp {
            let _ = stack.udp_close(u);
        }
        while let Ok(n) = stack.tcp_recv(s.ctrl, &mut self.scratch) {
            if n == 0 {
                break;
            }
        }
        let _ = stack.tcp_close(s.ctrl);
    }
}

/// Writes what fits of the queued control bytes.
fn flush(s: &mut Session, stack: &mut Stack) {
    while !s.tx.is_empty() {
        match stack.tcp_send(s.ctrl, &s.tx) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                s.tx.drain(..n);
            }
        }
    }
}

/// Answers a UDP stream's connect datagram.
fn udp_reply(stack: &mut Stack, u: UdpHandle, to: (Ipv4Address, u16)) {
    let _ = stack.udp_send_to(u, &UDP_CONNECT_REPLY.to_le_bytes(), to.0, to.1);
}

fn take_byte(rx: &mut Vec<u8>) -> Option<u8> {
    if rx.is_empty() {
        None
    } else {
        Some(rx.remove(0))
    }
}

/// A length-prefixed JSON message, once all of it is there.
fn take_json(rx: &mut Vec<u8>) -> Result<Option<Value>, String> {
    if rx.len() < 4 {
        return Ok(None);
    }
    let len = u32::from_be_bytes([rx[0], rx[1], rx[2], rx[3]]) as usize;
    if len > MAX_JSON {
        return Err(format!("a {len}-byte JSON message"));
    }
    if rx.len() < 4 + len {
        return Ok(None);
    }
    let v = serde_json::from_slice(&rx[4..4 + len])
        .map_err(|e| format!("bad JSON from the client: {e}"));
    rx.drain(..4 + len);
    v.map(Some)
}

fn unexpected(b: u8, when: &str) -> String {
    match b {
        CLIENT_TERMINATE => "the client ended the test early".into(),
        SERVER_TERMINATE => "the client sent SERVER_TERMINATE".into(),
        b => format!("unexpected state {} {when}", b as i8),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use probestack::driver::FaultConfig;
    use probestack::sim::{HostConfig, Pair, ADDR_B};
    use probestack::tcp::State;

    const PORT: u16 = 5201;

    /// What the test client is asked to run.
    #[derive(Clone, Copy, Debug)]
    struct Cfg {
        udp: bool,
        reverse: bool,
        bidir: bool,
        parallel: usize,
        duration: Duration,
        len: usize,
        /// Bytes a second over all streams (the client paces itself, as `-b` does).
        rate: u64,
    }

    impl Cfg {
        fn tcp() -> Cfg {
            Cfg {
                udp: false,
                reverse: false,
                bidir: false,
                parallel: 1,
                duration: Duration::from_secs(1),
                len: 128 * 1024,
                rate: 20_000_000,
            }
        }

        fn udp() -> Cfg {
            Cfg {
                udp: true,
                len: 1000,
                rate: 1_250_000,
                duration: Duration::from_secs(2),
                ..Cfg::tcp()
            }
        }
    }

    enum Setup {
        Tcp(TcpHandle),
        Udp(UdpHandle, Instant),
    }

    enum Data {
        Tcp(TcpHandle),
        Udp(UdpHandle),
    }

    /// A small iperf3 client that follows the real one's steps: cookie, parameters,
    /// streams one after another (each TCP stream starting with the cookie, each UDP
    /// stream with the connect datagram), data until its time is up, TEST_END, the
    /// results exchange, IPERF_DONE.
    struct Client {
        cfg: Cfg,
        cookie: [u8; COOKIE_SIZE],
        ctrl: TcpHandle,
        cookie_sent: bool,
        rx: Vec<u8>,
        want_json: bool,
        creating: bool,
        setup: Option<Setup>,
        streams: Vec<Data>,
        started: Option<Instant>,
        test_end_sent: bool,
        /// Per stream: bytes sent, bytes received, datagrams sent.
        sent: Vec<u64>,
        received: Vec<u64>,
        datagrams: Vec<u64>,
        /// Reverse UDP: the highest counter received.
        highest: Vec<u64>,
        server_results: Option<Value>,
        denied: bool,
        server_error: Option<i32>,
        done: bool,
        block: Vec<u8>,
    }

    impl Client {
        fn start(stack: &mut Stack, cfg: Cfg, tag: u8) -> Client {
            let mut cookie = [0u8; COOKIE_SIZE];
            for (i, c) in cookie.iter_mut().take(COOKIE_SIZE - 1).enumerate() {
                *c = b"abcdefghijklmnopqrstuvwxyz234567"[(i * 7 + tag as usize) % 32];
            }
            Client {
                cfg,
                cookie,
                ctrl: stack.tcp_connect((ADDR_B, PORT)).unwrap(),
                cookie_sent: false,
                rx: Vec::new(),
                want_json: false,
                creating: false,
                setup: None,
                streams: Vec::new(),
                started: None,
                test_end_sent: false,
                sent: Vec::new(),
                received: Vec::new(),
                datagrams: Vec::new(),
                highest: Vec::new(),
                server_results: None,
                denied: false,
                server_error: None,
                done: false,
                block: vec![0x5a; cfg.len.max(16)],
            }
        }

        fn send_ctrl(&mut self, stack: &mut Stack, data: &[u8]) {
            assert_eq!(stack.tcp_send(self.ctrl, data), Ok(data.len()));
        }

        fn send_json(&mut self, stack: &mut Stack, v: &Value) {
            let text = v.to_string();
            let mut msg = (text.len() as u32).to_be_bytes().to_vec();
            msg.extend_from_slice(text.as_bytes());
            self.send_ctrl(stack, &msg);
        }

        fn params(&self) -> Value {
            let mut v = json!({
                "omit": 0,
                "time": self.cfg.duration.as_millis() / 1000,
                "num": 0,
                "blockcount": 0,
                "parallel": self.cfg.parallel,
                "len": self.cfg.len,
                "pacing_timer": 1000,
                "client_version": "3.12",
            });
            if self.cfg.udp {
                v["udp"] = json!(true);
                v["bandwidth"] = json!(self.cfg.rate * 8);
            } else {
                v["tcp"] = json!(true);
            }
            if self.cfg.reverse {
                v["reverse"] = json!(true);
            }
            if self.cfg.bidir {
                v["bidirectional"] = json!(true);
            }
            v
        }

        fn results(&self) -> Value {
            let sender = !self.cfg.reverse;
            let streams: Vec<Value> = (0..self.streams.len())
                .map(|i| {
                    json!({
                        "id": if i == 0 { 1 } else { i + 2 },
                        "bytes": if sender { self.sent[i] } else { self.received[i] },
                        "retransmits": if sender { 0 } else { -1 },
                        "jitter": 0.0,
                        "errors": 0,
                        "packets": self.datagrams[i],
                        "start_time": 0.0,
                        "end_time": self.cfg.duration.as_secs_f64(),
                    })
                })
                .collect();
            json!({
                "cpu_util_total": 1.0,
                "cpu_util_user": 0.5,
                "cpu_util_system": 0.5,
                "sender_has_retransmits": if sender { 0 } else { -1 },
                "streams": streams,
            })
        }

        /// Vanishes: every socket reset, nothing more said.
        /// Goes away without a word: every connection reset.
        fn vanish(&mut self, stack: &mut Stack) {
            self.end(stack, true);
        }

        fn poll(&mut self, stack: &mut Stack, now: Instant) {
            if self.done {
                return;
            }
            if !self.cookie_sent {
                if stack.tcp_state(self.ctrl) != Ok(State::Established) {
                    return;
                }
                let cookie = self.cookie;
                self.send_ctrl(stack, &cookie);
                self.cookie_sent = true;
            }
            let mut buf = [0u8; 4096];
            loop {
                match stack.tcp_recv(self.ctrl, &mut buf) {
                    Ok(0) => break,
                    Ok(n) => self.rx.extend_from_slice(&buf[..n]),
                    Err(TcpError::WouldBlock) => break,
                    Err(e) => panic!("client control: {e}"),
                }
            }
            self.control(stack, now);
            if self.done {
                return;
            }
            if self.creating {
                self.create_streams(stack, now);
            }
            self.data(stack, now);
        }

        fn control(&mut self, stack: &mut Stack, now: Instant) {
            loop {
                if self.want_json {
                    match take_json(&mut self.rx).unwrap() {
                        Some(v) => {
                            self.server_results = Some(v);
                            self.want_json = false;
                            continue;
                        }
                        None => return,
                    }
                }
                let Some(b) = take_byte(&mut self.rx) else {
                    return;
                };
                match b {
                    PARAM_EXCHANGE => {
                        let p = self.params();
                        self.send_json(stack, &p);
                    }
                    CREATE_STREAMS => self.creating = true,
                    TEST_START => {}
                    TEST_RUNNING => self.started = Some(now),
                    EXCHANGE_RESULTS => {
                        let r = self.results();
                        self.send_json(stack, &r);
                        self.want_json = true;
                    }
                    DISPLAY_RESULTS => {
                        self.send_ctrl(stack, &[IPERF_DONE]);
                        self.close(stack);
                        return;
                    }
                    ACCESS_DENIED => {
                        self.denied = true;
                        self.close(stack);
                        return;
                    }
                    SERVER_ERROR => {
                        if self.rx.len() < 8 {
                            self.rx.insert(0, b);
                            return;
                        }
                        let e =
                            i32::from_be_bytes([self.rx[0], self.rx[1], self.rx[2], self.rx[3]]);
                        self.server_error = Some(e);
                        self.close(stack);
                        return;
                    }
                    b => panic!("client: unexpected state {b}"),
                }
            }
        }

        fn close(&mut self, stack: &mut Stack) {
            self.end(stack, false);
        }

        /// Closes (or with `abort`, resets) the control connection and every stream.
        fn end(&mut self, stack: &mut Stack, abort: bool) {
            let tcp_end = |stack: &mut Stack, h: TcpHandle| {
                let _ = if abort {
                    stack.tcp_abort(h)
                } else {
                    stack.tcp_close(h)
                };
            };
            tcp_end(stack, self.ctrl);
            for d in &self.streams {
                match d {
                    Data::Tcp(h) => tcp_end(stack, *h),
                    Data::Udp(u) => {
                        let _ = stack.udp_close(*u);
                    }
                }
            }
            self.done = true;
        }

        /// One stream at a time, as iperf3's client connects them.
        fn create_streams(&mut self, stack: &mut Stack, now: Instant) {
            if self.streams.len() == self.cfg.parallel {
                self.creating = false;
                return;
            }
            match self.setup.take() {
                None => {
                    self.setup = Some(if self.cfg.udp {
                        let u = stack.udp_open();
                        stack.udp_connect(u, ADDR_B, PORT).unwrap();
                        // The connect message, written in host order like iperf3's.
                        stack.udp_send(u, &0x3637_3839u32.to_le_bytes()).unwrap();
                        Setup::Udp(u, now)
                    } else {
                        Setup::Tcp(stack.tcp_connect((ADDR_B, PORT)).unwrap())
                    });
                }
                Some(Setup::Tcp(h)) => {
                    if stack.tcp_state(h) == Ok(State::Established) {
                        assert_eq!(stack.tcp_send(h, &self.cookie), Ok(COOKIE_SIZE));
                        self.add(Data::Tcp(h));
                    } else {
                        self.setup = Some(Setup::Tcp(h));
                    }
                }
                Some(Setup::Udp(u, since)) => {
                    let mut b = [0u8; 64];
                    match stack.udp_recv(u, &mut b) {
                        Ok(4) => {
                            assert_eq!(b[..4], UDP_CONNECT_REPLY.to_le_bytes());
                            self.add(Data::Udp(u));
                        }
                        Ok(n) => panic!("a {n}-byte UDP connect reply"),
                        Err(UdpError::WouldBlock) => {
                            // Lost on the wire (the tests drop frames): ask again.
                            let since = if now - since >= Duration::from_millis(200) {
                                stack.udp_send(u, &0x3637_3839u32.to_le_bytes()).unwrap();
                                now
                            } else {
                                since
                            };
                            self.setup = Some(Setup::Udp(u, since));
                        }
                        Err(e) => panic!("UDP connect: {e}"),
                    }
                }
            }
        }

        fn add(&mut self, d: Data) {
            self.streams.push(d);
            self.sent.push(0);
            self.received.push(0);
            self.datagrams.push(0);
            self.highest.push(0);
        }

        fn data(&mut self, stack: &mut Stack, now: Instant) {
            let mut buf = vec![0u8; 64 * 1024];
            // Reverse: read whatever comes, until the end.
            if self.cfg.reverse {
                for (i, d) in self.streams.iter().enumerate() {
                    match d {
                        Data::Tcp(h) => {
                            while let Ok(n) = stack.tcp_recv(*h, &mut buf) {
                                if n == 0 {
                                    break;
                                }
                                if !self.test_end_sent {
                                    self.received[i] += n as u64;
                                }
                            }
                        }
                        Data::Udp(u) => {
                            while let Ok(n) = stack.udp_recv(*u, &mut buf) {
                                assert!(n >= 12);
                                let count = u32::from_be_bytes([buf[8], buf[9], buf[10], buf[11]]);
                                assert!(u64::from(count) > self.highest[i], "reordered");
                                self.highest[i] = u64::from(count);
                                self.received[i] += n as u64;
                                self.datagrams[i] += 1;
                            }
                        }
                    }
                }
            }
            let Some(start) = self.started else { return };
            if self.test_end_sent {
                return;
            }
            let elapsed = now - start;
            if elapsed >= self.cfg.duration {
                self.send_ctrl(stack, &[TEST_END]);
                self.test_end_sent = true;
                return;
            }
            if self.cfg.reverse {
                return;
            }
            let n = self.streams.len() as u64;
            let allowed = (self.cfg.rate as f64 * elapsed.as_secs_f64()) as u64 / n;
            for (i, d) in self.streams.iter().enumerate() {
                match d {
                    Data::Tcp(h) => {
                        while self.sent[i] < allowed {
                            let want = ((allowed - self.sent[i]) as usize).min(self.block.len());
                            match stack.tcp_send(*h, &self.block[..want]) {
                                Ok(n) => self.sent[i] += n as u64,
                                Err(TcpError::WouldBlock) => break,
                                Err(e) => panic!("client stream: {e}"),
                            }
                        }
                    }
                    Data::Udp(u) => {
                        while self.sent[i] + self.cfg.len as u64 <= allowed {
                            let mut dgram = vec![0u8; self.cfg.len];
                            let us = now.as_micros();
                            dgram[0..4].copy_from_slice(&((us / 1_000_000) as u32).to_be_bytes());
                            dgram[4..8].copy_from_slice(&((us % 1_000_000) as u32).to_be_bytes());
                            self.datagrams[i] += 1;
                            dgram[8..12].copy_from_slice(&(self.datagrams[i] as u32).to_be_bytes());
                            stack.udp_send(*u, &dgram).unwrap();
                            self.sent[i] += dgram.len() as u64;
                        }
                    }
                }
            }
        }

        /// The server's per-stream results, by id.
        fn server_stream(&self, id: u64) -> &Value {
            let streams = self.server_results.as_ref().expect("server results")["streams"]
                .as_array()
                .unwrap();
            streams
                .iter()
                .find(|s| s["id"] == json!(id))
                .expect("stream id")
        }
    }

    fn pair(drop_to_server: f64) -> Pair {
        let a = HostConfig::with_mtu(1500);
        let mut b = HostConfig::with_mtu(1500);
        if drop_to_server > 0.0 {
            b.nic.rx_faults = FaultConfig {
                drop: drop_to_server,
                ..FaultConfig::seeded(8)
            };
        }
        Pair::new(a, b).unwrap()
    }

    std::thread_local! {
        /// The longest step of the virtual clock in `drive`, nanoseconds (the link's
        /// delayed frames are delivered at the next step).
        static TICK: std::cell::Cell<u64> = const { std::cell::Cell::new(1_000_000) };
    }

    /// Runs server and clients on the virtual clock, a `TICK` at a time at most, until
    /// `stop` holds or `timeout` passes; whether `stop` held.
    fn drive(
        p: &mut Pair,
        server: &mut Iperf3Server,
        clients: &mut [&mut Client],
        timeout: Duration,
        mut stop: impl FnMut(&Iperf3Server, &[&mut Client]) -> bool,
    ) -> bool {
        let limit = p.now() + timeout;
        loop {
            let now = p.now();
            for _ in 0..3 {
                server.poll(&mut p.b, now);
                for c in clients.iter_mut() {
                    c.poll(&mut p.a, now);
                }
                p.settle();
            }
            if stop(server, clients) {
                return true;
            }
            if now >= limit {
                return false;
            }
            let tick = now + Duration::from_nanos(TICK.with(|t| t.get()));
            let next = p.settle().map_or(tick, |t| t.min(tick));
            p.clock.advance_to(next.max(now + Duration::from_micros(1)));
        }
    }

    #[test]
    fn a_udp_counter_that_leaps_is_ignored_and_loss_stays_sane() {
        let mut st = Stream::new(1, StreamKind::Udp((Ipv4Address::new(198, 18, 0, 1), 5000)));
        let datagram = |count: u64| {
            let mut d = vec![0u8; 64];
            d[8..12].copy_from_slice(&((count >> 32) as u32).to_be_bytes());
            d[12..16].copy_from_slice(&(count as u32).to_be_bytes());
            d
        };
        let now = Instant::ZERO;
        assert!(st.udp_datagram(&datagram(1), true, now));
        assert!(st.udp_datagram(&datagram(5), true, now));
        assert_eq!((st.packets, st.lost), (5, 3));
        // A forged counter near 2^64 is refused, not counted as 2^64 losses.
        assert!(!st.udp_datagram(&datagram(u64::MAX - 1), true, now));
        assert!(st.udp_datagram(&datagram(6), true, now));
        assert_eq!((st.packets, st.lost), (6, 3));
        assert!(!st.udp_datagram(&[0u8; 10], true, now), "too short");
    }

    /// Runs one test to its end; returns the client.
    fn run_test(p: &mut Pair, server: &mut Iperf3Server, cfg: Cfg, tag: u8) -> Client {
        let mut c = Client::start(&mut p.a, cfg, tag);
        let finished = drive(p, server, &mut [&mut c], Duration::from_secs(30), |s, c| {
            c[0].done && !s.busy()
        });
        assert!(finished, "the test did not finish: {:?}", server.stats());
        assert!(c.server_results.is_some(), "no results from the server");
        c
    }

    #[test]
    fn tcp_test_client_sends() {
        let mut p = pair(0.0);
        let mut server = Iperf3Server::new(&mut p.b, PORT).unwrap();
        let c = run_test(&mut p, &mut server, Cfg::tcp(), 1);
        let st = server.stats();
        assert_eq!((st.tests_started, st.tests_completed, st.errors), (1, 1, 0));
        // 20 MB/s for a second.
        assert!(c.sent[0] > 19_000_000, "sent {}", c.sent[0]);
        let r = c.server_stream(1);
        let got = r["bytes"].as_u64().unwrap();
        assert!(
            got <= c.sent[0] && got + 500_000 >= c.sent[0],
            "server got {got} of {}",
            c.sent[0]
        );
        assert_eq!(st.bytes_received, got);
        let res = c.server_results.as_ref().unwrap();
        assert_eq!(res["sender_has_retransmits"], json!(-1));
        for k in ["cpu_util_total", "cpu_util_user", "cpu_util_system"] {
            assert!(res[k].is_number(), "{k}");
        }
        for k in ["retransmits", "jitter", "errors", "packets"] {
            assert!(r[k].is_number(), "{k}");
        }
        assert!((r["end_time"].as_f64().unwrap() - 1.0).abs() < 0.1);
    }

    #[test]
    fn reverse_test_server_sends() {
        let mut p = pair(0.0);
        let mut server = Iperf3Server::new(&mut p.b, PORT).unwrap();
        let cfg = Cfg {
            reverse: true,
            ..Cfg::tcp()
        };
        let c = run_test(&mut p, &mut server, cfg, 2);
        let st = server.stats();
        assert_eq!((st.tests_completed, st.errors), (1, 0));
        let sent = c.server_stream(1)["bytes"].as_u64().unwrap();
        assert!(c.received[0] > 1_000_000, "received {}", c.received[0]);
        assert!(
            sent >= c.received[0],
            "server sent {sent}, client got {}",
            c.received[0]
        );
        assert_eq!(st.bytes_sent, sent);
        assert_eq!(
            c.server_results.as_ref().unwrap()["sender_has_retransmits"],
            json!(1)
        );
        assert_eq!(c.server_stream(1)["retransmits"], json!(0));
    }

    #[test]
    fn two_streams_and_a_second_test() {
        let mut p = pair(0.0);
        let mut server = Iperf3Server::new(&mut p.b, PORT).unwrap();
        let cfg = Cfg {
            parallel: 2,
            ..Cfg::tcp()
        };
        let c = run_test(&mut p, &mut server, cfg, 3);
        // iperf3 numbers streams 1, 3, 4, ...
        let ids: Vec<u64> = c.server_results.as_ref().unwrap()["streams"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["id"].as_u64().unwrap())
            .collect();
        assert_eq!(ids, [1, 3]);
        for (i, id) in [1, 3].into_iter().enumerate() {
            let got = c.server_stream(id)["bytes"].as_u64().unwrap();
            assert!(
                got > 9_000_000 && got <= c.sent[i],
                "stream {id}: {got} of {}",
                c.sent[i]
            );
        }
        // The server keeps listening: a second test, in reverse this time.
        let cfg = Cfg {
            reverse: true,
            ..Cfg::tcp()
        };
        let c2 = run_test(&mut p, &mut server, cfg, 4);
        assert!(c2.received[0] > 1_000_000);
        let st = server.stats();
        assert_eq!((st.tests_started, st.tests_completed, st.errors), (2, 2, 0));
    }

    #[test]
    fn udp_test_counts_loss() {
        let mut p = pair(0.05);
        let mut server = Iperf3Server::new(&mut p.b, PORT).unwrap();
        let c = run_test(&mut p, &mut server, Cfg::udp(), 5);
        let st = server.stats();
        assert_eq!((st.tests_completed, st.errors), (1, 0));
        let r = c.server_stream(1);
        let sent = c.datagrams[0];
        let packets = r["packets"].as_u64().unwrap();
        let lost = r["errors"].as_u64().unwrap();
        let received = r["bytes"].as_u64().unwrap() / Cfg::udp().len as u64;
        // 10 Mbit/s of 1000-byte datagrams for 2 s.
        assert!((2400..=2500).contains(&sent), "sent {sent}");
        // The highest counter seen is at most what was sent; every gap below it is loss.
        assert!(
            packets <= sent && packets + 20 >= sent,
            "{packets} of {sent}"
        );
        assert_eq!(lost, packets - received, "lost vs counters");
        // 5% of frames dropped on the way to the server.
        let rate = lost as f64 / sent as f64;
        assert!((0.03..0.07).contains(&rate), "loss {rate}");
        assert_eq!(st.udp_lost, lost);
        println!("UDP: sent {sent}, highest counter {packets}, received {received}, lost {lost}");
        assert!(r["jitter"].as_f64().unwrap() >= 0.0);
        assert_eq!(st.udp_out_of_order, 0);
    }

    #[test]
    fn udp_jitter_reported() {
        let mut a = HostConfig::with_mtu(1500);
        let mut b = HostConfig::with_mtu(1500);
        a.nic.rx_faults = FaultConfig::none();
        b.nic.rx_faults = FaultConfig {
            jitter: Duration::from_micros(500),
            ..FaultConfig::seeded(3)
        };
        let mut p = Pair::new(a, b).unwrap();
        let mut server = Iperf3Server::new(&mut p.b, PORT).unwrap();
        TICK.with(|t| t.set(50_000));
        let cfg = Cfg {
            duration: Duration::from_millis(500),
            ..Cfg::udp()
        };
        let c = run_test(&mut p, &mut server, cfg, 6);
        let j = c.server_stream(1)["jitter"].as_f64().unwrap();
        // Uniform 0-500 µs of extra delay: a jitter of the order of 100 µs.
        assert!(j > 20e-6 && j < 500e-6, "jitter {j}");
    }

    #[test]
    fn udp_reverse_server_paces_datagrams() {
        let mut p = pair(0.0);
        let mut server = Iperf3Server::new(&mut p.b, PORT).unwrap();
        let cfg = Cfg {
            reverse: true,
            parallel: 2,
            ..Cfg::udp()
        };
        let c = run_test(&mut p, &mut server, cfg, 14);
        let st = server.stats();
        assert_eq!((st.tests_completed, st.errors), (1, 0));
        for (i, id) in [1, 3].into_iter().enumerate() {
            let r = c.server_stream(id);
            let packets = r["packets"].as_u64().unwrap();
            // 10 Mbit/s per stream, 1000-byte datagrams, 2 s: about 2500 each (the server
            // starts when it sends TEST_RUNNING, ends when TEST_END arrives).
            assert!((2400..=2600).contains(&packets), "stream {id}: {packets}");
            assert_eq!(r["bytes"].as_u64().unwrap(), packets * 1000);
            // Nothing lost on a clean link: what arrived is what was sent, in order.
            assert!(c.datagrams[i] + 5 >= packets && c.datagrams[i] <= packets);
            assert_eq!(c.highest[i], c.datagrams[i]);
        }
        assert_eq!(
            c.server_results.as_ref().unwrap()["sender_has_retransmits"],
            json!(0)
        );
    }

    #[test]
    fn client_vanishing_mid_test() {
        let mut p = pair(0.0);
        let mut server = Iperf3Server::new(&mut p.b, PORT).unwrap();
        let cfg = Cfg {
            parallel: 2,
            duration: Duration::from_secs(10),
            ..Cfg::tcp()
        };
        let mut c = Client::start(&mut p.a, cfg, 7);
        assert!(drive(
            &mut p,
            &mut server,
            &mut [&mut c],
            Duration::from_secs(5),
            |s, c| { c[0].started.is_some() && s.stats().bytes_received > 1_000_000 }
        ));
        c.vanish(&mut p.a);
        assert!(drive(
            &mut p,
            &mut server,
            &mut [],
            Duration::from_secs(5),
            |s, _| !s.busy()
        ));
        let st = server.stats();
        assert_eq!((st.tests_completed, st.errors), (0, 1));
        assert!(st.last_error.is_some());
        // Back to listening: the next test runs.
        run_test(&mut p, &mut server, Cfg::tcp(), 8);
        assert_eq!(server.stats().tests_completed, 1);
    }

    #[test]
    fn client_closing_mid_test_and_going_quiet() {
        let mut p = pair(0.0);
        let mut server = Iperf3Server::new(&mut p.b, PORT).unwrap();
        // Closes its control connection (a FIN, not a reset) during the test.
        let mut c = Client::start(&mut p.a, Cfg::tcp(), 9);
        assert!(drive(
            &mut p,
            &mut server,
            &mut [&mut c],
            Duration::from_secs(5),
            |_, c| { c[0].started.is_some() }
        ));
        c.close(&mut p.a);
        assert!(drive(
            &mut p,
            &mut server,
            &mut [],
            Duration::from_secs(5),
            |s, _| !s.busy()
        ));
        assert_eq!(server.stats().errors, 1);
        // Stops talking after its cookie: the server gives up after a minute.
        let mut q = Client::start(&mut p.a, Cfg::tcp(), 10);
        assert!(drive(
            &mut p,
            &mut server,
            &mut [&mut q],
            Duration::from_secs(5),
            |s, _| s.busy()
        ));
        q.done = true;
        assert!(drive(
            &mut p,
            &mut server,
            &mut [],
            Duration::from_secs(90),
            |s, _| !s.busy()
        ));
        assert_eq!(server.stats().errors, 2);
    }

    #[test]
    fn second_client_is_turned_away_and_unsupported_options_refused() {
        let mut p = pair(0.0);
        let mut server = Iperf3Server::new(&mut p.b, PORT).unwrap();
        let mut first = Client::start(&mut p.a, Cfg::tcp(), 11);
        assert!(drive(
            &mut p,
            &mut server,
            &mut [&mut first],
            Duration::from_secs(5),
            |_, c| { c[0].started.is_some() }
        ));
        let mut second = Client::start(&mut p.a, Cfg::tcp(), 12);
        assert!(drive(
            &mut p,
            &mut server,
            &mut [&mut first, &mut second],
            Duration::from_secs(30),
            |s, c| c[0].done && c[1].done && !s.busy()
        ));
        assert!(second.denied);
        assert!(first.server_results.is_some());
        // Bidirectional tests are not done here: SERVER_ERROR with IEUNIMP.
        let cfg = Cfg {
            bidir: true,
            ..Cfg::tcp()
        };
        let mut c = Client::start(&mut p.a, cfg, 13);
        assert!(drive(
            &mut p,
            &mut server,
            &mut [&mut c],
            Duration::from_secs(5),
            |s, c| { c[0].done && !s.busy() }
        ));
        assert_eq!(c.server_error, Some(IE_UNIMPLEMENTED as i32));
        let st = server.stats();
        assert_eq!((st.tests_completed, st.access_denied, st.errors), (1, 1, 1));
    }

    #[test]
    fn garbage_on_the_control_connection_is_an_error() {
        let mut p = pair(0.0);
        let mut server = Iperf3Server::new(&mut p.b, PORT).unwrap();
        let h = p.a.tcp_connect((ADDR_B, PORT)).unwrap();
        let mut junk = vec![b'x'; COOKIE_SIZE];
        junk.extend_from_slice(&[0, 0, 0, 5, b'{', b'{', b'{', b'{', b'{']);
        let mut sent = false;
        let ok = p.run_until(Duration::from_secs(1), |p| {
            if !sent && p.a.tcp_state(h) == Ok(State::Established) {
                sent = p.a.tcp_send(h, &junk) == Ok(junk.len());
            }
            sent
        });
        assert!(ok);
        assert!(drive(
            &mut p,
            &mut server,
            &mut [],
            Duration::from_secs(5),
            |s, _| { s.stats().errors == 1 && !s.busy() }
        ));
        assert!(server.stats().last_error.unwrap().contains("JSON"));
    }
}
