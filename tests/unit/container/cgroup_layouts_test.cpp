// Tests for cgroup_layouts: every layout in FACTS.md ("Kubernetes container
// cgroups") as a table of realistic paths, plus the negatives a node really
// shows (user/session slices, .mount units, conmon, private namespaces).
#include "container/cgroup_layouts.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace gpureap::container {

// gtest prints the case that failed in readable form.
void PrintTo(const ContainerRef& r, std::ostream* os) {
  *os << "{" << r.id << ", " << to_string(r.runtime) << ", uid=" << r.pod_uid << ", "
      << to_string(r.qos) << "}";
}

namespace {

const std::string kId = "4b13c17925dd6fcc086cbb5fbd35eb0dee95bb2f9bbabd9bd37c55e28ed308e6";
const std::string kOuter = "837d51f1d3370603810cb5e79a42e1f6b294b16a993cc68f179de69133502271";
const std::string kUid = "a728a390-3398-4978-a4fe-589b54172546";
const std::string kU = "a728a390_3398_4978_a4fe_589b54172546";  // systemd's form of kUid
const std::string kStaticUid = "6f5ae3cdc9fd1b4dab1a4e3cb4a7ea2e";  // static pod: config hash

struct Case {
  const char* name;
  std::string path;
  std::optional<ContainerRef> want;
};

// Keeps ctest's listing readable (gtest would dump the struct's bytes).
void PrintTo(const Case& c, std::ostream* os) { *os << c.path; }

ContainerRef ref(Runtime rt, std::string uid = {}, Qos q = Qos::none, std::string id = kId) {
  return ContainerRef{std::move(id), rt, std::move(uid), q};
}

std::vector<Case> positive_cases() {
  return {
      {"containerd_systemd_burstable",
       "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + kU + ".slice/cri-containerd-" + kId + ".scope",
       ref(Runtime::containerd, kUid, Qos::burstable)},
      {"containerd_systemd_besteffort",
       "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + kU + ".slice/cri-containerd-" + kId + ".scope",
       ref(Runtime::containerd, kUid, Qos::besteffort)},
      {"containerd_systemd_guaranteed",
       "/kubepods.slice/kubepods-pod" + kU + ".slice/cri-containerd-" + kId + ".scope",
       ref(Runtime::containerd, kUid, Qos::guaranteed)},
      {"static_pod_uid_is_a_hash",
       "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + kStaticUid + ".slice/cri-containerd-" + kId + ".scope",
       ref(Runtime::containerd, kStaticUid, Qos::burstable)},
      {"cgroupfs_besteffort", "/kubepods/besteffort/pod" + kUid + "/" + kId,
       ref(Runtime::unknown, kUid, Qos::besteffort)},
      {"cgroupfs_burstable", "/kubepods/burstable/pod" + kUid + "/" + kId,
       ref(Runtime::unknown, kUid, Qos::burstable)},
      {"cgroupfs_guaranteed", "/kubepods/pod" + kUid + "/" + kId,
       ref(Runtime::unknown, kUid, Qos::guaranteed)},
      {"crio_systemd",
       "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + kU + ".slice/crio-" + kId + ".scope",
       ref(Runtime::crio, kUid, Qos::burstable)},
      {"crio_systemd_crun_container_leaf",
       "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + kU + ".slice/crio-" + kId + ".scope/container",
       ref(Runtime::crio, kUid, Qos::burstable)},
      {"crio_cgroupfs", "/kubepods/besteffort/pod" + kUid + "/crio-" + kId,
       ref(Runtime::crio, kUid, Qos::besteffort)},
      {"crio_cgroupfs_guaranteed_crun_leaf", "/kubepods/pod" + kUid + "/crio-" + kId + "/container",
       ref(Runtime::crio, kUid, Qos::guaranteed)},
      {"cri_dockerd_systemd",
       "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + kU + ".slice/docker-" + kId + ".scope",
       ref(Runtime::docker, kUid, Qos::besteffort)},
      {"docker_systemd_plain", "/system.slice/docker-" + kId + ".scope", ref(Runtime::docker)},
      {"docker_cgroupfs_plain", "/docker/" + kId, ref(Runtime::docker)},
      {"nerdctl_systemd", "/system.slice/nerdctl-" + kId + ".scope", ref(Runtime::nerdctl)},
      {"nerdctl_rootless_systemd",
       "/user.slice/user-1000.slice/user@1000.service/user.slice/nerdctl-" + kId + ".scope",
       ref(Runtime::nerdctl)},
      {"nerdctl_cgroupfs_parent", "/nerdctl/" + kId, ref(Runtime::nerdctl)},
      {"nerdctl_cgroupfs_default_namespace", "/default/" + kId, ref(Runtime::nerdctl)},
      {"containerd_driver_mismatch_colon_form",
       "/kubepods-burstable-pod" + kU + ".slice:cri-containerd:" + kId,
       ref(Runtime::containerd, kUid, Qos::burstable)},
      {"containerd_driver_mismatch_guaranteed",
       "/kubepods-pod" + kU + ".slice:cri-containerd:" + kId,
       ref(Runtime::containerd, kUid, Qos::guaranteed)},
      {"kind_v2_seen_from_host",
       "/system.slice/docker-" + kOuter + ".scope/kubelet.slice/kubelet-kubepods.slice/"
       "kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod" + kU + ".slice/cri-containerd-" + kId + ".scope",
       ref(Runtime::containerd, kUid, Qos::besteffort)},
      {"kind_v2_guaranteed",
       "/system.slice/docker-" + kOuter + ".scope/kubelet.slice/kubelet-kubepods.slice/"
       "kubelet-kubepods-pod" + kU + ".slice/cri-containerd-" + kId + ".scope",
       ref(Runtime::containerd, kUid, Qos::guaranteed)},
      {"kind_v1_cgroupfs", "/docker/" + kOuter + "/kubelet/kubepods/burstable/pod" + kUid + "/" + kId,
       ref(Runtime::unknown, kUid, Qos::burstable)},
      {"docker_in_docker_cgroupfs", "/docker/" + kOuter + "/docker/" + kId, ref(Runtime::docker)},
      {"docker_in_docker_kubepods", "/docker/" + kOuter + "/kubepods/besteffort/pod" + kUid + "/" + kId,
       ref(Runtime::unknown, kUid, Qos::besteffort)},
      {"outer_container_alone", "/docker/" + kOuter, ref(Runtime::docker, {}, Qos::none, kOuter)},
      {"systemd_inside_container_stays_in_it",
       "/system.slice/docker-" + kId + ".scope/system.slice/cron.service", ref(Runtime::docker)},
      {"scope_outside_pod_slice_keeps_no_pod",
       "/kubepods.slice/kubepods-burstable.slice/cri-containerd-" + kId + ".scope", ref(Runtime::containerd)},
      {"trailing_newline_tolerated", "/docker/" + kId + "\n", ref(Runtime::docker)},
      {"doubled_slashes_tolerated", "//kubepods//pod" + kUid + "//" + kId,
       ref(Runtime::unknown, kUid, Qos::guaranteed)},
  };
}

std::vector<Case> negative_cases() {
  const std::string pod_slice = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + kU + ".slice";
  return {
      {"empty", "", std::nullopt},
      {"root_private_namespace", "/", std::nullopt},
      {"dotdot_private_namespace", "/../../kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + kU +
                                       ".slice/cri-containerd-" + kId + ".scope", std::nullopt},
      {"dotdot_only", "/..", std::nullopt},
      {"dotdot_inside", "/docker/" + kId + "/..", std::nullopt},
      {"relative_path", "kubepods/pod" + kUid + "/" + kId, std::nullopt},
      {"user_slice", "/user.slice/user-1000.slice/user@1000.service/app.slice/dbus.service", std::nullopt},
      {"session_scope", "/user.slice/user-1000.slice/session-3.scope", std::nullopt},
      {"containerd_service", "/system.slice/containerd.service", std::nullopt},
      {"kubelet_service", "/system.slice/kubelet.service", std::nullopt},
      {"init_scope", "/init.scope", std::nullopt},
      {"mount_unit",
       "/system.slice/var-lib-kubelet-pods-" + kU + "-volumes-kubernetes.io\\x2dprojected-kube\\x2dapi\\x2daccess\\x2d7k2x9.mount",
       std::nullopt},
      {"crio_conmon_systemd", pod_slice + "/crio-conmon-" + kId + ".scope", std::nullopt},
      {"crio_conmon_cgroupfs", "/kubepods/burstable/pod" + kUid + "/crio-conmon-" + kId, std::nullopt},
      {"pod_level_cgroup", pod_slice, std::nullopt},
      {"qos_level_cgroup", "/kubepods.slice/kubepods-burstable.slice", std::nullopt},
      {"kubepods_root", "/kubepods", std::nullopt},
      {"cgroupfs_pod_dir_only", "/kubepods/besteffort/pod" + kUid, std::nullopt},
      {"truncated_id", pod_slice + "/cri-containerd-" + kId.substr(0, 40), std::nullopt},
      {"truncated_scope_suffix", pod_slice + "/cri-containerd-" + kId + ".sco", std::nullopt},
      {"truncated_pod_slice", "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod", std::nullopt},
      {"id_63", pod_slice + "/cri-containerd-" + kId.substr(1) + ".scope", std::nullopt},
      {"id_65", pod_slice + "/cri-containerd-" + kId + "0.scope", std::nullopt},
      {"id_12_short_form", "/docker/" + kId.substr(0, 12), std::nullopt},
      {"upper_case_hex", pod_slice + "/cri-containerd-4B13C17925DD6FCC086CBB5FBD35EB0DEE95BB2F9BBABD9BD37C55E28ED308E6.scope",
       std::nullopt},
      {"non_hex", "/docker/" + std::string(64, 'g'), std::nullopt},
      {"bare_id_at_root", "/" + kId, std::nullopt},
      {"bare_id_under_system_slice", "/system.slice/" + kId, std::nullopt},
      {"bare_id_under_unknown_pod_parent", "/foo/pod" + kUid + "/" + kId, std::nullopt},
      {"bare_id_under_bad_uid", "/kubepods/burstable/podnot-a-uid/" + kId, std::nullopt},
      {"bare_id_under_bad_qos", "/kubepods/gold/pod" + kUid + "/" + kId, std::nullopt},
      {"colon_form_short_id", "/kubepods-burstable-pod" + kU + ".slice:cri-containerd:" + kId.substr(0, 12), std::nullopt},
      {"colon_form_not_a_pod_slice", "/system.slice:cri-containerd:" + kId, std::nullopt},
      {"colon_form_other_prefix", "/kubepods-burstable-pod" + kU + ".slice:foo:" + kId, std::nullopt},
      {"colons_everywhere", "/a:b:c/d:e", std::nullopt},
      {"libpod_not_in_table", "/machine.slice/libpod-" + kId + ".scope", std::nullopt},
  };
}

class Positive : public ::testing::TestWithParam<Case> {};
class Negative : public ::testing::TestWithParam<Case> {};

TEST_P(Positive, Parses) {
  const Case& c = GetParam();
  EXPECT_EQ(parse_container_path(c.path), c.want) << c.path;
}

TEST_P(Negative, IsNotAContainer) {
  const Case& c = GetParam();
  EXPECT_EQ(parse_container_path(c.path), std::nullopt) << c.path;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) { return info.param.name; }

INSTANTIATE_TEST_SUITE_P(Layouts, Positive, ::testing::ValuesIn(positive_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Layouts, Negative, ::testing::ValuesIn(negative_cases()), case_name);

TEST(IsContainerId, ExactlySixtyFourLowerHex) {
  EXPECT_TRUE(is_container_id(kId));
  EXPECT_FALSE(is_container_id(""));
  EXPECT_FALSE(is_container_id(kId.substr(0, 63)));
  EXPECT_FALSE(is_container_id(kId + "a"));
  EXPECT_FALSE(is_container_id("4B13C17925DD6FCC086CBB5FBD35EB0DEE95BB2F9BBABD9BD37C55E28ED308E6"));
}

// ---- container_from_cgroups: which line of /proc/<pid>/cgroup is trusted ----

const std::string kOther = "9f8c0f64365618bfa8d272db3f53d15c61bd72f9f24318ec6ef3b3796f678ac9";

TEST(ContainerFromCgroups, EmptyInputIsNoContainer) {
  EXPECT_EQ(container_from_cgroups({}), std::nullopt);
}

TEST(ContainerFromCgroups, V2OnlyUsesTheUnifiedLine) {
  const std::vector<proc::CgroupLine> lines{
      {0, "", "/kubepods.slice/kubepods-pod" + kU + ".slice/cri-containerd-" + kId + ".scope"}};
  EXPECT_EQ(container_from_cgroups(lines), ref(Runtime::containerd, kUid, Qos::guaranteed));
}

TEST(ContainerFromCgroups, HybridPrefersMemoryOverUnified) {
  // A hybrid host's 0:: line (the cgroup2 at /sys/fs/cgroup/unified) can name
  // something else entirely; the memory controller is what the kubelet set up.
  const std::string v1 = "/kubepods/burstable/pod" + kUid + "/" + kId;
  const std::vector<proc::CgroupLine> lines{
      {12, "pids", v1},
      {0, "", "/system.slice/docker-" + kOther + ".scope"},
      {11, "cpu,cpuacct", v1},
      {7, "memory", v1},
      {1, "name=systemd", v1},
  };
  EXPECT_EQ(container_from_cgroups(lines), ref(Runtime::unknown, kUid, Qos::burstable));
}

TEST(ContainerFromCgroups, MemoryInAJoinedControllerList) {
  const std::vector<proc::CgroupLine> lines{
      {0, "", "/"},
      {4, "memory,hugetlb", "/docker/" + kId},
  };
  EXPECT_EQ(container_from_cgroups(lines), ref(Runtime::docker));
}

TEST(ContainerFromCgroups, HostMemoryLineFallsBackToUnified) {
  const std::vector<proc::CgroupLine> lines{
      {7, "memory", "/user.slice/user-1000.slice/session-3.scope"},
      {0, "", "/docker/" + kId},
  };
  EXPECT_EQ(container_from_cgroups(lines), ref(Runtime::docker));
}

TEST(ContainerFromCgroups, FallsBackToAnyMatchingLine) {
  const std::vector<proc::CgroupLine> lines{
      {7, "memory", "/"},
      {0, "", "/"},
      {1, "name=systemd", "/system.slice/nerdctl-" + kId + ".scope"},
  };
  EXPECT_EQ(container_from_cgroups(lines), ref(Runtime::nerdctl));
}

TEST(ContainerFromCgroups, HostProcessOnEveryLine) {
  const std::vector<proc::CgroupLine> lines{
      {12, "pids", "/system.slice/containerd.service"},
      {7, "memory", "/system.slice/containerd.service"},
      {0, "", "/system.slice/containerd.service"},
  };
  EXPECT_EQ(container_from_cgroups(lines), std::nullopt);
}

TEST(ContainerFromCgroups, ConmonIsNotTheWorkloadOnAnyLine) {
  const std::string conmon = "/kubepods/burstable/pod" + kUid + "/crio-conmon-" + kId;
  const std::vector<proc::CgroupLine> lines{{7, "memory", conmon}, {0, "", conmon}};
  EXPECT_EQ(container_from_cgroups(lines), std::nullopt);
}

}  // namespace
}  // namespace gpureap::container
