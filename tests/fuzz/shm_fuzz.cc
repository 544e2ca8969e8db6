// transport/shm: the ring decoder of ShmTransport (read_ring), driven through a
// real ShmTransport by a peer that writes fuzzed records into a real
// connection segment. The target plays the connector: it makes the memfd
// segment and the bells, says hello over the transport's unix socket and then
// produces records into ring 0 (connector -> acceptor) with its own hands,
// polling the transport between batches.
//
// Input: byte 0 sizes the completion array poll() gets (1..8, so "out is
// full" happens), and its top bit picks the ring: ring 0, or the
// connector's lane (shm_lane.h: kMsg with imm 0 and kPad only, a quarter
// lane at most); then records, each a kind selector and fields:
//   u8 sel, u16 len, u32 imm, u16 total, u8 flags (reserved header byte)
// sel picks the kind (kMsg, kPad, kFragFirst, kFrag or an unknown one), and
// whether the stamp is right (a wrong one is a record never published). The
// declared length may exceed what the record's place in the ring allows.
// A reference decoder written out here from shm_ring.h says what must
// happen: which messages arrive (bytes and imm), whether the connection is
// closed as malformed (the counter moves by one) and that one kPeerLost
// ends it, after the target hangs up. A hang is a failure.
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/net.h"
#include "common/time.h"
#include "tests/fuzz/fuzz_util.h"
#include "transport/shm/shm_ring.h"
#include "transport/shm/shm_transport.h"

namespace lt::transport::shm {
namespace {

using fuzz::Input;

constexpr NodeId kSelf = 2, kPeer = 1;
constexpr uint64_t kToken = 0x5eedf00dc0ffee11ull;
constexpr uint32_t kRing = kMinRingBytes;  // 4096: many laps, pads and wraps
constexpr uint32_t kMaxMsg = 8192;         // a kFragFirst total above it is malformed
constexpr uint64_t kWaitMs = 10000;        // a guard against hangs, not a timing
constexpr size_t kMaxRecords = 200;

struct Msg {
  std::vector<uint8_t> bytes;
  uint32_t imm = 0;
  bool operator==(const Msg& o) const { return bytes == o.bytes && imm == o.imm; }
};

struct World {
  std::unique_ptr<ShmTransport> t;
  std::string name;  // the listener's abstract socket name
  World() {
    fuzz::quiet_log();
    ShmConfig c;
    c.ring_bytes = kRing;
    c.max_msg_bytes = kMaxMsg;
    c.stage_bytes = 0;
    t = std::make_unique<ShmTransport>(c);
    Status s = t->init();
    FUZZ_CHECK(s.is_ok(), s.name());
    t->set_identity(kSelf, kToken, lt::Mac{});
    const std::string a = t->local_address();  // "shm:<pid>:<name>"
    size_t colon = a.find(':', 4);
    FUZZ_CHECK(colon != std::string::npos, a);
    name = a.substr(colon + 1);
  }
};

World& world() {
  static World w;
  return w;
}

// The connector's side of one connection.
class Producer {
 public:
  explicit Producer(bool lane) {
    sock_.reset(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
    FUZZ_CHECK(sock_.valid(), strerror(errno));
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    const std::string& n = world().name;
    std::memcpy(a.sun_path + 1, n.data(), n.size());
    auto alen = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n.size());
    FUZZ_CHECK(::connect(sock_.get(), reinterpret_cast<sockaddr*>(&a), alen) == 0, strerror(errno));
    seg_len_ = segment_bytes(kRing);
    memfd_.reset(::memfd_create("fuzz-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING));
    FUZZ_CHECK(memfd_.valid() && ::ftruncate(memfd_.get(), static_cast<off_t>(seg_len_)) == 0 &&
                   ::fcntl(memfd_.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0,
               strerror(errno));
    void* p = ::mmap(nullptr, seg_len_, PROT_READ | PROT_WRITE, MAP_SHARED, memfd_.get(), 0);
    FUZZ_CHECK(p != MAP_FAILED, strerror(errno));
    seg_ = static_cast<std::byte*>(p);
    salt_ = 0x8badf00d12345678ull;
    SegHeader h{};
    h.magic = kSegMagic;
    h.version = kSegVersion;
    h.ring_bytes = kRing;
    h.salt = salt_;
    std::memcpy(seg_, &h, sizeof(h));
    ctrl_ = reinterpret_cast<RingCtrl*>(seg_ + sizeof(SegHeader));
    ring_ = seg_ + kCtrlBytes;  // ring 0: ours to write
    if (lane) {                 // lane 0, after both rings
      ctrl_ += 2;
      ring_ += 2 * size_t{kRing};
      size_ = kLaneBytes;
    }
    bell_a_.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    bell_b_.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    Hello hello{kSegMagic, kSegVersion, static_cast<uint16_t>(HelloKind::kHello),
                kPeer,     kRing,       kToken};
    int fds[3] = {memfd_.get(), bell_a_.get(), bell_b_.get()};
    iovec iov{&hello, sizeof(hello)};
    alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(fds))] = {};
    msghdr m{};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = cbuf;
    m.msg_controllen = sizeof(cbuf);
    cmsghdr* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(fds));
    std::memcpy(CMSG_DATA(c), fds, sizeof(fds));
    FUZZ_CHECK(::sendmsg(sock_.get(), &m, MSG_NOSIGNAL) == sizeof(hello), strerror(errno));
  }
  ~Producer() { ::munmap(seg_, seg_len_); }

  // True once the transport acknowledged the hello.
  bool acked() {
    Hello ack{};
    ssize_t r = ::recv(sock_.get(), &ack, sizeof(ack), MSG_DONTWAIT);
    if (r == sizeof(ack)) {
      FUZZ_CHECK(ack.kind == static_cast<uint16_t>(HelloKind::kAck), "not an ack");
      return true;
    }
    return false;
  }
  void hang_up() { ::shutdown(sock_.get(), SHUT_RDWR); }

  uint64_t head() const { return head_; }
  uint64_t tail() const { return aref(ctrl_[0].tail).load(std::memory_order_acquire); }
  void ask_for_room() { aref(ctrl_[0].want_space).store(1, std::memory_order_seq_cst); }
  // Bytes we may write from head() on: up to a ring past the published tail.
  uint64_t room() const { return size_ - (head_ - tail()); }
  uint64_t size() const { return size_; }

  // Writes a record at head(): header fields, payload (`fill`, then a
  // pattern) up to the ring's end, then the stamp (right or wrong) last,
  // and moves head() by `bytes`.
  void write(const RecHeader& h, std::string_view fill, uint64_t bytes, bool good_stamp) {
    uint64_t idx = head_ & (size_ - 1);
    uint64_t space = std::min<uint64_t>(bytes, size_ - idx);  // never past the ring's end
    RecHeader copy = h;
    copy.stamp = 0;
    std::memcpy(ring_ + idx + 8, reinterpret_cast<const std::byte*>(&copy) + 8, kRecHdr - 8);
    for (uint64_t i = kRecHdr; i < space; ++i) {
      uint64_t k = i - kRecHdr;
      ring_[idx + i] = static_cast<std::byte>(k < fill.size() ? fill[k] : (k * 7 + head_) & 0xff);
    }
    uint64_t stamp = good_stamp ? head_ ^ salt_ : (head_ ^ salt_) + 1;
    aref(*reinterpret_cast<uint64_t*>(ring_ + idx)).store(stamp, std::memory_order_release);
    head_ += bytes;
  }
  const std::byte* at(uint64_t pos) const { return ring_ + (pos & (size_ - 1)); }

 private:
  net::Fd sock_, memfd_, bell_a_, bell_b_;
  std::byte* seg_ = nullptr;
  size_t seg_len_ = 0;
  uint64_t salt_ = 0;
  RingCtrl* ctrl_ = nullptr;
  std::byte* ring_ = nullptr;
  uint64_t size_ = kRing;
  uint64_t head_ = 0;
};

// What the transport reports.
struct Seen {
  std::vector<Msg> msgs;
  int lost = 0;
};

// One poll: completions copied out, then released.
void poll_once(size_t out_n, Seen* seen) {
  std::array<Completion, 8> cq;
  ShmTransport& t = *world().t;
  t.woken();  // as after a sleep: socket events are looked at on every poll
  size_t n = t.poll(std::span<Completion>(cq.data(), out_n));
  for (size_t i = 0; i < n; ++i) {
    const Completion& c = cq[i];
    if (c.kind == CqKind::kPeerLost) {
      FUZZ_CHECK(c.peer == kPeer, std::to_string(c.peer));
      ++seen->lost;
    } else if (c.kind == CqKind::kRecv) {
      FUZZ_CHECK(c.peer == kPeer, std::to_string(c.peer));
      FUZZ_CHECK(seen->lost == 0, "a message after the connection was lost");
      const auto* p = reinterpret_cast<const uint8_t*>(c.rx);
      seen->msgs.push_back({std::vector<uint8_t>(p, p + c.len), c.imm});
    }
  }
  t.release_rx(std::span<const Completion>(cq.data(), n));
}

// The reference decoder's state, advanced record by record as they are made.
struct Model {
  std::vector<Msg> msgs;
  bool staging = false;
  Msg stage;
  uint32_t stage_total = 0;
  bool bad = false;    // a malformed record: the connection closes there
  bool stuck = false;  // a record never published: nothing after it is read
};

}  // namespace
}  // namespace lt::transport::shm

using namespace lt::transport::shm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  World& w = world();
  Input in(data, size);
  const uint8_t first = in.u8();
  const size_t out_n = 1 + first % 8;
  const bool lane = (first & 0x80) != 0;
  const uint64_t malformed_before = w.t->malformed();
  Seen seen;
  Model model;
  auto p = std::make_unique<Producer>(lane);
  lt::Deadline d = lt::Deadline::after_ms(kWaitMs);
  while (!p->acked()) {
    poll_once(out_n, &seen);
    FUZZ_CHECK(!d.expired(), "no ack to the hello");
  }

  for (size_t rec = 0; rec < kMaxRecords && !in.empty() && !model.bad && !model.stuck; ++rec) {
    const uint8_t sel = in.u8();
    uint32_t len = in.u16();
    const uint32_t imm = in.u32();
    const uint32_t total = in.u16() % (2 * kMaxMsg);
    const uint8_t flags = in.u8();
    const bool good_stamp = (sel & 0xf0) != 0xf0;  // 1 in 16: never published
    static constexpr RecKind kKinds[] = {RecKind::kMsg, RecKind::kMsg,       RecKind::kMsg,
                                         RecKind::kPad, RecKind::kFragFirst, RecKind::kFrag,
                                         RecKind::kFrag};
    const uint8_t ksel = sel & 7;
    const uint8_t kind = ksel < 7 ? static_cast<uint8_t>(kKinds[ksel]) : (sel >> 3) % 8 + 5;
    const bool oversize = (sel & 8) != 0 && (flags & 1);  // declare more than the place allows
    const uint64_t idx = p->head() & (p->size() - 1);
    const uint64_t contig = p->size() - idx;
    RecHeader h{};
    h.kind = kind;
    h.imm = lane && (flags & 2) == 0 ? 0 : imm;  // the lane's records carry none
    h.reserved = flags;                          // ignored by the consumer
    h.cpu = static_cast<uint16_t>(imm >> 8);     // a hint only: any value is harmless
    uint64_t bytes;
    if (kind == static_cast<uint8_t>(RecKind::kPad)) {
      h.len = oversize ? static_cast<uint32_t>(len) : static_cast<uint32_t>(contig - kRecHdr);
      bytes = contig;
    } else {
      // Payload bounded so that the record fits where it is, unless oversize.
      uint64_t cap = contig - kRecHdr;
      h.len = oversize ? static_cast<uint32_t>(cap + 1 + len % 4096)
                       : static_cast<uint32_t>(len % (cap + 1));
      if (kind == static_cast<uint8_t>(RecKind::kFragFirst)) h.total = total;
      bytes = record_bytes(h.len);
    }
    // The record must lie in our room (an oversize one in its first line):
    // then "beyond the producer's room" never depends on when the consumer
    // published its tail, and the reference decoder can tell.
    const uint64_t need = std::min<uint64_t>(bytes, contig);
    for (int tries = 0; p->room() < need && tries < 64; ++tries) {
      p->ask_for_room();
      poll_once(out_n, &seen);
    }
    FUZZ_CHECK(p->room() >= need, "the consumer read everything but gives no room back");
    std::string_view fill = in.bytes(std::min<uint64_t>(h.len, 64));
    p->write(h, fill, bytes, good_stamp);
    if (!good_stamp) {
      model.stuck = true;
      break;
    }
    // The reference decoder (shm_ring.h; ShmTransport::read_ring, and
    // ShmLane::take for the lane).
    const uint64_t rec_bytes = record_bytes(h.len);
    if (lane && kind != static_cast<uint8_t>(RecKind::kPad) &&
        (kind != static_cast<uint8_t>(RecKind::kMsg) || h.imm != 0 || rec_bytes > kLaneBytes / 4)) {
      model.bad = true;
    }
    switch (model.bad ? RecKind{0} : static_cast<RecKind>(kind)) {
      case RecKind::kPad:
        if (h.len != contig - kRecHdr) model.bad = true;
        break;
      case RecKind::kMsg: {
        if (rec_bytes > contig) {
          model.bad = true;
          break;
        }
        const auto* b = reinterpret_cast<const uint8_t*>(p->at(p->head() - bytes) + kRecHdr);
        model.msgs.push_back({std::vector<uint8_t>(b, b + h.len), h.imm});
        break;
      }
      case RecKind::kFragFirst:
      case RecKind::kFrag: {
        const bool first = kind == static_cast<uint8_t>(RecKind::kFragFirst);
        if (rec_bytes > contig) {
          model.bad = true;
          break;
        }
        if (first) {
          if (model.staging || h.total == 0 || h.total > kMaxMsg || h.len > h.total) {
            model.bad = true;
            break;
          }
          model.staging = true;
          model.stage = Msg{{}, h.imm};
          model.stage_total = h.total;
        }
        if (!model.staging || model.stage.bytes.size() + h.len > model.stage_total ||
            (!first && h.len == 0)) {
          model.bad = true;
          break;
        }
        const auto* b = reinterpret_cast<const uint8_t*>(p->at(p->head() - bytes) + kRecHdr);
        model.stage.bytes.insert(model.stage.bytes.end(), b, b + h.len);
        if (model.stage.bytes.size() == model.stage_total) {
          model.msgs.push_back(model.stage);
          model.staging = false;
        }
        break;
      }
      default:
        model.bad = true;
    }
    if ((rec & 3) == 3) poll_once(out_n, &seen);
  }
  // Everything written is read (or the connection is closed); then hang up
  // and the transport must report the connection lost, once.
  for (int i = 0; i < 64; ++i) poll_once(out_n, &seen);
  p->hang_up();
  d = lt::Deadline::after_ms(kWaitMs);
  while (seen.lost == 0) {
    poll_once(out_n, &seen);
    FUZZ_CHECK(!d.expired(), "the hang-up was never reported");
  }
  for (int i = 0; i < 4; ++i) poll_once(out_n, &seen);
  FUZZ_CHECK(seen.lost == 1, std::to_string(seen.lost));
  FUZZ_CHECK(seen.msgs.size() == model.msgs.size(), std::to_string(seen.msgs.size()) +
                                                        " messages, expected " +
                                                        std::to_string(model.msgs.size()));
  for (size_t i = 0; i < seen.msgs.size(); ++i) {
    FUZZ_CHECK(seen.msgs[i] == model.msgs[i], "message " + std::to_string(i) + " differs");
  }
  FUZZ_CHECK(w.t->malformed() - malformed_before == (model.bad ? 1u : 0u),
             "malformed count " + std::to_string(w.t->malformed() - malformed_before));
  return 0;
}
