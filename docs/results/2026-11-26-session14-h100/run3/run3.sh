# Third run of session 14 (H100): the portable atomic backward with 64-query steps at D <= 64
# (FLASHCORE_PORTABLE_BWD_STEP_QUERIES=64 -> FC_BWD_STEP64; not the default; its sm_90a D = 64
# build still spills 24 B, so this run asks whether the idea is worth fixing that).
# (1) with the override: verify --pass bwd --cases 400 and sanitize --pass bwd, persistent-portable-atomic;
# (2) the D = 64 rows, causal and not, fp16, no peers: 32-query steps (default) against 64,
#     alternated twice.
# Run from the repo root: bash docs/results/2026-11-26-session14-h100/run3/run3.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=$PWD/.carry/xtask; R=$OUT/run3.txt; L=/tmp/logs3; mkdir -p $L /tmp/v3
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
A=persistent-portable-atomic
SECONDS=0
(FLASHCORE_PORTABLE_BWD_STEP_QUERIES=64 timeout 300 $X verify --pass bwd --kernels $A --cases 400 --seed 14301 > $L/verify.log 2>&1; echo "verify rc=$? (${SECONDS}s)" >> /tmp/v3/rc.txt) &
(FLASHCORE_PORTABLE_BWD_STEP_QUERIES=64 timeout 300 $X sanitize --pass bwd --kernels $A --logs /tmp/san3 > $L/sanitize.log 2>&1; echo "sanitize rc=$? (${SECONDS}s)" >> /tmp/v3/rc.txt) &
wait
sort /tmp/v3/rc.txt | tee -a $R
grep -hE "\(bwd\): [0-9]+ passed|FAIL|shrunk" $L/verify.log | tail -6 | tee -a $R
grep -hE "^\| persistent|^sanitize: no|errors" $L/sanitize.log | grep -v "^sanitize: /" | grep "^|\|^sanitize" | tee -a $R
for i in 1 2; do for q in 32 64; do SECONDS=0
  FLASHCORE_PORTABLE_BWD_STEP_QUERIES=$q timeout 120 $X bench-all --pass bwd --kernels $A --shape 4,16,2048,64 --shape 2,16,8192,64 --causal both --dtypes f16 --no-peers --anchors .carry/anchors --out-dir /tmp/b3-$q-$i > $L/bench-q$q-$i.log 2>&1
  echo "steps=$q pass $i (rc=$?, ${SECONDS}s): $(grep -E '^\| [0-9,]+ \| f16 \| (no|yes) \| persistent-portable-atomic \| [0-9.]+ \|' /tmp/b3-$q-$i/bench-bwd.md | cut -d'|' -f2,4,6 | tr '\n' ' ' | tr -s ' ')" | tee -a $R
  cp /tmp/b3-$q-$i/bench-bwd.md $L/bench-q$q-$i.md
done; done
cd /tmp && tar cJf $OUT/logs.tar.xz logs3
