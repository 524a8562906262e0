//! Burst against regular execution, for `nnaccelctl bench --burst` and
//! `tests/benches/burst.rs`: p50 and p99 latency of a regular execution, a burst with polling
//! window 0 and a burst with the default window, on the same prepared model and request, with
//! the ratios burst/regular.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::pools::MappedClientPool;
use nnaccel_hal::HalPreparedModel;
use nnaccel_hal::burst::BurstConfig;
use nnaccel_hal::types::*;

/// Untimed executions before each timed series.
pub const WARMUP: u32 = 50;

/// p50 and p99 of one series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Latency {
    /// Median.
    pub p50: Duration,
    /// 99th percentile.
    pub p99: Duration,
}

/// The three series of one model.
#[derive(Debug, Clone)]
pub(crate) struct Comparison {
    /// Regular executions (over the socket when the model is remote).
    pub regular: Latency,
    /// Burst, polling window 0: both sides sleep on the futex at once.
    pub burst_no_polling: Latency,
    /// Burst with the service's default window.
    pub burst_polling: Latency,
    /// That default window.
    pub window: Duration,
    /// How the worker waited.
    pub wait: String,
}

/// The `q`-quantile (0..=1) of sorted durations, nearest rank.
pub fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn series(
    iterations: u32,
    mut run: impl FnMut() -> ExecutionResult,
) -> Result<Latency, ErrorStatus> {
    for _ in 0..WARMUP {
        let r = run();
        if r.status != ErrorStatus::None {
            return Err(r.status);
        }
    }
    let mut t = Vec::with_capacity(iterations as usize);
    for _ in 0..iterations {
        let start = Instant::now();
        let r = run();
        t.push(start.elapsed());
        if r.status != ErrorStatus::None {
            return Err(r.status);
        }
    }
    t.sort();
    Ok(Latency {
        p50: percentile(&t, 0.50),
        p99: percentile(&t, 0.99),
    })
}

/// Runs the three series of `iterations` executions each.
pub(crate) fn compare(
    model: &dyn HalPreparedModel,
    request: &Request,
    iterations: u32,
) -> Result<Comparison, ErrorStatus> {
    let regular = series(iterations, || {
        model.execute_synchronously(request, MeasureTiming::No, None)
    })?;
    let no_polling = model.configure_execution_burst(BurstConfig {
        polling_window_us: Some(0),
        ..BurstConfig::default()
    })?;
    let burst_no_polling = series(iterations, || {
        no_polling.execute(request, MeasureTiming::No)
    })?;
    drop(no_polling);
    let polling = model.configure_execution_burst(BurstConfig::default())?;
    let burst_polling = series(iterations, || polling.execute(request, MeasureTiming::No))?;
    Ok(Comparison {
        regular,
        burst_no_polling,
        burst_polling,
        window: polling.info().polling_window,
        wait: polling.info().wait.clone(),
    })
}

fn us(d: Duration) -> String {
    format!("{:.1} us", d.as_secs_f64() * 1e6)
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64().max(1e-12)
}

impl Comparison {
    /// The figures as printed lines.
    pub fn lines(&self, label: &str) -> Vec<String> {
        let row = |name: &str, l: &Latency| {
            format!(
                "  {name:<28} p50 {:>9}  p99 {:>9}  p50 ratio to regular {:.3}",
                us(l.p50),
                us(l.p99),
                ratio(l.p50, self.regular.p50)
            )
        };
        vec![
            format!("{label} (worker waits with {})", self.wait),
            row("regular execution", &self.regular),
            row("burst, polling window 0", &self.burst_no_polling),
            row(
                &format!("burst, polling window {}", us(self.window)),
                &self.burst_polling,
            ),
            format!(
                "  polling window {} against window 0, p50: {:.3}",
                us(self.window),
                ratio(self.burst_polling.p50, self.burst_no_polling.p50)
            ),
        ]
    }
}

/// A request whose arguments each take a 64-byte aligned stretch of one ashmem pool, inputs
/// filled with a ramp; every extent must be known.
#[derive(Debug)]
pub(crate) struct BenchRequest {
    /// The request.
    pub request: Request,
    _map: MappedClientPool,
}

impl BenchRequest {
    /// Lays out `model`'s inputs and outputs.
    pub fn new(model: &Model) -> std::io::Result<Self> {
        let size_of = |k: u32| {
            model
                .operands
                .get(k as usize)
                .map(|o| {
                    o.dimensions.iter().map(|d| *d as usize).product::<usize>()
                        * o.operand_type.element_size()
                })
                .unwrap_or(0)
        };
        let mut offset = 0usize;
        let mut place = |k: u32| {
            let len = size_of(k);
            let arg = RequestArgument {
                has_no_value: false,
                location: DataLocation {
                    pool_index: 0,
                    offset: offset as u32,
                    length: len as u32,
                    padding: 0,
                },
                dimensions: Vec::new(),
            };
            offset += len.next_multiple_of(64);
            arg
        };
        let inputs: Vec<RequestArgument> = model.input_indexes.iter().map(|k| place(*k)).collect();
        let outputs = model.output_indexes.iter().map(|k| place(*k)).collect();
        let pool = crate::pools::ashmem(offset.max(64) as u64)?;
        let map = MappedClientPool::new(&pool)?;
        for a in &inputs {
            let ramp: Vec<f32> = (0..a.location.length / 4)
                .map(|i| i as f32 * 0.01)
                .collect();
            map.write_f32(a.location.offset as usize, &ramp)?;
        }
        Ok(Self {
            request: Request {
                inputs,
                outputs,
                pools: vec![MemoryPool::Memory(pool)],
            },
            _map: map,
        })
    }
}

fn parse(json: &str) -> Result<Model, String> {
    crate::modelfile::parse_model(json)
        .map(|m| m.model)
        .map_err(|e| format!("built-in bench model: {e}"))
}

/// The tiny model: one ADD of two `[4]` floats (in the model-file format of
/// `docs/model-format.md`).
pub fn tiny_model() -> Result<Model, String> {
    parse(
        r#"{"version": 1,
        "operands": [
          {"type": "TENSOR_FLOAT32", "dimensions": [4], "lifetime": "MODEL_INPUT"},
          {"type": "TENSOR_FLOAT32", "dimensions": [4], "lifetime": "MODEL_INPUT"},
          {"type": "INT32", "dimensions": [], "lifetime": "CONSTANT_COPY", "value": [0]},
          {"type": "TENSOR_FLOAT32", "dimensions": [4], "lifetime": "MODEL_OUTPUT"}],
        "operations": [{"type": "ADD", "inputs": [0, 1, 2], "outputs": [3]}],
        "inputIndexes": [0, 1], "outputIndexes": [3]}"#,
    )
}

/// Inputs and units of [`medium_model`].
pub(crate) const MEDIUM_WIDTH: u32 = 256;

/// The medium model: FULLY_CONNECTED `[1, 256]` × `[256, 256]` + bias, RELU fused
/// (65,536 multiply-adds).
pub fn medium_model() -> Result<Model, String> {
    let n = MEDIUM_WIDTH;
    let list = |len: u32, f: &dyn Fn(u32) -> f32| {
        (0..len)
            .map(|i| f(i).to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let weights = list(n * n, &|i| ((i % 17) as f32 - 8.0) * 0.01);
    let bias = list(n, &|i| i as f32 * 0.001);
    parse(&format!(
        r#"{{"version": 1,
        "operands": [
          {{"type": "TENSOR_FLOAT32", "dimensions": [1, {n}], "lifetime": "MODEL_INPUT"}},
          {{"type": "TENSOR_FLOAT32", "dimensions": [{n}, {n}], "lifetime": "CONSTANT_COPY", "value": [{weights}]}},
          {{"type": "TENSOR_FLOAT32", "dimensions": [{n}], "lifetime": "CONSTANT_COPY", "value": [{bias}]}},
          {{"type": "INT32", "dimensions": [], "lifetime": "CONSTANT_COPY", "value": [1]}},
          {{"type": "TENSOR_FLOAT32", "dimensions": [1, {n}], "lifetime": "MODEL_OUTPUT"}}],
        "operations": [{{"type": "FULLY_CONNECTED", "inputs": [0, 1, 2, 3], "outputs": [4]}}],
        "inputIndexes": [0], "outputIndexes": [4]}}"#
    ))
}

/// Prepares `model` (FAST_SINGLE_ANSWER) on `device` and compares; the printed lines.
pub fn run(
    device: &dyn nnaccel_hal::HalDevice,
    label: &str,
    model: &Model,
    iterations: u32,
) -> Result<Vec<String>, String> {
    let pm: Arc<dyn HalPreparedModel> = device
        .prepare_model(
            model,
            ExecutionPreference::FastSingleAnswer,
            Priority::Medium,
            None,
        )
        .map_err(|s| format!("{label}: preparation failed with {s}"))?;
    let req = BenchRequest::new(model).map_err(|e| format!("{label}: {e}"))?;
    let where_ = if pm.runs_on_device() {
        "on the device"
    } else {
        "on the CPU executor"
    };
    let c = compare(&*pm, &req.request, iterations)
        .map_err(|s| format!("{label}: an execution failed with {s}"))?;
    Ok(c.lines(&format!(
        "{label}, {where_}, {iterations} executions per series"
    )))
}
