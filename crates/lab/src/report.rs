//! `probestack report`: runs every experiment that exists, prints its tables, and writes a
//! report folder:
//!
//! - `index.html`: one self-contained page (inline CSS and SVG, nothing fetched), every
//!   section with its paper-vs-ours table, its figures and its tables ([`html`]);
//! - `REPORT.md`: the same tables, readable on a code host, linking the figures;
//! - `figures/*.svg`: the figures, each the counterpart of one in a paper ([`figures`],
//!   drawn by [`svg`]);
//! - `data/<experiment>.json` (the results) and `data/<experiment>-<n>.csv` (one per table).
//!
//! Each section's "paper vs ours" table ([`paper`]) is computed from the results.
//! [`Level`] sets how much is measured: `Quick` (the default, a few minutes on two cores),
//! `Full` (the papers' sizes and counts), and `Test` (seconds, for the tests: the same
//! sections, figures and tables from tiny runs, the slow external steps skipped).

mod figures;
mod html;
mod paper;
mod progress;
pub mod svg;

use std::fs;
use std::io;
use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use crate::bench::Effort;
use crate::experiments::{
    bulk, checksum, cpu, discard, echo, mix, overhead, peers, ping, throughput,
};
use crate::table::Table;
use figures::Figure;
use progress::Progress;

/// How much the report measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    /// Tiny runs for the tests: seconds. Overhead and tap are skipped.
    Test,
    /// The default: a few minutes on two cores, the probes' overhead in short rounds.
    Quick,
    /// The papers' sizes and counts.
    Full,
}

/// One section of the report: an experiment's comparison, figures and tables.
pub struct Section {
    pub id: String,
    pub heading: String,
    /// Why the experiment was not measured, when it was not.
    pub skipped: Option<String>,
    pub paper: Option<Table>,
    pub figures: Vec<Figure>,
    pub tables: Vec<Table>,
}

impl Section {
    fn new(id: &str, heading: &str) -> Section {
        Section {
            id: id.to_string(),
            heading: heading.to_string(),
            skipped: None,
            paper: None,
            figures: Vec::new(),
            tables: Vec::new(),
        }
    }

    fn skipped(id: &str, heading: &str, why: impl Into<String>) -> Section {
        Section {
            skipped: Some(why.into()),
            ..Section::new(id, heading)
        }
    }

    fn with_paper(mut self, c: Vec<paper::Comparison>) -> Section {
        if !c.is_empty() {
            self.paper = Some(paper::table(&self.heading, &c));
        }
        self
    }
}

/// Writes `data/<name>.json`.
fn write_json<R: Serialize>(out: &Path, name: &str, r: &R) -> io::Result<()> {
    fs::write(
        out.join(format!("data/{name}.json")),
        serde_json::to_string_pretty(r).map_err(io::Error::other)?,
    )
}

/// Runs the experiments and writes the report folder `out`.
pub fn run(out: &Path, level: Level) -> io::Result<()> {
    fs::create_dir_all(out.join("data"))?;
    fs::create_dir_all(out.join("figures"))?;
    let full = level == Level::Full;
    let test = level == Level::Test;
    let machine = crate::machine::describe();
    let mut sections = Vec::new();
    const STEPS: usize = 11;
    let mut n = 0;
    let mut next = |what: &str| {
        n += 1;
        eprintln!("[{n}/{STEPS}] {what}");
    };

    next("checksum: kernels, copy, fused copy+checksum, peers");
    let (sizes, effort) = match level {
        Level::Test => (
            vec![64, 1500, 65536],
            Effort {
                samples: 1,
                sample_time: Duration::from_micros(100),
            },
        ),
        Level::Quick => (checksum::SIZES.to_vec(), Effort::QUICK),
        Level::Full => (checksum::SIZES.to_vec(), Effort::FULL),
    };
    let mut bar = Progress::new("checksum", sizes.len());
    let r = checksum::run(&sizes, effort, |s| bar.step(&format!("{s} bytes")));
    bar.finish();
    write_json(out, "checksum", &r)?;
    sections.push(
        Section {
            figures: figures::checksum(&r),
            tables: checksum::tables(&r),
            ..Section::new(
                "checksum",
                "Checksum and copy (paper 002 Table 8, paper 000 §4.1)",
            )
        }
        .with_paper(paper::checksum(&r)),
    );

    next("ping: two stacks over the memory link");
    let (sizes, count) = match level {
        Level::Test => (vec![56, 1472, 8000], 2),
        Level::Quick => (ping::SIZES.to_vec(), 20),
        Level::Full => (ping::SIZES.to_vec(), 100),
    };
    let r = ping::run(&sizes, 1500, count, None).map_err(io::Error::other)?;
    write_json(out, "ping", &r)?;
    sections.push(Section {
        tables: ping::tables(&r),
        ..Section::new("ping", "Ping between two stacks")
    });

    next("echo: paper 000's UDP echo on B");
    let (sizes, reps) = match level {
        Level::Test => (vec![1, 2101, 8192], 2),
        Level::Quick => (echo::quick_sizes(), 20),
        Level::Full => (echo::sizes(), 100),
    };
    let mut bar = Progress::new("echo", 2);
    let r =
        echo::run(&sizes, reps, |t| bar.step(&format!("tuning {t}"))).map_err(io::Error::other)?;
    bar.finish();
    write_json(out, "echo", &r)?;
    sections.push(
        Section {
            figures: figures::echo(&r),
            tables: echo::tables(&r),
            ..Section::new("echo", "UDP echo by operation and layer (paper 000)")
        }
        .with_paper(paper::echo(&r)),
    );

    next("discard: paper 002's sendto to a discard server");
    let (datagrams, runs) = match level {
        Level::Test => (300, 1),
        Level::Quick => (20_000, 3),
        Level::Full => (200_000, 3),
    };
    // The profile, seven steps, and the cache rates.
    let mut bar = Progress::new("discard", 1 + discard::steps().len() + 1);
    let r = discard::run(datagrams, runs, |s| bar.step(s)).map_err(io::Error::other)?;
    bar.finish();
    write_json(out, "discard", &r)?;
    sections.push(
        Section {
            figures: figures::discard(&r),
            tables: discard::tables(&r),
            ..Section::new("discard", "A faster UDP: the discard test (paper 002)")
        }
        .with_paper(paper::discard(&r)),
    );

    next("throughput: paper 000 Tables 1 and 2");
    let settings = match level {
        Level::Test => throughput::Settings::TINY,
        Level::Quick => throughput::Settings::QUICK,
        Level::Full => throughput::Settings::FULL,
    };
    let mut bar = Progress::new("throughput", 10);
    let r = throughput::run(settings, |s| bar.step(s));
    bar.finish();
    for f in &r.failures {
        eprintln!("probestack: throughput: {f}");
    }
    write_json(out, "throughput", &r)?;
    sections.push(
        Section {
            figures: figures::throughput(&r),
            tables: throughput::tables(&r),
            ..Section::new(
                "throughput",
                "Checksum and throughput (paper 000 Tables 1-2)",
            )
        }
        .with_paper(paper::throughput(&r)),
    );

    next("mix: category breakdowns under a message-size mix (papers 001, 003)");
    let messages = match level {
        Level::Test => 3,
        Level::Quick => 200,
        Level::Full => 1000,
    };
    let mut bar = Progress::new("mix", 4);
    let r = mix::run(mix::Distribution::default_model(), messages, |s| {
        bar.step(s)
    })
    .map_err(io::Error::other)?;
    bar.finish();
    write_json(out, "mix", &r)?;
    sections.push(
        Section {
            figures: figures::mix(&r),
            tables: mix::tables(&r),
            ..Section::new(
                "mix",
                "Data-touching vs not under a size mix (papers 001, 003)",
            )
        }
        .with_paper(paper::mix(&r)),
    );

    next("bulk: TCP between two stacks on two threads, by MTU");
    let (mtus, settings) = match level {
        Level::Test => (
            vec![1500, 9000],
            bulk::Settings {
                runs: 1,
                bytes_per_run: 256 << 10,
                ..bulk::Settings::QUICK
            },
        ),
        Level::Quick => (bulk::MTUS.to_vec(), bulk::Settings::QUICK),
        Level::Full => (bulk::MATRIX_MTUS.to_vec(), bulk::Settings::FULL),
    };
    let configs: Vec<bulk::Config> = if full {
        bulk::ALL_CONFIGS.to_vec()
    } else {
        bulk::CONFIGS.to_vec()
    };
    let mut bar = Progress::new("bulk", 1 + mtus.len() * configs.len() * 2);
    let r = if full {
        bulk::run_configs(&mtus, &configs, settings, |s| bar.step(s))
    } else {
        bulk::run(&mtus, settings, |s| bar.step(s))
    }
    .map_err(io::Error::other)?;
    bar.finish();
    write_json(out, "bulk", &r)?;
    sections.push(
        Section {
            figures: figures::bulk(&r),
            tables: bulk::tables(&r),
            ..Section::new("bulk", "TCP bandwidth vs MTU (paper 004 Fig. 2)")
        }
        .with_paper(paper::bulk(&r)),
    );

    next("cpu: the receiver's CPU at a paced rate, by category");
    let (mtus, configs, coalesce, settings) = match level {
        Level::Test => (
            vec![1500, 32768],
            cpu::CONFIGS.to_vec(),
            vec![1],
            cpu::Settings {
                seconds_per_run: 0.01,
                runs: 1,
                ..cpu::Settings::QUICK
            },
        ),
        Level::Quick => (
            cpu::MTUS.to_vec(),
            cpu::CONFIGS.to_vec(),
            vec![1, 4, 16, 64],
            cpu::Settings::QUICK,
        ),
        Level::Full => (
            cpu::MTUS.to_vec(),
            cpu::CONFIGS.to_vec(),
            cpu::COALESCE_FRAMES.to_vec(),
            cpu::Settings::FULL,
        ),
    };
    let mut bar = Progress::new("cpu", mtus.len() * configs.len() + coalesce.len());
    let r = cpu::run(&mtus, &configs, &coalesce, settings, |s| bar.step(s))
        .map_err(io::Error::other)?;
    bar.finish();
    write_json(out, "cpu", &r)?;
    sections.push(
        Section {
            figures: figures::cpu(&r),
            tables: cpu::tables(&r),
            ..Section::new("cpu", "Receiver CPU at a fixed rate (paper 004 Fig. 3)")
        }
        .with_paper(paper::cpu(&r)),
    );

    next("peers: probestack, smoltcp and Linux on the same workloads");
    let settings = match level {
        Level::Test => peers::Settings { runs: 1, millis: 5 },
        Level::Quick => peers::Settings::QUICK,
        Level::Full => peers::Settings::FULL,
    };
    let mut bar = Progress::new("peers", 0);
    let r = peers::run(settings, |s| bar.step(s)).map_err(io::Error::other)?;
    bar.finish();
    write_json(out, "peers", &r)?;
    sections.push(Section {
        tables: peers::tables(&r),
        ..Section::new("peers", "Peers: smoltcp and Linux on the same workloads")
    });

    next("overhead: what the probes cost (builds a probe-free copy)");
    // Test mode leaves it out: building the second copy takes minutes.
    let rounds = match level {
        Level::Test => None,
        Level::Quick => Some((3, 200)),
        Level::Full => Some((5, 400)),
    };
    if let Some((rounds, millis)) = rounds {
        let mut bar = Progress::new("overhead", 3 * (rounds + 1));
        let r = overhead::run(rounds, millis, |s| bar.step(s)).map_err(io::Error::other)?;
        bar.finish();
        write_json(out, "overhead", &r)?;
        sections.push(Section {
            tables: overhead::tables(&r),
            ..Section::new("overhead", "What the probes cost")
        });
    } else {
        let why = "left out of the test report: it builds a second, probe-free copy of the tool (minutes on two cores); `probestack lab overhead` runs it alone";
        eprintln!("  overhead: skipped ({why})");
        sections.push(Section::skipped("overhead", "What the probes cost", why));
    }

    next("tap: iperf3 into probestack over a TAP vs Linux over veth (needs root)");
    if test {
        sections.push(Section::skipped(
            "tap",
            "Real networks: TAP and veth",
            "skipped in the test mode (iperf3 runs take seconds each)",
        ));
    } else {
        let settings = if full {
            crate::tap_bench::Settings::DEFAULT
        } else {
            crate::tap_bench::Settings {
                seconds: 2,
                runs: 1,
            }
        };
        let mut bar = Progress::new("tap", 0);
        let r = crate::tap_bench::run(settings, |s| bar.step(s));
        bar.finish();
        write_json(out, "tap", &r)?;
        sections.push(Section {
            skipped: r.skipped.clone(),
            tables: crate::tap_bench::tables(&r),
            ..Section::new("tap", "Real networks: TAP and veth")
        });
    }

    let command = match level {
        Level::Test => "probestack report --test-effort",
        Level::Quick => "cargo run --release -- report",
        Level::Full => "cargo run --release -- report --full",
    };
    write_folder(out, &machine.one_line(), command, &sections)?;
    eprintln!("report written to {}", out.display());
    Ok(())
}

/// Prints the tables and writes index.html, REPORT.md, the figures and the CSVs.
fn write_folder(out: &Path, machine: &str, command: &str, sections: &[Section]) -> io::Result<()> {
    let mut md = format!(
        "# probestack report\n\nThe papers' experiments rerun on {machine}. Written by `{command}`; \
         the same report with its figures inline is `index.html`.\n\n"
    );
    for s in sections {
        md.push_str(&format!("## {}\n\n", s.heading));
        if let Some(why) = &s.skipped {
            md.push_str(&format!("Not measured: {why}\n\n"));
        }
        if let Some(p) = &s.paper {
            println!("{}", p.to_text());
            md.push_str(&p.to_markdown());
            md.push('\n');
            fs::write(out.join(format!("data/{}-paper.csv", s.id)), p.to_csv())?;
        }
        for f in &s.figures {
            fs::write(out.join(format!("figures/{}.svg", f.name)), &f.svg)?;
            md.push_str(&format!(
                "![{}](figures/{}.svg)\n\n*{}* ([figures/{}.svg](figures/{}.svg))\n\n",
                f.name, f.name, f.caption, f.name, f.name
            ));
        }
        for (i, t) in s.tables.iter().enumerate() {
            println!("{}", t.to_text());
            md.push_str(&t.to_markdown());
            md.push('\n');
            fs::write(out.join(format!("data/{}-{}.csv", s.id, i + 1)), t.to_csv())?;
        }
    }
    fs::write(out.join("REPORT.md"), md)?;
    fs::write(
        out.join("index.html"),
        html::page("probestack report", machine, command, sections),
    )?;
    Ok(())
}
