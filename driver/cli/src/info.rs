//! `nnaccelctl info`.

use std::path::{Path, PathBuf};

use nnaccel_hal::{Capabilities, PerformanceInfo, Placement};
use nnaccel_uapi::abi::{
    CAP_BO_CREATE, CAP_BO_EXPORT, CAP_BO_IMPORT, CAP_BO_IMPORT_DMABUF, CAP_FAULT_INJECTION,
    CAP_QUEUE_RING,
};

use crate::model::{self, TfliteMap};
use crate::{CliError, Outcome, backend};

fn cap_names(bits: u64) -> String {
    let names: Vec<&str> = [
        (CAP_BO_CREATE, "BO_CREATE"),
        (CAP_BO_IMPORT, "BO_IMPORT"),
        (CAP_BO_IMPORT_DMABUF, "BO_IMPORT_DMABUF"),
        (CAP_BO_EXPORT, "BO_EXPORT"),
        (CAP_QUEUE_RING, "QUEUE_RING"),
        (CAP_FAULT_INJECTION, "FAULT_INJECTION"),
    ]
    .iter()
    .filter(|(b, _)| bits & b != 0)
    .map(|(_, n)| *n)
    .collect();
    if names.is_empty() {
        "none".to_string()
    } else {
        names.join(" ")
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1u32 << 20))
}

fn perf(p: PerformanceInfo) -> String {
    let f = |x: f32| {
        if x == f32::MAX {
            "unsupported".to_string()
        } else {
            format!("{x}")
        }
    };
    format!(
        "execTime {}, powerUsage {}",
        f(p.exec_time),
        f(p.power_usage)
    )
}

fn print_capabilities(c: &Capabilities) {
    println!("capabilities (relative to the reference CPU; lower is better):");
    println!(
        "  relaxed float32->float16, scalar: {}",
        perf(c.relaxed_float32_to_float16_performance_scalar)
    );
    println!(
        "  relaxed float32->float16, tensor: {}",
        perf(c.relaxed_float32_to_float16_performance_tensor)
    );
    for (ty, p) in &c.operand_performance {
        println!("  {:<31} {}", ty.name(), perf(*p));
    }
    println!("  {:<31} {}", "IF", perf(c.if_performance));
    println!("  {:<31} {}", "WHILE", perf(c.while_performance));
}

/// `nnaccelctl info --ops [--markdown]`: the operation coverage table (no device needed).
pub fn operations(markdown: bool) -> Outcome {
    let rows = nnaccel_cpu::coverage::operation_coverage();
    if markdown {
        print!("{}", nnaccel_cpu::coverage::markdown_table(&rows));
    } else {
        println!(
            "operations of the CPU executor (✓ supported and tested, s supported, . not \
             supported; by the operand type of input 0):"
        );
        print!("{}", nnaccel_cpu::coverage::text_table(&rows));
    }
    println!();
    println!("{}.", nnaccel_cpu::coverage::summary(&rows));
    Outcome::Ok
}

/// `nnaccelctl info`.
pub fn info(
    model: Option<&Path>,
    device: Option<PathBuf>,
    cpu: bool,
    service: Option<PathBuf>,
) -> Result<Outcome, CliError> {
    // A malformed model is reported before any device is opened.
    let loaded = model.map(model::load).transpose()?;
    let selected = backend::select(device, cpu, service)?;
    let driver = &selected.driver;
    println!("device: {}", selected.source.device_label());
    println!("driver: {}", driver.description());
    let blobs = nnaccel_protocol::pools::blob_source();
    println!(
        "hardware_buffer_blob: {}: {}",
        blobs.name(),
        blobs.describe()
    );
    if let Some(client) = &selected.service {
        match client.info() {
            Ok(i) => {
                println!("service: {}", client.server());
                println!("  connections:         {}", i.connections);
                println!("  prepared models:     {}", i.prepared_models);
                if let Some([files, bos, programs, queues]) = i.device_live {
                    println!(
                        "  device live objects: {files} files, {bos} BOs, {programs} programs, {queues} queues"
                    );
                }
                if let Some(jobs) = i.device_jobs_completed {
                    println!("  device jobs completed: {jobs}");
                }
                println!(
                    "  memory-domain buffers: {} ({} bytes)",
                    i.domain_buffers, i.domain_bytes
                );
            }
            Err(s) => println!("service: {} ({})", client.server(), s.name()),
        }
    }
    match selected.local.as_ref().and_then(|d| d.device_info()) {
        Some(i) => {
            println!("device info:");
            println!(
                "  API version:         {}.{}",
                i.api_version >> 16,
                i.api_version & 0xffff
            );
            println!(
                "  capabilities:        {:#x} ({})",
                i.capabilities,
                cap_names(i.capabilities)
            );
            println!(
                "  device memory:       {} ({} in use)",
                mib(i.device_memory),
                mib(i.device_memory_used)
            );
            println!("  max BO size:         {}", mib(i.max_bo_size));
            println!("  max BOs per file:    {}", i.max_bos);
            println!("  max program size:    {}", mib(i.max_program_size));
            println!("  max queue depth:     {}", i.max_queue_depth);
            println!("  max bindings:        {}", i.max_bindings);
            println!(
                "  engine waits with:   {}",
                if i.engine_uses_io_uring {
                    "io_uring"
                } else {
                    "futex"
                }
            );
            println!("  jobs completed:      {}", i.jobs_completed);
            println!(
                "  live objects:        {} files, {} BOs, {} programs, {} queues",
                i.live.files, i.live.bos, i.live.programs, i.live.queues
            );
        }
        None => println!("device info: none (no device in use)"),
    }
    match driver.get_capabilities() {
        Ok(c) => print_capabilities(&c),
        Err(s) => println!("capabilities: {}", s.name()),
    }
    let Some(loaded) = loaded else {
        println!(
            "operations the driver runs (CPU executor kernels; the device runs the operations \
             it takes at fixed shapes, the rest run here in the same execution; give a model \
             file for its placement):"
        );
        for (op, types) in nnaccel_cpu::supported_operation_types() {
            let types: Vec<&str> = types.iter().map(|t| t.name()).collect();
            println!("  {:<28} {}", op.name(), types.join(" "));
        }
        return Ok(Outcome::Ok);
    };
    let m = &loaded.model;
    let name = model.map(|p| p.display().to_string()).unwrap_or_default();
    match driver.operation_placement(m) {
        Ok(placement) => {
            println!("placement of {name} ({}):", loaded.summary());
            match &loaded.tflite {
                Some(map) => {
                    print_node_placement(map, m, &placement);
                    loaded.print_ports();
                }
                None => {
                    for (i, (op, p)) in m.operations.iter().zip(&placement).enumerate() {
                        println!("  {i:>3} {:<28} {}", op.operation_type.name(), where_(*p));
                    }
                }
            }
            Ok(Outcome::Ok)
        }
        Err(status) => {
            println!("placement of {name}: {}", status.name());
            eprintln!(
                "nnaccelctl: the driver rejects the model: {}",
                status.name()
            );
            Ok(Outcome::Failed)
        }
    }
}

/// Where an operation runs, for the placement lines.
fn where_(p: Placement) -> &'static str {
    match p {
        Placement::Device => "device",
        Placement::Cpu => "cpu fallback",
        Placement::Unsupported => "unsupported",
    }
}

/// A TFLite model's placement: per node, the NNAPI operations it became and where each runs
/// (a node folded at import, such as a DEQUANTIZE of a constant, became none).
fn print_node_placement(map: &TfliteMap, m: &nnaccel_hal::Model, placement: &[Placement]) {
    println!("  node TFLite operator             NNAPI operation (where it runs)");
    // One pass over the operations, each to the node it came from.
    let mut per_node: Vec<Vec<String>> = vec![Vec::new(); map.nodes.len()];
    for (i, (&origin, op)) in map.origins.iter().zip(&m.operations).enumerate() {
        let p = placement.get(i).copied().unwrap_or(Placement::Unsupported);
        if let Some(ops) = per_node.get_mut(origin) {
            ops.push(format!("{i}: {} ({})", op.operation_type.name(), where_(p)));
        }
    }
    for (node, (op_name, ops)) in map.nodes.iter().zip(per_node).enumerate() {
        let ops = if ops.is_empty() {
            "none (folded at import)".to_string()
        } else {
            ops.join(", ")
        };
        println!("  {node:>4} {op_name:<26} {ops}");
    }
}
