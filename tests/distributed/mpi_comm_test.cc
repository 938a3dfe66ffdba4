// The "mpi" Communicator (comm/mpi_communicator, loaded as a plugin) under
// `mpirun -np 2 mpi_comm_test`: every collective on float32/float64/float16/bfloat16,
// averages, several collectives in flight, bad dtypes, a fingerprint mismatch, and (test
// MpiTimeout, run alone with --gtest_filter) a collective that one rank never joins
// failing with kTimeout within its timeout. Expected values are sums of small integers,
// exact in every dtype.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "comm/communicator.h"
#include "comm/reduction.h"

namespace ot {
namespace {

int EnvInt(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : -1;
}

CommConfig Config(const std::string& fingerprint = "same") {
  CommConfig c;
  c.rank = EnvInt("OMPI_COMM_WORLD_RANK");
  c.size = EnvInt("OMPI_COMM_WORLD_SIZE");
  c.fingerprint = fingerprint;
  c.timeout = std::chrono::seconds(60);
  return c;
}

Communicator& Comm() {
  static std::unique_ptr<Communicator> comm = CreateCommunicator("mpi", Config());
  return *comm;
}

class MpiComm : public ::testing::Test {
 protected:
  void SetUp() override {
    if (EnvInt("OMPI_COMM_WORLD_RANK") < 0) GTEST_SKIP() << "run under mpirun -np 2";
  }
};

TEST_F(MpiComm, AllReduceFloat32SumAndAverage) {
  Communicator& c = Comm();
  const int n = c.size(), r = c.rank();
  EXPECT_STREQ(c.backend(), "mpi");
  // 3 Mi + 5 elements: a chain of four 4 MiB pieces, with the second allreduce in line.
  for (size_t count : {size_t{1}, size_t{1000}, size_t{1} << 20, (size_t{3} << 20) + 5}) {
    std::vector<float> a(count), b(count);
    for (size_t i = 0; i < count; ++i) a[i] = b[i] = static_cast<float>((r + 1) * (i % 7 + 1));
    AllReduceOptions avg;
    avg.op = ReduceOp::kAverage;
    auto wa = c.AllReduce(CommBuffer::Of(a.data(), count));
    auto wb = c.AllReduce(CommBuffer::Of(b.data(), count), avg);
    wb->Wait();  // out of order: both complete
    wa->Wait();
    EXPECT_TRUE(wa->IsCompleted());
    const float ranks_sum = n * (n + 1) / 2.0f;
    size_t wrong_sum = 0, wrong_avg = 0;
    for (size_t i = 0; i < count; ++i) {
      wrong_sum += a[i] != ranks_sum * (i % 7 + 1);
      wrong_avg += b[i] != ranks_sum * (i % 7 + 1) / n;
    }
    EXPECT_EQ(wrong_sum, 0u) << count;
    EXPECT_EQ(wrong_avg, 0u) << count;
  }
}

TEST_F(MpiComm, AllReduceFloat64Float16BFloat16) {
  Communicator& c = Comm();
  const int n = c.size(), r = c.rank();
  const size_t count = 777;
  std::vector<double> d(count);
  std::vector<uint16_t> h(count), bf(count);
  for (size_t i = 0; i < count; ++i) {
    const float v = static_cast<float>((r + 1) * (i % 5));
    d[i] = v;
    h[i] = FloatToHalf(v);
    bf[i] = FloatToBFloat16(v);
  }
  c.AllReduce(CommBuffer{d.data(), count, DType::kFloat64})->Wait();
  c.AllReduce(CommBuffer{h.data(), count, DType::kFloat16})->Wait();
  c.AllReduce(CommBuffer{bf.data(), count, DType::kBFloat16})->Wait();
  for (size_t i = 0; i < count; ++i) {
    const float expected = n * (n + 1) / 2.0f * (i % 5);
    ASSERT_EQ(d[i], expected) << i;
    ASSERT_EQ(HalfToFloat(h[i]), expected) << i;
    ASSERT_EQ(BFloat16ToFloat(bf[i]), expected) << i;
  }
}

TEST_F(MpiComm, BroadcastAllGatherReduceScatterBarrier) {
  Communicator& c = Comm();
  const int n = c.size(), r = c.rank();
  std::vector<float> b(100, static_cast<float>(r + 10));
  BroadcastOptions from_last;
  from_last.root = n - 1;
  c.Broadcast(CommBuffer::Of(b.data(), b.size()), from_last)->Wait();
  for (float v : b) ASSERT_EQ(v, n - 1 + 10);

  std::vector<float> in(5), out(5 * n);
  for (int j = 0; j < 5; ++j) in[j] = static_cast<float>(r * 10 + j);
  c.AllGather(CommBuffer::Of(in.data(), 5), CommBuffer::Of(out.data(), out.size()))->Wait();
  for (int k = 0; k < n; ++k)
    for (int j = 0; j < 5; ++j) ASSERT_EQ(out[k * 5 + j], k * 10 + j);

  const int m = 6;
  std::vector<float> whole(m * n), part(m);
  for (int k = 0; k < m * n; ++k) whole[k] = static_cast<float>((r + 1) * k);
  ReduceScatterOptions avg;
  avg.op = ReduceOp::kAverage;
  c.ReduceScatter(CommBuffer::Of(whole.data(), whole.size()), CommBuffer::Of(part.data(), m), avg)->Wait();
  for (int j = 0; j < m; ++j) ASSERT_EQ(part[j], n * (n + 1) / 2.0f * (r * m + j) / n);

  c.Barrier()->Wait();
  EXPECT_EQ(c.AsyncError(), nullptr);
}

TEST_F(MpiComm, BadBuffersAreRejectedWithASentence) {
  Communicator& c = Comm();
  std::vector<int64_t> ints(4);
  try {
    c.AllReduce(CommBuffer::Of(ints.data(), ints.size()));
    FAIL() << "int64 allreduce accepted";
  } catch (const CommError& e) {
    EXPECT_EQ(e.kind(), CommErrorKind::kInvalid);
    EXPECT_NE(std::string(e.what()).find("not int64"), std::string::npos) << e.what();
  }
  std::vector<float> in(3), out(5);
  EXPECT_THROW(c.AllGather(CommBuffer::Of(in.data(), 3), CommBuffer::Of(out.data(), 5)), CommError);
}

TEST_F(MpiComm, DifferentFingerprintsAreAMismatch) {
  const int r = EnvInt("OMPI_COMM_WORLD_RANK");
  try {
    CreateCommunicator("mpi", Config(r == 0 ? "model A" : "model B"));
    FAIL() << "ranks with different fingerprints connected";
  } catch (const CommError& e) {
    EXPECT_EQ(e.kind(), CommErrorKind::kMismatch);
    EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
  }
}

// Run alone (it breaks the communicator): rank 0 allreduces, rank 1 never does.
TEST_F(MpiComm, MpiTimeout) {
  Communicator& c = Comm();
  if (c.rank() != 0) {
    std::this_thread::sleep_for(std::chrono::seconds(4));
    return;
  }
  std::vector<float> a(16, 1.0f);
  AllReduceOptions o;
  o.timeout = std::chrono::milliseconds(1000);
  const auto start = std::chrono::steady_clock::now();
  try {
    c.AllReduce(CommBuffer::Of(a.data(), a.size()), o)->Wait();
    FAIL() << "an allreduce that rank 1 never joined completed";
  } catch (const CommError& e) {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(e.kind(), CommErrorKind::kTimeout) << e.what();
    EXPECT_LT(seconds, 3.0);
    EXPECT_NE(std::string(e.what()).find("did not complete within 1000 ms"), std::string::npos) << e.what();
    // Later collectives fail at once with the same error.
    EXPECT_THROW(c.Barrier()->Wait(), CommError);
    if (!HasFailure()) std::printf("mpi timeout test passed on rank 0 (%.1f s)\n", seconds);
  }
}

}  // namespace
}  // namespace ot
