//! A graph built operand by operand, shared by the benches that time one-operation graphs
//! (`gemm.rs`, `qconv.rs`; included with `#[path]`, since benches are separate crates).

use nnaccel_cpu::{Graph, Lifetime, Operand, OperandType as T};

/// Appends operands (and constant bytes) to a graph.
pub struct Builder(pub Graph);

#[allow(dead_code)] // each bench uses its own subset
impl Builder {
    /// A new operand; its index.
    pub fn add(&mut self, ty: T, dims: &[u32], lifetime: Lifetime) -> u32 {
        self.0
            .operands
            .push(Operand::new(ty, dims.to_vec(), lifetime));
        (self.0.operands.len() - 1) as u32
    }

    /// A CONSTANT_COPY operand holding `bytes`.
    pub fn konst(&mut self, ty: T, dims: &[u32], bytes: Vec<u8>) -> u32 {
        let offset = self.0.operand_values.len();
        let length = bytes.len();
        self.0.operand_values.extend(bytes);
        self.add(ty, dims, Lifetime::ConstantCopy { offset, length })
    }

    /// An INT32 scalar constant.
    pub fn int(&mut self, v: i32) -> u32 {
        self.konst(T::Int32, &[], v.to_le_bytes().to_vec())
    }

    /// Sets operand `i`'s scale and zero point.
    pub fn quant(&mut self, i: u32, scale: f32, zp: i32) {
        let o = &mut self.0.operands[i as usize];
        o.scale = scale;
        o.zero_point = zp;
    }
}
