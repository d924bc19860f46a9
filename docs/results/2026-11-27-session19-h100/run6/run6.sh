# Sixth run of session 19 (H100): the mission shape's key loop is a latency-bound chain of
# (warpgroup, tile) steps (runs 4-5). Two plan-level variants of its length, each against the
# default, alternating twice: 64-key tiles (8 tiles: four shorter steps a warpgroup) and, at the
# other end, the ring's depth back to 2 (each warpgroup one tile of lookahead).
# Run from the repo root: bash docs/results/2026-11-27-session19-h100/run6/run6.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run6.txt; L=/tmp/logs6; mkdir -p $L
pack() { cd /tmp && tar cJf $OUT/logs.tar.xz logs6; cd - > /dev/null; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
m() {  # label, env...
  label=$1; shift
  env "$@" timeout 100 $X bench-all --suite mission --causal both --kernels persistent-hopper --no-peers --out-dir $L/m-$label > $L/m-$label.log 2>&1
  echo "== mission $label ($*): rc=$?" | tee -a $R
  grep -E "^\| 1,8,512,64 \| f16 \| (no|yes) \| persistent-hopper \| [a-z]" $L/m-$label/bench-all.md | cut -d'|' -f2-8 | tee -a $R
}
for round in 1 2; do
  m default-$round
  m bn64-$round FLASHCORE_HOPPER_BLOCK_N=64
  m stages3-$round FLASHCORE_HOPPER_STAGES=3
done
pack
