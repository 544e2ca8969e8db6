// Thread-locals on hot paths. In a shared library a thread_local is reached
// through a call to __tls_get_addr (the general-dynamic model); the
// initial-exec model makes it one load off the thread pointer. Such
// variables come out of the static TLS block, which also serves a library
// loaded later with dlopen (the Python module loads libltier that way) from
// a reserve of about 1.5 KiB: keep what carries this mark small (tens of
// bytes each).
#pragma once

#if defined(__GNUC__)
#define LT_TLS_FAST __attribute__((tls_model("initial-exec")))
#else
#define LT_TLS_FAST
#endif
