"""docs/openapi.yaml against the real server: the api's route table
(`airlockd routes`, the table it answers 404/405 by) and the spec list the
same routes, both ways; GET /v1/openapi.yaml serves the spec built into the
binary; and every operation of the spec is called for real, at least one
success and one 4xx, with every answer's status documented and its body
valid against the documented schema (NDJSON: each line against the line
schema of `x-ndjson-item`). Uses python3-yaml and python3-jsonschema."""
import base64
import http.client
import json
import os
import re
import socket
import subprocess
import tempfile
import shutil
import time

import yaml
from jsonschema import Draft202012Validator

import harness
from harness import AirlockTestCase, main

SPEC_PATH = os.path.join(harness.SRC, "docs", "openapi.yaml")
with open(SPEC_PATH, "rb") as f:
    SPEC_BYTES = f.read()
SPEC = yaml.safe_load(SPEC_BYTES)
# an HTTP service for the proxy that answers every method (run by nc -e)
OK_SH = r"""#!/bin/sh
while IFS= read -r line; do
  line=$(printf '%s' "$line" | tr -d '\r')
  [ -z "$line" ] && break
done
printf 'HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok'
"""
# Operations that cannot succeed on this setup, and why.
# The code interpreter needs the code-interpreter template, which this
# instance does not build (minutes): here its routes answer busybox's 409 and
# the 4xx of bad input; tests/e2e/test_code.py calls them with success.
NO_SUCCESS_HERE = {"POST /v1/sandboxes/{id}/code", "GET /v1/sandboxes/{id}/code/contexts",
                   "POST /v1/sandboxes/{id}/code/contexts",
                   "DELETE /v1/sandboxes/{id}/code/contexts/{cid}",
                   "POST /v1/sandboxes/{id}/code/contexts/{cid}/restart"}
if (harness.BACKEND or "ns") == "ns":
    NO_SUCCESS_HERE.add("GET /v1/sandboxes/{id}/console")   # no serial console: 501
# Not Airlock's API, so not in the spec: each a whole prefix (docs/E2B.md).
COMPAT_ROUTES = {("*", "/e2b/{path...}")}
METHODS = ("get", "put", "post", "delete", "patch", "head", "options")


def deref(obj):
    while isinstance(obj, dict) and "$ref" in obj and len(obj) == 1:
        node = SPEC
        for part in obj["$ref"].lstrip("#/").split("/"):
            node = node[part]
        obj = node
    return obj


def validate(schema, value):
    root = {"allOf": [schema], "components": SPEC["components"]}
    errors = sorted(Draft202012Validator(root).iter_errors(value), key=str)
    if errors:
        raise AssertionError(f"{errors[0].message} at {list(errors[0].absolute_path)}: "
                             f"{json.dumps(value)[:600]}")


def spec_routes():
    out = set()
    for path, item in SPEC["paths"].items():
        rest = any(p.get("x-airlock-rest") for p in map(deref, item.get("parameters", [])))
        route = re.sub(r"\{path\}$", "{path...}", path) if rest else path
        if item.get("x-airlock-any-method"):
            out.add(("*", route))
            continue
        for m in METHODS:
            if m in item:
                out.add((m.upper(), route))
    return out


class OpenApiTest(AirlockTestCase):
    covered = {}

    def check(self, method, spec_path, status, headers, body):
        """The answer must be one the spec documents for this operation."""
        item = SPEC["paths"][spec_path]
        op = item[method.lower()]
        responses = op["responses"]
        key = str(status) if str(status) in responses else "default"
        self.assertIn(key, responses, f"{method} {spec_path}: undocumented status {status}: "
                                      f"{body[:300]!r}")
        self.covered.setdefault((method.upper(), spec_path), set()).add(status)
        resp = deref(responses[key])
        if key == "default":
            return
        for name, h in resp.get("headers", {}).items():
            v = headers.get(name)
            self.assertIsNotNone(v, f"{method} {spec_path} {status}: no {name}")
            validate(deref(h)["schema"], v)
        content = resp.get("content")
        if not content:
            self.assertIn(status, (101, 204), f"{method} {spec_path}: body where none documented")
            return
        ct = (headers.get("Content-Type") or "").split(";")[0].strip()
        self.assertIn(ct, content, f"{method} {spec_path} {status}: content type {ct!r}")
        media = content[ct]
        if "x-ndjson-item" in media:
            lines = [l for l in body.split(b"\n") if l.strip()]
            self.assertTrue(lines, f"{method} {spec_path}: empty stream")
            for l in lines:
                validate(media["x-ndjson-item"], json.loads(l))
        elif ct == "application/json":
            validate(media["schema"], json.loads(body))
        else:
            self.assertEqual(media["schema"].get("type"), "string")

    def call(self, method, spec_path, path, body=None, headers=None, client=None, auth=True):
        status, data, r = (client or self.api).raw(method, path, body, headers, auth=auth)
        hdrs = {k: v for k, v in r.getheaders()}
        # http.client's dict loses case-insensitivity: look up as the spec names them
        hdrs.update({k.title(): v for k, v in r.getheaders()})
        hdrs["Location"] = r.getheader("Location")
        hdrs["Content-Type"] = r.getheader("Content-Type")
        self.check(method, spec_path, status, hdrs, data)
        return status, data

    def test_1_routes_match_spec(self):
        out = subprocess.run([harness.AIRLOCKD, "routes"], capture_output=True, text=True,
                             check=True).stdout
        server = {tuple(l.split(" ", 1)) for l in out.splitlines() if l.strip()}
        self.assertGreater(len(server), 50)
        # Registered compatibility prefixes (api_compat_register): other
        # products' APIs, documented apart (docs/E2B.md), exactly these.
        self.assertLessEqual(COMPAT_ROUTES, server, "a compatibility prefix is not served")
        server -= COMPAT_ROUTES
        spec = spec_routes()
        self.assertEqual(server - spec, set(), "routes the server has and the spec lacks")
        self.assertEqual(spec - server, set(), "routes in the spec the server does not have")

    def test_1_unknown_routes_are_404_and_405(self):
        st, data = self.api.raw("GET", "/v1/sandboxes/x/nope")[:2]
        self.assertEqual(st, 404)
        validate({"$ref": "#/components/schemas/Error"}, json.loads(data))
        st, data, r = self.api.raw("PATCH", "/v1/tenants")
        self.assertEqual(st, 405)
        self.assertEqual(r.getheader("Allow"), "GET, POST")
        validate({"$ref": "#/components/schemas/Error"}, json.loads(data))

    def test_1_spec_served(self):
        status, data, r = self.api.raw("GET", "/v1/openapi.yaml", auth=False)
        self.assertEqual(status, 200)
        self.assertEqual(data, SPEC_BYTES)
        self.assertEqual(r.getheader("Content-Type"), "application/yaml")
        self.assertEqual(SPEC["openapi"], "3.1.0")

    def test_2_every_operation(self):
        c = self.call
        api = self.api
        t, tc = self.new_tenant("oa-tenant")
        # -- system and admin
        c("GET", "/v1/health", "/v1/health", auth=False)
        # the public ones have no 4xx of their own: another method is 405
        for p in ("/v1/health", "/v1/ready", "/v1/openapi.yaml"):
            st, data = self.api.raw("POST", p, auth=False)[:2]
            self.assertEqual(st, 405)
            validate({"$ref": "#/components/schemas/Error"}, json.loads(data))
        c("GET", "/v1/ready", "/v1/ready", auth=False)
        c("GET", "/v1/openapi.yaml", "/v1/openapi.yaml", auth=False)
        # the web console's static files (no key)
        c("GET", "/console", "/console", auth=False)
        c("GET", "/console/{path}", "/console/app.js", auth=False)
        c("GET", "/console/{path}", "/console/style.css", auth=False)
        c("GET", "/console/{path}", "/console/nope.js", auth=False)
        c("GET", "/metrics", "/metrics")
        c("GET", "/metrics", "/metrics", client=tc)
        c("GET", "/v1/tenants", "/v1/tenants?limit=2")
        c("GET", "/v1/tenants", "/v1/tenants?limit=0")
        c("POST", "/v1/tenants", "/v1/tenants", {"name": "oa-t2"})
        c("POST", "/v1/tenants", "/v1/tenants", {"name": "oa-t2"})
        c("POST", "/v1/tenants", "/v1/tenants", {"name": "x"}, client=tc)
        q = f"/v1/tenants/{t['id']}/quota"
        c("GET", "/v1/tenants/{tenant}/quota", q)
        c("GET", "/v1/tenants/{tenant}/quota", "/v1/tenants/nobody/quota")
        c("PUT", "/v1/tenants/{tenant}/quota", q, {"sandboxes": 50})
        c("PUT", "/v1/tenants/{tenant}/quota", q, {"sandboxes": -1})
        e = f"/v1/tenants/{t['id']}/encryption"
        c("GET", "/v1/tenants/{tenant}/encryption", e)
        c("GET", "/v1/tenants/{tenant}/encryption", "/v1/tenants/nobody/encryption")
        c("GET", "/v1/tenants/{tenant}/encryption", e, client=tc)
        c("PUT", "/v1/tenants/{tenant}/encryption", e, {"provider": "local", "key_id": "k1"})
        c("PUT", "/v1/tenants/{tenant}/encryption", e, {"provider": "nope"})
        c("POST", "/v1/tenants/{tenant}/encryption/rotate", e + "/rotate")
        c("POST", "/v1/tenants/{tenant}/encryption/rotate", e + "/rotate", client=tc)
        c("POST", "/v1/keys", "/v1/keys", {"tenant": t["id"], "name": "k2"})
        c("POST", "/v1/keys", "/v1/keys", {"tenant": "nobody"})
        st, data = c("POST", "/v1/keys", "/v1/keys", {"tenant": t["id"], "name": "gone"})
        c("GET", "/v1/keys", "/v1/keys?limit=3")
        c("GET", "/v1/keys", f"/v1/keys?tenant={t['name']}")
        c("GET", "/v1/keys", "/v1/keys?tenant=nobody")
        c("GET", "/v1/keys", "/v1/keys", client=tc)
        c("DELETE", "/v1/keys/{id}", "/v1/keys/" + json.loads(data)["id"])
        c("DELETE", "/v1/keys/{id}", "/v1/keys/" + json.loads(data)["id"])
        c("DELETE", "/v1/keys/{id}", "/v1/keys/key_nothing", client=tc)
        t3 = api.call("POST", "/v1/tenants", {"name": "oa-t3"})
        c("DELETE", "/v1/tenants/{tenant}", "/v1/tenants/oa-t3")
        c("DELETE", "/v1/tenants/{tenant}", "/v1/tenants/" + t3["id"])
        c("DELETE", "/v1/tenants/{tenant}", "/v1/tenants/oa-t3", client=tc)
        c("GET", "/v1/nodes", "/v1/nodes")
        c("GET", "/v1/nodes", "/v1/nodes", client=tc)
        c("GET", "/v1/node", "/v1/node")
        c("GET", "/v1/node", "/v1/node", client=tc)
        c("GET", "/v1/node/doctor", "/v1/node/doctor")
        c("GET", "/v1/node/doctor", "/v1/node/doctor", client=tc)
        c("GET", "/v1/sandboxes", "/v1/sandboxes", auth=False)

        # -- credentials
        cred = {"name": "oa", "value": "s3cret", "hosts": ["example.com"],
                "inject": {"type": "header"}}
        st, data = c("POST", "/v1/credentials", "/v1/credentials", cred, client=tc)
        cid = json.loads(data)["id"]
        c("POST", "/v1/credentials", "/v1/credentials", cred, client=tc)
        c("GET", "/v1/credentials", "/v1/credentials?limit=5", client=tc)
        c("GET", "/v1/credentials", "/v1/credentials?next_token=!", client=tc)
        c("GET", "/v1/credentials/audit", "/v1/credentials/audit", client=tc)
        c("GET", "/v1/credentials/audit", "/v1/credentials/audit?limit=0", client=tc)
        cp = f"/v1/credentials/{cid}"
        c("GET", "/v1/credentials/{id}", cp, client=tc)
        c("GET", "/v1/credentials/{id}", cp)  # another tenant: 404
        c("POST", "/v1/credentials/{id}/rotate", cp + "/rotate", {"value": "n3w"}, client=tc)
        c("POST", "/v1/credentials/{id}/rotate", cp + "/rotate", {"nope": 1}, client=tc)
        c("POST", "/v1/credentials/{id}/bind", cp + "/bind", {"project": "p"}, client=tc)
        c("POST", "/v1/credentials/{id}/bind", cp + "/bind", {"bogus": 1}, client=tc)
        c("POST", "/v1/credentials/{id}/unbind", cp + "/unbind", {"project": "p"}, client=tc)
        c("POST", "/v1/credentials/{id}/unbind", cp + "/unbind", [], client=tc)
        c("DELETE", "/v1/credentials/{id}", cp, client=tc)
        c("DELETE", "/v1/credentials/{id}", "/v1/credentials/cr-nothing", client=tc)

        # -- templates: a build from a directory (NDJSON), then its deletion
        c("GET", "/v1/templates", "/v1/templates")
        c("GET", "/v1/templates", "/v1/templates?limit=9999")
        tmp = tempfile.mkdtemp(prefix="oa-tmpl-")
        try:
            os.chmod(tmp, 0o755)
            os.makedirs(os.path.join(tmp, "bin"))
            shutil.copy("/bin/busybox", os.path.join(tmp, "bin", "busybox"))
            os.symlink("busybox", os.path.join(tmp, "bin", "sh"))
            c("POST", "/v1/templates", "/v1/templates", {"name": "oadir", "from_dir": tmp})
        finally:
            shutil.rmtree(tmp)
        c("POST", "/v1/templates", "/v1/templates", {"name": "oadir", "from_dir": "/x"}, client=tc)
        c("DELETE", "/v1/templates/{name}", "/v1/templates/oadir")
        c("DELETE", "/v1/templates/{name}", "/v1/templates/oadir")

        # -- sandboxes
        st, data = c("POST", "/v1/sandboxes", "/v1/sandboxes", {"template": "busybox"})
        sid = json.loads(data)["id"]
        c("POST", "/v1/sandboxes", "/v1/sandboxes", {"template": "busybox", "bogus": 1})
        c("GET", "/v1/sandboxes", "/v1/sandboxes?limit=10")
        c("GET", "/v1/sandboxes", "/v1/sandboxes?state=nonsense")
        sp = f"/v1/sandboxes/{sid}"
        c("GET", "/v1/sandboxes/{id}", sp)
        c("GET", "/v1/sandboxes/{id}", sp, client=tc)
        c("POST", "/v1/sandboxes/{id}/exec", sp + "/exec",
          {"cmd": ["sh", "-c", "echo out; echo err >&2; exit 3"]})
        c("POST", "/v1/sandboxes/{id}/exec", sp + "/exec", {"cmd": []})
        st, data = c("GET", "/v1/sandboxes/{id}/processes", sp + "/processes")
        pid = json.loads(data)["processes"][0]["pid"]
        c("GET", "/v1/sandboxes/{id}/processes", sp + "/processes?limit=x")
        pp = f"{sp}/processes/{pid}"
        c("GET", "/v1/sandboxes/{id}/processes/{pid}/output", pp + "/output?follow=0")
        c("GET", "/v1/sandboxes/{id}/processes/{pid}/output", sp + "/processes/999999/output")
        # a process that takes stdin and has a pty
        ev = next(iter(api.stream("POST", sp + "/exec", {"cmd": ["cat"], "stdin": True,
                                                           "pty": {"rows": 24, "cols": 80}})))
        lp = f"{sp}/processes/{ev['pid']}"
        c("POST", "/v1/sandboxes/{id}/processes/{pid}/resize", lp + "/resize", {"rows": 30, "cols": 90})
        c("POST", "/v1/sandboxes/{id}/processes/{pid}/resize", lp + "/resize", {"rows": "x"})
        c("POST", "/v1/sandboxes/{id}/processes/{pid}/stdin", lp + "/stdin",
          {"data": base64.b64encode(b"hi\n").decode()})
        c("POST", "/v1/sandboxes/{id}/processes/{pid}/stdin", lp + "/stdin", {"data": 5})
        c("POST", "/v1/sandboxes/{id}/processes/{pid}/signal", lp + "/signal", {"signal": "TERM"})
        c("POST", "/v1/sandboxes/{id}/processes/{pid}/signal", lp + "/signal", {"signal": "NOPE"})
        c("GET", "/v1/sandboxes/{id}/events", sp + "/events")
        self.sse_events(sid)
        c("GET", "/v1/sandboxes/events", "/v1/sandboxes/events?after=x")
        c("GET", "/v1/sandboxes/events", "/v1/sandboxes/events", auth=False)
        c("GET", "/v1/sandboxes/{id}/events", sp + "/events?next_token=%%%")
        c("GET", "/v1/sandboxes/{id}/metrics", sp + "/metrics")
        c("GET", "/v1/sandboxes/{id}/metrics", "/v1/sandboxes/sb-none/metrics")
        c("GET", "/v1/sandboxes/{id}/console", sp + "/console")
        c("GET", "/v1/sandboxes/{id}/console", "/v1/sandboxes/sb-none/console")

        # files
        c("PUT", "/v1/sandboxes/{id}/files", sp + "/files?path=/tmp/a.txt&mode=0644", b"hello")
        c("PUT", "/v1/sandboxes/{id}/files", sp + "/files", b"no path")
        c("GET", "/v1/sandboxes/{id}/files", sp + "/files?path=/tmp/a.txt")
        c("GET", "/v1/sandboxes/{id}/files", sp + "/files?path=/tmp/none")
        c("GET", "/v1/sandboxes/{id}/files/stat", sp + "/files/stat?path=/tmp/a.txt")
        c("GET", "/v1/sandboxes/{id}/files/stat", sp + "/files/stat?path=/tmp/none")
        c("GET", "/v1/sandboxes/{id}/files/list", sp + "/files/list?path=/tmp")
        c("GET", "/v1/sandboxes/{id}/files/list", sp + "/files/list?path=/tmp/none")
        # a watch lasts until the client leaves: read its first line, then go
        c("GET", "/v1/sandboxes/{id}/files/watch", sp + "/files/watch?path=/tmp/none")
        conn = http.client.HTTPConnection(self.server.addr.split(":")[0],
                                          int(self.server.addr.split(":")[1]), timeout=60)
        conn.request("GET", sp + "/files/watch?path=/tmp",
                     headers={"Authorization": "Bearer " + self.server.admin_key})
        wr = conn.getresponse()
        first = wr.readline()
        self.check("GET", "/v1/sandboxes/{id}/files/watch", wr.status,
                   {"Content-Type": wr.getheader("Content-Type"), "Location": None}, first)
        conn.close()
        c("POST", "/v1/sandboxes/{id}/files/mkdir", sp + "/files/mkdir", {"path": "/tmp/d/e"})
        c("POST", "/v1/sandboxes/{id}/files/mkdir", sp + "/files/mkdir", {"nope": 1})
        c("POST", "/v1/sandboxes/{id}/files/rename", sp + "/files/rename",
          {"from": "/tmp/a.txt", "to": "/tmp/b.txt"})
        c("POST", "/v1/sandboxes/{id}/files/rename", sp + "/files/rename", {"from": "/tmp/zz"})
        c("DELETE", "/v1/sandboxes/{id}/files", sp + "/files?path=/tmp/b.txt")
        c("DELETE", "/v1/sandboxes/{id}/files", sp + "/files")

        # network
        c("GET", "/v1/sandboxes/{id}/network", sp + "/network")
        c("GET", "/v1/sandboxes/{id}/network", "/v1/sandboxes/sb-none/network")
        c("PATCH", "/v1/sandboxes/{id}/network", sp + "/network",
          {"allow": {"domains": ["example.com"]}})
        c("PATCH", "/v1/sandboxes/{id}/network", sp + "/network", {"allow": 5})
        c("GET", "/v1/sandboxes/{id}/network/log", sp + "/network/log")
        c("GET", "/v1/sandboxes/{id}/network/log", "/v1/sandboxes/sb-none/network/log")

        # ports: an httpd and a TCP echo in the sandbox
        api.call("PUT", f"{sp}/files?path=/www/index.html", "hi\n")
        api.call("PUT", f"{sp}/files?path=/ok.sh&mode=0755", OK_SH)
        for cmd in (["busybox", "httpd", "-f", "-p", "8080", "-h", "/www"],
                    ["busybox", "nc", "-ll", "-p", "9000", "-e", "/bin/cat"],
                    ["busybox", "nc", "-ll", "-p", "9002", "-e", "/ok.sh"]):
            next(iter(api.stream("POST", sp + "/exec", {"cmd": cmd})))
        deadline = time.time() + 60
        while api.raw("GET", f"{sp}/ports/8080/index.html")[0] != 200 and time.time() < deadline:
            time.sleep(0.2)
        for m in ("GET", "POST", "PUT", "PATCH", "DELETE"):
            c(m, "/v1/sandboxes/{id}/ports/{port}/{path}", f"{sp}/ports/9002/any/path",
              b"" if m != "GET" else None)
            c(m, "/v1/sandboxes/{id}/ports/{port}/{path}", f"{sp}/ports/70000/x",
              b"" if m != "GET" else None)
        c("GET", "/v1/sandboxes/{id}/tunnel/{port}", f"{sp}/tunnel/9000")   # 400: no upgrade
        st = self.tunnel_status(f"{sp}/tunnel/9000")
        self.check("GET", "/v1/sandboxes/{id}/tunnel/{port}", st, {}, b"")
        self.assertEqual(st, 101)
        c("POST", "/v1/sandboxes/{id}/port-tokens", sp + "/port-tokens", {"port": 8080})
        c("POST", "/v1/sandboxes/{id}/port-tokens", sp + "/port-tokens", {"port": 0})

        # the code interpreter: a busybox sandbox has none (409), bad input 400
        c("POST", "/v1/sandboxes/{id}/code", sp + "/code", {"code": "1"})
        c("POST", "/v1/sandboxes/{id}/code", sp + "/code", {"code": 1})
        c("GET", "/v1/sandboxes/{id}/code/contexts", sp + "/code/contexts")
        c("POST", "/v1/sandboxes/{id}/code/contexts", sp + "/code/contexts", {})
        c("POST", "/v1/sandboxes/{id}/code/contexts", sp + "/code/contexts", {"cwd": "x"})
        c("DELETE", "/v1/sandboxes/{id}/code/contexts/{cid}", sp + "/code/contexts/0-1")
        c("POST", "/v1/sandboxes/{id}/code/contexts/{cid}/restart",
          sp + "/code/contexts/0-1/restart")

        # snapshots, rollback, fork
        st, data = c("POST", "/v1/sandboxes/{id}/snapshots", sp + "/snapshots", {"name": "s1"})
        c("POST", "/v1/sandboxes/{id}/snapshots", sp + "/snapshots", {"name": "s1"})
        c("GET", "/v1/sandboxes/{id}/snapshots", sp + "/snapshots")
        c("GET", "/v1/sandboxes/{id}/snapshots", sp + "/snapshots?limit=1001")
        c("POST", "/v1/sandboxes/{id}/rollback", sp + "/rollback", {"snapshot": "s1"})
        c("POST", "/v1/sandboxes/{id}/rollback", sp + "/rollback", {"snapshot": "nope"})
        st, data = c("POST", "/v1/sandboxes/{id}/fork", sp + "/fork", {"count": 1})
        kid = json.loads(data)["sandboxes"][0]["id"]
        c("POST", "/v1/sandboxes/{id}/fork", sp + "/fork", {"count": 99})
        c("DELETE", "/v1/sandboxes/{id}/snapshots/{snapshot}", sp + "/snapshots/s1")
        c("DELETE", "/v1/sandboxes/{id}/snapshots/{snapshot}", sp + "/snapshots/s1")

        # lifecycle
        c("POST", "/v1/sandboxes/{id}/pause", sp + "/pause")
        c("POST", "/v1/sandboxes/{id}/pause", sp + "/pause")          # 409: paused
        c("POST", "/v1/sandboxes/{id}/resume", sp + "/resume")
        c("POST", "/v1/sandboxes/{id}/resume", sp + "/resume")        # 409: running
        c("POST", "/v1/sandboxes/{id}/connect", sp + "/connect")
        c("POST", "/v1/sandboxes/{id}/connect", "/v1/sandboxes/sb-none/connect")
        c("POST", "/v1/sandboxes/{id}/timeout", sp + "/timeout", {"timeout_s": 3600})
        c("POST", "/v1/sandboxes/{id}/timeout", sp + "/timeout", {"timeout_s": -1})
        c("POST", "/v1/sandboxes/{id}/restore", sp + "/restore")      # 409: not suspended
        st, _ = c("POST", "/v1/sandboxes/{id}/suspend", sp + "/suspend")
        if st == 200:
            c("POST", "/v1/sandboxes/{id}/suspend", sp + "/suspend")  # 409
            c("POST", "/v1/sandboxes/{id}/restore", sp + "/restore")
        c("DELETE", "/v1/sandboxes/{id}", "/v1/sandboxes/" + kid)
        c("DELETE", "/v1/sandboxes/{id}", sp)
        c("DELETE", "/v1/sandboxes/{id}", "/v1/sandboxes/sb-none")

        # every operation of the spec: called, one success and one 4xx
        missing, no_ok, no_4xx = [], [], []
        for m, route in sorted(spec_routes()):
            path = route.replace("{path...}", "{path}")
            ms = ["GET", "POST", "PUT", "PATCH", "DELETE"] if m == "*" else [m]
            for mm in ms:
                got = self.covered.get((mm, path))
                if not got:
                    missing.append(f"{mm} {path}")
                    continue
                if not any(s < 400 for s in got) and f"{mm} {path}" not in NO_SUCCESS_HERE:
                    no_ok.append(f"{mm} {path} {sorted(got)}")
                public = SPEC["paths"][path][mm.lower()].get("security") == []
                if not any(400 <= s < 500 for s in got) and not public:
                    no_4xx.append(f"{mm} {path} {sorted(got)}")
        self.assertEqual(missing, [], "operations never called")
        self.assertEqual(no_ok, [], "operations without a success")
        self.assertEqual(no_4xx, [], "operations without a 4xx")

    def sse_events(self, sid):
        """GET /v1/sandboxes/events never ends: read the head and the events
        from the start of the log (after=0) until one of sid's shows, check
        each event's data against the spec, then hang up."""
        conn = http.client.HTTPConnection(self.api.host, self.api.port, timeout=60)
        try:
            conn.request("GET", "/v1/sandboxes/events?after=0",
                         headers={"Authorization": "Bearer " + self.api.key})
            r = conn.getresponse()
            hdrs = {"Content-Type": r.getheader("Content-Type")}
            self.check("GET", "/v1/sandboxes/events", r.status, hdrs, b"")
            self.assertEqual(r.status, 200)
            media = SPEC["paths"]["/v1/sandboxes/events"]["get"]["responses"]["200"]["content"]
            schema = media["text/event-stream"]["x-sse-data"]
            seen = False
            while not seen:
                line = r.readline()
                self.assertTrue(line, "the event stream ended")
                if line.startswith(b"data: "):
                    ev = json.loads(line[6:])
                    validate(schema, ev)
                    seen = ev["sandbox"] == sid
        finally:
            conn.close()

    def tunnel_status(self, path):
        host, port = self.server.addr.rsplit(":", 1)
        s = socket.create_connection((host, int(port)), timeout=60)
        try:
            s.sendall((f"GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {self.api.key}\r\n"
                       "Connection: Upgrade\r\nUpgrade: airlock-tcp\r\n\r\n").encode())
            head = b""
            while b"\r\n" not in head:
                d = s.recv(1)
                if not d:
                    break
                head += d
            return int(head.split()[1])
        finally:
            s.close()


if __name__ == "__main__":
    main()
