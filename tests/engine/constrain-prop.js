// SPDX-License-Identifier: MIT
/*
 * constrain-prop.js - the constrained-decoding property test's two ends,
 * independent of the C compiler under test:
 *   node constrain-prop.js gen SEED N > specs.jsonl
 *     N random specs from the supported subset: schemas (nested objects,
 *     optional properties, enums whose values share prefixes or hold
 *     escapes and non-ASCII text, strings with length bounds, integers and
 *     numbers with and without bounds, arrays with item bounds, anyOf,
 *     $defs/$ref, maps, free-form objects), json_object, and tool sets
 *     with tool_choice required / auto / named, parallel or not.
 *   node constrain-prop.js check specs.jsonl out.jsonl...
 *     validates kvc-gen's outputs with ajv (Debian's node-ajv): every
 *     constrained output must be valid UTF-8, complete, parse as JSON (or
 *     as tool calls) and validate; unconstrained outputs of the same
 *     models must mostly fail, which shows the check can fail. Prints
 *     "ok"/"FAIL" lines.
 */
'use strict';
const fs = require('fs');
const Ajv = require('ajv');

function rng(seed) {
	let s = BigInt(seed) & 0xffffffffffffffffn;
	return function () {
		s = (s + 0x9e3779b97f4a7c15n) & 0xffffffffffffffffn;
		let z = s;
		z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & 0xffffffffffffffffn;
		z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & 0xffffffffffffffffn;
		z ^= z >> 31n;
		return Number(z >> 11n) / 2 ** 53;
	};
}

const WORDS = ['c', 'cel', 'celsius', 'kelvin', 'ls', 'ls -l', 'make', 'make check',
	'a"b', 'back\\slash', 'tab\there', 'caf\u00e9', '\u4e2d\u6587', 'emoji \u{1f600}', 'x/y', 'line\nbreak', ''];
const KEYS = ['name', 'id', 'city', 'unit', 'days', 'opts', 'tags', 'n', 'value', 'v', 'values',
	'na\u00efve', 'q"uote', 'meta'];

function generator(seed) {
	const r = rng(seed);
	const int = (a, b) => a + Math.floor(r() * (b - a + 1));
	const pick = (a) => a[int(0, a.length - 1)];
	let defs = null;

	function scalar(depth) {
		switch (int(0, 9)) {
		case 0: {	/* enum of strings sharing prefixes */
			const n = int(1, 4), vals = new Set();
			while (vals.size < n) vals.add(pick(WORDS));
			return { enum: [...vals] };
		}
		case 1: return { type: 'string', minLength: int(0, 2), maxLength: int(2, 10) };
		case 2: return { type: 'string', maxLength: int(0, 6) };
		case 3: {
			const lo = int(-50, 50);
			return { type: 'integer', minimum: lo, maximum: lo + int(0, 300) };
		}
		case 4: return { type: 'integer' };
		case 5: return { type: 'number' };
		case 6: {
			const lo = int(-1000, 1000) / 100;
			const s = { type: 'number', minimum: lo, maximum: lo + int(1, 5000) / 100 };
			if (r() < 0.3) { s.exclusiveMaximum = s.maximum; delete s.maximum; }
			return s;
		}
		case 7: return { type: 'boolean' };
		case 8: return r() < 0.5 ? { type: 'null' } : { const: pick([1.5e-3, -2, true, 'x\u00e9"', null]) };
		default: return { enum: [int(-5, 5), 2.5, 'v', false, null].slice(0, int(1, 5)) };
		}
	}

	function schema(depth) {
		const k = depth > 2 ? 0 : int(0, 11);
		if (k <= 4) return scalar(depth);
		if (k <= 6) return object(depth);
		if (k === 7) {
			const s = { type: 'array', items: schema(depth + 1) };
			if (r() < 0.7) s.maxItems = int(0, 3);
			if (r() < 0.3) s.minItems = Math.min(s.maxItems ?? 2, int(0, 2));
			return s;
		}
		if (k === 8) return { anyOf: [scalar(depth), r() < 0.5 ? object(depth + 1) : scalar(depth)] };
		if (k === 9) {
			const name = 'd' + Object.keys(defs).length;
			defs[name] = scalar(depth);
			return { $ref: '#/$defs/' + name };
		}
		if (k === 10) return r() < 0.5 ? { type: 'object' } : {
			type: 'object', additionalProperties: scalar(depth + 1), maxProperties: undefined };
		return { type: ['string', 'null'], maxLength: int(0, 5) };
	}

	function object(depth) {
		const n = int(0, 4), props = {}, req = [];
		for (let i = 0; i < n; i++) {
			const key = pick(KEYS) + (i ? String(i) : '');
			props[key] = schema(depth + 1);
			if (r() < 0.6) req.push(key);
		}
		const s = { type: 'object', properties: props, required: req };
		if (r() < 0.7) s.additionalProperties = false;
		return s;
	}

	function clean(s) {	/* drop undefined fields */
		return JSON.parse(JSON.stringify(s));
	}

	return function spec(id) {
		defs = {};
		const u = r();
		if (u < 0.1) return { id, kind: 'object' };
		if (u < 0.35) {
			const n = int(1, 3), tools = [];
			for (let i = 0; i < n; i++) {
				defs = {};
				const p = object(1);
				if (Object.keys(defs).length) p.$defs = defs;
				const fn = { name: 'tool_' + i + (i === 1 ? '_x' : '') };
				if (r() < 0.85) fn.parameters = clean(p);
				tools.push({ type: 'function', function: fn });
			}
			const c = r(), choice = c < 0.4 ? 'required' : c < 0.7 ? 'auto' : tools[int(0, n - 1)].function.name;
			return { id, kind: 'tools', tools, choice, parallel: r() < 0.5 };
		}
		const s = r() < 0.7 ? object(0) : schema(0);
		if (Object.keys(defs).length) s.$defs = defs;
		return { id, kind: 'schema', schema: clean(s) };
	};
}

/* auto (lazy): the free text before the start tag is the model's own and
 * may be any bytes; only the part from the tag on is checked */
function decode(hex, lazy) {
	let buf = Buffer.from(hex, 'hex');
	if (lazy) {
		const at = buf.indexOf('<tool_call>');
		buf = at < 0 ? Buffer.alloc(0) : buf.subarray(at);
	}
	try {
		return { text: new TextDecoder('utf-8', { fatal: true }).decode(buf) };
	} catch (e) {
		return { error: 'not valid UTF-8' };
	}
}

const ajv = new Ajv({ allErrors: false });
const cache = new Map();
function validator(schema) {
	const key = JSON.stringify(schema);
	if (!cache.has(key)) cache.set(key, ajv.compile(schema));
	return cache.get(key);
}

const EMPTY_ARGS = { type: 'object', additionalProperties: false, properties: {} };

/* Tool calls: <tool_call>JSON</tool_call> separated by whitespace. */
function checkCalls(spec, text) {
	const max = spec.parallel ? 3 : 1;
	const re = /^\s*<tool_call>([\s\S]*?)<\/tool_call>/;
	let rest = text, n = 0;
	while (rest.trim().length) {
		const m = re.exec(rest);
		if (!m) return 'not a sequence of <tool_call>...</tool_call>';
		let call;
		try { call = JSON.parse(m[1]); } catch (e) { return 'call ' + n + ' is not JSON: ' + e.message; }
		const keys = call && typeof call === 'object' ? Object.keys(call) : [];
		if (keys.length !== 2 || !('name' in call) || !('arguments' in call))
			return 'call ' + n + ' has keys ' + keys.join(',');
		const tool = spec.tools.find((t) => t.function.name === call.name);
		if (!tool) return 'unknown tool ' + call.name;
		if (spec.choice !== 'required' && spec.choice !== 'auto' && call.name !== spec.choice)
			return 'tool ' + call.name + ' instead of ' + spec.choice;
		const params = tool.function.parameters || EMPTY_ARGS;
		const v = validator(params);
		if (!v(call.arguments)) return 'arguments: ' + ajv.errorsText(v.errors);
		n++;
		rest = rest.slice(m[0].length);
	}
	if (n < 1) return 'no call';
	if (n > max) return n + ' calls, at most ' + max;
	return null;
}

function verdict(spec, text) {
	if (spec.kind === 'tools') {
		if (spec.choice === 'auto' && !text.length)
			return null;	/* no call: free text */
		return checkCalls(spec, text);
	}
	let v;
	try { v = JSON.parse(text); } catch (e) { return 'not JSON: ' + e.message; }
	if (spec.kind === 'object')
		return v && typeof v === 'object' && !Array.isArray(v) ? null : 'not an object';
	const f = validator(spec.schema);
	return f(v) ? null : ajv.errorsText(f.errors);
}

function check(specFile, outFiles) {
	const specs = new Map();
	for (const l of fs.readFileSync(specFile, 'utf8').split('\n'))
		if (l.trim()) { const s = JSON.parse(l); specs.set(s.id, s); }
	let nC = 0, badC = 0, nU = 0, rejU = 0, shown = 0;
	const perModel = {};
	for (const f of outFiles) {
		for (const l of fs.readFileSync(f, 'utf8').split('\n')) {
			if (!l.trim()) continue;
			const o = JSON.parse(l), spec = specs.get(o.id);
			const pm = perModel[o.model] || (perModel[o.model] = { c: 0, bad: 0, tok: 0 });
			if (o.error) {
				console.log(`FAIL ${o.model} spec ${o.id}: compile refused a supported schema: ${o.error}`);
				badC++;
				continue;
			}
			const lazy = spec.kind === 'tools' && spec.choice === 'auto';
			const d = decode(o.hex, lazy);
			let why = d.error || verdict(spec, d.text);
			if (o.mode === 'c') {
				nC++;
				pm.c++;
				pm.tok += o.tokens;
				if (!why && !o.complete) why = 'incomplete after ' + o.tokens + ' tokens';
				if (!why && o.errors) why = 'sampling/advance errors';
				if (why) {
					badC++;
					pm.bad++;
					if (shown++ < 20)
						console.log(`FAIL ${o.model} spec ${o.id} seed ${o.seed}: ${why}\n#   spec ${JSON.stringify(spec)}\n#   out  ${JSON.stringify(d.text)}`);
				}
			} else if (!(spec.kind === 'tools' && spec.choice === 'auto')) {
				nU++;
				if (why) rejU++;
			}
		}
	}
	for (const [m, p] of Object.entries(perModel))
		console.log(`${p.bad ? 'FAIL' : 'ok  '} ${m}: ${p.c - p.bad}/${p.c} constrained outputs valid (ajv), ${p.tok} tokens`);
	console.log(`${badC === 0 && nC > 0 ? 'ok  ' : 'FAIL'} constrained: ${nC - badC}/${nC} parse and validate`);
	/* the validator must reject what the same models write unconstrained */
	console.log(`${nU > 0 && rejU >= 0.95 * nU ? 'ok  ' : 'FAIL'} unconstrained: ${rejU}/${nU} rejected by the same validator`);
}

const [cmd, ...args] = process.argv.slice(2);
if (cmd === 'gen') {
	const spec = generator(Number(args[0] || 1));
	for (let i = 0; i < Number(args[1] || 50); i++) console.log(JSON.stringify(spec(i)));
} else if (cmd === 'check') {
	check(args[0], args.slice(1));
} else {
	console.error('usage: constrain-prop.js gen SEED N | check SPECS OUT...');
	process.exit(2);
}
