// FSDP2-style units: gather in the compute dtype, reduce-scatter in the reduce dtype
// (parallel/fsdp.hpp has the what and why): buffers, launch tables and the order of collectives.
// Each data movement of a unit is one launch per dtype pair over a table of its parameters
// (TensorTable), its kernel in parallel/fsdp_kernels.hpp.
#include "parallel/fsdp.hpp"

#include <algorithm>
#include <tuple>

#include "core/errors.hpp"
#include "parallel/fsdp_kernels.hpp"

namespace kktrain {

namespace {

using Bytes = Kokkos::View<char*, MemSpace>;

constexpr std::size_t kAlign = 64;  // every parameter's region starts on a cache line

std::size_t align_up(std::size_t n) {
  return (n + kAlign - 1) / kAlign * kAlign;
}

void ensure_bytes(Bytes& b, std::size_t n, const char* label) {
  if (b.extent(0) < n) b = Bytes(std::string(label), n);
}

DType wire_dtype(bool round) {
  return round ? DType::bfloat16 : DType::float32;
}

}  // namespace

namespace {
ComputeLayout fp32_layout(std::vector<bool> round) {
  ComputeLayout l;
  l.dtype.assign(round.size(), DType::float32);
  l.group.assign(round.size(), -1);
  l.round = std::move(round);
  return l;
}
}  // namespace

FsdpUnits::FsdpUnits(ParamRegistry& reg, Communicator& comm, std::vector<UnitSpec> units,
                     std::vector<bool> round_compute, DType reduce_dtype)
    : FsdpUnits(reg, comm, std::move(units), fp32_layout(std::move(round_compute)), reduce_dtype) {}

FsdpUnits::FsdpUnits(ParamRegistry& reg, Communicator& comm, std::vector<UnitSpec> units,
                     ComputeLayout layout, DType reduce_dtype)
    : FsdpUnits(reg, &comm, std::move(units), std::move(layout), reduce_dtype) {
  if (!reg.allocated()) throw InternalError("FsdpUnits over an unallocated registry");
}

FsdpUnits::FsdpUnits(ParamRegistry& reg, Communicator* comm, std::vector<UnitSpec> units,
                     ComputeLayout layout, DType reduce_dtype)
    : reg_(reg),
      comm_(comm),
      rank_(reg.shard_rank()),
      world_(reg.shard_world()),
      round_(std::move(layout.round)),
      cdtype_(std::move(layout.dtype)),
      group_(std::move(layout.group)),
      reduce_(reduce_dtype),
      unit_of_(reg.size(), -1),
      pos_in_unit_(reg.size(), -1),
      acc_(reg.size()) {
  const std::size_t np = static_cast<std::size_t>(reg.size());
  if (round_.size() != np || cdtype_.size() != np || group_.size() != np) {
    throw InternalError("compute layout does not cover every parameter");
  }
  for (std::size_t p = 0; p < np; ++p) {
    if (cdtype_[p] == DType::bfloat16 && !round_[p]) {
      throw InternalError("bf16 compute copy of " + reg.info(p).name + " without rounding");
    }
  }
  if (comm && (world_ != comm->size() || rank_ != comm->rank())) {
    throw InternalError("registry sharded for rank " + std::to_string(rank_) + " of " +
                        std::to_string(world_) + ", communicator is rank " +
                        std::to_string(comm->rank()) + " of " + std::to_string(comm->size()));
  }
  int weight_slots = 0, grad_slots = 0;
  for (auto& spec : units) {
    Unit u;
    u.spec = std::move(spec);
    u.world = u.spec.experts ? reg.expert_data_parallel() : world_;
    for (std::size_t k = 0; k < u.spec.params.size(); ++k) {
      const int p = u.spec.params[k];
      if (unit_of_[p] >= 0) throw InternalError("parameter in two units: " + reg.info(p).name);
      unit_of_[p] = static_cast<int>(units_.size());
      pos_in_unit_[p] = static_cast<int>(k);
    }
    plan_unit(u);
    weight_slots = std::max(weight_slots, u.spec.weight_slot + 1);
    grad_slots = std::max(grad_slots, u.spec.grad_slot + 1);
    units_.push_back(std::move(u));
  }
  for (int p = 0; p < reg.size(); ++p) {
    // Expert parameters held by other expert-parallel ranks are in none of this rank's units.
    const int owner = reg.info(p).expert_owner;
    const bool held = owner < 0 || owner == rank_ % reg.expert_parallel();
    if (unit_of_[p] < 0 && held) throw InternalError("parameter in no unit: " + reg.info(p).name);
  }
  weight_slots_.resize(weight_slots);
  grad_slots_.resize(grad_slots);
  grad_slot_owner_.assign(grad_slots, -1);
}

void FsdpUnits::plan_unit(Unit& u) const {
  // One rank: a parameter whose storage already is its compute copy (same dtype, no rounding)
  // is used in place. A fused group is aliased all or none, so its members stay adjacent (they
  // are registered back to back, so they are adjacent in the storage of their dtype).
  auto aliasable = [&](int p) {
    const ParamInfo& pi = reg_.info(p);
    return world_ == 1 && pi.dtype == cdtype_[p] && !(round_[p] && cdtype_[p] == DType::float32);
  };
  const std::size_t n = u.spec.params.size();
  for (std::size_t k = 0; k < n; ++k) {
    const int p = u.spec.params[k];
    bool alias = aliasable(p);
    if (alias && group_[p] >= 0) {
      for (int q : u.spec.params) {
        if (group_[q] == group_[p]) alias = alias && aliasable(q);
      }
    }
    const ParamInfo& pi = reg_.info(p);
    u.aliased.push_back(alias);
    u.comp_off.push_back(u.numel);
    u.numel += pi.numel;
    // Fused members sit back to back (no alignment gap between them), so q/k/v is one matrix.
    const bool fused_next =
        group_[p] >= 0 && k + 1 < n && group_[u.spec.params[k + 1]] == group_[p];
    u.wbyte_off.push_back(alias ? 0 : u.weight_bytes);
    if (!alias) {
      const std::size_t b = static_cast<std::size_t>(pi.numel) * dtype_size(cdtype_[p]);
      u.weight_bytes += fused_next ? b : align_up(b);
    }
    const std::size_t padded = static_cast<std::size_t>(pi.shard_rows * pi.row_len);
    u.wire_off.push_back(u.block_bytes);
    u.block_bytes += align_up(padded * dtype_size(wire_dtype(round_[p])));
    u.red_off.push_back(pi.trainable ? u.red_count : -1);
    if (pi.trainable) u.red_count += static_cast<int64_t>(padded);
  }
}

void FsdpUnits::set_expert_comm(Communicator* comm) {
  if (comm && (comm->size() != reg_.expert_data_parallel() ||
               comm->rank() != rank_ / reg_.expert_parallel())) {
    throw InternalError("expert communicator of rank " + std::to_string(comm->rank()) + " of " +
                        std::to_string(comm->size()) + " for expert shards over " +
                        std::to_string(reg_.expert_data_parallel()) + " ranks");
  }
  expert_comm_ = comm;
}

Communicator& FsdpUnits::unit_comm(const Unit& u) const {
  if (!u.spec.experts || reg_.expert_parallel() == 1) return *comm_;
  if (!expert_comm_)
    throw InternalError("expert unit " + u.spec.name + " without its communicator");
  return *expert_comm_;
}

char* FsdpUnits::weight_buffer(const Unit& u) {
  Kokkos::View<char*, MemSpace>& b = weight_slots_[u.spec.weight_slot];
  if (b.extent(0) < u.weight_bytes) {
    b = Kokkos::View<char*, MemSpace>();  // free before allocating the larger one
    b = Kokkos::View<char*, MemSpace>("fsdp_weights_" + u.spec.name, u.weight_bytes);
  }
  return b.data();
}

DView<float>& FsdpUnits::grad_slot(const Unit& u) {
  DView<float>& b = grad_slots_[u.spec.grad_slot];
  if (static_cast<int64_t>(b.extent(0)) < u.numel) {
    b = DView<float>();
    b = DView<float>("fsdp_grads_" + u.spec.name, u.numel);
  }
  return b;
}

UnitBufferBytes FsdpUnits::plan(const ParamRegistry& reg, std::vector<UnitSpec> units,
                                ComputeLayout layout, DType reduce_dtype, bool accumulates,
                                GradSync sync, bool overlapped) {
  // The planning instance only reads the registry (plan_unit); nothing is allocated.
  const FsdpUnits f(const_cast<ParamRegistry&>(reg), nullptr, std::move(units), std::move(layout),
                    reduce_dtype);
  UnitBufferBytes b;
  std::vector<int64_t> wslot(f.weight_slots_.size(), 0), gslot(f.grad_slots_.size(), 0);
  int64_t send = 0, recv = 0, red_send = 0, red_recv = 0;
  const int64_t esize = static_cast<int64_t>(dtype_size(reduce_dtype));
  for (const Unit& u : f.units_) {
    // weight_buffer(): a slot grows to its largest unit; one rank casts, several gather.
    if (u.weight_bytes > 0) {
      int64_t& w = wslot[u.spec.weight_slot];
      w = std::max(w, static_cast<int64_t>(u.weight_bytes));
      if (f.world_ > 1) {
        send = std::max(send, static_cast<int64_t>(u.block_bytes));
        recv = std::max(recv, static_cast<int64_t>(u.block_bytes) * u.world);
      }
    }
    // Gradient slots, wires and accumulators exist only on several ranks, for units with
    // trainable parameters (reduce_gradients / grad_buffer).
    if (f.world_ > 1 && u.red_count > 0) {
      int64_t& g = gslot[u.spec.grad_slot];
      g = std::max(g, u.numel * static_cast<int64_t>(sizeof(float)));
      int64_t& s = overlapped ? red_send : send;
      int64_t& r = overlapped ? red_recv : recv;
      s = std::max(s, u.red_count * esize * u.world);
      r = std::max(r, u.red_count * esize);
      if (accumulates) {
        for (int p : u.spec.params) {
          const ParamInfo& pi = reg.info(p);
          if (!pi.trainable) continue;
          if (sync == GradSync::last_micro_batch) {
            b.accumulators += pi.numel * esize;
          } else if (pi.dtype != DType::float32) {  // fp32 shard gradients hold their own sums
            b.accumulators += pi.local_numel * static_cast<int64_t>(sizeof(float));
          }
        }
      }
    }
  }
  for (int64_t w : wslot) b.compute_weights += w;
  for (int64_t g : gslot) b.grad_slots += g;
  b.wire = send + recv + 2 * (red_send + red_recv);
  return b;
}

void FsdpUnits::gather(int unit) {
  Unit& u = units_[unit];
  if (!comm_) throw InternalError("gather on a planning FsdpUnits");
  if (u.gathered) return;
  // Whoever held the slot's buffer is overwritten now.
  for (auto& other : units_) {
    if (&other != &u && other.spec.weight_slot == u.spec.weight_slot) other.gathered = false;
  }
  if (u.weight_bytes > 0) {
    char* out = weight_buffer(u);
    if (world_ == 1) {
      cast_weights(u, out);
    } else if (prefetch_unit_ == unit) {  // its all-gather is in flight: complete it
      prefetch_comm_->wait_collective(prefetch_ticket_);
      prefetch_unit_ = -1;
      unpack_weights(u, out);
    } else {
      drop_prefetch();
      ensure_bytes(wire_send_, u.block_bytes, "fsdp_wire_send");
      ensure_bytes(wire_recv_, u.block_bytes * u.world, "fsdp_wire_recv");
      pack_shards(u, wire_send_.data());
      unit_comm(u).allgather_bytes(DBytesU(wire_send_.data(), u.block_bytes),
                                   DBytesU(wire_recv_.data(), u.block_bytes * u.world));
      unpack_weights(u, out);
    }
  }
  u.gathered = true;
}

void FsdpUnits::prefetch(int unit) {
  if (!overlapped() || world_ == 1) return;
  Unit& u = units_[unit];
  if (u.gathered || u.weight_bytes == 0 || prefetch_unit_ == unit) return;
  drop_prefetch();
  ensure_bytes(wire_send_, u.block_bytes, "fsdp_wire_send");
  ensure_bytes(wire_recv_, u.block_bytes * u.world, "fsdp_wire_recv");
  pack_shards(u, wire_send_.data());
  prefetch_comm_ = &unit_comm(u);
  prefetch_ticket_ =
      prefetch_comm_->allgather_start(DBytesU(wire_send_.data(), u.block_bytes),
                                      DBytesU(wire_recv_.data(), u.block_bytes * u.world));
  prefetch_unit_ = unit;
}

void FsdpUnits::drop_prefetch() {
  if (prefetch_unit_ < 0) return;
  prefetch_comm_->wait_collective(prefetch_ticket_);
  prefetch_unit_ = -1;
}

void FsdpUnits::release_all() {
  drop_prefetch();  // weights may change before the next gather (an optimizer step, a load)
  for (auto& u : units_) u.gathered = false;
}

CRef FsdpUnits::compute_weight(int param) const {
  const Unit& u = units_[unit_of_[param]];
  if (!u.gathered) {
    throw InternalError("weights of " + reg_.info(param).name + " used while unit " + u.spec.name +
                        " is not gathered");
  }
  const int k = pos_in_unit_[param];
  if (u.aliased[k]) {
    const ParamInfo& pi = reg_.info(param);
    if (pi.dtype == DType::bfloat16) return CRef{reg_.data<bf16>(param).data(), pi.dtype};
    return CRef{reg_.data<float>(param).data(), pi.dtype};
  }
  return CRef{weight_slots_[u.spec.weight_slot].data() + u.wbyte_off[k], cdtype_[param]};
}

const float* FsdpUnits::weight(int param) const {
  const CRef r = compute_weight(param);
  if (r.dtype != DType::float32) {
    throw InternalError("fp32 weights of " + reg_.info(param).name + " requested; its compute " +
                        "copy is " + dtype_name(r.dtype));
  }
  return static_cast<const float*>(r.data);
}

template <class Of>
void FsdpUnits::build(Launches& l, const Unit& u, const Of& of) {
  if (l.built) return;
  for (DType from : {DType::float32, DType::bfloat16}) {
    for (DType to : {DType::float32, DType::bfloat16}) {
      std::vector<FsdpTensor> entries;
      std::vector<int64_t> sizes;
      for (std::size_t k = 0; k < u.spec.params.size(); ++k) {
        FsdpTensor e;
        const auto [f, t, n] = of(k, e);
        if (f != from || t != to) continue;
        entries.push_back(e);
        sizes.push_back(n);
      }
      if (!entries.empty())
        l.launches.push_back(Launch{from, to, TensorTable<FsdpTensor>(entries, sizes)});
    }
  }
  l.built = true;
}

namespace {
// A parameter left out of a launch.
constexpr std::tuple<DType, DType, int64_t> kSkip{DType::float16, DType::float16, 0};
}  // namespace

void FsdpUnits::cast_weights(Unit& u, char* out) {
  build(u.cast, u, [&](std::size_t k, FsdpTensor& e) {
    const int p = u.spec.params[k];
    const ParamInfo& pi = reg_.info(p);
    if (u.aliased[k]) return kSkip;
    e.src = static_cast<int64_t>(pi.offset);
    e.dst = static_cast<int64_t>(u.wbyte_off[k]);
    e.round = round_[p] ? 1 : 0;
    return std::make_tuple(pi.dtype, cdtype_[p], pi.numel);
  });
  for (const Launch& l : u.cast.launches) {
    dispatch_dtypes(l.from, l.to, [&](auto st, auto ot) {
      using S = decltype(st);
      fsdp_kernels::cast_weights_kernel<S, decltype(ot)>(ExecSpace(), out,
                                                         reg_.flat_data<S>().data(), l.table);
    });
  }
}

void FsdpUnits::pack_shards(Unit& u, char* block) {
  build(u.pack, u, [&](std::size_t k, FsdpTensor& e) {
    const int p = u.spec.params[k];
    const ParamInfo& pi = reg_.info(p);
    e.src = static_cast<int64_t>(pi.offset);
    e.dst = static_cast<int64_t>(u.wire_off[k]);
    e.n = pi.local_numel;
    return std::make_tuple(pi.dtype, wire_dtype(round_[p]), pi.shard_rows * pi.row_len);
  });
  for (const Launch& l : u.pack.launches) {
    dispatch_dtypes(l.from, l.to, [&](auto st, auto wt) {
      using S = decltype(st);
      fsdp_kernels::pack_shards_kernel<S, decltype(wt)>(ExecSpace(), block,
                                                        reg_.flat_data<S>().data(), l.table);
    });
  }
}

void FsdpUnits::unpack_weights(Unit& u, char* out) {
  build(u.unpack, u, [&](std::size_t k, FsdpTensor& e) {
    const int p = u.spec.params[k];
    const ParamInfo& pi = reg_.info(p);
    e.src = static_cast<int64_t>(u.wire_off[k]);
    e.dst = static_cast<int64_t>(u.wbyte_off[k]);
    e.rows = pi.rows;
    e.row_len = pi.row_len;
    e.shard_rows = pi.shard_rows;
    return std::make_tuple(wire_dtype(round_[p]), cdtype_[p], pi.rows * pi.row_len);
  });
  for (const Launch& l : u.unpack.launches) {
    dispatch_dtypes(l.from, l.to, [&](auto wt, auto ot) {
      fsdp_kernels::unpack_weights_kernel<decltype(wt), decltype(ot)>(
          ExecSpace(), out, wire_recv_.data(), u.block_bytes, l.table);
    });
  }
}

void FsdpUnits::start_collecting(int unit) {
  if (!comm_) throw InternalError("gradients on a planning FsdpUnits");
  Unit& u = units_[unit];
  if (u.collecting) return;
  int& owner = grad_slot_owner_[u.spec.grad_slot];
  if (owner >= 0 && owner != unit) {
    throw InternalError("units " + units_[owner].spec.name + " and " + u.spec.name +
                        " collect gradients in the same buffer at the same time");
  }
  owner = unit;
  DView<float>& b = grad_slot(u);
  Kokkos::deep_copy(ExecSpace(), Kokkos::subview(b, std::make_pair(int64_t(0), u.numel)), 0.0f);
  u.collecting = true;
}

float* FsdpUnits::grad_buffer(int param) {
  if (world_ == 1) throw InternalError("grad_buffer on one rank");
  if (!reg_.info(param).trainable) {
    throw InternalError("gradient of frozen parameter " + reg_.info(param).name);
  }
  const int unit = unit_of_[param];
  start_collecting(unit);
  const Unit& u = units_[unit];
  return grad_slots_[u.spec.grad_slot].data() + u.comp_off[pos_in_unit_[param]];
}

void FsdpUnits::reduce_gradients(int unit, bool sync) {
  if (world_ == 1) return;
  Unit& u = units_[unit];
  if (u.red_count == 0) return;  // nothing trainable: no traffic
  start_collecting(unit);        // a unit that got no gradient this micro-batch sends zeros
  const float* grads = grad_slots_[u.spec.grad_slot].data();
  if (grad_sync_ == GradSync::every_micro_batch) {
    reduce_scatter(u, grads, /*with_acc=*/false, /*first=*/!u.accumulated, /*last=*/sync);
    u.accumulated = !sync;
  } else if (sync) {
    reduce_scatter(u, grads, /*with_acc=*/u.accumulated, /*first=*/true, /*last=*/true);
    u.accumulated = false;
  } else {
    accumulate(u, grads);
    u.accumulated = true;
  }
  u.collecting = false;
  grad_slot_owner_[u.spec.grad_slot] = -1;
}

void FsdpUnits::drop_collected() {
  for (auto& u : units_) u.collecting = false;
  std::fill(grad_slot_owner_.begin(), grad_slot_owner_.end(), -1);
}

void FsdpUnits::discard_gradients() {
  drop_collected();
  for (auto& u : units_) u.accumulated = false;
}

void FsdpUnits::accumulate(Unit& u, const float* grads) {
  if (!u.accumulate.built) {
    for (int p : u.spec.params) {
      const ParamInfo& pi = reg_.info(p);
      if (!pi.trainable) continue;
      const std::size_t bytes = static_cast<std::size_t>(pi.numel) * dtype_size(reduce_);
      ensure_bytes(acc_[p], bytes, "fsdp_grad_accumulator");
    }
    // The accumulators never move once allocated (a parameter's size is fixed).
    build(u.accumulate, u, [&](std::size_t k, FsdpTensor& e) {
      const int p = u.spec.params[k];
      const ParamInfo& pi = reg_.info(p);
      if (!pi.trainable) return kSkip;
      e.src = u.comp_off[k];
      e.acc = acc_[p].data();
      e.round = round_[p] ? 1 : 0;
      return std::make_tuple(DType::float32, reduce_, pi.numel);
    });
  }
  for (const Launch& l : u.accumulate.launches) {
    dispatch_dtype(l.to, [&](auto rt) {
      using R = decltype(rt);
      fsdp_kernels::accumulate_kernel<R>(ExecSpace(), grads, !u.accumulated, l.table);
    });
  }
}

int FsdpUnits::pack_and_reduce(Unit& u, const float* grads, bool with_acc, int wire) {
  wait_wire(wire);  // the last reduction on this wire pair is done with it
  const std::size_t esize = dtype_size(reduce_);
  const std::size_t block = static_cast<std::size_t>(u.red_count) * esize;
  if (overlapped()) {
    ensure_bytes(red_send_[wire], block * u.world, "fsdp_reduce_wire_send");
    ensure_bytes(red_recv_[wire], block, "fsdp_reduce_wire_recv");
  } else {
    ensure_bytes(wire_send_, block * u.world, "fsdp_wire_send");
    ensure_bytes(wire_recv_, block, "fsdp_wire_recv");
  }
  Launches& pack = u.reduce_pack[with_acc ? 1 : 0];
  build(pack, u, [&](std::size_t k, FsdpTensor& e) {
    const int p = u.spec.params[k];
    const ParamInfo& pi = reg_.info(p);
    if (!pi.trainable) return kSkip;
    e.src = u.comp_off[k];
    e.dst = u.red_off[k];
    e.rows = pi.rows;
    e.row_len = pi.row_len;
    e.shard_rows = pi.shard_rows;
    e.round = round_[p] ? 1 : 0;
    e.acc = with_acc ? acc_[p].data() : nullptr;
    return std::make_tuple(DType::float32, reduce_, pi.shard_rows * pi.row_len * u.world);
  });
  dispatch_dtype(reduce_, [&](auto rt) {
    using R = decltype(rt);
    R* send = reinterpret_cast<R*>(reduce_send(wire));
    for (const Launch& l : pack.launches) {
      fsdp_kernels::reduce_pack_kernel<R>(ExecSpace(), send, grads, u.red_count, with_acc, l.table);
    }
  });
  return unit_comm(u).reduce_scatter_start(DBytesU(reduce_send(wire), block * u.world),
                                           DBytesU(reduce_recv(wire), block), reduce_);
}

void FsdpUnits::reduce_scatter(Unit& u, const float* grads, bool with_acc, bool first, bool last) {
  // Started on the wire pair the previous one does not use; that one completes now, while this
  // one runs (blocking communicators have completed it already).
  InFlight f;
  f.unit = static_cast<int>(&u - units_.data());
  f.wire = overlapped() ? next_wire_ : 0;
  f.first = first;
  f.last = last;
  f.comm = &unit_comm(u);
  f.ticket = pack_and_reduce(u, grads, with_acc, f.wire);
  if (overlapped()) next_wire_ = 1 - next_wire_;
  finish_in_flight();
  if (f.ticket == Communicator::kDone) {
    finish_reduction(f);
  } else {
    in_flight_ = f;
  }
}

void FsdpUnits::finish_in_flight() {
  if (in_flight_.unit < 0) return;
  const InFlight f = in_flight_;
  in_flight_ = InFlight();
  finish_reduction(f);
}

void FsdpUnits::complete_reductions() {
  finish_in_flight();
  // The shard gradients stored on the communication instance come before the compute
  // instance's later work (the gradient norm, the optimizer).
  wait_wire(0);
  wait_wire(1);
}

void FsdpUnits::wait_wire(int wire) {
  WireUse& w = wire_use_[wire];
  if (w.ticket == Communicator::kDone) return;
  w.comm->wait_collective(w.ticket);
  w = WireUse();
}

void FsdpUnits::finish_reduction(const InFlight& f) {
  // The shards are stored where the collective completes (NCCL: its own stream, so the compute
  // stream never waits for it here; MPI: the host waited for it, the default instance).
  const ExecSpace space = f.comm->collective_space(f.ticket);
  Unit& u = units_[f.unit];
  const bool first = f.first, last = f.last;
  const char* recv_bytes = reduce_recv(f.wire);
  const bool sums = grad_sync_ == GradSync::every_micro_batch;
  build(u.reduce_unpack, u, [&](std::size_t k, FsdpTensor& e) {
    const int p = u.spec.params[k];
    const ParamInfo& pi = reg_.info(p);
    if (!pi.trainable || pi.local_numel == 0) return kSkip;
    if (!pi.has_grad) reg_.grad<float>(p);  // trainable without a gradient buffer: the error
    e.src = u.red_off[k];
    e.dst = static_cast<int64_t>(pi.grad_offset);
    e.n = pi.local_numel;
    if (sums && pi.dtype == DType::float32) {  // the fp32 shard gradient holds the running sum
      e.acc = reg_.flat_grad<float>().data() + pi.grad_offset;
    } else if (sums) {
      // (build() asks for each entry once per dtype pair: allocate once.)
      if (shard_acc_.empty()) shard_acc_.resize(reg_.size());
      if (shard_acc_[p].extent(0) == 0) {
        shard_acc_[p] = DView<float>("fsdp_shard_grad_sum", pi.local_numel);
      }
      e.acc = shard_acc_[p].data();
    }
    return std::make_tuple(reduce_, pi.dtype, pi.local_numel);
  });
  dispatch_dtype(reduce_, [&](auto rt) {
    using R = decltype(rt);
    const R* recv = reinterpret_cast<const R*>(recv_bytes);
    for (const Launch& l : u.reduce_unpack.launches) {
      dispatch_dtype(l.to, [&](auto gt) {
        using G = decltype(gt);
        fsdp_kernels::reduce_unpack_kernel<R, G>(space, reg_.flat_grad<G>().data(), recv,
                                                 static_cast<float>(world_), first, last, l.table);
      });
    }
  });
  if (f.ticket != Communicator::kDone)
    wire_use_[f.wire] = WireUse{f.comm->communication_done(), f.comm};
}

int64_t FsdpUnits::buffer_bytes() const {
  int64_t n = 0;
  for (const auto& b : weight_slots_) n += static_cast<int64_t>(b.extent(0));
  for (const auto& b : grad_slots_) n += static_cast<int64_t>(b.extent(0) * sizeof(float));
  for (const auto& b : acc_) n += static_cast<int64_t>(b.extent(0));
  for (const auto& b : shard_acc_) n += static_cast<int64_t>(b.extent(0) * sizeof(float));
  n += static_cast<int64_t>(wire_send_.extent(0) + wire_recv_.extent(0));
  for (int w = 0; w < 2; ++w)
    n += static_cast<int64_t>(red_send_[w].extent(0) + red_recv_[w].extent(0));
  return n;
}

}  // namespace kktrain
