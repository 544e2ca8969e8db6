#include "proto/msg.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

namespace lt::proto {
namespace {

struct Shape {
  MsgOp op;
  size_t size;
  bool tail;
};

// Independent of msg.cc's table: each op's fixed size and whether it carries a tail.
const Shape kShapes[] = {
    {MsgOp::kReadReq, sizeof(RangeReq), false},
    {MsgOp::kWriteReq, sizeof(RangeReq), true},
    {MsgOp::kMemsetReq, sizeof(RangeReq), false},
    {MsgOp::kMemcpyReq, sizeof(MemcpyReq), false},
    {MsgOp::kAllocReq, sizeof(AllocReq), false},
    {MsgOp::kFreeReq, sizeof(FreeReq), false},
    {MsgOp::kRevokeReq, sizeof(RevokeReq), false},
    {MsgOp::kMapReq, sizeof(MapReq), true},
    {MsgOp::kReply, sizeof(MsgHeader), true},
    {MsgOp::kAllocReply, sizeof(AllocReply), false},
    {MsgOp::kMapReply, sizeof(MapReply), false},
    {MsgOp::kAtomicReq, sizeof(AtomicReq), false},
    {MsgOp::kRpcReq, sizeof(RpcReq), true},
    {MsgOp::kRpcReply, sizeof(MsgHeader), true},
    {MsgOp::kMsgEager, sizeof(MsgEager), true},
    {MsgOp::kMsgRts, sizeof(MsgRts), false},
    {MsgOp::kMsgPull, sizeof(MsgPull), false},
    {MsgOp::kMsgCredit, sizeof(MsgCredit), false},
    {MsgOp::kMsgStaged, sizeof(MsgStaged), false},
    {MsgOp::kMsgPulled, sizeof(MsgHeader), false},
    {MsgOp::kMsgPlaced, sizeof(MsgPlaced), false},
    {MsgOp::kMsgData, sizeof(MsgHeader), true},
    {MsgOp::kAtomicReply, sizeof(AtomicReply), false},
};

bool is_reply(MsgOp op) { return static_cast<uint8_t>(op) >= static_cast<uint8_t>(MsgOp::kReply); }

std::vector<std::byte> message(const MsgHeader& h, size_t size) {
  std::vector<std::byte> b(std::max(size, sizeof(MsgHeader)), std::byte{0});
  std::memcpy(b.data(), &h, sizeof(h));
  b.resize(size);
  return b;
}

std::vector<std::byte> message(MsgOp op, size_t size, Code status = Code::kOk) {
  return message(make_header(op, 0x1122334455667788ull, status), size);
}

Status decode(const std::vector<std::byte>& b, MsgHeader* out) { return decode_header(b, out); }

TEST(MsgTest, ExactSizeDecodes) {
  for (const auto& s : kShapes) {
    MsgHeader out{};
    ASSERT_TRUE(decode(message(s.op, s.size), &out).is_ok()) << static_cast<int>(s.op);
    EXPECT_EQ(out.op, static_cast<uint8_t>(s.op));
    EXPECT_EQ(out.version, kProtoVersion);
    EXPECT_EQ(out.req_id, 0x1122334455667788ull);
    EXPECT_EQ(out.status, 0);
  }
}

TEST(MsgTest, TruncatedByOneIsMalformed) {
  for (const auto& s : kShapes) {
    MsgHeader out{};
    out.req_id = 9;
    EXPECT_EQ(decode(message(s.op, s.size - 1), &out).code(), Code::kMalformed)
        << static_cast<int>(s.op);
    EXPECT_EQ(out.req_id, 9u) << "output written on failure";
  }
}

TEST(MsgTest, EveryShorterLengthIsMalformed) {
  for (const auto& s : kShapes) {
    for (size_t n = 0; n < s.size; ++n) {
      MsgHeader out{};
      EXPECT_EQ(decode(message(s.op, n), &out).code(), Code::kMalformed)
          << static_cast<int>(s.op) << " length " << n;
    }
  }
}

TEST(MsgTest, ExtraBytesOnFixedSizeOpsAreMalformed) {
  for (const auto& s : kShapes) {
    if (s.tail) continue;
    MsgHeader out{};
    EXPECT_EQ(decode(message(s.op, s.size + 1), &out).code(), Code::kMalformed)
        << static_cast<int>(s.op);
    EXPECT_EQ(decode(message(s.op, s.size + 8), &out).code(), Code::kMalformed)
        << static_cast<int>(s.op);
  }
}

TEST(MsgTest, TailOpsAcceptTail) {
  for (MsgOp op : {MsgOp::kWriteReq, MsgOp::kMapReq, MsgOp::kReply}) {
    size_t fixed = 0;
    for (const auto& s : kShapes) {
      if (s.op == op) fixed = s.size;
    }
    for (size_t extra : {size_t{1}, size_t{7}, size_t{4096}}) {
      MsgHeader out{};
      EXPECT_TRUE(decode(message(op, fixed + extra), &out).is_ok())
          << static_cast<int>(op) << " +" << extra;
    }
  }
}

TEST(MsgTest, BadVersionIsMalformed) {
  for (uint8_t v : {0, kProtoVersion - 1, kProtoVersion + 1, 255}) {
    MsgHeader h = make_header(MsgOp::kAllocReq, 1);
    h.version = v;
    MsgHeader out{};
    EXPECT_EQ(decode(message(h, sizeof(AllocReq)), &out).code(), Code::kMalformed) << int{v};
  }
}

TEST(MsgTest, UnknownFlagsAreMalformed) {
  for (uint16_t f : {1, 2, 8, 0x8009}) {
    MsgHeader h = make_header(MsgOp::kReply, 1);
    h.flags = f;
    MsgHeader out{};
    EXPECT_EQ(decode(message(h, sizeof(MsgHeader)), &out).code(), Code::kMalformed) << f;
  }
}

// Bits 4-15 carry the sender's CPU (a hint, any value); a CPU the 12 bits
// cannot hold goes as unknown. (The thread may move between two reads of its
// CPU, so the header's is only checked to be known.)
TEST(MsgTest, HeadersCarryTheSendersCpu) {
  MsgHeader h = make_header(MsgOp::kReply, 1);
  MsgHeader out{};
  ASSERT_TRUE(decode(message(h, sizeof(MsgHeader)), &out).is_ok());
  if (this_cpu_hint() != kCpuUnknown) {
    EXPECT_NE(cpu_of(out), kCpuUnknown);
  }
  for (CpuHint cpu : {CpuHint{1}, CpuHint{4095}}) {
    h.flags = cpu_flag(cpu);
    ASSERT_TRUE(decode(message(h, sizeof(MsgHeader)), &out).is_ok()) << cpu;
    EXPECT_EQ(cpu_of(out), cpu);
  }
  EXPECT_EQ(cpu_flag(4096), 0);
  EXPECT_EQ(cpu_flag(kCpuUnknown), 0);
}

// kFlagCreditNow (bit 0) is the one flag, and only on a message's own ops.
TEST(MsgTest, CreditNowFlagOnlyOnMessages) {
  for (MsgOp op : {MsgOp::kMsgEager, MsgOp::kMsgRts, MsgOp::kMsgData, MsgOp::kMsgPlaced}) {
    size_t size = 0;
    for (const auto& s : kShapes) {
      if (s.op == op) size = s.size;
    }
    MsgHeader h = make_header(op, 1);
    h.flags = kFlagCreditNow;
    MsgHeader out{};
    EXPECT_TRUE(decode(message(h, size), &out).is_ok()) << int{h.op};
    EXPECT_EQ(out.flags, kFlagCreditNow);
    h.flags = kFlagCreditNow | 2;
    EXPECT_EQ(decode(message(h, size), &out).code(), Code::kMalformed) << int{h.op};
  }
  MsgHeader h = make_header(MsgOp::kMsgCredit, 0);
  h.flags = kFlagCreditNow;
  MsgHeader out{};
  EXPECT_EQ(decode(message(h, sizeof(MsgCredit)), &out).code(), Code::kMalformed);
}

TEST(MsgTest, UnknownOpIsMalformed) {
  for (int op = 0; op < 256; ++op) {
    bool known = false;
    for (const auto& s : kShapes) known |= static_cast<int>(s.op) == op;
    if (known) continue;
    MsgHeader h = make_header(MsgOp::kReply, 1);
    h.op = static_cast<uint8_t>(op);
    MsgHeader out{};
    // Long enough for any op, so only the opcode can make it fail.
    EXPECT_EQ(decode(message(h, 256), &out).code(), Code::kMalformed) << op;
    EXPECT_EQ(decode(message(h, sizeof(MsgHeader)), &out).code(), Code::kMalformed) << op;
  }
}

TEST(MsgTest, RequestWithStatusIsMalformed) {
  for (const auto& s : kShapes) {
    if (is_reply(s.op)) continue;
    for (int32_t st : {1, -1, static_cast<int32_t>(Code::kPeerDown)}) {
      MsgHeader h = make_header(s.op, 1);
      h.status = st;
      MsgHeader out{};
      EXPECT_EQ(decode(message(h, s.size), &out).code(), Code::kMalformed)
          << static_cast<int>(s.op) << " status " << st;
      EXPECT_EQ(decode(message(h, sizeof(MsgHeader)), &out).code(), Code::kMalformed)
          << static_cast<int>(s.op) << " status " << st;
    }
  }
}

TEST(MsgTest, ErrorReplyIsBareHeader) {
  for (const auto& s : kShapes) {
    if (!is_reply(s.op)) continue;
    for (int c = 1; c < kNumCodes; ++c) {
      MsgHeader out{};
      ASSERT_TRUE(decode(message(s.op, sizeof(MsgHeader), static_cast<Code>(c)), &out).is_ok())
          << static_cast<int>(s.op) << " code " << c;
      EXPECT_EQ(out.status, c);
    }
  }
}

TEST(MsgTest, ReplyStatusOutOfRangeIsMalformed) {
  for (const auto& s : kShapes) {
    if (!is_reply(s.op)) continue;
    for (int32_t st : {-1, kNumCodes, kNumCodes + 1, INT32_MAX, INT32_MIN}) {
      MsgHeader h = make_header(s.op, 1);
      h.status = st;
      MsgHeader out{};
      EXPECT_EQ(decode(message(h, sizeof(MsgHeader)), &out).code(), Code::kMalformed)
          << static_cast<int>(s.op) << " status " << st;
    }
  }
}

TEST(MsgTest, ErrorReplyWithTailIsMalformed) {
  for (const auto& s : kShapes) {
    if (!is_reply(s.op)) continue;
    MsgHeader out{};
    EXPECT_EQ(decode(message(s.op, sizeof(MsgHeader) + 1, Code::kPeerDown), &out).code(),
              Code::kMalformed)
        << static_cast<int>(s.op);
    EXPECT_EQ(decode(message(s.op, s.size + 8, Code::kPeerDown), &out).code(), Code::kMalformed)
        << static_cast<int>(s.op);
  }
}

// The rule decode_header must implement, written independently of msg.cc.
bool is_valid(const std::vector<std::byte>& b) {
  if (b.size() < sizeof(MsgHeader)) return false;
  MsgHeader h;
  std::memcpy(&h, b.data(), sizeof(h));
  if (h.version != kProtoVersion) return false;
  const Shape* shape = nullptr;
  for (const auto& s : kShapes) {
    if (static_cast<uint8_t>(s.op) == h.op) shape = &s;
  }
  if (shape == nullptr) return false;
  const bool message = shape->op == MsgOp::kMsgEager || shape->op == MsgOp::kMsgRts ||
                       shape->op == MsgOp::kMsgData || shape->op == MsgOp::kMsgPlaced;
  // Bits 4-15 are the sender's CPU hint, any value.
  const uint16_t flags = h.flags & 0x000f;
  if (flags != 0 && !(message && flags == 1)) return false;
  if (h.status != 0) {
    return is_reply(shape->op) && h.status > 0 && h.status < kNumCodes &&
           b.size() == sizeof(MsgHeader);
  }
  return shape->tail ? b.size() >= shape->size : b.size() == shape->size;
}

TEST(MsgTest, RandomGarbageNeverCrashes) {
  std::mt19937_64 rng(0x5eed);
  int valid = 0;
  for (int i = 0; i < 100000; ++i) {
    size_t n = rng() % 128;
    std::vector<std::byte> b(n);
    for (auto& x : b) x = static_cast<std::byte>(rng());
    // Make most headers nearly valid so the size and status checks run too.
    if (n >= sizeof(MsgHeader) && i % 4 != 0) {
      const Shape& s = kShapes[rng() % std::size(kShapes)];
      MsgHeader h = make_header(s.op, rng());
      if (rng() % 2) h.status = static_cast<int32_t>(rng() % (kNumCodes + 2)) - 1;
      if (rng() % 8 == 0) h.flags = static_cast<uint16_t>(rng());
      std::memcpy(b.data(), &h, sizeof(h));
      if (rng() % 2) b.resize(s.size + (rng() % 3 == 0 ? rng() % 3 : 0));
    }
    MsgHeader out{};
    Status st = decode_header(b, &out);
    if (is_valid(b)) {
      ++valid;
      ASSERT_TRUE(st.is_ok()) << i;
      EXPECT_EQ(std::memcmp(&out, b.data(), sizeof(out)), 0) << i;
    } else {
      ASSERT_EQ(st.code(), Code::kMalformed) << i;
    }
  }
  EXPECT_GT(valid, 1000);
}

}  // namespace
}  // namespace lt::proto
