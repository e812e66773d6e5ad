//! `probestack lab tap` (issue 8): TCP throughput over real Linux devices, probestack on a
//! TAP beside Linux on a veth pair, all measured with stock iperf3 in one run.
//!
//! The workloads:
//!
//! - `linux_veth`: Linux to Linux. Two network namespaces joined by a veth pair,
//!   198.18.0.1/15 in the client's and 198.18.0.3/15 in the server's; `iperf3 -s -1` in
//!   one, `iperf3 -c` in the other.
//! - `tap_offload`: Linux to probestack. One namespace with a TAP (`ip tuntap add`), Linux's
//!   side at 198.18.0.1/15; this executable's `serve --offload` attached to it at
//!   198.18.0.2/15 (its iperf3-compatible server on port 5201); `iperf3 -c` from Linux.
//! - `tap_no_offload`: the same without `--offload` (MTU-sized frames, checksums computed).
//! - `tap_offload_reverse`, `tap_no_offload_reverse`: the same two with `iperf3 -R`, so
//!   probestack sends and Linux receives.
//!
//! Each figure is iperf3's receiver-side rate (`end.sum_received.bits_per_second`, 10^9
//! bits per second), the median of the timed runs after one warm-up run of each workload.
//! The runs go round-robin (a round runs every workload once, the first one rotating), so
//! a slow spell of the machine hits all alike. Every run builds its bed afresh: new
//! namespaces (deleted when the run ends, by a guard), new links, new servers. The run
//! ends only the processes it started, by their ids: probestack with SIGINT, so that it
//! prints its counters (the stack's, its iperf3 server's and the TAP's), which become the
//! row's `counters` (the median per run) and explain the figures.
//!
//! Root, `/dev/net/tun`, `ip` and `iperf3` are needed; without them [`run`] says why in
//! [`Results::skipped`] and measures nothing. Addresses are only ever in 198.18.0.0/15
//! (DESIGN.md §6), inside the run's own namespaces.
//!
//! A bed is described as data ([`Plan`]: namespaces, links, servers, the client), so a new
//! one is an arm of [`Setup::plan`] and a line in [`WORKLOADS`]. Two probestack processes
//! over a veth pair (the AF_PACKET device) would be: two namespaces, a [`Link::Veth`] whose
//! ends have no addresses, [`Program::Probestack`] with that device's flags in each
//! namespace, ready when the process says so (a new [`Ready`] arm, if carrier is not the
//! signal), and the client in the other.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::bench::median;
use crate::machine::{self, Machine};
use crate::netns::{ip, Netns};
use crate::table::Table;

/// Linux's address on every bed (the iperf3 client's).
const LINUX: &str = "198.18.0.1";
/// probestack's address on the TAP.
const PROBESTACK: &str = "198.18.0.2";
/// The second Linux host's address on the veth pair (the iperf3 server's).
const LINUX_PEER: &str = "198.18.0.3";
/// The prefix of every address: the benchmarking range 198.18.0.0/15 (RFC 2544).
const PREFIX: u8 = 15;
/// iperf3's port.
const PORT: u16 = 5201;
/// The TAP's name inside its namespace.
const TAP: &str = "psk0";

/// How long a server may take to become ready; generous, so a slow machine only waits.
const READY_LIMIT: Duration = Duration::from_secs(30);
/// How long past its `-t` the iperf3 client may take before the run is abandoned.
const CLIENT_GRACE: Duration = Duration::from_secs(60);
/// How long a process may take to exit after it is asked to.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// How long and how often to measure.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// Seconds per iperf3 run (`-t`).
    pub seconds: u32,
    /// Timed runs per workload (the median is reported), after one warm-up run.
    pub runs: usize,
}

impl Settings {
    pub const DEFAULT: Settings = Settings {
        seconds: 5,
        runs: 3,
    };
}

/// The kinds of bed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Setup {
    /// Linux to Linux over a veth pair, a namespace at each end.
    LinuxVeth,
    /// Linux and probestack `serve` on a TAP in one namespace.
    Tap { offload: bool },
}

/// One row: a bed and a direction.
#[derive(Clone, Copy, Debug)]
pub struct Workload {
    pub name: &'static str,
    pub description: &'static str,
    setup: Setup,
    /// iperf3 `-R`: the server sends.
    reverse: bool,
}

/// Every workload, in the order of the table.
pub const WORKLOADS: [Workload; 5] = [
    Workload {
        name: "linux_veth",
        description: "Linux -> Linux, veth pair",
        setup: Setup::LinuxVeth,
        reverse: false,
    },
    Workload {
        name: "tap_offload",
        description: "Linux -> probestack, TAP with offloads",
        setup: Setup::Tap { offload: true },
        reverse: false,
    },
    Workload {
        name: "tap_no_offload",
        description: "Linux -> probestack, TAP without offloads",
        setup: Setup::Tap { offload: false },
        reverse: false,
    },
    Workload {
        name: "tap_offload_reverse",
        description: "probestack -> Linux, TAP with offloads (-R)",
        setup: Setup::Tap { offload: true },
        reverse: true,
    },
    Workload {
        name: "tap_no_offload_reverse",
        description: "probestack -> Linux, TAP without offloads (-R)",
        setup: Setup::Tap { offload: false },
        reverse: true,
    },
];

/// The ratios reported: (name, numerator, denominator, target if the issue sets one).
const RATIOS: [(&str, &str, &str, Option<f64>); 4] = [
    (
        "tap_offload/linux_veth",
        "tap_offload",
        "linux_veth",
        Some(0.5),
    ),
    (
        "tap_offload/tap_no_offload",
        "tap_offload",
        "tap_no_offload",
        None,
    ),
    (
        "tap_offload_reverse/linux_veth",
        "tap_offload_reverse",
        "linux_veth",
        None,
    ),
    (
        "tap_offload_reverse/tap_no_offload_reverse",
        "tap_offload_reverse",
        "tap_no_offload_reverse",
        None,
    ),
];

// ---------------------------------------------------------------------------------------
// Beds as data.

/// One end of a veth pair: its namespace (an index into the plan's), its name, and its
/// address (without one, the kernel leaves the wire to whoever attaches to it).
#[derive(Clone, Debug)]
struct End {
    ns: usize,
    dev: &'static str,
    addr: Option<&'static str>,
}

/// A link the bed makes before its servers start.
#[derive(Clone, Debug)]
enum Link {
    /// A veth pair, each end in its namespace, up.
    Veth { a: End, b: End },
    /// A TAP made the way a user would (`ip tuntap add`), Linux's side addressed and up;
    /// its carrier comes up when a process attaches.
    Tap {
        ns: usize,
        dev: &'static str,
        addr: &'static str,
    },
}

/// What a server runs.
#[derive(Clone, Debug)]
enum Program {
    /// Linux's `iperf3 -s -1` (one test, then it exits).
    Iperf3,
    /// This executable with these arguments. It is stopped with SIGINT and prints its
    /// counters, which the row keeps.
    Probestack(Vec<String>),
}

/// When a server is ready for the client.
#[derive(Clone, Debug)]
enum Ready {
    /// A kernel socket listens on this TCP port in the server's namespace.
    Listening(u16),
    /// This interface in the server's namespace has carrier (a TAP: a process opened it).
    Carrier(&'static str),
}

#[derive(Clone, Debug)]
struct Server {
    ns: usize,
    program: Program,
    ready: Ready,
}

/// Where the iperf3 client runs, and what it connects to.
#[derive(Clone, Debug)]
struct Client {
    ns: usize,
    target: &'static str,
}

/// Everything one run of a bed needs.
#[derive(Clone, Debug)]
struct Plan {
    namespaces: usize,
    links: Vec<Link>,
    servers: Vec<Server>,
    client: Client,
}

impl Setup {
    fn plan(self) -> Plan {
        match self {
            Setup::LinuxVeth => Plan {
                namespaces: 2,
                links: vec![Link::Veth {
                    a: End {
                        ns: 0,
                        dev: "pskv0",
                        addr: Some(LINUX),
                    },
                    b: End {
                        ns: 1,
                        dev: "pskv1",
                        addr: Some(LINUX_PEER),
                    },
                }],
                servers: vec![Server {
                    ns: 1,
                    program: Program::Iperf3,
                    ready: Ready::Listening(PORT),
                }],
                client: Client {
                    ns: 0,
                    target: LINUX_PEER,
                },
            },
            Setup::Tap { offload } => {
                let mut args = vec![
                    "serve".to_string(),
                    "--tap".to_string(),
                    TAP.to_string(),
                    "--addr".to_string(),
                    format!("{PROBESTACK}/{PREFIX}"),
                ];
                if offload {
                    args.push("--offload".to_string());
                }
                Plan {
                    namespaces: 1,
                    links: vec![Link::Tap {
                        ns: 0,
                        dev: TAP,
                        addr: LINUX,
                    }],
                    servers: vec![Server {
                        ns: 0,
                        program: Program::Probestack(args),
                        ready: Ready::Carrier(TAP),
                    }],
                    client: Client {
                        ns: 0,
                        target: PROBESTACK,
                    },
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Results.

/// One workload's figures.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub workload: &'static str,
    pub description: &'static str,
    /// iperf3's receiver-side rate, 10^9 bits per second: the median of `runs`.
    pub gbps: f64,
    /// Every timed run's figure, in the order run (the warm-up run is not among them).
    pub runs: Vec<f64>,
    /// What the servers printed at exit (stack, iperf3 server, TAP; `runner.*` from the
    /// runner's line) and iperf3's `sender_retransmits`: the median per timed run of each.
    pub counters: BTreeMap<String, f64>,
}

/// A run that could not be measured, and why.
#[derive(Clone, Debug, Serialize)]
pub struct Failure {
    pub workload: &'static str,
    /// `warm-up` or `run N` (from 1).
    pub run: String,
    pub error: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct Results {
    pub experiment: &'static str,
    /// Why nothing was measured, when it was not (no root, no TAP, no iperf3...).
    pub skipped: Option<String>,
    pub machine: Machine,
    pub seconds: u32,
    /// Timed runs per workload, after one warm-up run.
    pub runs_per_workload: usize,
    pub rows: Vec<Row>,
    /// `a/b`: row a's median over row b's.
    pub ratios: BTreeMap<String, f64>,
    pub failures: Vec<Failure>,
    /// The run was interrupted (SIGINT or SIGTERM) before the end.
    pub interrupted: bool,
    /// The figures in a sentence.
    pub reading: String,
    pub note: &'static str,
}

pub const NOTE: &str = "iperf3 from the distribution, one TCP stream, its default 128 KiB \
    writes, MTU 1500 everywhere; Gbit/s is iperf3's receiver-side rate (end.sum_received). \
    The TAP keeps Linux's default queue length. Linux to Linux over veth passes 64 KiB GSO \
    super-frames and never computes a checksum; probestack's TAP with offloads takes and \
    gives super-frames (TSO) with the checksum left to the other side, without offloads \
    every frame is MTU-sized and checksummed.";

// ---------------------------------------------------------------------------------------
// Preconditions.

/// Why the benchmark cannot run here, if it cannot.
pub fn skip_reason() -> Option<String> {
    if !cfg!(target_os = "linux") {
        return Some("needs Linux (network namespaces, TAP, veth)".into());
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let euid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|rest| rest.split_whitespace().nth(1));
    if euid != Some("0") {
        return Some(
            "not root: creating network namespaces, a TAP and a veth pair needs it".into(),
        );
    }
    if !Path::new("/dev/net/tun").exists() {
        return Some("no /dev/net/tun: the kernel offers no TUN/TAP here".into());
    }
    for tool in ["ip", "iperf3"] {
        if find_program(tool).is_none() {
            return Some(format!("`{tool}` is not installed (not found on PATH)"));
        }
    }
    if std::env::current_exe().is_err() {
        return Some("cannot find this executable to run `serve` from".into());
    }
    None
}

/// The program's path on `PATH`, if it is there and executable.
fn find_program(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

// ---------------------------------------------------------------------------------------
// Guards: namespaces and processes.

// `Netns` is shared with `lab peers` (crate::netns); the methods only `lab tap` needs
// are here.
impl Netns {
    /// A command that runs `program` inside the namespace (`ip netns exec` execs it in
    /// place, so the child's id is the program's).
    fn exec(&self, program: impl AsRef<OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.0]).arg(program);
        c
    }

    /// Whether `dev` in this namespace has carrier.
    fn carrier(&self, dev: &str) -> bool {
        Command::new("ip")
            .args(["-n", &self.0, "link", "show", dev])
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("LOWER_UP"))
    }

    /// Whether a kernel TCP socket listens on `port` in this namespace.
    fn listening(&self, port: u16) -> bool {
        self.exec("cat")
            .args(["/proc/net/tcp", "/proc/net/tcp6"])
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .is_ok_and(|o| listens(&String::from_utf8_lossy(&o.stdout), port))
    }
}

/// Whether `/proc/net/tcp{,6}` text shows a socket listening (state 0A) on `port`.
fn listens(proc_net_tcp: &str, port: u16) -> bool {
    proc_net_tcp.lines().any(|l| {
        let mut f = l.split_whitespace();
        let local = f.nth(1);
        let state = f.nth(1);
        state == Some("0A")
            && local
                .and_then(|a| a.rsplit_once(':'))
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
                == Some(port)
    })
}

/// A process this run started: its output is read on two threads (so it never blocks on
/// a full pipe); when dropped it is asked to stop, then killed, and reaped.
struct Proc {
    what: String,
    child: Option<Child>,
    /// The signal that asks it to stop cleanly (`INT` for probestack, `TERM` otherwise).
    stop_signal: &'static str,
    stdout: Option<JoinHandle<String>>,
    stderr: Option<JoinHandle<String>>,
}

/// What a finished process said.
struct Finished {
    /// `None` when it had to be killed.
    status: Option<ExitStatus>,
    stdout: String,
    stderr: String,
}

fn reader(r: Option<impl Read + Send + 'static>) -> Option<JoinHandle<String>> {
    let mut r = r?;
    Some(std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = r.read_to_end(&mut b);
        String::from_utf8_lossy(&b).into_owned()
    }))
}

impl Proc {
    fn spawn(
        what: impl Into<String>,
        mut c: Command,
        stop_signal: &'static str,
    ) -> Result<Proc, String> {
        let what = what.into();
        let mut child = c
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("starting {what}: {e}"))?;
        let stdout = reader(child.stdout.take());
        let stderr = reader(child.stderr.take());
        Ok(Proc {
            what,
            child: Some(child),
            stop_signal,
            stdout,
            stderr,
        })
    }

    /// Whether it is still running.
    fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Waits until it exits by itself, `limit` passes or `stop` is set; whether it exited.
    fn wait(&mut self, limit: Duration, stop: &AtomicBool) -> bool {
        let start = Instant::now();
        while self.running() {
            if start.elapsed() >= limit || stop.load(Ordering::Relaxed) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        true
    }

    /// Asks it to stop (unless it has exited), waits up to [`STOP_GRACE`], kills it if it
    /// is still there, reaps it and returns what it printed.
    fn finish(&mut self) -> Finished {
        let Some(mut child) = self.child.take() else {
            return Finished {
                status: None,
                stdout: String::new(),
                stderr: String::new(),
            };
        };
        let mut status = child.try_wait().ok().flatten();
        if status.is_none() {
            // Not reaped, so the id is still this child's.
            let signalled = Command::new("kill")
                .args([format!("-{}", self.stop_signal), child.id().to_string()])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            let start = Instant::now();
            while signalled && start.elapsed() < STOP_GRACE {
                if let Some(s) = child.try_wait().ok().flatten() {
                    status = Some(s);
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            if status.is_none() {
                let _ = child.kill();
            }
        }
        // Reaped; a status of `None` says it had to be killed.
        let _ = child.wait();
        let join =
            |h: Option<JoinHandle<String>>| h.and_then(|h| h.join().ok()).unwrap_or_default();
        Finished {
            status,
            stdout: join(self.stdout.take()),
            stderr: join(self.stderr.take()),
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.finish();
    }
}

/// A bed, built: its servers (dropped first, so they stop before their namespaces go)
/// and its namespaces.
struct Bed {
    servers: Vec<(Server, Proc)>,
    namespaces: Vec<Netns>,
}

impl Bed {
    fn build(plan: &Plan, exe: &Path, stop: &AtomicBool) -> Result<Bed, String> {
        // On an early return the servers (declared last) are dropped first.
        let mut namespaces = Vec::new();
        for _ in 0..plan.namespaces {
            namespaces.push(Netns::new("tap")?);
        }
        let mut servers: Vec<(Server, Proc)> = Vec::new();
        let ns = |i: usize| -> Result<&Netns, String> {
            namespaces
                .get(i)
                .ok_or_else(|| format!("the plan names namespace {i} of {}", plan.namespaces))
        };
        for link in &plan.links {
            match link {
                Link::Veth { a, b } => {
                    let (na, nb) = (&ns(a.ns)?.0, &ns(b.ns)?.0);
                    ip(&[
                        "-n", na, "link", "add", a.dev, "type", "veth", "peer", "name", b.dev,
                        "netns", nb,
                    ])?;
                    for (n, end) in [(na, a), (nb, b)] {
                        if let Some(addr) = end.addr {
                            let cidr = format!("{addr}/{PREFIX}");
                            ip(&["-n", n, "addr", "add", &cidr, "dev", end.dev])?;
                        }
                        ip(&["-n", n, "link", "set", end.dev, "up"])?;
                    }
                    for end in [a, b] {
                        let n = ns(end.ns)?;
                        wait_until(stop, || n.carrier(end.dev))
                            .map_err(|e| format!("veth {}: {e} for carrier", end.dev))?;
                    }
                }
                Link::Tap { ns: i, dev, addr } => {
                    let n = &ns(*i)?.0;
                    ip(&["-n", n, "tuntap", "add", "dev", dev, "mode", "tap"])?;
                    let cidr = format!("{addr}/{PREFIX}");
                    ip(&["-n", n, "addr", "add", &cidr, "dev", dev])?;
                    ip(&["-n", n, "link", "set", dev, "up"])?;
                }
            }
        }
        for s in &plan.servers {
            let n = ns(s.ns)?;
            let (what, cmd, signal) = match &s.program {
                Program::Iperf3 => {
                    let mut c = n.exec("iperf3");
                    c.args(["-s", "-1", "-p", &PORT.to_string()]);
                    ("iperf3 -s".to_string(), c, "TERM")
                }
                Program::Probestack(args) => {
                    let mut c = n.exec(exe);
                    c.args(args);
                    (format!("probestack {}", args.join(" ")), c, "INT")
                }
            };
            let mut p = Proc::spawn(what, cmd, signal)?;
            let ready = wait_until(stop, || {
                !p.running()
                    || match &s.ready {
                        Ready::Listening(port) => n.listening(*port),
                        Ready::Carrier(dev) => n.carrier(dev),
                    }
            });
            if let Err(e) = ready {
                let out = p.finish();
                return Err(format!("{}: {e} until ready; {}", p.what, said(&out)));
            }
            if !p.running() {
                let out = p.finish();
                return Err(format!(
                    "{} exited before it was ready; {}",
                    p.what,
                    said(&out)
                ));
            }
            servers.push((s.clone(), p));
        }
        Ok(Bed {
            servers,
            namespaces,
        })
    }
}

/// Polls `ready` until it holds; an error after [`READY_LIMIT`] or on `stop`.
fn wait_until(stop: &AtomicBool, mut ready: impl FnMut() -> bool) -> Result<(), String> {
    let start = Instant::now();
    loop {
        if ready() {
            return Ok(());
        }
        if stop.load(Ordering::Relaxed) {
            return Err("interrupted while waiting".into());
        }
        if start.elapsed() >= READY_LIMIT {
            return Err(format!("waited {} s", READY_LIMIT.as_secs()));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A process's exit and error output, for a message.
fn said(f: &Finished) -> String {
    let status = match f.status {
        Some(s) => s.to_string(),
        None => "killed".to_string(),
    };
    let err = f.stderr.trim();
    let err = if err.is_empty() { f.stdout.trim() } else { err };
    format!("{status}: {}", last_lines(err, 5))
}

fn last_lines(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join(" | ")
}

// ---------------------------------------------------------------------------------------
// Parsing what the tools print.

/// iperf3 -J's receiver-side rate (bits per second) and the sender's retransmits.
fn parse_iperf3(text: &str) -> Result<(f64, Option<f64>), String> {
    let v: serde_json::Value = serde_json::from_str(text.trim())
        .map_err(|e| format!("iperf3 printed no JSON ({e}): {}", last_lines(text, 3)))?;
    if let Some(e) = v.get("error").and_then(|e| e.as_str()) {
        return Err(format!("iperf3: {e}"));
    }
    let end = &v["end"];
    let bps = end["sum_received"]["bits_per_second"]
        .as_f64()
        .filter(|b| b.is_finite() && *b >= 0.0)
        .ok_or("iperf3's JSON has no end.sum_received.bits_per_second")?;
    let retransmits = end["sum_sent"]["retransmits"].as_f64();
    Ok((bps, retransmits))
}

/// The counters probestack printed at exit: every `  name value` line whose name has a dot
/// (the stack's, `iperf3.*`, `tap.*`), and the runner's line as `runner.<word>`.
fn parse_counters(text: &str) -> BTreeMap<String, f64> {
    let mut m = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("runner: ") {
            for part in rest.split(", ") {
                let mut w = part.split_whitespace();
                if let (Some(n), Some(word)) = (w.next(), w.next()) {
                    if let Ok(n) = n.parse::<u64>() {
                        m.insert(format!("runner.{word}"), n as f64);
                    }
                }
            }
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        if let [name, value] = words[..] {
            if name.contains('.') && line.starts_with(' ') {
                if let Ok(v) = value.parse::<u64>() {
                    m.insert(name.to_string(), v as f64);
                }
            }
        }
    }
    m
}

// ---------------------------------------------------------------------------------------
// Running.

/// What one run measured.
struct Measured {
    gbps: f64,
    counters: BTreeMap<String, f64>,
}

/// One run of `w`: builds its bed, runs the client, stops the servers, tears it all down.
fn run_once(w: &Workload, seconds: u32, exe: &Path, stop: &AtomicBool) -> Result<Measured, String> {
    let plan = w.setup.plan();
    let mut bed = Bed::build(&plan, exe, stop)?;
    let ns = bed
        .namespaces
        .get(plan.client.ns)
        .ok_or("the plan's client namespace does not exist")?;
    let mut c = ns.exec("iperf3");
    c.args([
        "-c",
        plan.client.target,
        "-p",
        &PORT.to_string(),
        "-t",
        &seconds.to_string(),
        "-J",
    ]);
    if w.reverse {
        c.arg("-R");
    }
    let mut client = Proc::spawn("iperf3 -c", c, "TERM")?;
    let limit = Duration::from_secs(u64::from(seconds)) + CLIENT_GRACE;
    let exited = client.wait(limit, stop);
    let out = client.finish();
    let measured = if !exited && stop.load(Ordering::Relaxed) {
        Err("interrupted".to_string())
    } else if !exited {
        Err(format!(
            "iperf3 -c did not finish in {} s; {}",
            limit.as_secs(),
            said(&out)
        ))
    } else {
        parse_iperf3(&out.stdout).map_err(|e| {
            let err = out.stderr.trim();
            if err.is_empty() {
                e
            } else {
                format!("{e} ({})", last_lines(err, 3))
            }
        })
    };
    // The servers: iperf3 -s -1 exits after its test; probestack prints on SIGINT.
    let mut counters = BTreeMap::new();
    let mut server_error = None;
    for (s, p) in &mut bed.servers {
        if matches!(s.program, Program::Iperf3) {
            p.wait(STOP_GRACE, stop);
        }
        let f = p.finish();
        if let Program::Probestack(_) = s.program {
            counters.extend(parse_counters(&f.stdout));
            if !f.status.is_some_and(|s| s.success()) && server_error.is_none() {
                server_error = Some(format!("{} ended badly; {}", p.what, said(&f)));
            }
        }
    }
    drop(bed);
    let (bps, retransmits) = measured?;
    if let Some(e) = server_error {
        return Err(e);
    }
    if let Some(r) = retransmits {
        counters.insert("sender_retransmits".to_string(), r);
    }
    Ok(Measured {
        gbps: bps / 1e9,
        counters,
    })
}

/// Runs every workload: one warm-up round, then `settings.runs` timed rounds; `progress`
/// hears of each run. Never fails: what cannot be measured is in `skipped` or `failures`.
pub fn run(settings: Settings, mut progress: impl FnMut(&str)) -> Results {
    let runs = settings.runs.max(1);
    let seconds = settings.seconds.max(1);
    let mut r = Results {
        experiment: "tap",
        skipped: None,
        machine: machine::describe(),
        seconds,
        runs_per_workload: runs,
        rows: Vec::new(),
        ratios: BTreeMap::new(),
        failures: Vec::new(),
        interrupted: false,
        reading: String::new(),
        note: NOTE,
    };
    if let Some(why) = skip_reason() {
        r.reading = format!("not run: {why}");
        r.skipped = Some(why);
        return r;
    }
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            let why = format!("cannot find this executable: {e}");
            r.reading = format!("not run: {why}");
            r.skipped = Some(why);
            return r;
        }
    };
    let stop = stop_flag();
    let mut measured: Vec<Vec<Measured>> = WORKLOADS.iter().map(|_| Vec::new()).collect();
    'rounds: for round in 0..=runs {
        let n = WORKLOADS.len();
        for k in 0..n {
            let i = (round + k) % n;
            let w = &WORKLOADS[i];
            if stop.load(Ordering::Relaxed) {
                r.interrupted = true;
                break 'rounds;
            }
            let label = if round == 0 {
                "warm-up".to_string()
            } else {
                format!("run {round}")
            };
            progress(&format!("{} ({label} of {runs})", w.name));
            match run_once(w, seconds, &exe, stop) {
                Ok(m) if round > 0 => measured[i].push(m),
                Ok(_) => {}
                Err(error) => r.failures.push(Failure {
                    workload: w.name,
                    run: label,
                    error,
                }),
            }
        }
    }
    if stop.load(Ordering::Relaxed) {
        r.interrupted = true;
    }
    for (w, ms) in WORKLOADS.iter().zip(measured) {
        if let Some(row) = row_of(w, &ms) {
            r.rows.push(row);
        }
    }
    r.ratios = ratios(&r.rows);
    r.reading = reading(&r);
    r
}

/// A flag that SIGINT or SIGTERM sets, so that an interrupted run still cleans up.
fn stop_flag() -> &'static AtomicBool {
    #[cfg(target_os = "linux")]
    if let Ok(flag) = probestack::runner::stop_on_signals() {
        return flag;
    }
    static NEVER: AtomicBool = AtomicBool::new(false);
    &NEVER
}

/// The row of a workload's timed runs; none when no run succeeded.
fn row_of(w: &Workload, ms: &[Measured]) -> Option<Row> {
    if ms.is_empty() {
        return None;
    }
    let runs: Vec<f64> = ms.iter().map(|m| m.gbps).collect();
    let mut names: Vec<&String> = ms.iter().flat_map(|m| m.counters.keys()).collect();
    names.sort();
    names.dedup();
    let counters = names
        .into_iter()
        .map(|k| {
            let mut v: Vec<f64> = ms
                .iter()
                .map(|m| m.counters.get(k).copied().unwrap_or(0.0))
                .collect();
            (k.clone(), median(&mut v))
        })
        .collect();
    Some(Row {
        workload: w.name,
        description: w.description,
        gbps: median(&mut runs.clone()),
        runs,
        counters,
    })
}

fn ratios(rows: &[Row]) -> BTreeMap<String, f64> {
    let gbps = |name: &str| rows.iter().find(|r| r.workload == name).map(|r| r.gbps);
    RATIOS
        .iter()
        .filter_map(|&(name, a, b, _)| match (gbps(a), gbps(b)) {
            (Some(a), Some(b)) if b > 0.0 => Some((name.to_string(), a / b)),
            _ => None,
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// Rendering.

fn row<'a>(r: &'a Results, name: &str) -> Option<&'a Row> {
    r.rows.iter().find(|x| x.workload == name)
}

/// Mean bytes per frame from a row's TAP counters (`rx` or `tx`).
fn mean_frame(row: &Row, dir: &str) -> Option<f64> {
    let frames = row.counters.get(&format!("tap.{dir}_frames")).copied()?;
    let bytes = row.counters.get(&format!("tap.{dir}_bytes")).copied()?;
    (frames > 0.0).then(|| bytes / frames)
}

/// The figures in a sentence or three.
fn reading(r: &Results) -> String {
    let mut s = Vec::new();
    let ratio = |k: &str| r.ratios.get(k).copied();
    if let (Some(t), Some(v), Some(x)) = (
        row(r, "tap_offload"),
        row(r, "linux_veth"),
        ratio("tap_offload/linux_veth"),
    ) {
        let verdict = if x >= 0.5 { "meets" } else { "misses" };
        s.push(format!(
            "Into probestack through the TAP with offloads, TCP moves {:.2} Gbit/s, {x:.2} of \
             Linux-to-Linux over veth ({:.2} Gbit/s): it {verdict} the issue's target of 0.5.",
            t.gbps, v.gbps
        ));
    }
    if let (Some(on), Some(off), Some(x)) = (
        row(r, "tap_offload"),
        row(r, "tap_no_offload"),
        ratio("tap_offload/tap_no_offload"),
    ) {
        let mut why = String::new();
        if let (Some(a), Some(b)) = (mean_frame(on, "rx"), mean_frame(off, "rx")) {
            let gso = on.counters.get("tap.rx_gso_frames").copied().unwrap_or(0.0);
            let frames = on.counters.get("tap.rx_frames").copied().unwrap_or(0.0);
            why = format!(
                ": with offloads the kernel hands the stack {a:.0}-byte frames on average \
                 ({:.0}% of them GSO super-frames), without them {b:.0}-byte frames whose \
                 checksums Linux computes and the stack verifies",
                if frames > 0.0 {
                    100.0 * gso / frames
                } else {
                    0.0
                },
            );
        }
        s.push(format!(
            "Offloads make receiving {x:.2}x as fast ({:.2} against {:.2} Gbit/s){why}.",
            on.gbps, off.gbps
        ));
    }
    if let (Some(on), Some(off), Some(x)) = (
        row(r, "tap_offload_reverse"),
        row(r, "tap_no_offload_reverse"),
        ratio("tap_offload_reverse/tap_no_offload_reverse"),
    ) {
        let mut why = String::new();
        if let (Some(a), Some(b)) = (mean_frame(on, "tx"), mean_frame(off, "tx")) {
            let gso = on.counters.get("tap.tx_gso_frames").copied().unwrap_or(0.0);
            let frames = on.counters.get("tap.tx_frames").copied().unwrap_or(0.0);
            why = format!(
                ": it writes {a:.0}-byte frames on average with offloads ({:.0}% of them TSO \
                 super-frames, checksums left to Linux), {b:.0}-byte frames without",
                if frames > 0.0 {
                    100.0 * gso / frames
                } else {
                    0.0
                },
            );
        }
        s.push(format!(
            "Sending, probestack reaches {:.2} Gbit/s with offloads and {:.2} without, \
             {x:.2}x as fast{why}.",
            on.gbps, off.gbps
        ));
    }
    if !r.failures.is_empty() {
        s.push(format!(
            "{} run(s) failed; see the failures.",
            r.failures.len()
        ));
    }
    if r.interrupted {
        s.push("The run was interrupted before the end.".into());
    }
    if s.is_empty() {
        s.push("Nothing was measured.".into());
    }
    s.join(" ")
}

fn num(v: Option<f64>, decimals: usize) -> String {
    match v {
        Some(v) => format!("{v:.decimals$}"),
        None => "-".into(),
    }
}

pub fn tables(r: &Results) -> Vec<Table> {
    if let Some(why) = &r.skipped {
        let mut t = Table::new(
            "TCP over a TAP and a veth pair (iperf3): not run",
            &["reason"],
        );
        t.row(vec![why.clone()]);
        return vec![t];
    }
    let mut t = Table::new(
        format!(
            "TCP over real devices, iperf3 receiver-side Gbit/s (median of {} runs of {} s after a warm-up run)",
            r.runs_per_workload, r.seconds
        ),
        &["workload", "path", "Gbit/s", "min", "max", "runs"],
    );
    for row in &r.rows {
        let min = row.runs.iter().copied().fold(f64::INFINITY, f64::min);
        let max = row.runs.iter().copied().fold(0.0, f64::max);
        t.row(vec![
            row.workload.to_string(),
            row.description.to_string(),
            format!("{:.2}", row.gbps),
            format!("{min:.2}"),
            format!("{max:.2}"),
            row.runs.len().to_string(),
        ]);
    }
    for f in &r.failures {
        t.note(format!("{} ({}) failed: {}", f.workload, f.run, f.error));
    }
    t.note(NOTE);
    t.note(format!("Machine: {}", r.machine.one_line()));

    let mut ratios = Table::new("Ratios", &["ratio", "value", "target"]);
    for (name, _, _, target) in RATIOS {
        if let Some(v) = r.ratios.get(name) {
            let target = match target {
                Some(x) if *v >= x => format!(">= {x} (met)"),
                Some(x) => format!(">= {x} (missed)"),
                None => "-".into(),
            };
            ratios.row(vec![name.to_string(), format!("{v:.2}"), target]);
        }
    }
    ratios.note(r.reading.clone());

    let mut why = Table::new(
        "What probestack's TAP saw, per run (median)",
        &[
            "workload",
            "frames in",
            "GSO in",
            "mean in B",
            "largest in B",
            "frames out",
            "GSO out",
            "mean out B",
            "csum offloaded out",
            "runner wakeups",
            "sender retransmits",
        ],
    );
    for row in &r.rows {
        let c = |k: &str| row.counters.get(k).copied();
        // serve prints only counters that are not zero: on a bed with a TAP, absent is 0.
        let tap = c("tap.rx_frames").or(c("tap.tx_frames")).is_some();
        let z = |k: &str| c(k).or(tap.then_some(0.0));
        why.row(vec![
            row.workload.to_string(),
            num(z("tap.rx_frames"), 0),
            num(z("tap.rx_gso_frames"), 0),
            num(mean_frame(row, "rx"), 0),
            num(z("tap.rx_largest"), 0),
            num(z("tap.tx_frames"), 0),
            num(z("tap.tx_gso_frames"), 0),
            num(mean_frame(row, "tx"), 0),
            num(z("tap.tx_csum_offloaded"), 0),
            num(c("runner.woken"), 0),
            num(c("sender_retransmits"), 0),
        ]);
    }
    why.note("From the counters `serve` prints when stopped; `-` where a bed has no TAP.");
    vec![t, ratios, why]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn in_benchmark_range(a: &str) -> bool {
        a.parse::<Ipv4Addr>()
            .is_ok_and(|a| u32::from(a) & 0xfffe_0000 == u32::from(Ipv4Addr::new(198, 18, 0, 0)))
    }

    #[test]
    fn every_bed_uses_only_the_benchmark_range() {
        assert_eq!(PREFIX, 15);
        for w in WORKLOADS {
            let p = w.setup.plan();
            assert!(in_benchmark_range(p.client.target), "{}", w.name);
            assert!(p.client.ns < p.namespaces);
            for l in &p.links {
                match l {
                    Link::Veth { a, b } => {
                        for e in [a, b] {
                            assert!(e.ns < p.namespaces);
                            assert!(e.dev.len() < 16);
                            assert!(e.addr.is_none_or(in_benchmark_range), "{}", w.name);
                        }
                    }
                    Link::Tap { ns, dev, addr } => {
                        assert!(*ns < p.namespaces && dev.len() < 16);
                        assert!(in_benchmark_range(addr), "{}", w.name);
                    }
                }
            }
            for s in &p.servers {
                assert!(s.ns < p.namespaces);
            }
        }
        let names: Vec<&str> = WORKLOADS.iter().map(|w| w.name).collect();
        for (_, a, b, _) in RATIOS {
            assert!(names.contains(&a) && names.contains(&b));
        }
    }

    #[test]
    fn iperf3_json_gives_the_receiver_rate() {
        let j = r#"{"start":{},"intervals":[],"end":{
            "sum_sent":{"bytes":100,"bits_per_second":9.5e9,"retransmits":3},
            "sum_received":{"bytes":99,"bits_per_second":9.25e9}}}"#;
        assert_eq!(parse_iperf3(j), Ok((9.25e9, Some(3.0))));
        let e = parse_iperf3(r#"{"start":{},"end":{},"error":"unable to connect"}"#);
        assert_eq!(e, Err("iperf3: unable to connect".to_string()));
        assert!(parse_iperf3("").is_err());
        assert!(parse_iperf3("iperf3: error").is_err());
        assert!(parse_iperf3(r#"{"end":{"sum_received":{}}}"#).is_err());
    }

    #[test]
    fn serve_counters_are_read_from_its_exit_print() {
        let text = "probestack: stopping\n\
            runner: 6160 loops, 6160 polls, 6100 waits, 6060 woken by the device\n\
            stack counters:\n  driver.frames_in                 64172\n\
            services:\n  echo: nothing\n  TCP connections still open: 0\n\
            iperf3 (port 5201):\n  iperf3.bytes_received   4012850424\n\
            tap (psk0, offloads on):\n  tap.rx_gso_frames   123\n  not.a.number  x\n";
        let m = parse_counters(text);
        assert_eq!(m.get("runner.loops"), Some(&6160.0));
        assert_eq!(m.get("runner.woken"), Some(&6060.0));
        assert_eq!(m.get("driver.frames_in"), Some(&64172.0));
        assert_eq!(m.get("iperf3.bytes_received"), Some(&4012850424.0));
        assert_eq!(m.get("tap.rx_gso_frames"), Some(&123.0));
        assert_eq!(m.len(), 7, "{m:?}");
    }

    #[test]
    fn proc_net_tcp_listeners_are_found() {
        let t = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   \
            0: 00000000:1451 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1\n";
        assert!(listens(t, 5201));
        assert!(!listens(t, 5202));
        let established = t.replace(" 0A ", " 01 ");
        assert!(!listens(&established, 5201));
        let v6 = "   0: 00000000000000000000000000000000:1451 00000000000000000000000000000000:0000 0A 0";
        assert!(listens(v6, 5201));
    }

    fn measured(gbps: f64, gso: f64) -> Measured {
        let mut counters = BTreeMap::new();
        counters.insert("tap.rx_frames".to_string(), 100.0);
        counters.insert("tap.rx_bytes".to_string(), 100.0 * 30000.0);
        counters.insert("tap.rx_gso_frames".to_string(), gso);
        Measured { gbps, counters }
    }

    #[test]
    fn rows_ratios_and_tables_from_runs() {
        let rows: Vec<Row> = WORKLOADS
            .iter()
            .enumerate()
            .filter_map(|(i, w)| {
                let ms = [
                    measured(1.0 + i as f64, 90.0),
                    measured(3.0 + i as f64, 10.0),
                ];
                row_of(w, &ms)
            })
            .collect();
        assert!(row_of(&WORKLOADS[0], &[]).is_none());
        assert_eq!(rows.len(), 5);
        assert_eq!(rows[0].gbps, 2.0);
        assert_eq!(rows[0].runs, vec![1.0, 3.0]);
        assert_eq!(rows[0].counters.get("tap.rx_gso_frames"), Some(&50.0));
        let ratios = ratios(&rows);
        assert_eq!(ratios.get("tap_offload/linux_veth"), Some(&1.5));
        assert_eq!(ratios.len(), RATIOS.len());
        let mut r = Results {
            experiment: "tap",
            skipped: None,
            machine: machine::describe(),
            seconds: 1,
            runs_per_workload: 2,
            rows,
            ratios,
            failures: Vec::new(),
            interrupted: false,
            reading: String::new(),
            note: NOTE,
        };
        r.reading = reading(&r);
        assert!(r.reading.contains("meets"), "{}", r.reading);
        let text: String = tables(&r).iter().map(|t| t.to_text()).collect();
        assert!(text.contains("tap_offload_reverse"), "{text}");
        let v = serde_json::to_value(&r).unwrap();
        assert!(v["rows"][0]["gbps"].is_f64() && v["ratios"].is_object());
        r.skipped = Some("why".into());
        assert_eq!(tables(&r)[0].rows, vec![vec!["why".to_string()]]);
    }
}
