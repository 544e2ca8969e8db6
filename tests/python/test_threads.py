"""The GIL is released during blocking calls; locks and barriers across
threads."""

import threading
import time

import ltier


def test_other_python_threads_run_during_a_blocking_call(eng):
    count = 0
    stop = False

    def spin():
        nonlocal count
        while not stop:
            count += 1

    t = threading.Thread(target=spin)
    t.start()
    time.sleep(0.05)
    before = count
    try:
        eng.recv(55, timeout=0.5)
    except ltier.TimedOutError:
        pass
    during = count - before
    stop = True
    t.join()
    # With the GIL held for 0.5 s the spinning thread could not count at all.
    assert during > 10000


def test_threads_share_one_engine(eng, peer):
    lmr = eng.malloc(peer.node, 8 * 8, ltier.ALL)
    errors = []

    def work(i):
        try:
            for _ in range(200):
                lmr.fetch_add(8 * (i % 2), 1)
                assert eng.rpc(peer.node, 1, bytes([i])) == bytes([i])
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert lmr.fetch_add(0, 0) + lmr.fetch_add(8, 0) == 800


def test_locks_exclude_and_barriers_meet(eng):
    inside = []
    order = []

    def worker(i):
        with eng.lock("pytest-lock", timeout=10):
            inside.append(i)
            assert len(inside) == 1
            time.sleep(0.01)
            inside.remove(i)
        eng.barrier("pytest-barrier", 3, timeout=10)
        order.append(i)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(order) == [0, 1, 2]
    g = eng.lock("pytest-lock2")
    g.release()
    g.release()  # idempotent
    with eng.lock("pytest-lock2"):
        pass
