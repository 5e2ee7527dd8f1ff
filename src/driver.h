/* The CUDA driver, loaded at run time.
 *
 * cgc links against nothing of CUDA: libcuda.so.1 is dlopen'ed once (thread-safe, lazy) and every
 * entry point is resolved through cuGetProcAddress with an explicit CUDA version, so that the
 * signature we call is the one named below whatever driver is installed (a newer driver may
 * change a function's default ABI; asking for a version pins it). Stream functions are resolved
 * with legacy default-stream semantics: a NULL stream is the legacy stream.
 *
 * CGC_CUDA_DRIVER=<path> loads another driver library (tests use a path that does not exist to
 * exercise the no-driver path everywhere).
 */
#ifndef CGC_DRIVER_H_
#define CGC_DRIVER_H_

#include <cuda.h>
#include <cudaTypedefs.h>

#include "capi/cgc.h"
#include "src/lockcheck.h"

#ifdef __cplusplus
extern "C" {
#endif

/* X(name, PFN type, CUDA version to resolve at). The baseline is CUDA 12.0 (driver >= 525);
 * OPT entries may be missing from an older driver and are then NULL. */
#define CGC_DRIVER_ENTRIES(X, OPT)                                                           \
  X(cuGetErrorName, PFN_cuGetErrorName_v6000, 6000)                                          \
  X(cuGetErrorString, PFN_cuGetErrorString_v6000, 6000)                                      \
  X(cuInit, PFN_cuInit_v2000, 2000)                                                          \
  X(cuDriverGetVersion, PFN_cuDriverGetVersion_v2020, 2020)                                  \
  X(cuDeviceGet, PFN_cuDeviceGet_v2000, 2000)                                                \
  X(cuDeviceGetCount, PFN_cuDeviceGetCount_v2000, 2000)                                      \
  X(cuDeviceGetName, PFN_cuDeviceGetName_v2000, 2000)                                        \
  X(cuDeviceGetAttribute, PFN_cuDeviceGetAttribute_v2000, 2000)                              \
  X(cuDevicePrimaryCtxRetain, PFN_cuDevicePrimaryCtxRetain_v7000, 7000)                      \
  X(cuDevicePrimaryCtxRelease, PFN_cuDevicePrimaryCtxRelease_v11000, 11000)                  \
  X(cuCtxGetCurrent, PFN_cuCtxGetCurrent_v4000, 4000)                                        \
  X(cuCtxPushCurrent, PFN_cuCtxPushCurrent_v4000, 4000)                                      \
  X(cuCtxPopCurrent, PFN_cuCtxPopCurrent_v4000, 4000)                                        \
  X(cuCtxSynchronize, PFN_cuCtxSynchronize_v2000, 2000)                                      \
  X(cuCtxGetStreamPriorityRange, PFN_cuCtxGetStreamPriorityRange_v5050, 5050)                \
  X(cuStreamCreateWithPriority, PFN_cuStreamCreateWithPriority_v5050, 5050)                  \
  X(cuStreamCreate, PFN_cuStreamCreate_v2000, 2000)                                          \
  X(cuStreamDestroy, PFN_cuStreamDestroy_v4000, 4000)                                        \
  X(cuStreamSynchronize, PFN_cuStreamSynchronize_v2000, 2000)                                \
  X(cuStreamQuery, PFN_cuStreamQuery_v2000, 2000)                                            \
  X(cuStreamWaitEvent, PFN_cuStreamWaitEvent_v3020, 3020)                                    \
  X(cuStreamGetCtx, PFN_cuStreamGetCtx_v9020, 9020)                                          \
  X(cuStreamGetId, PFN_cuStreamGetId_v12000, 12000)                                          \
  X(cuEventCreate, PFN_cuEventCreate_v2000, 2000)                                            \
  X(cuEventDestroy, PFN_cuEventDestroy_v4000, 4000)                                          \
  X(cuEventRecord, PFN_cuEventRecord_v2000, 2000)                                            \
  X(cuEventRecordWithFlags, PFN_cuEventRecordWithFlags_v11010, 11010)                        \
  X(cuEventSynchronize, PFN_cuEventSynchronize_v2000, 2000)                                  \
  X(cuEventQuery, PFN_cuEventQuery_v2000, 2000)                                              \
  X(cuEventElapsedTime, PFN_cuEventElapsedTime_v2000, 2000)                                  \
  X(cuThreadExchangeStreamCaptureMode, PFN_cuThreadExchangeStreamCaptureMode_v10010, 10010)  \
  X(cuStreamBeginCapture, PFN_cuStreamBeginCapture_v10010, 10010)                            \
  X(cuStreamEndCapture, PFN_cuStreamEndCapture_v10000, 10000)                                \
  X(cuStreamGetCaptureInfo, PFN_cuStreamGetCaptureInfo_v11030, 11030)                        \
  X(cuGraphGetNodes, PFN_cuGraphGetNodes_v10000, 10000)                                      \
  X(cuGraphDestroy, PFN_cuGraphDestroy_v10000, 10000)                                        \
  X(cuGraphInstantiateWithFlags, PFN_cuGraphInstantiateWithFlags_v11040, 11040)              \
  X(cuGraphExecDestroy, PFN_cuGraphExecDestroy_v10000, 10000)                                \
  X(cuGraphLaunch, PFN_cuGraphLaunch_v10000, 10000)                                          \
  X(cuGraphUpload, PFN_cuGraphUpload_v11010, 11010)                                          \
  X(cuGraphDebugDotPrint, PFN_cuGraphDebugDotPrint_v11030, 11030)                            \
  X(cuMemAlloc, PFN_cuMemAlloc_v3020, 3020)                                                  \
  X(cuMemFree, PFN_cuMemFree_v3020, 3020)                                                    \
  X(cuMemGetInfo, PFN_cuMemGetInfo_v3020, 3020)                                              \
  X(cuMemAllocHost, PFN_cuMemAllocHost_v3020, 3020)                                          \
  X(cuMemFreeHost, PFN_cuMemFreeHost_v2000, 2000)                                            \
  X(cuMemcpyHtoDAsync, PFN_cuMemcpyHtoDAsync_v3020, 3020)                                    \
  X(cuMemcpyDtoDAsync, PFN_cuMemcpyDtoDAsync_v3020, 3020)                                    \
  X(cuMemcpyDtoH, PFN_cuMemcpyDtoH_v3020, 3020)                                              \
  X(cuMemcpyHtoD, PFN_cuMemcpyHtoD_v3020, 3020)                                              \
  X(cuMemcpyDtoHAsync, PFN_cuMemcpyDtoHAsync_v3020, 3020)                                    \
  X(cuMemsetD32Async, PFN_cuMemsetD32Async_v3020, 3020)                                      \
  X(cuModuleLoadData, PFN_cuModuleLoadData_v2000, 2000)                                      \
  X(cuModuleUnload, PFN_cuModuleUnload_v2000, 2000)                                          \
  X(cuModuleGetFunction, PFN_cuModuleGetFunction_v2000, 2000)                                \
  X(cuLaunchKernel, PFN_cuLaunchKernel_v4000, 4000)                                          \
  /* 1.1: the work a graph is made of (copy.c, hostfn.c, memop.c, module.c, stream.c) */     \
  X(cuMemHostAlloc, PFN_cuMemHostAlloc_v2020, 2020)                                          \
  X(cuMemHostRegister, PFN_cuMemHostRegister_v6050, 6050)                                    \
  X(cuMemHostUnregister, PFN_cuMemHostUnregister_v4000, 4000)                                \
  X(cuPointerGetAttribute, PFN_cuPointerGetAttribute_v4000, 4000)                            \
  X(cuMemsetD8Async, PFN_cuMemsetD8Async_v3020, 3020)                                        \
  X(cuMemsetD16Async, PFN_cuMemsetD16Async_v3020, 3020)                                      \
  X(cuLaunchHostFunc, PFN_cuLaunchHostFunc_v10000, 10000)                                    \
  X(cuStreamAddCallback, PFN_cuStreamAddCallback_v5000, 5000)                                \
  X(cuStreamWriteValue32, PFN_cuStreamWriteValue32_v11070, 12000)                            \
  X(cuStreamWriteValue64, PFN_cuStreamWriteValue64_v11070, 12000)                            \
  X(cuStreamWaitValue32, PFN_cuStreamWaitValue32_v11070, 12000)                              \
  X(cuStreamWaitValue64, PFN_cuStreamWaitValue64_v11070, 12000)                              \
  X(cuStreamBatchMemOp, PFN_cuStreamBatchMemOp_v11070, 12000)                                \
  X(cuStreamGetPriority, PFN_cuStreamGetPriority_v5050, 5050)                                \
  X(cuStreamCopyAttributes, PFN_cuStreamCopyAttributes_v11000, 11000)                        \
  X(cuStreamGetAttribute, PFN_cuStreamGetAttribute_v11000, 11000)                            \
  X(cuStreamSetAttribute, PFN_cuStreamSetAttribute_v11000, 11000)                            \
  X(cuModuleLoadDataEx, PFN_cuModuleLoadDataEx_v2010, 2010)                                  \
  X(cuFuncGetAttribute, PFN_cuFuncGetAttribute_v2020, 2020)                                  \
  X(cuFuncSetAttribute, PFN_cuFuncSetAttribute_v9000, 9000)                                  \
  X(cuGraphNodeGetType, PFN_cuGraphNodeGetType_v10000, 10000)                                \
  /* 1.2: graphs that change without recapture (graph.c) */                                  \
  X(cuGraphExecUpdate, PFN_cuGraphExecUpdate_v12000, 12000)                                  \
  X(cuGraphKernelNodeGetParams, PFN_cuGraphKernelNodeGetParams_v12000, 12000)                \
  X(cuGraphExecKernelNodeSetParams, PFN_cuGraphExecKernelNodeSetParams_v12000, 12000)        \
  X(cuGraphNodeSetEnabled, PFN_cuGraphNodeSetEnabled_v11060, 11060)                          \
  X(cuGraphAddKernelNode, PFN_cuGraphAddKernelNode_v12000, 12000)                            \
  X(cuGraphKernelNodeSetParams, PFN_cuGraphKernelNodeSetParams_v12000, 12000)                \
  X(cuStreamUpdateCaptureDependencies, PFN_cuStreamUpdateCaptureDependencies_v11030, 11030)  \
  /* 1.6: pools at fixed addresses (address_pool.c) */                                       \
  X(cuMemAddressReserve, PFN_cuMemAddressReserve_v10020, 10020)                              \
  X(cuMemAddressFree, PFN_cuMemAddressFree_v10020, 10020)                                    \
  X(cuMemCreate, PFN_cuMemCreate_v10020, 10020)                                              \
  X(cuMemRelease, PFN_cuMemRelease_v10020, 10020)                                            \
  X(cuMemMap, PFN_cuMemMap_v10020, 10020)                                                    \
  X(cuMemUnmap, PFN_cuMemUnmap_v10020, 10020)                                                \
  X(cuMemSetAccess, PFN_cuMemSetAccess_v10020, 10020)                                        \
  X(cuMemGetAllocationGranularity, PFN_cuMemGetAllocationGranularity_v10020, 10020)          \
  /* 1.6: graphs saved and restored (save.c, restore.c, module.c) */                         \
  X(cuGraphCreate, PFN_cuGraphCreate_v10000, 10000)                                          \
  X(cuGraphAddEmptyNode, PFN_cuGraphAddEmptyNode_v10000, 10000)                              \
  X(cuGraphAddMemsetNode, PFN_cuGraphAddMemsetNode_v10000, 10000)                            \
  X(cuGraphAddMemcpyNode, PFN_cuGraphAddMemcpyNode_v10000, 10000)                            \
  X(cuGraphAddEventRecordNode, PFN_cuGraphAddEventRecordNode_v11010, 11010)                  \
  X(cuGraphMemsetNodeGetParams, PFN_cuGraphMemsetNodeGetParams_v10000, 10000)                \
  X(cuGraphMemcpyNodeGetParams, PFN_cuGraphMemcpyNodeGetParams_v10000, 10000)                \
  X(cuGraphEventRecordNodeGetEvent, PFN_cuGraphEventRecordNodeGetEvent_v11010, 11010)        \
  /* 1.6: families switched node by node (family.c) */                                       \
  X(cuGraphExecEventRecordNodeSetEvent, PFN_cuGraphExecEventRecordNodeSetEvent_v11010, 11010) \
  X(cuGraphKernelNodeGetAttribute, PFN_cuGraphKernelNodeGetAttribute_v11000, 11000)          \
  X(cuGraphKernelNodeSetAttribute, PFN_cuGraphKernelNodeSetAttribute_v11000, 11000)          \
  X(cuFuncGetModule, PFN_cuFuncGetModule_v11000, 11000)                                      \
  X(cuKernelGetFunction, PFN_cuKernelGetFunction_v12000, 12000)                              \
  OPT(cuFuncGetName, PFN_cuFuncGetName_v12030, 12030)                                        \
  OPT(cuFuncGetParamInfo, PFN_cuFuncGetParamInfo_v12040, 12040)                              \
  OPT(cuGraphGetEdges, PFN_cuGraphGetEdges_v12030, 12030)                                    \
  OPT(cuMemAllocAsync, PFN_cuMemAllocAsync_v11020, 11020)                                    \
  OPT(cuMemFreeAsync, PFN_cuMemFreeAsync_v11020, 11020)                                      \
  OPT(cuDeviceGetDefaultMemPool, PFN_cuDeviceGetDefaultMemPool_v11020, 11020)                \
  OPT(cuMemPoolSetAttribute, PFN_cuMemPoolSetAttribute_v11020, 11020)                       \
  /* conditional nodes (conditional.c): CUDA 12.3 and newer */                               \
  OPT(cuGraphConditionalHandleCreate, PFN_cuGraphConditionalHandleCreate_v12030, 12030)      \
  OPT(cuGraphAddNode, PFN_cuGraphAddNode_v12030, 12030)                                      \
  OPT(cuStreamBeginCaptureToGraph, PFN_cuStreamBeginCaptureToGraph_v12030, 12030)          \
  /* reuse after the join in adopted captures (joins.c): the capture graph's edges, 12.3+ */  \
  OPT(cuGraphNodeGetDependencies, PFN_cuGraphNodeGetDependencies_v12030, 12030)

/* The driver calls that never wait for the GPU: measured by bench/driver_waits on driver 580
 * (each stayed under 100 us while another thread's cuMemFree waited 380 ms for a kernel; every
 * other call measured there, cuEventRecord and kernel and graph launches among them, waited the
 * whole 340 ms). Only these may be called while holding a hot lock (lockcheck.h; docs/DESIGN.md,
 * "Locks and the driver"). cuGetErrorName/String only read the driver's tables. */
#define CGC_DRIVER_NEVER_WAITS(X) \
  X(cuGetErrorName)               \
  X(cuGetErrorString)             \
  X(cuCtxGetCurrent)              \
  X(cuCtxPushCurrent)             \
  X(cuCtxPopCurrent)              \
  X(cuStreamGetCaptureInfo)       \
  X(cuStreamGetId)                \
  X(cuThreadExchangeStreamCaptureMode) \
  X(cuEventQuery)                 \
  X(cuStreamWaitEvent)            \
  X(cuStreamQuery)                \
  X(cuMemGetInfo)

#define CGC_DRIVER_FIELD(name, type, version) type name;
typedef struct cgc__driver {
  CGC_DRIVER_ENTRIES(CGC_DRIVER_FIELD, CGC_DRIVER_FIELD)
  int version; /* cuDriverGetVersion, e.g. 13000 */
} cgc__driver_t;
#undef CGC_DRIVER_FIELD

/* The table; its entries are valid once cgc__driver_load() returned CGC_SUCCESS. */
extern cgc__driver_t cgc__drv;

/* Loads and initialises the driver once. CGC_ERROR_NO_DRIVER without libcuda, CGC_ERROR_NO_DEVICE
 * when cuInit finds no GPU, CGC_ERROR_NOT_SUPPORTED for a driver older than the baseline.
 * Sets the thread's last error, prefixed with `func`, on failure. Cheap after the first call. */
cgc_status_t cgc__driver_load(const char* func);

/* Maps a CUresult to a cgc status. */
cgc_status_t cgc__status_from_cu(CUresult r);

/* Records a failed driver call: "func: call failed: CUDA_ERROR_X (description)" and returns the
 * mapped status; CGC_SUCCESS (message untouched) when r is CUDA_SUCCESS. */
cgc_status_t cgc__cu_fail(CUresult r, const char* func, const char* call);

/* The library's own calls that are "unsafe" during a Global capture (allocation, instantiation,
 * module loading, destruction) run with the calling thread switched to Relaxed capture mode, as
 * PyTorch does with CUDAStreamCaptureModeGuard, so they can never invalidate a capture under way
 * on any thread (SEMANTICS 5). cgc__relaxed_begin returns the mode to restore. */
CUstreamCaptureMode cgc__relaxed_begin(void);
void cgc__relaxed_end(CUstreamCaptureMode previous);
/* cuMemAlloc / cuMemFree in Relaxed mode (the context must be current). */
CUresult cgc__relaxed_mem_alloc(CUdeviceptr* p, size_t size);
CUresult cgc__relaxed_mem_free(CUdeviceptr p);
/* A graph instantiated as PyTorch instantiates (AutoFreeOnLaunch, SEMANTICS 7) with its nodes'
 * priorities, in Relaxed mode: instantiation allocates device memory, which would break a Global
 * capture under way on any thread. The context current. */
CUresult cgc__instantiate(CUgraph graph, CUgraphExec* exec);
/* A library loaded at run time (NCCL, CUPTI): the first of `candidates` that dlopen opens (NULL
 * and empty ones skipped), or NULL with `tried` listing what was tried. candidates[0], when set,
 * is the user's explicit choice (an environment variable) and then the only one tried. */
void* cgc__open_library(const char* const* candidates, size_t n, char* tried, size_t tried_size);

/* Every driver call of the library goes through one of two macros, so that the lock check
 * (lockcheck.h) sees it and the call's name is written once:
 *   CGC_CU(func, cuFoo(a, b))  calls cgc__drv.cuFoo(a, b) and returns a status; on failure the
 *                              thread's message is "func: cuFoo failed: CUDA_ERROR_X (text)".
 *                              `func` is the public function the message speaks for (__func__
 *                              in a public function, its `func` parameter in a helper).
 *   CGC_DRV(cuFoo)(a, b)       the raw CUresult, for the calls whose result is not pass or fail
 *                              (queries that answer NOT_READY, capture ends whose error is
 *                              explained, cleanup whose failure changes nothing).
 * A raw result that turns out to be an error is reported with cgc__cu_fail(r, func, "cuFoo"). */
#define CGC__DRIVER_CHECK(text) (__builtin_expect(cgc__lock_check_on, 0) ? cgc__lock_check_call(text) : (void)0)
#define CGC_DRV(name) (CGC__DRIVER_CHECK(#name), cgc__drv.name)
#define CGC_CU(func, call) cgc__cu_fail((CGC__DRIVER_CHECK(#call), cgc__drv.call), func, #call)

/* `statement` runs with this thread in Relaxed capture mode (cgc__relaxed_begin/_end around it).
 * It must not return, break or goto out of the block: the mode would not be put back. */
#define CGC_RELAXED(statement)                                       \
  do {                                                               \
    CUstreamCaptureMode relaxed_previous_ = cgc__relaxed_begin();    \
    statement;                                                       \
    cgc__relaxed_end(relaxed_previous_);                             \
  } while (0)

/* The error-path idiom of src/ (CONTRIBUTING.md, "Errors"), after NCCL's checks.h:
 *   CGC_TRY(expr)                 a function with nothing to undo returns a failed status at once;
 *   CGC_TRY_GOTO(st, expr, label) one with something to undo keeps the status in `st` and jumps to
 *                                 its one label: `fail` when only failures reach it, `out` when
 *                                 success passes through the same cleanup. */
#define CGC_TRY(expr)                         \
  do {                                        \
    cgc_status_t try_st_ = (expr);            \
    if (try_st_ != CGC_SUCCESS) return try_st_; \
  } while (0)
#define CGC_TRY_GOTO(st, expr, label)    \
  do {                                   \
    (st) = (expr);                       \
    if ((st) != CGC_SUCCESS) goto label; \
  } while (0)

#ifdef __cplusplus
}
#endif

#endif /* CGC_DRIVER_H_ */
