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

use std::any::Any;
use std::cell::Cell;

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
