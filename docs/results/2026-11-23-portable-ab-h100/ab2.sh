# Portable path A/B: 32-row consumer warps (WARP_M_TILES=2) against the 16-row default and tile64.
export FLASHCORE_CACHE_DIR=/tmp/fc; X=.carry/xtask
S64="--shape 4,16,2048,64 --shape 2,16,8192,64"; S128="--shape 4,16,2048,128 --shape 1,16,16384,128"
E="FLASHCORE_PORTABLE"
A=("" "${E}_WARPS=3 ${E}_WARP_M_TILES=2" "${E}_WARPS=6 ${E}_WARP_M_TILES=2" "${E}_WARPS=4 ${E}_WARP_M_TILES=2 ${E}_BLOCK_N=32" "${E}_WARPS=3 ${E}_WARP_M_TILES=2 ${E}_Q_REG_SLICES=0")
B=("" "${E}_WARPS=3 ${E}_WARP_M_TILES=2 ${E}_BLOCK_N=32 ${E}_Q_REG_SLICES=0" "${E}_WARPS=3 ${E}_WARP_M_TILES=2 ${E}_BLOCK_N=32 ${E}_Q_REG_SLICES=4" "${E}_WARPS=6 ${E}_WARP_M_TILES=2 ${E}_BLOCK_N=32 ${E}_Q_REG_SLICES=0" "${E}_WARPS=3 ${E}_WARP_M_TILES=2 ${E}_BLOCK_N=64 ${E}_Q_REG_SLICES=0")
# correctness first: each candidate, edge list + 150 random cases, restricted to its head dim
i=0; for v in "${A[@]}"; do i=$((i+1)); [ -n "$v" ] && (env $v timeout 200 $X verify --kernels persistent-portable --cases 150 --no-shrink > $OUT/va$i.log 2>&1; echo "A$i [$v] verify rc=$?" >> /tmp/vr.txt) & done
i=0; for v in "${B[@]}"; do i=$((i+1)); [ -n "$v" ] && (env $v timeout 200 $X verify --kernels persistent-portable --cases 150 --no-shrink > $OUT/vb$i.log 2>&1; echo "B$i [$v] verify rc=$?" >> /tmp/vr.txt) & done
wait; sort /tmp/vr.txt | tee $OUT/ab2.txt; grep -h "passed\|FAIL" $OUT/v*.log | tail -20
run() { k=$1; tag=$2; v=$3; s=$4; env $v timeout 120 $X bench-all --kernels $k $s --no-peers --no-gemm --repeats 7 --out-dir /tmp/b$tag > /tmp/b$tag.log 2>&1; echo "$tag $k [$v] $(awk -F'|' -v k=$k '$5 ~ k && $6 ~ /eager|graph/ {gsub(/ /,"",$2);gsub(/ /,"",$4);gsub(/ /,"",$8);printf "%s%s:%s ",$2,($4=="yes"?"c":""),$8}' /tmp/b$tag/bench-all.md)" | tee -a $OUT/ab2.txt; }
run tile64 T64 "" "$S64"; run tile64 T128 "" "$S128"
i=0; for v in "${A[@]}"; do i=$((i+1)); run persistent-portable A$i "$v" "$S64"; done
i=0; for v in "${B[@]}"; do i=$((i+1)); run persistent-portable B$i "$v" "$S128"; done
run tile64 T64b "" "$S64"; run tile64 T128b "" "$S128"
