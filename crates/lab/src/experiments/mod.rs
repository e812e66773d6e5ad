//! The lab's experiments, one module each. Each has a `run` that returns serialisable
//! results and a `tables` that renders them.

pub mod bulk;
pub mod checksum;
pub mod cpu;
pub mod discard;
pub mod echo;
pub mod mix;
pub mod overhead;
pub mod peers;
pub mod ping;
pub mod throughput;

use std::time::{Duration, Instant as WallInstant};

use probestack::sim::ADDR_B;
use probestack::socket::tcp::TcpHandle;
use probestack::stack::Stack;
use probestack::tcp::State;
use probestack::time::{Clock, RealClock};
use probestack::wire::Ipv4Address;

/// Opens a TCP connection from `a` to a listener on `b` at [`ADDR_B`]`:port`, polling
/// both on the real clock; an error after `timeout`. Returns (A's stream, B's stream).
pub fn connect_stacks(
    a: &mut Stack,
    b: &mut Stack,
    port: u16,
    clock: &RealClock,
    timeout: Duration,
) -> Result<(TcpHandle, TcpHandle), String> {
    let listener = b
        .tcp_listen((Ipv4Address::UNSPECIFIED, port), 1)
        .map_err(|e| format!("listen: {e}"))?;
    let c = a
        .tcp_connect((ADDR_B, port))
        .map_err(|e| format!("connect: {e}"))?;
    let start = WallInstant::now();
    let mut accepted = None;
    loop {
        let now = clock.now();
        a.poll(now);
        b.poll(now);
        if accepted.is_none() {
            accepted = b.tcp_accept(listener).ok();
        }
        if let (Some(s), Ok(State::Established)) = (accepted, a.tcp_state(c)) {
            return Ok((c, s));
        }
        if start.elapsed() > timeout {
            return Err(format!(
                "no connection after {timeout:?}: A {:?}, B accepted {}",
                a.tcp_state(c),
                accepted.is_some()
            ));
        }
    }
}
