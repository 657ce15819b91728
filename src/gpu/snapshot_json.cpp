#include "gpu/snapshot_json.hpp"

#include <cstdint>
#include <limits>
#include <optional>

#include <nlohmann/json.hpp>

namespace gpureap::gpu {

using nlohmann::json;

namespace {

json optional_u64(const std::optional<std::uint64_t>& v) { return v ? json(*v) : json(nullptr); }

json device_to_json(const GpuDevice& d) {
  json out = json::object();
  out["index"] = d.index;
  out["uuid"] = d.uuid;
  out["minor"] = d.minor ? json(*d.minor) : json(nullptr);
  out["name"] = d.name;
  if (d.memory) {
    out["memory"] = json{{"total", d.memory->total},
                         {"used", d.memory->used},
                         {"reserved", optional_u64(d.memory->reserved)}};
  } else {
    out["memory"] = nullptr;
  }
  json procs = json::array();
  for (const auto& p : d.processes) {
    procs.push_back(json{{"pid", p.pid}, {"used_memory", optional_u64(p.used_memory)}});
  }
  out["processes"] = std::move(procs);
  return out;
}

// Parsing walks the document with a path ("devices[0].memory.total") so every
// error names the field, not just "type error".
class Reader {
 public:
  explicit Reader(std::string_view what) : what_(what) {}

  sys::Error error(const std::string& path, std::string_view problem) const {
    return sys::Error{EINVAL, std::string(what_) + ": " + path + ": " + std::string(problem)};
  }

  // A required member; `null_ok` lets the caller treat null as "not available".
  const json* member(const json& obj, const std::string& path, const char* key,
                     std::optional<sys::Error>& err) const {
    auto it = obj.find(key);
    if (it == obj.end()) {
      err = error(join(path, key), "missing");
      return nullptr;
    }
    return &*it;
  }

  static std::string join(const std::string& path, const char* key) {
    return path.empty() ? std::string(key) : path + "." + key;
  }

  std::optional<std::uint64_t> u64(const json& v, const std::string& path, std::optional<sys::Error>& err,
                                   std::uint64_t max = std::numeric_limits<std::uint64_t>::max()) const {
    // nlohmann keeps non-negative literals as unsigned; a negative or float value is rejected.
    if (!v.is_number_unsigned()) {
      err = error(path, "expected an unsigned integer");
      return std::nullopt;
    }
    auto n = v.get<std::uint64_t>();
    if (n > max) {
      err = error(path, "value out of range");
      return std::nullopt;
    }
    return n;
  }

  std::optional<std::string> str(const json& v, const std::string& path, std::optional<sys::Error>& err) const {
    if (!v.is_string()) {
      err = error(path, "expected a string");
      return std::nullopt;
    }
    return v.get<std::string>();
  }

 private:
  std::string_view what_;
};

constexpr std::uint64_t kU32Max = std::numeric_limits<std::uint32_t>::max();

std::optional<GpuDevice> device_from_json(const Reader& r, const json& v, const std::string& path,
                                          std::optional<sys::Error>& err) {
  if (!v.is_object()) {
    err = r.error(path, "expected an object");
    return std::nullopt;
  }
  GpuDevice d;
  const json* m = r.member(v, path, "index", err);
  if (!m) return std::nullopt;
  auto index = r.u64(*m, Reader::join(path, "index"), err, kU32Max);
  if (!index) return std::nullopt;
  d.index = static_cast<unsigned>(*index);

  if (!(m = r.member(v, path, "uuid", err))) return std::nullopt;
  auto uuid = r.str(*m, Reader::join(path, "uuid"), err);
  if (!uuid) return std::nullopt;
  d.uuid = std::move(*uuid);

  if (!(m = r.member(v, path, "minor", err))) return std::nullopt;
  if (!m->is_null()) {
    auto minor = r.u64(*m, Reader::join(path, "minor"), err, kU32Max);
    if (!minor) return std::nullopt;
    d.minor = static_cast<unsigned>(*minor);
  }

  if (!(m = r.member(v, path, "name", err))) return std::nullopt;
  auto name = r.str(*m, Reader::join(path, "name"), err);
  if (!name) return std::nullopt;
  d.name = std::move(*name);

  if (!(m = r.member(v, path, "memory", err))) return std::nullopt;
  if (!m->is_null()) {
    const std::string mpath = Reader::join(path, "memory");
    if (!m->is_object()) {
      err = r.error(mpath, "expected an object or null");
      return std::nullopt;
    }
    GpuMemory mem;
    const json* f = r.member(*m, mpath, "total", err);
    if (!f) return std::nullopt;
    auto total = r.u64(*f, Reader::join(mpath, "total"), err);
    if (!total) return std::nullopt;
    mem.total = *total;
    if (!(f = r.member(*m, mpath, "used", err))) return std::nullopt;
    auto used = r.u64(*f, Reader::join(mpath, "used"), err);
    if (!used) return std::nullopt;
    mem.used = *used;
    if (!(f = r.member(*m, mpath, "reserved", err))) return std::nullopt;
    if (!f->is_null()) {
      auto reserved = r.u64(*f, Reader::join(mpath, "reserved"), err);
      if (!reserved) return std::nullopt;
      mem.reserved = *reserved;
    }
    d.memory = mem;
  }

  if (!(m = r.member(v, path, "processes", err))) return std::nullopt;
  const std::string ppath = Reader::join(path, "processes");
  if (!m->is_array()) {
    err = r.error(ppath, "expected an array");
    return std::nullopt;
  }
  for (std::size_t i = 0; i < m->size(); ++i) {
    const json& p = (*m)[i];
    const std::string epath = ppath + "[" + std::to_string(i) + "]";
    if (!p.is_object()) {
      err = r.error(epath, "expected an object");
      return std::nullopt;
    }
    GpuProcess proc;
    const json* f = r.member(p, epath, "pid", err);
    if (!f) return std::nullopt;
    auto pid = r.u64(*f, Reader::join(epath, "pid"), err, kU32Max);
    if (!pid) return std::nullopt;
    proc.pid = static_cast<std::uint32_t>(*pid);
    if (!(f = r.member(p, epath, "used_memory", err))) return std::nullopt;
    if (!f->is_null()) {
      auto used = r.u64(*f, Reader::join(epath, "used_memory"), err);
      if (!used) return std::nullopt;
      proc.used_memory = *used;
    }
    d.processes.push_back(proc);
  }
  return d;
}

}  // namespace

json snapshot_to_json(const GpuSnapshot& snapshot) {
  json devices = json::array();
  for (const auto& d : snapshot.devices) devices.push_back(device_to_json(d));
  json out = json::object();
  out["driver_version"] = snapshot.driver_version;
  out["devices"] = std::move(devices);
  return out;
}

std::string snapshot_to_json_text(const GpuSnapshot& snapshot) { return snapshot_to_json(snapshot).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

sys::Result<GpuSnapshot> snapshot_from_json(const json& doc, std::string_view what) {
  const Reader r(what);
  if (!doc.is_object()) return r.error("(top level)", "expected an object");
  std::optional<sys::Error> err;
  GpuSnapshot snap;
  const json* m = r.member(doc, "", "driver_version", err);
  if (!m) return *err;
  auto version = r.str(*m, "driver_version", err);
  if (!version) return *err;
  snap.driver_version = std::move(*version);
  if (!(m = r.member(doc, "", "devices", err))) return *err;
  if (!m->is_array()) return r.error("devices", "expected an array");
  for (std::size_t i = 0; i < m->size(); ++i) {
    auto dev = device_from_json(r, (*m)[i], "devices[" + std::to_string(i) + "]", err);
    if (!dev) return *err;
    snap.devices.push_back(std::move(*dev));
  }
  return snap;
}

sys::Result<GpuSnapshot> snapshot_from_json_text(std::string_view text, std::string_view what) {
  json doc;
  try {
    doc = json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    // e.byte says where; the library's own text is long and names no file.
    return sys::Error{EINVAL, std::string(what) + ": not valid JSON (at byte " + std::to_string(e.byte) + ")"};
  } catch (const json::exception& e) {
    // Well-formed text the library still refuses: a number too large for a
    // double (out_of_range), say. Found by the fuzzer; must not abort.
    return sys::Error{EINVAL, std::string(what) + ": not usable JSON (" + e.what() + ")"};
  }
  return snapshot_from_json(doc, what);
}

}  // namespace gpureap::gpu
