// desktop.mjs - the unmodified @e2b/desktop 2.4.0 (package-lock.json)
// against Airlock's E2B layer and its `desktop` template: create (the SDK's
// default template name), screenshot, the mouse and keyboard calls,
// launch('xterm'), and the stream: stream.start(), stream.getUrl(), that
// URL loaded in Debian's headless chromium (playwright-core from
// console/node_modules), which must show the desktop through noVNC.
// Run by tests/e2e/test_desktop.py, which sets:
//   E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY, E2B_DOMAIN   the SDK's settings
//   AIRLOCK_TEST_API_ADDR     the api (for a port token of Airlock's own API)
//   AIRLOCK_TEST_TLS_PORT     a TLS relay to the api on loopback (https://)
//   AIRLOCK_TEST_ARTIFACTS    where the page's screenshot goes
//   AIRLOCK_TEST_PLAYWRIGHT   console/package.json (playwright-core's home)
import { Sandbox } from "@e2b/desktop";
import { createRequire } from "module";
import fs from "fs";
import os from "os";
import path from "path";

const env = process.env;
const { chromium } = createRequire(env.AIRLOCK_TEST_PLAYWRIGHT)("playwright-core");

let failed = 0;
function check(ok, what) {
	console.log(`${ok ? "ok" : "FAIL"} - ${what}`);
	if (!ok) failed++;
}

function pngSize(buf) {
	const sig = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
	if (buf.length < 24 || !buf.subarray(0, 8).equals(sig)) return null;
	return [buf.readUInt32BE(16), buf.readUInt32BE(20)];
}

async function waitFor(fn, ms, what) {
	const end = Date.now() + ms;
	for (;;) {
		try {
			const v = await fn();
			if (v) return v;
		} catch (e) {
			if (Date.now() > end) throw e;
		}
		if (Date.now() > end) throw new Error("timed out: " + what);
		await new Promise((r) => setTimeout(r, 300));
	}
}

async function main() {
	const t0 = Date.now();
	const sbx = await Sandbox.create({ timeoutMs: 600_000 });
	console.log(`# Sandbox.create() (template desktop, Xvfb + xfce4 up) in ${Date.now() - t0} ms: ${sbx.sandboxId}`);
	try {
		const info = await sbx.getInfo();
		check(info.templateId === "desktop", `the default template is desktop (${info.templateId})`);
		const size = await sbx.getScreenSize();
		check(size.width === 1024 && size.height === 768, `getScreenSize() ${JSON.stringify(size)}`);
		const shot = Buffer.from(await sbx.screenshot());
		const dims = pngSize(shot);
		check(dims && dims[0] === 1024 && dims[1] === 768, `screenshot() is a 1024x768 PNG (${dims})`);

		await sbx.moveMouse(321, 234);
		const pos = await sbx.getCursorPosition();
		check(pos.x === 321 && pos.y === 234, `moveMouse + getCursorPosition ${JSON.stringify(pos)}`);

		// launch('xterm') is gtk-launch xterm (xterm.desktop in the template)
		await sbx.launch("xterm");
		const wins = await waitFor(async () => {
			const w = (await sbx.getApplicationWindows("xterm")).filter((x) => x.trim());
			return w.length ? w : null;
		}, 60_000, "an xterm window");
		check(wins.length >= 1, `launch('xterm') opened a window (${wins})`);
		const title = await sbx.getWindowTitle(wins[0]);
		check(typeof title === "string" && title.length > 0, `getWindowTitle: ${title}`);
		const geo = (await sbx.commands.run(`xdotool getwindowgeometry ${wins[0]}`)).stdout;
		const m = geo.match(/Position: (\d+),(\d+)/), g = geo.match(/Geometry: (\d+)x(\d+)/);
		check(m && g, `xterm geometry: ${geo.replace(/\n/g, " ")}`);
		const cx = +m[1] + Math.floor(+g[1] / 2), cy = +m[2] + Math.floor(+g[2] / 2);
		await new Promise((r) => setTimeout(r, 1000));
		await sbx.leftClick(cx, cy);
		await sbx.write("echo typed-through-e2b > /tmp/e2b-typed.txt");
		await sbx.press("enter");
		const typed = await waitFor(async () => sbx.files.read("/tmp/e2b-typed.txt"), 30_000,
			"the file the xterm wrote");
		check(typed === "typed-through-e2b\n", `leftClick + write + press('enter') ran in the xterm (${JSON.stringify(typed)})`);
		await sbx.press(["ctrl", "l"]);

		await sbx.doubleClick(cx, cy);
		await sbx.rightClick(700, 500);
		await sbx.press("esc");
		// over the xterm (its scrollback): on the bare desktop the wheel
		// switches xfwm4's workspace, and the xterm would leave the screen
		await sbx.moveMouse(cx, cy);
		await sbx.scroll("down", 2);
		await sbx.scroll("up");
		await sbx.drag([600, 600], [650, 640]);
		const pos2 = await sbx.getCursorPosition();
		check(pos2.x === 650 && pos2.y === 640, `doubleClick, rightClick, scroll, drag ran; pointer at ${JSON.stringify(pos2)}`);
		await sbx.leftClick(cx, cy);   // the xterm in front again for the stream
		const visible = (await sbx.commands.run("xdotool search --onlyvisible --class xterm")).stdout.trim();
		check(visible.split("\n").includes(wins[0]), `the xterm is on the screen (${visible})`);
		const shot2 = Buffer.from(await sbx.screenshot());
		check(!shot2.equals(shot), "the screen changed");

		// the stream
		await sbx.stream.start();
		const url = sbx.stream.getUrl();
		const host = `6080-${sbx.sandboxId}.${env.E2B_DOMAIN}`;
		check(url.startsWith(`https://${host}/vnc.html?`), `stream.getUrl(): ${url}`);
		check(url.includes("autoconnect=true"), "the URL connects by itself");

		// The port needs a token (Airlock's port forwarding): one from
		// Airlock's own API for port 6080, in the URL's query.
		const tr = await fetch(`http://${env.AIRLOCK_TEST_API_ADDR}/v1/sandboxes/${sbx.sandboxId}/port-tokens`, {
			method: "POST", headers: { Authorization: `Bearer ${env.E2B_API_KEY}`, "Content-Type": "application/json" },
			body: JSON.stringify({ port: 6080, ttl_s: 600 }),
		});
		check(tr.status === 201, `POST port-tokens {port: 6080}: ${tr.status}`);
		const token = (await tr.json()).token;

		const udd = fs.mkdtempSync(path.join(os.tmpdir(), "airlock-desktop-chromium-"));
		const ctx = await chromium.launchPersistentContext(udd, {
			executablePath: "/usr/bin/chromium",
			args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
				"--disable-component-update", "--no-first-run", "--disable-sync",
				`--host-resolver-rules=MAP ${host} 127.0.0.1:${env.AIRLOCK_TEST_TLS_PORT}, EXCLUDE localhost`],
			ignoreHTTPSErrors: true, viewport: { width: 1100, height: 850 },
		}).catch((e) => {
			fs.rmSync(udd, { recursive: true, force: true });
			throw e;
		});
		try {
			const page = await ctx.newPage();
			const log = [];   // printed when noVNC does not connect
			page.on("console", (m) => log.push(`console ${m.type()}: ${m.text()}`));
			page.on("pageerror", (e) => log.push("page error: " + e.message));
			page.on("requestfailed", (r) => log.push(`request failed: ${r.url()} ${r.failure() && r.failure().errorText}`));
			page.on("websocket", (ws) => {
				let n = 0;
				log.push("websocket " + ws.url());
				ws.on("framereceived", () => { n++; });
				ws.on("socketerror", (e) => log.push("websocket error: " + e));
				ws.on("close", () => log.push(`websocket closed after ${n} frames`));
			});
			// without the token: refused
			const bare = await page.goto(url);
			check(bare.status() === 401, `the stream URL without a token: ${bare.status()}`);
			const resp = await page.goto(url + "&airlock_token=" + token);
			check(resp.status() === 200, `the stream URL with its token: ${resp.status()} ${page.url()}`);
			check(!page.url().includes("airlock_token"), "the token left the address bar (a cookie now)");
			try {
				await page.waitForFunction(() => {
					const s = document.getElementById("noVNC_status");
					return document.documentElement.classList.contains("noVNC_connected") ||
						(s && /Connected/.test(s.textContent));
				}, null, { timeout: 60_000 });
			} catch (e) {
				const st = await page.evaluate(() => [document.documentElement.className,
					(document.getElementById("noVNC_status") || {}).textContent]);
				console.log("# noVNC did not connect: " + JSON.stringify(st) + "\n# " + log.join("\n# "));
				const diag = await sbx.commands.run("cat /etc/hosts; pgrep -a x11vnc; pgrep -af websockify;" +
					" netstat -tln; tail -n 30 /tmp/novnc.log /tmp/x11vnc_stderr.log; true");
				console.log("# in the sandbox:\n# " + diag.stdout.split("\n").join("\n# "));
				await page.screenshot({ path: path.join(env.AIRLOCK_TEST_ARTIFACTS, "e2b-stream-failed.png") });
				throw e;
			}
			check(true, "noVNC connected");
			await new Promise((r) => setTimeout(r, 3000));   // frames arrive
			const xr = { x: +m[1], y: +m[2], w: +g[1], h: +g[2] };
			const stats = await page.evaluate((xr) => {
				const c = document.querySelector("#noVNC_container canvas") || document.querySelector("canvas");
				if (!c) return null;
				const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
				let n = 0, sum = 0, sq = 0;
				for (let i = 0; i < d.length; i += 4 * 7) {
					const v = (d[i] + d[i + 1] + d[i + 2]) / 3;
					n++; sum += v; sq += v * v;
				}
				const mean = sum / n;
				// the xterm's area (white background) in the streamed picture
				const r = c.getContext("2d").getImageData(xr.x + 20, xr.y + 60, xr.w - 40, xr.h - 80).data;
				let rs = 0;
				for (let i = 0; i < r.length; i += 4) rs += (r[i] + r[i + 1] + r[i + 2]) / 3;
				return { w: c.width, h: c.height, mean, variance: sq / n - mean * mean,
					xterm_mean: rs / (r.length / 4) };
			}, xr);
			check(stats && stats.w === 1024 && stats.h === 768, `the noVNC canvas is the desktop's size (${JSON.stringify(stats)})`);
			check(stats && stats.variance > 100, `the canvas is not blank (pixel variance ${stats && stats.variance.toFixed(1)})`);
			check(stats && stats.xterm_mean > 200, `the stream shows the xterm where it is (mean ${stats && stats.xterm_mean.toFixed(1)} in its area)`);
			const file = path.join(env.AIRLOCK_TEST_ARTIFACTS, "e2b-stream.png");
			await page.screenshot({ path: file });
			fs.writeFileSync(path.join(env.AIRLOCK_TEST_ARTIFACTS, "e2b-screenshot.png"), shot2);
			console.log(`# the stream page: ${file}`);
		} finally {
			await ctx.close();
			fs.rmSync(udd, { recursive: true, force: true });
		}
		await sbx.stream.stop();
		const still = (await sbx.commands.run("pgrep -x x11vnc || true")).stdout.trim();
		check(still === "", "stream.stop() ended x11vnc");
	} finally {
		const killed = await sbx.kill();
		check(killed === true, "kill()");
	}
}

main().then(() => {
	console.log(failed ? `# ${failed} failed` : "# all passed");
	process.exit(failed ? 1 : 0);
}, (e) => {
	console.log("FAIL - " + (e && e.stack || e));
	process.exit(1);
});
