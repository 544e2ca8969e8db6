// The control protocol between nodes and ltier-manager: kControl frames whose
// payload starts with a CtlType byte. Low rate; encoded with wire::Writer and
// decoded with the bounds-checked wire::Reader.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/wire.h"

namespace lt::proto {

enum class CtlType : uint8_t {
  kJoin = 1,          // str secret, str name, str addresses, str host_id, str tenant,
                      //   u32 rank (kNoRank: none)
  kJoinOk = 2,        // u32 node, u64 cluster_token, u32 heartbeat_ms, u32 down_after_ms, members
  kJoinRefused = 3,   // u8 code, str reason
  kMemberUp = 4,      // member
  kMemberDown = 5,    // u32 node
  kHeartbeat = 6,     // (empty)
  kLeave = 7,         // (empty)
  kNameRegister = 8,  // u64 req, str name
  kNameLookup = 9,    // u64 req, str name
  kNameUnregister = 10,  // u64 req, str name
  kNameReply = 11,       // u64 req, u8 code, u32 node
  kLockAcquire = 12,     // u64 req, str name, u64 owner (answered when granted)
  kLockRelease = 13,     // u64 req, str name, u64 owner (also withdraws a waiting acquire)
  kBarrier = 14,         // u64 req, str name, u32 count (answered when count have arrived)
};
inline constexpr uint8_t kMaxCtlType = 14;
inline constexpr uint32_t kMaxCtlFrame = 1u << 20;
inline constexpr uint32_t kMaxMembers = 1024;
/// Node ids are never reused within one manager's life; engines size their
/// peer tables by this bound.
inline constexpr uint32_t kMaxNodeId = 1024;

/// Member::rank of a node that has none.
inline constexpr uint32_t kNoRank = UINT32_MAX;

struct Member {
  uint32_t node = 0;
  std::string name;
  std::string addresses;  // transport::format_addresses(); the manager does not read it
  std::string host_id;
  uint32_t rank = kNoRank;  // its rank in a launched job (cluster.rank), if any
};

void put_member(wire::Writer& w, const Member& m);
bool get_member(wire::Reader& r, Member* m);

/// Starts a control frame of `type`; finish_ctl() patches its length.
std::string begin_ctl(CtlType type);
void finish_ctl(std::string* frame);

/// Accumulates bytes from a stream socket and cuts complete control frames.
class CtlStream {
 public:
  /// Reads what the non-blocking socket has. kPeerDown on EOF or error.
  Status fill(int fd);
  /// Next complete frame's payload (CtlType byte first). kNoResource when
  /// none is complete yet; kMalformed for a bad header (drop the connection).
  Status next(std::string* payload);

 private:
  std::string buf_;
  size_t begin_ = 0;
};

}  // namespace lt::proto
