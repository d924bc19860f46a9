# Sixth run of session 10 (H100): the portable backward at head_dim <= 64 on 32-row warp tiles
# with P and dS in registers (4 warps of 32 keys a block; dQ with 32 rows a warp).
# (1) verify --pass bwd --cases 1000, reliability --only backward, sanitize --pass bwd (portable);
# (2) same-run A/B against the 16-row kernels (FLASHCORE_PORTABLE_BWD_TILES=narrow), no peers,
#     the D = 64 rows causal and not, alternated twice; then ncu kernel times at (4,16,2048,64).
# Run from the repo root: bash docs/results/2026-11-26-session10-h100/run6/run6.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=$PWD/.carry/xtask; R=$OUT/run6.txt; L=/tmp/logs6; mkdir -p $L /tmp/v6
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
(timeout 300 $X verify --pass bwd --kernels persistent-portable --cases 1000 --seed 10601 > $L/verify-bwd.log 2>&1; echo "verify bwd rc=$? (${SECONDS}s)" >> /tmp/v6/rc.txt) &
(timeout 300 $X reliability --only backward --kernels persistent-portable > $L/reliability-bwd.log 2>&1; echo "reliability bwd rc=$? (${SECONDS}s)" >> /tmp/v6/rc.txt) &
(timeout 300 $X sanitize --pass bwd --kernels persistent-portable --logs /tmp/san6 > $L/sanitize-bwd.log 2>&1; echo "sanitize bwd rc=$? (${SECONDS}s)" >> /tmp/v6/rc.txt) &
wait
sort /tmp/v6/rc.txt | tee -a $R
grep -hE "\(bwd\): [0-9]+ passed|FAIL|shrunk" $L/verify-bwd.log | tail -4 | tee -a $R
grep -E "^backward" $L/reliability-bwd.log | cut -c1-110 | tee -a $R
grep -hE "^\| persistent|^sanitize: no|errors" $L/sanitize-bwd.log | grep -v "^sanitize: /" | grep "^|\|^sanitize" | tee -a $R
S="--shape 4,16,2048,64 --shape 2,16,8192,64"
for pass in 1 2; do for t in narrow wide; do
  SECONDS=0
  FLASHCORE_PORTABLE_BWD_TILES=$t timeout 60 $X bench-all --pass bwd --kernels persistent-portable $S --causal both --dtypes f16 --no-peers --out-dir /tmp/p$t$pass > $L/portable-$t-$pass.log 2>&1; echo "portable $t pass $pass rc=$? (${SECONDS}s)" | tee -a $R
  grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| persistent-portable \| [0-9.]+ \| [0-9.]+ \|" /tmp/p$t$pass/bench-bwd.md | head -4 | cut -d'|' -f2-7 | sed "s/^/$t-$pass |/" | tee -a $R
done; done
for t in narrow wide; do
  FLASHCORE_PORTABLE_BWD_TILES=$t timeout 60 ncu -k regex:bwd_portable_d -c 3 --metrics gpu__time_duration.sum $X bench-all --pass bwd --kernels persistent-portable --shape 4,16,2048,64 --causal off --dtypes f16 --no-peers --quick --out-dir /tmp/n$t > $L/ncu-$t.log 2>&1
  echo "ncu D=64 $t: $(grep -E 'bwd_portable_d|gpu__time' $L/ncu-$t.log | sed 's/  */ /g' | awk '/bwd_portable/{k=$1} /gpu__time/{printf "%s %s %s; ", k, $3, $2}')" | tee -a $R
done
cd /tmp && tar cJf $OUT/logs.tar.xz logs6
