// capi/cgc.h compiles alone as C++17 (-pedantic -Werror) and declares C linkage.
#include "capi/cgc.h"

#include <cstdio>
#include <type_traits>

static_assert(std::is_same<decltype(&cgc_graph_launch), cgc_status_t (*)(cgc_graph_t, cgc_stream_t)>::value,
              "cgc_graph_launch's signature is the contract's");
static_assert(CGC_ERROR_INTERNAL == 15, "status codes are pinned");
static_assert(std::is_standard_layout<cgc_capture_options_t>::value, "option structs are plain C");

int main() {
  std::printf("capi/cgc.h compiles as C++%ld\n", static_cast<long>(__cplusplus));
  return 0;
}
