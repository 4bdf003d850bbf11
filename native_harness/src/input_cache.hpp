// Device-resident copies of input files (protocol 2, `input_cache`): a file the serve loop has
// uploaded once is copied device-to-device into later requests' buffers instead of being read
// and uploaded again. Entries are keyed by (path, size, mtime_ns, inode, device), so a file
// rewritten in place is reloaded; the least recently used entries are evicted to stay within
// the request's budget, or when an allocation runs out of device memory.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "cuda_raii.hpp"
#include "staging.hpp"

namespace kernelopt {

// Per-request counts, reported as the answer's "input_cache" object.
struct CacheCounters {
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;
  std::uint64_t evictions = 0;
};

// What identifies one version of a file.
struct FileIdentity {
  std::uint64_t size = 0;
  std::int64_t mtime_ns = 0;
  std::uint64_t inode = 0;
  std::uint64_t device = 0;
  bool operator==(const FileIdentity& o) const noexcept {
    return size == o.size && mtime_ns == o.mtime_ns && inode == o.inode && device == o.device;
  }
};

// stat() of a regular file; throws IoError.
FileIdentity identify_file(const std::string& path);

class InputCache {
 public:
  using Entry = std::shared_ptr<const detail::DeviceBuffer>;

  // Entries are allocated and, once uploaded, protected through `staging` (read-only where
  // the device supports it), which must outlive the cache.
  explicit InputCache(detail::Staging& staging) : staging_(staging) {}

  // Starts a request: resets the counters and sets the budget in bytes.
  void begin_request(std::uint64_t budget_bytes);

  // The device copy of `path`, which must hold `bytes` bytes (IoError otherwise). A miss reads
  // the file and uploads it on `stream` (synchronously). A file larger than the budget is
  // uploaded but not kept. Either way the upload has completed and the entry is read-only for
  // kernels where staging allows (staging.hpp). The entry stays valid while the caller holds it,
  // even if it is evicted meanwhile. nullptr for an empty file. Throws IoError, CudaError.
  Entry get(const std::string& path, std::uint64_t bytes, CUstream stream);

  // The device copy of an input drawn on the device (protocol 2 "input_draw"): `key` names the
  // draw (seed, argument, dtype, spec; never an absolute path, so never a file's key), `fill`
  // enqueues the writing of its `bytes` on `stream`. Kept, evicted and protected like a file's
  // copy; nullptr for 0 bytes. Throws CudaError.
  Entry get_drawn(const std::string& key, std::uint64_t bytes, CUstream stream,
                  const std::function<void(CUdeviceptr)>& fill);

  // Expected values kept on the device (feature device_expected), under the cache key
  // "kept:" + `key`. `buffer` holds `bytes` (nullptr for 0), uploaded, protected and hidden by
  // the caller. Replaces any entry of that key (not an eviction) and is then an ordinary LRU
  // entry, counted in the budget; no miss is counted. Larger than the budget: not kept (false).
  bool keep(const std::string& key, Entry buffer, std::uint64_t bytes);
  struct Kept {
    Entry buffer;  // nullptr for 0 bytes
    std::uint64_t bytes = 0;
  };
  // The copy kept under `key` (a hit, and now the most recent entry), or none.
  std::optional<Kept> find_kept(const std::string& key);

  // Drops the least recently used entry; false when there is none. The memory is freed once
  // no caller holds the entry.
  bool evict_one();

  // Drops every entry (at the end of the session, before the context goes).
  void clear() noexcept;

  const CacheCounters& counters() const noexcept { return counters_; }
  std::uint64_t resident_bytes() const noexcept { return resident_bytes_; }
  std::size_t entries() const noexcept { return map_.size(); }

 private:
  struct Slot {
    FileIdentity identity;
    Entry buffer;
    std::list<std::string>::iterator lru;  // position in lru_ (front: most recent)
  };

  void erase(const std::string& path);
  // A miss: a new entry of `bytes` written by `write` (which may throw before anything is
  // queued), synchronised, protected, and kept under `key` when it fits the budget.
  Entry insert(const std::string& key, const FileIdentity& id, std::uint64_t bytes, CUstream stream,
               const std::function<void(CUdeviceptr)>& write);
  // A device buffer of `bytes`, evicting entries while the device is out of memory.
  std::shared_ptr<detail::DeviceBuffer> allocate(std::uint64_t bytes);

  detail::Staging& staging_;
  std::unordered_map<std::string, Slot> map_;
  std::list<std::string> lru_;
  std::uint64_t resident_bytes_ = 0;
  std::uint64_t budget_bytes_ = 0;
  CacheCounters counters_;
};

}  // namespace kernelopt
