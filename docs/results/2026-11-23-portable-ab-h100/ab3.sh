# Portable path A/B 2: dynamic schedule, 3 CTAs per SM at D = 64, BLOCK_N = 128, against tile64.
export FLASHCORE_CACHE_DIR=/tmp/fc; X=.carry/xtask; rm -f /tmp/vr.txt
S64="--shape 1,8,512,64 --shape 4,16,2048,64 --shape 2,16,8192,64"; S128="--shape 4,16,2048,128 --shape 1,16,16384,128 --shape 8,32,4096,128"
E="FLASHCORE_PORTABLE"
A=("${E}_DYNAMIC=0" "" "${E}_CTAS_PER_SM=3" "${E}_BLOCK_N=128" "${E}_WARP_M_TILES=2 ${E}_BLOCK_N=32" "${E}_CTAS_PER_SM=3 ${E}_DYNAMIC=1")
B=("${E}_DYNAMIC=0" "" "${E}_DYNAMIC=1")
i=0; for v in "${A[@]}"; do i=$((i+1)); [ $i -gt 1 ] && (env $v timeout 250 $X verify --kernels persistent-portable --cases 300 --no-shrink > /tmp/va$i.log 2>&1; echo "A$i [$v] verify rc=$? $(grep 'persistent-portable:' /tmp/va$i.log)" >> /tmp/vr.txt) & done
(FLASHCORE_PORTABLE_DEBUG=1 timeout 250 $X verify --kernels persistent-portable --edge-only --no-shrink > /tmp/vdbg.log 2>&1; echo "DEBUG dyn-for-causal verify rc=$? $(grep 'persistent-portable:' /tmp/vdbg.log)" >> /tmp/vr.txt) &
(FLASHCORE_PORTABLE_DYNAMIC=1 timeout 250 $X verify --kernels persistent-portable --cases 300 --no-shrink > /tmp/vdyn.log 2>&1; echo "DYN=1 all verify rc=$? $(grep 'persistent-portable:' /tmp/vdyn.log)" >> /tmp/vr.txt) &
wait; sort /tmp/vr.txt | tee $OUT/ab3.txt; cat /tmp/va*.log /tmp/vd*.log > $OUT/verify-logs.txt
run() { k=$1; tag=$2; v=$3; s=$4; env $v timeout 150 $X bench-all --kernels $k $s --no-peers --no-gemm --repeats 7 --out-dir /tmp/b$tag > /tmp/b$tag.log 2>&1; echo "$tag $k [$v] $(awk -F'|' -v k=$k '$5 ~ k && $6 ~ /eager|graph/ {gsub(/ /,"",$2);gsub(/ /,"",$4);gsub(/ /,"",$8);gsub(/ /,"",$6);printf "%s%s%s:%s ",$2,($4=="yes"?"c":""),($6=="graph"?"g":""),$8}' /tmp/b$tag/bench-all.md)" | tee -a $OUT/ab3.txt; }
run tile64 T64 "" "$S64"; run tile64 T128 "" "$S128"
i=0; for v in "${A[@]}"; do i=$((i+1)); run persistent-portable A$i "$v" "$S64"; done
i=0; for v in "${B[@]}"; do i=$((i+1)); run persistent-portable B$i "$v" "$S128"; done
run tile64 T64b "" "$S64"; run tile64 T128b "" "$S128"
