//! Blocking use of the non-blocking core: run an operation until it stops reporting
//! "would block", polling the stack in between. This is the thin adapter DESIGN.md §2 puts
//! outside the core; it suits a stack on its own thread with a real clock (the memory link
//! across two threads, or a real device), where frames arrive while it waits.

use crate::socket::tcp::TcpError;
use crate::socket::udp::UdpError;
use crate::stack::Stack;
use crate::time::{Clock, Duration};

/// The longest nap between polls: a frame from another thread wakes nobody, so the waiter
/// looks again at least this often.
pub const MAX_NAP: Duration = Duration::from_micros(50);

/// A socket error type that can say "try again later" and "gave up waiting".
pub trait Retry {
    /// The operation cannot complete yet.
    fn would_block(&self) -> bool;
    /// The error for a wait that ran out of time.
    fn timed_out() -> Self;
}

impl Retry for UdpError {
    fn would_block(&self) -> bool {
        *self == UdpError::WouldBlock
    }
    fn timed_out() -> Self {
        UdpError::TimedOut
    }
}

impl Retry for TcpError {
    fn would_block(&self) -> bool {
        *self == TcpError::WouldBlock
    }
    fn timed_out() -> Self {
        TcpError::TimedOut
    }
}

/// Runs `op` until it returns something other than "would block", polling the stack and
/// sleeping until its next deadline (at most [`MAX_NAP`]) in between. Gives up with the
/// error's "timed out" after `timeout` of `clock` time.
pub fn block_on<T, E: Retry>(
    stack: &mut Stack,
    clock: &impl Clock,
    timeout: Duration,
    mut op: impl FnMut(&mut Stack) -> Result<T, E>,
) -> Result<T, E> {
    let deadline = clock.now() + timeout;
    loop {
        match op(stack) {
            Err(e) if e.would_block() => {}
            r => return r,
        }
        let now = clock.now();
        if now >= deadline {
            return Err(E::timed_out());
        }
        let next = stack.poll(now);
        // Something may have arrived: try again before sleeping.
        match op(stack) {
            Err(e) if e.would_block() => {}
            r => return r,
        }
        let nap = next
            .map_or(MAX_NAP, |t| t - now)
            .min(MAX_NAP)
            .min(deadline - now);
        if nap > Duration::ZERO {
            std::thread::sleep(nap.into());
        }
    }
}
