# Eighth run of session 11 (H100): the atomic schedule's L2 section size above D = 64. The default
# (about one wave: 1, 4 and 8 heads at the three D = 128 ladder shapes) with SDPA flash and cuDNN
# in the same run, then fixed sizes of 1, 2, 4, 8 and 16 heads (FLASHCORE_PORTABLE_BWD_SECTION_HEADS),
# no peers, the default again last. fp16, causal and not.
# Run from the repo root: bash docs/results/2026-11-26-session11-h100/run8/run8.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=$PWD/.carry/xtask; R=$OUT/run8.txt; L=/tmp/logs8; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
S="--shape 4,16,2048,128 --shape 1,16,16384,128 --shape 8,32,4096,128"
A=persistent-portable-atomic
SECONDS=0
timeout 120 $X bench-all --pass bwd --kernels $A $S --causal both --dtypes f16 --anchors .carry/anchors --out-dir /tmp/bp > $L/bench-peers.log 2>&1; echo "default with peers rc=$? (${SECONDS}s)" | tee -a $R
grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| $A \| [0-9.]+ \| [0-9.]+ \| [0-9.]+" /tmp/bp/bench-bwd.md | head -6 | cut -c1-140 | tee -a $R
for v in 1 2 4 8 16 default; do
  SECONDS=0
  if [ $v = default ]; then unset FLASHCORE_PORTABLE_BWD_SECTION_HEADS; else export FLASHCORE_PORTABLE_BWD_SECTION_HEADS=$v; fi
  timeout 80 $X bench-all --pass bwd --kernels $A $S --causal both --dtypes f16 --no-peers --out-dir /tmp/b$v > $L/bench-$v.log 2>&1; echo "sections=$v rc=$? (${SECONDS}s)" | tee -a $R
  grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| $A \| [0-9.]+ \| [0-9.]+ \|" /tmp/b$v/bench-bwd.md | head -6 | cut -d'|' -f2,4,6 | tr '\n' ' ' | tee -a $R; echo | tee -a $R
done
cd /tmp && tar cJf $OUT/logs.tar.xz logs8
