#!/bin/bash
# reliability --only determinism on persistent-hopper, on nvidia-h200: the dense, large and decode
# trials and the e4m3 forward (GQA, causal, descales per sequence and KV head), each run against
# run 0 bit for bit; and, when carried, flashcore-candle's GPU tests (the fp8 forward and the fp8
# cache). Run from the repository root with the release xtask (and the candle test binary) in
# .carry/. Writes under $OUT.
set -u
X=.carry/xtask
timeout 300 $X reliability --only determinism --kernels persistent-hopper > $OUT/determinism.txt 2>&1; echo "rc=$?" >> $OUT/determinism.txt
if [ -f .carry/candle-gpu.gz ]; then
  # flashcore-candle's GPU tests (tests/gpu.rs, built here with the cuda feature at 856c7e5),
  # carried gzipped; CUDA 13's runtime libraries from the machine's toolkit and torch's wheels.
  gunzip -c .carry/candle-gpu.gz > /tmp/candle-gpu && chmod +x /tmp/candle-gpu
  SP=$(python3 -c "import site; print(site.getsitepackages()[0])")
  LIBS=$(find /usr/local/cuda/lib64 "$SP/nvidia" -name 'lib*.so*' -printf '%h\n' 2>/dev/null | sort -u | tr '\n' ':')
  LD_LIBRARY_PATH=$LIBS${LD_LIBRARY_PATH:-} timeout 240 /tmp/candle-gpu --test-threads 1 --nocapture > $OUT/candle-gpu.txt 2>&1; echo "rc=$?" >> $OUT/candle-gpu.txt
  grep -E "^test |test result|rc=" $OUT/candle-gpu.txt | tail -30
fi
grep -E "determinism|rc=" $OUT/determinism.txt | tail -12
