"""File watches: GET /v1/sandboxes/{id}/files/watch streams what inotify in the
guest agent sees under a path (create, write, remove, rename; recursive into
new subdirectories), marks lost events with an overflow line when the client
is slower than the sandbox (a tiny max_queue), ends when the sandbox goes, and
`airlock files watch` prints the events. Runs on ns and, with
AIRLOCK_E2E_BACKEND=vm, on the vm backend."""
import http.client
import json
import os
import queue
import socket
import subprocess
import threading
import time

from harness import AirlockTestCase, ApiError, CLI, main


class Watch:
    """A watch stream read by a thread into a queue (None at its end)."""

    def __init__(self, client, sid, path, recursive=True, max_queue=None, rcvbuf=None,
                 paused=False):
        q = f"/v1/sandboxes/{sid}/files/watch?path={path}&recursive={'true' if recursive else 'false'}"
        if max_queue:
            q += f"&max_queue={max_queue}"
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        s.settimeout(600)
        s.connect((client.host, client.port))
        self.conn = http.client.HTTPConnection(client.host, client.port, timeout=600)
        self.conn.sock = s
        self.conn.request("GET", q, headers={"Authorization": "Bearer " + client.key})
        self.resp = self.conn.getresponse()
        if self.resp.status != 200:
            data = self.resp.read().decode(errors="replace")
            self.conn.close()
            raise ApiError(self.resp.status, data)
        self.q = queue.Queue()
        self.go = threading.Event()
        if not paused:
            self.go.set()
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self):
        try:
            while True:
                self.go.wait()
                line = self.resp.readline()
                if not line:
                    break
                if line.strip():
                    self.q.put(json.loads(line))
        except Exception:  # the connection closed under us: the end
            pass
        self.q.put(None)

    def next(self, timeout=60):
        return self.q.get(timeout=timeout)

    def until(self, pred, timeout=120):
        """Events up to and including the first that pred accepts."""
        got, deadline = [], time.time() + timeout
        while True:
            try:
                ev = self.next(max(0.1, deadline - time.time()))
            except queue.Empty:
                raise AssertionError(f"timed out; got {got}") from None
            if ev is None:
                raise AssertionError(f"stream ended; got {got}")
            got.append(ev)
            if pred(ev):
                return got

    def close(self):
        self.go.set()
        try:
            self.conn.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.conn.close()


def squash(events):
    """(type, path, from) tuples with repeats of one event folded (a write
    may come as several; a file created in a new directory may be reported
    by the directory's scan and by inotify)."""
    out = []
    for e in events:
        k = (e["type"], e.get("path"), e.get("from"))
        if not out or out[-1] != k:
            out.append(k)
    return out


class FilesWatchTest(AirlockTestCase):
    def new_sandbox(self):
        sid = self.api.create()["id"]
        self.addCleanup(self.api.raw, "DELETE", f"/v1/sandboxes/{sid}")
        return sid

    def sh(self, sid, script):
        code, out, err, _ = self.api.exec(sid, ["sh", "-c", script])
        self.assertEqual(code, 0, err)
        return out

    def test_events_in_order(self):
        sid = self.new_sandbox()
        self.sh(sid, "mkdir -p /tmp/w")
        w = Watch(self.api, sid, "/tmp/w")
        try:
            self.assertEqual(w.next(), {"type": "start", "path": "/tmp/w", "recursive": True})
            steps = [
                ("touch /tmp/w/a", [("create", "/tmp/w/a", None)]),
                ("echo hi >> /tmp/w/a", [("write", "/tmp/w/a", None)]),
                ("mkdir /tmp/w/d", [("create", "/tmp/w/d", None)]),
                ("echo x > /tmp/w/d/f", [("create", "/tmp/w/d/f", None),
                                         ("write", "/tmp/w/d/f", None)]),
                ("mv /tmp/w/a /tmp/w/b", [("rename", "/tmp/w/b", "/tmp/w/a")]),
                ("rm /tmp/w/b", [("remove", "/tmp/w/b", None)]),
                # a moved directory keeps being watched under its new name
                ("mv /tmp/w/d /tmp/w/e", [("rename", "/tmp/w/e", "/tmp/w/d")]),
                ("echo y > /tmp/w/e/g", [("create", "/tmp/w/e/g", None),
                                         ("write", "/tmp/w/e/g", None)]),
                ("rm -r /tmp/w/e", [("remove", "/tmp/w/e/f", None),
                                    ("remove", "/tmp/w/e/g", None),
                                    ("remove", "/tmp/w/e", None)]),
            ]
            for script, want in steps:
                self.sh(sid, script)
                last = want[-1]
                got = w.until(lambda e: (e["type"], e.get("path"), e.get("from")) == last)
                got = squash(got)
                if script.startswith("rm -r"):
                    got = sorted(got[:-1]) + got[-1:]   # readdir order
                self.assertEqual(got, want, script)
            # the dir flag
            self.sh(sid, "mkdir /tmp/w/x && rmdir /tmp/w/x && touch /tmp/w/y")
            evs = w.until(lambda e: e.get("path") == "/tmp/w/y")
            flags = [(e["type"], e["path"], e["dir"]) for e in evs]
            self.assertEqual(flags, [("create", "/tmp/w/x", True), ("remove", "/tmp/w/x", True),
                                     ("create", "/tmp/w/y", False)])
        finally:
            w.close()
        # Without recursive=true a subdirectory's contents are not watched.
        w = Watch(self.api, sid, "/tmp/w", recursive=False)
        try:
            w.next()
            self.sh(sid, "mkdir /tmp/w/n && touch /tmp/w/n/inner && touch /tmp/w/z")
            evs = squash(w.until(lambda e: e.get("path") == "/tmp/w/z"))
            self.assertEqual(evs, [("create", "/tmp/w/n", None), ("create", "/tmp/w/z", None)])
        finally:
            w.close()
        self.api.delete(sid)

    def test_overflow(self):
        sid = self.new_sandbox()
        # A client that reads nothing for a while (its socket's buffer is
        # small) and a queue of 16: the node must drop and say so. A root of
        # ~3000 bytes makes 3000 events ~9 MB of lines, more than every
        # buffer on the way holds, however slowly the sandbox makes them.
        root = "/tmp/o/" + "/".join(["o" * 200] * 15)
        self.sh(sid, f"mkdir -p {root}")
        w = Watch(self.api, sid, root, max_queue=16, rcvbuf=4096, paused=True)
        try:
            self.sh(sid, f'cd {root} && i=0; while [ $i -lt 3000 ]; do : > $i; '
                         f'i=$((i+1)); done')
            time.sleep(2)
            w.go.set()
            evs = w.until(lambda e: e["type"] == "overflow", timeout=300)
            self.assertEqual(evs[0]["type"], "start")
            # Read until the client caught up (nothing for 2 s).
            while True:
                try:
                    ev = w.next(timeout=2)
                except queue.Empty:
                    break
                self.assertIsNotNone(ev)
                evs.append(ev)
            # Fewer lines than events: they were dropped, not buffered.
            creates = [e for e in evs if e["type"] == "create"]
            self.assertLess(len(creates), 3000)
            # Events are live again.
            self.sh(sid, f"touch {root}/last")
            evs = w.until(lambda e: e.get("path") == f"{root}/last", timeout=120)
            self.assertEqual(evs, [{"type": "create", "path": f"{root}/last", "dir": False}])
        finally:
            w.close()
        self.api.delete(sid)

    def test_delete_with_stuck_client(self):
        """A client that stopped reading does not hold the sandbox's
        teardown (the node never blocks writing to it)."""
        sid = self.new_sandbox()
        # A root of ~3000 bytes makes every line that long: 3000 events are
        # ~9 MB, more than every socket buffer on the way holds.
        root = "/tmp/s/" + "/".join(["d" * 200] * 15)
        self.sh(sid, f"mkdir -p {root}")
        w = Watch(self.api, sid, root, rcvbuf=4096, paused=True)
        try:
            self.sh(sid, f'cd {root} && i=0; while [ $i -lt 3000 ]; do : > $i; '
                         f'i=$((i+1)); done')
            t0 = time.time()
            self.api.delete(sid)
            self.assertLess(time.time() - t0, 60)
        finally:
            w.close()

    def test_errors_and_end(self):
        sid = self.new_sandbox()
        base = f"/v1/sandboxes/{sid}/files/watch"
        for q, status in [("?path=/nonexistent", 404), ("?path=relative", 400), ("", 400),
                          ("?path=/tmp&recursive=maybe", 400), ("?path=/tmp&max_queue=0", 400),
                          ("?path=/tmp&max_queue=65537", 400), ("?path=/tmp&max_queue=x", 400)]:
            st, body, _ = self.api.raw("GET", base + q)
            self.assertEqual(st, status, (q, body))
            self.assertIn(b'"error"', body)
        st, _, _ = self.api.raw("POST", base + "?path=/tmp")
        self.assertEqual(st, 405)
        # Another tenant's sandbox is not there.
        _, other = self.new_tenant("watch-other")
        st, _, _ = other.raw("GET", base + "?path=/tmp")
        self.assertEqual(st, 404)
        # A watch of a single file.
        self.sh(sid, "echo 1 > /tmp/one")
        w = Watch(self.api, sid, "/tmp/one", recursive=False)
        w.next()
        self.sh(sid, "echo 2 >> /tmp/one")
        self.assertEqual(squash(w.until(lambda e: e["type"] == "write")),
                         [("write", "/tmp/one", None)])
        # The stream ends when the sandbox goes.
        self.api.delete(sid)
        deadline = time.time() + 60
        while True:
            ev = w.next(max(0.1, deadline - time.time()))
            if ev is None:
                break
        w.close()

    def test_cli(self):
        sid = self.new_sandbox()
        self.sh(sid, "mkdir -p /tmp/c")
        env = dict(os.environ, AIRLOCK_URL=f"http://{self.server.addr}",
                   AIRLOCK_API_KEY=self.server.admin_key)
        for extra, check in [([], lambda l: l == "create /tmp/c/x"),
                             (["--json"], lambda l: json.loads(l) == {
                                 "type": "create", "path": "/tmp/c/x", "dir": False})]:
            self.sh(sid, "rm -f /tmp/c/x")
            p = subprocess.Popen([CLI, "files", "watch", sid, "/tmp/c", "-r"] + extra,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                 text=True)
            try:
                first = p.stdout.readline() if extra else p.stderr.readline()
                self.assertIn("/tmp/c", first)
                self.sh(sid, "touch /tmp/c/x")
                line = p.stdout.readline().strip()
                self.assertTrue(check(line), line)
            finally:
                p.kill()
                p.wait()
                p.stdout.close()
                p.stderr.close()
        r = subprocess.run([CLI, "files", "watch", sid, "/nope"], env=env,
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 125)
        self.assertIn("not_found", r.stderr)
        self.api.delete(sid)


if __name__ == "__main__":
    main()
