# Fourth run of session 19 (H100): where the mission shape's key loop waits. Session 18's and run1's
# timelines have the first K tile landing ~100-200 cycles after Q but later tiles ~500-900 cycles
# apart, as if each CTA's tiles arrived at ~30 bytes a cycle. Either they come from DRAM (the L2
# prefetch before the grid-dependency wait did not hold them) or the SM's bulk copies deliver no
# faster from L2. This tree adds FLASHCORE_BENCH_INPUT_SETS (a diagnostic: the dense bench's inputs
# rotated over N sets), so with N = 1 the inputs stay in L2 from the call before.
# (1) the mission shape, default rotation against one input set, alternating twice;
# (2) the timeline of each (FLASHCORE_HOPPER_TRACE=1).
# Run from the repo root: bash docs/results/2026-11-27-session19-h100/run4/run4.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run4.txt; L=/tmp/logs4; mkdir -p $L
pack() { cd /tmp && tar cJf $OUT/logs.tar.xz logs4; cd - > /dev/null; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
m() {  # label, env...
  label=$1; shift
  env "$@" timeout 100 $X bench-all --suite mission --causal both --kernels persistent-hopper --no-peers --out-dir $L/m-$label > $L/m-$label.log 2>&1
  echo "== mission $label ($*): rc=$?" | tee -a $R
  grep -E "^\| 1,8,512,64 \| f16 \| (no|yes) \| persistent-hopper \| [a-z]" $L/m-$label/bench-all.md | cut -d'|' -f2-8 | tee -a $R
}
for round in 1 2; do
  m rotated-$round
  m resident-$round FLASHCORE_BENCH_INPUT_SETS=1
done
t() {  # label, env...
  label=$1; shift
  env FLASHCORE_HOPPER_TRACE=1 "$@" timeout 100 $X bench-all --shape 1,8,512,64 --causal off --kernels persistent-hopper --no-peers --repeats 3 --max-seconds-per-shape 1 --out-dir $L/trace-$label > $L/trace-$label.log 2>&1
  echo "== trace $label ($*): rc=$?" | tee -a $R
  grep -h "fwd-trace" $L/trace-$label.log | grep -v "tile [0-9]" | head -12 | tee -a $R
}
t rotated
t resident FLASHCORE_BENCH_INPUT_SETS=1
pack
