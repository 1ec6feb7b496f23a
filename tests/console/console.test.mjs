// console.test.mjs - the web console in a real headless browser (Debian's
// chromium, driven by playwright-core from console/node_modules; no browser
// is downloaded). Run by tests/e2e/test_console.py, which starts a real
// `airlockd up` and passes, in the environment:
//   AIRLOCK_URL      http://127.0.0.1:PORT
//   TENANT_KEY       a key of tenant A (the user of the console)
//   OTHER_KEY        a key of tenant B (must see none of A's things)
//   ADMIN_KEY        an admin key
//   SHOT_DIR         where to write a screenshot of each page
//   TEMPLATE_DIR     a root file system (busybox) on this host to build a template from
// Exits non-zero on the first failed check, printing it.
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, "../../console/package.json"));
const { chromium } = require("playwright-core");

const URL0 = process.env.AIRLOCK_URL;
const KEY = process.env.TENANT_KEY, OTHER = process.env.OTHER_KEY, ADMIN = process.env.ADMIN_KEY;
const SHOTS = process.env.SHOT_DIR;
const T = 120000;   // a create or rollback on a loaded machine

function check(cond, what) {
	if (!cond) throw new Error("FAILED: " + what);
	console.log("ok: " + what);
}

async function api(method, p, body, key = KEY) {
	const h = { Authorization: "Bearer " + key };
	let b = body;
	if (body !== undefined && typeof body !== "string") {
		h["Content-Type"] = "application/json";
		b = JSON.stringify(body);
	}
	const r = await fetch(URL0 + p, { method, headers: h, body: b });
	const text = await r.text();
	return { status: r.status, text, json: () => JSON.parse(text) };
}

async function shot(page, name) {
	const f = path.join(SHOTS, name + ".png");
	await page.screenshot({ path: f, fullPage: true });
	console.log("screenshot: " + f);
}

async function termText(page) {
	return page.locator("#terminal .xterm-rows").innerText();
}

// Type a line into the terminal and wait until `want` shows in it.
// want: a regular expression source, so that the echo of the typed line
// (which holds the command, not its output) does not match.
async function termRun(page, line, want) {
	await page.locator("#terminal").click();
	await page.keyboard.type(line + "\n", { delay: 5 });
	await page.waitForFunction(
		(w) => new RegExp(w).test((document.querySelector("#terminal .xterm-rows") || {}).innerText || ""),
		want, { timeout: 30000 });
}

async function signIn(page, key) {
	await page.goto(URL0 + "/console/");
	await page.waitForSelector("#signin:not([hidden])");
	await page.fill("#key", key);
	await page.click("#signin-go");
	await page.waitForSelector("#top:not([hidden])");
}

async function signOut(page) {
	await page.click("#signout");
	await page.waitForSelector("#signin:not([hidden])");
}

async function main() {
	const browser = await chromium.launch({ executablePath: "/usr/bin/chromium", args: ["--no-sandbox"] });
	const problems = [];   // CSP violations, page errors, alerts: none allowed
	let sid = null;
	try {
		const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });
		const page = await ctx.newPage();
		page.on("pageerror", (e) => problems.push("page error: " + e.message));
		page.on("console", (m) => {
			if (m.type() === "error" && /Content Security Policy|Refused/.test(m.text()))
				problems.push("console: " + m.text());
		});
		// Confirmations are accepted; any other dialog (an alert from an
		// injected script) is a failure.
		page.on("dialog", async (d) => {
			if (d.type() !== "confirm") problems.push("unexpected " + d.type() + ": " + d.message());
			await d.accept();
		});
		const urls = [];
		page.on("request", (r) => urls.push(r.url()));

		// SSE streams of both tenants, read for the whole test
		const streams = {};
		for (const [who, k] of [["a", KEY], ["b", OTHER]]) {
			const ctrl = new AbortController();
			const r = await fetch(URL0 + "/v1/sandboxes/events", { headers: { Authorization: "Bearer " + k }, signal: ctrl.signal });
			check(r.status === 200 && r.headers.get("content-type") === "text/event-stream", "GET /v1/sandboxes/events is an event stream");
			streams[who] = { ctrl, text: "" };
			(async () => {
				const dec = new TextDecoder();
				try { for await (const chunk of r.body) streams[who].text += dec.decode(chunk); } catch (e) { /* aborted */ }
			})();
		}

		// --- sign in
		await page.goto(URL0 + "/console/");
		await page.waitForSelector("#signin:not([hidden])");
		await shot(page, "01-signin");
		await page.fill("#key", "not-a-key");
		await page.click("#signin-go");
		await page.waitForFunction(() => document.getElementById("signin-error").textContent.includes("refused"));
		check(true, "a wrong key is refused on the sign-in page");
		await page.fill("#key", KEY);
		await page.click("#signin-go");
		await page.waitForSelector("#sandboxes");
		check(await page.evaluate(() => sessionStorage.getItem("airlock_api_key")) === KEY,
		      "the key is held in sessionStorage");
		check(await page.evaluate(() => localStorage.length === 0 && document.cookie === ""),
		      "nothing in localStorage or cookies");
		check(await page.isHidden("#nav-admin"), "a tenant key sees no Admin link");

		// --- create from the table
		await page.selectOption("#new-template", "busybox");
		await page.click("#create-sandbox");
		await page.waitForSelector("#sandboxes tbody tr td.state-running", { timeout: T });
		sid = await page.locator("#sandboxes tbody tr").first().getAttribute("data-id");
		check(/^[A-Za-z0-9_-]+$/.test(sid || ""), "the table shows the new sandbox " + sid);
		const sbApi = (await api("GET", "/v1/sandboxes/" + sid)).json();
		check(sbApi.state === "running", "the API has it running");
		// use beside the limits, from GET .../metrics
		await page.waitForFunction((id) => /^\d+ MiB \/ \d+ MiB$/.test(
			document.querySelector(`#sandboxes tr[data-id="${id}"] td[data-field="memory"]`)?.textContent || ""), sid, { timeout: T });
		check(true, "the table shows the sandbox's memory use beside its limit");
		const cells = await page.locator(`#sandboxes tr[data-id="${sid}"] td`).allInnerTexts();
		check(cells[2].startsWith("busybox") && cells[3] === sbApi.backend, "template and backend columns: " + cells.slice(0, 6).join(" | "));
		// a filter that excludes it
		await page.selectOption("#filter-state", "paused");
		await page.waitForFunction(() => document.querySelectorAll("#sandboxes tbody tr").length === 0);
		check(true, "the state filter hides a running sandbox when filtering on paused");
		await page.selectOption("#filter-state", "running");
		await page.waitForSelector(`#sandboxes tr[data-id="${sid}"]`);
		await page.selectOption("#filter-state", "");
		// live state: pause through the API, the table follows without a reload
		await page.waitForSelector('#live[data-live="sse"]');
		check(true, "the table is live over server-sent events");
		check((await api("POST", `/v1/sandboxes/${sid}/pause`)).status === 200, "pause via the API");
		await page.waitForSelector(`#sandboxes tr[data-id="${sid}"] td.state-paused`, { timeout: 15000 });
		check(true, "the table shows the pause (no reload)");
		// resume from the table's action, with its confirmation
		await page.click(`#sandboxes tr[data-id="${sid}"] button[data-action="resume"]`);
		await page.waitForSelector(`#sandboxes tr[data-id="${sid}"] td.state-running`, { timeout: T });
		check((await api("GET", "/v1/sandboxes/" + sid)).json().state === "running", "resume from the table");
		await shot(page, "02-sandboxes");

		// --- terminal
		await page.goto(URL0 + `/console/#/sandbox/${sid}/terminal`);
		await page.waitForSelector("#terminal[data-pid]", { timeout: T });
		await termRun(page, "mkdir -p /data && echo v1-$((6*7)) > /data/marker.txt && cat /data/marker.txt", "\\nv1-42");
		check(true, "a command typed in the terminal ran and its output shows (v1-42)");
		await shot(page, "03-terminal");
		await termRun(page, "echo SIZE=$(stty size | tr ' ' x)", "SIZE=\\d+x\\d+");
		const size1 = (await termText(page)).match(/SIZE=(\d+x\d+)/)[1];
		await page.setViewportSize({ width: 800, height: 600 });
		await page.waitForTimeout(1000);
		await termRun(page, "clear; echo SIZE2=$(stty size | tr ' ' x)", "SIZE2=\\d+x\\d+");
		const size2 = (await termText(page)).match(/SIZE2=(\d+x\d+)/)[1];
		check(size1 !== size2, `the PTY follows the window: ${size1} -> ${size2}`);
		await page.setViewportSize({ width: 1280, height: 900 });
		// Wait until that resize reached the PTY: a resize that lands after
		// the pause below would resume the sandbox (a paused sandbox is
		// resumed for any process operation) before the page could show it.
		for (let i = 0; ; i++) {
			await termRun(page, `clear; echo SIZE3_${i}=$(stty size | tr ' ' x)`, `SIZE3_${i}=\\d+x\\d+`);
			const m = (await termText(page)).match(new RegExp(`SIZE3_${i}=(\\d+x\\d+)`));
			if (m[1] !== size2) break;
			if (i >= 40) throw new Error("the PTY kept the small window's size " + size2);
			await page.waitForTimeout(250);
		}

		const shellPid = Number(await page.getAttribute("#terminal", "data-pid"));
		// the page's header is live too: a pause made elsewhere shows at once
		check((await api("POST", `/v1/sandboxes/${sid}/pause`)).status === 200, "pause via the API (terminal open)");
		const t0 = Date.now();
		// no reload in between; how soon is printed, not asserted (a shared machine)
		await page.waitForSelector("#sandbox-state.state-paused", { timeout: 15000 });
		check(true, `the sandbox page's state follows (SSE): ${Date.now() - t0} ms after the pause answered`);
		check((await api("POST", `/v1/sandboxes/${sid}/resume`)).status === 200, "resume via the API");
		await page.waitForSelector("#sandbox-state.state-running", { timeout: 15000 });
		await termRun(page, "echo after-resume-$((1+1))", "\\nafter-resume-2");
		check(true, "the terminal still works after a pause and resume");

		// --- snapshot from the timeline, change the file, roll back
		await page.goto(URL0 + `/console/#/sandbox/${sid}/snapshots`);
		// leaving the terminal ends its shell (SIGHUP), which would outlive the stream
		let shellGone = false;
		for (let i = 0; i < 50 && !shellGone; i++) {
			const ps = (await api("GET", `/v1/sandboxes/${sid}/processes`)).json().processes;
			shellGone = ps.some((p) => p.pid === shellPid && !p.running);
			if (!shellGone) await new Promise((res) => setTimeout(res, 200));
		}
		check(shellGone, "leaving the terminal ended its shell (pid " + shellPid + ")");
		await page.fill("#snapshot-name", "before");
		await page.click("#take-snapshot");
		await page.waitForSelector('#timeline .mark[data-snapshot="before"]', { timeout: T });
		check(true, "the snapshot shows on the timeline");
		check((await api("PUT", `/v1/sandboxes/${sid}/files?path=/data/marker.txt`, "v2\n")).status === 204,
		      "the file changed after the snapshot (via the API)");
		await page.click('#timeline .mark[data-snapshot="before"]');
		await page.click('#snapshot-detail button[data-action="rollback"]');
		await page.waitForFunction(() => document.getElementById("toast").textContent.includes("rolled back"),
					   null, { timeout: T });
		const after = await api("GET", `/v1/sandboxes/${sid}/files?path=/data/marker.txt`);
		check(after.status === 200 && after.text === "v1-42\n", "after the rollback the file is the snapshot's: " + JSON.stringify(after.text));
		const evs = (await api("GET", `/v1/sandboxes/${sid}/events`)).json().events;
		check(evs.some((e) => e.to === "rolling_back" || /roll/.test(e.reason || "")), "the lifecycle log has the rollback");
		// fork from the same point of the timeline: the child has the snapshot's file
		await page.click('#timeline .mark[data-snapshot="before"]');
		await page.click('#snapshot-detail button[data-action="fork"]');
		await page.waitForFunction(() => /forked sb-/.test(document.getElementById("toast").textContent), null, { timeout: T });
		const child = (await page.locator("#toast").innerText()).match(/forked (sb-[0-9a-f]+)/)[1];
		const childSb = (await api("GET", "/v1/sandboxes/" + child)).json();
		const childFile = await api("GET", `/v1/sandboxes/${child}/files?path=/data/marker.txt`);
		check(childSb.parent === sid && childFile.text === "v1-42\n", `fork from the timeline: ${child}, parent ${childSb.parent}, file ${JSON.stringify(childFile.text)}`);
		check((await api("DELETE", "/v1/sandboxes/" + child)).status === 204, "the fork deleted");
		await shot(page, "04-snapshots");

		// --- files: upload a file with a hostile name, see it in the list, view it
		await page.goto(URL0 + `/console/#/sandbox/${sid}/files`);
		await page.fill("#files-path", "/data");
		await page.click("#files-go");
		await page.waitForSelector('#files tr[data-name="marker.txt"]');
		const [dl] = await Promise.all([page.waitForEvent("download"),
			page.click('#files tr[data-name="marker.txt"] button[data-action="download"]')]);
		const dlText = fs.readFileSync(await dl.path(), "utf8");
		check(dl.suggestedFilename() === "marker.txt" && dlText === "v1-42\n", "download gives the file: " + JSON.stringify(dlText));
		const evil = "<img src=x onerror=alert(1)>.txt";
		await page.setInputFiles("#file-upload", { name: evil, mimeType: "text/plain", buffer: Buffer.from("<script>alert(2)</script>\n") });
		await page.waitForSelector(`#files tr[data-name="${evil}"]`, { timeout: 30000 });
		check(true, "the uploaded file is in the list");
		const up = await api("GET", `/v1/sandboxes/${sid}/files?path=${encodeURIComponent("/data/" + evil)}`);
		check(up.status === 200 && up.text === "<script>alert(2)</script>\n", "the upload reached the sandbox byte for byte");
		await page.click(`#files tr[data-name="${evil}"] button[data-action="view"]`);
		await page.waitForFunction(() => (document.getElementById("file-view") || {}).textContent?.includes("alert(2)"));
		check(await page.evaluate(() => document.querySelectorAll("#view img, #view script").length === 0),
		      "the file name and its content are shown as text (no img or script element)");
		await shot(page, "05-files");

		// --- hostile metadata and a credential: shown as text, never a value
		const evilMeta = "<img src=x onerror=alert(3)><script>alert(4)</script>";
		const sb2 = (await api("POST", "/v1/sandboxes", { template: "busybox", metadata: { note: evilMeta } })).json();
		check(sb2.state === "running", "a second sandbox with HTML in its metadata");
		await page.goto(URL0 + `/console/#/sandbox/${sb2.id}/events`);
		await page.waitForSelector("#sandbox-id");
		check((await page.locator("#view").innerText()).includes(evilMeta) &&
		      await page.evaluate(() => document.querySelectorAll("#view img, #view script").length === 0),
		      "metadata with HTML shows as its text, no element made");
		await shot(page, "06-metadata");
		check((await api("DELETE", "/v1/sandboxes/" + sb2.id)).status === 204, "the second sandbox deleted");
		const secret = "sk-console-test-" + Date.now();
		const cred = await api("POST", "/v1/credentials", { name: "console-cred", value: secret, hosts: ["api.example.com"], env: "EXAMPLE_KEY",
			inject: { type: "header" } });
		check(cred.status === 201, "a credential for tenant A " + (cred.status === 201 ? "" : cred.text));

		// --- the egress policy editor and the decision log
		await page.goto(URL0 + `/console/#/sandbox/${sid}/network`);
		await page.waitForSelector("#network-policy");
		await page.waitForFunction(() => (document.getElementById("network-policy") || {}).value?.includes("default"));
		await page.fill("#network-policy", '"deny-all"');
		await page.click("#network-save");
		await page.waitForFunction(() => document.getElementById("toast").textContent.includes("policy saved"));
		const pol = (await api("GET", `/v1/sandboxes/${sid}/network`)).json();
		check(pol.network.default === "deny", "the policy saved from the editor is in force: " + JSON.stringify(pol.network));
		const denied = await api("POST", `/v1/sandboxes/${sid}/exec`, { cmd: ["sh", "-c",
			"echo '192.0.2.1 denied.test' >> /etc/hosts; timeout 10 wget -q -O /dev/null http://denied.test/ 2>&1; true"] });
		check(denied.status === 200, "the denied request ran: " + denied.status + " " + denied.text.slice(0, 300));
		const log = (await api("GET", `/v1/sandboxes/${sid}/network/log`)).json();
		check(log.entries.some((e) => e.host === "denied.test" && e.decision === "deny"),
		      "the gateway logged it: " + JSON.stringify(log.entries.slice(-3)));
		await page.goto(URL0 + "/console/#/sandboxes");   // leave and come back: the tab reads the log
		await page.goto(URL0 + `/console/#/sandbox/${sid}/network`);
		await page.waitForFunction(() => [...document.querySelectorAll("#network-log tbody tr")]
			.some((r) => r.innerText.includes("denied.test") && r.innerText.includes("deny")), null, { timeout: 15000 });
		check(true, "the egress log shows the denied request to denied.test");
		await shot(page, "06-network");

		// a crafted link with a path in the id opens the list, calls nothing else
		const before = urls.length;
		await page.goto(URL0 + "/console/#/sandbox/" + encodeURIComponent(sid + "/ports/80/x") + "/terminal");
		await page.waitForSelector("#sandboxes");
		check(!urls.slice(before).some((u) => u.includes("ports") || u.includes("/exec")),
		      "a sandbox id holding a path is refused by the page");

		// --- a forwarded port's link: the host-routed URL with a fresh port token
		await page.goto(URL0 + `/console/#/sandbox/${sid}/ports`);
		await page.fill("#port", "8080");
		await page.click("#port-open");
		await page.waitForSelector("#port-links a");
		const link = page.locator("#port-links a").first();
		const href = await link.getAttribute("href");
		check(new RegExp(`^http://8080-${sid}\\.sbx\\.test/\\?airlock_token=[A-Za-z0-9_%-]+$`).test(href) &&
		      (await link.getAttribute("rel")) === "noopener noreferrer" && !href.includes(KEY),
		      "the ports tab links the host-routed URL with a port token (not the key): " + href.replace(/=.*/, "=…"));
		await shot(page, "06-ports");

		// --- the other tabs render
		for (const [tab, sel] of [["events", "#events tbody tr"]]) {
			await page.goto(URL0 + `/console/#/sandbox/${sid}/${tab}`);
			await page.waitForSelector(sel);
			await shot(page, "06-" + tab);
		}
		for (const [pg, sel] of [["credentials", "#credentials tbody tr"], ["templates", "#templates tbody tr"]]) {
			await page.goto(URL0 + "/console/#/" + pg);
			await page.waitForSelector(sel);
			await shot(page, "07-" + pg);
		}
		await page.goto(URL0 + "/console/#/credentials");
		await page.waitForSelector("#audit tbody tr");   // its "created" row
		const credText = await page.locator("#view").innerText();
		check(credText.includes("console-cred") && credText.includes("api.example.com") && credText.includes("EXAMPLE_KEY") &&
		      !credText.includes(secret), "the credentials page shows name, hosts, env and audit, never the value");
		check(!urls.some((u) => u.includes(KEY)), "the key is in no URL the page requested (" + urls.length + " requests)");

		// --- another tenant sees none of it
		await signOut(page);
		check(await page.evaluate(() => sessionStorage.getItem("airlock_api_key")) === null, "sign out forgets the key");
		await signIn(page, OTHER);
		await page.waitForSelector("#sandboxes-status:not(:empty)");
		check(await page.locator("#sandboxes tbody tr").count() === 0, "tenant B's table is empty");
		await page.goto(URL0 + `/console/#/sandbox/${sid}/files`);
		await page.waitForSelector("#view p.error");
		check(!(await page.locator("#view").innerText()).includes("marker.txt"), "tenant B cannot open A's sandbox page");
		const bFile = await api("GET", `/v1/sandboxes/${sid}/files?path=/data/marker.txt`, undefined, OTHER);
		check(bFile.status === 404, "tenant B's key gets 404 for A's file");
		await shot(page, "08-other-tenant");
		await page.goto(URL0 + "/console/#/credentials");
		await page.waitForSelector("#credentials");
		await page.waitForTimeout(500);
		check(!(await page.locator("#view").innerText()).includes("console-cred"), "tenant B's credentials page lacks A's credential");

		// --- admin
		await signOut(page);
		await signIn(page, ADMIN);
		check(await page.isVisible("#nav-admin"), "an admin key sees the Admin link");
		await page.goto(URL0 + "/console/#/admin");
		await page.waitForSelector("#tenants tbody tr");
		await page.waitForSelector("#nodes tbody tr");
		check(await page.locator("#tenants tbody tr").count() >= 3, "the admin view lists the tenants");
		await page.waitForSelector("#keys tbody tr");
		check(!(await page.locator("#keys").innerText()).includes(KEY), "the keys table never shows a key");
		// a key made on the page, then revoked from the list
		const nKeys = await page.locator("#keys tbody tr").count();
		await page.fill("#key-tenant", "console-b");
		await page.click("#key-create");
		await page.waitForFunction((n) => document.querySelectorAll("#keys tbody tr").length === n + 1, nKeys, { timeout: T });
		const made = await page.locator("#new-key code.secret").innerText();
		const madeId = await page.locator("#new-key code").first().innerText();
		check((await api("GET", "/v1/sandboxes", undefined, made)).status === 200, "the key made on the page works");
		await page.click(`#keys tr[data-id="${madeId}"] button[data-action="revoke"]`);
		await page.waitForFunction((n) => document.querySelectorAll("#keys tbody tr").length === n, nKeys, { timeout: T });
		check((await api("GET", "/v1/sandboxes", undefined, made)).status === 401, "the key revoked on the page is refused");
		await shot(page, "09-admin");

		// --- a template build from a host directory, its progress streamed in
		await page.goto(URL0 + "/console/#/templates");
		await page.waitForSelector("#build-go");
		await page.fill("#build-name", "consoletmpl");
		await page.selectOption("#build-kind", "from_dir");
		await page.fill("#build-from", process.env.TEMPLATE_DIR);
		await page.click("#build-go");
		await page.waitForFunction(() => /^(done|error):/m.test(document.getElementById("build-log").textContent),
					   null, { timeout: T });
		const buildLog = await page.locator("#build-log").innerText();
		const nProgress = Number(await page.getAttribute("#build-log", "data-progress") || 0);
		check(/^done: consoletmpl v1$/m.test(buildLog) && nProgress >= 1,
		      `the build's ${nProgress} progress line(s) and its end show: ${JSON.stringify(buildLog.slice(-200))}`);
		await page.waitForFunction(() => [...document.querySelectorAll("#templates tbody tr")].some((r) => r.innerText.includes("consoletmpl")));
		check(true, "the new template is in the list");
		await shot(page, "10-template-build");
		check((await api("DELETE", "/v1/templates/consoletmpl", undefined, ADMIN)).status === 204, "the template deleted");

		// --- delete from the table (as tenant A again), with its confirmation
		await signOut(page);
		await signIn(page, KEY);
		await page.waitForSelector(`#sandboxes tr[data-id="${sid}"]`);
		await page.click(`#sandboxes tr[data-id="${sid}"] button[data-action="delete"]`);
		await page.waitForFunction((id) => !document.querySelector(`#sandboxes tr[data-id="${id}"]`), sid, { timeout: T });
		check((await api("GET", "/v1/sandboxes/" + sid)).status === 404, "delete from the table");
		const deleted = sid;
		sid = null;

		await new Promise((res) => setTimeout(res, 1500));
		for (const st of Object.values(streams)) st.ctrl.abort();
		check(streams.a.text.includes(`"sandbox":"${deleted}"`) && streams.a.text.includes('"to":"paused"') &&
		      streams.a.text.includes('"to":"deleted"'), "tenant A's event stream had its sandbox's transitions");
		check(!streams.b.text.includes(deleted) && !/\nid: /.test(streams.b.text), "tenant B's event stream had none of them");
		check(problems.length === 0, "no CSP violation, page error or unexpected dialog: " + JSON.stringify(problems));
	} catch (e) {
		// what the page showed when it failed
		for (const p of browser.contexts().flatMap((c) => c.pages())) {
			await shot(p, "failure").catch(() => {});
			console.error("toast: " + await p.locator("#toast").innerText().catch(() => ""));
			console.error("view: " + (await p.locator("#view").innerText().catch(() => "")).slice(0, 2000));
		}
		console.error("problems: " + JSON.stringify(problems));
		throw e;
	} finally {
		if (sid) await api("DELETE", "/v1/sandboxes/" + sid).catch(() => {});
		await browser.close();
	}
}

main().then(() => { console.log("console test: all passed"); }, (e) => {
	console.error(e.stack || String(e));
	process.exit(1);
});
