//! PROGRAM_CREATE: decode an untrusted program, resolve its BO references, turn it into a graph
//! for the CPU executor and validate it. Nothing in the program is trusted.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use nnaccel_cpu::{
    ChannelQuant, Graph, Lifetime, Operand, OperandType, Operation, OperationType, PreparedGraph,
};
use nnaccel_uapi::abi::BO_ACCESS_READ;
use nnaccel_uapi::program::{Location, Program};
use rustix::io::Errno;

use crate::bo::Bo;
use crate::shared::Stats;

/// One program argument as a job must bind it.
#[derive(Debug, Clone, Copy)]
pub struct ArgSpec {
    /// Exact byte size of the tensor.
    pub bytes: u64,
    /// Element size: binding offsets must be a multiple of it.
    pub align: u64,
}

/// A validated, loaded program.
#[derive(Debug)]
pub struct LoadedProgram {
    /// The graph, ready to run.
    pub graph: PreparedGraph,
    /// BOs that constant operands live in (kept alive by the program).
    pub bo_refs: Vec<Arc<Bo>>,
    /// Inputs, in binding order.
    pub inputs: Vec<ArgSpec>,
    /// Outputs, in binding order (after the inputs).
    pub outputs: Vec<ArgSpec>,
    stats: Arc<Stats>,
}

impl LoadedProgram {
    /// Decodes and validates `bytes`. `lookup_bo` resolves the program's BO table in the
    /// creating file's handle namespace.
    pub fn load(
        stats: &Arc<Stats>,
        bytes: &[u8],
        lookup_bo: impl Fn(u32) -> Result<Arc<Bo>, Errno>,
    ) -> Result<Self, Errno> {
        let program = Program::decode(bytes).map_err(|e| {
            tracing::debug!("PROGRAM_CREATE: malformed program: {e}");
            Errno::INVAL
        })?;
        let bo_refs = program
            .bo_refs
            .iter()
            .map(|h| lookup_bo(*h))
            .collect::<Result<Vec<_>, _>>()?;
        for (i, op) in program.operands.iter().enumerate() {
            if let Location::BoRef {
                slot,
                offset,
                length,
            } = op.location
            {
                let bo = &bo_refs[slot as usize];
                if offset.checked_add(length).is_none_or(|end| end > bo.size) {
                    tracing::debug!("PROGRAM_CREATE: operand {i} reaches past its BO");
                    return Err(Errno::INVAL);
                }
                if bo.access & BO_ACCESS_READ == 0 {
                    return Err(Errno::ACCESS);
                }
            }
        }
        let graph = to_graph(&program)?;
        let spec = |idx: &u32| -> Result<ArgSpec, Errno> {
            let op = &graph.operands[*idx as usize];
            // The device runs fixed shapes only; the HAL falls back to the CPU for the rest.
            let bytes = op.byte_size().ok_or(Errno::OPNOTSUPP)?;
            Ok(ArgSpec {
                bytes: bytes as u64,
                align: op.ty.element_size() as u64,
            })
        };
        let inputs = program
            .inputs
            .iter()
            .map(spec)
            .collect::<Result<Vec<_>, _>>()?;
        let outputs = program
            .outputs
            .iter()
            .map(spec)
            .collect::<Result<Vec<_>, _>>()?;
        graph.validate().map_err(|e| {
            tracing::debug!("PROGRAM_CREATE: invalid graph: {e}");
            Errno::INVAL
        })?;
        if let Some(i) = (0..graph.operations.len()).find(|i| !graph.is_operation_supported(*i)) {
            tracing::debug!(
                "PROGRAM_CREATE: operation {i} ({:?}) not supported",
                graph.operations[i].op
            );
            return Err(Errno::OPNOTSUPP);
        }
        let graph = PreparedGraph::new(graph).map_err(|e| {
            tracing::debug!("PROGRAM_CREATE: cannot prepare: {e}");
            Errno::INVAL
        })?;
        stats.live_programs.fetch_add(1, Ordering::SeqCst);
        Ok(Self {
            graph,
            bo_refs,
            inputs,
            outputs,
            stats: stats.clone(),
        })
    }

    /// Number of bindings a job must carry.
    pub fn num_args(&self) -> usize {
        self.inputs.len() + self.outputs.len()
    }
}

impl Drop for LoadedProgram {
    fn drop(&mut self) {
        self.stats.live_programs.fetch_sub(1, Ordering::SeqCst);
    }
}

fn to_graph(p: &Program) -> Result<Graph, Errno> {
    let mut operands = Vec::with_capacity(p.operands.len());
    for (i, op) in p.operands.iter().enumerate() {
        let ty = OperandType::from_code(op.operand_type).ok_or_else(|| {
            tracing::debug!(
                "PROGRAM_CREATE: operand {i}: unknown type code {}",
                op.operand_type
            );
            Errno::INVAL
        })?;
        let usize_of = |v: u64| usize::try_from(v).map_err(|_| Errno::INVAL);
        let lifetime = match op.location {
            Location::Temporary => Lifetime::TemporaryVariable,
            Location::Input => Lifetime::SubgraphInput,
            Location::Output => Lifetime::SubgraphOutput,
            Location::NoValue => Lifetime::NoValue,
            Location::Constant { offset, length } => Lifetime::ConstantCopy {
                offset: usize_of(offset)?,
                length: usize_of(length)?,
            },
            Location::BoRef {
                slot,
                offset,
                length,
            } => Lifetime::ConstantReference {
                pool: slot,
                offset: usize_of(offset)?,
                length: usize_of(length)?,
            },
        };
        operands.push(Operand {
            ty,
            dimensions: op.dims.clone(),
            scale: op.scale,
            zero_point: op.zero_point,
            channel_quant: op.channel_quant.as_ref().map(|(dim, scales)| ChannelQuant {
                channel_dim: *dim,
                scales: scales.clone(),
            }),
            lifetime,
        });
    }
    let mut operations = Vec::with_capacity(p.operations.len());
    for (i, op) in p.operations.iter().enumerate() {
        let kind = OperationType::from_code(op.operation_type).ok_or_else(|| {
            tracing::debug!(
                "PROGRAM_CREATE: operation {i}: unknown type code {}",
                op.operation_type
            );
            Errno::INVAL
        })?;
        operations.push(Operation {
            op: kind,
            inputs: op.inputs.clone(),
            outputs: op.outputs.clone(),
        });
    }
    Ok(Graph {
        operands,
        operations,
        input_indexes: p.inputs.clone(),
        output_indexes: p.outputs.clone(),
        operand_values: p.constants.clone(),
        relax_float32_to_float16: p.relax_f32_to_f16,
    })
}
