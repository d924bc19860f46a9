# First run of session 7. (1) The Hopper modes consumer: a warpgroup with no rows in the item
# (the last q tile of a varlen sequence) passes the key tiles through the barriers instead of
# computing: verify --cases 400 on the Hopper path, then the varlen suite (Hopper, no peers)
# A/B against the session-6 tree (.carry/xtask-base, 35a42ee), alternated twice.
# (2) ncu, one launch each, SASS pages exported: the (1,8,512,64) causal mission problem on
# 3d690b3 (.carry/xtask-old, before the modes) and now; varlen-uniform and dense-eq now; the
# paged suite's chunk/contig and chunk/paged-256 on the Hopper path.
# Run from the repo root: bash docs/results/2026-11-25-session7-h100/run1/run1.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; R=$OUT/run1.txt; L=/tmp/logs; mkdir -p $L /tmp/rep
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
timeout 150 .carry/xtask verify --kernels persistent-hopper --cases 400 --json $L/verify.json > $L/verify.log 2>&1; echo "verify rc=$?" | tee -a $R
grep -E "passed|failed" $L/verify.log | tail -3 | tee -a $R
for i in 1 2; do for b in xtask-base xtask; do
  timeout 60 .carry/$b bench-all --suite varlen --kernels persistent-hopper --no-peers --out-dir /tmp/v-$b-$i > $L/varlen-$b-$i.log 2>&1; echo "varlen $b $i rc=$?" | tee -a $R
  grep -E "^\| (varlen|dense-eq|varlen-uniform) \|" /tmp/v-$b-$i/bench-varlen.md | cut -d'|' -f2-6 | tee -a $R
done; done
C='b=1,hq=8,hkv=8,sq=512,sk=512,d=64,dtype=f16,causal=1,layout=bshd,seed=1'
for b in xtask-old xtask; do
  timeout 90 ncu --kernel-name regex:attention_persistent_hopper --launch-count 1 --set full --import-source no -f -o /tmp/rep/mission-$b \
    .carry/$b verify --kernels persistent-hopper --case "$C" > $L/ncu-mission-$b.log 2>&1; echo "ncu mission $b rc=$?" | tee -a $R
done
for c in varlen-uniform dense-eq; do
  timeout 120 ncu --kernel-name regex:attention_persistent --launch-skip 2 --launch-count 1 --set full --import-source no -f -o /tmp/rep/$c \
    .carry/xtask bench-all --suite varlen --case $c --kernels persistent-hopper --no-peers --quick --check-rows 64 --out-dir /tmp/b-$c > $L/ncu-$c.log 2>&1
  echo "ncu $c rc=$?" | tee -a $R
done
for c in chunk/contig chunk/paged-256; do n=$(echo $c | tr / -)
  timeout 120 ncu --kernel-name regex:attention_persistent --launch-skip 2 --launch-count 1 --set full --import-source no -f -o /tmp/rep/$n \
    .carry/xtask bench-all --suite paged --case $c --kernels persistent-hopper --no-peers --quick --check-rows 64 --out-dir /tmp/b-$n > $L/ncu-$n.log 2>&1
  echo "ncu $n rc=$?" | tee -a $R
done
cd /tmp/rep && for f in *.ncu-rep; do n=${f%.ncu-rep}
  ncu -i $f --page details --csv > $L/details-$n.csv 2>&1
  ncu -i $f --page source --csv --print-source sass > $L/sass-$n.csv 2>&1
  printf "%s: " $n | tee -a $R
  grep -E '"(Duration|Executed Instructions|Issue Slots Busy|Registers Per Thread|Compute \(SM\) Throughput|L2 Hit Rate|DRAM Throughput)"' $L/details-$n.csv | awk -F'","' '{printf "%s=%s %s; ", $(NF-2), $NF, $(NF-1)}' | tr -d '"' | tee -a $R; echo | tee -a $R
done
cd /tmp && tar cJf $OUT/logs.tar.xz logs
