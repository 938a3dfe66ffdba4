// Small matrix products in bfloat16 with float32 sums, for the fused attention's tiles under
// --amp bf16 (runtime/cpu/matmul/attention.cc): C = alpha op(A) op(B) + beta C, where A and B
// are float32 rounded to bfloat16 (nearest even, as a Cast and PyTorch's autocast round them)
// while they are packed, and the products are summed in float32 by avx512_bf16's vdpbf16ps,
// two terms of k at a time. Made for tiles of at most a few hundred rows and columns: each call
// packs both operands (one pass over them) and there is no cache blocking. PyTorch's CPU
// flash attention under autocast computes the same way (bfloat16 operands, float32 sums).
// Also the float32 -> bfloat16 rounding of kernels that write a Cast's result themselves.
#pragma once

#include <cstdint>
#include <vector>

namespace ot {
namespace cpu {

// Whether BFloat16Gemm can run here: the CPU has avx512_bf16 and oneDNN's ISA limit
// (ONEDNN_MAX_CPU_ISA) allows avx512_core_bf16, so that limiting oneDNN takes these products
// back to float32 as it does oneDNN's own.
bool HasBFloat16Gemm();

// The packed operands, kept between calls so that a tile loop allocates once.
struct BFloat16GemmScratch {
  std::vector<uint32_t> a, b;  // bfloat16 pairs along k: A's [k / 2][m] or [m][k / 2], B's [k / 2][n rounded to 16]
};

// Row-major float32 operands, leading dimensions in elements; beta 0 does not read C.
// Requires HasBFloat16Gemm().
void BFloat16Gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                  const float* b, int64_t ldb, float beta, float* c, int64_t ldc, BFloat16GemmScratch& w);

// out[i] = in[i] rounded to bfloat16 (nearest even, subnormals to zero: vcvtne2ps2bf16, what
// oneDNN's Cast runs on these CPUs), for kernels that write the Cast of their result. Requires
// HasBFloat16Gemm().
void ConvertToBFloat16(const float* in, uint16_t* out, int64_t n);

}  // namespace cpu
}  // namespace ot
