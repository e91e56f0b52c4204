set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for r in a b; do
O=$OUT/relabel-$r; mkdir -p $O
.gpu/xtask bench-load --registry .gpu/registry --trust .gpu/root.json --spec manifests/release.toml \
  --also-registry .gpu/foreign-registry --out "$O" --reps 3 --ratio-reps 300 --startup-reps 2 > "$O/bench-load.txt" 2>&1
echo "== $r $(date -u)"; grep -E "^gate: (bundle|foreign)_(load|bare_kept_vs|module_each_vs)|error" "$O/bench-load.txt"
rm -f $O/bare-images.json $O/bench-load.svg $O/bench-load.csv
done
