# Sixth run of session 17 (H100): the timeline again, rebuilt so that it does not change the
# kernel it times. runs 1-5's traced builds had a printf in the kernel, and ptxas serialized their
# wgmma pipeline (C7510, which check-kernels now fails on); their in-loop stamps also moved the
# softmax. Now the stamps go to a module variable, a one-thread second launch prints them, and
# there are no stamps in the key loop (the traced builds' loops schedule like the default ones:
# sass/softmax_vs_pv_wait.py).
# (1) traced and untraced, same run: the mission shape (graph replay), (1,8,128,64) (one key tile a
#     CTA) and the ladder's (4,16,2048,128) non-causal;
# (2) verify --cases 60 through the traced plan (kernel + printer), to show the two-launch plan
#     is correct.
# Run from the repo root: bash docs/results/2026-11-26-session17-h100/run6/run6.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run6.txt; L=/tmp/logs6; mkdir -p $L
pack() { cd /tmp && tar cJf $OUT/logs.tar.xz logs6; cd - > /dev/null; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
for c in "1,8,512,64 off" "1,8,512,64 on" "1,8,128,64 off" "4,16,2048,128 off"; do
  set -- $c; n=$(echo $1 | tr , _)_$2
  for t in 0 1; do
    FLASHCORE_HOPPER_TRACE=$t timeout 120 $X bench-all --shape $1 --causal $2 --kernels persistent-hopper --no-peers --out-dir $L/$n-$t > $L/$n-$t.log 2>&1
    echo "== $1 causal $2, FLASHCORE_HOPPER_TRACE=$t: rc=$?" | tee -a $R
    grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| persistent-hopper \| [a-z]" $L/$n-$t/bench-all.md | cut -d'|' -f2-8 | tee -a $R
  done
  grep "fwd-trace" $L/$n-1.log | tee -a $R
  pack
done
SECONDS=0
FLASHCORE_HOPPER_TRACE=1 timeout 200 $X verify --kernels persistent-hopper --cases 60 --seed 1706 > $L/verify.log 2>&1; echo "verify (traced plan) rc=$? (${SECONDS}s): $(grep -h 'passed, ' $L/verify.log | tail -1)" | tee -a $R
pack
