// gpureap exporter and gpureap check on this node: real workers on the
// simulated GPU in kubelet-named cgroups with CRI annotations, the exporter on
// loopback, a real Prometheus server scraping it (its HTTP API answers what it
// stored), curl as the HTTP client, and the fake libnvidia-ml loaded as
// libnvidia-ml.so.1 for a driver that hangs. Waiting is on events (ready
// lines, process exits); where only a remote state can say (what Prometheus
// has stored), bounded polling.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "sys/pidfd.hpp"
#include "test_support.hpp"

namespace {

using gpureap::testing::Cgroup;
using gpureap::testing::Child;
using gpureap::testing::TempDir;
using nlohmann::json;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

const std::string kGpureap = GPUREAP_BIN;
const std::string kWorker = GPUREAP_WORKER_BIN;
const std::string kFakeDriverDir = FAKE_DRIVER_DIR;
const std::string kSource = GPUREAP_SOURCE_DIR;
#ifdef GPUREAP_SANITIZED
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
constexpr std::uint64_t kMiB = 1024ULL * 1024ULL;
// "prometheus:hunter2-for-tests" against this bcrypt hash (cost 5: fast tests).
const std::string kHash = "$2b$05$ItQkP.Nvs1ebSaNOiIl7ruMa9dtJ3JVZtyfvWddGDOUpDehybsobe";

// Kills by pidfd, and reaps, processes the test made indirectly (a worker's
// forked child, a zombie-maker's child): the test is their subreaper.
class Strays {
 public:
  void add(pid_t pid) {
    auto fd = gpureap::sys::pidfd_open(pid);
    if (fd) fds_.push_back(std::move(fd.value()));
  }
  void kill_all() {
    for (auto& fd : fds_) {
      if (gpureap::sys::pidfd_send_signal(fd.get(), SIGKILL)) (void)gpureap::sys::pidfd_wait_exit(fd.get(), 10000);
    }
    fds_.clear();
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {
    }
  }
  ~Strays() { kill_all(); }

 private:
  std::vector<gpureap::sys::UniqueFd> fds_;
};

int free_port() {
  const int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ::close(s);
    return -1;
  }
  ::close(s);
  return ntohs(a.sin_port);
}

struct Response {
  int status = 0;  // 0: no HTTP answer (connection refused, TLS failure, timeout)
  std::string body;
};

// One request through curl: a real HTTP client, TLS included.
Response http_get(const std::string& url, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> argv{"/usr/bin/curl", "-sS", "--max-time", "20", "-w", "\n%{http_code}"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.push_back(url);
  auto r = gpureap::testing::run(argv);
  Response out;
  const auto nl = r.out.rfind('\n');
  if (nl == std::string::npos) return out;
  out.status = std::atoi(r.out.c_str() + nl + 1);
  out.body = r.out.substr(0, nl);
  return out;
}

// Polls `probe` until it holds, at most `limit` (remote state: no event to wait on).
bool eventually(const std::function<bool()>& probe, std::chrono::seconds limit = 60s) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (probe()) return true;
    std::this_thread::sleep_for(200ms);
  }
  return probe();
}

// A value of a series in an exposition text ("name{...} value"), matching labels by substring.
std::optional<double> sample(const std::string& text, const std::string& name, const std::string& labels = "") {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(name, 0) != 0 || line.size() <= name.size()) continue;
    if (line[name.size()] != '{' && line[name.size()] != ' ') continue;
    if (!labels.empty() && line.find(labels) == std::string::npos) continue;
    return std::stod(line.substr(line.rfind(' ') + 1));
  }
  return std::nullopt;
}

// The exporter as a child: started, its ready line read; SIGTERM at the end.
class Exporter {
 public:
  Exporter(const std::vector<std::string>& args, const std::vector<std::string>& env) : port_(free_port()) {
    std::vector<std::string> argv{kGpureap, "exporter", "--listen", "127.0.0.1:" + std::to_string(port_)};
    argv.insert(argv.end(), args.begin(), args.end());
    child_ = Child::spawn(argv, env);
    ready_ = child_.read_line().value_or("");
  }
  [[nodiscard]] bool ready() const { return ready_.find("listening on port") != std::string::npos; }
  [[nodiscard]] int port() const { return port_; }
  [[nodiscard]] std::string url(const std::string& path, bool tls = false) const {
    return std::string(tls ? "https" : "http") + "://127.0.0.1:" + std::to_string(port_) + path;
  }
  [[nodiscard]] pid_t pid() const { return child_.pid(); }
  // SIGTERM; the exit status (a process that does not stop fails the wait bound).
  int stop() {
    auto fd = gpureap::sys::pidfd_open(child_.pid());
    if (!fd) return -1;
    (void)gpureap::sys::pidfd_send_signal(fd->get(), SIGTERM);
    auto exited = gpureap::sys::pidfd_wait_exit(fd->get(), 10000);
    EXPECT_TRUE(exited.ok() && *exited) << "the exporter did not stop after SIGTERM";
    const int status = child_.wait_exit();
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  int port_;
  Child child_;
  std::string ready_;
};

// Debian's Prometheus on loopback, scraping `target` every second.
class Prometheus {
 public:
  Prometheus(const TempDir& dir, const std::string& target) : port_(free_port()) {
    gpureap::testing::write_file(dir / "prometheus.yml",
                                 "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                                 "scrape_configs:\n  - job_name: gpureap\n    static_configs:\n"
                                 "      - targets: ['" + target + "']\n");
    child_ = Child::spawn({"/usr/bin/prometheus", "--config.file=" + (dir / "prometheus.yml"),
                           "--storage.tsdb.path=" + (dir / "tsdb"), "--web.listen-address=127.0.0.1:" + std::to_string(port_),
                           "--log.level=warn", "--query.lookback-delta=3s"});
  }
  bool wait_ready() {
    return eventually([this] { return http_get(url("/-/ready")).status == 200; });
  }
  [[nodiscard]] std::string url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  // An instant query's result vector; null when the query failed.
  json query(const std::string& promql) const {
    auto r = http_get(url("/api/v1/query"), {"-G", "--data-urlencode", "query=" + promql});
    auto doc = json::parse(r.body, nullptr, false);
    if (doc.is_discarded() || doc["status"] != "success") return json();
    return doc["data"]["result"];
  }
  // Whether the server accepts the expression (status "success").
  [[nodiscard]] std::string check(const std::string& promql) const {
    auto r = http_get(url("/api/v1/query"), {"-G", "--data-urlencode", "query=" + promql});
    auto doc = json::parse(r.body, nullptr, false);
    if (!doc.is_discarded() && doc["status"] == "success") return "";
    return r.body;
  }

 private:
  int port_;
  Child child_;
};

std::string annotations_spec(const std::string& pod, const std::string& ns, const std::string& uid,
                             const std::string& container) {
  return json({{"ociVersion", "1.0.2"},
               {"annotations",
                {{"io.kubernetes.cri.container-type", "container"},
                 {"io.kubernetes.cri.sandbox-name", pod},
                 {"io.kubernetes.cri.sandbox-namespace", ns},
                 {"io.kubernetes.cri.sandbox-uid", uid},
                 {"io.kubernetes.cri.container-name", container}}}})
      .dump(2);
}

class ExporterIntegration : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::geteuid(), 0U) << "integration tests need root (cgroups)";
    ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
    sim_dir_ = tmp_ / "sim";
    host_ = tmp_ / "host";
    fs::create_directories(host_);
    fs::create_directory_symlink("/proc", host_ + "/proc");
    env_ = {"GPUREAP_SIM_DIR=" + sim_dir_};
    auto init = gpureap::testing::run({kWorker, "init-sim", "--devices", "1"}, env_);
    ASSERT_EQ(init.exit_code, 0) << init.err;
    v1_ = gpureap::testing::cgroup_v1_memory_mount();
    v2_ = gpureap::testing::cgroup_v2_mount();
    ASSERT_TRUE(v1_ || v2_) << "no cgroup hierarchy mounted";
  }

  // A pod's container: the CRI annotations under the host root and a
  // kubelet-named cgroup (cgroupfs driver); `in_pod` runs argv inside it from
  // its first instruction, so forked children start there too.
  struct Pod {
    std::unique_ptr<Cgroup> cgroup;
    std::string procs;  // the cgroup.procs file
  };
  Pod make_pod(const std::string& name, const std::string& ns) {
    const std::string uid = gpureap::testing::random_uuid();
    const std::string id = gpureap::testing::random_hex(64);
    gpureap::testing::write_file(host_ + "/run/containerd/io.containerd.runtime.v2.task/k8s.io/" + id + "/config.json",
                                 annotations_spec(name, ns, uid, "worker"));
    const std::string mount = v1_ ? *v1_ : *v2_;
    const std::string path = "/kubepods/burstable/pod" + uid + "/" + id;
    return Pod{std::make_unique<Cgroup>(mount, path), mount + path + "/cgroup.procs"};
  }
  Child in_pod(const Pod& pod, const std::vector<std::string>& argv, std::vector<std::string> env = {}) {
    std::vector<std::string> sh{"/bin/sh", "-c", "echo $$ > \"$0\" && exec \"$@\"", pod.procs};
    sh.insert(sh.end(), argv.begin(), argv.end());
    for (const auto& e : env_) env.push_back(e);
    return Child::spawn(sh, env);
  }

  TempDir tmp_;
  std::string sim_dir_;
  std::string host_;
  std::vector<std::string> env_;
  std::optional<std::string> v1_, v2_;
};

json ready_line(Child& c) { return json::parse(c.read_line().value_or(""), nullptr, false); }

std::size_t count(const json& result) { return result.is_array() ? result.size() : 0; }

TEST_F(ExporterIntegration, PrometheusStoresFindingsWithPodLabelsUntilTheyEnd) {
  Pod ctx_pod = make_pod("ctx-pod", "ml");
  Pod zombie_pod = make_pod("zombie-pod", "ml");
  Pod idle_pod = make_pod("idle-pod", "ml");
  Pod busy_pod = make_pod("busy-pod", "serving");
  Strays strays;  // after the pods: its processes die before the cgroups go

  // An orphaned context: the creator forks a child that inherits its context, then dies.
  Child creator = in_pod(ctx_pod, {kWorker, "fork-after-init", "--gpu", "sim", "--bytes", std::to_string(768 * kMiB)});
  json forked = ready_line(creator);
  ASSERT_TRUE(forked.contains("child")) << forked.dump();
  const pid_t inheritor = forked["child"].get<pid_t>();
  strays.add(inheritor);
  const pid_t dead_creator = creator.pid();
  creator.kill_and_reap();
  // A zombie its parent never reaps.
  Child zombie_maker = in_pod(zombie_pod, {kWorker, "zombie-maker", "--count", "1"});
  json zombies = ready_line(zombie_maker);
  ASSERT_TRUE(zombies.contains("zombies")) << zombies.dump();
  const pid_t zombie = zombies["zombies"][0].get<pid_t>();
  // An idle holder (0 % SM) and a busy one (90 %).
  Child idle = in_pod(idle_pod, {kWorker, "hold", "--gpu", "sim", "--bytes", std::to_string(1024 * kMiB)});
  ASSERT_TRUE(ready_line(idle).contains("pid"));
  Child busy = in_pod(busy_pod, {kWorker, "hold", "--gpu", "sim", "--bytes", std::to_string(512 * kMiB), "--sm-util", "90"});
  ASSERT_TRUE(ready_line(busy).contains("pid"));

  Exporter exporter({"--host-root", host_, "--gpu", "sim", "--interval", "1", "--sample-period", "0.5",
                     "--idle-minutes", "0.05", "--idle-min-mib", "256"},
                    env_);
  ASSERT_TRUE(exporter.ready());
  Prometheus prometheus(tmp_, "127.0.0.1:" + std::to_string(exporter.port()));
  ASSERT_TRUE(prometheus.wait_ready());

  const std::string orphaned = "gpureap_finding_info{kind=\"orphaned_context\",pod=\"ctx-pod\",namespace=\"ml\",pid=\"" +
                               std::to_string(dead_creator) + "\"}";
  const std::string zombie_q = "gpureap_finding_info{kind=\"zombie\",pod=\"zombie-pod\",namespace=\"ml\",pid=\"" +
                               std::to_string(zombie) + "\"}";
  const std::string idle_q = "gpureap_finding_info{kind=\"idle_holder\",pod=\"idle-pod\",namespace=\"ml\",pid=\"" +
                             std::to_string(idle.pid()) + "\"}";
  EXPECT_TRUE(eventually([&] { return count(prometheus.query(orphaned)) == 1; })) << orphaned;
  EXPECT_TRUE(eventually([&] { return count(prometheus.query(zombie_q)) == 1; })) << zombie_q;
  EXPECT_TRUE(eventually([&] { return count(prometheus.query(idle_q)) == 1; })) << idle_q;
  // The dead creator's memory is attributed to the pod that holds its context.
  json held = prometheus.query("gpureap_gpu_process_memory_bytes{pid=\"" + std::to_string(dead_creator) + "\"}");
  ASSERT_EQ(count(held), 1U) << held.dump();
  EXPECT_EQ(held[0]["metric"]["pod"], "ctx-pod");
  EXPECT_EQ(held[0]["value"][1], std::to_string(768 * kMiB));
  json idle_mem = prometheus.query("gpureap_gpu_process_memory_bytes{pod=\"idle-pod\",listed=\"true\"}");
  ASSERT_EQ(count(idle_mem), 1U) << idle_mem.dump();
  EXPECT_EQ(idle_mem[0]["metric"]["container"], "worker");
  EXPECT_EQ(idle_mem[0]["value"][1], std::to_string(1024 * kMiB));
  EXPECT_TRUE(eventually([&] {
    json u = prometheus.query("gpureap_gpu_process_sm_utilization_ratio{pod=\"busy-pod\",namespace=\"serving\"}");
    return count(u) == 1 && u[0]["value"][1] == "0.9";
  }));
  EXPECT_EQ(count(prometheus.query("gpureap_finding_info{kind=\"idle_holder\",pod=\"busy-pod\"}")), 0U);

  // promtool's lint on a scrape.
  const Response scrape = http_get(exporter.url("/metrics"));
  ASSERT_EQ(scrape.status, 200);
  gpureap::testing::write_file(tmp_ / "scrape.txt", scrape.body);
  auto lint = gpureap::testing::run({"/bin/sh", "-c", "promtool check metrics < \"$0\"", tmp_ / "scrape.txt"});
  EXPECT_EQ(lint.exit_code, 0) << lint.out << lint.err;

  // Every PromQL expression of the dashboard is accepted by this server.
  json dashboard = json::parse(std::ifstream(kSource + "/deploy/monitoring/grafana/gpureap-dashboard.json"));
  unsigned expressions = 0;
  for (const auto& panel : dashboard["panels"]) {
    for (const auto& target : panel["targets"]) {
      std::string expr = target["expr"];
      expr = std::regex_replace(expr, std::regex(R"(\$__rate_interval)"), "1m");
      expr = std::regex_replace(expr, std::regex(R"(\$instance)"), ".*");
      EXPECT_EQ(prometheus.check(expr), "") << panel["title"] << ": " << expr;
      ++expressions;
    }
  }
  EXPECT_GE(expressions, 10U);

  // Ended: each series goes (Prometheus marks a series stale when a scrape drops it).
  strays.kill_all();
  zombie_maker.kill_and_reap();
  strays.kill_all();  // the zombie, reparented to this subreaper
  idle.kill_and_reap();
  EXPECT_TRUE(eventually([&] { return count(prometheus.query(orphaned)) == 0; })) << orphaned;
  EXPECT_TRUE(eventually([&] { return count(prometheus.query(zombie_q)) == 0; })) << zombie_q;
  EXPECT_TRUE(eventually([&] { return count(prometheus.query(idle_q)) == 0; })) << idle_q;
  busy.kill_and_reap();
  EXPECT_EQ(exporter.stop(), 0);
}

TEST_F(ExporterIntegration, NoArgumentOrEnvironmentValueLeavesTheNodeByDefault) {
  const std::string secret = "s3cr3t-" + gpureap::testing::random_hex(16);
  const std::string run_id_secret = "run-" + gpureap::testing::random_hex(16);
  Pod pod = make_pod("secret-pod", "ml");
  // Rank 1 of a two-rank job whose rank 0 is missing: a finding whose message
  // quotes the run id (from the environment) exists on this node.
  Child worker = in_pod(pod, {kWorker, "hold", "--gpu", "sim", "--bytes", std::to_string(512 * kMiB), "--tag",
                              "--password=" + secret},
                        {"GPUREAP_TEST_SECRET=" + secret, "RANK=1", "LOCAL_RANK=1", "WORLD_SIZE=2",
                         "LOCAL_WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=29999",
                         "TORCHELASTIC_RUN_ID=" + run_id_secret});
  ASSERT_TRUE(ready_line(worker).contains("pid"));
  auto leaks = [&](const Response& r) {
    return r.body.find(secret) != std::string::npos || r.body.find(run_id_secret) != std::string::npos;
  };
  {
    Exporter exporter({"--host-root", host_, "--gpu", "sim", "--interval", "0.5"}, env_);
    ASSERT_TRUE(exporter.ready());
    ASSERT_TRUE(eventually([&] {
      return sample(http_get(exporter.url("/metrics")).body, "gpureap_finding_info", "kind=\"nccl_missing_rank\"")
          .has_value();
    }));
    for (const std::string path : {"/metrics", "/healthz", "/snapshot", "/", "/metrics/../snapshot"}) {
      const Response r = http_get(exporter.url(path));
      EXPECT_FALSE(leaks(r)) << path << ":\n" << r.body;
    }
    EXPECT_EQ(http_get(exporter.url("/snapshot")).status, 404) << "/snapshot is off by default";
    EXPECT_EQ(exporter.stop(), 0);
  }
  {
    Exporter exporter({"--host-root", host_, "--gpu", "sim", "--interval", "0.5", "--enable-snapshot"}, env_);
    ASSERT_TRUE(exporter.ready());
    ASSERT_TRUE(eventually([&] { return http_get(exporter.url("/snapshot")).status == 200; }));
    const Response r = http_get(exporter.url("/snapshot"));
    EXPECT_EQ(r.body.find(secret), std::string::npos) << "arguments are redacted";
    EXPECT_NE(r.body.find("<redacted>"), std::string::npos);
    EXPECT_EQ(exporter.stop(), 0);
  }
  {
    // The test can fail: with arguments allowed, the secret is there to be found.
    Exporter exporter({"--host-root", host_, "--gpu", "sim", "--interval", "0.5", "--enable-snapshot",
                       "--snapshot-arguments"},
                      env_);
    ASSERT_TRUE(exporter.ready());
    ASSERT_TRUE(eventually([&] { return http_get(exporter.url("/snapshot")).status == 200; }));
    EXPECT_NE(http_get(exporter.url("/snapshot")).body.find(secret), std::string::npos);
    EXPECT_EQ(exporter.stop(), 0);
  }
  worker.kill_and_reap();
}

TEST_F(ExporterIntegration, TlsAndBasicAuthRejectClientsWithoutCredentials) {
  auto cert = gpureap::testing::run({"/usr/bin/openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                                     "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", tmp_ / "tls.key", "-out",
                                     tmp_ / "tls.crt", "-subj", "/CN=localhost", "-days", "1"});
  ASSERT_EQ(cert.exit_code, 0) << cert.err;
  gpureap::testing::write_file(tmp_ / "web.yml", "tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n"
                                                 "basic_auth_users:\n  prometheus: '" + kHash + "'\n");
  Exporter exporter({"--host-root", host_, "--gpu", "sim", "--interval", "0.5", "--web-config", tmp_ / "web.yml"},
                    env_);
  ASSERT_TRUE(exporter.ready());
  const std::vector<std::string> tls{"--cacert", tmp_ / "tls.crt", "--resolve", "localhost:" + std::to_string(exporter.port()) + ":127.0.0.1"};
  const std::string base = "https://localhost:" + std::to_string(exporter.port());
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), tls.begin(), tls.end());
    return extra;
  };
  EXPECT_EQ(http_get(base + "/metrics", with({})).status, 401);
  EXPECT_EQ(http_get(base + "/healthz", with({})).status, 401);
  EXPECT_EQ(http_get(base + "/metrics", with({"-u", "prometheus:wrong"})).status, 401);
  EXPECT_EQ(http_get(base + "/metrics", with({"-u", "nobody:hunter2-for-tests"})).status, 401);
  const Response ok = http_get(base + "/metrics", with({"-u", "prometheus:hunter2-for-tests"}));
  EXPECT_EQ(ok.status, 200);
  EXPECT_TRUE(sample(ok.body, "gpureap_build_info").has_value()) << ok.body;
  // Plain HTTP gets no answer from a TLS port.
  EXPECT_NE(http_get(exporter.url("/metrics"), {"-u", "prometheus:hunter2-for-tests"}).status, 200);
  EXPECT_EQ(exporter.stop(), 0);
}

// `gpureap exporter` is gpureap-exporter run in gpureap's place (exec): the
// process a service manager or a kubelet started is the exporter, its SIGTERM
// stops it, and the kernel names it gpureap-exporte (trace's monitor list).
TEST_F(ExporterIntegration, GpureapExporterBecomesTheExporterProgramInTheSameProcess) {
  Exporter exporter({"--host-root", host_, "--gpu", "sim", "--interval", "0.5"}, env_);
  ASSERT_TRUE(exporter.ready());
  const fs::path exe = fs::read_symlink("/proc/" + std::to_string(exporter.pid()) + "/exe");
  EXPECT_EQ(exe, fs::path(kGpureap).parent_path() / "gpureap-exporter");
  EXPECT_EQ(gpureap::testing::read_file("/proc/" + std::to_string(exporter.pid()) + "/comm"),
            "gpureap-exporte\n");
  EXPECT_EQ(http_get(exporter.url("/healthz")).status, 200);
  EXPECT_EQ(exporter.stop(), 0);
}

TEST(ExporterProgram, HelpAndUsageErrorsAreTheExportersOwn) {
  const auto help = gpureap::testing::run({kGpureap, "exporter", "--help"});
  EXPECT_EQ(help.exit_code, 0) << help.err;
  EXPECT_NE(help.out.find("gpureap exporter"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("--listen"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("--web-config"), std::string::npos) << help.out;
  const auto bad =
      gpureap::testing::run({kGpureap, "exporter", "--interval", "5", "--no-such-flag"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--no-such-flag"), std::string::npos) << bad.err;
  // gpureap's own help lists the subcommand.
  const auto top = gpureap::testing::run({kGpureap, "--help"});
  EXPECT_EQ(top.exit_code, 0);
  EXPECT_NE(top.out.find("exporter"), std::string::npos) << top.out;
}

TEST(ExporterProgram, AGpureapInstalledWithoutItSaysWhereItLookedAndExits2) {
  const TempDir dir;
  fs::copy_file(kGpureap, dir / "gpureap");
  const auto r = gpureap::testing::run({dir / "gpureap", "exporter", "--listen", "127.0.0.1:1"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(dir / "gpureap-exporter"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("No such file"), std::string::npos) << r.err;
}

// gpureap maps no library of the exporter's, nor the shared C++ runtime: the
// point of the split (src/cli/CMakeLists.txt). Sanitizer builds keep theirs.
TEST(ExporterProgram, GpureapLoadsOnlyTheCLibraryWhileTheExporterHasItsOwn) {
  const auto needed = [](const std::string& program) {
    const auto r = gpureap::testing::run({"/usr/bin/readelf", "-d", program});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::vector<std::string> libs;
    const std::regex entry(R"(\(NEEDED\)\s+Shared library: \[([^\]]+)\])");
    for (std::sregex_iterator it(r.out.begin(), r.out.end(), entry), end; it != end; ++it)
      libs.push_back((*it)[1]);
    return libs;
  };
  const auto gpureap_libs = needed(kGpureap);
  ASSERT_FALSE(gpureap_libs.empty());
  for (const auto& lib : gpureap_libs) {
    const bool c_runtime = lib.rfind("libc.so", 0) == 0 || lib.rfind("libm.so", 0) == 0 ||
                           lib.rfind("ld-linux", 0) == 0;
    const bool sanitizer_runtime = lib.rfind("libasan", 0) == 0 || lib.rfind("libubsan", 0) == 0 ||
                                   lib.rfind("libstdc++", 0) == 0 || lib.rfind("libgcc_s", 0) == 0;
    EXPECT_TRUE(c_runtime || (kSanitized && sanitizer_runtime)) << kGpureap << " needs " << lib;
  }
  bool prometheus = false;
  for (const auto& lib : needed(fs::path(kGpureap).parent_path() / "gpureap-exporter"))
    prometheus = prometheus || lib.find("prometheus-cpp") != std::string::npos;
  EXPECT_TRUE(prometheus);
}

TEST_F(ExporterIntegration, AHungDriverGivesStaleDataAndA503NeverAHungScrape) {
  std::vector<std::string> env = env_;
  env.push_back("LD_LIBRARY_PATH=" + kFakeDriverDir);
  env.push_back("FAKE_NVML_SCENARIO=hang_later");
  Exporter exporter({"--host-root", host_, "--gpu", "nvml", "--interval", "0.3", "--nvml-timeout", "0.5"}, env);
  ASSERT_TRUE(exporter.ready());
  // Two good scans, then every NVML call of the third never returns.
  EXPECT_TRUE(eventually([&] {
    const Response r = http_get(exporter.url("/metrics"));
    EXPECT_EQ(r.status, 200);  // each scrape answers, whatever the driver does
    return sample(r.body, "gpureap_scan_stale") == 1.0 && sample(r.body, "gpureap_scan_errors_total") >= 1.0 &&
           sample(r.body, "gpureap_gpu_memory_total_bytes").has_value();  // the last good data stays
  }));
  const Response health = http_get(exporter.url("/healthz"));
  EXPECT_EQ(health.status, 503);
  EXPECT_NE(health.body.find("did not return within 500 ms"), std::string::npos) << health.body;
  EXPECT_EQ(exporter.stop(), 0);  // and it still stops, leaving the stuck call behind
}

// Raw TCP clients: one that sends half a request and stalls, garbage, a huge header.
int connect_to(int port) {
  const int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(s);
    return -1;
  }
  return s;
}

// Reads until the server closes (or `limit` passes): what it answered.
std::optional<std::string> read_until_closed(int s, std::chrono::seconds limit) {
  std::string got;
  const auto end = std::chrono::steady_clock::now() + limit;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::nullopt;
    pollfd p{s, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return std::nullopt;
    char buf[4096];
    const ssize_t n = ::read(s, buf, sizeof buf);
    if (n <= 0) return got;
    got.append(buf, static_cast<std::size_t>(n));
  }
}

TEST_F(ExporterIntegration, ConcurrentSlowAndMalformedClientsAreBounded) {
  Exporter exporter({"--host-root", host_, "--gpu", "sim", "--interval", "0.5"}, env_);
  ASSERT_TRUE(exporter.ready());
  std::vector<int> slow;
  for (int i = 0; i < 8; ++i) {
    const int s = connect_to(exporter.port());
    ASSERT_GE(s, 0);
    const std::string half = "GET /metrics HTTP/1.1\r\nHost: x\r\n";
    ASSERT_EQ(::write(s, half.data(), half.size()), static_cast<ssize_t>(half.size()));
    slow.push_back(s);
  }
  const int garbage = connect_to(exporter.port());
  const std::string junk = std::string("\x01\x02 not http at all\r\n\r\n", 23);
  ASSERT_EQ(::write(garbage, junk.data(), junk.size()), static_cast<ssize_t>(junk.size()));
  const int huge = connect_to(exporter.port());
  const std::string big = "GET /metrics HTTP/1.1\r\nX-Big: " + std::string(64 * 1024, 'a') + "\r\n\r\n";
  (void)::write(huge, big.data(), big.size());  // may be cut short when the server gives up on it

  // Sixteen scrapes at once all answer while the stalled clients hold threads.
  std::vector<std::thread> scrapers;
  std::vector<int> status(16, 0);
  for (std::size_t i = 0; i < status.size(); ++i) {
    scrapers.emplace_back([&, i] { status[i] = http_get(exporter.url("/metrics")).status; });
  }
  for (auto& t : scrapers) t.join();
  for (int s : status) EXPECT_EQ(s, 200);
  // The server ends what it cannot parse and the stalled requests (request_timeout_ms).
  auto junk_answer = read_until_closed(garbage, 30s);
  ASSERT_TRUE(junk_answer.has_value()) << "a malformed request held its connection open";
  EXPECT_TRUE(junk_answer->empty() || std::regex_search(*junk_answer, std::regex("^HTTP/1\\.[01] 4"))) << *junk_answer;
  auto huge_answer = read_until_closed(huge, 30s);
  ASSERT_TRUE(huge_answer.has_value()) << "an oversized request held its connection open";
  EXPECT_TRUE(huge_answer->empty() || std::regex_search(*huge_answer, std::regex("^HTTP/1\\.[01] 4"))) << *huge_answer;
  for (int s : slow) {
    EXPECT_TRUE(read_until_closed(s, 30s).has_value()) << "a stalled client was never cut off";
    ::close(s);
  }
  ::close(garbage);
  ::close(huge);
  EXPECT_EQ(http_get(exporter.url("/metrics")).status, 200);
  EXPECT_EQ(exporter.stop(), 0);
}

// The least privilege docs/exporter.md names, run for real: the scan as
// nobody with exactly CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH, CAP_BPF and
// CAP_PERFMON sees root's GPU holder through the BPF iterator; without the
// BPF pair it walks /proc and still sees it; with no capability it cannot
// read other users' descriptors, and says so instead of calling the node clean.
TEST_F(ExporterIntegration, TheScanSeesEveryHolderWithExactlyTheFourCapabilitiesAndSaysWhenItCannot) {
  ASSERT_EQ(::chmod(tmp_.path().c_str(), 0755), 0);  // the host root, searchable by nobody
  Child holder = Child::spawn({kWorker, "hold", "--gpu", "sim", "--bytes", std::to_string(64 * kMiB)}, env_);
  const json ready = ready_line(holder);
  ASSERT_TRUE(ready.contains("pid")) << ready.dump();
  const int holder_pid = ready["pid"].get<int>();
  auto as_nobody = [&](const std::string& caps, const std::vector<std::string>& args) {
    std::vector<std::string> argv{"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                                  "--inh-caps=" + caps, "--ambient-caps=" + caps, "--bounding-set=" + caps, kGpureap};
    argv.insert(argv.end(), args.begin(), args.end());
    return gpureap::testing::run(argv, env_);
  };
  const std::vector<std::string> trace{"trace", "--json", "--gpu", "sim", "--host-root", host_};
  auto devices_of_holder = [&](const json& out) {
    for (const auto& p : out["processes"]) {
      if (p["pid"] == holder_pid) return p["devices"].size();
    }
    return std::size_t{0};
  };

  auto four = as_nobody("-all,+sys_ptrace,+dac_read_search,+bpf,+perfmon", trace);
  EXPECT_EQ(four.exit_code, 0) << four.err;
  const json a = json::parse(four.out, nullptr, false);
  ASSERT_TRUE(a.is_object()) << four.out << four.err;
  EXPECT_EQ(a["scan"]["fds_from"], "bpf") << a["scan"].dump();
  EXPECT_EQ(a["scan"]["denied"], 0);
  // What root itself cannot read stays unread (this machine's protected PID 1).
  const auto root_fds_denied = a["scan"]["fds_denied"].get<unsigned>();
  EXPECT_LE(root_fds_denied, 1U);
  EXPECT_EQ(devices_of_holder(a), 3U) << four.out;

  auto no_bpf = as_nobody("-all,+sys_ptrace,+dac_read_search", trace);
  EXPECT_EQ(no_bpf.exit_code, 0) << no_bpf.err;
  const json b = json::parse(no_bpf.out, nullptr, false);
  ASSERT_TRUE(b.is_object()) << no_bpf.out << no_bpf.err;
  EXPECT_EQ(b["scan"]["fds_from"], "procfs");
  EXPECT_NE(b["scan"]["fds_note"].get<std::string>().find("Operation not permitted"), std::string::npos)
      << b["scan"].dump();
  EXPECT_LE(b["scan"]["fds_denied"].get<unsigned>(), 1U);
  EXPECT_EQ(devices_of_holder(b), 3U) << no_bpf.out;

  auto none = as_nobody("-all", trace);
  EXPECT_EQ(none.exit_code, 2) << none.out;
  const json c = json::parse(none.out, nullptr, false);
  ASSERT_TRUE(c.is_object()) << none.out << none.err;
  EXPECT_GT(c["scan"]["fds_denied"].get<unsigned>(), root_fds_denied + 1) << c["scan"].dump();
  EXPECT_EQ(devices_of_holder(c), 0U);
  EXPECT_NE(none.err.find("could not be read (permission)"), std::string::npos) << none.err;

  auto check = as_nobody("-all", {"check", "--gpu", "sim", "--host-root", host_});
  EXPECT_EQ(check.exit_code, 2) << check.out;
  EXPECT_TRUE(check.out.starts_with("UNKNOWN: ")) << check.out;
  EXPECT_NE(check.out.find("descriptors unreadable"), std::string::npos) << check.out;
  EXPECT_LE(check.out.size(), 81U) << check.out;  // 80 bytes and the newline
}

#if defined(__SANITIZE_ADDRESS__)
constexpr double kSoakWarmScans = 200, kSoakScans = 1000;
#else
constexpr double kSoakWarmScans = 300, kSoakScans = 3000;
#endif

// A thousand and more scans while holders come and go: the exporter's memory stays flat.
TEST_F(ExporterIntegration, MemoryStaysFlatOverThousandsOfScansWithChurn) {
  std::vector<std::string> env = env_;
  // Under ASan freed memory waits in a quarantine first: it would look like growth.
  env.push_back("ASAN_OPTIONS=quarantine_size_mb=0:thread_local_quarantine_size_kb=0");
  Exporter exporter({"--host-root", host_, "--gpu", "sim", "--interval", "0.01", "--sample-period", "0.01",
                     "--threads", "1"},
                    env);
  ASSERT_TRUE(exporter.ready());
  auto scans = [&] { return sample(http_get(exporter.url("/metrics")).body, "gpureap_scans_total").value_or(0); };
  auto rss_kib = [&] {
    const std::string status = gpureap::testing::read_file("/proc/" + std::to_string(exporter.pid()) + "/status");
    const auto at = status.find("VmRSS:");
    return at == std::string::npos ? 0L : std::stol(status.substr(at + 6));
  };
  std::vector<Child> holders;
  unsigned churned = 0;
  auto churn_until = [&](double target) {
    for (double seen = scans(); seen < target;) {
      // A holder starts, another ends: new pids, new series, forgotten ones.
      Child c = Child::spawn({kWorker, "hold", "--gpu", "sim", "--bytes", std::to_string((64 + churned % 64) * kMiB),
                              "--sm-util", std::to_string(churned % 3 == 0 ? 0 : 50)},
                             env_);
      if (ready_line(c).contains("pid")) holders.push_back(std::move(c));
      if (holders.size() > 6) holders.erase(holders.begin());
      ++churned;
      // One change per scan: the scans, not the spawns, set the pace.
      for (const double before = seen; (seen = scans()) == before;) {
      }
    }
  };
  // Scans walk the whole host's /proc: ~10 a second on a busy two-core box,
  // several times fewer under ASan, where the same loop runs shorter.
  churn_until(kSoakWarmScans);
  const long warm = rss_kib();
  churn_until(kSoakScans);
  const long end = rss_kib();
  holders.clear();
  RecordProperty("rss_warm_kib", static_cast<int>(warm));
  RecordProperty("rss_end_kib", static_cast<int>(end));
  std::printf("exporter RSS after %.0f scans %ld KiB, after %.0f scans %ld KiB (%u holders churned)\n", kSoakWarmScans,
              warm, kSoakScans, end, churned);
  EXPECT_GT(churned, 50U);
  EXPECT_LT(end - warm, 3 * 1024) << "RSS grew from " << warm << " to " << end << " KiB";
  EXPECT_EQ(exporter.stop(), 0);
}

TEST(Monitoring, ThePrometheusRuleCarriesTheRuleFilesGroupsUnchanged) {
  const YAML::Node rules = YAML::LoadFile(kSource + "/deploy/monitoring/prometheus/gpureap-rules.yml");
  const YAML::Node crd = YAML::LoadFile(kSource + "/deploy/monitoring/prometheusrule.yaml");
  EXPECT_EQ(crd["kind"].as<std::string>(), "PrometheusRule");
  EXPECT_EQ(YAML::Dump(crd["spec"]["groups"]), YAML::Dump(rules["groups"]));
}

// ---- gpureap check, the node-problem-detector plugin.

struct CheckRun {
  int exit_code = -1;
  std::string out;
  bool within_5s = false;
};

// Runs argv and waits on its pidfd at most 5 s: NPD's timeout, the plugin's contract.
CheckRun run_check(const std::vector<std::string>& argv, const std::vector<std::string>& env = {}) {
  Child c = Child::spawn(argv, env);
  CheckRun r;
  auto fd = gpureap::sys::pidfd_open(c.pid());
  if (!fd) return r;
  auto exited = gpureap::sys::pidfd_wait_exit(fd->get(), 5000);
  r.within_5s = exited.ok() && *exited;
  while (auto line = c.read_line()) r.out += *line + "\n";
  const int status = c.wait_exit();
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

TEST_F(ExporterIntegration, CheckSaysOkInACleanPidNamespace) {
  // A fresh PID namespace sees only the check itself: nothing wrong there.
  auto r = run_check({"/usr/bin/unshare", "--pid", "--fork", "--mount-proc", kGpureap, "check", "--gpu", "sim"}, env_);
  EXPECT_TRUE(r.within_5s);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out.rfind("OK: ", 0), 0U) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1);
}

TEST_F(ExporterIntegration, CheckNamesTheWorstProblemInAtMost80Bytes) {
  // A zombie in a pod whose name alone is longer than NPD's 80 bytes.
  const std::string long_name = "a-pod-whose-name-is-far-too-long-for-one-npd-condition-message-" +
                                gpureap::testing::random_hex(40);
  Pod pod = make_pod(long_name, "ml");
  // In a PID namespace of its own: the zombie-maker (moved into the pod's
  // cgroup first) says it is ready through a FIFO, the check runs, and the
  // namespace's PID 1 exits with the check's code, which ends the rest.
  const std::string fifo = tmp_ / "ready";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string script =
      "sh -c 'echo $$ > \"$1\" && exec \"$0\" zombie-maker --count 1' \"$0\" \"$2\" > \"$4\" & "
      "read ready < \"$4\"; \"$1\" check --host-root \"$3\" --gpu sim";
  auto r = run_check({"/usr/bin/unshare", "--pid", "--fork", "--mount-proc", "/bin/sh", "-c", script, kWorker,
                      kGpureap, pod.procs, host_, fifo},
                     env_);
  EXPECT_TRUE(r.within_5s);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  ASSERT_FALSE(r.out.empty());
  const std::string line = r.out.substr(0, r.out.size() - 1);
  EXPECT_EQ(line.rfind("zombie: ", 0), 0U) << line;
  EXPECT_LE(line.size(), 80U) << line;
  EXPECT_EQ(line.size(), 80U) << "the pod name fills the line: " << line;
}

TEST_F(ExporterIntegration, CheckIsUnknownWhenItCannotLook) {
  auto r = run_check({kGpureap, "check", "--host-root", tmp_ / "no-such-root", "--gpu", "sim"});
  EXPECT_TRUE(r.within_5s);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out.rfind("UNKNOWN: ", 0), 0U) << r.out;
  EXPECT_LE(r.out.size(), 81U);
}

TEST_F(ExporterIntegration, CheckAnswersWithin5sWhenTheDriverHangs) {
  for (const std::string scenario : {"hang", "hang_init"}) {
    auto r = run_check({kGpureap, "check", "--gpu", "nvml"},
                       {"LD_LIBRARY_PATH=" + kFakeDriverDir, "FAKE_NVML_SCENARIO=" + scenario});
    EXPECT_TRUE(r.within_5s) << scenario;
    EXPECT_EQ(r.exit_code, 2) << scenario << ": " << r.out;
    EXPECT_EQ(r.out.rfind("UNKNOWN: NVML: ", 0), 0U) << scenario << ": " << r.out;
    EXPECT_LE(r.out.size(), 81U);
  }
  // A deadline shorter than the driver's timeout: the check's own bound answers.
  auto r = run_check({kGpureap, "check", "--gpu", "nvml", "--nvml-timeout", "30", "--deadline", "1"},
                     {"LD_LIBRARY_PATH=" + kFakeDriverDir, "FAKE_NVML_SCENARIO=hang"});
  EXPECT_TRUE(r.within_5s);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("no answer within 1.0 s"), std::string::npos) << r.out;
}

}  // namespace
