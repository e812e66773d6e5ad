#!/bin/sh
# `lab peers` from a profile-guided build (PGO): the probestack binary built instrumented,
# trained on `lab peers --quick` (every system's workloads, so smoltcp's code is trained
# and laid out as probestack's is), then rebuilt with the profile. Not the default build
# (that stays `cargo run --release`, which needs nothing but cargo); this shows what the
# compiler's layout costs the stacks (see the README, "lab peers", profile-guided build).
# Needs llvm-profdata from rustc's own LLVM: `rustup component add llvm-tools`, or set
# LLVM_PROFDATA.
#
#   scripts/pgo_peers.sh [lab peers arguments]     # e.g. --quick, --json
#   PGO_TRAINING="" scripts/pgo_peers.sh             # train on a full lab peers run instead
set -eu
cd "$(dirname "$0")/.."
profdata="${LLVM_PROFDATA:-}"
if [ -z "$profdata" ]; then
    sysroot=$(rustc --print sysroot)
    host=$(rustc -vV | sed -n 's/^host: //p')
    profdata="$sysroot/lib/rustlib/$host/bin/llvm-profdata"
fi
if [ ! -x "$profdata" ]; then
    echo "pgo_peers: no llvm-profdata at $profdata (rustup component add llvm-tools, or set LLVM_PROFDATA)" >&2
    exit 2
fi
data=$(mktemp -d /tmp/probestack-pgo.XXXXXX)
trap 'rm -rf "$data"' EXIT
training="${PGO_TRAINING---quick}"
echo "pgo_peers: instrumented build, then training on lab peers $training" >&2
RUSTFLAGS="-Cprofile-generate=$data/raw" CARGO_TARGET_DIR=target/pgo-generate \
    cargo build -q --release -p probestack-lab
# shellcheck disable=SC2086
target/pgo-generate/release/probestack lab peers $training > /dev/null
"$profdata" merge -o "$data/merged.profdata" "$data/raw"
echo "pgo_peers: build with the profile" >&2
RUSTFLAGS="-Cprofile-use=$data/merged.profdata" CARGO_TARGET_DIR=target/pgo-use \
    cargo build -q --release -p probestack-lab
target/pgo-use/release/probestack lab peers "$@"
