#!/usr/bin/env bash
# The GPU host run: what docs/gpu.md describes. Expects the binaries, registry and trust
# root in .gpu/ (see docs/gpu.md for how they are built) and writes its logs to $OUT.
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export CUDA_AOT_TEST_REGISTRY=.gpu/registry CUDA_AOT_TEST_TRUST=.gpu/root.json
export CUDA_AOT_FOREIGN_REGISTRY=.gpu/foreign-registry
OUT=${OUT:-/tmp/cuda-aot-gpu}; mkdir -p "$OUT"
{ date -u; nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv; } > "$OUT/device.txt" 2>&1
echo "== runtime GPU tests"; .gpu/runtime_tests --ignored --test-threads=1 --nocapture 2>&1 | tee "$OUT/gpu-tests.txt"
echo "== foreign-style corpus GPU tests"; .gpu/foreign_tests --ignored --test-threads=1 --nocapture 2>&1 | tee "$OUT/foreign-tests.txt"
echo "== cuda layer GPU tests (research build)"; .gpu/lib_tests_research --ignored --test-threads=1 --nocapture 2>&1 | tee -a "$OUT/gpu-tests.txt"
echo "== prover example"; .gpu/prover --registry .gpu/registry --trust .gpu/root.json 2>&1 | tee "$OUT/prover.txt"
echo "== bench-load"; .gpu/xtask bench-load --registry .gpu/registry --trust .gpu/root.json --spec manifests/release.toml --out "$OUT" --reps 20 2>&1 | tee "$OUT/bench-load.txt"
cat "$OUT/device.txt"
