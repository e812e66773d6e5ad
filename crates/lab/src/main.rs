//! `probestack`: the lab. It reruns the experiments of the five papers behind probestack on
//! this machine and prints paper vs ours.

mod affinity;
mod bench;
mod experiments;
mod machine;
mod netns;
mod report;
#[cfg(target_os = "linux")]
mod serve;
mod soak;
mod table;
mod tap_bench;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::bench::Effort;

#[derive(Parser)]
#[command(
    name = "probestack",
    version,
    about = "A user-space TCP/IP stack that measures itself: the lab"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run every experiment that exists and write a report folder (the main job).
    Report(ReportArgs),
    /// Run one experiment.
    #[command(subcommand)]
    Lab(Lab),
    /// Serve echo, discard and chargen (UDP and TCP) on a TAP, or with --packet on an
    /// existing interface, until Ctrl-C, then print what the stack and the services did.
    #[cfg(target_os = "linux")]
    Serve(serve::ServeArgs),
    /// Ping an address from our stack on a TAP or an existing interface.
    #[cfg(target_os = "linux")]
    Ping(serve::PingArgs),
    /// Send UDP datagrams or a TCP bulk transfer from our stack on a TAP or an existing
    /// interface.
    #[cfg(target_os = "linux")]
    Send(serve::SendArgs),
    /// TCP and UDP transfers between two simulated stacks through a wire with seeded drops,
    /// reordering, duplicates, jitter and CRC-passing corruption: phase 1 (checksums on)
    /// must lose or alter nothing (exit 1 if it did); phase 2 (checksum elision on) counts
    /// the corruption that gets through.
    Soak(SoakArgs),
}

#[derive(Args)]
struct SoakArgs {
    /// Wall-time budget in seconds (70% phase 1, 30% phase 2); each phase always does its
    /// minimum of transfers first, however long they take.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Seeds the faults, the stacks and the data: the same seed, the same transfers.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct ReportArgs {
    /// Fewer samples and sizes: within five minutes on two cores (the default).
    #[arg(long, conflicts_with = "full")]
    quick: bool,
    /// The papers' sizes and counts, the full bulk matrix, and longer runs of the probes'
    /// overhead.
    #[arg(long)]
    full: bool,
    /// Where to write the report.
    #[arg(long, default_value = "report")]
    out: PathBuf,
    /// Internal, for the tests: tiny runs that finish in seconds.
    #[arg(long, hide = true, conflicts_with_all = ["quick", "full"])]
    test_effort: bool,
}

#[derive(Subcommand)]
enum Lab {
    /// Checksum kernels vs memcpy, two-pass vs fused copy+checksum, and peers
    /// (paper 002 Table 8, paper 000 §4.1).
    Checksum(ChecksumArgs),
    /// Two stacks in one process ping each other over the memory link: round-trip times
    /// and the echoing host's ledger by layer.
    Ping(PingArgs),
    /// Paper 000's experiment: UDP echo at 40 sizes from 1 to 8192 bytes over an FDDI-sized
    /// MTU, the echoing host's time by operation and by layer.
    Echo(EchoArgs),
    /// Paper 002's experiment: sendto to a discard server, a per-routine profile, the
    /// optimizations one at a time, and PCB cache hit rates.
    Discard(DiscardArgs),
    /// What the ledger's probes cost: throughput of a probe-free build against default
    /// sampling and every message probed.
    Overhead(OverheadArgs),
    /// probestack beside smoltcp and the Linux kernel on the same UDP and TCP workloads:
    /// one-way rates, request/response times, TCP bulk at three MTUs.
    Peers(PeersArgs),
    /// One-way TCP bulk transfer between two stacks on two threads: Gbit/s of payload and
    /// header-prediction hit rate by MTU, tuning, and whether the application touches the data.
    Bulk(BulkArgs),
    /// Receiver CPU breakdown at a fixed paced rate, by paper 004's classes (data access,
    /// notification, buffers, driver, TCP/IP), for MTU 1500, 8192 and 32768 and paper 004's
    /// offload and zero-copy variants (its Figure 3).
    Cpu(CpuArgs),
    /// TCP throughput over real devices (iperf3): Linux to Linux over a veth pair, and
    /// Linux to and from probestack `serve` on a TAP with and without offloads. Needs root,
    /// /dev/net/tun, `ip` and `iperf3`; without them it says why and measures nothing.
    Tap(TapArgs),
    /// Paper 000 Tables 1 and 2: UDP and TCP throughput between two stacks (MTU 4352,
    /// large messages) with the RFC 1071 checksum, the fast checksum and checksum elision;
    /// and send-side UDP throughput with a PIO vs a DMA device, with and without elision.
    Throughput(ThroughputArgs),
    /// Papers 001 and 003: TCP and UDP processing by paper 001's categories per message
    /// size, weighted by a bimodal message-size mix (or sizes from a CSV or a capture):
    /// the data-touching vs non-data-touching shares beside the paper's 84% and 60%.
    Mix(MixArgs),
}

#[derive(Args)]
struct ThroughputArgs {
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
    /// Fewer datagrams and 8 MiB TCP runs instead of 32 MiB.
    #[arg(long)]
    quick: bool,
}

#[derive(Args)]
struct MixArgs {
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
    /// Messages measured per size (after 50 of warm-up).
    #[arg(long, default_value_t = 200)]
    messages: usize,
    /// Take the message sizes from this CSV: one per line, `SIZE` (both protocols) or
    /// `tcp,SIZE` / `udp,SIZE`.
    #[arg(long, conflicts_with = "pcap")]
    sizes_csv: Option<PathBuf>,
    /// Take the message sizes from this Ethernet pcap: every IPv4 TCP segment with data
    /// and every UDP datagram.
    #[arg(long)]
    pcap: Option<PathBuf>,
}

#[derive(Args)]
struct TapArgs {
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
    /// Seconds per iperf3 run (1 to 3600).
    #[arg(long, default_value_t = tap_bench::Settings::DEFAULT.seconds,
          value_parser = clap::value_parser!(u32).range(1..=3600))]
    seconds: u32,
    /// Timed runs per workload (the median is reported), after one warm-up run (1 to 100).
    #[arg(long, default_value_t = tap_bench::Settings::DEFAULT.runs as u32,
          value_parser = clap::value_parser!(u32).range(1..=100))]
    runs: u32,
}

#[derive(Args)]
struct BulkArgs {
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
    /// 8 MiB per run instead of 32 MiB (still five timed runs after a warm-up run).
    #[arg(long)]
    quick: bool,
    /// Timed runs per figure (the median is reported), after one warm-up run.
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Link MTUs (comma-separated, 576 to 65535); default 1500,4352,9000,16384,32768,65535
    /// (with --matrix: 1500,4096,8192,16384,24576,32768,65535).
    #[arg(long, value_delimiter = ',')]
    mtu: Vec<usize>,
    /// Configurations (comma-separated); default bsd,fast (with --matrix: all eight).
    /// bsd and fast: the Tuning presets, TCP checksums elided with fast. Paper 004's
    /// variants, each Tuning::fast() with checksum elision off: none (copy, then checksum
    /// in a second pass; no NIC offload), zero_copy (loaned send buffers, whole pages
    /// received by reference), checksum_offload (the NICs complete and verify the
    /// checksums), zero_copy_offload (both), integrated_copy_checksum (sum while
    /// copying), checksum_offload_tso (offload plus TSO, past paper 004). The NIC model's
    /// work is real wall time on the same threads: figures are host plus NIC model.
    #[arg(long, value_delimiter = ',', value_parser = parse_bulk_config)]
    configs: Vec<experiments::bulk::Config>,
    /// Issue 7's full matrix: MTUs 1500,4096,8192,16384,24576,32768,65535 x all eight
    /// configurations x touching or not (--mtu and --configs still narrow it).
    #[arg(long)]
    matrix: bool,
}

#[derive(Args)]
struct CpuArgs {
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
    /// Runs of a quarter of a second (two timed) instead of a second (five timed).
    #[arg(long)]
    quick: bool,
    /// The paced rate, Gbit/s of payload.
    #[arg(long, default_value_t = experiments::cpu::DEFAULT_RATE_GBPS)]
    rate: f64,
    /// Link MTUs (comma-separated); default 1500,8192,32768.
    #[arg(long, value_delimiter = ',')]
    mtu: Vec<usize>,
    /// Configurations (comma-separated, as for lab bulk); default none, checksum_offload,
    /// zero_copy, zero_copy_offload.
    #[arg(long, value_delimiter = ',', value_parser = parse_bulk_config)]
    configs: Vec<experiments::bulk::Config>,
    /// Interrupt coalescing limits N to measure at MTU 1500 (comma-separated frames per
    /// notification, at least 1); default 1,2,4,8,16,32,64.
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(usize))]
    coalesce: Vec<usize>,
}

fn parse_bulk_config(s: &str) -> Result<experiments::bulk::Config, String> {
    experiments::bulk::Config::from_name(s).ok_or_else(|| {
        let names: Vec<&str> = experiments::bulk::ALL_CONFIGS
            .iter()
            .map(|c| c.name())
            .collect();
        format!("unknown configuration {s:?}; one of {}", names.join(", "))
    })
}

#[derive(Args)]
struct PeersArgs {
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
    /// Shorter runs (still five of them after a warm-up run).
    #[arg(long)]
    quick: bool,
    /// For a profiler: one timed run of this workload alone (udp_one_way_64, udp_rr_64,
    /// tcp_bulk_1500, tcp_rr_64, ...) on --system, printing what it did.
    #[arg(long, requires = "system")]
    one: Option<String>,
    /// With --one: the system (probestack_fast, probestack_fast_queue, smoltcp, ...).
    #[arg(long, requires = "one")]
    system: Option<String>,
    /// With --one: the run's wall time in milliseconds.
    #[arg(long, default_value_t = 200, requires = "one")]
    millis: u64,
}

#[derive(Args)]
struct OverheadArgs {
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Rounds whose median is reported (after one warm-up round).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Wall time of one run of one variant, in milliseconds.
    #[arg(long, default_value_t = 400)]
    millis: u64,
    /// Internal: run one workload in this process and print its rate as JSON.
    #[arg(long, hide = true)]
    worker: Option<String>,
    /// Internal, with --worker: probe one message in N (0: none).
    #[arg(long, hide = true, default_value_t = 0)]
    sample_every: u32,
}

#[derive(Args)]
struct DiscardArgs {
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
    /// 20,000 datagrams per size and configuration instead of the paper's 200,000.
    #[arg(long)]
    quick: bool,
    /// Runs per figure (the median is reported).
    #[arg(long, default_value_t = 3)]
    runs: usize,
}

#[derive(Args)]
struct EchoArgs {
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
    /// Eight sizes and 20 repetitions instead of 40 sizes and 100.
    #[arg(long)]
    quick: bool,
}

#[derive(Args)]
struct PingArgs {
    /// ICMP payload sizes in bytes (comma-separated); default a sweep from 56 to 65507.
    #[arg(long, value_delimiter = ',')]
    size: Vec<usize>,
    /// The link MTU (576 to 65535).
    #[arg(long, default_value_t = 1500)]
    mtu: usize,
    /// Pings per size (after three of warm-up).
    #[arg(long, default_value_t = 20)]
    count: usize,
    /// Write the exchange as seen on A's wire to this pcap file.
    #[arg(long)]
    pcap: Option<PathBuf>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct ChecksumArgs {
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
    /// Fewer, shorter samples.
    #[arg(long)]
    quick: bool,
    /// Sizes in bytes (comma-separated); default 40,64,576,1500,9000,16384,65536,1048576.
    #[arg(long, value_delimiter = ',')]
    sizes: Vec<usize>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Lab(Lab::Checksum(a)) => {
            let effort = if a.quick { Effort::QUICK } else { Effort::FULL };
            let sizes = if a.sizes.is_empty() {
                experiments::checksum::SIZES.to_vec()
            } else {
                a.sizes
            };
            if let Some(&bad) = sizes.iter().find(|&&s| s == 0 || s > 1 << 30) {
                eprintln!("probestack: size {bad} is out of range (1 to 1 GiB)");
                return ExitCode::from(2);
            }
            let r = experiments::checksum::run(&sizes, effort, |s| {
                if !a.json {
                    eprint!("\rmeasuring {s} bytes...        ");
                    let _ = std::io::stderr().flush();
                }
            });
            if a.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&r).expect("results serialise")
                );
            } else {
                eprint!("\r{:40}\r", "");
                for t in experiments::checksum::tables(&r) {
                    println!("{}", t.to_text());
                }
            }
            ExitCode::SUCCESS
        }
        Command::Lab(Lab::Ping(a)) => {
            let sizes = if a.size.is_empty() {
                experiments::ping::SIZES.to_vec()
            } else {
                a.size
            };
            match experiments::ping::run(&sizes, a.mtu, a.count.max(1), a.pcap.as_deref()) {
                Ok(r) if a.json => {
                    println!(
                        "{}",
                        serde_json::to_string_pretty(&r).expect("results serialise")
                    );
                    ExitCode::SUCCESS
                }
                Ok(r) => {
                    for t in experiments::ping::tables(&r) {
                        println!("{}", t.to_text());
                    }
                    if let Some(p) = &a.pcap {
                        println!("capture written to {}", p.display());
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("probestack: {e}");
                    ExitCode::from(2)
                }
            }
        }
        Command::Lab(Lab::Discard(a)) => {
            let n = if a.quick { 20_000 } else { 200_000 };
            let json = a.json;
            let r = experiments::discard::run(n, a.runs, |s| {
                if !json {
                    eprintln!("  discard: {s}");
                }
            });
            finish(r, json, experiments::discard::tables)
        }
        Command::Lab(Lab::Echo(a)) => {
            let (sizes, reps) = if a.quick {
                (experiments::echo::quick_sizes(), 20)
            } else {
                (experiments::echo::sizes(), 100)
            };
            let json = a.json;
            let r = experiments::echo::run(&sizes, reps, |t| {
                if !json {
                    eprintln!("  echo: tuning {t}");
                }
            });
            finish(r, json, experiments::echo::tables)
        }
        Command::Lab(Lab::Overhead(a)) => {
            if let Some(w) = &a.worker {
                return match experiments::overhead::run_workload(w, a.sample_every, a.millis) {
                    Ok(rate) => {
                        println!("{{\"rate\":{rate}}}");
                        ExitCode::SUCCESS
                    }
                    Err(e) => {
                        eprintln!("probestack: {e}");
                        ExitCode::from(2)
                    }
                };
            }
            let json = a.json;
            let r = experiments::overhead::run(a.rounds.max(1), a.millis.max(10), |s| {
                if !json {
                    eprintln!("  {s}");
                }
            });
            finish(r, json, experiments::overhead::tables)
        }
        Command::Lab(Lab::Peers(a)) if a.one.is_some() => {
            let (workload, system) = (a.one.unwrap_or_default(), a.system.unwrap_or_default());
            match experiments::peers::run_one(&workload, &system, a.millis) {
                Ok(r) if a.json => {
                    println!("{}", serde_json::to_string(&r).expect("serializable"));
                    ExitCode::SUCCESS
                }
                Ok(r) => {
                    println!(
                        "{workload} on {system}: {} {} in {:.3} s",
                        r.units, r.unit, r.seconds
                    );
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("probestack: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Lab(Lab::Peers(a)) => {
            let settings = if a.quick {
                experiments::peers::Settings::QUICK
            } else {
                experiments::peers::Settings::FULL
            };
            let json = a.json;
            let r = experiments::peers::run(settings, |s| {
                if !json {
                    eprintln!("  peers: {s}");
                }
            });
            finish(r, json, experiments::peers::tables)
        }
        Command::Lab(Lab::Bulk(a)) => {
            let base = if a.quick {
                experiments::bulk::Settings::QUICK
            } else {
                experiments::bulk::Settings::FULL
            };
            let settings = experiments::bulk::Settings {
                runs: a.runs.max(1),
                ..base
            };
            let mtus = match (a.mtu.is_empty(), a.matrix) {
                (false, _) => a.mtu,
                (true, false) => experiments::bulk::MTUS.to_vec(),
                (true, true) => experiments::bulk::MATRIX_MTUS.to_vec(),
            };
            let configs = match (a.configs.is_empty(), a.matrix) {
                (false, _) => a.configs,
                (true, false) => experiments::bulk::CONFIGS.to_vec(),
                (true, true) => experiments::bulk::ALL_CONFIGS.to_vec(),
            };
            let json = a.json;
            let r = experiments::bulk::run_configs(&mtus, &configs, settings, |s| {
                if !json {
                    eprintln!("  bulk: {s}");
                }
            });
            if let Ok(r) = &r {
                for f in &r.failures {
                    eprintln!(
                        "probestack: bulk: MTU {} {} (touch {}) failed: {}",
                        f.mtu, f.config, f.app_touches_data, f.error
                    );
                }
            }
            finish(r, json, experiments::bulk::tables)
        }
        Command::Lab(Lab::Cpu(a)) => {
            let base = if a.quick {
                experiments::cpu::Settings::QUICK
            } else {
                experiments::cpu::Settings::FULL
            };
            let settings = experiments::cpu::Settings {
                rate_gbps: a.rate,
                ..base
            };
            let mtus = if a.mtu.is_empty() {
                experiments::cpu::MTUS.to_vec()
            } else {
                a.mtu
            };
            let configs = if a.configs.is_empty() {
                experiments::cpu::CONFIGS.to_vec()
            } else {
                a.configs
            };
            let json = a.json;
            let coalesce = if a.coalesce.is_empty() {
                experiments::cpu::COALESCE_FRAMES.to_vec()
            } else {
                a.coalesce
            };
            let r = experiments::cpu::run(&mtus, &configs, &coalesce, settings, |s| {
                if !json {
                    eprintln!("  cpu: {s}");
                }
            });
            finish(r, json, experiments::cpu::tables)
        }
        Command::Lab(Lab::Tap(a)) => {
            let json = a.json;
            let settings = tap_bench::Settings {
                seconds: a.seconds,
                runs: a.runs as usize,
            };
            let r = tap_bench::run(settings, |s| {
                if !json {
                    eprintln!("  tap: {s}");
                }
            });
            if let Some(why) = &r.skipped {
                eprintln!("probestack: lab tap cannot run here: {why}");
            }
            finish(Ok(r), json, tap_bench::tables)
        }
        Command::Lab(Lab::Throughput(a)) => {
            let settings = if a.quick {
                experiments::throughput::Settings::QUICK
            } else {
                experiments::throughput::Settings::FULL
            };
            let json = a.json;
            let r = experiments::throughput::run(settings, |s| {
                if !json {
                    eprintln!("  throughput: {s}");
                }
            });
            for f in &r.failures {
                eprintln!("probestack: throughput: {f}");
            }
            finish(Ok(r), json, experiments::throughput::tables)
        }
        Command::Lab(Lab::Mix(a)) => {
            use experiments::mix::Distribution;
            let dist = match (&a.sizes_csv, &a.pcap) {
                (Some(f), _) => Distribution::from_csv(f),
                (_, Some(f)) => Distribution::from_pcap(f),
                _ => Ok(Distribution::default_model()),
            };
            let dist = match dist {
                Ok(d) => d,
                Err(e) => {
                    eprintln!("probestack: mix: {e}");
                    return ExitCode::from(2);
                }
            };
            let json = a.json;
            let r = experiments::mix::run(dist, a.messages, |s| {
                if !json {
                    eprintln!("  mix: {s}");
                }
            });
            finish(r, json, experiments::mix::tables)
        }
        #[cfg(target_os = "linux")]
        Command::Serve(a) => done(serve::serve(a)),
        #[cfg(target_os = "linux")]
        Command::Ping(a) => done(serve::ping(a)),
        #[cfg(target_os = "linux")]
        Command::Send(a) => done(serve::send(a)),
        Command::Soak(a) => {
            let json = a.json;
            let r = soak::run(
                soak::Settings {
                    seconds: a.seconds,
                    seed: a.seed,
                },
                |s| {
                    if !json {
                        eprintln!("  soak: {s}");
                    }
                },
            );
            let passed = r.passed;
            let code = finish(Ok(r), json, soak::tables);
            if passed {
                code
            } else {
                eprintln!("probestack: soak: phase 1 lost or altered data");
                ExitCode::FAILURE
            }
        }
        Command::Report(a) => {
            let level = match (a.full, a.test_effort) {
                (true, _) => report::Level::Full,
                (_, true) => report::Level::Test,
                _ => report::Level::Quick,
            };
            match report::run(&a.out, level) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("probestack: writing the report to {}: {e}", a.out.display());
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// The exit of a command that prints its own results: its error, if any.
#[cfg(target_os = "linux")]
fn done(r: Result<(), String>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("probestack: {e}");
            ExitCode::from(2)
        }
    }
}

/// Prints an experiment's results as JSON or as tables, or its error.
fn finish<R: serde::Serialize>(
    r: Result<R, String>,
    json: bool,
    tables: fn(&R) -> Vec<table::Table>,
) -> ExitCode {
    match r {
        Ok(r) if json => {
            println!(
                "{}",
                serde_json::to_string_pretty(&r).expect("results serialise")
            );
            ExitCode::SUCCESS
        }
        Ok(r) => {
            for t in tables(&r) {
                println!("{}", t.to_text());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("probestack: {e}");
            ExitCode::FAILURE
        }
    }
}
