# Eleventh run of session 13 (H100). This tree: one dQ convert for every Hopper backward build, a
# CTA per accumulator query block: the block's slices loaded with 16-byte loads all in flight, a
# shared-memory tile, rows written 16 bytes a thread (before: one warp a row reading scattered
# float2, or, with 80-row steps, a CTA a block with one load in flight a thread).
# .carry/xtask-base = run10's binary (dbf6e12).
# (1) in parallel: verify --pass bwd on persistent-hopper with FLASHCORE_HOPPER_DEBUG=1, and
#     reliability --only backward;
# (2) ncu kernel time of the convert, base and this tree, at (4,16,2048,128) non-causal and causal
#     and (4,16,2048,64) non-causal;
# (3) bench, no peers, base against this tree, alternated twice, causal and not.
# Run from the repo root: bash docs/results/2026-11-26-session13-h100/run11/run11.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=$PWD/.carry/xtask; XB=$PWD/.carry/xtask-base; R=$OUT/run11.txt; L=/tmp/logs11; mkdir -p $L /tmp/v11
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
H=persistent-hopper
SECONDS=0
(FLASHCORE_HOPPER_DEBUG=1 timeout 240 $X verify --pass bwd --kernels $H --cases 300 --seed 14101 > $L/verify-debug.log 2>&1; echo "verify debug rc=$? (${SECONDS}s)" >> /tmp/v11/rc.txt) &
(timeout 240 $X reliability --only backward --kernels $H > $L/reliability-bwd.log 2>&1; echo "reliability bwd rc=$? (${SECONDS}s)" >> /tmp/v11/rc.txt) &
wait
sort /tmp/v11/rc.txt | tee -a $R
grep -hE "\(bwd\): [0-9]+ passed|FAIL|shrunk|panick" $L/verify-debug.log | head -6 | tee -a $R
grep -E "^backward" $L/reliability-bwd.log | cut -c1-110 | tee -a $R
for v in base new; do B=$X; [ $v = base ] && B=$XB
  for c in "4,16,2048,128 off" "4,16,2048,128 on" "4,16,2048,64 off"; do set -- $c
    timeout 60 ncu -k regex:dq_convert -c 1 --metrics gpu__time_duration.sum $B bench-all --pass bwd --kernels $H --shape $1 --causal $2 --dtypes f16 --no-peers --quick --out-dir /tmp/bn > $L/ncu-$v-$1-$2.log 2>&1
    echo "convert $v $1 causal $2: $(grep gpu__time_duration $L/ncu-$v-$1-$2.log | sed 's/  */ /g')" | tee -a $R
  done
done
row() { grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| $H \| [0-9.]+ \| [0-9.]+ \|" $1/bench-bwd.md | cut -d'|' -f2,4,6 | tr '\n' ' ' | tee -a $R; echo | tee -a $R; }
S="--shape 8,16,1024,128 --shape 4,16,2048,128 --shape 1,16,16384,128 --shape 8,32,4096,128 --shape 4,16,2048,64 --shape 2,16,8192,64"
for pass in 1 2; do for v in base new; do SECONDS=0
  B=$X; [ $v = base ] && B=$XB
  timeout 200 $B bench-all --pass bwd --kernels $H $S --causal both --dtypes f16 --no-peers --out-dir /tmp/b-$v-$pass > $L/bench-$v-$pass.log 2>&1
  echo "$v pass $pass rc=$? (${SECONDS}s)" | tee -a $R; row /tmp/b-$v-$pass
done; done
cd /tmp && tar cJf $OUT/logs.tar.xz logs11
