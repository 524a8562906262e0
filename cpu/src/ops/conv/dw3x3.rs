//! The AVX2+FMA kernel of the float 3×3 depthwise convolution (multiplier 1, stride 1 or 2, no
//! dilation), on channel-blocked copies of the input rows.
//!
//! NHWC keeps a pixel's channels together, so a kernel that holds one vector of 8 channels'
//! filter taps in registers and walks along a row jumps `c` floats from pixel to pixel, and
//! reads each cache line in two passes; a kernel that walks the channels of one pixel instead
//! reloads the nine taps for every 8 outputs. Each input row is therefore copied once into
//! blocks of 8 channels, `[c/8][column][8]`, with the padding columns as zeros: along a row of
//! a block the window's loads then sit at fixed offsets from one pointer and run through
//! consecutive memory, the taps stay in registers for the whole row, and border pixels need no
//! case of their own. A copied row serves the three output rows that read it (one or two at
//! stride 2).

use std::arch::x86_64::*;
use std::mem::MaybeUninit;

use super::DepthwiseF32;

/// Channels per block: one AVX register.
const LANES: usize = 8;

/// Floats per block of the packed filter: the bias, then the nine taps.
const PACKED: usize = 10 * LANES;

/// The three input rows an output row reads, channel-blocked and zero-padded (see the module
/// comment), held in three slots: input row `iy` in slot `iy % 3`, so the rows of consecutive
/// output rows, which advance by the stride, never evict each other; and a fourth slot of zeros
/// for the window rows above and below the input.
///
/// Each thread keeps its own from one run of output rows to the next ([`KEPT`]): the runs a
/// thread takes in turn are contiguous (`par`'s shares), so the next run finds the two rows its
/// first output row shares with the last one's already copied, and nothing is allocated or
/// cleared again; nor for the next operation of the same shape, whose rows leave the same
/// padding columns zero. Split in runs of a few rows, a 28×28×192 layer made each of its six
/// runs allocate and clear 92 KiB and copy two input rows twice.
#[derive(Default)]
struct BlockedRows {
    /// `[slot][block][column][LANES]`, four slots.
    buf: Vec<f32>,
    /// The operation ([`Shape3x3::id`]) whose rows the slots hold, from which block of
    /// channels on.
    op: u64,
    first_block: usize,
    /// The (image, input row) each slot holds.
    held: [Option<(usize, usize)>; 3],
    /// Where the rows lie in the slots: what is zero in them follows from it.
    layout: RowLayout,
}

/// The layout of [`BlockedRows`]' slots for one operation.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
struct RowLayout {
    /// Floats per slot.
    slot: usize,
    /// Columns per block: `(ow − 1)·s + 3`, the input's from `−pad_l` on.
    cols: usize,
    /// The input's first column's, its columns and its channels: [`BlockedRows::fill`] never
    /// writes the columns before `pad_l` or from `pad_l + w` on, nor the lanes from `c` on.
    pad_l: usize,
    w: usize,
    c: usize,
    /// How many blocks of channels are copied (not which: the padding columns of another
    /// run of as many blocks are the same floats).
    blocks: usize,
}

/// The slot of [`BlockedRows`] that holds zeros.
const ZEROS: usize = 3;

/// Floats of blocked rows a thread keeps after a run (4 MiB); a larger layer's are freed.
const KEPT_AT_MOST: usize = 1 << 20;

thread_local! {
    /// This thread's blocked rows, kept between its runs ([`BlockedRows`]).
    static KEPT: std::cell::Cell<Option<BlockedRows>> = const { std::cell::Cell::new(None) };
}

/// A number no other operation's [`Shape3x3`] has had in this process.
fn next_op_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// What both 3×3 kernels start from, made once per operation and shared by the runs its
/// output is split into: the operation's extents and its packed filter.
pub(super) struct Shape3x3 {
    /// Input and output height and width.
    in_hw: (usize, usize),
    out_hw: (usize, usize),
    /// Channels, and their blocks of [`LANES`].
    c: usize,
    pub(super) blocks: usize,
    /// The filter and bias, [`PACKED`] floats per block ([`DepthwiseF32::packed_3x3`]).
    packed: Vec<f32>,
    /// This operation's run among all the 3×3 operations run in this process, which tells the
    /// rows a thread kept from it from rows kept from any other ([`BlockedRows`]).
    id: u64,
}

impl DepthwiseF32<'_> {
    /// The shape both 3×3 kernels start from, with the filter packed; None when the output is
    /// empty (nothing to compute).
    pub(super) fn shape_3x3(&self) -> Option<Shape3x3> {
        let (oh, ow) = self.win.out_hw;
        let c = self.win.c;
        if ow == 0 || oh == 0 || c == 0 {
            return None;
        }
        let blocks = c.div_ceil(LANES);
        Some(Shape3x3 {
            in_hw: self.win.in_hw,
            out_hw: (oh, ow),
            c,
            blocks,
            packed: self.packed_3x3(blocks),
            id: next_op_id(),
        })
    }

    /// Output rows `r0..` (row = one (image, y) pair) into `out`, every element written: at
    /// stride 2 reading the input where it lies ([`Self::rows_direct`]), at stride 1 from its
    /// rows copied into channel blocks ([`Self::rows_blocked`]); the module comment and
    /// `docs/dependencies.md` say why each.
    ///
    /// # Safety
    /// The CPU supports AVX2 and FMA; [`Self::is_3x3`] holds; the filter holds `9·c` floats and
    /// the bias `c` (all as [`Self::blocked`] checks); `shape` is this operation's
    /// ([`Self::shape_3x3`]).
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn rows_3x3_avx2_fma(
        &self,
        shape: &Shape3x3,
        r0: usize,
        out: &mut [MaybeUninit<f32>],
    ) {
        if self.win.g.stride_w == 2 {
            // SAFETY: this function's contract.
            unsafe { self.rows_direct(shape, r0, out) }
        } else {
            let rows = out.len() / (shape.out_hw.1 * shape.c);
            // SAFETY: as above; `out` holds those rows from r0 on, every channel.
            unsafe {
                self.rows_blocked(
                    shape,
                    r0..r0 + rows,
                    out.as_mut_ptr().cast(),
                    0..shape.blocks,
                )
            }
        }
    }

    /// Output rows `rows` (from row `rows.start` at `out`), blocks `bl` of their channels, at
    /// stride 1, on blocked copies of those blocks of the input rows: a run of a split by rows
    /// ([`Self::rows_3x3_avx2_fma`], every block) or a part of a split by channels (all rows,
    /// [`DepthwiseF32::output`]).
    ///
    /// # Safety
    /// As [`Self::rows_3x3_avx2_fma`], `shape` this operation's, the stride 1; `out` valid for
    /// writes of those rows' channels of blocks `bl` (which lies within `0..shape.blocks`),
    /// which nothing else reads or writes meanwhile.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn rows_blocked(
        &self,
        shape: &Shape3x3,
        rows: std::ops::Range<usize>,
        out: *mut f32,
        bl: std::ops::Range<usize>,
    ) {
        let (g, x) = (&self.win.g, self.win.x);
        let ((h, w), (oh, ow), c, s) = (shape.in_hw, shape.out_hw, shape.c, g.stride_w);
        let packed = &shape.packed;
        let cols = (ow - 1) * s + 3;
        let slot = bl.len() * cols * LANES;
        let r0 = rows.start;
        let mut kept = KEPT.take().unwrap_or_default();
        kept.start(
            shape.id,
            RowLayout {
                slot,
                cols,
                pad_l: g.pad_l,
                w,
                c,
                blocks: bl.len(),
            },
            bl.start,
        );
        let (lo, hi) = (_mm256_set1_ps(self.win.lo), _mm256_set1_ps(self.win.hi));
        let in_row = w * c;
        for r in rows {
            let (b, oy) = (r / oh, r % oh);
            // The slot of each window row, filled from the input unless it holds that row
            // already; None (a row of zeros) above and below the input, or where the input is
            // shorter than its shape says.
            let slots: [Option<usize>; 3] = std::array::from_fn(|ky| {
                let iy = g.in_y(oy, ky, h)?;
                let at = iy % 3;
                if kept.held[at] != Some((b, iy)) {
                    let start = (b * h + iy) * in_row;
                    kept.held[at] = None;
                    kept.fill(at, x.get(start..start + in_row)?);
                    kept.held[at] = Some((b, iy));
                }
                Some(at)
            });
            let window = slots.map(|at| &kept.buf[at.unwrap_or(ZEROS) * slot..][..slot]);
            let orow = out.wrapping_add((r - r0) * ow * c);
            for (i, blk) in bl.clone().enumerate() {
                let taps = &packed[blk * PACKED..(blk + 1) * PACKED];
                // Spelled out: `array::map` here was not inlined (a call per block).
                let span = i * cols * LANES..(i + 1) * cols * LANES;
                let in_blk = [
                    &window[0][span.clone()],
                    &window[1][span.clone()],
                    &window[2][span],
                ];
                // SAFETY: AVX2 and FMA are enabled here; `taps` holds PACKED floats, each
                // of `in_blk` cols·LANES with cols = (ow − 1)·s + 3, `orow` is output row r
                // (ow·c floats, its block blk ours to write, caller) and blk·LANES < c.
                unsafe { row_block(taps, in_blk, s, ow, (lo, hi), orow, c, blk * LANES) };
            }
        }
        if kept.buf.len() <= KEPT_AT_MOST {
            KEPT.set(Some(kept));
        }
    }

    /// The filter and bias as [`PACKED`] floats per block of channels (zeros past `c`).
    fn packed_3x3(&self, blocks: usize) -> Vec<f32> {
        let c = self.win.c;
        let mut p = vec![0f32; blocks * PACKED];
        for (blk, dst) in p.chunks_exact_mut(PACKED).enumerate() {
            let (c0, n) = (blk * LANES, LANES.min(c - blk * LANES));
            dst[..n].copy_from_slice(&self.win.bias[c0..c0 + n]);
            for t in 0..9 {
                let at = LANES * (t + 1);
                dst[at..at + n].copy_from_slice(&self.f[t * c + c0..t * c + c0 + n]);
            }
        }
        p
    }
}

impl BlockedRows {
    /// Ready for operation `op`'s rows from block `first_block` on, laid out as `layout`
    /// says: the rows it holds kept if they are those, else none held; cleared unless the
    /// slots were last laid out the same way (the padding columns and the slot of zeros must
    /// read zero, and nothing but `fill` writes into the slots). The lanes past `c` of the last
    /// block may hold another run's channels: they only make outputs past `c`, which
    /// `row_block` never stores.
    fn start(&mut self, op: u64, layout: RowLayout, first_block: usize) {
        if self.layout != layout || self.buf.len() != 4 * layout.slot {
            self.buf.clear();
            self.buf.resize(4 * layout.slot, 0.0);
            self.layout = layout;
            self.op = 0;
        }
        if (self.op, self.first_block) != (op, first_block) {
            (self.op, self.first_block) = (op, first_block);
            self.held = [None; 3];
        }
    }

    /// Copies the blocks of channels from `first_block` on, as many as the layout's, of the
    /// NHWC row `src` (`w·c` floats) into slot `slot`, column `x + pad_l` for input column `x`.
    /// Columns left of `pad_l` and right of the input are never written, so they stay zero.
    #[inline(always)]
    fn fill(&mut self, slot: usize, src: &[f32]) {
        let RowLayout {
            slot: len,
            cols,
            pad_l,
            c,
            blocks,
            ..
        } = self.layout;
        let (b0, b1) = (self.first_block, self.first_block + blocks);
        let dst = &mut self.buf[slot * len..(slot + 1) * len];
        let whole_end = b1.min(c / LANES);
        for (x, px) in src.chunks_exact(c).enumerate() {
            let col = x + pad_l;
            if col >= cols {
                break;
            }
            // Whole blocks as fixed-size copies (a vector move each; a copy of a length
            // known only at run time would be a call to memmove per block).
            let lanes = px.get(b0 * LANES..whole_end * LANES).unwrap_or_default();
            for (i, lanes) in lanes.chunks_exact(LANES).enumerate() {
                let at = (i * cols + col) * LANES;
                if let (Some(d), Ok(l)) = (
                    dst.get_mut(at..at + LANES),
                    <&[f32; LANES]>::try_from(lanes),
                ) {
                    d.copy_from_slice(l);
                }
            }
            // The last block, when it is short of LANES channels and among these blocks.
            if whole_end < b1 {
                let tail = px.get(whole_end * LANES..).unwrap_or_default();
                let at = ((whole_end - b0) * cols + col) * LANES;
                if let Some(d) = dst.get_mut(at..at + tail.len()) {
                    d.copy_from_slice(tail);
                }
            }
        }
    }
}

/// One block of channels `c0..c0 + 8` of one output row: `taps` the packed bias and filter,
/// `rows` the window's three blocked input rows; the output pixel `ox` at `orow + ox·c + c0`,
/// clamped to `lo..=hi` (NaN becomes `lo`, as in the generic kernel), only its first `c − c0`
/// lanes stored for the last block.
///
/// # Safety
/// AVX2 and FMA are present; `taps` holds [`PACKED`] floats, each of `rows` at least
/// `((ow − 1)·s + 3)·8`, `orow` valid for writes of the block's channels of `ow` pixels of
/// `c` floats, and `c0 < c`.
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn row_block(
    taps: &[f32],
    rows: [&[f32]; 3],
    s: usize,
    ow: usize,
    (lo, hi): (__m256, __m256),
    orow: *mut f32,
    c: usize,
    c0: usize,
) {
    let t = taps.as_ptr();
    // SAFETY: `taps` holds 80 floats: the bias at 0 and tap k at 8·(k + 1), k < 9.
    let bias = unsafe { _mm256_loadu_ps(t) };
    // SAFETY: as above.
    let f: [__m256; 9] =
        std::array::from_fn(|k| unsafe { _mm256_loadu_ps(t.wrapping_add(LANES * (k + 1))) });
    let [p0, p1, p2] = [rows[0].as_ptr(), rows[1].as_ptr(), rows[2].as_ptr()];
    let rest = c - c0;
    let mask = _mm256_cmpgt_epi32(
        _mm256_set1_epi32(i32::try_from(rest.min(LANES)).unwrap_or(8)),
        _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
    );
    for ox in 0..ow {
        let at = ox * s * LANES;
        // SAFETY: column ox·s + j (j <= 2) ends at ((ox·s + j) + 1)·8 <= ((ow − 1)·s + 3)·8
        // floats, inside each row.
        let x =
            |p: *const f32, j: usize| unsafe { _mm256_loadu_ps(p.wrapping_add(at + j * LANES)) };
        let mut a0 = _mm256_fmadd_ps(x(p0, 0), f[0], bias);
        let mut a1 = _mm256_mul_ps(x(p1, 0), f[3]);
        let mut a2 = _mm256_mul_ps(x(p2, 0), f[6]);
        a0 = _mm256_fmadd_ps(x(p0, 1), f[1], a0);
        a1 = _mm256_fmadd_ps(x(p1, 1), f[4], a1);
        a2 = _mm256_fmadd_ps(x(p2, 1), f[7], a2);
        a0 = _mm256_fmadd_ps(x(p0, 2), f[2], a0);
        a1 = _mm256_fmadd_ps(x(p1, 2), f[5], a1);
        a2 = _mm256_fmadd_ps(x(p2, 2), f[8], a2);
        let v = _mm256_min_ps(
            _mm256_max_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), a2), lo),
            hi,
        );
        let dst = ox * c + c0;
        if rest >= LANES {
            // SAFETY: dst + 8 <= ox·c + c <= ow·c.
            unsafe { _mm256_storeu_ps(orow.wrapping_add(dst), v) };
        } else {
            // SAFETY: only the lanes below c − c0 are written: dst + (c − c0) <= ow·c.
            unsafe { _mm256_maskstore_ps(orow.wrapping_add(dst), mask, v) };
        }
    }
}

/// Output pixels [`pixels`] computes at once: each tap is loaded once for all of them, and their
/// 4 × 3 partial sums (one per window row) keep the multiply-adders busy.
const DIRECT_PIXELS: usize = 4;

impl DepthwiseF32<'_> {
    /// [`Self::rows_3x3_avx2_fma`] at stride 2, reading the NHWC input where it lies: there
    /// each input row serves only 1.5 output rows of half the width, so copying the rows into
    /// channel blocks cost more than the arithmetic it saved (112×112×96 at stride 2:
    /// 230 µs, about 60 of them multiply-adds). Pixel by pixel, as XNNPACK's depthwise kernels
    /// go, so that the input is read in the order it lies ([`pixels`]); the pixels whose window
    /// leaves the input, and the last block when c is not a multiple of 8, take masked loads
    /// ([`masked_pixel`]).
    ///
    /// # Safety
    /// As [`Self::rows_3x3_avx2_fma`], `shape` this operation's.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn rows_direct(&self, shape: &Shape3x3, r0: usize, out: &mut [MaybeUninit<f32>]) {
        let (g, x) = (&self.win.g, self.win.x);
        let ((h, w), (oh, ow), c, s) = (shape.in_hw, shape.out_hw, shape.c, g.stride_w);
        let (blocks, packed) = (shape.blocks, &shape.packed);
        let whole = c / LANES;
        let in_row = w * c;
        // Made only for a run that reads above or below the input.
        let zeros = std::cell::OnceCell::new();
        // Output columns whose whole window lies inside the input's columns: first..last.
        let first = (0..ow).find(|&ox| g.in_x(ox, 0, w).is_some()).unwrap_or(ow);
        let last = first
            + (first..ow)
                .take_while(|&ox| g.in_x(ox, 2, w).is_some())
                .count();
        let clamp = (_mm256_set1_ps(self.win.lo), _mm256_set1_ps(self.win.hi));
        for (ri, orow) in out.chunks_exact_mut(ow * c).enumerate() {
            let (b, oy) = ((r0 + ri) / oh, (r0 + ri) % oh);
            // Each window row: the input row, or zeros above and below the input (and where
            // the input is shorter than its shape says).
            let rows: [&[f32]; 3] = std::array::from_fn(|ky| {
                g.in_y(oy, ky, h)
                    .and_then(|iy| x.get((b * h + iy) * in_row..)?.get(..in_row))
                    .unwrap_or_else(|| zeros.get_or_init(|| vec![0f32; in_row]))
            });
            let o = orow.as_mut_ptr().cast::<f32>();
            // Pixel ox's window, from its first column on, in each row.
            let window = |ox: usize| rows.map(|r| r.as_ptr().wrapping_add((ox * s - g.pad_l) * c));
            let mut ox = first;
            while ox + DIRECT_PIXELS <= last {
                // SAFETY: AVX2 and FMA are enabled here; pixels ox..ox + 4 lie inside (their
                // windows' columns are below w, in each row of w·c floats), the whole blocks
                // of their channels, and their outputs in the output row.
                unsafe {
                    pixels::<DIRECT_PIXELS>(
                        packed,
                        window(ox),
                        c,
                        s * c,
                        whole,
                        clamp,
                        o.wrapping_add(ox * c),
                    )
                };
                ox += DIRECT_PIXELS;
            }
            for ox in ox..last {
                // SAFETY: as above, for one pixel.
                unsafe {
                    pixels::<1>(
                        packed,
                        window(ox),
                        c,
                        s * c,
                        whole,
                        clamp,
                        o.wrapping_add(ox * c),
                    )
                };
            }
            for ox in 0..ow {
                let inside = (first..last).contains(&ox);
                if inside && whole == blocks {
                    continue;
                }
                let cols = std::array::from_fn(|kx| g.in_x(ox, kx, w));
                let from = if inside { whole } else { 0 };
                // SAFETY: AVX2 and FMA are enabled here; every Some column is below w, each
                // row holds w·c floats, and pixel ox's c outputs lie in the output row.
                unsafe { masked_pixel(packed, rows, cols, c, from, clamp, o.wrapping_add(ox * c)) };
            }
        }
    }
}

/// The whole blocks (`whole`, of 8 channels) of `P` output pixels whose windows lie inside
/// the input's columns: `window[ky]` is the first pixel's window row ky from its first column,
/// the next pixels `step` floats on; outputs at `o`, `c` floats apart.
///
/// # Safety
/// AVX2 and FMA are present; `taps` holds [`PACKED`] floats per block; each window row holds
/// `(P − 1)·step + 3·c` floats; `o` is valid for writes of `P·c` floats; `whole·8 <= c`.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn pixels<const P: usize>(
    taps: &[f32],
    window: [*const f32; 3],
    c: usize,
    step: usize,
    whole: usize,
    (lo, hi): (__m256, __m256),
    o: *mut f32,
) {
    for blk in 0..whole {
        let t = taps.as_ptr().wrapping_add(blk * PACKED);
        let c0 = blk * LANES;
        // SAFETY: block blk's PACKED floats (caller): the bias first.
        let bias = unsafe { _mm256_loadu_ps(t) };
        let mut acc = [
            [bias; P],
            [_mm256_setzero_ps(); P],
            [_mm256_setzero_ps(); P],
        ];
        for (ky, sums) in acc.iter_mut().enumerate() {
            let row = window[ky].wrapping_add(c0);
            for kx in 0..3 {
                // SAFETY: tap ky·3 + kx of block blk.
                let f = unsafe { _mm256_loadu_ps(t.wrapping_add(LANES * (1 + ky * 3 + kx))) };
                for (q, sum) in sums.iter_mut().enumerate() {
                    // SAFETY: pixel q's window column kx, channels c0..c0 + 8 <= c: inside the
                    // row (caller).
                    let v = unsafe { _mm256_loadu_ps(row.wrapping_add(kx * c + q * step)) };
                    *sum = _mm256_fmadd_ps(v, f, *sum);
                }
            }
        }
        let [top, mid, bottom] = acc;
        for (q, ((a, b), c2)) in top.into_iter().zip(mid).zip(bottom).enumerate() {
            let v = _mm256_add_ps(_mm256_add_ps(a, b), c2);
            let v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
            // SAFETY: pixel q's outputs c0..c0 + 8 <= c (caller).
            unsafe { _mm256_storeu_ps(o.wrapping_add(q * c + c0), v) };
        }
    }
}

/// Blocks `from..` of the channels of one output pixel, with masked loads and stores (the
/// pixels whose window leaves the input, and the partial last block): `cols[kx]` is the input
/// column of window column kx, None outside (zeros); the outputs at `o`.
///
/// # Safety
/// AVX2 and FMA are present; `taps` holds [`PACKED`] floats per block of `c`; every Some
/// column is below w where each row holds w·c floats; `o` is valid for writes of `c` floats.
#[target_feature(enable = "avx2,fma")]
unsafe fn masked_pixel(
    taps: &[f32],
    rows: [&[f32]; 3],
    cols: [Option<usize>; 3],
    c: usize,
    from: usize,
    (lo, hi): (__m256, __m256),
    o: *mut f32,
) {
    for blk in from..c.div_ceil(LANES) {
        let c0 = blk * LANES;
        let lanes = i32::try_from((c - c0).min(LANES)).unwrap_or(8);
        let m = _mm256_cmpgt_epi32(
            _mm256_set1_epi32(lanes),
            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
        );
        let tb = taps.as_ptr().wrapping_add(blk * PACKED);
        // SAFETY: block blk's PACKED floats (caller): the bias first.
        let mut acc = unsafe { _mm256_loadu_ps(tb) };
        for (ky, row) in rows.iter().enumerate() {
            for (kx, col) in cols.iter().enumerate() {
                let Some(ix) = col else { continue };
                let px = row.as_ptr().wrapping_add(ix * c + c0);
                // SAFETY: the lanes below min(8, c − c0) of input column ix < w: in the row.
                let v = unsafe { _mm256_maskload_ps(px, m) };
                // SAFETY: tap ky·3 + kx of block blk.
                let f = unsafe { _mm256_loadu_ps(tb.wrapping_add(LANES * (ky * 3 + kx + 1))) };
                acc = _mm256_fmadd_ps(v, f, acc);
            }
        }
        let v = _mm256_min_ps(_mm256_max_ps(acc, lo), hi);
        // SAFETY: the lanes below min(8, c − c0) of the pixel's c outputs.
        unsafe { _mm256_maskstore_ps(o.wrapping_add(c0), m, v) };
    }
}
