//! `cargo xtask`: see the library's documentation.

fn main() {
    xtask::main()
}
