set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export CUDA_AOT_TEST_REGISTRY=.gpu/registry CUDA_AOT_TEST_TRUST=.gpu/root.json CUDA_AOT_FOREIGN_REGISTRY=.gpu/foreign-registry
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,compute_cap,persistence_mode --format=csv; } > "$OUT/device.txt" 2>&1
run() { name=$1; shift; echo "== $name"; "$@" > "$OUT/$name.txt" 2>&1; echo "exit $?"; grep -E "test result" "$OUT/$name.txt"; }
run runtime-tests .gpu/runtime_tests --ignored --test-threads=1 --nocapture
run foreign-tests .gpu/foreign_tests --ignored --test-threads=1 --nocapture
run prover .gpu/prover --registry .gpu/registry --trust .gpu/root.json; tail -1 $OUT/prover.txt
O=$OUT/run4; mkdir -p $O
.gpu/xtask bench-load --registry .gpu/registry --trust .gpu/root.json --spec manifests/release.toml \
  --also-registry .gpu/foreign-registry --out "$O" --reps 20 --ratio-reps 300 --startup-reps 100 > "$O/bench-load.txt" 2>&1
echo "== run 4 $(date -u)"; grep -E "^gate|error" "$O/bench-load.txt"; rm -f $O/bare-images.json $O/bench-load.svg
