// Check Kubernetes objects against the API's OpenAPI schemas, offline:
// each JSON document of the files (separated by lines "---", as esd-k8s
// writes them) is validated by the kubernetes-models class of its
// apiVersion and kind. Exit 0 when every object is valid, 1 otherwise,
// 2 on bad usage or when the models are missing.
//
//   node tools/k8s/validate.mjs MODELS_DIR FILE...
//
// MODELS_DIR: an npm prefix holding kubernetes-models (scripts/setup-deps.sh
// installs it under /var/lib/esd-deps/k8s).
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [models, ...files] = process.argv.slice(2);
const root = models && join(models, "node_modules", "kubernetes-models");
if (!root || !files.length || !existsSync(root)) {
  console.error(`usage: validate.mjs MODELS_DIR FILE... (no kubernetes-models under ${models})`);
  process.exit(2);
}
// the apiVersions esd-k8s writes
const groups = { "v1": "v1", "apps/v1": join("apps", "v1") };
let bad = 0;
for (const file of files) {
  const docs = readFileSync(file, "utf8").split(/^---$/m).filter((d) => d.trim());
  for (const [i, text] of docs.entries()) {
    let d;
    try {
      d = JSON.parse(text);
    } catch (e) {
      console.log(`FAIL ${file}: document ${i + 1} is not JSON: ${e.message}`);
      bad++;
      continue;
    }
    const where = `${file}: document ${i + 1}, ${d.kind} ${d.metadata && d.metadata.name}`;
    const g = groups[d.apiVersion];
    const lib = g && (await import(pathToFileURL(join(root, g, "index.js")).href));
    const Kind = lib && lib[d.kind];
    if (!Kind) {
      console.log(`FAIL ${where}: no schema for ${d.apiVersion} ${d.kind} here`);
      bad++;
      continue;
    }
    try {
      new Kind(d).validate();
      console.log(`ok   ${where}: a valid ${d.apiVersion} ${d.kind}`);
    } catch (e) {
      console.log(`FAIL ${where}: ${e.message}`);
      bad++;
    }
  }
}
process.exit(bad ? 1 : 0);
