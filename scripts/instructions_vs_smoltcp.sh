#!/bin/sh
# Instructions per datagram, round trip, 1,460 bytes of TCP bulk and transaction for
# probestack (`fast` on a frame queue, and on its memory NICs) beside smoltcp (on its frame
# queue, and on probestack's memory NICs), each run alone through `lab peers --one` under
# callgrind: the difference of a 100 ms and a 200 ms run, divided by the difference of
# their units, so that set-up and warm-up cancel. Under valgrind the CPU offers no AVX-512
# and no AVX2 lengths below 128 bytes, so probestack's checksums run its scalar kernels
# here (smoltcp's are scalar anyway): its figures are a little above what it executes.
set -eu
cd "$(dirname "$0")/.."
cargo build -q --release -p probestack-lab
bin=target/release/probestack
# Instructions and units of one run: "INSTRUCTIONS UNITS".
run() {
    out=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        $bin lab peers --one "$1" --system "$2" --millis "$3" 2>&1)
    ir=$(echo "$out" | sed -n 's/.*refs: *//p' | tr -d ,)
    units=$(echo "$out" | sed -n 's/.*: \([0-9]*\) [a-z ]* in .*/\1/p')
    echo "$ir $units"
}
per_unit() {
    set -- $(run "$1" "$2" 100) $(run "$1" "$2" 200) "$3"
    echo $(( ($3 - $1) * $5 / ($4 - $2) ))
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
# Each pair of columns: probestack, smoltcp on the same device, probestack / smoltcp.
printf '%-16s %12s %10s %6s %12s %10s %6s\n' workload fast_queue smoltcp ratio fast_nic smol_nic ratio
for w in udp_one_way_64 udp_rr_64 tcp_bulk_1500 tcp_rr_64; do
    scale=1
    [ "$w" = tcp_bulk_1500 ] && scale=1460
    pq=$(per_unit $w probestack_fast_queue $scale)
    sq=$(per_unit $w smoltcp $scale)
    pn=$(per_unit $w probestack_fast $scale)
    sn=$(per_unit $w smoltcp_memlink $scale)
    printf '%-16s %12s %10s %6s %12s %10s %6s\n' "$w" "$pq" "$sq" \
        "$(ratio "$pq" "$sq")" "$pn" "$sn" "$(ratio "$pn" "$sn")"
done
