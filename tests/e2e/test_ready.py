"""Ready means ready: `airlockd up` prints "airlock is up" and tells systemd
READY=1 only once every role answers, never because a socket file exists.

A killed node leaves DATA/run/node.sock behind, a file that refuses every
connection. The test puts such a file there (bound, then closed) before
`up` starts, and holds the new node just before it listens (the fault point
node.before_listen, src/lib/fault.h). While it is held, neither the line
nor READY=1 (read from a NOTIFY_SOCKET of the test's own) may come; once it
is let go, both come, and at READY=1 the node answers a request at once.
Then kill -9 the node with the hold armed again: the supervisor restarts it
and says it is back only once the new node answers."""
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
import http.client
import json
import unittest

from harness import Server, main, stop_and_check

HOLD = "node.before_listen"


class UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path, timeout=5):
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(self.path)
        except OSError:
            s.close()
            raise
        self.sock = s


def node_answers(sock_path):
    """The status of GET /internal/ready on node.sock (as root), or the error."""
    c = UnixHTTP(sock_path)
    try:
        c.request("GET", "/internal/ready")
        return c.getresponse().status
    except OSError as e:
        return e
    finally:
        c.close()


def stale_socket(path):
    """A socket file nobody listens on: what a killed server leaves."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.close()


class ReadyTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="airlock-ready-")
        os.chmod(self.tmp, 0o755)   # the node (user airlock) looks inside
        self.faults = os.path.join(self.tmp, "faults")
        os.mkdir(self.faults)
        os.chmod(self.faults, 0o777)   # the node (user airlock) takes the file
        # systemd's side of Type=notify: each datagram with when it came
        self.notify_path = os.path.join(self.tmp, "notify.sock")
        self.ns = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.ns.bind(self.notify_path)
        os.chmod(self.notify_path, 0o777)
        self.notes = []
        self.node_at_ready = None
        self.reader = threading.Thread(target=self.read_notify, daemon=True)
        self.reader.start()
        self.server = Server("busybox", env={"AIRLOCK_FAULT_DIR": self.faults,
                                             "NOTIFY_SOCKET": self.notify_path})
        self.sock = os.path.join(self.server.dir, "run", "node.sock")

    def read_notify(self):
        while True:
            try:
                msg = self.ns.recv(4096).decode()
            except OSError:
                return
            if "READY=1" in msg and self.node_at_ready is None:
                # right away, as systemd would start what comes after us
                self.node_at_ready = node_answers(self.sock)
            self.notes.append((time.time(), msg))

    def tearDown(self):
        try:
            stop_and_check(self.server)
        finally:
            self.ns.close()
            shutil.rmtree(self.tmp, ignore_errors=True)

    def arm_hold(self):
        with open(os.path.join(self.faults, HOLD), "w") as f:
            f.write("hold")

    def wait_held(self, timeout=120):
        held = os.path.join(self.faults, HOLD + ".held")
        deadline = time.time() + timeout
        while time.time() < deadline:
            if os.path.exists(held):
                with open(held) as f:
                    return held, int(f.read())
            if self.server.proc and self.server.proc.poll() is not None:
                self.fail("airlockd up exited:\n" + self.server.log())
            time.sleep(0.02)
        self.fail("the node never reached " + HOLD + ":\n" + self.server.log())

    def log_has(self, text):
        return text in self.server.log()

    def test_stale_socket_is_not_ready(self):
        os.makedirs(os.path.dirname(self.sock), exist_ok=True)
        stale_socket(self.sock)
        self.assertIsInstance(node_answers(self.sock), ConnectionRefusedError)
        self.arm_hold()
        self.server.start(timeout=120, until=b"fault point " + HOLD.encode() + b": held")
        held, pid = self.wait_held()

        # The node is held before it listens; the stale file is still there.
        # Everything else runs: an `up` that trusted the file would be up by
        # now (api started, templates tried, READY=1 sent): give it 5 s.
        time.sleep(5)
        self.assertTrue(os.path.exists(self.sock))
        self.assertIsInstance(node_answers(self.sock), ConnectionRefusedError)
        self.assertFalse(self.log_has("airlock is up"),
                         "up while the node was not listening:\n" + self.server.log())
        self.assertEqual([m for _, m in self.notes if "READY=1" in m], [],
                         "READY=1 while the node was not listening")

        released = time.time()
        os.unlink(held)
        deadline = time.time() + 600
        while time.time() < deadline and not any("READY=1" in m for _, m in self.notes):
            self.assertIsNone(self.server.proc.poll(), self.server.log())
            time.sleep(0.05)
        ready = [t for t, m in self.notes if "READY=1" in m]
        self.assertTrue(ready, "no READY=1 after the node was let go:\n" + self.server.log())
        self.assertGreater(ready[0], released)
        # at READY=1 the node answered (200: all up; 503 would name a part)
        self.assertEqual(self.node_at_ready, 200, self.server.log())
        self.assertTrue(self.log_has("airlock is up"), self.server.log())
        self.assertFalse(self.log_has("templates: connect"), self.server.log())
        with open(os.path.join(self.server.dir, "cli.json")) as f:
            key = json.load(f)["api_key"]
        st, body, _ = self.server.client(key).raw("GET", "/v1/ready")
        self.assertEqual(st, 200, body)

        # kill -9 the node, the hold armed again: the supervisor restarts
        # it (the killed node's socket file stays behind) and says it is
        # back only once the new one answers.
        self.arm_hold()
        old = self.server.pid_of("node")
        os.kill(old, signal.SIGKILL)
        held, pid = self.wait_held(timeout=60)
        self.assertNotEqual(pid, old)
        time.sleep(3)
        self.assertIsInstance(node_answers(self.sock), ConnectionRefusedError)
        back = f"node (pid {pid}) answers again"
        self.assertFalse(self.log_has(back), self.server.log())
        os.unlink(held)
        deadline = time.time() + 60
        while time.time() < deadline and not self.log_has(back):
            time.sleep(0.02)
        self.assertTrue(self.log_has(back), self.server.log())
        self.assertEqual(node_answers(self.sock), 200)
        # systemd was told READY=1 once, at the start
        self.assertEqual(len([m for _, m in self.notes if "READY=1" in m]), 1, self.notes)


if __name__ == "__main__":
    main()
