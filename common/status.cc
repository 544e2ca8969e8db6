#include "common/status.h"

namespace lt {
namespace {
struct CodeInfo {
  const char* name;
  const char* text;
};
constexpr CodeInfo kInfo[kNumCodes] = {
    {"LT_OK", "success"},
    {"LT_ERR_INVAL", "invalid argument"},
    {"LT_ERR_BAD_HANDLE", "invalid, forged or stale handle"},
    {"LT_ERR_OUT_OF_BOUNDS", "offset or length outside the memory region"},
    {"LT_ERR_PERM", "operation not allowed by the handle's rights"},
    {"LT_ERR_PEER_DOWN", "peer node is down or unreachable"},
    {"LT_ERR_TIMEDOUT", "operation timed out"},
    {"LT_ERR_AGAIN", "resource temporarily unavailable; retry after progress"},
    {"LT_ERR_QUOTA", "tenant quota exceeded"},
    {"LT_ERR_UNSUPPORTED", "operation not supported"},
    {"LT_ERR_MALFORMED", "malformed message or input"},
    {"LT_ERR_NOT_FOUND", "name not found"},
    {"LT_ERR_EXISTS", "name already exists"},
    {"LT_ERR_AUTH", "authentication refused (wrong cluster secret?)"},
    {"LT_ERR_NO_MEMORY", "out of memory"},
    {"LT_ERR_NOT_JOINED", "engine has not joined a cluster or has left it"},
    {"LT_ERR_ALIGN", "misaligned address"},
    {"LT_ERR_NO_HANDLER", "no handler registered"},
    {"LT_ERR_TRUNCATED", "output buffer too small"},
    {"LT_ERR_CLOSED", "engine or connection closed"},
    {"LT_ERR_INTERNAL", "internal error"},
    {"LT_ERR_SYS", "system call failed"},
};
}  // namespace

const char* code_name(Code c) {
  auto i = static_cast<unsigned>(c);
  return i < kNumCodes ? kInfo[i].name : "LT_ERR_UNKNOWN";
}
const char* code_text(Code c) {
  auto i = static_cast<unsigned>(c);
  return i < kNumCodes ? kInfo[i].text : "unknown error";
}

}  // namespace lt
