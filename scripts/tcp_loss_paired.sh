#!/bin/sh
# Two builds of examples/tcp_loss on the same seeds, or one build with two sets of
# switches: how many seeds the second finished sooner (virtual time) or later, the
# geometric mean of its time over the first's, and the ratio of the total times.
#
#   scripts/tcp_loss_paired.sh OLD_BIN NEW_BIN MIB DROP_% REORDER_% SEEDS [fast|bsd] [SWITCHES] [OLD_SWITCHES]
#
# SWITCHES is tcp_loss's sixth word (`all` by default); OLD_SWITCHES, for the first run
# of each pair, defaults to it. e.g. with the older build made from another checkout:
#   scripts/tcp_loss_paired.sh old/tcp_loss target/release/examples/tcp_loss 4 20 5 200
# or Limited Transmit on against off, without SACK, in one build:
#   b=target/release/examples/tcp_loss
#   scripts/tcp_loss_paired.sh $b $b 4 5 0 200 fast no-sack no-lt,no-sack
set -eu
old=$1 new=$2 mib=$3 drop=$4 reorder=$5 seeds=$6 tuning=${7:-fast} switches=${8:-all}
old_switches=${9:-$switches}
virtual_ms() {
    "$1" "$mib" "$drop" "$reorder" "$2" "$tuning" "$3" |
        sed -n 's/.*: \([0-9]*\) ms virtual.*/\1/p'
}
seed=1
while [ "$seed" -le "$seeds" ]; do
    echo "$(virtual_ms "$old" "$seed" "$old_switches") $(virtual_ms "$new" "$seed" "$switches")"
    seed=$((seed + 1))
done | awk '{
    if ($2 < $1) faster++; else if ($2 > $1) slower++; else same++
    logs += log(($2 + 1) / ($1 + 1)); old += $1; new += $2
} END {
    printf "%d seeds: new faster %d, slower %d, same %d; geometric mean new/old %.3f; total new/old %.3f\n",
        NR, faster, slower, same, exp(logs / NR), new / old
}'
