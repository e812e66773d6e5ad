//! Network namespaces and the other pieces the real-device tests share.
//!
//! A test makes its own namespace (`psk-<kind>-<pid>-<n>`), moves its thread into it
//! (a thread's network namespace is its own: `setns` changes only the caller, and threads
//! it spawns afterwards start there too), builds its interfaces inside, and uses only
//! 198.18.0.0/15 there (DESIGN.md §6). The thread moves back, and the namespace is deleted,
//! when the [`Netns`] is dropped, also on a panic.

use std::fs::File;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration as StdDuration;

use probestack::buf::PacketBuf;
use probestack::checksum;
use probestack::driver::tap::{TapConfig, TapDevice};
use probestack::driver::{Device, DeviceCaps, DeviceContext, DeviceError, RxFrame, TxMeta};
use probestack::runner;
use probestack::sim::{ipv4_frame, ipv4_header};
use probestack::socket::tcp::{TcpError, TcpHandle};
use probestack::socket::udp::UdpError;
use probestack::stack::Stack;
use probestack::time::Instant;
use probestack::time::RealClock;
use probestack::wire::ethernet::EthernetAddress;
use probestack::wire::ipv4::IpProtocol;
use probestack::wire::Ipv4Address;

/// Why these tests cannot run here, if they cannot: they need root, the `ip` command and
/// each of `needs`: a path (such as `/dev/net/tun`) or a command on the `PATH` (such as
/// `ping`, which a fresh machine may lack; CI installs it).
pub fn cannot_run(needs: &[&str]) -> Option<String> {
    // SAFETY: geteuid has no arguments and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root".into());
    }
    for n in needs {
        if n.starts_with('/') {
            if !std::path::Path::new(n).exists() {
                return Some(format!("no {n}"));
            }
        } else if !on_path(n) {
            return Some(format!("no `{n}` command"));
        }
    }
    match Command::new("ip").arg("-V").output() {
        Ok(o) if o.status.success() => None,
        _ => Some("no `ip` command".into()),
    }
}

/// Whether an executable file named `command` is in a directory of `PATH`.
fn on_path(command: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| {
            std::fs::metadata(dir.join(command))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

/// Returns from the test, saying why, unless it can run here ([`cannot_run`] with the
/// paths and commands given).
macro_rules! skip_unless_able {
    ($($path:expr),* $(,)?) => {
        if let Some(why) = $crate::common::netns::cannot_run(&[$($path),*]) {
            eprintln!("skipping: {why}");
            return;
        }
    };
}
pub(crate) use skip_unless_able;

/// Sets an integer socket option on a Linux socket.
pub fn set_option(fd: &impl AsRawFd, level: i32, name: i32, value: i32) {
    // SAFETY: setsockopt reads an int at `&value`, which outlives the call, from an open
    // socket's descriptor.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&value as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0, "setsockopt: {}", std::io::Error::last_os_error());
}

/// Runs a command, which must succeed.
pub fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("run command");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A network namespace this test made; the thread that [`enter`](Netns::enter)ed it
/// goes back to where it was, and the namespace is deleted, on drop.
pub struct Netns {
    pub name: String,
    home: Option<File>,
}

impl Netns {
    /// Makes the namespace `psk-<kind>-<pid>-<n>`; `None` (and a message) if `ip netns
    /// add` is refused.
    pub fn create(kind: &str, n: u32) -> Option<Netns> {
        let name = format!("psk-{kind}-{}-{n}", std::process::id());
        let out = Command::new("ip").args(["netns", "add", &name]).output();
        match out {
            Ok(o) if o.status.success() => Some(Netns { name, home: None }),
            Ok(o) => {
                eprintln!(
                    "skipping: ip netns add {name}: {}",
                    String::from_utf8_lossy(&o.stderr)
                );
                None
            }
            Err(e) => {
                eprintln!("skipping: ip netns add: {e}");
                None
            }
        }
    }

    /// Moves the calling thread into the namespace, and turns IPv6 off there so that the
    /// kernel keeps quiet on the links made afterwards (no router solicitations, no MLD).
    pub fn enter(&mut self) {
        let home = File::open("/proc/thread-self/ns/net").expect("open own netns");
        let target = File::open(format!("/var/run/netns/{}", self.name)).expect("open netns");
        // SAFETY: setns takes a namespace descriptor (open for the call) and a type; it
        // changes only this thread's network namespace.
        let r = unsafe { libc::setns(target.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(r, 0, "setns: {}", io::Error::last_os_error());
        self.home = Some(home);
        for f in ["all", "default"] {
            let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{f}/disable_ipv6"), "1");
        }
    }

    /// Opens the TAP `name` in the namespace (the calling thread is in it), gives it
    /// `config.mtu` and 198.18.0.1/15 on the Linux side, and brings it up.
    pub fn tap(&self, name: &str, config: TapConfig) -> TapDevice {
        let tap = TapDevice::open(name, config).expect("open TAP");
        assert_eq!(tap.name(), name);
        self.ip(&["link", "set", name, "mtu", &config.mtu.to_string(), "up"]);
        self.ip(&["addr", "add", "198.18.0.1/15", "dev", name]);
        tap
    }

    /// `ip -n <ns> args...`, which must succeed.
    pub fn ip(&self, args: &[&str]) {
        run(Command::new("ip").arg("-n").arg(&self.name).args(args));
    }

    /// `ip netns exec <ns> args...`.
    pub fn exec(&self, args: &[&str]) -> Output {
        Command::new("ip")
            .args(["netns", "exec", &self.name])
            .args(args)
            .output()
            .expect("ip netns exec")
    }

    /// Linux's `ping` from the namespace to `to`, three echoes at each of 56, 1472 and
    /// 3000 bytes (the last takes two fragments each way); all must come back.
    pub fn ping_sizes(&self, to: &str) {
        for size in ["56", "1472", "3000"] {
            let out = self.exec(&["ping", "-c", "3", "-i", "0.1", "-W", "1", "-s", size, to]);
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "ping -s {size} failed:\n{text}\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(text.contains("3 received"), "ping -s {size}:\n{text}");
        }
    }

    /// The MAC address of interface `dev` in the namespace.
    pub fn mac_of(&self, dev: &str) -> [u8; 6] {
        let out =
            run(Command::new("ip").args(["-n", &self.name, "-br", "link", "show", "dev", dev]));
        let text = String::from_utf8_lossy(&out.stdout);
        let field = text.split_whitespace().nth(2).expect("ip -br link: MAC");
        let mut mac = [0u8; 6];
        for (m, part) in mac.iter_mut().zip(field.split(':')) {
            *m = u8::from_str_radix(part, 16).expect("MAC byte");
        }
        mac
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if let Some(home) = self.home.take() {
            // SAFETY: as in `enter`; `home` is this thread's original namespace.
            unsafe { libc::setns(home.as_raw_fd(), libc::CLONE_NEWNET) };
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// A device whose statistics the test can read while a stack owns it: published after
/// every transmit and receive.
pub struct Watched<D, S> {
    dev: D,
    stats: Arc<Mutex<S>>,
    read: fn(&D) -> S,
}

impl<D, S> Watched<D, S> {
    /// Wraps `dev`; `read` takes its statistics. The second value is where they appear.
    pub fn new(dev: D, read: fn(&D) -> S) -> (Watched<D, S>, Arc<Mutex<S>>) {
        let stats = Arc::new(Mutex::new(read(&dev)));
        let w = Watched {
            dev,
            stats: stats.clone(),
            read,
        };
        (w, stats)
    }

    fn publish(&self) {
        *self.stats.lock().unwrap() = (self.read)(&self.dev);
    }
}

impl<D: Device, S> Device for Watched<D, S> {
    fn caps(&self) -> DeviceCaps {
        self.dev.caps()
    }
    fn transmit(
        &mut self,
        frame: PacketBuf,
        meta: TxMeta,
        cx: &DeviceContext<'_>,
    ) -> Result<(), DeviceError> {
        let r = self.dev.transmit(frame, meta, cx);
        self.publish();
        r
    }
    fn tx_ready(&self) -> bool {
        self.dev.tx_ready()
    }
    fn take_notification(&mut self, cx: &DeviceContext<'_>) -> bool {
        self.dev.take_notification(cx)
    }
    fn receive(&mut self, cx: &DeviceContext<'_>) -> Option<RxFrame> {
        let f = self.dev.receive(cx);
        self.publish();
        f
    }
    fn next_deadline(&self) -> Option<Instant> {
        self.dev.next_deadline()
    }
    fn readiness_fd(&self) -> Option<i32> {
        self.dev.readiness_fd()
    }
    fn recycle(&mut self, frame: PacketBuf) {
        self.dev.recycle(frame)
    }
    fn counters(&self) -> Vec<(&'static str, u64)> {
        self.dev.counters()
    }
}

/// Sets a flag when dropped: stops a stack's thread even if the test panics.
pub struct StopOnDrop<'a>(pub &'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// The byte at offset `i` of a bulk transfer's stream.
pub fn pattern(i: usize) -> u8 {
    (i.wrapping_mul(2_654_435_761) >> 13) as u8 ^ (i >> 20) as u8
}

/// A Linux socket's side of a bulk transfer to the stack at 198.18.0.2:5001: connects,
/// writes `total` bytes of [`pattern`], shuts its side, and reads until the stack's FIN
/// (nothing else may come), each step within `timeout`. Returns how long it took.
pub fn linux_sends_pattern(total: usize, timeout: StdDuration) -> StdDuration {
    let data: Vec<u8> = (0..total).map(pattern).collect();
    let started = std::time::Instant::now();
    let mut sock = TcpStream::connect_timeout(
        &"198.18.0.2:5001".parse().unwrap(),
        StdDuration::from_secs(3),
    )
    .expect("connect");
    sock.set_read_timeout(Some(timeout)).unwrap();
    sock.set_write_timeout(Some(timeout)).unwrap();
    sock.write_all(&data).expect("write to the stack");
    sock.shutdown(Shutdown::Write).unwrap();
    // The stack closes after reading everything: end of stream here.
    let mut rest = Vec::new();
    sock.read_to_end(&mut rest)
        .expect("read until the stack's FIN");
    assert!(rest.is_empty());
    started.elapsed()
}

/// A Linux socket's side of a bulk transfer from the stack: accepts one connection on
/// `listener` and reads until end of stream, each read within `timeout`. Returns the
/// bytes read and whether each was [`pattern`]'s.
pub fn linux_receives_pattern(
    listener: std::net::TcpListener,
    timeout: StdDuration,
) -> (usize, bool) {
    let (mut conn, _) = listener.accept().expect("accept the stack's connection");
    conn.set_read_timeout(Some(timeout)).unwrap();
    let mut buf = vec![0u8; 64 * 1024];
    let (mut got, mut intact) = (0usize, true);
    loop {
        let n = conn.read(&mut buf).expect("read from the stack");
        if n == 0 {
            return (got, intact);
        }
        intact &= buf[..n]
            .iter()
            .enumerate()
            .all(|(i, &b)| b == pattern(got + i));
        got += n;
    }
}

/// The payload of datagram number `seq`.
pub fn datagram(seq: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 + seq * 7 + 3) as u8).collect()
}

/// The receiving application of a bulk TCP transfer, run in a runner's turns: accepts one
/// connection on the listener, reads everything and checks each byte against
/// [`pattern`], and closes when the peer's FIN comes.
pub struct BulkSink {
    listener: TcpHandle,
    conn: Option<TcpHandle>,
    buf: Vec<u8>,
    /// Bytes received.
    pub got: usize,
    /// Whether every byte was the one expected.
    pub intact: bool,
    /// Whether the peer's FIN came (and the sink closed).
    pub eof: bool,
}

impl BulkSink {
    pub fn new(listener: TcpHandle) -> BulkSink {
        BulkSink {
            listener,
            conn: None,
            buf: vec![0u8; 256 * 1024],
            got: 0,
            intact: true,
            eof: false,
        }
    }

    /// One turn: accept, then read until nothing is left.
    pub fn turn(&mut self, st: &mut Stack) {
        let c = match self.conn {
            Some(c) => c,
            None => match st.tcp_accept(self.listener) {
                Ok(c) => *self.conn.insert(c),
                Err(TcpError::WouldBlock) => return,
                Err(e) => panic!("accept: {e:?}"),
            },
        };
        while !self.eof {
            match st.tcp_recv(c, &mut self.buf) {
                Ok(0) => {
                    st.tcp_close(c).expect("close");
                    self.eof = true;
                }
                Ok(n) => {
                    let got = self.got;
                    self.intact &= self.buf[..n]
                        .iter()
                        .enumerate()
                        .all(|(i, &b)| b == pattern(got + i));
                    self.got += n;
                }
                Err(TcpError::WouldBlock) => break,
                Err(e) => panic!("recv: {e:?}"),
            }
        }
    }
}

/// The sending application of a bulk TCP transfer: connects, sends `total` bytes of
/// [`pattern`] as fast as the connection takes them, then closes.
pub struct BulkSource {
    conn: TcpHandle,
    data: Vec<u8>,
    /// Bytes the stack took.
    pub sent: usize,
    /// Whether everything was taken and the close asked for.
    pub closed: bool,
}

impl BulkSource {
    pub fn connect(st: &mut Stack, to: (Ipv4Address, u16), total: usize) -> BulkSource {
        BulkSource {
            conn: st.tcp_connect(to).expect("connect"),
            data: (0..total).map(pattern).collect(),
            sent: 0,
            closed: false,
        }
    }

    /// The connection.
    pub fn handle(&self) -> TcpHandle {
        self.conn
    }

    /// One turn: queue as much as the send buffer takes; close after the last byte.
    pub fn turn(&mut self, st: &mut Stack) {
        while self.sent < self.data.len() {
            match st.tcp_send(self.conn, &self.data[self.sent..]) {
                Ok(n) => self.sent += n,
                Err(TcpError::WouldBlock) => break,
                Err(e) => panic!("send: {e:?}"),
            }
        }
        if self.sent == self.data.len() && !self.closed {
            st.tcp_close(self.conn).expect("close");
            self.closed = true;
        }
    }
}

/// A UDP datagram as an Ethernet frame whose IPv4 header checksum is zero and whose UDP
/// checksum field holds the pseudo-header sum (what the stack leaves for an offloading
/// device), or `bad_checksum` in it.
pub struct UdpFrame {
    pub src_mac: EthernetAddress,
    pub dst_mac: [u8; 6],
    pub src: (Ipv4Address, u16),
    pub dst: (Ipv4Address, u16),
}

impl UdpFrame {
    pub fn build(&self, payload: &[u8], bad_checksum: Option<u16>) -> PacketBuf {
        let udp_len = 8 + payload.len();
        let ip = ipv4_header(self.src.0, self.dst.0, IpProtocol::Udp, udp_len);
        let mut f = ipv4_frame(self.src_mac, EthernetAddress(self.dst_mac), &ip, |p| {
            p[0..2].copy_from_slice(&self.src.1.to_be_bytes());
            p[2..4].copy_from_slice(&self.dst.1.to_be_bytes());
            p[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
            let seed = checksum::pseudo_header_v4(self.src.0 .0, self.dst.0 .0, 17, udp_len as u16);
            p[6..8].copy_from_slice(&bad_checksum.unwrap_or(seed).to_be_bytes());
            p[8..].copy_from_slice(payload);
        });
        f[24..26].copy_from_slice(&[0, 0]);
        PacketBuf::from_slice(&f, 0).unwrap()
    }
}

/// An interface feature `ethtool -K` switches, through the legacy `SIOCETHTOOL` commands
/// of `include/uapi/linux/ethtool.h` (so the tests need no `ethtool` binary).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Feature {
    /// `tx-checksumming` (`ETHTOOL_[GS]TXCSUM`); off also turns TSO off.
    TxChecksum,
    /// `tcp-segmentation-offload` (`ETHTOOL_[GS]TSO`).
    Tso,
    /// `generic-segmentation-offload` (`ETHTOOL_[GS]GSO`).
    Gso,
    /// `generic-receive-offload` (`ETHTOOL_[GS]GRO`).
    Gro,
}

impl Feature {
    /// The get and set commands.
    fn commands(self) -> (u32, u32) {
        match self {
            Feature::TxChecksum => (0x16, 0x17),
            Feature::Tso => (0x1e, 0x1f),
            Feature::Gso => (0x23, 0x24),
            Feature::Gro => (0x2b, 0x2c),
        }
    }
}

/// `struct ethtool_value`.
#[repr(C)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

/// The `struct ifreq` of `SIOCETHTOOL`: the name, then `ifr_data`, padded to 40 bytes.
#[repr(C)]
struct IfReqData {
    name: [u8; 16],
    data: *mut EthtoolValue,
    _pad: [u8; 16],
}

fn ethtool(dev: &str, cmd: u32, data: u32) -> io::Result<u32> {
    assert!(dev.len() < 16);
    // SAFETY: socket takes no memory and returns a new descriptor or -1.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a new descriptor that nothing else owns.
    let sock = unsafe { OwnedFd::from_raw_fd(raw) };
    let mut value = EthtoolValue { cmd, data };
    let mut req = IfReqData {
        name: [0; 16],
        data: &mut value,
        _pad: [0; 16],
    };
    req.name[..dev.len()].copy_from_slice(dev.as_bytes());
    // SAFETY: SIOCETHTOOL reads the name and the pointer from `req` (40 bytes, the size of
    // `struct ifreq`) and reads and writes the `struct ethtool_value` it points to; both
    // live across the call.
    let r = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCETHTOOL as _, &mut req) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(value.data)
}

/// Switches `feature` of interface `dev` (in the calling thread's namespace).
pub fn set_feature(dev: &str, feature: Feature, on: bool) -> io::Result<()> {
    ethtool(dev, feature.commands().1, u32::from(on)).map(|_| ())
}

/// Whether `feature` of interface `dev` is on.
pub fn feature_on(dev: &str, feature: Feature) -> io::Result<bool> {
    ethtool(dev, feature.commands().0, 0).map(|v| v != 0)
}

/// The stack at 198.18.0.2 echoes UDP on port 7777 (driven by the runner on a thread of
/// its own) while this thread, inside the namespace, sends one datagram of each size from
/// a Linux socket at 198.18.0.1 and checks that the same bytes come back from the stack.
/// The first datagram waits for ARP; a lost one is tried again, up to four times.
pub fn udp_echo_from_linux(stack: &mut Stack, sizes: &[usize]) {
    let ours = Ipv4Address::new(198, 18, 0, 2);
    let h = stack.udp_open();
    stack.udp_bind(h, ours, 7777).unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let _stop = StopOnDrop(&stop);
        s.spawn(|| {
            let clock = RealClock::new();
            let mut buf = vec![0u8; 65536];
            runner::run(stack, &clock, &stop, |st, _| loop {
                match st.udp_recv_from(h, &mut buf) {
                    Ok(r) => {
                        assert!(!r.truncated);
                        st.udp_send_to(h, &buf[..r.len], r.from.0, r.from.1)
                            .expect("echo");
                    }
                    Err(UdpError::WouldBlock) => break,
                    Err(e) => panic!("udp_recv_from: {e}"),
                }
            })
            .expect("runner");
        });
        let sock = UdpSocket::bind("198.18.0.1:0").expect("bind");
        sock.set_read_timeout(Some(StdDuration::from_millis(500)))
            .unwrap();
        let mut buf = vec![0u8; 65536];
        for (seq, &len) in sizes.iter().enumerate() {
            let d = datagram(seq, len);
            let mut answered = false;
            'tries: for _ in 0..4 {
                sock.send_to(&d, "198.18.0.2:7777").expect("send_to");
                loop {
                    let (n, from) = match sock.recv_from(&mut buf) {
                        Ok(got) => got,
                        Err(e)
                            if e.kind() == io::ErrorKind::WouldBlock
                                || e.kind() == io::ErrorKind::TimedOut =>
                        {
                            continue 'tries;
                        }
                        Err(e) => panic!("recv_from: {e}"),
                    };
                    assert_eq!(from, "198.18.0.2:7777".parse::<SocketAddr>().unwrap());
                    // A late echo of an earlier datagram (sent again after a timeout on a
                    // loaded machine) is not this one's answer: skip it.
                    let stale = sizes[..seq]
                        .iter()
                        .enumerate()
                        .any(|(s, &l)| l == n && buf[..n] == datagram(s, l)[..]);
                    if stale {
                        continue;
                    }
                    assert_eq!(&buf[..n], &d[..], "echo of {len} bytes");
                    answered = true;
                    break 'tries;
                }
            }
            assert!(answered, "no echo of {len} bytes");
        }
    });
}

/// Why `python` cannot import `module`, if it cannot (such as scapy, from Debian's
/// `python3-scapy`, for `/usr/bin/python3`).
pub fn python_module_missing(python: &str, module: &str) -> Option<String> {
    match Command::new(python)
        .args(["-c", &format!("import {module}")])
        .output()
    {
        Ok(o) if o.status.success() => None,
        Ok(_) => Some(format!("{python} cannot import {module}")),
        Err(e) => Some(format!("no {python}: {e}")),
    }
}
