//! Building a request in one shared memory pool, executing it, and reading the outputs back.

use std::os::fd::AsFd;
use std::sync::Arc;

use nnaccel_hal::{
    DataLocation, ErrorStatus, ExecutionPreference, ExecutionResult, HalDevice, HalPreparedModel,
    MeasureTiming, Memory, MemoryKind, MemoryPool, Model, OperandType, Priority, Request,
    RequestArgument,
};
use nnaccel_protocol::modelfile::InputValue;
use nnaccel_uapi::sys::{Mapping, memfd_create};

use crate::CliError;

/// Alignment of each argument in the request pool.
const ARG_ALIGN: u64 = 64;

/// Largest request pool nnaccelctl builds (inputs and output buffers together), in bytes:
/// 256 MiB. Sizes come from the model's dimensions, which a model file can make as large as it
/// likes; they are computed without overflow and checked against this bound before anything
/// is allocated, so a model with huge shapes is a clear error, never an allocation abort.
pub const MAX_REQUEST_BYTES: u64 = 256 << 20;

/// Buffer size for an output whose model dimensions leave extents unknown; an execution that
/// reports OUTPUT_INSUFFICIENT_SIZE is retried once with the sizes it asked for.
const UNKNOWN_OUTPUT_BYTES: u64 = 64 << 10;

/// Bytes of an operand of `ty` with `dims`, if every extent is known; saturates at
/// `u64::MAX` (so a product that overflows is simply "too large").
pub fn known_size(ty: OperandType, dims: &[u32]) -> Option<u64> {
    if ty.is_scalar() {
        return Some(ty.element_size() as u64);
    }
    if dims.is_empty() || dims.contains(&0) {
        return None;
    }
    Some(dims.iter().fold(ty.element_size() as u64, |n, &d| {
        n.saturating_mul(u64::from(d))
    }))
}

/// The error for a request part of `bytes` that does not fit [`MAX_REQUEST_BYTES`].
pub fn too_large(what: &str, bytes: u64) -> CliError {
    let bytes = if bytes == u64::MAX {
        "more than 2^64 bytes".to_string()
    } else {
        format!("{bytes} bytes")
    };
    CliError(format!(
        "{what} needs {bytes}: more than nnaccelctl's limit of {MAX_REQUEST_BYTES} bytes \
         (256 MiB) for one request"
    ))
}

/// Offsets of the arguments in the request pool, bounded by [`MAX_REQUEST_BYTES`].
#[derive(Debug, Default)]
struct Layout {
    end: u64,
}

impl Layout {
    /// Places `len` bytes; `what` names them in the error.
    fn place(&mut self, len: u64, what: impl FnOnce() -> String) -> Result<u64, CliError> {
        let offset = self.end.next_multiple_of(ARG_ALIGN);
        let end = offset.saturating_add(len);
        if end > MAX_REQUEST_BYTES {
            return Err(too_large(&what(), len));
        }
        self.end = end;
        Ok(offset)
    }
}

/// Checks, before anything is prepared or allocated, that the request for `model` with
/// `inputs` (outputs sized from the model's dimensions) fits [`MAX_REQUEST_BYTES`].
pub fn check_request_fits(model: &Model, inputs: &[InputValue]) -> Result<(), CliError> {
    let mut layout = Layout::default();
    for (k, input) in inputs.iter().enumerate().filter(|(_, i)| !i.has_no_value) {
        layout.place(input.bytes.len() as u64, || format!("input {k}"))?;
    }
    for (k, &idx) in model.output_indexes.iter().enumerate() {
        if let Some(o) = model.operands.get(idx as usize) {
            let len = known_size(o.operand_type, &o.dimensions).unwrap_or(UNKNOWN_OUTPUT_BYTES);
            layout.place(len, || {
                format!(
                    "output {k} (operand {idx}, {} {:?})",
                    o.operand_type, o.dimensions
                )
            })?;
        }
    }
    Ok(())
}

/// A request whose arguments all live in one memfd, with a mapping of it.
#[derive(Debug)]
pub struct PooledRequest {
    /// The request (pool 0 is the memfd).
    pub request: Request,
    map: Mapping,
    /// Per output: (offset, capacity in bytes).
    outputs: Vec<(u64, u64)>,
    /// Per input: (offset, length in bytes), None for an omitted one.
    inputs: Vec<Option<(u64, u64)>>,
}

/// One output read back.
#[derive(Debug, Clone)]
pub struct OutputData {
    /// Its operand type.
    pub ty: OperandType,
    /// Scale and zero point of its operand.
    pub scale: f32,
    /// Zero point.
    pub zero_point: i32,
    /// Dimensions the driver reported.
    pub dimensions: Vec<u32>,
    /// Whether the buffer was large enough.
    pub is_sufficient: bool,
    /// The bytes (empty unless the execution succeeded).
    pub bytes: Vec<u8>,
}

impl PooledRequest {
    /// Lays out `inputs` and the model's outputs (with `capacities` overriding the output
    /// buffer sizes) in one memfd and writes the inputs.
    pub fn new(
        model: &Model,
        inputs: &[InputValue],
        capacities: Option<&[u64]>,
    ) -> Result<Self, CliError> {
        let mut layout = Layout::default();
        let mut in_args = Vec::with_capacity(inputs.len());
        let mut in_offsets = Vec::with_capacity(inputs.len());
        for (k, input) in inputs.iter().enumerate() {
            if input.has_no_value {
                in_args.push(RequestArgument {
                    has_no_value: true,
                    location: DataLocation::default(),
                    dimensions: Vec::new(),
                });
                in_offsets.push(None);
                continue;
            }
            let len = input.bytes.len() as u64;
            let offset = layout.place(len, || format!("input {k}"))?;
            in_offsets.push(Some((offset, len)));
            in_args.push(RequestArgument {
                has_no_value: false,
                location: location(offset, len)?,
                dimensions: input.dimensions.clone(),
            });
        }
        let mut outputs = Vec::with_capacity(model.output_indexes.len());
        let mut out_args = Vec::with_capacity(model.output_indexes.len());
        for (k, &idx) in model.output_indexes.iter().enumerate() {
            let operand = model.operands.get(idx as usize);
            let capacity = match capacities.and_then(|c| c.get(k)) {
                Some(&c) => c,
                None => operand
                    .and_then(|o| known_size(o.operand_type, &o.dimensions))
                    .unwrap_or(UNKNOWN_OUTPUT_BYTES),
            };
            let offset = layout.place(capacity, || match operand {
                Some(o) => format!(
                    "output {k} (operand {idx}, {} {:?})",
                    o.operand_type, o.dimensions
                ),
                None => format!("output {k}"),
            })?;
            outputs.push((offset, capacity));
            out_args.push(RequestArgument {
                has_no_value: false,
                location: location(offset, capacity)?,
                dimensions: Vec::new(),
            });
        }
        // At most MAX_REQUEST_BYTES (checked by `place`), which fits usize.
        let size = usize::try_from(layout.end.max(1).next_multiple_of(4096))
            .map_err(|_| too_large("the request", layout.end))?;
        let fd = memfd_create(c"nnaccelctl-request", size as u64)
            .map_err(|e| CliError(format!("cannot create the request's memory pool: {e}")))?;
        let map = Mapping::map_shared(fd.as_fd(), 0, size, true)
            .map_err(|e| CliError(format!("cannot map the request's memory pool: {e}")))?;
        for (input, place) in inputs.iter().zip(&in_offsets) {
            if let Some((offset, _)) = place {
                map.write_at(*offset as usize, &input.bytes)?;
            }
        }
        let request = Request {
            inputs: in_args,
            outputs: out_args,
            pools: vec![MemoryPool::Memory(Memory {
                kind: MemoryKind::Ashmem,
                fd: Arc::new(fd),
                size: size as u64,
            })],
        };
        Ok(Self {
            request,
            map,
            outputs,
            inputs: in_offsets,
        })
    }

    /// Copies what the last execution wrote to output `output` into input `input` (a state
    /// variable's new value becomes the next execution's): the input's length in bytes, which
    /// the output buffer must hold.
    pub fn carry(&self, output: usize, input: usize) -> Result<(), CliError> {
        let (Some(&(from, capacity)), Some(&Some((to, len)))) =
            (self.outputs.get(output), self.inputs.get(input))
        else {
            return Err(CliError(format!(
                "state: no output {output} or input {input} in the request"
            )));
        };
        if capacity < len {
            return Err(CliError(format!(
                "state: output {output} holds {capacity} bytes, input {input} needs {len}"
            )));
        }
        // At most the input's length, itself within MAX_REQUEST_BYTES.
        let mut bytes = vec![0; len as usize];
        self.map.read_at(from as usize, &mut bytes)?;
        self.map.write_at(to as usize, &bytes)?;
        Ok(())
    }

    /// Reads the outputs back per the shapes in `result` (bytes only on success).
    pub fn outputs(&self, model: &Model, result: &ExecutionResult) -> Vec<OutputData> {
        result
            .output_shapes
            .iter()
            .enumerate()
            .map(|(k, shape)| {
                let operand = model
                    .output_indexes
                    .get(k)
                    .and_then(|&i| model.operands.get(i as usize));
                let ty = operand.map_or(OperandType::TensorFloat32, |o| o.operand_type);
                let mut bytes = Vec::new();
                if result.status == ErrorStatus::None {
                    if let Some(&(offset, capacity)) = self.outputs.get(k) {
                        // At most the capacity, itself within MAX_REQUEST_BYTES.
                        let len = known_size(ty, &shape.dimensions).unwrap_or(0).min(capacity);
                        bytes = vec![0; len as usize];
                        if self.map.read_at(offset as usize, &mut bytes).is_err() {
                            bytes.clear();
                        }
                    }
                }
                OutputData {
                    ty,
                    scale: operand.map_or(0.0, |o| o.scale),
                    zero_point: operand.map_or(0, |o| o.zero_point),
                    dimensions: shape.dimensions.clone(),
                    is_sufficient: shape.is_sufficient,
                    bytes,
                }
            })
            .collect()
    }
}

fn location(offset: u64, len: u64) -> Result<DataLocation, CliError> {
    let too_big = || too_large("the request", offset.saturating_add(len));
    Ok(DataLocation {
        pool_index: 0,
        offset: u32::try_from(offset).map_err(|_| too_big())?,
        length: u32::try_from(len).map_err(|_| too_big())?,
        padding: 0,
    })
}

/// Prepares `model` for fast single answers.
pub fn prepare(
    driver: &dyn HalDevice,
    model: &Model,
) -> Result<Arc<dyn HalPreparedModel>, ErrorStatus> {
    driver.prepare_model(
        model,
        ExecutionPreference::FastSingleAnswer,
        Priority::Medium,
        None,
    )
}

/// A finished run: the result (after a possible retry with larger outputs) and the outputs.
#[derive(Debug)]
pub struct RunResult {
    /// The execution's result.
    pub result: ExecutionResult,
    /// The outputs read back.
    pub outputs: Vec<OutputData>,
}

/// Executes once; on OUTPUT_INSUFFICIENT_SIZE with known needed shapes, once more with
/// buffers of those sizes.
pub fn execute(
    prepared: &dyn HalPreparedModel,
    model: &Model,
    inputs: &[InputValue],
    measure: MeasureTiming,
) -> Result<RunResult, CliError> {
    let mut req = PooledRequest::new(model, inputs, None)?;
    let mut result = prepared.execute_synchronously(&req.request, measure, None);
    if result.status == ErrorStatus::OutputInsufficientSize {
        let needed: Option<Vec<u64>> = result
            .output_shapes
            .iter()
            .zip(&model.output_indexes)
            .map(|(shape, &idx)| {
                let ty = model.operands.get(idx as usize)?.operand_type;
                known_size(ty, &shape.dimensions)
            })
            .collect();
        if let Some(needed) = needed.filter(|n| n.len() == model.output_indexes.len()) {
            req = PooledRequest::new(model, inputs, Some(&needed))?;
            result = prepared.execute_synchronously(&req.request, measure, None);
        }
    }
    let outputs = req.outputs(model, &result);
    Ok(RunResult { result, outputs })
}

#[cfg(test)]
mod tests {
    use super::*;
    use nnaccel_hal::{Backend, Driver};
    use nnaccel_protocol::modelfile;

    fn f32s(bytes: &[u8]) -> Vec<f32> {
        bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    #[test]
    fn carry_feeds_an_output_into_an_input_for_the_next_execution() {
        // examples/add.json: out = in + [1, 2, 3, 4].
        let text = include_str!("../../../examples/add.json");
        let model = modelfile::parse_model(text).map(|l| l.model);
        let model = model.unwrap_or_else(|e| panic!("{e}"));
        let input = InputValue {
            bytes: [1.0f32, 2.0, 3.0, 4.0]
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect(),
            element_count: 4,
            dimensions: Vec::new(),
            has_no_value: false,
        };
        let driver = Driver::new(Backend::CpuOnly);
        let prepared = prepare(&driver, &model).unwrap_or_else(|s| panic!("{}", s.name()));
        let req = PooledRequest::new(&model, &[input], None).unwrap_or_else(|e| panic!("{}", e.0));
        let run = |req: &PooledRequest| {
            let result = prepared.execute_synchronously(&req.request, MeasureTiming::No, None);
            assert_eq!(result.status, ErrorStatus::None);
            f32s(&req.outputs(&model, &result)[0].bytes)
        };
        assert_eq!(run(&req), [2.0, 4.0, 6.0, 8.0]);
        req.carry(0, 0).unwrap_or_else(|e| panic!("{}", e.0));
        assert_eq!(run(&req), [3.0, 6.0, 9.0, 12.0]);
        req.carry(0, 0).unwrap_or_else(|e| panic!("{}", e.0));
        assert_eq!(run(&req), [4.0, 8.0, 12.0, 16.0]);
        // Positions that are not in the request are an error, not a panic.
        assert!(req.carry(1, 0).is_err());
        assert!(req.carry(0, 1).is_err());
    }
}
