// Default implementations of the optional Transport members.
#include "transport/transport.h"

#include <sys/mman.h>
#include <unistd.h>

namespace lt::transport {

namespace {
size_t page_round(size_t len) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return (len + page - 1) / page * page;
}
}  // namespace

Result<MemRegion> Transport::alloc_memory(size_t len, Access) {
  if (len == 0 || len > SIZE_MAX / 2) return Code::kInvalidArg;
  const size_t size = page_round(len);
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return Code::kNoMemory;
  return MemRegion{static_cast<std::byte*>(p), size, 0, 0};
}

void Transport::free_memory(const MemRegion& r) {
  if (r.addr != nullptr && r.len != 0) ::munmap(r.addr, page_round(r.len));
}

}  // namespace lt::transport
