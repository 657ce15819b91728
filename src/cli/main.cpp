// gpureap: find, measure and fix GPU process-hygiene failures on a node.
#include <malloc.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <exception>
#include <functional>
#include <iterator>
#include <string_view>
#include <utility>

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
  using Register = void (*)(CLI::App&, std::function<int()>&);
  static constexpr std::pair<std::string_view, Register> kSubcommands[] = {
      {"trace", gpureap::cli::register_trace},
      {"node", gpureap::cli::register_node},
      {"snapshot", gpureap::cli::register_snapshot},
      {"observe", gpureap::cli::register_observe},
      {"prestop", gpureap::cli::register_prestop},
      {"lab", gpureap::cli::register_lab},
      {"exporter", gpureap::cli::register_exporter_launcher},
      {"check", gpureap::cli::register_check},
  };
  // A run names its subcommand first (trace every minute on every node):
  // only that one is built, which took a third of a millisecond for all of
  // them. Anything else (--help, --version, a typo) gets them all, so that
  // help and errors list every subcommand.
  const auto named = argc > 1 ? std::find_if(std::begin(kSubcommands), std::end(kSubcommands),
                                             [&](const auto& s) { return s.first == argv[1]; })
                              : std::end(kSubcommands);
  if (named != std::end(kSubcommands)) {
    named->second(app, run);
  } else {
    for (const auto& [name, add] : kSubcommands) add(app, run);
  }
  return gpureap::cli::parse_and_run(app, argc, argv, run);
} catch (const std::exception& e) {
  // Only what nothing below caught (out of memory while parsing): one line, exit 2.
  (void)std::fprintf(stderr, "gpureap: %s\n", e.what());
  return gpureap::cli::kExitCouldNotCheck;
}
