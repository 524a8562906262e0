//! Test helpers for the layers below the device model: client memory as memfds, BOs over it,
//! and a small program. Imports only what `program` and `engine` sit on.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use nnaccel_uapi::abi::BO_ACCESS_MASK;
use nnaccel_uapi::program::{Location, Operand, Operation, Program};
use nnaccel_uapi::sys;
use rustix::fs::MemfdFlags;

use crate::bo::Bo;
use crate::shared::Stats;

const TENSOR_FLOAT32: i32 = 3;
const INT32: i32 = 1;
const ADD: i32 = 0;

/// Client memory: a memfd of `size` bytes. `sealable: false` makes one that refuses seals, so
/// its BO is not size-pinned and is reached through the file rather than the mapping.
pub(crate) fn client_memory(size: u64, sealable: bool) -> OwnedFd {
    let flags = if sealable {
        MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING
    } else {
        MemfdFlags::CLOEXEC
    };
    let fd = rustix::fs::memfd_create(c"nnaccel-test", flags).unwrap();
    rustix::fs::ftruncate(&fd, size).unwrap();
    fd
}

/// A read-write BO over all of `fd` (a duplicate of it: the test keeps writing through `fd`).
pub fn import(stats: &Arc<Stats>, fd: &OwnedFd) -> Arc<Bo> {
    let size = sys::fd_size(fd.as_fd()).unwrap();
    let dup = fd.try_clone().unwrap();
    Arc::new(Bo::import(stats, dup, 0, size, BO_ACCESS_MASK).unwrap())
}

/// Writes `data` at `offset` of `fd`, as a client would.
pub(crate) fn client_write(fd: &OwnedFd, offset: u64, data: &[u8]) {
    sys::pwrite_all(fd.as_fd(), offset, data).unwrap();
}

/// Reads `len` bytes at `offset` of `fd`, as a client would.
pub(crate) fn client_read(fd: &OwnedFd, offset: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0; len];
    sys::pread_exact(fd.as_fd(), offset, &mut buf).unwrap();
    buf
}

/// Little-endian bytes of f32 values.
pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Values of little-endian f32 bytes.
pub fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn f32x4(location: Location) -> Operand {
    Operand {
        operand_type: TENSOR_FLOAT32,
        dims: vec![4],
        scale: 0.0,
        zero_point: 0,
        location,
        channel_quant: None,
    }
}

/// `out = a + b` over 4 floats, each of `a` and `b` an input or a constant at `location`.
pub fn add_program(a: Location, b: Location, bo_refs: Vec<u32>) -> Vec<u8> {
    let inputs = [(0, &a), (1, &b)]
        .into_iter()
        .filter(|(_, l)| **l == Location::Input)
        .map(|(i, _)| i)
        .collect();
    // FUSED_NONE, an INT32 scalar in the program's constants.
    let activation = Operand {
        operand_type: INT32,
        dims: vec![],
        ..f32x4(Location::Constant {
            offset: 0,
            length: 4,
        })
    };
    Program {
        operands: vec![f32x4(a), f32x4(b), activation, f32x4(Location::Output)],
        operations: vec![Operation {
            operation_type: ADD,
            inputs: vec![0, 1, 2],
            outputs: vec![3],
        }],
        inputs,
        outputs: vec![3],
        bo_refs,
        constants: 0i32.to_le_bytes().to_vec(),
        relax_f32_to_f16: false,
    }
    .encode()
    .unwrap()
}
