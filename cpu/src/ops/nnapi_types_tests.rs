//! The operand types NNAPI lists for each operation, against the ones we claim.
//!
//! The rows below were typed by hand from the "Supported tensor OperandCode" lists of
//! `NeuralNetworks.h` at NNAPI feature level 4 (API level 30, NN HAL 1.3), counting the
//! "(since API level 30)" additions, and read as the type of input 0 (what [`OpDef::types`]
//! and `getSupportedOperations` report). Where input 0 is not the tensor the list is about,
//! the row says so: EMBEDDING_LOOKUP and HASHTABLE_LOOKUP take TENSOR_INT32 lookups first,
//! FILL a TENSOR_INT32 shape, SELECT a TENSOR_BOOL8 condition, LSH_PROJECTION float hash
//! functions, AXIS_ALIGNED_BBOX_TRANSFORM TENSOR_QUANT16_ASYMM boxes when quantized, and the
//! quantized LSTMs their 8-bit input; those operations' other inputs are checked by their
//! family's tests.
//!
//! [`EXPECTED`] covers the operations whose tables were written first, [`LEGACY_EXPECTED`] the
//! 37 older operations moved into family tables later; both are asserted.
//!
//! [`OpDef::types`]: super::opdef::OpDef

use crate::model::{OperandType, OperationType};
use crate::supported_operation_types;

use OperandType as T;
use OperationType as O;

const F16: T = T::TensorFloat16;
const F32: T = T::TensorFloat32;
const I32: T = T::TensorInt32;
const Q8A: T = T::TensorQuant8Asymm;
const Q8AS: T = T::TensorQuant8AsymmSigned;
const Q8S: T = T::TensorQuant8Symm;
const Q8PC: T = T::TensorQuant8SymmPerChannel;
const Q16A: T = T::TensorQuant16Asymm;
const Q16S: T = T::TensorQuant16Symm;
const B8: T = T::TensorBool8;

/// FLOAT16 and FLOAT32.
const FLOAT: &[T] = &[F16, F32];
/// The floats and both 8-bit asymmetric types.
const FLOAT_Q8: &[T] = &[F16, F32, Q8A, Q8AS];
/// `FLOAT_Q8` and TENSOR_INT32.
const FLOAT_Q8_I32: &[T] = &[F16, F32, I32, Q8A, Q8AS];
/// The comparisons: `FLOAT_Q8_I32` and TENSOR_BOOL8.
const COMPARE: &[T] = &[B8, F16, F32, I32, Q8A, Q8AS];

/// Operations of the family tables (`ops/registry.rs`), by input 0's type.
const EXPECTED: &[(O, &[T])] = &[
    // lookup.rs
    (O::EmbeddingLookup, &[I32]),
    (O::HashtableLookup, &[I32]),
    (O::LshProjection, FLOAT),
    (O::RandomMultinomial, FLOAT),
    // normalization.rs
    (O::LocalResponseNormalization, FLOAT),
    (O::InstanceNormalization, FLOAT),
    // lstm.rs, lstm_q8.rs, lstm_q16.rs
    (O::Lstm, FLOAT),
    (O::BidirectionalSequenceLstm, FLOAT),
    (O::UnidirectionalSequenceLstm, FLOAT),
    (O::Quantized16bitLstm, &[Q8A]),
    (O::QuantizedLstm, &[Q8AS]),
    // rnn.rs
    (O::Rnn, FLOAT),
    (O::Svdf, FLOAT),
    (O::BidirectionalSequenceRnn, FLOAT),
    (O::UnidirectionalSequenceRnn, FLOAT),
    // movement.rs
    (O::BatchToSpaceNd, FLOAT_Q8),
    (O::SpaceToBatchNd, FLOAT_Q8),
    (O::StridedSlice, FLOAT_Q8),
    (O::ChannelShuffle, FLOAT_Q8),
    (O::ExpandDims, FLOAT_Q8_I32),
    (O::Gather, FLOAT_Q8_I32),
    (O::PadV2, FLOAT_Q8),
    (O::Slice, FLOAT_Q8_I32),
    (O::Split, FLOAT_Q8_I32),
    (O::Tile, FLOAT_Q8_I32),
    (O::Fill, &[I32]),
    (
        O::Rank,
        &[F16, F32, I32, Q8A, Q16S, B8, Q8PC, Q16A, Q8S, Q8AS],
    ),
    // reduce.rs
    (O::Argmax, FLOAT_Q8_I32),
    (O::Argmin, FLOAT_Q8_I32),
    (O::TopkV2, FLOAT_Q8_I32),
    (O::LogSoftmax, FLOAT),
    (O::ReduceAll, &[B8]),
    (O::ReduceAny, &[B8]),
    (O::ReduceMax, FLOAT_Q8),
    (O::ReduceMin, FLOAT_Q8),
    (O::ReduceProd, FLOAT),
    (O::ReduceSum, FLOAT),
    // compare.rs
    (O::Equal, COMPARE),
    (O::Greater, COMPARE),
    (O::GreaterEqual, COMPARE),
    (O::Less, COMPARE),
    (O::LessEqual, COMPARE),
    (O::NotEqual, COMPARE),
    (O::LogicalAnd, &[B8]),
    (O::LogicalNot, &[B8]),
    (O::LogicalOr, &[B8]),
    (O::Select, &[B8]),
    // CAST: F16, F32, I32, Q8A among themselves; since FL4 also identity casts of BOOL8,
    // INT32, QUANT16_ASYMM, QUANT16_SYMM, QUANT8_ASYMM_SIGNED and QUANT8_SYMM.
    (O::Cast, &[F16, F32, I32, Q8A, B8, Q16A, Q16S, Q8AS, Q8S]),
    (O::Pow, FLOAT),
    // minmax.rs
    (O::Maximum, FLOAT_Q8_I32),
    (O::Minimum, FLOAT_Q8_I32),
    (O::Prelu, FLOAT_Q8),
    // conv_variants.rs
    (O::GroupedConv2d, FLOAT_Q8),
    (O::TransposeConv2d, FLOAT_Q8),
    // resize.rs
    (O::ResizeBilinear, FLOAT_Q8),
    (O::ResizeNearestNeighbor, FLOAT_Q8),
    // detection/
    (O::AxisAlignedBboxTransform, &[F16, F32, Q16A]),
    (O::BoxWithNmsLimit, FLOAT_Q8),
    (O::DetectionPostprocessing, FLOAT),
    (O::GenerateProposals, FLOAT_Q8),
    (O::HeatmapMaxKeypoint, FLOAT_Q8),
    (O::RoiAlign, FLOAT_Q8),
    (O::RoiPooling, FLOAT_Q8),
];

/// The 37 older operations (once a per-type match, now rows of the elementwise, conv, pool,
/// softmax and shape tables), by input 0's type as NeuralNetworks.h lists them: CONCATENATION,
/// DEPTH_TO_SPACE, SPACE_TO_DEPTH, PAD, SQUEEZE and TRANSPOSE list no TENSOR_INT32, RESHAPE
/// only the floats and the 8-bit asymmetric types, and HARD_SWISH both 8-bit asymmetric types.
const LEGACY_EXPECTED: &[(O, &[T])] = &[
    (O::Add, FLOAT_Q8_I32),
    (O::Sub, FLOAT_Q8_I32),
    (O::Mul, FLOAT_Q8_I32),
    (O::Div, &[F16, F32, I32]),
    (O::Relu, FLOAT_Q8),
    (O::Relu1, FLOAT_Q8),
    (O::Relu6, FLOAT_Q8),
    (O::Logistic, FLOAT_Q8),
    (O::Tanh, FLOAT_Q8),
    (O::Floor, FLOAT),
    (O::Abs, &[F16, F32, I32]),
    (O::Exp, FLOAT),
    (O::Log, FLOAT),
    (O::Neg, &[F16, F32, I32]),
    (O::Rsqrt, FLOAT),
    (O::Sin, FLOAT),
    (O::Sqrt, FLOAT),
    (O::HardSwish, FLOAT_Q8),
    (O::Elu, FLOAT),
    (O::Dequantize, &[Q8A, Q8S, Q8PC, Q8AS]),
    (O::Quantize, FLOAT),
    (O::Reshape, FLOAT_Q8),
    (O::Squeeze, FLOAT_Q8),
    (O::Transpose, FLOAT_Q8),
    (O::Pad, FLOAT_Q8),
    (O::Concatenation, FLOAT_Q8),
    (O::SpaceToDepth, FLOAT_Q8),
    (O::DepthToSpace, FLOAT_Q8),
    (O::Mean, FLOAT_Q8),
    (O::Softmax, FLOAT_Q8),
    (O::L2Normalization, FLOAT_Q8),
    (O::FullyConnected, FLOAT_Q8),
    (O::Conv2d, FLOAT_Q8),
    (O::DepthwiseConv2d, FLOAT_Q8),
    (O::AveragePool2d, FLOAT_Q8),
    (O::MaxPool2d, FLOAT_Q8),
    (O::L2Pool2d, FLOAT),
];

/// The control-flow operations (`control_flow.rs`, not a family table), by input 0: IF's
/// TENSOR_BOOL8 condition, WHILE's SUBGRAPH condition model.
const CONTROL_FLOW: &[(O, &[T])] = &[(O::If, &[T::TensorBool8]), (O::While, &[T::Subgraph])];

/// `types` as sorted operand codes, so two lists compare as sets.
fn set(types: &[T]) -> Vec<i32> {
    let mut v: Vec<i32> = types.iter().map(|t| t.code()).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// The types we claim for `op` (empty when we have no kernel).
fn claimed(op: O) -> &'static [T] {
    supported_operation_types()
        .iter()
        .find(|(o, _)| *o == op)
        .map_or(&[], |(_, t)| *t)
}

/// Every row of `table` whose claim differs from NNAPI's list, described.
fn differences(table: &[(O, &[T])]) -> Vec<String> {
    let names = |v: &[i32]| -> Vec<&str> {
        v.iter()
            .filter_map(|&c| T::ALL.iter().find(|t| t.code() == c).map(|t| t.name()))
            .collect()
    };
    table
        .iter()
        .filter_map(|&(op, want)| {
            let (want, have) = (set(want), set(claimed(op)));
            let extra: Vec<i32> = have.iter().copied().filter(|c| !want.contains(c)).collect();
            let missing: Vec<i32> = want.iter().copied().filter(|c| !have.contains(c)).collect();
            (!extra.is_empty() || !missing.is_empty()).then(|| {
                format!(
                    "{}: claims {:?} NNAPI does not list, misses {:?} it lists",
                    op.name(),
                    names(&extra),
                    names(&missing)
                )
            })
        })
        .collect()
}

#[test]
fn family_operations_claim_exactly_the_input0_types_nnapi_lists() {
    let diff = differences(EXPECTED);
    assert!(diff.is_empty(), "{diff:#?}");
}

#[test]
fn older_operations_claim_exactly_the_input0_types_nnapi_lists() {
    let diff = differences(LEGACY_EXPECTED);
    assert!(diff.is_empty(), "{diff:#?}");
}

#[test]
fn every_family_table_operation_has_an_expected_row() {
    let listed = |op: O| {
        EXPECTED
            .iter()
            .chain(LEGACY_EXPECTED)
            .any(|(o, _)| *o == op)
    };
    let unlisted: Vec<&str> = crate::ops::registry::all()
        .map(|d| d.op)
        .filter(|&op| !listed(op))
        .map(|op| op.name())
        .collect();
    assert!(unlisted.is_empty(), "no NNAPI row for {unlisted:?}");
    // Every row of EXPECTED is an operation a family table defines.
    let not_in_tables: Vec<&str> = EXPECTED
        .iter()
        .filter(|(op, _)| crate::ops::registry::find(*op).is_none())
        .map(|(op, _)| op.name())
        .collect();
    assert!(
        not_in_tables.is_empty(),
        "not in a family table: {not_in_tables:?}"
    );
}

#[test]
fn expected_tables_cover_every_nnapi_operation_once() {
    for &op in O::ALL {
        let rows = EXPECTED
            .iter()
            .chain(LEGACY_EXPECTED)
            .chain(CONTROL_FLOW)
            .filter(|(o, _)| *o == op)
            .count();
        assert_eq!(rows, 1, "{} has {rows} rows", op.name());
    }
    assert_eq!(LEGACY_EXPECTED.len(), 37);
    assert_eq!(
        EXPECTED.len() + LEGACY_EXPECTED.len() + CONTROL_FLOW.len(),
        102
    );
}

#[test]
fn control_flow_operations_claim_their_input0_types() {
    let diff = differences(CONTROL_FLOW);
    assert!(diff.is_empty(), "{diff:#?}");
}

#[test]
fn differences_name_extra_and_missing_types() {
    // The comparison itself: a claim that differs from a row is reported both ways.
    let diff = differences(&[(O::Floor, &[F32, I32])]);
    assert_eq!(diff.len(), 1);
    assert!(diff[0].contains("TENSOR_FLOAT16"), "{diff:?}");
    assert!(diff[0].contains("TENSOR_INT32"), "{diff:?}");
    assert!(differences(&[(O::Floor, &[F32, F16])]).is_empty());
}

/// TRANSPOSE's permutation is optional: omitted, NNAPI reverses the dimensions. A permutation
/// that is present must be a 1-D TENSOR_INT32 of rank(input0) entries (AOSP's reference
/// checks exactly that), so a present but empty one on a 2-D input is an error, as a present
/// but empty SQUEEZE axes list squeezes nothing rather than everything. The legacy kernel
/// (`shape::transpose`) once reversed the dimensions instead.
#[test]
fn transpose_with_a_present_but_empty_permutation_is_an_error() {
    use crate::test_support::*;
    let mut b = B::new();
    let x = b.input(F32, &[2, 3]);
    // The empty permutation is a zero-sized temporary: SLICE of no elements of [1, 0].
    let src = b.i32c(&[2], &[1, 0]);
    let begin = b.i32c(&[1], &[0]);
    let size = b.i32c(&[1], &[0]);
    let p = b.temp(I32, &[0]);
    b.op(O::Slice, &[src, begin, size], &[p]);
    let o = b.output(F32, &[]);
    b.op(O::Transpose, &[x, p], &[o]);
    if crate::PreparedGraph::new(b.g.clone()).is_err() {
        return; // refused at preparation: the rule holds
    }
    let r = run_outputs(b.g, &[fb(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])]);
    assert!(r.is_err(), "a present but empty permutation ran: {r:?}");
}
