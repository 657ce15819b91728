// What the css_set re-check costs (issue 12): the whole task pass against
// one iteration per process (kernel_css_sets_alone), on this node's tasks.
// Prints one line: per task and per process, and their ratio, which is what
// kCssPassTasksPerProcess (src/proc/kernel_fds.hpp) should be.
// Built by tests/device/css_cost.sh; run inside a bench fleet.
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "proc/kernel_fds.hpp"

namespace {

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace

int main() {
  using namespace gpureap;
  auto root = sys::HostRoot::open("/");
  if (!root) return 2;
  auto table = proc::read_kernel_fds(*root, proc::DeviceMatcher{});
  if (!table || table->tasks.empty() || table->tasks_shown == 0) {
    std::fprintf(stderr, "css_cost: no task pass\n");
    return 2;
  }
  std::vector<pid_t> some;
  const std::size_t step = std::max<std::size_t>(1, table->tasks.size() / 20);
  for (std::size_t i = 0; i < table->tasks.size() && some.size() < 20; i += step)
    some.push_back(table->tasks[i].tgid);
  double whole = 1e9, alone = 1e9;
  for (int round = 0; round < 15; ++round) {
    auto start = std::chrono::steady_clock::now();
    if (!proc::kernel_css_sets(*table)) return 1;
    whole = std::min(whole, ms_since(start));
    start = std::chrono::steady_clock::now();
    if (!proc::kernel_css_sets_alone(*table, some)) return 1;
    alone = std::min(alone, ms_since(start));
  }
  const double per_task = whole * 1e3 / table->tasks_shown;
  const double per_process = alone * 1e3 / static_cast<double>(some.size());
  std::printf(
      "tasks %u: whole pass %.3f ms (%.3f us a task); %zu processes alone %.3f ms (%.2f us each): "
      "one = %.1f tasks\n",
      table->tasks_shown, whole, per_task, some.size(), alone, per_process, per_process / per_task);
  return 0;
}
