// ltier-node: a node process that joins the cluster and serves the memory it
// hosts. It reads commands on stdin, one per line, and answers one line each:
// "ok [values...]" or "err LT_ERR_NAME". Used by the tour, the integration
// tests and people poking at a cluster by hand. EOF on stdin (or "quit")
// leaves the cluster; with --serve it ignores stdin and serves until killed.
// kCommands, near the end, lists the commands with their arguments and
// answers; docs/API.md describes them in full.
//
// Every node serves RPC functions 1 (echo), 2 (reply of the length given as
// a decimal string: bytes i*7+1), 3 (sleeps 300 ms, then echoes: for timeout
// tests only; handlers must not block), 4 (blocks until function 5 is called
// or 30 s pass; with engine.rpc_workers only) and 5; function 6 is a server
// loop (LT_regRPC_loop) answered by the rpc_loop command.
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

namespace {

int rpc_echo(void*, lt_node_t, const void* in, size_t in_len, void* out, size_t out_cap,
             size_t* out_len) {
  if (in_len > out_cap) return -LT_ERR_TRUNCATED;
  if (in_len) std::memcpy(out, in, in_len);
  *out_len = in_len;
  return 0;
}

int rpc_sized(void*, lt_node_t, const void* in, size_t in_len, void* out, size_t out_cap,
              size_t* out_len) {
  std::string s(static_cast<const char*>(in), in_len);
  size_t n = static_cast<size_t>(std::strtoull(s.c_str(), nullptr, 10));
  if (n > out_cap) return -LT_ERR_TRUNCATED;
  for (size_t i = 0; i < n; ++i)
    static_cast<unsigned char*>(out)[i] = static_cast<unsigned char>(i * 7 + 1);
  *out_len = n;
  return 0;
}

int rpc_slow(void* ctx, lt_node_t src, const void* in, size_t in_len, void* out, size_t out_cap,
             size_t* out_len) {
  usleep(300000);
  return rpc_echo(ctx, src, in, in_len, out, out_cap, out_len);
}

// The gate of functions 4 and 5 (a tool's state, not the library's).
std::atomic<bool> g_gate_open{false};

int rpc_gate_wait(void* ctx, lt_node_t src, const void* in, size_t in_len, void* out,
                  size_t out_cap, size_t* out_len) {
  for (int i = 0; i < 30000 && !g_gate_open.load(); ++i) usleep(1000);
  if (!g_gate_open.load()) return -LT_ERR_TIMEDOUT;
  return rpc_echo(ctx, src, in, in_len, out, out_cap, out_len);
}

int rpc_gate_open(void*, lt_node_t, const void*, size_t, void*, size_t, size_t* out_len) {
  g_gate_open.store(true);
  *out_len = 0;
  return 0;
}

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

std::vector<unsigned char> pattern(size_t n, unsigned seed) {
  std::vector<unsigned char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<unsigned char>((i * 131 + seed) >> 3);
  return v;
}

// A send_seq message: its number (u64, host byte order), then pattern(size,
// number) from byte 8 on.
std::vector<unsigned char> seq_message(uint64_t size, uint64_t seq) {
  auto m = pattern(size, static_cast<unsigned>(seq));
  std::memcpy(m.data(), &seq, sizeof(seq));
  return m;
}

// True when the first n bytes of m are a whole send_seq message of m.size()
// bytes; its number goes to *seq either way.
bool seq_message_ok(const std::vector<unsigned char>& m, size_t n, uint64_t* seq) {
  std::memcpy(seq, m.data(), sizeof(*seq));
  auto want = pattern(m.size(), static_cast<unsigned>(*seq));
  return n == m.size() && std::memcmp(m.data() + 8, want.data() + 8, m.size() - 8) == 0;
}

// Sends posted by send_async and not yet waited for (wait_sends): each
// keeps its buffer until then.
struct PendingSend {
  std::vector<unsigned char> buf;
  lt_req_t id;
};
std::vector<PendingSend> g_pending_sends;

// RIGHTS letters: r read, w write, a atomic.
uint32_t parse_rights(const std::string& s) {
  uint32_t r = 0;
  for (char c : s) {
    if (c == 'r') r |= LT_READ;
    if (c == 'w') r |= LT_WRITE;
    if (c == 'a') r |= LT_ATOMIC;
  }
  return r;
}

std::string to_hex(const std::vector<unsigned char>& b) {
  static const char* k = "0123456789abcdef";
  std::string s;
  for (unsigned char c : b) {
    s.push_back(k[c >> 4]);
    s.push_back(k[c & 15]);
  }
  return s;
}

bool from_hex(const std::string& s, std::vector<unsigned char>* out) {
  if (s.size() % 2 || s.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) {
    return false;
  }
  for (size_t i = 0; i < s.size(); i += 2) {
    out->push_back(static_cast<unsigned char>(std::stoul(s.substr(i, 2), nullptr, 16)));
  }
  return true;
}

std::string err(int rc) { return std::string("err ") + LT_errname(rc); }

std::string ok_or_err(int rc) { return rc ? err(rc) : "ok"; }

// recv_seq and recv_pat: a message whose length or bytes are not those of a
// send_seq message.
std::string content_error(uint64_t seq, lt_node_t src) {
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

// ---------------------------------------------------------------- membership

std::string cmd_id(lt_engine_t* e, Args&) { return "ok " + std::to_string(LT_node_id(e)); }

std::string cmd_address(lt_engine_t* e, Args&) {
  char a[128];
  int rc = LT_local_address(e, a, sizeof(a));
  return rc ? err(rc) : std::string("ok ") + a;
}

std::string cmd_transport(lt_engine_t* e, Args& a) {
  lt_node_t node = a.node();
  char name[16], why[128];
  int rc = LT_peer_transport(e, node, name, sizeof(name), why, sizeof(why));
  if (rc) return err(rc);
  return std::string("ok ") + name + " " + why;
}

std::string cmd_nodes(lt_engine_t* e, Args&) {
  lt_node_t ids[1024];
  size_t n = 0;
  LT_nodes(e, ids, 1024, &n);
  std::string s = "ok";
  for (size_t i = 0; i < n && i < 1024; ++i) {
    s.push_back(' ');
    s.append(std::to_string(ids[i]));
  }
  return s;
}

// ---------------------------------------------------------------- memory

std::string cmd_malloc(lt_engine_t* e, Args& a) {
  uint64_t node = a.u64(), size = a.u64();
  std::string r = a.word();
  lt_lmr_t h;
  int rc = LT_malloc(e, static_cast<lt_node_t>(node), size, parse_rights(r), &h);
  return rc ? err(rc) : "ok " + std::to_string(h);
}

std::string cmd_free(lt_engine_t* e, Args& a) { return ok_or_err(LT_free(e, a.u64())); }

std::string cmd_unmap(lt_engine_t* e, Args& a) { return ok_or_err(LT_unmap(e, a.u64())); }

std::string cmd_publish(lt_engine_t* e, Args& a) {
  lt_lmr_t h = a.u64();
  std::string name = a.word(), r = a.word();
  return ok_or_err(LT_publish(e, h, name.c_str(), parse_rights(r)));
}

std::string cmd_map(lt_engine_t* e, Args& a) {
  std::string name = a.word(), r = a.word();
  lt_lmr_t h;
  int rc = LT_map(e, name.c_str(), parse_rights(r), &h);
  return rc ? err(rc) : "ok " + std::to_string(h);
}

std::string cmd_write(lt_engine_t* e, Args& a) {
  lt_lmr_t h = a.u64();
  uint64_t off = a.u64();
  std::string hex = a.word();
  std::vector<unsigned char> b;
  if (!from_hex(hex, &b)) return "err LT_ERR_INVAL";
  return ok_or_err(LT_write(e, h, off, b.data(), b.size()));
}

std::string cmd_fill(lt_engine_t* e, Args& a) {
  lt_lmr_t h = a.u64();
  uint64_t off = a.u64(), len = a.u64(), byte = a.u64();
  std::vector<unsigned char> b(len, static_cast<unsigned char>(byte));
  return ok_or_err(LT_write(e, h, off, b.data(), len));
}

// read and sum: LT_read of H OFF LEN into *b. Returns the error answer, or
// "" when the read worked.
std::string read_region(lt_engine_t* e, Args& a, std::vector<unsigned char>* b) {
  lt_lmr_t h = a.u64();
  uint64_t off = a.u64(), len = a.u64();
  if (len > (1u << 30)) return "err LT_ERR_INVAL";
  b->assign(len, 0xEE);
  int rc = LT_read(e, h, off, b->data(), len);
  return rc ? err(rc) : "";
}

std::string cmd_read(lt_engine_t* e, Args& a) {
  std::vector<unsigned char> b;
  if (std::string bad = read_region(e, a, &b); !bad.empty()) return bad;
  return "ok " + to_hex(b);
}

std::string cmd_sum(lt_engine_t* e, Args& a) {
  std::vector<unsigned char> b;
  if (std::string bad = read_region(e, a, &b); !bad.empty()) return bad;
  uint64_t sum = 0;
  for (unsigned char c : b) sum += c;
  return "ok " + std::to_string(sum);
}

std::string cmd_memset(lt_engine_t* e, Args& a) {
  lt_lmr_t h = a.u64();
  uint64_t off = a.u64(), byte = a.u64(), len = a.u64();
  return ok_or_err(LT_memset(e, h, off, static_cast<int>(byte), len));
}

std::string cmd_memcpy(lt_engine_t* e, Args& a) {
  lt_lmr_t d = a.u64();
  uint64_t doff = a.u64();
  lt_lmr_t s = a.u64();
  uint64_t soff = a.u64(), len = a.u64();
  return ok_or_err(LT_memcpy(e, d, doff, s, soff, len));
}

// ---------------------------------------------------------------- atomics

std::string cmd_fadd(lt_engine_t* e, Args& a) {
  lt_lmr_t h = a.u64();
  uint64_t off = a.u64(), add = a.u64(), old = 0;
  int rc = LT_fetch_add(e, h, off, add, &old);
  return rc ? err(rc) : "ok " + std::to_string(old);
}

std::string cmd_fadd_async(lt_engine_t* e, Args& a) {
  lt_lmr_t h = a.u64();
  uint64_t off = a.u64(), add = a.u64(), old = 0;
  lt_req_t req;
  int rc = LT_fetch_add_async(e, h, off, add, &old, &req);
  if (rc == 0) rc = LT_wait(e, req, -1);
  return rc ? err(rc) : "ok " + std::to_string(old);
}

std::string cmd_node_info(lt_engine_t* e, Args& a) {
  lt_node_info_t info;
  int rc = LT_node_info(e, a.u32(), &info);
  if (rc) return err(rc);
  std::string rank = info.rank == LT_NO_RANK ? "-" : std::to_string(info.rank);
  return "ok " + std::to_string(info.id) + " " + rank + " " + info.name;
}

std::string cmd_node_by_name(lt_engine_t* e, Args& a) {
  std::string name = a.word();
  int64_t timeout_us = a.optional_timeout_us();
  lt_node_t node = 0;
  int rc = LT_node_by_name(e, name.c_str(), timeout_us < 0 ? 0 : timeout_us, &node);
  return rc ? err(rc) : "ok " + std::to_string(node);
}

std::string cmd_node_by_rank(lt_engine_t* e, Args& a) {
  uint32_t rank = a.u32();
  int64_t timeout_us = a.optional_timeout_us();
  lt_node_t node = 0;
  int rc = LT_node_by_rank(e, rank, timeout_us < 0 ? 0 : timeout_us, &node);
  return rc ? err(rc) : "ok " + std::to_string(node);
}

std::string cmd_cas(lt_engine_t* e, Args& a) {
  lt_lmr_t h = a.u64();
  uint64_t off = a.u64(), expected = a.u64(), desired = a.u64(), old = 0;
  int rc = LT_compare_swap(e, h, off, expected, desired, &old);
  return rc ? err(rc) : "ok " + std::to_string(old);
}

std::string cmd_fadd_loop(lt_engine_t* e, Args& a) {
  lt_lmr_t h = a.u64();
  uint64_t off = a.u64(), n = a.u64(), threads = a.u64();
  if (threads == 0 || threads > 64) return "err LT_ERR_INVAL";
  return ok_or_err(run_threads(threads, n, [&] {
    uint64_t old;
    return LT_fetch_add(e, h, off, 1, &old);
  }));
}

// ---------------------------------------------------------------- locks and barriers

std::string cmd_lock(lt_engine_t* e, Args& a) {
  std::string name = a.word();
  int64_t timeout_us = a.optional_timeout_us();
  return ok_or_err(LT_lock(e, name.c_str(), timeout_us));
}

std::string cmd_unlock(lt_engine_t* e, Args& a) {
  std::string name = a.word();
  // LT_unlock takes no timeout, but a TIMEOUT_MS after the name is accepted
  // as for lock, so it must still be a number.
  (void)a.optional_timeout_us();
  return ok_or_err(LT_unlock(e, name.c_str()));
}

std::string cmd_barrier(lt_engine_t* e, Args& a) {
  std::string name = a.word();
  uint64_t count = a.u64();
  int64_t timeout_us = a.optional_timeout_us();
  return ok_or_err(LT_barrier(e, name.c_str(), static_cast<uint32_t>(count), timeout_us));
}

std::string cmd_lock_loop(lt_engine_t* e, Args& a) {
  lt_lmr_t h = a.u64();
  uint64_t off = a.u64();
  std::string name = a.word();
  uint64_t n = a.u64(), threads = a.u64();
  if (threads == 0 || threads > 64) return "err LT_ERR_INVAL";
  return ok_or_err(run_threads(threads, n, [&] {
    // A deliberately non-atomic read-modify-write: only the lock keeps
    // the count exact.
    uint64_t v = 0;
    int r = LT_lock(e, name.c_str(), -1);
    if (r == 0) r = LT_read(e, h, off, &v, sizeof(v));
    ++v;
    if (r == 0) r = LT_write(e, h, off, &v, sizeof(v));
    int ur = LT_unlock(e, name.c_str());
    return r != 0 ? r : ur;
  }));
}

std::string cmd_barrier_loop(lt_engine_t* e, Args& a) {
  std::string name = a.word();
  uint64_t count = a.u64(), gens = a.u64();
  lt_lmr_t h = a.u64();
  uint64_t off = a.u64();
  for (uint64_t g = 1; g <= gens; ++g) {
    uint64_t old = 0, now = 0;
    int rc = LT_fetch_add(e, h, off, 1, &old);
    if (rc == 0) rc = LT_barrier(e, name.c_str(), static_cast<uint32_t>(count), -1);
    if (rc == 0) rc = LT_read(e, h, off, &now, sizeof(now));
    if (rc != 0) return err(rc);
    // Everyone incremented before anyone passed; nobody increments the
    // next generation before everyone has read.
    if (now != g * count)
      return "err mismatch gen " + std::to_string(g) + " saw " + std::to_string(now);
    rc = LT_barrier(e, name.c_str(), static_cast<uint32_t>(count), -1);
    if (rc != 0) return err(rc);
  }
  return "ok";
}

// ---------------------------------------------------------------- RPC

std::string cmd_rpc(lt_engine_t* e, Args& a) {
  lt_node_t node = a.node();
  uint32_t func = a.u32();
  std::string hex = a.word(), cap_s;
  size_t cap = a.optional_word(&cap_s) ? std::stoull(cap_s) : (1u << 20);
  std::vector<unsigned char> req;
  if (hex != "-" && !from_hex(hex, &req)) return "err LT_ERR_INVAL";
  std::vector<unsigned char> rep(cap);
  size_t n = 0;
  int rc = LT_RPC(e, node, func, req.data(), req.size(), rep.data(), cap, &n);
  if (rc == -LT_ERR_TRUNCATED) return err(rc) + " " + std::to_string(n);
  if (rc) return err(rc);
  rep.resize(n);
  return "ok " + (n ? to_hex(rep) : std::string("-"));
}

std::string cmd_rpc_sizes(lt_engine_t* e, Args& a) {
  lt_node_t node = a.node();
  uint64_t max = a.u64();
  std::vector<unsigned char> rep(max + 1);
  uint64_t count = 0;
  std::vector<uint64_t> sizes;
  for (uint64_t sz = 0; sz <= max; sz = sz < 16 ? sz + 1 : sz * 2 - 7) sizes.push_back(sz);
  if (sizes.back() != max) sizes.push_back(max);  // always the largest asked for
  for (uint64_t sz : sizes) {
    auto req = pattern(sz, static_cast<unsigned>(sz));
    size_t n = 0;
    int rc = LT_RPC(e, node, 1, req.data(), sz, rep.data(), rep.size(), &n);
    if (rc) return err(rc) + " at size " + std::to_string(sz);
    if (n != sz || (sz > 0 && std::memcmp(rep.data(), req.data(), sz) != 0)) {
      return "err mismatch at size " + std::to_string(sz);
    }
    ++count;
  }
  return "ok " + std::to_string(count);
}

std::string cmd_rpc_async(lt_engine_t* e, Args& a) {
  lt_node_t node = a.node();
  uint64_t count = a.u64(), size = a.u64();
  std::vector<std::vector<unsigned char>> reqs, reps;
  std::vector<size_t> lens(count);
  std::vector<lt_req_t> ids(count);
  for (uint64_t i = 0; i < count; ++i) {
    reqs.push_back(pattern(size, static_cast<unsigned>(i)));
    reps.emplace_back(size);
  }
  for (uint64_t i = 0; i < count; ++i) {
    int rc =
        LT_RPC_async(e, node, 1, reqs[i].data(), size, reps[i].data(), size, &lens[i], &ids[i]);
    if (rc) return err(rc) + " issuing call " + std::to_string(i);
  }
  for (uint64_t i = 0; i < count; ++i) {
    int rc = LT_wait(e, ids[i], -1);
    if (rc) return err(rc) + " call " + std::to_string(i);
    if (lens[i] != size || reps[i] != reqs[i]) return "err mismatch call " + std::to_string(i);
  }
  return "ok";
}

std::string cmd_rpc_threads(lt_engine_t* e, Args& a) {
  lt_node_t node = a.node();
  uint64_t threads = a.u64(), n = a.u64();
  if (threads == 0 || threads > 64) return "err LT_ERR_INVAL";
  std::atomic<uint64_t> bad{0};
  int rc = run_threads(threads, n, [&] {
    uint64_t v = 0x1234, back = 0;
    size_t len = 0;
    int r = LT_RPC(e, node, 1, &v, sizeof(v), &back, sizeof(back), &len);
    if (r == 0 && (len != sizeof(v) || back != v)) bad.fetch_add(1);
    return r;
  });
  if (rc) return err(rc);
  return bad.load() ? "err mismatch" : "ok";
}

// rpc_timeout and rpc_timeout_func: calls `func` of `node`, waits MS, then
// cancels the call.
std::string rpc_then_cancel(lt_engine_t* e, Args& a, lt_node_t node, uint32_t func) {
  int64_t ms = static_cast<int64_t>(a.u64());
  char req[4] = {1, 2, 3, 4}, rep[4];
  size_t n = 0;
  lt_req_t id;
  int rc = LT_RPC_async(e, node, func, req, 4, rep, 4, &n, &id);
  if (rc) return err(rc);
  rc = LT_wait(e, id, ms * 1000);
  if (rc == -LT_ERR_TIMEDOUT) rc = LT_cancel(e, id);
  return ok_or_err(rc);
}

std::string cmd_rpc_timeout(lt_engine_t* e, Args& a) {
  lt_node_t node = a.node();
  return rpc_then_cancel(e, a, node, 3);
}

std::string cmd_rpc_timeout_func(lt_engine_t* e, Args& a) {
  lt_node_t node = a.node();
  uint32_t func = a.u32();
  return rpc_then_cancel(e, a, node, func);
}

// One request of rpc_loop: received (growing *buf while it is too small),
// replied to with its bytes reversed or LT_ERR_PERM, and its token then
// checked to be spent.
int answer_loop_request(lt_engine_t* e, uint32_t func, std::vector<unsigned char>* buf,
                        std::atomic<uint64_t>* truncated) {
  lt_node_t src = 0;
  size_t n = 0;
  lt_rpc_token_t tok = 0;
  int rc;
  while ((rc = LT_recvRPC(e, func, buf->data(), buf->size(), &src, &n, &tok, -1)) ==
         -LT_ERR_TRUNCATED) {
    truncated->fetch_add(1);
    buf->resize(n);
  }
  if (rc == 0) {
    std::reverse(buf->begin(), buf->begin() + static_cast<std::ptrdiff_t>(n));
    bool deny = n > 0 && (*buf)[n - 1] == 0xEE;  // first byte, now last
    rc = LT_replyRPC(e, tok, buf->data(), n, deny ? -LT_ERR_PERM : 0);
  }
  if (rc == 0 && LT_replyRPC(e, tok, nullptr, 0, 0) != -LT_ERR_BAD_HANDLE) {
    rc = -LT_ERR_INTERNAL;  // a spent token must be refused
  }
  return rc;
}

std::string cmd_rpc_loop(lt_engine_t* e, Args& a) {
  uint32_t func = a.u32();
  uint64_t count = a.u64(), threads = a.u64(), cap0 = a.u64();
  std::atomic<uint64_t> left{count}, truncated{0};
  std::atomic<int> first_error{0};
  std::vector<std::thread> ts;
  for (uint64_t t = 0; t < threads; ++t) {
    ts.emplace_back([&] {
      std::vector<unsigned char> buf(cap0);
      for (;;) {
        uint64_t l = left.load();
        if (l == 0 || first_error.load() != 0) return;
        if (!left.compare_exchange_weak(l, l - 1)) continue;
        if (int rc = answer_loop_request(e, func, &buf, &truncated); rc != 0) {
          int zero = 0;
          first_error.compare_exchange_strong(zero, rc);
        }
      }
    });
  }
  for (auto& t : ts) t.join();
  if (first_error.load() != 0) return err(first_error.load());
  return "ok " + std::to_string(count) + " " + std::to_string(truncated.load());
}

std::string cmd_rpc_gate(lt_engine_t* e, Args& a) {
  lt_node_t node = a.node();
  char req[3] = {7, 8, 9}, rep[3];
  size_t n = 0, m = 0;
  lt_req_t id;
  int rc = LT_RPC_async(e, node, 4, req, 3, rep, 3, &n, &id);
  if (rc) return err(rc);
  rc = LT_RPC(e, node, 5, nullptr, 0, nullptr, 0, &m);
  int rc4 = LT_wait(e, id, -1);
  if (rc) return err(rc) + " opening the gate";
  if (rc4) return err(rc4) + " waiting at the gate";
  return n == 3 && std::memcmp(req, rep, 3) == 0 ? "ok" : "err mismatch";
}

// ---------------------------------------------------------------- messages

std::string cmd_send(lt_engine_t* e, Args& a) {
  lt_node_t node = a.node();
  uint32_t port = a.u32();
  std::string hex = a.word();
  std::vector<unsigned char> m;
  if (hex != "-" && !from_hex(hex, &m)) return "err LT_ERR_INVAL";
  return ok_or_err(LT_send(e, node, port, m.data(), m.size()));
}

// LT_recv of at most m->size() bytes on `port` into *m; "" when a message
// came (*src and *n set), else the answer to give.
std::string recv_into(lt_engine_t* e, uint32_t port, int64_t timeout_us,
                      std::vector<unsigned char>* m, lt_node_t* src, size_t* n) {
  int rc = LT_recv(e, port, m->data(), m->size(), src, n, timeout_us);
  if (rc == -LT_ERR_TRUNCATED) return err(rc) + " " + std::to_string(*n);
  return rc ? err(rc) : std::string();
}

std::string cmd_recv(lt_engine_t* e, Args& a) {
  uint32_t port = a.u32();
  uint64_t cap = a.u64();
  int64_t timeout_us = a.optional_timeout_us();
  std::vector<unsigned char> m(cap);
  lt_node_t src = 0;
  size_t n = 0;
  if (std::string no = recv_into(e, port, timeout_us, &m, &src, &n); !no.empty()) return no;
  m.resize(n);
  return "ok " + std::to_string(src) + " " + (n ? to_hex(m) : std::string("-"));
}

std::string cmd_send_seq(lt_engine_t* e, Args& a) {
  lt_node_t node = a.node();
  uint32_t port = a.u32();
  uint64_t count = a.u64(), size = std::max<uint64_t>(8, a.u64());
  for (uint64_t i = 0; i < count; ++i) {
    auto m = seq_message(size, i);
    int rc = LT_send(e, node, port, m.data(), size);
    if (rc) return err(rc) + " at " + std::to_string(i);
  }
  return "ok";
}

std::string cmd_recv_seq(lt_engine_t* e, Args& a) {
  uint32_t port = a.u32();
  uint64_t count = a.u64(), size = std::max<uint64_t>(8, a.u64());
  std::map<lt_node_t, uint64_t> next;
  std::vector<unsigned char> m(size);
  for (uint64_t i = 0; i < count; ++i) {
    lt_node_t src = 0;
    size_t n = 0;
    int rc = LT_recv(e, port, m.data(), size, &src, &n, -1);
    if (rc) return err(rc) + " at " + std::to_string(i);
    uint64_t seq;
    if (!seq_message_ok(m, n, &seq)) return content_error(seq, src);
    if (seq != next[src]) {
      return "err order: from node " + std::to_string(src) + " got " + std::to_string(seq) +
             " expected " + std::to_string(next[src]);
    }
    ++next[src];
  }
  return "ok";
}

std::string cmd_send_async_n(lt_engine_t* e, Args& a) {
  lt_node_t node = a.node();
  uint32_t port = a.u32();
  uint64_t count = a.u64();
  std::vector<uint64_t> vals(count);
  std::vector<lt_req_t> ids;
  bool again = false;
  for (uint64_t i = 0; i < count; ++i) {
    vals[i] = i;
    lt_req_t id;
    int rc = LT_send_async(e, node, port, &vals[i], 8, &id);
    if (rc == -LT_ERR_AGAIN) {
      again = true;
      break;
    }
    if (rc) return err(rc);
    ids.push_back(id);
  }
  for (lt_req_t id : ids) {
    if (int rc = LT_wait(e, id, -1); rc) return err(rc);
  }
  return "ok " + std::to_string(ids.size()) + (again ? " again" : "");
}

std::string cmd_send_threads(lt_engine_t* e, Args& a) {
  lt_node_t node = a.node();
  uint32_t port = a.u32();
  uint64_t threads = a.u64(), n = a.u64();
  if (threads == 0 || threads > 64) return "err LT_ERR_INVAL";
  return ok_or_err(run_threads(threads, n, [&] {
    uint64_t v = 1;
    return LT_send(e, node, port, &v, sizeof(v));
  }));
}

std::string cmd_recv_n(lt_engine_t* e, Args& a) {
  uint32_t port = a.u32();
  uint64_t n = a.u64();
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t v;
    lt_node_t src = 0;
    size_t len = 0;
    if (int rc = LT_recv(e, port, &v, sizeof(v), &src, &len, -1); rc) {
      return err(rc) + " at " + std::to_string(i);
    }
  }
  return "ok";
}

std::string cmd_send_async(lt_engine_t* e, Args& a) {
  lt_node_t node = a.node();
  uint32_t port = a.u32();
  uint64_t size = std::max<uint64_t>(8, a.u64());
  PendingSend ps{seq_message(size, 0), 0};
  int rc = LT_send_async(e, node, port, ps.buf.data(), size, &ps.id);
  if (rc) return err(rc);
  g_pending_sends.push_back(std::move(ps));
  return "ok";
}

std::string cmd_wait_sends(lt_engine_t* e, Args&) {
  int first = 0;
  for (auto& ps : g_pending_sends) {
    int rc = LT_wait(e, ps.id, -1);
    if (rc && !first) first = rc;
  }
  g_pending_sends.clear();
  return ok_or_err(first);
}

std::string cmd_recv_pat(lt_engine_t* e, Args& a) {
  uint32_t port = a.u32();
  uint64_t size = std::max<uint64_t>(8, a.u64());
  int64_t timeout_us = a.optional_timeout_us();
  std::vector<unsigned char> m(size);
  lt_node_t src = 0;
  size_t n = 0;
  if (std::string no = recv_into(e, port, timeout_us, &m, &src, &n); !no.empty()) return no;
  uint64_t seq;
  if (!seq_message_ok(m, n, &seq)) return content_error(seq, src);
  return "ok " + std::to_string(src) + " " + std::to_string(seq);
}

// ---------------------------------------------------------------- the table

struct Command {
  const char* name;
  const char* usage;  // arguments -> answer (what it does)
  std::string (*run)(lt_engine_t* e, Args& a);
};

constexpr Command kCommands[] = {
    {"id", "-> ok NODE_ID", cmd_id},
    {"nodes", "-> ok ID ID ...", cmd_nodes},
    {"node_info", "NODE -> ok ID RANK NAME (LT_node_info; RANK '-' when none)", cmd_node_info},
    {"node_by_name", "NAME [TIMEOUT_MS] -> ok ID (LT_node_by_name; no timeout: look once)",
     cmd_node_by_name},
    {"node_by_rank", "RANK [TIMEOUT_MS] -> ok ID (LT_node_by_rank; no timeout: look once)",
     cmd_node_by_rank},
    {"transport", "NODE -> ok NAME WHY (LT_peer_transport: shm, tcp or self)", cmd_transport},
    {"address", "-> ok HOST:PORT (this node's tcp transport)", cmd_address},
    {"malloc", "NODE SIZE RIGHTS -> ok HANDLE (RIGHTS: r, w, rw)", cmd_malloc},
    {"free", "H -> ok", cmd_free},
    {"unmap", "H -> ok", cmd_unmap},
    {"publish", "H NAME RIGHTS -> ok", cmd_publish},
    {"map", "NAME RIGHTS -> ok HANDLE", cmd_map},
    {"write", "H OFF HEX -> ok", cmd_write},
    {"fill", "H OFF LEN BYTE -> ok (LT_write of LEN copies of BYTE)", cmd_fill},
    {"read", "H OFF LEN -> ok HEX", cmd_read},
    {"sum", "H OFF LEN -> ok SUM (LT_read, byte sum: cheap to print)", cmd_sum},
    {"memset", "H OFF BYTE LEN -> ok", cmd_memset},
    {"memcpy", "DST DOFF SRC SOFF LEN -> ok", cmd_memcpy},
    {"fadd", "H OFF ADD -> ok OLD (LT_fetch_add)", cmd_fadd},
    {"fadd_async", "H OFF ADD -> ok OLD (LT_fetch_add_async, then LT_wait)", cmd_fadd_async},
    {"cas", "H OFF EXPECTED NEW -> ok OLD (LT_compare_swap)", cmd_cas},
    {"fadd_loop", "H OFF N THREADS -> ok (THREADS threads, N fetch_add(1) each)", cmd_fadd_loop},
    {"lock", "NAME [TIMEOUT_MS] -> ok (LT_lock; default timeout from config)", cmd_lock},
    {"unlock", "NAME -> ok", cmd_unlock},
    {"barrier", "NAME COUNT [TIMEOUT_MS] -> ok", cmd_barrier},
    {"lock_loop",
     "H OFF NAME N THREADS -> ok (THREADS threads, N x {lock; read the u64 at OFF; write it + 1; "
     "unlock})",
     cmd_lock_loop},
    {"barrier_loop",
     "NAME COUNT GENS H OFF -> ok (each generation: fetch_add the u64 at OFF; barrier; check it "
     "is >= gen*COUNT; barrier)",
     cmd_barrier_loop},
    {"rpc", "NODE FUNC HEX [CAP] -> ok HEX (LT_RPC; CAP defaults to 1 MiB)", cmd_rpc},
    {"rpc_sizes", "NODE MAX -> ok COUNT (echo every size 0..MAX in steps, byte-checked)",
     cmd_rpc_sizes},
    {"rpc_async", "NODE COUNT SIZE -> ok (COUNT async echo calls outstanding at once)",
     cmd_rpc_async},
    {"rpc_timeout", "NODE MS -> ok|err (the slow function, waited MS then cancelled)",
     cmd_rpc_timeout},
    {"rpc_timeout_func", "NODE FUNC MS -> ok|err (the same with function FUNC)",
     cmd_rpc_timeout_func},
    {"rpc_loop",
     "FUNC COUNT THREADS CAP -> ok SERVED TRUNCATED (THREADS threads answer COUNT requests to "
     "server-loop FUNC with LT_recvRPC (buffer CAP, grown on LT_ERR_TRUNCATED) and LT_replyRPC: "
     "the bytes reversed; a request starting with 0xEE gets LT_ERR_PERM. Each token is then "
     "replied to again, which must fail with LT_ERR_BAD_HANDLE)",
     cmd_rpc_loop},
    {"rpc_gate",
     "NODE -> ok (async call of the gate function 4, then a blocking call of 5, which opens the "
     "gate, then waits for 4: completes only if the server runs handlers on >= 2 workers)",
     cmd_rpc_gate},
    {"rpc_threads", "NODE THREADS COUNT -> ok (THREADS x COUNT LT_RPC echoes, checked)",
     cmd_rpc_threads},
    {"send", "NODE PORT HEX -> ok (LT_send; HEX '-' is an empty message)", cmd_send},
    {"recv", "PORT CAP [TIMEOUT_MS] -> ok SRC HEX (LT_recv; err LT_ERR_TRUNCATED NEEDED)",
     cmd_recv},
    {"send_seq",
     "NODE PORT COUNT SIZE -> ok (COUNT messages of SIZE bytes: sequence number, then a pattern "
     "of it)",
     cmd_send_seq},
    {"recv_seq",
     "PORT COUNT SIZE -> ok (COUNT such messages from any senders; checks content and "
     "per-sender order)",
     cmd_recv_seq},
    {"send_async_n",
     "NODE PORT COUNT -> ok SENT [again] (8-byte LT_send_async until COUNT or LT_ERR_AGAIN, then "
     "waits for them)",
     cmd_send_async_n},
    {"send_threads", "NODE PORT THREADS COUNT -> ok (THREADS x COUNT 8-byte LT_send)",
     cmd_send_threads},
    {"recv_n", "PORT N -> ok (N receives of up to 8 bytes)", cmd_recv_n},
    {"send_async",
     "NODE PORT SIZE -> ok (one send_seq-style message, number 0, submitted; wait_sends waits "
     "for them)",
     cmd_send_async},
    {"wait_sends", "-> ok", cmd_wait_sends},
    {"recv_pat", "PORT SIZE [TIMEOUT_MS] -> ok SRC SEQ (one send_seq-style message, checked)",
     cmd_recv_pat},
};

std::string run(lt_engine_t* e, const std::string& line) {
  std::istringstream in(line);
  std::string cmd;
  in >> cmd;
  const Command* c = std::find_if(std::begin(kCommands), std::end(kCommands),
                                  [&](const Command& k) { return cmd == k.name; });
  if (c == std::end(kCommands)) return "err LT_ERR_INVAL unknown command '" + cmd + "'";
  Args args(&in);
  try {
    return c->run(e, args);
  } catch (const std::exception&) {
    return "err LT_ERR_INVAL";
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool serve = false;
  lt_join_opts_t opts{};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--serve") {
      serve = true;
    } else if (a == "--manager" && i + 1 < argc) {
      opts.manager = argv[++i];
    } else if (a == "--secret" && i + 1 < argc) {
      opts.secret = argv[++i];
    } else if (a == "--listen" && i + 1 < argc) {
      opts.listen = argv[++i];
    } else if (a == "--config" && i + 1 < argc) {
      opts.config_path = argv[++i];
    } else {
      fprintf(stderr,
              "usage: ltier-node [--serve] [--manager H:P] [--secret S] [--listen H:P] "
              "[--config F]\n");
      return 2;
    }
  }
  std::signal(SIGPIPE, SIG_IGN);
  // Block SIGTERM/SIGINT before LT_join starts threads, so --serve receives
  // them in sigwait and leaves the cluster cleanly.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  if (serve) pthread_sigmask(SIG_BLOCK, &set, nullptr);
  lt_engine_t* e = nullptr;
  int rc = LT_join(&opts, &e);
  if (rc != 0) {
    printf("err %s\n", LT_errname(rc));
    fflush(stdout);
    fprintf(stderr, "ltier-node: join failed: %s\n", LT_strerror(rc));
    return 1;
  }
  for (auto [id, fn] : {std::pair<uint32_t, lt_rpc_fn>{1, rpc_echo},
                        {2, rpc_sized},
                        {3, rpc_slow},
                        {4, rpc_gate_wait},
                        {5, rpc_gate_open}}) {
    if (int r = LT_regRPC(e, id, fn, nullptr); r != 0) {
      fprintf(stderr, "ltier-node: LT_regRPC(%u): %s\n", id, LT_strerror(r));
    }
  }
  if (int r = LT_regRPC_loop(e, 6); r != 0) {
    fprintf(stderr, "ltier-node: LT_regRPC_loop(6): %s\n", LT_strerror(r));
  }
  printf("ready %u\n", LT_node_id(e));
  fflush(stdout);
  if (serve) {
    int sig;
    sigwait(&set, &sig);
  } else {
    std::string line;
    while (std::getline(std::cin, line)) {
      if (line == "quit") break;
      if (line.empty()) continue;
      std::string out = run(e, line);
      printf("%s\n", out.c_str());
      fflush(stdout);
    }
  }
  LT_leave(e);
  return 0;
}
