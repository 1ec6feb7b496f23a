"""The clients of the code interpreter against a real `airlockd up` and one
`code-interpreter` sandbox made once: the CLI (`run-code` with state between
cells, stdout/stderr, --env, a matplotlib PNG written to a file that decodes
as PNG, an error's traceback and exit status 1, --json, `code-context`), the
Python SDK (`sb.run_code` and its callbacks, contexts), the TypeScript SDK
(`runCode`, contexts; built by sdk/typescript/setup.sh), MCP's `run_code`
(a chart as an image content) and the console's code tab
(tests/console/code.test.mjs in Debian's chromium)."""
import base64
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

import harness
from harness import BACKEND, CLI, SRC, AirlockTestCase, main

sys.path.insert(0, os.path.join(SRC, "sdk", "python"))
import airlock  # noqa: E402

TEMPLATE = "code-interpreter"
CHART = "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()\n"


def png_size(data):
    """(width, height) of a PNG, after checking every chunk's CRC and that
    the image data inflates to the size the header says; raises otherwise."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("no PNG signature")
    pos, idat, head = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        (crc,) = struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])
        if zlib.crc32(kind + body) != crc:
            raise ValueError(f"bad CRC in {kind!r}")
        if kind == b"IHDR":
            head = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
        pos += 12 + n
    w, h, depth, color = head[:4]
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[color]
    if len(zlib.decompress(idat)) != h * (1 + (w * channels * depth + 7) // 8):
        raise ValueError("image data of the wrong size")
    return w, h


class CodeClientsTest(AirlockTestCase):
    templates = f"busybox,{TEMPLATE}"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        _, cls.key = cls.new_tenant_key("codecli")
        body = {"template": TEMPLATE}
        if BACKEND:
            body["backend"] = BACKEND
        c = cls.server.client(cls.key)
        cls.sid = c.call("POST", "/v1/sandboxes", body)["id"]
        # the CLI's config: the tenant's key, named with --config
        cls.config = os.path.join(cls.server.dir, "codecli.json")
        with open(cls.config, "w") as f:
            json.dump({"url": f"http://{cls.server.addr}", "api_key": cls.key}, f)
        cls.env = {k: v for k, v in os.environ.items()
                   if k not in ("AIRLOCK_URL", "AIRLOCK_API_KEY", "AIRLOCK_CONFIG")}

    @classmethod
    def new_tenant_key(cls, name):
        t = cls.server.client().call("POST", "/v1/tenants", {"name": name})
        return t, cls.server.client().call("POST", "/v1/keys", {"tenant": t["id"]})["key"]

    def cli(self, *args, code=None, cwd=None):
        return subprocess.run([CLI, "--config", self.config, *args], input=code, capture_output=True, text=True,
                              env=self.env, cwd=cwd, timeout=300)

    # ------------------------------------------------------------------ CLI

    def test_1_cli(self):
        r = self.cli("run-code", self.sid, code="y = 6\nimport sys\nprint('err', file=sys.stderr)\n")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("err", r.stderr)
        r = self.cli("run-code", self.sid, "--env", "GREETING=hi", "-c",
                     "import os\nprint(os.environ['GREETING'], y * 7)\ny * 7")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "hi 42\n42\n")

        out = tempfile.mkdtemp(prefix="airlock-codecli-")
        try:
            r = self.cli("run-code", self.sid, "--out", out, code=CHART)
            self.assertEqual(r.returncode, 0, r.stderr)
            path = os.path.join(out, "result-1.png")
            self.assertEqual(r.stdout.strip().splitlines()[-1], f"png: {path}")
            with open(path, "rb") as f:
                w, h = png_size(f.read())
            self.assertGreater(w * h, 10000)
            # a second chart: the next free name, the first kept
            r = self.cli("run-code", self.sid, "--out", out, code=CHART)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn(f"png: {os.path.join(out, 'result-2.png')}", r.stdout)
        finally:
            shutil.rmtree(out)

        r = self.cli("run-code", self.sid, "-c", "print('before')\n1 / 0")
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertEqual(r.stdout, "before\n")
        self.assertIn("ZeroDivisionError", r.stderr)
        self.assertIn("Traceback", r.stderr.replace("\x1b", ""))

        r = self.cli("--json", "run-code", self.sid, "-c", "print(1)\n2")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = [json.loads(x) for x in r.stdout.splitlines()]
        self.assertEqual(lines[0]["type"], "number_of_executions")
        self.assertEqual([x["text"] for x in lines if x["type"] == "stdout"], ["1\n"])
        self.assertIn({"type": "end_of_execution"}, lines)
        main_result = [x for x in lines if x["type"] == "result" and x.get("is_main_result")]
        self.assertEqual(main_result[0]["text"], "2")

        r = self.cli("run-code", "sb-nonexistent", "-c", "1")
        self.assertEqual(r.returncode, 125)
        self.assertIn("(not_found)", r.stderr)

        # contexts: their own state and cwd
        r = self.cli("code-context", "create", self.sid, "--cwd", "/tmp")
        self.assertEqual(r.returncode, 0, r.stderr)
        cid = r.stdout.strip()
        r = self.cli("run-code", self.sid, "--context", cid, "-c", "import os\nprint(os.getcwd())\nz = 5")
        self.assertEqual((r.returncode, r.stdout), (0, "/tmp\n"), r.stderr)
        r = self.cli("run-code", self.sid, "--context", cid, "-c", "'y' in dir()")
        self.assertEqual(r.stdout, "False\n", r.stderr)
        r = self.cli("code-context", "ls", self.sid)
        self.assertIn(cid, r.stdout)
        self.assertEqual(self.cli("code-context", "restart", self.sid, cid).returncode, 0)
        r = self.cli("run-code", self.sid, "--context", cid, "-c", "z")
        self.assertEqual(r.returncode, 1, "a restarted context forgot z")
        self.assertIn("NameError", r.stderr)
        self.assertEqual(self.cli("code-context", "rm", self.sid, cid).returncode, 0)
        self.assertNotIn(cid, self.cli("code-context", "ls", self.sid).stdout)

    # ----------------------------------------------------------- Python SDK

    def test_2_python_sdk(self):
        sb = airlock.Sandbox.connect(self.sid, api_url=f"http://{self.server.addr}", api_key=self.key)
        seen = []
        ex = sb.run_code("import sys\nprint('a')\nprint('b', file=sys.stderr)\n21 * 2",
                         on_stdout=lambda t: seen.append(("out", t)),
                         on_stderr=lambda t: seen.append(("err", t)),
                         on_result=lambda r: seen.append(("result", r.text)))
        self.assertEqual(seen, [("out", "a\n"), ("err", "b\n"), ("result", "42")])
        self.assertEqual((ex.text, ex.logs.stdout, ex.logs.stderr, ex.error),
                         ("42", ["a\n"], ["b\n"], None))
        self.assertIsInstance(ex.execution_count, int)

        ex = sb.run_code(CHART)
        pngs = [r for r in ex.results if r.png]
        self.assertEqual(len(pngs), 1)
        self.assertGreater(png_size(pngs[0].png_bytes())[0], 100)

        errs = []
        ex = sb.run_code("undefined_name", on_error=errs.append)
        self.assertEqual(ex.error.name, "NameError")
        self.assertIn("undefined_name", ex.error.value)
        self.assertIs(errs[0], ex.error)

        ex = sb.run_code("import os\nos.environ.get('ONLY_HERE')", envs={"ONLY_HERE": "yes"})
        self.assertEqual(ex.text, "'yes'")

        ctx = sb.create_code_context(cwd="/tmp")
        self.assertEqual(ctx.cwd, "/tmp")
        self.assertEqual(sb.run_code("import os\nos.getcwd()", context=ctx).text, "'/tmp'")
        self.assertIn(ctx.id, [c.id for c in sb.list_code_contexts()])
        sb.run_code("k = 1", context=ctx)
        sb.restart_code_context(ctx)
        self.assertEqual(sb.run_code("k", context=ctx).error.name, "NameError")
        sb.remove_code_context(ctx)
        self.assertNotIn(ctx.id, [c.id for c in sb.list_code_contexts()])

    # ------------------------------------------------------- TypeScript SDK

    def test_3_typescript_sdk(self):
        sdk = os.path.join(SRC, "sdk", "typescript")
        r = subprocess.run(["sh", os.path.join(sdk, "setup.sh")], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        script = r"""
import assert from "node:assert/strict";
import { Sandbox } from "%s";
const sb = await Sandbox.connect(process.env.SBX, { apiUrl: process.env.URL, apiKey: process.env.KEY });
const seen = [];
let ex = await sb.runCode("import sys\nprint('a')\nprint('b', file=sys.stderr)\n21 * 2", {
  onStdout: (m) => seen.push(["out", m.line]), onStderr: (m) => seen.push(["err", m.line]),
  onResult: (r) => seen.push(["result", r.text]) });
assert.deepEqual(seen, [["out", "a\n"], ["err", "b\n"], ["result", "42"]]);
assert.equal(ex.text, "42");
assert.deepEqual(ex.logs, { stdout: ["a\n"], stderr: ["b\n"] });
assert.equal(typeof ex.executionCount, "number");
ex = await sb.runCode(%s);
const png = ex.results.find((r) => r.png);
assert.ok(png && Buffer.from(png.png, "base64").subarray(1, 4).toString() === "PNG");
ex = await sb.runCode("1/0", { onError: (e) => seen.push(["error", e.name]) });
assert.equal(ex.error.name, "ZeroDivisionError");
assert.deepEqual(seen.at(-1), ["error", "ZeroDivisionError"]);
ex = await sb.runCode("import os\nos.environ['E1']", { envs: { E1: "v1" } });
assert.equal(ex.text, "'v1'");
const ctx = await sb.createCodeContext({ cwd: "/tmp" });
assert.equal((await sb.runCode("import os\nos.getcwd()", { context: ctx })).text, "'/tmp'");
assert.ok((await sb.listCodeContexts()).some((c) => c.id === ctx.id));
await sb.runCode("k = 1", { context: ctx });
await sb.restartCodeContext(ctx);
assert.equal((await sb.runCode("k", { context: ctx })).error.name, "NameError");
await sb.removeCodeContext(ctx.id);
assert.ok(!(await sb.listCodeContexts()).some((c) => c.id === ctx.id));
console.log("ts code: all passed");
""" % (os.path.join(sdk, "dist", "index.js"), json.dumps(CHART))
        with tempfile.NamedTemporaryFile("w", suffix=".mjs", delete=False) as f:
            f.write(script)
        try:
            env = dict(self.env, SBX=self.sid, URL=f"http://{self.server.addr}", KEY=self.key)
            r = subprocess.run(["node", f.name], capture_output=True, text=True, env=env, timeout=300)
        finally:
            os.unlink(f.name)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("ts code: all passed", r.stdout)

    # ------------------------------------------------------------------ MCP

    def test_4_mcp(self):
        p = subprocess.Popen([CLI, "--config", self.config, "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=self.env)
        msgs = [
            {"jsonrpc": "2.0", "id": 1, "method": "initialize",
             "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                        "clientInfo": {"name": "t", "version": "1"}}},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
             "params": {"name": "run_code", "arguments": {"sandbox": self.sid, "code": "print('m')\n" + CHART}}},
            {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
             "params": {"name": "run_code", "arguments": {"sandbox": self.sid, "code": "1/0"}}},
        ]
        out, err = p.communicate("".join(json.dumps(m) + "\n" for m in msgs).encode(), timeout=300)
        answers = {a["id"]: a for a in map(json.loads, out.decode().splitlines())}
        self.assertIn(2, answers, err.decode())
        chart = answers[2]["result"]
        self.assertFalse(chart["isError"], err.decode())
        self.assertEqual(chart["structuredContent"]["stdout"], "m\n")
        images = [c for c in chart["content"] if c["type"] == "image"]
        self.assertEqual(len(images), 1)
        self.assertEqual(images[0]["mimeType"], "image/png")
        self.assertGreater(png_size(base64.b64decode(images[0]["data"]))[0], 100)
        failed = answers[3]["result"]["structuredContent"]
        self.assertEqual(failed["error"]["name"], "ZeroDivisionError")

    # -------------------------------------------------------------- console

    def test_5_console(self):
        if not os.path.exists("/usr/bin/chromium"):
            self.skipTest("no /usr/bin/chromium (test_console.py installs it)")
        shots = os.path.abspath(os.path.join(harness.BIN, "..", "test-artifacts", "console-code"))
        shutil.rmtree(shots, ignore_errors=True)
        os.makedirs(shots)
        env = dict(self.env, AIRLOCK_URL=f"http://{self.server.addr}", TENANT_KEY=self.key,
                   SANDBOX=self.sid, SHOT_DIR=shots)
        r = subprocess.run(["node", os.path.join(SRC, "tests/console/code.test.mjs")], env=env,
                           capture_output=True, text=True, timeout=600)
        sys.stdout.write(r.stdout)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        self.assertIn("code console test: all passed", r.stdout)


if __name__ == "__main__":
    main()
