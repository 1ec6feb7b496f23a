// runner.js - the JavaScript context of airlock-code (airlock-code.py): one
// persistent vm context, cells as JSON lines on stdin ({code, env}). What a
// cell prints goes to our stdout/stderr (pipes, synchronous on Linux, so it
// is in them before the cell's end line); results, errors and the end line
// go as JSON lines to the control fd (AIRLOCK_CTL_FD). SIGINT interrupts a
// running cell (breakOnSigint) and leaves the context as it was.
'use strict';
const fs = require('fs');
const vm = require('vm');
const util = require('util');
const readline = require('readline');

const ctl = Number(process.env.AIRLOCK_CTL_FD || 3);
delete process.env.AIRLOCK_CTL_FD;
const send = (o) => fs.writeSync(ctl, JSON.stringify(o) + '\n');

const sandbox = { require, console, process, Buffer, setTimeout, clearTimeout, setInterval,
		  clearInterval, setImmediate, URL, TextEncoder, TextDecoder, fetch: globalThis.fetch };
sandbox.globalThis = sandbox;
const ctx = vm.createContext(sandbox);
process.on('SIGINT', () => {});   // only a running cell is interrupted

function errorOf(e) {
	if (e && typeof e === 'object')
		return { type: 'error', name: String(e.name || 'Error'), value: String(e.message || ''),
			 traceback: String(e.stack || '') };
	return { type: 'error', name: 'Error', value: String(e), traceback: '' };
}

async function run(cell) {
	const env = cell.env || {};
	const saved = {};
	for (const k of Object.keys(env)) {
		saved[k] = process.env[k];
		process.env[k] = String(env[k]);
	}
	try {
		let v = vm.runInContext(cell.code, ctx, { breakOnSigint: true, filename: 'cell.js' });
		if (v && typeof v.then === 'function')
			v = await v;
		if (v !== undefined)
			send({ type: 'result', text: util.inspect(v), is_main_result: true });
	} catch (e) {
		send(errorOf(e));
	} finally {
		for (const k of Object.keys(saved)) {
			if (saved[k] === undefined)
				delete process.env[k];
			else
				process.env[k] = saved[k];
		}
	}
	send({ done: true });
}

const rl = readline.createInterface({ input: process.stdin });
let chain = Promise.resolve();
rl.on('line', (line) => {
	let cell;
	try {
		cell = JSON.parse(line);
	} catch (e) {
		return;
	}
	chain = chain.then(() => run(cell));
});
rl.on('close', () => process.exit(0));
