"""Administration through the CLI and the API against a real server: keys
listed and revoked (refused at once, on open keep-alive connections too; the
last admin key kept), tenants deleted (not while they own sandboxes), and
what a tenant sees of templates (no host paths). And the CLI's own parts:
the config file fallback, bash completion, the man page, and the progress
line on a terminal (against a stub API that answers slowly)."""
import hashlib
import http.client
import http.server
import json
import os
import pty
import re
import shlex
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import unittest

import harness
from harness import CLI, AirlockTestCase, Client, main


class UnixConn(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost", timeout=120)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(120)
        self.sock.connect(self.path)


class CliAdminTest(AirlockTestCase):
    def cli(self, *args, key=None, check=True):
        env = dict(os.environ)
        env.pop("AIRLOCK_URL", None)
        env.pop("AIRLOCK_API_KEY", None)
        if key:
            env["AIRLOCK_API_KEY"] = key
        r = subprocess.run([CLI, "--config", os.path.join(self.server.dir, "cli.json")]
                           + list(args), capture_output=True, env=env, timeout=120)
        if check and r.returncode != 0:
            self.fail(f"airlock {args} -> {r.returncode}: {r.stderr.decode()}")
        return r

    def keepalive(self, key):
        """A connection kept open, and a GET on it with key: its status."""
        host, port = self.server.addr.rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=60)

        def get(path="/v1/sandboxes"):
            conn.request("GET", path, headers={"Authorization": "Bearer " + key})
            r = conn.getresponse()
            r.read()
            return r.status
        return conn, get

    def test_key_ls_and_rm(self):
        t = self.api.call("POST", "/v1/tenants", {"name": "ka-tenant"})
        key = self.cli("key", "create", "--tenant", "ka-tenant", "--name", "ci").stdout.decode().strip()
        self.assertTrue(key.startswith("al_"))
        out = self.cli("key", "ls", "--tenant", "ka-tenant").stdout.decode()
        lines = out.splitlines()
        self.assertEqual(lines[0].split(), ["ID", "NAME", "TENANT", "ADMIN", "CREATED"])
        self.assertEqual(len(lines), 2, out)
        kid, name, tenant, admin = lines[1].split()[:4]
        self.assertEqual((name, tenant, admin), ("ci", t["id"], "false"))
        self.assertNotIn(key, out)
        # --json: the documented fields, never the key or its hash
        listed = json.loads(self.cli("--json", "key", "ls").stdout)["keys"]
        mine = [k for k in listed if k["id"] == kid]
        self.assertEqual(len(mine), 1)
        self.assertEqual(set(mine[0]), {"id", "name", "tenant", "admin", "created_at"})
        hashes = [h for (h,) in self.db_rows("SELECT hash FROM api_keys")]
        text = json.dumps(listed)
        self.assertFalse([h for h in hashes if h in text])
        self.assertNotIn(key, text)
        # a tenant key cannot list keys
        r = self.cli("key", "ls", key=key, check=False)
        self.assertEqual(r.returncode, 126)

        # revoked: refused on the very next request of an open connection,
        # well inside the 5 s the lookup cache would otherwise keep it
        conn, get = self.keepalive(key)
        try:
            self.assertEqual(get(), 200)
            self.assertEqual(get(), 200)   # now cached
            t0 = time.monotonic()
            self.cli("key", "rm", kid)
            self.assertEqual(get(), 401)
            self.assertLess(time.monotonic() - t0, 4.0)
        finally:
            conn.close()
        self.assertEqual(Client(self.server.addr, key).raw("GET", "/v1/sandboxes")[0], 401)
        out = self.cli("key", "ls", "--tenant", t["id"]).stdout.decode()
        self.assertNotIn(kid, out)
        # again, and an unknown one: 404, exit 125
        r = self.cli("key", "rm", kid, check=False)
        self.assertEqual(r.returncode, 125)
        self.assertIn(b"(not_found)", r.stderr)
        r = self.cli("key", "ls", "--tenant", "nobody-here", check=False)
        self.assertEqual(r.returncode, 125)
        self.assertIn(b"(not_found)", r.stderr)

    def test_last_admin_key_kept(self):
        own = self.db_rows("SELECT id FROM api_keys WHERE hash = ?",
                           hashlib.sha256(self.server.admin_key.encode()).hexdigest())[0][0]
        # a second admin key can revoke itself while another remains
        k2 = self.api.call("POST", "/v1/keys", {"tenant": "admin", "admin": True})
        self.cli("key", "rm", k2["id"], key=k2["key"])
        self.assertEqual(Client(self.server.addr, k2["key"]).raw("GET", "/v1/keys")[0], 401)
        # every other admin key goes; the last one, in use, is refused
        for k in self.api.call("GET", "/v1/keys")["keys"]:
            if k["admin"] and k["id"] != own:
                self.api.call("DELETE", f"/v1/keys/{k['id']}", expect=(204,))
        left = [k["id"] for k in self.api.call("GET", "/v1/keys")["keys"] if k["admin"]]
        self.assertEqual(left, [own])
        r = self.cli("key", "rm", own, check=False)
        self.assertEqual(r.returncode, 125)
        self.assertIn(b"last admin key", r.stderr)
        self.assertIn(b"(conflict)", r.stderr)
        self.assertEqual(self.api.raw("GET", "/v1/keys")[0], 200)

    def test_tenant_rm(self):
        t, tc = self.new_tenant("gone-tenant")
        self.api.call("PUT", f"/v1/tenants/{t['id']}/quota", {"sandboxes": 5})
        cred = tc.call("POST", "/v1/credentials",
                       {"name": "c1", "value": "s3cret", "hosts": ["example.com"],
                        "inject": {"type": "header"}})
        sid = tc.create()["id"]
        # suspended (into the data dir's object store): still the tenant's
        st, body, _ = tc.raw("POST", f"/v1/sandboxes/{sid}/suspend", {})
        if st != 501:   # 501: this backend cannot suspend; a running one it is
            self.assertEqual(st, 200, body)
            self.assertEqual(json.loads(body)["state"], "suspended")
        r = self.cli("tenant", "rm", "gone-tenant", check=False)
        self.assertEqual(r.returncode, 125)
        self.assertIn(b"(conflict)", r.stderr)
        self.assertIn(b"1 sandbox", r.stderr)
        self.assertEqual(tc.raw("GET", "/v1/sandboxes")[0], 200)
        tc.delete(sid)
        deadline = time.time() + 60
        while self.db_rows("SELECT observed FROM sandboxes WHERE id = ?", sid)[0][0] != "deleted":
            self.assertLess(time.time(), deadline, "sandbox not deleted")
            time.sleep(0.1)
        conn, get = self.keepalive(tc.key)
        try:
            self.assertEqual(get(), 200)
            self.cli("tenant", "rm", "gone-tenant")
            self.assertEqual(get(), 401)
        finally:
            conn.close()
        for q in ("SELECT count(*) FROM tenants WHERE id = ?",
                  "SELECT count(*) FROM api_keys WHERE tenant_id = ?",
                  "SELECT count(*) FROM credentials WHERE tenant_id = ?",
                  "SELECT count(*) FROM tenant_quotas WHERE tenant_id = ?"):
            self.assertEqual(self.db_rows(q, t["id"])[0][0], 0, q)
        self.assertEqual(self.db_rows("SELECT count(*) FROM vault_secrets WHERE ref LIKE ?",
                                      cred["id"] + "%")[0][0], 0)
        names = [x["name"] for x in self.api.call("GET", "/v1/tenants")["tenants"]]
        self.assertNotIn("gone-tenant", names)
        # a create that was on its way when the tenant went (here: sent to
        # the node with the gone tenant's id) makes no sandbox
        c = UnixConn(os.path.join(self.server.dir, "run", "node.sock"))
        try:
            c.request("POST", "/v1/sandboxes", body=json.dumps({"template": "busybox"}),
                      headers={"X-Airlock-Tenant": t["id"], "Content-Type": "application/json"})
            r = c.getresponse()
            body = r.read()
        finally:
            c.close()
        self.assertEqual(r.status, 403, body)
        self.assertIn(b"no longer exists", body)
        self.assertEqual(self.db_rows("SELECT count(*) FROM sandboxes WHERE tenant_id = ? AND"
                                      " observed <> 'deleted'", t["id"])[0][0], 0)
        r = self.cli("tenant", "rm", "gone-tenant", check=False)
        self.assertEqual(r.returncode, 125)
        self.assertIn(b"(not_found)", r.stderr)
        # the tenant of the key in use stays
        r = self.cli("tenant", "rm", "admin", check=False)
        self.assertEqual(r.returncode, 125)
        self.assertIn(b"(conflict)", r.stderr)
        # a tenant cannot delete tenants
        _, tc2 = self.new_tenant("other-tenant")
        self.assertEqual(tc2.raw("DELETE", "/v1/tenants/admin")[0], 403)

    def test_template_source_hidden_from_tenants(self):
        tmp = tempfile.mkdtemp(prefix="al-src-secret-")
        try:
            os.chmod(tmp, 0o755)
            os.makedirs(os.path.join(tmp, "bin"))
            shutil.copy("/bin/busybox", os.path.join(tmp, "bin", "busybox"))
            os.symlink("busybox", os.path.join(tmp, "bin", "sh"))
            self.cli("template", "build", "hostpath", "--from-dir", tmp)
        finally:
            shutil.rmtree(tmp)
        _, tc = self.new_tenant("tmpl-viewer")
        admin_view = {x["name"]: x for x in self.api.call("GET", "/v1/templates")["templates"]}
        self.assertIn(tmp, admin_view["hostpath"]["source"])
        seen = tc.raw("GET", "/v1/templates")[1].decode()
        self.assertNotIn(tmp, seen)
        self.assertNotIn("al-src-secret", seen)
        tenant_view = {x["name"]: x for x in json.loads(seen)["templates"]}
        kind = admin_view["hostpath"]["source"].split(":")[0]
        self.assertEqual(tenant_view["hostpath"]["source"], kind)
        self.assertNotIn("/", kind)
        # through the CLI with the tenant's key too
        out = self.cli("template", "ls", key=tc.key).stdout.decode()
        self.assertIn("hostpath", out)
        self.assertNotIn(tmp, out)
        self.api.call("DELETE", "/v1/templates/hostpath")

    def test_config_fallback(self):
        """No --config, no $AIRLOCK_CONFIG: $XDG_CONFIG_HOME/airlock/config.json,
        else ~/.config/airlock/config.json, before /var/lib/airlock/cli.json."""
        top = tempfile.mkdtemp(prefix="al-cfg-")
        try:
            def write(base, key):
                os.makedirs(os.path.join(base, "airlock"))
                with open(os.path.join(base, "airlock", "config.json"), "w") as f:
                    json.dump({"url": f"http://{self.server.addr}", "api_key": key}, f)
            home, xdg = os.path.join(top, "home"), os.path.join(top, "xdg")
            write(os.path.join(home, ".config"), self.server.admin_key)
            write(xdg, "al_" + "0" * 32)
            env = {k: v for k, v in os.environ.items()
                   if not k.startswith("AIRLOCK_") and k != "XDG_CONFIG_HOME"}
            env["HOME"] = home

            def run(**extra):
                return subprocess.run([CLI, "key", "ls"], capture_output=True, timeout=60,
                                      env=dict(env, **extra))
            r = run()
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn(b"ADMIN", r.stdout)
            r = run(XDG_CONFIG_HOME=xdg)          # preferred over ~/.config: its key is bad
            self.assertEqual(r.returncode, 126, r.stderr)
            r = run(XDG_CONFIG_HOME=xdg,          # $AIRLOCK_CONFIG before both
                    AIRLOCK_CONFIG=os.path.join(home, ".config", "airlock", "config.json"))
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(os.path.join(xdg, "airlock", "config.json"), "w") as f:
                f.write("not json")
            r = run(XDG_CONFIG_HOME=xdg)          # found but broken: said, not skipped
            self.assertEqual(r.returncode, 125)
            self.assertIn(b"(bad_config)", r.stderr)
            self.assertIn(xdg.encode(), r.stderr)
        finally:
            shutil.rmtree(top)

    def test_bash_completion(self):
        script = subprocess.run([CLI, "completion", "bash"], capture_output=True, check=True,
                                timeout=30).stdout
        with open(os.path.join(harness.SRC, "scripts", "airlock.bash"), "rb") as f:
            self.assertEqual(f.read(), script, "scripts/airlock.bash is not what "
                             "`airlock completion bash` prints: regenerate it")

        def complete(*words):
            """COMPREPLY for the command line `airlock WORDS` (the last one being typed)."""
            words = ["airlock"] + list(words)
            arr = " ".join(shlex.quote(w) for w in words)
            prog = (f"source {shlex.quote(os.path.join(harness.SRC, 'scripts', 'airlock.bash'))}\n"
                    f"COMP_WORDS=({arr}); COMP_CWORD={len(words) - 1}\n"
                    "_airlock; printf '%s\\n' \"${COMPREPLY[@]}\"\n"
                    "complete -p airlock\n")
            out = subprocess.run(["bash", "--norc", "--noprofile", "-c", prog],
                                 capture_output=True, text=True, check=True, timeout=30).stdout
            lines = out.splitlines()
            self.assertEqual(lines[-1], "complete -o default -F _airlock airlock")
            return sorted(l for l in lines[:-1] if l)
        self.assertEqual(complete("sn"), ["snapshot"])
        self.assertEqual(complete("te"), ["template", "tenant"])
        self.assertEqual(complete("key", ""), ["create", "ls", "rm"])
        self.assertEqual(complete("--json", "tenant", "r"), ["rm"])
        self.assertEqual(complete("--config", "/x", "key", "create", "--t"), ["--tenant"])
        self.assertEqual(complete("exec", "-"),
                         sorted(["-i", "-t", "--env", "--cwd", "--user", "--timeout", "--json",
                                 "--config", "--url", "--cacert", "--help"]))
        self.assertEqual(complete("co"), ["code-context", "completion", "connect", "console"])

    def test_man_page(self):
        page = subprocess.run([CLI, "help", "--man"], capture_output=True, check=True,
                              timeout=30).stdout
        # the build made the same page
        with open(os.path.join(harness.BIN, "..", "docs", "airlock.1"), "rb") as f:
            self.assertEqual(f.read(), page)
        with tempfile.NamedTemporaryFile(suffix=".1") as f:
            f.write(page)
            f.flush()
            if shutil.which("man"):
                r = subprocess.run(["man", "--warnings", "-l", f.name], capture_output=True,
                                   env=dict(os.environ, MANWIDTH="100", MANPAGER="cat",
                                            LC_ALL="C.UTF-8"), timeout=60)
            else:
                r = subprocess.run(["groff", "-man", "-Tutf8", "-ww", f.name],
                                   capture_output=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stderr, b"", "roff warnings")
        text = re.sub(r".\x08", "", r.stdout.decode())
        self.assertIn("AIRLOCK(1)", text)
        for line in ("key rm ID...", "tenant rm T...", "completion bash",
                     "--config FILE", "~/.config/airlock/config.json"):
            self.assertIn(line, text)
        # every verb of the table is in it
        for verb in re.findall(r"(?m)^        ([a-z-]+)\) subs=",
                               subprocess.run([CLI, "completion", "bash"], capture_output=True,
                                              text=True).stdout):
            if verb not in ("list", "delete", "resume"):   # aliases, shared lines
                self.assertRegex(text, rf"(?m)^ +{re.escape(verb)}\b", verb)


class StubApi(http.server.BaseHTTPRequestHandler):
    """Answers as the API would, slowly: fork after 1.2 s, a template build
    streaming three progress lines 0.5 s apart."""
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path.endswith("/fork"):
            time.sleep(1.2)
            body = json.dumps({"sandboxes": [{"id": "sb-kid1"}, {"id": "sb-kid2"}]}).encode()
            self.send_response(201)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        events = [{"event": "progress", "line": f"step {i} of 3"} for i in (1, 2, 3)]
        events.append({"event": "done", "template": {"name": "slow", "version": 1}})
        for ev in events:
            data = (json.dumps(ev) + "\n").encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
            time.sleep(0.5)
        self.wfile.write(b"0\r\n\r\n")


class ProgressTest(unittest.TestCase):
    """A progress line on stderr when it is a terminal, nothing otherwise."""

    @classmethod
    def setUpClass(cls):
        cls.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), StubApi)
        cls.thread = threading.Thread(target=cls.httpd.serve_forever, daemon=True)
        cls.thread.start()
        cls.url = f"http://127.0.0.1:{cls.httpd.server_address[1]}"

    @classmethod
    def tearDownClass(cls):
        cls.httpd.shutdown()
        cls.httpd.server_close()

    def run_cli(self, args, tty):
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_")}
        env.update(AIRLOCK_URL=self.url, AIRLOCK_API_KEY="al_" + "0" * 32, HOME="/nonexistent")
        if not tty:
            r = subprocess.run([CLI] + args, capture_output=True, env=env, timeout=60)
            return r.returncode, r.stdout, r.stderr
        master, slave = pty.openpty()
        try:
            p = subprocess.Popen([CLI] + args, stdout=subprocess.PIPE, stderr=slave, env=env)
            os.close(slave)
            slave = None
            err = b""
            while True:
                try:
                    d = os.read(master, 4096)
                except OSError:   # EIO: the other side closed
                    break
                if not d:
                    break
                err += d
            out = p.stdout.read()
            p.stdout.close()
            return p.wait(timeout=60), out, err
        finally:
            os.close(master)
            if slave is not None:
                os.close(slave)

    def test_fork_progress_on_a_terminal_only(self):
        code, out, err = self.run_cli(["fork", "sb-parent", "--count", "2"], tty=True)
        self.assertEqual(code, 0, err)
        self.assertEqual(out, b"sb-kid1\nsb-kid2\n")
        # the children done of 2: the stub has no GET of the parent to
        # poll, so 0% until the answer, then the line stays at 100%
        self.assertIn(b"forking sb-parent [" + b"-" * 24 + b"]   0% 0/2 sandboxes", err)
        frames = err.split(b"\r\x1b[K")
        self.assertGreaterEqual(len(frames), 4, err)    # redrawn as time passes
        self.assertRegex(err, rb"forking sb-parent \[-+\]   0% 0/2 sandboxes  1\.[0-9]s")
        self.assertRegex(frames[-1], rb"^forking sb-parent \[#{24}\] 100% 2/2 sandboxes  1\.[0-9]s\r?\n$")
        code, out, err = self.run_cli(["fork", "sb-parent", "--count", "2"], tty=False)
        self.assertEqual((code, out, err), (0, b"sb-kid1\nsb-kid2\n", b""))

    def test_build_progress_shows_the_last_line(self):
        code, out, err = self.run_cli(["template", "build", "slow", "--from-dir", "/tmp"], tty=True)
        self.assertEqual(code, 0, err)
        self.assertIn(b"building slow", err)
        self.assertIn(b"step 3 of 3", err)
        self.assertTrue(err.endswith(b"\r\x1b[K"), err)
        # stdout is not the terminal: the whole log still goes there
        self.assertEqual(out, b"step 1 of 3\nstep 2 of 3\nstep 3 of 3\n"
                              b"template slow version 1 ready\n")
        code, out, err = self.run_cli(["template", "build", "slow", "--from-dir", "/tmp"],
                                      tty=False)
        self.assertEqual(code, 0)
        self.assertEqual(err, b"")


if __name__ == "__main__":
    main()
