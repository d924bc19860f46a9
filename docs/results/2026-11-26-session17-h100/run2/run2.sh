# Second run of session 17 (H100): the producer issues a unit's first K before its Q.
# (1) the timeline build again, with stamps inside the key loop (units 0 and 1), on the ladder's
#     4,16,2048,128 non-causal and the mission shape;
# (2) A/B, alternating twice: .carry/xtask-base (db93483's kernels + the trace switch, PTX of the
#     default builds unchanged) against .carry/xtask (this tree), on 4,16,2048,128 both masks
#     and 4,16,2048,64 non-causal, with SDPA's flash and cuDNN in the same invocation;
# (3) verify --cases 500 with the new kernels.
# Run from the repo root: bash docs/results/2026-11-26-session17-h100/run2/run2.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run2.txt; L=/tmp/logs2; mkdir -p $L
pack() { cd /tmp && tar cJf $OUT/logs.tar.xz logs2; cd - > /dev/null; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
for c in "4,16,2048,128 off" "1,8,512,64 off"; do
  set -- $c; n=trace_$(echo $1 | tr , _)_$2
  FLASHCORE_HOPPER_TRACE=1 timeout 120 $X bench-all --shape $1 --causal $2 --kernels persistent-hopper --repeats 3 --max-seconds-per-shape 1 --out-dir $L/$n > $L/$n.log 2>&1
  echo "== trace $1 causal $2: rc=$?" | tee -a $R
  grep "fwd-trace cta 0 " $L/$n.log | head -60 | tee -a $R
done
pack
for round in 1 2; do
  for b in base new; do
    x=.carry/xtask; [ $b = base ] && x=.carry/xtask-base
    for c in "4,16,2048,128 both" "4,16,2048,64 off"; do
      set -- $c; n=ab_${b}_${round}_$(echo $1 | tr , _)_$2
      SECONDS=0
      timeout 150 $x bench-all --shape $1 --causal $2 --kernels persistent-hopper --out-dir $L/$n > $L/$n.log 2>&1
      echo "== $b round $round $1 causal $2: rc=$? (${SECONDS}s)" | tee -a $R
      grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| (persistent-hopper|sdpa_flash|sdpa_cudnn) \| [a-z]" $L/$n/bench-all.md | cut -d"|" -f2-8 | tee -a $R
    done
    pack
  done
done
SECONDS=0
timeout 200 $X verify --kernels persistent-hopper --cases 500 --seed 1701 > $L/verify.log 2>&1; echo "verify rc=$? (${SECONDS}s): $(grep -h 'passed, ' $L/verify.log | tail -1)" | tee -a $R
pack
