//! The operations MobileNet/SSD-class models use, lowered and executed on the CPU-only
//! driver against values worked out by hand (in the comments): the argument orders NNAPI
//! wants are what these check.

use nnaccel_hal::OperationType;

use super::code;
use super::lower_model;
use super::tests::{G, assert_close, f32s, i32s, op_types, run, to_f32s};
use crate::graph::{Activation, ElementType, Options, Padding};

/// A one-node float graph: inputs `xs` (shapes), constants added by `consts`, one output.
fn one_node(
    code: i32,
    xs: &[&[i32]],
    consts: &[(ElementType, &[i32], Vec<u8>)],
    y_shape: &[i32],
    options: Options,
) -> super::Lowered {
    let mut g = G::default();
    let mut inputs: Vec<i32> = xs
        .iter()
        .enumerate()
        .map(|(k, s)| g.f(&format!("x{k}"), s))
        .collect();
    let model_inputs = inputs.clone();
    for (k, (ty, shape, data)) in consts.iter().enumerate() {
        inputs.push(g.c(&format!("c{k}"), *ty, shape, data.clone()));
    }
    let y = g.f("y", y_shape);
    g.n(code, &inputs, &[y], options);
    lower_model(&g.graph(&model_inputs, &[y])).unwrap()
}

#[test]
fn transpose_conv_takes_nnapi_argument_order_and_executes() {
    // Input 1x1x1x1 [2]; filter [1, 2, 2, 1] = [1, 2, 3, 4]; stride 2, VALID; output shape
    // [1, 2, 2, 1]: each output pixel is 2 × its filter tap: [2, 4, 6, 8].
    let mut g = G::default();
    let shape = g.c("shape", ElementType::Int32, &[4], i32s(&[1, 2, 2, 1]));
    let w = g.c(
        "w",
        ElementType::Float32,
        &[1, 2, 2, 1],
        f32s(&[1.0, 2.0, 3.0, 4.0]),
    );
    let x = g.f("x", &[1, 1, 1, 1]);
    let y = g.f("y", &[1, 2, 2, 1]);
    g.n(
        code::TRANSPOSE_CONV,
        &[shape, w, x],
        &[y],
        Options::TransposeConv {
            padding: Padding::Valid,
            stride_w: 2,
            stride_h: 2,
            activation: Activation::None,
        },
    );
    let l = lower_model(&g.graph(&[x], &[y])).unwrap();
    assert_eq!(op_types(&l), [OperationType::TransposeConv2d]);
    assert_close(
        &to_f32s(&run(&l, &[f32s(&[2.0])])[0]),
        &[2.0, 4.0, 6.0, 8.0],
    );
}

#[test]
fn average_pool_same_excludes_the_padding_from_the_average() {
    // 3x3 input 1..=9, 2x2 window, stride 2, SAME: output 2x2, one row/column of padding at
    // the end. Windows: {1,2,4,5} → 3; {3,6} → 4.5; {7,8} → 7.5; {9} → 9.
    let l = one_node(
        code::AVERAGE_POOL_2D,
        &[&[1, 3, 3, 1]],
        &[],
        &[1, 2, 2, 1],
        Options::Pool2d {
            padding: Padding::Same,
            stride_w: 2,
            stride_h: 2,
            filter_w: 2,
            filter_h: 2,
            activation: Activation::None,
        },
    );
    let x: Vec<f32> = (1..=9).map(|v| v as f32).collect();
    assert_close(&to_f32s(&run(&l, &[f32s(&x)])[0]), &[3.0, 4.5, 7.5, 9.0]);
}

#[test]
fn max_pool_valid_executes() {
    // 2x2 window over [[1, 5], [3, 2]]: 5.
    let l = one_node(
        code::MAX_POOL_2D,
        &[&[1, 2, 2, 1]],
        &[],
        &[1, 1, 1, 1],
        Options::Pool2d {
            padding: Padding::Valid,
            stride_w: 1,
            stride_h: 1,
            filter_w: 2,
            filter_h: 2,
            activation: Activation::None,
        },
    );
    assert_close(
        &to_f32s(&run(&l, &[f32s(&[1.0, 5.0, 3.0, 2.0])])[0]),
        &[5.0],
    );
}

#[test]
fn softmax_executes_with_beta() {
    // [0, ln 3]: e^0 = 1, e^ln3 = 3: [0.25, 0.75].
    let l = one_node(
        code::SOFTMAX,
        &[&[1, 2]],
        &[],
        &[1, 2],
        Options::Softmax { beta: 1.0 },
    );
    let x = f32s(&[0.0, 3f32.ln()]);
    assert_close(&to_f32s(&run(&l, &[x])[0]), &[0.25, 0.75]);
}

#[test]
fn mean_over_height_and_width_keeps_dims() {
    // Mean of [1, 2, 3, 4] = 2.5.
    let l = one_node(
        code::MEAN,
        &[&[1, 2, 2, 1]],
        &[(ElementType::Int32, &[2], i32s(&[1, 2]))],
        &[1, 1, 1, 1],
        Options::Reducer { keep_dims: true },
    );
    assert_close(
        &to_f32s(&run(&l, &[f32s(&[1.0, 2.0, 3.0, 4.0])])[0]),
        &[2.5],
    );
}

#[test]
fn resize_bilinear_gives_width_then_height_to_nnapi() {
    // 1x1x2x1 [0, 2] to height 1, width 4 (no corner alignment, no half pixels): source x =
    // 0, 0.5, 1, 1.5 → 0, 1, 2, 2 (the last clamps to the edge).
    let l = one_node(
        code::RESIZE_BILINEAR,
        &[&[1, 1, 2, 1]],
        &[(ElementType::Int32, &[2], i32s(&[1, 4]))],
        &[1, 1, 4, 1],
        Options::Resize {
            align_corners: false,
            half_pixel_centers: false,
        },
    );
    assert_close(
        &to_f32s(&run(&l, &[f32s(&[0.0, 2.0])])[0]),
        &[0.0, 1.0, 2.0, 2.0],
    );
}

#[test]
fn pad_and_padv2_execute() {
    // [1, 2] padded by one before: PAD → [0, 1, 2]; PADV2 with 9 → [9, 1, 2].
    let pads = (ElementType::Int32, &[1, 2][..], i32s(&[1, 0]));
    let l = one_node(
        code::PAD,
        &[&[2]],
        std::slice::from_ref(&pads),
        &[3],
        Options::None,
    );
    assert_close(
        &to_f32s(&run(&l, &[f32s(&[1.0, 2.0])])[0]),
        &[0.0, 1.0, 2.0],
    );
    let nine = (ElementType::Float32, &[][..], f32s(&[9.0]));
    let l = one_node(code::PADV2, &[&[2]], &[pads, nine], &[3], Options::None);
    assert_eq!(op_types(&l), [OperationType::PadV2]);
    assert_close(
        &to_f32s(&run(&l, &[f32s(&[1.0, 2.0])])[0]),
        &[9.0, 1.0, 2.0],
    );
}

#[test]
fn concatenation_with_a_fused_relu_gets_a_relu_after() {
    // [-1] ++ [2] = [-1, 2], RELU: [0, 2].
    let l = one_node(
        code::CONCATENATION,
        &[&[1], &[1]],
        &[],
        &[2],
        Options::Concatenation {
            axis: -1,
            activation: Activation::Relu,
        },
    );
    assert_eq!(
        op_types(&l),
        [OperationType::Concatenation, OperationType::Relu]
    );
    let out = run(&l, &[f32s(&[-1.0]), f32s(&[2.0])]);
    assert_close(&to_f32s(&out[0]), &[0.0, 2.0]);
}

#[test]
fn hard_swish_and_logistic_execute() {
    // x · relu6(x + 3) / 6 on [-4, 0, 1, 4]: [0, 0, 4/6, 4].
    let l = one_node(code::HARD_SWISH, &[&[4]], &[], &[4], Options::None);
    let out = run(&l, &[f32s(&[-4.0, 0.0, 1.0, 4.0])]);
    assert_close(&to_f32s(&out[0]), &[0.0, 0.0, 4.0 / 6.0, 4.0]);
    // 1 / (1 + e^0) = 0.5.
    let l = one_node(code::LOGISTIC, &[&[1]], &[], &[1], Options::None);
    assert_close(&to_f32s(&run(&l, &[f32s(&[0.0])])[0]), &[0.5]);
}

#[test]
fn reshape_takes_its_constant_shape_tensor() {
    // [1, 6] → [-1, 3] = [2, 3]; the bytes are unchanged.
    let l = one_node(
        code::RESHAPE,
        &[&[1, 6]],
        &[(ElementType::Int32, &[2], i32s(&[-1, 3]))],
        &[2, 3],
        Options::None,
    );
    let x = f32s(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    assert_eq!(run(&l, std::slice::from_ref(&x))[0], x);
}

#[test]
fn quantize_float_to_int8_executes() {
    // scale 0.5 zp 0: [1.0, -0.5] → [2, -1].
    let mut g = G::default();
    let x = g.f("x", &[2]);
    let y = g.t("y", ElementType::Int8, &[2]);
    g.q(y, &[0.5], &[0], 0);
    g.n(code::QUANTIZE, &[x], &[y], Options::None);
    let l = lower_model(&g.graph(&[x], &[y])).unwrap();
    assert_eq!(op_types(&l), [OperationType::Quantize]);
    assert_eq!(run(&l, &[f32s(&[1.0, -0.5])])[0], [2, (-1i8) as u8]);
}

#[test]
fn squared_difference_is_a_sub_then_a_mul() {
    // (5 - 2)² = 9, (1 - 3)² = 4.
    let l = one_node(
        code::SQUARED_DIFFERENCE,
        &[&[2], &[2]],
        &[],
        &[2],
        Options::None,
    );
    assert_eq!(op_types(&l), [OperationType::Sub, OperationType::Mul]);
    let out = run(&l, &[f32s(&[5.0, 1.0]), f32s(&[2.0, 3.0])]);
    assert_close(&to_f32s(&out[0]), &[9.0, 4.0]);
}

#[test]
fn uint8_conv_bias_takes_input_times_filter_scale_and_executes() {
    // Input uint8 scale 0.5 zp 128: q [130, 132] = [1, 2]. Filter [1, 1, 1, 2] scale 0.25 zp
    // 128: q [132, 124] = [1, -1]. Bias q [4], stored at scale 0.13 (off): NNAPI's is
    // 0.5 * 0.25 = 0.125, real 0.5. Output 1 - 2 + 0.5 = -0.5 at scale 0.5 zp 128: 127.
    let mut g = G::default();
    let x = g.t("x", ElementType::UInt8, &[1, 1, 1, 2]);
    g.q(x, &[0.5], &[128], 0);
    let w = g.c("w", ElementType::UInt8, &[1, 1, 1, 2], vec![132, 124]);
    g.q(w, &[0.25], &[128], 0);
    let bias = g.c("b", ElementType::Int32, &[1], i32s(&[4]));
    g.q(bias, &[0.13], &[0], 0);
    let y = g.t("y", ElementType::UInt8, &[1, 1, 1, 1]);
    g.q(y, &[0.5], &[128], 0);
    g.n(
        code::CONV_2D,
        &[x, w, bias],
        &[y],
        Options::Conv2d {
            padding: Padding::Valid,
            stride_w: 1,
            stride_h: 1,
            dilation_w: 1,
            dilation_h: 1,
            activation: Activation::None,
        },
    );
    let l = lower_model(&g.graph(&[x], &[y])).unwrap();
    let conv = &l.model.operations[0];
    assert_eq!(l.model.operands[conv.inputs[2] as usize].scale, 0.125);
    assert_eq!(
        l.model.operands[conv.inputs[0] as usize].operand_type,
        nnaccel_hal::OperandType::TensorQuant8Asymm
    );
    assert_eq!(run(&l, &[vec![130, 132]])[0], [127]);
}

#[test]
fn batch_matmul_with_a_constant_right_side_is_a_fully_connected() {
    // [[1, 2], [3, 4]] × [[1, 0, 1], [0, 1, 1]] = [[1, 2, 3], [3, 4, 7]]; with adj_y the
    // right side is stored transposed ([[1, 0], [0, 1], [1, 1]]) for the same product.
    for adj_y in [false, true] {
        let mut g = G::default();
        let x = g.f("x", &[1, 2, 2]);
        let (shape, w): (&[i32], &[f32]) = if adj_y {
            (&[3, 2], &[1.0, 0.0, 0.0, 1.0, 1.0, 1.0])
        } else {
            (&[2, 3], &[1.0, 0.0, 1.0, 0.0, 1.0, 1.0])
        };
        let w = g.c("w", ElementType::Float32, shape, f32s(w));
        let y = g.f("y", &[1, 2, 3]);
        g.n(
            code::BATCH_MATMUL,
            &[x, w],
            &[y],
            Options::BatchMatMul {
                adj_x: false,
                adj_y,
            },
        );
        let l = lower_model(&g.graph(&[x], &[y])).unwrap();
        assert_eq!(
            op_types(&l),
            [OperationType::FullyConnected, OperationType::Reshape]
        );
        let out = run(&l, &[f32s(&[1.0, 2.0, 3.0, 4.0])]);
        assert_close(&to_f32s(&out[0]), &[1.0, 2.0, 3.0, 3.0, 4.0, 7.0]);
    }
}

#[test]
fn mirror_pad_reflect_and_symmetric_gather_the_mirrored_elements() {
    // [1, 2, 3] padded (2, 1): REFLECT [3, 2, 1, 2, 3, 2]; SYMMETRIC [2, 1, 1, 2, 3, 3].
    for (symmetric, want) in [
        (false, [3.0, 2.0, 1.0, 2.0, 3.0, 2.0]),
        (true, [2.0, 1.0, 1.0, 2.0, 3.0, 3.0]),
    ] {
        let l = one_node(
            code::MIRROR_PAD,
            &[&[3]],
            &[(ElementType::Int32, &[1, 2], i32s(&[2, 1]))],
            &[6],
            Options::MirrorPad { symmetric },
        );
        assert_eq!(op_types(&l), [OperationType::Gather]);
        assert_close(&to_f32s(&run(&l, &[f32s(&[1.0, 2.0, 3.0])])[0]), &want);
    }
}

#[test]
fn mirror_pad_of_two_axes_and_too_much_padding() {
    // [[1, 2], [3, 4]] REFLECT-padded by 1 on both sides of both axes:
    // rows [2: 3 4] [1 2] [3 4] [1 2] → each row [b a b a]:
    // [4 3 4 3], [2 1 2 1], [4 3 4 3], [2 1 2 1].
    let l = one_node(
        code::MIRROR_PAD,
        &[&[2, 2]],
        &[(ElementType::Int32, &[2, 2], i32s(&[1, 1, 1, 1]))],
        &[4, 4],
        Options::MirrorPad { symmetric: false },
    );
    assert_eq!(op_types(&l), [OperationType::Gather, OperationType::Gather]);
    let out = to_f32s(&run(&l, &[f32s(&[1.0, 2.0, 3.0, 4.0])])[0]);
    let want = [
        4., 3., 4., 3., 2., 1., 2., 1., 4., 3., 4., 3., 2., 1., 2., 1.,
    ];
    assert_close(&out, &want);
    // REFLECT cannot pad a dimension of 2 by 2.
    let mut g = G::default();
    let x = g.f("x", &[2]);
    let p = g.c("p", ElementType::Int32, &[1, 2], i32s(&[2, 0]));
    let y = g.f("y", &[4]);
    g.n(
        code::MIRROR_PAD,
        &[x, p],
        &[y],
        Options::MirrorPad { symmetric: false },
    );
    let e = lower_model(&g.graph(&[x], &[y])).unwrap_err().to_string();
    assert!(e.starts_with("node 0 (MIRROR_PAD): padding (2, 0)"), "{e}");
}

#[test]
fn reverse_v2_gathers_reversed_indexes() {
    // [[1, 2, 3], [4, 5, 6]] reversed on axis -1: [[3, 2, 1], [6, 5, 4]].
    let l = one_node(
        code::REVERSE_V2,
        &[&[2, 3]],
        &[(ElementType::Int32, &[1], i32s(&[-1]))],
        &[2, 3],
        Options::None,
    );
    let out = run(&l, &[f32s(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])]);
    assert_close(&to_f32s(&out[0]), &[3.0, 2.0, 1.0, 6.0, 5.0, 4.0]);
}

#[test]
fn a_reduction_to_a_scalar_runs_with_a_one_element_output() {
    // SUM of [1, 2, 3, 4] over both axes: 10, a TFLite scalar (shape []).
    let l = one_node(
        code::SUM,
        &[&[2, 2]],
        &[(ElementType::Int32, &[2], i32s(&[0, 1]))],
        &[],
        Options::Reducer { keep_dims: false },
    );
    assert_eq!(l.outputs[0].shape, Vec::<i32>::new());
    assert_close(
        &to_f32s(&run(&l, &[f32s(&[1.0, 2.0, 3.0, 4.0])])[0]),
        &[10.0],
    );
}

#[test]
fn expand_dims_and_squeeze_compute_their_shape_from_the_input() {
    // x [2, 3] with an unknown batch (signature [-1, 3]); EXPAND_DIMS at -1 gives [-1, 3, 1],
    // SQUEEZE of that at 2 gives [-1, 3] back: the RESHAPE shapes carry the -1.
    let mut g = G::default();
    let x = g.f("x", &[2, 3]);
    g.sub.tensors[x as usize].shape_signature = vec![-1, 3];
    let axis = g.c("axis", ElementType::Int32, &[], i32s(&[-1]));
    let e = g.f("e", &[2, 3, 1]);
    g.sub.tensors[e as usize].shape_signature = vec![-1, 3, 1];
    let y = g.f("y", &[2, 3]);
    g.n(code::EXPAND_DIMS, &[x, axis], &[e], Options::None);
    g.n(
        code::SQUEEZE,
        &[e],
        &[y],
        Options::Squeeze {
            squeeze_dims: vec![2],
        },
    );
    let l = lower_model(&g.graph(&[x], &[y])).unwrap();
    let shapes: Vec<Vec<i32>> = l
        .model
        .operations
        .iter()
        .map(|op| {
            let o = &l.model.operands[op.inputs[1] as usize];
            let at = o.location.offset as usize;
            let len = o.location.length as usize;
            l.model.operand_values[at..at + len]
                .chunks_exact(4)
                .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        })
        .collect();
    assert_eq!(shapes, [vec![-1, 3, 1], vec![-1, 3]]);
    assert_eq!(
        l.model.operands[l.model.input_indexes[0] as usize].dimensions,
        [0, 3]
    );
    // Squeezing a dimension that is not 1 is an error naming it.
    let mut g = G::default();
    let x = g.f("x", &[2, 3]);
    let y = g.f("y", &[3]);
    let squeeze = Options::Squeeze {
        squeeze_dims: vec![0],
    };
    g.n(code::SQUEEZE, &[x], &[y], squeeze);
    let err = lower_model(&g.graph(&[x], &[y])).unwrap_err().to_string();
    assert!(err.starts_with("node 0 (SQUEEZE): dimension 0"), "{err}");
}

#[test]
fn floor_div_and_floor_mod_round_toward_minus_infinity() {
    // a = [7, -7, 7.5], b = [2, 2, -2]: floor(a / b) = [3, -4, -4]; a − that · b =
    // [1, 1, -0.5].
    let a = f32s(&[7.0, -7.0, 7.5]);
    let d = f32s(&[2.0, 2.0, -2.0]);
    let div = one_node(code::FLOOR_DIV, &[&[3], &[3]], &[], &[3], Options::None);
    assert_eq!(op_types(&div), [OperationType::Div, OperationType::Floor]);
    assert_close(
        &to_f32s(&run(&div, &[a.clone(), d.clone()])[0]),
        &[3.0, -4.0, -4.0],
    );
    let m = one_node(code::FLOOR_MOD, &[&[3], &[3]], &[], &[3], Options::None);
    assert_close(&to_f32s(&run(&m, &[a, d])[0]), &[1.0, 1.0, -0.5]);
    // INT32: -7 floor-div 2 = -4, -7 floor-mod 2 = 1.
    let mut g = G::default();
    let x = g.t("x", ElementType::Int32, &[2]);
    let c = g.c("c", ElementType::Int32, &[2], i32s(&[2, -3]));
    let y = g.t("y", ElementType::Int32, &[2]);
    g.n(code::FLOOR_MOD, &[x, c], &[y], Options::None);
    let l = lower_model(&g.graph(&[x], &[y])).unwrap();
    // [-7 mod 2, 7 mod -3] = [1, -2] (the sign of the divisor).
    assert_eq!(run(&l, &[i32s(&[-7, 7])])[0], i32s(&[1, -2]));
}

#[test]
fn gelu_exact_and_approximate_match_their_formulas() {
    // Exact: 0.5·x·(1 + erf(x/√2)) at x = -2, -0.5, 0, 1, 3, with erf(√2) = 0.9544997,
    // erf(0.3535534) = 0.3829249, erf(0.7071068) = 0.6826895, erf(2.1213203) = 0.9973002.
    let x = [-2.0f32, -0.5, 0.0, 1.0, 3.0];
    let exact = [
        0.5 * -2.0 * (1.0 - 0.954_499_7),
        0.5 * -0.5 * (1.0 - 0.382_924_9),
        0.0,
        0.5 * (1.0 + 0.682_689_5),
        0.5 * 3.0 * (1.0 + 0.997_300_2),
    ];
    let l = one_node(
        code::GELU,
        &[&[5]],
        &[],
        &[5],
        Options::Gelu { approximate: false },
    );
    let got = to_f32s(&run(&l, &[f32s(&x)])[0]);
    for (g, w) in got.iter().zip(exact) {
        assert!((g - w).abs() < 1e-6, "{got:?} vs {exact:?}");
    }
    // Approximate: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) at x = 1 (Python's math):
    // √(2/π)·1.044715 = 0.8335620, tanh = 0.6823840, 0.5·1.6823840 = 0.8411920. The
    // erf values above are math.erf's too.
    let l = one_node(
        code::GELU,
        &[&[1]],
        &[],
        &[1],
        Options::Gelu { approximate: true },
    );
    assert_close(&to_f32s(&run(&l, &[f32s(&[1.0])])[0]), &[0.841_192]);
}

#[test]
fn cos_is_the_sine_a_quarter_turn_on() {
    // cos 0 = 1, cos π = -1, cos(π/3) = 0.5.
    let l = one_node(code::COS, &[&[3]], &[], &[3], Options::None);
    let pi = std::f32::consts::PI;
    let out = to_f32s(&run(&l, &[f32s(&[0.0, pi, pi / 3.0])])[0]);
    for (g, w) in out.iter().zip([1.0f32, -1.0, 0.5]) {
        assert!((g - w).abs() < 1e-6, "{out:?}");
    }
}
