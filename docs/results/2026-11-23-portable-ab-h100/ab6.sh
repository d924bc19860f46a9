# Portable: L2 section size under causal masking (dynamic schedule), D = 64 with BLOCK_N 128.
export FLASHCORE_CACHE_DIR=/tmp/fc; X=.carry/xtask
run() { k=$1; tag=$2; v=$3; s=$4; env $v timeout 150 $X bench-all --kernels $k $s --causal on --no-peers --no-gemm --repeats 7 --out-dir /tmp/b$tag > /tmp/b$tag.log 2>&1; echo "$tag $k [$v] $(awk -F'|' -v k=$k '$5 ~ k && $6 ~ /eager|graph/ {gsub(/ /,"",$2);gsub(/ /,"",$4);gsub(/ /,"",$8);gsub(/ /,"",$6);printf "%s%s%s:%s ",$2,($4=="yes"?"c":""),($6=="graph"?"g":""),$8}' /tmp/b$tag/bench-all.md)" | tee -a $OUT/ab6.txt; }
S128="--shape 4,16,2048,128 --shape 1,16,16384,128 --shape 8,32,4096,128"; S64="--shape 4,16,2048,64 --shape 2,16,8192,64"
E="FLASHCORE_PORTABLE"
run tile64 T "" "$S128 $S64"
for mib in 25 50 100 200 1024; do run persistent-portable L$mib "${E}_L2_SECTION_MIB=$mib ${E}_BLOCK_N=128" "$S64"; run persistent-portable M$mib "${E}_L2_SECTION_MIB=$mib" "$S128"; done
