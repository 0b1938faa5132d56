// The tile interpreter: evaluates any formula and reduction in float64 without a compiler.
//
// It is the fallback when no compiler is usable and the oracle the compiled kernels are tested
// against, so it favours exact semantics (NaN, ties, index order) over speed.
#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "backend/backend.hpp"
#include "backend/cpu/reduce_state.hpp"
#include "backend/cpu/thread_pool.hpp"
#include "ops/op.hpp"

namespace tessel {

std::vector<const RowBlock*> Problem::block_of_rows() const {
  std::vector<const RowBlock*> of(static_cast<size_t>(n_outer), nullptr);
  for (const RowBlock& b : blocks)
    for (int64_t o = b.begin; o < b.end; ++o) of[o] = &b;
  return of;
}

const Bound& Problem::var(int index) const {
  for (const Bound& b : vars)
    if (b.index == index) return b;
  TESSEL_UNREACHABLE("variable ", index, " is not bound");
}

namespace {

struct Program {
  std::vector<NodePtr> nodes;
  std::vector<int> offset;            // first Lanes component of each node
  std::vector<const Bound*> bound;    // for Var nodes
  std::vector<const SlotVar*> slot;   // for Var nodes filled per Gather slot
  int total = 0;
  int f_pos = -1, w_pos = -1;

  Program(const Problem& p) {
    std::unordered_map<const Node*, int> pos;
    auto add = [&](const Formula& f) {
      if (!f.valid()) return -1;
      for (const NodePtr& n : topo_order(f.ptr())) {
        if (pos.count(n.get())) continue;
        pos[n.get()] = static_cast<int>(nodes.size());
        nodes.push_back(n);
        offset.push_back(total);
        total += n->dim;
        const Bound* b = nullptr;
        const SlotVar* s = nullptr;
        if (n->is_var()) {
          for (const SlotVar& sv : p.r->slot_vars)
            if (sv.var == n->var_index()) s = &sv;
          if (!s) b = &p.var(n->var_index());
        }
        bound.push_back(b);
        slot.push_back(s);
      }
      return pos.at(f.ptr().get());
    };
    f_pos = add(p.r->f);
    w_pos = add(p.r->weight);
  }
};

// Evaluates all nodes for one anchor row and kLanes partner rows (lane l: partner[l], Gather
// slot slot_k[l]); argument positions are resolved once.
struct Evaluator {
  const Program& prog;
  const Problem& p;
  std::vector<std::vector<int>> arg_pos;
  std::vector<Lanes> buf;
  Evaluator(const Program& pr, const Problem& pb) : prog(pr), p(pb), buf(pr.total) {
    std::unordered_map<const Node*, int> pos;
    for (size_t q = 0; q < pr.nodes.size(); ++q) pos[pr.nodes[q].get()] = static_cast<int>(q);
    arg_pos.resize(pr.nodes.size());
    for (size_t q = 0; q < pr.nodes.size(); ++q)
      for (const NodePtr& a : pr.nodes[q]->args) arg_pos[q].push_back(pos.at(a.get()));
  }
  void run() {
    std::vector<const Lanes*> args;
    for (size_t q = 0; q < prog.nodes.size(); ++q) {
      const Node& n = *prog.nodes[q];
      if (n.args.empty()) continue;
      args.clear();
      for (int a : arg_pos[q]) args.push_back(&buf[prog.offset[a]]);
      op_info(n.op).apply_l(n, args.data(), &buf[prog.offset[q]]);
    }
  }
  void leaves(Category anchor_cat, int64_t anchor, const int64_t* partner, const int* slot_k) {
    for (size_t q = 0; q < prog.nodes.size(); ++q) {
      const Node& n = *prog.nodes[q];
      if (!n.args.empty()) continue;
      Lanes* out = &buf[prog.offset[q]];
      if (n.op == OpCode::Const) {
        out[0] = Lanes(n.value);
      } else if (n.op == OpCode::Zero) {
        for (int c = 0; c < n.dim; ++c) out[c] = Lanes(0.0);
      } else if (const SlotVar* s = prog.slot[q]) {
        // Slot k fills component k % dim (reduction_impl.hpp): KMin's slot k * D + c is the
        // k-th best of component c.
        const Bound* e = s->kind == SlotKind::OneHot ? nullptr : &p.var(s->src);
        for (int c = 0; c < n.dim; ++c)
          for (int l = 0; l < kLanes; ++l)
            out[c].v[l] = c != slot_k[l] % n.dim        ? 0.0
                          : s->kind == SlotKind::Elem   ? e->at(anchor, slot_k[l])
                          : s->kind == SlotKind::Masked ? e->at(anchor, c)
                                                        : 1.0;
      } else {
        const Bound& b = *prog.bound[q];
        if (b.cat == Category::Param || b.cat == anchor_cat) {
          const int64_t row = b.cat == Category::Param ? 0 : anchor;
          for (int c = 0; c < n.dim; ++c) out[c] = Lanes(b.at(row, c));
        } else {
          for (int c = 0; c < n.dim; ++c)
            for (int l = 0; l < kLanes; ++l) out[c].v[l] = b.at(partner[l], c);
        }
      }
    }
  }
  double f(int c, int l) const { return buf[prog.offset[prog.f_pos] + c].v[l]; }
  double w(int c, int l) const { return buf[prog.offset[prog.w_pos] + c].v[l]; }
};

void store(const ArrayView& out, int64_t row, int c, double v, int dim) {
  const int64_t off = row * dim + c;
  switch (out.dtype) {
    case DType::Float32: static_cast<float*>(out.data)[off] = static_cast<float>(v); break;
    case DType::Float64: static_cast<double*>(out.data)[off] = v; break;
    case DType::Int64: static_cast<int64_t*>(out.data)[off] = static_cast<int64_t>(v); break;
    default: break;  // half outputs are float32 buffers by the time a backend runs
  }
}

void run_sum_like(const Problem& p, const Program& prog, std::span<const ArrayView> outs) {
  const ReductionImpl& r = *p.r;
  const int wd = r.weight.valid() ? r.weight.dim() : 0;
  const std::vector<const RowBlock*> block_of = p.block_of_rows();
  parallel_for(p.n_outer, 64, p.threads, [&](int64_t begin, int64_t end) {
    Evaluator ev(prog, p);
    ReduceState st(r.op, r.f.dim(), wd, r.k);
    int64_t partner[kLanes];
    int slot_k[kLanes] = {};
    std::vector<double> fv(r.f.dim()), wv(std::max(wd, 1));
    for (int64_t o = begin; o < end; ++o) {
      st.reset();
      const std::vector<int64_t> none;
      const std::vector<int64_t>& iv = block_of[o] ? block_of[o]->iv : none;
      for (size_t q = 0; q + 1 < iv.size(); q += 2)
      for (int64_t j0 = iv[q]; j0 < iv[q + 1]; j0 += kLanes) {
        const int nl = static_cast<int>(std::min<int64_t>(kLanes, iv[q + 1] - j0));
        for (int l = 0; l < kLanes; ++l) partner[l] = j0 + std::min(l, nl - 1);
        ev.leaves(r.outer(), o, partner, slot_k);
        ev.run();
        for (int l = 0; l < nl; ++l) {
          for (int c = 0; c < r.f.dim(); ++c) fv[c] = ev.f(c, l);
          for (int c = 0; c < wd; ++c) wv[c] = ev.w(c, l);
          st.push(fv.data(), wv.data(), j0 + l);
        }
      }
      st.finish([&](int out, int c, double v) {
        store(outs[out], o, c, v, r.output_dim(out));
      });
    }
  });
}

// Gather: out[a] = sum_k G(a, idx[a, k]); Scatter: out[idx[a, k]] += G(a, idx[a, k]).
void run_gather_scatter(const Problem& p, const Program& prog, std::span<const ArrayView> outs) {
  const ReductionImpl& r = *p.r;
  const bool gather = r.op == ReductionOp::GatherSum;
  const Category anchor_cat = gather ? r.outer() : r.inner();
  const int64_t n_anchor = gather ? p.n_outer : p.n_inner;
  const int64_t n_partner = gather ? p.n_inner : p.n_outer;
  const Bound& idx = p.var(r.index_var);
  const int D = r.f.dim();
  std::vector<double> acc(static_cast<size_t>(gather ? 0 : p.n_outer * D), 0.0);
  auto body = [&](int64_t begin, int64_t end) {
    Evaluator ev(prog, p);
    int64_t partner[kLanes];
    int slot_k[kLanes];
    std::vector<double> row(D);
    for (int64_t a = begin; a < end; ++a) {
      std::fill(row.begin(), row.end(), 0.0);
      for (int k0 = 0; k0 < r.k; k0 += kLanes) {
        const int nl = std::min(kLanes, r.k - k0);
        bool valid[kLanes];
        for (int l = 0; l < kLanes; ++l) {
          const int k = k0 + std::min(l, nl - 1);
          slot_k[l] = k;
          const int64_t j = idx.index_at(a, k);
          valid[l] = l < nl && j >= 0 && j < n_partner;
          partner[l] = valid[l] ? j : 0;
        }
        if (n_partner == 0) break;
        ev.leaves(anchor_cat, a, partner, slot_k);
        ev.run();
        for (int l = 0; l < nl; ++l) {
          if (!valid[l]) continue;
          for (int c = 0; c < D; ++c) {
            if (gather) row[c] += ev.f(c, l);
            else acc[partner[l] * D + c] += ev.f(c, l);
          }
        }
      }
      if (gather)
        for (int c = 0; c < D; ++c) store(outs[0], a, c, row[c], D);
    }
  };
  if (gather) {
    parallel_for(n_anchor, 64, p.threads, body);
  } else {
    body(0, n_anchor);  // sequential: scatter-adds stay deterministic
    for (int64_t q = 0; q < p.n_outer; ++q)
      for (int c = 0; c < D; ++c) store(outs[0], q, c, acc[q * D + c], D);
  }
}

// Runs every problem: the fallback of the others, so it never declines.
class InterpreterBackend final : public KernelBackend {
 public:
  const char* name() const override { return "interpreter"; }
  bool run(const Problem& p, std::span<const ArrayView> outs) override {
    const Program prog(p);
    if (reduction_info(p.r->op).is_indexed())
      run_gather_scatter(p, prog, outs);
    else
      run_sum_like(p, prog, outs);
    return true;
  }
};

}  // namespace

KernelBackend& interpreter_backend() {
  static InterpreterBackend* b = new InterpreterBackend();
  return *b;
}

}  // namespace tessel
