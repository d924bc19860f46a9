#!/usr/bin/env bash
# First device check of the e4m3 KV cache (decode kernel, FC_KV_E4M3): verify with every case's
# K/V in e4m3 on both generation-5 paths, and the default cases (16-bit caches, e4m3 drawn one
# mode case in six) on the Hopper path, in parallel.
# From the repo root, with a stripped release xtask of the tree in .carry/xtask:
#   bash docs/results/2026-11-29-fp8-kv-h200/first-verify.sh
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
X=.carry/xtask; R=$OUT/first-verify.txt; L=$OUT/logs-first-verify; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
job() { local label=$1 t=$2; shift 2; (timeout $t "$@" > $L/$label.log 2>&1; echo "$label rc=$? (${SECONDS}s)" >> $L/rc.txt) & }
job e4m3-hopper 280 $X verify --kernels persistent-hopper --kv-dtype e4m3 --cases 300 --seed 3801
job e4m3-portable 280 $X verify --kernels persistent-portable --kv-dtype e4m3 --cases 200 --seed 3802
job default-hopper 280 $X verify --kernels persistent-hopper --cases 300 --seed 3803
wait
sort $L/rc.txt | tee -a $R
for f in $L/*.log; do echo "$(basename $f .log): $(grep -E 'passed, .* failed' $f | tail -2 | tr '\n' ' ')" | tee -a $R; done
grep -hE "FAIL|panicked|error" $L/*.log | cut -c1-400 | head -20 | tee -a $R
echo "(${SECONDS}s)" | tee -a $R
