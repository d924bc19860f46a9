# Head-major item order without causal masking (one head per L2 section), both gen-5 paths:
# verify with it forced on, then non-causal timings against the current order and tile64, two
# passes; SM clock and power sampled during each run (nvidia-smi, 100 ms).
export FLASHCORE_CACHE_DIR=/tmp/fc; X=.carry/xtask; R=$OUT/ab11.txt
FLASHCORE_PORTABLE_HEAD_MAJOR=1 FLASHCORE_HOPPER_HEAD_MAJOR=1 timeout 200 $X verify --kernels persistent-hopper,persistent-portable --cases 200 --no-shrink > $OUT/verify-hm.log 2>&1; echo "verify HM1 rc=$? $(grep -E '^ *persistent-(hopper|portable):' $OUT/verify-hm.log | tr '\n' ' ')" | tee -a $R
run() { k=$1; tag=$2; v=$3; s=$4
  nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader,nounits -lms 100 > /tmp/smi$tag.csv & sp=$!
  env $v timeout 200 $X bench-all --kernels $k $s --no-peers --no-gemm --repeats 7 --out-dir /tmp/b$tag > /tmp/b$tag.log 2>&1
  kill $sp; clk=$(awk -F, '$2+0>300 {c+=$1;p+=$2;n++} END {if(n) printf "%.0fMHz/%.0fW", c/n, p/n}' /tmp/smi$tag.csv)
  echo "$tag $k [$v] $clk $(awk -F'|' -v k=$k '$5 ~ k && $6 ~ /eager|graph/ {gsub(/ /,"",$2);gsub(/ /,"",$4);gsub(/ /,"",$8);gsub(/ /,"",$6);printf "%s%s%s:%s ",$2,($4=="yes"?"c":""),($6=="graph"?"g":""),$8}' /tmp/b$tag/bench-all.md)" | tee -a $R; }
S="--shape 4,16,2048,64 --shape 2,16,8192,64 --shape 4,16,2048,128 --shape 1,16,16384,128 --shape 8,32,4096,128 --causal off"
for r in 1 2; do
  run tile64 T$r "" "$S"
  run persistent-portable P$r "" "$S"; run persistent-portable PH$r "FLASHCORE_PORTABLE_HEAD_MAJOR=1" "$S"
  run persistent-hopper H$r "" "$S"; run persistent-hopper HH$r "FLASHCORE_HOPPER_HEAD_MAJOR=1" "$S"
done
