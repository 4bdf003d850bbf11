// The key of one device draw, derived on the host from the request's fresh_seed.
//
// The fill kernel (support/fill.cu) is Philox keyed by what it is passed. Passing it the
// request's fresh_seed would put the key of every draw of the request into device memory (the
// fill's parameters) where a candidate launched after it might find it and compute the inputs
// of every later launch ahead of time. Each draw gets instead its own key, a PRF of
// (fresh_seed, draw, buffer): SipHash-2-4 (Aumasson and Bernstein, 2012) keyed by fresh_seed, so
// the key of one draw says nothing of another's, and every draw is still a pure function of the
// request's seed (reproducible, as PROTOCOL.md promises).
#pragma once

#include <cstddef>
#include <cstdint>

namespace kernelopt {

// SipHash-2-4 of `len` bytes with the 128-bit key (k0, k1), both little-endian halves.
inline std::uint64_t siphash24(std::uint64_t k0, std::uint64_t k1, const unsigned char* msg,
                               std::size_t len) {
  auto rotl = [](std::uint64_t x, int b) { return (x << b) | (x >> (64 - b)); };
  std::uint64_t v0 = 0x736f6d6570736575ull ^ k0, v1 = 0x646f72616e646f6dull ^ k1;
  std::uint64_t v2 = 0x6c7967656e657261ull ^ k0, v3 = 0x7465646279746573ull ^ k1;
  auto round = [&] {
    v0 += v1;
    v1 = rotl(v1, 13) ^ v0;
    v0 = rotl(v0, 32);
    v2 += v3;
    v3 = rotl(v3, 16) ^ v2;
    v0 += v3;
    v3 = rotl(v3, 21) ^ v0;
    v2 += v1;
    v1 = rotl(v1, 17) ^ v2;
    v2 = rotl(v2, 32);
  };
  auto word = [&](std::size_t at, std::size_t n) {
    std::uint64_t m = 0;
    for (std::size_t i = 0; i < n; ++i) m |= std::uint64_t(msg[at + i]) << (8 * i);
    return m;
  };
  const std::size_t full = len / 8 * 8;
  for (std::size_t at = 0; at < full; at += 8) {
    const std::uint64_t m = word(at, 8);
    v3 ^= m;
    round();
    round();
    v0 ^= m;
  }
  const std::uint64_t last = (std::uint64_t(len & 0xff) << 56) | word(full, len - full);
  v3 ^= last;
  round();
  round();
  v0 ^= last;
  v2 ^= 0xff;
  for (int i = 0; i < 4; ++i) round();
  return v0 ^ v1 ^ v2 ^ v3;
}

// The Philox key of draw `draw` (0 = the draw before the first warm-up launch) of buffer
// `buffer` (its argument index) under the request's `fresh_seed`.
inline std::uint64_t draw_key(std::uint64_t fresh_seed, std::uint64_t draw, unsigned buffer) {
  unsigned char msg[12];
  for (int i = 0; i < 8; ++i) msg[i] = static_cast<unsigned char>(draw >> (8 * i));
  for (int i = 0; i < 4; ++i) msg[8 + i] = static_cast<unsigned char>(buffer >> (8 * i));
  return siphash24(fresh_seed, 0x6b6f2d6472617773ull /* "ko-draws" */, msg, sizeof msg);
}

}  // namespace kernelopt
