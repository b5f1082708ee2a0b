//! Segmented, CRC-framed partition logs (see schemas/FORMAT.md).
