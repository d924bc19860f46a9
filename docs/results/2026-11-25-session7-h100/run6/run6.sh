# Sixth run. Hopper producer: a K/V tile's copies are planned (page ids, rows in the page, byte
# count) before the producer waits for the tile's ring slots (kv_fetch.cuh: plan_kv_tile), so a
# released slot is refilled with nothing but the copies left to issue. Dense builds: same PTX.
# verify --cases 1000 on the Hopper path; the paged suite (Hopper, no peers) against
# .carry/xtask-prev (6031875, whose Hopper kernel is run4's), alternated twice.
# Run from the repo root: bash docs/results/2026-11-25-session7-h100/run6/run6.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; R=$OUT/run6.txt; L=/tmp/logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
timeout 240 .carry/xtask verify --kernels persistent-hopper --cases 1000 --seed 761 > $L/verify-persistent-hopper.log 2>&1; echo "verify rc=$?" | tee -a $R
grep -h 'passed, ' $L/verify-persistent-hopper.log | tail -1 | tee -a $R; grep -h -A5 "FAIL\|shrunk" $L/verify-persistent-hopper.log | head -8 | tee -a $R
for i in 1 2; do for b in xtask-prev xtask; do
  timeout 60 .carry/$b bench-all --suite paged --kernels persistent-hopper --no-peers --out-dir /tmp/p-$b-$i > $L/paged-$b-$i.log 2>&1; echo "paged $b $i rc=$?" | tee -a $R
  cp /tmp/p-$b-$i/bench-paged.md $L/paged-$b-$i.md
  grep -E "time / contiguous time" /tmp/p-$b-$i/bench-paged.md | cut -d"|" -f2,4 | tr '\n' ';' | sed 's/paged block //g; s/ time \/ contiguous time//g' | tee -a $R; echo | tee -a $R
  grep -E "^\| (chunk|prefill)/[a-z0-9-]+ \| persistent" /tmp/p-$b-$i/bench-paged.md | cut -d'|' -f2,5 | tr '\n' ';' | tee -a $R; echo | tee -a $R
done; done
cd /tmp && tar cJf $OUT/logs.tar.xz logs
