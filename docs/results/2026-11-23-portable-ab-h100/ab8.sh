# Dynamic schedule with the next index taken one unit ahead: Hopper static vs dynamic; portable vs tile64.
export FLASHCORE_CACHE_DIR=/tmp/fc; X=.carry/xtask; rm -f /tmp/vr.txt
vj() { tag=$1; shift; (env "$@" > /tmp/v-$tag.log 2>&1; echo "$tag rc=$? $(grep -E '^ *persistent-(hopper|portable):' /tmp/v-$tag.log | head -2 | tr '\n' ' ')" >> /tmp/vr.txt) & }
vj hdbg FLASHCORE_HOPPER_DEBUG=1 timeout 250 $X verify --kernels persistent-hopper --edge-only --no-shrink
vj pdbg FLASHCORE_PORTABLE_DEBUG=1 timeout 250 $X verify --kernels persistent-portable --edge-only --no-shrink
vj hdyn FLASHCORE_HOPPER_DYNAMIC=1 timeout 250 $X verify --kernels persistent-hopper --cases 300 --no-shrink
vj pdyn FLASHCORE_PORTABLE_DYNAMIC=1 timeout 250 $X verify --kernels persistent-portable --cases 300 --no-shrink
wait; sort /tmp/vr.txt | tee $OUT/ab8.txt
run() { k=$1; tag=$2; v=$3; s=$4; env $v timeout 200 $X bench-all --kernels $k $s --no-peers --no-gemm --repeats 7 --out-dir /tmp/b$tag > /tmp/b$tag.log 2>&1; echo "$tag $k [$v] $(awk -F'|' -v k=$k '$5 ~ k && $6 ~ /eager|graph/ {gsub(/ /,"",$2);gsub(/ /,"",$4);gsub(/ /,"",$8);gsub(/ /,"",$6);printf "%s%s%s:%s ",$2,($4=="yes"?"c":""),($6=="graph"?"g":""),$8}' /tmp/b$tag/bench-all.md)" | tee -a $OUT/ab8.txt; }
S="--shape 4,16,2048,64 --shape 2,16,8192,64 --shape 4,16,2048,128 --shape 1,16,16384,128 --shape 8,32,4096,128"
run persistent-hopper S0 "FLASHCORE_HOPPER_DYNAMIC=0" "$S"; run persistent-hopper D1 "" "$S"; run persistent-hopper S0r "FLASHCORE_HOPPER_DYNAMIC=0" "$S"; run persistent-hopper D1r "" "$S"
run tile64 T "" "$S"; run persistent-portable P "" "$S"; run persistent-portable P0 "FLASHCORE_PORTABLE_DYNAMIC=0" "$S"
