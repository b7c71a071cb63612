// The official Node SDKs inside "sluice exec --profile", for
// tests/integration/test_exec.py: configured by nothing but the variables
// sluice gives the command (ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY, or
// OPENAI_BASE_URL and OPENAI_API_KEY), as a user's agent would be. SLT_CFG
// (JSON) says which SDK (sdk: "anthropic" | "openai"), whether to stream,
// and extra query parameters (query). Prints one JSON line per result or
// stream event, each with "t" (seconds since start), then {"done": true};
// on failure {"error": ...} and exit status 1.
'use strict';

const cfg = JSON.parse(process.env.SLT_CFG);
const t0 = process.hrtime.bigint();

function out(o) {
	const t = Number(process.hrtime.bigint() - t0) / 1e9;
	process.stdout.write(JSON.stringify(Object.assign({ t }, o)) + '\n');
}

function client() {
	const opts = {
		defaultQuery: cfg.query || undefined,
		maxRetries: 0,
		timeout: 20000,
	};
	if (cfg.sdk === 'anthropic') {
		const m = require('@anthropic-ai/sdk');
		const Anthropic = m.Anthropic || m.default || m;
		return new Anthropic(opts);
	}
	const m = require('openai');
	const OpenAI = m.OpenAI || m.default || m;
	return new OpenAI(opts);
}

async function main() {
	const c = client();
	const messages = [{ role: 'user', content: 'hi' }];
	let r;
	if (cfg.sdk === 'anthropic')
		r = await c.messages.create({ model: 'm', max_tokens: 8,
		    messages, stream: !!cfg.stream });
	else
		r = await c.chat.completions.create({ model: 'm', messages,
		    stream: !!cfg.stream });
	if (cfg.stream) {
		for await (const ev of r)
			out({ event: ev });
	} else
		out({ result: { path: r.path, method: r.method } });
}

main().then(() => out({ done: true }), (e) => {
	out({ error: String(e && e.stack || e), status: e && e.status });
	process.exitCode = 1;
});
