"""`airlock mcp` against a real server: a scripted MCP client speaks JSON-RPC
2.0 over the server's stdin/stdout, one message a line, as an agent's host
would, and checks every answer; then bad input, which must be answered with
the right error while the server stays up."""
import base64
import json
import os
import select
import shutil
import subprocess
import tempfile
import time

from harness import BACKEND, CLI, AirlockTestCase, main

TOOLS = {
    "sandbox_create": ({"template", "backend", "env", "metadata", "network", "ttl"}, set()),
    "sandbox_list": ({"state", "template", "limit", "next_token"}, set()),
    "sandbox_delete": ({"sandbox"}, {"sandbox"}),
    "exec": ({"sandbox", "cmd", "cwd", "env", "timeout_s"}, {"sandbox", "cmd"}),
    "files_read": ({"sandbox", "path", "max_bytes"}, {"sandbox", "path"}),
    "files_write": ({"sandbox", "path", "content", "encoding", "mode"}, {"sandbox", "path", "content"}),
    "files_list": ({"sandbox", "path"}, {"sandbox", "path"}),
    "snapshot_create": ({"sandbox", "name", "kind"}, {"sandbox"}),
    "snapshot_list": ({"sandbox"}, {"sandbox"}),
    "rollback": ({"sandbox", "snapshot"}, {"sandbox", "snapshot"}),
    "run_code": ({"sandbox", "code", "language", "context_id", "env", "timeout_s"},
                 {"sandbox", "code"}),
}


class McpClient:
    """`airlock mcp` as a subprocess; stderr goes to a file (stdout must carry
    protocol messages only, which recv() checks line by line)."""

    def __init__(self, config, env=None):
        self.errf = tempfile.TemporaryFile()
        e = dict(os.environ)
        e.pop("AIRLOCK_URL", None)
        e.pop("AIRLOCK_API_KEY", None)
        e.update(env or {})
        self.proc = subprocess.Popen([CLI, "--config", config, "mcp"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.errf, env=e)
        self.buf = b""
        self.next_id = 1

    def send_raw(self, data):
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, msg):
        self.send_raw(json.dumps(msg).encode() + b"\n")

    def recv(self, timeout=180):
        deadline = time.time() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.time()
            if left <= 0:
                raise AssertionError("no answer from airlock mcp; stderr:\n" + self.stderr())
            r, _, _ = select.select([self.proc.stdout], [], [], left)
            if r:
                chunk = os.read(self.proc.stdout.fileno(), 1 << 20)
                if not chunk:
                    raise AssertionError("airlock mcp closed stdout; stderr:\n" + self.stderr())
                self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        msg = json.loads(line)   # every stdout line is one JSON-RPC message
        assert msg.get("jsonrpc") == "2.0", msg
        return msg

    def request(self, method, params=None):
        rid = self.next_id
        self.next_id += 1
        msg = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)
        answer = self.recv()
        assert answer["id"] == rid, answer
        return answer

    def call(self, tool, **args):
        """tools/call; returns the result (content, structuredContent, isError)."""
        a = self.request("tools/call", {"name": tool, "arguments": args})
        assert "result" in a, a
        return a["result"]

    def stderr(self):
        if self.errf.closed:
            return self.err_text
        self.errf.seek(0)
        return self.errf.read().decode(errors="replace")

    def close(self):
        """EOF on stdin ends the server; returns its exit code."""
        try:
            self.proc.stdin.close()
            return self.proc.wait(timeout=30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            if not self.errf.closed:
                self.err_text = self.stderr()
                self.errf.close()
                self.proc.stdout.close()


class McpTest(AirlockTestCase):
    def setUp(self):
        self.mcp = McpClient(os.path.join(self.server.dir, "cli.json"))
        self.addCleanup(self.mcp.close)

    def ok(self, tool, **args):
        r = self.mcp.call(tool, **args)
        self.assertFalse(r["isError"], r)
        self.assertEqual(r["content"][0]["type"], "text")
        # the text content and structuredContent carry the same object
        self.assertEqual(json.loads(r["content"][0]["text"]), r["structuredContent"])
        return r["structuredContent"]

    def failed(self, tool, **args):
        r = self.mcp.call(tool, **args)
        self.assertTrue(r["isError"], r)
        return r

    def initialize(self):
        a = self.mcp.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                            "clientInfo": {"name": "test_mcp", "version": "1"}})
        self.mcp.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return a

    def test_session(self):
        a = self.initialize()
        res = a["result"]
        self.assertEqual(res["protocolVersion"], "2025-06-18")
        self.assertEqual(res["serverInfo"]["name"], "airlock")
        version = json.loads(subprocess.run([CLI, "--json", "version"], capture_output=True,
                                            check=True).stdout)["version"]
        self.assertEqual(res["serverInfo"]["version"], version)
        self.assertIn("tools", res["capabilities"])
        # the initialized notification got no answer: the next answer is the ping's
        self.assertEqual(self.mcp.request("ping")["result"], {})

        tools = {t["name"]: t for t in self.mcp.request("tools/list")["result"]["tools"]}
        self.assertEqual(set(tools), set(TOOLS))
        from jsonschema import Draft202012Validator
        for name, (props, required) in TOOLS.items():
            t = tools[name]
            self.assertTrue(t["description"], name)
            schema = t["inputSchema"]
            Draft202012Validator.check_schema(schema)
            self.assertEqual(schema["type"], "object")
            self.assertEqual(set(schema["properties"]), props, name)
            self.assertEqual(set(schema["required"]), required, name)
            self.assertFalse(schema["additionalProperties"])
            for p in schema["properties"].values():
                self.assertTrue(p["description"], name)

        create = {"template": "busybox", "env": {"GREETING": "hello"},
                  "metadata": {"who": "mcp-test"}, "ttl": 3600}
        if BACKEND:
            create["backend"] = BACKEND
        Draft202012Validator(tools["sandbox_create"]["inputSchema"]).validate(create)
        sb = self.ok("sandbox_create", **create)
        sid = sb["id"]
        self.assertEqual(sb["state"], "running")
        self.addCleanup(lambda: self.api.raw("DELETE", f"/v1/sandboxes/{sid}"))

        r = self.ok("exec", sandbox=sid, cmd="echo $GREETING world")
        self.assertEqual((r["stdout"], r["stderr"], r["exit_code"]), ("hello world\n", "", 0))
        self.assertFalse(r["stdout_truncated"])
        r = self.ok("exec", sandbox=sid, cmd="echo oops >&2; exit 3")
        self.assertEqual((r["stdout"], r["stderr"], r["exit_code"]), ("", "oops\n", 3))
        r = self.ok("exec", sandbox=sid, cmd=["sh", "-c", "pwd; echo $X"], cwd="/tmp",
                    env={"X": "from-env"})
        self.assertEqual(r["stdout"], "/tmp\nfrom-env\n")
        # output beyond 64 KiB a stream is cut, and says so
        r = self.ok("exec", sandbox=sid, cmd="yes 0123456789abcde | head -c 100000")
        self.assertEqual(len(r["stdout"]), 65536)
        self.assertTrue(r["stdout_truncated"])
        self.assertEqual(r["exit_code"], 0)
        r = self.ok("exec", sandbox=sid, cmd="sleep 30", timeout_s=1)
        self.assertEqual((r["exit_code"], r["signal"]), (128 + 9, 9))

        w = self.ok("files_write", sandbox=sid, path="/work/notes.txt", content="version one\n")
        self.assertEqual(w["size"], 12)
        r = self.ok("files_read", sandbox=sid, path="/work/notes.txt")
        self.assertEqual((r["content"], r["encoding"], r["truncated"]), ("version one\n", "utf-8", False))
        r = self.ok("files_read", sandbox=sid, path="/work/notes.txt", max_bytes=7)
        self.assertEqual((r["content"], r["truncated"]), ("version", True))
        # a cut inside a character ends before it, still text
        self.ok("files_write", sandbox=sid, path="/work/utf8.txt", content="h\u00e9llo")
        r = self.ok("files_read", sandbox=sid, path="/work/utf8.txt", max_bytes=2)
        self.assertEqual((r["content"], r["encoding"], r["size"], r["truncated"]),
                         ("h", "utf-8", 1, True))
        blob = bytes(range(256))
        b64 = base64.encodebytes(blob).decode()   # in lines of 76, as some tools write it
        self.assertIn("\n", b64)
        self.ok("files_write", sandbox=sid, path="/work/blob.bin",
                content=b64, encoding="base64", mode="0600")
        r = self.ok("files_read", sandbox=sid, path="/work/blob.bin")
        self.assertEqual(r["encoding"], "base64")
        self.assertEqual(base64.b64decode(r["content"]), blob)
        ls = self.ok("files_list", sandbox=sid, path="/work")
        entries = {e["name"]: e for e in ls["entries"]}
        self.assertEqual(entries["notes.txt"]["size"], 12)
        self.assertEqual(entries["blob.bin"]["mode"], "0600")

        snap = self.ok("snapshot_create", sandbox=sid, name="before-edit")
        self.assertEqual((snap["name"], snap["kind"]), ("before-edit", "disk"))
        self.ok("files_write", sandbox=sid, path="/work/notes.txt", content="version two\n")
        self.assertEqual(self.ok("files_read", sandbox=sid, path="/work/notes.txt")["content"],
                         "version two\n")
        snaps = self.ok("snapshot_list", sandbox=sid)["snapshots"]
        self.assertEqual([s["id"] for s in snaps], [snap["id"]])
        rb = self.ok("rollback", sandbox=sid, snapshot="before-edit")
        self.assertEqual((rb["id"], rb["state"]), (sid, "running"))
        self.assertEqual(self.ok("files_read", sandbox=sid, path="/work/notes.txt")["content"],
                         "version one\n")
        self.assertEqual(self.ok("exec", sandbox=sid, cmd="cat /work/notes.txt")["stdout"],
                         "version one\n")

        listed = self.ok("sandbox_list")["sandboxes"]
        self.assertIn(sid, [s["id"] for s in listed])
        self.assertEqual([s["id"] for s in self.ok("sandbox_list", state="paused")["sandboxes"]], [])
        self.assertEqual(self.ok("sandbox_delete", sandbox=sid), {"id": sid, "deleted": True})
        self.assertNotIn(sid, [s["id"] for s in self.ok("sandbox_list")["sandboxes"]])
        # and a call on the deleted sandbox is a tool error naming the API's
        # answer (409: the API keeps a deleted sandbox's row a while)
        r = self.failed("exec", sandbox=sid, cmd="true")
        self.assertEqual(r["structuredContent"]["error"]["code"], "conflict")
        self.assertIn("Airlock API error 409 conflict", r["content"][0]["text"])
        self.assertIn("deleted", r["content"][0]["text"])

        self.assertEqual(self.mcp.close(), 0)
        err = self.mcp.stderr()
        self.assertIn("airlock mcp: exec: ok", err)   # logs went to stderr

    def test_bad_input(self):
        self.initialize()
        m = self.mcp

        def error_of(raw, code, rid=None):
            m.send_raw(raw)
            a = m.recv()
            self.assertEqual(a["error"]["code"], code, a)
            self.assertEqual(a["id"], rid, a)
            self.assertNotIn("result", a)
            return a["error"]["message"]

        self.assertIn("parse error", error_of(b"{not json\n", -32700))
        error_of(b'{"jsonrpc":"2.0","id":1,"method":"ping"\n', -32700)   # cut short
        self.assertIn("batch", error_of(b'[{"jsonrpc":"2.0","id":1,"method":"ping"}]\n', -32600))
        error_of(b'"ping"\n', -32600)
        error_of(b'{"jsonrpc":"1.0","id":7,"method":"ping"}\n', -32600, 7)
        error_of(b'{"jsonrpc":"2.0","id":8}\n', -32600, 8)
        error_of(b'{"jsonrpc":"2.0","id":{"x":1},"method":"ping"}\n', -32600)
        self.assertIn("resources/list",
                      error_of(b'{"jsonrpc":"2.0","id":"r","method":"resources/list"}\n', -32601, "r"))
        error_of(b'{"jsonrpc":"2.0","id":9,"method":"tools/call","params":[1]}\n', -32602, 9)
        error_of(b'{"jsonrpc":"2.0","id":10,"method":"initialize","params":{}}\n', -32602, 10)
        # notifications are never answered, even unknown or malformed ones;
        # blank lines neither: the next answer is the ping's
        m.send_raw(b'{"jsonrpc":"2.0","method":"notifications/whatever","params":{"a":1}}\n\n  \r\n'
                   b'{"jsonrpc":"2.0","method":"tools/call","params":5}\n'
                   b'{"jsonrpc":"2.0","id":99,"result":{}}\n')
        self.assertEqual(m.request("ping")["result"], {})

        def invalid(name, args, words):
            a = m.request("tools/call", {"name": name, "arguments": args})
            self.assertEqual(a["error"]["code"], -32602, a)
            self.assertIn(words, a["error"]["message"])

        invalid("no_such_tool", {}, "unknown tool `no_such_tool`")
        invalid("exec", {"sandbox": "x"}, "`cmd`")
        invalid("exec", {"sandbox": "x", "cmd": [], "timeout_s": 1}, "`cmd`")
        invalid("exec", {"sandbox": "x", "cmd": "true", "timeout_s": -1}, "`timeout_s`")
        invalid("exec", {"sandbox": "x", "cmd": "true", "timeout_s": "1"}, "`timeout_s`")
        invalid("exec", {"sandbox": "x", "cmd": [1]}, "`cmd`")
        invalid("exec", {"sandbox": "x", "cmd": "true", "shell": True}, "no argument `shell`")
        invalid("sandbox_delete", {"sandbox": "../../tenants"}, "`sandbox`")
        invalid("sandbox_create", {"env": {"A": 1}}, "`env`")
        invalid("snapshot_create", {"sandbox": "x", "kind": "memory"}, "`kind`")
        a = m.request("tools/call", {"arguments": {}})
        self.assertEqual(a["error"]["code"], -32602)

        # an API error is a tool result with isError, not a protocol error
        r = self.failed("snapshot_create", sandbox="sbx-nope")
        self.assertEqual(r["structuredContent"]["error"]["code"], "not_found")
        r = self.failed("files_write", sandbox="sbx-nope", path="/x", content="!!", encoding="base64")
        self.assertIn("base64", r["content"][0]["text"])

        # another tenant's sandbox answers as a missing one (404), and is untouched
        _, other = self.new_tenant("mcp-other")
        theirs = other.create()["id"]
        self.addCleanup(lambda: other.raw("DELETE", f"/v1/sandboxes/{theirs}"))
        for name, args in [("exec", {"cmd": "echo pwned > /tmp/x"}),
                           ("files_read", {"path": "/etc/hostname"}),
                           ("files_write", {"path": "/tmp/x", "content": "pwned"}),
                           ("snapshot_create", {}), ("sandbox_delete", {})]:
            r = self.failed(name, sandbox=theirs, **args)
            self.assertEqual(r["structuredContent"]["error"]["status"], 404, r)
            self.assertIn("404", r["content"][0]["text"])
        self.assertNotIn(theirs, [s["id"] for s in self.ok("sandbox_list")["sandboxes"]])
        self.assertEqual(other.call("GET", f"/v1/sandboxes/{theirs}")["state"], "running")
        code, out, _, _ = other.exec(theirs, ["sh", "-c", "cat /tmp/x 2>/dev/null; echo end"])
        self.assertEqual(out, b"end\n")

        # a line past the 16 MiB limit is answered once, skipped, and the
        # server carries on
        m.send_raw(b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"' +
                   b"x" * (16 << 20) + b'"}}\n')
        a = m.recv()
        self.assertEqual(a["error"]["code"], -32700)
        self.assertIn("too long", a["error"]["message"])
        self.assertEqual(m.request("ping")["result"], {})

        # a line of invalid UTF-8 and NULs: a parse error, still alive
        error_of(b'{"jsonrpc":"2.0","id":"\xff\x00","method":"ping"}\n', -32700)
        self.assertEqual(m.request("ping")["result"], {})
        self.assertEqual(m.close(), 0)

    def test_older_protocol_and_unreachable_server(self):
        # a version we speak is echoed; one we do not gets ours
        a = self.mcp.request("initialize", {"protocolVersion": "2024-11-05", "capabilities": {}})
        self.assertEqual(a["result"]["protocolVersion"], "2024-11-05")
        a = self.mcp.request("initialize", {"protocolVersion": "1999-01-01", "capabilities": {}})
        self.assertEqual(a["result"]["protocolVersion"], "2025-06-18")
        # a server that cannot be reached: a tool error, not a crash
        with tempfile.NamedTemporaryFile("w", suffix=".json") as cfg:
            json.dump({"url": "http://127.0.0.1:1", "api_key": "al_x"}, cfg)
            cfg.flush()
            m = McpClient(cfg.name)
            try:
                r = m.call("sandbox_list")
                self.assertTrue(r["isError"])
                self.assertEqual(r["structuredContent"]["error"]["code"], "unavailable")
            finally:
                self.assertEqual(m.close(), 0)


    def test_no_admin_key_by_default(self):
        """With no config of its own (no --config, AIRLOCK_CONFIG or user
        config) the CLI reads /var/lib/airlock/cli.json, where `airlockd up`
        puts the admin key for root's CLI. `airlock` still uses it;
        `airlock mcp` refuses to (the agent would act as admin), and asks
        for a key. Run in a mount namespace with a directory of ours bound
        over /var/lib, so the host's is never touched."""
        if not shutil.which("unshare"):
            self.skipTest("needs unshare")
        call = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                           "params": {"name": "sandbox_list", "arguments": {}}}).encode()
        with tempfile.TemporaryDirectory() as d:
            varlib, home = os.path.join(d, "varlib"), os.path.join(d, "home")
            os.makedirs(os.path.join(varlib, "airlock"))
            os.makedirs(home)
            env = {k: v for k, v in os.environ.items()
                   if not k.startswith("AIRLOCK_") and k != "XDG_CONFIG_HOME"}
            env["HOME"] = home   # no user config

            def run(*args, extra_env=None):
                return subprocess.run(
                    ["unshare", "-m", "sh", "-c", 'mount --bind "$0" /var/lib && exec "$@"',
                     varlib, CLI] + list(args),
                    input=call + b"\n", capture_output=True, env=dict(env, **(extra_env or {})),
                    timeout=120)

            def refused(r):
                self.assertEqual(r.returncode, 125, r.stderr)
                self.assertEqual(r.stdout, b"")   # not one protocol message
                self.assertIn(b"AIRLOCK_API_KEY", r.stderr)
                self.assertIn(b"(key_required)", r.stderr)

            # no key anywhere: refused, not a server that answers 401s
            refused(run("mcp"))
            shutil.copy(os.path.join(self.server.dir, "cli.json"),
                        os.path.join(varlib, "airlock", "cli.json"))
            r = run("ls")   # root's own CLI, as today
            self.assertEqual(r.returncode, 0, r.stderr)
            refused(run("mcp"))
            # a key of its own: served (the url still from that file)
            _, tenant = self.new_tenant(f"mcp-default-{os.getpid()}")
            r = run("mcp", extra_env={"AIRLOCK_API_KEY": tenant.key})
            self.assertEqual(r.returncode, 0, r.stderr)
            answer = json.loads(r.stdout.splitlines()[0])
            self.assertFalse(answer["result"]["isError"], answer)
            # and that file named on purpose is the operator's choice
            r = run("--config", "/var/lib/airlock/cli.json", "mcp")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertFalse(json.loads(r.stdout.splitlines()[0])["result"]["isError"])


if __name__ == "__main__":
    main()
