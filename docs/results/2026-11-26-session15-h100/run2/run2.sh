# Second run of session 15 (H100), the tree with the launch-floor row and FLASHCORE_DECODE_STAGES:
# (1) the mission suite beside the peers, with the new launch-floor row (a one-thread kernel in a
#     graph of as many calls, on the same buffers): issue 12 asks for the floor in that table;
# (2) ncu, kernel durations as the replays run them (no cache flush, no clock lock): the mission
#     kernel and the floor kernel, and the decode split + combine kernels of (1,32,8,1,32768) with
#     their DRAM throughput: where the long decode row's 12 % to a copy goes;
# (3) the decode ring depth (FLASHCORE_DECODE_STAGES 3 = default, 4, 6) on the rows that run one
#     CTA an SM, two alternations, no peers.
# Needs in .carry/: xtask (this tree), flash_attn3_jax and einops wheels.
# Run from the repo root: bash docs/results/2026-11-26-session15-h100/run2/run2.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run2.txt; L=/tmp/logs2; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
pip install -q --no-deps --target /tmp/fa3pkg .carry/flash_attn3_jax-0.2.3-*.whl .carry/einops-*.whl > $L/pip.log 2>&1; echo "pip rc=$?" | tee -a $R
SECONDS=0
timeout 240 $X bench-all --suite mission --causal both --kernels persistent-hopper,persistent-portable --fa3-path /tmp/fa3pkg --out-dir $L/mission > $L/bench-mission.log 2>&1
echo "bench mission rc=$? (${SECONDS}s)" | tee -a $R
grep -E "^\| 1,8,512,64 \| f16 \| (no|yes) \| [a-z]" $L/mission/bench-all.md | cut -d'|' -f2-8,10 | tee -a $R
m='gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,sm__cycles_active.avg'
SECONDS=0
timeout 150 ncu --kernel-name regex:'attention_persistent_hopper|launch_floor' --launch-skip 20 --launch-count 600 --cache-control none --clock-control none --metrics gpu__time_duration.sum --csv \
  $X bench-all --suite mission --kernels persistent-hopper --no-peers --quick --out-dir /tmp/nm > $L/ncu-mission.csv 2>$L/ncu-mission.err
echo "ncu mission rc=$? (${SECONDS}s)" | tee -a $R
summ() { grep -E "\"$1" | awk -F'","' '{gsub(/[",]/,"",$NF); print $5" grid "$9" "$(NF-2)"\t"$NF}' | sort -t$'\t' -k1,1 -k2,2n | awk -F'\t' '{k[$1]=k[$1]" "$2; n[$1]++} END {for (x in k) {split(substr(k[x],2),v," "); print x": n="n[x]" min="v[1]" median="v[int((n[x]+1)/2)]" max="v[n[x]]}}'; }
summ '(attention_persistent_hopper|launch_floor)' < $L/ncu-mission.csv | tee -a $R
SECONDS=0
timeout 120 ncu --kernel-name regex:'attention_decode' --launch-skip 10 --launch-count 10 --cache-control none --clock-control none --metrics $m --csv \
  $X bench-all --suite decode --kernels persistent-hopper --case b1-hq32-hkv8-sq1-sk32768-d128/contig --no-peers --quick --out-dir /tmp/nd > $L/ncu-decode.csv 2>$L/ncu-decode.err
echo "ncu decode rc=$? (${SECONDS}s)" | tee -a $R
summ attention_decode < $L/ncu-decode.csv | sort | tee -a $R
for rep in 1 2; do for st in 3 4 6; do
  SECONDS=0
  FLASHCORE_DECODE_STAGES=$st timeout 100 $X bench-all --suite decode --kernels persistent-hopper --no-peers --case sk32768 --case hq64 --case b8-hq32-hkv8-sq1-sk8192 --out-dir $L/st$st-$rep > $L/bench-st$st-$rep.log 2>&1
  echo "stages $st rep $rep rc=$? (${SECONDS}s): $(grep -E '^\| B=' $L/st$st-$rep/bench-decode.md | grep -v dense | cut -d'|' -f6 | tr '\n' ' ' | tr -s ' ')" | tee -a $R
done; done
cd /tmp && tar cJf $OUT/logs.tar.xz logs2
