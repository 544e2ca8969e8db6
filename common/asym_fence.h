// Asymmetric fences between processes on one host, for the wake-up
// handshakes of shared-memory rings (a store, then a load of the other
// side's flag, on both sides: one of the two must see the other).
//
// The frequent side (a producer publishing a record, a consumer handing ring
// space back) orders its store and its load with a compiler barrier only
// (light()). The rare side (a poller about to sleep, asking for a bell)
// makes its store, then heavy(): membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED),
// which has every running thread of every process that registered for it
// pass a full memory barrier before the call returns (a thread that is not
// running passed one when it was switched out), then loads. So the
// frequent side pays no locked instruction per message, and the rare side
// pays a system call and an interrupt on the CPUs that run registered
// threads, once per sleep.
//
// available() registers the process once (MEMBARRIER_CMD_REGISTER_GLOBAL_
// EXPEDITED, Linux 4.16) and checks that heavy() works; a side may use
// light() on a ring only when it is registered and the other side said it
// calls heavy() whenever it asks for a bell (shm carries that in its
// segment and hello). Without it, both sides use a full fence, as before.
//
// Thread contract: any thread.
#pragma once

namespace lt {

class AsymFence {
 public:
  /// Registers this process for heavy() by others and checks heavy() here;
  /// the answer is computed once and kept.
  static bool available();
  /// The frequent side: a compiler barrier (the hardware order comes from
  /// the other side's heavy()). Only when available() on both sides.
  static void light() { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
  /// The rare side: a full barrier on every CPU running a registered
  /// thread. False when the system refused (the caller must then not rely
  /// on it; available() said no in that case already).
  static bool heavy();
};

}  // namespace lt
