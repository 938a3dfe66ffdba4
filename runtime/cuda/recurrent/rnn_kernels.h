// The element-wise device kernels of the CUDA recurrent ops (runtime/cuda/recurrent/rnn_ops.cc):
// one thread per hidden unit of a batch entry, one launch per step, around the caller's cuBLAS
// GEMMs. The cell math is runtime/ops/math/rnn_cell_math.h's, which the CPU kernel and the
// CPU tests run too. Float32; asynchronous on the given stream.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "runtime/ops/math/rnn_cell_math.h"

namespace ot::cuda::rnn {

enum class Cell : int { kLSTM = 0, kGRU = 1, kRNN = 2 };

// One direction of one node: sizes, layout and the cell's attributes.
struct Geometry {
  Cell cell = Cell::kLSTM;
  int64_t seq = 0, batch = 0, hidden = 0, gates = 4;
  int64_t dirs = 1, d = 0;  // num_directions and this direction
  int64_t layout = 0;       // 0: [seq, batch, ...]; 1: [batch, seq, ...]
  bool backward = false;    // this direction walks the sequence backwards
  bool linear_before_reset = false;
  LstmCellAttrs lstm;
  GruCellAttrs gru;
  RnnActivation rnn_f;
  float clip = INFINITY;

  // As RnnSpec (runtime/ops/shapes/rnn_shapes.h): the row of X holding step t of entry b,
  // and the offsets of Y[t, d, b, :] and of Y_h / initial_h [d, b, :].
  OT_HOST_DEVICE int64_t Row(int64_t t, int64_t b) const { return layout == 0 ? t * batch + b : b * seq + t; }
  OT_HOST_DEVICE int64_t YOffset(int64_t t, int64_t b) const {
    return (layout == 0 ? (t * dirs + d) * batch + b : (b * seq + t) * dirs + d) * hidden;
  }
  OT_HOST_DEVICE int64_t StateOffset(int64_t b) const {
    return (layout == 0 ? d * batch + b : b * dirs + d) * hidden;
  }
};

// Per-row values the gradient op's forward keeps for its backward ([seq*batch rows, ...];
// rows no step reaches stay as the caller zeroed them). Null pointers: not kept.
struct Saved {
  float* pre = nullptr;    // [rows, gates*hidden]: gate pre-activations (LSTM's with peepholes)
  float* hprev = nullptr;  // [rows, hidden]: the hidden state entering the step
  float* cprev = nullptr;  // LSTM [rows, hidden]: the cell state entering the step
  float* cnew = nullptr;   // LSTM [rows, hidden]: the cell state leaving it
  float* extra = nullptr;  // GRU [rows, hidden]: h_prev Rh^T + Rbh (linear_before_reset) or r * h_prev
};

// The direction's parameters: W's and R's biases (null without B) and LSTM's peepholes
// (null without P), already offset to direction d.
struct Params {
  const float* wb = nullptr;
  const float* rb = nullptr;
  const float* p = nullptr;
};

// dst[b, :] = src[StateOffset(b) ...] (initial_h, initial_c, dY_h, dY_c), or 0 when src is null.
void LoadState(const Geometry& g, const float* src, float* dst, cudaStream_t stream);
// dst[StateOffset(b) ...] = src[b, :] (Y_h, Y_c, the gradients of initial_h and initial_c).
void StoreState(const Geometry& g, const float* src, float* dst, cudaStream_t stream);

// Step s of the forward: xw = X W^T [rows, gates*hidden], hr = h R^T [batch, gates*hidden]
// (GRU without linear_before_reset: its z and r columns only). Updates h and c ([batch,
// hidden]) of the entries whose sequence reaches s, writes Y (when not null) and the saved
// values (sv.pre null: the pre-activations go to pre_batch [batch, gates*hidden]). GRU
// without linear_before_reset stops after r: it writes rh = r * h_prev ([batch, hidden], 0
// for entries past their end) for the caller's GEMM and GruForwardFinish.
void ForwardStep(const Geometry& g, int64_t s, const int* lens, const float* xw, const float* hr, const Params& prm,
                 float* h, float* c, float* pre_batch, const Saved& sv, float* y, float* rh, cudaStream_t stream);
// GRU without linear_before_reset, after hrh = (r * h_prev) Rh^T: the h gate and the new h.
void GruForwardFinish(const Geometry& g, int64_t s, const int* lens, const float* xw, const float* hrh,
                      const Params& prm, float* h, float* pre_batch, const Saved& sv, float* y, cudaStream_t stream);

// Step s of the backward. dh: gradient of the hidden state leaving the step (dY's step is
// added here); dc: LSTM's cell-state gradient, updated in place to the one entering the step.
// Writes dg [batch, gates*hidden] (gradients of the pre-activations whose product with R
// gives h_prev's; zeros for entries past their end), their rows in dax [rows, gates*hidden]
// (for dX, dW, dWb) and, GRU with linear_before_reset, dah (the gradient of h_prev Rh^T +
// Rbh in the h columns, for dR and dRb); dhn = the direct part of h_prev's gradient (dh
// itself for entries past their end). GRU without linear_before_reset leaves r's columns
// to GruResetBackward.
void BackwardStep(const Geometry& g, int64_t s, const int* lens, const float* dy, const Saved& sv, const Params& prm,
                  const float* dh, float* dc, float* dhn, float* dg, float* dax, float* dah, cudaStream_t stream);
// GRU without linear_before_reset, after drh = da_h Rh: r's columns of dg and dax, and
// h_prev's share drh * r added to dhn.
void GruResetBackward(const Geometry& g, int64_t s, const int* lens, const float* drh, const Saved& sv, float* dhn,
                      float* dg, float* dax, cudaStream_t stream);

// db[0:gh] = column sums of dax, db[gh:2gh] = those of dah ([rows, gh] each); a thread per
// column, summed in double in row order (deterministic).
void BiasGrad(int64_t rows, int64_t gh, const float* dax, const float* dah, float* db, cudaStream_t stream);
// LSTM's dP [3*hidden]: sum da_i c_prev, sum da_o c, sum da_f c_prev over the rows.
void PeepholeGrad(int64_t rows, int64_t hidden, const float* dax, const float* cprev, const float* cnew, float* dp,
                  cudaStream_t stream);

}  // namespace ot::cuda::rnn
