# Hopper path: 176-key tiles (FlashAttention-3's non-causal width at D = 128; needs one Q buffer
# at D = 128 to fit 227 KB) against the default 128-key tiles with two Q buffers, and 128-key
# tiles with one Q buffer (to separate the two effects); verify the new width first.
export FLASHCORE_CACHE_DIR=/tmp/fc; X=.carry/xtask; R=$OUT/ab17.txt; rm -f /tmp/vr.txt
E=FLASHCORE_HOPPER
(env ${E}_BLOCK_N=176 ${E}_Q_STAGES=1 timeout 250 $X verify --kernels persistent-hopper --cases 300 --no-shrink > /tmp/v1.log 2>&1; echo "BN176 Q1 verify rc=$? $(grep -E '^ *persistent-hopper:' /tmp/v1.log)" >> /tmp/vr.txt) &
(env ${E}_BLOCK_N=176 ${E}_Q_STAGES=1 ${E}_DEBUG=1 timeout 250 $X verify --kernels persistent-hopper --edge-only > /tmp/v2.log 2>&1; echo "BN176 Q1 debug edge verify rc=$? $(grep -E '^ *persistent-hopper:' /tmp/v2.log)" >> /tmp/vr.txt) &
(env ${E}_BLOCK_N=176 timeout 250 $X verify --kernels persistent-hopper --cases 200 --no-shrink > /tmp/v3.log 2>&1; echo "BN176 Q2 verify (D=128 skipped: smem) rc=$? $(grep -E '^ *persistent-hopper:' /tmp/v3.log)" >> /tmp/vr.txt) &
wait; sort /tmp/vr.txt | tee -a $R; grep -h "FAIL" /tmp/v?.log | head -5 | tee -a $R
run() { k=$1; tag=$2; v=$3; s=$4; env $v timeout 200 $X bench-all --kernels $k $s --no-peers --no-gemm --repeats 7 --out-dir /tmp/b$tag > /tmp/b$tag.log 2>&1; echo "$tag $k [$v] $(awk -F'|' -v k=$k '$5 ~ k && $6 ~ /eager|graph/ {gsub(/ /,"",$2);gsub(/ /,"",$4);gsub(/ /,"",$8);gsub(/ /,"",$6);printf "%s%s%s:%s ",$2,($4=="yes"?"c":""),($6=="graph"?"g":""),$8}' /tmp/b$tag/bench-all.md)" | tee -a $R; }
S128="--shape 4,16,2048,128 --shape 1,16,16384,128 --shape 8,32,4096,128"; S64="--shape 4,16,2048,64 --shape 2,16,8192,64"
for r in 1 2; do
  run persistent-hopper H$r "" "$S128 $S64"
  run persistent-hopper N$r "${E}_BLOCK_N=176 ${E}_Q_STAGES=1" "$S128 $S64"
  run persistent-hopper NR$r "${E}_BLOCK_N=176 ${E}_Q_STAGES=1 ${E}_CONSUMER_REGS=240" "$S128"
  run persistent-hopper Q$r "${E}_Q_STAGES=1" "$S128"
  run persistent-hopper N2$r "${E}_BLOCK_N=176" "$S64"
done
