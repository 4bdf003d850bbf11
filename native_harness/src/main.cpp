// kernelopt-harness: see PROTOCOL.md for the contract and README.md for usage.
#include <fcntl.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "device_info.hpp"
#include "errors.hpp"
#include "file_io.hpp"
#include "handler.hpp"
#include "response.hpp"
#include "version.hpp"

namespace kernelopt {
namespace {

constexpr const char* usage_text =
    "usage:\n"
    "  kernelopt-harness --version                  print {\"harness\", \"protocol\", "
    "\"features\"}\n"
    "  kernelopt-harness --device-info [--device N] print device N's properties (default 0)\n"
    "  kernelopt-harness run REQUEST.json           handle one request ('-' reads stdin)\n"
    "  kernelopt-harness serve                      one request per stdin line, one answer per\n"
    "                                               line; exits at EOF or after a fatal error\n"
    "The answer is JSON on standard output; everything else goes to standard error.\n"
    "Exit codes: 0 handled, 1 internal error, 2 bad request or usage, 3 no driver or device,\n"
    "4 I/O error, 5 fatal CUDA error (see PROTOCOL.md).\n"
    "Environment: KERNELOPT_LIBCUDA overrides the driver library (default libcuda.so.1).\n";

// Where answers go: the process's original standard output, saved before fd 1 is pointed at
// standard error.
int g_answer_fd = -1;

bool emit(const nlohmann::json& body) {
  // Kernel printf output of this request reaches stderr before its answer is written, so a
  // reader that pairs them per request does not see it under the next one.
  std::fflush(nullptr);
  return write_all_fd(g_answer_fd, serialize(body) + "\n");
}

// A progress line of the request being handled: on the answer stream, which kernels cannot
// write to (their printf goes to standard error), so a reader can trust it.
void progress_line(const nlohmann::json& line) {
  if (!emit(line))
    std::perror("kernelopt-harness: cannot write a progress line to standard output");
}

int finish(const Answer& answer) {
  if (!emit(answer.body)) {
    std::perror("kernelopt-harness: cannot write the answer to standard output");
    return exit_internal;
  }
  return answer.exit_code;
}

int usage_error(const std::string& problem) {
  std::cerr << "kernelopt-harness: " << problem << "\n" << usage_text;
  return finish(error_answer("bad_request", problem, exit_bad_request));
}

int cmd_version() {
  nlohmann::json j = nlohmann::json::object();
  j["harness"] = harness_version;
  j["protocol"] = protocol_version;
  j["features"] = nlohmann::json::array();
  for (const char* feature : harness_features) j["features"].push_back(feature);
  return finish({j, exit_ok});
}

int cmd_device_info(int ordinal) {
  try {
    return finish({device_info_json(ordinal), exit_ok});
  } catch (const DriverUnavailable& e) {
    auto answer = error_answer("driver_unavailable", e.what(), exit_driver_unavailable);
    if (e.code() != 0) {
      answer.body["error"]["call"] = e.call();
      answer.body["error"]["cuda_error"] = e.cuda_error();
      answer.body["error"]["code"] = e.code();
    }
    return finish(answer);
  }
}

int cmd_run(const std::string& path) {
  std::string text;
  try {
    if (path == "-") {
      text = read_all_fd(STDIN_FILENO);
    } else {
      const auto bytes = read_file(path);
      text.assign(bytes.begin(), bytes.end());
    }
  } catch (const IoError& e) {
    return finish(error_answer("io_error", std::string("request: ") + e.what(), exit_io_error));
  }
  Handler handler;
  return finish(handler.handle(text, progress_line));
}

int cmd_serve() {
  Handler handler;
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const Answer answer = handler.handle(line, progress_line);
    if (!emit(answer.body)) {
      std::perror("kernelopt-harness: cannot write the answer to standard output");
      return exit_internal;
    }
    if (ends_session(answer.exit_code)) return answer.exit_code;
  }
  return exit_ok;
}

bool parse_ordinal(const std::string& text, int& out) {
  if (text.empty() || text.size() > 9) return false;
  for (const char c : text) {
    if (c < '0' || c > '9') return false;
  }
  out = std::stoi(text);
  return true;
}

int dispatch(const std::vector<std::string>& args) {
  if (args.empty()) return usage_error("no command given");
  const std::string& cmd = args[0];
  if (cmd == "-h" || cmd == "--help" || cmd == "help") {
    std::cerr << usage_text;
    return exit_ok;
  }
  if (cmd == "--version") {
    if (args.size() != 1) return usage_error("--version takes no arguments");
    return cmd_version();
  }
  if (cmd == "--device-info") {
    int ordinal = 0;
    for (std::size_t i = 1; i < args.size(); ++i) {
      if (args[i] == "--device" && i + 1 < args.size()) {
        if (!parse_ordinal(args[++i], ordinal)) {
          return usage_error("--device needs a non-negative integer, got \"" + args[i] + "\"");
        }
      } else {
        return usage_error("unexpected argument to --device-info: \"" + args[i] + "\"");
      }
    }
    return cmd_device_info(ordinal);
  }
  if (cmd == "run") {
    if (args.size() != 2) return usage_error("run takes exactly one REQUEST.json path");
    return cmd_run(args[1]);
  }
  if (cmd == "serve") {
    if (args.size() != 1) return usage_error("serve takes no arguments");
    return cmd_serve();
  }
  return usage_error("unknown command \"" + cmd + "\"");
}

}  // namespace
}  // namespace kernelopt

int main(int argc, char** argv) {
  using namespace kernelopt;
  // Keep the real stdout for the answer, then point fd 1 at stderr: device printf, driver
  // messages and stray library output can then never corrupt the JSON.
  g_answer_fd = ::fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
  if (g_answer_fd < 0) {
    std::perror("kernelopt-harness: standard output is not usable");
    return exit_internal;
  }
  if (::dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
    // No stderr either: send fd 1 to /dev/null rather than into the answer.
    const int null_fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (null_fd < 0 || ::dup2(null_fd, STDOUT_FILENO) < 0) return exit_internal;
    ::close(null_fd);
  }
  // fd 1 is now a pipe or file, where stdio would buffer fully: device printf (written by the
  // driver through stdout) would then surface requests later, or only at exit.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  // A reader that went away must make write() fail with EPIPE, not kill us mid-cleanup.
  std::signal(SIGPIPE, SIG_IGN);

  try {
    return dispatch(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const std::exception& e) {
    std::cerr << "kernelopt-harness: internal error: " << e.what() << "\n";
    return finish(error_answer("internal", e.what(), exit_internal));
  } catch (...) {
    return finish(error_answer("internal", "unknown exception", exit_internal));
  }
}
