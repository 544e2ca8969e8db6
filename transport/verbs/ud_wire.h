// The ud transport's datagrams (ARCHITECTURE §6e). Every datagram is one
// UD SEND of at most the path MTU: a UdHeader and up to MTU - 48 payload
// bytes. Each direction of a pair of nodes is a stream of numbered
// datagrams: seq 0 is a kSyn (the sender's hello and its QP address, so the
// receiver can authenticate it and answer), later ones carry a message's
// fragments in order. Every datagram may carry an acknowledgement of the
// opposite stream: the next sequence expected and a bitmap of the 64 after
// it that arrived early.
#pragma once

#include <cstdint>
#include <string>

#include "transport/hello.h"

namespace lt::transport::verbs {

inline constexpr std::string_view kUdHelloLabel = "ltier ud hello v1";
inline constexpr uint32_t kUdQkey = 0x4c540d01;
inline constexpr uint32_t kGrhBytes = 40;  // a UD receive starts with the GRH

// kBye: the sender closes its side (its transport is going away); best
// effort, so a peer that dies without one is found by its silence.
enum class UdType : uint8_t { kData = 1, kSyn = 2, kAck = 3, kBye = 4 };
inline constexpr uint8_t kUdFirst = 1;  // UdHeader::flags: the message's first fragment
inline constexpr uint8_t kUdLast = 2;   // ... and its last
// UdHeader::flags of a kAck: the acknowledging node's posted receive
// buffers ran low while datagrams of the acknowledged stream came (a
// congestion mark, ud_cwnd.h). Nodes that predate it ignore the bit.
inline constexpr uint8_t kUdMark = 4;

struct UdHeader {
  UdType type;
  uint8_t flags;
  uint16_t len;         // payload bytes after the header
  uint32_t src, dst;    // node ids
  uint32_t stream;      // kData, kSyn, kBye: the sender's stream (nonzero)
  uint32_t seq;         // kData, kSyn: its number in the stream
  uint32_t ack_stream;  // the receiver's stream this acknowledges; 0: none
  uint32_t ack;         // the next seq expected on ack_stream
  uint32_t imm;         // kUdFirst: the message's immediate
  uint32_t msg_len;     // kUdFirst: the whole message's length
  uint32_t pad;
  uint64_t sack;  // bit i: ack + 1 + i arrived
};
static_assert(sizeof(UdHeader) == 48);

/// A kSyn's payload: who calls, and where its answers go.
struct UdSyn {
  HelloBody hello;
  uint8_t gid[16];
  uint32_t qpn;
  uint16_t lid;
  uint16_t pad;
  uint32_t mtu;
  uint32_t pad2;
};
static_assert(sizeof(UdSyn) == 88);

/// A ud address as published: "<gid, 32 hex digits>/<qpn>/<lid>/<mtu>".
struct UdAddress {
  uint8_t gid[16] = {};
  uint32_t qpn = 0;
  uint16_t lid = 0;
  uint32_t mtu = 0;
};
std::string format_ud_address(const UdAddress& a);
bool parse_ud_address(std::string_view text, UdAddress* out);

/// Sequence numbers wrap: a precedes b.
inline bool seq_before(uint32_t a, uint32_t b) { return static_cast<int32_t>(a - b) < 0; }

}  // namespace lt::transport::verbs
