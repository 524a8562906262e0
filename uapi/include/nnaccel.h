/* SPDX-License-Identifier: (GPL-2.0 WITH Linux-syscall-note) OR MIT */
/*
 * nnaccel.h - the /dev/nnaccel device contract for C.
 *
 * The same ABI as the Rust crate nnaccel-uapi (uapi/src/abi.rs, ioctl.rs, program.rs); a test
 * (uapi/tests/c_header.rs) compiles this header and checks every size, offset, ioctl number
 * and constant against Rust. See docs/uapi.md for the commands and their errors.
 *
 * Rules: fixed-width fields only, explicit padding, every struct a multiple of 8 bytes.
 * Reserved and pad fields, and unknown flag bits, must be zero (EINVAL otherwise). Arrays
 * travel as a __u64 user pointer plus a length. Handles are per open file and never 0.
 * Deadlines are absolute CLOCK_MONOTONIC nanoseconds. All multi-byte values are in the
 * host's byte order, except the program format (little-endian).
 */
#ifndef _UAPI_NNACCEL_H
#define _UAPI_NNACCEL_H

#include <linux/types.h>
#include <linux/ioctl.h>

#if defined(__cplusplus)
extern "C" {
#endif

/* Version of this contract reported by NNACCEL_PARAM_API_VERSION: major in the high 16 bits. */
#define NNACCEL_API_VERSION		((1ULL << 16) | 1)

/* -------------------------------------------------------------------------------------------
 * GET_PARAM
 */

/* API version (major << 16 | minor). */
#define NNACCEL_PARAM_API_VERSION		0
/* Capability bits (NNACCEL_CAP_*). */
#define NNACCEL_PARAM_CAPABILITIES		1
/* Most buffer objects one open file may hold. */
#define NNACCEL_PARAM_MAX_BOS			2
/* Largest buffer object, in bytes. */
#define NNACCEL_PARAM_MAX_BO_SIZE		3
/* Total device memory for BO_CREATE, in bytes. */
#define NNACCEL_PARAM_DEVICE_MEMORY_SIZE	4
/* Device memory in use, in bytes. */
#define NNACCEL_PARAM_DEVICE_MEMORY_USED	5
/* Largest program accepted by PROGRAM_CREATE, in bytes. */
#define NNACCEL_PARAM_MAX_PROGRAM_SIZE		6
/* Most ring entries a queue may have (and the default queue's depth). */
#define NNACCEL_PARAM_MAX_QUEUE_DEPTH		7
/* Most bindings in one job (NNACCEL_MAX_BINDINGS). */
#define NNACCEL_PARAM_MAX_BINDINGS		8
/* Debug counter: open files on the device. */
#define NNACCEL_PARAM_LIVE_FILES		9
/* Debug counter: live buffer objects (all files). */
#define NNACCEL_PARAM_LIVE_BOS			10
/* Debug counter: live programs (all files). */
#define NNACCEL_PARAM_LIVE_PROGRAMS		11
/* Debug counter: live queues (all files), the default queues included. */
#define NNACCEL_PARAM_LIVE_QUEUES		12
/* Debug counter: jobs completed since the device started. */
#define NNACCEL_PARAM_JOBS_COMPLETED		13
/* How engine workers wait for doorbells: NNACCEL_WAIT_MODE_*. */
#define NNACCEL_PARAM_ENGINE_WAIT_MODE		14
/* Most programs one open file may hold. */
#define NNACCEL_PARAM_MAX_PROGRAMS		15
/* Most queues one open file may hold (the default queue not counted). */
#define NNACCEL_PARAM_MAX_QUEUES		16
/* One past the highest parameter number. */
#define NNACCEL_PARAM_COUNT			17

/* The device can allocate device memory (BO_CREATE). */
#define NNACCEL_CAP_BO_CREATE		(1ULL << 0)
/* The device imports memfd and other mappable fds. */
#define NNACCEL_CAP_BO_IMPORT		(1ULL << 1)
/* The device imports dma-bufs (and brackets CPU access with DMA_BUF_IOCTL_SYNC). */
#define NNACCEL_CAP_BO_IMPORT_DMABUF	(1ULL << 2)
/* BO_EXPORT is available. */
#define NNACCEL_CAP_BO_EXPORT		(1ULL << 3)
/* Shared-memory submission rings (QUEUE_CREATE). */
#define NNACCEL_CAP_QUEUE_RING		(1ULL << 4)
/* Fault injection is compiled in (debug builds of the simulator only). */
#define NNACCEL_CAP_FAULT_INJECTION	(1ULL << 5)
/* Per-job timeouts (nnaccel_job.timeout_ns) and NNACCEL_IOCTL_JOB_CANCEL (API 1.1). */
#define NNACCEL_CAP_JOB_CANCEL		(1ULL << 6)

/* Engine workers wait on doorbells with the futex syscall. */
#define NNACCEL_WAIT_MODE_FUTEX		1
/* Engine workers wait on doorbells with io_uring FUTEX_WAIT. */
#define NNACCEL_WAIT_MODE_IO_URING	2

/* NNACCEL_IOCTL_GET_PARAM argument. */
struct nnaccel_get_param {
	__u32 param;		/* in: NNACCEL_PARAM_* */
	__u32 pad;		/* must be zero */
	__u64 value;		/* out: the value */
};

/* -------------------------------------------------------------------------------------------
 * Buffer objects
 */

/* BO access: the device may read it. */
#define NNACCEL_BO_ACCESS_READ		(1U << 0)
/* BO access: the device may write it. */
#define NNACCEL_BO_ACCESS_WRITE		(1U << 1)
/* All BO access bits. */
#define NNACCEL_BO_ACCESS_MASK		(NNACCEL_BO_ACCESS_READ | NNACCEL_BO_ACCESS_WRITE)

/* BO_CREATE flags: none defined yet; must be zero. */
#define NNACCEL_BO_CREATE_FLAGS_MASK	0U

/* Kind of a buffer object, as reported by BO_INFO: device memory (BO_CREATE). */
#define NNACCEL_BO_KIND_DEVICE		1
/* Imported from a memfd (or other shmem file). */
#define NNACCEL_BO_KIND_MEMFD		2
/* Imported from a dma-buf. */
#define NNACCEL_BO_KIND_DMABUF		3
/* Imported from another mappable file. */
#define NNACCEL_BO_KIND_FILE		4

/* Import offsets and sizes are multiples of this (the page size the device maps with). */
#define NNACCEL_BO_IMPORT_ALIGN		4096ULL

/* NNACCEL_IOCTL_BO_CREATE argument. */
struct nnaccel_bo_create {
	__u64 size;		/* in: bytes, non-zero, at most NNACCEL_PARAM_MAX_BO_SIZE */
	__u32 flags;		/* in: must be zero */
	__u32 handle;		/* out: the handle (never 0) */
};

/* NNACCEL_IOCTL_BO_IMPORT argument. */
struct nnaccel_bo_import {
	__s32 fd;		/* in: the caller's fd (memfd, dma-buf, other mappable file) */
	__u32 access;		/* in: NNACCEL_BO_ACCESS_*, at least one bit */
	__u64 offset;		/* in: offset into the file, a multiple of NNACCEL_BO_IMPORT_ALIGN */
	__u64 size;		/* in: bytes, non-zero; offset + size within the file */
	__u32 handle;		/* out: the handle (never 0) */
	__u32 pad;		/* must be zero */
};

/*
 * NNACCEL_IOCTL_BO_EXPORT argument. The new fd arrives with SCM_RIGHTS on the caller's
 * connected AF_UNIX socket named by socket_fd (the simulated device cannot install an fd
 * into the caller's table the way a kernel driver's fd_install() would).
 */
struct nnaccel_bo_export {
	__u32 handle;		/* in: the handle */
	__u32 flags;		/* in: must be zero */
	__s32 socket_fd;	/* in: the caller's AF_UNIX socket the fd is sent on */
	__u32 pad;		/* must be zero */
};

/* NNACCEL_IOCTL_BO_INFO argument. */
struct nnaccel_bo_info {
	__u32 handle;		/* in: the handle */
	__u32 kind;		/* out: NNACCEL_BO_KIND_* */
	__u64 size;		/* out: size in bytes */
	__u32 access;		/* out: NNACCEL_BO_ACCESS_* */
	__u32 pad;		/* must be zero */
	__u64 reserved;		/* must be zero */
};

/* NNACCEL_IOCTL_BO_CLOSE argument. */
struct nnaccel_bo_close {
	__u32 handle;		/* in: the handle */
	__u32 pad;		/* must be zero */
};

/* -------------------------------------------------------------------------------------------
 * Programs
 */

/* NNACCEL_IOCTL_PROGRAM_CREATE argument. */
struct nnaccel_program_create {
	__u64 data_ptr;		/* in: user pointer to the encoded program (see below) */
	__u64 data_len;		/* in: its length, non-zero, at most NNACCEL_PARAM_MAX_PROGRAM_SIZE */
	__u32 flags;		/* in: must be zero */
	__u32 handle;		/* out: the handle (never 0) */
};

/* NNACCEL_IOCTL_PROGRAM_DESTROY argument. */
struct nnaccel_program_destroy {
	__u32 handle;		/* in: the handle */
	__u32 pad;		/* must be zero */
};

/* -------------------------------------------------------------------------------------------
 * Jobs
 */

/* Most bindings (program arguments) one job carries. */
#define NNACCEL_MAX_BINDINGS		32

/* One program argument: a byte range of a buffer object. */
struct nnaccel_binding {
	__u32 bo;		/* a BO handle of the submitting file */
	__u32 flags;		/* must be zero */
	__u64 offset;		/* offset into the BO, a multiple of the argument's element size */
	__u64 length;		/* bytes, at least the argument's size; offset + length within the BO */
};

/* Job flags: none defined yet; must be zero. */
#define NNACCEL_JOB_FLAGS_MASK		0U

/*
 * One job: run program with bindings[0..num_bindings) as its arguments (inputs first, then
 * outputs, in the program's order). Also the submission entry of a queue ring.
 */
struct nnaccel_job {
	__u64 user_data;	/* opaque to the device; echoed in the completion */
	__u32 program;		/* a program handle of the submitting file */
	__u32 flags;		/* must be zero */
	__u32 num_bindings;	/* valid entries in bindings; the program's argument count */
	__u32 pad;		/* must be zero */
	__u64 timeout_ns;	/* absolute CLOCK_MONOTONIC deadline, 0 = none; -ETIMEDOUT after */
	struct nnaccel_binding bindings[NNACCEL_MAX_BINDINGS];	/* the arguments */
};

/* NNACCEL_IOCTL_SUBMIT argument: one job on the file's default queue (queue id 0). */
struct nnaccel_submit {
	__u32 flags;		/* in: must be zero */
	__u32 pad;		/* must be zero */
	__u64 seq;		/* out: the job's sequence number on the default queue (never 0) */
	struct nnaccel_job job;	/* in: the job */
};

/* NNACCEL_IOCTL_WAIT argument. */
struct nnaccel_wait {
	__u32 queue_id;		/* in: the queue (0 = the file's default queue) */
	__u32 flags;		/* in: must be zero */
	__u64 seq;		/* in: the sequence number to wait for (already submitted) */
	__u64 deadline_ns;	/* in: absolute CLOCK_MONOTONIC deadline; ETIMEDOUT once passed */
	__s32 status;		/* out: the job's status: 0 or a negative errno */
	__u32 pad;		/* must be zero */
	__u64 device_time_ns;	/* out: time the engine spent on the job, in ns */
	__u64 user_data;	/* out: the job's user_data */
};

/*
 * NNACCEL_IOCTL_JOB_CANCEL argument: ends one submitted job. Once the call returned 0 the
 * device never writes the job's output BOs again; it completes with -ECANCELED. EALREADY when
 * the job had already ended.
 */
struct nnaccel_job_cancel {
	__u32 queue_id;		/* in: the queue (0 = the file's default queue) */
	__u32 flags;		/* in: must be zero */
	__u64 seq;		/* in: the job's sequence number (already submitted) */
};

/* -------------------------------------------------------------------------------------------
 * Queues
 */

/* QUEUE_CREATE flag: stay in the high-performance state while the queue lives (burst hint). */
#define NNACCEL_QUEUE_FLAG_HIGH_PERFORMANCE	(1U << 0)
/* All QUEUE_CREATE flags. */
#define NNACCEL_QUEUE_FLAGS_MASK		NNACCEL_QUEUE_FLAG_HIGH_PERFORMANCE

/* NNACCEL_IOCTL_QUEUE_CREATE argument. */
struct nnaccel_queue_create {
	__s32 memfd;		/* in: memfd (shmem file) holding the ring; futex words need shmem */
	__u32 flags;		/* in: NNACCEL_QUEUE_FLAG_* */
	__u64 offset;		/* in: offset of the ring in the memfd, page aligned */
	__u64 size;		/* in: bytes available, at least NNACCEL_RING_SIZE(entries) */
	__u32 entries;		/* in: a power of two from 1 to NNACCEL_PARAM_MAX_QUEUE_DEPTH */
	__u32 queue_id;		/* out: the queue id (never 0) */
	__u64 reserved;		/* must be zero */
};

/* NNACCEL_IOCTL_QUEUE_DESTROY argument. */
struct nnaccel_queue_destroy {
	__u32 queue_id;		/* in: the queue id */
	__u32 pad;		/* must be zero */
};

/* -------------------------------------------------------------------------------------------
 * The queue ring in shared memory
 *
 *     0  struct nnaccel_ring_header (512 bytes; producer/consumer words on their own lines)
 *   512  submission entries: entries x struct nnaccel_job (800 bytes each)
 *    ..  completion entries: entries x struct nnaccel_completion (32 bytes each)
 *
 * Sequence numbers start at 1: the job at ring position p (0-based, ever increasing) has
 * seq = p + 1 and lives in submission slot p % entries; its completion lands in completion
 * slot p % entries. The client may have at most entries jobs whose completions it has not
 * read yet. Header fields are accessed atomically (release stores, acquire loads).
 */

/* Ring magic, "NNQR" little-endian; written by the device at QUEUE_CREATE. */
#define NNACCEL_RING_MAGIC		0x52514e4eU
/* Ring layout version. */
#define NNACCEL_RING_VERSION		1U
/* Offset of the submission entries (sizeof(struct nnaccel_ring_header)). */
#define NNACCEL_RING_SQ_OFFSET		512ULL
/* Offset of the completion entries of a ring with n entries. */
#define NNACCEL_RING_CQ_OFFSET(n)	\
	(NNACCEL_RING_SQ_OFFSET + (__u64)(n) * sizeof(struct nnaccel_job))
/* Bytes a ring of n entries occupies. */
#define NNACCEL_RING_SIZE(n)		\
	(NNACCEL_RING_CQ_OFFSET(n) + (__u64)(n) * sizeof(struct nnaccel_completion))

/* The ring header: 512 bytes, 64-byte aligned, one cache line per producer/consumer word. */
struct nnaccel_ring_header {
	__u32 magic;		/* NNACCEL_RING_MAGIC, written by the device */
	__u32 version;		/* NNACCEL_RING_VERSION */
	__u32 entries;		/* number of entries (power of two) */
	__u32 job_size;		/* sizeof(struct nnaccel_job) */
	__u32 completion_size;	/* sizeof(struct nnaccel_completion) */
	__u32 error;		/* device-reported fatal ring error (positive errno), 0 if healthy */
	__u8 _pad0[40];
	__u64 sq_tail;		/* jobs published so far; release-stored by the client */
	__u8 _pad1[56];
	__u64 sq_head;		/* jobs taken so far; release-stored by the device */
	__u8 _pad2[56];
	__u32 sq_doorbell;	/* futex word: the client increments it after publishing, wakes */
	__u32 sq_engine_sleeping; /* non-zero while the engine sleeps (or is about to) on it */
	__u8 _pad3[56];
	__u64 cq_seq;		/* seq of the last completed job; release-stored by the device */
	__u32 cq_doorbell;	/* futex word: the device increments it after each completion */
	__u32 cq_waiters;	/* non-zero while some client thread sleeps on cq_doorbell */
	__u8 _pad4[48];
	__u8 _reserved[192];
} __attribute__((aligned(64)));

/* One completion entry. */
struct nnaccel_completion {
	__u64 seq;		/* the job's sequence number */
	__u64 user_data;	/* the job's user_data */
	__s32 status;		/* 0, or a negative errno */
	__u32 pad;		/* must be zero */
	__u64 device_time_ns;	/* engine time for the job, in ns */
};

/* -------------------------------------------------------------------------------------------
 * The program format (what PROGRAM_CREATE carries): little-endian, in this order
 *
 *     struct nnaccel_program_header                      48 bytes
 *     struct nnaccel_operand_record   x num_operands     80 bytes each
 *     struct nnaccel_operation_record x num_operations   16 bytes each
 *     __u32 operand indexes of all operations x index_words (each one's inputs, then outputs)
 *     __u32 program inputs  x num_inputs   (operand indexes; job bindings 0..num_inputs)
 *     __u32 program outputs x num_outputs  (operand indexes; the bindings after the inputs)
 *     __u32 BO handles      x num_bo_refs  (the file's BOs that constant operands live in)
 *     zero padding to a multiple of 8
 *     constant bytes        x const_bytes  (constant data, per-channel scales)
 *
 * A program's size is exactly the sum of these; trailing bytes are an error.
 */

/* Program magic, "NNAP" little-endian. */
#define NNACCEL_PROGRAM_MAGIC			0x50414e4eU
/* Version of the format described here. */
#define NNACCEL_PROGRAM_VERSION			1U
/* Program flag: float32 arithmetic may run at float16 range and precision. */
#define NNACCEL_PROGRAM_FLAG_RELAX_F32_TO_F16	(1U << 0)
/* All program flags. */
#define NNACCEL_PROGRAM_FLAGS_MASK		NNACCEL_PROGRAM_FLAG_RELAX_F32_TO_F16
/* Highest tensor rank in a program. */
#define NNACCEL_MAX_RANK			6
/* Most operands in a program. */
#define NNACCEL_MAX_OPERANDS			(1U << 16)
/* Most operations in a program. */
#define NNACCEL_MAX_OPERATIONS			(1U << 16)
/* Most operand references per operation. */
#define NNACCEL_MAX_OPERATION_ARGS		64U

/* Operand lifetime: computed inside the program. */
#define NNACCEL_LIFETIME_TEMPORARY	0
/* A program input (bound by the job). */
#define NNACCEL_LIFETIME_INPUT		1
/* A program output (bound by the job). */
#define NNACCEL_LIFETIME_OUTPUT		2
/* Constant bytes in the program's constant section. */
#define NNACCEL_LIFETIME_CONSTANT	3
/* Constant bytes in a BO named by the program's BO table. */
#define NNACCEL_LIFETIME_BO_REF		4
/* An omitted optional argument. */
#define NNACCEL_LIFETIME_NO_VALUE	5

/* Program header. */
struct nnaccel_program_header {
	__u32 magic;		/* NNACCEL_PROGRAM_MAGIC */
	__u32 version;		/* NNACCEL_PROGRAM_VERSION */
	__u32 num_operands;	/* operand records that follow */
	__u32 num_operations;	/* operation records that follow */
	__u32 num_inputs;	/* program inputs */
	__u32 num_outputs;	/* program outputs */
	__u32 num_bo_refs;	/* BO table entries */
	__u32 flags;		/* NNACCEL_PROGRAM_FLAG_* */
	__u32 index_words;	/* length of the operation index table, in __u32 words */
	__u32 pad;		/* must be zero */
	__u64 const_bytes;	/* length of the constant section */
};

/* One operand. */
struct nnaccel_operand_record {
	__s32 operand_type;	/* NN HAL OperandType code */
	__u32 rank;		/* valid entries of dims (0 for scalars) */
	__u32 dims[NNACCEL_MAX_RANK];	/* extents; entries past rank must be zero */
	float scale;		/* quantization scale (IEEE 754 binary32) */
	__s32 zero_point;	/* quantization zero point */
	__u32 lifetime;		/* NNACCEL_LIFETIME_* */
	__u32 location;		/* BO table slot for NNACCEL_LIFETIME_BO_REF, else zero */
	__u64 offset;		/* byte offset (constant section or BO) for constants, else zero */
	__u64 length;		/* byte length for constants, else zero */
	__u32 channel_dim;	/* channel dimension for per-channel quantization */
	__u32 num_channel_scales; /* number of per-channel scales (0 = none) */
	__u64 channel_scales_offset; /* offset of the scales (binary32 each) in the constants */
};

/* One operation; its operand indexes are index_words[first_index..][..inputs + outputs]. */
struct nnaccel_operation_record {
	__s32 operation_type;	/* NN HAL OperationType code */
	__u32 num_inputs;	/* input operand count */
	__u32 num_outputs;	/* output operand count */
	__u32 first_index;	/* start of this operation's indexes in the index table */
};

/* -------------------------------------------------------------------------------------------
 * ioctl numbers: type code 0xBA, built by the kernel's _IOC() macros.
 */

#define NNACCEL_IOCTL_TYPE		0xBA

/* Query one parameter (API version, capabilities, limits, live-object counters). */
#define NNACCEL_IOCTL_GET_PARAM		_IOWR(NNACCEL_IOCTL_TYPE, 0x00, struct nnaccel_get_param)
/* Allocate a buffer object in device memory. */
#define NNACCEL_IOCTL_BO_CREATE		_IOWR(NNACCEL_IOCTL_TYPE, 0x01, struct nnaccel_bo_create)
/* Import a caller fd (memfd, dma-buf, other mappable file) as a buffer object. */
#define NNACCEL_IOCTL_BO_IMPORT		_IOWR(NNACCEL_IOCTL_TYPE, 0x02, struct nnaccel_bo_import)
/* Export a buffer object as an fd, delivered over a caller-named Unix socket. */
#define NNACCEL_IOCTL_BO_EXPORT		_IOWR(NNACCEL_IOCTL_TYPE, 0x03, struct nnaccel_bo_export)
/* Describe a buffer object. */
#define NNACCEL_IOCTL_BO_INFO		_IOWR(NNACCEL_IOCTL_TYPE, 0x04, struct nnaccel_bo_info)
/* Drop the caller's handle to a buffer object. */
#define NNACCEL_IOCTL_BO_CLOSE		_IOW(NNACCEL_IOCTL_TYPE, 0x05, struct nnaccel_bo_close)
/* Validate and load a compiled program. */
#define NNACCEL_IOCTL_PROGRAM_CREATE	_IOWR(NNACCEL_IOCTL_TYPE, 0x06, struct nnaccel_program_create)
/* Unload a program. */
#define NNACCEL_IOCTL_PROGRAM_DESTROY	_IOW(NNACCEL_IOCTL_TYPE, 0x07, struct nnaccel_program_destroy)
/* Register a submission/completion ring that lives in a caller memfd. */
#define NNACCEL_IOCTL_QUEUE_CREATE	_IOWR(NNACCEL_IOCTL_TYPE, 0x08, struct nnaccel_queue_create)
/* Stop and unregister a queue. */
#define NNACCEL_IOCTL_QUEUE_DESTROY	_IOW(NNACCEL_IOCTL_TYPE, 0x09, struct nnaccel_queue_destroy)
/* Submit one job on the file's default queue (for simple clients). */
#define NNACCEL_IOCTL_SUBMIT		_IOWR(NNACCEL_IOCTL_TYPE, 0x0A, struct nnaccel_submit)
/* Wait for a sequence number on a queue, with an absolute CLOCK_MONOTONIC deadline. */
#define NNACCEL_IOCTL_WAIT		_IOWR(NNACCEL_IOCTL_TYPE, 0x0B, struct nnaccel_wait)
/* End one submitted job; the device never writes its outputs after the call returned. */
#define NNACCEL_IOCTL_JOB_CANCEL	_IOW(NNACCEL_IOCTL_TYPE, 0x0C, struct nnaccel_job_cancel)

#if defined(__cplusplus)
}
#endif

#endif /* _UAPI_NNACCEL_H */
