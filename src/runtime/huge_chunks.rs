//! Full-size segment-tail chunks in transparent huge pages: a global allocator, which hands
//! out every allocation from the system allocator except, once the runtime turned it on
//! ([`enable`]), the chunks a busy log's tail is kept in. The broker binary (`src/main.rs`)
//! and the benches that run the engine in process (`storage`, `broker`) declare it as their
//! `#[global_allocator]`; a library cannot (a bench counts heap bytes with an allocator of its
//! own), and without it [`enable`] changes nothing.
//!
//! Why: an `O_DIRECT` write goes to the device as one request per run of physically
//! contiguous memory, and a virtio disk takes at most [`virtio`'s `max_segments`] (254 here)
//! runs per request. A 1 MiB chunk in 4 KiB pages is 256 runs: each write became two or three
//! requests (`perf` on `block:block_rq_issue`: 2032 + 8 + 8 sectors). Carved from 2 MiB huge
//! pages, the chunk is one run and one request. Measured (on a virtio VM, 1 MiB `O_DIRECT` writes
//! into preallocated never-written extents, `fdatasync` every 8 MiB): 1.62–1.68 GB/s from
//! 4 KiB pages, 2.04–2.27 GB/s from a huge page.
//!
//! What it serves: `alloc` of exactly [`CHUNK_BYTES`] with [`CHUNK_ALIGN`] alignment (what a
//! glommio DMA buffer of a full tail chunk asks for: `storage::blocks` on a shard thread), from
//! regions of [`HUGE_CHUNKS_REGION_BYTES`] mapped 2 MiB-aligned with `MADV_HUGEPAGE` and carved
//! into slots; a freed slot goes back on one free list (any thread may free it) and is never
//! unmapped. At most [`HUGE_CHUNKS_BYTES_MAX`] is mapped; past it, and for everything else
//! (`alloc_zeroed` included), the system allocator. A slot is recognised on free by its address,
//! so memory from either side may be freed in any order. Without huge pages (THP off, no memory
//! to compact) a region still works, in small pages: only the gain is lost.
//!
//! [`virtio`'s `max_segments`]: https://docs.kernel.org/block/queue-sysfs.html

use crate::constants::{
    HUGE_CHUNKS_BYTES_MAX, HUGE_CHUNKS_REGION_BYTES, LOG_BLOCK_BYTES, LOG_TAIL_CHUNK_BYTES_MAX,
};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

/// The size of a slot: a full tail chunk.
pub const CHUNK_BYTES: usize = LOG_TAIL_CHUNK_BYTES_MAX as usize;
/// The alignment a DMA buffer asks for.
pub const CHUNK_ALIGN: usize = LOG_BLOCK_BYTES as usize;
const HUGE_PAGE_BYTES: usize = 2 << 20;
const REGIONS_MAX: usize = HUGE_CHUNKS_BYTES_MAX / HUGE_CHUNKS_REGION_BYTES;

const _: () = assert!(HUGE_CHUNKS_REGION_BYTES % HUGE_PAGE_BYTES == 0);
const _: () = assert!(HUGE_PAGE_BYTES % CHUNK_BYTES == 0 || CHUNK_BYTES % HUGE_PAGE_BYTES == 0);
const _: () = assert!(HUGE_CHUNKS_BYTES_MAX % HUGE_CHUNKS_REGION_BYTES == 0 && REGIONS_MAX > 0);

/// The global allocator (see the module docs).
pub struct HugeChunks;

static ENABLED: AtomicBool = AtomicBool::new(false);
/// Region starts, the first `REGION_COUNT` of them valid (written under `FREE`'s lock, read
/// without it: a region is published before any of its slots is handed out).
static REGIONS: [AtomicUsize; REGIONS_MAX] = [const { AtomicUsize::new(0) }; REGIONS_MAX];
static REGION_COUNT: AtomicUsize = AtomicUsize::new(0);
/// The free slots, an intrusive list (each free slot's first word is the next one's address;
/// 0 ends it).
static FREE: Mutex<usize> = Mutex::new(0);

/// Serves full tail chunks from huge pages from now on (the runtime, once, before its shards
/// start). Off until then: tools and tests get the system allocator only.
pub fn enable() {
    ENABLED.store(true, Ordering::Relaxed);
}

/// Whether `layout` is a slot's.
fn is_chunk(layout: Layout) -> bool {
    layout.size() == CHUNK_BYTES && layout.align() == CHUNK_ALIGN
}

/// Whether `ptr` lies in a region.
fn in_regions(ptr: *mut u8) -> bool {
    let at = ptr as usize;
    let count = REGION_COUNT.load(Ordering::Acquire);
    REGIONS[..count].iter().any(|start| {
        let start = start.load(Ordering::Relaxed);
        start <= at && at < start + HUGE_CHUNKS_REGION_BYTES
    })
}

/// Maps one more region (2 MiB-aligned, `MADV_HUGEPAGE`) and puts its slots on `free`; false
/// if the cap is reached or the kernel refused.
fn grow(free: &mut usize) -> bool {
    let count = REGION_COUNT.load(Ordering::Relaxed);
    if count == REGIONS_MAX {
        return false;
    }
    let len = HUGE_CHUNKS_REGION_BYTES + HUGE_PAGE_BYTES;
    // SAFETY: an anonymous private mapping at an address the kernel picks; no memory of ours
    // is touched. The unaligned head and tail are unmapped below, inside what was mapped.
    let mapped = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if mapped == libc::MAP_FAILED {
        return false;
    }
    let mapped = mapped as usize;
    let start = mapped.next_multiple_of(HUGE_PAGE_BYTES);
    let end = start + HUGE_CHUNKS_REGION_BYTES;
    // SAFETY: both ranges lie inside the mapping just made, which nothing else uses yet;
    // `madvise` only sets a paging hint on the kept range.
    unsafe {
        if start > mapped {
            libc::munmap(mapped as *mut libc::c_void, start - mapped);
        }
        if mapped + len > end {
            libc::munmap(end as *mut libc::c_void, mapped + len - end);
        }
        libc::madvise(
            start as *mut libc::c_void,
            HUGE_CHUNKS_REGION_BYTES,
            libc::MADV_HUGEPAGE,
        );
    }
    REGIONS[count].store(start, Ordering::Relaxed);
    REGION_COUNT.store(count + 1, Ordering::Release);
    for slot in (start..end).step_by(CHUNK_BYTES).rev() {
        // SAFETY: `slot` is the start of an unused, writable, word-aligned slot of the region.
        unsafe { (slot as *mut usize).write(*free) };
        *free = slot;
    }
    true
}

fn take() -> Option<*mut u8> {
    let mut free = FREE.lock().unwrap_or_else(|e| e.into_inner());
    if *free == 0 && !grow(&mut free) {
        return None;
    }
    let slot = *free;
    // SAFETY: a free slot's first word holds the next free slot (written by `grow` or `give`).
    *free = unsafe { (slot as *const usize).read() };
    Some(slot as *mut u8)
}

fn give(ptr: *mut u8) {
    let mut free = FREE.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: `ptr` is a slot being freed (its owner is done with it), word-aligned, writable.
    unsafe { (ptr as *mut usize).write(*free) };
    *free = ptr as usize;
}

// SAFETY: every layout is served either by `System` or by a slot of at least its size and
// alignment (`is_chunk`: exactly the slot's size, an alignment that divides the slot's), which
// no other allocation holds until freed; `dealloc` and `realloc` route a pointer back by its
// address, never by its layout alone.
unsafe impl GlobalAlloc for HugeChunks {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if is_chunk(layout) && ENABLED.load(Ordering::Relaxed) {
            if let Some(slot) = take() {
                return slot;
            }
        }
        // SAFETY: the caller's contract (a non-zero size) passes on unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as in `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if is_chunk(layout) && in_regions(ptr) {
            give(ptr);
            return;
        }
        // SAFETY: not a slot, so `System` allocated it with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if is_chunk(layout) && in_regions(ptr) {
            // A slot does not grow or shrink in place: move it (`System` serves the new size,
            // or a slot again if that is a chunk's).
            // SAFETY: the caller's contract: `new_size` is non-zero and fits the alignment.
            let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
            // SAFETY: as in `alloc`.
            let moved = unsafe { self.alloc(new_layout) };
            if !moved.is_null() {
                // SAFETY: both are live, distinct allocations of at least the copied length.
                unsafe { std::ptr::copy_nonoverlapping(ptr, moved, layout.size().min(new_size)) };
                give(ptr);
            }
            return moved;
        }
        // SAFETY: not a slot, so `System` allocated it with this layout.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_come_from_huge_page_regions_and_are_reused() {
        enable();
        let layout = Layout::from_size_align(CHUNK_BYTES, CHUNK_ALIGN).unwrap();
        let a = HugeChunks;
        // SAFETY: non-zero layouts; every pointer is freed once with its layout.
        unsafe {
            let slots: Vec<*mut u8> = (0..3).map(|_| a.alloc(layout)).collect();
            for &slot in &slots {
                assert!(!slot.is_null());
                assert!(in_regions(slot), "a chunk comes from a region");
                assert_eq!(slot as usize % CHUNK_ALIGN, 0);
                slot.write_bytes(0x5a, CHUNK_BYTES);
            }
            let mut distinct = slots.clone();
            distinct.sort();
            distinct.dedup();
            assert_eq!(distinct.len(), 3, "no slot handed out twice");
            // Other layouts are the system's.
            let other = Layout::from_size_align(CHUNK_BYTES, 8).unwrap();
            let heap = a.alloc(other);
            assert!(!in_regions(heap));
            a.dealloc(heap, other);
            let zeroed = a.alloc_zeroed(layout);
            assert!(!in_regions(zeroed));
            assert_eq!(*zeroed.add(CHUNK_BYTES - 1), 0);
            a.dealloc(zeroed, layout);
            // A freed slot goes back to the regions' free list.
            a.dealloc(slots[1], layout);
            let again = a.alloc(layout);
            assert!(in_regions(again));
            // realloc moves a slot out and keeps its bytes.
            let grown = a.realloc(slots[0], layout, 2 * CHUNK_BYTES);
            assert!(!in_regions(grown));
            assert_eq!(*grown.add(CHUNK_BYTES - 1), 0x5a);
            a.dealloc(
                grown,
                Layout::from_size_align(2 * CHUNK_BYTES, CHUNK_ALIGN).unwrap(),
            );
            for slot in [again, slots[2]] {
                a.dealloc(slot, layout);
            }
        }
    }
}
