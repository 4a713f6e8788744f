// A training step's two synchronizations (apps/train/step_sync.hpp).
#include "apps/train/step_sync.hpp"

#include <cmath>

namespace kktrain {

StepScalars reduce_step_scalars(const DeviceSums& sums, int64_t micro_steps, double aux_sum,
                                Communicator& comm, StepLoss loss) {
  SyncScope why(SyncCause::step_scalars, /*one_wait=*/true);
  const std::vector<double> v = sums.read();
  const double m = static_cast<double>(micro_steps);
  std::vector<double> s = {v[StepSlots::kLoss] / m, v[StepSlots::kMtp] / m,
                           v[StepSlots::kGradSquares], aux_sum / m};
  for (int k = 0; k < kPairMeans; ++k) s.push_back(v[StepSlots::kPairs + k]);
  std::vector<double> none;
  comm.allreduce_host(s, none);
  const double W = static_cast<double>(comm.size());
  // Shares of the global mean add up to it over micro-batches and ranks.
  const double loss_mean = loss == StepLoss::global_shares ? s[0] * m : s[0] / W;
  StepScalars out{loss_mean, s[1] / W, std::sqrt(s[2]), s[3] / W, {}};
  out.pairs = PairMeans{s[4], s[5], s[6], s[7], s[8]};  // shares of the global means: summed
  return out;
}

StepEnd agree_step_end(const StepEndInputs& in, Communicator& comm) {
  SyncScope why(SyncCause::step_end, /*one_wait=*/true);
  std::vector<double> sums;
  std::vector<double> maxes = {static_cast<double>(in.signal), in.error ? 1.0 : 0.0};
  if (in.logged) {
    maxes.push_back(in.peak_rss_bytes);
    maxes.push_back(in.peak_device_bytes);
    sums.assign(in.counts.begin(), in.counts.end());
  }
  comm.allreduce_host(sums, maxes);
  StepEnd out;
  out.signal = static_cast<int>(maxes[0]);
  out.failed = maxes[1] > 0.0;
  if (in.logged) {
    out.peak_rss_bytes = maxes[2];
    out.peak_device_bytes = maxes[3];
    for (double c : sums) out.counts.push_back(static_cast<uint64_t>(c));
  }
  return out;
}

void add_host_sync_columns(JsonLine& row, const HostSyncCounts& syncs) {
  JsonLine by;
  for (int c = 0; c < kSyncCauses; ++c) {
    by.integer(sync_cause_name(static_cast<SyncCause>(c)), syncs.by_cause[c]);
  }
  row.integer("host_syncs", syncs.global()).object("host_syncs_by_cause", by);
  row.integer("kernel_launches", syncs.launches.kernels)
      .integer("deep_copies", syncs.launches.deep_copies);
}

}  // namespace kktrain
