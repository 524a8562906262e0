//! `nnaccel-sim --demo`: the device in-process, a few jobs through its queue.

use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nnaccel_uapi::abi::{
    BO_ACCESS_READ, BO_ACCESS_WRITE, Binding, Job, PARAM_API_VERSION, PARAM_ENGINE_WAIT_MODE,
    PARAM_JOBS_COMPLETED, WAIT_MODE_IO_URING,
};
use nnaccel_uapi::program::{Location, Operand, Operation, Program};
use nnaccel_uapi::sys::{self, Mapping};
use nnaccel_uapi::{Device, DeviceExt, RingQueue};

const TENSOR_FLOAT32: i32 = 3;
const INT32: i32 = 1;
const ADD: i32 = 0;
const FUSED_RELU: i32 = 1;

fn tensor(location: Location, n: u32) -> Operand {
    Operand {
        operand_type: TENSOR_FLOAT32,
        dims: vec![n],
        scale: 0.0,
        zero_point: 0,
        location,
        channel_quant: None,
    }
}

/// out = relu(a + b) over `n` floats.
fn add_relu_program(n: u32) -> Program {
    Program {
        operands: vec![
            tensor(Location::Input, n),
            tensor(Location::Input, n),
            Operand {
                operand_type: INT32,
                dims: vec![],
                scale: 0.0,
                zero_point: 0,
                location: Location::Constant {
                    offset: 0,
                    length: 4,
                },
                channel_quant: None,
            },
            tensor(Location::Output, n),
        ],
        operations: vec![Operation {
            operation_type: ADD,
            inputs: vec![0, 1, 2],
            outputs: vec![3],
        }],
        inputs: vec![0, 1],
        outputs: vec![3],
        bo_refs: vec![],
        constants: FUSED_RELU.to_le_bytes().to_vec(),
        relax_f32_to_f16: false,
    }
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

pub fn run(dev: Arc<dyn Device>) -> Result<(), Box<dyn std::error::Error>> {
    let n = 4u32;
    let bytes = n as usize * 4;
    println!("nnaccel-sim demo: the simulated device, in-process");
    println!(
        "  api version {:#x}, engine waits with {}",
        dev.get_param(PARAM_API_VERSION)?,
        if dev.get_param(PARAM_ENGINE_WAIT_MODE)? == WAIT_MODE_IO_URING {
            "io_uring FUTEX_WAIT"
        } else {
            "futex(2)"
        }
    );

    // One memfd pool holding a, b and out, imported as one BO: the device computes in place.
    let pool = sys::memfd_create(c"demo-pool", 4096)?;
    let map = Mapping::map_shared(pool.as_fd(), 0, 4096, true)?;
    let bo = dev.bo_import(pool.as_fd(), 0, 4096, BO_ACCESS_READ | BO_ACCESS_WRITE)?;
    let program = dev.program_create(&add_relu_program(n).encode()?)?;
    println!(
        "  imported a 4 KiB memfd as BO {bo}; loaded program {program} (relu(a + b) over {n} floats)"
    );

    let job = Job {
        program,
        num_bindings: 3,
        bindings: {
            let mut b = [Binding::default(); nnaccel_uapi::abi::MAX_BINDINGS];
            b[0] = Binding {
                bo,
                flags: 0,
                offset: 0,
                length: bytes as u64,
            };
            b[1] = Binding {
                bo,
                flags: 0,
                offset: 64,
                length: bytes as u64,
            };
            b[2] = Binding {
                bo,
                flags: 0,
                offset: 128,
                length: bytes as u64,
            };
            b
        },
        ..Job::default()
    };
    let write = |off: usize, v: &[f32]| -> std::io::Result<()> {
        let raw: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        map.write_at(off, &raw)
    };
    let read_out = || -> std::io::Result<Vec<f32>> {
        let mut raw = vec![0u8; bytes];
        map.read_at(128, &mut raw)?;
        Ok(f32s(&raw))
    };

    // 1. One job by ioctl: SUBMIT + WAIT.
    write(0, &[1.0, -2.0, 3.0, -4.0])?;
    write(64, &[0.5, 0.5, 0.5, 0.5])?;
    let seq = dev.submit(&job)?;
    let w = dev.wait(0, seq, sys::deadline_after(Duration::from_secs(5)))?;
    println!(
        "  SUBMIT+WAIT  seq {seq}: status {}, relu([1,-2,3,-4] + 0.5) = {:?} ({} ns on the engine)",
        w.status,
        read_out()?,
        w.device_time_ns
    );

    // 2. Jobs through the shared-memory queue: no ioctl per job.
    let mut queue = RingQueue::create(dev.clone(), 8, 0)?;
    let rounds = 1000u32;
    let start = Instant::now();
    for i in 0..rounds {
        let x = i as f32;
        write(0, &[x, -x, 2.0 * x, 0.0])?;
        let seq = queue.submit(&job)?;
        let c = queue.wait(
            seq,
            Duration::from_micros(20),
            Some(sys::deadline_after(Duration::from_secs(5))),
        )?;
        if c.status != 0 {
            return Err(format!("job {seq} failed with status {}", c.status).into());
        }
        let out = read_out()?;
        let want = [x + 0.5, (0.5 - x).max(0.0), 2.0 * x + 0.5, 0.5];
        if out != want {
            return Err(format!("job {seq}: got {out:?}, want {want:?}").into());
        }
    }
    let per = start.elapsed() / rounds;
    println!(
        "  ring queue {}: {rounds} jobs, every result checked, {per:?} per job round trip",
        queue.id()
    );
    println!(
        "  jobs completed on the device: {}",
        dev.get_param(PARAM_JOBS_COMPLETED)?
    );
    drop(queue);
    dev.program_destroy(program)?;
    dev.bo_close(bo)?;
    Ok(())
}
