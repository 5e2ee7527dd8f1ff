/* The benchmarks' own handle on the CUDA driver: the "raw" side of every comparison.
 *
 * The benchmarks measure cgc against what a program gets from the driver without cgc, so they
 * load the driver themselves, as such a program would, and never reach into cgc's internals.
 * Entry points are resolved with cuGetProcAddress at the same CUDA versions and with the same
 * legacy default-stream semantics as the library's own table, so both sides of a comparison
 * call the very same driver functions. CGC_CUDA_DRIVER names another driver library, as it
 * does for cgc. */
#ifndef CGC_BENCH_DRIVER_H_
#define CGC_BENCH_DRIVER_H_

#include <stdbool.h>
#include <stddef.h>

#include <cuda.h>
#include <cudaTypedefs.h>

/* X(name, PFN type, CUDA version): the driver functions the benchmarks call. OPT entries may be
 * missing (an older driver) and are then NULL. */
#define BENCH_DRIVER_ENTRIES(X, OPT)                                                        \
  X(cuGetErrorName, PFN_cuGetErrorName_v6000, 6000)                                         \
  X(cuInit, PFN_cuInit_v2000, 2000)                                                         \
  X(cuDriverGetVersion, PFN_cuDriverGetVersion_v2020, 2020)                                 \
  X(cuDeviceGet, PFN_cuDeviceGet_v2000, 2000)                                               \
  X(cuDeviceGetName, PFN_cuDeviceGetName_v2000, 2000)                                       \
  X(cuDeviceGetAttribute, PFN_cuDeviceGetAttribute_v2000, 2000)                             \
  X(cuDevicePrimaryCtxRetain, PFN_cuDevicePrimaryCtxRetain_v7000, 7000)                     \
  X(cuDevicePrimaryCtxRelease, PFN_cuDevicePrimaryCtxRelease_v11000, 11000)                 \
  X(cuCtxPushCurrent, PFN_cuCtxPushCurrent_v4000, 4000)                                     \
  X(cuCtxPopCurrent, PFN_cuCtxPopCurrent_v4000, 4000)                                       \
  X(cuStreamSynchronize, PFN_cuStreamSynchronize_v2000, 2000)                               \
  X(cuStreamBeginCapture, PFN_cuStreamBeginCapture_v10010, 10010)                           \
  X(cuStreamEndCapture, PFN_cuStreamEndCapture_v10000, 10000)                               \
  X(cuGraphDestroy, PFN_cuGraphDestroy_v10000, 10000)                                       \
  X(cuGraphInstantiateWithFlags, PFN_cuGraphInstantiateWithFlags_v11040, 11040)             \
  X(cuGraphExecUpdate, PFN_cuGraphExecUpdate_v12000, 12000)                                 \
  X(cuGraphExecDestroy, PFN_cuGraphExecDestroy_v10000, 10000)                               \
  X(cuGraphLaunch, PFN_cuGraphLaunch_v10000, 10000)                                         \
  X(cuGraphUpload, PFN_cuGraphUpload_v11010, 11010)                                         \
  X(cuMemAlloc, PFN_cuMemAlloc_v3020, 3020)                                                 \
  X(cuMemFree, PFN_cuMemFree_v3020, 3020)                                                   \
  X(cuMemcpyHtoDAsync, PFN_cuMemcpyHtoDAsync_v3020, 3020)                                   \
  X(cuMemcpyDtoH, PFN_cuMemcpyDtoH_v3020, 3020)                                             \
  X(cuMemcpyDtoHAsync, PFN_cuMemcpyDtoHAsync_v3020, 3020)                                   \
  X(cuMemsetD32Async, PFN_cuMemsetD32Async_v3020, 3020)                                     \
  X(cuModuleLoadData, PFN_cuModuleLoadData_v2000, 2000)                                     \
  X(cuModuleUnload, PFN_cuModuleUnload_v2000, 2000)                                         \
  X(cuModuleGetFunction, PFN_cuModuleGetFunction_v2000, 2000)                               \
  X(cuLaunchKernel, PFN_cuLaunchKernel_v4000, 4000)                                         \
  X(cuLaunchHostFunc, PFN_cuLaunchHostFunc_v10000, 10000)                                    \
  X(cuStreamCreate, PFN_cuStreamCreate_v2000, 2000)                                         \
  X(cuStreamDestroy, PFN_cuStreamDestroy_v4000, 4000)                                       \
  X(cuStreamGetCaptureInfo, PFN_cuStreamGetCaptureInfo_v11030, 11030)                       \
  X(cuStreamUpdateCaptureDependencies, PFN_cuStreamUpdateCaptureDependencies_v11030, 11030) \
  /* nccl_bench: the raw side's own stream, events and waits, and the census of graph nodes */ \
  X(cuStreamQuery, PFN_cuStreamQuery_v2000, 2000)                                           \
  X(cuEventCreate, PFN_cuEventCreate_v2000, 2000)                                           \
  X(cuEventDestroy, PFN_cuEventDestroy_v4000, 4000)                                         \
  X(cuEventRecord, PFN_cuEventRecord_v2000, 2000)                                           \
  X(cuEventElapsedTime, PFN_cuEventElapsedTime_v2000, 2000)                                 \
  X(cuGraphGetNodes, PFN_cuGraphGetNodes_v10000, 10000)                                     \
  X(cuGraphNodeGetType, PFN_cuGraphNodeGetType_v10000, 10000)                               \
  /* driver_waits: which calls wait behind another thread's cuMemFree */                    \
  X(cuCtxGetCurrent, PFN_cuCtxGetCurrent_v4000, 4000)                                       \
  X(cuEventQuery, PFN_cuEventQuery_v2000, 2000)                                             \
  X(cuStreamWaitEvent, PFN_cuStreamWaitEvent_v3020, 3020)                                   \
  X(cuStreamGetId, PFN_cuStreamGetId_v12000, 12000)                                         \
  X(cuMemGetInfo, PFN_cuMemGetInfo_v3020, 3020)                                             \
  X(cuThreadExchangeStreamCaptureMode, PFN_cuThreadExchangeStreamCaptureMode_v10010, 10010) \
  OPT(cuMemAllocAsync, PFN_cuMemAllocAsync_v11020, 11020)                                   \
  OPT(cuMemFreeAsync, PFN_cuMemFreeAsync_v11020, 11020)                                     \
  OPT(cuDeviceGetDefaultMemPool, PFN_cuDeviceGetDefaultMemPool_v11020, 11020)               \
  OPT(cuMemPoolSetAttribute, PFN_cuMemPoolSetAttribute_v11020, 11020)                      \
  /* scenario 9's WHILE graph built with the driver alone (CUDA 12.3 and newer) */          \
  OPT(cuGraphConditionalHandleCreate, PFN_cuGraphConditionalHandleCreate_v12030, 12030)     \
  OPT(cuGraphAddNode, PFN_cuGraphAddNode_v12030, 12030)                                     \
  OPT(cuStreamBeginCaptureToGraph, PFN_cuStreamBeginCaptureToGraph_v12030, 12030)

#define BENCH_DRIVER_FIELD(name, type, version) type name;
typedef struct bench_driver {
  BENCH_DRIVER_ENTRIES(BENCH_DRIVER_FIELD, BENCH_DRIVER_FIELD)
  int version; /* cuDriverGetVersion, e.g. 13000 */
} bench_driver_t;
#undef BENCH_DRIVER_FIELD

/* Filled by bench_driver_load; read-only afterwards. */
extern bench_driver_t drv;

/* Loads the driver and resolves every entry; false with the reason in `why` if it cannot. Call
 * once, from main, before any thread starts. */
bool bench_driver_load(char* why, size_t why_size);

#endif /* CGC_BENCH_DRIVER_H_ */
