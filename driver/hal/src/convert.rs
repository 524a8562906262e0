//! Conversion of a HAL [`Model`](crate::Model) into the CPU executor's
//! [`Graph`](nnaccel_cpu::Graph).
//!
//! The conversion is purely structural and never fails: it does not validate anything. Call
//! [`crate::validate::validate_model`] first; only a valid model converts into a graph
//! whose locations are meaningful.

use nnaccel_cpu::{ChannelQuant, Graph, Lifetime, Operand, Operation};

use crate::{Model, OperandLifetime, Subgraph};

/// Alignment of each constant copied into a referenced subgraph's own `operand_values`.
const SUBGRAPH_VALUE_ALIGN: usize = 8;

/// The executor lifetime of a HAL operand lifetime and location.
///
/// `CONSTANT_COPY` becomes [`Lifetime::ConstantCopy`] (offset/length into `operand_values`),
/// `CONSTANT_REFERENCE` becomes [`Lifetime::ConstantReference`] with `pool` = the location's
/// pool index, `SUBGRAPH` becomes [`Lifetime::Subgraph`] with `index` = the location's offset
/// (the index into the model's `referenced`).
pub(crate) fn lifetime_to_graph(operand: &crate::Operand) -> Lifetime {
    let loc = &operand.location;
    match operand.lifetime {
        OperandLifetime::TemporaryVariable => Lifetime::TemporaryVariable,
        OperandLifetime::SubgraphInput => Lifetime::SubgraphInput,
        OperandLifetime::SubgraphOutput => Lifetime::SubgraphOutput,
        OperandLifetime::ConstantCopy => Lifetime::ConstantCopy {
            offset: loc.offset as usize,
            length: loc.length as usize,
        },
        OperandLifetime::ConstantReference => Lifetime::ConstantReference {
            pool: loc.pool_index,
            offset: loc.offset as usize,
            length: loc.length as usize,
        },
        OperandLifetime::NoValue => Lifetime::NoValue,
        OperandLifetime::Subgraph => Lifetime::Subgraph { index: loc.offset },
    }
}

/// One HAL operand as an executor operand (`extra_params` become [`ChannelQuant`]).
pub(crate) fn operand_to_graph(operand: &crate::Operand) -> Operand {
    Operand {
        ty: operand.operand_type,
        dimensions: operand.dimensions.clone(),
        scale: operand.scale,
        zero_point: operand.zero_point,
        channel_quant: operand.extra_params.as_ref().map(|p| ChannelQuant {
            channel_dim: p.channel_dim,
            scales: p.scales.clone(),
        }),
        lifetime: lifetime_to_graph(operand),
    }
}

fn operations_to_graph(operations: &[crate::Operation]) -> Vec<Operation> {
    operations
        .iter()
        .map(|op| Operation {
            op: op.operation_type,
            inputs: op.inputs.clone(),
            outputs: op.outputs.clone(),
        })
        .collect()
}

/// HAL model -> executor graph. CONSTANT_COPY -> `Lifetime::ConstantCopy{offset,length}`;
/// CONSTANT_REFERENCE -> `Lifetime::ConstantReference{pool: location.pool_index, offset,
/// length}`; SUBGRAPH -> `Lifetime::Subgraph{index: location.offset}`; extra_params ->
/// [`ChannelQuant`]; each of `model.referenced` -> one graph of the root's `referenced` (see
/// [`subgraph_to_graph`]). Does not validate (call `validate_model` first).
///
/// The model's pools are not part of the graph: the executor receives the mapped pools at
/// execution time, indexed exactly as `model.pools`.
pub(crate) fn model_to_graph(model: &Model) -> Graph {
    Graph {
        operands: model.operands.iter().map(operand_to_graph).collect(),
        operations: operations_to_graph(&model.operations),
        input_indexes: model.input_indexes.clone(),
        output_indexes: model.output_indexes.clone(),
        operand_values: model.operand_values.clone(),
        relax_float32_to_float16: model.relax_computation_float32_to_float16,
        referenced: model
            .referenced
            .iter()
            .map(|s| subgraph_to_graph(model, s))
            .collect(),
    }
}

/// One referenced subgraph as a self-contained executor graph: its own `operand_values` hold
/// just the CONSTANT_COPY bytes its operands use (copied out of the model's, each at an
/// 8-byte aligned offset, locations rebased); CONSTANT_REFERENCE stays in the model's pools;
/// `relax` is the model's; no `referenced` of its own (its SUBGRAPH operands index the
/// root's). A CONSTANT_COPY outside the model's bytes (an unvalidated model) gets an offset
/// the executor's own check refuses.
fn subgraph_to_graph(model: &Model, s: &Subgraph) -> Graph {
    let mut values = Vec::new();
    let operands = s
        .operands
        .iter()
        .map(|o| {
            let mut operand = operand_to_graph(o);
            if let Lifetime::ConstantCopy { offset, length } = operand.lifetime {
                let bytes = offset
                    .checked_add(length)
                    .and_then(|end| model.operand_values.get(offset..end));
                let offset = match bytes {
                    Some(bytes) => {
                        let at = values.len().next_multiple_of(SUBGRAPH_VALUE_ALIGN);
                        values.resize(at, 0);
                        values.extend_from_slice(bytes);
                        at
                    }
                    None => usize::MAX,
                };
                operand.lifetime = Lifetime::ConstantCopy { offset, length };
            }
            operand
        })
        .collect();
    Graph {
        operands,
        operations: operations_to_graph(&s.operations),
        input_indexes: s.input_indexes.clone(),
        output_indexes: s.output_indexes.clone(),
        operand_values: values,
        relax_float32_to_float16: model.relax_computation_float32_to_float16,
        referenced: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        DataLocation, Operand as HalOperand, OperandType, Operation as HalOperation, OperationType,
        SymmPerChannelQuantParams,
    };

    fn operand(
        ty: OperandType,
        dims: &[u32],
        lifetime: OperandLifetime,
        location: DataLocation,
    ) -> HalOperand {
        HalOperand {
            operand_type: ty,
            dimensions: dims.to_vec(),
            scale: 0.0,
            zero_point: 0,
            lifetime,
            location,
            extra_params: None,
        }
    }

    #[test]
    fn model_to_graph_maps_every_field() {
        let mut filter = operand(
            OperandType::TensorQuant8SymmPerChannel,
            &[2, 1, 1, 1],
            OperandLifetime::ConstantReference,
            DataLocation {
                pool_index: 1,
                offset: 64,
                length: 2,
                padding: 0,
            },
        );
        filter.extra_params = Some(SymmPerChannelQuantParams {
            scales: vec![0.5, 0.25],
            channel_dim: 0,
        });
        let mut input = operand(
            OperandType::TensorQuant8Asymm,
            &[1, 2, 2, 1],
            OperandLifetime::SubgraphInput,
            DataLocation::default(),
        );
        input.scale = 0.5;
        input.zero_point = 128;
        let model = Model {
            operands: vec![
                input,
                filter,
                operand(
                    OperandType::Int32,
                    &[],
                    OperandLifetime::ConstantCopy,
                    DataLocation {
                        pool_index: 0,
                        offset: 4,
                        length: 4,
                        padding: 0,
                    },
                ),
                operand(
                    OperandType::TensorFloat32,
                    &[],
                    OperandLifetime::TemporaryVariable,
                    DataLocation::default(),
                ),
                operand(
                    OperandType::TensorFloat32,
                    &[0, 2],
                    OperandLifetime::SubgraphOutput,
                    DataLocation::default(),
                ),
                operand(
                    OperandType::TensorFloat32,
                    &[],
                    OperandLifetime::NoValue,
                    DataLocation::default(),
                ),
            ],
            operations: vec![HalOperation {
                operation_type: OperationType::Relu,
                inputs: vec![3],
                outputs: vec![4],
            }],
            input_indexes: vec![0],
            output_indexes: vec![4],
            operand_values: vec![0, 0, 0, 0, 1, 0, 0, 0],
            pools: Vec::new(),
            relax_computation_float32_to_float16: true,
            referenced: Vec::new(),
        };
        let g = model_to_graph(&model);
        assert_eq!(g.operands.len(), 6);
        assert_eq!(g.operands[0].ty, OperandType::TensorQuant8Asymm);
        assert_eq!(g.operands[0].dimensions, vec![1, 2, 2, 1]);
        assert_eq!(g.operands[0].scale, 0.5);
        assert_eq!(g.operands[0].zero_point, 128);
        assert_eq!(g.operands[0].lifetime, Lifetime::SubgraphInput);
        assert_eq!(
            g.operands[1].lifetime,
            Lifetime::ConstantReference {
                pool: 1,
                offset: 64,
                length: 2
            }
        );
        assert_eq!(
            g.operands[1].channel_quant,
            Some(ChannelQuant {
                channel_dim: 0,
                scales: vec![0.5, 0.25]
            })
        );
        assert_eq!(
            g.operands[2].lifetime,
            Lifetime::ConstantCopy {
                offset: 4,
                length: 4
            }
        );
        assert_eq!(g.operands[3].lifetime, Lifetime::TemporaryVariable);
        assert_eq!(g.operands[4].lifetime, Lifetime::SubgraphOutput);
        assert_eq!(g.operands[5].lifetime, Lifetime::NoValue);
        assert_eq!(g.operations.len(), 1);
        assert_eq!(g.operations[0].op, OperationType::Relu);
        assert_eq!(g.operations[0].inputs, vec![3]);
        assert_eq!(g.operations[0].outputs, vec![4]);
        assert_eq!(g.input_indexes, vec![0]);
        assert_eq!(g.output_indexes, vec![4]);
        assert_eq!(g.operand_values, model.operand_values);
        assert!(g.relax_float32_to_float16);
    }

    #[test]
    fn referenced_subgraphs_become_self_contained_graphs() {
        let at = |offset, length| DataLocation {
            pool_index: 0,
            offset,
            length,
            padding: 0,
        };
        let scalar = |lifetime, location| operand(OperandType::Int32, &[], lifetime, location);
        // Model values: bytes 0..4 main's constant, 4..8 and 8..12 subgraph 1's, 12..14 unused.
        let operand_values: Vec<u8> = (1..=14).collect();
        let sub = |operands| Subgraph {
            operands,
            operations: Vec::new(),
            input_indexes: Vec::new(),
            output_indexes: Vec::new(),
        };
        let model = Model {
            operands: vec![
                scalar(OperandLifetime::ConstantCopy, at(0, 4)),
                HalOperand::subgraph(1),
            ],
            referenced: vec![
                sub(vec![scalar(OperandLifetime::SubgraphInput, at(0, 0))]),
                sub(vec![
                    scalar(OperandLifetime::ConstantCopy, at(8, 4)),
                    scalar(OperandLifetime::ConstantCopy, at(4, 4)),
                    HalOperand::subgraph(0),
                    scalar(OperandLifetime::ConstantCopy, at(12, 4)),
                ]),
            ],
            operand_values,
            relax_computation_float32_to_float16: true,
            ..Model::default()
        };
        let g = model_to_graph(&model);
        assert_eq!(g.operands[1].lifetime, Lifetime::Subgraph { index: 1 });
        assert_eq!(g.referenced.len(), 2);
        assert!(g.referenced[0].operand_values.is_empty());
        let s1 = &g.referenced[1];
        // Bytes 9..=12 at offset 0, then bytes 5..=8 at the next 8-byte boundary.
        assert_eq!(
            s1.operands[0].lifetime,
            Lifetime::ConstantCopy {
                offset: 0,
                length: 4
            }
        );
        assert_eq!(
            s1.operands[1].lifetime,
            Lifetime::ConstantCopy {
                offset: 8,
                length: 4
            }
        );
        assert_eq!(s1.operand_values, [9, 10, 11, 12, 0, 0, 0, 0, 5, 6, 7, 8]);
        assert_eq!(s1.operands[2].lifetime, Lifetime::Subgraph { index: 0 });
        // 12 + 4 runs past the model's 14 bytes: an offset the executor refuses.
        assert_eq!(
            s1.operands[3].lifetime,
            Lifetime::ConstantCopy {
                offset: usize::MAX,
                length: 4
            }
        );
        assert!(s1.relax_float32_to_float16);
        assert!(s1.referenced.is_empty());
    }
}
