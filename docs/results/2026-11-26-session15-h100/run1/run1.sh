# First run of session 15 (H100): the decode kernel merges its splits in the same launch (the
# last split of a unit to arrive combines, in split order) and reads a whole page's block-table
# entry a tile ahead of its copy. (1) correctness first: verify through the forced decode kernel
# with a split count drawn per case (300 cases, Hopper), 1000x determinism of the decode plan,
# sanitize with 4 forced splits; (2) the decode suite without peers, this tree against the
# baseline (a0f4835, whose decode kernel is 7ae20f9's), alternated twice.
# Needs in .carry/: xtask (this tree), xtask-base (a0f4835).
# Run from the repo root: bash docs/results/2026-11-26-session15-h100/run1/run1.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; X=.carry/xtask; B=.carry/xtask-base; R=$OUT/run1.txt; L=/tmp/logs1; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
FLASHCORE_DECODE=force FLASHCORE_DECODE_SPLITS=sweep timeout 200 $X verify --kernels persistent-hopper --cases 300 --seed 151 > $L/verify-sweep.log 2>&1
echo "verify sweep rc=$? (${SECONDS}s): $(grep -h 'passed, ' $L/verify-sweep.log | tail -1)" | tee -a $R
grep -h -B1 -A4 "FAIL\|shrunk" $L/verify-sweep.log | head -20 | tee -a $R
SECONDS=0
timeout 120 $X reliability --only determinism --kernels persistent-hopper > $L/determinism.log 2>&1
echo "determinism rc=$? (${SECONDS}s)" | tee -a $R; grep -i "decode\|PASS\|FAIL" $L/determinism.log | head -8 | tee -a $R
SECONDS=0
FLASHCORE_DECODE=force FLASHCORE_DECODE_SPLITS=4 timeout 200 $X sanitize --pass fwd --kernels persistent-hopper > $L/sanitize.log 2>&1
echo "sanitize rc=$? (${SECONDS}s)" | tee -a $R; grep -iE "errors|summary|PASS|FAIL" $L/sanitize.log | tail -6 | tee -a $R
for rep in 1 2; do for v in new base; do
  bin=$X; [ $v = base ] && bin=$B
  SECONDS=0
  timeout 120 $bin bench-all --suite decode --kernels persistent-hopper --no-peers --out-dir $L/$v$rep > $L/bench-$v$rep.log 2>&1
  echo "bench $v rep $rep rc=$? (${SECONDS}s)" | tee -a $R
done; done
echo "| row | storage | new1 | base1 | new2 | base2 |" | tee -a $R
paste -d'|' <(grep -E "^\| B=" $L/new1/bench-decode.md | grep -v dense | cut -d'|' -f2,5,6) \
  <(grep -E "^\| B=" $L/base1/bench-decode.md | grep -v dense | cut -d'|' -f6) \
  <(grep -E "^\| B=" $L/new2/bench-decode.md | grep -v dense | cut -d'|' -f6) \
  <(grep -E "^\| B=" $L/base2/bench-decode.md | grep -v dense | cut -d'|' -f6) | sed 's/(decode[^)]*)//; s/(speculative[^)]*)//; s/(chunked[^)]*)//' | cut -c1-200 | tee -a $R
cd /tmp && tar cJf $OUT/logs.tar.xz logs1
