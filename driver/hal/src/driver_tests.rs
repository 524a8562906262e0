//! Tests of the device interface over the CPU-only backend, the in-process device, and a
//! device that refuses programs or dies.

use std::io;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nnaccel_kmod_sim::{Config, InprocFile, SimDevice};
use nnaccel_uapi::Device;
use nnaccel_uapi::ioctl::NNACCEL_IOCTL_PROGRAM_CREATE;
use nnaccel_uapi::sys::{self, Mapping};

use super::*;
use crate::device::LiveObjects;

/// A device that can be told to refuse programs or to die (ENOTCONN, like a killed FUSE
/// server).
#[derive(Debug)]
struct TestDevice {
    inner: InprocFile,
    refuse_programs: AtomicBool,
    dead: AtomicBool,
    /// ioctls issued, dead or alive.
    calls: AtomicU64,
}

impl TestDevice {
    fn new() -> Arc<Self> {
        let sim = SimDevice::new(Config::default()).unwrap();
        Arc::new(Self {
            inner: InprocFile::open(&sim),
            refuse_programs: AtomicBool::new(false),
            dead: AtomicBool::new(false),
            calls: AtomicU64::new(0),
        })
    }
}

impl Device for TestDevice {
    fn ioctl(&self, cmd: u32, arg: &mut [u8]) -> io::Result<()> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.dead.load(Ordering::SeqCst) {
            return Err(io::Error::from_raw_os_error(libc::ENOTCONN));
        }
        if cmd == NNACCEL_IOCTL_PROGRAM_CREATE && self.refuse_programs.load(Ordering::SeqCst) {
            return Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP));
        }
        self.inner.ioctl(cmd, arg)
    }
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn tensor(dims: &[u32], lifetime: OperandLifetime, location: DataLocation) -> Operand {
    Operand {
        operand_type: OperandType::TensorFloat32,
        dimensions: dims.to_vec(),
        scale: 0.0,
        zero_point: 0,
        lifetime,
        location,
        extra_params: None,
    }
}

/// out = relu(a + c) with c a CONSTANT_COPY [1, 2, 3, 4], over [1, 4] (or [0, 4] dynamic).
pub(crate) fn add_model(dims: &[u32]) -> Model {
    let none = DataLocation::default();
    let mut values = f32_bytes(&[1.0, 2.0, 3.0, 4.0]);
    values.extend_from_slice(&1i32.to_le_bytes());
    Model {
        operands: vec![
            tensor(dims, OperandLifetime::SubgraphInput, none),
            tensor(
                &[1, 4],
                OperandLifetime::ConstantCopy,
                DataLocation {
                    pool_index: 0,
                    offset: 0,
                    length: 16,
                    padding: 0,
                },
            ),
            Operand {
                operand_type: OperandType::Int32,
                dimensions: vec![],
                scale: 0.0,
                zero_point: 0,
                lifetime: OperandLifetime::ConstantCopy,
                location: DataLocation {
                    pool_index: 0,
                    offset: 16,
                    length: 4,
                    padding: 0,
                },
                extra_params: None,
            },
            tensor(dims, OperandLifetime::SubgraphOutput, none),
        ],
        operations: vec![Operation {
            operation_type: OperationType::Add,
            inputs: vec![0, 1, 2],
            outputs: vec![3],
        }],
        input_indexes: vec![0],
        output_indexes: vec![3],
        operand_values: values,
        pools: vec![],
        relax_computation_float32_to_float16: false,
        referenced: vec![],
    }
}

/// One memfd pool: input at 0, output at 64.
struct Io {
    memory: Memory,
    map: Mapping,
}

impl Io {
    fn new(input: &[f32]) -> Self {
        let fd = sys::memfd_create(c"io", 4096).unwrap();
        let map = Mapping::map_shared(fd.as_fd(), 0, 4096, true).unwrap();
        map.write_at(0, &f32_bytes(input)).unwrap();
        Self {
            memory: Memory {
                kind: MemoryKind::Ashmem,
                fd: Arc::new(fd),
                size: 4096,
            },
            map,
        }
    }

    fn request(&self, out_len: u32) -> Request {
        Request {
            inputs: vec![RequestArgument {
                has_no_value: false,
                location: DataLocation {
                    pool_index: 0,
                    offset: 0,
                    length: 16,
                    padding: 0,
                },
                dimensions: vec![],
            }],
            outputs: vec![RequestArgument {
                has_no_value: false,
                location: DataLocation {
                    pool_index: 0,
                    offset: 64,
                    length: out_len,
                    padding: 0,
                },
                dimensions: vec![],
            }],
            pools: vec![MemoryPool::Memory(self.memory.clone())],
        }
    }

    fn output(&self) -> Vec<f32> {
        let mut b = [0u8; 16];
        self.map.read_at(64, &mut b).unwrap();
        b.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }
}

const INPUT: [f32; 4] = [-5.0, 0.5, -1.0, 10.0];
const EXPECTED: [f32; 4] = [0.0, 2.5, 2.0, 14.0];

pub(crate) fn prepare(driver: &Driver, model: &Model) -> PreparedModel {
    driver
        .prepare_model(
            model,
            ExecutionPreference::FastSingleAnswer,
            Priority::Medium,
            None,
        )
        .unwrap()
}

#[test]
fn cpu_only_driver_executes_with_timing() {
    let driver = Driver::new(Backend::CpuOnly);
    let pm = prepare(&driver, &add_model(&[1, 4]));
    assert!(!pm.runs_on_device());
    let io = Io::new(&INPUT);
    let r = pm.execute_synchronously(&io.request(16), MeasureTiming::Yes, None);
    assert_eq!(r.status, ErrorStatus::None);
    assert_eq!(
        r.output_shapes,
        vec![OutputShape {
            dimensions: vec![1, 4],
            is_sufficient: true
        }]
    );
    assert!(r.timing.time_on_device_us <= r.timing.time_in_driver_us);
    assert_eq!(io.output(), EXPECTED);
}

#[test]
fn driver_waiting_for_a_missing_node_serves_on_the_cpu_and_says_so() {
    let driver = Driver::new(Backend::CpuOnly)
        .with_device_node(std::path::Path::new("/nonexistent/nnaccel"));
    assert!(
        driver
            .description()
            .contains("not answering yet at /nonexistent/nnaccel"),
        "{}",
        driver.description()
    );
    assert_eq!(
        driver.device_health(),
        Some(DeviceHealth {
            alive: false,
            lost: 0,
            adopted: 0
        })
    );
    let pm = prepare(&driver, &add_model(&[1, 4]));
    assert!(!pm.runs_on_device());
    let io = Io::new(&INPUT);
    let r = pm.execute_synchronously(&io.request(16), MeasureTiming::No, None);
    assert_eq!(r.status, ErrorStatus::None);
    assert_eq!(io.output(), EXPECTED);
}

#[test]
fn a_refused_preparation_names_the_operation_its_type_and_the_rule() {
    let driver = Driver::new(Backend::CpuOnly);
    let good = add_model(&[1, 4]);
    assert_eq!(driver.refusal_reason(&good), None);
    let mut model = good.clone();
    model.operations[0].operation_type = OperationType::While;
    assert!(
        driver
            .prepare_model(
                &model,
                ExecutionPreference::FastSingleAnswer,
                Priority::Medium,
                None
            )
            .is_err()
    );
    let why = driver.refusal_reason(&model).unwrap();
    assert!(
        why.starts_with("operation 0 (WHILE, TENSOR_FLOAT32): "),
        "{why}"
    );
    // A model breaking a HAL rule says which.
    let mut broken = good;
    broken.operations[0].inputs[1] = 99;
    let why = driver.refusal_reason(&broken).unwrap();
    assert!(why.contains("99"), "{why}");
}

#[test]
fn device_driver_runs_the_model_on_the_device() {
    let dev = TestDevice::new();
    let driver = Driver::new(Backend::Device(dev.clone()));
    let model = add_model(&[1, 4]);
    assert_eq!(
        driver.operation_placement(&model).unwrap(),
        vec![Placement::Device]
    );
    let pm = prepare(&driver, &model);
    assert!(pm.runs_on_device());
    let before = dev
        .inner
        .device()
        .core()
        .stats
        .jobs_completed
        .load(Ordering::SeqCst);
    let io = Io::new(&INPUT);
    let r = pm.execute_synchronously(&io.request(16), MeasureTiming::Yes, None);
    assert_eq!(r.status, ErrorStatus::None);
    assert_eq!(io.output(), EXPECTED);
    assert_ne!(r.timing.time_in_driver_us, u64::MAX);
    assert_eq!(
        dev.inner
            .device()
            .core()
            .stats
            .jobs_completed
            .load(Ordering::SeqCst),
        before + 1
    );
}

#[test]
fn operations_the_device_refuses_fall_back_to_the_cpu() {
    let dev = TestDevice::new();
    dev.refuse_programs.store(true, Ordering::SeqCst);
    let driver = Driver::new(Backend::Device(dev));
    let model = add_model(&[1, 4]);
    assert_eq!(
        driver.operation_placement(&model).unwrap(),
        vec![Placement::Cpu]
    );
    assert_eq!(driver.get_supported_operations(&model).unwrap(), vec![true]);
    let pm = prepare(&driver, &model);
    assert!(!pm.runs_on_device());
    let io = Io::new(&INPUT);
    assert_eq!(
        pm.execute_synchronously(&io.request(16), MeasureTiming::No, None)
            .status,
        ErrorStatus::None
    );
    assert_eq!(io.output(), EXPECTED);
}

#[test]
fn dynamic_shapes_run_on_the_cpu() {
    let dev = TestDevice::new();
    let driver = Driver::new(Backend::Device(dev));
    let model = add_model(&[0, 4]);
    assert_eq!(
        driver.operation_placement(&model).unwrap(),
        vec![Placement::Cpu]
    );
    let pm = prepare(&driver, &model);
    let io = Io::new(&INPUT);
    let mut req = io.request(16);
    req.inputs[0].dimensions = vec![1, 4];
    let r = pm.execute_synchronously(&req, MeasureTiming::No, None);
    assert_eq!(r.status, ErrorStatus::None);
    assert_eq!(r.output_shapes[0].dimensions, vec![1, 4]);
    assert_eq!(io.output(), EXPECTED);
}

#[test]
fn prepared_models_survive_the_device_dying() {
    let dev = TestDevice::new();
    let driver = Driver::new(Backend::Device(dev.clone()));
    let pm = prepare(&driver, &add_model(&[1, 4]));
    assert!(pm.runs_on_device());
    dev.dead.store(true, Ordering::SeqCst);
    let io = Io::new(&INPUT);
    let r = pm.execute_synchronously(&io.request(16), MeasureTiming::No, None);
    assert_eq!(r.status, ErrorStatus::None);
    assert_eq!(io.output(), EXPECTED);
    assert!(!pm.runs_on_device());
    // New preparations go straight to the CPU.
    let pm2 = prepare(&driver, &add_model(&[1, 4]));
    assert!(!pm2.runs_on_device());
}

#[test]
fn too_small_output_reports_the_needed_shape_on_both_paths() {
    for backend in [Backend::CpuOnly, Backend::Device(TestDevice::new())] {
        let pm = prepare(&Driver::new(backend), &add_model(&[1, 4]));
        let io = Io::new(&INPUT);
        let r = pm.execute_synchronously(&io.request(8), MeasureTiming::Yes, None);
        assert_eq!(r.status, ErrorStatus::OutputInsufficientSize);
        assert_eq!(
            r.output_shapes,
            vec![OutputShape {
                dimensions: vec![1, 4],
                is_sufficient: false
            }]
        );
        assert_eq!(r.timing, Timing::NOT_MEASURED);
    }
}

#[test]
fn invalid_request_fails_with_no_shapes_and_no_timing() {
    let pm = prepare(
        &Driver::new(Backend::Device(TestDevice::new())),
        &add_model(&[1, 4]),
    );
    let io = Io::new(&INPUT);
    let mut req = io.request(16);
    req.inputs.clear();
    assert_eq!(
        pm.execute_synchronously(&req, MeasureTiming::Yes, None),
        ExecutionResult::failure(ErrorStatus::InvalidArgument)
    );
}

#[test]
fn a_passed_deadline_is_missed_before_running() {
    let driver = Driver::new(Backend::CpuOnly);
    let past = Instant::now() - Duration::from_millis(1);
    assert_eq!(
        driver
            .prepare_model(
                &add_model(&[1, 4]),
                ExecutionPreference::LowPower,
                Priority::Low,
                Some(past)
            )
            .unwrap_err(),
        ErrorStatus::MissedDeadlineTransient
    );
    let pm = prepare(&driver, &add_model(&[1, 4]));
    let io = Io::new(&INPUT);
    assert_eq!(
        pm.execute_synchronously(&io.request(16), MeasureTiming::Yes, Some(past))
            .status,
        ErrorStatus::MissedDeadlineTransient
    );
}

#[test]
fn constants_in_hardware_buffer_are_unsupported_and_fail_prepare() {
    let fd = sys::memfd_create(c"ahwb", 4096).unwrap();
    let model = add_model_with_pool_constant(
        Memory {
            kind: MemoryKind::HardwareBuffer,
            fd: Arc::new(fd),
            size: 4096,
        },
        0,
    );
    let driver = Driver::new(Backend::Device(TestDevice::new()));
    assert_eq!(
        driver.get_supported_operations(&model).unwrap(),
        vec![false]
    );
    assert_eq!(
        driver
            .prepare_model(
                &model,
                ExecutionPreference::FastSingleAnswer,
                Priority::Medium,
                None
            )
            .unwrap_err(),
        ErrorStatus::GeneralFailure
    );
}

#[test]
fn constant_reference_pools_work_on_device_and_cpu() {
    for backend in [Backend::CpuOnly, Backend::Device(TestDevice::new())] {
        let pm = prepare(&Driver::new(backend), &add_model_with_pool());
        let io = Io::new(&INPUT);
        assert_eq!(
            pm.execute_synchronously(&io.request(16), MeasureTiming::No, None)
                .status,
            ErrorStatus::None
        );
        assert_eq!(io.output(), EXPECTED);
    }
}

#[test]
fn asynchronous_execute_gives_the_same_result() {
    let pm = prepare(
        &Driver::new(Backend::Device(TestDevice::new())),
        &add_model(&[1, 4]),
    );
    let io = Io::new(&INPUT);
    let r = pm.execute(io.request(16), MeasureTiming::No, None).wait();
    assert_eq!(r.status, ErrorStatus::None);
    assert_eq!(io.output(), EXPECTED);
}

#[test]
fn invalid_models_are_invalid_argument_everywhere() {
    let mut model = add_model(&[1, 4]);
    model.operations[0].inputs[0] = 99;
    let driver = Driver::new(Backend::CpuOnly);
    assert_eq!(
        driver.get_supported_operations(&model).unwrap_err(),
        ErrorStatus::InvalidArgument
    );
    assert_eq!(
        driver
            .prepare_model(
                &model,
                ExecutionPreference::FastSingleAnswer,
                Priority::Medium,
                None
            )
            .unwrap_err(),
        ErrorStatus::InvalidArgument
    );
}

/// The device's live-object counters (all files).
fn live(dev: &TestDevice) -> LiveObjects {
    crate::device::DeviceInfo::query(&dev.inner).unwrap().live
}

/// `add_model` with its constant (operand 1) read from `pool` at `offset`.
fn add_model_with_pool_constant(pool: Memory, offset: u32) -> Model {
    let mut model = add_model(&[1, 4]);
    model.pools.push(pool);
    model.operands[1].lifetime = OperandLifetime::ConstantReference;
    model.operands[1].location = DataLocation {
        pool_index: 0,
        offset,
        length: 16,
        padding: 0,
    };
    model
}

/// A model whose constant lives in a memfd pool: preparing it imports the pool as a BO.
fn add_model_with_pool() -> Model {
    let fd = sys::memfd_create(c"weights", 4096).unwrap();
    Mapping::map_shared(fd.as_fd(), 0, 4096, true)
        .unwrap()
        .write_at(128, &f32_bytes(&[1.0, 2.0, 3.0, 4.0]))
        .unwrap();
    let pool = Memory {
        kind: MemoryKind::Ashmem,
        fd: Arc::new(fd),
        size: 4096,
    };
    add_model_with_pool_constant(pool, 128)
}

/// One burst execution of `io`'s request with its pool in `slot`, which must succeed.
fn run_in_burst(pm: &PreparedModel, io: &Io, cache: &mut crate::driver::BurstCache, slot: i32) {
    let r = pm.execute_in_burst(
        LOCAL_OWNER,
        &io.request(16),
        MeasureTiming::No,
        cache,
        &[slot],
    );
    assert_eq!(r.status, ErrorStatus::None);
    assert_eq!(io.output(), EXPECTED);
}

#[test]
fn every_device_object_the_driver_makes_is_released_when_dropped() {
    let dev = TestDevice::new();
    let before = live(&dev);
    let driver = Driver::new(Backend::Device(dev.clone()));
    let pm = prepare(&driver, &add_model_with_pool());
    assert!(pm.runs_on_device());
    // The probe programs are gone; one program and its queue remain. The pool's BO is gone
    // too: the device copied the constant out at PROGRAM_CREATE (docs/uapi.md) and the
    // driver closed its handle.
    let prepared = live(&dev);
    assert_eq!(prepared.programs, before.programs + 1);
    assert_eq!(prepared.bos, before.bos);
    assert_eq!(prepared.queues, before.queues + 1);
    let start = prepared;
    // A regular execution imports its pool for the job only.
    let io = Io::new(&INPUT);
    let r = pm.execute_synchronously(&io.request(16), MeasureTiming::No, None);
    assert_eq!(r.status, ErrorStatus::None);
    assert_eq!(io.output(), EXPECTED);
    assert_eq!(live(&dev).bos, start.bos);
    // A burst keeps the slot's BO (and its own queue) until the slot is freed or it ends.
    let mut cache = crate::driver::BurstCache::new();
    run_in_burst(&pm, &io, &mut cache, 5);
    assert_eq!(live(&dev).bos, start.bos + 1);
    cache.forget(5);
    assert_eq!(live(&dev).bos, start.bos);
    run_in_burst(&pm, &io, &mut cache, 6);
    assert_eq!(live(&dev).bos, start.bos + 1);
    drop(cache);
    assert_eq!(live(&dev).bos, start.bos);
    // A memory-domain buffer holds a device BO while it lives.
    let buffer = driver
        .allocate(
            LOCAL_OWNER,
            &BufferDesc::default(),
            &[&pm],
            &[BufferRole {
                model_index: 0,
                io_index: 0,
                frequency: 1.0,
            }],
            &[],
        )
        .unwrap();
    assert_eq!(live(&dev).bos, start.bos + 1);
    drop(buffer);
    assert_eq!(live(&dev).bos, start.bos);
    drop(pm);
    assert_eq!(live(&dev), before);
}

#[test]
fn objects_of_a_dead_device_are_given_up_without_a_call() {
    let dev = TestDevice::new();
    let driver = Driver::new(Backend::Device(dev.clone()));
    let pm = prepare(&driver, &add_model_with_pool());
    assert!(pm.runs_on_device());
    let io = Io::new(&INPUT);
    let mut cache = crate::driver::BurstCache::new();
    run_in_burst(&pm, &io, &mut cache, 1);
    let held = live(&dev);
    assert_eq!(held.programs, 1);
    // The device dies; an execution notices (and falls back to the CPU).
    dev.dead.store(true, Ordering::SeqCst);
    let r = pm.execute_synchronously(&io.request(16), MeasureTiming::No, None);
    assert_eq!(r.status, ErrorStatus::None);
    assert!(!pm.runs_on_device());
    // Freeing the burst's slot BO and the program makes no call to the dead device (a hung
    // one could block); the queues' RingQueue destroys are the only calls left.
    let calls = dev.calls.load(Ordering::SeqCst);
    cache.forget(1);
    assert_eq!(dev.calls.load(Ordering::SeqCst), calls, "no BO_CLOSE");
    dev.dead.store(false, Ordering::SeqCst);
    assert_eq!(live(&dev).bos, held.bos, "the BO was given up, not closed");
    dev.dead.store(true, Ordering::SeqCst);
    let calls = dev.calls.load(Ordering::SeqCst);
    drop(cache);
    drop(pm);
    assert_eq!(
        dev.calls.load(Ordering::SeqCst),
        calls + 2,
        "the two QUEUE_DESTROYs (the burst's queue and the model's), no PROGRAM_DESTROY"
    );
    dev.dead.store(false, Ordering::SeqCst);
    assert_eq!(
        live(&dev).programs,
        1,
        "the program was given up, not destroyed"
    );
}
