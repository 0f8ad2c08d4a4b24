// The same calls through an official Node.js client, once against the engine directly and once
// through the neardup proxy; prints what came back as JSON (read by tests/test_clients.py).
//
//   node clients.mjs PREFIX PACKAGE DIRECT_URL PROXY_URL INDEX SPEC_JSON
//
// PREFIX is the folder the client was installed into (npm install --prefix PREFIX PACKAGE@V);
// SPEC_JSON holds the search body, the document to index and its id for each side.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';

const [prefix, pkg, directUrl, proxyUrl, index, specJson] = process.argv.slice(2);
const spec = JSON.parse(specJson);
const require = createRequire(path.join(path.resolve(prefix), 'index.js'));
const { Client } = require(pkg);
const opensearch = pkg.startsWith('@opensearch-project/');
const manifest = path.join(path.resolve(prefix), 'node_modules', pkg, 'package.json');
const version = JSON.parse(readFileSync(manifest, 'utf8')).version;

// @elastic/elasticsearch takes body fields as parameters and returns the body;
// @opensearch-project/opensearch takes `body` and returns {body, statusCode, headers, ...}.
function connect(node) {
  const client = new Client({ node });
  const unwrap = (response) => (opensearch ? response.body : response);
  const withBody = (params, body) => (opensearch ? { ...params, body } : { ...params, ...body });
  return {
    search: async () => unwrap(await client.search(withBody({ index }, spec.search))),
    index: async (id) => unwrap(await client.index(
      opensearch ? { index, id, body: spec.doc, refresh: true } : { index, id, document: spec.doc, refresh: true })),
    get: async (id) => unwrap(await client.get({ index, id })),
    close: () => client.close(),
  };
}

const sides = { direct: connect(directUrl), proxy: connect(proxyUrl) };
const out = { client: `${pkg} ${version}` };
try {
  for (const [name, client] of Object.entries(sides)) {
    out[name] = { search: await client.search(), get: {} };
  }
  for (const [name, client] of Object.entries(sides)) {
    out[name].index = await client.index(spec.ids[name]);
  }
  for (const id of Object.values(spec.ids)) {
    for (const [name, client] of Object.entries(sides)) {
      out[name].get[id] = await client.get(id);
    }
  }
} finally {
  await Promise.all(Object.values(sides).map((client) => client.close()));
}
process.stdout.write(JSON.stringify(out));
