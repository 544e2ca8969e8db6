#include "proto/msg.h"

namespace lt::proto {

namespace {
// Fixed size of each op's message; `tail` ops may carry bytes after it.
struct OpShape {
  size_t size;
  bool tail;
};
bool shape_of(MsgOp op, OpShape* s) {
  switch (op) {
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
    case MsgOp::kReply:
      *s = {sizeof(MsgHeader), true};
      return true;
    case MsgOp::kAllocReply:
      *s = {sizeof(AllocReply), false};
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
    case MsgOp::kMsgData:
      *s = {sizeof(MsgHeader), true};
      return true;
    case MsgOp::kMsgPlaced:
      *s = {sizeof(MsgPlaced), false};
      return true;
    case MsgOp::kRpcReply:
      *s = {sizeof(MsgHeader), true};
      return true;
    case MsgOp::kAtomicReply:
      *s = {sizeof(AtomicReply), false};
      return true;
    case MsgOp::kMapReply:
      *s = {sizeof(MapReply), false};
      return true;
  }
  return false;
}
}  // namespace

Status decode_header(std::span<const std::byte> b, MsgHeader* out) {
  if (b.size() < sizeof(MsgHeader)) return Code::kMalformed;
  MsgHeader h = load<MsgHeader>(b);
  OpShape s;
  if (h.version != kProtoVersion || !shape_of(static_cast<MsgOp>(h.op), &s)) {
    return Code::kMalformed;
  }
  const auto op = static_cast<MsgOp>(h.op);
  const bool message = op == MsgOp::kMsgEager || op == MsgOp::kMsgRts || op == MsgOp::kMsgData ||
                       op == MsgOp::kMsgPlaced;
  if ((h.flags & ~kFlagCpuMask & ~(message ? kFlagCreditNow : 0)) != 0) return Code::kMalformed;
  // Error replies are bare headers whatever their op.
  bool is_reply = h.op >= static_cast<uint8_t>(MsgOp::kReply);
  if (is_reply && h.status != 0) {
    if (h.status < 0 || h.status >= kNumCodes) return Code::kMalformed;
    if (b.size() != sizeof(MsgHeader)) return Code::kMalformed;
    *out = h;
    return Status::ok();
  }
  if (h.status != 0) return Code::kMalformed;
  if (b.size() < s.size || (!s.tail && b.size() != s.size)) return Code::kMalformed;
  *out = h;
  return Status::ok();
}

}  // namespace lt::proto
