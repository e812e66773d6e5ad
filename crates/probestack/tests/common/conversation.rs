//! How many random conversations a run holds, and from which seed: a fixed seed by
//! default, so that CI runs the same ones each time; `PROBESTACK_CONVERSATIONS=N` runs N,
//! and `PROBESTACK_CONVERSATION_SEED=random` (or a number) explores others
//! (`tcp_conversations.rs`, `tcp_smoltcp.rs`).

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
