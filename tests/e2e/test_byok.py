"""Bring your own key (docs/DESIGN.md "Bring your own key"), through the real
API and a real transit-shaped key service (tests/kms/kms.py, the tenant's
KMS: the outer boundary), on the ns backend and the default file:// store:

- a random 32-byte marker written into a sandbox's file and held in a
  process's memory appears in no byte of any object of the tenant after a
  suspend (a tenant with no encryption configured: the local default);
  the control run with encrypt_artifacts = false finds it;
- revoking the tenant's key: create answers 403 key_revoked, restore fails
  key_revoked and leaves the snapshot as it was, a running sandbox of the
  tenant is suspended (sealed, not destroyed); every wrapped data key,
  tried with every other tenant's key and the node's keys, opens under
  none; re-enabling makes both suspended sandboxes restorable with their
  files (test_byok_tls: the same over https, spoofed answers, the
  transport rules);
- tampering (artifacts swapped between sandboxes, a chunk moved, the last
  chunk cut off, an older manifest replayed) fails each restore naming
  what failed, leaves the sandbox suspended, and the restore works once
  the bytes are put back;
- rotate rewraps every data key under the newest version and everything
  restores; the old version alone cannot unwrap the new wrappings, and its
  key file is deleted (retired) once nothing is wrapped under it;
- no key material, data key or KMS token in a log, a database row, an API
  answer, or the sandbox's env and files.

ns keeps the files across a suspend, not the processes (test_suspend): the
"counting process" part is checked as the counter's file; the marker held
in a process's memory is still searched for (ns writes no memory image)."""
import base64
import glob
import hashlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from harness import (BACKEND, BIN, CLI, DB, SRC, AirlockTestCase, ApiError, S3Server, main,
                     node_user)

TTL = 1   # kms_cache_ttl: a revocation is seen within this (plus the watch's round)


class Kms:
    """tests/kms/kms.py on 127.0.0.1, with its token in a file the node
    (user airlock) can read; stop() ends it and removes the file."""

    def __init__(self, fail_5xx=0, huge=False, tls=None, spoof=False, port=0, ca=None):
        """tls: (cert, key) to serve HTTPS with (ca: the CA file that
        verifies it, for this test's own calls); spoof: an impostor that
        answers every transit call 403 (kms.py --spoof); port: a fixed one."""
        self.dir = tempfile.mkdtemp(prefix="airlock-kms-")
        os.chmod(self.dir, 0o755)
        self.token = "s." + base64.b32encode(os.urandom(20)).decode().rstrip("=")
        self.token_file = os.path.join(self.dir, "token")
        with open(self.token_file, "w") as f:
            f.write(self.token + "\n")
        pw = node_user()
        os.chown(self.token_file, pw.pw_uid, pw.pw_gid)
        os.chmod(self.token_file, 0o400)
        self.proc = subprocess.Popen([sys.executable, os.path.join(SRC, "tests/kms/kms.py"),
                                      "--token-file", self.token_file,
                                      "--fail-5xx", str(fail_5xx), "--port", str(port)] +
                                     (["--huge"] if huge else []) +
                                     (["--spoof"] if spoof else []) +
                                     (["--tls-cert", tls[0], "--tls-key", tls[1]] if tls
                                      else []),
                                     stdout=subprocess.PIPE, start_new_session=True)
        line = self.proc.stdout.readline().decode().split()
        self.addr = line[1]
        self.url = ("https://" if tls else "http://") + self.addr
        self.ssl = None
        if tls:
            import ssl
            self.ssl = ssl.create_default_context(cafile=ca)

    def post(self, path, body=None, token=True):
        req = urllib.request.Request(self.url + path, data=json.dumps(body or {}).encode(),
                                     method="POST")
        if token:
            req.add_header("X-Vault-Token", self.token)
        try:
            with urllib.request.urlopen(req, timeout=10, context=self.ssl) as r:
                return r.status, json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")

    def kill(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=20)
        self.proc.stdout.close()

    def stop(self):
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def rd(path):
    with open(path, "rb") as f:
        return f.read()


def wr(path, data):
    """Write an object of the file:// store as someone with write access to
    the store would: its bytes and the digest the store keeps beside them
    (the xattr; so the store's own check passes and Airlock's must act)."""
    with open(path, "r+b") as f:
        f.truncate(0)
        f.write(data)
    os.setxattr(path, "user.airlock.sha256", hashlib.sha256(data).hexdigest().encode())


class ByokBase(AirlockTestCase):
    extra_args = ("--set", "suspend_after_idle=0", "--set", f"kms_cache_ttl={TTL}")

    def setUp(self):
        self.sids = []

    def tearDown(self):
        for client, sid in self.sids:
            try:
                client.delete(sid)
            except ApiError:
                pass

    def make(self, client):
        sid = client.create()["id"]
        self.sids.append((client, sid))
        return sid

    def sh(self, client, sid, script):
        code, out, err, _ = client.exec(sid, ["sh", "-c", script])
        return code, out.decode(errors="replace"), err.decode(errors="replace")

    def suspend(self, client, sid):
        r = client.call("POST", f"/v1/sandboxes/{sid}/suspend", {})
        self.assertEqual(r["state"], "suspended", r)
        return r["snapshot_id"]

    def restore(self, client, sid, expect=(200,)):
        st, data, _ = client.raw("POST", f"/v1/sandboxes/{sid}/restore", {})
        self.assertIn(st, expect, data)
        return st, json.loads(data)

    def objdir(self, sid, snap=None):
        d = os.path.join(self.server.dir, "objects", "sandboxes", sid)
        return os.path.join(d, snap) if snap else d

    def objects(self, sid):
        return sorted(p for p in glob.glob(os.path.join(self.objdir(sid), "**"), recursive=True)
                      if os.path.isfile(p))

    def write_marker(self, client, sid, marker):
        """The marker in a file, and held by a process (in its memory: its
        argument and its environment)."""
        client.call("PUT", f"/v1/sandboxes/{sid}/files?path=/root/marker.bin", marker,
                    {"Content-Type": "application/octet-stream"})
        code, _, err = self.sh(client, sid, f"M={marker.hex()} sh -c 'while :; do sleep 1; done' "
                                            f"{marker.hex()} >/dev/null 2>&1 & sync")
        self.assertEqual(code, 0, err)

    def marker_found(self, paths, marker):
        forms = [marker, marker.hex().encode(), base64.b64encode(marker)]
        hits = []
        for p in paths:
            with open(p, "rb") as f:
                data = f.read()
            hits += [(p, form[:8]) for form in forms if form in data]
        return hits

    def wait_state(self, client, sid, want, timeout=20):
        deadline = time.time() + timeout
        while time.time() < deadline:
            st = client.call("GET", f"/v1/sandboxes/{sid}")["state"]
            if st == want:
                return
            time.sleep(0.2)
        self.fail(f"sandbox {sid} is {st}, not {want}")


class ByokTest(ByokBase):

    @classmethod
    def setUpClass(cls):
        cls.kms = Kms()
        try:
            super().setUpClass()
        except Exception:
            cls.kms.stop()
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            cls.kms.stop()

    def transit_tenant(self, name):
        t, client = self.new_tenant(name)
        key = "k-" + name
        self.assertEqual(self.kms.post(f"/v1/transit/keys/{key}")[0], 204)
        enc = self.api.call("PUT", f"/v1/tenants/{name}/encryption",
                            {"provider": "transit", "url": self.kms.url, "key_name": key,
                             "token_file": self.kms.token_file})
        self.assertEqual((enc["provider"], enc["state"], enc["key_name"]),
                         ("transit", "enabled", key), enc)
        return t, client, key

    # ---- the marker ----------------------------------------------------------

    def test_marker_absent_default_local(self):
        t, client = self.new_tenant("plain-default")
        enc = self.api.call("GET", "/v1/tenants/plain-default/encryption")
        self.assertEqual((enc["provider"], enc["configured"], enc["key_id"]),
                         ("local", False, "default"), enc)
        sid = self.make(client)
        marker = os.urandom(32)
        self.write_marker(client, sid, marker)
        snap = self.suspend(client, sid)
        objs = self.objects(sid)
        self.assertIn(os.path.join(self.objdir(sid, snap), "manifest.json"), objs)
        self.assertIn(os.path.join(self.objdir(sid, snap), "disk"), objs)
        for p in objs:
            with open(p, "rb") as f:
                self.assertEqual(f.read(6), b"ALSEAL", p)
        self.assertEqual(self.marker_found(objs, marker), [])
        # the key file: 0600, the node's user's, in a 0700 directory
        kf = os.path.join(self.server.dir, "tenant-keys", t["id"], "default.v1")
        st = os.stat(kf)
        self.assertEqual((st.st_mode & 0o777, st.st_uid, st.st_size),
                         (0o600, node_user().pw_uid, 32))
        self.assertEqual(os.stat(os.path.dirname(kf)).st_mode & 0o777, 0o700)
        # and it comes back whole
        self.restore(client, sid)
        st, data, _ = client.raw("GET", f"/v1/sandboxes/{sid}/files?path=/root/marker.bin")
        self.assertEqual((st, data), (200, marker))
        self.assertEqual(self.objects(sid), [])
        self.assertEqual(self.db_rows("SELECT count(*) FROM data_keys WHERE sandbox_id=?", sid),
                         [(0,)])

    # ---- revocation ----------------------------------------------------------

    def test_revoke_then_reenable(self):
        t, client, key = self.transit_tenant("acme")
        other_t, other, _ = self.transit_tenant("other")
        sid = self.make(client)
        self.sh(client, sid, "mkdir -p /root/w && echo keep-me > /root/w/note && "
                             "i=0; while [ $i -lt 5 ]; do i=$((i+1)); echo $i > /root/w/count; done")
        # a counting process (vm: it carries on after the restore; ns keeps
        # only the files, so there its counter file is what is checked)
        code, out, _ = self.sh(client, sid, "sh -c 'i=0; while :; do i=$((i+1)); "
                                            "echo $i > /root/w/c; sleep 0.2; done' "
                                            ">/dev/null 2>&1 & echo $!")
        counter_pid = out.strip()
        time.sleep(1.2)
        counted = int(self.sh(client, sid, "cat /root/w/c")[1])
        self.assertGreater(counted, 1)
        snap = self.suspend(client, sid)
        before = {p: rd(p) for p in self.objects(sid)}
        running = self.make(client)
        self.assertEqual(self.sh(client, running, "echo still-here > /root/live && sync")[0], 0)
        other_sid = self.make(other)
        other_snap = self.suspend(other, other_sid)
        self.assertEqual(self.kms.post(f"/admin/keys/{key}/disable")[0], 200)
        time.sleep(TTL + 1.5)
        # create: 403 key_revoked
        st, data, _ = client.raw("POST", "/v1/sandboxes", {"template": "busybox"})
        self.assertEqual(st, 403, data)
        self.assertEqual(json.loads(data)["error"]["code"], "key_revoked")
        # restore: key_revoked, the snapshot as it was
        st, body = self.restore(client, sid, expect=(403,))
        self.assertEqual(body["error"]["code"], "key_revoked", body)
        g = client.call("GET", f"/v1/sandboxes/{sid}")
        self.assertEqual((g["state"], g["snapshot_id"]), ("suspended", snap))
        self.assertEqual({p: rd(p) for p in self.objects(sid)}, before)
        # the running one is suspended (sealed under a key wrapped before
        # the revocation), not destroyed
        self.wait_state(client, running, "suspended")
        self.assertIn("key_revoked",
                      json.dumps(client.call("GET", f"/v1/sandboxes/{running}/events")))
        st, body = self.restore(client, running, expect=(403,))
        self.assertEqual(body["error"]["code"], "key_revoked", body)
        self.assertEqual(self.api.call("GET", "/v1/tenants/acme/encryption")["state"], "revoked")
        # another tenant is untouched
        self.make(other)
        # every wrapped data key with every other tenant's key: none opens
        self.cross_unwrap()
        # re-enabled: restorable again, files intact
        self.assertEqual(self.kms.post(f"/admin/keys/{key}/enable")[0], 200)
        time.sleep(TTL + 0.5)
        self.restore(client, sid)
        code, out, _ = self.sh(client, sid, "cat /root/w/note /root/w/count")
        self.assertEqual((code, out.split()), (0, ["keep-me", "5"]))
        time.sleep(0.6)
        code, out, _ = self.sh(client, sid, f"cat /root/w/c; kill -0 {counter_pid} && echo alive")
        self.assertGreaterEqual(int(out.split()[0]), counted, out)
        if BACKEND == "vm":
            self.assertEqual(out.split()[-1], "alive", out)
        # the one the revocation suspended comes back with its files
        self.restore(client, running)
        code, out, _ = self.sh(client, running, "cat /root/live")
        self.assertEqual((code, out.strip()), (0, "still-here"))
        self.make(client)
        self.restore(other, other_sid)
        self.assertNotEqual(other_snap, snap)

    def cross_unwrap(self):
        """Every wrapped data key, tried with every tenant's key but its own
        (transit: the key service's other keys; local: the other tenants'
        key files, under either tenant's AAD) and with the node's own keys
        (the vault's private key, each key file): none opens."""
        rows = self.db_rows("SELECT id, tenant_id, provider, wrapped FROM data_keys")
        self.assertTrue(rows)
        tenants = {r[0]: r[1] for r in self.db_rows("SELECT id, name FROM tenants")}
        keyfiles = glob.glob(os.path.join(self.server.dir, "tenant-keys", "*", "*"))
        node_keys = [p for p in glob.glob(os.path.join(self.server.dir, "keys", "*"))
                     if os.path.getsize(p) == 32] + keyfiles
        transit = [("k-" + tenants[t]) for t in tenants if tenants[t] in ("acme", "other")]
        tried = 0
        for _, owner, provider, wrapped in rows:
            if provider == "transit":
                for name in transit:
                    if name == "k-" + tenants[owner]:
                        continue
                    st, _ = self.kms.post(f"/v1/transit/decrypt/{name}", {"ciphertext": wrapped})
                    self.assertNotEqual(st, 200, (owner, name))
                    tried += 1
                # the ciphertext's bytes are no key of the node's either
                raw = base64.b64decode(wrapped.split(":", 2)[2])
            else:
                raw = base64.b64decode(wrapped.split(":", 2)[2])
            v = wrapped.split(":")[1][1:]
            for kf in node_keys:
                if provider == "local" and kf.startswith(os.path.join(self.server.dir,
                                                                       "tenant-keys", owner, "")):
                    continue
                with open(kf, "rb") as f:
                    k = f.read()
                for t in tenants:
                    for key_id in ("default",):
                        aad = b"airlock-local-wrap-v1\0" + t.encode() + b"\0" + \
                            key_id.encode() + b"\0" + v.encode()
                        for nonce_len in (12,):
                            try:
                                AESGCM(k).decrypt(raw[:nonce_len], raw[nonce_len:], aad)
                                self.fail(f"{kf} opened a data key of {owner}")
                            except Exception as e:
                                if isinstance(e, AssertionError):
                                    raise
                        tried += 1
        self.assertGreater(tried, 0)

    # ---- tampering -----------------------------------------------------------

    def tamper_case(self, client, sid, snap, change, want, others=()):
        """change() the store's bytes; the restore fails naming want; the
        sandbox stays suspended; then the bytes (its and others') go back."""
        saved = {p: rd(p) for s in (sid,) + tuple(others) for p in self.objects(s)}
        change()
        st, body = self.restore(client, sid, expect=(502,))
        self.assertEqual(body["error"]["code"], "bad_artifact", body)
        self.assertIn(want, body["error"]["message"])
        g = client.call("GET", f"/v1/sandboxes/{sid}")
        self.assertEqual((g["state"], g["snapshot_id"]), ("suspended", snap))
        for p, data in saved.items():
            wr(p, data)
        for s in (sid,) + tuple(others):
            for p in self.objects(s):
                if p not in saved:
                    os.unlink(p)

    def test_tamper(self):
        t, client = self.new_tenant("tamper")
        a, b = self.make(client), self.make(client)
        for sid in (a, b):
            # > 2 chunks of disk stream: incompressible data
            code, _, err = self.sh(client, sid, "head -c 3145728 /dev/urandom > /root/blob && "
                                               f"echo {sid} > /root/who && sync")
            self.assertEqual(code, 0, err)
        snap_a, snap_b = self.suspend(client, a), self.suspend(client, b)
        disk_a = os.path.join(self.objdir(a, snap_a), "disk")
        disk_b = os.path.join(self.objdir(b, snap_b), "disk")
        man_a = os.path.join(self.objdir(a, snap_a), "manifest.json")

        def swap():
            da, db = rd(disk_a), rd(disk_b)
            wr(disk_a, db)
            wr(disk_b, da)
        self.tamper_case(client, a, snap_a, swap, "artifact disk", others=(b,))

        def move_chunk():
            d = rd(disk_a)
            hl = int.from_bytes(d[32:34], "big")
            cl = (1 << 20) + 16
            d = d[:hl] + d[hl + cl:hl + 2 * cl] + d[hl:hl + cl] + d[hl + 2 * cl:]
            wr(disk_a, d)
        self.tamper_case(client, a, snap_a, move_chunk, "artifact disk")

        def truncate_last():
            d = rd(disk_a)
            hl = int.from_bytes(d[32:34], "big")
            cl = (1 << 20) + 16
            n = (len(d) - hl - 1) // cl          # full chunks before the last
            wr(disk_a, d[:hl + n * cl])
        self.tamper_case(client, a, snap_a, truncate_last, "artifact disk")

        def manifest_of_b():
            wr(man_a, rd(os.path.join(self.objdir(b, snap_b), "manifest.json")))
        self.tamper_case(client, a, snap_a, manifest_of_b, "artifact manifest.json")

        # replay: an older manifest of the same sandbox
        old_manifest = rd(man_a)
        self.restore(client, a)
        snap_a2 = self.suspend(client, a)
        man_a2 = os.path.join(self.objdir(a, snap_a2), "manifest.json")
        self.tamper_case(client, a, snap_a2, lambda: wr(man_a2, old_manifest),
                         "replayed")
        # every bytes put back: both restore, each its own
        for sid in (a, b):
            self.restore(client, sid)
            code, out, _ = self.sh(client, sid, "cat /root/who")
            self.assertEqual(out.strip(), sid)

    # ---- rotation ------------------------------------------------------------

    def test_rotate(self):
        t, client = self.new_tenant("rot")
        sid = self.make(client)
        self.sh(client, sid, "echo r1 > /root/f && sync")
        self.suspend(client, sid)
        (w1,), = self.db_rows("SELECT wrapped FROM data_keys WHERE sandbox_id=?", sid)
        self.assertTrue(w1.startswith("local:v1:"), w1)
        kdir = os.path.join(self.server.dir, "tenant-keys", t["id"])
        # what a copy of the key taken before the rotation holds
        with open(os.path.join(kdir, "default.v1"), "rb") as f:
            keys = {1: f.read()}
        r = self.api.call("POST", "/v1/tenants/rot/encryption/rotate", {})
        self.assertEqual((r["rewrapped"], r["key_version"]), (1, 2), r)
        (w2,), = self.db_rows("SELECT wrapped FROM data_keys WHERE sandbox_id=?", sid)
        self.assertTrue(w2.startswith("local:v2:"), w2)
        # v1 is retired: its key material is gone, only v2 is left
        self.assertEqual(sorted(os.listdir(kdir)), ["default.v2"])
        # the old version alone cannot unwrap the new wrapping; the new can
        raw = base64.b64decode(w2.split(":", 2)[2])
        with open(os.path.join(kdir, "default.v2"), "rb") as f:
            keys[2] = f.read()
        for v, opens in ((1, False), (2, True)):
            k = keys[v]
            for aad_v in ("1", "2"):
                aad = b"airlock-local-wrap-v1\0" + t["id"].encode() + b"\0default\0" + \
                    aad_v.encode()
                try:
                    AESGCM(k).decrypt(raw[:12], raw[12:], aad)
                    ok = True
                except Exception:
                    ok = False
                self.assertEqual(ok, opens and aad_v == "2", (v, aad_v))
        self.restore(client, sid)
        self.assertEqual(self.sh(client, sid, "cat /root/f")[1].strip(), "r1")
        # a second rotation counts on from the newest (v3, not v1 again),
        # retires v2, and what was sealed still restores
        self.suspend(client, sid)
        r = self.api.call("POST", "/v1/tenants/rot/encryption/rotate", {})
        # (the first data key is dropped once its restore is done: 1 or 2)
        self.assertEqual(r["key_version"], 3, r)
        self.assertIn(r["rewrapped"], (1, 2), r)
        self.assertEqual(sorted(os.listdir(kdir)), ["default.v3"])
        self.restore(client, sid)
        self.assertEqual(self.sh(client, sid, "cat /root/f")[1].strip(), "r1")

    def test_rotate_transit(self):
        t, client, key = self.transit_tenant("rotx")
        sid = self.make(client)
        self.sh(client, sid, "echo x1 > /root/f && sync")
        self.suspend(client, sid)
        (w1,), = self.db_rows("SELECT wrapped FROM data_keys WHERE sandbox_id=?", sid)
        self.assertTrue(w1.startswith("vault:v1:"), w1)
        self.assertEqual(self.kms.post(f"/v1/transit/keys/{key}/rotate")[0], 200)
        r = self.api.call("POST", "/v1/tenants/rotx/encryption/rotate", {})
        self.assertEqual(r["rewrapped"], 1, r)
        (w2,), = self.db_rows("SELECT wrapped FROM data_keys WHERE sandbox_id=?", sid)
        self.assertTrue(w2.startswith("vault:v2:"), w2)
        # v1 refused from now on: the new wrapping still opens
        self.assertEqual(self.kms.post(f"/admin/keys/{key}/min_version", {"v": 2})[0], 200)
        self.assertNotEqual(self.kms.post(f"/v1/transit/decrypt/{key}", {"ciphertext": w1})[0], 200)
        time.sleep(TTL + 0.5)
        self.restore(client, sid)
        self.assertEqual(self.sh(client, sid, "cat /root/f")[1].strip(), "x1")

    # ---- the API -------------------------------------------------------------

    def test_api_checks(self):
        t, client = self.new_tenant("apicheck")
        base = "/v1/tenants/apicheck/encryption"
        for body, code in (({"provider": "nope"}, "invalid_field"),
                           ({"provider": "local", "key_id": "../x"}, "invalid_field"),
                           ({"provider": "transit", "url": "ftp://x", "key_name": "k",
                             "token_file": "/t"}, "invalid_field"),
                           ({"provider": "transit", "url": self.kms.url},
                            "invalid_field"),
                           ({"provider": "local", "extra": 1}, "unknown_field")):
            st, data, _ = self.api.raw("PUT", base, body)
            self.assertEqual(st, 400, (body, data))
            self.assertEqual(json.loads(data)["error"]["code"], code, (body, data))
        # a tenant key cannot read or set it
        st, _, _ = client.raw("GET", base)
        self.assertEqual(st, 403)
        st, _, _ = self.api.raw("GET", "/v1/tenants/nobody-here/encryption")
        self.assertEqual(st, 404)
        # a token file that is not there: refused, nothing changed
        st, data, _ = self.api.raw("PUT", base, {"provider": "transit", "url": self.kms.url,
                                                 "key_name": "k", "token_file": "/nonexistent"})
        self.assertEqual(st, 502, data)
        self.assertEqual(self.api.call("GET", base)["provider"], "local")
        # the CLI: set, show, rotate (by the tenant's name)
        env = dict(os.environ, AIRLOCK_URL="http://" + self.server.addr,
                   AIRLOCK_API_KEY=self.server.admin_key)

        def cli(*args):
            r = subprocess.run([CLI, "--json", "tenant", "encryption"] + list(args),
                               capture_output=True, env=env, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            return json.loads(r.stdout)
        r = cli("set", "apicheck", "--provider", "local", "--key-id", "k2")
        self.assertEqual((r["provider"], r["key_id"], r["configured"]), ("local", "k2", True))
        self.assertEqual(cli("show", "apicheck")["key_version"], 1)
        r = cli("rotate", "apicheck")
        self.assertEqual((r["key_version"], r["rewrapped"]), (2, 0), r)
        bad = subprocess.run([CLI, "tenant", "encryption", "set", "apicheck"],
                             capture_output=True, env=env, timeout=60)
        self.assertNotEqual(bad.returncode, 0)

    def test_transit_retries_and_errors(self):
        """The transit client retries 5xx (a key service answering 503 twice
        still works), and a service that is down or refuses the token is a
        clear error that changes nothing."""
        t, client = self.new_tenant("flaky")
        base = "/v1/tenants/flaky/encryption"
        flaky = Kms(fail_5xx=2)
        try:
            self.assertEqual(flaky.post("/v1/transit/keys/k-flaky")[0], 503)   # 1 of 2
            r = self.api.call("PUT", base, {"provider": "transit", "url": flaky.url,
                                            "key_name": "k-flaky",
                                            "token_file": flaky.token_file})
            self.assertEqual((r["provider"], r["state"]), ("transit", "enabled"), r)
            sid = self.make(client)
            self.suspend(client, sid)
            self.restore(client, sid)
            self.suspend(client, sid)
            # the service gone: creates and restores say so (503
            # key_unavailable, not key_revoked), the sandbox stays suspended
            flaky.kill()
            time.sleep(TTL + 0.5)
            st, data, _ = client.raw("POST", "/v1/sandboxes", {"template": "busybox"})
            self.assertEqual(st, 503, data)
            err = json.loads(data)["error"]
            self.assertEqual(err["code"], "key_unavailable", err)
            self.assertIn("key service", err["message"])
            st, body = self.restore(client, sid, expect=(503,))
            self.assertEqual(body["error"]["code"], "key_unavailable", body)
            self.assertEqual(client.call("GET", f"/v1/sandboxes/{sid}")["state"], "suspended")
            self.assertEqual(self.api.call("GET", base)["state"], "unreachable")
        finally:
            flaky.stop()
        # a hostile service answering 16 MiB: refused at 64 KiB, not retried
        huge = Kms(huge=True)
        try:
            t0 = time.time()
            st, data, _ = self.api.raw("PUT", base, {"provider": "transit", "url": huge.url,
                                                     "key_name": "k-h",
                                                     "token_file": huge.token_file})
            self.assertEqual(st, 502, data)
            self.assertIn("larger than", json.loads(data)["error"]["message"])
            self.assertLess(time.time() - t0, 20)
        finally:
            huge.stop()
        # a wrong token: refused (403 from the service reads as revoked)
        wrong = os.path.join(self.kms.dir, "wrong-token")
        with open(wrong, "w") as f:
            f.write("s.not-the-token\n")
        os.chown(wrong, node_user().pw_uid, -1)
        st, data, _ = self.api.raw("PUT", base, {"provider": "transit", "url": self.kms.url,
                                                 "key_name": "k-x", "token_file": wrong})
        self.assertEqual(st, 403, data)
        self.assertEqual(json.loads(data)["error"]["code"], "key_revoked")
        self.assertEqual(self.api.call("GET", base)["url"], flaky.url)
        os.unlink(wrong)

    # ---- nothing in plaintext -------------------------------------------------

    def test_zz_no_secrets_anywhere(self):
        """After the tests above: the token, every local key file's bytes and
        every data key (unwrapped here, for the local ones) appear in no log,
        no DB row, no API answer, not in a sandbox's env or files."""
        t, client, key = self.transit_tenant("secrets")
        sid = self.make(client)
        self.suspend(client, sid)
        self.restore(client, sid)
        self.suspend(client, sid)
        secrets = [self.kms.token.encode()]
        for kf in glob.glob(os.path.join(self.server.dir, "tenant-keys", "*", "*")):
            k = rd(kf)
            secrets += [k, k.hex().encode(), base64.b64encode(k)]
        # the transit-wrapped data key of the suspended sandbox, unwrapped
        (w,), = self.db_rows("SELECT wrapped FROM data_keys WHERE sandbox_id=?", sid)
        st, j = self.kms.post(f"/v1/transit/decrypt/{key}", {"ciphertext": w})
        self.assertEqual(st, 200)
        dk = base64.b64decode(j["data"]["plaintext"])
        secrets += [dk, dk.hex().encode(), j["data"]["plaintext"].encode()]
        # logs
        logs = [self.server.log_path] + glob.glob(os.path.join(self.server.dir, "logs", "*"))
        # the database: every cell of every table
        cells = b""
        if DB == "sqlite":
            db = sqlite3.connect(f"file:{os.path.join(self.server.dir, 'db', 'airlock.db')}"
                                 "?mode=ro", uri=True, timeout=30)
            for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'"):
                for row in db.execute(f"SELECT * FROM {name}"):
                    cells += repr(row).encode()
            db.close()
        # API answers
        answers = json.dumps([self.api.call("GET", f"/v1/tenants/{n}/encryption")
                              for n in ("secrets", "acme", "rot", "plain-default")
                              if self.api.raw("GET", f"/v1/tenants/{n}/encryption")[0] == 200])
        self.restore(client, sid)
        _, env, _ = self.sh(client, sid, "env; cat /proc/1/environ")
        self.assertIn("PATH", env)
        # the sandbox's files: the text forms of every secret, searched by
        # the sandbox's own grep over its whole tree
        pats = [x.decode() for x in secrets if x.isascii() and x.decode().isprintable()]
        pats_file = "/tmp/.byok-pats"
        client.call("PUT", f"/v1/sandboxes/{sid}/files?path={pats_file}",
                    "\n".join(pats).encode(), {"Content-Type": "application/octet-stream"})
        # regular files of the sandbox's own file system only (-xdev: not
        # /proc, /sys, /dev, whose files may never end)
        code, out, _ = self.sh(client, sid, f"find / -xdev -type f ! -path {pats_file} | "
                                            f"xargs grep -lF -f {pats_file}; echo searched")
        self.assertEqual(out.split(), ["searched"], out)
        hay = [("db", cells), ("api", answers.encode()), ("env", env.encode())]
        for p in logs:
            hay.append((p, rd(p)))
        for name, data in hay:
            for s in secrets:
                self.assertNotIn(s, data, name)


class ControlTest(ByokBase):
    """encrypt_artifacts = false (the control and benchmark switch only):
    the same marker IS found in the store, and the manifest is plain JSON."""
    extra_args = ByokBase.extra_args + ("--set", "encrypt_artifacts=false")

    def test_marker_found_without_encryption(self):
        t, client = self.new_tenant("control")
        sid = self.make(client)
        marker = os.urandom(32)
        self.write_marker(client, sid, marker)
        snap = self.suspend(client, sid)
        found = self.marker_found(self.objects(sid), marker)
        self.assertNotEqual(found, [])
        if BACKEND == "vm":
            # the process's memory: in the memory image, once decompressed
            # (zstd), in plaintext when nothing seals it
            mem = [p for p in self.objects(sid) if os.path.basename(p) in ("memory", "vmstate")]
            plain = b"".join(subprocess.run(["zstd", "-dcq", p], capture_output=True).stdout
                             for p in mem)
            self.assertIn(marker.hex().encode(), plain)
        print(f"control: the marker is in {sorted(set(os.path.basename(p) for p, _ in found))}",
              file=sys.stderr)
        with open(os.path.join(self.objdir(sid, snap), "manifest.json")) as f:
            man = json.load(f)
        self.assertEqual((man["kind"], man["template"]["name"]),
                         ("memory" if BACKEND == "vm" else "disk", "busybox"))
        self.assertEqual(set(man["shape"]), {"memory_mb", "cpus", "disk_mb"})
        self.assertIn("disk", man["artifacts"])
        self.assertEqual(self.db_rows("SELECT count(*) FROM data_keys"), [(0,)])
        self.restore(client, sid)
        st, data, _ = client.raw("GET", f"/v1/sandboxes/{sid}/files?path=/root/marker.bin")
        self.assertEqual((st, data), (200, marker))


class S3Test(ByokBase):
    """The marker test again with the S3-compatible store (tests/s3): every
    byte of every object of the sandbox, read back through the store."""
    s3 = None

    @classmethod
    def setUpClass(cls):
        cls.s3 = S3Server.start()
        if not cls.s3:
            raise unittest.SkipTest("no S3 server (tests/s3/setup.sh)")
        os.environ["AWS_ACCESS_KEY_ID"] = os.environ["AWS_SECRET_ACCESS_KEY"] = "S3RVER"
        cls.extra_args = ByokBase.extra_args + ("--object-store", cls.s3.url)
        try:
            super().setUpClass()
        except Exception:
            cls.s3.stop()
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            cls.s3.stop()

    def tool(self, *args):
        r = subprocess.run([os.path.join(BIN, "airlock-objstore-tool"), args[0], self.s3.url] +
                           list(args[1:]), capture_output=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout.decode()

    def test_marker_absent_s3(self):
        t, client = self.new_tenant("s3-tenant")
        sid = self.make(client)
        marker = os.urandom(32)
        self.write_marker(client, sid, marker)
        self.suspend(client, sid)
        keys = [l.split()[0] for l in self.tool("ls", f"sandboxes/{sid}/").splitlines()
                if l.strip()]
        self.assertTrue(any(k.endswith("/disk") for k in keys), keys)
        self.assertTrue(any(k.endswith("/manifest.json") for k in keys), keys)
        with tempfile.TemporaryDirectory() as tmp:
            paths = []
            for i, k in enumerate(keys):
                p = os.path.join(tmp, str(i))
                self.tool("get", k, p)
                self.assertEqual(rd(p)[:6], b"ALSEAL", k)
                paths.append(p)
            self.assertEqual(self.marker_found(paths, marker), [])
        self.restore(client, sid)
        st, data, _ = client.raw("GET", f"/v1/sandboxes/{sid}/files?path=/root/marker.bin")
        self.assertEqual((st, data), (200, marker))


if __name__ == "__main__":
    main()
