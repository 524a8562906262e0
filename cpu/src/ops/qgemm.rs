//! Quantized GEMM for the 8-bit FULLY_CONNECTED and CONV_2D: `out = requant(A·B + bias)` with A
//! the centered input rows (x − zx) widened to i16 and B the centered weights (f − zf), i16 or
//! (FULLY_CONNECTED weights that fit) i8 widened in registers.
//!
//! Layouts: B is packed once (at prepare time for constant weights, [`QWeights`]) in panels of
//! [`NR`] columns, each panel `[k/2][NR][2]` (K padded to even, N to the panel width); A is read
//! as the fill writes it, row-major, a tile of up to [`MR`] rows at a time. The AVX2
//! micro-kernel multiplies pairs of K with `_mm256_madd_epi16` into 6×16 i32 accumulators; bias,
//! requantization (gemmlowp rounding, bit-exact with [`Requant::apply`]), the activation clamp
//! and the narrowing to bytes are its epilogue. The NEON and portable kernels compute the same
//! on the same layout.
//!
//! Overflow: every centered value is within ±255 (the zero points are validated in the type's
//! range), so a product is within ±65025 and a sum of K of them fits i32 while
//! K ≤ [`MAX_K`] (`i32::MAX / 65025`); `_mm256_madd_epi16` adds two such products (≤ 130050,
//! no saturation). Callers route larger K to the scalar reference kernels.

use std::mem::MaybeUninit;

use super::quant::{Requant, rdbpot, srdhm};
use crate::par;

/// Columns per B panel (two AVX2 registers of i32).
pub(crate) const NR: usize = 16;
/// Rows per micro-tile: 6 × 2 accumulator registers, 2 for the panel entry, 1 broadcast (15
/// of AVX2's 16). Four rows left a third of the registers idle and re-read each panel entry
/// for every four rows: MobileNetV2 int8 took 10.45 ms at one thread with 4, 10.23 with 6.
pub(crate) const MR: usize = 6;
/// The largest reduction length whose i32 accumulators cannot overflow.
pub(crate) const MAX_K: usize = i32::MAX as usize / (255 * 255);
/// Bytes of the A block kept in L2 while it meets every B panel.
const A_BLOCK_BYTES: usize = 128 * 1024;

/// The kernels the CPU can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Isa {
    /// Plain Rust, any CPU.
    Portable,
    /// AVX2 (x86-64), detected at run time.
    #[cfg(target_arch = "x86_64")]
    Avx2,
    /// NEON (aarch64's baseline SIMD).
    #[cfg(target_arch = "aarch64")]
    Neon,
}

impl Isa {
    /// The best kernel set this CPU runs.
    pub(crate) fn detect() -> Isa {
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx2") {
                return Isa::Avx2;
            }
        }
        #[cfg(target_arch = "aarch64")]
        {
            if std::arch::is_aarch64_feature_detected!("neon") {
                return Isa::Neon;
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
}

/// Centered weights `[n][k]` packed for the micro-kernel: `n.div_ceil(NR)` panels of
/// `kp / 2` entries, each entry the pairs `(w[j][2i], w[j][2i+1])` of the panel's NR columns.
#[derive(Debug)]
pub(crate) struct QWeights {
    /// Reduction length and output columns.
    pub(crate) k: usize,
    pub(crate) n: usize,
    /// `k` rounded up to even.
    kp: usize,
    data: Panels,
}

/// The packed values: i16, or i8 (when asked for and every centered weight fits: symmetric
/// int8 weights, zero point 0, and 8-bit ones centered on 128 do), half the bytes for the
/// kernels to read and widen in registers. Reading half the bytes speeds up the memory-bound
/// one-row GEMM (a batch-1 FULLY_CONNECTED) by about a quarter; widening costs the
/// compute-bound four-row tiles of a convolution 3-5% on AVX2, so convolutions keep i16.
#[derive(Debug)]
enum Panels {
    Wide(Box<[[i16; 2 * NR]]>),
    Narrow(Box<[[i8; 2 * NR]]>),
}

/// One panel of B, in the element type it was packed with.
#[derive(Clone, Copy)]
pub(crate) enum Panel<'a> {
    Wide(&'a [[i16; 2 * NR]]),
    Narrow(&'a [[i8; 2 * NR]]),
}

impl QWeights {
    /// Packs `n` rows of `k` centered weights, `w(j * k + i)` being row j, column i, as i8 when
    /// `narrow` and every value fits, else as i16. None when a value does not fit the kernel's
    /// ±255 bound or the size overflows.
    pub(crate) fn pack(
        n: usize,
        k: usize,
        narrow: bool,
        w: impl Fn(usize) -> i32,
    ) -> Option<QWeights> {
        let kp = k.checked_add(k % 2)?;
        let pairs = kp / 2;
        let panels = n.div_ceil(NR);
        let len = panels.checked_mul(pairs)?;
        n.checked_mul(k)?;
        let mut data = vec![[0i16; 2 * NR]; len].into_boxed_slice();
        for (p, panel) in data.chunks_mut(pairs.max(1)).enumerate().take(panels) {
            for j in 0..NR.min(n - p * NR) {
                let row = (p * NR + j) * k;
                for i in 0..k {
                    let v = w(row + i);
                    if !(-255..=255).contains(&v) {
                        return None;
                    }
                    panel[i / 2][2 * j + i % 2] = v as i16;
                }
            }
        }
        let narrow = narrow && data.as_flattened().iter().all(|&v| i8::try_from(v).is_ok());
        let data = if narrow {
            // Every value fits i8 (just checked), so the casts are exact.
            Panels::Narrow(data.iter().map(|e| e.map(|v| v as i8)).collect())
        } else {
            Panels::Wide(data)
        };
        Some(QWeights { k, n, kp, data })
    }

    /// Bytes held.
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> usize {
        match &self.data {
            Panels::Wide(d) => std::mem::size_of_val::<[[i16; 2 * NR]]>(d),
            Panels::Narrow(d) => std::mem::size_of_val::<[[i8; 2 * NR]]>(d),
        }
    }

    /// Whether the values are packed as i8.
    #[cfg(test)]
    pub(crate) fn is_narrow(&self) -> bool {
        matches!(self.data, Panels::Narrow(_))
    }

    fn panel(&self, p: usize) -> Panel<'_> {
        let range = p * self.kp / 2..(p + 1) * self.kp / 2;
        match &self.data {
            Panels::Wide(d) => Panel::Wide(&d[range]),
            Panels::Narrow(d) => Panel::Narrow(&d[range]),
        }
    }
}

/// The requantization parameters of 8 consecutive output channels, laid out for one AVX2
/// register each.
#[derive(Clone, Copy, Debug, Default)]
struct Group {
    bias: [i32; 8],
    mult: [i32; 8],
    /// Left shift (0..=31) before the doubling high multiply.
    left: [i32; 8],
    /// Right shift (0..=31) after it, with its rounding mask and half mask.
    right: [i32; 8],
    mask: [i32; 8],
    half: [i32; 8],
}

/// Bias, requantization and activation of every output channel: [`Requant::apply`] of
/// `acc + bias`, computed in i32.
#[derive(Clone, Debug)]
pub(crate) struct Epilogue {
    /// The channel count and the reduction length it was made for.
    pub(crate) n: usize,
    pub(crate) k: usize,
    groups: Vec<Group>,
    /// The activation bounds minus the output zero point (saturated to i32), and the zero point:
    /// `clamp(r + zp, lo, hi) = clamp(r, lo - zp, hi - zp) + zp` without overflow.
    lo: i32,
    hi: i32,
    zp: i32,
    /// Whether the output is TENSOR_QUANT8_ASYMM_SIGNED (bytes are i8).
    pub(crate) signed: bool,
    /// What only the vector epilogues read.
    #[cfg_attr(
        not(any(target_arch = "x86_64", target_arch = "aarch64")),
        allow(dead_code)
    )]
    vector: VectorOnly,
}

/// The parts of [`Epilogue`] only the vector epilogues read (the NEON one reads only the
/// bounds: its saturating addition and shift cost what the plain ones do).
#[derive(Clone, Debug)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
struct VectorOnly {
    /// The activation bounds themselves (within the output type's range).
    out_lo: i32,
    out_hi: i32,
    /// Whether `acc + bias` cannot overflow (plain addition is the saturating one).
    plain_bias: bool,
    /// Whether no channel shifts left (every multiplier below 1).
    no_left: bool,
}

impl Epilogue {
    /// For `n` output channels (padded with zeros to a multiple of [`NR`]) of `bias`, after
    /// reductions of at most `k` products of centered values (|acc| ≤ k · 255²).
    pub(crate) fn new(rq: &Requant, bias: &[i32], n: usize, k: usize) -> Option<Epilogue> {
        let np = n.div_ceil(NR).checked_mul(NR)?;
        let mut groups = vec![Group::default(); np / 8];
        for j in 0..n {
            let g = &mut groups[j / 8];
            let l = j % 8;
            let (m, shift) = rq.multiplier(j)?;
            g.bias[l] = *bias.get(j)?;
            g.mult[l] = m;
            g.left[l] = shift.clamp(0, 31);
            let right = (-shift).clamp(0, 31);
            g.right[l] = right;
            g.mask[l] = ((1i64 << right) - 1) as i32;
            g.half[l] = g.mask[l] >> 1;
        }
        let (zp, lo, hi) = rq.output_range();
        let sat = |v: i64| v.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32;
        let acc_max = (k as i64).saturating_mul(255 * 255);
        let plain_bias = bias
            .iter()
            .take(n)
            .all(|&b| acc_max.saturating_add(i64::from(b).abs()) <= i64::from(i32::MAX));
        let no_left = groups.iter().all(|g| g.left == [0; 8]);
        Some(Epilogue {
            n,
            k,
            groups,
            vector: VectorOnly {
                out_lo: lo,
                out_hi: hi,
                plain_bias,
                no_left,
            },
            lo: sat(i64::from(lo) - i64::from(zp)),
            hi: sat(i64::from(hi) - i64::from(zp)),
            zp,
            signed: rq.ty == crate::model::OperandType::TensorQuant8AsymmSigned,
        })
    }

    /// Output channel `j`'s value for accumulator `acc` (the portable epilogue).
    #[inline]
    pub(crate) fn scalar(&self, acc: i32, j: usize) -> u8 {
        let g = &self.groups[j / 8];
        let l = j % 8;
        let a = acc.saturating_add(g.bias[l]);
        let xs = (i64::from(a) << g.left[l]).clamp(i64::from(i32::MIN), i64::from(i32::MAX));
        let r = rdbpot(srdhm(xs as i32, g.mult[l]), g.right[l]);
        (r.max(self.lo).min(self.hi) + self.zp) as u8
    }
}

/// How many threads an m×k by k×n product takes. Rows split by row tiles; a lone row splits
/// its columns by panels, and counts its work four times: it streams each weight once from
/// L3 or memory, where a second core adds bandwidth, and its multiply-adds run at twice the
/// tiles' rate (the MLP at batch 1, int8: each 1.6–2.1 Mflop layer then splits).
pub(crate) fn threads(m: usize, k: usize, n: usize) -> usize {
    let work = 2usize.saturating_mul(m).saturating_mul(n).saturating_mul(k);
    if m == 1 {
        par::threads_for(work.saturating_mul(4), n.div_ceil(NR))
    } else {
        par::threads_for(work, m.div_ceil(MR))
    }
}

/// `out[m][n]` = the requantized `A·B + bias` where `fill(row0, a)` writes rows `row0..` of A
/// into `a` (whole rows of `w.kp` centered values, zero past `w.k`). Splits the rows over
/// `threads` threads. On `Ok`, every element of `out` has been written, so `out` may come
/// uninitialized ([`crate::tensor::output_buffer_uninit`]); on `Err` none has.
pub(crate) fn gemm<F>(
    isa: Isa,
    w: &QWeights,
    ep: &Epilogue,
    out: &mut [MaybeUninit<u8>],
    threads: usize,
    fill: F,
) -> Result<(), String>
where
    F: Fn(usize, &mut [i16]) + Sync,
{
    let n = w.n;
    if n == 0 || out.is_empty() {
        return Ok(());
    }
    if out.len() % n != 0 || ep.groups.len() * 8 < n.div_ceil(NR) * NR {
        return Err("quantized GEMM: output and channel parameters disagree".into());
    }
    if out.len() == n && threads > 1 {
        // A lone row (a batch-1 FULLY_CONNECTED) has one row tile: its threads split the
        // columns instead, by whole panels, each reading its own part of the weights.
        let mut a = vec![[0i16; 2]; w.kp / 2];
        fill(0, a.as_flattened_mut());
        let runs = par::RowRuns {
            align: NR,
            min_rows: NR,
        };
        return par::for_row_runs(out, 1, threads, runs, |c0, part| {
            one_row(isa, w, ep, &a, c0, part);
            Ok(())
        });
    }
    // Runs of whole row tiles: a run ending in a partial tile would compute its padding.
    let runs = par::RowRuns {
        align: MR,
        min_rows: MR,
    };
    par::for_row_runs(out, n, threads, runs, |r0, part| {
        rows(isa, w, ep, r0, part, &fill);
        Ok(())
    })
}

/// Columns `c0..c0 + out.len()` (`c0` a multiple of NR) of the product of the lone row `a`
/// (`w.kp / 2` pairs).
fn one_row(
    isa: Isa,
    w: &QWeights,
    ep: &Epilogue,
    a: &[[i16; 2]],
    c0: usize,
    out: &mut [MaybeUninit<u8>],
) {
    let pairs = w.kp / 2;
    for (q, part) in out.chunks_mut(NR).enumerate() {
        let j0 = c0 + q * NR;
        let d = Dst {
            nc: part.len(),
            out: part,
            ldo: 0,
            j0,
            mr: 1,
        };
        tile(isa, Rows { a, pairs }, w.panel(j0 / NR), ep, d);
    }
}

/// One tile with the kernels of `isa` (inlined: a call per tile was 0.7% of MobileNetV2 int8).
#[inline(always)]
fn tile(isa: Isa, a: Rows<'_>, b: Panel<'_>, ep: &Epilogue, d: Dst<'_>) {
    match isa {
        Isa::Portable => tile_portable(a, b, ep, d),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: Isa::Avx2 is only chosen when the CPU has AVX2.
        Isa::Avx2 => unsafe { avx2::tile(a, b, ep, d) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: Isa::Neon is only chosen when the CPU has NEON.
        Isa::Neon => unsafe { neon::tile(a, b, ep, d) },
    }
}

/// Output rows `r0..` (all of `out`), one block of A at a time.
fn rows<F>(isa: Isa, w: &QWeights, ep: &Epilogue, r0: usize, out: &mut [MaybeUninit<u8>], fill: &F)
where
    F: Fn(usize, &mut [i16]),
{
    let (n, kp) = (w.n, w.kp);
    let pairs = kp / 2;
    let total = out.len() / n;
    let mc = (A_BLOCK_BYTES / (2 * kp).max(1)).clamp(MR, 256) / MR * MR;
    let mc = mc.min(total.div_ceil(MR) * MR);
    let mut a = vec![[0i16; 2]; mc * pairs];
    for (t, block) in out.chunks_mut(mc * n).enumerate() {
        let rows = block.len() / n;
        let a = &mut a[..rows * pairs];
        fill(r0 + t * mc, a.as_flattened_mut());
        let tiles = rows.div_ceil(MR);
        for p in 0..n.div_ceil(NR) {
            let b = w.panel(p);
            let j0 = p * NR;
            let nc = NR.min(n - j0);
            for i in 0..tiles {
                let mr = MR.min(rows - i * MR);
                let at = Rows {
                    a: &a[i * MR * pairs..(i * MR + mr) * pairs],
                    pairs,
                };
                let d = Dst {
                    out: &mut block[i * MR * n + j0..],
                    ldo: n,
                    j0,
                    nc,
                    mr,
                };
                tile(isa, at, b, ep, d);
            }
        }
    }
}

/// The rows of A one tile reads: `a.len() / pairs` (1 to MR) rows of `pairs` pairs of K, row
/// after row as the fill wrote them (the AVX2 kernel broadcasts a pair as one i32, the first
/// value in the low half).
#[derive(Clone, Copy)]
pub(crate) struct Rows<'a> {
    a: &'a [[i16; 2]],
    pairs: usize,
}

impl<'a> Rows<'a> {
    /// The first `R` rows (R at most the tile's row count), each `pairs` long.
    #[inline(always)]
    fn first<const R: usize>(&self) -> [&'a [[i16; 2]]; R] {
        std::array::from_fn(|r| &self.a[r * self.pairs..(r + 1) * self.pairs])
    }
}

/// Calls `$tile::<R, _>($args)` with R the tile's row count (`$rows`: 1 to MR), so a lone row
/// (a batch-1 FULLY_CONNECTED) or the last rows of a block compute only themselves.
macro_rules! by_rows {
    ($rows:expr, $tile:ident, $($args:expr),*) => {
        match $rows {
            1 => $tile::<1, _>($($args),*),
            2 => $tile::<2, _>($($args),*),
            3 => $tile::<3, _>($($args),*),
            4 => $tile::<4, _>($($args),*),
            5 => $tile::<5, _>($($args),*),
            _ => $tile::<MR, _>($($args),*),
        }
    };
}

/// The output zero point and activation bounds, each in a register `V` of i16 lanes, and the
/// output's signedness: the vector epilogues' narrowing to bytes.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[derive(Clone, Copy)]
pub(crate) struct Narrow<V> {
    zp: V,
    lo: V,
    hi: V,
    signed: bool,
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
impl<V> Narrow<V> {
    /// `ep`'s zero point and bounds (all within [-128, 255]: validated types and ranges) as i16,
    /// each put in every lane by `splat`.
    #[inline(always)]
    fn splat(ep: &Epilogue, splat: impl Fn(i16) -> V) -> Narrow<V> {
        let zp_lo_hi = [ep.zp, ep.vector.out_lo, ep.vector.out_hi];
        Narrow::of(zp_lo_hi, ep.signed, splat)
    }

    /// The zero point and the bounds `[zp, lo, hi]` (saturated to i16), each put in every lane
    /// by `splat`.
    #[inline(always)]
    fn of([zp, lo, hi]: [i32; 3], signed: bool, splat: impl Fn(i16) -> V) -> Narrow<V> {
        let [zp, lo, hi] = [zp, lo, hi].map(|v| splat(v.clamp(-32768, 32767) as i16));
        Narrow { zp, lo, hi, signed }
    }
}

/// Writes the 16 bytes `store` writes into `dst`, or (when `dst` is shorter) its first
/// `dst.len()` of them. `dst` may be uninitialized (an output buffer not cleared first):
/// `store` writes all 16 bytes it is given.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[inline(always)]
fn put16(dst: &mut [MaybeUninit<u8>], store: impl FnOnce(&mut [MaybeUninit<u8>; 16])) {
    match dst.first_chunk_mut::<16>() {
        Some(d) => store(d),
        None => {
            let mut out = [MaybeUninit::new(0u8); 16];
            store(&mut out);
            dst.copy_from_slice(&out[..dst.len()]);
        }
    }
}

/// Where a tile goes: row r (of `mr`) at `out[r * ldo..][..nc]`, columns `j0..j0 + nc` of
/// the product (`out` starts at the tile's first column).
pub(crate) struct Dst<'a> {
    out: &'a mut [MaybeUninit<u8>],
    ldo: usize,
    j0: usize,
    nc: usize,
    mr: usize,
}

/// Portable micro-kernel: one tile of `a`'s rows (up to MR) by NR columns.
fn tile_portable(a: Rows<'_>, b: Panel<'_>, ep: &Epilogue, d: Dst<'_>) {
    match b {
        Panel::Wide(b) => by_rows!(d.mr, tile_portable_with, a, b, ep, d),
        Panel::Narrow(b) => by_rows!(d.mr, tile_portable_with, a, b, ep, d),
    }
}

/// [`tile_portable`] for R rows, on panels of `E`.
fn tile_portable_with<const R: usize, E: Copy + Into<i32>>(
    a: Rows<'_>,
    b: &[[E; 2 * NR]],
    ep: &Epilogue,
    d: Dst<'_>,
) {
    let (out, ldo, j0, nc, mr) = (d.out, d.ldo, d.j0, d.nc, d.mr);
    let mut acc = [[0i32; NR]; R];
    let rows = a.first::<R>();
    for (i, bp) in b.iter().enumerate().take(a.pairs) {
        for (accr, row) in acc.iter_mut().zip(rows) {
            let (x0, x1) = (i32::from(row[i][0]), i32::from(row[i][1]));
            for (j, v) in accr.iter_mut().enumerate() {
                *v += x0 * bp[2 * j].into() + x1 * bp[2 * j + 1].into();
            }
        }
    }
    for (r, accr) in acc.iter().enumerate().take(mr) {
        let o = &mut out[r * ldo..][..nc];
        for (j, (d, &v)) in o.iter_mut().zip(accr).enumerate() {
            d.write(ep.scalar(v, j0 + j));
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    //! The AVX2 micro-kernel and the vector epilogue shared with the depthwise kernel.

    use super::{Dst, Epilogue, Group, MR, NR, Panel, Rows};
    use std::arch::x86_64::*;
    use std::mem::MaybeUninit;

    /// 16 i16 from an array of at least 16.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(crate) fn ld16<const L: usize>(s: &[i16; L], at: usize) -> __m256i {
        let s = &s[at..at + 16];
        // SAFETY: `s` holds 16 i16 (32 bytes), read unaligned.
        unsafe { _mm256_loadu_si256(s.as_ptr().cast()) }
    }

    /// 8 i32 from an array of at least 8.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(crate) fn ld8i<const L: usize>(s: &[i32; L], at: usize) -> __m256i {
        let s = &s[at..at + 8];
        // SAFETY: `s` holds 8 i32 (32 bytes), read unaligned.
        unsafe { _mm256_loadu_si256(s.as_ptr().cast()) }
    }

    /// `a + b` saturated to i32.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn sat_add(a: __m256i, b: __m256i) -> __m256i {
        let s = _mm256_add_epi32(a, b);
        let ovf = _mm256_and_si256(_mm256_xor_si256(a, s), _mm256_xor_si256(b, s));
        let sat = _mm256_xor_si256(_mm256_srai_epi32(a, 31), _mm256_set1_epi32(i32::MAX));
        _mm256_blendv_epi8(s, sat, _mm256_srai_epi32(ovf, 31))
    }

    /// gemmlowp SaturatingRoundingDoublingHighMul for `m != i32::MIN` (of either sign: the
    /// saturating case a = m = i32::MIN never arises). Its rounding, (a·m + 2^30) / 2^31
    /// truncated for a·m >= 0 and (a·m + 1 - 2^30) / 2^31 truncated (= ceiled) below, is in both
    /// cases floor((a·m + 2^30) / 2^31), whose value fits i32: bits 31..62 of the 64-bit sum.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(crate) fn srdhm(a: __m256i, m: __m256i) -> __m256i {
        let half = _mm256_set1_epi64x(1 << 30);
        let p_even = _mm256_add_epi64(_mm256_mul_epi32(a, m), half);
        // Lanes 1, 3, 5, 7 moved to the even positions mul_epi32 reads.
        let (a_odd, m_odd) = (_mm256_shuffle_epi32(a, 0xF5), _mm256_shuffle_epi32(m, 0xF5));
        let p_odd = _mm256_add_epi64(_mm256_mul_epi32(a_odd, m_odd), half);
        let r_even = _mm256_srli_epi64(p_even, 31);
        let r_odd = _mm256_slli_epi64(p_odd, 1);
        _mm256_blend_epi32(r_even, r_odd, 0b1010_1010)
    }

    /// The requantization parameters of 8 channels in registers, loaded once for every row
    /// of a tile.
    #[derive(Clone, Copy)]
    pub(crate) struct Lanes {
        bias: __m256i,
        mult: __m256i,
        left: __m256i,
        right: RightShift,
        plain_bias: bool,
        no_left: bool,
    }

    /// A rounding right shift ([`rdbpot`]) of each lane by its exponent (0..=31), with the
    /// exponent's remainder mask and half mask.
    #[derive(Clone, Copy)]
    pub(crate) struct RightShift {
        right: __m256i,
        mask: __m256i,
        half: __m256i,
    }

    impl RightShift {
        /// The shift of every lane by `e` (at most 31, as `quant::rdbpot` clamps it).
        #[inline]
        #[target_feature(enable = "avx2")]
        pub(crate) fn splat(e: u32) -> RightShift {
            let e = e.min(31);
            let mask = ((1i64 << e) - 1) as i32;
            RightShift {
                right: _mm256_set1_epi32(e as i32),
                mask: _mm256_set1_epi32(mask),
                half: _mm256_set1_epi32(mask >> 1),
            }
        }
    }

    /// gemmlowp RoundingDivideByPOT (`quant::rdbpot`) of each lane by its exponent in `s`:
    /// (x >> e) + (rem > half + (x < 0)).
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(crate) fn rdbpot(x: __m256i, s: &RightShift) -> __m256i {
        let rem = _mm256_and_si256(x, s.mask);
        let thr = _mm256_sub_epi32(s.half, _mm256_srai_epi32(x, 31));
        _mm256_sub_epi32(_mm256_srav_epi32(x, s.right), _mm256_cmpgt_epi32(rem, thr))
    }

    impl Lanes {
        /// Channels `8g..8g+8` of `ep`.
        #[inline]
        #[target_feature(enable = "avx2")]
        pub(crate) fn load(ep: &Epilogue, g: usize) -> Lanes {
            let g = &ep.groups[g];
            Lanes::gather(ep, |field| ld8i(field(g), 0))
        }

        /// Channels `16b + 4h + [0, 1, 2, 3, 8, 9, 10, 11]` of `ep` (h is 0 or 1): the
        /// channels of `_mm256_madd_epi16` of the `_mm256_unpacklo_epi16` (h = 0) or
        /// `_mm256_unpackhi_epi16` (h = 1) of two registers of channels `16b..16b + 16`.
        #[inline]
        #[target_feature(enable = "avx2")]
        pub(crate) fn load_unpacked(ep: &Epilogue, b: usize, h: usize) -> Lanes {
            let (g0, g1) = (&ep.groups[2 * b], &ep.groups[2 * b + 1]);
            let at = 4 * h;
            let half = |v: &[i32; 8]| {
                let v = &v[at..at + 4];
                // SAFETY: `v` holds 4 i32 (16 bytes), read unaligned.
                unsafe { _mm_loadu_si128(v.as_ptr().cast()) }
            };
            Lanes::gather(ep, |field| {
                _mm256_set_m128i(half(field(g1)), half(field(g0)))
            })
        }

        /// The lanes whose parameter vectors `ld` loads, given how to find a parameter in a
        /// [`Group`].
        #[inline(always)]
        fn gather(ep: &Epilogue, ld: impl Fn(fn(&Group) -> &[i32; 8]) -> __m256i) -> Lanes {
            Lanes {
                bias: ld(|g| &g.bias),
                mult: ld(|g| &g.mult),
                left: ld(|g| &g.left),
                right: RightShift {
                    right: ld(|g| &g.right),
                    mask: ld(|g| &g.mask),
                    half: ld(|g| &g.half),
                },
                plain_bias: ep.vector.plain_bias,
                no_left: ep.vector.no_left,
            }
        }
    }

    /// `acc` (8 channels' accumulators) requantized with the channels' `p`, before the zero
    /// point and the activation ([`store16`] adds and applies them).
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(crate) fn requant(acc: __m256i, p: &Lanes) -> __m256i {
        let a = if p.plain_bias {
            _mm256_add_epi32(acc, p.bias)
        } else {
            sat_add(acc, p.bias)
        };
        let xs = if p.no_left {
            a
        } else {
            let sh = _mm256_sllv_epi32(a, p.left);
            let kept = _mm256_cmpeq_epi32(_mm256_srav_epi32(sh, p.left), a);
            let sat = _mm256_xor_si256(_mm256_srai_epi32(a, 31), _mm256_set1_epi32(i32::MAX));
            _mm256_blendv_epi8(sat, sh, kept)
        };
        rdbpot(srdhm(xs, p.mult), &p.right)
    }

    /// The output zero point and activation bounds as i16 lanes, and the output's signedness.
    pub(crate) type Narrow = super::Narrow<__m256i>;

    impl Narrow {
        #[inline]
        #[target_feature(enable = "avx2")]
        pub(crate) fn load(ep: &Epilogue) -> Narrow {
            Narrow::splat(ep, |v| _mm256_set1_epi16(v))
        }

        /// Zero point `zp` and bounds `lo..=hi`, all within [-255, 255] (as [`store16`]
        /// needs), for bytes that are i8 when `signed`.
        #[inline]
        #[target_feature(enable = "avx2")]
        pub(crate) fn new(zp: i32, lo: i32, hi: i32, signed: bool) -> Narrow {
            Narrow::of([zp, lo, hi], signed, |v| _mm256_set1_epi16(v))
        }
    }

    /// Stores 16 requantized values (channels of `v0` then `v1`, from [`requant`]) plus the
    /// zero point, clamped to the activation, as bytes into `dst` ([`narrow16`]): all 16
    /// straight from the register when `dst` has room, else its first `dst.len()`.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(crate) fn store16(dst: &mut [MaybeUninit<u8>], v0: __m256i, v1: __m256i, n: &Narrow) {
        // Channels 0-3, 8-11, 4-7, 12-15 (the 128-bit halves of the packs) back in order.
        let b = _mm_shuffle_epi8(
            narrow16(v0, v1, n),
            _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15),
        );
        put_bytes16(dst, b);
    }

    /// [`store16`] of 16 channels requantized in the order of [`Lanes::load_unpacked`]:
    /// channels 0-3 and 8-11 in `lo`, 4-7 and 12-15 in `hi`, which `_mm256_packs_epi32`
    /// puts in order, so no lane crosses a 128-bit half but in the final pack.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(crate) fn store16_unpacked(
        dst: &mut [MaybeUninit<u8>],
        lo: __m256i,
        hi: __m256i,
        n: &Narrow,
    ) {
        put_bytes16(dst, narrow16(lo, hi, n));
    }

    /// The 16 values of `a` and `b` plus the zero point, clamped to the activation, as bytes
    /// in the order of `_mm256_packs_epi32(a, b)`'s lanes: a0-3, b0-3, a4-7, b4-7. Narrowed
    /// to i16 first (saturating) then offset and clamped 16 lanes at a time: with the zero
    /// point and the bounds within ±255, a value saturated at ±32767 lands on the same bound
    /// as the exact sum.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn narrow16(a: __m256i, b: __m256i, n: &Narrow) -> __m128i {
        let w = _mm256_adds_epi16(_mm256_packs_epi32(a, b), n.zp);
        let w = _mm256_min_epi16(_mm256_max_epi16(w, n.lo), n.hi);
        let (l, u) = (_mm256_castsi256_si128(w), _mm256_extracti128_si256::<1>(w));
        if n.signed {
            _mm_packs_epi16(l, u)
        } else {
            _mm_packus_epi16(l, u)
        }
    }

    /// The 16 bytes of `b` into `dst` ([`super::put16`]: its first `dst.len()` when shorter).
    #[inline]
    #[target_feature(enable = "avx2")]
    fn put_bytes16(dst: &mut [MaybeUninit<u8>], b: __m128i) {
        // SAFETY: `d` holds 16 bytes, written unaligned.
        super::put16(dst, |d| unsafe {
            _mm_storeu_si128(d.as_mut_ptr().cast(), b)
        });
    }

    /// How far ahead of its reads the one-row tile prefetches its panel, in bytes.
    const PREFETCH_AHEAD: usize = 1024;

    /// The AVX2 form of [`super::tile_portable`]: i8 panels are widened as they are loaded
    /// (`_mm256_cvtepi8_epi16`).
    #[target_feature(enable = "avx2")]
    pub(crate) fn tile(a: Rows<'_>, b: Panel<'_>, ep: &Epilogue, d: Dst<'_>) {
        let wide = |p: &[i16; 2 * NR]| [ld16(p, 0), ld16(p, 16)];
        let narrow = |p: &[i8; 2 * NR]| [wide16(p, 0), wide16(p, 16)];
        match b {
            Panel::Wide(b) => by_rows!(d.mr, tile_with, a, b, wide, ep, d),
            Panel::Narrow(b) => by_rows!(d.mr, tile_with, a, b, narrow, ep, d),
        }
    }

    /// 16 i8 from `s[at..at + 16]` widened to i16.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn wide16(s: &[i8; 2 * NR], at: usize) -> __m256i {
        let s = &s[at..at + 16];
        // SAFETY: `s` holds 16 bytes, read unaligned.
        _mm256_cvtepi8_epi16(unsafe { _mm_loadu_si128(s.as_ptr().cast()) })
    }

    /// `acc += x · b`: the A pair `x` (two consecutive values of the reduction, one row)
    /// broadcast and multiplied into a panel entry's two registers of i16 pairs `b`, 16
    /// columns of i32 sums.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn madd_pair(acc: &mut [__m256i; 2], [x0, x1]: [i16; 2], [b0, b1]: [__m256i; 2]) {
        let x = _mm256_set1_epi32(i32::from(x0 as u16) | (i32::from(x1) << 16));
        acc[0] = _mm256_add_epi32(acc[0], _mm256_madd_epi16(x, b0));
        acc[1] = _mm256_add_epi32(acc[1], _mm256_madd_epi16(x, b1));
    }

    /// [`tile`] on panels of `E`, whose entries `load` reads as two registers of i16 pairs.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn tile_with<const R: usize, E>(
        a: Rows<'_>,
        b: &[[E; 2 * NR]],
        load: impl Fn(&[E; 2 * NR]) -> [__m256i; 2],
        ep: &Epilogue,
        d: Dst<'_>,
    ) {
        let (out, ldo, j0, nc, mr) = (d.out, d.ldo, d.j0, d.nc, d.mr);
        let z = _mm256_setzero_si256();
        let mut acc = [[z; 2]; R];
        let rows = a.first::<R>();
        let mut step = |i: usize, bp: &[E; 2 * NR]| {
            let b = load(bp);
            for (accr, row) in acc.iter_mut().zip(rows) {
                madd_pair(accr, row[i], b);
            }
        };
        let b = &b[..a.pairs.min(b.len())];
        if R == 1 {
            // A lone row (a batch-1 FULLY_CONNECTED) streams its panels from L3 or memory
            // with two multiply-adds per 32 bytes: the panel is prefetched 1 KiB ahead, one
            // prefetch per 64-byte line. On a Zen 2 the MLP at batch 1, int8, went from 61 to
            // 53-55 µs; a prefetch per entry measured 55 µs there and slower on a Zen 3
            // (docs/dependencies.md). The loop is bound by how many instructions the front end
            // issues, not by the multiply-adds: eight entries a round, their A pairs from a
            // slice zipped with the panel's (no bounds check, one loop branch per eight) took
            // the MLP at batch 1, int8, from 53-55 to 44 µs there; four entries gave 46 µs.
            let entry = std::mem::size_of::<[E; 2 * NR]>();
            let row = &rows[0][..b.len()];
            let mut acc0 = acc[0];
            let mut madd = |x: [i16; 2], bp: &[E; 2 * NR]| madd_pair(&mut acc0, x, load(bp));
            const ROUND: usize = 8;
            for (bq, aq) in b.chunks_exact(ROUND).zip(row.chunks_exact(ROUND)) {
                for line in (0..ROUND * entry).step_by(64) {
                    let ahead = bq.as_ptr().cast::<i8>().wrapping_add(PREFETCH_AHEAD + line);
                    _mm_prefetch::<_MM_HINT_T0>(ahead);
                }
                for (&x, bp) in aq.iter().zip(bq) {
                    madd(x, bp);
                }
            }
            let done = b.len() / ROUND * ROUND;
            for (&x, bp) in row[done..].iter().zip(&b[done..]) {
                madd(x, bp);
            }
            acc[0] = acc0;
        } else {
            for (i, bp) in b.iter().enumerate() {
                step(i, bp);
            }
        }
        let p0 = Lanes::load(ep, j0 / 8);
        let p1 = Lanes::load(ep, j0 / 8 + 1);
        let narrow = Narrow::load(ep);
        for (r, accr) in acc.iter().enumerate().take(mr) {
            let v0 = requant(accr[0], &p0);
            let v1 = requant(accr[1], &p1);
            store16(&mut out[r * ldo..][..nc], v0, v1, &narrow);
        }
    }
}

#[cfg(target_arch = "aarch64")]
pub(crate) mod neon {
    //! The NEON micro-kernel and the vector epilogue shared with the depthwise kernel. NEON is
    //! part of the aarch64 baseline (enabled for every aarch64 target Rust builds); the
    //! functions still declare it, as the intrinsics require, and [`super::Isa::Neon`] is
    //! chosen by run-time detection like the other sets.

    use super::{Dst, Epilogue, Group, MR, NR, Panel, Rows};
    use std::arch::aarch64::*;
    use std::mem::MaybeUninit;

    /// Kernel calls made (tiles and depthwise rows), for the test that proves NEON ran.
    #[cfg(test)]
    pub(crate) static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

    /// Counts one kernel call (tests only).
    #[inline]
    pub(crate) fn ran() {
        #[cfg(test)]
        RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// 8 i16 from `s[at..at + 8]` (panics, as indexing does, when `s` is shorter).
    #[inline]
    #[target_feature(enable = "neon")]
    pub(crate) fn ld8(s: &[i16], at: usize) -> int16x8_t {
        let s = &s[at..at + 8];
        // SAFETY: `s` holds 8 i16 (16 bytes); vld1q_s16 needs only i16 alignment.
        unsafe { vld1q_s16(s.as_ptr()) }
    }

    /// 16 i16 from `s[at..at + 16]`, de-interleaved: the even-indexed 8, then the odd 8.
    #[inline]
    #[target_feature(enable = "neon")]
    fn ld_pairs(s: &[i16; 2 * NR], at: usize) -> int16x8x2_t {
        let s = &s[at..at + 16];
        // SAFETY: `s` holds 16 i16 (32 bytes), as vld2q_s16 reads; i16 alignment.
        unsafe { vld2q_s16(s.as_ptr()) }
    }

    /// [`ld_pairs`] of i8 values, widened to i16.
    #[inline]
    #[target_feature(enable = "neon")]
    fn ld_pairs_i8(s: &[i8; 2 * NR], at: usize) -> int16x8x2_t {
        let s = &s[at..at + 16];
        // SAFETY: `s` holds 16 bytes, as vld2_s8 reads.
        let v = unsafe { vld2_s8(s.as_ptr()) };
        int16x8x2_t(vmovl_s8(v.0), vmovl_s8(v.1))
    }

    /// 4 i32 from `s[at..at + 4]`.
    #[inline]
    #[target_feature(enable = "neon")]
    fn ld4(s: &[i32; 8], at: usize) -> int32x4_t {
        let s = &s[at..at + 4];
        // SAFETY: `s` holds 4 i32 (16 bytes); vld1q_s32 needs only i32 alignment.
        unsafe { vld1q_s32(s.as_ptr()) }
    }

    /// The requantization parameters of 4 channels in registers, loaded once for every row of
    /// a tile.
    #[derive(Clone, Copy)]
    pub(crate) struct Lanes {
        bias: int32x4_t,
        mult: int32x4_t,
        left: int32x4_t,
        /// Minus the right shift: `vrshlq_s32` shifts right by a negative count.
        neg_right: int32x4_t,
    }

    impl Lanes {
        /// Channels `4q..4q+4` of `ep`.
        #[inline]
        #[target_feature(enable = "neon")]
        pub(crate) fn load(ep: &Epilogue, q: usize) -> Lanes {
            let Group {
                bias,
                mult,
                left,
                right,
                ..
            } = &ep.groups[q / 2];
            let at = 4 * (q % 2);
            Lanes {
                bias: ld4(bias, at),
                mult: ld4(mult, at),
                left: ld4(left, at),
                neg_right: vnegq_s32(ld4(right, at)),
            }
        }
    }

    /// `acc` (4 channels' accumulators) requantized with the channels' `p`, before the zero
    /// point and the activation ([`store16`] adds and applies them). Each step is the exact
    /// counterpart of [`Epilogue::scalar`]'s:
    /// - `acc + bias` saturated: `vqaddq_s32`;
    /// - the left shift saturated to i32 (the scalar form clamps the i64 shift): `vqshlq_s32`;
    /// - SaturatingRoundingDoublingHighMul: `vqrdmulhq_s32` computes sat((2·a·m + 2^31) >> 32)
    ///   = floor((a·m + 2^30) / 2^31), which is gemmlowp's rounding for a·m ≥ 0 and, for
    ///   a·m < 0, equals its truncated (a·m + 1 − 2^30) / 2^31 (= ceil = floor((a·m + 2^30) /
    ///   2^31)); both saturate only for a = m = i32::MIN;
    /// - RoundingDivideByPOT by e: `vrshlq_s32(x, -e)` rounds half up, (x + 2^(e−1)) >> e
    ///   computed without overflow; gemmlowp rounds half away from zero, which is
    ///   floor((x − [x < 0] + 2^(e−1)) / 2^e), so negative x (when e > 0: the sign bit of
    ///   x & −e) first gets −1, saturating (for x = i32::MIN both give i32::MIN >> e).
    #[inline]
    #[target_feature(enable = "neon")]
    pub(crate) fn requant(acc: int32x4_t, p: &Lanes) -> int32x4_t {
        let a = vqaddq_s32(acc, p.bias);
        let xs = vqshlq_s32(a, p.left);
        let x = vqrdmulhq_s32(xs, p.mult);
        let fix = vshrq_n_s32::<31>(vandq_s32(x, p.neg_right));
        vrshlq_s32(vqaddq_s32(x, fix), p.neg_right)
    }

    /// The output zero point and activation bounds as i16 lanes, and the output's signedness.
    pub(crate) type Narrow = super::Narrow<int16x8_t>;

    impl Narrow {
        #[inline]
        #[target_feature(enable = "neon")]
        pub(crate) fn load(ep: &Epilogue) -> Narrow {
            Narrow::splat(ep, |v| vdupq_n_s16(v))
        }
    }

    /// Stores 16 requantized values (channels of `v[0]` to `v[3]`, from [`requant`]) plus the
    /// zero point, clamped to the activation, as bytes into `dst`: all 16 when `dst` has room,
    /// else its first `dst.len()`. Narrowed to i16 first (saturating), then offset (saturating)
    /// and clamped: with the zero point and the bounds within ±255, a value saturated at ±32767
    /// lands on the same bound as the exact sum, and the clamped values narrow exactly.
    #[inline]
    #[target_feature(enable = "neon")]
    pub(crate) fn store16(dst: &mut [MaybeUninit<u8>], v: [int32x4_t; 4], n: &Narrow) {
        let fix = |w: int16x8_t| vminq_s16(vmaxq_s16(vqaddq_s16(w, n.zp), n.lo), n.hi);
        let w0 = fix(vqmovn_high_s32(vqmovn_s32(v[0]), v[1]));
        let w1 = fix(vqmovn_high_s32(vqmovn_s32(v[2]), v[3]));
        let b = if n.signed {
            vreinterpretq_u8_s8(vqmovn_high_s16(vqmovn_s16(w0), w1))
        } else {
            vqmovun_high_s16(vqmovun_s16(w0), w1)
        };
        // SAFETY: `d` holds 16 bytes; vst1q_u8 has no alignment requirement.
        super::put16(dst, |d| unsafe { vst1q_u8(d.as_mut_ptr().cast(), b) });
    }

    /// The NEON form of [`super::tile_portable`]: each pair entry of B is loaded
    /// de-interleaved (`vld2q_s16`: the even-k and the odd-k values of 8 columns), and each
    /// row's two A values multiply-accumulate them widened (`vmlal_n_s16`) into 4 × 4 i32
    /// accumulators a row (the partial sums are sums of the same products as the portable
    /// kernel's, so within the same i32 bound).
    #[target_feature(enable = "neon")]
    pub(crate) fn tile(a: Rows<'_>, b: Panel<'_>, ep: &Epilogue, d: Dst<'_>) {
        ran();
        let wide = |p: &[i16; 2 * NR]| [ld_pairs(p, 0), ld_pairs(p, NR)];
        let narrow = |p: &[i8; 2 * NR]| [ld_pairs_i8(p, 0), ld_pairs_i8(p, NR)];
        match b {
            Panel::Wide(b) => by_rows!(d.mr, tile_with, a, b, wide, ep, d),
            Panel::Narrow(b) => by_rows!(d.mr, tile_with, a, b, narrow, ep, d),
        }
    }

    /// [`tile`] on panels of `E`, whose entries `load` reads as columns 0-7 and 8-15, each
    /// de-interleaved.
    #[inline]
    #[target_feature(enable = "neon")]
    fn tile_with<const R: usize, E>(
        a: Rows<'_>,
        b: &[[E; 2 * NR]],
        load: impl Fn(&[E; 2 * NR]) -> [int16x8x2_t; 2],
        ep: &Epilogue,
        d: Dst<'_>,
    ) {
        let (out, ldo, j0, nc, mr) = (d.out, d.ldo, d.j0, d.nc, d.mr);
        let mut acc = [[vdupq_n_s32(0); 4]; R];
        let rows = a.first::<R>();
        for (i, bp) in b.iter().enumerate().take(a.pairs) {
            let [lo, hi] = load(bp);
            for (accr, row) in acc.iter_mut().zip(rows) {
                let [x0, x1] = row[i];
                let mla = |acc, even, odd| vmlal_n_s16(vmlal_n_s16(acc, even, x0), odd, x1);
                accr[0] = mla(accr[0], vget_low_s16(lo.0), vget_low_s16(lo.1));
                accr[1] = mla(accr[1], vget_high_s16(lo.0), vget_high_s16(lo.1));
                accr[2] = mla(accr[2], vget_low_s16(hi.0), vget_low_s16(hi.1));
                accr[3] = mla(accr[3], vget_high_s16(hi.0), vget_high_s16(hi.1));
            }
        }
        let q = j0 / 4;
        let p = [0, 1, 2, 3].map(|i| Lanes::load(ep, q + i));
        let narrow = Narrow::load(ep);
        for (r, accr) in acc.iter().enumerate().take(mr) {
            let v = [0, 1, 2, 3].map(|i| requant(accr[i], &p[i]));
            store16(&mut out[r * ldo..][..nc], v, &narrow);
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::OperandType as T;
    #[cfg(target_arch = "x86_64")]
    use std::arch::x86_64::*;

    /// A small deterministic generator (xorshift32).
    pub(crate) struct Rng(pub(crate) u32);
    impl Rng {
        pub(crate) fn next(&mut self) -> u32 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 17;
            self.0 ^= self.0 << 5;
            self.0
        }
        pub(crate) fn range(&mut self, lo: i32, hi: i32) -> i32 {
            let span = (i64::from(hi) - i64::from(lo) + 1) as u64;
            (i64::from(lo) + (u64::from(self.next()) % span) as i64) as i32
        }
    }

    /// `(acc + bias)` requantized as the reference does it: in i64, clamped to i32, then
    /// [`Requant::apply`].
    fn reference(rq: &Requant, acc: i64, bias: i32, j: usize) -> u8 {
        rq.apply(acc + i64::from(bias), j) as u8
    }

    /// Per-channel multipliers from 2^-20 to just below 1, or (`left`) to 4, with left shifts.
    fn requant(rng: &mut Rng, n: usize, signed: bool, left: bool) -> Requant {
        let top = if left { 200 } else { -1 };
        let scales: Vec<f64> = (0..n)
            .map(|_| 2f64.powf(f64::from(rng.range(-2000, top)) / 100.0))
            .collect();
        let (ty, zp) = if signed {
            (T::TensorQuant8AsymmSigned, rng.range(-128, 127))
        } else {
            (T::TensorQuant8Asymm, rng.range(0, 255))
        };
        let (lo, hi) = if signed { (-128, 127) } else { (0, 255) };
        let lo2 = rng.range(lo, hi);
        Requant::from_parts(&scales, zp, (lo2, rng.range(lo2, hi)), ty)
    }

    #[test]
    fn epilogue_matches_requant_apply_on_extreme_and_random_accumulators() {
        let mut rng = Rng(7);
        for round in 0..60 {
            let n = 1 + rng.range(0, 40) as usize;
            let rq = requant(&mut rng, n, round % 2 == 0, round % 5 < 2);
            // Reductions of k products: |acc| ≤ k · 255².
            let k = [1, 9, 300, MAX_K][round % 4];
            let bound = (k * 255 * 255) as i32;
            // Extreme biases in every other round (the saturating addition), small ones else.
            let bias: Vec<i32> = (0..n)
                .map(|i| match (round % 3, i % 4) {
                    (0, 0) => i32::MAX - rng.range(0, 3),
                    (0, 1) => i32::MIN + rng.range(0, 3),
                    _ => rng.range(-100_000, 100_000),
                })
                .collect();
            let ep = Epilogue::new(&rq, &bias, n, k).unwrap();
            let accs = [0, 1, -1, bound, -bound, bound - 1, 1 - bound, 12345, -12345];
            for (j, &bj) in bias.iter().enumerate() {
                for i in 0..64 {
                    let acc = match accs.get(i) {
                        Some(&a) => a,
                        None => rng.range(-bound, bound) >> rng.range(0, 20),
                    };
                    let want = reference(&rq, i64::from(acc), bj, j);
                    assert_eq!(ep.scalar(acc, j), want, "acc {acc} channel {j}");
                    #[cfg(target_arch = "x86_64")]
                    if Isa::detect() == Isa::Avx2 {
                        // SAFETY: AVX2 detected just above.
                        let got = unsafe { avx2_epilogue(&ep, acc, j) };
                        assert_eq!(got, want, "avx2: acc {acc} channel {j}");
                    }
                    #[cfg(target_arch = "aarch64")]
                    {
                        // SAFETY: NEON is in the aarch64 baseline.
                        let got = unsafe { neon_epilogue(&ep, acc, j) };
                        assert_eq!(got, want, "neon: acc {acc} channel {j}");
                    }
                }
            }
        }
    }

    /// One value through the AVX2 epilogue, in lane `j % 8` of a register of copies.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn avx2_epilogue(ep: &Epilogue, acc: i32, j: usize) -> u8 {
        let v = avx2::requant(_mm256_set1_epi32(acc), &avx2::Lanes::load(ep, j / 8));
        let mut bytes = [0u8; 16];
        // SAFETY: store16 writes only initialized bytes.
        avx2::store16(
            unsafe { crate::tensor::as_uninit(&mut bytes) },
            v,
            v,
            &avx2::Narrow::load(ep),
        );
        bytes[j % 8]
    }

    /// One value through the NEON epilogue, in lane `j % 4` of a register of copies.
    #[cfg(target_arch = "aarch64")]
    #[target_feature(enable = "neon")]
    fn neon_epilogue(ep: &Epilogue, acc: i32, j: usize) -> u8 {
        use std::arch::aarch64::vdupq_n_s32;
        let v = neon::requant(vdupq_n_s32(acc), &neon::Lanes::load(ep, j / 4));
        let mut bytes = [0u8; 16];
        // SAFETY: store16 writes only initialized bytes.
        neon::store16(
            unsafe { crate::tensor::as_uninit(&mut bytes) },
            [v; 4],
            &neon::Narrow::load(ep),
        );
        bytes[j % 4]
    }

    /// A plain `[m][k] · [n][k]ᵀ` through the reference requantization.
    fn naive(a: &[i32], w: &[i32], bias: &[i32], rq: &Requant, m: usize, k: usize) -> Vec<u8> {
        let n = bias.len();
        let mut out = Vec::new();
        for r in 0..m {
            for j in 0..n {
                let dot: i64 = (0..k).map(|i| i64::from(a[r * k + i] * w[j * k + i])).sum();
                out.push(reference(rq, dot, bias[j], j));
            }
        }
        out
    }

    #[test]
    fn every_kernel_set_matches_a_naive_product_on_random_shapes() {
        let mut rng = Rng(99);
        for round in 0..60 {
            // Every fifth product a lone row (the one-row tile's unrolled loop), the others
            // with a last tile of 1 to MR rows, each count in turn (every `by_rows!` arm).
            let m = MR * rng.range(0, 6) as usize + 1 + round as usize % MR;
            let m = if round % 5 == 0 { 1 } else { m };
            let k = 1 + rng.range(0, 70) as usize;
            let n = 1 + rng.range(0, 50) as usize;
            let a: Vec<i32> = (0..m * k).map(|_| rng.range(-255, 255)).collect();
            // Every other round the weights fit i8 (and are packed so), else they span ±255.
            let narrow = round % 2 == 0;
            let (lo, hi) = if narrow { (-128, 127) } else { (-255, 255) };
            let mut w: Vec<i32> = (0..n * k).map(|_| rng.range(lo, hi)).collect();
            if !narrow {
                w[0] = 255 * (1 - 2 * (round % 4 / 2));
            }
            let bias: Vec<i32> = (0..n).map(|_| rng.range(-100_000, 100_000)).collect();
            let rq = requant(&mut rng, n, round % 2 == 1, round % 3 == 0);
            let ep = Epilogue::new(&rq, &bias, n, k).unwrap();
            let qw = QWeights::pack(n, k, narrow, |i| w[i]).unwrap();
            assert_eq!(qw.is_narrow(), narrow);
            let want = naive(&a, &w, &bias, &rq, m, k);
            for isa in Isa::all() {
                for threads in [1, 2] {
                    // Poisoned: an element the kernels skip shows.
                    let mut out = vec![0xA5u8; m * n];
                    // SAFETY: the kernels write only initialized bytes.
                    let view = unsafe { crate::tensor::as_uninit(&mut out) };
                    gemm(isa, &qw, &ep, view, threads, |r0, dst| {
                        let kp = qw.kp;
                        for (i, row) in dst.chunks_exact_mut(kp).enumerate() {
                            for (c, d) in row.iter_mut().enumerate() {
                                *d = if c < k { a[(r0 + i) * k + c] as i16 } else { 0 };
                            }
                        }
                    })
                    .unwrap();
                    assert_eq!(out, want, "{isa:?} m {m} k {k} n {n} threads {threads}");
                }
            }
        }
    }

    /// On aarch64 the detected kernel set is NEON, and a GEMM through it runs the NEON tiles
    /// (the counter only grows, so tests running beside this one cannot hide a miss).
    #[cfg(target_arch = "aarch64")]
    #[test]
    fn neon_kernels_are_detected_and_run_on_aarch64() {
        use std::sync::atomic::Ordering::Relaxed;
        assert_eq!(Isa::detect(), Isa::Neon);
        assert_eq!(Isa::all(), [Isa::Portable, Isa::Neon]);
        let (m, k, n) = (2 * MR + 1, 5, 20);
        let qw = QWeights::pack(n, k, false, |i| (i % 7) as i32 - 3).unwrap();
        // Multiplier 1, zero point 100: the output is the plain sum plus 100.
        let rq = Requant::from_parts(&[1.0; 20], 100, (0, 255), T::TensorQuant8Asymm);
        let ep = Epilogue::new(&rq, &[0; 20], n, k).unwrap();
        let before = neon::RUNS.load(Relaxed);
        let mut out = vec![0u8; m * n];
        // SAFETY: the kernels write only initialized bytes.
        let view = unsafe { crate::tensor::as_uninit(&mut out) };
        gemm(Isa::Neon, &qw, &ep, view, 1, |_, dst| dst.fill(1)).unwrap();
        // 3 tiles of rows (MR + MR + 1) by 2 panels of columns.
        assert!(neon::RUNS.load(Relaxed) >= before + 6);
        // Row r, column j: the sum of channel j's weights (A is all ones) plus 100.
        let col = |j: usize| (0..k).map(|i| ((j * k + i) % 7) as i32 - 3).sum::<i32>();
        for (i, &v) in out.iter().enumerate() {
            assert_eq!(i32::from(v), col(i % n) + 100, "output {i}");
        }
    }

    #[test]
    fn weights_that_fit_i8_are_packed_as_i8_in_half_the_bytes_when_asked() {
        // 3 columns of 5 (one panel of 16 columns, 3 pairs of k).
        let narrow = QWeights::pack(3, 5, true, |i| [127, -128, 0][i % 3]).unwrap();
        assert!(narrow.is_narrow());
        assert_eq!(narrow.bytes(), 3 * 2 * NR);
        // Not asked for, or a value outside i8: i16.
        let wide = QWeights::pack(3, 5, false, |i| [127, -128, 0][i % 3]).unwrap();
        assert!(!wide.is_narrow());
        assert_eq!(wide.bytes(), 3 * 2 * NR * 2);
        let wide = QWeights::pack(3, 5, true, |i| [128, -128, 0][i % 3]).unwrap();
        assert!(!wide.is_narrow());
        assert_eq!(wide.bytes(), 3 * 2 * NR * 2);
        let wide = QWeights::pack(3, 5, true, |i| [127, -129, 0][i % 3]).unwrap();
        assert!(!wide.is_narrow());
    }

    #[test]
    fn weights_outside_the_kernel_bound_are_not_packed() {
        assert!(QWeights::pack(1, 2, true, |i| [255, -255][i]).is_some());
        assert!(QWeights::pack(1, 2, true, |i| [256, 0][i]).is_none());
        assert!(QWeights::pack(1, 2, true, |i| [0, -256][i]).is_none());
    }

    #[test]
    fn max_k_is_the_largest_reduction_that_fits_i32() {
        assert!((MAX_K as i64) * 255 * 255 <= i64::from(i32::MAX));
        assert!((MAX_K as i64 + 1) * 255 * 255 > i64::from(i32::MAX));
    }
}
