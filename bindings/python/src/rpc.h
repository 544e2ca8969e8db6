// RPC handlers written in Python. They never run on the engine's progress
// thread (which must not wait for the GIL): the function id is registered in
// LITE's server-loop form, and threads of the module's own take requests with
// LT_recvRPC, call the Python function with the GIL, and answer with
// LT_replyRPC.
#pragma once

#include "core.h"

namespace ltpy {

class Dispatcher {
 public:
  /// Starts `threads` threads serving func_id (already registered with
  /// LT_regRPC_loop on `e`) by calling fn(src, request_bytes).
  Dispatcher(lt_engine_t* e, uint32_t func_id, py::function fn, int threads);
  uint32_t func_id() const { return func_id_; }
  const py::function& fn() const { return fn_; }
  /// Joins; the GIL must not be held by the caller.
  void stop();
  /// Drops the Python function; the GIL must be held.
  ~Dispatcher();

 private:
  void run();
  /// Calls the handler with the GIL and copies its reply into `reply`;
  /// returns the status to send (0, or the negative code it raised).
  int call(lt_node_t src, const char* in, size_t len, std::vector<char>& reply);
  lt_engine_t* e_;
  uint32_t func_id_;
  py::function fn_;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

/// True on a handler thread while it runs a Python handler (leave() is
/// refused there: it would join the thread it runs on).
bool in_handler();

/// The negative LT_ERR_* status a Python exception stands for: its `code`
/// when it is an ltier.Error, else LT_ERR_INTERNAL. The GIL must be held.
int status_of(const py::error_already_set& e);

}  // namespace ltpy
