# ncu of the portable path, tile64 and the Hopper path at (4,16,2048,128) fp16 non-causal, then the
# portable/tile64 run-to-run spread at that shape (3 alternating passes, static schedule too).
export FLASHCORE_CACHE_DIR=/tmp/fc; X=.carry/xtask
S="--shape 4,16,2048,128 --causal off --no-peers --no-gemm --repeats 3 --sample-ms 5"
SEC="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats --section InstructionStats --section SourceCounters"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv | tee $OUT/prof1.txt
for k in tile64:attention_tile64 persistent-portable:attention_persistent_portable persistent-hopper:attention_persistent_hopper; do
  timeout 150 ncu --clock-control none -k regex:${k#*:} --launch-skip 5 --launch-count 1 $SEC $X bench-all --kernels ${k%:*} $S --out-dir /tmp/n > $OUT/ncu-${k%:*}.txt 2>&1; echo "ncu ${k%:*} rc=$?" | tee -a $OUT/prof1.txt
done
run() { k=$1; tag=$2; v=$3; s=$4; env $v timeout 200 $X bench-all --kernels $k $s --no-peers --no-gemm --repeats 7 --out-dir /tmp/b$tag > /tmp/b$tag.log 2>&1; echo "$tag $k [$v] $(awk -F'|' -v k=$k '$5 ~ k && $6 ~ /eager|graph/ {gsub(/ /,"",$2);gsub(/ /,"",$4);gsub(/ /,"",$8);gsub(/ /,"",$6);printf "%s%s%s:%s ",$2,($4=="yes"?"c":""),($6=="graph"?"g":""),$8}' /tmp/b$tag/bench-all.md)" | tee -a $OUT/prof1.txt; }
S1="--shape 4,16,2048,128 --shape 8,32,4096,128 --causal off"
for r in 1 2 3; do run tile64 T$r "" "$S1"; run persistent-portable P$r "" "$S1"; run persistent-portable PS$r "FLASHCORE_PORTABLE_DYNAMIC=0" "$S1"; done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv | tee -a $OUT/prof1.txt
