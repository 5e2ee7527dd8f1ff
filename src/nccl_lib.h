/* NCCL, loaded at run time (nccl_lib.c): the few NCCL types cgc uses, declared here rather than
 * taken from nccl.h (they are part of NCCL's stable ABI: an opaque communicator pointer, a
 * 128-byte unique id, int enums whose values cgc_dtype_t and cgc_reduce_op_t mirror), so the build
 * needs no NCCL headers; the entry points; whether graph mixing is off. */
#ifndef CGC_NCCL_LIB_H_
#define CGC_NCCL_LIB_H_

#include "src/internal.h"

typedef struct nccl_comm* ncclComm_t;
typedef struct {
  char internal[128];
} ncclUniqueId;
typedef int ncclResult_t; /* ncclSuccess = 0 */
typedef int ncclDataType_t;
typedef int ncclRedOp_t;
typedef struct nccl_window* ncclWindow_t; /* 2.27: a registered window, opaque */
enum { kNcclWinCollSymmetric = 0x01, kNcclInt32 = 2, kNcclMax = 2 };

_Static_assert(sizeof(cgc_comm_id_t) == sizeof(ncclUniqueId), "cgc_comm_id_t carries an ncclUniqueId");

/* X(name, return type, (parameter types)) */
#define CGC_NCCL_ENTRIES(X, OPT)                                                                           \
  X(ncclGetVersion, ncclResult_t, (int*))                                                                  \
  X(ncclGetUniqueId, ncclResult_t, (ncclUniqueId*))                                                        \
  X(ncclCommInitRank, ncclResult_t, (ncclComm_t*, int, ncclUniqueId, int))                                 \
  X(ncclCommDestroy, ncclResult_t, (ncclComm_t))                                                           \
  X(ncclCommAbort, ncclResult_t, (ncclComm_t))                                                             \
  X(ncclGetErrorString, const char*, (ncclResult_t))                                                       \
  X(ncclAllReduce, ncclResult_t, (const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, CUstream)) \
  X(ncclAllGather, ncclResult_t, (const void*, void*, size_t, ncclDataType_t, ncclComm_t, CUstream))       \
  X(ncclReduceScatter, ncclResult_t,                                                                       \
    (const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, CUstream))                       \
  X(ncclBroadcast, ncclResult_t, (const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, CUstream))  \
  X(ncclSend, ncclResult_t, (const void*, size_t, ncclDataType_t, int, ncclComm_t, CUstream))              \
  X(ncclRecv, ncclResult_t, (void*, size_t, ncclDataType_t, int, ncclComm_t, CUstream))                    \
  X(ncclGroupStart, ncclResult_t, (void))                                                                  \
  X(ncclGroupEnd, ncclResult_t, (void))                                                                    \
  OPT(ncclGetLastError, const char*, (ncclComm_t))                                                         \
  OPT(ncclMemAlloc, ncclResult_t, (void**, size_t))                  /* 2.19 */                            \
  OPT(ncclMemFree, ncclResult_t, (void*))                                                                  \
  OPT(ncclCommRegister, ncclResult_t, (ncclComm_t, void*, size_t, void**))                                 \
  OPT(ncclCommDeregister, ncclResult_t, (ncclComm_t, void*))                                               \
  OPT(ncclCommWindowRegister, ncclResult_t, (ncclComm_t, void*, size_t, ncclWindow_t*, int)) /* 2.27 */    \
  OPT(ncclCommWindowDeregister, ncclResult_t, (ncclComm_t, ncclWindow_t))

#define NCCL_FIELD(name, ret, params) ret(*name) params;
typedef struct cgc__nccl_table {
  CGC_NCCL_ENTRIES(NCCL_FIELD, NCCL_FIELD)
  int version;
} cgc__nccl_table_t;
#undef NCCL_FIELD
/* The entry points, valid once cgc__nccl_load returned CGC_SUCCESS; read-only afterwards. */
extern cgc__nccl_table_t cgc__nccl;

enum {
  kMinCaptureVersion = 20906, /* 2.9.6: first NCCL whose collectives may be graph-captured */
  kAvgBf16Version = 21000,    /* 2.10.0: ncclAvg and ncclBfloat16 */
};


/* Loads NCCL once (CGC_ERROR_NCCL_UNAVAILABLE, with the reason, when it cannot). */
cgc_status_t cgc__nccl_load(const char* func);
/* "func: call failed: <NCCL's string> (<NCCL's last error>)". */
cgc_status_t cgc__nccl_fail(ncclResult_t r, ncclComm_t comm, const char* func, const char* call);
/* NCCL_GRAPH_MIXING_SUPPORT=0 as NCCL read it (valid once NCCL is loaded). */
bool cgc__nccl_mixing_off(void);

/* NCCL's setup and teardown allocate, free and synchronise: calls that would break a Global
 * capture under way on another thread. They run with this thread in Relaxed mode (NCCL's own
 * threads are beyond reach: cgc refuses creation and destruction while a capture that they
 * could break is under way). */
#define NCCL_RELAXED(result, call)                              \
  do {                                                           \
    CUstreamCaptureMode previous_ = cgc__relaxed_begin();        \
    (result) = (call);                                           \
    cgc__relaxed_end(previous_);                                 \
  } while (0)

#endif /* CGC_NCCL_LIB_H_ */
