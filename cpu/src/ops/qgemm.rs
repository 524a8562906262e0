//! Quantized GEMM for the 8-bit FULLY_CONNECTED and CONV_2D: `out = requant(A·B + bias)` with A
//! the centered input rows (x − zx) and B the centered weights (f − zf), both widened to i16.
//!
//! Layouts: B is packed once (at prepare time for constant weights, [`QWeights`]) in panels of
//! [`NR`] columns, each panel `[k/2][NR][2]` (K padded to even, N to the panel width); A is
//! repacked per tile of [`MR`] rows as `[k/2][MR]` pairs. The AVX2 micro-kernel multiplies
//! pairs of K with `_mm256_madd_epi16` into 4×16 i32 accumulators; bias, requantization
//! (gemmlowp rounding, bit-exact with [`Requant::apply`]), the activation clamp and the
//! narrowing to bytes are its epilogue. A portable kernel computes the same on the same layout.
//!
//! Overflow: every centered value is within ±255 (the zero points are validated in the type's
//! range), so a product is within ±65025 and a sum of K of them fits i32 while
//! K ≤ [`MAX_K`] (`i32::MAX / 65025`); `_mm256_madd_epi16` adds two such products (≤ 130050,
//! no saturation). Callers route larger K to the scalar reference kernels.

use super::quant::{Requant, rdbpot, srdhm};
use crate::par;

/// Columns per B panel (two AVX2 registers of i32).
pub(crate) const NR: usize = 16;
/// Rows per micro-tile.
pub(crate) const MR: usize = 4;
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
    data: Box<[[i16; 2 * NR]]>,
}

impl QWeights {
    /// Packs `n` rows of `k` centered weights, `w(j * k + i)` being row j, column i. None when a
    /// value does not fit the kernel's ±255 bound or the size overflows.
    pub(crate) fn pack(n: usize, k: usize, w: impl Fn(usize) -> i32) -> Option<QWeights> {
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
        Some(QWeights { k, n, kp, data })
    }

    /// Bytes held.
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> usize {
        std::mem::size_of_val::<[[i16; 2 * NR]]>(&self.data)
    }

    fn panel(&self, p: usize) -> &[[i16; 2 * NR]] {
        let pairs = self.kp / 2;
        &self.data[p * pairs..(p + 1) * pairs]
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
#[derive(Debug)]
pub(crate) struct Epilogue {
    groups: Vec<Group>,
    /// The activation bounds minus the output zero point (saturated to i32), and the zero point:
    /// `clamp(r + zp, lo, hi) = clamp(r, lo - zp, hi - zp) + zp` without overflow.
    lo: i32,
    hi: i32,
    zp: i32,
    /// Whether the output is TENSOR_QUANT8_ASYMM_SIGNED (bytes are i8).
    pub(crate) signed: bool,
    /// What only the vector epilogue reads.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    vector: VectorOnly,
}

/// The parts of [`Epilogue`] only the vector epilogue reads (none on other architectures).
#[derive(Debug)]
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

/// `out[m][n]` = the requantized `A·B + bias` where `fill(row0, a)` writes rows `row0..` of A
/// into `a` (whole rows of `w.kp` centered values, zero past `w.k`). Splits the rows over
/// `threads` threads.
pub(crate) fn gemm<F>(
    isa: Isa,
    w: &QWeights,
    ep: &Epilogue,
    out: &mut [u8],
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
    par::for_row_ranges(out, n, threads, |r0, part| {
        rows(isa, w, ep, r0, part, &fill);
        Ok(())
    })
}

/// Output rows `r0..` (all of `out`), one block of A at a time.
fn rows<F>(isa: Isa, w: &QWeights, ep: &Epilogue, r0: usize, out: &mut [u8], fill: &F)
where
    F: Fn(usize, &mut [i16]),
{
    let (n, kp) = (w.n, w.kp);
    let pairs = kp / 2;
    let total = out.len() / n;
    let mc = (A_BLOCK_BYTES / (2 * kp).max(1)).clamp(MR, 256) / MR * MR;
    let mc = mc.min(total.div_ceil(MR) * MR);
    let mut a = vec![0i16; mc * kp];
    let mut ap = vec![[0i32; MR]; mc / MR * pairs];
    for (t, block) in out.chunks_mut(mc * n).enumerate() {
        let rows = block.len() / n;
        let a = &mut a[..rows * kp];
        fill(r0 + t * mc, a);
        pack_a(a, rows, kp, &mut ap);
        let tiles = rows.div_ceil(MR);
        for p in 0..n.div_ceil(NR) {
            let b = w.panel(p);
            let j0 = p * NR;
            let nc = NR.min(n - j0);
            for i in 0..tiles {
                let at = &ap[i * pairs..(i + 1) * pairs];
                let mr = MR.min(rows - i * MR);
                let d = Dst {
                    out: &mut block[i * MR * n..],
                    ldo: n,
                    j0,
                    nc,
                    mr,
                };
                // A lone row (a batch-1 FULLY_CONNECTED) computes one row, not MR.
                match (isa, mr) {
                    (Isa::Portable, 1) => tile_portable::<1>(at, b, ep, d),
                    (Isa::Portable, _) => tile_portable::<MR>(at, b, ep, d),
                    #[cfg(target_arch = "x86_64")]
                    // SAFETY: Isa::Avx2 is only chosen when the CPU has AVX2.
                    (Isa::Avx2, 1) => unsafe { avx2::tile::<1>(at, b, ep, d) },
                    #[cfg(target_arch = "x86_64")]
                    // SAFETY: as above.
                    (Isa::Avx2, _) => unsafe { avx2::tile::<MR>(at, b, ep, d) },
                }
            }
        }
    }
}

/// Repacks row-major A (`rows` × `kp`) into tiles of MR rows, `[k/2][MR]` pairs each (two i16
/// in one i32, the first in the low half); rows past `rows` are zero.
fn pack_a(a: &[i16], rows: usize, kp: usize, ap: &mut [[i32; MR]]) {
    let pairs = kp / 2;
    for (i, tile) in ap
        .chunks_mut(pairs.max(1))
        .take(rows.div_ceil(MR))
        .enumerate()
    {
        for r in 0..MR {
            let row = i * MR + r;
            if row < rows {
                let src = &a[row * kp..(row + 1) * kp];
                for (d, s) in tile.iter_mut().zip(src.chunks_exact(2)) {
                    d[r] = i32::from(s[0] as u16) | (i32::from(s[1]) << 16);
                }
            } else {
                for d in tile.iter_mut() {
                    d[r] = 0;
                }
            }
        }
    }
}

/// Splits a packed pair into its two i16 values (low half first).
#[inline(always)]
fn unpair(v: i32) -> (i32, i32) {
    (i32::from(v as i16), v >> 16)
}

/// Where a tile goes: row r (of the first `mr`) at `out[r * ldo + j0..][..nc]`.
pub(crate) struct Dst<'a> {
    out: &'a mut [u8],
    ldo: usize,
    j0: usize,
    nc: usize,
    mr: usize,
}

/// Portable micro-kernel: the first R (≤ MR) rows of one MR × NR tile.
fn tile_portable<const R: usize>(a: &[[i32; MR]], b: &[[i16; 2 * NR]], ep: &Epilogue, d: Dst<'_>) {
    let (out, ldo, j0, nc, mr) = (d.out, d.ldo, d.j0, d.nc, d.mr);
    let mut acc = [[0i32; NR]; R];
    for (a4, bp) in a.iter().zip(b) {
        for (r, accr) in acc.iter_mut().enumerate() {
            let (x0, x1) = unpair(a4[r]);
            for (j, v) in accr.iter_mut().enumerate() {
                *v += x0 * i32::from(bp[2 * j]) + x1 * i32::from(bp[2 * j + 1]);
            }
        }
    }
    for (r, accr) in acc.iter().enumerate().take(mr) {
        let o = &mut out[r * ldo + j0..][..nc];
        for (j, (d, &v)) in o.iter_mut().zip(accr).enumerate() {
            *d = ep.scalar(v, j0 + j);
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    //! The AVX2 micro-kernel and the vector epilogue shared with the depthwise kernel.

    use super::{Dst, Epilogue, Group, MR, NR};
    use std::arch::x86_64::*;

    /// 16 i16 from an array of at least 16.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(crate) fn ld16<const L: usize>(s: &[i16; L], at: usize) -> __m256i {
        let s = &s[at..at + 16];
        // SAFETY: `s` holds 16 i16 (32 bytes), read unaligned.
        unsafe { _mm256_loadu_si256(s.as_ptr().cast()) }
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    fn ld8(s: &[i32; 8]) -> __m256i {
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

    /// gemmlowp SaturatingRoundingDoublingHighMul for `m >= 0` (as every multiplier is, so
    /// the saturating case a = m = i32::MIN never arises). Its rounding, (a·m + 2^30) / 2^31
    /// truncated for a·m >= 0 and (a·m + 1 - 2^30) / 2^31 truncated (= ceiled) below, is in both
    /// cases floor((a·m + 2^30) / 2^31), whose value fits i32: bits 31..62 of the 64-bit sum.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn srdhm(a: __m256i, m: __m256i) -> __m256i {
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
        right: __m256i,
        mask: __m256i,
        half: __m256i,
        plain_bias: bool,
        no_left: bool,
    }

    impl Lanes {
        /// Channels `8g..8g+8` of `ep`.
        #[inline]
        #[target_feature(enable = "avx2")]
        pub(crate) fn load(ep: &Epilogue, g: usize) -> Lanes {
            let Group {
                bias,
                mult,
                left,
                right,
                mask,
                half,
            } = &ep.groups[g];
            Lanes {
                bias: ld8(bias),
                mult: ld8(mult),
                left: ld8(left),
                right: ld8(right),
                mask: ld8(mask),
                half: ld8(half),
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
        let x = srdhm(xs, p.mult);
        // RoundingDivideByPOT: (x >> e) + (rem > half + (x < 0)).
        let rem = _mm256_and_si256(x, p.mask);
        let thr = _mm256_sub_epi32(p.half, _mm256_srai_epi32(x, 31));
        _mm256_sub_epi32(_mm256_srav_epi32(x, p.right), _mm256_cmpgt_epi32(rem, thr))
    }

    /// The output zero point and activation bounds as i16 lanes, and the output's signedness.
    #[derive(Clone, Copy)]
    pub(crate) struct Narrow {
        zp: __m256i,
        lo: __m256i,
        hi: __m256i,
        signed: bool,
    }

    impl Narrow {
        #[inline]
        #[target_feature(enable = "avx2")]
        pub(crate) fn load(ep: &Epilogue) -> Narrow {
            // Zero points and bounds are within [-128, 255] (validated types and ranges).
            let w = |v: i32| v.clamp(-32768, 32767) as i16;
            Narrow {
                zp: _mm256_set1_epi16(w(ep.zp)),
                lo: _mm256_set1_epi16(w(ep.vector.out_lo)),
                hi: _mm256_set1_epi16(w(ep.vector.out_hi)),
                signed: ep.signed,
            }
        }
    }

    /// Stores 16 requantized values (channels of `v0` then `v1`, from [`requant`]) plus the
    /// zero point, clamped to the activation, as bytes into `dst`: all 16 straight from the
    /// register when `dst` has room, else its first `dst.len()`. Narrowed to i16 first
    /// (saturating) then offset and clamped 16 lanes at a time: with the zero point and the
    /// bounds within ±255, a value saturated at ±32767 lands on the same bound as the exact sum.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(crate) fn store16(dst: &mut [u8], v0: __m256i, v1: __m256i, n: &Narrow) {
        let w = _mm256_adds_epi16(_mm256_packs_epi32(v0, v1), n.zp);
        let w = _mm256_min_epi16(_mm256_max_epi16(w, n.lo), n.hi);
        let w = _mm256_permute4x64_epi64(w, 0xD8);
        let b = if n.signed {
            _mm256_packs_epi16(w, w)
        } else {
            _mm256_packus_epi16(w, w)
        };
        let b = _mm256_castsi256_si128(_mm256_permute4x64_epi64(b, 0x08));
        match dst.first_chunk_mut::<16>() {
            // SAFETY: `d` holds 16 bytes, written unaligned.
            Some(d) => unsafe { _mm_storeu_si128(d.as_mut_ptr().cast(), b) },
            None => {
                let mut out = [0u8; 16];
                // SAFETY: `out` holds 16 bytes, written unaligned.
                unsafe { _mm_storeu_si128(out.as_mut_ptr().cast(), b) };
                dst.copy_from_slice(&out[..dst.len()]);
            }
        }
    }

    /// The AVX2 form of [`super::tile_portable`].
    #[target_feature(enable = "avx2")]
    pub(crate) fn tile<const R: usize>(
        a: &[[i32; MR]],
        b: &[[i16; 2 * NR]],
        ep: &Epilogue,
        d: Dst<'_>,
    ) {
        let (out, ldo, j0, nc, mr) = (d.out, d.ldo, d.j0, d.nc, d.mr);
        let z = _mm256_setzero_si256();
        let mut acc = [[z; 2]; R];
        for (a4, bp) in a.iter().zip(b) {
            let b0 = ld16(bp, 0);
            let b1 = ld16(bp, 16);
            for (r, accr) in acc.iter_mut().enumerate() {
                let x = _mm256_set1_epi32(a4[r]);
                accr[0] = _mm256_add_epi32(accr[0], _mm256_madd_epi16(x, b0));
                accr[1] = _mm256_add_epi32(accr[1], _mm256_madd_epi16(x, b1));
            }
        }
        let p0 = Lanes::load(ep, j0 / 8);
        let p1 = Lanes::load(ep, j0 / 8 + 1);
        let narrow = Narrow::load(ep);
        for (r, accr) in acc.iter().enumerate().take(mr) {
            let v0 = requant(accr[0], &p0);
            let v1 = requant(accr[1], &p1);
            store16(&mut out[r * ldo + j0..][..nc], v0, v1, &narrow);
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
        avx2::store16(&mut bytes, v, v, &avx2::Narrow::load(ep));
        bytes[j % 8]
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
            let m = 1 + rng.range(0, 40) as usize;
            let k = 1 + rng.range(0, 70) as usize;
            let n = 1 + rng.range(0, 50) as usize;
            let a: Vec<i32> = (0..m * k).map(|_| rng.range(-255, 255)).collect();
            let w: Vec<i32> = (0..n * k).map(|_| rng.range(-255, 255)).collect();
            let bias: Vec<i32> = (0..n).map(|_| rng.range(-100_000, 100_000)).collect();
            let rq = requant(&mut rng, n, round % 2 == 1, round % 3 == 0);
            let ep = Epilogue::new(&rq, &bias, n, k).unwrap();
            let qw = QWeights::pack(n, k, |i| w[i]).unwrap();
            let want = naive(&a, &w, &bias, &rq, m, k);
            for isa in Isa::all() {
                for threads in [1, 2] {
                    let mut out = vec![0u8; m * n];
                    gemm(isa, &qw, &ep, &mut out, threads, |r0, dst| {
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

    #[test]
    fn weights_outside_the_kernel_bound_are_not_packed() {
        assert!(QWeights::pack(1, 2, |i| [255, -255][i]).is_some());
        assert!(QWeights::pack(1, 2, |i| [256, 0][i]).is_none());
        assert!(QWeights::pack(1, 2, |i| [0, -256][i]).is_none());
    }

    #[test]
    fn max_k_is_the_largest_reduction_that_fits_i32() {
        assert!((MAX_K as i64) * 255 * 255 <= i64::from(i32::MAX));
        assert!((MAX_K as i64 + 1) * 255 * 255 > i64::from(i32::MAX));
    }
}
