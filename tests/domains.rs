//! Memory domains end to end (NN HAL 1.3 `allocate`, `IBuffer`, tokens in requests; see
//! `docs/domains.md`): the VTS MemoryDomainTests cases — 15 allocate, 7 copy, 7 execution
//! (sync, async and burst) — over one ADD with dims {1, 32, 32, 8} in FLOAT32 and QUANT8_ASYMM, on
//! the in-process CPU driver, on `nnaccel-hald` over the simulated device and CPU-only;
//! copies with every pool kind (hardware_buffer_blob from each source the machine has); two
//! clients, one naming the other's token; a concurrent read/write stress; dynamic outputs of
//! changing shapes; device memory returned when buffers are freed and when a client dies;
//! buffers outliving their device; malformed memory-domain messages.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Write;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nnaccel_hal::burst::BurstConfig;
use nnaccel_hal::{
    Backend, BufferDesc, BufferRole, DataLocation, Driver, ErrorStatus, ExecutionResult, HalBuffer,
    HalDevice, HalPreparedModel, MeasureTiming, Memory, MemoryKind, MemoryPool, Model, Operand,
    OperandLifetime, OperandType, Operation, OperationType, Request, RequestArgument,
    execute_async,
};
use nnaccel_protocol::client::ServiceClient;
use nnaccel_protocol::pools::{self, BlobSource, MappedClientPool};
use nnaccel_tests::service::{Hald, prepare, spawn_child_test};
use nnaccel_tests::{Sim, poll_until, require_privileges, scaled, with_timeout};

const DIMS: [u32; 4] = [1, 32, 32, 8];
const ELEMENTS: usize = 32 * 32 * 8;

fn limit() -> Duration {
    scaled(Duration::from_secs(120))
}

// ---------------------------------------------------------------------------------------------
// Models and data

/// The operand type of a test model: FLOAT32, or QUANT8_ASYMM with a scale and zero point.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Ty {
    ty: OperandType,
    scale: f32,
    zero_point: i32,
}

const F32: Ty = Ty {
    ty: OperandType::TensorFloat32,
    scale: 0.0,
    zero_point: 0,
};
const Q8: Ty = Ty {
    ty: OperandType::TensorQuant8Asymm,
    scale: 0.5,
    zero_point: 0,
};

impl Ty {
    fn bytes(self) -> u64 {
        (ELEMENTS * self.ty.element_size()) as u64
    }

    /// Test data: small values whose sums are exact in both types.
    fn data(self, seed: u32) -> Vec<u8> {
        (0..ELEMENTS as u32)
            .flat_map(|i| {
                let v = (i * 7 + seed * 13) % 50;
                if self == F32 {
                    (v as f32).to_le_bytes().to_vec()
                } else {
                    vec![v as u8]
                }
            })
            .collect()
    }

    /// ADD of two tensors of this type (same scale and zero point 0 everywhere).
    fn add(self, a: &[u8], b: &[u8]) -> Vec<u8> {
        if self == F32 {
            a.chunks_exact(4)
                .zip(b.chunks_exact(4))
                .flat_map(|(x, y)| {
                    let x = f32::from_le_bytes(x.try_into().unwrap());
                    let y = f32::from_le_bytes(y.try_into().unwrap());
                    (x + y).to_le_bytes()
                })
                .collect()
        } else {
            a.iter().zip(b).map(|(x, y)| x.saturating_add(*y)).collect()
        }
    }
}

fn operand(t: Ty, dims: &[u32], lifetime: OperandLifetime) -> Operand {
    Operand {
        operand_type: t.ty,
        dimensions: dims.to_vec(),
        scale: t.scale,
        zero_point: t.zero_point,
        lifetime,
        location: DataLocation::default(),
        extra_params: None,
    }
}

fn activation(m: &mut Model) -> u32 {
    let offset = m.operand_values.len() as u32;
    m.operand_values.extend_from_slice(&0i32.to_le_bytes());
    m.operands.push(Operand {
        operand_type: OperandType::Int32,
        dimensions: vec![],
        scale: 0.0,
        zero_point: 0,
        lifetime: OperandLifetime::ConstantCopy,
        location: DataLocation {
            pool_index: 0,
            offset,
            length: 4,
            padding: 0,
        },
        extra_params: None,
    });
    (m.operands.len() - 1) as u32
}

/// `out_k = a + b` for each of `outputs` outputs (one ADD each), inputs a and b of `dims`.
fn add_model_n(t: Ty, dims: &[u32], outputs: usize) -> Model {
    let mut m = Model::default();
    m.operands
        .push(operand(t, dims, OperandLifetime::SubgraphInput));
    m.operands
        .push(operand(t, dims, OperandLifetime::SubgraphInput));
    m.input_indexes = vec![0, 1];
    let act = activation(&mut m);
    for _ in 0..outputs {
        m.operands
            .push(operand(t, dims, OperandLifetime::SubgraphOutput));
        let out = (m.operands.len() - 1) as u32;
        m.output_indexes.push(out);
        m.operations.push(Operation {
            operation_type: OperationType::Add,
            inputs: vec![0, 1, act],
            outputs: vec![out],
        });
    }
    m
}

fn add_model(t: Ty, dims: &[u32]) -> Model {
    add_model_n(t, dims, 1)
}

/// The test operand's dimensions with the batch unknown (the VTS "dynamic shape" variants).
fn dynamic_dims() -> Vec<u32> {
    let mut d = DIMS.to_vec();
    d[0] = 0;
    d
}

/// ADD whose fused activation is a model input (an INT32 scalar role).
fn scalar_input_model(t: Ty) -> Model {
    let mut m = Model::default();
    m.operands
        .push(operand(t, &DIMS, OperandLifetime::SubgraphInput));
    m.operands
        .push(operand(t, &DIMS, OperandLifetime::SubgraphInput));
    m.operands.push(Operand {
        operand_type: OperandType::Int32,
        dimensions: vec![],
        scale: 0.0,
        zero_point: 0,
        lifetime: OperandLifetime::SubgraphInput,
        location: DataLocation::default(),
        extra_params: None,
    });
    m.operands
        .push(operand(t, &DIMS, OperandLifetime::SubgraphOutput));
    m.input_indexes = vec![0, 1, 2];
    m.output_indexes = vec![3];
    m.operations.push(Operation {
        operation_type: OperationType::Add,
        inputs: vec![0, 1, 2],
        outputs: vec![3],
    });
    m
}

fn role(model_index: u32, io_index: u32) -> BufferRole {
    BufferRole {
        model_index,
        io_index,
        frequency: 1.0,
    }
}

fn desc(dims: &[u32]) -> BufferDesc {
    BufferDesc {
        dimensions: dims.to_vec(),
    }
}

/// A shared-memory pool holding `bytes`.
fn pool_with(bytes: &[u8]) -> Memory {
    let m = pools::ashmem(bytes.len() as u64).unwrap();
    MappedClientPool::new(&m).unwrap().write(0, bytes).unwrap();
    m
}

fn read_pool(m: &Memory) -> Vec<u8> {
    MappedClientPool::new(m)
        .unwrap()
        .read(0, m.size as usize)
        .unwrap()
}

/// Where a request argument comes from.
#[derive(Clone)]
enum Src {
    Mem(Memory),
    Token(u32),
}

/// A request with one pool per argument.
fn req(inputs: &[Src], outputs: &[Src]) -> Request {
    let mut r = Request::default();
    let mut add = |s: &Src| {
        let pool_index = r.pools.len() as u32;
        let length = match s {
            Src::Mem(m) => {
                r.pools.push(MemoryPool::Memory(m.clone()));
                m.size as u32
            }
            Src::Token(t) => {
                r.pools.push(MemoryPool::Token(*t));
                0
            }
        };
        RequestArgument {
            has_no_value: false,
            location: DataLocation {
                pool_index,
                offset: 0,
                length,
                padding: 0,
            },
            dimensions: vec![],
        }
    };
    let ins: Vec<_> = inputs.iter().map(&mut add).collect();
    let outs: Vec<_> = outputs.iter().map(&mut add).collect();
    r.inputs = ins;
    r.outputs = outs;
    r
}

/// How an execution is issued: the VTS sync and async paths, and a burst (its own FMQs and
/// worker; the token travels as the slot's memory in the getMemories answer).
#[derive(Clone, Copy, Debug)]
enum Path {
    Sync,
    Async,
    Burst,
}

const PATHS: [Path; 3] = [Path::Sync, Path::Async, Path::Burst];

fn run(path: Path, pm: &Arc<dyn HalPreparedModel>, r: &Request) -> ExecutionResult {
    match path {
        Path::Sync => pm.execute_synchronously(r, MeasureTiming::No, None),
        Path::Async => execute_async(pm.clone(), r.clone(), MeasureTiming::No, None).wait(),
        Path::Burst => pm
            .configure_execution_burst(BurstConfig::default())
            .expect("configure a burst")
            .execute(r, MeasureTiming::No),
    }
}

#[track_caller]
fn expect_status(r: &ExecutionResult, status: ErrorStatus, what: &str) {
    assert_eq!(r.status, status, "{what}: {r:?}");
    if status != ErrorStatus::None {
        assert!(
            r.output_shapes.is_empty(),
            "{what}: failures report no shapes"
        );
    }
}

#[track_caller]
fn expect_err<T: std::fmt::Debug>(r: Result<T, ErrorStatus>, status: ErrorStatus, what: &str) {
    match r {
        Err(s) => assert_eq!(s, status, "{what}"),
        Ok(v) => panic!("{what}: expected {status}, got {v:?}"),
    }
}

fn alloc(
    dev: &dyn HalDevice,
    d: &[u32],
    models: &[&Arc<dyn HalPreparedModel>],
    ins: &[BufferRole],
    outs: &[BufferRole],
) -> Result<Arc<dyn HalBuffer>, ErrorStatus> {
    let models: Vec<Arc<dyn HalPreparedModel>> = models.iter().map(|m| (*m).clone()).collect();
    dev.allocate(&desc(d), &models, ins, outs)
}

fn prep(dev: &dyn HalDevice, m: &Model) -> Arc<dyn HalPreparedModel> {
    prepare(dev, m).unwrap_or_else(|s| panic!("prepare: {s}"))
}

// ---------------------------------------------------------------------------------------------
// Backends

fn cpu_driver() -> Driver {
    Driver::new(Backend::CpuOnly)
}

fn with_device_service(body: impl FnOnce(&Sim, &Hald) + Send + 'static) {
    if !require_privileges() {
        return;
    }
    with_timeout(limit(), "domains test", move || {
        let sim = Sim::new();
        let hald = Hald::with_device(&sim);
        body(&sim, &hald);
        drop(hald);
        drop(sim);
    });
}

fn with_cpu_service(body: impl FnOnce(&Hald) + Send + 'static) {
    with_timeout(limit(), "domains cpu service test", move || {
        let hald = Hald::cpu_only();
        body(&hald);
    });
}

// ---------------------------------------------------------------------------------------------
// VTS: 15 allocate cases

/// The allocate cases of MemoryDomainTests, each answered INVALID_ARGUMENT with no buffer,
/// plus valid allocations (tokens > 0, distinct, reused once freed). `foreign` is a prepared
/// model of another device or connection.
fn allocate_cases(dev: &dyn HalDevice, foreign: &Arc<dyn HalPreparedModel>, t: Ty) {
    let pm = prep(dev, &add_model(t, &DIMS));
    let invalid = ErrorStatus::InvalidArgument;
    // Valid: every role, desc empty or equal; tokens > 0 and distinct.
    let a = alloc(dev, &[], &[&pm], &[role(0, 0), role(0, 1)], &[role(0, 0)]).unwrap();
    let b = alloc(dev, &DIMS, &[&pm], &[role(0, 0)], &[]).unwrap();
    assert!(a.token() > 0 && b.token() > 0 && a.token() != b.token());
    let freed = b.token();
    drop(b);
    let c = alloc(dev, &[0, 32, 0, 8], &[&pm], &[], &[role(0, 0)]).unwrap();
    assert_eq!(c.token(), freed, "a freed token is reused");

    // 1. no roles
    expect_err(alloc(dev, &[], &[&pm], &[], &[]), invalid, "no roles");
    // 2. a prepared model of another device / connection
    expect_err(
        alloc(dev, &[], &[foreign], &[role(0, 0)], &[]),
        invalid,
        "foreign prepared model",
    );
    // 3. model index out of range
    expect_err(
        alloc(dev, &[], &[&pm], &[role(1, 0)], &[]),
        invalid,
        "model index",
    );
    // 4. input index out of range
    expect_err(
        alloc(dev, &[], &[&pm], &[role(0, 2)], &[]),
        invalid,
        "input index",
    );
    // 5. output index out of range
    expect_err(
        alloc(dev, &[], &[&pm], &[], &[role(0, 1)]),
        invalid,
        "output index",
    );
    // 6. frequency outside (0, 1]
    for f in [0.0, -0.5, 1.1, f32::NAN] {
        let r = BufferRole {
            frequency: f,
            ..role(0, 0)
        };
        expect_err(alloc(dev, &[], &[&pm], &[r], &[]), invalid, "frequency");
    }
    // 7. the same input role twice
    expect_err(
        alloc(dev, &[], &[&pm], &[role(0, 0), role(0, 0)], &[]),
        invalid,
        "same input role twice",
    );
    // 8. the same output role twice
    expect_err(
        alloc(dev, &[], &[&pm], &[], &[role(0, 0), role(0, 0)]),
        invalid,
        "same output role twice",
    );
    // 9. operand types differ
    let other_type = if t == F32 { Q8 } else { F32 };
    let pm_type = prep(dev, &add_model(other_type, &DIMS));
    expect_err(
        alloc(dev, &[], &[&pm, &pm_type], &[role(0, 0), role(1, 0)], &[]),
        invalid,
        "conflicting operand type",
    );
    // 10, 11. scale, zero point differ (quantized models; float models have neither)
    let q = Ty { scale: 0.25, ..Q8 };
    let zp = Ty {
        zero_point: 3,
        ..Q8
    };
    let pm_q8 = prep(dev, &add_model(Q8, &DIMS));
    let pm_scale = prep(dev, &add_model(q, &DIMS));
    let pm_zp = prep(dev, &add_model(zp, &DIMS));
    expect_err(
        alloc(
            dev,
            &[],
            &[&pm_q8, &pm_scale],
            &[role(0, 0), role(1, 0)],
            &[],
        ),
        invalid,
        "conflicting scale",
    );
    expect_err(
        alloc(dev, &[], &[&pm_q8, &pm_zp], &[role(0, 0), role(1, 0)], &[]),
        invalid,
        "conflicting zero point",
    );
    // 12. ranks differ between roles
    let pm_rank = prep(dev, &add_model(t, &[32, 32, 8]));
    expect_err(
        alloc(dev, &[], &[&pm, &pm_rank], &[role(0, 0), role(1, 0)], &[]),
        invalid,
        "conflicting rank between roles",
    );
    // 13. extents differ between roles
    let pm_dims = prep(dev, &add_model(t, &[2, 32, 32, 8]));
    expect_err(
        alloc(dev, &[], &[&pm, &pm_dims], &[role(0, 0)], &[role(1, 0)]),
        invalid,
        "conflicting dimensions between roles",
    );
    // 14. dimensions on a scalar role
    let pm_scalar = prep(dev, &scalar_input_model(t));
    expect_err(
        alloc(dev, &[1], &[&pm_scalar], &[role(0, 2)], &[]),
        invalid,
        "dimensions on a scalar role",
    );
    // 15. rank, then extents, of the desc against the role
    expect_err(
        alloc(dev, &[1, 32, 32], &[&pm], &[role(0, 0)], &[]),
        invalid,
        "conflicting rank between role and desc",
    );
    expect_err(
        alloc(dev, &[4, 32, 32, 8], &[&pm], &[role(0, 0)], &[]),
        invalid,
        "conflicting dimensions between role and desc",
    );
    drop((a, c));
}

#[test]
fn allocate_refuses_every_invalid_request_in_process() {
    let dev = cpu_driver();
    let other = cpu_driver();
    let foreign = prep(&other, &add_model(F32, &DIMS));
    for t in [F32, Q8] {
        allocate_cases(&dev, &foreign, t);
    }
}

#[test]
fn allocate_refuses_every_invalid_request_on_the_device_service() {
    with_device_service(|_sim, hald| {
        let c = hald.client();
        let other = hald.client();
        let foreign = prep(&other, &add_model(F32, &DIMS));
        for t in [F32, Q8] {
            allocate_cases(&c, &foreign, t);
        }
        assert_eq!(c.info().unwrap().domain_buffers, 0, "every buffer freed");
    });
}

#[test]
fn allocate_refuses_every_invalid_request_on_the_cpu_service() {
    with_cpu_service(|hald| {
        let c = hald.client();
        let foreign = prep(&cpu_driver(), &add_model(F32, &DIMS));
        allocate_cases(&c, &foreign, F32);
    });
}

// ---------------------------------------------------------------------------------------------
// VTS: 7 copy cases

fn ashmem(size: u64) -> Memory {
    pools::ashmem(size).unwrap()
}

/// The copy cases of MemoryDomainTests: copyFrom with memory ×½ and ×2 (fixed and dynamic
/// shape), bad rank / extents / zero extent (fixed and dynamic), copyTo uninitialized, and
/// copyTo with memory ×½ and ×2 (fixed and dynamic).
fn copy_cases(dev: &dyn HalDevice, t: Ty) {
    let invalid = ErrorStatus::InvalidArgument;
    let size = t.bytes();
    let fixed = prep(dev, &add_model(t, &DIMS));
    let dynamic = prep(dev, &add_model(t, &dynamic_dims()));
    let data = t.data(1);
    let good = pool_with(&data);

    // 1. copyFrom with memory of the wrong size.
    let b = alloc(dev, &[], &[&fixed], &[role(0, 0)], &[]).unwrap();
    for bad in [size / 2, size * 2] {
        expect_err(b.copy_from(&ashmem(bad), &[]), invalid, "copyFrom size");
    }
    // 2. the same with a dynamic shape.
    let d = alloc(dev, &[], &[&dynamic], &[role(0, 0)], &[]).unwrap();
    for bad in [size / 2, size * 2] {
        expect_err(
            d.copy_from(&ashmem(bad), &DIMS),
            invalid,
            "copyFrom size (dynamic)",
        );
    }
    // 3. copyFrom with bad dimensions; {} and the right ones work.
    let mut rank = DIMS.to_vec();
    rank.pop();
    let mut extent = DIMS.to_vec();
    extent[0] = 2;
    let mut zero = DIMS.to_vec();
    zero[0] = 0;
    for bad in [&rank, &extent, &zero] {
        expect_err(b.copy_from(&good, bad), invalid, "copyFrom dimensions");
    }
    b.copy_from(&good, &[]).unwrap();
    b.copy_from(&good, &DIMS).unwrap();
    // 4. the same with a dynamic shape: {} is not enough there.
    for bad in [&rank, &extent, &zero, &vec![]] {
        expect_err(
            d.copy_from(&good, bad),
            invalid,
            "copyFrom dimensions (dynamic)",
        );
    }
    d.copy_from(&good, &DIMS).unwrap();
    // 5. copyTo from an uninitialized buffer.
    let u = alloc(dev, &[], &[&fixed], &[role(0, 0)], &[]).unwrap();
    expect_err(
        u.copy_to(&ashmem(size)),
        ErrorStatus::GeneralFailure,
        "copyTo uninitialized",
    );
    // 6. copyTo with memory of the wrong size; the right size gives the data back.
    for bad in [size / 2, size * 2] {
        expect_err(b.copy_to(&ashmem(bad)), invalid, "copyTo size");
    }
    let back = ashmem(size);
    b.copy_to(&back).unwrap();
    assert_eq!(read_pool(&back), data, "copyFrom then copyTo round trip");
    // 7. the same with a dynamic shape.
    for bad in [size / 2, size * 2] {
        expect_err(d.copy_to(&ashmem(bad)), invalid, "copyTo size (dynamic)");
    }
    let back = ashmem(size);
    d.copy_to(&back).unwrap();
    assert_eq!(read_pool(&back), data, "dynamic round trip");
}

/// copyFrom and copyTo through every pool kind that can hold data: ashmem, mmap_fd (a memfd
/// at a page offset) and hardware_buffer_blob from each source this machine has (required in
/// the QEMU guest).
fn copy_through_every_pool_kind(dev: &dyn HalDevice, t: Ty) {
    let require = std::env::var("NNACCEL_REQUIRE_KERNEL_FEATURES").is_ok_and(|v| v == "1");
    let size = t.bytes();
    let pm = prep(dev, &add_model(t, &DIMS));
    let b = alloc(dev, &[], &[&pm], &[role(0, 0)], &[role(0, 0)]).unwrap();
    let mut kinds: Vec<(String, Box<dyn Fn() -> Memory>)> = vec![
        ("ashmem".into(), Box::new(move || ashmem(size))),
        (
            "mmap_fd".into(),
            Box::new(move || {
                let fd = nnaccel_uapi::sys::memfd_create(c"domains-mmap-fd", 4096 + size).unwrap();
                pools::mmap_fd(fd, 4096, size, libc::PROT_READ | libc::PROT_WRITE)
            }),
        ),
    ];
    for source in [
        BlobSource::DmaHeap,
        BlobSource::Udmabuf,
        BlobSource::SealedMemfd,
    ] {
        match pools::hardware_buffer_blob_from(source, size) {
            Ok(_) => kinds.push((
                format!("hardware_buffer_blob ({})", source.name()),
                Box::new(move || pools::hardware_buffer_blob_from(source, size).unwrap()),
            )),
            Err(e) => {
                assert!(!require, "{}: {e} (required here)", source.name());
                eprintln!("SKIPPED hardware_buffer_blob from {}: {e}", source.name());
            }
        }
    }
    for (seed, (name, make)) in kinds.iter().enumerate() {
        let data = t.data(seed as u32 + 10);
        let src = make();
        MappedClientPool::new(&src)
            .unwrap()
            .write(0, &data)
            .unwrap();
        b.copy_from(&src, &DIMS)
            .unwrap_or_else(|s| panic!("copyFrom {name}: {s}"));
        let dst = make();
        b.copy_to(&dst)
            .unwrap_or_else(|s| panic!("copyTo {name}: {s}"));
        let got = MappedClientPool::new(&dst)
            .unwrap()
            .read(0, size as usize)
            .unwrap();
        assert_eq!(got, data, "{name}: the data came back");
        if matches!(src.kind, MemoryKind::HardwareBufferBlob) {
            assert_eq!(
                nnaccel_uapi::sys::is_dmabuf(src.fd.as_fd()),
                !name.contains("sealed-memfd"),
                "{name}: a dma-buf exactly when the source makes one"
            );
        }
    }
}

#[test]
fn copy_cases_follow_the_size_and_dimension_rules_in_process() {
    let dev = cpu_driver();
    for t in [F32, Q8] {
        copy_cases(&dev, t);
        copy_through_every_pool_kind(&dev, t);
    }
}

#[test]
fn copy_cases_follow_the_size_and_dimension_rules_on_the_device_service() {
    with_device_service(|_sim, hald| {
        let c = hald.client();
        for t in [F32, Q8] {
            copy_cases(&c, t);
            copy_through_every_pool_kind(&c, t);
        }
    });
}

#[test]
fn copy_cases_follow_the_size_and_dimension_rules_on_the_cpu_service() {
    with_cpu_service(|hald| {
        let c = hald.client();
        copy_cases(&c, F32);
        copy_through_every_pool_kind(&c, Q8);
    });
}

// ---------------------------------------------------------------------------------------------
// VTS: 7 execution cases

/// The execution cases of MemoryDomainTests on `path`: tokens 0 and 100, a buffer of another
/// prepared model, a bad I/O index, the wrong I/O type, uninitialized then initialized, one
/// buffer in several roles, bad dimensions. Also checks the data a buffer carries.
fn execution_cases(dev: &dyn HalDevice, t: Ty, path: Path) {
    let invalid = ErrorStatus::InvalidArgument;
    let size = t.bytes();
    let pm = prep(dev, &add_model(t, &DIMS));
    let other = prep(dev, &add_model(t, &DIMS));
    let (a, b) = (t.data(1), t.data(2));
    let (ma, mb) = (pool_with(&a), pool_with(&b));
    let out = || Src::Mem(ashmem(size));
    let what = |s: &str| format!("{s} ({t:?}, {path:?})");

    // 1. tokens 0 and 100 (no such buffer), as input and as output.
    for token in [0, 100] {
        let r = run(
            path,
            &pm,
            &req(&[Src::Token(token), Src::Mem(mb.clone())], &[out()]),
        );
        expect_status(&r, invalid, &what("unknown token as input"));
        let r = run(
            path,
            &pm,
            &req(
                &[Src::Mem(ma.clone()), Src::Mem(mb.clone())],
                &[Src::Token(token)],
            ),
        );
        expect_status(&r, invalid, &what("unknown token as output"));
    }
    // 2. a buffer allocated for another prepared model.
    let foreign = alloc(dev, &[], &[&other], &[role(0, 0)], &[role(0, 0)]).unwrap();
    foreign.copy_from(&ma, &[]).unwrap();
    let r = run(
        path,
        &pm,
        &req(
            &[Src::Token(foreign.token()), Src::Mem(mb.clone())],
            &[out()],
        ),
    );
    expect_status(&r, invalid, &what("buffer of another prepared model"));
    // 3. a bad I/O index: allocated for input 0, used as input 1.
    let in0 = alloc(dev, &[], &[&pm], &[role(0, 0)], &[]).unwrap();
    in0.copy_from(&ma, &[]).unwrap();
    let r = run(
        path,
        &pm,
        &req(&[Src::Mem(ma.clone()), Src::Token(in0.token())], &[out()]),
    );
    expect_status(&r, invalid, &what("input role index not granted"));
    // 4. the wrong I/O type: an input buffer as output, an output buffer as input.
    let r = run(
        path,
        &pm,
        &req(
            &[Src::Mem(ma.clone()), Src::Mem(mb.clone())],
            &[Src::Token(in0.token())],
        ),
    );
    expect_status(&r, invalid, &what("input buffer as output"));
    let out0 = alloc(dev, &[], &[&pm], &[], &[role(0, 0)]).unwrap();
    out0.copy_from(&ma, &[]).unwrap();
    let r = run(
        path,
        &pm,
        &req(&[Src::Token(out0.token()), Src::Mem(mb.clone())], &[out()]),
    );
    expect_status(&r, invalid, &what("output buffer as input"));
    // 5. uninitialized as input: GENERAL_FAILURE; written as an output, it works as input.
    let state = alloc(dev, &[], &[&pm], &[role(0, 0)], &[role(0, 0)]).unwrap();
    let r = run(
        path,
        &pm,
        &req(&[Src::Token(state.token()), Src::Mem(mb.clone())], &[out()]),
    );
    expect_status(
        &r,
        ErrorStatus::GeneralFailure,
        &what("uninitialized input"),
    );
    let r = run(
        path,
        &pm,
        &req(
            &[Src::Mem(ma.clone()), Src::Mem(mb.clone())],
            &[Src::Token(state.token())],
        ),
    );
    expect_status(&r, ErrorStatus::None, &what("write the buffer as output"));
    assert_eq!(r.output_shapes[0].dimensions, DIMS.to_vec());
    let result = ashmem(size);
    let r = run(
        path,
        &pm,
        &req(
            &[Src::Token(state.token()), Src::Mem(mb.clone())],
            &[Src::Mem(result.clone())],
        ),
    );
    expect_status(
        &r,
        ErrorStatus::None,
        &what("the initialized buffer as input"),
    );
    assert_eq!(
        read_pool(&result),
        t.add(&t.add(&a, &b), &b),
        "{}",
        what("(a + b) + b through the buffer")
    );
    // A failed write (the deadline has passed) un-initializes it.
    let late = pm.execute_synchronously(
        &req(
            &[Src::Mem(ma.clone()), Src::Mem(mb.clone())],
            &[Src::Token(state.token())],
        ),
        MeasureTiming::No,
        Some(Instant::now()),
    );
    expect_status(
        &late,
        ErrorStatus::MissedDeadlineTransient,
        &what("a write past the deadline"),
    );
    expect_err(
        state.copy_to(&ashmem(size)),
        ErrorStatus::GeneralFailure,
        &what("uninitialized after a failed write"),
    );
    // 6. one buffer in several roles: both inputs is fine; input and output, or two
    // outputs, is not.
    let multi = alloc(dev, &[], &[&pm], &[role(0, 0), role(0, 1)], &[role(0, 0)]).unwrap();
    multi.copy_from(&ma, &[]).unwrap();
    let result = ashmem(size);
    let r = run(
        path,
        &pm,
        &req(
            &[Src::Token(multi.token()), Src::Token(multi.token())],
            &[Src::Mem(result.clone())],
        ),
    );
    expect_status(
        &r,
        ErrorStatus::None,
        &what("the same buffer as both inputs"),
    );
    assert_eq!(read_pool(&result), t.add(&a, &a));
    let r = run(
        path,
        &pm,
        &req(
            &[Src::Token(multi.token()), Src::Mem(mb.clone())],
            &[Src::Token(multi.token())],
        ),
    );
    expect_status(&r, invalid, &what("the same buffer as input and output"));
    let two = prep(dev, &add_model_n(t, &DIMS, 2));
    let both = alloc(dev, &[], &[&two], &[], &[role(0, 0), role(0, 1)]).unwrap();
    let r = run(
        path,
        &two,
        &req(
            &[Src::Mem(ma.clone()), Src::Mem(mb.clone())],
            &[Src::Token(both.token()), Src::Token(both.token())],
        ),
    );
    expect_status(&r, invalid, &what("the same buffer as two outputs"));
    // 7. bad dimensions: the request's dimensions conflict with the buffer's.
    let dynamic = prep(dev, &add_model(t, &dynamic_dims()));
    let dbuf = alloc(dev, &[], &[&dynamic], &[role(0, 0)], &[role(0, 0)]).unwrap();
    dbuf.copy_from(&ma, &DIMS).unwrap();
    let mut r2 = req(
        &[Src::Token(dbuf.token()), Src::Mem(ashmem(2 * size))],
        &[Src::Mem(ashmem(2 * size))],
    );
    r2.inputs[0].dimensions = vec![2, 32, 32, 8];
    r2.inputs[1].dimensions = vec![2, 32, 32, 8];
    expect_status(
        &run(path, &dynamic, &r2),
        invalid,
        &what("input dimensions"),
    );
    let fixed_buf = alloc(dev, &DIMS, &[&dynamic], &[], &[role(0, 0)]).unwrap();
    let mut r3 = req(
        &[Src::Mem(ma.clone()), Src::Mem(mb.clone())],
        &[Src::Token(fixed_buf.token())],
    );
    for arg in r3.inputs.iter_mut() {
        arg.dimensions = DIMS.to_vec();
    }
    r3.outputs[0].dimensions = vec![2, 32, 32, 8];
    expect_status(
        &run(path, &dynamic, &r3),
        invalid,
        &what("output dimensions"),
    );
    // The right dimensions work.
    r3.outputs[0].dimensions = vec![];
    expect_status(
        &run(path, &dynamic, &r3),
        ErrorStatus::None,
        &what("output with its dims"),
    );
}

#[test]
fn execution_cases_check_every_token_use_in_process() {
    let dev = cpu_driver();
    for t in [F32, Q8] {
        for path in PATHS {
            execution_cases(&dev, t, path);
        }
    }
}

#[test]
fn execution_cases_check_every_token_use_on_the_device_service() {
    with_device_service(|_sim, hald| {
        let c = hald.client();
        let pm = prep(&c, &add_model(F32, &DIMS));
        assert!(
            pm.runs_on_device(),
            "the fixed-shape ADD runs on the device"
        );
        for t in [F32, Q8] {
            for path in PATHS {
                execution_cases(&c, t, path);
            }
        }
    });
}

#[test]
fn execution_cases_check_every_token_use_on_the_cpu_service() {
    with_cpu_service(|hald| {
        let c = hald.client();
        execution_cases(&c, F32, Path::Sync);
        execution_cases(&c, Q8, Path::Async);
        execution_cases(&c, F32, Path::Burst);
    });
}

// ---------------------------------------------------------------------------------------------
// Dynamic outputs

/// A buffer of unknown shape takes outputs of different shapes in turn (its memory grows as
/// needed), and each time holds exactly the last output.
fn dynamic_outputs_resize(dev: &dyn HalDevice) {
    let t = F32;
    let pm = prep(dev, &add_model(t, &[0, 32, 32, 8]));
    let buf = alloc(dev, &[], &[&pm], &[role(0, 0)], &[role(0, 0)]).unwrap();
    for batch in [1u32, 3, 2] {
        let n = batch as usize * ELEMENTS;
        let a: Vec<u8> = (0..n)
            .flat_map(|i| ((i % 17) as f32).to_le_bytes())
            .collect();
        let b: Vec<u8> = (0..n)
            .flat_map(|i| ((i % 5) as f32).to_le_bytes())
            .collect();
        let dims = vec![batch, 32, 32, 8];
        let mut r = req(
            &[Src::Mem(pool_with(&a)), Src::Mem(pool_with(&b))],
            &[Src::Token(buf.token())],
        );
        r.inputs[0].dimensions = dims.clone();
        r.inputs[1].dimensions = dims.clone();
        let res = run(Path::Sync, &pm, &r);
        expect_status(
            &res,
            ErrorStatus::None,
            &format!("batch {batch} into the buffer"),
        );
        assert_eq!(res.output_shapes[0].dimensions, dims);
        let back = ashmem((n * 4) as u64);
        buf.copy_to(&back).unwrap();
        assert_eq!(read_pool(&back), t.add(&a, &b), "batch {batch}");
        // The buffer holds that shape now: a copyTo of another size is refused.
        expect_err(
            buf.copy_to(&ashmem((ELEMENTS * 4 * 4) as u64)),
            ErrorStatus::InvalidArgument,
            "copyTo of the wrong size",
        );
        // And it feeds the next execution as an input of that shape.
        let out = ashmem((n * 4) as u64);
        let mut r = req(
            &[Src::Token(buf.token()), Src::Mem(pool_with(&b))],
            &[Src::Mem(out.clone())],
        );
        r.inputs[1].dimensions = dims.clone();
        let res = run(Path::Sync, &pm, &r);
        expect_status(&res, ErrorStatus::None, "the buffer as a dynamic input");
        assert_eq!(read_pool(&out), t.add(&t.add(&a, &b), &b));
    }
}

#[test]
fn dynamic_outputs_of_changing_shapes_fill_one_buffer_in_process() {
    dynamic_outputs_resize(&cpu_driver());
}

#[test]
fn dynamic_outputs_of_changing_shapes_fill_one_buffer_on_the_device_service() {
    with_device_service(|_sim, hald| dynamic_outputs_resize(&hald.client()));
}

// ---------------------------------------------------------------------------------------------
// Ownership

/// Two clients: the second names the first's token, in an execution and in copies (with the
/// protocol's own messages), and gets INVALID_ARGUMENT; the owner keeps using it.
fn two_clients(hald: &Hald) {
    let t = F32;
    let size = t.bytes();
    let (c1, c2) = (hald.client(), hald.client());
    let pm1 = prep(&c1, &add_model(t, &DIMS));
    let pm2 = prep(&c2, &add_model(t, &DIMS));
    let b1 = alloc(&c1, &[], &[&pm1], &[role(0, 0)], &[role(0, 0)]).unwrap();
    let data = t.data(5);
    b1.copy_from(&pool_with(&data), &[]).unwrap();
    let mb = pool_with(&t.data(6));
    let r = req(
        &[Src::Token(b1.token()), Src::Mem(mb.clone())],
        &[Src::Mem(ashmem(size))],
    );
    expect_status(
        &run(Path::Sync, &pm2, &r),
        ErrorStatus::InvalidArgument,
        "another client's token as input",
    );
    let w = req(
        &[Src::Mem(mb.clone()), Src::Mem(mb.clone())],
        &[Src::Token(b1.token())],
    );
    expect_status(
        &run(Path::Sync, &pm2, &w),
        ErrorStatus::InvalidArgument,
        "another client's token as output",
    );
    // The same token through the protocol's copy and free messages of the other connection.
    let raw = |msg: nnaccel_protocol::ClientMessage, mem: Option<&Memory>| {
        let sock = std::os::unix::net::UnixStream::connect(hald.socket()).unwrap();
        let hello = nnaccel_protocol::ClientMessage::Hello {
            version: nnaccel_protocol::PROTOCOL_VERSION,
            client: "intruder".into(),
        };
        for (m, fds) in [(hello, None), (msg, mem)] {
            let body = nnaccel_protocol::encode(&m).unwrap();
            let fds: Vec<_> = fds.iter().map(|m| m.fd.as_fd()).collect();
            nnaccel_protocol::send_frame(&sock, &body, &fds).unwrap();
            let (answer, _) = nnaccel_protocol::recv_frame(&sock, 1 << 20).unwrap();
            let answer: nnaccel_protocol::ServiceMessage =
                nnaccel_protocol::decode(&answer).unwrap();
            if let nnaccel_protocol::ServiceMessage::Hello { .. } = answer {
                continue;
            }
            return answer;
        }
        unreachable!()
    };
    let wire_mem = nnaccel_protocol::WireMemory {
        kind: 0,
        prot: 0,
        offset: 0,
        size,
        fd_index: 0,
    };
    let stolen = ashmem(size);
    for msg in [
        nnaccel_protocol::ClientMessage::CopyTo {
            token: b1.token(),
            memory: wire_mem.clone(),
        },
        nnaccel_protocol::ClientMessage::CopyFrom {
            token: b1.token(),
            memory: wire_mem.clone(),
            dimensions: vec![],
        },
    ] {
        match raw(msg, Some(&stolen)) {
            nnaccel_protocol::ServiceMessage::Error { status, .. } => {
                assert_eq!(status, ErrorStatus::InvalidArgument.code())
            }
            other => panic!("another connection's copy of the token: {other:?}"),
        }
    }
    match raw(
        nnaccel_protocol::ClientMessage::FreeBuffer { token: b1.token() },
        None,
    ) {
        nnaccel_protocol::ServiceMessage::Error { status, .. } => {
            assert_eq!(status, ErrorStatus::InvalidArgument.code())
        }
        other => panic!("another connection freeing the token: {other:?}"),
    }
    assert_eq!(
        read_pool(&stolen),
        vec![0u8; size as usize],
        "nothing leaked"
    );
    // The owner still has its data.
    let back = ashmem(size);
    b1.copy_to(&back).unwrap();
    assert_eq!(read_pool(&back), data);
    let out = ashmem(size);
    let r = req(
        &[Src::Token(b1.token()), Src::Mem(mb.clone())],
        &[Src::Mem(out.clone())],
    );
    expect_status(
        &run(Path::Sync, &pm1, &r),
        ErrorStatus::None,
        "the owner's use",
    );
    assert_eq!(read_pool(&out), t.add(&data, &t.data(6)));
    // An in-process foreign driver's buffer token means nothing to the service either.
    let local = cpu_driver();
    let lpm = prep(&local, &add_model(t, &DIMS));
    let lb = alloc(&local, &[], &[&lpm], &[role(0, 0)], &[]).unwrap();
    expect_err(
        alloc(&c1, &[], &[&lpm], &[role(0, 0)], &[]),
        ErrorStatus::InvalidArgument,
        "an in-process prepared model given to the service",
    );
    drop(lb);
}

#[test]
fn a_client_naming_another_clients_token_gets_invalid_argument_on_the_device() {
    with_device_service(|_sim, hald| two_clients(hald));
}

#[test]
fn a_client_naming_another_clients_token_gets_invalid_argument_on_the_cpu() {
    with_cpu_service(two_clients);
}

// ---------------------------------------------------------------------------------------------
// Concurrency

/// Readers execute with the buffer as input while writers overwrite it (as an output and by
/// copyFrom), all on one driver from many threads: every call returns (a status, never a hang
/// or a crash), readers always find it initialized, and the driver serves afterwards.
fn stress_one_buffer(dev: Arc<dyn HalDevice>) {
    let t = F32;
    let size = t.bytes();
    let pm = prep(&*dev, &add_model(t, &DIMS));
    let buf = alloc(&*dev, &[], &[&pm], &[role(0, 0), role(0, 1)], &[role(0, 0)]).unwrap();
    let a = t.data(1);
    buf.copy_from(&pool_with(&a), &[]).unwrap();
    let mut threads = Vec::new();
    for k in 0..8 {
        let (pm, buf, dev) = (pm.clone(), buf.clone(), dev.clone());
        let a = a.clone();
        threads.push(std::thread::spawn(move || {
            let mb = pool_with(&t.data(k));
            for i in 0..40 {
                match k % 4 {
                    // Readers.
                    0 | 1 => {
                        let r = req(
                            &[Src::Token(buf.token()), Src::Token(buf.token())],
                            &[Src::Mem(ashmem(size))],
                        );
                        let res = run(if i % 2 == 0 { Path::Sync } else { Path::Async }, &pm, &r);
                        assert_eq!(res.status, ErrorStatus::None, "reader {k}: {res:?}");
                    }
                    // Writers through executions.
                    2 => {
                        let r = req(
                            &[Src::Mem(mb.clone()), Src::Mem(mb.clone())],
                            &[Src::Token(buf.token())],
                        );
                        let res = run(Path::Sync, &pm, &r);
                        assert_eq!(res.status, ErrorStatus::None, "writer {k}: {res:?}");
                    }
                    // Writers through copyFrom, readers through copyTo.
                    _ => {
                        buf.copy_from(&pool_with(&a), &[]).unwrap();
                        buf.copy_to(&ashmem(size)).unwrap();
                    }
                }
            }
            drop(dev);
        }));
    }
    for th in threads {
        th.join().expect("a stress thread failed");
    }
    // Still serving: a final write and read give exact results.
    buf.copy_from(&pool_with(&a), &[]).unwrap();
    let out = ashmem(size);
    let r = req(
        &[Src::Token(buf.token()), Src::Token(buf.token())],
        &[Src::Mem(out.clone())],
    );
    expect_status(
        &run(Path::Sync, &pm, &r),
        ErrorStatus::None,
        "after the stress",
    );
    assert_eq!(read_pool(&out), t.add(&a, &a));
}

#[test]
fn concurrent_reads_and_writes_of_one_buffer_never_crash_or_hang_in_process() {
    with_timeout(limit(), "stress", || {
        stress_one_buffer(Arc::new(cpu_driver()))
    });
}

#[test]
fn concurrent_reads_and_writes_never_crash_or_hang_the_device_service() {
    with_device_service(|sim, hald| {
        // The in-process driver on the device: one buffer, many threads, the device path.
        let dev = nnaccel_hal::device::open_node(sim.path()).unwrap();
        stress_one_buffer(Arc::new(Driver::new(Backend::Device(dev))));
        // Many clients of the service, each with its own buffers, at once.
        let socket = hald.socket().to_path_buf();
        let clients: Vec<_> = (0..4)
            .map(|_| {
                let socket = socket.clone();
                std::thread::spawn(move || {
                    let c = ServiceClient::connect(&socket).unwrap();
                    let t = F32;
                    let pm = prep(&c, &add_model(t, &DIMS));
                    let x = alloc(&c, &[], &[&pm], &[role(0, 0)], &[role(0, 0)]).unwrap();
                    let y = alloc(&c, &[], &[&pm], &[role(0, 0)], &[role(0, 0)]).unwrap();
                    let a = t.data(3);
                    let b = pool_with(&t.data(4));
                    x.copy_from(&pool_with(&a), &[]).unwrap();
                    // A chain: x -> y -> x ..., each adding b.
                    let mut expect = a.clone();
                    for i in 0..20 {
                        let (from, to) = if i % 2 == 0 { (&x, &y) } else { (&y, &x) };
                        let r = req(
                            &[Src::Token(from.token()), Src::Mem(b.clone())],
                            &[Src::Token(to.token())],
                        );
                        let res = run(Path::Sync, &pm, &r);
                        assert_eq!(res.status, ErrorStatus::None, "{res:?}");
                        expect = t.add(&expect, &t.data(4));
                    }
                    let back = ashmem(t.bytes());
                    x.copy_to(&back).unwrap();
                    assert_eq!(read_pool(&back), expect, "20 steps of the chain");
                })
            })
            .collect();
        for c in clients {
            c.join().expect("a client failed");
        }
        assert!(!hald.has_exited(), "the service is alive");
        let info = hald.client().info().unwrap();
        assert_eq!(
            info.domain_buffers, 0,
            "the clients' buffers went with them"
        );
    });
}

// ---------------------------------------------------------------------------------------------
// Device memory returns

const CHILD_SOCKET_ENV: &str = "NNACCEL_TEST_DOMAINS_CHILD_SOCKET";

/// Not a test: the child client of `device_memory_returns_when_buffers_are_freed_or_their_client_dies`
/// (it re-executes this binary with `CHILD_SOCKET_ENV` set). Without the variable it does
/// nothing.
#[test]
fn child_client_with_buffers() {
    let Some(socket) = std::env::var_os(CHILD_SOCKET_ENV) else {
        return;
    };
    let c = ServiceClient::connect(std::path::Path::new(&socket)).unwrap();
    let pm = prep(&c, &add_model(F32, &DIMS));
    let mut held = Vec::new();
    for _ in 0..3 {
        let b = alloc(&c, &[], &[&pm], &[role(0, 0)], &[role(0, 0)]).unwrap();
        b.copy_from(&pool_with(&F32.data(1)), &[]).unwrap();
        held.push(b);
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready").unwrap();
    out.flush().unwrap();
    drop(out);
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

#[test]
fn device_memory_returns_when_buffers_are_freed_or_their_client_dies() {
    with_device_service(|_sim, hald| {
        let c = hald.client();
        let pm = prep(&c, &add_model(F32, &DIMS));
        let baseline = c.info().unwrap();
        let used = |i: &nnaccel_protocol::ServiceInfo| {
            (
                i.device_live.unwrap()[1],
                i.device_memory_used.unwrap(),
                i.domain_buffers,
                i.domain_bytes,
            )
        };
        let base = used(&baseline);
        assert_eq!(base.2, 0);
        let bufs: Vec<_> = (0..4)
            .map(|_| alloc(&c, &[], &[&pm], &[role(0, 0)], &[role(0, 0)]).unwrap())
            .collect();
        let during = used(&c.info().unwrap());
        assert_eq!(during.0, base.0 + 4, "one device BO per buffer");
        assert!(
            during.1 >= base.1 + 4 * F32.bytes(),
            "device memory used: {base:?} -> {during:?}"
        );
        assert_eq!((during.2, during.3), (4, 4 * F32.bytes()));
        drop(bufs);
        assert_eq!(
            used(&c.info().unwrap()),
            base,
            "freed buffers return their memory"
        );

        // A client process killed while holding buffers.
        let (mut child, ready) = spawn_child_test(
            "child_client_with_buffers",
            CHILD_SOCKET_ENV,
            hald.socket().as_os_str(),
        );
        assert!(ready.join().unwrap(), "the child never said ready");
        let held = used(&c.info().unwrap());
        assert_eq!(held.2, 3, "the child's buffers: {held:?}");
        assert!(held.1 >= base.1 + 3 * F32.bytes());
        child.kill().unwrap();
        child.wait().unwrap();
        poll_until(
            scaled(Duration::from_secs(10)),
            "the service releasing the dead client's buffers",
            || used(&c.info().unwrap()) == base,
        );
        // And the freed tokens are handed out again.
        let again = alloc(&c, &[], &[&pm], &[role(0, 0)], &[]).unwrap();
        assert!(again.token() > 0);
    });
}

/// A CPU-only service backs buffers with memfds and counts them the same way; a buffer too
/// large for its memory limit is GENERAL_FAILURE, cleanly.
#[test]
fn cpu_only_buffers_are_counted_and_oversized_ones_refused() {
    with_cpu_service(|hald| {
        let c = hald.client();
        let pm = prep(&c, &add_model(F32, &DIMS));
        let b = alloc(&c, &[], &[&pm], &[role(0, 0)], &[]).unwrap();
        let info = c.info().unwrap();
        assert_eq!((info.domain_buffers, info.domain_bytes), (1, F32.bytes()));
        assert_eq!(info.device_memory_used, None);
        let huge = [1u32 << 10, 1 << 10, 32, 16];
        let big = prep(&c, &add_model(F32, &huge));
        expect_err(
            alloc(&c, &[], &[&big], &[role(0, 0)], &[]),
            ErrorStatus::GeneralFailure,
            "a 2 GiB buffer over the 1 GiB limit",
        );
        drop(b);
        let info = c.info().unwrap();
        assert_eq!((info.domain_buffers, info.domain_bytes), (0, 0));
    });
}

/// On the device, an execution whose arguments are all buffers runs as a device job (no
/// fallback to the CPU): the buffers' BOs are bound directly.
#[test]
fn executions_through_buffers_run_on_the_device() {
    with_device_service(|_sim, hald| {
        let c = hald.client();
        let t = F32;
        let pm = prep(&c, &add_model(t, &DIMS));
        assert!(pm.runs_on_device());
        let x = alloc(&c, &[], &[&pm], &[role(0, 0), role(0, 1)], &[]).unwrap();
        let y = alloc(&c, &[], &[&pm], &[], &[role(0, 0)]).unwrap();
        let a = t.data(7);
        x.copy_from(&pool_with(&a), &[]).unwrap();
        let jobs = |c: &ServiceClient| c.info().unwrap().device_jobs_completed.unwrap();
        let before = jobs(&c);
        let r = req(
            &[Src::Token(x.token()), Src::Token(x.token())],
            &[Src::Token(y.token())],
        );
        expect_status(&run(Path::Sync, &pm, &r), ErrorStatus::None, "x + x -> y");
        assert_eq!(jobs(&c), before + 1, "one device job");
        let back = ashmem(t.bytes());
        y.copy_to(&back).unwrap();
        assert_eq!(read_pool(&back), t.add(&a, &a));
    });
}

/// The device dies while buffers live on it: executions naming them carry on with the CPU
/// executor over the buffers' memory (the service holds it through BO_EXPORT's fd), data
/// intact, and new buffers live in memfds.
#[test]
fn buffers_survive_the_device_dying() {
    with_device_service(|sim, hald| {
        let c = hald.client();
        let t = F32;
        let pm = prep(&c, &add_model(t, &DIMS));
        assert!(pm.runs_on_device());
        let x = alloc(&c, &[], &[&pm], &[role(0, 0)], &[role(0, 0)]).unwrap();
        let a = t.data(8);
        x.copy_from(&pool_with(&a), &[]).unwrap();
        sim.kill_hard();
        let b = pool_with(&t.data(9));
        let fresh = alloc(&c, &[], &[&pm], &[], &[role(0, 0)]).unwrap();
        let r = req(
            &[Src::Token(x.token()), Src::Mem(b.clone())],
            &[Src::Token(fresh.token())],
        );
        expect_status(
            &run(Path::Sync, &pm, &r),
            ErrorStatus::None,
            "x + b -> fresh after the device died",
        );
        let back = ashmem(t.bytes());
        fresh.copy_to(&back).unwrap();
        assert_eq!(read_pool(&back), t.add(&a, &t.data(9)));
        x.copy_to(&back).unwrap();
        assert_eq!(
            read_pool(&back),
            a,
            "the data written to the device survives it"
        );
        assert!(!hald.has_exited());
    });
}

/// Malformed memory-domain messages — out-of-range indexes, NaN and infinite frequencies,
/// thousands of roles, bad fd indexes, unknown memory kinds, tokens 0 and u32::MAX — get
/// error answers on a connection that stays up, and the service keeps serving.
#[test]
fn malformed_domain_messages_never_crash_the_service() {
    use nnaccel_protocol::{
        ClientMessage, PROTOCOL_VERSION, ServiceMessage, WireMemory, WireRole, decode, encode,
        recv_frame, send_frame,
    };
    with_cpu_service(|hald| {
        let c = hald.client();
        let pm = prep(&c, &add_model(F32, &DIMS));
        let sock = std::os::unix::net::UnixStream::connect(hald.socket()).unwrap();
        let call = |m: &ClientMessage, fds: &[std::os::fd::BorrowedFd<'_>]| {
            send_frame(&sock, &encode(m).unwrap(), fds).unwrap();
            let (body, _) = recv_frame(&sock, 1 << 20).unwrap();
            decode::<ServiceMessage>(&body).unwrap()
        };
        let hello = ClientMessage::Hello {
            version: PROTOCOL_VERSION,
            client: "fuzz".into(),
        };
        assert!(matches!(call(&hello, &[]), ServiceMessage::Hello { .. }));
        let prepared = match call(
            &ClientMessage::PrepareModel {
                model: nnaccel_protocol::model_to_wire(
                    &add_model(F32, &DIMS),
                    &mut Default::default(),
                ),
                preference: 1,
                priority: 100,
                timeout_ns: None,
            },
            &[],
        ) {
            ServiceMessage::Prepared { model_id, .. } => model_id,
            other => panic!("{other:?}"),
        };
        let wire_role = |model_index, io_index, frequency| WireRole {
            model_index,
            io_index,
            frequency,
        };
        let mem = |kind, fd_index, size| WireMemory {
            kind,
            prot: 0,
            offset: 0,
            size,
            fd_index,
        };
        let memfd = nnaccel_uapi::sys::memfd_create(c"fuzz", 4096).unwrap();
        let fd = [memfd.as_fd()];
        let bad: Vec<(ClientMessage, bool)> = vec![
            (
                ClientMessage::Allocate {
                    dimensions: vec![u32::MAX; 64],
                    model_ids: vec![prepared],
                    input_roles: vec![wire_role(u32::MAX, u32::MAX, 1.0)],
                    output_roles: vec![],
                },
                false,
            ),
            (
                ClientMessage::Allocate {
                    dimensions: vec![],
                    model_ids: vec![prepared; 1000],
                    input_roles: (0..4000).map(|i| wire_role(i % 1000, i % 2, 0.5)).collect(),
                    output_roles: vec![wire_role(0, 0, f32::INFINITY)],
                },
                false,
            ),
            (
                ClientMessage::Allocate {
                    dimensions: vec![u32::MAX, u32::MAX, u32::MAX, u32::MAX],
                    model_ids: vec![prepared],
                    input_roles: vec![wire_role(0, 0, f32::NAN)],
                    output_roles: vec![],
                },
                false,
            ),
            (
                ClientMessage::Allocate {
                    dimensions: vec![0, 0, 0, 0],
                    model_ids: vec![u64::MAX],
                    input_roles: vec![wire_role(0, 0, 1.0)],
                    output_roles: vec![],
                },
                false,
            ),
            (
                ClientMessage::CopyFrom {
                    token: 0,
                    memory: mem(0, 0, 4096),
                    dimensions: vec![u32::MAX; 1000],
                },
                true,
            ),
            (
                ClientMessage::CopyTo {
                    token: u32::MAX,
                    memory: mem(9, 0, u64::MAX),
                },
                true,
            ),
            (
                ClientMessage::CopyTo {
                    token: 1,
                    memory: mem(0, 7, 4096),
                },
                true,
            ),
            (ClientMessage::FreeBuffer { token: 0 }, false),
            (ClientMessage::FreeBuffer { token: u32::MAX }, false),
        ];
        for (m, with_fd) in &bad {
            let fds: &[std::os::fd::BorrowedFd<'_>] = if *with_fd { &fd } else { &[] };
            match call(m, fds) {
                ServiceMessage::Error { status, .. } => assert!(
                    status == ErrorStatus::InvalidArgument.code()
                        || status == ErrorStatus::GeneralFailure.code(),
                    "{status} for {m:?}"
                ),
                other => panic!("{other:?} for a malformed {m:?}"),
            }
        }
        // The same connection still allocates, and so does another one.
        match call(
            &ClientMessage::Allocate {
                dimensions: vec![],
                model_ids: vec![prepared],
                input_roles: vec![wire_role(0, 0, 1.0)],
                output_roles: vec![wire_role(0, 0, 1.0)],
            },
            &[],
        ) {
            ServiceMessage::Allocated { token } => assert!(token > 0),
            other => panic!("{other:?}"),
        }
        assert!(!hald.has_exited());
        let b = alloc(&c, &[], &[&pm], &[role(0, 0)], &[]).unwrap();
        b.copy_from(&pool_with(&F32.data(2)), &[]).unwrap();
        assert_eq!(c.info().unwrap().domain_buffers, 2);
    });
}
