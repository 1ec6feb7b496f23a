#!/usr/bin/env python3
"""A tiny key service in the shape of HashiCorp Vault's Transit engine, for
the BYOK tests (it stands in for the tenant's own KMS: the outer boundary).

    python3 kms.py --token-file F [--port 0] [--fail-5xx N] [--huge]
                   [--tls-cert PEM --tls-key PEM [--client-ca PEM]] [--spoof]

Listens on 127.0.0.1 only and prints "listening 127.0.0.1:PORT" on stdout.
--tls-cert/--tls-key: HTTPS (TLS 1.2+) with that certificate; --client-ca:
and asks for a client certificate of that CA. --spoof: an impostor that
knows no key nor token: every transit call answers 403 in the service's
own shape ({"errors":["key is disabled"]}), and /admin/stats counts the
calls that carried a token.
Every call needs the header X-Vault-Token with the token of --token-file.

    POST /v1/transit/encrypt/{name} {"plaintext": b64}   -> {"data":{"ciphertext":"vault:vN:b64"}}
    POST /v1/transit/decrypt/{name} {"ciphertext": ...}  -> {"data":{"plaintext": b64}}
    POST /v1/transit/rewrap/{name}  {"ciphertext": ...}  -> {"data":{"ciphertext":"vault:vM:..."}}
    POST /v1/transit/keys/{name}                          create (idempotent)
    POST /v1/transit/keys/{name}/rotate                   a new newest version
    GET  /v1/transit/keys/{name}                          {"data":{"latest_version":N,"state":...}}
    POST /admin/keys/{name}/{disable|enable|delete}       revoke, re-enable, delete
    POST /admin/keys/{name}/min_version {"v": N}          versions below N refuse to decrypt
    GET  /admin/stats                                     calls counted per op

Keys are created on first encrypt. A disabled key answers 403
{"errors":["key is disabled"]}; a deleted one 400 {"errors":["key deleted"]}.
Each version is a random AES-256 key; ciphertext = nonce(12) | AES-GCM with
the key name as AAD. --fail-5xx N: the first N calls answer 503 (retries).
--huge: a hostile service: every transit call answers 200 with a 16 MiB body.
"""
import argparse
import base64
import json
import os
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from cryptography.hazmat.primitives.ciphers.aead import AESGCM


class Keys:
    def __init__(self):
        self.mu = threading.Lock()
        self.keys = {}  # name -> {"versions": [bytes], "state": "enabled"|..., "min": 1}
        self.stats = {}

    def get(self, name, create=False):
        k = self.keys.get(name)
        if k is None and create:
            k = self.keys[name] = {"versions": [AESGCM.generate_key(256)], "state": "enabled",
                                   "min": 1}
        return k


def b64d(s):
    return base64.b64decode(s.encode(), validate=True)


class Handler(BaseHTTPRequestHandler):
    server_version = "kms-test"

    def log_message(self, fmt, *args):  # quiet: nothing of a request is logged
        pass

    def answer(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def err(self, code, msg):
        self.answer(code, {"errors": [msg]})

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n > 65536:
            raise ValueError("body too large")
        raw = self.rfile.read(n) if n else b"{}"
        return json.loads(raw or b"{}")

    def do_GET(self):
        self.route("GET")

    def do_POST(self):
        self.route("POST")

    def route(self, method):
        srv = self.server
        parts = self.path.split("?")[0].strip("/").split("/")
        if srv.huge and parts[:2] == ["v1", "transit"]:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(16 << 20))
            self.end_headers()
            try:
                for _ in range(16):
                    self.wfile.write(b" " * (1 << 20))
            except OSError:
                pass
            return
        if srv.spoof:
            with srv.keys.mu:
                if parts == ["admin", "stats"]:
                    return self.answer(200, srv.keys.stats)
                srv.keys.stats["calls"] = srv.keys.stats.get("calls", 0) + 1
                if self.headers.get("X-Vault-Token"):
                    srv.keys.stats["with_token"] = srv.keys.stats.get("with_token", 0) + 1
            return self.err(403, "key is disabled")
        with srv.keys.mu:
            if srv.fail_5xx > 0:
                srv.fail_5xx -= 1
                return self.err(503, "try again")
        if parts[:1] == ["admin"]:
            return self.admin(method, parts[1:])
        if self.headers.get("X-Vault-Token") != srv.token:
            return self.err(403, "permission denied")
        try:
            body = self.body() if method == "POST" else {}
        except (ValueError, json.JSONDecodeError):
            return self.err(400, "bad body")
        if parts[:2] != ["v1", "transit"] or len(parts) < 4:
            return self.err(404, "no such path")
        op, name = parts[2], parts[3]
        ks = srv.keys
        with ks.mu:
            ks.stats[op] = ks.stats.get(op, 0) + 1
            if op == "keys":
                if method == "POST" and len(parts) == 4:
                    ks.get(name, create=True)
                    return self.answer(204, {})
                k = ks.get(name)
                if not k:
                    return self.err(404, "key not found")
                if method == "POST" and parts[4:] == ["rotate"]:
                    k["versions"].append(AESGCM.generate_key(256))
                    return self.answer(200, {"data": {"latest_version": len(k["versions"])}})
                return self.answer(200, {"data": {"latest_version": len(k["versions"]),
                                                  "state": k["state"]}})
            k = ks.get(name, create=(op == "encrypt"))
            if not k:
                return self.err(400, "key not found")
            if k["state"] == "disabled":
                return self.err(403, "key is disabled")
            if k["state"] == "deleted":
                return self.err(400, "key deleted")
            try:
                if op == "encrypt":
                    return self.answer(200, {"data": {"ciphertext": self.enc(name, k, b64d(body["plaintext"]))}})
                if op == "decrypt":
                    return self.answer(200, {"data": {"plaintext": base64.b64encode(self.dec(name, k, body["ciphertext"])).decode()}})
                if op == "rewrap":
                    return self.answer(200, {"data": {"ciphertext": self.enc(name, k, self.dec(name, k, body["ciphertext"]))}})
            except (KeyError, ValueError, TypeError) as e:
                return self.err(400, "invalid ciphertext or plaintext: " + type(e).__name__)
            except Exception:  # a failed tag check
                return self.err(400, "cipher: message authentication failed")
        return self.err(404, "no such operation")

    def enc(self, name, k, plain):
        v = len(k["versions"])
        nonce = os.urandom(12)
        ct = AESGCM(k["versions"][v - 1]).encrypt(nonce, plain, name.encode())
        return "vault:v%d:%s" % (v, base64.b64encode(nonce + ct).decode())

    def dec(self, name, k, text):
        pre, vs, b = text.split(":", 2)
        if pre != "vault" or not vs.startswith("v"):
            raise ValueError("not a vault ciphertext")
        v = int(vs[1:])
        if v < k["min"] or v < 1 or v > len(k["versions"]):
            raise ValueError("version not allowed")
        raw = b64d(b)
        return AESGCM(k["versions"][v - 1]).decrypt(raw[:12], raw[12:], name.encode())

    def admin(self, method, parts):
        ks = self.server.keys
        with ks.mu:
            if parts == ["stats"]:
                return self.answer(200, ks.stats)
            if len(parts) >= 3 and parts[0] == "keys":
                k = ks.get(parts[1])
                if not k:
                    return self.err(404, "key not found")
                act = parts[2]
                if act in ("disable", "enable", "delete"):
                    k["state"] = {"disable": "disabled", "enable": "enabled", "delete": "deleted"}[act]
                    return self.answer(200, {"state": k["state"]})
                if act == "min_version":
                    k["min"] = int(self.body()["v"])
                    return self.answer(200, {"min": k["min"]})
        return self.err(404, "no such admin path")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--token-file", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--fail-5xx", type=int, default=0)
    ap.add_argument("--huge", action="store_true")
    ap.add_argument("--spoof", action="store_true")
    ap.add_argument("--tls-cert")
    ap.add_argument("--tls-key")
    ap.add_argument("--client-ca")
    a = ap.parse_args()
    ctx = None
    if a.tls_cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(a.tls_cert, a.tls_key)
        if a.client_ca:
            ctx.load_verify_locations(a.client_ca)
            ctx.verify_mode = ssl.CERT_REQUIRED

    class Server(ThreadingHTTPServer):
        def get_request(self):
            sock, addr = self.socket.accept()
            if not ctx:
                return sock, addr
            # each connection's handshake here, so a client that refuses
            # our certificate is counted (/admin/stats "tls_refused")
            sock.settimeout(10)
            try:
                return ctx.wrap_socket(sock, server_side=True), addr
            except (OSError, ssl.SSLError):
                with self.keys.mu:
                    self.keys.stats["tls_refused"] = self.keys.stats.get("tls_refused", 0) + 1
                sock.close()
                raise

    srv = Server(("127.0.0.1", a.port), Handler)
    srv.daemon_threads = True
    srv.keys = Keys()
    srv.token = open(a.token_file).read().strip()
    srv.fail_5xx = a.fail_5xx
    srv.huge = a.huge
    srv.spoof = a.spoof
    print("listening 127.0.0.1:%d" % srv.server_address[1], flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
