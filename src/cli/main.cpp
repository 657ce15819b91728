// gpureap: find, measure and fix GPU process-hygiene failures on a node.
#include <malloc.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <functional>

#include "cli/commands.hpp"
#include "cli/common.hpp"

int main(int argc, char** argv) try {
  // Most runs are one question and exit (trace every minute on every node):
  // blocks freed go back to the heap and are reused, not unmapped and then
  // faulted in again (a vector of 2,000 processes is over malloc's 128 KiB
  // mmap threshold). A trace on 2,000 processes took 1,113 page faults, now
  // 804, 2-12 us each on the lent machines; its max RSS grew 64 KiB.
  (void)mallopt(M_MMAP_THRESHOLD, 8 << 20);
  (void)mallopt(M_TRIM_THRESHOLD, 32 << 20);
  CLI::App app{"gpureap: make GPU nodes give their GPUs back", "gpureap"};
  app.set_version_flag("--version", "gpureap 0.1.0");
  app.require_subcommand(1);
  std::function<int()> run;
  gpureap::cli::register_trace(app, run);
  gpureap::cli::register_node(app, run);
  gpureap::cli::register_snapshot(app, run);
  gpureap::cli::register_observe(app, run);
  gpureap::cli::register_prestop(app, run);
  gpureap::cli::register_lab(app, run);
  gpureap::cli::register_exporter_launcher(app, run);
  gpureap::cli::register_check(app, run);
  return gpureap::cli::parse_and_run(app, argc, argv, run);
} catch (const std::exception& e) {
  // Only what nothing below caught (out of memory while parsing): one line, exit 2.
  (void)std::fprintf(stderr, "gpureap: %s\n", e.what());
  return gpureap::cli::kExitCouldNotCheck;
}
