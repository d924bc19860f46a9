# Portable D = 128: 3 K/V stages with one Q buffer against 2 stages with two.
export FLASHCORE_CACHE_DIR=/tmp/fc; X=.carry/xtask
run() { k=$1; tag=$2; v=$3; s=$4; env $v timeout 200 $X bench-all --kernels $k $s --no-peers --no-gemm --repeats 7 --out-dir /tmp/b$tag > /tmp/b$tag.log 2>&1; echo "$tag $k [$v] $(awk -F'|' -v k=$k '$5 ~ k && $6 ~ /eager|graph/ {gsub(/ /,"",$2);gsub(/ /,"",$4);gsub(/ /,"",$8);gsub(/ /,"",$6);printf "%s%s%s:%s ",$2,($4=="yes"?"c":""),($6=="graph"?"g":""),$8}' /tmp/b$tag/bench-all.md)" | tee -a $OUT/ab10.txt; }
S128="--shape 4,16,2048,128 --shape 1,16,16384,128 --shape 8,32,4096,128"
FLASHCORE_PORTABLE_STAGES=3 FLASHCORE_PORTABLE_Q_STAGES=1 timeout 200 $X verify --kernels persistent-portable --cases 200 --no-shrink > /tmp/v.log 2>&1; echo "verify S3Q1 rc=$? $(grep 'persistent-portable:' /tmp/v.log)" | tee -a $OUT/ab10.txt
for r in 1 2; do run tile64 T$r "" "$S128"; run persistent-portable P$r "" "$S128"; run persistent-portable S3$r "FLASHCORE_PORTABLE_STAGES=3 FLASHCORE_PORTABLE_Q_STAGES=1" "$S128"; done
