//! `nnaccel_uapi::linux` and the kernel commands in `nnaccel_uapi::ioctl` against the kernel's
//! own uapi headers (`<linux/dma-heap.h>`, `<linux/udmabuf.h>`, `<linux/dma-buf.h>`): a C probe
//! prints every struct size, alignment and field offset, every ioctl number and flag, and each
//! is compared with Rust. Where the headers are not installed (no `linux-libc-dev`) the test
//! says so and passes: the compile-time asserts in `linux.rs` and the golden numbers in
//! `ioctl.rs` still hold the layouts.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use nnaccel_uapi::ioctl::{DMA_BUF_IOCTL_SYNC, DMA_HEAP_IOCTL_ALLOC, UDMABUF_CREATE};
use nnaccel_uapi::linux::{
    DMA_BUF_SYNC_END, DMA_BUF_SYNC_READ, DMA_BUF_SYNC_START, DMA_BUF_SYNC_WRITE,
    DMA_HEAP_VALID_FD_FLAGS, DmaBufSync, DmaHeapAllocationData, UDMABUF_FLAGS_CLOEXEC,
    UdmabufCreate,
};

const HEADERS: &[&str] = &["linux/dma-heap.h", "linux/udmabuf.h", "linux/dma-buf.h"];

/// (C expression, Rust value) pairs the probe prints and the test compares.
fn facts() -> Vec<(String, u64)> {
    let mut f: Vec<(String, u64)> = Vec::new();
    macro_rules! layout {
        ($c:literal, $ty:ty, [$($field:ident),*]) => {
            f.push((format!("sizeof(struct {})", $c), size_of::<$ty>() as u64));
            f.push((format!("_Alignof(struct {})", $c), align_of::<$ty>() as u64));
            $(f.push((
                format!("offsetof(struct {}, {})", $c, stringify!($field)),
                std::mem::offset_of!($ty, $field) as u64,
            ));)*
        };
    }
    layout!(
        "dma_heap_allocation_data",
        DmaHeapAllocationData,
        [len, fd, fd_flags, heap_flags]
    );
    layout!(
        "udmabuf_create",
        UdmabufCreate,
        [memfd, flags, offset, size]
    );
    layout!("dma_buf_sync", DmaBufSync, [flags]);
    for (name, value) in [
        ("DMA_HEAP_IOCTL_ALLOC", u64::from(DMA_HEAP_IOCTL_ALLOC)),
        ("UDMABUF_CREATE", u64::from(UDMABUF_CREATE)),
        ("DMA_BUF_IOCTL_SYNC", u64::from(DMA_BUF_IOCTL_SYNC)),
        (
            "DMA_HEAP_VALID_FD_FLAGS",
            u64::from(DMA_HEAP_VALID_FD_FLAGS),
        ),
        ("UDMABUF_FLAGS_CLOEXEC", u64::from(UDMABUF_FLAGS_CLOEXEC)),
        ("DMA_BUF_SYNC_READ", DMA_BUF_SYNC_READ),
        ("DMA_BUF_SYNC_WRITE", DMA_BUF_SYNC_WRITE),
        ("DMA_BUF_SYNC_START", DMA_BUF_SYNC_START),
        ("DMA_BUF_SYNC_END", DMA_BUF_SYNC_END),
    ] {
        f.push((name.to_string(), value));
    }
    f
}

#[test]
fn linux_structs_and_numbers_match_the_kernel_headers() {
    if let Some(missing) = HEADERS
        .iter()
        .find(|h| !Path::new("/usr/include").join(h).exists())
    {
        eprintln!("SKIPPED: /usr/include/{missing} is not installed");
        return;
    }
    let facts = facts();
    let mut c = String::from("#include <stdio.h>\n#include <stddef.h>\n#include <fcntl.h>\n");
    for h in HEADERS {
        let _ = writeln!(c, "#include <{h}>");
    }
    c.push_str("int main(void)\n{\n");
    for (expr, _) in &facts {
        let _ = writeln!(c, "\tprintf(\"%llu\\n\", (unsigned long long)({expr}));");
    }
    c.push_str("\treturn 0;\n}\n");
    let dir = std::env::temp_dir().join(format!("nnaccel-linux-headers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("probe.c");
    let exe = dir.join("probe");
    std::fs::write(&src, c).unwrap();
    let built = Command::new("cc")
        .args(["-std=gnu11", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("run cc");
    assert!(
        built.status.success(),
        "cc: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    let out = Command::new(&exe).output().expect("run the probe");
    let _ = std::fs::remove_dir_all(&dir);
    let printed: Vec<u64> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(printed.len(), facts.len());
    for ((expr, rust), c) in facts.iter().zip(printed) {
        assert_eq!(
            *rust, c,
            "{expr}: Rust {rust:#x}, the kernel headers {c:#x}"
        );
    }
}
