# Sixth run of session 12 (H100): run5's backward bench with peers, twice more on the same tree and
# binary, to see how far the peers' times (and ours) move between bench runs: in run5 SDPA flash
# took 5363 us at (2,16,8192,64) non-causal, against 4954 us in run2 and 5080 us in session 11's
# run7. fp16, the ladder shapes and (2,16,8192,64), causal and not; FA3 from the anchors.
# Run from the repo root: bash docs/results/2026-11-26-session12-h100/run6/run6.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=$PWD/.carry/xtask; R=$OUT/run6.txt; L=/tmp/logs6; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
for rep in 1 2; do
  SECONDS=0
  timeout 250 $X bench-all --pass bwd --kernels persistent-hopper,persistent-portable,persistent-portable-atomic --shape 4,16,2048,64 --shape 4,16,2048,128 --shape 1,16,16384,128 --shape 8,32,4096,128 --shape 2,16,8192,64 --causal both --dtypes f16 --anchors .carry/anchors --out-dir /tmp/bb$rep > $L/bench-bwd-$rep.log 2>&1; echo "bench bwd rep $rep rc=$? (${SECONDS}s)" | tee -a $R
  mkdir -p $L/rep$rep; cp /tmp/bb$rep/bench-bwd.* $L/rep$rep/ 2>/dev/null
  grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| persistent-[a-z-]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+" /tmp/bb$rep/bench-bwd.md | head -10 | cut -d'|' -f2,4,6,8,9 | tee -a $R
  grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| persistent-portable-atomic \| [0-9.]+ \| [0-9.]+ \| [0-9.]+" /tmp/bb$rep/bench-bwd.md | cut -d'|' -f2,4,6,8 | tee -a $R
done
cd /tmp && tar cJf $OUT/logs.tar.xz logs6
