#!/bin/sh
# Instructions per datagram, round trip, transaction and segment for the profiling
# harnesses in crates/probestack/examples, from the difference of two callgrind runs of
# different lengths (so setup and warm-up cancel). Needs valgrind.
#
#   scripts/instructions_per_packet.sh            # the probe-free build (the stack's own cost)
#   scripts/instructions_per_packet.sh --probes   # with the ledger's probes at the default sampling (1 message in 1,024)
#   scripts/instructions_per_packet.sh --queue    # probe-free, Tuning::fast() on a frame queue (no NIC model; every checksum computed)
set -eu
cd "$(dirname "$0")/.."
features="--no-default-features"
target=target/harness
device=fast
case "${1:-}" in
--probes)
    features=""
    target=target/harness-probes
    ;;
--queue) device=queue ;;
esac
# shellcheck disable=SC2086
CARGO_TARGET_DIR=$target cargo build -q --release -p probestack $features \
    --example udp_burst --example udp_rr --example tcp_rr --example tcp_bulk --example nic_frames
bin=$target/release/examples
ir() { valgrind --tool=callgrind --callgrind-out-file=/dev/null "$@" 2>&1 | sed -n 's/.*refs: *//p' | tr -d ,; }
segments() { "$@" | sed -n 's/.*, \([0-9]*\) segments.*/\1/p'; }

a=$(ir $bin/udp_burst 64 5000 $device); b=$(ir $bin/udp_burst 64 2500 $device)
echo "udp_burst, 64-byte datagrams one way: $(( (a - b) / (2500 * 32) )) per datagram"
a=$(ir $bin/udp_burst 64 5000 $device "" batch); b=$(ir $bin/udp_burst 64 2500 $device "" batch)
echo "udp_burst, the same, batched sends:    $(( (a - b) / (2500 * 32) )) per datagram"
a=$(ir $bin/udp_rr 64 20000 $device); b=$(ir $bin/udp_rr 64 10000 $device)
echo "udp_rr, 64-byte request/response:      $(( (a - b) / 10000 )) per round trip"
a=$(ir $bin/tcp_rr 20000 64 $device); b=$(ir $bin/tcp_rr 10000 64 $device)
echo "tcp_rr, 64-byte request/response:      $(( (a - b) / 10000 )) per transaction"
s1=$(segments $bin/tcp_bulk 64 1500 $device); s0=$(segments $bin/tcp_bulk 32 1500 $device)
a=$(ir $bin/tcp_bulk 64 1500 $device); b=$(ir $bin/tcp_bulk 32 1500 $device)
echo "tcp_bulk, MTU 1500:                    $(( (a - b) / (s1 - s0) )) per segment"
if [ "$device" = fast ]; then
    a=$(ir $bin/nic_frames 106 20000); b=$(ir $bin/nic_frames 106 10000)
    echo "nic_frames, 106-byte frames, no stack:  $(( (a - b) / (10000 * 32) )) per frame"
fi
