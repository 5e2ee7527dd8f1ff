/* Stream memory operations: write a 32/64-bit value to memory, or wait until the value there
 * meets a condition, in stream order (cuStreamWriteValue32 and its kin, and batches of them).
 * Captured, each becomes a memory-operation node; two streams, or two graphs, hand work over
 * through a flag this way with no host round trip.
 *
 * What a device can do is asked once per device and kept in dev->memop_caps: 64-bit
 * operations, the NOR wait and the flush of remote writes have capabilities of their own, and a
 * request the device lacks is NOT_SUPPORTED with the capability's name, before the driver sees
 * it. */
#include <stdint.h>
#include <stdio.h>

#include "src/internal.h"

enum {
  CAPS_KNOWN = 1u << 0,
  CAPS_64_BIT = 1u << 1,
  CAPS_WAIT_NOR = 1u << 2,
  CAPS_FLUSH = 1u << 3,
};
enum { kMaxBatch = 255 }; /* the driver's limit: fewer than 256 operations per batch */

_Static_assert(sizeof(cgc_mem_op_t) == 24, "cgc_mem_op_t's layout is fixed: arrays of it cross the ABI");
_Static_assert((int)CGC_MEM_OP_WAIT_VALUE_32 == (int)CU_STREAM_MEM_OP_WAIT_VALUE_32 &&
                   (int)CGC_MEM_OP_WRITE_VALUE_32 == (int)CU_STREAM_MEM_OP_WRITE_VALUE_32 &&
                   (int)CGC_MEM_OP_FLUSH_REMOTE_WRITES == (int)CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES &&
                   (int)CGC_MEM_OP_WAIT_VALUE_64 == (int)CU_STREAM_MEM_OP_WAIT_VALUE_64 &&
                   (int)CGC_MEM_OP_WRITE_VALUE_64 == (int)CU_STREAM_MEM_OP_WRITE_VALUE_64 &&
                   (int)CGC_MEM_OP_BARRIER == (int)CU_STREAM_MEM_OP_BARRIER,
               "cgc_mem_op_kind_t has the driver's CUstreamBatchMemOpType values");
_Static_assert((int)CGC_WAIT_GEQ == (int)CU_STREAM_WAIT_VALUE_GEQ && (int)CGC_WAIT_EQ == (int)CU_STREAM_WAIT_VALUE_EQ &&
                   (int)CGC_WAIT_AND == (int)CU_STREAM_WAIT_VALUE_AND && (int)CGC_WAIT_NOR == (int)CU_STREAM_WAIT_VALUE_NOR &&
                   (int)CGC_WAIT_FLUSH == (int)CU_STREAM_WAIT_VALUE_FLUSH,
               "CGC_WAIT_* are the driver's CUstreamWaitValue_flags");
_Static_assert((int)CGC_BARRIER_SYSTEM == (int)CU_STREAM_MEMORY_BARRIER_TYPE_SYS && (int)CGC_BARRIER_GPU == (int)CU_STREAM_MEMORY_BARRIER_TYPE_GPU,
               "CGC_BARRIER_* are the driver's CUstreamMemoryBarrier_flags");

static cgc_status_t device_caps(struct cgc__device* dev, unsigned* caps, const char* func) {
  unsigned known = atomic_load_explicit(&dev->memop_caps, memory_order_relaxed);
  if (known & CAPS_KNOWN) {
    *caps = known;
    return CGC_SUCCESS;
  }
  static const struct {
    CUdevice_attribute attribute;
    unsigned bit;
  } kAsked[] = {
      {CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, CAPS_64_BIT},
      {CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR, CAPS_WAIT_NOR},
      {CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES, CAPS_FLUSH},
  };
  unsigned got = CAPS_KNOWN;
  for (size_t i = 0; i < sizeof kAsked / sizeof kAsked[0]; i++) {
    int value = 0;
    CGC_TRY(CGC_CU(func, cuDeviceGetAttribute(&value, kAsked[i].attribute, dev->cu_device)));
    if (value) got |= kAsked[i].bit;
  }
  atomic_store_explicit(&dev->memop_caps, got, memory_order_relaxed);
  *caps = got;
  return CGC_SUCCESS;
}

/* One operation checked against its arguments and the device: `index` < 0 for a single call. */
static cgc_status_t check_op(const cgc_mem_op_t* op, unsigned caps, long index, const char* func) {
  char where[48] = "";
  if (index >= 0) snprintf(where, sizeof where, "ops[%ld]: ", index);
  bool wait = op->kind == CGC_MEM_OP_WAIT_VALUE_32 || op->kind == CGC_MEM_OP_WAIT_VALUE_64;
  bool write = op->kind == CGC_MEM_OP_WRITE_VALUE_32 || op->kind == CGC_MEM_OP_WRITE_VALUE_64;
  bool wide = op->kind == CGC_MEM_OP_WAIT_VALUE_64 || op->kind == CGC_MEM_OP_WRITE_VALUE_64;
  if (!wait && !write && op->kind != CGC_MEM_OP_FLUSH_REMOTE_WRITES && !(op->kind == CGC_MEM_OP_BARRIER && index >= 0))
    return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, func, "%skind %d is not a cgc_mem_op_kind_t%s", where, (int)op->kind,
                     op->kind == CGC_MEM_OP_BARRIER ? " a single call takes (barriers go in batches)" : "");
  if (op->kind == CGC_MEM_OP_BARRIER) {
    if (op->flags > CGC_BARRIER_GPU)
      return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, func, "%sa barrier's flags are CGC_BARRIER_SYSTEM or CGC_BARRIER_GPU (0x%x)",
                       where, op->flags);
    return CGC_SUCCESS;
  }
  if (op->kind == CGC_MEM_OP_FLUSH_REMOTE_WRITES) {
    if (op->flags != 0) return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, func, "%sa flush takes no flags (0x%x)", where, op->flags);
    if (!(caps & CAPS_FLUSH))
      return cgc__fail(CGC_ERROR_NOT_SUPPORTED, func,
                       "%sthe device cannot flush remote writes (CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES is 0)", where);
    return CGC_SUCCESS;
  }
  if (op->address == NULL) return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, func, "%saddress is NULL", where);
  size_t width = wide ? 8 : 4;
  if ((uintptr_t)op->address % width != 0)
    return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, func, "%saddress %p is not %zu-byte aligned", where, op->address, width);
  if (!wide && op->value > UINT32_MAX)
    return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, func, "%svalue 0x%llx does not fit a 32-bit operation", where,
                     (unsigned long long)op->value);
  if (wide && !(caps & CAPS_64_BIT))
    return cgc__fail(CGC_ERROR_NOT_SUPPORTED, func,
                     "%sthe device has no 64-bit stream memory operations (CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS is 0)",
                     where);
  if (write) {
    if (op->flags != 0)
      return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, func,
                       "%swrite flags 0x%x: writes take 0 (the driver's v2 operations have no unordered write)", where,
                       op->flags);
    return CGC_SUCCESS;
  }
  unsigned condition = op->flags & ~CGC_WAIT_FLUSH;
  if (condition > CGC_WAIT_NOR)
    return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, func, "%sunknown wait flags 0x%x (one of CGC_WAIT_GEQ, EQ, AND, NOR, "
                     "optionally | CGC_WAIT_FLUSH)", where, op->flags);
  if (condition == CGC_WAIT_NOR && !(caps & CAPS_WAIT_NOR))
    return cgc__fail(CGC_ERROR_NOT_SUPPORTED, func,
                     "%sthe device has no NOR wait (CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR is 0)", where);
  if ((op->flags & CGC_WAIT_FLUSH) && !(caps & CAPS_FLUSH))
    return cgc__fail(CGC_ERROR_NOT_SUPPORTED, func,
                     "%sthe device cannot flush remote writes (CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES is 0)", where);
  return CGC_SUCCESS;
}

static CUresult issue_one(const cgc_mem_op_t* op, CUstream cu) {
  CUdeviceptr a = (CUdeviceptr)(uintptr_t)op->address;
  switch (op->kind) {
    case CGC_MEM_OP_WRITE_VALUE_32: return CGC_DRV(cuStreamWriteValue32)(cu, a, (cuuint32_t)op->value, op->flags);
    case CGC_MEM_OP_WRITE_VALUE_64: return CGC_DRV(cuStreamWriteValue64)(cu, a, op->value, op->flags);
    case CGC_MEM_OP_WAIT_VALUE_32: return CGC_DRV(cuStreamWaitValue32)(cu, a, (cuuint32_t)op->value, op->flags);
    case CGC_MEM_OP_WAIT_VALUE_64: return CGC_DRV(cuStreamWaitValue64)(cu, a, op->value, op->flags);
    default: return CUDA_ERROR_INVALID_VALUE; /* checked before */
  }
}

static const char* call_name(cgc_mem_op_kind_t kind) {
  switch (kind) {
    case CGC_MEM_OP_WRITE_VALUE_32: return "cuStreamWriteValue32";
    case CGC_MEM_OP_WRITE_VALUE_64: return "cuStreamWriteValue64";
    case CGC_MEM_OP_WAIT_VALUE_32: return "cuStreamWaitValue32";
    case CGC_MEM_OP_WAIT_VALUE_64: return "cuStreamWaitValue64";
    default: return "cuStreamBatchMemOp";
  }
}

/* The single operations and the batch share this path: check, then one driver call. */
static cgc_status_t mem_ops(cgc_stream_t stream, const cgc_mem_op_t* ops, size_t count, bool batch, const char* func) {
  CGC_TRY(cgc__check_handle(stream, CGC_MAGIC_STREAM, func, "stream"));
  if (stream->body != NULL) return cgc__refuse_in_body(stream, "a stream memory operation", func);
  if (batch) {
    if (count == 0 || count > kMaxBatch)
      return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, func, "count is %zu: a batch holds 1 to %d operations", count, kMaxBatch);
    if (ops == NULL) return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, func, "ops is NULL");
  }
  if (cgc__host_function_depth > 0) return cgc__refuse_in_host_function(func);
  unsigned caps = 0;
  CGC_TRY(device_caps(stream->dev, &caps, func));
  for (size_t i = 0; i < count; i++) CGC_TRY(check_op(&ops[i], caps, batch ? (long)i : -1, func));
  cgc__stream_ref_t ref;
  cgc__ctx_scope_t scope;
  cgc_status_t st;
  CGC_TRY_GOTO(st, cgc__enqueue_begin(stream, CGC__ASK_NEVER, &ref, &scope, func), out);
  if (!batch) {
    st = cgc__cu_fail(issue_one(&ops[0], ref.cu), func, call_name(ops[0].kind));
  } else {
    CUstreamBatchMemOpParams params[kMaxBatch];
    for (size_t i = 0; i < count; i++) {
      const cgc_mem_op_t* op = &ops[i];
      CUstreamBatchMemOpParams* p = &params[i];
      *p = (CUstreamBatchMemOpParams){0};
      p->operation = (CUstreamBatchMemOpType)op->kind;
      bool wait = op->kind == CGC_MEM_OP_WAIT_VALUE_32 || op->kind == CGC_MEM_OP_WAIT_VALUE_64;
      if (op->kind == CGC_MEM_OP_FLUSH_REMOTE_WRITES) {
        p->flushRemoteWrites.operation = CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES;
      } else if (op->kind == CGC_MEM_OP_BARRIER) {
        p->memoryBarrier.operation = CU_STREAM_MEM_OP_BARRIER;
        p->memoryBarrier.flags = op->flags;
      } else if (wait) {
        p->waitValue.address = (CUdeviceptr)(uintptr_t)op->address;
        p->waitValue.value64 = op->value; /* the low word is value for 32-bit operations */
        p->waitValue.flags = op->flags;
      } else {
        p->writeValue.address = (CUdeviceptr)(uintptr_t)op->address;
        p->writeValue.value64 = op->value;
        p->writeValue.flags = op->flags;
      }
    }
    st = CGC_CU(func, cuStreamBatchMemOp(ref.cu, (unsigned)count, params, 0));
  }
out:
  cgc__ctx_leave(&scope);
  return st;
}

static cgc_status_t one(cgc_stream_t stream, cgc_mem_op_kind_t kind, void* address, uint64_t value, unsigned flags,
                        const char* func) {
  cgc_mem_op_t op = {.kind = kind, .flags = flags, .address = address, .value = value};
  return mem_ops(stream, &op, 1, false, func);
}

cgc_status_t cgc_stream_write_value32(cgc_stream_t stream, void* address, uint32_t value, unsigned flags) {
  return one(stream, CGC_MEM_OP_WRITE_VALUE_32, address, value, flags, __func__);
}

cgc_status_t cgc_stream_write_value64(cgc_stream_t stream, void* address, uint64_t value, unsigned flags) {
  return one(stream, CGC_MEM_OP_WRITE_VALUE_64, address, value, flags, __func__);
}

cgc_status_t cgc_stream_wait_value32(cgc_stream_t stream, void* address, uint32_t value, unsigned flags) {
  return one(stream, CGC_MEM_OP_WAIT_VALUE_32, address, value, flags, __func__);
}

cgc_status_t cgc_stream_wait_value64(cgc_stream_t stream, void* address, uint64_t value, unsigned flags) {
  return one(stream, CGC_MEM_OP_WAIT_VALUE_64, address, value, flags, __func__);
}

cgc_status_t cgc_stream_batch_mem_op(cgc_stream_t stream, const cgc_mem_op_t* ops, size_t count) {
  return mem_ops(stream, ops, count, true, __func__);
}
