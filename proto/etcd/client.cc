#include "proto/etcd/client.h"

#include <curl/curl.h>
#include <sodium.h>

#include <algorithm>
#include <cstdlib>

#include "common/log.h"

namespace lt::proto::etcd {

namespace {

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

size_t append_body(char* data, size_t size, size_t n, void* user) {
  static_cast<std::string*>(user)->append(data, size * n);
  return size * n;
}

long ms_left(Deadline d, long cap_ms) {
  uint64_t left = d.remaining_ms();
  return static_cast<long>(std::clamp<uint64_t>(left, 1, static_cast<uint64_t>(cap_ms)));
}

// A gRPC status code in an error answer, as ltier's.
Code code_of_grpc(int64_t code) {
  switch (code) {
    case 4:  // DEADLINE_EXCEEDED
      return Code::kTimedOut;
    case 5:  // NOT_FOUND (a lease that expired)
      return Code::kNotFound;
    case 3:   // INVALID_ARGUMENT
    case 11:  // OUT_OF_RANGE (a compacted revision)
      return Code::kMalformed;
    default:  // UNAVAILABLE (no leader), ...
      return Code::kPeerDown;
  }
}

std::vector<std::string> split_endpoints(const std::string& spec) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= spec.size()) {
    size_t comma = spec.find(',', at);
    if (comma == std::string::npos) comma = spec.size();
    std::string e = spec.substr(at, comma - at);
    e.erase(0, std::min(e.size(), e.find_first_not_of(" \t")));
    while (!e.empty() && (e.back() == '/' || e.back() == ' ' || e.back() == '\t')) e.pop_back();
    if (!e.empty()) {
      if (e.find("://") == std::string::npos) e = "http://" + e;
      out.push_back(e);
    }
    at = comma + 1;
  }
  return out;
}

// A JSON POST of `payload` to `url`, its answer handed to `sink`. The
// strings and the header list must outlive the transfer.
void set_post(CURL* h, const std::string& url, const std::string& payload, curl_slist* headers,
              curl_write_callback sink, void* sink_arg) {
  curl_easy_setopt(h, CURLOPT_URL, url.c_str());
  curl_easy_setopt(h, CURLOPT_POSTFIELDS, payload.c_str());
  curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, static_cast<long>(payload.size()));
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sink);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, sink_arg);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
}

}  // namespace

std::string b64(std::string_view bytes) {
  std::string out(sodium_base64_encoded_len(bytes.size(), sodium_base64_VARIANT_ORIGINAL), '\0');
  sodium_bin2base64(out.data(), out.size(), reinterpret_cast<const unsigned char*>(bytes.data()),
                    bytes.size(), sodium_base64_VARIANT_ORIGINAL);
  out.resize(out.size() - 1);  // the terminating NUL
  return out;
}

bool unb64(std::string_view text, std::string* out) {
  out->resize(text.size() / 4 * 3 + 3);
  size_t n = 0;
  if (sodium_base642bin(reinterpret_cast<unsigned char*>(out->data()), out->size(), text.data(),
                        text.size(), nullptr, &n, nullptr, sodium_base64_VARIANT_ORIGINAL) != 0) {
    return false;
  }
  out->resize(n);
  return true;
}

int64_t num(const Json& j, const char* field) {
  if (!j.is_object()) return 0;
  auto it = j.find(field);
  if (it == j.end()) return 0;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_string()) return std::strtoll(it->get_ref<const std::string&>().c_str(), nullptr, 10);
  return 0;
}

std::string prefix_end(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    auto& c = reinterpret_cast<unsigned char&>(end.back());
    if (c != 0xff) {
      ++c;
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

Json range_of(std::string_view key) { return {{"request_range", {{"key", b64(key)}}}}; }

Json range_prefix(std::string_view prefix) {
  return {{"request_range", {{"key", b64(prefix)}, {"range_end", b64(prefix_end(prefix))}}}};
}

Json put_of(std::string_view key, std::string_view value, int64_t lease) {
  Json p = {{"key", b64(key)}, {"value", b64(value)}};
  if (lease != 0) p["lease"] = std::to_string(lease);
  return {{"request_put", std::move(p)}};
}

Json delete_of(std::string_view key) { return {{"request_delete_range", {{"key", b64(key)}}}}; }

Json delete_prefix(std::string_view prefix) {
  return {{"request_delete_range", {{"key", b64(prefix)}, {"range_end", b64(prefix_end(prefix))}}}};
}

Json compare_rev(std::string_view key, const char* target, int64_t v, const char* op) {
  std::string field = target == std::string_view("CREATE") ? "create_revision"
                      : target == std::string_view("MOD")  ? "mod_revision"
                                                           : "version";
  return {{"key", b64(key)}, {"target", target}, {"result", op}, {field, std::to_string(v)}};
}

Json txn(Json compares, Json success, Json failure) {
  return {{"compare", std::move(compares)},
          {"success", std::move(success)},
          {"failure", std::move(failure)}};
}

bool decode_kv(const Json& j, Kv* out) {
  if (!j.is_object()) return false;
  auto k = j.find("key");
  if (k == j.end() || !k->is_string() || !unb64(k->get_ref<const std::string&>(), &out->key)) {
    return false;
  }
  out->value.clear();
  auto v = j.find("value");
  if (v != j.end() && (!v->is_string() || !unb64(v->get_ref<const std::string&>(), &out->value))) {
    return false;
  }
  out->create_rev = num(j, "create_revision");
  out->mod_rev = num(j, "mod_revision");
  out->lease = num(j, "lease");
  return true;
}

std::vector<Kv> kvs_of(const Json& range_answer) {
  std::vector<Kv> out;
  if (!range_answer.is_object()) return out;
  auto it = range_answer.find("kvs");
  if (it == range_answer.end() || !it->is_array()) return out;
  for (const Json& e : *it) {
    Kv kv;
    if (decode_kv(e, &kv)) out.push_back(std::move(kv));
  }
  return out;
}

const Json& field(const Json& j, const char* name) {
  static const Json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(name);
  return it == j.end() ? kNull : *it;
}

bool succeeded(const Json& txn_answer) {
  const Json& s = field(txn_answer, "succeeded");
  return s.is_boolean() && s.get<bool>();
}

std::vector<Kv> txn_kvs(const Json& txn_answer, size_t i) {
  const Json& rs = field(txn_answer, "responses");
  if (!rs.is_array() || i >= rs.size()) return {};
  return kvs_of(field(rs[i], "response_range"));
}

Client::Client(const std::string& endpoints) : spec_(endpoints) {
  global_init();
  endpoints_ = split_endpoints(endpoints);
}

Client::~Client() {
  for (void* h : idle_) curl_easy_cleanup(static_cast<CURL*>(h));
}

std::string Client::current() const {
  std::lock_guard<std::mutex> g(mu_);
  return endpoints_.empty() ? std::string() : endpoints_[current_ % endpoints_.size()];
}

void* Client::take() {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (!idle_.empty()) {
      void* h = idle_.back();
      idle_.pop_back();
      return h;
    }
  }
  return curl_easy_init();
}

void Client::give(void* h) {
  std::lock_guard<std::mutex> g(mu_);
  if (idle_.size() < 8) {
    idle_.push_back(h);
    return;
  }
  curl_easy_cleanup(static_cast<CURL*>(h));
}

Result<Json> Client::call(const char* path, const Json& body, Deadline d) {
  if (endpoints_.empty()) return Code::kInvalidArg;
  CURL* h = static_cast<CURL*>(take());
  if (h == nullptr) return Code::kNoMemory;
  const std::string payload = body.dump();
  curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
  size_t first;
  {
    std::lock_guard<std::mutex> g(mu_);
    first = current_;
  }
  Result<Json> out = Code::kPeerDown;
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    if (d.expired()) {
      out = Code::kTimedOut;
      break;
    }
    size_t at = (first + i) % endpoints_.size();
    std::string url = endpoints_[at] + path, answer;
    curl_easy_reset(h);
    set_post(h, url, payload, headers, append_body, &answer);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, ms_left(d, 60000));
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, ms_left(d, 1000));
    CURLcode rc = curl_easy_perform(h);
    if (rc == CURLE_SEND_ERROR || rc == CURLE_RECV_ERROR || rc == CURLE_GOT_NOTHING) {
      // A kept connection that the server closed (etcd restarted): once
      // more on a fresh one before calling the endpoint down.
      LT_DEBUG("etcd %s: %s; again on a fresh connection", url.c_str(), curl_easy_strerror(rc));
      curl_easy_setopt(h, CURLOPT_FRESH_CONNECT, 1L);
      curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, ms_left(d, 60000));
      curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, ms_left(d, 1000));
      answer.clear();
      rc = curl_easy_perform(h);
    }
    if (rc != CURLE_OK) {
      LT_DEBUG("etcd %s: %s", url.c_str(), curl_easy_strerror(rc));
      // curl's clock and the deadline's may differ by a little: a timeout
      // within 2 ms of the deadline is the deadline.
      const bool deadline = d.remaining_ns() < 2'000'000;
      out = rc == CURLE_OPERATION_TIMEDOUT && deadline ? Code::kTimedOut : Code::kPeerDown;
      continue;  // the next endpoint
    }
    Json j = Json::parse(answer, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      LT_WARN("etcd %s: an answer that is not JSON", url.c_str());
      out = Code::kMalformed;
      break;
    }
    {
      std::lock_guard<std::mutex> g(mu_);
      current_ = at;
    }
    if (j.contains("error")) {
      auto msg = j.find("message");
      LT_DEBUG("etcd %s: %s", url.c_str(),
               msg != j.end() && msg->is_string() ? msg->get_ref<const std::string&>().c_str()
                                                  : "error");
      out = code_of_grpc(num(j, "code"));
      if (out.status().code() == Code::kPeerDown) continue;  // no leader there: try another
      break;
    }
    out = std::move(j);
    break;
  }
  curl_slist_free_all(headers);
  give(h);
  return out;
}

namespace {

struct StreamState {
  std::string buf;
  const std::function<bool(const Json&)>* on_message;
  bool ended = false;  // on_message said stop
};

size_t on_stream(char* data, size_t size, size_t n, void* user) {
  auto* s = static_cast<StreamState*>(user);
  s->buf.append(data, size * n);
  size_t nl;
  while ((nl = s->buf.find('\n')) != std::string::npos) {
    Json j = Json::parse(std::string_view(s->buf).substr(0, nl), nullptr, false);
    s->buf.erase(0, nl + 1);
    if (j.is_discarded()) continue;
    if (!(*s->on_message)(j)) {
      s->ended = true;
      return 0;  // aborts the transfer
    }
  }
  return size * n;
}

}  // namespace

WatchStream::WatchStream() {
  global_init();
  multi_ = curl_multi_init();
}

WatchStream::~WatchStream() { curl_multi_cleanup(static_cast<CURLM*>(multi_)); }

void WatchStream::stop() {
  stopped_.store(true, std::memory_order_release);
  curl_multi_wakeup(static_cast<CURLM*>(multi_));
}

Status WatchStream::run(const std::string& endpoint, const Json& create,
                        const std::function<bool(const Json&)>& on_message) {
  if (stopped_.load(std::memory_order_acquire)) return Code::kClosed;
  CURLM* m = static_cast<CURLM*>(multi_);
  CURL* h = curl_easy_init();
  if (h == nullptr) return Code::kNoMemory;
  const std::string url = endpoint + "/v3/watch", payload = create.dump();
  curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
  StreamState st{{}, &on_message};
  set_post(h, url, payload, headers, on_stream, &st);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 1000L);
  // A host that vanishes without closing the stream is noticed by TCP
  // keepalive within about 10 s.
  curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(h, CURLOPT_TCP_KEEPIDLE, 4L);
  curl_easy_setopt(h, CURLOPT_TCP_KEEPINTVL, 2L);
  curl_multi_add_handle(m, h);
  Status out = Code::kPeerDown;
  for (;;) {
    int running = 0;
    curl_multi_perform(m, &running);
    if (running == 0) break;
    if (stopped_.load(std::memory_order_acquire)) {
      out = Code::kClosed;
      break;
    }
    curl_multi_poll(m, nullptr, 0, 1000, nullptr);
    if (stopped_.load(std::memory_order_acquire)) {
      out = Code::kClosed;
      break;
    }
  }
  if (st.ended) out = Status::ok();
  curl_multi_remove_handle(m, h);
  curl_easy_cleanup(h);
  curl_slist_free_all(headers);
  return out;
}

}  // namespace lt::proto::etcd
