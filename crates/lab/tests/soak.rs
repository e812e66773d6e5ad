//! `probestack soak --seconds 2 --seed 1 --json`: phase 1 (checksums on) lost and altered
//! nothing and every fault kind was injected; phase 2 (checksum elision on) counted the
//! corruption that got through. Each phase always does its minimum of transfers, all drawn
//! from the seed on a virtual clock, so what is asserted holds however fast the machine is:
//! `--seconds` only adds transfers.

use std::process::Command;

#[test]
fn soak_phase_one_is_clean_and_phase_two_counts_corruption() {
    let out = Command::new(env!("CARGO_BIN_EXE_probestack"))
        .args(["soak", "--seconds", "2", "--seed", "1", "--json"])
        .output()
        .expect("probestack runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let v: serde_json::Value = serde_json::from_str(&stdout).expect("soak --json prints JSON");
    assert!(
        out.status.success(),
        "soak failed (phase 1 lost or altered data?): {stdout}\n{stderr}"
    );
    assert_eq!(v["passed"], true, "{stdout}");
    let n = |x: &serde_json::Value| x.as_u64().unwrap_or_else(|| panic!("not a count: {x}"));
    assert!(n(&v["bytes_verified"]) > 0, "{stdout}");
    assert!(n(&v["tcp_bytes_verified"]) > 0, "{stdout}");
    assert!(n(&v["udp_bytes_verified"]) > 0, "{stdout}");
    assert_eq!(n(&v["bytes_corrupted_delivered"]), 0, "{stdout}");
    assert_eq!(n(&v["tcp_bytes_lost"]), 0, "{stdout}");
    assert_eq!(n(&v["udp_datagrams_corrupted"]), 0, "{stdout}");
    assert!(n(&v["frames_in"]) > 0, "{stdout}");
    assert!(v["drops"].is_object(), "{stdout}");
    assert!(
        n(&v["peak_rss_bytes"]) > 0 || !cfg!(target_os = "linux"),
        "{stdout}"
    );
    for kind in ["drop", "duplicate", "reorder", "delay", "flip_passed"] {
        assert!(
            n(&v["faults_injected"][kind]) > 0,
            "no {kind} faults injected: {stdout}"
        );
    }
    // Checksums on, the corruption was caught and counted as drops.
    let caught: u64 = ["tcp.drop.bad_checksum", "udp.drop.bad_checksum"]
        .iter()
        .map(|k| v["drops"][k].as_u64().unwrap_or(0))
        .sum();
    assert!(caught > 0, "{stdout}");

    let e = &v["elision_phase"];
    assert_eq!(e["checksum_elision"], true, "{stdout}");
    assert!(n(&e["bytes_verified"]) > 0, "{stdout}");
    assert!(n(&e["faults_injected"]["flip_passed"]) > 0, "{stdout}");
    // Seed 1's minimum of transfers lets corrupted bytes through (deterministic: the same
    // seed, the same wire, the same flips).
    assert!(n(&e["bytes_corrupted_delivered"]) > 0, "{stdout}");
}
