# Second run. The Hopper warpgroup-idle pass (run1) took its branch on a load-derived condition,
# which moved the ring's stage and phase out of uniform registers (+32 R2UR per key tile, +3 %
# at uniform lengths); it now branches on a warp vote. (1) verify --cases 400 on the Hopper path;
# varlen suite (Hopper, no peers) A/B against .carry/xtask-base (35a42ee), alternated twice.
# (2) ncu, SASS pages exported: varlen-uniform on both persistent paths and dense-eq on the
# portable one; the paged suite's chunk/contig and chunk/paged-256 on the Hopper path (run1's
# paged-256 profile stopped at a bench-all panic, fixed since); the (1,8,512,64) causal problem,
# ten launches each on 3d690b3 (.carry/xtask-old) and now, for enough stall samples.
# Run from the repo root: bash docs/results/2026-11-25-session7-h100/run2/run2.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; R=$OUT/run2.txt; L=/tmp/logs; mkdir -p $L /tmp/rep
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
timeout 150 .carry/xtask verify --kernels persistent-hopper --cases 400 --json $L/verify.json > $L/verify.log 2>&1; echo "verify rc=$?" | tee -a $R
grep -E "^verify:" $L/verify.log | tee -a $R
for i in 1 2; do for b in xtask-base xtask; do
  timeout 60 .carry/$b bench-all --suite varlen --kernels persistent-hopper --no-peers --out-dir /tmp/v-$b-$i > $L/varlen-$b-$i.log 2>&1; echo "varlen $b $i rc=$?" | tee -a $R
  grep -E "^\| (varlen|dense-eq|varlen-uniform) \| persistent" /tmp/v-$b-$i/bench-varlen.md | cut -d'|' -f2-6 | tee -a $R
done; done
prof() { # name, xtask, launch-skip, launch-count, args...
  n=$1; b=$2; s=$3; c=$4; shift 4
  timeout 120 ncu --kernel-name regex:attention_persistent --launch-skip $s --launch-count $c --set full --import-source no -f -o /tmp/rep/$n .carry/$b "$@" > $L/ncu-$n.log 2>&1
  echo "ncu $n rc=$?" | tee -a $R
}
prof hopper-varlen-uniform xtask 2 1 bench-all --suite varlen --case varlen-uniform --kernels persistent-hopper --no-peers --quick --check-rows 64 --out-dir /tmp/b1
prof portable-varlen-uniform xtask 2 1 bench-all --suite varlen --case varlen-uniform --kernels persistent-portable --no-peers --quick --check-rows 64 --out-dir /tmp/b2
prof portable-dense-eq xtask 2 1 bench-all --suite varlen --case dense-eq --kernels persistent-portable --no-peers --quick --check-rows 64 --out-dir /tmp/b3
prof hopper-chunk-contig xtask 2 1 bench-all --suite paged --case chunk/contig --kernels persistent-hopper --no-peers --quick --check-rows 64 --out-dir /tmp/b4
prof hopper-chunk-paged-256 xtask 2 1 bench-all --suite paged --case chunk/paged-256 --kernels persistent-hopper --no-peers --quick --check-rows 64 --out-dir /tmp/b5
C='b=1,hq=8,hkv=8,sq=512,sk=512,d=64,dtype=f16,causal=1,layout=bshd,seed=1'
for b in xtask-old xtask; do prof mission10-$b $b 0 10 verify --kernels persistent-hopper --case "$C"; done
cd /tmp/rep && for f in *.ncu-rep; do n=${f%.ncu-rep}
  ncu -i $f --page details --csv > $L/details-$n.csv 2>&1
  ncu -i $f --page source --csv --print-source sass > $L/sass-$n.csv 2>&1
  printf "%s: " $n | tee -a $R
  grep -E '"(Duration|Executed Instructions|Issue Slots Busy|L2 Hit Rate|DRAM Throughput)"' $L/details-$n.csv | head -5 | awk -F'","' '{printf "%s=%s %s; ", $(NF-2), $NF, $(NF-1)}' | tr -d '"' | tee -a $R; echo | tee -a $R
done
cd /tmp && tar cJf $OUT/logs.tar.xz logs
