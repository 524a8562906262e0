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
        self.g.operands[i as usize].scale = scale;
        self.g.operands[i as usize].zero_point = zp;
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
    let args: Vec<InputArg<'_>> = inputs
        .iter()
        .map(|(d, dims)| InputArg::Value {
            data: d,
            dimensions: dims.clone(),
        })
        .collect();
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

pub(crate) fn close(a: &[f32], b: &[f32]) {
    assert_eq!(a.len(), b.len(), "{a:?} vs {b:?}");
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() <= 1e-4 * (1.0 + y.abs()), "{a:?} vs {b:?}");
    }
}
