#include "input_cache.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "check.hpp"
#include "errors.hpp"
#include "file_io.hpp"
#include "request.hpp"

namespace kernelopt {

FileIdentity identify_file(const std::string& path) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) {
    throw IoError("cannot stat " + path + ": " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) throw IoError("not a regular file: " + path);
  FileIdentity id;
  id.size = static_cast<std::uint64_t>(st.st_size);
  id.mtime_ns = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  id.inode = static_cast<std::uint64_t>(st.st_ino);
  id.device = static_cast<std::uint64_t>(st.st_dev);
  return id;
}

void InputCache::begin_request(std::uint64_t budget_bytes) {
  counters_ = {};
  budget_bytes_ = budget_bytes;
  while (resident_bytes_ > budget_bytes_ && evict_one()) {
  }
}

InputCache::Entry InputCache::get(const std::string& path, std::uint64_t bytes, CUstream stream) {
  const FileIdentity id = identify_file(path);
  if (id.size != bytes) {
    throw IoError(path + " has " + std::to_string(id.size) + " bytes, not the " +
                  std::to_string(bytes) +
                  " the buffer needs (it changed while the harness "
                  "was running?)");
  }
  if (const auto it = map_.find(path); it != map_.end()) {
    if (it->second.identity == id) {
      ++counters_.hits;
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      return it->second.buffer;
    }
    erase(path);  // a stale version of the file: not an eviction, a replacement
  }
  ++counters_.misses;
  if (bytes == 0) return nullptr;
  const auto data = read_file(path);
  if (data.size() != bytes) throw IoError(path + " changed size while being read");
  const auto& drv = detail::load_driver();
  return insert(path, id, bytes, stream, [&](CUdeviceptr dst) {
    KO_CU(drv.cuMemcpyHtoDAsync(dst, data.data(), bytes, stream));
  });
}

InputCache::Entry InputCache::get_drawn(const std::string& key, std::uint64_t bytes,
                                        CUstream stream,
                                        const std::function<void(CUdeviceptr)>& fill) {
  FileIdentity id;
  id.size = bytes;  // the key names everything else
  if (const auto it = map_.find(key); it != map_.end() && it->second.identity == id) {
    ++counters_.hits;
    lru_.splice(lru_.begin(), lru_, it->second.lru);
    return it->second.buffer;
  }
  erase(key);
  ++counters_.misses;
  if (bytes == 0) return nullptr;
  return insert(key, id, bytes, stream, fill);
}

bool InputCache::keep(const std::string& key, Entry buffer, std::uint64_t bytes) {
  const std::string name = std::string(kept_prefix) + key;
  erase(name);  // an earlier copy of the key: a replacement, not an eviction
  if (bytes > budget_bytes_) return false;
  while (resident_bytes_ + bytes > budget_bytes_ && evict_one()) {
  }
  FileIdentity id;
  id.size = bytes;
  lru_.push_front(name);
  map_[name] = Slot{id, std::move(buffer), lru_.begin()};
  resident_bytes_ += bytes;
  return true;
}

std::optional<InputCache::Kept> InputCache::find_kept(const std::string& key) {
  const auto it = map_.find(std::string(kept_prefix) + key);
  if (it == map_.end()) return std::nullopt;
  ++counters_.hits;
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  return Kept{it->second.buffer, it->second.identity.size};
}

InputCache::Entry InputCache::insert(const std::string& key, const FileIdentity& id,
                                     std::uint64_t bytes, CUstream stream,
                                     const std::function<void(CUdeviceptr)>& write) {
  const bool keep = bytes <= budget_bytes_;
  if (keep) {
    while (resident_bytes_ + bytes > budget_bytes_ && evict_one()) {
    }
  }
  auto buffer = allocate(bytes);
  write(buffer->get());
  KO_CU(detail::load_driver().cuStreamSynchronize(stream));
  staging_.protect(*buffer);
  if (!keep) return buffer;

  lru_.push_front(key);
  map_[key] = Slot{id, buffer, lru_.begin()};
  resident_bytes_ += bytes;
  return buffer;
}

std::shared_ptr<detail::DeviceBuffer> InputCache::allocate(std::uint64_t bytes) {
  for (;;) {
    try {
      return std::make_shared<detail::DeviceBuffer>(staging_.allocate(bytes));
    } catch (const detail::CudaError& e) {
      if (e.code() != CUDA_ERROR_OUT_OF_MEMORY || !evict_one()) throw;
    }
  }
}

bool InputCache::evict_one() {
  if (lru_.empty()) return false;
  const std::string victim = lru_.back();  // a copy: erase() destroys the list's string
  erase(victim);
  ++counters_.evictions;
  return true;
}

void InputCache::erase(const std::string& path) {
  const auto it = map_.find(path);
  if (it == map_.end()) return;
  resident_bytes_ -= it->second.buffer ? it->second.buffer->size() : 0;
  lru_.erase(it->second.lru);
  map_.erase(it);
}

void InputCache::clear() noexcept {
  map_.clear();
  lru_.clear();
  resident_bytes_ = 0;
}

}  // namespace kernelopt
