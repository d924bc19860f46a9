# Sixth run of session 13 (H100). This tree: (a) the producer issues a stage's Q/dO copies before it
# loads the stage's LSE and D (mbarrier.expect_tx, then the 32 lanes arrive after their stats);
# (b) one consumer thread prefetches the next unit's K, V and first Q/dO block into L2 as a unit's
# K and V land (FLASHCORE_HOPPER_BWD_PREFETCH=1, the default; only persistent plans, i.e. without
# causal masking, have a next unit). .carry/xtask-r3 = run3's binary (neither change).
# (1) in parallel: verify --pass bwd on persistent-hopper with FLASHCORE_HOPPER_DEBUG=1 (defaults),
#     and the same with the prefetch off;
# (2) bench, no peers, alternated twice: r3, this tree with the prefetch off, this tree.
# Run from the repo root: bash docs/results/2026-11-26-session13-h100/run6/run6.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=$PWD/.carry/xtask; X3=$PWD/.carry/xtask-r3; R=$OUT/run6.txt; L=/tmp/logs6; mkdir -p $L /tmp/v6
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
H=persistent-hopper
SECONDS=0
(FLASHCORE_HOPPER_DEBUG=1 timeout 240 $X verify --pass bwd --kernels $H --cases 250 --seed 13601 > $L/verify-debug.log 2>&1; echo "verify debug rc=$? (${SECONDS}s)" >> /tmp/v6/rc.txt) &
(FLASHCORE_HOPPER_DEBUG=1 FLASHCORE_HOPPER_BWD_PREFETCH=0 timeout 240 $X verify --pass bwd --kernels $H --cases 150 --seed 13602 > $L/verify-debug-nopf.log 2>&1; echo "verify debug no prefetch rc=$? (${SECONDS}s)" >> /tmp/v6/rc.txt) &
wait
sort /tmp/v6/rc.txt | tee -a $R
grep -hE "\(bwd\): [0-9]+ passed|FAIL|shrunk|panick" $L/verify-debug.log $L/verify-debug-nopf.log | head -12 | tee -a $R
row() { grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| $H \| [0-9.]+ \| [0-9.]+ \|" $1/bench-bwd.md | cut -d'|' -f2,4,6 | tr '\n' ' ' | tee -a $R; echo | tee -a $R; }
S="--shape 8,16,1024,128 --shape 4,16,2048,128 --shape 1,16,8192,128 --shape 8,32,4096,128 --shape 4,16,2048,64 --shape 2,16,8192,64"
for pass in 1 2; do for v in r3 nopf new; do SECONDS=0
  B=$X; PF=1; [ $v = r3 ] && B=$X3; [ $v = nopf ] && PF=0
  FLASHCORE_HOPPER_BWD_PREFETCH=$PF timeout 150 $B bench-all --pass bwd --kernels $H $S --causal off --dtypes f16 --no-peers --out-dir /tmp/b-$v-$pass > $L/bench-$v-$pass.log 2>&1
  echo "$v pass $pass rc=$? (${SECONDS}s)" | tee -a $R; row /tmp/b-$v-$pass
done; done
S="--shape 4,16,2048,128 --shape 4,16,2048,64"
for pass in 1 2; do for v in r3 new; do SECONDS=0
  B=$X; [ $v = r3 ] && B=$X3
  timeout 100 $B bench-all --pass bwd --kernels $H $S --causal on --dtypes f16 --no-peers --out-dir /tmp/c-$v-$pass > $L/bench-causal-$v-$pass.log 2>&1
  echo "causal $v pass $pass rc=$? (${SECONDS}s)" | tee -a $R; row /tmp/c-$v-$pass
done; done
cd /tmp && tar cJf $OUT/logs.tar.xz logs6
