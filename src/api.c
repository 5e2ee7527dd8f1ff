/* cgc_get_api: the whole library behind one symbol, for dlopen users (Rust, Go, plugins), and the
 * build's check that capi/cgc_api.h's lists say what capi/cgc.h declares. */
#include <stddef.h>

#include "src/internal.h"

/* The table in capi/cgc_api.h's order. Each entry must have its prototype's type: checked here
 * (and an entry of another type would not initialise its field without an error). */
#define CGC_API_ENTRY_(ret, name, params) name,
static const cgc_api_t api_table = {sizeof(cgc_api_t), CGC_API_FUNCTIONS(CGC_API_ENTRY_)};
#undef CGC_API_ENTRY_
#define CGC_API_SAME_TYPE_(ret, name, params)                                         \
  _Static_assert(__builtin_types_compatible_p(__typeof__(&name), ret(*) params), \
                 "capi/cgc_api.h lists " #name " with another type than capi/cgc.h's prototype");
CGC_API_FUNCTIONS(CGC_API_SAME_TYPE_)
#undef CGC_API_SAME_TYPE_

/* Every status of cgc_api.h's list has its enumerator's value, and the list has them all. */
#define CGC_STATUS_SAME_(name, value, text) _Static_assert(name == value, "capi/cgc_api.h: " #name "'s value");
CGC_STATUS_LIST(CGC_STATUS_SAME_)
#undef CGC_STATUS_SAME_
#define CGC_STATUS_COUNT_(name, value, text) +1
_Static_assert(0 CGC_STATUS_LIST(CGC_STATUS_COUNT_) == CGC_ERROR_SAVED_MISMATCH + 1, "capi/cgc_api.h lists every status");
#undef CGC_STATUS_COUNT_

/* Every struct's field list has the struct's layout: a struct made from the list has its size,
 * and each field its offset and type. */
#define CGC_MIRROR_FIELD_(type, name, array) type name array;
#define CGC_FIELD_SAME_(type, name, array)                                                                   \
  _Static_assert(offsetof(struct mirror, name) == offsetof(checked_t, name) &&                               \
                     __builtin_types_compatible_p(__typeof__(((checked_t*)0)->name), type array),            \
                 "capi/cgc_api.h's field list differs from capi/cgc.h's struct at " #name);
#define CGC_STRUCT_SAME_(T, FIELDS)                                                                          \
  static inline void check_##T(void) {                                                                      \
    typedef T checked_t;                                                                                     \
    struct mirror {                                                                                          \
      FIELDS(CGC_MIRROR_FIELD_)                                                                              \
    };                                                                                                       \
    _Static_assert(sizeof(struct mirror) == sizeof(checked_t), "capi/cgc_api.h's field list of " #T " misses a field"); \
    FIELDS(CGC_FIELD_SAME_)                                                                                  \
  }
CGC_STRUCTS(CGC_STRUCT_SAME_)
#undef CGC_STRUCT_SAME_
#undef CGC_FIELD_SAME_
#undef CGC_MIRROR_FIELD_

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
