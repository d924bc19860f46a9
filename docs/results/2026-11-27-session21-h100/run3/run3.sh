# Third run of session 21 (H100): the final tree. Its kernels are b707d95's (session 20's, whose
# PTX is session 19's); the decode suite now also times a cuBLAS GEMM in the suite's dtype and
# sets the peer target's TFLOP/s against it, beside the GB/s against the read probes.
# (0) ncu on the paged suite's decode case: the contiguous cache, block 16 with the pages in
#     order (run1-2: 1.05x contiguous on the same addresses) and shuffled (1.09-1.10x), to see
#     what the 16-row group loader costs; (1) the decode suite with every peer (SDPA flash,
#     cuDNN, FA3), the anchors, the copy, both read probes and the GEMM; (2) the mission suite
#     with the peers.
# Two calls (each under the 600 s limit): `ncu` is (0), `suites` (1) and (2).
# Needs in .carry/: xtask (this tree), flash_attn3_jax and einops wheels, anchors/.
# Run from the repo root: bash docs/results/2026-11-27-session21-h100/run3/run3.sh ncu|suites
PHASE=${1:-suites}
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run3-$PHASE.txt; L=/tmp/logs3-$PHASE; mkdir -p $L
pack() { cd /tmp && tar cJf $OUT/logs-$PHASE.tar.xz logs3-$PHASE; cd - > /dev/null; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
if [ $PHASE = ncu ]; then
SECONDS=0
S="--section SpeedOfLight --section WarpStateStats --section InstructionStats --section SchedulerStats --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy"
prof() { # name, case, env...
  local n=$1 c=$2; shift 2
  env "$@" timeout 120 ncu --kernel-name regex:attention_decode_split --launch-skip 20 --launch-count 2 --cache-control none --clock-control none $S \
    $X bench-all --suite paged --case $c --kernels persistent-hopper --no-peers --quick --out-dir $L/n-$n > $L/ncu-$n.txt 2>&1
  echo "ncu $n rc=$? (${SECONDS}s)" | tee -a $R
  grep -E "^  [A-Za-z].*(Duration|Executed Instructions |Issue Slots Busy|Memory Throughput|DRAM Throughput|Warp Cycles Per Issued|Stall Long Scoreboard|No Eligible|L1/TEX Hit|L2 Hit|Registers Per|Achieved Occupancy)" $L/ncu-$n.txt | head -26 | tee -a $R
}
prof contig decode/contig X=1
prof paged16-inorder decode/paged-16 FLASHCORE_BENCH_PAGE_ORDER=in-order
prof paged16 decode/paged-16 X=1
pack
exit 0
fi
pip install -q --no-deps --target /tmp/fa3pkg .carry/flash_attn3_jax-0.2.3-*.whl .carry/einops-*.whl > $L/pip.log 2>&1; echo "pip rc=$?" | tee -a $R
SECONDS=0
timeout 330 $X bench-all --suite decode --kernels persistent-hopper --fa3-path /tmp/fa3pkg --anchors .carry/anchors --out-dir $L/decode > $L/bench-decode.log 2>&1; echo "bench decode rc=$? (${SECONDS}s)" | tee -a $R
cp $L/decode/bench-decode.md $OUT/ 2>/dev/null
grep -E "^\| B=" $L/decode/bench-decode.md | cut -d'|' -f2,5-12 | sed 's/(decode[^)]*)//; s/(speculative[^)]*)//; s/(chunked[^)]*)//' | cut -c1-200 | tee -a $R
sed -n '/### Read probes/,/^read probe\|^## All/p' $L/decode/bench-decode.md | head -16 | tee -a $R
grep -A14 "Is 1.05" $L/decode/bench-decode.md | tail -11 | cut -d'|' -f2,4,5,9,10,11,12,13,14 | tee -a $R
grep "^GEMM:" $L/decode/bench-decode.md | tee -a $R
pack
SECONDS=0
timeout 120 $X bench-all --suite mission --causal both --kernels persistent-hopper --fa3-path /tmp/fa3pkg --out-dir $L/mission > $L/mission.log 2>&1
echo "== mission suite with peers: rc=$? (${SECONDS}s)" | tee -a $R
cp $L/mission/bench-all.md $OUT/bench-mission.md 2>/dev/null
grep -E "^\| 1,8,512,64 \| f16 \| (no|yes) \| [a-z]" $L/mission/bench-all.md | cut -d'|' -f2-8,10 | tee -a $R
pack
