//! `probestack lab tap --seconds 1 --runs 1 --json`: the JSON has the promised shape and
//! every workload moved data. The figures themselves are not judged (a slow machine gives
//! small ones, never a failure). Without root, /dev/net/tun, `ip` or `iperf3` the command
//! says why in `skipped` and measures nothing; the test checks that and passes.

use std::process::Command;

const WORKLOADS: [&str; 5] = [
    "linux_veth",
    "tap_offload",
    "tap_no_offload",
    "tap_offload_reverse",
    "tap_no_offload_reverse",
];

#[test]
fn lab_tap_json_has_every_workload_with_a_positive_rate() {
    let out = Command::new(env!("CARGO_BIN_EXE_probestack"))
        .args(["lab", "tap", "--seconds", "1", "--runs", "1", "--json"])
        .output()
        .expect("probestack runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "lab tap failed: {stdout}\n{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).expect("lab tap --json prints JSON");
    let rows = v["rows"].as_array().expect("rows is an array");
    assert!(v["ratios"].is_object(), "{stdout}");
    if let Some(why) = v["skipped"].as_str() {
        eprintln!("skipped: {why}");
        assert!(rows.is_empty(), "{stdout}");
        return;
    }
    assert!(v["skipped"].is_null(), "{stdout}");
    assert_eq!(
        v["failures"].as_array().map(Vec::len),
        Some(0),
        "runs failed: {stdout}"
    );
    let names: Vec<&str> = rows.iter().filter_map(|r| r["workload"].as_str()).collect();
    assert_eq!(names, WORKLOADS, "{stdout}");
    for r in rows {
        let gbps = r["gbps"].as_f64().expect("gbps is a number");
        assert!(gbps > 0.0 && gbps.is_finite(), "{r}");
        let runs = r["runs"].as_array().expect("runs is an array");
        assert_eq!(runs.len(), 1, "{r}");
        assert!(
            runs.iter().all(|x| x.as_f64().is_some_and(|x| x > 0.0)),
            "{r}"
        );
        assert!(r["counters"].is_object(), "{r}");
    }
    // The TAP rows carry serve's counters, the TAP's among them.
    let offload = &rows[1];
    assert!(
        offload["counters"]["tap.rx_frames"].as_f64().unwrap_or(0.0) > 0.0,
        "{offload}"
    );
    for k in ["tap_offload/linux_veth", "tap_offload/tap_no_offload"] {
        assert!(
            v["ratios"][k].as_f64().is_some_and(|x| x > 0.0),
            "{k}: {stdout}"
        );
    }
}
