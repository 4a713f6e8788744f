// Runs a kktrain optimizer on tensors and gradients given in an HDF5 file, for tests that
// compare it with torch.optim step by step (tests/optim/check_optim.py).
//
//   optim_runner IN.h5 OUT.h5
// IN.h5:  root attribute optimizer_yaml (the YAML of an `optimizer:` section), steps, seed;
//         /params/<name> fp32 initial values with attribute dtype ("float32" | "bfloat16") and
//         optional attribute trainable (0/1); /grads/<name> (steps, *shape) fp32 gradients;
//         /lr (steps,) learning rates; optional /grad_scale (steps,) gradient scales.
// OUT.h5: /params/<name> (steps, *shape) the parameter after every step (fp32 copies);
//         /state/<name>/<state> the final optimizer state (exp_avg, exp_avg_sq,
//         momentum_buffer, master); root attribute optimizer.
#include <Kokkos_Core.hpp>
#include <cstdio>
#include <vector>

#include "core/config.hpp"
#include "core/errors.hpp"
#include "core/param_registry.hpp"
#include "io/h5.hpp"
#include "model/param_io.hpp"
#include "optim/optimizer.hpp"

using namespace kktrain;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: optim_runner IN.h5 OUT.h5\n");
    return 2;
  }
  Kokkos::ScopeGuard kokkos(argc, argv);
  try {
    const h5::File in = h5::File::open_read(argv[1]);
    const Config cfg = load_config_text(in.read_attr_str("/", "optimizer_yaml"), "optimizer_yaml",
                                        {}, LoadOptions{});
    const int64_t steps = in.read_attr_i64("/", "steps");
    ParamRegistry reg;
    const auto names = in.list("/params");
    for (const auto& n : names) {
      DType d;
      if (!parse_dtype(in.read_attr_str("/params/" + n, "dtype"), &d)) {
        throw InputError("bad dtype for " + n);
      }
      const int i = reg.add(n, n, in.shape("/params/" + n), ParamRole::linear, d);
      if (in.has_attr("/params/" + n, "trainable")) {
        reg.info_mut(i).trainable = in.read_attr_i64("/params/" + n, "trainable") != 0;
      }
    }
    reg.allocate();
    for (int i = 0; i < reg.size(); ++i) {
      param_from_host(reg, i, in.read_f32("/params/" + reg.info(i).name));
    }
    auto opt =
        make_optimizer(cfg.optimizer, reg, static_cast<uint64_t>(in.read_attr_i64("/", "seed")));
    const std::vector<double> lr = in.read_f64("/lr");  // torch's lr is a Python float
    const bool scaled = in.exists("/grad_scale");
    const std::vector<float> scale = scaled ? in.read_f32("/grad_scale") : std::vector<float>();
    std::vector<std::vector<float>> grads, history(reg.size());
    for (int i = 0; i < reg.size(); ++i) grads.push_back(in.read_f32("/grads/" + reg.info(i).name));
    for (int64_t s = 0; s < steps; ++s) {
      for (int i = 0; i < reg.size(); ++i) {
        if (!reg.info(i).has_grad) continue;  // frozen: no gradient buffer
        const int64_t n = reg.info(i).numel;
        std::vector<float> g(grads[i].begin() + s * n, grads[i].begin() + (s + 1) * n);
        param_from_host(reg, i, g, ParamPart::grad);
      }
      opt->step(lr[s], scaled ? scale[s] : 1.0f);
      for (int i = 0; i < reg.size(); ++i) {
        const auto v = param_to_host(reg, i);
        history[i].insert(history[i].end(), v.begin(), v.end());
      }
    }
    h5::File out = h5::File::create(argv[2]);
    out.attr_str("/", "optimizer", opt->name());
    for (int i = 0; i < reg.size(); ++i) {
      const ParamInfo& p = reg.info(i);
      std::vector<int64_t> shape = {steps};
      shape.insert(shape.end(), p.shape.begin(), p.shape.end());
      out.write_f32("/params/" + p.name, history[i].data(), shape);
      for (const auto& st : opt->state_to_host(i)) {
        out.write_f32("/state/" + p.name + "/" + st.first, st.second.data(), p.shape);
      }
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "optim_runner: %s\n", e.what());
    return e.exit_code();
  }
  return 0;
}
