set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,compute_cap,memory.total,persistence_mode --format=csv; } > "$OUT/device.txt" 2>&1
bash .gpu/ctxprobe/run.sh > $OUT/ctxprobe.txt 2>&1; echo "ctxprobe exit $?"; head -8 $OUT/ctxprobe.txt
O=$OUT/run1; mkdir -p $O
.gpu/xtask bench-load --registry .gpu/registry --trust .gpu/root.json --spec manifests/release.toml \
  --also-registry .gpu/foreign-registry --out "$O" --reps 20 --ratio-reps 300 --startup-reps 100 > "$O/bench-load.txt" 2>&1
echo "== run 1 $(date -u)"; grep -E "^gate|error" "$O/bench-load.txt"; grep startup "$O/bench-load.txt" | head -8
rm -f $O/bare-images.json
