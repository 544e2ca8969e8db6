// ltier-node's pieces: the arguments of a command line, the helpers the
// commands share, and the commands, by area (cluster.cc: membership, memory,
// atomics, locks and barriers; rpc.cc; messages.cc; mixed.cc: every kind of
// operation from many threads at once). ltier_node.cc holds the
// table that names them and main().
#pragma once

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ltier/lt.h"

namespace ltier_node {

// Runs `body` n times on each of `threads` threads; the first error wins.
template <typename Body>
int run_threads(uint64_t threads, uint64_t n, Body body) {
  std::atomic<int> first_error{0};
  std::vector<std::thread> ts;
  for (uint64_t t = 0; t < threads; ++t) {
    ts.emplace_back([&] {
      for (uint64_t i = 0; i < n; ++i) {
        int rc = body();
        if (rc != 0) {
          int zero = 0;
          first_error.compare_exchange_strong(zero, rc);
          return;
        }
      }
    });
  }
  for (auto& t : ts) t.join();
  return first_error;
}

inline std::vector<unsigned char> pattern(size_t n, unsigned seed) {
  std::vector<unsigned char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<unsigned char>((i * 131 + seed) >> 3);
  return v;
}

// A send_seq message: its number (u64, host byte order), then pattern(size,
// number) from byte 8 on.
inline std::vector<unsigned char> seq_message(uint64_t size, uint64_t seq) {
  auto m = pattern(size, static_cast<unsigned>(seq));
  std::memcpy(m.data(), &seq, sizeof(seq));
  return m;
}

// True when the first n bytes of m are a whole send_seq message of m.size()
// bytes; its number goes to *seq either way.
inline bool seq_message_ok(const std::vector<unsigned char>& m, size_t n, uint64_t* seq) {
  std::memcpy(seq, m.data(), sizeof(*seq));
  auto want = pattern(m.size(), static_cast<unsigned>(*seq));
  return n == m.size() && std::memcmp(m.data() + 8, want.data() + 8, m.size() - 8) == 0;
}

// RIGHTS letters: r read, w write, a atomic.
inline uint32_t parse_rights(const std::string& s) {
  uint32_t r = 0;
  for (char c : s) {
    if (c == 'r') r |= LT_READ;
    if (c == 'w') r |= LT_WRITE;
    if (c == 'a') r |= LT_ATOMIC;
  }
  return r;
}

inline std::string to_hex(const std::vector<unsigned char>& b) {
  static const char* k = "0123456789abcdef";
  std::string s;
  for (unsigned char c : b) {
    s.push_back(k[c >> 4]);
    s.push_back(k[c & 15]);
  }
  return s;
}

inline bool from_hex(const std::string& s, std::vector<unsigned char>* out) {
  if (s.size() % 2 || s.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) {
    return false;
  }
  for (size_t i = 0; i < s.size(); i += 2) {
    out->push_back(static_cast<unsigned char>(std::stoul(s.substr(i, 2), nullptr, 16)));
  }
  return true;
}

inline std::string err(int rc) { return std::string("err ") + LT_errname(rc); }

inline std::string ok_or_err(int rc) { return rc ? err(rc) : "ok"; }

// recv_seq and recv_pat: a message whose length or bytes are not those of a
// send_seq message.
inline std::string content_error(uint64_t seq, lt_node_t src) {
  return "err content of message " + std::to_string(seq) + " from " + std::to_string(src);
}

// The words of a command line after the command's name. A missing or
// malformed number throws, which run() answers with "err LT_ERR_INVAL"; a
// missing word is "".
class Args {
 public:
  explicit Args(std::istringstream* in) : in_(in) {}
  // Decimal, 0x hex or 0 octal.
  uint64_t u64() { return static_cast<uint64_t>(std::stoull(word(), nullptr, 0)); }
  uint32_t u32() { return static_cast<uint32_t>(u64()); }
  lt_node_t node() { return static_cast<lt_node_t>(u64()); }
  std::string word() {
    std::string t;
    *in_ >> t;
    return t;
  }
  bool optional_word(std::string* t) { return static_cast<bool>(*in_ >> *t); }
  // An optional trailing TIMEOUT_MS, in µs; -1 (the default timeout) when absent.
  int64_t optional_timeout_us() {
    std::string t;
    return optional_word(&t) ? static_cast<int64_t>(std::stoll(t)) * 1000 : -1;
  }

 private:
  std::istringstream* in_;
};

// The RPC functions every node serves (rpc.cc).
int rpc_echo(void*, lt_node_t, const void* in, size_t in_len, void* out, size_t out_cap,
             size_t* out_len);
int rpc_sized(void*, lt_node_t, const void* in, size_t in_len, void* out, size_t out_cap,
              size_t* out_len);
int rpc_slow(void*, lt_node_t, const void* in, size_t in_len, void* out, size_t out_cap,
             size_t* out_len);
int rpc_gate_wait(void*, lt_node_t, const void* in, size_t in_len, void* out, size_t out_cap,
                  size_t* out_len);
int rpc_gate_open(void*, lt_node_t, const void*, size_t, void*, size_t, size_t* out_len);
inline constexpr size_t kReadLmrRequest = 20;  // function 7's request: H, OFF, LEN
int rpc_read_lmr(void* ctx, lt_node_t, const void* in, size_t in_len, void* out, size_t out_cap,
                 size_t* out_len);
int rpc_take_msgs(void* ctx, lt_node_t, const void* in, size_t in_len, void* out, size_t out_cap,
                  size_t* out_len);

// The commands: each reads its arguments and returns its answer line.
std::string cmd_id(lt_engine_t* e, Args& a);
std::string cmd_address(lt_engine_t* e, Args& a);
std::string cmd_transport(lt_engine_t* e, Args& a);
std::string cmd_stats(lt_engine_t* e, Args& a);
std::string cmd_peers(lt_engine_t* e, Args& a);
std::string cmd_nodes(lt_engine_t* e, Args& a);
std::string cmd_node_info(lt_engine_t* e, Args& a);
std::string cmd_event(lt_engine_t* e, Args& a);
std::string cmd_node_by_name(lt_engine_t* e, Args& a);
std::string cmd_node_by_rank(lt_engine_t* e, Args& a);
std::string cmd_malloc(lt_engine_t* e, Args& a);
std::string cmd_free(lt_engine_t* e, Args& a);
std::string cmd_unmap(lt_engine_t* e, Args& a);
std::string cmd_publish(lt_engine_t* e, Args& a);
std::string cmd_map(lt_engine_t* e, Args& a);
std::string cmd_write(lt_engine_t* e, Args& a);
std::string cmd_fill(lt_engine_t* e, Args& a);
std::string cmd_write_pat(lt_engine_t* e, Args& a);
std::string cmd_check_pat(lt_engine_t* e, Args& a);
std::string cmd_read(lt_engine_t* e, Args& a);
std::string cmd_sum(lt_engine_t* e, Args& a);
std::string cmd_memset(lt_engine_t* e, Args& a);
std::string cmd_memcpy(lt_engine_t* e, Args& a);
std::string cmd_fadd(lt_engine_t* e, Args& a);
std::string cmd_fadd_async(lt_engine_t* e, Args& a);
std::string cmd_cas(lt_engine_t* e, Args& a);
std::string cmd_fadd_loop(lt_engine_t* e, Args& a);
std::string cmd_lock(lt_engine_t* e, Args& a);
std::string cmd_unlock(lt_engine_t* e, Args& a);
std::string cmd_barrier(lt_engine_t* e, Args& a);
std::string cmd_lock_loop(lt_engine_t* e, Args& a);
std::string cmd_barrier_loop(lt_engine_t* e, Args& a);
std::string cmd_rpc(lt_engine_t* e, Args& a);
std::string cmd_rpc_sizes(lt_engine_t* e, Args& a);
std::string cmd_rpc_async(lt_engine_t* e, Args& a);
std::string cmd_rpc_threads(lt_engine_t* e, Args& a);
std::string cmd_rpc_read_threads(lt_engine_t* e, Args& a);
std::string cmd_send_then_take(lt_engine_t* e, Args& a);
std::string cmd_mixed_threads(lt_engine_t* e, Args& a);
std::string cmd_recv_mixed(lt_engine_t* e, Args& a);
std::string cmd_rpc_timeout(lt_engine_t* e, Args& a);
std::string cmd_rpc_timeout_func(lt_engine_t* e, Args& a);
std::string cmd_rpc_loop(lt_engine_t* e, Args& a);
std::string cmd_rpc_loop_self(lt_engine_t* e, Args& a);
std::string cmd_rpc_queue_take(lt_engine_t* e, Args& a);
std::string cmd_rpc_gate(lt_engine_t* e, Args& a);
std::string cmd_send(lt_engine_t* e, Args& a);
std::string cmd_recv(lt_engine_t* e, Args& a);
std::string cmd_recv_async(lt_engine_t* e, Args& a);
std::string cmd_send_seq(lt_engine_t* e, Args& a);
std::string cmd_recv_seq(lt_engine_t* e, Args& a);
std::string cmd_send_async_n(lt_engine_t* e, Args& a);
std::string cmd_send_threads(lt_engine_t* e, Args& a);
std::string cmd_recv_n(lt_engine_t* e, Args& a);
std::string cmd_recv_ordered(lt_engine_t* e, Args& a);
std::string cmd_send_async(lt_engine_t* e, Args& a);
std::string cmd_wait_sends(lt_engine_t* e, Args& a);
std::string cmd_recv_pat(lt_engine_t* e, Args& a);
std::string cmd_class(lt_engine_t* e, Args& a);
std::string cmd_qos(lt_engine_t* e, Args& a);
std::string cmd_metrics(lt_engine_t* e, Args& a);

}  // namespace ltier_node
