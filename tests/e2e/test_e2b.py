"""The unmodified `e2b` npm SDK (tests/e2b, pinned 2.51.0) against Airlock's
E2B-compatible API (/e2b, docs/E2B.md): tests/e2b/suite.mjs drives a real
`airlockd up` through the SDK with only its settings changed and asserts
every result; this file starts the server, makes a tenant and its key, runs
the suite, and fails when it fails. It also checks the compat routes'
credentials from outside the SDK: an API key is no envd token, one
sandbox's token opens no other sandbox, another tenant sees nothing."""
import json
import os
import subprocess
import sys
import http.client

import harness
from harness import AirlockTestCase, main

E2B_DIR = os.path.join(harness.SRC, "tests", "e2b")
DOMAIN = "sbx.e2b.test"


def raw(addr, method, path, headers=None, body=None):
    host, port = addr.rsplit(":", 1)
    c = http.client.HTTPConnection(host, int(port), timeout=120)
    c.request(method, path, body=body, headers=headers or {})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


class E2BTest(AirlockTestCase):
    extra_args = ("--set", f"ports_domain={DOMAIN}")

    @classmethod
    def setUpClass(cls):
        if not os.path.exists(os.path.join(E2B_DIR, "node_modules", "e2b", "package.json")):
            subprocess.run(["sh", os.path.join(E2B_DIR, "setup.sh")], check=True)
        super().setUpClass()
        cls.tenant, cls.client = cls.new_tenant(cls, "e2b")
        cls.key = cls.client.key

    def env(self, key):
        e = dict(os.environ)
        base = f"http://{self.server.addr}"
        e.update(E2B_API_URL=base + "/e2b", E2B_SANDBOX_URL=base + "/e2b/envd",
                 E2B_API_KEY=key, E2B_DOMAIN=DOMAIN, E2B_TEMPLATE="busybox",
                 AIRLOCK_TEST_API_ADDR=self.server.addr)
        return e

    def test_1_sdk_suite(self):
        env = self.env(self.key)
        # a second key of the tenant, for the suite to revoke
        k2 = self.api.call("POST", "/v1/keys", {"tenant": self.tenant["id"]})
        env.update(AIRLOCK_TEST_KEY2=k2["key"], AIRLOCK_TEST_KEY2_ID=k2["id"],
                   AIRLOCK_TEST_ADMIN_KEY=self.server.admin_key)
        r = subprocess.run(["node", os.path.join(E2B_DIR, "suite.mjs")], env=env,
                           capture_output=True, text=True, timeout=900)
        sys.stdout.write(r.stdout)
        sys.stderr.write(r.stderr)
        self.assertEqual(r.returncode, 0, "tests/e2b/suite.mjs failed (output above)")
        self.assertIn("e2b suite: all passed", r.stdout)

    def test_5_lifecycle(self):
        """tests/e2b/lifecycle.mjs: every envd and control call of the SDK on a
        paused, a suspended and a deleted sandbox gives what it gives on E2B."""
        r = subprocess.run(["node", os.path.join(E2B_DIR, "lifecycle.mjs")],
                           env=self.env(self.key), capture_output=True, text=True, timeout=600)
        sys.stdout.write(r.stdout)
        sys.stderr.write(r.stderr)
        self.assertEqual(r.returncode, 0, "tests/e2b/lifecycle.mjs failed (output above)")
        self.assertIn("e2b lifecycle: all passed", r.stdout)

    def test_7_gone_says_nothing_to_strangers(self):
        """envd's 502 ("gone", the SDK's isRunning() false) is for a caller
        holding a token of that sandbox only: without one, another tenant's
        live sandbox, a deleted one and one that never existed all answer
        the same 401, on /health and on every other envd path."""
        a = self.server.addr
        _, other = self.new_tenant("e2b-stranger")
        theirs = self.create(other.key)
        mine = self.create(self.key)
        try:
            def envd(method, path, sb_id, token):
                h = {"E2b-Sandbox-Id": sb_id, "Content-Type": "application/json"}
                if token is not None:
                    h["X-Access-Token"] = token
                st, data = raw(a, method, "/e2b/envd" + path, h,
                               b"{}" if method == "POST" else None)
                # the id is echoed back; with it masked, the answers must be equal
                return st, data.replace(sb_id.encode(), b"<id>")

            self.assertEqual(envd("GET", "/health", mine["sandboxID"],
                                  mine["envdAccessToken"])[0], 204)
            st, _ = raw(a, "DELETE", f"/e2b/sandboxes/{mine['sandboxID']}",
                        {"X-API-KEY": self.key})
            self.assertEqual(st, 204)
            # the owner's token on its deleted sandbox: gone, as E2B says it
            st, data = envd("GET", "/health", mine["sandboxID"], mine["envdAccessToken"])
            self.assertEqual((st, json.loads(data)["code"]), (502, 502))
            st, data = envd("POST", "/process.Process/List", mine["sandboxID"],
                            mine["envdAccessToken"])
            self.assertEqual(st, 502)
            never = "sb-0123456789abcdef"
            forged = "ale_" + "5" * 40
            for method, path in (("GET", "/health"), ("GET", "/files?path=/etc/hostname"),
                                 ("POST", "/process.Process/List")):
                for token in (None, forged, mine["envdAccessToken"], "junk"):
                    seen = {envd(method, path, sb, token)
                            for sb in (theirs["sandboxID"], never)}
                    # a token of my deleted sandbox opens nothing else either
                    if token != mine["envdAccessToken"]:
                        seen.add(envd(method, path, mine["sandboxID"], token))
                    self.assertEqual(len(seen), 1, (method, path, token, seen))
                    self.assertEqual(seen.pop()[0], 401, (method, path, token))
            # their sandbox still runs, for them
            st, _ = raw(a, "GET", f"/e2b/sandboxes/{theirs['sandboxID']}",
                        {"X-API-KEY": other.key})
            self.assertEqual(st, 200)
            self.assertEqual(envd("GET", "/health", theirs["sandboxID"],
                                  theirs["envdAccessToken"])[0], 204)
            # a gone sandbox's tokens stay until they expire; expired ones of
            # any sandbox are swept when a token is issued
            self.db_write("INSERT INTO port_tokens(hash, tenant_id, sandbox_id, port,"
                          " expires_at, created_at) VALUES(?, ?, ?, ?, ?, ?)",
                          "e" * 64, self.tenant["id"], "sb-expired", 49983, 1, 0)
            self.assertEqual(self.db_rows("SELECT count(*) FROM port_tokens WHERE"
                                          " sandbox_id = ?", "sb-expired"), [(1,)])
            raw(a, "DELETE", f"/e2b/sandboxes/{self.create(self.key)['sandboxID']}",
                {"X-API-KEY": self.key})
            self.assertEqual(self.db_rows("SELECT count(*) FROM port_tokens WHERE"
                                          " sandbox_id = ?", "sb-expired"), [(0,)])
            self.assertEqual(self.db_rows("SELECT count(*) FROM port_tokens WHERE"
                                          " sandbox_id = ?", mine["sandboxID"]), [(1,)])
        finally:
            raw(a, "DELETE", f"/e2b/sandboxes/{theirs['sandboxID']}", {"X-API-KEY": other.key})
            raw(a, "DELETE", f"/e2b/sandboxes/{mine['sandboxID']}", {"X-API-KEY": self.key})

    def create(self, key):
        st, data = raw(self.server.addr, "POST", "/e2b/v2/sandboxes",
                       {"X-API-KEY": key, "Content-Type": "application/json"},
                       json.dumps({"templateID": "busybox", "timeout": 600}))
        self.assertEqual(st, 201, data)
        return json.loads(data)

    def test_2_credentials(self):
        a = self.addr = self.server.addr
        one, two = self.create(self.key), self.create(self.key)
        try:
            def files(sb_id, token):
                h = {"E2b-Sandbox-Id": sb_id}
                if token:
                    h["X-Access-Token"] = token
                return raw(a, "GET", "/e2b/envd/files?path=/etc/hostname", h)[0]
            self.assertNotEqual(files(one["sandboxID"], one["envdAccessToken"]), 401)
            # one sandbox's token is refused for another, an API key is no token
            self.assertEqual(files(two["sandboxID"], one["envdAccessToken"]), 401)
            self.assertEqual(files(one["sandboxID"], self.key), 401)
            self.assertEqual(files(one["sandboxID"], None), 401)
            tok = one["envdAccessToken"]
            self.assertEqual(files(one["sandboxID"], tok[:-1] + ("1" if tok[-1] == "0" else "0")),
                             401)
            # the token is not an API key, on the control API nor on /v1
            self.assertEqual(raw(a, "GET", "/e2b/v2/sandboxes",
                                 {"X-API-KEY": one["envdAccessToken"]})[0], 401)
            self.assertEqual(raw(a, "GET", "/v1/sandboxes",
                                 {"Authorization": "Bearer " + one["envdAccessToken"]})[0], 401)
            # nor a port token of the host-routed proxy
            self.assertEqual(raw(a, "GET", "/", {"Host": f"49983-{one['sandboxID']}.{DOMAIN}",
                                                 "X-Airlock-Port-Token":
                                                 one["envdAccessToken"]})[0], 401)
            # another tenant: 404 for the sandbox, absent from its list
            _, other = self.new_tenant("e2b-other")
            st, _ = raw(a, "GET", f"/e2b/sandboxes/{one['sandboxID']}", {"X-API-KEY": other.key})
            self.assertEqual(st, 404)
            st, _ = raw(a, "DELETE", f"/e2b/sandboxes/{one['sandboxID']}",
                        {"X-API-KEY": other.key})
            self.assertEqual(st, 404)
            st, data = raw(a, "GET", "/e2b/v2/sandboxes", {"X-API-KEY": other.key})
            self.assertEqual((st, json.loads(data)), (200, []))
            # killed: its own token hears that it is gone (502, E2B's answer),
            # no other credential does
            st, _ = raw(a, "DELETE", f"/e2b/sandboxes/{two['sandboxID']}", {"X-API-KEY": self.key})
            self.assertEqual(st, 204)
            self.assertEqual(files(two["sandboxID"], two["envdAccessToken"]), 502)
            self.assertEqual(files(two["sandboxID"], one["envdAccessToken"]), 401)
            st, _ = raw(a, "DELETE", f"/e2b/sandboxes/{two['sandboxID']}", {"X-API-KEY": self.key})
            self.assertEqual(st, 404)
        finally:
            for sb in (one, two):
                raw(a, "DELETE", f"/e2b/sandboxes/{sb['sandboxID']}", {"X-API-KEY": self.key})

    def test_3_bad_input(self):
        a = self.server.addr
        sb = self.create(self.key)
        h = {"E2b-Sandbox-Id": sb["sandboxID"], "X-Access-Token": sb["envdAccessToken"]}
        try:
            def rpc(method, body, ct="application/json"):
                st, data = raw(a, "POST", "/e2b/envd/" + method, dict(h, **{"Content-Type": ct}),
                               body)
                return st, data
            st, data = rpc("filesystem.Filesystem/Stat", b"{nope")
            self.assertEqual(st, 400)
            self.assertEqual(json.loads(data)["code"], "invalid_argument")
            st, data = rpc("filesystem.Filesystem/Stat", b'{"path":"/nonexistent"}')
            self.assertEqual((st, json.loads(data)["code"]), (404, "not_found"))
            st, data = rpc("filesystem.Filesystem/Nope", b"{}")
            self.assertEqual((st, json.loads(data)["code"]), (501, "unimplemented"))
            # a stream call whose envelope lies about its length
            st, data = rpc("process.Process/Start", b"\x00\x00\x00\x01\x00{}",
                           "application/connect+json")
            self.assertEqual(st, 400)
            self.assertIn("envelope length", json.loads(data)["message"])
            # a multipart body without its closing boundary
            st, data = raw(a, "POST", "/e2b/envd/files?path=/tmp/x",
                           dict(h, **{"Content-Type": "multipart/form-data; boundary=XX"}),
                           b"--XX\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nabc")
            self.assertEqual(st, 400)
            self.assertIn("closing boundary", json.loads(data)["message"])
            st, data = raw(a, "POST", "/e2b/v2/sandboxes",
                           {"X-API-KEY": self.key, "Content-Type": "application/json"},
                           b'{"templateID":"busybox","bogus":1}')
            self.assertEqual(st, 400)
            self.assertEqual(json.loads(data)["code"], 400)
            st, data = raw(a, "GET", "/e2b/nope", {"X-API-KEY": self.key})
            self.assertEqual(st, 404)
            st, data = raw(a, "GET", f"/e2b/sandboxes/{sb['sandboxID']}/snapshots",
                           {"X-API-KEY": self.key})
            self.assertEqual((st, json.loads(data)["code"]), (501, 501))
            # an id that would break the node's request line (decoded path)
            st, data = raw(a, "GET", "/e2b/sandboxes/sb-x%20HTTP%2F1.1%0D%0AX-Airlock-Admin:%201",
                           {"X-API-KEY": self.key})
            self.assertEqual(st, 404)
            self.assertEqual(json.loads(data)["code"], 404)
            # a path that walks is refused before anything
            self.assertEqual(raw(a, "GET", "/e2b/../v1/health")[0], 404)
        finally:
            raw(a, "DELETE", f"/e2b/sandboxes/{sb['sandboxID']}", {"X-API-KEY": self.key})

    def test_4_set_timeout_ends_the_sandbox(self):
        """setTimeout shortens the deadline: the node deletes the sandbox when
        it passes (on_timeout delete), and a longer one keeps it."""
        import time
        a = self.server.addr
        short, long_ = self.create(self.key), self.create(self.key)
        try:
            for sb, t in ((short, 2), (long_, 3600)):
                st, data = raw(a, "POST", f"/e2b/sandboxes/{sb['sandboxID']}/timeout",
                               {"X-API-KEY": self.key, "Content-Type": "application/json"},
                               json.dumps({"timeout": t}))
                self.assertEqual(st, 204, data)
            st, sandbox = self.client.raw("GET", f"/v1/sandboxes/{long_['sandboxID']}")[:2]
            self.assertEqual(st, 200)
            self.assertGreaterEqual(json.loads(sandbox)["timeout_s"], 3600)
            # endAt is Airlock's ends_at: an hour away, and paused time moves it on
            def end_at():
                st, data = raw(a, "GET", f"/e2b/sandboxes/{long_['sandboxID']}",
                               {"X-API-KEY": self.key})
                self.assertEqual(st, 200)
                from datetime import datetime
                return datetime.fromisoformat(json.loads(data)["endAt"].replace("Z", "+00:00"))
            left = end_at().timestamp() - time.time()
            self.assertTrue(3590 < left <= 3601, left)
            self.assertEqual(raw(a, "POST", f"/e2b/sandboxes/{long_['sandboxID']}/pause",
                                 {"X-API-KEY": self.key})[0], 204)
            e1 = end_at()
            time.sleep(1.5)
            self.assertGreaterEqual((end_at() - e1).total_seconds(), 1.0)
            self.assertEqual(raw(a, "POST", f"/e2b/v2/sandboxes/{long_['sandboxID']}/connect",
                                 {"X-API-KEY": self.key, "Content-Type": "application/json"},
                                 b"{}")[0], 200)
            deadline = time.time() + 30
            while raw(a, "GET", f"/e2b/sandboxes/{short['sandboxID']}",
                      {"X-API-KEY": self.key})[0] != 404:
                self.assertLess(time.time(), deadline, "the sandbox outlived its new timeout")
                time.sleep(0.2)
            self.assertEqual(raw(a, "GET", f"/e2b/sandboxes/{long_['sandboxID']}",
                                 {"X-API-KEY": self.key})[0], 200)
            st, data = raw(a, "POST", f"/e2b/sandboxes/{long_['sandboxID']}/timeout",
                           {"X-API-KEY": self.key, "Content-Type": "application/json"},
                           json.dumps({"timeout": -1}))
            self.assertEqual(st, 400)
        finally:
            for sb in (short, long_):
                raw(a, "DELETE", f"/e2b/sandboxes/{sb['sandboxID']}", {"X-API-KEY": self.key})

    def test_9_token_checks_are_rate_limited(self):
        """A client without a token cannot make the api look tokens up
        without bound: each well-formed envd or port token that fails is paid
        from its address's budget, and past it the answer is 429 before any
        lookup; good tokens are paid back, and the budget refills."""
        import time
        a = self.server.addr
        sb = self.create(self.key)
        try:
            def files(token):
                return raw(a, "GET", "/e2b/envd/files?path=/etc/hostname",
                           {"E2b-Sandbox-Id": sb["sandboxID"], "X-Access-Token": token})
            good = sb["envdAccessToken"]
            for _ in range(100):   # good tokens cost nothing
                self.assertNotIn(files(good)[0], (401, 429))
            seen = [files("ale_" + "0" * 40)[0] for _ in range(100)]
            self.assertEqual(seen[0], 401)
            self.assertEqual(set(seen), {401, 429}, seen)
            st, data = files("ale_" + "1" * 40)
            self.assertEqual((st, json.loads(data)["code"]), (429, 429))
            # the port proxy draws on the same budget
            st, data = raw(a, "GET", "/", {"Host": f"8080-{sb['sandboxID']}.{DOMAIN}",
                                           "X-Airlock-Port-Token": "alp_" + "0" * 40})
            self.assertEqual((st, json.loads(data)["error"]["code"]), (429, "rate_limited"))
            time.sleep(1.5)
            self.assertNotIn(files(good)[0], (401, 429))
        finally:
            raw(a, "DELETE", f"/e2b/sandboxes/{sb['sandboxID']}", {"X-API-KEY": self.key})

    def db_write(self, query, *args):
        """A write to the instance's database behind the api's back, as
        another api of a cluster on the same database would make it."""
        if self.pg:
            return self.pg.query(query, args)
        import sqlite3
        db = sqlite3.connect(os.path.join(self.server.dir, "db", "airlock.db"), timeout=30)
        try:
            db.execute(query, args)
            db.commit()
        finally:
            db.close()

    def test_6_tokens_end_with_their_key(self):
        """Every port and envd token records the API key that got it; a
        revoked key's tokens are refused at the next request, here and on
        any api of the database (the check joins api_keys, no cache), and
        DELETE /v1/keys/{id} deletes them."""
        a = self.server.addr
        k3 = self.api.call("POST", "/v1/keys", {"tenant": self.tenant["id"]})
        sb = self.create(k3["key"])
        sid = sb["sandboxID"]
        try:
            st, data = raw(a, "POST", f"/v1/sandboxes/{sid}/port-tokens",
                           {"Authorization": "Bearer " + k3["key"],
                            "Content-Type": "application/json"}, json.dumps({"port": 8080}))
            self.assertEqual(st, 201, data)
            port_token = json.loads(data)["token"]

            def envd():
                return raw(a, "GET", "/e2b/envd/files?path=/etc/hostname",
                           {"E2b-Sandbox-Id": sid, "X-Access-Token": sb["envdAccessToken"]})[0]

            def port():
                return raw(a, "GET", "/", {"Host": f"8080-{sid}.{DOMAIN}",
                                           "X-Airlock-Port-Token": port_token})[0]
            self.assertNotIn(envd(), (401, 429))
            self.assertNotIn(port(), (401, 429))
            # revoked by another api: this one's key cache does not matter
            self.db_write("UPDATE api_keys SET revoked = 1 WHERE id = ?", k3["id"])
            self.assertEqual((envd(), port()), (401, 401))
            self.db_write("UPDATE api_keys SET revoked = 0 WHERE id = ?", k3["id"])
            self.assertNotIn(envd(), (401, 429))
            self.assertEqual(self.db_rows("SELECT count(*) FROM port_tokens WHERE key_id = ?",
                                          k3["id"]), [(2,)])
            # revoked here: refused, and the rows are gone
            self.assertEqual(raw(a, "DELETE", f"/v1/keys/{k3['id']}",
                                 {"Authorization": "Bearer " + self.server.admin_key})[0], 204)
            self.assertEqual((envd(), port()), (401, 401))
            self.assertEqual(self.db_rows("SELECT count(*) FROM port_tokens WHERE key_id = ?",
                                          k3["id"]), [(0,)])
            # the tenant's other key gets a fresh envd token for the sandbox
            st, data = raw(a, "POST", f"/e2b/v2/sandboxes/{sid}/connect",
                           {"X-API-KEY": self.key, "Content-Type": "application/json"}, b"{}")
            self.assertEqual(st, 200, data)
            fresh = json.loads(data)["envdAccessToken"]
            self.assertNotIn(raw(a, "GET", "/e2b/envd/files?path=/etc/hostname",
                                 {"E2b-Sandbox-Id": sid, "X-Access-Token": fresh})[0], (401, 429))
            # a day, not thirty
            (exp, made), = self.db_rows("SELECT expires_at, created_at FROM port_tokens"
                                        " WHERE sandbox_id = ? AND port = 49983", sid)
            self.assertEqual(exp - made, 86400 * 1000)
        finally:
            raw(a, "DELETE", f"/e2b/sandboxes/{sid}", {"X-API-KEY": self.key})


if __name__ == "__main__":
    import shutil
    if not shutil.which("node") or not shutil.which("npm"):
        print("skip: the e2b SDK suite needs node and npm (scripts/setup-deps.sh installs them)")
        sys.exit(77)
    main()
