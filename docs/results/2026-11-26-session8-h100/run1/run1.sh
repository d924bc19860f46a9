# First run of session 8. (1) The mission causal regression: the dense Hopper build's LSE offset
# without the cu_seqlens_q test (block_lse_offset). bench-all --suite mission (no peers, graph
# replay) on 3d690b3 (.carry/xtask-old, before the modes), 13cf0d5 (.carry/xtask-base) and the
# candidate (.carry/xtask), alternated three times. (2) ncu, one launch each, SASS pages with stall
# columns exported: tile64 on the paged suite's chunk and prefill cases, contiguous against
# paged-256 (the 1.14x nobody has explained); the Hopper path on chunk/contig and chunk/paged-16.
# (3) verify --cases 300 on the Hopper path (the LSE offset change).
# Run from the repo root: bash docs/results/2026-11-26-session8-h100/run1/run1.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; R=$OUT/run1.txt; L=/tmp/logs; mkdir -p $L /tmp/rep
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
for i in 1 2 3; do for b in xtask-old xtask-base xtask; do
  timeout 60 .carry/$b bench-all --suite mission --kernels persistent-hopper --no-peers --out-dir /tmp/m-$b-$i > $L/mission-$b-$i.log 2>&1; echo "mission $b $i rc=$?" | tee -a $R
  grep -E "^\| 1,8,512,64 \| f16 \| (no|yes) \| persistent-hopper \| graph" /tmp/m-$b-$i/bench-all.md | cut -d'|' -f4,7 | tr '\n' ' ' | tee -a $R; echo | tee -a $R
done; done
prof() { # name kernel-regex kernel case
  timeout 120 ncu --kernel-name regex:$2 --launch-skip 2 --launch-count 1 --set full --import-source no -f -o /tmp/rep/$1 \
    .carry/xtask bench-all --suite paged --case $4 --kernels $3 --no-peers --quick --check-rows 64 --out-dir /tmp/b-$1 > $L/ncu-$1.log 2>&1
  echo "ncu $1 rc=$?" | tee -a $R
}
prof t64-chunk-contig attention_tile64 tile64 chunk/contig
prof t64-chunk-p256 attention_tile64 tile64 chunk/paged-256
prof t64-prefill-contig attention_tile64 tile64 prefill/contig
prof t64-prefill-p256 attention_tile64 tile64 prefill/paged-256
prof hop-chunk-contig attention_persistent persistent-hopper chunk/contig
prof hop-chunk-p16 attention_persistent persistent-hopper chunk/paged-16
cd /tmp/rep && for f in *.ncu-rep; do n=${f%.ncu-rep}
  ncu -i $f --page details --csv > $L/details-$n.csv 2>&1
  ncu -i $f --page source --csv --print-source sass > $L/sass-$n.csv 2>&1
  printf "%s: " $n | tee -a $R
  grep -E '"(Duration|Executed Instructions|Issue Slots Busy|Registers Per Thread|L2 Hit Rate|DRAM Throughput|L1/TEX Hit Rate)"' $L/details-$n.csv | awk -F'","' '{printf "%s=%s %s; ", $(NF-2), $NF, $(NF-1)}' | tr -d '"' | tee -a $R; echo | tee -a $R
done; cd - > /dev/null
timeout 150 .carry/xtask verify --kernels persistent-hopper --cases 300 --seed 801 > $L/verify.log 2>&1; echo "verify rc=$?" | tee -a $R
grep -E "passed, " $L/verify.log | tail -2 | tee -a $R
cd /tmp && tar cJf $OUT/logs.tar.xz logs
