# Portable path, one CTA of 5-7 consumer warps per SM (8 warps per SM: the 255-register budget,
# all of Q in registers, BLOCK_N=128 possible at D = 128) against the default (2 CTAs of 4) and
# tile64. Verify each (edge list + 150 random cases) first.
export FLASHCORE_CACHE_DIR=/tmp/fc; X=.carry/xtask; R=$OUT/ab13.txt; rm -f /tmp/vr.txt
E=FLASHCORE_PORTABLE
A=("" "${E}_WARPS=7" "${E}_WARPS=7 ${E}_BLOCK_N=128" "${E}_WARPS=6 ${E}_BLOCK_N=128" "${E}_WARPS=5 ${E}_BLOCK_N=128" "${E}_WARPS=6")
B=("" "${E}_WARPS=7 ${E}_BLOCK_N=128" "${E}_WARPS=7 ${E}_BLOCK_N=64" "${E}_WARPS=6 ${E}_BLOCK_N=128" "${E}_WARPS=5 ${E}_BLOCK_N=128")
i=0; for v in "${A[@]}"; do i=$((i+1)); [ -n "$v" ] && (env $v timeout 250 $X verify --kernels persistent-portable --cases 150 --no-shrink > /tmp/va$i.log 2>&1; echo "A$i [$v] verify rc=$? $(grep -E '^ *persistent-portable:' /tmp/va$i.log)" >> /tmp/vr.txt) & done
i=0; for v in "${B[@]}"; do i=$((i+1)); [ -n "$v" ] && [ $i -ne 4 ] && [ $i -ne 5 ] && (env $v timeout 250 $X verify --kernels persistent-portable --cases 150 --no-shrink > /tmp/vb$i.log 2>&1; echo "B$i [$v] verify rc=$? $(grep -E '^ *persistent-portable:' /tmp/vb$i.log)" >> /tmp/vr.txt) & done
wait; sort /tmp/vr.txt | tee -a $R; cat /tmp/va*.log /tmp/vb*.log | grep -i "fail\|error" | head -20
run() { k=$1; tag=$2; v=$3; s=$4; env $v timeout 200 $X bench-all --kernels $k $s --no-peers --no-gemm --repeats 7 --out-dir /tmp/b$tag > /tmp/b$tag.log 2>&1; echo "$tag $k [$v] $(awk -F'|' -v k=$k '$5 ~ k && $6 ~ /eager|graph/ {gsub(/ /,"",$2);gsub(/ /,"",$4);gsub(/ /,"",$8);gsub(/ /,"",$6);printf "%s%s%s:%s ",$2,($4=="yes"?"c":""),($6=="graph"?"g":""),$8}' /tmp/b$tag/bench-all.md)" | tee -a $R; }
S128="--shape 4,16,2048,128 --shape 1,16,16384,128 --shape 8,32,4096,128"; S64="--shape 4,16,2048,64 --shape 2,16,8192,64"
run tile64 T128 "" "$S128"; i=0; for v in "${A[@]}"; do i=$((i+1)); run persistent-portable A$i "$v" "$S128"; done
run tile64 T64 "" "$S64"; i=0; for v in "${B[@]}"; do i=$((i+1)); run persistent-portable B$i "$v" "$S64"; done
run tile64 T128b "" "$S128"; run persistent-portable A1b "" "$S128"; run persistent-portable A2b "${A[1]}" "$S128"; run persistent-portable A3b "${A[2]}" "$S128"
run tile64 T64b "" "$S64"; run persistent-portable B1b "" "$S64"; run persistent-portable B2b "${B[1]}" "$S64"
