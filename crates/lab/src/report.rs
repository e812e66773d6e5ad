//! `probestack report`: runs every experiment that exists, prints its tables, and writes
//! a report folder: `REPORT.md` (the tables), `data/<experiment>.json` and
//! `data/<experiment>.csv` (one CSV per table).

use std::fs;
use std::io::{self, Write};
use std::path::Path;

use crate::bench::Effort;
use crate::experiments;
use crate::table::Table;

/// Runs the experiments and writes the report folder `out`.
pub fn run(out: &Path, effort: Effort) -> io::Result<()> {
    fs::create_dir_all(out.join("data"))?;
    let mut md = String::from(
        "# probestack report\n\nThe papers' experiments rerun on this machine. \
         Written by `cargo run --release -- report`.\n\n",
    );

    eprintln!("[1/6] checksum: kernels, copy, fused copy+checksum, peers");
    let r = experiments::checksum::run(&experiments::checksum::SIZES, effort, |s| {
        eprint!("\r  {s} bytes...        ");
        let _ = io::stderr().flush();
    });
    eprint!("\r{:40}\r", "");
    let tables = experiments::checksum::tables(&r);
    write_section(out, &mut md, "checksum", "Checksum", &tables)?;
    fs::write(
        out.join("data/checksum.json"),
        serde_json::to_string_pretty(&r).map_err(io::Error::other)?,
    )?;

    eprintln!("[2/6] ping: two stacks over the memory link");
    let count = if effort.samples > Effort::QUICK.samples {
        100
    } else {
        20
    };
    let r = experiments::ping::run(&experiments::ping::SIZES, 1500, count, None)
        .map_err(io::Error::other)?;
    write_section(out, &mut md, "ping", "Ping", &experiments::ping::tables(&r))?;
    fs::write(
        out.join("data/ping.json"),
        serde_json::to_string_pretty(&r).map_err(io::Error::other)?,
    )?;

    eprintln!("[3/6] echo: paper 000's UDP echo on B");
    let (sizes, reps) = if effort.samples > Effort::QUICK.samples {
        (experiments::echo::sizes(), 100)
    } else {
        (experiments::echo::quick_sizes(), 20)
    };
    let r = experiments::echo::run(&sizes, reps, |_| {}).map_err(io::Error::other)?;
    write_section(
        out,
        &mut md,
        "echo",
        "Echo (paper 000)",
        &experiments::echo::tables(&r),
    )?;
    fs::write(
        out.join("data/echo.json"),
        serde_json::to_string_pretty(&r).map_err(io::Error::other)?,
    )?;

    let full = effort.samples > Effort::QUICK.samples;
    eprintln!("[4/6] bulk: TCP between two stacks on two threads, by MTU");
    let settings = if full {
        experiments::bulk::Settings::FULL
    } else {
        experiments::bulk::Settings::QUICK
    };
    let r = experiments::bulk::run(&experiments::bulk::MTUS, settings, |s| {
        eprint!("\r  {s}...{:20}", "");
        let _ = io::stderr().flush();
    })
    .map_err(io::Error::other)?;
    eprint!("\r{:60}\r", "");
    let tables = experiments::bulk::tables(&r);
    write_section(out, &mut md, "bulk", "TCP bulk (paper 004 Fig. 2)", &tables)?;
    fs::write(
        out.join("data/bulk.json"),
        serde_json::to_string_pretty(&r).map_err(io::Error::other)?,
    )?;

    eprintln!("[5/6] peers: probestack, smoltcp and Linux on the same workloads");
    let settings = if full {
        experiments::peers::Settings::FULL
    } else {
        experiments::peers::Settings::QUICK
    };
    let r = experiments::peers::run(settings, |s| {
        eprint!("\r  {s}...{:20}", "");
        let _ = io::stderr().flush();
    })
    .map_err(io::Error::other)?;
    eprint!("\r{:60}\r", "");
    let tables = experiments::peers::tables(&r);
    write_section(out, &mut md, "peers", "Peers", &tables)?;
    fs::write(
        out.join("data/peers.json"),
        serde_json::to_string_pretty(&r).map_err(io::Error::other)?,
    )?;

    eprintln!("[6/6] tap: iperf3 into probestack over a TAP vs Linux over veth (needs root)");
    let settings = if full {
        crate::tap_bench::Settings::DEFAULT
    } else {
        crate::tap_bench::Settings {
            seconds: 2,
            runs: 1,
        }
    };
    let r = crate::tap_bench::run(settings, |s| {
        eprint!("\r  {s}...{:20}", "");
        let _ = io::stderr().flush();
    });
    eprint!("\r{:60}\r", "");
    let tables = crate::tap_bench::tables(&r);
    write_section(out, &mut md, "tap", "Real networks: TAP and veth", &tables)?;
    fs::write(
        out.join("data/tap.json"),
        serde_json::to_string_pretty(&r).map_err(io::Error::other)?,
    )?;

    fs::write(out.join("REPORT.md"), md)?;
    eprintln!("report written to {}", out.display());
    Ok(())
}

/// Prints the tables, appends them to the Markdown, and writes one CSV per table.
fn write_section(
    out: &Path,
    md: &mut String,
    name: &str,
    heading: &str,
    tables: &[Table],
) -> io::Result<()> {
    md.push_str(&format!("## {heading}\n\n"));
    for (i, t) in tables.iter().enumerate() {
        println!("{}", t.to_text());
        md.push_str(&t.to_markdown());
        md.push('\n');
        fs::write(out.join(format!("data/{name}-{}.csv", i + 1)), t.to_csv())?;
    }
    Ok(())
}
