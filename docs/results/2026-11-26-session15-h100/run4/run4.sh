# Fourth run of session 15 (H100): the Hopper forward's 176-key tiles (the dense non-causal D = 128
# build) for inference-mode problems on strided K/V (contiguous caches, packed varlen) while their
# items fit one round; paged caches and the modes build's dynamic schedule keep 128.
# (1) correctness: verify --cases 1000 on persistent-hopper (its mode cases now reach the wide
#     build), reliability --only modes,nonfinite,oob, sanitize --pass fwd;
# (2) the chunked-prefill decode row (contiguous, paged 64, dense, dense bhsd), this tree against
#     the baseline (a0f4835), alternated twice, no peers.
# Needs in .carry/: xtask (this tree), xtask-base (a0f4835).
# Run from the repo root: bash docs/results/2026-11-26-session15-h100/run4/run4.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; X=.carry/xtask; B=.carry/xtask-base; R=$OUT/run4.txt; L=/tmp/logs4; mkdir -p $L /tmp/v4
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
(timeout 420 $X verify --kernels persistent-hopper --cases 1000 --seed 1504 > $L/verify.log 2>&1; echo "verify rc=$? (${SECONDS}s)" >> /tmp/v4/rc.txt) &
(timeout 300 $X reliability --only modes,nonfinite,oob --kernels persistent-hopper > $L/reliability.log 2>&1; echo "reliability rc=$? (${SECONDS}s)" >> /tmp/v4/rc.txt) &
(timeout 300 $X sanitize --pass fwd --kernels persistent-hopper > $L/sanitize.log 2>&1; echo "sanitize rc=$? (${SECONDS}s)" >> /tmp/v4/rc.txt) &
wait
sort /tmp/v4/rc.txt | tee -a $R
grep -h 'passed, ' $L/verify.log | tail -1 | tee -a $R
grep -h -B1 -A4 "FAIL\|shrunk" $L/verify.log | head -20 | tee -a $R
grep -E "^(modes|nonfinite|oob)|reliability:" $L/reliability.log | cut -c1-140 | tee -a $R
grep -hE "^\| persistent|^sanitize: no|errors" $L/sanitize.log | grep "^|\|^sanitize" | tee -a $R
for rep in 1 2; do for v in new base; do
  bin=$X; [ $v = base ] && bin=$B
  SECONDS=0
  timeout 100 $bin bench-all --suite decode --kernels persistent-hopper --no-peers --case sq128 --out-dir $L/$v$rep > $L/bench-$v$rep.log 2>&1
  echo "chunk $v rep $rep rc=$? (${SECONDS}s): $(grep -E '^\| B=' $L/$v$rep/bench-decode.md | cut -d'|' -f5,6 | tr '\n' ' ' | tr -s ' ')" | tee -a $R
done; done
cd /tmp && tar cJf $OUT/logs.tar.xz logs4
