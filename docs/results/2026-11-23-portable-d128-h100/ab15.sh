# Non-causal: static round-robin against the dynamic schedule (now with head-major order), both
# paths, three alternating passes.
export FLASHCORE_CACHE_DIR=/tmp/fc; X=.carry/xtask; R=$OUT/ab15.txt
run() { k=$1; tag=$2; v=$3; s=$4; env $v timeout 200 $X bench-all --kernels $k $s --no-peers --no-gemm --repeats 7 --out-dir /tmp/b$tag > /tmp/b$tag.log 2>&1; echo "$tag $k [$v] $(awk -F'|' -v k=$k '$5 ~ k && $6 ~ /eager|graph/ {gsub(/ /,"",$2);gsub(/ /,"",$4);gsub(/ /,"",$8);gsub(/ /,"",$6);printf "%s%s%s:%s ",$2,($4=="yes"?"c":""),($6=="graph"?"g":""),$8}' /tmp/b$tag/bench-all.md)" | tee -a $R; }
S="--shape 4,16,2048,64 --shape 2,16,8192,64 --shape 4,16,2048,128 --shape 1,16,16384,128 --shape 8,32,4096,128 --causal off"
for r in 1 2 3; do
  run persistent-hopper H$r "" "$S"; run persistent-hopper HS$r "FLASHCORE_HOPPER_DYNAMIC=0" "$S"
  run persistent-portable P$r "" "$S"; run persistent-portable PS$r "FLASHCORE_PORTABLE_DYNAMIC=0" "$S"
done
