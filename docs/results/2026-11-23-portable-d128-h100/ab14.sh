# Head-major non-causal order (one head per L2 section), Hopper and portable paths, three
# alternating passes; SM clock, power and clock-event reasons sampled every 100 ms during each run.
# Then one run of the Hopper path with head-major beside the PyTorch peers (cuDNN, FA2) in the same process run.
export FLASHCORE_CACHE_DIR=/tmp/fc; X=.carry/xtask; R=$OUT/ab14.txt
run() { k=$1; tag=$2; v=$3; s=$4
  nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv,noheader,nounits -lms 100 > /tmp/smi$tag.csv & sp=$!
  env $v timeout 200 $X bench-all --kernels $k $s --no-peers --no-gemm --repeats 7 --out-dir /tmp/b$tag > /tmp/b$tag.log 2>&1
  kill $sp; clk=$(awk -F', ' '$2+0>250 {c+=$1;p+=$2;t=$3;n++; if ($4 != "0x0000000000000000") r[$4]++} END {if(n) printf "%.0fMHz/%.0fW/%dC", c/n, p/n, t; for (k in r) printf " %s:%d", k, r[k]}' /tmp/smi$tag.csv)
  echo "$tag $k [$v] $clk $(awk -F'|' -v k=$k '$5 ~ k && $6 ~ /eager|graph/ {gsub(/ /,"",$2);gsub(/ /,"",$4);gsub(/ /,"",$8);gsub(/ /,"",$6);printf "%s%s%s:%s ",$2,($4=="yes"?"c":""),($6=="graph"?"g":""),$8}' /tmp/b$tag/bench-all.md)" | tee -a $R; }
S="--shape 4,16,2048,64 --shape 2,16,8192,64 --shape 4,16,2048,128 --shape 1,16,16384,128 --causal off"
for r in 1 2 3; do
  run persistent-hopper H$r "" "$S"; run persistent-hopper HH$r "FLASHCORE_HOPPER_HEAD_MAJOR=1" "$S"
  run persistent-portable P$r "" "$S"; run persistent-portable PH$r "FLASHCORE_PORTABLE_HEAD_MAJOR=1" "$S"
done
FLASHCORE_HOPPER_HEAD_MAJOR=1 timeout 200 $X bench-all --kernels persistent-hopper $S --no-gemm --repeats 7 --out-dir $OUT/peers-hh > $OUT/peers-hh.log 2>&1; echo "peers rc=$?" | tee -a $R
awk -F'|' '$6 ~ /eager/ {print $2,$4,$5,$8}' $OUT/peers-hh/bench-all.md | tee -a $R
