/* Communicators (nccl.c), as NCCL pools (nccl_pool.c) use them. */
#ifndef CGC_NCCL_H_
#define CGC_NCCL_H_

#include "src/nccl_lib.h"

struct cgc_comm_s {
  uint32_t magic;
  struct cgc__device* dev;
  ncclComm_t nccl;
  int rank, nranks;
  atomic_bool aborted;    /* ncclCommAbort freed `nccl`: only destroy may follow */
  atomic_int graph_refs;  /* captures and graphs holding collectives on it, and its NCCL pools */
  atomic_bool destroyed;  /* the user destroyed the (aborted) handle while graphs held it */
  atomic_bool retired;
  /* With graph mixing off: the communicator's last work issued through cgc (an eager collective,
   * a launch of a graph holding it) and the stream it went to (its key; 0: none yet). order_key
   * is guarded by order_lock, held across a cuStreamWaitEvent at most (which never waits for the
   * GPU); the event is recorded before the lock is taken (cuEventRecord can wait): NCCL forbids
   * issuing one communicator's work from two threads at once, so records never race. */
  pthread_mutex_t order_lock;
  CUevent order_event; /* NULL with mixing on */
  uint64_t order_key;
  /* 16 bytes of device memory for the communicator's own small collectives (the connection
   * warm-up, the ranks' agreements on an NCCL pool): made at creation, so that an agreement never
   * depends on an allocation that could fail on one rank only. */
  CUdeviceptr scratch;
};

/* The communicator is usable: NCCL loaded, a live handle, not aborted. */
cgc_status_t cgc__comm_check(cgc_comm_t comm, const char* func);
/* With graph mixing off: work of `comm` on `stream` (key `key`) first waits for its last work
 * elsewhere; after it, the work is its last (both context current). */
CUresult cgc__comm_order_before(cgc_comm_t comm, CUstream stream, uint64_t key);
CUresult cgc__comm_order_after(cgc_comm_t comm, CUstream stream, uint64_t key);
/* One more / one less holder of the communicator besides its user (captures, graphs, pools). */
void cgc__comm_retain(void* comm);
void cgc__comm_release(void* comm);
/* The calling thread's depth of cgc_group_start. */
int cgc__nccl_group_depth(void);

#endif /* CGC_NCCL_H_ */
