"""BYOK's transit key service over TLS, and what a network attacker between
the node and it can do (docs/DESIGN.md "Bring your own key"), through the
real API and tests/kms/kms.py serving HTTPS with a test CA made here with
the openssl CLI (a certificate for 127.0.0.1 and localhost):

- https with the right CA (and the right pin) works; a wrong CA, a wrong
  pin, a certificate for another name are refused with an error naming
  the check, and nothing changes;
- plain http:// to a host that is not loopback is refused by the config
  check unless insecure_http is set, which the API then shows with a
  warning (the host here is `127.1`: not a loopback name by the rule, so
  the rule applies, while every packet still stays on this machine);
- a spoofed revocation (an impostor on the service's port answering 403 in
  the service's own shape, with a certificate of another CA) stops
  nothing: the tenant's sandbox keeps running, the key reads as
  unreachable, and the impostor never saw the token;
- a real revocation over https suspends the tenant's running sandbox
  (sealed), it restores with its files once the key is enabled again; a
  sandbox that cannot be sealed (the object store refuses) is paused and
  marked, not destroyed, and resumes with its files."""
import json
import os
import shutil
import tempfile
import time

from harness import main
from test_byok import TTL, ByokBase, Kms
from testpki import cert_sha256, make_ca, make_cert


def server_cert(*args):
    """(certificate, key), the order Kms(tls=...) takes."""
    key, crt = make_cert(*args)
    return crt, key


class ByokTlsTest(ByokBase):

    @classmethod
    def setUpClass(cls):
        cls.pki = tempfile.mkdtemp(prefix="airlock-kms-pki-")
        os.chmod(cls.pki, 0o755)   # the node (user airlock) reads the CA file
        try:
            ca_key, cls.ca = make_ca(cls.pki, "ca")
            other_key, cls.other_ca = make_ca(cls.pki, "other")
            cls.cert = server_cert(cls.pki, "kms", ca_key, cls.ca, "IP:127.0.0.1,DNS:localhost")
            cls.spoof_cert = server_cert(cls.pki, "spoof", other_key, cls.other_ca,
                                       "IP:127.0.0.1,DNS:localhost")
            cls.elsewhere = server_cert(cls.pki, "elsewhere", ca_key, cls.ca,
                                      "DNS:kms.elsewhere.test")
            for f in os.listdir(cls.pki):
                os.chmod(os.path.join(cls.pki, f), 0o644 if f.endswith(".pem") else 0o600)
            cls.kms = Kms(tls=cls.cert, ca=cls.ca)
        except Exception:
            shutil.rmtree(cls.pki, ignore_errors=True)
            raise
        try:
            super().setUpClass()
        except Exception:
            cls.kms.stop()
            shutil.rmtree(cls.pki, ignore_errors=True)
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            cls.kms.stop()
            shutil.rmtree(cls.pki, ignore_errors=True)

    def put(self, tenant, kms, key, **extra):
        body = {"provider": "transit", "url": kms.url, "key_name": key,
                "token_file": kms.token_file}
        body.update(extra)
        return self.api.raw("PUT", f"/v1/tenants/{tenant}/encryption", body)

    def tls_tenant(self, name, kms=None):
        kms = kms or self.kms
        t, client = self.new_tenant(name)
        key = "k-" + name
        self.assertEqual(kms.post(f"/v1/transit/keys/{key}")[0], 204)
        st, data, _ = self.put(name, kms, key, ca_file=self.ca)
        self.assertEqual(st, 200, data)
        enc = json.loads(data)
        self.assertEqual((enc["state"], enc["transport"], enc["ca_file"], enc["insecure_http"]),
                         ("enabled", "https", self.ca, False), enc)
        return t, client, key

    def refused(self, st, data, words):
        self.assertEqual(st, 502, data)
        err = json.loads(data)["error"]
        self.assertEqual(err["code"], "key_service", err)
        for w in words:
            self.assertIn(w, err["message"])

    # ---- the channel -------------------------------------------------------------

    def test_https_checks(self):
        t, client, key = self.tls_tenant("tls-ok")
        base = "/v1/tenants/tls-ok/encryption"
        sid = self.make(client)
        self.sh(client, sid, "echo over-tls > /root/f && sync")
        self.suspend(client, sid)
        self.restore(client, sid)
        self.assertEqual(self.sh(client, sid, "cat /root/f")[1].strip(), "over-tls")
        # the right pin: kept and shown
        pin = cert_sha256(self.cert[0])
        st, data, _ = self.put("tls-ok", self.kms, key, ca_file=self.ca, pin_sha256=pin)
        self.assertEqual(st, 200, data)
        self.assertEqual(json.loads(data)["pin_sha256"], pin)
        # refused, each naming its check; the settings stay as they were
        st, data, _ = self.put("tls-ok", self.kms, key, ca_file=self.other_ca)
        self.refused(st, data, ["certificate", "unable to get local issuer"])
        st, data, _ = self.put("tls-ok", self.kms, key)   # the system's CAs
        self.refused(st, data, ["certificate"])
        st, data, _ = self.put("tls-ok", self.kms, key, ca_file=self.ca,
                               pin_sha256=cert_sha256(self.spoof_cert[0]))
        self.refused(st, data, ["pinned", pin])
        st, data, _ = self.put("tls-ok", self.kms, key, ca_file="/nonexistent/ca.pem")
        self.refused(st, data, ["/nonexistent/ca.pem"])
        elsewhere = Kms(tls=self.elsewhere, ca=self.ca)
        try:
            st, data, _ = self.put("tls-ok", elsewhere, "k-x", ca_file=self.ca)
            self.refused(st, data, ["certificate", "mismatch"])
        finally:
            elsewhere.stop()
        enc = self.api.call("GET", base)
        self.assertEqual((enc["url"], enc["pin_sha256"], enc["state"]),
                         (self.kms.url, pin, "enabled"), enc)
        self.assertEqual(self.sh(client, sid, "cat /root/f")[1].strip(), "over-tls")

    def test_plain_http_rules(self):
        """Config only: no packet leaves this machine (127.1 is 127.0.0.1)."""
        t, client = self.new_tenant("plainhttp")
        plain = Kms()
        try:
            self.assertEqual(plain.post("/v1/transit/keys/k-p")[0], 204)
            port = plain.addr.rsplit(":", 1)[1]
            body = {"provider": "transit", "url": f"http://127.1:{port}", "key_name": "k-p",
                    "token_file": plain.token_file}
            st, data, _ = self.api.raw("PUT", "/v1/tenants/plainhttp/encryption", body)
            self.assertEqual(st, 400, data)
            err = json.loads(data)["error"]
            self.assertEqual(err["code"], "invalid_field", err)
            self.assertIn("insecure_http", err["message"])
            for bad in ({"url": "http://10.1.2.3:8200"}, {"url": "http://kms.example:8200"},
                        {"url": f"https://127.0.0.1:{port}", "insecure_http": True},
                        {"url": plain.url, "ca_file": self.ca},
                        {"url": f"https://127.0.0.1:{port}", "pin_sha256": "12ab"},
                        {"insecure_http": "yes"}):
                st, data, _ = self.api.raw("PUT", "/v1/tenants/plainhttp/encryption",
                                           dict(body, **bad))
                self.assertEqual(st, 400, (bad, data))
            self.assertEqual(self.api.call("GET", "/v1/tenants/plainhttp/encryption")["provider"],
                             "local")
            # loopback by address: allowed, shown as such
            enc = self.api.call("PUT", "/v1/tenants/plainhttp/encryption",
                                dict(body, url=plain.url))
            self.assertEqual((enc["transport"], enc["insecure_http"]), ("http-loopback", False))
            self.assertNotIn("warning", enc)
            # the operator's explicit choice: allowed, and shown
            enc = self.api.call("PUT", "/v1/tenants/plainhttp/encryption",
                                dict(body, insecure_http=True))
            self.assertEqual((enc["transport"], enc["insecure_http"], enc["state"]),
                             ("http-insecure", True, "enabled"), enc)
            self.assertIn("in clear", enc["warning"])
            enc = self.api.call("GET", "/v1/tenants/plainhttp/encryption")
            self.assertEqual((enc["transport"], enc["insecure_http"]), ("http-insecure", True))
            with open(self.server.log_path, errors="replace") as f:
                self.assertIn("insecure_http", f.read())
            # the doctor (GET /v1/node/doctor, `airlock doctor --remote`) says so
            kms = [c for c in self.api.call("GET", "/v1/node/doctor")["checks"]
                   if c["name"] == "kms"]
            warn = [c for c in kms if c["status"] == "warn" and t["id"] in c["detail"]]
            self.assertEqual(len(warn), 1, kms)
            self.assertIn("insecure_http", warn[0]["detail"])
            self.assertIn("https://", warn[0]["fix"])
            # back to local: the plain service is not left in use
            self.api.call("PUT", "/v1/tenants/plainhttp/encryption", {"provider": "local"})
            kms = [c for c in self.api.call("GET", "/v1/node/doctor")["checks"]
                   if c["name"] == "kms"]
            self.assertFalse([c for c in kms if t["id"] in c["detail"]], kms)
        finally:
            plain.stop()

    # ---- revocation ----------------------------------------------------------

    def test_spoofed_revocation_stops_nothing(self):
        mine = Kms(tls=self.cert, ca=self.ca)
        spoof = None
        try:
            t, client, key = self.tls_tenant("spoofed", kms=mine)
            sid = self.make(client)
            self.sh(client, sid, "echo alive > /root/f && sync")
            port = int(mine.addr.rsplit(":", 1)[1])
            mine.kill()
            spoof = Kms(tls=self.spoof_cert, spoof=True, port=port, ca=self.other_ca)
            time.sleep(3 * TTL + 2)
            # the impostor was asked (the watch and the check), and refused
            st, stats = spoof.post("/admin/stats")
            self.assertEqual(st, 200)
            self.assertGreater(stats.get("tls_refused", 0), 0, stats)   # it was asked
            self.assertEqual(stats.get("calls", 0), 0, stats)   # TLS refused: no request
            self.assertEqual(stats.get("with_token", 0), 0, stats)
            g = client.call("GET", f"/v1/sandboxes/{sid}")
            self.assertEqual(g["state"], "running", g)
            self.assertEqual(self.sh(client, sid, "cat /root/f")[1].strip(), "alive")
            enc = self.api.call("GET", "/v1/tenants/spoofed/encryption")
            self.assertEqual(enc["state"], "unreachable", enc)
            st, data, _ = client.raw("POST", "/v1/sandboxes", {"template": "busybox"})
            self.assertEqual(st, 503, data)
            self.assertEqual(json.loads(data)["error"]["code"], "key_unavailable")
            self.assertNotIn("key_revoked",
                             json.dumps(client.call("GET", f"/v1/sandboxes/{sid}/events")))
        finally:
            mine.stop()
            if spoof:
                spoof.stop()

    def test_revocation_suspends_then_restores(self):
        t, client, key = self.tls_tenant("revoked-tls")
        sealed = self.make(client)
        self.sh(client, sealed, "echo sealed-state > /root/f && sync")
        self.assertEqual(self.kms.post(f"/admin/keys/{key}/disable")[0], 200)
        self.wait_state(client, sealed, "suspended", timeout=30)
        events = json.dumps(client.call("GET", f"/v1/sandboxes/{sealed}/events"))
        self.assertIn("key_revoked", events)
        self.assertEqual(self.api.call("GET", "/v1/tenants/revoked-tls/encryption")["state"],
                         "revoked")
        st, body = self.restore(client, sealed, expect=(403,))
        self.assertEqual(body["error"]["code"], "key_revoked", body)
        self.assertEqual(self.kms.post(f"/admin/keys/{key}/enable")[0], 200)
        time.sleep(TTL + 0.5)
        self.restore(client, sealed)
        self.assertEqual(self.sh(client, sealed, "cat /root/f")[1].strip(), "sealed-state")

    def test_revocation_unsealable_is_paused(self):
        """The object store refuses (its directory made read-only): the
        sandbox cannot be sealed, so it is paused and marked, not destroyed."""
        t, client, key = self.tls_tenant("unsealable")
        sid = self.make(client)
        self.sh(client, sid, "echo paused-state > /root/f && sync")
        store = os.path.join(self.server.dir, "objects")
        dirs = [store, os.path.join(store, "sandboxes"), os.path.join(store, "templates")]
        modes = {d: os.stat(d).st_mode & 0o7777 for d in dirs if os.path.isdir(d)}
        for d in modes:
            os.chmod(d, 0o555)
        try:
            self.assertEqual(self.kms.post(f"/admin/keys/{key}/disable")[0], 200)
            self.wait_state(client, sid, "paused", timeout=30)
            events = json.dumps(client.call("GET", f"/v1/sandboxes/{sid}/events"))
            self.assertIn("not sealed", events)
            self.assertNotIn("no key wrapped before", events)   # the store, not the key
        finally:
            for d, m in modes.items():
                os.chmod(d, m)
        self.assertEqual(self.kms.post(f"/admin/keys/{key}/enable")[0], 200)
        time.sleep(TTL + 0.5)
        client.call("POST", f"/v1/sandboxes/{sid}/resume", {})
        self.assertEqual(self.sh(client, sid, "cat /root/f")[1].strip(), "paused-state")


if __name__ == "__main__":
    main()
