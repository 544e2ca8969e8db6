"""A real cluster for the Python tests: ltier-manager from the build tree and
peer processes (peer.py) with engines of their own."""

import os
import select
import signal
import subprocess
import sys
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("LTIER_BUILD_DIR", os.path.join(HERE, "..", "..", "build"))
SECRET = "pytest-secret"


def _read_line(proc, timeout):
    """One stdout line of proc within timeout seconds, or fails the test."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r, _, _ = select.select([proc.stdout], [], [], deadline - time.monotonic())
        if r:
            line = proc.stdout.readline()
            if not line:
                pytest.fail(f"process {proc.pid} exited (status {proc.poll()})")
            return line.strip()
    pytest.fail(f"process {proc.pid} gave no answer within {timeout} s")


@pytest.fixture(scope="session")
def manager():
    port_file = tempfile.mktemp(prefix="ltier-pytest-")
    proc = subprocess.Popen([os.path.join(BUILD, "tools", "ltier-manager"), "--listen",
                             "127.0.0.1:0", "--secret", SECRET, "--port-file", port_file,
                             "--down-after-ms", "1000"])
    for _ in range(200):
        if os.path.exists(port_file) and os.path.getsize(port_file) > 0:
            break
        time.sleep(0.02)
    else:
        proc.kill()
        pytest.fail("ltier-manager did not start")
    with open(port_file) as f:
        address = f.read().strip()
    os.unlink(port_file)
    yield address
    proc.terminate()
    proc.wait(10)


@pytest.fixture(scope="session")
def cluster_env(manager):
    env = dict(os.environ)
    env.update(LTIER_MANAGER=manager, LTIER_SECRET=SECRET)
    return env


class Peer:
    """peer.py in its own process."""

    def __init__(self, env, prefix="peer"):
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "peer.py"), prefix], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        ready = _read_line(self.proc, 30)
        assert ready.startswith("ready "), ready
        self.node = int(ready.split()[1])

    def cmd(self, line, timeout=30):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return _read_line(self.proc, timeout)

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("exit\n")
                self.proc.stdin.flush()
                self.proc.wait(15)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(10)


@pytest.fixture(scope="session")
def peer(cluster_env):
    p = Peer(cluster_env)
    yield p
    p.close()


@pytest.fixture
def new_peer(cluster_env):
    """A peer of the test's own, for tests that kill it."""
    peers = []

    def make():
        peers.append(Peer(cluster_env, f"peer{len(peers)}-{os.getpid()}-{time.monotonic_ns()}"))
        return peers[-1]

    yield make
    for p in peers:
        p.close()


@pytest.fixture
def eng(manager):
    import ltier

    with ltier.join(manager=manager, secret=SECRET) as e:
        yield e
