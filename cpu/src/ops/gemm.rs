//! Single-precision GEMM: the `gemm` crate's packed SIMD kernels (AVX-512 / AVX2+FMA picked at
//! run time inside the crate), split across threads for large products. Measurements and the
//! choice over matrixmultiply: `docs/dependencies.md`.

use crate::par;

/// `c[m×n] = a[m×k] · B` where `B[kk][j] = b[kk*rsb + j*csb]`; `a` and `c` are row-major.
/// Large products are split across threads (rows of `c` when `m >= n`, else column blocks).
#[allow(clippy::too_many_arguments)]
pub(crate) fn sgemm(
    m: usize,
    k: usize,
    n: usize,
    a: &[f32],
    b: &[f32],
    rsb: usize,
    csb: usize,
    c: &mut [f32],
) -> Result<(), String> {
    let flops = 2usize.saturating_mul(m).saturating_mul(n).saturating_mul(k);
    gemm_with_threads(
        m,
        k,
        n,
        a,
        b,
        rsb,
        csb,
        c,
        par::threads_for(flops, m.max(n) / 16),
    )
}

/// A raw pointer that may cross to a pool worker thread.
#[derive(Clone, Copy)]
struct SendPtr(*mut f32);
impl SendPtr {
    /// The pointer (a method, so closures capture the whole `Send` wrapper).
    fn ptr(self) -> *mut f32 {
        self.0
    }
}

// SAFETY: the pointer is only dereferenced (by the gemm crate) for disjoint element sets of a
// buffer that outlives the parts using it (`par::for_each_part` returns after all of them); see `gemm_with_threads`.
unsafe impl Send for SendPtr {}
// SAFETY: as above; the threads never touch the same element.
unsafe impl Sync for SendPtr {}

/// [`sgemm`] on `threads` threads; 1 keeps it on the calling thread (for callers that are
/// already split across threads).
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_with_threads(
    m: usize,
    k: usize,
    n: usize,
    a: &[f32],
    b: &[f32],
    rsb: usize,
    csb: usize,
    c: &mut [f32],
    threads: usize,
) -> Result<(), String> {
    if m == 0 || n == 0 {
        return Ok(());
    }
    let c_need = m.checked_mul(n).ok_or("gemm size overflow")?;
    if c.len() < c_need {
        return Err("gemm output too small".into());
    }
    let c = &mut c[..c_need];
    if k == 0 {
        c.fill(0.0);
        return Ok(());
    }
    let a_need = m.checked_mul(k).ok_or("gemm size overflow")?;
    let b_last = (k - 1)
        .checked_mul(rsb)
        .and_then(|x| (n - 1).checked_mul(csb).and_then(|y| x.checked_add(y)))
        .ok_or("gemm size overflow")?;
    if a.len() < a_need || b.len() <= b_last {
        return Err("gemm operand too small".into());
    }
    let to_isize = |v: usize| isize::try_from(v).map_err(|_| "gemm stride overflow".to_string());
    // Every offset the kernel forms is below one of the lengths checked above, which fit
    // in isize (slices never exceed isize::MAX bytes); check the strides themselves too.
    let (ks, ns, rsb_i, csb_i) = (to_isize(k)?, to_isize(n)?, to_isize(rsb)?, to_isize(csb)?);
    if threads <= 1 {
        // SAFETY: `a` holds at least m*k elements addressed as a[i*k + kk] (i < m, kk < k);
        // `b` holds more than (k-1)*rsb + (n-1)*csb elements, the largest offset read;
        // `c` holds m*n elements addressed as c[i*n + j] and is exclusively borrowed, so it
        // does not alias `a` or `b`.
        unsafe {
            kernel(
                m,
                ks,
                n,
                a.as_ptr(),
                b.as_ptr(),
                rsb_i,
                csb_i,
                c.as_mut_ptr(),
                ns,
            );
        }
        return Ok(());
    }
    if m >= n {
        // Row blocks: each thread packs all of B (small when m >= n) and its own rows of A.
        return par::for_row_ranges(c, n, threads, |row0, cc| {
            let rows = cc.len() / n;
            gemm_with_threads(rows, k, n, &a[row0 * k..], b, rsb, csb, cc, 1)
        });
    }
    // Column blocks (multiples of 16, whole kernel widths): each thread packs its columns of
    // B once; A is small when m < n.
    let per = n.div_ceil(threads).div_ceil(16) * 16;
    let cp = SendPtr(c.as_mut_ptr());
    let work = |j0: usize| {
        let cols = per.min(n - j0);
        // SAFETY: as in the single-threaded call for `a` and `b` (column j0 + j < n reads
        // b[kk*rsb + (j0+j)*csb], within the checked bound); `c` holds m*n elements and
        // this call writes only c[i*n + j0 + j] for j < cols, a column range disjoint from
        // every other thread's. `c`'s borrow outlives every part.
        unsafe {
            kernel(
                m,
                ks,
                cols,
                a.as_ptr(),
                b.as_ptr().wrapping_add(j0 * csb),
                rsb_i,
                csb_i,
                cp.ptr().wrapping_add(j0),
                ns,
            );
        }
    };
    par::for_each_part(n.div_ceil(per), |part| work(part * per));
    Ok(())
}

/// `c = a · B` on the calling thread: `a` row-major `m×k` (row stride k), `B[kk][j] =
/// b[kk*rsb + j*csb]`, `c[i*ldc + j]`; `ks` is k as isize.
///
/// # Safety
/// `a` must be valid for reads of `m*k` floats, `b` for reads at every `kk*rsb + j*csb`
/// (kk < k, j < n), `c` for writes at every `i*ldc + j` (i < m, j < n), and `c` must not
/// overlap `a` or `b` nor be written by anyone else during the call.
#[allow(clippy::too_many_arguments)]
unsafe fn kernel(
    m: usize,
    ks: isize,
    n: usize,
    a: *const f32,
    b: *const f32,
    rsb: isize,
    csb: isize,
    c: *mut f32,
    ldc: isize,
) {
    let k = ks.unsigned_abs();
    // SAFETY: the caller's contract; gemm reads lhs[i*lhs_rs + kk*lhs_cs], rhs[kk*rhs_rs +
    // j*rhs_cs] and, with read_dst false, only writes dst[i*dst_rs + j*dst_cs] = 1.0 · (a·B)
    // (alpha is unused when dst is not read). Parallelism::None keeps it on this thread.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c,
            1,
            ldc,
            false,
            a,
            1,
            ks,
            b,
            csb,
            rsb,
            0.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

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
    let threads = par::threads_for(flops, n / 64);
    for (i, crow) in c[..c_need].chunks_exact_mut(n).enumerate() {
        let x = &a[i * k..(i + 1) * k];
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

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dots_avx2_fma(x: &[f32], w: &[f32], out: &mut [f32]) {
    dots_generic::<true>(x, w, out);
}

/// Independent partial sums per lane, so the loop vectorizes.
const DOT_LANES: usize = 32;

#[inline(always)]
fn dots_generic<const FMA: bool>(x: &[f32], w: &[f32], out: &mut [f32]) {
    let k = x.len();
    if k == 0 {
        out.fill(0.0);
        return;
    }
    let body = k / DOT_LANES * DOT_LANES;
    for (o, wr) in out.iter_mut().zip(w.chunks_exact(k)) {
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
        *o = sum;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(
        m: usize,
        k: usize,
        n: usize,
        a: &[f32],
        b: &[f32],
        rsb: usize,
        csb: usize,
    ) -> Vec<f32> {
        let mut c = vec![0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k).map(|kk| a[i * k + kk] * b[kk * rsb + j * csb]).sum();
            }
        }
        c
    }

    /// An `m×k` A and a `k×n` B of values in [-0.5, 0.5) drawn from an LCG at `seed`, so
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

    /// `got` and `want` agree to the relative tolerance of f32 summation in a different order.
    fn assert_close(got: &[f32], want: &[f32], what: &str) {
        for (x, y) in got.iter().zip(want) {
            assert!((x - y).abs() <= 1e-4 * (1.0 + y.abs()), "{what}");
        }
    }

    #[test]
    fn threaded_splits_match_naive() {
        let mut seed = 7;
        for &(m, k, n) in &[
            (1, 1, 1),
            (3, 5, 70),
            (70, 9, 3),
            (33, 17, 65),
            (5, 40, 200),
            (200, 3, 5),
        ] {
            let (a, b) = operands(&mut seed, m, k, n);
            for (rsb, csb) in [(n, 1), (1, k)] {
                let want = naive(m, k, n, &a, &b, rsb, csb);
                for threads in 1..=3 {
                    let mut c = vec![f32::NAN; m * n];
                    gemm_with_threads(m, k, n, &a, &b, rsb, csb, &mut c, threads).unwrap();
                    assert_close(&c, &want, &format!("{m}x{k}x{n} t{threads}"));
                }
            }
        }
    }

    #[test]
    fn gemv_rows_match_naive() {
        let mut seed = 11;
        for &(m, k, n) in &[
            (1, 1, 1),
            (1, 31, 5),
            (2, 33, 7),
            (4, 100, 65),
            (1, 1024, 4096),
        ] {
            let (a, w) = operands(&mut seed, m, k, n);
            let want = naive(m, k, n, &a, &w, 1, k);
            let mut c = vec![f32::NAN; m * n];
            gemv_rows(m, k, n, &a, &w, &mut c).unwrap();
            assert_close(&c, &want, &format!("{m}x{k}x{n}"));
        }
        assert!(gemv_rows(1, 2, 2, &[1.0; 2], &[1.0; 3], &mut [0.0; 2]).is_err());
    }

    #[test]
    fn undersized_operands_are_errors() {
        let mut c = vec![0f32; 4];
        assert!(sgemm(2, 2, 2, &[1.0; 3], &[1.0; 4], 2, 1, &mut c).is_err());
        assert!(sgemm(2, 2, 2, &[1.0; 4], &[1.0; 3], 2, 1, &mut c).is_err());
        assert!(sgemm(2, 2, 3, &[1.0; 4], &[1.0; 6], 3, 1, &mut c).is_err());
        sgemm(2, 0, 2, &[], &[], 2, 1, &mut c).unwrap();
        assert_eq!(c, vec![0.0; 4]);
    }
}
