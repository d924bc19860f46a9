# Partial L2 section first (both gen-5 paths); portable non-causal static vs dynamic; repeated against tile64.
export FLASHCORE_CACHE_DIR=/tmp/fc; X=.carry/xtask; rm -f /tmp/vr.txt
vj() { tag=$1; shift; (env "$@" > /tmp/v-$tag.log 2>&1; echo "$tag rc=$? $(grep -E '^ *persistent-(hopper|portable):' /tmp/v-$tag.log | head -2 | tr '\n' ' ')" >> /tmp/vr.txt) & }
vj h timeout 250 $X verify --kernels persistent-hopper --cases 300 --no-shrink
vj p timeout 250 $X verify --kernels persistent-portable --cases 300 --no-shrink
wait; sort /tmp/vr.txt | tee $OUT/ab9.txt
run() { k=$1; tag=$2; v=$3; s=$4; env $v timeout 200 $X bench-all --kernels $k $s --no-peers --no-gemm --repeats 7 --out-dir /tmp/b$tag > /tmp/b$tag.log 2>&1; echo "$tag $k [$v] $(awk -F'|' -v k=$k '$5 ~ k && $6 ~ /eager|graph/ {gsub(/ /,"",$2);gsub(/ /,"",$4);gsub(/ /,"",$8);gsub(/ /,"",$6);printf "%s%s%s:%s ",$2,($4=="yes"?"c":""),($6=="graph"?"g":""),$8}' /tmp/b$tag/bench-all.md)" | tee -a $OUT/ab9.txt; }
S="--shape 4,16,2048,64 --shape 2,16,8192,64 --shape 4,16,2048,128 --shape 1,16,16384,128 --shape 8,32,4096,128"
S128="--shape 4,16,2048,128 --shape 1,16,16384,128 --shape 8,32,4096,128 --causal off"
for r in 1 2; do
run tile64 T$r "" "$S"; run persistent-portable P$r "" "$S"; run persistent-portable PS$r "FLASHCORE_PORTABLE_DYNAMIC=0" "$S128"
done
run persistent-hopper H "" "$S --causal on"
