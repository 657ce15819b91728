#include "exporter/exporter.hpp"

#include <CivetServer.h>
#include <civetweb.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <prometheus/collectable.h>
#include <prometheus/text_serializer.h>
#include <sys/mman.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

#include "exporter/metrics.hpp"
#include "exporter/tls_shim.hpp"
#include "gpu/activity.hpp"
#include "proc/kernel_fds.hpp"
#include "report/report.hpp"
#include "sys/host_root.hpp"
#include "sys/unique_fd.hpp"

namespace gpureap::exporter {

namespace {

using Steady = std::chrono::steady_clock;

double seconds_since_epoch(std::chrono::system_clock::time_point t) {
  return std::chrono::duration<double>(t.time_since_epoch()).count();
}

void respond(mg_connection* conn, int status, const char* reason, std::string_view content_type,
             std::string_view body, std::string_view extra_headers = {}) {
  const std::string head = fmt::format(
      "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nCache-Control: no-store\r\n{}"
      "Connection: close\r\n\r\n",
      status, reason, content_type, body.size(), extra_headers);
  mg_write(conn, head.data(), head.size());
  mg_write(conn, body.data(), body.size());
}

// The key and the certificate in one PEM, as civetweb wants them, in an
// anonymous file: the key never lands in a named file of ours.
sys::Result<sys::UniqueFd> tls_pem(const TlsConfig& tls) {
  auto key = sys::read_file_at(AT_FDCWD, tls.key_file.c_str(), tls.key_file);
  if (!key) return key.error();
  auto cert = sys::read_file_at(AT_FDCWD, tls.cert_file.c_str(), tls.cert_file);
  if (!cert) return cert.error();
  sys::UniqueFd fd(::memfd_create("gpureap-tls", MFD_CLOEXEC));
  if (!fd) return sys::errno_error(errno, "memfd_create for the TLS key");
  const std::string pem = *key + "\n" + *cert;
  std::size_t off = 0;
  while (off < pem.size()) {
    const ssize_t n = ::write(fd.get(), pem.data() + off, pem.size() - off);
    if (n <= 0) return sys::errno_error(errno, "write the TLS key to a memfd");
    off += static_cast<std::size_t>(n);
  }
  return fd;
}

}  // namespace

struct Exporter::Impl {
  ExporterConfig config;
  sys::HostRoot root;
  std::unique_ptr<gpu::GpuBackend> backend;  // the scan thread's alone
  container::Resolvers resolvers;
  // The scan's BPF programs, loaded by the first scan and kept for the next
  // ones (the scan thread's alone): each scan skips the verifier.
  proc::KernelPrograms kernel_programs;
  Log log;

  mutable std::mutex mutex;  // guards what follows
  std::condition_variable wake;
  bool stopping = false;
  bool scanner_done = false;
  std::shared_ptr<const View> view;
  std::uint64_t scans = 0;
  std::uint64_t errors = 0;
  Steady::time_point started = Steady::now();
  std::optional<Steady::time_point> last_success;
  std::string last_error;

  Impl(ExporterConfig c, sys::HostRoot r, std::unique_ptr<gpu::GpuBackend> b, Log l)
      : config(std::move(c)), root(std::move(r)), backend(std::move(b)), log(std::move(l)) {}

  // Healthy while the last good scan (or the start) is at most three intervals old.
  struct Health {
    bool healthy = true;
    std::string reason;
  };
  Health health() const {
    std::lock_guard lock(mutex);
    return health_locked(Steady::now());
  }
  Health health_locked(Steady::time_point now) const {
    const auto reference = last_success.value_or(started);
    const double age = std::chrono::duration<double>(now - reference).count();
    const double limit = 3 * std::chrono::duration<double>(config.interval).count();
    Health h;
    if (age <= limit) {
      h.reason = last_success ? fmt::format("ok: last scan {:.1f} s ago", age) : "ok: starting, no scan finished yet";
      return h;
    }
    h.healthy = false;
    h.reason = last_success ? fmt::format("stale: the last good scan is {:.1f} s old (limit: 3 intervals, {:.1f} s)",
                                          age, limit)
                            : fmt::format("no scan has succeeded in {:.1f} s (limit: 3 intervals, {:.1f} s)", age, limit);
    if (!last_error.empty()) h.reason += "; last error: " + last_error;
    return h;
  }

  std::vector<prometheus::MetricFamily> collect() const {
    std::shared_ptr<const View> v;
    ScanHealth h;
    {
      std::lock_guard lock(mutex);
      v = view;
      h.scans = scans;
      h.errors = errors;
      h.stale = !health_locked(Steady::now()).healthy;
    }
    h.version = config.version;
    return render_metrics(v.get(), h);  // rendered outside the lock: a scan never waits for a scrape
  }

  std::string snapshot_body() const {
    std::lock_guard lock(mutex);
    return view ? view->snapshot_json : std::string();
  }

  void scan_once(gpu::ActivitySampler& sampler) {
    const auto t0 = Steady::now();
    node::SnapshotOptions options = config.snapshot;
    options.kernel_programs = &kernel_programs;
    auto snap = node::take_snapshot(root, *backend, resolvers, options);
    if (!snap) {
      bool repeated = false;
      {
        std::lock_guard lock(mutex);
        ++scans;
        ++errors;
        repeated = last_error == snap.error().message;
        last_error = snap.error().message;
      }
      if (!repeated) log("scan failed: " + snap.error().message);  // said once, counted always
      return;
    }
    const auto now = std::chrono::system_clock::now();
    sampler.add_listing(snap->gpu, now);
    snap->activity = sampler.summarize(now);
    const auto found = findings::detect_all(*snap, config.detect);
    auto v = std::make_shared<View>(build_view(*snap, found, config.view));
    if (config.enable_snapshot) {
      if (!config.snapshot_arguments) redact_arguments(*snap);
      char* buffer = nullptr;
      std::size_t size = 0;
      std::FILE* out = ::open_memstream(&buffer, &size);
      if (out != nullptr) {
        const bool written = report::write_trace_json(out, *snap, found);
        // fclose writes the memstream's last bytes and sets buffer and size.
        const bool closed = std::fclose(out) == 0;
        if (written && closed) v->snapshot_json.assign(buffer, size);
        std::free(buffer);  // NOLINT(cppcoreguidelines-no-malloc): open_memstream's buffer
      }
    }
    const auto t1 = Steady::now();
    v->scan_seconds = std::chrono::duration<double>(t1 - t0).count();
    v->finished_at = seconds_since_epoch(std::chrono::system_clock::now());
    bool recovered = false;
    {
      std::lock_guard lock(mutex);
      ++scans;
      view = std::move(v);
      last_success = t1;
      recovered = !last_error.empty();
      last_error.clear();
    }
    if (recovered) log("scans succeed again");
  }

  void scan_loop() {
    const auto window = std::max(std::chrono::milliseconds(static_cast<long long>(config.detect.idle_seconds * 1000)),
                                 std::chrono::milliseconds(static_cast<long long>(config.detect.spin_seconds * 1000))) +
                        config.interval;
    gpu::ActivitySampler sampler(window, config.sample_period);
    auto next_scan = Steady::now();
    auto next_sample = next_scan;
    for (;;) {
      {
        std::unique_lock lock(mutex);
        wake.wait_until(lock, std::min(next_scan, next_sample), [this] { return stopping; });
        if (stopping) break;
      }
      const auto now = Steady::now();
      if (now >= next_sample) {
        sampler.add_utilization(backend->process_utilization(sampler.since_us()), std::chrono::system_clock::now());
        next_sample = now + config.sample_period;
      }
      if (now >= next_scan) {
        scan_once(sampler);
        next_scan = Steady::now() + config.interval;
      }
    }
    std::lock_guard lock(mutex);
    scanner_done = true;
    wake.notify_all();
  }

  bool allowed(mg_connection* conn) const {
    if (config.web.basic_auth_users.empty()) return true;
    const char* header = mg_get_header(conn, "Authorization");
    if (header != nullptr && authorized(config.web, header)) return true;
    respond(conn, 401, "Unauthorized", "text/plain; charset=utf-8", "unauthorized\n",
            "WWW-Authenticate: Basic realm=\"gpureap\"\r\n");
    return false;
  }

  // The endpoints. Each checks credentials first, so nothing leaves without them.
  struct MetricsHandler : CivetHandler {
    MetricsHandler(const Impl& i, std::unique_ptr<prometheus::Collectable> c) : impl(i), collector(std::move(c)) {}
    bool handleGet(CivetServer* /*server*/, mg_connection* conn) override {
      if (!impl.allowed(conn)) return true;
      const std::string body = prometheus::TextSerializer().Serialize(collector->Collect());
      respond(conn, 200, "OK", "text/plain; version=0.0.4; charset=utf-8", body);
      return true;
    }
    const Impl& impl;
    std::unique_ptr<prometheus::Collectable> collector;
  };
  struct HealthHandler : CivetHandler {
    explicit HealthHandler(const Impl& i) : impl(i) {}
    bool handleGet(CivetServer* /*server*/, mg_connection* conn) override {
      if (!impl.allowed(conn)) return true;
      const Health h = impl.health();
      if (h.healthy) {
        respond(conn, 200, "OK", "text/plain; charset=utf-8", h.reason + "\n");
      } else {
        respond(conn, 503, "Service Unavailable", "text/plain; charset=utf-8", h.reason + "\n");
      }
      return true;
    }
    const Impl& impl;
  };
  struct SnapshotHandler : CivetHandler {
    explicit SnapshotHandler(const Impl& i) : impl(i) {}
    bool handleGet(CivetServer* /*server*/, mg_connection* conn) override {
      if (!impl.allowed(conn)) return true;
      const std::string body = impl.snapshot_body();
      if (body.empty()) {
        respond(conn, 503, "Service Unavailable", "text/plain; charset=utf-8", "no scan finished yet\n");
      } else {
        respond(conn, 200, "OK", "application/json", body);
      }
      return true;
    }
    const Impl& impl;
  };

  std::unique_ptr<MetricsHandler> metrics_handler;
  std::unique_ptr<HealthHandler> health_handler;
  std::unique_ptr<SnapshotHandler> snapshot_handler;
  std::unique_ptr<CivetServer> server;
  std::thread scanner;
};

// The collector prometheus-cpp's serializer renders at scrape time: the
// cached view, never a scan.
class ViewCollector final : public prometheus::Collectable {
 public:
  explicit ViewCollector(const Exporter::Impl& impl) : impl_(impl) {}
  std::vector<prometheus::MetricFamily> Collect() const override { return impl_.collect(); }

 private:
  const Exporter::Impl& impl_;
};

Exporter::Exporter(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

sys::Result<std::unique_ptr<Exporter>> Exporter::start(ExporterConfig config, sys::HostRoot root,
                                                        std::unique_ptr<gpu::GpuBackend> backend, Log log) {
  auto impl = std::make_shared<Impl>(std::move(config), std::move(root), std::move(backend), std::move(log));
  impl->resolvers = container::default_resolvers(impl->root, container::ResolverOptions{});
  sys::UniqueFd pem;
  std::string pem_path;
  if (impl->config.web.tls) {
    if (auto shim = load_tls_shim(); !shim) return shim.error();
    auto fd = tls_pem(*impl->config.web.tls);
    if (!fd) return fd.error();
    pem = std::move(*fd);
    pem_path = "/proc/self/fd/" + std::to_string(pem.get());
  }
  auto options = civetweb_options(impl->config.listen, impl->config.web, pem_path, impl->config.http_threads);
  if (!options) return options.error();
  try {
    impl->server = std::make_unique<CivetServer>(*options);
  } catch (const CivetException& e) {
    return sys::Error{EADDRINUSE, "cannot serve on " + impl->config.listen + ": " + e.what()};
  }
  impl->metrics_handler = std::make_unique<Impl::MetricsHandler>(*impl, std::make_unique<ViewCollector>(*impl));
  impl->health_handler = std::make_unique<Impl::HealthHandler>(*impl);
  impl->server->addHandler("/metrics", *impl->metrics_handler);
  impl->server->addHandler("/healthz", *impl->health_handler);
  if (impl->config.enable_snapshot) {
    impl->snapshot_handler = std::make_unique<Impl::SnapshotHandler>(*impl);
    impl->server->addHandler("/snapshot", *impl->snapshot_handler);
  }
  // The thread shares the state: one stuck in the driver after stop() touches nothing freed.
  impl->scanner = std::thread([impl] { impl->scan_loop(); });
  return std::unique_ptr<Exporter>(new Exporter(std::move(impl)));
}

std::vector<int> Exporter::ports() const {
  return impl_->server ? impl_->server->getListeningPorts() : std::vector<int>{};
}

bool Exporter::stop() {
  if (impl_->server) {
    impl_->server->close();  // no request is being served after this
    impl_->server.reset();
  }
  std::unique_lock lock(impl_->mutex);
  impl_->stopping = true;
  impl_->wake.notify_all();
  // A scan stuck in the driver (bounded by its call timeout) or in a /proc read
  // must not hold the exit up: wait briefly, then leave it.
  const bool done = impl_->wake.wait_for(lock, std::chrono::milliseconds(500), [this] { return impl_->scanner_done; });
  lock.unlock();
  if (impl_->scanner.joinable()) {
    if (done) {
      impl_->scanner.join();
    } else {
      impl_->scanner.detach();
    }
  }
  // Only once joined may the backend be asked (it is the scan thread's).
  return done && !impl_->backend->hung();
}

Exporter::~Exporter() { (void)stop(); }

}  // namespace gpureap::exporter
