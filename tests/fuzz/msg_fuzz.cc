// proto/msg: decode_header and the per-message views that proto::Engine takes
// with load<T>() once decode_header accepted a message.
//
// Input: one whole kData payload, as the transport hands it to Engine::handle.
// decode_header must agree with the shape table written out here from
// msg.h's comments (independently of msg.cc's), leave its output alone on
// failure, and accept nothing that the fixed struct of its op would not fit:
// every load<T>() Engine makes for the op then runs on the exact-size input
// (a read past it is an ASan report) and must re-encode to the same bytes.
// Engine's own semantic checks (rights, bounds, MapReq::name_len and so on)
// need a joined engine; the integration tests cover them.
#include <cstdint>
#include <cstring>

#include "proto/msg.h"
#include "tests/fuzz/fuzz_util.h"

namespace lt::proto {
namespace {

struct Shape {
  size_t size;  // the op's fixed struct
  bool tail;    // bytes may follow it
};

bool shape(uint8_t op, Shape* s) {
  switch (static_cast<MsgOp>(op)) {
    case MsgOp::kReadReq:
    case MsgOp::kMemsetReq:
      *s = {sizeof(RangeReq), false};
      return true;
    case MsgOp::kWriteReq:
      *s = {sizeof(RangeReq), true};
      return true;
    case MsgOp::kMemcpyReq:
      *s = {sizeof(MemcpyReq), false};
      return true;
    case MsgOp::kAllocReq:
      *s = {sizeof(AllocReq), false};
      return true;
    case MsgOp::kFreeReq:
      *s = {sizeof(FreeReq), false};
      return true;
    case MsgOp::kRevokeReq:
      *s = {sizeof(RevokeReq), false};
      return true;
    case MsgOp::kMapReq:
      *s = {sizeof(MapReq), true};
      return true;
    case MsgOp::kAtomicReq:
      *s = {sizeof(AtomicReq), false};
      return true;
    case MsgOp::kRpcReq:
      *s = {sizeof(RpcReq), true};
      return true;
    case MsgOp::kMsgEager:
      *s = {sizeof(MsgEager), true};
      return true;
    case MsgOp::kMsgRts:
      *s = {sizeof(MsgRts), false};
      return true;
    case MsgOp::kMsgPull:
      *s = {sizeof(MsgPull), false};
      return true;
    case MsgOp::kMsgCredit:
      *s = {sizeof(MsgCredit), false};
      return true;
    case MsgOp::kMsgStaged:
      *s = {sizeof(MsgStaged), false};
      return true;
    case MsgOp::kMsgPulled:
      *s = {sizeof(MsgHeader), false};
      return true;
    case MsgOp::kRpcRingReq:
    case MsgOp::kRpcRingOffer:
      *s = {sizeof(RpcRingMsg), false};
      return true;
    case MsgOp::kReply:
    case MsgOp::kRpcReply:
    case MsgOp::kMsgData:
      *s = {sizeof(MsgHeader), true};
      return true;
    case MsgOp::kAllocReply:
      *s = {sizeof(AllocReply), false};
      return true;
    case MsgOp::kMapReply:
      *s = {sizeof(MapReply), false};
      return true;
    case MsgOp::kAtomicReply:
      *s = {sizeof(AtomicReply), false};
      return true;
    case MsgOp::kMsgPlaced:
      *s = {sizeof(MsgPlaced), false};
      return true;
  }
  return false;
}

bool expect_ok(std::span<const std::byte> b) {
  if (b.size() < sizeof(MsgHeader)) return false;
  MsgHeader h;
  std::memcpy(&h, b.data(), sizeof(h));
  Shape s;
  if (h.version != kProtoVersion || !shape(h.op, &s)) return false;
  // The one flag, kFlagCreditNow (bit 0), on a message's own ops only.
  const bool message = h.op == static_cast<uint8_t>(MsgOp::kMsgEager) ||
                       h.op == static_cast<uint8_t>(MsgOp::kMsgRts) ||
                       h.op == static_cast<uint8_t>(MsgOp::kMsgData) ||
                       h.op == static_cast<uint8_t>(MsgOp::kMsgPlaced);
  // Bits 4-15 are the sender's CPU hint, any value.
  const uint16_t flags = h.flags & 0x000f;
  if (flags != 0 && !(message && flags == 1)) return false;
  if (h.op >= static_cast<uint8_t>(MsgOp::kReply) && h.status != 0) {
    // An error reply: a bare header with a known code.
    return h.status > 0 && h.status < kNumCodes && b.size() == sizeof(MsgHeader);
  }
  return h.status == 0 && b.size() >= s.size && (s.tail || b.size() == s.size);
}

// Engine's load<T>(b) for a message it accepted: T must fit, and T re-encodes
// to the bytes it came from.
template <typename T>
void view(std::span<const std::byte> b) {
  FUZZ_CHECK(b.size() >= sizeof(T), "accepted a message shorter than its struct");
  T v = load<T>(b);
  FUZZ_CHECK(std::memcmp(&v, b.data(), sizeof(T)) == 0, "load round trip");
  auto tail = b.subspan(sizeof(T));
  FUZZ_CHECK(tail.size() == b.size() - sizeof(T), "tail");
}

// The load<T>() calls Engine makes for a successful (status 0) message of each op.
void views(const MsgHeader& h, std::span<const std::byte> b) {
  if (h.op >= static_cast<uint8_t>(MsgOp::kReply) && h.status != 0) {
    view<MsgHeader>(b);  // error replies: only the header is read
    return;
  }
  switch (static_cast<MsgOp>(h.op)) {
    case MsgOp::kReadReq:
    case MsgOp::kWriteReq:
    case MsgOp::kMemsetReq:
      view<RangeReq>(b);
      break;
    case MsgOp::kMemcpyReq:
      view<MemcpyReq>(b);
      break;
    case MsgOp::kAllocReq:
      view<AllocReq>(b);
      break;
    case MsgOp::kFreeReq:
      view<FreeReq>(b);
      break;
    case MsgOp::kRevokeReq:
      view<RevokeReq>(b);
      break;
    case MsgOp::kMapReq:
      view<MapReq>(b);
      break;
    case MsgOp::kAtomicReq:
      view<AtomicReq>(b);
      break;
    case MsgOp::kRpcReq:
      view<RpcReq>(b);
      break;
    case MsgOp::kMsgEager:
      view<MsgEager>(b);
      break;
    case MsgOp::kMsgRts:
      view<MsgRts>(b);
      break;
    case MsgOp::kMsgPull:
      view<MsgPull>(b);
      break;
    case MsgOp::kMsgCredit:
      view<MsgCredit>(b);
      break;
    case MsgOp::kMsgStaged:
      view<MsgStaged>(b);
      break;
    case MsgOp::kRpcRingReq:
    case MsgOp::kRpcRingOffer:
      view<RpcRingMsg>(b);
      break;
    case MsgOp::kReply:
    case MsgOp::kRpcReply:
    case MsgOp::kMsgData:
    case MsgOp::kMsgPulled:
      view<MsgHeader>(b);
      break;
    case MsgOp::kAllocReply:
      view<AllocReply>(b);
      break;
    case MsgOp::kMapReply:
      view<MapReply>(b);
      break;
    case MsgOp::kAtomicReply:
      view<AtomicReply>(b);
      break;
    case MsgOp::kMsgPlaced:
      view<MsgPlaced>(b);
      break;
  }
}

}  // namespace
}  // namespace lt::proto

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lt::proto;
  auto b = std::span<const std::byte>(reinterpret_cast<const std::byte*>(data), size);
  MsgHeader out;
  std::memset(&out, 0x5a, sizeof(out));
  const MsgHeader sentinel = out;
  lt::Status s = decode_header(b, &out);
  FUZZ_CHECK(s.is_ok() == expect_ok(b), s.name());
  if (!s.is_ok()) {
    FUZZ_CHECK(s.code() == lt::Code::kMalformed, s.name());
    FUZZ_CHECK(std::memcmp(&out, &sentinel, sizeof(out)) == 0, "output set on failure");
    return 0;
  }
  FUZZ_CHECK(std::memcmp(&out, b.data(), sizeof(out)) == 0, "header round trip");
  views(out, b);
  return 0;
}
