#!/bin/bash
# Bit-identity of two flashcore CLI builds on the forced decode kernel (persistent-hopper):
# bitid.sh BASE NEW DIR. bitid_inputs.py writes DIR's inputs; every (head dim 64/128/256/512,
# one or four query rows (causal), contiguous / pages of 64 / pages of 16 / e4m3 cache,
# one, three or twelve splits) runs under both builds, and O and LSE (float32 .npy) must match byte
# for byte. Prints one line a case and a count.
set -u
BASE=$1; NEW=$2; D=$3
export FLASHCORE_DECODE=force
one() {  # bin tag d sq cache splits
  local bin=$1 tag=$2 d=$3 sq=$4 cache=$5 s=$6 args=()
  local name=d$d-sq$sq-$cache-s$s
  [ $sq = 4 ] && args+=(--causal)
  case $cache in
    contig) args+=(--k $D/k-d$d.npy --v $D/v-d$d.npy) ;;
    p64|p16) args+=(--k $D/k-d$d-${cache/p/p}.npy --v $D/v-d$d-${cache/p/p}.npy --block-table $D/bt-d$d-$cache.npy) ;;
    e4m3) args+=(--k $D/k-d$d-e4m3.npy --v $D/v-d$d-e4m3.npy --kv-dtype e4m3 --k-descale $D/kdesc-d$d.npy --v-descale $D/vdesc-d$d.npy) ;;
  esac
  FLASHCORE_DECODE_SPLITS=$s $bin run --kernel persistent-hopper --dtype bf16 --q $D/q-d$d-sq$sq.npy \
    --seqused-k $D/seqused.npy "${args[@]}" --out $D/o-$tag-$name.npy --lse $D/lse-$tag-$name.npy \
    > $D/log-$tag-$name.txt 2>&1
  echo "$name $tag rc=$?"
}
export -f one; export D
for d in 64 128 256 512; do for sq in 1 4; do for cache in contig p64 p16 e4m3; do for s in 1 3 12; do
  echo "$BASE base $d $sq $cache $s"; echo "$NEW new $d $sq $cache $s"
done; done; done; done | xargs -P 8 -L 1 bash -c 'one "$@"' _ | sort > $D/rc.txt
grep -v "rc=0" $D/rc.txt | head
same=0; differ=0
for f in $D/o-base-*.npy; do
  name=${f#$D/o-base-}; name=${name%.npy}
  if cmp -s $f $D/o-new-$name.npy && cmp -s $D/lse-base-$name.npy $D/lse-new-$name.npy; then
    same=$((same + 1)); echo "$name identical"
  else
    differ=$((differ + 1)); echo "$name DIFFERS"
  fi
done
echo "bit-identity: $same identical, $differ differ, $(grep -vc 'rc=0' $D/rc.txt) runs failed"
