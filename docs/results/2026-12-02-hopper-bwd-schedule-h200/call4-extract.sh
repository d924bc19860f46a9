#!/usr/bin/env bash
# Call 4 wrote more than the eight files a device call brings back; this remakes the ones left out
# (ncu-new-*.csv, verify.txt, sanitize.txt, reliability.txt) from its logs.tar.xz with call4.sh's
# own commands, on this machine. summary.txt is not remade: call 4's printed tail is in README.md.
#   bash docs/results/2026-12-02-hopper-bwd-schedule-h200/call4-extract.sh
set -eu
O=$(dirname "$0")/call4; H=persistent-hopper
T=$(mktemp -d); tar xJf $O/logs.tar.xz -C $T; L=$T/logs-call4
for row in d64-equal-causal d128-mixed-causal d128-win1024; do
  grep -E '^"[0-9]+"' $L/ncu-new-$row.log > $O/ncu-new-$row.csv
done
grep -avE "^\s*$" $L/verify.log | tail -40 > $O/verify.txt
grep -ahE "^\| |sanitize:" $L/sanitize.log > $O/sanitize.txt
grep -aE "^\||reliability:| (PASS|FAIL|SKIP) " $L/reliability.log | cut -c1-300 > $O/reliability.txt
cp $L/rc.txt $O/rc.txt
rm -rf $T
