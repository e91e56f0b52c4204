set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export CUDA_AOT_TEST_REGISTRY=.gpu/registry CUDA_AOT_TEST_TRUST=.gpu/root.json CUDA_AOT_FOREIGN_REGISTRY=.gpu/foreign-registry
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,compute_cap --format=csv; } > "$OUT/device.txt" 2>&1
run() { name=$1; shift; echo "== $name"; "$@" > "$OUT/$name.txt" 2>&1; echo "exit $?"; grep -E "^test |test result" "$OUT/$name.txt"; }
run runtime-tests .gpu/runtime_tests --ignored --test-threads=1 --nocapture
run foreign-tests .gpu/foreign_tests --ignored --test-threads=1 --nocapture
run prover .gpu/prover --registry .gpu/registry --trust .gpu/root.json; tail -3 $OUT/prover.txt
