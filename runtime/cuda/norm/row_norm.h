// Our own CUDA kernels for the normalisations over rows that cuDNN has no training op for:
// LayerNormalization (one scale/shift per column of the [rows, cols] view) and
// InstanceNormalization (one scale/shift per channel, row r being instance (n, c), c = r % C),
// forward and backward. Row statistics are accumulated in double, one block per row; the
// per-element formulas are runtime/ops/math/norm_math.h's, as on the CPU. Float32; asynchronous
// on the given stream.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ot::cuda::norm {

struct RowNormShape {
  int64_t rows = 0, cols = 0;
  float epsilon = 1e-5f;
  // 0: scale/shift indexed by column (LayerNormalization); C > 0: by channel r % C
  // (InstanceNormalization).
  int64_t channels = 0;
};

// y = NormalizedAffine(x, mean_r, inv_std_r, scale, shift); shift may be null (0); mean and
// inv_std (one per row) are written where not null.
void RowNormForward(const RowNormShape& s, const float* x, const float* scale, const float* shift, float* y,
                    float* mean, float* inv_std, cudaStream_t stream);

// Backward. Writes the row statistics and the per-row sums sum(g), sum(g * xhat) into the
// scratch arrays (rows each; g = dY * scale for columns, dY for channels) and dx where not
// null. Then the parameter gradients, where not null: by column, dscale[j] = sum_r dY * xhat
// and dbias[j] = sum_r dY; by channel, the sums over the rows of that channel.
void RowNormBackward(const RowNormShape& s, const float* dy, const float* x, const float* scale, float* dx,
                     float* dscale, float* dbias, float* row_mean, float* row_inv_std, double* row_sum_g,
                     double* row_sum_gx, cudaStream_t stream);

}  // namespace ot::cuda::norm
