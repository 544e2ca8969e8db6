// ltier-node commands: messages.
#include <algorithm>
#include <cstring>
#include <map>
#include <utility>

#include "node.h"

namespace ltier_node {

namespace {
// Sends posted by send_async and not yet waited for (wait_sends): each
// keeps its buffer until then.
struct PendingSend {
  std::vector<unsigned char> buf;
  lt_req_t id;
};
std::vector<PendingSend> g_pending_sends;
}  // namespace

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

std::string cmd_recv_async(lt_engine_t* e, Args& a) {
  uint32_t port = a.u32();
  uint64_t cap = a.u64();
  int64_t timeout_us = a.optional_timeout_us();
  std::vector<unsigned char> m(cap);
  lt_node_t src = 0;
  size_t n = 0;
  lt_req_t req = 0;
  if (int rc = LT_recv_async(e, port, m.data(), m.size(), &src, &n, &req); rc) return err(rc);
  const bool done = req == LT_REQ_DONE;
  int rc = LT_wait(e, req, timeout_us);
  if (rc == -LT_ERR_TIMEDOUT) (void)LT_cancel(e, req);
  if (rc == -LT_ERR_TRUNCATED) return err(rc) + " " + std::to_string(n);
  if (rc) return err(rc);
  m.resize(n);
  return std::string("ok ") + (done ? "done " : "waited ") + std::to_string(src) + " " +
         (n ? to_hex(m) : std::string("-"));
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
  std::string t;
  const size_t size = a.optional_word(&t) ? std::stoull(t) : 8;
  // Each message's first 8 bytes hold its index; the rest is zero. One
  // buffer per message: a rendezvous one stays the sender's until done.
  std::vector<std::vector<char>> bufs(count, std::vector<char>(std::max<size_t>(size, 8)));
  std::vector<lt_req_t> ids;
  bool again = false;
  for (uint64_t i = 0; i < count; ++i) {
    std::memcpy(bufs[i].data(), &i, 8);
    lt_req_t id;
    int rc = LT_send_async(e, node, port, bufs[i].data(), size, &id);
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
    // Each message says which sending thread it is from (a number no other
    // thread of this process had) and its place in that thread's sequence,
    // for recv_ordered.
    static std::atomic<uint32_t> next_thread{1};
    thread_local uint32_t me = next_thread.fetch_add(1);
    thread_local uint32_t seq = 0;
    uint64_t v = (uint64_t{me} << 32) | seq++;
    return LT_send(e, node, port, &v, sizeof(v));
  }));
}

std::string cmd_recv_ordered(lt_engine_t* e, Args& a) {
  uint32_t port = a.u32();
  uint64_t n = a.u64();
  std::map<std::pair<lt_node_t, uint32_t>, uint32_t> next;  // (source, thread) -> next seq
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t v = 0;
    lt_node_t src = 0;
    size_t len = 0;
    if (int rc = LT_recv(e, port, &v, sizeof(v), &src, &len, -1); rc) {
      return err(rc) + " at " + std::to_string(i);
    }
    uint32_t& want = next[{src, static_cast<uint32_t>(v >> 32)}];
    if (len != sizeof(v) || static_cast<uint32_t>(v) != want) {
      return "err out of order at " + std::to_string(i) + ": got " +
             std::to_string(static_cast<uint32_t>(v)) + " want " + std::to_string(want);
    }
    ++want;
  }
  return "ok " + std::to_string(next.size());
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

}  // namespace ltier_node
