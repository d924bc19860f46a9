# Fourth run of session 16 (H100): the decode combine with every split's loads in flight at once
# (this tree, .carry/xtask) against the session's starting tree (cc9c79e, .carry/xtask-base), the
# decode suite's contiguous and paged-64 rows, no peers, alternated twice.
# Needs in .carry/: xtask (this tree), xtask-base (cc9c79e).
# Run from the repo root: bash docs/results/2026-11-26-session16-h100/run4/run4.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; R=$OUT/run4.txt; L=/tmp/logs4; mkdir -p $L
pack() { cd /tmp && tar cJf $OUT/logs.tar.xz logs4; cd - > /dev/null; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
for rep in 1 2; do for v in base new; do
  X=.carry/xtask; [ $v = base ] && X=.carry/xtask-base
  SECONDS=0
  timeout 140 $X bench-all --suite decode --kernels persistent-hopper --no-peers --case /contig --case /paged-64 --out-dir $L/$v$rep > $L/bench-$v$rep.log 2>&1
  echo "$v $rep rc=$? (${SECONDS}s)" | tee -a $R
  pack
done; done
echo "| row | storage | base1 | new1 | base2 | new2 |" | tee -a $R
paste -d'|' <(grep -E "^\| B=" $L/base1/bench-decode.md | cut -d'|' -f2,5,6) \
  <(grep -E "^\| B=" $L/new1/bench-decode.md | cut -d'|' -f6) \
  <(grep -E "^\| B=" $L/base2/bench-decode.md | cut -d'|' -f6) \
  <(grep -E "^\| B=" $L/new2/bench-decode.md | cut -d'|' -f6) | sed 's/(decode[^)]*)//; s/(speculative[^)]*)//; s/(chunked[^)]*)//' | cut -c1-200 | tee -a $R
