# Ninth run of session 9 (H100): the Hopper backward's two rows under cuDNN in run8,
# (4,16,2048,128) causal and not (0.98-0.99x), under the plan's backward A/B switches (no code
# change: FLASHCORE_HOPPER_BWD_* overrides of the same binary): Q/dO ring of 3, L2 sections of
# 66, 264 and 1024 units (default: 132, one wave). Two passes, then the peers once.
# Run from the repo root: bash docs/results/2026-11-26-session9-h100/run9/run9.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run9.txt; L=/tmp/logs9; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
V=("default:" "stages3:FLASHCORE_HOPPER_BWD_STAGES=3" "units66:FLASHCORE_HOPPER_BWD_SECTION_UNITS=66" "units264:FLASHCORE_HOPPER_BWD_SECTION_UNITS=264" "units1024:FLASHCORE_HOPPER_BWD_SECTION_UNITS=1024")
for i in 1 2; do for v in "${V[@]}"; do n=${v%%:*}; e=${v#*:}
  env $e timeout 60 $X bench-all --pass bwd --kernels persistent-hopper --shape 4,16,2048,128 --causal both --dtypes f16 --no-peers --out-dir /tmp/b9-$n-$i > $L/$n-$i.log 2>&1
  echo "$n pass $i: $(grep -E '^\| 4,16,2048,128 \| f16 \| (no|yes) \| persistent-hopper' /tmp/b9-$n-$i/bench-bwd.md | head -2 | cut -d'|' -f4,6 | tr '\n' ' ')" | tee -a $R
done; done
timeout 120 $X bench-all --pass bwd --kernels persistent-hopper --shape 4,16,2048,128 --causal both --dtypes f16 --out-dir /tmp/b9-peers > $L/peers.log 2>&1; echo "peers rc=$?" | tee -a $R
grep -E '^\| 4,16,2048,128 \| f16 \| (no|yes) \| persistent-hopper' /tmp/b9-peers/bench-bwd.md | head -2 | cut -d'|' -f2-13 | tee -a $R
cp /tmp/b9-peers/bench-bwd.md $L/
cd /tmp && tar cJf $OUT/logs.tar.xz logs9
