// Deterministic random numbers for the data pipeline (see data_random.h).
#include "train/readers/data_random.h"

#include <utility>

namespace ot {

uint64_t MixBits(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t StreamSeed(uint64_t seed, uint64_t a, uint64_t b) { return MixBits(MixBits(MixBits(seed) ^ a) ^ b); }

uint64_t UniformBelow(std::mt19937_64& rng, uint64_t n) {
  // Accept only the lowest (2^64 - 2^64 mod n) draws, a multiple of n values, so every
  // residue is equally likely. 2^64 mod n is below n, so a draw at most 2^64 - 1 - n is
  // accepted without it: the division that computes it runs only for the rare draw above
  // (a shuffle of 60,000 samples draws 60,000 times an epoch).
  uint64_t x = rng();
  if (x > UINT64_MAX - n) {
    const uint64_t excess = (UINT64_MAX % n + 1) % n;  // 2^64 mod n
    while (x > UINT64_MAX - excess) x = rng();
  }
  return x % n;
}

void ShuffleInPlace(std::vector<int64_t>& values, std::mt19937_64& rng) {
  for (size_t i = values.size(); i > 1; --i) {
    size_t j = static_cast<size_t>(UniformBelow(rng, i));
    std::swap(values[i - 1], values[j]);
  }
}

}  // namespace ot
