# Hopper split-KV first checks + portable A/B 4 (skip unit rescale; D=64 3 CTAs vs BLOCK_N 128).
export FLASHCORE_CACHE_DIR=/tmp/fc; X=.carry/xtask; rm -f /tmp/vr.txt
vj() { tag=$1; shift; (env "$@" > /tmp/v-$tag.log 2>&1; echo "$tag rc=$? $(grep -E '^ *persistent-(hopper|portable):' /tmp/v-$tag.log | head -2 | tr '\n' ' ')" >> /tmp/vr.txt) & }
vj hdbg FLASHCORE_HOPPER_DEBUG=1 FLASHCORE_HOPPER_SPLITS=4 timeout 250 $X verify --kernels persistent-hopper --edge-only --no-shrink
vj hs4 FLASHCORE_HOPPER_SPLITS=4 timeout 250 $X verify --kernels persistent-hopper --cases 400 --no-shrink
vj hs3 FLASHCORE_HOPPER_SPLITS=3 timeout 250 $X verify --kernels persistent-hopper --cases 200 --no-edge --no-shrink
vj hs7 FLASHCORE_HOPPER_SPLITS=7 timeout 250 $X verify --kernels persistent-hopper --cases 200 --no-edge --no-shrink
vj hdef timeout 250 $X verify --kernels persistent-hopper --cases 300 --no-shrink
vj pskip FLASHCORE_PORTABLE_SKIP_UNIT_RESCALE=1 timeout 250 $X verify --kernels persistent-portable --cases 300 --no-shrink
vj pskip3 FLASHCORE_PORTABLE_SKIP_UNIT_RESCALE=1 FLASHCORE_PORTABLE_CTAS_PER_SM=3 timeout 250 $X verify --kernels persistent-portable --cases 300 --no-shrink
wait; sort /tmp/vr.txt | tee $OUT/ab5.txt; grep -h -iE "fail|trap|error" /tmp/v-*.log | head -20 | tee -a $OUT/ab5.txt
FLASHCORE_HOPPER_SPLITS=4 timeout 120 $X reliability --only determinism,oob,nonfinite --kernels persistent-hopper > /tmp/rel-split.log 2>&1; echo "reliability split4 rc=$?" | tee -a $OUT/ab5.txt; tail -15 /tmp/rel-split.log >> $OUT/ab5.txt
run() { k=$1; tag=$2; v=$3; s=$4; env $v timeout 150 $X bench-all --kernels $k $s --no-peers --no-gemm --repeats 7 --out-dir /tmp/b$tag > /tmp/b$tag.log 2>&1; echo "$tag $k [$v] $(awk -F'|' -v k=$k '$5 ~ k && $6 ~ /eager|graph/ {gsub(/ /,"",$2);gsub(/ /,"",$4);gsub(/ /,"",$7);gsub(/ /,"",$8);gsub(/ /,"",$6);printf "%s%s%s:%s(%sus) ",$2,($4=="yes"?"c":""),($6=="graph"?"g":""),$8,$7}' /tmp/b$tag/bench-all.md)" | tee -a $OUT/ab5.txt; }
for sp in 1 2 4 ""; do run persistent-hopper H$sp "FLASHCORE_HOPPER_SPLITS=$sp" "--shape 1,8,512,64 --shape 1,8,512,128"; done
S64="--shape 4,16,2048,64 --shape 2,16,8192,64"; S128="--shape 4,16,2048,128 --shape 1,16,16384,128 --shape 8,32,4096,128"
E="FLASHCORE_PORTABLE"
run tile64 T64 "" "$S64"; run tile64 T128 "" "$S128"
run persistent-portable A1 "${E}_CTAS_PER_SM=3" "$S64"; run persistent-portable A2 "${E}_CTAS_PER_SM=3 ${E}_SKIP_UNIT_RESCALE=1" "$S64"; run persistent-portable A3 "${E}_BLOCK_N=128" "$S64"
run persistent-portable B1 "" "$S128"; run persistent-portable B2 "${E}_SKIP_UNIT_RESCALE=1" "$S128"; run persistent-portable B1r "" "$S128"; run persistent-portable B2r "${E}_SKIP_UNIT_RESCALE=1" "$S128"
run tile64 T64b "" "$S64"; run tile64 T128b "" "$S128"
