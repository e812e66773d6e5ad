//! The stack on a real device: `probestack serve` (echo, discard and chargen over UDP and
//! TCP on a TAP interface, until Ctrl-C), `probestack ping` (ICMP echo from our stack) and
//! `probestack send` (UDP datagrams or a TCP bulk transfer).
//!
//! Each opens the TAP device (wrapped in a pcap writer with `--pcap`), gives the stack one
//! interface, and drives it with [`probestack::runner`]. House rule (DESIGN.md §6): our
//! address and every destination lie in 198.18.0.0/15; anything else is refused.

pub mod iperf3;
pub mod services;

use std::io::BufWriter;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use clap::Args;
use probestack::driver::packet::{PacketConfig, PacketDevice};
use probestack::driver::tap::{TapConfig, TapDevice};
use probestack::driver::{Device, PcapMode, PcapWriter};
use probestack::ip::route::Ipv4Cidr;
use probestack::runner::{self, RunStats};
use probestack::socket::tcp::{TcpError, TcpHandle};
use probestack::socket::udp::UdpError;
use probestack::stack::{InterfaceConfig, Stack, StackConfig};
use probestack::tcp::connection::State;
use probestack::time::{Clock, Duration, Instant, RealClock};
use probestack::tuning::Tuning;
use probestack::wire::ethernet::EthernetAddress;
use probestack::wire::Ipv4Address;

use self::services::Services;

/// The only addresses probestack uses: 198.18.0.0/15 (RFC 2544's benchmarking range).
pub const BENCHMARK_NET: Ipv4Cidr = Ipv4Cidr {
    address: Ipv4Address::new(198, 18, 0, 0),
    prefix_len: 15,
};

/// iperf3's port.
pub const IPERF3_PORT: u16 = 5201;

/// Our interface's MAC address (locally administered).
pub const MAC: EthernetAddress = EthernetAddress([0x02, 0x00, 0x00, 0x00, 0x00, 0x02]);

/// The device and address every command takes.
#[derive(Args, Debug)]
pub struct HostArgs {
    /// The TAP interface to attach to (give it an address in 198.18.0.0/15 on the Linux
    /// side, e.g. `ip addr add 198.18.0.1/15 dev NAME`).
    #[arg(long, value_name = "NAME", required_unless_present = "packet")]
    pub tap: Option<String>,
    /// Or an interface to use through an AF_PACKET socket, e.g. one end of a veth pair
    /// (the other end may belong to Linux or to another probestack).
    #[arg(long, value_name = "IFNAME", conflicts_with = "tap")]
    pub packet: Option<String>,
    /// Our address and prefix, inside 198.18.0.0/15 (e.g. 198.18.0.2/15).
    #[arg(long, value_name = "ADDR/PREFIX")]
    pub addr: String,
    /// Checksum and TCP segmentation offload: asked of Linux on a TAP; on an AF_PACKET
    /// interface, what the stack is told it may leave to the kernel.
    #[arg(long)]
    pub offload: bool,
    /// Capture our frames, both ways, to this pcap file.
    #[arg(long, value_name = "FILE")]
    pub pcap: Option<PathBuf>,
    /// The link MTU (the Linux side's should match).
    #[arg(long, default_value_t = 1500)]
    pub mtu: usize,
}

#[derive(Args, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    pub host: HostArgs,
}

#[derive(Args, Debug)]
pub struct PingArgs {
    /// The address to ping (inside 198.18.0.0/15).
    pub dest: Ipv4Addr,
    #[command(flatten)]
    pub host: HostArgs,
    /// Echo requests to send.
    #[arg(long, default_value_t = 4)]
    pub count: u16,
    /// ICMP payload bytes per request.
    #[arg(long, default_value_t = 56)]
    pub size: usize,
    /// Milliseconds between requests.
    #[arg(long, default_value_t = 1000)]
    pub interval_ms: u64,
}

#[derive(Args, Debug)]
pub struct SendArgs {
    #[command(flatten)]
    pub host: HostArgs,
    /// The destination (inside 198.18.0.0/15).
    #[arg(long, value_name = "ADDR:PORT")]
    pub to: SocketAddrV4,
    /// Send UDP datagrams.
    #[arg(long, conflicts_with = "tcp", required_unless_present = "tcp")]
    pub udp: bool,
    /// Open a TCP connection and send a bulk transfer.
    #[arg(long)]
    pub tcp: bool,
    /// Bytes of payload to send in all.
    #[arg(long, default_value_t = 10_000_000)]
    pub bytes: u64,
    /// Bytes per datagram (UDP; default 1472, a full 1500-byte frame) or per write (TCP;
    /// default 65536).
    #[arg(long)]
    pub size: Option<usize>,
    /// Pace the sending at this many Mbit/s of payload (default: as fast as it goes).
    #[arg(long, value_name = "MBIT")]
    pub rate: Option<f64>,
}

impl HostArgs {
    /// The interface's name.
    pub fn device_name(&self) -> &str {
        self.tap.as_deref().or(self.packet.as_deref()).unwrap_or("")
    }
}

/// Refuses an interface address outside the benchmarking range, or a prefix that would
/// reach past it.
pub fn check_interface_addr(s: &str) -> Result<Ipv4Cidr, String> {
    let cidr: Ipv4Cidr = s.parse().map_err(|e| format!("--addr {s}: {e}"))?;
    if !BENCHMARK_NET.contains(cidr.address) || cidr.prefix_len < BENCHMARK_NET.prefix_len {
        return Err(format!(
            "--addr {s} is outside 198.18.0.0/15: probestack uses only the benchmarking \
             range (RFC 2544) on real interfaces"
        ));
    }
    Ok(cidr)
}

/// Refuses a destination outside the benchmarking range.
pub fn check_destination(a: Ipv4Addr) -> Result<Ipv4Address, String> {
    let a = Ipv4Address::from(a);
    if !BENCHMARK_NET.contains(a) {
        return Err(format!(
            "destination {a} is outside 198.18.0.0/15: probestack sends only to the \
             benchmarking range (RFC 2544)"
        ));
    }
    Ok(a)
}

/// Opens the device (in a pcap writer with `--pcap`) and a stack with it as its
/// interface.
fn open_stack(h: &HostArgs) -> Result<Stack, String> {
    let cidr = check_interface_addr(&h.addr)?;
    let device: Box<dyn Device + Send> = match (&h.tap, &h.packet) {
        (Some(name), _) => {
            let config = TapConfig {
                mtu: h.mtu,
                offload: h.offload,
            };
            Box::new(TapDevice::open(name, config).map_err(|e| format!("TAP {name}: {e}"))?)
        }
        (None, Some(name)) => {
            let config = PacketConfig {
                mtu: h.mtu,
                offload: h.offload,
            };
            Box::new(
                PacketDevice::open(name, config)
                    .map_err(|e| format!("AF_PACKET on {name}: {e}"))?,
            )
        }
        (None, None) => return Err("give --tap NAME or --packet IFNAME".into()),
    };
    let device: Box<dyn Device + Send> = match &h.pcap {
        Some(path) => {
            let file = std::fs::File::create(path)
                .map_err(|e| format!("creating {}: {e}", path.display()))?;
            let w = PcapWriter::new(device, BufWriter::new(file), PcapMode::Both)
                .map_err(|e| format!("writing {}: {e}", path.display()))?;
            Box::new(w)
        }
        None => device,
    };
    // On a real network the ISNs' key and the ports must not be the same every run.
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0x5EED, |d| d.as_nanos() as u64)
        ^ u64::from(std::process::id());
    let mut stack = Stack::new(StackConfig {
        tuning: Tuning::fast(),
        seed,
        ..StackConfig::default()
    });
    stack.add_interface(device, InterfaceConfig { mac: MAC, cidr });
    Ok(stack)
}

/// Prints the runner's figures and the stack's counters that are not zero.
fn print_stack(stack: &Stack, stats: &RunStats, host: &HostArgs) {
    println!(
        "runner: {} loops, {} polls, {} waits, {} woken by the device",
        stats.loops, stats.polls, stats.waits, stats.wakeups
    );
    let counters: Vec<(&str, u64)> = stack
        .ledger()
        .counters()
        .snapshot()
        .into_iter()
        .filter(|&(_, v)| v != 0)
        .collect();
    if counters.is_empty() {
        println!("stack counters: all zero");
    } else {
        println!("stack counters:");
        for (name, v) in counters {
            println!("  {name:32} {v}");
        }
    }
    // Demultiplexing: each protocol's PCB lookups and how many its one-behind receive
    // cache answered (paper 002 §6.3).
    for (proto, pcbs) in [
        ("udp", stack.udp_pcb_stats()),
        ("tcp", stack.tcp_pcb_stats()),
    ] {
        if pcbs.lookups != 0 {
            println!(
                "{proto} pcb lookups: {} ({} unmatched, {} answered by the receive cache, {} entries examined)",
                pcbs.lookups, pcbs.unmatched, pcbs.recv_cache_hits, pcbs.examined
            );
        }
    }
    // The device's own counters, as `tap.rx_gso_frames` or `packet.tx_frames`.
    let kind = if host.tap.is_some() { "tap" } else { "packet" };
    let offload = if host.offload { "on" } else { "off" };
    println!("{kind} ({}, offloads {offload}):", host.device_name());
    for (k, v) in stack.interface_counters(0) {
        if v != 0 {
            println!("  {:32} {v}", format!("{kind}.{k}"));
        }
    }
}

fn run(
    stack: &mut Stack,
    clock: &RealClock,
    stop: &AtomicBool,
    app: impl FnMut(&mut Stack, Instant),
) -> Result<RunStats, String> {
    runner::run(stack, clock, stop, app).map_err(|e| format!("epoll: {e}"))
}

fn signals() -> Result<&'static AtomicBool, String> {
    runner::stop_on_signals().map_err(|e| format!("installing the signal handler: {e}"))
}

/// `probestack serve`: the services until SIGINT or SIGTERM, then what they did.
pub fn serve(a: ServeArgs) -> Result<(), String> {
    let mut stack = open_stack(&a.host)?;
    let stop = signals()?;
    let mut services = Services::new(&mut stack)?;
    let mut iperf3 = iperf3::Iperf3Server::new(&mut stack, IPERF3_PORT)?;
    eprintln!(
        "probestack: serving echo (7), discard (9) and chargen (19), UDP and TCP, and an \
         iperf3 server ({IPERF3_PORT}) at {} on {}; Ctrl-C stops",
        a.host.addr,
        a.host.device_name()
    );
    let clock = RealClock::new();
    let stats = run(&mut stack, &clock, stop, |st, now| {
        services.poll(st, now);
        iperf3.poll(st, now);
    })?;
    eprintln!("probestack: stopping");
    print_stack(&stack, &stats, &a.host);
    println!("services:");
    for (name, counts) in services.counts() {
        let c = counts.nonzero();
        if c.is_empty() {
            println!("  {name}: nothing");
        }
        for (k, v) in c {
            println!("  {:32} {v}", format!("{name}.{k}"));
        }
    }
    println!(
        "  TCP connections still open: {}",
        services.open_connections()
    );
    let ip = iperf3.stats();
    println!("iperf3 (port {}):", iperf3.port());
    if iperf3.busy() {
        println!("  a test was still running");
    }
    for (k, v) in [
        ("tests_started", ip.tests_started),
        ("tests_completed", ip.tests_completed),
        ("bytes_received", ip.bytes_received),
        ("bytes_sent", ip.bytes_sent),
        ("udp_lost", ip.udp_lost),
        ("udp_out_of_order", ip.udp_out_of_order),
        ("udp_ignored", ip.udp_ignored),
        ("access_denied", ip.access_denied),
        ("errors", ip.errors),
    ] {
        if v != 0 {
            println!("  {:32} {v}", format!("iperf3.{k}"));
        }
    }
    if let Some(e) = &ip.last_error {
        println!("  iperf3 last error: {e}");
    }
    Ok(())
}

/// `probestack ping`: echo requests from our stack, one per interval, and the replies.
pub fn ping(a: PingArgs) -> Result<(), String> {
    let dest = check_destination(a.dest)?;
    if a.size > probestack::ip::MAX_PAYLOAD - 8 {
        return Err(format!(
            "--size {}: the largest ICMP payload is 65507",
            a.size
        ));
    }
    let mut stack = open_stack(&a.host)?;
    let stop = signals()?;
    let clock = RealClock::new();
    let ident = std::process::id() as u16;
    let data: Vec<u8> = (0..a.size).map(|i| i as u8).collect();
    let interval = Duration::from_millis(a.interval_ms);
    // The last reply may take this long after the last request.
    let linger = Duration::from_secs(2);
    let mut sent_at: Vec<Instant> = Vec::new();
    let mut rtts: Vec<f64> = Vec::new();
    let mut next = Instant::ZERO;
    let mut error = None;
    println!("PING {dest}: {} data bytes from {}", a.size, a.host.addr);
    let stats = run(&mut stack, &clock, stop, |st, now| {
        while let Some(r) = st.take_echo_reply() {
            let seq = r.seq_no as usize;
            if r.ident != ident || r.from != dest || seq >= sent_at.len() {
                continue;
            }
            let rtt = (r.received_at - sent_at[seq]).as_nanos() as f64 / 1e6;
            let ok = if r.data == data { "" } else { " (data differ)" };
            println!(
                "{} bytes from {}: icmp_seq={seq} time={rtt:.3} ms{ok}",
                r.data.len(),
                r.from
            );
            rtts.push(rtt);
        }
        let all_sent = sent_at.len() >= a.count as usize;
        if all_sent {
            let last = sent_at.last().copied().unwrap_or(now);
            if rtts.len() >= sent_at.len() || now >= last + linger {
                stop.store(true, Ordering::Relaxed);
            }
        } else if now >= next {
            let seq = sent_at.len() as u16;
            if let Err(e) = st.ping(dest, ident, seq, &data, now) {
                error = Some(format!("ping: {e}"));
                stop.store(true, Ordering::Relaxed);
            }
            sent_at.push(now);
            next = now + interval;
        }
    })?;
    if let Some(e) = error {
        return Err(e);
    }
    let n = sent_at.len();
    let loss = if n == 0 {
        0.0
    } else {
        100.0 * (n - rtts.len().min(n)) as f64 / n as f64
    };
    println!(
        "--- {dest} ping statistics ---\n{n} transmitted, {} received, {loss:.0}% loss",
        rtts.len()
    );
    if !rtts.is_empty() {
        let min = rtts.iter().copied().fold(f64::INFINITY, f64::min);
        let max = rtts.iter().copied().fold(0.0, f64::max);
        let avg = rtts.iter().sum::<f64>() / rtts.len() as f64;
        println!("rtt min/avg/max = {min:.3}/{avg:.3}/{max:.3} ms");
    }
    print_stack(&stack, &stats, &a.host);
    Ok(())
}

/// The payload byte at `offset` of what `send` sends: a pattern a receiver can check.
fn pattern(offset: u64) -> u8 {
    (offset % PATTERN_PERIOD) as u8
}

/// The period of [`pattern`] (a prime, so it does not line up with any write size).
const PATTERN_PERIOD: u64 = 251;

/// `probestack send`: UDP datagrams or a TCP bulk transfer, then what was sent and the
/// rate.
pub fn send(a: SendArgs) -> Result<(), String> {
    let dest = check_destination(*a.to.ip())?;
    let port = a.to.port();
    if port == 0 {
        return Err("--to: port 0 is not a destination".into());
    }
    if let Some(r) = a.rate {
        if !(r.is_finite() && r > 0.0) {
            return Err(format!("--rate {r}: expected a positive number of Mbit/s"));
        }
    }
    let mut stack = open_stack(&a.host)?;
    let stop = signals()?;
    let clock = RealClock::new();
    let to = (dest, port);
    let report = if a.udp {
        let size = a.size.unwrap_or(1472);
        if size > probestack::socket::udp::MAX_UDP_PAYLOAD {
            return Err(format!("--size {size}: the largest UDP payload is 65507"));
        }
        send_udp(&mut stack, &clock, stop, to, a.bytes, size, a.rate)?
    } else {
        let size = a.size.unwrap_or(65536).max(1);
        send_tcp(&mut stack, &clock, stop, to, a.bytes, size, a.rate)?
    };
    println!("{}", report.line);
    print_stack(&stack, &report.stats, &a.host);
    if report.interrupted {
        println!("(interrupted before the end)");
    }
    Ok(())
}

struct SendReport {
    line: String,
    stats: RunStats,
    interrupted: bool,
}

/// Payload bytes a paced sender may have sent `elapsed` into the run (no pacing: all).
fn allowance(rate_mbit: Option<f64>, elapsed: Duration, burst: u64) -> u64 {
    match rate_mbit {
        Some(r) => (r * 1e6 / 8.0 * elapsed.as_secs_f64()) as u64 + burst,
        None => u64::MAX,
    }
}

fn rate_line(what: &str, bytes: u64, elapsed: Duration) -> String {
    let secs = elapsed.as_secs_f64().max(1e-9);
    format!(
        "{what}: {bytes} bytes in {secs:.3} s, {:.1} Mbit/s",
        bytes as f64 * 8.0 / secs / 1e6
    )
}

/// Datagrams of `size` until `total` bytes are sent. One ping first resolves the
/// destination's Ethernet address (waiting at most a second), so that the first datagrams
/// do not queue behind ARP.
fn send_udp(
    stack: &mut Stack,
    clock: &RealClock,
    stop: &AtomicBool,
    to: (Ipv4Address, u16),
    total: u64,
    size: usize,
    rate: Option<f64>,
) -> Result<SendReport, String> {
    let s = stack.udp_open();
    let data: Vec<u8> = (0..size as u64).map(pattern).collect();
    let mut resolving: Option<Instant> = None;
    let mut start: Option<Instant> = None;
    let (mut sent, mut datagrams, mut refused) = (0u64, 0u64, 0u64);
    let mut error = None;
    let mut end = Instant::ZERO;
    let ident = std::process::id() as u16;
    let stats = run(stack, clock, stop, |st, now| {
        let Some(t0) = start else {
            match resolving {
                None => {
                    let _ = st.ping(to.0, ident, 0, b"arp", now);
                    resolving = Some(now);
                }
                Some(r) => {
                    if st.take_echo_reply().is_some() || now - r >= Duration::from_secs(1) {
                        start = Some(now);
                    }
                }
            }
            return;
        };
        let allowed = allowance(rate, now - t0, size as u64).min(total);
        // A bounded batch per turn, so the stack gets its polls.
        for _ in 0..256 {
            if sent >= allowed || sent >= total {
                break;
            }
            let n = (total - sent).min(size as u64) as usize;
            match st.udp_send_to(s, &data[..n], to.0, to.1) {
                Ok(_) => {
                    sent += n as u64;
                    datagrams += 1;
                }
                Err(UdpError::NoBuffer) => {
                    refused += 1;
                    break;
                }
                Err(e) => {
                    error = Some(format!("send: {e}"));
                    stop.store(true, Ordering::Relaxed);
                    return;
                }
            }
        }
        if sent >= total {
            end = clock.now();
            stop.store(true, Ordering::Relaxed);
        }
    })?;
    if let Some(e) = error {
        return Err(e);
    }
    let t0 = start.unwrap_or(end);
    let end = if sent >= total { end } else { clock.now() };
    let mut line = rate_line(
        &format!("UDP to {}:{}, {datagrams} datagrams", to.0, to.1),
        sent,
        end - t0,
    );
    if refused > 0 {
        line.push_str(&format!(" ({refused} sends refused for want of buffers)"));
    }
    Ok(SendReport {
        line,
        stats,
        interrupted: sent < total,
    })
}

/// One connection; writes of `size` until `total` bytes are queued, then a FIN; done when
/// everything is acknowledged. Whatever the peer sends is read and counted.
fn send_tcp(
    stack: &mut Stack,
    clock: &RealClock,
    stop: &AtomicBool,
    to: (Ipv4Address, u16),
    total: u64,
    size: usize,
    rate: Option<f64>,
) -> Result<SendReport, String> {
    let mut conn: Option<TcpHandle> = None;
    let mut start: Option<Instant> = None;
    let mut end: Option<Instant> = None;
    let (mut queued, mut received) = (0u64, 0u64);
    let mut shut = false;
    let mut error = None;
    // The pattern repeats every 251 bytes: a write at any offset is a slice of this.
    let data: Vec<u8> = (0..size as u64 + PATTERN_PERIOD).map(pattern).collect();
    let mut rbuf = vec![0u8; 65536];
    let stats = run(stack, clock, stop, |st, now| {
        let h = match conn {
            Some(h) => h,
            None => match st.tcp_connect(to) {
                Ok(h) => {
                    conn = Some(h);
                    h
                }
                Err(e) => {
                    error = Some(format!("connect: {e}"));
                    stop.store(true, Ordering::Relaxed);
                    return;
                }
            },
        };
        if let Ok(Some(e)) = st.tcp_error(h) {
            error = Some(format!(
                "connection to {}:{}: {e} (after {queued} bytes queued)",
                to.0, to.1
            ));
            stop.store(true, Ordering::Relaxed);
            return;
        }
        match st.tcp_state(h) {
            Ok(State::SynSent) | Ok(State::SynReceived) => return,
            Ok(_) => {}
            Err(e) => {
                error = Some(format!("connection: {e}"));
                stop.store(true, Ordering::Relaxed);
                return;
            }
        }
        let t0 = *start.get_or_insert(now);
        loop {
            match st.tcp_recv(h, &mut rbuf) {
                Ok(0) | Err(_) => break,
                Ok(n) => received += n as u64,
            }
        }
        let allowed = allowance(rate, now - t0, size as u64).min(total);
        while queued < allowed {
            let n = (allowed - queued).min(size as u64) as usize;
            let at = (queued % PATTERN_PERIOD) as usize;
            match st.tcp_send(h, &data[at..at + n]) {
                Ok(k) => queued += k as u64,
                Err(TcpError::WouldBlock) => break,
                Err(e) => {
                    error = Some(format!("send: {e} (after {queued} bytes)"));
                    stop.store(true, Ordering::Relaxed);
                    return;
                }
            }
        }
        if queued >= total && !shut {
            let _ = st.tcp_shutdown(h);
            shut = true;
        }
        // Done when the peer has acknowledged everything (our FIN too, past FIN-WAIT-1).
        if shut
            && st.tcp_send_queued(h) == Ok(0)
            && !matches!(
                st.tcp_state(h),
                Ok(State::Established
                    | State::FinWait1
                    | State::CloseWait
                    | State::LastAck
                    | State::Closing)
            )
        {
            end = Some(now);
            stop.store(true, Ordering::Relaxed);
        }
    })?;
    if let Some(h) = conn {
        let _ = stack.tcp_close(h);
        // The close's FIN or RST goes out with one more poll.
        stack.poll(clock.now());
    }
    if let Some(e) = error {
        return Err(e);
    }
    let t0 = start.unwrap_or_else(|| clock.now());
    let finished = end.is_some();
    let t1 = end.unwrap_or_else(|| clock.now());
    let acked = if finished { total } else { queued };
    let mut line = rate_line(
        &format!(
            "TCP to {}:{}, {} acknowledged",
            to.0,
            to.1,
            if finished { "all" } else { "not all" }
        ),
        acked,
        t1 - t0,
    );
    if received > 0 {
        line.push_str(&format!("; the peer sent {received} bytes"));
    }
    Ok(SendReport {
        line,
        stats,
        interrupted: !finished,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_outside_the_benchmark_range_are_refused() {
        assert!(check_interface_addr("198.18.0.2/15").is_ok());
        assert!(check_interface_addr("198.19.255.1/24").is_ok());
        for bad in [
            "10.0.0.2/24",
            "198.20.0.1/15",
            "198.18.0.2/8",
            "198.17.255.255/15",
        ] {
            let e = check_interface_addr(bad).unwrap_err();
            assert!(
                e.contains("outside 198.18.0.0/15") || e.contains(bad),
                "{e}"
            );
        }
        assert!(check_interface_addr("nonsense").is_err());
        assert!(check_destination(Ipv4Addr::new(198, 18, 0, 1)).is_ok());
        assert!(check_destination(Ipv4Addr::new(8, 8, 8, 8)).is_err());
        assert!(check_destination(Ipv4Addr::new(192, 168, 1, 1)).is_err());
    }
}
