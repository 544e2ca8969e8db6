// ltier-manager's server side (LITE's cluster manager): admits nodes that know
// the cluster secret, hands out node ids, the cluster token and the address
// book, pushes membership events, declares silent nodes down, and keeps the
// LMR name directory (name -> master node). Single-threaded.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/net.h"
#include "common/status.h"
#include "proto/control.h"

namespace lt::proto {

struct ManagerOptions {
  std::string listen = "127.0.0.1:7700";
  std::string secret = "ltier-dev-secret";
  uint32_t heartbeat_ms = 200;    // told to nodes at join
  uint32_t down_after_ms = 1500;  // silence before a node is declared down
  // A connection that has not joined within this time is dropped, and at most
  // max_unjoined such connections are kept (the oldest goes for a new one),
  // so idle or flooding strangers cannot hold the manager's descriptors.
  uint32_t join_timeout_ms = 5000;
  uint32_t max_unjoined = 1024;
  // After a restart, fresh joins wait this long (answered at its end) while
  // the members of the cluster that outlived the old manager reconnect and
  // claim their ids back, so that no newcomer starts a cluster of its own.
  // 0 (the default): a fresh manager admits joins at once.
  uint32_t recover_ms = 0;
  // Members at once, 1 to 1023 (node slots 1..max_nodes). Slots are reused
  // (with a new generation, so ids are not) once their member is gone.
  uint32_t max_nodes = kMaxMembers;
  bool verbose = false;  // one line per membership change on stderr
};

class Manager {
 public:
  explicit Manager(ManagerOptions o);
  ~Manager();
  Status start();
  std::string address() const { return address_; }
  /// Serves until `stop` becomes true (checked at least every 100 ms).
  Status run(const std::atomic<bool>& stop);

 private:
  struct Client {
    net::Fd fd;
    CtlStream in;
    uint32_t node = 0;  // 0 until joined
    uint64_t last_seen_ns = 0;
    uint64_t connected_ns = 0;
    Member member;
    Nonce challenge{};                      // this connection's nonce for the join handshake
    std::list<Client*>::iterator unjoined;  // its place in unjoined_ until it joins
  };
  void on_readable(Client* c);
  void handle(Client* c, const std::string& payload);
  // One per control message a client sends; `r` is past the type byte.
  void on_join(Client* c, const std::string& payload);
  void on_lock(Client* c, CtlType type, wire::Reader& r);
  void on_barrier(Client* c, wire::Reader& r);
  void on_name(Client* c, CtlType type, wire::Reader& r);
  void refuse_join(Client* c, const std::string& name, Code code, const std::string& why);
  void admit(Client* c, Member m, const Nonce& node_nonce);
  // A member of the cluster that outlived the old manager claims its id back.
  void readmit(Client* c, const JoinRequest& j, Member m, const Nonce& node_nonce);
  void admit_held();
  void send(Client* c, const std::string& frame);
  void drop(Client* c, const char* why);
  void broadcast(const std::string& frame, uint32_t except);
  void check_timeouts();
  void accept_all();
  // A connection left the unjoined list (it joined or was dropped).
  void joined_or_gone(Client* c);

  ManagerOptions opt_;
  std::string address_;
  net::Fd listen_fd_;
  net::Fd epfd_;
  uint64_t token_ = 0;
  // Node slots (control.h): the newest generation given out or seen in each,
  // whether this manager admitted that generation (then it is never
  // admitted again: its node was declared down), and the member in it.
  struct SlotState {
    uint32_t gen = 0;
    bool known = false;
    bool admitted = false;
    uint32_t holder = 0;
    bool reserved = false;  // a survivor knows a member in it that has not claimed it back yet
  };
  std::vector<SlotState> slots_ = std::vector<SlotState>(kNodeSlots);
  std::deque<uint32_t> free_slots_;  // free the longest first
  uint32_t max_slot_ = kMaxMembers;
  // The next fresh id (a free slot's next generation), or 0 when the cluster
  // is full. The slot is not taken yet.
  uint32_t next_fresh_id() const;
  void take_slot(uint32_t id);
  void raise_slot(uint32_t id);  // a claim saw `id`: no older id of its slot is given out
  uint32_t joins_ = 0;           // admitted by this manager (fresh or claimed)
  bool token_adopted_ = false;   // token_ came from the first member to claim its id back
  uint64_t recover_until_ns_ = 0;
  struct Held {  // a fresh join that waits for the end of the recovery time
    Client* client;
    Member member;
    Nonce nonce;
  };
  std::vector<Held> held_;
  // Members the survivors know that have not claimed their place back; at
  // claims_until_ns_ those still missing are declared down.
  std::set<uint32_t> expected_;
  uint64_t claims_until_ns_ = 0;
  void end_claims();
  std::unordered_map<Client*, std::unique_ptr<Client>> clients_;
  std::list<Client*> unjoined_;  // clients that have not joined, oldest first
  size_t max_unjoined_ = 0;      // opt_.max_unjoined, bounded by the descriptor limit
  net::Fd spare_fd_;             // given up to accept and refuse one connection at EMFILE
  uint64_t refused_ = 0;         // connections dropped for the cap or the descriptor limit
  std::map<uint32_t, Client*> members_;
  std::map<std::string, uint32_t> names_;

  // Named locks: FIFO of waiters, so every acquirer is served in arrival
  // order (fair). An owner is (client, owner token): the token is the
  // acquiring thread, so threads of one node exclude each other too.
  struct Waiter {
    Client* client;
    uint64_t owner;
    uint64_t req;
  };
  struct Lock {
    Client* holder = nullptr;
    uint64_t owner = 0;
    std::deque<Waiter> waiters;
  };
  std::map<std::string, Lock> locks_;
  // Barriers: arrivals of the current generation; the count-th arrival
  // releases everyone and the name starts a new generation.
  struct Barrier {
    uint32_t count = 0;
    std::vector<Waiter> arrived;
  };
  std::map<std::string, Barrier> barriers_;
  void reply(Client* c, uint64_t req, Code code, uint32_t node = 0);
  void acquire_lock(Client* c, uint64_t req, const std::string& name, uint64_t owner);
  void release_lock(Client* c, uint64_t req, const std::string& name, uint64_t owner);
  void grant_next(const std::string& name, Lock& l);
  void withdraw_arrival(Client* c, uint64_t req, const std::string& name);
  void forget_client(Client* c);
};

}  // namespace lt::proto
