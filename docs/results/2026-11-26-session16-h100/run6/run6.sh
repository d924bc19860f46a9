# Sixth run of session 16 (H100): correctness of the L2 prefetch before griddepcontrol.wait
# (FC_HOPPER_PREFETCH on dense Hopper forward builds launched programmatically, FC_DECODE_PREFETCH
# on the decode kernels): verify --cases 1000 with the default plans (Hopper path), through the
# forced decode kernel with swept split counts (Hopper path, which prefetches paged and contiguous
# caches); reliability (determinism, streams, out-of-bounds, modes) on the Hopper path; sanitize
# with the default plans and with 4 forced decode splits.
# Needs in .carry/: xtask (2883df6 before its plan rule for the prefetch was narrowed: the same
# modules as 2883df6 with FLASHCORE_HOPPER_PREFETCH=1 FLASHCORE_DECODE_PREFETCH=1).
# Run from the repo root: bash docs/results/2026-11-26-session16-h100/run6/run6.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; X=.carry/xtask; R=$OUT/run6.txt; L=/tmp/logs6; mkdir -p $L /tmp/v6
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
run() { name=$1; shift; (env "$@" > $L/$name.log 2>&1; echo "$name rc=$? (${SECONDS}s)" >> /tmp/v6/rc.txt) & }
run default-hopper timeout 400 $X verify --kernels persistent-hopper --cases 1000 --seed 1621
run sweep-hopper FLASHCORE_DECODE=force FLASHCORE_DECODE_SPLITS=sweep timeout 400 $X verify --kernels persistent-hopper --cases 1000 --seed 1622
run reliability timeout 400 $X reliability --only determinism,streams,oob,modes --kernels persistent-hopper
run sanitize timeout 400 $X sanitize --pass fwd --kernels persistent-hopper
run sanitize-decode FLASHCORE_DECODE=force FLASHCORE_DECODE_SPLITS=4 timeout 400 $X sanitize --pass fwd --kernels persistent-hopper
wait
sort /tmp/v6/rc.txt | tee -a $R
for n in default-hopper sweep-hopper; do echo "$n: $(grep -h 'passed, ' $L/$n.log | tail -1)" | tee -a $R; done
grep -h -B1 -A4 "FAIL\|shrunk" $L/default-*.log $L/sweep-*.log | head -20 | tee -a $R
grep -E "^[a-z]+ +persistent|reliability:" $L/reliability.log | cut -c1-120 | tee -a $R
for n in sanitize sanitize-decode; do grep -hE "^\| persistent|^sanitize: no|errors" $L/$n.log | grep "^|\|^sanitize" | sed "s/^/$n: /" | tee -a $R; done
cd /tmp && tar cJf $OUT/logs.tar.xz logs6
