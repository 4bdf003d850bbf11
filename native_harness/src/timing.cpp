#include "timing.hpp"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "check.hpp"
#include "cuda_raii.hpp"
#include "stats.hpp"

namespace kernelopt {
namespace {

using detail::Event;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

// Launches enqueued behind one ko_spin: each sample is a few commands (re-init, flush, two
// event records, the launch), so 32 samples stay well inside the driver's launch queue; a full
// queue would block the host while the spin kernel holds the stream.
constexpr std::size_t blocking_batch = 32;
// ko_spin gives up after this long (measured on the GPU with %globaltimer), so a host that
// never releases it cannot hang the device.
constexpr unsigned long long spin_timeout_ns = 1000000000ull;
// launch_overhead_ms: ko_empty is measured with at most this many samples and warm-ups.
constexpr unsigned overhead_iterations = 200;
constexpr unsigned overhead_warmup = 10;
// Graph mode without graph_batch: single launches timed to choose the batch.
constexpr unsigned graph_probe_launches = 20;

// Two 32-bit words of pinned host memory mapped into the device: [0] the release flag ko_spin
// waits for, [1] set by ko_spin when it gave up waiting.
class HostFlag {
 public:
  HostFlag(const detail::DriverApi& drv, CUstream stream) : drv_(drv), stream_(stream) {
    void* p = nullptr;
    KO_CU(drv_.cuMemHostAlloc(&p, 2 * sizeof(std::uint32_t),
                              CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
    host_ = static_cast<std::uint32_t*>(p);
    host_[0] = 1;
    host_[1] = 0;
    KO_CU(drv_.cuMemHostGetDevicePointer(&device_, p, 0));
  }
  ~HostFlag() {
    // Whatever happened, let a spinning kernel go before the memory it reads is freed.
    release();
    drv_.cuStreamSynchronize(stream_);
    drv_.cuMemFreeHost(host_);
  }
  HostFlag(const HostFlag&) = delete;
  HostFlag& operator=(const HostFlag&) = delete;

  void arm() noexcept {
    __atomic_store_n(&host_[1], 0u, __ATOMIC_SEQ_CST);
    __atomic_store_n(&host_[0], 0u, __ATOMIC_SEQ_CST);
  }
  void release() noexcept { __atomic_store_n(&host_[0], 1u, __ATOMIC_SEQ_CST); }
  bool timed_out() const noexcept { return __atomic_load_n(&host_[1], __ATOMIC_SEQ_CST) != 0; }
  CUdeviceptr release_word() const noexcept { return device_; }
  CUdeviceptr timed_out_word() const noexcept { return device_ + sizeof(std::uint32_t); }

 private:
  const detail::DriverApi& drv_;
  CUstream stream_;
  std::uint32_t* host_ = nullptr;
  CUdeviceptr device_ = 0;
};

class GraphExec {
 public:
  GraphExec() = default;
  explicit GraphExec(CUgraphExec e) : exec_(e) {}
  ~GraphExec() {
    if (exec_ != nullptr) {
      if (const auto* drv = detail::loaded_driver()) drv->cuGraphExecDestroy(exec_);
    }
  }
  GraphExec(GraphExec&& o) noexcept : exec_(std::exchange(o.exec_, nullptr)) {}
  GraphExec& operator=(GraphExec&& o) noexcept {
    std::swap(exec_, o.exec_);
    return *this;
  }
  CUgraphExec get() const noexcept { return exec_; }

 private:
  CUgraphExec exec_ = nullptr;
};

// `batch` back-to-back calls of `launch`, captured from the session's stream into a graph.
GraphExec capture_graph(Session& s, const std::function<void()>& launch, unsigned batch) {
  const auto& drv = s.drv();
  // Relaxed: a library call being captured may allocate or query (cuBLAS), which the stricter
  // modes refuse; nothing else runs on this thread meanwhile.
  KO_CU(drv.cuStreamBeginCapture(s.stream(), CU_STREAM_CAPTURE_MODE_RELAXED));
  CUgraph graph = nullptr;
  try {
    for (unsigned i = 0; i < batch; ++i) launch();
  } catch (...) {
    // Leave the stream out of capture mode before anything else is queued on it.
    drv.cuStreamEndCapture(s.stream(), &graph);
    if (graph != nullptr) drv.cuGraphDestroy(graph);
    throw;
  }
  KO_CU(drv.cuStreamEndCapture(s.stream(), &graph));
  CUgraphExec exec = nullptr;
  const CUresult r = drv.cuGraphInstantiate(&exec, graph, 0);
  drv.cuGraphDestroy(graph);
  if (r != CUDA_SUCCESS) detail::throw_cuda_error(r, "cuGraphInstantiate(...)", __FILE__, __LINE__);
  return GraphExec(exec);
}

// Takes samples: each one is prepare (outside), start event, `unit`, stop event; its time is
// the events' difference divided by `launches_per_unit`. Without blocking every sample is
// queued before one synchronization; with it, batches of blocking_batch are queued behind
// ko_spin and released together. Blocking batches are pipelined: the next batch's ko_spin is
// queued behind the current batch and its samples are enqueued while the GPU runs this one, so
// the GPU does not idle while the host enqueues (two flags, two sets of events, taking turns).
// A batch ending at a checked sample is the exception: its checks settle with the stream idle
// before anything later is enqueued.
class Sampler {
 public:
  Sampler(Session& s, CUfunction spin) : s_(s), drv_(s.drv()), spin_(spin) {
    if (spin_ != nullptr) {
      flags_[0].emplace(drv_, s_.stream());
      flags_[1].emplace(drv_, s_.stream());
    }
  }

  // `after` (may be empty) runs after each sample's stop event with the sample's index in `out`;
  // when it returns true the batch ends there and `settle` runs once the stream is idle, before
  // the next sample is enqueued (TimedWork).
  void collect(const std::function<void()>& prepare, const std::function<void()>& unit,
               std::size_t count, unsigned launches_per_unit, std::vector<double>& out,
               const std::function<bool(std::size_t)>& after = {},
               const std::function<void()>& settle = {}) {
    const std::size_t batch = blocking() ? std::min(count, blocking_batch) : count;
    if (batch == 0) return;
    // Every event exists before the first launch, so creating one never lands in a window.
    // The second set only takes turns in blocking mode: without it each batch is read at once.
    for (std::size_t k = 0; k < (blocking() ? 2u : 1u); ++k) {
      EventSet& set = events_[k];
      while (set.starts.size() < batch) {
        set.starts.emplace_back();
        set.stops.emplace_back();
      }
    }
    const CUstream stream = s_.stream();
    const std::size_t first = out.size();
    std::optional<Pending> pending;  // enqueued and released, not yet read
    std::size_t queued = 0;          // samples enqueued so far
    for (unsigned turn = 0; queued < count; turn = blocking() ? turn ^ 1u : 0u) {
      const std::size_t room = std::min(batch, count - queued);
      if (blocking()) hold(*flags_[turn]);
      EventSet& ev = events_[turn];
      std::size_t n = 0;
      bool unsettled = false;
      while (n < room && !unsettled) {
        if (prepare) prepare();
        KO_CU(drv_.cuEventRecord(ev.starts[n].get(), stream));
        unit();
        KO_CU(drv_.cuEventRecord(ev.stops[n].get(), stream));
        if (after) unsettled = after(first + queued + n);
        ++n;
      }
      if (blocking()) flags_[turn]->release();
      queued += n;
      if (pending) {  // it ran while this batch was queued: wait for its last stop event
        KO_CU(drv_.cuEventSynchronize(events_[pending->turn].stops[pending->samples - 1].get()));
        read(*pending, launches_per_unit, out);
      }
      pending = Pending{turn, n};
      if (!blocking() || unsettled || queued == count) {
        KO_CU(drv_.cuStreamSynchronize(stream));
        if (unsettled && settle) settle();
        read(*pending, launches_per_unit, out);
        pending.reset();
      }
    }
  }

  bool blocking() const noexcept { return spin_ != nullptr; }
  bool timed_out() const noexcept { return timed_out_; }

 private:
  struct EventSet {
    std::vector<Event> starts;
    std::vector<Event> stops;
  };
  struct Pending {
    unsigned turn;
    std::size_t samples;
  };

  void hold(HostFlag& flag) {
    flag.arm();
    CUdeviceptr release = flag.release_word();
    CUdeviceptr timed_out = flag.timed_out_word();
    unsigned long long timeout = spin_timeout_ns;
    void* params[] = {&release, &timed_out, &timeout};
    KO_CU(drv_.cuLaunchKernel(spin_, 1, 1, 1, 1, 1, 1, 0, s_.stream(), params, nullptr));
  }

  // The times of a batch, in order, once its last stop event has completed.
  void read(const Pending& p, unsigned launches_per_unit, std::vector<double>& out) {
    const EventSet& ev = events_[p.turn];
    if (blocking() && flags_[p.turn]->timed_out()) timed_out_ = true;
    for (std::size_t i = 0; i < p.samples; ++i) {
      float ms = 0;
      KO_CU(drv_.cuEventElapsedTime(&ms, ev.starts[i].get(), ev.stops[i].get()));
      const double t = float_to_double(ms);
      out.push_back(launches_per_unit == 1 ? t : t / launches_per_unit);
    }
  }

  Session& s_;
  const detail::DriverApi& drv_;
  CUfunction spin_;
  std::optional<HostFlag> flags_[2];
  EventSet events_[2];
  bool timed_out_ = false;
};

struct Measurement {
  std::vector<double> times;
  unsigned graph_batch = 1;
  std::optional<json> adaptive;
};

Measurement measure(Session& s, Sampler& sampler, const TimingConfig& cfg, const TimedWork& work,
                    Clock::time_point t0) {
  const auto& drv = s.drv();
  Measurement m;
  auto plain = [&] {
    if (work.prepare) work.prepare();
    work.launch();
  };
  std::function<void()> unit = work.launch;
  GraphExec exec;
  if (cfg.mode == TimingMode::events) {
    for (unsigned i = 0; i < cfg.warmup; ++i) plain();
  } else {
    unsigned warm_left = cfg.warmup;
    m.graph_batch = cfg.graph_batch;
    if (m.graph_batch == 0) {
      // The first warm-up launches, timed one by one, choose the batch.
      const unsigned probe = std::clamp(cfg.warmup, 1u, graph_probe_launches);
      std::vector<double> probe_times;
      sampler.collect(work.prepare, work.launch, probe, 1, probe_times);
      warm_left -= std::min(warm_left, probe);
      m.graph_batch = graph_batch_for(summarize(probe_times).median, 0.2, max_graph_batch);
    }
    for (unsigned i = 0; i < warm_left; ++i) plain();
    exec = capture_graph(s, work.launch, m.graph_batch);
    // One untimed replay: the first launch of a graph uploads it.
    if (work.prepare) work.prepare();
    KO_CU(drv.cuGraphLaunch(exec.get(), s.stream()));
    unit = [&] { KO_CU(drv.cuGraphLaunch(exec.get(), s.stream())); };
  }

  sampler.collect(work.prepare, unit, cfg.iterations, m.graph_batch, m.times, work.after,
                  work.settle);

  if (cfg.adaptive) {
    AdaptiveLimits limits;
    limits.target_rse = cfg.adaptive->target_rse;
    limits.max_ms = cfg.adaptive->max_ms;
    limits.max_iterations = cfg.adaptive->max_iterations;
    double rse = 0;
    AdaptiveStep step = AdaptiveStep::more;
    for (;;) {
      rse = median_rse(summarize(m.times), m.times.size());
      const double elapsed = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      step = adaptive_step(rse, m.times.size(), elapsed, limits);
      if (step != AdaptiveStep::more) break;
      sampler.collect(work.prepare, unit, adaptive_round(cfg.iterations, m.times.size(), limits),
                      m.graph_batch, m.times, work.after, work.settle);
    }
    json a = json::object();
    a["rse"] = std::isfinite(rse) ? json(rse) : json(nullptr);
    a["converged"] = step == AdaptiveStep::converged;
    a["samples"] = m.times.size();
    m.adaptive = std::move(a);
  }
  return m;
}

}  // namespace

double float_to_double(float value) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, value);
  if (r.ec != std::errc()) return static_cast<double>(value);
  *r.ptr = '\0';
  return std::strtod(buf, nullptr);
}

json time_work(Session& session, const TimingConfig& timing, const TimedWork& work, bool flush_l2) {
  const auto t0 = Clock::now();
  const auto& drv = session.drv();
  CUfunction spin = timing.blocking ? session.support().function("ko_spin") : nullptr;
  Sampler sampler(session, spin);

  const Measurement m = measure(session, sampler, timing, work, t0);
  const Summary sum = summarize(m.times);

  // The floor: an empty kernel measured the same way (mode, blocking, graph batch), no flush;
  // the session keeps it a while (Session::launch_overhead), so the cases and candidates of
  // one search measure it once.
  json overhead = nullptr;
  if (session.support().loaded()) {
    TimingConfig cfg;
    cfg.warmup = std::min(timing.warmup, overhead_warmup);
    cfg.iterations = std::min(timing.iterations, overhead_iterations);
    cfg.mode = timing.mode;
    cfg.blocking = timing.blocking;
    cfg.graph_batch = m.graph_batch;
    const std::string key = std::to_string(static_cast<int>(cfg.mode)) + "/" +
                            std::to_string(cfg.blocking) + "/" + std::to_string(cfg.graph_batch) +
                            "/" + std::to_string(cfg.warmup) + "/" + std::to_string(cfg.iterations);
    if (const auto kept = session.launch_overhead(key)) {
      overhead = *kept;
    } else {
      CUfunction empty = session.support().function("ko_empty");
      TimedWork nothing;
      nothing.launch = [&] {
        KO_CU(drv.cuLaunchKernel(empty, 1, 1, 1, 1, 1, 1, 0, session.stream(), nullptr, nullptr));
      };
      const double median = summarize(measure(session, sampler, cfg, nothing, t0).times).median;
      session.keep_launch_overhead(key, median);
      overhead = median;
    }
  }

  json t = json::object();
  t["warmup"] = timing.warmup;
  t["iterations"] = timing.iterations;
  t["flush_l2"] = flush_l2;
  t["times_ms"] = m.times;
  t["median_ms"] = sum.median;
  t["mean_ms"] = sum.mean;
  t["min_ms"] = sum.min;
  t["max_ms"] = sum.max;
  t["stdev_ms"] = sum.stdev;
  t["q1_ms"] = sum.q1;
  t["q3_ms"] = sum.q3;
  t["mode"] = timing.mode == TimingMode::graph ? "graph" : "events";
  t["blocking"] = timing.blocking;
  t["graph_batch"] = timing.mode == TimingMode::graph ? json(m.graph_batch) : json(nullptr);
  t["adaptive"] = m.adaptive ? *m.adaptive : json(nullptr);
  t["launch_overhead_ms"] = overhead;
  t["blocking_timed_out"] = sampler.timed_out();
  return t;
}

double time_one_launch(Session& session, const TimedWork& work) {
  const auto& drv = session.drv();
  Event start;
  Event stop;
  if (work.prepare) work.prepare();
  KO_CU(drv.cuEventRecord(start.get(), session.stream()));
  work.launch();
  KO_CU(drv.cuEventRecord(stop.get(), session.stream()));
  KO_CU(drv.cuStreamSynchronize(session.stream()));
  float ms = 0;
  KO_CU(drv.cuEventElapsedTime(&ms, start.get(), stop.get()));
  return float_to_double(ms);
}

}  // namespace kernelopt
