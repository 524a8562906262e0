//! [`CacheAligned`]: a global allocator that starts the executor's large blocks on a cache line.
//!
//! Why: the executor's tensors and packed weights are `Vec`s, which the C library's allocator
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
//!
//! Only blocks of [`ALIGNED_FROM`] bytes or more that a thread allocates while it prepares or
//! executes a graph (or works for the executor's thread pool) are aligned: aligning every large
//! block of a process raised `nnaccelctl run`'s peak memory on the 36 MB JSON of MobileNetV1 from
//! 193 to 236 MB (the JSON parser's growing vectors, copied instead of remapped, and the C
//! library's adaptive mmap threshold). Every block comes from `malloc` or `posix_memalign` and
//! goes back through `free`, so whether a block was aligned need not be known when it is freed or
//! grown.

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;

/// The alignment given to large blocks: a cache line on x86-64 and on the usual aarch64 cores.
pub const CACHE_LINE: usize = 64;

/// Blocks of at least this many bytes start on a cache line. Smaller ones (a name, a shape, a
/// bias of a few channels) keep the alignment they ask for: aligning them would waste up to a
/// line on each and gain nothing, as a kernel's rows are longer.
pub const ALIGNED_FROM: usize = 1024;

/// The alignment `malloc` guarantees on the 64-bit Linux targets (glibc and musl, x86-64 and
/// aarch64).
const MALLOC_ALIGN: usize = 16;

thread_local! {
    /// Whether this thread's large blocks are aligned now (see [`aligning`]). Const-initialized
    /// and without a destructor: reading it never allocates, as the allocator must not.
    static ALIGNING: Cell<bool> = const { Cell::new(false) };
}

/// While the returned guard lives, this thread's blocks of [`ALIGNED_FROM`] bytes or more start
/// on a cache line (when the program's allocator is [`CacheAligned`]). Guards nest.
pub(crate) fn aligning() -> Aligning {
    Aligning {
        was: ALIGNING.replace(true),
    }
}

/// See [`aligning`].
#[derive(Debug)]
pub(crate) struct Aligning {
    was: bool,
}

impl Drop for Aligning {
    fn drop(&mut self) {
        ALIGNING.set(self.was);
    }
}

/// The allocator of the C library, with the executor's large blocks on a cache line (see the
/// module documentation).
#[derive(Debug, Clone, Copy, Default)]
pub struct CacheAligned;

/// The alignment a block of `layout` gets: at least a cache line when this thread is aligning
/// and the block is [`ALIGNED_FROM`] bytes or more, else the layout's own.
fn alignment(layout: Layout) -> usize {
    let aligning = ALIGNING.try_with(Cell::get).unwrap_or(false);
    if aligning && layout.size() >= ALIGNED_FROM {
        layout.align().max(CACHE_LINE)
    } else {
        layout.align()
    }
}

/// A block of `size` (non-zero) bytes at `align`, from `malloc` or `posix_memalign`; null when
/// out of memory.
fn allocate(size: usize, align: usize) -> *mut u8 {
    if align <= MALLOC_ALIGN && align <= size {
        // SAFETY: malloc has no precondition; a non-null result is `size` bytes at
        // MALLOC_ALIGN, which `align` does not exceed.
        return unsafe { libc::malloc(size) }.cast();
    }
    let mut p = std::ptr::null_mut();
    // posix_memalign wants a power of two that is a multiple of the size of a pointer.
    let align = align.max(std::mem::size_of::<usize>());
    // SAFETY: `p` is a valid place for the result; `align` is a power of two (Layout's) and a
    // multiple of the pointer size.
    match unsafe { libc::posix_memalign(&mut p, align, size) } {
        0 => p.cast(),
        _ => std::ptr::null_mut(),
    }
}

// SAFETY: every block is `malloc`'s or `posix_memalign`'s, of the layout's size and at least its
// alignment, and goes back to `free` (directly, or through `realloc`, which both accept).
unsafe impl GlobalAlloc for CacheAligned {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        allocate(layout.size(), alignment(layout))
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let align = alignment(layout);
        if align <= MALLOC_ALIGN && align <= layout.size() {
            // SAFETY: calloc has no precondition; a non-null result is `size` zeroed bytes at
            // MALLOC_ALIGN.
            return unsafe { libc::calloc(1, layout.size()) }.cast();
        }
        let p = allocate(layout.size(), align);
        if !p.is_null() {
            // SAFETY: `p` is a fresh block of layout.size() bytes.
            unsafe { p.write_bytes(0, layout.size()) };
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: `ptr` is a block of this allocator (the caller's contract), so malloc's or
        // posix_memalign's, freed once.
        unsafe { libc::free(ptr.cast()) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // The caller guarantees that new_size at layout's alignment is a valid layout.
        let Ok(wanted) = Layout::from_size_align(new_size, layout.align()) else {
            return std::ptr::null_mut();
        };
        let align = alignment(wanted);
        if align <= MALLOC_ALIGN && align <= new_size {
            // SAFETY: `ptr` is malloc's or posix_memalign's (the caller's contract), which
            // realloc accepts; on failure it leaves the block as it was, as the trait wants.
            return unsafe { libc::realloc(ptr.cast(), new_size) }.cast();
        }
        // realloc cannot keep a larger alignment: a new block, then the bytes, then the old
        // one freed (so that on failure the old block is still the caller's).
        let moved = allocate(new_size, align);
        if !moved.is_null() {
            // SAFETY: the old block holds layout.size() bytes, the new one new_size; they are
            // distinct blocks.
            unsafe { std::ptr::copy_nonoverlapping(ptr, moved, layout.size().min(new_size)) };
            // SAFETY: the old block, freed once, after its bytes were copied.
            unsafe { libc::free(ptr.cast()) };
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

    /// Allocates `n` blocks of each size at alignment 4 and returns their addresses' offsets
    /// into a cache line, freeing them.
    fn offsets(sizes: &[usize], n: usize) -> Vec<usize> {
        let a = CacheAligned;
        let mut kept = Vec::new();
        for &size in sizes {
            for _ in 0..n {
                let l = layout(size, 4);
                // SAFETY: a non-zero size.
                let p = unsafe { a.alloc(l) };
                assert!(!p.is_null());
                kept.push((p, l));
            }
        }
        let offsets = kept.iter().map(|(p, _)| *p as usize % CACHE_LINE).collect();
        for (p, l) in kept {
            // SAFETY: allocated above with `l`, freed once.
            unsafe { a.dealloc(p, l) };
        }
        offsets
    }

    #[test]
    fn an_aligning_thread_s_large_blocks_start_on_a_cache_line() {
        let _aligned = aligning();
        // Several of each, so that one lucky placement cannot pass the test.
        let large = [ALIGNED_FROM, 4096, 4 * 1024 * 1024 + 4, 1_000_000];
        assert!(offsets(&large, 8).iter().all(|&o| o == 0));
        // Small blocks keep malloc's alignment.
        assert!(offsets(&[48], 8).iter().all(|&o| o % MALLOC_ALIGN == 0));
    }

    #[test]
    fn outside_the_executor_blocks_keep_the_alignment_they_ask_for() {
        // The guard is the thread's: spent, it restores the state before it.
        {
            let _inner = aligning();
        }
        let offsets = offsets(&[8192, 300_000], 16);
        assert!(offsets.iter().all(|&o| o % MALLOC_ALIGN == 0));
        // The C library puts these 16 bytes into a line (its chunk header), which is the
        // reason for this allocator; at least one of them shows it.
        assert!(offsets.iter().any(|&o| o != 0), "{offsets:?}");
    }

    #[test]
    fn larger_alignments_than_a_line_are_kept() {
        let a = CacheAligned;
        for aligned in [false, true] {
            let _guard = aligned.then(aligning);
            let l = layout(8192, 4096);
            // SAFETY: a non-zero size.
            let p = unsafe { a.alloc(l) };
            assert!(!p.is_null());
            assert_eq!(p as usize % 4096, 0);
            // SAFETY: allocated above with `l`.
            unsafe { a.dealloc(p, l) };
        }
    }

    #[test]
    fn zeroed_blocks_are_zero_and_aligned() {
        let a = CacheAligned;
        let _aligned = aligning();
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
    fn growing_and_shrinking_keeps_the_bytes_and_aligns_while_aligning() {
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
        // Blocks made outside the executor and grown inside it, and the other way round.
        let steps = [
            (ALIGNED_FROM - 1, true),
            (ALIGNED_FROM, true),
            (200_000, false),
            (300_000, true),
            (500, true),
            (64, false),
        ];
        for (new_size, aligned) in steps {
            let _guard = aligned.then(aligning);
            // SAFETY: `p` is this allocator's block of `size` bytes at alignment 4; the new
            // size is non-zero.
            let q = unsafe { a.realloc(p, layout(size, 4), new_size) };
            assert!(!q.is_null());
            if aligned && new_size >= ALIGNED_FROM {
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
    fn vectors_made_while_aligning_start_on_a_cache_line() {
        // The crate's tests declare the allocator (lib.rs), as the project's programs do; an
        // execution allocates its activations while aligning.
        let _aligned = aligning();
        let tensors: Vec<Vec<f32>> = (0..8).map(|_| Vec::with_capacity(112 * 112)).collect();
        for t in &tensors {
            assert_eq!(t.as_ptr() as usize % CACHE_LINE, 0);
        }
    }
}
