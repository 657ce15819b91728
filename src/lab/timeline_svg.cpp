// timeline.svg: one panel per scenario, stacked on a shared time axis, each
// labelled on its left with what it is and how long the GPU stayed held, so
// no legend is needed and curves that fall at the same instant never hide
// each other. Each panel has its own memory scale (ten workers hold ten times
// one): the top of a panel is written on it.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "lab/lab.hpp"

namespace gpureap::lab {

namespace {

constexpr double kWidth = 960;
constexpr double kLeft = 250;  // labels
constexpr double kRight = 30;
constexpr double kTop = 56;
constexpr double kPanel = 64;
constexpr double kGap = 14;
constexpr double kBottom = 56;
constexpr const char* kColours[] = {"#1f77b4", "#d62728", "#ff7f0e", "#2ca02c", "#9467bd",
                                    "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};

std::string num(double v) {
  return fmt::format("{:.1f}", v);
}

// "3.0 s", "0.21 s": two decimals under a second.
std::string seconds(double v) {
  return v < 1 ? fmt::format("{:.2f} s", v) : fmt::format("{:.1f} s", v);
}

std::string esc(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

// 1, 2 or 5 × 10^k, at least `v`.
double nice_ceiling(double v) {
  if (v <= 0) return 1;
  const double p = std::pow(10.0, std::floor(std::log10(v)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * p >= v) return m * p;
  }
  return 10 * p;
}

std::string text(double x, double y, const std::string& body, const std::string& attrs = "") {
  return "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\"" + (attrs.empty() ? "" : " " + attrs) +
         ">" + esc(body) + "</text>\n";
}

}  // namespace

std::string timeline_svg(const std::vector<Measurements>& runs) {
  double t_max = 1;
  for (const auto& m : runs) {
    if (!m.timeline.empty()) t_max = std::max(t_max, m.timeline.back().t);
    t_max = std::max(t_max, m.gpu_release_after_delete_s.value_or(0));
  }
  t_max = nice_ceiling(t_max * 1.02);
  const double plot_w = kWidth - kLeft - kRight;
  const auto height = kTop + static_cast<double>(runs.size()) * (kPanel + kGap) + kBottom;
  auto x_of = [&](double t) { return kLeft + std::clamp(t / t_max, 0.0, 1.0) * plot_w; };

  std::string svg = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  svg += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(kWidth) + "\" height=\"" +
         num(height) + "\" viewBox=\"0 0 " + num(kWidth) + " " + num(height) +
         "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  svg += "<title>GPU memory held during pod deletion, per scenario</title>\n";
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg += text(16, 26, "GPU memory held while each pod is deleted (from the deletion's start)",
              "font-size=\"16\" font-weight=\"bold\"");
  svg += text(16, 44,
              "Each panel: one scenario, its own memory scale; dashed: its grace period ends; "
              "dotted: the kubelet's SIGTERM to PID 1 (after the preStop hook).",
              "fill=\"#555\"");

  const double axis_y = kTop + static_cast<double>(runs.size()) * (kPanel + kGap) - kGap + 8;
  // Time grid and axis.
  const double step = nice_ceiling(t_max / 8);
  const auto ticks = static_cast<int>(std::lround(t_max / step));
  for (int k = 0; k <= ticks; ++k) {
    const double t = step * k;
    const double x = x_of(t);
    svg += "<line x1=\"" + num(x) + "\" y1=\"" + num(kTop - 4) + "\" x2=\"" + num(x) + "\" y2=\"" +
           num(axis_y) + "\" stroke=\"#e4e4e4\"/>\n";
    svg += text(x, axis_y + 16, step < 1 ? fmt::format("{:.1f}", t) : fmt::format("{:.0f}", t),
                "text-anchor=\"middle\"");
  }
  svg += text(kLeft + plot_w / 2, axis_y + 36, "seconds since the deletion started",
              "text-anchor=\"middle\"");

  for (std::size_t i = 0; i < runs.size(); ++i) {
    const auto& m = runs[i];
    const std::string colour = kColours[i % (sizeof kColours / sizeof kColours[0])];
    const double top = kTop + static_cast<double>(i) * (kPanel + kGap);
    const double base = top + kPanel;
    svg += "<g class=\"panel\" data-scenario=\"" + esc(m.instance) + "\">\n";
    svg += "<rect x=\"" + num(kLeft) + "\" y=\"" + num(top) + "\" width=\"" + num(plot_w) +
           "\" height=\"" + num(kPanel) + "\" fill=\"#fafafa\" stroke=\"#ccc\"/>\n";
    svg += text(16, top + 18, m.instance, "font-weight=\"bold\" fill=\"" + colour + "\"");
    svg += text(16, top + 34, m.label, "fill=\"#333\"");
    std::string summary;
    if (m.not_run) {
      summary = "not run";
    } else if (m.error) {
      summary = "could not run";
    } else {
      summary = "grace " + num(m.grace_s) + " s · " +
                (m.gpu_release_after_delete_s ? "held " + seconds(*m.gpu_release_after_delete_s)
                                              : std::string("never released")) +
                " · " + num(m.gpu_gib_seconds_during_termination) + " GiB·s";
    }
    svg += text(16, top + 50, summary, "fill=\"#333\"");
    if (m.not_run || m.error) {
      svg += text(kLeft + 10, top + kPanel / 2 + 4,
                  m.not_run ? "not run: " + *m.not_run : "could not run: " + *m.error,
                  "fill=\"#777\"");
      svg += "</g>\n";
      continue;
    }
    std::uint64_t peak = 1;
    for (const auto& s : m.timeline) peak = std::max(peak, s.bytes);
    const double peak_gib = static_cast<double>(peak) / kGiB;
    svg += text(kLeft - 4, top + 10, num(peak_gib) + " GiB",
                "text-anchor=\"end\" font-size=\"10\" fill=\"#777\"");
    svg += text(kLeft - 4, base, "0", "text-anchor=\"end\" font-size=\"10\" fill=\"#777\"");
    auto y_of = [&](std::uint64_t b) {
      return base - static_cast<double>(b) / static_cast<double>(peak) * (kPanel - 8);
    };
    // A step line: each sample holds until the next.
    std::string d;
    for (std::size_t k = 0; k < m.timeline.size(); ++k) {
      const auto& s = m.timeline[k];
      const double x = x_of(k == 0 ? 0.0 : s.t);
      const double y = y_of(s.bytes);
      d += k == 0 ? "M" + num(x) + " " + num(y) : " H" + num(x) + " V" + num(y);
    }
    if (!m.timeline.empty()) d += " H" + num(x_of(m.timeline.back().t));
    svg += fmt::format(
        "<path class=\"series\" data-scenario=\"{}\" d=\"{}\" fill=\"none\" stroke=\"{}\" "
        "stroke-width=\"2\"/>\n",
        esc(m.instance), d, colour);
    if (m.grace_s <= t_max) {
      const double gx = x_of(m.grace_s);
      svg += "<line x1=\"" + num(gx) + "\" y1=\"" + num(top) + "\" x2=\"" + num(gx) + "\" y2=\"" +
             num(base) + "\" stroke=\"#888\" stroke-dasharray=\"4 3\"/>\n";
    }
    if (m.deletion.term_pid1_s > 0.05) {
      const double tx = x_of(m.deletion.term_pid1_s);
      svg += "<line x1=\"" + num(tx) + "\" y1=\"" + num(top) + "\" x2=\"" + num(tx) + "\" y2=\"" +
             num(base) + "\" stroke=\"#555\" stroke-dasharray=\"1 3\"/>\n";
    }
    svg += "</g>\n";
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace gpureap::lab
