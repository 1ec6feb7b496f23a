"""Keyset pagination of every list (limit, next_token) and Location on 201
answers, through the real API (docs/API.md, "Pagination")."""
import concurrent.futures
import json
import urllib.parse

from harness import AirlockTestCase, ApiError, main


def pages(client, path, limit):
    """Every page of a list: [(items, next_token), ...]."""
    key = path.split("?")[0].rstrip("/").split("/")[-1]
    out, token = [], None
    sep = "&" if "?" in path else "?"
    while True:
        q = f"{path}{sep}limit={limit}"
        if token:
            q += "&next_token=" + urllib.parse.quote(token)
        got = client.call("GET", q)
        out.append((got[key], got.get("next_token")))
        token = got.get("next_token")
        if not token:
            return out
        if len(out) > 10000:
            raise AssertionError("pagination does not end")


class PaginationTest(AirlockTestCase):
    def create_many(self, client, n, **kw):
        def one(_):
            return client.create(limits={"memory_mb": 32}, **kw)["id"]
        with concurrent.futures.ThreadPoolExecutor(8) as ex:
            return list(ex.map(one, range(n)))

    def delete_all(self, client, ids):
        with concurrent.futures.ThreadPoolExecutor(8) as ex:
            list(ex.map(lambda i: client.call("DELETE", f"/v1/sandboxes/{i}",
                                              expect=(204, 404, 409)), ids))

    def test_sandboxes_250_in_pages(self):
        _, client = self.new_tenant("pages250")
        ids = self.create_many(client, 250)
        try:
            ps = pages(client, "/v1/sandboxes", 100)
            self.assertEqual([len(p[0]) for p in ps], [100, 100, 50])
            self.assertIsNone(ps[-1][1])
            seen = [s["id"] for p in ps for s in p[0]]
            self.assertEqual(sorted(seen), sorted(ids))
            self.assertEqual(len(seen), len(set(seen)))
            keys = [(s["created_at"], s["id"]) for p in ps for s in p[0]]
            self.assertEqual(keys, sorted(keys))
            # the default page is 100; no token means everything fits
            got = client.call("GET", "/v1/sandboxes")
            self.assertEqual(len(got["sandboxes"]), 100)
            self.assertTrue(got["next_token"])
            got = client.call("GET", "/v1/sandboxes?limit=1000")
            self.assertEqual(len(got["sandboxes"]), 250)
            self.assertIsNone(got["next_token"])
            # filters and pages compose
            got = client.call("GET", "/v1/sandboxes?state=running&limit=7")
            self.assertEqual(len(got["sandboxes"]), 7)
        finally:
            self.delete_all(client, ids)

    def test_concurrent_creates_and_deletes_neither_repeat_nor_skip(self):
        _, client = self.new_tenant("pagesrace")
        keep = self.create_many(client, 30)
        doomed = self.create_many(client, 10)
        extra = []
        try:
            token, seen, n = None, [], 0
            while True:
                q = "/v1/sandboxes?limit=4" + (f"&next_token={token}" if token else "")
                got = client.call("GET", q)
                seen += [s["id"] for s in got["sandboxes"]]
                # between pages: one created, one deleted
                extra.append(client.create(limits={"memory_mb": 32})["id"])
                if n < len(doomed):
                    client.delete(doomed[n])
                n += 1
                token = got["next_token"]
                if not token:
                    break
            self.assertEqual(len(seen), len(set(seen)), "an item came twice")
            missing = set(keep) - set(seen)
            self.assertFalse(missing, "existing sandboxes were skipped")
        finally:
            self.delete_all(client, keep + doomed + extra)

    def test_bad_limit_and_token_are_400(self):
        for q in ("limit=0", "limit=1001", "limit=x", "limit=-1", "next_token=garbage!",
                  "next_token=" + urllib.parse.quote("djE6MTox+/=")):
            for path in ("/v1/sandboxes", "/v1/tenants", "/v1/credentials", "/v1/templates",
                         "/v1/nodes"):
                status, body, _ = self.api.raw("GET", f"{path}?{q}")
                self.assertEqual(status, 400, (path, q, body))
                self.assertEqual(json.loads(body)["error"]["code"], "invalid_field")
        # a well-formed token of another list is only a position: fine
        got = self.api.call("GET", "/v1/sandboxes?limit=1000")
        self.assertIn("next_token", got)

    def test_tenants_credentials_templates_nodes_page(self):
        names = [f"pt{i:02d}" for i in range(12)]
        for nm in names:
            self.api.call("POST", "/v1/tenants", {"name": nm})
        ps = pages(self.api, "/v1/tenants", 5)
        seen = [t["name"] for p in ps for t in p[0]]
        self.assertEqual(len(seen), len(set(seen)))
        self.assertTrue(set(names) <= set(seen))
        self.assertTrue(all(len(p[0]) == 5 for p in ps[:-1]))

        _, client = self.new_tenant("pagescred")
        made = []
        for i in range(7):
            made.append(client.call("POST", "/v1/credentials", {
                "name": f"c{i}", "value": "v", "hosts": ["example.com"], "inject": {"type": "header"}})["id"])
        ps = pages(client, "/v1/credentials", 3)
        self.assertEqual([len(p[0]) for p in ps], [3, 3, 1])
        seen = [c["id"] for p in ps for c in p[0]]
        self.assertEqual(sorted(seen), sorted(made))
        # newest first
        self.assertEqual(seen, [c["id"] for c in
                                client.call("GET", "/v1/credentials?limit=1000")["credentials"]])

        one = pages(self.api, "/v1/templates", 1)
        self.assertTrue(all(len(p[0]) == 1 for p in one))
        self.assertEqual(len(one), len(self.api.call("GET", "/v1/templates")["templates"]))
        nodes = pages(self.api, "/v1/nodes", 1)
        self.assertEqual(sum(len(p[0]) for p in nodes),
                         len(self.api.call("GET", "/v1/nodes")["nodes"]))

    def test_snapshots_processes_events_page(self):
        sbx = self.api.create(template="busybox")
        sid = sbx["id"]
        try:
            for i in range(5):
                self.api.call("POST", f"/v1/sandboxes/{sid}/snapshots", {"name": f"s{i}"})
            ps = pages(self.api, f"/v1/sandboxes/{sid}/snapshots", 2)
            self.assertEqual([[s["name"] for s in p[0]] for p in ps],
                             [["s0", "s1"], ["s2", "s3"], ["s4"]])
            for _ in range(5):
                self.api.exec(sid, ["true"])
            ps = pages(self.api, f"/v1/sandboxes/{sid}/processes", 2)
            pids = [p["pid"] for pg in ps for p in pg[0]]
            self.assertEqual(len(pids), 5)
            self.assertEqual(len(pids), len(set(pids)))
            for _ in range(3):
                self.api.call("POST", f"/v1/sandboxes/{sid}/pause")
                self.api.call("POST", f"/v1/sandboxes/{sid}/resume")
            allev = self.api.call("GET", f"/v1/sandboxes/{sid}/events?limit=1000")["events"]
            ps = pages(self.api, f"/v1/sandboxes/{sid}/events", 2)
            self.assertEqual([e for p in ps for e in p[0]], allev)
            self.assertGreater(len(ps), 2)
        finally:
            self.api.delete(sid)

    def test_location_on_201(self):
        status, body, r = self.api.raw("POST", "/v1/sandboxes", {"template": "busybox"})
        self.assertEqual(status, 201, body)
        sbx = json.loads(body)
        sid = sbx["id"]
        try:
            self.assertEqual(r.getheader("Location"), f"/v1/sandboxes/{sid}")
            self.assertEqual(self.api.call("GET", r.getheader("Location"))["id"], sid)
            status, body, r = self.api.raw("POST", f"/v1/sandboxes/{sid}/snapshots", {"name": "l1"})
            self.assertEqual(status, 201, body)
            snap = json.loads(body)
            self.assertEqual(r.getheader("Location"), f"/v1/sandboxes/{sid}/snapshots/{snap['id']}")
            status, body, r = self.api.raw("POST", f"/v1/sandboxes/{sid}/fork", {"count": 1})
            self.assertEqual(status, 201, body)
            kid = json.loads(body)["sandboxes"][0]["id"]
            self.assertEqual(r.getheader("Location"), f"/v1/sandboxes/{kid}")
            self.api.delete(kid)
            status, body, r = self.api.raw("POST", f"/v1/sandboxes/{sid}/port-tokens", {"port": 80})
            self.assertEqual(status, 201, body)
            self.assertEqual(r.getheader("Location"), f"/v1/sandboxes/{sid}/ports/80/")
        finally:
            self.api.delete(sid)
        status, body, r = self.api.raw("POST", "/v1/tenants", {"name": "loc-t"})
        self.assertEqual(status, 201, body)
        tid = json.loads(body)["id"]
        self.assertEqual(r.getheader("Location"), f"/v1/tenants/{tid}")
        status, body, r = self.api.raw("POST", "/v1/keys", {"tenant": tid})
        self.assertEqual(status, 201, body)
        self.assertEqual(r.getheader("Location"), f"/v1/keys/{json.loads(body)['id']}")
        status, body, r = self.api.raw("POST", "/v1/credentials", {
            "name": "loc", "value": "v", "hosts": ["example.com"], "inject": {"type": "header"}})
        self.assertEqual(status, 201, body)
        self.assertEqual(r.getheader("Location"), f"/v1/credentials/{json.loads(body)['id']}")


if __name__ == "__main__":
    main()
