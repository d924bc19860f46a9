# Fifth run of session 11 (H100): L2 sections for the wide dK/dV pass (FC_BWD_SECTION_HEADS: the
# blocks running at once share a few heads' Q, dO and dQ accumulator rows), both portable
# schedules, sections off (FLASHCORE_PORTABLE_BWD_SECTION_HEADS=0) against the default (about one
# wave), alternated twice; the atomic build with run4's best dQ tile (32 x 32, k loop unrolled 4).
# No peers, fp16, the ladder shapes, causal and not.
# Run from the repo root: bash docs/results/2026-11-26-session11-h100/run5/run5.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=$PWD/.carry/xtask; R=$OUT/run5.txt; L=/tmp/logs5; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
export FLASHCORE_PORTABLE_DQ_DEFINES=FC_DQ_TILE_COLS=32,FC_DQ_UNROLL=4
S="--shape 4,16,2048,64 --shape 4,16,2048,128 --shape 1,16,16384,128 --shape 8,32,4096,128 --shape 2,16,8192,64"
for pass in 1 2; do for sec in 0 default; do
  SECONDS=0
  if [ $sec = default ]; then unset FLASHCORE_PORTABLE_BWD_SECTION_HEADS; else export FLASHCORE_PORTABLE_BWD_SECTION_HEADS=$sec; fi
  timeout 140 $X bench-all --pass bwd --kernels persistent-portable,persistent-portable-atomic $S --causal both --dtypes f16 --no-peers --out-dir /tmp/b$sec$pass > $L/bench-$sec-$pass.log 2>&1; echo "sections=$sec pass $pass rc=$? (${SECONDS}s)" | tee -a $R
  grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| persistent-portable(-atomic)? \| [0-9.]+ \| [0-9.]+ \|" /tmp/b$sec$pass/bench-bwd.md | head -20 | cut -d'|' -f2-7 | sed "s/^/$sec-$pass |/" | tee -a $R
done; done
cd /tmp && tar cJf $OUT/logs.tar.xz logs5
