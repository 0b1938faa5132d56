// TensorDot's index bookkeeping: contraction of two flat row-major tensors, with an output
// permutation.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "ops/contraction.hpp"
#include "tessel/error.hpp"

namespace tessel {

// out = contract(a, b) with its axes permuted; the pre-permutation axes are a's free axes then b's.
// As in KeOps's TensorDot, perm[q] is the output position of pre-permutation axis q (so that
// out = pre.permute(argsort(perm)) in torch's words); the IR holds KeOps's own parameters, so the
// text, the builder and the printer need no translation. The permutation also lets a VJP be
// another TensorDot, so derivatives of any order stay in the IR.
struct TensorDotSpec {
  std::vector<int64_t> dims_a, dims_b, contr_a, contr_b, perm;

  static TensorDotSpec decode(std::span<const int64_t> ip) {
    TensorDotSpec t;
    size_t p = 0;
    auto take = [&](std::vector<int64_t>& v, int64_t n) {
      if (n < 0 || p + static_cast<size_t>(n) > ip.size())
        detail::fail("TensorDot", "malformed parameters");
      v.assign(ip.begin() + p, ip.begin() + p + n);
      p += n;
    };
    auto count = [&]() {
      if (p >= ip.size()) detail::fail("TensorDot", "malformed parameters");
      return ip[p++];
    };
    take(t.dims_a, count());
    take(t.dims_b, count());
    const int64_t nc = count();
    take(t.contr_a, nc);
    take(t.contr_b, nc);
    take(t.perm, static_cast<int64_t>(ip.size() - p));
    return t;
  }
  std::vector<int64_t> encode() const {
    std::vector<int64_t> ip;
    ip.push_back(dims_a.size());
    ip.insert(ip.end(), dims_a.begin(), dims_a.end());
    ip.push_back(dims_b.size());
    ip.insert(ip.end(), dims_b.begin(), dims_b.end());
    ip.push_back(contr_a.size());
    ip.insert(ip.end(), contr_a.begin(), contr_a.end());
    ip.insert(ip.end(), contr_b.begin(), contr_b.end());
    ip.insert(ip.end(), perm.begin(), perm.end());
    return ip;
  }
  static int64_t product(const std::vector<int64_t>& d) {
    int64_t p = 1;
    for (int64_t v : d) p = detail::checked_mul(p, v, "TensorDot", "the product of the dims");
    return p;
  }
  static std::vector<int64_t> complement(const std::vector<int64_t>& contracted, size_t rank) {
    std::vector<int64_t> f;
    for (int64_t ax = 0; ax < static_cast<int64_t>(rank); ++ax)
      if (std::find(contracted.begin(), contracted.end(), ax) == contracted.end()) f.push_back(ax);
    return f;
  }
  std::vector<int64_t> free_a() const { return complement(contr_a, dims_a.size()); }
  std::vector<int64_t> free_b() const { return complement(contr_b, dims_b.size()); }
  std::vector<int64_t> pre_dims() const {
    std::vector<int64_t> d;
    for (int64_t ax : free_a()) d.push_back(dims_a[ax]);
    for (int64_t ax : free_b()) d.push_back(dims_b[ax]);
    return d;
  }
  // inverse(p)[p[q]] = q. Applied to perm: the pre-permutation axis that output axis t holds.
  static std::vector<int64_t> inverse(const std::vector<int64_t>& p) {
    std::vector<int64_t> inv(p.size());
    for (size_t q = 0; q < p.size(); ++q) inv[p[q]] = static_cast<int64_t>(q);
    return inv;
  }
  std::vector<int64_t> source_axes() const { return inverse(perm); }
  std::vector<int64_t> out_dims() const {
    const auto pre = pre_dims();
    std::vector<int64_t> d;
    for (int64_t q : source_axes()) d.push_back(pre[q]);
    return d;
  }
  int out_size() const { return static_cast<int>(product(out_dims())); }

  void check(int da, int db) const {
    auto axes_ok = [](const std::vector<int64_t>& ax, size_t rank) {
      for (size_t k = 0; k < ax.size(); ++k) {
        if (ax[k] < 0 || ax[k] >= static_cast<int64_t>(rank)) return false;
        for (size_t l = 0; l < k; ++l)
          if (ax[l] == ax[k]) return false;
      }
      return true;
    };
    for (int64_t v : dims_a)
      if (v < 1) detail::fail("TensorDot", "dims of the first tensor must be >= 1");
    for (int64_t v : dims_b)
      if (v < 1) detail::fail("TensorDot", "dims of the second tensor must be >= 1");
    if (product(dims_a) != da)
      detail::fail("TensorDot", "the first tensor's dims multiply to ", product(dims_a),
                   " but the formula has dim ", da);
    if (product(dims_b) != db)
      detail::fail("TensorDot", "the second tensor's dims multiply to ", product(dims_b),
                   " but the formula has dim ", db);
    if (contr_a.size() != contr_b.size() || !axes_ok(contr_a, dims_a.size()) ||
        !axes_ok(contr_b, dims_b.size()))
      detail::fail("TensorDot", "contracted axes must be distinct, in range and paired");
    for (size_t k = 0; k < contr_a.size(); ++k)
      if (dims_a[contr_a[k]] != dims_b[contr_b[k]])
        detail::fail("TensorDot", "contracted axes ", contr_a[k], " and ", contr_b[k],
                     " have sizes ", dims_a[contr_a[k]], " and ", dims_b[contr_b[k]]);
    const size_t r = dims_a.size() + dims_b.size() - 2 * contr_a.size();
    std::vector<int64_t> sorted = perm;
    std::sort(sorted.begin(), sorted.end());
    for (size_t k = 0; k < sorted.size(); ++k)
      if (sorted[k] != static_cast<int64_t>(k) || sorted.size() != r)
        detail::fail("TensorDot", "the output permutation must be a permutation of ", r, " axes");
    if (sorted.size() != r)
      detail::fail("TensorDot", "the output permutation must be a permutation of ", r, " axes");
  }

  // The sums as a Contraction: output axes in output order, each a stride in a or in b.
  Contraction contraction() const {
    const auto fa = free_a(), fb = free_b();
    const auto od = out_dims(), src = source_axes();
    std::vector<int64_t> sa(dims_a.size(), 1), sb(dims_b.size(), 1);
    for (int k = static_cast<int>(dims_a.size()) - 2; k >= 0; --k)
      sa[k] = sa[k + 1] * dims_a[k + 1];
    for (int k = static_cast<int>(dims_b.size()) - 2; k >= 0; --k)
      sb[k] = sb[k + 1] * dims_b[k + 1];
    Contraction c;
    for (size_t t = 0; t < od.size(); ++t) {
      const int64_t q = src[t], nfa = static_cast<int64_t>(fa.size());
      c.out.push_back({od[t], q < nfa ? sa[fa[q]] : 0, q < nfa ? 0 : sb[fb[q - nfa]]});
    }
    for (size_t k = 0; k < contr_a.size(); ++k)
      c.con.push_back({dims_a[contr_a[k]], sa[contr_a[k]], sb[contr_b[k]]});
    return c;
  }

  static int64_t position(const std::vector<int64_t>& v, int64_t x) {
    return std::find(v.begin(), v.end(), x) - v.begin();
  }
  // d<out, g>/da as TensorDot(g, b, ...). `from` is built as source axes (a's axis al receives
  // the VJP's pre-permutation axis from[al]) and stored inverted, as every perm is.
  TensorDotSpec vjp_a() const {
    const auto fa = free_a(), fb = free_b(), src = source_axes();
    const int64_t nfa = fa.size();
    TensorDotSpec s;
    s.dims_a = out_dims();
    s.dims_b = dims_b;
    std::vector<int64_t> fg;  // g axes left free: they carry a's free axes
    for (size_t t = 0; t < src.size(); ++t) {
      if (src[t] >= nfa) {
        s.contr_a.push_back(t);
        s.contr_b.push_back(fb[src[t] - nfa]);
      } else {
        fg.push_back(t);
      }
    }
    std::vector<int64_t> cb_sorted = contr_b;
    std::sort(cb_sorted.begin(), cb_sorted.end());
    std::vector<int64_t> from(dims_a.size());
    for (int64_t al = 0; al < static_cast<int64_t>(dims_a.size()); ++al) {
      const int64_t r = position(fa, al);
      if (r < nfa) {
        from[al] = position(fg, perm[r]);
      } else {
        const int64_t beta = contr_b[position(contr_a, al)];
        from[al] = fg.size() + position(cb_sorted, beta);
      }
    }
    s.perm = inverse(from);
    return s;
  }
  // The same product written TensorDot(b, a, ...): the remaining axes are then b's before a's.
  TensorDotSpec swapped() const {
    const size_t nfa = dims_a.size() - contr_a.size();
    TensorDotSpec s;
    s.dims_a = dims_b;
    s.dims_b = dims_a;
    s.contr_a = contr_b;
    s.contr_b = contr_a;
    s.perm.assign(perm.begin() + nfa, perm.end());
    s.perm.insert(s.perm.end(), perm.begin(), perm.begin() + nfa);
    return s;
  }
  // d<out, g>/db as TensorDot(a, g, ...): vjp_a of the swapped product, swapped back.
  TensorDotSpec vjp_b() const { return swapped().vjp_a().swapped(); }
};

}  // namespace tessel
