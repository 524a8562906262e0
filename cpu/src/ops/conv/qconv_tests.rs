//! The fast 8-bit FULLY_CONNECTED, CONV_2D and DEPTHWISE_CONV_2D against the scalar reference
//! kernels, value for value, on random shapes, layouts, quantizations and activations, with
//! every kernel set the CPU runs (the portable one included).

use super::qconv::{Route, fast_runs, with_route};
use crate::model::{ChannelQuant, Graph, OperandType as T, OperationType as O};
use crate::ops::qgemm::tests::Rng;
use crate::ops::qgemm::{Isa, MAX_K};
use crate::test_support::{B, run_bytes};

/// A one-operation graph and its input values (bytes, in graph input order).
struct Case {
    g: Graph,
    inputs: Vec<Vec<u8>>,
    what: String,
}

/// Runs `case` on `route`; returns the output bytes and how many operations the fast kernels
/// ran.
fn run_on(case: &Case, route: Route) -> (Vec<u8>, usize) {
    let before = fast_runs();
    let out = with_route(route, || run(case));
    (out, fast_runs() - before)
}

/// Runs `case` (one 8-bit output).
fn run(case: &Case) -> Vec<u8> {
    let inputs: Vec<(Vec<u8>, Vec<u32>)> =
        case.inputs.iter().map(|d| (d.to_vec(), vec![])).collect();
    run_bytes(case.g.clone(), &inputs).0
}

/// The fast kernels (each kernel set) give the reference kernels' bytes, and did run.
fn check(case: &Case) {
    let (want, fast) = run_on(case, Route::Reference);
    assert_eq!(fast, 0, "{}", case.what);
    for isa in Isa::all() {
        let (got, fast) = run_on(case, Route::Fast(isa));
        assert_eq!(
            fast, 1,
            "{}: the fast kernels did not run ({isa:?})",
            case.what
        );
        assert_eq!(got, want, "{} ({isa:?})", case.what);
    }
}

fn random_bytes(rng: &mut Rng, n: usize) -> Vec<u8> {
    (0..n).map(|_| rng.next() as u8).collect()
}

/// A zero point of `ty`, often at an end of its range.
fn zero_point(rng: &mut Rng, ty: T) -> i32 {
    let (lo, hi) = if ty == T::TensorQuant8AsymmSigned {
        (-128, 127)
    } else {
        (0, 255)
    };
    match rng.range(0, 3) {
        0 => lo,
        1 => hi,
        _ => rng.range(lo, hi),
    }
}

/// A scale of 2^(e/4) for a random e in `lo..=hi`.
fn scale(rng: &mut Rng, lo: i32, hi: i32) -> f32 {
    2f32.powf(rng.range(lo, hi) as f32 / 4.0)
}

/// The filter (constant or, sometimes, a graph input), per-tensor or (when `channel_dim` is
/// given) sometimes per-channel along it.
fn filter(
    b: &mut B,
    rng: &mut Rng,
    ty: T,
    dims: &[u32],
    channel_dim: Option<u32>,
    inputs: &mut Vec<Vec<u8>>,
) -> u32 {
    let len: u32 = dims.iter().product();
    let bytes = random_bytes(rng, len as usize);
    let per_channel = channel_dim.filter(|_| rng.range(0, 1) == 0);
    let fty = if per_channel.is_some() {
        T::TensorQuant8SymmPerChannel
    } else {
        ty
    };
    let f = if rng.range(0, 4) == 0 {
        inputs.push(bytes);
        b.input(fty, dims)
    } else {
        b.konst(fty, dims, bytes)
    };
    if let Some(channel_dim) = per_channel {
        let oc = dims[channel_dim as usize];
        let scales = (0..oc).map(|_| scale(rng, -12, 0)).collect();
        b.g.operands[f as usize].channel_quant = Some(ChannelQuant {
            channel_dim,
            scales,
        });
    } else {
        let zp = zero_point(rng, ty);
        b.q(f, scale(rng, -12, 0), zp);
    }
    f
}

/// The bias of `oc` channels: mostly small, sometimes at the ends of i32.
fn bias(b: &mut B, rng: &mut Rng, oc: u32) -> u32 {
    let v: Vec<i32> = (0..oc)
        .map(|_| match rng.range(0, 9) {
            0 => i32::MAX - rng.range(0, 1000),
            1 => i32::MIN + rng.range(0, 1000),
            _ => rng.range(-50_000, 50_000),
        })
        .collect();
    b.i32c(&[oc], &v)
}

/// A random graph input of `ty` and `dims` with its bytes pushed on `inputs` (first).
fn data_input(b: &mut B, rng: &mut Rng, ty: T, dims: &[u32], inputs: &mut Vec<Vec<u8>>) -> u32 {
    let len: u32 = dims.iter().product();
    inputs.push(random_bytes(rng, len as usize));
    let x = b.input(ty, dims);
    let zp = zero_point(rng, ty);
    b.q(x, scale(rng, -8, 0), zp)
}

/// The output of `ty` with a random quantization.
fn output(b: &mut B, rng: &mut Rng, ty: T) -> u32 {
    let o = b.output(ty, &[]);
    let zp = zero_point(rng, ty);
    b.q(o, scale(rng, -16, 4), zp)
}

fn random_type(rng: &mut Rng) -> T {
    if rng.range(0, 1) == 0 {
        T::TensorQuant8Asymm
    } else {
        T::TensorQuant8AsymmSigned
    }
}

fn fully_connected_case(rng: &mut Rng, batch: u32, isz: u32, units: u32) -> Case {
    let ty = random_type(rng);
    let mut b = B::new();
    let mut inputs = Vec::new();
    let x = data_input(&mut b, rng, ty, &[batch, isz], &mut inputs);
    let w = filter(&mut b, rng, ty, &[units, isz], None, &mut inputs);
    let bi = bias(&mut b, rng, units);
    let act = rng.range(0, 3);
    let a = b.int(act);
    let o = output(&mut b, rng, ty);
    b.op(O::FullyConnected, &[x, w, bi, a], &[o]);
    Case {
        g: b.g,
        inputs,
        what: format!(
            "FULLY_CONNECTED {} batch {batch} in {isz} units {units} act {act}",
            ty.name()
        ),
    }
}

/// One random CONV_2D or DEPTHWISE_CONV_2D: explicit or implicit padding, strides, dilation,
/// NCHW or NHWC, batch up to 2, depth multiplier up to 3.
fn conv_case(rng: &mut Rng, depthwise: bool) -> Case {
    conv_case_with(rng, depthwise, None, None)
}

/// [`conv_case`] with the filter's (height, width) when given, else random up to 5×5, and the
/// input's channels and depth multiplier when given.
fn conv_case_with(
    rng: &mut Rng,
    depthwise: bool,
    filter_hw: Option<(u32, u32)>,
    channels: Option<(u32, u32)>,
) -> Case {
    let ty = random_type(rng);
    let r = |rng: &mut Rng, lo: i32, hi: i32| rng.range(lo, hi) as u32;
    let (n, h, w) = (r(rng, 1, 2), r(rng, 1, 9), r(rng, 1, 9));
    let (c, mult) = match channels {
        Some(cm) => cm,
        None if depthwise => (r(rng, 1, 40), r(rng, 1, 3)),
        None => (r(rng, 1, 19), 1),
    };
    let (fh, fw) = filter_hw.unwrap_or_else(|| (r(rng, 1, 5), r(rng, 1, 5)));
    let (sw, sh) = (r(rng, 1, 3), r(rng, 1, 3));
    let (dw, dh) = (r(rng, 1, 2), r(rng, 1, 2));
    let oc = if depthwise { c * mult } else { r(rng, 1, 40) };
    let nchw = rng.range(0, 3) == 0;
    let mut b = B::new();
    let mut inputs = Vec::new();
    let in_dims = if nchw { [n, c, h, w] } else { [n, h, w, c] };
    let x = data_input(&mut b, rng, ty, &in_dims, &mut inputs);
    let (f_dims, cdim) = if depthwise {
        ([1, fh, fw, oc], 3)
    } else {
        ([oc, fh, fw, c], 0)
    };
    let f = filter(&mut b, rng, ty, &f_dims, Some(cdim), &mut inputs);
    let bi = bias(&mut b, rng, oc);
    let mut ins = vec![x, f, bi];
    let implicit = rng.range(0, 3) == 0;
    let padding = if implicit {
        // SAME pads any filter; VALID needs the filter inside the input.
        let same = (fh - 1) * dh + 1 > h || (fw - 1) * dw + 1 > w || rng.range(0, 1) == 0;
        ins.push(b.int(if same { 1 } else { 2 }));
        format!("implicit {}", if same { "SAME" } else { "VALID" })
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
        format!("pad l{pl} r{pr} t{pt} b{pb}")
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
    let o = output(&mut b, rng, ty);
    let op = if depthwise {
        O::DepthwiseConv2d
    } else {
        O::Conv2d
    };
    b.op(op, &ins, &[o]);
    Case {
        g: b.g,
        inputs,
        what: format!(
            "{} {} in {in_dims:?} (nchw {nchw}) filter {f_dims:?} stride {sw}x{sh} dilation \
             {dw}x{dh} {padding} mult {mult} act {act}",
            op.name(),
            ty.name()
        ),
    }
}

#[test]
fn fast_fully_connected_equals_the_reference_on_random_shapes() {
    let mut rng = Rng(0x5eed_0001);
    for _ in 0..60 {
        let (batch, isz, units) = (rng.range(1, 9), rng.range(1, 80), rng.range(1, 40));
        check(&fully_connected_case(
            &mut rng,
            batch as u32,
            isz as u32,
            units as u32,
        ));
    }
}

/// Weights centered on their type's middle (0 for int8, 128 for uint8), which fit i8 and are
/// packed so.
#[test]
fn fast_fully_connected_with_weights_that_fit_i8_equals_the_reference() {
    let mut rng = Rng(0x5eed_0007);
    for _ in 0..40 {
        let (batch, isz, units) = (rng.range(1, 6), rng.range(1, 80), rng.range(1, 40));
        let mut case = fully_connected_case(&mut rng, batch as u32, isz as u32, units as u32);
        let w = case.g.operations[0].inputs[1] as usize;
        let wd = &mut case.g.operands[w];
        wd.zero_point = if wd.ty == T::TensorQuant8AsymmSigned {
            0
        } else {
            128
        };
        check(&case);
    }
}

#[test]
fn fast_conv2d_equals_the_reference_on_random_shapes() {
    let mut rng = Rng(0x5eed_0002);
    for _ in 0..150 {
        check(&conv_case(&mut rng, false));
    }
}

#[test]
fn fast_depthwise_conv2d_equals_the_reference_on_random_shapes() {
    let mut rng = Rng(0x5eed_0003);
    for _ in 0..150 {
        check(&conv_case(&mut rng, true));
    }
}

/// 3×3 filters (MobileNet's) have kernels of their own (the AVX2 one keeps the filter in
/// registers).
#[test]
fn fast_depthwise_conv2d_3x3_equals_the_reference_on_random_shapes() {
    let mut rng = Rng(0x5eed_0006);
    for _ in 0..60 {
        check(&conv_case_with(&mut rng, true, Some((3, 3)), None));
    }
}

/// With a depth multiplier of 1 and whole blocks of 16 channels the kernels read the input's
/// bytes where they are (elsewhere a widened copy): every filter size, padding, stride,
/// dilation, both 8-bit types and zero points at the ends of their ranges.
#[test]
fn fast_depthwise_conv2d_reading_its_input_in_place_equals_the_reference() {
    let mut rng = Rng(0x5eed_0008);
    for i in 0..90 {
        let hw = (i % 2 == 0).then_some((3, 3));
        let c = 16 * rng.range(1, 3) as u32;
        check(&conv_case_with(&mut rng, true, hw, Some((c, 1))));
    }
}

#[test]
fn fast_kernels_equal_the_reference_on_layers_large_enough_to_split_over_threads() {
    let mut rng = Rng(0x5eed_0004);
    crate::par::set_max_threads(2);
    // A 3×3 convolution 56×56×24 → 32 (2·56·56·216·32 flops, past the threading threshold).
    check(&layer_case(
        &mut rng,
        (O::Conv2d, T::TensorQuant8AsymmSigned),
        (&[1, 56, 56, 24], &[32, 3, 3, 24], Some(0), 32),
        &[1, 1, 1, 1, 1, 1, 0],
        "CONV_2D 56x56x24 -> 32",
    ));
    // A depthwise 5×5 over 56×56×64 (2·25 flops an output).
    check(&layer_case(
        &mut rng,
        (O::DepthwiseConv2d, T::TensorQuant8Asymm),
        (&[1, 56, 56, 64], &[1, 5, 5, 64], Some(3), 64),
        &[2, 2, 2, 2, 1, 1, 1, 3],
        "DEPTHWISE_CONV_2D 5x5 56x56x64",
    ));
}

/// The AVX2 depthwise kernel sums a run of 64 pixels, then requantizes and stores it: output
/// rows longer than that (150 pixels: two whole runs and a part) on both of its input paths,
/// the bytes read in place (32 channels) and the widened copy (24 channels, multiplier 1).
#[test]
fn fast_depthwise_conv2d_3x3_on_rows_longer_than_a_run_of_sums() {
    let mut rng = Rng(0x5eed_0009);
    for (ty, c) in [(T::TensorQuant8Asymm, 32), (T::TensorQuant8AsymmSigned, 24)] {
        check(&layer_case(
            &mut rng,
            (O::DepthwiseConv2d, ty),
            (&[1, 3, 150, c], &[1, 3, 3, c], Some(3), c),
            &[1, 1, 1, 1, 1, 1, 1, 0],
            "DEPTHWISE_CONV_2D 3x3 3x150",
        ));
    }
}

/// `op` on a random input of `ty` and dimensions `x_dims`, a random filter of `f_dims`
/// (per-channel along `channel_dim` sometimes), a random bias of `oc` channels and the integer
/// arguments `args`.
fn layer_case(
    rng: &mut Rng,
    (op, ty): (O, T),
    (x_dims, f_dims, channel_dim, oc): (&[u32], &[u32], Option<u32>, u32),
    args: &[i32],
    what: &str,
) -> Case {
    let mut b = B::new();
    let mut inputs = Vec::new();
    let x = data_input(&mut b, rng, ty, x_dims, &mut inputs);
    let f = filter(&mut b, rng, ty, f_dims, channel_dim, &mut inputs);
    let bi = bias(&mut b, rng, oc);
    let args: Vec<u32> = args.iter().map(|&v| b.int(v)).collect();
    let o = output(&mut b, rng, ty);
    b.op(op, &[&[x, f, bi][..], &args[..]].concat(), &[o]);
    Case {
        g: b.g,
        inputs,
        what: what.into(),
    }
}

/// Runs `case` on every kernel set: the reference kernels must have run it, with `want`.
fn check_reference_only(case: &Case, want: &[u8]) {
    for isa in Isa::all() {
        let (got, fast) = run_on(case, Route::Fast(isa));
        assert_eq!(fast, 0, "{}: the fast kernels ran past MAX_K", case.what);
        assert_eq!(got, want, "{}", case.what);
    }
}

/// A CONV_2D (1×1, depth MAX_K + 1) and a DEPTHWISE_CONV_2D (a 182×182 filter: 33124 taps, past
/// MAX_K) whose products are all 255·255: the sums pass i32::MAX, saturate there in the
/// reference kernels, and i32::MAX · 2^-24 rounds to 128.
#[test]
fn convolutions_longer_than_max_k_run_on_the_reference_kernels() {
    let depth = (MAX_K + 1) as u32;
    for (op, in_dims, f_dims) in [
        (O::Conv2d, [1, 1, 1, depth], [1, 1, 1, depth]),
        (O::DepthwiseConv2d, [1, 182, 182, 1], [1, 182, 182, 1]),
    ] {
        let mut b = B::new();
        let x = b.input(T::TensorQuant8Asymm, &in_dims);
        b.q(x, 1.0, 0);
        let len = f_dims.iter().product::<u32>() as usize;
        let f = b.konst(T::TensorQuant8Asymm, &f_dims, vec![255; len]);
        b.q(f, 1.0, 0);
        let bi = b.i32c(&[1], &[0]);
        // VALID padding, stride 1 (and multiplier 1), no activation.
        let mut args = vec![b.int(2), b.int(1), b.int(1)];
        if op == O::DepthwiseConv2d {
            args.push(b.int(1));
        }
        args.push(b.int(0));
        let o = b.output(T::TensorQuant8Asymm, &[]);
        b.q(o, 2f32.powi(24), 0);
        b.op(op, &[&[x, f, bi][..], &args].concat(), &[o]);
        let n_in = in_dims.iter().product::<u32>() as usize;
        let case = Case {
            g: b.g,
            inputs: vec![vec![255; n_in]],
            what: format!("{} past MAX_K", op.name()),
        };
        check_reference_only(&case, &[128]);
    }
}

/// A FULLY_CONNECTED whose reduction is one longer than the fast kernels' i32 accumulators
/// allow: every product is 255·255, so the sum passes i32::MAX and the reference's i64 sum
/// saturates to i32::MAX before requantization; the output is then the top of the range.
#[test]
fn reductions_longer_than_max_k_run_on_the_reference_kernels() {
    let isz = (MAX_K + 1) as u32;
    let mut b = B::new();
    let x = b.input(T::TensorQuant8Asymm, &[1, isz]);
    b.q(x, 1.0, 0);
    let w = b.konst(T::TensorQuant8Asymm, &[2, isz], vec![255; 2 * isz as usize]);
    b.q(w, 1.0, 0);
    let bi = b.i32c(&[2], &[0, i32::MIN]);
    let act = b.int(0);
    let o = b.output(T::TensorQuant8Asymm, &[]);
    // Multiplier 2^-24: i32::MAX · 2^-24 = 128 (rounded) and (i32::MAX + i32::MIN) → 0.
    b.q(o, 2f32.powi(24), 0);
    b.op(O::FullyConnected, &[x, w, bi, act], &[o]);
    let case = Case {
        g: b.g,
        inputs: vec![vec![255; isz as usize]],
        what: "FULLY_CONNECTED past MAX_K".into(),
    };
    // Channel 1: 65025 · 33026 + i32::MIN = 32002 (exact in i64), · 2^-24 rounds to 0.
    check_reference_only(&case, &[128, 0]);
}

/// On aarch64 the NEON kernels are among the kernel sets the equality tests run, and a
/// DEPTHWISE_CONV_2D and a CONV_2D routed to them run NEON code (its call counter only grows,
/// so tests running beside this one cannot hide a miss) and give the reference's bytes.
#[cfg(target_arch = "aarch64")]
#[test]
fn neon_kernels_run_the_convolutions_on_aarch64() {
    use crate::ops::qgemm::neon::RUNS;
    use std::sync::atomic::Ordering::Relaxed;
    assert!(Isa::all().contains(&Isa::Neon));
    let mut rng = Rng(0x5eed_0005);
    for depthwise in [true, false] {
        let case = conv_case(&mut rng, depthwise);
        let (want, _) = run_on(&case, Route::Reference);
        let before = RUNS.load(Relaxed);
        let (got, fast) = run_on(&case, Route::Fast(Isa::Neon));
        assert_eq!(fast, 1, "{}", case.what);
        assert!(
            RUNS.load(Relaxed) > before,
            "{}: NEON did not run",
            case.what
        );
        assert_eq!(got, want, "{}", case.what);
    }
}
