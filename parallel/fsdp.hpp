// FSDP2-style parameter units over a sharded ParamRegistry.
//
// A unit is a group of parameters that run together (one decoder layer; the embedding; the final
// norm with the LM head; the multi-token-prediction head). Before a unit runs, gather() makes the
// full weights of all its parameters available in the compute dtype; after its backward,
// reduce_gradients() turns their full gradients into this rank's shard gradients:
//
//   gather   each rank casts its shard (storage dtype) to the compute dtype (bf16 when the
//            parameter's compute copy is rounded, fp32 otherwise), packs the unit's shards into
//            one block (shards padded to ceil(rows / W) rows), one all-gather per unit, and the
//            blocks are unpacked into the unit's compute buffer laid out parameter after
//            parameter in the unit's order (so q/k/v stay one matrix), each parameter in its
//            compute-buffer dtype: 2-byte bf16 for bf16 compute copies, fp32 otherwise (norm
//            weights, model-protected fp32 parameters, fused groups of mixed dtypes).
//   reduce   the full fp32 gradient of each trainable parameter is rounded to its compute dtype,
//            converted to the reduce dtype, packed rank-major into W blocks and reduce-scattered
//            (one collective per unit); the sum over ranks is divided by W (the mean over ranks)
//            and stored into the shard gradient in the parameter's storage dtype. With several
//            micro-batches per step (GradSync):
//              every_micro_batch (the default, FSDP2's): each micro-batch is reduce-scattered at
//                once and its shard summed in fp32 (in the shard gradient itself when that is
//                fp32, else in a shard-sized fp32 accumulator); the last one stores the mean.
//                Gradient memory: 1/W of the model per rank.
//              last_micro_batch: the micro-batches' full gradients are summed in the reduce dtype
//                in unsharded accumulators and reduce-scattered once, on the last (one collective
//                per unit and step; the model's whole gradient in the reduce dtype per rank).
//            Frozen parameters have no gradient traffic and no buffers.
//
// Overlap: with a non-blocking communicator (Communicator::set_nonblocking), a unit's
// reduce-scatter is started as soon as its gradients are packed and completed (waited for, then
// stored into the shards) when the next unit's is started, so it runs while that unit's backward
// computes; the last one is completed by complete_reductions() at the end of the backward. Two
// reduce wires alternate (one in flight, one being packed). The stores into the shards run where
// the collective completes: on NCCL's communication stream, so the compute stream waits for a
// reduce-scatter only when it packs into that wire pair again and at complete_reductions() (the
// optimizer's inputs); with MPI the host waits for it (MPI_Wait) and they run on the default
// instance. And prefetch(next) starts the next
// unit's all-gather right after a unit is gathered (forward and backward, FSDP2's prefetch), so
// it runs while this unit computes; gather(next) then waits for it and unpacks. One prefetch is
// in flight at a time, on the gather wires (the reductions have their own). The stored values are
// the same: the same bytes and sums in the same order, only earlier or later. Blocking
// communicators complete each collective at once (and prefetch does nothing).
//
// Expert units (UnitSpec::experts; expert parallelism, core/param_registry.hpp) gather and
// reduce-scatter over the expert-data-parallel ranks that hold their parameters' shards, with the
// same layout; their gradients are still the mean over every rank.
//
// Buffers are reused: units that share a weight slot (decoder layers when weights are resharded
// after use) never hold weights at the same time, and units that share a gradient slot never
// collect gradients at the same time. On one rank there is no wire: gather() casts the storage
// to the compute buffer, or uses the storage itself where it already is the compute copy (same
// dtype, no rounding; fused groups all or none, so they stay adjacent), and gradients are
// accumulated by the model straight into the storage-dtype gradients.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/grad_sync.hpp"
#include "core/kokkos_compat.hpp"
#include "core/launch.hpp"
#include "core/param_registry.hpp"
#include "parallel/communicator.hpp"

namespace kktrain {

struct UnitSpec {
  std::string name;
  std::vector<int> params;  // registry indices, in compute-buffer order (fused groups adjacent)
  int weight_slot = 0;
  int grad_slot = 0;
  // The ranks the unit's parameters are sharded over: every rank (the FsdpUnits' communicator),
  // or, for a unit of expert parameters (expert parallelism, core/param_registry.hpp), the
  // expert-data-parallel ranks (set_expert_comm). Gradients are averaged over every rank either
  // way (each rank's loss is one of the world's).
  bool experts = false;
};

// How each parameter's compute copy is held (indexed by registry index).
struct ComputeLayout {
  std::vector<bool> round;   // the compute copy holds bf16-rounded values
  std::vector<DType> dtype;  // the compute buffer's element type (bf16 only where round)
  std::vector<int> group;    // fused group id (q/k/v, gate/up), -1 for none
};

// One parameter of a unit-wide launch (each of the unit's data movements is one launch per dtype
// pair, over a table of its parameters; what src and dst count is the kernel's,
// parallel/fsdp_kernels.hpp).
struct FsdpTensor {
  int64_t src = 0, dst = 0;  // offsets (elements or bytes, per kernel)
  int64_t n = 0;             // elements this rank holds (pack, unpack of the reduction, casts)
  int64_t rows = 0, row_len = 0, shard_rows = 0;  // the full tensor and its shard rows
  int32_t round = 0;                              // the compute copy / gradient is bf16-rounded
  void* acc = nullptr;                            // the reduce-dtype accumulator (reductions)
};

// GradSync (core/grad_sync.hpp): when several micro-batches of a step reach the other ranks (see
// the file comment).

// Bytes of the reusable unit buffers a run allocates at its high-water mark (FsdpUnits::plan).
struct UnitBufferBytes {
  int64_t compute_weights = 0;  // weight slots: the largest unit of each slot
  int64_t grad_slots = 0;       // several ranks: fp32 full-gradient slots
  int64_t wire = 0;             // several ranks: all-gather / reduce-scatter send + recv buffers
  int64_t accumulators = 0;     // several ranks, accumulating micro-batches: the unsharded
                                // reduce-dtype sums (last_micro_batch) or the shard fp32 sums of
                                // parameters not stored in fp32 (every_micro_batch)
};

class FsdpUnits {
 public:
  // round_compute[p]: parameter p's compute copy is bf16 (rounded from storage); otherwise fp32.
  // The registry must be sharded and allocated; comm is used when the registry has several ranks.
  FsdpUnits(ParamRegistry& reg, Communicator& comm, std::vector<UnitSpec> units,
            std::vector<bool> round_compute, DType reduce_dtype);
  // layout.dtype[p] == bfloat16 keeps p's compute copy in 2-byte bf16 (layout.round[p] must be
  // set); the members of a fused group must share a compute dtype.
  FsdpUnits(ParamRegistry& reg, Communicator& comm, std::vector<UnitSpec> units,
            ComputeLayout layout, DType reduce_dtype);

  // The buffer bytes FsdpUnits over `reg` would allocate, without allocating anything: `reg`
  // must be sharded (for its rank and world) but need not be allocated. `accumulates`: steps
  // have several micro-batches (several ranks accumulate unsharded gradients between them).
  // `overlapped`: reduce-scatters overlap the backward (two reduce wires of their own).
  static UnitBufferBytes plan(const ParamRegistry& reg, std::vector<UnitSpec> units,
                              ComputeLayout layout, DType reduce_dtype, bool accumulates,
                              GradSync sync = GradSync::every_micro_batch, bool overlapped = false);
  // How micro-batches are reduced (before the first backward; default every_micro_batch).
  void set_grad_sync(GradSync s) { grad_sync_ = s; }
  // The communicator of the ranks expert units are sharded over (the registry's
  // expert_data_parallel() ranks, this rank at shard_rank() / expert_parallel()); needed when the
  // registry's expert-parallel size exceeds 1, otherwise expert units use the main communicator.
  void set_expert_comm(Communicator* comm);

  int size() const { return static_cast<int>(units_.size()); }
  const UnitSpec& spec(int unit) const { return units_[unit].spec; }
  int unit_of(int param) const { return unit_of_[param]; }
  bool sharded() const { return world_ > 1; }

  // Full compute weights of every parameter of `unit`; a no-op when already gathered.
  void gather(int unit);
  // Starts the all-gather of `unit` for a later gather(unit) (see the file comment); a no-op
  // when not overlapping, on one rank, or when the unit is gathered or being prefetched.
  void prefetch(int unit);
  bool gathered(int unit) const { return units_[unit].gathered; }
  // The unit's weights may be overwritten by another unit of its slot from now on.
  void release(int unit) { units_[unit].gathered = false; }
  void release_all();
  // (numel) full compute weights of `param` in its compute dtype; its unit must be gathered.
  CRef compute_weight(int param) const;
  // The same for a parameter whose compute dtype is fp32 (InternalError otherwise).
  const float* weight(int param) const;

  // Sharded runs: the (numel) fp32 full gradient of trainable `param` for the current backward,
  // zero-filled when its unit starts collecting.
  float* grad_buffer(int param);
  // Ends the unit's gradient collection for this micro-batch (see the file comment). `sync`: the
  // step's last micro-batch (the shard gradients get their values); otherwise its gradients are
  // accumulated (reduce-scattered now with every_micro_batch). Sharded runs only.
  void reduce_gradients(int unit, bool sync);
  // Completes the reduce-scatter still in flight (overlap; see the file comment): the shard
  // gradients hold every reduced unit afterwards. A no-op when none is.
  void complete_reductions();
  // Drops gradients collected in this micro-batch but not yet reduced (an abandoned backward).
  void drop_collected();
  // Drops gradients collected or accumulated but not reduced (start of a step).
  void discard_gradients();

  // Bytes of the reusable buffers currently allocated (compute weights, gradients, wires).
  int64_t buffer_bytes() const;

 private:
  // One launch of a unit's data movement: its parameters whose two dtypes (source and
  // destination element types) are `from` and `to`.
  struct Launch {
    DType from = DType::float32, to = DType::float32;
    TensorTable<FsdpTensor> table;
  };
  // A unit's launches of one kind, built at first use (the tables never change afterwards).
  struct Launches {
    bool built = false;
    std::vector<Launch> launches;
  };
  struct Unit {
    UnitSpec spec;
    int world = 1;                       // ranks its parameters are sharded over
    int64_t numel = 0;                   // full elements of all parameters
    std::vector<int64_t> comp_off;       // per parameter of the unit: offset in the grad buffer
    std::size_t weight_bytes = 0;        // compute-buffer bytes (parameters not aliased)
    std::vector<std::size_t> wbyte_off;  // per parameter: byte offset in the compute buffer
    std::vector<bool> aliased;           // per parameter: one rank, the storage is the copy
    std::size_t block_bytes = 0;         // all-gather bytes per rank
    std::vector<std::size_t> wire_off;   // per parameter: byte offset in a rank's block
    int64_t red_count = 0;               // reduce-scatter elements per rank block
    std::vector<int64_t> red_off;        // per parameter: offset in a block (-1: frozen)
    bool gathered = false, collecting = false, accumulated = false;
    // The unit-wide launches: one rank's compute-copy cast; several ranks' shard pack and
    // unpack of the all-gather, accumulation, and the reduce-scatter's pack (without and with
    // the accumulator) and unpack.
    Launches cast, pack, unpack, accumulate, reduce_pack[2], reduce_unpack;
  };
  // comm null: planning only (plan()); the registry may be unallocated.
  FsdpUnits(ParamRegistry& reg, Communicator* comm, std::vector<UnitSpec> units,
            ComputeLayout layout, DType reduce_dtype);
  void plan_unit(Unit& u) const;
  Communicator& unit_comm(const Unit& u) const;
  void start_collecting(int unit);
  char* weight_buffer(const Unit& u);
  DView<float>& grad_slot(const Unit& u);
  void unpack_weights(Unit& u, char* out);
  void cast_weights(Unit& u, char* out);
  void pack_shards(Unit& u, char* block);
  void accumulate(Unit& u, const float* grads);
  // Reduce-scatters the unit's gradients (+ the unsharded accumulator when with_acc) and sums the
  // shard over the step's micro-batches from `first` on; `last` stores the mean.
  void reduce_scatter(Unit& u, const float* grads, bool with_acc, bool first, bool last);
  // A started reduce-scatter whose shards are not stored yet.
  struct InFlight {
    int unit = -1;  // -1: none
    int ticket = Communicator::kDone;
    int wire = 0;  // the reduce wire pair it uses
    bool first = false, last = false;
    Communicator* comm = nullptr;  // the unit's (expert units: the expert communicator)
  };
  // Packs the unit's gradients (+ the unsharded accumulator) into reduce wire pair `wire` and
  // starts the collective; returns its ticket.
  int pack_and_reduce(Unit& u, const float* grads, bool with_acc, int wire);
  // Stores the reduction in flight, if any (finish_reduction).
  void finish_in_flight();
  // Stores f's received block into the shard gradients once it is complete, on the instance its
  // collective completes on (Communicator::collective_space).
  void finish_reduction(const InFlight& f);
  // The last use of a reduce wire pair by communication-side work (its collective and the
  // stores reading its receive wire), for the compute instance to wait for before packing into
  // it again (Communicator::communication_done; kDone: nothing to wait for).
  struct WireUse {
    int ticket = Communicator::kDone;
    Communicator* comm = nullptr;
  };
  WireUse wire_use_[2];
  // The compute instance's later work follows the last use of wire pair `wire`.
  void wait_wire(int wire);
  // The reduce wires: the gather wires when reductions do not overlap, else their own pair each.
  char* reduce_send(int wire) { return overlapped() ? red_send_[wire].data() : wire_send_.data(); }
  char* reduce_recv(int wire) { return overlapped() ? red_recv_[wire].data() : wire_recv_.data(); }
  bool overlapped() const { return comm_ != nullptr && comm_->nonblocking(); }
  // Builds the unit's launches of one kind once (a no-op afterwards): for each parameter k,
  // `of(k, entry)` fills its table entry and returns {from, to, elements}, or from = float16 to
  // leave it out.
  template <class Of>
  static void build(Launches& l, const Unit& u, const Of& of);

  ParamRegistry& reg_;
  Communicator* comm_;  // null: a planning instance (plan())
  Communicator* expert_comm_ = nullptr;
  int rank_ = 0, world_ = 1;
  std::vector<bool> round_;
  std::vector<DType> cdtype_;
  std::vector<int> group_;
  DType reduce_;
  std::vector<Unit> units_;
  std::vector<int> unit_of_, pos_in_unit_;
  std::vector<Kokkos::View<char*, MemSpace>> weight_slots_;
  std::vector<DView<float>> grad_slots_;
  std::vector<int> grad_slot_owner_;  // unit collecting into each gradient slot, or -1
  std::vector<Kokkos::View<char*, MemSpace>> acc_;  // per parameter: accumulator, reduce dtype
  std::vector<DView<float>> shard_acc_;  // every_micro_batch: shard fp32 sums (non-fp32 storage)
  GradSync grad_sync_ = GradSync::every_micro_batch;
  Kokkos::View<char*, MemSpace> wire_send_, wire_recv_;
  Kokkos::View<char*, MemSpace> red_send_[2], red_recv_[2];  // overlapped reductions only
  InFlight in_flight_;
  int next_wire_ = 0;
  int prefetch_unit_ = -1;  // the unit whose all-gather is in flight on the gather wires
  int prefetch_ticket_ = Communicator::kDone;
  Communicator* prefetch_comm_ = nullptr;
  // Completes a prefetch in flight without using its data (the wires are needed otherwise).
  void drop_prefetch();
};

}  // namespace kktrain
