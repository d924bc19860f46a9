# Third run of session 15 (H100), the tree with the decode suite's new diagnostic, dense K/V in the
# peers' [B, Hkv, Sk, D] layout ("dense-bhsd"; the caches hold [B, Sk, Hkv, D] rows of all heads):
# (1) the decode suite with SDPA flash, cuDNN and FA3 in the same run, the anchors as a cross-check;
# (2) ncu on the split kernel of (1,32,8,1,32768), bshd cache against bhsd dense: duration, DRAM
#     throughput and bytes, L2 read sectors (run2: the split kernel ran 49 us at 81 % of DRAM peak).
# Needs in .carry/: xtask (this tree), flash_attn3_jax and einops wheels, anchors/.
# Run from the repo root: bash docs/results/2026-11-26-session15-h100/run3/run3.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run3.txt; L=/tmp/logs3; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
pip install -q --no-deps --target /tmp/fa3pkg .carry/flash_attn3_jax-0.2.3-*.whl .carry/einops-*.whl > $L/pip.log 2>&1; echo "pip rc=$?" | tee -a $R
SECONDS=0
timeout 360 $X bench-all --suite decode --kernels persistent-hopper --fa3-path /tmp/fa3pkg --anchors .carry/anchors --out-dir $L/decode > $L/bench-decode.log 2>&1; echo "bench decode rc=$? (${SECONDS}s)" | tee -a $R
grep -E "^\| B=" $L/decode/bench-decode.md | cut -d'|' -f2,5-12 | sed 's/(decode[^)]*)//; s/(speculative[^)]*)//; s/(chunked[^)]*)//' | cut -c1-200 | tee -a $R
grep -E "^\| b[0-9]+-hq" $L/decode/bench-decode.md | grep -E "sdpa|fa3" | cut -d'|' -f2-7 | head -30 | tee -a $R
summ() { grep -E "\"$1" | awk -F'","' '{gsub(/[",]/,"",$NF); print $5" grid "$9" "$(NF-2)"\t"$NF}' | sort -t$'\t' -k1,1 -k2,2n | awk -F'\t' '{k[$1]=k[$1]" "$2; n[$1]++} END {for (x in k) {split(substr(k[x],2),v," "); print x": n="n[x]" min="v[1]" median="v[int((n[x]+1)/2)]" max="v[n[x]]}}'; }
m='gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sector_op_read_hit_rate.pct'
for c in contig dense-bhsd; do
  SECONDS=0
  timeout 120 ncu --kernel-name regex:'attention_decode_split' --launch-skip 5 --launch-count 5 --cache-control none --clock-control none --metrics $m --csv \
    $X bench-all --suite decode --kernels persistent-hopper --case b1-hq32-hkv8-sq1-sk32768-d128/$c --no-peers --quick --out-dir /tmp/nd-$c > $L/ncu-$c.csv 2>$L/ncu-$c.err
  echo "ncu $c rc=$? (${SECONDS}s)" | tee -a $R
  summ attention_decode_split < $L/ncu-$c.csv | sort | tee -a $R
done
cd /tmp && tar cJf $OUT/logs.tar.xz logs3
