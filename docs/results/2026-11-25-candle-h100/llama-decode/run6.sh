# Sixth run of session 4: the Llama decode example with the token check reporting the reference's
# margin at each differing greedy decision (run5: 490 of 512 ids equal, logits within 0.111).
# TinyLlama-1.1B shape, batch 4, 512-token prompt, 128 greedy steps; flashcore-candle against
# candle's own attention: logits and token agreement, prefill and decode tokens/s, attention
# share, and the attention op timed alone.
# Run from the repo root: bash docs/results/2026-11-25-session4-h100/run6/run6.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; R=$OUT/run6.txt; mkdir -p /tmp/cb
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
tar xJf .carry/candle-bins.tar.xz -C /tmp/cb
NV=$(python3 -c "import nvidia, os; print(list(nvidia.__path__)[0])")
export LD_LIBRARY_PATH=$(find $NV -name "lib*.so*" -printf "%h\n" | sort -u | tr '\n' ':')$LD_LIBRARY_PATH
timeout 280 /tmp/cb/llama_decode > $OUT/llama-decode.log 2>&1; echo "llama_decode rc=$?" | tee -a $R
tail -20 $OUT/llama-decode.log | tee -a $R
