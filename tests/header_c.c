/* capi/cgc.h compiles alone as strict C (C99 and C11 builds of this file, -pedantic -Werror),
 * and the values it pins are the ones docs/CONTRACT.md fixes forever. */
#include "capi/cgc.h"

#include <stdio.h>

#define PIN(expr)                                   \
  do {                                              \
    if (!(expr)) {                                  \
      fprintf(stderr, "ABI value changed: %s\n", #expr); \
      failures++;                                   \
    }                                               \
  } while (0)

int main(void) {
  int failures = 0;
  PIN(CGC_VERSION_MAJOR == 1);
  PIN(CGC_SUCCESS == 0);
  PIN(CGC_ERROR_INVALID_ARGUMENT == 1);
  PIN(CGC_ERROR_INVALID_HANDLE == 2);
  PIN(CGC_ERROR_INVALID_STATE == 3);
  PIN(CGC_ERROR_NO_DRIVER == 4);
  PIN(CGC_ERROR_NO_DEVICE == 5);
  PIN(CGC_ERROR_OUT_OF_MEMORY == 6);
  PIN(CGC_ERROR_CAPTURE_UNSUPPORTED == 7);
  PIN(CGC_ERROR_CAPTURE_INVALIDATED == 8);
  PIN(CGC_ERROR_CAPTURE_UNJOINED == 9);
  PIN(CGC_ERROR_CAPTURE_LEGACY_STREAM == 10);
  PIN(CGC_ERROR_NCCL_UNAVAILABLE == 11);
  PIN(CGC_ERROR_NCCL == 12);
  PIN(CGC_ERROR_CUDA == 13);
  PIN(CGC_ERROR_NOT_SUPPORTED == 14);
  PIN(CGC_ERROR_INTERNAL == 15);
  PIN(CGC_ERROR_NOT_SAVABLE == 16);
  PIN(CGC_ERROR_SAVED_MISMATCH == 17);
  PIN(CGC_CAPTURE_MODE_GLOBAL == 0 && CGC_CAPTURE_MODE_THREAD_LOCAL == 1 && CGC_CAPTURE_MODE_RELAXED == 2);
  PIN(CGC_CAPTURE_NONE == 0 && CGC_CAPTURE_ACTIVE == 1 && CGC_CAPTURE_BROKEN == 2);
  PIN(CGC_STREAM_NON_BLOCKING == 0x1u && CGC_EVENT_TIMING == 0x1u);
  PIN(CGC_CAPTURE_UPLOAD == 0x1u && CGC_CAPTURE_AUTO_FREE_ON_LAUNCH == 0x2u);
  /* struct_size comes first in every option/info struct. */
  PIN(offsetof(cgc_capture_options_t, struct_size) == 0);
  PIN(offsetof(cgc_graph_info_t, struct_size) == 0);
  if (failures == 0) printf("capi/cgc.h: %d pinned values hold (C %ld)\n", 22, (long)__STDC_VERSION__);
  return failures == 0 ? 0 : 1;
}
