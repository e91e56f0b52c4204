#!/usr/bin/env bash
# Issue 7, build host: builds everything docs/gpu-review.sh runs on the GPU host, into the
# ignored folder .gpu/review/ (binaries, the AOT builds of the research kernel and of a
# deliberately altered copy of it, kernels/research/altered/). The GPU host has no Rust and
# no toolkit.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
G=.gpu/review
rm -rf "$G" && mkdir -p "$G/build"

# The newest test executable a `cargo test --no-run` built (its `executable` field).
exe() {
    cargo test --release --no-run --message-format=json "$@" |
        python3 -c 'import json, sys
ms = [json.loads(l) for l in sys.stdin]
print([m["executable"] for m in ms if m.get("reason") == "compiler-artifact" and m.get("executable") and "test" in m["target"]["kind"]][-1])'
}

cargo build --release -p xtask --bin xtask
cargo build --release -p cuda-aot-kernels --features research --bin parity-runner
cargo build --release --example prover
cp target/release/xtask target/release/parity-runner target/release/examples/prover "$G/"
cp "$(exe -p cuda-aot-kernels --features research --test parity_gpu)" "$G/parity_gpu_tests"
cp "$(exe -p cuda-aot --features research --test promoted)" "$G/promoted_tests"

# The research kernel, built AOT for the H200 (sm_90, sm_90a) in the production channel:
# it is promoted into a production registry there.
cargo xtask build --spec kernels/research/research.toml --module ntt_fused \
    --target sm_90 --target sm_90a --channel production --out "$G/build/ntt_fused"

# The altered kernel (kernels/research/altered/, committed): ntt_stages' twiddle index
# forgets the tile's low bits (l), which only matters from the second fused launch on
# (s0 > 0). The same spec but for its include folder, re-rooted to that folder; a CI test
# (xtask/tests/promote.rs) keeps both files equal to the research kernel's but for that.
cargo xtask build --spec kernels/research/altered/research.toml --module ntt_fused \
    --target sm_90 --target sm_90a --channel production --out "$G/build/ntt_fused_altered"

strip "$G/xtask" "$G/parity-runner" "$G/prover" "$G/parity_gpu_tests" "$G/promoted_tests"
ls -la "$G" "$G/build"/*
