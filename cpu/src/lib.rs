//! nnaccel CPU executor: NN HAL (1.0–1.3) operation kernels and a graph interpreter.
//!
//! A [`Graph`] is validated ([`Graph::validate`]) and prepared ([`PreparedGraph::new`]) once,
//! then executed many times ([`PreparedGraph::execute`]) on little-endian byte buffers. The
//! executor performs no I/O and never panics on bad request data: it returns
//! [`ExecError::InvalidArgument`] instead.
//!
//! Implemented operations and types are listed by [`supported_operation_types`];
//! [`Graph::is_operation_supported`] answers for one operation as written and
//! [`Graph::unsupported_reason`] says why not.
//!
//! Notes on semantics:
//! - TENSOR_FLOAT16 / FLOAT16 values are widened to f32 on input and rounded back (nearest
//!   even) on output; intermediate results are computed in f32.
//! - 8-bit quantized CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED, ADD, SUB, MUL, pooling use the
//!   HAL's integer requantization (gemmlowp fixed-point multiplier, rounding and saturation);
//!   LOGISTIC, TANH, SOFTMAX, L2_NORMALIZATION, MEAN and RESIZE_BILINEAR on 8-bit tensors are
//!   computed in float and quantized with round-half-away-from-zero (may differ from the
//!   reference fixed-point kernels by one step).
//! - FULLY_CONNECTED and CONV_2D run on a packed SIMD GEMM (1×1 stride-1 unpadded convolutions
//!   directly, others through im2col in cache-sized blocks; constant weights are packed once
//!   when the graph is prepared, those in constant pools when the pools are given to
//!   [`PreparedGraph::with_pools`]; batches of at most 4 rows use dot products);
//!   DEPTHWISE_CONV_2D vectorizes over channels. Large layers use up to [`max_threads`]
//!   threads (at most [`MAX_THREADS`]); small ones stay on the calling thread. The count comes
//!   from, first to last: [`set_max_threads`] (which `nnaccelctl --threads` and the service's
//!   `threads` setting call), the `NNACCEL_CPU_THREADS` environment variable, the number of
//!   CPUs available to the process.
//! - Layout NCHW (the trailing layout BOOL) is handled by transposing to NHWC and back.
//! - IF and WHILE run the graphs of `Graph::referenced` (details in the `control_flow` module):
//!   a WHILE that loops longer than the execution's loop timeout ([`DEFAULT_LOOP_TIMEOUT`] 2 s,
//!   at most [`MAX_LOOP_TIMEOUT`] 15 s, set with [`PreparedGraph::execute_with_loop_timeout`])
//!   fails with [`ExecError::LoopTimeout`]; subgraph references may not recurse and nest at
//!   most [`MAX_NESTING_DEPTH`] deep; outputs and loop state of unknown dimensions take the
//!   shapes the subgraphs produce, which may change from one iteration to the next.

mod cache_aligned;
mod check;
mod control_flow;
pub mod coverage;
mod error;
mod exec;
mod model;
mod ops;
mod order;
mod packed;
mod par;
mod tensor;
mod validate;

pub use cache_aligned::{ALIGNED_FROM, CACHE_LINE, CacheAligned};
pub use control_flow::{DEFAULT_LOOP_TIMEOUT, MAX_LOOP_TIMEOUT, MAX_NESTING_DEPTH};
pub use error::{ExecError, GraphError, OutputShape};
pub use exec::{InputArg, PreparedGraph};
pub use model::{ChannelQuant, Graph, Lifetime, Operand, OperandType, Operation, OperationType};
/// The packed float GEMM, for `cpu/benches/gemm.rs` only (not a stable API).
#[doc(hidden)]
pub use ops::PackedGemm;
pub use order::execution_order;
pub use packed::packings_on_this_thread;
/// The worker pool's split, for `cpu/benches/pool.rs` only (not a stable API).
#[doc(hidden)]
pub use par::for_each_part;
pub use par::{MAX_THREADS, max_threads, set_max_threads};
pub use tensor::{f16_to_f32, f32_to_f16};
pub use validate::supported_operation_types;

/// Whether a relaxed model's (`relax_float32_to_float16`) float FULLY_CONNECTED and CONV_2D
/// layers compute in float16 on this CPU (aarch64 with FEAT_FP16); else they run in float32,
/// as any other model's.
pub fn relaxed_runs_in_float16() -> bool {
    ops::half_kernel(true).is_some()
}

/// The unit tests run under the allocator the project's programs declare.
#[cfg(test)]
#[global_allocator]
static ALLOCATOR: CacheAligned = CacheAligned;

#[cfg(test)]
mod control_flow_tests;
#[cfg(test)]
mod in_place_tests;
#[cfg(test)]
mod memory_plan_tests;
#[cfg(test)]
mod packed_tests;
#[cfg(test)]
mod test_support;
#[cfg(test)]
mod tests;
