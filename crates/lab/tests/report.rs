//! `probestack report --test-effort`: the report's folder, from tiny runs, is complete and
//! well formed. index.html parses as XML and holds every figure (inline SVG) and every
//! table; each figures/*.svg parses and has labelled axes; REPORT.md links every figure;
//! the data files are there. When headless Chromium is installed, it renders the page and
//! the figures are in the rendered DOM with no console error; otherwise the test says why
//! it skips that part.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Every figure the report draws from the experiments it runs.
const FIGURES: [&str; 13] = [
    "checksum_gbps",
    "echo_operations_bsd",
    "echo_operations_fast",
    "echo_send_receive",
    "echo_copy_components",
    "echo_layers",
    "discard_steps",
    "throughput_gains",
    "mix_categories_tcp",
    "mix_categories_udp",
    "mix_shares",
    "bulk_mtu",
    "cpu_receiver",
];

/// Sections with a paper-vs-ours table.
const COMPARED: [&str; 7] = [
    "checksum",
    "echo",
    "discard",
    "throughput",
    "mix",
    "bulk",
    "cpu",
];

/// Every section, and the number of data tables each has at least.
const SECTIONS: [(&str, usize); 11] = [
    ("checksum", 2),
    ("ping", 1),
    ("echo", 3),
    ("discard", 2),
    ("throughput", 2),
    ("mix", 3),
    ("bulk", 1),
    ("cpu", 2),
    ("peers", 1),
    ("overhead", 0),
    ("tap", 0),
];

fn temp_dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("probestack-report-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn run_report(out: &Path) {
    let r = Command::new(env!("CARGO_BIN_EXE_probestack"))
        .args(["report", "--test-effort", "--out"])
        .arg(out)
        .output()
        .expect("probestack runs");
    assert!(
        r.status.success(),
        "report failed:\n{}\n{}",
        String::from_utf8_lossy(&r.stdout),
        String::from_utf8_lossy(&r.stderr)
    );
}

/// The text of every `<text>` element with this class in an SVG tree.
fn texts_with_class<'a>(doc: &'a roxmltree::Document, class: &str) -> Vec<&'a str> {
    doc.descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter(|n| {
            n.attribute("class")
                .is_some_and(|c| c.split(' ').any(|x| x == class))
        })
        .filter_map(|n| n.text())
        .collect()
}

#[test]
fn the_report_folder_is_complete_and_well_formed() {
    let out = temp_dir();
    run_report(&out);

    // index.html: XML, every figure inline, every section and table.
    let html = std::fs::read_to_string(out.join("index.html")).expect("index.html");
    let without_namespaces = html
        .replace("xmlns=\"http://www.w3.org/1999/xhtml\"", "")
        .replace("xmlns=\"http://www.w3.org/2000/svg\"", "");
    assert!(
        !without_namespaces.contains("http:") && !without_namespaces.contains("https:"),
        "nothing is fetched: no URL but the XML namespaces"
    );
    assert!(!html.contains("<script"), "no script");
    assert!(!html.contains("<link "), "no external style sheet");
    let doc = roxmltree::Document::parse_with_options(
        &html,
        roxmltree::ParsingOptions {
            allow_dtd: true,
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("index.html is not well-formed XML: {e}"));
    let by_id = |id: &str| doc.descendants().find(|n| n.attribute("id") == Some(id));
    for f in FIGURES {
        let fig = by_id(&format!("fig-{f}")).unwrap_or_else(|| panic!("figure {f} missing"));
        let svg = fig
            .descendants()
            .find(|n| n.has_tag_name(("http://www.w3.org/2000/svg", "svg")))
            .unwrap_or_else(|| panic!("figure {f} has no inline SVG"));
        // Test mode runs every experiment: every figure has data to draw.
        assert!(
            svg.descendants()
                .any(|n| n.has_tag_name("path") || n.attribute("class") == Some("bar")),
            "figure {f} draws nothing"
        );
        assert!(
            !svg.descendants()
                .any(|n| n.attribute("class") == Some("no-data")),
            "figure {f} lost its data"
        );
        assert!(
            fig.descendants().any(|n| n.has_tag_name("figcaption")),
            "figure {f} has no caption"
        );
    }
    for (s, tables) in SECTIONS {
        assert!(by_id(s).is_some(), "section {s} missing");
        for i in 1..=tables {
            assert!(
                by_id(&format!("table-{s}-{i}")).is_some(),
                "table {i} of {s} missing"
            );
        }
    }
    for s in COMPARED {
        let t = by_id(&format!("paper-{s}")).unwrap_or_else(|| panic!("paper vs ours of {s}"));
        let rows = t.descendants().filter(|n| n.has_tag_name("tr")).count();
        assert!(rows >= 2, "paper vs ours of {s} has no rows");
        let text: String = t.descendants().filter_map(|n| n.text()).collect();
        assert!(text.contains(".txt"), "{s}: the paper's file is named");
        assert!(
            text.contains("holds") || text.contains("does not hold"),
            "{s}: a reading says whether the finding holds"
        );
    }
    // The test mode skips the probes' overhead (it builds a second copy) and tap, saying
    // why.
    for s in ["overhead", "tap"] {
        let sec = by_id(s).unwrap();
        assert!(
            sec.descendants()
                .any(|n| n.attribute("class") == Some("skipped")),
            "{s} says why it was not measured"
        );
    }

    // figures/*.svg: each parses, has a title and labelled axes; REPORT.md links it.
    let md = std::fs::read_to_string(out.join("REPORT.md")).expect("REPORT.md");
    for f in FIGURES {
        let path = out.join(format!("figures/{f}.svg"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|_| panic!("{f}.svg"));
        let doc = roxmltree::Document::parse(&text)
            .unwrap_or_else(|e| panic!("{f}.svg is not well-formed: {e}"));
        assert_eq!(doc.root_element().tag_name().name(), "svg");
        assert!(
            !texts_with_class(&doc, "plot-title").is_empty(),
            "{f}: title"
        );
        if texts_with_class(&doc, "no-data").is_empty() {
            let x = texts_with_class(&doc, "x-label");
            let y = texts_with_class(&doc, "y-label");
            assert!(x.len() == 1 && !x[0].is_empty(), "{f}: x axis label");
            assert!(
                y.len() == 1 && y[0].contains('('),
                "{f}: y label has a unit"
            );
            assert!(
                !texts_with_class(&doc, "legend-entry").is_empty(),
                "{f}: legend"
            );
            assert!(texts_with_class(&doc, "tick").len() >= 2, "{f}: ticks");
        }
        assert!(
            md.contains(&format!("(figures/{f}.svg)")),
            "REPORT.md links {f}"
        );
    }
    assert!(md.contains("## Checksum and throughput (paper 000 Tables 1-2)"));
    assert!(md.contains("Paper vs ours"));

    // data/: one JSON per experiment run and CSVs beside them.
    for e in [
        "checksum",
        "ping",
        "echo",
        "discard",
        "throughput",
        "mix",
        "bulk",
        "cpu",
        "peers",
    ] {
        let j = std::fs::read_to_string(out.join(format!("data/{e}.json")))
            .unwrap_or_else(|_| panic!("data/{e}.json"));
        let v: serde_json::Value = serde_json::from_str(&j).expect("JSON");
        assert!(v.is_object(), "{e}");
        assert!(
            out.join(format!("data/{e}-1.csv")).exists(),
            "data/{e}-1.csv"
        );
    }
    let t: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("data/throughput.json")).unwrap())
            .unwrap();
    assert_eq!(t["rows"].as_array().map(Vec::len), Some(6));
    assert_eq!(t["send_side"].as_array().map(Vec::len), Some(4));

    render_in_chromium(&out);
    let _ = std::fs::remove_dir_all(&out);
}

/// The first headless browser found on PATH.
fn chromium() -> Option<PathBuf> {
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find_map(|name| {
            std::env::var_os("PATH").and_then(|paths| {
                std::env::split_paths(&paths)
                    .map(|p| p.join(name))
                    .find(|p| p.is_file())
            })
        })
}

/// Renders index.html headless: the DOM it builds has every figure, and the browser
/// logged no console error.
fn render_in_chromium(out: &Path) {
    let Some(browser) = chromium() else {
        eprintln!(
            "skipping the rendering check: no chromium, chromium-browser or google-chrome on PATH"
        );
        return;
    };
    let page = out.join("index.html").canonicalize().expect("page path");
    let profile = out.join("chromium-profile");
    let r = Command::new(&browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("the browser runs");
    let dom = String::from_utf8_lossy(&r.stdout);
    let log = String::from_utf8_lossy(&r.stderr);
    assert!(r.status.success(), "{} failed: {log}", browser.display());
    for f in FIGURES {
        assert!(
            dom.contains(&format!("id=\"fig-{f}\"")),
            "rendered DOM lacks {f}"
        );
    }
    assert!(dom.matches("<svg").count() >= FIGURES.len());
    let console_errors: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("CONSOLE") && l.contains("ERROR"))
        .collect();
    assert!(
        console_errors.is_empty(),
        "console errors: {console_errors:?}"
    );
}
