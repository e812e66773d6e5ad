//! A bulk TCP transfer between the two stacks of a simulated pair, checked by hash: the
//! TCP tests and the offload tests share it.

use probestack::sim::Pair;
use probestack::socket::tcp::{TcpError, TcpHandle};
use probestack::time::Duration;

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

/// Sends `total` bytes from `tx` on A to `rx` on B and checks them by hash; returns the
/// virtual time taken in milliseconds.
pub fn transfer(p: &mut Pair, tx: TcpHandle, rx: TcpHandle, total: usize, limit: Duration) -> u64 {
    let start = p.now();
    let (mut sent, mut got) = (0usize, 0usize);
    let (mut hs, mut hr) = (0xcbf2_9ce4_8422_2325u64, 0xcbf2_9ce4_8422_2325u64);
    let mut buf = vec![0u8; 256 * 1024];
    let chunk = 64 * 1024;
    let mut pending = Vec::new();
    let done = p.run_until(limit, |p| {
        loop {
            if pending.is_empty() && sent < total {
                let n = chunk.min(total - sent);
                pending = pattern(sent, n);
            }
            if pending.is_empty() {
                break;
            }
            match p.a.tcp_send(tx, &pending) {
                Ok(n) => {
                    fnv(&mut hs, &pending[..n]);
                    sent += n;
                    pending.drain(..n);
                }
                Err(TcpError::WouldBlock) => break,
                Err(e) => panic!("send: {e}"),
            }
        }
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
        "transfer stalled: sent {sent}, received {got} of {total}"
    );
    assert_eq!(hs, hr, "the bytes received differ from the bytes sent");
    (p.now() - start).as_millis()
}
