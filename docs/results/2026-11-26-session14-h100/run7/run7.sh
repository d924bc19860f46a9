# Seventh run of session 14 (H100): 64-query steps for the deterministic portable backward at
# D <= 64 (FLASHCORE_PORTABLE_BWD_STEP_QUERIES=64 now reaches that schedule too; its default
# stays 32 until measured).
# (1) with the override, in parallel: verify --pass bwd --cases 1000, reliability --only backward
#     (1000 bit-identical runs at D = 64 and 128), sanitize --pass bwd, persistent-portable;
# (2) the D = 64 rows, causal and not, fp16, no peers: 32 against 64 queries a step, alternated
#     twice.
# Run from the repo root: bash docs/results/2026-11-26-session14-h100/run7/run7.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=$PWD/.carry/xtask; R=$OUT/run7.txt; L=/tmp/logs7; mkdir -p $L /tmp/v7
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
P=persistent-portable
SECONDS=0
export FLASHCORE_PORTABLE_BWD_STEP_QUERIES=64
(timeout 420 $X verify --pass bwd --kernels $P --cases 1000 --seed 14701 > $L/verify.log 2>&1; echo "verify rc=$? (${SECONDS}s)" >> /tmp/v7/rc.txt) &
(timeout 420 $X reliability --only backward --kernels $P > $L/reliability-bwd.log 2>&1; echo "reliability bwd rc=$? (${SECONDS}s)" >> /tmp/v7/rc.txt) &
(timeout 420 $X sanitize --pass bwd --kernels $P --logs /tmp/san7 > $L/sanitize-bwd.log 2>&1; echo "sanitize bwd rc=$? (${SECONDS}s)" >> /tmp/v7/rc.txt) &
wait
unset FLASHCORE_PORTABLE_BWD_STEP_QUERIES
sort /tmp/v7/rc.txt | tee -a $R
grep -hE "\(bwd\): [0-9]+ passed|FAIL|shrunk" $L/verify.log | tail -6 | tee -a $R
grep -E "^backward" $L/reliability-bwd.log | cut -c1-110 | tee -a $R
grep -hE "^\| persistent|^sanitize: no|errors" $L/sanitize-bwd.log | grep -v "^sanitize: /" | grep "^|\|^sanitize" | tee -a $R
for i in 1 2; do for q in 32 64; do SECONDS=0
  FLASHCORE_PORTABLE_BWD_STEP_QUERIES=$q timeout 120 $X bench-all --pass bwd --kernels $P --shape 4,16,2048,64 --shape 2,16,8192,64 --causal both --dtypes f16 --no-peers --anchors .carry/anchors --out-dir /tmp/b7-$q-$i > $L/bench-q$q-$i.log 2>&1
  echo "steps=$q pass $i (rc=$?, ${SECONDS}s): $(grep -E '^\| [0-9,]+ \| f16 \| (no|yes) \| persistent-portable \| [0-9.]+ \|' /tmp/b7-$q-$i/bench-bwd.md | sort -u | cut -d'|' -f2,4,6 | tr '\n' ' ' | tr -s ' ')" | tee -a $R
  cp /tmp/b7-$q-$i/bench-bwd.md $L/bench-q$q-$i.md
done; done
cd /tmp && tar cJf $OUT/logs.tar.xz logs7
