#!/usr/bin/env bash
# Issue 7, GPU host: one run that promotes the research kernel and shows each property,
# writing everything to $OUT. Expects .gpu/review/ from docs/gpu-review-prep.sh (build
# host) and the checkout (specs and sources). Private keys are generated into a temporary
# folder outside $OUT and deleted at the end: only public files come back.
#
#  1. parity of ntt_fused: NVRTC build vs AOT cubins (sm_90, sm_90a) vs CPU reference;
#  2. parity of the altered kernel: stops at the first differing output;
#  3. the GPU tests of both (parity_gpu_tests);
#  4. generated root, builder, two reviewer and publisher keys; a production trust root
#     with a reviewer threshold of 2;
#  5. promote with the altered kernel's report: refused;
#  6. promote ntt_fused (report, resource review, two reviewers) and publish it into a
#     production registry;
#  7. verify --production;
#  8. the promoted kernel loaded and run under Policy::production(); an NVRTC research
#     module refused by that runtime (promoted_tests);
#  9. the example prover on the production registry (--production);
# 10. the C++ example prover on it under the production policy (.gpu/prover_cpp, from
#     cargo xtask gpu-bundle, which runs before docs/gpu-review-prep.sh).
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
G=.gpu/review
OUT=${OUT:-/tmp/cuda-aot-review}
mkdir -p "$OUT"
KEYS=$(mktemp -d /tmp/cuda-aot-review-keys.XXXXXX)
WORK=$(mktemp -d /tmp/cuda-aot-review-work.XXXXXX)
trap 'rm -rf "$KEYS" "$WORK"' EXIT
step() { echo; echo "== $*"; }
{ date -u; nvidia-smi --query-gpu=name,uuid,driver_version,compute_cap,memory.total --format=csv; } > "$OUT/device.txt" 2>&1

export CUDA_AOT_PARITY_RUNNER=$G/parity-runner
export CUDA_AOT_PARITY_SPEC=kernels/research/research.toml CUDA_AOT_PARITY_BUILD=$G/build/ntt_fused
export CUDA_AOT_PARITY_ALTERED_SPEC=kernels/research/altered/research.toml CUDA_AOT_PARITY_ALTERED_BUILD=$G/build/ntt_fused_altered

{
step "1. parity: ntt_fused"
$G/parity-runner --spec kernels/research/research.toml --module ntt_fused \
    --build $G/build/ntt_fused --report "$OUT/parity-ntt_fused.json"
echo "exit $?"

step "2. parity: the altered ntt_fused"
$G/parity-runner --spec kernels/research/altered/research.toml --module ntt_fused \
    --build $G/build/ntt_fused_altered --report "$OUT/parity-ntt_fused-altered.json"
echo "exit $?"

step "3. GPU tests: parity passes, the altered kernel is named"
$G/parity_gpu_tests --ignored --test-threads=1 --nocapture

step "4. keys (in $KEYS, deleted at exit) and a production trust root, reviewer threshold 2"
for r in root builder reviewer reviewer2 publisher; do
    $G/xtask keygen --role "${r%2}" --out "$KEYS/$r.key" > "$KEYS/$r.pub" || exit 1
done
$G/xtask trust-root --out "$OUT/root.json" --channel production \
    --root "$(cat $KEYS/root.pub)" --builder "$(cat $KEYS/builder.pub)" \
    --reviewer "$(cat $KEYS/reviewer.pub)" --reviewer "$(cat $KEYS/reviewer2.pub)" \
    --reviewer-threshold 2 --publisher "$(cat $KEYS/publisher.pub)" --sign-with "$KEYS/root.key"

step "5. promote with the altered kernel's report (refused)"
mkdir -p "$WORK/altered" && cp -r $G/build/ntt_fused_altered "$WORK/altered/build"
$G/xtask promote ntt_fused --spec kernels/research/altered/research.toml --out "$WORK/altered" --reuse-build \
    --trust "$OUT/root.json" --registry "$WORK/unused-registry" \
    --parity-report "$OUT/parity-ntt_fused-altered.json" \
    --reviewer-key "$KEYS/reviewer.key" --reviewer-key "$KEYS/reviewer2.key"
echo "exit $?"

step "6. promote ntt_fused and publish it into a production registry"
mkdir -p "$WORK/promote" && cp -r $G/build/ntt_fused "$WORK/promote/build"
$G/xtask promote ntt_fused --spec kernels/research/research.toml --out "$WORK/promote" --reuse-build \
    --trust "$OUT/root.json" --registry "$OUT/registry" \
    --parity-report "$OUT/parity-ntt_fused.json" \
    --reviewer-key "$KEYS/reviewer.key" --reviewer-key "$KEYS/reviewer2.key" \
    --note "parity on the H200 (NVRTC, sm_90, sm_90a, CPU); resources reviewed: 9 KiB shared per block, no local memory" \
    --publish --builder-key "$KEYS/builder.key" --publisher-key "$KEYS/publisher.key"
echo "exit $?"
cp "$WORK/promote/review.json" "$OUT/review.json" 2>/dev/null
cp "$WORK/promote/build/promotions/ntt_fused.json" "$OUT/promotion-ntt_fused.json" 2>/dev/null

step "7. verify --production"
$G/xtask verify --production --registry "$OUT/registry" --trust "$OUT/root.json" --state "$WORK/state.json"
echo "exit $?"

step "8. load and run under Policy::production(); a research module refused"
CUDA_AOT_PROMOTED_REGISTRY="$OUT/registry" CUDA_AOT_PROMOTED_TRUST="$OUT/root.json" \
    $G/promoted_tests --ignored --test-threads=1 --nocapture

step "9. the example prover under Policy::production()"
$G/prover --production --registry "$OUT/registry" --trust "$OUT/root.json" --log-n 20
echo "exit $?"

step "10. the C++ example prover under the production policy"
.gpu/prover_cpp "$OUT/registry" "$OUT/root.json" --production --state "$WORK/cpp-state.json"
echo "exit $?"
} 2>&1 | tee "$OUT/review-run.txt"
cat "$OUT/device.txt"
