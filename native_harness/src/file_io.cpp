#include "file_io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "errors.hpp"

namespace kernelopt {
namespace {

[[noreturn]] void fail(const std::string& what, const std::string& path, int err) {
  throw IoError(what + " " + path + ": " + std::strerror(err));
}

// Closes the descriptor on every path out, including exceptions.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
};

}  // namespace

std::uint64_t file_size(const std::string& path) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) fail("cannot stat", path, errno);
  if (!S_ISREG(st.st_mode)) throw IoError("not a regular file: " + path);
  return static_cast<std::uint64_t>(st.st_size);
}

std::vector<std::uint8_t> read_file(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) fail("cannot open", path, errno);
  struct stat st{};
  if (::fstat(fd.get(), &st) != 0) fail("cannot stat", path, errno);
  if (!S_ISREG(st.st_mode)) throw IoError("not a regular file: " + path);

  std::vector<std::uint8_t> data(static_cast<std::size_t>(st.st_size));
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::read(fd.get(), data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("cannot read", path, errno);
    }
    if (n == 0) throw IoError("cannot read " + path + ": file shrank while being read");
    done += static_cast<std::size_t>(n);
  }
  return data;
}

void write_file(const std::string& path, const std::uint8_t* data, std::size_t size) {
  Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) fail("cannot create", path, errno);
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd.get(), data + done, size - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("cannot write", path, errno);
    }
    done += static_cast<std::size_t>(n);
  }
  // close() can report a deferred write error (NFS, full disk); an output that silently lost
  // its tail would look like a wrong kernel result.
  if (::close(fd.release()) != 0) fail("cannot write", path, errno);
}

std::string read_all_fd(int fd) {
  std::string out;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw IoError(std::string("cannot read standard input: ") + std::strerror(errno));
    }
    if (n == 0) return out;
    out.append(buf, static_cast<std::size_t>(n));
  }
}

bool write_all_fd(int fd, const std::string& data) noexcept {
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    done += static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace kernelopt
