//! The Linux kernel as a peer: two sockets driven from this one thread, on loopback
//! ([`System::LinuxLoopback`](super::System::LinuxLoopback)) or on a veth pair between two
//! network namespaces of this run's own ([`System::LinuxVeth`](super::System::LinuxVeth)).
//!
//! Both variants share [`KernelPeers`] and [`KernelStreams`]; a [`KernelPath`] says where
//! each end's socket is made. On the veth, A's socket is created while the thread is in
//! namespace A and B's while it is in namespace B ([`Netns::within`]); a socket stays in the
//! namespace it was created in, and the thread returns home, so the non-blocking,
//! one-thread driving code is the same for both.
//!
//! The [`Veth`] is made once per `lab peers` run (two namespaces `psk-peers-<pid>-<n>`,
//! deleted on drop, and the pair between them with 198.18.0.1/24 on A's end and
//! 198.18.0.2/24 on B's: nothing else is addressed), and its MTU is set per TCP bulk
//! table. Linux's defaults are left as they are: a veth computes no checksums (its frames
//! carry `CHECKSUM_PARTIAL`, which the receiving side takes as verified) and has TSO/GSO on,
//! so TCP passes super-frames of up to 64 KiB whatever the MTU.

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::Instant as WallInstant;

use probestack::time::Instant;

use super::{End, Peers, Row, Skipped, Streams, System, TCP_STALL};
use crate::netns::{ip, is_root, Netns};

/// A's address on the veth (RFC 2544's benchmarking range, DESIGN.md §6).
pub const VETH_ADDR_A: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
/// B's address on the veth.
pub const VETH_ADDR_B: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
/// The prefix length of both veth addresses.
const VETH_PREFIX: u8 = 24;
/// The veth's two devices, one in each namespace.
const VETH_DEV_A: &str = "psk-veth-a";
const VETH_DEV_B: &str = "psk-veth-b";
/// How long the veth's devices may take to report carrier after setup.
const CARRIER_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Where the kernel's two sockets are made.
#[derive(Clone, Copy)]
pub enum KernelPath<'v> {
    /// Both on 127.0.0.1 in this thread's namespace.
    Loopback,
    /// A's in the veth's namespace A at [`VETH_ADDR_A`], B's in namespace B at
    /// [`VETH_ADDR_B`].
    Veth(&'v Veth),
}

impl KernelPath<'_> {
    /// The address `end`'s socket binds to.
    fn addr(self, end: End) -> Ipv4Addr {
        match (self, end) {
            (KernelPath::Loopback, _) => Ipv4Addr::LOCALHOST,
            (KernelPath::Veth(_), End::A) => VETH_ADDR_A,
            (KernelPath::Veth(_), End::B) => VETH_ADDR_B,
        }
    }

    /// Where the sockets are, for error messages.
    fn place(self) -> &'static str {
        match self {
            KernelPath::Loopback => "127.0.0.1",
            KernelPath::Veth(_) => "the veth",
        }
    }

    /// Runs `make` (which creates a socket) where `end`'s socket belongs; `what` names it
    /// in the error.
    fn make<T>(
        self,
        end: End,
        what: &str,
        make: impl FnOnce() -> std::io::Result<T>,
    ) -> Result<T, String> {
        let made = match self {
            KernelPath::Loopback => make(),
            KernelPath::Veth(v) => v.namespace(end).within(make)?,
        };
        made.map_err(|e| format!("cannot {what} on {}: {e}", self.place()))
    }
}

/// The veth path for `veth`, or why there is none.
pub fn veth_path(veth: Option<&Veth>) -> Result<KernelPath<'_>, String> {
    veth.map(KernelPath::Veth)
        .ok_or_else(|| "no veth pair was set up for this run".to_string())
}

// ---------------------------------------------------------------------------------------
// The veth pair.

/// Why this process cannot make namespaces and a veth pair, if it cannot.
pub fn veth_unavailable() -> Option<String> {
    if !cfg!(target_os = "linux") {
        return Some("needs Linux (network namespaces and a veth pair)".into());
    }
    if !is_root() {
        return Some("not root: creating network namespaces and a veth pair needs it".into());
    }
    match std::process::Command::new("ip")
        .arg("-V")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
    {
        Ok(s) if s.success() => None,
        _ => Some("no `ip` program (iproute2) to make namespaces and a veth pair".into()),
    }
}

/// The `ip` commands that join namespaces `ns_a` and `ns_b` by a veth pair, address its
/// ends and bring them up.
fn setup_commands(ns_a: &str, ns_b: &str) -> Vec<Vec<String>> {
    let words = |ws: &[&str]| ws.iter().map(|w| w.to_string()).collect::<Vec<String>>();
    let cidr_a = format!("{VETH_ADDR_A}/{VETH_PREFIX}");
    let cidr_b = format!("{VETH_ADDR_B}/{VETH_PREFIX}");
    vec![
        words(&[
            "-n", ns_a, "link", "add", VETH_DEV_A, "type", "veth", "peer", "name", VETH_DEV_B,
            "netns", ns_b,
        ]),
        words(&["-n", ns_a, "addr", "add", &cidr_a, "dev", VETH_DEV_A]),
        words(&["-n", ns_b, "addr", "add", &cidr_b, "dev", VETH_DEV_B]),
        words(&["-n", ns_a, "link", "set", VETH_DEV_A, "up"]),
        words(&["-n", ns_b, "link", "set", VETH_DEV_B, "up"]),
    ]
}

/// The largest MTU a device takes, from `ip -d link show`'s `maxmtu N`.
fn parse_max_mtu(ip_details: &str) -> Option<usize> {
    let mut words = ip_details.split_whitespace();
    words.find(|w| *w == "maxmtu")?;
    words.next()?.parse().ok()
}

/// The MTU the veth runs at when `asked` is wanted: `asked`, or the driver's largest if
/// that is smaller.
pub fn veth_mtu(asked: usize, max_mtu: usize) -> usize {
    asked.min(max_mtu)
}

/// Two network namespaces of this run's own joined by a veth pair; both (and the pair
/// with them) are deleted on drop.
pub struct Veth {
    a: Netns,
    b: Netns,
    /// The largest MTU the veth driver takes (65535, `ETH_MAX_MTU`, on current kernels).
    max_mtu: usize,
}

impl Veth {
    /// Makes the namespaces and the pair; why not, if that cannot be done here.
    pub fn new() -> Result<Veth, String> {
        if let Some(why) = veth_unavailable() {
            return Err(why);
        }
        let a = Netns::new("peers")?;
        let b = Netns::new("peers")?;
        // Quiet links: no IPv6 (router solicitations, MLD, duplicate address detection)
        // on the devices made afterwards. A kernel without IPv6 has no such files.
        for ns in [&a, &b] {
            ns.within(|| {
                for f in ["all", "default"] {
                    let _ =
                        std::fs::write(format!("/proc/sys/net/ipv6/conf/{f}/disable_ipv6"), "1");
                }
            })?;
        }
        for command in setup_commands(&a.0, &b.0) {
            ip(&command)?;
        }
        let details = ip(&["-d", "-n", &a.0, "link", "show", "dev", VETH_DEV_A])?;
        let max_mtu = parse_max_mtu(&details)
            .ok_or_else(|| format!("no maxmtu in `ip -d link show`: {details}"))?;
        let veth = Veth { a, b, max_mtu };
        let start = WallInstant::now();
        while !veth.carrier() {
            if start.elapsed() > CARRIER_WAIT {
                return Err(format!("the veth has no carrier after {CARRIER_WAIT:?}"));
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        Ok(veth)
    }

    /// The namespace of `end`'s device.
    fn namespace(&self, end: End) -> &Netns {
        match end {
            End::A => &self.a,
            End::B => &self.b,
        }
    }

    /// Whether both devices report carrier.
    fn carrier(&self) -> bool {
        [(&self.a, VETH_DEV_A), (&self.b, VETH_DEV_B)]
            .iter()
            .all(|(ns, dev)| {
                ip(&["-n", &ns.0, "link", "show", "dev", dev])
                    .is_ok_and(|text| text.contains("LOWER_UP"))
            })
    }

    /// Sets both devices' MTU for `asked` ([`veth_mtu`]): the MTU set.
    pub fn set_mtu(&self, asked: usize) -> Result<usize, String> {
        let mtu = veth_mtu(asked, self.max_mtu);
        let text = mtu.to_string();
        for (ns, dev) in [(&self.a, VETH_DEV_A), (&self.b, VETH_DEV_B)] {
            ip(&["-n", &ns.0, "link", "set", "dev", dev, "mtu", &text])?;
        }
        Ok(mtu)
    }
}

// ---------------------------------------------------------------------------------------
// The two ends, as the kernel offers them.

/// Two kernel UDP sockets, non-blocking.
pub struct KernelPeers {
    a: UdpSocket,
    b: UdpSocket,
    addr_b: SocketAddr,
    place: &'static str,
}

impl KernelPeers {
    pub fn new(path: KernelPath<'_>) -> Result<KernelPeers, String> {
        let open = |end| -> Result<UdpSocket, String> {
            let s = path.make(end, "open a UDP socket", || {
                UdpSocket::bind((path.addr(end), 0))
            })?;
            s.set_nonblocking(true)
                .map_err(|e| format!("cannot make a UDP socket non-blocking: {e}"))?;
            Ok(s)
        };
        let a = open(End::A)?;
        let b = open(End::B)?;
        let addr_b = b
            .local_addr()
            .map_err(|e| format!("the socket on {} has no address: {e}", path.place()))?;
        Ok(KernelPeers {
            a,
            b,
            addr_b,
            place: path.place(),
        })
    }

    /// Where B's datagrams came from, and how many bytes: for tests.
    #[cfg(test)]
    pub fn recv_b_from(&mut self, buf: &mut [u8]) -> std::io::Result<(usize, SocketAddr)> {
        self.b.recv_from(buf)
    }

    fn recv(&self, r: std::io::Result<(usize, SocketAddr)>) -> Result<Option<usize>, String> {
        match r {
            Ok((n, _)) => Ok(Some(n)),
            Err(e) if e.kind() == ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(format!("recvfrom on {}: {e}", self.place)),
        }
    }
}

impl Peers for KernelPeers {
    fn send_a(&mut self, data: &[u8]) -> Result<bool, String> {
        match self.a.send_to(data, self.addr_b) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == ErrorKind::WouldBlock => Ok(false),
            Err(e) => Err(format!("sendto on {}: {e}", self.place)),
        }
    }

    /// The kernel does its work inside the system calls.
    fn poll_a(&mut self, _now: Instant) {}

    fn poll_b(&mut self, _now: Instant) {}

    fn recv_b(&mut self, buf: &mut [u8]) -> Result<Option<usize>, String> {
        self.recv(self.b.recv_from(buf))
    }

    fn echo_b(&mut self, buf: &mut [u8]) -> Result<bool, String> {
        match self.b.recv_from(buf) {
            Ok((n, from)) => loop {
                match self.b.send_to(&buf[..n], from) {
                    Ok(_) => return Ok(true),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => continue,
                    Err(e) => return Err(format!("sendto on {}: {e}", self.place)),
                }
            },
            Err(e) if e.kind() == ErrorKind::WouldBlock => Ok(false),
            Err(e) => Err(format!("recvfrom on {}: {e}", self.place)),
        }
    }

    fn recv_a(&mut self, buf: &mut [u8]) -> Result<Option<usize>, String> {
        self.recv(self.a.recv_from(buf))
    }
}

/// Two kernel TCP sockets connected from A to B, non-blocking.
pub struct KernelStreams {
    a: TcpStream,
    b: TcpStream,
    place: &'static str,
}

impl KernelStreams {
    pub fn connect(path: KernelPath<'_>, nodelay: bool) -> Result<KernelStreams, String> {
        let place = path.place();
        let listener = path.make(End::B, "listen", || {
            TcpListener::bind((path.addr(End::B), 0))
        })?;
        let addr = listener
            .local_addr()
            .map_err(|e| format!("the listener on {place} has no address: {e}"))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| format!("cannot make a listener non-blocking: {e}"))?;
        let a = path.make(End::A, "connect", || {
            TcpStream::connect_timeout(&addr, TCP_STALL)
        })?;
        let start = WallInstant::now();
        let b = loop {
            match listener.accept() {
                Ok((b, _)) => break b,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    if start.elapsed() > TCP_STALL {
                        return Err(format!("no connection to accept within {TCP_STALL:?}"));
                    }
                    std::thread::yield_now();
                }
                Err(e) => return Err(format!("accept on {place}: {e}")),
            }
        };
        for s in [&a, &b] {
            s.set_nonblocking(true)
                .map_err(|e| format!("cannot make a TCP socket non-blocking: {e}"))?;
            s.set_nodelay(nodelay)
                .map_err(|e| format!("cannot set TCP_NODELAY: {e}"))?;
        }
        Ok(KernelStreams { a, b, place })
    }

    /// A's local and remote addresses: for tests.
    #[cfg(test)]
    pub fn addrs_a(&self) -> std::io::Result<(SocketAddr, SocketAddr)> {
        Ok((self.a.local_addr()?, self.a.peer_addr()?))
    }

    fn stream(&mut self, end: End) -> &mut TcpStream {
        match end {
            End::A => &mut self.a,
            End::B => &mut self.b,
        }
    }
}

impl Streams for KernelStreams {
    fn send(&mut self, end: End, data: &[u8]) -> Result<usize, String> {
        let place = self.place;
        match self.stream(end).write(data) {
            Ok(n) => Ok(n),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => Ok(0),
            Err(e) => Err(format!("write on {place}: {e}")),
        }
    }

    fn recv(&mut self, end: End, buf: &mut [u8]) -> Result<Option<usize>, String> {
        let place = self.place;
        match self.stream(end).read(buf) {
            Ok(0) if !buf.is_empty() => Err(format!("the stream on {place} ended")),
            Ok(n) => Ok(Some(n)),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {
                Ok(None)
            }
            Err(e) => Err(format!("read on {place}: {e}")),
        }
    }

    /// The kernel does its work inside the system calls.
    fn poll(&mut self, _end: End, _now: Instant) {}
}

/// What the veth's figures are, and what they compare with.
pub const VETH_NOTE: &str = "Linux veth: the loopback rows' sockets and driving, A's socket \
    made in one network namespace of this run's own (198.18.0.1/24) and B's in another \
    (198.18.0.2/24), joined by a veth pair left as Linux sets it up: a veth computes and \
    verifies no checksums (it passes them on as already done) and has TSO/GSO on, so TCP \
    passes super-frames of up to 64 KiB whatever the MTU; its MTU is set to each TCP bulk \
    table's (the veth driver takes up to 65535, ETH_MAX_MTU, beside loopback's fixed \
    65536; a driver that took less would run at its largest, shown in the row) and to \
    1500 for TCP request/response. Comparable with loopback: the same system call per send \
    and per receive at each end, both sockets in this thread, but two kernel network stacks \
    (one per namespace) and the veth's path (its transmit into the peer's namespace, then \
    the receive softirq, run on this CPU) instead of the loopback device's path within one \
    namespace.";

/// Records on the veth's row of `workload` the MTU it ran at.
pub fn note_veth_mtu(rows: &mut [Row], workload: &str, mtu: usize) {
    for row in rows
        .iter_mut()
        .filter(|r| r.workload == workload && r.system == System::LinuxVeth.name())
    {
        row.link_mtu = Some(mtu);
    }
}

/// Whether `s` leaves the veth out for a reason a table before this one (whose workloads
/// are `workloads`) already gave, in `earlier`: a veth that could not be set up is left
/// out of every workload for the same reason, which the tables print once.
pub fn veth_reason_given_above(earlier: &[Skipped], s: &Skipped, workloads: &[&str]) -> bool {
    s.system == System::LinuxVeth.name()
        && earlier.iter().any(|e| {
            e.system == s.system
                && e.reason == s.reason
                && !workloads.contains(&e.workload.as_str())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `addr` is in 198.18.0.0/15.
    fn benchmarking(addr: Ipv4Addr) -> bool {
        let [a, b, _, _] = addr.octets();
        a == 198 && (b & 0xFE) == 18
    }

    #[test]
    fn peers_veth_plan_addresses_only_the_benchmarking_range() {
        let commands = setup_commands("psk-peers-1-0", "psk-peers-1-1");
        // Every address given to a device is in 198.18.0.0/15, and the two share a /24.
        let mut given = Vec::new();
        for c in &commands {
            assert_eq!(c[0], "-n", "{c:?}: run in a namespace of the run's own");
            assert!(c[1].starts_with("psk-peers-1-"), "{c:?}");
            if let Some(i) = c.iter().position(|w| w == "add") {
                if c[i - 1] == "addr" {
                    let (addr, prefix) = c[i + 1].split_once('/').unwrap();
                    let addr: Ipv4Addr = addr.parse().unwrap();
                    assert!(benchmarking(addr), "{addr}");
                    assert_eq!(prefix, "24");
                    given.push(addr);
                }
            }
        }
        assert_eq!(given, vec![VETH_ADDR_A, VETH_ADDR_B]);
        assert_eq!(VETH_ADDR_A.octets()[..3], VETH_ADDR_B.octets()[..3]);
        // A's end is made in A's namespace, its peer moved to B's.
        assert_eq!(commands[0][1], "psk-peers-1-0");
        assert_eq!(commands[0].last().unwrap(), "psk-peers-1-1");
        // Each address goes on the device of its own namespace.
        assert_eq!(commands[1][1], "psk-peers-1-0");
        assert_eq!(commands[1].last().unwrap(), VETH_DEV_A);
        assert_eq!(commands[2][1], "psk-peers-1-1");
        assert_eq!(commands[2].last().unwrap(), VETH_DEV_B);
        // Interface names fit IFNAMSIZ (15 characters and the NUL).
        assert!(VETH_DEV_A.len() <= 15 && VETH_DEV_B.len() <= 15);
    }

    #[test]
    fn peers_veth_mtu_is_the_asked_one_up_to_the_drivers_largest() {
        let details = "3: psk-veth-a@if2: <BROADCAST,MULTICAST> mtu 1500 qdisc noop\n    \
                       link/ether a6:ef:f2:b6:5d:c2 brd ff:ff:ff:ff:ff:ff link-netns x \
                       promiscuity 0 allmulti 0 minmtu 68 maxmtu 65535\n    veth addrgenmode";
        assert_eq!(parse_max_mtu(details), Some(65535));
        assert_eq!(parse_max_mtu("mtu 1500 minmtu 68"), None);
        assert_eq!(parse_max_mtu("maxmtu"), None);
        assert_eq!(veth_mtu(9000, 65535), 9000);
        assert_eq!(veth_mtu(65535, 65535), 65535);
        assert_eq!(veth_mtu(65535, 9216), 9216);
    }

    #[test]
    fn peers_veth_unavailable_says_why_or_works() {
        match veth_unavailable() {
            Some(why) => {
                // The reason names what is missing.
                assert!(
                    why.contains("root") || why.contains("ip") || why.contains("Linux"),
                    "{why}"
                );
                assert_eq!(Veth::new().err(), Some(why.clone()));
                assert!(veth_path(None).is_err());
                eprintln!("skipping the veth itself: {why}");
            }
            None => {
                let veth = Veth::new().unwrap();
                let names = [veth.a.0.clone(), veth.b.0.clone()];
                let pid = std::process::id().to_string();
                for n in &names {
                    assert!(n.contains(&pid), "{n}");
                    assert!(
                        std::path::Path::new(&format!("/var/run/netns/{n}")).exists(),
                        "{n}"
                    );
                }
                drop(veth);
                for n in &names {
                    assert!(
                        !std::path::Path::new(&format!("/var/run/netns/{n}")).exists(),
                        "{n} is deleted with the veth"
                    );
                }
            }
        }
    }

    #[test]
    fn peers_veth_left_out_gives_its_reason_once_in_the_tables() {
        use crate::experiments::peers::{
            tables, Results, ONE_WAY_SIZES, RR_SIZE, TCP_MTUS, TCP_RR_SIZE,
        };
        let mut workloads: Vec<String> = ONE_WAY_SIZES
            .iter()
            .map(|s| format!("udp_one_way_{s}"))
            .collect();
        workloads.push(format!("udp_rr_{RR_SIZE}_median"));
        workloads.push(format!("udp_rr_{RR_SIZE}_p99"));
        workloads.extend(TCP_MTUS.iter().map(|m| format!("tcp_bulk_{m}")));
        workloads.push(format!("tcp_rr_{TCP_RR_SIZE}"));
        let why = "not root: creating network namespaces and a veth pair needs it";
        let skip = |w: &String, system: System, reason: &str| Skipped {
            workload: w.clone(),
            system: system.name(),
            reason: reason.to_string(),
        };
        let mut skipped: Vec<Skipped> = workloads
            .iter()
            .map(|w| skip(w, System::LinuxVeth, why))
            .collect();
        // The loopback's own reasons are printed in every table they apply to, as before.
        let fixed = "the loopback device's MTU is fixed";
        skipped.push(skip(&workloads[3], System::LinuxLoopback, fixed));
        skipped.push(skip(&workloads[4], System::LinuxLoopback, fixed));
        let r = Results {
            experiment: "peers",
            runs: 1,
            millis_per_run: 1,
            burst: 32,
            tcp_write: 65536,
            note: String::new(),
            skipped,
            rows: Vec::new(),
            devices: Vec::new(),
            floors: Vec::new(),
            passes: Vec::new(),
            floors_note: "",
        };
        let printed = tables(&r);
        let notes: Vec<&String> = printed.iter().flat_map(|t| t.notes.iter()).collect();
        let full = format!("linux_veth: not measured: {why}");
        assert_eq!(
            notes.iter().filter(|n| **n == &full).count(),
            1,
            "{notes:?}"
        );
        assert_eq!(printed[0].notes.iter().filter(|n| **n == full).count(), 1);
        // Every later table says the veth is left out, once.
        for t in &printed[1..] {
            let above = t
                .notes
                .iter()
                .filter(|n| *n == "linux_veth: not measured (as above)")
                .count();
            assert_eq!(above, 1, "{}: {:?}", t.title, t.notes);
        }
        let loopback = format!("linux_loopback: not measured: {fixed}");
        assert_eq!(notes.iter().filter(|n| **n == &loopback).count(), 2);
    }

    #[test]
    fn peers_veth_carries_datagrams_and_streams_between_the_namespaces() {
        use crate::experiments::peers::{
            bulk_on, one_way_on, rr_on, rr_stream_on, RR_SIZE, RR_TIMEOUT_NS, TCP_MTUS,
        };
        use probestack::time::RealClock;

        if let Some(why) = veth_unavailable() {
            eprintln!("skipping: {why}");
            return;
        }
        let veth = Veth::new().unwrap();
        let path = KernelPath::Veth(&veth);
        // The sockets are in the namespaces, not here: this namespace has no 198.18.0.1.
        assert!(UdpSocket::bind((VETH_ADDR_A, 0)).is_err());

        // A datagram from A reaches B, from A's address on the veth (the first may wait
        // for ARP, so A sends until one arrives).
        let mut p = KernelPeers::new(path).unwrap();
        let data: Vec<u8> = (0..64u8).collect();
        let mut buf = [0u8; 2048];
        let start = WallInstant::now();
        loop {
            assert!(p.send_a(&data).unwrap());
            std::thread::sleep(std::time::Duration::from_millis(1));
            match p.recv_b_from(&mut buf) {
                Ok((n, from)) => {
                    assert_eq!(buf[..n], data[..]);
                    assert_eq!(from.ip(), VETH_ADDR_A);
                    break;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    assert!(
                        start.elapsed() < CARRIER_WAIT,
                        "no datagram crossed the veth"
                    );
                }
                Err(e) => panic!("recvfrom: {e}"),
            }
        }
        // The workloads run on it; each reply is checked against its request.
        let run = one_way_on(&mut p, 512, 5).unwrap();
        assert!(run.intact > 0 && run.intact <= run.sent, "{run:?}");
        let rtts = rr_on(&mut p, RR_SIZE, 5).unwrap();
        assert!(rtts.iter().all(|x| *x > 0.0));

        // A stream from A to B at each MTU, every byte checked, all arriving.
        let clock = RealClock::new();
        for mtu in TCP_MTUS {
            assert_eq!(
                veth.set_mtu(mtu).unwrap(),
                veth_mtu(mtu, veth.max_mtu),
                "MTU {mtu}"
            );
            let details = ip(&["-n", &veth.b.0, "link", "show", "dev", VETH_DEV_B]).unwrap();
            assert!(
                details.contains(&format!("mtu {} ", veth_mtu(mtu, veth.max_mtu))),
                "{details}"
            );
            let mut s = KernelStreams::connect(path, false).unwrap();
            let (local, peer) = s.addrs_a().unwrap();
            assert_eq!(
                (local.ip(), peer.ip()),
                (VETH_ADDR_A.into(), VETH_ADDR_B.into())
            );
            let run = bulk_on(&mut s, &clock, 3, true, TCP_STALL).unwrap();
            assert!(run.bytes > 0, "MTU {mtu}");
        }
        let mut s = KernelStreams::connect(path, true).unwrap();
        let rr = rr_stream_on(&mut s, &clock, 3, RR_TIMEOUT_NS).unwrap();
        assert!(rr.transactions > 0);
    }
}
