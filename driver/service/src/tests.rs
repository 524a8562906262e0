//! The service and its client in one process: a listener in a temp dir, the service on a
//! thread, clients over the real socket.

use std::os::fd::AsFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::Arc;

use nnaccel_uapi::sys::{self, Mapping};

use super::*;
use nnaccel_hal::*;
use nnaccel_protocol::client::ServiceClient;
use nnaccel_protocol::{self as protocol, ClientMessage, ServiceMessage};

struct Running {
    service: Arc<Service>,
    listener: Arc<UnixListener>,
    path: PathBuf,
    thread: Option<std::thread::JoinHandle<()>>,
    _dir: PathBuf,
}

impl Running {
    fn start(config: ServiceConfig) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "nnaccel-svc-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("hal.sock");
        let listener = Arc::new(bind_socket(&path).unwrap());
        let service = Service::new(Driver::new(Backend::CpuOnly), config);
        let (s, l) = (service.clone(), listener.clone());
        let thread = std::thread::spawn(move || s.serve(&l).unwrap());
        Self {
            service,
            listener,
            path,
            thread: Some(thread),
            _dir: dir,
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.service.stop(&self.listener);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_dir_all(&self._dir);
    }
}

fn add_model() -> Model {
    let t = |lifetime| Operand {
        operand_type: OperandType::TensorFloat32,
        dimensions: vec![4],
        scale: 0.0,
        zero_point: 0,
        lifetime,
        location: DataLocation::default(),
        extra_params: None,
    };
    Model {
        operands: vec![
            t(OperandLifetime::SubgraphInput),
            t(OperandLifetime::SubgraphInput),
            Operand {
                operand_type: OperandType::Int32,
                dimensions: vec![],
                scale: 0.0,
                zero_point: 0,
                lifetime: OperandLifetime::ConstantCopy,
                location: DataLocation {
                    pool_index: 0,
                    offset: 0,
                    length: 4,
                    padding: 0,
                },
                extra_params: None,
            },
            t(OperandLifetime::SubgraphOutput),
        ],
        operations: vec![Operation {
            operation_type: OperationType::Add,
            inputs: vec![0, 1, 2],
            outputs: vec![3],
        }],
        input_indexes: vec![0, 1],
        output_indexes: vec![3],
        operand_values: 0i32.to_le_bytes().to_vec(),
        pools: vec![],
        relax_computation_float32_to_float16: false,
        referenced: vec![],
    }
}

fn run_add(client: &ServiceClient, a: f32) -> Vec<f32> {
    let pm = client
        .prepare_model(
            &add_model(),
            ExecutionPreference::FastSingleAnswer,
            Priority::Medium,
            None,
        )
        .unwrap();
    let fd = sys::memfd_create(c"io", 4096).unwrap();
    let map = Mapping::map_shared(fd.as_fd(), 0, 4096, true).unwrap();
    let bytes: Vec<u8> = [a, 2.0, 3.0, 4.0]
        .iter()
        .chain(&[10.0f32; 4])
        .flat_map(|x| x.to_le_bytes())
        .collect();
    map.write_at(0, &bytes).unwrap();
    let loc = |offset| DataLocation {
        pool_index: 0,
        offset,
        length: 16,
        padding: 0,
    };
    let arg = |offset| RequestArgument {
        has_no_value: false,
        location: loc(offset),
        dimensions: vec![],
    };
    let request = Request {
        inputs: vec![arg(0), arg(16)],
        outputs: vec![arg(64)],
        pools: vec![MemoryPool::Memory(Memory {
            kind: MemoryKind::Ashmem,
            fd: Arc::new(fd),
            size: 4096,
        })],
    };
    let r = pm.execute_synchronously(&request, MeasureTiming::Yes, None);
    assert_eq!(r.status, ErrorStatus::None);
    assert_eq!(
        r.output_shapes,
        vec![OutputShape {
            dimensions: vec![4],
            is_sufficient: true
        }]
    );
    let mut out = [0u8; 16];
    map.read_at(64, &mut out).unwrap();
    out.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[test]
fn a_client_prepares_and_executes_through_the_socket() {
    let svc = Running::start(ServiceConfig::default());
    let client = ServiceClient::connect(&svc.path).unwrap();
    assert!(client.server().contains("nnaccel-hald"));
    assert_eq!(run_add(&client, 1.0), vec![11.0, 12.0, 13.0, 14.0]);
    assert!(client.get_capabilities().unwrap().operand_performance.len() > 10);
    assert_eq!(
        client.get_supported_operations(&add_model()).unwrap(),
        vec![true]
    );
}

fn prepare_add(client: &ServiceClient) -> Arc<dyn HalPreparedModel> {
    client
        .prepare_model(
            &add_model(),
            ExecutionPreference::FastSingleAnswer,
            Priority::Medium,
            None,
        )
        .unwrap()
}

#[test]
fn asynchronous_execute_through_the_service() {
    let svc = Running::start(ServiceConfig::default());
    let client = ServiceClient::connect(&svc.path).unwrap();
    let pm = prepare_add(&client);
    let r = execute_async(pm, Request::default(), MeasureTiming::No, None).wait();
    assert_eq!(
        r,
        ExecutionResult::failure(ErrorStatus::InvalidArgument),
        "an empty request is invalid"
    );
}

#[test]
fn prepared_models_are_released_with_their_connection() {
    let svc = Running::start(ServiceConfig::default());
    let observer = ServiceClient::connect(&svc.path).unwrap();
    {
        let client = ServiceClient::connect(&svc.path).unwrap();
        let _pm = client
            .prepare_model(
                &add_model(),
                ExecutionPreference::LowPower,
                Priority::Low,
                None,
            )
            .unwrap();
        let info = observer.info().unwrap();
        assert_eq!((info.connections, info.prepared_models), (2, 1));
    }
    // The client's drop released the model and closed its connection.
    for _ in 0..200 {
        let info = observer.info().unwrap();
        if (info.connections, info.prepared_models) == (1, 0) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    panic!(
        "the service kept a dead connection's objects: {:?}",
        observer.info()
    );
}

#[test]
fn invalid_models_and_unknown_ids_are_invalid_argument() {
    let svc = Running::start(ServiceConfig::default());
    let client = ServiceClient::connect(&svc.path).unwrap();
    let mut bad = add_model();
    bad.operations[0].inputs[0] = 42;
    assert_eq!(
        client
            .prepare_model(&bad, ExecutionPreference::LowPower, Priority::Low, None)
            .unwrap_err(),
        ErrorStatus::InvalidArgument
    );
    let sock = UnixStream::connect(&svc.path).unwrap();
    let hello = protocol::encode(&ClientMessage::Hello {
        version: protocol::PROTOCOL_VERSION,
        client: "t".into(),
    })
    .unwrap();
    protocol::send_frame(&sock, &hello, &[]).unwrap();
    protocol::recv_frame(&sock, 1 << 20).unwrap();
    let exec = ClientMessage::Execute {
        model_id: 99,
        request: protocol::WireRequest {
            inputs: vec![],
            outputs: vec![],
            pools: vec![],
        },
        measure: false,
        timeout_ns: None,
    };
    protocol::send_frame(&sock, &protocol::encode(&exec).unwrap(), &[]).unwrap();
    let (body, _) = protocol::recv_frame(&sock, 1 << 20).unwrap();
    assert!(matches!(
        protocol::decode::<ServiceMessage>(&body).unwrap(),
        ServiceMessage::Error { status: 4, .. }
    ));
}

#[test]
fn garbage_drops_only_that_connection() {
    let svc = Running::start(ServiceConfig::default());
    let good = ServiceClient::connect(&svc.path).unwrap();
    let mut bad = UnixStream::connect(&svc.path).unwrap();
    std::io::Write::write_all(&mut bad, b"this is not a frame at all").unwrap();
    // The service answers with an error, then closes.
    let (body, _) = protocol::recv_frame(&bad, 1 << 20).unwrap();
    assert!(matches!(
        protocol::decode::<ServiceMessage>(&body).unwrap(),
        ServiceMessage::Error { .. }
    ));
    // Closed (EOF), or reset because the rest of the garbage was never read.
    assert!(matches!(
        protocol::recv_frame(&bad, 1 << 20),
        Err(protocol::ProtocolError::Closed | protocol::ProtocolError::Io(_))
    ));
    assert_eq!(run_add(&good, 5.0), vec![15.0, 12.0, 13.0, 14.0]);
}

#[test]
fn oversized_messages_and_wrong_versions_are_refused() {
    let svc = Running::start(ServiceConfig {
        max_message_bytes: 1024,
        ..ServiceConfig::default()
    });
    let sock = UnixStream::connect(&svc.path).unwrap();
    let hello = protocol::encode(&ClientMessage::Hello {
        version: 99,
        client: "old".into(),
    })
    .unwrap();
    protocol::send_frame(&sock, &hello, &[]).unwrap();
    let (body, _) = protocol::recv_frame(&sock, 1 << 20).unwrap();
    assert!(matches!(
        protocol::decode::<ServiceMessage>(&body).unwrap(),
        ServiceMessage::Error { .. }
    ));
    let sock = UnixStream::connect(&svc.path).unwrap();
    // The service refuses the frame from its header and closes without reading the body, so
    // sending the rest may meet a closed socket (EPIPE); the refusal is there to read.
    let _ = protocol::send_frame(&sock, &[0u8; 4096], &[]);
    let (body, _) = protocol::recv_frame(&sock, 1 << 20).unwrap();
    assert!(matches!(
        protocol::decode::<ServiceMessage>(&body).unwrap(),
        ServiceMessage::Error { .. }
    ));
    assert!(
        ServiceClient::connect(&svc.path).is_ok(),
        "the service still serves"
    );
}

#[test]
fn a_live_socket_is_never_replaced_but_a_stale_one_is() {
    let svc = Running::start(ServiceConfig::default());
    assert_eq!(
        bind_socket(&svc.path).unwrap_err().kind(),
        std::io::ErrorKind::AddrInUse
    );
    let stale = svc._dir.join("stale.sock");
    drop(UnixListener::bind(&stale).unwrap());
    assert!(bind_socket(&stale).is_ok());
}

#[test]
fn a_stopping_service_ends_its_connections_and_burst_workers_before_serve_returns() {
    let mut svc = Running::start(ServiceConfig::default());
    let client = ServiceClient::connect(&svc.path).unwrap();
    let pm = prepare_add(&client);
    let bursts: Vec<_> = (0..3)
        .map(|_| {
            pm.configure_execution_burst(nnaccel_hal::burst::BurstConfig::default())
                .unwrap()
        })
        .collect();
    assert_eq!(svc.service.live_bursts(), 3);
    assert_eq!(svc.service.live_connections(), 1);
    svc.service.stop(&svc.listener);
    svc.thread.take().unwrap().join().unwrap();
    assert_eq!(
        svc.service.live_bursts(),
        0,
        "serve returned with burst workers running"
    );
    assert_eq!(
        svc.service.live_connections(),
        0,
        "serve returned with connections open"
    );
    // The connection is closed: the client's next call fails at once, it does not hang.
    assert_eq!(
        pm.configure_execution_burst(nnaccel_hal::burst::BurstConfig::default())
            .err(),
        Some(ErrorStatus::DeviceUnavailable)
    );
    drop(bursts);
}

#[test]
fn a_call_sent_as_the_service_stops_is_answered_before_the_connection_closes() {
    let mut svc = Running::start(ServiceConfig::default());
    let sock = UnixStream::connect(&svc.path).unwrap();
    let send = |msg: &ClientMessage| {
        protocol::send_frame(&sock, &protocol::encode(msg).unwrap(), &[]).unwrap();
    };
    let recv = || {
        let (body, _) = protocol::recv_frame(&sock, 1 << 20).unwrap();
        protocol::decode::<ServiceMessage>(&body).unwrap()
    };
    send(&ClientMessage::Hello {
        version: protocol::PROTOCOL_VERSION,
        client: "stop test".into(),
    });
    assert!(matches!(recv(), ServiceMessage::Hello { .. }));
    // The call is in the connection's socket (or already being served) when the stop comes.
    send(&ClientMessage::GetCapabilities);
    svc.service.stop(&svc.listener);
    svc.thread.take().unwrap().join().unwrap();
    let answer = recv();
    assert!(
        matches!(answer, ServiceMessage::Capabilities { .. }),
        "{answer:?}"
    );
    // Then the service's end is gone (end-of-file; a timeout means the connection lingers).
    sock.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    let end = protocol::recv_frame(&sock, 1 << 20);
    assert!(
        matches!(end, Err(protocol::ProtocolError::Closed)),
        "{end:?}"
    );
}

#[test]
fn one_connection_runs_at_most_its_share_of_bursts_and_leaves_room_for_others() {
    let svc = Running::start(ServiceConfig {
        max_bursts_per_connection: 2,
        ..ServiceConfig::default()
    });
    let greedy = ServiceClient::connect(&svc.path).unwrap();
    let pm = prepare_add(&greedy);
    let config = nnaccel_hal::burst::BurstConfig::default;
    let mut held: Vec<_> = (0..2)
        .map(|_| pm.configure_execution_burst(config()).unwrap())
        .collect();
    assert_eq!(
        pm.configure_execution_burst(config()).err(),
        Some(ErrorStatus::ResourceExhaustedTransient),
        "a third burst on a connection limited to two"
    );
    // Another client still gets its bursts.
    let other = ServiceClient::connect(&svc.path).unwrap();
    let other_pm = prepare_add(&other);
    let theirs: Vec<_> = (0..2)
        .map(|_| other_pm.configure_execution_burst(config()).unwrap())
        .collect();
    assert_eq!(svc.service.live_bursts(), 4);
    drop(theirs);
    // A released burst's place is the connection's again once its worker has gone.
    drop(held.pop());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        match pm.configure_execution_burst(config()) {
            Ok(b) => {
                held.push(b);
                break;
            }
            Err(s) => assert_eq!(s, ErrorStatus::ResourceExhaustedTransient),
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the released burst's place never came back"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(held.len(), 2);
}

#[test]
fn planned_bytes_and_limits_count_referenced_subgraphs() {
    let temporary = |n: u32| Operand {
        operand_type: OperandType::TensorFloat32,
        dimensions: vec![n],
        scale: 0.0,
        zero_point: 0,
        lifetime: OperandLifetime::TemporaryVariable,
        location: DataLocation::default(),
        extra_params: None,
    };
    let relu = Operation {
        operation_type: OperationType::Relu,
        inputs: vec![0],
        outputs: vec![0],
    };
    let model = Model {
        operands: vec![temporary(10), Operand::subgraph(0)],
        operations: vec![relu.clone()],
        referenced: vec![Subgraph {
            operands: vec![temporary(1000)],
            operations: vec![relu.clone(), relu],
            ..Subgraph::default()
        }],
        ..Model::default()
    };
    // 3 operations in all; temporaries of 10 and 1000 floats.
    assert_eq!(
        planned_bytes(&model),
        3 * PREPARED_BYTES_PER_OPERATION + 4 * 10 + 4 * 1000
    );
    assert_eq!(model.all_operands().count(), 3);
}
