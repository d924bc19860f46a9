# Third run of session 17 (H100): why a key tile takes ~2700 cycles a warpgroup at the mission
# shape (run2's timeline: ~1300 from issuing QK^T to S, ~1100 of softmax, against ~256 cycles of
# tensor work for that QK^T).
# (1) ncu source counters (stall samples on each SASS line) of one mission launch, non-causal, and
#     of one launch of the ladder's 4,16,2048,128 non-causal (the steady state, for comparison);
# (2) the timeline build on the ladder row again (run2's printed nothing: the launch count gate,
#     fixed), for its in-loop stamps.
# Needs in .carry/: xtask (this tree; its default builds' PTX is db93483's). Run from the repo root:
#   bash docs/results/2026-11-26-session17-h100/run3/run3.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run3.txt; L=/tmp/logs3; mkdir -p $L
pack() { cd /tmp && tar cJf $OUT/logs.tar.xz logs3; cd - > /dev/null; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
FLASHCORE_HOPPER_TRACE=1 timeout 120 $X bench-all --shape 4,16,2048,128 --causal off --kernels persistent-hopper --no-peers --repeats 3 --max-seconds-per-shape 1 --out-dir $L/trace > $L/trace.log 2>&1
echo "== trace 4,16,2048,128 non-causal: rc=$?" | tee -a $R
grep "fwd-trace" $L/trace.log | grep -E "cta 0 |unit [01] " | head -80 | tee -a $R
pack
prof() {  # name, bench-all arguments
  n=$1; shift; SECONDS=0
  timeout 200 ncu -k regex:attention_persistent_hopper -s 30 -c 1 --section SourceCounters --section WarpStateStats --section InstructionStats --section ComputeWorkloadAnalysis --section SpeedOfLight -o $L/$n $X bench-all "$@" --kernels persistent-hopper --no-peers --quick --out-dir /tmp/bn > $L/ncu-$n.log 2>&1
  echo "== ncu $n rc=$? (${SECONDS}s)" | tee -a $R
  ncu -i $L/$n.ncu-rep --page source --csv --print-source sass > $L/$n-sass.csv 2>&1
  ncu -i $L/$n.ncu-rep --page details --csv > $L/$n-details.csv 2>&1
  grep -E '"(Duration|SM Frequency|Compute \(SM\) Throughput|Executed Ipc Active|Issue Slots Busy|No Eligible|Active Warps Per Scheduler|Warp Cycles Per Issued Instruction)"' $L/$n-details.csv | cut -d, -f13- | head -12 | tee -a $R
  python3 - "$L/$n-sass.csv" <<'PY' | tee -a $R
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
hi = next(i for i, r in enumerate(rows) if r and r[0] == 'Address')
h = rows[hi]; data = [r for r in rows[hi + 1:] if len(r) == len(h)]
def num(x):
    try: return float(x.replace(',', ''))
    except ValueError: return 0.0
stall = [c for c in h if c.startswith('stall_') and 'Not Issued' not in c]
allc = h.index('Warp Stall Sampling (All Samples)'); src = h.index('Source')
total = sum(num(r[allc]) for r in data) or 1
tot = {c: sum(num(r[h.index(c)]) for r in data) for c in stall}
print(f"samples {total:.0f}; by reason (% of samples):")
print("  " + ", ".join(f"{c[6:]} {100 * v / total:.1f}" for c, v in sorted(tot.items(), key=lambda x: -x[1]) if v > 0))
kinds = {}
for r in data:
    w = r[src].split(); op = w[0] if w else '?'
    if op.startswith('@') and len(w) > 1: op = w[1]
    kinds[op.split('.')[0]] = kinds.get(op.split('.')[0], 0) + num(r[allc])
print("by opcode (% of samples): " + ", ".join(f"{k} {100 * v / total:.1f}" for k, v in sorted(kinds.items(), key=lambda x: -x[1])[:14]))
for r in sorted(data, key=lambda r: -num(r[allc]))[:20]: print(f"{100 * num(r[allc]) / total:5.2f}% {r[0]} {r[src][:70]}")
PY
  pack
}
prof mission --shape 1,8,512,64 --causal off
prof ladder128 --shape 4,16,2048,128 --causal off
