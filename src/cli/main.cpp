// gpureap: find, measure and fix GPU process-hygiene failures on a node.
#include <CLI/CLI.hpp>
#include <functional>

#include "cli/common.hpp"
#include "cli/commands.hpp"

int main(int argc, char** argv) {
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
  gpureap::cli::register_exporter(app, run);
  gpureap::cli::register_check(app, run);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Help and version exit 0; usage errors exit 2 ("could not check").
    const int rc = app.exit(e);
    return rc == 0 ? 0 : gpureap::cli::kExitCouldNotCheck;
  }
  return run ? run() : gpureap::cli::kExitCouldNotCheck;
}
