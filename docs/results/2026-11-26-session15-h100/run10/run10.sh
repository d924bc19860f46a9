# Tenth run of session 15 (H100), the final tree: as run9, with the Hopper forward launched
# programmatically for dense problems only (run9: the modes build's chunked-prefill row 1-2 %
# slower with it). Timing only (the kernels are run9's): the default plans against PDL off
# (FLASHCORE_DECODE_PDL=0 FLASHCORE_HOPPER_PDL=0), alternated twice, on the decode suite's
# contiguous rows and the mission shape.
# Needs in .carry/: xtask (this tree).
# Run from the repo root: bash docs/results/2026-11-26-session15-h100/run10/run10.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; X=.carry/xtask; R=$OUT/run10.txt; L=/tmp/logs10; mkdir -p $L /tmp/v10
pack() { cd /tmp && tar cJf $OUT/logs.tar.xz logs10; cd - > /dev/null; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
for rep in 1 2; do for v in on off; do
  E=A=1; [ $v = off ] && E="FLASHCORE_DECODE_PDL=0 FLASHCORE_HOPPER_PDL=0"
  env $E timeout 80 $X bench-all --suite decode --kernels persistent-hopper --no-peers --case contig --out-dir $L/$v$rep > $L/bench-$v$rep.log 2>&1
  echo "decode PDL $v $rep rc=$?: $(grep -E '^\| B=' $L/$v$rep/bench-decode.md | cut -d'|' -f6 | tr '\n' ' ' | tr -s ' ')" | tee -a $R
  env $E timeout 60 $X bench-all --suite mission --kernels persistent-hopper --no-peers --out-dir $L/m-$v$rep > $L/mission-$v$rep.log 2>&1
  echo "mission PDL $v $rep: $(grep -E '^\| 1,8,512,64 \| f16 \| (no|yes) \| persistent-hopper \| graph' $L/m-$v$rep/bench-all.md | cut -d'|' -f4,7 | tr '\n' ' ' | tr -s ' ')" | tee -a $R
  pack
done; done
