export FLASHCORE_CACHE_DIR=/tmp/fc; X=.carry/xtask; S="--shape 4,16,2048,64 --shape 4,16,2048,128 --shape 2,16,8192,64 --shape 1,16,16384,128"
H=("" "FLASHCORE_HOPPER_PINGPONG=1" "FLASHCORE_HOPPER_PINGPONG=1 FLASHCORE_HOPPER_Q_STAGES=2" "FLASHCORE_HOPPER_PINGPONG=1 FLASHCORE_HOPPER_SMEM_EPILOGUE=1" "FLASHCORE_HOPPER_SMEM_EPILOGUE=1" "FLASHCORE_HOPPER_PINGPONG=1 FLASHCORE_HOPPER_STAGES=3 FLASHCORE_HOPPER_CONSUMER_REGS=240")
P=("" "FLASHCORE_PORTABLE_BLOCK_N=128" "FLASHCORE_PORTABLE_STAGES=3" "FLASHCORE_PORTABLE_WARPS=4")
run() { k=$1; i=$2; v=$3; if [ $k = persistent-hopper ] && [ -n "$v" ]; then env $v timeout 60 $X verify --kernels $k --edge-only --no-shrink > $OUT/v$i.log 2>&1; vr=$?; else vr=-; fi; env $v timeout 100 $X bench-all --kernels $k $S --no-peers --no-gemm --repeats 7 --out-dir /tmp/b$i > /tmp/b$i.log 2>&1; echo "[$v] verify=$vr $(awk -F'|' -v k=$k '$5 ~ k && $6 ~ /eager|graph/ {gsub(/ /,"",$2);gsub(/ /,"",$4);gsub(/ /,"",$8);printf "%s%s:%s ",$2,($4=="yes"?"c":""),$8}' /tmp/b$i/bench-all.md)" | tee -a $OUT/ab.txt; }
i=0; for v in "${H[@]}"; do i=$((i+1)); run persistent-hopper $i "$v"; done
for v in "${P[@]}"; do i=$((i+1)); run persistent-portable $i "$v"; done
