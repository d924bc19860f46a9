# Eighth run: is the Hopper path's paged overhead at block 16 the two-stage ring's latency budget?
# The paged suite (Hopper, no peers) on the final tree with the default plan (K/V ring of 2 stages,
# 2 Q buffers) against FLASHCORE_HOPPER_STAGES=3 FLASHCORE_HOPPER_Q_STAGES=1 (3 K/V stages, one Q
# buffer: 224 KiB at D = 128), alternated twice. Absolute times of contiguous and paged cases.
# Run from the repo root: bash docs/results/2026-11-25-session7-h100/run8/run8.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; R=$OUT/run8.txt; L=/tmp/logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
for i in 1 2; do for v in default s3q1; do
  if [ $v = s3q1 ]; then export FLASHCORE_HOPPER_STAGES=3 FLASHCORE_HOPPER_Q_STAGES=1; else unset FLASHCORE_HOPPER_STAGES FLASHCORE_HOPPER_Q_STAGES; fi
  timeout 60 .carry/xtask bench-all --suite paged --kernels persistent-hopper --no-peers --out-dir /tmp/p-$v-$i > $L/paged-$v-$i.log 2>&1; echo "paged $v $i rc=$?" | tee -a $R
  cp /tmp/p-$v-$i/bench-paged.md $L/paged-$v-$i.md
  grep -E "^\| (chunk|prefill|decode)/[a-z0-9-]+ \| persistent" /tmp/p-$v-$i/bench-paged.md | cut -d'|' -f2,5 | tr '\n' ';' | tee -a $R; echo | tee -a $R
done; done
cd /tmp && tar cJf $OUT/logs.tar.xz logs
