// The exporter's pure parts: the series table against Prometheus's naming
// conventions, the view of a scan, the rendered families, and the web config.
#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <regex>
#include <set>
#include <string>

#include "exporter/metrics.hpp"
#include "exporter/series.hpp"
#include "exporter/view.hpp"
#include "exporter/web_config.hpp"
#include "findings/finding.hpp"
#include "snapshot_builder.hpp"

namespace {

namespace ex = gpureap::exporter;
using gpureap::test::kGiB;
using gpureap::test::kMiB;

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

TEST(Series, EveryNameFollowsPrometheusConventions) {
  const std::regex snake("[a-z][a-z0-9_]*");
  std::set<std::string_view> names;
  for (std::size_t i = 0; i < std::size(ex::kSeries); ++i) {
    const auto& s = ex::kSeries[i];
    EXPECT_EQ(static_cast<std::size_t>(s.id), i) << s.name << ": the table is indexed by id";
    EXPECT_TRUE(names.insert(s.name).second) << s.name << " declared twice";
    EXPECT_TRUE(std::regex_match(std::string(s.name), snake)) << s.name;
    EXPECT_EQ(s.name.rfind("gpureap_", 0), 0U) << s.name;
    const std::string_view base = s.type == ex::SeriesType::counter && ends_with(s.name, "_total")
                                      ? s.name.substr(0, s.name.size() - 6)
                                      : s.name;
    EXPECT_TRUE(ends_with(base, ex::unit_suffix(s.unit))) << s.name << " lacks its unit suffix";
    EXPECT_EQ(s.type == ex::SeriesType::counter, ends_with(s.name, "_total")) << s.name;
    for (const auto& l : s.labels) EXPECT_TRUE(std::regex_match(std::string(l), snake)) << s.name << " " << l;
    const std::string help = ex::help_text(s);
    EXPECT_GT(help.size(), 10U);
    EXPECT_EQ(help.back(), '.');
  }
}

// A node: a live worker in a pod, a gone creator whose context its forked child
// (same pod) holds, an unlisted descriptor holder, and a zombie.
gpureap::node::NodeSnapshot node() {
  gpureap::test::SnapshotBuilder b;
  b.device(0, 5 * kGiB);
  auto worker = gpureap::test::make_process(100, 1, "python3");
  worker.gpu_fds = {{"nvidia0", 3}, {"nvidiactl", 1}};
  worker.cmdline = {"python3", "train.py", "--token=s3cr3t"};
  b.add(std::move(worker), gpureap::test::pod_container("c1", "trainer-0", "u1", "ml"));
  b.list(0, 100, 2 * kGiB);
  auto child = gpureap::test::make_process(301, 1, "python3");
  child.pgrp = child.session = 300;
  child.gpu_fds = {{"nvidia0", 3}, {"nvidiactl", 1}, {"nvidia-uvm", 1}};
  auto& held = b.add(std::move(child), gpureap::test::pod_container("c2", "server-0", "u2", "serving"));
  held.gpu_mappings = std::vector<std::string>{"nvidia0", "nvidia-uvm"};  // maps the context, as CUDA does
  b.list(0, 300, 3 * kGiB);  // pid 300 is gone
  auto hidden = gpureap::test::make_process(400, 1, "agent");
  hidden.gpu_fds = {{"nvidia0", 1}};
  b.add(std::move(hidden));
  auto zombie = gpureap::test::make_process(500, 100, "worker", 'Z');
  b.add(std::move(zombie), gpureap::test::pod_container("c1", "trainer-0", "u1", "ml"));
  return b.build();
}

const ex::ProcessView* process(const ex::View& v, const std::string& pid) {
  for (const auto& p : v.processes) {
    if (p.who.pid == pid) return &p;
  }
  return nullptr;
}

// docs/exporter.md's series table names every series of the table in code,
// and no other: the documentation cannot drift from what is published.
TEST(Series, TheDocsTableListsExactlyTheDeclaredSeries) {
  std::ifstream in(std::string(GPUREAP_SOURCE_DIR) + "/docs/exporter.md");
  ASSERT_TRUE(in) << "docs/exporter.md";
  const std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::set<std::string> documented;
  const std::regex row(R"(\n\| `(gpureap_[a-z_]+)` \|)");
  for (auto it = std::sregex_iterator(doc.begin(), doc.end(), row); it != std::sregex_iterator(); ++it) {
    documented.insert((*it)[1].str());
  }
  std::set<std::string> declared;
  for (const auto& s : gpureap::exporter::kSeries) declared.insert(std::string(s.name));
  EXPECT_EQ(documented, declared);
}

TEST(View, AttributesEachListingToItsPodAndAGoneCreatorToItsHolders) {
  const auto snap = node();
  const auto found = gpureap::findings::detect_all(snap);
  const ex::View v = ex::build_view(snap, found, {});
  const auto* worker = process(v, "100");
  ASSERT_NE(worker, nullptr);
  EXPECT_EQ(worker->who.pod, "trainer-0");
  EXPECT_EQ(worker->who.pod_namespace, "ml");
  EXPECT_EQ(worker->who.container, "worker");
  EXPECT_TRUE(worker->listed);
  EXPECT_EQ(worker->memory, 2 * kGiB);
  const auto* gone = process(v, "300");
  ASSERT_NE(gone, nullptr);
  EXPECT_EQ(gone->who.pod, "server-0") << "the holder's pod";
  EXPECT_EQ(gone->who.comm, "");
  const auto* hidden = process(v, "400");
  ASSERT_NE(hidden, nullptr);
  EXPECT_FALSE(hidden->listed);
  EXPECT_EQ(hidden->memory, 0U);
  EXPECT_EQ(v.finding_counts.at({gpureap::findings::Kind::zombie, gpureap::findings::Severity::warning}), 1U);
  const bool zombie_in_pod = std::any_of(v.findings.begin(), v.findings.end(), [](const ex::FindingView& f) {
    return f.kind == gpureap::findings::Kind::zombie && f.who.pod == "trainer-0" && f.who.pid == "500";
  });
  EXPECT_TRUE(zombie_in_pod);
  EXPECT_TRUE(v.snapshot_json.empty());
}

TEST(View, PerProcessSeriesAreBoundedLargestFirst) {
  const auto snap = node();
  ex::ViewOptions o;
  o.max_process_series = 2;
  const ex::View v = ex::build_view(snap, gpureap::findings::detect_all(snap), o);
  ASSERT_EQ(v.processes.size(), 2U);
  EXPECT_EQ(v.processes[0].who.pid, "300");
  EXPECT_EQ(v.processes[1].who.pid, "100");
  EXPECT_EQ(v.processes_dropped, 2U);  // the gone creator's inheritor (unlisted) and the agent
}

TEST(View, RedactionKeepsOnlyTheProgram) {
  auto snap = node();
  ex::redact_arguments(snap);
  EXPECT_EQ(snap.find(100)->process.cmdline, (std::vector<std::string>{"python3", "<redacted>"}));
}

TEST(Metrics, RendersEverySeriesOnceWithCountsForEveryKind) {
  auto snap = node();
  snap.scan_stats.fds_denied = 4;  // processes whose descriptors the scan could not read
  const ex::View v = ex::build_view(snap, gpureap::findings::detect_all(snap), {});
  ex::ScanHealth h;
  h.scans = 3;
  h.errors = 1;
  h.version = "0.1.0";
  const auto families = ex::render_metrics(&v, h);
  std::set<std::string> names;
  for (const auto& f : families) EXPECT_TRUE(names.insert(f.name).second) << f.name;
  const auto find = [&](const std::string& name) {
    return std::find_if(families.begin(), families.end(), [&](const auto& f) { return f.name == name; });
  };
  ASSERT_NE(find("gpureap_findings"), families.end());
  EXPECT_EQ(find("gpureap_findings")->metric.size(),
            std::size(gpureap::findings::kAllKinds) * std::size(gpureap::findings::kAllSeverities));
  ASSERT_NE(find("gpureap_scan_errors_total"), families.end());
  EXPECT_EQ(find("gpureap_scan_errors_total")->metric[0].counter.value, 1);
  ASSERT_NE(find("gpureap_scan_unreadable_descriptor_tables"), families.end());
  EXPECT_EQ(find("gpureap_scan_unreadable_descriptor_tables")->metric[0].gauge.value, 4);
  const std::string text = prometheus::TextSerializer().Serialize(families);
  EXPECT_NE(text.find("gpureap_gpu_process_memory_bytes{gpu=\"0\",uuid=\"GPU-0\",pid=\"100\",comm=\"python3\","
                      "pod=\"trainer-0\",namespace=\"ml\",container=\"worker\",listed=\"true\"} 2147483648"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("s3cr3t"), std::string::npos);
  EXPECT_EQ(text.find("train.py"), std::string::npos);
  // Before the first scan: build info, counters and zero counts only.
  const auto empty = ex::render_metrics(nullptr, h);
  EXPECT_EQ(empty.size(), 5U);
}

TEST(WebConfig, ParsesTheToolkitFormatWithPathsRelativeToTheFile) {
  auto c = ex::parse_web_config(
      "tls_server_config:\n  cert_file: tls.crt\n  key_file: /abs/tls.key\n  min_version: TLS13\n"
      "basic_auth_users:\n  prometheus: $2y$10$abcdefghijklmnopqrstuu\n",
      "web.yml", "/etc/gpureap");
  ASSERT_TRUE(c.ok()) << c.error().message;
  ASSERT_TRUE(c->tls.has_value());
  EXPECT_EQ(c->tls->cert_file, "/etc/gpureap/tls.crt");
  EXPECT_EQ(c->tls->key_file, "/abs/tls.key");
  EXPECT_EQ(c->basic_auth_users.at("prometheus"), "$2y$10$abcdefghijklmnopqrstuu");
  auto o = ex::civetweb_options("127.0.0.1:9464", *c, "/proc/self/fd/9", 4);
  ASSERT_TRUE(o.ok());
  auto at = [&](const std::string& key) {
    auto it = std::find(o->begin(), o->end(), key);
    return it == o->end() || it + 1 == o->end() ? std::string("(none)") : *(it + 1);
  };
  EXPECT_EQ(at("listening_ports"), "127.0.0.1:9464s");
  EXPECT_EQ(at("ssl_certificate"), "/proc/self/fd/9");
  EXPECT_EQ(at("ssl_protocol_version"), "5");
  EXPECT_EQ(at("ssl_verify_peer"), "(none)");
  auto plain = ex::civetweb_options(":9464", ex::WebConfig{}, "", 2);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ((*plain)[1], "9464");
}

TEST(WebConfig, RejectsWhatItCannotHonourNamingTheKey) {
  auto bad = [](const std::string& text) {
    auto c = ex::parse_web_config(text, "web.yml", "/etc");
    return c.ok() ? std::string("(accepted)") : c.error().message;
  };
  EXPECT_EQ(bad("http_server_config:\n  http2: false\n"),
            "web.yml: http_server_config: not supported by gpureap (known: tls_server_config, basic_auth_users)");
  EXPECT_NE(bad("tls_server_config:\n  cert_file: a\n  key_file: b\n  cipher_suites: [X]\n").find("cipher_suites"),
            std::string::npos);
  EXPECT_NE(bad("tls_server_config:\n  cert_file: a\n").find("cert_file and key_file"), std::string::npos);
  EXPECT_NE(bad("tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: RequireAndVerifyClientCert\n")
                .find("client_ca_file"),
            std::string::npos);
  EXPECT_NE(bad("basic_auth_users:\n  u: plaintext\n").find("bcrypt"), std::string::npos);
  EXPECT_NE(bad("tls_server_config: [\n").find("not valid YAML"), std::string::npos);
  EXPECT_NE(ex::civetweb_options("localhost:http", ex::WebConfig{}, "", 2).error().message.find("[HOST]:PORT"),
            std::string::npos);
}

TEST(WebConfig, BasicAuthChecksBcryptHashes) {
  ex::WebConfig c;
  c.basic_auth_users["prometheus"] = "$2b$05$ItQkP.Nvs1ebSaNOiIl7ruMa9dtJ3JVZtyfvWddGDOUpDehybsobe";
  // "prometheus:hunter2-for-tests"
  EXPECT_TRUE(ex::authorized(c, "Basic cHJvbWV0aGV1czpodW50ZXIyLWZvci10ZXN0cw=="));
  EXPECT_FALSE(ex::authorized(c, "Basic cHJvbWV0aGV1czp3cm9uZw=="));  // prometheus:wrong
  EXPECT_FALSE(ex::authorized(c, "Basic b3RoZXI6aHVudGVyMi1mb3ItdGVzdHM="));  // other:hunter2-for-tests
  EXPECT_FALSE(ex::authorized(c, "Bearer x"));
  EXPECT_FALSE(ex::authorized(c, "Basic !!!!"));
  EXPECT_FALSE(ex::authorized(c, ""));
}

TEST(Base64, DecodesAndRejects) {
  EXPECT_EQ(ex::decode_base64("YWJj"), "abc");
  EXPECT_EQ(ex::decode_base64("YWI="), "ab");
  EXPECT_EQ(ex::decode_base64("YQ=="), "a");
  EXPECT_EQ(ex::decode_base64(""), "");
  EXPECT_FALSE(ex::decode_base64("YQ=").has_value());
  EXPECT_FALSE(ex::decode_base64("Y=Q=").has_value());
  EXPECT_FALSE(ex::decode_base64("YW*j").has_value());
}

}  // namespace
