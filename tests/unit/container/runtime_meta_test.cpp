// Tests for runtime_meta's pure parsers: captured-looking JSON and log names,
// and the malformed inputs a half-written or hand-edited state file produces.
#include "container/runtime_meta.hpp"

#include <gtest/gtest.h>

#include <string>

namespace gpureap::container {
namespace {

const std::string kId = "4b13c17925dd6fcc086cbb5fbd35eb0dee95bb2f9bbabd9bd37c55e28ed308e6";
const std::string kUid = "a728a390-3398-4978-a4fe-589b54172546";

TEST(ContainerdSpec, CriContainer) {
  const auto m = parse_containerd_spec(R"({"ociVersion":"1.1.0","annotations":{
      "io.kubernetes.cri.container-name":"trainer","io.kubernetes.cri.container-type":"container",
      "io.kubernetes.cri.sandbox-name":"llm-train-0","io.kubernetes.cri.sandbox-namespace":"ml-jobs",
      "io.kubernetes.cri.sandbox-uid":"a728a390-3398-4978-a4fe-589b54172546"}})");
  ASSERT_TRUE(m);
  EXPECT_EQ(*m, (PodMeta{"llm-train-0", "ml-jobs", kUid, "trainer", "containerd", false}));
}

TEST(ContainerdSpec, SandboxHasNoContainerName) {
  const auto m = parse_containerd_spec(R"({"annotations":{"io.kubernetes.cri.container-type":"sandbox",
      "io.kubernetes.cri.sandbox-name":"llm-train-0","io.kubernetes.cri.sandbox-namespace":"ml-jobs"}})");
  ASSERT_TRUE(m);
  EXPECT_TRUE(m->sandbox);
  EXPECT_EQ(m->pod_name, "llm-train-0");
  EXPECT_EQ(m->container_name, "");
}

TEST(ContainerdSpec, NerdctlName) {
  const auto m = parse_containerd_spec(R"({"annotations":{"nerdctl/name":"dev-shell"}})");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->container_name, "dev-shell");
  EXPECT_EQ(m->pod_name, "");
}

TEST(ContainerdSpec, NamelessSpecIsNotAnAnswer) {
  EXPECT_EQ(parse_containerd_spec(R"({"ociVersion":"1.1.0","annotations":{}})"), std::nullopt);
  EXPECT_EQ(parse_containerd_spec(R"({"ociVersion":"1.1.0"})"), std::nullopt);
}

TEST(ContainerdSpec, Malformed) {
  EXPECT_EQ(parse_containerd_spec(""), std::nullopt);
  EXPECT_EQ(parse_containerd_spec("{"), std::nullopt);
  EXPECT_EQ(parse_containerd_spec(R"({"annotations":{"io.kubernetes.cri.sandbox-name":"x")"), std::nullopt);
  EXPECT_EQ(parse_containerd_spec("[1,2,3]"), std::nullopt);
  EXPECT_EQ(parse_containerd_spec(R"({"annotations":"io.kubernetes.cri.sandbox-name"})"), std::nullopt);
  EXPECT_EQ(parse_containerd_spec(R"({"annotations":{"io.kubernetes.cri.sandbox-name":7}})"), std::nullopt);
  EXPECT_EQ(parse_containerd_spec(std::string("\0\0\0", 3)), std::nullopt);
}

TEST(CrioConfig, Container) {
  const auto m = parse_crio_config(R"({"annotations":{"io.kubernetes.pod.name":"vllm-7d9c5b6f4-x2k8p",
      "io.kubernetes.pod.namespace":"serving","io.kubernetes.pod.uid":"a728a390-3398-4978-a4fe-589b54172546",
      "io.kubernetes.container.name":"server","io.kubernetes.cri-o.ContainerType":"container"}})");
  ASSERT_TRUE(m);
  EXPECT_EQ(*m, (PodMeta{"vllm-7d9c5b6f4-x2k8p", "serving", kUid, "server", "crio", false}));
}

TEST(CrioConfig, InfraContainerIsSandbox) {
  const auto m = parse_crio_config(R"({"annotations":{"io.kubernetes.pod.name":"p","io.kubernetes.pod.namespace":"n",
      "io.kubernetes.container.name":"POD","io.kubernetes.cri-o.ContainerType":"sandbox"}})");
  ASSERT_TRUE(m);
  EXPECT_TRUE(m->sandbox);
  EXPECT_EQ(m->container_name, "");
}

TEST(CrioConfig, WrongTypesAreIgnored) {
  EXPECT_EQ(parse_crio_config(R"({"annotations":{"io.kubernetes.pod.name":42,"io.kubernetes.container.name":["x"]}})"),
            std::nullopt);
}

TEST(DockerConfig, CriDockerdLabels) {
  const auto m = parse_docker_config(R"({"ID":"x","Name":"/k8s_render_blender-worker-2_media_uid_0",
      "Config":{"Labels":{"io.kubernetes.pod.name":"blender-worker-2","io.kubernetes.pod.namespace":"media",
      "io.kubernetes.pod.uid":"a728a390-3398-4978-a4fe-589b54172546","io.kubernetes.container.name":"render",
      "io.kubernetes.docker.type":"container"}}})");
  ASSERT_TRUE(m);
  EXPECT_EQ(*m, (PodMeta{"blender-worker-2", "media", kUid, "render", "docker", false}));
}

TEST(DockerConfig, PlainDockerUsesName) {
  const auto m = parse_docker_config(R"({"Name":"/jupyter","Config":{"Labels":{"org.opencontainers.image.version":"22.04"}}})");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->container_name, "jupyter");
  EXPECT_EQ(m->pod_name, "");
}

TEST(DockerConfig, NullLabels) {
  const auto m = parse_docker_config(R"({"Name":"/x","Config":{"Labels":null}})");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->container_name, "x");
}

TEST(DockerConfig, PodSandbox) {
  const auto m = parse_docker_config(R"({"Name":"/k8s_POD_p_n_u_0","Config":{"Labels":{"io.kubernetes.pod.name":"p",
      "io.kubernetes.pod.namespace":"n","io.kubernetes.container.name":"POD","io.kubernetes.docker.type":"podsandbox"}}})");
  ASSERT_TRUE(m);
  EXPECT_TRUE(m->sandbox);
  EXPECT_EQ(m->container_name, "");
}

TEST(DockerConfig, Garbage) {
  EXPECT_EQ(parse_docker_config("not json"), std::nullopt);
  EXPECT_EQ(parse_docker_config(R"({"Name":"/"})"), std::nullopt);
  EXPECT_EQ(parse_docker_config(R"({"Config":[]})"), std::nullopt);
}

TEST(CrictlInspect, StatusLabels) {
  const auto m = parse_crictl_inspect(R"({"status":{"id":"x","metadata":{"attempt":2,"name":"embedder"},
      "labels":{"io.kubernetes.container.name":"embedder","io.kubernetes.pod.name":"tei-embed-6c9f7d8b5-q4wzl",
      "io.kubernetes.pod.namespace":"search","io.kubernetes.pod.uid":"a728a390-3398-4978-a4fe-589b54172546"}},
      "info":{"pid":73120}})");
  ASSERT_TRUE(m);
  EXPECT_EQ(*m, (PodMeta{"tei-embed-6c9f7d8b5-q4wzl", "search", kUid, "embedder", "crictl", false}));
}

TEST(CrictlInspect, Malformed) {
  EXPECT_EQ(parse_crictl_inspect(""), std::nullopt);
  EXPECT_EQ(parse_crictl_inspect("E1202 13:00:00 connect: connection refused"), std::nullopt);
  EXPECT_EQ(parse_crictl_inspect(R"({"status":null})"), std::nullopt);
  EXPECT_EQ(parse_crictl_inspect(R"({"status":{"labels":[]}})"), std::nullopt);
}

TEST(ContainerLogName, SplitsOnUnderscores) {
  const auto m = parse_container_log_name("vllm-0.infer_serving_server-" + kId + ".log", kId);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->pod_name, "vllm-0.infer");
  EXPECT_EQ(m->pod_namespace, "serving");
  EXPECT_EQ(m->container_name, "server");
  EXPECT_EQ(m->source, "log-dir");
}

TEST(ContainerLogName, ContainerNameWithDashes) {
  const auto m = parse_container_log_name("llm-train-0_ml-jobs_nccl-side-car-" + kId + ".log", kId);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->container_name, "nccl-side-car");
}

TEST(ContainerLogName, Rejects) {
  EXPECT_EQ(parse_container_log_name("p_n_c-" + kId + ".log", kId.substr(0, 63)), std::nullopt);
  EXPECT_EQ(parse_container_log_name("p_n_c-" + kId + ".log.gz", kId), std::nullopt);
  EXPECT_EQ(parse_container_log_name("p_n-" + kId + ".log", kId), std::nullopt);
  EXPECT_EQ(parse_container_log_name("p_n_c_d-" + kId + ".log", kId), std::nullopt);
  EXPECT_EQ(parse_container_log_name("__-" + kId + ".log", kId), std::nullopt);
  EXPECT_EQ(parse_container_log_name("-" + kId + ".log", kId), std::nullopt);
  const std::string other = "9f8c0f64365618bfa8d272db3f53d15c61bd72f9f24318ec6ef3b3796f678ac9";
  EXPECT_EQ(parse_container_log_name("p_n_c-" + other + ".log", kId), std::nullopt);
}

TEST(PodLogDir, DirName) {
  const auto m = parse_pod_log_dir("ml-jobs_llm-train-0_" + kUid);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->pod_namespace, "ml-jobs");
  EXPECT_EQ(m->pod_name, "llm-train-0");
  EXPECT_EQ(m->pod_uid, kUid);
  EXPECT_EQ(m->container_name, "");
}

TEST(PodLogDir, SymlinkTarget) {
  const auto m = parse_pod_log_dir("/var/log/pods/ml-jobs_llm-train-0_" + kUid + "/trainer/0.log");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->pod_name, "llm-train-0");
  EXPECT_EQ(m->container_name, "trainer");
}

TEST(PodLogDir, ContainerNamedPods) {
  const auto m = parse_pod_log_dir("/var/log/pods/ns_my-pods_" + kUid + "/pods/3.log");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->pod_name, "my-pods");
  EXPECT_EQ(m->container_name, "pods");
}

TEST(PodLogDir, Rejects) {
  EXPECT_EQ(parse_pod_log_dir(""), std::nullopt);
  EXPECT_EQ(parse_pod_log_dir("ns_pod"), std::nullopt);
  EXPECT_EQ(parse_pod_log_dir("ns_pod_uid_extra"), std::nullopt);
  EXPECT_EQ(parse_pod_log_dir("a/b_c_d"), std::nullopt);
  EXPECT_EQ(parse_pod_log_dir("/var/log/pods/"), std::nullopt);
}

}  // namespace
}  // namespace gpureap::container
