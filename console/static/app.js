// app.js - the Airlock web console: a client of Airlock's own HTTP API (same
// origin). docs/CONSOLE.md describes it.
//
// Safety rules of this file, because almost every string it shows comes from
// a sandbox or a tenant (ids, metadata, file names, process output, log lines):
//   - DOM nodes are made with el() below: text is always a text node
//     (textContent); nothing is ever parsed as HTML (no innerHTML,
//     insertAdjacentHTML, document.write).
//   - Links: only hash links the console builds from ids (encoded), or
//     http(s) URLs checked by safeHttpUrl().
//   - The API key lives in sessionStorage and goes only into the
//     Authorization header of fetch() calls to this origin.
import { Terminal } from "/console/vendor/xterm.mjs";
import { FitAddon } from "/console/vendor/addon-fit.mjs";

const KEY_ITEM = "airlock_api_key";
const POLL_MS = 2000;

// ---------------------------------------------------------------- helpers

// el("td", {class: "num", onclick: f}, "text", child, ...): text stays text.
function el(tag, attrs, ...children) {
	const e = document.createElement(tag);
	for (const [k, v] of Object.entries(attrs || {})) {
		if (v === undefined || v === null || v === false) continue;
		if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
		else if (k === "class") e.className = v;
		else if (k === "dataset") Object.assign(e.dataset, v);
		else e.setAttribute(k, v === true ? "" : String(v));
	}
	for (const c of children.flat()) {
		if (c === undefined || c === null || c === false) continue;
		e.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
	}
	return e;
}

function clear(node) {
	while (node.firstChild) node.removeChild(node.firstChild);
	return node;
}

// An http(s) URL or null: keeps javascript:, data: and the like out of hrefs.
function safeHttpUrl(s) {
	try {
		const u = new URL(s, location.href);
		return u.protocol === "http:" || u.protocol === "https:" ? u.href : null;
	} catch (e) {
		return null;
	}
}

function b64encode(bytes) {
	let s = "";
	for (let i = 0; i < bytes.length; i += 0x8000)
		s += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
	return btoa(s);
}

function b64decode(s) {
	const bin = atob(s);
	const out = new Uint8Array(bin.length);
	for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
	return out;
}

function age(iso) {
	const t = Date.parse(iso);
	if (isNaN(t)) return "";
	const s = Math.max(0, Math.round((Date.now() - t) / 1000));
	if (s < 60) return s + "s";
	if (s < 3600) return Math.floor(s / 60) + "m";
	if (s < 86400) return Math.floor(s / 3600) + "h" + Math.floor((s % 3600) / 60) + "m";
	return Math.floor(s / 86400) + "d" + Math.floor((s % 86400) / 3600) + "h";
}

function bytes(n) {
	if (n === null || n === undefined) return "";
	const u = ["B", "KiB", "MiB", "GiB", "TiB"];
	let i = 0;
	while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
	return (i ? n.toFixed(1) : String(n)) + " " + u[i];
}

let toastTimer = null;
function toast(msg, isError) {
	const t = document.getElementById("toast");
	t.textContent = msg;
	t.className = isError ? "toast error" : "toast";
	t.hidden = false;
	clearTimeout(toastTimer);
	toastTimer = setTimeout(() => { t.hidden = true; }, isError ? 8000 : 3000);
}

// ---------------------------------------------------------------- the API

class ApiError extends Error {
	constructor(status, code, message) {
		super(message || code || ("HTTP " + status));
		this.status = status;
		this.code = code;
	}
}

function key() {
	return sessionStorage.getItem(KEY_ITEM);
}

// fetch() with the key; the raw Response (for streams and bytes).
async function apiRaw(method, path, body, headers) {
	const h = Object.assign({ Authorization: "Bearer " + key() }, headers || {});
	let payload = body;
	if (body !== undefined && !(body instanceof Blob) && !(body instanceof ArrayBuffer) &&
	    !(body instanceof Uint8Array)) {
		h["Content-Type"] = "application/json";
		payload = JSON.stringify(body);
	}
	const r = await fetch(path, { method, headers: h, body: payload, cache: "no-store",
				      credentials: "omit", redirect: "error" });
	if (!r.ok) {
		let code = "", msg = "";
		try {
			const j = await r.json();
			code = j.error && j.error.code;
			msg = j.error && j.error.message;
		} catch (e) { /* not JSON */ }
		if (r.status === 401 && path !== "/v1/sandboxes?limit=1") signOut("the key was refused");
		throw new ApiError(r.status, code, msg);
	}
	return r;
}

async function api(method, path, body) {
	const r = await apiRaw(method, path, body);
	if (r.status === 204) return null;
	const ct = r.headers.get("Content-Type") || "";
	return ct.startsWith("application/json") ? r.json() : r.text();
}

// Every page of a list (next_token), up to `max` items.
async function apiList(path, field, max) {
	let out = [], token = null;
	do {
		const sep = path.includes("?") ? "&" : "?";
		const url = path + sep + "limit=1000" + (token ? "&next_token=" + encodeURIComponent(token) : "");
		const j = await api("GET", url);
		out = out.concat(j[field] || []);
		token = j.next_token;
	} while (token && out.length < (max || 10000));
	return out;
}

// Read an NDJSON answer line by line: onLine(object) for each.
async function readNdjson(resp, onLine, signal) {
	const reader = resp.body.getReader();
	const dec = new TextDecoder();
	let buf = "";
	for (;;) {
		if (signal && signal.aborted) { reader.cancel(); return; }
		const { value, done } = await reader.read();
		if (done) break;
		buf += dec.decode(value, { stream: true });
		let i;
		while ((i = buf.indexOf("\n")) >= 0) {
			const line = buf.slice(0, i).trim();
			buf = buf.slice(i + 1);
			if (line) onLine(JSON.parse(line));
		}
	}
	if (buf.trim()) onLine(JSON.parse(buf));
}

// Server-Sent Events over fetch(), so that the key goes in the Authorization
// header (EventSource cannot send headers, and the key must not go into a
// URL). onEvent({id, event, data}) per event; reconnects after `retry` ms
// with Last-Event-ID. Returns a stop function. onState(true|false): whether
// the stream is up (the caller falls back to polling while it is not).
function sseStream(path, onEvent, onState) {
	const ctrl = new AbortController();
	let lastId = null, retry = 2000, stopped = false;
	async function once() {
		const headers = lastId !== null ? { "Last-Event-ID": lastId } : {};
		const r = await fetch(path, { headers: Object.assign({ Authorization: "Bearer " + key(),
			Accept: "text/event-stream" }, headers), cache: "no-store", credentials: "omit",
			signal: ctrl.signal });
		if (!r.ok || !(r.headers.get("Content-Type") || "").startsWith("text/event-stream"))
			throw new Error("HTTP " + r.status);
		onState(true);
		const reader = r.body.getReader();
		const dec = new TextDecoder();
		let buf = "";
		for (;;) {
			const { value, done } = await reader.read();
			if (done) return;
			buf += dec.decode(value, { stream: true }).replace(/\r\n?/g, "\n");
			let i;
			while ((i = buf.indexOf("\n\n")) >= 0) {
				const block = buf.slice(0, i);
				buf = buf.slice(i + 2);
				const ev = { id: null, event: "message", data: [] };
				for (const line of block.split("\n")) {
					if (!line || line.startsWith(":")) continue;
					const c = line.indexOf(":");
					const field = c < 0 ? line : line.slice(0, c);
					const val = c < 0 ? "" : line.slice(c + 1).replace(/^ /, "");
					if (field === "id") ev.id = val;
					else if (field === "event") ev.event = val;
					else if (field === "data") ev.data.push(val);
					else if (field === "retry" && /^\d+$/.test(val)) retry = Number(val);
				}
				if (ev.id !== null) lastId = ev.id;
				if (ev.data.length) onEvent({ id: ev.id, event: ev.event, data: ev.data.join("\n") });
			}
		}
	}
	(async () => {
		while (!stopped) {
			try { await once(); } catch (e) { /* down: retry below */ }
			if (stopped) return;
			onState(false);
			await new Promise((res) => setTimeout(res, retry));
		}
	})();
	return () => { stopped = true; ctrl.abort(); };
}

function sbPath(id) {
	return "/v1/sandboxes/" + encodeURIComponent(id);
}

// Run f and show its error as a toast; true when it worked.
async function attempt(what, f) {
	try {
		await f();
		return true;
	} catch (e) {
		toast(what + ": " + e.message, true);
		return false;
	}
}

// ---------------------------------------------------------------- sign in

const session = { admin: false };
// Work of the current page (timers, streams) to stop when leaving it.
let pageCleanups = [];
function onLeave(f) { pageCleanups.push(f); }
function leavePage() {
	for (const f of pageCleanups) { try { f(); } catch (e) { /* already gone */ } }
	pageCleanups = [];
}

function signOut(why) {
	sessionStorage.removeItem(KEY_ITEM);
	leavePage();
	clear(document.getElementById("view"));
	document.getElementById("top").hidden = true;
	document.getElementById("signin").hidden = false;
	document.getElementById("signin-error").textContent = why || "";
	document.getElementById("key").value = "";
}

async function signIn(k) {
	sessionStorage.setItem(KEY_ITEM, k);
	try {
		await api("GET", "/v1/sandboxes?limit=1");
	} catch (e) {
		sessionStorage.removeItem(KEY_ITEM);
		document.getElementById("signin-error").textContent =
			e.status === 401 ? "This key was refused." : "Cannot sign in: " + e.message;
		return false;
	}
	await startSession();
	return true;
}

async function startSession() {
	// An admin key may list tenants; any other key gets 403.
	try {
		await api("GET", "/v1/tenants");
		session.admin = true;
	} catch (e) {
		session.admin = false;
	}
	document.getElementById("signin").hidden = true;
	document.getElementById("top").hidden = false;
	document.getElementById("nav-admin").hidden = !session.admin;
	document.getElementById("who").textContent = session.admin ? "admin key" : "tenant key";
	if (!location.hash || location.hash === "#") location.hash = "#/sandboxes";
	else route();
}

// ---------------------------------------------------------------- routing

function route() {
	if (!key()) return;
	leavePage();
	const view = clear(document.getElementById("view"));
	const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
	for (const a of document.querySelectorAll("header nav a"))
		a.classList.toggle("active", a.dataset.nav === parts[0] ||
				   (a.dataset.nav === "sandboxes" && parts[0] === "sandbox"));
	switch (parts[0]) {
	case "sandbox":
		// an id is one path segment of the API: a crafted link must not make
		// the page call another path (".../ports/80/x/exec") with the key
		if (!/^[A-Za-z0-9_-]{1,64}$/.test(parts[1] || "")) return sandboxesPage(view);
		return sandboxPage(view, parts[1], TABS.includes(parts[2]) ? parts[2] : "events");
	case "credentials": return credentialsPage(view);
	case "templates": return templatesPage(view);
	case "admin": return session.admin ? adminPage(view) : sandboxesPage(view);
	default: return sandboxesPage(view);
	}
}

// ---------------------------------------------------------------- sandboxes

const STATES = ["creating", "starting", "running", "pausing", "paused", "resuming", "suspending",
		"suspended", "restoring", "rolling_back", "stopping", "deleting", "failed", "lost"];

function confirmAction(text) {
	return window.confirm(text);
}

// The lifecycle actions of one sandbox, as buttons; after(): refresh.
function sandboxActions(sb, after) {
	const p = sbPath(sb.id);
	const act = (label, what, f) => el("button", {
		type: "button", dataset: { action: label },
		onclick: async () => {
			if (!confirmAction(what + " sandbox " + sb.id + "?")) return;
			if (await attempt(label, f)) { toast(label + ": done"); after(); }
		},
	}, label);
	return [
		act("pause", "Pause", () => api("POST", p + "/pause")),
		act("resume", "Resume", () => api("POST", p + "/resume")),
		act("snapshot", "Take a disk snapshot of", () => api("POST", p + "/snapshots", {})),
		act("fork", "Fork", () => api("POST", p + "/fork", { count: 1 })),
		act("delete", "Delete", () => api("DELETE", p)),
	];
}

function sandboxesPage(view) {
	const stateSel = el("select", { id: "filter-state" }, el("option", { value: "" }, "any state"),
			    STATES.map((s) => el("option", { value: s }, s)));
	const tmplIn = el("input", { id: "filter-template", placeholder: "template", size: 12 });
	const newTmpl = el("select", { id: "new-template" });
	const tbody = el("tbody");
	const status = el("span", { class: "muted", id: "sandboxes-status" });
	const live = el("span", { class: "muted", id: "live" }, " (connecting…)");
	let timer = null;

	async function refresh() {
		const q = new URLSearchParams();
		if (stateSel.value) q.set("state", stateSel.value);
		if (tmplIn.value.trim()) q.set("template", tmplIn.value.trim());
		let list;
		try {
			list = await apiList("/v1/sandboxes" + (q.toString() ? "?" + q : ""), "sandboxes");
		} catch (e) {
			status.textContent = "cannot list: " + e.message;
			return;
		}
		clear(tbody);
		for (const sb of list) {
			const lim = sb.limits || {};
			tbody.appendChild(el("tr", { dataset: { id: sb.id } },
				el("td", {}, el("a", { href: "#/sandbox/" + encodeURIComponent(sb.id) }, sb.id)),
				el("td", { class: "state-" + sb.state, dataset: { field: "state" } }, sb.state),
				el("td", {}, sb.template, sb.template_version ? "/" + sb.template_version : ""),
				el("td", {}, sb.backend),
				el("td", {}, sb.node || ""),
				el("td", { title: sb.created_at }, age(sb.created_at)),
				el("td", { class: "num", dataset: { field: "cpu" } },
				   lim.cpus !== undefined ? "– / " + lim.cpus : ""),
				el("td", { class: "num", dataset: { field: "memory" } },
				   lim.memory_mb !== undefined ? "– / " + lim.memory_mb + " MiB" : ""),
				el("td", {}, sandboxActions(sb, refresh))));
		}
		status.textContent = list.length + " sandbox(es), updated " + new Date().toLocaleTimeString();
		usage(list);
	}

	// Use beside the limits: GET .../metrics of each live sandbox shown (the
	// first 50), CPU as the share of one CPU since the last sample.
	const lastCpu = new Map();
	async function usage(list) {
		const live = list.filter((sb) => sb.state === "running" || sb.state === "paused").slice(0, 50);
		await Promise.all(live.map(async (sb) => {
			let m;
			try { m = await api("GET", sbPath(sb.id) + "/metrics"); } catch (e) { return; }
			const row = [...tbody.rows].find((r) => r.dataset.id === sb.id);
			if (!row) return;
			const lim = sb.limits || {};
			const now = Date.now(), prev = lastCpu.get(sb.id);
			lastCpu.set(sb.id, { t: now, cpu: m.cpu_seconds });
			const pct = prev && now > prev.t ? (100 * (m.cpu_seconds - prev.cpu) * 1000 / (now - prev.t)).toFixed(0) + "%"
				: m.cpu_seconds.toFixed(1) + " s";
			row.querySelector('td[data-field="cpu"]').textContent = pct + (lim.cpus !== undefined ? " / " + lim.cpus : "");
			row.querySelector('td[data-field="memory"]').textContent = (m.memory_bytes / 1048576).toFixed(0) + " MiB" +
				(lim.memory_mb !== undefined ? " / " + lim.memory_mb + " MiB" : "");
		}));
	}

	async function loadTemplates() {
		try {
			const ts = await apiList("/v1/templates", "templates");
			const names = [...new Set(ts.filter((t) => t.status === "ready" || !t.status).map((t) => t.name))];
			clear(newTmpl);
			for (const n of names) newTmpl.appendChild(el("option", { value: n }, n));
		} catch (e) { /* the list stays empty */ }
	}

	stateSel.addEventListener("change", refresh);
	tmplIn.addEventListener("change", refresh);
	view.append(
		el("h1", {}, "Sandboxes"),
		el("div", { class: "toolbar" },
			el("label", {}, "State ", stateSel), el("label", {}, "Template ", tmplIn),
			el("span", {}, " | New sandbox from "), newTmpl,
			el("button", { type: "button", id: "create-sandbox", onclick: async () => {
				await attempt("create", async () => {
					const sb = await api("POST", "/v1/sandboxes", { template: newTmpl.value || undefined });
					toast("created " + sb.id);
				});
				refresh();
			} }, "Create")),
		el("table", { id: "sandboxes" },
			el("thead", {}, el("tr", {}, ["id", "state", "template", "backend", "node", "age",
						   "cpu / cpus", "memory / limit", "actions"].map((h) => el("th", {}, h)))),
			tbody),
		el("p", {}, status, live, el("span", { class: "muted" },
			" CPU and memory: use (GET …/metrics, at each refresh) and the sandbox's limit.")));
	// Live: the tenant's state changes over SSE (GET /v1/sandboxes/events);
	// a row's state changes in place at once, and the list is read again
	// (debounced) for new and removed rows. While the stream is down, the
	// list is polled instead.
	let debounce = null;
	const stopSse = sseStream("/v1/sandboxes/events", (ev) => {
		let d;
		try { d = JSON.parse(ev.data); } catch (e) { return; }
		const row = [...tbody.rows].find((r) => r.dataset.id === d.sandbox);
		const cell = row && row.querySelector('td[data-field="state"]');
		if (cell) {
			cell.textContent = d.to;
			cell.className = "state-" + d.to;
		}
		clearTimeout(debounce);
		debounce = setTimeout(refresh, 300);
	}, (up) => {
		live.textContent = up ? " (live: server-sent events)" : " (live updates down: polling every " + POLL_MS / 1000 + " s)";
		live.dataset.live = up ? "sse" : "poll";
		clearInterval(timer);
		timer = up ? null : setInterval(refresh, POLL_MS);
		if (up) refresh();
	});
	loadTemplates();
	refresh();
	onLeave(() => { stopSse(); clearInterval(timer); clearTimeout(debounce); });
}

// ---------------------------------------------------------------- one sandbox

const TABS = ["events", "snapshots", "terminal", "code", "files", "network", "ports"];

async function sandboxPage(view, id, tab) {
	const head = el("div");
	const body = el("div", { id: "tab-body" });
	view.append(el("p", {}, el("a", { href: "#/sandboxes" }, "← Sandboxes")), head,
		el("div", { class: "tabs toolbar" }, TABS.map((t) => el("button", {
			type: "button", class: t === tab ? "active" : "", dataset: { tab: t },
			onclick: () => { location.hash = "#/sandbox/" + encodeURIComponent(id) + "/" + t; },
		}, t))), body);
	let sb;
	async function loadHead() {
		try {
			sb = await api("GET", sbPath(id));
		} catch (e) {
			clear(head).append(el("h1", {}, "Sandbox"), el("p", { class: "error" }, e.message));
			return false;
		}
		clear(head).append(
			el("h1", {}, "Sandbox ", el("span", { id: "sandbox-id" }, sb.id)),
			el("p", {}, "State ", el("strong", { id: "sandbox-state", class: "state-" + sb.state }, sb.state),
			   " · template ", sb.template, " · backend ", sb.backend, " · node ", sb.node || "",
			   " · created ", sb.created_at, sb.parent ? " · parent " + sb.parent : ""),
			el("p", { class: "muted" }, "metadata: ", JSON.stringify(sb.metadata || {})),
			el("div", { class: "toolbar" }, sandboxActions(sb, loadHead)));
		return true;
	}
	if (!(await loadHead())) return;
	// Live like the table: this sandbox's transitions over SSE, polling while
	// the stream is down.
	let headTimer = null;
	const stopSse = sseStream("/v1/sandboxes/events", (ev) => {
		try { if (JSON.parse(ev.data).sandbox === id) loadHead(); } catch (e) { /* not ours */ }
	}, (up) => {
		clearInterval(headTimer);
		headTimer = up ? null : setInterval(loadHead, POLL_MS * 2);
	});
	onLeave(() => { stopSse(); clearInterval(headTimer); });
	const pages = { events: eventsTab, snapshots: snapshotsTab, terminal: terminalTab,
			code: codeTab, files: filesTab, network: networkTab, ports: portsTab };
	(pages[tab] || eventsTab)(body, id, () => sb, loadHead);
}

async function eventsTab(body, id) {
	const tbody = el("tbody");
	body.append(el("h2", {}, "Lifecycle events"),
		el("table", { id: "events" }, el("thead", {}, el("tr", {},
			["at", "from", "to", "reason"].map((h) => el("th", {}, h)))), tbody));
	try {
		const evs = await apiList(sbPath(id) + "/events", "events");
		for (const e of evs)
			tbody.appendChild(el("tr", {}, el("td", {}, e.at), el("td", {}, e.from || ""),
					     el("td", {}, e.to), el("td", {}, e.reason || "")));
	} catch (e) {
		body.append(el("p", { class: "error" }, e.message));
	}
}

// The snapshot timeline: every snapshot on a time axis from the sandbox's
// creation to now; select one to roll back to it or fork from it.
async function snapshotsTab(body, id, getSb, reloadHead) {
	const axis = el("div", { class: "timeline", id: "timeline" });
	const detail = el("div", { id: "snapshot-detail" });
	const tbody = el("tbody");
	const kindSel = el("select", { id: "snapshot-kind" }, el("option", { value: "disk" }, "disk"),
			   el("option", { value: "full" }, "full"));
	const nameIn = el("input", { id: "snapshot-name", placeholder: "name (optional)", size: 16 });
	const sched = getSb().snapshots || {};
	body.append(el("h2", {}, "Snapshots"),
		el("div", { class: "toolbar" }, nameIn, kindSel, el("button", {
			type: "button", id: "take-snapshot", onclick: async () => {
				const req = { kind: kindSel.value };
				if (nameIn.value.trim()) req.name = nameIn.value.trim();
				if (await attempt("snapshot", () => api("POST", sbPath(id) + "/snapshots", req))) {
					nameIn.value = "";
					toast("snapshot taken");
					load();
				}
			} }, "Take snapshot")),
		el("p", { class: "muted" }, "Schedule and retention: ", JSON.stringify(sched),
		   ". Scheduled snapshots (dashed) are pruned by retention; taken ones are kept until deleted. Filled: full snapshot."),
		axis, detail,
		el("table", { id: "snapshots" }, el("thead", {}, el("tr", {},
			["name", "kind", "taken", "size", "scheduled", ""].map((h) => el("th", {}, h)))), tbody));

	function actions(s) {
		const p = sbPath(id);
		return [
			el("button", { type: "button", dataset: { action: "rollback", snapshot: s.name }, onclick: async () => {
				if (!confirmAction("Roll sandbox " + id + " back to snapshot " + s.name +
						   "? Its disk becomes the snapshot's and its processes end.")) return;
				if (await attempt("rollback", () => api("POST", p + "/rollback", { snapshot: s.id }))) {
					toast("rolled back to " + s.name);
					reloadHead();
					load();
				}
			} }, "Roll back"),
			el("button", { type: "button", dataset: { action: "fork", snapshot: s.name }, onclick: async () => {
				if (!confirmAction("Fork a new sandbox from snapshot " + s.name + "?")) return;
				await attempt("fork", async () => {
					const j = await api("POST", p + "/fork", { count: 1, from_snapshot: s.id });
					toast("forked " + j.sandboxes.map((x) => x.id).join(", "));
				});
			} }, "Fork"),
			el("button", { type: "button", dataset: { action: "delete-snapshot", snapshot: s.name }, onclick: async () => {
				if (!confirmAction("Delete snapshot " + s.name + "?")) return;
				if (await attempt("delete", () => api("DELETE", p + "/snapshots/" + encodeURIComponent(s.id))))
					load();
			} }, "Delete"),
		];
	}

	function select(s, mark) {
		for (const m of axis.querySelectorAll(".mark")) m.classList.remove("selected");
		if (mark) mark.classList.add("selected");
		clear(detail).append(el("p", {}, el("strong", {}, s.name), " (", s.kind, s.scheduled ? ", scheduled" : "",
			") taken ", s.created_at, ", ", bytes(s.size_bytes), " "), el("div", { class: "toolbar" }, actions(s)));
	}

	async function load() {
		let snaps;
		try {
			snaps = await apiList(sbPath(id) + "/snapshots", "snapshots");
		} catch (e) {
			clear(detail).append(el("p", { class: "error" }, e.message));
			return;
		}
		clear(axis);
		clear(tbody);
		const t0 = Date.parse(getSb().created_at), t1 = Date.now();
		const span = Math.max(1, t1 - t0);
		const pos = (t) => Math.min(100, Math.max(0, ((t - t0) / span) * 100));
		const tickStart = el("span", { class: "tick" }, "created");
		tickStart.style.left = "0%";
		axis.append(tickStart);
		const tickEnd = el("span", { class: "tick" }, "now");
		tickEnd.style.left = "100%";
		axis.append(tickEnd);
		for (const s of snaps) {
			const mark = el("button", {
				type: "button", class: "mark " + s.kind + (s.scheduled ? " scheduled" : ""),
				title: s.name + " · " + s.kind + " · " + s.created_at + " · " + bytes(s.size_bytes),
				dataset: { snapshot: s.name }, "aria-label": "snapshot " + s.name,
			});
			mark.style.left = pos(Date.parse(s.created_at)) + "%";   // CSSOM, not an inline style attribute
			mark.addEventListener("click", () => select(s, mark));
			axis.append(mark);
			tbody.appendChild(el("tr", { dataset: { snapshot: s.name } }, el("td", {}, s.name), el("td", {}, s.kind),
				el("td", {}, s.created_at), el("td", { class: "num" }, bytes(s.size_bytes)),
				el("td", {}, s.scheduled ? "yes" : "no"), el("td", {}, actions(s))));
		}
		if (!snaps.length) clear(detail).append(el("p", { class: "muted" }, "No snapshots yet."));
	}
	load();
}

// A terminal: exec a shell with a PTY and stdin kept open, output streamed
// (NDJSON) into xterm.js, keys sent to .../stdin, size to .../resize.
async function terminalTab(body, id) {
	const box = el("div", { id: "terminal" });
	const state = el("span", { class: "muted", id: "terminal-state" }, "starting…");
	body.append(el("h2", {}, "Terminal"), el("p", {}, state), box);
	const term = new Terminal({ cursorBlink: true, fontSize: 14, convertEol: false, scrollback: 5000 });
	const fit = new FitAddon();
	term.loadAddon(fit);
	term.open(box);
	try { fit.fit(); } catch (e) { /* not laid out yet */ }
	const ctrl = new AbortController();
	let pid = null, ended = false;
	// Keys in order: one stdin POST at a time, the rest batched behind it.
	let pending = [], sending = false;
	const enc = new TextEncoder();
	async function pump() {
		if (sending || pid === null) return;
		sending = true;
		while (pending.length && !ended) {
			const data = enc.encode(pending.join(""));
			pending = [];
			const send = () => api("POST", sbPath(id) + "/processes/" + pid + "/stdin", { data: b64encode(data) });
			try {
				// A network error (TypeError) is most often a kept-alive
				// connection the api closed as idle just as this request
				// went out, unread: the browser retries that only for
				// idempotent methods, so this one is sent again, once.
				await send().catch((e) => {
					if (!(e instanceof TypeError)) throw e;
					return new Promise((ok) => setTimeout(ok, 100)).then(send);
				});
			} catch (e) {
				term.write("\r\n[stdin: " + e.message + "]\r\n");
			}
		}
		sending = false;
	}
	term.onData((d) => { pending.push(d); pump(); });
	let lastSize = "";
	async function resize() {
		try { fit.fit(); } catch (e) { return; }
		const size = term.rows + "x" + term.cols;
		if (pid === null || ended || size === lastSize) return;
		lastSize = size;
		await attempt("resize", () => api("POST", sbPath(id) + "/processes/" + pid + "/resize",
						 { rows: term.rows, cols: term.cols }));
	}
	const onResize = () => resize();
	window.addEventListener("resize", onResize);
	onLeave(() => {
		window.removeEventListener("resize", onResize);
		ctrl.abort();
		// The shell outlives the connection: end it with the page.
		if (pid !== null && !ended)
			api("POST", sbPath(id) + "/processes/" + pid + "/signal", { signal: "HUP" }).catch(() => {});
		term.dispose();
	});
	let resp;
	try {
		resp = await apiRaw("POST", sbPath(id) + "/exec", {
			cmd: ["/bin/sh", "-c", "if command -v bash >/dev/null; then exec bash -l; else exec sh -l; fi"],
			pty: { rows: term.rows, cols: term.cols }, stdin: true, env: { TERM: "xterm-256color" },
		});
	} catch (e) {
		state.textContent = "cannot start a shell: " + e.message;
		return;
	}
	try {
		await readNdjson(resp, (ev) => {
			if (ev.type === "start") {
				pid = ev.pid;
				lastSize = term.rows + "x" + term.cols;
				state.textContent = "shell pid " + pid;
				box.dataset.pid = String(pid);
				term.focus();
				pump();
			} else if (ev.type === "stdout" || ev.type === "stderr") {
				term.write(b64decode(ev.data));
			} else if (ev.type === "exit") {
				ended = true;
				state.textContent = "the shell ended (" + (ev.signal ? "signal " + ev.signal : "exit " + ev.exit_code) +
					(ev.reason ? ": " + ev.reason : "") + ")";
			} else if (ev.type === "error") {
				state.textContent = "error: " + (ev.error && ev.error.message);
			}
		}, ctrl.signal);
	} catch (e) {
		if (!ctrl.signal.aborted) state.textContent = "stream ended: " + e.message;
	}
}

async function filesTab(body, id) {
	const pathIn = el("input", { id: "files-path", value: "/", size: 40 });
	const tbody = el("tbody");
	const viewer = el("pre", { id: "file-view", hidden: true });
	const upload = el("input", { type: "file", id: "file-upload", multiple: true });
	const base = sbPath(id) + "/files";
	const join = (dir, name) => (dir.endsWith("/") ? dir : dir + "/") + name;

	async function list() {
		const dir = pathIn.value || "/";
		clear(tbody);
		let j;
		try {
			j = await api("GET", base + "/list?path=" + encodeURIComponent(dir));
		} catch (e) {
			tbody.appendChild(el("tr", {}, el("td", { class: "error", colspan: 5 }, e.message)));
			return;
		}
		if (dir !== "/")
			tbody.appendChild(el("tr", {}, el("td", {}, el("button", { type: "button", onclick: () => {
				pathIn.value = dir.replace(/\/+$/, "").replace(/\/[^/]*$/, "") || "/";
				list();
			} }, "..")), el("td"), el("td"), el("td"), el("td")));
		const entries = (j.entries || []).slice().sort((a, b) => a.name < b.name ? -1 : a.name > b.name ? 1 : 0);
		for (const e of entries) {
			const full = join(dir, e.name);
			const nameCell = e.type === "dir"
				? el("button", { type: "button", class: "dir", onclick: () => { pathIn.value = full; list(); } }, e.name + "/")
				: el("span", { class: "name" }, e.name);
			const acts = e.type === "file" ? [
				el("button", { type: "button", dataset: { action: "view" }, onclick: () => view(full) }, "view"),
				el("button", { type: "button", dataset: { action: "download" }, onclick: () => download(full, e.name) }, "download"),
			] : [];
			acts.push(el("button", { type: "button", dataset: { action: "delete" }, onclick: async () => {
				if (!confirmAction("Delete " + full + "?")) return;
				if (await attempt("delete", () => api("DELETE", base + "?path=" + encodeURIComponent(full) +
								       (e.type === "dir" ? "&recursive=1" : ""))))
					list();
			} }, "delete"));
			tbody.appendChild(el("tr", { dataset: { name: e.name } }, el("td", {}, nameCell), el("td", {}, e.type),
				el("td", { class: "num" }, bytes(e.size)), el("td", {}, e.mode), el("td", {}, acts)));
		}
	}

	async function view(full) {
		await attempt("view", async () => {
			const r = await apiRaw("GET", base + "?path=" + encodeURIComponent(full));
			const buf = new Uint8Array(await r.arrayBuffer());
			const shown = buf.subarray(0, 256 * 1024);
			viewer.hidden = false;
			viewer.textContent = new TextDecoder().decode(shown) +
				(buf.length > shown.length ? "\n[… " + bytes(buf.length) + " in all]" : "");
			viewer.dataset.path = full;
		});
	}

	async function download(full, name) {
		await attempt("download", async () => {
			const r = await apiRaw("GET", base + "?path=" + encodeURIComponent(full));
			const blob = new Blob([await r.arrayBuffer()], { type: "application/octet-stream" });
			const url = URL.createObjectURL(blob);
			const a = el("a", { href: url, download: name });
			document.body.appendChild(a);
			a.click();
			a.remove();
			setTimeout(() => URL.revokeObjectURL(url), 10000);
		});
	}

	upload.addEventListener("change", async () => {
		const dir = pathIn.value || "/";
		for (const f of upload.files) {
			if (f.name.includes("/") || f.name === "." || f.name === "..") continue;
			const ok = await attempt("upload", async () => apiRaw("PUT",
				base + "?path=" + encodeURIComponent(join(dir, f.name)),
				new Uint8Array(await f.arrayBuffer()), { "Content-Type": "application/octet-stream" }));
			if (ok) toast("uploaded " + f.name);
		}
		upload.value = "";
		list();
	});
	pathIn.addEventListener("change", list);
	body.append(el("h2", {}, "Files"),
		el("div", { class: "toolbar" }, el("label", {}, "Path ", pathIn),
		   el("button", { type: "button", id: "files-go", onclick: list }, "List"),
		   el("label", {}, "Upload here: ", upload)),
		el("table", { id: "files" }, el("thead", {}, el("tr", {},
			["name", "type", "size", "mode", ""].map((h) => el("th", {}, h)))), tbody),
		viewer);
	list();
}

// A cell runner for a code-interpreter sandbox: POST .../code and its NDJSON
// lines (E2B's code-interpreter shape) shown as they come. Everything in
// them comes from the sandbox: text stays text; HTML is shown as its source
// (the CSP allows no frame to render it in, and it must not run here);
// images go in <img> as data: URLs (img-src allows data:; an SVG in an img
// runs no script), and only when the base64 is plain base64.
const B64_RE = /^[A-Za-z0-9+/]*={0,2}$/;
const ANSI_RE = /\x1b\[[0-9;?]*[ -\/]*[@-~]/g;   // IPython colours its tracebacks

function codeResult(r) {
	const box = el("div", { class: "code-result" + (r.is_main_result ? " main" : "") });
	let shown = false;
	for (const [fmt, mime] of [["png", "image/png"], ["jpeg", "image/jpeg"]]) {
		const v = typeof r[fmt] === "string" ? r[fmt].replace(/\s+/g, "") : null;
		if (v && B64_RE.test(v)) {
			box.append(el("img", { class: "code-" + fmt, alt: fmt + " result", src: "data:" + mime + ";base64," + v }));
			shown = true;
		}
	}
	if (typeof r.svg === "string") {
		box.append(el("img", { class: "code-svg", alt: "svg result",
			src: "data:image/svg+xml;base64," + b64encode(new TextEncoder().encode(r.svg)) }));
		shown = true;
	}
	if (typeof r.html === "string") {
		box.append(el("div", { class: "muted" }, "HTML (its source):"), el("pre", { class: "code-html" }, r.html));
		shown = true;
	}
	for (const fmt of ["markdown", "latex"])
		if (typeof r[fmt] === "string") { box.append(el("pre", { class: "code-" + fmt }, r[fmt])); shown = true; }
	if (r.json !== undefined) { box.append(el("pre", { class: "code-json" }, JSON.stringify(r.json, null, 2))); shown = true; }
	if (typeof r.text === "string" && (!shown || r.is_main_result))
		box.append(el("pre", { class: "code-text" }, r.text));
	return box;
}

async function codeTab(body, id) {
	const cell = el("textarea", { id: "code-cell", spellcheck: "false" }, "");
	const lang = el("select", { id: "code-language" }, ["python", "javascript", "bash"].map((l) => el("option", { value: l }, l)));
	const out = el("div", { id: "code-output" });
	const count = el("span", { id: "code-count", class: "muted" });
	const run = el("button", { type: "button", id: "code-run" }, "Run");
	const ctrl = new AbortController();
	onLeave(() => ctrl.abort());
	run.addEventListener("click", async () => {
		run.disabled = true;
		clear(out);
		count.textContent = "running…";
		let stream = null;   // the <pre> the last stdout/stderr text went to
		const text = (cls, t) => {
			if (!stream || stream.className !== cls) { stream = el("pre", { class: cls }); out.append(stream); }
			stream.append(document.createTextNode(t));
		};
		try {
			const r = await apiRaw("POST", sbPath(id) + "/code", { code: cell.value, language: lang.value });
			await readNdjson(r, (m) => {
				if (m.type === "stdout" || m.type === "stderr") {
					text("code-" + m.type + (m.type === "stderr" ? " error" : ""), String(m.text || ""));
				} else if (m.type === "result") {
					stream = null;
					out.append(codeResult(m));
				} else if (m.type === "error" && m.error && typeof m.error === "object") {
					stream = null;
					out.append(el("p", { class: "error" }, (m.error.code || "error") + ": " + (m.error.message || "")));
				} else if (m.type === "error") {
					stream = null;
					const tb = Array.isArray(m.traceback) ? m.traceback.join("\n") : String(m.traceback || "");
					out.append(el("pre", { class: "code-error error" },
						(tb ? tb.replace(ANSI_RE, "") : String(m.name || "Error") + ": " + String(m.value || ""))));
				} else if (m.type === "number_of_executions") {
					count.textContent = "[" + m.execution_count + "]";
				} else if (m.type === "unexpected_end_of_execution") {
					out.append(el("p", { class: "error" }, "the code service ended the cell unexpectedly"));
				}
			}, ctrl.signal);
			if (count.textContent === "running…") count.textContent = "";
		} catch (e) {
			count.textContent = "";
			out.append(el("p", { class: "error" }, e.status === 404 || e.status === 501
				? "no code interpreter here (" + e.message + "): make the sandbox from the code-interpreter template"
				: e.message));
		} finally {
			run.disabled = false;
		}
	});
	cell.addEventListener("keydown", (e) => {
		if (e.key === "Enter" && (e.shiftKey || e.ctrlKey)) { e.preventDefault(); run.click(); }
	});
	body.append(el("h2", {}, "Code"),
		el("p", { class: "muted" }, "A cell runs in the sandbox's kernel, which keeps its state between cells " +
		   "(a sandbox of the code-interpreter template). Shift+Enter runs it."),
		cell, el("div", { class: "toolbar" }, el("label", {}, "Language ", lang), run, count), out);
}

async function networkTab(body, id) {
	const policy = el("textarea", { id: "network-policy", spellcheck: "false" });
	const addr = el("span", { id: "network-addr" });
	const tbody = el("tbody");
	const p = sbPath(id) + "/network";
	body.append(el("h2", {}, "Egress policy"), el("p", {}, "Address: ", addr), policy,
		el("div", { class: "toolbar" }, el("button", { type: "button", id: "network-save", onclick: async () => {
			let val;
			try {
				val = JSON.parse(policy.value);
			} catch (e) {
				toast("the policy is not JSON: " + e.message, true);
				return;
			}
			if (await attempt("policy", () => api("PATCH", p, { network: val }))) { toast("policy saved"); load(); }
		} }, "Save policy")),
		el("h2", {}, "Egress decisions (newest last)"),
		el("table", { id: "network-log" }, el("thead", {}, el("tr", {},
			["time", "proto", "host", "ip", "port", "decision", "rule"].map((h) => el("th", {}, h)))), tbody));
	async function load() {
		try {
			const j = await api("GET", p);
			policy.value = JSON.stringify(j.network, null, 2);
			addr.textContent = j.addr || "";
			const log = await api("GET", p + "/log");
			clear(tbody);
			for (const e of log.entries || [])
				tbody.appendChild(el("tr", {}, el("td", {}, new Date(e.time_ms).toISOString()), el("td", {}, e.proto),
					el("td", {}, e.host || ""), el("td", {}, e.ip || ""), el("td", { class: "num" }, e.port),
					el("td", {}, e.decision), el("td", {}, e.rule || "")));
		} catch (e) {
			policy.value = "";
			addr.textContent = e.status === 501 ? "this node runs without a network" : e.message;
		}
	}
	load();
}

// Ports: no list of listening ports exists in the API, so the user names one.
// With ports_domain set, a port token gives a host-routed URL a browser can
// open; otherwise the proxy path needs the key and works with curl only.
async function portsTab(body, id) {
	const portIn = el("input", { id: "port", type: "number", min: 1, max: 65535, value: 8080 });
	const out = el("ul", { id: "port-links" });
	body.append(el("h2", {}, "Forwarded ports"),
		el("p", { class: "muted" }, "A service listening on a port in the sandbox is reachable at the API path below (with the key), ",
		   "or, when the server has a ports domain, at a host-routed URL opened with a port token (valid 1 hour)."),
		el("div", { class: "toolbar" }, el("label", {}, "Port ", portIn), el("button", {
			type: "button", id: "port-open", onclick: async () => {
				const port = Number(portIn.value);
				await attempt("port token", async () => {
					const t = await api("POST", sbPath(id) + "/port-tokens", { port, ttl_s: 3600 });
					const proxy = sbPath(id) + "/ports/" + port + "/";
					const li = el("li", {}, "port " + port + ": ", el("code", {}, proxy));
					const url = t.host ? safeHttpUrl(location.protocol + "//" + t.host + "/?airlock_token=" +
									encodeURIComponent(t.token)) : null;
					if (url) li.append(" · ", el("a", { href: url, target: "_blank", rel: "noopener noreferrer" },
								     "open " + t.host), " (until " + t.expires_at + ")");
					else li.append(" · no ports domain configured: open it with curl -H 'Authorization: Bearer …'");
					out.append(li);
				});
			} }, "Get link")),
		out);
}

// ---------------------------------------------------------------- credentials

async function credentialsPage(view) {
	const tbody = el("tbody"), abody = el("tbody");
	view.append(el("h1", {}, "Credentials"),
		el("p", { class: "muted" }, "Names, hosts and bindings of this tenant's credentials. Values are never shown: the API does not return them."),
		el("table", { id: "credentials" }, el("thead", {}, el("tr", {},
			["name", "env", "hosts", "schemes", "ports", "bindings", "status", "version", "created"].map((h) => el("th", {}, h)))), tbody),
		el("h2", {}, "Audit (newest first)"),
		el("table", { id: "audit" }, el("thead", {}, el("tr", {},
			["at", "sandbox", "credential", "host", "method", "path", "decision", "detail"].map((h) => el("th", {}, h)))), abody));
	try {
		for (const c of await apiList("/v1/credentials", "credentials"))
			tbody.appendChild(el("tr", {}, el("td", {}, c.name), el("td", {}, c.env || ""),
				el("td", {}, (c.hosts || []).join(", ")),
				// plain HTTP (readable on the wire) stands out here: only when asked for
				el("td", {}, (c.schemes || []).join(", ")), el("td", {}, (c.ports || []).join(", ")),
				el("td", {}, JSON.stringify(c.bindings || [])),
				el("td", {}, c.status), el("td", { class: "num" }, c.version), el("td", {}, c.created_at)));
		const a = await api("GET", "/v1/credentials/audit?limit=200");
		for (const r of a.records || [])
			abody.appendChild(el("tr", {}, [r.at, r.sandbox, r.credential, r.host, r.method, r.path,
							r.decision, r.detail].map((v) => el("td", {}, v === null || v === undefined ? "" : String(v)))));
	} catch (e) {
		view.append(el("p", { class: "error" }, e.message));
	}
}

// ---------------------------------------------------------------- templates

async function templatesPage(view) {
	const tbody = el("tbody");
	const log = el("pre", { id: "build-log", hidden: true });
	view.append(el("h1", {}, "Templates"),
		el("table", { id: "templates" }, el("thead", {}, el("tr", {},
			["name", "version", "status", "source", "created"].map((h) => el("th", {}, h)))), tbody));
	async function load() {
		try {
			clear(tbody);
			for (const t of await apiList("/v1/templates", "templates"))
				tbody.appendChild(el("tr", {}, el("td", {}, t.name), el("td", { class: "num" }, t.version),
					el("td", {}, t.status), el("td", {}, typeof t.source === "string" ? t.source : JSON.stringify(t.source)),
					el("td", {}, t.created_at)));
		} catch (e) {
			view.append(el("p", { class: "error" }, e.message));
		}
	}
	if (session.admin) {
		const name = el("input", { id: "build-name", placeholder: "name", size: 12 });
		// the source: an image (from, with packages) or, on the server's host, a
		// directory or a tar (from_dir, from_tar)
		const kind = el("select", { id: "build-kind" }, el("option", { value: "from" }, "image"),
				el("option", { value: "from_dir" }, "host directory"), el("option", { value: "from_tar" }, "host tar"));
		const from = el("input", { id: "build-from", value: "debian:bookworm", size: 24 });
		const pkgs = el("input", { id: "build-packages", placeholder: "packages (space separated)", size: 30 });
		view.append(el("h2", {}, "Build a template"), el("div", { class: "toolbar" }, name, kind, from, pkgs,
			el("button", { type: "button", id: "build-go", onclick: async () => {
				const req = { name: name.value.trim() };
				req[kind.value] = from.value.trim();
				const p = pkgs.value.trim().split(/\s+/).filter(Boolean);
				if (p.length && kind.value === "from") req.packages = p;
				log.hidden = false;
				log.textContent = "";
				const ctrl = new AbortController();
				onLeave(() => ctrl.abort());
				await attempt("build", async () => {
					const r = await apiRaw("POST", "/v1/templates", req);
					await readNdjson(r, (ev) => {
						if (ev.event === "progress") {
							log.textContent += ev.line + "\n";
							log.dataset.progress = String(Number(log.dataset.progress || 0) + 1);
						}
						else if (ev.event === "done") log.textContent += "done: " + ev.template.name + " v" + ev.template.version + "\n";
						else if (ev.event === "error") log.textContent += "error: " + (ev.error && ev.error.message) + "\n";
						log.scrollTop = log.scrollHeight;
					}, ctrl.signal);
				});
				load();
			} }, "Build")), log);
	}
	load();
}

// ---------------------------------------------------------------- admin

async function adminPage(view) {
	const tbody = el("tbody"), nbody = el("tbody"), kbody = el("tbody");
	const tname = el("input", { id: "tenant-name", placeholder: "tenant name", size: 16 });
	const ktenant = el("input", { id: "key-tenant", placeholder: "tenant (id or name)", size: 16 });
	const kadmin = el("input", { type: "checkbox", id: "key-admin" });
	const newKey = el("p", { id: "new-key" });
	view.append(el("h1", {}, "Admin"),
		el("h2", {}, "Tenants"),
		el("div", { class: "toolbar" }, tname, el("button", { type: "button", id: "tenant-create", onclick: async () => {
			if (await attempt("tenant", () => api("POST", "/v1/tenants", { name: tname.value.trim() }))) load();
		} }, "Create tenant")),
		el("table", { id: "tenants" }, el("thead", {}, el("tr", {},
			["id", "name", "created"].map((h) => el("th", {}, h)))), tbody),
		el("h2", {}, "API keys"),
		el("p", { class: "muted" }, "A new key is shown once, here; the list never shows a key."),
		el("table", { id: "keys" }, el("thead", {}, el("tr", {},
			["id", "name", "tenant", "admin", "created", ""].map((h) => el("th", {}, h)))), kbody),
		el("div", { class: "toolbar" }, ktenant, el("label", {}, kadmin, " admin"),
		   el("button", { type: "button", id: "key-create", onclick: async () => {
			await attempt("key", async () => {
				const k = await api("POST", "/v1/keys", { tenant: ktenant.value.trim(), admin: kadmin.checked });
				clear(newKey).append("New key ", el("code", {}, k.id), " for ", k.tenant, ": ", el("code", { class: "secret" }, k.key));
			});
			load();
		} }, "Create key")), newKey,
		el("h2", {}, "Nodes"),
		el("table", { id: "nodes" }, el("thead", {}, el("tr", {},
			["name", "state", "url", "last heartbeat", "cpus", "memory", "sandboxes", "backends"].map((h) => el("th", {}, h)))), nbody));
	async function load() {
		try {
			const t = await api("GET", "/v1/tenants");
			clear(tbody);
			for (const x of t.tenants || [])
				tbody.appendChild(el("tr", {}, el("td", {}, x.id), el("td", {}, x.name), el("td", {}, x.created_at)));
			const ks = await apiList("/v1/keys", "keys");
			clear(kbody);
			for (const x of ks)
				kbody.appendChild(el("tr", { dataset: { id: x.id } }, el("td", {}, x.id), el("td", {}, x.name || ""),
					el("td", {}, x.tenant), el("td", {}, x.admin ? "yes" : ""), el("td", {}, x.created_at),
					el("td", {}, el("button", { type: "button", dataset: { action: "revoke" }, onclick: async () => {
						if (!confirmAction("Revoke key " + x.id + "? Requests with it fail from now on.")) return;
						if (await attempt("revoke", () => api("DELETE", "/v1/keys/" + encodeURIComponent(x.id)))) load();
					} }, "revoke"))));
			const n = await api("GET", "/v1/nodes");
			clear(nbody);
			for (const x of n.nodes || []) {
				const c = x.capacity || {};
				nbody.appendChild(el("tr", {}, el("td", {}, x.name, x.self ? " (this)" : ""), el("td", {}, x.state),
					el("td", {}, x.url || ""), el("td", {}, x.last_heartbeat || ""), el("td", { class: "num" }, c.cpus),
					el("td", { class: "num" }, c.memory_mb !== undefined ? c.memory_mb + " MiB" : ""),
					el("td", { class: "num" }, c.sandboxes), el("td", {}, (c.backends || []).join(", "))));
			}
		} catch (e) {
			view.append(el("p", { class: "error" }, e.message));
		}
	}
	load();
}

// ---------------------------------------------------------------- start

document.getElementById("signin-go").addEventListener("click", () =>
	signIn(document.getElementById("key").value.trim()));
document.getElementById("key").addEventListener("keydown", (e) => {
	if (e.key === "Enter") signIn(document.getElementById("key").value.trim());
});
document.getElementById("signout").addEventListener("click", () => signOut(""));
window.addEventListener("hashchange", route);
if (key()) startSession();
else signOut("");
