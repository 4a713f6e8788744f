// Updates lost to bf16 rounding on several ranks (optim/lost_updates.hpp), for
// mpi_collectives_check: sharding splits the elements over the ranks, it must not change what
// the update does to any of them, so the counts of a sharded step summed over the ranks must
// equal the counts of the same step on the whole model, exactly.
//
// Every rank builds the same seeded full tensors twice: once sharded over the W ranks (dim 0 of
// 7, 3, 1, 5 and 600 rows: uneven, and 1 or 3 rows leave ranks empty at 2 to 4 ranks; the large
// one spans more than a CPU block on a rank) and once whole (a one-rank registry, the
// reference). Both take three optimizer steps with the same gradients and learning rates,
// counting every step, for every optimizer and master kind: torch AdamW and Adam (bf16 and
// fp32 storage), stochastic rounding (its noise is keyed on global element indices), FusedAdam
// without a master and with each kind of master and bf16 moments, SGD with a bf16 momentum
// buffer. Checked per step and dtype group: the counts summed with the communicator
// (allreduce_sum_u64) equal the reference's; each group's element count is the whole model's on
// every rank; and lost_updates() over the communicator gives the reference's fractions.
#include <string>
#include <vector>

#include "core/param_registry.hpp"
#include "model/param_io.hpp"
#include "optim/lost_updates.hpp"
#include "optim/optimizer.hpp"
#include "parallel/communicator.hpp"
#include "tests/tools/mpi_check_common.hpp"

namespace kktrain::check {

namespace {

struct Spec {
  const char* name;
  std::vector<int64_t> shape;
  bool fp32;  // kept fp32 whatever the storage dtype of the others
};

const std::vector<Spec>& param_specs() {
  static const std::vector<Spec> s = {{"a.weight", {7, 5}, false},
                                      {"b.weight", {3}, false},
                                      {"c.weight", {1, 9}, false},
                                      {"n.norm", {5}, true},
                                      {"d.weight", {600, 40}, false}};
  return s;
}

int64_t numel(const Spec& s) {
  int64_t n = 1;
  for (int64_t d : s.shape) n *= d;
  return n;
}

// Parameters of magnitude 2^-4 .. 2^4 (a 0.001 update is lost above about 0.5, seen below);
// gradients of the same spread, every 7th zero.
std::vector<float> values(int p, int step, bool grad) {
  std::vector<float> v(numel(param_specs()[p]));
  for (std::size_t e = 0; e < v.size(); ++e) {
    v[e] = random_f32(grad ? 40 + step : 30, 0, p * 100000 + e);
    if (grad && e % 7 == 3) v[e] = 0.0f;
  }
  return v;
}

ParamRegistry make_registry(DType storage, int rank, int world) {
  ParamRegistry reg;
  for (const Spec& s : param_specs()) {
    reg.add(s.name, s.name, s.shape, ParamRole::linear, s.fp32 ? DType::float32 : storage);
  }
  reg.shard(rank, world);
  reg.allocate();
  for (int i = 0; i < reg.size(); ++i) param_from_host(reg, i, values(i, 0, false));
  return reg;
}

struct Pattern {
  std::string name;
  DType storage;
  OptimizerConfig cfg;
};

std::vector<Pattern> patterns() {
  std::vector<Pattern> out;
  OptimizerConfig adamw;
  adamw.weight_decay = 0.1;
  out.push_back({"adamw bf16 (risky)", DType::bfloat16, adamw});
  out.push_back({"adamw fp32 (B)", DType::float32, adamw});
  OptimizerConfig sr = adamw;
  sr.stochastic_rounding = true;
  out.push_back({"adamw bf16, stochastic rounding", DType::bfloat16, sr});
  OptimizerConfig adam = adamw;
  adam.kind = OptimizerKind::adam;
  out.push_back({"adam (L2) bf16", DType::bfloat16, adam});
  OptimizerConfig fused;
  fused.kind = OptimizerKind::fused_adam;
  fused.weight_decay = 0.01;
  fused.master_weights = false;
  fused.exp_avg_dtype = fused.exp_avg_sq_dtype = DType::bfloat16;
  out.push_back({"fused, no master, bf16 moments", DType::bfloat16, fused});
  fused.master_weights = true;
  fused.store_param_remainders = true;
  out.push_back({"fused remainder, bf16 moments", DType::bfloat16, fused});
  fused.exp_avg_dtype = fused.exp_avg_sq_dtype = DType::float32;
  out.push_back({"fused remainder, fp32 moments (A)", DType::bfloat16, fused});
  fused.store_param_remainders = false;
  fused.exp_avg_sq_dtype = DType::bfloat16;
  out.push_back({"fused fp32 master, bf16 exp_avg_sq", DType::bfloat16, fused});
  OptimizerConfig sgd;
  sgd.kind = OptimizerKind::sgd;
  sgd.momentum = 0.9;
  sgd.weight_decay = 0.01;
  out.push_back({"sgd momentum bf16", DType::bfloat16, sgd});
  return out;
}

void check_pattern(Communicator& comm, Checker& ck, const Pattern& pt) {
  ParamRegistry shard = make_registry(pt.storage, comm.rank(), comm.size());
  ParamRegistry whole = make_registry(pt.storage, 0, 1);
  auto opt = make_optimizer(pt.cfg, shard, 7);
  auto ref = make_optimizer(pt.cfg, whole, 7);
  opt->set_count_rounding(true);
  ref->set_count_rounding(true);
  const double lrs[3] = {1e-3, 2e-3, 5e-4};
  uint64_t nonzero = 0;
  for (int step = 1; step <= 3; ++step) {
    for (int i = 0; i < shard.size(); ++i) {
      param_from_host(shard, i, values(i, step, true), ParamPart::grad);
      param_from_host(whole, i, values(i, step, true), ParamPart::grad);
    }
    opt->step(lrs[step - 1], 1.0f);
    ref->step(lrs[step - 1], 1.0f);
    const auto& mine = opt->rounding_counts();
    const auto& want = ref->rounding_counts();
    const std::string what = "lost updates, " + pt.name + ", step " + std::to_string(step);
    ck.expect(mine.size() == want.size(), what, "group count differs");
    if (mine.size() != want.size()) return;
    for (std::size_t k = 0; k < mine.size(); ++k) {
      const std::string group = what + ", " + dtype_name(want[k].dtype) + " group";
      ck.expect(mine[k].elements == want[k].elements, group,
                "elements " + std::to_string(mine[k].elements) + " (whole model " +
                    std::to_string(want[k].elements) + ")");
      const UpdateCounts& c = mine[k].counts;
      const int64_t counts[3] = {c.param_unchanged, c.moment_lost[0], c.moment_lost[1]};
      const int64_t ref_counts[3] = {want[k].counts.param_unchanged, want[k].counts.moment_lost[0],
                                     want[k].counts.moment_lost[1]};
      const char* names[3] = {"param_unchanged", "moment_lost[0]", "moment_lost[1]"};
      for (int j = 0; j < 3; ++j) {
        const uint64_t sum = comm.allreduce_sum_u64(static_cast<uint64_t>(counts[j]));
        nonzero += sum;
        ck.expect(sum == static_cast<uint64_t>(ref_counts[j]), group,
                  std::string(names[j]) + " summed over ranks " + std::to_string(sum) +
                      ", whole model " + std::to_string(ref_counts[j]));
      }
    }
    const LostUpdates l = lost_updates(mine, [&](uint64_t v) { return comm.allreduce_sum_u64(v); });
    const LostUpdates r = lost_updates(want, [](uint64_t v) { return v; });
    ck.expect(l.update_lost_frac == r.update_lost_frac && l.ema_lost_frac == r.ema_lost_frac &&
                  l.sr_unchanged_frac == r.sr_unchanged_frac &&
                  l.master_held_frac == r.master_held_frac,
              what + ", fractions",
              "update_lost_frac, ema_lost_frac, sr_unchanged_frac, master_held_frac " +
                  std::to_string(l.update_lost_frac) + " " + std::to_string(l.ema_lost_frac) + " " +
                  std::to_string(l.sr_unchanged_frac) + " " + std::to_string(l.master_held_frac) +
                  ", whole model " + std::to_string(r.update_lost_frac) + " " +
                  std::to_string(r.ema_lost_frac) + " " + std::to_string(r.sr_unchanged_frac) +
                  " " + std::to_string(r.master_held_frac));
  }
  // The data must exercise the counting: something is counted in every pattern but fp32 storage.
  ck.expect((nonzero > 0) == (pt.storage == DType::bfloat16),
            "lost updates, " + pt.name + ", something counted", "total " + std::to_string(nonzero));
}

}  // namespace

void check_lost_updates(Communicator& comm, Checker& ck) {
  for (const Pattern& p : patterns()) check_pattern(comm, ck, p);
}

}  // namespace kktrain::check
