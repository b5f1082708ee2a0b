//! Memory the storage engine writes from without copying: a segment's tail is kept in
//! [`BlockMemory`] chunks that a flush hands to the engine whole.
//!
//! The core (`src/log/`) allocates chunks through [`alloc_blocks`]; which memory it gets is
//! the thread's [`BlockAllocator`]: plain heap memory by default (the crash double, tools,
//! synchronous paths), the runtime's DMA buffers on a shard thread (set once at shard start
//! with [`set_thread_allocator`]), which the engine writes `O_DIRECT` as they are. The engine
//! recognises its own memory with [`BlockMemory::as_any`]; any other memory it copies.
//!
//! Invariant (checked by the owner, the segment's tail): a chunk handed to a write is never
//! mutated again; it is shared (`Rc`) between the tail, which reads from it, and the write.

use crate::constants::{LOG_BLOCK_BYTES, LOG_ZERO_FILL_BYTES};
use std::any::Any;
use std::cell::Cell;

/// Zeros to write ahead of a block write that ends at `end` (block aligned) into a
/// preallocated segment file (partition log or journal), given that the file's bytes below
/// `*zeroed` were written (data or zeros) and `allocated` bytes are preallocated: at most
/// [`LOG_ZERO_FILL_BYTES`] past the zeroed end (capped at the last whole block of
/// `allocated`), once less than half of that is zeroed ahead of `end`. Returns
/// `(position, len)` and advances `*zeroed`.
///
/// Why: preallocated extents are *unwritten* on ext4, so an `O_DIRECT` write into them
/// converts extents, metadata that the durable write then has to commit (and io_uring hands
/// such a write to its worker threads). Later block writes over the zeros overwrite written
/// blocks: no metadata change. The range never holds data the file should have (it starts at
/// or past `end`, and data past `end` reaches the file only through later flushes), so it may
/// be written concurrently with the rest of the flush; a crash leaves zeros or unwritten
/// extents there, both a clean end (FORMAT.md §5).
///
/// Adaptive: a block write that ends a whole fill or more past the zeroed end was a large
/// flush, which converted its own extents once for many bytes; zeros ahead of it would add a
/// fill to every such flush for little gain, so none is written (the next small flush starts
/// filling again).
pub fn zero_ahead(zeroed: &mut u64, end: u64, allocated: u64) -> Option<(u64, u64)> {
    assert_eq!(end % LOG_BLOCK_BYTES, 0, "a block write ends on a block");
    if end >= *zeroed + LOG_ZERO_FILL_BYTES {
        *zeroed = end;
        return None;
    }
    let from = (*zeroed).max(end);
    *zeroed = from;
    if from - end >= LOG_ZERO_FILL_BYTES / 2 {
        return None;
    }
    let to = (from + LOG_ZERO_FILL_BYTES).min(allocated / LOG_BLOCK_BYTES * LOG_BLOCK_BYTES);
    if to <= from {
        return None;
    }
    *zeroed = to;
    Some((from, to - from))
}

/// A fixed-length run of bytes an engine can write from (block aligned when it came from the
/// runtime's allocator).
pub trait BlockMemory: Any {
    fn bytes(&self) -> &[u8];
    fn bytes_mut(&mut self) -> &mut [u8];
    /// Shortens the memory to `len` bytes (never lengthens it): what a write of it covers.
    fn truncate(&mut self, len: usize);
    fn as_any(&self) -> &dyn Any;
}

/// Heap memory (a `Vec`), zero-filled: the default allocator's.
pub struct HeapBlocks(pub Vec<u8>);

impl BlockMemory for HeapBlocks {
    fn bytes(&self) -> &[u8] {
        &self.0
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.0
    }
    fn truncate(&mut self, len: usize) {
        assert!(len <= self.0.len(), "block memory never grows");
        self.0.truncate(len);
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Allocates `len` bytes of block memory (contents unspecified).
pub type BlockAllocator = fn(usize) -> Box<dyn BlockMemory>;

fn heap_blocks(len: usize) -> Box<dyn BlockMemory> {
    Box::new(HeapBlocks(vec![0; len]))
}

thread_local! {
    static ALLOCATOR: Cell<BlockAllocator> = const { Cell::new(heap_blocks) };
}

/// Makes `allocator` this thread's block allocator (the runtime, once per shard thread).
pub fn set_thread_allocator(allocator: BlockAllocator) {
    ALLOCATOR.with(|a| a.set(allocator));
}

/// `len` bytes of this thread's block memory.
pub fn alloc_blocks(len: usize) -> Box<dyn BlockMemory> {
    let memory = ALLOCATOR.with(|a| a.get())(len);
    assert_eq!(
        memory.bytes().len(),
        len,
        "the allocator gives what was asked"
    );
    memory
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_ahead_skips_after_a_large_write_and_stops_at_the_end() {
        let fill = LOG_ZERO_FILL_BYTES;
        let mut zeroed = 0;
        // A first write far past the zeroed end converted its own extents: no zeros.
        assert_eq!(zero_ahead(&mut zeroed, 2 * fill, 10 * fill), None);
        assert_eq!(zeroed, 2 * fill);
        // The next small write gets a whole fill after it.
        assert_eq!(
            zero_ahead(&mut zeroed, 2 * fill + 4096, 10 * fill),
            Some((2 * fill + 4096, fill))
        );
        // Then none until less than half a fill is left ahead.
        assert_eq!(zero_ahead(&mut zeroed, 2 * fill + 8192, 10 * fill), None);
        let near = 3 * fill + 4096 - fill / 2 + 4096;
        assert_eq!(
            zero_ahead(&mut zeroed, near, 10 * fill),
            Some((3 * fill + 4096, fill))
        );
        // Capped at the last whole block of the segment.
        let mut zeroed = 0;
        let len = fill + 4096 + 100;
        assert_eq!(zero_ahead(&mut zeroed, 4096, len), Some((4096, fill)));
        assert_eq!(zero_ahead(&mut zeroed, fill, len), None);
        assert_eq!(zeroed, fill + 4096);
    }
}
