// gpureap-exporter: `gpureap exporter` as a program of its own (it is what
// that subcommand runs; exporter_launch.cpp says why). Its arguments are the
// subcommand's: gpureap-exporter --listen=:9464 is gpureap exporter --listen=:9464.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <functional>
#include <vector>

#include "cli/commands.hpp"
#include "cli/common.hpp"

int main(int argc, char** argv) try {
  CLI::App app{"gpureap: make GPU nodes give their GPUs back", "gpureap"};
  app.require_subcommand(1);
  std::function<int()> run;
  gpureap::cli::register_exporter(app, run);
  // Parsed as `gpureap exporter ARGS`, so help and errors name the command
  // users type.
  std::vector<const char*> args;
  args.reserve(static_cast<std::size_t>(argc) + 1);
  args.push_back("gpureap");
  args.push_back("exporter");
  for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
  return gpureap::cli::parse_and_run(app, static_cast<int>(args.size()), args.data(), run);
} catch (const std::exception& e) {
  // Only what nothing below caught (out of memory while parsing): one line, exit 2.
  (void)std::fprintf(stderr, "gpureap: %s\n", e.what());
  return gpureap::cli::kExitCouldNotCheck;
}
