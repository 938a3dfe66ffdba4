// The device kernels of runtime/cuda/recurrent/rnn_kernels.h: grid-stride loops, one thread per
// (batch entry, hidden unit), calling the per-element cell math of
// runtime/ops/math/rnn_cell_math.h (checked on the CPU by tests/unit/runtime/rnn_cell_math_test.cc).
#include "runtime/cuda/recurrent/rnn_kernels.h"

#include "runtime/cuda/launch_check.h"
#include "runtime/cuda/math_device.h"

namespace ot::cuda::rnn {
namespace {

constexpr int kThreads = 256;

// Whether entry b's sequence reaches step s; if so its time index t and row of X.
__device__ bool StepOf(const Geometry& g, int64_t s, const int* lens, int64_t b, int64_t* t, int64_t* row) {
  const int64_t len = lens[b];
  if (s >= len) return false;
  *t = g.backward ? len - 1 - s : s;
  *row = g.Row(*t, b);
  return true;
}

__global__ void LoadStateKernel(Geometry g, const float* src, float* dst) {
  const int64_t H = g.hidden;
  OT_GRID_LOOP(i, g.batch * H) {
    const int64_t b = i / H, j = i % H;
    dst[i] = src ? src[g.StateOffset(b) + j] : 0.f;
  }
}

__global__ void StoreStateKernel(Geometry g, const float* src, float* dst) {
  const int64_t H = g.hidden;
  OT_GRID_LOOP(i, g.batch * H) {
    const int64_t b = i / H, j = i % H;
    dst[g.StateOffset(b) + j] = src[i];
  }
}

__global__ void ForwardStepKernel(Geometry g, int64_t s, const int* lens, const float* xw, const float* hr, Params prm,
                                  float* h, float* c, float* pre_batch, Saved sv, float* y, float* rh) {
  const int64_t H = g.hidden, GH = g.gates * H;
  OT_GRID_LOOP(i, g.batch * H) {
    const int64_t b = i / H, j = i % H;
    int64_t t = 0, row = 0;
    if (!StepOf(g, s, lens, b, &t, &row)) {
      if (rh) rh[i] = 0.f;
      continue;
    }
    float* pre = sv.pre ? sv.pre + row * GH : pre_batch + b * GH;
    const float* xwr = xw + row * GH;
    const float* hrb = hr + b * GH;
    // x W^T + Wb (+ Rb but for GRU's h gate) of a gate, and h_prev R^T when `rec`.
    auto input_part = [&](int64_t gate) {
      const int64_t k = gate * H + j;
      float v = xwr[k];
      if (prm.wb) v += prm.wb[k] + (g.cell == Cell::kGRU && gate == 2 ? 0.f : prm.rb[k]);
      return v;
    };
    auto full = [&](int64_t gate) { return input_part(gate) + hrb[gate * H + j]; };
    const float hp = h[i];
    if (sv.hprev) sv.hprev[row * H + j] = hp;
    float hn = 0.f;
    if (g.cell == Cell::kLSTM) {
      const float cp = c[i];
      const float* p = prm.p;
      const float a_c = full(3);
      const LstmCellForwardResult r = LstmCellForward(g.lstm, full(0), full(1), full(2), a_c, cp, p ? p[j] : 0.f,
                                                      p ? p[H + j] : 0.f, p ? p[2 * H + j] : 0.f);
      pre[j] = r.pre_i;
      pre[H + j] = r.pre_o;
      pre[2 * H + j] = r.pre_f;
      pre[3 * H + j] = a_c;
      c[i] = r.c;
      if (sv.cprev) {
        sv.cprev[row * H + j] = cp;
        sv.cnew[row * H + j] = r.c;
      }
      hn = r.h;
    } else if (g.cell == Cell::kGRU) {
      const float a_z = full(0), a_r = full(1);
      pre[j] = a_z;
      pre[H + j] = a_r;
      const float z = RnnGate(g.gru.f, g.gru.clip, a_z);
      const float r = RnnGate(g.gru.f, g.gru.clip, a_r);
      if (!g.linear_before_reset) {
        rh[i] = r * hp;
        if (sv.extra) sv.extra[row * H + j] = r * hp;
        continue;  // GruForwardFinish after the caller's GEMM
      }
      const float lin = hrb[2 * H + j] + (prm.rb ? prm.rb[2 * H + j] : 0.f);
      const float a_h = GruPreH(input_part(2), r, lin);
      pre[2 * H + j] = a_h;
      if (sv.extra) sv.extra[row * H + j] = lin;
      hn = GruNewHidden(z, RnnGate(g.gru.g, g.gru.clip, a_h), hp);
    } else {
      const float a = full(0);
      pre[j] = a;
      hn = RnnCellForward(g.rnn_f, g.clip, a);
    }
    h[i] = hn;
    if (y) y[g.YOffset(t, b) + j] = hn;
  }
}

__global__ void GruForwardFinishKernel(Geometry g, int64_t s, const int* lens, const float* xw, const float* hrh,
                                       Params prm, float* h, float* pre_batch, Saved sv, float* y) {
  const int64_t H = g.hidden, GH = g.gates * H;
  OT_GRID_LOOP(i, g.batch * H) {
    const int64_t b = i / H, j = i % H;
    int64_t t = 0, row = 0;
    if (!StepOf(g, s, lens, b, &t, &row)) continue;
    float* pre = sv.pre ? sv.pre + row * GH : pre_batch + b * GH;
    float a_h = xw[row * GH + 2 * H + j] + hrh[i];
    if (prm.wb) a_h += prm.wb[2 * H + j] + prm.rb[2 * H + j];
    pre[2 * H + j] = a_h;
    const float z = RnnGate(g.gru.f, g.gru.clip, pre[j]);
    const float hn = GruNewHidden(z, RnnGate(g.gru.g, g.gru.clip, a_h), h[i]);
    h[i] = hn;
    if (y) y[g.YOffset(t, b) + j] = hn;
  }
}

__global__ void BackwardStepKernel(Geometry g, int64_t s, const int* lens, const float* dy, Saved sv, Params prm,
                                   const float* dh, float* dc, float* dhn, float* dg, float* dax, float* dah) {
  const int64_t H = g.hidden, GH = g.gates * H;
  OT_GRID_LOOP(i, g.batch * H) {
    const int64_t b = i / H, j = i % H;
    float* dgb = dg + b * GH;
    int64_t t = 0, row = 0;
    if (!StepOf(g, s, lens, b, &t, &row)) {
      dhn[i] = dh[i];
      for (int64_t k = 0; k < g.gates; ++k) dgb[k * H + j] = 0.f;
      continue;
    }
    const float dhv = dh[i] + (dy ? dy[g.YOffset(t, b) + j] : 0.f);
    const float* pre = sv.pre + row * GH;
    float* dx = dax + row * GH;
    if (g.cell == Cell::kLSTM) {
      const float* p = prm.p;
      const LstmCellGrads r =
          LstmCellBackward(g.lstm, pre[j], pre[H + j], pre[2 * H + j], pre[3 * H + j], sv.cprev[row * H + j],
                           sv.cnew[row * H + j], p ? p[j] : 0.f, p ? p[H + j] : 0.f, p ? p[2 * H + j] : 0.f, dhv, dc[i]);
      dc[i] = r.dc_prev;
      const float da[4] = {r.da_i, r.da_o, r.da_f, r.da_c};
      for (int k = 0; k < 4; ++k) dgb[k * H + j] = dx[k * H + j] = da[k];
      dhn[i] = 0.f;
    } else if (g.cell == Cell::kGRU) {
      const GruCellGrads r = GruCellBackward(g.gru, pre[j], pre[2 * H + j], sv.hprev[row * H + j], dhv);
      dhn[i] = r.dh_prev;
      dgb[j] = dx[j] = r.da_z;
      if (g.linear_before_reset) {
        const float rg = RnnGate(g.gru.f, g.gru.clip, pre[H + j]);
        const float da_r = GruResetGrad(g.gru, pre[H + j], r.da_h * sv.extra[row * H + j]);
        dgb[H + j] = dx[H + j] = da_r;
        dx[2 * H + j] = r.da_h;
        dgb[2 * H + j] = r.da_h * rg;  // gradient of h_prev Rh^T + Rbh
        float* dhr = dah + row * GH;
        dhr[j] = r.da_z;
        dhr[H + j] = da_r;
        dhr[2 * H + j] = r.da_h * rg;
      } else {
        dgb[2 * H + j] = dx[2 * H + j] = r.da_h;
        dgb[H + j] = 0.f;  // GruResetBackward
      }
    } else {
      dgb[j] = dx[j] = RnnCellBackward(g.rnn_f, g.clip, pre[j], dhv);
      dhn[i] = 0.f;
    }
  }
}

__global__ void GruResetBackwardKernel(Geometry g, int64_t s, const int* lens, const float* drh, Saved sv, float* dhn,
                                       float* dg, float* dax) {
  const int64_t H = g.hidden, GH = g.gates * H;
  OT_GRID_LOOP(i, g.batch * H) {
    const int64_t b = i / H, j = i % H;
    int64_t t = 0, row = 0;
    if (!StepOf(g, s, lens, b, &t, &row)) continue;
    const float pre_r = sv.pre[row * GH + H + j];
    const float rg = RnnGate(g.gru.f, g.gru.clip, pre_r);
    const float da_r = GruResetGrad(g.gru, pre_r, drh[i] * sv.hprev[row * H + j]);
    dhn[i] += drh[i] * rg;
    dg[b * GH + H + j] = da_r;
    dax[row * GH + H + j] = da_r;
  }
}

__global__ void BiasGradKernel(int64_t rows, int64_t gh, const float* dax, const float* dah, float* db) {
  OT_GRID_LOOP(j, gh) {
    double sx = 0, sh = 0;
    for (int64_t r = 0; r < rows; ++r) {
      sx += dax[r * gh + j];
      sh += dah[r * gh + j];
    }
    db[j] = static_cast<float>(sx);
    db[gh + j] = static_cast<float>(sh);
  }
}

__global__ void PeepholeGradKernel(int64_t rows, int64_t hidden, const float* dax, const float* cprev,
                                   const float* cnew, float* dp) {
  OT_GRID_LOOP(k, 3 * hidden) {
    const int64_t gate = k / hidden, j = k % hidden;  // i, o, f as in P
    const float* cs = gate == 1 ? cnew : cprev;
    double sum = 0;
    for (int64_t r = 0; r < rows; ++r)
      sum += static_cast<double>(dax[r * 4 * hidden + gate * hidden + j]) * cs[r * hidden + j];
    dp[k] = static_cast<float>(sum);
  }
}

unsigned Blocks(const Geometry& g) { return math::GridBlocks(g.batch * g.hidden, kThreads); }

}  // namespace

void LoadState(const Geometry& g, const float* src, float* dst, cudaStream_t stream) {
  LoadStateKernel<<<Blocks(g), kThreads, 0, stream>>>(g, src, dst);
  OT_CUDA_CHECK_LAUNCH("LoadStateKernel");
}

void StoreState(const Geometry& g, const float* src, float* dst, cudaStream_t stream) {
  StoreStateKernel<<<Blocks(g), kThreads, 0, stream>>>(g, src, dst);
  OT_CUDA_CHECK_LAUNCH("StoreStateKernel");
}

void ForwardStep(const Geometry& g, int64_t s, const int* lens, const float* xw, const float* hr, const Params& prm,
                 float* h, float* c, float* pre_batch, const Saved& sv, float* y, float* rh, cudaStream_t stream) {
  ForwardStepKernel<<<Blocks(g), kThreads, 0, stream>>>(g, s, lens, xw, hr, prm, h, c, pre_batch, sv, y, rh);
  OT_CUDA_CHECK_LAUNCH("ForwardStepKernel");
}

void GruForwardFinish(const Geometry& g, int64_t s, const int* lens, const float* xw, const float* hrh,
                      const Params& prm, float* h, float* pre_batch, const Saved& sv, float* y, cudaStream_t stream) {
  GruForwardFinishKernel<<<Blocks(g), kThreads, 0, stream>>>(g, s, lens, xw, hrh, prm, h, pre_batch, sv, y);
  OT_CUDA_CHECK_LAUNCH("GruForwardFinishKernel");
}

void BackwardStep(const Geometry& g, int64_t s, const int* lens, const float* dy, const Saved& sv, const Params& prm,
                  const float* dh, float* dc, float* dhn, float* dg, float* dax, float* dah, cudaStream_t stream) {
  BackwardStepKernel<<<Blocks(g), kThreads, 0, stream>>>(g, s, lens, dy, sv, prm, dh, dc, dhn, dg, dax, dah);
  OT_CUDA_CHECK_LAUNCH("BackwardStepKernel");
}

void GruResetBackward(const Geometry& g, int64_t s, const int* lens, const float* drh, const Saved& sv, float* dhn,
                      float* dg, float* dax, cudaStream_t stream) {
  GruResetBackwardKernel<<<Blocks(g), kThreads, 0, stream>>>(g, s, lens, drh, sv, dhn, dg, dax);
  OT_CUDA_CHECK_LAUNCH("GruResetBackwardKernel");
}

void BiasGrad(int64_t rows, int64_t gh, const float* dax, const float* dah, float* db, cudaStream_t stream) {
  BiasGradKernel<<<math::GridBlocks(gh, kThreads), kThreads, 0, stream>>>(rows, gh, dax, dah, db);
  OT_CUDA_CHECK_LAUNCH("BiasGradKernel");
}

void PeepholeGrad(int64_t rows, int64_t hidden, const float* dax, const float* cprev, const float* cnew, float* dp,
                  cudaStream_t stream) {
  PeepholeGradKernel<<<math::GridBlocks(3 * hidden, kThreads), kThreads, 0, stream>>>(rows, hidden, dax, cprev, cnew,
                                                                                       dp);
  OT_CUDA_CHECK_LAUNCH("PeepholeGradKernel");
}

}  // namespace ot::cuda::rnn
