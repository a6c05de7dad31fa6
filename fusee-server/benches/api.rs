//! Placeholder (the bench follows).
fn main() {}
