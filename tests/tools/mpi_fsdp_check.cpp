// The FSDP unit machinery (parallel/fsdp.hpp) against a serial reference, for
// mpi_collectives_check: every rank builds the same sharded ParamRegistry from seeded full
// tensors, and recomputes every other rank's contributions to know the exact answer.
//
// The registry is built to hit the awkward cases: dim 0 of 5, 7, 1, 3, 2 rows (uneven over 2, 3
// and 4 ranks; 1, 2 and 3 rows leave some ranks with no rows at all), 1-D, 2-D and 3-D shapes,
// float32 and bfloat16 storage, compute copies rounded to bf16 or not, frozen parameters in a
// mixed unit and a unit that is entirely frozen, units whose parameter order is not the
// registration order, and units sharing weight and gradient slots.
//
//   gather      every rank gets every full tensor: bitwise rne(storage) where the compute copy is
//               rounded, the storage value otherwise; a slot's previous unit is evicted; (W - 1)
//               x block bytes counted per all-gather (block: each parameter's ceil(rows / W)
//               rows in the wire dtype, each region aligned to 64 bytes), none when already
//               gathered; one rank aliases an all-fp32 unit to the storage.
//   reduce      per rank r the reduce-dtype value x_r = R(rnd(g_r)) (rnd: bf16 rounding when the
//               compute copy is rounded); the shard gradient must be G(t / W) for t one of the
//               binary-tree sums of the x_r (additions in R: fp32, or fp32-add-then-round for
//               bf16; G the storage dtype). That is bitwise at 2 ranks (one tree); for R = fp32
//               it must also lie within Higham's gamma_{W-1} sum |x_r| / W of the exact mean
//               (plus the division's and the storage cast's rounding).
//   accumulate  GradSync::last_micro_batch: micro-batches that do not sync keep acc = R(rnd(g)),
//               then acc = R(acc + rnd(g)) (an fp32 addition rounded once to R, as torch's
//               bf16 += fp32); the syncing one reduces x_r = R(rnd(g_last) + acc).
//               GradSync::every_micro_batch: every micro-batch reduces its own x_r = R(rnd(g)) to
//               one of the tree sums t_m, the shard sums them in fp32 (a = t_1, a = fl(a + t_m)),
//               and the syncing one stores G(a / W). In both, a micro-batch that produced no
//               gradient adds zeros; discard_gradients() forgets the accumulation;
//               drop_collected() forgets an abandoned backward.
//   stats       (W - 1) x red_count x sizeof(R) per reduce-scatter (red_count: the trainable
//               parameters' ceil(rows / W) x row_len): on the syncing micro-batch only, or on every
//               micro-batch with every_micro_batch; nothing for frozen units.
//   overlap     all of the above again with non-blocking collectives through StreamOrderComm
//               (tests/tools/stream_order_comm.hpp: the order a GPU communication stream needs),
//               plus whole backwards (every unit reduced in reverse order, several
//               reduce-scatters in flight, complete_reductions() at the end): the same bits, no
//               send buffer written while communication-side work may read it, and nothing left
//               unordered before the gradients are read.
#include <functional>
#include <string>
#include <vector>

#include "core/errors.hpp"
#include "core/param_registry.hpp"
#include "model/param_io.hpp"
#include "parallel/communicator.hpp"
#include "parallel/fsdp.hpp"
#include "tests/tools/mpi_check_common.hpp"
#include "tests/tools/stream_order_comm.hpp"

namespace kktrain::check {

namespace {

struct ParamSpec {
  const char* name;
  std::vector<int64_t> shape;
  DType dtype;
  bool round;  // compute copy in bf16
  bool trainable;
};

constexpr DType F32 = DType::float32, BF16 = DType::bfloat16;

const std::vector<ParamSpec>& specs() {
  static const std::vector<ParamSpec> s = {
      {"u0.w", {5, 3}, F32, true, true},          // 0
      {"u0.b", {7}, BF16, false, true},           // 1
      {"u0.s", {1}, F32, false, true},            // 2: one row, ranks > 0 hold nothing
      {"u1.w", {3, 4}, BF16, true, true},         // 3
      {"u1.frozen", {5, 2}, F32, true, false},    // 4
      {"u1.v", {2, 3, 2}, F32, false, true},      // 5
      {"u2.frozen", {7, 2}, BF16, false, false},  // 6: the whole unit is frozen
      {"u3.a", {4, 3}, F32, false, true},         // 7: u3 is all fp32 (aliased on one rank)
      {"u3.c", {5}, F32, false, true},            // 8
      {"u4.e", {7, 5}, BF16, true, true},         // 9
  };
  return s;
}

std::vector<UnitSpec> unit_specs() {
  return {{"u0", {0, 1, 2}, 0, 0},
          {"u1", {5, 4, 3}, 0, 0},  // not registration order; shares both slots with u0
          {"u2", {6}, 1, 1},
          {"u3", {7, 8}, 1, 1},
          {"u4", {9}, 2, 2}};
}

int64_t numel_of(const ParamSpec& s) {
  int64_t n = 1;
  for (int64_t d : s.shape) n *= d;
  return n;
}

// The full fp32 tensor every rank loads (elements 0 and 1 are bf16 ties: 1 + 2^-8 rounds down to
// the even 1, 1 + 3 * 2^-8 up to the even 1 + 2^-6).
std::vector<float> full_values(int p) {
  std::vector<float> v(numel_of(specs()[p]));
  for (std::size_t e = 0; e < v.size(); ++e) v[e] = random_f32(10, 0, p * 1000 + e);
  if (v.size() > 0) v[0] = 1.0f + std::ldexp(1.0f, -8);
  if (v.size() > 1) v[1] = 1.0f + 3 * std::ldexp(1.0f, -8);
  return v;
}

float to_dtype(DType d, float x) {
  return d == BF16 ? rne(x) : x;
}
float rnd(int p, float g) {
  return specs()[p].round ? rne(g) : g;
}

template <class F>
bool throws_internal(F&& f) {
  try {
    f();
  } catch (const InternalError&) {
    return true;
  } catch (...) {
    return false;
  }
  return false;
}

void expect_traffic(Communicator& comm, Checker& ck, const CommStats& before, double payload,
                    bool call, const std::string& what) {
  const int w = comm.size();
  const CommStats& s = comm.stats();
  const double want = w > 1 && call ? payload * (w - 1) : 0.0;
  ck.expect(s.bytes_sent - before.bytes_sent == want, what + " stats bytes",
            "counted " + std::to_string(s.bytes_sent - before.bytes_sent) + ", want " +
                std::to_string(want));
  ck.expect(s.calls - before.calls == (w > 1 && call ? 1 : 0), what + " stats calls",
            "calls " + std::to_string(s.calls - before.calls));
}

class FsdpCheck {
 public:
  // so: the communicator under test when it is a StreamOrderComm (non-blocking collectives).
  FsdpCheck(Communicator& comm, Checker& ck, StreamOrderComm* so = nullptr)
      : comm_(comm), ck_(ck), r_(comm.rank()), w_(comm.size()), so_(so) {}

  void run() {
    build();
    check_shards();
    check_gather();
    if (w_ == 1) {
      check_one_rank_gradients();
    } else {
      for (GradSync gs : {GradSync::last_micro_batch, GradSync::every_micro_batch}) {
        for (DType red : {F32, BF16}) check_reduce(red, gs);
      }
      if (so_) {
        for (GradSync gs : {GradSync::last_micro_batch, GradSync::every_micro_batch}) {
          for (DType red : {F32, BF16}) check_backward(red, gs);
        }
        const auto& v = so_->violations();
        ck_.expect(v.empty(), "fsdp overlap order",
                   std::to_string(v.size()) + " violations, first: " + (v.empty() ? "" : v[0]));
      }
    }
  }

 private:
  void build() {
    const auto& s = specs();
    for (const auto& p : s) reg_.add(p.name, p.name, p.shape, ParamRole::linear, p.dtype);
    for (std::size_t p = 0; p < s.size(); ++p) {
      if (!s[p].trainable) reg_.info_mut(p).trainable = false;
      round_.push_back(s[p].round);
    }
    reg_.shard(r_, w_);
    reg_.allocate();
    for (std::size_t p = 0; p < s.size(); ++p) {
      const auto full = full_values(p);
      param_from_host(reg_, p, full);
      std::vector<float> st(full.size()), comp(full.size());
      for (std::size_t e = 0; e < full.size(); ++e) {
        st[e] = to_dtype(s[p].dtype, full[e]);
        comp[e] = s[p].round ? rne(st[e]) : st[e];
      }
      stored_.push_back(st);
      compute_.push_back(comp);
    }
  }

  // The registry's shard geometry and contents: rows [r * ceil(rows / W), ...) of the full tensor.
  void check_shards() {
    for (int p = 0; p < reg_.size(); ++p) {
      const ParamInfo& pi = reg_.info(p);
      const std::string what = std::string("shard of ") + pi.name;
      const int64_t chunk = (pi.rows + w_ - 1) / w_;
      int64_t total = 0;
      for (int k = 0; k < w_; ++k) total += ParamRegistry::shard_rows_of(pi.rows, k, w_);
      ck_.expect(pi.shard_rows == chunk && pi.row_begin == std::min(pi.rows, r_ * chunk) &&
                     pi.local_rows == ParamRegistry::shard_rows_of(pi.rows, r_, w_) &&
                     pi.local_numel == pi.local_rows * pi.row_len && total == pi.rows,
                 what, "geometry");
      const auto local = param_to_host(reg_, p);
      bool ok = static_cast<int64_t>(local.size()) == pi.local_numel;
      for (int64_t j = 0; ok && j < pi.local_numel; ++j) {
        ok = same(local[j], stored_[p][pi.row_begin * pi.row_len + j]);
      }
      ck_.expect(ok, what, "values are not this rank's rows of the stored tensor");
      ck_.expect(pi.has_grad == pi.trainable, what, "gradient buffer iff trainable");
    }
  }

  std::size_t block_bytes(const UnitSpec& u) const {
    std::size_t n = 0;
    for (int p : u.params) {
      const ParamInfo& pi = reg_.info(p);
      const std::size_t bytes = pi.shard_rows * pi.row_len * (round_[p] ? 2 : 4);
      n += (bytes + 63) / 64 * 64;
    }
    return n;
  }
  int64_t red_count(const UnitSpec& u) const {
    int64_t n = 0;
    for (int p : u.params)
      if (reg_.info(p).trainable) n += reg_.info(p).shard_rows * reg_.info(p).row_len;
    return n;
  }

  void check_weights(FsdpUnits& fs, int unit, const std::string& when) {
    for (int p : units_[unit].params) {
      const auto got = to_host(fs.weight(p), compute_[p].size());
      for (std::size_t e = 0; e < got.size(); ++e) {
        if (!same(got[e], compute_[p][e])) {
          ck_.fail(
              "gather " + when + " " + reg_.info(p).name,
              "element " + std::to_string(e) + ": " + show(got[e]) + " != " + show(compute_[p][e]));
        }
      }
    }
  }

  void gather(FsdpUnits& fs, int unit, const std::string& when) {
    CommStats before = fresh_stats(comm_);
    fs.gather(unit);
    expect_traffic(comm_, ck_, before, static_cast<double>(block_bytes(units_[unit])), true,
                   "gather " + units_[unit].name);
    ck_.expect(fs.gathered(unit), "gather " + units_[unit].name, "not marked gathered");
    check_weights(fs, unit, when);
    before = fresh_stats(comm_);
    fs.gather(unit);  // already gathered: no traffic
    expect_traffic(comm_, ck_, before, 0.0, false, "re-gather " + units_[unit].name);
  }

  void check_gather() {
    FsdpUnits fs(reg_, comm_, units_, round_, F32);
    for (int u = 0; u < fs.size(); ++u) gather(fs, u, "first");
    // Slots: u1 evicted u0 (slot 0) and u3 evicted u2 (slot 1); u4 owns slot 2.
    ck_.expect(
        !fs.gathered(0) && fs.gathered(1) && !fs.gathered(2) && fs.gathered(3) && fs.gathered(4),
        "gather slots", "eviction by units sharing a weight slot");
    gather(fs, 0, "again after eviction");
    ck_.expect(!fs.gathered(1), "gather slots", "u0 did not evict u1");
    check_weights(fs, 4, "untouched by slot 0 traffic");
    if (w_ == 1) {
      ck_.expect(fs.weight(7) == reg_.data<float>(7).data(), "gather one rank",
                 "an all-fp32 unit is not the storage itself");
    }
    fs.release(0);
    ck_.expect(throws_internal([&] { fs.weight(0); }), "gather release",
               "weights of a released unit are readable");
    fs.release_all();
    ck_.expect(!fs.gathered(4), "gather release", "release_all");
  }

  // One rank: no wire. Gradients are the model's to write; reduce_gradients leaves them alone.
  void check_one_rank_gradients() {
    FsdpUnits fs(reg_, comm_, units_, round_, F32);
    ck_.expect(throws_internal([&] { fs.grad_buffer(0); }), "one rank", "grad_buffer works");
    std::vector<std::vector<float>> want(reg_.size());
    for (int p = 0; p < reg_.size(); ++p) {
      if (!reg_.info(p).trainable) continue;
      std::vector<float> g(stored_[p].size());
      for (std::size_t e = 0; e < g.size(); ++e) g[e] = random_f32(20, 0, p * 1000 + e);
      param_from_host(reg_, p, g, ParamPart::grad);
      want[p] = param_to_host(reg_, p, ParamPart::grad);
    }
    const CommStats before = fresh_stats(comm_);
    for (int u = 0; u < fs.size(); ++u) {
      fs.reduce_gradients(u, false);
      fs.reduce_gradients(u, true);
    }
    expect_traffic(comm_, ck_, before, 0.0, false, "one rank reduce");
    for (int p = 0; p < reg_.size(); ++p) {
      if (reg_.info(p).trainable) {
        ck_.expect(param_to_host(reg_, p, ParamPart::grad) == want[p], "one rank",
                   std::string("reduce_gradients changed ") + reg_.info(p).name);
      } else {
        check_frozen(fs, p, "one rank");
      }
    }
  }

  void check_frozen(FsdpUnits& fs, int p, const std::string& what) {
    const ParamInfo& pi = reg_.info(p);
    const bool no_grad = pi.dtype == F32 ? throws_internal([&] { reg_.grad<float>(p); })
                                         : throws_internal([&] { reg_.grad<bf16>(p); });
    ck_.expect(!pi.has_grad && no_grad, what + " frozen " + pi.name, "has a gradient buffer");
    if (w_ > 1) {
      ck_.expect(throws_internal([&] { fs.grad_buffer(p); }), what + " frozen " + pi.name,
                 "grad_buffer given");
    }
  }

  // A micro-batch: whether the backward wrote gradients, and what ends it.
  enum class End { accumulate, sync, drop, accumulate_then_discard };
  struct Step {
    bool fill;
    End end;
  };
  struct Scenario {
    const char* name;
    std::vector<Step> steps;
  };

  static float grad_value(int scenario, int step, int rank, int p, int64_t e) {
    return random_f32(100 + scenario * 8 + step, rank, p * 1000 + e);
  }

  // What rank k sends for element e of p at the syncing step: x_k in the reduce dtype.
  float sent(DType red, int s, const Scenario& sc, int k, int p, int64_t e) const {
    bool have = false;
    float acc = 0.0f;
    for (std::size_t t = 0; t < sc.steps.size(); ++t) {
      const Step& st = sc.steps[t];
      const float v = st.fill ? rnd(p, grad_value(s, t, k, p, e)) : 0.0f;
      switch (st.end) {
        case End::drop:
          break;
        case End::accumulate:
        case End::accumulate_then_discard:
          acc = to_dtype(red, have ? acc + v : v);
          have = st.end == End::accumulate;
          break;
        case End::sync:
          return to_dtype(red, have ? v + acc : v);
      }
    }
    return 0.0f;
  }

  // every_micro_batch: the shard sums it may hold after the syncing micro-batch (each
  // micro-batch's reduction one of its tree sums, summed over micro-batches in fp32).
  std::vector<float> shard_sums(DType red, int s, const Scenario& sc, int p, int64_t e) const {
    const auto add = red == BF16 ? add_bf16 : add_f32;
    std::vector<float> accs;
    bool have = false;
    for (std::size_t t = 0; t < sc.steps.size(); ++t) {
      const Step& st = sc.steps[t];
      if (st.end == End::drop) continue;
      std::vector<float> x(w_);
      for (int k = 0; k < w_; ++k) {
        x[k] = to_dtype(red, st.fill ? rnd(p, grad_value(s, t, k, p, e)) : 0.0f);
      }
      const std::vector<float> trees = tree_sums(x, add);
      std::vector<float> next;
      for (float m : trees) {
        if (!have) {
          next.push_back(m);
        } else {
          for (float a : accs) next.push_back(a + m);
        }
      }
      accs = next;
      have = st.end == End::accumulate;
      if (st.end == End::sync) return accs;
    }
    return {};
  }

  void check_reduce(DType red, GradSync gs) {
    const std::vector<Scenario> scenarios = {
        {"sync", {{true, End::sync}}},
        {"accumulate x2", {{true, End::accumulate}, {true, End::sync}}},
        {"accumulate x3", {{true, End::accumulate}, {true, End::accumulate}, {true, End::sync}}},
        {"empty last micro-batch", {{true, End::accumulate}, {false, End::sync}}},
        {"discarded accumulation", {{true, End::accumulate_then_discard}, {true, End::sync}}},
        {"abandoned backward", {{true, End::drop}, {false, End::sync}}},
    };
    FsdpUnits fs(reg_, comm_, units_, round_, red);
    fs.set_grad_sync(gs);
    const bool every = gs == GradSync::every_micro_batch;
    const std::string rname =
        std::string(red == F32 ? "R=f32" : "R=bf16") + (every ? " every" : " last");
    // Units sharing a gradient slot cannot collect at the same time.
    fs.grad_buffer(0);
    ck_.expect(throws_internal([&] { fs.grad_buffer(3); }), "fsdp " + rname + " grad slots",
               "u0 and u1 collected into slot 0 together");
    fs.grad_buffer(9);  // another slot is fine
    fs.drop_collected();
    for (std::size_t s = 0; s < scenarios.size(); ++s) {
      for (int u = 0; u < fs.size(); ++u) {
        run_scenario(fs, red, every, s, scenarios[s], u, rname);
      }
    }
  }

  void run_scenario(FsdpUnits& fs, DType red, bool every, int s, const Scenario& sc, int unit,
                    const std::string& rname) {
    const UnitSpec& us = units_[unit];
    const std::string what = "fsdp " + rname + " " + sc.name + " " + us.name;
    for (int p : us.params) {  // a sentinel the reduction must overwrite
      if (reg_.info(p).trainable) {
        param_from_host(reg_, p, std::vector<float>(stored_[p].size(), 777.0f), ParamPart::grad);
      }
    }
    for (std::size_t t = 0; t < sc.steps.size(); ++t) {
      const Step& st = sc.steps[t];
      if (st.fill) {
        for (int p : us.params) {
          if (!reg_.info(p).trainable) continue;
          std::vector<float> g(stored_[p].size());
          for (std::size_t e = 0; e < g.size(); ++e) g[e] = grad_value(s, t, r_, p, e);
          to_device(fs.grad_buffer(p), g);
        }
      }
      const CommStats before = fresh_stats(comm_);
      if (st.end == End::drop) {
        fs.drop_collected();
      } else {
        fs.reduce_gradients(unit, st.end == End::sync);
        if (so_) complete(fs, what + " step " + std::to_string(t));
        if (st.end == End::accumulate_then_discard) fs.discard_gradients();
      }
      const bool reduces = st.end == End::sync || (every && st.end != End::drop);
      const bool traffic = reduces && red_count(us) > 0;
      expect_traffic(comm_, ck_, before, static_cast<double>(red_count(us) * dtype_size(red)),
                     traffic, what + " step " + std::to_string(t));
    }
    for (int p : us.params) {
      if (reg_.info(p).trainable) {
        check_shard_grad(red, every, s, sc, p, what);
      } else {
        check_frozen(fs, p, what);
      }
    }
  }

  void check_shard_grad(DType red, bool every, int s, const Scenario& sc, int p,
                        const std::string& what) {
    const ParamInfo& pi = reg_.info(p);
    const auto got = param_to_host(reg_, p, ParamPart::grad);
    const auto add = red == BF16 ? add_bf16 : add_f32;
    const float wf = static_cast<float>(w_);
    for (int64_t j = 0; j < pi.local_numel; ++j) {
      const int64_t e = pi.row_begin * pi.row_len + j;
      if (every) {
        std::vector<float> want;
        for (float a : shard_sums(red, s, sc, p, e)) want.push_back(to_dtype(pi.dtype, a / wf));
        if (!contains(want, got[j])) {
          ck_.fail(
              what + " " + pi.name + " every-micro-batch sum",
              "element " + std::to_string(e) + ": " + show(got[j]) + " not in " + show_set(want));
        }
        continue;
      }
      std::vector<float> x(w_);
      double exact = 0.0, mag = 0.0;
      for (int k = 0; k < w_; ++k) {
        x[k] = sent(red, s, sc, k, p, e);
        exact += x[k];
        mag += std::fabs(x[k]);
      }
      std::vector<float> want;
      for (float t : tree_sums(x, add)) want.push_back(to_dtype(pi.dtype, t / wf));
      const std::string where = what + " " + pi.name;
      const std::string at = "element " + std::to_string(e) + ": " + show(got[j]);
      if (!contains(want, got[j])) {
        ck_.fail(where + (w_ == 2 ? " bitwise" : " order"), at + " not in " + show_set(want));
      }
      if (red == F32) {
        // Summation (any order), then the fp32 division and the storage cast each round once.
        const double sum_err = gamma_f32(w_ - 1) * mag;
        double tol = (sum_err + std::ldexp(std::fabs(exact) + sum_err, -24)) / w_;
        if (pi.dtype == BF16) tol += std::ldexp(std::fabs(exact) / w_ + tol, -8);
        if (!(std::fabs(got[j] - exact / w_) <= tol + 1e-30)) {
          ck_.fail(where + " bound", at + " vs exact mean " + std::to_string(exact / w_));
        }
      }
    }
  }

  // The end of a backward with overlapped reductions: the shards complete, and ordered before
  // whatever reads them.
  void complete(FsdpUnits& fs, const std::string& what) {
    fs.complete_reductions();
    ck_.expect(so_->outstanding() == 0, what + " complete_reductions",
               std::to_string(so_->outstanding()) + " communication-side works left unordered");
  }

  // Whole backwards: each micro-batch reduces every unit in reverse order (the model's backward:
  // fill a unit's gradients, reduce them, next unit), so reductions are in flight on both reduce
  // wire pairs while the next units are packed; complete_reductions() ends each micro-batch.
  void check_backward(DType red, GradSync gs) {
    const std::vector<Scenario> scenarios = {
        {"sync", {{true, End::sync}}},
        {"accumulate x3", {{true, End::accumulate}, {true, End::accumulate}, {true, End::sync}}},
        {"empty last micro-batch", {{true, End::accumulate}, {false, End::sync}}},
    };
    FsdpUnits fs(reg_, comm_, units_, round_, red);
    fs.set_grad_sync(gs);
    const bool every = gs == GradSync::every_micro_batch;
    const std::string rname =
        std::string(red == F32 ? "R=f32" : "R=bf16") + (every ? " every" : " last");
    for (std::size_t s = 0; s < scenarios.size(); ++s) {
      const Scenario& sc = scenarios[s];
      const std::string what = "fsdp backward " + rname + " " + sc.name;
      for (int p = 0; p < reg_.size(); ++p) {
        if (reg_.info(p).trainable) {
          param_from_host(reg_, p, std::vector<float>(stored_[p].size(), 777.0f), ParamPart::grad);
        }
      }
      for (std::size_t t = 0; t < sc.steps.size(); ++t) {
        const Step& st = sc.steps[t];
        for (int unit = fs.size() - 1; unit >= 0; --unit) {
          for (int p : units_[unit].params) {
            if (!st.fill || !reg_.info(p).trainable) continue;
            std::vector<float> g(stored_[p].size());
            for (std::size_t e = 0; e < g.size(); ++e) {
              g[e] = grad_value(static_cast<int>(s), static_cast<int>(t), r_, p, e);
            }
            to_device(fs.grad_buffer(p), g);
          }
          fs.reduce_gradients(unit, st.end == End::sync);
        }
        complete(fs, what + " micro-batch " + std::to_string(t));
      }
      for (int p = 0; p < reg_.size(); ++p) {
        if (reg_.info(p).trainable) check_shard_grad(red, every, static_cast<int>(s), sc, p, what);
      }
    }
  }

  Communicator& comm_;
  Checker& ck_;
  int r_, w_;
  StreamOrderComm* so_;
  ParamRegistry reg_;
  std::vector<bool> round_;
  std::vector<UnitSpec> units_ = unit_specs();
  std::vector<std::vector<float>> stored_, compute_;  // full tensors: storage, compute copy
};

}  // namespace

void check_fsdp(Communicator& comm, Checker& ck) {
  FsdpCheck(comm, ck).run();
  if (comm.size() == 1) return;
  const bool was = comm.nonblocking();
  comm.set_nonblocking(true);
  StreamOrderComm so(comm);
  so.set_nonblocking(true);
  FsdpCheck(so, ck, &so).run();
  comm.set_nonblocking(was);
}

}  // namespace kktrain::check
