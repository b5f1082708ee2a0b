//! `lockstep-inspect`: read-only inspector of segment logs and the state journal.
fn main() {}
