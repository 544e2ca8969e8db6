// A small client of etcd's v3 API through its HTTP/JSON gateway (the
// /v3/... endpoints every etcd since 3.3 serves on its client port), over
// libcurl. Keys and values travel base64-encoded and 64-bit integers as
// decimal strings, as the gateway writes them; the helpers below hide both.
//
// Thread contract: call() may be used from any thread (each call takes a
// connection from a small pool); a WatchStream belongs to one thread, and
// only its stop() may be called from another.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/time.h"

namespace lt::proto::etcd {

using Json = nlohmann::json;

std::string b64(std::string_view bytes);
/// False for text that is not base64.
bool unb64(std::string_view text, std::string* out);
/// An int64 field of an answer ("5" or 5); 0 when absent (the gateway leaves
/// out fields that hold their default).
int64_t num(const Json& j, const char* field);
/// The end of the range holding every key that starts with `prefix`.
std::string prefix_end(std::string_view prefix);

// Request pieces (raw keys and values; base64 is applied here).
Json range_of(std::string_view key);
Json range_prefix(std::string_view prefix);
Json put_of(std::string_view key, std::string_view value, int64_t lease = 0);
Json delete_of(std::string_view key);
Json delete_prefix(std::string_view prefix);
/// A compare of a key's create/mod revision or version with `v` ("EQUAL").
Json compare_rev(std::string_view key, const char* target, int64_t v, const char* op = "EQUAL");
/// A txn: the `success` ops if every compare holds, else the `failure` ops.
Json txn(Json compares, Json success, Json failure = Json::array());

/// A key/value of an answer, decoded.
struct Kv {
  std::string key, value;
  int64_t create_rev = 0, mod_rev = 0, lease = 0;
};
bool decode_kv(const Json& j, Kv* out);
/// The kvs of a range answer (or of a txn's response_range).
std::vector<Kv> kvs_of(const Json& range_answer);
/// j[name] when j is an object that has it, else null.
const Json& field(const Json& j, const char* name);
/// Whether a txn's compares held.
bool succeeded(const Json& txn_answer);
/// The kvs of a txn's i-th response, when it was a range.
std::vector<Kv> txn_kvs(const Json& txn_answer, size_t i);

class Client {
 public:
  /// `endpoints`: comma-separated http(s)://host:port of etcd members.
  explicit Client(const std::string& endpoints);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  bool valid() const { return !endpoints_.empty(); }
  const std::string& endpoints() const { return spec_; }
  /// The endpoint that answered last (the next call and watch start there).
  std::string current() const;

  /// POSTs `body` to `path` (say "/v3/kv/range") and returns the answer. An
  /// endpoint that cannot be reached is skipped for the next. kPeerDown:
  /// no endpoint answered; kTimedOut: the deadline passed; kNotFound: etcd
  /// answered NotFound (an expired lease); kMalformed: not an answer.
  Result<Json> call(const char* path, const Json& body, Deadline d);

 private:
  void* take();
  void give(void* h);
  std::string spec_;
  std::vector<std::string> endpoints_;
  mutable std::mutex mu_;  // guards idle_ and current_
  std::vector<void*> idle_;
  size_t current_ = 0;
};

/// One streamed watch: POST /v3/watch with a create request, then every
/// message etcd pushes is handed to `on_message` until it returns false,
/// stop() is called, or the stream breaks.
class WatchStream {
 public:
  WatchStream();
  ~WatchStream();
  WatchStream(const WatchStream&) = delete;
  WatchStream& operator=(const WatchStream&) = delete;
  /// kClosed after stop(); kPeerDown when the stream could not be opened or
  /// broke; kOk when on_message ended it.
  Status run(const std::string& endpoint, const Json& create,
             const std::function<bool(const Json&)>& on_message);
  /// Any thread: ends run() (now and for every later call).
  void stop();

 private:
  void* multi_;
  std::atomic<bool> stopped_{false};
};

}  // namespace lt::proto::etcd
