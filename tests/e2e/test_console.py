"""The web console (GET /console, docs/CONSOLE.md): its static files and
headers (served without a key, strict Content-Security-Policy, nosniff, the
page never cached), and the console itself in a real headless browser:
tests/console/console.test.mjs drives Debian's chromium with playwright-core
(console/package-lock.json; scripts/console-setup.sh installs it) against this
real `airlockd up`: sign in, create, terminal, snapshot + rollback from the
timeline, upload, another tenant, admin view. Screenshots of each page go to
<build>/test-artifacts/console (printed). Skips (77) only when chromium cannot
be installed."""
import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import harness
from harness import AirlockTestCase, main

SRC = os.environ.get("AIRLOCK_SRC", os.path.join(os.path.dirname(__file__), "../.."))
CHROMIUM = "/usr/bin/chromium"
CSP = ("default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
       "img-src 'self' data:; font-src 'self'; connect-src 'self'; base-uri 'none'; "
       "form-action 'none'; frame-ancestors 'none'")


class ConsoleTest(AirlockTestCase):
    # host-routed port URLs, so that the ports tab has links to show
    extra_args = ("--set", "ports_domain=sbx.test")

    def test_1_static_files_and_headers(self):
        for path in ("/console", "/console/"):
            st, data, r = self.api.raw("GET", path, auth=False)
            self.assertEqual(st, 200, path)
            self.assertEqual(r.getheader("Content-Type"), "text/html; charset=utf-8")
            self.assertEqual(r.getheader("Content-Security-Policy"), CSP)
            self.assertEqual(r.getheader("X-Content-Type-Options"), "nosniff")
            self.assertEqual(r.getheader("Cache-Control"), "no-store")
            self.assertIn(b'<script type="module" src="/console/app.js">', data)
            self.assertNotIn(b"<script>", data, "no inline script")
        st, data, r = self.api.raw("GET", "/console/app.js", auth=False)
        self.assertEqual(st, 200)
        self.assertEqual(r.getheader("Content-Type"), "text/javascript; charset=utf-8")
        self.assertEqual(r.getheader("Cache-Control"), "no-cache")
        self.assertEqual(r.getheader("X-Content-Type-Options"), "nosniff")
        with open(os.path.join(SRC, "console/static/app.js"), "rb") as f:
            self.assertEqual(data, f.read(), "the binary serves the tree's app.js")
        code = re.sub(rb"(?m)^\s*//.*$", b"", data)   # comments may name them
        for api in (b"innerHTML", b"outerHTML", b"insertAdjacentHTML", b"document.write", b"eval("):
            self.assertFalse(api in code, f"app.js uses {api.decode()}")
        # the vendored xterm.js is the one the lockfile pins
        st, data, _ = self.api.raw("GET", "/console/vendor/xterm.mjs", auth=False)
        self.assertEqual(st, 200)
        with open(os.path.join(SRC, "console/node_modules/@xterm/xterm/lib/xterm.mjs"), "rb") as f:
            self.assertEqual(data, f.read(), "console/static/vendor is stale: run scripts/console-setup.sh")
        # unknown file, other methods, walking out: JSON errors
        st, data, _ = self.api.raw("GET", "/console/nope.js", auth=False)
        self.assertEqual(st, 404)
        self.assertEqual(json.loads(data)["error"]["code"], "not_found")
        st, _, r = self.api.raw("POST", "/console/app.js", b"x", auth=False)
        self.assertEqual(st, 405)
        st, _, r = self.api.raw("DELETE", "/console", auth=False)
        self.assertEqual(st, 405)
        self.assertEqual(r.getheader("Allow"), "GET")
        st, _, _ = self.api.raw("GET", "/console/../v1/tenants", auth=False)
        self.assertEqual(st, 404)
        st, _, _ = self.api.raw("GET", "/consolex", auth=False)
        self.assertEqual(st, 404)
        # the console is no way around the key: the API still wants one
        st, _, _ = self.api.raw("GET", "/v1/sandboxes", auth=False)
        self.assertEqual(st, 401)

    def test_2_in_a_browser(self):
        _, a = self.new_tenant("console-a")
        _, b = self.new_tenant("console-b")
        # kept after the test (artifacts): <build>/test-artifacts/console
        shots = os.path.abspath(os.path.join(harness.BIN, "..", "test-artifacts", "console"))
        shutil.rmtree(shots, ignore_errors=True)
        os.makedirs(shots)
        print(f"console screenshots: {shots}", flush=True)
        # a tiny root file system for the template build from the page
        tmpl = tempfile.mkdtemp(prefix="airlock-console-tmpl-")
        try:
            os.chmod(tmpl, 0o755)
            os.makedirs(os.path.join(tmpl, "bin"))
            shutil.copy("/bin/busybox", os.path.join(tmpl, "bin", "busybox"))
            os.symlink("busybox", os.path.join(tmpl, "bin", "sh"))
            env = dict(os.environ, AIRLOCK_URL=f"http://{self.server.addr}", TENANT_KEY=a.key,
                       OTHER_KEY=b.key, ADMIN_KEY=self.server.admin_key, SHOT_DIR=shots,
                       TEMPLATE_DIR=tmpl)
            r = subprocess.run(["node", os.path.join(SRC, "tests/console/console.test.mjs")],
                               env=env, capture_output=True, text=True, timeout=900)
        finally:
            shutil.rmtree(tmpl, ignore_errors=True)
        sys.stdout.write(r.stdout)
        sys.stderr.write(r.stderr)
        # the daemons' side of a failure (a refused or cut request shows in
        # the browser only as "Failed to fetch")
        self.assertEqual(r.returncode, 0, "the browser test failed:\n" + r.stderr[-3000:] +
                         "\nairlockd up's log, last lines:\n" + self.server.log()[-6000:])
        self.assertIn("console test: all passed", r.stdout)
        names = sorted(os.listdir(shots))
        self.assertGreaterEqual(len([n for n in names if n.endswith(".png")]), 10, names)


    def events(self, client, headers=None, query="", until=None, seconds=5):
        """Read GET /v1/sandboxes/events for a while (or until a data line
        satisfies until): [(id, data dict)]."""
        conn = http.client.HTTPConnection(client.host, client.port, timeout=seconds)
        out = []
        try:
            conn.request("GET", "/v1/sandboxes/events" + query,
                         headers=dict({"Authorization": "Bearer " + client.key}, **(headers or {})))
            r = conn.getresponse()
            self.assertEqual(r.status, 200)
            self.assertEqual(r.getheader("Content-Type"), "text/event-stream")
            ev_id = None
            deadline = time.time() + seconds
            while time.time() < deadline:
                try:
                    line = r.readline()
                except (socket.timeout, TimeoutError):
                    break
                if not line:
                    break
                if line.startswith(b"id: "):
                    ev_id = int(line[4:])
                elif line.startswith(b"data: "):
                    out.append((ev_id, json.loads(line[6:])))
                    if until and until(out[-1][1]):
                        break
        finally:
            conn.close()
        return out

    def test_3_event_stream(self):
        _, a = self.new_tenant("events-a")
        _, b = self.new_tenant("events-b")
        sid = a.create()["id"]
        a.call("POST", f"/v1/sandboxes/{sid}/pause")
        a.delete(sid)
        # from the start of the log: the whole life, in order, tenant A's only
        evs = self.events(a, query="?after=0", until=lambda d: d["to"] == "deleted")
        mine = [d for _, d in evs if d["sandbox"] == sid]
        self.assertEqual([d["to"] for d in mine][-1], "deleted")
        self.assertIn("paused", [d["to"] for d in mine])
        self.assertEqual({d["sandbox"] for _, d in evs}, {sid}, "only tenant A's sandboxes")
        ids = [i for i, _ in evs]
        self.assertEqual(ids, sorted(ids))
        # resume after an id: the events after it, no earlier one
        paused_id = next(i for i, d in evs if d["to"] == "paused")
        rest = self.events(a, headers={"Last-Event-ID": str(paused_id)},
                           until=lambda d: d["to"] == "deleted")
        self.assertTrue(rest and all(i > paused_id for i, _ in rest), rest)
        self.assertEqual(rest[-1][1]["to"], "deleted")
        # tenant B: nothing of A's, even from the start
        self.assertEqual(self.events(b, query="?after=0", seconds=2), [])
        # without a start: only what happens from now on
        self.assertEqual(self.events(a, seconds=2), [])
        for bad in ("x", "-1", "1e3", ""):
            st, data, _ = a.raw("GET", "/v1/sandboxes/events?after=" + bad)
            self.assertEqual(st, 400, bad)
            self.assertEqual(json.loads(data)["error"]["code"], "invalid_field")
        st, _, _ = a.raw("GET", "/v1/sandboxes/events", auth=False)
        self.assertEqual(st, 401)
        st, _, _ = a.raw("POST", "/v1/sandboxes/events")
        self.assertIn(st, (404, 405))


def prepare():
    """chromium (Debian) and the console's npm packages, installed by the
    project's scripts when missing; False when chromium cannot be had."""
    if not os.path.exists(CHROMIUM):
        subprocess.run(["sh", os.path.join(SRC, "scripts/setup-deps.sh")])
    if not os.path.exists(CHROMIUM):
        return False
    subprocess.run(["sh", os.path.join(SRC, "scripts/console-setup.sh")], check=True)
    return True


if __name__ == "__main__":
    if os.geteuid() == 0 and not prepare():
        print("skip: chromium is not installed and scripts/setup-deps.sh could not install it")
        sys.exit(77)
    main()
