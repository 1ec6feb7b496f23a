#!/usr/bin/env python3
"""Credential manager through the real api: create/list/rotate/revoke/bind,
the vault (values only as sealed boxes; the api cannot read them back),
placeholders in a sandbox's environment, tenancy, audit, bad input."""
import hashlib
import os
import signal
import stat
import subprocess
import sys
import tempfile
import time

from harness import BIN, AirlockTestCase, ApiError, main

SECRET = "sk-test-" + os.urandom(12).hex()


def openai(name="openai", **kw):
    body = {"name": name, "value": SECRET, "env": "OPENAI_API_KEY",
            "inject": {"type": "header"}, "hosts": ["api.openai.com"]}
    body.update(kw)
    return body


class CredentialTest(AirlockTestCase):
    def boxes(self, cred_id):
        return {r[0]: r[1] for r in self.db_rows(
            "SELECT ref, box FROM vault_secrets WHERE ref LIKE ?", cred_id + ":%")}

    def db_bytes(self):
        """Every byte the database keeps: the SQLite file and its WAL, or
        PostgreSQL's tables and WAL."""
        if self.pg:
            paths = [os.path.join(d, f) for sub in ("base", "pg_wal")
                     for d, _, fs in os.walk(os.path.join(self.pg.dir, "data", sub)) for f in fs]
        else:
            paths = [os.path.join(self.server.dir, "db", f) for f in ("airlock.db", "airlock.db-wal")]
        chunks = []
        for p in paths:
            if os.path.exists(p):
                with open(p, "rb") as fh:
                    chunks.append(fh.read())
        out = b"".join(chunks)
        self.assertGreater(len(out), 0)
        return out

    def test_keys_on_disk(self):
        priv = os.path.join(self.server.dir, "keys", "vault.key")
        pub = os.path.join(self.server.dir, "vault.pub")
        st = os.stat(priv)
        self.assertEqual((st.st_uid, stat.S_IMODE(st.st_mode)), (0, 0o600))
        self.assertEqual(stat.S_IMODE(os.stat(os.path.dirname(priv)).st_mode), 0o700)
        self.assertEqual(os.path.getsize(pub), 32)
        self.assertEqual(stat.S_IMODE(os.stat(pub).st_mode), 0o644)
        # the interception CA: key root's only, certificate in every rootfs
        ca_key = os.path.join(self.server.dir, "keys", "ca.key")
        st = os.stat(ca_key)
        self.assertEqual((st.st_uid, stat.S_IMODE(st.st_mode)), (0, 0o600))
        with open(os.path.join(self.server.dir, "ca.crt")) as f:
            ca = f.read()
        self.assertIn("BEGIN CERTIFICATE", ca)
        sb = self.api.create()
        try:
            st, data, _ = self.api.raw("GET", f"/v1/sandboxes/{sb['id']}/files?path=/etc/airlock/gateway-ca.crt")
            self.assertEqual((st, data.decode()), (200, ca))
            code, out, _, _ = self.api.exec(sb["id"], ["cat", "/etc/ssl/certs/ca-certificates.crt"])
            self.assertIn(ca.strip(), out.decode())
        finally:
            self.api.delete(sb["id"])

    def test_lifecycle(self):
        c = self.api.call("POST", "/v1/credentials", openai("life"))
        cid = c["id"]
        self.assertNotIn("value", c)
        self.assertNotIn(SECRET, str(c))
        self.assertEqual((c["version"], c["status"]), (1, "active"))
        self.assertEqual(c["inject"], {"type": "header", "header": "Authorization",
                                       "format": "Bearer {value}"})
        self.assertEqual(c["bindings"], [{"tenant": True}])
        # where it may go: https to 443 unless asked (plain HTTP is readable
        # on the wire, and the sandbox picks the port)
        self.assertEqual((c["schemes"], c["ports"]), (["https"], [443]))
        # stored only as a sealed box: not in the DB file in plaintext
        boxes = self.boxes(cid)
        self.assertEqual(list(boxes), [cid + ":1"])
        self.assertNotIn(SECRET.encode(), self.db_bytes())
        listed = self.api.call("GET", "/v1/credentials")["credentials"]
        self.assertIn(cid, [x["id"] for x in listed])
        self.assertNotIn(SECRET, str(listed))
        self.assertEqual(self.api.call("GET", f"/v1/credentials/{cid}")["name"], "life")

        # rotate: a new version, the old box is gone
        new_secret = "sk-rotated-" + os.urandom(8).hex()
        r = self.api.call("POST", f"/v1/credentials/{cid}/rotate", {"value": new_secret})
        self.assertEqual(r["version"], 2)
        self.assertIsNotNone(r["rotated_at"])
        self.assertEqual(list(self.boxes(cid)), [cid + ":2"])
        self.assertNotIn(new_secret.encode(), self.db_bytes())
        self.assertEqual((r["schemes"], r["ports"]), (["https"], [443]))   # kept
        # a rotation may change where it goes (the one way to, for an
        # existing credential); a bad one changes nothing
        status, data, _ = self.api.raw("POST", f"/v1/credentials/{cid}/rotate",
                                       {"value": "x", "ports": [70000]})
        self.assertEqual(status, 400, data)
        self.assertIn(b"ports", data)
        self.assertEqual(self.api.call("GET", f"/v1/credentials/{cid}")["version"], 2)
        r = self.api.call("POST", f"/v1/credentials/{cid}/rotate",
                          {"value": new_secret, "schemes": ["http", "https"]})
        self.assertEqual((r["version"], r["schemes"], r["ports"]), (3, ["http", "https"], [80, 443]))
        got = self.api.call("GET", f"/v1/credentials/{cid}")
        self.assertEqual((got["schemes"], got["ports"]), (["http", "https"], [80, 443]))

        # revoke: erased from the vault; repeat is fine; rotate is a conflict
        r = self.api.call("DELETE", f"/v1/credentials/{cid}")
        self.assertEqual(r["status"], "revoked")
        self.assertEqual(self.boxes(cid), {})
        self.assertEqual(self.api.call("DELETE", f"/v1/credentials/{cid}")["status"], "revoked")
        with self.assertRaises(ApiError) as e:
            self.api.call("POST", f"/v1/credentials/{cid}/rotate", {"value": "x"})
        self.assertEqual(e.exception.status, 409)

        audit = self.api.call("GET", f"/v1/credentials/audit?credential={cid}")["records"]
        self.assertEqual([a["decision"] for a in audit], ["revoked", "rotated", "rotated", "created"])
        self.assertEqual(audit[1]["detail"], 'schemes ["http","https"], ports [80,443]')
        only = self.api.call("GET", f"/v1/credentials/audit?credential={cid}&decision=rotated")
        self.assertEqual(len(only["records"]), 2)

    def test_expired_status(self):
        c = self.api.call("POST", "/v1/credentials",
                          openai("old", env="OLD_KEY", expires_at="2020-01-01T00:00:00Z"))
        self.assertEqual(c["status"], "expired")
        self.assertEqual(c["expires_at"], "2020-01-01T00:00:00Z")

    def test_placeholders_in_sandbox(self):
        t = os.urandom(3).hex()
        # the project one first: a newer tenant-wide one must still lose to it
        proj = self.api.call("POST", "/v1/credentials",
                             openai("pj-" + t, env="KEY_A", bindings=[{"project": "alpha"}]))
        tenant_wide = self.api.call("POST", "/v1/credentials", openai("tw-" + t, env="KEY_A"))
        other = self.api.call("POST", "/v1/credentials", openai("ot-" + t, env="KEY_B"))
        sb = self.api.create(metadata={"project": "alpha"}, env={"KEY_B": "mine"})
        sb2 = self.api.create()
        try:
            code, out, _, _ = self.api.exec(sb["id"], ["sh", "-c", 'echo "$KEY_A|$KEY_B"'])
            self.assertEqual(code, 0)
            a, b = out.decode().strip().split("|")
            self.assertTrue(a.startswith("airlock-ph-"), a)
            self.assertEqual(b, "mine")   # the request's own env wins
            code, out, _, _ = self.api.exec(sb["id"], ["sh", "-c", 'echo "$SSL_CERT_FILE|$REQUESTS_CA_BUNDLE|$NODE_EXTRA_CA_CERTS"'])
            self.assertEqual(out.decode().strip(), "/etc/ssl/certs/ca-certificates.crt|"
                             "/etc/ssl/certs/ca-certificates.crt|/etc/airlock/gateway-ca.crt")
            ((owner,),) = self.db_rows("SELECT cred_id FROM credential_placeholders WHERE"
                                       " placeholder = ?", a)
            self.assertEqual(owner, proj["id"])   # project beats tenant
            code, out2, _, _ = self.api.exec(sb2["id"], ["sh", "-c", 'echo "$KEY_A|$KEY_B"'])
            a2, b2 = out2.decode().strip().split("|")
            self.assertTrue(a2.startswith("airlock-ph-") and b2.startswith("airlock-ph-"))
            self.assertNotEqual(a, a2)            # unique per sandbox
            ((owner2,),) = self.db_rows("SELECT cred_id FROM credential_placeholders WHERE"
                                        " placeholder = ?", a2)
            self.assertEqual(owner2, tenant_wide["id"])
            # the secret is nowhere in the sandbox: env, disk
            code, out, _, _ = self.api.exec(sb["id"], ["sh", "-c",
                                            "env; grep -rl -- \"$0\" /etc /root /tmp /work "
                                            "2>/dev/null; true", SECRET])
            self.assertNotIn(SECRET.encode(), out)
            # a binding to one sandbox beats the project
            sbc = self.api.call("POST", "/v1/credentials",
                                openai("sb-" + t, env="KEY_A",
                                       bindings=[{"sandbox": sb2["id"]}]))
            self.assertEqual(sbc["bindings"], [{"sandbox": sb2["id"]}])
            sb3 = self.api.create(metadata={"project": "alpha"})
            try:
                # bind after the fact, then a new sandbox sees the most specific
                self.api.call("POST", f"/v1/credentials/{sbc['id']}/bind", {"sandbox": sb3["id"]})
                r = self.api.call("GET", f"/v1/credentials/{sbc['id']}")
                self.assertEqual(len(r["bindings"]), 2)
                r = self.api.call("POST", f"/v1/credentials/{sbc['id']}/unbind",
                                  {"sandbox": sb3["id"]})
                self.assertEqual(r["bindings"], [{"sandbox": sb2["id"]}])
            finally:
                self.api.delete(sb3["id"])
        finally:
            self.api.delete(sb["id"])
            self.api.delete(sb2["id"])
            for cr in (tenant_wide, proj, other):
                self.api.call("DELETE", f"/v1/credentials/{cr['id']}")

    def test_tenants_are_isolated(self):
        _, alice = self.new_tenant("alice-" + os.urandom(3).hex())
        _, bob = self.new_tenant("bob-" + os.urandom(3).hex())
        c = alice.call("POST", "/v1/credentials", openai())
        bob_sb = bob.create()
        try:
            self.assertEqual(bob.call("GET", "/v1/credentials")["credentials"], [])
            for method, path, body in (("GET", f"/v1/credentials/{c['id']}", None),
                                       ("DELETE", f"/v1/credentials/{c['id']}", None),
                                       ("POST", f"/v1/credentials/{c['id']}/rotate", {"value": "x"}),
                                       ("POST", f"/v1/credentials/{c['id']}/bind", {"tenant": True})):
                with self.assertRaises(ApiError) as e:
                    bob.call(method, path, body)
                self.assertEqual(e.exception.status, 404, path)
            # alice cannot bind to bob's sandbox
            with self.assertRaises(ApiError) as e:
                alice.call("POST", f"/v1/credentials/{c['id']}/bind", {"sandbox": bob_sb["id"]})
            self.assertEqual(e.exception.status, 404)
            self.assertEqual(bob.call("GET", "/v1/credentials/audit")["records"], [])
            self.assertEqual(alice.call("GET", f"/v1/credentials/{c['id']}")["status"], "active")
        finally:
            bob.delete(bob_sb["id"])

    def test_cli(self):
        def cli(*args, stdin=None):
            return subprocess.run([os.path.join(BIN, "airlock"), "--config",
                                   os.path.join(self.server.dir, "cli.json")] + list(args),
                                  input=stdin, capture_output=True, text=True)
        name = "cli-" + os.urandom(3).hex()
        r = cli("credential", "create", name, "--host", "api.example.com", "--env", "EX_KEY",
                "--project", "p1", "--rate-per-minute", "5", stdin=SECRET + "\n")
        self.assertEqual(r.returncode, 0, r.stderr)
        cid = r.stdout.strip()
        got = self.api.call("GET", f"/v1/credentials/{cid}")
        self.assertEqual((got["name"], got["env"], got["bindings"], got["rate_limit"]),
                         (name, "EX_KEY", [{"project": "p1"}], {"per_minute": 5}))
        # the value went to the vault without its newline (sealed: length + overhead)
        self.assertEqual(len(self.boxes(cid)[cid + ":1"]), len(__import__("base64").b64encode(
            b"x" * (len(SECRET) + 61))))
        self.assertEqual(got["replace_in"], [])
        r = cli("credential", "create", name + "-ri", "--host", "api.example.com",
                "--replace-in", "body", "--replace-in", "target", stdin=SECRET)
        self.assertEqual(r.returncode, 0, r.stderr)
        ri = self.api.call("GET", f"/v1/credentials/{r.stdout.strip()}")["replace_in"]
        self.assertEqual(ri, ["body", "target"])
        r = cli("credential", "create", name + "-bad", "--host", "api.example.com",
                "--replace-in", "query", stdin=SECRET)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("replace_in", r.stderr)
        r = cli("credential", "create", name + "-http", "--host", "api.example.com",
                "--scheme", "http", "--scheme", "https", "--port", "80", "--port", "8443",
                stdin=SECRET)
        self.assertEqual(r.returncode, 0, r.stderr)
        got = self.api.call("GET", f"/v1/credentials/{r.stdout.strip()}")
        self.assertEqual((got["schemes"], got["ports"]), (["http", "https"], [80, 8443]))
        r = cli("credential", "create", name + "-badport", "--host", "api.example.com",
                "--port", "https", stdin=SECRET)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("ports", r.stderr)
        r = cli("credential", "ls")
        self.assertIn(name, r.stdout)
        self.assertIn("SCHEMES", r.stdout)
        self.assertIn("8443", r.stdout)   # the -http one's ports
        self.assertNotIn(SECRET, r.stdout + r.stderr)
        r = cli("credential", "rotate", cid, stdin="new-value")
        self.assertEqual((r.returncode, r.stdout.strip()), (0, cid))
        self.assertEqual(self.api.call("GET", f"/v1/credentials/{cid}")["version"], 2)
        r = cli("credential", "rotate", cid, "--scheme", "http", stdin="newer-value")
        self.assertEqual((r.returncode, r.stdout.strip()), (0, cid), r.stderr)
        got = self.api.call("GET", f"/v1/credentials/{cid}")
        self.assertEqual((got["version"], got["schemes"], got["ports"]), (3, ["http"], [80]))
        r = cli("credential", "rm", cid)
        self.assertEqual(r.returncode, 0)
        self.assertEqual(self.api.call("GET", f"/v1/credentials/{cid}")["status"], "revoked")
        r = cli("credential", "audit")
        self.assertIn("revoked", r.stdout)
        r = cli("credential", "create", "x", stdin="v")          # no --host
        self.assertEqual(r.returncode, 125)   # usage error
        r = cli("credential", "create", "y", "--host", "a.com", stdin="")   # no value
        self.assertNotEqual(r.returncode, 0)

    def test_bad_input(self):
        cases = [
            ({"value": "x", "inject": {"type": "header"}, "hosts": ["a.com"]}, "invalid_field"),
            (openai(value="line\nbreak"), "invalid_field"),
            (openai(value=""), "invalid_field"),
            (openai(value="x" * 9000), "invalid_field"),
            (openai(inject={"type": "nope"}), "invalid_field"),
            (openai(inject={"type": "header", "format": "no placeholder"}), "invalid_field"),
            (openai(hosts=["bad host"]), "invalid_field"),
            (openai(hosts="api.openai.com"), "invalid_field"),
            (openai(expires_at="soon"), "invalid_field"),
            (openai(bindings=[{"planet": "x"}]), "invalid_field"),
            (openai(bindings={"tenant": True}), "invalid_field"),
            (openai(color="blue"), None),
            (openai(schemes=["ftp"]), "schemes"),
            (openai(schemes=[]), "schemes"),
            (openai(schemes="https"), "schemes"),
            (openai(schemes=["https", "https"]), "schemes"),
            (openai(ports=[0]), "ports"),
            (openai(ports=[65536]), "ports"),
            (openai(ports="443"), "ports"),
            (openai(ports=["443"]), "ports"),
            (openai(ports=[443, 443]), "ports"),
            (openai(ports=list(range(1, 18))), "ports"),
        ]
        for body, code in cases:
            status, data, _ = self.api.raw("POST", "/v1/credentials", body)
            self.assertEqual(status, 400, (body, data))
            if code:
                self.assertIn(code.encode(), data)
        status, data, _ = self.api.raw("POST", "/v1/credentials", b"{not json")
        self.assertEqual(status, 400)
        c = self.api.call("POST", "/v1/credentials", openai("dup"))
        status, _, _ = self.api.raw("POST", "/v1/credentials", openai("dup"))
        self.assertEqual(status, 409)
        self.assertEqual(self.api.raw("PUT", "/v1/credentials")[0], 405)
        self.assertEqual(self.api.raw("PATCH", f"/v1/credentials/{c['id']}")[0], 405)
        self.assertEqual(self.api.raw("GET", f"/v1/credentials/{c['id']}/rotate")[0], 405)
        self.assertEqual(self.api.raw("POST", f"/v1/credentials/{c['id']}/explode")[0], 404)
        self.assertEqual(self.api.raw("GET", "/v1/credentials/cred_nope")[0], 404)
        self.assertEqual(self.api.raw("GET", "/v1/credentials/audit?limit=0")[0], 400)
        self.assertEqual(self.api.raw("GET", "/v1/credentials", auth=False)[0], 401)


# An upstream that echoes its request: the target, every header but
# Authorization (the credential's own place, reported as a hash so the test
# sees the injection) and the body, as an LLM asked to repeat or a paste
# service would hand back what it was sent.
ECHO = r'''
import hashlib, http.server, socketserver, sys
class H(http.server.BaseHTTPRequestHandler):
    def echo(self):
        if (self.headers.get("Transfer-Encoding") or "").lower() == "chunked":
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()   # no trailer fields
                    break
                parts.append(self.rfile.read(size))
                self.rfile.readline()
            body = b"".join(parts)
        else:
            n = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(n) if n else b""
        if len(body) > 65536:   # a large body comes back as its length and hash
            body = b"len=%d sha256=%s" % (len(body), hashlib.sha256(body).hexdigest().encode())
        auth = self.headers.get("Authorization") or ""
        out = ["target=" + self.path, "auth-sha256=" + hashlib.sha256(auth.encode()).hexdigest()]
        out += ["%s: %s" % (k, v) for k, v in self.headers.items() if k.lower() != "authorization"]
        data = ("\n".join(out) + "\nbody=").encode() + body + b"\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    do_GET = do_POST = echo
    def log_message(self, *a):
        pass
class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
srv = S((sys.argv[1], 80), H)
other = S((sys.argv[1], 8080), H)   # another port of the same host
import threading
threading.Thread(target=other.serve_forever, daemon=True).start()
open(sys.argv[2], "w").write("ready")
srv.serve_forever()
'''

SUB = 100 + os.getpid() % 100
ECHO_NET = f"10.252.{SUB}"
ECHO_HOST_IP, ECHO_IP = f"{ECHO_NET}.1", f"{ECHO_NET}.2"
ECHO_NS = f"alcr-{os.getpid()}"
ECHO_VETH = f"alcr{os.getpid() % 100000}"


def run(*cmd, check=True):
    return subprocess.run(cmd, capture_output=True, text=True, check=check)


class EchoTest(AirlockTestCase):
    """The secret is never echoed back: by default the gateway puts the value
    only where the credential's `inject` says; a placeholder in the body,
    another header or the target goes upstream as the placeholder."""
    extra_args = ("--set", f"network_allow_private_cidrs={ECHO_NET}.0/24",
                  "--set", f"gateway_hosts=echo.test={ECHO_IP}")

    @classmethod
    def setUpClass(cls):
        cls.echo = None
        cls.tmp = tempfile.mkdtemp(prefix="airlock-echo-")
        try:
            run("ip", "netns", "add", ECHO_NS)
            run("ip", "link", "add", ECHO_VETH, "type", "veth", "peer", "name", "w0",
                "netns", ECHO_NS)
            run("ip", "addr", "add", f"{ECHO_HOST_IP}/24", "dev", ECHO_VETH)
            run("ip", "link", "set", ECHO_VETH, "up")
            run("ip", "netns", "exec", ECHO_NS, "ip", "addr", "add", f"{ECHO_IP}/24", "dev", "w0")
            run("ip", "netns", "exec", ECHO_NS, "ip", "link", "set", "w0", "up")
            with open(f"{cls.tmp}/echo.py", "w") as f:
                f.write(ECHO)
            ready = f"{cls.tmp}/ready"
            cls.echo = subprocess.Popen(["ip", "netns", "exec", ECHO_NS, sys.executable,
                                         f"{cls.tmp}/echo.py", ECHO_IP, ready],
                                        start_new_session=True, stderr=subprocess.DEVNULL)
            for _ in range(200):
                if os.path.exists(ready):
                    break
                time.sleep(0.05)
            else:
                raise RuntimeError("echo server did not start")
            super().setUpClass()
        except Exception:
            cls.destroy_echo()
            raise

    @classmethod
    def destroy_echo(cls):
        if cls.echo and cls.echo.poll() is None:
            os.killpg(cls.echo.pid, signal.SIGKILL)
            cls.echo.wait()
        run("ip", "link", "del", ECHO_VETH, check=False)
        run("ip", "netns", "del", ECHO_NS, check=False)
        subprocess.run(["rm", "-rf", cls.tmp])

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            cls.destroy_echo()

    def echoed(self, replace_in):
        secret = "sk-echo-" + os.urandom(8).hex()
        project = "echo-" + os.urandom(3).hex()
        # plain HTTP (the echo server has no TLS) only when asked for
        body = openai(f"echo-{os.urandom(3).hex()}", value=secret, env="ECHO_KEY",
                      hosts=["echo.test"], bindings=[{"project": project}], schemes=["http"])
        if replace_in is not None:
            body["replace_in"] = replace_in
        c = self.api.call("POST", "/v1/credentials", body)
        self.addCleanup(self.api.call, "DELETE", f"/v1/credentials/{c['id']}")
        sb = self.api.create(template="busybox", metadata={"project": project},
                             network={"allow": {"domains": ["echo.test"]}})
        self.addCleanup(self.api.delete, sb["id"])
        sid = sb["id"]
        code, _, _, _ = self.api.exec(sid, ["sh", "-c", f"echo '{ECHO_IP} echo.test' >> /etc/hosts"])
        self.assertEqual(code, 0)
        # the placeholder in the query, in another header and in the body
        code, out, err, _ = self.api.exec(sid, ["sh", "-c",
            'timeout 10 wget -q -O - --header "X-Other: $ECHO_KEY" '
            '--header "Content-Type: text/plain" --post-data "repeat: $ECHO_KEY" '
            '"http://echo.test/e?k=$ECHO_KEY"; echo; echo "ph=$ECHO_KEY"'])
        out = out.decode(errors="replace")
        self.assertEqual(code, 0, out + err.decode(errors="replace"))
        ph = out.rsplit("ph=", 1)[1].strip()
        self.assertTrue(ph.startswith("airlock-ph-"), out)
        # the credential's own place got the value in any case
        want = hashlib.sha256(f"Bearer {secret}".encode()).hexdigest()
        self.assertIn(f"auth-sha256={want}", out)
        return out, secret, ph, c

    def test_default_never_echoes_the_secret(self):
        out, secret, ph, c = self.echoed(None)
        self.assertEqual(self.api.call("GET", f"/v1/credentials/{c['id']}")["replace_in"], [])
        self.assertNotIn(secret, out)
        self.assertIn(f"target=/e?k={ph}", out)
        self.assertIn(f"X-Other: {ph}", out)
        self.assertIn(f"body=repeat: {ph}", out)
        audit = self.api.call("GET", f"/v1/credentials/audit?credential={c['id']}")["records"]
        self.assertIn("not_replaced", [a["decision"] for a in audit])

    def test_opt_in_echoes_it(self):
        # proof that the test above can fail: opted in, the echo hands it back
        out, secret, ph, c = self.echoed(["headers", "body", "target"])
        self.assertEqual(self.api.call("GET", f"/v1/credentials/{c['id']}")["replace_in"],
                         ["headers", "body", "target"])
        self.assertIn(f"target=/e?k={secret}", out)
        self.assertIn(f"X-Other: {secret}", out)
        self.assertIn(f"body=repeat: {secret}", out)

    def test_large_body(self):
        """A 5 MiB body over plain HTTP: the head gets the credential; the body
        arrives byte-identical by default, and with "body" opted in its
        placeholders (one 16 KiB in) are replaced as it streams, re-framed
        chunked."""
        for replace_in in (None, ["body"]):
            secret = "sk-big-" + os.urandom(8).hex()
            project = "big-" + os.urandom(3).hex()
            body = openai(f"big-{os.urandom(3).hex()}", value=secret, env="ECHO_KEY",
                          hosts=["echo.test"], bindings=[{"project": project}],
                          schemes=["http"])
            if replace_in:
                body["replace_in"] = replace_in
            c = self.api.call("POST", "/v1/credentials", body)
            self.addCleanup(self.api.call, "DELETE", f"/v1/credentials/{c['id']}")
            sb = self.api.create(template="busybox", metadata={"project": project},
                                 network={"allow": {"domains": ["echo.test"]}})
            self.addCleanup(self.api.delete, sb["id"])
            script = (f"echo '{ECHO_IP} echo.test' >> /etc/hosts; "
                      'printf %s "$ECHO_KEY" > /tmp/b; head -c 16380 /dev/zero | tr "\\0" a >> /tmp/b; '
                      'printf %s "$ECHO_KEY" >> /tmp/b; head -c 5242880 /dev/zero | tr "\\0" b >> /tmp/b; '
                      'printf %s "$ECHO_KEY" >> /tmp/b; '
                      'timeout 60 wget -q -O - --header "Authorization: Bearer $ECHO_KEY" '
                      '--header "Content-Type: application/octet-stream" --post-file /tmp/b '
                      'http://echo.test/big; echo; echo "ph=$ECHO_KEY"')
            code, out, err, _ = self.api.exec(sb["id"], ["sh", "-c", script])
            out = out.decode(errors="replace")
            self.assertEqual(code, 0, out + err.decode(errors="replace"))
            ph = out.rsplit("ph=", 1)[1].strip().encode()
            sent = ph + b"a" * 16380 + ph + b"b" * 5242880 + ph
            want = sent.replace(ph, secret.encode()) if replace_in else sent
            self.assertIn(f"body=len={len(want)} sha256={hashlib.sha256(want).hexdigest()}", out)
            auth = hashlib.sha256(f"Bearer {secret}".encode()).hexdigest()
            self.assertIn(f"auth-sha256={auth}", out)
            self.assertIn("Transfer-Encoding: chunked" if replace_in
                          else f"Content-Length: {len(sent)}", out)

    def plain_get(self, schemes, ports, urls):
        """A credential for echo.test (schemes and ports as given, None for
        the defaults) and a sandbox that sends its placeholder as its own
        Authorization to each url over plain HTTP: what each echo saw, the
        secret, the placeholder, the credential."""
        secret = "sk-plain-" + os.urandom(8).hex()
        project = "plain-" + os.urandom(3).hex()
        body = openai(f"plain-{os.urandom(3).hex()}", value=secret, env="ECHO_KEY",
                      hosts=["echo.test"], bindings=[{"project": project}])
        if schemes is not None:
            body["schemes"] = schemes
        if ports is not None:
            body["ports"] = ports
        c = self.api.call("POST", "/v1/credentials", body)
        self.addCleanup(self.api.call, "DELETE", f"/v1/credentials/{c['id']}")
        sb = self.api.create(template="busybox", metadata={"project": project},
                             network={"allow": {"domains": ["echo.test"]}})
        self.addCleanup(self.api.delete, sb["id"])
        sid = sb["id"]
        code, _, _, _ = self.api.exec(sid, ["sh", "-c", f"echo '{ECHO_IP} echo.test' >> /etc/hosts"])
        self.assertEqual(code, 0)
        code, ph, _, _ = self.api.exec(sid, ["sh", "-c", 'printf %s "$ECHO_KEY"'])
        ph = ph.decode()
        self.assertTrue(ph.startswith("airlock-ph-"), ph)
        seen = []
        for url in urls:
            code, out, err, _ = self.api.exec(sid, ["sh", "-c",
                'timeout 10 wget -q -O - --header "Authorization: Bearer $ECHO_KEY" ' + url])
            out = out.decode(errors="replace")
            self.assertEqual(code, 0, (url, out + err.decode(errors="replace")))
            seen.append(out)
        return seen, secret, ph, c

    def test_plain_http_gets_the_placeholder_by_default(self):
        """A credential created without schemes is not put into plain HTTP
        to its own host: the request goes on with the sandbox's placeholder,
        and the attempt is audited."""
        (out,), secret, ph, c = self.plain_get(None, None, ["http://echo.test/plain"])
        self.assertNotIn(secret, out)
        self.assertIn("target=/plain", out)
        sent = hashlib.sha256(f"Bearer {ph}".encode()).hexdigest()
        self.assertIn(f"auth-sha256={sent}", out)
        decisions = [a["decision"] for a in
                     self.api.call("GET", f"/v1/credentials/audit?credential={c['id']}")["records"]]
        self.assertNotIn("injected", decisions)
        self.assertIn("exfiltration_attempt", decisions)
        self.assertEqual((c["schemes"], c["ports"]), (["https"], [443]))

    def test_plain_http_only_on_its_ports(self):
        """Named explicitly, plain HTTP to port 80 gets the value; the same
        host's port 8080 (which the sandbox chose) does not."""
        (on80, on8080), secret, ph, c = self.plain_get(
            ["http"], [80], ["http://echo.test/p80", "http://echo.test:8080/p8080"])
        want = hashlib.sha256(f"Bearer {secret}".encode()).hexdigest()
        self.assertIn(f"auth-sha256={want}", on80)
        self.assertIn("target=/p8080", on8080)
        self.assertNotIn(f"auth-sha256={want}", on8080)
        sent = hashlib.sha256(f"Bearer {ph}".encode()).hexdigest()
        self.assertIn(f"auth-sha256={sent}", on8080)
        decisions = [a["decision"] for a in
                     self.api.call("GET", f"/v1/credentials/audit?credential={c['id']}")["records"]]
        self.assertEqual(decisions.count("injected"), 1, decisions)
        self.assertEqual((c["schemes"], c["ports"]), (["http"], [80]))

    def test_bad_replace_in(self):
        for bad in (["query"], "body", ["body", "body"], [1]):
            status, data, _ = self.api.raw("POST", "/v1/credentials",
                                           openai("bad-ri", replace_in=bad))
            self.assertEqual(status, 400, (bad, data))
            self.assertIn(b"replace_in", data)
        for bad in ("/v1/%2F", "/v1//x", "/a;b"):
            status, data, _ = self.api.raw("POST", "/v1/credentials",
                                           openai("bad-pp", path_prefix=bad))
            self.assertEqual(status, 400, (bad, data))


if __name__ == "__main__":
    main()
