#include "apps/cli/commands.hpp"
#include "apps/train/app_model.hpp"

#include <cerrno>
#include <exception>
#include <optional>

#include "core/errors.hpp"
#include "core/files.hpp"
#include "io/peft.hpp"
#include "parallel/agree.hpp"

namespace kktrain {

Config load_app_config(const ParsedArgs& args, const AppContext& ctx, int world_size) {
  LoadOptions opts;
  opts.world_size = world_size > 0 ? world_size : ctx.mpi->size();
  opts.checkpoint_dtype = model_file_dtype;
  opts.model_file_architecture = model_file_architecture;
  opts.peft_adapter = read_peft_adapter_settings;  // a peft section of only init_from
  return load_config(args.positionals.at(0), args.overrides, opts);
}

namespace {

// The first key (in `a`'s order) whose value differs between two resolved configs, as
// "KEY: A vs B", or "" when they are the same.
std::string first_difference(const YAML::Node& a, const YAML::Node& b, const std::string& path) {
  auto text = [](const YAML::Node& n) {
    if (!n.IsDefined()) return std::string("(absent)");
    YAML::Emitter e;
    e << YAML::Flow << n;
    return std::string(e.c_str());
  };
  if (a.IsMap() && b.IsMap()) {
    for (const auto& kv : a) {
      const std::string k = kv.first.Scalar();
      const std::string d = first_difference(kv.second, b[k], path.empty() ? k : path + "." + k);
      if (!d.empty()) return d;
    }
    for (const auto& kv : b) {
      const std::string k = kv.first.Scalar();
      if (!a[k].IsDefined())
        return (path.empty() ? k : path + "." + k) + ": (absent) vs " + text(kv.second);
    }
    return "";
  }
  const std::string ta = text(a), tb = text(b);
  return ta == tb ? "" : path + ": " + ta + " vs " + tb;
}

}  // namespace

Config load_agreed_config(const ParsedArgs& args, const AppContext& ctx, Communicator& comm) {
  std::optional<Config> cfg;
  std::exception_ptr error;
  try {
    cfg.emplace(load_app_config(args, ctx));
  } catch (...) {
    error = std::current_exception();
  }
  if (comm.size() == 1) {
    if (error) std::rethrow_exception(error);
    return std::move(*cfg);
  }
  const uint64_t failed = comm.allreduce_sum_u64(error ? 1 : 0);
  if (failed == static_cast<uint64_t>(comm.size())) std::rethrow_exception(error);
  if (failed > 0) agree_on_errors(comm, error);  // throws on every rank
  const std::string mine = to_yaml(*cfg);
  std::string first = mine;
  comm.broadcast_host(first, 0);
  collectively(comm, [&] {
    if (first == mine) return;
    const std::string diff = first_difference(YAML::Load(mine), YAML::Load(first), std::string());
    throw UsageError("ranks started with different configurations: rank " +
                     std::to_string(comm.rank()) + " and rank 0 resolve " +
                     (diff.empty() ? std::string("different values") : diff) +
                     " (every rank of a job must run the same config file and overrides)");
  });
  return std::move(*cfg);
}

}  // namespace kktrain
