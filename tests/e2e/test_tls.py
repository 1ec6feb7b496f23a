"""TLS on the api's listener (tls_cert / tls_key), end to end with a test CA
made here with the openssl CLI: the CLI creates and execs over https://
(the certificate checked against --cacert and the URL's host name), a
wrong CA and a wrong name are refused, plain HTTP to the TLS port gets a
clear answer, keep-alive works over TLS, and the cipher policy holds
(TLS 1.2+, AEAD only, the server's order)."""
import hashlib
import http.client
import json
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import warnings

import harness
from harness import BACKEND, CLI, AirlockTestCase, main
from testpki import make_ca, make_cert


def make_server_cert(d, ca_key, ca_crt):
    """A certificate for DNS name `localhost` only (not 127.0.0.1: so a
    URL naming the address must fail the name check)."""
    key, crt = make_cert(d, "server", ca_key, ca_crt, "DNS:localhost", cn="localhost")
    os.chmod(key, 0o600)   # root's alone: the api reads it before dropping privileges
    return key, crt


class TlsTest(AirlockTestCase):
    @classmethod
    def setUpClass(cls):
        cls.pki = tempfile.mkdtemp(prefix="airlock-tls-")
        try:
            ca_key, cls.ca = make_ca(cls.pki, "test-ca", cn="Airlock test-ca")
            _, cls.wrong_ca = make_ca(cls.pki, "other-ca", cn="Airlock other-ca")
            cls.key, cls.cert = make_server_cert(cls.pki, ca_key, cls.ca)
            cls.extra_args = ("--tls-cert", cls.cert, "--tls-key", cls.key)
            super().setUpClass()
        except Exception:
            shutil.rmtree(cls.pki, ignore_errors=True)
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            shutil.rmtree(cls.pki, ignore_errors=True)

    def port(self):
        return int(self.server.addr.rsplit(":", 1)[1])

    def cli(self, *args, url=None, cacert=True, stdin=None, check=True):
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_")}
        env["HOME"] = self.pki     # no user config of this machine's
        pre = ["--config", os.path.join(self.server.dir, "cli.json"),
               "--url", url or f"https://localhost:{self.port()}"]
        if cacert:
            pre += ["--cacert", self.ca if cacert is True else cacert]
        r = subprocess.run([CLI] + pre + list(args), input=stdin, capture_output=True,
                           env=env, timeout=300)
        if check and r.returncode != 0:
            self.fail(f"airlock {args} -> {r.returncode}: {r.stderr.decode()}")
        return r

    def test_cli_over_https(self):
        with open(os.path.join(self.server.dir, "cli.json")) as f:
            self.assertEqual(json.load(f)["url"], f"https://{self.server.addr}")
        extra = ["--backend", BACKEND] if BACKEND else []
        sid = self.cli("create", "--template", "busybox", *extra).stdout.decode().strip()
        self.assertTrue(sid.startswith("sb"), sid)
        try:
            r = self.cli("exec", sid, "--", "sh", "-c", "echo over-tls; echo err >&2; exit 3",
                         check=False)
            self.assertEqual((r.returncode, r.stdout, r.stderr), (3, b"over-tls\n", b"err\n"))
            big = os.urandom(300 * 1024).hex().encode()   # 600 KB both ways
            r = self.cli("exec", "-i", sid, "--", "cat", stdin=big)
            self.assertEqual(r.stdout, big)
            self.cli("files", "write", sid, "/tmp/x", stdin=big)
            self.assertEqual(self.cli("files", "read", sid, "/tmp/x").stdout, big)
            self.assertIn(sid.encode(), self.cli("ls").stdout)
        finally:
            self.cli("rm", sid)

    def test_port_forward_over_https(self):
        """A tunnel: the connection the api takes over and relays raw, here
        through the TLS relays of both ends."""
        extra = ["--backend", BACKEND] if BACKEND else []
        sid = self.cli("create", "--template", "busybox", *extra).stdout.decode().strip()
        p = None
        try:
            self.cli("exec", sid, "--", "sh", "-c",
                     "busybox nc -ll -p 9000 -e /bin/cat >/dev/null 2>&1 &")
            env = {k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_")}
            p = subprocess.Popen([CLI, "--config", os.path.join(self.server.dir, "cli.json"),
                                  "--url", f"https://localhost:{self.port()}", "--cacert", self.ca,
                                  "port-forward", sid, "0:9000"],
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
            line = p.stdout.readline().decode()
            self.assertTrue(line.startswith("Forwarding 127.0.0.1:"), line)
            lport = int(line.split()[1].rsplit(":", 1)[1])
            data = os.urandom(2 << 20)
            deadline = time.time() + 60
            while True:   # until nc listens in the sandbox
                s = socket.create_connection(("127.0.0.1", lport), timeout=60)
                t = threading.Thread(target=lambda: (s.sendall(data), s.shutdown(socket.SHUT_WR)))
                t.start()
                got = b""
                while True:
                    d = s.recv(65536)
                    if not d:
                        break
                    got += d
                t.join()
                s.close()
                if got or time.time() > deadline:
                    break
                time.sleep(0.2)
            self.assertEqual(hashlib.sha256(got).hexdigest(), hashlib.sha256(data).hexdigest())
        finally:
            if p:
                p.stdout.close()
                p.terminate()
                p.wait(timeout=30)
            self.cli("rm", sid)

    def test_wrong_ca_and_wrong_name_refused(self):
        r = self.cli("ls", cacert=self.wrong_ca, check=False)
        self.assertEqual(r.returncode, 127, r.stderr)
        self.assertIn(b"certificate", r.stderr)
        # the system's CAs do not know the test CA either
        r = self.cli("ls", cacert=False, check=False)
        self.assertEqual(r.returncode, 127, r.stderr)
        # the right CA, but the certificate does not name 127.0.0.1
        r = self.cli("ls", url=f"https://127.0.0.1:{self.port()}", check=False)
        self.assertEqual(r.returncode, 127, r.stderr)
        self.assertIn(b"mismatch", r.stderr)
        # a CA file that is not there is the config's fault: 125
        r = self.cli("ls", cacert=os.path.join(self.pki, "nope.pem"), check=False)
        self.assertEqual(r.returncode, 125, r.stderr)
        self.assertIn(b"(bad_config)", r.stderr)

    def test_plain_http_to_tls_port(self):
        r = self.cli("ls", url=f"http://127.0.0.1:{self.port()}", cacert=False, check=False)
        self.assertEqual(r.returncode, 125, r.stderr)
        self.assertIn(b"this port speaks TLS: use https://", r.stderr)
        self.assertIn(b"(tls_required)", r.stderr)
        c = http.client.HTTPConnection("127.0.0.1", self.port(), timeout=30)
        try:
            c.request("GET", "/v1/health")
            resp = c.getresponse()
            self.assertEqual(resp.status, 400)
            self.assertEqual(json.loads(resp.read())["error"]["code"], "tls_required")
        finally:
            c.close()

    def test_cipher_policy(self):
        """TLS 1.2+ with ECDHE and AEAD only, in the server's order: a
        client offering TLS 1.1, or only CBC suites on 1.2, is refused at
        the handshake; a modern client gets TLS 1.3."""
        def hello(max_version, ciphers=None):
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.load_verify_locations(self.ca)
            with warnings.catch_warnings():   # TLS 1.0 and 1.1 are deprecated: the point
                warnings.simplefilter("ignore", DeprecationWarning)
                ctx.minimum_version = ssl.TLSVersion.TLSv1
                ctx.maximum_version = max_version
            # level 0: the client offers what a default one no longer
            # would, so it is the server that refuses
            ctx.set_ciphers((ciphers or "DEFAULT") + ":@SECLEVEL=0")
            with socket.create_connection(("127.0.0.1", self.port()), timeout=30) as s:
                with ctx.wrap_socket(s, server_hostname="localhost") as t:
                    return t.version(), t.cipher()[0]

        for version, ciphers in ((ssl.TLSVersion.TLSv1_1, None),
                                 (ssl.TLSVersion.TLSv1_2, "ECDHE-ECDSA-AES128-SHA"),
                                 (ssl.TLSVersion.TLSv1_2, "ECDHE-ECDSA-AES256-SHA384")):
            with self.assertRaises((ssl.SSLError, ConnectionError), msg=(version, ciphers)):
                hello(version, ciphers)
        self.assertEqual(hello(ssl.TLSVersion.MAXIMUM_SUPPORTED)[0], "TLSv1.3")
        self.assertEqual(hello(ssl.TLSVersion.TLSv1_2, "ECDHE-ECDSA-CHACHA20-POLY1305"),
                         ("TLSv1.2", "ECDHE-ECDSA-CHACHA20-POLY1305"))
        # a CBC suite listed first does not win
        self.assertEqual(hello(ssl.TLSVersion.TLSv1_2,
                               "ECDHE-ECDSA-AES128-SHA:ECDHE-ECDSA-AES256-GCM-SHA384:"
                               "ECDHE-ECDSA-AES128-GCM-SHA256"),
                         ("TLSv1.2", "ECDHE-ECDSA-AES128-GCM-SHA256"))

    def test_keepalive_and_headers_over_tls(self):
        ctx = ssl.create_default_context(cafile=self.ca)
        c = http.client.HTTPSConnection("localhost", self.port(), context=ctx, timeout=30)
        try:
            for _ in range(3):   # one connection, several requests
                c.request("GET", "/v1/keys",
                          headers={"Authorization": "Bearer " + self.server.admin_key})
                resp = c.getresponse()
                body = resp.read()
                self.assertEqual(resp.status, 200, body)
                self.assertIn("keys", json.loads(body))
            self.assertEqual(c.sock.version()[:4], "TLSv")
        finally:
            c.close()
        # a client that connects and says nothing is closed by the head deadline
        s = socket.create_connection(("127.0.0.1", self.port()), timeout=30)
        try:
            s.settimeout(30)
            self.assertEqual(s.recv(100), b"")
        finally:
            s.close()


if __name__ == "__main__":
    main()
