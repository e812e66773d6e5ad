//! The small services of the Internet's early days, on one stack, over UDP and TCP: echo
//! (port 7, RFC 862), discard (port 9, RFC 863) and character generator (port 19, RFC
//! 864). Each is a listener with a backlog serving many connections, and a UDP socket.
//!
//! [`Services::poll`] is the application's turn in the runner's loop: it reads and writes
//! the sockets without blocking, and keeps what it could not send yet for the next turn.

use probestack::rng::Rng;
use probestack::socket::tcp::{TcpError, TcpHandle};
use probestack::socket::udp::UdpHandle;
use probestack::stack::Stack;
use probestack::time::Instant;
use probestack::wire::Ipv4Address;

pub const ECHO_PORT: u16 = 7;
pub const DISCARD_PORT: u16 = 9;
pub const CHARGEN_PORT: u16 = 19;

/// Connections handshaking or waiting to be accepted, per listener.
pub const BACKLOG: usize = 128;

/// RFC 864's UDP reply: "a random number (between 0 and 512) of characters".
pub const CHARGEN_UDP_MAX: usize = 512;

/// One chargen line: 72 printable characters, then CR LF (RFC 864).
pub const CHARGEN_LINE: usize = 74;

/// The printable ASCII characters chargen cycles through: 95 of them, from space.
const PRINTABLE: u64 = 95;

/// The byte at `offset` of RFC 864's stream: line `k` holds the 72 characters from the
/// `k`-th printable character on (wrapping after `~`), then CR LF.
pub fn chargen_byte(offset: u64) -> u8 {
    let (line, col) = (offset / CHARGEN_LINE as u64, offset % CHARGEN_LINE as u64);
    match col {
        72 => b'\r',
        73 => b'\n',
        _ => b' ' + ((line + col) % PRINTABLE) as u8,
    }
}

/// Fills `out` with the stream from `offset` on.
pub fn chargen_fill(offset: u64, out: &mut [u8]) {
    for (i, b) in out.iter_mut().enumerate() {
        *b = chargen_byte(offset + i as u64);
    }
}

/// What one service did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub udp_datagrams_in: u64,
    pub udp_bytes_in: u64,
    pub udp_datagrams_out: u64,
    pub udp_bytes_out: u64,
    /// Replies the stack refused (no buffer, no route...).
    pub udp_send_errors: u64,
    pub tcp_accepted: u64,
    /// Connections closed in order (after the peer's end of stream).
    pub tcp_closed: u64,
    /// Connections that ended in an error (reset, timed out).
    pub tcp_errors: u64,
    pub tcp_bytes_in: u64,
    pub tcp_bytes_out: u64,
}

impl Counts {
    /// The counts that are not zero, by name.
    pub fn nonzero(&self) -> Vec<(&'static str, u64)> {
        [
            ("udp_datagrams_in", self.udp_datagrams_in),
            ("udp_bytes_in", self.udp_bytes_in),
            ("udp_datagrams_out", self.udp_datagrams_out),
            ("udp_bytes_out", self.udp_bytes_out),
            ("udp_send_errors", self.udp_send_errors),
            ("tcp_accepted", self.tcp_accepted),
            ("tcp_closed", self.tcp_closed),
            ("tcp_errors", self.tcp_errors),
            ("tcp_bytes_in", self.tcp_bytes_in),
            ("tcp_bytes_out", self.tcp_bytes_out),
        ]
        .into_iter()
        .filter(|&(_, v)| v != 0)
        .collect()
    }
}

/// Which of the three.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Echo,
    Discard,
    Chargen,
}

/// One TCP connection of a service.
struct Conn {
    h: TcpHandle,
    /// Echo: bytes read and not yet sent back.
    pending: Vec<u8>,
    /// Echo: the peer's end of stream came; close once `pending` is sent.
    eof: bool,
    /// Chargen: bytes of the stream sent so far.
    offset: u64,
}

/// What a turn left a connection in.
enum Outcome {
    Open,
    Closed,
    Failed,
}

/// One service: its UDP socket, its listener and its connections.
struct Service {
    kind: Kind,
    udp: UdpHandle,
    listener: TcpHandle,
    conns: Vec<Conn>,
    counts: Counts,
}

/// Echo, discard and chargen on one stack.
pub struct Services {
    echo: Service,
    discard: Service,
    chargen: Service,
    /// Lengths of chargen's UDP replies.
    rng: Rng,
    /// Chargen's UDP replies start one line further each time (as inetd's do).
    chargen_udp_line: u64,
    scratch: Vec<u8>,
}

impl Services {
    /// Opens the sockets on all of the stack's addresses.
    pub fn new(stack: &mut Stack) -> Result<Services, String> {
        Ok(Services {
            echo: Service::open(stack, Kind::Echo, ECHO_PORT)?,
            discard: Service::open(stack, Kind::Discard, DISCARD_PORT)?,
            chargen: Service::open(stack, Kind::Chargen, CHARGEN_PORT)?,
            rng: Rng::new(0x864),
            chargen_udp_line: 0,
            scratch: vec![0; 64 * 1024],
        })
    }

    /// The application's turn: serves every socket as far as it can without waiting.
    pub fn poll(&mut self, stack: &mut Stack, _now: Instant) {
        let scratch = &mut self.scratch;
        self.echo.poll_udp(stack, scratch, Vec::new);
        self.discard.poll_udp(stack, scratch, Vec::new);
        let (rng, line) = (&mut self.rng, &mut self.chargen_udp_line);
        self.chargen.poll_udp(stack, scratch, || {
            let len = rng.below(CHARGEN_UDP_MAX as u64 + 1) as usize;
            let mut d = vec![0u8; len];
            chargen_fill(*line * CHARGEN_LINE as u64, &mut d);
            *line += 1;
            d
        });
        for s in [&mut self.echo, &mut self.discard, &mut self.chargen] {
            s.poll_tcp(stack, scratch);
        }
    }

    /// What each service did, by service name.
    pub fn counts(&self) -> [(&'static str, Counts); 3] {
        [
            ("echo", self.echo.counts),
            ("discard", self.discard.counts),
            ("chargen", self.chargen.counts),
        ]
    }

    /// TCP connections open now, over the three services.
    pub fn open_connections(&self) -> usize {
        self.echo.conns.len() + self.discard.conns.len() + self.chargen.conns.len()
    }
}

impl Service {
    fn open(stack: &mut Stack, kind: Kind, port: u16) -> Result<Service, String> {
        let any = Ipv4Address::UNSPECIFIED;
        let udp = stack.udp_open();
        stack
            .udp_bind(udp, any, port)
            .map_err(|e| format!("UDP port {port}: {e}"))?;
        let listener = stack
            .tcp_listen((any, port), BACKLOG)
            .map_err(|e| format!("TCP port {port}: {e}"))?;
        Ok(Service {
            kind,
            udp,
            listener,
            conns: Vec::new(),
            counts: Counts::default(),
        })
    }

    /// Receives every datagram queued; echo sends each back, chargen sends what `reply`
    /// makes, discard nothing.
    fn poll_udp(&mut self, stack: &mut Stack, buf: &mut [u8], mut reply: impl FnMut() -> Vec<u8>) {
        loop {
            let r = match stack.udp_recv_from(self.udp, buf) {
                Ok(r) => r,
                // Nothing queued (or the handle is gone): nothing to serve.
                Err(_) => return,
            };
            self.counts.udp_datagrams_in += 1;
            self.counts.udp_bytes_in += r.datagram_len as u64;
            let generated;
            let out: &[u8] = match self.kind {
                Kind::Echo => &buf[..r.len],
                Kind::Discard => continue,
                Kind::Chargen => {
                    generated = reply();
                    &generated
                }
            };
            match stack.udp_send_to(self.udp, out, r.from.0, r.from.1) {
                Ok(n) => {
                    self.counts.udp_datagrams_out += 1;
                    self.counts.udp_bytes_out += n as u64;
                }
                Err(_) => self.counts.udp_send_errors += 1,
            }
        }
    }

    /// Accepts what the listener has, then gives each connection its turn.
    fn poll_tcp(&mut self, stack: &mut Stack, buf: &mut [u8]) {
        while let Ok(h) = stack.tcp_accept(self.listener) {
            self.counts.tcp_accepted += 1;
            self.conns.push(Conn {
                h,
                pending: Vec::new(),
                eof: false,
                offset: 0,
            });
        }
        let mut i = 0;
        while i < self.conns.len() {
            let outcome = match self.kind {
                Kind::Echo => echo_turn(stack, &mut self.conns[i], buf, &mut self.counts),
                Kind::Discard => discard_turn(stack, &self.conns[i], buf, &mut self.counts),
                Kind::Chargen => chargen_turn(stack, &mut self.conns[i], buf, &mut self.counts),
            };
            match outcome {
                Outcome::Open => i += 1,
                Outcome::Closed | Outcome::Failed => {
                    let c = self.conns.swap_remove(i);
                    let _ = stack.tcp_close(c.h);
                    match outcome {
                        Outcome::Closed => self.counts.tcp_closed += 1,
                        _ => self.counts.tcp_errors += 1,
                    }
                }
            }
        }
    }
}

/// Echo: sends back what is pending, then reads more; closes after the peer's end of
/// stream once everything is sent back. Reads only when nothing is pending, so what it
/// holds is bounded by what one read returns.
fn echo_turn(stack: &mut Stack, c: &mut Conn, buf: &mut [u8], n: &mut Counts) -> Outcome {
    loop {
        while !c.pending.is_empty() {
            match stack.tcp_send(c.h, &c.pending) {
                Ok(k) => {
                    c.pending.drain(..k);
                    n.tcp_bytes_out += k as u64;
                }
                Err(TcpError::WouldBlock) => return Outcome::Open,
                Err(_) => return Outcome::Failed,
            }
        }
        if c.eof {
            return Outcome::Closed;
        }
        match stack.tcp_recv(c.h, buf) {
            Ok(0) => c.eof = true,
            Ok(k) => {
                n.tcp_bytes_in += k as u64;
                c.pending.extend_from_slice(&buf[..k]);
            }
            Err(TcpError::WouldBlock) => return Outcome::Open,
            Err(_) => return Outcome::Failed,
        }
    }
}

/// Discard: reads and forgets; closes at the peer's end of stream.
fn discard_turn(stack: &mut Stack, c: &Conn, buf: &mut [u8], n: &mut Counts) -> Outcome {
    loop {
        match stack.tcp_recv(c.h, buf) {
            Ok(0) => return Outcome::Closed,
            Ok(k) => n.tcp_bytes_in += k as u64,
            Err(TcpError::WouldBlock) => return Outcome::Open,
            Err(_) => return Outcome::Failed,
        }
    }
}

/// Chargen: throws away what the peer sends, closes when the peer does, and otherwise
/// writes the stream while the send buffer has room.
fn chargen_turn(stack: &mut Stack, c: &mut Conn, buf: &mut [u8], n: &mut Counts) -> Outcome {
    loop {
        match stack.tcp_recv(c.h, buf) {
            Ok(0) => return Outcome::Closed,
            Ok(k) => n.tcp_bytes_in += k as u64,
            Err(TcpError::WouldBlock) => break,
            Err(_) => return Outcome::Failed,
        }
    }
    loop {
        let room = match stack.tcp_send_capacity(c.h) {
            Ok(0) => return Outcome::Open,
            Ok(r) => r.min(buf.len()),
            Err(_) => return Outcome::Failed,
        };
        chargen_fill(c.offset, &mut buf[..room]);
        match stack.tcp_send(c.h, &buf[..room]) {
            Ok(k) => {
                c.offset += k as u64;
                n.tcp_bytes_out += k as u64;
            }
            Err(TcpError::WouldBlock) => return Outcome::Open,
            Err(_) => return Outcome::Failed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use probestack::sim::{HostConfig, Pair, ADDR_A, ADDR_B};
    use probestack::tcp::connection::State;
    use probestack::time::Duration;

    fn setup() -> (Pair, Services) {
        let mut pair = Pair::new(HostConfig::with_mtu(1500), HostConfig::with_mtu(1500)).unwrap();
        let services = Services::new(&mut pair.b).unwrap();
        (pair, services)
    }

    /// Runs the pair with the services on B until `done` (given A) holds.
    fn run_until(
        pair: &mut Pair,
        svc: &mut Services,
        secs: u64,
        mut done: impl FnMut(&mut Stack) -> bool,
    ) -> bool {
        pair.run_until(Duration::from_secs(secs), |p| {
            let now = p.now();
            svc.poll(&mut p.b, now);
            done(&mut p.a)
        })
    }

    #[test]
    fn chargen_stream_is_rfc_864() {
        let mut line = vec![0u8; 2 * CHARGEN_LINE];
        chargen_fill(0, &mut line);
        let first: String = (b' '..=b'g').map(char::from).collect();
        assert_eq!(&line[..72], first.as_bytes());
        assert_eq!(&line[72..74], b"\r\n");
        let second: String = (b'!'..=b'h').map(char::from).collect();
        assert_eq!(&line[74..146], second.as_bytes());
        // Line 94 starts at '~' and wraps to space.
        let mut l94 = vec![0u8; 3];
        chargen_fill(94 * CHARGEN_LINE as u64, &mut l94);
        assert_eq!(&l94, b"~ !");
        // After 95 lines the pattern repeats.
        let mut l95 = vec![0u8; CHARGEN_LINE];
        chargen_fill(95 * CHARGEN_LINE as u64, &mut l95);
        assert_eq!(l95, line[..CHARGEN_LINE]);
    }

    #[test]
    fn udp_echo_discard_and_chargen() {
        let (mut pair, mut svc) = setup();
        let s = pair.a.udp_open();
        pair.a.udp_bind(s, ADDR_A, 5000).unwrap();
        for (i, port) in [ECHO_PORT, DISCARD_PORT, CHARGEN_PORT, CHARGEN_PORT]
            .into_iter()
            .enumerate()
        {
            let msg = format!("datagram {i}");
            pair.a.udp_send_to(s, msg.as_bytes(), ADDR_B, port).unwrap();
        }
        let mut got: Vec<(u16, Vec<u8>)> = Vec::new();
        let mut buf = [0u8; 2048];
        run_until(&mut pair, &mut svc, 5, |a| {
            while let Ok(r) = a.udp_recv_from(s, &mut buf) {
                got.push((r.from.1, buf[..r.len].to_vec()));
            }
            got.len() >= 3
        });
        // A little longer: anything from discard would show up.
        pair.run_for(Duration::from_millis(100));
        while let Ok(r) = pair.a.udp_recv_from(s, &mut buf) {
            got.push((r.from.1, buf[..r.len].to_vec()));
        }
        assert_eq!(got.len(), 3, "{got:?}");
        assert_eq!(got[0], (ECHO_PORT, b"datagram 0".to_vec()));
        for (k, (port, d)) in got[1..].iter().enumerate() {
            assert_eq!(*port, CHARGEN_PORT);
            assert!(d.len() <= CHARGEN_UDP_MAX);
            let mut want = vec![0u8; d.len()];
            chargen_fill(k as u64 * CHARGEN_LINE as u64, &mut want);
            assert_eq!(d, &want);
        }
        let [(_, echo), (_, discard), (_, chargen)] = svc.counts();
        assert_eq!((echo.udp_datagrams_in, echo.udp_datagrams_out), (1, 1));
        assert_eq!(echo.udp_bytes_out, 10);
        assert_eq!(
            (
                discard.udp_datagrams_in,
                discard.udp_bytes_in,
                discard.udp_datagrams_out
            ),
            (1, 10, 0)
        );
        assert_eq!(
            (chargen.udp_datagrams_in, chargen.udp_datagrams_out),
            (2, 2)
        );
    }

    #[test]
    fn tcp_echo_returns_the_bytes_on_many_connections() {
        let (mut pair, mut svc) = setup();
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let conns: Vec<TcpHandle> = (0..3)
            .map(|_| pair.a.tcp_connect((ADDR_B, ECHO_PORT)).unwrap())
            .collect();
        let mut sent = [0usize; 3];
        let mut back: [Vec<u8>; 3] = Default::default();
        let mut shut = [false; 3];
        let mut buf = vec![0u8; 65536];
        let ok = run_until(&mut pair, &mut svc, 60, |a| {
            for (i, &h) in conns.iter().enumerate() {
                if a.tcp_state(h) == Ok(State::SynSent) {
                    continue;
                }
                if sent[i] < data.len() {
                    if let Ok(n) = a.tcp_send(h, &data[sent[i]..]) {
                        sent[i] += n;
                    }
                } else if !shut[i] {
                    a.tcp_shutdown(h).unwrap();
                    shut[i] = true;
                }
                while let Ok(n) = a.tcp_recv(h, &mut buf) {
                    if n == 0 {
                        break;
                    }
                    back[i].extend_from_slice(&buf[..n]);
                }
            }
            (0..3).all(|i| back[i].len() == data.len() && a.tcp_recv(conns[i], &mut buf) == Ok(0))
        });
        assert!(
            ok,
            "echoed {:?}",
            back.iter().map(|b| b.len()).collect::<Vec<_>>()
        );
        for b in &back {
            assert!(b == &data);
        }
        pair.run_for(Duration::from_millis(500));
        let echo = svc.counts()[0].1;
        assert_eq!(echo.tcp_accepted, 3);
        assert_eq!(echo.tcp_closed, 3);
        assert_eq!(echo.tcp_bytes_in, 3 * data.len() as u64);
        assert_eq!(echo.tcp_bytes_out, 3 * data.len() as u64);
        assert_eq!(svc.open_connections(), 0);
    }

    #[test]
    fn tcp_discard_swallows_the_bytes() {
        let (mut pair, mut svc) = setup();
        let h = pair.a.tcp_connect((ADDR_B, DISCARD_PORT)).unwrap();
        let data = vec![0x5a; 200_000];
        let mut sent = 0;
        let mut buf = [0u8; 1024];
        let mut received = 0;
        let ok = run_until(&mut pair, &mut svc, 30, |a| {
            if a.tcp_state(h) == Ok(State::SynSent) {
                return false;
            }
            if sent < data.len() {
                if let Ok(n) = a.tcp_send(h, &data[sent..]) {
                    sent += n;
                }
                if sent == data.len() {
                    a.tcp_shutdown(h).unwrap();
                }
            }
            while let Ok(n) = a.tcp_recv(h, &mut buf) {
                if n == 0 {
                    return true;
                }
                received += n;
            }
            false
        });
        assert!(ok, "sent {sent}");
        assert_eq!(received, 0, "discard sent nothing back");
        let discard = svc.counts()[1].1;
        assert_eq!(discard.tcp_bytes_in, data.len() as u64);
        assert_eq!((discard.tcp_bytes_out, discard.tcp_closed), (0, 1));
    }

    #[test]
    fn tcp_chargen_writes_lines_until_the_peer_closes() {
        let (mut pair, mut svc) = setup();
        let conns = [
            pair.a.tcp_connect((ADDR_B, CHARGEN_PORT)).unwrap(),
            pair.a.tcp_connect((ADDR_B, CHARGEN_PORT)).unwrap(),
        ];
        let mut got: [Vec<u8>; 2] = Default::default();
        let mut buf = vec![0u8; 65536];
        let want = 500_000;
        let ok = run_until(&mut pair, &mut svc, 60, |a| {
            for (i, &h) in conns.iter().enumerate() {
                while let Ok(n) = a.tcp_recv(h, &mut buf) {
                    if n == 0 {
                        break;
                    }
                    got[i].extend_from_slice(&buf[..n]);
                }
            }
            got.iter().all(|g| g.len() >= want)
        });
        assert!(ok, "got {} and {}", got[0].len(), got[1].len());
        for g in &got {
            let mut expect = vec![0u8; g.len()];
            chargen_fill(0, &mut expect);
            assert!(g == &expect, "the stream is RFC 864's lines");
        }
        for &h in &conns {
            pair.a.tcp_close(h).unwrap();
        }
        let closed = run_until(&mut pair, &mut svc, 30, |_| false);
        assert!(!closed);
        let chargen = svc.counts()[2].1;
        assert_eq!(chargen.tcp_accepted, 2);
        // Our close with unread data resets; either way chargen lets go of both.
        assert_eq!(chargen.tcp_closed + chargen.tcp_errors, 2);
        assert_eq!(svc.open_connections(), 0);
        assert!(chargen.tcp_bytes_out >= 2 * want as u64);
    }
}
