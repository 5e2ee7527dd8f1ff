/* cgc_get_api: the whole library behind one symbol, for dlopen users (Rust, Go, plugins).
 * The table is generated from the same X-macro lists as the declarations in capi/cgc.h. */
#include "src/internal.h"

#define CGC_API_ENTRY_(ret, name, params) name,
static const cgc_api_t api_table = {sizeof(cgc_api_t), CGC_FUNCTIONS(CGC_API_ENTRY_)};
#undef CGC_API_ENTRY_

cgc_status_t cgc_get_api(uint32_t version, const cgc_api_t** out) {
  CGC_CHECK_ARG(out != NULL, "out is NULL");
  *out = NULL;
  unsigned major = version >> 16, minor = (version >> 8) & 0xff;
  if (major != CGC_VERSION_MAJOR)
    return cgc__fail(CGC_ERROR_NOT_SUPPORTED, __func__,
                     "version %u.%u was asked for; this library is %u.%u and another major version is "
                     "incompatible",
                     major, minor, CGC_VERSION_MAJOR, CGC_VERSION_MINOR);
  if (minor > CGC_VERSION_MINOR)
    return cgc__fail(CGC_ERROR_NOT_SUPPORTED, __func__,
                     "version %u.%u was asked for; this library is %u.%u, older: its table lacks what %u.%u added",
                     major, minor, CGC_VERSION_MAJOR, CGC_VERSION_MINOR, major, minor);
  *out = &api_table;
  return CGC_SUCCESS;
}
