# Third run of session 19 (H100): is the persistent kernel's key loop held by L2 bandwidth? At
# 128 x 176 tiles a CTA reads ~128 FLOP a byte of K/V from L2; at the ladder's ~565 TFLOP/s that is
# ~4.4 TB/s out of the L2, and the chunked-prefill row (GQA 4:1: four CTAs stream each K/V tile)
# ~4.6 TB/s. If the L2 is near its peak there, sharing K/V tiles between the CTAs of a cluster
# (TMA multicast) is the next lever; if not, it is not. ncu (one launch each, its default cache
# flush and base clocks): SpeedOfLight and MemoryWorkloadAnalysis on
# (1) the chunked-prefill row, contiguous cache (the decode suite's case filter),
# (2) the ladder's (4,16,2048,128) non-causal, (3) the mission shape non-causal.
# Run from the repo root: bash docs/results/2026-11-27-session19-h100/run3/run3.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run3.txt; L=/tmp/logs3; mkdir -p $L
pack() { cd /tmp && tar cJf $OUT/logs.tar.xz logs3; cd - > /dev/null; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
S="--section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --metrics lts__t_bytes.sum.per_second,lts__t_sectors.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_srcunit_tex_op_read.sum,dram__bytes_read.sum.per_second,sm__cycles_elapsed.avg.per_second"
prof() {  # label, xtask args...
  label=$1; shift
  timeout 150 ncu -k regex:attention_persistent_hopper -c 1 $S $X "$@" --out-dir $L/b-$label > $L/ncu-$label.log 2>&1
  echo "== ncu $label: rc=$?" | tee -a $R
  grep -E "Duration|Memory Throughput|L2 Cache Throughput|DRAM Throughput|Compute \(SM\) Throughput|lts__t_bytes.sum.per_second|lts__t_sectors.avg.pct|lts__t_sectors_srcunit_tex_op_read.sum|dram__bytes_read.sum.per_second|sm__cycles_elapsed.avg.per_second|L1/TEX Hit|L2 Hit|Mem Busy|Max Bandwidth|Mem Pipes Busy" $L/ncu-$label.log | head -24 | tee -a $R
}
prof chunk bench-all --suite decode --case sq128-sk8192-d128/contig --kernels persistent-hopper --no-peers
prof ladder bench-all --shape 4,16,2048,128 --causal off --dtypes f16 --kernels persistent-hopper --no-peers --quick
prof mission bench-all --shape 1,8,512,64 --causal off --dtypes f16 --kernels persistent-hopper --no-peers --quick
pack
