//! cargo xtask: build, sign, publish and verify cuda-aot releases.
fn main() {}
