# First run of session 18 (H100): key-split warpgroups (FC_HOPPER_WG_KEY_SPLIT, off by default in
# this tree, forced with FLASHCORE_HOPPER_WG_KEY_SPLIT=1): both consumer warpgroups on one 64-row
# q tile, each every other key tile, merged in shared memory.
# (0) smoke: verify --cases 60 forced on, with bounded mbarrier waits (FLASHCORE_HOPPER_DEBUG=1);
#     stop here if it fails;
# (1) the mission shape (graph replay, both masks, no peers), alternating twice: off, on, on with a
#     4-deep ring, on without ping-pong;
# (2) correctness forced on: verify --cases 1000, sanitize (forward), reliability determinism.
# Run from the repo root: bash docs/results/2026-11-26-session18-h100/run1/run1.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run1.txt; L=/tmp/logs1; mkdir -p $L /tmp/v1
pack() { cd /tmp && tar cJf $OUT/logs.tar.xz logs1; cd - > /dev/null; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
FLASHCORE_HOPPER_WG_KEY_SPLIT=1 FLASHCORE_HOPPER_DEBUG=1 timeout 150 $X verify --kernels persistent-hopper --cases 60 --seed 1801 > $L/smoke.log 2>&1
rc=$?
echo "== smoke (key split forced, debug waits): rc=$rc (${SECONDS}s): $(grep -h 'passed, ' $L/smoke.log | tail -1)" | tee -a $R
if [ $rc != 0 ]; then grep -h -B2 -A8 "FAIL\|shrunk\|trap\|error" $L/smoke.log | head -40 | tee -a $R; pack; exit 1; fi
m() {  # label, env...
  label=$1; shift
  env "$@" timeout 100 $X bench-all --suite mission --causal both --kernels persistent-hopper --no-peers --out-dir $L/m-$label > $L/m-$label.log 2>&1
  echo "== mission $label ($*): rc=$?" | tee -a $R
  grep -E "^\| 1,8,512,64 \| f16 \| (no|yes) \| (persistent-hopper|launch[^|]*) \| [a-z]" $L/m-$label/bench-all.md | cut -d'|' -f2-8 | tee -a $R
}
for round in 1 2; do
  m off-$round FLASHCORE_HOPPER_WG_KEY_SPLIT=0
  m on-$round FLASHCORE_HOPPER_WG_KEY_SPLIT=1
  m on4-$round FLASHCORE_HOPPER_WG_KEY_SPLIT=1 FLASHCORE_HOPPER_STAGES=4
  m onnopp-$round FLASHCORE_HOPPER_WG_KEY_SPLIT=1 FLASHCORE_HOPPER_PINGPONG=0
done
pack
SECONDS=0
run() { name=$1; shift; (env FLASHCORE_HOPPER_WG_KEY_SPLIT=1 "$@" > $L/$name.log 2>&1; echo "$name rc=$? (${SECONDS}s)" >> /tmp/v1/rc.txt) & }
run verify timeout 330 $X verify --kernels persistent-hopper --cases 1000 --seed 1802
run reliability timeout 330 $X reliability --only determinism --kernels persistent-hopper
run sanitize timeout 330 $X sanitize --pass fwd --kernels persistent-hopper
wait
sort /tmp/v1/rc.txt | tee -a $R
echo "verify: $(grep -h 'passed, ' $L/verify.log | tail -1)" | tee -a $R
grep -h -B1 -A6 "FAIL\|shrunk" $L/verify.log | head -24 | tee -a $R
grep -E "^[a-z]+ +persistent|reliability:" $L/reliability.log | cut -c1-120 | tee -a $R
grep -hE "^\| persistent|^sanitize: no|errors" $L/sanitize.log | grep "^|\|^sanitize" | tee -a $R
pack
