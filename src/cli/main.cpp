// gpureap: find, measure and fix GPU process-hygiene failures on a node.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <functional>

#include "cli/commands.hpp"
#include "cli/common.hpp"

int main(int argc, char** argv) try {
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
