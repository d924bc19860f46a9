#!/bin/bash
# The decode kernel's page ids read one iteration ahead (pages that hold whole key tiles: block 64
# at D <= 256): base (.carry/xtask-base, 2aa14e4) against the change (.carry/xtask-pg), the decode
# suite's paged rows at D = 128, bf16 and e4m3 caches, interleaved; then checks of the change:
# verify (decode forced, bf16 and e4m3 caches), sanitize (memcheck, racecheck) of the Hopper path.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
R=$OUT/summary.txt; L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R
SECONDS=0
bench() {  # name binary args...
  local name=$1 x=$2; shift 2
  if [ $SECONDS -gt 260 ]; then echo "== $name skipped (${SECONDS}s)" >> $R; return; fi
  timeout 75 .carry/$x bench-all --suite decode --kernels persistent-hopper --no-peers --no-gemm --repeats 5 "$@" \
    --out-dir $L/$name > $L/$name.log 2>&1
  echo "== $name ($x $*) rc=$? (${SECONDS}s)" >> $R
  grep -E "persistent-hopper \| (paged|e4m3)" $L/$name/bench-decode.md 2>/dev/null | cut -d'|' -f2,5,6 | sed 's/(decode[^)]*)//; s/B=//; s/ Hq=/,/; s/ Hkv=/,/; s/ Sq=/,/; s/ Sk=/,/; s/ D=128//' >> $R
}
bench bf16-base-1 xtask-base --case /paged
bench bf16-pg-1 xtask-pg --case /paged
bench e4m3-base-1 xtask-base --kv-dtype e4m3 --case /e4m3-paged
bench e4m3-pg-1 xtask-pg --kv-dtype e4m3 --case /e4m3-paged
bench e4m3-base-2 xtask-base --kv-dtype e4m3 --case /e4m3-paged
bench e4m3-pg-2 xtask-pg --kv-dtype e4m3 --case /e4m3-paged
bench bf16-pg-2 xtask-pg --case /paged
bench bf16-base-2 xtask-base --case /paged
echo "== checks (${SECONDS}s)" >> $R
X=.carry/xtask-pg
FLASHCORE_DECODE=force timeout 150 $X verify --kernels persistent-hopper --cases 300 --seed 5701 > $L/verify-force.log 2>&1 &
timeout 150 $X verify --kernels persistent-hopper --kv-dtype e4m3 --cases 200 --seed 5702 > $L/verify-e4m3.log 2>&1 &
timeout 170 $X sanitize --tools memcheck,racecheck --pass fwd --kernels persistent-hopper --timeout 160 --logs $L/sanitize > $L/sanitize.log 2>&1 &
wait
for f in verify-force verify-e4m3; do echo "$f: $(grep -E '^verify:|cases, [0-9]+ failed' $L/$f.log | tail -1)" >> $R; done
echo "sanitize: $(tail -5 $L/sanitize.log | tr '\n' ' ')" >> $R
tar -C $OUT -cJf $OUT/logs.tar.xz logs && rm -rf $L
echo "done (${SECONDS}s)" >> $R
cat $R
