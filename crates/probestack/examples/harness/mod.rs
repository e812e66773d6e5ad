//! What the profiling harnesses share: their arguments, the pair of stacks they drive, and
//! a TCP connection between them (as `lab peers` opens one).
#![allow(dead_code)]

use probestack::sim::{HostConfig, Pair, ADDR_B};
use probestack::socket::tcp::{TcpError, TcpHandle};
use probestack::tcp::State;
use probestack::time::{Clock, RealClock};
use probestack::tuning::Tuning;

/// Argument `i` (from 1) as a number, or `default`.
pub fn arg<T: std::str::FromStr>(i: usize, default: T) -> T {
    std::env::args()
        .nth(i)
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Argument `i` as a word, if given.
pub fn word(i: usize) -> Option<String> {
    std::env::args().nth(i)
}

/// `bsd` or (anything else: `fast`, `queue`) `fast`.
pub fn tuning(word: Option<&str>) -> Tuning {
    match word {
        Some("bsd") => Tuning::bsd(),
        _ => Tuning::fast(),
    }
}

/// Two stacks with `host`'s settings on a memory link.
pub fn pair(host: HostConfig) -> Pair {
    Pair::new(host.clone(), host).expect("memory link")
}

/// Two stacks with `host`'s settings on a frame queue (no NIC model), as `lab peers`'
/// "probestack fast, frame queue" row.
pub fn queue_pair(host: HostConfig) -> Pair {
    Pair::on_frame_queue(host.clone(), host).expect("frame queue")
}

/// Two stacks at IP MTU `mtu` as the word says: `bsd`, `fast` (the default), both on the
/// memory link, or `queue`, fast on a frame queue.
pub fn pair_for(mtu: usize, word: Option<&str>) -> Pair {
    let mut host = HostConfig::with_mtu(mtu);
    host.stack.tuning = tuning(word);
    if word == Some("queue") {
        queue_pair(host)
    } else {
        pair(host)
    }
}

/// Sets both ledgers' sampling from argument `i` when given (probe one message in N; 0
/// never, 1 every); otherwise the ledgers keep their default.
pub fn sampling_arg(pair: &Pair, i: usize) {
    if let Some(n) = word(i).and_then(|w| w.parse().ok()) {
        pair.a.ledger().set_sample_every(n);
        pair.b.ledger().set_sample_every(n);
    }
}

/// A TCP connection from A to B's port 5001, both stacks polled until it is established.
pub fn connect(pair: &mut Pair, clock: &RealClock) -> (TcpHandle, TcpHandle) {
    let listener = pair.b.tcp_listen((ADDR_B, 5001), 1).expect("listen");
    let ends = open(pair, listener, clock).expect("connect");
    pair.b.tcp_close(listener).expect("close listener");
    ends
}

/// A TCP connection from A to `listener` (B's port 5001), accepted, both stacks polled
/// until it is established; A's error if it cannot open one (past the stack's socket
/// memory limit, `TcpError::NoSocketMemory`).
pub fn open(
    pair: &mut Pair,
    listener: TcpHandle,
    clock: &RealClock,
) -> Result<(TcpHandle, TcpHandle), TcpError> {
    let a = pair.a.tcp_connect((ADDR_B, 5001))?;
    let mut b = None;
    for _ in 0..10_000 {
        let now = clock.now();
        pair.a.poll(now);
        pair.b.poll(now);
        if b.is_none() {
            match pair.b.tcp_accept(listener) {
                Ok(h) => b = Some(h),
                Err(TcpError::WouldBlock) => {}
                Err(e) => panic!("accept: {e}"),
            }
        }
        if let (Some(b), Ok(State::Established)) = (b, pair.a.tcp_state(a)) {
            return Ok((a, b));
        }
    }
    panic!("the connection did not open");
}
