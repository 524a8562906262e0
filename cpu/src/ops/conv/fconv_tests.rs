//! The fast float FULLY_CONNECTED, CONV_2D and DEPTHWISE_CONV_2D against the plain reference
//! kernels (`fconv_reference`) within float tolerance, on random shapes, paddings, strides,
//! dilations, layouts, batches and activations, with every kernel set the CPU runs (the portable
//! one included), each time checking that the fast kernel in question did run.

use super::{
    FloatRoute, FloatRuns, copy_run, float_runs, gathered_convs, with_float_route, with_half_kernel,
};
use crate::model::{Graph, OperandType as T, OperationType as O};
use crate::ops::fgemm::Isa;
use crate::ops::hgemm::Kernel;
use crate::ops::qgemm::tests::Rng;
use crate::test_support::{B, run_f32};

/// A one-operation graph, its float inputs (in graph input order) and what the fast route
/// must count.
struct Case {
    g: Graph,
    inputs: Vec<Vec<f32>>,
    /// Longest reduction (for the tolerance).
    k: usize,
    expect: FloatRuns,
    what: String,
}

/// Runs `case` on `route`; returns the output and what the fast kernels counted.
fn run_on(case: &Case, route: FloatRoute) -> (Vec<f32>, FloatRuns) {
    let before = float_runs();
    let ins: Vec<&[f32]> = case.inputs.iter().map(Vec::as_slice).collect();
    let (out, _) = with_float_route(route, || run_f32(case.g.clone(), &ins));
    let after = float_runs();
    let delta = FloatRuns {
        packed_gemm: after.packed_gemm - before.packed_gemm,
        depthwise_3x3: after.depthwise_3x3 - before.depthwise_3x3,
        half_gemm: after.half_gemm - before.half_gemm,
    };
    (out, delta)
}

/// The fast kernels (each kernel set) agree with the reference kernels, and the expected fast
/// kernels ran.
fn check(case: &Case) {
    let (want, ran) = run_on(case, FloatRoute::Reference);
    assert_eq!(ran, FloatRuns::default(), "{}", case.what);
    // Sums of k products of values in [-1, 1) in another order.
    let tol = 2e-6 * (case.k as f32).max(8.0);
    for isa in Isa::all() {
        let (got, ran) = run_on(case, FloatRoute::Fast(isa));
        assert_eq!(ran, case.expect, "{} ({isa:?}): kernels run", case.what);
        assert_eq!(got.len(), want.len(), "{}", case.what);
        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
            assert!(
                (a - b).abs() <= tol * (1.0 + b.abs()),
                "{} ({isa:?}) [{i}]: {a} vs {b}",
                case.what
            );
        }
    }
}

/// `case`'s model made relaxed runs its GEMMs in float16 on every float16 kernel (the portable
/// one forced on any CPU, and this CPU's own), within float16's rounding of the reference;
/// its other kernels run as in float32. Returns the largest error over the tolerance.
fn check_relaxed(case: &Case) -> f32 {
    let (want, _) = run_on(case, FloatRoute::Reference);
    let relaxed = Case {
        g: crate::model::Graph {
            relax_float32_to_float16: true,
            ..case.g.clone()
        },
        inputs: case.inputs.clone(),
        k: case.k,
        expect: FloatRuns {
            half_gemm: case.expect.packed_gemm,
            ..case.expect
        },
        what: format!("relaxed {}", case.what),
    };
    // Values in [-1, 1): each operand rounds to a half (2⁻¹¹ relative), and runs of 64
    // products sum in float16 (a rounding of the partial sum at each step), then in float32:
    // about √k roundings of a few 2⁻¹¹ (the worst case here is 0.52 of this).
    let tol = 6.0 / 2048.0 * (case.k as f32).sqrt().max(1.0);
    let mut worst = 0f32;
    for kernel in Kernel::all() {
        let (got, ran) =
            with_half_kernel(kernel, || run_on(&relaxed, FloatRoute::Fast(Isa::detect())));
        assert_eq!(
            ran, relaxed.expect,
            "{} ({kernel:?}): kernels run",
            relaxed.what
        );
        assert_eq!(got.len(), want.len(), "{}", relaxed.what);
        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
            let err = (a - b).abs() / (tol * (1.0 + b.abs()));
            assert!(
                err <= 1.0,
                "{} ({kernel:?}) [{i}]: {a} vs {b}",
                relaxed.what
            );
            worst = worst.max(err);
        }
    }
    worst
}

fn floats(rng: &mut Rng, n: u32) -> Vec<f32> {
    (0..n)
        .map(|_| (rng.next() >> 8) as f32 / (1u32 << 23) as f32 - 1.0)
        .collect()
}

/// A filter or weights operand: constant (packed at prepare) or, sometimes, a graph input
/// (packed per execution).
fn weights(b: &mut B, rng: &mut Rng, dims: &[u32], inputs: &mut Vec<Vec<f32>>) -> u32 {
    let v = floats(rng, dims.iter().product());
    if rng.range(0, 3) == 0 {
        inputs.push(v);
        b.input(T::TensorFloat32, dims)
    } else {
        b.f32c(dims, &v)
    }
}

fn fully_connected_case(rng: &mut Rng, batch: u32, isz: u32, units: u32) -> Case {
    let mut b = B::new();
    let mut inputs = vec![floats(rng, batch * isz)];
    let x = b.input(T::TensorFloat32, &[batch, isz]);
    let w = weights(&mut b, rng, &[units, isz], &mut inputs);
    let bias = floats(rng, units);
    let bi = b.f32c(&[units], &bias);
    let act = rng.range(0, 3);
    let a = b.int(act);
    let o = b.output(T::TensorFloat32, &[]);
    b.op(O::FullyConnected, &[x, w, bi, a], &[o]);
    Case {
        g: b.g,
        inputs,
        k: isz as usize,
        // Up to 4 rows take the dot-product path.
        expect: FloatRuns {
            packed_gemm: usize::from(batch > 4),
            depthwise_3x3: 0,
            half_gemm: 0,
        },
        what: format!("FULLY_CONNECTED batch {batch} in {isz} units {units} act {act}"),
    }
}

/// Adds a DEPTHWISE_CONV_2D (else a CONV_2D) of `ins` with a float output; returns which.
fn conv_op(b: &mut B, depthwise: bool, ins: &[u32]) -> O {
    let o = b.output(T::TensorFloat32, &[]);
    let op = if depthwise {
        O::DepthwiseConv2d
    } else {
        O::Conv2d
    };
    b.op(op, ins, &[o]);
    op
}

/// One random CONV_2D or DEPTHWISE_CONV_2D: explicit or implicit padding, strides, dilation,
/// NCHW or NHWC, batch up to 2, depth multiplier up to 3; 3×3 filters often (the depthwise
/// kernel's shape).
fn conv_case(rng: &mut Rng, depthwise: bool) -> Case {
    let channels = if depthwise { (1, 40) } else { (1, 19) };
    conv_case_of(rng, depthwise, channels)
}

/// [`conv_case`] with `channels.0..channels.1` input channels (the range `Rng::range` draws).
fn conv_case_of(rng: &mut Rng, depthwise: bool, channels: (i32, i32)) -> Case {
    let r = |rng: &mut Rng, lo: i32, hi: i32| rng.range(lo, hi) as u32;
    let (n, h, w) = (r(rng, 1, 2), r(rng, 1, 12), r(rng, 1, 12));
    let c = r(rng, channels.0, channels.1);
    let mult = if depthwise && rng.range(0, 2) == 0 {
        r(rng, 2, 3)
    } else {
        1
    };
    let (fh, fw) = if rng.range(0, 1) == 0 {
        (3, 3)
    } else {
        (r(rng, 1, 5), r(rng, 1, 5))
    };
    let (sw, sh) = match rng.range(0, 3) {
        0 => (1, 1),
        1 => (2, 2),
        _ => (r(rng, 1, 3), r(rng, 1, 3)),
    };
    let (dw, dh) = if rng.range(0, 2) == 0 {
        (r(rng, 1, 2), r(rng, 1, 2))
    } else {
        (1, 1)
    };
    let oc = if depthwise { c * mult } else { r(rng, 1, 40) };
    let nchw = rng.range(0, 3) == 0;
    let mut b = B::new();
    let in_dims = if nchw { [n, c, h, w] } else { [n, h, w, c] };
    let mut inputs = vec![floats(rng, n * h * w * c)];
    let x = b.input(T::TensorFloat32, &in_dims);
    let f_dims = if depthwise {
        [1, fh, fw, oc]
    } else {
        [oc, fh, fw, c]
    };
    let f = weights(&mut b, rng, &f_dims, &mut inputs);
    let bias = floats(rng, oc);
    let bi = b.f32c(&[oc], &bias);
    let mut ins = vec![x, f, bi];
    let implicit = rng.range(0, 2) == 0;
    let ((pl, pr), (pt, pb)) = if implicit {
        // SAME pads any filter; VALID needs the filter inside the input.
        let same = (fh - 1) * dh + 1 > h || (fw - 1) * dw + 1 > w || rng.range(0, 1) == 0;
        ins.push(b.int(if same { 1 } else { 2 }));
        let pad = |size: u32, s: u32, d: u32, f: u32| {
            if !same {
                return (0, 0);
            }
            let total = (size.div_ceil(s) - 1) * s + (f - 1) * d + 1;
            let total = total.saturating_sub(size);
            (total / 2, total - total / 2)
        };
        (pad(w, sw, dw, fw), pad(h, sh, dh, fh))
    } else {
        // Pads at least what the dilated filter needs beyond the input.
        let need_h = ((fh - 1) * dh + 1).saturating_sub(h);
        let need_w = ((fw - 1) * dw + 1).saturating_sub(w);
        let (pl, pt) = (r(rng, 0, 2), r(rng, 0, 2));
        let pr = r(rng, 0, 2).max(need_w.saturating_sub(pl));
        let pb = r(rng, 0, 2).max(need_h.saturating_sub(pt));
        for p in [pl, pr, pt, pb] {
            ins.push(b.int(p as i32));
        }
        ((pl, pr), (pt, pb))
    };
    ins.push(b.int(sw as i32));
    ins.push(b.int(sh as i32));
    if depthwise {
        ins.push(b.int(mult as i32));
    }
    let act = rng.range(0, 3);
    ins.push(b.int(act));
    ins.push(b.boolean(nchw));
    ins.push(b.int(dw as i32));
    ins.push(b.int(dh as i32));
    let op = conv_op(&mut b, depthwise, &ins);
    let pixels = n
        * ((h + pt + pb - (fh - 1) * dh - 1) / sh + 1)
        * ((w + pl + pr - (fw - 1) * dw - 1) / sw + 1);
    let pointwise = (fh, fw, sw, sh, pl + pr + pt + pb) == (1, 1, 1, 1, 0);
    let expect = if depthwise {
        FloatRuns {
            packed_gemm: 0,
            depthwise_3x3: usize::from(
                (fh, fw, mult, dw, dh) == (3, 3, 1, 1, 1) && sw == sh && sw <= 2,
            ),
            half_gemm: 0,
        }
    } else {
        FloatRuns {
            packed_gemm: usize::from(!pointwise || pixels > 4),
            depthwise_3x3: 0,
            half_gemm: 0,
        }
    };
    Case {
        g: b.g,
        inputs,
        k: (fh * fw * c) as usize,
        expect,
        what: format!(
            "{} in {in_dims:?} (nchw {nchw}) filter {f_dims:?} stride {sw}x{sh} dilation \
             {dw}x{dh} pad l{pl} r{pr} t{pt} b{pb} (implicit {implicit}) mult {mult} act {act}",
            op.name(),
        ),
    }
}

#[test]
fn fast_float_fully_connected_matches_the_reference_on_random_shapes() {
    let mut rng = Rng(0xf10a_0001);
    for _ in 0..60 {
        let (batch, isz, units) = (rng.range(1, 20), rng.range(1, 120), rng.range(1, 50));
        check(&fully_connected_case(
            &mut rng,
            batch as u32,
            isz as u32,
            units as u32,
        ));
    }
}

#[test]
fn fast_float_conv2d_matches_the_reference_on_random_shapes() {
    let mut rng = Rng(0xf10a_0002);
    for _ in 0..150 {
        check(&conv_case(&mut rng, false));
    }
}

#[test]
fn fast_float_depthwise_conv2d_matches_the_reference_on_random_shapes() {
    let mut rng = Rng(0xf10a_0003);
    for _ in 0..200 {
        check(&conv_case(&mut rng, true));
    }
}

/// A CONV_2D (a DEPTHWISE_CONV_2D when the filter is `[1, 3, 3, c]` over c > 1 channels) of
/// `in_dims` by `f_dims` with implicit padding `pad` (1 SAME, 2 VALID), stride `stride` and
/// RELU6.
fn layer_case(rng: &mut Rng, in_dims: [u32; 4], f_dims: [u32; 4], pad: i32, stride: i32) -> Case {
    let mut b = B::new();
    let mut inputs = vec![floats(rng, in_dims.iter().product())];
    let x = b.input(T::TensorFloat32, &in_dims);
    let depthwise = f_dims[0] == 1 && f_dims[3] == in_dims[3] && in_dims[3] > 1;
    let f = weights(&mut b, rng, &f_dims, &mut inputs);
    let oc = if depthwise { f_dims[3] } else { f_dims[0] };
    let bi = b.f32c(&[oc], &floats(rng, oc));
    let mut ins = vec![x, f, bi, b.int(pad), b.int(stride), b.int(stride)];
    if depthwise {
        ins.push(b.int(1));
    }
    ins.push(b.int(3));
    let op = conv_op(&mut b, depthwise, &ins);
    Case {
        g: b.g,
        inputs,
        k: (f_dims[1] * f_dims[2] * if depthwise { 1 } else { in_dims[3] }) as usize,
        expect: FloatRuns {
            packed_gemm: usize::from(!depthwise),
            depthwise_3x3: usize::from(depthwise),
            half_gemm: 0,
        },
        what: format!("{} {in_dims:?} filter {f_dims:?}", op.name()),
    }
}

/// Layers big enough to split over 2 threads (by runs of pixels, by the GEMM's rows or
/// panels), with reductions past the GEMM's 512-long block.
#[test]
fn fast_float_kernels_match_the_reference_on_layers_split_over_threads() {
    let mut rng = Rng(0xf10a_0004);
    crate::par::set_max_threads(2);
    let conv = layer_case;
    // SAME (1) 3×3 on 64×64×16 → 16: pixel runs per thread, im2col per block.
    check(&conv(&mut rng, [1, 64, 64, 16], [16, 3, 3, 16], 1, 1));
    // 1×1 on 64×64×32 → 40: the input read in place, pixel runs per thread.
    check(&conv(&mut rng, [1, 64, 64, 32], [40, 1, 1, 32], 1, 1));
    // 3×3 stride 2 on 6×6×96 → 160 (k = 864): one block, the GEMM split by panels.
    check(&conv(&mut rng, [2, 6, 6, 96], [160, 3, 3, 96], 1, 2));
    // Depthwise 3×3 stride 1 and 2 on 56×56×40, split by rows.
    check(&conv(&mut rng, [2, 56, 56, 40], [1, 3, 3, 40], 1, 1));
    check(&conv(&mut rng, [1, 57, 57, 24], [1, 3, 3, 24], 1, 2));
    // FULLY_CONNECTED 64 × 700 → 300.
    check(&fully_connected_case(&mut rng, 64, 700, 300));
}

/// Inputs of a multiple of 512 channels (whole reduction blocks per filter tap): each output
/// pixel's window is gathered from the input, tap by tap, instead of copied into an im2col
/// block (padding taps read as zeros), on random shapes, paddings, strides, dilations and
/// layouts, and on layers split over threads.
#[test]
fn deep_convolutions_gather_their_windows_and_match_the_reference() {
    let mut rng = Rng(0xf10a_0006);
    let gathered = |case: Case| {
        let before = gathered_convs();
        check(&case);
        assert!(gathered_convs() > before, "{}: not gathered", case.what);
    };
    // Random shapes (a 1×1 filter at stride 1 without padding reads the input itself, as
    // shallow ones do; the others gather).
    let before = gathered_convs();
    for _ in 0..6 {
        check(&conv_case_of(&mut rng, false, (512, 513)));
    }
    assert!(gathered_convs() > before, "no random case gathered");
    crate::par::set_max_threads(2);
    // SAME 3×3 on 5×5×512 → 24: one block, padding taps, the GEMM split by rows.
    gathered(layer_case(&mut rng, [1, 5, 5, 512], [24, 3, 3, 512], 1, 1));
    // VALID 3×3 stride 2 on 2×7×7×1024 → 20: two images, two blocks a tap.
    gathered(layer_case(
        &mut rng,
        [2, 7, 7, 1024],
        [20, 3, 3, 1024],
        2,
        2,
    ));
    // SAME 2×2 on 3×3×512 → 160: the GEMM split by panels.
    gathered(layer_case(&mut rng, [1, 3, 3, 512], [160, 2, 2, 512], 1, 1));
    // SAME 3×3 on 20×20×512 → 16: runs of pixels over two threads.
    gathered(layer_case(
        &mut rng,
        [1, 20, 20, 512],
        [16, 3, 3, 512],
        1,
        1,
    ));
}

/// The im2col's run copy (overlapping fixed-length copies up to 16 floats) copies every
/// element of every length, and nothing past the run.
#[test]
fn copy_run_copies_runs_of_every_length_exactly() {
    for n in 0..=40 {
        let src: Vec<f32> = (0..n + 3).map(|i| i as f32 + 1.0).collect();
        let mut dst = vec![-1.0f32; n + 3];
        copy_run(&mut dst[1..n + 1], &src[2..n + 2]);
        assert_eq!(dst[0], -1.0, "run of {n}: wrote before it");
        assert_eq!(&dst[1..n + 1], &src[2..n + 2], "run of {n}");
        assert_eq!(&dst[n + 1..], &[-1.0, -1.0], "run of {n}: wrote past it");
    }
}

/// A relaxed model's FULLY_CONNECTED and CONV_2D (random shapes, and layers past the
/// reduction block, split over threads) through the float16 GEMM, against the float32
/// reference within float16 rounding.
#[test]
fn relaxed_float_gemms_run_in_float16_within_its_rounding() {
    let mut rng = Rng(0xf10a_0005);
    let mut worst = 0f32;
    for _ in 0..40 {
        let (batch, isz, units) = (rng.range(5, 40), rng.range(1, 300), rng.range(1, 50));
        let case = fully_connected_case(&mut rng, batch as u32, isz as u32, units as u32);
        worst = worst.max(check_relaxed(&case));
    }
    for _ in 0..60 {
        worst = worst.max(check_relaxed(&conv_case(&mut rng, false)));
    }
    crate::par::set_max_threads(2);
    worst = worst.max(check_relaxed(&fully_connected_case(&mut rng, 64, 1100, 70)));
    // Many im2col blocks, in pixel runs over both threads: counted once.
    worst = worst.max(check_relaxed(&layer_case(
        &mut rng,
        [1, 64, 64, 16],
        [16, 3, 3, 16],
        1,
        1,
    )));
    // A depthwise layer of a relaxed model stays in float32 (no half_gemm counted).
    worst = worst.max(check_relaxed(&conv_case(&mut rng, true)));
    // Not so loose that any error passes: the worst case uses a fair part of the tolerance.
    assert!(worst > 0.02, "worst error {worst} of the tolerance");
}
