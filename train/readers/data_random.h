// Deterministic random numbers for the data pipeline. Everything here gives the same bits
// on every platform and standard library: std::mt19937_64's sequence is fixed by the C++
// standard, but std::uniform_int_distribution and std::shuffle are not, so the integer
// ranges and the shuffle are our own.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace ot {

// SplitMix64's finaliser: spreads the bits of x over the whole word.
uint64_t MixBits(uint64_t x);
// A seed for the stream named by (seed, a, b), e.g. (seed, epoch, batch index). Distinct
// triples give unrelated streams.
uint64_t StreamSeed(uint64_t seed, uint64_t a, uint64_t b = 0);
// Uniform integer in [0, n), n >= 1, by rejection (no modulo bias).
uint64_t UniformBelow(std::mt19937_64& rng, uint64_t n);
// Fisher-Yates shuffle of values in place.
void ShuffleInPlace(std::vector<int64_t>& values, std::mt19937_64& rng);

}  // namespace ot
