#!/usr/bin/env python3
"""Secrets in the configuration (issue 34, item 8).

- Each role keeps only the secrets it uses: with the S3 keys configured (one
  inline in the config file, one from `s3_secret_key_file`), neither is
  anywhere in the memory of the api, the gateway or nodemgr, while the node,
  which talks to the object store, holds both (the control: the scan finds
  what is there).
- A config file that holds a secret and every user can read is warned about
  at start.
- A `*_file` that every user can read is refused: `airlockd` does not start
  and says which setting and file.
- `db_password_file` reaches PostgreSQL: a server that wants a password for
  the `db` URL (which names none) serves with the one in the file.
"""
import os
import re
import secrets
import subprocess
import tempfile
import unittest

from harness import AIRLOCKD, AirlockTestCase, Postgres, Server, main

PG_BIN = "/usr/lib/postgresql/15/bin"

ACCESS_KEY = "AKIA" + secrets.token_hex(8).upper()
SECRET_KEY = "sk-" + secrets.token_hex(16)


def memory_holds(pid, needles):
    """Which of needles (bytes) are anywhere in the process's readable memory."""
    found = set()
    with open(f"/proc/{pid}/maps") as f:
        maps = f.read().splitlines()
    with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
        for line in maps:
            fields = line.split()
            if "r" not in fields[1] or (len(fields) > 5 and fields[5] in ("[vvar]", "[vsyscall]")):
                continue
            start, end = (int(x, 16) for x in fields[0].split("-"))
            try:
                mem.seek(start)
                data = mem.read(end - start)
            except OSError:
                continue
            found |= {n for n in needles if n in data}
    return found


class ConfigSecrets(AirlockTestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="airlock-secrets-")
        key_file = os.path.join(cls.tmp, "s3.key")
        with open(os.open(key_file, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write(SECRET_KEY + "\n")
        cls.conf = os.path.join(cls.tmp, "airlockd.conf")
        with open(cls.conf, "w") as f:
            f.write(f"s3_access_key = {ACCESS_KEY}\ns3_secret_key_file = {key_file}\n")
        os.chmod(cls.conf, 0o644)  # on purpose: the start-up warns about it
        cls.extra_args = ("--config", cls.conf)
        super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        subprocess.run(["rm", "-rf", cls.tmp], check=False)

    def test_each_role_keeps_only_its_secrets(self):
        needles = {ACCESS_KEY.encode(), SECRET_KEY.encode()}
        roles = ["api", "node", "nodemgr"]
        if os.path.exists(os.path.join(self.server.dir, "run", "gateway.pid")):
            roles.append("gateway")
        held = {r: memory_holds(self.server.pid_of(r), needles) for r in roles}
        self.assertEqual(held["node"], needles, "the node (the object store's client) needs both keys")
        for role in roles:
            if role != "node":
                self.assertEqual(held[role], set(), f"{role} holds an S3 key it never uses")

    def test_world_readable_config_with_a_secret_is_warned(self):
        log = self.server.log()
        self.assertRegex(log, re.escape(self.conf) + r" holds a secret \(`s3_access_key`\) and every user can read it")

    def test_world_readable_secret_file_is_refused(self):
        leaky = os.path.join(self.tmp, "leaky.key")
        with open(leaky, "w") as f:
            f.write("x\n")
        os.chmod(leaky, 0o644)
        r = subprocess.run([AIRLOCKD, "api", "--set", f"s3_secret_key_file={leaky}"],
                           capture_output=True, text=True, timeout=30,
                           env=dict(os.environ, AIRLOCK_CONFIG=""))
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn(f"s3_secret_key_file: secret file `{leaky}`: mode 0644 lets every user read it",
                      r.stderr)


class DatabasePasswordFromFile(unittest.TestCase):
    def test_db_password_file_reaches_postgres(self):
        if not os.path.exists(os.path.join(PG_BIN, "initdb")):
            self.skipTest("needs postgresql-15")
        pg = Postgres()
        self.addCleanup(pg.stop)
        port = pg.url.rsplit(":", 1)[1].split("/")[0]
        # Characters a URL must encode, so the query parameter is tested too.
        password = "p@ss w/&" + secrets.token_hex(8)
        admin = [os.path.join(PG_BIN, "psql"), "-h", pg.dir, "-p", port, "-U", "postgres",
                 "-d", "postgres", "-qAtX", "-v", "ON_ERROR_STOP=1"]
        subprocess.run(admin + ["-c", f"ALTER ROLE airlock PASSWORD '{password}'"], check=True,
                       capture_output=True)
        # TCP (what the daemons use) now wants the password; the socket stays trusted.
        hba = os.path.join(pg.dir, "data", "pg_hba.conf")
        with open(hba) as f:
            lines = [re.sub(r"\btrust$", "scram-sha-256", l) if l.startswith("host") else l
                     for l in f.read().splitlines()]
        with open(hba, "w") as f:
            f.write("\n".join(lines) + "\n")
        subprocess.run(admin + ["-c", "SELECT pg_reload_conf()"], check=True, capture_output=True)
        r = subprocess.run([os.path.join(PG_BIN, "psql"), pg.url, "-w", "-c", "SELECT 1"],
                           capture_output=True, text=True, env=dict(os.environ, PGPASSWORD=""))
        self.assertNotEqual(r.returncode, 0, "the URL alone still gets in: the test proves nothing")

        pw_file = os.path.join(pg.dir, "db.password")
        with open(os.open(pw_file, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write(password + "\n")
        server = Server("busybox", ["--db", pg.url, "--set", f"db_password_file={pw_file}"])
        self.addCleanup(server.cleanup)
        server.start()
        api = server.client()
        sid = api.create(template="busybox")["id"]
        code, out, _, _ = api.exec(sid, ["echo", "on-postgres"])
        self.assertEqual((code, out), (0, b"on-postgres\n"))
        api.delete(sid)


if __name__ == "__main__":
    main()
