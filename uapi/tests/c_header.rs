//! `include/nnaccel.h` carries the same ABI as this crate: a C probe including the header is
//! generated, compiled with `cc` and run, and every struct size, alignment, field offset, field
//! size and field type, every ioctl number and every constant it prints is compared with Rust.
//! The header must also compile cleanly with `-Wall -Wextra -Werror -pedantic -std=c11`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

use nnaccel_uapi::abi::{
    BO_ACCESS_MASK, BO_ACCESS_READ, BO_ACCESS_WRITE, BO_CREATE_FLAGS_MASK, BO_IMPORT_ALIGN,
    BO_KIND_DEVICE, BO_KIND_DMABUF, BO_KIND_FILE, BO_KIND_MEMFD, Binding, BoClose, BoCreate,
    BoExport, BoImport, BoInfo, CAP_BO_CREATE, CAP_BO_EXPORT, CAP_BO_IMPORT, CAP_BO_IMPORT_DMABUF,
    CAP_FAULT_INJECTION, CAP_JOB_CANCEL, CAP_QUEUE_RING, Completion, GetParam, JOB_FLAGS_MASK, Job,
    JobCancel, LAYOUTS, MAX_BINDINGS, NNACCEL_API_VERSION, PARAM_API_VERSION, PARAM_CAPABILITIES,
    PARAM_COUNT, PARAM_DEVICE_MEMORY_SIZE, PARAM_DEVICE_MEMORY_USED, PARAM_ENGINE_WAIT_MODE,
    PARAM_JOBS_COMPLETED, PARAM_LIVE_BOS, PARAM_LIVE_FILES, PARAM_LIVE_PROGRAMS, PARAM_LIVE_QUEUES,
    PARAM_MAX_BINDINGS, PARAM_MAX_BO_SIZE, PARAM_MAX_BOS, PARAM_MAX_PROGRAM_SIZE,
    PARAM_MAX_PROGRAMS, PARAM_MAX_QUEUE_DEPTH, PARAM_MAX_QUEUES, ProgramCreate, ProgramDestroy,
    QUEUE_FLAG_HIGH_PERFORMANCE, QUEUE_FLAGS_MASK, QueueCreate, QueueDestroy, RING_MAGIC,
    RING_SQ_OFFSET, RING_VERSION, RingHeader, Submit, WAIT_MODE_FUTEX, WAIT_MODE_IO_URING, Wait,
    ring_cq_offset, ring_size,
};
use nnaccel_uapi::ioctl::{ALL_IOCTLS, NNACCEL_IOCTL_TYPE};
use nnaccel_uapi::program::{
    LIFETIME_BO_REF, LIFETIME_CONSTANT, LIFETIME_INPUT, LIFETIME_NO_VALUE, LIFETIME_OUTPUT,
    LIFETIME_TEMPORARY, MAX_OPERANDS, MAX_OPERATION_ARGS, MAX_OPERATIONS, MAX_RANK, OperandRecord,
    OperationRecord, PROGRAM_FLAG_RELAX_F32_TO_F16, PROGRAM_FLAGS_MASK, PROGRAM_MAGIC,
    PROGRAM_VERSION, ProgramHeader,
};

/// Flags every compile of the header uses.
const STRICT_FLAGS: &[&str] = &["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic"];

/// Fields that exist only in C because Rust keeps them private (the ring header's padding).
/// The C side must still lay them out so every struct is contiguous (checked below).
const C_ONLY_FIELDS: &[(&str, &[&str])] = &[(
    "nnaccel_ring_header",
    &["_pad0", "_pad1", "_pad2", "_pad3", "_pad4", "_reserved"],
)];

// ---------------------------------------------------------------------------------------------
// The Rust side.

/// How a field is typed, as both languages can name it.
trait AbiKind {
    const KIND: &'static str;
}
impl AbiKind for u32 {
    const KIND: &'static str = "u32";
}
impl AbiKind for i32 {
    const KIND: &'static str = "i32";
}
impl AbiKind for u64 {
    const KIND: &'static str = "u64";
}
impl AbiKind for f32 {
    const KIND: &'static str = "f32";
}
impl<T, const N: usize> AbiKind for [T; N] {
    const KIND: &'static str = "aggregate";
}
impl AbiKind for Binding {
    const KIND: &'static str = "aggregate";
}
impl AbiKind for Job {
    const KIND: &'static str = "aggregate";
}

fn field_size<T, F>(_: fn(&T) -> &F) -> usize {
    size_of::<F>()
}

fn field_kind<T, F: AbiKind>(_: fn(&T) -> &F) -> &'static str {
    F::KIND
}

#[derive(Debug)]
struct RustField {
    name: &'static str,
    offset: usize,
    size: usize,
    kind: &'static str,
}

#[derive(Debug)]
struct RustLayout {
    c_name: &'static str,
    size: usize,
    align: usize,
    fields: Vec<RustField>,
}

macro_rules! rust_layout {
    ($c_name:literal, $ty:ty, [$($field:ident),* $(,)?]) => {
        RustLayout {
            c_name: $c_name,
            size: size_of::<$ty>(),
            align: align_of::<$ty>(),
            fields: vec![$(RustField {
                name: stringify!($field),
                offset: std::mem::offset_of!($ty, $field),
                size: field_size(|s: &$ty| &s.$field),
                kind: field_kind(|s: &$ty| &s.$field),
            }),*],
        }
    };
}

/// Every C struct with the layout of its Rust twin: the `LAYOUTS` structs (cross-checked against
/// `LAYOUTS` itself) and the program-format records.
#[rustfmt::skip]
fn rust_layouts() -> Vec<RustLayout> {
    vec![
        rust_layout!("nnaccel_get_param", GetParam, [param, pad, value]),
        rust_layout!("nnaccel_bo_create", BoCreate, [size, flags, handle]),
        rust_layout!("nnaccel_bo_import", BoImport, [fd, access, offset, size, handle, pad]),
        rust_layout!("nnaccel_bo_export", BoExport, [handle, flags, socket_fd, pad]),
        rust_layout!("nnaccel_bo_info", BoInfo, [handle, kind, size, access, pad, reserved]),
        rust_layout!("nnaccel_bo_close", BoClose, [handle, pad]),
        rust_layout!("nnaccel_program_create", ProgramCreate, [data_ptr, data_len, flags, handle]),
        rust_layout!("nnaccel_program_destroy", ProgramDestroy, [handle, pad]),
        rust_layout!("nnaccel_binding", Binding, [bo, flags, offset, length]),
        rust_layout!("nnaccel_job", Job, [
            user_data, program, flags, num_bindings, pad, timeout_ns, bindings,
        ]),
        rust_layout!("nnaccel_job_cancel", JobCancel, [queue_id, flags, seq]),
        rust_layout!("nnaccel_submit", Submit, [flags, pad, seq, job]),
        rust_layout!("nnaccel_wait", Wait, [
            queue_id, flags, seq, deadline_ns, status, pad, device_time_ns, user_data,
        ]),
        rust_layout!("nnaccel_queue_create", QueueCreate, [
            memfd, flags, offset, size, entries, queue_id, reserved,
        ]),
        rust_layout!("nnaccel_queue_destroy", QueueDestroy, [queue_id, pad]),
        rust_layout!("nnaccel_ring_header", RingHeader, [
            magic, version, entries, job_size, completion_size, error, sq_tail, sq_head,
            sq_doorbell, sq_engine_sleeping, cq_seq, cq_doorbell, cq_waiters,
        ]),
        rust_layout!("nnaccel_completion", Completion, [
            seq, user_data, status, pad, device_time_ns,
        ]),
        rust_layout!("nnaccel_program_header", ProgramHeader, [
            magic, version, num_operands, num_operations, num_inputs, num_outputs, num_bo_refs,
            flags, index_words, pad, const_bytes,
        ]),
        rust_layout!("nnaccel_operand_record", OperandRecord, [
            operand_type, rank, dims, scale, zero_point, lifetime, location, offset, length,
            channel_dim, num_channel_scales, channel_scales_offset,
        ]),
        rust_layout!("nnaccel_operation_record", OperationRecord, [
            operation_type, num_inputs, num_outputs, first_index,
        ]),
    ]
}

trait ToU64 {
    fn to_u64(self) -> u64;
}
impl ToU64 for u32 {
    fn to_u64(self) -> u64 {
        u64::from(self)
    }
}
impl ToU64 for u64 {
    fn to_u64(self) -> u64 {
        self
    }
}
impl ToU64 for usize {
    fn to_u64(self) -> u64 {
        self as u64
    }
}

/// `NNACCEL_<name>` in C equals `<name>` in Rust.
macro_rules! prefixed {
    ($($name:ident),* $(,)?) => {
        vec![$((concat!("NNACCEL_", stringify!($name)).to_string(), $name.to_u64())),*]
    };
}

/// Every constant the header defines (macros taking arguments evaluated at a few points), with
/// its Rust value.
fn rust_constants() -> Vec<(String, u64)> {
    let mut consts = vec![
        ("NNACCEL_API_VERSION".to_string(), NNACCEL_API_VERSION),
        (
            "NNACCEL_IOCTL_TYPE".to_string(),
            NNACCEL_IOCTL_TYPE.to_u64(),
        ),
    ];
    consts.extend(prefixed![
        PARAM_API_VERSION,
        PARAM_CAPABILITIES,
        PARAM_MAX_BOS,
        PARAM_MAX_BO_SIZE,
        PARAM_DEVICE_MEMORY_SIZE,
        PARAM_DEVICE_MEMORY_USED,
        PARAM_MAX_PROGRAM_SIZE,
        PARAM_MAX_QUEUE_DEPTH,
        PARAM_MAX_BINDINGS,
        PARAM_LIVE_FILES,
        PARAM_LIVE_BOS,
        PARAM_LIVE_PROGRAMS,
        PARAM_LIVE_QUEUES,
        PARAM_JOBS_COMPLETED,
        PARAM_ENGINE_WAIT_MODE,
        PARAM_MAX_PROGRAMS,
        PARAM_MAX_QUEUES,
        PARAM_COUNT,
        CAP_BO_CREATE,
        CAP_BO_IMPORT,
        CAP_BO_IMPORT_DMABUF,
        CAP_BO_EXPORT,
        CAP_QUEUE_RING,
        CAP_FAULT_INJECTION,
        CAP_JOB_CANCEL,
        WAIT_MODE_FUTEX,
        WAIT_MODE_IO_URING,
        BO_ACCESS_READ,
        BO_ACCESS_WRITE,
        BO_ACCESS_MASK,
        BO_CREATE_FLAGS_MASK,
        BO_KIND_DEVICE,
        BO_KIND_MEMFD,
        BO_KIND_DMABUF,
        BO_KIND_FILE,
        BO_IMPORT_ALIGN,
        MAX_BINDINGS,
        JOB_FLAGS_MASK,
        QUEUE_FLAG_HIGH_PERFORMANCE,
        QUEUE_FLAGS_MASK,
        RING_MAGIC,
        RING_VERSION,
        RING_SQ_OFFSET,
        PROGRAM_MAGIC,
        PROGRAM_VERSION,
        PROGRAM_FLAG_RELAX_F32_TO_F16,
        PROGRAM_FLAGS_MASK,
        MAX_RANK,
        MAX_OPERANDS,
        MAX_OPERATIONS,
        MAX_OPERATION_ARGS,
        LIFETIME_TEMPORARY,
        LIFETIME_INPUT,
        LIFETIME_OUTPUT,
        LIFETIME_CONSTANT,
        LIFETIME_BO_REF,
        LIFETIME_NO_VALUE,
    ]);
    for n in [1u32, 2, 64, 1024] {
        let size = ring_size(n).map_or(0, ToU64::to_u64);
        consts.push((format!("NNACCEL_RING_SIZE({n})"), size));
        consts.push((
            format!("NNACCEL_RING_CQ_OFFSET({n})"),
            ring_cq_offset(n).to_u64(),
        ));
    }
    consts
}

// ---------------------------------------------------------------------------------------------
// The C side.

fn include_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("include")
}

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Result<Self, String> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = std::env::temp_dir().join(format!(
            "nnaccel-c-header-{tag}-{}-{nanos}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        Ok(Self(dir))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `cc` with the strict flags, the header's include dir and `args`.
fn cc(args: &[&str]) -> Result<(), String> {
    let include = include_dir();
    let out = Command::new("cc")
        .args(STRICT_FLAGS)
        .arg("-I")
        .arg(&include)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run the C compiler `cc` (is it installed?): {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "cc {args:?} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// The probe: prints, one fact a line,
/// `struct NAME SIZE ALIGN`, `field STRUCT FIELD OFFSET SIZE KIND`, `ioctl NAME VALUE`,
/// `const NAME VALUE`.
fn probe_source() -> String {
    let mut c = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <nnaccel.h>\n\n\
         #define KIND(x) _Generic((x), __u32: \"u32\", __s32: \"i32\", __u64: \"u64\", \
         float: \"f32\", default: \"aggregate\")\n\n\
         int main(void)\n{\n",
    );
    for layout in rust_layouts() {
        let s = layout.c_name;
        let _ = writeln!(
            c,
            "\tprintf(\"struct {s} %zu %zu\\n\", sizeof(struct {s}), _Alignof(struct {s}));"
        );
        let extra = C_ONLY_FIELDS
            .iter()
            .filter(|(n, _)| *n == s)
            .flat_map(|(_, f)| f.iter());
        for f in layout.fields.iter().map(|f| f.name).chain(extra.copied()) {
            let _ = writeln!(
                c,
                "\t{{ struct {s} v; (void)v; printf(\"field {s} {f} %zu %zu %s\\n\", \
                 offsetof(struct {s}, {f}), sizeof(v.{f}), KIND(v.{f})); }}"
            );
        }
    }
    for (name, _) in ALL_IOCTLS {
        let _ = writeln!(
            c,
            "\tprintf(\"ioctl {name} %llu\\n\", (unsigned long long)(NNACCEL_IOCTL_{name}));"
        );
    }
    for (name, _) in rust_constants() {
        let _ = writeln!(
            c,
            "\tprintf(\"const {name} %llu\\n\", (unsigned long long)({name}));"
        );
    }
    c.push_str("\treturn 0;\n}\n");
    c
}

/// What the probe printed.
#[derive(Debug, Default)]
struct CFacts {
    /// name -> (size, align)
    structs: BTreeMap<String, (usize, usize)>,
    /// struct -> fields in declaration order: (name, offset, size, kind)
    fields: BTreeMap<String, Vec<(String, usize, usize, String)>>,
    ioctls: BTreeMap<String, u64>,
    consts: BTreeMap<String, u64>,
}

fn parse_facts(out: &str) -> Result<CFacts, String> {
    let num = |s: &str| {
        s.parse::<u64>()
            .map_err(|e| format!("bad number {s:?}: {e}"))
    };
    let size = |s: &str| {
        s.parse::<usize>()
            .map_err(|e| format!("bad number {s:?}: {e}"))
    };
    let mut facts = CFacts::default();
    for line in out.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["struct", name, sz, al] => {
                facts
                    .structs
                    .insert((*name).to_string(), (size(sz)?, size(al)?));
            }
            ["field", s, f, off, sz, kind] => {
                facts.fields.entry((*s).to_string()).or_default().push((
                    (*f).to_string(),
                    size(off)?,
                    size(sz)?,
                    (*kind).to_string(),
                ));
            }
            ["ioctl", name, v] => {
                facts.ioctls.insert((*name).to_string(), num(v)?);
            }
            ["const", name, v] => {
                facts.consts.insert((*name).to_string(), num(v)?);
            }
            _ => return Err(format!("unexpected probe line {line:?}")),
        }
    }
    Ok(facts)
}

fn build_and_run_probe() -> Result<CFacts, String> {
    let dir = TempDir::new("probe")?;
    let src = dir.0.join("probe.c");
    let exe = dir.0.join("probe");
    std::fs::write(&src, probe_source()).map_err(|e| format!("writing {}: {e}", src.display()))?;
    let (src_s, exe_s) = (src.to_string_lossy(), exe.to_string_lossy());
    cc(&[&src_s, "-o", &exe_s])?;
    let out = Command::new(&exe)
        .output()
        .map_err(|e| format!("running the probe: {e}"))?;
    if !out.status.success() {
        return Err(format!("the probe failed: {}", out.status));
    }
    parse_facts(&String::from_utf8_lossy(&out.stdout))
}

/// The probe is built and run once; every test reads its output.
fn c_facts() -> &'static Result<CFacts, String> {
    static FACTS: OnceLock<Result<CFacts, String>> = OnceLock::new();
    FACTS.get_or_init(build_and_run_probe)
}

/// The probe's facts, or the test fails with the compiler's (unescaped) output.
macro_rules! c_facts {
    () => {
        match c_facts() {
            Ok(facts) => facts,
            Err(e) => panic!("C header probe: {e}"),
        }
    };
}

// ---------------------------------------------------------------------------------------------
// The tests.

#[test]
fn c_header_compiles_cleanly_with_strict_warnings() {
    let dir = TempDir::new("strict").expect("temp dir");
    let src = dir.0.join("strict.c");
    let obj = dir.0.join("strict.o");
    // Included twice (the guard), first and alone (self-contained), every struct instantiated.
    let mut c = String::from("#include <nnaccel.h>\n#include <nnaccel.h>\n\n");
    for layout in rust_layouts() {
        let _ = writeln!(c, "struct {0} use_{0};", layout.c_name);
    }
    let _ = writeln!(c, "unsigned long long ring_bytes = NNACCEL_RING_SIZE(8);");
    std::fs::write(&src, c).expect("write source");
    let result = cc(&["-c", &src.to_string_lossy(), "-o", &obj.to_string_lossy()]);
    if let Err(e) = result {
        panic!("the header must compile with {STRICT_FLAGS:?}: {e}");
    }
}

#[test]
fn c_header_rust_table_matches_published_layouts() {
    // The table this test checks C against is the crate's LAYOUTS plus the program records.
    let ours = rust_layouts();
    for (name, size, fields) in LAYOUTS {
        let layout = ours.iter().find(|l| l.c_name == *name);
        let layout = layout.unwrap_or_else(|| panic!("LAYOUTS struct {name} not checked here"));
        assert_eq!(layout.size, *size, "{name} size");
        let here: Vec<(&str, usize)> = layout.fields.iter().map(|f| (f.name, f.offset)).collect();
        assert_eq!(here, fields.to_vec(), "{name} fields");
    }
    let program = [
        "nnaccel_program_header",
        "nnaccel_operand_record",
        "nnaccel_operation_record",
    ];
    for layout in &ours {
        assert!(
            LAYOUTS.iter().any(|(n, ..)| *n == layout.c_name) || program.contains(&layout.c_name),
            "{} is neither in LAYOUTS nor a program record",
            layout.c_name
        );
    }
    let size_of = |n: &str| ours.iter().find(|l| l.c_name == n).map(|l| l.size);
    assert_eq!(size_of("nnaccel_program_header"), Some(48));
    assert_eq!(size_of("nnaccel_operand_record"), Some(80));
    assert_eq!(size_of("nnaccel_operation_record"), Some(16));
}

#[test]
fn c_header_struct_layouts_match_rust() {
    let facts = c_facts!();
    let ours = rust_layouts();
    for layout in &ours {
        let s = layout.c_name;
        assert_eq!(
            facts.structs.get(s),
            Some(&(layout.size, layout.align)),
            "struct {s} (size, align)"
        );
        let c_fields = &facts.fields[s];
        for f in &layout.fields {
            let c = c_fields.iter().find(|(n, ..)| n == f.name);
            let c = c.unwrap_or_else(|| panic!("struct {s}: no field {} in C", f.name));
            assert_eq!(
                (c.1, c.2, c.3.as_str()),
                (f.offset, f.size, f.kind),
                "struct {s} field {} (offset, size, type)",
                f.name
            );
        }
    }
    let c_names: BTreeSet<&str> = facts.structs.keys().map(String::as_str).collect();
    let rust_names: BTreeSet<&str> = ours.iter().map(|l| l.c_name).collect();
    assert_eq!(c_names, rust_names);
}

#[test]
fn c_header_structs_have_no_implicit_padding() {
    // Fields, by offset, tile each struct exactly: no compiler-inserted padding, and the ring
    // header's explicit padding arrays fill the gaps between its cache lines.
    let facts = c_facts!();
    for (s, fields) in &facts.fields {
        let (size, _) = facts.structs[s];
        let mut sorted = fields.clone();
        sorted.sort_by_key(|f| f.1);
        let mut end = 0;
        for (name, offset, fsize, _) in &sorted {
            assert_eq!(
                *offset, end,
                "struct {s}: a gap or an overlap before {name}"
            );
            end = offset + fsize;
        }
        assert_eq!(end, size, "struct {s}: trailing padding");
        assert_eq!(size % 8, 0, "struct {s} is a multiple of 8 bytes");
    }
}

#[test]
fn c_header_ioctl_numbers_match_rust() {
    let facts = c_facts!();
    for (name, cmd) in ALL_IOCTLS {
        let c = facts.ioctls.get(*name).copied();
        let rust = u64::from(*cmd);
        assert_eq!(
            c,
            Some(rust),
            "NNACCEL_IOCTL_{name}: C {c:#x?}, Rust {rust:#x}"
        );
    }
    assert_eq!(facts.ioctls.len(), ALL_IOCTLS.len());
    assert_eq!(ALL_IOCTLS.len(), 13);
}

#[test]
fn c_header_constants_match_rust() {
    let facts = c_facts!();
    let consts = rust_constants();
    for (name, value) in &consts {
        let c = facts.consts.get(name).copied();
        assert_eq!(c, Some(*value), "{name}: C {c:#x?}, Rust {value:#x}");
    }
    assert_eq!(facts.consts.len(), consts.len());
}
