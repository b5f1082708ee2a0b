//! The `lockstep` broker binary.
fn main() {
    println!("lockstep: broker not yet built");
}
