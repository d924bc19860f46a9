# Fourth run of session 21 (H100): where the decode kernel's 16-row group loader spends its time.
# ncu's source view (per SASS instruction: executed instructions and warp stall samples) of the
# paged suite's decode case, contiguous against block 16 with the pages in order (the same
# addresses), one launch each; the CSVs are analysed off the machine.
# Needs .carry/xtask (the final tree, 6429a75). From the repo root:
#   bash docs/results/2026-11-27-session21-h100/run4/run4.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run4.txt; L=/tmp/logs4; mkdir -p $L
pack() { cd /tmp && tar cJf $OUT/logs.tar.xz logs4; cd - > /dev/null; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
prof() { # name, case, env...
  local n=$1 c=$2; shift 2
  env "$@" timeout 150 ncu --kernel-name regex:attention_decode_split --launch-skip 20 --launch-count 1 --cache-control none --clock-control none \
    --section SourceCounters --section WarpStateStats --section SpeedOfLight --import-source no -o $L/rep-$n \
    $X bench-all --suite paged --case $c --kernels persistent-hopper --no-peers --quick --out-dir $L/n-$n > $L/ncu-$n.log 2>&1
  echo "ncu $n rc=$? (${SECONDS}s)" | tee -a $R
  ncu --import $L/rep-$n.ncu-rep --page source --csv --print-source sass > $L/source-$n.csv 2> $L/source-$n.err
  echo "source $n rc=$? lines $(wc -l < $L/source-$n.csv)" | tee -a $R
  ncu --import $L/rep-$n.ncu-rep --page details > $L/details-$n.txt 2>&1
  grep -E "Duration|Warp Cycles Per Issued" $L/details-$n.txt | tee -a $R
}
prof contig decode/contig X=1
prof paged16-inorder decode/paged-16 FLASHCORE_BENCH_PAGE_ORDER=in-order
head -3 $L/source-contig.csv | cut -c1-600 | tee -a $R
pack
