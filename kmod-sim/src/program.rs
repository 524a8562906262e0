//! PROGRAM_CREATE: decode an untrusted program, resolve its BO references, turn it into a graph
//! for the CPU executor, validate it and copy the constants it keeps in BOs. Nothing in the
//! program is trusted.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
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
    /// The graph, ready to run. Its `ConstantReference` operands name [`LoadedProgram::pools`].
    pub graph: PreparedGraph,
    /// The constant operands that lived in BOs, copied out at PROGRAM_CREATE (see
    /// [`copy_bo_constants`]): one owned buffer per distinct range.
    pools: Vec<Vec<u8>>,
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
        Self::load_without(stats, bytes, &[], lookup_bo)
    }

    /// [`LoadedProgram::load`] on a device that lacks the operation types in `lacking`
    /// (`Config::without_ops`): a valid program using one is `EOPNOTSUPP`, as for any
    /// operation the engine cannot run.
    pub fn load_without(
        stats: &Arc<Stats>,
        bytes: &[u8],
        lacking: &[OperationType],
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
        if let Some(op) = graph.operations.iter().find(|o| lacking.contains(&o.op)) {
            tracing::debug!("PROGRAM_CREATE: this device lacks {}", op.op.name());
            return Err(Errno::OPNOTSUPP);
        }
        if let Some(i) = (0..graph.operations.len()).find(|i| !graph.is_operation_supported(*i)) {
            tracing::debug!(
                "PROGRAM_CREATE: operation {i} ({:?}) not supported",
                graph.operations[i].op
            );
            return Err(Errno::OPNOTSUPP);
        }
        // Only now, with the program found valid, are constants copied out of their BOs.
        let mut graph = graph;
        let pools = copy_bo_constants(&mut graph, &program.bo_refs, &bo_refs)?;
        // With the copies at hand, the executor decodes and packs the weights in them now,
        // once, instead of on every job.
        let views: Vec<&[u8]> = pools.iter().map(Vec::as_slice).collect();
        let graph = PreparedGraph::with_pools(graph, &views).map_err(|e| {
            tracing::debug!("PROGRAM_CREATE: cannot prepare: {e}");
            Errno::INVAL
        })?;
        stats.live_programs.fetch_add(1, Ordering::SeqCst);
        Ok(Self {
            graph,
            pools,
            inputs,
            outputs,
            stats: stats.clone(),
        })
    }

    /// Number of bindings a job must carry.
    pub fn num_args(&self) -> usize {
        self.inputs.len() + self.outputs.len()
    }

    /// The constant pools the graph's `ConstantReference` operands name, for
    /// [`PreparedGraph::execute`].
    pub fn pools(&self) -> Vec<&[u8]> {
        self.pools.iter().map(Vec::as_slice).collect()
    }
}

/// Copies every constant operand that lives in a BO into owned memory, once, and points the
/// operand at its copy: pool `k` of the result, offset 0.
///
/// Why at PROGRAM_CREATE and not per job: the BOs map memory the client can write at any
/// moment, which the executor must never read in place (see `Bo::read`), so the bytes are
/// copied either way; NNAPI forbids changing a model's constants once the model is finished
/// (`ANeuralNetworksModel_setOperandValueFromMemory`: the memory must not change until every
/// execution using the model has completed), and the HAL compiles a program only from a
/// finished model, so one copy taken here is what every job would have read. A client that
/// changes the memory anyway gets the values it had at PROGRAM_CREATE, consistently, rather
/// than a mix. Copying here also takes the copy off every job, and the program no longer
/// needs its BOs: they go when their handles close.
///
/// The copy is exactly the ranges the operands name (each as long as its operand's tensor,
/// which `Graph::validate` checked), once per distinct (BO, offset, length): no more than the
/// executor itself decodes from those ranges on every job.
fn copy_bo_constants(
    graph: &mut Graph,
    handles: &[u32],
    bos: &[Arc<Bo>],
) -> Result<Vec<Vec<u8>>, Errno> {
    let mut pools: Vec<Vec<u8>> = Vec::new();
    let mut seen: HashMap<(u32, usize, usize), u32> = HashMap::new();
    for operand in &mut graph.operands {
        let Lifetime::ConstantReference {
            pool,
            offset,
            length,
        } = &mut operand.lifetime
        else {
            continue;
        };
        let slot = *pool as usize;
        let index = match seen.entry((handles[slot], *offset, *length)) {
            Entry::Occupied(e) => *e.get(),
            Entry::Vacant(e) => {
                let index = u32::try_from(pools.len()).map_err(|_| Errno::INVAL)?;
                pools.push(bos[slot].read(*offset as u64, *length)?);
                *e.insert(index)
            }
        };
        *pool = index;
        *offset = 0;
    }
    Ok(pools)
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
        // Device programs carry no subgraphs: IF and WHILE run on the CPU executor.
        referenced: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{add_program, client_memory, client_write, f32_bytes, import};

    #[test]
    fn bo_constants_are_copied_at_program_create_and_later_client_writes_do_not_reach_them() {
        let stats = Arc::default();
        let mem = client_memory(4096, true);
        client_write(&mem, 16, &f32_bytes(&[1.0, 2.0, 3.0, 4.0]));
        let bo = import(&stats, &mem);
        let at = |offset| Location::BoRef {
            slot: 0,
            offset,
            length: 16,
        };
        // Both addends name the same range: one copy serves both.
        let bytes = add_program(at(16), at(16), vec![7]);
        let p = LoadedProgram::load(&stats, &bytes, |h| {
            assert_eq!(h, 7);
            Ok(bo.clone())
        })
        .unwrap();
        client_write(&mem, 16, &f32_bytes(&[-9.0; 4]));
        assert_eq!(p.pools(), vec![f32_bytes(&[1.0, 2.0, 3.0, 4.0]).as_slice()]);
        assert_eq!(
            Arc::strong_count(&bo),
            1,
            "the program keeps no reference to its BO"
        );
    }

    #[test]
    fn weights_in_a_bo_are_packed_at_program_create_and_never_by_a_job() {
        use nnaccel_uapi::program::{Operand, Operation};
        let stats = Arc::default();
        let mem = client_memory(4096, true);
        // FULLY_CONNECTED of 5 rows of 3: weights [[1, 2, 3], [4, 5, 6]] in the BO.
        client_write(&mem, 64, &f32_bytes(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]));
        let bo = import(&stats, &mem);
        let tensor = |dims: Vec<u32>, location| Operand {
            operand_type: 3, // TENSOR_FLOAT32
            dims,
            scale: 0.0,
            zero_point: 0,
            location,
            channel_quant: None,
        };
        let bias = tensor(
            vec![2],
            Location::Constant {
                offset: 0,
                length: 8,
            },
        );
        let fuse = Operand {
            operand_type: 1, // INT32
            ..tensor(
                vec![],
                Location::Constant {
                    offset: 8,
                    length: 4,
                },
            )
        };
        let mut constants = f32_bytes(&[0.5, -1.0]);
        constants.extend_from_slice(&0i32.to_le_bytes());
        let weights = Location::BoRef {
            slot: 0,
            offset: 64,
            length: 24,
        };
        let bytes = Program {
            operands: vec![
                tensor(vec![5, 3], Location::Input),
                tensor(vec![2, 3], weights),
                bias,
                fuse,
                tensor(vec![5, 2], Location::Output),
            ],
            operations: vec![Operation {
                operation_type: 9, // FULLY_CONNECTED
                inputs: vec![0, 1, 2, 3],
                outputs: vec![4],
            }],
            inputs: vec![0],
            outputs: vec![4],
            bo_refs: vec![7],
            constants,
            relax_f32_to_f16: false,
        }
        .encode()
        .unwrap();
        let before = nnaccel_cpu::packings_on_this_thread();
        let p = LoadedProgram::load(&stats, &bytes, |_| Ok(bo.clone())).unwrap();
        assert_eq!(
            nnaccel_cpu::packings_on_this_thread() - before,
            1,
            "the BO's weights are packed at PROGRAM_CREATE"
        );
        let x = f32_bytes(&[
            1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 2.0, 0.0, -1.0,
        ]);
        let before = nnaccel_cpu::packings_on_this_thread();
        let mut out = vec![0u8; 40];
        for _ in 0..2 {
            let input = nnaccel_cpu::InputArg::Value {
                data: &x,
                dimensions: vec![],
            };
            p.graph
                .execute(&p.pools(), &[input], &mut [&mut out])
                .unwrap();
            // Worked by hand: [x·(1,2,3) + 0.5, x·(4,5,6) - 1] per row.
            assert_eq!(
                crate::test_support::f32s(&out),
                [1.5, 3.0, 2.5, 4.0, 3.5, 5.0, 6.5, 14.0, -0.5, 1.0]
            );
        }
        assert_eq!(
            nnaccel_cpu::packings_on_this_thread() - before,
            0,
            "a job packed the weights again"
        );
    }

    #[test]
    fn a_device_without_an_operation_refuses_its_programs_with_eopnotsupp() {
        let stats = Arc::default();
        let bytes = add_program(Location::Input, Location::Input, vec![]);
        let no_bo = |_| Err(Errno::NOENT);
        let refused =
            LoadedProgram::load_without(&stats, &bytes, &[OperationType::Add], no_bo).unwrap_err();
        assert_eq!(refused, Errno::OPNOTSUPP);
        // Lacking another operation leaves ADD programs alone.
        assert!(LoadedProgram::load_without(&stats, &bytes, &[OperationType::Tanh], no_bo).is_ok());
    }
}
