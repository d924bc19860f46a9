#!/bin/bash
# flashcore-candle's fp8-cache GPU test again, on nvidia-h200, after its host helper converts
# e4m3 tensors on the host (the first run found no CUDA cast from F8E4M3 in candle-kernels):
# tests/gpu.rs built here with the cuda feature (CUDA_COMPUTE_CAP=90), carried gzipped in .carry/.
# Writes under $OUT.
set -u
gunzip -c .carry/candle-gpu.gz > /tmp/candle-gpu && chmod +x /tmp/candle-gpu
SP=$(python3 -c "import site; print(site.getsitepackages()[0])")
LIBS=$(find /usr/local/cuda/lib64 "$SP/nvidia" -name 'lib*.so*' -printf '%h\n' 2>/dev/null | sort -u | tr '\n' ':')
LD_LIBRARY_PATH=$LIBS${LD_LIBRARY_PATH:-} timeout 200 /tmp/candle-gpu e4m3 fp8 --test-threads 1 --nocapture > $OUT/candle-gpu-fp8.txt 2>&1; echo "rc=$?" >> $OUT/candle-gpu-fp8.txt
grep -E "^test |test result|rc=|max" $OUT/candle-gpu-fp8.txt | tail -20
