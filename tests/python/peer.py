"""A peer node for the pytest suite: a separate process with its own engine.

It serves Python RPC handlers, a server-loop queue, two published LMRs
(PREFIX-lmr and PREFIX-ro; PREFIX is argv[1], default "peer") and an echo port, prints "ready <node id>", and then obeys one command per stdin
line (each answered by one stdout line):

    call NODE FUNC HEX   -> "ok HEX" (the reply) or "err ErrorClassName"
    send NODE PORT HEX   -> "ok"
    exit                 -> leaves the cluster and exits
"""

import sys
import threading
import time

import ltier

ECHO, RAISES, QUOTA, SLEEPS, SIZED = 1, 2, 3, 4, 5
LOOP = 10
ECHO_PORT, ECHO_REPLY_PORT = 1, 2


def serve_loop(q):
    while True:
        try:
            c = q.recv(timeout=0.2)
        except ltier.TimedOutError:
            continue
        except ltier.Error:  # left the cluster
            return
        if c.data == b"fail":
            c.fail(ltier.ExistsError)
        else:
            c.reply(c.data.upper())


def echo(eng):
    while True:
        try:
            src, data = eng.recv(ECHO_PORT, timeout=0.2)
        except ltier.TimedOutError:
            continue
        except ltier.Error:
            return
        eng.send(src, ECHO_REPLY_PORT, data)


def raises(src, data):
    raise ValueError("a handler bug")


def over_quota(src, data):
    raise ltier.QuotaError("no more for you")


def sleeps(src, data):
    time.sleep(float(data.decode()))
    return b"slept"


def main():
    prefix = sys.argv[1] if len(sys.argv) > 1 else "peer"  # of its published names
    eng = ltier.join()
    eng.register_rpc(ECHO, lambda src, data: data)
    eng.register_rpc(RAISES, raises)
    eng.register_rpc(QUOTA, over_quota)
    eng.register_rpc(SLEEPS, sleeps, threads=2)
    eng.register_rpc(SIZED, lambda src, data: b"x" * int(data.decode()))
    threading.Thread(target=serve_loop, args=(eng.rpc_queue(LOOP),), daemon=True).start()
    threading.Thread(target=echo, args=(eng,), daemon=True).start()
    big = eng.malloc(eng.node_id, 1 << 20, ltier.ALL)
    big.publish(prefix + "-lmr", ltier.ALL)
    ro = eng.malloc(eng.node_id, 4096, ltier.ALL)
    ro.write(0, b"read-only")
    ro.publish(prefix + "-ro", ltier.READ)
    print("ready", eng.node_id, flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd:
            continue
        if cmd[0] == "exit":
            break
        try:
            if cmd[0] == "call":
                data = bytes.fromhex(cmd[3]) if len(cmd) > 3 else b""
                reply = eng.rpc(int(cmd[1]), int(cmd[2]), data, max_reply=1 << 16)
                print("ok", reply.hex() or "-", flush=True)
            elif cmd[0] == "send":
                eng.send(int(cmd[1]), int(cmd[2]), bytes.fromhex(cmd[3]))
                print("ok", flush=True)
            else:
                print("err unknown-command", flush=True)
        except ltier.Error as e:
            print("err", type(e).__name__, flush=True)
    eng.leave()


if __name__ == "__main__":
    main()
