//! The `redlease` command.

fn main() {}
