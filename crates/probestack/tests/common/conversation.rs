//! How many random conversations a run holds, and from which seed: a fixed seed by
//! default, so that CI runs the same ones each time; `PROBESTACK_CONVERSATIONS=N` runs N,
//! and `PROBESTACK_CONVERSATION_SEED=random` (or a number) explores others
//! (`tcp_conversations.rs`, `tcp_smoltcp.rs`, `tcp_linux.rs`, `udp.rs`); and the tuning
//! they draw.

use probestack::tuning::Tuning;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};

pub fn config(default_cases: u32) -> Config {
    let var = |name| std::env::var(name).ok();
    let rng_seed = match var("PROBESTACK_CONVERSATION_SEED").as_deref() {
        Some("random") => RngSeed::Random,
        Some(n) => RngSeed::Fixed(n.parse().expect("a seed is a number or `random`")),
        None => RngSeed::Fixed(0x7c9_2026),
    };
    Config {
        cases: var("PROBESTACK_CONVERSATIONS").map_or(default_cases, |n| {
            n.parse().expect("PROBESTACK_CONVERSATIONS is a number")
        }),
        rng_seed,
        // Not written to a file of regressions: a failure prints its minimal case, and
        // the ones found are kept as tests of their own.
        failure_persistence: None,
        ..Config::default()
    }
}

/// A tuning with each switch drawn, from `fast()` or `bsd()` for the kernel and the
/// lookups (the stack checks the switches that need others, such as verify on read).
pub fn tuning() -> impl Strategy<Value = Tuning> {
    (any::<bool>(), proptest::collection::vec(any::<bool>(), 11)).prop_map(|(fast, b)| {
        let base = if fast { Tuning::fast() } else { Tuning::bsd() };
        Tuning {
            checksum_elision: b[0],
            fused_copy_checksum: b[1],
            header_prediction: b[2],
            tcp_output_per_batch: b[3],
            checksum_offload: b[4],
            segmentation_offload: b[5],
            software_segmentation: b[6],
            tcp_send_by_reference: b[7],
            tcp_verify_on_read: b[8],
            tcp_header_template: b[9],
            buffer_cache: b[10],
            ..base
        }
    })
}
