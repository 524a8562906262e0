//! [`CacheAligned`]: a global allocator that starts every block of [`ALIGNED_FROM`] bytes or
//! more on a cache line.
//!
//! Why: the executor's tensors and packed weights are `Vec`s, which the system allocator (glibc)
//! starts 16 bytes into a cache line (a large block is a page plus its 16-byte header). The GEMM
//! tile reads a row of A and stores a row of C 64 bytes at a time, so off a line each of those
//! touches two lines: a 1×1 convolution over 16 channels (MobileNetV2's first expansion, 112×112
//! pixels) took 532 µs with its input and output 16 bytes off a line and 486 µs on one; the whole
//! MobileNetV2 float32 took 5–7% less time (docs/performance.md). A `Vec` cannot ask for more
//! alignment than its element's, so the alignment comes from the allocator, which a program
//! declares once:
//!
//! ```ignore
//! #[global_allocator]
//! static ALLOCATOR: nnaccel_cpu::CacheAligned = nnaccel_cpu::CacheAligned;
//! ```
//!
//! The project's programs (`nnaccelctl`, `nnaccel-hald`, `nnaccel-sim`, the TFLite delegate and
//! the benches) do. A program that embeds the executor without it gets the same results, a little
//! slower.

use std::alloc::{GlobalAlloc, Layout, System};

/// The alignment given to large blocks: a cache line on x86-64 and on the usual aarch64 cores.
pub const CACHE_LINE: usize = 64;

/// Blocks of at least this many bytes start on a cache line. Smaller ones (a name, a shape, a
/// bias of a few channels) keep the alignment they ask for: aligning them would waste up to a
/// line on each and gain nothing, as a kernel's rows are longer.
pub const ALIGNED_FROM: usize = 1024;

/// The system allocator, with blocks of [`ALIGNED_FROM`] bytes or more on a cache line (see the
/// module documentation).
#[derive(Debug, Clone, Copy, Default)]
pub struct CacheAligned;

/// The layout `layout` is served with: the same size, at least [`CACHE_LINE`] alignment when
/// the size is [`ALIGNED_FROM`] or more. A function of the layout alone, so that a block is
/// freed (and grown) with the layout it was allocated with.
fn served(layout: Layout) -> Layout {
    if layout.size() >= ALIGNED_FROM && layout.align() < CACHE_LINE {
        // A power of two, and a size already valid at a smaller alignment rounds up to a
        // multiple of 64 far below isize::MAX; the fallback is never taken.
        Layout::from_size_align(layout.size(), CACHE_LINE).unwrap_or(layout)
    } else {
        layout
    }
}

// SAFETY: every block comes from `System` with `served(layout)`, whose size is the requested
// size and whose alignment is at least the requested one, so it satisfies `layout`; it goes
// back to `System` with `served` of the same layout, the layout it was allocated with.
unsafe impl GlobalAlloc for CacheAligned {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: `served` keeps the non-zero size the caller guarantees.
        unsafe { System.alloc(served(layout)) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as `alloc`.
        unsafe { System.alloc_zeroed(served(layout)) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by this allocator with `layout`, so by `System` with
        // `served(layout)` (the caller's contract and `alloc`).
        unsafe { System.dealloc(ptr, served(layout)) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let old = served(layout);
        // The caller guarantees that new_size at layout's alignment is a valid layout.
        let Ok(wanted) = Layout::from_size_align(new_size, layout.align()) else {
            return std::ptr::null_mut();
        };
        let new = served(wanted);
        if new.align() == old.align() {
            // SAFETY: `ptr` was allocated by `System` with `old` (as in `dealloc`), and the new
            // block is served at the same alignment.
            return unsafe { System.realloc(ptr, old, new_size) };
        }
        // Across ALIGNED_FROM the alignment changes, which `System.realloc` cannot do.
        // SAFETY: `new` has a non-zero size (new_size, non-zero by the caller's contract).
        let moved = unsafe { System.alloc(new) };
        if !moved.is_null() {
            // SAFETY: the old block holds layout.size() bytes, the new one new_size; they are
            // distinct blocks.
            unsafe { std::ptr::copy_nonoverlapping(ptr, moved, layout.size().min(new_size)) };
            // SAFETY: as in `dealloc`; the old block is freed only once its bytes are copied.
            unsafe { System.dealloc(ptr, old) };
        }
        moved
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(size: usize, align: usize) -> Layout {
        Layout::from_size_align(size, align).expect("a valid test layout")
    }

    #[test]
    fn large_blocks_start_on_a_cache_line_and_small_ones_as_asked() {
        let a = CacheAligned;
        let mut kept = Vec::new();
        // Several of each, so that one lucky placement cannot pass the test.
        for size in [ALIGNED_FROM, 4096, 4 * 1024 * 1024 + 4, 1_000_000] {
            for _ in 0..8 {
                let l = layout(size, 4);
                // SAFETY: a non-zero size.
                let p = unsafe { a.alloc(l) };
                assert!(!p.is_null());
                assert_eq!(p as usize % CACHE_LINE, 0, "{size} bytes off a cache line");
                kept.push((p, l));
            }
        }
        for _ in 0..8 {
            let l = layout(48, 16);
            // SAFETY: a non-zero size.
            let p = unsafe { a.alloc(l) };
            assert!(!p.is_null());
            assert_eq!(p as usize % 16, 0);
            kept.push((p, l));
        }
        for (p, l) in kept {
            // SAFETY: allocated above with `l`, freed once.
            unsafe { a.dealloc(p, l) };
        }
    }

    #[test]
    fn larger_alignments_than_a_line_are_kept() {
        let a = CacheAligned;
        let l = layout(8192, 4096);
        // SAFETY: a non-zero size.
        let p = unsafe { a.alloc(l) };
        assert!(!p.is_null());
        assert_eq!(p as usize % 4096, 0);
        // SAFETY: allocated above with `l`.
        unsafe { a.dealloc(p, l) };
    }

    #[test]
    fn zeroed_blocks_are_zero_and_aligned() {
        let a = CacheAligned;
        let l = layout(64 * 1024, 4);
        // SAFETY: a non-zero size.
        let p = unsafe { a.alloc_zeroed(l) };
        assert!(!p.is_null());
        assert_eq!(p as usize % CACHE_LINE, 0);
        // SAFETY: the block holds l.size() initialized (zeroed) bytes.
        let bytes = unsafe { std::slice::from_raw_parts(p, l.size()) };
        assert!(bytes.iter().all(|&b| b == 0));
        // SAFETY: allocated above with `l`.
        unsafe { a.dealloc(p, l) };
    }

    #[test]
    fn growing_and_shrinking_across_the_threshold_keeps_the_bytes_and_the_alignment() {
        let a = CacheAligned;
        let small = 100;
        let l = layout(small, 4);
        // SAFETY: a non-zero size.
        let mut p = unsafe { a.alloc(l) };
        assert!(!p.is_null());
        for i in 0..small {
            // SAFETY: i < the block's size.
            unsafe { p.wrapping_add(i).write(i as u8) };
        }
        let mut size = small;
        for new_size in [
            ALIGNED_FROM - 1,
            ALIGNED_FROM,
            3 * ALIGNED_FROM,
            200_000,
            500,
            64,
        ] {
            // SAFETY: `p` is this allocator's block of `size` bytes at alignment 4; the new
            // size is non-zero.
            let q = unsafe { a.realloc(p, layout(size, 4), new_size) };
            assert!(!q.is_null());
            if new_size >= ALIGNED_FROM {
                assert_eq!(q as usize % CACHE_LINE, 0, "grown to {new_size}");
            }
            let kept = small.min(new_size);
            // SAFETY: the block holds at least `kept` initialized bytes (realloc kept them).
            let bytes = unsafe { std::slice::from_raw_parts(q, kept) };
            assert!(bytes.iter().enumerate().all(|(i, &b)| b == i as u8));
            (p, size) = (q, new_size);
        }
        // SAFETY: this allocator's block of `size` bytes at alignment 4.
        unsafe { a.dealloc(p, layout(size, 4)) };
    }

    #[test]
    fn the_test_binary_s_vectors_start_on_a_cache_line() {
        // The crate's tests declare the allocator (lib.rs), as the project's programs do.
        let tensors: Vec<Vec<f32>> = (0..8).map(|_| Vec::with_capacity(112 * 112)).collect();
        for t in &tensors {
            assert_eq!(t.as_ptr() as usize % CACHE_LINE, 0);
        }
    }
}
