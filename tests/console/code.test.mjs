// code.test.mjs - the console's code tab (a cell runner) in Debian's headless
// chromium driven by playwright-core, against a real code-interpreter
// sandbox. Run by tests/e2e/test_code_clients.py, which passes:
//   AIRLOCK_URL   http://127.0.0.1:PORT
//   TENANT_KEY    a key of the sandbox's tenant
//   SANDBOX       the id of a running code-interpreter sandbox
//   SHOT_DIR      where to write screenshots
// Exits non-zero on the first failed check, printing it.
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, "../../console/package.json"));
const { chromium } = require("playwright-core");

const URL0 = process.env.AIRLOCK_URL, KEY = process.env.TENANT_KEY, SBX = process.env.SANDBOX;
const SHOTS = process.env.SHOT_DIR;
const T = 120000;   // a first cell imports matplotlib on a loaded machine

function check(cond, what) {
	if (!cond) throw new Error("FAILED: " + what);
	console.log("ok: " + what);
}

// Run a cell from the page and wait until the run button is back.
async function cell(page, code) {
	await page.fill("#code-cell", code);
	await page.click("#code-run");
	await page.waitForSelector("#code-run:not([disabled])", { timeout: T });
}

async function main() {
	const browser = await chromium.launch({ executablePath: "/usr/bin/chromium", args: ["--no-sandbox"] });
	const problems = [];   // CSP violations, page errors, dialogs: none allowed
	try {
		const page = await (await browser.newContext({ viewport: { width: 1280, height: 900 } })).newPage();
		page.on("pageerror", (e) => problems.push("page error: " + e.message));
		page.on("console", (m) => {
			if (m.type() === "error" && /Content Security Policy|Refused/.test(m.text()))
				problems.push("console: " + m.text());
		});
		page.on("dialog", async (d) => { problems.push("unexpected " + d.type() + ": " + d.message()); await d.dismiss(); });

		await page.goto(URL0 + "/console/");
		await page.waitForSelector("#signin:not([hidden])");
		await page.fill("#key", KEY);
		await page.click("#signin-go");
		await page.waitForSelector("#top:not([hidden])");
		await page.goto(URL0 + "/console/#/sandbox/" + encodeURIComponent(SBX) + "/code");
		await page.waitForSelector("#code-cell");

		// state kept between cells; stdout as text
		await cell(page, "x = 41");
		await cell(page, 'print("out", x + 1)\nx + 1');
		const stdout = await page.locator("#code-output pre.code-stdout").innerText();
		check(stdout.includes("out 42"), "a cell's stdout shows, with the state of the cell before");
		check((await page.locator("#code-output .code-result.main pre.code-text").innerText()).trim() === "42",
		      "the cell's value shows as its text result");
		check(/^\[\d+\]$/.test(await page.locator("#code-count").innerText()), "the execution count shows");

		// a matplotlib figure: a PNG the browser decodes
		await cell(page, "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()");
		await page.waitForFunction(() => { const i = document.querySelector("#code-output img.code-png"); return i && i.complete; }, null, { timeout: T });
		const png = await page.$eval("#code-output img.code-png", (i) => [i.naturalWidth, i.naturalHeight, i.src.slice(0, 22)]);
		check(png[0] > 100 && png[1] > 100 && png[2] === "data:image/png;base64,", `the chart shows as a PNG image (${png[0]}x${png[1]})`);
		await page.screenshot({ path: path.join(SHOTS, "code-chart.png"), fullPage: true });

		// HTML from the sandbox is shown as its source, never run; SVG as an image
		await cell(page, [
			"import pandas as pd",
			"from IPython.display import HTML, SVG, display",
			"display(HTML('<img src=x onerror=\"alert(1)\"><script>alert(2)</script><b id=bold>b</b>'))",
			"display(SVG('<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"30\" height=\"20\"><script>alert(3)</script><rect width=\"30\" height=\"20\"/></svg>'))",
			"pd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})",
		].join("\n"));
		const html = await page.locator("#code-output pre.code-html").allInnerTexts();
		check(html.some((t) => t.includes("<script>alert(2)</script>")), "HTML shows as text (its source)");
		check(html.some((t) => t.includes("<table")), "a DataFrame's HTML shows (as its source)");
		check(await page.locator("#code-output #bold").count() === 0 && await page.locator("#code-output script").count() === 0,
		      "no element of the sandbox's HTML is in the page");
		await page.waitForFunction(() => { const i = document.querySelector("#code-output img.code-svg"); return i && i.complete; }, null, { timeout: T });
		const svg = await page.$eval("#code-output img.code-svg", (i) => [i.naturalWidth, i.naturalHeight]);
		check(svg[0] === 30 && svg[1] === 20, "an SVG result shows as an image (30x20)");

		// an error: its traceback, without ANSI colours
		await cell(page, "1 / 0");
		const err = await page.locator("#code-output pre.code-error").innerText();
		check(err.includes("ZeroDivisionError") && !err.includes("\x1b"), "an error shows its traceback (no escape codes)");
		await page.screenshot({ path: path.join(SHOTS, "code-error.png"), fullPage: true });

		// the kernel survived the error
		await cell(page, "x");
		check((await page.locator("#code-output .code-result.main pre.code-text").innerText()).trim() === "41",
		      "the kernel keeps its state after an error");

		check(problems.length === 0, "no CSP violation, page error or dialog: " + problems.join("; "));
		console.log("code console test: all passed");
	} finally {
		await browser.close();
	}
}

main().catch((e) => {
	console.error(e.stack || String(e));
	process.exit(1);
});
