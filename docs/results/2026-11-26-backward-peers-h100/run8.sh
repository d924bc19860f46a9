# Eighth run of session 14 (H100), on the final tree: the backward bench of all three backward
# kernels (the deterministic schedule now also takes 64-query steps at D <= 64: run7 verified
# those builds) with SDPA flash and cuDNN in the same run (FA3 from the anchors), fp16, the
# ladder shapes and (2,16,8192,64), causal and not; twice.
# Run from the repo root: bash docs/results/2026-11-26-session14-h100/run8/run8.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=$PWD/.carry/xtask; R=$OUT/run8.txt; L=/tmp/logs8; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
for rep in 1 2; do SECONDS=0
  timeout 280 $X bench-all --pass bwd --kernels persistent-hopper,persistent-portable,persistent-portable-atomic --shape 4,16,2048,64 --shape 4,16,2048,128 --shape 1,16,16384,128 --shape 8,32,4096,128 --shape 2,16,8192,64 --causal both --dtypes f16 --anchors .carry/anchors --out-dir /tmp/bb$rep > $L/bench-bwd-$rep.log 2>&1; echo "bench bwd rep $rep rc=$? (${SECONDS}s)" | tee -a $R
  mkdir -p $L/rep$rep; cp /tmp/bb$rep/bench-bwd.* $L/rep$rep/ 2>/dev/null
  grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| persistent-[a-z-]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+" /tmp/bb$rep/bench-bwd.md | head -10 | cut -c1-200 | tee -a $R
  grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| persistent-portable(-atomic)? \| [0-9.]+ \| [0-9.]+ \| [0-9.]+" /tmp/bb$rep/bench-bwd.md | cut -d'|' -f2,4,5,6,7,8,9 | tee -a $R
done
cd /tmp && tar cJf $OUT/logs.tar.xz logs8
