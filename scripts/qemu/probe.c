/* Guest probe for the nnaccel QEMU image: checks that the kernel features the QEMU tier relies
 * on are there. Built statically on the host (cc -static) and run inside the guest.
 *   dma-heap: /dev/dma_heap/system, DMA_HEAP_IOCTL_ALLOC of 1 MiB, mmap, DMA_BUF_IOCTL_SYNC
 *   udmabuf:  /dev/udmabuf, UDMABUF_CREATE over a sealed memfd, mmap
 *   CUSE:     /dev/cuse (the init loads cuse.ko), opens
 *   io_uring: IORING_REGISTER_PROBE says IORING_OP_FUTEX_WAIT/WAKE are supported, and a
 *             FUTEX_WAIT + FUTEX_WAKE round trip completes through the ring
 * Prints one PASS/FAIL line per check (INFO lines are not checks) and exits 1 on any failure.
 * Constants are spelled out so the host's (older) kernel headers do not matter. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/types.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

static int failures, passes;

static void result(int ok, const char *fmt, ...)
{
	va_list ap;
	printf("%s: ", ok ? "PASS" : "FAIL");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	if (ok)
		passes++;
	else
		failures++;
}

/* ---- dma-heap / dma-buf (include/uapi/linux/dma-heap.h, dma-buf.h) ---- */
struct dma_heap_allocation_data {
	__u64 len;
	__u32 fd;
	__u32 fd_flags;
	__u64 heap_flags;
};
#define DMA_HEAP_IOCTL_ALLOC _IOWR('H', 0x0, struct dma_heap_allocation_data)

struct dma_buf_sync {
	__u64 flags;
};
#define DMA_BUF_SYNC_READ (1 << 0)
#define DMA_BUF_SYNC_WRITE (2 << 0)
#define DMA_BUF_SYNC_RW (DMA_BUF_SYNC_READ | DMA_BUF_SYNC_WRITE)
#define DMA_BUF_SYNC_START (0 << 2)
#define DMA_BUF_SYNC_END (1 << 2)
#define DMA_BUF_IOCTL_SYNC _IOW('b', 0, struct dma_buf_sync)

/* ---- udmabuf (include/uapi/linux/udmabuf.h) ---- */
struct udmabuf_create {
	__u32 memfd;
	__u32 flags;
	__u64 offset;
	__u64 size;
};
#define UDMABUF_FLAGS_CLOEXEC 0x01
#define UDMABUF_CREATE _IOW('u', 0x42, struct udmabuf_create)

/* ---- io_uring (include/uapi/linux/io_uring.h) ---- */
struct io_sqring_offsets {
	__u32 head, tail, ring_mask, ring_entries, flags, dropped, array, resv1;
	__u64 user_addr;
};
struct io_cqring_offsets {
	__u32 head, tail, ring_mask, ring_entries, overflow, cqes, flags, resv1;
	__u64 user_addr;
};
struct io_uring_params {
	__u32 sq_entries, cq_entries, flags, sq_thread_cpu, sq_thread_idle, features, wq_fd;
	__u32 resv[3];
	struct io_sqring_offsets sq_off;
	struct io_cqring_offsets cq_off;
};
struct io_uring_sqe {
	__u8 opcode;
	__u8 flags;
	__u16 ioprio;
	__s32 fd;          /* futex ops: futex2 flags */
	__u64 off;         /* futex ops (addr2): expected value (wait) / how many (wake) */
	__u64 addr;        /* futex ops: address of the futex word */
	__u32 len;         /* futex ops: must be 0 */
	__u32 futex_flags; /* union with rw_flags etc.: must be 0 for futex ops */
	__u64 user_data;
	__u16 buf_index;
	__u16 personality;
	__s32 splice_fd_in;
	__u64 addr3;       /* futex ops: mask */
	__u64 __pad2[1];
};
struct io_uring_cqe {
	__u64 user_data;
	__s32 res;
	__u32 flags;
};
struct io_uring_probe_op {
	__u8 op;
	__u8 resv;
	__u16 flags;
	__u32 resv2;
};
struct io_uring_probe {
	__u8 last_op;
	__u8 ops_len;
	__u16 resv;
	__u32 resv2[3];
	struct io_uring_probe_op ops[256];
};
#define IORING_OFF_SQ_RING 0ULL
#define IORING_OFF_CQ_RING 0x8000000ULL
#define IORING_OFF_SQES 0x10000000ULL
#define IORING_FEAT_SINGLE_MMAP (1U << 0)
#define IORING_ENTER_GETEVENTS (1U << 0)
#define IORING_REGISTER_PROBE 8
#define IO_URING_OP_SUPPORTED (1U << 0)
#define IORING_OP_FUTEX_WAIT 51
#define IORING_OP_FUTEX_WAKE 52
#define IORING_OP_FUTEX_WAITV 53
#define FUTEX2_SIZE_U32 0x02
#define FUTEX_BITSET_MATCH_ANY 0xffffffffULL
#ifndef __NR_io_uring_setup
#define __NR_io_uring_setup 425
#define __NR_io_uring_enter 426
#define __NR_io_uring_register 427
#endif
#ifndef MFD_ALLOW_SEALING
#define MFD_ALLOW_SEALING 0x0002U
#endif

_Static_assert(sizeof(struct io_uring_sqe) == 64, "sqe size");
_Static_assert(sizeof(struct io_uring_params) == 120, "params size");
_Static_assert(sizeof(struct dma_heap_allocation_data) == 24, "heap alloc size");

static void check_dma_heap(void **dmabuf_map_out)
{
	const char *path = "/dev/dma_heap/system";
	struct stat st;
	result(stat(path, &st) == 0 && S_ISCHR(st.st_mode), "%s exists (char device)", path);
	int heap = open(path, O_RDONLY | O_CLOEXEC);
	if (heap < 0) {
		result(0, "open %s: %s", path, strerror(errno));
		return;
	}
	struct dma_heap_allocation_data data = {
		.len = 1 << 20,
		.fd_flags = O_RDWR | O_CLOEXEC,
	};
	if (ioctl(heap, DMA_HEAP_IOCTL_ALLOC, &data) != 0) {
		result(0, "DMA_HEAP_IOCTL_ALLOC 1 MiB: %s", strerror(errno));
		close(heap);
		return;
	}
	close(heap);
	result(1, "DMA_HEAP_IOCTL_ALLOC 1 MiB -> fd %u", data.fd);
	unsigned char *p = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_SHARED, (int)data.fd, 0);
	if (p == MAP_FAILED) {
		result(0, "mmap of the dma-heap buffer: %s", strerror(errno));
		return;
	}
	struct dma_buf_sync sync = { DMA_BUF_SYNC_START | DMA_BUF_SYNC_RW };
	int sync_ok = ioctl((int)data.fd, DMA_BUF_IOCTL_SYNC, &sync) == 0;
	memset(p, 0xa5, 1 << 20);
	int ok = p[0] == 0xa5 && p[(1 << 20) - 1] == 0xa5;
	sync.flags = DMA_BUF_SYNC_END | DMA_BUF_SYNC_RW;
	sync_ok = sync_ok && ioctl((int)data.fd, DMA_BUF_IOCTL_SYNC, &sync) == 0;
	result(ok, "mmap of the dma-heap buffer, write + read back 1 MiB");
	result(sync_ok, "DMA_BUF_IOCTL_SYNC start/end on the dma-heap buffer");
	*dmabuf_map_out = p; /* kept mapped for the futex-in-dma-buf check */
}

static void check_udmabuf(void)
{
	const char *path = "/dev/udmabuf";
	struct stat st;
	result(stat(path, &st) == 0 && S_ISCHR(st.st_mode), "%s exists (char device)", path);
	int dev = open(path, O_RDWR | O_CLOEXEC);
	if (dev < 0) {
		result(0, "open %s: %s", path, strerror(errno));
		return;
	}
	size_t size = 1 << 20;
	int memfd = (int)syscall(SYS_memfd_create, "probe", MFD_ALLOW_SEALING | MFD_CLOEXEC);
	if (memfd < 0 || ftruncate(memfd, (off_t)size) != 0 ||
	    fcntl(memfd, F_ADD_SEALS, F_SEAL_SHRINK) != 0) {
		result(0, "sealed memfd for udmabuf: %s", strerror(errno));
		close(dev);
		return;
	}
	struct udmabuf_create create = {
		.memfd = (__u32)memfd, .flags = UDMABUF_FLAGS_CLOEXEC, .offset = 0, .size = size,
	};
	int buf = ioctl(dev, UDMABUF_CREATE, &create);
	close(dev);
	if (buf < 0) {
		result(0, "UDMABUF_CREATE 1 MiB: %s", strerror(errno));
		close(memfd);
		return;
	}
	unsigned char *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	unsigned char *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, buf, 0);
	int ok = m != MAP_FAILED && p != MAP_FAILED;
	if (ok) {
		memset(m, 0x5a, size);
		ok = p[0] == 0x5a && p[size - 1] == 0x5a;
	}
	result(ok, "UDMABUF_CREATE 1 MiB -> fd %d, its mapping sees the memfd's bytes", buf);
	close(buf);
	close(memfd);
}

static void check_cuse(void)
{
	const char *path = "/dev/cuse";
	struct stat st;
	result(stat(path, &st) == 0 && S_ISCHR(st.st_mode), "%s exists (char device)", path);
	int fd = open(path, O_RDWR | O_CLOEXEC);
	result(fd >= 0, "open %s%s%s", path, fd < 0 ? ": " : "", fd < 0 ? strerror(errno) : "");
	if (fd >= 0)
		close(fd);
}

struct ring {
	int fd;
	unsigned *sq_tail, *sq_mask, *sq_array, *cq_head, *cq_tail, *cq_mask;
	struct io_uring_sqe *sqes;
	struct io_uring_cqe *cqes;
};

static int ring_init(struct ring *r)
{
	struct io_uring_params p;
	memset(&p, 0, sizeof(p));
	r->fd = (int)syscall(__NR_io_uring_setup, 8, &p);
	if (r->fd < 0)
		return -1;
	size_t sq_sz = p.sq_off.array + p.sq_entries * sizeof(unsigned);
	size_t cq_sz = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
	if (p.features & IORING_FEAT_SINGLE_MMAP)
		sq_sz = cq_sz = sq_sz > cq_sz ? sq_sz : cq_sz;
	char *sq = mmap(NULL, sq_sz, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r->fd,
			IORING_OFF_SQ_RING);
	if (sq == MAP_FAILED)
		return -1;
	char *cq = sq;
	if (!(p.features & IORING_FEAT_SINGLE_MMAP)) {
		cq = mmap(NULL, cq_sz, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r->fd,
			  IORING_OFF_CQ_RING);
		if (cq == MAP_FAILED)
			return -1;
	}
	r->sqes = mmap(NULL, p.sq_entries * sizeof(struct io_uring_sqe), PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_POPULATE, r->fd, IORING_OFF_SQES);
	if (r->sqes == MAP_FAILED)
		return -1;
	r->sq_tail = (unsigned *)(sq + p.sq_off.tail);
	r->sq_mask = (unsigned *)(sq + p.sq_off.ring_mask);
	r->sq_array = (unsigned *)(sq + p.sq_off.array);
	r->cq_head = (unsigned *)(cq + p.cq_off.head);
	r->cq_tail = (unsigned *)(cq + p.cq_off.tail);
	r->cq_mask = (unsigned *)(cq + p.cq_off.ring_mask);
	r->cqes = (struct io_uring_cqe *)(cq + p.cq_off.cqes);
	return 0;
}

static void ring_push_futex(struct ring *r, __u8 op, void *addr, __u64 val, __u64 user_data)
{
	unsigned tail = *r->sq_tail;
	unsigned idx = tail & *r->sq_mask;
	struct io_uring_sqe *sqe = &r->sqes[idx];
	memset(sqe, 0, sizeof(*sqe));
	sqe->opcode = op;
	sqe->fd = FUTEX2_SIZE_U32; /* futex2 flags live in sqe->fd */
	sqe->addr = (__u64)(uintptr_t)addr;
	sqe->off = val;            /* wait: expected value; wake: number to wake */
	sqe->addr3 = FUTEX_BITSET_MATCH_ANY;
	sqe->user_data = user_data;
	r->sq_array[idx] = idx;
	__atomic_store_n(r->sq_tail, tail + 1, __ATOMIC_RELEASE);
}

/* Submits what is queued and waits for `want` completions; returns how many were reaped. */
static int ring_submit_wait(struct ring *r, unsigned submit, unsigned want, struct io_uring_cqe *out)
{
	if (syscall(__NR_io_uring_enter, r->fd, submit, want, IORING_ENTER_GETEVENTS, NULL, 0) < 0)
		return -1;
	unsigned head = *r->cq_head;
	int n = 0;
	while (head != __atomic_load_n(r->cq_tail, __ATOMIC_ACQUIRE) && n < (int)want) {
		out[n++] = r->cqes[head & *r->cq_mask];
		head++;
	}
	__atomic_store_n(r->cq_head, head, __ATOMIC_RELEASE);
	return n;
}

static void check_io_uring(void *dmabuf_map)
{
	struct ring r;
	if (ring_init(&r) != 0) {
		result(0, "io_uring_setup: %s", strerror(errno));
		return;
	}
	static struct io_uring_probe probe;
	memset(&probe, 0, sizeof(probe));
	if (syscall(__NR_io_uring_register, r.fd, IORING_REGISTER_PROBE, &probe, 256) != 0) {
		result(0, "IORING_REGISTER_PROBE: %s", strerror(errno));
		return;
	}
	printf("INFO: io_uring probe: last_op %u\n", probe.last_op);
	static const struct { __u8 op; const char *name; } ops[] = {
		{ IORING_OP_FUTEX_WAIT, "IORING_OP_FUTEX_WAIT" },
		{ IORING_OP_FUTEX_WAKE, "IORING_OP_FUTEX_WAKE" },
		{ IORING_OP_FUTEX_WAITV, "IORING_OP_FUTEX_WAITV" },
	};
	int supported = 1;
	for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
		int ok = ops[i].op <= probe.last_op &&
			 (probe.ops[ops[i].op].flags & IO_URING_OP_SUPPORTED);
		supported &= ok;
		result(ok, "io_uring supports %s (opcode %u)", ops[i].name, ops[i].op);
	}
	if (!supported)
		return;

	/* FUTEX_WAIT on a word holding 0 (blocks), then FUTEX_WAKE of that word. */
	static uint32_t word;
	struct io_uring_cqe cqe[2];
	ring_push_futex(&r, IORING_OP_FUTEX_WAIT, &word, 0, 1);
	if (ring_submit_wait(&r, 1, 0, cqe) < 0) {
		result(0, "io_uring_enter (FUTEX_WAIT): %s", strerror(errno));
		return;
	}
	ring_push_futex(&r, IORING_OP_FUTEX_WAKE, &word, 1, 2);
	int n = ring_submit_wait(&r, 1, 2, cqe);
	int got_wait = 0, got_wake = 0;
	for (int i = 0; i < n; i++) {
		if (cqe[i].user_data == 1 && cqe[i].res == 0)
			got_wait = 1;
		if (cqe[i].user_data == 2 && cqe[i].res == 1)
			got_wake = 1;
	}
	result(got_wait && got_wake, "io_uring FUTEX_WAIT completed by FUTEX_WAKE (%d completions)", n);

	/* A mismatched value must complete at once with -EAGAIN. */
	word = 7;
	ring_push_futex(&r, IORING_OP_FUTEX_WAIT, &word, 0, 3);
	n = ring_submit_wait(&r, 1, 1, cqe);
	result(n == 1 && cqe[0].res == -EAGAIN, "io_uring FUTEX_WAIT on a changed word -> EAGAIN (res %d)",
	       n == 1 ? cqe[0].res : 0);

	/* Futex word inside a dma-buf mapping: expected to be refused (VM_PFNMAP). Informational. */
	if (dmabuf_map) {
		ring_push_futex(&r, IORING_OP_FUTEX_WAIT, dmabuf_map, 0xa5a5a5a5u, 4);
		n = ring_submit_wait(&r, 1, 1, cqe);
		if (n == 1 && cqe[0].res < 0)
			printf("INFO: io_uring FUTEX_WAIT on a dma-buf mapping -> %s (%d)\n",
			       strerror(-cqe[0].res), cqe[0].res);
		else
			printf("INFO: io_uring FUTEX_WAIT on a dma-buf mapping -> res %d (%d completions)\n",
			       n == 1 ? cqe[0].res : 0, n);
	}
	close(r.fd);
}

int main(void)
{
	struct utsname u;
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (uname(&u) == 0)
		printf("INFO: kernel %s %s\n", u.release, u.version);
	void *dmabuf_map = NULL;
	check_dma_heap(&dmabuf_map);
	check_udmabuf();
	check_cuse();
	check_io_uring(dmabuf_map);
	printf("probe: %d passed, %d failed\n", passes, failures);
	return failures ? 1 : 0;
}
