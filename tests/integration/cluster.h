// Test harness: starts a real ltier-manager and real ltier-node processes and
// drives each node through its stdin/stdout command protocol. Every read has
// a deadline, so a hung node fails the test instead of hanging it.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace lt::itest {

class Proc {
 public:
  /// argv[0] is run through execvp; env entries are "K=V" added to ours.
  Proc(const std::vector<std::string>& argv, const std::vector<std::string>& env);
  ~Proc();
  /// Sends one command line and returns the reply line, or "TIMEOUT"/"EOF".
  std::string cmd(const std::string& line, int timeout_ms = 20000);
  /// Sends one command line without waiting for its reply (read_line gets it).
  bool send(const std::string& line);
  /// Next stdout line, or "TIMEOUT"/"EOF".
  std::string read_line(int timeout_ms);
  void signal(int sig);
  /// After SIGSTOP: waits until the kernel reports the process stopped
  /// (kill() returns before that). false if it does not within the timeout.
  bool wait_stopped(int timeout_ms);
  /// Waits for exit; returns the exit status, or -1 on timeout (then kills).
  int wait_exit(int timeout_ms);
  pid_t pid() const { return pid_; }

 private:
  // A read that waited this long for a reply met a hung node: its threads'
  // stacks, and those of the test's other processes, go to stderr (once per
  // test process, where gdb is installed), so a rare hang seen in CI can be
  // read from the log.
  static constexpr int kHangMs = 10000;
  void dump_stacks();
  pid_t pid_ = -1;
  int in_ = -1, out_ = -1;
  std::string buf_;
  bool reaped_ = false;
};

struct ClusterOptions {
  std::string secret = "itest-secret";
  uint32_t down_after_ms = 1000;
  std::string manager_listen = "127.0.0.1:0";
  std::vector<std::string> manager_prefix;  // e.g. {"ip","netns","exec","ns0"}
  std::vector<std::string> manager_args;    // more ltier-manager options
};

class Cluster {
 public:
  explicit Cluster(ClusterOptions o = {});
  ~Cluster();
  bool ok() const { return manager_ != nullptr && !manager_address_.empty(); }
  const std::string& manager_address() const { return manager_address_; }
  /// Starts an ltier-node; nullptr if it did not report "ready". `prefix`
  /// wraps the command (network namespaces); extra_env overrides defaults.
  Proc* add_node(const std::vector<std::string>& extra_env = {},
                 const std::vector<std::string>& prefix = {}, std::string* ready_line = nullptr);
  static std::string bin(const char* name);
  /// kill -9 of the manager (its nodes live on).
  void kill_manager();
  /// kill -9, then a new manager on the same address with `extra` arguments
  /// (--recover-ms N, say). False if it did not come up there.
  bool restart_manager(const std::vector<std::string>& extra);

 private:
  bool start_manager(const std::string& listen, const std::vector<std::string>& extra);
  ClusterOptions o_;
  std::unique_ptr<Proc> manager_;
  std::string manager_address_;
  std::string port_file_;
  std::vector<std::unique_ptr<Proc>> nodes_;
};

/// "ok 123" -> "123"; anything else -> "".
std::string ok_value(const std::string& reply);
/// Sends `line` to `p` until the reply is other than `stale` (at most
/// `tries` times, `gap_ms` apart) and returns the last reply: for a change
/// that another node's departure makes within a bounded time.
std::string cmd_until_not(Proc* p, const std::string& line, const std::string& stale, int tries,
                          int gap_ms);

/// The node's id ("id" command), or "".
std::string id_of(Proc* p);

/// The operations `p` has sent to node `peer` (the tx count of its "peers"
/// reply), or -1 when the peer is not listed.
long long tx_ops_to(Proc* p, const std::string& peer);

/// Membership events until one of `kind` (others are skipped): "ok KIND
/// NODE", or the last reply when none came in time.
std::string await_event(Proc* p, const std::string& kind, int timeout_ms = 15000);

/// Whether a "nodes" reply lists `id`.
bool lists(const std::string& nodes_reply, const std::string& id);

/// Runs `cmd` through the shell; its exit status.
int shell(const std::string& cmd);

}  // namespace lt::itest
