// One register function per subcommand; each sets `run` to its action when chosen.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace gpureap::cli {

void register_trace(CLI::App& app, std::function<int()>& run);
void register_node(CLI::App& app, std::function<int()>& run);
void register_snapshot(CLI::App& app, std::function<int()>& run);
void register_observe(CLI::App& app, std::function<int()>& run);
void register_prestop(CLI::App& app, std::function<int()>& run);
void register_lab(CLI::App& app, std::function<int()>& run);
// The exporter's options and runtime: gpureap-exporter's own (exporter_main.cpp).
void register_exporter(CLI::App& app, std::function<int()>& run);
// gpureap's `exporter`: replaces gpureap with gpureap-exporter, arguments kept.
void register_exporter_launcher(CLI::App& app, std::function<int()>& run);
void register_check(CLI::App& app, std::function<int()>& run);

}  // namespace gpureap::cli
