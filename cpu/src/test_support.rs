//! What the unit tests of every kernel family share: a small graph builder ([`B`]), byte
//! conversions, running a graph, and float comparison.
#![allow(dead_code)]

use crate::*;
use OperandType as T;

/// Small graph builder.
pub(crate) struct B {
    pub(crate) g: Graph,
}

impl B {
    pub(crate) fn new() -> Self {
        B {
            g: Graph::default(),
        }
    }
    pub(crate) fn add(&mut self, ty: OperandType, dims: &[u32], lifetime: Lifetime) -> u32 {
        self.g
            .operands
            .push(Operand::new(ty, dims.to_vec(), lifetime));
        (self.g.operands.len() - 1) as u32
    }
    pub(crate) fn input(&mut self, ty: OperandType, dims: &[u32]) -> u32 {
        let i = self.add(ty, dims, Lifetime::SubgraphInput);
        self.g.input_indexes.push(i);
        i
    }
    pub(crate) fn output(&mut self, ty: OperandType, dims: &[u32]) -> u32 {
        let i = self.add(ty, dims, Lifetime::SubgraphOutput);
        self.g.output_indexes.push(i);
        i
    }
    pub(crate) fn temp(&mut self, ty: OperandType, dims: &[u32]) -> u32 {
        self.add(ty, dims, Lifetime::TemporaryVariable)
    }
    pub(crate) fn konst(&mut self, ty: OperandType, dims: &[u32], bytes: Vec<u8>) -> u32 {
        let offset = self.g.operand_values.len();
        let length = bytes.len();
        self.g.operand_values.extend(bytes);
        self.add(ty, dims, Lifetime::ConstantCopy { offset, length })
    }
    pub(crate) fn f32c(&mut self, dims: &[u32], v: &[f32]) -> u32 {
        self.konst(T::TensorFloat32, dims, fb(v))
    }
    pub(crate) fn i32c(&mut self, dims: &[u32], v: &[i32]) -> u32 {
        self.konst(
            T::TensorInt32,
            dims,
            v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        )
    }
    pub(crate) fn int(&mut self, v: i32) -> u32 {
        self.konst(T::Int32, &[], v.to_le_bytes().to_vec())
    }
    pub(crate) fn float(&mut self, v: f32) -> u32 {
        self.konst(T::Float32, &[], v.to_le_bytes().to_vec())
    }
    pub(crate) fn boolean(&mut self, v: bool) -> u32 {
        self.konst(T::Bool, &[], vec![u8::from(v)])
    }
    pub(crate) fn q(&mut self, i: u32, scale: f32, zp: i32) -> u32 {
        set_q(&mut self.g, i, scale, zp);
        i
    }
    pub(crate) fn op(&mut self, op: OperationType, ins: &[u32], outs: &[u32]) {
        self.g.operations.push(Operation {
            op,
            inputs: ins.to_vec(),
            outputs: outs.to_vec(),
        });
    }
}

/// Sets the scale and zero point of operand `i` of `g`.
pub(crate) fn set_q(g: &mut Graph, i: u32, scale: f32, zp: i32) {
    g.operands[i as usize].scale = scale;
    g.operands[i as usize].zero_point = zp;
}

/// Execution arguments for byte inputs with their dimensions.
fn value_args(inputs: &[(Vec<u8>, Vec<u32>)]) -> Vec<InputArg<'_>> {
    inputs
        .iter()
        .map(|(d, dims)| InputArg::Value {
            data: d,
            dimensions: dims.clone(),
        })
        .collect()
}

pub(crate) fn fb(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub(crate) fn bf(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Runs a graph with byte inputs (model dims) and one output; returns bytes and shape.
pub(crate) fn run_bytes(g: Graph, inputs: &[(Vec<u8>, Vec<u32>)]) -> (Vec<u8>, Vec<u32>) {
    let p = PreparedGraph::new(g).unwrap();
    let args = value_args(inputs);
    let mut out = vec![0u8; 1 << 20];
    let shapes = {
        let mut outs: Vec<&mut [u8]> = vec![&mut out[..]];
        p.execute(&[], &args, &mut outs).unwrap()
    };
    let dims = shapes[0].dimensions.clone();
    let n: usize = dims.iter().map(|&d| d as usize).product();
    let sz = p.graph().operands[p.graph().output_indexes[0] as usize]
        .ty
        .element_size();
    out.truncate(n * sz);
    (out, dims)
}

pub(crate) fn run_f32(g: Graph, inputs: &[&[f32]]) -> (Vec<f32>, Vec<u32>) {
    let ins: Vec<(Vec<u8>, Vec<u32>)> = inputs.iter().map(|v| (fb(v), vec![])).collect();
    let (o, d) = run_bytes(g, &ins);
    (bf(&o), d)
}

/// `got` and `want` agree, element by element, to the relative tolerance of f32 sums taken in
/// another order (1e-4 of 1 + |want|); `what` names the comparison in a failure.
pub(crate) fn assert_close(got: &[f32], want: &[f32], what: &str) {
    for (i, (x, y)) in got.iter().zip(want).enumerate() {
        assert!(
            (x - y).abs() <= 1e-4 * (1.0 + y.abs()),
            "{what}: [{i}] {x} vs {y}"
        );
    }
}

pub(crate) fn close(a: &[f32], b: &[f32]) {
    assert_eq!(a.len(), b.len(), "{a:?} vs {b:?}");
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() <= 1e-4 * (1.0 + y.abs()), "{a:?} vs {b:?}");
    }
}

/// Little-endian FLOAT16 bytes of `v`.
pub(crate) fn f16_bytes(v: &[f32]) -> Vec<u8> {
    v.iter()
        .flat_map(|&x| f32_to_f16(x).to_le_bytes())
        .collect()
}

/// FLOAT16 elements of `b`, as f32.
pub(crate) fn f16_vals(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(2)
        .map(|c| f16_to_f32(u16::from_le_bytes([c[0], c[1]])))
        .collect()
}

/// Little-endian INT32 bytes of `v`.
pub(crate) fn i32_bytes(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// INT32 elements of `b`.
pub(crate) fn i32_vals(b: &[u8]) -> Vec<i32> {
    b.chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Bytes of signed 8-bit values.
pub(crate) fn i8_bytes(v: &[i8]) -> Vec<u8> {
    v.iter().map(|&x| x as u8).collect()
}

/// Signed 8-bit elements of `b`.
pub(crate) fn i8_vals(b: &[u8]) -> Vec<i8> {
    b.iter().map(|&x| x as i8).collect()
}

/// A constant FLOAT16 scalar operand of value `v`.
pub(crate) fn half(b: &mut B, v: f32) -> u32 {
    b.konst(T::Float16, &[], f32_to_f16(v).to_le_bytes().to_vec())
}

/// Asserts that operation 0 of `g` is refused as invalid.
pub(crate) fn invalid(g: Graph) {
    let r = PreparedGraph::new(g);
    assert!(
        matches!(r, Err(GraphError::InvalidOperation { index: 0, .. })),
        "{r:?}"
    );
}

/// The reason operation 0 of `g` is refused as an invalid operation.
pub(crate) fn refused(g: Graph) -> String {
    match PreparedGraph::new(g) {
        Err(GraphError::InvalidOperation {
            index: 0, reason, ..
        }) => reason,
        other => panic!("expected InvalidOperation, got {other:?}"),
    }
}

/// The execution error of `g` on byte inputs with their dimensions (one output).
pub(crate) fn exec_err(g: Graph, inputs: &[(Vec<u8>, Vec<u32>)]) -> ExecError {
    let p = PreparedGraph::new(g).unwrap();
    let args = value_args(inputs);
    let mut out = vec![0u8; 4096];
    let mut outs: Vec<&mut [u8]> = vec![&mut out[..]];
    p.execute(&[], &args, &mut outs).unwrap_err()
}

/// Every output's bytes and shape.
pub(crate) type Outs = Vec<(Vec<u8>, Vec<u32>)>;

/// Runs `g` on byte inputs (model dims); every output's bytes and shape, or the error.
pub(crate) fn run_outputs(g: Graph, inputs: &[Vec<u8>]) -> Result<Outs, ExecError> {
    let with: Vec<(Vec<u8>, Vec<u32>)> = inputs.iter().map(|d| (d.clone(), vec![])).collect();
    run_outputs_dims(g, &with)
}

/// Runs `g` on byte inputs with their dimensions (empty: the model's); every output's bytes
/// and shape, or the error.
pub(crate) fn run_outputs_dims(
    g: Graph,
    inputs: &[(Vec<u8>, Vec<u32>)],
) -> Result<Outs, ExecError> {
    let p = PreparedGraph::new(g).expect("graph prepares");
    let args = value_args(inputs);
    let n_out = p.graph().output_indexes.len();
    let mut bufs = vec![vec![0u8; 1 << 16]; n_out];
    let shapes = {
        let mut outs: Vec<&mut [u8]> = bufs.iter_mut().map(|b| &mut b[..]).collect();
        p.execute(&[], &args, &mut outs)?
    };
    Ok(shapes
        .into_iter()
        .zip(bufs)
        .enumerate()
        .map(|(k, (s, mut b))| {
            let oi = p.graph().output_indexes[k] as usize;
            let sz = p.graph().operands[oi].ty.element_size();
            let n: usize = s.dimensions.iter().map(|&d| d as usize).product();
            b.truncate(n * sz);
            (b, s.dimensions)
        })
        .collect())
}

/// Runs `g` on byte inputs (model dims): output 0's bytes and shape.
pub(crate) fn run1(g: Graph, inputs: &[Vec<u8>]) -> (Vec<u8>, Vec<u32>) {
    run_outputs(g, inputs).expect("executes").swap_remove(0)
}

/// The message of the InvalidArgument execution error of `g` on byte inputs (model dims).
pub(crate) fn exec_error(g: Graph, inputs: &[Vec<u8>]) -> String {
    exec_message(run_outputs(g, inputs))
}

/// The message of an InvalidArgument execution error `r`.
pub(crate) fn exec_message(r: Result<Outs, ExecError>) -> String {
    match r {
        Err(ExecError::InvalidArgument(m)) => m,
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

/// A constant 8-bit operand of type `ty` holding `v` (stored as bytes), quantized with
/// `scale` and `zp`.
pub(crate) fn q8c(b: &mut B, ty: OperandType, dims: &[u32], v: &[i32], scale: f32, zp: i32) -> u32 {
    let bytes = v.iter().map(|&x| x as u8).collect();
    let i = b.konst(ty, dims, bytes);
    b.q(i, scale, zp)
}

/// Little-endian bytes of `v` as elements of the float type `ty` (FLOAT16 for
/// TENSOR_FLOAT16 and FLOAT16, FLOAT32 otherwise).
pub(crate) fn float_bytes(ty: OperandType, v: &[f32]) -> Vec<u8> {
    if ty == T::TensorFloat16 || ty == T::Float16 {
        f16_bytes(v)
    } else {
        fb(v)
    }
}

/// Elements of `b` of the float tensor type `ty` (TENSOR_FLOAT16 or FLOAT32), as f32.
pub(crate) fn float_vals(ty: OperandType, b: &[u8]) -> Vec<f32> {
    if ty == T::TensorFloat16 {
        f16_vals(b)
    } else {
        bf(b)
    }
}

impl B {
    /// A SUBGRAPH operand naming referenced graph `index` of the root (IF and WHILE inputs).
    pub(crate) fn subgraph(&mut self, index: u32) -> u32 {
        self.add(T::Subgraph, &[], Lifetime::Subgraph { index })
    }
}
