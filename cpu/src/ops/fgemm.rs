//! Float32 GEMM on weights packed once, with the bias and the activation clamp fused into the
//! store: `c[i][j] = clamp(bias[j] + Σ_kk a[i][kk] · w[j][kk], lo, hi)`.
//!
//! Layouts: the weights `w[n][k]` are packed (at prepare time for constants, [`pack`]) into
//! `n.div_ceil(NR)` panels of `[k][NR]` floats, the columns past `n` zero; the rows of A are read
//! where they are (row-major, row stride k: the input pixels of a 1×1 convolution, a
//! FULLY_CONNECTED's input, or an im2col block), never packed. The AVX2+FMA micro-kernel keeps an
//! [`MR`]×[`NR`] tile of C in 12 registers and, for each kk, multiplies one broadcast element of
//! each of the MR rows of A by the two registers of the panel's row kk; the first reduction block
//! starts from the bias instead of zero, the last clamps as it stores. A portable kernel computes
//! the same on the same layout. Reductions longer than [`KC`] are done in blocks (the tile goes
//! through C in between), so a block of the panel stays in L1 while it meets a block of A rows
//! kept in L2. Measurements against the `gemm` crate: `docs/dependencies.md`.

use std::mem::MaybeUninit;

use crate::par;

/// Columns per weight panel (two AVX registers).
pub(crate) const NR: usize = 16;
/// Rows of A per micro-tile (6 × 2 accumulator registers, 2 for the panel row, 1 broadcast).
pub(crate) const MR: usize = 6;
/// Reduction block: 512 rows of a panel are 32 KiB.
const KC: usize = 512;
/// The floats of A a row block aims at (96 KiB, in L2 while it meets every panel); a block
/// may hold up to twice that rather than leave a short block at the end.
const A_BLOCK_FLOATS: usize = 24 * 1024;

/// The kernels the CPU can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Isa {
    /// Plain Rust, any CPU (fused multiply-add where it is baseline: aarch64).
    Portable,
    /// AVX2 with FMA (x86-64), detected at run time.
    #[cfg(target_arch = "x86_64")]
    Avx2Fma,
}

impl Isa {
    /// The best kernel set this CPU runs.
    pub(crate) fn detect() -> Isa {
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
                return Isa::Avx2Fma;
            }
        }
        Isa::Portable
    }

    /// Every kernel set this CPU runs (tests compare them).
    #[cfg(test)]
    pub(crate) fn all() -> Vec<Isa> {
        let mut v = vec![Isa::Portable];
        if Isa::detect() != Isa::Portable {
            v.push(Isa::detect());
        }
        v
    }

    fn column(self) -> ColumnFn {
        match self {
            Isa::Portable => column_portable,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2Fma => column_avx2_fma,
        }
    }
}

/// Floats the packed form of `n` rows of `k` weights takes.
pub(crate) fn packed_len(n: usize, k: usize) -> Option<usize> {
    n.div_ceil(NR).checked_mul(NR)?.checked_mul(k)
}

/// `w[n][k]` (row-major) packed into panels of [`NR`] columns, each `[k][NR]`, zero past `n`.
/// None when `w` does not hold n·k floats, k is 0 or the size overflows.
pub(crate) fn pack(n: usize, k: usize, w: &[f32]) -> Option<Vec<f32>> {
    pack_panels(n, k, k, w, |v| v)
}

/// `w[n][k]` (row-major) as `convert`ed elements in panels of [`NR`] columns, each
/// `[rows][NR]` with `rows` ≥ k, zero (`T::default()`) past `n` and past row k. None when `w`
/// does not hold n·k floats, k is 0, `rows` < k or the size overflows.
pub(crate) fn pack_panels<T: Copy + Default>(
    n: usize,
    k: usize,
    rows: usize,
    w: &[f32],
    convert: impl Fn(f32) -> T,
) -> Option<Vec<T>> {
    if k == 0 || rows < k || w.len() != n.checked_mul(k)? {
        return None;
    }
    let len = n.div_ceil(NR).checked_mul(NR)?.checked_mul(rows)?;
    let mut out = vec![T::default(); len];
    for (p, panel) in out.chunks_exact_mut(rows * NR).enumerate() {
        for (j, row) in w.chunks_exact(k).skip(p * NR).take(NR).enumerate() {
            for (dst, &v) in panel.iter_mut().skip(j).step_by(NR).zip(row) {
                *dst = convert(v);
            }
        }
    }
    Some(out)
}

/// The bias and the activation bounds the store applies.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Epilogue<'a> {
    /// One per output column.
    pub(crate) bias: &'a [f32],
    pub(crate) lo: f32,
    pub(crate) hi: f32,
}

/// One product `c[i*n + j] = clamp(bias[j] + Σ_kk a[i*k + kk] · w[j][kk], lo, hi)` (i < m,
/// j < n): its shape, A (row-major, read in place), `w` [`pack`]ed (as floats here; as
/// halves, `W = u16`, for `hgemm`), and the epilogue.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Product<'a, W = f32> {
    pub(crate) m: usize,
    pub(crate) k: usize,
    pub(crate) n: usize,
    pub(crate) a: &'a [f32],
    pub(crate) packed: &'a [W],
    pub(crate) ep: Epilogue<'a>,
}

impl<W> Product<'_, W> {
    /// m·n, once `c` (of `c_len` elements), A, the packed weights (`b_need` elements needed)
    /// and the bias are checked to hold the shape.
    pub(crate) fn checked(&self, c_len: usize, b_need: usize) -> Result<usize, String> {
        let a_need = self.m.checked_mul(self.k).ok_or("gemm size overflow")?;
        if self.a.len() < a_need {
            return Err("gemm operand too small".into());
        }
        self.checked_but_a(c_len, b_need)
    }

    /// As [`Product::checked`], A aside (rows gathered from elsewhere).
    fn checked_but_a(&self, c_len: usize, b_need: usize) -> Result<usize, String> {
        let c_need = self.m.checked_mul(self.n).ok_or("gemm size overflow")?;
        if c_len < c_need || self.packed.len() < b_need || self.ep.bias.len() < self.n {
            return Err("gemm operand too small".into());
        }
        Ok(c_need)
    }
}

impl Product<'_> {
    /// The product into a new vector (m·n floats), for tests: the vector starts as NaN, so an
    /// element the kernels skip shows.
    #[cfg(test)]
    pub(crate) fn into_vec(self, threads: usize, isa: Isa) -> Result<Vec<f32>, String> {
        let len = self.m.checked_mul(self.n).ok_or("gemm size overflow")?;
        let mut v = vec![f32::NAN; len];
        // SAFETY: `run` writes only initialized floats.
        self.run(unsafe { crate::tensor::as_uninit(&mut v) }, threads, isa)?;
        Ok(v)
    }

    /// The product into `c`, on up to `threads` threads (1: the calling thread), with the
    /// kernels of `isa`. `c` need not be initialized: on success every element of `c[..m*n]` has
    /// been written.
    pub(crate) fn run(
        &self,
        c: &mut [MaybeUninit<f32>],
        threads: usize,
        isa: Isa,
    ) -> Result<(), String> {
        let b_need = packed_len(self.n, self.k).ok_or("gemm size overflow")?;
        let c_need = self.checked(c.len(), b_need)?;
        self.split(Rows::Dense(self.a), &mut c[..c_need], b_need, threads, isa)
    }

    /// As [`Product::run`], with the rows of A gathered by `gather` (`self.a` is not read):
    /// row r, reduction block from kk, is `gather.run(r, kk)`'s floats.
    pub(crate) fn run_gathered(
        &self,
        gather: &dyn Gather,
        c: &mut [MaybeUninit<f32>],
        threads: usize,
        isa: Isa,
    ) -> Result<(), String> {
        let (m, k) = (self.m, self.k);
        let run = gather.run_len();
        if run == 0 || k % run != 0 {
            return Err("gathered runs do not divide the reduction".into());
        }
        let b_need = packed_len(self.n, k).ok_or("gemm size overflow")?;
        let c_need = self.checked_but_a(c.len(), b_need)?;
        // Every row's pointer for every reduction block, found and checked before any tile
        // runs: block j's rows at `table[j * m..][..m]`.
        let mut table = Vec::new();
        for (kb, _) in reduction_blocks(k, run) {
            let at = kb % run;
            for r in 0..m {
                let s = gather
                    .run(r, kb - at)
                    .filter(|s| s.len() >= run)
                    .ok_or("a gathered row is out of range")?;
                table.push(s[at..].as_ptr());
            }
        }
        let listed = Listed {
            table: table.as_ptr(),
            stride: m,
            run,
        };
        self.split(Rows::Listed(listed), &mut c[..c_need], b_need, threads, isa)
    }

    /// The product (operands checked: `c` is m·n, the packed weights `b_need` long) on up to
    /// `threads` threads, by rows or by panels.
    fn split(
        &self,
        a: Rows<'_>,
        c: &mut [MaybeUninit<f32>],
        b_need: usize,
        threads: usize,
        isa: Isa,
    ) -> Result<(), String> {
        let Product {
            m,
            k,
            n,
            packed,
            ep,
            ..
        } = *self;
        if c.is_empty() {
            return Ok(());
        }
        if k == 0 {
            let b = bounds(&ep);
            for row in c.chunks_exact_mut(n) {
                for (v, &x) in row.iter_mut().zip(ep.bias) {
                    v.write(b.map_or(x, |(lo, hi)| x.max(lo).min(hi)));
                }
            }
            return Ok(());
        }
        let g = Gemm {
            k,
            n,
            packed: &packed[..b_need],
            ep,
            column: isa.column(),
        };
        let panels = n.div_ceil(NR);
        if threads <= 1 {
            // SAFETY: `a` holds m rows of k floats (checked by the caller, or listed for every
            // row and block) and `c` m rows of n, exclusively borrowed; every panel of the
            // checked packed length.
            unsafe { g.run(a, m, c.as_mut_ptr().cast(), 0..panels) };
            return Ok(());
        }
        if m >= n || panels < 2 {
            // Runs of rows: each part reads its own rows of A and every panel (B is the smaller).
            return par::for_row_ranges(c, n, threads, |r0, cc| {
                let rows = cc.len() / n;
                let a = a.at_row(r0, k)?;
                // SAFETY: `a` holds `rows` rows of k floats from row r0 (r0 + rows <= m), `cc`
                // `rows` rows of n floats, exclusively borrowed by this part.
                unsafe { g.run(a, rows, cc.as_mut_ptr().cast(), 0..panels) };
                Ok(())
            });
        }
        // More columns than rows (a small batch or spatial extent, wide weights): runs of panels,
        // each part reading only its panels of B and writing its own columns of every row.
        let parts = threads.min(panels);
        let per = panels.div_ceil(parts);
        let cp = par::SendPtr(c.as_mut_ptr().cast());
        par::for_each_part(panels.div_ceil(per), |part| {
            let p0 = part * per;
            // SAFETY: `a` holds m rows of k floats; `c` (m rows of n floats) outlives every part and
            // this part writes only columns [p0·NR, min((p0+per)·NR, n)) of it, disjoint from every
            // other part's.
            unsafe { g.run(a, m, cp.ptr(), p0..(p0 + per).min(panels)) };
        });
        Ok(())
    }
}

/// A's rows gathered from elsewhere, not read as one row-major matrix: an indirect
/// convolution, whose row for an output pixel is the input pixels of its window, one filter tap
/// after another, read where they lie instead of copied into an im2col matrix first.
pub(crate) trait Gather: Sync {
    /// The length of the runs a row is made of (a tap: the input channels); k is a multiple.
    fn run_len(&self) -> usize;
    /// Row `r`'s run that starts at reduction index `kk` (a multiple of [`Gather::run_len`]):
    /// at least `run_len` floats; None if there is none.
    fn run(&self, r: usize, kk: usize) -> Option<&[f32]>;
}

/// Whether the reduction blocks of rows gathered in runs of `run` floats are those of a dense A
/// (whole [`KC`] blocks, a run holding a whole number of them).
pub(crate) fn blocks_tile_runs_of(run: usize) -> bool {
    run > 0 && run % KC == 0
}

/// The reduction blocks (start, length) of a product whose rows are runs of `run` floats (`k`
/// for a row-major A): [`KC`] at a time, none across a run's end.
fn reduction_blocks(k: usize, run: usize) -> impl Iterator<Item = (usize, usize)> {
    let mut kb = 0;
    std::iter::from_fn(move || {
        if kb >= k {
            return None;
        }
        let block = (kb, KC.min(k - kb).min(run - kb % run));
        kb += block.1;
        Some(block)
    })
}

/// Where the rows of A are, from a first row on.
#[derive(Clone, Copy)]
enum Rows<'a> {
    /// Row-major, row stride k.
    Dense(&'a [f32]),
    /// Listed for each reduction block ([`Product::run_gathered`]).
    Listed(Listed),
}

impl<'a> Rows<'a> {
    /// The rows from row `r0` on; an error if A has no row `r0`.
    fn at_row(&self, r0: usize, k: usize) -> Result<Rows<'a>, String> {
        match *self {
            Rows::Dense(a) => a.get(r0 * k..).map(Rows::Dense),
            Rows::Listed(l) => (r0 <= l.stride).then(|| {
                Rows::Listed(Listed {
                    table: l.table.wrapping_add(r0),
                    ..l
                })
            }),
        }
        .ok_or_else(|| "gemm rows out of range".into())
    }
}

/// Listed rows: reduction block j's pointer for row r at `table[j * stride + r]`, each at the
/// block's first column, the blocks those of [`reduction_blocks`] over runs of `run`.
#[derive(Clone, Copy)]
struct Listed {
    table: *const *const f32,
    stride: usize,
    run: usize,
}

// SAFETY: a `Listed` is read-only pointers into its row table and the gathered rows, both
// borrowed for as long as the parts holding it run (`par::for_each_part` and
// `par::for_row_ranges` return after every part has finished), and nothing writes them
// meanwhile.
unsafe impl Send for Listed {}
// SAFETY: as above.
unsafe impl Sync for Listed {}

/// Threads for an m×k×n product split inside [`Product::run`] (one per 2 Mflop, by rows or panels).
pub(crate) fn threads(m: usize, k: usize, n: usize) -> usize {
    let flops = 2usize.saturating_mul(m).saturating_mul(n).saturating_mul(k);
    par::threads_for(flops, m.max(n) / 16)
}

/// The clamp to apply, None for none (so NaN stays NaN without an activation).
pub(crate) fn bounds(ep: &Epilogue<'_>) -> Option<(f32, f32)> {
    (ep.lo != f32::NEG_INFINITY || ep.hi != f32::INFINITY).then_some((ep.lo, ep.hi))
}

/// One product's operands, checked.
struct Gemm<'a> {
    k: usize,
    n: usize,
    packed: &'a [f32],
    ep: Epilogue<'a>,
    column: ColumnFn,
}

impl Gemm<'_> {
    /// Rows `0..rows` of A (at `a`) times the panels `panels`, into C at `c` (row stride n).
    ///
    /// # Safety
    /// `a` must be valid for reads of `rows` rows of k floats (dense: at row stride k; listed:
    /// every block's pointer of each row, each for the block's length), `c` for writes of every
    /// `i * n + j` (i < rows, j a column of `panels`) and not written by anyone else meanwhile;
    /// `panels` must lie within `0..n.div_ceil(NR)`.
    unsafe fn run(&self, a: Rows<'_>, rows: usize, c: *mut f32, panels: std::ops::Range<usize>) {
        let (k, n) = (self.k, self.n);
        let clamp = bounds(&self.ep);
        let run = match a {
            Rows::Dense(_) => k,
            Rows::Listed(l) => l.run,
        };
        for (j, (kb, kc)) in reduction_blocks(k, run).enumerate() {
            let (first, last) = (kb == 0, kb + kc == k);
            // Row blocks of about A_BLOCK_FLOATS, as many as fit whole (at least one) and of
            // even sizes: cut at the target, 49 rows (a 7×7 layer) at a reduction block of 512
            // were a block of 48 and one of 1, for which every panel was streamed again
            // (MobileNetV1 float32: 14.56–15.18 → 14.34–14.39 ms p50 in alternating runs).
            let mc_target = ((A_BLOCK_FLOATS / kc).max(MR) / MR) * MR;
            let blocks = (rows / mc_target).max(1);
            let mc = rows.div_ceil(blocks).next_multiple_of(MR);
            for r0 in (0..rows).step_by(mc) {
                let r1 = (r0 + mc).min(rows);
                let tile_rows = match a {
                    // Row r0 < rows at column kb < k: inside A (caller).
                    Rows::Dense(a) => TileRows::Strided {
                        a: a.as_ptr().wrapping_add(r0 * k + kb),
                        lda: k,
                    },
                    // Block j's pointers of rows r0.. (caller).
                    Rows::Listed(l) => TileRows::Listed(l.table.wrapping_add(j * l.stride + r0)),
                };
                for p in panels.clone() {
                    let j0 = p * NR;
                    let nr = NR.min(n - j0);
                    let mut bias = [0f32; NR];
                    bias[..nr].copy_from_slice(&self.ep.bias[j0..j0 + nr]);
                    let b = &self.packed[(p * k + kb) * NR..][..kc * NR];
                    let t = Tile {
                        rows: tile_rows,
                        mr: r1 - r0,
                        b: b.as_ptr(),
                        kc,
                        // SAFETY: row r0 < rows, column j0 < n: inside `c` (caller).
                        c: unsafe { c.add(r0 * n + j0) },
                        ldc: n,
                        nr,
                        bias: first.then_some(&bias),
                        clamp: if last { clamp } else { None },
                    };
                    // SAFETY: the column's rows (r0..r1) and reduction block (kb..kb+kc) lie
                    // inside A, its panel block holds kc·NR floats, and its C block (r1 − r0
                    // rows of nr columns at (r0, j0)) inside the caller's part of C.
                    unsafe { (self.column)(&t) };
                }
            }
        }
    }
}

/// One micro-tile: `mr` (1..=MR) rows by `nr` (1..=NR) columns of C; or, given to a
/// [`ColumnFn`], a column of tiles: `mr` (any number) rows, MR at a time.
#[derive(Clone, Copy)]
struct Tile<'a> {
    /// A's rows, at the tile's first row and its reduction block's first column.
    rows: TileRows,
    mr: usize,
    /// The panel's block: `kc` rows of NR floats.
    b: *const f32,
    kc: usize,
    /// C at the tile's first element; row stride `ldc`.
    c: *mut f32,
    ldc: usize,
    nr: usize,
    /// Start from this bias (the first reduction block), else from C's current values.
    bias: Option<&'a [f32; NR]>,
    /// Clamp to these bounds as the tile is stored (the last reduction block).
    clamp: Option<(f32, f32)>,
}

/// Where a tile's rows of A are, from its first row on, at its reduction block's first column.
#[derive(Clone, Copy)]
enum TileRows {
    /// Row r at `a + r·lda` (a row-major A).
    Strided { a: *const f32, lda: usize },
    /// Row r at `*list.add(r)` (rows gathered, [`Gather`]).
    Listed(*const *const f32),
}

impl TileRows {
    /// The rows from row `i` on.
    fn down(self, i: usize) -> TileRows {
        match self {
            TileRows::Strided { a, lda } => TileRows::Strided {
                a: a.wrapping_add(i * lda),
                lda,
            },
            TileRows::Listed(list) => TileRows::Listed(list.wrapping_add(i)),
        }
    }

    /// Row `r`.
    ///
    /// # Safety
    /// r < the tile's mr (a listed tile lists mr rows).
    #[inline(always)]
    unsafe fn row(self, r: usize) -> *const f32 {
        match self {
            TileRows::Strided { a, lda } => a.wrapping_add(r * lda),
            // SAFETY: r < mr, and the list holds mr pointers (caller).
            TileRows::Listed(list) => unsafe { *list.wrapping_add(r) },
        }
    }
}

/// A column of micro-tiles: `t.mr` rows (any number) of one panel block, as tiles of MR rows
/// (the last one shorter), in one call: for short reductions (a 1×1 convolution over 16
/// channels is 16 steps of 12 multiply-adds) the per-tile call and setup were a tenth of the
/// work.
///
/// # Safety
/// The tile contract, which each micro-kernel (`tile_*`) also requires of its one tile: `rows`
/// valid for reads of kc floats from each row r < mr (listed: the list valid for reads of mr
/// pointers); `b` for `kc * NR` floats, `c` for
/// writes at `r * ldc + j` (r < mr, j < nr), and for reads there when `bias` is None (the
/// earlier reduction blocks wrote them), written by no one else meanwhile.
type ColumnFn = unsafe fn(&Tile<'_>);

/// Runs `tile` on each tile of the column `t` (see [`ColumnFn`]): `t` cut into tiles of MR
/// rows (the last one shorter).
#[inline(always)]
fn column_with(t: &Tile<'_>, tile: impl Fn(&Tile<'_>)) {
    let mut i = 0;
    while i < t.mr {
        let one = Tile {
            rows: t.rows.down(i),
            mr: MR.min(t.mr - i),
            c: t.c.wrapping_add(i * t.ldc),
            ..*t
        };
        tile(&one);
        i += MR;
    }
}

/// [`ColumnFn`] with the portable micro-kernel.
///
/// # Safety
/// As [`ColumnFn`].
unsafe fn column_portable(t: &Tile<'_>) {
    // SAFETY: each tile is MR (or fewer, the last) rows of the caller's column (contract).
    column_with(t, |one| unsafe { tile_portable(one) });
}

/// [`ColumnFn`] with the AVX2+FMA micro-kernel, inlined into the loop.
///
/// # Safety
/// As [`ColumnFn`], and the CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn column_avx2_fma(t: &Tile<'_>) {
    // SAFETY: each tile is MR (or fewer, the last) rows of the caller's column (contract);
    // AVX2 and FMA are present (contract).
    column_with(t, |one| unsafe { tile_avx2_fma(one) });
}

/// The portable micro-kernel.
///
/// # Safety
/// The tile contract ([`ColumnFn`]), for `t.mr` <= MR rows.
unsafe fn tile_portable(t: &Tile<'_>) {
    // aarch64 always has NEON with fused multiply-add: `mul_add` compiles to vector `fmla`.
    #[cfg(target_arch = "aarch64")]
    // SAFETY: the caller's contract.
    unsafe {
        tile_generic::<true>(t)
    };
    #[cfg(not(target_arch = "aarch64"))]
    // SAFETY: the caller's contract.
    unsafe {
        tile_generic::<false>(t)
    };
}

/// # Safety
/// The tile contract ([`ColumnFn`]), for `t.mr` <= MR rows.
#[inline(always)]
unsafe fn tile_generic<const FMA: bool>(t: &Tile<'_>) {
    let mut acc = [[0f32; NR]; MR];
    for (r, row) in acc.iter_mut().enumerate().take(t.mr) {
        match t.bias {
            Some(b) => *row = *b,
            None => {
                for (j, v) in row.iter_mut().enumerate().take(t.nr) {
                    // SAFETY: r < mr, j < nr (contract).
                    *v = unsafe { *t.c.wrapping_add(r * t.ldc + j) };
                }
            }
        }
    }
    let rows: [*const f32; MR] = std::array::from_fn(|r| {
        // SAFETY: r.min(mr − 1) < mr (contract: mr ≥ 1).
        unsafe { t.rows.row(r.min(t.mr - 1)) }
    });
    for kk in 0..t.kc {
        // SAFETY: kk < kc: the panel block's row kk (contract).
        let b = unsafe { &*t.b.wrapping_add(kk * NR).cast::<[f32; NR]>() };
        for (row, &ap) in acc.iter_mut().zip(&rows).take(t.mr) {
            // SAFETY: a row < mr of A, kk < kc (contract).
            let x = unsafe { *ap.wrapping_add(kk) };
            for (v, &w) in row.iter_mut().zip(b) {
                *v = if FMA { x.mul_add(w, *v) } else { *v + x * w };
            }
        }
    }
    for (r, row) in acc.iter().enumerate().take(t.mr) {
        for (j, &v) in row.iter().enumerate().take(t.nr) {
            let v = match t.clamp {
                Some((lo, hi)) => v.max(lo).min(hi),
                None => v,
            };
            // SAFETY: r < mr, j < nr (contract).
            unsafe { *t.c.wrapping_add(r * t.ldc + j) = v };
        }
    }
}

/// Eight floats of `s` from `at` (zeros past its end, which callers never reach).
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn ld8(s: &[f32], at: usize) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    match s.get(at..at + 8) {
        // SAFETY: `v` holds 8 floats, read unaligned.
        Some(v) => unsafe { _mm256_loadu_ps(v.as_ptr()) },
        None => _mm256_setzero_ps(),
    }
}

/// Stores `v` into `s[at..at + 8]` (nothing past its end, which callers never reach).
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn st8(s: &mut [f32], at: usize, v: std::arch::x86_64::__m256) {
    use std::arch::x86_64::*;
    if let Some(d) = s.get_mut(at..at + 8) {
        // SAFETY: `d` holds 8 floats, written unaligned.
        unsafe { _mm256_storeu_ps(d.as_mut_ptr(), v) };
    }
}

/// The AVX2+FMA micro-kernel: MR×NR accumulators in 12 registers, or, for a panel of at most 8
/// live columns (the last panel of n = 24, 40, ..., 1000), MR×8 in 6: half the multiply-adds of
/// a full tile whose other half would be thrown away. A tile of fewer rows (the last of a
/// column) runs [`tile_avx2_fma_short`].
///
/// # Safety
/// The tile contract ([`ColumnFn`]), for `t.mr` <= MR rows, and the CPU must support AVX2 and
/// FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn tile_avx2_fma(t: &Tile<'_>) {
    match (t.mr, t.nr <= 8) {
        // SAFETY: the caller's contract, with t.mr = MR rows and nr <= 8.
        (MR, true) => unsafe { tile_avx2_fma_narrow(t) },
        // SAFETY: the caller's contract, with t.mr = MR rows.
        (MR, false) => unsafe { tile_avx2_fma_rows::<2, MR, 1>(t) },
        // SAFETY: the caller's contract, with t.mr < MR rows.
        _ => unsafe { tile_avx2_fma_short(t) },
    }
}

/// [`tile_avx2_fma`] for a whole tile of at most 8 columns (the last panel of n = 24, ...): its
/// 6 accumulators in 2 sets, out of line so that the full tile's loop stays as it was.
///
/// # Safety
/// As [`tile_avx2_fma`], `t.mr` == MR and `t.nr` <= 8.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline(never)]
unsafe fn tile_avx2_fma_narrow(t: &Tile<'_>) {
    // SAFETY: the caller's contract.
    unsafe { tile_avx2_fma_rows::<1, MR, 2>(t) }
}

/// [`tile_avx2_fma`] for a tile of fewer than MR rows, on as many rows: computing the full
/// MR rows (the rows past mr repeating row mr−1) made a lone row cost a whole tile; 49 rows
/// (a 7×7 layer) were 9 tiles of work for 8⅙.
///
/// # Safety
/// As [`tile_avx2_fma`], and `t.mr` < MR.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline(never)]
unsafe fn tile_avx2_fma_short(t: &Tile<'_>) {
    // The kernel of t.mr rows (1..MR) and t.nr columns, with enough sets of accumulators.
    let kernel: unsafe fn(&Tile<'_>) = match (t.mr, t.nr <= 8) {
        (1, true) => tile_avx2_fma_rows::<1, 1, 4>,
        (1, false) => tile_avx2_fma_rows::<2, 1, 4>,
        (2, true) => tile_avx2_fma_rows::<1, 2, 4>,
        (2, false) => tile_avx2_fma_rows::<2, 2, 2>,
        (3, true) => tile_avx2_fma_rows::<1, 3, 2>,
        (3, false) => tile_avx2_fma_rows::<2, 3, 2>,
        (4, true) => tile_avx2_fma_rows::<1, 4, 2>,
        (4, false) => tile_avx2_fma_rows::<2, 4, 1>,
        (_, true) => tile_avx2_fma_rows::<1, 5, 2>,
        (_, false) => tile_avx2_fma_rows::<2, 5, 1>,
    };
    // SAFETY: the caller's contract; the kernel's row count is t.mr (< MR, so 5 for the
    // rest) and its width covers t.nr.
    unsafe { kernel(t) }
}

/// [`tile_avx2_fma`] on the first `W` × 8 columns of the panel (`t.nr` <= 8·W) and `R` rows
/// (`R` = `t.mr`), with `S` (≥ 1) sets of accumulators over interleaved reduction entries: a
/// multiply-add takes 5 cycles and two issue a cycle, so 10 independent sums keep the units
/// busy, and a tile of 1–3 rows has only 2–6 of its own (a lone row of 1024×1024 weights:
/// 16.5 GFLOP/s with one set, see docs/dependencies.md).
///
/// # Safety
/// As [`tile_avx2_fma`], `t.nr` <= 8·W and `R` == `t.mr`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn tile_avx2_fma_rows<const W: usize, const R: usize, const S: usize>(t: &Tile<'_>) {
    use std::arch::x86_64::*;
    // R == mr by the contract; the clamp to row mr−1 keeps a caller that broke it reading
    // inside A (rows past mr are never stored).
    let rows: [*const f32; R] = std::array::from_fn(|r| {
        // SAFETY: r.min(mr − 1) < mr (contract: mr ≥ 1).
        unsafe { t.rows.row(r.min(t.mr - 1)) }
    });
    let mut acc = [[_mm256_setzero_ps(); W]; R];
    match t.bias {
        Some(b) => acc = [std::array::from_fn(|h| ld8(b, 8 * h)); R],
        None => {
            for (r, row) in acc.iter_mut().enumerate().take(t.mr) {
                let mut buf = [0f32; NR];
                // SAFETY: r < mr: nr floats of row r of C are readable (contract).
                let src = unsafe { std::slice::from_raw_parts(t.c.wrapping_add(r * t.ldc), t.nr) };
                buf[..t.nr].copy_from_slice(src);
                *row = std::array::from_fn(|h| ld8(&buf, 8 * h));
            }
        }
    }
    // Reduction entry kk into the accumulators `set`.
    let step = |set: &mut [[__m256; W]; R], kk: usize| {
        // SAFETY: kk < kc: the panel block's row kk, NR floats (contract).
        let b = unsafe { &*t.b.wrapping_add(kk * NR).cast::<[f32; NR]>() };
        let bv: [__m256; W] = std::array::from_fn(|h| ld8(b, 8 * h));
        for (row, &ap) in set.iter_mut().zip(&rows) {
            // SAFETY: each row pointer is a row < mr of A, kk < kc (contract).
            let x = _mm256_set1_ps(unsafe { *ap.wrapping_add(kk) });
            for (v, &w) in row.iter_mut().zip(&bv) {
                *v = _mm256_fmadd_ps(x, w, *v);
            }
        }
    };
    if S == 1 {
        for kk in 0..t.kc {
            step(&mut acc, kk);
        }
    } else {
        // S sets of accumulators, set s taking the entries kk ≡ s (mod S), summed at the end.
        let mut sets = [[[_mm256_setzero_ps(); W]; R]; S];
        sets[0] = acc;
        let whole = t.kc - t.kc % S;
        for k0 in (0..whole).step_by(S) {
            for (s, set) in sets.iter_mut().enumerate() {
                step(set, k0 + s);
            }
        }
        for kk in whole..t.kc {
            step(&mut sets[0], kk);
        }
        acc = sets[0];
        for set in &sets[1..] {
            for (row, srow) in acc.iter_mut().zip(set) {
                for (v, &x) in row.iter_mut().zip(srow) {
                    *v = _mm256_add_ps(*v, x);
                }
            }
        }
    }
    if let Some((lo, hi)) = t.clamp {
        let (l, h) = (_mm256_set1_ps(lo), _mm256_set1_ps(hi));
        for row in &mut acc {
            for v in row.iter_mut() {
                *v = _mm256_min_ps(_mm256_max_ps(*v, l), h);
            }
        }
    }
    for (r, row) in acc.iter().enumerate().take(t.mr) {
        // Written through the pointer, never through a reference: C may be uninitialized.
        let dst = t.c.wrapping_add(r * t.ldc);
        if t.nr == 8 * W {
            for (h, &v) in row.iter().enumerate() {
                // SAFETY: r < mr: nr = 8·W floats of row r of C are writable, by this tile
                // only (contract).
                unsafe { _mm256_storeu_ps(dst.wrapping_add(8 * h), v) };
            }
        } else {
            let mut buf = [0f32; NR];
            for (h, &v) in row.iter().enumerate() {
                st8(&mut buf, 8 * h, v);
            }
            // SAFETY: r < mr: nr floats of row r of C are writable, by this tile only (contract).
            unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr(), dst, t.nr) };
        }
    }
}

/// The packed GEMM on its own, for `cpu/benches/gemm.rs` only (not a stable API).
#[doc(hidden)]
#[derive(Debug)]
pub struct PackedGemm {
    n: usize,
    k: usize,
    packed: Vec<f32>,
    bias: Vec<f32>,
}

impl PackedGemm {
    /// The weights `w[n][k]` packed once, with a zero bias and no activation.
    pub fn new(n: usize, k: usize, w: &[f32]) -> Option<PackedGemm> {
        Some(PackedGemm {
            n,
            k,
            packed: pack(n, k, w)?,
            bias: vec![0.0; n],
        })
    }

    /// `c[m×n] = a[m×k] · wᵀ` on up to `threads` threads with this CPU's kernels.
    pub fn run(&self, m: usize, a: &[f32], c: &mut [f32], threads: usize) -> Result<(), String> {
        let ep = Epilogue {
            bias: &self.bias,
            lo: f32::NEG_INFINITY,
            hi: f32::INFINITY,
        };
        let p = Product {
            m,
            k: self.k,
            n: self.n,
            a,
            packed: &self.packed,
            ep,
        };
        // SAFETY: `run` writes only initialized floats.
        p.run(
            unsafe { crate::tensor::as_uninit(c) },
            threads,
            Isa::detect(),
        )
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A random product's A (m·k), weights `w[n][k]` and bias (n), from `seed`.
    pub(crate) fn operands(seed: &mut u32, m: usize, k: usize, n: usize) -> [Vec<f32>; 3] {
        [m * k, n * k, n].map(|len| floats(seed, len))
    }

    /// Xorshift floats in [-1, 1), reproducible from `seed`.
    pub(crate) fn floats(seed: &mut u32, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| {
                *seed ^= *seed << 13;
                *seed ^= *seed >> 17;
                *seed ^= *seed << 5;
                (*seed >> 8) as f32 / (1u32 << 23) as f32 - 1.0
            })
            .collect()
    }

    /// The definition, summed in f64 over the unpacked weights `w[n][k]`.
    fn naive(m: usize, k: usize, n: usize, a: &[f32], w: &[f32], ep: &Epilogue<'_>) -> Vec<f32> {
        let mut c = Vec::with_capacity(m * n);
        for i in 0..m {
            for j in 0..n {
                let s: f64 = (0..k)
                    .map(|kk| f64::from(a[i * k + kk]) * f64::from(w[j * k + kk]))
                    .sum();
                let v = (s + f64::from(ep.bias[j])) as f32;
                c.push(if bounds(ep).is_some() {
                    v.max(ep.lo).min(ep.hi)
                } else {
                    v
                });
            }
        }
        c
    }

    #[test]
    fn packing_puts_column_j_of_panel_p_at_lane_j_and_zero_fills_past_n() {
        // w[3][2] = [[1,2],[3,4],[5,6]]: one panel [2][16].
        let p = pack(3, 2, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
        assert_eq!(p.len(), 2 * NR);
        assert_eq!(&p[..4], &[1.0, 3.0, 5.0, 0.0]);
        assert_eq!(&p[NR..NR + 4], &[2.0, 4.0, 6.0, 0.0]);
        assert!(p[3..NR].iter().chain(&p[NR + 3..]).all(|&v| v == 0.0));
        assert!(pack(3, 2, &[1.0; 5]).is_none());
        assert!(pack(3, 0, &[]).is_none());
    }

    #[test]
    fn every_kernel_set_and_thread_split_matches_the_definition_on_random_shapes() {
        let mut seed = 0x2545_F491u32;
        // Row counts around the 6-row tile, columns around the 16-wide panel (a last panel of
        // 8 columns or fewer takes the half-width AVX2 tile), reductions past the 512-long
        // block (k = 1100: three blocks).
        for &(m, k, n) in &[
            (1, 1, 1),
            (12, 24, 24),
            (7, 600, 8),
            (5, 3, 17),
            (6, 16, 16),
            (7, 33, 15),
            (13, 1, 40),
            (64, 27, 32),
            (100, 1100, 20),
            (3, 600, 70),
            (250, 64, 33),
        ] {
            let [a, w, bias] = operands(&mut seed, m, k, n);
            let packed = pack(n, k, &w).unwrap();
            for (lo, hi) in [(f32::NEG_INFINITY, f32::INFINITY), (0.0, 6.0), (-0.5, 0.5)] {
                let ep = Epilogue {
                    bias: &bias,
                    lo,
                    hi,
                };
                let want = naive(m, k, n, &a, &w, &ep);
                for isa in Isa::all() {
                    for threads in 1..=3 {
                        let p = Product {
                            m,
                            k,
                            n,
                            a: &a,
                            packed: &packed,
                            ep,
                        };
                        let c = p.into_vec(threads, isa).unwrap();
                        for (i, (x, y)) in c.iter().zip(&want).enumerate() {
                            assert!(
                                (x - y).abs() <= 1e-4 * (1.0 + y.abs() + k as f32 / 64.0),
                                "{m}x{k}x{n} {isa:?} t{threads} [{i}] {x} vs {y}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn an_empty_reduction_gives_the_clamped_bias() {
        let ep = Epilogue {
            bias: &[-1.0, 7.0],
            lo: 0.0,
            hi: 6.0,
        };
        let p = Product {
            m: 2,
            k: 0,
            n: 2,
            a: &[],
            packed: &[],
            ep,
        };
        assert_eq!(p.into_vec(1, Isa::detect()).unwrap(), [0.0, 6.0, 0.0, 6.0]);
    }

    #[test]
    fn undersized_operands_are_errors() {
        let ep = Epilogue {
            bias: &[0.0; 2],
            lo: f32::NEG_INFINITY,
            hi: f32::INFINITY,
        };
        let packed = pack(2, 2, &[1.0; 4]).unwrap();
        let isa = Isa::detect();
        let p = Product {
            m: 2,
            k: 2,
            n: 2,
            a: &[1.0; 4],
            packed: &packed,
            ep,
        };
        assert!(Product { a: &[1.0; 3], ..p }.into_vec(1, isa).is_err());
        assert!(
            Product {
                packed: &packed[..20],
                ..p
            }
            .into_vec(1, isa)
            .is_err()
        );
        let mut short_c = [MaybeUninit::uninit(); 3];
        assert!(p.run(&mut short_c, 1, isa).is_err());
        let short = Epilogue { bias: &[0.0], ..ep };
        assert!(Product { ep: short, ..p }.into_vec(1, isa).is_err());
        assert_eq!(p.into_vec(1, isa).unwrap(), [2.0; 4]);
    }
}
