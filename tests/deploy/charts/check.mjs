// The deploy tests' checks of Kubernetes objects, run by run.sh with the tools
// scripts/install-deploy-tools.sh put in TOOLS (build/tools):
//
//   node check.mjs TOOLS validate FILE...
//       every object of every YAML file against its schema: kubernetes-models
//       for the built-in kinds, @kubernetes-models/argo-cd (Application) and
//       @kubernetes-models/prometheus-operator (ServiceMonitor, PrometheusRule)
//       for the CRDs; a kind with no schema here is an error.
//   node check.mjs TOOLS scenarios SCENARIOS_JSON RENDERED_YAML
//       each scenario pod against the lab's scenario (gpureap lab --print-scenarios).
//   node check.mjs TOOLS exporter REPO RENDERED_YAML
//       the exporter DaemonSet's privileges (docs/exporter.md), and the rules,
//       dashboard and NPD config against their sources in deploy/.
//   node check.mjs TOOLS count RENDERED_YAML KIND=N...
//       how many objects of each kind were rendered.
//   node check.mjs TOOLS workflow-scripts OUT_DIR WORKFLOW...
//       each workflow's `run:` blocks as bash files in OUT_DIR, `${{ … }}`
//       replaced by a variable, for shellcheck.
//
// Errors name the file, the object (kind/name) and the field; exit 1 on any.
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";

const [tools, mode, ...args] = process.argv.slice(2);
if (!tools || !mode) {
  console.error("usage: node check.mjs TOOLS validate|scenarios|exporter|count|workflow-scripts ...");
  process.exit(64);
}
const modules = path.resolve(tools, "node_modules");
const require = createRequire(path.join(modules, "noop.js"));
const yaml = require("js-yaml");
const load = (spec) => import(pathToFileURL(path.join(modules, spec)).href);

const errors = [];
const fail = (where, what) => errors.push(`${where}: ${what}`);
const finish = (okLine) => {
  if (errors.length) {
    for (const e of errors) console.error(`FAIL ${e}`);
    console.error(`${errors.length} problem(s)`);
    process.exit(1);
  }
  console.log(okLine);
};

function documents(file) {
  const text = fs.readFileSync(file, "utf8");
  try {
    return yaml.loadAll(text).filter((d) => d !== null && d !== undefined);
  } catch (e) {
    fail(file, `not YAML: ${e.message}`);
    return [];
  }
}
const objName = (o) => `${o?.kind ?? "?"}/${o?.metadata?.name ?? "?"}`;
// Equality of parsed YAML/JSON, mappings compared whatever their key order.
const canon = (v) => Array.isArray(v) ? v.map(canon)
  : v && typeof v === "object" ? Object.fromEntries(Object.keys(v).sort().map((k) => [k, canon(v[k])])) : v;
const eq = (a, b) => JSON.stringify(canon(a)) === JSON.stringify(canon(b));
// The first path at which two values differ, with both sides (short).
function firstDiff(a, b, at = "") {
  if (eq(a, b)) return null;
  if (a && b && typeof a === "object" && typeof b === "object" && Array.isArray(a) === Array.isArray(b)) {
    for (const k of new Set([...Object.keys(a), ...Object.keys(b)])) {
      const d = firstDiff(a[k], b[k], `${at}/${k}`);
      if (d) return d;
    }
  }
  const short = (v) => { const t = JSON.stringify(v) ?? "absent"; return t.length > 120 ? t.slice(0, 117) + "..." : t; };
  return `at ${at || "/"}: ${short(a)} vs ${short(b)}`;
}

// apiVersion -> the module holding its models.
function modelModule(apiVersion) {
  const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : ["", apiVersion];
  if (group === "argoproj.io") return `@kubernetes-models/argo-cd/argoproj.io/${version}/index.js`;
  if (group === "monitoring.coreos.com")
    return `@kubernetes-models/prometheus-operator/monitoring.coreos.com/${version}/index.js`;
  return group ? `kubernetes-models/${group}/${version}/index.js` : `kubernetes-models/${version}/index.js`;
}

async function validate(files) {
  let count = 0;
  for (const file of files) {
    for (const o of documents(file)) {
      const where = `${file}: ${objName(o)}`;
      if (typeof o !== "object" || !o.apiVersion || !o.kind) {
        fail(where, "not a Kubernetes object (no apiVersion/kind)");
        continue;
      }
      let mod;
      try {
        mod = await load(modelModule(o.apiVersion));
      } catch {
        fail(where, `no schema for apiVersion ${o.apiVersion} in the installed models`);
        continue;
      }
      const Model = mod[o.kind];
      if (!Model) {
        fail(where, `no schema for kind ${o.kind} in ${o.apiVersion}`);
        continue;
      }
      try {
        new Model(o).validate();
        count++;
      } catch (e) {
        fail(where, `invalid: ${e.message}`);
      }
    }
  }
  finish(`validated ${count} object(s) in ${files.length} file(s)`);
}

function scenarios(scenariosFile, rendered) {
  const doc = JSON.parse(fs.readFileSync(scenariosFile, "utf8"));
  const pods = new Map(documents(rendered).filter((o) => o.kind === "Pod").map((o) => [o.metadata.name, o]));
  const wanted = doc.scenarios.filter((s) => s.min_gpus === 1);  // S7 needs two GPUs: not in the chart
  for (const s of wanted) {
    const where = `${rendered}: Pod/${s.pod} (scenario ${s.id})`;
    const p = pods.get(s.pod);
    if (!p) {
      fail(where, "not rendered");
      continue;
    }
    const check = (field, got, want) => {
      if (!eq(got, want)) fail(where, `${field} is ${JSON.stringify(got)}, the lab's is ${JSON.stringify(want)}`);
    };
    const spec = p.spec ?? {};
    const c = (spec.containers ?? [])[0] ?? {};
    check("metadata.namespace", p.metadata.namespace, s.namespace);
    check("containers", (spec.containers ?? []).length, 1);
    check("container name", c.name, s.container);
    check("image tag", String(c.image).split(":").pop(), s.image_tag);
    check("command (PID 1)", c.command, s.pid1_argv);
    check("args", c.args, undefined);
    check("terminationGracePeriodSeconds", spec.terminationGracePeriodSeconds, s.termination_grace_period_seconds);
    check("restartPolicy", spec.restartPolicy, "Never");
    check("preStop", c.lifecycle?.preStop?.exec?.command, s.prestop ? s.prestop.argv : undefined);
    check("annotation gpureap.io/worker", p.metadata.annotations?.["gpureap.io/worker"], s.worker);
    let workerArgv;
    try {
      workerArgv = JSON.parse(p.metadata.annotations?.["gpureap.io/worker-argv"] ?? "null");
    } catch (e) {
      fail(where, `annotation gpureap.io/worker-argv is not JSON: ${e.message}`);
    }
    check("annotation gpureap.io/worker-argv", workerArgv, s.worker_argv);
    check("nvidia.com/gpu limit", c.resources?.limits?.["nvidia.com/gpu"], s.min_gpus);
    check("NVIDIA_DRIVER_CAPABILITIES", (c.env ?? []).find((e) => e.name === "NVIDIA_DRIVER_CAPABILITIES")?.value,
          "compute,utility");

    // The argv fields against the table's own fields, so neither can drift alone.
    const argv = s.worker_argv ?? [];
    const after = (list, flag) => list[list.indexOf(flag) + 1];
    check("pid1_argv[0]", (s.pid1_argv ?? [])[0], s.pid1);
    check("worker_argv --exit-after", Number(after(argv, "--exit-after")), s.parent_exit_after_seconds);
    check("worker_argv --bytes", Number(after(argv, "--bytes")), s.worker_bytes);
    const mode = argv[argv.indexOf("--") + 2];
    if (s.worker === "forks_after_init") {
      check("worker mode", mode, "fork-after-init");
      check("worker_argv --children", Number(after(argv, "--children")), s.forked_children);
    } else {
      check("worker mode", mode, "hold");
    }
    check("worker TERM handling", argv.includes("--term-cleanup") ? "cleans_up_on_term" : "ignores_term",
          s.worker === "cleans_up_on_term" ? "cleans_up_on_term" : "ignores_term");
    if (s.prestop) {
      check("preStop --term-wait", Number(after(s.prestop.argv, "--term-wait")), s.prestop.term_wait_seconds);
      const deadline = Number(after(s.prestop.argv, "--deadline"));
      if (!(deadline < s.termination_grace_period_seconds))
        fail(where, `preStop --deadline ${deadline} is not within the grace ${s.termination_grace_period_seconds}`);
    }
    if (s.gpureap_init) {
      check("gpureap-init --gpu-grace", Number(after(s.pid1_argv, "--gpu-grace")), s.gpureap_init.gpu_grace_seconds);
      check("gpureap-init --grace", Number(after(s.pid1_argv, "--grace")), s.gpureap_init.grace_seconds);
    }
    pods.delete(s.pod);
  }
  for (const name of pods.keys()) fail(`${rendered}: Pod/${name}`, "rendered but no scenario of the lab's names it");
  finish(`${wanted.length} scenario pod(s) match ${scenariosFile}`);
}

function exporter(repo, rendered) {
  const objs = documents(rendered);
  const find = (kind, name) => objs.find((o) => o.kind === kind && (!name || o.metadata.name === name));
  const ds = find("DaemonSet");
  const w = `${rendered}: ${objName(ds)}`;
  const check = (where, field, got, want) => {
    if (!eq(got, want)) fail(where, `${field} differs, ${firstDiff(got, want)} (got vs want)`);
  };
  if (!ds) fail(rendered, "no DaemonSet rendered");
  else {
    const spec = ds.spec.template.spec;
    const c = spec.containers[0];
    const sc = c.securityContext ?? {};
    check(w, "hostPID", spec.hostPID, true);
    check(w, "hostNetwork", spec.hostNetwork, undefined);
    check(w, "priorityClassName", spec.priorityClassName, "system-node-critical");
    check(w, "args[0..1]", c.args.slice(0, 2), ["exporter", "--host-root=/host"]);
    check(w, "securityContext.runAsUser", sc.runAsUser, 0);
    check(w, "securityContext.readOnlyRootFilesystem", sc.readOnlyRootFilesystem, true);
    check(w, "capabilities.drop", sc.capabilities?.drop, ["ALL"]);
    check(w, "capabilities.add", sc.capabilities?.add, ["SYS_PTRACE", "DAC_READ_SEARCH", "BPF", "PERFMON"]);
    if (sc.privileged) {
      check(w, "allowPrivilegeEscalation (privileged fallback)", sc.allowPrivilegeEscalation, undefined);
    } else {
      check(w, "securityContext.privileged", sc.privileged, false);
      check(w, "securityContext.allowPrivilegeEscalation", sc.allowPrivilegeEscalation, false);
    }
    const vols = new Map(spec.volumes.map((v) => [v.name, v]));
    const mounted = {};
    for (const m of c.volumeMounts) {
      if (m.readOnly !== true) fail(w, `volumeMount ${m.name} is not readOnly`);
      if (!["IfPossible", "Enabled"].includes(m.recursiveReadOnly))
        fail(w, `volumeMount ${m.name}: recursiveReadOnly is ${m.recursiveReadOnly}, want IfPossible (its submounts read-only too)`);
      const v = vols.get(m.name);
      if (!v?.hostPath) fail(w, `volumeMount ${m.name} is not a hostPath`);
      else mounted[v.hostPath.path] = m.mountPath;
    }
    check(w, "host paths mounted (path -> mountPath)", mounted, {
      "/proc": "/host/proc", "/sys": "/host/sys", "/run/containerd": "/host/run/containerd",
      "/run/containers": "/host/run/containers", "/var/log/pods": "/host/var/log/pods",
    });
    if (!(spec.tolerations ?? []).some((t) => t.key === "nvidia.com/gpu" && t.operator === "Exists"))
      fail(w, "no toleration for the nvidia.com/gpu taint");
    const terms = spec.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution?.nodeSelectorTerms ?? [];
    if (!terms.some((t) => (t.matchExpressions ?? []).some((e) => e.key === "nvidia.com/gpu.present")))
      fail(w, "no required node affinity to nvidia.com/gpu.present");
    for (const probe of ["readinessProbe", "livenessProbe"]) {
      check(w, `${probe}.httpGet.path`, c[probe]?.httpGet?.path, "/healthz");
      check(w, `${probe}.httpGet.port`, c[probe]?.httpGet?.port, "metrics");
    }
  }
  const rule = find("PrometheusRule");
  if (rule) {
    const operatorCopy = yaml.load(fs.readFileSync(path.join(repo, "deploy/monitoring/prometheusrule.yaml"), "utf8"));
    const ruleFile = yaml.load(fs.readFileSync(path.join(repo, "deploy/monitoring/prometheus/gpureap-rules.yml"), "utf8"));
    check(`${rendered}: ${objName(rule)}`, "spec.groups (vs deploy/monitoring/prometheusrule.yaml)",
          rule.spec.groups, operatorCopy.spec.groups);
    check(`${rendered}: ${objName(rule)}`, "spec.groups (vs deploy/monitoring/prometheus/gpureap-rules.yml)",
          rule.spec.groups, ruleFile.groups);
  }
  for (const [cm, key, source] of [
    ["gpureap-dashboard", "gpureap-dashboard.json", "deploy/monitoring/grafana/gpureap-dashboard.json"],
    ["gpureap-npd-plugin", "gpureap-check-monitor.json", "deploy/npd/gpureap-check-monitor.json"],
  ]) {
    const o = find("ConfigMap", cm);
    if (!o) continue;
    const want = fs.readFileSync(path.join(repo, source), "utf8");
    // `|-` drops the file's final newline; everything else is byte for byte.
    if (o.data?.[key] !== want.replace(/\n$/, ""))
      fail(`${rendered}: ConfigMap/${cm}`, `data.${key} differs from ${source}`);
  }
  finish(`${rendered}: the exporter's objects are as docs/exporter.md and deploy/ say`);
}

// Argo CD's shapes: an Application from an OCI Helm repository (repoURL
// without oci://, a chart, a semver targetRevision) and the repository Secret.
function argocd(files) {
  const semverRange = /^(\s*(\^|~|[<>]=?|=)?\s*v?\d+(\.(\d+|[x*]))?(\.(\d+|[x*]))?(-[0-9A-Za-z.-]+)?\s*,?)+$/;
  let apps = 0, secrets = 0;
  for (const file of files) {
    for (const o of documents(file)) {
      const w = `${file}: ${objName(o)}`;
      if (o.kind === "Application") {
        apps++;
        const src = o.spec?.source ?? {};
        if (typeof src.repoURL !== "string" || /^[a-z]+:\/\//.test(src.repoURL))
          fail(w, `spec.source.repoURL '${src.repoURL}' must be host/project with no scheme (Argo CD's OCI Helm form)`);
        if (!src.chart) fail(w, "spec.source.chart is missing");
        if (!semverRange.test(String(src.targetRevision ?? "")))
          fail(w, `spec.source.targetRevision '${src.targetRevision}' is not a semver version or range`);
        if (!fs.existsSync(path.join(path.dirname(file), "..", "charts", String(src.chart), "Chart.yaml")))
          fail(w, `spec.source.chart '${src.chart}' is not a chart of charts/`);
      } else if (o.kind === "Secret") {
        secrets++;
        const d = o.stringData ?? {};
        if (o.metadata?.labels?.["argocd.argoproj.io/secret-type"] !== "repository")
          fail(w, "label argocd.argoproj.io/secret-type must be repository");
        if (d.type !== "helm") fail(w, `stringData.type is '${d.type}', want helm`);
        if (d.enableOCI !== "true") fail(w, `stringData.enableOCI is ${JSON.stringify(d.enableOCI)}, want "true"`);
        if (typeof d.url !== "string" || /^[a-z]+:\/\//.test(d.url)) fail(w, `stringData.url '${d.url}' must have no scheme`);
        for (const k of ["name", "username", "password"]) if (!d[k]) fail(w, `stringData.${k} is missing`);
      } else {
        fail(w, "argocd/ holds Applications and the repository Secret only");
      }
    }
  }
  if (apps !== 2) fail(files.join(" "), `${apps} Application(s), want 2 (gpu-zombie-test, gpureap)`);
  if (secrets !== 1) fail(files.join(" "), `${secrets} repository Secret(s), want 1`);
  finish(`argocd: ${apps} Application(s) and ${secrets} repository Secret(s) have Argo CD's OCI shapes`);
}

// The rendered DaemonSet's container as lines for run.sh's least_privilege
// test: "root PATH", "mount HOSTPATH MOUNTPATH", "cap NAME", "no_new_privs
// true|false", "privileged true|false", "arg ARG".
function daemonsetLines(rendered) {
  const ds = documents(rendered).find((o) => o.kind === "DaemonSet");
  if (!ds) { fail(rendered, "no DaemonSet rendered"); return finish(""); }
  const spec = ds.spec.template.spec, c = spec.containers[0], sc = c.securityContext ?? {};
  const vols = new Map(spec.volumes.map((v) => [v.name, v]));
  const rootArg = (c.args ?? []).find((a) => a.startsWith("--host-root="));
  if (!rootArg) fail(rendered, "DaemonSet: no --host-root= argument");
  const lines = [`root ${rootArg?.slice("--host-root=".length)}`];
  for (const m of c.volumeMounts ?? []) {
    const hp = vols.get(m.name)?.hostPath?.path;
    if (!hp) { fail(rendered, `volumeMount ${m.name} is not a hostPath`); continue; }
    if (m.readOnly !== true) fail(rendered, `volumeMount ${m.name} is not readOnly`);
    lines.push(`mount ${hp} ${m.mountPath}`);
  }
  for (const cap of sc.capabilities?.add ?? []) lines.push(`cap ${cap.toLowerCase()}`);
  if (!eq(sc.capabilities?.drop, ["ALL"])) fail(rendered, "capabilities.drop is not [ALL]");
  lines.push(`no_new_privs ${sc.allowPrivilegeEscalation === false}`);
  lines.push(`privileged ${sc.privileged === true}`);
  lines.push(`run_as_user ${sc.runAsUser}`);
  for (const a of c.args ?? []) lines.push(`arg ${a}`);
  if (errors.length) return finish("");
  console.log(lines.join("\n"));
}

function count(rendered, specs) {
  const objs = documents(rendered);
  for (const s of specs) {
    const [kind, n] = s.split("=");
    const got = objs.filter((o) => o.kind === kind).length;
    if (got !== Number(n)) fail(rendered, `${got} ${kind} object(s), want ${n}`);
  }
  finish(`${rendered}: ${specs.join(" ")}`);
}

function workflowScripts(outDir, files) {
  let n = 0;
  for (const file of files) {
    const wf = documents(file)[0] ?? {};
    for (const [job, j] of Object.entries(wf.jobs ?? {})) {
      (j.steps ?? []).forEach((step, i) => {
        if (typeof step.run !== "string") return;
        // The runner runs `run:` with bash -e; an expression becomes a variable.
        const body = step.run.replace(/\$\{\{[^}]*\}\}/g, "${GHA_EXPRESSION}");
        const out = path.join(outDir, `${path.basename(file, ".yaml")}.${job}.${i + 1}.sh`);
        fs.writeFileSync(out, `#!/usr/bin/env bash\n# ${file}: job ${job}, step ${i + 1} (${step.name ?? ""})\nset -e\nexport GHA_EXPRESSION=x\n${body}`);
        n++;
      });
    }
  }
  finish(`${n} run block(s) written to ${outDir}`);
}

switch (mode) {
  case "validate": await validate(args); break;
  case "scenarios": scenarios(args[0], args[1]); break;
  case "exporter": exporter(args[0], args[1]); break;
  case "count": count(args[0], args.slice(1)); break;
  case "argocd": argocd(args); break;
  case "daemonset-lines": daemonsetLines(args[0]); break;
  case "workflow-scripts": workflowScripts(args[0], args.slice(1)); break;
  default:
    console.error(`check.mjs: unknown mode '${mode}'`);
    process.exit(64);
}
