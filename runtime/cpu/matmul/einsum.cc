// Einsum (opset 12+) on the CPU, float32 and float64: any number of operands, ellipsis
// with broadcasting, repeated labels within a term (diagonals), implicit output.
//
// Prepare turns the equation into a plan: each operand is a strided view (a repeated
// label is one axis whose stride is the sum of its axes' strides, i.e. the diagonal);
// operands are contracted left to right, two at a time, as one batched matrix product
// [batch, m, k] x [batch, k, n] (oneDNN matmul for float32, loops for float64), after
// copying each side into that order and summing out the labels only it has; the last
// result is permuted (and summed) into the output.
#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include "graph/autodiff/einsum_equation.h"
#include "runtime/cpu/layout/dnnl_util.h"
#include "runtime/core/kernel_registry.h"

namespace ot {
namespace cpu {
namespace {

// Label ids: letters 0..51, ellipsis dimensions 52.. (right-aligned across operands).
constexpr int kEllipsisBase = 52;
int LetterId(char c) { return c >= 'a' && c <= 'z' ? c - 'a' : 26 + (c - 'A'); }

// A tensor seen through labels: one axis per distinct label.
struct View {
  std::vector<int> labels;
  std::vector<int64_t> sizes, strides;  // in elements
  int source = -1;  // input index, or -1 - k for intermediate buffer k
  int Find(int label) const {
    auto it = std::find(labels.begin(), labels.end(), label);
    return it == labels.end() ? -1 : static_cast<int>(it - labels.begin());
  }
};

// Copies `v` into a dense array ordered by `order` (sizes from `size`; an axis of size 1
// in the view is broadcast), summing over the view's labels not in `order`.
struct Gather {
  View src;
  std::vector<int64_t> out_sizes, out_src_strides;  // per output axis
  std::vector<int64_t> sum_sizes, sum_strides;       // per summed axis
  int64_t out_count = 1, sum_count = 1;
  bool identity = false;  // the source is already dense in this order: read it in place
  // float32: the source read in place as [batch, rows, cols] with these strides (each
  // group's labels merge into one axis, one of rows/cols has stride 1), so oneDNN's
  // matmul takes a transposed operand without a copy.
  bool strided = false;
  dnnl::memory::dims strides3;
};

// Whether `g`'s output axes, cut into three groups of `counts` labels, read the source
// as a 3-D strided array [batch, rows, cols] with a unit stride in rows or cols.
void PlanStrided(Gather& g, const std::array<size_t, 3>& counts) {
  if (g.sum_count != 1) return;
  const int64_t rows = [&] {
    int64_t p = 1;
    for (size_t d = counts[0]; d < counts[0] + counts[1]; ++d) p *= g.out_sizes[d];
    return p;
  }();
  const int64_t cols = g.out_count / std::max<int64_t>(1, [&] {
    int64_t p = 1;
    for (size_t d = 0; d < counts[0] + counts[1]; ++d) p *= g.out_sizes[d];
    return p;
  }());
  dnnl::memory::dims strides = {rows * cols, cols, 1};  // any value serves a group of size 1
  size_t first = 0;
  for (size_t grp = 0; grp < 3; ++grp) {
    const size_t end = first + counts[grp];
    int64_t expect = -1;  // stride the next (outer) label must have to merge
    for (size_t d = end; d-- > first;) {
      if (g.out_sizes[d] == 1) continue;
      const int64_t st = g.out_src_strides[d];
      if (st == 0) return;  // broadcast: needs a copy
      if (expect < 0) strides[grp] = st;
      else if (st != expect) return;
      expect = st * g.out_sizes[d];
    }
    first = end;
  }
  if (strides[1] != 1 && strides[2] != 1 && rows > 1 && cols > 1) return;
  g.strided = true;
  g.strides3 = strides;
}

Gather PlanGather(const View& v, const std::vector<int>& order, const std::map<int, int64_t>& size) {
  Gather g;
  g.src = v;
  for (int l : order) {
    const int a = v.Find(l);
    const int64_t n = size.at(l);
    g.out_sizes.push_back(n);
    g.out_src_strides.push_back(a < 0 || v.sizes[static_cast<size_t>(a)] != n ? 0 : v.strides[static_cast<size_t>(a)]);
    g.out_count *= n;
  }
  for (size_t a = 0; a < v.labels.size(); ++a) {
    if (std::find(order.begin(), order.end(), v.labels[a]) != order.end()) continue;
    g.sum_sizes.push_back(v.sizes[a]);
    g.sum_strides.push_back(v.strides[a]);
    g.sum_count *= v.sizes[a];
  }
  int64_t dense = 1;
  g.identity = g.sum_count == 1;
  for (size_t d = g.out_sizes.size(); d-- > 0;) {
    if (g.out_sizes[d] != 1 && g.out_src_strides[d] != dense) g.identity = false;
    dense *= g.out_sizes[d];
  }
  return g;
}

int64_t Offset(int64_t flat, const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  int64_t off = 0;
  for (size_t d = sizes.size(); d-- > 0;) {
    off += (flat % sizes[d]) * strides[d];
    flat /= sizes[d];
  }
  return off;
}

template <typename T>
void RunGather(const Gather& g, const T* src, T* dst) {
  std::vector<int64_t> sum_offsets(static_cast<size_t>(g.sum_count));
  for (int64_t j = 0; j < g.sum_count; ++j) sum_offsets[static_cast<size_t>(j)] = Offset(j, g.sum_sizes, g.sum_strides);
#pragma omp parallel for schedule(static) if (g.out_count * g.sum_count > 32768)
  for (int64_t i = 0; i < g.out_count; ++i) {
    const T* base = src + Offset(i, g.out_sizes, g.out_src_strides);
    T acc = 0;
    for (int64_t off : sum_offsets) acc += base[off];
    dst[i] = acc;
  }
}

// One contraction of two views into a dense intermediate [batch, m, n].
struct Contraction {
  Gather a, b;  // to [batch, m, k] and [batch, k, n]
  int64_t batch = 1, m = 1, k = 1, n = 1;
  int result = -1;      // intermediate buffer id, or -1: the node's output
  dnnl::matmul prim;    // float32
  dnnl::memory::desc a_desc, b_desc;  // float32: dense, or the source's own strides
};

template <typename T>
void BatchedProduct(const Contraction& c, const T* a, const T* b, T* y) {
#pragma omp parallel for schedule(static) if (c.batch * c.m * c.n * c.k > 32768)
  for (int64_t bm = 0; bm < c.batch * c.m; ++bm) {
    const int64_t bi = bm / c.m;
    const T* ar = a + bm * c.k;
    const T* bb = b + bi * c.k * c.n;
    T* yr = y + bm * c.n;
    std::fill(yr, yr + c.n, T(0));
    for (int64_t kk = 0; kk < c.k; ++kk) {
      const T av = ar[kk];
      const T* br = bb + kk * c.n;
      for (int64_t j = 0; j < c.n; ++j) yr[j] += av * br[j];
    }
  }
}

class EinsumKernel final : public OpKernel {
 public:
  explicit EinsumKernel(const KernelInfo& info)
      : OpKernel(info), eq_(ParseEinsumEquation(info.node.GetString("equation", ""), info.node.Describe())) {}

  void Prepare(KernelContext& ctx) override {
    const int n_in = ctx.NumInputs();
    if (static_cast<size_t>(n_in) != eq_.inputs.size())
      Fail("the equation '" + eq_.ToString() + "' has " + std::to_string(eq_.inputs.size()) + " terms but the node has " +
           std::to_string(n_in) + " inputs");
    dtype_ = ctx.Input(0).dtype();
    if (dtype_ != DType::kFloat32 && dtype_ != DType::kFloat64) Unsupported("data type " + DTypeName(dtype_));
    for (int i = 0; i < n_in; ++i)
      if (ctx.Input(i).dtype() != dtype_)
        Fail("input " + std::to_string(i) + " is " + DTypeName(ctx.Input(i).dtype()) + ", input 0 is " + DTypeName(dtype_));
    // Ellipsis ranks, right-aligned onto one set of ellipsis labels.
    int ell = 0;
    std::vector<int> ell_rank(static_cast<size_t>(n_in));
    for (int i = 0; i < n_in; ++i) {
      const EinsumTerm& t = eq_.inputs[static_cast<size_t>(i)];
      const int r = ctx.Input(i).rank() - static_cast<int>(t.letters.size());
      if (r < 0 || (!t.has_ellipsis && r != 0))
        Fail("input " + std::to_string(i) + " " + ctx.Input(i).Describe() + " does not match term '" + t.ToString() +
             "' of the equation '" + eq_.ToString() + "'");
      ell_rank[static_cast<size_t>(i)] = r;
      ell = std::max(ell, r);
    }
    std::map<int, int64_t> size;
    std::vector<View> ops;
    for (int i = 0; i < n_in; ++i) {
      const EinsumTerm& t = eq_.inputs[static_cast<size_t>(i)];
      const Tensor& x = ctx.Input(i);
      std::vector<int> axis_labels;
      for (size_t p = 0; p <= t.letters.size(); ++p) {
        if (t.has_ellipsis && p == t.ellipsis_pos)
          for (int e = 0; e < ell_rank[static_cast<size_t>(i)]; ++e)
            axis_labels.push_back(kEllipsisBase + ell - ell_rank[static_cast<size_t>(i)] + e);
        if (p < t.letters.size()) axis_labels.push_back(LetterId(t.letters[p]));
      }
      const std::vector<int64_t> strides = Strides(x.shape());
      View v;
      v.source = i;
      for (size_t a = 0; a < axis_labels.size(); ++a) {
        const int l = axis_labels[a];
        const int at = v.Find(l);
        if (at >= 0) {  // repeated label: the diagonal
          if (v.sizes[static_cast<size_t>(at)] != x.dim(static_cast<int>(a)))
            Fail("input " + std::to_string(i) + " " + x.Describe() + " repeats a label over axes of different sizes");
          v.strides[static_cast<size_t>(at)] += strides[a];
          continue;
        }
        v.labels.push_back(l);
        v.sizes.push_back(x.dim(static_cast<int>(a)));
        v.strides.push_back(strides[a]);
      }
      for (size_t a = 0; a < v.labels.size(); ++a) {
        // A size of 1 broadcasts against the others.
        auto it = size.find(v.labels[a]);
        if (it == size.end() || it->second == 1) {
          size[v.labels[a]] = v.sizes[a];
        } else if (v.sizes[a] != 1 && v.sizes[a] != it->second) {
          Fail("input " + std::to_string(i) + " " + x.Describe() + " gives a label size " + std::to_string(v.sizes[a]) +
               " where another operand has " + std::to_string(it->second) + " (equation '" + eq_.ToString() + "')");
        }
      }
      ops.push_back(v);
    }
    // Output labels and shape.
    out_labels_.clear();
    Shape out_shape;
    const EinsumTerm& o = eq_.output;
    for (size_t p = 0; p <= o.letters.size(); ++p) {
      if (o.has_ellipsis && p == o.ellipsis_pos)
        for (int e = 0; e < ell; ++e) out_labels_.push_back(kEllipsisBase + e);
      if (p < o.letters.size()) out_labels_.push_back(LetterId(o.letters[p]));
    }
    for (int l : out_labels_) out_shape.push_back(size.at(l));
    ctx.SetOutput(0, dtype_, out_shape);
    empty_ = false;
    for (const auto& [l, s] : size) empty_ = empty_ || s == 0;
    steps_.clear();
    buffers_.clear();
    if (empty_) return;
    // Contract left to right.
    View cur = ops[0];
    for (size_t i = 1; i < ops.size(); ++i) {
      std::vector<int> keep = out_labels_;
      for (size_t j = i + 1; j < ops.size(); ++j) keep.insert(keep.end(), ops[j].labels.begin(), ops[j].labels.end());
      auto kept = [&](int l) { return std::find(keep.begin(), keep.end(), l) != keep.end(); };
      const View& nb = ops[i];
      std::vector<int> batch, m, k, n;
      for (int l : cur.labels) {
        const bool in_b = nb.Find(l) >= 0;
        if (in_b && kept(l)) batch.push_back(l);
        else if (in_b) k.push_back(l);
        else if (kept(l)) m.push_back(l);
      }
      for (int l : nb.labels)
        if (cur.Find(l) < 0 && kept(l)) n.push_back(l);
      Contraction c;
      auto prod = [&](const std::vector<int>& ls) {
        int64_t p = 1;
        for (int l : ls) p *= size.at(l);
        return p;
      };
      c.batch = prod(batch);
      c.m = prod(m);
      c.k = prod(k);
      c.n = prod(n);
      std::vector<int> a_order = batch, b_order = batch;
      a_order.insert(a_order.end(), m.begin(), m.end());
      a_order.insert(a_order.end(), k.begin(), k.end());
      b_order.insert(b_order.end(), k.begin(), k.end());
      b_order.insert(b_order.end(), n.begin(), n.end());
      c.a = PlanGather(cur, a_order, size);
      c.b = PlanGather(nb, b_order, size);
      View res;
      res.labels = batch;
      res.labels.insert(res.labels.end(), m.begin(), m.end());
      res.labels.insert(res.labels.end(), n.begin(), n.end());
      for (int l : res.labels) res.sizes.push_back(size.at(l));
      res.strides = Strides(res.sizes);
      const bool last = i + 1 == ops.size();
      if (last && res.labels == out_labels_) {
        c.result = -1;
      } else {
        c.result = static_cast<int>(buffers_.size());
        buffers_.emplace_back(static_cast<size_t>(c.batch * c.m * c.n) * DTypeSize(dtype_));
      }
      res.source = -1 - c.result;
      if (dtype_ == DType::kFloat32) {
        using dt = dnnl::memory::data_type;
        using tag = dnnl::memory::format_tag;
        PlanStrided(c.a, {batch.size(), m.size(), k.size()});
        PlanStrided(c.b, {batch.size(), k.size(), n.size()});
        auto desc = [&](const Gather& g, const dnnl::memory::dims& dims) {
          return g.strided ? dnnl::memory::desc(dims, dt::f32, g.strides3) : dnnl::memory::desc(dims, dt::f32, tag::abc);
        };
        c.a_desc = desc(c.a, {c.batch, c.m, c.k});
        c.b_desc = desc(c.b, {c.batch, c.k, c.n});
        const dnnl::memory::desc yd({c.batch, c.m, c.n}, dt::f32, tag::abc);
        auto pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(c.a_desc, c.b_desc, yd), Engine());
        if (std::string(pd.impl_info_str()).find("ref") != std::string::npos && (c.a.strided || c.b.strided)) {
          // No fast kernel for these strides: copy into dense order instead.
          c.a.strided = c.b.strided = false;
          c.a_desc = desc(c.a, {c.batch, c.m, c.k});
          c.b_desc = desc(c.b, {c.batch, c.k, c.n});
          pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(c.a_desc, c.b_desc, yd), Engine());
        }
        c.prim = dnnl::matmul(pd);
      }
      if (!c.a.identity && !c.a.strided) a_scratch_ = std::max(a_scratch_, static_cast<size_t>(c.a.out_count));
      if (!c.b.identity && !c.b.strided) b_scratch_ = std::max(b_scratch_, static_cast<size_t>(c.b.out_count));
      steps_.push_back(std::move(c));
      cur = res;
    }
    scratch_a_.resize(a_scratch_ * DTypeSize(dtype_));
    scratch_b_.resize(b_scratch_ * DTypeSize(dtype_));
    final_needed_ = ops.size() == 1 || steps_.back().result != -1;
    if (final_needed_) final_ = PlanGather(cur, out_labels_, size);
  }

  void Compute(KernelContext& ctx) override {
    if (dtype_ == DType::kFloat32) Run<float>(ctx);
    else Run<double>(ctx);
  }

 private:
  static std::vector<int64_t> Strides(const std::vector<int64_t>& dims) {
    std::vector<int64_t> s(dims.size(), 1);
    for (size_t d = dims.size(); d-- > 1;) s[d - 1] = s[d] * dims[d];
    return s;
  }

  template <typename T>
  const T* Source(KernelContext& ctx, int source) {
    if (source >= 0) return ctx.Input(source).data<T>();
    return reinterpret_cast<const T*>(buffers_[static_cast<size_t>(-1 - source)].data());
  }

  template <typename T>
  void Run(KernelContext& ctx) {
    Tensor& y = ctx.Output(0);
    T* out = y.data<T>();
    if (empty_) {
      std::fill(out, out + y.numel(), T(0));
      return;
    }
    T* a = reinterpret_cast<T*>(scratch_a_.data());
    T* b = reinterpret_cast<T*>(scratch_b_.data());
    for (Contraction& c : steps_) {
      // Operands already in [batch, m, k] / [batch, k, n] order are read in place.
      const T* src_a = Source<T>(ctx, c.a.src.source);
      const T* src_b = Source<T>(ctx, c.b.src.source);
      const bool a_in_place = c.a.identity || c.a.strided, b_in_place = c.b.identity || c.b.strided;
      if (!a_in_place) RunGather(c.a, src_a, a);
      if (!b_in_place) RunGather(c.b, src_b, b);
      T* pa = a_in_place ? const_cast<T*>(src_a) : a;
      T* pb = b_in_place ? const_cast<T*>(src_b) : b;
      T* res = c.result < 0 ? out : reinterpret_cast<T*>(buffers_[static_cast<size_t>(c.result)].data());
      if constexpr (std::is_same_v<T, float>) {
        using dt = dnnl::memory::data_type;
        using tag = dnnl::memory::format_tag;
        dnnl::memory am(c.a_desc, Engine(), pa);
        dnnl::memory bm(c.b_desc, Engine(), pb);
        dnnl::memory ym({{c.batch, c.m, c.n}, dt::f32, tag::abc}, Engine(), res);
        c.prim.execute(Stream(), {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, ym}});
        Stream().wait();
      } else {
        BatchedProduct(c, pa, pb, res);
      }
    }
    if (final_needed_) RunGather(final_, Source<T>(ctx, final_.src.source), out);
  }

  EinsumEquation eq_;
  DType dtype_ = DType::kFloat32;
  std::vector<int> out_labels_;
  bool empty_ = false, final_needed_ = false;
  std::vector<Contraction> steps_;
  Gather final_;
  std::vector<std::vector<unsigned char>> buffers_;  // intermediates
  size_t a_scratch_ = 0, b_scratch_ = 0;  // elements
  std::vector<unsigned char> scratch_a_, scratch_b_;  // the two gathered operands
};

OT_REGISTER_CPU_KERNEL("Einsum", 12, kLatestOpset, EinsumKernel);

}  // namespace
}  // namespace cpu
}  // namespace ot
