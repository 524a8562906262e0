//! Conversion of a HAL [`Model`](crate::Model) into the CPU executor's
//! [`Graph`](nnaccel_cpu::Graph).
//!
//! The conversion is purely structural and never fails: it does not validate anything. Call
//! [`crate::validate::validate_model`] first; only a valid model converts into a graph
//! whose locations are meaningful.

use nnaccel_cpu::{ChannelQuant, Graph, Lifetime, Operand, Operation};

use crate::{Model, OperandLifetime};

/// The executor lifetime of a HAL operand lifetime and location.
///
/// `CONSTANT_COPY` becomes [`Lifetime::ConstantCopy`] (offset/length into `operand_values`),
/// `CONSTANT_REFERENCE` becomes [`Lifetime::ConstantReference`] with `pool` = the location's
/// pool index. `SUBGRAPH` has no executor equivalent (control flow is not supported; validation
/// rejects it) and maps to [`Lifetime::NoValue`].
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
        OperandLifetime::NoValue | OperandLifetime::Subgraph => Lifetime::NoValue,
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

/// HAL model -> executor graph. CONSTANT_COPY -> `Lifetime::ConstantCopy{offset,length}`;
/// CONSTANT_REFERENCE -> `Lifetime::ConstantReference{pool: location.pool_index, offset,
/// length}`; extra_params -> [`ChannelQuant`]. Does not validate (call `validate_model` first).
///
/// The model's pools are not part of the graph: the executor receives the mapped pools at
/// execution time, indexed exactly as `model.pools`.
pub(crate) fn model_to_graph(model: &Model) -> Graph {
    Graph {
        operands: model.operands.iter().map(operand_to_graph).collect(),
        operations: model
            .operations
            .iter()
            .map(|op| Operation {
                op: op.operation_type,
                inputs: op.inputs.clone(),
                outputs: op.outputs.clone(),
            })
            .collect(),
        input_indexes: model.input_indexes.clone(),
        output_indexes: model.output_indexes.clone(),
        operand_values: model.operand_values.clone(),
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
}
