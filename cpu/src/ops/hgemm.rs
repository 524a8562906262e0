//! The float GEMM of a relaxed model (`relaxComputationFloat32toFloat16`) computed in float16,
//! on CPUs with float16 arithmetic (aarch64 FEAT_FP16: `fmla` on eight halves a register,
//! twice the lanes of float32).
//!
//! The product and its epilogue are [`fgemm`]'s: `c[i][j] = clamp(bias[j] + Σ_kk a[i][kk] ·
//! w[j][kk], lo, hi)`, with A and C in float32. What changes:
//! - the weights are packed as halves, in [`fgemm`]'s panels of [`NR`] columns, their
//!   reduction padded with zeros to a multiple of [`KSTEP`] ([`pack`]);
//! - each block of A rows is converted to halves once, laid out for the tile: for each step
//!   of [`KSTEP`] entries, the [`MR`] rows' eight halves side by side;
//! - the tile multiplies and sums in float16, and moves its sums into float32 every
//!   [`HALF_RUN`] entries, so no float16 sum spans more than 64 products. NNAPI lets a relaxed
//!   model have float16's range and precision, but a whole reduction summed in float16
//!   (XNNPACK's choice) rounds each step at the size of a partial sum that grows with the
//!   reduction (MobileNet's are up to 1024 long), and may overflow float16's range.
//!
//! Only the rows are split over threads. On other CPUs a relaxed model runs in float32, which
//! NNAPI allows too.

use std::mem::MaybeUninit;

use super::fgemm::{self, NR};
use crate::par;
use crate::tensor::f32_to_f16;

/// Rows per micro-tile: 8 rows of two 8-half registers are 16 accumulators.
const MR: usize = 8;
/// The reduction goes [`KSTEP`] entries at a time: one register of A per row.
const KSTEP: usize = 8;
/// Entries a tile sums in float16 before it adds its sums into float32.
const HALF_RUN: usize = 64;
/// Reduction block: 512 rows of a panel are 16 KiB of halves.
const KC: usize = 512;
/// The halves of A a row block aims at (64 KiB, in L2 while it meets every panel).
const A_BLOCK_HALVES: usize = 32 * 1024;

/// The float16 kernels this CPU runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kernel {
    /// Plain Rust rounding every sum to float16 (tests: it checks the blocking and the layout
    /// on every CPU).
    #[cfg_attr(not(test), allow(dead_code))]
    Portable,
    /// NEON with FEAT_FP16, detected at run time.
    #[cfg(target_arch = "aarch64")]
    NeonFp16,
}

impl Kernel {
    /// The float16 kernel of this CPU, None where it has no float16 arithmetic (a relaxed model
    /// then runs in float32).
    pub(crate) fn detect() -> Option<Kernel> {
        #[cfg(target_arch = "aarch64")]
        {
            if std::arch::is_aarch64_feature_detected!("fp16") {
                return Some(Kernel::NeonFp16);
            }
        }
        None
    }

    /// The portable kernel and this CPU's own, if it has one (tests run every one).
    #[cfg(test)]
    pub(crate) fn all() -> Vec<Kernel> {
        std::iter::once(Kernel::Portable)
            .chain(Kernel::detect())
            .collect()
    }

    fn tile(self) -> TileFn {
        match self {
            Kernel::Portable => tile_portable,
            #[cfg(target_arch = "aarch64")]
            Kernel::NeonFp16 => tile_neon_fp16,
        }
    }
}

/// The reduction length the packed forms hold: `k` padded to a multiple of [`KSTEP`].
fn padded(k: usize) -> Option<usize> {
    k.checked_next_multiple_of(KSTEP)
}

/// Halves the packed form of `n` rows of `k` weights takes.
pub(crate) fn packed_len(n: usize, k: usize) -> Option<usize> {
    n.div_ceil(NR).checked_mul(NR)?.checked_mul(padded(k)?)
}

/// `w[n][k]` (row-major) as halves, in panels of [`NR`] columns, each `[padded k][NR]`, zero
/// past `n` and past `k`. None when `w` does not hold n·k floats, k is 0 or the size overflows.
pub(crate) fn pack(n: usize, k: usize, w: &[f32]) -> Option<Vec<u16>> {
    fgemm::pack_panels(n, k, padded(k)?, w, f32_to_f16)
}

/// One product, as [`fgemm::Product`] but with the weights [`pack`]ed as halves.
pub(crate) type Product<'a> = fgemm::Product<'a, u16>;

impl Product<'_> {
    /// The product into `c`, on up to `threads` threads, with `kernel`. `c` need not be
    /// initialized: on success every element of `c[..m*n]` has been written.
    pub(crate) fn run(
        &self,
        c: &mut [MaybeUninit<f32>],
        threads: usize,
        kernel: Kernel,
    ) -> Result<(), String> {
        let Product { m, k, n, a, .. } = *self;
        let c_need = self.checked(c.len(), packed_len(n, k).ok_or("gemm size overflow")?)?;
        let c = &mut c[..c_need];
        if c.is_empty() {
            return Ok(());
        }
        if k == 0 {
            // The bias, clamped: no weights to convert.
            let bias_only: fgemm::Product<'_> = fgemm::Product {
                m,
                k,
                n,
                a,
                packed: &[],
                ep: self.ep,
            };
            return bias_only.run(c, 1, fgemm::Isa::Portable);
        }
        let tile = kernel.tile();
        let kp = padded(k).ok_or("gemm size overflow")?;
        par::for_row_ranges(c, n, threads.max(1), |r0, part| {
            let rows = part.len() / n;
            let a = a
                .get(r0 * k..(r0 + rows) * k)
                .ok_or("gemm rows out of range")?;
            self.rows(a, kp, part, tile);
            Ok(())
        })
    }

    /// Rows `a` (whole rows of k) into `c` (as many rows of n); `kp` is k [`padded`].
    fn rows(&self, a: &[f32], kp: usize, c: &mut [MaybeUninit<f32>], tile: TileFn) {
        let (k, n) = (self.k, self.n);
        let rows = c.len() / n;
        let clamp = fgemm::bounds(&self.ep);
        let mut a16 = Vec::new();
        let mut kb = 0;
        while kb < k {
            let kc = KC.min(k - kb);
            let kc8 = kc.next_multiple_of(KSTEP);
            let (first, last) = (kb == 0, kb + kc == k);
            let mc = ((A_BLOCK_HALVES / kc8).max(MR) / MR) * MR;
            for r0 in (0..rows).step_by(mc) {
                let r1 = (r0 + mc).min(rows);
                let tiles = (r1 - r0).div_ceil(MR);
                a16.resize(tiles * kc8 * MR, 0);
                to_tiles(&a[r0 * k..r1 * k], k, kb..kb + kc, &mut a16);
                for (p, j0) in (0..n).step_by(NR).enumerate() {
                    let nr = NR.min(n - j0);
                    let b = &self.packed[(p * kp + kb) * NR..][..kc8 * NR];
                    for (t, at) in a16.chunks_exact(kc8 * MR).enumerate() {
                        let i0 = r0 + t * MR;
                        let mr = MR.min(r1 - i0);
                        let mut acc = [[0f32; NR]; MR];
                        for (r, row) in acc.iter_mut().enumerate().take(mr) {
                            let cr = &c[(i0 + r) * n + j0..][..nr];
                            for (j, (v, cv)) in row.iter_mut().zip(cr).enumerate() {
                                *v = if first {
                                    self.ep.bias[j0 + j]
                                } else {
                                    // SAFETY: the first reduction block wrote every element
                                    // of these rows (the stores below, for every panel).
                                    unsafe { cv.assume_init() }
                                };
                            }
                        }
                        for (ah, bh) in at.chunks(HALF_RUN * MR).zip(b.chunks(HALF_RUN * NR)) {
                            tile(ah, bh, &mut acc);
                        }
                        for (r, row) in acc.iter().enumerate().take(mr) {
                            let cr = &mut c[(i0 + r) * n + j0..][..nr];
                            for (cv, &v) in cr.iter_mut().zip(row) {
                                cv.write(match clamp {
                                    Some((lo, hi)) if last => v.max(lo).min(hi),
                                    _ => v,
                                });
                            }
                        }
                    }
                }
            }
            kb += kc;
        }
    }
}

/// Converts the reduction block `ks` of `a` (rows of k floats) into `out`, tiles of [`MR`]
/// rows: per tile and step of [`KSTEP`] entries, each row's eight halves in row order. Rows
/// past `a`'s and entries past the block are zero.
fn to_tiles(a: &[f32], k: usize, ks: std::ops::Range<usize>, out: &mut [u16]) {
    let steps = ks.len().div_ceil(KSTEP);
    for (t, tile) in out.chunks_exact_mut(steps * KSTEP * MR).enumerate() {
        for (s, step) in tile.chunks_exact_mut(KSTEP * MR).enumerate() {
            let from = ks.start + s * KSTEP;
            let len = KSTEP.min(ks.end - from);
            for (r, dst) in step.chunks_exact_mut(KSTEP).enumerate() {
                let mut x = [0f32; KSTEP];
                if let Some(src) = a.get((t * MR + r) * k + from..).and_then(|v| v.get(..len)) {
                    x[..len].copy_from_slice(src);
                }
                dst.copy_from_slice(&to_halves(&x));
            }
        }
    }
}

/// Eight floats as halves, rounded to nearest even.
#[inline]
fn to_halves(x: &[f32; KSTEP]) -> [u16; KSTEP] {
    #[cfg(target_arch = "aarch64")]
    {
        let mut h = [0u16; KSTEP];
        // SAFETY: reads 8 floats from `x` and writes 8 halves to `h`, both that long; FCVTN is
        // baseline AdvSIMD (every aarch64 CPU), rounding as FPCR says (nearest even, as Linux
        // starts threads).
        unsafe {
            std::arch::asm!(
                "ld1 {{v0.4s, v1.4s}}, [{x}]",
                "fcvtn v0.4h, v0.4s",
                "fcvtn2 v0.8h, v1.4s",
                "st1 {{v0.8h}}, [{h}]",
                x = in(reg) x.as_ptr(),
                h = in(reg) h.as_mut_ptr(),
                out("v0") _,
                out("v1") _,
                options(nostack, preserves_flags),
            )
        };
        h
    }
    #[cfg(not(target_arch = "aarch64"))]
    {
        x.map(f32_to_f16)
    }
}

/// One tile's run of at most [`HALF_RUN`] entries: `a` holds its steps of [`MR`] rows of
/// [`KSTEP`] halves ([`to_tiles`]), `b` as many rows of the panel ([`NR`] halves each). The
/// products are summed in float16 from zero, then added into `acc`.
type TileFn = fn(a: &[u16], b: &[u16], acc: &mut [[f32; NR]; MR]);

/// [`TileFn`] in plain Rust: each multiply-add rounded to float16 as the NEON kernel's is.
fn tile_portable(a: &[u16], b: &[u16], acc: &mut [[f32; NR]; MR]) {
    let half = |v: f32| crate::tensor::f16_to_f32(f32_to_f16(v));
    let mut sums = [[0f32; NR]; MR];
    for (kk, brow) in b.chunks_exact(NR).enumerate() {
        let (s, e) = (kk / KSTEP, kk % KSTEP);
        for (r, row) in sums.iter_mut().enumerate() {
            let x = a
                .get((s * MR + r) * KSTEP + e)
                .map_or(0.0, |&h| crate::tensor::f16_to_f32(h));
            for (v, &w) in row.iter_mut().zip(brow) {
                // A product of two halves is exact in f32; one rounding of the sum to f16 is
                // what `fmla` on halves does (up to a double rounding, in tests' bounds).
                *v = half(x.mul_add(crate::tensor::f16_to_f32(w), *v));
            }
        }
    }
    for (row, s) in acc.iter_mut().zip(&sums) {
        for (v, &x) in row.iter_mut().zip(s) {
            *v += x;
        }
    }
}

/// `fmla` of two accumulators (`acc0`, `acc1`: one row's 16 columns) by the panel row in
/// `b0`, `b1` and lane `e` of the row's A register `a`.
#[cfg(target_arch = "aarch64")]
macro_rules! fmla_row {
    ($acc0:literal, $acc1:literal, $a:literal, $b0:literal, $b1:literal, $e:literal) => {
        concat!(
            "fmla v", $acc0, ".8h, v", $b0, ".8h, v", $a, ".h[", $e, "]\n", "fmla v", $acc1,
            ".8h, v", $b1, ".8h, v", $a, ".h[", $e, "]\n",
        )
    };
}

/// One reduction entry `e` of a step: the eight rows (A in v0–v7, accumulators v16–v31) by
/// the panel row in `b0`, `b1`.
#[cfg(target_arch = "aarch64")]
macro_rules! fmla_entry {
    ($b0:literal, $b1:literal, $e:literal) => {
        concat!(
            fmla_row!(16, 17, 0, $b0, $b1, $e),
            fmla_row!(18, 19, 1, $b0, $b1, $e),
            fmla_row!(20, 21, 2, $b0, $b1, $e),
            fmla_row!(22, 23, 3, $b0, $b1, $e),
            fmla_row!(24, 25, 4, $b0, $b1, $e),
            fmla_row!(26, 27, 5, $b0, $b1, $e),
            fmla_row!(28, 29, 6, $b0, $b1, $e),
            fmla_row!(30, 31, 7, $b0, $b1, $e),
        )
    };
}

/// Two entries of a step (`e0`, `e1`): their two panel rows loaded at once.
#[cfg(target_arch = "aarch64")]
macro_rules! entry_pair {
    ($e0:literal, $e1:literal) => {
        concat!(
            "ld1 {{v8.8h, v9.8h, v10.8h, v11.8h}}, [{b}], #64\n",
            fmla_entry!(8, 9, $e0),
            fmla_entry!(10, 11, $e1),
        )
    };
}

/// Adds accumulator `v` (8 halves) into the next 8 floats at `{acc}` and steps past them.
#[cfg(target_arch = "aarch64")]
macro_rules! flush {
    ($v:literal) => {
        concat!(
            "ld1 {{v0.4s, v1.4s}}, [{acc}]\n",
            "fcvtl v2.4s, v",
            $v,
            ".4h\n",
            "fcvtl2 v3.4s, v",
            $v,
            ".8h\n",
            "fadd v0.4s, v0.4s, v2.4s\n",
            "fadd v1.4s, v1.4s, v3.4s\n",
            "st1 {{v0.4s, v1.4s}}, [{acc}], #32\n",
        )
    };
}

/// [`TileFn`] on NEON with FEAT_FP16 (checks the lengths, then runs the assembly).
#[cfg(target_arch = "aarch64")]
fn tile_neon_fp16(a: &[u16], b: &[u16], acc: &mut [[f32; NR]; MR]) {
    let steps = b.len() / (KSTEP * NR);
    let whole = steps > 0 && a.len() == steps * KSTEP * MR && b.len() == steps * KSTEP * NR;
    // The callers pass whole steps ([`to_tiles`], [`pack`]) and make `Kernel::NeonFp16` only
    // where the CPU has FEAT_FP16; anything else is a bug, computed the slow way rather than
    // read out of bounds or run an instruction the CPU lacks. (The feature test is a load of
    // a cached word, once per run of 64 entries.)
    if !whole || !std::arch::is_aarch64_feature_detected!("fp16") {
        debug_assert!(false, "float16 tile given a partial step, or no FEAT_FP16");
        return tile_portable(a, b, acc);
    }
    // SAFETY: FEAT_FP16 is present and the lengths are whole steps (both checked above).
    unsafe { tile_neon_fp16_asm(a.as_ptr(), b.as_ptr(), steps, acc) }
}

/// # Safety
/// The CPU must have FEAT_FP16; `a` must be valid for reads of `steps · 64` halves, `b` of
/// `steps · 128`; `steps` ≥ 1.
#[cfg(target_arch = "aarch64")]
#[target_feature(enable = "fp16")]
unsafe fn tile_neon_fp16_asm(
    a: *const u16,
    b: *const u16,
    steps: usize,
    acc: &mut [[f32; NR]; MR],
) {
    // SAFETY: the caller's contract: each step reads 128 bytes of `a` and 256 of `b`, `steps`
    // times; the flush reads and writes the 8×16 floats of `acc`, in row order.
    unsafe {
        std::arch::asm!(
            "movi v16.16b, #0", "movi v17.16b, #0", "movi v18.16b, #0", "movi v19.16b, #0",
            "movi v20.16b, #0", "movi v21.16b, #0", "movi v22.16b, #0", "movi v23.16b, #0",
            "movi v24.16b, #0", "movi v25.16b, #0", "movi v26.16b, #0", "movi v27.16b, #0",
            "movi v28.16b, #0", "movi v29.16b, #0", "movi v30.16b, #0", "movi v31.16b, #0",
            "2:",
            "ld1 {{v0.8h, v1.8h, v2.8h, v3.8h}}, [{a}], #64",
            "ld1 {{v4.8h, v5.8h, v6.8h, v7.8h}}, [{a}], #64",
            entry_pair!(0, 1),
            entry_pair!(2, 3),
            entry_pair!(4, 5),
            entry_pair!(6, 7),
            "subs {steps}, {steps}, #1",
            "b.ne 2b",
            flush!(16), flush!(17), flush!(18), flush!(19),
            flush!(20), flush!(21), flush!(22), flush!(23),
            flush!(24), flush!(25), flush!(26), flush!(27),
            flush!(28), flush!(29), flush!(30), flush!(31),
            a = inout(reg) a => _,
            b = inout(reg) b => _,
            steps = inout(reg) steps => _,
            acc = inout(reg) acc.as_mut_ptr() => _,
            out("v0") _, out("v1") _, out("v2") _, out("v3") _,
            out("v4") _, out("v5") _, out("v6") _, out("v7") _,
            out("v8") _, out("v9") _, out("v10") _, out("v11") _,
            out("v16") _, out("v17") _, out("v18") _, out("v19") _,
            out("v20") _, out("v21") _, out("v22") _, out("v23") _,
            out("v24") _, out("v25") _, out("v26") _, out("v27") _,
            out("v28") _, out("v29") _, out("v30") _, out("v31") _,
            options(nostack),
        )
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::fgemm::Epilogue;
    use crate::ops::fgemm::tests::{floats, operands};

    #[test]
    fn packing_rounds_to_halves_in_panels_and_zero_fills_past_n_and_k() {
        // n = 2, k = 3: one panel of 8 reduction rows (3 padded to 8).
        let p = pack(2, 3, &[1.0, 2.0, 3.0, -1.0, 0.5, 1.0 / 3.0]).unwrap();
        assert_eq!(p.len(), 8 * NR);
        assert_eq!(&p[..2], &[0x3c00, 0xbc00]);
        assert_eq!(&p[NR..NR + 2], &[0x4000, 0x3800]);
        assert_eq!(&p[2 * NR..2 * NR + 2], &[0x4200, 0x3555]);
        assert!(
            p.iter()
                .enumerate()
                .all(|(i, &h)| i % NR < 2 && i < 3 * NR || h == 0)
        );
        assert!(pack(2, 3, &[1.0; 5]).is_none());
        assert!(pack(2, 0, &[]).is_none());
    }

    #[test]
    fn converting_to_halves_rounds_to_nearest_even_as_the_scalar_conversion() {
        let mut seed = 9;
        let mut x = floats(&mut seed, 64);
        x.extend([
            65520.0,
            -1e9,
            6.0e-8,
            1.0 + 1.0 / 2048.0,
            1.0 + 3.0 / 2048.0,
            0.0,
            -0.0,
        ]);
        for c in x.chunks(KSTEP) {
            let mut v = [0f32; KSTEP];
            v[..c.len()].copy_from_slice(c);
            assert_eq!(to_halves(&v), v.map(f32_to_f16), "{v:?}");
        }
    }

    /// |c − exact| ≤ this, for a sum of k products whose magnitudes sum to `mag`: each
    /// operand rounds to a half (2 · 2⁻¹¹ relative), and a run of [`HALF_RUN`] sums in
    /// float16 rounds each partial sum (≤ 2⁻¹¹ of at most `mag` each).
    fn bound(mag: f64) -> f64 {
        let u = 1.0 / 2048.0;
        (2.0 * u + (HALF_RUN as f64 + 2.0) * u) * mag + 1e-6
    }

    #[test]
    fn every_kernel_matches_the_definition_within_float16_rounding_on_random_shapes() {
        let mut seed = 3u32;
        for &(m, k, n) in &[
            (1, 1, 1),
            (8, 8, 16),
            (9, 7, 17),
            (13, 64, 33),
            (30, 65, 40),
            (17, 600, 20),
            (70, 1030, 9),
            (3, 200, 50),
        ] {
            let [a, w, bias] = operands(&mut seed, m, k, n);
            let packed = pack(n, k, &w).unwrap();
            for (lo, hi) in [(f32::NEG_INFINITY, f32::INFINITY), (-0.25, 0.5)] {
                for kernel in Kernel::all() {
                    for threads in [1, 2] {
                        let p = Product {
                            m,
                            k,
                            n,
                            a: &a,
                            packed: &packed,
                            ep: Epilogue {
                                bias: &bias,
                                lo,
                                hi,
                            },
                        };
                        let mut c = vec![f32::NAN; m * n];
                        // SAFETY: `run` writes only initialized floats.
                        p.run(unsafe { crate::tensor::as_uninit(&mut c) }, threads, kernel)
                            .unwrap();
                        for i in 0..m {
                            for j in 0..n {
                                let (mut exact, mut mag) = (f64::from(bias[j]), 0.0);
                                for kk in 0..k {
                                    let x = f64::from(a[i * k + kk]) * f64::from(w[j * k + kk]);
                                    exact += x;
                                    mag += x.abs();
                                }
                                let exact = exact.max(f64::from(lo)).min(f64::from(hi));
                                let got = f64::from(c[i * n + j]);
                                assert!(
                                    (got - exact).abs() <= bound(mag),
                                    "{kernel:?} m{m} k{k} n{n} t{threads} ({i},{j}): \
                                     {got} vs {exact}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn the_neon_kernel_gives_the_portable_kernels_sums_to_within_a_rounding() {
        // Same inputs, same runs: the NEON sums differ from the portable ones only where the
        // portable kernel rounds twice (f32, then f16).
        let Some(kernel) = Kernel::detect() else {
            return;
        };
        let mut seed = 11;
        let steps = HALF_RUN / KSTEP;
        let a: Vec<u16> = floats(&mut seed, steps * KSTEP * MR)
            .into_iter()
            .map(f32_to_f16)
            .collect();
        let b: Vec<u16> = floats(&mut seed, steps * KSTEP * NR)
            .into_iter()
            .map(f32_to_f16)
            .collect();
        let (mut x, mut y) = ([[1.0f32; NR]; MR], [[1.0f32; NR]; MR]);
        kernel.tile()(&a, &b, &mut x);
        tile_portable(&a, &b, &mut y);
        for (rx, ry) in x.iter().zip(&y) {
            for (&u, &v) in rx.iter().zip(ry) {
                assert!(
                    (u - v).abs() <= 2.0 / 1024.0 * v.abs().max(1.0),
                    "{u} vs {v}"
                );
            }
        }
        assert_ne!(x, [[1.0f32; NR]; MR]);
    }

    #[test]
    fn the_float16_kernel_is_found_where_the_test_runner_promises_it() {
        // scripts/test.sh runs the aarch64 tests under `qemu-aarch64 -cpu max` (FEAT_FP16) and
        // says so: there the NEON kernel must run, not fall back to float32 unseen.
        if std::env::var_os("NNACCEL_EXPECT_FP16").is_some() {
            assert!(
                Kernel::detect().is_some(),
                "FEAT_FP16 promised but not detected"
            );
        }
    }

    #[test]
    fn undersized_operands_are_errors() {
        let packed = pack(2, 2, &[1.0; 4]).unwrap();
        let p = Product {
            m: 2,
            k: 2,
            n: 2,
            a: &[1.0; 4],
            packed: &packed,
            ep: Epilogue {
                bias: &[0.0; 2],
                lo: f32::NEG_INFINITY,
                hi: f32::INFINITY,
            },
        };
        let mut c = [MaybeUninit::new(0f32); 4];
        assert!(p.run(&mut c, 1, Kernel::Portable).is_ok());
        assert!(
            Product { a: &[1.0; 3], ..p }
                .run(&mut c, 1, Kernel::Portable)
                .is_err()
        );
        assert!(
            Product {
                packed: &packed[..10],
                ..p
            }
            .run(&mut c, 1, Kernel::Portable)
            .is_err()
        );
        assert!(p.run(&mut c[..3], 1, Kernel::Portable).is_err());
    }
}
