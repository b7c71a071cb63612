// The official Node SDKs through sluice's intercepted CONNECT tunnel, for
// tests/integration/test_intercept.py: undici's ProxyAgent as the
// dispatcher, the CA from NODE_EXTRA_CA_CERTS. Configured by the JSON in
// SLT_CFG: sdk ("anthropic" | "openai"), proxy (URL), proxy_token (sent as
// Proxy-Authorization: Bearer on the CONNECT, or none), api_key, base_url,
// stream (bool), query (extra query parameters). Prints one JSON line per
// result or stream event, each with "t" (seconds since start), and exits 1
// with {"error": ...} on failure.
'use strict';

const undici = require('undici');

const cfg = JSON.parse(process.env.SLT_CFG);
const t0 = process.hrtime.bigint();

function out(o) {
	const t = Number(process.hrtime.bigint() - t0) / 1e9;
	process.stdout.write(JSON.stringify(Object.assign({ t }, o)) + '\n');
}

function client() {
	const opts = { uri: cfg.proxy };
	if (cfg.proxy_token)
		opts.token = 'Bearer ' + cfg.proxy_token;
	const common = {
		apiKey: cfg.api_key,
		baseURL: cfg.base_url,
		fetch: undici.fetch,
		fetchOptions: { dispatcher: new undici.ProxyAgent(opts) },
		defaultQuery: cfg.query || undefined,
		maxRetries: 0,
		timeout: 20000,
	};
	if (cfg.sdk === 'anthropic') {
		const m = require('@anthropic-ai/sdk');
		const Anthropic = m.Anthropic || m.default || m;
		return new Anthropic(common);
	}
	const m = require('openai');
	const OpenAI = m.OpenAI || m.default || m;
	return new OpenAI(common);
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
		out({ result: r });
}

main().then(() => out({ done: true }), (e) => {
	out({ error: String(e && e.stack || e), status: e && e.status });
	process.exitCode = 1;
});
