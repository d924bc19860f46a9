# Portable path at D = 128: register-budget layouts (BLOCK_N=32 with all of Q in registers; 3 or 7
# consumer warps at 8 warps per SM = 255-register budget; 6 x 32-row warps) against the default
# and tile64. Verify each first (edge list + 150 random cases, D = 128 cases count, D = 64 may skip).
export FLASHCORE_CACHE_DIR=/tmp/fc; X=.carry/xtask; R=$OUT/ab12.txt; rm -f /tmp/vr.txt
E=FLASHCORE_PORTABLE
C=("" "${E}_BLOCK_N=32 ${E}_Q_REG_SLICES=8" "${E}_WARPS=3 ${E}_Q_REG_SLICES=8" "${E}_WARPS=7 ${E}_CTAS_PER_SM=1 ${E}_Q_REG_SLICES=8" "${E}_WARPS=6 ${E}_CTAS_PER_SM=1 ${E}_WARP_M_TILES=2 ${E}_BLOCK_N=32 ${E}_Q_REG_SLICES=4" "${E}_WARPS=6 ${E}_CTAS_PER_SM=1 ${E}_WARP_M_TILES=2 ${E}_Q_REG_SLICES=0")
i=0; for v in "${C[@]}"; do i=$((i+1)); [ -n "$v" ] && (env $v timeout 250 $X verify --kernels persistent-portable --cases 150 --no-shrink > $OUT/v$i.log 2>&1; echo "C$i [$v] verify rc=$? $(grep -E '^ *persistent-portable:' $OUT/v$i.log)" >> /tmp/vr.txt) & done
wait; sort /tmp/vr.txt | tee -a $R
run() { k=$1; tag=$2; v=$3; s=$4; env $v timeout 200 $X bench-all --kernels $k $s --no-peers --no-gemm --repeats 7 --out-dir /tmp/b$tag > /tmp/b$tag.log 2>&1; echo "$tag $k [$v] $(awk -F'|' -v k=$k '$5 ~ k && $6 ~ /eager|graph/ {gsub(/ /,"",$2);gsub(/ /,"",$4);gsub(/ /,"",$8);gsub(/ /,"",$6);printf "%s%s%s:%s ",$2,($4=="yes"?"c":""),($6=="graph"?"g":""),$8}' /tmp/b$tag/bench-all.md)" | tee -a $R; }
S="--shape 4,16,2048,128 --shape 1,16,16384,128 --shape 8,32,4096,128"
for r in 1 2; do run tile64 T$r "" "$S"; i=0; for v in "${C[@]}"; do i=$((i+1)); run persistent-portable C$i.$r "$v" "$S"; done; done
