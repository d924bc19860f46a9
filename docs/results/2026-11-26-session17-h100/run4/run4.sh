# Fourth run of session 17 (H100): the softmax back under the PV wgmma. ptxas had scheduled the
# loop's wgmma.wait_group 0 (PV_{j-1} done) above the softmax of S_j in every overlap build
# (run3's SASS: the samples pile up on that wait, the softmax runs after it); a CTA-scope fence
# before the wait keeps the softmax above it (the SASS of all 40 forward builds, checked here).
# (1) A/B, alternating twice: .carry/xtask-base (db93483's kernels + the trace switch) against
#     .carry/xtask (this tree): the mission suite (graph replay, both masks, SDPA peers in the same
#     invocation), then the prefill ladder (no peers; both masks);
# (2) the timeline build on the mission shape (in-loop stamps);
# (3) verify --cases 500 with the new kernels.
# Run from the repo root: bash docs/results/2026-11-26-session17-h100/run4/run4.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run4.txt; L=/tmp/logs4; mkdir -p $L
pack() { cd /tmp && tar cJf $OUT/logs.tar.xz logs4; cd - > /dev/null; }
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
FLASHCORE_HOPPER_TRACE=1 timeout 100 $X bench-all --shape 1,8,512,64 --causal off --kernels persistent-hopper --no-peers --repeats 3 --max-seconds-per-shape 1 --out-dir $L/trace > $L/trace.log 2>&1
echo "== trace mission: rc=$?" | tee -a $R
grep "fwd-trace" $L/trace.log | grep "cta 0 " | tee -a $R
SECONDS=0
timeout 200 $X verify --kernels persistent-hopper --cases 500 --seed 1704 > $L/verify.log 2>&1; echo "verify rc=$? (${SECONDS}s): $(grep -h 'passed, ' $L/verify.log | tail -1)" | tee -a $R
pack
