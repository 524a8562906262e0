//! Partitioned execution end to end: `nnaccel-sim --without-ops` lacks some operation types,
//! like a real NPU; the HAL places each operation (device or CPU) and runs a model part on the
//! device and part on the CPU executor inside one execution (docs/hal.md, "Placement").
//!
//! The models are chains `v = op(v, c)` over a `[1, 4]` float tensor with the constant
//! `c = [1, 2, 3, 4]`; expected values are worked out by hand in each test (small integers,
//! exact in float32).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::os::fd::AsFd;
use std::sync::Arc;

use nnaccel_hal::driver::BurstCache;
use nnaccel_hal::{
    Backend, BufferDesc, BufferRole, DataLocation, DeviceInfo, Driver, ErrorStatus,
    ExecutionPreference, LOCAL_OWNER, MeasureTiming, Memory, MemoryKind, MemoryPool, Model,
    Operand, OperandLifetime, OperandType, Operation, OperationType, Placement, Priority, Request,
    RequestArgument, Timing,
};
use nnaccel_tests::{Ctx, run_with_sim};
use nnaccel_uapi::Device;
use nnaccel_uapi::sys::{self, Mapping};

const C: [f32; 4] = [1.0, 2.0, 3.0, 4.0];
const X: [f32; 4] = [1.0, 2.0, 3.0, 4.0];

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn operand(ty: OperandType, dims: &[u32], lifetime: OperandLifetime, at: (u32, u32)) -> Operand {
    Operand {
        operand_type: ty,
        dimensions: dims.to_vec(),
        scale: 0.0,
        zero_point: 0,
        lifetime,
        location: DataLocation {
            pool_index: 0,
            offset: at.0,
            length: at.1,
            padding: 0,
        },
        extra_params: None,
    }
}

/// `v = ops[k](v, c)` for each k, starting from the input; the last value is the output.
fn chain(ops: &[OperationType]) -> Model {
    let f = OperandType::TensorFloat32;
    let mut values = f32_bytes(&C);
    values.extend_from_slice(&0i32.to_le_bytes());
    let mut m = Model {
        operands: vec![
            operand(f, &[1, 4], OperandLifetime::SubgraphInput, (0, 0)),
            operand(f, &[1, 4], OperandLifetime::ConstantCopy, (0, 16)),
            operand(
                OperandType::Int32,
                &[],
                OperandLifetime::ConstantCopy,
                (16, 4),
            ),
        ],
        input_indexes: vec![0],
        operand_values: values,
        ..Model::default()
    };
    let mut v = 0;
    for (k, op) in ops.iter().enumerate() {
        let lifetime = if k + 1 == ops.len() {
            OperandLifetime::SubgraphOutput
        } else {
            OperandLifetime::TemporaryVariable
        };
        m.operands.push(operand(f, &[1, 4], lifetime, (0, 0)));
        let out = (m.operands.len() - 1) as u32;
        m.operations.push(Operation {
            operation_type: *op,
            inputs: vec![v, 1, 2],
            outputs: vec![out],
        });
        v = out;
    }
    m.output_indexes = vec![v];
    m
}

/// A memfd pool of `size` bytes starting with `values`, and its mapping.
fn memfd_pool(size: u64, values: &[f32]) -> (Memory, Mapping) {
    let fd = sys::memfd_create(c"partition-test", size).unwrap();
    let map = Mapping::map_shared(fd.as_fd(), 0, size as usize, true).unwrap();
    map.write_at(0, &f32_bytes(values)).unwrap();
    let memory = Memory {
        kind: MemoryKind::Ashmem,
        fd: Arc::new(fd),
        size,
    };
    (memory, map)
}

/// One memfd pool: the input at 0, the output at 64.
struct Io {
    memory: Memory,
    map: Mapping,
}

impl Io {
    fn new(input: &[f32]) -> Self {
        let (memory, map) = memfd_pool(4096, input);
        Self { memory, map }
    }

    fn set_input(&self, input: &[f32]) {
        self.map.write_at(0, &f32_bytes(input)).unwrap();
    }

    fn request(&self, out_len: u32) -> Request {
        let arg = |offset, length| RequestArgument {
            has_no_value: false,
            location: DataLocation {
                pool_index: 0,
                offset,
                length,
                padding: 0,
            },
            dimensions: vec![],
        };
        Request {
            inputs: vec![arg(0, 16)],
            outputs: vec![arg(64, out_len)],
            pools: vec![MemoryPool::Memory(self.memory.clone())],
        }
    }

    fn output_bytes(&self) -> Vec<u8> {
        let mut b = vec![0u8; 16];
        self.map.read_at(64, &mut b).unwrap();
        b
    }

    fn output(&self) -> Vec<f32> {
        self.output_bytes()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }
}

fn device_driver(ctx: &Ctx) -> Driver {
    Driver::new(Backend::Device(ctx.dev.clone()))
}

fn prepare(driver: &Driver, model: &Model) -> nnaccel_hal::PreparedModel {
    driver
        .prepare_model(
            model,
            ExecutionPreference::FastSingleAnswer,
            Priority::Medium,
            None,
        )
        .unwrap_or_else(|e| panic!("prepare: {e:?}"))
}

fn jobs(dev: &dyn Device) -> u64 {
    DeviceInfo::query(dev).unwrap().jobs_completed
}

/// The output bytes of `model` on `input`, on a CPU-only driver.
fn cpu_only_output(model: &Model, input: &[f32]) -> Vec<u8> {
    let pm = prepare(&Driver::new(Backend::CpuOnly), model);
    let io = Io::new(input);
    let r = pm.execute_synchronously(&io.request(16), MeasureTiming::No, None);
    assert_eq!(r.status, ErrorStatus::None);
    io.output_bytes()
}

use OperationType::{Add, Mul, Sub};

#[test]
fn a_device_lacking_the_middle_operation_runs_the_ends_on_the_device() {
    run_with_sim(&["--without-ops", "MUL"], |ctx| {
        let driver = device_driver(&ctx);
        let model = chain(&[Add, Mul, Add]);
        assert_eq!(
            driver.operation_placement(&model).unwrap(),
            vec![Placement::Device, Placement::Cpu, Placement::Device]
        );
        assert_eq!(
            driver.get_supported_operations(&model).unwrap(),
            vec![true; 3]
        );
        let pm = prepare(&driver, &model);
        assert!(pm.is_partitioned());
        assert_eq!(pm.partition_counts(), Some((3, 2)));
        let io = Io::new(&X);
        let before = jobs(&*ctx.dev);
        let r = pm.execute_synchronously(&io.request(16), MeasureTiming::Yes, None);
        assert_eq!(r.status, ErrorStatus::None);
        assert_eq!(jobs(&*ctx.dev), before + 2, "two device parts, two jobs");
        // (x + c) * c + c = [2, 4, 6, 8] * [1, 2, 3, 4] + c = [3, 10, 21, 36].
        assert_eq!(io.output(), vec![3.0, 10.0, 21.0, 36.0]);
        assert_eq!(io.output_bytes(), cpu_only_output(&model, &X));
        assert_eq!(r.output_shapes.len(), 1);
        assert_eq!(r.output_shapes[0].dimensions, vec![1, 4]);
        assert!(r.output_shapes[0].is_sufficient);
        assert_ne!(r.timing, Timing::NOT_MEASURED);
        assert!(r.timing.time_on_device_us <= r.timing.time_in_driver_us);
        // The same through `execute` (its own thread).
        io.set_input(&[0.0; 4]);
        let r = pm.execute(io.request(16), MeasureTiming::No, None).wait();
        assert_eq!(r.status, ErrorStatus::None);
        // (0 + c) * c + c = [2, 6, 12, 20].
        assert_eq!(io.output(), vec![2.0, 6.0, 12.0, 20.0]);
        assert_eq!(jobs(&*ctx.dev), before + 4);
    });
}

#[test]
fn a_model_whose_first_operation_is_cpu_only_gives_its_output_from_the_device_part() {
    run_with_sim(&["--without-ops", "MUL"], |ctx| {
        let driver = device_driver(&ctx);
        let model = chain(&[Mul, Add, Sub]);
        assert_eq!(
            driver.operation_placement(&model).unwrap(),
            vec![Placement::Cpu, Placement::Device, Placement::Device]
        );
        let pm = prepare(&driver, &model);
        assert_eq!(pm.partition_counts(), Some((2, 1)));
        let io = Io::new(&X);
        let before = jobs(&*ctx.dev);
        let r = pm.execute_synchronously(&io.request(16), MeasureTiming::No, None);
        assert_eq!(r.status, ErrorStatus::None);
        assert_eq!(jobs(&*ctx.dev), before + 1);
        // x * c + c - c = [1, 4, 9, 16].
        assert_eq!(io.output(), vec![1.0, 4.0, 9.0, 16.0]);
        assert_eq!(io.output_bytes(), cpu_only_output(&model, &X));
    });
}

#[test]
fn a_model_whose_output_comes_from_the_cpu_part() {
    run_with_sim(&["--without-ops", "MUL"], |ctx| {
        let driver = device_driver(&ctx);
        let model = chain(&[Add, Sub, Mul]);
        assert_eq!(
            driver.operation_placement(&model).unwrap(),
            vec![Placement::Device, Placement::Device, Placement::Cpu]
        );
        let pm = prepare(&driver, &model);
        assert_eq!(pm.partition_counts(), Some((2, 1)));
        let io = Io::new(&[5.0, -1.0, 0.5, 2.0]);
        let before = jobs(&*ctx.dev);
        let r = pm.execute_synchronously(&io.request(16), MeasureTiming::No, None);
        assert_eq!(r.status, ErrorStatus::None);
        assert_eq!(jobs(&*ctx.dev), before + 1);
        // (x + c - c) * c = [5, -2, 1.5, 8].
        assert_eq!(io.output(), vec![5.0, -2.0, 1.5, 8.0]);
        assert_eq!(r.output_shapes[0].dimensions, vec![1, 4]);
    });
}

#[test]
fn a_cheap_device_run_between_cpu_parts_runs_on_the_cpu() {
    run_with_sim(&["--without-ops", "MUL"], |ctx| {
        let driver = device_driver(&ctx);
        let model = chain(&[Mul, Add, Mul]);
        assert_eq!(
            driver.operation_placement(&model).unwrap(),
            vec![Placement::Cpu; 3]
        );
        let pm = prepare(&driver, &model);
        assert!(!pm.is_partitioned());
        let io = Io::new(&X);
        let before = jobs(&*ctx.dev);
        assert_eq!(
            pm.execute_synchronously(&io.request(16), MeasureTiming::No, None)
                .status,
            ErrorStatus::None
        );
        assert_eq!(jobs(&*ctx.dev), before, "nothing ran on the device");
        // (x * c + c) * c = [2, 12, 36, 80].
        assert_eq!(io.output(), vec![2.0, 12.0, 36.0, 80.0]);
    });
}

#[test]
fn a_burst_on_a_partitioned_model_gives_right_results_every_time() {
    run_with_sim(&["--without-ops", "MUL"], |ctx| {
        let driver = device_driver(&ctx);
        let pm = prepare(&driver, &chain(&[Add, Mul, Add]));
        let io = Io::new(&X);
        let mut cache = BurstCache::new();
        let before = jobs(&*ctx.dev);
        for i in 0..50 {
            let x = [i as f32, 1.0, -2.0, 0.25];
            io.set_input(&x);
            let r = pm.execute_in_burst(
                LOCAL_OWNER,
                &io.request(16),
                MeasureTiming::No,
                &mut cache,
                &[7],
            );
            assert_eq!(r.status, ErrorStatus::None, "execution {i}");
            let want: Vec<f32> = x.iter().zip(C).map(|(x, c)| (x + c) * c + c).collect();
            assert_eq!(io.output(), want, "execution {i}");
        }
        assert_eq!(jobs(&*ctx.dev), before + 100);
        assert!(
            cache.has_device_queue(),
            "the device parts ran on the burst's queue"
        );
        assert_eq!(cache.len(), 1, "the request's one pool is cached once");
    });
}

#[test]
fn an_output_too_small_is_output_insufficient_size_with_the_needed_shape() {
    run_with_sim(&["--without-ops", "MUL"], |ctx| {
        let driver = device_driver(&ctx);
        for model in [chain(&[Add, Mul, Add]), chain(&[Add, Mul])] {
            let pm = prepare(&driver, &model);
            assert!(pm.is_partitioned());
            let io = Io::new(&X);
            let r = pm.execute_synchronously(&io.request(8), MeasureTiming::Yes, None);
            assert_eq!(r.status, ErrorStatus::OutputInsufficientSize);
            assert_eq!(r.output_shapes.len(), 1);
            assert_eq!(r.output_shapes[0].dimensions, vec![1, 4]);
            assert!(!r.output_shapes[0].is_sufficient);
            assert_eq!(r.timing, Timing::NOT_MEASURED);
        }
    });
}

#[test]
fn the_device_dying_between_executions_leaves_results_right() {
    run_with_sim(&["--without-ops", "MUL"], |ctx| {
        let driver = device_driver(&ctx);
        let pm = prepare(&driver, &chain(&[Add, Mul, Add]));
        assert!(pm.is_partitioned());
        let io = Io::new(&X);
        let r = pm.execute_synchronously(&io.request(16), MeasureTiming::No, None);
        assert_eq!(r.status, ErrorStatus::None);
        assert_eq!(io.output(), vec![3.0, 10.0, 21.0, 36.0]);
        ctx.sim.kill_hard();
        io.set_input(&[1.0, 1.0, 1.0, 1.0]);
        let r = pm.execute_synchronously(&io.request(16), MeasureTiming::No, None);
        assert_eq!(r.status, ErrorStatus::None);
        // (1 + c) * c + c = [3, 8, 15, 24].
        assert_eq!(io.output(), vec![3.0, 8.0, 15.0, 24.0]);
        assert!(!pm.is_partitioned(), "a dead device runs nothing");
        // And again, straight to the CPU plan.
        let r = pm.execute_synchronously(&io.request(16), MeasureTiming::No, None);
        assert_eq!(r.status, ErrorStatus::None);
        assert_eq!(io.output(), vec![3.0, 8.0, 15.0, 24.0]);
        // A model prepared now runs whole on the CPU.
        let pm2 = prepare(&driver, &chain(&[Add, Mul, Add]));
        assert!(!pm2.runs_on_device());
    });
}

#[test]
fn memory_domain_buffers_as_input_and_output_of_a_partitioned_model() {
    run_with_sim(&["--without-ops", "MUL"], |ctx| {
        let driver = device_driver(&ctx);
        let pm = prepare(&driver, &chain(&[Add, Mul, Add]));
        assert!(pm.is_partitioned());
        let role = |io_index| BufferRole {
            model_index: 0,
            io_index,
            frequency: 1.0,
        };
        let allocate = |inputs: &[BufferRole], outputs: &[BufferRole]| {
            driver
                .allocate(LOCAL_OWNER, &BufferDesc::default(), &[&pm], inputs, outputs)
                .unwrap()
        };
        let input = allocate(&[role(0)], &[]);
        let output = allocate(&[], &[role(0)]);
        let (src, _src_map) = memfd_pool(16, &[4.0, 3.0, 2.0, 1.0]);
        input.copy_from(&src, &[]).unwrap();
        let token_arg = |pool_index| RequestArgument {
            has_no_value: false,
            location: DataLocation {
                pool_index,
                ..DataLocation::default()
            },
            dimensions: vec![],
        };
        let request = Request {
            inputs: vec![token_arg(0)],
            outputs: vec![token_arg(1)],
            pools: vec![
                MemoryPool::Token(input.token()),
                MemoryPool::Token(output.token()),
            ],
        };
        let before = jobs(&*ctx.dev);
        let r = pm.execute_synchronously(&request, MeasureTiming::No, None);
        assert_eq!(r.status, ErrorStatus::None);
        assert_eq!(jobs(&*ctx.dev), before + 2);
        let (dst, dst_map) = memfd_pool(16, &[0.0; 4]);
        output.copy_to(&dst).unwrap();
        let mut b = [0u8; 16];
        dst_map.read_at(0, &mut b).unwrap();
        let got: Vec<f32> = b
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        // (x + c) * c + c with x = [4, 3, 2, 1]: [5, 5, 5, 5] * c + c = [6, 12, 18, 24].
        assert_eq!(got, vec![6.0, 12.0, 18.0, 24.0]);
    });
}

#[test]
fn a_deadline_passing_in_a_device_part_is_missed_deadline_transient() {
    run_with_sim(
        &["--without-ops", "MUL", "--fault-delay-job-ms", "400"],
        |ctx| {
            let driver = device_driver(&ctx);
            let pm = prepare(&driver, &chain(&[Add, Mul, Add]));
            assert!(pm.is_partitioned());
            let io = Io::new(&X);
            let deadline = std::time::Instant::now() + std::time::Duration::from_millis(100);
            let r = pm.execute_synchronously(&io.request(16), MeasureTiming::Yes, Some(deadline));
            assert_eq!(r.status, ErrorStatus::MissedDeadlineTransient);
            assert_eq!(r.timing, Timing::NOT_MEASURED);
            // Without a deadline the same model still runs, and right.
            let r = pm.execute_synchronously(&io.request(16), MeasureTiming::No, None);
            assert_eq!(r.status, ErrorStatus::None);
            assert_eq!(io.output(), vec![3.0, 10.0, 21.0, 36.0]);
            assert!(
                pm.is_partitioned(),
                "a missed deadline leaves the device in service"
            );
        },
    );
}

#[test]
fn a_partitioned_model_runs_through_the_service() {
    if !nnaccel_tests::require_privileges() {
        return;
    }
    let sim = nnaccel_tests::Sim::start(&["--without-ops", "MUL"]);
    let hald = nnaccel_tests::service::Hald::with_device(&sim);
    let client = hald.client();
    let model = chain(&[Add, Mul, Add]);
    assert_eq!(
        nnaccel_hal::HalDevice::operation_placement(&client, &model).unwrap(),
        vec![Placement::Device, Placement::Cpu, Placement::Device]
    );
    let pm = nnaccel_tests::service::prepare(&client, &model).unwrap();
    assert!(pm.runs_on_device());
    let dev = sim.open();
    let io = Io::new(&X);
    let before = jobs(&*dev);
    let r = nnaccel_tests::service::execute(&*pm, &io.request(16));
    assert_eq!(r.status, ErrorStatus::None, "{}", hald.log());
    assert_eq!(jobs(&*dev), before + 2);
    assert_eq!(io.output(), vec![3.0, 10.0, 21.0, 36.0]);
}
