//! Single-precision matrix-vector products for FULLY_CONNECTED and 1×1 CONV_2D with at most
//! [`GEMV_MAX_ROWS`] rows: one dot product per output, the weights read as declared. Larger
//! products go through the packed GEMM (`fgemm`); measurements: `docs/dependencies.md`.

use crate::par;

/// Rows of A up to which [`gemv_rows`] beats packing the weights for a GEMM.
pub(crate) const GEMV_MAX_ROWS: usize = 4;

/// `c[i][j] = a_i · w_j` for `m` rows `a_i` of `k` floats and weights `w[n][k]`: one dot product
/// per output, the weights streamed once per row without packing (batch-1 FULLY_CONNECTED).
/// Large rows are split across threads by output columns.
pub(crate) fn gemv_rows(
    m: usize,
    k: usize,
    n: usize,
    a: &[f32],
    w: &[f32],
    c: &mut [f32],
) -> Result<(), String> {
    let a_need = m.checked_mul(k).ok_or("gemv size overflow")?;
    let w_need = n.checked_mul(k).ok_or("gemv size overflow")?;
    let c_need = m.checked_mul(n).ok_or("gemv size overflow")?;
    if a.len() < a_need || w.len() < w_need || c.len() < c_need {
        return Err("gemv operand too small".into());
    }
    if n == 0 {
        return Ok(());
    }
    let w = &w[..w_need];
    let flops = 2usize.saturating_mul(k).saturating_mul(n);
    // Flop-equivalents: every weight is read once, so this runs at the memory's pace, about
    // an eighth of the GEMM's flop rate.
    let threads = par::threads_for(flops.saturating_mul(8), n / 64);
    // A row of A is read once per output column. Where it straddles cache lines (an input
    // read in place is aligned only as its caller's bytes are), half the 32-byte loads of a
    // 64-byte-aligned row split across two lines: FULLY_CONNECTED 1×1024 → 1024 took 65 µs
    // instead of 59 with its input 16 bytes past a line. Such a row is read from an aligned
    // copy (4 KB copied against 4 MB of weights read).
    let mut aligned = Vec::new();
    for (i, crow) in c[..c_need].chunks_exact_mut(n).enumerate() {
        let mut x = &a[i * k..(i + 1) * k];
        if n >= 64 && x.as_ptr().align_offset(64) != 0 {
            aligned.resize(k + 16, 0f32);
            let at = aligned.as_ptr().align_offset(64).min(16);
            aligned[at..at + k].copy_from_slice(x);
            x = &aligned[at..at + k];
        }
        par::for_row_ranges(crow, 1, threads, |j0, part| {
            dots(x, &w[j0 * k..(j0 + part.len()) * k], part);
            Ok::<(), String>(())
        })?;
    }
    Ok(())
}

/// `out[j] = x · w[j*k .. (j+1)*k]` with k = x.len().
fn dots(x: &[f32], w: &[f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            // SAFETY: the CPU supports AVX2 and FMA (checked just above).
            unsafe { dots_avx2_fma(x, w, out) };
            return;
        }
    }
    // aarch64 always has NEON with fused multiply-add: `mul_add` compiles to vector `fmla`.
    #[cfg(target_arch = "aarch64")]
    dots_generic::<true>(x, w, out);
    #[cfg(not(target_arch = "aarch64"))]
    dots_generic::<false>(x, w, out);
}

/// [`dots`] with AVX2 and FMA ([`dot_avx2_fma`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn dots_avx2_fma(x: &[f32], w: &[f32], out: &mut [f32]) {
    dots_with(x, w, out, |x, wr| dot_avx2_fma(x, wr));
}

/// `out[j] = x · w[j*k .. (j+1)*k]` (k = x.len()) with `dot` computing each product of two
/// non-empty slices of k floats.
#[inline(always)]
fn dots_with(x: &[f32], w: &[f32], out: &mut [f32], dot: impl Fn(&[f32], &[f32]) -> f32) {
    if x.is_empty() {
        out.fill(0.0);
        return;
    }
    for (o, wr) in out.iter_mut().zip(w.chunks_exact(x.len())) {
        *o = dot(x, wr);
    }
}

/// How far ahead of the multiply-adds [`dot_avx2_fma`] asks for the weights, in floats.
#[cfg(target_arch = "x86_64")]
const PREFETCH_AHEAD: usize = 256;

/// `x · wr` with AVX2 and FMA: [`dot_generic`]'s 32 lanes per step, summed as a tree (the
/// generic loop adds its lanes one after another: a 31-add chain per output), and the weights
/// prefetched [`PREFETCH_AHEAD`] floats ahead (the rows are one stream).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
fn dot_avx2_fma(x: &[f32], wr: &[f32]) -> f32 {
    use crate::ops::fgemm::ld8;
    use std::arch::x86_64::*;
    let body = x.len() / DOT_LANES * DOT_LANES;
    let mut acc = [_mm256_setzero_ps(); DOT_LANES / 8];
    for (xc, wc) in x[..body]
        .chunks_exact(DOT_LANES)
        .zip(wr[..body].chunks_exact(DOT_LANES))
    {
        let ahead = wc.as_ptr().wrapping_add(PREFETCH_AHEAD);
        _mm_prefetch::<_MM_HINT_T0>(ahead.cast());
        _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(16).cast());
        for (h, a) in acc.iter_mut().enumerate() {
            *a = _mm256_fmadd_ps(ld8(xc, 8 * h), ld8(wc, 8 * h), *a);
        }
    }
    // The rest 8 lanes at a time, then one by one: a row of 784 (an MNIST-sized input) ends
    // in 16 floats, whose scalar loop was a fifth of the MLP at batch 1.
    let eights = x.len() / 8 * 8;
    for (xc, wc) in x[body..eights]
        .chunks_exact(8)
        .zip(wr[body..eights].chunks_exact(8))
    {
        acc[0] = _mm256_fmadd_ps(ld8(xc, 0), ld8(wc, 0), acc[0]);
    }
    let v = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    let v = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let v = _mm_add_ps(v, _mm_movehl_ps(v, v));
    let v = _mm_add_ss(v, _mm_movehdup_ps(v));
    let mut sum = _mm_cvtss_f32(v);
    for (&xv, &wv) in x[eights..].iter().zip(&wr[eights..]) {
        sum = xv.mul_add(wv, sum);
    }
    sum
}

/// Independent partial sums per lane, so the loop vectorizes.
const DOT_LANES: usize = 32;

/// [`dots`] without explicit vectors (`FMA`: with fused multiply-adds).
#[inline(always)]
fn dots_generic<const FMA: bool>(x: &[f32], w: &[f32], out: &mut [f32]) {
    dots_with(x, w, out, dot_generic::<FMA>);
}

/// `x · wr` in [`DOT_LANES`] independent lanes.
#[inline(always)]
fn dot_generic<const FMA: bool>(x: &[f32], wr: &[f32]) -> f32 {
    let body = x.len() / DOT_LANES * DOT_LANES;
    let mut acc = [0f32; DOT_LANES];
    for (xc, wc) in x[..body]
        .chunks_exact(DOT_LANES)
        .zip(wr[..body].chunks_exact(DOT_LANES))
    {
        for i in 0..DOT_LANES {
            acc[i] = if FMA {
                xc[i].mul_add(wc[i], acc[i])
            } else {
                acc[i] + xc[i] * wc[i]
            };
        }
    }
    let mut sum = acc.iter().sum::<f32>();
    for (&xv, &wv) in x[body..].iter().zip(&wr[body..]) {
        sum += xv * wv;
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::assert_close;

    /// `c[i][j] = Σ_kk a[i][kk] · w[j][kk]`, the weights `w[n][k]` as declared.
    fn naive(m: usize, k: usize, n: usize, a: &[f32], w: &[f32]) -> Vec<f32> {
        let mut c = vec![0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k).map(|kk| a[i * k + kk] * w[j * k + kk]).sum();
            }
        }
        c
    }

    /// An `m×k` A and `n×k` weights of values in [-0.5, 0.5) drawn from an LCG at `seed`, so
    /// failures reproduce.
    fn operands(seed: &mut u32, m: usize, k: usize, n: usize) -> (Vec<f32>, Vec<f32>) {
        let mut rnd = || {
            *seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (*seed >> 9) as f32 / (1u32 << 23) as f32 - 0.5
        };
        let a = (0..m * k).map(|_| rnd()).collect();
        let b = (0..k * n).map(|_| rnd()).collect();
        (a, b)
    }

    #[test]
    fn gemv_rows_match_naive() {
        let mut seed = 11;
        for &(m, k, n) in &[
            (1, 1, 1),
            (1, 31, 5),
            (2, 33, 7),
            (4, 100, 65),
            // Past the 32-lane body: 8-lane steps, then single floats.
            (1, 47, 3),
            (1, 784, 20),
            (1, 1024, 4096),
        ] {
            let (a, w) = operands(&mut seed, m, k, n);
            let want = naive(m, k, n, &a, &w);
            let mut c = vec![f32::NAN; m * n];
            gemv_rows(m, k, n, &a, &w, &mut c).unwrap();
            assert_close(&c, &want, &format!("{m}x{k}x{n}"));
        }
        assert!(gemv_rows(1, 2, 2, &[1.0; 2], &[1.0; 3], &mut [0.0; 2]).is_err());
    }

    #[test]
    fn rows_off_their_cache_line_give_the_same_dot_products() {
        let mut seed = 5;
        let (m, k, n) = (2, 70, 96);
        let (a, w) = operands(&mut seed, m, k, n);
        let want = naive(m, k, n, &a, &w);
        let mut store = vec![0f32; a.len() + 16];
        for off in 0..16 {
            store[off..off + a.len()].copy_from_slice(&a);
            let mut c = vec![f32::NAN; m * n];
            gemv_rows(m, k, n, &store[off..off + a.len()], &w, &mut c).unwrap();
            assert_close(&c, &want, &format!("A at offset {off}"));
        }
    }

    #[test]
    fn portable_dots_match_naive_where_the_vector_kernel_runs_instead() {
        let mut seed = 5;
        for &(k, n) in &[(0, 3), (1, 2), (31, 5), (64, 9), (100, 17)] {
            let (a, w) = operands(&mut seed, 1, k, n);
            let want = naive(1, k, n, &a, &w);
            let mut c = vec![f32::NAN; n];
            dots_generic::<false>(&a, &w, &mut c);
            assert_close(&c, &want, &format!("portable 1x{k}x{n}"));
        }
    }
}
