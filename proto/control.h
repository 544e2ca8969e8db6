// The control protocol between nodes and ltier-manager: kControl frames whose
// payload starts with a CtlType byte. Low rate; encoded with wire::Writer and
// decoded with the bounds-checked wire::Reader.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/mac.h"
#include "common/status.h"
#include "common/wire.h"
#include "transport/transport.h"

namespace lt::proto {

enum class CtlType : uint8_t {
  kJoin = 1,             // nonce, mac, then a JoinRequest (see join_frame)
  kJoinOk = 2,           // mac, then u32 node, u64 cluster_token, u32 heartbeat_ms,
                         //   u32 down_after_ms, u32 count, members
  kJoinRefused = 3,      // u8 code, str reason
  kMemberUp = 4,         // member
  kMemberDown = 5,       // u32 node
  kHeartbeat = 6,        // (empty)
  kLeave = 7,            // (empty)
  kNameRegister = 8,     // u64 req, str name
  kNameLookup = 9,       // u64 req, str name
  kNameUnregister = 10,  // u64 req, str name
  kNameReply = 11,       // u64 req, u8 code, u32 node
  kLockAcquire = 12,     // u64 req, str name, u64 owner (answered when granted)
  kLockRelease = 13,     // u64 req, str name, u64 owner (also withdraws a waiting acquire)
  kBarrier = 14,         // u64 req, str name, u32 count (answered when count have arrived)
  kChallenge = 15,       // u8 version, nonce: the manager's first frame on every connection
};
inline constexpr uint8_t kMaxCtlType = 15;
inline constexpr uint8_t kHandshakeVersion = 1;
inline constexpr uint32_t kMaxCtlFrame = 1u << 20;
inline constexpr uint32_t kMaxMembers = 1023;  // one per slot
inline constexpr uint32_t kMaxBarrierCount = 65536;
/// Node ids are slot + generation: id = generation x kNodeSlots + slot, slot
/// in [1, kNodeSlots). The engines' per-node tables have kNodeSlots entries,
/// indexed by node_slot(id). The manager gives a slot to a new node only
/// while no member holds it, with the slot's next generation, so ids are
/// never reused (not by a restarted manager either: the members that
/// reconnect tell it the newest id they have seen in each slot), and joins
/// over a cluster's life are not limited; members at once are (kMaxMembers).
using transport::kNodeSlots;
using transport::node_gen;
using transport::node_slot;
inline constexpr uint32_t kMaxNodeGen = UINT32_MAX / kNodeSlots - 1;

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

/// What a node asks for when it joins. A node that was a member under a
/// manager that went away (restarted) claims its place back: its id, the
/// cluster token, the newest id it has seen in each slot (so that the new
/// manager never hands out an id some survivor knows), the locks it holds,
/// the names it registered, and the members it knows (those that do not
/// claim their place back in time are declared down).
struct JoinRequest {
  std::string name, addresses, host_id, tenant;
  uint32_t rank = kNoRank;
  uint32_t claim_node = 0;  // 0: a fresh join
  uint64_t claim_token = 0;
  std::vector<uint32_t> seen;                           // per slot, the newest id seen
  std::vector<std::pair<std::string, uint64_t>> locks;  // (name, owner)
  std::vector<std::string> names;
  std::vector<uint32_t> known;
};
inline constexpr uint32_t kMaxClaims = 4096;  // locks or names carried by one rejoin

/// The join handshake (challenge-response; the secret never crosses the
/// wire). The manager opens every connection with a kChallenge carrying its
/// nonce; the node answers with a kJoin carrying its own nonce and an HMAC,
/// keyed by the secret, over both nonces and the request; the manager's
/// kJoinOk carries an HMAC over both nonces (in the other order) and the
/// answer, so the node knows the manager has the secret too. A join replayed
/// on another connection meets another nonce and is refused.
std::string challenge_frame(const Nonce& manager_nonce);
bool parse_challenge(const std::string& payload, Nonce* manager_nonce);
std::string join_frame(std::string_view secret, const Nonce& manager_nonce, const Nonce& node_nonce,
                       const JoinRequest& j);
/// The parts of join_frame: the request's encoding, and a kJoin sealing an
/// encoded request (the fuzz targets seal bodies of their own).
std::string join_body(const JoinRequest& j);
std::string seal_join(std::string_view secret, const Nonce& manager_nonce, const Nonce& node_nonce,
                      std::string_view body);
/// A kJoin's payload: kMalformed if it does not decode, kAuth if its MAC is
/// not the secret's for this challenge.
Code open_join(const std::string& payload, std::string_view secret, const Nonce& manager_nonce,
               JoinRequest* j, Nonce* node_nonce);
/// A kJoinOk around `answer` (what follows the MAC).
std::string join_ok_frame(std::string_view secret, const Nonce& node_nonce,
                          const Nonce& manager_nonce, const std::string& answer);
/// The key that authenticates peers' hellos to each other: derived from the
/// secret (which only members know) and the cluster token.
Mac hello_key(std::string_view secret, uint64_t cluster_token);

/// The answer inside a kJoinOk payload: kMalformed or kAuth as above.
Code open_join_ok(const std::string& payload, std::string_view secret, const Nonce& node_nonce,
                  const Nonce& manager_nonce, std::string* answer);

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
