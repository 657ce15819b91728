// comparison.md and notes.md: the plan's tables filled from measurements.
// Every number printed here is read from the Measurements, rounded the way
// measurements.json rounds it (tests check the two agree).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>

#include "lab/lab.hpp"
#include "lab/scenario.hpp"

namespace gpureap::lab {

namespace {

std::string f2(double v) {
  return fmt::format("{:.2f}", v);
}

std::string gib(std::uint64_t bytes) {
  return f2(static_cast<double>(bytes) / kGiB) + " GiB";
}

std::string secs(double s) {
  return f2(s) + " s";
}

bool ran(const Measurements& m) {
  return !m.not_run && !m.error;
}

// The base S1 (one worker, root), the reference of the GiB·s ratios.
const Measurements* s1_of(const std::vector<Measurements>& runs) {
  for (const auto& m : runs) {
    if (m.instance == "S1" && ran(m)) return &m;
  }
  return nullptr;
}

std::string held_for(const Measurements& m) {
  if (!m.gpu_release_after_delete_s) return "never released";
  return secs(*m.gpu_release_after_delete_s);
}

// PID 1 as the image asks for it, and what observe saw running when it differs
// (bash -c execs its one command: PID 1 becomes `sleep`).
std::string pid1_cell(const Measurements& m) {
  std::string asked;
  for (const auto& a : m.pid1_command) asked += (asked.empty() ? "" : " ") + a;
  for (const auto& s : m.steps) {
    if (!s.observe_exit) continue;
    if (m.pid1 == "bash" && s.pid1.rfind("bash", 0) != 0 && !s.pid1.empty()) {
      return "`" + asked + "`, which execs: PID 1 is `" + s.pid1 + "`";
    }
    break;
  }
  return "`" + asked + "`";
}

std::string table_row(const std::string& label, const std::vector<Measurements>& runs,
                      const std::function<std::string(const Measurements&)>& cell) {
  std::string row = "| " + label + " |";
  for (const auto& m : runs) {
    if (m.not_run) {
      row += " not run |";
    } else if (m.error) {
      row += " could not run |";
    } else {
      row += " " + cell(m) + " |";
    }
  }
  return row + "\n";
}

std::string header(const std::vector<Measurements>& runs) {
  std::string h = "| |";
  std::string sep = "|---|";
  for (const auto& m : runs) {
    h += " " + m.instance + " |";
    sep += "---|";
  }
  return h + "\n" + sep + "\n";
}

std::string how_released(const Measurements& m) {
  const auto& ev = m.deletion;
  if (!m.gpu_release_after_delete_s) return "❌ never released";
  const double r = *m.gpu_release_after_delete_s;
  if (m.term_reached_worker) return "✅ graceful: the worker cleaned up, " + secs(r);
  if (m.init_escalated) return "⚠️ gpureap-init SIGKILL at --gpu-grace, " + secs(r);
  if (ev.prestop_ended_s && r <= *ev.prestop_ended_s + 1.0 && r < ev.term_pid1_s + 1.0) {
    return "⚠️ preStop SIGKILL fallback, " + secs(r);
  }
  if (ev.kill_pid1_s)
    return "❌ held for the whole grace: SIGKILL at " + secs(*ev.kill_pid1_s) + ", released " +
           secs(r);
  return "⚠️ SIGKILLed by the namespace teardown when PID 1 exited, " + secs(r);
}

std::string list_pids(const std::vector<pid_t>& pids) {
  std::string out;
  for (pid_t p : pids) out += (out.empty() ? "" : ", ") + std::to_string(p);
  return out;
}

}  // namespace

std::string comparison_markdown(const std::vector<Measurements>& runs, const std::string& when) {
  std::string md = "# gpureap lab: the plan's experiment, measured\n\n";
  if (!when.empty()) md += when + "\n\n";
  const Measurements* any = nullptr;
  for (const auto& m : runs) {
    if (ran(m)) {
      any = &m;
      break;
    }
  }
  if (any == nullptr && !runs.empty()) any = &runs.front();
  if (any != nullptr) {
    md += "Runtime **" + any->runtime + "**, workload **" + any->workload + "**, GPU **" +
          (any->gpu_name.empty() ? any->gpu_backend : any->gpu_name) + "** (" + any->gpu_backend +
          ", driver " + any->driver_version + "), " +
          (any->quick ? "**--quick**: every grace and wait × " + f2(any->time_scale) +
                            " (GiB·s scale with it)"
                      : "the plan's graces") +
          ". Every scenario ran in a pod of its own, all at once; GPU memory is accounted per pod "
          "(its own device "
          "on the simulated GPU, its processes on a real one) and sampled every " +
          f2(any->sample_period_s * 1000) + " ms from the deletion's start.\n\n";
  }

  md += "## The plan's Phase 3 table, measured\n\n" + header(runs);
  md += table_row("PID 1", runs, pid1_cell);
  md += table_row("Zombies reaped", runs, [](const Measurements& m) {
    return m.zombies == 0 ? std::string("✅ none left")
                          : "❌ " + std::to_string(m.zombies) + " zombie(s)";
  });
  md += table_row("Orphaned GPU worker at pod deletion", runs, how_released);
  md += table_row("SIGTERM → CUDA cleanup", runs, [](const Measurements& m) {
    return m.term_reached_worker ? std::string("✅ handler ran") : std::string("❌ never acted on");
  });
  md += table_row("Orphaned context after kill -9", runs, [](const Measurements& m) {
    if (m.orphaned_contexts == 0) return std::string("none: the driver freed it");
    return "❌ " + std::to_string(m.orphaned_contexts) + " (held by " +
           list_pids(m.orphaned_context_holders) + ")";
  });
  md += table_row("Context hidden from nvidia-smi", runs, [](const Measurements& m) {
    return m.hidden_holders == 0 ? std::string("none")
                                 : std::to_string(m.hidden_holders) + " hidden holder finding(s)";
  });
  md += table_row("GPU memory after pod deletion", runs, [](const Measurements& m) {
    return m.gpu_bytes_after_delete == 0 ? std::string("✅ released")
                                         : "❌ " + gib(m.gpu_bytes_after_delete) + " held";
  });
  md += table_row("PID → Pod (trace)", runs, [](const Measurements& m) {
    for (const auto& s : m.steps) {
      if (s.pod_named) return "✅ " + m.pod;
    }
    return std::string("❌ not named");
  });
  md += table_row("Node reboot needed", runs, [](const Measurements& m) {
    return m.gpu_bytes_after_delete == 0 && m.survivors_after_delete == 0
               ? std::string("no")
               : std::string("⚠️ yes");
  });

  md += "\n## The README's table, with numbers instead of expectations\n\n" + header(runs);
  md += table_row("Zombies (distinct, seen inside)", runs,
                  [](const Measurements& m) { return std::to_string(m.zombies); });
  md += table_row("Orphans (PPID 1, seen inside)", runs,
                  [](const Measurements& m) { return std::to_string(m.orphans); });
  md += table_row("SIGTERM reached the worker", runs, [](const Measurements& m) {
    return m.term_reached_worker
               ? "yes, " + secs(m.term_reached_worker_s.value_or(0)) + " after the deletion began"
               : std::string("no");
  });
  md += table_row("kill -9 → orphaned CUDA context", runs,
                  [](const Measurements& m) { return std::to_string(m.orphaned_contexts); });
  md += table_row("Latent orphaned context (creator alive)", runs,
                  [](const Measurements& m) { return std::to_string(m.latent_orphaned_contexts); });
  md += table_row("GPU held during deletion", runs, held_for);
  md += table_row("Grace period (as run)", runs,
                  [](const Measurements& m) { return secs(m.grace_s); });
  md += table_row("Processes left after deletion", runs,
                  [](const Measurements& m) { return std::to_string(m.survivors_after_delete); });

  md += "\n## GPU memory held during termination\n\n";
  md +=
      "| scenario | title | workers | uid | held at deletion | released after | GiB·s | × S1 | how "
      "the memory came back |\n";
  md += "|---|---|---|---|---|---|---|---|---|\n";
  const Measurements* s1 = s1_of(runs);
  for (const auto& m : runs) {
    if (!ran(m)) {
      md += "| " + m.instance + " | " + m.title + " | " + std::to_string(m.workers) + " | " +
            std::to_string(m.uid) + " | | | | | " +
            (m.not_run ? "not run: " + *m.not_run : "could not run: " + m.error.value_or("")) +
            " |\n";
      continue;
    }
    std::string ratio;
    if (s1 != nullptr && s1->gpu_gib_seconds_during_termination > 0) {
      ratio = f2(m.gpu_gib_seconds_during_termination / s1->gpu_gib_seconds_during_termination);
    }
    md += "| " + m.instance + " | " + m.title + " | " + std::to_string(m.workers) + " | " +
          std::to_string(m.uid) + " | " + gib(m.gpu_bytes_at_delete) + " | " + held_for(m) + " | " +
          f2(m.gpu_gib_seconds_during_termination) + " | " + ratio + " | " + m.release_cause +
          " |\n";
  }

  // The plan's README guessed S2–S4 (S1 it measured): how long the GPU stays held.
  std::string expected;
  for (const auto& m : runs) {
    if (!ran(m) || !m.plan_expected_hold_s || m.workers != 1 || m.uid != 0 ||
        !m.gpu_release_after_delete_s) {
      continue;
    }
    const double want = *m.plan_expected_hold_s;
    const double got = *m.gpu_release_after_delete_s;
    const bool as_expected = std::abs(got - want) <= std::max(0.1 * want, 1.0 * m.time_scale);
    expected += "| " + m.instance + " | " + secs(want) +
                (m.scenario == "S1" ? " (measured by the plan)" : "") + " | " + secs(got) + " | " +
                (as_expected ? "as expected" : "**not as expected**: " + m.release_cause) + " |\n";
  }
  if (!expected.empty()) {
    md +=
        "\n## Against the plan's expectations\n\n"
        "| scenario | GPU held during deletion, the plan's README | measured | "
        "|\n|---|---|---|---|\n" +
        expected;
  }

  // What each fix saves against the unfixed scenarios, per deletion of a one-worker pod.
  const Measurements* s4 = nullptr;
  const Measurements* s5 = nullptr;
  for (const auto& m : runs) {
    if (!ran(m) || m.workers != 1 || m.uid != 0) continue;
    if (m.scenario == "S4") s4 = &m;
    if (m.scenario == "S5") s5 = &m;
  }
  if (s4 != nullptr || s5 != nullptr) {
    md += "\n## GPU memory the fixes save, per pod deletion\n\n| held under | GiB·s |";
    std::string sep = "\n|---|---|";
    for (const Measurements* fix : {s4, s5}) {
      if (fix != nullptr) {
        md += " wasted vs " + fix->instance + " (" + f2(fix->gpu_gib_seconds_during_termination) +
              " GiB·s) |";
        sep += "---|";
      }
    }
    md += sep + "\n";
    for (const auto& m : runs) {
      if (!ran(m) || m.workers != 1 || m.uid != 0 ||
          (m.scenario != "S1" && m.scenario != "S2" && m.scenario != "S3")) {
        continue;
      }
      md += "| " + m.instance + " | " + f2(m.gpu_gib_seconds_during_termination) + " |";
      for (const Measurements* fix : {s4, s5}) {
        if (fix != nullptr) {
          md += " " +
                f2(m.gpu_gib_seconds_during_termination - fix->gpu_gib_seconds_during_termination) +
                " |";
        }
      }
      md += "\n";
    }
    md +=
        "\nA negative number: that scenario gave the GPU back sooner than the fix, but by SIGKILL, "
        "without "
        "the worker's cleanup (see how the memory came back).\n";
  }

  // The plan's headline number: ten TERM-ignoring workers, 740 GB·s in a 30 s grace.
  for (const auto& m : runs) {
    if (m.scenario != "S1" || m.workers < 2 || !ran(m) || !m.gpu_release_after_delete_s) continue;
    constexpr double kPlanGbS = 740;
    constexpr double kPlanGraceS = 30;
    const double gb_s = m.gpu_gib_seconds_during_termination * kGiB / 1e9;
    const double per_worker_gb = static_cast<double>(m.gpu_bytes_at_delete) / m.workers / 1e9;
    const double held = *m.gpu_release_after_delete_s;
    // The plan's number, per worker: 740 GB·s / 10 workers / 30 s.
    const double plan_per_worker_gb = kPlanGbS / 10 / kPlanGraceS;
    md += "\n**" + m.instance + " against the plan's 740 GB·s.** " + std::to_string(m.workers) +
          " TERM-ignoring workers held " + f2(gb_s) + " GB·s (" +
          f2(m.gpu_gib_seconds_during_termination) + " GiB·s): " + f2(per_worker_gb) +
          " GB per worker for " + secs(held) + " of a " + secs(m.grace_s) + " grace, " +
          f2(gb_s / kPlanGbS) + "× the plan's. The plan's 740 GB·s is " + f2(plan_per_worker_gb) +
          " GB per worker × 30 s × 10 (2 GiB of tensors plus the CUDA context, on an A100). Here "
          "each worker held " +
          f2(per_worker_gb / plan_per_worker_gb) + "× that memory (" + m.gpu_name + ", driver " +
          m.driver_version +
          (m.gpu_backend == "sim" ? ": the simulated GPU holds the 2 GiB asked for and no context"
                                  : "") +
          "), for " + f2(held / m.grace_s) +
          "× the grace (the kubelet's SIGKILL comes at its end; the driver "
          "then frees the contexts one after another)" +
          (m.quick ? "; this run's graces are × " + f2(m.time_scale) : std::string()) + ".\n";
  }

  md +=
      "\n## Reading it\n\n"
      "- *Held during deletion* runs from the deletion's start (preStop included) to the first "
      "sample of the "
      "last run of zero-memory samples. *GiB·s* integrates the sampled memory over that time.\n"
      "- *SIGTERM reached the worker* means the worker received it and acted (a handler ran); an "
      "ignored "
      "SIGTERM (SIG_IGN) is discarded by the kernel and never reaches it.\n"
      "- Each scenario's `notes.md` has the step-by-step record; `timeline.svg` the memory over "
      "time; "
      "docs/lab.md explains the kubelet sequence followed.\n";
  return md;
}

std::string notes_markdown(const Measurements& m) {
  std::string md = "# " + m.instance + " — " + m.title + "\n\n";
  md += "Pod `" + m.pod + "` (namespace `" + std::string(kPodNamespace) + "`), runtime " +
        m.runtime + ", workload " + m.workload + ", GPU " +
        (m.gpu_name.empty() ? m.gpu_backend : m.gpu_name) + " #" + std::to_string(m.gpu_index) +
        " (driver " + m.driver_version + "), " + std::to_string(m.workers) + " worker(s) as uid " +
        std::to_string(m.uid) + ".\n\n";
  std::string cmd;
  for (const auto& a : m.pid1_command) cmd += (cmd.empty() ? "" : " ") + a;
  md += "PID 1: `" + cmd + "`; grace " + secs(m.grace_s) +
        (m.prestop_term_wait_s
             ? "; preStop: SIGTERM, wait up to " + secs(*m.prestop_term_wait_s) + ", SIGKILL"
             : std::string("; no preStop")) +
        (m.quick ? " (--quick: × " + f2(m.time_scale) + ")" : std::string()) + ".\n\n";
  if (m.not_run) return md + "**Not run:** " + *m.not_run + "\n";
  if (m.error) md += "**The lab could not finish this scenario:** " + *m.error + "\n\n";

  md +=
      "## Steps\n\n| step | at | GPU held | observe (inside) | trace (node) "
      "|\n|---|---|---|---|---|\n";
  for (const auto& s : m.steps) {
    std::string obs = "container gone";
    if (s.observe_exit) {
      obs = "exit " + std::to_string(*s.observe_exit) + "; PID 1 `" + s.pid1 + "`" +
            (s.pid1_is_init ? " (an init)" : " (not an init)") + "; " +
            std::to_string(s.zombies.size()) + " zombie(s), " + std::to_string(s.orphans.size()) +
            " orphan(s), " + std::to_string(s.listed_dead) + " dead listing(s)";
      for (const auto& f : s.observe_findings) {
        if (f.severity != "info") obs += "; " + f.kind + " (" + f.severity + ")";
      }
    }
    std::string tr = "did not run";
    if (s.trace_exit) {
      tr = "exit " + std::to_string(*s.trace_exit) + (s.pod_named ? "; pod named" : "");
      for (const auto& f : s.trace_findings) {
        tr += std::string(f.related ? "; ↳ " : "; ") + f.kind + " (" + f.severity + ")" +
              (f.pid ? " pid " + std::to_string(*f.pid) : std::string());
        if (!f.holders.empty()) tr += " held by " + list_pids(f.holders);
      }
    }
    if (!s.error.empty()) tr += "; error: " + s.error;
    md += fmt::format("| {} | {} | {} | {} | {} |\n", s.step, secs(s.t), gib(s.gpu_bytes), obs, tr);
  }

  const auto& ev = m.deletion;
  md += "\n## The deletion (seconds from its start)\n\n";
  if (ev.prestop_started_s) {
    md += "- preStop hook from " + secs(*ev.prestop_started_s) + " to " +
          secs(ev.prestop_ended_s.value_or(0)) +
          (ev.prestop_exit ? " (exit " + std::to_string(*ev.prestop_exit) + ")"
                           : " (cut off by the grace)") +
          "\n";
  }
  md += "- SIGTERM to PID 1 at " + secs(ev.term_pid1_s) + "; remaining grace " +
        secs(ev.remaining_grace_s) + "\n";
  if (ev.kill_pid1_s)
    md += "- SIGKILL to PID 1 at " + secs(*ev.kill_pid1_s) + " (the grace ran out)\n";
  if (ev.pid1_exited_s) {
    md += "- PID 1 gone at " + secs(*ev.pid1_exited_s) + ", status " +
          std::to_string(ev.pid1_status.value_or(-1)) + "\n";
  }
  md += "- the kubelet's sweep of the pod cgroup at " + secs(ev.kill_cgroup_s) + ": " +
        std::to_string(ev.killed_in_cgroup) + " process(es) left to kill\n";
  if (m.term_reached_worker)
    md += "- the worker received SIGTERM at " + secs(m.term_reached_worker_s.value_or(0)) + "\n";
  md += "- GPU: " + gib(m.gpu_bytes_at_delete) + " when the deletion began; " +
        (m.gpu_release_after_delete_s ? "released after " + secs(*m.gpu_release_after_delete_s)
                                      : std::string("**never released** while the lab watched")) +
        "; " + f2(m.gpu_gib_seconds_during_termination) + " GiB·s held\n";
  md += "- how: " + m.release_cause + "\n";
  md += "- after the deletion: " + std::to_string(m.survivors_after_delete) +
        " process(es) left, " + gib(m.gpu_bytes_after_delete) + " still held\n";
  if (!m.forked_children.empty()) {
    md += "- the killed creator's forked children (host PIDs): " + list_pids(m.forked_children) +
          "; trace named as the orphaned context's holders: " +
          (m.orphaned_context_holders.empty() ? std::string("none")
                                              : list_pids(m.orphaned_context_holders)) +
          "\n";
  }
  md +=
      "\n## Files\n\n"
      "- `observe-<step>.log` / `.json`: `gpureap observe` inside the container (the plan's "
      "observe.sh)\n"
      "- `trace-<step>.log` / `.json`: `gpureap trace` on the node (the plan's gpu-pod-trace.sh)\n"
      "- `gpu-before-delete.log`, `gpu-after-delete.log`: `gpureap node` (the plan's nvidia-smi "
      "logs)\n"
      "- `workload.log`: what the parent and the workers printed; `container.log`: PID 1's output "
      "(and the preStop hook's)\n"
      "- `measurements.json`: every number above, and the sampled timeline\n";
  return md;
}

}  // namespace gpureap::lab
