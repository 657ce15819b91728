// Tests for the pod resolvers on fake host roots (tests/fixtures/container),
// the factory's order and first-hit-wins, the deleted case, malformed state,
// and crictl through fake executables written to a temp dir.
#include "container/pod_resolver.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "container/run_capture.hpp"

namespace gpureap::container {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;

const std::string kFixtures = GPUREAP_CONTAINER_FIXTURES;

const std::string kTrainer = "4b13c17925dd6fcc086cbb5fbd35eb0dee95bb2f9bbabd9bd37c55e28ed308e6";
const std::string kPause = "afdc724d3a6065704e65ef0bddc97d19988490067d073bea100722a992ae2e1e";
const std::string kCrio = "9f8c0f64365618bfa8d272db3f53d15c61bd72f9f24318ec6ef3b3796f678ac9";
const std::string kDockerK8s = "89016fc1ebe735d5d6bfa8fa9b5c0431890483da9035da7f4031b4fd87aff831";
const std::string kDocker = "4fd88b678ecadb93030bb98dfb4733c038f1fa2022c789c9a0f2bcf070a0e0d7";
const std::string kNerdctl = "8a74955d077e7f4104b8ec885cbbfb6190fdeb19c7bdad60e0e5c48de421b920";
const std::string kDeleted = "4d2f850397a480053922f5163b6773e1bc80ac5fea55923cdeba8698df1e6af1";
const std::string kLogOnly = "9b3ba1734db0029fdd6dc0750e24e20a49d191dcbc6448a9de3eadd97160f5ff";
const std::string kUnknown = "837d51f1d3370603810cb5e79a42e1f6b294b16a993cc68f179de69133502271";
const std::string kCrictl = "61d42ceaab4c47ed859dd5322dd0ce47df849c1634f31e9b389b9368641d67cc";
const std::string kBrokenA = "a76ddeb1bde217b0ed1a73370f1d66dde91858f9168396655502f4938f1d6d00";
const std::string kBrokenB = "897d3b0709413480c5ac7a42e12222a0a427c6ad1693602f70770b8fdbaae61d";
const std::string kBrokenC = "fcc0de1ff1db6b14a5a8e8391098b5eee1617c9d5573d79dac08e79e35de7ded";

const std::string kUid1 = "a728a390-3398-4978-a4fe-589b54172546";
const std::string kUid2 = "0b35e872-fcaf-4334-b14c-1f873ef8d131";
const std::string kUid3 = "54f0ee34-7b85-4a56-824b-b5601273c1c0";
const std::string kUid4 = "874efd31-c17b-4bf2-b972-bf7a3f717c59";

sys::HostRoot open_root(const std::string& name) {
  auto r = sys::HostRoot::open(kFixtures + "/" + name);
  if (!r.ok()) throw std::runtime_error(r.error().message);
  return std::move(r).value();
}

ContainerRef ref(const std::string& id, std::string uid = {}, Runtime rt = Runtime::unknown) {
  const Qos q = uid.empty() ? Qos::none : Qos::burstable;
  return ContainerRef{id, rt, std::move(uid), q};
}

std::string slurp(const std::string& path) {
  auto text = sys::read_file_at(AT_FDCWD, path.c_str(), path);
  return text.ok() ? std::move(text).value() : std::string();
}

// A private temp directory, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "gpureap-container-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp");
    path_ = tmpl;
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

  // Writes an executable shell script and returns its path.
  std::string script(const std::string& name, const std::string& body) const {
    const fs::path p = path_ / name;
    std::ofstream(p) << "#!/bin/sh\n" << body;
    ::chmod(p.c_str(), 0755);
    return p.string();
  }

 private:
  fs::path path_;
};

// ---- one resolver at a time ----

TEST(ContainerdResolver, CriContainerFromK8sNamespace) {
  const auto r = make_containerd_resolver(open_root("node"));
  EXPECT_EQ(r->name(), "containerd");
  const auto m = r->resolve(ref(kTrainer));
  ASSERT_TRUE(m);
  EXPECT_EQ(*m, (PodMeta{"llm-train-0", "ml-jobs", kUid1, "trainer", "containerd", false}));
}

TEST(ContainerdResolver, SandboxIsMarked) {
  const auto m = make_containerd_resolver(open_root("node"))->resolve(ref(kPause));
  ASSERT_TRUE(m);
  EXPECT_TRUE(m->sandbox);
  EXPECT_EQ(m->pod_name, "llm-train-0");
  EXPECT_EQ(m->container_name, "");
}

TEST(ContainerdResolver, OtherNamespacesAreListed) {
  const auto m = make_containerd_resolver(open_root("node"))->resolve(ref(kNerdctl));
  ASSERT_TRUE(m);
  EXPECT_EQ(m->container_name, "dev-shell");
}

TEST(ContainerdResolver, K3sStateDir) {
  const auto m = make_containerd_resolver(open_root("node"))->resolve(ref(kCrictl));
  ASSERT_TRUE(m);
  EXPECT_EQ(m->pod_name, "tei-embed-6c9f7d8b5-q4wzl");
  EXPECT_EQ(m->container_name, "embedder");
}

TEST(ContainerdResolver, NamelessMobyTaskLeavesItToDocker) {
  EXPECT_EQ(make_containerd_resolver(open_root("node"))->resolve(ref(kDocker)), std::nullopt);
}

TEST(ContainerdResolver, UnknownAndMalformed) {
  EXPECT_EQ(make_containerd_resolver(open_root("node"))->resolve(ref(kUnknown)), std::nullopt);
  EXPECT_EQ(make_containerd_resolver(open_root("broken"))->resolve(ref(kBrokenA)), std::nullopt);
}

TEST(CrioResolver, Container) {
  const auto m = make_crio_resolver(open_root("node"))->resolve(ref(kCrio));
  ASSERT_TRUE(m);
  EXPECT_EQ(*m, (PodMeta{"vllm-7d9c5b6f4-x2k8p", "serving", kUid2, "server", "crio", false}));
}

TEST(CrioResolver, UnknownAndMalformed) {
  EXPECT_EQ(make_crio_resolver(open_root("node"))->resolve(ref(kTrainer)), std::nullopt);
  EXPECT_EQ(make_crio_resolver(open_root("broken"))->resolve(ref(kBrokenB)), std::nullopt);
}

TEST(DockerResolver, CriDockerdLabels) {
  const auto m = make_docker_resolver(open_root("node"))->resolve(ref(kDockerK8s));
  ASSERT_TRUE(m);
  EXPECT_EQ(*m, (PodMeta{"blender-worker-2", "media", kUid3, "render", "docker", false}));
}

TEST(DockerResolver, PlainDockerName) {
  const auto m = make_docker_resolver(open_root("node"))->resolve(ref(kDocker));
  ASSERT_TRUE(m);
  EXPECT_EQ(m->container_name, "jupyter");
  EXPECT_EQ(m->pod_name, "");
}

TEST(DockerResolver, UnknownAndMalformed) {
  EXPECT_EQ(make_docker_resolver(open_root("node"))->resolve(ref(kCrio)), std::nullopt);
  EXPECT_EQ(make_docker_resolver(open_root("broken"))->resolve(ref(kBrokenC)), std::nullopt);
}

TEST(LogDirResolver, ContainerLogNameAndSymlinkUid) {
  const auto r = make_log_dir_resolver(open_root("node"));
  EXPECT_FALSE(r->proves_live_state());
  const auto m = r->resolve(ref(kDeleted));
  ASSERT_TRUE(m);
  EXPECT_EQ(*m, (PodMeta{"vllm-0.infer", "serving", kUid3, "server", "log-dir", false}));
}

TEST(LogDirResolver, PodLogDirByUidWithOneContainer) {
  const auto m = make_log_dir_resolver(open_root("node"))->resolve(ref(kLogOnly, kUid4));
  ASSERT_TRUE(m);
  EXPECT_EQ(*m, (PodMeta{"solo-job", "batch", kUid4, "worker", "log-dir", false}));
}

TEST(LogDirResolver, PodWithSeveralContainersLeavesContainerUnnamed) {
  const auto m = make_log_dir_resolver(open_root("node"))->resolve(ref(kLogOnly, kUid2));
  ASSERT_TRUE(m);
  EXPECT_EQ(m->pod_name, "multi");
  EXPECT_EQ(m->container_name, "");
}

TEST(LogDirResolver, NothingKnown) {
  EXPECT_EQ(make_log_dir_resolver(open_root("node"))->resolve(ref(kUnknown)), std::nullopt);
  EXPECT_EQ(make_log_dir_resolver(open_root("broken"))->resolve(ref(kUnknown, kUid1)), std::nullopt);
}

// ---- factory order, first hit wins, deleted ----

ResolverOptions no_crictl() {
  ResolverOptions o;
  o.use_crictl = false;
  return o;
}

std::vector<std::string> names(const Resolvers& rs) {
  std::vector<std::string> out;
  for (const auto& r : rs) out.emplace_back(r->name());
  return out;
}

TEST(DefaultResolvers, OrderWithoutCrictl) {
  EXPECT_EQ(names(default_resolvers(open_root("node"), no_crictl())),
            (std::vector<std::string>{"containerd", "crio", "docker", "log-dir"}));
  ResolverOptions empty_path;
  empty_path.search_path = "";
  EXPECT_EQ(names(default_resolvers(open_root("node"), empty_path)),
            (std::vector<std::string>{"containerd", "crio", "docker", "log-dir"}));
}

TEST(DefaultResolvers, CrictlFoundOnSearchPathGoesBeforeLogDirs) {
  TempDir tmp;
  tmp.script("crictl", "exit 1\n");
  ResolverOptions o;
  o.search_path = "/nonexistent::" + tmp.path().string();
  EXPECT_EQ(names(default_resolvers(open_root("node"), o)),
            (std::vector<std::string>{"containerd", "crio", "docker", "crictl", "log-dir"}));
}

TEST(DefaultResolvers, NonExecutableCrictlIsIgnored) {
  TempDir tmp;
  const std::string p = tmp.script("crictl", "exit 0\n");
  ::chmod(p.c_str(), 0644);
  ResolverOptions o;
  o.crictl_path = p;
  EXPECT_EQ(names(default_resolvers(open_root("node"), o)).size(), 4U);
  EXPECT_EQ(find_executable("crictl", tmp.path().string()), "");
}

TEST(ResolveContainer, EachRuntimeThroughTheFactory) {
  const auto rs = default_resolvers(open_root("node"), no_crictl());
  struct Want {
    std::string id;
    std::string source;
    std::string container;
  };
  for (const auto& w : std::vector<Want>{{kTrainer, "containerd", "trainer"},
                                         {kNerdctl, "containerd", "dev-shell"},
                                         {kCrio, "crio", "server"},
                                         {kDockerK8s, "docker", "render"},
                                         {kDocker, "docker", "jupyter"}}) {
    const ContainerInfo info = resolve_container(ref(w.id), rs);
    ASSERT_TRUE(info.meta) << w.id;
    EXPECT_EQ(info.meta->source, w.source) << w.id;
    EXPECT_EQ(info.meta->container_name, w.container) << w.id;
    EXPECT_FALSE(info.deleted) << w.id;
    EXPECT_EQ(info.ref.id, w.id);
  }
}

TEST(ResolveContainer, FirstHitWinsOverLogDirs) {
  // The trainer is known to containerd and has a kubelet log: containerd answers.
  const auto info = resolve_container(ref(kTrainer), default_resolvers(open_root("node"), no_crictl()));
  ASSERT_TRUE(info.meta);
  EXPECT_EQ(info.meta->source, "containerd");
}

// A resolver that always answers, to show the order decides.
class Fixed final : public PodResolver {
 public:
  Fixed(std::string n, bool live) : name_(std::move(n)), live_(live) {}
  std::string_view name() const override { return name_; }
  bool proves_live_state() const override { return live_; }
  std::optional<PodMeta> resolve(const ContainerRef&) const override {
    return PodMeta{"pod-from-" + name_, "ns", "", "c", "ignored", false};
  }

 private:
  std::string name_;
  bool live_;
};

class Throws final : public PodResolver {
 public:
  std::string_view name() const override { return "throws"; }
  std::optional<PodMeta> resolve(const ContainerRef&) const override { throw std::runtime_error("boom"); }
};

TEST(ResolveContainer, OrderDecidesAndSourceIsTheResolversName) {
  Resolvers rs;
  rs.push_back(std::make_unique<Throws>());
  rs.push_back(std::make_unique<Fixed>("first", true));
  rs.push_back(std::make_unique<Fixed>("second", true));
  const auto info = resolve_container(ref(kUnknown, kUid1), rs);
  ASSERT_TRUE(info.meta);
  EXPECT_EQ(info.meta->pod_name, "pod-from-first");
  EXPECT_EQ(info.meta->source, "first");
  EXPECT_EQ(info.meta->pod_uid, kUid1);  // filled from the cgroup path
  EXPECT_FALSE(info.deleted);
}

TEST(ResolveContainer, DeletedButLoggedKeepsLogMetaAndUid) {
  const auto info = resolve_container(ref(kDeleted, kUid3), default_resolvers(open_root("node"), no_crictl()));
  EXPECT_TRUE(info.deleted);
  ASSERT_TRUE(info.meta);
  EXPECT_EQ(info.meta->source, "log-dir");
  EXPECT_EQ(info.meta->pod_name, "vllm-0.infer");
  EXPECT_EQ(info.ref.pod_uid, kUid3);
}

TEST(ResolveContainer, DeletedWithNothingLeftStillReportsPodUid) {
  const auto info = resolve_container(ref(kUnknown, kUid1), default_resolvers(open_root("broken"), no_crictl()));
  EXPECT_TRUE(info.deleted);
  EXPECT_FALSE(info.meta);
  EXPECT_EQ(info.ref.pod_uid, kUid1);
}

TEST(ResolveContainer, MalformedStateEverywhereIsDeletedNotACrash) {
  const auto rs = default_resolvers(open_root("broken"), no_crictl());
  for (const auto& id : {kBrokenA, kBrokenB, kBrokenC}) {
    const auto info = resolve_container(ref(id), rs);
    EXPECT_FALSE(info.meta) << id;
    EXPECT_TRUE(info.deleted) << id;
  }
}

// ---- crictl through fake executables ----

TEST(CrictlResolver, ParsesCapturedInspectAndPassesTheId) {
  TempDir tmp;
  const std::string args = (tmp.path() / "args").string();
  const std::string exe = tmp.script(
      "crictl", "printf '%s\\n' \"$@\" > '" + args + "'\ncat '" + kFixtures + "/crictl/inspect-running.json'\n");
  const auto r = make_crictl_resolver(exe, "", milliseconds(5000));
  const auto m = r->resolve(ref(kCrictl));
  ASSERT_TRUE(m);
  EXPECT_EQ(*m, (PodMeta{"tei-embed-6c9f7d8b5-q4wzl", "search", "3f6c2b1a-9d8e-4f70-a1b2-c3d4e5f60718",
                         "embedder", "crictl", false}));
  EXPECT_EQ(slurp(args), "inspect\n-o\njson\n" + kCrictl + "\n");
}

TEST(CrictlResolver, FactoryPointsCrictlAtTheHostRootsSocket) {
  TempDir tmp;
  const fs::path root = tmp.path() / "host";
  fs::create_directories(root / "run/containerd");
  std::ofstream(root / "run/containerd/containerd.sock").put('\n');  // only its existence matters
  const std::string args = (tmp.path() / "args").string();
  ResolverOptions o;
  o.crictl_path = tmp.script("crictl", "printf '%s\\n' \"$@\" > '" + args + "'\nexit 1\n");
  auto host = sys::HostRoot::open(root.string());
  ASSERT_TRUE(host.ok());
  const auto info = resolve_container(ref(kCrictl), default_resolvers(*host, o));
  EXPECT_TRUE(info.deleted);
  EXPECT_EQ(slurp(args).substr(0, 19), "--runtime-endpoint\n");
  EXPECT_NE(slurp(args).find("unix://" + (root / "run/containerd/containerd.sock").string() + "\n"),
            std::string::npos);
}

TEST(CrictlResolver, FailureExitIsNotAnAnswer) {
  TempDir tmp;
  const auto r = make_crictl_resolver(
      tmp.script("crictl", "echo '{\"status\":{\"labels\":{\"io.kubernetes.pod.name\":\"x\"}}}'\nexit 1\n"), "",
      milliseconds(5000));
  EXPECT_EQ(r->resolve(ref(kCrictl)), std::nullopt);
}

TEST(CrictlResolver, GarbageOutputIsNotAnAnswer) {
  TempDir tmp;
  const auto r = make_crictl_resolver(tmp.script("crictl", "echo 'level=fatal msg=\"connect: no such file\"'\n"), "",
                                      milliseconds(5000));
  EXPECT_EQ(r->resolve(ref(kCrictl)), std::nullopt);
}

TEST(CrictlResolver, HungRuntimeIsCutOffAtTheTimeout) {
  TempDir tmp;
  // Not exec: the shell waits on a child sleep, so only a group kill ends both.
  const auto r = make_crictl_resolver(tmp.script("crictl", "sleep 30\necho never\n"), "", milliseconds(300));
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(r->resolve(ref(kCrictl)), std::nullopt);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

TEST(CrictlResolver, MissingExecutableIsNotAnAnswer) {
  const auto r = make_crictl_resolver("/nonexistent/crictl", "", milliseconds(1000));
  EXPECT_EQ(r->resolve(ref(kCrictl)), std::nullopt);
}

// ---- run_capture directly ----

TEST(RunCapture, ReadsAllOfStdout) {
  TempDir tmp;
  // More than a pipe buffer, so the reader must keep draining while the child writes.
  const auto cap = run_capture({tmp.script("big", "i=0\nwhile [ $i -lt 4000 ]; do echo 0123456789abcdef0123456789abcdef; i=$((i+1)); done\n")},
                               milliseconds(20000));
  ASSERT_TRUE(cap.ok()) << cap.error().message;
  EXPECT_EQ(cap->exit_code, 0);
  EXPECT_EQ(cap->out.size(), 4000U * 33U);
}

TEST(RunCapture, OutputLimit) {
  TempDir tmp;
  const auto cap = run_capture({tmp.script("big", "while :; do echo xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx; done\n")},
                               milliseconds(20000), 4096);
  ASSERT_FALSE(cap.ok());
  EXPECT_EQ(cap.error().code, EFBIG);
}

TEST(RunCapture, ClosedStdoutButStillRunningTimesOut) {
  TempDir tmp;
  const auto cap = run_capture({tmp.script("detach", "exec >/dev/null\nsleep 30\n")}, milliseconds(300));
  ASSERT_FALSE(cap.ok());
  EXPECT_EQ(cap.error().code, ETIMEDOUT);
}

TEST(RunCapture, CallerWithStdinAndStdoutClosed) {
  // The pipe then lands on fds 0 and 1; the child must still get its stdout.
  TempDir tmp;
  const std::string exe = tmp.script("hi", "echo hi\n");
  std::fflush(stdout);
  const int saved_in = ::dup(0);
  const int saved_out = ::dup(1);
  ASSERT_GE(saved_in, 0);
  ASSERT_GE(saved_out, 0);
  ::close(0);
  ::close(1);
  const auto cap = run_capture({exe}, milliseconds(5000));
  ::dup2(saved_in, 0);
  ::dup2(saved_out, 1);
  ::close(saved_in);
  ::close(saved_out);
  ASSERT_TRUE(cap.ok()) << cap.error().message;
  EXPECT_EQ(cap->out, "hi\n");
}

TEST(RunCapture, ExitCode) {
  TempDir tmp;
  const auto cap = run_capture({tmp.script("three", "echo hi\nexit 3\n")}, milliseconds(5000));
  ASSERT_TRUE(cap.ok());
  EXPECT_EQ(cap->exit_code, 3);
  EXPECT_EQ(cap->out, "hi\n");
}

}  // namespace
}  // namespace gpureap::container
