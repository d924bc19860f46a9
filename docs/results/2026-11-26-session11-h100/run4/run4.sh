# Fourth run of session 11 (H100): the atomic dK/dV kernel's dQ product (run3: 21 % of the stall
# samples for one of five products; a rolled k loop waits on every ldmatrix). Same binary, the dQ
# warp tile and k-loop unroll chosen by FLASHCORE_PORTABLE_DQ_DEFINES (temporary A/B hook), no
# peers, fp16, non-causal; the base build first and last.
# Run from the repo root: bash docs/results/2026-11-26-session11-h100/run4/run4.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=$PWD/.carry/xtask; R=$OUT/run4.txt; L=/tmp/logs4; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
S="--shape 4,16,2048,128 --shape 8,32,4096,128 --shape 4,16,2048,64 --shape 2,16,8192,64"
i=0
for v in base FC_DQ_TILE_COLS=32 FC_DQ_UNROLL=2 FC_DQ_UNROLL=4 FC_DQ_TILE_COLS=32,FC_DQ_UNROLL=2 FC_DQ_TILE_COLS=32,FC_DQ_UNROLL=4 FC_DQ_SMALL_ROWS32=1,FC_DQ_UNROLL=2 FC_DQ_SMALL_ROWS32=1,FC_DQ_UNROLL=4 base; do
  i=$((i+1)); SECONDS=0
  if [ $v = base ]; then unset FLASHCORE_PORTABLE_DQ_DEFINES; else export FLASHCORE_PORTABLE_DQ_DEFINES=$v; fi
  timeout 100 $X bench-all --pass bwd --kernels persistent-portable-atomic $S --causal off --dtypes f16 --no-peers --out-dir /tmp/b$i > $L/bench-$i.log 2>&1; echo "$i $v rc=$? (${SECONDS}s)" | tee -a $R
  grep -E "^\| [0-9,]+ \| f16 \| no \| persistent-portable-atomic \| [0-9.]+ \| [0-9.]+ \|" /tmp/b$i/bench-bwd.md | head -4 | cut -d'|' -f2,6,7 | tr '\n' ' ' | sed "s/^/$i $v:/" | tee -a $R; echo | tee -a $R
done
cd /tmp && tar cJf $OUT/logs.tar.xz logs4
