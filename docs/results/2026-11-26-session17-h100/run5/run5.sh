# Fifth run of session 17 (H100): the softmax's row max and row sum in four independent partials
# each (one running value a row made chains of BN / 8 dependent instructions; run3's stall samples
# in the softmax were "wait", not the math pipe). run4's fence before the PV wait is reverted.
# (1) A/B, alternating twice: .carry/xtask-base (db93483's kernels + the trace switch) against
#     .carry/xtask (this tree): the mission suite (graph replay, both masks, SDPA peers in the same
#     invocation), then the prefill ladder (no peers; both masks);
# (2) the mission with FLASHCORE_HOPPER_PINGPONG=0 (the new tree), and the timeline build on it;
# (3) verify --cases 500 with the new kernels.
# Run from the repo root: bash docs/results/2026-11-26-session17-h100/run5/run5.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run5.txt; L=/tmp/logs5; mkdir -p $L
pack() { cd /tmp && tar cJf $OUT/logs.tar.xz logs5; cd - > /dev/null; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
for round in 1 2; do
  for b in base new; do
    x=.carry/xtask; [ $b = base ] && x=.carry/xtask-base
    SECONDS=0
    timeout 100 $x bench-all --suite mission --causal both --kernels persistent-hopper --out-dir $L/m-$b-$round > $L/m-$b-$round.log 2>&1
    echo "== mission $b round $round: rc=$? (${SECONDS}s)" | tee -a $R
    grep -E "^\| 1,8,512,64 \| f16 \| (no|yes) \| (persistent-hopper|sdpa_cudnn|launch[^|]*) \| [a-z]" $L/m-$b-$round/bench-all.md | cut -d'|' -f2-8 | tee -a $R
    SECONDS=0
    timeout 150 $x bench-all --suite ladder --causal both --kernels persistent-hopper --no-peers --out-dir $L/l-$b-$round > $L/l-$b-$round.log 2>&1
    echo "== ladder $b round $round: rc=$? (${SECONDS}s)" | tee -a $R
    grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| persistent-hopper \| [a-z]" $L/l-$b-$round/bench-all.md | cut -d'|' -f2-8 | tee -a $R
    pack
  done
done
SECONDS=0
FLASHCORE_HOPPER_PINGPONG=0 timeout 100 $X bench-all --suite mission --causal both --kernels persistent-hopper --no-peers --out-dir $L/m-nopp > $L/m-nopp.log 2>&1
echo "== mission new, FLASHCORE_HOPPER_PINGPONG=0: rc=$? (${SECONDS}s)" | tee -a $R
grep -E "^\| 1,8,512,64 \| f16 \| (no|yes) \| persistent-hopper \| [a-z]" $L/m-nopp/bench-all.md | cut -d'|' -f2-8 | tee -a $R
FLASHCORE_HOPPER_TRACE=1 timeout 100 $X bench-all --shape 1,8,512,64 --causal off --kernels persistent-hopper --no-peers --repeats 3 --max-seconds-per-shape 1 --out-dir $L/trace > $L/trace.log 2>&1
echo "== trace mission: rc=$?" | tee -a $R
grep "fwd-trace" $L/trace.log | grep "cta 0 " | tee -a $R
SECONDS=0
timeout 200 $X verify --kernels persistent-hopper --cases 500 --seed 1705 > $L/verify.log 2>&1; echo "verify rc=$? (${SECONDS}s): $(grep -h 'passed, ' $L/verify.log | tail -1)" | tee -a $R
pack
