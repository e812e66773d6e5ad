//! A deterministic simulation of two hosts: two stacks joined by a memory link (or a frame
//! queue, [`Pair::on_frame_queue`]), driven by one thread on a virtual clock (DESIGN.md
//! §9). Time moves only when both stacks are idle, straight to the earliest deadline either
//! has, so a seeded run replays exactly and a 30-second reassembly timeout takes no wall
//! time at all.

use crate::driver::{
    ConfigError, Device, FrameQueue, MemoryLink, MemoryNic, NicConfig, QueueConfigError,
};
use crate::ip::route::Ipv4Cidr;
use crate::stack::{InterfaceConfig, Secrets, Stack, StackConfig};
use crate::time::{earlier, Clock, Duration, Instant, VirtualClock};
use crate::wire::ethernet::{self, EtherType, EthernetAddress, EthernetRepr};
use crate::wire::ipv4::{self, IpProtocol, Ipv4Options, Ipv4Repr};
use crate::wire::{Checksum, Ipv4Address};

/// Host A's address in simulations: 198.18.0.1/15 (RFC 2544's benchmarking range).
pub const ADDR_A: Ipv4Address = Ipv4Address::new(198, 18, 0, 1);
/// Host B's address: 198.18.0.2/15.
pub const ADDR_B: Ipv4Address = Ipv4Address::new(198, 18, 0, 2);
pub const MAC_A: EthernetAddress = EthernetAddress([0x02, 0x00, 0x00, 0x00, 0x00, 0x01]);
pub const MAC_B: EthernetAddress = EthernetAddress([0x02, 0x00, 0x00, 0x00, 0x00, 0x02]);
/// The most polls [`Pair::settle`] makes at one instant before it calls the stacks
/// livelocked: far above what settling takes (no test in the suite reaches it).
pub const SETTLE_POLLS: usize = 100_000;

/// One host of a pair.
#[derive(Clone, Debug)]
pub struct HostConfig {
    pub stack: StackConfig,
    pub nic: NicConfig,
}

impl HostConfig {
    /// A host with default settings and an MTU, its secrets drawn from its seed so that
    /// a simulation replays exactly ([`Secrets::Seeded`]).
    pub fn with_mtu(mtu: usize) -> HostConfig {
        HostConfig {
            stack: StackConfig {
                secrets: Secrets::Seeded,
                ..StackConfig::default()
            },
            nic: NicConfig {
                mtu,
                ..NicConfig::default()
            },
        }
    }
}

/// Two stacks on a memory link, A at [`ADDR_A`] and B at [`ADDR_B`].
pub struct Pair {
    pub a: Stack,
    pub b: Stack,
    pub clock: VirtualClock,
}

impl Pair {
    /// Builds the pair; `wrap_a` and `wrap_b` may put middleware (a pcap writer) around
    /// each NIC.
    pub fn with_devices(
        a: HostConfig,
        b: HostConfig,
        wrap_a: impl FnOnce(MemoryNic) -> Box<dyn Device + Send>,
        wrap_b: impl FnOnce(MemoryNic) -> Box<dyn Device + Send>,
    ) -> Result<Pair, ConfigError> {
        let (nic_a, nic_b) = MemoryLink::pair(a.nic, b.nic)?;
        Ok(Pair::over(a.stack, b.stack, wrap_a(nic_a), wrap_b(nic_b)))
    }

    pub fn new(a: HostConfig, b: HostConfig) -> Result<Pair, ConfigError> {
        Pair::with_devices(a, b, |n| Box::new(n), |n| Box::new(n))
    }

    /// The pair on a [`FrameQueue`] instead of the memory link: no NIC model under the
    /// stacks (no CRC, no wire, no notification delay), at A's MTU and transmit queue
    /// depth (`a.nic`'s; the rest of both NIC configurations does not apply).
    pub fn on_frame_queue(a: HostConfig, b: HostConfig) -> Result<Pair, QueueConfigError> {
        Pair::on_frame_queue_with(a, b, |q| Box::new(q), |q| Box::new(q))
    }

    /// [`on_frame_queue`](Self::on_frame_queue) with each end wrapped (a test's fault
    /// injector, a capture).
    pub fn on_frame_queue_with(
        a: HostConfig,
        b: HostConfig,
        wrap_a: impl FnOnce(FrameQueue) -> Box<dyn Device + Send>,
        wrap_b: impl FnOnce(FrameQueue) -> Box<dyn Device + Send>,
    ) -> Result<Pair, QueueConfigError> {
        let (qa, qb) = FrameQueue::pair(a.nic.mtu, a.nic.tx_queue_depth)?;
        Ok(Pair::over(a.stack, b.stack, wrap_a(qa), wrap_b(qb)))
    }

    /// Two stacks, A at [`ADDR_A`] and B at [`ADDR_B`], each on its end of a link.
    fn over(
        a: StackConfig,
        b: StackConfig,
        dev_a: Box<dyn Device + Send>,
        dev_b: Box<dyn Device + Send>,
    ) -> Pair {
        let host = |config, device, mac, address| {
            let mut stack = Stack::new(config);
            stack.add_interface(
                device,
                InterfaceConfig {
                    mac,
                    cidr: Ipv4Cidr {
                        address,
                        prefix_len: 15,
                    },
                },
            );
            stack
        };
        Pair {
            a: host(a, dev_a, MAC_A, ADDR_A),
            b: host(b, dev_b, MAC_B, ADDR_B),
            clock: VirtualClock::new(),
        }
    }

    pub fn now(&self) -> Instant {
        self.clock.now()
    }

    /// Polls both stacks at the current instant until neither has work due now; returns
    /// the next deadline either has (later than now), if any.
    ///
    /// # Panics
    ///
    /// When a stack still says it has work due after [`SETTLE_POLLS`] polls at one
    /// instant: a livelock (a timer due that its poll never runs, a device that never
    /// empties), which a runner on a real clock would spin on. A test fails there with
    /// the deadlines, instead of crawling through virtual time.
    pub fn settle(&mut self) -> Option<Instant> {
        let now = self.clock.now();
        for _ in 0..SETTLE_POLLS {
            self.a.poll(now);
            self.b.poll(now);
            // Asked after both polls: B may have just sent A something.
            match self.next_deadline() {
                Some(t) if t <= now => continue,
                next => return next,
            }
        }
        panic!(
            "livelock at {now:?}: after {SETTLE_POLLS} polls A's next deadline is {:?}, B's {:?}",
            self.a.next_deadline(),
            self.b.next_deadline()
        );
    }

    /// The earlier of the two stacks' deadlines.
    fn next_deadline(&mut self) -> Option<Instant> {
        earlier(self.a.next_deadline(), self.b.next_deadline())
    }

    /// Settles, then moves the clock to the next deadline, but not past `limit`. Returns
    /// false when nothing is left to do before `limit` (the clock is then at `limit`).
    pub fn step(&mut self, limit: Instant) -> bool {
        let next = self.settle();
        self.advance(next, limit)
    }

    fn advance(&mut self, next: Option<Instant>, limit: Instant) -> bool {
        match next {
            Some(t) if t <= limit => {
                self.clock.advance_to(t);
                true
            }
            _ => {
                self.clock.advance_to(limit);
                false
            }
        }
    }

    /// Runs until `done` holds or `timeout` of virtual time has passed; whether `done` held.
    /// `done` is asked whenever the stacks have settled, before the clock moves, so a
    /// condition met at some instant is seen at that instant; work it starts (a send) is
    /// settled at the same instant too.
    pub fn run_until(
        &mut self,
        timeout: Duration,
        mut done: impl FnMut(&mut Pair) -> bool,
    ) -> bool {
        let limit = self.now() + timeout;
        loop {
            self.settle();
            if done(self) {
                return true;
            }
            let next = self.next_deadline();
            if next.is_some_and(|t| t <= self.now()) {
                continue;
            }
            if self.now() >= limit {
                return false;
            }
            self.advance(next, limit);
        }
    }

    /// Runs for `d` of virtual time, and leaves both stacks having seen its end: they are
    /// polled at it, so that work started right after (a send, whose timers start from
    /// the stack's idea of now) starts then, not at the last poll before.
    pub fn run_for(&mut self, d: Duration) {
        let limit = self.now() + d;
        while self.step(limit) {}
        self.settle();
    }
}

/// An IPv4 header from `src` to `dst` carrying `payload_len` bytes of `protocol`: TTL 64,
/// no options, not a fragment, identifier 0. Set other fields with struct update syntax.
pub fn ipv4_header(
    src: Ipv4Address,
    dst: Ipv4Address,
    protocol: IpProtocol,
    payload_len: usize,
) -> Ipv4Repr {
    Ipv4Repr {
        src,
        dst,
        protocol,
        ttl: 64,
        dscp: 0,
        ecn: 0,
        ident: 0,
        dont_frag: false,
        more_frags: false,
        frag_offset: 0,
        payload_len,
        options: Ipv4Options::NONE,
    }
}

/// A whole Ethernet frame around an IPv4 datagram, as it would come off the wire: the
/// header `ip` with its checksum, then its `payload_len` bytes as `fill` writes them. For
/// tests and tools that craft frames to inject.
///
/// Panics if `ip` cannot be emitted (a field out of range): a crafted frame is the
/// caller's own.
pub fn ipv4_frame(
    source: EthernetAddress,
    destination: EthernetAddress,
    ip: &Ipv4Repr,
    fill: impl FnOnce(&mut [u8]),
) -> Vec<u8> {
    let mut f = vec![0u8; ethernet::HEADER_LEN + ip.buffer_len()];
    let eth = EthernetRepr {
        source,
        destination,
        ethertype: EtherType::Ipv4,
    };
    eth.emit(&mut ethernet::Frame::new_unchecked(&mut f[..]))
        .expect("an Ethernet header fits");
    let mut packet = ipv4::Packet::new_unchecked(&mut f[ethernet::HEADER_LEN..]);
    ip.emit(&mut packet, Checksum::Check)
        .expect("a valid IPv4 header");
    fill(packet.payload_mut());
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_for_leaves_both_stacks_at_its_end() {
        let mut p = Pair::new(HostConfig::with_mtu(1500), HostConfig::with_mtu(1500)).unwrap();
        let l = p.b.tcp_listen((ADDR_B, 7), 1).unwrap();
        let a = p.a.tcp_connect((ADDR_B, 7)).unwrap();
        assert!(p.run_until(Duration::from_secs(1), |p| p.b.tcp_accept(l).is_ok()));
        // Idle for a while: no timer is due (keepalive is off), so the steps poll nothing
        // after the first; the stacks must still have seen the end.
        p.run_for(Duration::from_secs(30));
        assert_eq!(p.a.now, p.clock.now());
        assert_eq!(p.b.now, p.clock.now());
        // So a send now times its retransmission from now: B hears nothing (it is never
        // polled), and A's first retransmission comes a full RTO later, not at once.
        p.a.tcp_send(a, b"x").unwrap();
        let sent_at = p.clock.now();
        let rtx = |s: &Stack| {
            s.ledger()
                .counters()
                .get(crate::probe::Counter::TcpRetransmitTimeouts)
        };
        let before = rtx(&p.a);
        p.a.poll(sent_at);
        p.clock.advance(Duration::from_millis(150));
        p.a.poll(p.clock.now());
        assert_eq!(rtx(&p.a), before, "no retransmission 150 ms after the send");
    }
}
