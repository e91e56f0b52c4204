set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
O=$OUT/run3; mkdir -p $O
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,compute_cap,memory.total,persistence_mode --format=csv; } > "$O/device.txt" 2>&1
.gpu/xtask bench-load --registry .gpu/registry --trust .gpu/root.json --spec manifests/release.toml \
  --also-registry .gpu/foreign-registry --out "$O" --reps 20 --ratio-reps 300 --startup-reps 100 > "$O/bench-load.txt" 2>&1
echo "== run 3 $(date -u)"; grep -E "^gate|error" "$O/bench-load.txt"; rm -f $O/bare-images.json
