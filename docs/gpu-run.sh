#!/usr/bin/env bash
# The GPU host run: what docs/gpu.md describes. Expects the binaries, registries and trust
# root in .gpu/ (see docs/gpu.md for how they are built) and writes its logs to $OUT.
# Runs on one GPU or more: with two, the two-device test and start-up rows run too.
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export CUDA_AOT_TEST_REGISTRY=.gpu/registry CUDA_AOT_TEST_TRUST=.gpu/root.json
export CUDA_AOT_FOREIGN_REGISTRY=.gpu/foreign-registry
OUT=${OUT:-/tmp/cuda-aot-gpu}; mkdir -p "$OUT"
root=$PWD
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,compute_cap,memory.total --format=csv; } > "$OUT/device.txt" 2>&1
# The two-device test needs two GPUs: on a one-GPU host it is skipped, and said so.
gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | wc -l)
skip=(); if [ "$gpus" -lt 2 ]; then skip=(--skip two_devices); echo "== skipped: gpu_two_devices_* (needs two CUDA devices, this host has $gpus)" | tee "$OUT/skipped.txt"; fi
echo "== runtime GPU tests"; .gpu/runtime_tests --ignored --test-threads=1 --nocapture "${skip[@]}" 2>&1 | tee "$OUT/gpu-tests.txt" | grep -E "^test |test result"
echo "== foreign-style corpus GPU tests"; .gpu/foreign_tests --ignored --test-threads=1 --nocapture 2>&1 | tee "$OUT/foreign-tests.txt" | grep -E "^test |test result"
echo "== cuda layer GPU tests (research build)"; .gpu/lib_tests_research --ignored --test-threads=1 --nocapture 2>&1 | tee "$OUT/lib-tests-research.txt" | grep -E "^test |test result"
echo "== prover example"; .gpu/prover --registry .gpu/registry --trust .gpu/root.json > "$OUT/prover.txt" 2>&1; tail -5 "$OUT/prover.txt"
echo "== C++ prover example (cuda_aot.hpp over the C ABI; cuModuleLoadData, then cuLibraryLoadData)"
{ for api in "" --library; do .gpu/prover_cpp .gpu/registry .gpu/root.json --state "$OUT/cpp-state.json" $api; echo "exit $?"; done; } > "$OUT/prover-cpp.txt" 2>&1; cat "$OUT/prover-cpp.txt"
echo "== doctor (this host's devices, probed) for both registries"; { .gpu/xtask doctor --registry .gpu/registry --trust .gpu/root.json; echo "exit $?"; .gpu/xtask doctor --registry .gpu/foreign-registry --trust .gpu/root.json; echo "exit $?"; } > "$OUT/doctor.txt" 2>&1; cat "$OUT/doctor.txt"
echo "== LTO speed (foreign_ntt vs foreign_ntt_lto)"; .gpu/lto_speed --registry .gpu/foreign-registry --trust .gpu/root.json > "$OUT/lto-speed.txt" 2>&1; cat "$OUT/lto-speed.txt"
echo "== README example"; rd=$(mktemp -d); mkdir -p "$rd/.cuda-aot/dev-keys"; cp -r .gpu/registry "$rd/.cuda-aot/registry"; cp .gpu/root.json "$rd/.cuda-aot/dev-keys/"
(cd "$rd" && "$root/.gpu/readme") > "$OUT/readme.txt" 2>&1; cat "$OUT/readme.txt"
echo "== bench-load"; .gpu/xtask bench-load --registry .gpu/registry --trust .gpu/root.json --spec manifests/release.toml \
  --also-registry .gpu/foreign-registry --out "$OUT" --reps 20 > "$OUT/bench-load.txt" 2>&1; grep -E "^gate|wrote" "$OUT/bench-load.txt"
cat "$OUT/device.txt"
