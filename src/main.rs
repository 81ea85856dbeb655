//! The `toyvm` command line.
fn main() {}
