//! A bulk TCP transfer between the two stacks of a simulated pair, checked by hash, and the
//! connection it runs on: the TCP, offload and zero-copy tests share them.

use probestack::sim::{Pair, ADDR_B};
use probestack::socket::tcp::{TcpError, TcpHandle};
use probestack::tcp::State;
use probestack::time::Duration;

/// Connects A to a listener on B at `port`; returns (A's stream, B's stream).
pub fn connect(p: &mut Pair, port: u16) -> (TcpHandle, TcpHandle) {
    let l = p.b.tcp_listen((ADDR_B, port), 8).unwrap();
    let c = p.a.tcp_connect((ADDR_B, port)).unwrap();
    (c, accepted_on_b(p, l, c))
}

/// Runs the pair until B's `listener` has accepted a connection and A's `client` is
/// established (within 5 s); returns B's end.
pub fn accepted_on_b(p: &mut Pair, listener: TcpHandle, client: TcpHandle) -> TcpHandle {
    accepted(p, true, listener, client)
}

/// [`accepted_on_b`] the other way round: A listens, B's `client` connects.
pub fn accepted_on_a(p: &mut Pair, listener: TcpHandle, client: TcpHandle) -> TcpHandle {
    accepted(p, false, listener, client)
}

fn accepted(p: &mut Pair, on_b: bool, listener: TcpHandle, client: TcpHandle) -> TcpHandle {
    let mut s = None;
    assert!(p.run_until(Duration::from_secs(5), |p| {
        let (server, peer) = if on_b {
            (&mut p.b, &p.a)
        } else {
            (&mut p.a, &p.b)
        };
        if s.is_none() {
            s = server.tcp_accept(listener).ok();
        }
        s.is_some() && peer.tcp_state(client) == Ok(State::Established)
    }));
    s.unwrap()
}

/// Deterministic bytes that say where they are in the stream.
pub fn pattern(offset: usize, len: usize) -> Vec<u8> {
    (offset..offset + len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).rotate_left(7) as u8)
        .collect()
}

/// FNV-1a, 64-bit: a hash to compare what was sent with what arrived.
pub fn fnv(h: &mut u64, data: &[u8]) {
    for &b in data {
        *h ^= u64::from(b);
        *h = h.wrapping_mul(0x100_0000_01b3);
    }
}

/// A's side of a checked transfer: the pattern written by copy, 64 KiB at a time, and
/// the hash of what the stack took.
pub struct PatternSender {
    pub sent: usize,
    pub total: usize,
    pub hash: u64,
    pending: Vec<u8>,
}

impl PatternSender {
    pub fn new(total: usize) -> PatternSender {
        PatternSender {
            sent: 0,
            total,
            hash: FNV_START,
            pending: Vec::new(),
        }
    }

    /// Writes on `tx` until A's stack takes no more or everything is sent.
    pub fn pump(&mut self, p: &mut Pair, tx: TcpHandle) {
        loop {
            if self.pending.is_empty() && self.sent < self.total {
                self.pending = pattern(self.sent, (64 * 1024).min(self.total - self.sent));
            }
            if self.pending.is_empty() {
                return;
            }
            match p.a.tcp_send(tx, &self.pending) {
                Ok(n) => {
                    fnv(&mut self.hash, &self.pending[..n]);
                    self.sent += n;
                    self.pending.drain(..n);
                }
                Err(TcpError::WouldBlock) => return,
                Err(e) => panic!("send: {e}"),
            }
        }
    }
}

/// FNV-1a's offset basis.
pub const FNV_START: u64 = 0xcbf2_9ce4_8422_2325;

/// Sends `total` bytes from `tx` on A to `rx` on B and checks them by hash; returns the
/// virtual time taken in milliseconds.
pub fn transfer(p: &mut Pair, tx: TcpHandle, rx: TcpHandle, total: usize, limit: Duration) -> u64 {
    let start = p.now();
    let mut sender = PatternSender::new(total);
    let (mut got, mut hr) = (0usize, FNV_START);
    let mut buf = vec![0u8; 256 * 1024];
    let done = p.run_until(limit, |p| {
        sender.pump(p, tx);
        loop {
            match p.b.tcp_recv(rx, &mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    fnv(&mut hr, &buf[..n]);
                    got += n;
                }
                Err(TcpError::WouldBlock) => break,
                Err(e) => panic!("recv: {e}"),
            }
        }
        got == total
    });
    assert!(
        done,
        "transfer stalled: sent {}, received {got} of {total}",
        sender.sent
    );
    assert_eq!(
        sender.hash, hr,
        "the bytes received differ from the bytes sent"
    );
    (p.now() - start).as_millis()
}
