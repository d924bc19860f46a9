# Third run of session 4: flashcore-candle on the GPU for the first time (issue 13): its GPU tests
# (every candle-flash-attn function against a float32 candle reference, plus the new backward and
# training-step tests) and the Llama decode example (TinyLlama-1.1B shape, batch 4, 512-token
# prompt, 128 greedy steps, both attention modes, agreement checks, tokens/s, attention timed
# alone). Binaries built here with the pip nvcc (CUDA_COMPUTE_CAP=90) and carried as
# .carry/candle-bins.tar.xz; CUDA runtime libraries from the device's PyTorch wheels.
# Beside the candle tests: the atomic-dQ portable backward (new) through verify --pass bwd,
# reliability --only backward and sanitize --pass bwd.
# Run from the repo root: bash docs/results/2026-11-25-session4-h100/run3/run3.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run3.txt; mkdir -p /tmp/v /tmp/cb
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
tar xJf .carry/candle-bins.tar.xz -C /tmp/cb
NV=$(python3 -c "import nvidia, os; print(list(nvidia.__path__)[0])")
export LD_LIBRARY_PATH=$(find $NV -name "lib*.so*" -printf "%h\n" | sort -u | tr '\n' ':')$LD_LIBRARY_PATH
for l in libcudart.so.13 libnvrtc.so.13 libcublas.so.13 libcublasLt.so.13 libcurand.so.10; do echo "$l: $(find $NV -name $l | head -1)"; done | tee -a $R
run() { name=$1; shift; (env "$@" > $OUT/$name.log 2>&1; echo "$name rc=$?" >> /tmp/v/rc.txt) & }
run verify-bwd-atomic timeout 300 $X verify --pass bwd --kernels persistent-portable-atomic --cases 1000 --seed 31
(timeout 300 /tmp/cb/candle-gpu --test-threads 2 > $OUT/candle-gpu-tests.log 2>&1; echo "candle gpu tests rc=$?" >> /tmp/v/rc.txt)
wait
run rel-bwd-atomic timeout 200 $X reliability --only backward --kernels persistent-portable-atomic --json $OUT/rel-bwd-atomic.json
run sanitize-bwd-atomic timeout 200 $X sanitize --pass bwd --kernels persistent-portable-atomic --logs /tmp/san
wait
(timeout 300 /tmp/cb/llama_decode > $OUT/llama-decode.log 2>&1; echo "llama_decode rc=$?" >> /tmp/v/rc.txt)
sort /tmp/v/rc.txt | tee -a $R
grep -E "^test |test result" $OUT/candle-gpu-tests.log | tee -a $R
grep -A12 "panicked\|FAILED\|failures:" $OUT/candle-gpu-tests.log | head -40 | tee -a $R
echo "verify atomic: $(grep -h 'passed, ' $OUT/verify-bwd-atomic.log | tail -1)" | tee -a $R
grep -h -A4 "FAIL\|shrunk" $OUT/verify-bwd-atomic.log | head -16 | tee -a $R
grep -hE "^backward " $OUT/rel-bwd-atomic.log | cut -c1-170 | tee -a $R
tail -5 $OUT/sanitize-bwd-atomic.log | tee -a $R
tail -40 $OUT/llama-decode.log | tee -a $R
