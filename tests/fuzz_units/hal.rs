//! Fuzz target 2: models and requests, and the JSON model and inputs files.
//!
//! Mutated example models go through `validate_model` and `prepare_model` on a CPU-only
//! driver: an invalid model is INVALID_ARGUMENT from both, a valid one prepares or fails with a
//! status. Prepared models then run mutated requests: an invalid request is INVALID_ARGUMENT,
//! a successful execution reports one shape per output. Nothing may panic.

use nnaccel_kmod_sim::{Config, InprocFile, SimDevice};
use nnaccel_uapi::fuzz::{self, Rng};

use super::*;
use nnaccel_hal::driver::{Backend, Driver};
use nnaccel_hal::validate::{validate_model, validate_request};

/// One random structural change to `model`.
pub(crate) fn mutate_model(rng: &mut Rng, model: &mut Model) {
    let n_operands = model.operands.len();
    match rng.below(16) {
        0..=5 if n_operands > 0 => {
            let o = &mut model.operands[rng.below(n_operands)];
            match rng.below(8) {
                0 => o.operand_type = *rng.pick(OperandType::ALL),
                1 => mutate_dims(rng, &mut o.dimensions),
                2 => o.scale = edgy_f32(rng),
                3 => o.zero_point = rng.edgy_u32() as i32,
                4 => o.lifetime = *rng.pick(OperandLifetime::ALL),
                5 => mutate_location(rng, &mut o.location),
                6 => {
                    o.extra_params = match o.extra_params.take() {
                        Some(mut p) if rng.chance(1, 2) => {
                            if rng.chance(1, 2) {
                                p.channel_dim = small_or_edgy(rng);
                            } else {
                                p.scales.push(edgy_f32(rng));
                            }
                            Some(p)
                        }
                        Some(_) => None,
                        None => Some(SymmPerChannelQuantParams {
                            scales: (0..rng.below(4)).map(|_| edgy_f32(rng)).collect(),
                            channel_dim: small_or_edgy(rng),
                        }),
                    }
                }
                _ => {
                    let rank = rng.below(3);
                    o.dimensions = vec![rng.edgy_u32(); rank];
                }
            }
        }
        6..=8 if !model.operations.is_empty() => {
            let i = rng.below(model.operations.len());
            let op = &mut model.operations[i];
            match rng.below(3) {
                0 => op.operation_type = *rng.pick(OperationType::ALL),
                1 => mutate_indexes(rng, &mut op.inputs, n_operands),
                _ => mutate_indexes(rng, &mut op.outputs, n_operands),
            }
        }
        9 => mutate_indexes(rng, &mut model.input_indexes, n_operands),
        10 => mutate_indexes(rng, &mut model.output_indexes, n_operands),
        11 => {
            let len = model.operand_values.len();
            if rng.chance(1, 2) {
                model.operand_values.truncate(rng.below(len + 1));
            } else {
                let n = 1 + rng.below(16);
                model.operand_values.extend(rng.bytes(n));
            }
        }
        12 if n_operands > 0 => {
            let i = rng.below(n_operands);
            if rng.chance(1, 2) {
                model.operands.remove(i);
            } else {
                let o = model.operands[i].clone();
                model.operands.push(o);
            }
        }
        13 if !model.operations.is_empty() => {
            let i = rng.below(model.operations.len());
            match rng.below(3) {
                0 => {
                    model.operations.remove(i);
                }
                1 => {
                    let op = model.operations[i].clone();
                    model.operations.push(op);
                }
                _ => {
                    let j = rng.below(model.operations.len());
                    model.operations.swap(i, j);
                }
            }
        }
        14 => {
            model.relax_computation_float32_to_float16 = !model.relax_computation_float32_to_float16
        }
        _ => {
            if model.pools.is_empty() || rng.chance(1, 2) {
                let size = *rng.pick(&[4096u64, 8192]);
                let (memory, _map) = pool(size);
                model.pools.push(Memory {
                    size: if rng.chance(1, 2) {
                        size
                    } else {
                        rng.edgy_u64()
                    },
                    ..memory
                });
            } else {
                model.pools.pop();
            }
        }
    }
}

/// One random change to `request` (whose single seed pool is `pool`).
pub(crate) fn mutate_request(rng: &mut Rng, request: &mut Request) {
    let args = |r: &mut Request, rng: &mut Rng| -> Option<usize> {
        let n = r.inputs.len() + r.outputs.len();
        (n > 0).then(|| rng.below(n))
    };
    match rng.below(8) {
        0..=4 => {
            if let Some(i) = args(request, rng) {
                let n_in = request.inputs.len();
                let a = if i < n_in {
                    &mut request.inputs[i]
                } else {
                    &mut request.outputs[i - n_in]
                };
                match rng.below(3) {
                    0 => mutate_location(rng, &mut a.location),
                    1 => mutate_dims(rng, &mut a.dimensions),
                    _ => a.has_no_value = !a.has_no_value,
                }
            }
        }
        5 => {
            let list = if rng.chance(1, 2) {
                &mut request.inputs
            } else {
                &mut request.outputs
            };
            if list.is_empty() || rng.chance(1, 2) {
                let a = list.first().cloned().unwrap_or_default();
                list.push(a);
            } else {
                list.pop();
            }
        }
        6 => request.pools.push(MemoryPool::Token(rng.edgy_u32())),
        _ => {
            if request.pools.len() > 1 || rng.chance(1, 4) {
                request.pools.pop();
            } else {
                let (memory, _map) = pool(4096);
                request.pools.push(MemoryPool::Memory(memory));
            }
        }
    }
}

/// Bytes of every operand whose size is known: executions only run below a bound, so a
/// mutated extent cannot make the CPU executor allocate gigabytes.
fn known_bytes(model: &Model) -> u64 {
    model
        .operands
        .iter()
        .map(|o| byte_size(o.operand_type, &o.dimensions).unwrap_or(u64::MAX / 1024))
        .fold(0u64, u64::saturating_add)
}

const MAX_EXECUTED_BYTES: u64 = 16 << 20;

/// A driver over a fresh in-process device (the CPU executor as its fallback), and a probe
/// file on the same device for its counters.
fn device_driver() -> (Driver, InprocFile) {
    let sim = SimDevice::new(Config::default()).unwrap();
    let probe = InprocFile::open(&sim);
    let dev: Arc<dyn nnaccel_uapi::Device> = Arc::new(InprocFile::open(&sim));
    (Driver::new(Backend::Device(dev)), probe)
}

#[test]
fn mutated_models_and_requests_are_invalid_argument_or_run_never_panic() {
    let seeds = seeds();
    let cpu = Driver::new(Backend::CpuOnly);
    // The same models compiled for the device: programs from models the validator let
    // through reach the device's program checks, requests its BO imports.
    let (device, probe) = device_driver();
    let (mut invalid, mut prepared, mut executed) = (0usize, 0usize, 0usize);
    fuzz::run("hal-model", 5000, |rng| {
        let seed = rng.pick(&seeds);
        let mut model = seed.model.clone();
        for _ in 0..=rng.below(3) {
            mutate_model(rng, &mut model);
        }
        let driver = if rng.chance(1, 2) { &cpu } else { &device };
        let valid = validate_model(&model);
        let prepare = driver.prepare_model(
            &model,
            ExecutionPreference::FastSingleAnswer,
            Priority::Medium,
            None,
        );
        let pm = match (valid, prepare) {
            (Err(e), Err(status)) => {
                assert_eq!(ErrorStatus::from(&e), ErrorStatus::InvalidArgument);
                assert_eq!(status, ErrorStatus::InvalidArgument, "invalid model: {e}");
                invalid += 1;
                return;
            }
            (Err(e), Ok(_)) => panic!("an invalid model was prepared: {e}"),
            (Ok(()), Err(status)) => {
                assert_ne!(status, ErrorStatus::None);
                assert_ne!(
                    status,
                    ErrorStatus::InvalidArgument,
                    "validate_model accepted what prepare_model calls invalid"
                );
                return;
            }
            (Ok(()), Ok(pm)) => pm,
        };
        prepared += 1;
        if known_bytes(&model) > MAX_EXECUTED_BYTES {
            return;
        }
        let mut request = seed.request.clone();
        for _ in 0..rng.below(3) {
            mutate_request(rng, &mut request);
        }
        let request_ok = validate_request(&request, &model).is_ok();
        let r = pm.execute_synchronously(&request, MeasureTiming::Yes, None);
        executed += 1;
        if !request_ok {
            assert_eq!(r.status, ErrorStatus::InvalidArgument);
        }
        if r.status == ErrorStatus::None {
            assert_eq!(r.output_shapes.len(), request.outputs.len());
            assert!(r.timing.time_on_device_us <= r.timing.time_in_driver_us);
        } else {
            assert!(
                r.timing == Timing::NOT_MEASURED,
                "a failed execution reports no timing"
            );
        }
    });
    println!("models: {invalid} invalid, {prepared} prepared, {executed} executed");
    assert!(invalid > 0 && (prepared > 0 && executed > 0 || fuzz::cases(5000) < 100));
    // The device ran some of them; every prepared model is gone, and so are the device
    // programs compiled for them.
    let param = |p| nnaccel_uapi::DeviceExt::get_param(&probe, p).ok();
    assert!(param(nnaccel_uapi::abi::PARAM_JOBS_COMPLETED) > Some(0) || fuzz::cases(5000) < 100);
    drop(device);
    assert_eq!(param(nnaccel_uapi::abi::PARAM_LIVE_PROGRAMS), Some(0));
}

/// A JSON text mutated: bytes (lossily back to UTF-8) or tokens (a number replaced with a
/// boundary number, a string with another HAL name, a bracket dropped).
pub(crate) fn mutate_json(rng: &mut Rng, text: &str) -> String {
    if rng.chance(1, 3) {
        let mut bytes = text.as_bytes().to_vec();
        fuzz::mutate(rng, &mut bytes);
        return String::from_utf8_lossy(&bytes).into_owned();
    }
    let mut out = text.to_string();
    for _ in 0..=rng.below(3) {
        // Token starts: digits (and a sign), quotes, brackets.
        let starts: Vec<usize> = out
            .char_indices()
            .filter(|(i, c)| {
                let prev = out[..*i].chars().next_back();
                (c.is_ascii_digit() || *c == '-')
                    && !prev.is_some_and(|p| p.is_ascii_alphanumeric() || p == '.' || p == '-')
                    || *c == '"'
                    || *c == '['
                    || *c == '{'
            })
            .map(|(i, _)| i)
            .collect();
        if starts.is_empty() {
            break;
        }
        let at = *rng.pick(&starts);
        let rest = &out[at..];
        let c = rest.as_bytes()[0];
        let (end, replacement): (usize, String) = match c {
            b'"' => {
                let end = rest[1..].find('"').map_or(rest.len(), |e| e + 2);
                let name = *rng.pick(&[
                    "\"TENSOR_FLOAT32\"",
                    "\"TENSOR_QUANT8_ASYMM\"",
                    "\"INT32\"",
                    "\"FLOAT32\"",
                    "\"TENSOR_QUANT8_SYMM_PER_CHANNEL\"",
                    "\"CONSTANT_REFERENCE\"",
                    "\"CONSTANT_COPY\"",
                    "\"TEMPORARY_VARIABLE\"",
                    "\"MODEL_INPUT\"",
                    "\"NO_VALUE\"",
                    "\"CONV_2D\"",
                    "\"RESHAPE\"",
                    "\"SOFTMAX\"",
                    "\"\"",
                    "\"version\"",
                    "\"channelQuant\"",
                    "null",
                    "true",
                ]);
                (end, name.to_string())
            }
            b'[' | b'{' => (1, rng.pick(&["", "[", "{", "[[", "[]", "null"]).to_string()),
            _ => {
                let end = rest
                    .find(|ch: char| !(ch.is_ascii_digit() || "+-.eE".contains(ch)))
                    .unwrap_or(rest.len());
                let n = rng.pick(&[
                    "0",
                    "-1",
                    "1",
                    "2",
                    "3",
                    "255",
                    "256",
                    "65536",
                    "2147483647",
                    "2147483648",
                    "4294967295",
                    "4294967296",
                    "-2147483649",
                    "18446744073709551616",
                    "1e309",
                    "-1e309",
                    "0.5",
                    "1e-50",
                    "NaN",
                ]);
                (end.max(1), n.to_string())
            }
        };
        out.replace_range(at..at + end, &replacement);
    }
    out
}

#[test]
fn mutated_model_and_inputs_files_are_errors_or_models_never_panic() {
    let seeds = seeds();
    let (mut parsed, mut refused) = (0usize, 0usize);
    fuzz::run("modelfile", 5000, |rng| {
        let i = rng.below(EXAMPLES.len());
        let (_, model_json, inputs_json) = EXAMPLES[i];
        if rng.chance(1, 3) {
            // The inputs file, against the example's (valid) model.
            let text = mutate_json(rng, inputs_json);
            if let Ok(values) = parse_inputs(&text, &seeds[i].model) {
                for v in values {
                    assert!(v.has_no_value || v.element_count > 0 || v.bytes.is_empty());
                }
            }
            return;
        }
        let text = mutate_json(rng, model_json);
        match parse_model(&text) {
            Ok(loaded) => {
                parsed += 1;
                // What the reader built is a model the HAL checks like any other.
                let _ = validate_model(&loaded.model);
            }
            Err(e) => {
                refused += 1;
                assert!(!e.to_string().is_empty());
            }
        }
    });
    println!("model files: {parsed} parsed, {refused} refused");
    assert!(refused > 0);
}
