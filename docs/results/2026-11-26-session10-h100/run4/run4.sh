# Fourth run of session 10 (H100): the wide portable backward with 4 warps a block (two blocks an
# SM) against 8 (one) and the 16-row kernels, tree after b224eef with FC_BWD_WARPS:
# (1) verify --pass bwd --cases 300 with FLASHCORE_PORTABLE_BWD_WARPS=4;
# (2) ncu kernel times of the three launches per configuration, (4,16,2048,{64,128}) non-causal;
# (3) bench-all, no peers, the issue-14 shapes causal and not, alternated twice.
# Run from the repo root: bash docs/results/2026-11-26-session10-h100/run4/run4.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=$PWD/.carry/xtask; R=$OUT/run4.txt; L=/tmp/logs4; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
FLASHCORE_PORTABLE_BWD_WARPS=4 timeout 150 $X verify --pass bwd --kernels persistent-portable --cases 300 --seed 10401 > $L/verify-w4.log 2>&1; echo "verify w4 rc=$? (${SECONDS}s)" | tee -a $R
grep -hE "passed, |FAIL|shrunk" $L/verify-w4.log | tail -3 | tee -a $R
cfg() { case $1 in narrow) echo "FLASHCORE_PORTABLE_BWD_TILES=narrow";; w8) echo "FLASHCORE_PORTABLE_BWD_WARPS=8";; w4) echo "FLASHCORE_PORTABLE_BWD_WARPS=4";; esac; }
for d in 128 64; do for c in narrow w8 w4; do
  env $(cfg $c) timeout 60 ncu -k regex:bwd_portable_d -c 3 --metrics gpu__time_duration.sum $X bench-all --pass bwd --kernels persistent-portable --shape 4,16,2048,$d --causal off --dtypes f16 --no-peers --quick --out-dir /tmp/n$c$d > $L/ncu-$c-$d.log 2>&1
  echo "ncu D=$d $c: $(grep -E 'bwd_portable_d|gpu__time' $L/ncu-$c-$d.log | sed 's/  */ /g' | awk '/bwd_portable/{k=$1} /gpu__time/{printf "%s %s %s; ", k, $3, $2}')" | tee -a $R
done; done
S="--shape 4,16,2048,64 --shape 4,16,2048,128 --shape 1,16,16384,128 --shape 8,32,4096,128"
for pass in 1 2; do for c in narrow w8 w4; do
  SECONDS=0
  env $(cfg $c) timeout 100 $X bench-all --pass bwd --kernels persistent-portable $S --causal both --dtypes f16 --no-peers --out-dir /tmp/p$c$pass > $L/portable-$c-$pass.log 2>&1; echo "portable $c pass $pass rc=$? (${SECONDS}s)" | tee -a $R
  grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| persistent-portable \| [0-9.]+ \| [0-9.]+ \|" /tmp/p$c$pass/bench-bwd.md | head -8 | cut -d'|' -f2-7 | sed "s/^/$c-$pass |/" | tee -a $R
done; done
cd /tmp && tar cJf $OUT/logs.tar.xz logs4
