// Runs one job of a workflow here, as a Gitea/act runner would run its steps:
//
//   node runner.mjs WORKFLOW JOB WORKDIR CONTEXT_JSON
//
// CONTEXT_JSON: {"vars": {...}, "secrets": {...}, "env": {...}, "matrix":
// {...}, "skip": [...]} (env: the runner's own variables, GITHUB_REF and the
// like; matrix: one combination of the job's matrix; skip: names of steps the
// caller has done itself, e.g. a build whose output it already has). Each `run:` step runs with
// the workflow's, the job's and the step's env (expressions substituted from
// the context) under the step's shell (bash: --noprofile --norc -eo pipefail,
// as the runner does), in WORKDIR; $GITHUB_ENV and $GITHUB_PATH carry over
// between steps. `uses: actions/checkout` is taken as done (the caller put the
// tree in WORKDIR); any other action, or an expression this runner does not
// evaluate, is an error naming the step. The job's container is not started:
// the steps run on this machine.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { spawnSync } from "node:child_process";
import { createRequire } from "node:module";

const [workflow, jobName, workdir, contextFile] = process.argv.slice(2);
if (!contextFile) {
  console.error("usage: node runner.mjs WORKFLOW JOB WORKDIR CONTEXT_JSON");
  process.exit(64);
}
const tools = process.env.DEPLOY_TOOLS;
const require = createRequire(path.resolve(tools, "node_modules", "noop.js"));
const yaml = require("js-yaml");
const wf = yaml.load(fs.readFileSync(workflow, "utf8"));
const job = wf.jobs?.[jobName];
const die = (msg) => {
  console.error(`runner: ${workflow}: job ${jobName}: ${msg}`);
  process.exit(1);
};
if (!job) die("no such job");
const ctx = JSON.parse(fs.readFileSync(contextFile, "utf8"));

// ${{ vars.X }}, ${{ secrets.X }}, ${{ env.X }}, ${{ secrets.X != '' }}: all these workflows use.
function evaluate(text, where) {
  return String(text).replace(/\$\{\{\s*(.*?)\s*\}\}/g, (_, expr) => {
    let m = expr.match(/^(vars|secrets|env|matrix)\.([A-Za-z_][A-Za-z0-9_-]*)$/);
    if (m) return ctx[m[1]]?.[m[2]] ?? "";
    m = expr.match(/^(vars|secrets)\.([A-Za-z_][A-Za-z0-9_]*) != ''$/);
    if (m) return String((ctx[m[1]]?.[m[2]] ?? "") !== "");
    die(`${where}: expression '${expr}' is not one this runner evaluates`);
  });
}
const evalEnv = (env, where) =>
  Object.fromEntries(Object.entries(env ?? {}).map(([k, v]) => [k, evaluate(v, `${where} env ${k}`)]));

const files = fs.mkdtempSync(path.join(os.tmpdir(), "gpureap-runner-"));
const githubEnv = path.join(files, "env");
const githubPath = path.join(files, "path");
fs.writeFileSync(githubEnv, "");
fs.writeFileSync(githubPath, "");
const base = { ...process.env, ...ctx.env, GITHUB_ENV: githubEnv, GITHUB_PATH: githubPath,
               GITHUB_WORKSPACE: workdir, CI: "true" };
const wfEnv = evalEnv(wf.env, "workflow");
const jobEnv = evalEnv(job.env, "job");
const shell = job.defaults?.run?.shell ?? wf.defaults?.run?.shell ?? "bash";
if (shell !== "bash") die(`shell '${shell}': this runner runs bash steps only`);

// KEY=VALUE lines and KEY<<DELIM heredocs.
function readEnvFile() {
  const out = {};
  const lines = fs.readFileSync(githubEnv, "utf8").split("\n");
  for (let i = 0; i < lines.length; i++) {
    const heredoc = lines[i].match(/^([^=<]+)<<(.+)$/);
    if (heredoc) {
      const value = [];
      for (i++; i < lines.length && lines[i] !== heredoc[2]; i++) value.push(lines[i]);
      out[heredoc[1]] = value.join("\n");
    } else if (lines[i].includes("=")) {
      out[lines[i].slice(0, lines[i].indexOf("="))] = lines[i].slice(lines[i].indexOf("=") + 1);
    }
  }
  return out;
}

let n = 0;
for (const [i, step] of (job.steps ?? []).entries()) {
  const where = `step ${i + 1} (${step.name ?? step.uses ?? "run"})`;
  if ((ctx.skip ?? []).includes(step.name)) {
    console.log(`runner: ${where}: done by the caller`);
    continue;
  }
  if (step.uses) {
    if (/^actions\/checkout@/.test(step.uses)) {
      console.log(`runner: ${where}: the tree is in ${workdir}`);
      continue;
    }
    die(`${where}: action '${step.uses}' is not one this runner runs`);
  }
  if (typeof step.run !== "string") die(`${where}: neither run nor uses`);
  if (step.shell && step.shell !== "bash") die(`${where}: shell '${step.shell}'`);
  const script = path.join(files, `step${i + 1}.sh`);
  fs.writeFileSync(script, evaluate(step.run, where));
  const extraPath = fs.readFileSync(githubPath, "utf8").split("\n").filter(Boolean).reverse();
  const env = { ...base, ...wfEnv, ...jobEnv, ...readEnvFile(), ...evalEnv(step.env, where) };
  env.PATH = [...extraPath, env.PATH].join(":");
  console.log(`runner: ${where}`);
  const r = spawnSync("bash", ["--noprofile", "--norc", "-eo", "pipefail", script],
                      { cwd: workdir, env, stdio: "inherit" });
  if (r.status !== 0) die(`${where} failed (exit ${r.status ?? r.signal})`);
  n++;
}
fs.rmSync(files, { recursive: true, force: true });
console.log(`runner: ${workflow}: job ${jobName}: ${n} run step(s) passed`);
