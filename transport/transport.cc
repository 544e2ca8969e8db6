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

Result<MemRegion> Transport::export_memory(std::span<std::byte>, Access) {
  return Code::kUnsupported;
}

std::string format_addresses(const std::vector<PeerAddress>& list) {
  std::string out;
  for (const PeerAddress& a : list) {
    if (!out.empty()) out += ' ';
    out += a.transport;
    out += '=';
    out += a.address;
  }
  return out;
}

std::vector<PeerAddress> parse_addresses(std::string_view text) {
  std::vector<PeerAddress> out;
  while (!text.empty()) {
    size_t end = text.find(' ');
    std::string_view tok = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    size_t eq = tok.find('=');
    if (eq == std::string_view::npos || eq == 0) continue;
    out.push_back({std::string(tok.substr(0, eq)), std::string(tok.substr(eq + 1))});
  }
  return out;
}

void Transport::free_memory(const MemRegion& r) {
  if (r.addr != nullptr && r.len != 0) ::munmap(r.addr, page_round(r.len));
}

}  // namespace lt::transport
