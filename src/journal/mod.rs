//! The memory-mapped state journal (see schemas/FORMAT.md).
