// Mixture of experts in the model (model/sparse_mlp.hpp): registration, expert parallelism,
// routing statistics and the load-balancing loss, the sparse MLP's weights, sizes, scratch and
// buffers.
#include "model/sparse_mlp.hpp"

#include <string>

#include "core/errors.hpp"
#include "core/host_sync.hpp"
#include "model/model_buffers.hpp"
#include "model/params.hpp"

namespace kktrain {

void register_sparse_mlp(ModelState& s, LayerParams& p, const std::string& prefix, DType dtype) {
  // Hugging Face names (docs/moe.md): Mixtral's block_sparse_moe.{gate, experts.E.w1/w3/w2}, or
  // Qwen3-MoE's mlp.{gate, experts.E.gate_proj/up_proj/down_proj}. Registered in the order of
  // the fused compute copies: each expert's gate (w1) and up (w3) back to back, expert after
  // expert, then every down (w2).
  const int64_t C = s.cfg.hidden_size, E = s.cfg.moe.num_experts, F = s.cfg.moe.intermediate_size;
  const bool qwen = s.cfg.family == ModelFamily::qwen3_moe;
  const std::string moe = prefix + (qwen ? ".mlp" : ".block_sparse_moe");
  const char* gate = qwen ? ".gate_proj" : ".w1";
  const char* up = qwen ? ".up_proj" : ".w3";
  const char* down = qwen ? ".down_proj" : ".w2";
  // The router is a protected fp32 parameter: storage, compute and gradient fp32.
  p.router =
      s.params.add(moe + ".gate.weight", moe + ".gate", {E, C}, ParamRole::linear, DType::float32);
  s.params.info_mut(p.router).keep_fp32 = true;
  s.params.info_mut(p.router).moe = MoePart::router;
  auto expert = [&](const std::string& module, std::vector<int64_t> shape) {
    const int i = add_param(s, module, std::move(shape), ParamRole::linear, dtype);
    s.params.info_mut(i).moe = MoePart::expert;
    return i;
  };
  for (int64_t e = 0; e < E; ++e) {
    const std::string ex = moe + ".experts." + std::to_string(e);
    p.w1.push_back(expert(ex + gate, {F, C}));
    p.w3.push_back(expert(ex + up, {F, C}));
  }
  for (int64_t e = 0; e < E; ++e) {
    const std::string ex = moe + ".experts." + std::to_string(e);
    p.w2.push_back(expert(ex + down, {C, F}));
  }
  const int64_t Fs = s.cfg.moe.shared_expert_intermediate_size;
  if (Fs > 0) {
    const std::string sh = moe + ".shared_expert.";
    p.shared_gate = add_param(s, sh + "gate_proj", {Fs, C}, ParamRole::linear, dtype);
    p.shared_up = add_param(s, sh + "up_proj", {Fs, C}, ParamRole::linear, dtype);
    p.shared_down = add_param(s, sh + "down_proj", {C, Fs}, ParamRole::linear, dtype);
  }
}

void size_routing_state(ModelState& s) {
  const std::size_t L = s.cfg.moe.enabled() ? static_cast<std::size_t>(s.cfg.num_layers) : 0;
  s.moe.counts.resize(L);
  s.moe.prob_sums.resize(L);
  s.moe.choices.resize(L);
}

void assign_experts(ModelState& s, int rank, int world, int ep) {
  const int64_t E = s.cfg.moe.num_experts;
  if (ep > 1 && (E % ep != 0 || world % ep != 0)) {
    throw InternalError("expert_parallel_size " + std::to_string(ep) +
                        " does not divide the experts and the ranks");
  }
  s.moe.ep = ep;
  s.moe.expert0 = ep > 1 ? (rank % ep) * (E / ep) : 0;
  if (ep == 1) return;
  for (const LayerParams& p : s.layers) {  // expert e lives on expert-parallel rank e / (E / P)
    for (int64_t e = 0; e < E; ++e) {
      for (int i : {p.w1[e], p.w3[e], p.w2[e]}) {
        s.params.info_mut(i).expert_owner = static_cast<int>(e / (E / ep));
      }
    }
  }
}

void connect_expert_groups(ModelState& s) {
  if (s.moe.ep == 1) return;
  const int r = s.comm->rank(), ep = s.moe.ep;
  s.moe.ep_comm = s.comm->split(r / ep, r % ep);
  s.moe.edp_comm = s.comm->split(r % ep, r / ep);
}

void assign_expert_units(ModelState& s) {
  s.moe.expert_unit.assign(s.layers.size(), -1);
  for (std::size_t l = 0; s.moe.ep > 1 && l < s.layers.size(); ++l) {
    s.moe.expert_unit[l] = s.head_unit + 1 + static_cast<int>(l);  // no MTP head with experts
  }
}

std::vector<int> expert_params(const ModelState& s, const LayerParams& p) {
  std::vector<int> v;
  const int64_t e0 = s.moe.expert0, e1 = e0 + s.local_experts();
  for (int64_t e = e0; e < e1; ++e) v.insert(v.end(), {p.w1[e], p.w3[e]});
  for (int64_t e = e0; e < e1; ++e) v.push_back(p.w2[e]);
  return v;
}

void append_sparse_unit_params(const ModelState& s, const LayerParams& p, std::vector<int>* v) {
  v->push_back(p.router);
  if (s.moe.ep == 1) {
    const std::vector<int> x = expert_params(s, p);
    v->insert(v->end(), x.begin(), x.end());
  }
  if (p.shared_gate >= 0) v->insert(v->end(), {p.shared_gate, p.shared_up, p.shared_down});
}

std::vector<std::vector<int>> sparse_fused_groups(const ModelState& s, const LayerParams& p) {
  const std::vector<int> x = expert_params(s, p);  // [w1, w3 of each] then the w2
  const std::size_t half = x.size() * 2 / 3;
  std::vector<std::vector<int>> g = {std::vector<int>(x.begin(), x.begin() + half),
                                     std::vector<int>(x.begin() + half, x.end())};
  if (p.shared_gate >= 0) g.push_back({p.shared_gate, p.shared_up});
  return g;
}

MoeWeights sparse_mlp_weights(const ModelState& s, const LayerParams& p) {
  MoeWeights w;  // the experts' w1/w3 and w2 are fused stacks (compute_layout)
  w.router = s.wf(p.router);
  w.w13 = s.w(p.w1[s.moe.expert0]);  // this rank's first expert
  w.w2 = s.w(p.w2[s.moe.expert0]);
  if (p.shared_gate >= 0) {
    w.shared_gate_up = s.w(p.shared_gate);
    w.shared_down = s.w(p.shared_down);
  }
  return w;
}

MoeDims sparse_mlp_dims(const ModelState& s, int64_t N) {
  const MoeConfig& e = s.cfg.moe;
  MoeDims d;
  d.N = N;
  d.C = s.cfg.hidden_size;
  d.E = e.num_experts;
  d.K = e.top_k;
  d.F = e.intermediate_size;
  d.Fs = e.shared_expert_intermediate_size;
  d.norm_topk = e.norm_topk_prob;
  d.aux_grad = s.moe.aux_grad.extent(0) > 0 ? s.moe.aux_grad.data() : nullptr;
  d.ep = s.moe.ep > 1 ? s.moe.ep_comm.get() : nullptr;
  d.expert0 = s.moe.expert0;
  d.gemm = s.gemm;
  return d;
}

template <class TC>
MoeScratch<TC> sparse_mlp_scratch(const ModelBuffers& b) {
  const SparseMlpBuffers& x = b.moe;
  auto opt = [](const TBuf& t) { return t.empty() ? nullptr : t.p<TC>(); };
  MoeScratch<TC> m;
  m.logits = x.logits.data();
  m.y = x.y.data();
  m.dye = x.dye.p<TC>();
  m.da = x.da.data();
  m.dh = x.dh.p<TC>();
  m.dxs = x.dxs.p<TC>();
  m.ye_local = opt(x.ye_local);
  m.dye_local = opt(x.dye_local);
  m.dx_local = opt(x.dx_local);
  m.peer = opt(x.peer);
  m.dweight = x.dweight.data();
  m.dlogits = x.dlogits.data();
  m.sy = opt(x.sy);
  m.sdgu = opt(x.sdgu);
  m.sda = x.sda.data();
  m.dc = b.dc.p<TC>();
  return m;
}
template MoeScratch<float> sparse_mlp_scratch<float>(const ModelBuffers&);
template MoeScratch<bf16> sparse_mlp_scratch<bf16>(const ModelBuffers&);

int sparse_mlp_param(const ModelState& s, const LayerParams& p, int weight) {
  if (weight >= kMoeExpert0) {  // local expert -> its global index
    const int e = static_cast<int>(s.moe.expert0) + (weight - kMoeExpert0) / 3;
    const int which = (weight - kMoeExpert0) % 3;
    return which == 0 ? p.w1[e] : which == 1 ? p.w3[e] : p.w2[e];
  }
  if (weight == kMoeRouter) return p.router;
  if (weight == kMoeSharedGate) return p.shared_gate;
  if (weight == kMoeSharedUp) return p.shared_up;
  if (weight == kMoeSharedDown) return p.shared_down;
  return -2;
}

void make_sparse_mlp_acts(BufferMaker& mk, MoeActs& m, int64_t N, int64_t C, const MoeConfig& e,
                          int64_t ep) {
  const int64_t E = e.num_experts, NK = N * e.top_k, Fe = e.intermediate_size;
  const int64_t Fs = e.shared_expert_intermediate_size;
  m.xf = mk.view<float>("moe_router_in", N * C);
  m.probs = mk.view<float>("moe_probs", N * E);
  m.choice = mk.view<int32_t>("moe_choice", NK);
  m.weight = mk.view<float>("moe_weight", NK);
  m.slot = mk.view<int32_t>("moe_slot", NK);
  m.counts = mk.view<int32_t>("moe_counts", E);
  m.prob_sums = mk.view<float>("moe_prob_sums", E);
  // The rows this rank's experts run: its own NK, or under expert parallelism up to every peer's
  // (dropless: all of the group's tokens may choose this rank's experts).
  const int64_t R = ep * NK;
  m.xs = mk.compute("moe_xs", NK * C);
  m.ye = mk.compute("moe_ye", NK * C);
  if (ep > 1) m.xe = mk.compute("moe_xe", R * C);
  m.h = mk.compute("moe_h", R * 2 * Fe);
  m.act = mk.compute("moe_act", R * Fe);
  if (Fs > 0) {
    m.sgu = mk.compute("moe_shared_gu", N * 2 * Fs);
    m.sa = mk.compute("moe_shared_a", N * Fs);
  }
}

void make_sparse_mlp_buffers(BufferMaker& mk, SparseMlpBuffers& b, int64_t N, int64_t C,
                             const MoeConfig& e, int64_t ep) {
  const int64_t E = e.num_experts, NK = N * e.top_k, Fe = e.intermediate_size, R = ep * NK;
  const int64_t Fs = e.shared_expert_intermediate_size;
  b.logits = mk.view<float>("moe_logits", N * E);
  b.y = mk.view<float>("moe_y", N * C);
  b.dye = mk.compute("moe_dye", NK * C);
  b.dxs = mk.compute("moe_dxs", NK * C);
  b.da = mk.view<float>("moe_da", R * Fe);
  b.dh = mk.compute("moe_dh", R * 2 * Fe);
  if (ep > 1) {
    b.ye_local = mk.compute("moe_ye_local", R * C);
    b.dye_local = mk.compute("moe_dye_local", R * C);
    b.dx_local = mk.compute("moe_dx_local", R * C);
    b.peer = mk.compute("moe_peer_major", R * C);
  }
  b.dweight = mk.view<float>("moe_dweight", NK);
  b.dlogits = mk.view<float>("moe_dlogits", N * E);
  if (Fs > 0) {
    b.sy = mk.compute("moe_shared_y", N * C);
    b.sdgu = mk.compute("moe_shared_dgu", N * 2 * Fs);
    b.sda = mk.view<float>("moe_shared_da", N * Fs);
  }
}

void keep_routing(ModelState& s, int64_t l, const MoeActs& a, RoutingCopy copy) {
  s.moe.counts[l] = a.host_counts;
  auto ps = Kokkos::create_mirror_view(a.prob_sums);
  Kokkos::deep_copy(ps, a.prob_sums);
  count_host_sync();
  s.moe.prob_sums[l].assign(ps.data(), ps.data() + ps.extent(0));
  s.moe.choices[l].clear();
  if (copy == RoutingCopy::with_choices) {
    auto ch = Kokkos::create_mirror_view(a.choice);
    Kokkos::deep_copy(ch, a.choice);
    count_host_sync();
    s.moe.choices[l].assign(ch.data(), ch.data() + ch.extent(0));
  }
}

double moe_aux_loss(ModelState& s, float grad_scale, Pass pass) {
  const MoeConfig& moe = s.cfg.moe;
  if (!moe.enabled()) return 0.0;
  // Pooled over the layers as Mixtral's loss pools their router outputs: f_e, the fraction of
  // all (token, choice) assignments that chose e, over L N tokens; P_e the mean probability.
  const int64_t E = moe.num_experts, L = s.cfg.num_layers;
  const double tokens = static_cast<double>(L * s.buf->B * s.buf->T);
  std::vector<double> f(E, 0.0), prob(E, 0.0);
  for (int64_t l = 0; l < L; ++l) {
    for (int64_t e = 0; e < E; ++e) {
      f[e] += static_cast<double>(s.moe.counts[l][e]) / tokens;
      prob[e] += s.moe.prob_sums[l][e] / tokens;
    }
  }
  double aux = 0.0;
  for (int64_t e = 0; e < E; ++e) aux += f[e] * prob[e];
  aux *= static_cast<double>(E);
  if (pass == Pass::with_backward) {
    // d(coef * aux)/d p[l, n, e] = coef * E * f_e / (L N), times the accumulation scale.
    if (moe.aux_loss_coef == 0.0) {
      s.moe.aux_grad = DView<float>();
    } else {
      std::vector<float> g(E);
      for (int64_t e = 0; e < E; ++e) {
        g[e] = static_cast<float>(moe.aux_loss_coef * grad_scale * static_cast<double>(E) * f[e] /
                                  tokens);
      }
      if (s.moe.aux_grad.extent(0) != static_cast<std::size_t>(E)) {
        s.moe.aux_grad = DView<float>("moe_aux_grad", E);
      }
      s.staging.upload(s.moe.aux_grad, g);  // on the queue, no wait
    }
  }
  return aux;
}

CommStats moe_comm_stats(const ModelState& s) {
  CommStats t;
  for (const auto* c : {s.moe.ep_comm.get(), s.moe.edp_comm.get()}) {
    if (!c) continue;
    t.bytes_sent += c->stats().bytes_sent;
    t.seconds += c->stats().seconds;
    t.calls += c->stats().calls;
    t.alltoall_bytes_sent += c->stats().alltoall_bytes_sent;
  }
  return t;
}

}  // namespace kktrain
