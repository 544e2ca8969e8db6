#include "qos/host_board.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>

#include "common/log.h"

namespace lt::qos {

namespace {
constexpr uint64_t kMagic = 0x6c74716f73623031ull;  // "ltqosb01"
constexpr uint32_t kActive = 1, kCongested = 2, kHostWide = 4;
constexpr uint32_t kPeerCountShift = 8;  // state bits 8-11: how many of peers[] hold one

bool process_gone(uint64_t owner) {
  const pid_t pid = static_cast<pid_t>(owner >> 32);
  return pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH;
}
}  // namespace

struct alignas(64) BoardSlot {
  std::atomic<uint64_t> owner;      // pid << 32 | a per-engine nonce; 0: free
  std::atomic<uint64_t> heartbeat;  // CLOCK_MONOTONIC ns of the last publish
  std::atomic<uint32_t> priority;
  std::atomic<uint32_t> state;  // kActive | kCongested | kHostWide | count << kPeerCountShift
  // The congested peers. Written before state and heartbeat and read after
  // them, each word on its own: a reader racing a publish may see a mix of
  // two intervals' peers, which the next interval corrects. A slot that
  // says congested and names no peer (an older engine's) is the host's.
  std::atomic<uint32_t> peers[CongestedPeers::kMax];
};
static_assert(sizeof(BoardSlot) == 64, "one cache line per slot");

struct HostBoard::Board {
  std::atomic<uint64_t> magic;
  std::atomic<uint32_t> high;  // every slot ever taken is below this
  BoardSlot slots[kSlots];
};

Status HostBoard::open(const std::string& name, uint32_t classes) {
  close();
  const std::string path = "/" + name;
  int fd = ::shm_open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    LT_WARN("qos: cannot open the host board %s: %s", path.c_str(), strerror(errno));
    return Code::kSys;
  }
  // Every engine sizes it the same; the kernel zero-fills it.
  if (::ftruncate(fd, sizeof(Board)) != 0) {
    ::close(fd);
    return Code::kSys;
  }
  void* p = ::mmap(nullptr, sizeof(Board), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) return Code::kSys;
  auto* b = static_cast<Board*>(p);
  uint64_t m = 0;
  if (!b->magic.compare_exchange_strong(m, kMagic) && m != kMagic) {
    LT_WARN("qos: %s is not an ltier QoS board (or of another version)", path.c_str());
    ::munmap(p, sizeof(Board));
    return Code::kSys;
  }
  board_ = b;
  std::random_device rd;
  owner_ = (static_cast<uint64_t>(::getpid()) << 32) | (rd() | 1u);
  for (uint32_t i = 0; i < kSlots && mine_.size() < classes; ++i) {
    BoardSlot& s = board_->slots[i];
    uint64_t o = s.owner.load(std::memory_order_acquire);
    if (o != 0 && !process_gone(o)) continue;
    if (!s.owner.compare_exchange_strong(o, owner_)) continue;
    s.heartbeat.store(0, std::memory_order_release);
    mine_.push_back(i);
    uint32_t h = board_->high.load(std::memory_order_relaxed);
    while (h < i + 1 && !board_->high.compare_exchange_weak(h, i + 1)) {
    }
  }
  if (mine_.size() < classes) {
    LT_WARN("qos: the host board %s is full (%u slots)", path.c_str(), kSlots);
    close();
    return Code::kNoResource;
  }
  return Status::ok();
}

void HostBoard::close() {
  if (board_ == nullptr) return;
  for (uint32_t i : mine_) {
    uint64_t o = owner_;
    board_->slots[i].owner.compare_exchange_strong(o, 0);
  }
  mine_.clear();
  ::munmap(board_, sizeof(Board));
  board_ = nullptr;
}

void HostBoard::publish(uint32_t i, uint32_t priority, bool active, const CongestedPeers& congested,
                        uint64_t now) {
  if (board_ == nullptr || i >= mine_.size()) return;
  BoardSlot& s = board_->slots[mine_[i]];
  s.priority.store(priority, std::memory_order_relaxed);
  for (uint32_t k = 0; k < congested.n; ++k) {
    s.peers[k].store(congested.peer[k], std::memory_order_relaxed);
  }
  const uint32_t state = (active ? kActive : 0) | (congested.any() ? kCongested : 0) |
                         (congested.host ? kHostWide : 0) | congested.n << kPeerCountShift;
  s.state.store(state, std::memory_order_relaxed);
  s.heartbeat.store(now, std::memory_order_release);
}

void HostBoard::scan(uint64_t now, std::vector<BoardEntry>* out) const {
  out->clear();
  if (board_ == nullptr) return;
  const uint32_t high = std::min(board_->high.load(std::memory_order_acquire), kSlots);
  for (uint32_t i = 0; i < high; ++i) {
    const BoardSlot& s = board_->slots[i];
    const uint64_t o = s.owner.load(std::memory_order_relaxed);
    if (o == 0 || o == owner_) continue;
    const uint64_t hb = s.heartbeat.load(std::memory_order_acquire);
    if (hb == 0 || hb + kFreshNs < now) continue;  // gone quiet, or crashed
    const uint32_t st = s.state.load(std::memory_order_relaxed);
    BoardEntry e;
    e.priority = s.priority.load(std::memory_order_relaxed);
    e.active = (st & kActive) != 0;
    if ((st & kCongested) != 0) {
      const uint32_t n = std::min((st >> kPeerCountShift) & 0xf, CongestedPeers::kMax);
      for (uint32_t k = 0; k < n; ++k) e.congested.add(s.peers[k].load(std::memory_order_relaxed));
      if ((st & kHostWide) != 0 || n == 0) e.congested.host = true;
    }
    out->push_back(e);
  }
}

}  // namespace lt::qos
