set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T="glibc.malloc.trim_threshold=1073741824:glibc.malloc.mmap_threshold=1073741824:glibc.malloc.top_pad=67108864"
for r in a b; do
for v in tunables control; do
O=$OUT/$v-$r; mkdir -p $O
if [ $v = tunables ]; then export GLIBC_TUNABLES=$T; else unset GLIBC_TUNABLES; fi
.gpu/xtask bench-load --registry .gpu/registry --trust .gpu/root.json --spec manifests/release.toml \
  --also-registry .gpu/foreign-registry --out "$O" --reps 3 --ratio-reps 300 --startup-reps 2 > "$O/bench-load.txt" 2>&1
echo "== $v $r"; grep -E "^gate: bundle_(load_vs|load_unload_vs_bare |module_each)" "$O/bench-load.txt"
rm -f $O/bare-images.json $O/bench-load.svg $O/bench-load.csv
done; done
