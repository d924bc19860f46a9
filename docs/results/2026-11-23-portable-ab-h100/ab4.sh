# Portable path A/B 3 (dynamic schedule is now the default for multi-round problems):
# D = 64: BLOCK_N 128, 3 CTAs per SM, 8 warps; D = 128: 8 warps; both: L2 sections off.
export FLASHCORE_CACHE_DIR=/tmp/fc; X=.carry/xtask; rm -f /tmp/vr.txt
S64="--shape 1,8,512,64 --shape 4,16,2048,64 --shape 2,16,8192,64"; S128="--shape 4,16,2048,128 --shape 1,16,16384,128 --shape 8,32,4096,128"
E="FLASHCORE_PORTABLE"
A=("" "${E}_BLOCK_N=128" "${E}_CTAS_PER_SM=3" "${E}_WARPS=8 ${E}_BLOCK_N=128" "${E}_BLOCK_N=128 ${E}_L2_SECTION_MIB=1024" "${E}_CTAS_PER_SM=3 ${E}_L2_SECTION_MIB=1024")
B=("" "${E}_WARPS=8" "${E}_L2_SECTION_MIB=1024" "${E}_WARPS=8 ${E}_L2_SECTION_MIB=1024")
for v in "" "${E}_BLOCK_N=128" "${E}_WARPS=8" "${E}_WARPS=8 ${E}_BLOCK_N=128"; do (env $v timeout 250 $X verify --kernels persistent-portable --cases 300 --no-shrink > "/tmp/v-$v.log" 2>&1; echo "[$v] verify rc=$? $(grep 'persistent-portable:' "/tmp/v-$v.log")" >> /tmp/vr.txt) & done
wait; sort /tmp/vr.txt | tee $OUT/ab4.txt
run() { k=$1; tag=$2; v=$3; s=$4; env $v timeout 150 $X bench-all --kernels $k $s --no-peers --no-gemm --repeats 7 --out-dir /tmp/b$tag > /tmp/b$tag.log 2>&1; echo "$tag $k [$v] $(awk -F'|' -v k=$k '$5 ~ k && $6 ~ /eager|graph/ {gsub(/ /,"",$2);gsub(/ /,"",$4);gsub(/ /,"",$8);gsub(/ /,"",$6);printf "%s%s%s:%s ",$2,($4=="yes"?"c":""),($6=="graph"?"g":""),$8}' /tmp/b$tag/bench-all.md)" | tee -a $OUT/ab4.txt; }
run tile64 T64 "" "$S64"; run tile64 T128 "" "$S128"
i=0; for v in "${A[@]}"; do i=$((i+1)); run persistent-portable A$i "$v" "$S64"; done
i=0; for v in "${B[@]}"; do i=$((i+1)); run persistent-portable B$i "$v" "$S128"; done
run tile64 T64b "" "$S64"; run tile64 T128b "" "$S128"
run persistent-portable A1b "" "$S64"; run persistent-portable B1b "" "$S128"
