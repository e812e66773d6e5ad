//! The runner: drives one [`Stack`] on real devices with the real clock (DESIGN.md §2,
//! "a runner for real devices (TAP, AF_PACKET, with epoll) sits outside the core").
//!
//! Each turn of the loop polls the stack, then gives the application its turn (it reads
//! and writes its sockets). When neither has work due now, the runner waits: on epoll for
//! the devices' readiness file descriptors ([`Stack::readiness_fds`]) until the stack's
//! next deadline, never longer than a cap, so that a stop request is noticed and
//! applications with data to write get turns even when nothing arrives. A stack with no
//! readiness descriptor (the memory link) sleeps instead, with a shorter cap, because a
//! frame from another thread wakes nobody.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::stack::Stack;
use crate::time::{Clock, Duration, Instant, RealClock};

/// The longest wait on epoll between turns.
pub const MAX_WAIT: Duration = Duration::from_millis(10);

/// The longest sleep between turns when no device has a readiness descriptor.
pub const MAX_NAP: Duration = Duration::from_millis(1);

/// How long the runner may wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunConfig {
    /// Cap on an epoll wait.
    pub max_wait: Duration,
    /// Cap on a sleep when there is nothing to wait on.
    pub max_nap: Duration,
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            max_wait: MAX_WAIT,
            max_nap: MAX_NAP,
        }
    }
}

/// What a run did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunStats {
    /// Turns of the loop.
    pub loops: u64,
    /// Calls of [`Stack::poll`].
    pub polls: u64,
    /// Waits (on epoll or asleep) because nothing was due.
    pub waits: u64,
    /// Waits that a device's descriptor ended (frames arrived) rather than the timeout.
    pub wakeups: u64,
}

/// Runs `stack` until `stop` is set, with the default caps; see [`run_with`].
pub fn run(
    stack: &mut Stack,
    clock: &RealClock,
    stop: &AtomicBool,
    app: impl FnMut(&mut Stack, Instant),
) -> io::Result<RunStats> {
    run_with(stack, clock, stop, RunConfig::default(), app)
}

/// Runs `stack` until `stop` is set: poll, the application's turn, and a wait when
/// nothing is due. Errors are those of epoll itself.
pub fn run_with(
    stack: &mut Stack,
    clock: &RealClock,
    stop: &AtomicBool,
    config: RunConfig,
    mut app: impl FnMut(&mut Stack, Instant),
) -> io::Result<RunStats> {
    let fds = stack.readiness_fds();
    let epoll = if fds.is_empty() {
        None
    } else {
        Some(Epoll::new(&fds)?)
    };
    let mut stats = RunStats::default();
    while !stop.load(Ordering::Relaxed) {
        stats.loops += 1;
        let now = clock.now();
        stack.poll(now);
        stats.polls += 1;
        app(stack, now);
        // Asked after the application's turn: what it sent may be due at once.
        let deadline = stack.next_deadline();
        let now = clock.now();
        let wait = match deadline {
            Some(t) if t <= now => continue,
            Some(t) => t - now,
            None => Duration::from_nanos(u64::MAX),
        };
        stats.waits += 1;
        match &epoll {
            Some(ep) => {
                if ep.wait(wait.min(config.max_wait))? {
                    stats.wakeups += 1;
                }
            }
            None => std::thread::sleep(wait.min(config.max_nap).into()),
        }
    }
    Ok(stats)
}

/// Set by SIGINT and SIGTERM once [`stop_on_signals`] has installed the handler.
static SIGNALLED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_signal: libc::c_int) {
    // An atomic store is async-signal-safe; the runner sees it on its next turn (the
    // signal also ends an epoll wait early with EINTR).
    SIGNALLED.store(true, Ordering::Relaxed);
}

/// Installs a handler for SIGINT and SIGTERM that sets the returned flag: pass it to
/// [`run`] as `stop`, so Ctrl-C ends the loop and the program prints what it did. An
/// application may set the flag itself to end the run.
pub fn stop_on_signals() -> io::Result<&'static AtomicBool> {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: sigaction is a plain C struct for which all zeroes is a valid value (no
        // handler, empty flags); the fields that matter are set below.
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        action.sa_flags = 0;
        // SAFETY: `action.sa_mask` is a valid sigset_t owned by `action`.
        unsafe {
            libc::sigemptyset(&mut action.sa_mask);
        }
        // SAFETY: `action` is initialised and lives across the call; the handler only
        // stores to an atomic, which is async-signal-safe; a null old-action pointer is
        // allowed.
        let r = unsafe { libc::sigaction(signal, &action, std::ptr::null_mut()) };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(&SIGNALLED)
}

/// An epoll instance with the devices' descriptors registered for reading.
struct Epoll {
    fd: i32,
}

impl Epoll {
    fn new(fds: &[i32]) -> io::Result<Epoll> {
        // SAFETY: epoll_create1 takes only flags and returns a new descriptor or -1; no
        // memory is passed.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let ep = Epoll { fd };
        for &dev in fds {
            let mut ev = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: dev as u64,
            };
            // SAFETY: `ep.fd` is the epoll descriptor just created and owned by `ep`; `ev`
            // is a valid, initialised epoll_event that lives across the call (the kernel
            // copies it). A bad `dev` makes the call fail with EBADF, reported below.
            let r = unsafe { libc::epoll_ctl(ep.fd, libc::EPOLL_CTL_ADD, dev, &mut ev) };
            if r < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(ep)
    }

    /// Waits up to `timeout` for a descriptor to become readable; whether one did. Waits
    /// shorter than epoll's millisecond resolution look once and then sleep the rest.
    fn wait(&self, timeout: Duration) -> io::Result<bool> {
        let ms = timeout.as_millis().min(i32::MAX as u64) as i32;
        let ready = self.wait_ms(ms)?;
        if !ready && ms == 0 && timeout > Duration::ZERO {
            std::thread::sleep(timeout.into());
        }
        Ok(ready)
    }

    fn wait_ms(&self, ms: i32) -> io::Result<bool> {
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 8];
        // SAFETY: `self.fd` is an open epoll descriptor owned by `self`; `events` is a
        // writable array of `events.len()` epoll_event structs, the count passed as
        // maxevents, so the kernel writes within it.
        let n = unsafe { libc::epoll_wait(self.fd, events.as_mut_ptr(), events.len() as i32, ms) };
        if n < 0 {
            let e = io::Error::last_os_error();
            // A signal (SIGINT for a stop) interrupts the wait: not an error.
            if e.kind() == io::ErrorKind::Interrupted {
                return Ok(false);
            }
            return Err(e);
        }
        Ok(n > 0)
    }
}

impl Drop for Epoll {
    fn drop(&mut self) {
        // SAFETY: `self.fd` was returned by epoll_create1, is owned by this value alone and
        // is closed exactly once, here.
        unsafe {
            libc::close(self.fd);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{HostConfig, Pair, ADDR_A, ADDR_B};
    use crate::socket::udp::UdpError;
    use crate::wire::Ipv4Address;
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;

    /// Two stacks on two threads, each run by `run`: B echoes UDP, A sends and counts the
    /// echoes; A sets `stop` when it has them all, and both loops end.
    #[test]
    fn two_runners_exchange_udp_and_stop() {
        let pair = Pair::new(HostConfig::with_mtu(1500), HostConfig::with_mtu(1500)).unwrap();
        let (mut a, mut b) = (pair.a, pair.b);
        let clock = RealClock::new();
        let stop = Arc::new(AtomicBool::new(false));
        let echoed = Arc::new(AtomicU64::new(0));
        const N: u64 = 20;
        let started = std::time::Instant::now();
        let (sa, sb) = std::thread::scope(|scope| {
            let (stop_b, echoed_b) = (stop.clone(), echoed.clone());
            let tb = scope.spawn(move || {
                let s = b.udp_open();
                b.udp_bind(s, Ipv4Address::UNSPECIFIED, 7).unwrap();
                let mut buf = [0u8; 2048];
                run(&mut b, &clock, &stop_b, |st, _| {
                    while let Ok(r) = st.udp_recv_from(s, &mut buf) {
                        st.udp_send_to(s, &buf[..r.len], r.from.0, r.from.1)
                            .unwrap();
                        echoed_b.fetch_add(1, Ordering::Relaxed);
                    }
                })
                .unwrap()
            });
            let stop_a = stop.clone();
            let ta = scope.spawn(move || {
                let s = a.udp_open();
                a.udp_bind(s, ADDR_A, 4000).unwrap();
                let mut sent = 0u64;
                let mut got = 0u64;
                let mut buf = [0u8; 2048];
                let stats = run(&mut a, &clock, &stop_a, |st, _| {
                    loop {
                        match st.udp_recv_from(s, &mut buf) {
                            Ok(r) => {
                                assert_eq!(&buf[..r.len], format!("msg {got}").as_bytes());
                                got += 1;
                            }
                            Err(UdpError::WouldBlock) => break,
                            Err(e) => panic!("recv: {e}"),
                        }
                    }
                    // One datagram outstanding at a time (the first waits for ARP).
                    if sent == got && sent < N {
                        st.udp_send_to(s, format!("msg {sent}").as_bytes(), ADDR_B, 7)
                            .unwrap();
                        sent += 1;
                    }
                    if got == N {
                        stop_a.store(true, Ordering::Relaxed);
                    }
                })
                .unwrap();
                (stats, got)
            });
            (ta.join().unwrap(), tb.join().unwrap())
        });
        let ((stats_a, got), stats_b) = (sa, sb);
        assert_eq!(got, N);
        assert_eq!(echoed.load(Ordering::Relaxed), N);
        assert!(stats_a.polls >= N && stats_a.loops == stats_a.polls);
        assert!(stats_b.polls > 0);
        // No readiness descriptors on the memory link: every wait was a nap, none woken.
        assert_eq!(stats_a.wakeups + stats_b.wakeups, 0);
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "took {:?}",
            started.elapsed()
        );
    }

    /// A TCP transfer between two runners: A sends a megabyte and closes its side; B
    /// counts it, closes when it sees the end of the stream; A stops at B's FIN.
    #[test]
    fn two_runners_transfer_over_tcp() {
        use crate::socket::tcp::TcpError;
        let pair = Pair::new(HostConfig::with_mtu(1500), HostConfig::with_mtu(1500)).unwrap();
        let (mut a, mut b) = (pair.a, pair.b);
        let clock = RealClock::new();
        let stop = AtomicBool::new(false);
        const TOTAL: usize = 1 << 20;
        let listener = b.tcp_listen((Ipv4Address::UNSPECIFIED, 9), 4).unwrap();
        let started = std::time::Instant::now();
        let received = std::thread::scope(|scope| {
            let tb = scope.spawn(|| {
                let mut conn = None;
                let mut got = 0usize;
                let mut buf = vec![0u8; 65536];
                run(&mut b, &clock, &stop, |st, _| {
                    if conn.is_none() {
                        conn = st.tcp_accept(listener).ok();
                    }
                    let Some(h) = conn else { return };
                    loop {
                        match st.tcp_recv(h, &mut buf) {
                            Ok(0) => {
                                st.tcp_close(h).unwrap();
                                conn = None;
                                break;
                            }
                            Ok(n) => got += n,
                            Err(TcpError::WouldBlock) => break,
                            Err(e) => panic!("B: {e}"),
                        }
                    }
                })
                .unwrap();
                got
            });
            let ta = scope.spawn(|| {
                let data = vec![0x42u8; TOTAL];
                let mut h = None;
                let mut sent = 0;
                let mut buf = [0u8; 16];
                run(&mut a, &clock, &stop, |st, _| {
                    let c = *h.get_or_insert_with(|| st.tcp_connect((ADDR_B, 9)).unwrap());
                    if sent < TOTAL {
                        if let Ok(n) = st.tcp_send(c, &data[sent..]) {
                            sent += n;
                            if sent == TOTAL {
                                st.tcp_shutdown(c).unwrap();
                            }
                        }
                    } else if st.tcp_recv(c, &mut buf) == Ok(0) {
                        stop.store(true, Ordering::Relaxed);
                    }
                })
                .unwrap()
            });
            ta.join().unwrap();
            tb.join().unwrap()
        });
        assert_eq!(received, TOTAL);
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "took {:?}",
            started.elapsed()
        );
    }

    /// `stop` set from outside ends an idle loop within about a cap.
    #[test]
    fn stop_ends_an_idle_run_promptly() {
        let pair = Pair::new(HostConfig::with_mtu(1500), HostConfig::with_mtu(1500)).unwrap();
        let mut a = pair.a;
        let clock = RealClock::new();
        let stop = AtomicBool::new(false);
        std::thread::scope(|scope| {
            let h = scope.spawn(|| run(&mut a, &clock, &stop, |_, _| {}).unwrap());
            std::thread::sleep(std::time::Duration::from_millis(30));
            let t = std::time::Instant::now();
            stop.store(true, Ordering::Relaxed);
            let stats = h.join().unwrap();
            assert!(t.elapsed() < std::time::Duration::from_millis(200));
            // Idle: it waited rather than spun.
            assert!(stats.waits > 0 && stats.loops < 10_000, "{stats:?}");
        });
    }

    /// A real descriptor: a pipe's read end stands in for a device, and a byte written to
    /// it ends an epoll wait early.
    #[test]
    fn epoll_wakes_on_a_readable_descriptor() {
        let mut p = [0i32; 2];
        // SAFETY: `p` is a writable array of two ints, as pipe requires.
        assert_eq!(unsafe { libc::pipe(p.as_mut_ptr()) }, 0);
        let ep = Epoll::new(&[p[0]]).unwrap();
        assert!(!ep.wait(Duration::from_millis(1)).unwrap());
        let byte = [1u8];
        // SAFETY: `p[1]` is the pipe's open write end; `byte` is one readable byte.
        assert_eq!(unsafe { libc::write(p[1], byte.as_ptr().cast(), 1) }, 1);
        let t = std::time::Instant::now();
        assert!(ep.wait(Duration::from_secs(5)).unwrap());
        assert!(t.elapsed() < std::time::Duration::from_secs(1));
        drop(ep);
        // SAFETY: both ends are open and closed once here.
        unsafe {
            libc::close(p[0]);
            libc::close(p[1]);
        }
    }
}
