//! `cargo cuda-aot`: the same tool as `cargo xtask`, installed into any repository with
//! `cargo install --path xtask` (or `--git`), so a prover team runs the pipeline on its own
//! kernels with `cargo cuda-aot release --spec FILE`.

fn main() {
    xtask::main()
}
