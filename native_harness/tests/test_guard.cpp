#include <string>
#include <vector>

#include "guard.hpp"
#include "test_util.hpp"

using kernelopt::find_differences;
using kernelopt::find_pattern_changes;
using kernelopt::make_layout;

TEST_CASE("layout: aligned data, slack joins the after-guard") {
  const auto l = make_layout(1000, 512);
  CHECK(l.before_offset == 0 && l.before_bytes == 512);
  CHECK(l.data_offset == 512);
  CHECK(l.data_offset % 256 == 0);
  CHECK(l.after_offset == 1512);
  CHECK(l.after_bytes == (1024 - 1000) + 512);
  CHECK(l.total_bytes == 512 + 1024 + 512);
  CHECK(l.after_offset + l.after_bytes == l.total_bytes);
}

TEST_CASE("layout: exact multiple of 256 has no slack") {
  const auto l = make_layout(4096, 256);
  CHECK(l.after_bytes == 256);
  CHECK(l.total_bytes == 4096 + 512);
}

TEST_CASE("layout: an empty buffer still gets a valid, fully checked 256 bytes") {
  const auto l = make_layout(0, 0);
  CHECK(l.total_bytes == 256);
  CHECK(l.data_offset == 0);
  CHECK(l.after_offset == 0 && l.after_bytes == 256);
  const auto g = make_layout(0, 256);
  CHECK(g.total_bytes == 768 && g.after_bytes == 512 && g.before_bytes == 256);
}

TEST_CASE("layout: no guard and no slack means nothing to check") {
  const auto l = make_layout(512, 0);
  CHECK(l.before_bytes == 0 && l.after_bytes == 0 && l.total_bytes == 512);
}

TEST_CASE("pattern check finds the first changed byte and counts all of them") {
  std::vector<std::uint8_t> g(64, 0xCD);
  CHECK(!find_pattern_changes(g.data(), g.size(), 0xCD));
  g[10] = 0;
  g[11] = 0xCC;
  g[63] = 1;
  const auto d = find_pattern_changes(g.data(), g.size(), 0xCD);
  CHECK(d && d->first_offset == 10 && d->bytes_changed == 3);
  CHECK(!find_pattern_changes(nullptr, 0, 0xCD));
}

TEST_CASE(
    "pattern check and input comparison: a change anywhere, in any size, word by word or not") {
  // they compare eight bytes at a time until a word differs: every size around the word and every
  // position of one or two changed bytes (the tail past the last whole word included)
  for (std::size_t size = 1; size <= 40; ++size) {
    for (std::size_t at = 0; at < size; ++at) {
      std::vector<std::uint8_t> g(size, 0xCD), a(size, 7), b(size, 7);
      g[at] = 0xCE;
      a[at] = 8;
      auto d = find_pattern_changes(g.data(), g.size(), 0xCD);
      auto e = find_differences(a.data(), b.data(), a.size());
      CHECK_MSG(d && d->first_offset == at && d->bytes_changed == 1, std::to_string(size));
      CHECK_MSG(e && e->first_offset == at && e->bytes_changed == 1, std::to_string(size));
      g[size - 1] = 0;
      a[size - 1] = 0;
      d = find_pattern_changes(g.data(), g.size(), 0xCD);
      e = find_differences(a.data(), b.data(), a.size());
      const std::size_t n = at == size - 1 ? 1 : 2;
      CHECK_MSG(d && d->first_offset == at && d->bytes_changed == n, std::to_string(size));
      CHECK_MSG(e && e->first_offset == at && e->bytes_changed == n, std::to_string(size));
    }
    std::vector<std::uint8_t> g(size, 0xCD);
    CHECK(!find_pattern_changes(g.data(), g.size(), 0xCD));
  }
}

TEST_CASE("input comparison finds the first difference and counts all of them") {
  std::vector<std::uint8_t> a{1, 2, 3, 4, 5}, b{1, 2, 3, 4, 5};
  CHECK(!find_differences(a.data(), b.data(), a.size()));
  a[0] = 9;
  a[4] = 9;
  const auto d = find_differences(a.data(), b.data(), a.size());
  CHECK(d && d->first_offset == 0 && d->bytes_changed == 2);
}

TEST_MAIN()
