//! GELU and COS, which NNAPI lacks, as element-wise operations (float tensors only).
//!
//! - approximate: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), exactly TFLite's formula;
//! - exact: 0.5·x·(1 + erf(x/√2)) = relu(x) − 0.5·|x|·q(|x|/√2), where
//!   q(z) = 1 − erf(z) for z ≥ 0 is Abramowitz & Stegun's 7.1.26 (absolute error below
//!   1.5e-7): q(z) = (a1·t + a2·t² + a3·t³ + a4·t⁴ + a5·t⁵)·e^(−z²), t = 1 / (1 + p·z).

use nnaccel_hal::{OperandType, OperationType};

use super::LowerError;
use super::build::{Builder, is_float, plain};
use crate::graph::Options;

type Result<T> = std::result::Result<T, LowerError>;

/// Abramowitz & Stegun 7.1.26.
const P: f32 = 0.327_591_1;
const A: [f32; 5] = [
    0.254_829_6,
    -0.284_496_72,
    1.421_413_8,
    -1.453_152,
    1.061_405_4,
];

/// Element-wise arithmetic on temporaries shaped like one operand.
struct Expr {
    like: u32,
    none: u32,
}

impl Expr {
    /// A constant of one element in `like`'s float type.
    fn c(&self, b: &mut Builder<'_>, v: f32) -> u32 {
        let ty = b.ty(self.like);
        let bytes = if ty == OperandType::TensorFloat16 {
            nnaccel_cpu::f32_to_f16(v).to_le_bytes().to_vec()
        } else {
            v.to_le_bytes().to_vec()
        };
        b.constant(plain(ty, vec![1]), bytes)
    }

    /// `op(x, y)` for ADD, SUB, MUL, DIV, into `dest` or a new temporary.
    fn bin(
        &self,
        b: &mut Builder<'_>,
        op: OperationType,
        x: u32,
        y: u32,
        dest: Option<u32>,
    ) -> u32 {
        let out = dest.unwrap_or_else(|| b.temp_same(self.like));
        b.op(op, vec![x, y, self.none], vec![out]);
        out
    }

    /// `op(x)` into a new temporary.
    fn un(&self, b: &mut Builder<'_>, op: OperationType, x: u32) -> u32 {
        let out = b.temp_same(self.like);
        b.op(op, vec![x], vec![out]);
        out
    }
}

/// GELU (`approximate` as stored).
pub(super) fn gelu(b: &mut Builder<'_>) -> Result<()> {
    let approximate = matches!(b.cur()?.options, Options::Gelu { approximate: true });
    let (x, y) = b.unary_io()?;
    if !is_float(b.ty(x)) {
        return Err(b.err("a quantized GELU"));
    }
    use OperationType::{Abs, Add, Div, Exp, Mul, Relu, Sub, Tanh};
    let none = b.int(0);
    let e = Expr { like: y, none };
    if approximate {
        let x2 = e.bin(b, Mul, x, x, None);
        let x3 = e.bin(b, Mul, x2, x, None);
        let k = e.c(b, 0.044_715);
        let kx3 = e.bin(b, Mul, x3, k, None);
        let inner = e.bin(b, Add, x, kx3, None);
        let c = e.c(b, (2.0 / std::f32::consts::PI).sqrt());
        let scaled = e.bin(b, Mul, inner, c, None);
        let th = e.un(b, Tanh, scaled);
        let one = e.c(b, 1.0);
        let u = e.bin(b, Add, th, one, None);
        let half = e.c(b, 0.5);
        let hx = e.bin(b, Mul, x, half, None);
        e.bin(b, Mul, hx, u, Some(y));
        return Ok(());
    }
    let ax = e.un(b, Abs, x);
    let r = e.c(b, std::f32::consts::FRAC_1_SQRT_2);
    let z = e.bin(b, Mul, ax, r, None);
    let p = e.c(b, P);
    let pz = e.bin(b, Mul, z, p, None);
    let one = e.c(b, 1.0);
    let d = e.bin(b, Add, pz, one, None);
    let t = e.bin(b, Div, one, d, None);
    // Horner: ((((a5·t + a4)·t + a3)·t + a2)·t + a1)·t.
    let a5 = e.c(b, A[4]);
    let mut h = e.bin(b, Mul, t, a5, None);
    for &a in A[..4].iter().rev() {
        let ak = e.c(b, a);
        let s = e.bin(b, Add, h, ak, None);
        h = e.bin(b, Mul, s, t, None);
    }
    let z2 = e.bin(b, Mul, z, z, None);
    let m1 = e.c(b, -1.0);
    let nz2 = e.bin(b, Mul, z2, m1, None);
    let ex = e.un(b, Exp, nz2);
    let q = e.bin(b, Mul, h, ex, None);
    let half = e.c(b, 0.5);
    let hax = e.bin(b, Mul, ax, half, None);
    let tail = e.bin(b, Mul, hax, q, None);
    let rx = e.un(b, Relu, x);
    e.bin(b, Sub, rx, tail, Some(y));
    Ok(())
}

/// COS: SIN(x + π/2).
pub(super) fn cos(b: &mut Builder<'_>) -> Result<()> {
    let (x, y) = b.unary_io()?;
    if !is_float(b.ty(x)) {
        return Err(b.err("a quantized COS"));
    }
    let none = b.int(0);
    let e = Expr { like: y, none };
    let quarter = e.c(b, std::f32::consts::FRAC_PI_2);
    let shifted = e.bin(b, OperationType::Add, x, quarter, None);
    b.op(OperationType::Sin, vec![shifted], vec![y]);
    Ok(())
}
