// ltier-node's RPC functions and RPC commands.
#include "node.h"

namespace ltier_node {

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
namespace {
std::atomic<bool> g_gate_open{false};
}  // namespace

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

// Function 7: LT_read from inside the handler, of the LMR this node holds as
// handle H, and the bytes read as the answer. The request is H (8 bytes),
// OFF (8) and LEN (4), host order (the caller got H from this node).
int rpc_read_lmr(void* ctx, lt_node_t, const void* in, size_t in_len, void* out, size_t out_cap,
                 size_t* out_len) {
  if (in_len != kReadLmrRequest) return -LT_ERR_INVAL;
  const auto* p = static_cast<const unsigned char*>(in);
  uint64_t h, off;
  uint32_t len;
  std::memcpy(&h, p, 8);
  std::memcpy(&off, p + 8, 8);
  std::memcpy(&len, p + 16, 4);
  if (len > out_cap) return -LT_ERR_TRUNCATED;
  if (int r = LT_read(static_cast<lt_engine_t*>(ctx), h, off, out, len); r != 0) return r;
  *out_len = len;
  return 0;
}

// Function 8: LT_recv from inside the handler, looking once (timeout 0) on
// the port the request names (4 bytes, host order) until none waits or the
// answer is full; the answer is the messages taken, one after the other.
int rpc_take_msgs(void* ctx, lt_node_t, const void* in, size_t in_len, void* out, size_t out_cap,
                  size_t* out_len) {
  if (in_len != sizeof(uint32_t)) return -LT_ERR_INVAL;
  uint32_t port;
  std::memcpy(&port, in, sizeof(port));
  auto* at = static_cast<unsigned char*>(out);
  *out_len = 0;
  for (;;) {
    lt_node_t src = 0;
    size_t n = 0;
    int r = LT_recv(static_cast<lt_engine_t*>(ctx), port, at + *out_len, out_cap - *out_len, &src,
                    &n, 0);
    if (r == -LT_ERR_TIMEDOUT || (r == 0 && n == 0)) return 0;
    if (r != 0) return r;
    *out_len += n;
  }
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
  std::string f;
  const uint32_t func = a.optional_word(&f) ? static_cast<uint32_t>(std::stoul(f)) : 1;
  if (func != 1 && func != 3) return "err LT_ERR_INVAL";  // the echoing functions
  std::vector<std::vector<unsigned char>> reqs, reps;
  std::vector<size_t> lens(count);
  std::vector<lt_req_t> ids(count);
  for (uint64_t i = 0; i < count; ++i) {
    reqs.push_back(pattern(size, static_cast<unsigned>(i)));
    reps.emplace_back(size);
  }
  for (uint64_t i = 0; i < count; ++i) {
    int rc =
        LT_RPC_async(e, node, func, reqs[i].data(), size, reps[i].data(), size, &lens[i], &ids[i]);
    if (rc) {
      // The calls made so far write into reps: wait for them first.
      for (uint64_t k = 0; k < i; ++k) (void)LT_wait(e, ids[k], -1);
      return err(rc) + " issuing call " + std::to_string(i);
    }
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

// THREADS x COUNT calls of function 7 on NODE, each reading LEN bytes at
// offset 0 of NODE's handle H; every answer must be LEN bytes of BYTE.
std::string cmd_rpc_read_threads(lt_engine_t* e, Args& a) {
  lt_node_t node = a.node();
  uint64_t h = a.u64(), len = a.u64(), byte = a.u64(), threads = a.u64(), n = a.u64();
  if (threads == 0 || threads > 64 || len == 0 || len > (1u << 20) || byte > 255) {
    return "err LT_ERR_INVAL";
  }
  unsigned char req[kReadLmrRequest] = {};
  const uint32_t len32 = static_cast<uint32_t>(len);
  std::memcpy(req, &h, 8);
  std::memcpy(req + 16, &len32, 4);
  std::atomic<uint64_t> bad{0};
  int rc = run_threads(threads, n, [&] {
    std::vector<unsigned char> rep(len);
    size_t got = 0;
    int r = LT_RPC(e, node, 7, req, sizeof(req), rep.data(), rep.size(), &got);
    if (r == 0 &&
        (got != len || std::count(rep.begin(), rep.end(), byte) != static_cast<long>(len))) {
      bad.fetch_add(1);
    }
    return r;
  });
  if (rc) return err(rc);
  return bad.load() ? "err mismatch" : "ok";
}

// ROUNDS rounds of: three send_seq messages of 64 bytes to PORT of NODE,
// then a call of function 8 there, whose handler takes the messages waiting.
// The messages and the call arrive together, so NODE runs the handler in
// the middle of a batch of arrivals; each answer must be its round's three
// messages, in order.
std::string cmd_send_then_take(lt_engine_t* e, Args& a) {
  lt_node_t node = a.node();
  uint32_t port = a.u32();
  uint64_t rounds = a.u64();
  constexpr uint64_t kSize = 64, kPerRound = 3;
  std::vector<unsigned char> rep(kSize * kPerRound + 1), m(kSize);
  for (uint64_t i = 0; i < rounds; ++i) {
    for (uint64_t k = 0; k < kPerRound; ++k) {
      m = seq_message(kSize, i * kPerRound + k);
      if (int rc = LT_send(e, node, port, m.data(), kSize); rc) return err(rc) + " send";
    }
    size_t got = 0;
    if (int rc = LT_RPC(e, node, 8, &port, sizeof(port), rep.data(), rep.size(), &got); rc) {
      return err(rc) + " call " + std::to_string(i);
    }
    if (got != kSize * kPerRound) {
      return "err call " + std::to_string(i) + " took " + std::to_string(got) + " bytes";
    }
    for (uint64_t k = 0; k < kPerRound; ++k) {
      std::copy_n(rep.begin() + static_cast<long>(k * kSize), kSize, m.begin());
      uint64_t seq = 0;
      if (!seq_message_ok(m, kSize, &seq) || seq != i * kPerRound + k) {
        return "err call " + std::to_string(i) + " message " + std::to_string(k) + " is " +
               std::to_string(seq);
      }
    }
  }
  return "ok";
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

// Calls to this node's own server-loop function: one thread answers them
// (answer_loop_request) while this one calls COUNT times, with requests of
// 1..COUNT bytes (longer than the server's first buffer for COUNT > 4), and
// once more with a request the server denies.
std::string cmd_rpc_loop_self(lt_engine_t* e, Args& a) {
  uint32_t func = a.u32();
  uint64_t count = a.u64();
  std::atomic<uint64_t> truncated{0};
  int server_rc = 0;
  std::thread server([&] {
    std::vector<unsigned char> buf(4);
    for (uint64_t i = 0; i <= count && server_rc == 0; ++i)
      server_rc = answer_loop_request(e, func, &buf, &truncated);
  });
  std::string result;
  for (uint64_t i = 1; i <= count && result.empty(); ++i) {
    std::vector<unsigned char> in(i), out(i), want(i);
    for (uint64_t k = 0; k < i; ++k) in[k] = want[i - 1 - k] = static_cast<unsigned char>(k + 1);
    size_t n = 0;
    int rc = LT_RPC(e, LT_node_id(e), func, in.data(), i, out.data(), i, &n);
    if (rc != 0)
      result = err(rc) + " call " + std::to_string(i);
    else if (n != i || out != want)
      result = "err mismatch at call " + std::to_string(i);
  }
  unsigned char deny = 0xEE;
  size_t n = 0;
  int rc = result.empty() ? LT_RPC(e, LT_node_id(e), func, &deny, 1, nullptr, 0, &n) : 0;
  if (result.empty() && rc != -LT_ERR_PERM) result = "err the denied call gave " + err(rc);
  server.join();
  if (!result.empty()) return result;
  if (server_rc != 0) return err(server_rc) + " in the server thread";
  return "ok " + std::to_string(count) + " " + std::to_string(truncated.load());
}

// A call to this node's own server-loop function FUNC waits in its queue;
// LT_recvRPC_async then takes it. "ok done|waited": whether it was taken at
// the call (LT_REQ_DONE) or through a request. The call gets its bytes back
// reversed. A second call larger than the receive's 2-byte buffer is
// refused to that receive (TRUNCATED, left queued) and taken by the next.
std::string cmd_rpc_queue_take(lt_engine_t* e, Args& a) {
  uint32_t func = a.u32();
  const lt_node_t self = LT_node_id(e);
  unsigned char in[3] = {1, 2, 3}, out[3] = {};
  size_t out_len = 0;
  lt_req_t call = 0;
  if (int rc = LT_RPC_async(e, self, func, in, 3, out, 3, &out_len, &call); rc) return err(rc);
  unsigned char buf[8];
  lt_node_t src = 0;
  size_t n = 0;
  lt_rpc_token_t tok = 0;
  lt_req_t recv = 0;
  if (int rc = LT_recvRPC_async(e, func, buf, sizeof buf, &src, &n, &tok, &recv); rc)
    return err(rc);
  const bool done = recv == LT_REQ_DONE;
  if (int rc = LT_wait(e, recv, -1); rc) return err(rc) + " receiving";
  if (src != self || n != 3 || std::memcmp(buf, in, 3) != 0) return "err wrong request";
  std::reverse(buf, buf + 3);
  if (int rc = LT_replyRPC(e, tok, buf, 3, 0); rc) return err(rc) + " replying";
  if (int rc = LT_wait(e, call, -1); rc) return err(rc) + " calling";
  if (out_len != 3 || out[0] != 3 || out[2] != 1) return "err wrong reply";
  unsigned char big[5] = {9, 9, 9, 9, 9};
  if (int rc = LT_RPC_async(e, self, func, big, 5, nullptr, 0, &out_len, &call); rc) return err(rc);
  int rc = LT_recvRPC(e, func, buf, 2, &src, &n, &tok, -1);
  if (rc != -LT_ERR_TRUNCATED || n != 5) return "err the large request gave " + err(rc);
  if ((rc = LT_recvRPC(e, func, buf, sizeof buf, &src, &n, &tok, -1)) != 0 || n != 5) {
    return err(rc) + " taking the large request";
  }
  if ((rc = LT_replyRPC(e, tok, nullptr, 0, 0)) != 0 || (rc = LT_wait(e, call, -1)) != 0) {
    return err(rc) + " answering the large request";
  }
  return std::string("ok ") + (done ? "done" : "waited");
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

}  // namespace ltier_node
